//! GM <-> tile: TLOAD (MTE2) and TSTORE (MTE3 from Vec, the Fixpipe from Acc).

use super::{moves, ExecCtx};
use crate::ir::{c0, DType, Fractal, GmView, Layout, LoadStoreOp, MemSpace, ParamKind};
use crate::sim::SimFault;

/// A GM window evaluated for this access.
pub(super) struct View {
    pub param: crate::ir::ParamId,
    pub dtype: DType,
    pub offset: i64,
    pub rows: i64,
    pub cols: i64,
    pub stride: i64,
    pub layout: Layout,
}

impl View {
    pub fn eval(cx: &ExecCtx<'_, '_, '_>, v: &GmView) -> Result<View, SimFault> {
        let dtype = match cx.kernel.params.get(v.tensor.0 as usize).map(|p| &p.kind) {
            Some(ParamKind::Tensor { dtype, .. }) => *dtype,
            _ => return Err(SimFault::arg_kind(v.tensor, "a GM tensor")),
        };
        Ok(View {
            param: v.tensor,
            dtype,
            offset: cx.core.eval(&v.offset)?,
            rows: cx.core.eval(&v.rows)?,
            cols: cx.core.eval(&v.cols)?,
            stride: cx.core.eval(&v.stride)?,
            layout: v.layout,
        })
    }

    /// Element index of `(r, c)` of the window.
    fn index(&self, r: usize, c: usize) -> Result<usize, SimFault> {
        let (r, c) = (r as i64, c as i64);
        if r >= self.rows || c >= self.cols {
            return Err(SimFault::WindowOutOfBounds {
                row: r as usize,
                col: c as usize,
                rows: self.rows,
                cols: self.cols,
            });
        }
        let i = match self.layout {
            Layout::ND => self.offset + r * self.stride + c,
            Layout::DN => self.offset + c * self.stride + r,
            boxed => {
                let f = boxed
                    .default_fractal(self.dtype, MemSpace::Gm)
                    .unwrap_or(Fractal {
                        rows: 16,
                        cols: c0(self.dtype),
                    });
                self.offset
                    + boxed.element_offset(
                        r as u64,
                        c as u64,
                        self.rows as u64,
                        self.cols as u64,
                        Some(f),
                    ) as i64
            }
        };
        usize::try_from(i).map_err(|_| SimFault::TooSmall {
            what: "GM element index",
            value: i,
            min: 0,
        })
    }

    /// Elements contiguous in GM from `(r, c)` along the row.
    fn run(&self, c: usize, cols: usize) -> usize {
        match self.layout {
            Layout::ND => cols - c,
            _ => 1,
        }
    }

    /// For a DN window whose `rows x cols` top-left region is inside the window, at
    /// non-negative indices, inside tensor `len` elements: the first element index of each
    /// column (a column is contiguous in GM). `None` when the element-wise path must run (it
    /// names the first bad element).
    fn dn_columns(&self, rows: usize, cols: usize, len: usize) -> Option<(i64, i64)> {
        if self.layout != Layout::DN || rows == 0 || cols == 0 {
            return None;
        }
        let (r, c) = (rows as i64, cols as i64);
        if r > self.rows || c > self.cols {
            return None;
        }
        let last_col = self.offset.checked_add((c - 1).checked_mul(self.stride)?)?;
        let lo = self.offset.min(last_col);
        let hi = self.offset.max(last_col).checked_add(r)?;
        (lo >= 0 && hi as u64 <= len as u64).then_some((self.offset, self.stride))
    }

    /// For an ND window with a non-negative row stride: the element index of each row's first
    /// element of the `rows x cols` top-left region, after checking the region's first and last
    /// elements (every other one lies between them). `None` when the element-wise path must run.
    fn nd_rows(&self, rows: usize, cols: usize) -> Result<Option<(usize, usize)>, SimFault> {
        if self.layout != Layout::ND || self.stride < 0 || rows == 0 || cols == 0 {
            return Ok(None);
        }
        let first = self.index(0, 0)?;
        self.index(rows - 1, cols - 1)?;
        Ok(Some((first, self.stride as usize)))
    }

    /// Elements of the window's tensor.
    pub fn tensor_len(&self, cx: &ExecCtx<'_, '_, '_>) -> usize {
        if let Some(d) = cx.write_only(self.param) {
            return d.len() / (self.dtype.size_bytes().max(1) as usize);
        }
        cx.args
            .get(self.param.0 as usize)
            .and_then(|a| a.as_gm())
            .map(|t| t.len())
            .unwrap_or(0)
    }

