//! Element offsets of the layouts of ASCEND950.md §3 against hand-computed examples, and
//! properties: every layout is a bijection onto 0..rows*cols, and NZ [R, C] == ZN [C, R]
//! with swapped coordinates (the free transpose).

use proptest::prelude::*;
use tile_backend::ir::{DType, Fractal, Layout, MemSpace, TileType};

fn mat(dtype: DType, rows: u64, cols: u64, layout: Layout) -> TileType {
    TileType::new(MemSpace::Mat, dtype, rows, cols, layout)
}

/// Checks `(row, col) -> expected` for each example.
fn check(ty: &TileType, examples: &[((u64, u64), u64)]) {
    for &((r, c), want) in examples {
        assert_eq!(
            ty.element_offset(r, c),
            want,
            "{} {}x{} {:?}: offset of ({r}, {c})",
            ty.layout,
            ty.rows,
            ty.cols,
            ty.fractal
        );
    }
}

#[test]
fn default_fractals() {
    let f = |rows, cols| Some(Fractal { rows, cols });
    assert_eq!(mat(DType::F16, 32, 32, Layout::NZ).fractal, f(16, 16));
    assert_eq!(mat(DType::F32, 32, 32, Layout::NZ).fractal, f(16, 8));
    assert_eq!(mat(DType::F32, 32, 32, Layout::ZN).fractal, f(8, 16));
    assert_eq!(mat(DType::I8, 32, 64, Layout::NZ).fractal, f(16, 32));
    assert_eq!(mat(DType::I8, 64, 32, Layout::ZN).fractal, f(32, 16));
    assert_eq!(mat(DType::BF16, 32, 32, Layout::ZZ).fractal, f(16, 16));
    let acc = TileType::new(MemSpace::Acc, DType::F32, 32, 32, Layout::NZ);
    assert_eq!(acc.fractal, f(16, 16));
    assert_eq!(mat(DType::F16, 32, 32, Layout::ND).fractal, None);
    assert_eq!(mat(DType::F16, 32, 32, Layout::DN).fractal, None);
}

#[test]
fn nd_and_dn() {
    // ND 3 x 16 (f16): (2, 3) -> 2 * 16 + 3 = 35; (1, 15) -> 31.
    check(
        &mat(DType::F16, 3, 16, Layout::ND),
        &[
            ((0, 0), 0),
            ((0, 1), 1),
            ((1, 0), 16),
            ((1, 15), 31),
            ((2, 3), 35),
        ],
    );
    // DN 16 x 3 (f16): column-major, (r, c) -> c * 16 + r: (3, 2) -> 35; (15, 0) -> 15.
    check(
        &mat(DType::F16, 16, 3, Layout::DN),
        &[
            ((0, 0), 0),
            ((1, 0), 1),
            ((0, 1), 16),
            ((15, 0), 15),
            ((3, 2), 35),
        ],
    );
}

