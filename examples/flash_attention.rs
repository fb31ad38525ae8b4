//! Dense (prefill) flash attention on the Reference backend (candle) and on the DN-mode tile
//! kernel in the Ascend 950 simulator (TileSim), with the simulator's Ascend 950 estimate.
//!
//! Default shape: B = 1, H = 16, S = 2048 queries and keys (`--kv-seq` sets the keys apart),
//! D = Dv = 128, causal, bf16. The
//! report gives the largest difference of `out` and `lse` between the backends, the CPU wall
//! time of each (median of a few alternating runs after a warm-up), and the 950 estimate:
//! device time, per-pipe utilisation, and the fraction of the roofline reached, where the
//! roofline counts only the score entries the mask leaves (2 (D + Dv) FLOPs each) and the
//! distinct GM bytes.
//!
//! ```text
//! cargo run --release --example flash_attention [-- --seq S --kv-seq SKV --heads H --kv-heads HKV
//!     --d D --dv DV --causal true|false --dtype f32|f16|bf16 --runs N]
//! ```
//! `--mla` selects the MLA prefill shape (S 1024, H 16, D 192, Dv 128).

#![allow(clippy::result_large_err)]

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor};
use tileops::ops::{arch, flash_attention, profile, Backend, FlashAttentionParams};

mod common;
use common::{max_abs_diff, parse_dtype, print_dma_sensitivity, print_launches, timed_pair};

/// Command-line settings.
struct Settings {
    dtype: DType,
    runs: usize,
    seq: usize,
    /// Keys per sequence (`seq` unless `--kv-seq` is given).
    kv_seq: Option<usize>,
    heads: usize,
    kv_heads: usize,
    d: usize,
    dv: usize,
    causal: bool,
}

fn settings() -> Result<Settings> {
    let mut s = Settings {
        dtype: DType::BF16,
        runs: 3,
        seq: 2048,
        kv_seq: None,
        heads: 16,
        kv_heads: 16,
        d: 128,
        dv: 128,
        causal: true,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--mla" {
            (s.seq, s.d, s.dv) = (1024, 192, 128);
            continue;
        }
        let v = args.next().with_context(|| format!("{a} needs a value"))?;
        let num = |v: &str| v.parse::<usize>().with_context(|| format!("{a} {v}"));
        match a.as_str() {
            "--seq" => s.seq = num(&v)?,
            "--kv-seq" => s.kv_seq = Some(num(&v)?),
            "--heads" => s.heads = num(&v)?,
            "--kv-heads" => s.kv_heads = num(&v)?,
            "--d" => s.d = num(&v)?,
            "--dv" => s.dv = num(&v)?,
            "--runs" => s.runs = num(&v)?.max(1),
            "--causal" => s.causal = v.parse().with_context(|| format!("--causal {v}"))?,
            "--dtype" => s.dtype = parse_dtype(&v)?,
            other => bail!("unknown argument `{other}`"),
        }
    }
    if s.kv_heads == 0 || !s.heads.is_multiple_of(s.kv_heads) {
        bail!("--kv-heads must divide --heads");
    }
    Ok(s)
}

/// `n` values in `[-1, 1)` from the simulator's splitmix64.
fn tensor(
    rng: &mut tileops::tile_backend::sim::io::Rng,
    shape: &[usize],
    dt: DType,
) -> Result<Tensor> {
    let n = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|_| (rng.next_u64() >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
        .collect();
    Ok(Tensor::from_vec(v, shape, &Device::Cpu)?.to_dtype(dt)?)
}

/// Score entries the mask leaves for one head (query i sees keys j <= i + Skv - Sq).
fn unmasked(sq: usize, skv: usize, causal: bool) -> u64 {
    if !causal {
        return (sq * skv) as u64;
    }
    (0..sq as i64)
        .map(|i| (i + skv as i64 - sq as i64 + 1).clamp(0, skv as i64) as u64)
        .sum()
}

fn main() -> Result<()> {
    let s = settings()?;
    let (b, h, hkv, sq, d, dv) = (1, s.heads, s.kv_heads, s.seq, s.d, s.dv);
    let skv = s.kv_seq.unwrap_or(sq);
    println!(
        "flash attention: B={b} H={h} Hkv={hkv} S={sq} Skv={skv} D={d} Dv={dv} causal={} dtype={:?}",
        s.causal, s.dtype
    );
    let mut rng = tileops::tile_backend::sim::io::Rng::new(19);
    let q = tensor(&mut rng, &[b, h, sq, d], s.dtype)?;
    let k = tensor(&mut rng, &[b, hkv, skv, d], s.dtype)?;
    let v = tensor(&mut rng, &[b, hkv, skv, dv], s.dtype)?;
    let p = FlashAttentionParams::new(1.0 / (d as f32).sqrt(), s.causal);
    let run = |bk| flash_attention(&q, &k, &v, &p, Some(bk));

    let timed = timed_pair(s.runs, |bk| Ok(run(bk)?))?;
    let (reference, sim) = (&timed.reference, &timed.sim);
    println!();
    println!("accuracy (TileSim vs Reference)");
    println!(
        "  out  max |diff| {:.3e}",
        max_abs_diff(&sim.0, &reference.0)?
    );
    println!(
        "  lse  max |diff| {:.3e}",
        max_abs_diff(&sim.1, &reference.1)?
    );
    println!();
    timed.print();

    let (profiled, records) = profile(|| run(Backend::TileSim));
    profiled.context("profiled TileSim run")?;
    println!();
    let (total, _) = print_launches(&records);
    let Some(c) = total else {
        println!("  no cost report (no simulated launch)");
        return Ok(());
    };
    // The roofline of the useful work: unmasked score entries, 2 D FLOPs for S and 2 Dv for PV.
    let r = &arch().rates;
    let macs = if s.dtype == DType::F32 {
        r.cube_macs_fp32.value
    } else {
        r.cube_macs_fp16.value
    };
    let useful = 2.0 * (d + dv) as f64 * (b * h) as f64 * unmasked(sq, skv, s.causal) as f64;
    let compute = useful / (2.0 * macs * r.clusters.value * r.clock_ghz.value * 1e9);
    let memory =
        (c.bytes.gm_read_distinct + c.bytes.gm_written_distinct) / r.chip_gm_bytes_per_s.value;
    let roofline = compute.max(memory);
    println!(
        "  estimated device time {:.2} us; roofline of the unmasked work {:.2} us ({}-bound: \
         {:.2} GFLOP, {:.2} MB distinct GM); {:.1}% of roofline",
        c.seconds * 1e6,
        roofline * 1e6,
        if compute >= memory {
            "compute"
        } else {
            "memory"
        },
        useful / 1e9,
        (c.bytes.gm_read_distinct + c.bytes.gm_written_distinct) / 1e6,
        roofline / c.seconds.max(1e-15) * 100.0
    );
    print_dma_sensitivity("  ", &c, roofline);
    println!(
        "  (executed matmul work {:.2} GFLOP: padding and the diagonal tiles' masked half)",
        c.flops / 1e9
    );
    println!("  pipe utilisation: {}", c.busy_summary());
    println!();
    print!("{c}");
    Ok(())
}
