//! The Reference backend of `sparse_paged_attention`, composed from candle tensor ops in f32,
//! one batch row at a time: one `index_select` of the row's valid cache slots (host-computed
//! from the validated table), a matmul over the heads, a softmax along the last dim (max / sub
//! / exp / sum), a matmul.
//!
//! Only the slots of valid entries are read: an invalid entry (-1, or past `topk_length`) is
//! dropped before the gather, so NaN or inf stored in a slot the op must not read cannot reach
//! `out` or `lse`. A row with no valid entry gives `out = 0`, `lse = +inf` without arithmetic.
//!
//! Non-finite data (docs/ops.md, "Non-finite data"): NaN or ±inf in a value a row reads (its q,
//! a gathered cache row) makes some of its scores non-finite, and then the row's `out` and `lse`
//! are NaN. The softmax alone would not always say so (a score of -inf is a weight of 0), so
//! each row adds `sum_j 0 * s_j` (0, or NaN when a score is not finite) to both.

use super::SparseCall;
use crate::error::OpError;
use candle_core::{DType, Tensor, D};

/// `(out [B, H, v_dim]` in q's dtype, `lse [B, H]` f32`)`.
pub(crate) fn sparse_paged_attention(
    q: &Tensor,
    kv_cache: &Tensor,
    call: &SparseCall,
) -> Result<(Tensor, Tensor), OpError> {
    let dev = q.device();
    let v = &call.shape;
    let (h, topk) = (v.heads, call.topk_width);
    let rows = kv_cache.reshape((kv_cache.dim(0)? * v.block_size, v.dqk))?;
    let qf = q.to_dtype(DType::F32)?; // [B, H, Dqk]
    let sink = match &call.sink {
        Some(s) => Some(Tensor::from_slice(s, h, dev)?),
        None => None,
    };
    let mut outs = Vec::with_capacity(v.batch);
    let mut lses = Vec::with_capacity(v.batch);
    for b in 0..v.batch {
        let row = call.slots.get(b * topk..(b + 1) * topk).unwrap_or(&[]);
        let slots: Vec<i64> = row.iter().copied().filter(|&s| s >= 0).collect();
        if slots.is_empty() {
            outs.push(Tensor::zeros((h, v.v_dim), DType::F32, dev)?);
            lses.push(Tensor::full(f32::INFINITY, h, dev)?);
            continue;
        }
        let n = slots.len();
        let ids = Tensor::from_vec(slots, n, dev)?;
        let k = rows.index_select(&ids, 0)?.to_dtype(DType::F32)?; // [n, Dqk]
        let s = (qf.get(b)?.matmul(&k.t()?)? * f64::from(call.scale))?; // [H, n]
        let poison = s.affine(0.0, 0.0)?.sum_keepdim(D::Minus1)?; // [H, 1]: 0 or NaN
        let m = s.max_keepdim(D::Minus1)?;
        let e = s.broadcast_sub(&m)?.exp()?;
        let sum = e.sum_keepdim(D::Minus1)?; // [H, 1]
        let p = e.broadcast_div(&sum)?;
        let mut out = p
            .matmul(&k.narrow(1, 0, v.v_dim)?)?
            .broadcast_add(&poison)?; // [H, v_dim]
        let lse = (m + sum.log()? + poison)?.squeeze(D::Minus1)?; // [H]
        if let Some(sink) = &sink {
            // out *= 1 / (1 + exp(sink - lse)).
            let f = (sink.sub(&lse)?.exp()? + 1.0)?.recip()?;
            out = out.broadcast_mul(&f.unsqueeze(1)?)?;
        }
        outs.push(out);
        lses.push(lse);
    }
    let out = Tensor::stack(&outs, 0)?.to_dtype(q.dtype())?;
    Ok((out, Tensor::stack(&lses, 0)?))
}
