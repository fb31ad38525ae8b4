//! The registered shape of `paged_attention` (`tileops emit --op paged-attention`): what each
//! parameter means, its default, the shape's checks and its launches, which are the kernel
//! plan's ([`super::kernel::plan`] for the device).

use super::kernel::{head_group, plan};
use crate::error::OpError;
use crate::registry::{check_dims, check_dtype, check_width, Checked, Launch};
use crate::runtime::PlanTarget;
use crate::templates::attention::check_rows;
use tile_backend::ir::DType;

/// The shape of a [`crate::paged_attention()`] call: vLLM-style dense decode with GQA (`q [batch,
/// heads, head_dim]`, K and V caches `[num_blocks, block_size, kv_heads, head_dim]`). The default:
/// batch 8, 32 heads over 8 KV heads, head_dim 128, context 2048, block 16, f16.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PagedAttentionShape {
    /// Data dtype of `q` and the caches: f32, f16 or bf16.
    pub dtype: DType,
    /// Batch rows `B` (runtime: sets the block count and the splits).
    pub batch: usize,
    /// Query heads `H`.
    pub heads: usize,
    /// KV heads `Hkv`: divides `H`, with at most 128 query heads per KV head.
    pub kv_heads: usize,
    /// Head dimension `D`.
    pub head_dim: usize,
    /// Tokens of the longest context (runtime: sets the splits).
    pub context_len: usize,
    /// Tokens per cache block.
    pub block_size: usize,
}

impl Default for PagedAttentionShape {
    fn default() -> Self {
        PagedAttentionShape {
            dtype: DType::F16,
            batch: 8,
            heads: 32,
            kv_heads: 8,
            head_dim: 128,
            context_len: 2048,
            block_size: 16,
        }
    }
}

crate::op_shape! {
    PagedAttentionShape = "paged-attention",
    "vLLM-style dense decode with GQA (tileops_ops::paged_attention): split kernel, then the \
     merge (none with one split: the split kernel writes the result)";
    check(s, _path) = check(s);
    plan(s) = device_launches(s);
    dtype: "q and cache dtype: f32, f16, bf16",
    batch: "batch rows B (sets the blocks and the splits)",
    heads: "query heads H",
    kv_heads: "KV heads Hkv (divides H, at most 128 query heads each)",
    head_dim: "head dimension D",
    context_len: "tokens of the longest context (sets the splits)",
    block_size: "tokens per cache block",
}

/// The launches of [`crate::paged_attention()`] for `shape`: the split kernel (the sparse
/// template with one head tile per KV head and a separate V cache) on `batch * kv_heads *
/// splits` work items (several per block where they exceed one wave of the device), then the
/// merge kernel unless there is one split (the split kernel then writes the result). Errors: a size of 0 or above [`MAX_DIM`]
/// ([`MAX_WIDTH`] for `head_dim`), `heads % kv_heads != 0` or more than 128 query heads per KV
/// head, a dtype other than f32/f16/bf16, `batch * heads` above [`MAX_DIM`].
///
/// [`MAX_DIM`]: crate::limits::MAX_DIM
/// [`MAX_WIDTH`]: crate::limits::MAX_WIDTH
fn device_launches(shape: &Checked<PagedAttentionShape>) -> Vec<Launch> {
    plan(shape, PlanTarget::Device).launches()
}

/// The rules of a paged-attention shape, shared by `tileops emit --op paged-attention` and the
/// tensor call (which renames the parameter to the tensor carrying it): the errors of
/// [`device_launches`].
fn check(shape: &PagedAttentionShape) -> Result<(), OpError> {
    const OP: &str = "paged_attention";
    let s = shape;
    check_dtype(OP, s.dtype)?;
    check_dims(
        OP,
        &[
            ("batch", s.batch),
            ("heads", s.heads),
            ("kv_heads", s.kv_heads),
            ("context_len", s.context_len),
            ("block_size", s.block_size),
        ],
    )?;
    check_width(OP, "head_dim", s.head_dim)?;
    head_group(s.heads, s.kv_heads).map_err(|rule| OpError::invalid(OP, "kv_heads", rule))?;
    check_rows(OP, s.batch, s.heads)
}
