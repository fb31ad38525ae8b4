//! Vector-unit ops (element-wise, scalar forms, row/column reductions and broadcasts, casts,
//! fills), `set_validshape` and `fillpad`.

use super::{CodegenError, Emitter};
use crate::ir::{DType, MemSpace, PadValue, ParamKind, RoundMode, ScalarArg, TileRef, VectorOp};

fn round_name(r: RoundMode) -> &'static str {
    match r {
        RoundMode::Rint => "RoundMode::CAST_RINT",
        RoundMode::Round => "RoundMode::CAST_ROUND",
        RoundMode::Floor => "RoundMode::CAST_FLOOR",
        RoundMode::Ceil => "RoundMode::CAST_CEIL",
        RoundMode::Trunc => "RoundMode::CAST_TRUNC",
    }
}

/// A float literal as C++ (`0.125f`, infinities and NaN through the compiler builtins).
fn float_literal(v: f64) -> String {
    let f = v as f32;
    if f.is_nan() {
        "__builtin_nanf(\"\")".into()
    } else if f.is_infinite() {
        if f > 0.0 {
            "__builtin_huge_valf()".into()
        } else {
            "-__builtin_huge_valf()".into()
        }
    } else {
        let s = format!("{f:?}");
        if s.contains('e') || s.contains('.') {
            format!("{s}f")
        } else {
            format!("{s}.0f")
        }
    }
}

/// The scalar operand of a vector op, in the tile's element type.
fn scalar(e: &mut Emitter<'_>, a: &ScalarArg, tile: &TileRef) -> Result<String, CodegenError> {
    let dt = e.decl(tile.tile)?.ty.dtype;
    let ct = super::ctype(dt);
    Ok(match a {
        ScalarArg::Const(v) => {
            if dt.is_float() {
                let lit = float_literal(*v);
                if dt == DType::F32 {
                    lit
                } else {
                    format!("static_cast<{ct}>({lit})")
                }
            } else {
                format!("static_cast<{ct}>({})", *v as i64)
            }
        }
        ScalarArg::Param(p) => {
            let param =
                e.k.try_param(*p)
                    .ok_or_else(|| e.malformed(format!("argument {} is not declared", p.0)))?;
            let name = e.param_names[p.0 as usize].clone();
            match param.kind {
                ParamKind::Scalar { dtype } if dtype == dt => name,
                ParamKind::Scalar { .. } => format!("static_cast<{ct}>({name})"),
                ParamKind::Tensor { .. } => {
                    return Err(e.malformed(format!("`{}` is a tensor, not a scalar", param.name)))
                }
            }
        }
    })
}

pub(super) fn emit(e: &mut Emitter<'_>, op: &VectorOp) -> Result<(), CodegenError> {
    let name = op.instruction(e.k);
    let line = match op {
        VectorOp::Unary { dst, src, .. } | VectorOp::Expand { dst, src, .. } => {
            let (d, s) = (e.tile(dst)?, e.tile(src)?);
            format!("{name}({d}, {s});")
        }
        VectorOp::Binary { dst, lhs, rhs, .. } => {
            let (d, l, r) = (e.tile(dst)?, e.tile(lhs)?, e.tile(rhs)?);
            format!("{name}({d}, {l}, {r});")
        }
        VectorOp::BinaryScalar {
            dst,
            src,
            scalar: a,
            ..
        } => {
            let (d, s) = (e.tile(dst)?, e.tile(src)?);
            let v = scalar(e, a, src)?;
            format!("{name}({d}, {s}, {v});")
        }
        VectorOp::Reduce { axis, dst, src, .. } => {
            let (d, s) = (e.tile(dst)?, e.tile(src)?);
            match axis {
                // The A5 row reductions take a scratch tile they do not use; pass the source.
                crate::ir::Axis::Row => {
                    format!("{name}({d}, {s}, {s});  // tmp operand unused on A5")
                }
                crate::ir::Axis::Col => format!("{name}({d}, {s});"),
            }
        }
        VectorOp::Broadcast {
            dst, src, operand, ..
        } => {
            let (d, s, o) = (e.tile(dst)?, e.tile(src)?, e.tile(operand)?);
            format!("{name}({d}, {s}, {o});")
        }
        VectorOp::Cast { dst, src, round } => {
            let (d, s) = (e.tile(dst)?, e.tile(src)?);
            format!("{name}({d}, {s}, {});", round_name(*round))
        }
        VectorOp::LeakyRelu { dst, src, slope } => {
            let (d, s) = (e.tile(dst)?, e.tile(src)?);
            let v = scalar(e, slope, src)?;
            format!("{name}({d}, {s}, {v});")
        }
        VectorOp::Fill { dst, value } => {
            let d = e.tile(dst)?;
            let v = scalar(e, value, dst)?;
            format!("{name}({d}, {v});")
        }
        VectorOp::SetValidShape { tile, rows, cols } => {
            let decl = e.decl(tile.tile)?;
            let (vr, vc) = (
                decl.ty.valid_rows == crate::ir::ValidDim::Dynamic,
                decl.ty.valid_cols == crate::ir::ValidDim::Dynamic,
            );
            let t = e.tile(tile)?;
            let (r, c) = (e.expr(rows), e.expr(cols));
            match (vr, vc) {
                (true, true) => format!("{t}.SetValidShape({r}, {c});"),
                (true, false) => format!("{t}.SetValidRow({r});"),
                (false, true) => format!("{t}.SetValidCol({c});"),
                (false, false) => {
                    return Err(e.unsupported(
                        op.name(),
                        format!(
                            "tile `{}` has a static valid shape; declare it with DYNAMIC valid dims to set it at run time",
                            decl.name
                        ),
                    ))
                }
            }
        }
        VectorOp::FillPad { tile } => {
            let decl = e.decl(tile.tile)?;
            let (space, pad) = (decl.ty.space, decl.ty.pad);
            let ty = e.tile_type(tile.tile)?;
            let t = e.tile(tile)?;
            match (space, pad) {
                (_, PadValue::Null) => {
                    return Err(e.unsupported(
                        op.name(),
                        format!("tile `{}` has no pad value to fill with", decl.name),
                    ))
                }
                (MemSpace::Mat, PadValue::Zero) => format!("TFILLPAD({t}, {t});"),
                (MemSpace::Mat, p) => format!("TFILLPAD<{ty}, PadValue::{p:?}>({t}, {t});"),
                (MemSpace::Vec, _) => format!("TFILLPAD_INPLACE({t}, {t});"),
                (other, _) => {
                    return Err(e.unsupported(
                        op.name(),
                        format!("fillpad runs on Mat (MTE2) or Vec (V) tiles, not {other}"),
                    ))
                }
            }
        }
    };
    e.line(line);
    Ok(())
}
