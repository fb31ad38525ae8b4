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
    /// The tile's name.
    pub fn name(&self) -> &str {
        self.name
    }

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
    let root_id = kernel.root_tile(r.tile);
    let root = kernel.try_tile(root_id).ok_or_else(|| {
        format!(
            "tile `{}` aliases undeclared tile id {}",
            decl.name, root_id.0
        )
    })?;
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

/// Elements stored contiguously from column `c` along a row (row-major layouts and boxes).
#[inline]
fn row_run(ty: &TileType, c: usize) -> usize {
    match ty.layout {
        Layout::ND => ty.cols as usize - c,
        _ => {
            let ic = ty.fractal.map(|f| f.cols.max(1) as usize).unwrap_or(1);
            ic - c % ic
        }
    }
}

/// Elements stored contiguously from row `r` down a column (column-major layouts and boxes).
#[inline]
fn col_run(ty: &TileType, r: usize) -> usize {
    match ty.layout {
        Layout::DN => ty.rows as usize - r,
        _ => {
            let ir = ty.fractal.map(|f| f.rows.max(1) as usize).unwrap_or(1);
            ir - r % ir
        }
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

/// One contiguous run of a region in the tile's buffer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Run {
    /// Byte offset in the buffer.
    pub buf: usize,
    /// Index (in elements) of the run's first element in the row-major region.
    pub elem: usize,
    /// Elements in the run.
    pub len: usize,
    /// Distance (in elements) between the run's consecutive elements in the row-major region:
    /// 1 for row-major layouts, the region's column count for column-major ones.
    pub stride: usize,
}

/// Calls `f` for each contiguous run of the `rows x cols` region at `(r0, c0)`, in storage order
/// (checked against the tile and a buffer of `buf_len` bytes). Row-major layouts (ND, NZ, ZZ) run
/// along rows, column-major ones (DN, ZN) down columns, so runs are as long as the layout allows.
pub(crate) fn for_each_run(
    loc: &TileLoc,
    buf_len: usize,
    (r0, c0): (usize, usize),
    (rows, cols): (usize, usize),
    mut f: impl FnMut(Run),
) -> Result<(), String> {
    check_region(loc, buf_len, r0, c0, rows, cols)?;
    let es = loc.es();
    let at =
        |r: usize, c: usize| loc.addr + loc.ty.element_offset(r as u64, c as u64) as usize * es;
    match loc.ty.layout {
        Layout::ND | Layout::NZ | Layout::ZZ => {
            for r in 0..rows {
                let mut c = 0;
                while c < cols {
                    let len = row_run(loc.ty, c0 + c).min(cols - c);
                    f(Run {
                        buf: at(r0 + r, c0 + c),
                        elem: r * cols + c,
                        len,
                        stride: 1,
                    });
                    c += len;
                }
            }
        }
        Layout::DN | Layout::ZN => {
            for c in 0..cols {
                let mut r = 0;
                while r < rows {
                    let len = col_run(loc.ty, r0 + r).min(rows - r);
                    f(Run {
                        buf: at(r0 + r, c0 + c),
                        elem: r * cols + c,
                        len,
                        stride: cols,
                    });
                    r += len;
                }
            }
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
    let es = loc.es();
    out.clear();
    out.resize(size.0 * size.1 * es, 0);
    for_each_run(loc, buf.len(), at, size, |run| {
        let src = &buf[run.buf..run.buf + run.len * es];
        if run.stride == 1 {
            out[run.elem * es..(run.elem + run.len) * es].copy_from_slice(src);
        } else {
            for (i, e) in src.chunks_exact(es).enumerate() {
                let d = (run.elem + i * run.stride) * es;
                out[d..d + es].copy_from_slice(e);
            }
        }
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
    let es = loc.es();
    let len = buf.len();
    for_each_run(loc, len, at, size, |run| {
        let dst = &mut buf[run.buf..run.buf + run.len * es];
        if run.stride == 1 {
            dst.copy_from_slice(&data[run.elem * es..(run.elem + run.len) * es]);
        } else {
            for (i, e) in dst.chunks_exact_mut(es).enumerate() {
                let s = (run.elem + i * run.stride) * es;
                e.copy_from_slice(&data[s..s + es]);
            }
        }
    })
}
