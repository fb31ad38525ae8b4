//! Resolving tile references to bytes, and copying regions between a tile's stored layout and
//! row-major scratch.

use super::host::transpose::{transpose_8x8_bytes, zn_box_to_panel_rows};
use super::numeric::{copy_fixed, copy_lines};
use super::{SimError, SimFault};
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

impl<'k> TileLoc<'k> {
    /// A fully valid, unnamed tile of type `ty` at `addr` (a deferred move's source).
    pub fn of_type(ty: &'k TileType, addr: usize) -> Self {
        TileLoc {
            ty,
            addr,
            valid: Some((ty.rows as usize, ty.cols as usize)),
            name: "",
        }
    }

    /// The tile's name.
    pub fn name(&self) -> &str {
        self.name
    }

    /// Valid rows and columns; an error when a dynamic valid shape was never set on this core.
    pub fn valid(&self) -> Result<(usize, usize), SimFault> {
        self.valid.ok_or_else(|| SimFault::ValidShapeUnset {
            tile: self.name.to_string(),
        })
    }
    /// A region of this tile reaching to `end` (one past its last row and column), outside it.
    pub fn region_fault(&self, end: (usize, usize)) -> SimFault {
        SimFault::RegionOutsideTile {
            tile: self.name.to_string(),
            end,
            shape: (self.rows(), self.cols()),
        }
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
) -> Result<TileLoc<'k>, SimFault> {
    Ok(place(kernel, arch, r.tile)?.at(slot, || runtime_valid(r.tile)))
}

/// What resolving a reference to a tile takes from the kernel, worked out once per launch
/// ([`place_all`]): the tile's declaration and its buffers' placement. [`Placed::at`] then
/// picks the buffer and the valid shape of one access.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Placed<'k> {
    decl: &'k crate::ir::TileDecl,
    /// Address of buffer 0 (the root allocation's).
    base: u64,
    /// The root allocation's buffers (at least 1).
    buffers: i64,
    /// Bytes from one buffer to the next.
    stride: u64,
}

impl<'k> Placed<'k> {
    /// The access of buffer `slot` (modulo the buffers), its valid shape taken from the
    /// declaration or, for a dynamic dimension, from `runtime_valid`.
    #[inline]
    pub fn at(&self, slot: i64, runtime_valid: impl FnOnce() -> Option<(u64, u64)>) -> TileLoc<'k> {
        let slot = if self.buffers == 1 {
            0
        } else {
            slot.rem_euclid(self.buffers) as u64
        };
        let addr = self.base + slot * self.stride;
        let ty = &self.decl.ty;
        let valid = match (ty.valid_rows, ty.valid_cols) {
            (ValidDim::Static(r), ValidDim::Static(c)) => Some((r, c)),
            (vr, vc) => {
                let rt = runtime_valid();
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
        TileLoc {
            ty,
            addr: addr as usize,
            valid: valid.map(|(r, c)| (r as usize, c as usize)),
            name: &self.decl.name,
        }
    }
}

/// Where tile `id`'s buffers are; an error names what is missing (an undeclared tile or alias
/// target, a tile with no address).
pub(crate) fn place<'k>(
    kernel: &'k Kernel,
    arch: &Arch,
    id: TileId,
) -> Result<Placed<'k>, SimFault> {
    let decl = kernel
        .try_tile(id)
        .ok_or(SimFault::UnknownTile { id: id.0 })?;
    let root_id = kernel.root_tile(id);
    let root = kernel
        .try_tile(root_id)
        .ok_or(SimFault::UnknownTile { id: root_id.0 })?;
    let base = root.addr.ok_or_else(|| SimFault::NoAddress {
        tile: root.name.clone(),
    })?;
    Ok(Placed {
        decl,
        base,
        buffers: root.buffers.max(1) as i64,
        stride: arch.buffer_stride(&root.ty),
    })
}

/// [`place`] of every declared tile, indexed by tile id (`None` where it fails: resolving
/// such a tile goes through [`resolve`], which reports why).
pub(crate) fn place_all<'k>(kernel: &'k Kernel, arch: &Arch) -> Vec<Option<Placed<'k>>> {
    (0..kernel.tiles.len())
        .map(|i| place(kernel, arch, TileId(i as u32)).ok())
        .collect()
}

/// A tile's layout as two additive parts: element `(r, c)` is stored at `f(r) + g(c)` (every
/// layout of the IR separates this way), with the fractal box sizes needed to step through it
/// without dividing per element.
#[derive(Debug, Clone, Copy)]
struct Geom {
    layout: Layout,
    rows: usize,
    cols: usize,
    /// Box rows and columns (1 x 1 for ND/DN).
    ir: usize,
    ic: usize,
    /// Boxes per column and per row of boxes.
    nbr: usize,
    nbc: usize,
}

impl Geom {
    fn new(ty: &TileType) -> Self {
        let (ir, ic) = ty
            .fractal
            .map(|f| (f.rows.max(1) as usize, f.cols.max(1) as usize))
            .unwrap_or((1, 1));
        let (rows, cols) = (ty.rows as usize, ty.cols as usize);
        Geom {
            layout: ty.layout,
            rows,
            cols,
            ir,
            ic,
            nbr: rows / ir,
            nbc: cols / ic,
        }
    }

    /// Row part of the element offset (see `Layout::element_offset`).
    #[inline]
    fn f(&self, r: usize) -> usize {
        let bx = self.ir * self.ic;
        match self.layout {
            Layout::ND => r * self.cols,
            Layout::DN => r,
            Layout::NZ => r * self.ic,
            Layout::ZN => (r / self.ir) * self.nbc * bx + r % self.ir,
            Layout::ZZ => (r / self.ir) * self.nbc * bx + (r % self.ir) * self.ic,
        }
    }

    /// Column part of the element offset.
    #[inline]
    fn g(&self, c: usize) -> usize {
        let bx = self.ir * self.ic;
        match self.layout {
            Layout::ND => c,
            Layout::DN => c * self.rows,
            Layout::NZ => (c / self.ic) * self.nbr * bx + c % self.ic,
            Layout::ZN => (c / self.ic) * bx + (c % self.ic) * self.ir,
            Layout::ZZ => (c / self.ic) * bx + c % self.ic,
        }
    }

