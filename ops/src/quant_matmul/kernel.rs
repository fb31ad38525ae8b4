//! The quant_matmul kernels in the tile DSL, and their host code.
//!
//! CONTRACT (the op layer in `mod.rs` calls exactly this): `run_float` and `run_int8` receive
//! validated inputs (quantised activations, 19-bit scale words).
//!
//! # Kernel
//!
//! One block per `[TM, TN]` output tile, over K slices of `TK` ([`Tiles`]: at most 128 rows,
//! 256 channels (one Scaling chunk, at most 512 words) and 256 k; smaller where the call is, so a
//! decode step's few tokens take a 16-row tile); `M`, `K` and `N` are runtime scalars, tails use
//! runtime valid shapes and zero padding, so a new batch size recompiles only when it changes
//! the row tile.
//!
//! ```text
//! cube:  MTE2  words[bn*TN.., TN] -> s_l1 (Mat, u64)        FIX  s_l1 -> sc (Scaling)  [MTE2 -> FIX]
//!        for each K slice kk (TK deep), L1 buffer e = kk % 2 (ping-pong):
//!          MTE2  x[rows, slice] -> a_l1[e] (ND -> NZ)   w[cols, slice] -> w_l1[e] (ND -> NZ); fillpad
//!                (b_l1[e]: w_l1[e]'s bytes seen as ZN [TK, TN], that is B = w^T)
//!          MTE1  a_l1[e] -> a_l0 (Left), b_l1[e] -> b_l0 (Right)
//!          M     acc (+)= a_l0 · b_l0  (int8 x int8 -> int32; Partial, Final on the last slice)
//!        FIX   acc -> d_ub of AIV0 with the Scaling tile (Final): f16 (float) or int8 (bit 46),
//!              all tm rows (the rows the matmul wrote: A5 reads L0C at the stride of the
//!              Acc's valid rows), of which the vector side reads the block's mv
//! AIV0:  float: d_ub -> f32, · row factor [TM, 1] (row broadcast), + bias [1, TN] (column
//!        broadcast), ReLU, cast -> out (a 16-bit out reuses d_ub's bytes);  int8: store d_ub
//! ```
//!
//! The K loop's flags are written by hand: MTE1 -> MTE2 events 0/1 free L1 buffer 0/1, so the
//! DMA of slice kk + 1 runs while slice kk moves to L0 and multiplies (a 256 x 256 B slice fills
//! L0B's 64 KiB, so L0 has one buffer per operand, freed by M -> MTE1 event 0). The Fixpipe's
//! quantising move cannot use a dual mode (§5), so the tile goes to AIV0 whole; AIV1 only takes
//! part in the channel handshake. The other intra-core flags come from the sync pass.

use super::{QuantCall, QuantizedWeight};
use crate::bridge;
use crate::error::OpError;
use crate::registry::{Checked, QuantMatmulShape};
use crate::runtime::{compiled, PlanTarget, Runner};
use tile_backend::dsl::{Body, KernelBuilder, Reinterpret};
use tile_backend::ir::{
    AccToVecMode, Axis, BinaryOp, CoreKind, DType, Expr, GmView, Kernel, Layout, MemSpace,
    PadValue, Phase, Pipe, QuantWord, RoundMode, Scale, TileRef, TileType, UnaryOp, VarId,
};
use tile_backend::launch::GmInOut;
use tile_backend::sim::{Arg, GmInput, GmTensor};

const OP: &str = "quant_matmul";

/// The static tile sizes of a kernel variant, chosen from the call's shape by
/// [`Tiles::for_shape`]: rows `tm` of an output tile, channels `tn` (one Scaling chunk: a
/// multiple of 16, at most 512) and the depth `tk` of a K slice (a multiple of the int8 C0, 32).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tiles {
    /// Rows of an output tile.
    pub tm: u64,
    /// Channels of an output tile.
    pub tn: u64,
    /// Depth of a K slice.
    pub tk: u64,
}

impl Tiles {
    /// The largest tiles, `128 x 256` outputs over K slices of 256: at M = 256, K = N = 4096 the
    /// grid is 2 x 16 blocks, one wave on 32 clusters, each reading its 256 channels of w once
    /// per 128 rows. A `256 x 256` int8 B slice fills L0B's 64 KiB, so L0 has one buffer per
    /// operand and L1 two (ping-pong).
    pub const LARGEST: Tiles = Tiles {
        tm: 128,
        tn: 256,
        tk: 256,
    };

