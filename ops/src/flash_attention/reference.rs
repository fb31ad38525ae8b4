//! The Reference backend of the flash-attention ops, composed from candle tensor ops in f32:
//! GQA by viewing q as `[B, Hkv, G * Sq, D]` (no K/V copies), one batched matmul for the
//! scores, an additive `[Sq, Skv]` causal bias broadcast over every head, a softmax along the
//! keys (max / sub / exp / sum), one batched matmul with V. The varlen form runs the dense one
//! per sequence.

use super::{Dense, Varlen, LSE_DTYPE};
use crate::error::OpError;
use candle_core::{DType, Device, Tensor, D};

/// `(out [B, H, Sq, Dv]` in q's dtype, `lse [B, H, Sq]` f32`)`.
pub(crate) fn dense(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    p: &Dense,
) -> Result<(Tensor, Tensor), OpError> {
    let dev = q.device();
    let (b, h, hkv, sq, skv) = (p.batch, p.heads, p.kv_heads, p.sq, p.skv);
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
        let out = Tensor::zeros((b, h, sq, p.dv), q.dtype(), dev)?;
        let lse = Tensor::full(f32::INFINITY, (b, h, sq), dev)?;
        return Ok((out, lse));
    }
    let qf = q
        .to_dtype(DType::F32)?
        .contiguous()?
        .reshape((b, hkv, g * sq, p.d))?;
    let kf = k.to_dtype(DType::F32)?;
    let vf = v.to_dtype(DType::F32)?;
    let mut s = (qf.matmul(&kf.t()?)? * f64::from(p.scale))?; // [B, Hkv, G*Sq, Skv]
    if p.causal {
        let bias = causal_bias(sq, skv, blind, dev)?; // [Sq, Skv]
        s = s
            .reshape((b, hkv, g, sq, skv))?
            .broadcast_add(&bias)?
            .reshape((b, hkv, g * sq, skv))?;
    }
    let m = s.max_keepdim(D::Minus1)?;
    let e = s.broadcast_sub(&m)?.exp()?;
    let sum = e.sum_keepdim(D::Minus1)?;
    let pr = e.broadcast_div(&sum)?;
    let mut out = pr.matmul(&vf)?.reshape((b, h, sq, p.dv))?;
    let mut lse = (m + sum.log()?)?.reshape((b, h, sq))?;
    if blind > 0 {
        let rows: Vec<u8> = (0..sq).map(|i| u8::from(i < blind)).collect();
        let mask = Tensor::from_vec(rows, sq, dev)?;
        let inf = Tensor::full(f32::INFINITY, (b, h, sq), dev)?;
        lse = mask.broadcast_as((b, h, sq))?.where_cond(&inf, &lse)?;
        let zero = mask.reshape((sq, 1))?.broadcast_as((b, h, sq, p.dv))?;
        out = zero.where_cond(&out.zeros_like()?, &out)?;
    }
    Ok((out.to_dtype(q.dtype())?, lse))
}

/// The bottom-right causal bias: 0 where query `i` sees key `j` (`j <= i + Skv - Sq`), -inf
/// elsewhere; the first `blind` rows (which see nothing) are left at 0 so their arithmetic stays
/// finite, and are overwritten afterwards.
fn causal_bias(sq: usize, skv: usize, blind: usize, dev: &Device) -> Result<Tensor, OpError> {
    let shift = skv as i64 - sq as i64;
    let mut bias = vec![0f32; sq * skv];
    for (i, row) in bias.chunks_exact_mut(skv).enumerate().skip(blind) {
        let last = i as i64 + shift; // the last visible key, >= 0 past the blind rows
        for x in row.iter_mut().skip((last + 1).max(0) as usize) {
            *x = f32::NEG_INFINITY;
        }
    }
    Ok(Tensor::from_vec(bias, (sq, skv), dev)?)
}

/// `(out [total_q, H, Dv]`, `lse [total_q, H]` f32`)`: the dense form per sequence.
pub(crate) fn varlen(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    p: &Varlen,
) -> Result<(Tensor, Tensor), OpError> {
    let dev = q.device();
    let d = q.dim(2)?;
    let mut outs = Vec::new();
    let mut lses = Vec::new();
    for (wq, wk) in p.cu_q.windows(2).zip(p.cu_k.windows(2)) {
        let (lq, lk) = (wq[1] - wq[0], wk[1] - wk[0]);
        if lq == 0 {
            continue;
        }
        // [len, H, D] -> [1, H, len, D]
        let view = |t: &Tensor, start: usize, len: usize| -> Result<Tensor, OpError> {
            Ok(t.narrow(0, start, len)?.transpose(0, 1)?.unsqueeze(0)?)
        };
        let dense_p = Dense {
            batch: 1,
            heads: p.heads,
            kv_heads: p.kv_heads,
            sq: lq,
            skv: lk,
            d,
            dv: p.dv,
            scale: p.scale,
            causal: p.causal,
        };
        let (o, l) = dense(
            &view(q, wq[0], lq)?,
            &view(k, wk[0], lk)?,
            &view(v, wk[0], lk)?,
            &dense_p,
        )?;
        outs.push(o.squeeze(0)?.transpose(0, 1)?); // [lq, H, Dv]
        lses.push(l.squeeze(0)?.transpose(0, 1)?); // [lq, H]
    }
    if outs.is_empty() {
        return Ok((
            Tensor::zeros((p.total_q, p.heads, p.dv), q.dtype(), dev)?,
            Tensor::zeros((p.total_q, p.heads), LSE_DTYPE, dev)?,
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
    let p = e.broadcast_div(&e.sum_keepdim(D::Minus1)?)?;
    Ok(p.to_dtype(q.dtype())?)
}