#[test]
fn fp16_boxes_are_16_by_16() {
    // NZ 48 x 32 f16: 3 box rows x 2 box columns of 256 elements; boxes numbered down the
    // columns (box (br, bc) is number 3 * bc + br), row-major inside a box.
    //   (0, 15)  -> box 0, 15                        = 15
    //   (1, 0)   -> box 0, row 1                     = 16
    //   (16, 0)  -> box 1                            = 256
    //   (0, 16)  -> box 3                            = 768
    //   (40, 4)  -> box 2 (br 2, bc 0), 8 * 16 + 4   = 512 + 132 = 644
    //   (40, 20) -> box 5 (br 2, bc 1), 8 * 16 + 4   = 1280 + 132 = 1412
    //   (47, 31) -> box 5, 15 * 16 + 15              = 1280 + 255 = 1535 (the last)
    check(
        &mat(DType::F16, 48, 32, Layout::NZ),
        &[
            ((0, 0), 0),
            ((0, 15), 15),
            ((1, 0), 16),
            ((16, 0), 256),
            ((0, 16), 768),
            ((40, 4), 644),
            ((40, 20), 1412),
            ((47, 31), 1535),
        ],
    );
    // ZZ 48 x 32 f16: boxes numbered along the rows (box (br, bc) is 2 * br + bc).
    //   (0, 16)  -> box 1                            = 256
    //   (16, 0)  -> box 2                            = 512
    //   (40, 4)  -> box 4, 8 * 16 + 4                = 1024 + 132 = 1156
    //   (40, 20) -> box 5, 132                       = 1412
    check(
        &mat(DType::F16, 48, 32, Layout::ZZ),
        &[
            ((0, 0), 0),
            ((1, 0), 16),
            ((0, 16), 256),
            ((16, 0), 512),
            ((40, 4), 1156),
            ((40, 20), 1412),
            ((47, 31), 1535),
        ],
    );
    // ZN 48 x 32 f16 (C0 x 16 = 16 x 16 column-major boxes, numbered along the rows):
    //   (1, 0)   -> column 0, row 1                  = 1
    //   (0, 1)   -> column 1                         = 16
    //   (0, 16)  -> box 1                            = 256
    //   (16, 0)  -> box 2                            = 512
    //   (16, 5)  -> box 2, 5 * 16 + 0                = 592
    //   (40, 20) -> box 5, column 4 * 16 + row 8     = 1280 + 72 = 1352
    check(
        &mat(DType::F16, 48, 32, Layout::ZN),
        &[
            ((0, 0), 0),
            ((1, 0), 1),
            ((0, 1), 16),
            ((0, 16), 256),
            ((16, 0), 512),
            ((16, 5), 592),
            ((40, 20), 1352),
        ],
    );
}

#[test]
fn fp32_boxes_are_16_by_8_nz_and_8_by_16_zn() {
    // NZ 32 x 16 f32: 2 x 2 boxes of 16 x 8 = 128 elements, numbered 2 * bc + br.
    //   (0, 7)   -> 7;  (1, 0) -> 8 (8 columns per box row)
    //   (16, 0)  -> box 1                            = 128
    //   (0, 8)   -> box 2                            = 256
    //   (17, 9)  -> box 3, 1 * 8 + 1                 = 384 + 9 = 393
    //   (31, 15) -> box 3, 15 * 8 + 7                = 384 + 127 = 511
    check(
        &mat(DType::F32, 32, 16, Layout::NZ),
        &[
            ((0, 7), 7),
            ((1, 0), 8),
            ((16, 0), 128),
            ((0, 8), 256),
            ((17, 9), 393),
            ((31, 15), 511),
        ],
    );
    // ZN 16 x 32 f32: 2 x 2 column-major boxes of 8 x 16, numbered 2 * br + bc.
    //   (1, 0)   -> 1;  (0, 1) -> 8 (8 rows per box column);  (7, 15) -> 15 * 8 + 7 = 127
    //   (0, 16)  -> box 1                            = 128
    //   (8, 0)   -> box 2                            = 256
    //   (9, 17)  -> box 3, column 1 * 8 + row 1      = 384 + 9 = 393
    check(
        &mat(DType::F32, 16, 32, Layout::ZN),
        &[
            ((1, 0), 1),
            ((0, 1), 8),
            ((7, 15), 127),
            ((0, 16), 128),
            ((8, 0), 256),
            ((9, 17), 393),
        ],
    );
}

#[test]
fn int8_boxes_are_16_by_32() {
    // NZ 32 x 64 i8: 2 x 2 boxes of 16 x 32 = 512 elements, numbered 2 * bc + br.
    //   (0, 31)  -> 31;  (1, 0) -> 32
    //   (16, 0)  -> box 1                            = 512
    //   (0, 32)  -> box 2                            = 1024
    //   (17, 33) -> box 3, 1 * 32 + 1                = 1536 + 33 = 1569
    //   (31, 63) -> box 3, 15 * 32 + 31              = 1536 + 511 = 2047
    check(
        &mat(DType::I8, 32, 64, Layout::NZ),
        &[
            ((0, 31), 31),
            ((1, 0), 32),
            ((16, 0), 512),
            ((0, 32), 1024),
            ((17, 33), 1569),
            ((31, 63), 2047),
        ],
    );
}

