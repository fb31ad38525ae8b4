//! `attention_tile`: the one-tile flash-attention core, written the Ascend 950 way.

use crate::dsl::{Body, KernelBuilder, Reinterpret};
use crate::ir::{
    AccToVecMode, Axis, BinaryOp, CoreKind, DType, Expr, GmView, Kernel, Layout, MemSpace, Phase,
    Pipe, RoundMode, TileType,
};

/// How the cube and the vector cores hand data to each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Handoff {
    /// Declared channels (acquire/push/pop/release); the sync pass lowers them to cross-core
    /// flags.
    #[default]
    Channels,
    /// Hand-written cross-core flags (`set_cross_flag` / `wait_cross_flag`).
    CrossFlags,
}

/// Shapes of [`attention_tile`].
///
/// `ts` must be a multiple of 32 (DualModeSplitN gives each AIV `ts / 2` queries, 16-aligned),
/// `tkv` and `d` multiples of 16; `dtype` is f16 or bf16.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionParams {
    /// Queries in the tile (TS).
    pub ts: u64,
    /// Keys/values in the tile (TKV).
    pub tkv: u64,
    /// Head dimension (D), for Q, K and V.
    pub d: u64,
    /// Input dtype (f16 or bf16); P takes it too. The output is f32.
    pub dtype: DType,
    /// Independent tiles (heads), one per block.
    pub batch: u64,
    /// Cube <-> vector synchronisation style.
    pub handoff: Handoff,
}

impl Default for AttentionParams {
    fn default() -> Self {
        AttentionParams {
            ts: 32,
            tkv: 128,
            d: 64,
            dtype: DType::F16,
            batch: 1,
            handoff: Handoff::Channels,
        }
    }
}

impl AttentionParams {
    /// Blocks to launch: one per tile of the batch.
    pub fn block_dim(&self) -> u64 {
        self.batch.max(1)
    }
}

/// Cross-core flag ids (cube code signals AIV k with `id + 16 k`; vector code writes `id`).
const FLAG_S: u8 = 0;
const FLAG_P: u8 = 1;
const FLAG_O: u8 = 2;

