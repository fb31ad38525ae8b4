//! The vector program of `flash_dn` (see `mod.rs`): the online softmax down the columns of each
//! KV tile's `[tkv, H]` slice of S^T (one column per query), P back to the cube (channel P),
//! O accumulated from P V (channel PV), the final divide and lse. The P-writing variant runs
//! the statistics pass, then normalises each recomputed tile and stores it.

use super::cfg::Desc;
use super::shared::FlashKernel;
use crate::templates::common::{aiv0, ping_pong, M_INIT};
use tile_backend::dsl::Body;
use tile_backend::ir::{
    Axis, BinaryOp, Expr, GmView, Pipe, ReduceOp, RoundMode, TileRef, UnaryOp, VarId,
};

/// The event of the mask tile's hand-written V <-> MTE2 flags.
const MASK_EV: u8 = 0;
/// The event of the wide tiling's hand-written MTE3 -> V flags on the mask tile's bytes,
/// which also hold P's NZ copy and the output cast (mod.rs): the vector pipe waits once per KV
/// tile (and once per row end) for MTE3 to have read them, whether or not the tile loads a
/// mask, so the sets and waits pair up outside the runtime `if`; a mask load then waits for
/// the vector pipe (V -> MTE2, set just before it).
const REGION_EV: u8 = 0;

/// Appends the vector program of the flash kernel `k` to `v`. In the single-vector-core
/// fallback both AIVs run it, but only AIV0 holds data: AIV1 skips every op that reads what
/// the cube handed over ([`aiv0`]) and stores nothing (`mine` = 0), and keeps the channel
/// protocol and the hand-written flags in step (the sync pass binds each channel op to the
/// pipe of its neighbouring data op, so one program serves both).
pub(super) fn body(v: &mut Body<'_>, k: &FlashKernel<'_>) {
    // mask_ub starts free; its flags are written by hand (a load under a runtime `if`, whose
    // pair the sync pass would hoist out of it). The pass owns p_nz's and the stored P's.
    if k.cfg.wide {
        v.set_flag(Pipe::Mte3, Pipe::V, REGION_EV);
    } else {
        v.set_flag(Pipe::V, Pipe::Mte2, MASK_EV);
    }
    k.for_each_row(v, |v, row| query_tile(v, k, &row));
    if k.cfg.wide {
        v.wait_flag(Pipe::Mte3, Pipe::V, REGION_EV);
    } else {
        v.wait_flag(Pipe::V, Pipe::Mte2, MASK_EV);
    }
}

