//! The tile-level reference kernels: every variant verifies clean, round-trips through JSON, and
//! has the structure it documents.

use tile_backend::ir::*;
use tile_backend::kernels::{
    self, attention_tile, gather_matmul, matmul, AttentionParams, GatherMatmulParams, Handoff,
    MatmulParams,
};
use tile_backend::verify::verify;

/// No errors, no warnings, and an identical kernel after a JSON round trip.
fn assert_clean(k: &Kernel) {
    let report = verify(k);
    assert!(
        report.diagnostics.is_empty(),
        "kernel `{}` is not clean:\n{report}",
        k.name
    );
    let back = Kernel::from_json(&k.to_json()).expect("kernel JSON parses");
    assert_eq!(&back, k, "JSON round trip of `{}`", k.name);
}

fn matmul_variants() -> Vec<MatmulParams> {
    let d = MatmulParams::default();
    let mut v = vec![];
    for dtype in [DType::F16, DType::BF16, DType::F32, DType::I8] {
        v.push(MatmulParams { dtype, ..d });
        // Tails in every dimension.
        v.push(MatmulParams {
            m: 100,
            k: 200,
            n: 72,
            dtype,
            ..d
        });
    }
    // A single K slice, a single tile, and a bigger tiling.
    v.push(MatmulParams { k: 64, ..d });
    v.push(MatmulParams {
        m: 64,
        n: 64,
        k: 64,
        ..d
    });
    v.push(MatmulParams {
        m: 256,
        k: 512,
        n: 256,
        tile_m: 128,
        tile_n: 128,
        tile_k: 64,
        ..d
    });
    // Odd number of K slices (the odd half of the ping-pong pair is guarded).
    v.push(MatmulParams { k: 192, ..d });
    // Tail only in K, and only in M.
    v.push(MatmulParams { k: 100, ..d });
    v.push(MatmulParams { m: 120, ..d });
    v
}

#[test]
fn matmul_variants_verify_clean() {
    for p in matmul_variants() {
        assert_clean(&matmul(&p));
    }
}

fn attention_variants() -> Vec<AttentionParams> {
    let d = AttentionParams::default();
    let mut v = vec![];
    for handoff in [Handoff::Channels, Handoff::CrossFlags] {
        v.push(AttentionParams { handoff, ..d });
        v.push(AttentionParams {
            dtype: DType::BF16,
            handoff,
            ..d
        });
        v.push(AttentionParams {
            ts: 64,
            tkv: 64,
            d: 128,
            batch: 4,
            handoff,
            ..d
        });
        v.push(AttentionParams {
            ts: 128,
            tkv: 128,
            d: 128,
            handoff,
            ..d
        });
    }
    v
}

#[test]
fn attention_variants_verify_clean() {
    for p in attention_variants() {
        assert_clean(&attention_tile(&p));
    }
}

fn gather_variants() -> Vec<GatherMatmulParams> {
    let d = GatherMatmulParams::default();
    vec![
        d,
        GatherMatmulParams::int8(),
        GatherMatmulParams::upstream_small(),
        GatherMatmulParams::upstream_int8(),
        GatherMatmulParams {
            dtype: DType::BF16,
            ..d
        },
        GatherMatmulParams {
            dtype: DType::F32,
            ..d
        },
        // Tails: n not a multiple of tile_n, m not a multiple of 16, size not a multiple of C0,
        // size < cols (the first `size` columns of each row, as V is of an MLA cache row).
        GatherMatmulParams {
            m: 10,
            size: 100,
            cols: 120,
            n: 70,
            ..d
        },
        GatherMatmulParams {
            m: 7,
            size: 96,
            cols: 128,
            n: 300,
            ..GatherMatmulParams::int8()
        },
        // One tile only.
        GatherMatmulParams { n: 32, ..d },
    ]
}

