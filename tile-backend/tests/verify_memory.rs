//! Tile shapes and fractals, capacity and alignment, GM loads and stores (ASCEND950.md §2-§3).

use tile_backend::arch::Target;
use tile_backend::dsl::{KernelBuilder, Reinterpret};
use tile_backend::ir::*;
use tile_backend::verify::{verify, Report, Rule};

// ---------------------------------------------------------------- helpers

/// A kernel that only declares tiles.
fn decls(tiles: &[(&str, TileType)]) -> Report {
    decls_for(Target::Ascend950, tiles)
}

fn decls_for(target: Target, tiles: &[(&str, TileType)]) -> Report {
    let mut kb = KernelBuilder::for_target("decls", target);
    for (name, ty) in tiles {
        kb.tile(*name, ty.clone());
    }
    verify(&kb.build())
}

use DType::*;
use Layout::*;

mod support;
use support::*;
use MemSpace::*;

const KIB: u64 = 1024;

// ---------------------------------------------------------------- tile-shape

#[test]
fn well_formed_tiles_are_clean() {
    expect_clean(&decls(&[
        ("v_nd", t(Vec, F16, 16, 16, ND)),
        ("v_dn", t(Vec, F32, 8, 3, DN)),
        ("m_nz", t(Mat, I8, 16, 32, NZ)),
        ("m_zn", t(Mat, F32, 8, 16, ZN)),
        ("m_zz", t(Mat, BF16, 32, 16, ZZ)),
        ("acc", t(Acc, F32, 16, 16, NZ)),
        ("part", t(Vec, F32, 16, 16, ND).valid(3, 5)),
        ("dyn", t(Vec, F32, 16, 16, ND).dynamic()),
        ("s", t(Scaling, U64, 1, 16, ND)),
    ]));
}

#[test]
fn zero_dimension_is_rejected() {
    let r = decls(&[("z", t(Vec, F32, 0, 8, ND))]);
    let d = expect_err(
        &r,
        Rule::TileShape,
        &["tile shape 0x8 has a zero dimension"],
    );
    assert_eq!(d.subject, "tile `z`");
    assert_eq!(d.loc, None);
}

#[test]
fn unboxed_tiles_need_32_byte_rows_or_columns() {
    let r = decls(&[("nd", t(Vec, F16, 16, 10, ND))]);
    expect_err(&r, Rule::TileShape, &["row-major (ND)", "10 x 2 B = 20 B"]);
    let r = decls(&[("dn", t(Vec, F32, 6, 16, DN))]);
    expect_err(
        &r,
        Rule::TileShape,
        &["column-major (DN)", "6 x 4 B = 24 B"],
    );
    // 16 f16 columns = 32 B, 8 f32 rows = 32 B: fine.
    expect_clean(&decls(&[
        ("nd", t(Vec, F16, 3, 16, ND)),
        ("dn", t(Vec, F32, 8, 5, DN)),
    ]));
}

#[test]
fn boxed_tiles_need_a_512_byte_fractal_and_whole_boxes() {
    let mut no_box = t(Mat, F16, 16, 16, NZ);
    no_box.fractal = None;
    expect_err(
        &decls(&[("nb", no_box)]),
        Rule::TileShape,
        &["a NZ tile needs a fractal box"],
    );
    let mut small = t(Mat, F16, 16, 16, NZ);
    small.fractal = Some(Fractal { rows: 16, cols: 8 });
    expect_err(
        &decls(&[("small", small)]),
        Rule::TileShape,
        &["fractal 16x8 of f16 is not a 512-byte box", "16 x 16"],
    );
    expect_err(
        &decls(&[("partial", t(Mat, F16, 20, 16, NZ))]),
        Rule::TileShape,
        &["whole number of 16x16 boxes, got 20x16"],
    );
    // int8 boxes are 16 x 32: 16 columns is half a box.
    expect_err(
        &decls(&[("i8", t(Mat, I8, 16, 16, NZ))]),
        Rule::TileShape,
        &["whole number of 16x32 boxes, got 16x16"],
    );
    // fp32 ZN boxes are 8 x 16.
    expect_err(
        &decls(&[("zn", t(Mat, F32, 16, 8, ZN))]),
        Rule::TileShape,
        &["whole number of 8x16 boxes, got 16x8"],
    );
}