    /// The offset step from a row to the next when it is the same for every row (ND and NZ:
    /// `f` is linear), else `None`.
    fn row_step(&self) -> Option<usize> {
        match self.layout {
            Layout::ND => Some(self.cols),
            Layout::NZ => Some(self.ic),
            _ => None,
        }
    }

    /// Whether runs go along rows (ND, NZ, ZZ) rather than down columns (DN, ZN).
    fn row_major(&self) -> bool {
        matches!(self.layout, Layout::ND | Layout::NZ | Layout::ZZ)
    }

    /// Contiguous elements from column `c` along a row, and the offset step between the starts
    /// of consecutive full segments (row-major layouts).
    fn col_segment(&self, c: usize) -> (usize, usize) {
        match self.layout {
            Layout::ND => (self.cols - c, 0),
            Layout::NZ => (self.ic - c % self.ic, self.nbr * self.ir * self.ic),
            _ => (self.ic - c % self.ic, self.ir * self.ic),
        }
    }

    /// Contiguous elements from row `r` down a column, and the offset step between the starts
    /// of consecutive full segments (column-major layouts).
    fn row_segment(&self, r: usize) -> (usize, usize) {
        match self.layout {
            Layout::DN => (self.rows - r, 0),
            _ => (self.ir - r % self.ir, self.nbc * self.ir * self.ic),
        }
    }
}

