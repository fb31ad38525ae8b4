//! Fixpipe quantisation (ASCEND950.md §6): runtime scalar scales and per-channel Scaling tiles.

use tile_backend::dsl::KernelBuilder;
use tile_backend::ir::*;
use tile_backend::verify::{verify, Report, Rule};

use DType::*;
use Layout::*;
use MemSpace::*;

mod support;
use support::*;

// ---------------------------------------------------------------- scale-scalar

/// Acc [32, 64] f32 -> Vec [32, 64] i8 with a runtime scale argument of kind `kind`.
fn scalar_scaled_move(kind: ParamKind) -> Report {
    let mut kb = KernelBuilder::new("q");
    let p = match kind {
        ParamKind::Scalar { dtype } => kb.scalar("s", dtype),
        ParamKind::Tensor { dtype, .. } => kb.input("s", dtype, [1u64, 64]),
    };
    let acc = kb.tile("acc", t(Acc, F32, 32, 64, NZ));
    let out = kb.tile("out", t(Vec, I8, 32, 64, ND));
    kb.cube(|c| {
        c.mov(out, acc).scale(Scale::Scalar(p));
    });
    verify(&kb.build())
}

#[test]
fn runtime_scale_is_f32_or_a_pre_encoded_int32_int64_word() {
    for dtype in [F32, I32, I64] {
        expect_clean(&scalar_scaled_move(ParamKind::Scalar { dtype }));
    }
    for dtype in [F16, BF16, U64, I8] {
        let r = scalar_scaled_move(ParamKind::Scalar { dtype });
        let what = format!("`s` is {dtype}");
        expect_err(
            &r,
            Rule::ScaleScalar,
            &[
                "a runtime scale must be an f32 scalar (bit-cast) or an int32/int64 pre-encoded word",
                &what,
            ],
        );
    }
}

#[test]
fn a_gm_tensor_is_not_a_runtime_scale() {
    let r = scalar_scaled_move(ParamKind::Tensor {
        dtype: U64,
        shape: vec![],
        output: false,
    });
    expect_err(
        &r,
        Rule::ScaleScalar,
        &["`s` is a GM tensor; a per-channel scale is a Scaling tile loaded through Mat"],
    );
}

#[test]
fn runtime_scale_on_a_store_from_acc() {
    let build = |dtype: DType| {
        let mut kb = KernelBuilder::new("q");
        let s = kb.scalar("s", dtype);
        let y = kb.output("y", I8, [32u64, 64]);
        let acc = kb.tile("acc", t(Acc, F32, 32, 64, NZ));
        kb.cube(|c| {
            c.store(GmView::nd(y, 0, 32, 64, 64), acc)
                .scale(Scale::Scalar(s));
        });
        verify(&kb.build())
    };
    expect_clean(&build(F32));
    expect_err(&build(F16), Rule::ScaleScalar, &["`s` is f16"]);
}

// ---------------------------------------------------------------- scale-tile

/// Acc [16, n_out] f32 -> Vec [16, n_out] i8 with the per-channel Scaling tile `sc`.
fn tile_scaled_move(n_out: u64, sc: TileType) -> Report {
    let mut kb = KernelBuilder::new("q");
    let acc = kb.tile("acc", t(Acc, F32, 16, n_out, NZ));
    let out = kb.tile("out", t(Vec, I8, 16, n_out, ND));
    let s = kb.tile("sc", sc);
    kb.cube(|c| {
        c.mov(out, acc).scale(Scale::Tile(s.into()));
    });
    verify(&kb.build())
}

#[test]
fn per_channel_scaling_tile_1_by_n_int64_is_clean() {
    expect_clean(&tile_scaled_move(64, t(Scaling, I64, 1, 64, ND)));
    expect_clean(&tile_scaled_move(64, t(Scaling, U64, 1, 64, ND)));
    // N = 512 fills the 4 KiB buffer exactly.
    expect_clean(&tile_scaled_move(512, t(Scaling, U64, 1, 512, ND)));
    // More words than output columns is fine.
    expect_clean(&tile_scaled_move(32, t(Scaling, U64, 1, 64, ND)));
}

#[test]
fn scaling_n_must_be_a_multiple_of_16() {
    let r = tile_scaled_move(32, t(Scaling, U64, 1, 40, ND));
    expect_err(
        &r,
        Rule::ScaleTile,
        &["Scaling tile N must be a multiple of 16; `sc` has N = 40"],
    );
}

