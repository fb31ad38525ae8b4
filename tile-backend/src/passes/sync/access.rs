//! What each op touches: planned byte ranges of tiles, and whole GM tensors.

use super::SyncError;
use crate::arch::Arch;
use crate::ir::{
    walk_ops, BinOp, CoreKind, Expr, Kernel, MemSpace, Op, ParamId, Stmt, TileRef, VarId,
};
use std::collections::BTreeMap;

/// The loops enclosing an op: each loop variable's start and step.
pub(super) type Loops = BTreeMap<VarId, (Expr, i64)>;

/// The value of `e` modulo `n` when it is the same on every execution: constants, loop
/// variables with such a start and a step that is a multiple of `n`, and `+ - *` and `%` by a
/// positive multiple of `n` of those.
fn residue(e: &Expr, n: i64, loops: &Loops, depth: u32) -> Option<i64> {
    if n <= 0 || depth > 64 {
        return None;
    }
    let r = |x: &Expr| residue(x, n, loops, depth + 1);
    match e {
        Expr::Const(c) => Some(c.rem_euclid(n)),
        Expr::Var(v) => {
            let (start, step) = loops.get(v)?;
            if step.rem_euclid(n) == 0 {
                r(start)
            } else {
                None
            }
        }
        Expr::Bin(op, a, b) => match op {
            BinOp::Add => Some((r(a)? + r(b)?).rem_euclid(n)),
            BinOp::Sub => Some((r(a)? - r(b)?).rem_euclid(n)),
            BinOp::Mul => Some(r(a)?.checked_mul(r(b)?)?.rem_euclid(n)),
            BinOp::Rem => match b.as_const() {
                Some(m) if m > 0 && m % n == 0 => r(a),
                _ => None,
            },
            _ => None,
        },
        _ => None,
    }
}
use crate::passes::memory::{buffer_range_in, group_range_in};

/// A resource an op reads or writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Res {
    /// Bytes `[start, end)` of an on-chip space.
    Mem {
        /// The space.
        space: MemSpace,
        /// First byte.
        start: u64,
        /// One past the last byte.
        end: u64,
    },
    /// A whole GM tensor argument (conservative: windows are not compared).
    Gm(ParamId),
}

impl Res {
    /// True if the two resources may share a byte.
    pub fn overlaps(&self, other: &Res) -> bool {
        match (self, other) {
            (
                Res::Mem { space, start, end },
                Res::Mem {
                    space: s2,
                    start: b2,
                    end: e2,
                },
            ) => space == s2 && start < e2 && b2 < end,
            (Res::Gm(a), Res::Gm(b)) => a == b,
            _ => false,
        }
    }
}

/// An access: a resource and whether it is written.
pub(super) type Access = (Res, bool);

/// True if some pair of accesses overlaps with at least one write.
pub(super) fn conflict(a: &[Access], b: &[Access]) -> bool {
    a.iter()
        .any(|(ra, wa)| b.iter().any(|(rb, wb)| (*wa || *wb) && ra.overlaps(rb)))
}

/// The bytes a tile reference may touch: one buffer when the slot is the same on every execution
/// (modulo the group size, see [`residue`]), the hull of all buffers otherwise.
pub(super) fn tile_res(
    kernel: &Kernel,
    arch: &Arch,
    r: &TileRef,
    loops: &Loops,
) -> Result<Res, SyncError> {
    let not_planned = || SyncError::NotPlanned {
        tile: kernel
            .try_tile(r.tile)
            .map(|d| d.name.clone())
            .unwrap_or_else(|| format!("#{}", r.tile.0)),
    };
    let buffers = kernel
        .try_tile(kernel.root_tile(r.tile))
        .map_or(1, |d| i64::from(d.buffers.max(1)));
    let found = match residue(&r.slot, buffers, loops, 0) {
        Some(slot) => buffer_range_in(kernel, arch, r.tile, slot),
        None => group_range_in(kernel, arch, r.tile),
    };
    let (space, start, end) = found.ok_or_else(not_planned)?;
    Ok(Res::Mem { space, start, end })
}

/// Reads and writes of a data op (tiles and GM tensors).
pub(super) fn op_accesses(
    kernel: &Kernel,
    arch: &Arch,
    op: &Op,
    loops: &Loops,
) -> Result<Vec<Access>, SyncError> {
    let mut out = Vec::new();
    for r in op.tile_reads() {
        out.push((tile_res(kernel, arch, r, loops)?, false));
    }
    for r in op.tile_writes() {
        out.push((tile_res(kernel, arch, r, loops)?, true));
    }
    out.extend(op.dma_gm().into_iter().map(|(p, w)| (Res::Gm(p), w)));
    Ok(out)
}

/// Every data access of a section's ops.
fn section_accesses(
    kernel: &Kernel,
    arch: &Arch,
    stmts: &[Stmt],
) -> Result<Vec<Access>, SyncError> {
    let mut ops = Vec::new();
    walk_ops(stmts, &mut |op| ops.push(op));
    let mut out = Vec::new();
    for op in ops {
        out.extend(op_accesses(kernel, arch, op, &Loops::new())?);
    }
    Ok(out)
}

/// The resources through which the two cores communicate, per section (`[cube, vector]`): what a
/// section touches that the other writes, and what it writes that the other touches.
pub(super) fn crossing(kernel: &Kernel, arch: &Arch) -> Result<[Vec<Access>; 2], SyncError> {
    let cube = section_accesses(kernel, arch, kernel.section(CoreKind::Cube))?;
    let vector = section_accesses(kernel, arch, kernel.section(CoreKind::Vector))?;
    let pick = |mine: &[Access], other: &[Access]| -> Vec<Access> {
        let mut v: Vec<Access> = Vec::new();
        for (r, w) in mine {
            let shared = other.iter().any(|(o, ow)| (*w || *ow) && r.overlaps(o));
            if shared && !v.iter().any(|(x, _)| x == r) {
                // As a virtual access of a cross-core flag, every crossing resource is a write.
                v.push((*r, true));
            }
        }
        v
    };
    Ok([pick(&cube, &vector), pick(&vector, &cube)])
}

/// Index of a section in per-section arrays.
pub(super) fn section_index(core: CoreKind) -> usize {
    match core {
        CoreKind::Cube => 0,
        CoreKind::Vector => 1,
    }
}
