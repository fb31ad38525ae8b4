//! Top-k selection on the vector core from the sort instructions (A5-FACTS §6): a row of f32
//! scores of runtime length streams through UB a window of [`WINDOW`] scores at a time (one
//! DMA); one TSORT32 sorts each 32-score block of the window into (value, index) pairs, and
//! each block, extracted in turn, is merged by a two-list TMRGSORT into the best pairs so far,
//! keeping at most `k` (the merge stops at `k`); the result is the best `k` pairs, descending,
//! equal scores by the smaller index, `(-inf, -1)` pairs where the row has fewer than `k`
//! scores.
//!
//! ```text
//!  scores[off + W w ..] --TLOAD--> window --TSORT32(idx = lanes + W w)--> sorted (32-pair blocks)
//!  sorted[block c] --TEXTRACT--> blk;  best_{c-1}, blk --TMRGSORT (2 lists, keeps min(k, ..))--> best_c
//!  best_last --TSTORE--> out[0 .. 2m];  pads --TSTORE--> out[2m .. 2k]      (m = min(n, k))
//! ```
//!
//! One DMA a window, not one per 32 scores: each DMA waits the DMA latency before its sort.
//!
//! **Ties across lists.** TSORT32 puts equal values in index order (documented), but the order
//! TMRGSORT gives equal values from different lists is not documented (the simulator models
//! the earlier list first, [`crate::arch::MrgSortTies`]). The kernel does not depend on it: a
//! probe at its start merges two one-pair lists of equal value whose indices are 0 and 1 and
//! reads which came first ([`probe_tie_order`]); every merge then passes the list holding the
//! smaller indices (the best so far) in the winning position. So the result is the same under
//! either positional tie order (tests flip the model and compare); what it assumes is that the
//! order is positional (one list position always wins), not something else.
//!
//! Scores must not be NaN (the hardware's NaN order is undocumented); `-inf` and `+inf` are
//! ordinary values, `-0` equals `+0`. Indices are the positions in the row, `0 .. n`.
//!
//! **Output.** `k` pairs of 8 bytes, an f32 value then a u32 index (`-1` as i32 for a missing
//! pair, whose value is `-inf`), in an f32 tensor `[1, 2k]` (the index slots hold the index's bits; read them with
//! [`crate::sim::io::decode_pairs`]).

use crate::dsl::{Body, KernelBuilder, Reinterpret};
use crate::ir::{
    pair_cols, BinaryOp, DType, Expr, GmView, Kernel, Layout, MemSpace, ParamId, TileId, TileType,
    VarId,
};

/// Elements per chunk: one TSORT32 block.
pub const CHUNK: u64 = 32;

/// Scores loaded (one DMA) and sorted (one TSORT32) at a time: the lanes a row's indices start
/// from are this many, `start + 0 .. WINDOW` ([`lanes`]).
pub const WINDOW: u64 = 512;

/// Shapes of [`topk`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopkParams {
    /// Pairs kept (`k >= 1`).
    pub k: u64,
}

impl Default for TopkParams {
    fn default() -> Self {
        TopkParams { k: 2048 }
    }
}

