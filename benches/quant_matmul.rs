//! `quant_matmul` (per-channel W8A8, K = N = 4096) side by side with candle's own int8 path and
//! the dense matmul, one group per M in {1, 16, 256}:
//!
//! - `tilesim`: the tile kernel in the Ascend 950 simulator (activation quantisation included);
//! - `reference`: the Reference backend (candle ops, exact chunked product);
//! - `candle_q8_0`: `candle_core::quantized::QMatMul` with Q8_0 weights (what a candle user has);
//! - `dense_f32`: `x · w^T` in f32 on the original weights (pre-transposed).
//!
//! Throughput is 2 M K N operations per call (GFLOP/s-equivalent). Quote the ratios as the time
//! of the other / TileSim time. Each group first prints the Ascend 950PR estimate of the same
//! call against its roofline (from one profiled TileSim run), so the speed and the device figure
//! come from one run. `cargo bench --bench quant_matmul -- --warm-up-time 1 --measurement-time 3`.

#![allow(clippy::result_large_err)] // OpError carries the simulator's error by value

use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{DType, Device, Module, Tensor};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;
use tileops::ops::{profile, quant_matmul, quantize_per_channel, Backend, QuantMatmulParams};
use tileops::tile_backend::sim::cost::CostReport;

/// A small deterministic PRNG (splitmix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn tensor(&mut self, rows: usize, cols: usize, amp: f32) -> Tensor {
        let v: Vec<f32> = (0..rows * cols)
            .map(|_| ((self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0) * amp)
            .collect();
        match Tensor::from_vec(v, (rows, cols), &Device::Cpu) {
            Ok(t) => t,
            Err(e) => panic!("bench input: {e}"),
        }
    }
}

fn bench(c: &mut Criterion) {
    let (k, n) = (4096usize, 4096usize);
    let mut rng = Rng(1);
    let w = rng.tensor(n, k, 0.05);
    let qw = quantize_per_channel(&w).unwrap_or_else(|e| panic!("quantise: {e}"));
    let q8 = QTensor::quantize(&w, GgmlDType::Q8_0)
        .and_then(QMatMul::from_qtensor)
        .unwrap_or_else(|e| panic!("Q8_0: {e}"));
    let wt = w
        .t()
        .and_then(|t| t.contiguous())
        .unwrap_or_else(|e| panic!("w^T: {e}"));
    let params = QuantMatmulParams::default();
    for m in [1usize, 16, 256] {
        let x = rng.tensor(m, k, 1.0);
        let (r, records) = profile(|| quant_matmul(&x, &qw, &params, Some(Backend::TileSim)));
        r.unwrap_or_else(|e| panic!("profiled TileSim: {e}"));
        let costs: Vec<CostReport> = records.iter().filter_map(|r| r.cost.clone()).collect();
        if let Some(c) = CostReport::sum(&costs) {
            println!(
                "quant_matmul m={m} k={k} n={n}: Ascend 950PR estimate {:.2} us, roofline {:.2} us \
                 ({}-bound), {:.1}% of roofline; pipes busy: {}",
                c.seconds * 1e6,
                c.roofline_seconds * 1e6,
                c.bound,
                c.roofline_fraction() * 100.0,
                c.busy_summary()
            );
        }
        let mut g = c.benchmark_group(format!("quant_matmul/m{m}_k{k}_n{n}"));
        g.sample_size(10);
        g.throughput(Throughput::Elements((2 * m * k * n) as u64));
        for (name, backend) in [
            ("tilesim", Backend::TileSim),
            ("reference", Backend::Reference),
        ] {
            g.bench_function(name, |b| {
                b.iter(|| {
                    quant_matmul(black_box(&x), &qw, &params, Some(backend))
                        .unwrap_or_else(|e| panic!("{name}: {e}"))
                })
            });
        }
        g.bench_function("candle_q8_0", |b| {
            b.iter(|| {
                q8.forward(black_box(&x))
                    .unwrap_or_else(|e| panic!("Q8_0: {e}"))
            })
        });
        g.bench_function("dense_f32", |b| {
            b.iter(|| {
                black_box(&x)
                    .matmul(&wt)
                    .unwrap_or_else(|e| panic!("f32: {e}"))
            })
        });
        g.finish();
    }
    let _ = DType::F32;
}

criterion_group!(benches, bench);
criterion_main!(benches);
