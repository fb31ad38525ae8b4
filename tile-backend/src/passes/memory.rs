//! Memory planning: a byte address for every allocated tile (ASCEND950.md §2, §7).
//!
//! - Each `Storage::Alloc` tile without an address gets one in its space, aligned to the space's
//!   planning alignment (`SpaceSpec::plan_align`: 128 B for Mat/Acc/Vec/Scaling, 64 B for
//!   Left/Right/Bias on Ascend 950).
//! - A group of `n` buffers occupies `n * stride` bytes, with `stride` = one buffer rounded up to
//!   the alignment ([`Arch::buffer_stride`]); buffer `i` lives at `addr + i * stride`.
//! - Author-fixed addresses are kept, and planned tiles never overlap them.
//! - Reinterpret aliases get no address of their own: they resolve to their root allocation
//!   ([`buffer_range`]).
//! - Every space is planned within its `safe_capacity` (UB: 240 KiB of the 248 KiB physical); a
//!   kernel that does not fit gets a [`PlanError::Capacity`] naming the space, the bytes needed
//!   and available, and every tile of the space with its size, largest first.
//!
//! The placement is first-fit in declaration order: simple and deterministic. There is no
//! liveness-based reuse: two tiles never share bytes unless the author aliases them.

use crate::arch::Arch;
use crate::ir::{Kernel, MemSpace, Storage, TileId};
use std::fmt;
use std::sync::OnceLock;
use thiserror::Error;

/// One tile of an overflowing space, for the error message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TileSize {
    /// Tile name.
    pub name: String,
    /// Bytes it occupies (all buffers of the group, aligned).
    pub bytes: u64,
}

