//! The sort instructions' A5 rules (TSORT32, TMRGSORT; `npu/a5/TSort32.hpp`, `TMrgSort.hpp`,
//! A5-FACTS §6): each rule broken once (or more) with the diagnostic it must give, and the
//! well-formed forms clean.

use tile_backend::dsl::KernelBuilder;
use tile_backend::ir::*;
use tile_backend::verify::{verify, Report, Rule};

use DType::*;
use Layout::*;
use MemSpace::*;

mod support;
use support::*;

/// A TSORT32 call's tiles.
#[derive(Clone)]
struct Sort32 {
    dst: TileType,
    src: TileType,
    idx: TileType,
    tmp: Option<TileType>,
}

/// f32, 4 rows of 64 (two blocks each), indices per row, no tail.
fn sort32_f32() -> Sort32 {
    Sort32 {
        dst: t(Vec, F32, 4, 128, ND),
        src: t(Vec, F32, 4, 64, ND),
        idx: t(Vec, U32, 4, 64, ND),
        tmp: None,
    }
}

/// f16, 2 rows of 100 valid columns (a 4-element tail), one index row for both, tail form.
fn sort32_f16_tail() -> Sort32 {
    Sort32 {
        dst: t(Vec, F16, 2, 512, ND),
        src: t(Vec, F16, 2, 112, ND).valid(2, 100),
        idx: t(Vec, U32, 1, 128, ND).valid(1, 100),
        tmp: Some(t(Vec, F16, 1, 128, ND)),
    }
}

/// One f32 row of 2050 valid columns (8200 bytes: A5's tail-only path), tmp of `tmp_cols`.
fn long_f32_row(tmp_cols: u64) -> Sort32 {
    Sort32 {
        dst: t(Vec, F32, 1, 4160, ND),
        src: t(Vec, F32, 1, 2056, ND).valid(1, 2050),
        idx: t(Vec, U32, 1, 2080, ND).valid(1, 2050),
        tmp: Some(t(Vec, F32, 1, tmp_cols, ND)),
    }
}

fn check_sort32(c: &Sort32) -> Report {
    let mut kb = KernelBuilder::new("sort32");
    let dst = kb.tile("dst", c.dst.clone());
    let src = kb.tile("src", c.src.clone());
    let idx = kb.tile("idx", c.idx.clone());
    let tmp = c.tmp.clone().map(|t| kb.tile("tmp", t));
    kb.vector(|v| match tmp {
        Some(tmp) => v.sort32_tail(dst, src, idx, tmp),
        None => v.sort32(dst, src, idx),
    });
    verify(&kb.build())
}

fn check_mrgsort(dst: TileType, src: TileType, block_len: u64) -> Report {
    let mut kb = KernelBuilder::new("mrgsort");
    let d = kb.tile("dst", dst);
    let s = kb.tile("src", src);
    kb.vector(|v| v.mrgsort(d, s, block_len));
    verify(&kb.build())
}

fn check_lists(dst: TileType, tmp: TileType, lists: &[TileType]) -> Report {
    let mut kb = KernelBuilder::new("mrgsort_lists");
    let d = kb.tile("dst", dst);
    let t = kb.tile("tmp", tmp);
    let srcs: std::vec::Vec<TileRef> = lists
        .iter()
        .enumerate()
        .map(|(i, l)| kb.tile(format!("list{i}"), l.clone()).into())
        .collect();
    kb.vector(|v| v.mrgsort_lists(d, t, srcs));
    verify(&kb.build())
}

fn list(cols: u64) -> TileType {
    t(Vec, F32, 1, cols, ND)
}

#[test]
fn the_well_formed_sorts_are_clean() {
    expect_clean(&check_sort32(&sort32_f32()));
    expect_clean(&check_sort32(&sort32_f16_tail()));
    // One index row for every row, 3-argument form.
    let mut c = sort32_f32();
    c.idx = t(Vec, U32, 1, 64, ND);
    expect_clean(&check_sort32(&c));
    // A long f32 row (over 8160 bytes): its tail form needs only a 32-column tmp.
    expect_clean(&check_sort32(&long_f32_row(32)));
    expect_clean(&check_mrgsort(list(512), list(512), 64));
    expect_clean(&check_mrgsort(
        t(Vec, F16, 1, 1024, ND),
        t(Vec, F16, 1, 1024, ND),
        256,
    ));
    for n in 2..=4 {
        let lists = vec![list(64); n];
        expect_clean(&check_lists(list(64), list(256), &lists));
    }
}

