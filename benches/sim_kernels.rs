//! The simulator's speed on attention-like kernels, side by side with candle doing the same math
//! in f32 on the CPU:
//!
//! - `gather_matmul` at a sparse-attention score shape (m = 128 query heads, top-k n = 2048 rows
//!   of 576-column cache rows gathered from a paged cache with block 64, tiles of 64 rows; the
//!   contraction is 256 columns in f16, 128 in f32, the most the kernel's L0 tiles hold) against
//!   candle's `index_select` of the physical rows + matmul;
//! - `attention_tile` at ts = tkv = d = 128, batch 8, against candle's batched
//!   `Q K^T -> softmax -> P V`.
//!
//! Kernels are compiled once; each iteration runs `sim::run` (untraced) on a fresh copy of the
//! arguments from `sim::io::generate`. `cargo bench --bench sim_kernels`; quote ratios of medians
//! from one invocation (the machine is shared, absolute times are noisy).

use candle_core::{DType as CDType, Device, Tensor};
use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use tile_backend::arch::Arch;
use tile_backend::ir::{DType, Kernel};
use tile_backend::kernels::{attention_tile, gather_matmul, AttentionParams, GatherMatmulParams};
use tile_backend::passes;
use tile_backend::sim::{self, io, Arg, SimOptions};

fn compile(kernel: &Kernel, arch: &Arch) -> passes::Compiled {
    match passes::compile(kernel, arch) {
        Ok(k) => k,
        Err(e) => panic!("the bench kernel `{}` must compile: {e}", kernel.name),
    }
}

fn inputs(kernel: &Kernel, seed: u64) -> Vec<Arg<'static>> {
    match io::generate(kernel, seed) {
        Ok(a) => a,
        Err(e) => panic!("inputs of `{}`: {e}", kernel.name),
    }
}

/// A copy of generated arguments (all owned: `Arg` is not `Clone` because of `Arg::InOut`).
fn copy(args: &[Arg<'static>]) -> Vec<Arg<'static>> {
    args.iter()
        .map(|a| match a.try_clone() {
            Some(a) => a,
            None => panic!("generated arguments are owned"),
        })
        .collect()
}

/// Runs the kernel on `args` in place. The outputs are plain stores, so running again on the
/// same arguments recomputes the same results; the inputs are not copied per iteration (as a
/// candle op would not copy its input tensors).
fn simulate(kernel: &Kernel, arch: &Arch, args: &mut [Arg], block_dim: u64) {
    let opts = SimOptions {
        block_dim: block_dim as usize,
    };
    if let Err(e) = sim::run(kernel, arch, args, opts) {
        panic!("simulation of `{}` failed: {e}", kernel.name);
    }
}

/// Argument `i` as an f32 candle tensor of its shape.
fn to_candle(args: &[Arg], i: usize, dev: &Device) -> Tensor {
    let Some(t) = args.get(i).and_then(Arg::tensor) else {
        panic!("argument {i} is not a tensor");
    };
    match Tensor::from_vec(t.to_f32(), t.shape.clone(), dev) {
        Ok(x) => x,
        Err(e) => panic!("candle tensor: {e}"),
    }
}

fn ints(args: &[Arg], i: usize) -> Vec<i64> {
    match args.get(i).and_then(Arg::tensor) {
        Some(t) => t.to_i64(),
        None => panic!("argument {i} is not a tensor"),
    }
}

fn ok<T>(r: candle_core::Result<T>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("candle: {e}"),
    }
}

fn bench_gather_matmul(c: &mut Criterion) {
    let arch = Arch::ascend950();
    let dev = Device::Cpu;
    for dtype in [DType::F16, DType::F32] {
        // The kernel keeps all of Q [m, size] in L0A and two K^T tiles [size, tile_n] in L0B
        // (64 KiB each on Ascend 950), so size 576 does not fit: 256 columns in f16, 128 in
        // f32, with the real query-head count and top-k.
        let size = if dtype == DType::F32 { 128 } else { 256 };
        let p = GatherMatmulParams {
            m: 128,
            size,
            cols: 576,
            tokens: 4096,
            block_size: 64,
            table_len: 64,
            n: 2048,
            tile_n: 64,
            dtype,
        };
        let kernel = compile(&gather_matmul(&p), &arch);
        let args = inputs(&kernel, 7);
        // Arguments: q [m, size], cache [tokens, cols], indices [1, n], block_table [1, nb].
        let q = to_candle(&args, 0, &dev);
        let cache = to_candle(&args, 1, &dev);
        let indices = ints(&args, 2);
        let table = ints(&args, 3);
        let bs = p.block_size as i64;

        let mut group = c.benchmark_group(format!("gather_matmul_128x{size}x2048_{dtype}"));
        group.sample_size(10);
        let mut sim_args = copy(&args);
        group.bench_function("tilesim", |b| {
            b.iter(|| {
                simulate(&kernel, &arch, &mut sim_args, p.block_dim());
                black_box(&sim_args);
            })
        });
        group.bench_function("candle_f32", |b| {
            b.iter(|| {
                // Logical token -> physical cache row on the host, then one index_select and
                // one matmul against the gathered rows' transpose.
                let phys: Vec<u32> = indices
                    .iter()
                    .map(|&t| (table[(t / bs) as usize] * bs + t % bs) as u32)
                    .collect();
                let n = phys.len();
                let idx = ok(Tensor::from_vec(phys, n, &dev));
                let k = ok(ok(cache.index_select(&idx, 0)).narrow(1, 0, size as usize));
                black_box(ok(q.matmul(&ok(k.t()))))
            })
        });
        group.finish();
    }
}

fn bench_attention_tile(c: &mut Criterion) {
    let arch = Arch::ascend950();
    let dev = Device::Cpu;
    let p = AttentionParams {
        ts: 128,
        tkv: 128,
        d: 128,
        dtype: DType::F16,
        batch: 8,
        ..Default::default()
    };
    let kernel = compile(&attention_tile(&p), &arch);
    let args = inputs(&kernel, 5);
    // Arguments: q, k, v [batch, ts|tkv, d], o (output), scale.
    let (q, k, v) = (
        to_candle(&args, 0, &dev),
        to_candle(&args, 1, &dev),
        to_candle(&args, 2, &dev),
    );
    let scale = match args.get(4) {
        Some(Arg::Float(s)) => *s,
        _ => panic!("argument 4 is the scale"),
    };

    let mut group = c.benchmark_group("attention_tile_128x128x128_b8_f16");
    group.sample_size(10);
    let mut sim_args = copy(&args);
    group.bench_function("tilesim", |b| {
        b.iter(|| {
            simulate(&kernel, &arch, &mut sim_args, p.block_dim());
            black_box(&sim_args);
        })
    });
    group.bench_function("candle_f32", |b| {
        b.iter(|| {
            // softmax(scale * Q K^T) V, the softmax written as candle_nn's generic one.
            let s = ok(ok(q.matmul(&ok(k.t()))).affine(scale, 0.0));
            let mx = ok(s.max_keepdim(2));
            let e = ok(ok(s.broadcast_sub(&mx)).exp());
            let sum = ok(e.sum_keepdim(2));
            let pm = ok(e.broadcast_div(&sum));
            black_box(ok(ok(pm.matmul(&v)).to_dtype(CDType::F32)))
        })
    });
    group.finish();
}

criterion_group!(benches, bench_gather_matmul, bench_attention_tile);
criterion_main!(benches);