/// The query tile of descriptor row `row`.
fn query_tile(v: &mut Body<'_>, k: &FlashKernel<'_>, row: &Expr) {
    let cfg = k.cfg;
    let (tkv, ns) = (cfg.tkv, cfg.ns);
    let h = cfg.h();
    let nns = cfg.vp() / ns;
    let st = k.stats;
    let o_off = k.field(v, row, Desc::OOff);
    let lse_off = k.field(v, row, Desc::LseOff);
    let nq = k.field(v, row, Desc::Nq);
    let kv_end = k.field(v, row, Desc::KvEnd);
    let diag = k.field(v, row, Desc::Diag);
    let iters = v.let_("iters", kv_end.clone().ceil_div(tkv as i64));
    // The last key this AIV's first query sees, relative to key 0 of the sequence.
    let diag = v.let_("diag_mine", diag + cfg.first_query());
    let mine = (nq - cfg.first_query()).min(h as i64).max(0);
    // The fallback's AIV1 owns no query.
    let mine = v.let_(
        "mine",
        if cfg.single {
            mine * (Expr::from(1) - Expr::SubBlockIdx)
        } else {
            mine
        },
    );
    for x in 0..cfg.s_bufs {
        v.set_validshape(k.s(x), tkv, h);
    }
    if let Some(pu) = k.p_ub {
        v.set_validshape(pu, tkv, h);
    }
    if cfg.wide {
        // Views of planned bytes (mod.rs): their valid shapes start unset.
        v.set_validshape(k.mask_ub, tkv, h);
        v.set_validshape(k.p_nz, tkv, h);
    }
    for t in [st.m, st.l, st.mc, st.lc, st.lse, st.low_tile, st.low] {
        v.set_validshape(t, 1, h);
    }
    for x in 0..2 {
        v.set_validshape(st.alpha.at(x), 1, h);
        v.set_validshape(st.alpha_col.at(x), h, 1);
    }
    v.set_validshape(st.l_col, h, 1);
    v.set_validshape(k.pv_ub, h, ns);
    v.fill(st.m, M_INIT);
    v.fill(st.l, 0.0);
    v.fill(st.low, 0.0);
    if !cfg.write_p {
        for j in 0..nns {
            v.set_validshape(k.o_t.at(j), h, ns);
            v.fill(k.o_t.at(j), 0.0);
        }
    }
    // KV tile `it` (slot `slot`): its softmax, then P to the cube (or, for write_p, the scores
    // are released: the statistics pass).
    let tile = |b: &mut Body<'_>, it: Expr, slot: u64| {
        let j0 = b.let_("j0", it * tkv);
        let nv = b.let_("nv", (kv_end.clone() - j0).min(tkv as i64));
        softmax_tile(b, k, (diag, j0, nv), slot);
        if !cfg.write_p {
            p_out(b, k, slot);
        } else {
            b.release(k.ch_s(slot));
        }
    };
    if cfg.write_p {
        ping_pong(v, Expr::Var(iters), &mut |b, it, slot| tile(b, it, slot));
    } else {
        // One tile ahead: tile t + 1's softmax and P run before tile t's O update, so the
        // vector cores work while the cube computes P V of tile t (and S of tile t + 2).
        // (Tile t + 1 is not under its own `if`: the loop runs to the last tile but one, and
        // the last O update follows it, its alpha slot chosen by the parity.)
        v.if_(Expr::Var(iters).gt(0), |b| {
            tile(b, Expr::from(0), 0);
            ping_pong(b, Expr::Var(iters) - 1, &mut |b, it, slot| {
                if cfg.wide {
                    // Tile t's first Dv slice between tile t + 1's softmax and its P: the
                    // Fixpipe, in order, then moves P V's next slice (one P V buffer) before
                    // tile t + 2's scores wait for this P's release, not after.
                    let it = it + 1;
                    let j0 = b.let_("j0", it * tkv);
                    let nv = b.let_("nv", (kv_end.clone() - j0).min(tkv as i64));
                    softmax_tile(b, k, (diag, j0, nv), 1 - slot);
                    o_update_slices(b, k, slot, false, 0..1);
                    p_out(b, k, 1 - slot);
                    o_update_slices(b, k, slot, false, 1..nns);
                } else {
                    tile(b, it + 1, 1 - slot);
                    o_update(b, k, slot, false);
                }
            });
            let last_odd = ((Expr::Var(iters) - 1) % 2).eq_(1);
            b.if_else(
                last_odd,
                |b| o_update(b, k, 1, true),
                |b| o_update(b, k, 0, true),
            );
        });
    }
    // The last tile's maxima are in m_tile when its slot is 0 (online_softmax): into m.
    let last_even = ((Expr::Var(iters) - 1) % 2).eq_(0);
    v.if_(last_even, |b| {
        aiv0(b, k.cfg.single, |b| b.muls(st.m, st.mc, 1.0))
    });
    // Normalise; lse = m + ln l (a query with no key: l = 0 -> 1, o = 0, lse ~ M_INIT), with
    // l = max(l, 1) + 0 * (low + l): NaN when a score the query saw was not finite, whatever
    // max does with NaN (docs/ops.md, "Non-finite data").
    v.add(st.low, st.low, st.l);
    v.muls(st.low, st.low, 0.0);
    v.binary_scalar(BinaryOp::Max, st.l, st.l, 1.0);
    v.add(st.l, st.l, st.low);
    if cfg.write_p {
        write_p(v, k, &kv_end, iters, o_off.clone(), mine);
    } else {
        for j in 0..nns {
            v.broadcast(BinaryOp::Div, Axis::Row, k.o_t.at(j), k.o_t.at(j), st.l_col);
        }
    }
    v.unary(UnaryOp::Ln, st.lse, st.l);
    v.add(st.lse, st.lse, st.m);
    if cfg.wide {
        // The output cast goes into the mask tile's bytes: after the last P's move out. The
        // stores below may be skipped (an AIV with no query), so MTE3 is handed the order
        // (V -> MTE3) before them: every later set on MTE3, this one's at the row's end and
        // the sync pass's, then follows the vector pipe's waits here.
        v.wait_flag(Pipe::Mte3, Pipe::V, REGION_EV);
        v.set_flag(Pipe::V, Pipe::Mte3, REGION_EV);
        v.wait_flag(Pipe::V, Pipe::Mte3, REGION_EV);
    }
    v.if_(Expr::Var(mine).gt(0), |t| {
        if !cfg.write_p {
            store_o(t, k, o_off, mine);
        }
        t.set_validshape(st.lse, 1, mine);
        t.store(
            GmView::nd(k.lse, lse_off + cfg.first_query(), 1, mine, mine),
            st.lse,
        );
    });
    if cfg.wide {
        v.set_flag(Pipe::Mte3, Pipe::V, REGION_EV);
    }
}

