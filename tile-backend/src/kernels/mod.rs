//! Tile-level reference kernels: the programs that the simulator, the race detector and the code
//! generator tests all run.
//!
//! Each kernel is a `pub fn` taking a small parameter struct (with a sensible `Default`) and
//! returning an [`ir::Kernel`](crate::ir::Kernel) that verifies without errors or warnings:
//!
//! - [`worked_matmul`]: the single-tile matmul of docs/tile-ir.md, stage by stage.
//! - [`matmul`]: a tiled, double-buffered `C = A · B` with K-loop accumulation (Partial/Final
//!   phases), one output tile per block.
//! - [`attention_tile`]: the one-tile flash-attention core written the Ascend 950 way ("DN mode":
//!   `S^T = K · Q^T`, DualModeSplitN to the vector cores, column softmax, `O = P^T · V`,
//!   DualModeSplitM back).
//! - [`gather_matmul`]: `S = Q · K^T` with the K rows gathered from a paged cache straight into
//!   L1 by `gather_in_l1` (f16 and the int8 -> int32 form of ASCEND950.md §8).
//! - [`topk`]: the best `k` (value, index) pairs of a row of scores of runtime length, from
//!   TSORT32 and TMRGSORT ([`topk_row`] is the piece other kernels call).
//! - [`add_one`]: a row load, a vector add and a store per block: a launch's fixed cost.
//!
//! Shapes are static parameters. The IR has no launch grid, so each parameter struct has a
//! `block_dim()` saying how many blocks to launch.

mod attention;
mod gather;
mod matmul;
mod topk;
mod trivial;
mod worked;

pub use attention::{attention_tile, AttentionParams, Handoff};
pub use gather::{gather_matmul, GatherMatmulParams};
pub use matmul::{matmul, MatmulParams};
pub use topk::{
    lanes, probe_tie_order, topk, topk_row, TopkParams, TopkRow, TopkTiles, CHUNK, WINDOW,
};
pub use trivial::add_one;
pub use worked::worked_matmul;

use crate::dsl::Body;
use crate::ir::{DType, Expr, Kernel};

/// One default instance of each reference kernel (for CLI and code generator tests).
pub fn all() -> Vec<Kernel> {
    vec![
        matmul(&MatmulParams::default()),
        attention_tile(&AttentionParams::default()),
        gather_matmul(&GatherMatmulParams::default()),
        topk(&TopkParams::default()),
    ]
}

/// The accumulator dtype the cube uses for an operand dtype: int32 for int8, fp32 otherwise.
pub fn acc_dtype(operand: DType) -> DType {
    match operand {
        DType::I8 => DType::I32,
        _ => DType::F32,
    }
}

pub(crate) use crate::ir::round_up;

/// Emits a ping-pong loop over `iters` iterations, unrolled by two so that each half uses a
/// constant event id (0 for even iterations, 1 for odd ones): `body(b, it, event)` is called once
/// for each half with the iteration index `it` (an expression; buffer slot `it % 2 == event`).
///
/// Flags in `body` must be balanced per event (wait before use, set after), so a skipped odd
/// half keeps every flag paired.
pub(crate) fn ping_pong(
    b: &mut Body<'_>,
    name: &str,
    iters: Expr,
    body: &mut dyn FnMut(&mut Body<'_>, Expr, u8),
) {
    match iters.as_const() {
        Some(n) if n <= 0 => {}
        Some(1) => body(b, Expr::Const(0), 0),
        _ => {
            let even = iters.as_const().is_some_and(|n| n % 2 == 0);
            b.for_range(name, 0, iters.clone(), 2, |lb, ip| {
                body(lb, Expr::Var(ip), 0);
                let odd = ip + 1;
                if even {
                    body(lb, odd, 1);
                } else {
                    lb.if_(odd.clone().lt(iters), |ib| body(ib, odd, 1));
                }
            });
        }
    }
}
