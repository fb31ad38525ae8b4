//! What the cube and vector programs of `flash_dn` share ([`FlashKernel`]): the static shape,
//! the runtime scalars and the tiles and channels declared once for both cores.

use super::cfg::{Desc, FlashCfg};
use tile_backend::dsl::Body;
use tile_backend::ir::{ChannelId, Expr, ParamId, TileId, TileRef};

/// The runtime scalars of `flash_dn`.
#[derive(Debug, Clone, Copy)]
pub(super) struct FlashParams {
    pub blocks: ParamId,
    pub q_len: ParamId,
    pub k_len: ParamId,
    pub v_len: ParamId,
    pub o_len: ParamId,
    pub lse_len: ParamId,
    pub q_rs: ParamId,
    pub k_rs: ParamId,
    pub v_rs: ParamId,
    pub o_rs: ParamId,
    pub scale: ParamId,
}

/// Everything the cube and vector programs of `flash_dn` share: the static shape, the
/// parameters and the tiles and channels declared once for both cores.
#[derive(Clone, Copy)]
pub(super) struct FlashKernel<'a> {
    pub cfg: &'a FlashCfg,
    pub sp: FlashParams,
    pub q: ParamId,
    pub k: ParamId,
    pub v: Option<ParamId>,
    pub desc: ParamId,
    pub mask: ParamId,
    pub out: ParamId,
    pub lse: ParamId,
    pub q_l1: TileId,
    pub qt_l1: TileId,
    pub k_l1: TileId,
    pub v_l1: Option<TileId>,
    pub p_l1: TileId,
    pub pt_l1: TileId,
    pub k_l0: TileId,
    pub qt_l0: TileId,
    pub pt_l0: TileId,
    pub v_l0: TileId,
    pub s_acc: TileId,
    pub pv_acc: TileId,
    /// The score buffers (a group of [`FlashCfg::s_bufs`]); KV tile t uses [`FlashKernel::s`].
    pub s_ub: TileId,
    pub mask_ub: TileId,
    pub p_ub: Option<TileId>,
    pub p_nz: TileId,
    pub pv_ub: TileId,
    pub o_t: TileId,
    pub o_cast: Option<TileId>,
    pub stats: Stats,
    /// The score channels, one per score buffer (the second is the first with one buffer).
    pub ch_s: [ChannelId; 2],
    pub ch_p: ChannelId,
    pub ch_pv: ChannelId,
}

/// The per-query statistics, each an ND `[1, H]` row (what a column reduction writes, and what
/// A5's element-wise ops take), and the DN `[H, 1]` column views a row broadcast over O reads.
#[derive(Debug, Clone, Copy)]
pub(super) struct Stats {
    pub m: TileId,
    pub l: TileId,
    pub mc: TileId,
    pub lc: TileId,
    pub alpha: TileId,
    pub lse: TileId,
    /// The tile's column minimum of the scores a query sees (non-finite policy).
    pub low_tile: TileId,
    /// The lowest score each query has seen so far.
    pub low: TileId,
    pub alpha_col: TileId,
    pub l_col: TileId,
}

impl FlashKernel<'_> {
    /// The score buffer of the KV tile in slot `slot` (a tile's parity).
    pub(super) fn s(&self, slot: u64) -> TileRef {
        self.s_ub.at(slot % self.cfg.s_bufs)
    }

    /// The channel of the score buffer of slot `slot`.
    pub(super) fn ch_s(&self, slot: u64) -> ChannelId {
        self.ch_s[(slot % 2) as usize]
    }

    /// Reads field `f` of descriptor row `row`.
    pub(super) fn field(&self, b: &mut Body<'_>, row: &Expr, f: Desc) -> Expr {
        let name = format!("{f:?}").to_lowercase();
        Expr::Var(b.read_scalar(name, self.desc, row.clone() * Desc::COUNT + f as i64))
    }

    /// Runs `f` on each descriptor row this block owns, in order: one per wave of
    /// `BlockDim` rows, row `w BlockDim + BlockIdx` of an even wave `w` and `w BlockDim +
    /// BlockDim - 1 - BlockIdx` of an odd one, those below `blocks`. The host sorts the rows
    /// by the keys they visit, so this zigzag gives each block a long and a short tile in
    /// turn; with one block per row it is the row `BlockIdx`. A block that runs several rows
    /// starts a row's Q and K loads while the vector cores still finish the last one. The
    /// loop runs exactly this block's rows, with no `if` around the body: the sync pass then
    /// waits for the last row's stores before the statement that needs them, not before the
    /// whole row.
    pub(super) fn for_each_row(&self, b: &mut Body<'_>, f: impl FnOnce(&mut Body<'_>, Expr)) {
        let rows = Expr::Param(self.sp.blocks);
        let dim = Expr::BlockDim;
        // Position of this block in wave w (w = 0 or 1 mod 2).
        let within = |odd: Expr| Expr::BlockIdx + odd * (dim.clone() - 1 - Expr::BlockIdx * 2);
        let full = b.let_("full_waves", rows.clone() / dim.clone());
        let rest = rows - Expr::Var(full) * dim.clone();
        let last = within(Expr::Var(full) % 2);
        let mine = b.let_(
            "my_rows",
            Expr::Var(full) + Expr::select(last.lt(rest), 1, 0),
        );
        b.for_range("wave", 0, Expr::Var(mine), 1, |lb, w| {
            let row = lb.let_("row", Expr::Var(w) * dim.clone() + within(Expr::Var(w) % 2));
            f(lb, Expr::Var(row));
        });
    }
}