#[test]
fn sixty_four_bit_data_is_never_boxed() {
    let r = decls(&[("w", t(Mat, I64, 16, 4, NZ))]);
    expect_err(
        &r,
        Rule::TileShape,
        &["64-bit i64 data cannot be stored in the boxed layout NZ"],
    );
    expect_clean(&decls(&[("w", t(Mat, I64, 16, 4, ND))]));
}

#[test]
fn valid_shape_cannot_exceed_the_allocation() {
    let r = decls(&[("v", t(Vec, F32, 16, 16, ND).valid(17, 16))]);
    expect_err(
        &r,
        Rule::TileShape,
        &["valid rows 17 exceed the allocated 16"],
    );
    let r = decls(&[("v", t(Vec, F32, 16, 16, ND).valid(16, 24))]);
    expect_err(
        &r,
        Rule::TileShape,
        &["valid cols 24 exceed the allocated 16"],
    );
}

#[test]
fn acc_boxes_are_16_by_16() {
    // 16 x 8 fp32 is a 512-byte box, but not the Acc's.
    let mut a = t(Acc, F32, 16, 16, NZ);
    a.fractal = Some(Fractal { rows: 16, cols: 8 });
    expect_err(
        &decls(&[("acc", a)]),
        Rule::TileShape,
        &["Acc boxes are 16x16, this tile declares 16x8"],
    );
}

#[test]
fn tile_groups_need_a_buffer_and_tiles_cannot_live_in_gm() {
    let mut kb = KernelBuilder::new("g");
    kb.tile_group("none", t(Vec, F32, 8, 8, ND), 0);
    let r = verify(&kb.build());
    expect_err(&r, Rule::TileShape, &["at least 1 buffer, got 0"]);
    let r = decls(&[("gm", t(Gm, F32, 8, 8, ND))]);
    expect_err(&r, Rule::TileShape, &["a tile cannot live in GM"]);
}

// ---------------------------------------------------------------- capacity

#[test]
fn ub_above_248_kib_is_an_error() {
    // 125 x 512 x 4 B = 256000 B = 250 KiB.
    let r = decls(&[("big", t(Vec, F32, 125, 512, ND))]);
    let d = expect_err(
        &r,
        Rule::Capacity,
        &[
            "tiles need 256000 B of Vec but Ascend 950 has 253952 B (248 KiB)",
            "`big` 256000 B",
        ],
    );
    assert_eq!(d.subject, "Vec (UB)");
}

#[test]
fn ub_between_240_and_248_kib_is_a_warning() {
    // 61 x 1024 x 4 B = 249856 B = 244 KiB.
    let r = decls(&[("big", t(Vec, F32, 61, 1024, ND))]);
    expect_warn(
        &r,
        Rule::Capacity,
        &["tiles need 249856 B of Vec, above the safe 245760 B (240 KiB"],
    );
    assert!(r.is_ok(), "a warning is not an error:\n{r}");
    // Exactly 248 KiB (124 x 512 x 4 B = 253952 B) is still only a warning.
    let r = decls(&[("full", t(Vec, F32, 124, 512, ND))]);
    expect_warn(&r, Rule::Capacity, &["253952 B"]);
    assert!(r.is_ok(), "{r}");
    // Exactly 240 KiB (120 x 512 x 4 B) is clean.
    expect_clean(&decls(&[("safe", t(Vec, F32, 120, 512, ND))]));
}

#[test]
fn capacity_counts_buffers_and_planner_alignment() {
    // Two ping-pong buffers of 120 KiB: 240 KiB, clean.
    let mut kb = KernelBuilder::new("pp");
    kb.tile_group("pp", t(Vec, F32, 60, 512, ND), 2);
    expect_clean(&verify(&kb.build()));
    // ... plus a 32-byte tile, which the planner rounds to 128 B: 245888 B > 240 KiB.
    let mut kb = KernelBuilder::new("pp");
    kb.tile_group("pp", t(Vec, F32, 60, 512, ND), 2);
    kb.tile("tiny", t(Vec, F32, 1, 8, ND));
    let r = verify(&kb.build());
    expect_warn(
        &r,
        Rule::Capacity,
        &[
            "tiles need 245888 B of Vec",
            "`pp` 245760 B",
            "`tiny` 128 B",
        ],
    );
}

