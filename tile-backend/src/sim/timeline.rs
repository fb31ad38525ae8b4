//! The per-pipe timeline: each traced op placed on its pipe, starting when the pipe is free and
//! the flags, unit flags and cross-core signals it waits for allow, lasting what the machine
//! model's rates say (docs/simulator.md, "Timing model").

use super::trace::{core_index, Access, CoreId, Event, Mem, SyncInfo, Trace};
use crate::arch::{Arch, Rates};
use crate::ir::{c0, CostClass, DType, Kernel, MemSpace, Op, Phase, Pipe, ReduceOp, UnitFlag};
use std::collections::HashMap;

/// The pipes of the timeline, in track order ([`Pipe::ALL`]).
pub const PIPES: [Pipe; 7] = Pipe::ALL;

/// One op placed on the timeline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Span {
    /// Index of the event in its core's trace.
    pub event: usize,
    /// The pipe.
    pub pipe: Pipe,
    /// Start cycle (within the block).
    pub start: f64,
    /// Cycle the pipe is free again.
    pub busy_until: f64,
    /// Cycle the op's effect is complete (DMA latency included).
    pub end: f64,
}

/// A flag edge drawn as an arrow: from the setting span to the waiting span.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FlowEdge {
    /// Setting core and event.
    pub from: (CoreId, usize),
    /// Waiting core and event.
    pub to: (CoreId, usize),
    /// Cycle of the signal.
    pub at: f64,
}

/// One block's timeline.
#[derive(Debug, Clone, Default)]
pub struct BlockTimeline {
    /// Block index.
    pub block: usize,
    /// Spans per core (AIC, AIV0, AIV1), one per traced event.
    pub cores: [Vec<Span>; 3],
    /// Flag edges.
    pub flows: Vec<FlowEdge>,
    /// Cycle the block's last op completes.
    pub end: f64,
    /// GM bytes of this block's DMA reads served by L2 (the L2 model; 0 when it is off).
    pub l2_hit_bytes: f64,
}

/// Rates in effect for one launch: per-core DMA bandwidth shares the chip's GM bandwidth
/// between the clusters running at once.
#[derive(Debug, Clone, Copy)]
pub struct LaunchRates {
    /// GM -> AIC bytes per cycle.
    pub mte2_cube: f64,
    /// GM -> AIV bytes per cycle.
    pub mte2_vector: f64,
    /// UB -> GM bytes per cycle.
    pub mte3: f64,
}

impl LaunchRates {
    /// Rates when `active` clusters run at once.
    pub fn new(r: &Rates, active: usize) -> Self {
        let chip = r.chip_gm_bytes_per_s.value / (r.clock_ghz.value * 1e9);
        let share = chip / active.max(1) as f64;
        LaunchRates {
            mte2_cube: r.mte2_cube.value.min(share),
            mte2_vector: r.mte2_vector.value.min(share / 2.0),
            mte3: r.mte3.value.min(share / 2.0),
        }
    }
}

fn bytes(acc: &[Access], pred: impl Fn(&Access) -> bool) -> f64 {
    acc.iter()
        .filter(|a| pred(a))
        .map(|a| (a.end - a.start) as f64)
        .sum()
}

fn is_gm(a: &Access) -> bool {
    matches!(a.mem, Mem::Gm(_))
}

