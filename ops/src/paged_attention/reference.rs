//! The Reference backend of `paged_attention`, composed from candle tensor ops in f32, one
//! sequence at a time (measured faster than one padded batch: each sequence's gathered K and V
//! stay in cache between the gather and the two matmuls, and no sequence pays for the longest
//! context): one `index_select` of the sequence's context rows of each KV head (host-computed,
//! head-major, so no transpose copy), a batched matmul over the KV heads, a softmax along the
//! last dim, a batched matmul.
//!
//! Only the `context_lens[b]` slots a sequence owns are ever read: no padding slot, and no slot
//! past the context, reaches the arithmetic (so NaN or inf stored there cannot reach `out`).
//!
//! Non-finite data (docs/ops.md, "Non-finite data"): NaN or ±inf in a head's q or in a K row it
//! reads makes the head's whole `out` row NaN (each head adds `sum_j 0 * s_j`, 0 or NaN, as the
//! softmax alone would let a score of -inf through as a weight of 0); NaN or ±inf in a V value
//! it reads makes the output elements of that column NaN (`o + 0 * o`).

use super::PagedCall;
use crate::error::OpError;
use candle_core::{DType, Tensor, D};

/// `out [B, H, D]` in q's dtype.
pub(crate) fn paged_attention(
    q: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
    call: &PagedCall,
) -> Result<Tensor, OpError> {
    let dev = q.device();
    let v = &call.shape;
    let (h, hkv, d) = (v.heads, v.kv_heads, v.head_dim);
    let group = h / hkv;
    // Each cache row of one KV head, `[num_slots * Hkv, D]`: row `slot * Hkv + kh`.
    let nrows = k_cache.dim(0)? * v.block_size * hkv;
    let k_rows = k_cache.reshape((nrows, d))?;
    let v_rows = v_cache.reshape((nrows, d))?;
    let qf = q.to_dtype(DType::F32)?;
    let mut outs = Vec::with_capacity(v.batch);
    for (b, slots) in call.slots.iter().enumerate() {
        let len = slots.len();
        let rows: Vec<i64> = (0..hkv as i64)
            .flat_map(|kh| slots.iter().map(move |&s| s * hkv as i64 + kh))
            .collect();
        let rows = Tensor::from_vec(rows, hkv * len, dev)?;
        let gather = |c: &Tensor| -> Result<Tensor, OpError> {
            Ok(c.index_select(&rows, 0)?
                .reshape((hkv, len, d))?
                .to_dtype(DType::F32)?) // [Hkv, L, D]
        };
        let k = gather(&k_rows)?;
        let vv = gather(&v_rows)?;
        let qb = qf.get(b)?.reshape((hkv, group, d))?;
        let s = (qb.matmul(&k.t()?)? * f64::from(call.scale))?; // [Hkv, G, L]
        let poison = s.affine(0.0, 0.0)?.sum_keepdim(D::Minus1)?; // [Hkv, G, 1]: 0 or NaN
        let m = s.max_keepdim(D::Minus1)?;
        let e = s.broadcast_sub(&m)?.exp()?;
        let p = e.broadcast_div(&e.sum_keepdim(D::Minus1)?)?;
        let o = p.matmul(&vv)?; // [Hkv, G, D]
        let o = (&o + o.affine(0.0, 0.0)?.broadcast_add(&poison)?)?;
        outs.push(o.reshape((h, d))?);
    }
    Ok(Tensor::stack(&outs, 0)?.to_dtype(q.dtype())?)
}
