//! Hazard detection over a traced run (ASCEND950.md §4, §5): races, lost signals, waits that can
//! never be satisfied, unit-flag (phase) failures and 64-byte line sharing of scalar writes.
//!
//! # Happens-before
//!
//! Each block has 21 threads: one per (core, pipe) for the AIC, AIV0 and AIV1 and the pipes MTE2,
//! MTE1, M, FIX, V, MTE3 and S. An event runs on the thread of its recorded pipe, except sync ops:
//! `set_flag` runs on its source pipe, `wait_flag` on its destination pipe, `pipe_barrier(P)` on
//! `P`, cross-core sets and waits on the pipe named by the op; a sync naming `PIPE_ALL` runs on
//! every pipe of its core. Happens-before is the transitive closure of:
//!
//! 1. program order on a thread;
//! 2. `set_flag(s, d, e)` -> the `wait_flag(s, d, e)` it releases: the flag is binary, so each
//!    wait takes the latest set of its triple not yet taken, in the core's program order;
//! 3. `pipe_barrier(PIPE_ALL)` (and any sync on `PIPE_ALL`): every earlier event of the core on
//!    any pipe before it, it before every later event of the core; `pipe_barrier(P)` orders
//!    only `P` (nothing beyond program order);
//! 4. the unit flag: a matmul with phase Final -> the Fixpipe move or store with phase Final that
//!    reads the same Acc bytes (the latest matmul in program order that wrote any of them; one
//!    Final read per Final matmul), and that Final read -> the next phased matmul into those bytes
//!    (the read releases the tile);
//! 5. a cross-core set -> the cross-core wait it released (recorded in the trace).
//!
//! Vector clocks are computed per block over a topological order of these edges, so the verdicts
//! do not depend on the simulator's interleaving. Blocks are unordered: conflicting GM accesses of
//! different blocks always race (atomic-add stores do not race with each other).
//!
//! # Checks
//!
//! - [`HazardKind::Race`]: per memory (an on-chip buffer of one block, or a GM argument across
//!   blocks), an event's runs are coalesced, sorted by start and swept; every overlapping pair
//!   with a write whose events are unordered is reported, merged per (memory, op pair).
//! - [`HazardKind::LostSignal`]: a `set_flag` while a set of its triple is pending in program
//!   order; or a `set_flag` not ordered after the wait that took the previous set of its triple;
//!   or a cross-core set to a slot not ordered after the wait that consumed the previous set to
//!   that slot (binary flags: the set can land while the flag is still up).
//! - [`HazardKind::UnmatchedWait`]: a `wait_flag` with no pending set of its triple (the
//!   simulator does not block on intra-core flags; a cross-core wait that never gets its signal
//!   is a [`SimError::Hang`](super::SimError::Hang) of the run itself).
//! - [`HazardKind::UnconsumedSignal`]: an intra-core or cross-core set never waited for.
//! - [`HazardKind::PhaseHang`]: a Fixpipe move with phase Final whose latest overlapping matmul
//!   has no phase Final (or that no matmul wrote).
//! - [`HazardKind::PartialChain`]: a Partial matmul read by a Fixpipe op without phase,
//!   overwritten by a matmul that does not continue the chain (accumulate with a phase), or never
//!   completed nor read.
//! - [`HazardKind::SplitNUnaligned`]: DualModeSplitN with a phase whose source valid N (static, a
//!   constant `set_validshape`, else the matmul's N when that is not 32-aligned) is not a
//!   multiple of 32.
//! - [`HazardKind::ScalarLineShared`]: `write_scalar`s of two cores or blocks into one 64-byte
//!   line of a GM argument.

use super::trace::{core_index, BlockTrace, Event, Mem, SyncInfo, Trace};
use crate::ir::{
    AccToVecMode, Kernel, LoadStoreOp, MatmulOp, MemSpace, MoveOp, Op, OpLoc, ParamKind, Phase,
    Pipe, ScalarOp, UnitFlag, ValidDim, VectorOp,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

/// What kind of hazard was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HazardKind {
    /// Two accesses to overlapping bytes, at least one a write, unordered by happens-before.
    Race,
    /// A flag set while a previous set of it may still be pending (binary flags: one is lost).
    LostSignal,
    /// A `wait_flag` with no earlier set of its triple to take: the pipe hangs.
    UnmatchedWait,
    /// A flag (intra-core or cross-core) set but never waited for, left set at kernel end.
    UnconsumedSignal,
    /// A Fixpipe read with phase Final whose Acc tile's last matmul had no phase Final: hang.
    PhaseHang,
    /// A matmul chain on an Acc tile that ends with phase Partial.
    PartialChain,
    /// DualModeSplitN under phase with a valid N that is not a multiple of 32: can hang.
    SplitNUnaligned,
    /// Scalar writes from different cores (or blocks) into one 64-byte GM line.
    ScalarLineShared,
}

