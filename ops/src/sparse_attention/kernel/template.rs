//! The attention kernel template shared by sparse (top-k) and dense (GQA) paged attention, and
//! the split-merge kernel.
//!
//! # `attn_split` (one kernel definition, several consumers)
//!
//! One block = one (batch row `b`, head tile `ht`, top-k split `sp`); `block = (b * nht + ht) *
//! splits + sp`. A head tile is `hg` query heads (padded to `th`, a multiple of 32, so each AIV
//! owns `th / 2` rows); all of them share one gathered K (and V) tile per chunk, so K is read
//! from GM once per chunk for the whole head tile.
//!
//! ```text
//! cube   MTE2  Q [hv, Dqk] -> q_l1 Mat NZ [th, dp] (zero padded)
//!        per chunk c of the split (slot s = local chunk % bufs; bufs = 2 (ping-pong) on the
//!        device, 1 in the CPU plan):
//!        MTE2  gather_in_l1: nv rows (indices[b, c*chunk ..], block table row b) of `dqk`
//!              columns from column `ht * head_col_stride` -> k_l1[s] Mat NZ [chunk, dp]
//!              (V likewise into v_l1[s] when the kernel has a separate V cache); zero pad
//!        per K slice j: MTE1 q_l1[:, j ks..] -> q_l0[j%bufs] Left; k_l1[s] seen as ZN [dp, chunk]
//!              (= K^T, same bytes) rows j ks.. -> kt_l0[j%bufs] Right; M s_acc[s] (+)= q · kt
//!        FIX   s_acc[s] -> s_ub (DualModeSplitM: AIV i gets heads i*th/2 ..)      -> channel S
//!        MTE1  (channel P) p_l1[c % pbufs] [th, chunk] -> p_l0 Left (pbufs = 2 in the CPU
//!              plan where L1 has room, else 1)
//!        per V slice j: MTE1 V[:, j ns..] (NZ -> ZN) -> v_l0[..%bufs] Right; M pv_acc[..%2] = P · V
//!              FIX pv_acc -> pv_ub (SplitM)                                     -> channel PV
//! vector (each AIV: r = th/2 heads, f32): s *= scale; tail chunk: columns >= nv := -inf;
//!        m_new = max(m, rowmax s); alpha = exp(m - m_new); s = exp(s - m_new);
//!        l = l alpha + rowsum s; P = cast(s) ND -> NZ -> p_l1[c % pbufs] rows sub*r..
//!        (channel P);
//!        O_j = O_j alpha + PV_j.  End: o = O / max(l, 1), lse = m + ln(max(l, 1));
//!        MTE3 o -> o_ws[sp, b*H + h, :], lse -> lse_ws[sp, b*H + h].
//! ```
//!
//! `m` starts at -1e30 (finite), so a split with no token writes o = 0 and lse ~ -1e30, which
//! the merge weighs by exp(-1e30 - M) = 0. Intra-core flags are inserted by the sync pass from
//! byte ranges (the ping-pong slots are distinct buffers to it); the cube <-> vector handoffs
//! are the channels S, P and PV.
//!
//! # `attn_merge` (vector only)
//!
//! Each AIV owns `hm` consecutive global rows `g = b*H + h`: M = max_i lse_i, w_i = exp(lse_i -
//! M), s = sum w_i, lse = M + ln s, out = sum_i (w_i / s) o_i; sink: out *= 1 / (1 + exp(sink -
//! lse)); lse = max(lse, fix) where the host's `fix` row is +inf for a row with no valid index
//! (its out is already 0) and -inf otherwise; out cast to the data dtype. With one split, f32
//! data and no sink that is the identity but for the +inf, so a CPU-plan run does not launch it
//! (`merge_is_identity`).
//!
//! ```text
//! vector (each AIV: hm rows g0..): MTE2 lse_ws -> lse_parts ND [splits, hm] (part i of row g in
//!        column g); M = colmax, w = exp(lse_parts - M) (column broadcast), s = colsum w,
//!        all ND [1, hm]; per part i (o_i double buffered): MTE2 o_ws[i] -> o_i ND [hm, vp];
//!        w_i = row i of w, seen as DN [hm, 1]; acc += o_i * w_i (row broadcast).
//!        acc /= s (as DN [hm, 1]); lse = M + ln s; sink; lse = max(lse, fix); MTE3 out, lse.
//! ```

use crate::error::OpError;
use crate::runtime::{compiled, PlanTarget, Runner};
use tile_backend::dsl::{Body, Gather, KernelBuilder, Reinterpret};
use tile_backend::ir::{
    AccToVecMode, Axis, BinaryOp, CoreKind, DType, Expr, GmView, Kernel, Layout, MemSpace,
    PadValue, ParamId, Pipe, RoundMode, TileId, TileType, UnaryOp,
};
use tile_backend::sim::{Arg, GmInput, GmTensor};

/// The running max a head starts with (finite, so empty splits stay NaN-free).
pub(crate) const M_INIT: f64 = -1e30;
/// Largest number of top-k splits the merge kernel takes (rows of its lse tile).
pub(crate) const MAX_SPLITS: u64 = 32;
/// Global rows each AIV of the merge kernel owns.
pub(crate) const MERGE_ROWS: u64 = 8;

/// `v` rounded up to a multiple of `m`.
pub(crate) fn round_up(v: u64, m: u64) -> u64 {
    v.div_ceil(m.max(1)) * m.max(1)
}

/// Static shape of one attention kernel (its specialisation key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AttnCfg {
    /// Kernel name prefix.
    pub name: &'static str,
    /// Data dtype (q, caches, P).
    pub dtype: DType,
    /// Query heads per batch row (rows of q per batch entry).
    pub heads: u64,
    /// Query heads per head tile.
    pub hg: u64,
    /// Head tiles (`ceil(heads / hg)`).
    pub nht: u64,
    /// Columns gathered for K (the contraction).
    pub dqk: u64,
    /// Output columns (V width).
    pub v_dim: u64,
    /// Columns of a cache row.
    pub kv_cols: u64,
    /// Cache column offset per head tile (dense GQA: D; sparse: 0).
    pub head_col_stride: u64,
    /// V comes from its own cache (dense) instead of the first columns of K (sparse).
    pub separate_v: bool,
    /// Tokens per cache block.
    pub block_size: u64,
    /// Padded head-tile rows (multiple of 32).
    pub th: u64,
    /// Top-k tokens per chunk (rows of a gathered tile).
    pub chunk: u64,
    /// K slice width of Q K^T (`bufs` Q slices fit L0A beside P).
    pub ks: u64,
    /// V slice width of P V (`bufs` V slices fit L0B beside the K^T slices).
    pub ns: u64,
    /// Buffers per gathered L1 tile and per L0A/L0B operand tile: 2 (ping-pong: the next
    /// chunk's gather and the next slice's move overlap this one's matmul) or 1 (a target that
    /// runs a block's instructions one after another, where buffers twice the size halve the
    /// chunks and slices instead).
    pub bufs: u64,
    /// Buffers of P in L1: 2 where L1 has room and the target runs a block's instructions one
    /// after another (the simulator's CPU plan), so that writing the next chunk's P never meets
    /// the L1 -> L0A move of the previous one still pending in the simulator (which would then
    /// have to make it); 1 otherwise (the device plan is unchanged).
    pub pbufs: u64,
}

