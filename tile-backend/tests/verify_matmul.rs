//! Cube matmul (ASCEND950.md §3, §6, §10): operand spaces and layouts, dtype triples, the
//! 1..=4095 range, the inner-dimension match, the Acc fit and the bias.

use tile_backend::arch::Target;
use tile_backend::dsl::KernelBuilder;
use tile_backend::ir::*;
use tile_backend::verify::{verify, Report, Rule};

use DType::*;
use Layout::*;
use MemSpace::*;

mod support;
use support::*;

/// `c = a * b (+ bias)` on the cube of a kernel for `target`.
fn mm_for(target: Target, a: TileType, b: TileType, c: TileType, bias: Option<TileType>) -> Report {
    let mut kb = KernelBuilder::for_target("mm", target);
    let ta = kb.tile("a", a);
    let tb = kb.tile("b", b);
    let tc = kb.tile("c", c);
    let tbias = bias.map(|ty| kb.tile("bias", ty));
    kb.cube(|k| {
        let m = k.matmul(tc, ta, tb).phase(Phase::Final);
        if let Some(bias) = tbias {
            m.bias(bias);
        }
    });
    verify(&kb.build())
}

fn mm(a: TileType, b: TileType, c: TileType, bias: Option<TileType>) -> Report {
    mm_for(Target::Ascend950, a, b, c, bias)
}

fn f16_operands() -> (TileType, TileType, TileType) {
    (
        t(Left, F16, 32, 64, NZ),
        t(Right, F16, 64, 48, ZN),
        t(Acc, F32, 32, 48, NZ),
    )
}

#[test]
fn f16_matmul_is_clean() {
    let (a, b, c) = f16_operands();
    expect_clean(&mm(a, b, c, None));
}

#[test]
fn every_documented_dtype_triple_is_clean() {
    let triples = [
        (I8, I8, I32),
        (F16, F16, F32),
        (BF16, BF16, F32),
        (F32, F32, F32),
        (F8E4M3, F8E4M3, F32),
        (F8E4M3, F8E5M2, F32),
        (F8E5M2, F8E4M3, F32),
        (F8E5M2, F8E5M2, F32),
    ];
    // [32, 64] x [64, 32] is whole boxes for C0 = 8, 16 and 32.
    for (da, db, dc) in triples {
        expect_clean(&mm(
            t(Left, da, 32, 64, NZ),
            t(Right, db, 64, 32, ZN),
            t(Acc, dc, 32, 32, NZ),
            None,
        ));
    }
}

#[test]
fn undocumented_dtype_triples_are_rejected() {
    let cases = [
        (F16, F16, F16, "f16 x f16 -> f16"),
        (I8, I8, F32, "i8 x i8 -> f32"),
        (F16, BF16, F32, "f16 x bf16 -> f32"),
        (F32, F32, I32, "f32 x f32 -> i32"),
    ];
    for (da, db, dc, what) in cases {
        let r = mm(
            t(Left, da, 32, 64, NZ),
            t(Right, db, 64, 32, ZN),
            t(Acc, dc, 32, 32, NZ),
            None,
        );
        let msg = format!("{what} is not a cube dtype combination on Ascend 950");
        expect_err(
            &r,
            Rule::MatmulDtype,
            &[&msg, "allowed: i8 x i8 -> i32, f16 x f16 -> f32"],
        );
    }
}

#[test]
fn operands_must_be_in_left_right_and_acc() {
    let (a, b, c) = f16_operands();
    let a_mat = TileType {
        space: Mat,
        ..a.clone()
    };
    let r = mm(a_mat, b.clone(), c.clone(), None);
    expect_err(
        &r,
        Rule::MatmulSpace,
        &["matmul A must be a Left tile, `a` is in Mat"],
    );
    let b_left = t(Left, F16, 64, 48, NZ);
    let r = mm(a.clone(), b_left, c.clone(), None);
    expect_err(
        &r,
        Rule::MatmulSpace,
        &["matmul B must be a Right tile, `b` is in Left"],
    );
    let c_vec = t(Vec, F32, 32, 48, ND);
    let r = mm(a, b, c_vec, None);
    expect_err(
        &r,
        Rule::MatmulSpace,
        &["matmul C must be a Acc tile, `c` is in Vec"],
    );
}

