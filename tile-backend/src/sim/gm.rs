//! GM: checking kernel arguments ([`crate::launch`]) against a kernel, and each block's private
//! write overlay.

use super::{numeric, SimError, SimFault};
use crate::ir::{DType, Expr, ExprEnv, GmUse, Kernel, ParamId, ParamKind, VarId};
use crate::launch::{Arg, GmSlice};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

struct ScalarEnv<'a, 'b>(&'a [Arg<'b>]);

impl ExprEnv for ScalarEnv<'_, '_> {
    fn var(&self, _: VarId) -> Option<i64> {
        None
    }
    fn param(&self, p: ParamId) -> Option<i64> {
        match self.0.get(p.0 as usize)? {
            Arg::Int(v) => Some(*v),
            _ => None,
        }
    }
    fn block_idx(&self) -> Option<i64> {
        None
    }
    fn block_dim(&self) -> Option<i64> {
        None
    }
    fn sub_block_idx(&self) -> Option<i64> {
        None
    }
}

/// Evaluates a parameter-only expression (tensor shapes).
pub(crate) fn eval_shape(e: &Expr, args: &[Arg]) -> Option<i64> {
    e.eval(&ScalarEnv(args)).ok()
}

/// Checks that `args` match the kernel's parameters: count, kinds, dtypes and shapes.
pub(crate) fn check_args(kernel: &Kernel, args: &[Arg]) -> Result<(), SimError> {
    if args.len() != kernel.params.len() {
        return Err(SimError::BadArg {
            name: format!("#{}", args.len()),
            why: format!(
                "kernel `{}` takes {} arguments, {} given",
                kernel.name,
                kernel.params.len(),
                args.len()
            ),
        });
    }
    for (p, a) in kernel.params.iter().zip(args) {
        let bad = |why: String| SimError::BadArg {
            name: p.name.clone(),
            why,
        };
        let tensor = match a {
            Arg::Input(_) if matches!(p.kind, ParamKind::Tensor { output: true, .. }) => {
                return Err(bad(
                    "is an output: pass an owned tensor (Arg::Tensor) or a mutable borrow (Arg::InOut), not a borrowed input".into(),
                ));
            }
            _ => a.gm_shape(),
        };
        match (&p.kind, tensor) {
            (ParamKind::Tensor { dtype, shape, .. }, Some((t_dtype, t_shape, bytes))) => {
                if t_dtype != *dtype {
                    return Err(bad(format!("expected {dtype}, got {t_dtype}")));
                }
                // Compared dimension by dimension (nothing collected: this runs every launch);
                // the message is built only for a mismatch.
                let mut same = shape.len() == t_shape.len();
                for (i, e) in shape.iter().enumerate() {
                    let w = eval_shape(e, args).ok_or_else(|| {
                        bad("its shape depends on a missing integer scalar".into())
                    })?;
                    same &= t_shape.get(i).is_some_and(|&d| d as i64 == w);
                }
                if !same {
                    let want: Vec<i64> = shape.iter().filter_map(|e| eval_shape(e, args)).collect();
                    let got: Vec<i64> = t_shape.iter().map(|d| *d as i64).collect();
                    return Err(bad(format!("expected shape {want:?}, got {got:?}")));
                }
                let need = t_shape.iter().product::<usize>() * dtype.size_bytes() as usize;
                if bytes != need {
                    return Err(bad(format!("holds {bytes} bytes, its shape needs {need}")));
                }
            }
            (ParamKind::Scalar { dtype }, _) if !dtype.is_float() && matches!(a, Arg::Int(_)) => {}
            (ParamKind::Scalar { dtype }, _) if dtype.is_float() && matches!(a, Arg::Float(_)) => {}
            (ParamKind::Scalar { dtype }, _) => {
                return Err(bad(format!("expected a {dtype} scalar")));
            }
            (ParamKind::Tensor { .. }, _) => return Err(bad("expected a GM tensor".into())),
        }
    }
    Ok(())
}

const PAGE: usize = 4096;

struct Page {
    data: Vec<u8>,
    dirty: Vec<u64>,
}

struct AtomicAdd {
    param: u32,
    byte_off: usize,
    dtype: DType,
    bytes: Vec<u8>,
}

/// Pages given back by merged overlays, for the next blocks (their data is stale: only dirty
/// bytes are ever read, and a page's dirty bits are cleared when it is reused).
static PAGE_POOL: std::sync::Mutex<Vec<Page>> = std::sync::Mutex::new(Vec::new());

/// Most pages kept in [`PAGE_POOL`] (64 MiB of data): enough for the overlays of a 64 MiB
/// result (a 65536-row paged gather of 1 KiB rows), which otherwise page-faulted three quarters
/// of its overlay pages in afresh on every call.
const POOL_PAGES: usize = 16384;

/// A page with no dirty byte: from `spare`, else a batch from the pool, else a new one.
fn take_page(spare: &mut Vec<Page>) -> Page {
    if spare.is_empty() {
        if let Ok(mut pool) = PAGE_POOL.lock() {
            let n = pool.len().min(64);
            let at = pool.len() - n;
            spare.extend(pool.drain(at..));
        }
    }
    match spare.pop() {
        Some(mut pg) => {
            pg.dirty.fill(0);
            pg
        }
        None => Page {
            data: vec![0u8; PAGE],
            dirty: vec![0; PAGE / 64],
        },
    }
}

/// Sets the dirty bits of bytes `lo .. hi` of a page (whole words at once).
fn mark_dirty(dirty: &mut [u64], lo: usize, hi: usize) {
    if lo >= hi {
        return;
    }
    let (w0, w1) = (lo / 64, (hi - 1) / 64);
    let head = u64::MAX << (lo % 64);
    let tail = u64::MAX >> (63 - (hi - 1) % 64);
    if w0 == w1 {
        dirty[w0] |= head & tail;
        return;
    }
    dirty[w0] |= head;
    dirty[w0 + 1..w1].fill(u64::MAX);
    dirty[w1] |= tail;
}

/// GM rows a core expects to read soon, hinted to the CPU's caches a few lines at a time from
/// inside the long compute loops that run before it reads them ([`hint_lines`]): a gather
/// queues the rows of the index window after its own (usually the kernel's next chunk), and the
/// matmul register kernel hints a couple of lines between its row groups, so the rows' memory
/// latency overlaps arithmetic instead of stalling the next gather. (Hinting a whole window at
/// once only moves the stall: the CPU holds few misses in flight.) Only a hint: results never
/// depend on it.
///
/// [`hint_lines`]: PrefetchQueue::hint_lines
#[derive(Debug, Default)]
pub(crate) struct PrefetchQueue<'a> {
    /// The queued rows, in GM (argument data).
    rows: Vec<&'a [u8]>,
    /// The next row to hint, and the byte offset of its next line.
    at: (usize, usize),
}