impl AttnCfg {
    /// Chooses the tiling for a problem: head tile, chunk, K and V slices within L1/L0/UB.
    /// `double_buffer`: whether the target overlaps a block's pipes (the device, and profiling
    /// for it). Then the gathered and L0 operand tiles are ping-ponged; otherwise (the
    /// simulator's CPU runs) they are buffered once and sized to the room that leaves.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        name: &'static str,
        dtype: DType,
        heads: u64,
        hg: u64,
        dqk: u64,
        v_dim: u64,
        kv_cols: u64,
        head_col_stride: u64,
        separate_v: bool,
        block_size: u64,
        double_buffer: bool,
    ) -> Self {
        let es = dtype.size_bytes();
        let hg = hg.clamp(1, 128);
        let th = round_up(hg, 32);
        let dp = round_up(dqk, 16);
        let vp = round_up(v_dim, 16);
        let bufs = if double_buffer { 2 } else { 1 };
        // Chunk: as large as L1 allows (Q + `bufs` K (and V) tiles + P), at most 128 (64 for
        // f32).
        let mut chunk = if es == 2 { 128 } else { 64 };
        let l1 = |c: u64| {
            let kv = if separate_v { 2 } else { 1 } * bufs * c * dp * es;
            th * dp * es + kv + th * c * es
        };
        while chunk > 16 && l1(chunk) > 500 * 1024 {
            chunk /= 2;
        }
        let pbufs = if !double_buffer && l1(chunk) + th * chunk * es <= 500 * 1024 {
            2
        } else {
            1
        };
        // K slice: `bufs` Q slices + P in L0A (64 KiB) ...
        let l0a = 64 * 1024 - th * chunk * es;
        // ... and the K^T slices take at most half of L0B (64 KiB), leaving room for V slices.
        let ks_max = (l0a / (bufs * th * es))
            .min(32 * 1024 / (bufs * chunk * es))
            .max(16)
            / 16
            * 16;
        let ks = best_slice(dp, ks_max);
        // V slice: K^T slices + V slices in L0B (64 KiB); at most 128 columns (UB).
        let l0b = 64 * 1024 - bufs * ks * chunk * es;
        let ns_max = (l0b / (bufs * chunk * es)).clamp(16, 128) / 16 * 16;
        let ns = best_slice(vp, ns_max);
        AttnCfg {
            name,
            dtype,
            heads,
            hg,
            nht: heads.div_ceil(hg),
            dqk,
            v_dim,
            kv_cols,
            head_col_stride,
            separate_v,
            block_size,
            th,
            chunk,
            ks,
            ns,
            bufs,
            pbufs,
        }
    }

    /// The cache key (every static parameter the kernel reads).
    pub fn key(&self) -> String {
        format!("{self:?}")
    }

    fn dp(&self) -> u64 {
        round_up(self.dqk, 16)
    }

    fn vp(&self) -> u64 {
        round_up(self.v_dim, 16)
    }
}

/// The largest multiple of 16 that divides `total` (a multiple of 16) and is at most `max`.
fn best_slice(total: u64, max: u64) -> u64 {
    let mut s = max.min(total) / 16 * 16;
    while s > 16 && total % s != 0 {
        s -= 16;
    }
    s.max(16)
}

/// Parameter ids of [`attn_split`], in argument order.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SplitParams {
    pub batch: ParamId,
    pub topk: ParamId,
    pub maxb: ParamId,
    pub tokens: ParamId,
    pub splits: ParamId,
    pub cps: ParamId,
    pub scale: ParamId,
}

/// Emits a ping-pong loop over `iters` iterations unrolled by two: `body(b, it, slot)` with the
/// constant slot 0 for even iterations and 1 for odd ones.
fn ping_pong(b: &mut Body<'_>, iters: Expr, body: &mut dyn FnMut(&mut Body<'_>, Expr, u64)) {
    b.for_range("cp", 0, iters.clone(), 2, |lb, ip| {
        body(lb, Expr::Var(ip), 0);
        let odd = ip + 1;
        lb.if_(odd.clone().lt(iters), |ib| body(ib, odd, 1));
    });
}

