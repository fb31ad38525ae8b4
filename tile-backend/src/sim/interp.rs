//! The per-block interpreter: three resumable core programs, interleaved deterministically.

use super::core::CoreRt;
use super::exec::{self, ExecCtx, Flow};
use super::gm::{Overlay, PrefetchQueue, WriteOnly};
use super::state::{BlockMem, CoreId, CrossFlags, ScratchPool};
use super::tile::Placed;
use super::trace::{Access, BlockTrace, Event, OpRecord, SyncInfo};
use super::{SimError, SimFault};
use crate::arch::Arch;
use crate::ir::{CoreKind, Kernel, Op, OpLoc, ParamId, Stmt, VarId};
use crate::launch::Arg;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// Op locations keyed by the op's address inside the kernel, built on first use: only errors
/// and traced runs need them, so an untraced run that succeeds never pays for the map.
pub(crate) struct OpLocs<'k> {
    kernel: &'k Kernel,
    map: OnceLock<foldhash::HashMap<usize, OpLoc>>,
}

impl<'k> OpLocs<'k> {
    pub(crate) fn new(kernel: &'k Kernel) -> Self {
        OpLocs {
            kernel,
            map: OnceLock::new(),
        }
    }

    /// Where `op` (an op of this kernel) is; an op not found gets index `usize::MAX`.
    fn of(&self, op: &Op) -> OpLoc {
        self.map
            .get_or_init(|| {
                self.kernel
                    .ops()
                    .into_iter()
                    .map(|(loc, op)| (op as *const Op as usize, loc))
                    .collect()
            })
            .get(&(op as *const Op as usize))
            .copied()
            .unwrap_or(OpLoc {
                section: CoreKind::Cube,
                index: usize::MAX,
            })
    }
}

enum Frame<'k> {
    Block {
        stmts: &'k [Stmt],
        pc: usize,
    },
    Loop {
        var: VarId,
        cur: i64,
        end: i64,
        step: i64,
        body: &'k [Stmt],
        pc: usize,
    },
}

struct Program<'k> {
    frames: Vec<Frame<'k>>,
    waiting: Option<u8>,
}

/// What a block leaves behind.
pub(crate) struct BlockResult<'k> {
    pub gm: Overlay,
    pub ops_executed: u64,
    pub trace: Option<BlockTrace<'k>>,
}

/// Which block of a launch runs, and whether it is traced.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BlockAt {
    pub block: usize,
    pub block_dim: usize,
    pub traced: bool,
}

/// The steps a run may still take, shared by its blocks ([`super::RunLimits::max_steps`]).
#[derive(Debug)]
pub(crate) struct StepBudget {
    max: Option<u64>,
    used: AtomicU64,
}

impl StepBudget {
    pub fn new(max: Option<u64>) -> Self {
        StepBudget {
            max,
            used: AtomicU64::new(0),
        }
    }

    /// Takes one step: `Err(limit)` once the run has taken `limit` steps.
    fn take(&self) -> Result<(), u64> {
        match self.max {
            None => Ok(()),
            Some(limit) if self.used.fetch_add(1, Ordering::Relaxed) < limit => Ok(()),
            Some(limit) => Err(limit),
        }
    }
}

