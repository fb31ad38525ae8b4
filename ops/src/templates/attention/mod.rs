//! The attention kernel template shared by sparse (top-k) and dense (GQA) paged attention, and
//! the split-merge kernel; and the DN-mode prefill kernel `flash_dn` of the flash-attention ops
//! (`dn.rs`, whose module doc has its pipeline).
//!
//! # `attn_split` (one kernel definition, several consumers)
//!
//! One work item = one (batch row `b`, head tile `ht`, top-k split `sp`); `item = (b * nht +
//! ht) * splits + sp`. A block runs one item (`item = block`) or, where the device plan folds
//! several waves into each block (`AttnCfg::ipb`), items `block * ipb ..` one after another, so
//! that one item's gathers overlap the previous one's tail. A head tile is `hg` query heads
//! (padded to `th`, a multiple of 32, so each AIV owns `r = th / 2` rows); all of them share
//! one gathered K (and V) tile per chunk, so K is read from GM once per chunk for the whole
//! head tile. The CPU plan's single-vector-core head tile (`AttnCfg::single`, head tiles of at
//! most 64 rows, kernel `<name>_single_<dtype>`) pads to 16 rows instead and moves the scores
//! and P V whole to AIV0 (`SingleModeVec0`, `r = th`, P into L1 without an offset); AIV1 skips
//! every data op and keeps only the channel ops, so the sync pass pairs the same flags on
//! both AIVs.
//!
//! ```text
//! cube   MTE2  Q [hv, Dqk] -> q_l1 Mat NZ [th, dp] (zero padded)
//!        per chunk c of the split (slot s = local chunk % bufs; bufs = 2 (ping-pong) on the
//!        device, 1 in the CPU plan; which flags the sync pass inserts: "Sync ownership"):
//!        MTE2  gather_in_l1: nv rows (indices[b, c*chunk ..], block table row b) of `dqk`
//!              columns from column `ht * head_col_stride` -> k_l1[s] Mat NZ [chunk, dp]
//!              (V likewise into v_l1[s] when the kernel has a separate V cache); zero pad
//!        per K slice j: MTE1 q_l1[:, j ks..] -> q_l0[j%bufs] Left; k_l1[s] seen as ZN [dp, chunk]
//!              (= K^T, same bytes) rows j ks.. -> kt_l0[j%bufs] Right; M s_acc[s] (+)= q · kt
//!        FIX   s_acc[s] -> s_ub (DualModeSplitM: AIV i gets heads i*r ..; single: all to AIV0)
//!                                                                                 -> channel S
//!        MTE1  (channel P) p_l1[c % pbufs] [th, chunk] -> p_l0 Left (pbufs = 2 in the CPU
//!              plan where L1 has room, else 1)
//!        per V slice j: MTE1 V[:, j ns..] (NZ -> ZN) -> v_l0[..%bufs] Right; M pv_acc[..%2] = P · V
//!              FIX pv_acc -> pv_ub (SplitM)                                     -> channel PV
//! vector (each AIV: r heads, f32): s *= scale; tail chunk: columns >= nv := -inf;
//!        m_new = max(m, rowmax s); alpha = exp(m - m_new); s = exp(s - m_new);
//!        l = l alpha + rowsum s; P = cast(s) ND -> NZ -> p_l1[c % pbufs] rows sub*r..
//!        (channel P);
//!        O_j = O_j alpha + PV_j.  End: l = max(l, 1) + 0 * (low + l) (low: the split's lowest
//!        score, taken before masking: NaN or ±inf data make the row NaN, docs/ops.md),
//!        o = O / l, lse = m + ln(l);
//!        MTE3 o -> o_ws[sp, b*H + h, :], lse -> lse_ws[sp, b*H + h].
//! ```
//!
//! `m` starts at -1e30 (finite), so a split with no token writes o = 0 and lse ~ -1e30, which
//! the merge weighs by exp(-1e30 - M) = 0. The cube <-> vector handoffs are the channels S, P
//! and PV.
//!
//! # Sync ownership
//!
//! The sync pass (`tile_backend::passes::sync`) owns every cross-core flag (it lowers the
//! channels S, P and PV) and every intra-core dependency a kernel leaves unordered; it keeps
//! hand-written flags as they are and adds only what they do not cover.
//!
//! - `attn_split` leaves to the pass the L0 slots' flags (M <-> MTE1: `q_l0` / `kt_l0` /
//!   `v_l0` slot free and loaded, `p_l0`) and all of the vector's (`p_nz` free again once its
//!   move to L1 has read it, P written before that move, the partial result written before
//!   its stores). With both loop halves of `ping_pong` in one body and the slots constant in
//!   each half, the pass sees each buffer apart and pairs its uses per slot; where a
//!   dependency crosses the channels (an acquire standing for the cube's next writes) it
//!   orders the acquire after this core's earlier accesses of the shared tiles, so no pair
//!   loses a signal. Measured against the hand-written flags they replaced (950 estimate of
//!   the DeepSeek decode step, B = 4, top-k 2048): bf16 split kernel 37997 cycles against
//!   38125, f32 71711 against 71351 (+0.5%, the step +0.4%); zero hazards in the traced
//!   tests; the same bits (flags do not change what is computed).
//! - `cube.rs` still writes two groups by hand, each one event per buffer, pre-set before the
//!   loop and drained after it: the gathered L1 tile `k_l1[s]` (MTE1 -> MTE2 free, MTE2 ->
//!   MTE1 loaded; event 2 for Q) and the Acc slots `s_acc[s]` / `pv_acc[s]` (FIX -> M free,
//!   M -> FIX ready; events 0, 1 / 2, 3). With the pass owning the gathered tiles, its pairs
//!   are hazard-free but let the next chunk's gather overlap less: the f32 split kernel's
//!   estimate rises 7% (76454 cycles against 71351; bf16 unchanged). With the pass owning the
//!   Acc slots too, the f32 device plan at the DeepSeek shape (B = 4, top-k 1024) loses an
//!   M -> FIX signal in the traced test `sparse_deepseek_shape_b1`.
//! - With several work items per block (the device plan), `cube.rs` also writes the chain
//!   that ends each item (MTE1 -> FIX, then FIX -> M event 4 and FIX -> MTE1 event 7): it
//!   orders the pass's next pre-sets of its L0-slot pairs after this item's final waits, which
//!   a barrier of the cube's pipes did before, and leaves MTE2 free to load the next item.
//!   With two Q buffers (`AttnCfg::qbufs`) each has its own Q-loaded event (2, 3).
//! - `attn_merge` (`merge.rs`) still writes the flags of its `o_i` buffers by hand: V -> MTE2
//!   / MTE2 -> V per group of up to 4 part buffers (ping-pong over the groups of splits, one
//!   event id per group, pre-set before the loads and drained after the loop), and one MTE2 ->
//!   V pair for its lse and fix loads: a flag set on MTE2 waits for the DMAs before it to land,
//!   so each one exposes the DMA latency once, and grouping the loads exposes it once per
//!   group (DeepSeek decode step, bf16: 53447 -> 51421 cycles). The pass's own pairs there are hazard-free but overlap
//!   less: re-measured at the DeepSeek decode step (`examples/sparse_attention`), the whole
//!   step's 950 estimate rises from 53447 to 54356 cycles in bf16 (+1.7%) and from 87586 to
//!   88495 in f32 (+1.0%), so these stay until the pass pairs the two `o_i` buffers as
//!   tightly. Its V -> MTE3 flags before the stores are the pass's (the same estimates to the
//!   cycle).
//! - The flash kernel (`dn*.rs`) leaves its P tile to the pass (estimates unchanged to the
//!   cycle) and keeps by hand its L0 slots (pass-owned, its per-cluster row loop loses an
//!   MTE1 -> FIX signal and the estimates rise up to 2.7%), its Acc slots and the mask load
//!   under a runtime `if` (the pass hoists a pair out of the `if`, and when the branch is not
//!   taken nothing orders its next set after its wait); `dn.rs`'s module doc gives the
//!   figures.
//!
//! # `attn_merge` (vector only)
//!
//! Each AIV owns `hm` consecutive global rows `g = b*H + h`: M = max_i lse_i, w_i = exp(lse_i -
//! M), s = sum w_i, lse = M + ln s, out = sum_i (w_i / s) o_i; sink: out *= 1 / (1 + exp(sink -
//! lse)); lse = lse + fix where the host's `fix` row is +inf for a row with no valid index
//! (its out is already 0) and 0 otherwise (an add, not a max, so a NaN lse stays NaN); out
//! cast to the data dtype. With one split and no sink that is the identity but for the +inf
//! and the cast, so the plan has the split kernel write the result in the data dtype itself
//! (`AttnCfg::direct`) and does not launch the merge: on the CPU always, on the device for a
//! dense call, where every row has a token (`merge_is_identity`).
//!
//! ```text
//! vector (each AIV: hm rows g0..): MTE2 lse_ws -> lse_parts ND [splits, hm] (part i of row g in
//!        column g); M = colmax, w = exp(lse_parts - M) (column broadcast), s = colsum w,
//!        all ND [1, hm]; per group of up to 4 parts (two groups of buffers): MTE2 o_ws[i] ->
//!        o_i ND [hm, vp] for each part i of the group under one flag; then per part,
//!        w_i = row i of w, seen as DN [hm, 1]; acc += o_i * w_i (row broadcast).
//!        acc /= s (as DN [hm, 1]); lse = M + ln s; sink; lse = lse + fix; MTE3 out, lse.
//! ```

