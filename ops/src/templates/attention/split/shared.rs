//! What the cube and vector programs of `attn_split` share ([`SplitKernel`]): the static
//! shape, the runtime scalars and the tiles and channels declared once for both cores.

use super::cfg::AttnCfg;
use tile_backend::dsl::{Body, KernelBuilder, Reinterpret};
use tile_backend::ir::{
    ChannelId, DType, Expr, Layout, MemSpace, ParamId, TileId, TileType, VarId,
};

#[derive(Debug, Clone, Copy)]
pub(crate) struct SplitParams {
    pub batch: ParamId,
    pub topk: ParamId,
    pub maxb: ParamId,
    pub tokens: ParamId,
    pub splits: ParamId,
    pub cps: ParamId,
    pub scale: ParamId,
}

/// Everything the cube and vector programs of [`attn_split`] share: the static shape, the
/// parameters and the tiles and channels declared once for both cores.
#[derive(Clone, Copy)]
pub(crate) struct SplitKernel<'a> {
    /// The static shape.
    pub cfg: &'a AttnCfg,
    /// Scalar parameters.
    pub sp: SplitParams,
    /// `chunk` of the tiling (see [`AttnCfg`]).
    pub chunk: u64,
    /// `ks` of the tiling (see [`AttnCfg`]).
    pub ks: u64,
    /// `ns` of the tiling (see [`AttnCfg`]).
    pub ns: u64,
    /// `dp` of the tiling (see [`AttnCfg`]).
    pub dp: u64,
    /// `dqk` of the tiling (see [`AttnCfg`]).
    pub dqk: u64,
    /// `v_dim` of the tiling (see [`AttnCfg`]).
    pub v_dim: u64,
    /// `r` of the tiling (see [`AttnCfg`]).
    pub r: u64,
    /// `nks` of the tiling (see [`AttnCfg`]).
    pub nks: u64,
    /// `nns` of the tiling (see [`AttnCfg`]).
    pub nns: u64,
    /// `heads` of the tiling (see [`AttnCfg`]).
    pub heads: u64,
    /// `bufs` of the tiling (see [`AttnCfg`]).
    pub bufs: u64,
    /// `pbufs` of the tiling (see [`AttnCfg`]).
    pub pbufs: u64,
    /// GM parameter `q`.
    pub q: ParamId,
    /// GM parameter `kv`.
    pub kv: ParamId,
    /// GM parameter `idx`.
    pub idx: ParamId,
    /// GM parameter `bt`.
    pub bt: ParamId,
    /// GM parameter `counts`.
    pub counts: ParamId,
    /// GM parameter `o_ws`.
    pub o_ws: ParamId,
    /// GM parameter `lse_ws`.
    pub lse_ws: ParamId,
    /// GM parameter `v` (separate V cache), when the kernel has one.
    pub vsrc: Option<ParamId>,
    /// Tile `q_l1`.
    pub q_l1: TileId,
    /// Tile `k_l1`.
    pub k_l1: TileId,
    /// Tile `kt_l1`.
    pub kt_l1: TileId,
    /// Tile `v_l1`.
    pub v_l1: TileId,
    /// Tile `p_l1`.
    pub p_l1: TileId,
    /// Tile `q_l0`.
    pub q_l0: TileId,
    /// Tile `p_l0`.
    pub p_l0: TileId,
    /// Tile `kt_l0`.
    pub kt_l0: TileId,
    /// Tile `v_l0`.
    pub v_l0: TileId,
    /// Tile `s_acc`.
    pub s_acc: TileId,
    /// Tile `pv_acc`.
    pub pv_acc: TileId,
    /// Tile `s_ub`.
    pub s_ub: TileId,
    /// Tile `p_nz`.
    pub p_nz: TileId,
    /// Tile `l`.
    pub l: TileId,
    /// Tile `mc`.
    pub mc: TileId,
    /// Tile `lc`.
    pub lc: TileId,
    /// Tile `alpha`.
    pub alpha: TileId,
    /// Tile `lse_t`.
    pub lse_t: TileId,
    /// The statistics above seen as ND rows, for the element-wise ops (A5 takes no DN there).
    pub rows: StatRows,
    /// Tile `o_t`.
    pub o_t: TileId,
    /// Tile `pv_ub`.
    pub pv_ub: TileId,
    /// Tile `p_ub` (P cast to the data dtype), unless the data is f32.
    pub p_ub: Option<TileId>,
    /// Tile group `o_cast` (the result cast to the data dtype, one per V slice) of a
    /// [`AttnCfg::direct`] kernel whose data is not f32.
    pub o_cast: Option<TileId>,
    /// Channel `s`.
    pub ch_s: ChannelId,
    /// Channel `p`.
    pub ch_p: ChannelId,
    /// Channel `pv`.
    pub ch_pv: ChannelId,
}

