//! The split kernel `attn_split` (see the parent module's docs): its static shape (`cfg.rs`),
//! what its cube and vector programs share (`shared.rs`), the programs (`cube.rs`,
//! `vector.rs`) and the builder (here).

pub(crate) mod cfg;
mod cube;
mod shared;
mod vector;

use cfg::{AttnCfg, Values};
use shared::{SplitKernel, SplitParams, StatRows};
use tile_backend::dsl::{KernelBuilder, Reinterpret};
use tile_backend::ir::{
    CoreKind, DType, Expr, Kernel, Layout, MemSpace, PadValue, ParamId, TileType,
};

/// The split attention kernel (see the module docs). Arguments, in order: scalars `batch`,
/// `topk`, `maxb`, `tokens`, `splits`, `cps` (chunks per split) (i32) and `scale` (f32); then
/// `q [batch*heads, dqk]`, `kv [tokens, kv_cols]`, (`v [tokens, kv_cols]`), `indices [batch,
/// topk]` i32 (valid ones compacted to the front), `block_table [batch, maxb]` i32, `counts
/// [batch]` i32 (valid indices per row), outputs `o_ws [splits*batch*heads, v_dim]` f32 (the
/// data dtype with [`AttnCfg::direct`]) and `lse_ws [splits*batch*heads]` f32. Launch `batch * nht * splits` blocks.
pub(crate) fn attn_split(cfg: &AttnCfg) -> Kernel {
    let dt = cfg.dtype;
    let (th, chunk, ks, ns) = (cfg.th, cfg.chunk, cfg.ks, cfg.ns);
    let (dp, vp, dqk, v_dim) = (cfg.dp(), cfg.vp(), cfg.dqk, cfg.v_dim);
    let r = cfg.r();
    let nks = dp / ks;
    let nns = vp / ns;
    let heads = cfg.heads;
    let f32_data = dt == DType::F32;
    let bufs = cfg.bufs.clamp(1, 2);
    let pbufs = cfg.pbufs.clamp(1, 2);

    // The single-vector-core head tile is its own kernel, named apart in listings and profiles.
    let single = if cfg.single { "_single" } else { "" };
    let mut kb = KernelBuilder::new(format!("{}{single}_{dt}", cfg.name));
    let sp = SplitParams {
        batch: kb.scalar("batch", DType::I32),
        topk: kb.scalar("topk", DType::I32),
        maxb: kb.scalar("max_blocks", DType::I32),
        tokens: kb.scalar("tokens", DType::I32),
        splits: kb.scalar("splits", DType::I32),
        cps: kb.scalar("chunks_per_split", DType::I32),
        scale: kb.scalar("scale", DType::F32),
    };
    let p = |id: ParamId| Expr::Param(id);
    let rows_all = p(sp.batch) * heads;
    let q = kb.input("q", dt, [rows_all.clone(), dqk.into()]);
    let kv = kb.input("kv", dt, [p(sp.tokens), cfg.kv_cols.into()]);
    let vsrc = (cfg.values == Values::OwnCache)
        .then(|| kb.input("v", dt, [p(sp.tokens), cfg.kv_cols.into()]));
    let idx = kb.input("indices", DType::I32, [p(sp.batch), p(sp.topk)]);
    let bt = kb.input("block_table", DType::I32, [p(sp.batch), p(sp.maxb)]);
    let counts = kb.input("counts", DType::I32, [p(sp.batch)]);
    let ws_rows = p(sp.splits) * rows_all.clone();
    // With `direct` the one split's result is the call's: `o_ws` in the data dtype.
    let o_dt = if cfg.direct { dt } else { DType::F32 };
    let o_ws = kb.output("o_ws", o_dt, [ws_rows.clone(), v_dim.into()]);
    let lse_ws = kb.output("lse_ws", DType::F32, [ws_rows]);

    use Layout::{DN, ND, NZ, ZN};
    use MemSpace::{Acc, Left, Mat, Right, Vec as Ub};
    let ty = TileType::new;
    // Cube tiles.
    let q_ty = ty(Mat, dt, th, dp, NZ).dynamic().pad(PadValue::Zero);
    let q_l1 = match cfg.qbufs {
        1 => kb.tile("q_l1", q_ty),
        n => kb.tile_group("q_l1", q_ty, n as u32),
    };
    let kv_ty = ty(Mat, dt, chunk, dp, NZ).dynamic().pad(PadValue::Zero);
    let k_l1 = kb.tile_group("k_l1", kv_ty.clone(), bufs as u32);
    let kt_l1 = kb.reinterpret(
        "kt_l1",
        k_l1,
        Reinterpret {
            dtype: None,
            shape: Some((dp, chunk)),
            layout: Some(ZN),
        },
    );
    let v_l1 = if cfg.values == Values::OwnCache {
        kb.tile_group("v_l1", kv_ty, bufs as u32)
    } else {
        k_l1
    };
    let p_l1 = kb.tile_group("p_l1", ty(Mat, dt, th, chunk, NZ), pbufs as u32);
    let q_l0 = kb.tile_group("q_l0", ty(Left, dt, th, ks, NZ), bufs as u32);
    let p_l0 = kb.tile("p_l0", ty(Left, dt, th, chunk, NZ));
    let kt_l0 = kb.tile_group("kt_l0", ty(Right, dt, ks, chunk, ZN), bufs as u32);
    let v_l0 = kb.tile_group("v_l0", ty(Right, dt, chunk, ns, ZN), bufs as u32);
    let s_acc = kb.tile_group("s_acc", ty(Acc, DType::F32, th, chunk, NZ), 2);
    let pv_acc = kb.tile_group("pv_acc", ty(Acc, DType::F32, th, ns, NZ), 2);
    // Vector tiles (per AIV).
    // Scores: a runtime valid shape (full but for masking a tail chunk), padded with -inf.
    let s_ub = kb.tile(
        "s_ub",
        ty(Ub, DType::F32, r, chunk, ND)
            .dynamic()
            .pad(PadValue::Min),
    );
    let p_ub = (!f32_data).then(|| kb.tile("p_ub", ty(Ub, dt, r, chunk, ND)));
    let p_nz = kb.tile("p_nz", ty(Ub, dt, r, chunk, NZ));
    let col = |kb: &mut KernelBuilder, name: &str| kb.tile(name, ty(Ub, DType::F32, r, 1, DN));
    let m = col(&mut kb, "m");
    let l = col(&mut kb, "l");
    let mc = col(&mut kb, "m_chunk");
    let lc = col(&mut kb, "l_chunk");
    let alpha = col(&mut kb, "alpha");
    let lse_t = kb.tile("lse", ty(Ub, DType::F32, r, 1, DN).dynamic());
    let rows = StatRows::declare(&mut kb, r, [m, l, mc, lc, alpha, lse_t]);
    let o_t = kb.tile_group("o", ty(Ub, DType::F32, r, ns, ND).dynamic(), nns as u32);
    // Dynamic like `o_t`: the CPU model of PTO-ISA types TADD with one tile type for all operands.
    let pv_ub = kb.tile("pv_ub", ty(Ub, DType::F32, r, ns, ND).dynamic());
    // One cast tile per V slice (none reused, so no store waits for a cast of the next slice).
    let o_cast = (cfg.direct && !f32_data)
        .then(|| kb.tile_group("o_cast", ty(Ub, dt, r, ns, ND).dynamic(), nns as u32));

    let ch_s = kb.channel("s", CoreKind::Cube, 1);
    let ch_p = kb.channel("p", CoreKind::Vector, 1);
    let ch_pv = kb.channel("pv", CoreKind::Cube, 1);

    let k = SplitKernel {
        cfg,
        sp,
        chunk,
        ks,
        ns,
        dp,
        dqk,
        v_dim,
        r,
        nks,
        nns,
        heads,
        bufs,
        pbufs,
        q,
        kv,
        idx,
        bt,
        counts,
        o_ws,
        lse_ws,
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
        o_cast,
        ch_s,
        ch_p,
        ch_pv,
    };
    kb.cube(|c| cube::body(c, &k));
    kb.vector(|v| vector::body(v, &k));
    kb.build()
}