/// The UB tiles one top-k selection uses (declared by [`TopkTiles::declare`]; about
/// `40 * ceil32(k) + 12 KiB` bytes).
#[derive(Debug, Clone, Copy)]
pub struct TopkTiles {
    /// `k`.
    pub k: u64,
    /// A window of scores, `[1, WINDOW]` f32, runtime valid columns.
    pub window: TileId,
    /// The window's indices, `[1, WINDOW]` u32 (the lanes plus the window's start), runtime
    /// valid columns (32 for the tie probe).
    pub idx: TileId,
    /// The window sorted per 32-score block: `[1, 2 WINDOW]` f32 pairs, runtime valid.
    pub sorted: TileId,
    /// One sorted block extracted: `[1, 64]` f32 pairs, runtime valid columns.
    pub blk: TileId,
    /// TSORT32's tail scratch, `[1, WINDOW]` f32 (a window's padded copy).
    pub tail: TileId,
    /// The tie probe's 32 values, `[1, 32]` f32.
    pub chunk: TileId,
    /// The best pairs so far, two tiles used in turn: `[1, max(2k, 64)]` f32, runtime valid.
    pub best: [TileId; 2],
    /// TMRGSORT's scratch: the two lists' columns.
    pub merge_tmp: TileId,
    /// `(-inf, -1)` pairs for the missing ones: `[1, 2 ceil32(k)]` f32, runtime valid.
    pub pads: TileId,
    /// Scratch for the pads (values, indices) and the tie probe.
    pub pad_values: TileId,
    /// u32 `[1, ceil32(k)]`.
    pub pad_index: TileId,
    /// The probe's two lists and its merge (`[1, 64]` f32 each).
    pub probe: [TileId; 3],
    /// The probe merge's scratch.
    pub probe_tmp: TileId,
    /// The probe merge read as i32.
    pub probe_bits: TileId,
}

fn vec_f32(cols: u64) -> TileType {
    TileType::new(MemSpace::Vec, DType::F32, 1, cols, Layout::ND)
}

fn vec_u32(cols: u64) -> TileType {
    TileType::new(MemSpace::Vec, DType::U32, 1, cols, Layout::ND)
}

impl TopkTiles {
    /// Declares the tiles of a top-k of `k` (`prefix` names them).
    pub fn declare(kb: &mut KernelBuilder, prefix: &str, k: u64) -> TopkTiles {
        let pc = pair_cols(DType::F32).unwrap_or(2);
        let k32 = k.div_ceil(CHUNK) * CHUNK;
        let best_cols = (pc * k).max(pc * CHUNK).div_ceil(8) * 8;
        let mut tile = |name: &str, ty: TileType| kb.tile(format!("{prefix}{name}"), ty);
        let probe_merge = tile("probe_m", vec_f32(pc * CHUNK).dynamic());
        let probe_bits = kb.reinterpret(
            format!("{prefix}probe_bits"),
            probe_merge,
            Reinterpret {
                dtype: Some(DType::I32),
                shape: Some((1, pc * CHUNK)),
                layout: None,
            },
        );
        let mut tile = |name: &str, ty: TileType| kb.tile(format!("{prefix}{name}"), ty);
        TopkTiles {
            k,
            window: tile("window", vec_f32(WINDOW).dynamic()),
            idx: tile("idx", vec_u32(WINDOW).dynamic()),
            sorted: tile("sorted", vec_f32(pc * WINDOW).dynamic()),
            blk: tile("blk", vec_f32(pc * CHUNK).dynamic()),
            tail: tile("tail", vec_f32(WINDOW)),
            chunk: tile("chunk", vec_f32(CHUNK)),
            best: [
                tile("best_a", vec_f32(best_cols).dynamic()),
                tile("best_b", vec_f32(best_cols).dynamic()),
            ],
            merge_tmp: tile("merge_tmp", vec_f32(best_cols + pc * CHUNK)),
            pads: tile("pads", vec_f32(pc * k32).dynamic()),
            pad_values: tile("pad_values", vec_f32(k32)),
            pad_index: tile("pad_index", vec_u32(k32)),
            probe: [
                tile("probe_a", vec_f32(pc * CHUNK).dynamic()),
                tile("probe_b", vec_f32(pc * CHUNK).dynamic()),
                probe_merge,
            ],
            probe_tmp: tile("probe_tmp", vec_f32(2 * pc * CHUNK)),
            probe_bits,
        }
    }
}

