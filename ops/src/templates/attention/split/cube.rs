//! The cube program of `attn_split` (see the parent module's docs): Q K^T per K slice, the
//! score handoff (channel S), P V per V slice and its handoff (channel PV).

use super::shared::SplitKernel;
use crate::templates::common::ping_pong;
use tile_backend::dsl::{Body, Gather};
use tile_backend::ir::{Expr, GmView, ParamId, Pipe, TileId};

/// Appends the cube program of the split kernel `k` to `c`.
pub(super) fn body(c: &mut Body<'_>, k: &SplitKernel<'_>) {
    let SplitKernel {
        cfg,
        sp,
        chunk,
        ks,
        ns,
        dp,
        dqk,
        nks,
        nns,
        heads,
        bufs,
        pbufs,
        q,
        kv,
        idx,
        bt,
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
        pv_ub,
        ch_s,
        ch_p,
        ch_pv,
        ..
    } = *k;
    let p = |id: ParamId| Expr::Param(id);
    use Pipe::{Fix, Mte1, Mte2, M as Mm};
    // Hand-written (see "Sync ownership" in the module docs): the gathered L1 tiles (MTE1 <->
    // MTE2, one event per buffer; events 2, 3 for Q) and the Acc slots (FIX <-> M, events 0,
    // 1 for `s_acc`, 2, 3 for `pv_acc`). Every buffer starts free: the first wait of each event
    // pairs with these sets. The L0 slots' flags come from the sync pass. With several work
    // items per block, the sets come before the item loop and the drains after it.
    let buffer_flags = |c: &mut Body<'_>, set: bool| {
        let flag = |c: &mut Body<'_>, src, dst, e| {
            if set {
                c.set_flag(src, dst, e);
            } else {
                c.wait_flag(src, dst, e);
            }
        };
        for e in 0..bufs as u8 {
            flag(c, Mte1, Mte2, e);
        }
        for e in 0..2u8 {
            flag(c, Fix, Mm, e);
            flag(c, Fix, Mm, 2 + e);
        }
    };
    let preset = |c: &mut Body<'_>| buffer_flags(c, true);
    let drain = |c: &mut Body<'_>| buffer_flags(c, false);
    let one_item = cfg.ipb <= 1;
    // Several items: the sync pass pre-sets and drains its L0-slot pairs around each item's
    // chunk loop, and something must order the next item's pre-sets (on M, MTE1) after this
    // item's final waits (on MTE1, FIX). A hand-written chain does, leaving MTE2 free to start
    // the next item's loads: MTE1 -> FIX (event `ITEM_EV`) after MTE1's final waits, then,
    // after FIX's, FIX -> M (event 4, beside the Acc slots' 0..3) and FIX -> MTE1 (`ITEM_EV`),
    // which M and MTE1 wait for before the next item. (No MTE1 -> M pair: narrow slices need
    // all 8 of those ids for the pass's L0 slots.) Each item's two waits pair with the sets
    // before the loop or at the end of the previous item; the last sets are drained after it.
    const ITEM_EV: u8 = 7;
    let item_sets = |c: &mut Body<'_>| {
        c.set_flag(Fix, Mm, 4);
        c.set_flag(Fix, Mte1, ITEM_EV);
    };
    let item_waits = |c: &mut Body<'_>| {
        c.wait_flag(Fix, Mm, 4);
        c.wait_flag(Fix, Mte1, ITEM_EV);
    };
    if !one_item {
        preset(c);
        item_sets(c);
    }
    // Q's L1 buffer `qs`: with two (`AttnCfg::qbufs`), the item loop is unrolled by two
    // and each half has its own, so the next item's Q load need not wait for this item's last
    // Q K^T moves.
    let item_body = |c: &mut Body<'_>, item: Expr, qs: u64| {
        let q_l1 = q_l1.at(qs);
        if !one_item {
            item_waits(c);
        }
        let (_split, ht, bi, cnt, c0, iters, h0, hv) = k.coords(c, item);
        c.set_validshape(q_l1.clone(), hv, dqk);
        c.load(
            q_l1.clone(),
            GmView::nd(q, (bi * heads + h0) * dqk, hv, dqk, dqk),
        );
        c.fillpad(q_l1.clone());
        // Q loaded: event 2 (3 for the second Q buffer, so that the next item's Q load, which
        // waits only for its own buffer, cannot set this one's flag again before MTE1 waits).
        let qev = 2 + qs as u8;
        c.set_flag(Mte2, Mte1, qev);
        if one_item {
            preset(c);
        }
        c.wait_flag(Mte2, Mte1, qev);
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
            // S = Q K^T, K-sliced; L0 slot xs = stage % bufs (its flags from the sync pass).
            b.set_validshape(kt_l1.at(kslot), dp, chunk);
            for j in 0..nks {
                let xs = j % bufs;
                let (ql, kl) = (q_l0.at(xs), kt_l0.at(xs));
                b.mov(ql.clone(), q_l1.clone()).offset(0, j * ks);
                b.mov(kl.clone(), kt_l1.at(kslot)).offset(j * ks, 0);
                if j == 0 {
                    b.wait_flag(Fix, Mm, ev);
                    b.matmul(s_acc.at(slot), ql, kl);
                } else {
                    b.matmul_acc(s_acc.at(slot), ql, kl);
                }
            }
            b.set_flag(Mm, Fix, ev);
            b.acquire(ch_s);
            b.wait_flag(Mm, Fix, ev);
            b.set_fixpipe_validshape(s_ub, (cfg.th, chunk), cfg.acc_mode());
            b.mov(s_ub, s_acc.at(slot)).mode(cfg.acc_mode());
            b.set_flag(Fix, Mm, ev);
            b.push(ch_s);
            // O_j = P V_j.
            b.pop(ch_p);
            b.mov(p_l0, p_l1.at(slot % pbufs));
            b.release(ch_p);
            for j in 0..nns {
                // V's L0 slot and PV's Acc slot (FIX <-> M events 2 + y).
                let xs = (nks + j) % bufs;
                let ys = (nks + j) % 2;
                let y = ys as u8;
                let vl = v_l0.at(xs);
                b.mov(vl.clone(), v_l1.at(kslot)).offset(0, j * ns);
                if j == nns - 1 {
                    b.set_flag(Mte1, Mte2, kev);
                }
                b.wait_flag(Fix, Mm, 2 + y);
                b.matmul(pv_acc.at(ys), p_l0, vl);
                b.set_flag(Mm, Fix, 2 + y);
                b.acquire(ch_pv);
                b.wait_flag(Mm, Fix, 2 + y);
                b.set_fixpipe_validshape(pv_ub, (cfg.th, ns), cfg.acc_mode());
                b.mov(pv_ub, pv_acc.at(ys)).mode(cfg.acc_mode());
                b.set_flag(Fix, Mm, 2 + y);
                b.push(ch_pv);
            }
        };
        ping_pong(c, Expr::Var(iters), &mut step);
        if one_item {
            drain(c);
        } else {
            c.set_flag(Mte1, Fix, ITEM_EV);
            c.wait_flag(Mte1, Fix, ITEM_EV);
            item_sets(c);
        }
    };
    if cfg.qbufs > 1 {
        ping_pong(c, cfg.ipb.into(), &mut |c, kk, qs| {
            item_body(c, Expr::BlockIdx * cfg.ipb + kk, qs)
        });
    } else {
        k.for_items(c, &mut |c, item| item_body(c, item, 0));
    }
    if !one_item {
        item_waits(c);
        drain(c);
    }
}
