//! The worked kernel of docs/tile-ir.md: GM -> Mat -> Left/Right -> Acc -> GM.

use tile_backend::dsl::KernelBuilder;
use tile_backend::ir::*;
use tile_backend::verify::{verify, Rule};

fn matmul_kernel() -> Kernel {
    let (m, k, n) = (64u64, 128u64, 96u64);
    let mut kb = KernelBuilder::new("matmul_f16");
    let a = kb.input("a", DType::F16, [m, k]);
    let b = kb.input("b", DType::F16, [k, n]);
    let c = kb.output("c", DType::F32, [m, n]);
    let a_l1 = kb.tile(
        "a_l1",
        TileType::new(MemSpace::Mat, DType::F16, m, k, Layout::NZ),
    );
    let b_l1 = kb.tile(
        "b_l1",
        TileType::new(MemSpace::Mat, DType::F16, k, n, Layout::NZ),
    );
    let a_l0 = kb.tile(
        "a_l0",
        TileType::new(MemSpace::Left, DType::F16, m, k, Layout::NZ),
    );
    let b_l0 = kb.tile(
        "b_l0",
        TileType::new(MemSpace::Right, DType::F16, k, n, Layout::ZN),
    );
    let acc = kb.tile(
        "acc",
        TileType::new(MemSpace::Acc, DType::F32, m, n, Layout::NZ),
    );
    kb.cube(|c0| {
        c0.load(a_l1, GmView::nd(a, 0, m, k, k));
        c0.load(b_l1, GmView::nd(b, 0, k, n, n));
        c0.set_flag(Pipe::Mte2, Pipe::Mte1, 0);
        c0.wait_flag(Pipe::Mte2, Pipe::Mte1, 0);
        c0.mov(a_l0, a_l1);
        c0.mov(b_l0, b_l1);
        c0.set_flag(Pipe::Mte1, Pipe::M, 0);
        c0.wait_flag(Pipe::Mte1, Pipe::M, 0);
        c0.matmul(acc, a_l0, b_l0).phase(Phase::Final);
        c0.store(GmView::nd(c, 0, m, n, n), acc);
    });
    kb.build()
}

#[test]
fn worked_matmul_verifies_clean() {
    let k = matmul_kernel();
    let report = verify(&k);
    assert!(report.diagnostics.is_empty(), "{report}");
}

#[test]
fn vec_to_left_is_rejected_naming_the_rule() {
    let mut kb = KernelBuilder::new("bad");
    let v = kb.tile(
        "v",
        TileType::new(MemSpace::Vec, DType::F16, 16, 16, Layout::NZ),
    );
    let l = kb.tile(
        "l",
        TileType::new(MemSpace::Left, DType::F16, 16, 16, Layout::NZ),
    );
    kb.cube(|c| {
        c.mov(l, v);
    });
    let report = verify(&kb.build());
    let d = report
        .errors()
        .find(|d| d.rule == Rule::MovePath)
        .expect("move-path error");
    assert_eq!(
        d.message,
        "move Vec -> Left is not a legal path on Ascend 950: Left is reached only from Mat"
    );
}