#[test]
fn reinterpret_aliases_take_no_extra_space() {
    let mut kb = KernelBuilder::new("alias");
    let src = kb.tile("s", t(Vec, F32, 120, 512, ND));
    kb.reinterpret(
        "h",
        src,
        Reinterpret {
            dtype: Some(F16),
            shape: Some((240, 512)),
            layout: None,
        },
    );
    expect_clean(&verify(&kb.build()));
}

#[test]
fn fixed_addresses_count_up_to_their_end() {
    let mut kb = KernelBuilder::new("fixed");
    // 256 B ending 128 B past the 248 KiB end.
    kb.tile_at("late", t(Vec, F32, 8, 8, ND), 248 * KIB - 128);
    let r = verify(&kb.build());
    expect_err(&r, Rule::Capacity, &["tiles need 254080 B of Vec"]);
}

#[test]
fn mat_holds_512_kib() {
    // 512 x 512 x 2 B = 512 KiB exactly: clean (Mat has no unsafe top).
    expect_clean(&decls(&[("l1", t(Mat, F16, 512, 512, NZ))]));
    let r = decls(&[
        ("l1", t(Mat, F16, 512, 512, NZ)),
        ("more", t(Mat, F16, 16, 16, NZ)),
    ]);
    let d = expect_err(
        &r,
        Rule::Capacity,
        &["tiles need 524800 B of Mat", "has 524288 B (512 KiB)"],
    );
    assert_eq!(d.subject, "Mat (L1)");
}

#[test]
fn l0_and_small_buffers_have_their_capacities() {
    let r = decls(&[("a", t(Left, F16, 256, 256, NZ))]);
    expect_err(
        &r,
        Rule::Capacity,
        &["131072 B of Left", "65536 B (64 KiB)"],
    );
    let r = decls(&[("b", t(Bias, F32, 1, 2048, ND))]);
    expect_err(&r, Rule::Capacity, &["8192 B of Bias", "4096 B (4 KiB)"]);
    // Acc is 256 KiB on 950 but 128 KiB on A2/A3.
    let acc = [("acc", t(Acc, F32, 256, 256, NZ))];
    expect_clean(&decls(&acc));
    expect_err(
        &decls_for(Target::A2A3, &acc),
        Rule::Capacity,
        &["262144 B of Acc but Ascend A2/A3 has 131072 B (128 KiB)"],
    );
}

// ---------------------------------------------------------------- alignment

#[test]
fn fixed_address_must_be_32_byte_aligned() {
    let mut kb = KernelBuilder::new("al");
    kb.tile_at("v", t(Vec, F32, 8, 8, ND), 16);
    let r = verify(&kb.build());
    let d = expect_err(
        &r,
        Rule::Alignment,
        &["Vec address 0x10 is not 32-byte aligned (16 % 32 = 16)"],
    );
    assert_eq!(d.subject, "tile `v`");
    let mut kb = KernelBuilder::new("al");
    kb.tile_at("m", t(Mat, F16, 16, 16, NZ), 33);
    expect_err(
        &verify(&kb.build()),
        Rule::Alignment,
        &["Mat address 0x21 is not 32-byte aligned (33 % 32 = 1)"],
    );
    // 64 is below the planner's 128 but meets the hardware's 32.
    let mut kb = KernelBuilder::new("al");
    kb.tile_at("v", t(Vec, F32, 8, 8, ND), 64);
    expect_clean(&verify(&kb.build()));
}

#[test]
fn scaling_address_must_be_128_byte_aligned() {
    let mut kb = KernelBuilder::new("al");
    kb.tile_at("s", t(Scaling, U64, 1, 16, ND), 64);
    expect_err(
        &verify(&kb.build()),
        Rule::Alignment,
        &["Scaling address 0x40 is not 128-byte aligned (64 % 128 = 64)"],
    );
    let mut kb = KernelBuilder::new("al");
    kb.tile_at("s", t(Scaling, U64, 1, 16, ND), 128);
    let r = verify(&kb.build());
    expect_no(&r, Rule::Alignment);
    expect_clean(&r);
}

// ---------------------------------------------------------------- loads

/// Loads a `rows x cols` window of a GM tensor of `gm` dtype in `gm_layout` into a tile, from the
/// core that owns the tile's space.
fn load(gm: DType, gm_layout: Layout, tile: TileType) -> Report {
    let (rows, cols) = (tile.rows, tile.cols);
    let mut kb = KernelBuilder::new("load");
    let x = kb.input("x", gm, [rows, cols]);
    let dst = kb.tile("dst", tile.clone());
    // A DN window steps `rows` elements per column (a stride of `cols` would read past the
    // `rows x cols` tensor: `view-range`).
    let stride = if gm_layout == DN { rows } else { cols };
    let view = GmView {
        layout: gm_layout,
        ..GmView::nd(x, 0, rows, cols, stride)
    };
    if tile.space == Vec {
        kb.vector(|v| v.load(dst, view));
    } else {
        kb.cube(|c| c.load(dst, view));
    }
    verify(&kb.build())
}