#[test]
fn gather_matmul_variants_verify_clean() {
    for p in gather_variants() {
        assert_clean(&gather_matmul(&p));
    }
}

#[test]
fn all_returns_one_clean_kernel_of_each() {
    let all = kernels::all();
    let names: Vec<&str> = all.iter().map(|k| k.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "matmul_f16",
            "attention_tile_f16",
            "gather_matmul_f16",
            "topk_2048"
        ]
    );
    for k in &all {
        assert_clean(k);
    }
}

// ---------------------------------------------------------------------------------------------
// Structure.

fn ops_of(k: &Kernel, core: CoreKind) -> Vec<&Op> {
    let mut v = vec![];
    walk_ops(k.section(core), &mut |op| v.push(op));
    v
}

fn tile_named<'a>(k: &'a Kernel, name: &str) -> (TileId, &'a TileDecl) {
    let i = k
        .tiles
        .iter()
        .position(|t| t.name == name)
        .unwrap_or_else(|| panic!("no tile `{name}` in `{}`", k.name));
    (TileId(i as u32), &k.tiles[i])
}

/// Every (src, dst, event) flag is set as often as it is waited, in the program text. The
/// kernels balance flags per straight-line body (wait before use, set after), so text balance is
/// run-time balance whatever the trip counts and branches.
fn assert_flags_balanced(k: &Kernel) {
    use std::collections::HashMap;
    let mut count: HashMap<(Pipe, Pipe, u8), i64> = HashMap::new();
    for (_, op) in k.ops() {
        match op {
            Op::Sync(SyncOp::SetFlag { src, dst, event }) => {
                *count.entry((*src, *dst, *event)).or_default() += 1
            }
            Op::Sync(SyncOp::WaitFlag { src, dst, event }) => {
                *count.entry((*src, *dst, *event)).or_default() -= 1
            }
            _ => {}
        }
    }
    for (key, n) in count {
        assert_eq!(n, 0, "`{}`: flag {key:?} set - waited = {n}", k.name);
    }
}

fn matmul_phases(k: &Kernel) -> Vec<(bool, Option<Phase>)> {
    ops_of(k, CoreKind::Cube)
        .into_iter()
        .filter_map(|op| match op {
            Op::Matmul(MatmulOp::Matmul {
                accumulate, phase, ..
            }) => Some((*accumulate, *phase)),
            _ => None,
        })
        .collect()
}

#[test]
fn matmul_accumulates_over_k_with_partial_then_final() {
    let k = matmul(&MatmulParams::default());
    // Pre-order: the first slice (matmul, Partial), the last (matmul_acc, Final), the middle
    // (matmul_acc, Partial) -- once per half of the ping-pong pair.
    let phases = matmul_phases(&k);
    let half = [
        (false, Some(Phase::Partial)),
        (true, Some(Phase::Final)),
        (true, Some(Phase::Partial)),
    ];
    assert_eq!(phases, [half, half].concat());
    // The loop runs k / tile_k = 4 slices, two per iteration.
    let Some(Stmt::If { then_body, .. }) = k.cube.first() else {
        panic!("the cube program is guarded by the block index");
    };
    let lp = then_body
        .iter()
        .find_map(|s| match s {
            Stmt::For { end, step, .. } => Some((end.clone(), *step)),
            _ => None,
        })
        .expect("a K loop");
    assert_eq!(lp, (Expr::Const(4), 2));
    // The store comes after an explicit M -> FIX flag.
    let cube = ops_of(&k, CoreKind::Cube);
    let store = cube
        .iter()
        .position(|op| matches!(op, Op::LoadStore(LoadStoreOp::Store { .. })))
        .expect("a store");
    assert!(matches!(
        cube[store - 1],
        Op::Sync(SyncOp::WaitFlag {
            src: Pipe::M,
            dst: Pipe::Fix,
            ..
        })
    ));
    assert!(k.vector.is_empty());
    assert_flags_balanced(&k);
}

