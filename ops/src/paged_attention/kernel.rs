//! The dense paged-attention kernels in the tile DSL, and the host code that launches them.
//!
//! CONTRACT (the op layer in `mod.rs` calls exactly this): `run` receives validated inputs.

use crate::error::OpError;
use crate::runtime::Runner;
use crate::templates::attention::{run_attention, AttnCfg, AttnInputs};
use tile_backend::ir::DType;
use tile_backend::launch::{GmInput, GmTensor};

const OP: &str = "paged_attention";

/// One validated dense paged-attention call, in the simulator's host form.
#[derive(Debug, Clone)]
pub struct PagedProblem<'a> {
    /// Queries `[B, H, D]`, f32/f16/bf16 (borrowed: [`GmTensor::as_input`]).
    pub q: GmInput<'a>,
    /// Key cache `[num_blocks, block_size, Hkv, D]`, q's dtype (borrowed).
    pub k_cache: GmInput<'a>,
    /// Value cache `[num_blocks, block_size, Hkv, D]`, q's dtype (borrowed).
    pub v_cache: GmInput<'a>,
    /// `[B, max_blocks]` block table; the first `ceil(context_len / block_size)` entries of each
    /// row are in `0..num_blocks` (checked); the rest may hold anything.
    pub block_table: Vec<i64>,
    /// Columns of the block table.
    pub max_blocks: usize,
    /// Tokens of context per sequence, each in `1..=max_blocks * block_size` (checked; a zero
    /// length is rejected by the op layer).
    pub context_lens: Vec<i64>,
    /// Tokens per cache block.
    pub block_size: usize,
    /// KV heads (`H % Hkv == 0`).
    pub num_kv_heads: usize,
    /// Softmax scale.
    pub scale: f32,
}

/// Most query heads one KV head may serve: a GQA group is one head tile of the template.
pub(crate) const MAX_GROUP: usize = 128;

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

/// The split kernel's static shape for `heads` query heads over `kv_heads` KV heads of
/// `head_dim` columns, a `block_size`-token cache of `dtype`: one head tile per KV head (its
/// `H / Hkv` query heads), K and V gathered from their caches viewed as `[num_blocks *
/// block_size, Hkv * D]` at column `kv_head * D`. `kv_heads` must divide `heads` (see
/// [`head_group`]). [`run`] and [`crate::kernels::paged_attention`] both build their kernels
/// from it.
pub(crate) fn attn_cfg(
    dtype: DType,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    block_size: usize,
    double_buffer: bool,
) -> AttnCfg {
    let kv_heads = kv_heads.max(1);
    AttnCfg::new(
        "paged_attn",
        dtype,
        heads as u64,
        (heads / kv_heads) as u64,
        head_dim as u64,
        head_dim as u64,
        (kv_heads * head_dim) as u64,
        head_dim as u64,
        true,
        block_size as u64,
        double_buffer,
    )
}

/// Runs dense paged attention: returns `out [B, H, D]` in q's dtype.
///
/// The sparse kernel template with host-generated indices `0..context_len` per sequence: one
/// head tile per KV head (its `H / Hkv` query heads), K and V gathered from their caches viewed
/// as `[num_blocks * block_size, Hkv * D]` at column `kv_head * D`.
pub fn run(runner: &mut Runner, p: &PagedProblem<'_>) -> Result<GmTensor, OpError> {
    let (b, h, d) = match p.q.shape[..] {
        [b, h, d] => (b, h, d),
        _ => return Err(OpError::invalid(OP, "q", "must be [B, H, D]")),
    };
    let (nblk, bs) = match p.k_cache.shape[..] {
        [n, bs, _, _] => (n, bs),
        _ => {
            return Err(OpError::invalid(
                OP,
                "k_cache",
                "must be [num_blocks, block_size, Hkv, D]",
            ))
        }
    };
    let hkv = p.num_kv_heads;
    head_group(h, hkv).map_err(|rule| OpError::invalid(OP, "num_kv_heads", rule))?;
    let topk = p.context_lens.iter().copied().max().unwrap_or(0).max(0) as usize;
    let mut indices = Vec::with_capacity(b * topk);
    for _ in 0..b {
        indices.extend(0..topk as i64);
    }
    let counts: Vec<i64> = p
        .context_lens
        .iter()
        .map(|&c| c.clamp(0, topk as i64))
        .collect();
    let cfg = attn_cfg(p.q.dtype, h, hkv, d, bs, runner.pipes_overlap());
    let mut q = p.q.clone();
    q.shape = vec![b * h, d];
    let mut k = p.k_cache.clone();
    k.shape = vec![nblk * bs, hkv * d];
    let mut v = p.v_cache.clone();
    v.shape = vec![nblk * bs, hkv * d];
    let (mut out, _lse) = run_attention(
        runner,
        OP,
        &cfg,
        AttnInputs {
            q,
            kv: k,
            v: Some(v),
            indices,
            topk,
            counts,
            block_table: &p.block_table,
            max_blocks: p.max_blocks,
            batch: b,
            scale: p.scale,
            sink: None,
        },
    )?;
    out.shape = vec![b, h, d];
    Ok(out)
}
