//! Lowering of declared cube <-> vector channels to cross-core flags.

use super::access::{conflict, op_accesses, section_index, Access, Loops};
use super::SyncError;
use crate::arch::Arch;
use crate::ir::{walk_ops, CoreKind, Kernel, Op, Pipe, Stmt, SyncOp};
use std::collections::BTreeSet;

/// The pipe an op runs on (`None` for scalar, sync and channel ops).
pub(super) fn data_pipe(kernel: &Kernel, arch: &Arch, op: &Op) -> Option<Pipe> {
    let space_of = |r: &crate::ir::TileRef| kernel.try_tile(r.tile).map(|d| d.ty.space);
    match arch.pipe_of(op, &space_of) {
        Some(Pipe::S) | Some(Pipe::All) | None => None,
        p => p,
    }
}

/// The pipe that writes data leaving a core of this kind.
fn egress(core: CoreKind) -> Pipe {
    match core {
        CoreKind::Cube => Pipe::Fix,
        CoreKind::Vector => Pipe::Mte3,
    }
}

/// The pipe that first reads data arriving at a core of this kind.
fn ingress(core: CoreKind) -> Pipe {
    match core {
        CoreKind::Cube => Pipe::Mte1,
        CoreKind::Vector => Pipe::V,
    }
}

/// Flag ids of one channel: `data` (producer -> consumer) and `free` (consumer -> producer), as
/// seen by vector code (0..16); cube code uses `id` for AIV0 and `id + 16` for AIV1.
#[derive(Debug, Clone, Copy)]
struct Ids {
    data: u8,
    free: u8,
}

/// Replaces every channel op of both sections by cross-core flags (see the module docs of
/// [`super`]); returns the new `[cube, vector]` programs.
pub(super) fn lower(
    kernel: &Kernel,
    arch: &Arch,
    crossing: &[Vec<Access>; 2],
) -> Result<[Vec<Stmt>; 2], SyncError> {
    let half = arch.cross_flags / 2;
    let mut used_ids = BTreeSet::new();
    let mut used_channels = BTreeSet::new();
    for core in [CoreKind::Cube, CoreKind::Vector] {
        let mut bad = None;
        walk_ops(kernel.section(core), &mut |op| {
            let Op::Sync(op) = op else { return };
            match op {
                SyncOp::SetCrossFlag { id, .. } | SyncOp::WaitCrossFlag { id, .. } => {
                    used_ids.insert(id % half.max(1));
                }
                SyncOp::ChannelAcquire { channel }
                | SyncOp::ChannelPush { channel }
                | SyncOp::ChannelPop { channel }
                | SyncOp::ChannelRelease { channel } => {
                    if kernel.try_channel(*channel).is_none() {
                        bad = Some(*channel);
                    }
                    used_channels.insert(*channel);
                }
                SyncOp::SetFlag { .. } | SyncOp::WaitFlag { .. } | SyncOp::Barrier { .. } => {}
            }
        });
        if let Some(c) = bad {
            return Err(SyncError::UnknownChannel { channel: c.0 });
        }
    }
    let mut ids: Vec<Option<Ids>> = vec![None; kernel.channels.len()];
    let mut free_ids = (0..half).filter(|i| !used_ids.contains(i));
    for c in &used_channels {
        let (Some(data), Some(free)) = (free_ids.next(), free_ids.next()) else {
            return Err(SyncError::NoFreeCrossFlag {
                channel: kernel.channels[c.0 as usize].name.clone(),
                used: used_ids.iter().copied().collect(),
            });
        };
        ids[c.0 as usize] = Some(Ids { data, free });
    }

    let mut out: [Vec<Stmt>; 2] = [Vec::new(), Vec::new()];
    for core in [CoreKind::Cube, CoreKind::Vector] {
        let stmts = kernel.section(core);
        if used_channels.is_empty() {
            out[section_index(core)] = stmts.to_vec();
            continue;
        }
        let cross = &crossing[section_index(core)];
        let mut ops: Vec<&Op> = Vec::new();
        walk_ops(stmts, &mut |op| ops.push(op));
        // The pipe of each op that touches a crossing resource.
        let mut cross_pipe: Vec<Option<Pipe>> = Vec::with_capacity(ops.len());
        for op in &ops {
            let p = data_pipe(kernel, arch, op);
            let touches =
                p.is_some() && conflict(&op_accesses(kernel, arch, op, &Loops::new())?, cross);
            cross_pipe.push(if touches { p } else { None });
        }
        let next_after = |k: usize| cross_pipe[k + 1..].iter().flatten().next().copied();
        let prev_before = |k: usize| cross_pipe[..k].iter().rev().flatten().next().copied();

        let mut repl: Vec<Option<Vec<Op>>> = vec![None; ops.len()];
        let mut pre_release: Vec<Op> = Vec::new();
        let mut drain: Vec<Op> = Vec::new();
        let mut pre_done = BTreeSet::new();
        let mut last_acquire: Vec<Option<Pipe>> = vec![None; kernel.channels.len()];
        for (k, op) in ops.iter().enumerate() {
            let Op::Sync(sync) = op else { continue };
            let (channel, kind) = match sync {
                SyncOp::ChannelAcquire { channel } => (*channel, Kind::Acquire),
                SyncOp::ChannelPush { channel } => (*channel, Kind::Push),
                SyncOp::ChannelPop { channel } => (*channel, Kind::Pop),
                SyncOp::ChannelRelease { channel } => (*channel, Kind::Release),
                SyncOp::SetFlag { .. }
                | SyncOp::WaitFlag { .. }
                | SyncOp::Barrier { .. }
                | SyncOp::SetCrossFlag { .. }
                | SyncOp::WaitCrossFlag { .. } => continue,
            };
            let (Some(_), Some(id)) = (
                kernel.try_channel(channel),
                ids.get(channel.0 as usize).copied().flatten(),
            ) else {
                return Err(SyncError::UnknownChannel { channel: channel.0 });
            };
            let pipe = match kind {
                Kind::Acquire => next_after(k).unwrap_or(egress(core)),
                Kind::Pop => next_after(k).unwrap_or(ingress(core)),
                Kind::Push => prev_before(k).unwrap_or(egress(core)),
                Kind::Release => prev_before(k).unwrap_or(ingress(core)),
            };
            let flag = match kind {
                Kind::Acquire | Kind::Release => id.free,
                Kind::Push | Kind::Pop => id.data,
            };
            let set = matches!(kind, Kind::Push | Kind::Release);
            let new = flags(core, set, pipe, flag, half);
            if kind == Kind::Release && pre_done.insert(channel) {
                pre_release.extend(flags(core, true, pipe, id.free, half));
            }
            if kind == Kind::Acquire {
                last_acquire[channel.0 as usize] = Some(pipe);
            }
            repl[k] = Some(new);
        }
        for (c, pipe) in last_acquire.iter().enumerate() {
            if let (Some(pipe), Some(id)) = (pipe, ids[c]) {
                drain.extend(flags(core, false, *pipe, id.free, half));
            }
        }
        let mut counter = 0;
        let mut body: Vec<Stmt> = pre_release.into_iter().map(Stmt::Op).collect();
        body.extend(rebuild(stmts, &mut counter, &repl));
        body.extend(drain.into_iter().map(Stmt::Op));
        out[section_index(core)] = body;
    }
    Ok(out)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Acquire,
    Push,
    Pop,
    Release,
}

