//! Sync insertion: the intra-core flags a program needs, and the cross-core flags of its
//! declared channels (ASCEND950.md §4).
//!
//! # Channels
//!
//! Each channel that some op uses gets two flag ids `d` (data) and `f` (free) in `0..16`, not
//! used (modulo 16) by any hand-written cross-core flag. Vector code writes the id itself (AIV k's
//! hardware id is offset by 16k); cube code signals and waits for both AIVs (`id` and `id + 16`):
//!
//! | op | lowered to |
//! |---|---|
//! | `acquire` (producer) | wait `f` |
//! | `push` (producer) | set `d` |
//! | `pop` (consumer) | wait `d` |
//! | `release` (consumer) | set `f` |
//!
//! The consumer pre-sets `f` once at the start of its program (the slot starts free) and the
//! producer drains it with a final wait at the end, so every set meets exactly one wait. A wait
//! runs on the pipe of the next op that touches a *crossing* resource (bytes or GM tensors one
//! core writes and the other touches), a set on the pipe of the previous one (defaults: cube
//! FIX / MTE1, vector MTE3 / V). Depth > 1 is lowered like depth 1 (binary flags with constant
//! ids cannot count slots): correct, without the extra overlap.
//!
//! # Intra-core flags
//!
//! Every op gets its pipe (`Arch::pipe_of`) and its accesses: the planned byte range of each tile
//! it reads or writes, and whole GM tensors for loads, stores and gathers. A slot selects one
//! buffer when its value modulo the group size is the same on every execution (constants, and
//! `+ - *` and `% m` (m a multiple of the group size) of loop variables whose start is such and
//! whose step is a multiple of the group size, e.g. `i % 2` and `(i + 1) % 2` in a loop unrolled
//! by 2); any other slot covers the whole group, so e.g. `i % 2` and `(i + 1) % 2` with step 1
//! are conservatively possibly-equal. A cross-core wait counts as a write of every crossing resource,
//! both ways: what follows on other pipes must be ordered after it, and what this core did
//! before it on other pipes is ordered before it (it stands for the other core's next writes);
//! a cross-core set is an access that must come after them. The second half keeps a pair that
//! starts at a cross-core wait from losing a signal in a loop: its next set (after the next
//! wait) then follows this iteration's wait, as for any pair between two tile ops, whose
//! accesses conflict both ways. Two ops on different pipes depend when their accesses overlap
//! and one writes. A scalar read of a UB tile (`read_tile_scalar`, S pipe) reads its tile like
//! any op: it waits MTE2 -> S for the load that filled it, and a later load into those bytes
//! waits S -> MTE2. The other S-pipe ops (GM scalar reads and writes, `set_validshape`) touch no
//! tile and need nothing; nor do same-pipe pairs.
//!
//! A must-analysis over the structured program computes, before each op on pipe `P`, the ops
//! whose latest executed instance may not yet be ordered before `P` — through program order on a
//! pipe, `set_flag`/`wait_flag` pairs (hand-written and inserted), `pipe_barrier(ALL)` and the
//! unit flag (a matmul with `phase: Final` orders itself and what precedes it on M before the
//! `phase: Final` Fixpipe move of the same Acc allocation). Branches meet by intersection; loops
//! iterate to the fixed point (zero or more iterations), so loop-carried dependencies appear.
//! While some dependent op `b` is unordered after some op `a`, the pass adds one pair, for the
//! first such `b` (forward pairs first, then the latest `a`), and re-runs the analysis:
//!
//! - forward (`a` precedes `b` in the innermost block holding both, at statements `ia < ib`):
//!   `set_flag(pipe(a), pipe(b))` after statement `ia`, `wait_flag` before statement `ib`; the
//!   set moves down to the latest statement of the block holding the source of another
//!   unordered dependency with the same pipes waited on before the same `ib` (the waiting pipe
//!   needs that set before `ib` anyway), so e.g. tiles written one by one and stored under one
//!   `if` take one pair, not one per tile;
//! - loop-carried (`a` at or after `b` in the body of the innermost loop holding both, or in the
//!   other branch of an `if`): set before the loop, wait before the body statement holding `b`,
//!   set after the one holding `a`, and a final wait after the loop (the back-pressure pattern).
//!
//! Both shapes execute exactly one wait per set whatever the trip counts and branches, so no set
//! is ever lost. Hoisting to the statement that holds an op is conservative for `if`s and inner
//! loops. Finally each pipe pair's inserted flags get event ids the author never uses for that
//! pair; pairs whose live spans (set to last wait, contiguous in one block) are disjoint share
//! an id. Hand-written syncs are kept as they are.

mod access;
mod channels;
mod flags;

use crate::arch::Arch;
use crate::ir::{CoreKind, Kernel, Pipe};
use thiserror::Error;

/// Why sync insertion failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SyncError {
    /// A tile has no planned address.
    #[error(
        "tile `{tile}` has no address: plan memory (passes::memory::plan) before inserting syncs"
    )]
    NotPlanned {
        /// Tile name.
        tile: String,
    },
    /// An op with no pipe on this machine (an illegal form the verifier rejects).
    #[error("{op} runs on no pipe of this machine (run the verifier for the reason)")]
    NoPipe {
        /// Op name.
        op: &'static str,
    },
    /// A channel op names an undeclared channel.
    #[error("channel id {channel} is not declared")]
    UnknownChannel {
        /// The id.
        channel: u32,
    },
    /// Every event id of a pipe pair is taken.
    #[error(
        "{section} code needs {needed} more {src} -> {dst} event id(s) but none is free (the author uses {author:?})"
    )]
    NoFreeEvent {
        /// Section.
        section: CoreKind,
        /// Signalling pipe.
        src: Pipe,
        /// Waiting pipe.
        dst: Pipe,
        /// Ids the author's syncs use for this pair.
        author: Vec<u8>,
        /// Ids the pass needed at the point of failure.
        needed: usize,
    },
    /// No cross-core flag ids are left for a channel.
    #[error(
        "no cross-core flag ids left for channel `{channel}` (hand-written flags use {used:?})"
    )]
    NoFreeCrossFlag {
        /// Channel name.
        channel: String,
        /// Ids (modulo 16) already in use.
        used: Vec<u8>,
    },
    /// Internal: a dependency the placement rules could not order.
    #[error("{section} code: could not order {later} after {earlier}")]
    Unresolved {
        /// Section.
        section: CoreKind,
        /// Earlier op name.
        earlier: &'static str,
        /// Later op name.
        later: &'static str,
    },
}

/// Lowers channels to cross-core flags and inserts the missing intra-core flags (see the module
/// docs). The kernel's memory must be planned.
pub fn insert(kernel: &Kernel, arch: &Arch) -> Result<Kernel, SyncError> {
    let crossing = access::crossing(kernel, arch)?;
    let lowered = channels::lower(kernel, arch, &crossing)?;
    let mut out = kernel.clone();
    for core in [CoreKind::Cube, CoreKind::Vector] {
        let i = access::section_index(core);
        let stmts = flags::insert_section(kernel, arch, core, &lowered[i], &crossing[i])?;
        match core {
            CoreKind::Cube => out.cube = stmts,
            CoreKind::Vector => out.vector = stmts,
        }
    }
    Ok(out)
}
