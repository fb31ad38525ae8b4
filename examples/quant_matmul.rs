//! Per-channel W8A8 `quant_matmul` on one shape: quantises a random weight, runs the Reference
//! and the TileSim backends, checks that they agree bit for bit and how far both are from the
//! dense f32 product, times each stage, and prints the Ascend 950 cost estimate (device time,
//! per-pipe utilisation, fraction of the int8 roofline).
//!
//! `cargo run --release --example quant_matmul -- [M] [K] [N]` (default 256 4096 4096).
//! `cargo run --release --example quant_matmul -- M K N REPS` runs only TileSim: one warm-up call
//! and `REPS` timed ones (the mean is printed), a loop for a profiler such as `perf record`.

#![allow(clippy::result_large_err)] // OpError carries the simulator's error by value

use anyhow::{bail, Context, Result};
use candle_core::{Device, Tensor};
use std::time::Instant;
use tileops::ops::{
    profile, quant_matmul, quantize_per_channel, quantize_per_token, Backend, QuantMatmulParams,
};
use tileops::tile_backend::sim::cost::CostReport;

fn arg(i: usize, default: usize) -> Result<usize> {
    match std::env::args().nth(i) {
        None => Ok(default),
        Some(v) => v
            .parse()
            .with_context(|| format!("argument {i} `{v}` is not a size")),
    }
}

/// Deterministic values in [-amp, amp).
fn values(n: usize, seed: u64, amp: f32) -> Vec<f32> {
    (0..n as u64)
        .map(|i| {
            let h = (i ^ seed)
                .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                .rotate_left(17);
            ((h >> 40) as f32 / (1u64 << 23) as f32 - 1.0) * amp
        })
        .collect()
}

fn main() -> Result<()> {
    let (m, k, n) = (arg(1, 256)?, arg(2, 4096)?, arg(3, 4096)?);
    let dev = Device::Cpu;
    let x = Tensor::from_vec(values(m * k, 1, 1.0), (m, k), &dev)?;
    let w = Tensor::from_vec(values(n * k, 2, 0.05), (n, k), &dev)?;
    println!("quant_matmul x [{m}, {k}] f32 · w^T, w [{n}, {k}] int8 per channel");
    if std::env::args().nth(4).is_some() {
        return sim_only(&x, &w, arg(4, 1)?);
    }

    let t = Instant::now();
    let qw = quantize_per_channel(&w)?;
    println!("  quantize_per_channel (once per weight): {:.2} ms", ms(t));
    let t = Instant::now();
    let _ = quantize_per_token(&x)?;
    println!("  quantize_per_token (every call):        {:.2} ms", ms(t));

    let p = QuantMatmulParams::default();
    let t = Instant::now();
    let r = quant_matmul(&x, &qw, &p, Some(Backend::Reference))?;
    println!(
        "  Reference (first call, builds its f32 weight copy): {:.2} ms",
        ms(t)
    );
    let t = Instant::now();
    let r = quant_matmul(&x, &qw, &p, Some(Backend::Reference)).map(|_| r)?;
    println!("  Reference:                              {:.2} ms", ms(t));
    let t = Instant::now();
    let s = quant_matmul(&x, &qw, &p, Some(Backend::TileSim))?;
    println!("  TileSim (first call, compiles):         {:.2} ms", ms(t));
    let t = Instant::now();
    let s = quant_matmul(&x, &qw, &p, Some(Backend::TileSim)).map(|_| s)?;
    println!("  TileSim:                                {:.2} ms", ms(t));
    let t = Instant::now();
    let dense = x.matmul(&w.t()?.contiguous()?)?;
    println!("  dense f32 matmul (candle):              {:.2} ms", ms(t));

    let (rv, sv) = (flat(&r)?, flat(&s)?);
    let differ = rv
        .iter()
        .zip(&sv)
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .count();
    if differ > 0 {
        bail!(
            "TileSim and Reference differ in {differ} of {} values",
            rv.len()
        );
    }
    let dv = flat(&dense)?;
    let scale = dv.iter().fold(0f32, |a, v| a.max(v.abs()));
    let err = rv
        .iter()
        .zip(&dv)
        .fold(0f32, |a, (q, d)| a.max((q - d).abs()));
    println!(
        "  TileSim == Reference bit for bit; max |W8A8 - f32| = {err:.4} ({:.3}% of max |y| = {scale:.3})",
        100.0 * err / scale
    );

    let (res, records) = profile(|| quant_matmul(&x, &qw, &p, Some(Backend::TileSim)));
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

/// TileSim alone: one warm-up call (compiles the kernel), then `reps` timed calls.
fn sim_only(x: &Tensor, w: &Tensor, reps: usize) -> Result<()> {
    let qw = quantize_per_channel(w)?;
    let p = QuantMatmulParams::default();
    quant_matmul(x, &qw, &p, Some(Backend::TileSim))?;
    let t = Instant::now();
    for _ in 0..reps {
        quant_matmul(x, &qw, &p, Some(Backend::TileSim))?;
    }
    println!(
        "  TileSim: {:.2} ms per call (mean of {reps})",
        ms(t) / reps.max(1) as f64
    );
    Ok(())
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

fn flat(t: &Tensor) -> Result<Vec<f32>> {
    Ok(t.flatten_all()?.to_vec1::<f32>()?)
}
