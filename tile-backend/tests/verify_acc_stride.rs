//! The A5 Fixpipe's L0C source stride (ASCEND950.md §12, A5-FACTS §1): a TMOV out of an Acc
//! reads column blocks at its valid rows rounded up to 16, the matmul wrote them at its Left
//! tile's valid rows rounded up to 16. The verifier rejects a kernel where the two can differ
//! (rule `acc-stride`), and TileSim refuses to run one where they do.

use tile_backend::arch::Arch;
use tile_backend::dsl::KernelBuilder;
use tile_backend::ir::*;
use tile_backend::sim::io::Rng;
use tile_backend::sim::{Arg, GmTensor, SimError, SimFault};
use tile_backend::verify::{verify, Rule};

mod support;
use support::*;

/// How the test kernel sets its tiles' valid rows.
#[derive(Clone, Copy)]
enum Rows {
    /// The Acc's valid rows from the scalar `mv`, the Left tile static (64 rows): the bug of
    /// quant_matmul before the fix.
    AccFromParam,
    /// The Acc's valid rows a constant.
    AccConst(i64),
    /// Left and Acc both take `mv` (the matmul uses the valid rows).
    BothFromParam,
}

/// `acc[64, 32] = a_l0[64, 32] b_l0[32, 32]` (f16 -> f32), then a TMOV of the Acc to a UB tile
/// (`dst_layout`) with the Fixpipe; `mv` is the kernel's first argument.
fn kernel(rows: Rows, dst_layout: Layout) -> Kernel {
    let (m, k, n) = (64u64, 32u64, 32u64);
    let mut kb = KernelBuilder::new("acc_stride");
    let mv = Expr::Param(kb.scalar("mv", DType::I64));
    let a = kb.input("a", DType::F16, [m, k]);
    let b = kb.input("b", DType::F16, [k, n]);
    let ty = TileType::new;
    let a_l1 = kb.tile("a_l1", ty(MemSpace::Mat, DType::F16, m, k, Layout::NZ));
    let b_l1 = kb.tile("b_l1", ty(MemSpace::Mat, DType::F16, k, n, Layout::NZ));
    let left = ty(MemSpace::Left, DType::F16, m, k, Layout::NZ);
    let left_dyn = matches!(rows, Rows::BothFromParam);
    let a_l0 = kb.tile("a_l0", if left_dyn { left.dynamic() } else { left });
    let b_l0 = kb.tile("b_l0", ty(MemSpace::Right, DType::F16, k, n, Layout::ZN));
    let acc = kb.tile(
        "acc",
        ty(MemSpace::Acc, DType::F32, m, n, Layout::NZ).dynamic(),
    );
    let ub = kb.tile(
        "ub",
        ty(MemSpace::Vec, DType::F32, m, n, dst_layout).dynamic(),
    );
    kb.cube(|c| {
        c.load(a_l1, GmView::nd(a, 0, m, k, k));
        c.load(b_l1, GmView::nd(b, 0, k, n, n));
        c.set_flag(Pipe::Mte2, Pipe::Mte1, 0);
        c.wait_flag(Pipe::Mte2, Pipe::Mte1, 0);
        if left_dyn {
            c.set_validshape(a_l0, mv.clone(), k as i64);
        }
        c.mov(a_l0, a_l1);
        c.mov(b_l0, b_l1);
        c.set_flag(Pipe::Mte1, Pipe::M, 0);
        c.wait_flag(Pipe::Mte1, Pipe::M, 0);
        let acc_rows = match rows {
            Rows::AccFromParam | Rows::BothFromParam => mv.clone(),
            Rows::AccConst(r) => Expr::from(r),
        };
        c.set_validshape(acc, acc_rows.clone(), n as i64);
        c.matmul(acc, a_l0, b_l0).phase(Phase::Final);
        c.set_validshape(ub, acc_rows, n as i64);
        c.mov(ub, acc)
            .mode(AccToVecMode::SingleModeVec0)
            .phase(Phase::Final);
    });
    kb.build()
}

/// Runs the kernel on TileSim with `mv` (memory planned; the kernel carries its own syncs).
fn simulate(k: &Kernel, mv: i64) -> Result<(), SimError> {
    let arch = Arch::ascend950();
    let k = planned(k.clone());
    let mut rng = Rng::new(3);
    let a = GmTensor::from_f32(DType::F16, &[64, 32], &rng.uniform_vec(64 * 32, -1.0, 1.0));
    let b = GmTensor::from_f32(DType::F16, &[32, 32], &rng.uniform_vec(32 * 32, -1.0, 1.0));
    let mut args = vec![Arg::Int(mv), Arg::Tensor(a), Arg::Tensor(b)];
    support::simulate_with(&k, &arch, &mut args, 1)
}

