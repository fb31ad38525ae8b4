//! The paged-gather kernel in the tile DSL (rows GM -> UB -> GM), and its host code.
//!
//! CONTRACT (the op layer in `mod.rs` calls exactly this): `run` receives validated inputs.

use crate::error::OpError;
use crate::runtime::Runner;
use tile_backend::sim::GmTensor;

/// One validated paged-gather call.
#[derive(Debug, Clone)]
pub struct GatherProblem {
    /// Source rows `[T, C]`, f32/f16/bf16.
    pub src: GmTensor,
    /// Logical tokens (`n` of them), each `< block_table.len() * block_size` (checked).
    pub indices: Vec<i64>,
    /// Block table (`nb` entries); entries reached by an index are in `0..T / block_size`...
    /// precisely: `entry * block_size + block_size - 1 < T` is not required, but every physical
    /// row an index reaches is `< T` (checked).
    pub block_table: Vec<i64>,
    /// Tokens per block.
    pub block_size: usize,
    /// Columns gathered (`<= C`).
    pub size: usize,
}

/// Runs the gather: returns `[n, size]` in src's dtype.
pub fn run(runner: &mut Runner, p: &GatherProblem) -> Result<GmTensor, OpError> {
    let _ = (runner, p);
    Err(OpError::Package {
        op: "paged_gather",
        why: "the tile kernel is not written yet".into(),
    })
}