impl fmt::Display for HazardKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HazardKind::Race => "race",
            HazardKind::LostSignal => "lost signal",
            HazardKind::UnmatchedWait => "unmatched wait (hang)",
            HazardKind::UnconsumedSignal => "signal never consumed",
            HazardKind::PhaseHang => "phase hang",
            HazardKind::PartialChain => "matmul chain ends in Partial",
            HazardKind::SplitNUnaligned => "DualModeSplitN with unaligned N under phase",
            HazardKind::ScalarLineShared => "scalar writes share a 64-byte line",
        })
    }
}

/// One executed op a hazard names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HazardOp {
    /// Block index.
    pub block: usize,
    /// Position of the core in [`BlockTrace::cores`] (see [`core_index`]).
    pub core: usize,
    /// The pipe (thread) the op ran on for happens-before.
    pub pipe: Pipe,
    /// Where the op is in the kernel.
    pub loc: OpLoc,
    /// Index of the event in its core's trace.
    pub event: usize,
    /// Op name.
    pub op: &'static str,
}

impl fmt::Display for HazardOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {} ({}, event {})",
            core_name(self.core),
            self.pipe,
            self.loc,
            self.op,
            self.event
        )
    }
}

/// A byte range of one memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ByteRange {
    /// The memory (a GM argument or an on-chip buffer of the hazard's block).
    pub mem: Mem,
    /// First byte.
    pub start: usize,
    /// One past the last byte.
    pub end: usize,
}

/// A hazard found in a trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hazard {
    /// What kind.
    pub kind: HazardKind,
    /// The block (the first op's block for hazards across blocks).
    pub block: usize,
    /// The ops involved (for a race: the two accessing ops, in a canonical order).
    pub ops: Vec<HazardOp>,
    /// The bytes involved (for a race: the hull of the overlapping bytes over all instances).
    pub bytes: Option<ByteRange>,
    /// How many dynamic instances were merged into this report.
    pub instances: usize,
    /// Human-readable explanation naming ops, cores, pipes and bytes.
    pub message: String,
}

impl fmt::Display for Hazard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} in block {}: {}", self.kind, self.block, self.message)
    }
}

const PIPES: [Pipe; 7] = Pipe::ALL;
const NP: usize = PIPES.len();
const NT: usize = 3 * NP;

fn core_name(c: usize) -> &'static str {
    match c {
        0 => "AIC",
        1 => "AIV0",
        _ => "AIV1",
    }
}

/// The pipe an event occupies for happens-before; `None` for every pipe of its core.
fn place(e: &Event) -> Option<Pipe> {
    let p = super::timeline::event_pipe(e);
    p.index().map(|_| p)
}

/// The thread whose clock component dates an event (S for all-pipe events).
fn thread(core: usize, e: &Event) -> usize {
    core * NP + place(e).unwrap_or(Pipe::S).index().unwrap_or(NP - 1)
}

fn hop(block: usize, core: usize, idx: usize, e: &Event) -> HazardOp {
    HazardOp {
        block,
        core,
        pipe: place(e).unwrap_or(Pipe::All),
        loc: e.loc,
        event: idx,
        op: e.op.name(),
    }
}

fn mem_name(kernel: &Kernel, m: Mem) -> String {
    match m {
        Mem::Gm(p) => match kernel.params.get(p as usize) {
            Some(par) => format!("GM `{}`", par.name),
            None => format!("GM argument {p}"),
        },
        Mem::Chip {
            space: MemSpace::Vec,
            aiv,
        } => format!("UB of AIV{aiv}"),
        Mem::Chip { space, .. } => format!("{space}"),
    }
}

fn overlaps(a: (usize, usize), b: (usize, usize)) -> bool {
    a.0 < b.1 && b.0 < a.1
}

fn acc_ranges(e: &Event, write: bool) -> Vec<(usize, usize)> {
    e.ranges_in(MemSpace::Acc, write)
}

fn any_overlap(a: &[(usize, usize)], b: &[(usize, usize)]) -> bool {
    a.iter().any(|x| b.iter().any(|y| overlaps(*x, *y)))
}