#[test]
fn acc_boxes_are_16_by_16_even_for_fp32() {
    // Acc 32 x 32 f32: 16 x 16 boxes (256 elements), numbered 2 * bc + br.
    //   (0, 8)   -> still box 0                      = 8
    //   (1, 0)   -> 16
    //   (16, 0)  -> box 1                            = 256
    //   (0, 16)  -> box 2                            = 512
    //   (17, 18) -> box 3, 1 * 16 + 2                = 768 + 18 = 786
    let acc = TileType::new(MemSpace::Acc, DType::F32, 32, 32, Layout::NZ);
    check(
        &acc,
        &[
            ((0, 8), 8),
            ((1, 0), 16),
            ((16, 0), 256),
            ((0, 16), 512),
            ((17, 18), 786),
        ],
    );
    // The same f32 tile in Mat uses 16 x 8 boxes: (0, 8) is the third box (2 * 128 = 256).
    assert_eq!(
        mat(DType::F32, 32, 32, Layout::NZ).element_offset(0, 8),
        256
    );
}

/// The box (rows, cols) of a boxed layout for a dtype in Mat.
fn boxed(dtype: DType, layout: Layout) -> (u64, u64) {
    let f = mat(dtype, 64, 64, layout)
        .fractal
        .expect("boxed layouts have a fractal");
    (f.rows, f.cols)
}

const DTYPES: [DType; 4] = [DType::F32, DType::F16, DType::BF16, DType::I8];

fn assert_bijection(ty: &TileType) {
    let n = (ty.rows * ty.cols) as usize;
    let mut seen = vec![false; n];
    for r in 0..ty.rows {
        for c in 0..ty.cols {
            let o = ty.element_offset(r, c) as usize;
            assert!(o < n, "{ty}: ({r}, {c}) -> {o} is outside 0..{n}");
            assert!(!seen[o], "{ty}: ({r}, {c}) -> {o} is taken twice");
            seen[o] = true;
        }
    }
}

proptest! {
    #[test]
    fn boxed_layouts_are_bijections(
        d in 0usize..4,
        l in 0usize..3,
        nbr in 1u64..5,
        nbc in 1u64..5,
        acc in any::<bool>(),
    ) {
        let layout = [Layout::NZ, Layout::ZN, Layout::ZZ][l];
        let dtype = DTYPES[d];
        let ty = if acc && layout == Layout::NZ {
            TileType::new(MemSpace::Acc, DType::F32, 16 * nbr, 16 * nbc, Layout::NZ)
        } else {
            let (ir, ic) = boxed(dtype, layout);
            mat(dtype, ir * nbr, ic * nbc, layout)
        };
        assert_bijection(&ty);
    }

    #[test]
    fn unboxed_layouts_are_bijections(rows in 1u64..40, cols in 1u64..40, dn in any::<bool>()) {
        let layout = if dn { Layout::DN } else { Layout::ND };
        assert_bijection(&mat(DType::F32, rows, cols, layout));
    }

    #[test]
    fn nz_r_by_c_is_zn_c_by_r_transposed(
        d in 0usize..4,
        nbr in 1u64..6,
        nbc in 1u64..6,
        r_frac in 0.0f64..1.0,
        c_frac in 0.0f64..1.0,
    ) {
        let dtype = DTYPES[d];
        let (ir, ic) = boxed(dtype, Layout::NZ);
        let (rows, cols) = (ir * nbr, ic * nbc);
        let nz = mat(dtype, rows, cols, Layout::NZ);
        let zn = mat(dtype, cols, rows, Layout::ZN);
        let r = ((rows as f64 * r_frac) as u64).min(rows - 1);
        let c = ((cols as f64 * c_frac) as u64).min(cols - 1);
        prop_assert_eq!(nz.element_offset(r, c), zn.element_offset(c, r));
    }
}

#[test]
fn free_transpose_on_every_element_of_one_tile() {
    // f16 NZ [48, 32] and ZN [32, 48]: the same bytes.
    let nz = mat(DType::F16, 48, 32, Layout::NZ);
    let zn = mat(DType::F16, 32, 48, Layout::ZN);
    for r in 0..48 {
        for c in 0..32 {
            assert_eq!(
                nz.element_offset(r, c),
                zn.element_offset(c, r),
                "({r}, {c})"
            );
        }
    }
    // ... while NZ and ZZ of the same shape differ (not a transpose).
    let zz = mat(DType::F16, 48, 32, Layout::ZZ);
    assert_ne!(nz.element_offset(16, 0), zz.element_offset(16, 0));
}
