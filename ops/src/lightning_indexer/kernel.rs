//! The lightning indexer's tile kernels and the host code that launches them.
//!
//! CONTRACT (the op layer in `mod.rs` calls exactly this): `run` receives a validated
//! [`IndexerCall`], q and the weights (contiguous), and the key cache it describes; `plan` is
//! the call's one launch plan, which `run` and `tileops emit --op lightning-indexer` both
//! launch from.
//!
//! # Kernels
//!
//! Three kernels, the third launched once a level of its merge tree (the IR has no grid-wide
//! barrier; a row's top-k needs all of its scores):
//!
//! 1. `indexer_scores_<dtype>_h<H>_d<D>`: the scores of every visible position into an f32
//!    workspace `ws [T, L]` (`L` the longest context). Work items are (row, split): each row's
//!    tiles of `TILE_N` positions are cut into `splits` runs so that a decode batch of a few rows
//!    still fills the device's clusters. Per tile, the cube gathers the keys of positions
//!    `p0 .. p0 + nv` straight into L1 through the row's block table (`gather_in_l1`, as the
//!    attention ops do), and multiplies `Q [Hp, D] · K^T` (K-sliced when `D` or `H` is wide);
//!    the Fixpipe hands `S [Hp, nv]` to AIV 0 (SingleModeVec0, channel `s`), which takes
//!    ReLU, multiplies row `h` by `w_h` (a row broadcast) and sums the columns (TCOLSUM: the
//!    head sum lands as the `[1, nv]` row the sort reads).
//!
//!    ```text
//!    cube per tile:   MTE2 gather_in_l1(k_l1 <- cache rows of positions p0 ..)   (fillpad tail)
//!                     MTE1 q_l1 / kt_l1 slices -> L0A / L0B;  M  acc = Q K^T (+ acc)
//!                     FIX  acc -> s_ub (AIV0)                                     channel s
//!    AIV0 per tile:   poison = s_ub[H, :]   (row H of Q is zero: 0 . k, NaN iff k is not finite)
//!                     s_ub = relu(s_ub) * w (row broadcast);  score = colsum(s_ub) + poison
//!                     score += 0 * score (±inf -> NaN);  score = max(score, -inf) (NaN -> -inf)
//!                     MTE3 score -> ws[t, p0 .. p0 + nv]
//!    ```
//!
//!    Why the head sum runs on the vector core and not as a second matmul `w [1, H] · ReLU(S)`:
//!    the second matmul needs ReLU(S) back in L1 (Acc -> Mat through the Fixpipe, with the
//!    transposed S^T so that the NZ result reads as the ZN right operand) and an f32 matmul at
//!    a quarter of the cube's rate for an M of 1 padded to 16; it saves the vector core one row
//!    broadcast and one column sum per tile (~300 cycles for `[80, 128]` f32, ASCEND950.md §10),
//!    while the Fixpipe would still move S once. Either way the vector core's sort dominates
//!    (see docs/ops.md), so the simpler form is kept; the matmul form is the next step if the
//!    score half ever bounds the kernel.
//!
//! 2. `indexer_topk_<k>`: each row's scores are cut into segments (runs of a multiple of 32,
//!    as many as give every AIV of the target one, at least [`MIN_SEGMENT`] scores each, and
//!    more where a segment would be longer than [`SEGMENT_WORK`]` / k`: V3.2's decode, 4 rows
//!    on 64 AIVs, 16 segments of 512 a row; at a context of 131072, 256 a row); each AIV takes
//!    segments and selects the best `k` of each with `tile_backend::kernels::topk_row` (one
//!    DMA and one TSORT32 per 512 scores, then each 32-pair block merged by TMRGSORT into the
//!    best so far, keeping at most `k`; the indices start at the segment's first position
//!    through its lanes) into a workspace `parts [segments, 2k]`.
//! 3. `indexer_merge_<k>` (only when a row has more than one segment; otherwise the host takes
//!    each row's one segment list as its result): a merge tree, one launch a level
//!    (`IndexerPlan::merge_levels`). Each level pairs every row's lists in order, lists `2i`
//!    and `2i + 1` into list `i` (one TMRGSORT of two lists keeping the best `k`; the list with
//!    the smaller indices goes where the probed tie order makes ties win; an odd last list is
//!    copied), every AIV taking entries, so a row's `n` lists take `ceil(log2 n)` levels spread
//!    over the AIVs instead of `n - 1` merges on one. The last level stores each row's first
//!    `min(k, context)` `(value, index)` pairs into `out [T, 2k]`; the host reads no further
//!    (-1 past them). Exact, and independent of TMRGSORT's cross-list tie order, as `topk_row`
//!    is.
//!
//! Host-made work lists keep every loop free of empty iterations (rows with an empty context
//! get no item, no segment and no merge): an iteration without work would set its flags with
//! nothing to order them (the simulator reports a lost signal).
//!
//! # Non-finite data (docs/ops.md)
//!
//! The host sets a row's weights to NaN when its q or weights hold a value that is not finite
//! (so every score of the row is NaN), and gives the kernel `Hp = ceil16(H + 1)` rows of q with
//! rows `H..` zero: row `H` of `S` is `0 · k`, 0 for a finite key and NaN otherwise (ReLU
//! would hide a key of -inf). The kernel maps NaN to -inf before the sort; a kept pair whose
//! value is -inf (every finite score is finite: ±inf became NaN) is a NaN score, which the host
//! restores. The sort sees no NaN.
//!
//! # Dtypes
//!
//! The cube multiplies one dtype: the key cache's (f32, f16, bf16 or FP8 e4m3). q is converted
//! on the host to it when that is exact (q of the same dtype, bf16/f16 q with f32 keys, FP8 q
//! with any plain keys); with bf16 keys, f32 or f16 q is split into three bf16 parts `hi + mid
//! + lo` (exact) whose three products accumulate in the f32 Acc (three matmuls a K slice: the
//! cube's arithmetic is not what bounds the kernel). f32 or bf16 q with f16 keys (f16's range
//! cannot hold the parts) is [`OpError::NoKernel`].
//!
//! FP8 keys run as DeepSeek-V3.2 runs them: FP8 q (`quantize_index_q`, its scales folded into
//! the weights by the caller) times FP8 keys, e4m3 x e4m3 into the f32 Acc, at `D = 128` (one
//! scale per key). The keys are gathered into L1 as their bytes (int8: the gather's documented
//! dtypes, ASCEND950.md §8) and read as e4m3 through a reinterpret. A key's scale multiplies
//! its score after the head sum, `I = s_k * sum_h w_h ReLU(q_h . k)` (a scale is positive, so
//! it commutes with ReLU): AIV0 reads the tile's scales through the row's block table, one DMA
//! per block's run of the tile ([`scale_piece`]: the block size when it divides 128 and is at
//! least 8, 128 when it is a multiple of 128; other block sizes, FP8 keys with a q that is not
//! FP8, and `D` past 128 are `NoKernel`), each run landing at its place of a `[1, 128]` f32 row
//! placed by hand. ue8m0 scales arrive as their codes and become `2^(c - 127)` on the vector
//! core without a rounding step: u8 -> f16 -> i32 (TCVT), times `2^23` and at least `2^22`
//! (TMULS, TMAXS on i32), read as f32 (the bits of `2^(c - 127)`; code 0 the subnormal
//! `2^-127`, code 255 +inf, which turns the score NaN as the NaN the Reference reads).

use super::{IndexerCall, OP};
use crate::backend::Backend;
use crate::bridge::{self, gm_i32};
use crate::error::OpError;
use crate::limits::MAX_INDEXER_KERNEL_TOPK;
use crate::registry::{Checked, Launch, LightningIndexerShape};
use crate::runtime::{compiled, PlanTarget};
use crate::templates::common::round_up;
use candle_core::{DType as CDType, Tensor};
use tile_backend::dsl::{Body, Gather, KernelBuilder, Reinterpret};
use tile_backend::ir::{
    c0, AccToVecMode, Axis, BinaryOp, CoreKind, DType, Expr, GmView, Kernel, Layout, MemSpace,
    PadValue, ParamId, RoundMode, TileId, TileType, UnaryOp,
};
use tile_backend::kernels::{probe_tie_order, topk_row, TopkRow, TopkTiles, CHUNK, WINDOW};
use tile_backend::launch::{Arg, GmInput, GmTensor};

