//! The simulator's speed against candle on the same shape: a 128x576x2048 fp16 matmul simulated
//! on the tile machine (8 blocks of 128x256 output tiles, K in slices of 64, ping-pong L1/L0)
//! next to candle's f32 matmul of the same shape on the CPU.
//!
//! `cargo bench --bench sim`; quote the ratio of the two medians.

use candle_core::{Device, Tensor};
use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use tile_backend::arch::Arch;
use tile_backend::ir::DType;
use tile_backend::kernels::{matmul, MatmulParams};
use tile_backend::passes;
use tile_backend::sim::{self, io, SimOptions};

fn bench_matmul(c: &mut Criterion) {
    let arch = Arch::ascend950();
    let p = MatmulParams {
        m: 128,
        k: 576,
        n: 2048,
        tile_m: 128,
        tile_n: 256,
        tile_k: 64,
        dtype: DType::F16,
    };
    let kernel = match passes::compile(&matmul(&p), &arch) {
        Ok(k) => k,
        Err(e) => panic!("the bench kernel must compile: {e}"),
    };
    let args = match io::generate(&kernel, 1) {
        Ok(a) => a,
        Err(e) => panic!("inputs: {e}"),
    };
    let opts = SimOptions {
        block_dim: p.block_dim() as usize,
    };

    let mut group = c.benchmark_group("matmul_128x576x2048");
    group.sample_size(20);
    group.bench_function("tilesim_fp16", |b| {
        b.iter(|| {
            // `Arg` is not `Clone` (an `Arg::InOut` is a unique borrow); these are all owned.
            let mut a: Vec<sim::Arg> = args.iter().filter_map(sim::Arg::try_clone).collect();
            if let Err(e) = sim::run(&kernel, &arch, &mut a, opts) {
                panic!("simulation failed: {e}");
            }
            black_box(a);
        })
    });
    let dev = Device::Cpu;
    let (a, bm) = match (
        Tensor::randn(0f32, 1.0, (128, 576), &dev),
        Tensor::randn(0f32, 1.0, (576, 2048), &dev),
    ) {
        (Ok(a), Ok(b)) => (a, b),
        _ => panic!("candle tensors"),
    };
    group.bench_function("candle_f32", |b| b.iter(|| black_box(a.matmul(&bm))));
    group.finish();
}

criterion_group!(benches, bench_matmul);
criterion_main!(benches);
