//! The Reference backend of the flash-attention ops, composed from candle tensor ops in f32:
//! GQA by viewing q as `[B, Hkv, G * Sq, D]` (no K/V copies), one batched matmul for the
//! scores, a `[Sq, Skv]` causal mask broadcast over every head (hidden scores overwritten with
//! -inf), a softmax along the keys (max / sub / exp / sum), one batched matmul with V, and the
//! non-finite terms of docs/ops.md. The varlen form runs the dense one per sequence.

use super::{FlashAttentionShape, FlashCall, Seqs, LSE_DTYPE};
use crate::error::OpError;
use candle_core::{DType, Device, Tensor, D};

/// `(out [B, H, Sq, Dv]` in q's dtype, `lse [B, H, Sq]` f32`)` for `q`, `k`, `v` of `shape`.
pub(crate) fn dense(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    shape: &FlashAttentionShape,
    scale: f32,
) -> Result<(Tensor, Tensor), OpError> {
    let (p, dev) = (shape, q.device());
    let (b, h, hkv, sq, skv) = (p.batch, p.heads, p.kv_heads, p.seq_q, p.seq_kv);
    let g = h / hkv;
    // Rows that see no key: every row when Skv = 0, the first Sq - Skv rows when causal.
    let blind = if skv == 0 {
        sq
    } else if p.causal {
        sq.saturating_sub(skv)
    } else {
        0
    };
    if blind == sq {
        let out = Tensor::zeros((b, h, sq, p.v_dim), q.dtype(), dev)?;
        let lse = Tensor::full(f32::INFINITY, (b, h, sq), dev)?;
        return Ok((out, lse));
    }
    let qf = q
        .to_dtype(DType::F32)?
        .contiguous()?
        .reshape((b, hkv, g * sq, p.head_dim))?;
    let kf = k.to_dtype(DType::F32)?;
    let vf = v.to_dtype(DType::F32)?;
    let mut s = (qf.matmul(&kf.t()?)? * f64::from(scale))?; // [B, Hkv, G*Sq, Skv]
                                                            // Non-finite data (docs/ops.md): z = sum_j 0 * s_j over the scores a row sees, 0 or NaN.
    let shape = (b, hkv, g, sq, skv);
    let seen = if p.causal {
        Some(causal_mask(sq, skv, blind, dev)?.broadcast_as(shape)?) // [Sq, Skv]
    } else {
        None
    };
    let z = if let Some(seen) = &seen {
        let s5 = s.reshape(shape)?;
        let zero = s5.zeros_like()?;
        let z = (seen.where_cond(&s5, &zero)? * 0.0)?.sum_keepdim(D::Minus1)?;
        // A hidden key's score is overwritten, whatever it holds.
        let hidden = Tensor::full(f32::NEG_INFINITY, shape, dev)?;
        s = seen
            .where_cond(&s5, &hidden)?
            .reshape((b, hkv, g * sq, skv))?;
        z.reshape((b, hkv, g * sq, 1))?
    } else {
        (&s * 0.0)?.sum_keepdim(D::Minus1)?
    };
    let m = s.max_keepdim(D::Minus1)?;
    let e = s.broadcast_sub(&m)?.exp()?;
    let sum = e.sum_keepdim(D::Minus1)?;
    let pr = e.broadcast_div(&sum)?;
    let o = pv(&pr, &vf, seen.as_ref(), shape)?.broadcast_add(&z)?;
    // o += 0 * o: ±inf from a V value turns NaN like a NaN one.
    let mut out = (&o + (&o * 0.0)?)?.reshape((b, h, sq, p.v_dim))?;
    let mut lse = (m + sum.log()? + z)?.reshape((b, h, sq))?;
    if blind > 0 {
        let rows: Vec<u8> = (0..sq).map(|i| u8::from(i < blind)).collect();
        let mask = Tensor::from_vec(rows, sq, dev)?;
        let inf = Tensor::full(f32::INFINITY, (b, h, sq), dev)?;
        lse = mask.broadcast_as((b, h, sq))?.where_cond(&inf, &lse)?;
        let zero = mask.reshape((sq, 1))?.broadcast_as((b, h, sq, p.v_dim))?;
        out = zero.where_cond(&out.zeros_like()?, &out)?;
    }
    Ok((out.to_dtype(q.dtype())?, lse))
}

