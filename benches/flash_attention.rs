//! Dense (prefill) flash attention on the Reference backend (candle) and on the DN-mode tile
//! kernel in the simulator (TileSim), one criterion group per shape of issue 19, with element
//! throughput set to the unmasked score entries:
//!
//! - `flash_attention/s512_causal` and `flash_attention/s2048_causal`: B 1, H 16, D 128, causal;
//! - `flash_attention/mla_prefill_s1024`: B 1, H 16, D 192, Dv 128, causal (DeepSeek MLA prefill);
//! - `flash_attention/demo_prefill_86`: the decode demo's prefill, `flash_attention_varlen` over
//!   86 packed rows (4 prompts of 14, 19, 23 and 30 tokens), H 16, D 128, Dv 64, causal, f32 (the
//!   per-call cost at a small shape).
//!
//! The Reference is the speed bar TileSim is measured against; candle-nn's CPU flash attention
//! is not a dev-dependency (see docs/ops.md). `cargo bench --bench flash_attention` (10
//! samples each).

use candle_core::{DType, Device, Tensor};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;
use std::time::Duration;
use tileops::ops::{flash_attention, flash_attention_varlen, Backend, FlashAttentionParams};

/// `n` values in `[-1, 1)` from the simulator's splitmix64.
fn values(rng: &mut tile_backend::sim::io::Rng, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| (rng.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
        .collect()
}

fn tensor(rng: &mut tile_backend::sim::io::Rng, shape: &[usize], dtype: DType) -> Tensor {
    let n = shape.iter().product();
    match Tensor::from_vec(values(rng, n), shape, &Device::Cpu).and_then(|t| t.to_dtype(dtype)) {
        Ok(t) => t,
        Err(e) => panic!("bench input {shape:?}: {e}"),
    }
}

/// One group: `(name, S, H, D, Dv)`, causal, B 1, bf16.
fn group(c: &mut Criterion, name: &str, (s, h, d, dv): (usize, usize, usize, usize)) {
    let mut rng = tile_backend::sim::io::Rng::new(19);
    let dtype = DType::BF16;
    let q = tensor(&mut rng, &[1, h, s, d], dtype);
    let k = tensor(&mut rng, &[1, h, s, d], dtype);
    let v = tensor(&mut rng, &[1, h, s, dv], dtype);
    let p = FlashAttentionParams::new(1.0 / (d as f32).sqrt(), true);
    let mut g = c.benchmark_group(format!("flash_attention/{name}"));
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    // Unmasked score entries of the causal square: S (S + 1) / 2 per head.
    g.throughput(Throughput::Elements((h * s * (s + 1) / 2) as u64));
    for backend in [Backend::Reference, Backend::TileSim] {
        g.bench_function(backend.to_string(), |b| {
            b.iter(|| match flash_attention(&q, &k, &v, &p, Some(backend)) {
                Ok(r) => black_box(r),
                Err(e) => panic!("{name} on {backend}: {e}"),
            })
        });
    }
    g.finish();
}

/// The decode demo's prefill: one varlen call over four short prompts packed into 86 rows.
fn demo_prefill(c: &mut Criterion) {
    let mut rng = tile_backend::sim::io::Rng::new(21);
    let (h, d, dv, dtype) = (16, 128, 64, DType::F32);
    let lens = [14u32, 19, 23, 30];
    let total: usize = lens.iter().map(|&l| l as usize).sum();
    let q = tensor(&mut rng, &[total, h, d], dtype);
    let k = tensor(&mut rng, &[total, h, d], dtype);
    let v = tensor(&mut rng, &[total, h, dv], dtype);
    let cu: Vec<u32> = std::iter::once(0)
        .chain(lens.iter().scan(0, |a, &l| {
            *a += l;
            Some(*a)
        }))
        .collect();
    let cu = match Tensor::new(cu.as_slice(), &Device::Cpu) {
        Ok(t) => t,
        Err(e) => panic!("cu_seqlens: {e}"),
    };
    let p = FlashAttentionParams::new(1.0 / (d as f32).sqrt(), true);
    let mut g = c.benchmark_group("flash_attention/demo_prefill_86");
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    let unmasked: usize = lens.iter().map(|&l| (l * (l + 1) / 2) as usize).sum();
    g.throughput(Throughput::Elements((h * unmasked) as u64));
    for backend in [Backend::Reference, Backend::TileSim] {
        g.bench_function(backend.to_string(), |b| {
            b.iter(
                || match flash_attention_varlen(&q, &k, &v, &cu, &cu, &p, Some(backend)) {
                    Ok(r) => black_box(r),
                    Err(e) => panic!("demo_prefill_86 on {backend}: {e}"),
                },
            )
        });
    }
    g.finish();
}

fn benches(c: &mut Criterion) {
    demo_prefill(c);
    group(c, "s512_causal", (512, 16, 128, 128));
    group(c, "s2048_causal", (2048, 16, 128, 128));
    group(c, "mla_prefill_s1024", (1024, 16, 192, 128));
}

criterion_group!(flash, benches);
criterion_main!(flash);
