//! The cube program of `flash_dn` (see `mod.rs`): Q^T once, then per KV tile K and V into L1,
//! S^T = K Q^T per D slice, the score handoff (channel S, DualModeSplitN), P V per Dv slice and
//! its handoff (channel PV, DualModeSplitM). The P-writing variant runs the score half twice.

use super::cfg::Desc;
use super::shared::FlashKernel;
use crate::templates::common::ping_pong;
use tile_backend::dsl::Body;
use tile_backend::ir::{Expr, GmView, ParamId, Phase, Pipe, TileId, VarId};
use Pipe::{Fix, Mte1, M as Mm};

/// Appends the cube program of the flash kernel `k` to `c`.
pub(super) fn body(c: &mut Body<'_>, k: &FlashKernel<'_>) {
    // L0 slots start free (M -> MTE1 events 0, 1 for the K/Q^T/V slices, 2 for P^T).
    for e in [0, 1, PT_EV] {
        c.set_flag(Mm, Mte1, e);
    }
    // Acc slots start free (FIX -> M events 0, 1 for s_acc, 2, 3 for pv_acc).
    for e in 0..4 {
        c.set_flag(Fix, Mm, e);
    }
    k.for_each_row(c, |c, row| query_tile(c, k, &row));
    for e in [0, 1, PT_EV] {
        c.wait_flag(Mm, Mte1, e);
    }
    for e in 0..4 {
        c.wait_flag(Fix, Mm, e);
    }
}

/// The query tile of descriptor row `row`.
fn query_tile(c: &mut Body<'_>, k: &FlashKernel<'_>, row: &Expr) {
    let cfg = k.cfg;
    let (ts, tkv, d, dp) = (cfg.ts, cfg.tkv, cfg.d, cfg.dp());
    let p = |id: ParamId| Expr::Param(id);
    let q_off = k.field(c, row, Desc::QOff);
    let nq = k.field(c, row, Desc::Nq);
    let kv_end = k.field(c, row, Desc::KvEnd);
    let k_off = k.field(c, row, Desc::KOff);
    let v_off = k.v.map(|_| k.field(c, row, Desc::VOff));
    let iters = c.let_("iters", kv_end.clone().ceil_div(tkv as i64));
    // Q rows in NZ, zero padded; the same bytes as ZN [dp, ts] are Q^T.
    c.set_validshape(k.q_l1, nq.clone(), d);
    c.load(k.q_l1, GmView::nd(k.q, q_off, nq, d, p(k.sp.q_rs)));
    c.fillpad(k.q_l1);
    c.set_validshape(k.qt_l1, dp, ts);
    match v_off {
        Some(v_off) => {
            // One tile of lookahead: tile t + 1's scores are computed (and handed over) before
            // tile t's P V, so the cube works while the vector cores run tile t's softmax.
            // K runs two tiles ahead: tiles 0 and 1 first, then tile t + 2's with tile t's V.
            c.if_(Expr::Var(iters).gt(0), |b| {
                let first = keys(b, cfg.tkv, &kv_end, Expr::from(0));
                load_k(b, k, &k_off, first, 0);
                b.if_(Expr::Var(iters).gt(1), |b| {
                    let second = keys(b, cfg.tkv, &kv_end, Expr::from(1));
                    load_k(b, k, &k_off, second, 1);
                });
                scores(b, k, 0);
            });
            let mut step = |b: &mut Body<'_>, it: Expr, slot: u64| {
                let mine = keys(b, cfg.tkv, &kv_end, it.clone());
                // K of tile t + 2 (into the slot tile t's scores freed) and V of tile t in one
                // statement: the sync pass sets their MTE2 -> MTE1 flags after both, so MTE2
                // waits out one DMA latency per KV tile, not two (a set waits for the loads
                // before it to complete).
                let after = it.clone() + 2;
                b.if_else(
                    after.clone().lt(Expr::Var(iters)),
                    |nb| {
                        let theirs = keys(nb, cfg.tkv, &kv_end, after);
                        load_k(nb, k, &k_off, theirs, slot);
                        load_v(nb, k, &v_off, mine, slot);
                    },
                    |eb| load_v(eb, k, &v_off, mine, slot),
                );
                let next = it + 1;
                b.if_(next.lt(Expr::Var(iters)), |nb| scores(nb, k, 1 - slot));
                pv(b, k, slot);
            };
            ping_pong(c, Expr::Var(iters), &mut step);
        }
        None => {
            // Two passes over the keys: the statistics, then P.
            for _ in 0..2 {
                let mut step = |b: &mut Body<'_>, it: Expr, slot: u64| {
                    let keys = keys(b, cfg.tkv, &kv_end, it);
                    load_k(b, k, &k_off, keys, slot);
                    scores(b, k, slot);
                };
                ping_pong(c, Expr::Var(iters), &mut step);
            }
        }
    }
}

