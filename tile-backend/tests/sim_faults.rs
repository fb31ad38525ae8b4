//! Every `SimFault` a kernel can raise, raised by a small kernel and matched by variant: the
//! simulator refuses what the machine would get wrong, naming the op and the rule, and never
//! panics (kernels here skip the verifier where it would refuse them first, as a kernel file
//! edited by hand does).

mod support;

use support::*;
use tile_backend::dsl::{Gather, KernelBuilder};
use tile_backend::ir::*;
use tile_backend::sim::{Arg, GmTensor, SimError, SimFault};

const F32: DType = DType::F32;

/// AIV0 loads `x [8, 8]` through `view` into an 8x8 f32 tile and stores it to `y [8, 8]`.
fn copy_kernel(view: impl FnOnce(ParamId, Option<ParamId>) -> GmView) -> Kernel {
    let mut kb = KernelBuilder::new("copy");
    let x = kb.input("x", F32, [8u64, 8]);
    let y = kb.output("y", F32, [8u64, 8]);
    let n = kb.scalar("n", DType::I64);
    let t = kb.tile("t", vec_tile(F32, 8, 8));
    let view = view(x, Some(n));
    kb.vector(|v| {
        v.if_(Expr::SubBlockIdx.eq_(0), |v| {
            v.load(t, view);
            v.store(GmView::nd(y, 0, 8u64, 8u64, 8u64), t);
        });
    });
    planned(kb.build())
}

fn copy_args(n: i64) -> Vec<Arg<'static>> {
    vec![
        Arg::Tensor(GmTensor::zeros(F32, &[8, 8])),
        Arg::Tensor(GmTensor::zeros(F32, &[8, 8])),
        Arg::Int(n),
    ]
}

#[test]
fn a_division_by_zero_in_an_index_is_an_expr_fault() {
    let k = copy_kernel(|x, n| {
        let n = Expr::Param(n.expect("n"));
        GmView::nd(x, Expr::from(64) / n, 8u64, 8u64, 8u64)
    });
    let f = op_fault(simulate(&k, &mut copy_args(0)));
    assert!(
        matches!(f, SimFault::Expr(EvalError::DivisionByZero(_))),
        "{f}"
    );
    simulate(&k, &mut copy_args(1 << 20)).expect("64 / 2^20 is offset 0");
}

#[test]
fn a_negative_gm_index_is_too_small() {
    let k = copy_kernel(|x, n| GmView::nd(x, Expr::Param(n.expect("n")), 8u64, 8u64, 8u64));
    let f = op_fault(simulate(&k, &mut copy_args(-16)));
    assert!(
        matches!(
            f,
            SimFault::TooSmall {
                value: -16,
                min: 0,
                ..
            }
        ),
        "{f}"
    );
    simulate(&k, &mut copy_args(0)).expect("offset 0 is in range");
}