mod cube;
mod dn;
mod dn_cube;
mod dn_host;
mod dn_vector;
mod host;
mod merge;
mod plan;
#[cfg(test)]
mod tests;
mod vector;

pub(crate) use dn::{FlashCfg, FlashSpec};
pub(crate) use dn_host::{run_flash, FlashInputs, FlashLens, FlashPlan, FlashProblem};
pub(crate) use host::{recycle_result, run_attention, AttnInputs};
pub(crate) use plan::{check_rows, plan, AttnCfg, AttnPlan, AttnSpec, M_INIT};
#[cfg(test)]
use plan::{choose_splits, MAX_SPLITS};

use tile_backend::dsl::{Body, KernelBuilder, Reinterpret};
use tile_backend::ir::{
    ChannelId, CoreKind, DType, Expr, GmView, Kernel, Layout, MemSpace, PadValue, ParamId,
    RoundMode, TileId, TileRef, TileType, VarId,
};

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

/// Runs `f` on the AIVs that hold data: both, or AIV0 alone in a single-vector-core kernel
/// ([`AttnCfg::single`], [`FlashCfg::single`]: `SingleModeVec0` writes only AIV0's UB, so
/// AIV1's copies of the handed-over tiles are never written). AIV1 still runs every channel
/// op, so the sync pass, which binds a channel op to the pipe of its neighbouring data op,
/// pairs the same flags on both AIVs.
pub(super) fn aiv0(b: &mut Body<'_>, single: bool, f: impl FnOnce(&mut Body<'_>)) {
    if single {
        b.if_(Expr::SubBlockIdx.eq_(0), f);
    } else {
        f(b);
    }
}

