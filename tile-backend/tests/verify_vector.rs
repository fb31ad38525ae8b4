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

// ---------------------------------------------------------------- fillpad-layout

#[test]
fn fillpad_on_a_mat_tile_takes_nz_only() {
    // A5's TFILLPAD on a Mat tile static_asserts NZ (npu/a5/TFillPad.hpp); a ZN (or ND) Mat tile
    // is refused, NZ passes (above), and Vec tiles are not concerned.
    for layout in [ZN, ND] {
        let mut kb = KernelBuilder::new("v");
        let m = kb.tile(
            "m",
            TileType::new(Mat, F16, 32, 32, layout)
                .valid(20, 32)
                .pad(PadValue::Zero),
        );
        kb.cube(|c| c.fillpad(m));
        let d = expect_err(
            &verify(&kb.build()),
            Rule::FillpadLayout,
            &[
                "fillpad on a Mat tile takes NZ only on Ascend 950",
                "`m` is",
            ],
        );
        assert!(d.to_string().starts_with("error[fillpad-layout]"), "{d}");
    }
    let r = vec3(
        vt(F32, 8, 32).valid(5, 32).pad(PadValue::Zero),
        vt(F32, 8, 32),
        vt(F32, 8, 32),
        |v, [a, _, _]| v.fillpad(a),
    );
    expect_no(&r, Rule::FillpadLayout);
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
    // Row reduce [16, 64] -> [16, 1] (a DN column: what a row broadcast reads).
    let ok = vec3(
        vt(F32, 16, 64),
        TileType::new(Vec, F32, 16, 1, DN),
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
    // Integer abs/relu/add and an int -> float cast are fine (i32 -> f32: Ascend 950's TCVT has
    // no i32 -> f16, see `casts_are_the_pairs_tcvt_implements`).
    let r = vec3(
        vt(I32, 8, 8),
        vt(I32, 8, 8),
        vt(F32, 8, 8),
        |v, [a, b, c]| {
            v.unary(UnaryOp::Abs, a, b);
            v.unary(UnaryOp::Relu, a, a);
            v.add(a, a, b);
            v.cast(c, a, RoundMode::Rint);
        },
    );
    expect_clean(&r);
}

/// A tile of `dt` with `cols` columns (ND rows must be 32-byte aligned: 32 covers every dtype).
fn vtile(dt: DType) -> TileType {
    vt(dt, 8, 32)
}

/// A per-row tile for a row reduction of `dt`: [8, 1] valid in a 32-byte-wide allocation.
fn per_row(dt: DType) -> TileType {
    vt(dt, 8, 32).valid(8, 1)
}

/// A full tile and a DN per-row column of `dt` with 32 rows (a DN column needs 32-byte columns:
/// 32 rows cover every dtype).
fn full_and_column(dt: DType) -> (TileType, TileType) {
    (vt(dt, 32, 32), TileType::new(Vec, dt, 32, 1, DN))
}

/// Runs `f` on tiles `a` (destination-sized), `b` (source), `c` of dtype `dt`.
fn same3(dt: DType, f: impl FnOnce(&mut Body<'_>, [TileId; 3])) -> Report {
    vec3(vtile(dt), vtile(dt), vtile(dt), f)
}

/// Asserts the instruction-dtype error of `op` on `dt` naming the instruction and the dtypes it
/// takes, and that it is the op's only dtype diagnostic.
fn expect_unsupported(r: &Report, op: &str, dt: DType, inst: &str, takes: &str) {
    let on = format!("{op} on {dt} ");
    let by = format!("PTO {inst} on Ascend 950 takes {takes} only");
    expect_err(r, Rule::VectorDtype, &[&on, &by]);
    let n = r.errors().filter(|d| d.rule == Rule::VectorDtype).count();
    assert_eq!(n, 1, "one vector-dtype error expected:\n{r}");
}

#[test]
fn row_reductions_have_no_bf16_form() {
    // TROWMAX: a5/TRowReduce.hpp takes half, float, int32, int16, int8, uint8 (+64-bit).
    let r = vec3(vtile(BF16), per_row(BF16), vtile(BF16), |v, [s, m, _]| {
        v.row_max(m, s)
    });
    expect_unsupported(
        &r,
        "row_max",
        BF16,
        "TROWMAX",
        "f32, f16, i32, i8, u8, i64, u64",
    );
    expect_err(&r, Rule::VectorDtype, &["`a`", "cast to f32 first"]);
    let r = vec3(vtile(BF16), per_row(BF16), vtile(BF16), |v, [s, m, _]| {
        v.reduce(ReduceOp::Min, Axis::Row, m, s)
    });
    expect_unsupported(
        &r,
        "row_min",
        BF16,
        "TROWMIN",
        "f32, f16, i32, i8, u8, i64, u64",
    );
    let r = vec3(vtile(BF16), per_row(BF16), vtile(BF16), |v, [s, m, _]| {
        v.row_sum(m, s)
    });
    expect_unsupported(&r, "row_sum", BF16, "TROWSUM", "f32, f16, i32, i64, u64");
    // TROWSUM has no 8-bit form either (TROWMAX has).
    let r = vec3(vtile(I8), per_row(I8), vtile(I8), |v, [s, m, _]| {
        v.row_sum(m, s)
    });
    expect_unsupported(&r, "row_sum", I8, "TROWSUM", "f32, f16, i32, i64, u64");
    expect_err(&r, Rule::VectorDtype, &["cast to i32 first"]);
    // Controls: the same reductions in supported dtypes.
    for dt in [F32, F16] {
        let r = vec3(vtile(dt), per_row(dt), vtile(dt), |v, [s, m, _]| {
            v.row_max(m, s);
            v.reduce(ReduceOp::Min, Axis::Row, m, s);
            v.row_sum(m, s);
        });
        expect_clean(&r);
    }
    let r = vec3(vtile(I8), per_row(I8), vtile(I8), |v, [s, m, _]| {
        v.row_max(m, s)
    });
    expect_clean(&r);
    // Column reductions do take bf16 (a5/TColReduceOps.hpp).
    let r = vec3(vtile(BF16), vt(BF16, 1, 32), vtile(BF16), |v, [s, m, _]| {
        v.col_max(m, s);
        v.col_sum(m, s);
    });
    expect_clean(&r);
}

#[test]
fn transcendental_ops_take_f32_and_f16_only() {
    for (op, inst) in [
        (UnaryOp::Exp, "TEXP"),
        (UnaryOp::Ln, "TLOG"),
        (UnaryOp::Sqrt, "TSQRT"),
        (UnaryOp::Rsqrt, "TRSQRT"),
        (UnaryOp::Recip, "TRECIP"),
    ] {
        let name = format!("{op:?}").to_lowercase();
        let r = same3(BF16, |v, [a, b, _]| v.unary(op, a, b));
        let takes = if op == UnaryOp::Recip {
            "f32, f16, i32"
        } else {
            "f32, f16"
        };
        expect_unsupported(&r, &name, BF16, inst, takes);
        for dt in [F32, F16] {
            expect_clean(&same3(dt, |v, [a, b, _]| v.unary(op, a, b)));
        }
    }
}

#[test]
fn abs_neg_and_relu_follow_their_instruction() {
    // TABS: float, half, int32, int16, int8 on A5 -- no bf16, no u8.
    let r = same3(BF16, |v, [a, b, _]| v.unary(UnaryOp::Abs, a, b));
    expect_unsupported(&r, "abs", BF16, "TABS", "f32, f16, i32, i8");
    let r = same3(U8, |v, [a, b, _]| v.unary(UnaryOp::Abs, a, b));
    expect_unsupported(&r, "abs", U8, "TABS", "f32, f16, i32, i8");
    expect_clean(&same3(I8, |v, [a, b, _]| v.unary(UnaryOp::Abs, a, b)));
    // TNEG is TMULS by -1: no 8-bit integers, bf16 fine.
    let r = same3(I8, |v, [a, b, _]| v.unary(UnaryOp::Neg, a, b));
    expect_unsupported(&r, "neg", I8, "TNEG", "f32, f16, bf16, i32, u32, i64, u64");
    expect_clean(&same3(BF16, |v, [a, b, _]| v.unary(UnaryOp::Neg, a, b)));
    // TRELU: half, float, int32.
    for dt in [BF16, I8] {
        let r = same3(dt, |v, [a, b, _]| v.unary(UnaryOp::Relu, a, b));
        expect_unsupported(&r, "relu", dt, "TRELU", "f32, f16, i32");
    }
    expect_clean(&same3(I32, |v, [a, b, _]| v.unary(UnaryOp::Relu, a, b)));
}

#[test]
fn multiplication_and_division_follow_their_instruction() {
    // TMUL / TMULS: no 8-bit integers.
    for dt in [I8, U8] {
        let r = same3(dt, |v, [a, b, c]| v.mul(a, b, c));
        expect_unsupported(&r, "mul", dt, "TMUL", "f32, f16, bf16, i32, u32, i64, u64");
        let r = same3(dt, |v, [a, b, _]| v.muls(a, b, 3.0));
        expect_unsupported(
            &r,
            "muls",
            dt,
            "TMULS",
            "f32, f16, bf16, i32, u32, i64, u64",
        );
    }
    expect_clean(&same3(BF16, |v, [a, b, c]| {
        v.mul(a, b, c);
        v.muls(a, b, 0.5);
    }));
    // TDIV / TDIVS: no bf16.
    let r = same3(BF16, |v, [a, b, c]| v.binary(BinaryOp::Div, a, b, c));
    expect_unsupported(&r, "div", BF16, "TDIV", "f32, f16, i32, u32, i64, u64");
    expect_err(&r, Rule::VectorDtype, &["cast to f32 first"]);
    let r = same3(BF16, |v, [a, b, _]| {
        v.binary_scalar(BinaryOp::Div, a, b, 2.0)
    });
    expect_unsupported(&r, "divs", BF16, "TDIVS", "f32, f16, i32, u32, i64, u64");
    expect_clean(&same3(F16, |v, [a, b, c]| {
        v.binary(BinaryOp::Div, a, b, c);
        v.binary_scalar(BinaryOp::Div, a, b, 2.0);
    }));
}

#[test]
fn ops_whose_instruction_takes_every_vector_dtype_stay_legal() {
    // TADD/TSUB/TMAX/TMIN and their scalar forms, the row/column broadcasts (division included:
    // a5/TRowExpandDiv.hpp takes bf16 and 8-bit), TROWEXPAND/TCOLEXPAND and TEXPANDS.
    for dt in [BF16, I8, U8] {
        let (full, column) = full_and_column(dt);
        let r = vec3(full.clone(), column, full, |v, [a, m, c]| {
            for op in [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Max, BinaryOp::Min] {
                v.binary(op, a, a, c);
                v.binary_scalar(op, a, a, 1.0);
            }
            for op in [BinaryOp::Add, BinaryOp::Mul, BinaryOp::Max] {
                v.broadcast(op, Axis::Row, a, a, m);
            }
            v.expand(Axis::Row, c, m);
            v.fill(c, 1.0);
        });
        expect_clean(&r);
    }
    let (full, column) = full_and_column(BF16);
    let r = vec3(full.clone(), column, full, |v, [a, m, _]| {
        v.broadcast(BinaryOp::Div, Axis::Row, a, a, m)
    });
    expect_clean(&r);
}

#[test]
fn casts_are_the_pairs_tcvt_implements() {
    // Not on Ascend 950 (a5/TCvt.hpp, docs/isa/TCVT.md): i32 -> f16 (A2/A3 only), f16 -> bf16,
    // f32 -> i8, and same-type copies other than f32 -> f32.
    for (from, to, reach, through) in [
        (I32, F16, "f32, u8, i64", Some("f32")),
        (F16, BF16, "f32, i32, i8, u8", Some("f32")),
        (
            F32,
            I8,
            "f32, f16, bf16, i32, i64, f8e4m3, f8e5m2",
            Some("f16"),
        ),
        (F16, F16, "f32, i32, i8, u8", None),
        (U8, F32, "f16", Some("f16")),
    ] {
        let r = vec3(
            vt(to, 8, 32),
            vt(from, 8, 32),
            vtile(F32),
            |v, [d, s, _]| v.cast(d, s, RoundMode::Rint),
        );
        let what = format!("cast {from} -> {to} (`b` -> `a`)");
        let reach = format!("from {from} it converts to {reach} only");
        let d = expect_err(
            &r,
            Rule::VectorDtype,
            &[
                &what,
                &format!("PTO TCVT on Ascend 950 does not convert {from} to {to}"),
                &reach,
            ],
        );
        match through {
            Some(m) => assert!(d.message.contains(&format!("cast through {m}")), "{d}"),
            None => assert!(
                !d.message.contains("cast through") && d.message.contains("drop it"),
                "{d}"
            ),
        }
    }
    // Controls: the conversions the kernels use and their reverse paths.
    for (from, to) in [
        (F32, F16),
        (F32, BF16),
        (F32, F32),
        (BF16, F16),
        (F16, I8),
        (I8, F16),
        (I32, F32),
        (F32, I32),
        (F32, F8E4M3),
        (F8E5M2, F32),
    ] {
        let r = vec3(
            vt(to, 8, 32),
            vt(from, 8, 32),
            vtile(F32),
            |v, [d, s, _]| v.cast(d, s, RoundMode::Rint),
        );
        expect_clean(&r);
    }
}

#[test]
fn every_vector_instruction_has_a_dtype_row() {
    // Each instruction the code generator emits for a vector op is in the machine's table, so an
    // op cannot slip past `vector-dtype` because its instruction was forgotten.
    let arch = tile_backend::arch::Arch::ascend950();
    let mut kb = KernelBuilder::new("v");
    let a = kb.tile("a", vtile(F32));
    let r = |t: TileId| TileRef::from(t);
    let mut ops = vec![];
    for op in [
        UnaryOp::Exp,
        UnaryOp::Ln,
        UnaryOp::Abs,
        UnaryOp::Neg,
        UnaryOp::Sqrt,
        UnaryOp::Rsqrt,
        UnaryOp::Recip,
        UnaryOp::Relu,
    ] {
        ops.push(Op::Vector(VectorOp::Unary {
            op,
            dst: r(a),
            src: r(a),
        }));
    }
    for op in [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Max,
        BinaryOp::Min,
    ] {
        ops.push(Op::Vector(VectorOp::Binary {
            op,
            dst: r(a),
            lhs: r(a),
            rhs: r(a),
        }));
        ops.push(Op::Vector(VectorOp::BinaryScalar {
            op,
            dst: r(a),
            src: r(a),
            scalar: ScalarArg::Const(1.0),
        }));
        for axis in [Axis::Row, Axis::Col] {
            ops.push(Op::Vector(VectorOp::Broadcast {
                op,
                axis,
                dst: r(a),
                src: r(a),
                operand: r(a),
            }));
        }
    }
    for axis in [Axis::Row, Axis::Col] {
        for op in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min] {
            ops.push(Op::Vector(VectorOp::Reduce {
                op,
                axis,
                dst: r(a),
                src: r(a),
            }));
        }
        ops.push(Op::Vector(VectorOp::Expand {
            axis,
            dst: r(a),
            src: r(a),
        }));
    }
    ops.push(Op::Vector(VectorOp::Fill {
        dst: r(a),
        value: ScalarArg::Const(0.0),
    }));
    ops.push(Op::Vector(VectorOp::LeakyRelu {
        dst: r(a),
        src: r(a),
        slope: ScalarArg::Const(0.1),
    }));
    let k = kb.build();
    let mut seen = std::collections::BTreeSet::new();
    for op in &ops {
        let inst = tile_backend::codegen::pto::instruction(&k, op);
        assert!(
            arch.instruction_dtypes(inst).is_some(),
            "{inst} has no row in Arch::vector_dtypes"
        );
        seen.insert(inst);
    }
    assert_eq!(seen.len(), ops.len(), "one instruction per op form");
    assert_eq!(
        arch.vector_dtypes.len(),
        seen.len(),
        "no stale rows: {seen:?}"
    );
    let cast = Op::Vector(VectorOp::Cast {
        dst: r(a),
        src: r(a),
        round: RoundMode::Rint,
    });
    assert_eq!(tile_backend::codegen::pto::instruction(&k, &cast), "TCVT");
    assert!(arch.can_cast(F32, F32) && !arch.can_cast(I32, F16));
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
    let m = kb.tile("m", TileType::new(Vec, F32, 16, 1, DN));
    let l = kb.tile("l", TileType::new(Vec, F32, 16, 1, DN));
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

// ---------------------------------------------------------------- vector-layout

#[test]
fn element_wise_ops_take_row_major_tiles_only() {
    // The statistics of a row reduction, kept as DN [8, 1] columns: A5's TADD, TEXP, TMAXS and
    // TEXPANDS reject them (npu/a5/TAdd.hpp, TUnaryOp.hpp, docs/isa/TMAXS.md, TEXPANDS.md).
    let col = TileType::new(Vec, F32, 8, 1, DN);
    let row = TileType::new(Vec, F32, 1, 8, ND);
    let r = vec3(col.clone(), col.clone(), col.clone(), |v, [a, b, c]| {
        v.add(c, a, b)
    });
    let d = expect_err(
        &r,
        Rule::VectorLayout,
        &[
            "TADD on Ascend 950 takes row-major tiles only",
            "its destination `c` is DN",
            "a DN [8, 1] column is ND [1, 8] in memory",
        ],
    );
    assert!(d.to_string().starts_with("error[vector-layout]"));
    let r = vec3(col.clone(), col.clone(), col.clone(), |v, [a, b, _]| {
        v.exp(b, a)
    });
    expect_err(&r, Rule::VectorLayout, &["TEXP on Ascend 950"]);
    let r = vec3(col.clone(), col.clone(), col.clone(), |v, [a, b, _]| {
        v.binary_scalar(BinaryOp::Max, b, a, 1.0)
    });
    expect_err(&r, Rule::VectorLayout, &["TMAXS on Ascend 950"]);
    let r = vec3(col.clone(), col.clone(), col.clone(), |v, [a, _, _]| {
        v.fill(a, 0.0)
    });
    expect_err(&r, Rule::VectorLayout, &["TEXPANDS on Ascend 950"]);
    // The same bytes seen as ND [1, 8] rows pass.
    let r = vec3(row.clone(), row.clone(), row.clone(), |v, [a, b, c]| {
        v.add(c, a, b);
        v.exp(c, c);
        v.binary_scalar(BinaryOp::Max, c, c, 1.0);
        v.fill(a, 0.0)
    });
    expect_no(&r, Rule::VectorLayout);
    expect_clean(&r);
}

#[test]
fn broadcasts_take_the_layouts_a5_accepts() {
    // A row broadcast writes and reads a row-major full tile (npu/a5/TRowExpandMul.hpp).
    let r = vec3(
        TileType::new(Vec, F32, 64, 8, DN),
        TileType::new(Vec, F32, 8, 1, DN),
        TileType::new(Vec, F32, 64, 8, DN),
        |v, [s, o, d]| v.broadcast(BinaryOp::Mul, Axis::Row, d, s, o),
    );
    expect_err(
        &r,
        Rule::VectorLayout,
        &["TROWEXPANDMUL on Ascend 950 takes row-major tiles only: its destination `c` is DN"],
    );
    // A column broadcast reads and writes ND only (npu/a5/TColExpandBinOp.hpp).
    let r = vec3(
        TileType::new(Vec, F32, 64, 8, DN),
        TileType::new(Vec, F32, 1, 8, ND),
        TileType::new(Vec, F32, 64, 8, DN),
        |v, [s, o, d]| v.broadcast(BinaryOp::Sub, Axis::Col, d, s, o),
    );
    expect_err(
        &r,
        Rule::VectorLayout,
        &["TCOLEXPANDSUB on Ascend 950 takes ND"],
    );
    let full = vt(F32, 8, 64);
    let r = vec3(
        full.clone(),
        TileType::new(Vec, F32, 8, 1, DN),
        full.clone(),
        |v, [s, o, d]| v.broadcast(BinaryOp::Mul, Axis::Row, d, s, o),
    );
    expect_no(&r, Rule::VectorLayout);
}

// ---------------------------------------------------------------- broadcast-operand

#[test]
fn a_row_broadcast_takes_its_per_row_operand_as_a_dn_column() {
    // A5 reads a row-major per-row operand as a 32-byte block per row, combined element by
    // element (npu/a5/TRowExpandBinOp.hpp): an ND tile with one valid column is not [R, 1].
    let full = vt(F32, 16, 64);
    for op in [BinaryOp::Mul, BinaryOp::Div, BinaryOp::Sub] {
        let r = vec3(
            full.clone(),
            vt(F32, 16, 8).valid(16, 1),
            full.clone(),
            |v, [s, o, d]| v.broadcast(op, Axis::Row, d, s, o),
        );
        let d = expect_err(
            &r,
            Rule::BroadcastOperand,
            &[
                "on Ascend 950 reads its per-row operand as a DN column [R, 1]",
                "`b` is ND",
                "declare it DN [16, 1]",
            ],
        );
        assert!(d.to_string().starts_with("error[broadcast-operand]"), "{d}");
    }
    // The DN column passes, declared so or reinterpreted from an ND [1, 16] row.
    let r = vec3(
        full.clone(),
        TileType::new(Vec, F32, 16, 1, DN),
        full.clone(),
        |v, [s, o, d]| v.broadcast(BinaryOp::Mul, Axis::Row, d, s, o),
    );
    expect_no(&r, Rule::BroadcastOperand);
    expect_clean(&r);
    let mut kb = KernelBuilder::new("row_view");
    let s = kb.tile("s", full);
    let row = kb.tile("row", vt(F32, 1, 16));
    let col = kb.reinterpret(
        "col",
        row,
        Reinterpret {
            dtype: None,
            shape: Some((16, 1)),
            layout: Some(DN),
        },
    );
    kb.vector(|v| {
        v.fill(s, 1.0);
        v.fill(row, 2.0);
        v.set_validshape(col, 16, 1);
        v.broadcast(BinaryOp::Mul, Axis::Row, s, s, col);
    });
    let r = verify(&kb.build());
    expect_no(&r, Rule::BroadcastOperand);
    // A column broadcast's per-column operand is not a per-row one (ND [1, C], no such rule).
    let r = vec3(
        vt(F32, 16, 64),
        vt(F32, 1, 64),
        vt(F32, 16, 64),
        |v, [s, o, d]| v.broadcast(BinaryOp::Mul, Axis::Col, d, s, o),
    );
    expect_no(&r, Rule::BroadcastOperand);
}