/// The split attention kernel (see the module docs). Arguments, in order: scalars `batch`,
/// `topk`, `maxb`, `tokens`, `splits`, `cps` (chunks per split) (i32) and `scale` (f32); then
/// `q [batch*heads, dqk]`, `kv [tokens, kv_cols]`, (`v [tokens, kv_cols]`), `indices [batch,
/// topk]` i32 (valid ones compacted to the front), `block_table [batch, maxb]` i32, `counts
/// [batch]` i32 (valid indices per row), outputs `o_ws [splits*batch*heads, v_dim]` f32 and
/// `lse_ws [splits*batch*heads]` f32. Launch `batch * nht * splits` blocks.
pub(crate) fn attn_split(cfg: &AttnCfg) -> Kernel {
    let dt = cfg.dtype;
    let (th, chunk, ks, ns) = (cfg.th, cfg.chunk, cfg.ks, cfg.ns);
    let (dp, vp, dqk, v_dim) = (cfg.dp(), cfg.vp(), cfg.dqk, cfg.v_dim);
    let r = th / 2;
    let nks = dp / ks;
    let nns = vp / ns;
    let heads = cfg.heads;
    let f32_data = dt == DType::F32;

    let mut kb = KernelBuilder::new(format!("{}_{dt}", cfg.name));
    let sp = SplitParams {
        batch: kb.scalar("batch", DType::I32),
        topk: kb.scalar("topk", DType::I32),
        maxb: kb.scalar("max_blocks", DType::I32),
        tokens: kb.scalar("tokens", DType::I32),
        splits: kb.scalar("splits", DType::I32),
        cps: kb.scalar("chunks_per_split", DType::I32),
        scale: kb.scalar("scale", DType::F32),
    };
    let p = |id: ParamId| Expr::Param(id);
    let rows_all = p(sp.batch) * heads;
    let q = kb.input("q", dt, [rows_all.clone(), dqk.into()]);
    let kv = kb.input("kv", dt, [p(sp.tokens), cfg.kv_cols.into()]);
    let vsrc = cfg
        .separate_v
        .then(|| kb.input("v", dt, [p(sp.tokens), cfg.kv_cols.into()]));
    let idx = kb.input("indices", DType::I32, [p(sp.batch), p(sp.topk)]);
    let bt = kb.input("block_table", DType::I32, [p(sp.batch), p(sp.maxb)]);
    let counts = kb.input("counts", DType::I32, [p(sp.batch)]);
    let ws_rows = p(sp.splits) * rows_all.clone();
    let o_ws = kb.output("o_ws", DType::F32, [ws_rows.clone(), v_dim.into()]);
    let lse_ws = kb.output("lse_ws", DType::F32, [ws_rows]);

    use Layout::{DN, ND, NZ, ZN};
    use MemSpace::{Acc, Left, Mat, Right, Vec as Ub};
    let ty = TileType::new;
    // Cube tiles.
    let q_l1 = kb.tile(
        "q_l1",
        ty(Mat, dt, th, dp, NZ).dynamic().pad(PadValue::Zero),
    );
    let kv_ty = ty(Mat, dt, chunk, dp, NZ).dynamic().pad(PadValue::Zero);
    let bufs = cfg.bufs.clamp(1, 2);
    let k_l1 = kb.tile_group("k_l1", kv_ty.clone(), bufs as u32);
    let kt_l1 = kb.reinterpret(
        "kt_l1",
        k_l1,
        Reinterpret {
            dtype: None,
            shape: Some((dp, chunk)),
            layout: Some(ZN),
        },
    );
    let v_l1 = if cfg.separate_v {
        kb.tile_group("v_l1", kv_ty, bufs as u32)
    } else {
        k_l1
    };
    let pbufs = cfg.pbufs.clamp(1, 2);
    let p_l1 = kb.tile_group("p_l1", ty(Mat, dt, th, chunk, NZ), pbufs as u32);
    let q_l0 = kb.tile_group("q_l0", ty(Left, dt, th, ks, NZ), bufs as u32);
    let p_l0 = kb.tile("p_l0", ty(Left, dt, th, chunk, NZ));
    let kt_l0 = kb.tile_group("kt_l0", ty(Right, dt, ks, chunk, ZN), bufs as u32);
    let v_l0 = kb.tile_group("v_l0", ty(Right, dt, chunk, ns, ZN), bufs as u32);
    let s_acc = kb.tile_group("s_acc", ty(Acc, DType::F32, th, chunk, NZ), 2);
    let pv_acc = kb.tile_group("pv_acc", ty(Acc, DType::F32, th, ns, NZ), 2);
    // Vector tiles (per AIV).
    // Scores: a runtime valid shape (full but for masking a tail chunk), padded with -inf.
    let s_ub = kb.tile(
        "s_ub",
        ty(Ub, DType::F32, r, chunk, ND)
            .dynamic()
            .pad(PadValue::Min),
    );
    let p_ub = (!f32_data).then(|| kb.tile("p_ub", ty(Ub, dt, r, chunk, ND)));
    let p_nz = kb.tile("p_nz", ty(Ub, dt, r, chunk, NZ));
    let col = |kb: &mut KernelBuilder, name: &str| kb.tile(name, ty(Ub, DType::F32, r, 1, DN));
    let m = col(&mut kb, "m");
    let l = col(&mut kb, "l");
    let mc = col(&mut kb, "m_chunk");
    let lc = col(&mut kb, "l_chunk");
    let alpha = col(&mut kb, "alpha");
    let lse_t = kb.tile("lse", ty(Ub, DType::F32, r, 1, DN).dynamic());
    let o_t = kb.tile_group("o", ty(Ub, DType::F32, r, ns, ND).dynamic(), nns as u32);
    let pv_ub = kb.tile("pv_ub", ty(Ub, DType::F32, r, ns, ND));

    let ch_s = kb.channel("s", CoreKind::Cube, 1);
    let ch_p = kb.channel("p", CoreKind::Vector, 1);
    let ch_pv = kb.channel("pv", CoreKind::Cube, 1);

    // Block coordinates and the split's chunk range (same expressions on every core).
    let coords = |b: &mut Body<'_>| {
        let split = b.let_("split", Expr::BlockIdx % p(sp.splits));
        let rest = b.let_("rest", Expr::BlockIdx / p(sp.splits));
        let ht = b.let_("ht", rest % cfg.nht);
        let bi = b.let_("b", rest / cfg.nht);
        let cnt = b.read_scalar("count", counts, bi);
        let c0 = b.let_("c0", split * p(sp.cps));
        let nck = Expr::Var(cnt).ceil_div(chunk as i64);
        let iters = b.let_("iters", (nck.min(c0 + p(sp.cps)) - c0).max(0));
        let h0 = b.let_("h0", ht * cfg.hg);
        let hv = b.let_("hv", (Expr::from(heads) - h0).min(cfg.hg));
        (split, ht, bi, cnt, c0, iters, h0, hv)
    };

    kb.cube(|c| {
        use Pipe::{Fix, Mte1, Mte2, M as Mm};
        let (_split, ht, bi, cnt, c0, iters, h0, hv) = coords(c);
        c.set_validshape(q_l1, hv, dqk);
        c.load(q_l1, GmView::nd(q, (bi * heads + h0) * dqk, hv, dqk, dqk));
        c.fillpad(q_l1);
        c.set_flag(Mte2, Mte1, 2);
        // Every buffer starts free: the first wait of each event pairs with these sets.
        for e in 0..bufs as u8 {
            c.set_flag(Mte1, Mte2, e);
            c.set_flag(Mm, Mte1, e);
        }
        for e in 0..2u8 {
            c.set_flag(Fix, Mm, e);
            c.set_flag(Fix, Mm, 2 + e);
        }
        c.set_flag(Mm, Mte1, 2);
        c.wait_flag(Mte2, Mte1, 2);
        let col0 = Expr::Var(ht) * cfg.head_col_stride;
        let mut step = |b: &mut Body<'_>, it: Expr, slot: u64| {
            let ev = slot as u8;
            // The gathered tile's buffer and its MTE1 -> MTE2 event.
            let kslot = slot % bufs;
            let kev = kslot as u8;
            let t0 = b.let_("t0", (Expr::Var(c0) + it) * chunk);
            let nv = b.let_("nv", (Expr::Var(cnt) - t0).min(chunk));
            let gather = |b: &mut Body<'_>, dst: TileId, src: ParamId| {
                b.set_validshape(dst.at(kslot), nv, dqk);
                b.gather_in_l1(Gather {
                    dst: dst.at(kslot),
                    src,
                    indices: GmView::nd(idx, bi * p(sp.topk) + t0, 1, nv, p(sp.topk)),
                    block_table: GmView::nd(bt, bi * p(sp.maxb), 1, p(sp.maxb), p(sp.maxb)),
                    block_size: cfg.block_size.into(),
                    size: dqk,
                    col_offset: col0.clone(),
                    is_b_matrix: true,
                    is_trans: true,
                });
                if dqk < dp {
                    b.fillpad(dst.at(kslot));
                } else {
                    b.if_(Expr::Var(nv).lt(chunk), |t| t.fillpad(dst.at(kslot)));
                }
            };
            // MTE2: gather this chunk's rows into L1 buffer `kslot`.
            b.wait_flag(Mte1, Mte2, kev);
            gather(b, k_l1, kv);
            if let Some(vs) = vsrc {
                gather(b, v_l1, vs);
            }
            b.set_flag(Mte2, Mte1, ev);
            b.wait_flag(Mte2, Mte1, ev);
            // S = Q K^T, K-sliced; L0 slot xs = stage % bufs with MM -> MTE1 event xs.
            b.set_validshape(kt_l1.at(kslot), dp, chunk);
            for j in 0..nks {
                let xs = j % bufs;
                let x = xs as u8;
                let (ql, kl) = (q_l0.at(xs), kt_l0.at(xs));
                b.wait_flag(Mm, Mte1, x);
                b.mov(ql.clone(), q_l1).offset(0, j * ks);
                b.mov(kl.clone(), kt_l1.at(kslot)).offset(j * ks, 0);
                b.set_flag(Mte1, Mm, x);
                b.wait_flag(Mte1, Mm, x);
                if j == 0 {
                    b.wait_flag(Fix, Mm, ev);
                    b.matmul(s_acc.at(slot), ql, kl);
                } else {
                    b.matmul_acc(s_acc.at(slot), ql, kl);
                }
                b.set_flag(Mm, Mte1, x);
            }
            b.set_flag(Mm, Fix, ev);
            b.acquire(ch_s);
            b.wait_flag(Mm, Fix, ev);
            b.mov(s_ub, s_acc.at(slot))
                .mode(AccToVecMode::DualModeSplitM);
            b.set_flag(Fix, Mm, ev);
            b.push(ch_s);
            // O_j = P V_j.
            b.pop(ch_p);
            b.wait_flag(Mm, Mte1, 2);
            b.mov(p_l0, p_l1.at(slot % pbufs));
            b.release(ch_p);
            for j in 0..nns {
                // V's L0 slot (MM -> MTE1 event x) and PV's Acc slot (events 2 + y).
                let xs = (nks + j) % bufs;
                let x = xs as u8;
                let ys = (nks + j) % 2;
                let y = ys as u8;
                let vl = v_l0.at(xs);
                b.wait_flag(Mm, Mte1, x);
                b.mov(vl.clone(), v_l1.at(kslot)).offset(0, j * ns);
                if j == nns - 1 {
                    b.set_flag(Mte1, Mte2, kev);
                }
                b.set_flag(Mte1, Mm, x);
                b.wait_flag(Mte1, Mm, x);
                b.wait_flag(Fix, Mm, 2 + y);
                b.matmul(pv_acc.at(ys), p_l0, vl);
                b.set_flag(Mm, Mte1, x);
                if j == nns - 1 {
                    b.set_flag(Mm, Mte1, 2);
                }
                b.set_flag(Mm, Fix, 2 + y);
                b.acquire(ch_pv);
                b.wait_flag(Mm, Fix, 2 + y);
                b.mov(pv_ub, pv_acc.at(ys))
                    .mode(AccToVecMode::DualModeSplitM);
                b.set_flag(Fix, Mm, 2 + y);
                b.push(ch_pv);
            }
        };
        ping_pong(c, Expr::Var(iters), &mut step);
        for e in 0..bufs as u8 {
            c.wait_flag(Mte1, Mte2, e);
            c.wait_flag(Mm, Mte1, e);
        }
        for e in 0..2u8 {
            c.wait_flag(Fix, Mm, e);
            c.wait_flag(Fix, Mm, 2 + e);
        }
        c.wait_flag(Mm, Mte1, 2);
    });

    kb.vector(|v| {
        let (split, _ht, bi, cnt, c0, iters, h0, hv) = coords(v);
        v.set_validshape(s_ub, r, chunk);
        v.fill(m, M_INIT);
        v.fill(l, 0.0);
        for j in 0..nns {
            v.set_validshape(o_t.at(j), r, ns);
            v.fill(o_t.at(j), 0.0);
        }
        // p_nz starts free (MTE3 -> V event 0 guards its reuse across chunks).
        v.set_flag(Pipe::Mte3, Pipe::V, 0);
        v.for_range("c", 0, iters, 1, |b, it| {
            let t0 = (Expr::Var(c0) + it) * chunk;
            let nv = b.let_("nv", (Expr::Var(cnt) - t0).min(chunk));
            b.pop(ch_s);
            b.muls(s_ub, s_ub, sp.scale);
            b.if_(Expr::Var(nv).lt(chunk), |t| {
                t.set_validshape(s_ub, r, nv);
                t.fillpad(s_ub);
                t.set_validshape(s_ub, r, chunk);
            });
            b.row_max(mc, s_ub);
            b.max(mc, mc, m);
            b.binary(BinaryOp::Sub, alpha, m, mc);
            b.exp(alpha, alpha);
            b.max(m, m, mc);
            b.broadcast(BinaryOp::Sub, Axis::Row, s_ub, s_ub, mc);
            b.exp(s_ub, s_ub);
            b.row_sum(lc, s_ub);
            b.mul(l, l, alpha);
            b.add(l, l, lc);
            match p_ub {
                Some(pu) => {
                    b.cast(pu, s_ub, RoundMode::Rint);
                    b.release(ch_s);
                    b.wait_flag(Pipe::Mte3, Pipe::V, 0);
                    b.mov(p_nz, pu);
                }
                None => {
                    b.wait_flag(Pipe::Mte3, Pipe::V, 0);
                    b.mov(p_nz, s_ub);
                    b.release(ch_s);
                }
            }
            b.set_flag(Pipe::V, Pipe::Mte3, 0);
            b.wait_flag(Pipe::V, Pipe::Mte3, 0);
            b.acquire(ch_p);
            b.mov(p_l1.at(it % pbufs), p_nz)
                .offset(Expr::SubBlockIdx * r, 0);
            b.set_flag(Pipe::Mte3, Pipe::V, 0);
            b.push(ch_p);
            for j in 0..nns {
                b.broadcast(BinaryOp::Mul, Axis::Row, o_t.at(j), o_t.at(j), alpha);
                b.pop(ch_pv);
                b.add(o_t.at(j), o_t.at(j), pv_ub);
                b.release(ch_pv);
            }
        });
        v.wait_flag(Pipe::Mte3, Pipe::V, 0);
        // Normalise and write this split's partial result.
        v.binary_scalar(BinaryOp::Max, l, l, 1.0);
        for j in 0..nns {
            v.broadcast(BinaryOp::Div, Axis::Row, o_t.at(j), o_t.at(j), l);
        }
        v.set_validshape(lse_t, r, 1);
        v.unary(UnaryOp::Ln, lse_t, l);
        v.add(lse_t, lse_t, m);
        v.set_flag(Pipe::V, Pipe::Mte3, 1);
        v.wait_flag(Pipe::V, Pipe::Mte3, 1);
        let mine = v.let_(
            "mine",
            (Expr::Var(hv) - Expr::SubBlockIdx * r).min(r as i64).max(0),
        );
        v.if_(Expr::Var(mine).gt(0), |t| {
            let g = (Expr::Var(split) * p(sp.batch) + bi) * heads + h0 + Expr::SubBlockIdx * r;
            let g = t.let_("g", g);
            for j in 0..nns {
                let cols = (v_dim - j * ns).min(ns);
                t.set_validshape(o_t.at(j), mine, cols);
                t.store(
                    GmView::nd(o_ws, g * v_dim + j * ns, mine, cols, v_dim),
                    o_t.at(j),
                );
            }
            t.set_validshape(lse_t, mine, 1);
            t.store(GmView::dn(lse_ws, g, mine, 1, 1), lse_t);
        });
    });
    kb.build()
}

