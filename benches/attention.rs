//! The attention ops on the Reference backend (candle) and on the tile kernels in the Ascend
//! 950 simulator (TileSim), side by side in one group per op, f32 and bf16:
//!
//! - `sparse_paged_attention`: one DeepSeek-V3.2 decode step (B 4, H 128, Dqk 576, v_dim 512,
//!   top-k 2048 of 8192 cached tokens per sequence, block 64);
//! - `paged_attention`: dense decode (B 8, H 32, Hkv 8, D 128, context 2048, block 16);
//! - `paged_gather`: the DeepSeek-V3.2 latent cache [82816, 576] bf16, block 128, 512 columns
//!   kept, 2048 and 65536 random top-k rows (throughput: bytes read + written);
//! - `machine_limits`: this machine's f32 FMA peak (register-resident FMA chains on every rayon
//!   thread: AVX-512 and AVX2 + FMA where the CPU has them, each its own function) and memory bandwidth (a 256 MiB copy on every
//!   rayon thread, beyond the last-level cache), so the ops' figures can be quoted as fractions.
//!
//! `cargo bench --bench attention` (a few minutes: 10 samples per function); quote the ratio
//! of the TileSim and Reference medians of one dtype.

use candle_core::{DType, Device, Tensor};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;
use std::time::Duration;
use tileops::ops::{
    paged_attention, paged_gather, sparse_paged_attention, Backend, PagedAttentionParams,
    SparseAttentionParams,
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
        batch_invariant: false,
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

fn bench_gather(c: &mut Criterion) {
    let (tokens, cols, block, size) = (82816, 576, 128, 512);
    let mut rng = Rng::new(22);
    let nb = tokens / block;
    let src = tensor(rng.values(tokens * cols), &[tokens, cols], DType::BF16);
    let table = index_tensor(rng.permutation(nb), &[1, nb]);
    for n in [2048, 65536] {
        let indices = index_tensor(rng.permutation(tokens)[..n].to_vec(), &[1, n]);
        let mut g = configure(c, &format!("paged_gather_bf16_{n}"));
        g.throughput(Throughput::Bytes((2 * n * size * 2) as u64));
        for backend in [Backend::Reference, Backend::TileSim] {
            g.bench_function(backend.name(), |bench| {
                bench.iter(|| {
                    match paged_gather(&src, &indices, &table, block, size, Some(backend)) {
                        Ok(r) => black_box(r),
                        Err(e) => panic!("paged_gather on {backend}: {e}"),
                    }
                })
            });
        }
        g.finish();
    }
}

/// Independent FMA chains per thread in the AVX-512 loop (enough to cover the FMA latency on
/// two ports; 16 sums and two operands fit its 32 registers).
const CHAINS: usize = 16;
/// Independent FMA chains per thread in the AVX2 loop: its 16 registers hold 12 sums and the
/// two operands (16 chains spilled sums to the stack, which measured about half the peak).
const CHAINS_AVX2: usize = 12;
/// FMA steps per chain per call.
const STEPS: usize = 1 << 16;

/// An FMA peak kernel: its name, f32 lanes per FMA, FMA chains per step and function.
type FmaKernel = (&'static str, usize, usize, fn() -> f32);

/// The FMA kernels this CPU can run, widest first: each one's name, f32 lanes per FMA, chains
/// and function. The widest one is the machine's f32 peak; the AVX2 figure is kept beside it since
/// the AVX2 matmul kernel is what CPUs without AVX-512 run. A kernel the CPU lacks is left out.
fn fma_kernels() -> Vec<FmaKernel> {
    let mut kernels: Vec<FmaKernel> = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F (checked above), all fma_avx512 needs.
            kernels.push(("avx512", 16, CHAINS, || unsafe { fma_avx512() }));
        } else {
            println!("machine_limits: no AVX-512F on this CPU, its FMA peak is not measured");
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the CPU has AVX2 and FMA (checked above), all fma_avx2 needs.
            kernels.push(("avx2", 8, CHAINS_AVX2, || unsafe { fma_avx2() }));
        }
    }
    if kernels.is_empty() {
        kernels.push(("scalar", 1, CHAINS, fma_scalar));
    }
    kernels
}

