//! The Ascend 950 cost report: estimated device time, per-pipe busy fractions, bytes per path,
//! FLOPs and the roofline bound (ASCEND950.md §10).

use super::timeline::{timelines, BlockTimeline, PIPES};
use super::trace::{Mem, Trace};
use crate::arch::{Arch, Sku};
use crate::ir::{DType, Kernel, LoadStoreOp, MatmulOp, MoveOp, Op, Pipe, ScalarOp};
use std::collections::BTreeMap;
use std::fmt;

/// Bytes moved per data path.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PathBytes {
    /// Distinct GM bytes read (each byte counted once over all blocks).
    pub gm_read_distinct: f64,
    /// Distinct GM bytes written.
    pub gm_written_distinct: f64,
    /// GM bytes read by all DMAs (re-reads counted).
    pub gm_read_total: f64,
    /// L1 -> L0A/L0B/bias (MTE1).
    pub l1_to_l0: f64,
    /// Out of L0C through the Fixpipe.
    pub fixpipe: f64,
    /// UB -> GM (MTE3).
    pub ub_to_gm: f64,
    /// UB -> L1 (MTE3).
    pub ub_to_l1: f64,
    /// GM bytes of DMA reads served by L2 (the L2 model; 0 when it is off).
    pub l2_hits: f64,
}

/// Busy fraction of one pipe, averaged over the cores of a kind and the run's duration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PipeBusy {
    /// "AIC" or "AIV".
    pub core: &'static str,
    /// The pipe.
    pub pipe: Pipe,
    /// Busy cycles / (duration x cores of that kind running).
    pub fraction: f64,
}

/// The cost of one kernel launch (or the sum of an op's launches).
#[derive(Debug, Clone, PartialEq)]
pub struct CostReport {
    /// Kernel name(s).
    pub kernel: String,
    /// Chip variant.
    pub sku: Sku,
    /// Blocks launched.
    pub block_dim: usize,
    /// Waves (blocks beyond the cluster count wait for a free cluster).
    pub waves: usize,
    /// Estimated device cycles.
    pub cycles: f64,
    /// Estimated device time in seconds.
    pub seconds: f64,
    /// Per-pipe busy fractions.
    pub busy: Vec<PipeBusy>,
    /// Bytes per path.
    pub bytes: PathBytes,
    /// Floating-point (or integer) operations of the cube: 2 m k n per matmul, whole fractals.
    pub flops: f64,
    /// Roofline bound in seconds: max(distinct GM bytes / chip bandwidth, cube work / peak).
    pub roofline_seconds: f64,
    /// The bound that decides the roofline: "memory" or "compute".
    pub bound: &'static str,
    /// Estimated seconds with the DMA latency at half and at double its figure (it has no
    /// public source: `dma_latency_cycles` is an assumption); `None` when not computed
    /// ([`report_with_sensitivity`] computes it).
    pub dma_latency_sensitivity: Option<[f64; 2]>,
    /// The estimate in seconds at half and at double the sort instructions' costs (TSORT32,
    /// TMRGSORT: A2/A3-derived assumptions), for a kernel that sorts; `None` when not computed
    /// or when the kernel issues no sort ([`report_with_sensitivity`]).
    pub sort_cost_sensitivity: Option<[f64; 2]>,
}

impl CostReport {
    /// Fraction of the roofline reached (bound / estimate).
    pub fn roofline_fraction(&self) -> f64 {
        if self.seconds > 0.0 {
            self.roofline_seconds / self.seconds
        } else {
            0.0
        }
    }