/// Static shape of the merge kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MergeCfg {
    /// Output dtype.
    pub dtype: DType,
    /// Output columns.
    pub v_dim: u64,
    /// Whether a per-row sink is applied.
    pub sink: bool,
}

impl MergeCfg {
    /// The cache key.
    pub fn key(&self) -> String {
        format!("merge {self:?}")
    }
}

/// Blocks to launch for `rows` global rows.
pub(crate) fn merge_blocks(rows: usize) -> usize {
    rows.div_ceil(2 * MERGE_ROWS as usize).max(1)
}

/// The merge kernel (see the module docs). Arguments: scalars `rows` (batch * heads) and
/// `splits` (i32); `o_ws [splits*rows, v_dim]` f32, `lse_ws [splits*rows]` f32, `fix [rows]`
/// f32 (+inf: empty row, else -inf), (`sink [rows]` f32), outputs `out [rows, v_dim]` (dtype)
/// and `lse [rows]` f32. Launch [`merge_blocks`] blocks.
pub(crate) fn attn_merge(cfg: &MergeCfg) -> Kernel {
    let dt = cfg.dtype;
    let v_dim = cfg.v_dim;
    let vp = round_up(v_dim, 16);
    let hm = MERGE_ROWS;
    let mut kb = KernelBuilder::new(format!("attn_merge_{dt}"));
    let rows = kb.scalar("rows", DType::I32);
    let splits = kb.scalar("splits", DType::I32);
    let (pr, ps) = (Expr::Param(rows), Expr::Param(splits));
    let o_ws = kb.input("o_ws", DType::F32, [ps.clone() * pr.clone(), v_dim.into()]);
    let lse_ws = kb.input("lse_ws", DType::F32, [ps.clone() * pr.clone()]);
    let fix = kb.input("fix", DType::F32, [pr.clone()]);
    let sink = cfg.sink.then(|| kb.input("sink", DType::F32, [pr.clone()]));
    let out = kb.output("out", dt, [pr.clone(), v_dim.into()]);
    let lse_out = kb.output("lse", DType::F32, [pr.clone()]);

    use Layout::{DN, ND};
    use MemSpace::Vec as Ub;
    let ty = TileType::new;
    // PTO reduces only ND tiles (TROW* along rows, TCOL* down columns). lse_ws is split-major
    // (lse_ws[sp * rows + g]), so the parts of this AIV's rows load as ND [splits, hm] and every
    // per-row value is a column reduction into an ND row [1, hm]; `column` re-declares such a row
    // as the DN column [hm, 1] (the same 32 bytes) that a row broadcast over `acc` takes.
    let row =
        |kb: &mut KernelBuilder, name: &str| kb.tile(name, ty(Ub, DType::F32, 1, hm, ND).dynamic());
    let column = |kb: &mut KernelBuilder, name: &str, src: TileId| {
        kb.reinterpret(
            name,
            src,
            Reinterpret {
                dtype: None,
                shape: Some((hm, 1)),
                layout: Some(DN),
            },
        )
    };
    // Max-reduced: padded with min; sum-reduced: padded with zero (ASCEND950.md §7).
    let lp = kb.tile(
        "lse_parts",
        ty(Ub, DType::F32, MAX_SPLITS, hm, ND)
            .dynamic()
            .pad(PadValue::Min),
    );
    let w = kb.tile(
        "weights",
        ty(Ub, DType::F32, MAX_SPLITS, hm, ND)
            .dynamic()
            .pad(PadValue::Zero),
    );
    let mx = row(&mut kb, "mx");
    let s = row(&mut kb, "s");
    let s_col = column(&mut kb, "s_col", s);
    let wr = row(&mut kb, "w_i");
    let wc = column(&mut kb, "w_i_col", wr);
    let fixt = row(&mut kb, "fix_t");
    let sink_t = sink.map(|sk| {
        let t = row(&mut kb, "t");
        (sk, t, column(&mut kb, "t_col", t))
    });
    let acc = kb.tile("acc", ty(Ub, DType::F32, hm, vp, ND).dynamic());
    let oi = kb.tile_group("o_i", ty(Ub, DType::F32, hm, vp, ND).dynamic(), 2);
    let out_t = (dt != DType::F32).then(|| kb.tile("out_t", ty(Ub, dt, hm, vp, ND).dynamic()));

    kb.vector(|v| {
        let g0 = v.let_("g0", (Expr::BlockIdx * 2 + Expr::SubBlockIdx) * hm);
        let rv = v.let_("rv", (pr.clone() - g0).min(hm as i64));
        v.if_(Expr::Var(rv).gt(0), |b| {
            let mut rows_of = vec![mx, s, wr, fixt];
            let mut cols_of = vec![s_col, wc];
            if let Some((_, t, t_col)) = sink_t {
                rows_of.push(t);
                cols_of.push(t_col);
            }
            for tile in rows_of {
                b.set_validshape(tile, 1, rv);
            }
            for tile in cols_of {
                b.set_validshape(tile, rv, 1);
            }
            b.set_validshape(lp, ps.clone(), rv);
            b.set_validshape(w, ps.clone(), rv);
            b.set_validshape(acc, rv, v_dim);
            b.load(lp, GmView::nd(lse_ws, g0, ps.clone(), rv, pr.clone()));
            b.load(fixt, GmView::nd(fix, g0, 1, rv, hm));
            // Down each row's column of parts: M, w_i = exp(lse_i - M), s = sum w_i.
            b.col_max(mx, lp);
            b.broadcast(BinaryOp::Sub, Axis::Col, w, lp, mx);
            b.exp(w, w);
            b.col_sum(s, w);
            b.fill(acc, 0.0);
            // Two o_i buffers, loop unrolled by two: the load of part i + 1 overlaps the
            // vector work on part i.
            let mut part = |lb: &mut Body<'_>, i: Expr, slot: u64| {
                let ev = 2 + slot as u8;
                lb.set_validshape(oi.at(slot), rv, v_dim);
                lb.wait_flag(Pipe::V, Pipe::Mte2, ev);
                lb.load(
                    oi.at(slot),
                    GmView::nd(
                        o_ws,
                        (i.clone() * pr.clone() + g0) * v_dim,
                        rv,
                        v_dim,
                        v_dim,
                    ),
                );
                lb.set_flag(Pipe::Mte2, Pipe::V, ev);
                // Part i's weights (row i of `weights`), seen as a column by `w_i_col`.
                lb.mov(wr, w).offset(i, 0);
                lb.wait_flag(Pipe::Mte2, Pipe::V, ev);
                lb.broadcast(BinaryOp::Mul, Axis::Row, oi.at(slot), oi.at(slot), wc);
                lb.add(acc, acc, oi.at(slot));
                lb.set_flag(Pipe::V, Pipe::Mte2, ev);
            };
            b.set_flag(Pipe::V, Pipe::Mte2, 2);
            b.set_flag(Pipe::V, Pipe::Mte2, 3);
            ping_pong(b, ps.clone(), &mut part);
            b.wait_flag(Pipe::V, Pipe::Mte2, 2);
            b.wait_flag(Pipe::V, Pipe::Mte2, 3);
            b.broadcast(BinaryOp::Div, Axis::Row, acc, acc, s_col);
            // lse = M + ln(s)  (into s).
            b.unary(UnaryOp::Ln, s, s);
            b.add(s, s, mx);
            if let Some((sk, t, t_col)) = sink_t {
                b.load(t, GmView::nd(sk, g0, 1, rv, hm));
                b.binary(BinaryOp::Sub, t, t, s);
                b.exp(t, t);
                b.binary_scalar(BinaryOp::Add, t, t, 1.0);
                b.broadcast(BinaryOp::Div, Axis::Row, acc, acc, t_col);
            }
            b.max(s, s, fixt);
            b.set_flag(Pipe::V, Pipe::Mte3, 0);
            b.wait_flag(Pipe::V, Pipe::Mte3, 0);
            b.store(GmView::nd(lse_out, g0, 1, rv, hm), s);
            let dst = GmView::nd(out, Expr::Var(g0) * v_dim, rv, v_dim, v_dim);
            match out_t {
                Some(ot) => {
                    b.set_validshape(ot, rv, v_dim);
                    b.cast(ot, acc, RoundMode::Rint);
                    b.set_flag(Pipe::V, Pipe::Mte3, 1);
                    b.wait_flag(Pipe::V, Pipe::Mte3, 1);
                    b.store(dst, ot);
                }
                None => {
                    b.store(dst, acc);
                }
            }
        });
    });
    kb.build()
}