/// Positions scored per cube tile (one gathered L1 tile, one matmul, one Fixpipe handoff).
pub const TILE_N: u64 = 128;

/// Fewest scores per top-k segment (but a shorter row's one): below it the merge of one more
/// list costs more than the segment's own selection saves.
pub const MIN_SEGMENT: u64 = 512;

/// Bounds a top-k segment's length `L` by `L * k <= SEGMENT_WORK` (but at least
/// [`MIN_SEGMENT`]): a longer row is cut into more segments than the target has AIVs (each AIV
/// takes several). A segment's selection merges each 32 scores into its best `min(k, seen)`
/// so far, so its cost per score grows with its length up to `k`, where the merge tree adds one
/// pass over the pairs a level (V3.2's top-2048: segments of 512; a top-32 keeps the AIV-count
/// segments, whose merges are cheap).
pub const SEGMENT_WORK: u64 = 1 << 20;

/// L0A / L0B capacity per operand tile (bytes): one tile each.
const L0_BYTES: u64 = 64 * 1024;

/// The static shape of the score kernel (its compile key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ScoreKernel {
    /// The matmul dtype (the key cache's): f32, f16 or bf16.
    pub dtype: DType,
    /// Indexer heads `H`.
    pub heads: u64,
    /// Values per head and key `D`.
    pub head_dim: u64,
    /// Parts q is split into: 1, or 3 for q wider than bf16 keys (q = hi + mid + lo, each
    /// part bf16, the three products accumulated in f32: `split_q`).
    pub q_parts: u64,
    /// The keys' scales (FP8 keys) or none.
    pub scales: KeyScales,
}

/// The per-key scales of FP8 keys, as the score kernel reads them (`D` = 128: one scale per key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyScales {
    /// Plain keys (f32, f16, bf16): no scales.
    None,
    /// FP8 e4m3 keys with one scale per key, f32 or ue8m0 codes (`2^(c - 127)`), read in
    /// pieces of `piece` positions, one block's run each (the block size when it divides
    /// [`TILE_N`], else [`TILE_N`]: a tile then lies in one block).
    Fp8 {
        /// The scales are ue8m0 codes (u8) rather than f32.
        ue8m0: bool,
        /// Positions per scale load.
        piece: u64,
    },
}

/// The piece width of FP8 key scales for blocks of `block_size` slots (`None`: the kernel
/// cannot place a block's run of scales in its UB row: the block size neither divides
/// [`TILE_N`] with pieces of at least 8 scales, 32 bytes, nor is a multiple of it).
pub fn scale_piece(block_size: u64) -> Option<u64> {
    if block_size.is_multiple_of(TILE_N) {
        Some(TILE_N)
    } else if TILE_N.is_multiple_of(block_size) && block_size >= 8 {
        Some(block_size)
    } else {
        None
    }
}

impl ScoreKernel {
    /// q's rows in the kernel: `H` heads and at least one zero row (the key-poison row).
    pub fn rows(&self) -> u64 {
        round_up(self.heads + 1, 16)
    }

    /// `D` padded to the cube's fractal (C0 and 16).
    pub fn dp(&self) -> u64 {
        round_up(round_up(self.head_dim, c0(self.dtype)), 16)
    }

    /// The K slice per matmul: the widest of 256, 128, .., 16 that divides `Dp` and keeps
    /// both L0 operand tiles within their buffers (`None`: `H` is too wide for L0A).
    pub fn k_slice(&self) -> Option<u64> {
        let es = self.dtype.size_bytes();
        [256u64, 128, 64, 32, 16].into_iter().find(|&ks| {
            self.dp().is_multiple_of(ks)
                && ks.is_multiple_of(c0(self.dtype))
                && self.rows() * ks * es <= L0_BYTES
                && ks * TILE_N * es <= L0_BYTES
        })
    }
}