    /// The tiles of a call of `m x k` by `n` on `target`: each side the smallest power of two
    /// that holds it, from the cube's fractal (16 rows, 32 k; 32 channels, the 32-byte row of an
    /// int8 UB tile) up to [`Tiles::LARGEST`]. A decode step's few tokens then fill a 16-row tile
    /// instead of padding to 128 (the cube, the Fixpipe and the vector side work on 16 rows, and
    /// the pad fill of x's slice is an eighth), and a narrow or shallow weight is not padded to
    /// 256.
    ///
    /// On the device, a grid that would leave clusters idle with 256-channel tiles (e.g. M <= 128
    /// at N = 4096: 16 blocks on 32 clusters) takes 128-channel tiles over K slices of 512
    /// instead (the B slice still fills L0B's 64 KiB): twice the blocks, each reading half of w
    /// in half as many DMAs. The simulator's CPU plan keeps the fewer, larger blocks. The int32
    /// sums are exact and every later step is per element, so the tiles never change a bit of
    /// the result. Sizes are static in the kernel: each tile class compiles once.
    pub fn for_shape(m: usize, k: usize, n: usize, target: PlanTarget) -> Tiles {
        let fit = |v: usize, lo: u64, hi: u64| (v as u64).next_power_of_two().clamp(lo, hi);
        let l = Tiles::LARGEST;
        let t = Tiles {
            tm: fit(m, 16, l.tm),
            tn: fit(n, 32, l.tn),
            tk: fit(k, 32, l.tk),
        };
        let blocks = grid(m, n, t).2;
        if target == PlanTarget::Device && t.tn == l.tn && blocks < target.concurrent_blocks() {
            let (tn, tk) = (l.tn / 2, l.tk * 2);
            return Tiles {
                tn,
                tk: fit(k, 32, tk),
                ..t
            };
        }
        t
    }
}

impl std::fmt::Display for Tiles {
    /// `{tm}x{tn}x{tk}`, part of the kernel's name and cache key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}x{}x{}", self.tm, self.tn, self.tk)
    }
}

/// What the kernel does after the Fixpipe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Epilogue {
    /// f16 dequantisation, then per-token factor, optional bias, optional ReLU, cast to `out`.
    Float {
        /// Result dtype (f32, f16, bf16).
        out: DType,
        /// A bias `[1, N]` argument is present.
        bias: bool,
        /// ReLU after the bias.
        relu: bool,
    },
    /// Signed int8 requantisation by the Fixpipe (bit 46), ReLU in the Fixpipe.
    Int8 {
        /// Fixpipe ReLU.
        relu: bool,
    },
}

impl std::fmt::Display for Epilogue {
    /// The epilogue's part of the kernel's name and cache key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Epilogue::Float { out, bias, relu } => {
                write!(f, "{out}_b{}_r{}", bias as u8, relu as u8)
            }
            Epilogue::Int8 { relu } => write!(f, "i8_r{}", relu as u8),
        }
    }
}

/// Output tiles of `tiles` along M and N, and the block count (`tiles_m * tiles_n`).
pub fn grid(m: usize, n: usize, tiles: Tiles) -> (usize, usize, usize) {
    let (tm, tn) = (m.div_ceil(tiles.tm as usize), n.div_ceil(tiles.tn as usize));
    (tm, tn, tm * tn)
}

