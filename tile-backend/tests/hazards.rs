//! Hazard detection (`sim::hazards`): the race suite (every sync deleted in turn from correct
//! kernels, checked against a brute-force all-pairs checker) and one small kernel per
//! lost-signal / hang / phase / line failure, each with a fixed version.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use tile_backend::arch::Arch;
use tile_backend::dsl::KernelBuilder;
use tile_backend::ir::*;
use tile_backend::kernels::*;
use tile_backend::passes;
use tile_backend::sim::hazards::{self, Hazard, HazardKind};
use tile_backend::sim::trace::{core_index, Event, Mem, SyncInfo, Trace};
use tile_backend::sim::{io, SimError};

mod support;

// ---------------------------------------------------------------------------------------------
// Brute-force all-pairs race checker: explicit happens-before graph, reachability by BFS.
// ---------------------------------------------------------------------------------------------

/// A racing pair as (memory, op A, op B), ops as (block, core, loc, pipe), A <= B.
type Side = (usize, usize, OpLoc, Pipe);
type RaceKey = (Mem, Side, Side);
/// A matmul node with the Acc bytes it wrote and its phase.
type MatmulRec = (usize, Vec<(usize, usize)>, Option<Phase>);

const ALL_PIPES: [Pipe; 7] = [
    Pipe::Mte2,
    Pipe::Mte1,
    Pipe::M,
    Pipe::Fix,
    Pipe::V,
    Pipe::Mte3,
    Pipe::S,
];

/// The pipe an event executes on (`All`: every pipe of the core).
fn exec_pipe(e: &Event) -> Pipe {
    match e.sync {
        SyncInfo::SetFlag { src, .. } => src,
        SyncInfo::WaitFlag { dst, .. } => dst,
        SyncInfo::Barrier(p) => p,
        SyncInfo::SetCross { .. } | SyncInfo::WaitCross { .. } => match e.op {
            Op::Sync(SyncOp::SetCrossFlag { pipe, .. })
            | Op::Sync(SyncOp::WaitCrossFlag { pipe, .. }) => *pipe,
            _ => e.pipe,
        },
        SyncInfo::None => e.pipe,
    }
}

fn acc_bytes(e: &Event, write: bool) -> Vec<(usize, usize)> {
    e.ranges_in(MemSpace::Acc, write)
}

fn touch(a: &[(usize, usize)], b: &[(usize, usize)]) -> bool {
    a.iter().any(|x| b.iter().any(|y| x.0 < y.1 && y.0 < x.1))
}

/// Happens-before edges of one block, on nodes `(core, event)` flattened.
fn hb_graph(bt: &tile_backend::sim::trace::BlockTrace) -> (Vec<usize>, Vec<Vec<usize>>) {
    let base: Vec<usize> = (0..3)
        .scan(0, |acc, c| {
            let b = *acc;
            *acc += bt.cores[c].events.len();
            Some(b)
        })
        .collect();
    let n: usize = bt.cores.iter().map(|c| c.events.len()).sum();
    let mut adj = vec![Vec::new(); n];
    for c in 0..3 {
        let evs = &bt.cores[c].events;
        let mut last: BTreeMap<Pipe, usize> = BTreeMap::new();
        let mut pending: BTreeMap<(Pipe, Pipe, u8), usize> = BTreeMap::new();
        let mut matmuls: Vec<MatmulRec> = Vec::new();
        // Final reads and the Acc bytes of the result they released.
        let mut released: Vec<(usize, Vec<(usize, usize)>)> = Vec::new();
        for (i, e) in evs.iter().enumerate() {
            let id = base[c] + i;
            // Program order per pipe; `All` joins every pipe.
            let p = exec_pipe(e);
            let pipes: Vec<Pipe> = if ALL_PIPES.contains(&p) {
                vec![p]
            } else {
                ALL_PIPES.to_vec()
            };
            for q in pipes {
                if let Some(prev) = last.insert(q, id) {
                    adj[prev].push(id);
                }
            }
            match e.sync {
                SyncInfo::SetFlag { src, dst, event } => {
                    pending.insert((src, dst, event), id);
                }
                SyncInfo::WaitFlag { src, dst, event } => {
                    if let Some(s) = pending.remove(&(src, dst, event)) {
                        adj[s].push(id);
                    }
                }
                SyncInfo::WaitCross { from, index } => {
                    let fc = core_index(from);
                    if index < bt.cores[fc].events.len() {
                        adj[base[fc] + index].push(id);
                    }
                }
                _ => {}
            }
            match e.op {
                Op::Matmul(MatmulOp::Matmul { phase, .. }) => {
                    let bytes = acc_bytes(e, true);
                    if phase.is_some() {
                        // The Final read that released an overlapping Final result comes first.
                        for (r, mm_bytes) in &released {
                            if touch(mm_bytes, &bytes) {
                                adj[*r].push(id);
                            }
                        }
                    }
                    released.retain(|(_, mm_bytes)| !touch(mm_bytes, &bytes));
                    matmuls.push((id, bytes, *phase));
                }
                Op::Move(MoveOp::Move {
                    phase: Some(Phase::Final),
                    ..
                })
                | Op::LoadStore(LoadStoreOp::Store {
                    phase: Some(Phase::Final),
                    ..
                }) => {
                    let reads = acc_bytes(e, false);
                    let last_mm = matmuls.iter().rev().find(|m| touch(&m.1, &reads));
                    if let Some((m, mm_bytes, Some(Phase::Final))) = last_mm {
                        adj[*m].push(id);
                        released.push((id, mm_bytes.clone()));
                    }
                }
                _ => {}
            }
        }
    }
    (base, adj)
}

