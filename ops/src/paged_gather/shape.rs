//! The registered shape of `paged_gather` (`tileops emit --op paged-gather`): what each
//! parameter means, its default, the shape's checks and its launch, which is the kernel plan's
//! ([`super::kernel::plan`]).

use super::kernel::plan;
use crate::error::OpError;
use crate::limits::MAX_DIM;
use crate::registry::{check_dims, check_dtype, check_width, Checked, Launch};
use crate::runtime::PlanTarget;
use tile_backend::ir::DType;

/// The shape of a [`crate::paged_gather()`] call (`src [T, C]`, `indices [1, n]`; result `[n,
/// size]`). Only the dtype and `size` are static; `n` sets the block count. The default gathers
/// the 2048 top-k rows of a DeepSeek latent cache (576 bf16 columns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PagedGatherShape {
    /// Dtype of `src` and the result: f32, f16 or bf16.
    pub dtype: DType,
    /// Rows gathered (`n`, the indices; runtime: sets the block count).
    pub n: usize,
    /// Columns gathered per row (`size <= C`).
    pub size: usize,
}

impl Default for PagedGatherShape {
    fn default() -> Self {
        PagedGatherShape {
            dtype: DType::BF16,
            n: 2048,
            size: 576,
        }
    }
}

crate::op_shape! {
    PagedGatherShape = "paged-gather",
    "rows gathered from a paged source through a block table, GM -> UB -> GM \
     (tileops_ops::paged_gather)";
    check(s, _path) = check(s);
    plan(s) = device_launches(s);
    dtype: "source dtype: f32, f16, bf16",
    n: "rows gathered (sets the blocks)",
    size: "columns gathered per row",
}

/// The launch of [`crate::paged_gather()`] for `shape`: one row-copy kernel on as many blocks as
/// give every AIV a row (at most 32). Errors: `n` 0 or above [`MAX_DIM`], `size` 0 or above
/// [`MAX_WIDTH`], a dtype other than f32/f16/bf16.
///
/// [`MAX_DIM`]: crate::limits::MAX_DIM
/// [`MAX_WIDTH`]: crate::limits::MAX_WIDTH
fn device_launches(shape: &Checked<PagedGatherShape>) -> Vec<Launch> {
    let plan = plan(shape, PlanTarget::Device);
    vec![Launch {
        kernel: plan.kernel(),
        block_dim: plan.block_dim as u64,
        scalars: vec![("n", shape.n as i64)],
    }]
}

/// The rules of a paged-gather shape, shared by `tileops emit --op paged-gather` and the tensor
/// call (which renames the parameter to the argument carrying it): the errors of [`device_launches`].
fn check(shape: &PagedGatherShape) -> Result<(), OpError> {
    const OP: &str = "paged_gather";
    check_dtype(OP, shape.dtype)?;
    check_dims(OP, &[("n", shape.n)])?;
    check_width(OP, "size", shape.size)?;
    if shape.n.checked_mul(shape.size).is_none_or(|e| e > MAX_DIM) {
        return Err(OpError::invalid(
            OP,
            "n",
            format!(
                "the result [n, size] = [{}, {}] would hold more than {MAX_DIM} elements",
                shape.n, shape.size
            ),
        ));
    }
    Ok(())
}
