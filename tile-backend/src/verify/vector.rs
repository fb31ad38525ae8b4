//! Vector ops: operands in UB, matching dtypes and shapes, each in a dtype its PTO instruction
//! takes on the target (the machine model's instruction -> dtypes table); reductions take the
//! layouts PTO's TROW*/TCOL* accept and pad correctly; fillpad and set_validshape are meaningful.

use super::{static_dim, Ctx, Rule};
use crate::ir::{
    Axis, BinaryOp, DType, Layout, MemSpace, PadValue, ReduceOp, TileDecl, TileRef, UnaryOp,
    ValidDim, VectorOp,
};

fn vec_tile<'a>(cx: &mut Ctx<'a>, r: &TileRef, role: &str) -> Option<&'a TileDecl> {
    let d = cx.tile(r)?;
    if d.ty.space != MemSpace::Vec {
        cx.error(
            Rule::VectorSpace,
            format!(
                "vector {role} must be a Vec (UB) tile, `{}` is in {}",
                d.name, d.ty.space
            ),
        );
        return None;
    }
    Some(d)
}

fn arithmetic(cx: &mut Ctx<'_>, d: &TileDecl) {
    if d.ty.dtype.is_64bit() || d.ty.dtype.is_fp8() {
        cx.error(
            Rule::VectorDtype,
            format!(
                "vector arithmetic on {} is not supported (`{}`)",
                d.ty.dtype, d.name
            ),
        );
    }
}

fn same_dtype(cx: &mut Ctx<'_>, a: &TileDecl, b: &TileDecl) {
    if a.ty.dtype != b.ty.dtype {
        cx.error(
            Rule::VectorDtype,
            format!(
                "operands must share a dtype: `{}` is {} but `{}` is {} (convert with cast)",
                a.name, a.ty.dtype, b.name, b.ty.dtype
            ),
        );
    }
}

type Shape = (Option<u64>, Option<u64>);

fn valid(d: &TileDecl) -> Shape {
    (static_dim(d.ty.valid_rows), static_dim(d.ty.valid_cols))
}

fn dim_eq(cx: &mut Ctx<'_>, what: &str, a: (&TileDecl, Option<u64>), b: (&TileDecl, Option<u64>)) {
    if let (Some(x), Some(y)) = (a.1, b.1) {
        if x != y {
            cx.error(
                Rule::VectorShape,
                format!(
                    "{what} differ: `{}` has {x}, `{}` has {y}",
                    a.0.name, b.0.name
                ),
            );
        }
    }
}

fn same_shape(cx: &mut Ctx<'_>, a: &TileDecl, b: &TileDecl) {
    let (va, vb) = (valid(a), valid(b));
    dim_eq(cx, "valid rows", (a, va.0), (b, vb.0));
    dim_eq(cx, "valid cols", (a, va.1), (b, vb.1));
}

fn check_one(cx: &mut Ctx<'_>, d: &TileDecl, axis: Axis, full: &TileDecl) {
    let (r, c) = valid(d);
    let (fr, fc) = valid(full);
    match axis {
        Axis::Row => {
            if let Some(c) = c.filter(|c| *c != 1) {
                cx.error(
                    Rule::VectorShape,
                    format!(
                        "a per-row operand is [R, 1]; `{}` has {c} valid columns",
                        d.name
                    ),
                );
            }
            dim_eq(cx, "rows", (d, r), (full, fr));
        }
        Axis::Col => {
            if let Some(r) = r.filter(|r| *r != 1) {
                cx.error(
                    Rule::VectorShape,
                    format!(
                        "a per-column operand is [1, C]; `{}` has {r} valid rows",
                        d.name
                    ),
                );
            }
            dim_eq(cx, "columns", (d, c), (full, fc));
        }
    }
}