/// `v` emptied, as a list of another lifetime: an empty list holds no borrow, and collecting
/// through a map of identical layout reuses the allocation in place (std's in-place collect;
/// the steady-state allocation test in `tests/sim_allocations.rs` holds it to that).
pub(crate) fn emptied<'b>(mut v: Vec<&[u8]>) -> Vec<&'b [u8]> {
    v.clear();
    v.into_iter().map(|_| -> &'b [u8] { &[] }).collect()
}

impl<'a> PrefetchQueue<'a> {
    /// An empty queue in `rows`' allocation (a list a core's scratch pool kept).
    pub fn reusing(rows: Vec<&[u8]>) -> Self {
        PrefetchQueue {
            rows: emptied(rows),
            at: (0, 0),
        }
    }

    /// The queue's row list, emptied, for a scratch pool to keep.
    pub fn into_spare(self) -> Vec<&'static [u8]> {
        emptied(self.rows)
    }

    /// Replaces the queue with `rows`.
    pub fn replace(&mut self, rows: impl IntoIterator<Item = &'a [u8]>) {
        self.rows.clear();
        self.rows.extend(rows);
        self.at = (0, 0);
    }

    /// How many lines have been hinted since the last [`replace`](Self::replace).
    #[cfg(test)]
    pub fn lines_hinted(&self) -> usize {
        let done: usize = self.rows[..self.at.0]
            .iter()
            .map(|r| r.len().div_ceil(64))
            .sum();
        done + self.at.1 / 64
    }

    /// Hints the next `n` queued 64-byte lines.
    #[inline]
    pub fn hint_lines(&mut self, n: usize) {
        for _ in 0..n {
            let (r, off) = self.at;
            let Some(row) = self.rows.get(r) else {
                return;
            };
            if let Some(line) = row.get(off..) {
                hint_line(line);
            }
            self.at = if off + 64 < row.len() {
                (r, off + 64)
            } else {
                (r + 1, 0)
            };
        }
    }
}

