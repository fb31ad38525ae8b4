//! The vector program of `flash_dn` (see `dn.rs`): the online softmax down the columns of each
//! KV tile's `[tkv, H]` slice of S^T (one column per query), P back to the cube (channel P),
//! O accumulated from P V (channel PV), the final divide and lse.

use super::dn::FlashKernel;
use super::dn_host::Desc;
use super::ping_pong;
use super::plan::M_INIT;
use tile_backend::dsl::Body;
use tile_backend::ir::{Axis, BinaryOp, Expr, GmView, ParamId, Pipe, RoundMode, UnaryOp};

/// The event of the mask tile's hand-written V <-> MTE2 flags.
const MASK_EV: u8 = 0;
/// The event of `p_nz`'s hand-written MTE3 <-> V flags.
const P_EV: u8 = 0;

/// Appends the vector program of the flash kernel `k` to `v`.
pub(super) fn body(v: &mut Body<'_>, k: &FlashKernel<'_>) {
    let cfg = k.cfg;
    let (ts, tkv, ns, dv) = (cfg.ts, cfg.tkv, cfg.ns, cfg.dv);
    let h = ts / 2;
    let nns = cfg.vp() / ns;
    let st = k.stats;
    let p = |id: ParamId| Expr::Param(id);
    let o_off = k.field(v, Desc::OOff);
    let lse_off = k.field(v, Desc::LseOff);
    let nq = k.field(v, Desc::Nq);
    let kv_end = k.field(v, Desc::KvEnd);
    let diag = k.field(v, Desc::Diag);
    let iters = v.let_("iters", kv_end.clone().ceil_div(tkv as i64));
    // The first key this AIV's first query cannot see, relative to key 0 of the sequence.
    let diag = v.let_("diag_mine", diag + Expr::SubBlockIdx * h);
    v.set_validshape(k.s_ub, tkv, h);
    for t in [st.m, st.l, st.mc, st.lc, st.alpha, st.lse] {
        v.set_validshape(t, 1, h);
    }
    v.set_validshape(st.alpha_col, h, 1);
    v.set_validshape(st.l_col, h, 1);
    v.set_validshape(k.pv_ub, h, ns);
    v.fill(st.m, M_INIT);
    v.fill(st.l, 0.0);
    for j in 0..nns {
        v.set_validshape(k.o_t.at(j), h, ns);
        v.fill(k.o_t.at(j), 0.0);
    }
    let mut step = |b: &mut Body<'_>, it: Expr, slot: u64| {
        let j0 = b.let_("j0", it * tkv);
        let nv = b.let_("nv", (kv_end.clone() - j0).min(tkv as i64));
        b.pop(k.ch_s);
        b.muls(k.s_ub, k.s_ub, k.sp.scale);
        // Keys past kv_end: -inf.
        b.if_(Expr::Var(nv).lt(tkv), |t| {
            t.set_validshape(k.s_ub, nv, h);
            t.fillpad(k.s_ub);
            t.set_validshape(k.s_ub, tkv, h);
        });
        // A tile crossing the causal diagonal: add the staircase of the mask band.
        let delta = b.let_("delta", Expr::Var(diag) - j0);
        b.if_(Expr::Var(delta).lt(tkv as i64 - 1), |t| {
            let clamped = Expr::Var(delta).max(-(h as i64)).min(tkv as i64 - 1);
            let row0 = Expr::from(tkv as i64 - 1) - clamped;
            t.wait_flag(Pipe::V, Pipe::Mte2, MASK_EV);
            t.load(k.mask_ub, GmView::nd(k.mask, row0 * h, tkv, h, h));
            t.set_flag(Pipe::Mte2, Pipe::V, MASK_EV);
            t.wait_flag(Pipe::Mte2, Pipe::V, MASK_EV);
            t.add(k.s_ub, k.s_ub, k.mask_ub);
            t.set_flag(Pipe::V, Pipe::Mte2, MASK_EV);
        });
        // Online softmax down the columns (one per query).
        b.col_max(st.mc, k.s_ub);
        b.max(st.mc, st.mc, st.m);
        b.binary(BinaryOp::Sub, st.alpha, st.m, st.mc);
        b.exp(st.alpha, st.alpha);
        b.max(st.m, st.m, st.mc);
        b.broadcast(BinaryOp::Sub, Axis::Col, k.s_ub, k.s_ub, st.mc);
        b.exp(k.s_ub, k.s_ub);
        b.col_sum(st.lc, k.s_ub);
        b.mul(st.l, st.l, st.alpha);
        b.add(st.l, st.l, st.lc);
        // P: cast, ND -> NZ, into this AIV's column half of P^T in L1.
        match k.p_ub {
            Some(pu) => {
                b.cast(pu, k.s_ub, RoundMode::Rint);
                b.release(k.ch_s);
                b.wait_flag(Pipe::Mte3, Pipe::V, P_EV);
                b.mov(k.p_nz, pu);
            }
            None => {
                b.wait_flag(Pipe::Mte3, Pipe::V, P_EV);
                b.mov(k.p_nz, k.s_ub);
                b.release(k.ch_s);
            }
        }
        b.set_flag(Pipe::V, Pipe::Mte3, P_EV);
        b.wait_flag(Pipe::V, Pipe::Mte3, P_EV);
        b.acquire(k.ch_p);
        b.mov(k.p_l1.at(slot), k.p_nz)
            .offset(0, Expr::SubBlockIdx * h);
        b.set_flag(Pipe::Mte3, Pipe::V, P_EV);
        b.push(k.ch_p);
        // O = O alpha + P V (alpha per query: a row broadcast over O's rows).
        for j in 0..nns {
            b.broadcast(
                BinaryOp::Mul,
                Axis::Row,
                k.o_t.at(j),
                k.o_t.at(j),
                st.alpha_col,
            );
            b.pop(k.ch_pv);
            b.add(k.o_t.at(j), k.o_t.at(j), k.pv_ub);
            b.release(k.ch_pv);
        }
    };
    // mask_ub starts free; its flags are written by hand (a load under a runtime `if`).
    // p_nz likewise (MTE3 -> V: free again once its move to L1 has read it).
    v.set_flag(Pipe::V, Pipe::Mte2, MASK_EV);
    v.set_flag(Pipe::Mte3, Pipe::V, P_EV);
    ping_pong(v, Expr::Var(iters), &mut step);
    v.wait_flag(Pipe::V, Pipe::Mte2, MASK_EV);
    v.wait_flag(Pipe::Mte3, Pipe::V, P_EV);
    // Normalise; lse = m + ln l (a query with no key: l = 0 -> 1, o = 0, lse ~ M_INIT).
    v.binary_scalar(BinaryOp::Max, st.l, st.l, 1.0);
    for j in 0..nns {
        v.broadcast(BinaryOp::Div, Axis::Row, k.o_t.at(j), k.o_t.at(j), st.l_col);
    }
    v.unary(UnaryOp::Ln, st.lse, st.l);
    v.add(st.lse, st.lse, st.m);
    let mine = v.let_("mine", (nq - Expr::SubBlockIdx * h).min(h as i64).max(0));
    v.if_(Expr::Var(mine).gt(0), |t| {
        let row0 = t.let_("row0", o_off + Expr::SubBlockIdx * h * p(k.sp.o_rs));
        for j in 0..nns {
            let cols = (dv - j * ns).min(ns);
            let dst = GmView::nd(k.out, Expr::Var(row0) + j * ns, mine, cols, p(k.sp.o_rs));
            let o = k.o_t.at(j);
            match k.o_cast {
                Some(oc) => {
                    t.set_validshape(oc, mine, cols);
                    t.set_validshape(o.clone(), mine, cols);
                    t.cast(oc, o, RoundMode::Rint);
                    t.store(dst, oc);
                }
                None => {
                    t.set_validshape(o.clone(), mine, cols);
                    t.store(dst, o);
                }
            }
        }
        t.set_validshape(st.lse, 1, mine);
        t.store(
            GmView::nd(k.lse, lse_off + Expr::SubBlockIdx * h, 1, mine, mine),
            st.lse,
        );
    });
}
