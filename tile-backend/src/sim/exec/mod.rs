//! Execution of each op family, one file per family (as in verify/ and codegen/).

mod gather;
mod load_store;
mod matmul;
mod moves;
mod scalar;
mod sort;
mod sync;
mod vector;

use super::core::CoreRt;
use super::gm::{Overlay, WriteOnly};
use super::numeric;
use super::state::{mark_bits, BlockMem, CoreId, CrossFlags, DeferredMove};
use super::tile::{self, Order, Run, TileLoc};
use super::trace::{Mem, OpRecord, SyncInfo};
use crate::arch::Arch;
use crate::ir::{Kernel, MemSpace, Op, ParamId, ScalarArg, TileRef};
use crate::launch::Arg;
use crate::sim::SimFault;

/// Whether an op completed or must wait.
pub(crate) enum Flow {
    /// Done; go to the next statement.
    Continue,
    /// Waiting for this cross-core flag id; retry later. (Named only if the block hangs, so a
    /// wait costs no formatting.)
    Blocked(u8),
}

/// Everything an op may touch.
pub(crate) struct ExecCtx<'k, 'a, 'b> {
    pub kernel: &'k Kernel,
    pub arch: &'a Arch,
    pub args: &'a [Arg<'a>],
    pub mem: &'b mut BlockMem,
    pub gm: &'b mut Overlay,
    /// The launch's write-only outputs, written in place ([`WriteOnly`]).
    pub direct: &'a [WriteOnly<'a>],
    /// Every tile's placement, indexed by tile id ([`tile::place_all`]).
    pub placed: &'b [Option<tile::Placed<'k>>],
    pub flags: &'b mut CrossFlags,
    pub core: &'b mut CoreRt<'a>,
    /// What the running op touched, when the run is traced.
    pub rec: Option<OpRecord>,
    /// Index the running op will have in this core's trace.
    pub event_index: usize,
}

pub(crate) fn exec(cx: &mut ExecCtx<'_, '_, '_>, op: &Op) -> Result<Flow, SimFault> {
    if cx.core.id == CoreId::Aic {
        // Decoded operands the block memory let go of return to the pool their buffers
        // came from (only the AIC's matmuls keep them).
        while let Some(v) = cx.mem.take_dropped_decoded() {
            cx.core.pool.put_f32s(v);
        }
    }
    match op {
        Op::LoadStore(o) => load_store::exec(cx, o)?,
        Op::Move(o) => moves::exec(cx, o)?,
        Op::Matmul(o) => matmul::exec(cx, o)?,
        Op::Gather(o) => gather::exec(cx, o)?,
        Op::Vector(o) => vector::exec(cx, o)?,
        Op::Sort(o) => sort::exec(cx, o)?,
        Op::Scalar(o) => scalar::exec(cx, o)?,
        Op::Sync(o) => return sync::exec(cx, o),
    }
    Ok(Flow::Continue)
}

