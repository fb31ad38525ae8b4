//! The IR listing (`Kernel::listing`, what `tileops` prints for its main job) of the example
//! kernels, against listings recorded from the CLI's printer before it moved into the IR.

use tile_backend::arch::Arch;
use tile_backend::ir::{Kernel, Op};
use tile_backend::kernels;

fn listing(kernel: &Kernel) -> String {
    let arch = Arch::for_target(kernel.target);
    let pipe_of = |op: &Op| arch.pipe_of(op, &|r| kernel.space_of(r));
    kernel.listing(&pipe_of).to_string()
}

#[test]
fn example_listings_are_unchanged() {
    let cases = [
        (
            "matmul",
            kernels::worked_matmul(),
            include_str!("golden/listing/matmul.txt"),
        ),
        (
            "tiled-matmul",
            kernels::matmul(&Default::default()),
            include_str!("golden/listing/tiled-matmul.txt"),
        ),
        (
            "attention",
            kernels::attention_tile(&Default::default()),
            include_str!("golden/listing/attention.txt"),
        ),
        (
            "gather-matmul",
            kernels::gather_matmul(&Default::default()),
            include_str!("golden/listing/gather-matmul.txt"),
        ),
    ];
    for (name, kernel, want) in cases {
        assert_eq!(listing(&kernel), want, "{name}");
    }
}

#[test]
fn an_op_displays_with_the_kernels_names() {
    let k = kernels::worked_matmul();
    let first = k.cube.iter().find_map(|s| match s {
        tile_backend::ir::Stmt::Op(op) => Some(op),
        _ => None,
    });
    let op = first.expect("the worked matmul has ops");
    let text = op.display(&k).to_string();
    assert!(text.starts_with("load "), "{text}");
    assert!(!text.contains('?'), "names resolved: {text}");
}
