//! The vector program of `attn_split` (see the parent module's docs): the online softmax over
//! each chunk's scores, P back to the cube (channel P), O accumulated from P V (channel PV),
//! and the split's normalised partial result.

use super::cfg::Values;
use super::shared::SplitKernel;
use crate::templates::common::{aiv0, M_INIT};
use tile_backend::dsl::Body;
use tile_backend::ir::{Axis, BinaryOp, Expr, GmView, ParamId, ReduceOp, RoundMode, UnaryOp};

/// Appends the vector program of the split kernel `k` to `v`.
///
/// Non-finite data (docs/ops.md, "Non-finite data"): NaN or ±inf in q or in a gathered K row
/// makes scores of the row non-finite, and the row's partial `o` and `lse` must then be NaN
/// whatever the vector unit's max does with NaN. The online softmax alone does not ensure it:
/// a NaN score makes `l` NaN, but `max(l, 1)` may drop it, and a score of -inf is a weight of 0.
/// So each chunk takes its row minimum before the tail is masked with -inf (the tail's columns
/// are `q . 0`: 0, or NaN when q is not finite) and keeps the lowest score in `low`; at the end
/// `l = max(l, 1) + 0 * (low + l)`, which is `max(l, 1)` for finite scores (`low + l` cannot
/// overflow) and NaN otherwise, and `o / l` and `lse = m + ln l` follow. With a separate V
/// cache (dense), a non-finite V value reaches only its column of `o`: `o += 0 * o` turns ±inf
/// there into NaN too.
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
        l,
        mc,
        lc,
        alpha,
        lse_t,
        rows,
        o_t,
        pv_ub,
        p_ub,
        ch_s,
        ch_p,
        ch_pv,
        ..
    } = *k;
    let single = k.cfg.single;
    k.for_items(v, &mut |v, item| {
        let p = |id: ParamId| Expr::Param(id);
        let (split, _ht, bi, cnt, c0, iters, h0, hv) = k.coords(v, item);
        aiv0(v, single, |v| {
            v.set_validshape(s_ub, r, chunk);
            for t in rows.all() {
                v.set_validshape(t, 1, r);
            }
            v.set_validshape(pv_ub, r, ns);
            v.fill(rows.m, M_INIT);
            v.fill(rows.l, 0.0);
            v.fill(rows.low, 0.0);
            for j in 0..nns {
                v.set_validshape(o_t.at(j), r, ns);
                v.fill(o_t.at(j), 0.0);
            }
        });
        v.for_range("c", 0, iters, 1, |b, it| {
            let t0 = (Expr::Var(c0) + it) * chunk;
            let nv = b.let_("nv", (Expr::Var(cnt) - t0).min(chunk));
            b.pop(ch_s);
            // m_chunk = max(m, rowmax s) is the new running max; P is made from it first, and
            // the statistics that only O and l need (alpha, m, l, low) follow the P handoff,
            // off the path the cube waits on.
            aiv0(b, single, |b| {
                b.muls(s_ub, s_ub, sp.scale);
                b.reduce(ReduceOp::Min, Axis::Row, rows.low_chunk, s_ub);
                b.if_(Expr::Var(nv).lt(chunk), |t| {
                    t.set_validshape(s_ub, r, nv);
                    t.fillpad(s_ub);
                    t.set_validshape(s_ub, r, chunk);
                });
                b.row_max(mc, s_ub);
                b.max(rows.mc, rows.mc, rows.m);
                b.broadcast(BinaryOp::Sub, Axis::Row, s_ub, s_ub, mc);
                b.exp(s_ub, s_ub);
                b.row_sum(lc, s_ub);
            });
            match p_ub {
                Some(pu) => {
                    aiv0(b, single, |b| b.cast(pu, s_ub, RoundMode::Rint));
                    b.release(ch_s);
                    aiv0(b, single, |b| {
                        b.mov(p_nz, pu);
                    });
                }
                None => {
                    aiv0(b, single, |b| {
                        b.mov(p_nz, s_ub);
                    });
                    b.release(ch_s);
                }
            }
            b.acquire(ch_p);
            aiv0(b, single, |b| {
                b.mov(p_l1.at(it % pbufs), p_nz)
                    .offset(Expr::SubBlockIdx * r, 0);
            });
            b.push(ch_p);
            aiv0(b, single, |b| {
                b.binary(BinaryOp::Sub, rows.alpha, rows.m, rows.mc);
                b.exp(rows.alpha, rows.alpha);
                b.max(rows.m, rows.m, rows.mc);
                b.mul(rows.l, rows.l, rows.alpha);
                b.add(rows.l, rows.l, rows.lc);
                b.binary(BinaryOp::Min, rows.low, rows.low, rows.low_chunk_row);
            });
            for j in 0..nns {
                aiv0(b, single, |b| {
                    b.broadcast(BinaryOp::Mul, Axis::Row, o_t.at(j), o_t.at(j), alpha);
                });
                b.pop(ch_pv);
                aiv0(b, single, |b| b.add(o_t.at(j), o_t.at(j), pv_ub));
                b.release(ch_pv);
            }
        });
        // Normalise and write this split's partial result: l = max(l, 1) + 0 * (low + l).
        aiv0(v, single, |v| {
            v.add(rows.low, rows.low, rows.l);
            v.muls(rows.low, rows.low, 0.0);
            v.binary_scalar(BinaryOp::Max, rows.l, rows.l, 1.0);
            v.add(rows.l, rows.l, rows.low);
            for j in 0..nns {
                v.broadcast(BinaryOp::Div, Axis::Row, o_t.at(j), o_t.at(j), l);
                if k.cfg.values == Values::OwnCache {
                    // o - o * 0: o, or NaN where o is not finite; and +0 for a -0, as the
                    // merge's `0 + o * 1` would give (so a direct result needs no `o + 0`).
                    v.muls(pv_ub, o_t.at(j), 0.0);
                    v.binary(BinaryOp::Sub, o_t.at(j), o_t.at(j), pv_ub);
                }
            }
            v.unary(UnaryOp::Ln, rows.lse, rows.l);
            v.add(rows.lse, rows.lse, rows.m);
            // The direct result in the data dtype (`AttnCfg::direct`): o + 0 first unless done
            // above, as the merge's `acc = 0 + o * 1` (a -0 becomes +0), so the bits are the
            // merge's. Cast here, outside the `if` of the stores, like the writes of `o_t` (a V
            // write inside that `if` leaves AIV1, which holds no row of a narrow head tile,
            // with a lost MTE3 -> V signal).
            if let Some(oc) = k.o_cast {
                for j in 0..nns {
                    if k.cfg.values == Values::KeyPrefix {
                        v.binary_scalar(BinaryOp::Add, o_t.at(j), o_t.at(j), 0.0);
                    }
                    v.set_validshape(oc.at(j), r, ns);
                    v.cast(oc.at(j), o_t.at(j), RoundMode::Rint);
                }
            }
        });
        // AIV1 of the single-vector-core head tile owns no row (hv <= th = r): `mine` is 0.
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
                let dst = GmView::nd(o_ws, g * v_dim + j * ns, mine, cols, v_dim);
                match k.o_cast {
                    Some(oc) => {
                        t.set_validshape(oc.at(j), mine, cols);
                        t.store(dst, oc.at(j));
                    }
                    None => {
                        t.store(dst, o_t.at(j));
                    }
                }
            }
            t.set_validshape(lse_t, mine, 1);
            t.store(GmView::dn(lse_ws, g, mine, 1, 1), lse_t);
        });
    });
}