/// Emits a ping-pong loop over `iters` iterations unrolled by two: `body(b, it, slot)` with the
/// constant slot 0 for even iterations and 1 for odd ones.
pub(super) fn ping_pong(
    b: &mut Body<'_>,
    iters: Expr,
    body: &mut dyn FnMut(&mut Body<'_>, Expr, u64),
) {
    b.for_range("cp", 0, iters.clone(), 2, |lb, ip| {
        body(lb, Expr::Var(ip), 0);
        let odd = ip + 1;
        lb.if_(odd.clone().lt(iters), |ib| body(ib, odd, 1));
    });
}

/// Stores the f32 tile `src` to `dst`; when the data dtype is not f32, through `cast` (the
/// data dtype's tile, its valid shape set to `rows x cols` first).
pub(super) fn store_in_dtype(
    b: &mut Body<'_>,
    dst: GmView,
    src: impl Into<TileRef>,
    cast: Option<TileId>,
    (rows, cols): (impl Into<Expr>, impl Into<Expr>),
) {
    match cast {
        Some(ct) => {
            b.set_validshape(ct, rows, cols);
            b.cast(ct, src, RoundMode::Rint);
            b.store(dst, ct);
        }
        None => {
            b.store(dst, src);
        }
    }
}

/// The split attention kernel (see the module docs). Arguments, in order: scalars `batch`,
/// `topk`, `maxb`, `tokens`, `splits`, `cps` (chunks per split) (i32) and `scale` (f32); then
/// `q [batch*heads, dqk]`, `kv [tokens, kv_cols]`, (`v [tokens, kv_cols]`), `indices [batch,
/// topk]` i32 (valid ones compacted to the front), `block_table [batch, maxb]` i32, `counts
/// [batch]` i32 (valid indices per row), outputs `o_ws [splits*batch*heads, v_dim]` f32 (the
/// data dtype with [`AttnCfg::direct`]) and `lse_ws [splits*batch*heads]` f32. Launch `batch * nht * splits` blocks.
pub(crate) fn attn_split(cfg: &AttnCfg) -> Kernel {
    let dt = cfg.dtype;
    let (th, chunk, ks, ns) = (cfg.th, cfg.chunk, cfg.ks, cfg.ns);
    let (dp, vp, dqk, v_dim) = (cfg.dp(), cfg.vp(), cfg.dqk, cfg.v_dim);
    let r = cfg.r();
    let nks = dp / ks;
    let nns = vp / ns;
    let heads = cfg.heads;
    let f32_data = dt == DType::F32;
    let bufs = cfg.bufs.clamp(1, 2);
    let pbufs = cfg.pbufs.clamp(1, 2);

    // The single-vector-core head tile is its own kernel, named apart in listings and profiles.
    let single = if cfg.single { "_single" } else { "" };
    let mut kb = KernelBuilder::new(format!("{}{single}_{dt}", cfg.name));
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
    // With `direct` the one split's result is the call's: `o_ws` in the data dtype.
    let o_dt = if cfg.direct { dt } else { DType::F32 };
    let o_ws = kb.output("o_ws", o_dt, [ws_rows.clone(), v_dim.into()]);
    let lse_ws = kb.output("lse_ws", DType::F32, [ws_rows]);

    use Layout::{DN, ND, NZ, ZN};
    use MemSpace::{Acc, Left, Mat, Right, Vec as Ub};
    let ty = TileType::new;
    // Cube tiles.
    let q_ty = ty(Mat, dt, th, dp, NZ).dynamic().pad(PadValue::Zero);
    let q_l1 = match cfg.qbufs {
        1 => kb.tile("q_l1", q_ty),
        n => kb.tile_group("q_l1", q_ty, n as u32),
    };
    let kv_ty = ty(Mat, dt, chunk, dp, NZ).dynamic().pad(PadValue::Zero);
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
    let rows = vector::StatRows::declare(&mut kb, r, [m, l, mc, lc, alpha, lse_t]);
    let o_t = kb.tile_group("o", ty(Ub, DType::F32, r, ns, ND).dynamic(), nns as u32);
    // Dynamic like `o_t`: the CPU model of PTO-ISA types TADD with one tile type for all operands.
    let pv_ub = kb.tile("pv_ub", ty(Ub, DType::F32, r, ns, ND).dynamic());
    // One cast tile per V slice (none reused, so no store waits for a cast of the next slice).
    let o_cast = (cfg.direct && !f32_data)
        .then(|| kb.tile_group("o_cast", ty(Ub, dt, r, ns, ND).dynamic(), nns as u32));

    let ch_s = kb.channel("s", CoreKind::Cube, 1);
    let ch_p = kb.channel("p", CoreKind::Vector, 1);
    let ch_pv = kb.channel("pv", CoreKind::Cube, 1);

    let k = SplitKernel {
        cfg,
        sp,
        chunk,
        ks,
        ns,
        dp,
        dqk,
        v_dim,
        r,
        nks,
        nns,
        heads,
        bufs,
        pbufs,
        q,
        kv,
        idx,
        bt,
        counts,
        o_ws,
        lse_ws,
        vsrc,
        q_l1,
        k_l1,
        kt_l1,
        v_l1,
        p_l1,
        q_l0,
        p_l0,
        kt_l0,
        v_l0,
        s_acc,
        pv_acc,
        s_ub,
        p_nz,
        l,
        mc,
        lc,
        alpha,
        lse_t,
        rows,
        o_t,
        pv_ub,
        p_ub,
        o_cast,
        ch_s,
        ch_p,
        ch_pv,
    };
    kb.cube(|c| cube::body(c, &k));
    kb.vector(|v| vector::body(v, &k));
    kb.build()
}

/// Everything the cube and vector programs of [`attn_split`] share: the static shape, the
/// parameters and the tiles and channels declared once for both cores.
#[derive(Clone, Copy)]
pub(super) struct SplitKernel<'a> {
    /// The static shape.
    pub cfg: &'a AttnCfg,
    /// Scalar parameters.
    pub sp: SplitParams,
    /// `chunk` of the tiling (see [`AttnCfg`]).
    pub chunk: u64,
    /// `ks` of the tiling (see [`AttnCfg`]).
    pub ks: u64,
    /// `ns` of the tiling (see [`AttnCfg`]).
    pub ns: u64,
    /// `dp` of the tiling (see [`AttnCfg`]).
    pub dp: u64,
    /// `dqk` of the tiling (see [`AttnCfg`]).
    pub dqk: u64,
    /// `v_dim` of the tiling (see [`AttnCfg`]).
    pub v_dim: u64,
    /// `r` of the tiling (see [`AttnCfg`]).
    pub r: u64,
    /// `nks` of the tiling (see [`AttnCfg`]).
    pub nks: u64,
    /// `nns` of the tiling (see [`AttnCfg`]).
    pub nns: u64,
    /// `heads` of the tiling (see [`AttnCfg`]).
    pub heads: u64,
    /// `bufs` of the tiling (see [`AttnCfg`]).
    pub bufs: u64,
    /// `pbufs` of the tiling (see [`AttnCfg`]).
    pub pbufs: u64,
    /// GM parameter `q`.
    pub q: ParamId,
    /// GM parameter `kv`.
    pub kv: ParamId,
    /// GM parameter `idx`.
    pub idx: ParamId,
    /// GM parameter `bt`.
    pub bt: ParamId,
    /// GM parameter `counts`.
    pub counts: ParamId,
    /// GM parameter `o_ws`.
    pub o_ws: ParamId,
    /// GM parameter `lse_ws`.
    pub lse_ws: ParamId,
    /// GM parameter `v` (separate V cache), when the kernel has one.
    pub vsrc: Option<ParamId>,
    /// Tile `q_l1`.
    pub q_l1: TileId,
    /// Tile `k_l1`.
    pub k_l1: TileId,
    /// Tile `kt_l1`.
    pub kt_l1: TileId,
    /// Tile `v_l1`.
    pub v_l1: TileId,
    /// Tile `p_l1`.
    pub p_l1: TileId,
    /// Tile `q_l0`.
    pub q_l0: TileId,
    /// Tile `p_l0`.
    pub p_l0: TileId,
    /// Tile `kt_l0`.
    pub kt_l0: TileId,
    /// Tile `v_l0`.
    pub v_l0: TileId,
    /// Tile `s_acc`.
    pub s_acc: TileId,
    /// Tile `pv_acc`.
    pub pv_acc: TileId,
    /// Tile `s_ub`.
    pub s_ub: TileId,
    /// Tile `p_nz`.
    pub p_nz: TileId,
    /// Tile `l`.
    pub l: TileId,
    /// Tile `mc`.
    pub mc: TileId,
    /// Tile `lc`.
    pub lc: TileId,
    /// Tile `alpha`.
    pub alpha: TileId,
    /// Tile `lse_t`.
    pub lse_t: TileId,
    /// The statistics above seen as ND rows, for the element-wise ops (A5 takes no DN there).
    pub rows: vector::StatRows,
    /// Tile `o_t`.
    pub o_t: TileId,
    /// Tile `pv_ub`.
    pub pv_ub: TileId,
    /// Tile `p_ub` (P cast to the data dtype), unless the data is f32.
    pub p_ub: Option<TileId>,
    /// Tile group `o_cast` (the result cast to the data dtype, one per V slice) of a
    /// [`AttnCfg::direct`] kernel whose data is not f32.
    pub o_cast: Option<TileId>,
    /// Channel `s`.
    pub ch_s: ChannelId,
    /// Channel `p`.
    pub ch_p: ChannelId,
    /// Channel `pv`.
    pub ch_pv: ChannelId,
}