/// The launch plan of a call of `shape` on a target (one block per `tm x tn` output tile of
/// [`Tiles::for_shape`]): the kernel for its epilogue and tiles, the grid and the scalars.
/// [`run_float`], [`run_int8`] and `tileops emit` ([`crate::registry::launches`], the
/// device plan) all launch from it.
pub(crate) struct QuantPlan {
    /// What the kernel does after the Fixpipe (with the tiles, the compile key).
    pub epi: Epilogue,
    /// The kernel's static tile sizes.
    pub tiles: Tiles,
    /// The scalars `m`, `k`, `n`, `m_pad` (`tiles_m * tm`), `n_pad` (`tiles_n * tn`), in the
    /// kernel's parameter order.
    pub scalars: [(&'static str, i64); 5],
    /// Blocks launched (`tiles_m * tiles_n`).
    pub block_dim: usize,
}

impl QuantPlan {
    /// The kernel cache key: what the kernel depends on (epilogue and tiles).
    pub fn key(&self) -> (Epilogue, Tiles) {
        (self.epi, self.tiles)
    }

    /// The kernel, as its builder writes it.
    pub fn kernel(&self) -> Kernel {
        quant_matmul_kernel(self.epi, self.tiles)
    }

    /// `tiles_m * tm`: the row factors' padded width.
    fn m_pad(&self) -> usize {
        self.scalars[3].1 as usize
    }

    /// `tiles_n * tn`: the words' and the bias' padded width.
    fn n_pad(&self) -> usize {
        self.scalars[4].1 as usize
    }
}

/// The plan of a call of `shape` on `target` (a valid shape: `out_dtype` i8 for the int8
/// variant, which has no bias).
pub(crate) fn plan(shape: &Checked<QuantMatmulShape>, target: PlanTarget) -> QuantPlan {
    let tiles = Tiles::for_shape(shape.m, shape.k, shape.n, target);
    let (tm, tn, blocks) = grid(shape.m, shape.n, tiles);
    let epi = match shape.out_dtype {
        DType::I8 => Epilogue::Int8 { relu: shape.relu },
        out => Epilogue::Float {
            out,
            bias: shape.bias,
            relu: shape.relu,
        },
    };
    QuantPlan {
        epi,
        tiles,
        scalars: [
            ("m", shape.m as i64),
            ("k", shape.k as i64),
            ("n", shape.n as i64),
            ("m_pad", (tm * tiles.tm as usize) as i64),
            ("n_pad", (tn * tiles.tn as usize) as i64),
        ],
        block_dim: blocks,
    }
}

/// The kernel for `epi` with the static tile sizes `tiles`. Arguments, in order: scalars `m`,
/// `k`, `n`, `m_pad` (`tiles_m * tm`), `n_pad` (`tiles_n * tn`); tensors `x [m, k]` (i8), `w [n, k]` (i8), `words [1, n_pad]`
/// (u64 Fixpipe words), for [`Epilogue::Float`] `rows [1, m_pad]` (f32 row factors) and, with a
/// bias, `bias [1, n_pad]` (f32); then `out [m, n]` (output).
pub fn quant_matmul_kernel(epi: Epilogue, tiles: Tiles) -> Kernel {
    let Tiles { tm, tn, tk } = tiles;
    let mut kb = KernelBuilder::new(format!("quant_matmul_{epi}_{tiles}"));
    let m = Expr::Param(kb.scalar("m", DType::I64));
    let k = Expr::Param(kb.scalar("k", DType::I64));
    let n = Expr::Param(kb.scalar("n", DType::I64));
    let m_pad = Expr::Param(kb.scalar("m_pad", DType::I64));
    let n_pad = Expr::Param(kb.scalar("n_pad", DType::I64));
    let x = kb.input("x", DType::I8, [m.clone(), k.clone()]);
    let w = kb.input("w", DType::I8, [n.clone(), k.clone()]);
    let words = kb.input("words", DType::U64, [Expr::from(1), n_pad.clone()]);
    let (rows, bias) = match epi {
        Epilogue::Float { bias, .. } => (
            Some(kb.input("rows", DType::F32, [Expr::from(1), m_pad])),
            bias.then(|| kb.input("bias", DType::F32, [Expr::from(1), n_pad.clone()])),
        ),
        Epilogue::Int8 { .. } => (None, None),
    };
    let out_dt = match epi {
        Epilogue::Float { out, .. } => out,
        Epilogue::Int8 { .. } => DType::I8,
    };
    let out = kb.output("out", out_dt, [m.clone(), n.clone()]);

    let zero_pad = |t: TileType| t.dynamic().pad(PadValue::Zero);
    let a_l1 = kb.tile_group(
        "a_l1",
        zero_pad(TileType::new(MemSpace::Mat, DType::I8, tm, tk, Layout::NZ)),
        2,
    );
    // w's rows as NZ [tn, tk] (TFILLPAD on a Mat tile takes NZ only); with the int8 boxes
    // (16 x 32 for NZ, 32 x 16 for ZN) the same bytes seen as ZN [tk, tn] are B = w^T.
    let w_l1 = kb.tile_group(
        "w_l1",
        zero_pad(TileType::new(MemSpace::Mat, DType::I8, tn, tk, Layout::NZ)),
        2,
    );
    let b_l1 = kb.reinterpret(
        "b_l1",
        w_l1,
        Reinterpret {
            dtype: None,
            shape: Some((tk, tn)),
            layout: Some(Layout::ZN),
        },
    );
    let s_l1 = kb.tile(
        "s_l1",
        TileType::new(MemSpace::Mat, DType::U64, 1, tn, Layout::ND),
    );
    let sc = kb.tile(
        "sc",
        TileType::new(MemSpace::Scaling, DType::U64, 1, tn, Layout::ND),
    );
    let a_l0 = kb.tile(
        "a_l0",
        TileType::new(MemSpace::Left, DType::I8, tm, tk, Layout::NZ),
    );
    let b_l0 = kb.tile(
        "b_l0",
        TileType::new(MemSpace::Right, DType::I8, tk, tn, Layout::ZN),
    );
    let acc = kb.tile(
        "acc",
        TileType::new(MemSpace::Acc, DType::I32, tm, tn, Layout::NZ).dynamic(),
    );
    let fix_dt = match epi {
        Epilogue::Float { .. } => DType::F16,
        Epilogue::Int8 { .. } => DType::I8,
    };
    let d_ub = kb.tile(
        "d_ub",
        TileType::new(MemSpace::Vec, fix_dt, tm, tn, Layout::ND).dynamic(),
    );
    let ch = kb.channel("dequant", CoreKind::Cube, 1);

    // The tile of this block: bm, bn, valid rows and columns.
    let place = move |b: &mut Body<'_>, m: &Expr, n: &Expr| -> (VarId, VarId, VarId, VarId) {
        let tiles_n = n.clone().ceil_div(tn as i64);
        let bm = b.let_("bm", Expr::BlockIdx / tiles_n.clone());
        let bn = b.let_("bn", Expr::BlockIdx % tiles_n);
        let mv = b.let_(
            "mv",
            (m.clone() - Expr::from(bm) * tm as i64).min(tm as i64),
        );
        let nv = b.let_(
            "nv",
            (n.clone() - Expr::from(bn) * tn as i64).min(tn as i64),
        );
        (bm, bn, mv, nv)
    };
    let (mc, kc, nc) = (m.clone(), k.clone(), n.clone());
    kb.cube(|c| {
        let (bm, bn, mv, nv) = place(c, &mc, &nc);
        // The matmul writes all `tm` rows of the Acc (its Left tile is static: rows past `mv`
        // are x's zero padding), and A5's Fixpipe reads the Acc at a stride of its valid rows
        // rounded up to 16 (the verifier's acc-stride rule): so the Acc's valid rows are `tm`,
        // and only the vector side's `d_ub` narrows to the `mv` rows stored.
        c.set_validshape(acc, tm as i64, nv);
        c.load(
            s_l1,
            GmView::nd(words, Expr::from(bn) * tn as i64, 1, tn, n_pad.clone()),
        );
        c.mov(sc, s_l1);
        let steps = c.let_("steps", kc.clone().ceil_div(tk as i64));
        // One K slice into L1 and L0 buffer `slot`, then its matmul.
        // L1 ping-pong flags by hand (the sync pass keeps them): event `e` of MTE1 -> MTE2
        // says L1 buffer e is free again. Owned by the pass they are hazard-free but the next
        // slice's DMA overlaps less: the 950 estimate rises 3.7% at 256 x 4096 x 4096 and at
        // M = 1. The L0 slots (M <-> MTE1) are the pass's: estimates unchanged.
        let k_step = |s: &mut Body<'_>, kk: Expr, slot: u64| {
            let e = slot as u8;
            s.wait_flag(Pipe::Mte1, Pipe::Mte2, e);
            let kv = s.let_("kv", (kc.clone() - kk.clone() * tk as i64).min(tk as i64));
            let (a1, w1, b1) = (a_l1.at(slot), w_l1.at(slot), b_l1.at(slot));
            let (a0, b0): (TileRef, TileRef) = (a_l0.into(), b_l0.into());
            s.set_validshape(a1.clone(), mv, kv);
            s.set_validshape(w1.clone(), nv, kv);
            let a_off = Expr::from(bm) * (tm as i64) * kc.clone() + kk.clone() * tk as i64;
            s.load(a1.clone(), GmView::nd(x, a_off, mv, kv, kc.clone()));
            // Rows col0.. of w, columns k0..: B[p, j] = w[col0 + j, k0 + p] once seen as ZN.
            let w_off = Expr::from(bn) * (tn as i64) * kc.clone() + kk.clone() * tk as i64;
            s.load(w1.clone(), GmView::nd(w, w_off, nv, kv, kc.clone()));
            s.fillpad(a1.clone());
            s.fillpad(w1.clone());
            s.set_validshape(b1.clone(), kv, nv);
            s.set_flag(Pipe::Mte2, Pipe::Mte1, e);
            s.wait_flag(Pipe::Mte2, Pipe::Mte1, e);
            s.mov(a0.clone(), a1);
            s.mov(b0.clone(), b1);
            s.set_flag(Pipe::Mte1, Pipe::Mte2, e);
            let last = kk.clone().eq_(Expr::from(steps) - 1);
            let ops = (acc.into(), a0, b0);
            let phase = |t: &mut Body<'_>, accumulate: bool| {
                t.if_else(
                    last.clone(),
                    |f| matmul(f, ops.clone(), accumulate, Phase::Final),
                    |p| matmul(p, ops.clone(), accumulate, Phase::Partial),
                )
            };
            s.if_else(kk.clone().eq_(0), |f| phase(f, false), |r| phase(r, true));
        };
        for e in 0..2 {
            c.set_flag(Pipe::Mte1, Pipe::Mte2, e);
        }
        // Ping-pong: even slices in L1 buffers 0, odd ones in buffers 1, so the next slice's
        // DMA overlaps this slice's L1 -> L0 moves and matmul.
        c.for_range("kk", 0, Expr::from(steps), 2, |s, kk| {
            k_step(s, Expr::from(kk), 0);
            let odd = Expr::from(kk) + 1;
            s.if_(odd.clone().lt(Expr::from(steps)), |t| k_step(t, odd, 1));
        });
        for e in 0..2 {
            c.wait_flag(Pipe::Mte1, Pipe::Mte2, e);
        }
        c.acquire(ch);
        // The cube's handle of the Fixpipe destination gets the shape the Fixpipe writes (A5
        // ignores it; the public CPU model reads it).
        c.set_validshape(d_ub, tm as i64, nv);
        let mv_ = c
            .mov(d_ub, acc)
            .mode(AccToVecMode::SingleModeVec0)
            .scale(Scale::Tile(sc.into()))
            .phase(Phase::Final);
        if matches!(epi, Epilogue::Int8 { relu: true }) {
            mv_.relu();
        }
        c.push(ch);
    });

    let f_ub = kb.tile(
        "f_ub",
        TileType::new(MemSpace::Vec, DType::F32, tm, tn, Layout::ND).dynamic(),
    );
    // A 16-bit result reuses the Fixpipe's f16 bytes (dead once decoded into f_ub): the UB holds
    // d_ub and f_ub (64 + 128 KiB at tm = 128), not a third tile.
    let o_ub = match out_dt {
        DType::F32 | DType::I8 => None,
        d if d == fix_dt => Some(d_ub),
        _ => Some(kb.reinterpret(
            "o_ub",
            d_ub,
            Reinterpret {
                dtype: Some(out_dt),
                shape: Some((tm, tn)),
                layout: None,
            },
        )),
    };
    let r_ub = kb.tile(
        "r_ub",
        TileType::new(MemSpace::Vec, DType::F32, 1, tm, Layout::ND),
    );
    let r_col = kb.reinterpret(
        "r_col",
        r_ub,
        Reinterpret {
            dtype: None,
            shape: Some((tm, 1)),
            layout: Some(Layout::DN),
        },
    );
    let bias_ub = kb.tile(
        "bias_ub",
        TileType::new(MemSpace::Vec, DType::F32, 1, tn, Layout::ND).dynamic(),
    );
    kb.vector(|v| {
        let (bm, bn, mv, nv) = place(v, &m, &n);
        v.pop(ch);
        v.if_(Expr::SubBlockIdx.eq_(0), |a| {
            a.set_validshape(d_ub, mv, nv);
            let o_off = Expr::from(bm) * (tm as i64) * n.clone() + Expr::from(bn) * tn as i64;
            let out_view = GmView::nd(out, o_off, mv, nv, n.clone());
            let Epilogue::Float {
                bias: has_bias,
                relu,
                ..
            } = epi
            else {
                a.store(out_view, d_ub);
                return;
            };
            a.set_validshape(f_ub, mv, nv);
            a.cast(f_ub, d_ub, RoundMode::Rint);
            if let Some(rows) = rows {
                a.load(
                    r_ub,
                    GmView::nd(rows, Expr::from(bm) * tm as i64, 1, tm, m_pad_expr(&m, tm)),
                );
                a.set_validshape(r_col, mv, 1);
                a.broadcast(BinaryOp::Mul, Axis::Row, f_ub, f_ub, r_col);
            }
            if let (true, Some(bias)) = (has_bias, bias) {
                a.set_validshape(bias_ub, 1, nv);
                a.load(
                    bias_ub,
                    GmView::nd(bias, Expr::from(bn) * tn as i64, 1, nv, n_pad_expr(&n, tn)),
                );
                a.broadcast(BinaryOp::Add, Axis::Col, f_ub, f_ub, bias_ub);
            }
            if relu {
                a.unary(UnaryOp::Relu, f_ub, f_ub);
            }
            match o_ub {
                Some(o) => {
                    a.set_validshape(o, mv, nv);
                    a.cast(o, f_ub, RoundMode::Rint);
                    a.store(out_view, o);
                }
                None => {
                    a.store(out_view, f_ub);
                }
            }
        });
        v.release(ch);
    });
    kb.build()
}