/// The M -> MTE1 / MTE1 -> M event of `pt_l0` (events 0 and 1 are the two slice slots). The L0
/// flags are written by hand: slot `x` is free again once the matmul reading it is done.
const PT_EV: u8 = 2;

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

/// The first key and the key count of KV tile `it` (of `tkv` keys; the last one ends at
/// `kv_end`).
fn keys(b: &mut Body<'_>, tkv: u64, kv_end: &Expr, it: Expr) -> (VarId, VarId) {
    let j0 = b.let_("j0", it * tkv);
    let nv = b.let_("nv", (kv_end.clone() - j0).min(tkv as i64));
    (j0, nv)
}

/// K rows `keys` into L1 slot `slot`.
fn load_k(b: &mut Body<'_>, k: &FlashKernel<'_>, k_off: &Expr, keys: (VarId, VarId), slot: u64) {
    let cfg = k.cfg;
    let k_cols = (k.sp.k_rs, cfg.d, cfg.dp());
    load_rows(b, cfg.tkv, k.k_l1, slot, k.k, k_off, keys, k_cols);
}

/// V rows `keys` into L1 slot `slot` (nothing in the P-writing variant).
fn load_v(b: &mut Body<'_>, k: &FlashKernel<'_>, v_off: &Expr, keys: (VarId, VarId), slot: u64) {
    let cfg = k.cfg;
    if let (Some(v), Some(v_l1)) = (k.v, k.v_l1) {
        let v_cols = (k.sp.v_rs, cfg.dv, cfg.vp());
        load_rows(b, cfg.tkv, v_l1, slot, v, v_off, keys, v_cols);
    }
}

/// A KV tile (K already in L1 slot `slot`): S^T = K Q^T (D-sliced,
/// Partial/Final), moved to both UBs with DualModeSplitN (channel S).
fn scores(b: &mut Body<'_>, k: &FlashKernel<'_>, slot: u64) {
    let cfg = k.cfg;
    let ks = cfg.ks;
    let nks = cfg.dp() / ks;
    for j in 0..nks {
        let xs = j % 2;
        let x = xs as u8;
        let (kl, ql) = (k.k_l0.at(xs), k.qt_l0.at(xs));
        b.wait_flag(Mm, Mte1, x);
        b.mov(kl.clone(), k.k_l1.at(slot)).offset(0, j * ks);
        b.mov(ql.clone(), k.qt_l1).offset(j * ks, 0);
        b.set_flag(Mte1, Mm, x);
        b.wait_flag(Mte1, Mm, x);
        // Partial on the intermediate D slices, Final on the last (the unit flag orders the
        // chain before the Fixpipe read and that read before the next chain).
        let phase = if j + 1 == nks {
            Phase::Final
        } else {
            Phase::Partial
        };
        // The accumulator of this slot (the wide tiling has one, on event 0).
        let acc = slot % cfg.s_accs();
        if j == 0 {
            b.wait_flag(Fix, Mm, acc as u8);
            b.matmul(k.s_acc.at(acc), kl, ql).phase(phase);
        } else {
            b.matmul_acc(k.s_acc.at(acc), kl, ql).phase(phase);
        }
        b.set_flag(Mm, Mte1, x);
    }
    // S^T -> both UBs, columns split: each AIV holds all keys of half the queries (or all of
    // it to AIV0 in the single-vector-core fallback).
    let acc = slot % cfg.s_accs();
    b.acquire(k.ch_s(slot));
    b.set_fixpipe_validshape(k.s(slot), (cfg.tkv, cfg.ts), cfg.s_mode());
    b.mov(k.s(slot), k.s_acc.at(acc))
        .mode(cfg.s_mode())
        .phase(Phase::Final);
    b.set_flag(Fix, Mm, acc as u8);
    b.push(k.ch_s(slot));
}