/// The cross-core flag ops of one signal or wait: cube code addresses both AIVs (`id`,
/// `id + half`), vector code its own id.
fn flags(core: CoreKind, set: bool, pipe: Pipe, id: u8, half: u8) -> Vec<Op> {
    let ids: Vec<u8> = match core {
        CoreKind::Cube => vec![id, id + half],
        CoreKind::Vector => vec![id],
    };
    ids.into_iter()
        .map(|id| {
            if set {
                Op::Sync(SyncOp::SetCrossFlag { pipe, id })
            } else {
                Op::Sync(SyncOp::WaitCrossFlag { pipe, id })
            }
        })
        .collect()
}

/// Copies `stmts`, replacing the ops at the pre-order positions of `repl`.
fn rebuild(stmts: &[Stmt], counter: &mut usize, repl: &[Option<Vec<Op>>]) -> Vec<Stmt> {
    let mut out = Vec::with_capacity(stmts.len());
    for s in stmts {
        match s {
            Stmt::Op(op) => {
                match repl.get(*counter).and_then(|r| r.as_ref()) {
                    Some(ops) => out.extend(ops.iter().cloned().map(Stmt::Op)),
                    None => out.push(Stmt::Op(op.clone())),
                }
                *counter += 1;
            }
            Stmt::For {
                var,
                start,
                end,
                step,
                body,
            } => out.push(Stmt::For {
                var: *var,
                start: start.clone(),
                end: end.clone(),
                step: *step,
                body: rebuild(body, counter, repl),
            }),
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => {
                let then_body = rebuild(then_body, counter, repl);
                let else_body = rebuild(else_body, counter, repl);
                out.push(Stmt::If {
                    cond: cond.clone(),
                    then_body,
                    else_body,
                });
            }
            Stmt::Let { .. } => out.push(s.clone()),
        }
    }
    out
}