/// Cycles an op occupies its pipe, and extra cycles until its effect is complete (DMA latency).
/// `l2_hit` is the GM bytes of a DMA read that hit L2 (0 with the L2 model off).
pub fn op_cost(
    kernel: &Kernel,
    e: &Event,
    r: &Rates,
    lr: &LaunchRates,
    core: CoreId,
    l2_hit: f64,
) -> (f64, f64) {
    let overlap = r.dma_latency_overlaps.value > 0.5;
    // A DMA read of `b` GM bytes, `hit` of them in L2, on a pipe at `rate` (its share of the
    // chip's GM bandwidth) whose own rate is `pipe`: missed bytes move at `rate` and cost the
    // DMA latency; hit bytes move at the pipe's own rate or L2's, whichever is lower (on the
    // 950 that is MTE2: 31 B/cycle per AIC against L2's 256), without touching HBM; a DMA all
    // of whose lines hit waits the L2 hit latency instead.
    let dma = |b: f64, hit: f64, (rate, pipe): (f64, f64), n: f64| {
        let hit = hit.clamp(0.0, b);
        let hit_rate = pipe.min(r.l2_read_bytes_per_cycle.value);
        let transfer = (b - hit) / rate.max(1e-9) + hit / hit_rate.max(1e-9);
        let lat = if hit > 0.0 && hit >= b {
            r.l2_hit_latency_cycles.value
        } else {
            r.dma_latency_cycles.value
        };
        if overlap {
            (transfer + n, lat)
        } else {
            (transfer + n * lat, 0.0)
        }
    };
    let cube = (lr.mte2_cube, r.mte2_cube.value);
    match e.op.cost_class() {
        CostClass::Load => {
            let rate = if core == CoreId::Aic {
                cube
            } else {
                (lr.mte2_vector, r.mte2_vector.value)
            };
            dma(
                bytes(&e.accesses, |a| is_gm(a) && !a.write),
                l2_hit,
                rate,
                1.0,
            )
        }
        CostClass::Gather => {
            // One DMA per gathered row (plus the index and block-table reads).
            let n = e.accesses.iter().filter(|a| is_gm(a) && !a.write).count() as f64;
            dma(
                bytes(&e.accesses, |a| is_gm(a) && !a.write),
                l2_hit,
                cube,
                n,
            )
        }
        CostClass::Store => {
            let b = bytes(&e.accesses, |a| is_gm(a) && a.write);
            if e.pipe == Pipe::Fix {
                let lat = r.dma_latency_cycles.value;
                (b.max(bytes(&e.accesses, |a| !a.write)) / r.fix.value, lat)
            } else {
                dma(b, 0.0, (lr.mte3, r.mte3.value), 1.0)
            }
        }
        CostClass::Move => {
            let b = bytes(&e.accesses, |a| a.write);
            let rate = match e.pipe {
                Pipe::Mte1 => r.mte1.value,
                Pipe::Fix => r.fix.value,
                Pipe::Mte3 => r.ub_to_l1.value,
                _ => r.vector_bytes_per_cycle.value,
            };
            let issue = if e.pipe == Pipe::V {
                r.vector_issue_cycles.value
            } else {
                0.0
            };
            (issue + b / rate, 0.0)
        }
        CostClass::Matmul { a } => {
            let [m, k, n] = e.cube.unwrap_or([0, 0, 0]);
            let dt = kernel
                .try_tile(a.tile)
                .map(|d| d.ty.dtype)
                .unwrap_or(DType::F16);
            let kc = c0(dt) as usize;
            let steps = (m.div_ceil(16) * k.div_ceil(kc) * n.div_ceil(16)) as f64;
            let f = if dt == DType::F32 { 2.0 } else { 1.0 };
            (r.matmul_fixed_cycles.value + steps * f, 0.0)
        }
        // Vector instructions: the issue cost plus repeats x cycles per repeat of the class
        // ([`vector_op`]; docs/simulator.md, "Vector costs", A5-FACTS §2).
        //
        // A two-source element-wise op and a row or column broadcast run one 256-byte repeat
        // per cycle of the *destination*, not of the sources' summed bytes: A5's vector
        // function loads both sources on its two load ports in one cycle
        // (`include/pto/costmodel/a5/VfSim/params/uarch.csv:3`, `load_ports` 2; `isa.csv:6`,
        // VADD fp32 throughput 2 on EXU01). PTO-ISA's A5 VfSim gives TADD f32 64x128 182
        // cycles, 1 / 8 / 32 / 128 repeats 55 / 62 / 86 / 182; the hardware-measured TADD f32
        // 1x64 is 55 and 1x1280 80 (`tests/costmodel/st_a5_fit/testcase/tadd_fit/main.cpp:52`,
        // `:56`).
        //
        // Rows apart (a destination of fewer valid columns than columns: one write run per
        // row), the vector function loops over rows (PTO's 2-D form), and the hardware
        // measures more: TADD f32 20x1312 (valid 20x1280) 869 cycles, 10x1312 449, 20x160
        // (valid 128) 191 (`st_a5_fit/testcase/tadd_fit/main.cpp:77-93`; TSUB and TMUL the
        // same, `tsub_fit/main.cpp:88-90`, `tmul_fit/main.cpp:88-90`): 1.9 cycles per repeat
        // of each row plus 3 per row (`Rates::vector_binary_2d_*`).
        CostClass::VectorBinary => {
            let rows: Vec<f64> = e
                .accesses
                .iter()
                .filter(|a| a.write)
                .map(|a| (a.end - a.start) as f64)
                .collect();
            if rows.len() > 1 && e.pipe == Pipe::V {
                let rep = r.vector_bytes_per_cycle.value;
                let repeats: f64 = rows.iter().map(|b| (b / rep).ceil()).sum();
                let cycles = r.vector_issue_cycles.value
                    + repeats * r.vector_binary_2d_cycles_per_repeat.value
                    + rows.len() as f64 * r.vector_binary_2d_row_cycles.value;
                (cycles, 0.0)
            } else {
                vector_op(e, r, bytes(&e.accesses, |a| a.write), 1.0)
            }
        }
        // exp costs its figure per 64 elements (a repeat of f32) whatever the dtype: VfSim's
        // TEXP is 317 cycles at f32 64x128 and 574 at fp16 128x128 (A5-FACTS §2; fitted
        // `formula_params.csv:44` fp32 1.967 and `:36` fp16 3.762 cycles per 256-byte repeat,
        // 548 at fp16 128x128), twice as dear per byte at 16 bits; hardware TEXP f32 1x64 = 64
        // and 1x1280 = 102 (`tests/costmodel/st_a5_fit/testcase/texp_fit/main.cpp:102`, `:106`).
        CostClass::VectorExp { dst } => {
            let es = kernel
                .try_tile(dst.tile)
                .map_or(4.0, |d| d.ty.dtype.size_bytes() as f64);
            let f32_bytes = bytes(&e.accesses, |a| a.write) / es * 4.0;
            vector_op(
                e,
                r,
                f32_bytes.max(in_or_out(e)),
                r.vector_exp_cycles_per_repeat.value,
            )
        }
        CostClass::VectorTranscendental => {
            vector_op(e, r, in_or_out(e), r.vector_exp_cycles_per_repeat.value)
        }
        // A row reduction runs as a per-row chain on one execution unit: PTO-ISA's A5 VfSim
        // gives TROWMAX / TROWSUM 504 / 531 cycles at f32 64x128 and 485 / 612 at fp16 128x128
        // (A5-FACTS §2; VfSim/params/isa.csv:26-31, VCMAX latency 16 and VCADD 22 on EXU0
        // only), 3.4-4.4 cycles per repeat of the source (`Rates`).
        CostClass::RowReduce(op) => {
            let per = match op {
                ReduceOp::Sum => r.vector_row_sum_cycles_per_repeat.value,
                ReduceOp::Max | ReduceOp::Min => r.vector_row_max_cycles_per_repeat.value,
            };
            vector_op(e, r, bytes(&e.accesses, |a| !a.write), per)
        }
        // A column reduction combines rows element-wise, two ops a cycle over the two
        // execution units: VfSim's TCOLMAX / TCOLSUM f32 128x64 are 118 / 119 cycles (A5-FACTS
        // §2), 0.5 per repeat of the source.
        CostClass::ColReduce => vector_op(
            e,
            r,
            bytes(&e.accesses, |a| !a.write),
            r.vector_col_reduce_cycles_per_repeat.value,
        ),
        CostClass::VectorSimple => vector_op(e, r, in_or_out(e), 1.0),
        // The sort figures are A2/A3-derived assumptions (`arch::ascend950`, docs/simulator.md):
        // a head, then per 32-element block (TSORT32) or per 128 merged pairs (TMRGSORT); a
        // UB -> UB copy adds a cycle per 256 bytes.
        CostClass::Sort32 => {
            let w = e.sort.unwrap_or_default();
            (
                r.sort32_head_cycles.value
                    + w.units as f64 * r.sort32_cycles_per_block.value
                    + ub_copy(r, w.copied_bytes),
                0.0,
            )
        }
        CostClass::MrgSort => {
            let w = e.sort.unwrap_or_default();
            (
                r.mrgsort_head_cycles.value
                    + w.units.div_ceil(128) as f64 * r.mrgsort_cycles_per_128_pairs.value
                    + ub_copy(r, w.copied_bytes),
                0.0,
            )
        }
        CostClass::ScalarGmRead => (r.scalar_gm_read_cycles.value, 0.0),
        CostClass::ScalarUbRead => (r.scalar_ub_read_cycles.value, 0.0),
        // One cycle each: a scalar write to the data cache, valid-shape metadata, and the sync
        // and channel ops (their waiting is the timeline's, not a cost).
        CostClass::Unit => (1.0, 0.0),
    }
}

