//! The Reference backend of `paged_attention`, composed from candle tensor ops in f32: one
//! `index_select` over physical slots (host-computed from the validated table), a batched
//! matmul per KV-head group, a softmax along the last dim with positions past the context
//! masked to -inf, a batched matmul.

use super::Validated;
use crate::error::OpError;
use candle_core::{DType, Tensor, D};

/// `out [B, H, D]` in q's dtype.
pub(crate) fn paged_attention(
    q: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
    v: &Validated,
) -> Result<Tensor, OpError> {
    let dev = q.device();
    let (b, h, hkv, d) = (v.batch, v.heads, v.kv_heads, v.head_dim);
    let group = h / hkv;
    let len = v.slots.iter().map(Vec::len).max().unwrap_or(1);
    // Positions past a sequence's context read slot 0 and get a -inf bias.
    let mut slots = Vec::with_capacity(b * len);
    let mut bias = Vec::with_capacity(b * len);
    for row in &v.slots {
        for t in 0..len {
            slots.push(row.get(t).copied().unwrap_or(0));
            bias.push(if t < row.len() {
                0.0f32
            } else {
                f32::NEG_INFINITY
            });
        }
    }
    let slots = Tensor::from_vec(slots, b * len, dev)?;
    let bias = Tensor::from_vec(bias, (b, 1, 1, len), dev)?;

    let nslots = k_cache.dim(0)? * v.block_size;
    let gather = |cache: &Tensor| -> Result<Tensor, OpError> {
        Ok(cache
            .reshape((nslots, hkv * d))?
            .index_select(&slots, 0)?
            .reshape((b, len, hkv, d))?
            .to_dtype(DType::F32)?
            .transpose(1, 2)?
            .contiguous()?) // [B, Hkv, L, D]
    };
    let k = gather(k_cache)?;
    let vv = gather(v_cache)?;
    let qf = q.to_dtype(DType::F32)?.reshape((b, hkv, group, d))?;
    let s = (qf.matmul(&k.t()?)? * f64::from(v.scale))?.broadcast_add(&bias)?; // [B, Hkv, G, L]
    let m = s.max_keepdim(D::Minus1)?;
    let e = s.broadcast_sub(&m)?.exp()?;
    let p = e.broadcast_div(&e.sum_keepdim(D::Minus1)?)?;
    let out = p.matmul(&vv)?.reshape((b, h, d))?;
    Ok(out.to_dtype(q.dtype())?)
}