#[test]
fn gm_loads_land_only_in_vec_or_mat() {
    for (space, layout) in [
        (Left, NZ),
        (Right, ZN),
        (Acc, NZ),
        (Bias, ND),
        (Scaling, ND),
    ] {
        let dt = if space == Scaling { U64 } else { F32 };
        let r = load(dt, ND, t(space, dt, 16, 16, layout));
        let what =
            format!("GM loads land only in Vec or Mat on Ascend 950, not in {space} (tile `dst`)");
        expect_err(&r, Rule::LoadSpace, &[&what]);
    }
    expect_clean(&load(F32, ND, t(Vec, F32, 16, 16, ND)));
    expect_clean(&load(F32, ND, t(Mat, F32, 16, 16, ND)));
}

#[test]
fn legal_load_layouts_into_mat() {
    for (gm, tile) in [(ND, ND), (DN, DN), (NZ, NZ), (ND, NZ), (DN, ZN)] {
        let r = load(F16, gm, t(Mat, F16, 32, 32, tile));
        expect_clean(&r);
    }
    let r = load(F16, ND, t(Mat, F16, 32, 32, ZN));
    expect_err(
        &r,
        Rule::LoadLayout,
        &[
            "GM ND -> Mat ZN is not a legal load layout",
            "into Mat only ND->ND, DN->DN, NZ->NZ, ND->NZ, DN->ZN",
        ],
    );
}

#[test]
fn nd_to_nz_into_vec_is_rejected() {
    for (gm, tile) in [(ND, ND), (DN, DN), (NZ, NZ)] {
        expect_clean(&load(F16, gm, t(Vec, F16, 32, 32, tile)));
    }
    let r = load(F16, ND, t(Vec, F16, 32, 32, NZ));
    expect_err(
        &r,
        Rule::LoadLayout,
        &[
            "GM ND -> Vec NZ is not a legal load layout",
            "into Vec only ND->ND, DN->DN, NZ->NZ",
        ],
    );
    let r = load(F16, DN, t(Vec, F16, 32, 32, ZN));
    expect_err(&r, Rule::LoadLayout, &["GM DN -> Vec ZN"]);
}

#[test]
fn sixty_four_bit_loads_are_nd_or_dn_only() {
    let r = load(I64, NZ, t(Mat, I64, 16, 4, ND));
    expect_err(
        &r,
        Rule::LoadLayout,
        &["64-bit i64 data is loaded ND or DN only, not NZ"],
    );
    expect_clean(&load(I64, ND, t(Vec, I64, 16, 4, ND)));
    expect_clean(&load(U64, DN, t(Mat, U64, 4, 16, DN)));
}

#[test]
fn loads_copy_bytes_without_conversion() {
    let r = load(F32, ND, t(Vec, F16, 16, 16, ND));
    expect_err(
        &r,
        Rule::LoadDtype,
        &["a load copies bytes: GM tensor is f32 but tile `dst` is f16"],
    );
}

#[test]
fn gm_window_must_cover_the_valid_shape() {
    let build = |view_rows: u64, tile: TileType| {
        let mut kb = KernelBuilder::new("view");
        let x = kb.input("x", F32, [64, 16]);
        let dst = kb.tile("dst", tile);
        kb.vector(|v| v.load(dst, GmView::nd(x, 0, view_rows, 16, 16)));
        verify(&kb.build())
    };
    let r = build(8, t(Vec, F32, 16, 16, ND));
    expect_err(
        &r,
        Rule::ViewShape,
        &["the GM window has 8 rows but the tile's valid shape needs 16"],
    );
    // A partial tile (valid 8 rows) or a dynamic one is covered by the 8-row window.
    expect_clean(&build(8, t(Vec, F32, 16, 16, ND).valid(8, 16)));
    expect_clean(&build(8, t(Vec, F32, 16, 16, ND).dynamic()));
}

// ---------------------------------------------------------------- stores

