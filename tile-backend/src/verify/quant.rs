//! Fixpipe quantisation (ASCEND950.md §6): per-tensor scalar scales and per-channel Scaling tiles.

use super::{static_dim, Ctx, Rule};
use crate::ir::{DType, LoadStoreOp, MemSpace, MoveOp, ParamKind, Scale, TileRef};

/// The scale of a Fixpipe move.
pub(super) fn check_move(cx: &mut Ctx<'_>, op: &MoveOp) {
    let MoveOp::Move { scale, dst, .. } = op;
    let cols = out_cols(cx, dst);
    check(cx, scale, cols);
}

/// The scale of a store (a load has none).
pub(super) fn check_store(cx: &mut Ctx<'_>, op: &LoadStoreOp) {
    match op {
        LoadStoreOp::Load { .. } => {}
        LoadStoreOp::Store { scale, dst, .. } => {
            check(cx, scale, dst.cols.as_const().map(|c| c.max(0) as u64))
        }
    }
}

fn check(cx: &mut Ctx<'_>, scale: &Option<Scale>, out_cols: Option<u64>) {
    match scale {
        None | Some(Scale::Const(_)) => {}
        Some(Scale::Scalar(p)) => {
            if let Some(param) = cx.kernel.try_param(*p) {
                match &param.kind {
                    ParamKind::Scalar {
                        dtype: DType::F32 | DType::I32 | DType::I64,
                    } => {}
                    ParamKind::Scalar { dtype } => cx.error(
                        Rule::ScaleScalar,
                        format!(
                            "a runtime scale must be an f32 scalar (bit-cast) or an int32/int64 pre-encoded word; `{}` is {dtype}",
                            param.name
                        ),
                    ),
                    ParamKind::Tensor { .. } => cx.error(
                        Rule::ScaleScalar,
                        format!(
                            "`{}` is a GM tensor; a per-channel scale is a Scaling tile loaded through Mat",
                            param.name
                        ),
                    ),
                }
            }
        }
        Some(Scale::Tile(t)) => check_scaling_tile(cx, t, out_cols),
    }
}

fn out_cols(cx: &Ctx<'_>, dst: &TileRef) -> Option<u64> {
    cx.kernel
        .try_tile(dst.tile)
        .and_then(|d| static_dim(d.ty.valid_cols))
}

fn check_scaling_tile(cx: &mut Ctx<'_>, t: &TileRef, out_cols: Option<u64>) {
    let Some(decl) = cx.tile(t) else { return };
    let ty = &decl.ty;
    let name = &decl.name;
    if ty.space != MemSpace::Scaling {
        cx.error(
            Rule::ScaleTile,
            format!(
                "a per-channel scale is a Scaling tile (moved there from Mat on FIX); `{name}` is in {}",
                ty.space
            ),
        );
    }
    if !matches!(ty.dtype, DType::I64 | DType::U64) {
        cx.error(
            Rule::ScaleTile,
            format!(
                "a Scaling tile holds int64/uint64 words; `{name}` is {}",
                ty.dtype
            ),
        );
    }
    if ty.rows != 1 {
        cx.error(
            Rule::ScaleTile,
            format!(
                "a Scaling tile has shape [1, N] (column scaling only; [N, 1] row scaling is not supported); `{name}` is [{}, {}]",
                ty.rows, ty.cols
            ),
        );
    }
    let n = ty.cols;
    let mult = cx.arch.scaling_n_multiple;
    if n % mult != 0 {
        cx.error(
            Rule::ScaleTile,
            format!("Scaling tile N must be a multiple of {mult}; `{name}` has N = {n}"),
        );
    }
    let cap = cx
        .arch
        .space(MemSpace::Scaling)
        .map(|s| s.capacity / 8)
        .unwrap_or(512);
    if n > cap {
        cx.error(
            Rule::ScaleTile,
            format!(
                "Scaling tile N must be at most {cap} (the 4 KiB buffer); `{name}` has N = {n}"
            ),
        );
    }
    if let Some(cols) = out_cols {
        if n < cols {
            cx.error(
                Rule::ScaleTile,
                format!(
                    "one scale word per output column: {cols} columns but `{name}` holds {n} words"
                ),
            );
        }
    }
}