/// Finds TMRGSORT's cross-list tie order: merges a list of `(1.0, 0)` pairs with one of
/// `(1.0, 1)` pairs and reads the first index. The variable is 1 when the later list won the
/// tie (pass the list to favour last), 0 when the earlier one did. Also builds the pad pairs.
pub fn probe_tie_order(b: &mut Body<'_>, t: &TopkTiles) -> VarId {
    let pc = pair_cols(DType::F32).unwrap_or(2) as i64;
    let k32 = t.k.div_ceil(CHUNK) * CHUNK;
    let [pa, pb, pm] = t.probe;
    b.set_validshape(t.idx, 1, CHUNK as i64);
    for (list, index) in [(pa, 0.0), (pb, 1.0)] {
        b.fill(t.chunk, 1.0);
        b.fill(t.idx, index);
        b.set_validshape(list, 1, pc * CHUNK as i64);
        b.sort32(list, t.chunk, t.idx);
        b.set_validshape(list, 1, pc);
    }
    b.set_validshape(pm, 1, pc);
    b.mrgsort_lists(pm, t.probe_tmp, [pa.into(), pb.into()]);
    let first = b.read_tile_scalar("tie_first", t.probe_bits, 1);
    // The pads: (-inf, u32::MAX = -1 as i32) pairs, sorted so they are pairs. -inf as
    // -1e20 * 1e20 (an f32 overflow): a non-finite literal does not survive the kernel's JSON
    // form (serde_json writes it as null).
    b.fill(t.pad_values, -1.0e20);
    b.muls(t.pad_values, t.pad_values, 1.0e20);
    b.fill(t.pad_index, u32::MAX as f64);
    b.set_validshape(t.pads, 1, 2 * k32 as i64);
    b.sort32(t.pads, t.pad_values, t.pad_index);
    first
}

/// Where one row's scores are and where its pairs go.
#[derive(Debug, Clone)]
pub struct TopkRow {
    /// The scores tensor (f32).
    pub scores: ParamId,
    /// The row's first element in it.
    pub offset: Expr,
    /// The row's length (runtime; 0 allowed).
    pub len: Expr,
    /// The lanes tensor (u32; PTO's TCI is not in the IR yet): [`WINDOW`] consecutive u32 at
    /// `lanes_offset` are the indices of the row's first window (`0 .. WINDOW` for a row whose
    /// indices are its positions; `s .. s + WINDOW` for a segment of a longer row starting at
    /// `s`).
    pub lanes: ParamId,
    /// Where the row's [`WINDOW`] lanes start in `lanes` (elements).
    pub lanes_offset: Expr,
    /// The output pairs tensor (f32, 2 columns per pair).
    pub out: ParamId,
    /// The row's first pair column in it.
    pub out_offset: Expr,
}

