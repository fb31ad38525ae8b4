//! The Reference backend of `sparse_paged_attention`, composed from candle tensor ops in f32:
//! one `index_select` over physical slots (computed on the host from the validated table), a
//! batched matmul, a softmax along the last dim (max / sub / exp / sum), a batched matmul.

use super::Validated;
use crate::error::OpError;
use candle_core::{DType, Tensor, D};

/// `(out [B, H, v_dim]` in q's dtype, `lse [B, H]` f32`)`.
pub(crate) fn sparse_paged_attention(
    q: &Tensor,
    kv_cache: &Tensor,
    v: &Validated,
) -> Result<(Tensor, Tensor), OpError> {
    let dev = q.device();
    let (b, h, topk) = (v.batch, v.heads, v.topk);
    // Invalid entries read slot 0 and are masked by a -inf bias. A row with no valid entry is
    // left unmasked (finite arithmetic) and forced to out 0, lse +inf at the end.
    let mut slots = Vec::with_capacity(b * topk);
    let mut bias = Vec::with_capacity(b * topk);
    let mut empty = vec![0u8; b];
    for (r, row) in v.slots.chunks_exact(topk).enumerate() {
        let any = row.iter().any(|&s| s >= 0);
        empty[r] = u8::from(!any);
        for &s in row {
            slots.push(s.max(0));
            bias.push(if s >= 0 || !any {
                0.0f32
            } else {
                f32::NEG_INFINITY
            });
        }
    }
    let slots = Tensor::from_vec(slots, b * topk, dev)?;
    let bias = Tensor::from_vec(bias, (b, 1, topk), dev)?;

    let rows = kv_cache.reshape((kv_cache.dim(0)? * v.block_size, v.dqk))?;
    let k = rows
        .index_select(&slots, 0)?
        .reshape((b, topk, v.dqk))?
        .to_dtype(DType::F32)?; // [B, topk, Dqk]
    let qf = q.to_dtype(DType::F32)?; // [B, H, Dqk]
    let s = (qf.matmul(&k.t()?)? * f64::from(v.scale))?.broadcast_add(&bias)?; // [B, H, topk]
    let m = s.max_keepdim(D::Minus1)?;
    let e = s.broadcast_sub(&m)?.exp()?;
    let sum = e.sum_keepdim(D::Minus1)?; // [B, H, 1]
    let p = e.broadcast_div(&sum)?;
    let vv = k.narrow(2, 0, v.v_dim)?;
    let mut out = p.matmul(&vv)?; // [B, H, v_dim]
    let mut lse = (m + sum.log()?)?.squeeze(D::Minus1)?; // [B, H]

    if empty.iter().any(|&x| x != 0) {
        let mask = Tensor::from_vec(empty, (b, 1), dev)?.broadcast_as((b, h))?;
        let inf = Tensor::full(f32::INFINITY, (b, h), dev)?;
        lse = mask.where_cond(&inf, &lse)?;
        let zero = mask.unsqueeze(2)?.broadcast_as((b, h, v.v_dim))?;
        out = zero.where_cond(&out.zeros_like()?, &out)?;
    }
    if let Some(sink) = &v.sink {
        let sink = Tensor::from_slice(sink, (1, h), dev)?;
        // out *= 1 / (1 + exp(sink - lse)); lse = +inf gives a factor of 1.
        let f = (sink.broadcast_sub(&lse)?.exp()? + 1.0)?.recip()?;
        out = out.broadcast_mul(&f.unsqueeze(2)?)?;
    }
    Ok((out.to_dtype(q.dtype())?, lse))
}