#[test]
fn operand_layouts_are_nz_zn_nz_on_950() {
    let (a, b, c) = f16_operands();
    let r = mm(t(Left, F16, 32, 64, ZZ), b.clone(), c.clone(), None);
    expect_err(
        &r,
        Rule::MatmulLayout,
        &["matmul A in Left must be NZ on Ascend 950, `a` is ZZ"],
    );
    let r = mm(a.clone(), t(Right, F16, 64, 48, NZ), c.clone(), None);
    expect_err(
        &r,
        Rule::MatmulLayout,
        &["matmul B in Right must be ZN on Ascend 950, `b` is NZ"],
    );
    let r = mm(a.clone(), b.clone(), t(Acc, F32, 32, 48, ZZ), None);
    expect_err(
        &r,
        Rule::MatmulLayout,
        &["matmul C in Acc must be NZ on Ascend 950, `c` is ZZ"],
    );
    // A2/A3's Left is ZZ.
    let r = mm_for(
        Target::A2A3,
        t(Left, F16, 32, 64, ZZ),
        b.clone(),
        c.clone(),
        None,
    );
    expect_clean(&r);
    let r = mm_for(Target::A2A3, a, b, c, None);
    expect_err(
        &r,
        Rule::MatmulLayout,
        &["matmul A in Left must be ZZ on Ascend A2/A3, `a` is NZ"],
    );
}

#[test]
fn m_k_n_lie_in_1_to_4095() {
    // int8 at k = 4096: [16, 4096] and [4096, 16] int8 are exactly 64 KiB each (L0A/L0B fit).
    let a = t(Left, I8, 16, 4096, NZ);
    let b = t(Right, I8, 4096, 16, ZN);
    let c = t(Acc, I32, 16, 16, NZ);
    let r = mm(a.clone(), b.clone(), c.clone(), None);
    expect_err(
        &r,
        Rule::MatmulShape,
        &["matmul k = 4096 is outside 1..=4095"],
    );
    expect_no(&r, Rule::Capacity);
    // k = 4095 through the valid shapes is the largest legal k.
    let r = mm(
        a.clone().valid(16, 4095),
        b.clone().valid(4095, 16),
        c.clone(),
        None,
    );
    expect_clean(&r);
    // m = 0 (an empty valid shape) is outside the range; m = 1 is inside.
    let r = mm(
        a.clone().valid(0, 4095),
        b.clone().valid(4095, 16),
        c.clone(),
        None,
    );
    expect_err(&r, Rule::MatmulShape, &["matmul m = 0 is outside 1..=4095"]);
    let r = mm(a.valid(1, 4095), b.clone().valid(4095, 16), c.clone(), None);
    expect_clean(&r);
    let r = mm(t(Left, I8, 16, 32, NZ), b.valid(32, 0), c, None);
    expect_err(&r, Rule::MatmulShape, &["matmul n = 0 is outside 1..=4095"]);
}

#[test]
fn inner_dimensions_must_match() {
    let (a, b, c) = f16_operands();
    let r = mm(a.valid(32, 48), b, c, None);
    expect_err(
        &r,
        Rule::MatmulShape,
        &["matmul inner dimensions differ: A is 32x48 but B is 64x48"],
    );
}

#[test]
fn the_product_must_fit_the_acc_tile() {
    let (a, b, _) = f16_operands();
    let r = mm(a.clone(), b.clone(), t(Acc, F32, 16, 48, NZ), None);
    expect_err(
        &r,
        Rule::MatmulShape,
        &["the 32x48 product does not fit the 16x48 Acc tile `c`"],
    );
    // A larger Acc tile holds it.
    expect_clean(&mm(a, b, t(Acc, F32, 64, 64, NZ), None));
}

#[test]
fn bias_is_a_bias_tile_of_the_acc_dtype_and_1_by_n() {
    let (a, b, c) = f16_operands();
    expect_clean(&mm(
        a.clone(),
        b.clone(),
        c.clone(),
        Some(t(Bias, F32, 1, 48, ND)),
    ));
    let r = mm(
        a.clone(),
        b.clone(),
        c.clone(),
        Some(t(Mat, F32, 1, 48, ND)),
    );
    expect_err(
        &r,
        Rule::MatmulBias,
        &["matmul bias must be a Bias tile, `bias` is in Mat"],
    );
    let r = mm(
        a.clone(),
        b.clone(),
        c.clone(),
        Some(t(Bias, I32, 1, 48, ND)),
    );
    expect_err(
        &r,
        Rule::MatmulBias,
        &["bias `bias` is i32 but the accumulator is f32"],
    );
    let r = mm(
        a.clone(),
        b.clone(),
        c.clone(),
        Some(t(Bias, F32, 1, 32, ND)),
    );
    expect_err(
        &r,
        Rule::MatmulBias,
        &["bias must be [1, >= n = 48], `bias` is [1, 32]"],
    );
    let r = mm(a, b, c, Some(t(Bias, F32, 2, 48, ND)));
    expect_err(&r, Rule::MatmulBias, &["`bias` is [2, 48]"]);
}

#[test]
fn int8_bias_is_int32() {
    let r = mm(
        t(Left, I8, 16, 32, NZ),
        t(Right, I8, 32, 32, ZN),
        t(Acc, I32, 16, 32, NZ),
        Some(t(Bias, I32, 1, 32, ND)),
    );
    expect_clean(&r);
}