pub(crate) fn check_region(
    loc: &TileLoc,
    buf_len: usize,
    r0: usize,
    c0: usize,
    rows: usize,
    cols: usize,
) -> Result<(), SimFault> {
    if r0 + rows > loc.rows() || c0 + cols > loc.cols() {
        return Err(loc.region_fault((r0 + rows, c0 + cols)));
    }
    if loc.addr + loc.ty.bytes() as usize > buf_len {
        return Err(SimFault::BufferOverrun {
            tile: loc.name.to_string(),
            space: loc.space(),
            addr: loc.addr,
            bytes: loc.ty.bytes() as usize,
            buffer: buf_len,
        });
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
/// along rows, column-major ones (DN, ZN) down columns, so runs are as long as the layout allows;
/// rows of a row-major layout that follow each other in both the buffer and the region merge
/// into one run (a whole ND tile, a one-box-wide NZ strip).
pub(crate) fn for_each_run(
    loc: &TileLoc,
    buf_len: usize,
    (r0, c0): (usize, usize),
    (rows, cols): (usize, usize),
    mut f: impl FnMut(Run),
) -> Result<(), SimFault> {
    check_region(loc, buf_len, r0, c0, rows, cols)?;
    if rows == 0 || cols == 0 {
        return Ok(());
    }
    let es = loc.es();
    let geo = Geom::new(loc.ty);
    if geo.row_major() {
        // The column segments are the same for every row: the first one up to a box edge,
        // then whole boxes `step` elements apart.
        let (first, step) = geo.col_segment(c0);
        let first = first.min(cols);
        let g0 = geo.g(c0);
        let g1 = if first < cols { geo.g(c0 + first) } else { 0 };
        let mut pending: Option<Run> = None;
        for r in 0..rows {
            let fr = geo.f(r0 + r);
            let run = Run {
                buf: loc.addr + (fr + g0) * es,
                elem: r * cols,
                len: first,
                stride: 1,
            };
            if first == cols {
                // One segment per row: merge rows that continue each other.
                match &mut pending {
                    Some(p) if p.buf + p.len * es == run.buf => p.len += first,
                    Some(p) => {
                        f(*p);
                        *p = run;
                    }
                    None => pending = Some(run),
                }
                continue;
            }
            f(run);
            let (mut c, mut g) = (first, g1);
            while c < cols {
                let len = geo.ic.min(cols - c);
                f(Run {
                    buf: loc.addr + (fr + g) * es,
                    elem: r * cols + c,
                    len,
                    stride: 1,
                });
                c += len;
                g += step;
            }
        }
        if let Some(p) = pending {
            f(p);
        }
    } else {
        let (first, step) = geo.row_segment(r0);
        let first = first.min(rows);
        let f0 = geo.f(r0);
        let f1 = if first < rows { geo.f(r0 + first) } else { 0 };
        for c in 0..cols {
            let gc = geo.g(c0 + c);
            f(Run {
                buf: loc.addr + (f0 + gc) * es,
                elem: c,
                len: first,
                stride: cols,
            });
            let (mut r, mut fr) = (first, f1);
            while r < rows {
                let len = geo.ir.min(rows - r);
                f(Run {
                    buf: loc.addr + (fr + gc) * es,
                    elem: r * cols + c,
                    len,
                    stride: cols,
                });
                r += len;
                fr += step;
            }
        }
    }
    Ok(())
}

/// Copies `n` elements of `N` bytes from `src` (contiguous) to `dst` at element stride `stride`.
#[inline]
fn scatter<const N: usize>(src: &[u8], dst: &mut [u8], stride: usize) {
    for (i, e) in src.chunks_exact(N).enumerate() {
        let d = i * stride * N;
        dst[d..d + N].copy_from_slice(e);
    }
}

/// Copies elements of `N` bytes at element stride `stride` in `src` into contiguous `dst`.
#[inline]
fn gather<const N: usize>(src: &[u8], dst: &mut [u8], stride: usize) {
    for (i, e) in dst.chunks_exact_mut(N).enumerate() {
        let s = i * stride * N;
        e.copy_from_slice(&src[s..s + N]);
    }
}

/// `scatter` for an element size known at run time.
pub(crate) fn scatter_es(es: usize, src: &[u8], dst: &mut [u8], stride: usize) {
    match es {
        1 => scatter::<1>(src, dst, stride),
        2 => scatter::<2>(src, dst, stride),
        4 => scatter::<4>(src, dst, stride),
        8 => scatter::<8>(src, dst, stride),
        _ => {
            for (i, e) in src.chunks_exact(es).enumerate() {
                let d = i * stride * es;
                dst[d..d + es].copy_from_slice(e);
            }
        }
    }
}

/// `gather` for an element size known at run time.
pub(crate) fn gather_es(es: usize, src: &[u8], dst: &mut [u8], stride: usize) {
    match es {
        1 => gather::<1>(src, dst, stride),
        2 => gather::<2>(src, dst, stride),
        4 => gather::<4>(src, dst, stride),
        8 => gather::<8>(src, dst, stride),
        _ => {
            for (i, e) in dst.chunks_exact_mut(es).enumerate() {
                let s = i * stride * es;
                e.copy_from_slice(&src[s..s + es]);
            }
        }
    }
}

/// Copies the `rows x cols` region at `(r0, c0)` of a tile into row-major bytes `out`.
pub(crate) fn read_region(
    buf: &[u8],
    loc: &TileLoc,
    at: (usize, usize),
    size: (usize, usize),
    out: &mut Vec<u8>,
) -> Result<(), SimFault> {
    let es = loc.es();
    // Every byte is overwritten below: only a shortfall is filled.
    out.resize(size.0 * size.1 * es, 0);
    // Strip by strip when the layout maps onto row-major (ND, NZ): whole strips, no runs.
    if for_each_dense_piece(
        buf.len(),
        loc,
        at,
        size,
        Order::RowMajor,
        size.0 * size.1,
        |b, d| copy_fixed::<32, _>(&mut out[d.start * es..d.end * es], &buf[b]),
    )? {
        return Ok(());
    }
    for_each_run(loc, buf.len(), at, size, |run| {
        let src = &buf[run.buf..run.buf + run.len * es];
        if run.stride == 1 {
            out[run.elem * es..(run.elem + run.len) * es].copy_from_slice(src);
        } else {
            let end = (run.elem + (run.len - 1) * run.stride + 1) * es;
            scatter_es(es, src, &mut out[run.elem * es..end], run.stride);
        }
    })
}

/// Copies the `rows x cols` region at `s_at` of tile `s` (in `src`) to the same-size region at
/// `d_at` of tile `d` (in `dst`), both of one element size, layout to layout without scratch.
#[allow(clippy::too_many_arguments)]
pub(crate) fn copy_between(
    src: &[u8],
    s: &TileLoc,
    (sr0, sc0): (usize, usize),
    dst: &mut [u8],
    d: &TileLoc,
    (dr0, dc0): (usize, usize),
    (rows, cols): (usize, usize),
) -> Result<(), SimFault> {
    check_region(s, src.len(), sr0, sc0, rows, cols)?;
    check_region(d, dst.len(), dr0, dc0, rows, cols)?;
    let es = s.es();
    if d.es() != es {
        return Err(SimFault::Internal("a copy between element sizes"));
    }
    if rows == 0 || cols == 0 {
        return Ok(());
    }
    let (gs, gd) = (Geom::new(s.ty), Geom::new(d.ty));
    let copy = |dst: &mut [u8], so: usize, dof: usize, n: usize| {
        let (so, dof) = (s.addr + so * es, d.addr + dof * es);
        copy_fixed::<32, _>(&mut dst[dof..dof + n * es], &src[so..so + n * es]);
    };
    if gs.row_major() && gd.row_major() {
        // Column segments contiguous in both; rows that continue each other in both merge.
        let mut c = 0;
        while c < cols {
            let len = gs
                .col_segment(sc0 + c)
                .0
                .min(gd.col_segment(dc0 + c).0)
                .min(cols - c);
            let (g_s, g_d) = (gs.g(sc0 + c), gd.g(dc0 + c));
            if let (Some(ss), Some(ds)) = (gs.row_step(), gd.row_step()) {
                // Rows a fixed step apart on both sides (ND, NZ): the segment is one run when
                // the rows continue each other in both, else lines copied at the two steps.
                let (so, dof) = (gs.f(sr0) + g_s, gd.f(dr0) + g_d);
                if ss == len && ds == len {
                    copy(dst, so, dof, rows * len);
                } else {
                    copy_lines(
                        &mut dst[d.addr + dof * es..],
                        ds * es,
                        &src[s.addr + so * es..],
                        ss * es,
                        (rows, len * es),
                    );
                }
                c += len;
                continue;
            }
            let mut r = 0;
            while r < rows {
                let (so, dof) = (gs.f(sr0 + r) + g_s, gd.f(dr0 + r) + g_d);
                let (mut n, mut rr) = (len, r + 1);
                while rr < rows && gs.f(sr0 + rr) + g_s == so + n && gd.f(dr0 + rr) + g_d == dof + n
                {
                    n += len;
                    rr += 1;
                }
                copy(dst, so, dof, n);
                r = rr;
            }
            c += len;
        }
    } else if !gs.row_major() && !gd.row_major() {
        // Row segments contiguous in both; columns that continue each other in both merge.
        // The column parts of the offsets on both sides, computed once (each is a division).
        let g: Vec<(usize, usize)> = (0..cols).map(|c| (gs.g(sc0 + c), gd.g(dc0 + c))).collect();
        let mut r = 0;
        while r < rows {
            let len = gs
                .row_segment(sr0 + r)
                .0
                .min(gd.row_segment(dr0 + r).0)
                .min(rows - r);
            let (f_s, f_d) = (gs.f(sr0 + r), gd.f(dr0 + r));
            let mut c = 0;
            while c < cols {
                let (so, dof) = (g[c].0 + f_s, g[c].1 + f_d);
                let (mut n, mut cc) = (len, c + 1);
                while cc < cols && g[cc].0 + f_s == so + n && g[cc].1 + f_d == dof + n {
                    n += len;
                    cc += 1;
                }
                copy(dst, so, dof, n);
                c = cc;
            }
            r += len;
        }
    } else {
        // Row-major to column-major (or back): 16 x 16 blocks, each read as contiguous pieces
        // of one orientation and written as contiguous pieces of the other.
        let geo = |g: &Geom, r0: usize, c0: usize| (*g, r0, c0, g.row_major());
        let (s_side, d_side) = (geo(&gs, sr0, sc0), geo(&gd, dr0, dc0));
        match es {
            1 => transpose_blocks::<1>(src, s.addr, s_side, dst, d.addr, d_side, (rows, cols)),
            2 => transpose_blocks::<2>(src, s.addr, s_side, dst, d.addr, d_side, (rows, cols)),
            4 => transpose_blocks::<4>(src, s.addr, s_side, dst, d.addr, d_side, (rows, cols)),
            8 => transpose_blocks::<8>(src, s.addr, s_side, dst, d.addr, d_side, (rows, cols)),
            _ => {
                let fs: Vec<usize> = (0..rows).map(|r| gs.f(sr0 + r)).collect();
                let fd: Vec<usize> = (0..rows).map(|r| gd.f(dr0 + r)).collect();
                for c in 0..cols {
                    let (g_s, g_d) = (gs.g(sc0 + c), gd.g(dc0 + c));
                    for (a, b) in fs.iter().zip(&fd) {
                        let (so, dof) = (s.addr + (a + g_s) * es, d.addr + (b + g_d) * es);
                        dst[dof..dof + es].copy_from_slice(&src[so..so + es]);
                    }
                }
            }
        }
    }
    Ok(())
}

/// Side of a transposing copy: geometry, region origin and whether runs go along rows.
type Side = (Geom, usize, usize, bool);

/// Copies a `rows x cols` region between a row-major and a column-major layout (either way) in
/// blocks of at most 16 x 16 elements of `N` bytes: the row-major side is touched as
/// contiguous row pieces, the column-major side as contiguous column pieces, and the block is
/// transposed through a small buffer.
// `i` and `j` index the block's two axes at once; an iterator over one would hide the other.
#[allow(clippy::needless_range_loop)]
fn transpose_blocks<const N: usize>(
    src: &[u8],
    sa: usize,
    (gs, sr0, sc0, s_rows): Side,
    dst: &mut [u8],
    da: usize,
    (gd, dr0, dc0, _): Side,
    (rows, cols): (usize, usize),
) {
    const B: usize = 16;
    // Contiguous piece lengths: along a row on the row-major side, down a column on the other.
    let (row_side, row_r0, row_c0, col_side, col_r0, col_c0) = if s_rows {
        (gs, sr0, sc0, gd, dr0, dc0)
    } else {
        (gd, dr0, dc0, gs, sr0, sc0)
    };
    // blk[j][i]: column j of the block, contiguous like a column piece.
    let mut blk = [[[0u8; N]; B]; B];
    // The row and column parts of every offset on both sides, computed once (each is a
    // division by the box size): [row side f | row side g | column side f | column side g].
    let mut parts = Vec::with_capacity(2 * (rows + cols));
    parts.extend((0..rows).map(|r| row_side.f(row_r0 + r)));
    parts.extend((0..cols).map(|c| row_side.g(row_c0 + c)));
    parts.extend((0..rows).map(|r| col_side.f(col_r0 + r)));
    parts.extend((0..cols).map(|c| col_side.g(col_c0 + c)));
    let (row_f, rest) = parts.split_at(rows);
    let (row_g, rest) = rest.split_at(cols);
    let (col_f, col_g) = rest.split_at(rows);
    let mut r = 0;
    while r < rows {
        let h = B.min(col_side.row_segment(col_r0 + r).0).min(rows - r);
        let mut c = 0;
        while c < cols {
            let w = B.min(row_side.col_segment(row_c0 + c).0).min(cols - c);
            // Element (i, j) of the block: row piece i starts at row_at(i), column piece j at
            // col_at(j), each contiguous.
            let row_at = |i: usize| row_f[r + i] + row_g[c];
            let col_at = |j: usize| col_g[c + j] + col_f[r];
            if N == 4 && (h, w) == (8, 8) {
                // A whole 8 x 8 block of 4-byte elements (f32 NZ <-> ZN): in registers.
                let rows: [usize; 8] = std::array::from_fn(|i| row_at(i) * N);
                let cols: [usize; 8] = std::array::from_fn(|j| col_at(j) * N);
                let done = if s_rows {
                    transpose_8x8_bytes((src, sa, rows), (dst, da, cols))
                } else {
                    transpose_8x8_bytes((src, sa, cols), (dst, da, rows))
                };
                if done {
                    c += w;
                    continue;
                }
            }
            if s_rows {
                for i in 0..h {
                    let o = sa + row_at(i) * N;
                    for (j, e) in src[o..o + w * N].chunks_exact(N).enumerate() {
                        blk[j][i].copy_from_slice(e);
                    }
                }
                for (j, col) in blk.iter().enumerate().take(w) {
                    let o = da + col_at(j) * N;
                    for (e, v) in dst[o..o + h * N].chunks_exact_mut(N).zip(&col[..h]) {
                        e.copy_from_slice(v);
                    }
                }
            } else {
                for (j, col) in blk.iter_mut().enumerate().take(w) {
                    let o = sa + col_at(j) * N;
                    for (v, e) in col[..h].iter_mut().zip(src[o..o + h * N].chunks_exact(N)) {
                        v.copy_from_slice(e);
                    }
                }
                for i in 0..h {
                    let o = da + row_at(i) * N;
                    for (j, e) in dst[o..o + w * N].chunks_exact_mut(N).enumerate() {
                        e.copy_from_slice(&blk[j][i]);
                    }
                }
            }
            c += w;
        }
        r += h;
    }
}

/// The byte span `[lo, hi)` covering a region of a tile (its first to its last byte).
pub(crate) fn region_span(
    loc: &TileLoc,
    buf_len: usize,
    at: (usize, usize),
    size: (usize, usize),
) -> Result<(usize, usize), SimFault> {
    let (mut lo, mut hi) = (usize::MAX, 0);
    for_each_span(loc, buf_len, at, size, |start, n| {
        lo = lo.min(start);
        hi = hi.max(start + n);
    })?;
    Ok((lo.min(hi), hi))
}

/// Calls `f(byte_offset, byte_len)` for contiguous byte ranges of a tile's buffer that together
/// hold exactly the elements of the `rows x cols` region at `(r0, c0)`, merged where they
/// follow each other: the bytes a check or a written-mark needs, without the element order. A
/// whole NZ tile, or a run of full-width NZ column strips, is one range.
pub(crate) fn for_each_span(
    loc: &TileLoc,
    buf_len: usize,
    (r0, c0): (usize, usize),
    (rows, cols): (usize, usize),
    mut f: impl FnMut(usize, usize),
) -> Result<(), SimFault> {
    check_region(loc, buf_len, r0, c0, rows, cols)?;
    if rows == 0 || cols == 0 {
        return Ok(());
    }
    let es = loc.es();
    // The whole tile, in any layout, is all of its bytes (every layout places its elements
    // densely in the tile's `rows * cols` slots): one span, no geometry.
    if (r0, c0) == (0, 0) && (rows, cols) == (loc.rows(), loc.cols()) {
        f(loc.addr, rows * cols * es);
        return Ok(());
    }
    let geo = Geom::new(loc.ty);
    let base = loc.addr;
    let mut pending: Option<(usize, usize)> = None;
    let mut emit = |start: usize, len: usize| match &mut pending {
        Some((s, l)) if *s + *l == start => *l += len,
        Some(p) => {
            f(p.0, p.1);
            *p = (start, len);
        }
        None => pending = Some((start, len)),
    };
    match geo.layout {
        Layout::ND if cols == geo.cols => {
            emit(base + geo.f(r0) * es, rows * cols * es);
        }
        Layout::ND => {
            for r in 0..rows {
                emit(base + (geo.f(r0 + r) + geo.g(c0)) * es, cols * es);
            }
        }
        Layout::DN if rows == geo.rows => {
            emit(base + geo.g(c0) * es, rows * cols * es);
        }
        Layout::DN => {
            for c in 0..cols {
                emit(base + (geo.g(c0 + c) + geo.f(r0)) * es, rows * es);
            }
        }
        Layout::NZ => {
            // Column strips one box wide; inside a strip row r sits at r * ic.
            let mut c = 0;
            while c < cols {
                let w = (geo.ic - (c0 + c) % geo.ic).min(cols - c);
                let g = geo.g(c0 + c);
                if w == geo.ic {
                    emit(base + (geo.f(r0) + g) * es, rows * geo.ic * es);
                } else {
                    for r in 0..rows {
                        emit(base + (geo.f(r0 + r) + g) * es, w * es);
                    }
                }
                c += w;
            }
        }
        Layout::ZN => {
            // Row strips one box high; inside a strip column c sits at c * ir.
            let mut r = 0;
            while r < rows {
                let h = (geo.ir - (r0 + r) % geo.ir).min(rows - r);
                let fr = geo.f(r0 + r);
                if h == geo.ir {
                    emit(base + (fr + geo.g(c0)) * es, cols * geo.ir * es);
                } else {
                    for c in 0..cols {
                        emit(base + (fr + geo.g(c0 + c)) * es, h * es);
                    }
                }
                r += h;
            }
        }
        Layout::ZZ => {
            for_each_run(loc, buf_len, (r0, c0), (rows, cols), |run| {
                emit(run.buf, run.len * es)
            })?;
        }
    }
    if let Some((s, l)) = pending {
        f(s, l);
    }
    Ok(())
}

/// Decodes the `[rows, cols]` region at `at` of an f32, bf16 or f16 tile (any layout) to f32 as
/// `cols / 16` row-major `[rows, 16]` panels one after another (panel `s` holds columns
/// `16 s .. 16 s + 16`), the form the matmul's strip kernel takes its B operand in, in one pass
/// over the tile's bytes. False (nothing read) when the tile is of another dtype, `cols` is not
/// a multiple of 16 or the buffer is not aligned for the element size.
pub(crate) fn decode_panels_f32(
    buf: &[u8],
    loc: &TileLoc,
    at: (usize, usize),
    (rows, cols): (usize, usize),
    out: &mut [f32],
) -> Result<bool, SimFault> {
    use crate::ir::DType;
    let dtype = loc.ty.dtype;
    if !matches!(dtype, DType::F32 | DType::BF16 | DType::F16) || cols % 16 != 0 {
        return Ok(false);
    }
    check_region(loc, buf.len(), at.0, at.1, rows, cols)?;
    if out.len() < rows * cols {
        return Err(SimFault::Internal("an f32 buffer shorter than its region"));
    }
    if dtype != DType::F32 {
        return Ok(decode_panels_half(buf, loc, at, (rows, cols), out));
    }
    let tile_bytes = buf.get(loc.addr..loc.addr + loc.ty.bytes() as usize);
    let Some(Ok(v)) = tile_bytes.map(bytemuck::try_cast_slice::<u8, f32>) else {
        return Ok(false);
    };
    let geo = Geom::new(loc.ty);
    // Whole f32 ZN boxes (8 rows x 16 columns, column-major: K^T seen in a gathered NZ K tile):
    // each box is 128 contiguous values, transposed into 8 rows of its panel at once.
    let whole_zn_boxes = geo.layout == Layout::ZN
        && (geo.ir, geo.ic) == (8, 16)
        && at.0.is_multiple_of(8)
        && rows % 8 == 0
        && at.1.is_multiple_of(16);
    if whole_zn_boxes {
        for (s, panel) in out.chunks_exact_mut(rows * 16).take(cols / 16).enumerate() {
            let g = geo.g(at.1 + s * 16);
            for (b, block) in panel.chunks_exact_mut(128).enumerate() {
                let start = geo.f(at.0 + b * 8) + g;
                let (Some(Ok(bx)), Ok(block)) = (
                    v.get(start..start + 128).map(<&[f32; 128]>::try_from),
                    <&mut [f32; 128]>::try_from(block),
                ) else {
                    return Err(SimFault::Internal("a ZN box outside its tile"));
                };
                zn_box_to_panel_rows(bx, block);
            }
        }
        return Ok(true);
    }
    for (s, panel) in out.chunks_exact_mut(rows * 16).take(cols / 16).enumerate() {
        // Element offsets of the panel's 16 columns; a row is f(row) + these.
        let g: [usize; 16] = std::array::from_fn(|j| geo.g(at.1 + s * 16 + j));
        let halves_run = (1..16).all(|j| j == 8 || g[j] == g[j - 1] + 1);
        for (i, row) in panel.chunks_exact_mut(16).enumerate() {
            let f = geo.f(at.0 + i);
            if halves_run {
                // Two runs of eight (an f32 NZ box row, or one ND row): fixed-size copies.
                let (lo, hi) = row.split_at_mut(8);
                copy_fixed::<8, _>(lo, &v[f + g[0]..f + g[0] + 8]);
                copy_fixed::<8, _>(hi, &v[f + g[8]..f + g[8] + 8]);
            } else {
                for (o, gj) in row.iter_mut().zip(g) {
                    *o = v[f + gj];
                }
            }
        }
    }
    Ok(true)
}

/// [`decode_panels_f32`] for a bf16 or f16 tile (checked by the caller, with the region):
/// each panel row is a 16-element run decoded at once where the 16 columns lie together (an NZ
/// box row, an ND row), element by element otherwise; each value is the one
/// [`decode_f32`](super::numeric::decode_f32) gives. False when the buffer is not 2-byte aligned.
fn decode_panels_half(
    buf: &[u8],
    loc: &TileLoc,
    at: (usize, usize),
    (rows, cols): (usize, usize),
    out: &mut [f32],
) -> bool {
    let tile_bytes = buf.get(loc.addr..loc.addr + loc.ty.bytes() as usize);
    let Some(Ok(v)) = tile_bytes.map(bytemuck::try_cast_slice::<u8, u16>) else {
        return false;
    };
    let bf16 = loc.ty.dtype == crate::ir::DType::BF16;
    let to_f32 = |h: u16| {
        if bf16 {
            f32::from_bits((h as u32) << 16)
        } else {
            super::numeric::f16_to_f32(h)
        }
    };
    let geo = Geom::new(loc.ty);
    // Whole bf16 ZN boxes (16 x 16, column-major: K^T seen in a gathered NZ K tile): each box
    // is 256 contiguous values, widened and transposed into 16 rows of its panel at once.
    let whole_zn_boxes = bf16
        && geo.layout == Layout::ZN
        && (geo.ir, geo.ic) == (16, 16)
        && at.0.is_multiple_of(16)
        && rows % 16 == 0
        && at.1.is_multiple_of(16);
    if whole_zn_boxes {
        for (s, panel) in out.chunks_exact_mut(rows * 16).take(cols / 16).enumerate() {
            let g = geo.g(at.1 + s * 16);
            for (b, block) in panel.chunks_exact_mut(256).enumerate() {
                let start = geo.f(at.0 + b * 16) + g;
                let (Some(Ok(bx)), Ok(block)) = (
                    v.get(start..start + 256).map(<&[u16; 256]>::try_from),
                    <&mut [f32; 256]>::try_from(block),
                ) else {
                    return false;
                };
                super::host::transpose::bf16_zn_box_to_panel_rows(bx, block);
            }
        }
        return true;
    }
    for (s, panel) in out.chunks_exact_mut(rows * 16).take(cols / 16).enumerate() {
        let g: [usize; 16] = std::array::from_fn(|j| geo.g(at.1 + s * 16 + j));
        let one_run = (1..16).all(|j| g[j] == g[j - 1] + 1);
        for (i, row) in panel.chunks_exact_mut(16).enumerate() {
            let f = geo.f(at.0 + i);
            if one_run {
                let Some(Ok(src)) = v.get(f + g[0]..f + g[0] + 16).map(<&[u16; 16]>::try_from)
                else {
                    return false;
                };
                for (o, h) in row.iter_mut().zip(src) {
                    *o = to_f32(*h);
                }
            } else {
                for (o, gj) in row.iter_mut().zip(g) {
                    *o = to_f32(v[f + gj]);
                }
            }
        }
    }
    true
}

/// Element order of a dense f32 scratch matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Order {
    /// `out[i * cols + j]`.
    RowMajor,
    /// `out[j * rows + i]`.
    ColMajor,
}

/// The strips of a boxed tile that map straight onto a dense matrix of `order`: NZ tiles to
/// row-major (column strips of `ic` elements per row), ZN tiles to column-major (row strips of
/// `ir` elements per column), ND to row-major and DN to column-major (one strip). Calls
/// `f(buf_elem, lines, line_stride, dense_at, width)` per strip: `lines` lines of `width`
/// elements, line `i` at tile element `buf_elem + i * line_stride` and dense element
/// `dense_at + i * dense_line` (`dense_line` = cols for row-major, rows for column-major).
/// Returns false (calling nothing) when the layout does not map to `order`.
fn for_each_strip(
    geo: &Geom,
    (r0, c0): (usize, usize),
    (rows, cols): (usize, usize),
    order: Order,
    mut f: impl FnMut(usize, usize, usize, usize, usize),
) -> bool {
    match (geo.layout, order) {
        (Layout::ND, Order::RowMajor) => {
            f(geo.f(r0) + geo.g(c0), rows, geo.cols, 0, cols);
            true
        }
        (Layout::DN, Order::ColMajor) => {
            f(geo.g(c0) + geo.f(r0), cols, geo.rows, 0, rows);
            true
        }
        (Layout::NZ, Order::RowMajor) => {
            let mut c = 0;
            while c < cols {
                let w = (geo.ic - (c0 + c) % geo.ic).min(cols - c);
                f(geo.f(r0) + geo.g(c0 + c), rows, geo.ic, c, w);
                c += w;
            }
            true
        }
        (Layout::ZN, Order::ColMajor) => {
            let mut r = 0;
            while r < rows {
                let h = (geo.ir - (r0 + r) % geo.ir).min(rows - r);
                // Column c of the strip starts at f(r) + g(c0 + c) = f(r) + (c0 + c) * ir.
                f(geo.f(r0 + r) + geo.g(c0), cols, geo.ir, r, h);
                r += h;
            }
            true
        }
        _ => false,
    }
}

/// One strip of a tile region and its image in a dense matrix: `lines` lines of `width`
/// elements, line `i` at tile byte `start + i * stride * es` and dense element
/// `dense + i * dense_line`. A strip whose lines follow each other in both is given as one line.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DenseStrip {
    pub start: usize,
    pub lines: usize,
    pub stride: usize,
    pub dense: usize,
    pub dense_line: usize,
    pub width: usize,
}