/// A UB -> UB copy inside a sort instruction: a cycle per 256-byte repeat.
fn ub_copy(r: &Rates, bytes: usize) -> f64 {
    (bytes as f64 / r.vector_bytes_per_cycle.value).ceil()
}

/// The larger of the bytes an op writes and the bytes it reads (all sources summed).
fn in_or_out(e: &Event) -> f64 {
    bytes(&e.accesses, |a| a.write).max(bytes(&e.accesses, |a| !a.write))
}

/// A vector instruction over `b` bytes at `per` cycles per 256-byte repeat, after its issue
/// cost; a fillpad on a Mat tile runs on MTE2 at its rate instead.
fn vector_op(e: &Event, r: &Rates, b: f64, per: f64) -> (f64, f64) {
    if e.pipe == Pipe::Mte2 {
        return (in_or_out(e) / r.mte2_cube.value, 0.0);
    }
    let repeats = (b / r.vector_bytes_per_cycle.value).ceil();
    (r.vector_issue_cycles.value + repeats * per, 0.0)
}

/// The pipe an event occupies: sync ops run on the pipe they order.
pub fn event_pipe(e: &Event) -> Pipe {
    match e.op {
        Op::Sync(o) => o.ordered_pipe().unwrap_or(e.pipe),
        Op::LoadStore(_)
        | Op::Move(_)
        | Op::Matmul(_)
        | Op::Gather(_)
        | Op::Vector(_)
        | Op::Sort(_)
        | Op::Scalar(_) => e.pipe,
    }
}

