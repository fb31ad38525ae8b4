//! The attention ops on the Reference backend (candle) and on the tile kernels in the Ascend
//! 950 simulator (TileSim), side by side in one group per op, f32 and bf16:
//!
//! - `sparse_paged_attention`: one DeepSeek-V3.2 decode step (B 4, H 128, Dqk 576, v_dim 512,
//!   top-k 2048 of 8192 cached tokens per sequence, block 64);
//! - `paged_attention`: dense decode (B 8, H 32, Hkv 8, D 128, context 2048, block 16).
//!
//! `cargo bench --bench attention` (a few minutes: 10 samples per function); quote the ratio
//! of the TileSim and Reference medians of one dtype.

use candle_core::{DType, Device, Tensor};
use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use std::time::Duration;
use tileops::ops::{
    paged_attention, sparse_paged_attention, Backend, PagedAttentionParams, SparseAttentionParams,
};

/// The simulator's splitmix64 (`tile_backend::sim::io::Rng`) with this bench's draws.
struct Rng(tile_backend::sim::io::Rng);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(tile_backend::sim::io::Rng::new(seed))
    }
    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    fn values(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.unit()).collect()
    }
    /// `0..n` in random order.
    fn permutation(&mut self, n: usize) -> Vec<i32> {
        let mut v: Vec<i32> = (0..n as i32).collect();
        for i in (1..n).rev() {
            v.swap(i, self.below(i + 1));
        }
        v
    }
}

fn tensor(v: Vec<f32>, shape: &[usize], dtype: DType) -> Tensor {
    match Tensor::from_vec(v, shape, &Device::Cpu).and_then(|t| t.to_dtype(dtype)) {
        Ok(t) => t,
        Err(e) => panic!("bench input {shape:?}: {e}"),
    }
}

fn index_tensor(v: Vec<i32>, shape: &[usize]) -> Tensor {
    match Tensor::from_vec(v, shape, &Device::Cpu) {
        Ok(t) => t,
        Err(e) => panic!("bench index input {shape:?}: {e}"),
    }
}

fn configure<'a>(
    c: &'a mut Criterion,
    name: &str,
) -> criterion::BenchmarkGroup<'a, criterion::measurement::WallTime> {
    let mut g = c.benchmark_group(name);
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    g
}

fn bench_sparse(c: &mut Criterion) {
    let (b, h, dqk, v_dim, topk, block, seq) = (4, 128, 576, 512, 2048, 64, 8192);
    let mut rng = Rng::new(6);
    let per_seq = seq / block;
    let num_blocks = b * per_seq;
    let table = index_tensor(rng.permutation(num_blocks), &[b, per_seq]);
    let mut idx = Vec::with_capacity(b * topk);
    for _ in 0..b {
        idx.extend_from_slice(&rng.permutation(seq)[..topk]);
    }
    let indices = index_tensor(idx, &[b, topk]);
    let q32 = rng.values(b * h * dqk);
    let kv32 = rng.values(num_blocks * block * dqk);
    let params = SparseAttentionParams {
        v_dim,
        scale: 0.13523,
        topk_length: None,
        sink: None,
    };
    let mut g = configure(c, "sparse_paged_attention_b4_h128_topk2048");
    for dtype in [DType::F32, DType::BF16] {
        let q = tensor(q32.clone(), &[b, h, dqk], dtype);
        let kv = tensor(kv32.clone(), &[num_blocks, block, dqk], dtype);
        for backend in [Backend::Reference, Backend::TileSim] {
            let id = format!("{}_{}", backend.name(), dtype.as_str());
            g.bench_function(id, |bench| {
                bench.iter(|| {
                    match sparse_paged_attention(&q, &kv, &indices, &table, &params, Some(backend))
                    {
                        Ok(r) => black_box(r),
                        Err(e) => panic!("sparse_paged_attention on {backend}: {e}"),
                    }
                })
            });
        }
    }
    g.finish();
}

fn bench_paged(c: &mut Criterion) {
    let (b, h, hkv, d, ctx, block) = (8, 32, 8, 128, 2048, 16);
    let mut rng = Rng::new(7);
    let per_seq = ctx / block;
    let num_blocks = b * per_seq;
    let table = index_tensor(rng.permutation(num_blocks), &[b, per_seq]);
    let lens = index_tensor(vec![ctx as i32; b], &[b]);
    let q32 = rng.values(b * h * d);
    let k32 = rng.values(num_blocks * block * hkv * d);
    let v32 = rng.values(num_blocks * block * hkv * d);
    let params = PagedAttentionParams {
        scale: 1.0 / (d as f32).sqrt(),
    };
    let mut g = configure(c, "paged_attention_b8_h32_hkv8_ctx2048");
    for dtype in [DType::F32, DType::BF16] {
        let q = tensor(q32.clone(), &[b, h, d], dtype);
        let kc = tensor(k32.clone(), &[num_blocks, block, hkv, d], dtype);
        let vc = tensor(v32.clone(), &[num_blocks, block, hkv, d], dtype);
        for backend in [Backend::Reference, Backend::TileSim] {
            let id = format!("{}_{}", backend.name(), dtype.as_str());
            g.bench_function(id, |bench| {
                bench.iter(|| {
                    match paged_attention(&q, &kc, &vc, &table, &lens, &params, Some(backend)) {
                        Ok(r) => black_box(r),
                        Err(e) => panic!("paged_attention on {backend}: {e}"),
                    }
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench_sparse, bench_paged);
criterion_main!(benches);