fn store(tile: TileType, gm: DType, gm_layout: Layout, opts: impl FnOnce(StoreOpts)) -> Report {
    let (rows, cols) = (tile.rows, tile.cols);
    let mut kb = KernelBuilder::new("store");
    let y = kb.output("y", gm, [rows, cols]);
    let src = kb.tile("src", tile.clone());
    let view = GmView {
        layout: gm_layout,
        ..GmView::nd(y, 0, rows, cols, cols)
    };
    let body = |b: &mut tile_backend::dsl::Body<'_>| {
        let s = b.store(view, src);
        opts(StoreOpts(Some(s)));
    };
    if tile.space == Vec {
        kb.vector(body);
    } else {
        kb.cube(body);
    }
    verify(&kb.build())
}

struct StoreOpts<'a>(Option<tile_backend::dsl::StoreOp<'a>>);

impl StoreOpts<'_> {
    fn relu(self) {
        if let Some(s) = self.0 {
            s.relu();
        }
    }
    fn scale(self, sc: Scale) {
        if let Some(s) = self.0 {
            s.scale(sc);
        }
    }
}

fn none(_: StoreOpts) {}

fn word() -> Scale {
    Scale::Const(QuantWord::new(0.5, true))
}

#[test]
fn stores_come_from_vec_or_acc() {
    expect_clean(&store(t(Vec, F32, 16, 16, ND), F32, ND, none));
    expect_clean(&store(t(Acc, F32, 16, 16, NZ), F32, ND, none));
    let r = store(t(Mat, F32, 16, 16, NZ), F32, ND, none);
    expect_err(
        &r,
        Rule::StoreSource,
        &["stores to GM come from Vec (MTE3) or Acc (Fixpipe), not from Mat (tile `src`)"],
    );
    let r = store(t(Vec, F32, 16, 16, ND), F32, ND, |s| s.relu());
    expect_err(
        &r,
        Rule::StoreSource,
        &["ReLU and quantisation are Fixpipe features"],
    );
    let r = store(t(Vec, F32, 16, 16, ND), I8, ND, |s| s.scale(word()));
    expect_err(&r, Rule::StoreSource, &["only a store from Acc"]);
}

#[test]
fn vec_stores_keep_their_layout() {
    for (tile, gm) in [(ND, ND), (DN, DN), (NZ, NZ)] {
        expect_clean(&store(t(Vec, F16, 32, 32, tile), F16, gm, none));
    }
    let r = store(t(Vec, F16, 32, 32, ND), F16, DN, none);
    expect_err(
        &r,
        Rule::StoreLayout,
        &["Vec ND -> GM DN is not a legal store layout"],
    );
}

#[test]
fn store_dtypes() {
    let r = store(t(Vec, F32, 16, 16, ND), F16, ND, none);
    expect_err(
        &r,
        Rule::StoreDtype,
        &["tile `src` is f32 but the GM tensor is f16"],
    );
    // From Acc the Fixpipe converts, by the Acc -> Vec table.
    expect_clean(&store(t(Acc, F32, 16, 16, NZ), BF16, ND, none));
    let r = store(t(Acc, F32, 16, 32, NZ), I8, ND, none);
    expect_err(
        &r,
        Rule::StoreDtype,
        &["the Fixpipe cannot convert f32 -> i8 without a scale"],
    );
    expect_clean(&store(t(Acc, F32, 16, 32, NZ), I8, ND, |s| s.scale(word())));
    let r = store(t(Acc, I32, 16, 16, NZ), I32, ND, |s| s.scale(word()));
    expect_err(
        &r,
        Rule::StoreDtype,
        &["the Fixpipe cannot convert i32 -> i32 with a scale"],
    );
    expect_clean(&store(t(Acc, I32, 16, 16, NZ), F16, ND, |s| {
        s.scale(word())
    }));
}

#[test]
fn a_store_from_vec_has_no_phase() {
    let mut kb = KernelBuilder::new("vec_store_phase");
    let o = kb.output("o", DType::F32, [16u64, 16]);
    let v = kb.tile("v", t(MemSpace::Vec, DType::F32, 16, 16, Layout::ND));
    kb.vector(|b| {
        b.fill(v, 0.0f64);
        b.store(GmView::nd(o, 0, 16u64, 16u64, 16u64), v)
            .phase(Phase::Final);
    });
    let r = verify(&kb.build());
    expect_err(&r, Rule::StoreSource, &["phase"]);
}