/// The score kernel (module docs, launch 1). Arguments (bound by name): scalars `rows` (T),
/// `items` (work items), `len_stride` (L), `pos_len`, `max_blocks`, `slots`
/// (cache rows), `block_size`; tensors `q [T * Hp, D]` (the matmul dtype, rows `H..Hp` of each
/// token zero), `w [T, Hp]` f32, `cache [slots, D]`, `positions [1, pos_len]` i32 (`0, 1, ..`),
/// `block_table [T, max_blocks]` i32, `context_lens [1, T]` i32, `work [1, 3 items]` i32 (each
/// item's row and tiles `j0..j1`, non-empty), `ws [T, L]` f32 (output).
pub fn score_kernel(p: &ScoreKernel) -> Kernel {
    let (dt, h, d) = (p.dtype, p.heads, p.head_dim);
    let (hp, dp, tn) = (p.rows(), p.dp(), TILE_N);
    let ks = p.k_slice().unwrap_or(16);
    let nks = dp / ks;
    let parts = p.q_parts.max(1);
    let name = match (parts > 1, p.scales) {
        (true, _) => format!("indexer_scores_{dt}_h{h}_d{d}_q{parts}"),
        (false, KeyScales::None) => format!("indexer_scores_{dt}_h{h}_d{d}"),
        (false, KeyScales::Fp8 { ue8m0, piece }) => format!(
            "indexer_scores_{dt}_h{h}_d{d}_{}_p{piece}",
            if ue8m0 { "ue8m0" } else { "f32s" }
        ),
    };
    let mut kb = KernelBuilder::new(name);
    let scalar = |kb: &mut KernelBuilder, name: &str| Expr::Param(kb.scalar(name, DType::I64));
    let rows = scalar(&mut kb, "rows");
    let items = scalar(&mut kb, "items");
    let lstride = scalar(&mut kb, "len_stride");
    let pos_len = scalar(&mut kb, "pos_len");
    let maxb = scalar(&mut kb, "max_blocks");
    let slots = scalar(&mut kb, "slots");
    let bs = scalar(&mut kb, "block_size");
    let q = kb.input("q", dt, [rows.clone() * (hp * parts) as i64, Expr::from(d)]);
    let w = kb.input("w", DType::F32, [rows.clone(), Expr::from(hp)]);
    // FP8 keys travel as int8 bytes (the gather is a DMA: its documented dtypes hold int8,
    // not fp8, ASCEND950.md §8) and the cube reads them as e4m3 through a reinterpret.
    let gather_dt = if dt == DType::F8E4M3 { DType::I8 } else { dt };
    let cache = kb.input("cache", gather_dt, [slots.clone(), Expr::from(d)]);
    let key_scales = match p.scales {
        KeyScales::None => None,
        KeyScales::Fp8 { ue8m0, piece } => {
            let sdt = if ue8m0 { DType::U8 } else { DType::F32 };
            Some((
                kb.input("scales", sdt, [Expr::from(1), slots.clone()]),
                ue8m0,
                piece,
            ))
        }
    };
    let pos = kb.input("positions", DType::I32, [Expr::from(1), pos_len.clone()]);
    let bt = kb.input("block_table", DType::I32, [rows.clone(), maxb.clone()]);
    let lens = kb.input("context_lens", DType::I32, [Expr::from(1), rows.clone()]);
    let work = kb.input("work", DType::I32, [Expr::from(1), items.clone() * 3]);
    let ws = kb.output("ws", DType::F32, [rows.clone(), lstride.clone()]);

    use Layout::{DN, ND, NZ, ZN};
    use MemSpace::{Acc, Left, Mat, Right, Vec as Ub};
    let ty = TileType::new;
    let q_l1 = kb.tile_group(
        "q_l1",
        ty(Mat, dt, hp, dp, NZ).valid(h, d).pad(PadValue::Zero),
        parts as u32,
    );
    let k_l1 = kb.tile(
        "k_l1",
        ty(Mat, gather_dt, tn, dp, NZ).dynamic().pad(PadValue::Zero),
    );
    let kt_l1 = kb.reinterpret(
        "kt_l1",
        k_l1,
        Reinterpret {
            dtype: (gather_dt != dt).then_some(dt),
            shape: Some((dp, tn)),
            layout: Some(ZN),
        },
    );
    let q_l0 = kb.tile("q_l0", ty(Left, dt, hp, ks, NZ));
    let kt_l0 = kb.tile("kt_l0", ty(Right, dt, ks, tn, ZN));
    let acc = kb.tile("acc", ty(Acc, DType::F32, hp, tn, NZ).dynamic());
    let s_ub = kb.tile("s_ub", ty(Ub, DType::F32, hp, tn, ND).dynamic());
    let w_row = kb.tile("w_row", ty(Ub, DType::F32, 1, hp, ND));
    let w_col = kb.reinterpret(
        "w_col",
        w_row,
        Reinterpret {
            dtype: None,
            shape: Some((hp, 1)),
            layout: Some(DN),
        },
    );
    let row_ty = ty(Ub, DType::F32, 1, tn, ND).dynamic();
    let poison = kb.tile("poison", row_ty.clone());
    let score = kb.tile("score", row_ty.clone());
    let zero = kb.tile("zero", row_ty.clone());
    let neg_inf = kb.tile("neg_inf", row_ty);
    let ch = kb.channel("s", CoreKind::Cube, 1);
    // FP8 keys: the tile's scales, one block's run (piece) at a time into its place of the
    // row; the pieces are placed by hand (no planned tile or reinterpret can alias a part of
    // another), at the start of UB (the planner keeps its tiles clear of them).
    let scale_tiles = key_scales.map(|(gm, ue8m0, piece)| {
        let pieces = tn / piece;
        let row = kb.tile_at("key_scale", ty(Ub, DType::F32, 1, tn, ND).dynamic(), 0);
        // ue8m0: the same bytes as i32, where the f32 bit patterns are built.
        let bits =
            ue8m0.then(|| kb.tile_at("key_scale_bits", ty(Ub, DType::I32, 1, tn, ND).dynamic(), 0));
        let piece_ty = |dt| ty(Ub, dt, 1, piece, ND).dynamic();
        let at = |j: u64| j * piece * 4;
        let dst: Vec<TileId> = (0..pieces)
            .map(|j| {
                let dt = if ue8m0 { DType::I32 } else { DType::F32 };
                kb.tile_at(format!("key_scale_{j}"), piece_ty(dt), at(j))
            })
            .collect();
        // ue8m0: the codes land in `code` and widen to i32 through f16 (TCVT u8 -> f16 -> i32).
        let codes = ue8m0.then(|| {
            (
                kb.tile("key_scale_code", ty(Ub, DType::U8, 1, tn, ND).dynamic()),
                kb.tile("key_scale_half", ty(Ub, DType::F16, 1, tn, ND).dynamic()),
            )
        });
        ScaleTiles {
            gm,
            piece,
            row,
            bits,
            dst,
            codes,
        }
    });

    // The work item's coordinates: row t, its tiles j0..j1 (empty when the split has none).
    // The work item's coordinates, from the host's list: row t, its tiles j0..j1 (never
    // empty: an empty item would set its flags with no work to order them).
    let coords = |b: &mut Body<'_>, item: Expr| {
        let at = item * 3;
        let t = b.read_scalar("t", work, at.clone());
        let j0 = b.read_scalar("j0", work, at.clone() + 1);
        let j1 = b.read_scalar("j1", work, at + 2);
        let ctx = b.read_scalar("ctx", lens, Expr::Var(t));
        (t, ctx, j0, j1)
    };
    // This block's items: block_idx, block_idx + block_num, .. (a count, no test per item).
    let mine = (items.clone() - Expr::BlockIdx + Expr::BlockDim - 1).max(0) / Expr::BlockDim;
    let each_item = |b: &mut Body<'_>, f: &mut dyn FnMut(&mut Body<'_>, Expr)| {
        b.for_range("it", 0, mine.clone(), 1, |b, it| {
            f(b, Expr::BlockIdx + Expr::Var(it) * Expr::BlockDim)
        });
    };

    kb.cube(|c| {
        each_item(c, &mut |c, item| {
            let (t, ctx, j0, j1) = coords(c, item);
            {
                for part in 0..parts {
                    let at = (Expr::Var(t) * parts as i64 + part as i64) * (hp * d) as i64;
                    c.load(q_l1.at(part), GmView::nd(q, at, h, d, d));
                    c.fillpad(q_l1.at(part));
                }
                c.for_range("j", Expr::Var(j0), Expr::Var(j1), 1, |c, j| {
                    let p0 = c.let_("p0", Expr::Var(j) * tn as i64);
                    let nv = c.let_("nv", (Expr::Var(ctx) - Expr::Var(p0)).min(tn as i64));
                    c.set_validshape(k_l1, Expr::Var(nv), d as i64);
                    c.gather_in_l1(Gather {
                        dst: k_l1.into(),
                        src: cache,
                        indices: GmView::nd(pos, Expr::Var(p0), 1, Expr::Var(nv), pos_len.clone()),
                        block_table: GmView::nd(
                            bt,
                            Expr::Var(t) * maxb.clone(),
                            1,
                            maxb.clone(),
                            maxb.clone(),
                        ),
                        block_size: bs.clone(),
                        size: d,
                        col_offset: 0.into(),
                        is_b_matrix: true,
                        is_trans: true,
                    });
                    c.fillpad(k_l1);
                    c.set_validshape(kt_l1, dp as i64, tn as i64);
                    c.set_validshape(acc, hp as i64, Expr::Var(nv));
                    for s in 0..nks {
                        c.mov(kt_l0, kt_l1).offset((s * ks) as i64, 0);
                        for part in 0..parts {
                            c.mov(q_l0, q_l1.at(part)).offset(0, (s * ks) as i64);
                            if s == 0 && part == 0 {
                                c.matmul(acc, q_l0, kt_l0);
                            } else {
                                c.matmul_acc(acc, q_l0, kt_l0);
                            }
                        }
                    }
                    c.acquire(ch);
                    c.set_validshape(s_ub, hp as i64, Expr::Var(nv));
                    c.mov(s_ub, acc).mode(AccToVecMode::SingleModeVec0);
                    c.push(ch);
                });
            }
        });
    });

    // AIV 0 does the vector work; AIV 1 only pops and releases the channel's slots (the
    // Fixpipe writes AIV 0's UB alone), in a branch of its own so that no intra-core flag of
    // AIV 0's work is set on an AIV 1 pipe with nothing to order it.
    kb.vector(|v| {
        v.if_else(
            Expr::SubBlockIdx.eq_(0),
            |v| {
                // -inf as -1e20 * 1e20 (a non-finite literal does not survive the kernel's JSON).
                v.set_validshape(neg_inf, 1, tn as i64);
                v.fill(neg_inf, -1.0e20);
                v.muls(neg_inf, neg_inf, 1.0e20);
                each_item(v, &mut |v, item| {
                    let (t, ctx, j0, j1) = coords(v, item);
                    {
                        v.load(w_row, GmView::nd(w, Expr::Var(t) * hp as i64, 1, hp, hp));
                        v.set_validshape(w_col, hp as i64, 1);
                        v.for_range("j", Expr::Var(j0), Expr::Var(j1), 1, |v, j| {
                            let p0 = v.let_("p0", Expr::Var(j) * tn as i64);
                            let nv = v.let_("nv", (Expr::Var(ctx) - Expr::Var(p0)).min(tn as i64));
                            if let Some(st) = &scale_tiles {
                                let table = Expr::Var(t) * maxb.clone();
                                st.gather(v, table, bt, bs.clone(), Expr::Var(p0), Expr::Var(nv));
                            }
                            v.pop(ch);
                            v.set_validshape(s_ub, hp as i64, Expr::Var(nv));
                            for tile in [poison, score, zero, neg_inf] {
                                v.set_validshape(tile, 1, Expr::Var(nv));
                            }
                            v.mov(poison, s_ub).offset(h as i64, 0);
                            v.unary(UnaryOp::Relu, s_ub, s_ub);
                            v.broadcast(BinaryOp::Mul, Axis::Row, s_ub, s_ub, w_col);
                            v.col_sum(score, s_ub);
                            v.release(ch);
                            if let Some(st) = &scale_tiles {
                                // s_k * sum_h w_h ReLU(q_h . k): the scale is positive (or
                                // not finite: then so is the score, which becomes NaN below).
                                v.mul(score, score, st.row);
                            }
                            v.add(score, score, poison);
                            v.muls(zero, score, 0.0);
                            v.add(score, score, zero);
                            v.max(score, score, neg_inf);
                            let at = Expr::Var(t) * lstride.clone() + Expr::Var(p0);
                            let dst = GmView::nd(ws, at, 1, Expr::Var(nv), lstride.clone());
                            v.store(dst, score);
                        });
                    }
                });
            },
            |v| {
                each_item(v, &mut |v, item| {
                    let (_, _, j0, j1) = coords(v, item);
                    v.for_range("j", Expr::Var(j0), Expr::Var(j1), 1, |v, _| {
                        v.pop(ch);
                        v.release(ch);
                    });
                });
            },
        );
    });
    kb.build()
}

