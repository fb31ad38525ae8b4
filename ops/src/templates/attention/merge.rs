//! The merge kernel `attn_merge` (see the parent module's docs): combines the split kernel's
//! partial results.

use crate::templates::common::{ping_pong, round_up, store_in_dtype};
use tile_backend::dsl::{Body, KernelBuilder, Reinterpret};
use tile_backend::ir::{
    Axis, BinaryOp, DType, Expr, GmView, Kernel, Layout, MemSpace, PadValue, Pipe, TileId,
    TileType, UnaryOp,
};

/// Largest number of top-k splits the merge kernel takes (rows of its lse tile).
pub(crate) const MAX_SPLITS: u64 = 32;

/// Global rows each AIV of the merge kernel owns.
pub(crate) const MERGE_ROWS: u64 = 8;

/// Static shape of the merge kernel.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct MergeCfg {
    /// Output dtype.
    pub dtype: DType,
    /// Output columns.
    pub v_dim: u64,
    /// Whether a per-row sink is applied.
    pub sink: bool,
}

impl MergeCfg {
    /// The cache key: the configuration itself.
    pub fn key(&self) -> &Self {
        self
    }
}

/// Parts of `o_ws` the merge kernel loads under one flag (`MAX_PARTS_PER_LOAD` where UB has
/// room for two groups of `[MERGE_ROWS, vp]` f32 buffers beside the accumulator and the cast
/// output, fewer for wide rows).
fn parts_per_load(vp: u64) -> u64 {
    let tile = MERGE_ROWS * vp * 4;
    (MERGE_UB_BUDGET.saturating_sub(2 * tile) / (2 * tile)).clamp(1, MAX_PARTS_PER_LOAD)
}

/// Largest number of parts loaded under one flag.
const MAX_PARTS_PER_LOAD: u64 = 4;
/// UB bytes the merge kernel's part buffers, accumulator and cast output may take (of the
/// 240 KiB the planner hands out, leaving room for the lse and weight tiles).
const MERGE_UB_BUDGET: u64 = 200 * 1024;

/// Blocks to launch for `rows` global rows.
pub(crate) fn merge_blocks(rows: usize) -> usize {
    rows.div_ceil(2 * MERGE_ROWS as usize).max(1)
}

