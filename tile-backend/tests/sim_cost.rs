//! The timeline and cost report against the formulas of ASCEND950.md §10, overlap of pipelined
//! kernels, waves, and the Perfetto trace.

use tile_backend::arch::{Arch, Sku};
use tile_backend::dsl::KernelBuilder;
use tile_backend::ir::*;
use tile_backend::kernels::*;
use tile_backend::passes;
use tile_backend::sim::{cost, io, perfetto, timeline};

mod support;

/// Compiles and runs `kernel` traced; returns the op name of each span of block 0's AIC, the
/// timelines and the report.
fn traced(
    kernel: &Kernel,
    block_dim: usize,
) -> (
    Vec<&'static str>,
    Vec<timeline::BlockTimeline>,
    cost::CostReport,
) {
    let arch = Arch::ascend950();
    let k = passes::compile(kernel, &arch).unwrap();
    let mut args = io::generate(&k, 1).unwrap();
    let trace = support::trace_on(&k, &arch, &mut args, block_dim).unwrap();
    let tls = timeline::timelines(&k, &arch, &trace, block_dim);
    let rep = cost::report_from(&k, &arch, Sku::Ascend950PR, &trace, &tls, block_dim);
    let names = trace.blocks[0].cores[0]
        .events
        .iter()
        .map(|e| e.op.name())
        .collect();
    (names, tls, rep)
}

fn one_matmul(m: u64, k: u64, n: u64, dt: DType) -> Kernel {
    let acc = if dt == DType::I8 {
        DType::I32
    } else {
        DType::F32
    };
    let mut kb = KernelBuilder::new("one_matmul");
    let a = kb.input("a", dt, [m, k]);
    let b = kb.input("b", dt, [k, n]);
    let c = kb.output("c", acc, [m, n]);
    let a1 = kb.tile("a1", TileType::new(MemSpace::Mat, dt, m, k, Layout::NZ));
    let b1 = kb.tile("b1", TileType::new(MemSpace::Mat, dt, k, n, Layout::NZ));
    let a0 = kb.tile("a0", TileType::new(MemSpace::Left, dt, m, k, Layout::NZ));
    let b0 = kb.tile("b0", TileType::new(MemSpace::Right, dt, k, n, Layout::ZN));
    let t = kb.tile("acc", TileType::new(MemSpace::Acc, acc, m, n, Layout::NZ));
    kb.cube(|q| {
        q.load(a1, GmView::nd(a, 0, m, k, k));
        q.load(b1, GmView::nd(b, 0, k, n, n));
        // One flag after both loads, so the second DMA is queued behind the first (a set_flag
        // right after the first load would hold the MTE2 queue until its data landed).
        q.set_flag(Pipe::Mte2, Pipe::Mte1, 0);
        q.wait_flag(Pipe::Mte2, Pipe::Mte1, 0);
        q.mov(a0, a1);
        q.mov(b0, b1);
        q.matmul(t, a0, b0);
        q.store(GmView::nd(c, 0, m, n, n), t);
    });
    kb.build()
}

/// Spans of block 0's AIC whose op is `name`.
fn span_of<'a>(
    names: &[&str],
    tl: &'a timeline::BlockTimeline,
    name: &str,
) -> Vec<&'a timeline::Span> {
    tl.cores[0]
        .iter()
        .filter(|s| names[s.event] == name)
        .collect()
}

#[test]
fn single_matmul_costs_the_fractal_formula() {
    let rates = Arch::ascend950().rates;
    for (m, k, n, dt) in [
        (64u64, 128u64, 96u64, DType::F16),
        (32, 64, 32, DType::F32),
        (48, 128, 64, DType::I8),
        (16, 16, 16, DType::BF16),
    ] {
        let (kern, tls, _) = traced(&one_matmul(m, k, n, dt), 1);
        let mm = span_of(&kern, &tls[0], "matmul");
        assert_eq!(mm.len(), 1);
        let c0 = 32 / dt.size_bytes();
        let steps = m.div_ceil(16) * k.div_ceil(c0) * n.div_ceil(16);
        let f = if dt == DType::F32 { 2 } else { 1 };
        let want = rates.matmul_fixed_cycles.value + (steps * f) as f64;
        let got = mm[0].busy_until - mm[0].start;
        assert!(
            (got - want).abs() < 1e-9,
            "{m}x{k}x{n} {dt}: {got} vs {want}"
        );
    }
}

