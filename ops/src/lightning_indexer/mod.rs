//! `lightning_indexer`: DeepSeek-V3.2's lightning indexer as a candle op. Each query row scores
//! every position of its context, `I[t, s] = sum_h w[t, h] * ReLU(q[t, h] . k[s])`, and keeps the
//! top-k logical positions: exactly the `indices` that [`crate::sparse_paged_attention`] takes.
//! The keys live in a paged [`IndexKeyCache`] (FP8 e4m3 with one scale per 128 values, or
//! plain), written by [`index_cache_append`]; [`quantize_index_q`] and [`hadamard_rotate`] are
//! DeepSeek's host-side preparation of q and k.
//!
//! Every backend runs it: [`Backend::TileSim`] and [`Backend::Ascend950`] through tile kernels
//! (the scores on the cube and the vector core, then the top-k from PTO-ISA's sort
//! instructions, `kernel.rs`) for f32/f16/bf16 key caches, and for FP8 keys with FP8 q at D =
//! 128 (e4m3 x e4m3 on the cube, as DeepSeek-V3.2 scores); FP8 keys with any other q or D, and
//! f32/bf16 q with f16 keys, are [`OpError::NoKernel`] on those backends (after validation,
//! never a fallback).

mod cache;
mod fp8;
pub(crate) mod kernel;
mod reference;
pub(crate) mod shape;

use crate::backend::Backend;
use crate::bridge;
use crate::error::OpError;
use crate::registry::Checked;
pub use cache::{index_cache_append, IndexKeyCache, IndexKeyFormat};
use candle_core::{DType, Tensor};
pub use fp8::{
    f32_to_e4m3, hadamard_rotate, quantize_index_q, scales_to_f32, ue8m0_to_f32, Fp8Conversion,
    Fp8Saturation, RoundMode, ScaleFormat, FP8_E4M3_MAX, FP8_GROUP, FP8_MIN_AMAX,
};
pub use shape::LightningIndexerShape;

const OP: &str = "lightning_indexer";

/// The parameters of [`lightning_indexer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LightningIndexerParams {
    /// Positions kept per row (`1..`; rows with fewer visible positions are padded with -1).
    pub topk: usize,
    /// The cache's block size, if the caller wants it checked (`None`: the cache's).
    pub block_size: Option<usize>,
    /// Also return the kept positions' scores.
    pub return_scores: bool,
}

impl LightningIndexerParams {
    /// `topk` positions per row, the cache's block size, no scores returned.
    pub fn new(topk: usize) -> Self {
        LightningIndexerParams {
            topk,
            block_size: None,
            return_scores: false,
        }
    }
}

/// The lightning indexer: `(indices [T, topk]` I32, `scores [T, topk]` F32 when
/// `params.return_scores`).
///
/// Row `t` sees the logical positions `0..context_lens[t]`, position `s` living in slot
/// `block_table[t, s / block_size] * block_size + s % block_size` of `k_cache`, and scores them
/// `I[t, s] = sum_h weights[t, h] * ReLU(q[t, h] . k[s])` in f32 (FP8 keys dequantised by their
/// scales). `indices[t]` holds the `min(topk, context_lens[t])` best positions by descending
/// score, ties to the earlier position, then -1; `scores[t]` their scores, then -inf.
/// A score that is not finite (NaN or ±inf in a q, weight, key or scale it reads, or an f32
/// overflow) is NaN and ranks below every finite score (docs/ops.md, "`lightning_indexer`").
///
/// `q [T, H_idx, D]` f32/f16/bf16, or `F8E4M3` (DeepSeek's quantised q: the codes of
/// [`quantize_index_q`], whose scales the caller folds into the weights); `weights [T, H_idx]`
/// f32 or q's dtype; `block_table [T,
/// max_blocks]` I32/I64/U32 (only the entries a visible position reaches are read and checked,
/// so rows may be padded with -1); `context_lens [T]` I32/I64 in `0..=max_blocks *
/// block_size` (decode: one row per sequence; prefill: one row per token with its causal
/// context, `t + 1` for the `t`-th token of a prompt). Non-contiguous q and weights are made
/// contiguous first.
///
/// Backends: all three; [`Backend::TileSim`] and [`Backend::Ascend950`] run its tile kernels
/// for f32/f16/bf16 key caches (any q with f32 or bf16 keys, f16 or FP8 q with f16 keys) and
/// for FP8 keys with FP8 q at D = 128 in blocks whose size divides 128 (at least 8) or is a
/// multiple of it, and return [`OpError::NoKernel`] after validation for the other FP8 calls
/// or f32/bf16 q with f16 keys.
///
/// # Errors
/// [`OpError::Invalid`] naming the argument for any broken rule (before anything is
/// allocated); on the kernel backends [`OpError::NoKernel`] as above, `Invalid` naming `topk`
/// past [`MAX_INDEXER_KERNEL_TOPK`](crate::limits::MAX_INDEXER_KERNEL_TOPK), and [`OpError::DeviceUnavailable`] on
/// [`Backend::Ascend950`] after the package is written.
pub fn lightning_indexer(
    q: &Tensor,
    weights: &Tensor,
    k_cache: &IndexKeyCache,
    block_table: &Tensor,
    context_lens: &Tensor,
    params: &LightningIndexerParams,
    backend: Option<Backend>,
) -> Result<(Tensor, Option<Tensor>), OpError> {
    let backend = bridge::resolve_backend(backend)?;
    let call = IndexerCall::validate(q, weights, k_cache, block_table, context_lens, params)?;
    match backend {
        Backend::Reference => {
            let (q, weights) = (&q.contiguous()?, &weights.contiguous()?);
            reference::lightning_indexer(q, weights, k_cache, &call)
        }
        Backend::TileSim | Backend::Ascend950 => kernel::run(
            backend,
            &q.contiguous()?,
            &weights.contiguous()?,
            k_cache,
            &call,
        ),
    }
}

