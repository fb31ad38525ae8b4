//! Resolving tile references to bytes, and copying regions between a tile's stored layout and
//! row-major scratch.

use super::SimError;
use crate::arch::Arch;
use crate::ir::{Kernel, Layout, MemSpace, Storage, TileId, TileRef, TileType, ValidDim};

/// Every allocated tile has an address.
pub(crate) fn check_planned(kernel: &Kernel) -> Result<(), SimError> {
    for d in &kernel.tiles {
        if d.storage == Storage::Alloc && d.addr.is_none() {
            return Err(SimError::NotPlanned(d.name.clone()));
        }
    }
    Ok(())
}

/// A tile reference resolved for one access.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TileLoc<'k> {
    /// Its type (an alias's own type).
    pub ty: &'k TileType,
    /// Byte address of the selected buffer.
    pub addr: usize,
    /// Valid rows and columns now (`None`: a dynamic valid shape this core never set).
    valid: Option<(usize, usize)>,
    name: &'k str,
}

impl TileLoc<'_> {
    /// Valid rows and columns; an error when a dynamic valid shape was never set on this core.
    pub fn valid(&self) -> Result<(usize, usize), String> {
        self.valid.ok_or_else(|| {
            format!(
                "tile `{}` has a dynamic valid shape that was never set (set_validshape)",
                self.name
            )
        })
    }
    pub fn space(&self) -> MemSpace {
        self.ty.space
    }
    pub fn es(&self) -> usize {
        self.ty.dtype.size_bytes() as usize
    }
    pub fn rows(&self) -> usize {
        self.ty.rows as usize
    }
    pub fn cols(&self) -> usize {
        self.ty.cols as usize
    }
}

/// Resolves `r` given the evaluated slot and the core's runtime valid shapes.
pub(crate) fn resolve<'k>(
    kernel: &'k Kernel,
    arch: &Arch,
    r: &TileRef,
    slot: i64,
    runtime_valid: &dyn Fn(TileId) -> Option<(u64, u64)>,
) -> Result<TileLoc<'k>, String> {
    let decl = kernel
        .try_tile(r.tile)
        .ok_or_else(|| format!("tile id {} is not declared", r.tile.0))?;
    let root = kernel.tile(kernel.root_tile(r.tile));
    let base = root
        .addr
        .ok_or_else(|| format!("tile `{}` has no address", root.name))?;
    let n = root.buffers.max(1) as i64;
    let slot = slot.rem_euclid(n) as u64;
    let addr = base + slot * arch.buffer_stride(&root.ty);
    let ty = &decl.ty;
    let valid = match (ty.valid_rows, ty.valid_cols) {
        (ValidDim::Static(r), ValidDim::Static(c)) => Some((r, c)),
        (vr, vc) => {
            let rt = runtime_valid(r.tile);
            let pick = |d: ValidDim, i: usize| match d {
                ValidDim::Static(v) => Some(v),
                ValidDim::Dynamic => rt.map(|x| if i == 0 { x.0 } else { x.1 }),
            };
            match (pick(vr, 0), pick(vc, 1)) {
                (Some(r), Some(c)) => Some((r, c)),
                _ => None,
            }
        }
    };
    Ok(TileLoc {
        ty,
        addr: addr as usize,
        valid: valid.map(|(r, c)| (r as usize, c as usize)),
        name: &decl.name,
    })
}

/// Elements stored contiguously from `(r, c)` along the row.
#[inline]
fn run_len(ty: &TileType, c: usize) -> usize {
    match ty.layout {
        Layout::ND => ty.cols as usize - c,
        Layout::NZ | Layout::ZZ => {
            let ic = ty.fractal.map(|f| f.cols as usize).unwrap_or(1);
            ic - c % ic
        }
        Layout::DN | Layout::ZN => 1,
    }
}

fn check_region(
    loc: &TileLoc,
    buf_len: usize,
    r0: usize,
    c0: usize,
    rows: usize,
    cols: usize,
) -> Result<(), String> {
    if r0 + rows > loc.rows() || c0 + cols > loc.cols() {
        return Err(format!(
            "region [{r0}..{}, {c0}..{}] is outside the {}x{} tile",
            r0 + rows,
            c0 + cols,
            loc.rows(),
            loc.cols()
        ));
    }
    if loc.addr + loc.ty.bytes() as usize > buf_len {
        return Err(format!(
            "tile at {:#x} ({} B) overruns its {} buffer of {} B",
            loc.addr,
            loc.ty.bytes(),
            loc.space(),
            buf_len
        ));
    }
    Ok(())
}

/// Calls `f(buffer byte offset, row-major byte offset, bytes)` for each contiguous run of the
/// `rows x cols` region at `(r0, c0)` (checked against the tile and a buffer of `buf_len` bytes).
pub(crate) fn for_each_run(
    loc: &TileLoc,
    buf_len: usize,
    (r0, c0): (usize, usize),
    (rows, cols): (usize, usize),
    mut f: impl FnMut(usize, usize, usize),
) -> Result<(), String> {
    check_region(loc, buf_len, r0, c0, rows, cols)?;
    let es = loc.es();
    for r in 0..rows {
        let mut c = 0;
        while c < cols {
            let n = run_len(loc.ty, c0 + c).min(cols - c);
            let off =
                loc.addr + loc.ty.element_offset((r0 + r) as u64, (c0 + c) as u64) as usize * es;
            f(off, (r * cols + c) * es, n * es);
            c += n;
        }
    }
    Ok(())
}

/// Copies the `rows x cols` region at `(r0, c0)` of a tile into row-major bytes `out`.
pub(crate) fn read_region(
    buf: &[u8],
    loc: &TileLoc,
    at: (usize, usize),
    size: (usize, usize),
    out: &mut Vec<u8>,
) -> Result<(), String> {
    out.clear();
    out.resize(size.0 * size.1 * loc.es(), 0);
    for_each_run(loc, buf.len(), at, size, |off, dst, n| {
        out[dst..dst + n].copy_from_slice(&buf[off..off + n])
    })
}

/// Copies row-major bytes `data` into the `rows x cols` region at `(r0, c0)` of a tile.
pub(crate) fn write_region(
    buf: &mut [u8],
    loc: &TileLoc,
    at: (usize, usize),
    size: (usize, usize),
    data: &[u8],
) -> Result<(), String> {
    let len = buf.len();
    for_each_run(loc, len, at, size, |off, src, n| {
        buf[off..off + n].copy_from_slice(&data[src..src + n])
    })
}
