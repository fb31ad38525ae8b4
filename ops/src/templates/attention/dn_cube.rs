//! The cube program of `flash_dn` (see `dn.rs`): Q^T once, then per KV tile K and V into L1,
//! S^T = K Q^T per D slice, the score handoff (channel S, DualModeSplitN), P V per Dv slice and
//! its handoff (channel PV, DualModeSplitM). The P-writing variant runs the score half twice.

use super::dn::{FlashCfg, FlashKernel};
use super::dn_host::Desc;
use super::ping_pong;
use tile_backend::dsl::Body;
use tile_backend::ir::{Expr, GmView, ParamId, Phase, Pipe, TileId, VarId};
use Pipe::{Fix, Mte1, M as Mm};

/// Appends the cube program of the flash kernel `k` to `c`.
pub(super) fn body(c: &mut Body<'_>, k: &FlashKernel<'_>) {
    let cfg = k.cfg;
    let (ts, tkv, d, dp) = (cfg.ts, cfg.tkv, cfg.d, cfg.dp());
    let p = |id: ParamId| Expr::Param(id);
    let q_off = k.field(c, Desc::QOff);
    let nq = k.field(c, Desc::Nq);
    let kv_end = k.field(c, Desc::KvEnd);
    let iters = c.let_("iters", kv_end.clone().ceil_div(tkv as i64));
    // Q rows in NZ, zero padded; the same bytes as ZN [dp, ts] are Q^T.
    c.set_validshape(k.q_l1, nq.clone(), d);
    c.load(k.q_l1, GmView::nd(k.q, q_off, nq, d, p(k.sp.q_rs)));
    c.fillpad(k.q_l1);
    c.set_validshape(k.qt_l1, dp, ts);
    let k_off = k.field(c, Desc::KOff);
    // Hand-written L0 slot flags ([`hand_l0`]) start free.
    if hand_l0(cfg) {
        for e in [0, 1] {
            c.set_flag(Mm, Mte1, e);
        }
    }
    // Acc slots start free (FIX -> M events 0, 1 for s_acc, 2, 3 for pv_acc).
    for e in 0..4 {
        c.set_flag(Fix, Mm, e);
    }
    match k.v {
        Some(_) => {
            // One tile of lookahead: tile t + 1's scores are computed (and handed over) before
            // tile t's P V, so the cube works while the vector cores run tile t's softmax.
            let v_off = k.field(c, Desc::VOff);
            c.if_(Expr::Var(iters).gt(0), |b| {
                scores(b, k, &kv_end, &k_off, Expr::from(0), 0);
            });
            let mut step = |b: &mut Body<'_>, it: Expr, slot: u64| {
                let next = it.clone() + 1;
                b.if_(next.clone().lt(Expr::Var(iters)), |nb| {
                    scores(nb, k, &kv_end, &k_off, next, 1 - slot);
                });
                let j0 = b.let_("j0", it * cfg.tkv);
                let nv = b.let_("nv", (kv_end.clone() - j0).min(cfg.tkv as i64));
                pv(b, k, &v_off, j0, nv, slot);
            };
            ping_pong(c, Expr::Var(iters), &mut step);
        }
        None => {
            // Two passes over the keys: the statistics, then P.
            for _ in 0..2 {
                let mut step = |b: &mut Body<'_>, it: Expr, slot: u64| {
                    scores(b, k, &kv_end, &k_off, it, slot);
                };
                ping_pong(c, Expr::Var(iters), &mut step);
            }
        }
    }
    if hand_l0(cfg) {
        for e in [0, 1] {
            c.wait_flag(Mm, Mte1, e);
        }
    }
    for e in 0..4 {
        c.wait_flag(Fix, Mm, e);
    }
}

/// Whether the cube writes its L0 slots' flags (M <-> MTE1: a K, Q^T or V slice slot loaded
/// before the matmul reads it, free again once it has) by hand, events 0, 1. The flash kernel
/// leaves them to the sync pass; the P-writing variant (`qk_softmax`), whose two passes over
/// the keys run one after the other, writes them, because there the pass's pairs lose an M ->
/// MTE1 signal (the traced `qk_softmax` tests report it).
fn hand_l0(cfg: &FlashCfg) -> bool {
    cfg.write_p
}

/// Loads `rows` rows (`cols` columns, row stride `rs`) of `src` from row `j0` on into L1 slot
/// `slot` of `dst`, zero padded to `[tkv, padc]`.
#[allow(clippy::too_many_arguments)]
fn load_rows(
    b: &mut Body<'_>,
    tkv: u64,
    dst: TileId,
    slot: u64,
    src: ParamId,
    off: &Expr,
    (j0, rows): (VarId, VarId),
    (rs, cols, padc): (ParamId, u64, u64),
) {
    let t = dst.at(slot);
    b.set_validshape(t.clone(), rows, cols);
    let view = GmView::nd(
        src,
        off.clone() + Expr::Var(j0) * Expr::Param(rs),
        rows,
        cols,
        Expr::Param(rs),
    );
    b.load(t.clone(), view);
    if cols < padc {
        b.fillpad(t.clone());
    } else {
        b.if_(Expr::Var(rows).lt(tkv), |ib| ib.fillpad(t.clone()));
    }
    b.set_validshape(t, tkv, padc);
}

