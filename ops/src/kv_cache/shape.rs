//! The registered shape of `reshape_and_cache` (`tileops emit --op reshape-and-cache`): what
//! each parameter means, its default, the shape's checks and its launch, which is the kernel
//! plan's ([`super::kernel::plan`]).

use super::kernel::plan;
use crate::error::OpError;
use crate::registry::{check_dims, check_dtype, check_width, Checked, Launch};
use crate::runtime::PlanTarget;
use tile_backend::ir::DType;

/// The shape of a [`crate::reshape_and_cache`] call (`rows [tokens, ...]` written into a paged
/// cache of rows of `width` elements). Only the dtype and `width` are static; `tokens` sets the
/// block count. The default appends one token per sequence of the dense decode default (8 rows
/// of Hkv 8 x D 128 = 1024 f16 elements).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReshapeAndCacheShape {
    /// Dtype of the rows and the cache: f32, f16 or bf16.
    pub dtype: DType,
    /// New rows `N` (runtime: sets the block count).
    pub tokens: usize,
    /// Elements per row (the product of the trailing dims: `Hkv * D`, or the MLA latent width).
    pub width: usize,
}

impl Default for ReshapeAndCacheShape {
    fn default() -> Self {
        ReshapeAndCacheShape {
            dtype: DType::F16,
            tokens: 8,
            width: 1024,
        }
    }
}

crate::op_shape! {
    ReshapeAndCacheShape = "reshape-and-cache",
    "new K/V (or MLA latent) rows written into a paged cache by slot mapping \
     (tileops_ops::reshape_and_cache)";
    check(s, _path) = check(s);
    plan(s) = device_launches(s);
    dtype: "row and cache dtype: f32, f16, bf16",
    tokens: "new rows N (sets the blocks)",
    width: "elements per row (Hkv * D, or the latent width)",
}

/// The launch of [`crate::reshape_and_cache`] for `shape`: one row-copy kernel on as many
/// blocks as give every AIV a row (at most 32). Errors: `tokens` 0 or above [`MAX_DIM`],
/// `width` 0 or above [`MAX_WIDTH`], a dtype other than f32/f16/bf16.
///
/// [`MAX_DIM`]: crate::limits::MAX_DIM
/// [`MAX_WIDTH`]: crate::limits::MAX_WIDTH
fn device_launches(shape: &Checked<ReshapeAndCacheShape>) -> Vec<Launch> {
    let plan = plan(shape, PlanTarget::Device);
    vec![Launch {
        kernel: plan.kernel(),
        block_dim: plan.block_dim as u64,
        scalars: vec![("n", shape.tokens as i64)],
    }]
}

/// The rules of a reshape-and-cache shape, shared by `tileops emit --op reshape-and-cache` and
/// the tensor call (which renames the parameter to the tensor carrying it): the errors of
/// [`device_launches`].
fn check(shape: &ReshapeAndCacheShape) -> Result<(), OpError> {
    const OP: &str = "reshape_and_cache";
    check_dtype(OP, shape.dtype)?;
    check_dims(OP, &[("tokens", shape.tokens)])?;
    check_width(OP, "width", shape.width)
}