    /// Reads the `rows x cols` top-left region as row-major bytes.
    pub fn read(
        &self,
        cx: &mut ExecCtx<'_, '_, '_>,
        rows: usize,
        cols: usize,
    ) -> Result<Vec<u8>, SimFault> {
        let es = self.dtype.size_bytes() as usize;
        // Every element of the region is read into below (each path covers all of it).
        let mut out = cx.core.pool.bytes_to_overwrite(rows * cols * es);
        if let Some((offset, stride)) = self.dn_columns(rows, cols, self.tensor_len(cx)) {
            // DN: each column is one contiguous GM run, scattered down the row-major region.
            let mut col = cx.core.pool.bytes();
            col.resize(rows * es, 0);
            for c in 0..cols {
                let i = (offset + c as i64 * stride) as usize;
                cx.gm_read(self.param, i * es, &mut col)?;
                for (r, e) in col.chunks_exact(es).enumerate() {
                    let d = (r * cols + c) * es;
                    out[d..d + es].copy_from_slice(e);
                }
            }
            cx.core.pool.put_bytes(col);
            return Ok(out);
        }
        if let Some((first, stride)) = self.nd_rows(rows, cols)? {
            for (r, row) in out.chunks_exact_mut(cols * es).enumerate() {
                cx.gm_read(self.param, (first + r * stride) * es, row)?;
            }
            return Ok(out);
        }
        for r in 0..rows {
            let mut c = 0;
            while c < cols {
                let n = self.run(c, cols);
                let i = self.index(r, c)?;
                self.index(r, c + n - 1)?;
                let dst = (r * cols + c) * es;
                cx.gm_read(self.param, i * es, &mut out[dst..dst + n * es])?;
                c += n;
            }
        }
        Ok(out)
    }

    /// A DN window's `rows x cols` top-left region as column-major bytes (each column one GM
    /// read, no transpose), for a tile that stores columns contiguously (DN, ZN); `None` when
    /// the window is not of that form (the row-major path then runs).
    fn read_columns(
        &self,
        cx: &mut ExecCtx<'_, '_, '_>,
        rows: usize,
        cols: usize,
    ) -> Result<Option<Vec<u8>>, SimFault> {
        let Some((offset, stride)) = self.dn_columns(rows, cols, self.tensor_len(cx)) else {
            return Ok(None);
        };
        let es = self.dtype.size_bytes() as usize;
        let mut out = cx.core.pool.bytes_to_overwrite(rows * cols * es);
        for (c, col) in out.chunks_exact_mut(rows * es).enumerate() {
            let i = (offset + c as i64 * stride) as usize;
            cx.gm_read(self.param, i * es, col)?;
        }
        Ok(Some(out))
    }

    /// Writes row-major bytes into the `rows x cols` top-left region (or adds them atomically).
    pub fn write(
        &self,
        cx: &mut ExecCtx<'_, '_, '_>,
        rows: usize,
        cols: usize,
        data: &[u8],
        atomic: bool,
    ) -> Result<(), SimFault> {
        let es = self.dtype.size_bytes() as usize;
        let columns = self
            .dn_columns(rows, cols, self.tensor_len(cx))
            // Columns that overlap would make the write order visible: element-wise then.
            .filter(|&(_, stride)| cols == 1 || stride >= rows as i64);
        if let Some((offset, stride)) = columns {
            // DN: each column is one contiguous GM run.
            let mut col = cx.core.pool.bytes();
            col.resize(rows * es, 0);
            let mut res = Ok(());
            for c in 0..cols {
                for (r, e) in col.chunks_exact_mut(es).enumerate() {
                    let s = (r * cols + c) * es;
                    e.copy_from_slice(&data[s..s + es]);
                }
                let i = (offset + c as i64 * stride) as usize;
                res = if atomic {
                    cx.gm_atomic_add(self.param, i * es, self.dtype, &col)
                } else {
                    cx.gm_write(self.param, i * es, &col)
                };
                if res.is_err() {
                    break;
                }
            }
            cx.core.pool.put_bytes(col);
            return res;
        }
        if let Some((first, stride)) = self.nd_rows(rows, cols)? {
            if !atomic {
                let (off, pitch, row) = (first * es, stride * es, cols * es);
                return cx.gm_write_rows(self.param, (off, pitch), (rows, row), data);
            }
            for (r, bytes) in data.chunks_exact(cols * es).take(rows).enumerate() {
                cx.gm_atomic_add(self.param, (first + r * stride) * es, self.dtype, bytes)?;
            }
            return Ok(());
        }
        for r in 0..rows {
            let mut c = 0;
            while c < cols {
                let n = self.run(c, cols);
                let i = self.index(r, c)?;
                self.index(r, c + n - 1)?;
                let src = (r * cols + c) * es;
                let bytes = &data[src..src + n * es];
                if atomic {
                    cx.gm_atomic_add(self.param, i * es, self.dtype, bytes)?;
                } else {
                    cx.gm_write(self.param, i * es, bytes)?;
                }
                c += n;
            }
        }
        Ok(())
    }
}