#[test]
fn single_dma_costs_latency_plus_bytes_over_rate() {
    let rates = Arch::ascend950().rates;
    let (kern, tls, _) = traced(&one_matmul(64, 128, 96, DType::F16), 1);
    let loads = span_of(&kern, &tls[0], "load");
    assert_eq!(loads.len(), 2);
    let bytes = (64 * 128 * 2) as f64;
    let busy = loads[0].busy_until - loads[0].start;
    // Queued DMAs overlap their latency: the pipe is busy bytes/rate (+1 issue cycle); the data
    // lands `latency` later.
    assert!(
        (busy - (bytes / rates.mte2_cube.value + 1.0)).abs() < 1e-9,
        "{busy}"
    );
    assert_eq!(
        loads[0].end - loads[0].busy_until,
        rates.dma_latency_cycles.value
    );
    // The second load starts when the pipe is free, before the first one's data has landed.
    assert!(loads[1].start < loads[0].end);
    // MTE1 waits for the data (the inserted MTE2 -> MTE1 flag).
    let moves = span_of(&kern, &tls[0], "move");
    assert!(moves.iter().all(|s| s.start >= loads[0].end));
}

#[test]
fn pipelined_matmul_overlaps_its_pipes() {
    let p = MatmulParams {
        m: 64,
        k: 512,
        n: 64,
        ..Default::default()
    };
    let (_, tls, rep) = traced(&matmul(&p), p.block_dim() as usize);
    let tl = &tls[0];
    // Run one after another, the ops would take the sum of their durations (DMA latency
    // included); the ping-pong schedule overlaps DMAs with each other and with MTE1 and M.
    let serial: f64 = tl.cores[0].iter().map(|s| s.end - s.start).sum();
    assert!(
        tl.end < 0.8 * serial,
        "block time {} must be well below the serial time {}",
        tl.end,
        serial
    );
    assert!(rep.seconds > 0.0 && rep.roofline_seconds > 0.0);
    assert!(rep.roofline_fraction() <= 1.0 + 1e-9, "{rep}");
}

#[test]
fn blocks_beyond_the_clusters_run_in_waves() {
    // Every block does the same work.
    let k = one_matmul(32, 64, 32, DType::F16);
    let (_, _, one) = traced(&k, 32);
    let (_, _, two) = traced(&k, 64);
    assert_eq!(one.waves, 1);
    assert_eq!(two.waves, 2);
    assert!(
        (two.cycles - 2.0 * one.cycles).abs() < 1e-6 * one.cycles.max(1.0),
        "{} vs 2 x {}",
        two.cycles,
        one.cycles
    );
    // Identical waves keep every pipe exactly as busy as one wave does (a second wave doubles
    // both the busy cycles and the duration; it must not be counted twice).
    for (a, b) in one.busy.iter().zip(&two.busy) {
        assert!(
            (a.fraction - b.fraction).abs() < 1e-9,
            "{} {:?}: one wave {} vs two waves {}",
            a.core,
            a.pipe,
            a.fraction,
            b.fraction
        );
    }
    assert!(one.busy.iter().any(|b| b.fraction > 0.0), "{one}");
}

#[test]
fn busy_summary_lists_exactly_the_busy_pipes() {
    let k = one_matmul(32, 64, 32, DType::F16);
    let (_, _, c) = traced(&k, 1);
    let line = c.busy_summary();
    let busy: Vec<_> = c.busy.iter().filter(|b| b.fraction > 0.0).collect();
    assert!(!busy.is_empty(), "{c}");
    assert_eq!(line.split(", ").count(), busy.len(), "{line}");
    for b in busy {
        let item = format!("{} {} {:.1}%", b.core, b.pipe, b.fraction * 100.0);
        assert!(line.contains(&item), "{item} missing from {line}");
    }
    // An idle pipe is left out: the matmul kernel never uses the vector pipe.
    assert!(!line.contains("AIV V "), "{line}");
}