impl DenseStrip {
    /// The tile bytes the strip spans (first element of its first line to last of its last).
    pub fn bytes(&self, es: usize) -> std::ops::Range<usize> {
        let n = (self.lines.max(1) - 1) * self.stride + self.width;
        self.start..self.start + n * es
    }
}

/// The region of a tile as strips (see [`DenseStrip`]) when its layout maps onto a dense matrix
/// of `order` strip by strip (see [`for_each_strip`]); false (calling nothing) otherwise. The
/// region is checked against the tile and a `buf_len`-byte buffer, and `dense_len` must hold it.
fn for_each_dense_strip(
    buf_len: usize,
    loc: &TileLoc,
    at: (usize, usize),
    size: (usize, usize),
    order: Order,
    dense_len: usize,
    mut f: impl FnMut(DenseStrip),
) -> Result<bool, SimFault> {
    check_region(loc, buf_len, at.0, at.1, size.0, size.1)?;
    if dense_len < size.0 * size.1 {
        return Err(SimFault::Internal("a dense buffer shorter than its region"));
    }
    let es = loc.es();
    let dense_line = match order {
        Order::RowMajor => size.1,
        Order::ColMajor => size.0,
    };
    Ok(for_each_strip(
        &Geom::new(loc.ty),
        at,
        size,
        order,
        |e, lines, stride, d0, w| {
            if lines == 0 || w == 0 {
                return;
            }
            // A strip whose lines follow each other in both the tile and the dense matrix is
            // one line.
            let (lines, width) = if w == stride && (lines == 1 || dense_line == w) {
                (1, lines * w)
            } else {
                (lines, w)
            };
            f(DenseStrip {
                start: loc.addr + e * es,
                lines,
                stride,
                dense: d0,
                dense_line,
                width,
            })
        },
    ))
}

