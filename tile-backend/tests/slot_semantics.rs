//! A buffer slot that is negative at run time means the same buffer on the simulator and in the
//! emitted code: the IR's `%` is Euclidean, so slot -1 of a group of 2 is buffer 1. TileSim
//! resolves a slot with `rem_euclid`; the code generator writes the `rem_euclid` helper for a
//! slot it cannot prove non-negative (C++'s `%` would give -1, an index before the group), and
//! plain `%` where it can.

#[path = "support/mod.rs"]
mod support;

use support::{arch, compiled, simulate};
use tile_backend::codegen::pto::{emit, LaunchSpec};
use tile_backend::dsl::KernelBuilder;
use tile_backend::ir::*;
use tile_backend::sim::{Arg, GmTensor};

const R: u64 = 8;
const C: u64 = 64;

/// `out[i] = in[i]` for `i` in 0..2, each row block loaded into buffer `i + shift` (mod 2) of a
/// two-buffer group and stored from buffer `i + shift + 2` (mod 2), the same buffer only if
/// the slot arithmetic is Euclidean for negative values.
fn kernel(shift: i64) -> Kernel {
    let mut kb = KernelBuilder::new("slots");
    let inp = kb.input("inp", DType::F32, [2 * R, C]);
    let out = kb.output("out", DType::F32, [2 * R, C]);
    let g = kb.tile_group(
        "g",
        TileType::new(MemSpace::Vec, DType::F32, R, C, Layout::ND),
        2,
    );
    kb.vector(|b| {
        b.for_range("i", 0, 2, 1, |b, i| {
            let row = Expr::from(i) * Expr::from(R as i64);
            let off = row * Expr::from(C as i64);
            let load_slot = Expr::from(i) + Expr::from(shift);
            let store_slot = Expr::from(i) + Expr::from(shift + 2);
            b.load(
                g.at(load_slot),
                GmView::nd(inp, off.clone(), R as i64, C as i64, C as i64),
            );
            b.store(
                GmView::nd(out, off, R as i64, C as i64, C as i64),
                g.at(store_slot),
            );
        });
    });
    compiled(&kb.build())
}

#[test]
fn a_negative_runtime_slot_is_the_same_buffer_on_the_simulator_and_in_the_code() {
    let data: Vec<f32> = (0..2 * R * C).map(|i| i as f32 * 0.5 - 7.0).collect();
    for shift in [-1i64, -3, 0, 1] {
        let k = kernel(shift);
        let mut args = vec![
            Arg::Tensor(GmTensor::from_f32(
                DType::F32,
                &[2 * R as usize, C as usize],
                &data,
            )),
            Arg::Tensor(GmTensor::zeros(DType::F32, &[2 * R as usize, C as usize])),
        ];
        simulate(&k, &mut args).unwrap_or_else(|e| panic!("shift {shift}: {e}"));
        let got = args[1].tensor().expect("out").to_f32();
        assert_eq!(
            got, data,
            "shift {shift}: the load and the store met other buffers"
        );
        let pkg = emit(&k, &arch(), &LaunchSpec::new(1)).expect("emits");
        let euclid = pkg.kernel_cpp.contains("rem_euclid(");
        // A slot below zero at run time takes the Euclidean helper; one the generator can bound
        // below by 0 (i counts up from 0, shift >= 0) is written with plain `%`.
        assert_eq!(euclid, shift < 0, "shift {shift}:\n{}", pkg.kernel_cpp);
    }
}