pub(super) fn exec(cx: &mut ExecCtx<'_, '_, '_>, op: &LoadStoreOp) -> Result<(), SimFault> {
    match op {
        LoadStoreOp::Load { dst, src } => {
            let loc = cx.tile(dst)?;
            let view = View::eval(cx, src)?;
            if view.dtype != loc.ty.dtype {
                return Err(SimFault::DtypeMismatch {
                    what: "load GM data into a tile",
                    found: view.dtype,
                    expected: loc.ty.dtype,
                });
            }
            let (rows, cols) = loc.valid()?;
            let aiv = cx.own_aiv();
            // A DN window into a column-major tile (B's K^T view into ZN): columns land as
            // they lie in GM, run by run, without a transpose there and back.
            if matches!(loc.ty.layout, Layout::ZN | Layout::DN) {
                if let Some(data) = view.read_columns(cx, rows, cols)? {
                    let es = loc.es();
                    // Runs come column by column, top to bottom: follow them without dividing
                    // each run's element index by `cols` (a division per 32-byte run cost more
                    // than its copy); any other order takes the division.
                    let (mut c, mut r0) = (0, 0);
                    let r = cx.write_runs(&loc, aiv, (0, 0), (rows, cols), |dst, run| {
                        if r0 >= rows {
                            (c, r0) = (c + 1, 0);
                        }
                        if run.elem != r0 * cols + c {
                            (c, r0) = (run.elem % cols, run.elem / cols);
                        }
                        let at = (c * rows + r0) * es;
                        dst.copy_from_slice(&data[at..at + dst.len()]);
                        r0 += run.len;
                    });
                    cx.core.pool.put_bytes(data);
                    return r;
                }
            }
            // An ND window into a row-major tile (A's or w's rows into NZ): GM rows land in the
            // tile's strips as they lie, without a staging buffer.
            if let Some((first, stride)) = view.nd_rows(rows, cols)? {
                if cx.load_rows_in_place(&loc, aiv, view.param, (first, stride), (rows, cols))? {
                    return Ok(());
                }
            }
            let data = view.read(cx, rows, cols)?;
            let r = cx.write_bytes(&loc, aiv, (0, 0), (rows, cols), &data);
            cx.core.pool.put_bytes(data);
            r
        }
        LoadStoreOp::Store {
            dst,
            src,
            relu,
            scale,
            atomic_add,
            ..
        } => {
            let loc = cx.tile(src)?;
            let view = View::eval(cx, dst)?;
            let (rows, cols) = loc.valid()?;
            let aiv = cx.own_aiv();
            cx.require_defined(&loc, aiv, (0, 0), (rows, cols), "a store to GM")?;
            let data = if loc.space() == MemSpace::Acc {
                let stride_rows = moves::read_stride_rows(&loc, false, None)?;
                moves::check_acc_stride(cx, &loc, stride_rows, "TSTORE")?;
                moves::fixpipe(
                    cx,
                    &loc,
                    (0, 0),
                    (rows, cols),
                    view.dtype,
                    *relu,
                    scale.as_ref(),
                )?
            } else {
                if view.dtype != loc.ty.dtype {
                    return Err(SimFault::DtypeMismatch {
                        what: "store a tile into GM data",
                        found: loc.ty.dtype,
                        expected: view.dtype,
                    });
                }
                // Into a write-only output's row-major window: straight from UB.
                if let Some(d) = cx.write_only(view.param).filter(|_| !*atomic_add) {
                    let row_major = !matches!(loc.ty.layout, Layout::ZN | Layout::DN);
                    if let Some(rows_at) = view.nd_rows(rows, cols)?.filter(|_| row_major) {
                        return cx.store_in_place(&loc, aiv, d, rows_at, (rows, cols));
                    }
                }
                let mut b = cx.core.pool.bytes_to_overwrite(rows * cols * loc.es());
                let aiv = cx.own_aiv();
                cx.read_bytes(&loc, aiv, (0, 0), (rows, cols), &mut b)?;
                b
            };
            let r = view.write(cx, rows, cols, &data, *atomic_add);
            cx.core.pool.put_bytes(data);
            r
        }
    }
}