#[test]
fn sort_tiles_live_in_ub() {
    let mut c = sort32_f32();
    c.src = t(Mat, F32, 4, 64, ND);
    expect_err(
        &check_sort32(&c),
        Rule::SortSpace,
        &["`src`", "UB (Vec) only"],
    );
    let r = check_lists(list(64), t(Mat, F32, 1, 256, ND), &[list(64), list(64)]);
    expect_err(&r, Rule::SortSpace, &["`tmp`"]);
}

#[test]
fn sort_tiles_are_row_major() {
    let mut c = sort32_f32();
    c.idx = t(Vec, U32, 64, 4, DN).valid(4, 64);
    expect_err(&check_sort32(&c), Rule::SortLayout, &["`idx`", "row-major"]);
    let r = check_mrgsort(t(Vec, F32, 16, 32, NZ), list(512), 64);
    expect_err(&r, Rule::SortLayout, &["`dst`"]);
}

#[test]
fn sort_values_are_f32_or_f16_and_indices_u32() {
    let mut c = sort32_f32();
    c.idx = t(Vec, I32, 4, 64, ND);
    expect_err(&check_sort32(&c), Rule::SortDtype, &["indices are u32"]);
    let mut c = sort32_f32();
    c.src = t(Vec, BF16, 4, 64, ND);
    c.dst = t(Vec, BF16, 4, 128, ND);
    expect_err(&check_sort32(&c), Rule::SortDtype, &["f32 or f16"]);
    let mut c = sort32_f16_tail();
    c.tmp = Some(t(Vec, F32, 1, 128, ND));
    expect_err(
        &check_sort32(&c),
        Rule::SortDtype,
        &["`tmp` is f32", "one dtype"],
    );
    let r = check_mrgsort(t(Vec, I32, 1, 512, ND), t(Vec, I32, 1, 512, ND), 64);
    expect_err(&r, Rule::SortDtype, &["f32 or f16"]);
    let r = check_lists(list(64), list(256), &[list(64), t(Vec, F16, 1, 64, ND)]);
    expect_err(&r, Rule::SortDtype, &["`list1` is f16"]);
}

#[test]
fn sort32_shapes() {
    // dst too narrow for the pairs.
    let mut c = sort32_f32();
    c.dst = t(Vec, F32, 4, 64, ND);
    expect_err(
        &check_sort32(&c),
        Rule::SortShape,
        &["64 pairs", "dst has 64"],
    );
    // dst sorts its own valid rows: they must be src's.
    let mut c = sort32_f32();
    c.dst = t(Vec, F32, 4, 128, ND).valid(3, 128);
    expect_err(
        &check_sort32(&c),
        Rule::SortShape,
        &["dst's 3 valid rows", "src has 4"],
    );
    // idx: one row or one per row, and an index per value.
    let mut c = sort32_f32();
    c.idx = t(Vec, U32, 4, 64, ND).valid(2, 64);
    expect_err(&check_sort32(&c), Rule::SortShape, &["2 valid rows"]);
    let mut c = sort32_f32();
    c.idx = t(Vec, U32, 4, 64, ND).valid(4, 32);
    expect_err(
        &check_sort32(&c),
        Rule::SortShape,
        &["32 valid columns, src 64"],
    );
    // The padded last block reads 128 indices per row.
    let mut c = sort32_f16_tail();
    c.idx = t(Vec, U32, 1, 104, ND).valid(1, 100);
    expect_err(
        &check_sort32(&c),
        Rule::SortShape,
        &["reads 128 indices", "104 columns"],
    );
}

#[test]
fn a_sort32_tail_needs_its_tmp() {
    let mut c = sort32_f16_tail();
    c.tmp = None;
    expect_err(
        &check_sort32(&c),
        Rule::SortTmp,
        &["100 valid columns", "4-argument form"],
    );
    let mut c = sort32_f16_tail();
    c.tmp = Some(t(Vec, F16, 1, 112, ND));
    expect_err(
        &check_sort32(&c),
        Rule::SortTmp,
        &["112 columns", "needs 128"],
    );
    // Over 8160 bytes a row's tail alone goes through tmp: 32 columns.
    expect_err(
        &check_sort32(&long_f32_row(16)),
        Rule::SortTmp,
        &["over 8160", "needs 32"],
    );
}