pub(super) fn check(cx: &mut Ctx<'_>, op: &VectorOp) {
    let first = cx.diags.len();
    check_operands(cx, op);
    check_layouts(cx, op);
    // The instruction's own dtype list is checked once the operands are otherwise sound, so an op
    // already rejected for its dtype (mixed operands, fp8, integer division, ...) reports that once.
    let rejected = cx.diags[first..].iter().any(|d| {
        matches!(
            d.rule,
            Rule::VectorDtype | Rule::VectorSpace | Rule::UnknownTile
        )
    });
    if !rejected {
        instruction_dtype(cx, op);
    }
}

/// An element-wise op of one tile source: both operands Vec tiles, the source arithmetic, the
/// destination of its dtype and valid shape. The source's declaration, when both are Vec tiles.
fn same_as_source<'k>(cx: &mut Ctx<'k>, dst: &TileRef, src: &TileRef) -> Option<&'k TileDecl> {
    let (Some(d), Some(s)) = (
        vec_tile(cx, dst, "destination"),
        vec_tile(cx, src, "source"),
    ) else {
        return None;
    };
    arithmetic(cx, s);
    same_dtype(cx, d, s);
    same_shape(cx, d, s);
    Some(s)
}

fn check_operands(cx: &mut Ctx<'_>, op: &VectorOp) {
    match op {
        VectorOp::Unary { op, dst, src } => {
            let Some(s) = same_as_source(cx, dst, src) else {
                return;
            };
            let float_only = !matches!(op, UnaryOp::Abs | UnaryOp::Neg | UnaryOp::Relu);
            if float_only && !s.ty.dtype.is_float() {
                cx.error(
                    Rule::VectorDtype,
                    format!("{op:?} needs a float tile, `{}` is {}", s.name, s.ty.dtype),
                );
            }
        }
        VectorOp::Binary { op, dst, lhs, rhs } => {
            let (Some(d), Some(a), Some(b)) = (
                vec_tile(cx, dst, "destination"),
                vec_tile(cx, lhs, "left operand"),
                vec_tile(cx, rhs, "right operand"),
            ) else {
                return;
            };
            arithmetic(cx, a);
            same_dtype(cx, a, b);
            same_dtype(cx, d, a);
            same_shape(cx, a, b);
            same_shape(cx, d, a);
            div_float(cx, *op, a);
        }
        VectorOp::BinaryScalar { op, dst, src, .. } => {
            if let Some(s) = same_as_source(cx, dst, src) {
                div_float(cx, *op, s);
            }
        }
        VectorOp::LeakyRelu { dst, src, .. } => {
            same_as_source(cx, dst, src);
        }
        VectorOp::Reduce { op, axis, dst, src } => {
            let (Some(d), Some(s)) = (
                vec_tile(cx, dst, "destination"),
                vec_tile(cx, src, "source"),
            ) else {
                return;
            };
            arithmetic(cx, s);
            same_dtype(cx, d, s);
            check_one(cx, d, *axis, s);
            reduce_layout(cx, *op, *axis, d, s);
            let partial = matches!(s.ty.valid_rows, ValidDim::Dynamic)
                || matches!(s.ty.valid_cols, ValidDim::Dynamic)
                || valid(s) != (Some(s.ty.rows), Some(s.ty.cols));
            let good_pad = match op {
                ReduceOp::Sum => PadValue::Zero,
                ReduceOp::Max => PadValue::Min,
                ReduceOp::Min => PadValue::Max,
            };
            if partial && s.ty.pad != good_pad && s.ty.pad != PadValue::Null {
                cx.warn(
                    Rule::ReducePad,
                    format!(
                        "a {op:?} reduction over the partial tile `{}` padded with {:?} can return the pad value (a max over zero padding gives >= 0 for an all-negative row); pad with {good_pad:?}",
                        s.name, s.ty.pad
                    ),
                );
            }
        }
        VectorOp::Broadcast {
            op,
            axis,
            dst,
            src,
            operand,
        } => {
            let (Some(d), Some(s), Some(o)) = (
                vec_tile(cx, dst, "destination"),
                vec_tile(cx, src, "source"),
                vec_tile(cx, operand, "broadcast operand"),
            ) else {
                return;
            };
            arithmetic(cx, s);
            same_dtype(cx, d, s);
            same_dtype(cx, s, o);
            same_shape(cx, d, s);
            check_one(cx, o, *axis, s);
            div_float(cx, *op, s);
        }
        VectorOp::Expand { axis, dst, src } => {
            let (Some(d), Some(s)) = (
                vec_tile(cx, dst, "destination"),
                vec_tile(cx, src, "source"),
            ) else {
                return;
            };
            same_dtype(cx, d, s);
            check_one(cx, s, *axis, d);
        }
        VectorOp::Cast { dst, src, .. } => {
            let (Some(d), Some(s)) = (
                vec_tile(cx, dst, "destination"),
                vec_tile(cx, src, "source"),
            ) else {
                return;
            };
            same_shape(cx, d, s);
            for t in [d, s] {
                if t.ty.dtype.is_64bit() {
                    cx.error(
                        Rule::VectorDtype,
                        format!("cast does not convert 64-bit {} (`{}`)", t.ty.dtype, t.name),
                    );
                }
            }
        }
        VectorOp::Fill { dst, .. } => {
            if let Some(d) = vec_tile(cx, dst, "destination") {
                arithmetic(cx, d);
            }
        }
        VectorOp::FillPad { tile } => {
            let Some(d) = cx.tile(tile) else { return };
            if !matches!(d.ty.space, MemSpace::Vec | MemSpace::Mat) {
                cx.error(
                    Rule::VectorSpace,
                    format!(
                        "fillpad runs on Vec (V pipe) or Mat (MTE2) tiles, `{}` is in {}",
                        d.name, d.ty.space
                    ),
                );
            }
            if d.ty.space == MemSpace::Mat && d.ty.layout != Layout::NZ {
                cx.error(
                    Rule::FillpadLayout,
                    format!(
                        "fillpad on a Mat tile takes NZ only on Ascend 950 (a5/TFillPad.hpp), `{}` is {}; load it as NZ (a ZN view of the same bytes can follow)",
                        d.name, d.ty.layout
                    ),
                );
            }
            if d.ty.pad == PadValue::Null {
                cx.error(
                    Rule::PadValue,
                    format!("fillpad on `{}` whose pad value is Null writes nothing; declare Zero, Min or Max", d.name),
                );
            }
        }
        VectorOp::SetValidShape { tile, rows, cols } => {
            let Some(d) = cx.tile(tile) else { return };
            let ty = &d.ty;
            for (what, dim, alloc, e) in [
                ("rows", ty.valid_rows, ty.rows, rows),
                ("cols", ty.valid_cols, ty.cols, cols),
            ] {
                if let ValidDim::Static(_) = dim {
                    cx.error(
                        Rule::ValidShape,
                        format!("set_validshape on `{}` whose valid {what} are static; declare them dynamic", d.name),
                    );
                }
                if let Some(v) = e.as_const() {
                    if v < 0 || v as u64 > alloc {
                        cx.error(
                            Rule::ValidShape,
                            format!("valid {what} {v} outside 0..={alloc} of `{}`", d.name),
                        );
                    }
                }
            }
        }
    }
}

