//! Ranges: every number a kernel states is in range (tensor shapes, value ranges, constant
//! expressions, tile dimensions and slots, GM windows), checked before the other rules; a
//! JSON document with a key twice is unreadable.

use tile_backend::dsl::KernelBuilder;
use tile_backend::ir::*;
use tile_backend::verify::{verify, Rule};

use DType::*;
use Layout::*;
use MemSpace::*;

mod support;
use support::*;

/// A clean vector kernel: load a 16 x 16 f32 tile from `x` [32, 16] and store it to `y`.
/// `edit` changes it before it is built.
fn kernel(edit: impl FnOnce(&mut Kernel)) -> Kernel {
    let mut kb = KernelBuilder::new("r");
    let x = kb.input("x", F32, [32i64, 16]);
    let y = kb.output("y", F32, [32i64, 16]);
    let a = kb.tile_group("a", TileType::new(Vec, F32, 16, 16, ND), 2);
    kb.vector(|v| {
        v.load(a.at(1), GmView::nd(x, 256, 16, 16, 16));
        v.store(GmView::nd(y, 0, 16, 16, 16), a.at(1));
    });
    let mut k = kb.build();
    edit(&mut k);
    k
}

/// The load's GM window.
fn load_view(k: &mut Kernel) -> &mut GmView {
    match &mut k.vector[0] {
        Stmt::Op(Op::LoadStore(LoadStoreOp::Load { src, .. })) => src,
        _ => unreachable!("the first vector statement is the load"),
    }
}

fn load_slot(k: &mut Kernel) -> &mut Expr {
    match &mut k.vector[0] {
        Stmt::Op(Op::LoadStore(LoadStoreOp::Load { dst, .. })) => &mut dst.slot,
        _ => unreachable!("the first vector statement is the load"),
    }
}

fn shape(k: &mut Kernel) -> &mut std::vec::Vec<Expr> {
    match &mut k.params[0].kind {
        ParamKind::Tensor { shape, .. } => shape,
        ParamKind::Scalar { .. } => unreachable!("x is a tensor"),
    }
}

fn bin(op: BinOp, a: i64, b: i64) -> Expr {
    Expr::Bin(op, Box::new(Expr::Const(a)), Box::new(Expr::Const(b)))
}

/// Only the range findings are reported once one fails: the other rules assume the numbers
/// in range.
fn only(r: &tile_backend::verify::Report, rule: Rule) {
    assert!(
        r.diagnostics.iter().all(|d| d.rule == rule),
        "only {rule:?} expected:\n{r}"
    );
}

#[test]
fn the_base_kernel_is_clean() {
    expect_clean(&verify(&kernel(|_| {})));
}

#[test]
fn a_tensor_dimension_of_zero_or_negative_is_param_shape() {
    for n in [0, -64, i64::MIN] {
        let r = verify(&kernel(|k| shape(k)[0] = Expr::Const(n)));
        expect_err(&r, Rule::ParamShape, &[&format!("dimension 0 is {n}")]);
        only(&r, Rule::ParamShape);
    }
    let r = verify(&kernel(|k| {
        *shape(k) = vec![Expr::Const(1 << 40), Expr::Const(1 << 40)];
    }));
    expect_err(&r, Rule::ParamShape, &["more than i64::MAX bytes"]);
    // A runtime dimension is the simulator's to check.
    let r = verify(&kernel(|k| {
        k.params.push(Param {
            name: "n".into(),
            kind: ParamKind::Scalar { dtype: I32 },
            range: None,
        });
        shape(k)[0] = Expr::Param(ParamId(2));
    }));
    expect_no(&r, Rule::ParamShape);
}

#[test]
fn an_empty_value_range_is_param_range() {
    let r = verify(&kernel(|k| {
        k.params[0].range = Some(ValueRange { min: 2.0, max: 1.0 })
    }));
    expect_err(&r, Rule::ParamRange, &["[2, 1] is empty"]);
}