#[test]
fn report_counts_distinct_gm_bytes_and_flops() {
    let (m, k, n) = (64u64, 128u64, 96u64);
    let (_, _, rep) = traced(&one_matmul(m, k, n, DType::F16), 1);
    assert_eq!(rep.bytes.gm_read_distinct, ((m * k + k * n) * 2) as f64);
    assert_eq!(rep.bytes.gm_written_distinct, (m * n * 4) as f64);
    assert_eq!(rep.flops, (2 * m * k * n) as f64);
    let text = rep.to_string();
    assert!(
        text.contains("roofline bound") && text.contains("MTE2"),
        "{text}"
    );
}

#[test]
fn attention_trace_has_a_track_per_pipe_and_flow_arrows() {
    let arch = Arch::ascend950();
    let p = AttentionParams::default();
    let k = passes::compile(&attention_tile(&p), &arch).unwrap();
    let mut args = io::generate(&k, 2).unwrap();
    let trace = support::trace_on(&k, &arch, &mut args, 1).unwrap();
    let tls = timeline::timelines(&k, &arch, &trace, 1);
    let json = perfetto::chrome_trace(&trace, &tls, arch.rates.clock_ghz.value);
    let text = serde_json::to_string(&json).unwrap();
    let back: serde_json::Value = serde_json::from_str(&text).unwrap();
    let events = back["traceEvents"].as_array().unwrap();
    let names: Vec<&str> = events
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .filter_map(|e| e["args"]["name"].as_str())
        .collect();
    for core in ["AIC", "AIV0", "AIV1"] {
        for pipe in ["S", "MTE2", "MTE1", "M", "FIX", "V", "MTE3"] {
            assert!(
                names.contains(&format!("{core} {pipe}").as_str()),
                "missing track {core} {pipe}"
            );
        }
    }
    assert!(events.iter().any(|e| e["ph"] == "s") && events.iter().any(|e| e["ph"] == "f"));
    assert!(events
        .iter()
        .any(|e| e["ph"] == "X" && e["name"] == "matmul"));
}

#[test]
fn an_ops_launches_sum_into_one_report() {
    let (_, _, a) = traced(&one_matmul(64, 128, 96, DType::F16), 1);
    let (_, _, b) = traced(&one_matmul(32, 64, 32, DType::F32), 1);
    let s = cost::CostReport::sum(&[a.clone(), b.clone()]).expect("two reports");
    assert_eq!(s.cycles, a.cycles + b.cycles);
    assert_eq!(s.flops, a.flops + b.flops);
    assert_eq!(s.roofline_seconds, a.roofline_seconds + b.roofline_seconds);
    assert_eq!(
        s.bytes.gm_read_distinct,
        a.bytes.gm_read_distinct + b.bytes.gm_read_distinct
    );
    assert!(s.kernel.contains(" + "));
    // Busy fractions are the time-weighted mean of the launches'.
    for ((x, y), z) in a.busy.iter().zip(&b.busy).zip(&s.busy) {
        let want = (x.fraction * a.cycles + y.fraction * b.cycles) / (a.cycles + b.cycles);
        assert!((z.fraction - want).abs() < 1e-12);
    }
    assert!(cost::CostReport::sum(&[]).is_none());
}

/// Every AIV of 32 blocks streams `rows` rows of 16 KiB GM -> UB -> GM through four buffers,
/// so each AIV's loads and stores run at once.
fn streaming_copy(rows: u64) -> Kernel {
    const COLS: u64 = 4096;
    let total = 64 * rows;
    let mut kb = KernelBuilder::new("stream_copy");
    let x = kb.input("x", DType::F32, [total, COLS]);
    let y = kb.output("y", DType::F32, [total, COLS]);
    let ty = TileType::new(MemSpace::Vec, DType::F32, 1, COLS, Layout::ND);
    let bufs: Vec<TileId> = (0..4)
        .map(|j| kb.tile(format!("ub{j}"), ty.clone()))
        .collect();
    kb.vector(|v| {
        let first = (Expr::BlockIdx * 2u64 + Expr::SubBlockIdx) * rows;
        v.for_range("i", 0u64, rows, 4, |b, i| {
            for (j, &ub) in bufs.iter().enumerate() {
                let at = (first.clone() + Expr::Var(i) + j as u64) * COLS;
                b.load(ub, GmView::nd(x, at.clone(), 1u64, COLS, COLS));
                b.store(GmView::nd(y, at, 1u64, COLS, COLS), ub);
            }
        });
    });
    kb.build()
}