/// Happens-before of one block: a vector clock per event.
struct BlockHb {
    vc: [Vec<Vec<u32>>; 3],
    threads: [Vec<usize>; 3],
}

impl BlockHb {
    /// True when event `a` happens before (or is) event `b`.
    fn hb(&self, a: (usize, usize), b: (usize, usize)) -> bool {
        let Some(&t) = self.threads[a.0].get(a.1) else {
            return false;
        };
        match (self.vc[a.0].get(a.1), self.vc[b.0].get(b.1)) {
            (Some(va), Some(vb)) => va[t] <= vb[t],
            _ => false,
        }
    }
}

/// Per-block analysis state shared by the passes.
struct BlockScan<'a, 'k> {
    kernel: &'a Kernel,
    bt: &'a BlockTrace<'k>,
    incoming: [Vec<Vec<(usize, usize)>>; 3],
    /// (wait that took the previous set, next set of the same triple): the set may be lost
    /// unless the wait happens before it.
    maybe_lost: Vec<((usize, usize), (usize, usize))>,
    hazards: Vec<Hazard>,
}

impl<'a, 'k> BlockScan<'a, 'k> {
    fn ev(&self, (c, i): (usize, usize)) -> &'a Event<'k> {
        &self.bt.cores[c].events[i]
    }

    fn op(&self, at: (usize, usize)) -> HazardOp {
        hop(self.bt.block, at.0, at.1, self.ev(at))
    }

    fn push(&mut self, kind: HazardKind, ops: Vec<HazardOp>, message: String) {
        self.hazards.push(Hazard {
            kind,
            block: self.bt.block,
            ops,
            bytes: None,
            instances: 1,
            message,
        });
    }

    /// Intra-core flags: edges, lost signals, unmatched waits, flags left set.
    fn flags(&mut self, c: usize) {
        type Triple = (Pipe, Pipe, u8);
        #[derive(Default)]
        struct St {
            pending: Option<usize>,
            last_wait: Option<usize>,
        }
        let mut st: BTreeMap<Triple, St> = BTreeMap::new();
        let events = &self.bt.cores[c].events;
        for (i, e) in events.iter().enumerate() {
            match e.sync {
                SyncInfo::SetFlag { src, dst, event } => {
                    let s = st.entry((src, dst, event)).or_default();
                    let prev = s.pending.replace(i);
                    let last_wait = s.last_wait;
                    match prev {
                        Some(p) => {
                            let ops = vec![self.op((c, p)), self.op((c, i))];
                            let msg = format!(
                                "set_flag({src}, {dst}, {event}) at {} sets the flag again while \
                                 the set at {} is still pending (no wait in between): one signal \
                                 is lost",
                                ops[1], ops[0]
                            );
                            self.push(HazardKind::LostSignal, ops, msg);
                        }
                        None => {
                            if let Some(w) = last_wait {
                                self.maybe_lost.push(((c, w), (c, i)));
                            }
                        }
                    }
                }
                SyncInfo::WaitFlag { src, dst, event } => {
                    let s = st.entry((src, dst, event)).or_default();
                    match s.pending.take() {
                        Some(p) => {
                            s.last_wait = Some(i);
                            self.incoming[c][i].push((c, p));
                        }
                        None => {
                            let ops = vec![self.op((c, i))];
                            let msg = format!(
                                "wait_flag({src}, {dst}, {event}) at {} has no earlier \
                                 set_flag({src}, {dst}, {event}) to take: {dst} waits forever",
                                ops[0]
                            );
                            self.push(HazardKind::UnmatchedWait, ops, msg);
                        }
                    }
                }
                _ => {}
            }
        }
        for ((src, dst, event), s) in st {
            if let Some(p) = s.pending {
                let ops = vec![self.op((c, p))];
                let msg = format!(
                    "set_flag({src}, {dst}, {event}) at {} is never waited for: the flag is left \
                     set at kernel end",
                    ops[0]
                );
                self.push(HazardKind::UnconsumedSignal, ops, msg);
            }
        }
    }

    /// Cross-core waits: edges from the set that released them.
    fn cross_edges(&mut self, c: usize) {
        for (i, e) in self.bt.cores[c].events.iter().enumerate() {
            if let SyncInfo::WaitCross { from, index } = e.sync {
                let fc = core_index(from);
                if index < self.bt.cores[fc].events.len() {
                    self.incoming[c][i].push((fc, index));
                }
            }
        }
    }

