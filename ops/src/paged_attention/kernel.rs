//! The dense paged-attention kernels in the tile DSL, and the host code that launches them.
//!
//! CONTRACT (the op layer in `mod.rs` calls exactly this): `run` receives validated inputs.

use crate::error::OpError;
use crate::runtime::Runner;
use crate::sparse_attention::kernel::template::{run_attention, AttnCfg, AttnInputs};
use tile_backend::sim::{GmInput, GmTensor};

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
    let hkv = p.num_kv_heads.max(1);
    let group = h / hkv;
    if group == 0 || group * hkv != h || group > 128 {
        return Err(OpError::invalid(
            OP,
            "num_kv_heads",
            format!("H = {h} must be a multiple of Hkv = {hkv} with at most 128 query heads per KV head"),
        ));
    }
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
    let cfg = AttnCfg::new(
        "paged_attn",
        p.q.dtype,
        h as u64,
        group as u64,
        d as u64,
        d as u64,
        (hkv * d) as u64,
        d as u64,
        true,
        bs as u64,
    );
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
