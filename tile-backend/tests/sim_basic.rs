//! Simulator smoke tests against plain-Rust computations.

#[path = "support/mod.rs"]
mod support;

use support::{planned, simulate_on};
use tile_backend::ir::*;
use tile_backend::sim::io::Rng;
use tile_backend::sim::{self, Arg, GmTensor};

#[test]
fn matmul_f16_matches_plain_rust() {
    // The straight matmul fixture: c[64, 96] = a[64, 128] b[128, 96], f16 operands.
    let (m, k, n) = (64u64, 128u64, 96u64);
    let kern = planned(tile_backend::kernels::worked_matmul());
    assert!(
        tile_backend::verify::verify(&kern).is_ok(),
        "{}",
        tile_backend::verify::verify(&kern)
    );
    let mut rng = Rng::new(7);
    let av = rng.uniform_vec((m * k) as usize, -1.0, 1.0);
    let bv = rng.uniform_vec((k * n) as usize, -1.0, 1.0);
    let at = GmTensor::from_f32(DType::F16, &[m as usize, k as usize], &av);
    let bt = GmTensor::from_f32(DType::F16, &[k as usize, n as usize], &bv);
    let (ar, br) = (at.to_f32(), bt.to_f32());
    let mut args = vec![
        Arg::Tensor(at),
        Arg::Tensor(bt),
        Arg::Tensor(GmTensor::zeros(DType::F32, &[m as usize, n as usize])),
    ];
    simulate_on(&kern, &mut args, 1).unwrap();
    let out = args[2].tensor().unwrap().to_f32();
    for i in 0..m as usize {
        for j in 0..n as usize {
            let want: f32 = (0..k as usize)
                .map(|p| ar[i * k as usize + p] * br[p * n as usize + j])
                .sum();
            let got = out[i * n as usize + j];
            assert!((want - got).abs() < 1e-4, "({i},{j}) want {want} got {got}");
        }
    }
}

#[test]
fn a_wait_nobody_releases_is_a_hang_naming_the_flag() {
    // Both AIVs wait on cross-core flag 3, which the (empty) cube program never sets.
    let kern = Kernel {
        name: "lone_wait".into(),
        target: Target::Ascend950,
        params: vec![],
        tiles: vec![],
        vars: vec![],
        channels: vec![],
        cube: vec![],
        vector: vec![Stmt::Op(Op::Sync(SyncOp::WaitCrossFlag {
            pipe: Pipe::V,
            id: 3,
        }))],
    };
    for block_dim in [1, 3] {
        match support::simulate_on(&kern, &mut [], block_dim) {
            Err(sim::SimError::Hang { block: 0, waits }) => assert_eq!(
                waits,
                "AIV0 waits for cross-core flag 3; AIV1 waits for cross-core flag 3"
            ),
            other => panic!("block_dim {block_dim}: expected a hang of block 0, got {other:?}"),
        }
    }
}

#[test]
fn a_kernel_relaunched_with_other_scalars_resolves_its_tiles_afresh() {
    // Two rotating UB buffers with a runtime valid width `n` (per-launch tile placement and
    // per-core valid shapes): row i of x goes through buffer i to row i of y, n columns of it.
    let mut kb = tile_backend::dsl::KernelBuilder::new("relaunch");
    let n = Expr::Param(kb.scalar("n", DType::I64));
    let x = kb.input("x", DType::F32, [Expr::from(2), Expr::from(64)]);
    let y = kb.output("y", DType::F32, [Expr::from(2), Expr::from(64)]);
    let ty = TileType::new(MemSpace::Vec, DType::F32, 1, 64, Layout::ND).dynamic();
    let t = kb.tile_group("t", ty, 2);
    kb.vector(|v| {
        v.if_(Expr::SubBlockIdx.eq_(0), |b| {
            b.for_range("i", 0, 2, 1, |lb, i| {
                let i = Expr::from(i);
                lb.set_validshape(t.at(i.clone()), 1, n.clone());
                let off = i.clone() * 64;
                lb.load(
                    t.at(i.clone()),
                    GmView::nd(x, off.clone(), 1, n.clone(), 64),
                );
                lb.store(GmView::nd(y, off, 1, n.clone(), 64), t.at(i));
            });
        });
    });
    let kern = planned(kb.build());
    let xv: Vec<f32> = (0..128).map(|v| v as f32).collect();
    for width in [64usize, 16, 40] {
        let mut args = vec![
            Arg::Int(width as i64),
            Arg::Tensor(GmTensor::from_f32(DType::F32, &[2, 64], &xv)),
            Arg::Tensor(GmTensor::zeros(DType::F32, &[2, 64])),
        ];
        simulate_on(&kern, &mut args, 1).expect("runs");
        let out = args[2].tensor().expect("a tensor").to_f32();
        let want: Vec<f32> = (0..128)
            .map(|e| if e % 64 < width { e as f32 } else { 0.0 })
            .collect();
        assert_eq!(out, want, "width {width}");
    }
}
