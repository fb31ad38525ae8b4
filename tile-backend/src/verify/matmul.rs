//! Cube matmul: operand spaces and layouts, dtype triples and the m, k, n limits (§3, §10).

use super::{static_dim, Ctx, Rule};
use crate::ir::{MatmulOp, MemSpace, TileDecl, TileRef};

fn operand<'a>(cx: &mut Ctx<'a>, r: &TileRef, role: &str, space: MemSpace) -> Option<&'a TileDecl> {
    let d = cx.tile(r)?;
    if d.ty.space != space {
        cx.error(
            Rule::MatmulSpace,
            format!(
                "matmul {role} must be a {space} tile, `{}` is in {}",
                d.name, d.ty.space
            ),
        );
        return None;
    }
    if let Some(layout) = cx.arch.required_layout(space) {
        if d.ty.layout != layout {
            cx.error(
                Rule::MatmulLayout,
                format!(
                    "matmul {role} in {space} must be {layout} on {}, `{}` is {}",
                    cx.machine(),
                    d.name,
                    d.ty.layout
                ),
            );
        }
    }
    Some(d)
}

pub(super) fn check(cx: &mut Ctx<'_>, op: &MatmulOp) {
    let MatmulOp::Matmul {
        dst, a, b, bias, ..
    } = op;
    let da = operand(cx, a, "A", MemSpace::Left);
    let db = operand(cx, b, "B", MemSpace::Right);
    let dc = operand(cx, dst, "C", MemSpace::Acc);
    let (Some(da), Some(db), Some(dc)) = (da, db, dc) else {
        return;
    };
    let (ta, tb, tc) = (&da.ty, &db.ty, &dc.ty);
    if !cx
        .arch
        .matmul_dtypes
        .iter()
        .any(|t| (t.a, t.b, t.acc) == (ta.dtype, tb.dtype, tc.dtype))
    {
        let allowed: Vec<String> = cx
            .arch
            .matmul_dtypes
            .iter()
            .map(|t| format!("{} x {} -> {}", t.a, t.b, t.acc))
            .collect();
        cx.error(
            Rule::MatmulDtype,
            format!(
                "{} x {} -> {} is not a cube dtype combination on {}; allowed: {}",
                ta.dtype,
                tb.dtype,
                tc.dtype,
                cx.machine(),
                allowed.join(", ")
            ),
        );
    }
    let m = static_dim(ta.valid_rows).unwrap_or(ta.rows);
    let k = static_dim(ta.valid_cols).unwrap_or(ta.cols);
    let kb = static_dim(tb.valid_rows).unwrap_or(tb.rows);
    let n = static_dim(tb.valid_cols).unwrap_or(tb.cols);
    let max = cx.arch.matmul_max_dim;
    for (name, v) in [("m", m), ("k", k), ("n", n)] {
        if v == 0 || v > max {
            cx.error(
                Rule::MatmulShape,
                format!("matmul {name} = {v} is outside 1..={max}"),
            );
        }
    }
    if k != kb {
        cx.error(
            Rule::MatmulShape,
            format!("matmul inner dimensions differ: A is {m}x{k} but B is {kb}x{n}"),
        );
    }
    if tc.rows < m || tc.cols < n {
        cx.error(
            Rule::MatmulShape,
            format!(
                "the {m}x{n} product does not fit the {}x{} Acc tile `{}`",
                tc.rows, tc.cols, dc.name
            ),
        );
    }
    if let Some(bias) = bias {
        let Some(bd) = cx.tile(bias) else { return };
        if bd.ty.space != MemSpace::Bias {
            cx.error(
                Rule::MatmulBias,
                format!(
                    "matmul bias must be a Bias tile, `{}` is in {}",
                    bd.name, bd.ty.space
                ),
            );
        } else if bd.ty.dtype != tc.dtype {
            cx.error(
                Rule::MatmulBias,
                format!(
                    "bias `{}` is {} but the accumulator is {}",
                    bd.name, bd.ty.dtype, tc.dtype
                ),
            );
        } else if bd.ty.rows != 1 || bd.ty.cols < n {
            cx.error(
                Rule::MatmulBias,
                format!(
                    "bias must be [1, >= n = {n}], `{}` is [{}, {}]",
                    bd.name, bd.ty.rows, bd.ty.cols
                ),
            );
        }
    }
}