fn reach_from(adj: &[Vec<usize>], s: usize) -> Vec<bool> {
    let mut seen = vec![false; adj.len()];
    let mut q = VecDeque::from([s]);
    while let Some(u) = q.pop_front() {
        for &v in &adj[u] {
            if !seen[v] {
                seen[v] = true;
                q.push_back(v);
            }
        }
    }
    seen
}

/// Every racing pair of the trace, by explicit all-pairs comparison.
fn brute_races(trace: &Trace) -> BTreeSet<RaceKey> {
    struct A {
        block: usize,
        core: usize,
        event: usize,
        node: usize,
        side: Side,
        mem: Mem,
        start: usize,
        end: usize,
        write: bool,
        atomic: bool,
    }
    let mut accs = Vec::new();
    let mut reach: BTreeMap<usize, Vec<Vec<bool>>> = BTreeMap::new();
    for bt in &trace.blocks {
        let (base, adj) = hb_graph(bt);
        reach.insert(
            bt.block,
            (0..adj.len()).map(|s| reach_from(&adj, s)).collect(),
        );
        for (c, core) in bt.cores.iter().enumerate() {
            for (i, e) in core.events.iter().enumerate() {
                let atomic = matches!(
                    e.op,
                    Op::LoadStore(LoadStoreOp::Store {
                        atomic_add: true,
                        ..
                    })
                );
                for a in &e.accesses {
                    accs.push(A {
                        block: bt.block,
                        core: c,
                        event: i,
                        node: base[c] + i,
                        side: (bt.block, c, e.loc, exec_pipe(e)),
                        mem: a.mem,
                        start: a.start,
                        end: a.end,
                        write: a.write,
                        atomic: atomic && a.write,
                    });
                }
            }
        }
    }
    let mut out = BTreeSet::new();
    for (i, a) in accs.iter().enumerate() {
        for b in &accs[i + 1..] {
            if a.mem != b.mem || !(a.write || b.write) || (a.atomic && b.atomic) {
                continue;
            }
            if !(a.start < b.end && b.start < a.end) {
                continue;
            }
            let on_chip = matches!(a.mem, Mem::Chip { .. });
            if on_chip && a.block != b.block {
                continue; // different clusters' buffers
            }
            if (a.block, a.core, a.event) == (b.block, b.core, b.event) {
                continue;
            }
            if a.block == b.block {
                let r = &reach[&a.block];
                if r[a.node][b.node] || r[b.node][a.node] {
                    continue;
                }
            }
            let (x, y) = if a.side <= b.side {
                (a.side, b.side)
            } else {
                (b.side, a.side)
            };
            out.insert((a.mem, x, y));
        }
    }
    out
}