#[test]
fn matmul_single_k_slice_is_one_final_matmul() {
    let k = matmul(&MatmulParams {
        k: 64,
        ..Default::default()
    });
    assert_eq!(matmul_phases(&k), [(false, Some(Phase::Final))]);
    assert_flags_balanced(&k);
}

#[test]
fn matmul_ping_pongs_l1_and_l0_with_two_events_per_pipe_pair() {
    let k = matmul(&MatmulParams::default());
    for (name, space) in [
        ("a_l1", MemSpace::Mat),
        ("b_l1", MemSpace::Mat),
        ("a_l0", MemSpace::Left),
        ("b_l0", MemSpace::Right),
    ] {
        let (id, decl) = tile_named(&k, name);
        assert_eq!(decl.buffers, 2, "{name}");
        assert_eq!(decl.ty.space, space, "{name}");
        // Every use picks a buffer with `i % 2`.
        for (_, op) in k.ops() {
            for r in op.tile_reads().into_iter().chain(op.tile_writes()) {
                if r.tile == id {
                    assert!(
                        matches!(&r.slot, Expr::Bin(BinOp::Rem, _, b) if **b == Expr::Const(2)),
                        "{name} used with slot {}",
                        r.slot
                    );
                }
            }
        }
    }
    let mut pairs = std::collections::BTreeMap::<(Pipe, Pipe), Vec<u8>>::new();
    for (_, op) in k.ops() {
        if let Op::Sync(SyncOp::SetFlag { src, dst, event }) = op {
            let e = pairs.entry((*src, *dst)).or_default();
            if !e.contains(event) {
                e.push(*event);
            }
        }
    }
    for pair in [
        (Pipe::Mte2, Pipe::Mte1),
        (Pipe::Mte1, Pipe::M),
        (Pipe::M, Pipe::Mte1),
        (Pipe::Mte1, Pipe::Mte2),
    ] {
        let mut ev = pairs.get(&pair).cloned().unwrap_or_default();
        ev.sort();
        assert_eq!(ev, [0, 1], "events of {pair:?}");
    }
    // The block index picks the output tile; the launch has one block per tile.
    let mut uses_block = false;
    for s in &k.cube {
        if let Stmt::If { cond, .. } = s {
            cond.visit(&mut |e| uses_block |= *e == Expr::BlockIdx);
        }
    }
    assert!(uses_block);
    assert_eq!(MatmulParams::default().block_dim(), 4);
}

#[test]
fn matmul_tails_use_runtime_valid_shapes_and_zero_padding() {
    let tails = matmul(&MatmulParams {
        m: 100,
        k: 200,
        n: 72,
        ..Default::default()
    });
    let count = |k: &Kernel, f: fn(&Op) -> bool| k.ops().iter().filter(|(_, op)| f(op)).count();
    assert!(
        count(&tails, |op| matches!(
            op,
            Op::Vector(VectorOp::FillPad { .. })
        )) > 0
    );
    assert!(
        count(&tails, |op| matches!(
            op,
            Op::Vector(VectorOp::SetValidShape { .. })
        )) > 0
    );
    for name in ["a_l1", "b_l1"] {
        let (_, d) = tile_named(&tails, name);
        assert_eq!(d.ty.valid_rows, ValidDim::Dynamic);
        assert_eq!(d.ty.pad, PadValue::Zero);
    }
    assert_eq!(tile_named(&tails, "acc").1.ty.valid_rows, ValidDim::Dynamic);
    let p = MatmulParams {
        m: 100,
        k: 200,
        n: 72,
        ..Default::default()
    };
    assert_eq!((p.tiles_m(), p.tiles_n(), p.k_steps()), (2, 2, 4));
    // Without tails everything is static.
    let full = matmul(&MatmulParams::default());
    assert_eq!(
        count(&full, |op| matches!(
            op,
            Op::Vector(VectorOp::FillPad { .. })
        )),
        0
    );
    assert_eq!(
        count(&full, |op| matches!(
            op,
            Op::Vector(VectorOp::SetValidShape { .. })
        )),
        0
    );
    assert_flags_balanced(&tails);
}

