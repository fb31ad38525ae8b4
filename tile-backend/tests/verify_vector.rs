//! Vector ops: operands in UB, matching dtypes and valid shapes, reduction layouts and padding,
//! fillpad and set_validshape (ASCEND950.md §7).

use tile_backend::dsl::{Body, KernelBuilder, Reinterpret};
use tile_backend::ir::*;
use tile_backend::verify::{verify, Report, Rule, Severity};

use DType::*;
use Layout::*;
use MemSpace::*;

mod support;
use support::*;

fn vt(dtype: DType, rows: u64, cols: u64) -> TileType {
    TileType::new(Vec, dtype, rows, cols, ND)
}

/// Declares the tiles `a`, `b`, `c` (in that order) and runs `f` in the vector section.
fn vec3(
    a: TileType,
    b: TileType,
    c: TileType,
    f: impl FnOnce(&mut Body<'_>, [TileId; 3]),
) -> Report {
    let mut kb = KernelBuilder::new("v");
    let ids = [kb.tile("a", a), kb.tile("b", b), kb.tile("c", c)];
    kb.vector(|v| f(v, ids));
    verify(&kb.build())
}

// ---------------------------------------------------------------- vector-space

#[test]
fn vector_operands_live_in_ub() {
    let m = TileType::new(Mat, F32, 16, 16, NZ);
    // In cube code (so that only the vector rule fires) on a Mat tile.
    let mut kb = KernelBuilder::new("v");
    let a = kb.tile("a", m.clone());
    let b = kb.tile("b", m);
    kb.cube(|c| c.add(a, b, b));
    let r = verify(&kb.build());
    expect_err(
        &r,
        Rule::VectorSpace,
        &["vector destination must be a Vec (UB) tile, `a` is in Mat"],
    );
    expect_no(&r, Rule::SectionSpace);
    // fillpad runs on Vec or Mat, not on L0.
    let mut kb = KernelBuilder::new("v");
    let l = kb.tile(
        "l",
        TileType::new(Left, F16, 16, 16, NZ).pad(PadValue::Zero),
    );
    kb.cube(|c| c.fillpad(l));
    expect_err(
        &verify(&kb.build()),
        Rule::VectorSpace,
        &["fillpad runs on Vec (V pipe) or Mat (MTE2) tiles, `l` is in Left"],
    );
    // ... and on Mat it is legal (MTE2).
    let mut kb = KernelBuilder::new("v");
    let m = kb.tile(
        "m",
        TileType::new(Mat, F16, 32, 32, NZ)
            .valid(20, 32)
            .pad(PadValue::Zero),
    );
    kb.cube(|c| c.fillpad(m));
    expect_clean(&verify(&kb.build()));
}

// ---------------------------------------------------------------- vector-shape

#[test]
fn element_wise_operands_share_the_valid_shape() {
    let r = vec3(
        vt(F32, 16, 16),
        vt(F32, 16, 16),
        vt(F32, 8, 16),
        |v, [a, b, c]| v.add(a, b, c),
    );
    expect_err(
        &r,
        Rule::VectorShape,
        &["valid rows differ: `b` has 16, `c` has 8"],
    );
    let r = vec3(
        vt(F32, 16, 16),
        vt(F32, 16, 16).valid(16, 9),
        vt(F32, 16, 16),
        |v, [a, b, _]| v.exp(a, b),
    );
    expect_err(
        &r,
        Rule::VectorShape,
        &["valid cols differ: `a` has 16, `b` has 9"],
    );
    // Same valid shape in differently sized allocations is fine.
    let r = vec3(
        vt(F32, 16, 16).valid(8, 8),
        vt(F32, 32, 32).valid(8, 8),
        vt(F32, 8, 8),
        |v, [a, b, c]| v.add(a, b, c),
    );
    expect_clean(&r);
}

#[test]
fn reductions_and_broadcasts_take_one_column_or_one_row_operands() {
    // Row reduce [16, 64] -> [16, 1] (in a 16 x 8 allocation: ND needs 32-byte rows).
    let ok = vec3(
        vt(F32, 16, 64),
        vt(F32, 16, 8).valid(16, 1),
        vt(F32, 16, 64),
        |v, [s, m, d]| {
            v.row_max(m, s);
            v.broadcast(BinaryOp::Sub, Axis::Row, d, s, m);
        },
    );
    expect_clean(&ok);
    let r = vec3(
        vt(F32, 16, 64),
        vt(F32, 16, 8),
        vt(F32, 16, 64),
        |v, [s, m, _]| v.row_max(m, s),
    );
    expect_err(
        &r,
        Rule::VectorShape,
        &["a per-row operand is [R, 1]; `b` has 8 valid columns"],
    );
    let r = vec3(
        vt(F32, 16, 64),
        vt(F32, 8, 8).valid(8, 1),
        vt(F32, 16, 64),
        |v, [s, m, _]| v.row_sum(m, s),
    );
    expect_err(
        &r,
        Rule::VectorShape,
        &["rows differ: `b` has 8, `a` has 16"],
    );
    // Column reduce [16, 64] -> [1, 64].
    let r = vec3(
        vt(F32, 16, 64),
        vt(F32, 2, 64).valid(1, 64),
        vt(F32, 16, 64),
        |v, [s, m, d]| {
            v.col_max(m, s);
            v.broadcast(BinaryOp::Sub, Axis::Col, d, s, m);
            v.expand(Axis::Col, d, m);
        },
    );
    expect_clean(&r);
    let r = vec3(
        vt(F32, 16, 64),
        vt(F32, 2, 64),
        vt(F32, 16, 64),
        |v, [s, m, _]| v.col_sum(m, s),
    );
    expect_err(
        &r,
        Rule::VectorShape,
        &["a per-column operand is [1, C]; `b` has 2 valid rows"],
    );
}

// ---------------------------------------------------------------- vector-dtype

#[test]
fn vector_dtypes() {
    let r = vec3(
        vt(F32, 8, 8),
        vt(F32, 8, 8),
        vt(F16, 8, 16),
        |v, [a, b, c]| v.add(a, b, c),
    );
    expect_err(
        &r,
        Rule::VectorDtype,
        &["operands must share a dtype: `b` is f32 but `c` is f16 (convert with cast)"],
    );
    let r = vec3(
        vt(I64, 8, 8),
        vt(I64, 8, 8),
        vt(I64, 8, 8),
        |v, [a, b, c]| v.add(a, b, c),
    );
    expect_err(
        &r,
        Rule::VectorDtype,
        &["vector arithmetic on i64 is not supported (`b`)"],
    );
    let r = vec3(
        vt(F8E4M3, 8, 32),
        vt(F8E4M3, 8, 32),
        vt(F8E4M3, 8, 32),
        |v, [a, b, _]| v.exp(a, b),
    );
    expect_err(&r, Rule::VectorDtype, &["vector arithmetic on f8e4m3"]);
    let r = vec3(
        vt(I32, 8, 8),
        vt(I32, 8, 8),
        vt(I32, 8, 8),
        |v, [a, b, _]| v.exp(a, b),
    );
    expect_err(
        &r,
        Rule::VectorDtype,
        &["Exp needs a float tile, `b` is i32"],
    );
    let r = vec3(
        vt(I32, 8, 8),
        vt(I32, 8, 8),
        vt(I32, 8, 8),
        |v, [a, b, c]| v.binary(BinaryOp::Div, a, b, c),
    );
    expect_err(
        &r,
        Rule::VectorDtype,
        &["division needs a float tile, `b` is i32"],
    );
    let r = vec3(
        vt(I64, 8, 8),
        vt(F32, 8, 8),
        vt(F32, 8, 8),
        |v, [a, b, _]| v.cast(a, b, RoundMode::Rint),
    );
    expect_err(
        &r,
        Rule::VectorDtype,
        &["cast does not convert 64-bit i64 (`a`)"],
    );
    // Integer abs/relu/add and a float <-> int cast are fine.
    let r = vec3(
        vt(I32, 8, 8),
        vt(I32, 8, 8),
        vt(F16, 8, 16).valid(8, 8),
        |v, [a, b, c]| {
            v.unary(UnaryOp::Abs, a, b);
            v.unary(UnaryOp::Relu, a, a);
            v.add(a, a, b);
            v.cast(c, a, RoundMode::Rint);
        },
    );
    expect_clean(&r);
}

// ---------------------------------------------------------------- reduce-pad

#[test]
fn max_reduction_over_zero_padding_warns() {
    let part = |pad: PadValue| vt(F32, 16, 64).valid(16, 40).pad(pad);
    let r = vec3(
        part(PadValue::Zero),
        vt(F32, 16, 8).valid(16, 1),
        vt(F32, 8, 8),
        |v, [s, m, _]| v.row_max(m, s),
    );
    let d = find(
        &r,
        Rule::ReducePad,
        Severity::Warning,
        &[
            "a Max reduction over the partial tile `a` padded with Zero",
            "pad with Min",
        ],
    );
    assert_eq!(d.subject, "reduce");
    assert!(r.is_ok(), "a warning, not an error:\n{r}");
    // Sum over Max padding and Min over Zero padding also warn.
    let r = vec3(
        part(PadValue::Max),
        vt(F32, 16, 8).valid(16, 1),
        vt(F32, 8, 8),
        |v, [s, m, _]| v.row_sum(m, s),
    );
    find(&r, Rule::ReducePad, Severity::Warning, &["pad with Zero"]);
    let r = vec3(
        part(PadValue::Zero),
        vt(F32, 16, 8).valid(16, 1),
        vt(F32, 8, 8),
        |v, [s, m, _]| v.reduce(ReduceOp::Min, Axis::Row, m, s),
    );
    find(&r, Rule::ReducePad, Severity::Warning, &["pad with Max"]);
    // The right pad, a full tile, or a dynamic tile padded right: no warning.
    for (src, op) in [
        (part(PadValue::Min), ReduceOp::Max),
        (part(PadValue::Zero), ReduceOp::Sum),
        (vt(F32, 16, 64).pad(PadValue::Zero), ReduceOp::Max),
        (vt(F32, 16, 64).dynamic().pad(PadValue::Min), ReduceOp::Max),
    ] {
        let dynamic = src.valid_cols == ValidDim::Dynamic;
        let r = vec3(
            src,
            vt(F32, 16, 8).valid(16, 1),
            vt(F32, 8, 8),
            |v, [s, m, _]| {
                if dynamic {
                    v.set_validshape(s, 16, 40);
                }
                v.reduce(op, Axis::Row, m, s)
            },
        );
        expect_no(&r, Rule::ReducePad);
        expect_clean(&r);
    }
    // A dynamic tile padded with zero under a max warns.
    let r = vec3(
        vt(F32, 16, 64).dynamic().pad(PadValue::Zero),
        vt(F32, 16, 8).valid(16, 1),
        vt(F32, 8, 8),
        |v, [s, m, _]| v.row_max(m, s),
    );
    find(
        &r,
        Rule::ReducePad,
        Severity::Warning,
        &["padded with Zero"],
    );
}

// ---------------------------------------------------------------- reduce-layout

#[test]
fn reductions_take_the_layouts_pto_accepts() {
    // A row reduction of a column-major [8, 32] tile: TROWMAX takes only ND input.
    let dn = TileType::new(Vec, F32, 8, 32, DN);
    let col = TileType::new(Vec, F32, 8, 1, DN);
    let r = vec3(dn.clone(), col.clone(), vt(F32, 8, 8), |v, [s, m, _]| {
        v.row_max(m, s)
    });
    let d = expect_err(
        &r,
        Rule::ReduceLayout,
        &[
            "row reduction input must be ND: TROWMAX reads `a`, which is DN",
            "a DN [8, 32] tile is ND [32, 8] in memory",
        ],
    );
    assert_eq!(d.subject, "reduce");
    assert_eq!(
        d.to_string(),
        format!("error[reduce-layout] vector op #0 (reduce): {}", d.message)
    );
    let r = vec3(dn.clone(), col.clone(), vt(F32, 8, 8), |v, [s, m, _]| {
        v.row_sum(m, s)
    });
    expect_err(&r, Rule::ReduceLayout, &["TROWSUM reads `a`, which is DN"]);
    let r = vec3(
        TileType::new(Vec, F16, 16, 16, NZ),
        TileType::new(Vec, F16, 16, 16, ND).valid(16, 1),
        vt(F32, 8, 8),
        |v, [s, m, _]| v.reduce(ReduceOp::Min, Axis::Row, m, s),
    );
    expect_err(&r, Rule::ReduceLayout, &["TROWMIN reads `a`, which is NZ"]);
    // Output: ND, or DN with exactly one column.
    let r = vec3(
        vt(F32, 8, 32),
        TileType::new(Vec, F32, 8, 8, DN).valid(8, 1),
        vt(F32, 8, 8),
        |v, [s, m, _]| v.row_max(m, s),
    );
    expect_err(
        &r,
        Rule::ReduceLayout,
        &["row reduction output must be ND, or DN with exactly one column: TROWMAX writes `b`, which is DN [8, 8]"],
    );
    // Column reductions read and write ND only.
    let r = vec3(
        dn.clone(),
        TileType::new(Vec, F32, 8, 32, DN).valid(1, 32),
        vt(F32, 8, 8),
        |v, [s, m, _]| v.col_sum(m, s),
    );
    expect_err(
        &r,
        Rule::ReduceLayout,
        &["column reduction input must be ND: TCOLSUM reads `a`, which is DN"],
    );
    expect_err(
        &r,
        Rule::ReduceLayout,
        &["column reduction output must be ND: TCOLSUM writes `b`, which is DN"],
    );
    // The legal forms: ND -> ND [R, 1], ND -> DN [R, 1], and the fix for the DN tile above —
    // the same bytes seen as ND [32, 8], reduced down its columns into ND [1, 8], then seen as
    // a DN [8, 1] column for a row broadcast.
    let ok = vec3(
        vt(F32, 8, 32),
        vt(F32, 8, 8).valid(8, 1),
        col,
        |v, [s, m, c]| {
            v.row_max(m, s);
            v.row_sum(c, s);
            v.reduce(ReduceOp::Min, Axis::Row, c, s);
        },
    );
    expect_no(&ok, Rule::ReduceLayout);
    expect_clean(&ok);
    let mut kb = KernelBuilder::new("v");
    let parts = kb.tile("parts", dn);
    let parts_nd = kb.reinterpret(
        "parts_nd",
        parts,
        Reinterpret {
            dtype: None,
            shape: Some((32, 8)),
            layout: Some(ND),
        },
    );
    let mx = kb.tile("mx", vt(F32, 1, 8));
    let mx_col = kb.reinterpret(
        "mx_col",
        mx,
        Reinterpret {
            dtype: None,
            shape: Some((8, 1)),
            layout: Some(DN),
        },
    );
    let o = kb.tile("o", vt(F32, 8, 64));
    kb.vector(|v| {
        v.set_validshape(parts_nd, 32, 8);
        v.set_validshape(mx_col, 8, 1);
        v.col_max(mx, parts_nd);
        v.broadcast(BinaryOp::Sub, Axis::Row, o, o, mx_col);
    });
    let r = verify(&kb.build());
    expect_no(&r, Rule::ReduceLayout);
    expect_clean(&r);
}

// ---------------------------------------------------------------- pad-value

#[test]
fn fillpad_needs_a_pad_value() {
    let r = vec3(
        vt(F32, 16, 16).valid(8, 8),
        vt(F32, 8, 8),
        vt(F32, 8, 8),
        |v, [a, _, _]| v.fillpad(a),
    );
    expect_err(
        &r,
        Rule::PadValue,
        &["fillpad on `a` whose pad value is Null writes nothing; declare Zero, Min or Max"],
    );
    for pad in [PadValue::Zero, PadValue::Min, PadValue::Max] {
        let r = vec3(
            vt(F32, 16, 16).valid(8, 8).pad(pad),
            vt(F32, 8, 8),
            vt(F32, 8, 8),
            |v, [a, _, _]| v.fillpad(a),
        );
        expect_clean(&r);
    }
}

// ---------------------------------------------------------------- valid-shape

#[test]
fn set_validshape_needs_a_dynamic_tile_and_a_value_in_range() {
    let r = vec3(
        vt(F32, 16, 16),
        vt(F32, 8, 8),
        vt(F32, 8, 8),
        |v, [a, _, _]| v.set_validshape(a, 8, 8),
    );
    expect_err(
        &r,
        Rule::ValidShape,
        &["set_validshape on `a` whose valid rows are static; declare them dynamic"],
    );
    let r = vec3(
        vt(F32, 16, 16).dynamic(),
        vt(F32, 8, 8),
        vt(F32, 8, 8),
        |v, [a, _, _]| v.set_validshape(a, 17, -1),
    );
    expect_err(
        &r,
        Rule::ValidShape,
        &["valid rows 17 outside 0..=16 of `a`"],
    );
    expect_err(
        &r,
        Rule::ValidShape,
        &["valid cols -1 outside 0..=16 of `a`"],
    );
    // In range, including 0 and a runtime value.
    let mut kb = KernelBuilder::new("v");
    let n = kb.scalar("n", I32);
    let a = kb.tile("a", vt(F32, 16, 16).dynamic());
    kb.vector(|v| {
        v.set_validshape(a, 0, 16);
        v.set_validshape(a, Expr::Param(n).min(16), 16);
    });
    expect_clean(&verify(&kb.build()));
}

#[test]
fn a_softmax_row_block_is_clean() {
    // s [16, 64] f32: m = rowmax(s); s -= m; p = exp(s); l = rowsum(p); p /= l; cast to f16.
    let mut kb = KernelBuilder::new("softmax");
    let scale = kb.scalar("scale", F32);
    let s = kb.tile("s", vt(F32, 16, 64).pad(PadValue::Min));
    let m = kb.tile("m", vt(F32, 16, 8).valid(16, 1));
    let l = kb.tile("l", vt(F32, 16, 8).valid(16, 1));
    let p = kb.tile("p", vt(F32, 16, 64));
    let h = kb.tile("h", vt(F16, 16, 64));
    kb.vector(|v| {
        v.fill(s, -1.0);
        v.muls(s, s, scale);
        v.row_max(m, s);
        v.broadcast(BinaryOp::Sub, Axis::Row, p, s, m);
        v.exp(p, p);
        v.row_sum(l, p);
        v.broadcast(BinaryOp::Div, Axis::Row, p, p, l);
        v.cast(h, p, RoundMode::Rint);
    });
    expect_clean(&verify(&kb.build()));
}
