//! `lightning_indexer` side by side on the Reference backend and TileSim, one group per shape:
//!
//! - `demo`: the demo model's indexer (`models/checkpoints/tiny`: H_idx 4, D 32, top-k 32; blocks
//!   of 16 as `examples/deepseek_decode.rs`), B 4 rows of context 256;
//! - `v32_decode`: DeepSeek-V3.2's decode shape (B 4, H_idx 64, D 128, context 8192, top-k
//!   2048, blocks of 64); `v32_decode_128k` (context 131072) prints its estimate only.
//!
//! These with bf16 q and a bf16 key cache; `v32_decode_fp8` (and `v32_decode_fp8_128k`,
//! estimate only) as DeepSeek-V3.2 runs it: FP8 e4m3 keys with ue8m0 scales and FP8 q
//! (`quantize_index_q`, its scales folded into the weights), e4m3 x e4m3 on the cube. Functions:
//! `tilesim` (the two tile kernels in the simulator), `reference` (the Reference backend: candle
//! gather, matmul, ReLU, head sum, partial selection) and `candle_matmul` (candle's matmul of the
//! same q against pre-dequantised f32 keys of one row's context, then ReLU and the head sum: the
//! score half alone, no selection). Throughput: the score FLOPs, `2 B H D L` per call. Each
//! group first prints the Ascend 950PR estimate of the call (one profiled TileSim run, the two
//! launches summed) per pipe, and at half and double the sort instructions' costs and the DMA
//! latency (assumptions). Quote ratios as Reference time / TileSim time.
//! `cargo bench --bench lightning_indexer -- --warm-up-time 1 --measurement-time 5`.

#![allow(clippy::result_large_err)] // OpError carries the simulator's error by value

use candle_core::{DType, Device, Tensor};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;
use tileops::ops::{
    lightning_indexer, profile, quantize_index_q, Backend, Fp8Conversion, IndexKeyCache,
    LightningIndexerParams, ScaleFormat,
};
use tileops::tile_backend::sim::cost::CostReport;
use tileops::tile_backend::sim::io::Rng;

/// Deterministic bench data from the simulator's generator.
fn tensor(rng: &mut Rng, dims: &[usize], dtype: DType) -> Tensor {
    let v = rng.uniform_vec(dims.iter().product(), -1.0, 1.0);
    Tensor::from_vec(v, dims, &Device::Cpu)
        .and_then(|t| t.to_dtype(dtype))
        .unwrap_or_else(|e| panic!("bench input: {e}"))
}

/// One benchmarked shape (`timed`: also a criterion group; otherwise the estimate only).
struct Shape {
    timed: bool,
    name: &'static str,
    b: usize,
    h: usize,
    d: usize,
    ctx: usize,
    topk: usize,
    bs: usize,
    /// FP8 keys (ue8m0 scales) and FP8 q, as V3.2; otherwise bf16 q and keys.
    fp8: bool,
}