/// The UB tiles of an FP8 score kernel's key scales (`score_kernel`).
struct ScaleTiles {
    /// The scales in GM, `[1, slots]` f32 or u8 (ue8m0 codes).
    gm: ParamId,
    /// Positions per piece.
    piece: u64,
    /// The tile's scales, `[1, TILE_N]` f32 (valid: the tile's positions).
    row: TileId,
    /// ue8m0: the same bytes as i32, where the f32 bit patterns are built.
    bits: Option<TileId>,
    /// Piece `j` of the row (positions `j * piece ..`), f32 or (ue8m0) i32.
    dst: Vec<TileId>,
    /// ue8m0: the staging tiles of a piece's codes (u8) and their f16 widening.
    codes: Option<(TileId, TileId)>,
}

impl ScaleTiles {
    /// Reads the scales of positions `p0 .. p0 + nv` of the row whose block table starts at
    /// entry `table` of `bt` into `row`: piece `j` (positions `p0 + j * piece ..`, one block's
    /// run) is one DMA from the slot its block holds. Every piece is read, so that no flag of
    /// the piece's tiles is set on a skipped path: a piece past the tile's `nv` positions reads
    /// the one scale of the tile's last position (a slot the row sees) into a part of the row
    /// past its valid length. ue8m0 codes `c` become `2^(c - 127)` exactly: `max(c << 23, 1 <<
    /// 22)` as f32 bits (`c << 23` as an i32 product; code 0 is the subnormal `2^-127`; 255 is
    /// +inf, whose scores turn NaN as a NaN scale's do).
    fn gather(&self, v: &mut Body<'_>, table: Expr, bt: ParamId, bs: Expr, p0: Expr, nv: Expr) {
        let piece = self.piece as i64;
        for (j, &dst) in self.dst.iter().enumerate() {
            let start = j as i64 * piece;
            let n = v.let_("sn", (nv.clone() - start).min(piece).max(1));
            let pos = v.let_("spos", p0.clone() + (nv.clone() - 1).min(start));
            let blk = v.read_scalar("sblk", bt, table.clone() + Expr::Var(pos) / bs.clone());
            let slot = Expr::Var(blk) * bs.clone() + Expr::Var(pos) % bs.clone();
            let src = GmView::nd(self.gm, slot, 1, Expr::Var(n), Expr::Var(n));
            match self.codes {
                None => {
                    v.set_validshape(dst, 1, Expr::Var(n));
                    v.load(dst, src);
                }
                Some((code, half)) => {
                    for tile in [code, half, dst] {
                        v.set_validshape(tile, 1, Expr::Var(n));
                    }
                    v.load(code, src);
                    v.cast(half, code, RoundMode::Rint);
                    v.cast(dst, half, RoundMode::Rint);
                }
            }
        }
        if let Some(bits) = self.bits {
            v.set_validshape(bits, 1, nv.clone());
            v.muls(bits, bits, f64::from(1u32 << 23));
            v.binary_scalar(BinaryOp::Max, bits, bits, f64::from(1u32 << 22));
        }
        v.set_validshape(self.row, 1, nv);
    }
}

/// The segment top-k kernel (module docs, launch 2) for `k` pairs: entry `e` of `seg` is `(t,
/// start, len)`, a run of row `t`'s scores, and its best `k` pairs (indices `start ..`, from
/// the lanes `lanes[WINDOW e ..] = start + 0..WINDOW`) go to `parts[e]`. Arguments: scalars `rows`
/// (T), `len_stride` (L), `segs`; tensors `ws [T, L]` f32, `lanes [1, WINDOW segs]` u32, `seg [1,
/// 8 segs]` i32 (`(t, start, len)` and five zeros per entry, every entry non-empty), `parts
/// [segs, 2k]` f32 (output).
pub fn topk_kernel(k: u64) -> Kernel {
    let mut kb = KernelBuilder::new(format!("indexer_topk_{k}"));
    let rows = Expr::Param(kb.scalar("rows", DType::I64));
    let lstride = Expr::Param(kb.scalar("len_stride", DType::I64));
    let segs = Expr::Param(kb.scalar("segs", DType::I64));
    let ws = kb.input("ws", DType::F32, [rows, lstride.clone()]);
    let lanes = kb.input(
        "lanes",
        DType::U32,
        [Expr::from(1), segs.clone() * WINDOW as i64],
    );
    let seg = kb.input(
        "seg",
        DType::I32,
        [Expr::from(1), segs.clone() * ENTRY as i64],
    );
    let out = kb.output("parts", DType::F32, [segs.clone(), Expr::from(2 * k)]);
    let tiles = TopkTiles::declare(&mut kb, "", k);
    let entry = kb.tile(
        "seg_entry",
        TileType::new(MemSpace::Vec, DType::I32, 1, ENTRY, Layout::ND),
    );
    kb.vector(|v| {
        let later_first = probe_tie_order(v, &tiles);
        each_lane(v, segs.clone(), &mut |v, e| {
            // The segment's three numbers in one 32-byte DMA, read from UB.
            let n = ENTRY as i64;
            v.load(entry, GmView::nd(seg, e.clone() * n, 1, n, n));
            let r = v.read_tile_scalar("r", entry, 0);
            let start = v.read_tile_scalar("start", entry, 1);
            let len = v.read_tile_scalar("len", entry, 2);
            let row = TopkRow {
                scores: ws,
                offset: Expr::Var(r) * lstride.clone() + Expr::Var(start),
                len: Expr::Var(len),
                lanes,
                lanes_offset: e.clone() * WINDOW as i64,
                out,
                out_offset: e * (2 * k) as i64,
            };
            topk_row(v, &tiles, &row, later_first);
        });
    });
    kb.build()
}

/// Runs `f` for this AIV's share of `n` entries: `lane, lane + lanes, ..` with `lane = 2 *
/// block + sub_block` (a count, not a test per entry: an AIV with a skipped entry would set its
/// flags with nothing to order them).
fn each_lane(v: &mut Body<'_>, n: Expr, f: &mut dyn FnMut(&mut Body<'_>, Expr)) {
    let lanes_total = Expr::BlockDim * 2;
    let lane = Expr::BlockIdx * 2 + Expr::SubBlockIdx;
    let mine = (n - lane.clone() + lanes_total.clone() - 1).max(0) / lanes_total.clone();
    v.for_range("it", 0, mine, 1, |v, it| {
        f(v, lane + Expr::Var(it) * lanes_total)
    });
}

