//! The lightning indexer's tile kernels and the host code that launches them.
//!
//! CONTRACT (the op layer in `mod.rs` calls exactly this): [`run`] receives a validated
//! [`IndexerCall`], q and the weights (contiguous), and the key cache it describes; [`plan`] is
//! the call's one launch plan, which [`run`] and `tileops emit --op lightning-indexer` both
//! launch from.
//!
//! # Kernels
//!
//! Two launches (the IR has no grid-wide barrier; a row's top-k needs all of its scores):
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
//! 2. `indexer_topk_<k>`: each AIV takes rows (row `2 * block + sub_block`, striding by
//!    `2 * block_dim`) and selects the best `k` of the row's `context_lens[t]` scores with
//!    `tile_backend::kernels::topk_row` (TSORT32 per 32 scores, TMRGSORT into the best so far,
//!    keeping at most `k`; exact, independent of TMRGSORT's cross-list tie order): `(value,
//!    index)` pairs into `out [T, 2k]`, `(-inf, -1)` past the context.
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
//! The cube multiplies one dtype: the key cache's (f32, f16 or bf16). q is converted on the
//! host to it when that is exact (q of the same dtype, or bf16/f16 q with f32 keys); with bf16
//! keys, f32 or f16 q is split into three bf16 parts `hi + mid + lo` (exact) whose three
//! products accumulate in the f32 Acc (three matmuls a K slice: the cube's arithmetic is not
//! what bounds the kernel). f32 or bf16 q with f16 keys (f16's range cannot hold the parts) and
//! FP8 keys are [`OpError::NoKernel`] for now.

use super::{IndexerCall, OP};
use crate::backend::Backend;
use crate::bridge::{self, gm_i32};
use crate::error::OpError;
use crate::registry::{Checked, Launch, LightningIndexerShape};
use crate::runtime::{compiled_keyed, PlanTarget};
use candle_core::{DType as CDType, Tensor};
use tile_backend::dsl::{Body, Gather, KernelBuilder, Reinterpret};
use tile_backend::ir::{
    c0, AccToVecMode, Axis, BinaryOp, CoreKind, DType, Expr, GmView, Kernel, Layout, MemSpace,
    PadValue, TileType, UnaryOp,
};
use tile_backend::kernels::{probe_tie_order, topk_row, TopkRow, TopkTiles, CHUNK};
use tile_backend::launch::{Arg, GmInput, GmTensor};

/// Positions scored per cube tile (one gathered L1 tile, one matmul, one Fixpipe handoff).
pub const TILE_N: u64 = 128;

/// Most positions kept per row by the kernel backends: the top-k's UB tiles take about
/// `40 * k` bytes of the 240 KiB one AIV plans within.
pub const MAX_KERNEL_TOPK: usize = 4096;

/// L0A / L0B capacity per operand tile (bytes): one tile each.
const L0_BYTES: u64 = 64 * 1024;

fn round_up(v: u64, m: u64) -> u64 {
    v.div_ceil(m) * m
}

