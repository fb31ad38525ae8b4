//! The move rules of ASCEND950.md §5: every legal and illegal path, the layout and dtype tables,
//! shapes and offsets, Fixpipe options and the dual-split restrictions with their tails.

use tile_backend::dsl::{KernelBuilder, MoveBuilder};
use tile_backend::ir::*;
use tile_backend::verify::{verify, Report, Rule, Severity};

mod support;
use support::*;

// ---------------------------------------------------------------- helpers

/// A kernel with tiles `src` and `dst` and one move between them in `section`.
fn mv(
    section: CoreKind,
    src: TileType,
    dst: TileType,
    opts: impl FnOnce(MoveBuilder<'_>),
) -> Report {
    let mut kb = KernelBuilder::new("mv");
    let s = kb.tile("src", src);
    let d = kb.tile("dst", dst);
    match section {
        CoreKind::Cube => kb.cube(|c| opts(c.mov(d, s))),
        CoreKind::Vector => kb.vector(|v| opts(v.mov(d, s))),
    }
    verify(&kb.build())
}

fn plain(_: MoveBuilder<'_>) {}

fn scale_const() -> Scale {
    Scale::Const(QuantWord::new(0.25, true))
}

use CoreKind::{Cube, Vector};
use DType::*;
use Layout::*;
use MemSpace::*;

// ---------------------------------------------------------------- move-path

#[test]
fn vec_to_left_is_rejected_left_is_reached_only_from_mat() {
    let r = mv(
        Cube,
        t(Vec, F16, 16, 16, NZ),
        t(Left, F16, 16, 16, NZ),
        plain,
    );
    let d = expect_err(&r, Rule::MovePath, &["Vec -> Left"]);
    assert_eq!(
        d.message,
        "move Vec -> Left is not a legal path on Ascend 950: Left is reached only from Mat"
    );
    assert_eq!(d.subject, "move");
}

#[test]
fn mat_to_vec_is_rejected_with_its_special_reason() {
    let r = mv(
        Cube,
        t(Mat, F16, 16, 16, NZ),
        t(Vec, F16, 16, 16, NZ),
        plain,
    );
    expect_err(
        &r,
        Rule::MovePath,
        &[
            "move Mat -> Vec is not a legal path on Ascend 950",
            "not in the documented tables",
            "no source gives its pipe or dtype rules",
        ],
    );
}

#[test]
fn nothing_moves_into_acc_acc_is_written_only_by_matmul() {
    let r = mv(
        Cube,
        t(Mat, F32, 16, 16, NZ),
        t(Acc, F32, 16, 16, NZ),
        plain,
    );
    expect_err(
        &r,
        Rule::MovePath,
        &["move Mat -> Acc", "Acc is written only by matmul"],
    );
}

#[test]
fn illegal_paths_name_the_legal_sources() {
    let cases = [
        (Left, Right, "Right is reached only from Mat"),
        (Acc, Left, "Left is reached only from Mat"),
        (Vec, Bias, "Bias is reached only from Mat"),
        (Vec, Scaling, "Scaling is reached only from Mat"),
        (Mat, Mat, "Mat is reached only from Acc or Vec"),
        (Left, Vec, "Vec is reached only from Acc or Vec"),
    ];
    for (s, d, why) in cases {
        let r = mv(Cube, t(s, F32, 16, 16, NZ), t(d, F32, 16, 16, NZ), plain);
        let path = format!("move {s} -> {d}");
        expect_err(&r, Rule::MovePath, &[&path, why]);
    }
}

// ---------------------------------------------------------------- Mat -> Left / Right

#[test]
fn mat_to_left_f16_nz_is_clean() {
    expect_clean(&mv(
        Cube,
        t(Mat, F16, 32, 32, NZ),
        t(Left, F16, 32, 32, NZ),
        plain,
    ));
}

#[test]
fn mat_to_left_and_right_accept_every_documented_source_layout() {
    for src in [ND, NZ, ZN, ZZ] {
        expect_clean(&mv(
            Cube,
            t(Mat, F16, 32, 32, src),
            t(Left, F16, 32, 32, NZ),
            plain,
        ));
        expect_clean(&mv(
            Cube,
            t(Mat, F16, 32, 32, src),
            t(Right, F16, 32, 32, ZN),
            plain,
        ));
    }
}

#[test]
fn mat_to_left_and_right_accept_every_cube_operand_dtype() {
    // [32, 64] is a whole number of boxes for C0 = 8, 16 and 32.
    for dt in [I8, F8E4M3, F8E5M2, F16, BF16, F32] {
        expect_clean(&mv(
            Cube,
            t(Mat, dt, 32, 64, NZ),
            t(Left, dt, 32, 64, NZ),
            plain,
        ));
        expect_clean(&mv(
            Cube,
            t(Mat, dt, 32, 64, NZ),
            t(Right, dt, 32, 64, ZN),
            plain,
        ));
    }
}

#[test]
fn mat_to_left_rejects_non_cube_dtypes() {
    for dt in [I32, U8] {
        let r = mv(Cube, t(Mat, dt, 32, 64, NZ), t(Left, dt, 32, 64, NZ), plain);
        let what = format!("cannot convert {dt} -> {dt}");
        expect_err(&r, Rule::MoveDtype, &["move Mat -> Left", &what]);
    }
}

#[test]
fn mat_to_left_f16_to_f32_is_rejected() {
    let r = mv(
        Cube,
        t(Mat, F16, 32, 32, NZ),
        t(Left, F32, 32, 32, NZ),
        plain,
    );
    let d = expect_err(
        &r,
        Rule::MoveDtype,
        &["move Mat -> Left cannot convert f16 -> f32", "allowed:"],
    );
    assert!(d.message.contains("f16") && d.message.contains("bf16"));
}

#[test]
fn left_destination_must_be_nz_and_right_zn() {
    let r = mv(
        Cube,
        t(Mat, F16, 32, 32, NZ),
        t(Left, F16, 32, 32, ZN),
        plain,
    );
    expect_err(
        &r,
        Rule::MoveLayout,
        &["move Mat -> Left cannot take NZ -> ZN", "ND->NZ", "ZZ->NZ"],
    );
    let r = mv(
        Cube,
        t(Mat, F16, 32, 32, NZ),
        t(Right, F16, 32, 32, NZ),
        plain,
    );
    expect_err(
        &r,
        Rule::MoveLayout,
        &["move Mat -> Right cannot take NZ -> NZ", "NZ->ZN"],
    );
}

#[test]
fn mat_dn_source_is_not_in_the_left_table() {
    let r = mv(
        Cube,
        t(Mat, F16, 32, 32, DN),
        t(Left, F16, 32, 32, NZ),
        plain,
    );
    expect_err(&r, Rule::MoveLayout, &["DN -> NZ"]);
}

#[test]
fn mat_to_left_extract_inside_the_source_is_clean_outside_is_rejected() {
    expect_clean(&mv(
        Cube,
        t(Mat, F16, 64, 64, NZ),
        t(Left, F16, 32, 32, NZ),
        |m| {
            m.offset(32, 32);
        },
    ));
    let r = mv(
        Cube,
        t(Mat, F16, 64, 64, NZ),
        t(Left, F16, 32, 32, NZ),
        |m| {
            m.offset(48, 0);
        },
    );
    expect_err(
        &r,
        Rule::MoveShape,
        &[
            "32x32 region at offset [48, 0]",
            "ends at [80, 32]",
            "source's 64x64",
        ],
    );
}

#[test]
fn mat_to_left_insert_into_a_larger_destination_is_rejected() {
    let r = mv(
        Cube,
        t(Mat, F16, 32, 32, NZ),
        t(Left, F16, 64, 64, NZ),
        plain,
    );
    expect_err(
        &r,
        Rule::MoveShape,
        &[
            "move Mat -> Left with destination 64x64 and source 32x32",
            "destination no larger than the source",
        ],
    );
}

// ---------------------------------------------------------------- Vec -> Vec

#[test]
fn vec_to_vec_copy_takes_any_dtype_and_layout() {
    // dst <= src: layouts not checked, every dtype (same on both sides).
    for dt in DType::ALL {
        let rows = 32 / dt.size_bytes(); // DN needs rows * size % 32 == 0
        expect_clean(&mv(
            Vector,
            t(Vec, dt, rows, 32, DN),
            t(Vec, dt, rows, 32, ND),
            plain,
        ));
    }
}

#[test]
fn vec_to_vec_copy_cannot_convert() {
    let r = mv(
        Vector,
        t(Vec, F32, 16, 16, ND),
        t(Vec, F16, 16, 16, ND),
        plain,
    );
    expect_err(
        &r,
        Rule::MoveDtype,
        &["move Vec -> Vec cannot convert f32 -> f16"],
    );
}

#[test]
fn vec_to_vec_insert_nd_and_nz_are_clean() {
    expect_clean(&mv(
        Vector,
        t(Vec, F16, 16, 16, ND),
        t(Vec, F16, 32, 32, ND),
        |m| {
            m.offset(16, 16);
        },
    ));
    expect_clean(&mv(
        Vector,
        t(Vec, F16, 16, 16, NZ),
        t(Vec, F16, 32, 32, NZ),
        plain,
    ));
}

#[test]
fn vec_to_vec_insert_rejects_dn_and_non_insert_dtypes() {
    let r = mv(
        Vector,
        t(Vec, F16, 16, 16, DN),
        t(Vec, F16, 32, 32, DN),
        plain,
    );
    expect_err(
        &r,
        Rule::MoveLayout,
        &[
            "move Vec -> Vec cannot take DN -> DN",
            "allowed: ND->ND, NZ->NZ",
        ],
    );
    for dt in [I64, U8] {
        let r = mv(
            Vector,
            t(Vec, dt, 16, 32, ND),
            t(Vec, dt, 32, 32, ND),
            plain,
        );
        let what = format!("cannot convert {dt} -> {dt}");
        expect_err(&r, Rule::MoveDtype, &[&what]);
    }
}

#[test]
fn insert_region_must_lie_inside_the_destination() {
    let r = mv(
        Vector,
        t(Vec, F16, 16, 16, ND),
        t(Vec, F16, 32, 32, ND),
        |m| {
            m.offset(24, 0);
        },
    );
    expect_err(
        &r,
        Rule::MoveShape,
        &[
            "16x16 region at offset [24, 0]",
            "ends at [40, 16]",
            "destination's 32x32",
        ],
    );
}

#[test]
fn negative_offset_is_rejected() {
    let r = mv(
        Vector,
        t(Vec, F16, 32, 32, ND),
        t(Vec, F16, 16, 16, ND),
        |m| {
            m.offset(-1, 0);
        },
    );
    expect_err(&r, Rule::MoveShape, &["move offset [-1, 0] is negative"]);
}

#[test]
fn mixed_shape_relation_is_rejected() {
    let r = mv(
        Vector,
        t(Vec, F16, 16, 64, ND),
        t(Vec, F16, 32, 32, ND),
        plain,
    );
    expect_err(
        &r,
        Rule::MoveShape,
        &["destination 32x32 is larger than the source 16x64 in one dimension"],
    );
}

// ---------------------------------------------------------------- Vec -> Mat

#[test]
fn vec_to_mat_nd_to_nz_is_clean_in_vector_code() {
    expect_clean(&mv(
        Vector,
        t(Vec, F16, 32, 32, ND),
        t(Mat, F16, 32, 32, NZ),
        plain,
    ));
}

#[test]
fn vec_to_mat_source_must_be_nd_or_nz() {
    let r = mv(
        Vector,
        t(Vec, F16, 32, 32, DN),
        t(Mat, F16, 32, 32, NZ),
        plain,
    );
    expect_err(
        &r,
        Rule::MoveLayout,
        &["move Vec -> Mat cannot take DN -> NZ"],
    );
}

#[test]
fn vec_to_mat_insert_is_int32_only() {
    // P (f16) inserted into a larger L1 tile is not in the table; int32 is.
    let r = mv(
        Vector,
        t(Vec, F16, 32, 32, ND),
        t(Mat, F16, 32, 64, NZ),
        plain,
    );
    expect_err(
        &r,
        Rule::MoveDtype,
        &["move Vec -> Mat cannot convert f16 -> f16", "allowed: i32"],
    );
    expect_clean(&mv(
        Vector,
        t(Vec, I32, 32, 32, ND),
        t(Mat, I32, 32, 64, NZ),
        |m| {
            m.offset(0, 32);
        },
    ));
}

#[test]
fn vec_to_mat_cannot_convert() {
    let r = mv(
        Vector,
        t(Vec, F16, 32, 32, ND),
        t(Mat, F32, 32, 32, NZ),
        plain,
    );
    expect_err(&r, Rule::MoveDtype, &["cannot convert f16 -> f32"]);
}

// ---------------------------------------------------------------- Mat -> Bias / Scaling

#[test]
fn mat_to_bias_widens_to_f32_and_keeps_i32() {
    for (s, d) in [(F16, F32), (BF16, F32), (F32, F32), (I32, I32)] {
        expect_clean(&mv(
            Cube,
            t(Mat, s, 1, 64, ND),
            t(Bias, d, 1, 64, ND),
            plain,
        ));
    }
    let r = mv(Cube, t(Mat, I8, 1, 64, ND), t(Bias, I32, 1, 64, ND), plain);
    expect_err(
        &r,
        Rule::MoveDtype,
        &["move Mat -> Bias cannot convert i8 -> i32", "f16->f32"],
    );
    let r = mv(Cube, t(Mat, F16, 1, 64, ND), t(Bias, F16, 1, 64, ND), plain);
    expect_err(&r, Rule::MoveDtype, &["cannot convert f16 -> f16"]);
}

#[test]
fn mat_to_bias_destination_is_nd() {
    let r = mv(
        Cube,
        t(Mat, F32, 16, 16, NZ),
        t(Bias, F32, 16, 16, ZZ),
        plain,
    );
    expect_err(
        &r,
        Rule::MoveLayout,
        &["move Mat -> Bias cannot take NZ -> ZZ"],
    );
}

#[test]
fn mat_to_scaling_moves_64_bit_words_only() {
    expect_clean(&mv(
        Cube,
        t(Mat, U64, 1, 64, ND),
        t(Scaling, U64, 1, 64, ND),
        plain,
    ));
    expect_clean(&mv(
        Cube,
        t(Mat, I64, 1, 64, ND),
        t(Scaling, I64, 1, 64, ND),
        plain,
    ));
    let r = mv(
        Cube,
        t(Mat, F32, 1, 64, ND),
        t(Scaling, F32, 1, 64, ND),
        plain,
    );
    expect_err(
        &r,
        Rule::MoveDtype,
        &["move Mat -> Scaling cannot convert f32 -> f32", "i64"],
    );
}

// ---------------------------------------------------------------- Acc -> Vec

#[test]
fn acc_to_vec_without_scale_takes_the_unscaled_conversions() {
    for (s, d) in [(F32, F32), (F32, F16), (F32, BF16), (I32, I32)] {
        for layout in [ND, DN, NZ] {
            expect_clean(&mv(
                Cube,
                t(Acc, s, 32, 32, NZ),
                t(Vec, d, 32, 32, layout),
                plain,
            ));
        }
    }
}

#[test]
fn acc_to_vec_f32_to_int8_needs_a_scale() {
    let r = mv(Cube, t(Acc, F32, 32, 32, NZ), t(Vec, I8, 32, 32, ND), plain);
    expect_err(
        &r,
        Rule::MoveDtype,
        &["move Acc -> Vec cannot convert f32 -> i8", "needs a scale"],
    );
    // The same move with a compile-time, runtime or per-channel scale is legal.
    expect_clean(&mv(
        Cube,
        t(Acc, F32, 32, 32, NZ),
        t(Vec, I8, 32, 32, ND),
        |m| {
            m.scale(scale_const());
        },
    ));
}

#[test]
fn acc_to_vec_with_scale_takes_the_quantising_conversions() {
    let ok = [
        (F32, I8),
        (F32, U8),
        (F32, F16),
        (F32, BF16),
        (F32, F8E4M3),
        (F32, F32),
        (I32, I8),
        (I32, U8),
        (I32, F16),
        (I32, BF16),
    ];
    for (s, d) in ok {
        expect_clean(&mv(
            Cube,
            t(Acc, s, 32, 32, NZ),
            t(Vec, d, 32, 32, ND),
            |m| {
                m.scale(scale_const());
            },
        ));
    }
    // int32 -> int32 is the unscaled form only; f32 -> f8e5m2 is in neither.
    let r = mv(
        Cube,
        t(Acc, I32, 32, 32, NZ),
        t(Vec, I32, 32, 32, ND),
        |m| {
            m.scale(scale_const());
        },
    );
    expect_err(
        &r,
        Rule::MoveDtype,
        &[
            "move Acc -> Vec with scale cannot convert i32 -> i32",
            "legal only without a scale",
        ],
    );
    let r = mv(
        Cube,
        t(Acc, F32, 32, 32, NZ),
        t(Vec, F8E5M2, 32, 32, ND),
        |m| {
            m.scale(scale_const());
        },
    );
    let d = expect_err(&r, Rule::MoveDtype, &["cannot convert f32 -> f8e5m2"]);
    assert!(!d.message.contains("needs a scale"), "{}", d.message);
}

#[test]
fn acc_to_vec_layouts_are_nz_to_nd_dn_nz() {
    let r = mv(
        Cube,
        t(Acc, F32, 32, 32, NZ),
        t(Vec, F32, 32, 32, ZN),
        plain,
    );
    expect_err(
        &r,
        Rule::MoveLayout,
        &[
            "move Acc -> Vec cannot take NZ -> ZN",
            "NZ->ND, NZ->DN, NZ->NZ",
        ],
    );
}

// ---------------------------------------------------------------- Acc -> Mat

#[test]
fn acc_to_mat_f32_to_f16_nz_is_clean() {
    expect_clean(&mv(
        Cube,
        t(Acc, F32, 32, 32, NZ),
        t(Mat, F16, 32, 32, NZ),
        plain,
    ));
    // dst >= src: an insert into a larger L1 tile.
    expect_clean(&mv(
        Cube,
        t(Acc, I32, 32, 32, NZ),
        t(Mat, I32, 64, 64, NZ),
        |m| {
            m.offset(32, 0);
        },
    ));
}

#[test]
fn acc_to_mat_rules() {
    let r = mv(
        Cube,
        t(Acc, F32, 32, 32, NZ),
        t(Mat, F16, 32, 32, ND),
        plain,
    );
    expect_err(
        &r,
        Rule::MoveLayout,
        &["move Acc -> Mat cannot take NZ -> ND", "allowed: NZ->NZ"],
    );
    let r = mv(Cube, t(Acc, F32, 32, 32, NZ), t(Mat, I8, 32, 32, NZ), plain);
    expect_err(
        &r,
        Rule::MoveDtype,
        &["move Acc -> Mat cannot convert f32 -> i8"],
    );
    let r = mv(
        Cube,
        t(Acc, F32, 32, 32, NZ),
        t(Mat, F32, 16, 16, NZ),
        plain,
    );
    expect_err(
        &r,
        Rule::MoveShape,
        &[
            "move Acc -> Mat with destination 16x16 and source 32x32",
            "destination at least the source",
        ],
    );
}

#[test]
fn acc_to_mat_takes_no_scale() {
    let r = mv(
        Cube,
        t(Acc, F32, 32, 32, NZ),
        t(Mat, F16, 32, 32, NZ),
        |m| {
            m.scale(scale_const());
        },
    );
    expect_err(
        &r,
        Rule::MoveOption,
        &["move Acc -> Mat has no quantising (scaled) form"],
    );
}

// ---------------------------------------------------------------- move-option

#[test]
fn fixpipe_options_belong_to_moves_out_of_acc() {
    let r = mv(
        Cube,
        t(Mat, F16, 32, 32, NZ),
        t(Left, F16, 32, 32, NZ),
        |m| {
            m.mode(AccToVecMode::SingleModeVec0);
        },
    );
    expect_err(
        &r,
        Rule::MoveOption,
        &["acc_to_vec_mode applies only to Acc -> Vec moves, not to move Mat -> Left"],
    );
    let r = mv(
        Vector,
        t(Vec, F32, 16, 16, ND),
        t(Vec, F32, 16, 16, ND),
        |m| {
            m.relu();
        },
    );
    expect_err(&r, Rule::MoveOption, &["ReLU", "not of move Vec -> Vec"]);
    let r = mv(
        Cube,
        t(Mat, F16, 32, 32, NZ),
        t(Left, F16, 32, 32, NZ),
        |m| {
            m.phase(Phase::Final);
        },
    );
    expect_err(
        &r,
        Rule::MoveOption,
        &["phase (unit flag)", "not to move Mat -> Left"],
    );
    let r = mv(
        Vector,
        t(Vec, F32, 16, 16, ND),
        t(Vec, F32, 16, 16, ND),
        |m| {
            m.scale(scale_const());
        },
    );
    expect_err(
        &r,
        Rule::MoveOption,
        &["quantisation (scale)", "not of move Vec -> Vec"],
    );
    let r = mv(
        Cube,
        t(Acc, F32, 32, 32, NZ),
        t(Mat, F32, 32, 32, NZ),
        |m| {
            m.mode(AccToVecMode::DualModeSplitM);
        },
    );
    expect_err(&r, Rule::MoveOption, &["not to move Acc -> Mat"]);
}

#[test]
fn fixpipe_options_on_acc_to_vec_are_clean() {
    for mode in [AccToVecMode::SingleModeVec0, AccToVecMode::SingleModeVec1] {
        expect_clean(&mv(
            Cube,
            t(Acc, F32, 32, 32, NZ),
            t(Vec, F16, 32, 32, ND),
            |m| {
                m.mode(mode).relu().phase(Phase::Final);
            },
        ));
    }
    // Acc -> Mat takes relu and phase too.
    expect_clean(&mv(
        Cube,
        t(Acc, F32, 32, 32, NZ),
        t(Mat, F16, 32, 32, NZ),
        |m| {
            m.relu().phase(Phase::Final);
        },
    ));
}

// ---------------------------------------------------------------- phase-offset

#[test]
fn phase_and_offset_are_exclusive_on_acc_to_vec() {
    let r = mv(
        Cube,
        t(Acc, F32, 32, 32, NZ),
        t(Vec, F32, 16, 32, ND),
        |m| {
            m.offset(16, 0).phase(Phase::Final);
        },
    );
    let d = expect_err(
        &r,
        Rule::PhaseOffset,
        &["phase and offset cannot be used together on Acc -> Vec"],
    );
    assert_eq!(d.severity, Severity::Error);
    // Either alone is fine.
    expect_clean(&mv(
        Cube,
        t(Acc, F32, 32, 32, NZ),
        t(Vec, F32, 16, 32, ND),
        |m| {
            m.offset(16, 0);
        },
    ));
    expect_clean(&mv(
        Cube,
        t(Acc, F32, 32, 32, NZ),
        t(Vec, F32, 32, 32, ND),
        |m| {
            m.phase(Phase::Partial);
        },
    ));
}

// ---------------------------------------------------------------- dual split

#[test]
fn dual_split_cannot_quantise() {
    for mode in [AccToVecMode::DualModeSplitM, AccToVecMode::DualModeSplitN] {
        let r = mv(Cube, t(Acc, F32, 32, 64, NZ), t(Vec, I8, 32, 64, ND), |m| {
            m.mode(mode).scale(scale_const());
        });
        let name = format!("{mode:?} cannot be combined with quantisation (scale)");
        expect_err(&r, Rule::DualSplitScale, &[&name]);
    }
    // Single mode with a scale is legal.
    let r = mv(Cube, t(Acc, F32, 32, 64, NZ), t(Vec, I8, 32, 64, ND), |m| {
        m.mode(AccToVecMode::SingleModeVec1).scale(scale_const());
    });
    expect_clean(&r);
}

#[test]
fn dual_split_cannot_write_dn() {
    let r = mv(
        Cube,
        t(Acc, F32, 32, 64, NZ),
        t(Vec, F32, 32, 32, DN),
        |m| {
            m.mode(AccToVecMode::DualModeSplitN);
        },
    );
    expect_err(
        &r,
        Rule::DualSplitLayout,
        &["DualModeSplitN cannot produce an NZ -> DN output"],
    );
    // NZ -> ND and NZ -> NZ are fine; a single mode may write DN.
    for layout in [ND, NZ] {
        expect_clean(&mv(
            Cube,
            t(Acc, F32, 32, 64, NZ),
            t(Vec, F32, 32, 32, layout),
            |m| {
                m.mode(AccToVecMode::DualModeSplitN);
            },
        ));
    }
    expect_clean(&mv(
        Cube,
        t(Acc, F32, 32, 64, NZ),
        t(Vec, F32, 32, 64, DN),
        |m| {
            m.mode(AccToVecMode::SingleModeVec0);
        },
    ));
}

fn acc(valid_m: u64, valid_n: u64) -> TileType {
    t(Acc, F32, 32, 64, NZ).valid(valid_m, valid_n)
}

#[test]
fn split_n_under_phase_needs_n_a_multiple_of_32() {
    for n in [10u64, 17, 48] {
        let r = mv(Cube, acc(32, n), t(Vec, F32, 32, 32, ND), |m| {
            m.mode(AccToVecMode::DualModeSplitN).phase(Phase::Final);
        });
        let frag = format!("N = {n}, not a multiple of 32");
        let pad = format!("pad the Right tile's valid N to {}", n.div_ceil(32) * 32);
        expect_err(
            &r,
            Rule::DualSplitWidth,
            &["DualModeSplitN under phase", &frag, &pad],
        );
    }
    // N = 64 under phase, and N = 48 without phase, are fine.
    expect_clean(&mv(Cube, acc(32, 64), t(Vec, F32, 32, 32, ND), |m| {
        m.mode(AccToVecMode::DualModeSplitN).phase(Phase::Final);
    }));
    expect_clean(&mv(Cube, acc(32, 48), t(Vec, F32, 32, 32, ND), |m| {
        m.mode(AccToVecMode::DualModeSplitN);
    }));
    // SplitM under phase has no such restriction on N.
    expect_clean(&mv(Cube, acc(32, 48), t(Vec, F32, 16, 64, ND), |m| {
        m.mode(AccToVecMode::DualModeSplitM).phase(Phase::Final);
    }));
}

#[test]
fn split_n_half_tile_destination_shapes_with_tails() {
    // valid N -> aligned N (multiple of 32) -> columns each AIV receives (aligned / 2):
    //   10 -> 32 -> 16 (AIV0 10 real columns, AIV1 none), 17 -> 32 -> 16 (AIV0 16, AIV1 1),
    //   48 -> 64 -> 32 (AIV0 32, AIV1 16), 64 -> 64 -> 32 (32 and 32).
    for (n, half) in [(10u64, 16u64), (17, 16), (48, 32), (64, 32)] {
        expect_clean(&mv(Cube, acc(32, n), t(Vec, F32, 32, half, ND), |m| {
            m.mode(AccToVecMode::DualModeSplitN);
        }));
        let narrow = half - 8;
        let r = mv(Cube, acc(32, n), t(Vec, F32, 32, narrow, ND), |m| {
            m.mode(AccToVecMode::DualModeSplitN);
        });
        let writes = format!(
            "DualModeSplitN of 32x{n} writes 32x{half} (aligned N {} / 2)",
            half * 2
        );
        let dst = format!("the destination is 32x{narrow}");
        expect_err(&r, Rule::DualSplitShape, &[&writes, &dst]);
    }
    // Each AIV holds all valid rows: 16 rows for a 32-row tile is too few.
    let r = mv(Cube, acc(32, 64), t(Vec, F32, 16, 32, ND), |m| {
        m.mode(AccToVecMode::DualModeSplitN);
    });
    expect_err(
        &r,
        Rule::DualSplitShape,
        &["writes 32x32", "destination is 16x32"],
    );
}

#[test]
fn split_m_half_tile_destination_shapes_with_tails() {
    // valid M -> aligned M (multiple of 2) -> rows each AIV receives (aligned / 2):
    //   1 -> 2 -> 1 (only AIV0 gets data), 17 -> 18 -> 9, 32 -> 32 -> 16.
    for (m_valid, half) in [(1u64, 1u64), (17, 9), (32, 16)] {
        let acc_t = t(Acc, F32, 32, 32, NZ).valid(m_valid, 32);
        expect_clean(&mv(Cube, acc_t.clone(), t(Vec, F32, half, 32, ND), |m| {
            m.mode(AccToVecMode::DualModeSplitM);
        }));
        // The full N must fit: 24 columns are too few.
        let r = mv(Cube, acc_t.clone(), t(Vec, F32, half, 24, ND), |m| {
            m.mode(AccToVecMode::DualModeSplitM);
        });
        let writes = format!(
            "DualModeSplitM of {m_valid}x32 writes {half}x32 (aligned M {} / 2)",
            half * 2
        );
        expect_err(&r, Rule::DualSplitShape, &[&writes, "destination is"]);
    }
    // Odd M = 17: 8 rows are one too few.
    let r = mv(
        Cube,
        t(Acc, F32, 32, 32, NZ).valid(17, 32),
        t(Vec, F32, 8, 32, ND),
        |m| {
            m.mode(AccToVecMode::DualModeSplitM);
        },
    );
    expect_err(
        &r,
        Rule::DualSplitShape,
        &["writes 9x32 (aligned M 18 / 2)", "destination is 8x32"],
    );
}

#[test]
fn dual_split_rules_do_not_fire_on_single_modes() {
    let r = mv(Cube, acc(32, 10), t(Vec, F32, 32, 64, ND), |m| {
        m.mode(AccToVecMode::SingleModeVec0).phase(Phase::Final);
    });
    expect_clean(&r);
    for rule in [
        Rule::DualSplitScale,
        Rule::DualSplitLayout,
        Rule::DualSplitWidth,
        Rule::DualSplitShape,
    ] {
        expect_no(&r, rule);
    }
}

// ---------------------------------------------------------------- A2/A3: Left is ZZ

#[test]
fn a2a3_left_is_zz() {
    use tile_backend::arch::Target;
    let build = |left: Layout| {
        let mut kb = KernelBuilder::for_target("a2", Target::A2A3);
        let s = kb.tile("src", t(Mat, F16, 32, 32, NZ));
        let d = kb.tile("dst", t(Left, F16, 32, 32, left));
        kb.cube(|c| {
            c.mov(d, s);
        });
        verify(&kb.build())
    };
    expect_clean(&build(ZZ));
    expect_err(
        &build(NZ),
        Rule::MoveLayout,
        &["cannot take NZ -> NZ on Ascend A2/A3", "NZ->ZZ"],
    );
}

#[test]
fn vec_to_mat_nz_insert_takes_fp16_as_flash_attention_needs() {
    // §9: P (fp16, NZ in UB) is inserted into a wider NZ L1 tile at a column offset.
    let r = mv(
        Vector,
        t(Vec, F16, 64, 16, NZ),
        t(Mat, F16, 64, 32, NZ),
        |m| {
            m.offset(0, Expr::SubBlockIdx * 16);
        },
    );
    expect_no(&r, Rule::MoveDtype);
    expect_no(&r, Rule::MoveLayout);
}

#[test]
fn vec_to_mat_nd_insert_is_int32_only() {
    let r = mv(
        Vector,
        t(Vec, F16, 16, 16, ND),
        t(Mat, F16, 16, 32, ND),
        |m| {
            m.offset(0, 16);
        },
    );
    expect_err(&r, Rule::MoveDtype, &["f16", "i32"]);
    let r = mv(
        Vector,
        t(Vec, I32, 16, 8, ND),
        t(Mat, I32, 16, 16, ND),
        |m| {
            m.offset(0, 8);
        },
    );
    expect_no(&r, Rule::MoveDtype);
}