/// `P V`, where a non-finite V value reaches only the output columns of the queries that see
/// its key (docs/ops.md): a hidden key's weight of 0 times it would be NaN, so such values are
/// read as 0 and the elements of queries that see one are set to NaN afterwards. `seen` is the
/// causal mask broadcast to `shape` (None: every query sees every key).
fn pv(
    pr: &Tensor,
    vf: &Tensor,
    seen: Option<&Tensor>,
    shape: (usize, usize, usize, usize, usize),
) -> Result<Tensor, OpError> {
    let bad = (vf * 0.0)?.ne(&vf.zeros_like()?)?; // 0 * inf, 0 * NaN: NaN != 0
    if bad.to_dtype(DType::F32)?.sum_all()?.to_scalar::<f32>()? == 0.0 {
        return Ok(pr.matmul(vf)?);
    }
    let (b, hkv, g, sq, skv) = shape;
    let clean = bad.where_cond(&vf.zeros_like()?, vf)?;
    let seen = match seen {
        Some(m) => m.to_dtype(DType::F32)?.reshape((b, hkv, g * sq, skv))?,
        None => pr.ones_like()?,
    };
    let hits = seen.matmul(&bad.to_dtype(DType::F32)?.contiguous()?)?;
    let nan = Tensor::full(f32::NAN, hits.shape(), pr.device())?;
    Ok(hits.gt(0.0)?.where_cond(&nan, &pr.matmul(&clean)?)?)
}

/// The bottom-right causal mask: 1 where query `i` sees key `j` (`j <= i + Skv - Sq`), 0
/// elsewhere; the first `blind` rows (which see nothing) are left at 1 so their arithmetic has
/// keys, and are overwritten afterwards.
fn causal_mask(sq: usize, skv: usize, blind: usize, dev: &Device) -> Result<Tensor, OpError> {
    let shift = skv as i64 - sq as i64;
    let mut mask = vec![1u8; sq * skv];
    for (i, row) in mask.chunks_exact_mut(skv).enumerate().skip(blind) {
        let last = i as i64 + shift; // the last visible key, >= 0 past the blind rows
        for x in row.iter_mut().skip((last + 1).max(0) as usize) {
            *x = 0;
        }
    }
    Ok(Tensor::from_vec(mask, (sq, skv), dev)?)
}

/// `(out [total_q, H, Dv]`, `lse [total_q, H]` f32`)`: the dense form per sequence.
pub(crate) fn varlen(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    call: &FlashCall,
) -> Result<(Tensor, Tensor), OpError> {
    let dev = q.device();
    let p = &call.shape;
    let Seqs::Packed { cu_q, cu_k } = &call.seqs else {
        // A dense call is one sequence per batch row already.
        return dense(q, k, v, p, call.scale);
    };
    let total_q = cu_q.last().copied().unwrap_or(0);
    let mut outs = Vec::new();
    let mut lses = Vec::new();
    for (wq, wk) in cu_q.windows(2).zip(cu_k.windows(2)) {
        let (lq, lk) = (wq[1] - wq[0], wk[1] - wk[0]);
        if lq == 0 {
            continue;
        }
        // [len, H, D] -> [1, H, len, D]
        let view = |t: &Tensor, start: usize, len: usize| -> Result<Tensor, OpError> {
            Ok(t.narrow(0, start, len)?.transpose(0, 1)?.unsqueeze(0)?)
        };
        let one = FlashAttentionShape {
            batch: 1,
            seq_q: lq,
            seq_kv: lk,
            ..**p
        };
        let (o, l) = dense(
            &view(q, wq[0], lq)?,
            &view(k, wk[0], lk)?,
            &view(v, wk[0], lk)?,
            &one,
            call.scale,
        )?;
        outs.push(o.squeeze(0)?.transpose(0, 1)?); // [lq, H, Dv]
        lses.push(l.squeeze(0)?.transpose(0, 1)?); // [lq, H]
    }
    if outs.is_empty() {
        return Ok((
            Tensor::zeros((total_q, p.heads, p.v_dim), q.dtype(), dev)?,
            Tensor::zeros((total_q, p.heads), LSE_DTYPE, dev)?,
        ));
    }
    Ok((
        Tensor::cat(&outs, 0)?.contiguous()?,
        Tensor::cat(&lses, 0)?.contiguous()?,
    ))
}

/// `softmax(scale * q k^T)` along N in f32, returned in q's dtype.
pub(crate) fn qk_softmax(q: &Tensor, k: &Tensor, scale: f32) -> Result<Tensor, OpError> {
    let qf = q.to_dtype(DType::F32)?;
    let kf = k.to_dtype(DType::F32)?;
    let s = (qf.matmul(&kf.t()?)? * f64::from(scale))?;
    let m = s.max_keepdim(D::Minus1)?;
    let e = s.broadcast_sub(&m)?.exp()?;
    // Non-finite data (docs/ops.md): + sum_j 0 * s_j, 0 or NaN per row.
    let z = (&s * 0.0)?.sum_keepdim(D::Minus1)?;
    let p = e
        .broadcast_div(&e.sum_keepdim(D::Minus1)?)?
        .broadcast_add(&z)?;
    Ok(p.to_dtype(q.dtype())?)
}