/// [`for_each_dense_strip`] line by line: `f(bytes, elems)` with a byte range of the tile's
/// buffer and the element range of the dense matrix holding the same values. Shared by the byte
/// copies ([`read_region`], [`write_dense_bytes`]).
fn for_each_dense_piece(
    buf_len: usize,
    loc: &TileLoc,
    at: (usize, usize),
    size: (usize, usize),
    order: Order,
    dense_len: usize,
    mut f: impl FnMut(std::ops::Range<usize>, std::ops::Range<usize>),
) -> Result<bool, SimFault> {
    let es = loc.es();
    for_each_dense_strip(buf_len, loc, at, size, order, dense_len, |st| {
        for i in 0..st.lines {
            let (s, d) = (st.start + i * st.stride * es, st.dense + i * st.dense_line);
            f(s..s + st.width * es, d..d + st.width);
        }
    })
}

/// Decodes the region of a tile straight into a dense f32 matrix of `order` when the layout
/// maps onto it strip by strip (see [`for_each_strip`]); false (nothing read) otherwise.
pub(crate) fn decode_dense(
    buf: &[u8],
    loc: &TileLoc,
    at: (usize, usize),
    size: (usize, usize),
    order: Order,
    out: &mut [f32],
) -> Result<bool, SimFault> {
    let dtype = loc.ty.dtype;
    let es = loc.es();
    for_each_dense_strip(buf.len(), loc, at, size, order, out.len(), |st| {
        crate::sim::numeric::decode_f32_lines(
            dtype,
            &buf[st.bytes(es)],
            (st.lines, st.width, st.stride),
            &mut out[st.dense..],
            st.dense_line,
        )
    })
}