/// `O = softmax(scale · Q · K^T) · V` for one tile: `ts` queries against `tkv` keys.
///
/// Arguments: `q` [batch, ts, d], `k` [batch, tkv, d], `v` [batch, tkv, d] (inputs, `dtype`),
/// `o` [batch, ts, d] (output, f32), `scale` (f32 scalar, e.g. `1 / sqrt(d)`). Block `b`
/// computes batch entry `b`; launch [`AttentionParams::block_dim`] blocks.
///
/// Data flow ("DN mode", ASCEND950.md §9), with H = ts / 2 queries per vector core:
///
/// ```text
/// cube  MTE2  K [tkv, d] ND          -> k_l1  Mat NZ  [tkv, d]
///             Q^T: DN view of Q      -> qt_l1 Mat ZN  [d, ts]     (DN -> ZN load: free transpose)
///             V [tkv, d] ND          -> v_l1  Mat NZ  [tkv, d]
///       MTE1  k_l1 -> k_l0 Left NZ [tkv, d]; qt_l1 -> qt_l0 Right ZN [d, ts];
///             v_l1 -> v_l0 Right ZN [tkv, d]
///       M     s_acc Acc [tkv, ts] f32 = K · Q^T = S^T              (phase Final)
///       FIX   s_acc -> s_ub, DualModeSplitN (phase Final): AIV j gets S^T[:, jH .. jH+H],
///             Vec ND [tkv, H] f32 = all keys for its H queries           -> signal "S ready"
/// vec   V     s = s * scale; mx [1, H] = col_max(s); s = s - mx (Col broadcast); s = exp(s);
///             sum [1, H] = col_sum(s)            (softmax along KV = down each column)
///             p_ub Vec ND [tkv, H] dtype = cast(s); p_nz Vec NZ [tkv, H] = move(p_ub)
///       MTE3  insert p_nz into p_l1 Mat NZ [tkv, ts] at column jH (NZ -> NZ) -> signal "P ready"
/// cube  MTE1  p_l1 reinterpreted as ZN [ts, tkv] is P^T (NZ [R, C] and ZN [C, R] are the same
///             bytes) -> pt_l0 Left NZ [ts, tkv]
///       M     o_acc Acc [ts, d] f32 = P^T · V                           (phase Final)
///       FIX   o_acc -> o_ub, DualModeSplitM (phase Final): AIV j gets rows jH .. jH+H, i.e.
///             the same H queries whose softmax it computed          -> signal "O ready"
/// vec   V     sum [1, H] ND reinterpreted as DN [H, 1] (same bytes: a per-row operand);
///             o = o / sum (Row broadcast)
///       MTE3  o_ub [H, d] -> O rows jH .. jH+H
/// ```
///
/// Synchronisation: intra-core flags MTE2->MTE1 (event 0), MTE1->M (events 0, 1) on the cube and
/// V->MTE3 (events 0, 1) on the vector cores; the unit flag (phase Final) orders each matmul
/// before its Fixpipe read. The three handoffs "S ready", "P ready" and "O ready" are channels
/// `s`, `p`, `o` ([`Handoff::Channels`], depth 1, each released after its data is consumed) or
/// cross-core flags 0, 1, 2 ([`Handoff::CrossFlags`]: the cube sets/waits `id` and `id + 16`,
/// one per AIV; vector code uses `id`). One shot per block, so no slot is ever reused.
///
/// The softmax uses the tile's own maximum (one KV tile: no online rescale).
pub fn attention_tile(p: &AttentionParams) -> Kernel {
    let (ts, tkv, d, dt) = (p.ts, p.tkv, p.d, p.dtype);
    let h = ts / 2;
    let mut kb = KernelBuilder::new(format!("attention_tile_{dt}"));
    let batch = p.batch.max(1);
    let q = kb.input("q", dt, [batch, ts, d]);
    let k = kb.input("k", dt, [batch, tkv, d]);
    let v = kb.input("v", dt, [batch, tkv, d]);
    let o = kb.output("o", DType::F32, [batch, ts, d]);
    let scale = kb.scalar("scale", DType::F32);
    // A positive, moderate scale keeps generated inputs away from exp overflow.
    kb.range(scale, 0.01, 0.25);

    let ty = |space, dtype, rows, cols, layout| TileType::new(space, dtype, rows, cols, layout);
    use Layout::{DN, ND, NZ, ZN};
    use MemSpace::{Acc, Left, Mat, Right, Vec as Ub};
    // Cube tiles.
    let k_l1 = kb.tile("k_l1", ty(Mat, dt, tkv, d, NZ));
    let qt_l1 = kb.tile("qt_l1", ty(Mat, dt, d, ts, ZN));
    let v_l1 = kb.tile("v_l1", ty(Mat, dt, tkv, d, NZ));
    let p_l1 = kb.tile("p_l1", ty(Mat, dt, tkv, ts, NZ));
    let pt_l1 = kb.reinterpret(
        "pt_l1",
        p_l1,
        Reinterpret {
            dtype: None,
            shape: Some((ts, tkv)),
            layout: Some(ZN),
        },
    );
    let k_l0 = kb.tile("k_l0", ty(Left, dt, tkv, d, NZ));
    let qt_l0 = kb.tile("qt_l0", ty(Right, dt, d, ts, ZN));
    let pt_l0 = kb.tile("pt_l0", ty(Left, dt, ts, tkv, NZ));
    let v_l0 = kb.tile("v_l0", ty(Right, dt, tkv, d, ZN));
    let s_acc = kb.tile("s_acc", ty(Acc, DType::F32, tkv, ts, NZ));
    let o_acc = kb.tile("o_acc", ty(Acc, DType::F32, ts, d, NZ));
    // Vector tiles (one set per AIV, at the same UB addresses).
    let s_ub = kb.tile("s_ub", ty(Ub, DType::F32, tkv, h, ND));
    let mx = kb.tile("mx", ty(Ub, DType::F32, 1, h, ND));
    let sum = kb.tile("sum", ty(Ub, DType::F32, 1, h, ND));
    let sum_col = kb.reinterpret(
        "sum_col",
        sum,
        Reinterpret {
            dtype: None,
            shape: Some((h, 1)),
            layout: Some(DN),
        },
    );
    let p_ub = kb.tile("p_ub", ty(Ub, dt, tkv, h, ND));
    let p_nz = kb.tile("p_nz", ty(Ub, dt, tkv, h, NZ));
    let o_ub = kb.tile("o_ub", ty(Ub, DType::F32, h, d, ND));

    let channels = match p.handoff {
        Handoff::Channels => Some((
            kb.channel("s", CoreKind::Cube, 1),
            kb.channel("p", CoreKind::Vector, 1),
            kb.channel("o", CoreKind::Cube, 1),
        )),
        Handoff::CrossFlags => None,
    };
    // Cube side of a cube -> vector handoff: wait for a free slot / signal both AIVs.
    let cube_signal = |c: &mut Body<'_>, id: u8, ch: Option<crate::ir::ChannelId>| match ch {
        Some(ch) => c.push(ch),
        None => {
            c.set_cross_flag(Pipe::Fix, id);
            c.set_cross_flag(Pipe::Fix, id + 16);
        }
    };
    let qkv_off = |rows: u64| Expr::BlockIdx * (rows * d);

    kb.cube(|c| {
        // GM -> L1.
        c.load(k_l1, GmView::nd(k, qkv_off(tkv), tkv, d, d));
        c.load(qt_l1, GmView::dn(q, qkv_off(ts), d, ts, d));
        c.load(v_l1, GmView::nd(v, qkv_off(tkv), tkv, d, d));
        c.set_validshape(pt_l1, ts, tkv);
        c.set_flag(Pipe::Mte2, Pipe::Mte1, 0);
        // L1 -> L0.
        c.wait_flag(Pipe::Mte2, Pipe::Mte1, 0);
        c.mov(k_l0, k_l1);
        c.mov(qt_l0, qt_l1);
        c.mov(v_l0, v_l1);
        c.set_flag(Pipe::Mte1, Pipe::M, 0);
        // S^T = K · Q^T.
        c.wait_flag(Pipe::Mte1, Pipe::M, 0);
        c.matmul(s_acc, k_l0, qt_l0).phase(Phase::Final);
        // S^T -> both UBs, columns split: each AIV holds all keys for half of the queries.
        if let Some((s_ch, _, _)) = channels {
            c.acquire(s_ch);
        }
        c.mov(s_ub, s_acc)
            .mode(AccToVecMode::DualModeSplitN)
            .phase(Phase::Final);
        cube_signal(c, FLAG_S, channels.map(|x| x.0));
        // P (both halves) in L1 -> P^T in L0A.
        match channels {
            Some((_, p_ch, _)) => c.pop(p_ch),
            None => {
                c.wait_cross_flag(Pipe::Mte1, FLAG_P);
                c.wait_cross_flag(Pipe::Mte1, FLAG_P + 16);
            }
        }
        c.mov(pt_l0, pt_l1);
        if let Some((_, p_ch, _)) = channels {
            c.release(p_ch);
        }
        c.set_flag(Pipe::Mte1, Pipe::M, 1);
        // O = P^T · V.
        c.wait_flag(Pipe::Mte1, Pipe::M, 1);
        c.matmul(o_acc, pt_l0, v_l0).phase(Phase::Final);
        // O -> both UBs, rows split: each AIV gets the rows of its own queries.
        if let Some((_, _, o_ch)) = channels {
            c.acquire(o_ch);
        }
        c.mov(o_ub, o_acc)
            .mode(AccToVecMode::DualModeSplitM)
            .phase(Phase::Final);
        cube_signal(c, FLAG_O, channels.map(|x| x.2));
    });

    kb.vector(|vb| {
        match channels {
            Some((s_ch, _, _)) => vb.pop(s_ch),
            None => vb.wait_cross_flag(Pipe::V, FLAG_S),
        }
        // Softmax along KV: down each column of this AIV's [tkv, H] slice of S^T.
        vb.muls(s_ub, s_ub, scale);
        vb.col_max(mx, s_ub);
        vb.broadcast(BinaryOp::Sub, Axis::Col, s_ub, s_ub, mx);
        vb.exp(s_ub, s_ub);
        vb.col_sum(sum, s_ub);
        vb.cast(p_ub, s_ub, RoundMode::Rint);
        if let Some((s_ch, _, _)) = channels {
            vb.release(s_ch);
        }
        // P: ND -> NZ in UB, then inserted into L1 at this AIV's column half.
        vb.mov(p_nz, p_ub);
        vb.set_flag(Pipe::V, Pipe::Mte3, 0);
        vb.wait_flag(Pipe::V, Pipe::Mte3, 0);
        if let Some((_, p_ch, _)) = channels {
            vb.acquire(p_ch);
        }
        vb.mov(p_l1, p_nz).offset(0, Expr::SubBlockIdx * h);
        match channels {
            Some((_, p_ch, _)) => vb.push(p_ch),
            None => vb.set_cross_flag(Pipe::Mte3, FLAG_P),
        }
        // O rows of this AIV's queries, divided by their softmax sums.
        vb.set_validshape(sum_col, h, 1);
        match channels {
            Some((_, _, o_ch)) => vb.pop(o_ch),
            None => vb.wait_cross_flag(Pipe::V, FLAG_O),
        }
        vb.broadcast(BinaryOp::Div, Axis::Row, o_ub, o_ub, sum_col);
        vb.set_flag(Pipe::V, Pipe::Mte3, 1);
        vb.wait_flag(Pipe::V, Pipe::Mte3, 1);
        let o_off = Expr::BlockIdx * (ts * d) + Expr::SubBlockIdx * (h * d);
        vb.store(GmView::nd(o, o_off, h, d, d), o_ub);
        if let Some((_, _, o_ch)) = channels {
            vb.release(o_ch);
        }
    });
    kb.build()
}