    /// The unit flag (phase): edges, and the phase failures of ASCEND950.md §4 / §5.
    fn phases(&mut self, c: usize) {
        let mut mms: Vec<Mm> = Vec::new();
        // Matmuls no later matmul overlapped yet (indices into `mms`).
        let mut live: Vec<usize> = Vec::new();
        let events = &self.bt.cores[c].events;
        for (i, e) in events.iter().enumerate() {
            match e.op {
                Op::Matmul(MatmulOp::Matmul { phase, .. }) => {
                    let ranges = acc_ranges(e, true);
                    let (over, keep): (Vec<usize>, Vec<usize>) = live
                        .iter()
                        .partition(|&&k| any_overlap(&mms[k].ranges, &ranges));
                    for k in over {
                        let (idx, phase, read) = (mms[k].idx, mms[k].phase, mms[k].read);
                        self.partial_end(c, idx, phase, read, Some(i));
                        // The unit flag's release: a Final read frees the Acc tile, and the next
                        // phased matmul into it waits for that.
                        if let (Op::Matmul(MatmulOp::Matmul { phase: Some(_), .. }), Some(r)) =
                            (e.op, mms[k].released_by)
                        {
                            self.incoming[c][i].push((c, r));
                        }
                    }
                    live = keep;
                    live.push(mms.len());
                    mms.push(Mm {
                        idx: i,
                        ranges,
                        phase: *phase,
                        read: false,
                        released_by: None,
                    });
                }
                Op::Move(MoveOp::Move { .. }) | Op::LoadStore(LoadStoreOp::Store { .. }) => {
                    let reads = acc_ranges(e, false);
                    if reads.is_empty() {
                        continue;
                    }
                    let phase = match e.op.unit_flag() {
                        Some(UnitFlag::Read(_, p)) => Some(p),
                        Some(UnitFlag::Matmul(..)) | None => None,
                    };
                    // The latest matmul (program order) that wrote any of the bytes read. A Final
                    // matmul's unit flag is taken by one Final read: a second Final read of the
                    // same result (e.g. a Final store inside a loop) waits forever.
                    let mut released = None;
                    let found = mms
                        .iter_mut()
                        .rev()
                        .find(|m| any_overlap(&m.ranges, &reads))
                        .map(|m| {
                            m.read = true;
                            if phase == Some(Phase::Final) && m.phase == Some(Phase::Final) {
                                released = m.released_by.replace(i);
                            }
                            (m.idx, m.phase)
                        });
                    match (found, released) {
                        (Some((m, _)), Some(first)) => {
                            let ops = vec![self.op((c, i)), self.op((c, m)), self.op((c, first))];
                            let msg = format!(
                                "the Fixpipe read with phase Final at {} waits for a Final matmul, but \
                                 the unit flag of the Final matmul at {} was already taken by the Final \
                                 read at {} and no new Final matmul follows: hang",
                                ops[0], ops[1], ops[2]
                            );
                            self.push(HazardKind::PhaseHang, ops, msg);
                        }
                        _ => self.fixpipe_read(c, i, phase, found),
                    }
                }
                Op::LoadStore(LoadStoreOp::Load { .. })
                | Op::Gather(_)
                | Op::Vector(_)
                | Op::Sort(_)
                | Op::Scalar(_)
                | Op::Sync(_) => {}
            }
        }
        for k in live {
            let (idx, phase, read) = (mms[k].idx, mms[k].phase, mms[k].read);
            self.partial_end(c, idx, phase, read, None);
        }
    }

    /// A Partial matmul superseded by `next` (or left at kernel end) without a read.
    fn partial_end(
        &mut self,
        c: usize,
        idx: usize,
        phase: Option<Phase>,
        read: bool,
        next: Option<usize>,
    ) {
        if phase != Some(Phase::Partial) || read {
            return;
        }
        if let Some(n) = next {
            // A chain continues when the next matmul accumulates with a phase.
            if let Op::Matmul(MatmulOp::Matmul {
                accumulate: true,
                phase: Some(_),
                ..
            }) = self.ev((c, n)).op
            {
                return;
            }
        }
        let mut ops = vec![self.op((c, idx))];
        let why = match next {
            Some(n) => {
                ops.push(self.op((c, n)));
                format!("is overwritten by {} before any Final", ops[1])
            }
            None => "is never completed by a Final matmul nor read".to_string(),
        };
        let msg = format!(
            "the matmul chain ending with the Partial matmul at {} {why}",
            ops[0]
        );
        self.push(HazardKind::PartialChain, ops, msg);
    }

