//! Ids, scopes, scalar arguments and which core may touch which space.

use super::{Ctx, Rule};
use crate::ir::{
    CoreKind, DType, Expr, GatherOp, GmView, LoadStoreOp, MemSpace, MoveOp, Op, ParamId, ParamKind,
    ScalarArg, ScalarOp, Scale, TileRef, VarId,
};
use std::collections::HashSet;

/// Channels: depth at least 1.
pub(super) fn check_channels(cx: &mut Ctx<'_>) {
    for ch in &cx.kernel.channels {
        if ch.depth == 0 {
            cx.at_decl(format!("channel `{}`", ch.name));
            cx.error(
                Rule::ChannelDepth,
                "channel depth must be at least 1, got 0",
            );
        }
    }
}

/// Variables in scope, runtime arguments integer scalars.
pub(super) fn check_expr(cx: &mut Ctx<'_>, e: &Expr, scope: &HashSet<VarId>) {
    let mut problems = vec![];
    e.visit(&mut |x| match x {
        Expr::Var(v) if !scope.contains(v) => problems.push((Rule::VarScope, format!(
            "variable v{} is used outside the loop or branch that defines it (or before its definition)",
            v.0
        ))),
        Expr::Param(p) => match cx.kernel.try_param(*p).map(|p| &p.kind) {
            None => problems.push((Rule::UnknownParam, format!("argument {} is not declared", p.0))),
            Some(ParamKind::Scalar {
                dtype: DType::I32 | DType::I64 | DType::U8 | DType::I8,
            }) => {}
            Some(ParamKind::Scalar { dtype }) => problems.push((Rule::ScalarParam, format!(
                "argument `{}` is a {dtype} scalar; index expressions need an integer scalar",
                cx.kernel.params[p.0 as usize].name
            ))),
            Some(ParamKind::Tensor { .. }) => problems.push((Rule::ScalarParam, format!(
                "argument `{}` is a GM tensor, not a scalar; read an element with read_scalar",
                cx.kernel.params[p.0 as usize].name
            ))),
        },
        _ => {}
    });
    for (rule, msg) in problems {
        cx.error(rule, msg);
    }
}

fn check_tensor(cx: &mut Ctx<'_>, p: ParamId) {
    match cx.kernel.try_param(p).map(|p| &p.kind) {
        None => cx.error(
            Rule::UnknownParam,
            format!("argument {} is not declared", p.0),
        ),
        Some(ParamKind::Scalar { .. }) => {
            let name = cx.kernel.params[p.0 as usize].name.clone();
            cx.error(
                Rule::ScalarParam,
                format!("argument `{name}` is a scalar where a GM tensor is needed"),
            )
        }
        Some(ParamKind::Tensor { .. }) => {}
    }
}

fn check_view(cx: &mut Ctx<'_>, v: &GmView, scope: &HashSet<VarId>) {
    check_tensor(cx, v.tensor);
    for e in [&v.offset, &v.rows, &v.cols, &v.stride] {
        check_expr(cx, e, scope);
    }
}

fn check_scalar_arg(cx: &mut Ctx<'_>, s: &ScalarArg) {
    if let ScalarArg::Param(p) = s {
        match cx.kernel.try_param(*p).map(|p| &p.kind) {
            None => cx.error(
                Rule::UnknownParam,
                format!("argument {} is not declared", p.0),
            ),
            Some(ParamKind::Scalar { .. }) => {}
            Some(ParamKind::Tensor { .. }) => {
                let name = cx.kernel.params[p.0 as usize].name.clone();
                cx.error(
                    Rule::ScalarParam,
                    format!("argument `{name}` is a GM tensor; a vector scalar operand must be a scalar argument"),
                )
            }
        }
    }
}