/// Asks the CPU to fetch the cache line holding `bytes[0]` (nothing for an empty slice).
#[inline]
pub(crate) fn hint_line(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    if !bytes.is_empty() {
        // SAFETY: a prefetch only hints the cache hierarchy; it never faults and neither reads
        // nor writes memory as far as the program can observe. The pointer is in bounds of
        // `bytes` anyway (it is not empty).
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                bytes.as_ptr().cast(),
            )
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// One block's view of GM: reads see the arguments plus this block's own writes.
#[derive(Default)]
pub(crate) struct Overlay {
    /// Pages by (argument, page index); foldhash: this map is hit on every GM access.
    pages: foldhash::HashMap<(u32, usize), Page>,
    /// Recycled pages not in use yet (see [`take_page`]).
    spare: Vec<Page>,
    atomics: Vec<AtomicAdd>,
}

/// A GM access of `len` bytes at `off` outside tensor `p` of `size` bytes (named later: see
/// [`SimFault::named`]).
fn out_of_bounds(p: ParamId, off: usize, len: usize, size: usize) -> SimFault {
    SimFault::GmOutOfBounds {
        param: p,
        name: String::new(),
        offset: off,
        len,
        size,
    }
}

fn tensor<'x>(args: &'x [Arg<'_>], p: ParamId) -> Result<GmSlice<'x>, SimFault> {
    args.get(p.0 as usize)
        .and_then(Arg::as_gm)
        .ok_or_else(|| SimFault::arg_kind(p, "a GM tensor"))
}

impl Overlay {
    fn check<'x>(
        args: &'x [Arg<'_>],
        p: ParamId,
        off: usize,
        len: usize,
    ) -> Result<GmSlice<'x>, SimFault> {
        let t = tensor(args, p)?;
        if off.checked_add(len).is_none_or(|end| end > t.data.len()) {
            return Err(out_of_bounds(p, off, len, t.data.len()));
        }
        Ok(t)
    }

    /// [`Self::check`] for a write: the argument must be owned or borrowed mutably, not a
    /// borrowed input.
    fn check_writable(
        args: &[Arg<'_>],
        p: ParamId,
        off: usize,
        len: usize,
    ) -> Result<(), SimFault> {
        Self::check(args, p, off, len)?;
        if args.get(p.0 as usize).is_some_and(|a| !a.is_writable()) {
            return Err(SimFault::GmReadOnly {
                param: p,
                name: String::new(),
            });
        }
        Ok(())
    }

    /// Asks the CPU to start fetching `len` bytes at `off` of tensor `p` into its caches (a hint
    /// with no effect on results: a gather issues it a few rows ahead of the row it copies, so
    /// the scattered rows' memory latency overlaps the copies). Ranges outside the tensor are
    /// ignored.
    pub fn prefetch(&self, args: &[Arg], p: ParamId, off: usize, len: usize) {
        let Ok(t) = Self::check(args, p, off, len) else {
            return;
        };
        t.data[off..off + len].chunks(64).for_each(hint_line);
    }

    /// The argument bytes `off .. off + len` of tensor `p` as they were passed in (without this
    /// block's writes), or `None` outside the tensor: for hints ([`PrefetchQueue`]), not data.
    pub fn argument_bytes<'x>(
        args: &'x [Arg<'_>],
        p: ParamId,
        off: usize,
        len: usize,
    ) -> Option<&'x [u8]> {
        let t = Self::check(args, p, off, len).ok()?;
        t.data.get(off..off + len)
    }

    /// The bytes `off .. off + len` of tensor `p` as this block reads them, borrowed straight
    /// from the argument when the block wrote none of their pages (so a load copies them into a
    /// tile without a staging buffer); `Ok(None)` when it did ([`Self::read`] merges those
    /// writes); `Err` outside the tensor.
    pub fn unwritten<'x>(
        &self,
        args: &'x [Arg<'_>],
        p: ParamId,
        off: usize,
        len: usize,
    ) -> Result<Option<&'x [u8]>, SimFault> {
        let t = Self::check(args, p, off, len)?;
        if !self.pages.is_empty() && len > 0 {
            let (first, last) = (off / PAGE, (off + len - 1) / PAGE);
            // Whichever is fewer: the pages written, or the pages of the range.
            let hit = if self.pages.len() < last - first + 1 {
                self.pages
                    .keys()
                    .any(|&(q, pg)| q == p.0 && (first..=last).contains(&pg))
            } else {
                (first..=last).any(|pg| self.pages.contains_key(&(p.0, pg)))
            };
            if hit {
                return Ok(None);
            }
        }
        Ok(Some(&t.data[off..off + len]))
    }

    /// Reads `out.len()` bytes at `off` of tensor `p`.
    pub fn read(
        &self,
        args: &[Arg],
        p: ParamId,
        off: usize,
        out: &mut [u8],
    ) -> Result<(), SimFault> {
        let t = Self::check(args, p, off, out.len())?;
        out.copy_from_slice(&t.data[off..off + out.len()]);
        if self.pages.is_empty() {
            return Ok(());
        }
        let mut pos = 0;
        while pos < out.len() {
            let abs = off + pos;
            let (page, in_page) = (abs / PAGE, abs % PAGE);
            let n = (PAGE - in_page).min(out.len() - pos);
            if let Some(pg) = self.pages.get(&(p.0, page)) {
                // Only the bytes this block wrote differ from the argument.
                let mut i = in_page;
                while i < in_page + n {
                    let (w, o) = (i / 64, i % 64);
                    let k = (64 - o).min(in_page + n - i);
                    let bits = pg.dirty[w] >> o;
                    let all = if k == 64 { u64::MAX } else { (1u64 << k) - 1 };
                    let dst = pos + (i - in_page);
                    if bits & all == all {
                        out[dst..dst + k].copy_from_slice(&pg.data[i..i + k]);
                    } else if bits & all != 0 {
                        for j in 0..k {
                            if bits >> j & 1 == 1 {
                                out[dst + j] = pg.data[i + j];
                            }
                        }
                    }
                    i += k;
                }
            }
            pos += n;
        }
        Ok(())
    }

    /// Writes `bytes` at `off` of tensor `p` (visible to this block at once, to GM at merge).
    pub fn write(
        &mut self,
        args: &[Arg],
        p: ParamId,
        off: usize,
        bytes: &[u8],
    ) -> Result<(), SimFault> {
        Self::check_writable(args, p, off, bytes.len())?;
        self.write_checked(p, off, bytes);
        Ok(())
    }

    /// Writes `rows` rows of `row` bytes each, row `i` from `data[i * row..]` to byte
    /// `off + i * pitch` of tensor `p`: [`Self::write`] row by row, with the whole span (first
    /// row's start to last row's end) checked once.
    pub fn write_rows(
        &mut self,
        args: &[Arg],
        p: ParamId,
        (off, pitch): (usize, usize),
        (rows, row): (usize, usize),
        data: &[u8],
    ) -> Result<(), SimFault> {
        let Some(span) = Self::rows_span((rows, row), pitch, data)? else {
            return Ok(());
        };
        Self::check_writable(args, p, off, span)?;
        for (i, bytes) in data.chunks_exact(row).take(rows).enumerate() {
            self.write_checked(p, off + i * pitch, bytes);
        }
        Ok(())
    }

    /// The bytes from the first row's start to the last row's end of `rows` rows of `row`
    /// bytes `pitch` apart (`usize::MAX` when that overflows: no tensor holds it), after
    /// checking `data` holds them; `None` for no byte.
    fn rows_span(
        (rows, row): (usize, usize),
        pitch: usize,
        data: &[u8],
    ) -> Result<Option<usize>, SimFault> {
        if rows == 0 || row == 0 {
            return Ok(None);
        }
        if data.len() < rows * row {
            return Err(SimFault::Internal("GM rows shorter than their data"));
        }
        Ok(Some(
            (rows - 1)
                .checked_mul(pitch)
                .and_then(|x| x.checked_add(row))
                .unwrap_or(usize::MAX),
        ))
    }

    /// `write(at, bytes)` for each of `rows` rows of `row` bytes of `data`, row `i` at byte
    /// `off + i * pitch`, after `check(off, span)` of the whole span (which must refuse a span
    /// whose end overflows); rows that follow each other without a gap (`pitch == row`) as one
    /// write.
    pub fn rows_each(
        (off, pitch): (usize, usize),
        (rows, row): (usize, usize),
        data: &[u8],
        check: impl FnOnce(usize, usize) -> Result<(), SimFault>,
        mut write: impl FnMut(usize, &[u8]) -> Result<(), SimFault>,
    ) -> Result<(), SimFault> {
        let Some(span) = Self::rows_span((rows, row), pitch, data)? else {
            return Ok(());
        };
        check(off, span)?;
        if pitch == row {
            return write(off, &data[..span]);
        }
        for (i, bytes) in data.chunks_exact(row).take(rows).enumerate() {
            write(off + i * pitch, bytes)?;
        }
        Ok(())
    }

    /// [`Self::write`] after its check.
    fn write_checked(&mut self, p: ParamId, off: usize, bytes: &[u8]) {
        let mut pos = 0;
        while pos < bytes.len() {
            let abs = off + pos;
            let (page, in_page) = (abs / PAGE, abs % PAGE);
            let n = (PAGE - in_page).min(bytes.len() - pos);
            // A page holds only this block's writes (its dirty bytes); the rest is unused.
            let spare = &mut self.spare;
            let pg = self
                .pages
                .entry((p.0, page))
                .or_insert_with(|| take_page(spare));
            pg.data[in_page..in_page + n].copy_from_slice(&bytes[pos..pos + n]);
            mark_dirty(&mut pg.dirty, in_page, in_page + n);
            pos += n;
        }
    }

    /// Records an atomic add of `bytes` (elements of `dtype`) at `off`, applied at merge.
    pub fn atomic_add(
        &mut self,
        args: &[Arg],
        p: ParamId,
        off: usize,
        dtype: DType,
        bytes: &[u8],
    ) -> Result<(), SimFault> {
        Self::check_writable(args, p, off, bytes.len())?;
        self.atomics.push(AtomicAdd {
            param: p.0,
            byte_off: off,
            dtype,
            bytes: bytes.to_vec(),
        });
        Ok(())
    }

    /// Gives the recycled pages this block did not use back to the shared pool at once (a
    /// finished block keeps its overlay until the launch merges, and idle spares held that long
    /// would empty the pool for the blocks still running).
    pub fn shed_spare(&mut self) {
        if self.spare.is_empty() {
            return;
        }
        if let Ok(mut pool) = PAGE_POOL.lock() {
            let room = POOL_PAGES.saturating_sub(pool.len());
            pool.extend(self.spare.drain(..).take(room));
        }
        self.spare.clear();
    }

    /// Applies this block's writes, then its atomic adds, to the arguments. `block` is this
    /// block's index and `direct` the launch's write-only outputs (written in place): a byte a
    /// later block wrote in place is not overwritten.
    pub fn merge_into(mut self, args: &mut [Arg], block: usize, direct: &[Lines]) {
        let mut pages = SORTED_PAGES.with(|s| std::mem::take(&mut *s.borrow_mut()));
        pages.extend(self.pages.drain());
        pages.sort_by_key(|(k, _)| *k);
        for ((param, page), pg) in &mut pages {
            let (param, page) = (*param, *page);
            if let Some(d) = direct.iter().find(|d| d.param.0 == param) {
                let first = page * PAGE / LINE;
                for (w, bits) in pg.dirty.iter_mut().enumerate() {
                    if *bits != 0 {
                        *bits &= !d.shadowed(first + w, block);
                    }
                }
            }
            let Some(data) = args.get_mut(param as usize).and_then(Arg::writable_bytes) else {
                continue;
            };
            let start = page * PAGE;
            let len = PAGE.min(data.len().saturating_sub(start));
            let mut w = 0;
            while w < pg.dirty.len() && w * 64 < len {
                let (lo, bits) = (w * 64, pg.dirty[w]);
                if bits == u64::MAX {
                    // A run of fully written words is one copy.
                    let run = pg.dirty[w..].iter().take_while(|b| **b == u64::MAX).count();
                    let hi = (lo + run * 64).min(len);
                    data[start + lo..start + hi].copy_from_slice(&pg.data[lo..hi]);
                    w += run;
                    continue;
                }
                if bits != 0 {
                    for i in lo..(lo + 64).min(len) {
                        if bits >> (i - lo) & 1 == 1 {
                            data[start + i] = pg.data[i];
                        }
                    }
                }
                w += 1;
            }
        }
        if let Ok(mut pool) = PAGE_POOL.lock() {
            let room = POOL_PAGES.saturating_sub(pool.len());
            pool.extend(pages.drain(..).map(|(_, pg)| pg).take(room));
            let room = POOL_PAGES.saturating_sub(pool.len());
            pool.extend(self.spare.drain(..).take(room));
        }
        pages.clear();
        SORTED_PAGES.with(|s| *s.borrow_mut() = pages);
        for a in self.atomics.drain(..) {
            let Some(data) = args.get_mut(a.param as usize).and_then(Arg::writable_bytes) else {
                continue;
            };
            let es = a.dtype.size_bytes() as usize;
            for (i, add) in a.bytes.chunks_exact(es).enumerate() {
                let o = a.byte_off + i * es;
                let cur = &mut data[o..o + es];
                if a.dtype.is_float() {
                    let v = numeric::decode_one(a.dtype, cur) + numeric::decode_one(a.dtype, add);
                    numeric::encode_one(a.dtype, v, cur);
                } else {
                    let v = numeric::decode_i64(a.dtype, cur)
                        .wrapping_add(numeric::decode_i64(a.dtype, add));
                    numeric::encode_i64(a.dtype, v, cur);
                }
            }
        }
        // The emptied containers serve the next block this thread runs.
        self.spare.clear();
        SPARE_OVERLAYS.with(|s| {
            let mut s = s.borrow_mut();
            if s.len() < SPARE_OVERLAYS_MAX {
                s.push(self);
            }
        });
    }

    /// An empty overlay, in the containers of one merged earlier on this thread (no allocation
    /// until it holds more pages than that one did).
    pub fn take() -> Overlay {
        SPARE_OVERLAYS
            .with(|s| s.borrow_mut().pop())
            .unwrap_or_default()
    }
}

