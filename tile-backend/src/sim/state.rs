//! Per-block machine state: on-chip buffers of the AIC and both AIVs, cross-core flags.

use crate::arch::Arch;
use crate::ir::{MemSpace, TileType};
use crate::sim::tile::{self, TileLoc};
use crate::sim::SimFault;
use std::cell::Cell;
use std::collections::VecDeque;
use std::fmt;

/// Byte a new set of on-chip buffers starts with: an all-ones pattern (NaN for floats, -1 for
/// signed integers), so that padding a kernel forgot to fill does not pass as zero (its written
/// bits are clear, so reading it is poison anyway; see [`BlockMem`]).
pub(crate) const FRESH_BYTE: u8 = 0xff;

/// A core of the cluster: the cube core or vector core 0/1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CoreId {
    /// The cube core.
    Aic,
    /// Vector core 0 or 1.
    Aiv(u8),
}

impl CoreId {
    /// The three cores of a cluster, in trace order.
    pub const ALL: [CoreId; 3] = [CoreId::Aic, CoreId::Aiv(0), CoreId::Aiv(1)];

    /// `AIC`, `AIV0` or `AIV1`.
    pub fn name(self) -> &'static str {
        match self {
            CoreId::Aic => "AIC",
            CoreId::Aiv(k) if k & 1 == 0 => "AIV0",
            CoreId::Aiv(_) => "AIV1",
        }
    }
}

impl fmt::Display for CoreId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The buffers of one cluster, each with a shadow bit per byte: set once the byte was written
/// with a defined value (never-written bytes are poison).
///
/// A block's buffers are recycled for the next block run on the same thread ([`BlockMem::take`] /
/// [`BlockMem::give_back`]): only the written bits of the byte extent a block wrote are cleared
/// (an eighth of those bytes), so every byte of the next block starts as poison; the bytes
/// themselves keep what the previous block left, as on the machine (a new set starts filled
/// with [`FRESH_BYTE`]). No value of a poison byte reaches a result: every read of a region
/// checks its written bits first and either fails or carries the poison along
/// (docs/simulator.md, "Poison").
pub(crate) struct BlockMem {
    /// Buffers indexed like [`BlockMem::slot`]: six cube spaces, then the two UBs.
    bufs: [Vec<u8>; 8],
    /// Written bits, indexed like `bufs`.
    init: [Vec<u64>; 8],
    /// A byte span `[lo, hi)` of each buffer known to be all written (found so by
    /// [`BlockMem::defined`]), so that the same tile checked again and again (Q's slices, the
    /// Acc) is not scanned each time; emptied when a byte of the buffer is marked poison or the
    /// buffer is reset. (Written bits are otherwise only ever set.)
    known: [Cell<(usize, usize)>; 8],
    /// Byte extent `[lo, hi)` of each buffer written since it was fresh (`lo >= hi`: none).
    dirty: [(usize, usize); 8],
    /// L1 -> L0A/L0B moves whose bytes are not copied yet ([`BlockMem::defer_move`]).
    deferred: Vec<DeferredMove>,
    /// Decoded L1 regions kept while their bytes are unchanged ([`BlockMem::keep_decoded`]).
    decoded: Vec<Decoded>,
    /// Byte buffers of dropped snapshots ([`DeferredMove::snapshot`]), for the next ones.
    spare_snapshots: Vec<Vec<u8>>,
    /// Value buffers of dropped decoded regions, for the AIC's scratch pool
    /// ([`BlockMem::take_dropped_decoded`]).
    dropped_decoded: Vec<Vec<f32>>,
}

/// Most decoded L1 regions a block keeps (the oldest is dropped first).
const DECODED_MAX: usize = 16;

/// A region of an L1 tile decoded to row-major f32, valid while its bytes are unchanged.
#[derive(Debug)]
struct Decoded {
    ty: TileType,
    addr: usize,
    at: (usize, usize),
    size: (usize, usize),
    /// Byte span `[lo, hi)` of the region in L1.
    span: (usize, usize),
    vals: Vec<f32>,
}

/// An L1 -> L0A/L0B move whose bytes are not copied yet: its destination region reads as its
/// source region until the copy is made ([`BlockMem::defer_move`]).
#[derive(Debug, Clone)]
pub(crate) struct DeferredMove {
    /// The source (Mat) tile's type, address and the region's first element.
    pub src: (TileType, usize, (usize, usize)),
    /// The destination (Left/Right) tile's type, address and the region's first element.
    pub dst: (TileType, usize, (usize, usize)),
    /// Rows and columns of the region.
    pub size: (usize, usize),
    /// Byte spans `[lo, hi)` the region covers in the source and destination buffers.
    pub src_span: (usize, usize),
    pub dst_span: (usize, usize),
    /// The source region's bytes, kept when L1 was about to be overwritten under the pending
    /// copy ([`BlockMem::touch`]): then `src` describes a compact tile of the source's layout
    /// at address 0 of these bytes, and `src_span` is empty.
    pub snapshot: Option<Vec<u8>>,
}

