//! IR op -> PTO-ISA instruction on Ascend 950: the instruction (or intrinsic) each op is emitted
//! as. The verifier looks up an op's element types and layouts by this name
//! ([`super::Arch::instruction_dtypes`]) and the code generator writes it, so both take it from
//! here; docs/codegen.md's "IR op -> PTO instruction" is this table in prose.

use crate::ir::{Axis, BinaryOp, Kernel, MemSpace, Op, ReduceOp, Scale, TileRef, UnaryOp};

/// The PTO instruction (or intrinsic) an op is emitted as. Channel ops never reach the emitter
/// (the sync pass lowers them); their entry names the intrinsic they become.
pub fn instruction(kernel: &Kernel, op: &Op) -> &'static str {
    let space = |r: &TileRef| kernel.try_tile(r.tile).map(|d| d.ty.space);
    match op {
        Op::Load { .. } => "TLOAD",
        Op::Store { scale, src, .. } => match (space(src), scale) {
            (Some(MemSpace::Acc), Some(Scale::Tile(_))) => "TSTORE_FP",
            _ => "TSTORE",
        },
        Op::Move {
            dst,
            src,
            offset,
            acc_to_vec,
            scale,
            ..
        } => move_instruction(kernel, dst, src, offset.is_some(), acc_to_vec.is_some(), {
            matches!(scale, Some(Scale::Tile(_)))
        }),
        Op::Matmul {
            bias, accumulate, ..
        } => match (bias.is_some(), accumulate) {
            (true, _) => "TMATMUL_BIAS",
            (false, true) => "TMATMUL_ACC",
            (false, false) => "TMATMUL",
        },
        Op::GatherInL1 { .. } => "TLOAD",
        Op::Unary { op, .. } => match op {
            UnaryOp::Exp => "TEXP",
            UnaryOp::Ln => "TLOG",
            UnaryOp::Abs => "TABS",
            UnaryOp::Neg => "TNEG",
            UnaryOp::Sqrt => "TSQRT",
            UnaryOp::Rsqrt => "TRSQRT",
            UnaryOp::Recip => "TRECIP",
            UnaryOp::Relu => "TRELU",
        },
        Op::Binary { op, .. } => match op {
            BinaryOp::Add => "TADD",
            BinaryOp::Sub => "TSUB",
            BinaryOp::Mul => "TMUL",
            BinaryOp::Div => "TDIV",
            BinaryOp::Max => "TMAX",
            BinaryOp::Min => "TMIN",
        },
        Op::BinaryScalar { op, .. } => match op {
            BinaryOp::Add => "TADDS",
            BinaryOp::Sub => "TSUBS",
            BinaryOp::Mul => "TMULS",
            BinaryOp::Div => "TDIVS",
            BinaryOp::Max => "TMAXS",
            BinaryOp::Min => "TMINS",
        },
        Op::Reduce { op, axis, .. } => match (axis, op) {
            (Axis::Row, ReduceOp::Sum) => "TROWSUM",
            (Axis::Row, ReduceOp::Max) => "TROWMAX",
            (Axis::Row, ReduceOp::Min) => "TROWMIN",
            (Axis::Col, ReduceOp::Sum) => "TCOLSUM",
            (Axis::Col, ReduceOp::Max) => "TCOLMAX",
            (Axis::Col, ReduceOp::Min) => "TCOLMIN",
        },
        Op::Broadcast { op, axis, .. } => match (axis, op) {
            (Axis::Row, BinaryOp::Add) => "TROWEXPANDADD",
            (Axis::Row, BinaryOp::Sub) => "TROWEXPANDSUB",
            (Axis::Row, BinaryOp::Mul) => "TROWEXPANDMUL",
            (Axis::Row, BinaryOp::Div) => "TROWEXPANDDIV",
            (Axis::Row, BinaryOp::Max) => "TROWEXPANDMAX",
            (Axis::Row, BinaryOp::Min) => "TROWEXPANDMIN",
            (Axis::Col, BinaryOp::Add) => "TCOLEXPANDADD",
            (Axis::Col, BinaryOp::Sub) => "TCOLEXPANDSUB",
            (Axis::Col, BinaryOp::Mul) => "TCOLEXPANDMUL",
            (Axis::Col, BinaryOp::Div) => "TCOLEXPANDDIV",
            (Axis::Col, BinaryOp::Max) => "TCOLEXPANDMAX",
            (Axis::Col, BinaryOp::Min) => "TCOLEXPANDMIN",
        },
        Op::Expand { axis, .. } => match axis {
            Axis::Row => "TROWEXPAND",
            Axis::Col => "TCOLEXPAND",
        },
        Op::Cast { .. } => "TCVT",
        Op::Fill { .. } => "TEXPANDS",
        Op::SetValidShape { .. } => "SetValidShape",
        Op::FillPad { tile } => match space(tile) {
            Some(MemSpace::Vec) => "TFILLPAD_INPLACE",
            _ => "TFILLPAD",
        },
        Op::ReadScalar { .. } => "GM scalar read",
        Op::ReadTileScalar { .. } => "GetValue",
        Op::WriteScalar { .. } => "GM scalar write",
        Op::SetFlag { .. } => "set_flag",
        Op::WaitFlag { .. } => "wait_flag",
        Op::Barrier { .. } => "pipe_barrier",
        Op::SetCrossFlag { .. } => "set_intra_block",
        Op::WaitCrossFlag { .. } => "wait_intra_block",
        Op::ChannelAcquire { .. } | Op::ChannelPop { .. } => "wait_intra_block",
        Op::ChannelPush { .. } | Op::ChannelRelease { .. } => "set_intra_block",
    }
}

/// Whether a move with an offset is an extract (source at least as large as the destination).
fn is_extract(kernel: &Kernel, dst: &TileRef, src: &TileRef) -> bool {
    match (kernel.try_tile(dst.tile), kernel.try_tile(src.tile)) {
        (Some(d), Some(s)) => s.ty.rows >= d.ty.rows && s.ty.cols >= d.ty.cols,
        _ => true,
    }
}

/// The instruction a move is emitted as: `TMOV`, `TEXTRACT` (an offset into a source at least as
/// large as the destination) or `TINSERT`, each with its `_FP` form when a Scaling tile quantises
/// it outside an `AccToVecMode` move.
fn move_instruction(
    kernel: &Kernel,
    dst: &TileRef,
    src: &TileRef,
    offset: bool,
    mode: bool,
    fp: bool,
) -> &'static str {
    match (offset, is_extract(kernel, dst, src), fp && !mode) {
        (false, _, false) => "TMOV",
        (false, _, true) => "TMOV_FP",
        (true, true, false) => "TEXTRACT",
        (true, true, true) => "TEXTRACT_FP",
        (true, false, false) => "TINSERT",
        (true, false, true) => "TINSERT_FP",
    }
}
