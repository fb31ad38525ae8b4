//! Static validity: every number a kernel states is in range before any other rule reads it.
//!
//! A hand-edited or generated kernel can state numbers no machine runs: a tensor dimension of
//! 0 or -64, a tile of 2^63 rows, buffer slot -1, a GM window at a negative offset or whose
//! last element overflows i64, a constant `1 / 0`. These rules run first; when one fails, the
//! other families are not run (they compute with these numbers and assume them in range), so
//! the report holds the range findings alone. Expressions that read runtime values (variables,
//! scalar arguments, block ids) are checked where their constant parts fail; their values are
//! the simulator's to check.

use super::{Ctx, Rule};
use crate::ir::{
    CoreKind, Expr, GatherOp, GmView, Kernel, Layout, LoadStoreOp, MemSpace, MoveOp, NoEnv, Op,
    OpLoc, ParamKind, ScalarOp, Stmt, TileRef, ValidDim,
};

/// Runs the range rules; `true` when they found no error (the other families may run).
pub(super) fn check(cx: &mut Ctx<'_>) -> bool {
    let before = cx.diags.len();
    check_params(cx);
    check_tiles(cx);
    for section in [CoreKind::Cube, CoreKind::Vector] {
        let mut index = 0;
        stmts(cx, cx.kernel.section(section), section, &mut index);
    }
    cx.diags.len() == before
}

/// The value of `e` when it reads nothing at run time: `Ok(None)` when it does, `Err` with
/// the failing sub-expression (the innermost constant one) and the cause.
fn fold(e: &Expr) -> Result<Option<i64>, String> {
    match e {
        Expr::Const(v) => Ok(Some(*v)),
        Expr::Var(_) | Expr::Param(_) | Expr::BlockIdx | Expr::BlockDim | Expr::SubBlockIdx => {
            Ok(None)
        }
        Expr::Bin(op, a, b) => {
            let (x, y) = (fold(a)?, fold(b)?);
            let (Some(x), Some(y)) = (x, y) else {
                return Ok(None);
            };
            Expr::Bin(*op, Box::new(Expr::Const(x)), Box::new(Expr::Const(y)))
                .eval(&NoEnv)
                .map(Some)
                .map_err(|err| format!("`{e}`: {err}"))
        }
        Expr::Select(c, a, b) => {
            let (c, a, b) = (fold(c)?, fold(a)?, fold(b)?);
            Ok(match c {
                Some(0) => b,
                Some(_) => a,
                None => None,
            })
        }
    }
}

/// Folds `e`, reporting a constant part that fails; `None` for a runtime or failed value.
fn value(cx: &mut Ctx<'_>, what: &str, e: &Expr) -> Option<i64> {
    match fold(e) {
        Ok(v) => v,
        Err(msg) => {
            cx.error(
                Rule::ConstExpr,
                format!("{what}: the constant expression {msg}"),
            );
            None
        }
    }
}