/// One KV tile's scores (channel S) into the running statistics: `s` ends as
/// `exp(scale s - m_new)` with keys past `nv` and past the causal diagonal at 0, `alpha` as
/// `exp(m_old - m_new)`.
fn softmax_tile(
    b: &mut Body<'_>,
    k: &FlashKernel<'_>,
    (diag, j0, nv): (VarId, VarId, VarId),
    slot: u64,
) {
    let (tkv, h) = (k.cfg.tkv, k.cfg.h());
    let st = k.stats;
    let s = k.s(slot);
    if k.cfg.wide {
        b.wait_flag(Pipe::Mte3, Pipe::V, REGION_EV);
    }
    b.pop(k.ch_s(slot));
    aiv0(b, k.cfg.single, |b| {
        b.muls(s.clone(), s.clone(), k.sp.scale)
    });
    let delta = b.let_("delta", Expr::Var(diag) - j0);

    // The lowest score each query sees (non-finite policy): off the diagonal, every row of the
    // tile before the tail is masked (the tail's rows hold q . 0: 0, or NaN when q is not
    // finite, and such a query sees a key of the tile).
    b.if_(Expr::Var(delta).ge(tkv as i64 - 1), |t| {
        aiv0(t, k.cfg.single, |t| {
            t.reduce(ReduceOp::Min, Axis::Col, st.low_tile, s.clone())
        })
    });
    // Keys past kv_end: -inf.
    b.if_(Expr::Var(nv).lt(tkv), |t| {
        t.set_validshape(s.clone(), nv, h);
        aiv0(t, k.cfg.single, |t| t.fillpad(s.clone()));
        t.set_validshape(s.clone(), tkv, h);
    });
    // A tile crossing the causal diagonal, with one load of the keep band (+inf where a query
    // sees the key, -inf where it does not): s = min(s, keep) masks, overwriting a hidden
    // key's score whatever it holds (an add of -inf would turn +inf or NaN there into NaN);
    // then -keep (the low band) gives the column minimum of the seen scores as
    // max(-keep, s) (a hidden key's -inf meets +inf there).
    b.if_(Expr::Var(delta).lt(tkv as i64 - 1), |t| {
        masked(t, k, &s, delta)
    });
    aiv0(b, k.cfg.single, |b| online_softmax(b, k, slot));
}

/// The causal mask of a tile crossing the diagonal (`delta`: the last key, relative to the
/// tile's first, that this AIV's first query sees), from one load of the keep band (see
/// [`softmax_tile`]).
fn masked(t: &mut Body<'_>, k: &FlashKernel<'_>, s: &TileRef, delta: VarId) {
    let (tkv, h) = (k.cfg.tkv, k.cfg.h());
    let st = k.stats;
    let clamped = Expr::Var(delta).max(-(h as i64)).min(tkv as i64 - 1);
    let row0 = t.let_("row0", Expr::from(tkv as i64 - 1) - clamped);
    let at = Expr::Var(row0) * h;
    if k.cfg.wide {
        // The region is free once the vector pipe has waited for MTE3 (REGION_EV).
        t.set_flag(Pipe::V, Pipe::Mte2, MASK_EV);
    }
    t.wait_flag(Pipe::V, Pipe::Mte2, MASK_EV);
    t.load(k.mask_ub, GmView::nd(k.mask, at, tkv, h, h));
    t.set_flag(Pipe::Mte2, Pipe::V, MASK_EV);
    t.wait_flag(Pipe::Mte2, Pipe::V, MASK_EV);
    aiv0(t, k.cfg.single, |t| {
        t.binary(BinaryOp::Min, s.clone(), s.clone(), k.mask_ub);
        t.unary(UnaryOp::Neg, k.mask_ub, k.mask_ub);
        t.max(k.mask_ub, k.mask_ub, s.clone());
        t.reduce(ReduceOp::Min, Axis::Col, st.low_tile, k.mask_ub);
    });
    if !k.cfg.wide {
        t.set_flag(Pipe::V, Pipe::Mte2, MASK_EV);
    }
}