/// The merge kernel (module docs, launch 3): one level of the merge tree for `k` pairs. Entry
/// `i` of `pairs` is `(d, a, na, b, nb)` (then three zeros): `dst[d]` gets the best
/// `min(k, na + nb)` pairs of the lists `src[a]` (its first `na` pairs) and `src[b]` (its
/// first `nb`), where every index of list `a` is smaller than every index of list `b` (the
/// lists are runs of one row's segments in order), so ties go to `a` whatever TMRGSORT's
/// cross-list tie order; `nb = 0` copies list `a` (a row's odd list out, carried to the next
/// level). Only the first `min(k, na + nb)` pairs of `dst[d]` are written (the next level, and
/// the host, read no further). Arguments: scalars `srcs`, `dsts`, `entries`; tensors `src
/// [srcs, 2k]` f32, `pairs [1, 8 entries]` i32, `dst [dsts, 2k]` f32 (output).
pub fn merge_kernel(k: u64) -> Kernel {
    let mut kb = KernelBuilder::new(format!("indexer_merge_{k}"));
    let srcs = Expr::Param(kb.scalar("srcs", DType::I64));
    let dsts = Expr::Param(kb.scalar("dsts", DType::I64));
    let entries = Expr::Param(kb.scalar("entries", DType::I64));
    let src = kb.input("src", DType::F32, [srcs, Expr::from(2 * k)]);
    let pairs = kb.input(
        "pairs",
        DType::I32,
        [Expr::from(1), entries.clone() * ENTRY as i64],
    );
    let dst = kb.output("dst", DType::F32, [dsts, Expr::from(2 * k)]);
    let probe = TopkTiles::declare(&mut kb, "probe_", CHUNK);
    let k32 = k.div_ceil(CHUNK) * CHUNK;
    let list = TileType::new(MemSpace::Vec, DType::F32, 1, 2 * k32, Layout::ND).dynamic();
    let (la, lb, lo) = (
        kb.tile("list_a", list.clone()),
        kb.tile("list_b", list.clone()),
        kb.tile("merged", list),
    );
    let tmp = kb.tile(
        "merge_tmp",
        TileType::new(MemSpace::Vec, DType::F32, 1, 4 * k32, Layout::ND),
    );
    let entry = kb.tile(
        "entry",
        TileType::new(MemSpace::Vec, DType::I32, 1, ENTRY, Layout::ND),
    );
    let k = k as i64;
    kb.vector(|v| {
        let later_first = probe_tie_order(v, &probe);
        each_lane(v, entries, &mut |v, i| {
            // The entry's five numbers in one 32-byte DMA, then read from UB (five scalar
            // reads of GM would each wait the scalar path's GM latency).
            let e = ENTRY as i64;
            v.load(entry, GmView::nd(pairs, i * e, 1, e, e));
            let d = Expr::Var(v.read_tile_scalar("d", entry, 0));
            let a = Expr::Var(v.read_tile_scalar("a", entry, 1));
            let na = Expr::Var(v.read_tile_scalar("na", entry, 2));
            let b = Expr::Var(v.read_tile_scalar("b", entry, 3));
            let nb = Expr::Var(v.read_tile_scalar("nb", entry, 4));
            let nd = (na.clone() + nb.clone()).min(k);
            // Both lists loaded back to back (a copy entry, `nb = 0` and `b = a`, loads list `a`
            // twice), so that one flag after the second load hands both to the vector core and
            // the second load's transfer does not wait for the first one's latency.
            let nb_load = nb.clone() + na.clone() * nb.clone().eq_(0);
            v.set_validshape(la, 1, na.clone() * 2);
            v.load(la, GmView::nd(src, a * (2 * k), 1, na.clone() * 2, 2 * k));
            v.set_validshape(lb, 1, nb_load.clone() * 2);
            v.load(lb, GmView::nd(src, b * (2 * k), 1, nb_load * 2, 2 * k));
            v.if_else(
                nb.clone().eq_(0),
                |v| {
                    v.set_validshape(lo, 1, na.clone() * 2);
                    v.mov(lo, la);
                },
                |v| {
                    v.set_validshape(lo, 1, nd.clone() * 2);
                    // List `a` holds the smaller indices: it goes where ties win.
                    v.if_else(
                        Expr::from(later_first).eq_(0),
                        |v| v.mrgsort_lists(lo, tmp, [la.into(), lb.into()]),
                        |v| v.mrgsort_lists(lo, tmp, [lb.into(), la.into()]),
                    );
                },
            );
            v.set_validshape(lo, 1, nd.clone() * 2);
            v.store(GmView::nd(dst, d * (2 * k), 1, nd * 2, 2 * k), lo);
        });
    });
    kb.build()
}

/// Numbers per work-list entry of the top-k kernels, 32 bytes read with one DMA: a merge-tree
/// entry `(d, a, na, b, nb)` and three zeros, a segment `(t, start, len)` and five.
const ENTRY: u64 = 8;

/// One launch of the merge tree ([`merge_kernel`]): its entries `(d, a, na, b, nb, 0, 0, 0)`
/// and the lists it reads (`srcs`) and writes (`dsts`; the last level writes the result `[T, 2k]`, `d`
/// a row, where the others write a workspace for the next level).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct MergeLevel {
    /// `(d, a, na, b, nb, 0, 0, 0)` per entry ([`ENTRY`] numbers).
    pub entries: Vec<i64>,
    /// Lists of the source (the segment lists, or the level before's).
    pub srcs: usize,
    /// Lists of the destination.
    pub dsts: usize,
}

/// The top-k's host-made work lists ([`IndexerPlan::segments`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct Segments {
    /// `(t, start, len)` per segment.
    pub seg: Vec<i64>,
    /// `start + 0..WINDOW` per segment.
    pub lanes: Vec<i64>,
    /// `(t, e0, n, slen)` per row with a context.
    pub rows: Vec<i64>,
}

/// The launch plan of a call of `shape` on `target`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IndexerPlan {
    /// The score kernel's static shape.
    pub score: ScoreKernel,
    /// Pairs kept per row.
    pub k: u64,
    /// Tiles per work item of the score kernel (a row's tiles are cut into runs of this many).
    pub tps: u64,
    /// The most blocks the score kernel runs on (at most one per work item).
    pub blocks: u64,
}

impl IndexerPlan {
    /// The work items `(t, j0, j1)` of rows of `context_lens`: each row's tiles in runs of
    /// `tps` (none for an empty row).
    pub fn work(&self, context_lens: &[i64]) -> Vec<i64> {
        let mut work = Vec::new();
        for (t, &len) in context_lens.iter().enumerate() {
            let tiles = (len.max(0) as u64).div_ceil(TILE_N);
            let mut j0 = 0;
            while j0 < tiles {
                let j1 = (j0 + self.tps).min(tiles);
                work.extend([t as i64, j0 as i64, j1 as i64]);
                j0 = j1;
            }
        }
        work
    }

    /// Blocks of the segment top-k kernel for `n` segments, or of the merge kernel for `n`
    /// rows with a context (two an AIV pair, one block each).
    pub fn lane_blocks(&self, n: u64) -> u64 {
        n.div_ceil(2).min(self.blocks).max(1)
    }

