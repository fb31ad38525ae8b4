//! Scalar reads of a UB tile element (`read_tile_scalar`, PTO `Tile::GetValue`): the tile's
//! space, its dtype and a constant index.

use tile_backend::dsl::KernelBuilder;
use tile_backend::ir::*;
use tile_backend::verify::{verify, Report, Rule};

mod support;
use support::*;

/// A vector kernel reading element `index` of a `[1, 16]` tile of `dtype` in `space`, after
/// loading it from GM (a Mat tile is read in the cube section, where it lives).
fn read(space: MemSpace, dtype: DType, index: Expr) -> Report {
    let mut kb = KernelBuilder::new("s");
    let layout = if space == MemSpace::Mat {
        Layout::NZ
    } else {
        Layout::ND
    };
    let rows = if space == MemSpace::Mat { 16 } else { 1 };
    let src = kb.input("src", dtype, [rows, 32u64]);
    let tile = kb.tile("keys", t(space, dtype, rows, 32, layout));
    let body = |b: &mut tile_backend::dsl::Body<'_>| {
        b.load(tile, GmView::nd(src, 0, rows, 32u64, 32u64));
        b.set_flag(Pipe::Mte2, Pipe::S, 0);
        b.wait_flag(Pipe::Mte2, Pipe::S, 0);
        b.read_tile_scalar("key", tile, index.clone());
    };
    if space == MemSpace::Mat {
        kb.cube(body);
    } else {
        kb.vector(body);
    }
    verify(&kb.build())
}

#[test]
fn a_ub_integer_element_is_read() {
    for dtype in [DType::I8, DType::U8, DType::I32, DType::I64] {
        expect_clean(&read(MemSpace::Vec, dtype, 31.into()));
    }
    // A runtime index is the simulator's to check.
    let mut kb = KernelBuilder::new("s");
    let n = kb.scalar("n", DType::I64);
    let tile = kb.tile("keys", t(MemSpace::Vec, DType::I32, 1, 8, Layout::ND));
    kb.vector(|v| {
        v.read_tile_scalar("key", tile, Expr::Param(n) * 100);
    });
    expect_clean(&verify(&kb.build()));
}

// ---------------------------------------------------------------- scalar-tile-space

#[test]
fn the_scalar_unit_reads_only_ub_tiles() {
    let r = read(MemSpace::Mat, DType::I32, 0.into());
    let d = expect_err(
        &r,
        Rule::ScalarTileSpace,
        &[
            "read_tile_scalar of `keys` in Mat",
            "reads only UB (Vec) tiles",
        ],
    );
    assert_eq!(d.subject, "read_tile_scalar");
}

// ---------------------------------------------------------------- scalar-tile-dtype

#[test]
fn the_tile_is_an_integer_an_i64_holds() {
    for dtype in [DType::F32, DType::F16, DType::BF16, DType::U64] {
        let r = read(MemSpace::Vec, dtype, 0.into());
        expect_err(
            &r,
            Rule::ScalarTileDtype,
            &[
                &format!("read_tile_scalar of `keys` ({dtype})"),
                "(i8, u8, i32, i64)",
            ],
        );
    }
}

// ---------------------------------------------------------------- scalar-tile-index

#[test]
fn a_constant_index_lies_inside_the_tile() {
    for index in [32, -1] {
        let r = read(MemSpace::Vec, DType::I32, index.into());
        expect_err(
            &r,
            Rule::ScalarTileIndex,
            &[&format!(
                "read_tile_scalar at element {index} of `keys`, which has 32 elements (1x32)"
            )],
        );
    }
    expect_no(
        &read(MemSpace::Vec, DType::I32, 31.into()),
        Rule::ScalarTileIndex,
    );
}
