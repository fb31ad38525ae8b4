//! `worked_matmul`: the single-tile matmul of docs/tile-ir.md, written out stage by stage.

use crate::dsl::KernelBuilder;
use crate::ir::{DType, GmView, Kernel, Layout, MemSpace, Phase, Pipe, TileType};

/// `c[64, 96] (f32) = a[64, 128] (f16) * b[128, 96] (f16)` in one tile.
///
/// GM -> Mat (ND -> NZ loads, MTE2) -> Left / Right (MTE1) -> Acc (matmul, phase Final) -> GM
/// (Fixpipe store), with hand-written MTE2 -> MTE1 and MTE1 -> M flag pairs between the stages
/// (compiling adds the M -> FIX flag before the store). One block; the vector program is empty.
/// The embedded default of the `tileops` command and the example of docs/tile-ir.md.
pub fn worked_matmul() -> Kernel {
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
    kb.cube(|cube| {
        cube.load(a_l1, GmView::nd(a, 0, m, k, k));
        cube.load(b_l1, GmView::nd(b, 0, k, n, n));
        cube.set_flag(Pipe::Mte2, Pipe::Mte1, 0);
        cube.wait_flag(Pipe::Mte2, Pipe::Mte1, 0);
        cube.mov(a_l0, a_l1);
        cube.mov(b_l0, b_l1);
        cube.set_flag(Pipe::Mte1, Pipe::M, 0);
        cube.wait_flag(Pipe::Mte1, Pipe::M, 0);
        cube.matmul(acc, a_l0, b_l0).phase(Phase::Final);
        cube.store(GmView::nd(c, 0, m, n, n), acc);
    });
    kb.build()
}
