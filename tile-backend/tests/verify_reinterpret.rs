//! `reinterpret` (ASCEND950.md §7): at least one attribute, dtype needs shape, footprint,
//! alignment, dynamic valid shape, inherited pad / fractal / buffers, a planned allocation as
//! source.

use tile_backend::dsl::{KernelBuilder, Reinterpret};
use tile_backend::ir::*;
use tile_backend::verify::{verify, Report, Rule};

use DType::*;
use Layout::*;
use MemSpace::*;

mod support;
use support::*;

fn attrs(dtype: Option<DType>, shape: Option<(u64, u64)>, layout: Option<Layout>) -> Reinterpret {
    Reinterpret {
        dtype,
        shape,
        layout,
    }
}

/// A kernel with source tile `src` and its reinterpret `view`, then `edit` applied to the kernel.
fn kernel(src: TileType, buffers: u32, to: Reinterpret, edit: impl FnOnce(&mut Kernel)) -> Report {
    let mut kb = KernelBuilder::new("ri");
    let s = kb.tile_group("src", src, buffers);
    kb.reinterpret("view", s, to);
    let mut k = kb.build();
    edit(&mut k);
    verify(&k)
}

fn view(k: &mut Kernel) -> &mut TileDecl {
    let i = k.tiles.len() - 1;
    &mut k.tiles[i]
}

#[test]
fn free_transpose_nz_to_zn_with_swapped_shape_is_clean() {
    // NZ [32, 64] f16 and ZN [64, 32] f16 are the same bytes.
    let r = kernel(
        TileType::new(Mat, F16, 32, 64, NZ),
        1,
        attrs(None, Some((64, 32)), Some(ZN)),
        |_| {},
    );
    expect_clean(&r);
}

#[test]
fn dtype_with_shape_is_clean() {
    // Vec f32 [16, 64] (4 KiB) as f16 [32, 64] (4 KiB), as i8 [8, 64] (512 B, smaller) and as
    // i32 [16, 64] (same size: the shape may stay). (The IR does not record which attributes a
    // reinterpret was given, so a size-changing dtype with an unchanged shape is always rejected.)
    for (dt, shape) in [(F16, (32, 64)), (I8, (8, 64)), (I32, (16, 64))] {
        let r = kernel(
            TileType::new(Vec, F32, 16, 64, ND),
            1,
            attrs(Some(dt), Some(shape), None),
            |_| {},
        );
        expect_clean(&r);
    }
}

#[test]
fn at_least_one_attribute_must_change() {
    let r = kernel(
        TileType::new(Vec, F32, 16, 64, ND),
        1,
        attrs(None, None, None),
        |_| {},
    );
    expect_err(
        &r,
        Rule::ReinterpretAttrs,
        &["reinterpret must change at least one of dtype, shape or layout"],
    );
}

#[test]
fn a_dtype_change_needs_a_shape() {
    let r = kernel(
        TileType::new(Vec, F32, 16, 64, ND),
        1,
        attrs(Some(F16), None, None),
        |_| {},
    );
    expect_err(
        &r,
        Rule::ReinterpretAttrs,
        &["a dtype change needs a new shape: f32 -> f16 keeps 16x64"],
    );
}

#[test]
fn memory_space_cannot_change() {
    let r = kernel(
        TileType::new(Vec, F32, 16, 64, ND),
        1,
        attrs(None, Some((32, 32)), None),
        |k| view(k).ty.space = Mat,
    );
    expect_err(
        &r,
        Rule::ReinterpretAttrs,
        &["reinterpret cannot change the memory space (Vec -> Mat)"],
    );
}

#[test]
fn footprint_cannot_exceed_the_source_buffer() {
    let r = kernel(
        TileType::new(Vec, F16, 16, 64, ND),
        1,
        attrs(Some(F32), Some((16, 64)), None),
        |_| {},
    );
    expect_err(
        &r,
        Rule::ReinterpretSize,
        &["the new footprint 16x64 f32 = 4096 B exceeds the source buffer `src` of 2048 B"],
    );
    // Equal size is fine.
    let r = kernel(
        TileType::new(Vec, F16, 16, 64, ND),
        1,
        attrs(Some(F32), Some((8, 64)), None),
        |_| {},
    );
    expect_no(&r, Rule::ReinterpretSize);
    expect_clean(&r);
}