/// Copies row-major element bytes `data` (same dtype as the tile) into the region of a tile
/// strip by strip when its layout maps onto row-major (ND, NZ); false (nothing written)
/// otherwise. Marks nothing. A strip of an NZ tile is written front to back, so a gathered or
/// loaded tile is filled in storage order rather than row by row across every box.
pub(crate) fn write_dense_bytes(
    buf: &mut [u8],
    loc: &TileLoc,
    at: (usize, usize),
    size: (usize, usize),
    data: &[u8],
) -> Result<bool, SimFault> {
    let es = loc.es();
    let len = buf.len();
    for_each_dense_piece(
        len,
        loc,
        at,
        size,
        Order::RowMajor,
        data.len() / es,
        |b, d| copy_fixed::<32, _>(&mut buf[b], &data[d.start * es..d.end * es]),
    )
}

/// Writes the element bytes `one` into every element of the region of an ND or NZ tile, strip
/// by strip (a pad fill: no row-major source to build); false (nothing written) for other
/// layouts. Marks nothing.
pub(crate) fn fill_dense(
    buf: &mut [u8],
    loc: &TileLoc,
    at: (usize, usize),
    size: (usize, usize),
    one: &[u8],
) -> Result<bool, SimFault> {
    let es = loc.es();
    if one.len() != es {
        return Err(SimFault::Internal("a fill value of another element size"));
    }
    check_region(loc, buf.len(), at.0, at.1, size.0, size.1)?;
    let byte = one.iter().all(|b| *b == one[0]).then_some(one[0]);
    Ok(for_each_strip(
        &Geom::new(loc.ty),
        at,
        size,
        Order::RowMajor,
        |e, lines, stride, _, w| {
            let t0 = loc.addr + e * es;
            // Lines that follow each other (a whole NZ column strip, whole ND rows) are one.
            let (lines, w) = if stride == w {
                (1, lines * w)
            } else {
                (lines, w)
            };
            for i in 0..lines {
                let t = t0 + i * stride * es;
                let line = &mut buf[t..t + w * es];
                match byte {
                    Some(b) => line.fill(b),
                    None => fill_pattern(line, one),
                }
            }
        },
    ))
}

