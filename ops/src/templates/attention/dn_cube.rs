//! The cube program of `flash_dn` (see `dn.rs`): Q^T once, then per KV tile K and V into L1,
//! S^T = K Q^T per D slice, the score handoff (channel S, DualModeSplitN), P V per Dv slice and
//! its handoff (channel PV, DualModeSplitM).

use super::dn::FlashKernel;
use super::dn_host::Desc;
use super::ping_pong;
use tile_backend::dsl::Body;
use tile_backend::ir::{AccToVecMode, Expr, GmView, ParamId, Phase, TileId};

/// Appends the cube program of the flash kernel `k` to `c`.
pub(super) fn body(c: &mut Body<'_>, k: &FlashKernel<'_>) {
    let cfg = k.cfg;
    let (ts, tkv, ks, ns) = (cfg.ts, cfg.tkv, cfg.ks, cfg.ns);
    let (d, dv, dp, vp) = (cfg.d, cfg.dv, cfg.dp(), cfg.vp());
    let (nks, nns) = (dp / ks, vp / ns);
    let p = |id: ParamId| Expr::Param(id);
    let q_off = k.field(c, Desc::QOff);
    let k_off = k.field(c, Desc::KOff);
    let v_off = k.field(c, Desc::VOff);
    let nq = k.field(c, Desc::Nq);
    let kv_end = k.field(c, Desc::KvEnd);
    let iters = c.let_("iters", kv_end.clone().ceil_div(tkv as i64));
    // Q rows in NZ, zero padded; the same bytes as ZN [dp, ts] are Q^T.
    c.set_validshape(k.q_l1, nq.clone(), d);
    c.load(k.q_l1, GmView::nd(k.q, q_off, nq, d, p(k.sp.q_rs)));
    c.fillpad(k.q_l1);
    c.set_validshape(k.qt_l1, dp, ts);
    let mut step = |b: &mut Body<'_>, it: Expr, slot: u64| {
        let j0 = b.let_("j0", it * tkv);
        let nv = b.let_("nv", (kv_end.clone() - j0).min(tkv as i64));
        // K and V rows of this tile into L1 slot `slot`, zero padded past nv rows / d columns.
        let load = |b: &mut Body<'_>, dst: TileId, src: ParamId, off: &Expr, rs, cols, padc| {
            let t = dst.at(slot);
            b.set_validshape(t.clone(), nv, cols);
            let view = GmView::nd(src, off.clone() + Expr::Var(j0) * p(rs), nv, cols, p(rs));
            b.load(t.clone(), view);
            if cols < padc {
                b.fillpad(t.clone());
            } else {
                b.if_(Expr::Var(nv).lt(tkv), |ib| ib.fillpad(t.clone()));
            }
            b.set_validshape(t, tkv, padc);
        };
        load(b, k.k_l1, k.k, &k_off, k.sp.k_rs, d, dp);
        load(b, k.v_l1, k.v, &v_off, k.sp.v_rs, dv, vp);
        // S^T = K Q^T, D-sliced.
        for j in 0..nks {
            let xs = j % 2;
            let (kl, ql) = (k.k_l0.at(xs), k.qt_l0.at(xs));
            b.mov(kl.clone(), k.k_l1.at(slot)).offset(0, j * ks);
            b.mov(ql.clone(), k.qt_l1).offset(j * ks, 0);
            // Partial on the intermediate K slices, Final on the last (the unit flag orders
            // the chain before the Fixpipe read and that read before the next chain).
            let phase = if j + 1 == nks {
                Phase::Final
            } else {
                Phase::Partial
            };
            if j == 0 {
                b.matmul(k.s_acc.at(slot), kl, ql).phase(phase);
            } else {
                b.matmul_acc(k.s_acc.at(slot), kl, ql).phase(phase);
            }
        }
        // S^T -> both UBs, columns split: each AIV holds all keys of half the queries.
        b.acquire(k.ch_s);
        b.mov(k.s_ub, k.s_acc.at(slot))
            .mode(AccToVecMode::DualModeSplitN)
            .phase(Phase::Final);
        b.push(k.ch_s);
        // P (both halves, in L1 as P^T NZ = P ZN) -> L0A.
        b.pop(k.ch_p);
        b.mov(k.pt_l0, k.pt_l1.at(slot));
        b.release(k.ch_p);
        // O_j = P V_j, rows split back to the AIV that owns each query.
        for j in 0..nns {
            let xs = (nks + j) % 2;
            let ys = j % 2;
            let vl = k.v_l0.at(xs);
            b.mov(vl.clone(), k.v_l1.at(slot)).offset(0, j * ns);
            b.matmul(k.pv_acc.at(ys), k.pt_l0, vl).phase(Phase::Final);
            b.acquire(k.ch_pv);
            b.mov(k.pv_ub, k.pv_acc.at(ys))
                .mode(AccToVecMode::DualModeSplitM)
                .phase(Phase::Final);
            b.push(k.ch_pv);
        }
    };
    ping_pong(c, Expr::Var(iters), &mut step);
}
