//! The dense paged-attention kernels in the tile DSL, and the host code that launches them.
//!
//! CONTRACT (the op layer in `mod.rs` calls exactly this): [`run`] receives a validated
//! [`PagedCall`] and the storage it describes; `plan` is the call's one launch plan, which
//! [`run`] and `tileops emit` ([`crate::registry::launches`]) both launch from.

use super::{PagedAttentionShape, PagedCall};
use crate::bridge;
use crate::error::OpError;
use crate::registry::Checked;
use crate::runtime::{PlanTarget, Runner};
use crate::templates::attention::{
    self, run_attention, AttnCfg, AttnInputs, AttnPlan, AttnSpec, Values,
};
use tile_backend::launch::{GmInput, GmTensor};

const OP: &str = "paged_attention";

use crate::limits::MAX_KV_GROUP as MAX_GROUP;

/// Query heads per KV head (`H / Hkv`), or the broken rule: `Hkv` must divide `H`, with at most
/// [`MAX_GROUP`] query heads per KV head.
pub(crate) fn head_group(heads: usize, kv_heads: usize) -> Result<usize, String> {
    match heads.checked_div(kv_heads) {
        Some(group) if group > 0 && group * kv_heads == heads && group <= MAX_GROUP => Ok(group),
        _ => Err(format!(
            "H = {heads} must be a multiple of Hkv = {kv_heads} with at most {MAX_GROUP} query heads per KV head"
        )),
    }
}

/// The launch plan of a call of `shape` on `target`: the split kernel's static shape (one head
/// tile per KV head, its `H / Hkv` query heads; K and V gathered from their caches viewed as
/// `[num_blocks * block_size, Hkv * D]` at column `kv_head * D`), its grid for `context_len`
/// tokens in the longest context, and the merge. `kv_heads` must divide `heads` (see
/// [`head_group`]).
pub(crate) fn plan(shape: &Checked<PagedAttentionShape>, target: PlanTarget) -> AttnPlan {
    let s = shape;
    let kv_heads = s.kv_heads.max(1);
    let cfg = AttnCfg::new(AttnSpec {
        name: "paged_attn",
        dtype: s.dtype,
        heads: s.heads as u64,
        hg: (s.heads / kv_heads) as u64,
        dqk: s.head_dim as u64,
        v_dim: s.head_dim as u64,
        kv_cols: (kv_heads * s.head_dim) as u64,
        head_col_stride: s.head_dim as u64,
        values: Values::OwnCache,
        block_size: s.block_size as u64,
        tokens: s.context_len as u64,
        double_buffer: target.pipes_overlap(),
    });
    attention::plan(cfg, s.batch, s.context_len, false, false, target)
}

/// Runs dense paged attention on `q [B, H, D]` and the caches `[num_blocks, block_size, Hkv,
/// D]` (borrowed storage, `call`'s dtype): returns `out [B, H, D]` in q's dtype.
///
/// The sparse kernel template with host-generated indices `0..context_len` per sequence, as
/// `plan` makes it for the runner's target.
///
/// # Errors
/// [`OpError::Invalid`] when `q`, `k_cache` or `v_cache` is not the storage `call` describes;
/// kernel errors.
pub fn run(
    runner: &mut Runner,
    call: &PagedCall,
    q: GmInput<'_>,
    k_cache: GmInput<'_>,
    v_cache: GmInput<'_>,
) -> Result<GmTensor, OpError> {
    let s = &call.shape;
    let (b, h, d, hkv) = (s.batch, s.heads, s.head_dim, s.kv_heads);
    let tokens = call.num_blocks * s.block_size;
    bridge::check_storage(OP, "q", (q.dtype, q.data.len()), s.dtype, b * h * d)?;
    for (arg, c) in [("k_cache", &k_cache), ("v_cache", &v_cache)] {
        bridge::check_storage(OP, arg, (c.dtype, c.data.len()), s.dtype, tokens * hkv * d)?;
    }
    let topk = s.context_len;
    let mut indices = Vec::with_capacity(b * topk);
    for _ in 0..b {
        indices.extend(0..topk as i64);
    }
    let plan = plan(s, runner.plan_target());
    let cache_shape = vec![tokens, hkv * d];
    let (mut out, _lse) = run_attention(
        runner,
        OP,
        &plan,
        AttnInputs {
            q: GmInput {
                shape: vec![b * h, d],
                ..q
            },
            kv: GmInput {
                shape: cache_shape.clone(),
                ..k_cache
            },
            v: Some(GmInput {
                shape: cache_shape,
                ..v_cache
            }),
            indices,
            topk,
            counts: call.context_lens.clone(),
            block_table: &call.block_table,
            max_blocks: call.max_blocks,
            scale: call.scale,
            sink: None,
        },
    )?;
    out.shape = vec![b, h, d];
    Ok(out)
}