#[test]
fn matmul_int8_accumulates_in_int32() {
    let k = matmul(&MatmulParams {
        dtype: DType::I8,
        ..Default::default()
    });
    assert_eq!(k.name, "matmul_i8");
    assert_eq!(tile_named(&k, "acc").1.ty.dtype, DType::I32);
    assert_eq!(tile_named(&k, "a_l0").1.ty.dtype, DType::I8);
    let c = k.params.iter().find(|p| p.name == "c").expect("c");
    assert!(matches!(
        c.kind,
        ParamKind::Tensor {
            dtype: DType::I32,
            output: true,
            ..
        }
    ));
}

fn acc_to_vec_modes(k: &Kernel) -> Vec<AccToVecMode> {
    ops_of(k, CoreKind::Cube)
        .into_iter()
        .filter_map(|op| match op {
            Op::Move(MoveOp::Move {
                acc_to_vec: Some(m),
                ..
            }) => Some(*m),
            _ => None,
        })
        .collect()
}

#[test]
fn attention_splits_n_then_m_and_reduces_down_columns() {
    let k = attention_tile(&AttentionParams::default());
    assert_eq!(
        acc_to_vec_modes(&k),
        [AccToVecMode::DualModeSplitN, AccToVecMode::DualModeSplitM]
    );
    // Both Fixpipe reads carry the unit flag of a Final matmul.
    let cube = ops_of(&k, CoreKind::Cube);
    let finals = cube
        .iter()
        .filter(|op| {
            matches!(
                op,
                Op::Move(MoveOp::Move {
                    phase: Some(Phase::Final),
                    ..
                }) | Op::Matmul(MatmulOp::Matmul {
                    phase: Some(Phase::Final),
                    ..
                })
            )
        })
        .count();
    assert_eq!(finals, 4);
    // S^T = K · Q^T: K is the Left operand, [tkv, d]; the accumulator is [tkv, ts].
    let (s_acc, s_decl) = tile_named(&k, "s_acc");
    assert_eq!((s_decl.ty.rows, s_decl.ty.cols), (128, 32));
    let (k_l0, _) = tile_named(&k, "k_l0");
    assert!(cube.iter().any(|op| matches!(op,
        Op::Matmul(MatmulOp::Matmul { dst, a, .. }) if dst.tile == s_acc && a.tile == k_l0)));
    // Q^T comes from a DN view of Q loaded into a ZN Mat tile.
    let (qt_l1, qt) = tile_named(&k, "qt_l1");
    assert_eq!(qt.ty.layout, Layout::ZN);
    assert!(cube.iter().any(|op| matches!(op,
        Op::LoadStore(LoadStoreOp::Load { dst, src }) if dst.tile == qt_l1 && src.layout == Layout::DN)));
    // Each AIV holds [tkv, ts / 2] of S^T and [ts / 2, d] of O.
    let s_ub = tile_named(&k, "s_ub").1;
    assert_eq!((s_ub.ty.rows, s_ub.ty.cols), (128, 16));
    let o_ub = tile_named(&k, "o_ub").1;
    assert_eq!((o_ub.ty.rows, o_ub.ty.cols), (16, 64));

    let vector = ops_of(&k, CoreKind::Vector);
    let shape: Vec<String> = vector
        .iter()
        .filter_map(|op| match op {
            Op::Vector(VectorOp::BinaryScalar { op, .. }) => Some(format!("{op:?}s")),
            Op::Vector(VectorOp::Reduce { op, axis, .. }) => Some(format!("{axis:?}{op:?}")),
            Op::Vector(VectorOp::Broadcast { op, axis, .. }) => {
                Some(format!("{axis:?}Bcast{op:?}"))
            }
            Op::Vector(VectorOp::Unary { op, .. }) => Some(format!("{op:?}")),
            Op::Vector(VectorOp::Cast { .. }) => Some("Cast".into()),
            _ => None,
        })
        .collect();
    assert_eq!(
        shape,
        [
            "Muls",
            "ColMax",
            "ColBcastSub",
            "Exp",
            "ColSum",
            "Cast",
            "RowBcastDiv"
        ]
    );
    // The scale is a runtime f32 argument with a range for generated inputs.
    let scale = k.params.iter().find(|p| p.name == "scale").expect("scale");
    assert!(matches!(
        scale.kind,
        ParamKind::Scalar { dtype: DType::F32 }
    ));
    assert!(scale.range.is_some());
}

