//! The row copy (rows GM -> UB -> GM, `DEPTH` buffers in flight per AIV) that the paged gather
//! and the cache write build their kernels from: each locates its rows its own way
//! ([`RowPlan`]) and shares the copy loop and its hand-written flags.

use tile_backend::dsl::{Body, KernelBuilder};
use tile_backend::ir::{DType, Expr, GmView, Layout, MemSpace, ParamId, Pipe, TileType, VarId};

/// Rows (row copies) each UB buffer group keeps in flight per AIV.
pub(crate) const DEPTH: u32 = 4;

/// The largest row chunk one UB buffer holds, in bytes (wider rows are copied in chunks).
pub(crate) const CHUNK_BYTES: u64 = 16 * 1024;

/// Clusters of the Ascend 950 (more blocks run in waves).
const MAX_BLOCKS: usize = 32;

/// The static shape of a row copy: `size` columns of `dtype` per row, moved through UB in
/// `chunks` column chunks of at most `chunk` columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RowTiles {
    /// Element type.
    pub dtype: DType,
    /// Columns per row.
    pub size: u64,
    /// Columns per chunk (the last chunk may be narrower).
    pub chunk: u64,
    /// Chunks per row.
    pub chunks: u64,
}

impl RowTiles {
    /// Chunks of at most [`CHUNK_BYTES`], balanced and rounded to 32 bytes.
    pub(crate) fn new(dtype: DType, size: u64) -> Self {
        let es = dtype.size_bytes().max(1);
        let align = (32 / es).max(1);
        let max_cols = (CHUNK_BYTES / es).max(align);
        let chunks = size.div_ceil(max_cols).max(1);
        let chunk = if chunks == 1 {
            size
        } else {
            size.div_ceil(chunks).div_ceil(align) * align
        };
        let chunks = size.div_ceil(chunk.max(1)).max(1);
        RowTiles {
            dtype,
            size,
            chunk,
            chunks,
        }
    }

    /// Allocated columns of a row buffer: the chunk padded to 32 bytes (unboxed UB rows).
    fn padded(&self) -> u64 {
        let align = (32 / self.dtype.size_bytes().max(1)).max(1);
        self.chunk.div_ceil(align) * align
    }
}

/// Where one row copy reads and writes, computed in the kernel from the row's index.
pub(crate) struct RowPlan {
    /// Copy only when this is non-zero (`None`: always).
    pub when: Option<Expr>,
    /// Source row.
    pub src_row: Expr,
    /// Destination row.
    pub dst_row: Expr,
}

/// Emits the vector program copying `units` rows of `rt.size` columns from `src` (row stride
/// `src_stride`) to `dst` (row stride `dst_stride`), split over all AIVs of all blocks, with
/// `DEPTH` UB buffers in flight. `plan(body, u)` emits the scalar code that locates row `u`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn emit_row_copy(
    kb: &mut KernelBuilder,
    rt: RowTiles,
    units: Expr,
    src: ParamId,
    src_stride: Expr,
    dst: ParamId,
    dst_stride: Expr,
    plan: &dyn Fn(&mut Body<'_>, Expr) -> RowPlan,
) {
    let ty = TileType::new(MemSpace::Vec, rt.dtype, 1, rt.padded(), Layout::ND);
    let chunked = rt.chunks > 1;
    let ty = if chunked {
        ty.dynamic()
    } else {
        ty.valid(1, rt.size)
    };
    let row_ub = kb.tile_group("row_ub", ty, DEPTH);
    let depth = i64::from(DEPTH);
    kb.vector(|v| {
        let (lo, hi) = aiv_run(v, &units);
        let iters = (Expr::from(hi) - lo).ceil_div(depth);
        // Buffer j is guarded by event j of both pipe pairs: MTE3 -> MTE2 "free" (pre-set
        // here, taken before each load, set after each store, drained after the loop) and
        // MTE2 -> MTE3 "loaded". Written by hand: one id per buffer keeps every set ordered
        // after the wait that took the previous one, and a skipped row touches no flag.
        for j in 0..DEPTH {
            v.set_flag(Pipe::Mte3, Pipe::Mte2, event(j));
        }
        v.for_range("it", 0, iters, 1, |lb, it| {
            for j in 0..DEPTH {
                let ev = event(j);
                let u = Expr::from(lo) + Expr::from(it) * depth + i64::from(j);
                lb.if_(u.clone().lt(hi), |b| {
                    let u = b.let_("u", u.clone());
                    let p = plan(b, Expr::from(u));
                    let slot = row_ub.at(i64::from(j));
                    let copy = |c: &mut Body<'_>| {
                        for k in 0..rt.chunks {
                            let col = k * rt.chunk;
                            let width = rt.chunk.min(rt.size - col);
                            if k > 0 {
                                // The previous chunk's store has read the buffer.
                                c.set_flag(Pipe::Mte3, Pipe::Mte2, ev);
                            }
                            c.wait_flag(Pipe::Mte3, Pipe::Mte2, ev);
                            if chunked {
                                c.set_validshape(slot.clone(), 1, width);
                            }
                            c.load(
                                slot.clone(),
                                GmView::nd(
                                    src,
                                    p.src_row.clone() * src_stride.clone() + col,
                                    1,
                                    width,
                                    src_stride.clone(),
                                ),
                            );
                            c.set_flag(Pipe::Mte2, Pipe::Mte3, ev);
                            c.wait_flag(Pipe::Mte2, Pipe::Mte3, ev);
                            c.store(
                                GmView::nd(
                                    dst,
                                    p.dst_row.clone() * dst_stride.clone() + col,
                                    1,
                                    width,
                                    dst_stride.clone(),
                                ),
                                slot.clone(),
                            );
                        }
                        c.set_flag(Pipe::Mte3, Pipe::Mte2, ev);
                    };
                    match p.when.clone() {
                        Some(cond) => b.if_(cond, copy),
                        None => copy(b),
                    }
                });
            }
        });
        for j in 0..DEPTH {
            v.wait_flag(Pipe::Mte3, Pipe::Mte2, event(j));
        }
    });
}