    /// The pipes that were busy, on one line: `AIC MTE2 95.1%, AIV V 12.0%` (the examples'
    /// and benches' one-line reports; the full table is this report's `Display`).
    pub fn busy_summary(&self) -> String {
        self.busy
            .iter()
            .filter(|b| b.fraction > 0.0)
            .map(|b| format!("{} {} {:.1}%", b.core, b.pipe, b.fraction * 100.0))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The sum of several launches (an op that runs several kernels).
    pub fn sum(reports: &[CostReport]) -> Option<CostReport> {
        let first = reports.first()?.clone();
        let mut s = first.clone();
        for r in &reports[1..] {
            // A launch without a sort costs the same at either sort figure (when its other
            // sensitivity was computed, so was this one).
            let sorted = |x: &CostReport| {
                x.sort_cost_sensitivity
                    .or(x.dma_latency_sensitivity.map(|_| [x.seconds; 2]))
            };
            let any_sort = s.sort_cost_sensitivity.is_some() || r.sort_cost_sensitivity.is_some();
            s.sort_cost_sensitivity = match (sorted(&s), sorted(r)) {
                (Some([a, b]), Some([c, d])) if any_sort => Some([a + c, b + d]),
                _ => None,
            };
            s.kernel = format!("{} + {}", s.kernel, r.kernel);
            let (a, b) = (s.cycles, r.cycles);
            s.busy = s
                .busy
                .iter()
                .zip(&r.busy)
                .map(|(x, y)| PipeBusy {
                    fraction: if a + b > 0.0 {
                        (x.fraction * a + y.fraction * b) / (a + b)
                    } else {
                        0.0
                    },
                    ..*x
                })
                .collect();
            s.cycles += r.cycles;
            s.seconds += r.seconds;
            s.waves += r.waves;
            s.flops += r.flops;
            s.roofline_seconds += r.roofline_seconds;
            s.dma_latency_sensitivity = match (s.dma_latency_sensitivity, r.dma_latency_sensitivity)
            {
                (Some([a, b]), Some([c, d])) => Some([a + c, b + d]),
                _ => None,
            };
            let (p, q) = (&mut s.bytes, &r.bytes);
            p.gm_read_distinct += q.gm_read_distinct;
            p.gm_written_distinct += q.gm_written_distinct;
            p.gm_read_total += q.gm_read_total;
            p.l1_to_l0 += q.l1_to_l0;
            p.fixpipe += q.fixpipe;
            p.ub_to_gm += q.ub_to_gm;
            p.ub_to_l1 += q.ub_to_l1;
            p.l2_hits += q.l2_hits;
        }
        Some(s)
    }
}

/// GM bytes one block's DMAs read and write (scalar reads and writes go through the data
/// cache and are not counted).
fn gm_dma_bytes(block: &super::trace::BlockTrace<'_>) -> f64 {
    block
        .cores
        .iter()
        .flat_map(|c| &c.events)
        .filter(|e| {
            !matches!(
                e.op,
                Op::Scalar(ScalarOp::WriteScalar { .. }) | Op::Scalar(ScalarOp::ReadScalar { .. })
            )
        })
        .flat_map(|e| &e.accesses)
        .filter(|a| matches!(a.mem, Mem::Gm(_)))
        .map(|a| (a.end - a.start) as f64)
        .sum()
}

fn distinct(mut ranges: Vec<(usize, usize)>) -> f64 {
    ranges.sort_unstable();
    let mut total = 0usize;
    let mut cur: Option<(usize, usize)> = None;
    for (s, e) in ranges {
        match cur {
            Some((cs, ce)) if s <= ce => cur = Some((cs, ce.max(e))),
            Some((cs, ce)) => {
                total += ce - cs;
                cur = Some((s, e));
            }
            None => cur = Some((s, e)),
        }
    }
    if let Some((cs, ce)) = cur {
        total += ce - cs;
    }
    total as f64
}

fn peak_macs(arch: &Arch, dt: DType) -> f64 {
    let r = &arch.rates;
    match dt {
        DType::F32 => r.cube_macs_fp32.value,
        DType::I8 | DType::U8 | DType::F8E4M3 | DType::F8E5M2 => r.cube_macs_int8.value,
        _ => r.cube_macs_fp16.value,
    }
}

/// Builds the cost report of a traced run of `block_dim` blocks.
pub fn report(
    kernel: &Kernel,
    arch: &Arch,
    sku: Sku,
    trace: &Trace,
    block_dim: usize,
) -> CostReport {
    let tls = timelines(kernel, arch, trace, block_dim);
    report_from(kernel, arch, sku, trace, &tls, block_dim)
}

/// [`report`] from timelines already built.
pub fn report_from(
    kernel: &Kernel,
    arch: &Arch,
    sku: Sku,
    trace: &Trace,
    tls: &[BlockTimeline],
    block_dim: usize,
) -> CostReport {
    let r = &arch.rates;
    let clusters = r.clusters.value.max(1.0) as usize;
    let waves = block_dim.div_ceil(clusters).max(1);
    // Each wave lasts as long as its slowest block, and at least as long as the chip's GM
    // bandwidth takes to move every byte its blocks' DMAs read and write (the timeline grants
    // each pipe its own share of the cluster's bandwidth, so loads and stores running at once
    // could otherwise add up to more than the chip has); the waves run one after another.
    let chip_bytes_per_cycle = r.chip_gm_bytes_per_s.value / (r.clock_ghz.value * 1e9);
    // L2 hits (the L2 model) do not touch HBM.
    let block_bytes: Vec<f64> = trace
        .blocks
        .iter()
        .zip(tls)
        .map(|(b, t)| gm_dma_bytes(b) - t.l2_hit_bytes)
        .collect();
    let wave_ends: Vec<(f64, usize)> = tls
        .chunks(clusters)
        .enumerate()
        .map(|(wi, w)| {
            let slowest = w.iter().map(|b| b.end).fold(0.0, f64::max);
            let moved: f64 = block_bytes.iter().skip(wi * clusters).take(w.len()).sum();
            let floor = if chip_bytes_per_cycle > 0.0 {
                moved / chip_bytes_per_cycle
            } else {
                0.0
            };
            (slowest.max(floor), w.len())
        })
        .collect();
    let cycles: f64 = wave_ends.iter().map(|(end, _)| end).sum();
    // Cluster-cycles the run offers: each wave's duration times the clusters it occupies.
    let cluster_cycles: f64 = wave_ends.iter().map(|(end, n)| end * *n as f64).sum();
    let seconds = cycles / (r.clock_ghz.value * 1e9);

    // Busy fractions: busy cycles summed over blocks / (each wave's duration x the cores of that
    // kind it runs, summed over the waves).
    let mut busy_sum: BTreeMap<(usize, usize), f64> = BTreeMap::new();
    for tl in tls {
        for (ci, spans) in tl.cores.iter().enumerate() {
            let kind = usize::from(ci > 0);
            for s in spans {
                let p = s.pipe.index().unwrap_or(0);
                *busy_sum.entry((kind, p)).or_default() += s.busy_until - s.start;
            }
        }
    }
    let mut busy = vec![];
    for (kind, name, cores) in [(0usize, "AIC", 1.0), (1, "AIV", 2.0)] {
        for (p, pipe) in PIPES.iter().enumerate() {
            let b = busy_sum.get(&(kind, p)).copied().unwrap_or(0.0);
            let denom = cluster_cycles * cores;
            busy.push(PipeBusy {
                core: name,
                pipe: *pipe,
                fraction: if denom > 0.0 {
                    (b / denom).min(1.0)
                } else {
                    0.0
                },
            });
        }
    }

    // Bytes and FLOPs.
    let mut bytes = PathBytes {
        l2_hits: tls.iter().map(|t| t.l2_hit_bytes).sum(),
        ..PathBytes::default()
    };
    let mut gm_reads: BTreeMap<u32, Vec<(usize, usize)>> = BTreeMap::new();
    let mut gm_writes: BTreeMap<u32, Vec<(usize, usize)>> = BTreeMap::new();
    let mut flops = 0.0;
    let mut compute_seconds = 0.0;
    for b in &trace.blocks {
        for core in &b.cores {
            for e in &core.events {
                let written: f64 = e
                    .accesses
                    .iter()
                    .filter(|a| a.write)
                    .map(|a| (a.end - a.start) as f64)
                    .sum();
                for a in &e.accesses {
                    if let Mem::Gm(p) = a.mem {
                        if matches!(
                            e.op,
                            Op::Scalar(ScalarOp::WriteScalar { .. })
                                | Op::Scalar(ScalarOp::ReadScalar { .. })
                        ) {
                            continue;
                        }
                        let list = if a.write {
                            &mut gm_writes
                        } else {
                            &mut gm_reads
                        };
                        list.entry(p).or_default().push((a.start, a.end));
                        if !a.write {
                            bytes.gm_read_total += (a.end - a.start) as f64;
                        }
                    }
                }
                match e.op {
                    Op::Move(MoveOp::Move { .. }) => match e.pipe {
                        Pipe::Mte1 => bytes.l1_to_l0 += written,
                        Pipe::Fix => bytes.fixpipe += written,
                        Pipe::Mte3 => bytes.ub_to_l1 += written,
                        _ => {}
                    },
                    Op::LoadStore(LoadStoreOp::Store { .. }) => match e.pipe {
                        Pipe::Fix => bytes.fixpipe += written,
                        Pipe::Mte3 => bytes.ub_to_gm += written,
                        _ => {}
                    },
                    Op::Matmul(MatmulOp::Matmul { a, .. }) => {
                        let [m, k, n] = e.cube.unwrap_or([0; 3]);
                        let f = 2.0 * (m * k * n) as f64;
                        flops += f;
                        let dt = kernel
                            .try_tile(a.tile)
                            .map(|d| d.ty.dtype)
                            .unwrap_or(DType::F16);
                        compute_seconds += f
                            / (2.0
                                * peak_macs(arch, dt)
                                * clusters as f64
                                * r.clock_ghz.value
                                * 1e9);
                    }
                    Op::LoadStore(LoadStoreOp::Load { .. })
                    | Op::Gather(_)
                    | Op::Vector(_)
                    | Op::Sort(_)
                    | Op::Scalar(_)
                    | Op::Sync(_) => {}
                }
            }
        }
    }
    bytes.gm_read_distinct = gm_reads.into_values().map(distinct).sum();
    bytes.gm_written_distinct = gm_writes.into_values().map(distinct).sum();
    let memory_seconds =
        (bytes.gm_read_distinct + bytes.gm_written_distinct) / r.chip_gm_bytes_per_s.value;
    let (roofline_seconds, bound) = if memory_seconds >= compute_seconds {
        (memory_seconds, "memory")
    } else {
        (compute_seconds, "compute")
    };
    CostReport {
        kernel: kernel.name.clone(),
        sku,
        block_dim,
        waves,
        cycles,
        seconds,
        busy,
        bytes,
        flops,
        roofline_seconds,
        bound,
        dma_latency_sensitivity: None,
        sort_cost_sensitivity: None,
    }
}

/// [`report`], with the estimate also at half and at double the DMA latency
/// ([`CostReport::dma_latency_sensitivity`]): the same trace, timelines rebuilt with
/// [`Rates::with_dma_latency_scaled`](crate::arch::Rates::with_dma_latency_scaled).
pub fn report_with_sensitivity(
    kernel: &Kernel,
    arch: &Arch,
    sku: Sku,
    trace: &Trace,
    block_dim: usize,
) -> CostReport {
    let mut rep = report(kernel, arch, sku, trace, block_dim);
    let at = |factor: f64| {
        let scaled = Arch {
            rates: arch.rates.with_dma_latency_scaled(factor),
            ..arch.clone()
        };
        report(kernel, &scaled, sku, trace, block_dim).seconds
    };
    rep.dma_latency_sensitivity = Some([at(0.5), at(2.0)]);
    if kernel_sorts(kernel) {
        let at = |factor: f64| {
            let scaled = Arch {
                rates: arch.rates.with_sort_costs_scaled(factor),
                ..arch.clone()
            };
            report(kernel, &scaled, sku, trace, block_dim).seconds
        };
        rep.sort_cost_sensitivity = Some([at(0.5), at(2.0)]);
    }
    rep
}

/// Whether a kernel issues a sort instruction (TSORT32, TMRGSORT).
fn kernel_sorts(kernel: &Kernel) -> bool {
    kernel
        .ops()
        .iter()
        .any(|(_, op)| matches!(op, crate::ir::Op::Sort(_)))
}

fn human_bytes(b: f64) -> String {
    if b >= 1e6 {
        format!("{:.2} MB", b / 1e6)
    } else if b >= 1e3 {
        format!("{:.1} KB", b / 1e3)
    } else {
        format!("{b:.0} B")
    }
}

impl fmt::Display for CostReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "kernel {}  ({:?}, block_dim {}, {} wave(s))",
            self.kernel, self.sku, self.block_dim, self.waves
        )?;
        writeln!(
            f,
            "  estimated time   {:.2} us  ({:.0} cycles)",
            self.seconds * 1e6,
            self.cycles
        )?;
        writeln!(
            f,
            "  roofline bound   {:.2} us  ({}-bound); reached {:.1}%",
            self.roofline_seconds * 1e6,
            self.bound,
            self.roofline_fraction() * 100.0
        )?;
        if let Some([half, double]) = self.dma_latency_sensitivity {
            writeln!(
                f,
                "  DMA latency x0.5 {:.2} us, x2 {:.2} us (the latency is an assumption)",
                half * 1e6,
                double * 1e6
            )?;
        }
        if let Some([half, double]) = self.sort_cost_sensitivity {
            writeln!(
                f,
                "  sort costs x0.5 {:.2} us, x2 {:.2} us (A2/A3-derived assumptions)",
                half * 1e6,
                double * 1e6
            )?;
        }
        writeln!(f, "  cube work        {:.3} GFLOP", self.flops / 1e9)?;
        let b = &self.bytes;
        writeln!(
            f,
            "  GM distinct      read {}  written {}  (DMA reads {})",
            human_bytes(b.gm_read_distinct),
            human_bytes(b.gm_written_distinct),
            human_bytes(b.gm_read_total)
        )?;
        writeln!(
            f,
            "  on-chip paths    L1->L0 {}  Fixpipe {}  UB->GM {}  UB->L1 {}",
            human_bytes(b.l1_to_l0),
            human_bytes(b.fixpipe),
            human_bytes(b.ub_to_gm),
            human_bytes(b.ub_to_l1)
        )?;
        if b.l2_hits > 0.0 {
            writeln!(
                f,
                "  L2 (model on)    hits {} of the DMA reads (A2/A3-derived figures)",
                human_bytes(b.l2_hits)
            )?;
        }
        writeln!(
            f,
            "  pipe busy        {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6}",
            "S", "MTE2", "MTE1", "M", "FIX", "V", "MTE3"
        )?;
        for core in ["AIC", "AIV"] {
            write!(f, "    {core:<14}")?;
            for p in PIPES {
                let v = self
                    .busy
                    .iter()
                    .find(|x| x.core == core && x.pipe == p)
                    .map(|x| x.fraction)
                    .unwrap_or(0.0);
                write!(f, " {:>5.1}%", v * 100.0)?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}