/// `low = min(low, low_tile)`, then the online softmax down the columns of `s_ub` (one per
/// query): the new maxima, `alpha`, `s = exp(s - m_new)` and the running sums.
fn online_softmax(b: &mut Body<'_>, k: &FlashKernel<'_>, slot: u64) {
    let st = k.stats;
    let s = k.s(slot);
    let alpha = st.alpha.at(slot);
    b.binary(BinaryOp::Min, st.low, st.low, st.low_tile);
    // The running maxima alternate between m and m_tile (old and new swap with the slot), so
    // no copy of the new maxima is needed.
    let (new, old) = if slot == 0 {
        (st.mc, st.m)
    } else {
        (st.m, st.mc)
    };
    b.col_max(new, s.clone());
    b.max(new, new, old);
    b.binary(BinaryOp::Sub, alpha.clone(), old, new);
    b.exp(alpha.clone(), alpha.clone());
    b.broadcast(BinaryOp::Sub, Axis::Col, s.clone(), s.clone(), new);
    b.exp(s.clone(), s.clone());
    b.col_sum(st.lc, s.clone());
    b.mul(st.l, st.l, alpha);
    b.add(st.l, st.l, st.lc);
}

/// P (cast, ND -> NZ) into this AIV's column half of P^T in L1 slot `slot` (channel P).
fn p_out(b: &mut Body<'_>, k: &FlashKernel<'_>, slot: u64) {
    match k.p_ub {
        Some(pu) => {
            aiv0(b, k.cfg.single, |b| b.cast(pu, k.s(slot), RoundMode::Rint));
            // With the wide tiling P lies in the score buffer's bytes: released once copied.
            if !k.cfg.wide {
                b.release(k.ch_s(slot));
            }
            aiv0(b, k.cfg.single, |b| {
                b.mov(k.p_nz, pu);
            });
            if k.cfg.wide {
                b.release(k.ch_s(slot));
            }
        }
        None => {
            aiv0(b, k.cfg.single, |b| {
                b.mov(k.p_nz, k.s(slot));
            });
            b.release(k.ch_s(slot));
        }
    }
    b.acquire(k.ch_p);
    aiv0(b, k.cfg.single, |b| {
        if k.cfg.single {
            b.mov(k.p_l1.at(slot), k.p_nz);
        } else {
            b.mov(k.p_l1.at(slot), k.p_nz)
                .offset(0, k.cfg.first_query());
        }
    });
    if k.cfg.wide {
        b.set_flag(Pipe::Mte3, Pipe::V, REGION_EV);
    }
    b.push(k.ch_p);
}

/// `O = O alpha + P V` of the KV tile in slot `slot`, per Dv slice (channel PV; alpha seen as
/// the DN column [H, 1]: a row broadcast over O's rows). After the `last` tile's, `O += 0 O`
/// (±inf from a V value turns NaN like a NaN one), with the P V slice as the scratch while
/// this AIV still holds it.
fn o_update(b: &mut Body<'_>, k: &FlashKernel<'_>, slot: u64, last: bool) {
    let nns = k.cfg.vp() / k.cfg.ns;
    o_update_slices(b, k, slot, last, 0..nns);
}