thread_local! {
    /// Merged overlays' empty containers ([`Overlay::take`]).
    static SPARE_OVERLAYS: std::cell::RefCell<Vec<Overlay>> =
        const { std::cell::RefCell::new(Vec::new()) };
    /// The buffer [`Overlay::merge_into`] sorts a block's pages in.
    static SORTED_PAGES: std::cell::RefCell<Vec<((u32, usize), Page)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Most empty overlays a thread keeps.
const SPARE_OVERLAYS_MAX: usize = 8;

/// The tensor parameters of `kernel` that its ops only write, with plain stores: never read,
/// never added to atomically, never accessed as a scalar. What a block writes there cannot
/// change what any block computes, only the result.
pub(crate) fn write_only_params(kernel: &Kernel) -> Vec<ParamId> {
    let ops = kernel.ops();
    (0..kernel.params.len())
        .map(|i| ParamId(i as u32))
        .filter(|&p| matches!(kernel.params[p.0 as usize].kind, ParamKind::Tensor { .. }))
        .filter(|&p| {
            let uses = ops.iter().map(|(_, op)| op.gm_use(p));
            let mut stored = false;
            for u in uses {
                match u {
                    GmUse::None => {}
                    GmUse::PlainStore => stored = true,
                    GmUse::Other => return false,
                }
            }
            stored
        })
        .collect()
}

/// Bytes per line of a [`WriteOnly`] output (the unit its written-byte masks cover).
const LINE: usize = 64;

/// Lines per ownership unit of a [`WriteOnly`] output: a block takes a whole unit (1 KiB) with
/// one compare-exchange, instead of one per 64-byte line (a 2 MiB gather result took 32K of
/// them per launch).
const UNIT_LINES: usize = 16;

/// Bytes per ownership unit of a [`WriteOnly`] output.
const UNIT: usize = LINE * UNIT_LINES;

/// A write-only output (see [`write_only_params`]) that blocks write in place, from their own
/// threads, instead of through their overlays: a launch's result then needs no merge copy.
///
/// Each 1 KiB unit (16 lines of 64 bytes) belongs to the first block that writes it; that block
/// writes it in place and records, line by line, which of its bytes it wrote. A block writing a
/// unit another block owns writes those bytes into its overlay, and the merge (in block order) applies them unless the owner
/// is a later block that wrote the same byte: the result is exactly the overlay-only result,
/// each byte the last write in block order, whatever the threads' timing.
pub(crate) struct WriteOnly<'a> {
    /// Start of the argument's bytes, borrowed mutably for `'a` by the launch.
    ptr: *mut u8,
    /// Length of the argument's bytes.
    len: usize,
    /// Who owns each unit, and what its owner wrote.
    lines: Lines,
    /// The bytes were not initialised when lent ([`Self::new_uninit`]).
    uninit: bool,
    _borrow: std::marker::PhantomData<&'a mut [u8]>,
}

/// The lines of a [`WriteOnly`] output: who owns each (by unit of [`UNIT_LINES`] lines), what
/// its owner wrote in place. Kept after the blocks ran, for the merge of their overlays.
pub(crate) struct Lines {
    /// The parameter.
    param: ParamId,
    /// Per unit: 0 while no block wrote it, else 1 + the block that owns it.
    owner: Vec<AtomicU32>,
    /// Per line: the bytes its owner wrote (bit `i`: byte `i`); written by the owner only, and
    /// meaningful only for a line of an owned unit (the owner clears the unit's lines when it
    /// takes it, so the vector is reused between launches without being cleared).
    written: Vec<AtomicU64>,
}