/// Host-side inputs of one attention call, already in kernel form.
pub(crate) struct AttnInputs<'a> {
    /// `q [batch*heads, dqk]`.
    pub q: GmInput<'a>,
    /// `[tokens, kv_cols]`.
    pub kv: GmInput<'a>,
    /// Separate V cache `[tokens, kv_cols]` (dense).
    pub v: Option<GmInput<'a>>,
    /// `[batch, topk]` compacted logical indices.
    pub indices: Vec<i64>,
    /// Columns of `indices`.
    pub topk: usize,
    /// Valid indices per batch row.
    pub counts: Vec<i64>,
    /// `[batch, max_blocks]` block table.
    pub block_table: &'a [i64],
    /// Columns of the block table.
    pub max_blocks: usize,
    /// Batch rows.
    pub batch: usize,
    /// Softmax scale.
    pub scale: f32,
    /// Per-head sink (`[heads]`).
    pub sink: Option<&'a [f32]>,
}

fn take(op: &'static str, args: &mut [Arg<'_>], i: usize) -> Result<GmTensor, OpError> {
    match args.get_mut(i).map(|a| std::mem::replace(a, Arg::Int(0))) {
        Some(Arg::Tensor(t)) => Ok(t),
        _ => Err(OpError::Package {
            op,
            why: format!("kernel argument {i} is not a tensor"),
        }),
    }
}