/// This AIV's contiguous run `lo .. hi` of `units` rows split over all AIVs of all blocks.
fn aiv_run(v: &mut Body<'_>, units: &Expr) -> (VarId, VarId) {
    let workers = Expr::BlockDim * 2;
    let w = v.let_("worker", Expr::BlockIdx * 2 + Expr::SubBlockIdx);
    let per = v.let_("per", units.clone().ceil_div(workers));
    let lo = v.let_("lo", (Expr::from(w) * per).min(units.clone()));
    let hi = v.let_("hi", (Expr::from(lo) + per).min(units.clone()));
    (lo, hi)
}

/// The event id guarding buffer `j` (DEPTH <= 8 ids per pipe pair).
fn event(j: u32) -> u8 {
    u8::try_from(j).unwrap_or(u8::MAX)
}

/// Blocks to launch for `units` row copies: as many as give every AIV a row, at most one wave
/// (the copy is bound by the scalar reads that locate each row, so it wants every AIV busy).
pub(crate) fn block_dim_for(units: usize) -> usize {
    units.div_ceil(2).clamp(1, MAX_BLOCKS)
}

/// UB buffers (batches of rows) the batched gather keeps in flight per AIV: one fills (MTE2)
/// while the other drains (MTE3).
pub(crate) const BATCHES: u32 = 2;

/// Most rows one batch holds.
const MAX_BATCH_ROWS: u64 = 8;

/// Rows per batch of [`emit_row_gather`] for `rt`: as many padded rows as fit in
/// [`CHUNK_BYTES`], at most [`MAX_BATCH_ROWS`]; 0 when a row needs column chunks (the batched
/// form does not apply).
pub(crate) fn batch_rows(rt: RowTiles) -> u64 {
    if rt.chunks > 1 {
        return 0;
    }
    let row = rt.padded() * rt.dtype.size_bytes().max(1);
    (CHUNK_BYTES / row.max(1)).clamp(1, MAX_BATCH_ROWS)
}

