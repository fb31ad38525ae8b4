//! The vector program of `attn_split` (see the parent module's docs): the online softmax over
//! each chunk's scores, P back to the cube (channel P), O accumulated from P V (channel PV),
//! and the split's normalised partial result.

use super::{SplitKernel, M_INIT};
use tile_backend::dsl::Body;
use tile_backend::ir::{Axis, BinaryOp, Expr, GmView, ParamId, Pipe, RoundMode, UnaryOp};

/// Appends the vector program of the split kernel `k` to `v`.
pub(super) fn body(v: &mut Body<'_>, k: &SplitKernel<'_>) {
    let SplitKernel {
        sp,
        chunk,
        ns,
        v_dim,
        r,
        nns,
        heads,
        pbufs,
        o_ws,
        lse_ws,
        p_l1,
        s_ub,
        p_nz,
        m,
        l,
        mc,
        lc,
        alpha,
        lse_t,
        o_t,
        pv_ub,
        p_ub,
        ch_s,
        ch_p,
        ch_pv,
        ..
    } = *k;
    let p = |id: ParamId| Expr::Param(id);
    let (split, _ht, bi, cnt, c0, iters, h0, hv) = k.coords(v);
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
}
