//! The fixed cost of a launch: what a kernel that does almost nothing costs on TileSim.
//!
//! - `launch_fixed_cost`: one block of `kernels::add_one` (a 64-value row loaded, 1 added,
//!   stored; through one `if` and one `for`), by `sim::run` (the kernel lowered on every call)
//!   and by `sim::run_program` (lowered once, as the ops' cache runs it). #35's target: at most
//!   5 us at `sim::run`.
//! - `reshape_and_cache_rows_{1,4}`: the op on 1 row and on the demo's decode batch (4 rows) of
//!   the demo's latent cache width (80 f32: `kv_lora_rank` 64 + `qk_rope_head_dim` 16; 128
//!   blocks of 16 slots), Reference and TileSim side by side. #35's targets: TileSim at most the
//!   Reference's time, and at most 15 us on 1 row.
//!
//! `cargo bench --workspace --bench launch` (under a minute); quote Reference time / TileSim
//! time.

use candle_core::{DType, Device, Tensor};
use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use tile_backend::arch::Arch;
use tile_backend::ir;
use tile_backend::sim::{self, Arg, GmInOut, GmInput, Program, SimOptions};
use tile_backend::{kernels, passes};
use tileops::ops::{reshape_and_cache, Backend};

fn launch_fixed_cost(c: &mut Criterion) {
    let arch = Arch::ascend950();
    let kernel = match passes::compile(&kernels::add_one(), &arch) {
        Ok(k) => k,
        Err(e) => panic!("the bench kernel must compile: {e}"),
    };
    let program = match Program::lower(&kernel, &arch) {
        Ok(p) => p,
        Err(e) => panic!("the bench kernel must lower: {e}"),
    };
    let x: Vec<u8> = (0..64).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let mut y = vec![0u8; 64 * 4];
    fn args<'a>(x: &'a [u8], y: &'a mut [u8]) -> [Arg<'a>; 3] {
        [
            Arg::Int(1),
            Arg::Input(GmInput {
                dtype: ir::DType::F32,
                shape: vec![1, 64],
                data: x,
            }),
            Arg::InOut(GmInOut {
                dtype: ir::DType::F32,
                shape: vec![1, 64],
                data: y,
            }),
        ]
    }
    let one = SimOptions { block_dim: 1 };
    let mut g = c.benchmark_group("launch_fixed_cost");
    g.bench_function("sim_run", |b| {
        b.iter(|| black_box(sim::run(&kernel, &arch, &mut args(&x, &mut y), one).is_ok()))
    });
    g.bench_function("sim_run_program", |b| {
        b.iter(|| black_box(sim::run_program(&program, &mut args(&x, &mut y), one).is_ok()))
    });
    g.finish();
}

fn reshape_and_cache_rows(c: &mut Criterion) {
    let dev = Device::Cpu;
    let (blocks, block_size, width) = (128usize, 16usize, 80usize);
    for n in [1usize, 4] {
        let made = (|| -> candle_core::Result<(Tensor, Tensor, Tensor)> {
            let rows = Tensor::randn(0f32, 1.0, (n, width), &dev)?;
            let cache = Tensor::zeros((blocks, block_size, width), DType::F32, &dev)?;
            // The decode batch's slots: one row per sequence, in different blocks.
            let slots: Vec<i64> = (0..n as i64).map(|i| i * 37 + 5).collect();
            let slots = Tensor::new(slots.as_slice(), &dev)?;
            Ok((rows, cache, slots))
        })();
        let (rows, cache, slots) = match made {
            Ok(t) => t,
            Err(e) => panic!("bench tensors: {e}"),
        };
        let mut g = c.benchmark_group(format!("reshape_and_cache_rows_{n}"));
        for backend in [Backend::Reference, Backend::TileSim] {
            g.bench_function(backend.name(), |b| {
                b.iter(|| {
                    black_box(reshape_and_cache(&rows, &cache, &slots, Some(backend)).is_ok())
                })
            });
        }
        g.finish();
    }
}

criterion_group!(benches, launch_fixed_cost, reshape_and_cache_rows);
criterion_main!(benches);