    fn fixpipe_read(
        &mut self,
        c: usize,
        i: usize,
        phase: Option<Phase>,
        found: Option<(usize, Option<Phase>)>,
    ) {
        let e = self.ev((c, i));
        if phase == Some(Phase::Final) {
            match found {
                Some((m, Some(Phase::Final))) => self.incoming[c][i].push((c, m)),
                Some((m, mp)) => {
                    let ops = vec![self.op((c, i)), self.op((c, m))];
                    let msg = format!(
                        "the Fixpipe read with phase Final at {} waits for a Final matmul, but \
                         the last matmul into its Acc bytes ({}) has phase {mp:?}: hang",
                        ops[0], ops[1]
                    );
                    self.push(HazardKind::PhaseHang, ops, msg);
                }
                None => {
                    let ops = vec![self.op((c, i))];
                    let msg = format!(
                        "the Fixpipe read with phase Final at {} waits for a Final matmul, but \
                         no matmul wrote its Acc bytes: hang",
                        ops[0]
                    );
                    self.push(HazardKind::PhaseHang, ops, msg);
                }
            }
        } else if let Some((m, Some(Phase::Partial))) = found {
            let ops = vec![self.op((c, m)), self.op((c, i))];
            let msg = format!(
                "the matmul chain read by {} ends with the Partial matmul at {}",
                ops[1], ops[0]
            );
            self.push(HazardKind::PartialChain, ops, msg);
        }
        if let Op::Move(MoveOp::Move {
            src,
            acc_to_vec: Some(AccToVecMode::DualModeSplitN),
            phase: Some(_),
            ..
        }) = e.op
        {
            let cube_n = found.and_then(|(m, _)| self.ev((c, m)).cube).map(|x| x[2]);
            let valid = split_n_valid(self.kernel, &self.bt.cores[c].events[..i], src, cube_n);
            if let Some((n, how)) = valid {
                if n % 32 != 0 {
                    let ops = vec![self.op((c, i))];
                    let msg = format!(
                        "DualModeSplitN with a phase at {} moves an Acc tile whose valid N is \
                         {how} {n}, not a multiple of 32: the hardware can hang (pad N to 32 \
                         before the matmul)",
                        ops[0]
                    );
                    self.push(HazardKind::SplitNUnaligned, ops, msg);
                }
            }
        }
    }

    /// Cross-core lost and unconsumed signals, once clocks are known.
    fn cross_signals(&mut self, hb: &BlockHb) {
        // consumer of each set: (setter core, set idx) -> (waiter core, wait idx)
        let mut consumer: HashMap<(usize, usize), (usize, usize)> = HashMap::new();
        for (c, core) in self.bt.cores.iter().enumerate() {
            for (i, e) in core.events.iter().enumerate() {
                if let SyncInfo::WaitCross { from, index } = e.sync {
                    consumer.insert((core_index(from), index), (c, i));
                }
            }
        }
        // sets per (setter, receiver, slot), in the setter's program order
        let mut slots: BTreeMap<(usize, usize, u8), Vec<usize>> = BTreeMap::new();
        for (c, core) in self.bt.cores.iter().enumerate() {
            for (i, e) in core.events.iter().enumerate() {
                if let SyncInfo::SetCross { to, slot } = e.sync {
                    slots.entry((c, core_index(to), slot)).or_default().push(i);
                }
            }
        }
        for ((c, to, slot), sets) in slots {
            for (k, &s) in sets.iter().enumerate() {
                match consumer.get(&(c, s)) {
                    None => {
                        let ops = vec![self.op((c, s))];
                        let msg = format!(
                            "the cross-core signal at {} to {} flag {slot} is never consumed",
                            ops[0],
                            core_name(to)
                        );
                        self.push(HazardKind::UnconsumedSignal, ops, msg);
                    }
                    Some(&w) => {
                        if let Some(&next) = sets.get(k + 1) {
                            if !hb.hb(w, (c, next)) {
                                let ops = vec![self.op((c, s)), self.op(w), self.op((c, next))];
                                let msg = format!(
                                    "the cross-core signal at {} to {} flag {slot} is set again \
                                     at {} while nothing orders its wait ({}) before that: the \
                                     second signal can be lost",
                                    ops[0],
                                    core_name(to),
                                    ops[2],
                                    ops[1]
                                );
                                self.push(HazardKind::LostSignal, ops, msg);
                            }
                        }
                    }
                }
            }
        }
    }