/// `acc (+)= a · b` with the unit-flag phase `ph`.
fn matmul(t: &mut Body<'_>, (acc, a, b): (TileRef, TileRef, TileRef), accumulate: bool, ph: Phase) {
    if accumulate {
        t.matmul_acc(acc, a, b).phase(ph);
    } else {
        t.matmul(acc, a, b).phase(ph);
    }
}

/// `tiles_m * tm` from `m` (the row-factor tensor's width).
fn m_pad_expr(m: &Expr, tm: u64) -> Expr {
    m.clone().ceil_div(tm as i64) * tm as i64
}

/// `tiles_n * tn` from `n` (the word and bias tensors' width).
fn n_pad_expr(n: &Expr, tn: u64) -> Expr {
    n.clone().ceil_div(tn as i64) * tn as i64
}

/// Fixpipe words for per-channel scales, padded to `n_pad` (padding channels get scale 0).
fn word_tensor(scales: &[f32], n_pad: usize, signed: bool) -> GmTensor {
    let v: Vec<i64> = (0..n_pad)
        .map(|j| QuantWord::new(scales.get(j).copied().unwrap_or(0.0), signed).0 as i64)
        .collect();
    GmTensor::from_i64(DType::U64, &[1, n_pad], &v)
}

/// The bytes of [`word_tensor`] for unsigned (dequantisation) words: what a weight keeps
/// ([`QuantizedWeight::dequant`]), padded to `n_pad` channels once for every call.
pub(crate) fn word_bytes(scales: &[f32], n_pad: usize) -> Vec<u8> {
    word_tensor(scales, n_pad, false).data
}