pub(crate) fn run_block<'k, 'a>(
    kernel: &'k Kernel,
    arch: &Arch,
    (args, direct): (&'a [Arg<'a>], &'a [WriteOnly<'a>]),
    (locs, placed): (&OpLocs<'_>, &[Option<Placed<'k>>]),
    at: BlockAt,
    budget: &StepBudget,
) -> Result<BlockResult<'k>, SimError> {
    let BlockAt {
        block,
        block_dim,
        traced,
    } = at;
    let mut trace = traced.then(|| BlockTrace {
        block,
        ..Default::default()
    });
    let mut mem = BlockMem::take(arch);
    let mut gm = Overlay::default();
    let mut flags = CrossFlags::default();
    let mut cores: Vec<CoreRt> = CoreId::ALL
        .iter()
        .map(|&id| CoreRt {
            id,
            vars: vec![None; kernel.vars.len()],
            valid: vec![None; kernel.tiles.len()],
            dcache: BTreeMap::new(),
            args,
            block,
            block_dim,
            pool: ScratchPool::take(id),
            prefetch: PrefetchQueue::default(),
            acc_rows: Vec::new(),
        })
        .collect();
    let mut programs: Vec<Program> = CoreId::ALL
        .iter()
        .map(|id| {
            let stmts = kernel.section(match id {
                CoreId::Aic => CoreKind::Cube,
                CoreId::Aiv(_) => CoreKind::Vector,
            });
            Program {
                frames: vec![Frame::Block { stmts, pc: 0 }],
                waiting: None,
            }
        })
        .collect();
    let mut ops_executed = 0u64;
    loop {
        let mut progressed = false;
        for (i, (core, prog)) in cores.iter_mut().zip(programs.iter_mut()).enumerate() {
            let mut cx = ExecCtx {
                kernel,
                arch,
                args,
                mem: &mut mem,
                gm: &mut gm,
                direct,
                placed,
                flags: &mut flags,
                core,
                rec: None,
                event_index: 0,
            };
            let events = trace.as_mut().map(|t| &mut t.cores[i].events);
            let (ran, n) = run_core(&mut cx, prog, locs, events, budget)?;
            progressed |= ran;
            ops_executed += n;
        }
        if programs.iter().all(|p| p.frames.is_empty()) {
            break;
        }
        if !progressed {
            let waits: Vec<String> = CoreId::ALL
                .iter()
                .zip(&programs)
                .filter_map(|(id, p)| {
                    p.waiting
                        .map(|w| format!("{id} waits for cross-core flag {w}"))
                })
                .collect();
            return Err(SimError::Hang {
                block,
                waits: waits.join("; "),
            });
        }
    }
    // Scalar writes reach GM at kernel end as whole lines, core by core.
    for core in &cores {
        for (&(param, line), bytes) in &core.dcache {
            let t = args.get(param as usize).and_then(Arg::as_gm);
            let len = t.map(|t| t.data.len()).unwrap_or(0);
            let start = line * 64;
            let end = (start + 64).min(len);
            if start < end {
                let _ = gm.write(args, ParamId(param), start, &bytes[..end - start]);
            }
        }
    }
    mem.give_back();
    for core in cores {
        core.pool.give_back(core.id);
    }
    gm.shed_spare();
    Ok(BlockResult {
        gm,
        ops_executed,
        trace,
    })
}

