//! The per-block interpreter: three resumable core programs, interleaved deterministically.

use super::core::CoreRt;
use super::exec::{self, ExecCtx, Flow};
use super::gm::{Overlay, PrefetchQueue, WriteOnly};
use super::program::{Instr, Program};
use super::state::{BlockMem, CoreId, CoreState, CrossFlags, ScratchPool};
use super::trace::{Access, BlockTrace, Event, OpRecord, SyncInfo};
use super::{SimError, SimFault};
use crate::ir::{CoreKind, Op, OpLoc, VarId};
use crate::launch::Arg;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// A loop a core is inside: its variable, current value, exclusive end and step.
#[derive(Debug, Clone, Copy)]
struct Loop {
    var: VarId,
    cur: i64,
    end: i64,
    step: i64,
}

thread_local! {
    /// The cores' loop stacks of this thread's last block, for the next.
    static LOOPS: std::cell::RefCell<Vec<Vec<Loop>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Where a core is in its section's code.
struct Cursor {
    pc: usize,
    /// The loops it is inside, innermost last.
    loops: Vec<Loop>,
    /// The cross-core flag it waits for, if it waits.
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
    program: &Program<'k, '_>,
    (args, direct): (&'a [Arg<'a>], &'a [WriteOnly<'a>]),
    at: BlockAt,
    budget: &StepBudget,
) -> Result<BlockResult<'k>, SimError> {
    let BlockAt {
        block,
        block_dim,
        traced,
    } = at;
    let (kernel, arch) = (program.kernel, program.arch);
    let mut trace = traced.then(|| BlockTrace {
        block,
        ..Default::default()
    });
    let mut mem = BlockMem::take(arch);
    let mut gm = Overlay::take();
    let mut flags = CrossFlags::take();
    let mut cores: [CoreRt; 3] = CoreId::ALL.map(|id| {
        let mut pool = ScratchPool::take(id);
        let CoreState {
            vars,
            valid,
            acc_rows,
            prefetch,
        } = pool.take_state(kernel.vars.len(), kernel.tiles.len());
        CoreRt {
            id,
            vars,
            valid,
            dcache: BTreeMap::new(),
            args,
            block,
            block_dim,
            pool,
            prefetch: PrefetchQueue::reusing(prefetch),
            acc_rows,
        }
    });
    let mut cursors: [Cursor; 3] = std::array::from_fn(|_| Cursor {
        pc: 0,
        loops: LOOPS.with(|l| l.borrow_mut().pop()).unwrap_or_default(),
        waiting: None,
    });
    let code = |id: CoreId| {
        program.section(match id {
            CoreId::Aic => CoreKind::Cube,
            CoreId::Aiv(_) => CoreKind::Vector,
        })
    };
    let mut ops_executed = 0u64;
    loop {
        let mut progressed = false;
        let mut finished = true;
        for (i, (core, cursor)) in cores.iter_mut().zip(cursors.iter_mut()).enumerate() {
            let code = code(core.id);
            if cursor.pc >= code.len() {
                continue;
            }
            let mut cx = ExecCtx {
                kernel,
                arch,
                args,
                mem: &mut mem,
                gm: &mut gm,
                direct,
                placed: &program.placed,
                flags: &mut flags,
                core,
                rec: None,
                event_index: 0,
            };
            let events = trace.as_mut().map(|t| &mut t.cores[i].events);
            let (ran, n) = run_core(&mut cx, code, cursor, events, budget)?;
            progressed |= ran;
            ops_executed += n;
            finished &= cursor.pc >= code.len();
        }
        if finished {
            break;
        }
        if !progressed {
            let waits: Vec<String> = CoreId::ALL
                .iter()
                .zip(&cursors)
                .filter_map(|(id, c)| {
                    c.waiting
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
                let _ = gm.write(
                    args,
                    crate::ir::ParamId(param),
                    start,
                    &bytes[..end - start],
                );
            }
        }
    }
    mem.give_back();
    flags.give_back();
    for core in cores {
        let mut pool = core.pool;
        pool.keep_state(CoreState {
            vars: core.vars,
            valid: core.valid,
            acc_rows: core.acc_rows,
            prefetch: core.prefetch.into_spare(),
        });
        pool.give_back(core.id);
    }
    LOOPS.with(|l| {
        let mut l = l.borrow_mut();
        for mut c in cursors {
            if l.len() < 3 {
                c.loops.clear();
                l.push(c.loops);
            }
        }
    });
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
    code: &[Instr<'k>],
    cursor: &mut Cursor,
    mut events: Option<&mut Vec<Event<'k>>>,
    budget: &StepBudget,
) -> Result<(bool, u64), SimError> {
    let mut progressed = false;
    let mut n = 0;
    let fail = |cx: &ExecCtx, op: &Op, loc: OpLoc, fault: SimFault| SimError::Op {
        block: cx.core.block,
        core: cx.core.id.name(),
        loc,
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
    while let Some(instr) = code.get(cursor.pc) {
        budget.take().map_err(|limit| SimError::StepLimit {
            block: cx.core.block,
            limit,
        })?;
        match instr {
            Instr::Op { op, loc } => {
                if let Some(ev) = &events {
                    cx.rec = Some(OpRecord::default());
                    cx.event_index = ev.len();
                }
                match exec::exec(cx, op).map_err(|why| fail(cx, op, *loc, why))? {
                    Flow::Continue => {
                        cursor.pc += 1;
                        cursor.waiting = None;
                        n += 1;
                        if let (Some(ev), Some(rec)) = (events.as_deref_mut(), cx.rec.take()) {
                            ev.push(event(cx, op, *loc, rec));
                        }
                    }
                    Flow::Blocked(what) => {
                        cx.rec = None;
                        cursor.waiting = Some(what);
                        return Ok((progressed, n));
                    }
                }
            }
            Instr::Let { var, value } => {
                let v = value
                    .eval(&*cx.core)
                    .map_err(|e| ctl(cx, "let", e.into()))?;
                cx.core.set_var(*var, v);
                cursor.pc += 1;
            }
            Instr::For {
                var,
                start,
                end,
                step,
                exit,
            } => {
                let s = start
                    .eval(&*cx.core)
                    .map_err(|e| ctl(cx, "for", e.into()))?;
                let e = end.eval(&*cx.core).map_err(|e| ctl(cx, "for", e.into()))?;
                if *step <= 0 {
                    let step = SimFault::TooSmall {
                        what: "loop step",
                        value: *step,
                        min: 1,
                    };
                    return Err(ctl(cx, "for", step));
                }
                if s < e {
                    cx.core.set_var(*var, s);
                    cursor.loops.push(Loop {
                        var: *var,
                        cur: s,
                        end: e,
                        step: *step,
                    });
                    cursor.pc += 1;
                } else {
                    cursor.pc = *exit;
                }
            }
            Instr::Next { body } => {
                let Some(l) = cursor.loops.last_mut() else {
                    return Err(ctl(
                        cx,
                        "for",
                        SimFault::Internal("a loop end outside a loop"),
                    ));
                };
                // Past i64::MAX the loop is over (its end is an i64).
                match l.cur.checked_add(l.step) {
                    Some(next) if next < l.end => {
                        l.cur = next;
                        let v = l.var;
                        cx.core.set_var(v, next);
                        cursor.pc = *body;
                    }
                    _ => {
                        cursor.loops.pop();
                        cursor.pc += 1;
                    }
                }
            }
            Instr::Unless { cond, target } => {
                let c = cond.eval(&*cx.core).map_err(|e| ctl(cx, "if", e.into()))?;
                cursor.pc = if c != 0 { cursor.pc + 1 } else { *target };
            }
            Instr::Jump { target } => cursor.pc = *target,
        }
        progressed = true;
    }
    Ok((progressed, n))
}

fn event<'k>(cx: &ExecCtx<'k, '_, '_>, op: &'k Op, loc: OpLoc, rec: OpRecord) -> Event<'k> {
    let kernel = cx.kernel;
    let space_of = |r: &crate::ir::TileRef| kernel.try_tile(r.tile).map(|d| d.ty.space);
    Event {
        loc,
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