/// The first `n_pad` of a weight's kept Fixpipe words as the `words [1, n_pad]` input (a
/// prefix: they are padded to a multiple of every channel tile).
fn kept_words(w: &QuantizedWeight, n_pad: usize) -> Result<Arg<'_>, OpError> {
    let data = w
        .dequant()
        .word_bytes
        .get(..n_pad * 8)
        .ok_or_else(|| OpError::Internal {
            op: OP,
            what: format!("the weight keeps fewer than the plan's {n_pad} Fixpipe words"),
        })?;
    Ok(Arg::Input(GmInput {
        dtype: DType::U64,
        shape: vec![1, n_pad],
        data,
    }))
}

/// f32 values padded with zeros to `len`, as a `[1, len]` tensor.
fn padded_f32(v: &[f32], len: usize) -> GmTensor {
    let mut p = v.to_vec();
    p.resize(len, 0.0);
    GmTensor::from_f32(DType::F32, &[1, len], &p)
}

/// Int8 values as a kernel input borrowing their bytes.
fn i8_input<'a>(v: &'a [i8], shape: &[usize]) -> Arg<'a> {
    Arg::Input(GmInput {
        dtype: DType::I8,
        shape: shape.to_vec(),
        data: bytemuck::cast_slice(v),
    })
}