/// The `owner` and `written` vectors of finished launches ([`Lines::recycle`]), for the next
/// ones: a 2 MiB result's 32K line masks were allocated and zeroed on every launch.
static SPARE_LINES: std::sync::Mutex<Vec<(Vec<AtomicU32>, Vec<AtomicU64>)>> =
    std::sync::Mutex::new(Vec::new());

/// Most vector pairs kept in [`SPARE_LINES`].
const SPARE_LINES_MAX: usize = 4;

// SAFETY: the raw pointer stands for the `&'a mut [u8]` the launch lends (`PhantomData` keeps
// that borrow alive and exclusive), and the launch swaps that argument out of what blocks see,
// so the bytes are reached only through this struct while it is shared. Through it, a byte is
// written only by the block owning its unit (ownership is taken with a compare-exchange, so
// exactly one block owns a unit, and a block runs on one thread at a time) and never read until
// the blocks have joined: no two threads ever access the same byte concurrently.
unsafe impl Sync for WriteOnly<'_> {}
// SAFETY: as for `Sync`: moving the struct to another thread moves only the lent borrow.
unsafe impl Send for WriteOnly<'_> {}

impl<'a> WriteOnly<'a> {
    /// Lends `data` (the bytes of parameter `param`) to the blocks.
    pub fn new(param: ParamId, data: &'a mut [u8]) -> Self {
        let spare = SPARE_LINES.lock().ok().and_then(|mut s| s.pop());
        Self::with_vectors(
            param,
            (data.as_mut_ptr(), data.len()),
            spare.unwrap_or_default(),
        )
    }

    /// Lends `data`, bytes not initialised yet (an [`crate::launch::GmOutput`]), to the blocks:
    /// they only ever write it (never read it), and [`Self::zero_unwritten`] initialises the
    /// rest after they ran.
    pub fn new_uninit(param: ParamId, data: &'a mut [std::mem::MaybeUninit<u8>]) -> Self {
        let spare = SPARE_LINES.lock().ok().and_then(|mut s| s.pop());
        // `MaybeUninit<u8>` has the layout of `u8`; through the pointer the blocks only write
        // bytes (`put`), never read them.
        let at = (data.as_mut_ptr().cast::<u8>(), data.len());
        WriteOnly {
            uninit: true,
            ..Self::with_vectors(param, at, spare.unwrap_or_default())
        }
    }

    /// Zero-fills every byte no block wrote in place (after the blocks ran): whole units no
    /// block took, and the bytes of taken units their owner did not write. With the blocks'
    /// in-place writes, every byte of the argument is then initialised; the overlays' writes
    /// are merged on top afterwards, as for an initialised output.
    fn zero_unwritten(&mut self) {
        let zero = |at: usize, n: usize| {
            debug_assert!(at + n <= self.len);
            // SAFETY: `at + n <= self.len`, inside the lent bytes; the blocks have joined (this
            // takes `&mut self`), so nothing else accesses them.
            unsafe { std::ptr::write_bytes(self.ptr.add(at), 0, n) };
        };
        let Lines { owner, written, .. } = &mut self.lines;
        for (u, o) in owner.iter_mut().enumerate() {
            let (lo, hi) = (u * UNIT, ((u + 1) * UNIT).min(self.len));
            if *o.get_mut() == 0 {
                zero(lo, hi - lo);
                continue;
            }
            let words = written
                .get_mut(lo / LINE..hi.div_ceil(LINE))
                .unwrap_or_default();
            // A whole unit written (the usual case) in one pass of plain loads.
            if hi - lo == UNIT
                && words.iter_mut().fold(u64::MAX, |a, w| a & *w.get_mut()) == u64::MAX
            {
                continue;
            }
            for (k, w) in words.iter_mut().enumerate() {
                let (bits, l) = (*w.get_mut(), lo / LINE + k);
                let (l0, l1) = (l * LINE, ((l + 1) * LINE).min(self.len));
                if bits == u64::MAX || l0 >= l1 {
                    continue;
                }
                if bits == 0 {
                    zero(l0, l1 - l0);
                    continue;
                }
                for i in 0..l1 - l0 {
                    if bits >> i & 1 == 0 {
                        zero(l0 + i, 1);
                    }
                }
            }
        }
    }

    /// [`Self::new`] of the `len` bytes at `ptr` (borrowed mutably for `'a` by the caller),
    /// reusing `owner` and `written` vectors of an earlier launch (whatever they hold).
    fn with_vectors(
        param: ParamId,
        (ptr, len): (*mut u8, usize),
        (mut owner, mut written): (Vec<AtomicU32>, Vec<AtomicU64>),
    ) -> Self {
        let (units, lines) = (len.div_ceil(UNIT), len.div_ceil(LINE));
        // Every unit starts unowned; the line masks are cleared by a unit's owner when it takes
        // the unit ([`Self::claim`]), so stale masks are never read.
        owner.clear();
        owner.resize_with(units, || AtomicU32::new(0));
        written.truncate(lines);
        written.resize_with(lines, || AtomicU64::new(0));
        WriteOnly {
            ptr,
            len,
            uninit: false,
            lines: Lines {
                param,
                owner,
                written,
            },
            _borrow: std::marker::PhantomData,
        }
    }

    /// Ends the loan (after the blocks ran): what the merge needs to know of the lines. An
    /// uninitialised output ([`Self::new_uninit`]) has its unwritten bytes zero-filled first, so
    /// every byte of it is initialised from here on.
    pub fn into_lines(mut self) -> Lines {
        if self.uninit {
            self.zero_unwritten();
        }
        self.lines
    }

    /// The parameter.
    pub fn param(&self) -> ParamId {
        self.lines.param
    }