/// q's dtype in the IR: f32, f16, bf16, or FP8 e4m3 (DeepSeek's quantised q).
fn q_dtype(d: DType) -> Result<tile_backend::ir::DType, OpError> {
    match d {
        DType::F8E4M3 => Ok(tile_backend::ir::DType::F8E4M3),
        DType::F32 | DType::F16 | DType::BF16 => bridge::data_dtype(OP, "q", d),
        other => Err(OpError::invalid(
            OP,
            "q",
            format!("dtype {other:?} is not supported: use f32, f16, bf16 or F8E4M3"),
        )),
    }
}

/// One validated `lightning_indexer` call: its [`shape`](Self::shape) and the host data (the
/// block table and the contexts). Made only by [`IndexerCall::validate`].
#[derive(Debug, Clone)]
pub(crate) struct IndexerCall {
    /// The call's shape; its `context_len` is the longest row's context.
    pub shape: Checked<LightningIndexerShape>,
    /// Columns of the block table.
    pub(crate) max_blocks: usize,
    /// `[T, max_blocks]` block table (only the reached entries are valid).
    pub(crate) block_table: Vec<i64>,
    /// Visible positions per row.
    pub(crate) context_lens: Vec<i64>,
    /// Whether the scores are returned.
    pub(crate) return_scores: bool,
}

impl IndexerCall {
    /// Checks a call of [`lightning_indexer()`] (every rule its doc states) and reads its
    /// index tensors.
    ///
    /// # Errors
    /// [`OpError::Invalid`] naming the argument for any broken rule.
    pub fn validate(
        q: &Tensor,
        weights: &Tensor,
        k_cache: &IndexKeyCache,
        block_table: &Tensor,
        context_lens: &Tensor,
        p: &LightningIndexerParams,
    ) -> Result<IndexerCall, OpError> {
        let qd = bridge::check_shape(OP, "q", q, "[T, H_idx, D]", 3)?;
        let q_dtype = q_dtype(q.dtype())?;
        let (tokens, heads, head_dim) = (qd[0], qd[1], qd[2]);
        let wd = bridge::check_data(OP, "weights", weights, "[T, H_idx]", 2)?;
        bridge::check_dim(OP, "weights", wd, 0, "T", tokens, "q is [T, H_idx, D]")?;
        bridge::check_dim(OP, "weights", wd, 1, "H_idx", heads, "q is [T, H_idx, D]")?;
        if weights.dtype() != DType::F32 && weights.dtype() != q.dtype() {
            return Err(OpError::invalid(
                OP,
                "weights",
                format!(
                    "dtype {:?} must be F32 or q's dtype {:?}",
                    weights.dtype(),
                    q.dtype()
                ),
            ));
        }
        let data = k_cache.data();
        bridge::check_cpu(OP, "k_cache", data)?;
        let (num_blocks, block_size, kdim) = k_cache.dims();
        bridge::check_dim(
            OP,
            "k_cache",
            data.dims(),
            2,
            "D",
            head_dim,
            "q is [T, H_idx, D]",
        )?;
        if let Some(bs) = p.block_size.filter(|&bs| bs != block_size) {
            return Err(OpError::invalid(
                OP,
                "block_size",
                format!("is {bs}, but the cache's blocks hold {block_size} slots (k_cache dim 1)"),
            ));
        }
        let (max_blocks, table, lens) = bridge::read_table_and_lens(
            OP,
            block_table,
            context_lens,
            (tokens, "T", "q is [T, H_idx, D]"),
        )?;
        bridge::check_context_lens(OP, &lens, 0, max_blocks, block_size)?;
        let (key_dtype, ue8m0) = match k_cache.format() {
            cache::IndexKeyFormat::Dense(d) => (bridge::data_dtype(OP, "k_cache", d)?, false),
            cache::IndexKeyFormat::Fp8(f) => {
                (tile_backend::ir::DType::F8E4M3, f == ScaleFormat::Ue8m0)
            }
        };
        let shape = LightningIndexerShape {
            dtype: q_dtype,
            key_dtype,
            ue8m0,
            tokens,
            heads,
            head_dim: kdim,
            topk: p.topk,
            context_len: lens.iter().copied().max().unwrap_or(0) as usize,
            block_size,
        };
        let shape = Checked::call(
            shape,
            OP,
            &[
                ("dtype", "q"),
                ("key_dtype", "k_cache"),
                ("ue8m0", "k_cache"),
                ("tokens", "q"),
                ("heads", "q"),
                ("head_dim", "q"),
                ("context_len", "context_lens"),
                ("block_size", "k_cache"),
            ],
        )?;
        // Only the entries a visible position reaches: the first ceil(len / block_size).
        for (t, &len) in lens.iter().enumerate() {
            let bs = block_size as i64;
            for col in 0..(len + bs - 1) / bs {
                let last = (len - 1).min(col * bs + bs - 1);
                bridge::reach(
                    OP,
                    &table,
                    t,
                    max_blocks,
                    block_size,
                    num_blocks,
                    last,
                    || format!("position {last} of row {t}, context_lens[{t}] = {len}"),
                )?;
            }
        }
        Ok(IndexerCall {
            shape,
            max_blocks,
            block_table: table,
            context_lens: lens,
            return_scores: p.return_scores,
        })
    }
}