/// Launches the plan of `shape` with its tensor arguments, the kernel writing `out` (`[M, N]`
/// of the out dtype, as little-endian bytes) in place.
fn launch<'a>(
    runner: &mut Runner,
    shape: &QuantMatmulShape,
    plan: &QuantPlan,
    mut tensors: Vec<Arg<'a>>,
    out: &'a mut [u8],
) -> Result<(), OpError> {
    bridge::check_storage(
        OP,
        "out",
        (shape.out_dtype, out.len()),
        shape.out_dtype,
        shape.m * shape.n,
    )?;
    let kernel = compiled(OP, &plan.key(), || plan.kernel())?;
    let mut args: Vec<Arg<'a>> = plan.scalars.iter().map(|&(_, v)| Arg::Int(v)).collect();
    args.append(&mut tensors);
    args.push(Arg::InOut(GmInOut {
        dtype: shape.out_dtype,
        shape: vec![shape.m, shape.n],
        data: out,
    }));
    runner.launch(kernel, plan.block_dim, &mut args)
}

/// Runs the float-output kernel of `call`, writing `[M, N]` of its out dtype into `out` (the
/// storage its candle tensor then owns: no result copy).
pub(crate) fn run_float(
    runner: &mut Runner,
    w: &QuantizedWeight,
    call: &QuantCall<'_>,
    out: &mut [u8],
) -> Result<(), OpError> {
    let s = &call.shape;
    let plan = plan(s, runner.plan_target());
    let (m_pad, n_pad) = (plan.m_pad(), plan.n_pad());
    let mut t = vec![
        i8_input(&call.xq, &[s.m, s.k]),
        i8_input(w.data(), &[s.n, s.k]),
        kept_words(w, n_pad)?,
        Arg::Tensor(padded_f32(&call.row_factor, m_pad)),
    ];
    if let Some(b) = &call.bias {
        t.push(Arg::Tensor(padded_f32(b, n_pad)));
    }
    launch(runner, s, &plan, t, out)
}

