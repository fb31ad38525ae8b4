//! The registered shape of `sparse_paged_attention` (`tileops emit --op sparse-paged-attention`):
//! what each parameter means, its default, the shape's checks and its launches, which are the
//! kernel plan's ([`super::kernel::plan`] for the device).

use super::check_v_dim;
use crate::error::OpError;
use crate::registry::{check_dims, check_dtype, check_width, CheckPath, Checked, Launch};
use crate::runtime::PlanTarget;
use crate::templates::attention::check_rows;
use tile_backend::ir::DType;

/// The shape of a [`crate::sparse_paged_attention`] call: DeepSeek-V3.2 sparse (DSA) decode in
/// the absorbed MLA form (`q [batch, heads, dqk]`, a paged latent cache `[num_blocks,
/// block_size, dqk]` whose first `v_dim` columns are V, `indices [batch, topk]`). The default is
/// the DeepSeek-V3.2 decode shape: batch 4, 128 heads, Dqk 576, v_dim 512, top-k 2048, block 64,
/// bf16, no sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SparseAttentionShape {
    /// Data dtype of `q` and the cache (and of `out`): f32, f16 or bf16.
    pub dtype: DType,
    /// Batch rows `B` (runtime: sets the block count and the top-k splits).
    pub batch: usize,
    /// Query heads `H`.
    pub heads: usize,
    /// Columns of q and of a cache row (`Dqk`, the contraction of Q K^T).
    pub dqk: usize,
    /// V columns, the first `v_dim` of a cache row (`1..=dqk`).
    pub v_dim: usize,
    /// Valid indices of the fullest row (runtime: sets the top-k splits). The op counts only
    /// valid ones (not -1, not past `topk_length`); the default 2048 is every entry valid.
    pub topk: usize,
    /// Tokens per cache block.
    pub block_size: usize,
    /// Whether a per-head attention sink is applied (the merge kernel takes a `sink` argument).
    pub sink: bool,
    /// The batch-invariant plan: the top-k splits are chosen for one row, whatever `batch`
    /// ([`crate::SparseAttentionParams::batch_invariant`]).
    pub batch_invariant: bool,
}

impl Default for SparseAttentionShape {
    fn default() -> Self {
        SparseAttentionShape {
            dtype: DType::BF16,
            batch: 4,
            heads: 128,
            dqk: 576,
            v_dim: 512,
            topk: 2048,
            block_size: 64,
            sink: false,
            batch_invariant: false,
        }
    }
}

crate::op_shape! {
    SparseAttentionShape = "sparse-paged-attention",
    "DeepSeek-V3.2 sparse top-k decode (tileops_ops::sparse_paged_attention): top-k split \
     kernel, then the merge; defaults are the DeepSeek decode shape";
    check(s, path) = check(s, path == CheckPath::Tensor);
    plan(s) = device_launches(s);
    dtype: "q and cache dtype: f32, f16, bf16",
    batch: "batch rows B (sets the blocks and the top-k splits)",
    heads: "query heads H",
    dqk: "columns of q and of a cache row",
    v_dim: "V columns, the first v-dim of a cache row (<= dqk)",
    topk: "valid indices of the fullest row (sets the top-k splits)",
    block_size: "tokens per cache block",
    sink: "per-head attention sink: false or true",
    batch_invariant: "splits chosen for one row whatever the batch: false or true",
}

/// The launches of [`crate::sparse_paged_attention`] for `shape`: the top-k split kernel on
/// `batch * head_tiles * splits` blocks, then the merge kernel. Errors: a size of 0 or above
/// [`MAX_DIM`] ([`MAX_WIDTH`] for `dqk` and `v_dim`), `v_dim > dqk`, a dtype other than
/// f32/f16/bf16, `batch * heads` above [`MAX_DIM`].
///
/// [`MAX_DIM`]: crate::limits::MAX_DIM
/// [`MAX_WIDTH`]: crate::limits::MAX_WIDTH
fn device_launches(shape: &Checked<SparseAttentionShape>) -> Vec<Launch> {
    super::kernel::plan(shape, PlanTarget::Device).launches()
}

/// The rules of a sparse-attention shape, shared by `tileops emit --op sparse-paged-attention`
/// and the tensor call (which renames the parameter to the tensor carrying it): the errors of
/// [`device_launches`]; `topk` may be 0 when `empty_rows` (a call whose every index is -1).
fn check(s: &SparseAttentionShape, empty_rows: bool) -> Result<(), OpError> {
    const OP: &str = "sparse_paged_attention";
    check_dtype(OP, s.dtype)?;
    check_dims(
        OP,
        &[
            ("batch", s.batch),
            ("heads", s.heads),
            ("block_size", s.block_size),
        ],
    )?;
    if !(empty_rows && s.topk == 0) {
        check_dims(OP, &[("topk", s.topk)])?;
    }
    check_width(OP, "dqk", s.dqk)?;
    check_width(OP, "v_dim", s.v_dim)?;
    check_v_dim(s.v_dim, s.dqk, "dqk")?;
    check_rows(OP, s.batch, s.heads)
}
