//! The sparse top-k attention kernels in the tile DSL, and the host code that launches them.
//!
//! CONTRACT (the op layer in `mod.rs` calls exactly this): `run` receives validated inputs.

use crate::error::OpError;
use crate::runtime::Runner;
use tile_backend::ir::DType;
use tile_backend::launch::{GmInput, GmTensor};

use crate::templates::attention::{run_attention, AttnCfg, AttnInputs};

const OP: &str = "sparse_paged_attention";

/// One validated sparse-attention call, in the simulator's host form.
#[derive(Debug, Clone)]
pub struct SparseProblem<'a> {
    /// Queries `[B, H, Dqk]`, f32/f16/bf16 (borrowed: [`GmTensor::as_input`]).
    pub q: GmInput<'a>,
    /// The paged latent cache `[num_blocks, block_size, Dqk]`, same dtype as `q` (borrowed).
    pub kv: GmInput<'a>,
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

/// The split kernel's static shape for `heads` query heads of `dqk` columns (V: the first
/// `v_dim`), a `block_size`-token cache of `dtype`: head tiles of at most 128 heads, as even as
/// possible; the heads of a tile share each gathered K tile (the latent cache has no head
/// dimension). [`run`] and [`crate::kernels::sparse_paged_attention`] both build their kernels
/// from it.
pub(crate) fn attn_cfg(
    dtype: DType,
    heads: usize,
    dqk: usize,
    v_dim: usize,
    block_size: usize,
    double_buffer: bool,
) -> AttnCfg {
    let nht = heads.div_ceil(128).max(1);
    AttnCfg::new(
        "sparse_attn",
        dtype,
        heads as u64,
        heads.div_ceil(nht) as u64,
        dqk as u64,
        v_dim as u64,
        dqk as u64,
        0,
        false,
        block_size as u64,
        double_buffer,
    )
}

/// Runs sparse attention: returns `out [B, H, v_dim]` (q's dtype) and `lse [B, H]` (f32,
/// natural log, without the sink; `+inf` and out 0 for a row with no valid index).
///
/// Host side: each row's valid indices (the first `topk_length` entries that are not -1) are
/// compacted to the front (stable, duplicates kept) and counted; the tail is padded with the
/// row's first valid index. Kernels: `templates::attention::attn_split` (one block per batch row, head
/// tile of up to 128 heads and top-k split) and `attn_merge`.
pub fn run(runner: &mut Runner, p: &SparseProblem<'_>) -> Result<(GmTensor, GmTensor), OpError> {
    let (b, h, dqk) = match p.q.shape[..] {
        [b, h, d] => (b, h, d),
        _ => return Err(OpError::invalid(OP, "q", "must be [B, H, Dqk]")),
    };
    let (nblk, bs) = match p.kv.shape[..] {
        [n, bs, _] => (n, bs),
        _ => {
            return Err(OpError::invalid(
                OP,
                "kv_cache",
                "must be [num_blocks, block_size, Dqk]",
            ))
        }
    };
    let topk = p.topk;
    let mut indices = Vec::with_capacity(b * topk);
    let mut counts = Vec::with_capacity(b);
    for row in 0..b {
        let len = p
            .topk_length
            .as_ref()
            .map_or(topk, |l| l[row].clamp(0, topk as i64) as usize);
        let start = indices.len();
        indices.extend(
            p.indices[row * topk..row * topk + len]
                .iter()
                .copied()
                .filter(|&t| t >= 0),
        );
        let n = indices.len() - start;
        let pad = indices.get(start).copied().unwrap_or(0);
        indices.resize(start + topk, pad);
        counts.push(n as i64);
    }
    let cfg = attn_cfg(p.q.dtype, h, dqk, p.v_dim, bs, runner.pipes_overlap());
    let mut q = p.q.clone();
    q.shape = vec![b * h, dqk];
    let mut kv = p.kv.clone();
    kv.shape = vec![nblk * bs, dqk];
    let (mut out, mut lse) = run_attention(
        runner,
        OP,
        &cfg,
        AttnInputs {
            q,
            kv,
            v: None,
            indices,
            topk,
            counts,
            block_table: &p.block_table,
            max_blocks: p.max_blocks,
            batch: b,
            scale: p.scale,
            sink: p.sink.as_deref(),
        },
    )?;
    out.shape = vec![b, h, p.v_dim];
    lse.shape = vec![b, h];
    Ok((out, lse))
}