    /// Bytes of the argument.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Checks that bytes `off .. off + len` are inside the argument (a store checks its whole
    /// span first, so a store that does not fit writes nothing).
    pub fn check(&self, off: usize, len: usize) -> Result<(), SimFault> {
        if off.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(out_of_bounds(self.lines.param, off, len, self.len));
        }
        Ok(())
    }

    /// Whether `block` owns unit `u`, taking it if no block does.
    #[inline]
    fn claim(&self, u: usize, me: u32) -> bool {
        let o = &self.lines.owner[u];
        match o.load(Ordering::Relaxed) {
            0 => match o.compare_exchange(0, me, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => {
                    // The new owner clears its unit's line masks (left from an earlier launch)
                    // before its first write; only it writes them, and they are read after the
                    // blocks have joined.
                    let l0 = u * UNIT_LINES;
                    let l1 = (l0 + UNIT_LINES).min(self.lines.written.len());
                    for w in self.lines.written.get(l0..l1).unwrap_or(&[]) {
                        w.store(0, Ordering::Relaxed);
                    }
                    true
                }
                Err(now) => now == me,
            },
            now => now == me,
        }
    }

    /// Copies `bytes` to byte `off` in place (the caller owns every unit they touch).
    fn put(&self, off: usize, bytes: &[u8]) {
        debug_assert!(off + bytes.len() <= self.len);
        // SAFETY: `off + bytes.len() <= self.len` (checked by `write`), so the destination is
        // inside the lent bytes; the calling block owns every unit of it (see the `Sync`
        // impl), so no other thread touches these bytes; `bytes` is a separate borrow (block
        // memory or a scratch buffer), so the ranges do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.add(off), bytes.len());
        }
        if bytes.is_empty() {
            return;
        }
        let end = off + bytes.len();
        let (l0, l1) = (off / LINE, (end - 1) / LINE);
        // Only the owner writes its lines' bits (a load and a store, no read-modify-write).
        let mark = |l: usize, bits: u64| {
            let w = &self.lines.written[l];
            w.store(w.load(Ordering::Relaxed) | bits, Ordering::Relaxed);
        };
        // Bits `lo .. hi` of a line (`lo < hi <= LINE`).
        let span = |lo: usize, hi: usize| (u64::MAX >> (LINE - (hi - lo))) << lo;
        if l0 == l1 {
            mark(l0, span(off - l0 * LINE, end - l0 * LINE));
            return;
        }
        mark(l0, span(off - l0 * LINE, LINE));
        // Whole lines between: all their bits, without reading the old ones.
        for w in &self.lines.written[l0 + 1..l1] {
            w.store(u64::MAX, Ordering::Relaxed);
        }
        mark(l1, span(0, end - l1 * LINE));
    }

    /// Block `block` writes `bytes` at byte `off`: in place where it owns the units (or takes
    /// them now), else into its `overlay`.
    pub fn write(
        &self,
        block: usize,
        overlay: &mut Overlay,
        off: usize,
        bytes: &[u8],
    ) -> Result<(), SimFault> {
        self.check(off, bytes.len())?;
        if bytes.is_empty() {
            return Ok(());
        }
        let me = u32::try_from(block).map_or(u32::MAX, |b| b.saturating_add(1));
        let end = off + bytes.len();
        // Runs of consecutive units, in place or not, each moved at once.
        let mut run = (off, self.claim(off / UNIT, me));
        let mut at = (off / UNIT + 1) * UNIT;
        while at < end {
            let mine = self.claim(at / UNIT, me);
            if mine != run.1 {
                self.flush(overlay, (run.0, at), run.1, &bytes[run.0 - off..at - off]);
                run = (at, mine);
            }
            at += UNIT;
        }
        self.flush(overlay, (run.0, end), run.1, &bytes[run.0 - off..]);
        Ok(())
    }

    fn flush(&self, overlay: &mut Overlay, (lo, _hi): (usize, usize), mine: bool, bytes: &[u8]) {
        if mine {
            self.put(lo, bytes);
        } else {
            overlay.write_checked(self.lines.param, lo, bytes);
        }
    }
}

impl Lines {
    /// Keeps this output's vectors for the next launch's [`WriteOnly::new`] (after the merge).
    pub fn recycle(self) {
        if let Ok(mut s) = SPARE_LINES.lock() {
            if s.len() < SPARE_LINES_MAX {
                s.push((self.owner, self.written));
            }
        }
    }

