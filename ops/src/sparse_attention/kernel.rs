//! The sparse top-k attention kernels in the tile DSL, and the host code that launches them.
//!
//! CONTRACT (the op layer in `mod.rs` calls exactly this): [`run`] receives a validated
//! [`SparseCall`] and the storage it describes; `plan` is the call's one launch plan, which
//! [`run`] and `tileops emit` ([`crate::registry::launches`]) both launch from.

use super::{SparseAttentionShape, SparseCall};
use crate::bridge;
use crate::error::OpError;
use crate::registry::Checked;
use crate::runtime::{PlanTarget, Runner};
use crate::templates::attention::{
    self, run_attention, AttnCfg, AttnInputs, AttnPlan, AttnSpec, Values,
};
use tile_backend::launch::{GmInput, GmTensor};

const OP: &str = "sparse_paged_attention";

/// The launch plan of a call of `shape` on `target`: the split kernel's static shape for its
/// heads (head tiles of at most 128 heads, as even as possible; the heads of a tile share each
/// gathered K tile, the latent cache having no head dimension; V is the first `v_dim` columns
/// of K), its grid for `shape.topk` valid tokens in the fullest row, and the merge.
pub(crate) fn plan(shape: &Checked<SparseAttentionShape>, target: PlanTarget) -> AttnPlan {
    let s = shape;
    let nht = s.heads.div_ceil(128).max(1);
    let cfg = AttnCfg::new(AttnSpec {
        name: "sparse_attn",
        dtype: s.dtype,
        heads: s.heads as u64,
        hg: s.heads.div_ceil(nht) as u64,
        dqk: s.dqk as u64,
        v_dim: s.v_dim as u64,
        kv_cols: s.dqk as u64,
        head_col_stride: 0,
        values: Values::KeyPrefix,
        block_size: s.block_size as u64,
        tokens: s.topk as u64,
        double_buffer: target.pipes_overlap(),
    });
    attention::plan(cfg, s.batch, s.topk, s.sink, s.batch_invariant, target)
}

/// Runs sparse attention on `q [B, H, Dqk]` and the cache `[num_blocks, block_size, Dqk]`
/// (borrowed storage, `call`'s dtype): returns `out [B, H, v_dim]` (q's dtype) and `lse [B, H]`
/// (f32, natural log, without the sink; `+inf` and out 0 for a row with no valid index).
///
/// Host side: each row's valid indices (the first `topk_length` entries that are not -1) are
/// compacted to the front (stable, duplicates kept); the tail is padded with the row's first
/// valid index. Kernels: `templates::attention::attn_split` (one block per batch row, head tile
/// of up to 128 heads and top-k split) and `attn_merge`, as `plan` makes them for the
/// runner's target.
///
/// # Errors
/// [`OpError::Invalid`] when `q` or `kv` is not the storage `call` describes; kernel errors.
pub fn run(
    runner: &mut Runner,
    call: &SparseCall,
    q: GmInput<'_>,
    kv: GmInput<'_>,
) -> Result<(GmTensor, GmTensor), OpError> {
    let s = &call.shape;
    let (b, h, dqk, topk) = (s.batch, s.heads, s.dqk, call.topk_width);
    bridge::check_storage(OP, "q", (q.dtype, q.data.len()), s.dtype, b * h * dqk)?;
    let tokens = call.num_blocks * s.block_size;
    bridge::check_storage(
        OP,
        "kv_cache",
        (kv.dtype, kv.data.len()),
        s.dtype,
        tokens * dqk,
    )?;
    let mut indices = Vec::with_capacity(b * topk);
    for row in call.indices.chunks_exact(topk.max(1)) {
        let start = indices.len();
        indices.extend(row.iter().copied().filter(|&t| t >= 0));
        let pad = indices.get(start).copied().unwrap_or(0);
        indices.resize(start + topk, pad);
    }
    let plan = plan(s, runner.plan_target());
    let (mut out, mut lse) = run_attention(
        runner,
        OP,
        &plan,
        AttnInputs {
            q: GmInput {
                shape: vec![b * h, dqk],
                ..q
            },
            kv: GmInput {
                shape: vec![tokens, dqk],
                ..kv
            },
            v: None,
            indices,
            topk,
            counts: call.counts.clone(),
            block_table: &call.block_table,
            max_blocks: call.max_blocks,
            scale: call.scale,
            sink: call.sink.as_deref(),
        },
    )?;
    out.shape = vec![b, h, s.v_dim];
    lse.shape = vec![b, h];
    Ok((out, lse))
}