/// Whether byte span `[span.0, span.1)` meets `[lo, hi)`.
fn spans_overlap(span: (usize, usize), lo: usize, hi: usize) -> bool {
    span.0 < hi && lo < span.1
}

impl DeferredMove {
    /// Whether this move's destination region holds all of `other`'s (same tile).
    fn covers(&self, other: &DeferredMove) -> bool {
        let ((t, a, (r0, c0)), (ot, oa, (or0, oc0))) = (&self.dst, &other.dst);
        t == ot
            && a == oa
            && *r0 <= *or0
            && *c0 <= *oc0
            && or0 + other.size.0 <= r0 + self.size.0
            && oc0 + other.size.1 <= c0 + self.size.1
    }
}

/// Spaces of the buffers, in slot order.
const SLOT_SPACES: [MemSpace; 8] = [
    MemSpace::Mat,
    MemSpace::Left,
    MemSpace::Right,
    MemSpace::Acc,
    MemSpace::Bias,
    MemSpace::Scaling,
    MemSpace::Vec,
    MemSpace::Vec,
];

thread_local! {
    /// Fresh block buffers kept by this thread between blocks (and runs).
    static SPARE: std::cell::RefCell<Vec<BlockMem>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn capacities(arch: &Arch) -> [usize; 8] {
    SLOT_SPACES.map(|s| arch.space(s).map(|s| s.capacity as usize).unwrap_or(0))
}

impl BlockMem {
    pub fn new(arch: &Arch) -> Self {
        let cap = capacities(arch);
        BlockMem {
            bufs: cap.map(|n| vec![FRESH_BYTE; n]),
            init: cap.map(|n| vec![0u64; n.div_ceil(64)]),
            known: Default::default(),
            dirty: [(usize::MAX, 0); 8],
            deferred: Vec::new(),
            decoded: Vec::new(),
            spare_snapshots: Vec::new(),
            dropped_decoded: Vec::new(),
        }
    }

    /// Fresh buffers for `arch`: a spare set this thread gave back, or new ones.
    pub fn take(arch: &Arch) -> Self {
        let cap = capacities(arch);
        let fits = |m: &BlockMem| m.bufs.iter().zip(&cap).all(|(b, n)| b.len() == *n);
        let spare = SPARE.with(|s| {
            let mut s = s.borrow_mut();
            let i = s.iter().position(fits)?;
            Some(s.swap_remove(i))
        });
        spare.unwrap_or_else(|| BlockMem::new(arch))
    }

    /// Marks the written extents poison again and keeps the buffers for the next block this
    /// thread runs (their bytes are left as they are: see [`BlockMem`]).
    pub fn give_back(mut self) {
        // A block's L0 contents are never read after it ends: pending copies are dropped, and
        // so are decoded L1 regions.
        for m in self.deferred.drain(..) {
            if let Some(b) = m.snapshot {
                Self::keep_spare(&mut self.spare_snapshots, b);
            }
        }
        for d in self.decoded.drain(..) {
            Self::keep_dropped(&mut self.dropped_decoded, d.vals);
        }
        for i in 0..8 {
            let (lo, hi) = self.dirty[i];
            if lo >= hi {
                continue;
            }
            let hi = hi.min(self.bufs[i].len());
            let lo = lo.min(hi);
            let bits = &mut self.init[i];
            let whi = hi.div_ceil(64).min(bits.len());
            bits[(lo / 64).min(whi)..whi].fill(0);
            self.known[i].set((0, 0));
            self.dirty[i] = (usize::MAX, 0);
        }
        SPARE.with(|s| {
            let mut s = s.borrow_mut();
            if s.len() < 2 {
                s.push(self);
            }
        });
    }

    fn slot(space: MemSpace, aiv: u8) -> Option<usize> {
        Some(match space {
            MemSpace::Mat => 0,
            MemSpace::Left => 1,
            MemSpace::Right => 2,
            MemSpace::Acc => 3,
            MemSpace::Bias => 4,
            MemSpace::Scaling => 5,
            MemSpace::Vec => 6 + (aiv as usize & 1),
            _ => return None,
        })
    }

    fn slot_of(space: MemSpace, aiv: u8) -> Result<usize, SimFault> {
        // A match, not `ok_or`: that would build the fault, and drop it, on every lookup.
        match Self::slot(space, aiv) {
            Some(i) => Ok(i),
            None => Err(SimFault::Internal("a tile outside the on-chip buffers")),
        }
    }

    /// Notes that bytes `[lo, hi)` of a buffer may change (data or written bits); call before
    /// writing them.
    pub fn touch(&mut self, space: MemSpace, aiv: u8, lo: usize, hi: usize) {
        if space == MemSpace::Mat && !self.decoded.is_empty() {
            let mut i = 0;
            while i < self.decoded.len() {
                if spans_overlap(self.decoded[i].span, lo, hi) {
                    let d = self.decoded.remove(i);
                    Self::keep_dropped(&mut self.dropped_decoded, d.vals);
                } else {
                    i += 1;
                }
            }
        }
        if !self.deferred.is_empty() {
            if space == MemSpace::Mat {
                // A pending copy reading these bytes keeps them aside: its destination is
                // usually overwritten by the next move before anything reads it (the next
                // chunk's operand slices), and a same-layout copy costs less than the move's.
                self.snapshot_sources(lo, hi);
            } else {
                // A pending copy landing on these bytes is made first.
                self.settle(|m| m.dst.0.space == space && spans_overlap(m.dst_span, lo, hi));
            }
        }
        if let Some(i) = Self::slot(space, aiv) {
            let d = &mut self.dirty[i];
            d.0 = d.0.min(lo);
            d.1 = d.1.max(hi);
        }
    }

    /// Marks `len` bytes at `start` of a buffer as written (`defined`) or poison.
    pub fn mark(&mut self, space: MemSpace, aiv: u8, start: usize, len: usize, defined: bool) {
        if let Some(i) = Self::slot(space, aiv) {
            mark_bits(&mut self.init[i], start, len, defined);
            if !defined {
                self.known[i].set((0, 0));
            }
        }
    }

    /// True when every one of `len` bytes at `start` was written.
    pub fn defined(&self, space: MemSpace, aiv: u8, start: usize, len: usize) -> bool {
        let Some(i) = Self::slot(space, aiv) else {
            return true;
        };
        let bits = &self.init[i];
        let end = start + len;
        if end > bits.len() * 64 {
            return false;
        }
        if len == 0 {
            return true;
        }
        let (lo, hi) = self.known[i].get();
        if start >= lo && end <= hi {
            return true;
        }
        let all = all_set(bits, start, end);
        if all {
            // Grow the known span when this one meets it, else keep the longer of the two.
            if start <= hi && end >= lo {
                self.known[i].set((start.min(lo), end.max(hi)));
            } else if len > hi.saturating_sub(lo) {
                self.known[i].set((start, end));
            }
        }
        all
    }
}

/// True when bits `start .. end` of `bits` are all set (`start < end <= 64 * bits.len()`).
fn all_set(bits: &[u64], start: usize, end: usize) -> bool {
    // A partial first word, whole words (compared in bulk), a partial last word.
    let word_mask = |w: usize| {
        let lo = (w * 64).max(start) - w * 64;
        let hi = ((w + 1) * 64).min(end) - w * 64;
        if hi - lo == 64 {
            u64::MAX
        } else {
            ((1u64 << (hi - lo)) - 1) << lo
        }
    };
    let (w0, w1) = (start / 64, (end - 1) / 64);
    let m0 = word_mask(w0);
    if bits[w0] & m0 != m0 {
        return false;
    }
    if w1 == w0 {
        return true;
    }
    let m1 = word_mask(w1);
    // Whole words eight at a time (an AND that vectorises), then the rest.
    let mid = &bits[w0 + 1..w1];
    let mut eights = mid.chunks_exact(8);
    bits[w1] & m1 == m1
        && eights
            .by_ref()
            .all(|c| c.iter().fold(u64::MAX, |a, &b| a & b) == u64::MAX)
        && eights.remainder().iter().all(|&b| b == u64::MAX)
}

impl BlockMem {
    /// The buffer of `space` that `core` owns, to read; a Vec buffer needs the AIV. Pending
    /// moves into it are copied first.
    pub fn buf(&mut self, space: MemSpace, aiv: u8) -> Result<&[u8], SimFault> {
        self.settle_into(space);
        Ok(&self.bufs[Self::slot_of(space, aiv)?])
    }

    /// The byte length of the buffer of `space` (no pending copy is made).
    pub fn buf_len(&self, space: MemSpace, aiv: u8) -> Result<usize, SimFault> {
        Ok(self.bufs[Self::slot_of(space, aiv)?].len())
    }

    /// Records an L1 -> L0A/L0B copy without making it (the cube's L0 operands are read only by
    /// matmul, which can decode the source region instead; see [`BlockMem::deferred_source`]).
    /// The regions must have been checked against both tiles and both buffers, with equal
    /// element sizes. A pending move this one overwrites entirely is dropped; one it overwrites
    /// in part is copied first. The caller marks the destination's written bits.
    pub fn defer_move(&mut self, m: DeferredMove) {
        let mut i = 0;
        while i < self.deferred.len() {
            if m.covers(&self.deferred[i]) {
                if let Some(b) = self.deferred.swap_remove(i).snapshot {
                    Self::keep_spare(&mut self.spare_snapshots, b);
                }
            } else {
                i += 1;
            }
        }
        self.touch(m.dst.0.space, 0, m.dst_span.0, m.dst_span.1);
        self.deferred.push(m);
    }

    /// Gives a snapshot's bytes back for reuse (a few are kept).
    fn keep_spare(spare: &mut Vec<Vec<u8>>, bytes: Vec<u8>) {
        if spare.len() < 4 {
            spare.push(bytes);
        }
    }

    /// Keeps aside the source bytes of every pending move that reads L1 bytes `[lo, hi)` (see
    /// [`DeferredMove::snapshot`]): each region is copied into a compact tile of its layout,
    /// aligned within the box as in the source, so the copy runs in whole lines.
    fn snapshot_sources(&mut self, lo: usize, hi: usize) {
        for m in self.deferred.iter_mut() {
            if m.snapshot.is_some() || !spans_overlap(m.src_span, lo, hi) {
                continue;
            }
            let (ty, addr, (r0, c0)) = &m.src;
            let (fr, fc) = ty
                .fractal
                .map(|f| (f.rows.max(1) as usize, f.cols.max(1) as usize))
                .unwrap_or((1, 1));
            let at = (r0 % fr, c0 % fc);
            let mut compact = ty.clone();
            compact.rows = (at.0 + m.size.0).next_multiple_of(fr) as u64;
            compact.cols = (at.1 + m.size.1).next_multiple_of(fc) as u64;
            // A spare buffer at least as long, used as it is (only the region is ever read
            // back), else the longest one grown.
            let need = compact.bytes() as usize;
            let spare = &mut self.spare_snapshots;
            let pick = (0..spare.len())
                .find(|&i| spare[i].len() >= need)
                .or_else(|| (0..spare.len()).max_by_key(|&i| spare[i].len()));
            let mut bytes = pick.map(|i| spare.swap_remove(i)).unwrap_or_default();
            if bytes.len() < need {
                bytes.resize(need, 0);
            }
            let s = TileLoc::of_type(ty, *addr);
            let d = TileLoc::of_type(&compact, 0);
            // Cannot fail: the source region was checked against its tile and buffer when the
            // move was deferred, and the compact tile holds the region at `at` by construction.
            if tile::copy_between(&self.bufs[0], &s, (*r0, *c0), &mut bytes, &d, at, m.size).is_ok()
            {
                m.src = (compact, 0, at);
                m.src_span = (0, 0);
                m.snapshot = Some(bytes);
            }
        }
        // A region that could not be kept (none in practice) is copied to its destination now.
        self.settle(|m| m.snapshot.is_none() && spans_overlap(m.src_span, lo, hi));
    }

    /// Where a region of an L0A/L0B tile can be read from while its move is pending: the
    /// source tile's type, address and the region's first element in it.
    pub fn deferred_source(
        &self,
        dst: &TileLoc,
        at: (usize, usize),
        size: (usize, usize),
    ) -> Option<(TileType, usize, (usize, usize))> {
        self.deferred.iter().rev().find_map(|m| {
            let ((t, a, (r0, c0)), (st, sa, (sr0, sc0))) = (&m.dst, &m.src);
            // A kept region is not in L1: its destination is read after the copy is made.
            let inside = m.snapshot.is_none()
                && *t == *dst.ty
                && *a == dst.addr
                && at.0 >= *r0
                && at.1 >= *c0
                && at.0 + size.0 <= r0 + m.size.0
                && at.1 + size.1 <= c0 + m.size.1;
            inside.then(|| (st.clone(), *sa, (sr0 + at.0 - r0, sc0 + at.1 - c0)))
        })
    }

    /// The row-major f32 values of an L1 region decoded earlier ([`BlockMem::keep_decoded`]),
    /// when its bytes have not been written since; taken out of the store (give them back with
    /// `keep_decoded`).
    pub fn take_decoded(
        &mut self,
        ty: &TileType,
        addr: usize,
        at: (usize, usize),
        size: (usize, usize),
    ) -> Option<Vec<f32>> {
        let i = self
            .decoded
            .iter()
            .position(|d| d.addr == addr && d.at == at && d.size == size && d.ty == *ty)?;
        Some(self.decoded.remove(i).vals)
    }

    /// Keeps the row-major f32 values of an L1 region (byte span `span`) until a write reaches
    /// those bytes or the block ends, for [`BlockMem::take_decoded`]. An operand read again and
    /// again (Q's K slices across chunks, P across the V slices) is then decoded once.
    pub fn keep_decoded(
        &mut self,
        ty: &TileType,
        addr: usize,
        (at, size): ((usize, usize), (usize, usize)),
        span: (usize, usize),
        vals: Vec<f32>,
    ) {
        if self.decoded.len() >= DECODED_MAX {
            let d = self.decoded.remove(0);
            Self::keep_dropped(&mut self.dropped_decoded, d.vals);
        }
        self.decoded.push(Decoded {
            ty: ty.clone(),
            addr,
            at,
            size,
            span,
            vals,
        });
    }

    /// Keeps a dropped decoded region's buffer for reuse (at most [`DECODED_MAX`]).
    fn keep_dropped(dropped: &mut Vec<Vec<f32>>, vals: Vec<f32>) {
        if dropped.len() < DECODED_MAX && vals.capacity() > 0 {
            dropped.push(vals);
        }
    }

    /// A buffer of a decoded region this block (or an earlier one on this thread) dropped,
    /// to go back to the AIC's scratch pool: without it every decoded operand took a buffer
    /// from the pool that never came back, and the next one was filled afresh.
    pub fn take_dropped_decoded(&mut self) -> Option<Vec<f32>> {
        self.dropped_decoded.pop()
    }

    /// Makes the pending copies into `space`.
    fn settle_into(&mut self, space: MemSpace) {
        if !self.deferred.is_empty() {
            self.settle(|m| m.dst.0.space == space);
        }
    }

    /// Makes (and forgets) the pending copies `pick` selects.
    fn settle(&mut self, pick: impl Fn(&DeferredMove) -> bool) {
        let mut i = 0;
        while i < self.deferred.len() {
            if !pick(&self.deferred[i]) {
                i += 1;
                continue;
            }
            let m = self.deferred.swap_remove(i);
            let (Some(si), Some(di)) = (Self::slot(m.src.0.space, 0), Self::slot(m.dst.0.space, 0))
            else {
                continue;
            };
            let s = TileLoc::of_type(&m.src.0, m.src.1);
            let d = TileLoc::of_type(&m.dst.0, m.dst.1);
            // Cannot fail: `defer_move` takes only regions checked against both tiles and
            // buffers, with equal element sizes, in two different buffers (a kept region was
            // copied into a tile that holds it).
            if let Some(snap) = m.snapshot {
                let _ =
                    tile::copy_between(&snap, &s, m.src.2, &mut self.bufs[di], &d, m.dst.2, m.size);
                Self::keep_spare(&mut self.spare_snapshots, snap);
                continue;
            }
            let Some((src, dst)) = Self::two_bufs(&mut self.bufs, si, di) else {
                continue;
            };
            let _ = tile::copy_between(src, &s, m.src.2, dst, &d, m.dst.2, m.size);
        }
    }

    /// Buffer `si` to read and buffer `di` to write at once; `None` when they are the same.
    fn two_bufs(bufs: &mut [Vec<u8>; 8], si: usize, di: usize) -> Option<(&[u8], &mut [u8])> {
        if si == di || si >= bufs.len() || di >= bufs.len() {
            return None;
        }
        Some(if si < di {
            let (a, b) = bufs.split_at_mut(di);
            (&a[si], &mut b[0])
        } else {
            let (a, b) = bufs.split_at_mut(si);
            (&b[0], &mut a[di])
        })
    }

    /// A buffer and its written bits, mutable together.
    pub fn buf_bits_mut(
        &mut self,
        space: MemSpace,
        aiv: u8,
    ) -> Result<(&mut [u8], &mut [u64]), SimFault> {
        let i = Self::slot_of(space, aiv)?;
        Ok((&mut self.bufs[i], &mut self.init[i]))
    }

    /// Two different buffers at once: `src` to read, `dst` and its written bits to write.
    /// `None` when both name the same buffer.
    #[allow(clippy::type_complexity)]
    pub fn src_dst(
        &mut self,
        src: (MemSpace, u8),
        dst: (MemSpace, u8),
    ) -> Result<Option<(&[u8], &mut [u8], &mut [u64])>, SimFault> {
        self.settle_into(src.0);
        let (si, di) = (Self::slot_of(src.0, src.1)?, Self::slot_of(dst.0, dst.1)?);
        let Some((s_buf, d_buf)) = Self::two_bufs(&mut self.bufs, si, di) else {
            return Ok(None);
        };
        Ok(Some((s_buf, d_buf, &mut self.init[di])))
    }
}

/// Marks `len` bytes at `start` in written bits `bits` as written (`defined`) or poison.
pub(crate) fn mark_bits(bits: &mut [u64], start: usize, len: usize, defined: bool) {
    let end = (start + len).min(bits.len() * 64);
    if start >= end {
        return;
    }
    let set = |bits: &mut [u64], w: usize| {
        let lo = (w * 64).max(start) - w * 64;
        let hi = ((w + 1) * 64).min(end) - w * 64;
        let mask = if hi - lo == 64 {
            u64::MAX
        } else {
            ((1u64 << (hi - lo)) - 1) << lo
        };
        if defined {
            bits[w] |= mask;
        } else {
            bits[w] &= !mask;
        }
    };
    // A partial first word, whole words (filled in bulk), a partial last word.
    let (w0, w1) = (start / 64, (end - 1) / 64);
    set(bits, w0);
    if w1 > w0 {
        bits[w0 + 1..w1].fill(if defined { u64::MAX } else { 0 });
        set(bits, w1);
    }
}

/// Cross-core flags of one cluster: 32 ids on the AIC, 16 per AIV. Each pending signal remembers
/// who set it (core and event index), so a wait can name the set that released it.
pub(crate) struct CrossFlags {
    slots: [VecDeque<(CoreId, usize)>; 64],
}

impl Default for CrossFlags {
    fn default() -> Self {
        CrossFlags {
            // Inline and empty: a block's flags allocate only when a flag is first set.
            slots: std::array::from_fn(|_| VecDeque::new()),
        }
    }
}

thread_local! {
    /// The cross-core flags of this thread's last block, emptied, for the next: their queues
    /// keep their capacity, so a steady-state block sets flags without allocating.
    static SPARE_FLAGS: std::cell::RefCell<Option<Box<CrossFlags>>> =
        const { std::cell::RefCell::new(None) };
}

/// Index of `core`'s flag `id` in the flat slot list.
fn slot_index(core: CoreId, id: u8) -> Option<usize> {
    match core {
        CoreId::Aic if id < 32 => Some(id as usize),
        CoreId::Aiv(k) if id < 16 => Some(32 + 16 * (k as usize & 1) + id as usize),
        _ => None,
    }
}

impl CrossFlags {
    /// Empty flags, in the queues this thread's last block gave back when there are some.
    pub fn take() -> Box<CrossFlags> {
        SPARE_FLAGS
            .with(|s| s.borrow_mut().take())
            .unwrap_or_default()
    }

    /// Empties the flags (a set no wait consumed is dropped) and keeps them for this thread's
    /// next block.
    pub fn give_back(mut self: Box<Self>) {
        for q in &mut self.slots {
            q.clear();
        }
        SPARE_FLAGS.with(|s| *s.borrow_mut() = Some(self));
    }

    /// Where `set_intra_block(id)` from `from` lands: the receiving core and its flag id.
    pub fn target(from: CoreId, id: u8) -> Option<(CoreId, u8)> {
        match from {
            CoreId::Aic if id < 16 => Some((CoreId::Aiv(0), id)),
            CoreId::Aic if id < 32 => Some((CoreId::Aiv(1), id - 16)),
            CoreId::Aiv(k) if id < 16 => Some((CoreId::Aic, id + 16 * (k & 1))),
            _ => None,
        }
    }

    /// `set_intra_block` from `from` with `id`, as `from`'s event `index`.
    pub fn set(&mut self, from: CoreId, id: u8, index: usize) -> Result<(CoreId, u8), SimFault> {
        // `let .. else`, not `ok_or`: that would build the fault, and drop it, on every set.
        let Some((to, slot)) = Self::target(from, id) else {
            return Err(SimFault::CrossFlag { id });
        };
        let Some(i) = slot_index(to, slot) else {
            return Err(SimFault::Internal("a cross-core flag lands nowhere"));
        };
        self.slots[i].push_back((from, index));
        Ok((to, slot))
    }

    /// `wait_intra_block` on `core` with `id`: the releasing set, if one is pending (consumed).
    pub fn try_wait(&mut self, core: CoreId, id: u8) -> Result<Option<(CoreId, usize)>, SimFault> {
        let Some(i) = slot_index(core, id) else {
            return Err(SimFault::CrossFlag { id });
        };
        Ok(self.slots[i].pop_front())
    }
}

/// Reusable scratch buffers of one core, so ops do not allocate per instruction: an op takes a
/// buffer, uses it, and gives it back (an op that fails early just drops it).
#[derive(Default)]
pub(crate) struct ScratchPool {
    bytes: Free<u8>,
    f32s: Free<f32>,
    f64s: Free<f64>,
    i32s: Free<i32>,
    usizes: Free<usize>,
    bools: Free<bool>,
    /// The core's scalar state of the last block (see [`ScratchPool::take_state`]).
    vars: Vec<Option<i64>>,
    valid: Vec<Option<(u64, u64)>>,
    acc_rows: Vec<(usize, usize)>,
    prefetch: Vec<&'static [u8]>,
}

/// A core's scalar state at block start, in buffers a pool kept ([`ScratchPool::take_state`]).
pub(crate) struct CoreState {
    /// Variables, all unset.
    pub vars: Vec<Option<i64>>,
    /// Runtime valid shapes by tile id, all unset.
    pub valid: Vec<Option<(u64, u64)>>,
    /// Rows of the last matmul into each Acc buffer, none.
    pub acc_rows: Vec<(usize, usize)>,
    /// The row list of the core's GM prefetch queue, empty
    /// ([`PrefetchQueue::reusing`](super::gm::PrefetchQueue::reusing)).
    pub prefetch: Vec<&'static [u8]>,
}

/// Buffers kept per kind; enough for the most an op holds at once.
const POOL_DEPTH: usize = 16;

/// Free slots a fresh buffer leaves ([`Free::keeps_whole`]) for the buffers the running op
/// still holds: when they all come back the pool is not over [`POOL_DEPTH`], so none is
/// dropped, and a steady-state launch neither drops nor makes a buffer.
const POOL_HEADROOM: usize = 4;

/// Free buffers of one element type.
struct Free<T>(Vec<Vec<T>>);

impl<T> Default for Free<T> {
    fn default() -> Self {
        Free(Vec::new())
    }
}

impl<T: Clone + Default> Free<T> {
    /// `n` default values, in the capacity of an earlier buffer when one is free.
    fn take(&mut self, n: usize) -> Vec<T> {
        // The free buffer of least capacity that holds `n` values, else the largest (which
        // grows least): the last one given back is not simply taken, or a zeroed take would
        // take (and grow) the buffer a sized take is about to need, and the pool would make
        // buffers launch after launch.
        let fits = (0..self.0.len())
            .filter(|&i| self.0[i].capacity() >= n)
            .min_by_key(|&i| self.0[i].capacity());
        let pick = fits.or_else(|| (0..self.0.len()).max_by_key(|&i| self.0[i].capacity()));
        let mut v = match pick {
            Some(i) => self.0.swap_remove(i),
            None => Vec::new(),
        };
        v.clear();
        v.resize(n, T::default());
        v
    }

    /// `n` values, those already in a free buffer left as they are: the shortest free buffer
    /// holding at least `n` values is cut to `n` (no fill); failing that the longest one is
    /// extended (only the new values are filled). A buffer more than twice as long as asked is
    /// not cut while the pool has room for another ([`Free::keeps_whole`]): a fresh one is made
    /// instead, so the long buffer keeps its length for the next long request.
    fn take_dirty(&mut self, n: usize) -> Vec<T> {
        let fits = (0..self.0.len())
            .filter(|&i| self.0[i].len() >= n)
            .min_by_key(|&i| self.0[i].len());
        let pick = match fits {
            Some(i) if self.keeps_whole(self.0[i].len(), n) => None,
            Some(i) => Some(i),
            None => (0..self.0.len()).max_by_key(|&i| self.0[i].len()),
        };
        let mut v = match pick {
            Some(i) => self.0.swap_remove(i),
            None => Vec::new(),
        };
        v.resize(n, T::default());
        v
    }

    /// Whether a free buffer of `len` values should stay whole rather than be cut to `n`.
    ///
    /// A cut buffer comes back `n` long (the pool cannot know how much of its capacity holds
    /// values), so a core whose ops ask for a few sizes in turn would cut its long buffers and
    /// fill them again on the next long request: in the decode attention call that refill was
    /// about 4% of the simulator's instructions.
    fn keeps_whole(&self, len: usize, n: usize) -> bool {
        len > 2 * n && self.0.len() + POOL_HEADROOM < POOL_DEPTH
    }

    fn put(&mut self, v: Vec<T>) {
        // An unallocated vector is not worth a slot.
        if self.0.len() < POOL_DEPTH && v.capacity() > 0 {
            self.0.push(v);
        }
    }
}

thread_local! {
    /// Scratch pools kept by this thread between blocks, one per core of a cluster (AIC, AIV0,
    /// AIV1): a core gets back the pool its counterpart of the previous block used, so the
    /// buffers it finds are already cut to the sizes its ops ask for (handing the AIC's pool to
    /// an AIV and back cut and re-extended them, zero-filling the extension each time).
    static SPARE_POOLS: std::cell::RefCell<[Option<ScratchPool>; 3]> =
        const { std::cell::RefCell::new([None, None, None]) };
}

/// The [`SPARE_POOLS`] slot of `core`.
fn pool_slot(core: CoreId) -> usize {
    match core {
        CoreId::Aic => 0,
        CoreId::Aiv(k) => 1 + (k as usize & 1),
    }
}

impl ScratchPool {
    /// The pool `core` gave back at the end of this thread's last block, or a new one.
    pub fn take(core: CoreId) -> Self {
        SPARE_POOLS
            .with(|s| s.borrow_mut()[pool_slot(core)].take())
            .unwrap_or_default()
    }

    /// Keeps the pool for `core` in the next block this thread runs.
    pub fn give_back(self, core: CoreId) {
        SPARE_POOLS.with(|s| s.borrow_mut()[pool_slot(core)] = Some(self));
    }

    /// A core's scalar state for a kernel of `vars` variables and `tiles` tiles, all unset, in
    /// the buffers of the last block's (no allocation once they are long enough).
    pub fn take_state(&mut self, vars: usize, tiles: usize) -> CoreState {
        let mut s = CoreState {
            vars: std::mem::take(&mut self.vars),
            valid: std::mem::take(&mut self.valid),
            acc_rows: std::mem::take(&mut self.acc_rows),
            prefetch: std::mem::take(&mut self.prefetch),
        };
        s.vars.clear();
        s.vars.resize(vars, None);
        s.valid.clear();
        s.valid.resize(tiles, None);
        s.acc_rows.clear();
        s
    }

    /// Keeps a core's scalar state buffers for the next block's [`Self::take_state`].
    pub fn keep_state(&mut self, s: CoreState) {
        self.vars = s.vars;
        self.valid = s.valid;
        self.acc_rows = s.acc_rows;
        self.prefetch = super::gm::emptied(s.prefetch);
    }

    /// An empty mask (a region's defined elements).
    pub fn bools(&mut self) -> Vec<bool> {
        self.bools.take(0)
    }

    /// Returns a mask.
    pub fn put_bools(&mut self, v: Vec<bool>) {
        self.bools.put(v)
    }

    /// An empty list of offsets (a gather's source rows).
    pub fn usizes(&mut self) -> Vec<usize> {
        self.usizes.take(0)
    }

    /// Returns an offset list.
    pub fn put_usizes(&mut self, v: Vec<usize>) {
        self.usizes.put(v)
    }

    /// An empty byte buffer.
    pub fn bytes(&mut self) -> Vec<u8> {
        self.bytes.take(0)
    }

    /// `n` bytes of unspecified value (left from earlier ops), for a caller that overwrites
    /// every one before reading it.
    pub fn bytes_to_overwrite(&mut self, n: usize) -> Vec<u8> {
        self.bytes.take_dirty(n)
    }

    /// Returns a byte buffer.
    pub fn put_bytes(&mut self, v: Vec<u8>) {
        self.bytes.put(v)
    }

    /// `n` zeroed f32s.
    pub fn f32s(&mut self, n: usize) -> Vec<f32> {
        self.f32s.take(n)
    }

    /// `n` f32s of unspecified value (left from earlier ops), for a caller that overwrites
    /// every one before reading it.
    pub fn f32s_to_overwrite(&mut self, n: usize) -> Vec<f32> {
        self.f32s.take_dirty(n)
    }

    /// Returns an f32 buffer.
    pub fn put_f32s(&mut self, v: Vec<f32>) {
        self.f32s.put(v)
    }

    /// `n` zeroed f64s.
    pub fn f64s(&mut self, n: usize) -> Vec<f64> {
        self.f64s.take(n)
    }

    /// Returns an f64 buffer.
    pub fn put_f64s(&mut self, v: Vec<f64>) {
        self.f64s.put(v)
    }

    /// `n` zeroed i32s.
    pub fn i32s(&mut self, n: usize) -> Vec<i32> {
        self.i32s.take(n)
    }

    /// Returns an i32 buffer.
    pub fn put_i32s(&mut self, v: Vec<i32>) {
        self.i32s.put(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bit `b` of a shadow array, one byte of the buffer each.
    fn bit(bits: &[u64], b: usize) -> bool {
        bits[b / 64] >> (b % 64) & 1 == 1
    }

    #[test]
    fn each_core_gets_back_the_scratch_pool_it_gave_back() {
        // A fresh thread, so its pools are this test's own. Two blocks in a row, each core
        // taking its pool and giving it back in run_block's order: the second block's cores
        // must find the buffers (and sizes) of their own kind of core, not another's.
        let run = || {
            for round in 0..2 {
                for (i, &core) in CoreId::ALL.iter().enumerate() {
                    let mut p = ScratchPool::take(core);
                    let mut v = p.f32s_to_overwrite(64 * (i + 1));
                    if round == 1 {
                        assert_eq!(v[0], i as f32, "{core} got another core's pool");
                    }
                    v.fill(i as f32);
                    p.put_f32s(v);
                    p.give_back(core);
                }
            }
        };
        assert!(std::thread::spawn(run).join().is_ok());
    }

    #[test]
    fn dropped_decoded_regions_give_their_buffers_back() {
        use crate::ir::{DType, Layout};
        let arch = Arch::ascend950();
        let mut mem = BlockMem::new(&arch);
        let ty = TileType::new(MemSpace::Mat, DType::F32, 16, 16, Layout::NZ);
        let kept = vec![1.5f32; 256];
        mem.keep_decoded(&ty, 0, ((0, 0), (16, 16)), (0, 1024), kept);
        assert!(mem.take_dropped_decoded().is_none(), "still kept");
        // A write elsewhere keeps it; a write onto its bytes drops it, buffer and all.
        mem.touch(MemSpace::Mat, 0, 4096, 4160);
        assert!(mem.take_dropped_decoded().is_none());
        mem.touch(MemSpace::Mat, 0, 512, 576);
        assert!(mem.take_decoded(&ty, 0, (0, 0), (16, 16)).is_none());
        assert_eq!(mem.take_dropped_decoded().map(|v| v.len()), Some(256));
        // Regions still kept when the block ends come back too.
        mem.keep_decoded(&ty, 0, ((0, 0), (16, 16)), (0, 1024), vec![0.0; 256]);
        mem.give_back();
        let mut mem = BlockMem::take(&arch);
        assert_eq!(mem.take_dropped_decoded().map(|v| v.len()), Some(256));
    }

    #[test]
    fn marks_and_checks_agree_with_a_bit_by_bit_model() {
        let arch = Arch::ascend950();
        let mut mem = BlockMem::new(&arch);
        let words = mem.init[0].len();
        let mut model = vec![false; words * 64];
        let mut seed = 0x1234_5678_9abc_def0u64;
        let mut next = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        for step in 0..4000 {
            // Short and long ranges around word edges, inside the first few KiB.
            let start = next(4096);
            let len = if step % 3 == 0 { next(700) } else { next(130) };
            let defined = next(3) != 0;
            // Through `mark`, which also forgets the known-written span on a poison mark.
            mem.mark(MemSpace::Mat, 0, start, len, defined);
            for b in start..(start + len).min(model.len()) {
                model[b] = defined;
            }
            let (s, l) = (next(4096), next(300));
            let want = (s..s + l).all(|b| model[b]);
            assert_eq!(
                mem.defined(MemSpace::Mat, 0, s, l),
                want,
                "defined({s}, {l})"
            );
            assert!((0..4096 + 700).all(|b| bit(&mem.init[0], b) == model[b]));
        }
        // Past the end of the buffer nothing is defined; an empty range always is.
        let cap = words * 64;
        assert!(!mem.defined(MemSpace::Mat, 0, cap - 1, 2));
        assert!(mem.defined(MemSpace::Mat, 0, cap, 0));
    }
}