/// Fills `line` (a whole number of `one`-sized elements) with copies of `one`: the first
/// element is written, then the filled prefix is copied onto what follows, doubling each time.
pub(crate) fn fill_pattern(line: &mut [u8], one: &[u8]) {
    let n = one.len().min(line.len());
    line[..n].copy_from_slice(&one[..n]);
    let mut done = n;
    while done > 0 && done < line.len() {
        let take = done.min(line.len() - done);
        line.copy_within(..take, done);
        done += take;
    }
}

/// [`write_dense_bytes`] from a row-major matrix whose rows lie `pitch` elements apart in `src`
/// (a GM window read in place): row `i` of the region is `src[i * pitch * es..][..cols * es]`.
/// False (nothing written) when the layout does not map onto row-major strip by strip; `Err`
/// when `src` is too short. Marks nothing.
pub(crate) fn write_pitched_bytes(
    buf: &mut [u8],
    loc: &TileLoc,
    at: (usize, usize),
    (rows, cols): (usize, usize),
    src: &[u8],
    pitch: usize,
) -> Result<bool, SimFault> {
    let es = loc.es();
    check_region(loc, buf.len(), at.0, at.1, rows, cols)?;
    if rows == 0 || cols == 0 {
        return Ok(matches!(loc.ty.layout, Layout::ND | Layout::NZ));
    }
    let need = ((rows - 1) * pitch + cols) * es;
    if src.len() < need || pitch < cols {
        return Err(SimFault::Internal("a pitched source shorter than its rows"));
    }
    // One row (a gather's row load): strip by strip below, in the same GM order, without
    // clearing the strip list's 2 KiB first.
    if rows > 1 {
        if let Some(done) = write_pitched_rows(buf, loc, at, (rows, cols), src, pitch) {
            return Ok(done);
        }
    }
    Ok(for_each_strip(
        &Geom::new(loc.ty),
        at,
        (rows, cols),
        Order::RowMajor,
        |e, lines, stride, c, w| {
            let (w, t0) = (w * es, loc.addr + e * es);
            for i in 0..lines {
                let (t, s) = (t0 + i * stride * es, (i * pitch + c) * es);
                copy_fixed::<32, _>(&mut buf[t..t + w], &src[s..s + w]);
            }
        },
    ))
}