/// Whether PTO's `Tile::isRowMajor` holds for a tile of this layout (BLayout::RowMajor: ND, ZN).
fn row_major(layout: Layout) -> bool {
    matches!(layout, Layout::ND | Layout::ZN)
}

/// The A5 layout rules of the element-wise, scalar, fill and broadcast instructions
/// (`vector-layout`; docs/codegen.md's audit table names the header of each): element-wise binary,
/// unary and tile-scalar ops and TEXPANDS on Vec take row-major operands only; a row broadcast
/// (TROWEXPAND<OP>) writes and reads row-major full tiles and takes its per-row operand as a DN
/// column `[R, 1]` (`broadcast-operand`, [`row_operand`]); a column broadcast or expand
/// (TCOLEXPAND*) takes ND tiles; a row expand (TROWEXPAND) writes ND. A DN `[N, 1]` column is ND
/// `[1, N]` in memory: reinterpret it.
fn check_layouts(cx: &mut Ctx<'_>, op: &VectorOp) {
    let kernel = cx.kernel;
    let decl = |r: &TileRef| {
        kernel
            .try_tile(r.tile)
            .filter(|d| d.ty.space == MemSpace::Vec)
    };
    let inst = op.instruction(kernel);
    let need = |cx: &mut Ctx<'_>, r: &TileRef, role: &str, ok: fn(Layout) -> bool, what: &str| {
        if let Some(d) = decl(r) {
            if !ok(d.ty.layout) {
                let hint = if d.ty.layout == Layout::DN && d.ty.cols == 1 {
                    format!(
                        " (a DN [{n}, 1] column is ND [1, {n}] in memory: reinterpret it)",
                        n = d.ty.rows
                    )
                } else {
                    String::new()
                };
                cx.error(
                    Rule::VectorLayout,
                    format!(
                        "{inst} on Ascend 950 takes {what} tiles only: its {role} `{}` is {}{hint}",
                        d.name, d.ty.layout
                    ),
                );
            }
        }
    };
    let nd = |l: Layout| l == Layout::ND;
    match op {
        VectorOp::Binary { dst, lhs, rhs, .. } => {
            need(cx, dst, "destination", row_major, "row-major");
            need(cx, lhs, "left operand", row_major, "row-major");
            need(cx, rhs, "right operand", row_major, "row-major");
        }
        VectorOp::Unary { dst, src, .. }
        | VectorOp::BinaryScalar { dst, src, .. }
        | VectorOp::LeakyRelu { dst, src, .. } => {
            need(cx, dst, "destination", row_major, "row-major");
            need(cx, src, "source", row_major, "row-major");
        }
        VectorOp::Fill { dst, .. } => need(cx, dst, "destination", row_major, "row-major"),
        VectorOp::Broadcast {
            axis: Axis::Row,
            dst,
            src,
            operand,
            ..
        } => {
            need(cx, dst, "destination", row_major, "row-major");
            need(cx, src, "source", row_major, "row-major");
            if let Some(d) = decl(operand) {
                row_operand(cx, inst, d);
            }
        }
        VectorOp::Broadcast {
            axis: Axis::Col,
            dst,
            src,
            operand,
            ..
        } => {
            need(cx, dst, "destination", nd, "ND");
            need(cx, src, "source", nd, "ND");
            need(cx, operand, "per-column operand", nd, "ND");
        }
        VectorOp::Expand { axis, dst, src } => {
            need(cx, dst, "destination", nd, "ND");
            if *axis == Axis::Col {
                need(cx, src, "source", nd, "ND");
            }
        }
        VectorOp::Reduce { .. }
        | VectorOp::Cast { .. }
        | VectorOp::SetValidShape { .. }
        | VectorOp::FillPad { .. } => {}
    }
}