/// Runs a core until it finishes or waits; returns whether it made progress and ops run.
fn run_core<'k>(
    cx: &mut ExecCtx<'k, '_, '_>,
    prog: &mut Program<'k>,
    locs: &OpLocs<'_>,
    mut events: Option<&mut Vec<Event<'k>>>,
    budget: &StepBudget,
) -> Result<(bool, u64), SimError> {
    let mut progressed = false;
    let mut n = 0;
    let fail = |cx: &ExecCtx, op: &Op, fault: SimFault| SimError::Op {
        block: cx.core.block,
        core: cx.core.id.name(),
        loc: locs.of(op),
        op: op.name(),
        fault: fault.named(cx.kernel),
    };
    let ctl = |cx: &ExecCtx, what: &'static str, fault: SimFault| SimError::Op {
        block: cx.core.block,
        core: cx.core.id.name(),
        loc: OpLoc {
            section: if cx.core.id == CoreId::Aic {
                CoreKind::Cube
            } else {
                CoreKind::Vector
            },
            index: usize::MAX,
        },
        op: what,
        fault,
    };
    while let Some(frame) = prog.frames.last_mut() {
        budget.take().map_err(|limit| SimError::StepLimit {
            block: cx.core.block,
            limit,
        })?;
        let (stmts, pc) = match frame {
            Frame::Block { stmts, pc } => (*stmts, pc),
            Frame::Loop { body, pc, .. } => (*body, pc),
        };
        if *pc >= stmts.len() {
            match frame {
                Frame::Loop {
                    var,
                    cur,
                    end,
                    step,
                    pc,
                    ..
                } => {
                    // Past i64::MAX the loop is over (its end is an i64).
                    match cur.checked_add(*step) {
                        Some(next) if next < *end => {
                            *cur = next;
                            *pc = 0;
                            let v = *var;
                            cx.core.set_var(v, next);
                        }
                        _ => {
                            prog.frames.pop();
                        }
                    }
                }
                Frame::Block { .. } => {
                    prog.frames.pop();
                }
            }
            continue;
        }
        let stmt = &stmts[*pc];
        match stmt {
            Stmt::Op(op) => {
                if let Some(ev) = &events {
                    cx.rec = Some(OpRecord::default());
                    cx.event_index = ev.len();
                }
                match exec::exec(cx, op).map_err(|why| fail(cx, op, why))? {
                    Flow::Continue => {
                        *pc += 1;
                        prog.waiting = None;
                        n += 1;
                        if let (Some(ev), Some(rec)) = (events.as_deref_mut(), cx.rec.take()) {
                            ev.push(event(cx, op, locs, rec));
                        }
                    }
                    Flow::Blocked(what) => {
                        cx.rec = None;
                        prog.waiting = Some(what);
                        return Ok((progressed, n));
                    }
                }
            }
            Stmt::Let { var, value } => {
                let v = cx.core.eval(value).map_err(|e| ctl(cx, "let", e))?;
                cx.core.set_var(*var, v);
                *pc += 1;
            }
            Stmt::For {
                var,
                start,
                end,
                step,
                body,
            } => {
                let s = cx.core.eval(start).map_err(|e| ctl(cx, "for", e))?;
                let e = cx.core.eval(end).map_err(|e| ctl(cx, "for", e))?;
                if *step <= 0 {
                    let step = SimFault::TooSmall {
                        what: "loop step",
                        value: *step,
                        min: 1,
                    };
                    return Err(ctl(cx, "for", step));
                }
                *pc += 1;
                if s < e {
                    cx.core.set_var(*var, s);
                    prog.frames.push(Frame::Loop {
                        var: *var,
                        cur: s,
                        end: e,
                        step: *step,
                        body,
                        pc: 0,
                    });
                }
            }
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => {
                let c = cx.core.eval(cond).map_err(|e| ctl(cx, "if", e))?;
                *pc += 1;
                prog.frames.push(Frame::Block {
                    stmts: if c != 0 { then_body } else { else_body },
                    pc: 0,
                });
            }
        }
        progressed = true;
    }
    Ok((progressed, n))
}

fn event<'k>(cx: &ExecCtx<'k, '_, '_>, op: &'k Op, locs: &OpLocs<'_>, rec: OpRecord) -> Event<'k> {
    let kernel = cx.kernel;
    let space_of = |r: &crate::ir::TileRef| kernel.try_tile(r.tile).map(|d| d.ty.space);
    Event {
        loc: locs.of(op),
        op,
        pipe: cx.arch.pipe_of(op, &space_of).unwrap_or(crate::ir::Pipe::S),
        accesses: coalesce(rec.accesses),
        cube: rec.cube,
        sort: rec.sort,
        sync: rec.sync.unwrap_or(SyncInfo::None),
    }
}

/// Sorts an op's byte runs and merges the touching ones (a whole NZ tile becomes one range).
fn coalesce(mut v: Vec<Access>) -> Vec<Access> {
    v.sort_unstable_by_key(|a| (a.mem, a.write, a.start, a.end));
    let mut out: Vec<Access> = Vec::with_capacity(v.len());
    for a in v {
        match out.last_mut() {
            Some(l) if l.mem == a.mem && l.write == a.write && a.start <= l.end => {
                l.end = l.end.max(a.end)
            }
            _ => out.push(a),
        }
    }
    out
}
