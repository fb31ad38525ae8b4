//! Synchronisation: flags and barriers between the pipes of a core, cross-core flags, and the
//! cube <-> vector channel ops the sync pass lowers to cross-core flags. They run on the scalar
//! pipe and order the pipe they name.

use super::display::Names;
use super::{ChannelId, CostClass, GmUse, ParamId, Pipe};
use crate::ir::{Kernel, TileRef};
use serde::{Deserialize, Serialize};
use std::fmt;

/// A sync or channel op.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SyncOp {
    /// `set_flag(src, dst, event)`.
    SetFlag {
        /// Signalling pipe.
        src: Pipe,
        /// Waiting pipe.
        dst: Pipe,
        /// Event id (0..8).
        event: u8,
    },
    /// `wait_flag(src, dst, event)`.
    WaitFlag {
        /// Signalling pipe.
        src: Pipe,
        /// Waiting pipe.
        dst: Pipe,
        /// Event id (0..8).
        event: u8,
    },
    /// `pipe_barrier(pipe)`.
    Barrier {
        /// The pipe (or `All`).
        pipe: Pipe,
    },
    /// Cross-core signal (`set_intra_block`): ids 0-15 reach AIV0, 16-31 AIV1.
    SetCrossFlag {
        /// The pipe whose completion is signalled.
        pipe: Pipe,
        /// Flag id (0..32).
        id: u8,
    },
    /// Cross-core wait (`wait_intra_block`).
    WaitCrossFlag {
        /// The pipe that waits.
        pipe: Pipe,
        /// Flag id (0..32).
        id: u8,
    },
    /// Producer: wait until the channel has a free slot.
    ChannelAcquire {
        /// The channel.
        channel: ChannelId,
    },
    /// Producer: the slot's data is written; signal the consumer(s).
    ChannelPush {
        /// The channel.
        channel: ChannelId,
    },
    /// Consumer: wait until the next slot's data has arrived.
    ChannelPop {
        /// The channel.
        channel: ChannelId,
    },
    /// Consumer: done reading the slot; signal the producer.
    ChannelRelease {
        /// The channel.
        channel: ChannelId,
    },
}

