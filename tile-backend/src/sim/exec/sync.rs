//! Synchronisation. Intra-core flags and barriers order pipes; the functional simulation runs
//! each core's ops in program order, so they need no action here (the timeline and race
//! detector use them). Cross-core flags block the waiting core until the signal arrives.

use super::{ExecCtx, Flow};
use crate::ir::SyncOp;
use crate::sim::trace::SyncInfo;
use crate::sim::SimFault;

pub(super) fn exec(cx: &mut ExecCtx<'_, '_, '_>, op: &SyncOp) -> Result<Flow, SimFault> {
    match op {
        SyncOp::SetFlag { src, dst, event } => cx.note_sync(SyncInfo::SetFlag {
            src: *src,
            dst: *dst,
            event: *event,
        }),
        SyncOp::WaitFlag { src, dst, event } => cx.note_sync(SyncInfo::WaitFlag {
            src: *src,
            dst: *dst,
            event: *event,
        }),
        SyncOp::Barrier { pipe } => cx.note_sync(SyncInfo::Barrier(*pipe)),
        SyncOp::SetCrossFlag { id, .. } => {
            let (to, slot) = cx.flags.set(cx.core.id, *id, cx.event_index)?;
            cx.note_sync(SyncInfo::SetCross { to, slot });
        }
        SyncOp::WaitCrossFlag { id, .. } => match cx.flags.try_wait(cx.core.id, *id)? {
            Some((from, index)) => cx.note_sync(SyncInfo::WaitCross { from, index }),
            None => return Ok(Flow::Blocked(*id)),
        },
        SyncOp::ChannelAcquire { .. }
        | SyncOp::ChannelPush { .. }
        | SyncOp::ChannelPop { .. }
        | SyncOp::ChannelRelease { .. } => return Err(SimFault::ChannelNotLowered),
    }
    Ok(Flow::Continue)
}
