//! Simulator smoke tests against plain-Rust computations.

use tile_backend::arch::Arch;
use tile_backend::dsl::KernelBuilder;
use tile_backend::ir::*;
use tile_backend::sim::{self, Arg, GmTensor, SimOptions};

/// Memory planning (the real pass; these kernels carry their own syncs).
fn plan(k: Kernel) -> Kernel {
    tile_backend::passes::memory::plan(&k, &Arch::ascend950()).expect("kernel fits")
}

fn lcg(seed: &mut u64) -> f32 {
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
}

fn matmul_kernel(m: u64, k: u64, n: u64, dt: DType) -> Kernel {
    let mut kb = KernelBuilder::new("mm");
    let a = kb.input("a", dt, [m, k]);
    let b = kb.input("b", dt, [k, n]);
    let c = kb.output("c", DType::F32, [m, n]);
    let a1 = kb.tile("a1", TileType::new(MemSpace::Mat, dt, m, k, Layout::NZ));
    let b1 = kb.tile("b1", TileType::new(MemSpace::Mat, dt, k, n, Layout::NZ));
    let a0 = kb.tile("a0", TileType::new(MemSpace::Left, dt, m, k, Layout::NZ));
    let b0 = kb.tile("b0", TileType::new(MemSpace::Right, dt, k, n, Layout::ZN));
    let acc = kb.tile(
        "acc",
        TileType::new(MemSpace::Acc, DType::F32, m, n, Layout::NZ),
    );
    kb.cube(|q| {
        q.load(a1, GmView::nd(a, 0, m, k, k));
        q.load(b1, GmView::nd(b, 0, k, n, n));
        q.mov(a0, a1);
        q.mov(b0, b1);
        q.matmul(acc, a0, b0);
        q.store(GmView::nd(c, 0, m, n, n), acc);
    });
    plan(kb.build())
}

#[test]
fn matmul_f16_matches_plain_rust() {
    let (m, k, n) = (48u64, 64u64, 80u64);
    let kern = matmul_kernel(m, k, n, DType::F16);
    assert!(
        tile_backend::verify::verify(&kern).is_ok(),
        "{}",
        tile_backend::verify::verify(&kern)
    );
    let mut s = 7u64;
    let av: Vec<f32> = (0..m * k).map(|_| lcg(&mut s)).collect();
    let bv: Vec<f32> = (0..k * n).map(|_| lcg(&mut s)).collect();
    let at = GmTensor::from_f32(DType::F16, &[m as usize, k as usize], &av);
    let bt = GmTensor::from_f32(DType::F16, &[k as usize, n as usize], &bv);
    let (ar, br) = (at.to_f32(), bt.to_f32());
    let mut args = vec![
        Arg::Tensor(at),
        Arg::Tensor(bt),
        Arg::Tensor(GmTensor::zeros(DType::F32, &[m as usize, n as usize])),
    ];
    sim::run(
        &kern,
        &Arch::ascend950(),
        &mut args,
        SimOptions { block_dim: 1 },
    )
    .unwrap();
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
