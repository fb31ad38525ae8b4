//! One dense paged-attention decode step (vLLM style, GQA) on the Reference backend (candle)
//! and on the tile kernels in the Ascend 950 simulator (TileSim).
//!
//! B = 8 sequences of 2048 cached tokens, H = 32 query heads over Hkv = 8 KV heads, D = 128,
//! block 16, scale D^-0.5, bf16 by default. Inputs are deterministic (seeded PRNG): paged K and
//! V caches with shuffled block tables. The report gives the largest difference between the
//! two backends against the documented tolerance, the CPU wall time of each (median of a few
//! runs after a warm-up, the backends alternating so both see the same machine load), and the
//! simulator's Ascend 950 estimate per launch and in total: device time, per-pipe utilisation
//! and the fraction of the roofline reached.
//!
//! ```text
//! cargo run --release --example paged_attention [-- --dtype f32|f16|bf16 --runs N --context T]
//! ```

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor};
use tileops::ops::{paged_attention, profile, Backend, PagedAttentionParams};
use tileops::tile_backend::sim::io::Rng;

mod common;
use common::{parse_flags, print_cost, print_launches, timed_pair, Flags};

const BATCH: usize = 8;
const HEADS: usize = 32;
const KV_HEADS: usize = 8;
const D: usize = 128;
const BLOCK: usize = 16;

/// Command-line settings.
struct Settings {
    dtype: DType,
    runs: usize,
    context: usize,
    seed: u64,
}

fn settings() -> Result<Settings> {
    let defaults = Flags {
        dtype: DType::BF16,
        runs: 3,
        seed: 0x5eed,
    };
    let (f, context) = parse_flags("paged_attention", defaults, ("--context", 2048))?;
    if context == 0 || context > 1 << 20 {
        bail!("--context must be in 1..=1048576");
    }
    Ok(Settings {
        dtype: f.dtype,
        runs: f.runs,
        context,
        seed: f.seed,
    })
}

/// The decode step's inputs.
struct Inputs {
    q: Tensor,
    k: Tensor,
    v: Tensor,
    table: Tensor,
    lens: Tensor,
}

fn inputs(s: &Settings) -> Result<Inputs> {
    let dev = Device::Cpu;
    let mut rng = Rng::new(s.seed);
    let per_seq = s.context.div_ceil(BLOCK);
    let num_blocks = BATCH * per_seq;
    // Every sequence owns `per_seq` blocks scattered over the cache.
    let mut pool: Vec<i32> = (0..num_blocks as i32).collect();
    for i in (1..pool.len()).rev() {
        pool.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let mut data = |n: usize| rng.uniform_vec(n, -1.0, 1.0);
    let q = data(BATCH * HEADS * D);
    let cache = num_blocks * BLOCK * KV_HEADS * D;
    let (k, v) = (data(cache), data(cache));
    let shape = (num_blocks, BLOCK, KV_HEADS, D);
    Ok(Inputs {
        q: Tensor::from_vec(q, (BATCH, HEADS, D), &dev)?.to_dtype(s.dtype)?,
        k: Tensor::from_vec(k, shape, &dev)?.to_dtype(s.dtype)?,
        v: Tensor::from_vec(v, shape, &dev)?.to_dtype(s.dtype)?,
        table: Tensor::from_vec(pool, (BATCH, per_seq), &dev)?,
        lens: Tensor::from_vec(vec![s.context as i32; BATCH], BATCH, &dev)?,
    })
}

fn step(x: &Inputs, backend: Backend) -> Result<Tensor> {
    let params = PagedAttentionParams {
        scale: (D as f32).powf(-0.5),
    };
    Ok(paged_attention(
        &x.q,
        &x.k,
        &x.v,
        &x.table,
        &x.lens,
        &params,
        Some(backend),
    )?)
}

/// The documented tolerance of `out` (docs/ops.md): `(atol, rtol)` per dtype.
fn tolerance(dtype: DType) -> (f32, f32) {
    match dtype {
        DType::F32 => (1e-5, 1e-4),
        DType::F16 => (1e-3, 1.0 / 512.0),
        _ => (1e-3, 1.0 / 128.0),
    }
}

fn main() -> Result<()> {
    let s = settings()?;
    println!(
        "dense paged attention decode: B={BATCH} H={HEADS} Hkv={KV_HEADS} D={D} block={BLOCK} \
         context={} dtype={:?}",
        s.context, s.dtype
    );
    let x = inputs(&s)?;
    let timed = timed_pair(s.runs, |backend| step(&x, backend))?;
    let (profiled, records) = profile(|| step(&x, Backend::TileSim));
    profiled.context("profiled TileSim run")?;

    // |sim - ref| <= atol + rtol * |ref| element-wise.
    let (atol, rtol) = tolerance(s.dtype);
    let r = timed
        .reference
        .to_dtype(DType::F32)?
        .flatten_all()?
        .to_vec1::<f32>()?;
    let t = timed
        .sim
        .to_dtype(DType::F32)?
        .flatten_all()?
        .to_vec1::<f32>()?;
    let mut worst = 0f32;
    let mut failed = 0usize;
    for (a, b) in r.iter().zip(&t) {
        let d = (a - b).abs();
        worst = worst.max(d);
        if d.is_nan() || d > atol + rtol * a.abs() {
            failed += 1;
        }
    }
    println!(
        "accuracy: max |TileSim - Reference| {worst:.3e}; tolerance {atol:e} + {rtol:e} |ref|: {}",
        if failed == 0 {
            "ok".to_string()
        } else {
            format!("{failed} element(s) outside")
        }
    );
    timed.print();

    let (total, hazards) = print_launches(&records);
    match total {
        Some(c) => {
            print_cost("total", &c);
            println!();
            print!("{c}");
        }
        None => println!("  no cost report (no simulated launch)"),
    }
    if failed > 0 {
        bail!("TileSim is outside the tolerance");
    }
    if hazards > 0 {
        bail!("the simulator found {hazards} hazard(s)");
    }
    Ok(())
}