/// The coordinates of a block of the split kernel: `(split, ht, b, count, c0, iters, h0, hv)`.
type Coords = (VarId, VarId, VarId, VarId, VarId, VarId, VarId, VarId);

impl SplitKernel<'_> {
    /// Work item `item`'s coordinates and the split's chunk range (same expressions on every
    /// core); `item = (b * nht + ht) * splits + split`.
    pub(super) fn coords(&self, b: &mut Body<'_>, item: Expr) -> Coords {
        let p = |id: ParamId| Expr::Param(id);
        let split = b.let_("split", item.clone() % p(self.sp.splits));
        let rest = b.let_("rest", item / p(self.sp.splits));
        let ht = b.let_("ht", rest % self.cfg.nht);
        let bi = b.let_("b", rest / self.cfg.nht);
        let cnt = b.read_scalar("count", self.counts, bi);
        let c0 = b.let_("c0", split * p(self.sp.cps));
        let nck = Expr::Var(cnt).ceil_div(self.chunk as i64);
        let iters = b.let_("iters", (nck.min(c0 + p(self.sp.cps)) - c0).max(0));
        let h0 = b.let_("h0", ht * self.cfg.hg);
        let hv = b.let_("hv", (Expr::from(self.heads) - h0).min(self.cfg.hg));
        (split, ht, bi, cnt, c0, iters, h0, hv)
    }

    /// Runs `item_body(b, item)` for each work item of this block: item `BlockIdx` itself when
    /// the plan gives a block one item, else items `BlockIdx * ipb ..` one after another (see
    /// [`AttnCfg::ipb`]).
    pub(super) fn for_items(
        &self,
        b: &mut Body<'_>,
        item_body: &mut dyn FnMut(&mut Body<'_>, Expr),
    ) {
        let ipb = self.cfg.ipb.max(1);
        if ipb == 1 {
            item_body(b, Expr::BlockIdx);
        } else {
            b.for_range("item", 0, ipb, 1, |lb, k| {
                item_body(lb, Expr::BlockIdx * ipb + Expr::Var(k));
            });
        }
    }
}

/// The per-row statistics `m`, `l`, `m_chunk`, `l_chunk`, `alpha` and `lse`, each a DN `[r, 1]`
/// column (what a row reduction writes and a row broadcast reads), seen as the ND `[1, r]` row of
/// the same bytes: A5's element-wise, scalar and fill instructions take row-major tiles only
/// (`vector-layout`), so every op between statistics runs on these rows. Beside them, for the
/// non-finite policy (see the vector program, `vector.rs`): the column `low_chunk` (a chunk's row minimum of the scores)
/// with its row view, and the row `low` (the lowest score of the split so far).
#[derive(Debug, Clone, Copy)]
pub(crate) struct StatRows {
    pub(super) m: TileId,
    pub(super) l: TileId,
    pub(super) mc: TileId,
    pub(super) lc: TileId,
    pub(super) alpha: TileId,
    pub(super) lse: TileId,
    pub(super) low_chunk: TileId,
    pub(super) low_chunk_row: TileId,
    pub(super) low: TileId,
}

impl StatRows {
    /// Declares the row views of the columns `[m, l, m_chunk, l_chunk, alpha, lse]` (`r` rows),
    /// and declares `low_chunk` (with its row view) and `low`.
    pub(crate) fn declare(kb: &mut KernelBuilder, r: u64, cols: [TileId; 6]) -> Self {
        let names = [
            "m_row",
            "l_row",
            "m_chunk_row",
            "l_chunk_row",
            "alpha_row",
            "lse_row",
        ];
        let row_of = |kb: &mut KernelBuilder, name: &str, col: TileId| {
            kb.reinterpret(
                name,
                col,
                Reinterpret {
                    dtype: None,
                    shape: Some((1, r)),
                    layout: Some(Layout::ND),
                },
            )
        };
        let [m, l, mc, lc, alpha, lse] = std::array::from_fn(|i| row_of(kb, names[i], cols[i]));
        let low_chunk = kb.tile(
            "low_chunk",
            TileType::new(MemSpace::Vec, DType::F32, r, 1, Layout::DN),
        );
        let low = kb.tile(
            "low",
            TileType::new(MemSpace::Vec, DType::F32, 1, r, Layout::ND).dynamic(),
        );
        let low_chunk_row = row_of(kb, "low_chunk_row", low_chunk);
        StatRows {
            m,
            l,
            mc,
            lc,
            alpha,
            lse,
            low_chunk,
            low_chunk_row,
            low,
        }
    }

    pub(super) fn all(&self) -> [TileId; 8] {
        [
            self.m,
            self.l,
            self.mc,
            self.lc,
            self.alpha,
            self.lse,
            self.low_chunk_row,
            self.low,
        ]
    }
}