    /// Intra-core sets that may fire before the wait that took the previous set.
    fn possibly_lost(&mut self, hb: &BlockHb) {
        for (w, s) in std::mem::take(&mut self.maybe_lost) {
            if hb.hb(w, s) {
                continue;
            }
            let (src, dst, event) = match self.ev(s).sync {
                SyncInfo::SetFlag { src, dst, event } => (src, dst, event),
                _ => continue,
            };
            let ops = vec![self.op(w), self.op(s)];
            let msg = format!(
                "set_flag({src}, {dst}, {event}) at {} is not ordered after the wait at {} that \
                 takes the previous set: {src} can set the flag twice before {dst} waits, and \
                 one signal is lost",
                ops[1], ops[0]
            );
            self.push(HazardKind::LostSignal, ops, msg);
        }
    }

    /// Vector clocks over a topological order of the edges.
    fn clocks(&self) -> BlockHb {
        let cores = &self.bt.cores;
        let n = [
            cores[0].events.len(),
            cores[1].events.len(),
            cores[2].events.len(),
        ];
        let mut vc: [Vec<Vec<u32>>; 3] = Default::default();
        let mut threads: [Vec<usize>; 3] = Default::default();
        for c in 0..3 {
            vc[c].reserve(n[c]);
            threads[c] = cores[c].events.iter().map(|e| thread(c, e)).collect();
        }
        let mut cur = vec![vec![0u32; NT]; NT];
        let mut ptr = [0usize; 3];
        let mut force = false;
        while (0..3).any(|c| ptr[c] < n[c]) {
            let mut progressed = false;
            for c in 0..3 {
                while ptr[c] < n[c] {
                    let i = ptr[c];
                    let ready = self.incoming[c][i]
                        .iter()
                        .all(|&(c2, i2)| c2 == c || ptr[c2] > i2);
                    if !ready && !force {
                        break;
                    }
                    force = false;
                    let e = &cores[c].events[i];
                    let t = threads[c][i];
                    let all = place(e).is_none();
                    let mut v = if all {
                        let mut v = vec![0u32; NT];
                        for p in 0..NP {
                            join(&mut v, &cur[c * NP + p]);
                        }
                        v
                    } else {
                        cur[t].clone()
                    };
                    for &(c2, i2) in &self.incoming[c][i] {
                        if let Some(sv) = vc[c2].get(i2) {
                            join(&mut v, sv);
                        }
                    }
                    v[t] += 1;
                    if all {
                        for p in 0..NP {
                            cur[c * NP + p].clone_from(&v);
                        }
                    } else {
                        cur[t].clone_from(&v);
                    }
                    vc[c].push(v);
                    ptr[c] += 1;
                    progressed = true;
                }
            }
            // A malformed trace (a wait before its set): take the next event anyway.
            force = !progressed;
        }
        BlockHb { vc, threads }
    }
}

/// A matmul whose Acc bytes no later matmul has overwritten yet.
struct Mm {
    idx: usize,
    ranges: Vec<(usize, usize)>,
    phase: Option<Phase>,
    read: bool,
    /// The Final read that took this Final matmul's unit flag, if one did.
    released_by: Option<usize>,
}

fn join(v: &mut [u32], w: &[u32]) {
    for (a, b) in v.iter_mut().zip(w) {
        *a = (*a).max(*b);
    }
}

/// The valid N of a DualModeSplitN source: static, a constant `set_validshape` earlier on the
/// core, or (an upper bound) the N the last matmul computed when that is not 32-aligned.
fn split_n_valid(
    kernel: &Kernel,
    before: &[Event],
    src: &crate::ir::TileRef,
    cube_n: Option<usize>,
) -> Option<(u64, &'static str)> {
    let decl = kernel.try_tile(src.tile)?;
    if let ValidDim::Static(v) = decl.ty.valid_cols {
        return Some((v, ""));
    }
    let set = before.iter().rev().find_map(|e| {
        let Op::Vector(VectorOp::SetValidShape { tile, cols, .. }) = e.op else {
            return None;
        };
        (tile.tile == src.tile).then(|| cols.as_const())
    });
    match set {
        Some(Some(v)) if v >= 0 => Some((v as u64, "")),
        _ => cube_n
            .filter(|n| n % 32 != 0)
            .map(|n| (n as u64, "at most")),
    }
}