/// [`o_update`] of the Dv slices `slices` only.
fn o_update_slices(
    b: &mut Body<'_>,
    k: &FlashKernel<'_>,
    slot: u64,
    last: bool,
    slices: std::ops::Range<u64>,
) {
    for j in slices {
        let o = k.o_t.at(j);
        aiv0(b, k.cfg.single, |b| {
            b.broadcast(
                BinaryOp::Mul,
                Axis::Row,
                o.clone(),
                o.clone(),
                k.stats.alpha_col.at(slot),
            )
        });
        b.pop(k.ch_pv);
        aiv0(b, k.cfg.single, |b| {
            b.add(o.clone(), o.clone(), k.pv_ub);
            if last {
                b.muls(k.pv_ub, o.clone(), 0.0);
                b.add(o.clone(), o.clone(), k.pv_ub);
            }
        });
        b.release(k.ch_pv);
    }
}

/// The `write_p` pass: each KV tile's scores again (channel S), `P = exp(scale s - m) / l`
/// (column broadcasts), stored as this AIV's `[nv, mine]` block of P^T (row stride `o_rs`).
fn write_p(
    v: &mut Body<'_>,
    k: &FlashKernel<'_>,
    kv_end: &Expr,
    iters: VarId,
    o_off: Expr,
    mine: VarId,
) {
    let (tkv, h) = (k.cfg.tkv, k.cfg.h());
    let st = k.stats;
    // 1 / l into l_tile.
    v.fill(st.lc, 1.0);
    v.binary(BinaryOp::Div, st.lc, st.lc, st.l);
    let mut step = |b: &mut Body<'_>, it: Expr, slot: u64| {
        let s = k.s(slot);
        let pt = k.p_ub.map_or(s.clone(), TileRef::from);
        let j0 = b.let_("j0", it * tkv);
        let nv = b.let_("nv", (kv_end.clone() - j0).min(tkv as i64));
        b.pop(k.ch_s(slot));
        aiv0(b, k.cfg.single, |b| {
            b.muls(s.clone(), s.clone(), k.sp.scale);
            b.broadcast(BinaryOp::Sub, Axis::Col, s.clone(), s.clone(), st.m);
            b.exp(s.clone(), s.clone());
            b.broadcast(BinaryOp::Mul, Axis::Col, s.clone(), s.clone(), st.lc);
        });
        if let Some(pu) = k.p_ub {
            aiv0(b, k.cfg.single, |b| b.cast(pu, s.clone(), RoundMode::Rint));
            b.release(k.ch_s(slot));
        }
        b.if_(Expr::Var(mine).gt(0), |t| {
            t.set_validshape(pt.clone(), nv, mine);
            let o_rs = Expr::Param(k.sp.o_rs);
            let off = o_off.clone() + Expr::Var(j0) * o_rs.clone() + k.cfg.first_query();
            t.store(GmView::nd(k.out, off, nv, mine, o_rs), pt.clone());
            t.set_validshape(pt, tkv, h);
        });
        if k.p_ub.is_none() {
            // f32: the stored tile is s_ub itself, free for the next scores once stored.
            b.release(k.ch_s(slot));
        }
    };
    ping_pong(v, Expr::Var(iters), &mut step);
}

/// O's rows of this AIV's `mine` queries (cast to the data dtype) to `out`.
fn store_o(t: &mut Body<'_>, k: &FlashKernel<'_>, o_off: Expr, mine: VarId) {
    let (ns, dv) = (k.cfg.ns, k.cfg.dv);
    let nns = k.cfg.vp() / ns;
    let o_rs = Expr::Param(k.sp.o_rs);
    let row0 = t.let_("row0", o_off + k.cfg.first_query() * o_rs.clone());
    for j in 0..nns {
        let cols = (dv - j * ns).min(ns);
        let dst = GmView::nd(k.out, Expr::Var(row0) + j * ns, mine, cols, o_rs.clone());
        let o = k.o_t.at(j);
        t.set_validshape(o.clone(), mine, cols);
        match k.o_cast {
            Some(oc) => {
                let oc = oc.at(j % k.cfg.o_cast_bufs());
                t.set_validshape(oc.clone(), mine, cols);
                t.cast(oc.clone(), o, RoundMode::Rint);
                t.store(dst, oc);
            }
            None => {
                t.store(dst, o);
            }
        }
    }
}