fn detector_races(hz: &[Hazard]) -> BTreeSet<RaceKey> {
    hz.iter()
        .filter(|h| h.kind == HazardKind::Race)
        .map(|h| {
            let s = |i: usize| {
                let o = &h.ops[i];
                (o.block, o.core, o.loc, o.pipe)
            };
            (h.bytes.expect("race bytes").mem, s(0), s(1))
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Race suite.
// ---------------------------------------------------------------------------------------------

fn compiled(kernel: &Kernel) -> Kernel {
    passes::compile(kernel, &Arch::ascend950())
        .unwrap_or_else(|e| panic!("{}: {e}", kernel.name))
        .into_kernel()
}

fn traced(kernel: &Kernel, block_dim: usize) -> Result<(Vec<Hazard>, BTreeSet<RaceKey>), SimError> {
    let mut args = io::generate(kernel, 7)?;
    let trace = support::trace_on(kernel, &support::arch(), &mut args, block_dim)?;
    Ok((hazards::check(kernel, &trace), brute_races(&trace)))
}

fn is_sync(op: &Op) -> bool {
    matches!(
        op,
        Op::Sync(SyncOp::SetFlag { .. })
            | Op::Sync(SyncOp::WaitFlag { .. })
            | Op::Sync(SyncOp::Barrier { .. })
            | Op::Sync(SyncOp::SetCrossFlag { .. })
            | Op::Sync(SyncOp::WaitCrossFlag { .. })
    )
}

/// Removes the ops at the given pre-order indices of a section.
fn remove_ops(stmts: &mut Vec<Stmt>, targets: &BTreeSet<usize>, next: &mut usize) {
    let mut out = Vec::with_capacity(stmts.len());
    for mut s in std::mem::take(stmts) {
        match &mut s {
            Stmt::Op(_) => {
                let i = *next;
                *next += 1;
                if targets.contains(&i) {
                    continue;
                }
            }
            Stmt::For { body, .. } => remove_ops(body, targets, next),
            Stmt::If {
                then_body,
                else_body,
                ..
            } => {
                remove_ops(then_body, targets, next);
                remove_ops(else_body, targets, next);
            }
            Stmt::Let { .. } => {}
        }
        out.push(s);
    }
    *stmts = out;
}

fn without(kernel: &Kernel, locs: &[OpLoc]) -> Kernel {
    let mut k = kernel.clone();
    for sec in [CoreKind::Cube, CoreKind::Vector] {
        let t: BTreeSet<usize> = locs
            .iter()
            .filter(|l| l.section == sec)
            .map(|l| l.index)
            .collect();
        let stmts = match sec {
            CoreKind::Cube => &mut k.cube,
            CoreKind::Vector => &mut k.vector,
        };
        remove_ops(stmts, &t, &mut 0);
    }
    k
}

/// The deletions tried: each sync op alone, each wait with its nearest set of the same triple
/// (the last one before it, else the first after it), each cross-core wait with the sets that
/// release it and each cross-core set with the waits it releases.
fn deletions(kernel: &Kernel) -> Vec<(Vec<OpLoc>, bool)> {
    let ops = kernel.ops();
    let mut out: Vec<(Vec<OpLoc>, bool)> = ops
        .iter()
        .filter(|(_, op)| is_sync(op))
        .map(|(l, op)| (vec![*l], !matches!(op, Op::Sync(SyncOp::Barrier { .. }))))
        .collect();
    for (wl, op) in &ops {
        if let Op::Sync(SyncOp::WaitFlag { src, dst, event }) = op {
            let same = |(l, o): &&(OpLoc, &Op)| {
                l.section == wl.section
                    && matches!(o, Op::Sync(SyncOp::SetFlag { src: s, dst: d, event: e })
                        if (s, d, e) == (src, dst, event))
            };
            let before = ops.iter().filter(same).rfind(|(l, _)| l.index < wl.index);
            let after = ops.iter().filter(same).find(|(l, _)| l.index > wl.index);
            if let Some((sl, _)) = before.or(after) {
                out.push((vec![*sl, *wl], false));
            }
        }
    }
    // Cross-core pairs: cube id i (< 16 to AIV0, >= 16 to AIV1) <-> vector id i % 16.
    let cross = |want_set: bool, sec: CoreKind, id16: u8| -> Vec<OpLoc> {
        ops.iter()
            .filter(|(l, o)| {
                l.section == sec
                    && match o {
                        Op::Sync(SyncOp::SetCrossFlag { id, .. }) if want_set => id % 16 == id16,
                        Op::Sync(SyncOp::WaitCrossFlag { id, .. }) if !want_set => id % 16 == id16,
                        _ => false,
                    }
            })
            .map(|(l, _)| *l)
            .collect()
    };
    for (l, op) in &ops {
        if let (Op::Sync(SyncOp::WaitCrossFlag { id, .. }), CoreKind::Vector) = (op, l.section) {
            let mut v = cross(true, CoreKind::Cube, id % 16);
            v.push(*l);
            out.push((v, false));
        }
        if let (Op::Sync(SyncOp::SetCrossFlag { id, .. }), CoreKind::Vector) = (op, l.section) {
            let mut v = cross(false, CoreKind::Cube, id % 16);
            v.push(*l);
            out.push((v, false));
        }
    }
    out
}

#[derive(Debug, Default)]
struct SuiteStats {
    deletions: usize,
    races: usize,
    hangs: usize,
    poison: usize,
    other_only: usize,
    silent: usize,
}

/// Runs the kernel as compiled (no hazard), then every deletion: the detector's races must equal
/// the brute-force checker's, and a lone set or wait deleted must always be reported.
fn race_suite(kernel: &Kernel, block_dim: usize) -> SuiteStats {
    let k = compiled(kernel);
    let (hz, brute) = traced(&k, block_dim).unwrap_or_else(|e| panic!("{}: {e}", k.name));
    assert!(hz.is_empty(), "{}: correct kernel flagged: {hz:#?}", k.name);
    assert!(brute.is_empty(), "{}: brute force flags {brute:?}", k.name);
    let mut st = SuiteStats::default();
    for (locs, lone) in deletions(&k) {
        st.deletions += 1;
        let what = format!("{} without {:?}", k.name, locs);
        match traced(&without(&k, &locs), block_dim) {
            Err(SimError::Hang { .. }) => st.hangs += 1,
            // Without its wait, a consumer can read a buffer before anything wrote it: the
            // simulator stops on the poison (never-written bytes reaching a value).
            Err(e) if e.to_string().contains("poison") => st.poison += 1,
            Err(e) => panic!("{what}: unexpected error {e}"),
            Ok((hz, brute)) => {
                let det = detector_races(&hz);
                assert_eq!(det, brute, "{what}: detector vs brute force");
                if !det.is_empty() {
                    st.races += 1;
                } else if !hz.is_empty() {
                    st.other_only += 1;
                } else {
                    st.silent += 1;
                    eprintln!("{what}: no hazard (a redundant sync)");
                    assert!(!lone, "{what}: a deleted sync went unreported");
                }
            }
        }
    }
    eprintln!("{}: {st:?}", k.name);
    st
}

#[test]
fn race_suite_matmul_ping_pong() {
    let p = MatmulParams {
        m: 64,
        k: 64,
        n: 32,
        tile_m: 32,
        tile_n: 32,
        tile_k: 16,
        dtype: DType::F16,
    };
    let st = race_suite(&matmul(&p), p.block_dim() as usize);
    assert!(st.races > 0, "{st:?}");
}

#[test]
fn race_suite_matmul_tails() {
    let p = MatmulParams {
        m: 40,
        k: 40,
        n: 24,
        tile_m: 32,
        tile_n: 32,
        tile_k: 16,
        dtype: DType::F16,
    };
    let st = race_suite(&matmul(&p), p.block_dim() as usize);
    assert!(st.races > 0, "{st:?}");
}

#[test]
fn race_suite_attention_cross_flags() {
    let p = AttentionParams {
        ts: 32,
        tkv: 32,
        d: 32,
        handoff: Handoff::CrossFlags,
        ..Default::default()
    };
    let st = race_suite(&attention_tile(&p), p.block_dim() as usize);
    assert!(st.races > 0 && st.hangs > 0, "{st:?}");
}

#[test]
fn race_suite_attention_channels() {
    let p = AttentionParams {
        ts: 32,
        tkv: 32,
        d: 32,
        ..Default::default()
    };
    let st = race_suite(&attention_tile(&p), p.block_dim() as usize);
    assert!(st.races > 0, "{st:?}");
}

#[test]
fn race_suite_gather_matmul() {
    let p = GatherMatmulParams {
        m: 16,
        size: 32,
        cols: 48,
        tokens: 64,
        block_size: 16,
        table_len: 4,
        n: 48,
        tile_n: 16,
        dtype: DType::F16,
    };
    // One block: three ping-pong iterations (the odd half runs under its `if`).
    let st = race_suite(&gather_matmul(&p), 1);
    assert!(st.races > 0, "{st:?}");
    // Two blocks: GM accesses of both, tiles strided over blocks.
    race_suite(&gather_matmul(&p), 2);
}

/// Each AIV gathers 16 rows of `src` at keys it reads from UB: per chunk of 8, one load of the
/// keys into `keys_ub`, then per row a scalar read of `keys_ub` (S), a load of the row (MTE2) and
/// its store (MTE3). The row buffer's flags are written by hand; the pass adds MTE2 -> S after
/// the key load and S -> MTE2 before the next chunk's key load.
fn ub_key_gather() -> Kernel {
    let mut kb = KernelBuilder::new("ub_key_gather");
    let keys = kb.input("keys", DType::I32, [1u64, 32]);
    let src = kb.input("src", DType::F32, [64u64, 8]);
    let out = kb.output("out", DType::F32, [32u64, 8]);
    kb.range(keys, 0.0, 63.0);
    let keys_ub = kb.tile(
        "keys_ub",
        TileType::new(MemSpace::Vec, DType::I32, 1, 8, Layout::ND),
    );
    let row_ub = kb.tile(
        "row_ub",
        TileType::new(MemSpace::Vec, DType::F32, 1, 8, Layout::ND),
    );
    kb.vector(|v| {
        // The row buffer's flags by hand, as the row copies write them (one id, pre-set and
        // drained), so that the pass adds only the scalar reads' pairs.
        v.set_flag(Pipe::Mte3, Pipe::Mte2, 0);
        v.for_range("c", 0, 2, 1, |cb, c| {
            let base = cb.let_("base", Expr::SubBlockIdx * 16u64 + Expr::from(c) * 8);
            cb.load(keys_ub, GmView::nd(keys, base, 1u64, 8u64, 32u64));
            cb.for_range("r", 0, 8, 1, |rb, r| {
                let k = rb.read_tile_scalar("key", keys_ub, r);
                rb.wait_flag(Pipe::Mte3, Pipe::Mte2, 0);
                rb.load(row_ub, GmView::nd(src, Expr::from(k) * 8, 1u64, 8u64, 8u64));
                rb.set_flag(Pipe::Mte2, Pipe::Mte3, 0);
                rb.wait_flag(Pipe::Mte2, Pipe::Mte3, 0);
                let at = (Expr::from(base) + r) * 8;
                rb.store(GmView::nd(out, at, 1u64, 8u64, 8u64), row_ub);
                rb.set_flag(Pipe::Mte3, Pipe::Mte2, 0);
            });
        });
        v.wait_flag(Pipe::Mte3, Pipe::Mte2, 0);
    });
    kb.build()
}

#[test]
fn race_suite_ub_scalar_reads() {
    let k = compiled(&ub_key_gather());
    // The pass ordered the scalar reads both ways.
    let mut pairs = BTreeSet::new();
    walk_ops(&k.vector, &mut |op| {
        if let Op::Sync(SyncOp::SetFlag { src, dst, .. }) = op {
            pairs.insert((*src, *dst));
        }
    });
    for pair in [(Pipe::Mte2, Pipe::S), (Pipe::S, Pipe::Mte2)] {
        assert!(pairs.contains(&pair), "no {pair:?} flag in {pairs:?}");
    }
    let st = race_suite(&ub_key_gather(), 1);
    assert!(st.races > 0, "{st:?}");
}

// ---------------------------------------------------------------------------------------------
// Hand-built failures, each with a fixed version.
// ---------------------------------------------------------------------------------------------

fn planned(kb: KernelBuilder) -> Kernel {
    passes::memory::plan(&kb.build(), &Arch::ascend950()).expect("plan")
}

fn run(kernel: &Kernel, block_dim: usize) -> (Vec<Hazard>, BTreeSet<RaceKey>) {
    traced(kernel, block_dim).unwrap_or_else(|e| panic!("{}: {e}", kernel.name))
}

fn kinds(hz: &[Hazard]) -> Vec<HazardKind> {
    let mut k: Vec<HazardKind> = hz.iter().map(|h| h.kind).collect();
    k.sort();
    k
}

fn assert_clean(kernel: &Kernel, block_dim: usize) {
    let (hz, brute) = run(kernel, block_dim);
    assert!(hz.is_empty(), "{}: {hz:#?}", kernel.name);
    assert!(brute.is_empty());
}

/// Vector cores load 16x16 f32 and store it back; `flag` orders MTE2 before MTE3; `rows_of`
/// chooses the output rows (per AIV, per block); `atomic` makes the store an atomic add.
fn copy_kernel(flag: bool, per_block: bool, atomic: bool) -> Kernel {
    let mut kb = KernelBuilder::new("copy");
    let x = kb.input("x", DType::F32, [64u64, 16]);
    let y = kb.output("y", DType::F32, [64u64, 16]);
    let ub = kb.tile(
        "ub",
        TileType::new(MemSpace::Vec, DType::F32, 16, 16, Layout::ND),
    );
    kb.vector(|v| {
        let row = if per_block {
            Expr::BlockIdx * 32u64 + Expr::SubBlockIdx * 16u64
        } else {
            Expr::SubBlockIdx * 16u64
        };
        v.load(ub, GmView::nd(x, row.clone() * 16u64, 16u64, 16u64, 16u64));
        if flag {
            v.set_flag(Pipe::Mte2, Pipe::Mte3, 0);
            v.wait_flag(Pipe::Mte2, Pipe::Mte3, 0);
        }
        let st = v.store(GmView::nd(y, row * 16u64, 16u64, 16u64, 16u64), ub);
        if atomic {
            st.atomic_add();
        }
    });
    planned(kb)
}

#[test]
fn ub_race_without_flag() {
    let (hz, brute) = run(&copy_kernel(false, true, false), 1);
    let det = detector_races(&hz);
    assert_eq!(det, brute);
    // One race per AIV on its UB: MTE2 writes, MTE3 reads.
    assert_eq!(det.len(), 2, "{hz:#?}");
    assert!(hz.iter().all(|h| h.kind == HazardKind::Race));
    let msg = hz[0].to_string();
    assert!(
        msg.contains("UB of AIV") && msg.contains("MTE2") && msg.contains("MTE3"),
        "{msg}"
    );
    assert_clean(&copy_kernel(true, true, false), 1);
}

#[test]
fn gm_race_between_blocks() {
    // Both blocks store the same rows: a GM race between unordered blocks.
    let (hz, brute) = run(&copy_kernel(true, false, false), 2);
    let det = detector_races(&hz);
    assert_eq!(det, brute);
    assert!(!det.is_empty());
    assert!(hz.iter().any(|h| h.kind == HazardKind::Race
        && h.ops[0].block != h.ops[1].block
        && matches!(h.bytes.map(|b| b.mem), Some(Mem::Gm(1)))));
    // Atomic adds from both blocks do not race; per-block rows do not either.
    assert_clean(&copy_kernel(true, false, true), 2);
    assert_clean(&copy_kernel(true, true, false), 2);
}

fn flag_kernel(f: impl FnOnce(&mut tile_backend::dsl::Body<'_>)) -> Kernel {
    let mut kb = KernelBuilder::new("flags");
    kb.cube(f);
    planned(kb)
}

const A: (Pipe, Pipe, u8) = (Pipe::Mte2, Pipe::Mte1, 0);
const B: (Pipe, Pipe, u8) = (Pipe::Mte1, Pipe::Mte2, 1);

#[test]
fn lost_signal_set_twice() {
    let k = flag_kernel(|c| {
        c.set_flag(A.0, A.1, A.2);
        c.set_flag(A.0, A.1, A.2);
        c.wait_flag(A.0, A.1, A.2);
        c.wait_flag(A.0, A.1, A.2);
    });
    let (hz, _) = run(&k, 1);
    assert_eq!(
        kinds(&hz),
        [HazardKind::LostSignal, HazardKind::UnmatchedWait],
        "{hz:#?}"
    );
    assert!(hz[0].to_string().contains("set_flag(MTE2, MTE1, 0)"));
}

#[test]
fn lost_signal_when_the_wait_is_not_ordered_before_the_next_set() {
    // set, wait, set, wait in program order: MTE2 may set twice before MTE1 waits once.
    let k = flag_kernel(|c| {
        for _ in 0..2 {
            c.set_flag(A.0, A.1, A.2);
            c.wait_flag(A.0, A.1, A.2);
        }
    });
    let (hz, _) = run(&k, 1);
    assert_eq!(kinds(&hz), [HazardKind::LostSignal], "{hz:#?}");
    // Fixed: MTE1 hands the flag back (B) before MTE2 sets A again.
    let k = flag_kernel(|c| {
        for _ in 0..2 {
            c.set_flag(A.0, A.1, A.2);
            c.wait_flag(A.0, A.1, A.2);
            c.set_flag(B.0, B.1, B.2);
            c.wait_flag(B.0, B.1, B.2);
        }
    });
    assert_clean(&k, 1);
    // A barrier(ALL) also orders the wait before the next set.
    let k = flag_kernel(|c| {
        for _ in 0..2 {
            c.set_flag(A.0, A.1, A.2);
            c.wait_flag(A.0, A.1, A.2);
            c.barrier(Pipe::All);
        }
    });
    assert_clean(&k, 1);
    // A barrier on one pipe does not.
    let k = flag_kernel(|c| {
        for _ in 0..2 {
            c.set_flag(A.0, A.1, A.2);
            c.wait_flag(A.0, A.1, A.2);
            c.barrier(Pipe::Mte1);
        }
    });
    assert_eq!(kinds(&run(&k, 1).0), [HazardKind::LostSignal]);
}

#[test]
fn unmatched_wait_and_flag_left_set() {
    let k = flag_kernel(|c| c.wait_flag(A.0, A.1, A.2));
    assert_eq!(kinds(&run(&k, 1).0), [HazardKind::UnmatchedWait]);
    let k = flag_kernel(|c| c.set_flag(A.0, A.1, A.2));
    assert_eq!(kinds(&run(&k, 1).0), [HazardKind::UnconsumedSignal]);
    // The wait must come after the set in program order.
    let k = flag_kernel(|c| {
        c.wait_flag(A.0, A.1, A.2);
        c.set_flag(A.0, A.1, A.2);
    });
    assert_eq!(
        kinds(&run(&k, 1).0),
        [HazardKind::UnmatchedWait, HazardKind::UnconsumedSignal]
    );
    assert_clean(
        &flag_kernel(|c| {
            c.set_flag(A.0, A.1, A.2);
            c.wait_flag(A.0, A.1, A.2);
        }),
        1,
    );
}

fn cross_kernel(handshake: bool, vector_waits: bool) -> Kernel {
    let mut kb = KernelBuilder::new("cross");
    kb.cube(|c| {
        for round in 0..2 {
            if round == 1 && handshake {
                c.wait_cross_flag(Pipe::Fix, 0);
                c.wait_cross_flag(Pipe::Fix, 16);
            }
            c.set_cross_flag(Pipe::Fix, 0);
            c.set_cross_flag(Pipe::Fix, 16);
        }
    });
    kb.vector(|v| {
        if vector_waits {
            v.wait_cross_flag(Pipe::V, 0);
            if handshake {
                v.set_cross_flag(Pipe::V, 0);
            }
            v.wait_cross_flag(Pipe::V, 0);
        }
    });
    planned(kb)
}

#[test]
fn cross_core_lost_and_unconsumed_signals() {
    // The cube signals each AIV twice with nothing ordering the first wait before the second set.
    let (hz, _) = run(&cross_kernel(false, true), 1);
    assert_eq!(
        kinds(&hz),
        [HazardKind::LostSignal, HazardKind::LostSignal],
        "{hz:#?}"
    );
    assert!(hz[0].message.contains("AIV0") || hz[1].message.contains("AIV0"));
    // Fixed: each AIV acknowledges before the cube signals again.
    assert_clean(&cross_kernel(true, true), 1);
    // Nobody waits: four signals left set.
    let (hz, _) = run(&cross_kernel(false, false), 1);
    assert_eq!(kinds(&hz), [HazardKind::UnconsumedSignal; 4]);
}

/// A 16x16 by 16x32 matmul into a [16, 32] Acc tile whose valid N is `acc_n`, with phase `phase`,
/// read by the Fixpipe: `split` = DualModeSplitN to both UBs with phase Final, else a store to GM
/// after an M -> FIX flag.
fn phase_kernel(phase: Phase, split: bool, acc_n: u64) -> Kernel {
    let mut kb = KernelBuilder::new("phase");
    let a = kb.input("a", DType::F16, [16u64, 16]);
    let b = kb.input("b", DType::F16, [16u64, 32]);
    let c = kb.output("c", DType::F32, [16u64, 32]);
    let t = |space, rows, cols, layout| TileType::new(space, DType::F16, rows, cols, layout);
    let a1 = kb.tile("a1", t(MemSpace::Mat, 16, 16, Layout::NZ));
    let b1 = kb.tile("b1", t(MemSpace::Mat, 16, 32, Layout::NZ));
    let a0 = kb.tile("a0", t(MemSpace::Left, 16, 16, Layout::NZ));
    let b0 = kb.tile("b0", t(MemSpace::Right, 16, 32, Layout::ZN));
    let acc = kb.tile(
        "acc",
        TileType::new(MemSpace::Acc, DType::F32, 16, 32, Layout::NZ).valid(16, acc_n),
    );
    let ub = kb.tile(
        "ub",
        TileType::new(MemSpace::Vec, DType::F32, 16, 16, Layout::ND),
    );
    kb.cube(|q| {
        q.load(a1, GmView::nd(a, 0, 16u64, 16u64, 16u64));
        q.load(b1, GmView::nd(b, 0, 16u64, 32u64, 32u64));
        q.set_flag(Pipe::Mte2, Pipe::Mte1, 0);
        q.wait_flag(Pipe::Mte2, Pipe::Mte1, 0);
        q.mov(a0, a1);
        q.mov(b0, b1);
        q.set_flag(Pipe::Mte1, Pipe::M, 0);
        q.wait_flag(Pipe::Mte1, Pipe::M, 0);
        q.matmul(acc, a0, b0).phase(phase);
        if split {
            q.mov(ub, acc)
                .mode(AccToVecMode::DualModeSplitN)
                .phase(Phase::Final);
        } else {
            q.set_flag(Pipe::M, Pipe::Fix, 0);
            q.wait_flag(Pipe::M, Pipe::Fix, 0);
            q.store(GmView::nd(c, 0, 16u64, acc_n, 32u64), acc);
        }
    });
    planned(kb)
}

#[test]
fn final_read_after_partial_matmul_hangs() {
    let (hz, brute) = run(&phase_kernel(Phase::Partial, true, 32), 1);
    // No Final matmul: the read hangs, and without the unit-flag edge it races with the matmul.
    assert_eq!(
        kinds(&hz),
        [HazardKind::Race, HazardKind::PhaseHang],
        "{hz:#?}"
    );
    assert_eq!(detector_races(&hz), brute);
    let hang = hz.iter().find(|h| h.kind == HazardKind::PhaseHang).unwrap();
    assert!(hang.message.contains("Partial"), "{hang}");
    // Fixed: the matmul is Final, and the unit flag orders it before the read (no race).
    assert_clean(&phase_kernel(Phase::Final, true, 32), 1);
}

#[test]
fn final_read_without_phase_on_matmul_hangs_and_races() {
    let mut k = phase_kernel(Phase::Final, true, 32);
    fn strip(stmts: &mut [Stmt]) {
        for s in stmts {
            if let Stmt::Op(Op::Matmul(MatmulOp::Matmul { phase, .. })) = s {
                *phase = None;
            }
        }
    }
    strip(&mut k.cube);
    let (hz, brute) = run(&k, 1);
    let det = detector_races(&hz);
    assert_eq!(det, brute);
    // No Final matmul: hang; and without the unit-flag edge the Acc read races with the matmul.
    assert!(kinds(&hz).contains(&HazardKind::PhaseHang), "{hz:#?}");
    assert!(!det.is_empty());
}

#[test]
fn matmul_chain_ending_in_partial() {
    let (hz, _) = run(&phase_kernel(Phase::Partial, false, 32), 1);
    assert_eq!(kinds(&hz), [HazardKind::PartialChain], "{hz:#?}");
    assert_clean(&phase_kernel(Phase::Final, false, 32), 1);
}

#[test]
fn split_n_unaligned_under_phase() {
    let (hz, _) = run(&phase_kernel(Phase::Final, true, 16), 1);
    assert_eq!(kinds(&hz), [HazardKind::SplitNUnaligned], "{hz:#?}");
    assert!(hz[0].message.contains("16"));
    assert_clean(&phase_kernel(Phase::Final, true, 32), 1);
}

/// Each AIV writes one int32 scalar: element `sub * stride (+ block * 2 * stride)`.
fn scalar_kernel(stride: u64, per_block: bool) -> Kernel {
    let mut kb = KernelBuilder::new("scalars");
    let out = kb.output("out", DType::I32, [1u64, 128]);
    kb.vector(|v| {
        let mut idx = Expr::SubBlockIdx * stride;
        if per_block {
            idx = idx + Expr::BlockIdx * (2 * stride);
        }
        v.write_scalar(out, idx, 1i64);
    });
    planned(kb)
}

#[test]
fn scalar_writes_sharing_a_line() {
    // AIV0 writes element 0, AIV1 element 1: one 64-byte line, two cores.
    let (hz, _) = run(&scalar_kernel(1, true), 1);
    assert_eq!(kinds(&hz), [HazardKind::ScalarLineShared], "{hz:#?}");
    assert!(hz[0].message.contains("[0, 64)"));
    // Fixed: 16 int32 apart, each core owns whole lines (also across blocks).
    assert_clean(&scalar_kernel(16, true), 1);
    assert_clean(&scalar_kernel(16, true), 2);
    // Two blocks writing the same elements: a race and a shared line.
    let (hz, brute) = run(&scalar_kernel(16, false), 2);
    assert_eq!(detector_races(&hz), brute);
    let k = kinds(&hz);
    assert!(k.contains(&HazardKind::Race) && k.contains(&HazardKind::ScalarLineShared));
}

#[test]
fn larger_trace_checks_quickly() {
    // Many K steps over two blocks: the sweep stays fast and the correct kernel stays clean.
    let p = MatmulParams {
        m: 64,
        k: 1024,
        n: 32,
        tile_m: 32,
        tile_n: 32,
        tile_k: 32,
        dtype: DType::F16,
    };
    let k = compiled(&matmul(&p));
    let mut args = io::generate(&k, 1).unwrap();
    let trace = support::trace_on(&k, &support::arch(), &mut args, p.block_dim() as usize).unwrap();
    let events: usize = trace
        .blocks
        .iter()
        .flat_map(|b| b.cores.iter())
        .map(|c| c.events.len())
        .sum();
    let t = std::time::Instant::now();
    let hz = hazards::check(&k, &trace);
    let dt = t.elapsed();
    eprintln!("{events} events checked in {dt:?}");
    assert!(hz.is_empty(), "{hz:#?}");
    assert!(events > 500);
}

/// A Final matmul read by Final Fixpipe stores inside a loop of `iters` iterations; with
/// `matmul_in_loop` each iteration recomputes (a new Final matmul per Final store).
fn final_store_loop_kernel(iters: i64, matmul_in_loop: bool) -> Kernel {
    let mut kb = KernelBuilder::new("final_store_loop");
    let a = kb.input("a", DType::F16, [16u64, 16]);
    let b = kb.input("b", DType::F16, [16u64, 16]);
    let c = kb.output("c", DType::F32, [iters as u64 * 16, 16]);
    let t = |space, layout| TileType::new(space, DType::F16, 16, 16, layout);
    let a1 = kb.tile("a1", t(MemSpace::Mat, Layout::NZ));
    let b1 = kb.tile("b1", t(MemSpace::Mat, Layout::NZ));
    let a0 = kb.tile("a0", t(MemSpace::Left, Layout::NZ));
    let b0 = kb.tile("b0", t(MemSpace::Right, Layout::ZN));
    let acc = kb.tile(
        "acc",
        TileType::new(MemSpace::Acc, DType::F32, 16, 16, Layout::NZ),
    );
    kb.cube(|q| {
        q.load(a1, GmView::nd(a, 0, 16u64, 16u64, 16u64));
        q.load(b1, GmView::nd(b, 0, 16u64, 16u64, 16u64));
        q.set_flag(Pipe::Mte2, Pipe::Mte1, 0);
        q.wait_flag(Pipe::Mte2, Pipe::Mte1, 0);
        q.mov(a0, a1);
        q.mov(b0, b1);
        q.set_flag(Pipe::Mte1, Pipe::M, 0);
        q.wait_flag(Pipe::Mte1, Pipe::M, 0);
        if !matmul_in_loop {
            q.matmul(acc, a0, b0).phase(Phase::Final);
        }
        q.for_range("i", 0, iters, 1, |q, i| {
            if matmul_in_loop {
                q.matmul(acc, a0, b0).phase(Phase::Final);
            }
            q.store(GmView::nd(c, i * 256, 16u64, 16u64, 16u64), acc)
                .phase(Phase::Final);
        });
    });
    planned(kb)
}

#[test]
fn final_store_in_a_loop_without_a_new_final_matmul_hangs() {
    let (hz, _) = run(&final_store_loop_kernel(2, false), 1);
    assert_eq!(kinds(&hz), [HazardKind::PhaseHang], "{hz:#?}");
    assert!(hz[0].message.contains("already taken"), "{}", hz[0].message);
    // One iteration, or a Final matmul per Final store: clean.
    assert_clean(&final_store_loop_kernel(1, false), 1);
    assert_clean(&final_store_loop_kernel(3, true), 1);
}