/// One access of the sweep.
#[derive(Clone, Copy)]
struct Acc {
    block: usize,
    core: usize,
    event: usize,
    start: usize,
    end: usize,
    write: bool,
    atomic: bool,
}

type RaceKey = (Mem, HazardOp, HazardOp);

/// An event's runs merged per (memory, read/write) where they touch or overlap.
fn coalesce(accesses: &[super::trace::Access]) -> Vec<(Mem, bool, usize, usize)> {
    let mut runs: Vec<(Mem, bool, usize, usize)> = accesses
        .iter()
        .filter(|a| a.start < a.end)
        .map(|a| (a.mem, a.write, a.start, a.end))
        .collect();
    runs.sort_unstable();
    let mut out: Vec<(Mem, bool, usize, usize)> = Vec::with_capacity(runs.len());
    for r in runs {
        match out.last_mut() {
            Some(l) if l.0 == r.0 && l.1 == r.1 && r.2 <= l.3 => l.3 = l.3.max(r.3),
            _ => out.push(r),
        }
    }
    out
}

/// Finds every hazard of a traced run of `kernel` (see the module docs).
pub fn check(kernel: &Kernel, trace: &Trace) -> Vec<Hazard> {
    let mut out = Vec::new();
    let mut hbs: HashMap<usize, (usize, BlockHb)> = HashMap::new();
    for (bi, bt) in trace.blocks.iter().enumerate() {
        let mut scan = BlockScan {
            kernel,
            bt,
            incoming: [0, 1, 2].map(|c| vec![Vec::new(); bt.cores[c].events.len()]),
            maybe_lost: Vec::new(),
            hazards: Vec::new(),
        };
        for c in 0..3 {
            scan.flags(c);
            scan.cross_edges(c);
            scan.phases(c);
        }
        let hb = scan.clocks();
        scan.possibly_lost(&hb);
        scan.cross_signals(&hb);
        out.append(&mut scan.hazards);
        hbs.insert(bt.block, (bi, hb));
    }
    out.extend(races(kernel, trace, &hbs));
    out.extend(scalar_lines(kernel, trace));
    out
}

fn races(kernel: &Kernel, trace: &Trace, hbs: &HashMap<usize, (usize, BlockHb)>) -> Vec<Hazard> {
    // Group accesses by memory: on-chip buffers per block, GM across blocks.
    let mut groups: BTreeMap<(Option<usize>, Mem), Vec<Acc>> = BTreeMap::new();
    for bt in &trace.blocks {
        for (c, core) in bt.cores.iter().enumerate() {
            for (i, e) in core.events.iter().enumerate() {
                let atomic = matches!(
                    e.op,
                    Op::LoadStore(LoadStoreOp::Store {
                        atomic_add: true,
                        ..
                    })
                );
                for (mem, write, start, end) in coalesce(&e.accesses) {
                    let key = match mem {
                        Mem::Gm(_) => (None, mem),
                        Mem::Chip { .. } => (Some(bt.block), mem),
                    };
                    groups.entry(key).or_default().push(Acc {
                        block: bt.block,
                        core: c,
                        event: i,
                        start,
                        end,
                        write,
                        atomic: atomic && write,
                    });
                }
            }
        }
    }
    let ev = |block: usize, c: usize, i: usize| -> Option<&Event> {
        let (bi, _) = hbs.get(&block)?;
        trace.blocks.get(*bi)?.cores[c].events.get(i)
    };
    let mut found: BTreeMap<RaceKey, (usize, usize, usize, bool, bool)> = BTreeMap::new();
    for ((_, mem), mut accs) in groups {
        accs.sort_by_key(|a| (a.start, a.end));
        let mut active: Vec<Acc> = Vec::new();
        for x in accs {
            active.retain(|a| a.end > x.start);
            for a in &active {
                if !(a.write || x.write) || (a.atomic && x.atomic) {
                    continue;
                }
                if (a.block, a.core, a.event) == (x.block, x.core, x.event) {
                    continue;
                }
                if a.block == x.block {
                    let Some((_, hb)) = hbs.get(&a.block) else {
                        continue;
                    };
                    let (pa, px) = ((a.core, a.event), (x.core, x.event));
                    if hb.threads[a.core][a.event] == hb.threads[x.core][x.event]
                        || hb.hb(pa, px)
                        || hb.hb(px, pa)
                    {
                        continue;
                    }
                }
                let (Some(ea), Some(ex)) =
                    (ev(a.block, a.core, a.event), ev(x.block, x.core, x.event))
                else {
                    continue;
                };
                let ha = hop(a.block, a.core, a.event, ea);
                let hx = hop(x.block, x.core, x.event, ex);
                let lo = x.start.max(a.start);
                let hi = x.end.min(a.end);
                // Canonical order by (block, core, loc, pipe); the event index is not part of
                // the key (instances merge).
                let ka = (ha.block, ha.core, ha.loc, ha.pipe);
                let kx = (hx.block, hx.core, hx.loc, hx.pipe);
                let ((f, fw), (s, sw)) = if ka <= kx {
                    ((ha, a.write), (hx, x.write))
                } else {
                    ((hx, x.write), (ha, a.write))
                };
                let strip = |h: HazardOp| HazardOp { event: 0, ..h };
                let entry = found
                    .entry((mem, strip(f), strip(s)))
                    .or_insert((lo, hi, 0, fw, sw));
                entry.0 = entry.0.min(lo);
                entry.1 = entry.1.max(hi);
                entry.2 += 1;
                entry.3 |= fw;
                entry.4 |= sw;
            }
            active.push(x);
        }
    }
    found
        .into_iter()
        .map(|((mem, a, b), (lo, hi, n, aw, bw))| {
            let rw = |w: bool| if w { "writes" } else { "reads" };
            let blocks = if a.block == b.block {
                String::new()
            } else {
                format!(" (blocks {} and {} are unordered)", a.block, b.block)
            };
            Hazard {
                kind: HazardKind::Race,
                block: a.block,
                ops: vec![a, b],
                bytes: Some(ByteRange {
                    mem,
                    start: lo,
                    end: hi,
                }),
                instances: n,
                message: format!(
                    "{} bytes [{lo}, {hi}): block {} {} {} {} {} and block {} {} {} {} {} are \
                     not ordered by happens-before{blocks} ({n} instance(s))",
                    mem_name(kernel, mem),
                    a.block,
                    core_name(a.core),
                    a.pipe,
                    a.loc,
                    format_args!("({}) {}", a.op, rw(aw)),
                    b.block,
                    core_name(b.core),
                    b.pipe,
                    b.loc,
                    format_args!("({}) {}", b.op, rw(bw)),
                ),
            }
        })
        .collect()
}

