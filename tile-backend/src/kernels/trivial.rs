//! The smallest useful kernel: what a launch costs when its kernel does almost nothing.

use crate::dsl::KernelBuilder;
use crate::ir::{BinaryOp, DType, Expr, GmView, Kernel, Layout, MemSpace, ScalarArg, TileType};

/// `y[b] = x[b] + 1` for `x, y: [rows, 64]` f32 (`rows` a runtime scalar), one row per block,
/// launched on `rows` blocks: on AIV 0, inside an `if` and a one-trip `for` (so the control
/// code runs too), a load, a vector add of a scalar and a store. The launch-cost bench
/// (`benches/launch.rs`) and the allocation test (`tests/sim_allocations.rs`) run it.
pub fn add_one() -> Kernel {
    let mut kb = KernelBuilder::new("add_one");
    let rows = Expr::Param(kb.scalar("rows", DType::I64));
    let x = kb.input("x", DType::F32, [rows.clone(), Expr::from(64)]);
    let y = kb.output("y", DType::F32, [rows, Expr::from(64)]);
    let t = kb.tile(
        "t",
        TileType::new(MemSpace::Vec, DType::F32, 1, 64, Layout::ND),
    );
    kb.vector(|v| {
        v.if_(Expr::SubBlockIdx.eq_(0), |v| {
            v.for_range("i", 0, 1, 1, |v, _| {
                let at = Expr::BlockIdx * 64;
                v.load(t, GmView::nd(x, at.clone(), 1, 64, 64));
                v.binary_scalar(BinaryOp::Add, t, t, ScalarArg::Const(1.0));
                v.store(GmView::nd(y, at, 1, 64, 64), t);
            });
        });
    });
    kb.build()
}

#[cfg(test)]
mod tests {
    use crate::arch::Arch;
    use crate::passes;

    /// It verifies clean and compiles.
    #[test]
    fn add_one_compiles() {
        let arch = Arch::ascend950();
        assert!(passes::compile(&super::add_one(), &arch).is_ok());
    }
}