/// Runs the int8-output kernel of `call`: `[M, N]` int8.
pub(crate) fn run_int8(
    runner: &mut Runner,
    w: &QuantizedWeight,
    call: &QuantCall<'_>,
) -> Result<Vec<i8>, OpError> {
    let s = &call.shape;
    let plan = plan(s, runner.plan_target());
    let t = vec![
        i8_input(&call.xq, &[s.m, s.k]),
        i8_input(w.data(), &[s.n, s.k]),
        Arg::Tensor(word_tensor(&call.words, plan.n_pad(), true)),
    ];
    let mut out = vec![0i8; s.m * s.n];
    launch(runner, s, &plan, t, bytemuck::cast_slice_mut(&mut out))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tile_backend::passes::compile;

    fn tiles(tm: u64, tn: u64, tk: u64) -> Tiles {
        Tiles { tm, tn, tk }
    }

    /// Each side is the smallest power of two holding the call, between the cube's fractal and
    /// the largest tiles: decode's few rows take 16-row tiles, the bench's M = 256 the largest.
    /// On the device, a grid short of the 32 clusters halves the channels and doubles the slice.
    #[test]
    fn tiles_follow_the_call() {
        let (cpu, dev) = (PlanTarget::Cpu, PlanTarget::Device);
        let cases = [
            (cpu, (256, 4096, 4096), Tiles::LARGEST),
            (dev, (256, 4096, 4096), Tiles::LARGEST),
            (cpu, (1000, 7168, 2048), Tiles::LARGEST),
            (dev, (1000, 7168, 2048), Tiles::LARGEST),
            (cpu, (1, 4096, 4096), tiles(16, 256, 256)),
            (cpu, (16, 4096, 4096), tiles(16, 256, 256)),
            (cpu, (17, 4096, 4096), tiles(32, 256, 256)),
            (cpu, (33, 300, 257), tiles(64, 256, 256)),
            (cpu, (4, 256, 128), tiles(16, 128, 256)),
            (cpu, (4, 128, 256), tiles(16, 256, 128)),
            (cpu, (1, 1, 1), tiles(16, 32, 32)),
            // 16 blocks of 256 channels would leave half the clusters idle: 32 of 128.
            (dev, (1, 4096, 4096), tiles(16, 128, 512)),
            (dev, (128, 4096, 4096), tiles(128, 128, 512)),
            (dev, (33, 300, 257), tiles(64, 128, 512)),
            (dev, (4, 128, 256), tiles(16, 128, 128)),
            // Narrower than 256 channels: as on the CPU.
            (dev, (4, 256, 128), tiles(16, 128, 256)),
        ];
        for (target, (m, k, n), want) in cases {
            assert_eq!(
                Tiles::for_shape(m, k, n, target),
                want,
                "{target:?} {m}x{k}x{n}"
            );
        }
        // The grid and the padded widths follow the tiles.
        let s = |m, k, n| {
            Checked::emit(QuantMatmulShape {
                out_dtype: DType::F32,
                m,
                k,
                n,
                bias: false,
                relu: false,
            })
            .expect("a valid shape")
        };
        let p = plan(&s(3, 256, 600), PlanTarget::Cpu);
        assert_eq!((p.tiles, p.block_dim), (tiles(16, 256, 256), 3));
        assert_eq!((p.m_pad(), p.n_pad()), (16, 768));
        let p = plan(&s(3, 256, 600), PlanTarget::Device);
        assert_eq!((p.tiles, p.block_dim), (tiles(16, 128, 256), 5));
        assert_eq!((p.m_pad(), p.n_pad()), (16, 640));
        for t in [PlanTarget::Cpu, PlanTarget::Device] {
            assert_eq!(plan(&s(256, 4096, 4096), t).block_dim, 32);
            assert_ne!(plan(&s(1, 64, 64), t).key(), plan(&s(256, 64, 64), t).key());
        }
        assert_eq!(plan(&s(1, 4096, 4096), PlanTarget::Device).block_dim, 32);
    }

    /// `tileops emit --op quant-matmul --m M` for every M in 1..=300 (float and int8 output):
    /// each kernel it emits passes the verifier, whose acc-stride rule holds the Acc's valid rows
    /// (read at their multiple of 16 by A5's Fixpipe) to the rows the matmul wrote.
    #[test]
    fn the_emitted_kernels_of_m_1_to_300_pass_the_verifier() {
        let mut seen = std::collections::HashSet::new();
        for out_dtype in [DType::BF16, DType::I8] {
            for m in 1..=300 {
                let shape = QuantMatmulShape {
                    out_dtype,
                    m,
                    ..QuantMatmulShape::default()
                };
                let launches = crate::registry::launches(&shape).expect("a valid shape");
                for l in launches {
                    if !seen.insert(l.kernel.name.clone()) {
                        continue;
                    }
                    let r = tile_backend::verify::verify(&l.kernel);
                    assert!(r.is_ok(), "m = {m}: {}", r);
                }
            }
        }
        // Every row tile (16, 32, 64, 128) of both outputs.
        assert_eq!(seen.len(), 8, "{seen:?}");
    }

    /// TileSim refuses a Fixpipe read at a stride other than the matmul's; over M = 1..=300
    /// (every short last tile of every row tile) the kernel runs and gives the Reference's bits.
    #[test]
    fn tilesim_runs_every_m_from_1_to_300_as_the_reference() {
        use crate::{quant_matmul, quantize_per_channel, Backend, QuantMatmulParams};
        use candle_core::{Device, Tensor};
        let (k, n) = (64, 48);
        let wv: Vec<f32> = (0..n * k)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 64.0)
            .collect();
        let w = Tensor::from_vec(wv, (n, k), &Device::Cpu).expect("w");
        let w = quantize_per_channel(&w).expect("quantised");
        let p = QuantMatmulParams::default();
        for m in 1..=300 {
            let xv: Vec<f32> = (0..m * k)
                .map(|i| ((i * 53 % 97) as f32 - 48.0) / 16.0)
                .collect();
            let x = Tensor::from_vec(xv, (m, k), &Device::Cpu).expect("x");
            let bits = |b: Backend| -> Vec<u32> {
                let t =
                    quant_matmul(&x, &w, &p, Some(b)).unwrap_or_else(|e| panic!("m = {m}: {e}"));
                let v = t
                    .flatten_all()
                    .and_then(|t| t.to_vec1::<f32>())
                    .expect("f32");
                v.iter().map(|f| f.to_bits()).collect()
            };
            assert_eq!(bits(Backend::TileSim), bits(Backend::Reference), "m = {m}");
        }
    }

    /// The smallest, the largest and the deepest tile classes of every epilogue compile for the
    /// Ascend 950
    /// (verified: L0, UB and 32-byte row rules; memory planned; syncs inserted).
    #[test]
    fn every_tile_class_compiles() {
        let epis = [
            Epilogue::Float {
                out: DType::F32,
                bias: true,
                relu: true,
            },
            Epilogue::Float {
                out: DType::BF16,
                bias: false,
                relu: false,
            },
            Epilogue::Int8 { relu: false },
        ];
        for epi in epis {
            for t in [
                tiles(16, 32, 32),
                tiles(16, 256, 128),
                tiles(128, 128, 512),
                Tiles::LARGEST,
            ] {
                let k = quant_matmul_kernel(epi, t);
                if let Err(e) = compile(&k, crate::runtime::arch()) {
                    panic!("{epi:?} {t:?}: {e}");
                }
            }
        }
    }
}