/// Top-k splits and chunks per split for `batch * nht` work items of up to `max_chunks` chunks:
/// enough splits to occupy the `concurrent` blocks the target runs at once
/// ([`Runner::concurrent_blocks`]), none of them empty.
pub(crate) fn choose_splits(items: usize, max_chunks: usize, concurrent: usize) -> (usize, usize) {
    let max_chunks = max_chunks.max(1);
    let want = concurrent
        .max(1)
        .div_ceil(items.max(1))
        .clamp(1, MAX_SPLITS as usize);
    let splits = want.min(max_chunks);
    let cps = max_chunks.div_ceil(splits);
    (max_chunks.div_ceil(cps), cps)
}

/// How the split kernel is launched for `batch` rows whose fullest row counts `longest` valid
/// tokens on a target running `concurrent` blocks at once: top-k `splits`, chunks per split
/// `cps` ([`choose_splits`] over `batch * nht` work items of that row's chunks) and `blocks =
/// batch * nht * splits`. [`run_attention`] and the
/// `emit --op` registry (`crate::kernels`) both launch from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SplitPlan {
    pub splits: usize,
    pub cps: usize,
    pub blocks: u64,
}

/// The [`SplitPlan`] of a call.
pub(crate) fn split_plan(
    cfg: &AttnCfg,
    batch: usize,
    longest: usize,
    concurrent: usize,
) -> SplitPlan {
    let nht = cfg.nht as usize;
    let max_chunks = longest.div_ceil(cfg.chunk as usize);
    let (splits, cps) = choose_splits(batch * nht, max_chunks, concurrent);
    SplitPlan {
        splits,
        cps,
        blocks: batch as u64 * nht as u64 * splits as u64,
    }
}

/// Whether the merge kernel would hand the split kernel's result back unchanged, so that a CPU
/// run skips its launch: one split (its weight is exp(lse - lse) = 1 exactly and the weights
/// sum to 1, so o and lse pass through bit for bit), f32 data (no cast), no sink. What is left
/// of the merge, lse = +inf on rows with no valid index, the host does while reading the
/// result. The device plan always launches the merge, so a kernel package and a profile stay
/// complete in themselves.
fn merge_is_identity(runner: &Runner, cfg: &AttnCfg, splits: usize, sink: bool) -> bool {
    splits == 1 && cfg.dtype == DType::F32 && !sink && runner.plan_target() == PlanTarget::Cpu
}

