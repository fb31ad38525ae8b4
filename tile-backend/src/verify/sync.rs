//! Flags, barriers, cross-core flags and channel sides (ASCEND950.md §4).

use super::{Ctx, Rule};
use crate::ir::{CoreKind, Pipe, SyncOp};

/// The pipes a core has.
pub(crate) fn core_pipes(core: CoreKind) -> &'static [Pipe] {
    match core {
        CoreKind::Cube => &[Pipe::Mte2, Pipe::Mte1, Pipe::M, Pipe::Fix, Pipe::S],
        CoreKind::Vector => &[Pipe::Mte2, Pipe::V, Pipe::Mte3, Pipe::S],
    }
}

fn check_pipe(cx: &mut Ctx<'_>, pipe: Pipe, section: CoreKind, allow_all: bool) {
    if pipe == Pipe::All && allow_all {
        return;
    }
    if !core_pipes(section).contains(&pipe) {
        let names: Vec<String> = core_pipes(section).iter().map(|p| p.to_string()).collect();
        cx.error(
            Rule::FlagPipe,
            format!(
                "the {section} core has no {pipe} pipe (it has {})",
                names.join(", ")
            ),
        );
    }
}

pub(super) fn check(cx: &mut Ctx<'_>, op: &SyncOp, section: CoreKind) {
    match op {
        SyncOp::SetFlag { src, dst, event } | SyncOp::WaitFlag { src, dst, event } => {
            check_pipe(cx, *src, section, false);
            check_pipe(cx, *dst, section, false);
            if src == dst {
                cx.error(
                    Rule::FlagPipe,
                    format!("a flag orders two different pipes; both are {src} (use pipe_barrier)"),
                );
            }
            if *event >= cx.arch.flag_events {
                cx.error(
                    Rule::FlagEvent,
                    format!(
                        "event id {event} is out of range: each pipe pair has {} (0..={})",
                        cx.arch.flag_events,
                        cx.arch.flag_events - 1
                    ),
                );
            }
        }
        SyncOp::Barrier { pipe } => check_pipe(cx, *pipe, section, true),
        SyncOp::SetCrossFlag { pipe, id } | SyncOp::WaitCrossFlag { pipe, id } => {
            check_pipe(cx, *pipe, section, false);
            // Cube code addresses both AIVs (0-15 AIV0, 16-31 AIV1); vector code writes 0-15 and
            // AIV k's id is offset by 16k.
            let limit = match section {
                CoreKind::Cube => cx.arch.cross_flags,
                CoreKind::Vector => cx.arch.cross_flags / 2,
            };
            if *id >= limit {
                cx.error(
                    Rule::CrossFlag,
                    format!(
                        "cross-core flag id {id} is out of range for {section} code (0..={}{})",
                        limit - 1,
                        if section == CoreKind::Vector {
                            "; AIV k's ids are offset by 16k automatically"
                        } else {
                            "; ids 0-15 reach AIV0, 16-31 AIV1"
                        }
                    ),
                );
            }
        }
        SyncOp::ChannelAcquire { channel }
        | SyncOp::ChannelPush { channel }
        | SyncOp::ChannelPop { channel }
        | SyncOp::ChannelRelease { channel } => {
            let Some(ch) = cx.kernel.try_channel(*channel) else {
                return;
            };
            let producer_op = matches!(
                op,
                SyncOp::ChannelAcquire { .. } | SyncOp::ChannelPush { .. }
            );
            if producer_op != (ch.producer == section) {
                let side = if producer_op { "producer" } else { "consumer" };
                cx.error(
                    Rule::ChannelSide,
                    format!(
                        "{} is a {side} operation but channel `{}` is produced by the {} core and this is {section} code",
                        op.name(),
                        ch.name,
                        ch.producer
                    ),
                );
            }
        }
    }
}