impl SyncOp {
    /// The JSON variant names.
    pub(super) const NAMES: &'static [&'static str] = &[
        "SetFlag",
        "WaitFlag",
        "Barrier",
        "SetCrossFlag",
        "WaitCrossFlag",
        "ChannelAcquire",
        "ChannelPush",
        "ChannelPop",
        "ChannelRelease",
    ];

    /// Short name for diagnostics.
    pub fn name(&self) -> &'static str {
        match self {
            SyncOp::SetFlag { .. } => "set_flag",
            SyncOp::WaitFlag { .. } => "wait_flag",
            SyncOp::Barrier { .. } => "pipe_barrier",
            SyncOp::SetCrossFlag { .. } => "set_cross_flag",
            SyncOp::WaitCrossFlag { .. } => "wait_cross_flag",
            SyncOp::ChannelAcquire { .. } => "channel_acquire",
            SyncOp::ChannelPush { .. } => "channel_push",
            SyncOp::ChannelPop { .. } => "channel_pop",
            SyncOp::ChannelRelease { .. } => "channel_release",
        }
    }

    /// The channel of a channel op.
    pub fn channel(&self) -> Option<ChannelId> {
        match self {
            SyncOp::ChannelAcquire { channel }
            | SyncOp::ChannelPush { channel }
            | SyncOp::ChannelPop { channel }
            | SyncOp::ChannelRelease { channel } => Some(*channel),
            SyncOp::SetFlag { .. }
            | SyncOp::WaitFlag { .. }
            | SyncOp::Barrier { .. }
            | SyncOp::SetCrossFlag { .. }
            | SyncOp::WaitCrossFlag { .. } => None,
        }
    }

    /// The pipe the op orders, which the timeline places it on: a flag's signalling pipe for a
    /// set and waiting pipe for a wait, a barrier's or a cross-core flag's pipe (`None` for
    /// channel ops, which the sync pass lowers).
    pub fn ordered_pipe(&self) -> Option<Pipe> {
        match self {
            SyncOp::SetFlag { src, .. } => Some(*src),
            SyncOp::WaitFlag { dst, .. } => Some(*dst),
            SyncOp::Barrier { pipe }
            | SyncOp::SetCrossFlag { pipe, .. }
            | SyncOp::WaitCrossFlag { pipe, .. } => Some(*pipe),
            SyncOp::ChannelAcquire { .. }
            | SyncOp::ChannelPush { .. }
            | SyncOp::ChannelPop { .. }
            | SyncOp::ChannelRelease { .. } => None,
        }
    }

    /// Sync ops touch no tile.
    pub fn tile_reads(&self) -> Vec<&TileRef> {
        vec![]
    }

    /// Sync ops touch no tile.
    pub fn tile_writes(&self) -> Vec<&TileRef> {
        vec![]
    }

    /// Sync ops touch no GM tensor.
    pub fn gm_use(&self, _: ParamId) -> GmUse {
        GmUse::None
    }

    /// Issued by the scalar pipe (the timeline places each on the pipe it orders).
    pub fn pipe(&self) -> Pipe {
        Pipe::S
    }

    /// The intrinsic.
    pub fn instruction(&self, _: &Kernel) -> &'static str {
        match self {
            SyncOp::SetFlag { .. } => "set_flag",
            SyncOp::WaitFlag { .. } => "wait_flag",
            SyncOp::Barrier { .. } => "pipe_barrier",
            SyncOp::SetCrossFlag { .. } => "set_intra_block",
            SyncOp::WaitCrossFlag { .. } => "wait_intra_block",
            SyncOp::ChannelAcquire { .. } | SyncOp::ChannelPop { .. } => "wait_intra_block",
            SyncOp::ChannelPush { .. } | SyncOp::ChannelRelease { .. } => "set_intra_block",
        }
    }

    /// One cycle each: their waiting is the timeline's, not a cost.
    pub fn cost_class(&self) -> CostClass<'_> {
        CostClass::Unit
    }

    pub(super) fn fmt(&self, n: &Names<'_>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SyncOp::SetFlag { src, dst, event } => {
                write!(f, "set_flag {src} -> {dst} event {event}")
            }
            SyncOp::WaitFlag { src, dst, event } => {
                write!(f, "wait_flag {src} -> {dst} event {event}")
            }
            SyncOp::Barrier { pipe } => write!(f, "pipe_barrier {pipe}"),
            SyncOp::SetCrossFlag { pipe, id } => write!(f, "set_cross_flag {pipe} id {id}"),
            SyncOp::WaitCrossFlag { pipe, id } => write!(f, "wait_cross_flag {pipe} id {id}"),
            SyncOp::ChannelAcquire { channel }
            | SyncOp::ChannelPush { channel }
            | SyncOp::ChannelPop { channel }
            | SyncOp::ChannelRelease { channel } => {
                write!(f, "{} {}", self.name(), n.channel(*channel))
            }
        }
    }
}

#[cfg(test)]
impl SyncOp {
    /// One op of every variant, in `NAMES` order (the name table's round-trip test).
    pub(super) fn samples() -> Vec<Self> {
        use super::sample::*;
        let (p, ch) = (Pipe::V, ChannelId(0));
        vec![
            SyncOp::SetFlag {
                src: p,
                dst: Pipe::Mte3,
                event: 0,
            },
            SyncOp::WaitFlag {
                src: p,
                dst: Pipe::Mte3,
                event: 0,
            },
            SyncOp::Barrier { pipe: Pipe::All },
            SyncOp::SetCrossFlag { pipe: p, id: 0 },
            SyncOp::WaitCrossFlag { pipe: p, id: 0 },
            SyncOp::ChannelAcquire { channel: ch },
            SyncOp::ChannelPush { channel: ch },
            SyncOp::ChannelPop { channel: ch },
            SyncOp::ChannelRelease { channel: ch },
        ]
    }
}
