//! The worked kernel of docs/tile-ir.md: GM -> Mat -> Left/Right -> Acc -> GM.

use tile_backend::dsl::KernelBuilder;
use tile_backend::ir::*;
use tile_backend::verify::{verify, Rule};

fn matmul_kernel() -> Kernel {
    tile_backend::kernels::worked_matmul()
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