impl<'k, 'a> ExecCtx<'k, 'a, '_> {
    /// Resolves a tile reference for this core.
    #[inline]
    pub fn tile(&self, r: &TileRef) -> Result<TileLoc<'k>, SimFault> {
        // Most slots are literals (a single buffer, or an unrolled ping-pong half).
        let slot = match r.slot {
            crate::ir::Expr::Const(v) => v,
            ref e => self.core.eval(e)?,
        };
        let valid = &self.core.valid;
        let runtime_valid = |id: crate::ir::TileId| valid.get(id.0 as usize).copied().flatten();
        match self.placed.get(r.tile.0 as usize) {
            Some(Some(p)) => Ok(p.at(slot, || runtime_valid(r.tile))),
            _ => tile::resolve(self.kernel, self.arch, r, slot, &runtime_valid),
        }
    }

    /// The AIV whose UB this core's Vec tiles live in.
    pub fn own_aiv(&self) -> u8 {
        match self.core.id {
            CoreId::Aiv(k) => k,
            CoreId::Aic => 0,
        }
    }

    /// Records a sync op's part (traced runs only).
    pub fn note_sync(&mut self, s: SyncInfo) {
        if let Some(r) = &mut self.rec {
            r.sync = Some(s);
        }
    }

    /// Records the work a sort instruction did (traced runs only).
    pub fn note_sort(&mut self, w: super::trace::SortWork) {
        if let Some(r) = &mut self.rec {
            r.sort = Some(w);
        }
    }

    /// Records the m, k, n a matmul computed (traced runs only).
    pub fn note_cube(&mut self, m: usize, k: usize, n: usize) {
        if let Some(r) = &mut self.rec {
            r.cube = Some([m, k, n]);
        }
    }

    fn note_region(
        &mut self,
        loc: &TileLoc,
        aiv: u8,
        at: (usize, usize),
        size: (usize, usize),
        write: bool,
    ) {
        if let Some(r) = &mut self.rec {
            let mem = Mem::Chip {
                space: loc.space(),
                aiv: if loc.space() == MemSpace::Vec { aiv } else { 0 },
            };
            let _ = tile::for_each_span(loc, usize::MAX, at, size, |start, len| {
                r.touch(mem, start, len, write)
            });
        }
    }

    /// Records a matmul's in-place accumulator access (traced runs only): the region read when
    /// accumulating, and written.
    pub fn note_acc(&mut self, loc: &TileLoc, size: (usize, usize), accumulate: bool) {
        if accumulate {
            self.note_region(loc, 0, (0, 0), size, false);
        }
        self.note_region(loc, 0, (0, 0), size, true);
    }

    /// Reads GM bytes through this block's overlay.
    pub fn gm_read(&mut self, p: ParamId, off: usize, out: &mut [u8]) -> Result<(), SimFault> {
        self.gm.read(self.args, p, off, out)?;
        if let Some(r) = &mut self.rec {
            r.touch(Mem::Gm(p.0), off, out.len(), false);
        }
        Ok(())
    }

    /// Hints that GM bytes `off .. off + len` of `p` will be read soon ([`Overlay::prefetch`]).
    pub fn gm_prefetch(&self, p: ParamId, off: usize, len: usize) {
        self.gm.prefetch(self.args, p, off, len);
    }

    /// The write-only output bound to `p`, if it is one.
    pub fn write_only(&self, p: ParamId) -> Option<&'a WriteOnly<'a>> {
        self.direct.iter().find(|d| d.param() == p)
    }

    /// Writes GM bytes into this block's overlay (a write-only output's in place).
    pub fn gm_write(&mut self, p: ParamId, off: usize, bytes: &[u8]) -> Result<(), SimFault> {
        match self.write_only(p) {
            Some(d) => d.write(self.core.block, self.gm, off, bytes)?,
            None => self.gm.write(self.args, p, off, bytes)?,
        }
        if let Some(r) = &mut self.rec {
            r.touch(Mem::Gm(p.0), off, bytes.len(), true);
        }
        Ok(())
    }

    /// Writes GM rows into this block's overlay ([`Overlay::write_rows`]: `rows` rows of `row`
    /// bytes, `pitch` bytes apart from `off`).
    pub fn gm_write_rows(
        &mut self,
        p: ParamId,
        (off, pitch): (usize, usize),
        (rows, row): (usize, usize),
        data: &[u8],
    ) -> Result<(), SimFault> {
        match self.write_only(p) {
            Some(d) => Overlay::rows_each(
                (off, pitch),
                (rows, row),
                data,
                |at, len| d.check(at, len),
                |at, bytes| d.write(self.core.block, self.gm, at, bytes),
            )?,
            None => self
                .gm
                .write_rows(self.args, p, (off, pitch), (rows, row), data)?,
        }
        if let Some(r) = &mut self.rec {
            for i in 0..rows {
                r.touch(Mem::Gm(p.0), off + i * pitch, row, true);
            }
        }
        Ok(())
    }

    /// Records an atomic add into GM.
    pub fn gm_atomic_add(
        &mut self,
        p: ParamId,
        off: usize,
        dtype: crate::ir::DType,
        bytes: &[u8],
    ) -> Result<(), SimFault> {
        self.gm.atomic_add(self.args, p, off, dtype, bytes)?;
        if let Some(r) = &mut self.rec {
            r.touch(Mem::Gm(p.0), off, bytes.len(), true);
        }
        Ok(())
    }

    /// Reads a region as row-major bytes (a Vec tile is read from `aiv`'s UB).
    pub fn read_bytes(
        &mut self,
        loc: &TileLoc,
        aiv: u8,
        (r0, c0): (usize, usize),
        (rows, cols): (usize, usize),
        out: &mut Vec<u8>,
    ) -> Result<(), SimFault> {
        let buf = self.mem.buf(loc.space(), aiv)?;
        tile::read_region(buf, loc, (r0, c0), (rows, cols), out)?;
        self.note_region(loc, aiv, (r0, c0), (rows, cols), false);
        Ok(())
    }

    /// Reads a region run by run: `f(bytes, run)` sees each contiguous run of the tile's bytes
    /// (`run.elem`, `run.len` and `run.stride` place it in the row-major region).
    pub fn read_runs(
        &mut self,
        loc: &TileLoc,
        aiv: u8,
        at: (usize, usize),
        size: (usize, usize),
        mut f: impl FnMut(&[u8], Run),
    ) -> Result<(), SimFault> {
        let buf = self.mem.buf(loc.space(), aiv)?;
        let es = loc.es();
        tile::for_each_run(loc, buf.len(), at, size, |run| {
            f(&buf[run.buf..run.buf + run.len * es], run)
        })?;
        self.note_region(loc, aiv, at, size, false);
        Ok(())
    }

    /// Stores the `rows x cols` region of a Vec tile into the ND window of write-only output
    /// `d` whose row `r` starts at element `first + r * stride`, straight from UB (no staging
    /// copy): the same bytes to the same places as reading the region and writing its rows.
    pub fn store_in_place(
        &mut self,
        loc: &TileLoc,
        aiv: u8,
        d: &WriteOnly<'_>,
        (first, stride): (usize, usize),
        (rows, cols): (usize, usize),
    ) -> Result<(), SimFault> {
        let es = loc.es();
        if rows == 0 || cols == 0 {
            return Ok(());
        }
        // The whole span first: a store that does not fit writes nothing (one whose span
        // overflows is as long as no tensor is).
        let span = (rows - 1)
            .checked_mul(stride)
            .and_then(|x| x.checked_add(first.checked_add(cols)?))
            .and_then(|end| Some((first.checked_mul(es)?, (end - first).checked_mul(es)?)))
            .unwrap_or((first.saturating_mul(es), usize::MAX));
        d.check(span.0, span.1)?;
        let buf = self.mem.buf(loc.space(), aiv)?;
        let (block, gm) = (self.core.block, &mut *self.gm);
        let mut res = Ok(());
        tile::for_each_run(loc, buf.len(), (0, 0), (rows, cols), |run| {
            if res.is_err() || run.len == 0 {
                return;
            }
            if run.len > 1 && run.stride != 1 {
                res = Err(SimFault::Internal("a column-major tile stored in place"));
                return;
            }
            // A run may span several rows of the region: one write per row piece.
            let (mut e, mut at, mut left) = (run.elem, run.buf, run.len);
            while left > 0 && res.is_ok() {
                let (r, c) = (e / cols, e % cols);
                let n = left.min(cols - c);
                let off = r
                    .checked_mul(stride)
                    .and_then(|x| x.checked_add(first + c))
                    .and_then(|x| x.checked_mul(es));
                res = match off {
                    Some(off) => d.write(block, gm, off, &buf[at..at + n * es]),
                    None => Err(SimFault::Internal("a checked GM span overflows")),
                };
                (e, at, left) = (e + n, at + n * es, left - n);
            }
        })?;
        res?;
        self.note_region(loc, aiv, (0, 0), (rows, cols), false);
        if let Some(r) = &mut self.rec {
            for i in 0..rows {
                r.touch(
                    Mem::Gm(d.param().0),
                    (first + i * stride) * es,
                    cols * es,
                    true,
                );
            }
        }
        Ok(())
    }

    /// Writes a region run by run (`f(bytes, run)` fills each run of the tile's bytes) and
    /// marks it written.
    pub fn write_runs(
        &mut self,
        loc: &TileLoc,
        aiv: u8,
        at: (usize, usize),
        size: (usize, usize),
        mut f: impl FnMut(&mut [u8], Run),
    ) -> Result<(), SimFault> {
        let (space, es) = (loc.space(), loc.es());
        self.mem
            .touch(space, aiv, loc.addr, loc.addr + loc.ty.bytes() as usize);
        let (buf, bits) = self.mem.buf_bits_mut(space, aiv)?;
        tile::for_each_run(loc, buf.len(), at, size, |run| {
            let n = run.len * es;
            f(&mut buf[run.buf..run.buf + n], run);
            mark_bits(bits, run.buf, n, true);
        })?;
        self.note_region(loc, aiv, at, size, true);
        Ok(())
    }

    /// The `rows x cols` top-left region of an f32 ND tile in place: `f(slab, pitch)` sees row
    /// `i` of the region at `slab[i * pitch..i * pitch + cols]` (`pitch` = the tile's columns).
    /// The region is then marked written (and noted read when `read`: the caller checked it is
    /// defined). `None`, with nothing done, when the tile is not f32 ND, the region is empty or
    /// outside it, or its bytes are not f32-aligned: the caller takes the scratch path.
    pub fn f32_nd_in_place<R>(
        &mut self,
        loc: &TileLoc,
        aiv: u8,
        (rows, cols): (usize, usize),
        read: bool,
        f: impl FnOnce(&mut [f32], usize) -> R,
    ) -> Result<Option<R>, SimFault> {
        let Some((start, end, pitch)) = f32_nd_slab(loc, (rows, cols)) else {
            return Ok(None);
        };
        let space = loc.space();
        self.mem
            .touch(space, aiv, loc.addr, loc.addr + loc.ty.bytes() as usize);
        let (buf, bits) = self.mem.buf_bits_mut(space, aiv)?;
        let len = buf.len();
        let Some(Ok(slab)) = buf
            .get_mut(start..end)
            .map(bytemuck::try_cast_slice_mut::<u8, f32>)
        else {
            return Ok(None);
        };
        let out = f(slab, pitch);
        tile::for_each_span(loc, len, (0, 0), (rows, cols), |s, n| {
            mark_bits(bits, s, n, true)
        })?;
        if read {
            self.note_region(loc, aiv, (0, 0), (rows, cols), false);
        }
        self.note_region(loc, aiv, (0, 0), (rows, cols), true);
        Ok(Some(out))
    }

    /// [`Self::f32_nd_in_place`] (reading the region first) with the same region of a second f32
    /// ND tile `other` of the same buffer read in place beside it: `f(slab, pitch, other_slab,
    /// other_pitch)`. The caller checked both regions are defined. `None`, with nothing done,
    /// when either tile is not of that form, they lie in different buffers, or their bytes
    /// overlap.
    pub fn f32_nd_in_place_with<R>(
        &mut self,
        loc: &TileLoc,
        other: &TileLoc,
        aiv: u8,
        (rows, cols): (usize, usize),
        f: impl FnOnce(&mut [f32], usize, &[f32], usize) -> R,
    ) -> Result<Option<R>, SimFault> {
        let (Some((ds, de, dp)), Some((os, oe, op))) = (
            f32_nd_slab(loc, (rows, cols)),
            f32_nd_slab(other, (rows, cols)),
        ) else {
            return Ok(None);
        };
        let space = loc.space();
        if other.space() != space || (ds < oe && os < de) {
            return Ok(None);
        }
        self.mem
            .touch(space, aiv, loc.addr, loc.addr + loc.ty.bytes() as usize);
        let (buf, bits) = self.mem.buf_bits_mut(space, aiv)?;
        let len = buf.len();
        if de.max(oe) > len {
            return Ok(None);
        }
        // Disjoint byte ranges of one buffer: split it between them.
        let (dst, src) = if ds < os {
            let (lo, hi) = buf.split_at_mut(os);
            (&mut lo[ds..de], &hi[..oe - os])
        } else {
            let (lo, hi) = buf.split_at_mut(ds);
            (&mut hi[..de - ds], &lo[os..oe])
        };
        let (Ok(slab), Ok(other_slab)) = (
            bytemuck::try_cast_slice_mut::<u8, f32>(dst),
            bytemuck::try_cast_slice::<u8, f32>(src),
        ) else {
            return Ok(None);
        };
        let out = f(slab, dp, other_slab, op);
        tile::for_each_span(loc, len, (0, 0), (rows, cols), |s, n| {
            mark_bits(bits, s, n, true)
        })?;
        self.note_region(other, aiv, (0, 0), (rows, cols), false);
        self.note_region(loc, aiv, (0, 0), (rows, cols), false);
        self.note_region(loc, aiv, (0, 0), (rows, cols), true);
        Ok(Some(out))
    }

    /// The `rows x cols` top-left region of an f32 ND tile read in place (see
    /// [`Self::f32_nd_in_place`]; the caller checked it is defined). `None` as there.
    pub fn f32_nd_view<R>(
        &mut self,
        loc: &TileLoc,
        aiv: u8,
        (rows, cols): (usize, usize),
        f: impl FnOnce(&[f32], usize) -> R,
    ) -> Result<Option<R>, SimFault> {
        let Some((start, end, pitch)) = f32_nd_slab(loc, (rows, cols)) else {
            return Ok(None);
        };
        let buf = self.mem.buf(loc.space(), aiv)?;
        let Some(Ok(slab)) = buf.get(start..end).map(bytemuck::try_cast_slice::<u8, f32>) else {
            return Ok(None);
        };
        let out = f(slab, pitch);
        self.note_region(loc, aiv, (0, 0), (rows, cols), false);
        Ok(Some(out))
    }

    /// Reads a region decoded to f32, row-major, into `out`.
    pub fn read_f32(
        &mut self,
        loc: &TileLoc,
        aiv: u8,
        at: (usize, usize),
        size: (usize, usize),
        out: &mut [f32],
    ) -> Result<(), SimFault> {
        self.read_f32_ordered(loc, aiv, at, size, Order::RowMajor, out)
    }

    /// Reads an f32, bf16 or f16 region as the strip kernel's f32 B panels (see
    /// [`tile::decode_panels_f32`]);
    /// false (nothing read) when the tile is not of that form.
    pub fn read_f32_panels(
        &mut self,
        loc: &TileLoc,
        aiv: u8,
        at: (usize, usize),
        size: (usize, usize),
        out: &mut [f32],
    ) -> Result<bool, SimFault> {
        let buf = self.mem.buf(loc.space(), aiv)?;
        if !tile::decode_panels_f32(buf, loc, at, size, out)? {
            return Ok(false);
        }
        self.note_region(loc, aiv, at, size, false);
        Ok(true)
    }

    /// Reads a region decoded to f32 into `out` in `order`: strip by strip when the layout maps
    /// onto that order (NZ and ND to row-major, ZN and DN to column-major), run by run otherwise.
    pub fn read_f32_ordered(
        &mut self,
        loc: &TileLoc,
        aiv: u8,
        at: (usize, usize),
        size: (usize, usize),
        order: Order,
        out: &mut [f32],
    ) -> Result<(), SimFault> {
        let (dtype, es) = (loc.ty.dtype, loc.es());
        if out.len() < size.0 * size.1 {
            return Err(SimFault::Internal("an f32 buffer shorter than its region"));
        }
        let buf = self.mem.buf(loc.space(), aiv)?;
        if tile::decode_dense(buf, loc, at, size, order, out)? {
            self.note_region(loc, aiv, at, size, false);
            return Ok(());
        }
        let mut scratch = self.core.pool.f32s_to_overwrite(0);
        let rows = size.0;
        let row_major = order == Order::RowMajor;
        if !row_major {
            scratch.clear();
            scratch.resize(size.0 * size.1, 0.0);
        }
        let r = {
            let dense: &mut [f32] = if row_major { out } else { &mut scratch };
            self.read_runs(loc, aiv, at, size, |b, run| {
                if run.stride == 1 {
                    numeric::decode_f32(dtype, b, &mut dense[run.elem..run.elem + run.len]);
                } else {
                    // Down a column: decode a chunk at once, then spread it over the rows.
                    let mut tmp = [0f32; 64];
                    for (k, chunk) in b.chunks(64 * es).enumerate() {
                        let n = chunk.len() / es;
                        numeric::decode_f32(dtype, chunk, &mut tmp[..n]);
                        let first = run.elem + k * 64 * run.stride;
                        for (i, v) in tmp[..n].iter().enumerate() {
                            dense[first + i * run.stride] = *v;
                        }
                    }
                }
            })
        };
        if r.is_ok() && !row_major {
            let cols = size.1;
            for (i, row) in scratch.chunks_exact(cols.max(1)).take(rows).enumerate() {
                for (j, v) in row.iter().enumerate() {
                    out[j * rows + i] = *v;
                }
            }
        }
        self.core.pool.put_f32s(scratch);
        r
    }

    /// Writes a region with `fill(buffer)`, a strip-by-strip writer that returns false (having
    /// written nothing) when the tile's layout does not map onto its data; when it wrote, the
    /// region is marked written span by span. Returns what `fill` returned.
    fn write_dense(
        &mut self,
        loc: &TileLoc,
        aiv: u8,
        at: (usize, usize),
        size: (usize, usize),
        fill: impl FnOnce(&mut [u8]) -> Result<bool, SimFault>,
    ) -> Result<bool, SimFault> {
        let space = loc.space();
        self.mem
            .touch(space, aiv, loc.addr, loc.addr + loc.ty.bytes() as usize);
        let (buf, bits) = self.mem.buf_bits_mut(space, aiv)?;
        if !fill(buf)? {
            return Ok(false);
        }
        let len = buf.len();
        tile::for_each_span(loc, len, at, size, |start, n| {
            mark_bits(bits, start, n, true)
        })?;
        self.note_region(loc, aiv, at, size, true);
        Ok(true)
    }

    /// Writes row-major f32 values into a region, encoded (rounded) to the tile's dtype.
    pub fn write_f32(
        &mut self,
        loc: &TileLoc,
        aiv: u8,
        at: (usize, usize),
        size: (usize, usize),
        vals: &[f32],
    ) -> Result<(), SimFault> {
        let (dtype, es) = (loc.ty.dtype, loc.es());
        if vals.len() < size.0 * size.1 {
            return Err(SimFault::Internal("an f32 buffer shorter than its region"));
        }
        // Strip by strip when the layout maps onto row-major (ND, NZ).
        if self.write_dense(loc, aiv, at, size, |buf| {
            tile::encode_dense(buf, loc, at, size, Order::RowMajor, vals)
        })? {
            return Ok(());
        }
        self.write_runs(loc, aiv, at, size, |b, run| {
            if run.stride == 1 {
                numeric::encode_f32(dtype, &vals[run.elem..run.elem + run.len], b);
            } else {
                // Down a column: gather a chunk from the rows, then encode it at once.
                let mut tmp = [0f32; 64];
                for (k, chunk) in b.chunks_mut(64 * es).enumerate() {
                    let n = chunk.len() / es;
                    let first = run.elem + k * 64 * run.stride;
                    for (i, v) in tmp[..n].iter_mut().enumerate() {
                        *v = vals[first + i * run.stride];
                    }
                    numeric::encode_f32(dtype, &tmp[..n], chunk);
                }
            }
        })
    }

    /// Writes row-major bytes into a region.
    pub fn write_bytes(
        &mut self,
        loc: &TileLoc,
        aiv: u8,
        at: (usize, usize),
        size: (usize, usize),
        data: &[u8],
    ) -> Result<(), SimFault> {
        let es = loc.es();
        if data.len() < size.0 * size.1 * es {
            return Err(SimFault::Internal("a byte buffer shorter than its region"));
        }
        // Strip by strip when the layout maps onto row-major (ND, NZ), marked span by span.
        if self.write_dense(loc, aiv, at, size, |buf| {
            tile::write_dense_bytes(buf, loc, at, size, data)
        })? {
            return Ok(());
        }
        self.write_runs(loc, aiv, at, size, |dst, run| {
            if run.stride == 1 {
                dst.copy_from_slice(&data[run.elem * es..(run.elem + run.len) * es]);
            } else {
                let end = (run.elem + (run.len - 1) * run.stride + 1) * es;
                tile::gather_es(es, &data[run.elem * es..end], dst, run.stride);
            }
        })
    }

    /// TLOAD of `rows` GM rows of `cols` elements, `pitch` elements apart from element `first`
    /// of tensor `p`, into the `rows x cols` top-left region of an ND or NZ tile, copied from
    /// the argument's bytes straight into the tile's strips (no staging buffer) and marked
    /// written. False (nothing done) when the layout does not map onto rows, the rows overlap
    /// (`pitch < cols`, a window the verifier allows) or this block wrote into those GM bytes:
    /// the caller takes the general path then.
    pub fn load_rows_in_place(
        &mut self,
        loc: &TileLoc,
        aiv: u8,
        p: ParamId,
        (first, pitch): (usize, usize),
        (rows, cols): (usize, usize),
    ) -> Result<bool, SimFault> {
        if !matches!(loc.ty.layout, crate::ir::Layout::ND | crate::ir::Layout::NZ)
            || rows == 0
            || cols == 0
            || pitch < cols
        {
            return Ok(false);
        }
        let es = loc.es();
        let (off, len) = (first * es, ((rows - 1) * pitch + cols) * es);
        let Some(src) = self.gm.unwritten(self.args, p, off, len)? else {
            return Ok(false);
        };
        let space = loc.space();
        self.mem
            .touch(space, aiv, loc.addr, loc.addr + loc.ty.bytes() as usize);
        let (buf, bits) = self.mem.buf_bits_mut(space, aiv)?;
        if !tile::write_pitched_bytes(buf, loc, (0, 0), (rows, cols), src, pitch)? {
            return Ok(false);
        }
        let n = buf.len();
        tile::for_each_span(loc, n, (0, 0), (rows, cols), |start, n| {
            mark_bits(bits, start, n, true)
        })?;
        if let Some(r) = &mut self.rec {
            for i in 0..rows {
                r.touch(Mem::Gm(p.0), off + i * pitch * es, cols * es, false);
            }
        }
        self.note_region(loc, aiv, (0, 0), (rows, cols), true);
        Ok(true)
    }

    /// Copies a region of tile `s` (in `s_aiv`'s UB if Vec) to a region of tile `d`, layout to
    /// layout, when the source region is all written and the two live in different buffers;
    /// returns false (having done nothing) otherwise.
    #[allow(clippy::too_many_arguments)]
    pub fn copy_tiles(
        &mut self,
        s: &TileLoc,
        s_aiv: u8,
        s_at: (usize, usize),
        d: &TileLoc,
        d_aiv: u8,
        d_at: (usize, usize),
        size: (usize, usize),
    ) -> Result<bool, SimFault> {
        if s.es() != d.es() || !self.region_defined(s, s_aiv, s_at, size)? {
            return Ok(false);
        }
        let dspace = d.space();
        if self.rec.is_none()
            && s.space() == MemSpace::Mat
            && matches!(dspace, MemSpace::Left | MemSpace::Right)
        {
            return self.defer_l0_move(s, s_at, d, d_at, size);
        }
        self.mem
            .touch(dspace, d_aiv, d.addr, d.addr + d.ty.bytes() as usize);
        let Some((src, dst, bits)) = self.mem.src_dst((s.space(), s_aiv), (dspace, d_aiv))? else {
            return Ok(false);
        };
        tile::copy_between(src, s, s_at, dst, d, d_at, size)?;
        tile::for_each_span(d, usize::MAX, d_at, size, |start, len| {
            mark_bits(bits, start, len, true)
        })?;
        self.note_region(s, s_aiv, s_at, size, false);
        self.note_region(d, d_aiv, d_at, size, true);
        Ok(true)
    }

    /// An L1 -> L0A/L0B copy of a defined region, recorded rather than made (untraced runs):
    /// the destination's written bits are marked now, its bytes are copied only if something
    /// other than a matmul operand read reaches them ([`BlockMem::defer_move`]). A matmul reads
    /// the source region instead ([`ExecCtx::operand_source`]), which saves a pass over every
    /// operand.
    fn defer_l0_move(
        &mut self,
        s: &TileLoc,
        s_at: (usize, usize),
        d: &TileLoc,
        d_at: (usize, usize),
        size: (usize, usize),
    ) -> Result<bool, SimFault> {
        let (sspace, dspace) = (s.space(), d.space());
        let (s_len, d_len) = (self.mem.buf_len(sspace, 0)?, self.mem.buf_len(dspace, 0)?);
        tile::check_region(s, s_len, s_at.0, s_at.1, size.0, size.1)?;
        tile::check_region(d, d_len, d_at.0, d_at.1, size.0, size.1)?;
        if size.0 == 0 || size.1 == 0 {
            return Ok(true);
        }
        let src_span = tile::region_span(s, s_len, s_at, size)?;
        let dst_span = tile::region_span(d, d_len, d_at, size)?;
        self.mem.defer_move(DeferredMove {
            src: (s.ty.clone(), s.addr, s_at),
            dst: (d.ty.clone(), d.addr, d_at),
            size,
            src_span,
            dst_span,
            snapshot: None,
        });
        let (_, bits) = self.mem.buf_bits_mut(dspace, 0)?;
        tile::for_each_span(d, usize::MAX, d_at, size, |start, len| {
            mark_bits(bits, start, len, true)
        })?;
        Ok(true)
    }

    /// The L1 source a matmul operand region can be decoded from while a move into it is
    /// pending (the same values; see [`ExecCtx::defer_l0_move`]): the source's type (owned), its
    /// address and the region's first element in it. `None` when the operand tile itself holds
    /// the values.
    pub fn operand_source(
        &self,
        loc: &TileLoc,
        at: (usize, usize),
        size: (usize, usize),
    ) -> Option<(crate::ir::TileType, usize, (usize, usize))> {
        self.mem.deferred_source(loc, at, size)
    }

    /// [`ExecCtx::write_bytes`] for a copy: element `i` (row-major) of the region becomes
    /// defined only where `defined[i]` (poison travels with copied padding).
    pub fn write_bytes_masked(
        &mut self,
        loc: &TileLoc,
        aiv: u8,
        at: (usize, usize),
        size: (usize, usize),
        data: &[u8],
        defined: &[bool],
    ) -> Result<(), SimFault> {
        self.write_bytes(loc, aiv, at, size, data)?;
        if defined.iter().all(|d| *d) {
            return Ok(());
        }
        let (space, es, mem) = (loc.space(), loc.es(), &mut *self.mem);
        tile::for_each_run(loc, usize::MAX, at, size, |run| {
            for i in 0..run.len {
                let ok = defined
                    .get(run.elem + i * run.stride)
                    .copied()
                    .unwrap_or(true);
                if !ok {
                    mem.mark(space, aiv, run.buf + i * es, es, false);
                }
            }
        })
    }

    /// Whether each element (row-major) of a region was ever written.
    pub fn defined_mask(
        &self,
        loc: &TileLoc,
        aiv: u8,
        at: (usize, usize),
        size: (usize, usize),
    ) -> Result<Vec<bool>, SimFault> {
        let mut out = Vec::new();
        self.defined_mask_into(loc, aiv, at, size, &mut out)?;
        Ok(out)
    }

    /// [`Self::defined_mask`] into `out` (resized to the region), so a caller can pass a
    /// pooled buffer.
    pub fn defined_mask_into(
        &self,
        loc: &TileLoc,
        aiv: u8,
        at: (usize, usize),
        size: (usize, usize),
        out: &mut Vec<bool>,
    ) -> Result<(), SimFault> {
        out.clear();
        out.resize(size.0 * size.1, true);
        let (space, es, mem) = (loc.space(), loc.es(), &*self.mem);
        tile::for_each_run(loc, usize::MAX, at, size, |run| {
            if !mem.defined(space, aiv, run.buf, run.len * es) {
                for i in 0..run.len {
                    out[run.elem + i * run.stride] = mem.defined(space, aiv, run.buf + i * es, es);
                }
            }
        })
    }

    /// True when every byte of the region was written.
    pub fn region_defined(
        &self,
        loc: &TileLoc,
        aiv: u8,
        at: (usize, usize),
        size: (usize, usize),
    ) -> Result<bool, SimFault> {
        let (space, mem) = (loc.space(), &*self.mem);
        let mut all = true;
        tile::for_each_span(loc, usize::MAX, at, size, |start, len| {
            all = all && mem.defined(space, aiv, start, len);
        })?;
        Ok(all)
    }

    /// An error when some byte of the region was never written: poison reaching a value.
    pub fn require_defined(
        &self,
        loc: &TileLoc,
        aiv: u8,
        at: (usize, usize),
        size: (usize, usize),
        what: &'static str,
    ) -> Result<(), SimFault> {
        if self.region_defined(loc, aiv, at, size)? {
            return Ok(());
        }
        let mask = self.defined_mask(loc, aiv, at, size)?;
        match mask.iter().position(|d| !d) {
            None => Ok(()),
            Some(i) => Err(SimFault::Poison {
                what,
                tile: loc.name().to_string(),
                element: (at.0 + i / size.1.max(1), at.1 + i % size.1.max(1)),
            }),
        }
    }

    /// The value of a float scalar operand.
    pub fn scalar(&self, s: &ScalarArg) -> Result<f64, SimFault> {
        match s {
            ScalarArg::Const(v) => Ok(*v),
            ScalarArg::Param(p) => match self.args.get(p.0 as usize) {
                Some(Arg::Float(v)) => Ok(*v),
                Some(Arg::Int(v)) => Ok(*v as f64),
                _ => Err(SimFault::arg_kind(*p, "a scalar")),
            },
        }
    }
}

/// Byte range and row pitch of the `rows x cols` top-left region of an f32 ND tile, from the
/// first element of its first row to the last of its last row; `None` when the tile is not f32
/// ND or the region is empty or larger than the tile.
fn f32_nd_slab(loc: &TileLoc, (rows, cols): (usize, usize)) -> Option<(usize, usize, usize)> {
    let nd_f32 = loc.ty.dtype == crate::ir::DType::F32 && loc.ty.layout == crate::ir::Layout::ND;
    if !nd_f32 || rows == 0 || cols == 0 || rows > loc.rows() || cols > loc.cols() {
        return None;
    }
    let pitch = loc.cols();
    let end = loc.addr + ((rows - 1) * pitch + cols) * 4;
    Some((loc.addr, end, pitch))
}
