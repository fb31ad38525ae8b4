//! The quant_matmul kernels in the tile DSL, and their host code (work in progress).

use super::{QuantizedActivations, QuantizedWeight, Validated};
use crate::error::OpError;
use crate::runtime::Runner;
use tile_backend::sim::GmTensor;

/// Runs the float-output kernel.
pub(crate) fn run_float(
    _runner: &mut Runner,
    _w: &QuantizedWeight,
    _v: &Validated,
) -> Result<GmTensor, OpError> {
    Err(OpError::Package {
        op: "quant_matmul",
        why: "the TileSim kernel is not written yet".into(),
    })
}

/// Runs the int8-output kernel.
pub(crate) fn run_int8(
    _runner: &mut Runner,
    _x: &QuantizedActivations,
    _w: &QuantizedWeight,
    _words: &[f32],
    _relu: bool,
) -> Result<GmTensor, OpError> {
    Err(OpError::Package {
        op: "quant_matmul_int8",
        why: "the TileSim kernel is not written yet".into(),
    })
}