fn check_params(cx: &mut Ctx<'_>) {
    let kernel = cx.kernel;
    for p in &kernel.params {
        cx.at_decl(format!("argument `{}`", p.name));
        if let Some(r) = &p.range {
            if !(r.min.is_finite() && r.max.is_finite() && r.min <= r.max) {
                cx.error(
                    Rule::ParamRange,
                    format!(
                        "the value range [{}, {}] is empty or not finite",
                        r.min, r.max
                    ),
                );
            }
        }
        let ParamKind::Tensor { dtype, shape, .. } = &p.kind else {
            continue;
        };
        // Bytes of the constant dimensions, checked.
        let mut bytes = Some(i64::try_from(dtype.size_bytes()).unwrap_or(i64::MAX));
        let mut refused = false;
        for (i, d) in shape.iter().enumerate() {
            match value(cx, &format!("dimension {i}"), d) {
                Some(n) if n <= 0 => {
                    refused = true;
                    cx.error(
                        Rule::ParamShape,
                        format!(
                            "dimension {i} is {n}: a tensor's dimensions must be positive (shape [{}])",
                            shape.iter().map(|e| e.to_string()).collect::<Vec<_>>().join(", ")
                        ),
                    );
                }
                Some(n) => bytes = bytes.and_then(|b| b.checked_mul(n)),
                None => refused |= fold(d).is_err(),
            }
        }
        if bytes.is_none() && !refused {
            cx.error(
                Rule::ParamShape,
                format!(
                    "shape [{}] of {dtype} takes more than i64::MAX bytes",
                    shape
                        .iter()
                        .map(|e| e.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
        }
    }
}

/// Largest bytes any on-chip space of the machine holds: no tile dimension, fractal, buffer
/// count or address can be larger.
fn largest_space(cx: &Ctx<'_>) -> u64 {
    MemSpace::ON_CHIP
        .iter()
        .filter_map(|s| cx.arch.space(*s).map(|spec| spec.capacity))
        .max()
        .unwrap_or(0)
}

fn check_tiles(cx: &mut Ctx<'_>) {
    let kernel = cx.kernel;
    let most = largest_space(cx);
    for decl in &kernel.tiles {
        cx.at_decl(format!("tile `{}`", decl.name));
        let ty = &decl.ty;
        // A GM "tile" is refused by `tile-shape`; its numbers are never used.
        let cap = match cx.arch.space(ty.space) {
            Some(spec) => spec.capacity,
            None => most,
        };
        let mut nums = vec![("rows", ty.rows), ("cols", ty.cols)];
        if let Some(f) = ty.fractal {
            nums.push(("fractal rows", f.rows));
            nums.push(("fractal cols", f.cols));
        }
        for (what, dim) in [("valid rows", ty.valid_rows), ("valid cols", ty.valid_cols)] {
            if let ValidDim::Static(n) = dim {
                nums.push((what, n));
            }
        }
        nums.push(("buffers", u64::from(decl.buffers)));
        for (what, n) in nums {
            if n > cap {
                cx.error(
                    Rule::TileRange,
                    format!(
                        "{what} {n} is more than the capacity of {} ({cap} B): no {} tile can have it",
                        ty.space, ty.space
                    ),
                );
            }
        }
        if let Some(addr) = decl.addr {
            if addr >= cap {
                cx.error(
                    Rule::TileRange,
                    format!(
                        "address {addr:#x} is past the end of {} ({cap} B)",
                        ty.space
                    ),
                );
            }
        }
    }
}

fn stmts(cx: &mut Ctx<'_>, list: &[Stmt], section: CoreKind, index: &mut usize) {
    for s in list {
        let at = |cx: &mut Ctx<'_>, subject: &str, index: usize| {
            cx.loc = Some(OpLoc { section, index });
            cx.subject = subject.to_string();
        };
        match s {
            Stmt::Op(op) => {
                at(cx, op.name(), *index);
                check_op(cx, op);
                *index += 1;
            }
            Stmt::Let { value: v, .. } => {
                at(cx, "let", *index);
                value(cx, "the value", v);
            }
            Stmt::For {
                start, end, body, ..
            } => {
                at(cx, "for", *index);
                value(cx, "the start", start);
                value(cx, "the end", end);
                stmts(cx, body, section, index);
            }
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => {
                at(cx, "if", *index);
                value(cx, "the condition", cond);
                stmts(cx, then_body, section, index);
                stmts(cx, else_body, section, index);
            }
        }
    }
}

fn check_op(cx: &mut Ctx<'_>, op: &Op) {
    let mut refs: Vec<&TileRef> = op.tile_reads();
    refs.extend(op.tile_writes());
    match op {
        Op::LoadStore(LoadStoreOp::Load { dst, src }) => view(cx, "the GM window", src, Some(dst)),
        Op::LoadStore(LoadStoreOp::Store { dst, src, .. }) => {
            view(cx, "the GM window", dst, Some(src))
        }
        Op::Move(MoveOp::Move { offset, .. }) => {
            for e in offset.iter().flatten() {
                value(cx, "the offset", e);
            }
        }
        Op::Gather(GatherOp::GatherInL1 {
            indices,
            block_table,
            block_size,
            col_offset,
            ..
        }) => {
            view(cx, "the indices window", indices, None);
            view(cx, "the block-table window", block_table, None);
            value(cx, "block_size", block_size);
            value(cx, "col_offset", col_offset);
        }
        Op::Vector(v) => {
            if let Some((tile, rows, cols)) = v.valid_shape_set() {
                refs.push(tile);
                value(cx, "rows", rows);
                value(cx, "cols", cols);
            }
        }
        Op::Scalar(ScalarOp::ReadScalar { index, .. })
        | Op::Scalar(ScalarOp::ReadTileScalar { index, .. }) => {
            value(cx, "the index", index);
        }
        Op::Scalar(ScalarOp::WriteScalar {
            index, value: v, ..
        }) => {
            value(cx, "the index", index);
            value(cx, "the value", v);
        }
        Op::Matmul(_) | Op::Sort(_) | Op::Sync(_) => {}
    }
    for r in refs {
        let Some(v) = value(cx, "the buffer slot", &r.slot) else {
            continue;
        };
        let Some(decl) = cx.kernel.try_tile(r.tile) else {
            continue;
        };
        if v < 0 || v >= i64::from(decl.buffers) {
            cx.error(
                Rule::TileSlot,
                format!(
                    "buffer slot {v} of tile `{}` is outside 0..{} (the tile has {} buffer(s))",
                    decl.name, decl.buffers, decl.buffers
                ),
            );
        }
    }
}

/// Elements of tensor argument `v.tensor` when its shape is constant and positive (another
/// shape is `param-shape`'s finding).
fn tensor_elems(kernel: &Kernel, v: &GmView) -> Option<i64> {
    let ParamKind::Tensor { shape, .. } = &kernel.try_param(v.tensor)?.kind else {
        return None;
    };
    shape.iter().try_fold(1i64, |acc, d| {
        let n = fold(d).ok()?.filter(|&n| n > 0)?;
        acc.checked_mul(n)
    })
}

/// A GM window: no negative offset, size or stride; its last element (and, for a load or a
/// store, the last element the tile's static valid shape reaches) an i64 inside the tensor.
fn view(cx: &mut Ctx<'_>, what: &str, v: &GmView, tile: Option<&TileRef>) {
    let offset = value(cx, &format!("{what}'s offset"), &v.offset);
    let rows = value(cx, &format!("{what}'s rows"), &v.rows);
    let cols = value(cx, &format!("{what}'s cols"), &v.cols);
    let stride = value(cx, &format!("{what}'s stride"), &v.stride);
    for (name, n) in [
        ("offset", offset),
        ("rows", rows),
        ("cols", cols),
        ("stride", stride),
    ] {
        if let Some(n) = n.filter(|n| *n < 0) {
            cx.error(
                Rule::ViewRange,
                format!("{what}'s {name} is {n}: GM window numbers must not be negative"),
            );
        }
    }
    let (Some(offset), Some(rows), Some(cols), Some(stride)) = (offset, rows, cols, stride) else {
        return;
    };
    if offset < 0 || rows < 0 || cols < 0 || stride < 0 {
        return;
    }
    let elems = tensor_elems(cx.kernel, v);
    if let Some(n) = elems {
        if offset >= n {
            cx.error(
                Rule::ViewRange,
                format!("{what} starts at element {offset}, past the tensor's {n} elements"),
            );
            return;
        }
    }
    if last_element(v.layout, offset, rows, cols, stride).is_none() {
        cx.error(
            Rule::ViewRange,
            format!(
                "{what}'s last element (offset {offset} + {rows} rows x {cols} cols, stride {stride}) overflows i64"
            ),
        );
        return;
    }
    // What a load or a store reaches: the tile's valid region (a smaller window is
    // `view-shape`'s finding).
    let reached = tile
        .and_then(|t| cx.kernel.try_tile(t.tile))
        .and_then(|d| match (d.ty.valid_rows, d.ty.valid_cols) {
            (ValidDim::Static(r), ValidDim::Static(c)) => Some((r, c)),
            _ => None,
        })
        .and_then(|(r, c)| Some((i64::try_from(r).ok()?, i64::try_from(c).ok()?)))
        .filter(|&(r, c)| r <= rows && c <= cols && !matches!(v.layout, l if l.is_boxed()));
    if let (Some(n), Some((r, c))) = (elems, reached) {
        if let Some(end) = last_element(v.layout, offset, r, c, stride) {
            if end >= n {
                cx.error(
                    Rule::ViewRange,
                    format!(
                        "{what} reaches element {end} for the tile's valid {r}x{c}, past the tensor's {n} elements"
                    ),
                );
            }
        }
    }
}

/// The element index of a window's last element, `None` on i64 overflow (or an empty window
/// at `offset`).
fn last_element(layout: Layout, offset: i64, rows: i64, cols: i64, stride: i64) -> Option<i64> {
    if rows == 0 || cols == 0 {
        return Some(offset);
    }
    let (outer, inner) = match layout {
        Layout::DN => (cols, rows),
        Layout::ND => (rows, cols),
        // A boxed window is a tile-shaped block of rows x cols elements.
        _ => return offset.checked_add(rows.checked_mul(cols)?.checked_sub(1)?),
    };
    offset
        .checked_add((outer - 1).checked_mul(stride)?)?
        .checked_add(inner - 1)
}