    /// The top-k's work of rows of `context_lens`: the segments `(t, start, len)` (each row
    /// with a context cut into as many runs of a multiple of 32 scores as give every AIV of
    /// the target one, none shorter than [`MIN_SEGMENT`] but a row's last, and more where a
    /// run would be longer than [`SEGMENT_WORK`]` / k`), their lanes (`start + 0..WINDOW` each),
    /// and per row with a context `(t, e0, n, slen)` (its segments `e0 .. e0 + n`, each `slen`
    /// long but the last).
    pub fn segments(&self, context_lens: &[i64]) -> Segments {
        let busy = context_lens.iter().filter(|&&l| l > 0).count().max(1) as u64;
        let want = (2 * self.blocks).div_ceil(busy).max(1);
        let longest = (SEGMENT_WORK / self.k.max(1) / CHUNK * CHUNK).max(MIN_SEGMENT);
        let mut g = Segments::default();
        for (t, &len) in context_lens.iter().enumerate() {
            if len <= 0 {
                continue;
            }
            let len = len as u64;
            let n = want
                .min(len.div_ceil(MIN_SEGMENT))
                .max(len.div_ceil(longest));
            let slen = len.div_ceil(n).div_ceil(CHUNK) * CHUNK;
            let n = len.div_ceil(slen);
            let e0 = g.seg.len() / 3;
            g.rows.extend([t as i64, e0 as i64, n as i64, slen as i64]);
            for j in 0..n {
                let start = j * slen;
                g.seg
                    .extend([t as i64, start as i64, (len - start).min(slen) as i64]);
                g.lanes.extend((start..start + WINDOW).map(|x| x as i64));
            }
        }
        g
    }

    /// The merge tree of the rows of `g` (`rows` = T), one [`MergeLevel`] a launch; empty when
    /// no row has more than one segment (the host then takes each row's one list). Each level
    /// pairs every row's lists in order (lists `2i` and `2i + 1` become list `i`; an odd last
    /// list is carried by a copy) until each row has one, which the last level writes to the
    /// row's result: `ceil(log2(n))` levels for the most segments `n` of a row.
    pub fn merge_levels(&self, g: &Segments, rows: usize) -> Vec<MergeLevel> {
        let k = self.k as i64;
        // Each row with a context: its index and its lists as (list, pairs).
        let mut lists: Vec<(i64, Vec<(i64, i64)>)> = g
            .rows
            .chunks_exact(4)
            .map(|r| {
                let (t, e0, n) = (r[0], r[1], r[2]);
                let pairs_of = |e: i64| g.seg.get(e as usize * 3 + 2).map_or(0, |&l| l.min(k));
                (t, (e0..e0 + n).map(|e| (e, pairs_of(e))).collect())
            })
            .collect();
        let mut levels = Vec::new();
        if lists.iter().all(|(_, l)| l.len() <= 1) {
            return levels;
        }
        let mut srcs = g.seg.len() / 3;
        loop {
            let last = lists.iter().all(|(_, l)| l.len() <= 2);
            let mut entries = Vec::new();
            let mut next = 0i64;
            for (t, row) in &mut lists {
                *row = row
                    .chunks(2)
                    .map(|p| {
                        let (a, na) = p[0];
                        let (b, nb) = p.get(1).copied().unwrap_or((a, 0));
                        let d = if last { *t } else { next };
                        next += 1;
                        entries.extend([d, a, na, b, nb, 0, 0, 0]);
                        (d, (na + nb).min(k))
                    })
                    .collect();
            }
            let dsts = if last { rows } else { next as usize };
            levels.push(MergeLevel {
                entries,
                srcs,
                dsts,
            });
            if last {
                return levels;
            }
            srcs = dsts;
        }
    }

    /// Blocks of the score kernel for `items` work items.
    pub fn score_blocks(&self, items: u64) -> u64 {
        items.min(self.blocks).max(1)
    }

    /// The score kernel's cache key: its configuration.
    fn score_key(&self) -> &ScoreKernel {
        &self.score
    }

    /// The launches for the rows of `context_lens`, kernels as their builders write them: the
    /// scores, the segment top-k and, when a row has more than one segment, the merge.
    pub fn launches(&self, context_lens: &[i64]) -> Vec<Launch> {
        let rows = context_lens.len() as i64;
        let items = (self.work(context_lens).len() / 3) as u64;
        let g = self.segments(context_lens);
        let segs = (g.seg.len() / 3) as u64;
        let mut launches = vec![
            Launch {
                kernel: score_kernel(&self.score),
                block_dim: self.score_blocks(items),
                scalars: vec![("rows", rows), ("items", items as i64)],
            },
            Launch {
                kernel: topk_kernel(self.k),
                block_dim: self.lane_blocks(segs),
                scalars: vec![("rows", rows), ("segs", segs as i64)],
            },
        ];
        // One segment a row: the host takes the segment lists as the result, no merge.
        for level in self.merge_levels(&g, context_lens.len()) {
            let entries = level.entries.len() / ENTRY as usize;
            launches.push(Launch {
                kernel: merge_kernel(self.k),
                block_dim: self.lane_blocks(entries as u64),
                scalars: vec![
                    ("srcs", level.srcs as i64),
                    ("dsts", level.dsts as i64),
                    ("entries", entries as i64),
                ],
            });
        }
        launches
    }
}

/// The plan of `shape` on `target`: the longest row's tiles are cut into work items so that
/// the rows' items fill the target's concurrent blocks (a decode batch of 4 rows on 32
/// clusters: 8 items a row), the top-k kernel takes two rows a block.
pub(crate) fn plan(shape: &Checked<LightningIndexerShape>, target: PlanTarget) -> IndexerPlan {
    let s = shape;
    let score = ScoreKernel {
        dtype: s.key_dtype,
        heads: s.heads as u64,
        head_dim: s.head_dim as u64,
        q_parts: if s.key_dtype == DType::BF16 && matches!(s.dtype, DType::F32 | DType::F16) {
            3
        } else {
            1
        },
        scales: match (s.key_dtype, scale_piece(s.block_size as u64)) {
            (DType::F8E4M3, Some(piece)) => KeyScales::Fp8 {
                ue8m0: s.ue8m0,
                piece,
            },
            _ => KeyScales::None,
        },
    };
    let rows = s.tokens.max(1) as u64;
    let tiles = (s.context_len as u64).div_ceil(TILE_N).max(1);
    let blocks = target.concurrent_blocks() as u64;
    let splits = blocks.div_ceil(rows).clamp(1, tiles);
    let tps = tiles.div_ceil(splits);
    IndexerPlan {
        score,
        k: s.topk as u64,
        tps,
        blocks,
    }
}

/// Why the kernel backends cannot run a call of `shape` (`None`: they can).
pub(crate) fn unsupported(shape: &LightningIndexerShape) -> Option<&'static str> {
    match (shape.key_dtype, shape.dtype) {
        (DType::F8E4M3, DType::F8E4M3) if shape.head_dim != super::FP8_GROUP => Some(
            "FP8 keys of more than one scale group (the score kernel takes D = 128, one scale \
             per key, DeepSeek-V3.2's index_head_dim; use the reference backend)",
        ),
        (DType::F8E4M3, DType::F8E4M3) if scale_piece(shape.block_size as u64).is_none() => Some(
            "FP8 keys in blocks whose size neither divides 128 (with at least 8 slots) nor \
                 is a multiple of 128 (the score kernel reads a block's run of scales into its \
                 place in a 128-position row; use such a block size or the reference backend)",
        ),
        (DType::F8E4M3, DType::F8E4M3) => None,
        (DType::F8E4M3, _) => Some(
            "FP8 keys with a q that is not FP8 (the cube multiplies e4m3 by e4m3 only): quantise \
             q with quantize_index_q and fold its scales into the weights, as DeepSeek does, \
             or use the reference backend",
        ),
        (k, q) if k == q => None,
        // e4m3 values are exact in f32, f16 and bf16: q converts to the keys' dtype.
        (_, DType::F8E4M3) => None,
        (DType::F32, DType::BF16 | DType::F16) | (DType::BF16, DType::F32 | DType::F16) => None,
        _ => Some(
            "q wider than f16 keys (the cube multiplies one dtype; f16's range cannot hold a \
             split of q; pass q as f16 or use an f32 or bf16 cache)",
        ),
    }
}

