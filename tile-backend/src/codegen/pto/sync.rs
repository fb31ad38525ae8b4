//! Sync ops: `set_flag` / `wait_flag` / `pipe_barrier` between the pipes of one core, and the
//! Ascend 950 cross-core flags `set_intra_block` / `wait_intra_block`.
//!
//! Cross-core ids are written as the IR holds them: cube code names the AIV it signals or waits
//! for (ids 0-15 reach AIV0, 16-31 AIV1); vector code uses its own id (0-15), which the hardware
//! maps to `id + 16` on AIV1. Channel ops never get here: the sync pass lowers them to these flags.

use super::{CodegenError, Emitter};
use crate::ir::{CoreKind, SyncOp};

pub(super) fn emit(e: &mut Emitter<'_>, op: &SyncOp) -> Result<(), CodegenError> {
    let events = e.arch.flag_events;
    let cross = e.arch.cross_flags;
    let event = |e: &Emitter<'_>, ev: u8| {
        if ev < events {
            Ok(format!("EVENT_ID{ev}"))
        } else {
            Err(e.unsupported(op.name(), format!("event id {ev} is not in 0..{events}")))
        }
    };
    let cross_id = |e: &Emitter<'_>, id: u8| {
        let limit = match e.section {
            CoreKind::Cube => cross,
            CoreKind::Vector => cross / 2,
        };
        if id < limit {
            Ok(id)
        } else {
            Err(e.unsupported(
                op.name(),
                format!(
                    "cross-core flag id {id} is not in 0..{limit} for {} code",
                    e.section
                ),
            ))
        }
    };
    let line = match op {
        SyncOp::SetFlag {
            src,
            dst,
            event: ev,
        } => format!(
            "set_flag({}, {}, {});",
            src.pto_name(),
            dst.pto_name(),
            event(e, *ev)?
        ),
        SyncOp::WaitFlag {
            src,
            dst,
            event: ev,
        } => format!(
            "wait_flag({}, {}, {});",
            src.pto_name(),
            dst.pto_name(),
            event(e, *ev)?
        ),
        SyncOp::Barrier { pipe } => format!("pipe_barrier({});", pipe.pto_name()),
        SyncOp::SetCrossFlag { pipe, id } => {
            let id = cross_id(e, *id)?;
            format!(
                "set_intra_block({}, {id});{}",
                pipe.pto_name(),
                target(e, id)
            )
        }
        SyncOp::WaitCrossFlag { pipe, id } => {
            let id = cross_id(e, *id)?;
            format!(
                "wait_intra_block({}, {id});{}",
                pipe.pto_name(),
                target(e, id)
            )
        }
        SyncOp::ChannelAcquire { .. }
        | SyncOp::ChannelPush { .. }
        | SyncOp::ChannelPop { .. }
        | SyncOp::ChannelRelease { .. } => {
            return Err(CodegenError::NotCompiled {
                kernel: e.k.name.clone(),
                reason: format!(
                    "{} ({}) is a channel op; the sync pass lowers channels to cross-core flags",
                    e.loc(),
                    op.name()
                ),
            })
        }
    };
    e.line(line);
    Ok(())
}

/// In cube code, which AIV a cross-core id addresses.
fn target(e: &Emitter<'_>, id: u8) -> &'static str {
    match e.section {
        CoreKind::Cube if id < e.arch.cross_flags / 2 => "  // AIV0",
        CoreKind::Cube => "  // AIV1",
        CoreKind::Vector => "",
    }
}