/// The coordinates of a block of the split kernel: `(split, ht, b, count, c0, iters, h0, hv)`.
type Coords = (VarId, VarId, VarId, VarId, VarId, VarId, VarId, VarId);

impl SplitKernel<'_> {
    /// Work item `item`'s coordinates and the split's chunk range (same expressions on every
    /// core); `item = (b * nht + ht) * splits + split`.
    pub(super) fn coords(&self, b: &mut Body<'_>, item: Expr) -> Coords {
        let p = |id: ParamId| Expr::Param(id);
        let split = b.let_("split", item.clone() % p(self.sp.splits));
        let rest = b.let_("rest", item / p(self.sp.splits));
        let ht = b.let_("ht", rest % self.cfg.nht);
        let bi = b.let_("b", rest / self.cfg.nht);
        let cnt = b.read_scalar("count", self.counts, bi);
        let c0 = b.let_("c0", split * p(self.sp.cps));
        let nck = Expr::Var(cnt).ceil_div(self.chunk as i64);
        let iters = b.let_("iters", (nck.min(c0 + p(self.sp.cps)) - c0).max(0));
        let h0 = b.let_("h0", ht * self.cfg.hg);
        let hv = b.let_("hv", (Expr::from(self.heads) - h0).min(self.cfg.hg));
        (split, ht, bi, cnt, c0, iters, h0, hv)
    }

    /// Runs `item_body(b, item)` for each work item of this block: item `BlockIdx` itself when
    /// the plan gives a block one item, else items `BlockIdx * ipb ..` one after another (see
    /// [`AttnCfg::ipb`]).
    pub(super) fn for_items(
        &self,
        b: &mut Body<'_>,
        item_body: &mut dyn FnMut(&mut Body<'_>, Expr),
    ) {
        let ipb = self.cfg.ipb.max(1);
        if ipb == 1 {
            item_body(b, Expr::BlockIdx);
        } else {
            b.for_range("item", 0, ipb, 1, |lb, k| {
                item_body(lb, Expr::BlockIdx * ipb + Expr::Var(k));
            });
        }
    }
}
