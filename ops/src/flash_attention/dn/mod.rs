//! The DN-mode flash-attention kernel `flash_dn` (prefill: many queries against many keys),
//! written the Ascend 950 way (ASCEND950.md §9): the scores are computed transposed, so each
//! vector core's softmax runs down the columns of its own tile and no reduction crosses the
//! two AIVs.
//!
//! # `flash_dn`
//!
//! A query tile of one (sequence, head) problem is described by a row of the host's descriptor
//! table (`desc`, [`Desc`]); the host launches at most one block per cluster and each block
//! runs its rows one after another ([`FlashKernel::for_each_row`]: a zigzag over the rows,
//! which the host sorts by the keys they visit, so every block gets about the same work and
//! the next row's loads overlap the last row's vector tail). A row says where the tile's `nq <= ts` queries, its KV head's keys
//! and values, its output rows and its lse entries start, how many keys it visits (`kv_end`:
//! every key, or with a causal mask the keys up to the tile's last visible one, so fully masked
//! KV tiles are never loaded nor computed) and the causal diagonal. Row strides are runtime
//! scalars, so one kernel serves the dense `[B, H, S, D]` form and the packed varlen
//! `[total, H, D]` form. With `H = ts / 2` queries per vector core:
//!
//! ```text
//! cube  MTE2  Q rows -> q_l1 Mat NZ [ts, dp] (zero padded), seen as qt_l1 ZN [dp, ts] = Q^T
//!       per KV tile t (keys j0 = t*tkv .., nv of them; slot s = t % 2), one tile ahead: tile
//!       t + 1's scores (below, to channel S) are issued before tile t's P V, so the cube
//!       computes them while the vector cores run tile t's softmax:
//!       MTE2  K rows of tile t + 2 -> k_l1[s] Mat NZ [tkv, dp] and V rows of tile t -> v_l1[s]
//!             Mat NZ [tkv, vp] (zero pad), in one statement (tiles 0 and 1's K before the
//!             loop): the sync pass sets both MTE2 -> MTE1 flags after the two loads, so MTE2
//!             waits out one DMA latency per KV tile, not two
//!       per D slice j: MTE1 k_l1[s][:, j ks..] -> k_l0 Left NZ [tkv, ks];
//!                           qt_l1[j ks.., :] -> qt_l0 Right ZN [ks, ts]
//!                      M    s_acc[s] Acc [tkv, ts] (+)= K Q^T = S^T
//!       FIX   s_acc[s] -> s_ub[s] (two buffers where UB holds them, [`FlashCfg::s_bufs`]),
//!             DualModeSplitN: AIV i gets S^T[:, i H ..], all tkv keys of its H queries
//!                                                                      -> channel S0 / S1
//!       MTE1  (channel P) p_l1 [tkv, ts] seen as ZN [ts, tkv] (= P, same bytes) -> pt_l0
//!             Left NZ [ts, tkv]
//!       per Dv slice j: MTE1 v_l1[s][:, j ns..] -> v_l0 Right ZN [tkv, ns];
//!             M pv_acc Acc [ts, ns] = P V_j; FIX -> pv_ub, DualModeSplitM: AIV i gets rows
//!             i H .., the same H queries                                    -> channel PV
//! vector (each AIV, f32; m, l, alpha ND [1, H] rows, one entry per query), also one tile
//!       ahead: tile t + 1's softmax and P run before tile t's O update (alpha[t % 2]), so the
//!       vector cores work while the cube computes tile t's P V:
//!       s *= scale; low_tile = colmin s (off the diagonal); keys past kv_end: rows nv.. :=
//!       -inf (fillpad); a tile crossing the causal diagonal (one load of the keep band's
//!       staircase): s = min(s, keep), low_tile = colmin max(-keep, s); low = min(low,
//!       low_tile);
//!       m_new = max(m, colmax s) (m and m_tile swap roles by slot: no copy); alpha =
//!       exp(m - m_new); s = exp(s - m_new) (column
//!       broadcast); l = l alpha + colsum s; P = cast(s) ND -> NZ -> p_l1 columns i H ..
//!       (channel P); O_j = O_j alpha + PV_j (alpha seen as the DN column [H, 1]: a row
//!       broadcast over O's rows).
//!       After the last O update (P V slice still held): O += 0 O.
//!       End: l' = max(l, 1) + 0 (low + l); O /= l'; lse = m + ln l'; MTE3 O (cast, two
//!       buffers where they fit) -> out rows, lse.
//! ```
//!
//! `m` starts at `M_INIT` (finite): a query that sees no key keeps l = 0 and o = 0 and writes
//! lse ~ -1e30, which the host turns into +inf ([`run_flash`]); a column that is all -inf in one
//! tile adds exp(-inf) = 0. The causal mask bands (`mask [2 (2 tkv + H - 1), H]`): the keep
//! band, `keep[x][c] = +inf` iff `x - c <= tkv - 1` and -inf elsewhere, then the low band
//! `-keep` (the kernel reads only the keep band and negates it in UB); the tile of an AIV whose first query sees keys up to `delta` (relative to the
//! tile's first key) needs `(r, c)` visible iff `r - c <= delta`, which are a band's rows
//! from `tkv - 1 - clamp(delta, -H, tkv - 1)` on.
//!
//! Non-finite data (docs/ops.md): a hidden key's score is replaced by `min(s, -inf)`, not
//! added to (+inf or NaN there plus -inf would be NaN); `low` is the lowest score each query
//! saw (a -inf score is a weight of 0 that l alone would not show), and `l' = max(l, 1) + 0
//! (low + l)` is NaN when a seen score was not finite (a NaN or +inf score makes l NaN, which
//! the max may drop); `O += 0 O` turns ±inf from V into NaN. On the simulator min and max
//! drop a NaN operand, so a NaN score of a hidden key is masked too.
//!
//! Wide tiling ([`FlashCfg::wide`], the device plan of calls without the causal mask whose
//! problems have more than 128 queries): `ts` = 256, so each 128-key K/V tile is read once
//! per 256 queries, not per 128. What that costs on chip: one score accumulator (`s_acc`
//! `[128, 256]` f32 is half of L0C, beside one `[256, ns]` P V accumulator per Dv slice), one
//! score buffer per UB (`[128, 128]` f32), P^T moved into L0A in two key halves (P V of each Dv
//! slice accumulates over them, Partial then Final), P cast over its own scores' bytes (a view
//! of them: each 256-byte repeat of f32 is read before its 128 bytes of P land on scores
//! already read) and released with channel S only once its NZ copy is made; the NZ copy and
//! the output cast are views of the mask tile's bytes, guarded by hand-written MTE3 -> V flags
//! (one wait per KV tile and per row end, so sets and waits pair outside the runtime `if`s,
//! and a V -> MTE3 handshake before the row's possibly skipped stores). The vector cores run
//! tile t's first Dv slice of the O update between tile t + 1's softmax and its P: the Fixpipe
//! moves in program order, and with one P V buffer the second slice's move would otherwise
//! hold tile t + 2's scores behind this P's release.
//!
//! Single-vector-core fallback ([`FlashCfg::single`], calls of at most 16 queries per
//! problem, kernel `<name>_single_<dtype>`): `ts = H = 16`, the scores and P V move whole to
//! AIV0 with `SingleModeVec0` and P goes into L1 without an offset. Both AIVs run the same
//! vector program; AIV1 skips each data op that reads what the cube handed over (its copy was
//! never written) and owns no query, but runs every channel op and hand-written flag, so the
//! sync pass (which binds a channel op to the pipe of its neighbouring data op) and the flag
//! pairs stay the same on both.
//!
//! Sync ownership: the sync pass owns the vector's `p_nz` / stored P tile (V <-> MTE3; handed
//! to it with the 950 estimates unchanged to the cycle: B 1, H 16, S 2048, D 128 causal bf16
//! 234803 cycles, MLA prefill 83069, f32 S 1024 123242, S 16 4462; every traced test
//! hazard-free), the K/V loads against their moves and the stores; the cube <-> vector
//! handoffs are the channels S (S0 / S1 with two score buffers), P and PV. Written by hand,
//! each beside its reason:
//! - the cube's L0 slots (M <-> MTE1, events 0, 1 for the slice slots and 2 for `pt_l0`).
//!   Owned by the pass, the per-cluster row loop loses an MTE1 -> FIX signal (the pass's pair
//!   set before each row's KV loop is not ordered after the previous row's wait after it: 224
//!   hazards at the bench shape, 96 for MLA and f32) and the estimates rise (236793, 84320,
//!   126522 cycles: +0.8%, +1.5%, +2.7%); with `pt_l0`'s flags alone by hand the bench shape
//!   does not compile (the pass needs 8 more MTE1 -> M event ids than are free);
//! - the cube's Acc slots (FIX -> M, events 0, 1 for `s_acc`, 2, 3 for `pv_acc`; not
//!   re-tried on this kernel: on the one before, the pass's pairs reported hazards);
//! - the vector's mask tile (V <-> MTE2, event 0): a load under a runtime `if`, whose pair the
//!   pass would hoist out of it.