/// The merge kernel (see the module docs). Arguments: scalars `rows` (batch * heads) and
/// `splits` (i32); `o_ws [splits*rows, v_dim]` f32, `lse_ws [splits*rows]` f32, `fix [rows]`
/// f32 (+inf: empty row, else 0; added to the lse, so a NaN lse stays NaN whatever the vector
/// unit's max does with NaN), (`sink [rows]` f32), outputs `out [rows, v_dim]` (dtype) and
/// `lse [rows]` f32. Launch [`merge_blocks`] blocks.
///
/// NaN in a part (the split kernel's non-finite policy) reaches the result without relying on
/// `max`: `w_i = exp(NaN - M)` is NaN, so `s`, `lse = M + ln s` and `out = sum w_i o_i / s` are.
pub(crate) fn attn_merge(cfg: &MergeCfg) -> Kernel {
    let dt = cfg.dtype;
    let v_dim = cfg.v_dim;
    let vp = round_up(v_dim, 16);
    let hm = MERGE_ROWS;
    let mut kb = KernelBuilder::new(format!("attn_merge_{dt}"));
    let rows = kb.scalar("rows", DType::I32);
    let splits = kb.scalar("splits", DType::I32);
    let (pr, ps) = (Expr::Param(rows), Expr::Param(splits));
    let o_ws = kb.input("o_ws", DType::F32, [ps.clone() * pr.clone(), v_dim.into()]);
    let lse_ws = kb.input("lse_ws", DType::F32, [ps.clone() * pr.clone()]);
    let fix = kb.input("fix", DType::F32, [pr.clone()]);
    let sink = cfg.sink.then(|| kb.input("sink", DType::F32, [pr.clone()]));
    let out = kb.output("out", dt, [pr.clone(), v_dim.into()]);
    let lse_out = kb.output("lse", DType::F32, [pr.clone()]);

    use Layout::{DN, ND};
    use MemSpace::Vec as Ub;
    let ty = TileType::new;
    // PTO reduces only ND tiles (TROW* along rows, TCOL* down columns). lse_ws is split-major
    // (lse_ws[sp * rows + g]), so the parts of this AIV's rows load as ND [splits, hm] and every
    // per-row value is a column reduction into an ND row [1, hm]; `column` re-declares such a row
    // as the DN column [hm, 1] (the same 32 bytes) that a row broadcast over `acc` takes.
    let row =
        |kb: &mut KernelBuilder, name: &str| kb.tile(name, ty(Ub, DType::F32, 1, hm, ND).dynamic());
    let column = |kb: &mut KernelBuilder, name: &str, src: TileId| {
        kb.reinterpret(
            name,
            src,
            Reinterpret {
                dtype: None,
                shape: Some((hm, 1)),
                layout: Some(DN),
            },
        )
    };
    // Max-reduced: padded with min; sum-reduced: padded with zero (ASCEND950.md §7).
    let lp = kb.tile(
        "lse_parts",
        ty(Ub, DType::F32, MAX_SPLITS, hm, ND)
            .dynamic()
            .pad(PadValue::Min),
    );
    let w = kb.tile(
        "weights",
        ty(Ub, DType::F32, MAX_SPLITS, hm, ND)
            .dynamic()
            .pad(PadValue::Zero),
    );
    let mx = row(&mut kb, "mx");
    let s = row(&mut kb, "s");
    let s_col = column(&mut kb, "s_col", s);
    let wr = row(&mut kb, "w_i");
    let wc = column(&mut kb, "w_i_col", wr);
    let fixt = row(&mut kb, "fix_t");
    let sink_t = sink.map(|sk| {
        let t = row(&mut kb, "t");
        (sk, t, column(&mut kb, "t_col", t))
    });
    let acc = kb.tile("acc", ty(Ub, DType::F32, hm, vp, ND).dynamic());
    let group = parts_per_load(vp);
    let oi = kb.tile_group(
        "o_i",
        ty(Ub, DType::F32, hm, vp, ND).dynamic(),
        2 * group as u32,
    );
    let out_t = (dt != DType::F32).then(|| kb.tile("out_t", ty(Ub, dt, hm, vp, ND).dynamic()));

    kb.vector(|v| {
        let g0 = v.let_("g0", (Expr::BlockIdx * 2 + Expr::SubBlockIdx) * hm);
        let rv = v.let_("rv", (pr.clone() - g0).min(hm as i64));
        v.if_(Expr::Var(rv).gt(0), |b| {
            let mut rows_of = vec![mx, s, wr, fixt];
            let mut cols_of = vec![s_col, wc];
            if let Some((_, t, t_col)) = sink_t {
                rows_of.push(t);
                cols_of.push(t_col);
            }
            for tile in rows_of {
                b.set_validshape(tile, 1, rv);
            }
            for tile in cols_of {
                b.set_validshape(tile, rv, 1);
            }
            b.set_validshape(lp, ps.clone(), rv);
            b.set_validshape(w, ps.clone(), rv);
            b.set_validshape(acc, rv, v_dim);
            // Both part buffers start free (set first, so the first parts' loads follow the
            // lse parts' on MTE2 without waiting for the weights).
            b.set_flag(Pipe::V, Pipe::Mte2, 2);
            b.set_flag(Pipe::V, Pipe::Mte2, 3);
            // Both loads under one MTE2 -> V flag (each flag set on MTE2 waits for the DMAs
            // before it to land, so it exposes their latency once).
            b.load(lp, GmView::nd(lse_ws, g0, ps.clone(), rv, pr.clone()));
            b.load(fixt, GmView::nd(fix, g0, 1, rv, hm));
            b.set_flag(Pipe::Mte2, Pipe::V, 0);
            b.wait_flag(Pipe::Mte2, Pipe::V, 0);
            // Down each row's column of parts: M, w_i = exp(lse_i - M), s = sum w_i.
            b.col_max(mx, lp);
            b.broadcast(BinaryOp::Sub, Axis::Col, w, lp, mx);
            b.exp(w, w);
            b.col_sum(s, w);
            b.fill(acc, 0.0);
            // The parts in groups of `group`, each group loaded under one flag; two groups of
            // buffers, loop unrolled by two: the loads of group k + 1 overlap the vector work
            // on group k.
            let groups = ps.clone().ceil_div(group as i64);
            let mut parts = |lb: &mut Body<'_>, k: Expr, slot: u64| {
                let ev = 2 + slot as u8;
                let part = |j: u64| k.clone() * group + j;
                let buf = |j: u64| oi.at(slot * group + j);
                // Part `part(j)` exists for j = 0 (k < groups), else when below `splits`.
                let in_range = |lb: &mut Body<'_>, j: u64, f: &mut dyn FnMut(&mut Body<'_>)| {
                    if j == 0 {
                        f(lb);
                    } else {
                        lb.if_(part(j).lt(ps.clone()), |t| f(t));
                    }
                };
                lb.wait_flag(Pipe::V, Pipe::Mte2, ev);
                for j in 0..group {
                    in_range(lb, j, &mut |t| {
                        t.set_validshape(buf(j), rv, v_dim);
                        t.load(
                            buf(j),
                            GmView::nd(o_ws, (part(j) * pr.clone() + g0) * v_dim, rv, v_dim, v_dim),
                        );
                    });
                }
                lb.set_flag(Pipe::Mte2, Pipe::V, ev);
                lb.wait_flag(Pipe::Mte2, Pipe::V, ev);
                for j in 0..group {
                    in_range(lb, j, &mut |t| {
                        // Part i's weights (row i of `weights`), seen as a column by `w_i_col`.
                        t.mov(wr, w).offset(part(j), 0);
                        t.broadcast(BinaryOp::Mul, Axis::Row, buf(j), buf(j), wc);
                        t.add(acc, acc, buf(j));
                    });
                }
                lb.set_flag(Pipe::V, Pipe::Mte2, ev);
            };
            ping_pong(b, groups, &mut parts);
            b.wait_flag(Pipe::V, Pipe::Mte2, 2);
            b.wait_flag(Pipe::V, Pipe::Mte2, 3);
            b.broadcast(BinaryOp::Div, Axis::Row, acc, acc, s_col);
            // lse = M + ln(s)  (into s).
            b.unary(UnaryOp::Ln, s, s);
            b.add(s, s, mx);
            if let Some((sk, t, t_col)) = sink_t {
                b.load(t, GmView::nd(sk, g0, 1, rv, hm));
                b.binary(BinaryOp::Sub, t, t, s);
                b.exp(t, t);
                b.binary_scalar(BinaryOp::Add, t, t, 1.0);
                b.broadcast(BinaryOp::Div, Axis::Row, acc, acc, t_col);
            }
            b.add(s, s, fixt);
            b.store(GmView::nd(lse_out, g0, 1, rv, hm), s);
            let dst = GmView::nd(out, Expr::Var(g0) * v_dim, rv, v_dim, v_dim);
            store_in_dtype(b, dst, acc, out_t, (rv, v_dim));
        });
    });
    kb.build()
}