/// Emits the vector program gathering `units` rows of `rt.size` columns from `src` (row stride
/// `src_stride`) into consecutive rows `0..units` of `dst` (row stride `rt.size`), split over
/// all AIVs of all blocks in contiguous runs. Each AIV moves its run [`batch_rows`] rows at a
/// time through [`BATCHES`] UB buffers: every row of a batch is its own load (MTE2) into its
/// row of the buffer, and the whole batch is one store (MTE3) of consecutive rows, so the
/// stores are `batch_rows` times larger and a batch costs four flags, not four per row.
/// `src_row(body, u)` emits the scalar code that locates row `u`. Requires
/// `batch_rows(rt) > 0`.
///
/// ```text
/// per batch k (buffer b = k % BATCHES, rows u0 .. u0 + m):
///   wait MTE3 -> MTE2 (b)                      the previous store from buffer b is done
///   per row r < m:  S     row = src_row(u0 + r)
///                   MTE2  src[row, 0..size] -> row_ub[b][r]
///   set/wait MTE2 -> MTE3 (b)
///   MTE3  batch_ub[b][0..m] -> dst[u0 .. u0 + m]   (one store)
///   set MTE3 -> MTE2 (b)
/// ```
///
/// The row tiles and the batch tiles are placed by hand (`tile_at`): row `r` of buffer `b` is
/// row `r` of batch tile `b`, which no planned tile or reinterpret can express.
pub(crate) fn emit_row_gather(
    kb: &mut KernelBuilder,
    rt: RowTiles,
    units: Expr,
    (src, src_stride): (ParamId, Expr),
    dst: ParamId,
    src_row: &dyn Fn(&mut Body<'_>, Expr) -> Expr,
) {
    let rows = batch_rows(rt).max(1);
    let es = rt.dtype.size_bytes().max(1);
    let row_bytes = rt.padded() * es;
    let row_ty =
        TileType::new(MemSpace::Vec, rt.dtype, 1, rt.padded(), Layout::ND).valid(1, rt.size);
    let batch_ty = TileType::new(MemSpace::Vec, rt.dtype, rows, rt.padded(), Layout::ND).dynamic();
    let mut row_ub = Vec::new();
    let mut batch_ub = Vec::new();
    for b in 0..u64::from(BATCHES) {
        let base = b * rows * row_bytes;
        batch_ub.push(kb.tile_at(format!("batch_ub{b}"), batch_ty.clone(), base));
        let tiles: Vec<_> = (0..rows)
            .map(|r| {
                kb.tile_at(
                    format!("row_ub{b}_{r}"),
                    row_ty.clone(),
                    base + r * row_bytes,
                )
            })
            .collect();
        row_ub.push(tiles);
    }
    let size = rt.size;
    let (rows_i, batches_i) = (rows as i64, i64::from(BATCHES));
    kb.vector(|v| {
        let (lo, hi) = aiv_run(v, &units);
        let iters = (Expr::from(hi) - lo).ceil_div(rows_i * batches_i);
        // Buffer b is guarded by event b of both pipe pairs (written by hand, as in
        // `emit_row_copy`): "free" MTE3 -> MTE2 pre-set here and drained after the loop, and
        // "loaded" MTE2 -> MTE3.
        for b in 0..BATCHES {
            v.set_flag(Pipe::Mte3, Pipe::Mte2, event(b));
        }
        v.for_range("it", 0, iters, 1, |lb, it| {
            for (b, (batch, row_tiles)) in batch_ub.iter().zip(&row_ub).enumerate() {
                let ev = event(b as u32);
                let u0 = Expr::from(lo) + (Expr::from(it) * batches_i + b as i64) * rows_i;
                lb.if_(u0.clone().lt(hi), |bb| {
                    let u0 = bb.let_("u0", u0.clone());
                    let m = bb.let_("m", (Expr::from(hi) - u0).min(rows_i));
                    bb.wait_flag(Pipe::Mte3, Pipe::Mte2, ev);
                    for (r, tile) in row_tiles.iter().enumerate() {
                        let r = r as i64;
                        bb.if_(Expr::from(m).gt(r), |rb| {
                            let row = src_row(rb, Expr::from(u0) + r);
                            rb.load(
                                *tile,
                                GmView::nd(
                                    src,
                                    row * src_stride.clone(),
                                    1,
                                    size,
                                    src_stride.clone(),
                                ),
                            );
                        });
                    }
                    bb.set_flag(Pipe::Mte2, Pipe::Mte3, ev);
                    bb.wait_flag(Pipe::Mte2, Pipe::Mte3, ev);
                    bb.set_validshape(*batch, m, size);
                    bb.store(
                        GmView::nd(dst, Expr::from(u0) * size, m, size, size),
                        *batch,
                    );
                    bb.set_flag(Pipe::Mte3, Pipe::Mte2, ev);
                });
            }
        });
        for b in 0..BATCHES {
            v.wait_flag(Pipe::Mte3, Pipe::Mte2, event(b));
        }
    });
}