#[test]
fn attention_inserts_p_at_the_sub_block_column_half() {
    let k = attention_tile(&AttentionParams::default());
    let (p_l1, p) = tile_named(&k, "p_l1");
    assert_eq!(p.ty.space, MemSpace::Mat);
    let inserts: Vec<&Op> = ops_of(&k, CoreKind::Vector)
        .into_iter()
        .filter(|op| matches!(op, Op::Move(MoveOp::Move { dst, .. }) if dst.tile == p_l1))
        .collect();
    assert_eq!(inserts.len(), 1);
    let Op::Move(MoveOp::Move {
        src,
        offset: Some([r, c]),
        ..
    }) = inserts[0]
    else {
        panic!("the P insert has an offset");
    };
    // A 16-bit NZ tile in UB, half the columns of the NZ tile in L1.
    let src = k.tile(src.tile);
    assert_eq!(
        (src.ty.space, src.ty.layout, src.ty.dtype, src.ty.cols),
        (MemSpace::Vec, Layout::NZ, DType::F16, 16)
    );
    assert_eq!(
        (p.ty.layout, p.ty.dtype, p.ty.cols),
        (Layout::NZ, DType::F16, 32)
    );
    assert_eq!(*r, Expr::Const(0));
    let mut uses_sub_block = false;
    c.visit(&mut |e| uses_sub_block |= *e == Expr::SubBlockIdx);
    assert!(uses_sub_block, "column offset {c}");
    // The cube reads P^T (a ZN view of the same bytes) into L0A.
    let (pt_l1, pt) = tile_named(&k, "pt_l1");
    assert_eq!(pt.storage, Storage::Alias { of: p_l1 });
    assert_eq!(
        (pt.ty.layout, pt.ty.rows, pt.ty.cols),
        (Layout::ZN, 32, 128)
    );
    assert!(ops_of(&k, CoreKind::Cube).iter().any(|op| matches!(op,
        Op::Move(MoveOp::Move { src, .. }) if src.tile == pt_l1)));
}