#[derive(Default, Clone)]
struct CoreClock {
    free: [f64; 7],
    done: [f64; 7],
    issue: f64,
    next: usize,
    /// Completion of the last matmul with phase Final, per Acc start address.
    acc_final: HashMap<usize, f64>,
    /// When a Final Fixpipe read released the Acc tile at a start address.
    acc_released: HashMap<usize, f64>,
}

/// Builds one block's timeline from its trace.
/// `l2` gives, per core and event, the GM bytes of each DMA read that hit L2 ([`l2_hits`];
/// `None` with the L2 model off).
pub fn block_timeline(
    kernel: &Kernel,
    arch: &Arch,
    lr: &LaunchRates,
    trace: &super::trace::BlockTrace,
    l2: Option<&[Vec<f64>; 3]>,
) -> BlockTimeline {
    let r = &arch.rates;
    let mut out = BlockTimeline {
        block: trace.block,
        l2_hit_bytes: l2.map_or(0.0, |h| h.iter().flatten().sum()),
        ..Default::default()
    };
    let mut clocks = vec![CoreClock::default(); 3];
    let mut flags: HashMap<(usize, Pipe, Pipe, u8), (f64, usize)> = HashMap::new();
    let cores = CoreId::ALL;
    loop {
        let mut progressed = false;
        for (ci, core) in cores.iter().enumerate() {
            let events = &trace.cores[ci].events;
            while clocks[ci].next < events.len() {
                let idx = clocks[ci].next;
                let e = &events[idx];
                // A cross-core wait needs its setter placed first.
                let setter = match e.sync {
                    SyncInfo::WaitCross { from, index } => {
                        let fi = core_index(from);
                        match out.cores[fi].get(index) {
                            Some(s) => Some((from, index, s.end)),
                            None => break,
                        }
                    }
                    _ => None,
                };
                let c = &mut clocks[ci];
                let pipe = event_pipe(e);
                let p = pipe.index().unwrap_or(0);
                let mut start = c.free[p].max(c.issue);
                let (busy, extra) = match e.sync {
                    SyncInfo::SetFlag { src, dst, event } => {
                        start = start.max(c.done[p]);
                        flags.insert((ci, src, dst, event), (start, idx));
                        (0.0, 0.0)
                    }
                    SyncInfo::WaitFlag { src, dst, event } => {
                        if let Some((t, from)) = flags.remove(&(ci, src, dst, event)) {
                            start = start.max(t);
                            out.flows.push(FlowEdge {
                                from: (*core, from),
                                to: (*core, idx),
                                at: t,
                            });
                        }
                        (0.0, 0.0)
                    }
                    SyncInfo::Barrier(Pipe::All) => {
                        let t = c.done.iter().cloned().fold(start, f64::max);
                        c.free.iter_mut().for_each(|f| *f = t);
                        start = t;
                        (0.0, 0.0)
                    }
                    SyncInfo::Barrier(_) => {
                        start = start.max(c.done[p]);
                        (0.0, 0.0)
                    }
                    SyncInfo::SetCross { .. } => {
                        start = start.max(c.done[p]);
                        (0.0, 0.0)
                    }
                    SyncInfo::WaitCross { .. } => {
                        if let Some((from, index, t)) = setter {
                            start = start.max(t);
                            out.flows.push(FlowEdge {
                                from: (from, index),
                                to: (*core, idx),
                                at: t,
                            });
                        }
                        (0.0, 0.0)
                    }
                    SyncInfo::None => {
                        // The unit flag: a Final Fixpipe read waits for the Final matmul.
                        if let Some(UnitFlag::Read(_, Phase::Final)) = e.op.unit_flag() {
                            if let Some(a) = e.accesses.iter().find(|a| {
                                !a.write
                                    && a.mem
                                        == (Mem::Chip {
                                            space: MemSpace::Acc,
                                            aiv: 0,
                                        })
                            }) {
                                if let Some(t) = c.acc_final.get(&a.start) {
                                    start = start.max(*t);
                                }
                            }
                        }
                        // ...and the next phased matmul waits for that read to release the tile.
                        if let Some(UnitFlag::Matmul(..)) = e.op.unit_flag() {
                            if let Some(a) = e.accesses.iter().find(|a| a.write) {
                                if let Some(t) = c.acc_released.remove(&a.start) {
                                    start = start.max(t);
                                }
                            }
                        }
                        let hit = l2.and_then(|h| h[ci].get(idx)).copied().unwrap_or(0.0);
                        op_cost(kernel, e, r, lr, *core, hit)
                    }
                };
                let span = Span {
                    event: idx,
                    pipe,
                    start,
                    busy_until: start + busy,
                    end: start + busy + extra,
                };
                if let Some(UnitFlag::Matmul(_, Phase::Final)) = e.op.unit_flag() {
                    if let Some(a) = e.accesses.iter().find(|a| a.write) {
                        c.acc_final.insert(a.start, span.end);
                    }
                }
                if let Some(UnitFlag::Read(_, Phase::Final)) = e.op.unit_flag() {
                    let acc = Mem::Chip {
                        space: MemSpace::Acc,
                        aiv: 0,
                    };
                    if let Some(a) = e.accesses.iter().find(|a| !a.write && a.mem == acc) {
                        c.acc_released.insert(a.start, span.end);
                    }
                }
                c.free[p] = span.busy_until;
                c.done[p] = c.done[p].max(span.end);
                c.issue += 1.0;
                // A scalar read stalls issue until its value arrives.
                if matches!(
                    e.op.cost_class(),
                    CostClass::ScalarGmRead | CostClass::ScalarUbRead
                ) {
                    c.issue = c.issue.max(span.end);
                }
                out.end = out.end.max(span.end);
                out.cores[ci].push(span);
                c.next += 1;
                progressed = true;
            }
        }
        if clocks
            .iter()
            .zip(&trace.cores)
            .all(|(c, t)| c.next >= t.events.len())
            || !progressed
        {
            break;
        }
    }
    out
}

