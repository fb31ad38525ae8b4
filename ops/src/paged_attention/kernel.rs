//! The dense paged-attention kernels in the tile DSL, and the host code that launches them.
//!
//! CONTRACT (the op layer in `mod.rs` calls exactly this): `run` receives validated inputs.

use crate::error::OpError;
use crate::runtime::Runner;
use tile_backend::sim::GmTensor;

/// One validated dense paged-attention call, in the simulator's host form.
#[derive(Debug, Clone)]
pub struct PagedProblem {
    /// Queries `[B, H, D]`, f32/f16/bf16.
    pub q: GmTensor,
    /// Key cache `[num_blocks, block_size, Hkv, D]`, q's dtype.
    pub k_cache: GmTensor,
    /// Value cache `[num_blocks, block_size, Hkv, D]`, q's dtype.
    pub v_cache: GmTensor,
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
pub fn run(runner: &mut Runner, p: &PagedProblem) -> Result<GmTensor, OpError> {
    let _ = (runner, p);
    Err(OpError::Package {
        op: "paged_attention",
        why: "the tile kernel is not written yet".into(),
    })
}
