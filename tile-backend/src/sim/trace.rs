//! What a traced run records: per block and core, every executed op with its pipe, the bytes it
//! touched and how it synchronised. The timeline, cost report and hazard checks read this.

use crate::ir::{MemSpace, Op, OpLoc, Pipe};

pub use super::state::CoreId;

/// A memory a byte range lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mem {
    /// A GM tensor argument (by parameter index).
    Gm(u32),
    /// An on-chip buffer: a cube space, or the UB of AIV `aiv`.
    Chip {
        /// The space.
        space: MemSpace,
        /// For `Vec`, which AIV's UB (0 for cube spaces).
        aiv: u8,
    },
}

/// One contiguous byte range an op read or wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    /// Where.
    pub mem: Mem,
    /// First byte.
    pub start: usize,
    /// One past the last byte.
    pub end: usize,
    /// Write (true) or read.
    pub write: bool,
}

/// How an op took part in synchronisation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncInfo {
    /// Not a sync op.
    None,
    /// `set_flag(src, dst, event)`.
    SetFlag {
        /// Source pipe.
        src: Pipe,
        /// Destination pipe.
        dst: Pipe,
        /// Event id.
        event: u8,
    },
    /// `wait_flag(src, dst, event)`.
    WaitFlag {
        /// Source pipe.
        src: Pipe,
        /// Destination pipe.
        dst: Pipe,
        /// Event id.
        event: u8,
    },
    /// `pipe_barrier(pipe)`.
    Barrier(Pipe),
    /// A cross-core signal delivered to `to`'s flag `slot`.
    SetCross {
        /// Receiving core.
        to: CoreId,
        /// The receiver's flag slot.
        slot: u8,
    },
    /// A cross-core wait, satisfied by the `index`-th event of core `from`.
    WaitCross {
        /// The setting core.
        from: CoreId,
        /// Index of the setting event in that core's trace.
        index: usize,
    },
}

/// One executed op.
#[derive(Debug, Clone)]
pub struct Event<'k> {
    /// Where the op is in the kernel.
    pub loc: OpLoc,
    /// The op.
    pub op: &'k Op,
    /// The pipe it ran on.
    pub pipe: Pipe,
    /// Bytes touched, as contiguous runs.
    pub accesses: Vec<Access>,
    /// For matmul: the m, k, n the cube computed (whole fractals).
    pub cube: Option<[usize; 3]>,
    /// For a sort instruction: the work it did (its cost).
    pub sort: Option<SortWork>,
    /// Synchronisation.
    pub sync: SyncInfo,
}

impl Event<'_> {
    /// The `(start, end)` byte ranges this op read (`write` false) or wrote in on-chip `space`.
    pub fn ranges_in(&self, space: MemSpace, write: bool) -> Vec<(usize, usize)> {
        self.accesses
            .iter()
            .filter(|a| {
                a.write == write && matches!(a.mem, Mem::Chip { space: s, .. } if s == space)
            })
            .map(|a| (a.start, a.end))
            .collect()
    }
}

/// The ops one core executed, in program order.
#[derive(Debug, Clone, Default)]
pub struct CoreTrace<'k> {
    /// Events in program order.
    pub events: Vec<Event<'k>>,
}

/// One block's three cores (AIC, AIV0, AIV1).
#[derive(Debug, Clone, Default)]
pub struct BlockTrace<'k> {
    /// Block index.
    pub block: usize,
    /// Indexed by [`core_index`].
    pub cores: [CoreTrace<'k>; 3],
}

/// A whole run.
#[derive(Debug, Clone, Default)]
pub struct Trace<'k> {
    /// Blocks in index order.
    pub blocks: Vec<BlockTrace<'k>>,
}

/// Position of a core in [`BlockTrace::cores`].
pub fn core_index(c: CoreId) -> usize {
    match c {
        CoreId::Aic => 0,
        CoreId::Aiv(k) => 1 + (k as usize & 1),
    }
}

/// What the executing op records while it runs.
#[derive(Debug, Default)]
pub(crate) struct OpRecord {
    pub accesses: Vec<Access>,
    pub cube: Option<[usize; 3]>,
    pub sort: Option<SortWork>,
    pub sync: Option<SyncInfo>,
}

/// What a sort instruction did, for its cost: TSORT32's 32-element blocks sorted, or
/// TMRGSORT's pairs merged, and the bytes it copied UB -> UB (the tail form's row copy into
/// `tmp`, the multi-list form's copy of the best pairs from `tmp` to `dst`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SortWork {
    /// Blocks sorted (TSORT32) or pairs merged (TMRGSORT).
    pub units: usize,
    /// Bytes copied within UB.
    pub copied_bytes: usize,
}

impl OpRecord {
    pub fn touch(&mut self, mem: Mem, start: usize, len: usize, write: bool) {
        if len == 0 {
            return;
        }
        // Coalesce with the previous run when contiguous (whole-tile copies become one range).
        if let Some(last) = self.accesses.last_mut() {
            if last.mem == mem && last.write == write && last.end == start {
                last.end = start + len;
                return;
            }
        }
        self.accesses.push(Access {
            mem,
            start,
            end: start + len,
            write,
        });
    }
}