/// Runs the split kernel and the merge kernel: returns `out [batch*heads, v_dim]` (data dtype)
/// and `lse [batch*heads]` f32.
pub(crate) fn run_attention(
    runner: &mut Runner,
    op: &'static str,
    cfg: &AttnCfg,
    inp: AttnInputs<'_>,
) -> Result<(GmTensor, GmTensor), OpError> {
    let rows = inp.batch * cfg.heads as usize;
    let v_dim = cfg.v_dim as usize;
    if rows == 0 {
        return Ok((
            GmTensor::zeros(cfg.dtype, &[0, v_dim]),
            GmTensor::zeros(DType::F32, &[0]),
        ));
    }
    let max_count = inp.counts.iter().copied().max().unwrap_or(0).max(0) as usize;
    let SplitPlan {
        splits,
        cps,
        blocks,
    } = split_plan(cfg, inp.batch, max_count, runner.concurrent_blocks());
    let tokens = inp.kv.shape.first().copied().unwrap_or(0);
    let kernel = compiled(op, &cfg.key(), || attn_split(cfg))?;
    let as_i32 = |shape: &[usize], v: &[i64]| GmTensor::from_i64(DType::I32, shape, v);
    let mut args = vec![
        Arg::Int(inp.batch as i64),
        Arg::Int(inp.topk as i64),
        Arg::Int(inp.max_blocks as i64),
        Arg::Int(tokens as i64),
        Arg::Int(splits as i64),
        Arg::Int(cps as i64),
        Arg::Float(inp.scale as f64),
        Arg::Input(inp.q),
        Arg::Input(inp.kv),
    ];
    if let Some(v) = inp.v {
        args.push(Arg::Input(v));
    }
    args.push(Arg::Tensor(as_i32(&[inp.batch, inp.topk], &inp.indices)));
    args.push(Arg::Tensor(as_i32(
        &[inp.batch, inp.max_blocks],
        inp.block_table,
    )));
    args.push(Arg::Tensor(as_i32(&[inp.batch], &inp.counts)));
    let ws = splits * rows;
    args.push(Arg::Tensor(GmTensor {
        dtype: DType::F32,
        shape: vec![ws, v_dim],
        data: workspace::zeroed(ws * v_dim * 4),
    }));
    args.push(Arg::Tensor(GmTensor::zeros(DType::F32, &[ws])));
    runner.launch(&kernel, blocks as usize, &mut args)?;
    let n = args.len();
    let mut lse_ws = take(op, &mut args, n - 1)?;
    let o_ws = take(op, &mut args, n - 2)?;
    drop(args);
    let heads = cfg.heads as usize;
    let has_token = |g: usize| inp.counts[g / heads] > 0;
    if merge_is_identity(runner, cfg, splits, inp.sink.is_some()) {
        // The one split's o and lse are the result as they are (see `merge_is_identity`);
        // rows with no valid index take lse = +inf (their o is already 0).
        for (g, lse) in lse_ws.data.chunks_exact_mut(4).enumerate() {
            if !has_token(g) {
                lse.copy_from_slice(&f32::INFINITY.to_le_bytes());
            }
        }
        return Ok((o_ws, lse_ws));
    }

    let mcfg = MergeCfg {
        dtype: cfg.dtype,
        v_dim: cfg.v_dim,
        sink: inp.sink.is_some(),
    };
    let merge = compiled(op, &mcfg.key(), || attn_merge(&mcfg))?;
    let fix: Vec<f32> = (0..rows)
        .map(|g| {
            if has_token(g) {
                f32::NEG_INFINITY
            } else {
                f32::INFINITY
            }
        })
        .collect();
    let mut margs = vec![
        Arg::Int(rows as i64),
        Arg::Int(splits as i64),
        Arg::Tensor(o_ws),
        Arg::Tensor(lse_ws),
        Arg::Tensor(GmTensor::from_f32(DType::F32, &[rows], &fix)),
    ];
    if let Some(s) = inp.sink {
        let per_row: Vec<f32> = (0..rows).map(|g| s[g % heads]).collect();
        margs.push(Arg::Tensor(GmTensor::from_f32(
            DType::F32,
            &[rows],
            &per_row,
        )));
    }
    margs.push(Arg::Tensor(GmTensor::zeros(cfg.dtype, &[rows, v_dim])));
    margs.push(Arg::Tensor(GmTensor::zeros(DType::F32, &[rows])));
    runner.launch(&merge, merge_blocks(rows), &mut margs)?;
    let n = margs.len();
    let lse = take(op, &mut margs, n - 1)?;
    let out = take(op, &mut margs, n - 2)?;
    if let Ok(o_ws) = take(op, &mut margs, 2) {
        workspace::keep(o_ws.data);
    }
    Ok((out, lse))
}

/// The split workspace's bytes, kept between calls on a thread: a fresh multi-megabyte
/// allocation per decode step (8.4 MB at the DeepSeek shape) costs a page fault per 4 KiB on
/// first touch. A thread holds at most one such buffer (the largest it needed last).
mod workspace {
    use std::cell::RefCell;

    thread_local! {
        static KEPT: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    }

    /// `len` zero bytes, in the kept buffer when there is one.
    pub(super) fn zeroed(len: usize) -> Vec<u8> {
        let mut v = KEPT.with(|k| std::mem::take(&mut *k.borrow_mut()));
        v.clear();
        v.resize(len, 0);
        v
    }

    /// Keeps `v` for the next call on this thread.
    pub(super) fn keep(v: Vec<u8>) {
        KEPT.with(|k| *k.borrow_mut() = v);
    }

    /// Keeps `v` for the next call on this thread unless the kept buffer is larger.
    pub(crate) fn recycle(v: Vec<u8>) {
        KEPT.with(|k| {
            let mut kept = k.borrow_mut();
            if v.capacity() > kept.capacity() {
                *kept = v;
            }
        });
    }
}