fn bench(c: &mut Criterion) {
    let shapes = [
        Shape {
            timed: true,
            name: "demo",
            b: 4,
            h: 4,
            d: 32,
            ctx: 256,
            topk: 32,
            bs: 16,
            fp8: false,
        },
        Shape {
            timed: true,
            name: "v32_decode",
            b: 4,
            h: 64,
            d: 128,
            ctx: 8192,
            topk: 2048,
            bs: 64,
            fp8: false,
        },
        Shape {
            timed: true,
            name: "v32_decode_fp8",
            b: 4,
            h: 64,
            d: 128,
            ctx: 8192,
            topk: 2048,
            bs: 64,
            fp8: true,
        },
        Shape {
            timed: false,
            name: "v32_decode_128k",
            b: 4,
            h: 64,
            d: 128,
            ctx: 131072,
            topk: 2048,
            bs: 64,
            fp8: false,
        },
        Shape {
            timed: false,
            name: "v32_decode_fp8_128k",
            b: 4,
            h: 64,
            d: 128,
            ctx: 131072,
            topk: 2048,
            bs: 64,
            fp8: true,
        },
    ];
    let mut rng = Rng::new(36);
    for s in &shapes {
        let blocks = s.ctx / s.bs;
        let nb = s.b * blocks;
        let keys = tensor(&mut rng, &[nb, s.bs, s.d], DType::BF16);
        let q = tensor(&mut rng, &[s.b, s.h, s.d], DType::BF16);
        let w = tensor(&mut rng, &[s.b, s.h], DType::F32);
        let (cache, q, w) = if s.fp8 {
            // DeepSeek's FP8 path: keys and q quantised per 128 values (ue8m0 scales), q's
            // scales folded into the head weights.
            let quant = |x: &Tensor, fmt| {
                quantize_index_q(x, fmt, Fp8Conversion::default())
                    .unwrap_or_else(|e| panic!("quantise: {e}"))
            };
            let (codes, scales) = quant(&keys, ScaleFormat::Ue8m0);
            let cache = IndexKeyCache::from_parts(codes, Some(scales))
                .unwrap_or_else(|e| panic!("cache: {e}"));
            // q's scales as f32 values (the fold multiplies them into the weights either way).
            let (q8, qs) = quant(&q, ScaleFormat::F32);
            let w = qs
                .to_dtype(DType::F32)
                .and_then(|qs| qs.squeeze(2))
                .and_then(|qs| w.mul(&qs))
                .unwrap_or_else(|e| panic!("weights: {e}"));
            (cache, q8, w)
        } else {
            let cache =
                IndexKeyCache::from_parts(keys, None).unwrap_or_else(|e| panic!("cache: {e}"));
            (cache, q, w)
        };
        // Each row its own blocks, shuffled by a stride.
        let table: Vec<i32> = (0..nb).map(|i| ((i * 7919) % nb) as i32).collect();
        let table = Tensor::from_vec(table, (s.b, blocks), &Device::Cpu)
            .unwrap_or_else(|e| panic!("table: {e}"));
        let lens = Tensor::from_vec(vec![s.ctx as i32; s.b], s.b, &Device::Cpu)
            .unwrap_or_else(|e| panic!("lens: {e}"));
        let params = LightningIndexerParams::new(s.topk);
        let run = |backend| {
            lightning_indexer(&q, &w, &cache, &table, &lens, &params, Some(backend))
                .unwrap_or_else(|e| panic!("{backend:?}: {e}"))
        };
        let (_, records) = profile(|| run(Backend::TileSim));
        let costs: Vec<CostReport> = records.iter().filter_map(|r| r.cost.clone()).collect();
        for c in &costs {
            println!(
                "lightning_indexer {} ({:?}): {} on {} blocks: {:.2} us; pipes busy: {}",
                s.name,
                c.sku,
                c.kernel,
                c.block_dim,
                c.seconds * 1e6,
                c.busy_summary()
            );
        }
        if let Some(c) = CostReport::sum(&costs) {
            println!(
                "lightning_indexer {} B {} H {} D {} ctx {} topk {}: Ascend 950PR estimate {:.2} us, \
                 roofline {:.2} us ({}-bound), {:.1}% of roofline",
                s.name,
                s.b,
                s.h,
                s.d,
                s.ctx,
                s.topk,
                c.seconds * 1e6,
                c.roofline_seconds * 1e6,
                c.bound,
                c.roofline_fraction() * 100.0,
            );
            if let Some([half, double]) = c.sort_cost_sensitivity {
                println!(
                    "  sort costs x0.5 {:.2} us, x2 {:.2} us (A2/A3-derived assumptions)",
                    half * 1e6,
                    double * 1e6
                );
            }
            if let Some([half, double]) = c.dma_latency_sensitivity {
                println!(
                    "  DMA latency x0.5 {:.2} us, x2 {:.2} us (an assumption)",
                    half * 1e6,
                    double * 1e6
                );
            }
        }
        if !s.timed {
            continue;
        }
        // candle's matmul on pre-dequantised keys (f32), one row's context per batch row.
        let kf = cache
            .dequantize()
            .and_then(|k| Ok(k.reshape((nb * s.bs, s.d))?))
            .unwrap_or_else(|e| panic!("dequantize: {e}"));
        let kt = kf
            .narrow(0, 0, s.ctx)
            .and_then(|k| k.t())
            .and_then(|k| k.contiguous())
            .unwrap_or_else(|e| panic!("k^T: {e}"));
        let qf = q
            .to_dtype(DType::F32)
            .and_then(|q| q.reshape((s.b * s.h, s.d)))
            .unwrap_or_else(|e| panic!("q: {e}"));
        let wf = w.unsqueeze(1).unwrap_or_else(|e| panic!("w: {e}"));
        let mut g = c.benchmark_group(format!(
            "lightning_indexer/{}_b{}_h{}_d{}_ctx{}_topk{}",
            s.name, s.b, s.h, s.d, s.ctx, s.topk
        ));
        g.sample_size(10);
        g.throughput(Throughput::Elements((2 * s.b * s.h * s.d * s.ctx) as u64));
        for (name, backend) in [
            ("tilesim", Backend::TileSim),
            ("reference", Backend::Reference),
        ] {
            g.bench_function(name, |bch| bch.iter(|| black_box(run(backend))));
        }
        g.bench_function("candle_matmul", |bch| {
            bch.iter(|| {
                qf.matmul(&kt)
                    .and_then(|s2| s2.reshape((s.b, s.h, s.ctx)))
                    .and_then(|s2| s2.relu())
                    .and_then(|r| wf.matmul(&r))
                    .unwrap_or_else(|e| panic!("candle: {e}"))
            })
        });
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