/// The per-row operand of a row broadcast (`broadcast-operand`). A5's TROWEXPAND<OP>
/// (`npu/a5/TRowExpandBinOp.hpp`, the PTO_ASSERT of `TRowExpandMul.hpp` and its siblings) reads a
/// column-major operand one element per row (valid columns 1), and a row-major one as a 32-byte
/// block per row (`32 / sizeof(T)` valid columns) combined element by element with each block
/// of the row, which is not the broadcast of one value per row. So the `[R, 1]` operand must be
/// an unboxed DN column; an ND tile with one valid column would read the 7 (f32) or 15 (f16)
/// columns beside it.
fn row_operand(cx: &mut Ctx<'_>, inst: &str, d: &TileDecl) {
    if d.ty.layout != Layout::DN {
        cx.error(
            Rule::BroadcastOperand,
            format!(
                "{inst} on Ascend 950 reads its per-row operand as a DN column [R, 1] (one element per row; a row-major operand is read as a 32-byte block per row, a different operation): `{}` is {} (declare it DN [{}, 1], or reinterpret an ND [1, {}] row as one)",
                d.name, d.ty.layout, d.ty.rows, d.ty.rows
            ),
        );
    }
}

/// The layouts PTO's reductions take: a row reduction (TROWSUM/TROWMAX/TROWMIN) reads an ND
/// source and writes an ND tile or a one-column DN tile; a column reduction (TCOLSUM/TCOLMAX/
/// TCOLMIN) reads and writes ND tiles.
fn reduce_layout(cx: &mut Ctx<'_>, op: ReduceOp, axis: Axis, d: &TileDecl, s: &TileDecl) {
    let inst = match (axis, op) {
        (Axis::Row, ReduceOp::Sum) => "TROWSUM",
        (Axis::Row, ReduceOp::Max) => "TROWMAX",
        (Axis::Row, ReduceOp::Min) => "TROWMIN",
        (Axis::Col, ReduceOp::Sum) => "TCOLSUM",
        (Axis::Col, ReduceOp::Max) => "TCOLMAX",
        (Axis::Col, ReduceOp::Min) => "TCOLMIN",
    };
    match axis {
        Axis::Row => {
            if s.ty.layout != Layout::ND {
                cx.error(
                    Rule::ReduceLayout,
                    format!(
                        "row reduction input must be ND: {inst} reads `{}`, which is {}{}",
                        s.name,
                        s.ty.layout,
                        if s.ty.layout == Layout::DN {
                            format!(
                                " (a DN [{r}, {c}] tile is ND [{c}, {r}] in memory: reinterpret it and reduce its columns)",
                                r = s.ty.rows,
                                c = s.ty.cols
                            )
                        } else {
                            String::new()
                        }
                    ),
                );
            }
            let one_col_dn = d.ty.layout == Layout::DN && d.ty.cols == 1;
            if d.ty.layout != Layout::ND && !one_col_dn {
                cx.error(
                    Rule::ReduceLayout,
                    format!(
                        "row reduction output must be ND, or DN with exactly one column: {inst} writes `{}`, which is {} [{}, {}]",
                        d.name, d.ty.layout, d.ty.rows, d.ty.cols
                    ),
                );
            }
        }
        Axis::Col => {
            for (role, verb, t) in [("input", "reads", s), ("output", "writes", d)] {
                if t.ty.layout != Layout::ND {
                    cx.error(
                        Rule::ReduceLayout,
                        format!(
                            "column reduction {role} must be ND: {inst} {verb} `{}`, which is {}",
                            t.name, t.ty.layout
                        ),
                    );
                }
            }
        }
    }
}