pub(crate) mod cfg;
mod cube;
pub(crate) mod host;
mod shared;
mod vector;

use cfg::{Desc, FlashCfg};
use shared::{FlashKernel, FlashParams, Stats};
use tile_backend::dsl::{KernelBuilder, Reinterpret};
use tile_backend::ir::{
    CoreKind, DType, Expr, Kernel, Layout, MemSpace, PadValue, ParamId, TileId, TileType,
};

/// The DN-mode flash kernel (see the module docs). Arguments, in order: scalars `blocks`,
/// `q_len`, `k_len`, `v_len`, `o_len`, `lse_len` (elements), `q_rs`, `k_rs`, `v_rs`, `o_rs`
/// (row strides, elements) (i32) and `scale` (f32); then `q [q_len]`, `k [k_len]`, `v
/// [v_len]` (dtype; not in the `write_p` variant), `desc [blocks, Desc::COUNT]` i32, `mask
/// [mask_rows, H]` f32, outputs `out [o_len]` (dtype: O rows, or P^T for `write_p`) and
/// `lse [lse_len]` f32. Launch `blocks` blocks.
pub(crate) fn flash_dn(cfg: &FlashCfg) -> Kernel {
    let dt = cfg.dtype;
    let (ts, tkv, ks, ns) = (cfg.ts, cfg.tkv, cfg.ks, cfg.ns);
    let (dp, vp) = (cfg.dp(), cfg.vp());
    let h = cfg.h();
    // The single-vector-core fallback is its own kernel, named apart in listings and launches.
    let single = if cfg.single { "_single" } else { "" };
    let mut kb = KernelBuilder::new(format!("{}{single}_{dt}", cfg.name));
    let int = |kb: &mut KernelBuilder, n: &str| kb.scalar(n, DType::I32);
    let sp = FlashParams {
        blocks: int(&mut kb, "blocks"),
        q_len: int(&mut kb, "q_len"),
        k_len: int(&mut kb, "k_len"),
        v_len: int(&mut kb, "v_len"),
        o_len: int(&mut kb, "o_len"),
        lse_len: int(&mut kb, "lse_len"),
        q_rs: int(&mut kb, "q_rs"),
        k_rs: int(&mut kb, "k_rs"),
        v_rs: int(&mut kb, "v_rs"),
        o_rs: int(&mut kb, "o_rs"),
        scale: kb.scalar("scale", DType::F32),
    };
    kb.range(sp.scale, 0.01, 0.25);
    let p = |id: ParamId| Expr::Param(id);
    let q = kb.input("q", dt, [p(sp.q_len)]);
    let k = kb.input("k", dt, [p(sp.k_len)]);
    let v = (!cfg.write_p).then(|| kb.input("v", dt, [p(sp.v_len)]));
    let desc = kb.input("desc", DType::I32, [p(sp.blocks), Desc::COUNT.into()]);
    let mask = kb.input("mask", DType::F32, [2 * cfg.mask_rows(), h]);
    let out = kb.output("out", dt, [p(sp.o_len)]);
    let lse = kb.output("lse", DType::F32, [p(sp.lse_len)]);

    use Layout::{DN, ND, NZ, ZN};
    use MemSpace::{Acc, Left, Mat, Right, Vec as Ub};
    let ty = TileType::new;
    let f32_data = dt == DType::F32;
    // Cube tiles.
    // Q rows in NZ (TFILLPAD on Mat takes NZ only); the same bytes seen as ZN [dp, ts] are Q^T.
    let q_l1 = kb.tile(
        "q_l1",
        ty(Mat, dt, ts, dp, NZ).dynamic().pad(PadValue::Zero),
    );
    let qt_l1 = kb.reinterpret(
        "qt_l1",
        q_l1,
        Reinterpret {
            dtype: None,
            shape: Some((dp, ts)),
            layout: Some(ZN),
        },
    );
    let k_l1 = kb.tile_group(
        "k_l1",
        ty(Mat, dt, tkv, dp, NZ).dynamic().pad(PadValue::Zero),
        2,
    );
    let v_l1 = (!cfg.write_p).then(|| {
        kb.tile_group(
            "v_l1",
            ty(Mat, dt, tkv, vp, NZ).dynamic().pad(PadValue::Zero),
            2,
        )
    });
    let p_l1 = kb.tile_group("p_l1", ty(Mat, dt, tkv, ts, NZ), 2);
    let pt_l1 = kb.reinterpret(
        "pt_l1",
        p_l1,
        Reinterpret {
            dtype: None,
            shape: Some((ts, tkv)),
            layout: Some(ZN),
        },
    );
    let k_l0 = kb.tile_group("k_l0", ty(Left, dt, tkv, ks, NZ), 2);
    let qt_l0 = kb.tile_group("qt_l0", ty(Right, dt, ks, ts, ZN), 2);
    let pk = cfg.pt_keys();
    let pt_l0 = kb.tile("pt_l0", ty(Left, dt, ts, pk, NZ));
    let v_l0 = kb.tile_group("v_l0", ty(Right, dt, pk, ns, ZN), 2);
    let s_acc = kb.tile_group(
        "s_acc",
        ty(Acc, DType::F32, tkv, ts, NZ),
        cfg.s_accs() as u32,
    );
    let pv_acc = kb.tile_group("pv_acc", ty(Acc, DType::F32, ts, ns, NZ), 2);
    // Vector tiles (one set per AIV, at the same UB addresses).
    // The wide tiling's P lives in bytes already planned: the cast writes P over its own
    // scores (each 256-byte repeat of f32 read before its 128 bytes of P land on scores
    // already read), the NZ copy and the output cast go into the mask tile (a diagonal tile's
    // mask is dead once its column minimum is taken, and the next load waits for them). The
    // scores and the mask are then views of a data-dtype allocation of their bytes.
    let view = |kb: &mut KernelBuilder, n: &str, src: TileId, dtype, shape, layout| {
        kb.reinterpret(
            n,
            src,
            Reinterpret {
                dtype: Some(dtype),
                shape: Some(shape),
                layout: Some(layout),
            },
        )
    };
    let (s_ub, mask_ub, p_ub, p_nz, mask_bytes) = if cfg.wide {
        let s_bytes = kb.tile(
            "s_bytes",
            ty(Ub, dt, tkv, 2 * h, ND).dynamic().pad(PadValue::Min),
        );
        let mask_bytes = kb.tile("mask_bytes", ty(Ub, dt, tkv, 2 * h, ND));
        (
            view(&mut kb, "s_ub", s_bytes, DType::F32, (tkv, h), ND),
            view(&mut kb, "mask_ub", mask_bytes, DType::F32, (tkv, h), ND),
            Some(view(&mut kb, "p_ub", s_bytes, dt, (tkv, h), ND)),
            view(&mut kb, "p_nz", mask_bytes, dt, (tkv, h), NZ),
            Some(mask_bytes),
        )
    } else {
        (
            kb.tile_group(
                "s_ub",
                ty(Ub, DType::F32, tkv, h, ND).dynamic().pad(PadValue::Min),
                cfg.s_bufs as u32,
            ),
            kb.tile("mask_ub", ty(Ub, DType::F32, tkv, h, ND)),
            (!f32_data).then(|| kb.tile("p_ub", ty(Ub, dt, tkv, h, ND).dynamic())),
            kb.tile("p_nz", ty(Ub, dt, tkv, h, NZ)),
            None,
        )
    };
    let pv_ub = kb.tile("pv_ub", ty(Ub, DType::F32, h, ns, ND).dynamic());
    let nns = vp / ns;
    let o_t = kb.tile_group("o", ty(Ub, DType::F32, h, ns, ND).dynamic(), nns as u32);
    // Two cast buffers where they fit the UB plan's 128 columns, so slice j + 1's cast does
    // not wait for slice j's store.
    let o_cast = (!f32_data).then(|| match mask_bytes {
        Some(bytes) => view(&mut kb, "o_cast", bytes, dt, (h, ns), ND),
        None => kb.tile_group(
            "o_cast",
            ty(Ub, dt, h, ns, ND).dynamic(),
            cfg.o_cast_bufs() as u32,
        ),
    });
    let row = |kb: &mut KernelBuilder, n: &str| kb.tile(n, ty(Ub, DType::F32, 1, h, ND).dynamic());
    let (m, l, mc, lc, lse_t) = (
        row(&mut kb, "m"),
        row(&mut kb, "l"),
        row(&mut kb, "m_tile"),
        row(&mut kb, "l_tile"),
        row(&mut kb, "lse_row"),
    );
    // One alpha per KV tile slot: tile t + 1's softmax runs before tile t's O update.
    let alpha = kb.tile_group("alpha", ty(Ub, DType::F32, 1, h, ND).dynamic(), 2);
    let (low_tile, low) = (row(&mut kb, "low_tile"), row(&mut kb, "low"));
    let column = |kb: &mut KernelBuilder, n: &str, src: TileId| {
        kb.reinterpret(
            n,
            src,
            Reinterpret {
                dtype: None,
                shape: Some((h, 1)),
                layout: Some(DN),
            },
        )
    };
    let stats = Stats {
        m,
        l,
        mc,
        lc,
        alpha,
        lse: lse_t,
        low_tile,
        low,
        alpha_col: column(&mut kb, "alpha_col", alpha),
        l_col: column(&mut kb, "l_col", l),
    };
    let ch_s0 = kb.channel("s", CoreKind::Cube, 1);
    let ch_s = if cfg.s_bufs == 2 {
        [ch_s0, kb.channel("s1", CoreKind::Cube, 1)]
    } else {
        [ch_s0; 2]
    };
    let ch_p = kb.channel("p", CoreKind::Vector, 1);
    let ch_pv = kb.channel("pv", CoreKind::Cube, 1);
    let fk = FlashKernel {
        cfg,
        sp,
        q,
        k,
        v,
        desc,
        mask,
        out,
        lse,
        q_l1,
        qt_l1,
        k_l1,
        v_l1,
        p_l1,
        pt_l1,
        k_l0,
        qt_l0,
        pt_l0,
        v_l0,
        s_acc,
        pv_acc,
        s_ub,
        mask_ub,
        p_ub,
        p_nz,
        pv_ub,
        o_t,
        o_cast,
        stats,
        ch_s,
        ch_p,
        ch_pv,
    };
    kb.cube(|c| cube::body(c, &fk));
    kb.vector(|vb| vector::body(vb, &fk));
    kb.build()
}