/// KV tile `it`: K into L1, S^T = K Q^T (D-sliced, Partial/Final), moved to both UBs with
/// DualModeSplitN (channel S). Returns the tile's first key and key count.
fn scores(
    b: &mut Body<'_>,
    k: &FlashKernel<'_>,
    kv_end: &Expr,
    k_off: &Expr,
    it: Expr,
    slot: u64,
) -> (VarId, VarId) {
    let cfg = k.cfg;
    let (tkv, ks) = (cfg.tkv, cfg.ks);
    let nks = cfg.dp() / ks;
    let j0 = b.let_("j0", it * tkv);
    let nv = b.let_("nv", (kv_end.clone() - j0).min(tkv as i64));
    let k_cols = (k.sp.k_rs, cfg.d, cfg.dp());
    load_rows(b, tkv, k.k_l1, slot, k.k, k_off, (j0, nv), k_cols);
    for j in 0..nks {
        let xs = j % 2;
        let x = xs as u8;
        let (kl, ql) = (k.k_l0.at(xs), k.qt_l0.at(xs));
        if hand_l0(cfg) {
            b.wait_flag(Mm, Mte1, x);
        }
        b.mov(kl.clone(), k.k_l1.at(slot)).offset(0, j * ks);
        b.mov(ql.clone(), k.qt_l1).offset(j * ks, 0);
        if hand_l0(cfg) {
            b.set_flag(Mte1, Mm, x);
            b.wait_flag(Mte1, Mm, x);
        }
        // Partial on the intermediate D slices, Final on the last (the unit flag orders the
        // chain before the Fixpipe read and that read before the next chain).
        let phase = if j + 1 == nks {
            Phase::Final
        } else {
            Phase::Partial
        };
        if j == 0 {
            b.wait_flag(Fix, Mm, slot as u8);
            b.matmul(k.s_acc.at(slot), kl, ql).phase(phase);
        } else {
            b.matmul_acc(k.s_acc.at(slot), kl, ql).phase(phase);
        }
        if hand_l0(cfg) {
            b.set_flag(Mm, Mte1, x);
        }
    }
    // S^T -> both UBs, columns split: each AIV holds all keys of half the queries (or all of
    // it to AIV0 in the single-vector-core fallback).
    b.acquire(k.ch_s);
    b.mov(k.s_ub, k.s_acc.at(slot))
        .mode(cfg.s_mode())
        .phase(Phase::Final);
    b.set_flag(Fix, Mm, slot as u8);
    b.push(k.ch_s);
    (j0, nv)
}

/// KV tile of keys `j0..j0 + nv`: V into L1, P (both halves, in L1 as P^T NZ = P ZN) into
/// L0A, O_j = P V_j moved back with DualModeSplitM (channel PV) to the AIV owning each query.
fn pv(b: &mut Body<'_>, k: &FlashKernel<'_>, v_off: &Expr, j0: VarId, nv: VarId, slot: u64) {
    let cfg = k.cfg;
    let (tkv, ns) = (cfg.tkv, cfg.ns);
    let nks = cfg.dp() / cfg.ks;
    let nns = cfg.vp() / ns;
    let (Some(v), Some(v_l1)) = (k.v, k.v_l1) else {
        return;
    };
    let (ch_p, ch_pv) = (k.ch_p, k.ch_pv);
    load_rows(
        b,
        tkv,
        v_l1,
        slot,
        v,
        v_off,
        (j0, nv),
        (k.sp.v_rs, cfg.dv, cfg.vp()),
    );
    b.pop(ch_p);
    b.mov(k.pt_l0, k.pt_l1.at(slot));
    b.release(ch_p);
    for j in 0..nns {
        let xs = (nks + j) % 2;
        let ys = j % 2;
        let vl = k.v_l0.at(xs);
        b.mov(vl.clone(), v_l1.at(slot)).offset(0, j * ns);
        b.wait_flag(Fix, Mm, 2 + ys as u8);
        b.matmul(k.pv_acc.at(ys), k.pt_l0, vl).phase(Phase::Final);
        b.acquire(ch_pv);
        b.mov(k.pv_ub, k.pv_acc.at(ys))
            .mode(cfg.pv_mode())
            .phase(Phase::Final);
        b.set_flag(Fix, Mm, 2 + ys as u8);
        b.push(ch_pv);
    }
}