fn div_float(cx: &mut Ctx<'_>, op: BinaryOp, t: &TileDecl) {
    if op == BinaryOp::Div && !t.ty.dtype.is_float() {
        cx.error(
            Rule::VectorDtype,
            format!(
                "division needs a float tile, `{}` is {}",
                t.name, t.ty.dtype
            ),
        );
    }
}

/// The op as the tile DSL spells it, for diagnostics (`row_max`, `exp`, `muls`, `row_broadcast_div`).
fn op_label(op: &VectorOp) -> String {
    let axis = |a: &Axis| match a {
        Axis::Row => "row",
        Axis::Col => "col",
    };
    let binary = |b: &BinaryOp| format!("{b:?}").to_lowercase();
    match op {
        VectorOp::Unary { op, .. } => format!("{op:?}").to_lowercase(),
        VectorOp::Binary { op, .. } => binary(op),
        VectorOp::BinaryScalar { op, .. } => format!("{}s", binary(op)),
        VectorOp::Reduce { op, axis: a, .. } => {
            format!("{}_{}", axis(a), format!("{op:?}").to_lowercase())
        }
        VectorOp::Broadcast { op, axis: a, .. } => format!("{}_broadcast_{}", axis(a), binary(op)),
        VectorOp::Expand { axis: a, .. } => format!("{}_expand", axis(a)),
        VectorOp::Cast { .. }
        | VectorOp::LeakyRelu { .. }
        | VectorOp::Fill { .. }
        | VectorOp::SetValidShape { .. }
        | VectorOp::FillPad { .. } => op.name().to_string(),
    }
}