/// Timelines of every block of a traced run, with the rates for `block_dim` blocks.
pub fn timelines(
    kernel: &Kernel,
    arch: &Arch,
    trace: &Trace,
    block_dim: usize,
) -> Vec<BlockTimeline> {
    let clusters = arch.rates.clusters.value.max(1.0) as usize;
    let lr = LaunchRates::new(&arch.rates, block_dim.min(clusters));
    let hits = arch.l2.then(|| l2_hits(&arch.rates, trace));
    trace
        .blocks
        .iter()
        .enumerate()
        .map(|(i, b)| block_timeline(kernel, arch, &lr, b, hits.as_ref().and_then(|h| h.get(i))))
        .collect()
}

/// The L2 model, as PTO-ISA's A2/A3 perf-sim has it (`include/pto/costmodel/perf_sim/
/// cache_model.hpp`): an LRU of `l2_line_bytes` lines holding `l2_bytes`, filled by DMA reads
/// of GM (loads and gathers; perf-sim caches reads only). Hits are decided in a fixed order:
/// block by block in index order, in each block the AIC's events, then AIV0's, then AIV1's,
/// each in trace order (the device interleaves the blocks of a wave; the order decides only
/// which of two readers of a line pays the miss). A line is a hit when it is in L2 before the
/// event (perf-sim looks at a DMA's first line only; we count every line). Returns, per block,
/// per core and event, the hit bytes.
pub fn l2_hits(r: &Rates, trace: &Trace) -> Vec<[Vec<f64>; 3]> {
    let line = r.l2_line_bytes.value.max(1.0) as usize;
    let capacity = (r.l2_bytes.value / line as f64).max(1.0) as usize;
    let mut lru = Lru::new(capacity);
    let mut out = Vec::with_capacity(trace.blocks.len());
    for b in &trace.blocks {
        let mut per_core: [Vec<f64>; 3] = Default::default();
        for (ci, core) in b.cores.iter().enumerate() {
            per_core[ci] = core
                .events
                .iter()
                .map(|e| {
                    if !matches!(e.op.cost_class(), CostClass::Load | CostClass::Gather) {
                        return 0.0;
                    }
                    let reads = e.accesses.iter().filter(|a| is_gm(a) && !a.write);
                    let mut touched = Vec::new();
                    let mut hit = 0usize;
                    for a in reads {
                        let Mem::Gm(p) = a.mem else { continue };
                        for l in a.start / line..a.end.div_ceil(line) {
                            let (s, t) = ((l * line).max(a.start), ((l + 1) * line).min(a.end));
                            if lru.contains(&(p, l)) {
                                hit += t - s;
                            }
                            touched.push((p, l));
                        }
                    }
                    for k in touched {
                        lru.touch(k);
                    }
                    hit as f64
                })
                .collect();
        }
        out.push(per_core);
    }
    out
}

/// A least-recently-used set of `(tensor, line)` keys with a fixed capacity.
struct Lru {
    capacity: usize,
    stamp: u64,
    at: HashMap<(u32, usize), u64>,
    order: std::collections::VecDeque<(u64, (u32, usize))>,
}

impl Lru {
    fn new(capacity: usize) -> Self {
        Lru {
            capacity,
            stamp: 0,
            at: HashMap::new(),
            order: Default::default(),
        }
    }

    fn contains(&self, k: &(u32, usize)) -> bool {
        self.at.contains_key(k)
    }

    /// Marks `k` most recently used (inserting it), evicting the least recently used keys
    /// beyond the capacity.
    fn touch(&mut self, k: (u32, usize)) {
        self.stamp += 1;
        self.at.insert(k, self.stamp);
        self.order.push_back((self.stamp, k));
        while self.at.len() > self.capacity {
            let Some((s, old)) = self.order.pop_front() else {
                break;
            };
            if self.at.get(&old) == Some(&s) {
                self.at.remove(&old);
            }
        }
        // Drop stale entries at the front so the queue stays near the set's size.
        while let Some(&(s, old)) = self.order.front() {
            if self.at.get(&old) == Some(&s) {
                break;
            }
            self.order.pop_front();
        }
    }
}
