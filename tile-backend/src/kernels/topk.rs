//! Top-k selection on the vector core from the sort instructions (A5-FACTS §6): a row of f32
//! scores of runtime length streams through UB 32 at a time; TSORT32 sorts each chunk into
//! (value, index) pairs, a two-list TMRGSORT merges it into the best pairs so far and keeps at
//! most `k` (the merge stops at `k`); the result is the best `k` pairs, descending, equal scores
//! by the smaller index, `(-inf, -1)` pairs where the row has fewer than `k` scores.
//!
//! ```text
//!  scores[off + 32c ..] --TLOAD--> chunk --TSORT32(idx = lanes + 32c)--> blk (sorted pairs)
//!  best_{c-1}, blk --TMRGSORT (2 lists, dst keeps min(k, ..) pairs)--> best_c
//!  best_last --TSTORE--> out[0 .. 2m];  pads --TSTORE--> out[2m .. 2k]      (m = min(n, k))
//! ```
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
/// `40 * ceil32(k) + 1 KiB` bytes).
#[derive(Debug, Clone, Copy)]
pub struct TopkTiles {
    /// `k`.
    pub k: u64,
    /// One chunk of scores, `[1, 32]` f32, runtime valid columns.
    pub chunk: TileId,
    /// The chunk's indices, `[1, 32]` u32 (the lanes plus the chunk's start).
    pub idx: TileId,
    /// The chunk sorted: `[1, 64]` f32 pairs, runtime valid columns.
    pub blk: TileId,
    /// TSORT32's tail scratch, `[1, 32]` f32.
    pub tail: TileId,
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
            chunk: tile("chunk", vec_f32(CHUNK).dynamic()),
            idx: tile("idx", vec_u32(CHUNK)),
            blk: tile("blk", vec_f32(pc * CHUNK).dynamic()),
            tail: tile("tail", vec_f32(CHUNK)),
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
    for (list, index) in [(pa, 0.0), (pb, 1.0)] {
        b.fill(t.tail, 1.0);
        b.fill(t.idx, index);
        b.set_validshape(list, 1, pc * CHUNK as i64);
        b.sort32(list, t.tail, t.idx);
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
    /// The lanes tensor (u32; PTO's TCI is not in the IR yet): 32 consecutive u32 at
    /// `lanes_offset` are the indices of the row's first chunk (`0..32` for a row whose indices
    /// are its positions; `s..s + 32` for a segment of a longer row starting at `s`).
    pub lanes: ParamId,
    /// Where the row's 32 lanes start in `lanes` (elements).
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
    let n = row.len.clone();
    let chunks = n.clone().ceil_div(CHUNK as i64);
    b.load(
        t.idx,
        GmView::nd(
            row.lanes,
            row.lanes_offset.clone(),
            1,
            CHUNK as i64,
            CHUNK as i64,
        ),
    );
    b.for_range("chunk", 0, chunks.clone(), 1, |b, c| {
        let start = Expr::from(c) * CHUNK as i64;
        let len = (n.clone() - start.clone()).min(CHUNK as i64);
        b.set_validshape(t.chunk, 1, len.clone());
        b.load(
            t.chunk,
            GmView::nd(
                row.scores,
                row.offset.clone() + start.clone(),
                1,
                len.clone(),
                len.clone(),
            ),
        );
        let have = start.clone().min(k);
        let keep = (start + len.clone()).min(k);
        let pairs = Expr::from(2 * CHUNK as i64);
        b.if_else(
            Expr::from(c).eq_(0),
            |b| {
                // The first chunk's sorted pairs are the best so far.
                let first = t.best[0];
                b.set_validshape(first, 1, pairs.clone());
                b.sort32_tail(first, t.chunk, t.idx, t.tail);
                b.set_validshape(first, 1, keep.clone() * 2);
            },
            |b| {
                b.set_validshape(t.blk, 1, pairs.clone());
                b.sort32_tail(t.blk, t.chunk, t.idx, t.tail);
                b.set_validshape(t.blk, 1, len.clone() * 2);
                // Chunk c merges best[(c + 1) % 2] (have pairs) and blk into best[c % 2].
                let parity = Expr::from(c) % 2;
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
        b.binary_scalar(BinaryOp::Add, t.idx, t.idx, CHUNK as f64);
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
/// argument), on AIV 0 of one block. Arguments: `scores`, `lanes` (u32 `[1, 32]`, 0..32), `n`,
/// `out`.
pub fn topk(p: &TopkParams) -> Kernel {
    let k = p.k;
    let mut kb = KernelBuilder::new(format!("topk_{k}"));
    let n = kb.scalar("n", DType::I32);
    let scores = kb.input("scores", DType::F32, [Expr::from(1), Expr::Param(n)]);
    let lanes = kb.input("lanes", DType::U32, [1, CHUNK]);
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

/// The lanes argument: `0 .. 32` as u32.
pub fn lanes() -> Vec<i64> {
    (0..CHUNK as i64).collect()
}