#[test]
fn attention_handoffs_channels_or_cross_flags() {
    let ch = attention_tile(&AttentionParams::default());
    assert_eq!(ch.channels.len(), 3);
    let producers: Vec<CoreKind> = ch.channels.iter().map(|c| c.producer).collect();
    assert_eq!(
        producers,
        [CoreKind::Cube, CoreKind::Vector, CoreKind::Cube]
    );
    assert!(!ch.ops().iter().any(|(_, op)| matches!(
        op,
        Op::Sync(SyncOp::SetCrossFlag { .. }) | Op::Sync(SyncOp::WaitCrossFlag { .. })
    )));
    for (core, want) in [(CoreKind::Cube, 6), (CoreKind::Vector, 6)] {
        let n = ops_of(&ch, core)
            .iter()
            .filter(|op| {
                matches!(
                    op,
                    Op::Sync(SyncOp::ChannelAcquire { .. })
                        | Op::Sync(SyncOp::ChannelPush { .. })
                        | Op::Sync(SyncOp::ChannelPop { .. })
                        | Op::Sync(SyncOp::ChannelRelease { .. })
                )
            })
            .count();
        assert_eq!(n, want, "{core:?} channel ops");
    }

    let fl = attention_tile(&AttentionParams {
        handoff: Handoff::CrossFlags,
        ..Default::default()
    });
    assert!(fl.channels.is_empty());
    let ids = |core, set: bool| -> Vec<u8> {
        ops_of(&fl, core)
            .into_iter()
            .filter_map(|op| match (op, set) {
                (Op::Sync(SyncOp::SetCrossFlag { id, .. }), true)
                | (Op::Sync(SyncOp::WaitCrossFlag { id, .. }), false) => Some(*id),
                _ => None,
            })
            .collect()
    };
    // The cube signals each AIV (id, id + 16) and waits for both; vector code writes 0..16.
    assert_eq!(ids(CoreKind::Cube, true), [0, 16, 2, 18]);
    assert_eq!(ids(CoreKind::Cube, false), [1, 17]);
    assert_eq!(ids(CoreKind::Vector, true), [1]);
    assert_eq!(ids(CoreKind::Vector, false), [0, 2]);
    assert_flags_balanced(&fl);
    assert_flags_balanced(&ch);
}

#[test]
fn gather_matmul_gathers_the_b_matrix_into_nz_l1() {
    for p in [GatherMatmulParams::default(), GatherMatmulParams::int8()] {
        let k = gather_matmul(&p);
        let cube = ops_of(&k, CoreKind::Cube);
        let gathers: Vec<&Op> = cube
            .iter()
            .copied()
            .filter(|op| matches!(op, Op::Gather(GatherOp::GatherInL1 { .. })))
            .collect();
        // Once per half of the ping-pong pair.
        assert_eq!(gathers.len(), 2);
        let (k_l1, kd) = tile_named(&k, "k_l1");
        assert_eq!(
            (kd.ty.space, kd.ty.layout, kd.ty.dtype, kd.buffers),
            (MemSpace::Mat, Layout::NZ, p.dtype, 2)
        );
        for g in gathers {
            let Op::Gather(GatherOp::GatherInL1 {
                dst,
                is_b_matrix,
                size,
                ..
            }) = g
            else {
                unreachable!()
            };
            assert_eq!(dst.tile, k_l1);
            assert!(*is_b_matrix);
            assert_eq!(*size, p.size);
        }
        // K^T: the ZN view of the gathered tile goes to L0B, the matmul's B operand.
        let (kt_l1, kt) = tile_named(&k, "kt_l1");
        assert_eq!(kt.storage, Storage::Alias { of: k_l1 });
        assert_eq!(kt.ty.layout, Layout::ZN);
        let (kt_l0, _) = tile_named(&k, "kt_l0");
        assert!(cube.iter().any(|op| matches!(op,
            Op::Move(MoveOp::Move { dst, src, .. }) if dst.tile == kt_l0 && src.tile == kt_l1)));
        assert!(cube.iter().any(|op| matches!(op,
            Op::Matmul(MatmulOp::Matmul { b, .. }) if b.tile == kt_l0)));
        // Acc -> GM store.
        let (acc, ad) = tile_named(&k, "acc");
        assert_eq!(ad.ty.dtype, p.out_dtype());
        assert!(cube.iter().any(|op| matches!(op,
            Op::LoadStore(LoadStoreOp::Store { src, .. }) if src.tile == acc)));
        assert_flags_balanced(&k);
    }
}

#[test]
fn gather_matmul_int8_is_int8_times_int8_into_int32() {
    let k = gather_matmul(&GatherMatmulParams::int8());
    assert_eq!(k.name, "gather_matmul_i8");
    let dt = |name: &str| tile_named(&k, name).1.ty.dtype;
    assert_eq!(
        (dt("q_l0"), dt("kt_l0"), dt("acc")),
        (DType::I8, DType::I8, DType::I32)
    );
    // The large upstream shape of ASCEND950.md §8.
    let up = GatherMatmulParams::upstream_int8();
    assert_eq!(
        (up.tokens, up.n, up.block_size, up.dtype),
        (82816, 2048, 128, DType::I8)
    );
    assert_eq!(up.table_len * up.block_size, up.tokens);
}