    /// The bits of line `l`'s bytes that block `block`'s overlay must not apply at merge: those
    /// a later block wrote in place.
    fn shadowed(&self, l: usize, block: usize) -> u64 {
        let (Some(o), Some(w)) = (self.owner.get(l / UNIT_LINES), self.written.get(l)) else {
            return 0;
        };
        match o.load(Ordering::Relaxed) {
            0 => 0,
            o if (o - 1) as usize > block => w.load(Ordering::Relaxed),
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launch::{GmInOut, GmTensor};

    #[test]
    fn dirty_bits_are_set_for_exactly_the_written_bytes() {
        for lo in (0..PAGE).step_by(37).chain([0, 63, 64, 65, PAGE - 1]) {
            for hi in [lo, lo + 1, lo + 63, lo + 64, lo + 65, lo + 200, PAGE] {
                let hi = hi.min(PAGE);
                let mut dirty = vec![0u64; PAGE / 64];
                mark_dirty(&mut dirty, lo, hi);
                for i in 0..PAGE {
                    let set = dirty[i / 64] >> (i % 64) & 1 == 1;
                    assert_eq!(set, (lo..hi).contains(&i), "byte {i} of [{lo}, {hi})");
                }
            }
        }
    }

    /// Line masks left by an earlier launch (here all set) do not shadow an earlier block's
    /// writes: the unit's owner clears them when it takes the unit.
    #[test]
    fn reused_line_masks_are_cleared_by_the_unit_owner() {
        let n = 3 * UNIT + 100;
        let mut data = vec![0xaau8; n];
        let mut args = [Arg::InOut(GmInOut {
            dtype: DType::U8,
            shape: vec![n],
            data: &mut [],
        })];
        let stale = (
            (0..8).map(|_| AtomicU32::new(7)).collect(),
            (0..n.div_ceil(LINE) + 5)
                .map(|_| AtomicU64::new(u64::MAX))
                .collect(),
        );
        let lines = {
            let d = WriteOnly::with_vectors(ParamId(0), (data.as_mut_ptr(), n), stale);
            let (mut o0, mut o1) = (Overlay::default(), Overlay::default());
            // Block 1 takes unit 1 with one byte; block 0 then writes all of unit 1 (through
            // its overlay) and all of unit 0 (in place).
            d.write(1, &mut o1, UNIT + 5, &[1]).expect("in range");
            d.write(0, &mut o0, 0, &vec![2u8; 2 * UNIT])
                .expect("in range");
            let lines = d.into_lines();
            args[0] = Arg::InOut(GmInOut {
                dtype: DType::U8,
                shape: vec![n],
                data: &mut data,
            });
            o0.merge_into(&mut args, 0, std::slice::from_ref(&lines));
            o1.merge_into(&mut args, 1, std::slice::from_ref(&lines));
            lines
        };
        let mut want = vec![0xaau8; n];
        want[..2 * UNIT].fill(2);
        want[UNIT + 5] = 1;
        assert_eq!(data, want);
        lines.recycle();
    }

    #[test]
    fn a_merge_applies_exactly_the_bytes_written_in_runs_and_pieces() {
        let t = GmTensor::from_i64(DType::I32, &[4096], &vec![-1; 4096]);
        let mut args = [Arg::Tensor(t)];
        let mut gm = Overlay::default();
        // A long run across a page boundary, a partial word, and a single byte.
        let run: Vec<u8> = (0..6000).map(|i| (i % 251) as u8).collect();
        gm.write(&args, ParamId(0), 1000, &run).expect("in range");
        gm.write(&args, ParamId(0), 9000, &[7, 8, 9])
            .expect("in range");
        gm.write(&args, ParamId(0), 16383, &[5]).expect("in range");
        let mut want = vec![0xffu8; 16384];
        want[1000..7000].copy_from_slice(&run);
        want[9000..9003].copy_from_slice(&[7, 8, 9]);
        want[16383] = 5;
        gm.merge_into(&mut args, 0, &[]);
        assert_eq!(args[0].as_gm().map(|g| g.data), Some(&want[..]));
    }

    #[test]
    fn a_prefetch_is_only_a_hint_and_ignores_what_is_out_of_range() {
        let t = GmTensor::from_f32(DType::F32, &[4, 4], &[1.5; 16]);
        let args = [Arg::Input(t.as_input()), Arg::Int(3)];
        let gm = Overlay::default();
        // In range, straddling the end, past it, overflowing, and not a tensor at all.
        gm.prefetch(&args, ParamId(0), 0, 64);
        gm.prefetch(&args, ParamId(0), 60, 64);
        gm.prefetch(&args, ParamId(0), 1 << 20, 64);
        gm.prefetch(&args, ParamId(0), usize::MAX, 2);
        gm.prefetch(&args, ParamId(1), 0, 64);
        gm.prefetch(&args, ParamId(7), 0, 64);
        // The data reads the same afterwards.
        let mut out = [0u8; 64];
        gm.read(&args, ParamId(0), 0, &mut out).expect("in range");
        assert_eq!(&out[..], &t.data[..]);
    }

    #[test]
    fn argument_bytes_are_the_inputs_own_and_none_outside_the_tensor() {
        let t = GmTensor::from_f32(DType::F32, &[4, 4], &[2.5; 16]);
        let args = [Arg::Input(t.as_input()), Arg::Int(3)];
        let bytes = Overlay::argument_bytes(&args, ParamId(0), 8, 16).expect("in range");
        assert_eq!(bytes, &t.data[8..24]);
        assert!(Overlay::argument_bytes(&args, ParamId(0), 60, 8).is_none());
        assert!(Overlay::argument_bytes(&args, ParamId(0), usize::MAX, 2).is_none());
        assert!(Overlay::argument_bytes(&args, ParamId(1), 0, 4).is_none());
    }

    #[test]
    fn unwritten_bytes_are_borrowed_only_where_the_block_wrote_no_page() {
        // 4 pages of f32 (4 KiB each); the block writes one element of page 2 of `out`.
        let n = 4 * PAGE / 4;
        let x = GmTensor::from_f32(DType::F32, &[1, n], &vec![1.0; n]);
        let out = GmTensor::from_f32(DType::F32, &[1, n], &vec![0.0; n]);
        let args = [Arg::Input(x.as_input()), Arg::Tensor(out)];
        let mut gm = Overlay::default();
        let all = gm
            .unwritten(&args, ParamId(1), 0, 4 * PAGE)
            .expect("in range");
        assert_eq!(all.map(<[u8]>::len), Some(4 * PAGE), "nothing written yet");
        gm.write(&args, ParamId(1), 2 * PAGE + 8, &[7; 4])
            .expect("write");
        // A range over the written page (few pages written: the map is scanned; many pages in
        // the range or not, both ways of looking) is refused; others, and `x`, are borrowed.
        for (off, len) in [
            (0, 4 * PAGE),
            (2 * PAGE, 16),
            (PAGE, 2 * PAGE),
            (2 * PAGE + 100, 1),
        ] {
            let r = gm.unwritten(&args, ParamId(1), off, len).expect("in range");
            assert!(r.is_none(), "{off} + {len} overlaps the written page");
        }
        for (off, len) in [(0, 2 * PAGE), (3 * PAGE, PAGE), (0, 0)] {
            let r = gm.unwritten(&args, ParamId(1), off, len).expect("in range");
            assert_eq!(r.map(<[u8]>::len), Some(len), "{off} + {len}");
        }
        let xs = gm
            .unwritten(&args, ParamId(0), 0, 4 * PAGE)
            .expect("in range");
        assert_eq!(xs, Some(&x.data[..]));
        // Many pages written, a short range: looked up page by page.
        for pg in [0, 1, 3] {
            gm.write(&args, ParamId(1), pg * PAGE, &[1; 4])
                .expect("write");
        }
        assert!(gm
            .unwritten(&args, ParamId(1), 3 * PAGE + 4, 8)
            .expect("in range")
            .is_none());
        assert!(gm.unwritten(&args, ParamId(1), 4 * PAGE - 4, 8).is_err());
        assert!(gm.unwritten(&args, ParamId(2), 0, 4).is_err());
        // What a read sees there is the written bytes (the caller's fallback).
        let mut b = [0u8; 4];
        gm.read(&args, ParamId(1), 2 * PAGE + 8, &mut b)
            .expect("read");
        assert_eq!(b, [7; 4]);
    }

    /// Blocks `0..n` writing `writes[b]` (offset, bytes) in place into a write-only output of
    /// `len` bytes (all 0xff before), in the thread order `order`, then merged in block order.
    fn write_only_run(len: usize, writes: &[Vec<(usize, Vec<u8>)>], order: &[usize]) -> Vec<u8> {
        let mut out = vec![0xffu8; len];
        let mut overlays: Vec<Overlay> = writes.iter().map(|_| Overlay::default()).collect();
        let lines = {
            let direct = WriteOnly::new(ParamId(0), &mut out);
            write_blocks(&direct, &mut overlays, writes, order);
            direct.into_lines()
        };
        merge_all(&mut out, overlays, &lines);
        out
    }

    /// [`write_only_run`] into bytes lent uninitialised ([`WriteOnly::new_uninit`]; here they
    /// hold 0x5a, as stale memory would).
    fn uninit_run(len: usize, writes: &[Vec<(usize, Vec<u8>)>], order: &[usize]) -> Vec<u8> {
        let mut raw = vec![std::mem::MaybeUninit::new(0x5au8); len];
        let mut overlays: Vec<Overlay> = writes.iter().map(|_| Overlay::default()).collect();
        let lines = {
            let direct = WriteOnly::new_uninit(ParamId(0), &mut raw);
            write_blocks(&direct, &mut overlays, writes, order);
            direct.into_lines()
        };
        // SAFETY: every byte was initialised here (`MaybeUninit::new`); what is checked is
        // that `into_lines` zero-filled those no block wrote in place.
        let mut out: Vec<u8> = raw.iter().map(|b| unsafe { b.assume_init() }).collect();
        merge_all(&mut out, overlays, &lines);
        out
    }

    /// Block `b` writes `writes[b]` through `direct`, blocks taken in `order`.
    fn write_blocks(
        direct: &WriteOnly<'_>,
        overlays: &mut [Overlay],
        writes: &[Vec<(usize, Vec<u8>)>],
        order: &[usize],
    ) {
        let len = direct.len();
        for &b in order {
            for (off, bytes) in &writes[b] {
                direct
                    .write(b, &mut overlays[b], *off, bytes)
                    .expect("in range");
            }
        }
        assert!(direct.write(0, &mut overlays[0], len - 1, &[1, 2]).is_err());
    }

    /// Merges `overlays` into `out` in block order.
    fn merge_all(out: &mut [u8], overlays: Vec<Overlay>, lines: &Lines) {
        let mut args = [Arg::InOut(crate::launch::GmInOut {
            dtype: DType::U8,
            shape: vec![out.len()],
            data: out,
        })];
        for (b, gm) in overlays.into_iter().enumerate() {
            gm.merge_into(&mut args, b, std::slice::from_ref(lines));
        }
    }

    /// The line masks of an in-place write cover exactly its bytes: whatever the write's start
    /// and length (inside one line, up to a line edge, across whole lines), the bytes outside
    /// it are the zero-fill of an uninitialised output and the bytes inside it stay written.
    #[test]
    fn in_place_writes_mark_exactly_their_bytes() {
        let len = 2 * UNIT;
        for off in [0, 1, 31, 63, 64, 65, 127, 500, UNIT - 1] {
            for n in [1, 2, 62, 63, 64, 65, 127, 128, 129, 700, UNIT] {
                let n = n.min(len - off);
                let bytes: Vec<u8> = (0..n).map(|i| 1 + (i % 200) as u8).collect();
                let out = uninit_run(len, &[vec![(off, bytes.clone())]], &[0]);
                let mut want = vec![0u8; len];
                want[off..off + n].copy_from_slice(&bytes);
                assert!(out == want, "write of {n} B at {off}");
            }
        }
    }

    #[test]
    fn write_only_outputs_end_as_the_overlay_merge_in_block_order_whatever_the_thread_order() {
        // Three blocks writing overlapping, unaligned ranges (sharing lines, and bytes).
        let len = 3 * PAGE;
        let fill =
            |b: u8, n: usize| -> Vec<u8> { (0..n).map(|i| b * 50 + (i % 37) as u8).collect() };
        let writes = vec![
            vec![(10, fill(0, 300)), (5000, fill(0, 64)), (8000, fill(0, 10))],
            vec![
                (200, fill(1, 100)),
                (4990, fill(1, 40)),
                (8005, fill(1, 1)),
                // Across a unit boundary, into a unit block 2 takes from the other side.
                (UNIT - 30, fill(1, 60)),
            ],
            vec![
                (0, fill(2, 20)),
                (250, fill(2, 3)),
                (9000, fill(2, 3000)),
                (UNIT + 10, fill(2, 40)),
            ],
        ];
        // What plain overlays merged in block order give: each byte's last write.
        let mut want = vec![0xffu8; len];
        for w in &writes {
            for (off, bytes) in w {
                want[*off..*off + bytes.len()].copy_from_slice(bytes);
            }
        }
        // Lent uninitialised, the bytes no block writes end zero (as in a zero-filled output).
        let mut want_uninit = vec![0u8; len];
        for w in &writes {
            for (off, bytes) in w {
                want_uninit[*off..*off + bytes.len()].copy_from_slice(bytes);
            }
        }
        for order in [[0, 1, 2], [2, 1, 0], [1, 2, 0], [2, 0, 1]] {
            assert_eq!(
                write_only_run(len, &writes, &order),
                want,
                "order {order:?}"
            );
            assert_eq!(
                uninit_run(len, &writes, &order),
                want_uninit,
                "uninitialised, order {order:?}"
            );
        }
        // A length that ends inside a line, a unit taken whole, and units no block takes.
        let whole = vec![
            vec![(UNIT, fill(0, UNIT))],
            vec![(3 * UNIT + 7, fill(1, 9))],
        ];
        let len = 5 * UNIT + 21;
        let mut want = vec![0u8; len];
        want[UNIT..2 * UNIT].copy_from_slice(&whole[0][0].1);
        want[3 * UNIT + 7..3 * UNIT + 16].copy_from_slice(&whole[1][0].1);
        assert_eq!(uninit_run(len, &whole, &[1, 0]), want);
    }

    #[test]
    fn a_kernel_parameter_is_write_only_when_only_plain_stores_name_it() {
        use crate::dsl::KernelBuilder;
        use crate::ir::{GmView, Layout, MemSpace, TileType};
        let build = |atomic: bool, read_back: bool| {
            let mut kb = KernelBuilder::new("k");
            let x = kb.input("x", DType::F32, [Expr::from(1), Expr::from(8)]);
            let y = kb.output("y", DType::F32, [Expr::from(1), Expr::from(8)]);
            let t = kb.tile(
                "t",
                TileType::new(MemSpace::Vec, DType::F32, 1, 8, Layout::ND),
            );
            kb.vector(|v| {
                v.load(t, GmView::nd(x, 0, 1, 8, 8));
                let s = v.store(GmView::nd(y, 0, 1, 8, 8), t);
                if atomic {
                    s.atomic_add();
                }
                if read_back {
                    v.load(t, GmView::nd(y, 0, 1, 8, 8));
                }
            });
            kb.build()
        };
        assert_eq!(write_only_params(&build(false, false)), vec![ParamId(1)]);
        assert!(write_only_params(&build(true, false)).is_empty());
        assert!(write_only_params(&build(false, true)).is_empty());
    }

    #[test]
    fn the_prefetch_queue_walks_its_rows_line_by_line_then_stops() {
        let data = [0u8; 300];
        let mut q = PrefetchQueue::default();
        // Rows of 130 bytes (3 lines: 0, 64, 128), 64 bytes (1 line) and 1 byte (1 line).
        q.replace([&data[0..130], &data[130..194], &data[299..300]]);
        q.hint_lines(2);
        assert_eq!(q.at, (0, 128));
        q.hint_lines(1);
        assert_eq!(q.at, (1, 0));
        q.hint_lines(1);
        assert_eq!(q.at, (2, 0));
        q.hint_lines(10);
        assert_eq!(q.at, (3, 0));
        q.hint_lines(10);
        assert_eq!(q.at, (3, 0), "an exhausted queue stays exhausted");
        q.replace([&data[..]]);
        assert_eq!(q.at, (0, 0), "replacing restarts the walk");
        q.hint_lines(4);
        assert_eq!(q.at, (0, 256));
        q.replace([]);
        q.hint_lines(3);
        assert_eq!(q.at, (0, 0), "an empty queue hints nothing");
    }
}