/// Ids are declared, expressions are in scope, and each section touches only its core's spaces.
pub(super) fn check_op(cx: &mut Ctx<'_>, op: &Op, section: CoreKind, scope: &HashSet<VarId>) {
    let mut refs: Vec<&TileRef> = op.tile_reads();
    refs.extend(op.tile_writes());
    match op {
        Op::Vector(v) => {
            if let Some((tile, rows, cols)) = v.valid_shape_set() {
                refs.push(tile);
                check_expr(cx, rows, scope);
                check_expr(cx, cols, scope);
            }
            for s in v.scalar_args() {
                check_scalar_arg(cx, s);
            }
        }
        Op::LoadStore(LoadStoreOp::Load { src, .. }) => check_view(cx, src, scope),
        Op::LoadStore(LoadStoreOp::Store { dst, scale, .. }) => {
            check_view(cx, dst, scope);
            if let Some(Scale::Scalar(p)) = scale {
                if cx.kernel.try_param(*p).is_none() {
                    cx.error(
                        Rule::UnknownParam,
                        format!("argument {} is not declared", p.0),
                    );
                }
            }
        }
        Op::Move(MoveOp::Move { offset, scale, .. }) => {
            for e in offset.iter().flatten() {
                check_expr(cx, e, scope);
            }
            if let Some(Scale::Scalar(p)) = scale {
                if cx.kernel.try_param(*p).is_none() {
                    cx.error(
                        Rule::UnknownParam,
                        format!("argument {} is not declared", p.0),
                    );
                }
            }
        }
        Op::Gather(GatherOp::GatherInL1 {
            src,
            indices,
            block_table,
            block_size,
            col_offset,
            ..
        }) => {
            check_tensor(cx, *src);
            check_view(cx, indices, scope);
            check_view(cx, block_table, scope);
            check_expr(cx, block_size, scope);
            check_expr(cx, col_offset, scope);
        }
        Op::Scalar(ScalarOp::ReadScalar { tensor, index, .. }) => {
            check_tensor(cx, *tensor);
            check_expr(cx, index, scope);
        }
        Op::Scalar(ScalarOp::ReadTileScalar { index, .. }) => check_expr(cx, index, scope),
        Op::Scalar(ScalarOp::WriteScalar {
            tensor,
            index,
            value,
        }) => {
            check_tensor(cx, *tensor);
            check_expr(cx, index, scope);
            check_expr(cx, value, scope);
        }
        Op::Sync(s) => {
            if let Some(channel) = s.channel().filter(|c| cx.kernel.try_channel(*c).is_none()) {
                cx.error(
                    Rule::UnknownChannel,
                    format!(
                        "channel id {} is not declared (the kernel has {} channels)",
                        channel.0,
                        cx.kernel.channels.len()
                    ),
                );
            }
        }
        Op::Matmul(_) | Op::Sort(_) => {}
    }
    for r in &refs {
        check_expr(cx, &r.slot, scope);
    }

    // Which core may touch which space: the Fixpipe (cube) writes into UB, MTE3 (vector) into L1,
    // and the cube sets the valid shape of its own handle of a Fixpipe destination in UB (the
    // public CPU model reads it; ASCEND950.md §12).
    let crossing_dst = match op {
        Op::Vector(v) => match v.valid_shape_set() {
            Some((tile, ..)) if section == CoreKind::Cube => cx
                .kernel
                .try_tile(tile.tile)
                .filter(|d| d.ty.space == MemSpace::Vec)
                .map(|_| tile.tile),
            Some(_) | None => None,
        },
        Op::Move(MoveOp::Move { dst, src, .. }) => {
            let spaces = (
                cx.kernel.try_tile(src.tile).map(|d| d.ty.space),
                cx.kernel.try_tile(dst.tile).map(|d| d.ty.space),
            );
            match (section, spaces) {
                (CoreKind::Cube, (Some(MemSpace::Acc), Some(MemSpace::Vec)))
                | (CoreKind::Vector, (Some(MemSpace::Vec), Some(MemSpace::Mat))) => Some(dst.tile),
                _ => None,
            }
        }
        Op::LoadStore(_)
        | Op::Matmul(_)
        | Op::Gather(_)
        | Op::Sort(_)
        | Op::Scalar(_)
        | Op::Sync(_) => None,
    };
    for r in refs {
        let Some(decl) = cx.tile(r) else { continue };
        if Some(r.tile) == crossing_dst {
            continue;
        }
        if let Some(core) = decl.ty.space.core() {
            if core != section {
                let owner = match core {
                    CoreKind::Cube => "the cube core",
                    CoreKind::Vector => "the vector cores",
                };
                cx.error(
                    Rule::SectionSpace,
                    format!(
                        "{section} code cannot touch {} tile `{}`: {} belongs to {owner} (data crosses cores only by Fixpipe moves Acc -> Vec, MTE3 moves Vec -> Mat, or GM)",
                        decl.ty.space, decl.name, decl.ty.space.hardware_name()
                    ),
                );
            }
        }
    }
}