/// Runs the indexer on the kernel backend of `runner`: `(indices [T, topk]` I32, `scores [T,
/// topk]` F32 if asked`)`.
///
/// # Errors
/// [`OpError::NoKernel`] for a dtype pair the kernel does not take (see [`unsupported`]);
/// [`OpError::Invalid`] for a top-k past [`MAX_INDEXER_KERNEL_TOPK`] or shapes past the machine's
/// buffers; kernel errors; [`OpError::DeviceUnavailable`] from the Ascend 950 runner's finish.
pub(crate) fn run(
    backend: Backend,
    q: &Tensor,
    weights: &Tensor,
    k_cache: &super::IndexKeyCache,
    call: &IndexerCall,
) -> Result<(Tensor, Option<Tensor>), OpError> {
    let s = &call.shape;
    let cache = k_cache.data();
    if let Some(missing) = unsupported(s) {
        return Err(OpError::NoKernel {
            op: OP,
            backend,
            missing,
        });
    }
    if s.topk > MAX_INDEXER_KERNEL_TOPK {
        return Err(OpError::invalid(
            OP,
            "topk",
            format!(
                "is {}; the kernel backends (TileSim, Ascend950) keep at most {MAX_INDEXER_KERNEL_TOPK} \
                 positions a row (the top-k's UB tiles); docs/ops.md lists the limits",
                s.topk
            ),
        ));
    }
    let mut runner = bridge::runner(OP, backend);
    let plan = plan(s, runner.plan_target());
    let limit = |e| {
        bridge::kernel_limit(e, "q", || {
            format!(
                "H_idx = {} with D = {} in {}",
                s.heads, s.head_dim, s.key_dtype
            )
        })
    };
    let score_k = compiled(OP, plan.score_key(), || score_kernel(&plan.score)).map_err(limit)?;
    let topk_k = compiled(OP, &("lightning_indexer/topk", plan.k), || {
        topk_kernel(plan.k)
    })
    .map_err(|e| bridge::kernel_limit(e, "topk", || format!("topk = {}", s.topk)))?;
    let merge_k = compiled(OP, &("lightning_indexer/merge", plan.k), || {
        merge_kernel(plan.k)
    })
    .map_err(|e| bridge::kernel_limit(e, "topk", || format!("topk = {}", s.topk)))?;
    let (t, d) = (s.tokens, s.head_dim);
    let hp = plan.score.rows() as usize;
    let (qk, w) = host_inputs(q, weights, call, plan.score)?;
    let len = s.context_len.max(1);
    let (st, layout) = cache.storage_and_layout();
    let candle_core::Storage::Cpu(cs) = &*st else {
        return Err(OpError::invalid(OP, "k_cache", "must live on the CPU"));
    };
    let kin = bridge::gm_input(OP, "k_cache", cs, layout)?;
    let slots = kin.shape.iter().take(2).product::<usize>();
    // FP8 keys: their scales (one a key at D = 128), `[1, slots]` f32 or ue8m0 codes.
    let scale_storage = match plan.score.scales {
        KeyScales::None => None,
        KeyScales::Fp8 { .. } => {
            let sc = k_cache
                .scales()
                .ok_or_else(|| OpError::invalid(OP, "k_cache", "FP8 keys need their scales"))?;
            Some(sc.storage_and_layout())
        }
    };
    let scale_input = match &scale_storage {
        None => None,
        Some((st, layout)) => {
            let candle_core::Storage::Cpu(cs) = &**st else {
                return Err(OpError::invalid(
                    OP,
                    "k_cache",
                    "scales must live on the CPU",
                ));
            };
            let sin = bridge::gm_input(OP, "k_cache", cs, layout)?;
            Some(GmInput {
                shape: vec![1, slots],
                ..sin
            })
        }
    };
    let positions: Vec<i64> = (0..len as i64).collect();
    let work = plan.work(&call.context_lens);
    let items = work.len() / 3;
    let mut ws = GmTensor::zeros(DType::F32, &[t, len]);
    if items > 0 {
        let named = vec![
            ("rows", Arg::Int(t as i64)),
            ("items", Arg::Int(items as i64)),
            ("len_stride", Arg::Int(len as i64)),
            ("pos_len", Arg::Int(len as i64)),
            ("max_blocks", Arg::Int(call.max_blocks as i64)),
            ("slots", Arg::Int(slots as i64)),
            ("block_size", Arg::Int(s.block_size as i64)),
            ("q", Arg::Tensor(qk)),
            (
                "w",
                Arg::Tensor(GmTensor::from_f32(DType::F32, &[t, hp], &w)),
            ),
            (
                "cache",
                Arg::Input(GmInput {
                    shape: vec![slots, d],
                    // FP8 keys are gathered as their bytes (the kernel reads them as e4m3).
                    dtype: if kin.dtype == DType::F8E4M3 {
                        DType::I8
                    } else {
                        kin.dtype
                    },
                    ..kin
                }),
            ),
            ("positions", Arg::Tensor(gm_i32(&[1, len], &positions))),
            (
                "block_table",
                Arg::Tensor(gm_i32(&[t, call.max_blocks], &call.block_table)),
            ),
            (
                "context_lens",
                Arg::Tensor(gm_i32(&[1, t], &call.context_lens)),
            ),
            ("work", Arg::Tensor(gm_i32(&[1, items * 3], &work))),
            ("ws", Arg::Tensor(ws)),
        ];
        let mut named = named;
        if let Some(sin) = scale_input {
            named.push(("scales", Arg::Input(sin)));
        }
        let blocks = plan.score_blocks(items as u64) as usize;
        let mut args = runner.launch_named(score_k, blocks, named)?;
        ws = runner.take(score_k, &mut args, "ws")?;
    }
    let k = s.topk;
    let g = plan.segments(&call.context_lens);
    let (segs, busy) = (g.seg.len() / 3, g.rows.len() / 4);
    let mut pairs = GmTensor::zeros(DType::F32, &[t, 2 * k]);
    if busy > 0 {
        let named = vec![
            ("rows", Arg::Int(t as i64)),
            ("len_stride", Arg::Int(len as i64)),
            ("segs", Arg::Int(segs as i64)),
            ("ws", Arg::Tensor(ws)),
            (
                "lanes",
                // Positions (below 2^31) as u32 bytes, written directly: a segment's lanes are a
                // window's worth, and the generic element encoder would cost more than the
                // segment's selection at the demo's shapes.
                Arg::Tensor(GmTensor {
                    dtype: DType::U32,
                    shape: vec![1, g.lanes.len()],
                    data: g
                        .lanes
                        .iter()
                        .flat_map(|&x| (x as u32).to_le_bytes())
                        .collect(),
                }),
            ),
            ("seg", {
                // Each `(t, start, len)` padded to one 32-byte entry.
                let padded: Vec<i64> = g
                    .seg
                    .chunks_exact(3)
                    .flat_map(|e| e.iter().copied().chain([0; ENTRY as usize - 3]))
                    .collect();
                Arg::Tensor(gm_i32(&[1, padded.len()], &padded))
            }),
            (
                "parts",
                Arg::Tensor(GmTensor::zeros(DType::F32, &[segs, 2 * k])),
            ),
        ];
        let blocks = plan.lane_blocks(segs as u64) as usize;
        let mut args = runner.launch_named(topk_k, blocks, named)?;
        let parts = runner.take(topk_k, &mut args, "parts")?;
        drop(args);
        if segs == busy {
            // One segment a row: its list is the row's result (no merge launch).
            let row_bytes = 2 * k * 4;
            for r in g.rows.chunks_exact(4) {
                let (t, e) = (r[0] as usize, r[1] as usize);
                pairs.data[t * row_bytes..(t + 1) * row_bytes]
                    .copy_from_slice(&parts.data[e * row_bytes..(e + 1) * row_bytes]);
            }
            drop(st);
            drop(scale_storage);
            runner.finish()?;
            return decode(
                &pairs,
                &call.context_lens,
                k,
                q.device(),
                call.return_scores,
            );
        }
        // The merge tree, one launch a level; the last writes the rows' results.
        let mut lists = parts;
        for level in plan.merge_levels(&g, t) {
            let entries = level.entries.len() / ENTRY as usize;
            // The last level's destination is the result `[T, 2k]` (`dsts` = T).
            let dst = GmTensor::zeros(DType::F32, &[level.dsts, 2 * k]);
            let named = vec![
                ("srcs", Arg::Int(level.srcs as i64)),
                ("dsts", Arg::Int(level.dsts as i64)),
                ("entries", Arg::Int(entries as i64)),
                ("src", Arg::Tensor(lists)),
                (
                    "pairs",
                    Arg::Tensor(gm_i32(&[1, level.entries.len()], &level.entries)),
                ),
                ("dst", Arg::Tensor(dst)),
            ];
            let blocks = plan.lane_blocks(entries as u64) as usize;
            let mut args = runner.launch_named(merge_k, blocks, named)?;
            lists = runner.take(merge_k, &mut args, "dst")?;
        }
        pairs = lists;
    }
    drop(st);
    drop(scale_storage);
    runner.finish()?;
    decode(
        &pairs,
        &call.context_lens,
        k,
        q.device(),
        call.return_scores,
    )
}