/// A KV tile (V already in L1 slot `slot`): P (both halves, in L1 as P^T NZ = P
/// ZN) into L0A, O_j = P V_j moved back with DualModeSplitM (channel PV) to the AIV owning
/// each query. With the wide tiling P^T goes into L0A in two key halves and each Dv slice's
/// product accumulates over them (Partial, then Final) in its own accumulator.
fn pv(b: &mut Body<'_>, k: &FlashKernel<'_>, slot: u64) {
    let cfg = k.cfg;
    let ns = cfg.ns;
    let nks = cfg.dp() / cfg.ks;
    let nns = cfg.vp() / ns;
    let pk = cfg.pt_keys();
    let parts = cfg.tkv / pk;
    let Some(v_l1) = k.v_l1 else {
        return;
    };
    let (ch_p, ch_pv) = (k.ch_p, k.ch_pv);
    b.pop(ch_p);
    for part in 0..parts {
        let last_part = part + 1 == parts;
        b.wait_flag(Mm, Mte1, PT_EV);
        if parts == 1 {
            b.mov(k.pt_l0, k.pt_l1.at(slot));
        } else {
            b.mov(k.pt_l0, k.pt_l1.at(slot)).offset(0, part * pk);
        }
        b.set_flag(Mte1, Mm, PT_EV);
        if last_part {
            b.release(ch_p);
        }
        b.wait_flag(Mte1, Mm, PT_EV);
        for j in 0..nns {
            let xs = (nks + part * nns + j) % 2;
            let x = xs as u8;
            // One accumulator per Dv slice when the parts accumulate, else two in turn.
            let ys = if parts == 1 { j % 2 } else { j };
            let vl = k.v_l0.at(xs);
            b.wait_flag(Mm, Mte1, x);
            b.mov(vl.clone(), v_l1.at(slot)).offset(part * pk, j * ns);
            b.set_flag(Mte1, Mm, x);
            b.wait_flag(Mte1, Mm, x);
            let phase = if last_part {
                Phase::Final
            } else {
                Phase::Partial
            };
            if part == 0 {
                b.wait_flag(Fix, Mm, 2 + ys as u8);
                b.matmul(k.pv_acc.at(ys), k.pt_l0, vl).phase(phase);
            } else {
                b.matmul_acc(k.pv_acc.at(ys), k.pt_l0, vl).phase(phase);
            }
            b.set_flag(Mm, Mte1, x);
            if j + 1 == nns {
                b.set_flag(Mm, Mte1, PT_EV);
            }
            if last_part {
                b.acquire(ch_pv);
                b.set_fixpipe_validshape(k.pv_ub, (cfg.ts, ns), cfg.pv_mode());
                b.mov(k.pv_ub, k.pv_acc.at(ys))
                    .mode(cfg.pv_mode())
                    .phase(Phase::Final);
                b.set_flag(Fix, Mm, 2 + ys as u8);
                b.push(ch_pv);
            }
        }
    }
}