#[test]
fn scaling_n_must_be_at_most_512() {
    let r = tile_scaled_move(32, t(Scaling, U64, 1, 528, ND));
    expect_err(
        &r,
        Rule::ScaleTile,
        &["Scaling tile N must be at most 512 (the 4 KiB buffer); `sc` has N = 528"],
    );
    // 528 words do not fit the buffer either.
    expect_err(&r, Rule::Capacity, &["4224 B of Scaling"]);
}

#[test]
fn row_scaling_n_by_1_is_rejected() {
    let r = tile_scaled_move(64, t(Scaling, U64, 64, 1, ND));
    expect_err(
        &r,
        Rule::ScaleTile,
        &[
            "a Scaling tile has shape [1, N]",
            "[N, 1] row scaling is not supported",
            "`sc` is [64, 1]",
        ],
    );
}

#[test]
fn scaling_tile_holds_64_bit_words_in_the_scaling_buffer() {
    let r = tile_scaled_move(64, t(Scaling, F32, 1, 64, ND));
    expect_err(
        &r,
        Rule::ScaleTile,
        &["a Scaling tile holds int64/uint64 words; `sc` is f32"],
    );
    let r = tile_scaled_move(64, t(Mat, U64, 1, 64, ND));
    expect_err(
        &r,
        Rule::ScaleTile,
        &["a per-channel scale is a Scaling tile", "`sc` is in Mat"],
    );
}

#[test]
fn one_scale_word_per_output_column() {
    let r = tile_scaled_move(64, t(Scaling, U64, 1, 32, ND));
    expect_err(
        &r,
        Rule::ScaleTile,
        &["one scale word per output column: 64 columns but `sc` holds 32 words"],
    );
    // A store from Acc counts the GM window's columns.
    let build = |cols: u64| {
        let mut kb = KernelBuilder::new("q");
        let y = kb.output("y", I8, [16u64, 64]);
        let acc = kb.tile("acc", t(Acc, F32, 16, 64, NZ));
        let s = kb.tile("sc", t(Scaling, U64, 1, cols, ND));
        kb.cube(|c| {
            c.store(GmView::nd(y, 0, 16, 64, 64), acc)
                .scale(Scale::Tile(s.into()));
        });
        verify(&kb.build())
    };
    expect_clean(&build(64));
    expect_err(
        &build(48),
        Rule::ScaleTile,
        &["64 columns but `sc` holds 48 words"],
    );
}

#[test]
fn full_per_channel_path_gm_mat_scaling_fixpipe_is_clean() {
    // W8A8: int8 x int8 -> int32, dequantised per channel to f16 by the Fixpipe.
    let (m, k, n) = (32u64, 64u64, 64u64);
    let mut kb = KernelBuilder::new("w8a8");
    let x = kb.input("x", I8, [m, k]);
    let w = kb.input("w", I8, [k, n]);
    let scales = kb.input("scales", U64, [1, n]);
    let y = kb.output("y", F16, [m, n]);
    let x_l1 = kb.tile("x_l1", t(Mat, I8, m, k, NZ));
    let w_l1 = kb.tile("w_l1", t(Mat, I8, k, n, NZ));
    let s_l1 = kb.tile("s_l1", t(Mat, U64, 1, n, ND));
    let x_l0 = kb.tile("x_l0", t(Left, I8, m, k, NZ));
    let w_l0 = kb.tile("w_l0", t(Right, I8, k, n, ZN));
    let acc = kb.tile("acc", t(Acc, I32, m, n, NZ));
    let sc = kb.tile("sc", t(Scaling, U64, 1, n, ND));
    kb.cube(|c| {
        c.load(x_l1, GmView::nd(x, 0, m, k, k));
        c.load(w_l1, GmView::nd(w, 0, k, n, n));
        c.load(s_l1, GmView::nd(scales, 0, 1, n, n));
        c.set_flag(Pipe::Mte2, Pipe::Mte1, 0);
        c.wait_flag(Pipe::Mte2, Pipe::Mte1, 0);
        c.set_flag(Pipe::Mte2, Pipe::Fix, 0);
        c.wait_flag(Pipe::Mte2, Pipe::Fix, 0);
        c.mov(x_l0, x_l1);
        c.mov(w_l0, w_l1);
        c.mov(sc, s_l1);
        c.set_flag(Pipe::Mte1, Pipe::M, 0);
        c.wait_flag(Pipe::Mte1, Pipe::M, 0);
        c.matmul(acc, x_l0, w_l0).phase(Phase::Final);
        c.store(GmView::nd(y, 0, m, n, n), acc)
            .scale(Scale::Tile(sc.into()));
    });
    let r = verify(&kb.build());
    expect_clean(&r);
    expect_no(&r, Rule::ScaleTile);
}
