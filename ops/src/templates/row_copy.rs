//! The row copy (rows GM -> UB -> GM, `DEPTH` buffers in flight per AIV) that the paged gather
//! and the cache write build their kernels from: each locates its rows its own way
//! ([`RowPlan`]) from a per-row key read from UB, and shares the copy loop and its hand-written
//! flags.

use crate::runtime::PlanTarget;
use tile_backend::dsl::{Body, KernelBuilder};
use tile_backend::ir::{
    DType, Expr, GmView, Layout, MemSpace, ParamId, Pipe, TileId, TileType, VarId,
};

/// Rows (row copies) each UB buffer group keeps in flight per AIV.
pub(crate) const DEPTH: u32 = 4;

/// The largest row chunk one UB buffer holds, in bytes (wider rows are copied in chunks).
pub(crate) const CHUNK_BYTES: u64 = 16 * 1024;

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
/// `DEPTH` UB buffers in flight. Row `u` has a key `keys[u]` (i32 `[1, units]`: the gather's
/// index, the cache write's slot), which each AIV loads GM -> UB [`KEY_CHUNK`] at a time (one
/// burst) and the scalar unit reads from UB; `plan(body, u, key)` emits the scalar code that
/// locates row `u` from it.
#[allow(clippy::too_many_arguments)]
pub(crate) fn emit_row_copy(
    kb: &mut KernelBuilder,
    rt: RowTiles,
    units: Expr,
    (src, src_stride): (ParamId, Expr),
    (dst, dst_stride): (ParamId, Expr),
    keys: ParamId,
    plan: &dyn Fn(&mut Body<'_>, Expr, Expr) -> RowPlan,
) {
    let ty = TileType::new(MemSpace::Vec, rt.dtype, 1, rt.padded(), Layout::ND);
    let chunked = rt.chunks > 1;
    let ty = if chunked {
        ty.dynamic()
    } else {
        ty.valid(1, rt.size)
    };
    let row_ub = kb.tile_group("row_ub", ty, DEPTH);
    let keys_ub = kb.tile("keys_ub", key_list());
    let (depth, chunk_i) = (i64::from(DEPTH), KEY_CHUNK as i64);
    kb.vector(|v| {
        let (lo, hi) = aiv_run(v, &units);
        // Buffer j is guarded by event j of both pipe pairs: MTE3 -> MTE2 "free" (pre-set
        // here, taken before each load, set after each store, drained after the loop) and
        // MTE2 -> MTE3 "loaded". Written by hand: one id per buffer keeps every set ordered
        // after the wait that took the previous one, and a skipped row touches no flag. The
        // key tile's MTE2 -> S and S -> MTE2 pairs are the sync pass's.
        for j in 0..DEPTH {
            v.set_flag(Pipe::Mte3, Pipe::Mte2, event(j));
        }
        let chunks = (Expr::from(hi) - lo).ceil_div(chunk_i);
        v.for_range("chunk", 0, chunks, 1, |cb, c| {
            let c0 = cb.let_("c0", Expr::from(lo) + Expr::from(c) * chunk_i);
            let cm = cb.let_("cm", (Expr::from(hi) - c0).min(chunk_i));
            cb.set_validshape(keys_ub, 1, cm);
            cb.load(keys_ub, GmView::nd(keys, c0, 1, cm, Expr::from(cm)));
            let iters = Expr::from(cm).ceil_div(depth);
            cb.for_range("it", 0, iters, 1, |lb, it| {
                for j in 0..DEPTH {
                    let ev = event(j);
                    let r = Expr::from(it) * depth + i64::from(j);
                    lb.if_(r.clone().lt(cm), |b| {
                        let r = b.let_("r", r.clone());
                        let key = b.read_tile_scalar("key", keys_ub, r);
                        let p = plan(b, Expr::from(c0) + r, Expr::from(key));
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
        });
        for j in 0..DEPTH {
            v.wait_flag(Pipe::Mte3, Pipe::Mte2, event(j));
        }
    });
}

/// The UB tile a chunk of [`KEY_CHUNK`] i32 keys is loaded into (valid length set per chunk).
fn key_list() -> TileType {
    list_tile(KEY_CHUNK)
}

/// An i32 `[1, cols]` UB list with a runtime valid length.
fn list_tile(cols: u64) -> TileType {
    TileType::new(MemSpace::Vec, DType::I32, 1, cols, Layout::ND).dynamic()
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

/// Blocks to launch for `units` row copies on `target`, at most the blocks the target runs at
/// once. The device takes as many as give every AIV a row (its clusters: one wave, every AIV
/// busy). The simulator's plan gives each block at least [`CPU_BLOCK_ROWS`] rows, up to
/// [`crate::runtime::CPU_PLAN_BLOCKS`] blocks: each simulated block has a fixed cost (its
/// memory, its GM overlay, both AIVs' set-up) that only more rows amortise, and a few rows
/// copy faster in one block than spread thin. A copy's result does not depend on how its rows
/// are split.
pub(crate) fn block_dim_for(units: usize, target: PlanTarget) -> usize {
    let per_block = match target {
        PlanTarget::Device => 2,
        PlanTarget::Cpu => CPU_BLOCK_ROWS,
    };
    units
        .div_ceil(per_block)
        .clamp(1, target.concurrent_blocks())
}

/// The fewest rows the simulator's plan gives a block (see [`block_dim_for`]): a decode step's
/// few new rows run as one block.
pub(crate) const CPU_BLOCK_ROWS: usize = 64;

/// UB buffers (batches of rows) the batched gather keeps in flight per AIV: one fills (MTE2)
/// while the other drains (MTE3).
pub(crate) const BATCHES: u32 = 2;

/// Most rows one batch holds.
const MAX_BATCH_ROWS: u64 = 16;

/// Keys (row indices) the batched gather loads into UB per chunk: one MTE2 burst of 8 KiB
/// brings the keys of up to 2048 rows, which the scalar unit then reads from UB.
pub const KEY_CHUNK: u64 = 2048;

/// The longest lookup table (block table) the batched gather keeps in UB, in entries (64 KiB
/// of i32). A longer table is read from GM, one scalar read per row.
pub const TABLE_CAP: u64 = 16384;

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

/// What the batched gather locates its rows through: row `u`'s key `keys[u]` (i32 `[1, units]`,
/// e.g. the paged gather's logical token), and optionally a lookup table (i32 `[1, len]`,
/// e.g. the block table) that the row's locator reads.
pub(crate) struct GatherKeys {
    /// The keys, one per row.
    pub keys: ParamId,
    /// The lookup table and its runtime length.
    pub table: Option<(ParamId, Expr)>,
}

/// Where the lookup table is read from: its UB copy (when it has at most [`TABLE_CAP`]
/// entries), else GM.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Table {
    /// The table's UB copy (read at UB cost).
    Ub(TileId),
    /// The table in GM (a scalar read through the data cache per entry).
    Gm(ParamId),
}

impl Table {
    /// Emits the read of entry `i` into a new scalar variable.
    pub(crate) fn read(self, b: &mut Body<'_>, name: &str, i: Expr) -> VarId {
        match self {
            Table::Ub(t) => b.read_tile_scalar(name, t, i),
            Table::Gm(p) => b.read_scalar(name, p, i),
        }
    }
}

/// The UB tiles of the batched gather, placed by hand (`tile_at`): row `r` of buffer `b` is row
/// `r` of batch tile `b`, which no planned tile or reinterpret can express; the key chunk and the
/// table copy follow the batches.
struct GatherTiles {
    rows: u64,
    batch: Vec<TileId>,
    row: Vec<Vec<TileId>>,
    keys: TileId,
    table: Option<TileId>,
}

/// `n` rounded up to the 128-byte placement PyPTO's allocator uses for UB tiles.
fn align128(n: u64) -> u64 {
    n.div_ceil(128) * 128
}

impl GatherTiles {
    fn place(kb: &mut KernelBuilder, rt: RowTiles, with_table: bool) -> Self {
        let rows = batch_rows(rt).max(1);
        let row_bytes = rt.padded() * rt.dtype.size_bytes().max(1);
        let row_ty =
            TileType::new(MemSpace::Vec, rt.dtype, 1, rt.padded(), Layout::ND).valid(1, rt.size);
        let batch_ty =
            TileType::new(MemSpace::Vec, rt.dtype, rows, rt.padded(), Layout::ND).dynamic();
        let (mut batch, mut row) = (Vec::new(), Vec::new());
        for b in 0..u64::from(BATCHES) {
            let base = b * rows * row_bytes;
            batch.push(kb.tile_at(format!("batch_ub{b}"), batch_ty.clone(), base));
            let tiles: Vec<_> = (0..rows)
                .map(|r| {
                    let at = base + r * row_bytes;
                    kb.tile_at(format!("row_ub{b}_{r}"), row_ty.clone(), at)
                })
                .collect();
            row.push(tiles);
        }
        let keys_at = align128(u64::from(BATCHES) * rows * row_bytes);
        let keys = kb.tile_at("keys_ub", key_list(), keys_at);
        let table = with_table.then(|| {
            let at = align128(keys_at + KEY_CHUNK * 4);
            kb.tile_at("table_ub", list_tile(TABLE_CAP), at)
        });
        GatherTiles {
            rows,
            batch,
            row,
            keys,
            table,
        }
    }
}

/// Emits the vector program gathering `units` rows of `rt.size` columns from `src` (row stride
/// `src_stride`) into consecutive rows `0..units` of `dst` (row stride `rt.size`), split over
/// all AIVs of all blocks in contiguous runs. `src_row(body, key, table)` emits the scalar code
/// that locates the row of key `key` (reading `table` if it needs). Requires
/// `batch_rows(rt) > 0`.
///
/// Each AIV loads its run's keys GM -> UB [`KEY_CHUNK`] at a time (one burst), and the lookup
/// table once (when it fits in [`TABLE_CAP`]; else the table is read from GM per row), so every
/// per-row scalar read is a UB read. It moves the rows [`batch_rows`] at a time through
/// [`BATCHES`] UB buffers: every row of a batch is its own load (MTE2) into its row of the
/// buffer, and the whole batch is one store (MTE3) of consecutive rows.
///
/// ```text
/// MTE2  table -> table_ub                                      (once, if it fits)
/// per chunk of keys (c0 .. c0 + cm):
///   MTE2  keys[c0 .. c0 + cm] -> keys_ub                        (one burst)
///   per batch k (buffer b = k % BATCHES, rows u0 .. u0 + m of the chunk):
///     wait MTE3 -> MTE2 (b)                      the previous store from buffer b is done
///     per row r < m:  S     key = keys_ub[u0 + r]; row = src_row(key, table)   (UB reads)
///                     MTE2  src[row, 0..size] -> row_ub[b][r]
///     set/wait MTE2 -> MTE3 (b)
///     MTE3  batch_ub[b][0..m] -> dst[c0 + u0 .. c0 + u0 + m]   (one store)
///     set MTE3 -> MTE2 (b)
/// ```
///
/// The batch flags are written by hand (one event id per buffer); the sync pass adds the
/// MTE2 -> S pairs after the key and table loads and the S -> MTE2 pair before the next chunk's
/// key load overwrites the keys the scalar unit read.
pub(crate) fn emit_row_gather(
    kb: &mut KernelBuilder,
    rt: RowTiles,
    units: Expr,
    (src, src_stride): (ParamId, Expr),
    dst: ParamId,
    keys: GatherKeys,
    src_row: &dyn Fn(&mut Body<'_>, Expr, Option<Table>) -> Expr,
) {
    let tiles = GatherTiles::place(kb, rt, keys.table.is_some());
    kb.vector(|v| {
        let (lo, hi) = aiv_run(v, &units);
        // Buffer b is guarded by event b of both pipe pairs (written by hand, as in
        // `emit_row_copy`): "free" MTE3 -> MTE2 pre-set here and drained after the loop, and
        // "loaded" MTE2 -> MTE3.
        for b in 0..BATCHES {
            v.set_flag(Pipe::Mte3, Pipe::Mte2, event(b));
        }
        let run = |b: &mut Body<'_>, table: Option<Table>| {
            gather_chunks(
                b,
                rt,
                &tiles,
                (lo, hi),
                (src, &src_stride),
                dst,
                &keys,
                table,
                src_row,
            )
        };
        match (&keys.table, tiles.table) {
            (Some((tensor, len)), Some(tile)) => v.if_else(
                len.clone().le(TABLE_CAP as i64),
                |t| {
                    t.set_validshape(tile, 1, len.clone());
                    t.load(tile, GmView::nd(*tensor, 0, 1, len.clone(), len.clone()));
                    run(t, Some(Table::Ub(tile)));
                },
                |e| run(e, Some(Table::Gm(*tensor))),
            ),
            _ => run(v, None),
        }
        for b in 0..BATCHES {
            v.wait_flag(Pipe::Mte3, Pipe::Mte2, event(b));
        }
    });
}

/// The chunk loop of [`emit_row_gather`] over this AIV's rows `lo .. hi`.
#[allow(clippy::too_many_arguments)]
fn gather_chunks(
    v: &mut Body<'_>,
    rt: RowTiles,
    tiles: &GatherTiles,
    (lo, hi): (VarId, VarId),
    (src, src_stride): (ParamId, &Expr),
    dst: ParamId,
    keys: &GatherKeys,
    table: Option<Table>,
    src_row: &dyn Fn(&mut Body<'_>, Expr, Option<Table>) -> Expr,
) {
    let size = rt.size;
    let (rows_i, batches_i, chunk_i) = (tiles.rows as i64, i64::from(BATCHES), KEY_CHUNK as i64);
    let chunks = (Expr::from(hi) - lo).ceil_div(chunk_i);
    v.for_range("chunk", 0, chunks, 1, |cb, c| {
        let c0 = cb.let_("c0", Expr::from(lo) + Expr::from(c) * chunk_i);
        let cm = cb.let_("cm", (Expr::from(hi) - c0).min(chunk_i));
        cb.set_validshape(tiles.keys, 1, cm);
        cb.load(tiles.keys, GmView::nd(keys.keys, c0, 1, cm, Expr::from(cm)));
        let iters = Expr::from(cm).ceil_div(rows_i * batches_i);
        cb.for_range("it", 0, iters, 1, |lb, it| {
            for (b, (batch, row_tiles)) in tiles.batch.iter().zip(&tiles.row).enumerate() {
                let ev = event(b as u32);
                let u0 = (Expr::from(it) * batches_i + b as i64) * rows_i;
                lb.if_(u0.clone().lt(cm), |bb| {
                    let u0 = bb.let_("u0", u0.clone());
                    let m = bb.let_("m", (Expr::from(cm) - u0).min(rows_i));
                    bb.wait_flag(Pipe::Mte3, Pipe::Mte2, ev);
                    for (r, tile) in row_tiles.iter().enumerate() {
                        let r = r as i64;
                        bb.if_(Expr::from(m).gt(r), |rb| {
                            let key = rb.read_tile_scalar("key", tiles.keys, Expr::from(u0) + r);
                            let row = src_row(rb, Expr::from(key), table);
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
                        GmView::nd(dst, (Expr::from(c0) + u0) * size, m, size, size),
                        *batch,
                    );
                    bb.set_flag(Pipe::Mte3, Pipe::Mte2, ev);
                });
            }
        });
    });
}