/// `CHAINS` chains of `STEPS` 16-lane FMAs in registers.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn fma_avx512() -> f32 {
    use std::arch::x86_64::*;
    // Opaque inputs: the compiler must not fold the chains at compile time.
    let (a, b) = (
        _mm512_set1_ps(black_box(0.999_9)),
        _mm512_set1_ps(black_box(1e-4)),
    );
    let mut acc = [_mm512_set1_ps(black_box(1.0)); CHAINS];
    for _ in 0..STEPS {
        for x in acc.iter_mut() {
            *x = _mm512_fmadd_ps(*x, a, b);
        }
    }
    let s = acc
        .iter()
        .fold(_mm512_setzero_ps(), |s, x| _mm512_add_ps(s, *x));
    _mm512_reduce_add_ps(black_box(s))
}

/// `CHAINS_AVX2` chains of `STEPS` 8-lane FMAs in registers.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn fma_avx2() -> f32 {
    use std::arch::x86_64::*;
    // Opaque inputs: the compiler must not fold the chains at compile time.
    let (a, b) = (
        _mm256_set1_ps(black_box(0.999_9)),
        _mm256_set1_ps(black_box(1e-4)),
    );
    let mut acc = [_mm256_set1_ps(black_box(1.0)); CHAINS_AVX2];
    for _ in 0..STEPS {
        for x in acc.iter_mut() {
            *x = _mm256_fmadd_ps(*x, a, b);
        }
    }
    let s = acc
        .iter()
        .fold(_mm256_setzero_ps(), |s, x| _mm256_add_ps(s, *x));
    let mut lanes = [0f32; 8];
    _mm256_storeu_ps(lanes.as_mut_ptr(), black_box(s));
    lanes.iter().sum()
}

/// The portable fallback: scalar multiply-adds (the compiler may vectorise them).
fn fma_scalar() -> f32 {
    let (a, b) = (black_box(0.999_9f32), black_box(1e-4f32));
    let mut acc = [black_box(1f32); CHAINS];
    for _ in 0..STEPS {
        for x in acc.iter_mut() {
            *x = *x * a + b;
        }
    }
    black_box(acc).iter().sum()
}

fn bench_machine(c: &mut Criterion) {
    let threads = rayon::current_num_threads();
    let mut g = configure(c, "machine_limits");
    for (name, lanes, chains, kernel) in fma_kernels() {
        // Elements are flops: two per lane of each multiply-add.
        g.throughput(Throughput::Elements(
            (threads * chains * STEPS * lanes * 2) as u64,
        ));
        g.bench_function(format!("f32_fma_peak_{name}_{threads}_threads"), |bench| {
            bench.iter(|| {
                let sums: Vec<f32> = rayon::broadcast(|_| kernel());
                black_box(sums)
            })
        });
    }
    // Each thread copies its own 256 MiB: beyond the last-level cache, so DRAM decides.
    const BYTES: usize = 256 << 20;
    let mut bufs: Vec<(Vec<u8>, Vec<u8>)> = (0..threads)
        .map(|t| (vec![t as u8 + 1; BYTES], vec![0u8; BYTES]))
        .collect();
    g.throughput(Throughput::Bytes((2 * BYTES * threads) as u64));
    g.bench_function(format!("copy_bandwidth_{threads}_threads"), |bench| {
        bench.iter(|| {
            use rayon::prelude::*;
            bufs.par_iter_mut().for_each(|(s, d)| d.copy_from_slice(s));
            black_box(&bufs);
        })
    });
    g.finish();
}

criterion_group!(
    benches,
    bench_machine,
    bench_sparse,
    bench_paged,
    bench_gather
);
criterion_main!(benches);