#[test]
fn base_address_must_be_a_multiple_of_the_new_element_size() {
    // A source at 0x14 (20, which also breaks the 32-byte hardware alignment) viewed as i64.
    let mut kb = KernelBuilder::new("ri");
    let s = kb.tile_at("src", TileType::new(Vec, F32, 16, 64, ND), 20);
    kb.reinterpret("view", s, attrs(Some(I64), Some((16, 32)), None));
    let r = verify(&kb.build());
    expect_err(
        &r,
        Rule::ReinterpretAlign,
        &["base address 0x14 is not a multiple of the new element size 8 B"],
    );
    // At 0x40 the i64 view is aligned.
    let mut kb = KernelBuilder::new("ri");
    let s = kb.tile_at("src", TileType::new(Vec, F32, 16, 64, ND), 64);
    kb.reinterpret("view", s, attrs(Some(I64), Some((16, 32)), None));
    expect_clean(&verify(&kb.build()));
}

#[test]
fn valid_shape_is_not_inherited() {
    // The builder gives the view a dynamic valid shape; a static one is rejected.
    let r = kernel(
        TileType::new(Vec, F32, 16, 64, ND).valid(8, 64),
        1,
        attrs(None, Some((32, 32)), None),
        |k| {
            let v = view(k);
            v.ty.valid_rows = ValidDim::Static(8);
            v.ty.valid_cols = ValidDim::Static(32);
        },
    );
    expect_err(
        &r,
        Rule::ReinterpretInherit,
        &["the valid shape is not inherited", "set_validshape"],
    );
}

#[test]
fn pad_fractal_and_buffers_are_inherited() {
    let src = TileType::new(Vec, F32, 16, 64, ND).pad(PadValue::Min);
    // The builder copies pad and rotation: clean.
    expect_clean(&kernel(
        src.clone(),
        2,
        attrs(None, Some((32, 32)), None),
        |_| {},
    ));
    let r = kernel(src.clone(), 2, attrs(None, Some((32, 32)), None), |k| {
        view(k).ty.pad = PadValue::Zero;
    });
    expect_err(
        &r,
        Rule::ReinterpretInherit,
        &["the pad value is inherited (Min), not Zero"],
    );
    let r = kernel(src, 2, attrs(None, Some((32, 32)), None), |k| {
        view(k).buffers = 1;
    });
    expect_err(
        &r,
        Rule::ReinterpretInherit,
        &["a reinterpreted group shares its source's rotation of 2 buffers, not 1"],
    );
    let r = kernel(
        TileType::new(Mat, F16, 32, 64, NZ),
        1,
        attrs(None, Some((64, 32)), None),
        |k| view(k).ty.fractal = Some(Fractal { rows: 32, cols: 8 }),
    );
    expect_err(
        &r,
        Rule::ReinterpretInherit,
        &[
            "the fractal is inherited",
            "rows: 16, cols: 16",
            "rows: 32, cols: 8",
        ],
    );
}

#[test]
fn source_must_be_a_planned_allocation() {
    // A reinterpret of a reinterpret.
    let mut kb = KernelBuilder::new("ri");
    let s = kb.tile("src", TileType::new(Vec, F32, 16, 64, ND));
    let v = kb.reinterpret("view", s, attrs(None, Some((32, 32)), None));
    kb.reinterpret("view2", v, attrs(None, Some((64, 16)), None));
    let r = verify(&kb.build());
    let d = expect_err(
        &r,
        Rule::ReinterpretSource,
        &["the source must be a planned allocation; `view` is itself a reinterpret"],
    );
    assert_eq!(d.subject, "reinterpret `view2`");
    // An undeclared source.
    let mut kb = KernelBuilder::new("ri");
    kb.reinterpret("ghost", TileId(7), attrs(None, Some((8, 8)), None));
    expect_err(
        &verify(&kb.build()),
        Rule::ReinterpretSource,
        &["source tile id 7 is not declared"],
    );
    // An alias placed on its own.
    let r = kernel(
        TileType::new(Vec, F32, 16, 64, ND),
        1,
        attrs(None, Some((32, 32)), None),
        |k| view(k).addr = Some(4096),
    );
    expect_err(
        &r,
        Rule::ReinterpretSource,
        &["a reinterpret has its source's address"],
    );
}

#[test]
fn a_reinterpreted_tile_is_used_after_set_validshape() {
    // Scores f32 [16, 64] reused as f16 [16, 128] P: the view starts dynamic.
    let mut kb = KernelBuilder::new("ri_use");
    let s = kb.tile("s", TileType::new(Vec, F32, 16, 64, ND));
    let p = kb.reinterpret("p", s, attrs(Some(F16), Some((16, 128)), None));
    let h = kb.tile("h", TileType::new(Vec, F16, 16, 128, ND).dynamic());
    kb.vector(|v| {
        v.fill(s, 0.0);
        v.set_validshape(p, 16, 128);
        v.set_validshape(h, 16, 128);
        v.exp(h, p);
    });
    expect_clean(&verify(&kb.build()));
}
