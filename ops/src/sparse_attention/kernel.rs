//! The sparse top-k attention kernels in the tile DSL, and the host code that launches them.
//!
//! CONTRACT (the op layer in `mod.rs` calls exactly this): `run` receives validated inputs.

use crate::error::OpError;
use crate::runtime::Runner;
use tile_backend::sim::GmTensor;

/// One validated sparse-attention call, in the simulator's host form.
#[derive(Debug, Clone)]
pub struct SparseProblem {
    /// Queries `[B, H, Dqk]`, f32/f16/bf16.
    pub q: GmTensor,
    /// The paged latent cache `[num_blocks, block_size, Dqk]`, same dtype as `q`.
    pub kv: GmTensor,
    /// `[B, topk]` logical token indices; `-1` marks an invalid slot. Every other value is a
    /// valid token (`< max_blocks * block_size`), already checked.
    pub indices: Vec<i64>,
    /// Top-k width (columns of `indices`).
    pub topk: usize,
    /// Optional per-row count of leading entries of `indices` that count (`<= topk`).
    pub topk_length: Option<Vec<i64>>,
    /// `[B, max_blocks]` block table; every entry a valid index can reach is in
    /// `0..num_blocks` (checked); unreachable entries may hold anything (e.g. -1).
    pub block_table: Vec<i64>,
    /// Columns of the block table.
    pub max_blocks: usize,
    /// Tokens per cache block.
    pub block_size: usize,
    /// V columns: the first `v_dim` columns of each cache row (`<= Dqk`).
    pub v_dim: usize,
    /// Softmax scale applied to the f32 scores.
    pub scale: f32,
    /// Optional per-head attention sink (`[H]`).
    pub sink: Option<Vec<f32>>,
}

/// Runs sparse attention: returns `out [B, H, v_dim]` (q's dtype) and `lse [B, H]` (f32,
/// natural log, without the sink; `+inf` and out 0 for a row with no valid index).
pub fn run(runner: &mut Runner, p: &SparseProblem) -> Result<(GmTensor, GmTensor), OpError> {
    let _ = (runner, p);
    Err(OpError::Package {
        op: "sparse_paged_attention",
        why: "the tile kernel is not written yet".into(),
    })
}
