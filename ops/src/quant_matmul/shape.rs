//! The registered shape of `quant_matmul` and `quant_matmul_int8` (`tileops emit --op
//! quant-matmul`): what each parameter means, its default, the shape's checks and its launch,
//! which is the kernel plan's ([`super::kernel::plan`]).

use super::kernel::plan;
use crate::error::OpError;
use crate::limits::MAX_DIM;
use crate::registry::{check_dims, check_dtype, Checked, Launch};
use crate::runtime::PlanTarget;
use tile_backend::ir::DType;

/// The shape of a [`crate::quant_matmul()`] call (`x [m, k]`, int8 weight `[n, k]`; result `[m,
/// n]`), or of [`crate::quant_matmul_int8`] when `out` is i8. Only the output dtype, the bias
/// and the ReLU are static; `m`, `k` and `n` are runtime scalars that set the block count. The
/// default is one DeepSeek-V3 MoE expert projection for 16 tokens (7168 -> 2048, bf16).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuantMatmulShape {
    /// Result dtype: f32, f16, bf16, or i8 for the int8-output variant.
    pub out_dtype: DType,
    /// Rows `M` (tokens).
    pub m: usize,
    /// Input features `K`.
    pub k: usize,
    /// Output channels `N`.
    pub n: usize,
    /// A bias argument (float output only).
    pub bias: bool,
    /// ReLU.
    pub relu: bool,
}

impl Default for QuantMatmulShape {
    fn default() -> Self {
        QuantMatmulShape {
            out_dtype: DType::BF16,
            m: 16,
            k: 7168,
            n: 2048,
            bias: false,
            relu: false,
        }
    }
}

crate::op_shape! {
    QuantMatmulShape = "quant-matmul",
    "per-channel W8A8 matmul, int32 accumulation, Fixpipe dequantisation from a Scaling tile \
     (tileops_ops::quant_matmul; --out-dtype i8: quant_matmul_int8)";
    check(s, _path) = check(s);
    plan(s) = device_launches(s);
    out_dtype: "result dtype: f32, f16, bf16, or i8 (the int8-output variant)",
    m: "rows M (tokens; sets the blocks)",
    k: "input features K",
    n: "output channels N (sets the blocks)",
    bias: "a bias argument: true or false",
    relu: "ReLU: true or false",
}

/// The launch of [`crate::quant_matmul()`] (or [`crate::quant_matmul_int8`] for an i8 `out`) for
/// `shape`: one block per output tile (at most 128 x 256, `quant_matmul::kernel::Tiles`). Errors: a size of 0 or above [`MAX_DIM`], an
/// output dtype other than f32/f16/bf16/i8, a bias with the int8 output.
///
/// [`MAX_DIM`]: crate::limits::MAX_DIM
fn device_launches(shape: &Checked<QuantMatmulShape>) -> Vec<Launch> {
    let plan = plan(shape, PlanTarget::Device);
    vec![Launch {
        kernel: plan.kernel(),
        block_dim: plan.block_dim as u64,
        scalars: plan.scalars.to_vec(),
    }]
}

/// The rules of a quant-matmul shape, shared by `tileops emit --op quant-matmul` and the tensor
/// calls (which rename the parameter to the argument carrying it): a size of 0 or above
/// [`MAX_DIM`], `k` above [`MAX_QUANT_K`](crate::limits::MAX_QUANT_K), an output dtype other than
/// f32/f16/bf16/i8, a bias with the int8 output.
///
/// [`MAX_DIM`]: crate::limits::MAX_DIM
fn check(shape: &QuantMatmulShape) -> Result<(), OpError> {
    let op = if shape.out_dtype == DType::I8 {
        "quant_matmul_int8"
    } else {
        "quant_matmul"
    };
    check_dims(op, &[("m", shape.m), ("k", shape.k), ("n", shape.n)])?;
    if shape.m.checked_mul(shape.n).is_none_or(|e| e > MAX_DIM) {
        return Err(OpError::invalid(
            op,
            "m",
            format!(
                "the result [m, n] = [{}, {}] would hold more than {MAX_DIM} elements",
                shape.m, shape.n
            ),
        ));
    }
    crate::registry::check_range(
        op,
        "k",
        shape.k,
        super::MAX_QUANT_K,
        " (the int32 accumulator)",
    )?;
    match shape.out_dtype {
        DType::I8 if shape.bias => {
            return Err(OpError::invalid(
                op,
                "bias",
                "the int8-output variant takes no bias",
            ))
        }
        DType::I8 => {}
        out => {
            check_dtype(op, out).map_err(|_| {
                OpError::invalid(
                    op,
                    "out_dtype",
                    format!("{out} is not supported: use f32, f16, bf16 or i8"),
                )
            })?;
        }
    }
    Ok(())
}