/// The dtypes a vector op's instruction takes on the target (`Arch::instruction_dtypes`, from the
/// PTO-ISA A5 sources) and, for a cast, the conversions TCVT performs (`Arch::cast_pairs`).
fn instruction_dtype(cx: &mut Ctx<'_>, op: &VectorOp) {
    let kernel = cx.kernel;
    let arch = cx.arch;
    let decl = |r: &TileRef| kernel.try_tile(r.tile);
    let inst = op.instruction(kernel);
    let machine = cx.machine();
    let names =
        |ds: &mut dyn Iterator<Item = DType>| ds.map(|d| d.name()).collect::<Vec<_>>().join(", ");
    let operand = match op {
        VectorOp::Cast { dst, src, .. } => {
            let (Some(d), Some(s)) = (decl(dst), decl(src)) else {
                return;
            };
            let (from, to) = (s.ty.dtype, d.ty.dtype);
            if arch.can_cast(from, to) {
                return;
            }
            let targets = names(
                &mut arch
                    .cast_pairs
                    .iter()
                    .filter(|(a, _)| *a == from)
                    .map(|(_, b)| *b),
            );
            let reach = if targets.is_empty() {
                format!("it converts nothing from {from}")
            } else {
                format!("from {from} it converts to {targets} only")
            };
            let hint = if from == to {
                "; a same-dtype cast converts nothing: drop it".to_string()
            } else {
                DType::ALL
                    .iter()
                    .find(|m| arch.can_cast(from, **m) && arch.can_cast(**m, to))
                    .map(|m| format!("; cast through {m} (two casts)"))
                    .unwrap_or_default()
            };
            cx.error(
                Rule::VectorDtype,
                format!(
                    "cast {from} -> {to} (`{}` -> `{}`): PTO {inst} on {machine} does not convert {from} to {to}; {reach}{hint}",
                    s.name, d.name
                ),
            );
            return;
        }
        VectorOp::Fill { dst, .. } => dst,
        VectorOp::Unary { src, .. }
        | VectorOp::BinaryScalar { src, .. }
        | VectorOp::Reduce { src, .. }
        | VectorOp::Broadcast { src, .. }
        | VectorOp::Expand { src, .. }
        | VectorOp::LeakyRelu { src, .. } => src,
        VectorOp::Binary { lhs, .. } => lhs,
        VectorOp::SetValidShape { .. } | VectorOp::FillPad { .. } => return,
    };
    let Some(t) = decl(operand) else { return };
    let dt = t.ty.dtype;
    let Some(allowed) = arch.instruction_dtypes(inst) else {
        return;
    };
    if allowed.contains(&dt) {
        return;
    }
    // Suggest a dtype the instruction takes that a single cast reaches, preferring f32 for float
    // data and i32 for integers.
    let order: &[DType] = if dt.is_float() {
        &[DType::F32, DType::F16, DType::BF16, DType::I32]
    } else {
        &[DType::I32, DType::F32, DType::F16, DType::BF16]
    };
    let hint = order
        .iter()
        .find(|m| allowed.contains(m) && arch.can_cast(dt, **m))
        .map(|m| format!("cast to {m} first"))
        .unwrap_or_else(|| "convert the data to one of them first".to_string());
    cx.error(
        Rule::VectorDtype,
        format!(
            "{} on {dt} (`{}`): PTO {inst} on {machine} takes {} only; {hint}",
            op_label(op),
            t.name,
            names(&mut allowed.iter().copied())
        ),
    );
}