#[test]
fn a_wave_moves_no_more_than_the_chips_gm_bandwidth() {
    let rates = Arch::ascend950().rates;
    let rows = 16;
    let (_, tls, rep) = traced(&streaming_copy(rows), 32);
    // Every byte is read once and written once: the roofline is the chip's bandwidth.
    let moved = 2.0 * (64 * rows * 4096 * 4) as f64;
    assert_eq!(
        rep.bytes.gm_read_distinct + rep.bytes.gm_written_distinct,
        moved
    );
    let floor = moved / (rates.chip_gm_bytes_per_s.value / (rates.clock_ghz.value * 1e9));
    // Each AIV's MTE2 and MTE3 get half the cluster's share each, so the blocks alone would
    // finish faster than the chip can move their bytes; the wave may not.
    let slowest = tls.iter().map(|b| b.end).fold(0.0, f64::max);
    assert!(
        slowest < floor,
        "the kernel must be bandwidth-bound: {slowest} vs {floor}"
    );
    assert!(
        (rep.cycles - floor).abs() < 1e-6 * floor,
        "{} vs {floor}",
        rep.cycles
    );
    assert!(rep.roofline_fraction() <= 1.0 + 1e-9, "{rep}");
}

/// The DMA latency has no public source: every profiled report also carries the estimate at
/// half and at double it. On one matmul (two loads, a store: latencies exposed in series) the
/// three estimates are ordered and differ by the exposed latencies, the rest of the report
/// (bytes, roofline) being the same trace's.
#[test]
fn the_report_brackets_the_estimate_at_half_and_double_the_dma_latency() {
    let arch = Arch::ascend950();
    let k = passes::compile(&one_matmul(64, 128, 96, DType::F16), &arch).unwrap();
    let mut args = io::generate(&k, 1).unwrap();
    let trace = support::trace_on(&k, &arch, &mut args, 1).unwrap();
    let rep = cost::report_with_sensitivity(&k, &arch, Sku::Ascend950PR, &trace, 1);
    let plain = cost::report(&k, &arch, Sku::Ascend950PR, &trace, 1);
    assert_eq!(rep.seconds, plain.seconds);
    assert_eq!(plain.dma_latency_sensitivity, None);
    let [half, double] = rep.dma_latency_sensitivity.expect("computed");
    assert!(
        half < rep.seconds && rep.seconds < double,
        "{half} {} {double}",
        rep.seconds
    );
    // At least the load's and the store's latency are exposed: 2 x 250 cycles saved at half,
    // 2 x 500 added at double.
    let cycle = 1.0 / (arch.rates.clock_ghz.value * 1e9);
    let lat = arch.rates.dma_latency_cycles.value;
    assert!(
        rep.seconds - half >= lat * cycle - 1e-12,
        "{}",
        rep.seconds - half
    );
    assert!(double - rep.seconds >= 2.0 * lat * cycle - 1e-12);
    // Summing launches sums the bracket.
    let two = cost::CostReport::sum(&[rep.clone(), rep.clone()]).unwrap();
    assert_eq!(
        two.dma_latency_sensitivity,
        Some([2.0 * half, 2.0 * double])
    );
    assert!(rep.to_string().contains("DMA latency x0.5"));
}

/// The sort instructions' costs have no A5 source: a kernel that sorts also reports its estimate
/// at half and at double them (ordered around the estimate), one that does not reports none,
/// and a sum with a non-sorting launch adds that launch's own estimate to both ends.
#[test]
fn a_sorting_kernel_brackets_its_estimate_at_half_and_double_the_sort_costs() {
    let arch = Arch::ascend950();
    let k = passes::compile(&topk(&TopkParams { k: 256 }), &arch).unwrap();
    let mut args = io::generate(&k, 3).unwrap();
    let trace = support::trace_on(&k, &arch, &mut args, 1).unwrap();
    let rep = cost::report_with_sensitivity(&k, &arch, Sku::Ascend950PR, &trace, 1);
    let [half, double] = rep.sort_cost_sensitivity.expect("a sorting kernel");
    assert!(
        half < rep.seconds && rep.seconds < double,
        "{half} {} {double}",
        rep.seconds
    );
    assert!(rep.to_string().contains("sort costs x0.5"));
    let mm = passes::compile(&one_matmul(64, 128, 96, DType::F16), &arch).unwrap();
    let mut margs = io::generate(&mm, 1).unwrap();
    let mtrace = support::trace_on(&mm, &arch, &mut margs, 1).unwrap();
    let plain = cost::report_with_sensitivity(&mm, &arch, Sku::Ascend950PR, &mtrace, 1);
    assert_eq!(plain.sort_cost_sensitivity, None);
    let both = cost::CostReport::sum(&[plain.clone(), rep.clone()]).unwrap();
    assert_eq!(
        both.sort_cost_sensitivity,
        Some([plain.seconds + half, plain.seconds + double])
    );
}