#[test]
fn a_loop_step_of_zero_is_too_small() {
    let mut kb = KernelBuilder::new("loop");
    kb.vector(|v| v.for_range("i", 0, 4, 0, |_, _| {}));
    let k = planned(kb.build());
    let e = simulate(&k, &mut []).expect_err("a step of 0 never ends");
    assert!(
        matches!(
            &e,
            SimError::Op {
                fault: SimFault::TooSmall {
                    value: 0,
                    min: 1,
                    ..
                },
                op: "for",
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn a_gm_access_past_its_tensor_names_the_argument() {
    let k = copy_kernel(|x, n| GmView::nd(x, Expr::Param(n.expect("n")), 8u64, 8u64, 8u64));
    let f = op_fault(simulate(&k, &mut copy_args(8)));
    assert!(
        matches!(
            &f,
            SimFault::GmOutOfBounds { name, offset: 32, size: 256, .. } if name == "x"
        ),
        "{f}"
    );
    assert!(f.to_string().contains("argument `x`"), "{f}");
}

#[test]
fn a_tile_larger_than_its_gm_window_is_outside_the_window() {
    // The window has 4 rows; the tile's valid shape is 8x8.
    let k = copy_kernel(|x, _| GmView::nd(x, 0, 4u64, 8u64, 8u64));
    let f = op_fault(simulate(&k, &mut copy_args(0)));
    assert!(
        matches!(
            f,
            SimFault::WindowOutOfBounds {
                rows: 4,
                cols: 8,
                ..
            }
        ),
        "{f}"
    );
}

#[test]
fn a_scalar_used_as_a_gm_tensor_is_the_wrong_argument_kind() {
    let k = copy_kernel(|_, n| GmView::nd(n.expect("n"), 0, 8u64, 8u64, 8u64));
    let f = op_fault(simulate(&k, &mut copy_args(0)));
    assert!(
        matches!(&f, SimFault::ArgKind { name, expected: "a GM tensor", .. } if name == "n"),
        "{f}"
    );
}

#[test]
fn a_gm_scalar_read_past_its_tensor_is_a_scalar_index_fault() {
    let mut kb = KernelBuilder::new("scalar_read");
    let x = kb.input("x", DType::I32, [4u64]);
    let y = kb.output("y", DType::I32, [4u64]);
    let n = kb.scalar("n", DType::I64);
    kb.cube(|c| {
        let v = c.read_scalar("v", x, Expr::Param(n));
        c.write_scalar(y, 0, v);
    });
    let k = planned(kb.build());
    let mut args = vec![
        Arg::Tensor(GmTensor::zeros(DType::I32, &[4])),
        Arg::Tensor(GmTensor::zeros(DType::I32, &[4])),
        Arg::Int(4),
    ];
    let f = op_fault(simulate(&k, &mut args));
    assert!(
        matches!(&f, SimFault::ScalarIndex { name, index: 4, len: 4 } if name == "x"),
        "{f}"
    );
}

#[test]
fn a_tile_scalar_read_outside_ub_is_a_space_fault() {
    let mut kb = KernelBuilder::new("l1_scalar");
    let y = kb.output("y", DType::I32, [4u64]);
    let t = kb.tile("t", t(MemSpace::Mat, DType::I32, 16, 16, Layout::NZ));
    kb.cube(|c| {
        let v = c.read_tile_scalar("v", t, 0);
        c.write_scalar(y, 0, v);
    });
    let k = planned(kb.build());
    let mut args = vec![Arg::Tensor(GmTensor::zeros(DType::I32, &[4]))];
    let f = op_fault(simulate(&k, &mut args));
    assert!(
        matches!(
            f,
            SimFault::ScalarSpace {
                space: MemSpace::Mat,
                ..
            }
        ),
        "{f}"
    );
}

/// AIV0 sets the valid shape of a dynamic 8x8 tile to what `set` gives from the scalar `n`
/// (when it gives one), loads it and stores it.
fn dynamic_kernel(set: impl FnOnce(ParamId) -> Option<(Expr, Expr)>) -> Kernel {
    let mut kb = KernelBuilder::new("dynamic");
    let x = kb.input("x", F32, [8u64, 8]);
    let y = kb.output("y", F32, [8u64, 8]);
    let n = kb.scalar("n", DType::I64);
    let t = kb.tile("t", vec_tile(F32, 8, 8).dynamic());
    let set = set(n);
    kb.vector(|v| {
        v.if_(Expr::SubBlockIdx.eq_(0), |v| {
            if let Some((r, c)) = set {
                v.set_validshape(t, r, c);
            }
            v.load(t, GmView::nd(x, 0, 8u64, 8u64, 8u64));
            v.store(GmView::nd(y, 0, 8u64, 8u64, 8u64), t);
        });
    });
    planned(kb.build())
}

#[test]
fn a_dynamic_valid_shape_never_set_is_unset() {
    let f = op_fault(simulate(&dynamic_kernel(|_| None), &mut copy_args(0)));
    assert!(
        matches!(&f, SimFault::ValidShapeUnset { tile } if tile == "t"),
        "{f}"
    );
}

#[test]
fn a_valid_shape_larger_than_its_tile_is_refused() {
    let k = dynamic_kernel(|n| Some((Expr::from(8), Expr::Param(n) + 1)));
    let f = op_fault(simulate(&k, &mut copy_args(8)));
    assert!(
        matches!(
            &f,
            SimFault::ValidShapeTooLarge { tile, rows: 8, cols: 9, shape: (8, 8) } if tile == "t"
        ),
        "{f}"
    );
    simulate(&k, &mut copy_args(7)).expect("8x8 fits");
}

#[test]
fn a_move_offset_past_the_source_is_a_region_outside_the_tile() {
    // Extract an 8x8 window at a runtime offset of a 16x16 tile.
    let mut kb = KernelBuilder::new("extract");
    let x = kb.input("x", F32, [16u64, 16]);
    let y = kb.output("y", F32, [8u64, 8]);
    let n = kb.scalar("n", DType::I64);
    let big = kb.tile("big", vec_tile(F32, 16, 16));
    let small = kb.tile("small", vec_tile(F32, 8, 8));
    kb.vector(|v| {
        v.if_(Expr::SubBlockIdx.eq_(0), |v| {
            v.load(big, GmView::nd(x, 0, 16u64, 16u64, 16u64));
            v.mov(small, big).offset(Expr::Param(n), 0);
            v.store(GmView::nd(y, 0, 8u64, 8u64, 8u64), small);
        });
    });
    let k = planned(kb.build());
    let run = |n: i64| {
        let mut args = vec![
            Arg::Tensor(GmTensor::zeros(F32, &[16, 16])),
            Arg::Tensor(GmTensor::zeros(F32, &[8, 8])),
            Arg::Int(n),
        ];
        simulate(&k, &mut args)
    };
    run(8).expect("rows 8..16 are inside");
    let f = op_fault(run(9));
    assert!(
        matches!(
            &f,
            SimFault::RegionOutsideTile { tile, end: (17, 8), shape: (16, 16) } if tile == "big"
        ),
        "{f}"
    );
    let f = op_fault(run(-1));
    assert!(matches!(f, SimFault::TooSmall { value: -1, .. }), "{f}");
}

#[test]
fn a_tile_planned_past_its_buffer_overruns_it() {
    let mut k = copy_kernel(|x, _| GmView::nd(x, 0, 8u64, 8u64, 8u64));
    // An edited kernel file: the tile's address puts its end past UB.
    let ub = arch().space(MemSpace::Vec).expect("UB").capacity;
    k.tiles[0].addr = Some(ub - 64);
    let f = op_fault(simulate(&k, &mut copy_args(0)));
    assert!(
        matches!(&f, SimFault::BufferOverrun { tile, space: MemSpace::Vec, .. } if tile == "t"),
        "{f}"
    );
}

#[test]
fn a_tile_aliasing_itself_has_no_address() {
    // An edited kernel file: the tile re-declares its own bytes, so no allocation roots it.
    let mut k = copy_kernel(|x, _| GmView::nd(x, 0, 8u64, 8u64, 8u64));
    k.tiles[0].storage = Storage::Alias { of: TileId(0) };
    k.tiles[0].addr = None;
    let f = op_fault(simulate(&k, &mut copy_args(0)));
    assert!(
        matches!(&f, SimFault::NoAddress { tile } if tile == "t"),
        "{f}"
    );
}

#[test]
fn an_undeclared_tile_is_unknown() {
    let mut kb = KernelBuilder::new("unknown");
    kb.vector(|v| v.set_validshape(TileId(7), 1, 1));
    let k = planned(kb.build());
    let f = op_fault(simulate(&k, &mut []));
    assert!(matches!(f, SimFault::UnknownTile { id: 7 }), "{f}");
}

#[test]
fn a_load_across_dtypes_is_a_dtype_mismatch() {
    let mut kb = KernelBuilder::new("cross_dtype");
    let x = kb.input("x", DType::F16, [8u64, 8]);
    let t = kb.tile("t", vec_tile(F32, 8, 8));
    kb.vector(|v| v.load(t, GmView::nd(x, 0, 8u64, 8u64, 8u64)));
    let k = planned(kb.build());
    let mut args = vec![Arg::Tensor(GmTensor::zeros(DType::F16, &[8, 8]))];
    let f = op_fault(simulate(&k, &mut args));
    assert!(
        matches!(
            f,
            SimFault::DtypeMismatch {
                found: DType::F16,
                expected: DType::F32,
                ..
            }
        ),
        "{f}"
    );
}

#[test]
fn a_sort_of_integers_is_an_unsupported_dtype() {
    let mut kb = KernelBuilder::new("sort_i32");
    let x = kb.input("x", DType::I32, [1u64, 32]);
    let ix = kb.input("ix", DType::U32, [1u64, 32]);
    let src = kb.tile("src", vec_tile(DType::I32, 1, 32));
    let idx = kb.tile("idx", vec_tile(DType::U32, 1, 32));
    let dst = kb.tile("dst", vec_tile(DType::I32, 1, 64));
    kb.vector(|v| {
        v.if_(Expr::SubBlockIdx.eq_(0), |v| {
            v.load(src, GmView::nd(x, 0, 1u64, 32u64, 32u64));
            v.load(idx, GmView::nd(ix, 0, 1u64, 32u64, 32u64));
            v.sort32(dst, src, idx);
        });
    });
    let k = planned(kb.build());
    let mut args = vec![
        Arg::Tensor(GmTensor::zeros(DType::I32, &[1, 32])),
        Arg::Tensor(GmTensor::zeros(DType::U32, &[1, 32])),
    ];
    let f = op_fault(simulate(&k, &mut args));
    assert!(
        matches!(
            f,
            SimFault::UnsupportedDtype {
                dtype: DType::I32,
                ..
            }
        ),
        "{f}"
    );
}

#[test]
fn operands_of_different_valid_shapes_are_a_shape_mismatch() {
    let mut kb = KernelBuilder::new("add_shapes");
    let x = kb.input("x", F32, [8u64, 8]);
    let y = kb.output("y", F32, [8u64, 8]);
    let n = kb.scalar("n", DType::I64);
    let a = kb.tile("a", vec_tile(F32, 8, 8).dynamic());
    let b = kb.tile("b", vec_tile(F32, 8, 8));
    kb.vector(|v| {
        v.if_(Expr::SubBlockIdx.eq_(0), |v| {
            v.set_validshape(a, 8, 8);
            v.load(a, GmView::nd(x, 0, 8u64, 8u64, 8u64));
            v.load(b, GmView::nd(x, 0, 8u64, 8u64, 8u64));
            v.set_validshape(a, Expr::Param(n), 8);
            v.add(b, a, b);
            v.store(GmView::nd(y, 0, 8u64, 8u64, 8u64), b);
        });
    });
    let k = planned(kb.build());
    simulate(&k, &mut copy_args(8)).expect("8x8 and 8x8");
    let f = op_fault(simulate(&k, &mut copy_args(4)));
    assert!(
        matches!(
            f,
            SimFault::ShapeMismatch {
                a: (4, 8),
                b: (8, 8),
                ..
            }
        ),
        "{f}"
    );
}

#[test]
fn a_move_from_ub_to_l0a_is_not_a_legal_path() {
    let mut kb = KernelBuilder::new("vec_to_left");
    let v = kb.tile("v", vec_tile(DType::F16, 16, 16));
    let l = kb.tile("l", t(MemSpace::Left, DType::F16, 16, 16, Layout::NZ));
    kb.vector(|b| {
        b.mov(l, v);
    });
    let k = planned(kb.build());
    let f = op_fault(simulate(&k, &mut []));
    assert!(
        matches!(
            f,
            SimFault::IllegalMove {
                from: MemSpace::Vec,
                to: MemSpace::Left
            }
        ),
        "{f}"
    );
}

/// The cube gathers 4 rows of `src [16, 16]` f16 through the block table `bt [1, 2]` (blocks
/// of `block_size` tokens) into a 16x16 NZ L1 tile, from column `col`.
fn gather_run(idx: [i32; 4], bt: [i32; 2], block_size: i64, col: i64) -> Result<(), SimError> {
    let mut kb = KernelBuilder::new("gather");
    let src = kb.input("src", DType::F16, [16u64, 16]);
    let ix = kb.input("idx", DType::I32, [1u64, 4]);
    let table = kb.input("bt", DType::I32, [1u64, 2]);
    let bs = kb.scalar("bs", DType::I64);
    let c0 = kb.scalar("col", DType::I64);
    let dst = kb.tile("dst", t(MemSpace::Mat, DType::F16, 16, 16, Layout::NZ));
    kb.cube(|c| {
        c.gather_in_l1(Gather {
            dst: dst.into(),
            src,
            indices: GmView::nd(ix, 0, 1u64, 4u64, 4u64),
            block_table: GmView::nd(table, 0, 1u64, 2u64, 2u64),
            block_size: Expr::Param(bs),
            size: 8,
            col_offset: Expr::Param(c0),
            is_b_matrix: false,
            is_trans: false,
        });
    });
    let k = planned(kb.build());
    let ints = |v: &[i32]| v.iter().map(|&x| x as i64).collect::<Vec<_>>();
    let mut args = vec![
        Arg::Tensor(GmTensor::zeros(DType::F16, &[16, 16])),
        Arg::Tensor(GmTensor::from_i64(DType::I32, &[1, 4], &ints(&idx))),
        Arg::Tensor(GmTensor::from_i64(DType::I32, &[1, 2], &ints(&bt))),
        Arg::Int(block_size),
        Arg::Int(col),
    ];
    simulate(&k, &mut args)
}

#[test]
fn gather_faults_name_the_token_the_entry_or_the_columns() {
    gather_run([0, 1, 8, 15], [1, 0], 8, 8).expect("every token maps inside the source");
    let f = op_fault(gather_run([0, 1, 16, 3], [1, 0], 8, 0));
    assert!(
        matches!(
            f,
            SimFault::GatherIndex {
                index: 16,
                position: 2,
                blocks: 2,
                block_size: 8
            }
        ),
        "{f}"
    );
    let f = op_fault(gather_run([0, 1, 9, 3], [1, 2], 8, 0));
    assert!(
        matches!(
            f,
            SimFault::GatherTableEntry {
                entry: 2,
                block: 1,
                token: 9,
                rows: 16
            }
        ),
        "{f}"
    );
    let f = op_fault(gather_run([0, 1, 2, 3], [1, 0], 8, 9));
    assert!(
        matches!(
            f,
            SimFault::GatherColumns {
                start: 9,
                end: 17,
                cols: 16
            }
        ),
        "{f}"
    );
    let f = op_fault(gather_run([0, 1, 2, 3], [1, 0], 0, 0));
    assert!(
        matches!(
            f,
            SimFault::TooSmall {
                value: 0,
                min: 1,
                ..
            }
        ),
        "{f}"
    );
}

#[test]
fn a_store_of_never_written_bytes_is_poison() {
    let mut kb = KernelBuilder::new("poison");
    let y = kb.output("y", F32, [8u64, 8]);
    let t = kb.tile("t", vec_tile(F32, 8, 8));
    kb.vector(|v| {
        v.if_(Expr::SubBlockIdx.eq_(0), |v| {
            v.store(GmView::nd(y, 0, 8u64, 8u64, 8u64), t);
        });
    });
    let k = planned(kb.build());
    let mut args = vec![Arg::Tensor(GmTensor::zeros(F32, &[8, 8]))];
    let f = op_fault(simulate(&k, &mut args));
    assert!(
        matches!(
            &f,
            SimFault::Poison { what: "a store to GM", tile, element: (0, 0) } if tile == "t"
        ),
        "{f}"
    );
}

#[test]
fn a_cross_core_flag_id_out_of_range_is_refused() {
    let mut kb = KernelBuilder::new("flag");
    kb.cube(|c| c.set_cross_flag(Pipe::Fix, 40));
    let k = planned(kb.build());
    let f = op_fault(simulate(&k, &mut []));
    assert!(matches!(f, SimFault::CrossFlag { id: 40 }), "{f}");
}

#[test]
fn a_channel_op_not_lowered_to_flags_is_refused() {
    // Planned but not compiled: the channel was never lowered to cross-core flags.
    let mut kb = KernelBuilder::new("channel");
    let ch = kb.channel("c", CoreKind::Cube, 1);
    kb.cube(|c| c.acquire(ch));
    let k = planned(kb.build());
    let f = op_fault(simulate(&k, &mut []));
    assert!(matches!(f, SimFault::ChannelNotLowered), "{f}");
}

#[test]
fn faults_stay_small_on_the_success_path() {
    // A `Result<_, SimFault>` is what every op returns: its `Ok` path writes a tag, whatever
    // the size, but the fault stays within eight words, and a `SimError` within clippy's
    // bound for an error type.
    let (fault, error) = (size_of::<SimFault>(), size_of::<SimError>());
    assert!(fault <= 64 && error <= 128, "{fault} B, {error} B");
}

/// Each integer constant of a compiled kernel's JSON set, one at a time, to a hostile value (a
/// hand-edited kernel file, run without the verifier): every run ends, with outputs or with an
/// error, and never panics; the op faults among them are typed.
#[test]
fn mutated_kernel_files_end_in_errors_not_panics() {
    use tile_backend::kernels::{gather_matmul, GatherMatmulParams};
    use tile_backend::sim::{io, RunLimits, SimOptions};
    let k = compiled(&gather_matmul(&GatherMatmulParams::upstream_small()));
    let json = k.to_json();
    // The value after each `"Const": ` (pretty JSON).
    let key = "\"Const\": ";
    let consts: Vec<usize> = json
        .match_indices(key)
        .map(|(i, _)| i + key.len())
        .collect();
    assert!(consts.len() > 10, "{} constants", consts.len());
    let limits = RunLimits {
        max_steps: Some(200_000),
    };
    let (mut runs, mut faults) = (0, 0);
    for &at in &consts {
        let digits = json[at..].find(|c: char| c != '-' && !c.is_ascii_digit());
        let end = at + digits.expect("a number ends");
        for value in [-1i64, 0, 3, 1 << 40] {
            let edited = format!("{}{value}{}", &json[..at], &json[end..]);
            let Ok(kernel) = Kernel::from_json(&edited) else {
                continue;
            };
            let Ok(mut args) = io::generate(&kernel, 7) else {
                continue;
            };
            runs += 1;
            let opts = SimOptions { block_dim: 1 };
            let r =
                tile_backend::sim::run_traced_limited(&kernel, &arch(), &mut args, opts, limits);
            if let Err(SimError::Op { fault, .. }) = r {
                faults += 1;
                assert!(!matches!(fault, SimFault::Internal(_)), "{fault}");
            }
        }
    }
    assert!(runs > 40 && faults > 5, "{runs} runs, {faults} op faults");
}