impl fmt::Display for TileSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` {} B", self.name, self.bytes)
    }
}

/// Why a kernel's memory could not be planned.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PlanError {
    /// The tiles of a space do not fit in it.
    #[error(
        "tiles need {needed} B of {space} ({hw}) but {available} B are available{note}: {}",
        .tiles.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", "),
        hw = .space.hardware_name(),
        note = if *.space == MemSpace::Vec { " (the safe 240 KiB; PTO-ISA corrupts the top of UB)" } else { "" }
    )]
    Capacity {
        /// The space.
        space: MemSpace,
        /// Bytes the plan needs (the end of the highest tile).
        needed: u64,
        /// Bytes a plan may use (`safe_capacity`).
        available: u64,
        /// Every allocated tile of the space, largest first.
        tiles: Vec<TileSize>,
    },
    /// A tile lives in a space that has no on-chip buffer on this machine (e.g. GM).
    #[error("tile `{tile}` is declared in {space}, which has no on-chip buffer to plan")]
    NoSpace {
        /// Tile name.
        tile: String,
        /// Its space.
        space: MemSpace,
    },
    /// A reinterpret whose source chain does not end in an allocation.
    #[error("reinterpret `{tile}` does not resolve to an allocated tile")]
    BadAlias {
        /// Tile name.
        tile: String,
    },
}

/// The machine description of a target with its default SKU, built once.
fn default_arch(kernel: &Kernel) -> &'static Arch {
    static A950: OnceLock<Arch> = OnceLock::new();
    static A2A3: OnceLock<Arch> = OnceLock::new();
    match kernel.target {
        crate::arch::Target::Ascend950 => A950.get_or_init(Arch::ascend950),
        crate::arch::Target::A2A3 => A2A3.get_or_init(Arch::a2a3),
    }
}

/// Bytes a group occupies: `buffers * stride`.
fn group_bytes(arch: &Arch, kernel: &Kernel, id: usize) -> u64 {
    let d = &kernel.tiles[id];
    arch.buffer_stride(&d.ty)
        .saturating_mul(u64::from(d.buffers))
}

/// Plans the addresses of every allocated tile without one (see the module docs).
pub fn plan(kernel: &Kernel, arch: &Arch) -> Result<Kernel, PlanError> {
    let mut out = kernel.clone();
    for (i, d) in kernel.tiles.iter().enumerate() {
        match d.storage {
            Storage::Alloc => {
                if arch.space(d.ty.space).is_none() {
                    return Err(PlanError::NoSpace {
                        tile: d.name.clone(),
                        space: d.ty.space,
                    });
                }
            }
            Storage::Alias { .. } => {
                let root = kernel.root_tile(TileId(i as u32));
                let ok = kernel
                    .try_tile(root)
                    .is_some_and(|r| r.storage == Storage::Alloc);
                if !ok {
                    return Err(PlanError::BadAlias {
                        tile: d.name.clone(),
                    });
                }
            }
        }
    }
    for space in MemSpace::ON_CHIP {
        let Some(spec) = arch.space(space) else {
            continue;
        };
        let align = spec.plan_align.max(1);
        let members: Vec<usize> = (0..kernel.tiles.len())
            .filter(|&i| {
                let d = &kernel.tiles[i];
                d.ty.space == space && d.storage == Storage::Alloc
            })
            .collect();
        // Occupied [start, end) intervals: fixed tiles first, then planned ones as they land.
        let mut occupied: Vec<(u64, u64)> = members
            .iter()
            .filter_map(|&i| {
                kernel.tiles[i]
                    .addr
                    .map(|a| (a, a.saturating_add(group_bytes(arch, kernel, i))))
            })
            .collect();
        for &i in &members {
            if kernel.tiles[i].addr.is_some() {
                continue;
            }
            let size = group_bytes(arch, kernel, i);
            let addr = first_fit(&mut occupied, size, align);
            out.tiles[i].addr = Some(addr);
        }
        let needed = occupied.iter().map(|&(_, e)| e).max().unwrap_or(0);
        if needed > spec.safe_capacity {
            let mut tiles: Vec<(usize, TileSize)> = members
                .iter()
                .map(|&i| {
                    (
                        i,
                        TileSize {
                            name: kernel.tiles[i].name.clone(),
                            bytes: group_bytes(arch, kernel, i),
                        },
                    )
                })
                .collect();
            tiles.sort_by(|a, b| b.1.bytes.cmp(&a.1.bytes).then(a.0.cmp(&b.0)));
            return Err(PlanError::Capacity {
                space,
                needed,
                available: spec.safe_capacity,
                tiles: tiles.into_iter().map(|(_, t)| t).collect(),
            });
        }
    }
    Ok(out)
}

/// The lowest `align`-aligned address where `size` bytes fit between the occupied intervals;
/// records the new interval.
fn first_fit(occupied: &mut Vec<(u64, u64)>, size: u64, align: u64) -> u64 {
    occupied.sort_unstable();
    let mut cand = 0u64;
    for &(s, e) in occupied.iter() {
        if e <= s {
            continue;
        }
        if cand.saturating_add(size) <= s {
            break;
        }
        if e > cand {
            cand = e.div_ceil(align).saturating_mul(align);
        }
    }
    occupied.push((cand, cand.saturating_add(size)));
    cand
}

/// The bytes of buffer `slot` (taken modulo the group size, Euclidean) of tile `tile`:
/// `(space, start, end)` with `end` exclusive, covering the referenced tile's own footprint.
/// Aliases resolve to their root allocation's address. `None` if the tile is unknown, does not
/// resolve to an allocation, or has no address yet. Uses the default machine of the kernel's
/// target; see [`buffer_range_in`] for another description.
pub fn buffer_range(kernel: &Kernel, tile: TileId, slot: i64) -> Option<(MemSpace, u64, u64)> {
    buffer_range_in(kernel, default_arch(kernel), tile, slot)
}

/// [`buffer_range`] with an explicit machine description (its `plan_align` decides strides).
pub fn buffer_range_in(
    kernel: &Kernel,
    arch: &Arch,
    tile: TileId,
    slot: i64,
) -> Option<(MemSpace, u64, u64)> {
    let decl = kernel.try_tile(tile)?;
    let root = kernel.try_tile(kernel.root_tile(tile))?;
    if root.storage != Storage::Alloc {
        return None;
    }
    let base = root.addr?;
    let n = i64::from(root.buffers.max(1));
    let idx = slot.rem_euclid(n) as u64;
    let start = base.checked_add(idx.checked_mul(arch.buffer_stride(&root.ty))?)?;
    let end = start.checked_add(decl.ty.bytes())?;
    Some((root.ty.space, start, end))
}

/// The bytes any buffer of tile `tile` may occupy: from buffer 0's start to the last buffer's
/// end (the hull used when a slot is not a constant).
pub fn group_range_in(kernel: &Kernel, arch: &Arch, tile: TileId) -> Option<(MemSpace, u64, u64)> {
    let root = kernel.try_tile(kernel.root_tile(tile))?;
    let (space, start, _) = buffer_range_in(kernel, arch, tile, 0)?;
    let last = i64::from(root.buffers.max(1)) - 1;
    let (_, _, end) = buffer_range_in(kernel, arch, tile, last)?;
    Some((space, start, end))
}