/// [`write_pitched_bytes`] of several rows, row by row across the strips (the checks done):
/// `Some(maps)` when done or the layout does not map, `None` when the region has more strips
/// than the list holds (the caller copies strip by strip then).
fn write_pitched_rows(
    buf: &mut [u8],
    loc: &TileLoc,
    at: (usize, usize),
    (rows, cols): (usize, usize),
    src: &[u8],
    pitch: usize,
) -> Option<bool> {
    // Rows further apart than a page defeat the hardware prefetcher: each is hinted 16 rows
    // ahead. (64 strips: the list is cleared on every call.)
    let row_at = |i: usize| src.get(i * pitch * loc.es()..);
    copy_rows_across_strips::<64, _>(buf, loc, at, (rows, cols), 16, row_at)
}

/// The copy of a `[rows, cols]` region at `at` that both [`write_pitched_rows`] and
/// [`write_rows_from`] make: the region's strips (an NZ tile's box columns) listed first, up
/// to `MAX`, then rows copied one after another across them, so the source is read row by row
/// (a strip at a time would stride down it once per 32-byte box column). `row(i)` is row `i`'s
/// bytes from its first column (at least `cols` elements), and row `i + ahead` is hinted line by
/// line before row `i` is copied, so scattered rows' fetches overlap. `Some(maps)` when done or
/// the layout does not map, `None` when the region has more than `MAX` strips (nothing written).
fn copy_rows_across_strips<'s, const MAX: usize, R: Fn(usize) -> Option<&'s [u8]>>(
    buf: &mut [u8],
    loc: &TileLoc,
    at: (usize, usize),
    (rows, cols): (usize, usize),
    ahead: usize,
    row: R,
) -> Option<bool> {
    let es = loc.es();
    // Inline and not initialised ahead (a zeroed array of MAX strips cost a 4 KiB memset per
    // call, more than the copy of a short gather); at most MAX are taken, so it never spills.
    let mut strips: smallvec::SmallVec<[(usize, usize, usize, usize); ROW_SLICE_STRIPS]> =
        smallvec::SmallVec::new();
    let mut fits = true;
    let maps = for_each_strip(
        &Geom::new(loc.ty),
        at,
        (rows, cols),
        Order::RowMajor,
        |e, _lines, stride, c, w| {
            if strips.len() < MAX.min(ROW_SLICE_STRIPS) {
                strips.push((loc.addr + e * es, stride * es, c * es, w * es));
            } else {
                fits = false;
            }
        },
    );
    if !maps {
        return Some(false);
    }
    if !fits {
        return None;
    }
    let row_bytes = cols * es;
    for i in 0..rows {
        if let Some(next) = row(i + ahead) {
            next[..row_bytes.min(next.len())]
                .chunks(64)
                .for_each(super::gm::hint_line);
        }
        let Some(r) = row(i) else { break };
        for &(t0, line, c, w) in &strips {
            let t = t0 + i * line;
            copy_fixed::<32, _>(&mut buf[t..t + w], &r[c..c + w]);
        }
    }
    Some(true)
}

/// Box columns (strips) at most that [`write_rows_from`] takes.
pub(crate) const ROW_SLICE_STRIPS: usize = 128;

/// [`write_rows_from`] of rows given as a list (the tests' form).
#[cfg(test)]
pub(crate) fn write_row_slices(
    buf: &mut [u8],
    loc: &TileLoc,
    at: (usize, usize),
    cols: usize,
    rows: &[&[u8]],
) -> Result<bool, SimFault> {
    write_rows_from(buf, loc, at, cols, rows.len(), |i| rows.get(i).copied())
}

/// [`write_dense_bytes`] of `n` rows that lie anywhere (a gather's rows, borrowed from GM where
/// they are), lent one at a time by `row(i)` (no list of them is built): row `i` of the `[n,
/// cols]` region at `at` is `row(i)[..cols * es]`, copied row by row across the tile's strips,
/// with a hint of the row 4 rows on (scattered rows defeat the hardware prefetcher). False
/// (nothing written) when the layout does not map onto row-major strip by strip or the region
/// spans more than [`ROW_SLICE_STRIPS`] strips; `Err` when a row is too short or `row` lends
/// none. Marks nothing.
pub(crate) fn write_rows_from<'r>(
    buf: &mut [u8],
    loc: &TileLoc,
    at: (usize, usize),
    cols: usize,
    n: usize,
    row: impl Fn(usize) -> Option<&'r [u8]>,
) -> Result<bool, SimFault> {
    let es = loc.es();
    check_region(loc, buf.len(), at.0, at.1, n, cols)?;
    if (0..n).any(|i| row(i).is_none_or(|r| r.len() < cols * es)) {
        return Err(SimFault::Internal(
            "a gathered row shorter than its columns",
        ));
    }
    if n == 0 || cols == 0 {
        return Ok(matches!(loc.ty.layout, Layout::ND | Layout::NZ));
    }
    Ok(
        copy_rows_across_strips::<ROW_SLICE_STRIPS, _>(buf, loc, at, (n, cols), 4, row)
            .unwrap_or(false),
    )
}

/// Encodes a dense f32 matrix of `order` into the region of a tile (rounding to its dtype) when
/// the layout maps onto it strip by strip; false (nothing written) otherwise. Marks nothing.
pub(crate) fn encode_dense(
    buf: &mut [u8],
    loc: &TileLoc,
    at: (usize, usize),
    size: (usize, usize),
    order: Order,
    vals: &[f32],
) -> Result<bool, SimFault> {
    let dtype = loc.ty.dtype;
    let len = buf.len();
    let es = loc.es();
    for_each_dense_strip(len, loc, at, size, order, vals.len(), |st| {
        crate::sim::numeric::encode_f32_lines(
            dtype,
            &vals[st.dense..],
            st.dense_line,
            &mut buf[st.bytes(es)],
            (st.lines, st.width, st.stride),
        )
    })
}

#[cfg(test)]
#[path = "tile_tests.rs"]
mod tests;
