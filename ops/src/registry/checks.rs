//! The limits every shape parameter obeys and the checks the ops' shapes share.

use crate::error::OpError;
use crate::limits::{MAX_DIM, MAX_WIDTH};
use tile_backend::ir::DType;

/// A data dtype the ops take.
pub(crate) fn check_dtype(op: &'static str, dtype: DType) -> Result<(), OpError> {
    if matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        Ok(())
    } else {
        Err(OpError::invalid(
            op,
            "dtype",
            format!("{dtype} is not supported: use f32, f16 or bf16"),
        ))
    }
}

/// A size or count in `1..=max`; `why` (may be empty) says where the bound comes from.
pub(crate) fn check_range(
    op: &'static str,
    arg: &'static str,
    v: usize,
    max: usize,
    why: &str,
) -> Result<(), OpError> {
    if (1..=max).contains(&v) {
        Ok(())
    } else {
        Err(OpError::invalid(
            op,
            arg,
            format!("must be in 1..={max}{why}, got {v}"),
        ))
    }
}

/// Sizes or counts, each `1..=MAX_DIM`, by argument name.
pub(crate) fn check_dims(op: &'static str, dims: &[(&'static str, usize)]) -> Result<(), OpError> {
    dims.iter()
        .try_for_each(|&(arg, v)| check_range(op, arg, v, MAX_DIM, ""))
}

/// A row width: `1..=MAX_WIDTH`.
pub(crate) fn check_width(op: &'static str, arg: &'static str, v: usize) -> Result<(), OpError> {
    check_range(op, arg, v, MAX_WIDTH, " (static tile columns)")
}