/// q as the kernel's `[T * Hp, D]` in the matmul dtype (rows `H..Hp` of each token zero) and
/// the weights as `[T, Hp]` f32 (zeros past `H`; NaN for a row whose q or weights hold a value
/// that is not finite).
fn host_inputs(
    q: &Tensor,
    weights: &Tensor,
    call: &IndexerCall,
    k: ScoreKernel,
) -> Result<(GmTensor, Vec<f32>), OpError> {
    let s = &call.shape;
    let (t, h, d) = (s.tokens, s.heads, s.head_dim);
    let hp = k.rows() as usize;
    let qf = q.to_dtype(CDType::F32)?.flatten_all()?.to_vec1::<f32>()?;
    let wf = weights
        .to_dtype(CDType::F32)?
        .flatten_all()?
        .to_vec1::<f32>()?;
    let parts = k.q_parts.max(1) as usize;
    let mut qp = vec![0f32; t * parts * hp * d];
    let mut w = vec![0f32; t * hp];
    for r in 0..t {
        let qr = &qf[r * h * d..(r + 1) * h * d];
        let wr = &wf[r * h..(r + 1) * h];
        for (i, &v) in qr.iter().enumerate() {
            for (p, part) in split_q(v, parts).into_iter().take(parts).enumerate() {
                qp[(r * parts + p) * hp * d + i] = part;
            }
        }
        let finite = qr.iter().chain(wr).all(|v| v.is_finite());
        for (j, o) in w[r * hp..r * hp + h].iter_mut().enumerate() {
            *o = if finite { wr[j] } else { f32::NAN };
        }
    }
    // q's values (or its parts) are exact in the matmul dtype (`unsupported` allows only such
    // pairs).
    Ok((GmTensor::from_f32(k.dtype, &[t * parts * hp, d], &qp), w))
}

/// `v` as `parts` values (1, or 3 bf16 values) whose sum is `v`: `hi = bf16(v)`, `mid =
/// bf16(v - hi)`, `lo = bf16(v - hi - mid)` (each difference exact in f32; 3 x 8 significant
/// bits cover f32's 24, and bf16 has f32's exponent range, so the sum is `v` but for values
/// within 2^16 of f32's subnormals). A non-finite `v` is its own `hi` (its row's weights are NaN
/// anyway).
fn split_q(v: f32, parts: usize) -> [f32; 3] {
    if parts <= 1 || !v.is_finite() {
        return [v, 0.0, 0.0];
    }
    let bf = |x: f32| half::bf16::from_f32(x).to_f32();
    let hi = bf(v);
    let mid = bf(v - hi);
    [hi, mid, bf(v - hi - mid)]
}

/// The pairs `[T, 2k]` as `(indices [T, k]` I32, `scores [T, k]` F32`)`: the first
/// `min(k, context_lens[t])` pairs of row `t` are its kept positions (a value of -inf: a NaN
/// score), the rest (not written by the kernels) `(-1, -inf)`.
fn decode(
    pairs: &GmTensor,
    context_lens: &[i64],
    k: usize,
    dev: &candle_core::Device,
    with_scores: bool,
) -> Result<(Tensor, Option<Tensor>), OpError> {
    let t = context_lens.len();
    let raw = pairs.to_f32();
    let mut idx = Vec::with_capacity(t * k);
    let mut sc = Vec::with_capacity(t * k);
    for (p, pair) in raw.chunks_exact(2).enumerate() {
        let kept = (context_lens[p / k.max(1)].max(0) as usize).min(k);
        let i = if p % k.max(1) < kept {
            pair[1].to_bits() as i32
        } else {
            -1
        };
        idx.push(i);
        sc.push(if i < 0 {
            f32::NEG_INFINITY
        } else if pair[0] == f32::NEG_INFINITY {
            f32::NAN
        } else {
            pair[0]
        });
    }
    let indices = Tensor::from_vec(idx, (t, k), dev)?;
    let scores = if with_scores {
        Some(Tensor::from_vec(sc, (t, k), dev)?)
    } else {
        None
    };
    Ok((indices, scores))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_of(k: u64, blocks: u64) -> IndexerPlan {
        IndexerPlan {
            score: ScoreKernel {
                dtype: DType::BF16,
                heads: 4,
                head_dim: 128,
                q_parts: 1,
                scales: KeyScales::None,
            },
            k,
            tps: 1,
            blocks,
        }
    }

    /// Rows of 2 and 5 segments (and an empty row): each level pairs a row's lists in order,
    /// carries an odd one by a copy (`nb = 0`), and the last writes row `t`.
    #[test]
    fn the_merge_tree_pairs_each_rows_lists_in_order() {
        let p = plan_of(40, 8);
        let g = p.segments(&[1000, 0, 2100]);
        assert_eq!(g.rows, [0, 0, 2, 512, 2, 2, 5, 448]);
        let levels = p.merge_levels(&g, 3);
        let want = [
            (
                vec![
                    [0, 0, 40, 1, 40],
                    [1, 2, 40, 3, 40],
                    [2, 4, 40, 5, 40],
                    [3, 6, 40, 6, 0],
                ],
                7,
                4,
            ),
            (
                vec![[0, 0, 40, 0, 0], [1, 1, 40, 2, 40], [2, 3, 40, 3, 0]],
                4,
                3,
            ),
            (vec![[0, 0, 40, 0, 0], [2, 1, 40, 2, 40]], 3, 3),
        ];
        assert_eq!(levels.len(), want.len());
        for (l, (entries, srcs, dsts)) in levels.iter().zip(want) {
            let padded: Vec<i64> = entries
                .iter()
                .flat_map(|e| e.iter().copied().chain([0; 3]))
                .collect();
            assert_eq!(l.entries, padded);
            assert_eq!((l.srcs, l.dsts), (srcs, dsts));
        }
    }

    /// V3.2's decode: 16 segments of 512 a row, four levels of 32, 16, 8 and 4 merges whose
    /// lists grow to `k` and stay there; one segment a row: no merge at all.
    #[test]
    fn v32_decode_merges_in_four_levels_and_one_segment_rows_in_none() {
        let p = plan_of(2048, 32);
        let g = p.segments(&[8192; 4]);
        assert!(g.seg.chunks_exact(3).all(|s| s[2] == 512));
        let levels = p.merge_levels(&g, 4);
        let sizes: Vec<usize> = levels
            .iter()
            .map(|l| l.entries.len() / ENTRY as usize)
            .collect();
        assert_eq!(sizes, [32, 16, 8, 4]);
        let counts: Vec<(i64, i64)> = levels
            .iter()
            .map(|l| (l.entries[2], l.entries[4]))
            .collect();
        assert_eq!(
            counts,
            [(512, 512), (1024, 1024), (2048, 2048), (2048, 2048)]
        );
        assert_eq!(levels[3].dsts, 4);
        // Segments of at most 2^20 / k scores: 256 a row at a context of 131072.
        assert_eq!(p.segments(&[131072]).rows, [0, 0, 256, 512]);
        let short = plan_of(32, 8).segments(&[300, 256]);
        assert!(plan_of(32, 8).merge_levels(&short, 2).is_empty());
    }
}