#[test]
fn acc_valid_rows_from_a_scalar_under_a_static_left_break_the_rule() {
    let r = verify(&kernel(Rows::AccFromParam, Layout::ND));
    let d = expect_err(
        &r,
        Rule::AccStride,
        &[
            "TMOV of Acc `acc`",
            "`mv` rows (stride ceil16 of it",
            "64 rows (stride 64)",
            "rows rounded up to 16",
        ],
    );
    assert_eq!(d.rule.code(), "acc-stride");
    assert_eq!(d.subject, "tmov");
}

#[test]
fn constant_acc_rows_pass_only_with_the_matmuls_multiple_of_16() {
    // 49..=64 rows are read at stride 64, as the 64-row matmul wrote them.
    for rows in [64, 49] {
        expect_no(
            &verify(&kernel(Rows::AccConst(rows), Layout::ND)),
            Rule::AccStride,
        );
    }
    for rows in [48, 40, 16] {
        expect_err(
            &verify(&kernel(Rows::AccConst(rows), Layout::ND)),
            Rule::AccStride,
            &[&format!("{rows} rows (stride {})", (rows + 15) / 16 * 16)],
        );
    }
}

#[test]
fn a_matmul_on_the_valid_rows_and_an_nz_destination_pass() {
    // The Left tile's valid rows are the Acc's: both strides are ceil16(mv).
    expect_no(
        &verify(&kernel(Rows::BothFromParam, Layout::ND)),
        Rule::AccStride,
    );
    // Into an NZ tile, TMOV reads by the Acc's static rows (64), as the matmul wrote them.
    expect_no(
        &verify(&kernel(Rows::AccFromParam, Layout::NZ)),
        Rule::AccStride,
    );
}

#[test]
fn a_store_from_acc_reads_by_the_static_rows() {
    // acc[64, 32] written by a Left tile of 32 valid rows (stride 32), stored with TSTORE
    // (stride 64): rejected; with 64 Left rows: accepted.
    let build = |left_rows: i64| {
        let mut kb = KernelBuilder::new("acc_store");
        let a = kb.input("a", DType::F16, [64, 32]);
        let b = kb.input("b", DType::F16, [32, 32]);
        let c = kb.output("c", DType::F32, [64, 32]);
        let ty = TileType::new;
        let a_l1 = kb.tile("a_l1", ty(MemSpace::Mat, DType::F16, 64, 32, Layout::NZ));
        let b_l1 = kb.tile("b_l1", ty(MemSpace::Mat, DType::F16, 32, 32, Layout::NZ));
        let a_l0 = kb.tile(
            "a_l0",
            ty(MemSpace::Left, DType::F16, 64, 32, Layout::NZ).dynamic(),
        );
        let b_l0 = kb.tile("b_l0", ty(MemSpace::Right, DType::F16, 32, 32, Layout::ZN));
        let acc = kb.tile("acc", ty(MemSpace::Acc, DType::F32, 64, 32, Layout::NZ));
        kb.cube(|cb| {
            cb.load(a_l1, GmView::nd(a, 0, 64, 32, 32));
            cb.load(b_l1, GmView::nd(b, 0, 32, 32, 32));
            cb.set_validshape(a_l0, left_rows, 32);
            cb.mov(a_l0, a_l1);
            cb.mov(b_l0, b_l1);
            cb.matmul(acc, a_l0, b_l0).phase(Phase::Final);
            cb.store(GmView::nd(c, 0, 64, 32, 32), acc);
        });
        verify(&kb.build())
    };
    expect_err(
        &build(32),
        Rule::AccStride,
        &[
            "TSTORE of Acc `acc`",
            "64 rows (stride 64)",
            "32 rows (stride 32)",
        ],
    );
    expect_no(&build(64), Rule::AccStride);
}

#[test]
fn tilesim_refuses_a_tmov_at_the_wrong_stride_and_runs_the_right_ones() {
    let k = kernel(Rows::AccFromParam, Layout::ND);
    // ceil16(40) = 48 rows per column block read, 64 written.
    let f = op_fault(simulate(&k, 40));
    assert!(
        matches!(
            &f,
            SimFault::AccStride { what: "TMOV", tile, read_rows: 40, written_rows: 64 } if tile == "acc"
        ),
        "{f}"
    );
    assert!(f.to_string().contains("stride of 48"), "{f}");
    let f = op_fault(simulate(&k, 16));
    assert!(
        matches!(
            f,
            SimFault::AccStride {
                read_rows: 16,
                written_rows: 64,
                ..
            }
        ),
        "{f}"
    );
    // 49..=64 rows: the same stride as the matmul's.
    for mv in [64, 50] {
        simulate(&k, mv).unwrap_or_else(|e| panic!("mv {mv}: {e}"));
    }
    // The matmul on the valid rows: every mv is read as it was written.
    let both = kernel(Rows::BothFromParam, Layout::ND);
    for mv in [1, 16, 40, 64] {
        simulate(&both, mv).unwrap_or_else(|e| panic!("mv {mv}: {e}"));
    }
}
