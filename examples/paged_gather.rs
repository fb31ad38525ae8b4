//! `paged_gather` on the DeepSeek-V3.2 latent cache shape ([82816, 576] bf16, block 128, 512
//! columns kept) with random DSA-style top-k indices: runs the Reference and the TileSim
//! backends, checks that they agree bit for bit, times each (best of `REPS` calls), and prints
//! the Ascend 950 cost estimate (device time, per-pipe utilisation, fraction of the roofline).
//!
//! `cargo run --release --example paged_gather -- [N] [REPS]` (default 2048 rows, 20 calls).

#![allow(clippy::result_large_err)] // OpError carries the simulator's error by value

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor};
use std::time::Instant;
use tileops::ops::{paged_gather, profile, Backend};
use tileops::tile_backend::sim::cost::CostReport;
use tileops::tile_backend::sim::io::Rng;

const TOKENS: usize = 82816;
const COLS: usize = 576;
const BLOCK: usize = 128;
const SIZE: usize = 512;

fn arg(i: usize, default: usize) -> Result<usize> {
    match std::env::args().nth(i) {
        None => Ok(default),
        Some(v) => v
            .parse()
            .with_context(|| format!("argument {i} `{v}` is not a count")),
    }
}

/// `0..n` in random order.
fn permutation(rng: &mut Rng, n: usize) -> Vec<i32> {
    let mut v: Vec<i32> = (0..n as i32).collect();
    for i in (1..n).rev() {
        v.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
    }
    v
}

fn main() -> Result<()> {
    let (n, reps) = (arg(1, 2048)?, arg(2, 20)?.max(1));
    if n == 0 || n > TOKENS {
        bail!("N must be in 1..={TOKENS}, got {n}");
    }
    let dev = Device::Cpu;
    let mut rng = Rng::new(22);
    let nb = TOKENS / BLOCK;
    let src: Vec<f32> = (0..TOKENS * COLS)
        .map(|_| (rng.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
        .collect();
    let src = Tensor::from_vec(src, (TOKENS, COLS), &dev)?.to_dtype(DType::BF16)?;
    let table = Tensor::from_vec(permutation(&mut rng, nb), (1, nb), &dev)?;
    let picked = permutation(&mut rng, TOKENS)[..n].to_vec();
    let indices = Tensor::from_vec(picked, (1, n), &dev)?;
    println!("paged_gather src [{TOKENS}, {COLS}] bf16, block {BLOCK}, size {SIZE}, {n} rows");

    let run = |backend| paged_gather(&src, &indices, &table, BLOCK, SIZE, Some(backend));
    let r = run(Backend::Reference)?;
    let s = run(Backend::TileSim)?;
    let (rv, sv) = (bits(&r)?, bits(&s)?);
    if rv != sv {
        bail!("TileSim and Reference differ");
    }
    println!("  TileSim == Reference bit for bit");
    let best = |backend| -> Result<f64> {
        let mut best = f64::INFINITY;
        for _ in 0..reps {
            let t = Instant::now();
            run(backend)?;
            best = best.min(t.elapsed().as_secs_f64());
        }
        Ok(best)
    };
    let (tr, ts) = (best(Backend::Reference)?, best(Backend::TileSim)?);
    let moved = (2 * n * SIZE * 2) as f64;
    println!(
        "  Reference {:.1} us, TileSim {:.1} us (best of {reps}); Reference / TileSim = {:.2}; TileSim moves {:.2} GB/s (read + write)",
        tr * 1e6,
        ts * 1e6,
        tr / ts,
        moved / ts / 1e9
    );

    let (res, records) = profile(|| run(Backend::TileSim));
    res?;
    let costs: Vec<CostReport> = records.iter().filter_map(|r| r.cost.clone()).collect();
    match CostReport::sum(&costs) {
        Some(c) => {
            println!(
                "  Ascend 950PR estimate: {:.2} us on {} blocks, roofline {:.2} us ({}-bound), {:.1}% of roofline",
                c.seconds * 1e6,
                c.block_dim,
                c.roofline_seconds * 1e6,
                c.bound,
                c.roofline_fraction() * 100.0
            );
            println!("  pipe utilisation: {}", c.busy_summary());
            if let Some([half, double]) = c.dma_latency_sensitivity {
                println!(
                    "  DMA latency x0.5: {:.2} us ({:.1}% of roofline), x2: {:.2} us ({:.1}%) (the 500-cycle latency is an assumption)",
                    half * 1e6,
                    c.roofline_seconds / half * 100.0,
                    double * 1e6,
                    c.roofline_seconds / double * 100.0
                );
            }
        }
        None => println!("  no cost report"),
    }
    Ok(())
}

/// The values' bits (bf16 -> f32 is exact, so equal bits here are equal bf16 bits).
fn bits(t: &Tensor) -> Result<Vec<u32>> {
    Ok(t.to_dtype(DType::F32)?
        .flatten_all()?
        .to_vec1::<f32>()?
        .iter()
        .map(|v| v.to_bits())
        .collect())
}