#[test]
fn a5s_long_row_tail_underflows_at_255_blocks() {
    // 8150 f32 columns: 255 blocks with a tail, 32600 bytes per row.
    let c = Sort32 {
        dst: t(Vec, F32, 1, 16320, ND),
        src: t(Vec, F32, 1, 8152, ND).valid(1, 8150),
        idx: t(Vec, U32, 1, 8160, ND).valid(1, 8150),
        tmp: Some(t(Vec, F32, 1, 32, ND)),
    };
    expect_err(
        &check_sort32(&c),
        Rule::SortRepeat,
        &["255 blocks", "underflows"],
    );
    // 8100 columns (254 blocks) are fine.
    let ok = Sort32 {
        src: t(Vec, F32, 1, 8104, ND).valid(1, 8100),
        idx: t(Vec, U32, 1, 8128, ND).valid(1, 8100),
        ..c
    };
    expect_no(&check_sort32(&ok), Rule::SortRepeat);
}

#[test]
fn mrgsort_block_length_and_repeat() {
    let r = check_mrgsort(list(512), list(512), 96);
    expect_err(&r, Rule::SortRepeat, &["96 elements", "multiple of 64"]);
    let r = check_mrgsort(list(512), list(512).valid(1, 384), 64);
    expect_err(
        &r,
        Rule::SortRepeat,
        &["384 valid columns", "4 x block length (256)"],
    );
    let r = check_mrgsort(list(512), list(512), 256);
    expect_err(&r, Rule::SortRepeat, &["512 / 1024 = 0", "1..=255"]);
    let r = check_mrgsort(t(Vec, F16, 1, 65536, ND), t(Vec, F16, 1, 65536, ND), 64);
    expect_err(&r, Rule::SortRepeat, &["= 256", "1..=255"]);
}

#[test]
fn mrgsort_tiles_are_one_row_and_dst_holds_the_merge() {
    let r = check_mrgsort(t(Vec, F32, 2, 512, ND), list(512), 64);
    expect_err(&r, Rule::SortShape, &["`dst` has 2 rows", "one row"]);
    let r = check_mrgsort(list(256), list(512), 64);
    expect_err(&r, Rule::SortShape, &["writes 512 columns", "dst has 256"]);
    let r = check_lists(list(64), list(256), &[list(64), t(Vec, F32, 2, 64, ND)]);
    expect_err(&r, Rule::SortShape, &["`list1` has 2 rows"]);
}

#[test]
fn mrgsort_lists_counts_and_sizes() {
    let r = check_lists(list(64), list(256), &[list(64)]);
    expect_err(&r, Rule::SortLists, &["2 to 4 lists, got 1"]);
    let r = check_lists(list(64), list(512), &vec![list(64); 5]);
    expect_err(&r, Rule::SortLists, &["2 to 4 lists, got 5"]);
    let r = check_lists(list(64), list(256), &[list(64), list(64).valid(1, 63)]);
    expect_err(
        &r,
        Rule::SortLists,
        &["list 1 has 63 valid columns", "2-column pairs"],
    );
    // 65536 pairs do not fit vmrgsort4's 16-bit count.
    let r = check_lists(list(64), list(131072 + 64), &[list(131072), list(64)]);
    expect_err(&r, Rule::SortLists, &["65536 pairs", "65535"]);
}

#[test]
fn mrgsort_lists_tmp_holds_every_list_and_dst_comes_out_of_it() {
    let r = check_lists(list(64), list(96), &[list(64), list(64)]);
    expect_err(&r, Rule::SortTmp, &["96 columns", "the lists' 128"]);
    let r = check_lists(list(512), list(128), &[list(64), list(64)]);
    expect_err(&r, Rule::SortTmp, &["dst's 512 valid columns", "tmp's 128"]);
}

#[test]
fn the_merge_and_its_first_source_fit_in_ub() {
    // tmp 160 KiB + list0 128 KiB > 248 KiB of UB.
    let r = check_lists(list(64), list(40960), &[list(32768), list(64)]);
    expect_err(&r, Rule::SortUb, &["`list0`", "exceed UB"]);
    let r = check_mrgsort(list(40960), list(32768), 64);
    expect_err(&r, Rule::SortUb, &["`src`", "exceed UB"]);
}