/// Hands an attention result's bytes, once copied into candle's storage, back to this thread's
/// split workspace: with one f32 split the workspace *is* the result, and without this every
/// decode step would allocate (and page-fault) its workspace afresh.
pub(crate) fn recycle_result(out: GmTensor) {
    workspace::recycle(out.data);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{device_clusters, profile, PlanTarget};

    #[test]
    fn a_recycled_result_becomes_the_next_workspace_zeroed() {
        std::thread::spawn(|| {
            let old = GmTensor::from_f32(DType::F32, &[64], &[7.5; 64]);
            let cap = old.data.capacity();
            recycle_result(old);
            let ws = workspace::zeroed(100);
            assert!(ws.capacity() >= cap, "the result's buffer is reused");
            assert_eq!(ws, vec![0u8; 100], "none of the old result shows through");
            workspace::keep(ws);
            // A smaller buffer does not replace a larger kept one.
            recycle_result(GmTensor::zeros(DType::F32, &[2]));
            assert!(workspace::zeroed(8).capacity() >= cap);
        })
        .join()
        .expect("the workspace checks pass on their own thread");
    }

    #[test]
    fn splits_fill_the_blocks_the_target_runs_at_once() {
        // DeepSeek decode: 4 rows x 1 head tile, 16 chunks each.
        assert_eq!(
            choose_splits(4, 16, 32),
            (8, 2),
            "the Ascend 950's 32 clusters"
        );
        assert_eq!(
            choose_splits(4, 16, 2),
            (1, 16),
            "two CPU threads: a block per row"
        );
        assert_eq!(
            choose_splits(1, 16, 2),
            (2, 8),
            "one row still splits for two threads"
        );
        assert_eq!(
            choose_splits(1, 3, 32),
            (3, 1),
            "never more splits than chunks"
        );
        assert_eq!(choose_splits(3, 5, 32), (5, 1));
        assert_eq!(
            choose_splits(0, 0, 0),
            (1, 1),
            "degenerate inputs still give one split"
        );
        for (items, chunks, concurrent) in [(1, 40, 32), (7, 33, 5), (2, 1, 2), (64, 9, 32)] {
            let (splits, cps) = choose_splits(items, chunks, concurrent);
            assert!(splits * cps >= chunks, "every chunk is covered");
            assert!((splits - 1) * cps < chunks, "no split is empty");
            assert!(splits <= MAX_SPLITS as usize);
        }
    }

    #[test]
    fn the_simulator_plans_for_its_threads_and_profiling_for_the_device() {
        let runner = Runner::sim("test");
        assert_eq!(runner.concurrent_blocks(), rayon::current_num_threads());
        let (inside, _) = profile(|| Runner::sim("test").concurrent_blocks());
        assert_eq!(inside, device_clusters());
        assert_eq!(device_clusters(), 32);
        let dir = std::env::temp_dir();
        assert_eq!(Runner::package("test", &dir).concurrent_blocks(), 32);
        // Pipes overlap on the device only; an explicit plan target overrides either way.
        assert!(!runner.pipes_overlap());
        assert!(profile(|| Runner::sim("test").pipes_overlap()).0);
        assert!(Runner::package("test", &dir).pipes_overlap());
        let device = Runner::sim("test").plan_for(PlanTarget::Device);
        assert_eq!(
            (device.concurrent_blocks(), device.pipes_overlap()),
            (32, true)
        );
        let (cpu, _) = profile(|| {
            let r = Runner::sim("test").plan_for(PlanTarget::Cpu);
            (r.concurrent_blocks(), r.pipes_overlap())
        });
        assert_eq!(cpu, (rayon::current_num_threads(), false));
    }

    #[test]
    fn one_f32_split_on_the_cpu_plan_skips_the_merge_with_the_same_result() {
        // 2 rows of 16 heads, Dqk 64, v_dim 32, 150 tokens per row (row 1: none valid) out of
        // 192 cached in blocks of 8.
        let (batch, heads, d, v_dim, bs, topk) = (2usize, 16u64, 64u64, 32u64, 8usize, 150usize);
        let (tokens, max_blocks) = (192, 24);
        let vals = |n: usize, seed: u32| -> Vec<u8> {
            (0..n)
                .flat_map(|i| {
                    let x = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 9;
                    (x as f32 / (1u32 << 23) as f32 - 0.5).to_le_bytes()
                })
                .collect()
        };
        let q = vals(batch * heads as usize * d as usize, 1);
        let kv = vals(tokens * d as usize, 2);
        let table: Vec<i64> = (0..batch * max_blocks)
            .map(|i| {
                if i < max_blocks {
                    (i * 5 % max_blocks) as i64
                } else {
                    0
                }
            })
            .collect();
        let indices: Vec<i64> = (0..batch * topk)
            .map(|i| if i < topk { (i * 7 % tokens) as i64 } else { 0 })
            .collect();
        let run = |target: PlanTarget| {
            let cfg = AttnCfg::new(
                "sparse_attn",
                DType::F32,
                heads,
                heads,
                d,
                v_dim,
                d,
                0,
                false,
                bs as u64,
                target == PlanTarget::Device,
            );
            let mut runner = Runner::sim("test").plan_for(target);
            let splits = split_plan(&cfg, batch, topk, runner.concurrent_blocks()).splits;
            let inp = AttnInputs {
                q: GmInput {
                    dtype: DType::F32,
                    shape: vec![batch * heads as usize, d as usize],
                    data: &q,
                },
                kv: GmInput {
                    dtype: DType::F32,
                    shape: vec![tokens, d as usize],
                    data: &kv,
                },
                v: None,
                indices: indices.clone(),
                topk,
                counts: vec![topk as i64, 0],
                block_table: &table,
                max_blocks,
                batch,
                scale: 0.125,
                sink: None,
            };
            let (out, lse) = run_attention(&mut runner, "test", &cfg, inp).expect("runs");
            let f32s = |b: &[u8]| -> Vec<f32> {
                b.chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect()
            };
            (f32s(&out.data), f32s(&lse.data), runner.launches(), splits)
        };
        // On one thread the CPU plan runs one split per row; with more threads than rows it
        // splits and merges.
        let cpu = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .expect("a one-thread pool");
        let (out_cpu, lse_cpu, launches_cpu, splits_cpu) = cpu.install(|| run(PlanTarget::Cpu));
        let (out_dev, lse_dev, launches_dev, splits_dev) = run(PlanTarget::Device);
        assert_eq!(splits_cpu, 1);
        assert_eq!(launches_cpu, 1, "one f32 split without a sink: no merge");
        assert!(splits_dev > 1);
        assert_eq!(launches_dev, 2, "the device plan always merges");
        let h = heads as usize;
        assert_eq!(lse_cpu.len(), batch * h);
        for (g, (a, b)) in lse_cpu.iter().zip(&lse_dev).enumerate() {
            if g >= h {
                assert_eq!(*a, f32::INFINITY, "row {g} has no valid index: lse +inf");
            } else {
                assert!(
                    a.is_finite() && (a - b).abs() <= 1e-5,
                    "lse row {g}: {a} vs {b}"
                );
            }
        }
        assert_eq!(out_cpu.len(), out_dev.len());
        for (i, (a, b)) in out_cpu.iter().zip(&out_dev).enumerate() {
            assert!((a - b).abs() <= 1e-6, "out {i}: {a} vs {b}");
            if i >= h * v_dim as usize {
                assert_eq!(*a, 0.0, "an empty row's out is 0");
            }
        }
    }

    #[test]
    fn the_cpu_plan_buffers_tiles_once_and_makes_them_larger() {
        let tiling = |dt: DType, heads: u64, d: u64, separate_v: bool, double: bool| {
            let c = AttnCfg::new(
                "t",
                dt,
                heads,
                heads,
                d,
                d.min(512),
                d,
                0,
                separate_v,
                64,
                double,
            );
            (c.chunk, c.ks, c.ns, c.bufs)
        };
        // f32 DeepSeek: Q takes 288 KiB of L1, so ping-ponged chunks are 32 tokens; one buffer
        // holds 64, and one Q slice beside P in L0A can be 64 columns wide instead of 48.
        assert_eq!(tiling(DType::F32, 128, 576, false, true), (32, 48, 128, 2));
        assert_eq!(tiling(DType::F32, 128, 576, false, false), (64, 64, 128, 1));
        // bf16 reaches the largest chunk either way; the CPU's K slices are 96 wide, not 64,
        // and its V slices 128, not 64.
        assert_eq!(tiling(DType::BF16, 128, 576, false, true), (128, 64, 64, 2));
        assert_eq!(
            tiling(DType::BF16, 128, 576, false, false),
            (128, 96, 128, 1)
        );
        // Separate V (dense GQA) counts both gathered tiles.
        assert_eq!(tiling(DType::F32, 128, 384, true, true).0, 32);
        assert_eq!(tiling(DType::F32, 128, 384, true, false).0, 64);
        // A small problem: the same chunk, single buffered.
        assert_eq!(tiling(DType::F32, 8, 64, false, true), (64, 64, 64, 2));
        assert_eq!(tiling(DType::F32, 8, 64, false, false), (64, 64, 64, 1));
        // P: two L1 buffers on the CPU plan where they fit (f32 DeepSeek: 288 + 144 + 2 x 32
        // KiB), one on the device plan.
        let p_bufs = |dt: DType, d: u64, separate_v: bool, double: bool| {
            AttnCfg::new("t", dt, 128, 128, d, 512, d, 0, separate_v, 64, double).pbufs
        };
        assert_eq!(p_bufs(DType::F32, 576, false, false), 2);
        assert_eq!(p_bufs(DType::BF16, 576, false, false), 2);
        assert_eq!(p_bufs(DType::F32, 576, false, true), 1);
        assert_eq!(p_bufs(DType::BF16, 576, false, true), 1);
        // f32 with 768 columns: Q 384 + K 96 + P 16 KiB leave no room for a second P.
        assert_eq!(p_bufs(DType::F32, 768, false, false), 1);
        assert_eq!(p_bufs(DType::F32, 512, true, false), 2);
    }
}