#[test]
fn gather_matmul_declares_valid_input_ranges() {
    let p = GatherMatmulParams::default();
    let k = gather_matmul(&p);
    let range = |name: &str| {
        let prm = k.params.iter().find(|x| x.name == name).expect(name);
        let r = prm.range.clone().expect("a range");
        (r.min, r.max)
    };
    // Logical tokens within the block table's capacity; entries within the cache's blocks.
    assert_eq!(
        range("indices"),
        (0.0, (p.table_len * p.block_size - 1) as f64)
    );
    assert_eq!(
        range("block_table"),
        (0.0, (p.tokens / p.block_size - 1) as f64)
    );
    // 33 tokens in blocks of 10: only the 3 whole blocks are addressable.
    let small = gather_matmul(&GatherMatmulParams::upstream_small());
    let bt = small
        .params
        .iter()
        .find(|x| x.name == "block_table")
        .and_then(|x| x.range.clone())
        .expect("range");
    assert_eq!((bt.min, bt.max), (0.0, 2.0));
}

#[test]
fn gather_matmul_tails_pad_with_zeros() {
    let k = gather_matmul(&GatherMatmulParams {
        m: 10,
        size: 100,
        cols: 120,
        n: 70,
        ..Default::default()
    });
    let (_, q) = tile_named(&k, "q_l1");
    // m and size padded to 16 / C0 with a zero-filled pad.
    assert_eq!((q.ty.rows, q.ty.cols), (16, 112));
    assert_eq!(
        (q.ty.valid_rows, q.ty.valid_cols),
        (ValidDim::Static(10), ValidDim::Static(100))
    );
    assert_eq!(q.ty.pad, PadValue::Zero);
    let (_, kd) = tile_named(&k, "k_l1");
    assert_eq!(kd.ty.valid_rows, ValidDim::Dynamic);
    assert_eq!(kd.ty.pad, PadValue::Zero);
    let fillpads = k
        .ops()
        .iter()
        .filter(|(_, op)| matches!(op, Op::Vector(VectorOp::FillPad { .. })))
        .count();
    assert_eq!(fillpads, 3, "q once, k_l1 in each half of the pair");
}

/// The byte identities the kernels' reinterprets rely on (ASCEND950.md §3).
#[test]
fn reinterpret_byte_identities_hold() {
    let (r, c) = (128u64, 32u64);
    // NZ [R, C] is ZN [C, R] (a free transpose).
    let p16 = TileType::new(MemSpace::Mat, DType::F16, r, c, Layout::NZ);
    let pt = TileType::new(MemSpace::Mat, DType::F16, c, r, Layout::ZN);
    for i in 0..r {
        for j in 0..c {
            assert_eq!(pt.element_offset(j, i), p16.element_offset(i, j));
        }
    }
    // int8 NZ [n, K] is ZN [K, n].
    let k8 = TileType::new(MemSpace::Mat, DType::I8, 64, 128, Layout::NZ);
    let kt8 = TileType::new(MemSpace::Mat, DType::I8, 128, 64, Layout::ZN);
    for i in 0..64 {
        for j in 0..128 {
            assert_eq!(k8.element_offset(i, j), kt8.element_offset(j, i));
        }
    }
    // ND [1, H] is DN [H, 1].
    let row = TileType::new(MemSpace::Vec, DType::F32, 1, 16, Layout::ND);
    let col = TileType::new(MemSpace::Vec, DType::F32, 16, 1, Layout::DN);
    for j in 0..16 {
        assert_eq!(row.element_offset(0, j), col.element_offset(j, 0));
    }
}