/// The static shape of the score kernel (its compile key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    let name = if parts > 1 {
        format!("indexer_scores_{dt}_h{h}_d{d}_q{parts}")
    } else {
        format!("indexer_scores_{dt}_h{h}_d{d}")
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
    let cache = kb.input("cache", dt, [slots, Expr::from(d)]);
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
        ty(Mat, dt, tn, dp, NZ).dynamic().pad(PadValue::Zero),
    );
    let kt_l1 = kb.reinterpret(
        "kt_l1",
        k_l1,
        Reinterpret {
            dtype: None,
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

/// The top-k kernel (module docs, launch 2) for `k` pairs per row. Arguments: scalars `rows`
/// (T), `len_stride` (L), `busy` (rows with a context); tensors `ws [T, L]` f32, `lanes [1,
/// 32]` u32, `context_lens [1, T]` i32, `row_ids [1, busy]` i32 (the rows with a context),
/// `out [T, 2k]` f32 (output: pairs, the index's bits in the odd columns; the rows of empty
/// contexts are not written).
pub fn topk_kernel(k: u64) -> Kernel {
    let mut kb = KernelBuilder::new(format!("indexer_topk_{k}"));
    let rows = Expr::Param(kb.scalar("rows", DType::I64));
    let lstride = Expr::Param(kb.scalar("len_stride", DType::I64));
    let ws = kb.input("ws", DType::F32, [rows.clone(), lstride.clone()]);
    let lanes = kb.input("lanes", DType::U32, [1, CHUNK]);
    let lens = kb.input("context_lens", DType::I32, [Expr::from(1), rows.clone()]);
    let busy = Expr::Param(kb.scalar("busy", DType::I64));
    let row_ids = kb.input("row_ids", DType::I32, [Expr::from(1), busy.clone()]);
    let out = kb.output("out", DType::F32, [rows.clone(), Expr::from(2 * k)]);
    let tiles = TopkTiles::declare(&mut kb, "", k);
    kb.vector(|v| {
        let later_first = probe_tie_order(v, &tiles);
        // This AIV's entries of the busy rows: lane, lane + lanes, .. (a count, not a test per
        // row: an AIV with a skipped or empty row would set its sort's flags with nothing to
        // order them).
        let lanes_total = Expr::BlockDim * 2;
        let lane = Expr::BlockIdx * 2 + Expr::SubBlockIdx;
        let mine =
            (busy.clone() - lane.clone() + lanes_total.clone() - 1).max(0) / lanes_total.clone();
        v.for_range("it", 0, mine, 1, |v, it| {
            let at = lane.clone() + Expr::Var(it) * lanes_total.clone();
            let r = v.read_scalar("r", row_ids, at);
            let ctx = v.read_scalar("ctx", lens, Expr::Var(r));
            let row = TopkRow {
                scores: ws,
                offset: Expr::Var(r) * lstride.clone(),
                len: Expr::Var(ctx),
                lanes,
                out,
                out_offset: Expr::Var(r) * (2 * k) as i64,
            };
            topk_row(v, &tiles, &row, later_first);
        });
    });
    kb.build()
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

    /// Blocks of the top-k kernel for `busy` rows with a context (two a block).
    pub fn topk_blocks(&self, busy: u64) -> u64 {
        busy.div_ceil(2).min(self.blocks).max(1)
    }

    /// Blocks of the score kernel for `items` work items.
    pub fn score_blocks(&self, items: u64) -> u64 {
        items.min(self.blocks).max(1)
    }

    /// The score kernel's cache key.
    fn score_key(&self) -> impl std::fmt::Display + '_ {
        crate::runtime::DebugKey("lightning_indexer/scores/", &self.score)
    }

    /// The two launches for `rows` rows and `items` work items, kernels as their builders
    /// write them.
    pub fn launches(&self, rows: u64, items: u64) -> Vec<Launch> {
        vec![
            Launch {
                kernel: score_kernel(&self.score),
                block_dim: self.score_blocks(items),
                scalars: vec![("rows", rows as i64), ("items", items as i64)],
            },
            Launch {
                kernel: topk_kernel(self.k),
                block_dim: self.topk_blocks(rows),
                scalars: vec![("rows", rows as i64), ("busy", rows as i64)],
            },
        ]
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
        q_parts: if s.key_dtype == DType::BF16 && s.dtype != DType::BF16 {
            3
        } else {
            1
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
        (DType::F8E4M3, _) => Some(
            "FP8 e4m3 keys on the cube (the score kernel multiplies f32, f16 or bf16 keys; use a \
             plain cache or the reference backend)",
        ),
        (k, q) if k == q => None,
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
/// [`OpError::Invalid`] for a top-k past [`MAX_KERNEL_TOPK`] or shapes past the machine's
/// buffers; kernel errors; [`OpError::DeviceUnavailable`] from the Ascend 950 runner's finish.
pub(crate) fn run(
    backend: Backend,
    q: &Tensor,
    weights: &Tensor,
    cache: &Tensor,
    call: &IndexerCall,
) -> Result<(Tensor, Option<Tensor>), OpError> {
    let s = &call.shape;
    if let Some(missing) = unsupported(s) {
        return Err(OpError::NoKernel {
            op: OP,
            backend,
            missing,
        });
    }
    if s.topk > MAX_KERNEL_TOPK {
        return Err(OpError::invalid(
            OP,
            "topk",
            format!(
                "is {}; the kernel backends (TileSim, Ascend950) keep at most {MAX_KERNEL_TOPK} \
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
    let score_k =
        compiled_keyed(OP, plan.score_key(), || score_kernel(&plan.score)).map_err(limit)?;
    let topk_k = compiled_keyed(
        OP,
        format_args!("lightning_indexer/topk/{}", plan.k),
        || topk_kernel(plan.k),
    )
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
        let blocks = plan.score_blocks(items as u64) as usize;
        let mut args = runner.launch_named(&score_k, blocks, named)?;
        ws = runner.take(&score_k, &mut args, "ws")?;
    }
    let lanes = GmTensor::from_i64(
        DType::U32,
        &[1, CHUNK as usize],
        &tile_backend::kernels::lanes(),
    );
    let k = s.topk;
    let busy: Vec<i64> = (0..t as i64)
        .filter(|&r| call.context_lens[r as usize] > 0)
        .collect();
    let mut pairs = GmTensor::zeros(DType::F32, &[t, 2 * k]);
    if !busy.is_empty() {
        let named = vec![
            ("rows", Arg::Int(t as i64)),
            ("len_stride", Arg::Int(len as i64)),
            ("ws", Arg::Tensor(ws)),
            ("lanes", Arg::Tensor(lanes)),
            (
                "context_lens",
                Arg::Tensor(gm_i32(&[1, t], &call.context_lens)),
            ),
            ("busy", Arg::Int(busy.len() as i64)),
            ("row_ids", Arg::Tensor(gm_i32(&[1, busy.len()], &busy))),
            ("out", Arg::Tensor(pairs)),
        ];
        let blocks = plan.topk_blocks(busy.len() as u64) as usize;
        let mut args = runner.launch_named(&topk_k, blocks, named)?;
        pairs = runner.take(&topk_k, &mut args, "out")?;
    }
    drop(st);
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

/// The pairs `[T, 2k]` as `(indices [T, k]` I32, `scores [T, k]` F32`)`: index bits -1 give
/// `(-1, -inf)`; a kept position whose value is -inf had a NaN score; a row with an empty
/// context (not written by the kernel) is all `(-1, -inf)`.
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
        let i = if context_lens[p / k.max(1)] > 0 {
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
