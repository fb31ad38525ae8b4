//! `gather_in_l1` (ASCEND950.md §8): dtypes, ranks, `size <= C`, an NZ Mat destination.

use super::{Ctx, Rule};
use crate::ir::{DType, Expr, GatherOp, GmView, Layout, MemSpace, ParamId, ParamKind};

fn tensor(cx: &Ctx<'_>, p: ParamId) -> Option<(String, DType, Vec<Expr>)> {
    let param = cx.kernel.try_param(p)?;
    match &param.kind {
        ParamKind::Tensor { dtype, shape, .. } => Some((param.name.clone(), *dtype, shape.clone())),
        ParamKind::Scalar { .. } => None,
    }
}

fn check_list(
    cx: &mut Ctx<'_>,
    view: &GmView,
    rule: Rule,
    what: &str,
    dtypes: &[DType],
) -> Option<u64> {
    let (name, dtype, shape) = tensor(cx, view.tensor)?;
    if !dtypes.contains(&dtype) {
        let allowed: Vec<&str> = dtypes.iter().map(|d| d.name()).collect();
        cx.error(
            rule,
            format!(
                "gather_in_l1 {what} `{name}` is {dtype}; it must be {}",
                allowed.join(" or ")
            ),
        );
    }
    if shape.len() != 2 {
        cx.error(
            rule,
            format!(
                "gather_in_l1 {what} `{name}` must be 2-D, it has {} dims",
                shape.len()
            ),
        );
    }
    if let Some(r) = view.rows.as_const() {
        if r != 1 {
            cx.error(
                rule,
                format!("gather_in_l1 {what} is a [1, n] row, the window has {r} rows"),
            );
        }
    }
    match view.cols.as_const() {
        Some(c) if c <= 0 => {
            cx.error(
                rule,
                format!("gather_in_l1 {what} must be non-empty, the window has {c} columns"),
            );
            None
        }
        Some(c) => Some(c as u64),
        None => None,
    }
}

pub(super) fn check(cx: &mut Ctx<'_>, op: &GatherOp) {
    let GatherOp::GatherInL1 {
        dst,
        src,
        indices,
        block_table,
        block_size,
        size,
        ..
    } = op;
    let n = check_list(
        cx,
        indices,
        Rule::GatherIndices,
        "indices",
        &[DType::I32, DType::I64],
    );
    check_list(
        cx,
        block_table,
        Rule::GatherBlockTable,
        "block table",
        &[DType::I32],
    );
    if let Some(bs) = block_size.as_const() {
        if bs <= 0 {
            cx.error(
                Rule::GatherBlockTable,
                format!("block_size must be positive, got {bs}"),
            );
        }
    }
    let src_info = tensor(cx, *src);
    if let Some((name, dtype, shape)) = &src_info {
        if !cx.arch.gather_dtypes.contains(dtype) {
            let allowed: Vec<&str> = cx.arch.gather_dtypes.iter().map(|d| d.name()).collect();
            cx.error(
                Rule::GatherDtype,
                format!(
                    "gather_in_l1 source `{name}` is {dtype}; it must be {}",
                    allowed.join(", ")
                ),
            );
        }
        if shape.len() != 2 {
            cx.error(
                Rule::GatherDtype,
                format!(
                    "gather_in_l1 source `{name}` must be 2-D [T, C], it has {} dims",
                    shape.len()
                ),
            );
        } else if let Some(c) = shape[1].as_const() {
            if *size as i64 > c {
                cx.error(
                    Rule::GatherSize,
                    format!("gather_in_l1 size {size} exceeds the source's {c} columns"),
                );
            }
        }
    }
    if *size == 0 {
        cx.error(Rule::GatherSize, "gather_in_l1 size must be at least 1");
    }
    let Some(d) = cx.tile(dst) else { return };
    let ty = &d.ty;
    if ty.space != MemSpace::Mat || ty.layout != Layout::NZ {
        cx.error(
            Rule::GatherDst,
            format!(
                "gather_in_l1 lands in an NZ Mat (L1) tile; `{}` is {} {}",
                d.name, ty.space, ty.layout
            ),
        );
    }
    if let Some((_, dtype, _)) = &src_info {
        if *dtype != ty.dtype {
            cx.error(
                Rule::GatherDst,
                format!(
                    "gather_in_l1 copies bytes: source is {dtype}, `{}` is {}",
                    d.name, ty.dtype
                ),
            );
        }
    }
    if *size > ty.cols {
        cx.error(
            Rule::GatherSize,
            format!(
                "gather_in_l1 size {size} exceeds the destination's {} columns",
                ty.cols
            ),
        );
    }
    if let Some(n) = n {
        let rows = ty.rows;
        if n > rows {
            cx.error(
                Rule::GatherSize,
                format!(
                    "gather_in_l1 of {n} indices needs {n} rows; `{}` has {rows}",
                    d.name
                ),
            );
        }
    }
}