#[test]
fn failing_constant_expressions_are_const_expr() {
    let cases = [
        (bin(BinOp::Div, 1, 0), "division by zero in `(1 / 0)`"),
        (bin(BinOp::Rem, 7, 0), "division by zero"),
        (bin(BinOp::Mul, 1 << 62, 4), "integer overflow"),
        (bin(BinOp::Add, i64::MAX, 1), "integer overflow"),
    ];
    for (e, msg) in cases {
        // In an offset, nested in a runtime expression, in a tensor shape, in a slot.
        let nested = Expr::Bin(BinOp::Add, Box::new(Expr::BlockIdx), Box::new(e.clone()));
        for k in [
            kernel(|k| load_view(k).offset = e.clone()),
            kernel(|k| load_view(k).offset = nested.clone()),
            kernel(|k| shape(k)[1] = e.clone()),
            kernel(|k| *load_slot(k) = e.clone()),
        ] {
            let r = verify(&k);
            expect_err(&r, Rule::ConstExpr, &[msg]);
            only(&r, Rule::ConstExpr);
        }
    }
    // Statements too: a loop bound.
    let mut kb = KernelBuilder::new("l");
    let a = kb.tile("a", TileType::new(Vec, F32, 16, 16, ND));
    kb.vector(|v| {
        v.for_range("i", 0, bin(BinOp::Div, 8, 0), 1, |v, _| v.fill(a, 0.0));
    });
    expect_err(&verify(&kb.build()), Rule::ConstExpr, &["the end"]);
}

#[test]
fn oversized_tiles_are_tile_range() {
    for (edit, frag) in [
        (
            (|t: &mut TileDecl| t.ty.rows = 1 << 63) as fn(&mut TileDecl),
            "rows 9223372036854775808",
        ),
        (|t| t.ty.cols = u64::MAX, "cols 18446744073709551615"),
        (|t| t.buffers = u32::MAX, "buffers 4294967295"),
        (|t| t.addr = Some(u64::MAX - 31), "address"),
        (
            |t| t.ty.valid_rows = ValidDim::Static(1 << 62),
            "valid rows",
        ),
    ] {
        let r = verify(&kernel(|k| edit(&mut k.tiles[0])));
        expect_err(&r, Rule::TileRange, &[frag]);
        only(&r, Rule::TileRange);
    }
}

#[test]
fn constant_slots_outside_the_group_are_tile_slot() {
    for slot in [-1, 2, 1 << 62, i64::MIN] {
        let r = verify(&kernel(|k| *load_slot(k) = Expr::Const(slot)));
        expect_err(
            &r,
            Rule::TileSlot,
            &[&format!("buffer slot {slot} of tile `a` is outside 0..2")],
        );
    }
    // A runtime slot is taken modulo the group.
    let r = verify(&kernel(|k| *load_slot(k) = Expr::BlockIdx));
    expect_clean(&r);
}

#[test]
fn gm_windows_out_of_range_are_view_range() {
    type Edit = fn(&mut GmView);
    let cases: [(Edit, &str); 7] = [
        (|v| v.offset = Expr::Const(-1), "offset is -1"),
        (|v| v.stride = Expr::Const(-16), "stride is -16"),
        (|v| v.rows = Expr::Const(-16), "rows is -16"),
        (
            |v| v.offset = Expr::Const(1 << 62),
            "starts at element 4611686018427387904, past the tensor's 512 elements",
        ),
        // offset + rows x stride past i64, with the tensor shape a runtime value or not.
        (|v| v.stride = Expr::Const(1 << 62), "overflows i64"),
        (|v| v.rows = Expr::Const(1 << 62), "overflows i64"),
        // The tile's 16 x 16 from element 400 reach element 655 of a 512-element tensor.
        (
            |v| v.offset = Expr::Const(400),
            "reaches element 655 for the tile's valid 16x16, past the tensor's 512 elements",
        ),
    ];
    for (edit, frag) in cases {
        let r = verify(&kernel(|k| edit(load_view(k))));
        expect_err(&r, Rule::ViewRange, &[frag]);
        only(&r, Rule::ViewRange);
    }
    // The last in-range window is clean.
    expect_clean(&verify(&kernel(|k| load_view(k).offset = Expr::Const(256))));
}

#[test]
fn a_json_key_twice_is_unreadable_wherever_it_is() {
    let json = serde_json::to_string(&kernel(|_| {})).unwrap();
    assert!(Kernel::from_json(&json).is_ok());
    for (from, to) in [
        (r#""name":"r""#, r#""name":"r","name":"s""#),
        (r#"{"Const":256}"#, r#"{"Const":256,"Const":1}"#),
        (r#""rows":16,"#, r#""rows":16,"rows":32,"#),
    ] {
        assert!(json.contains(from), "{from}");
        let bad = json.replacen(from, to, 1);
        let err = Kernel::from_json(&bad).unwrap_err().to_string();
        assert!(err.contains("duplicate key"), "{from}: {err}");
    }
}