/// Scalar writes of different cores (or blocks) into one 64-byte line.
fn scalar_lines(kernel: &Kernel, trace: &Trace) -> Vec<Hazard> {
    let mut lines: BTreeMap<(u32, usize), Vec<HazardOp>> = BTreeMap::new();
    for bt in &trace.blocks {
        for (c, core) in bt.cores.iter().enumerate() {
            for (i, e) in core.events.iter().enumerate() {
                if !matches!(e.op, Op::Scalar(ScalarOp::WriteScalar { .. })) {
                    continue;
                }
                for a in &e.accesses {
                    if let Mem::Gm(p) = a.mem {
                        for line in a.start / 64..a.end.div_ceil(64) {
                            lines
                                .entry((p, line))
                                .or_default()
                                .push(hop(bt.block, c, i, e));
                        }
                    }
                }
            }
        }
    }
    let mut out = Vec::new();
    for ((p, line), writes) in lines {
        let mut seen = BTreeSet::new();
        let ops: Vec<HazardOp> = writes
            .into_iter()
            .filter(|h| seen.insert((h.block, h.core)))
            .collect();
        if ops.len() < 2 {
            continue;
        }
        let elem = match kernel.params.get(p as usize).map(|x| &x.kind) {
            Some(ParamKind::Tensor { dtype, .. }) => dtype.size_bytes() as usize,
            _ => 1,
        };
        let who: Vec<String> = ops
            .iter()
            .map(|h| format!("block {} {}", h.block, h))
            .collect();
        out.push(Hazard {
            kind: HazardKind::ScalarLineShared,
            block: ops[0].block,
            bytes: Some(ByteRange {
                mem: Mem::Gm(p),
                start: line * 64,
                end: line * 64 + 64,
            }),
            instances: ops.len(),
            message: format!(
                "{} bytes [{}, {}) (one 64-byte line, {} elements) receive scalar writes from \
                 {} cores: {}; each core writes back the whole line at kernel end, so writes \
                 are lost",
                mem_name(kernel, Mem::Gm(p)),
                line * 64,
                line * 64 + 64,
                64 / elem.max(1),
                ops.len(),
                who.join(", ")
            ),
            ops,
        });
    }
    out
}
