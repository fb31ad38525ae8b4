//! What the side-by-side examples (`sparse_attention`, `paged_attention`, `flash_attention`)
//! share: the dtype flag, the alternating Reference / TileSim timing, the accuracy figure and
//! the report of the simulated launches.
//!
//! Each example includes this module with `mod common;` and uses part of it.
#![allow(dead_code)]

use anyhow::{bail, Context, Result};
use candle_core::{DType, Tensor};
use std::time::{Duration, Instant};
use tileops::ops::{Backend, LaunchRecord};
use tileops::tile_backend::sim::cost::CostReport;

/// `f32`, `f16` or `bf16` (any case).
pub fn parse_dtype(s: &str) -> Result<DType> {
    Ok(match s.to_ascii_lowercase().as_str() {
        "f32" => DType::F32,
        "f16" => DType::F16,
        "bf16" => DType::BF16,
        other => bail!("unknown dtype `{other}`: choose f32, f16 or bf16"),
    })
}

/// The flags every attention decode example takes, besides its own size flag.
pub struct Flags {
    /// `--dtype`.
    pub dtype: DType,
    /// `--runs`: timed rounds (at least 1).
    pub runs: usize,
    /// `--seed` of the inputs' PRNG.
    pub seed: u64,
}

/// Parses the command line of example `name`: `--dtype`, `--runs`, `--seed`, `-h`/`--help`
/// and the example's own size flag `size` (a count); returns the flags and the size, starting
/// from `flags` and `size_default`.
pub fn parse_flags(
    name: &str,
    mut flags: Flags,
    (size, size_default): (&str, usize),
) -> Result<(Flags, usize)> {
    let mut n = size_default;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().with_context(|| format!("{name} needs a value"));
        match a.as_str() {
            "--dtype" => flags.dtype = parse_dtype(&value("--dtype")?)?,
            "--runs" => flags.runs = value("--runs")?.parse().context("--runs")?,
            "--seed" => flags.seed = value("--seed")?.parse().context("--seed")?,
            "-h" | "--help" => {
                println!("usage: {name} [--dtype f32|f16|bf16] [--runs N] [{size} T] [--seed S]");
                std::process::exit(0);
            }
            a if a == size => n = value(size)?.parse().with_context(|| size.to_string())?,
            other => bail!("unknown argument `{other}` (try --help)"),
        }
    }
    if flags.runs == 0 {
        bail!("--runs must be at least 1");
    }
    Ok((flags, n))
}

/// The last result and the median wall time of each backend.
pub struct Timed<T> {
    /// The Reference's last result.
    pub reference: T,
    /// The Reference's median time.
    pub ref_time: Duration,
    /// TileSim's last result.
    pub sim: T,
    /// TileSim's median time.
    pub sim_time: Duration,
    /// Timed rounds.
    pub runs: usize,
}

/// One warm-up run per backend (it compiles and caches the kernels), then `runs` rounds that
/// time the Reference and TileSim back to back, so both see the same machine load (the machines
/// this runs on are shared).
pub fn timed_pair<T>(runs: usize, mut step: impl FnMut(Backend) -> Result<T>) -> Result<Timed<T>> {
    let mut reference = step(Backend::Reference).context("Reference backend")?;
    let mut sim = step(Backend::TileSim).context("TileSim backend")?;
    let (mut ref_times, mut sim_times) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
    for _ in 0..runs {
        let t = Instant::now();
        reference = step(Backend::Reference).context("Reference backend")?;
        ref_times.push(t.elapsed());
        let t = Instant::now();
        sim = step(Backend::TileSim).context("TileSim backend")?;
        sim_times.push(t.elapsed());
    }
    Ok(Timed {
        reference,
        ref_time: median(ref_times),
        sim,
        sim_time: median(sim_times),
        runs,
    })
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times.get(times.len() / 2).copied().unwrap_or_default()
}

impl<T> Timed<T> {
    /// Prints both medians and the ratio Reference / TileSim (> 1: TileSim is faster).
    pub fn print(&self) {
        println!(
            "CPU wall time (median of {} alternating runs after a warm-up)",
            self.runs
        );
        println!("  Reference  {:>10.2?}", self.ref_time);
        println!(
            "  TileSim    {:>10.2?}   (Reference / TileSim = {:.2})",
            self.sim_time,
            self.ref_time.as_secs_f64() / self.sim_time.as_secs_f64().max(1e-12)
        );
    }
}

/// The largest element-wise `|a - b|`, in f32.
pub fn max_abs_diff(a: &Tensor, b: &Tensor) -> Result<f32> {
    let d = (a.to_dtype(DType::F32)? - b.to_dtype(DType::F32)?)?.abs()?;
    Ok(d.flatten_all()?.max(0)?.to_scalar::<f32>()?)
}

/// Prints the simulated launches (kernel x blocks), the first hazards of each and each launch's
/// cost line; returns the summed cost report of the launches (`None` when nothing was
/// simulated) and the hazard count.
pub fn print_launches(records: &[LaunchRecord]) -> (Option<CostReport>, usize) {
    let hazards: usize = records.iter().map(|r| r.hazards.len()).sum();
    println!(
        "simulated Ascend 950: {} launch(es) ({}), {hazards} hazard(s)",
        records.len(),
        records
            .iter()
            .map(|r| format!("{} x{}", r.kernel, r.block_dim))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for h in records.iter().flat_map(|r| r.hazards.iter().take(3)) {
        println!("  hazard: {h}");
    }
    for r in records {
        if let Some(c) = &r.cost {
            print_cost(&format!("{} x{}", r.kernel, r.block_dim), c);
        }
    }
    let costs: Vec<CostReport> = records.iter().filter_map(|r| r.cost.clone()).collect();
    (CostReport::sum(&costs), hazards)
}

/// One line of a cost report: device time, blocks and waves, roofline and its fraction, then
/// the pipes' utilisation.
pub fn print_cost(label: &str, c: &CostReport) {
    println!(
        "  {label}: {:.2} us on {} blocks ({} wave(s)), roofline {:.2} us ({}-bound), {:.1}% of roofline",
        c.seconds * 1e6,
        c.block_dim,
        c.waves,
        c.roofline_seconds * 1e6,
        c.bound,
        c.roofline_fraction() * 100.0
    );
    println!("    pipe utilisation: {}", c.busy_summary());
    print_dma_sensitivity("    ", c, c.roofline_seconds);
}

/// The estimate at half and at double the DMA latency (an assumption: no public source gives
/// it), with the fraction of `roofline` (seconds) each reaches.
pub fn print_dma_sensitivity(indent: &str, c: &CostReport, roofline: f64) {
    if let Some([half, double]) = c.dma_latency_sensitivity {
        println!(
            "{indent}DMA latency x0.5: {:.2} us ({:.1}% of roofline), x2: {:.2} us ({:.1}%) (the 500-cycle latency is an assumption)",
            half * 1e6,
            roofline / half * 100.0,
            double * 1e6,
            roofline / double * 100.0
        );
    }
}