/// The best `t.k` pairs of one row into `row.out` (see the module doc). `later_first` is
/// [`probe_tie_order`]'s variable.
pub fn topk_row(b: &mut Body<'_>, t: &TopkTiles, row: &TopkRow, later_first: VarId) {
    let k = t.k as i64;
    let (w, chunk) = (WINDOW as i64, CHUNK as i64);
    let n = row.len.clone();
    let chunks = n.clone().ceil_div(chunk);
    let windows = n.clone().ceil_div(w);
    b.set_validshape(t.idx, 1, w);
    b.load(
        t.idx,
        GmView::nd(row.lanes, row.lanes_offset.clone(), 1, w, w),
    );
    b.for_range("window", 0, windows.clone(), 1, |b, win| {
        let w0 = Expr::from(win) * w;
        let wlen = (n.clone() - w0.clone()).min(w);
        let blocks = wlen.clone().ceil_div(chunk);
        b.set_validshape(t.window, 1, wlen.clone());
        b.load(
            t.window,
            GmView::nd(
                row.scores,
                row.offset.clone() + w0.clone(),
                1,
                wlen.clone(),
                wlen.clone(),
            ),
        );
        b.set_validshape(t.sorted, 1, blocks.clone() * 2 * chunk);
        b.sort32_tail(t.sorted, t.window, t.idx, t.tail);
        b.for_range("block", 0, blocks, 1, |b, c| {
            let at = Expr::from(c) * chunk;
            let start = w0.clone() + at.clone();
            let len = (wlen.clone() - at.clone()).min(chunk);
            let have = start.clone().min(k);
            let keep = (start.clone() + len.clone()).min(k);
            b.set_validshape(t.blk, 1, len.clone() * 2);
            b.mov(t.blk, t.sorted).offset(0, at * 2);
            // The row's chunk index: its parity picks the best-so-far tile.
            let g = start.clone() / chunk;
            b.if_else(
                start.eq_(0),
                |b| {
                    // The first block's pairs are the best so far.
                    let first = t.best[0];
                    b.set_validshape(first, 1, len.clone() * 2);
                    b.mov(first, t.blk);
                    b.set_validshape(first, 1, keep.clone() * 2);
                },
                |b| {
                    // Chunk g merges best[(g + 1) % 2] (have pairs) and blk into best[g % 2].
                    let parity = g % 2;
                    for (cur, prev, p) in [(t.best[0], t.best[1], 0), (t.best[1], t.best[0], 1)] {
                        b.if_(parity.clone().eq_(p), |b| {
                            b.set_validshape(prev, 1, have.clone() * 2);
                            b.set_validshape(cur, 1, keep.clone() * 2);
                            // The best so far holds the smaller indices: it goes where ties win.
                            b.if_else(
                                Expr::from(later_first).eq_(0),
                                |b| b.mrgsort_lists(cur, t.merge_tmp, [prev.into(), t.blk.into()]),
                                |b| b.mrgsort_lists(cur, t.merge_tmp, [t.blk.into(), prev.into()]),
                            );
                        });
                    }
                },
            );
        });
        // The next window's indices (none after the last: a row of at most one window, as
        // V3.2's segments of 512 are, adds nothing).
        b.if_((Expr::from(win) + 1).lt(windows.clone()), |b| {
            b.binary_scalar(BinaryOp::Add, t.idx, t.idx, WINDOW as f64);
        });
    });
    let m = n.min(k);
    let last = (chunks - 1) % 2;
    for (p, best) in t.best.iter().enumerate() {
        b.if_(m.clone().gt(0).and(last.clone().eq_(p as i64)), |b| {
            b.store(
                GmView::nd(
                    row.out,
                    row.out_offset.clone(),
                    1,
                    m.clone() * 2,
                    m.clone() * 2,
                ),
                *best,
            );
        });
    }
    let missing = Expr::from(k) - m.clone();
    b.if_(missing.clone().gt(0), |b| {
        b.set_validshape(t.pads, 1, missing.clone() * 2);
        b.store(
            GmView::nd(
                row.out,
                row.out_offset.clone() + m * 2,
                1,
                missing.clone() * 2,
                missing * 2,
            ),
            t.pads,
        );
    });
}

/// The standalone kernel: `out [1, 2k]` = the best `k` pairs of `scores [1, n]` (`n` a runtime
/// argument), on AIV 0 of one block. Arguments: `scores`, `lanes` (u32 `[1, WINDOW]`, [`lanes`]),
/// `n`, `out`.
pub fn topk(p: &TopkParams) -> Kernel {
    let k = p.k;
    let mut kb = KernelBuilder::new(format!("topk_{k}"));
    let n = kb.scalar("n", DType::I32);
    let scores = kb.input("scores", DType::F32, [Expr::from(1), Expr::Param(n)]);
    let lanes = kb.input("lanes", DType::U32, [1, WINDOW]);
    let out = kb.output("out", DType::F32, [1, 2 * k]);
    kb.range(n, 0.0, 8192.0);
    let t = TopkTiles::declare(&mut kb, "", k);
    kb.vector(|v| {
        v.if_(Expr::SubBlockIdx.eq_(0), |v| {
            let later_first = probe_tie_order(v, &t);
            let row = TopkRow {
                scores,
                offset: 0.into(),
                len: Expr::Param(n),
                lanes,
                lanes_offset: 0.into(),
                out,
                out_offset: 0.into(),
            };
            topk_row(v, &t, &row, later_first);
        });
    });
    kb.build()
}

/// The lanes argument: `0 .. WINDOW` as u32.
pub fn lanes() -> Vec<i64> {
    (0..WINDOW as i64).collect()
}