/// The L2 model (off by default, A2/A3-derived figures): AIV0 of each of two blocks loads the
/// same GM tile twice. Hits are decided block by block in index order: block 0's first load
/// misses, its second and both of block 1's hit. A hit waits the 50-cycle hit latency instead
/// of the DMA latency, moves at MTE2's own rate (below L2's 256 B/cycle) and is not counted
/// against the chip's GM bandwidth; with the model off nothing changes.
#[test]
fn with_l2_on_rereads_hit_in_block_order_and_wait_the_hit_latency() {
    let (m, n) = (64u64, 128u64);
    let mut kb = KernelBuilder::new("reread");
    let x = kb.input("x", DType::F32, [m, n]);
    let out = kb.output("out", DType::F32, [2 * m, n]);
    let ty = || TileType::new(MemSpace::Vec, DType::F32, m, n, Layout::ND);
    let (t0, t1, t2) = (
        kb.tile("t0", ty()),
        kb.tile("t1", ty()),
        kb.tile("t2", ty()),
    );
    kb.vector(|v| {
        v.if_(Expr::SubBlockIdx.eq_(0), |v| {
            v.load(t0, GmView::nd(x, 0, m, n, n));
            v.load(t1, GmView::nd(x, 0, m, n, n));
            v.add(t2, t0, t1);
            v.store(
                GmView::nd(out, Expr::BlockIdx * (m * n) as i64, m, n, n),
                t2,
            );
        });
    });
    let arch = Arch::ascend950();
    assert!(!arch.l2, "off by default");
    let k = passes::compile(&kb.build(), &arch).unwrap();
    let mut args = io::generate(&k, 1).unwrap();
    let trace = support::trace_on(&k, &arch, &mut args, 2).unwrap();
    let on = arch.clone().with_l2(true);
    let (tl_off, tl_on) = (
        timeline::timelines(&k, &arch, &trace, 2),
        timeline::timelines(&k, &on, &trace, 2),
    );
    let off_rep = cost::report_from(&k, &arch, Sku::Ascend950PR, &trace, &tl_off, 2);
    let on_rep = cost::report_from(&k, &on, Sku::Ascend950PR, &trace, &tl_on, 2);
    let tile = (m * n * 4) as f64;
    assert_eq!(off_rep.bytes.l2_hits, 0.0);
    assert_eq!(on_rep.bytes.l2_hits, 3.0 * tile);
    assert!(on_rep.cycles < off_rep.cycles);
    let lat = |tl: &timeline::BlockTimeline, b: usize| -> Vec<f64> {
        let ev = &trace.blocks[b].cores[1].events;
        tl.cores[1]
            .iter()
            .filter(|s| matches!(ev[s.event].op, Op::LoadStore(LoadStoreOp::Load { .. })))
            .map(|s| s.end - s.busy_until)
            .collect()
    };
    assert_eq!(lat(&tl_off[0], 0), vec![500.0, 500.0]);
    assert_eq!(lat(&tl_on[0], 0), vec![500.0, 50.0]);
    assert_eq!(lat(&tl_on[1], 1), vec![50.0, 50.0]);
    // A hit moves at MTE2's own 16 B/cycle (AIV, 950PR), as the miss does: bound by MTE2.
    let busy = |tl: &timeline::BlockTimeline| -> Vec<f64> {
        let ev = &trace.blocks[1].cores[1].events;
        tl.cores[1]
            .iter()
            .filter(|s| matches!(ev[s.event].op, Op::LoadStore(LoadStoreOp::Load { .. })))
            .map(|s| s.busy_until - s.start)
            .collect()
    };
    let want = tile / arch.rates.mte2_vector.value + 1.0;
    for b in busy(&tl_on[1]) {
        assert!((b - want).abs() < 1e-6, "{b} vs {want}");
    }
}
