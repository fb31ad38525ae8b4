//! The static shape of `flash_dn` ([`FlashCfg`], chosen from an op's [`FlashSpec`]) and the
//! layout of its descriptor table ([`Desc`]): what the kernel builder, its cube and vector
//! programs and the host all read. A leaf of the kernel's folder.

use crate::templates::common::{best_slice, round_up};
use tile_backend::ir::{AccToVecMode, DType, Expr};

/// Static shape of the DN-mode flash kernel (its specialisation key).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct FlashCfg {
    /// Kernel name prefix.
    pub name: &'static str,
    /// Data dtype (q, k, v, P, out).
    pub dtype: DType,
    /// Head dim of q and k (the contraction of Q K^T).
    pub d: u64,
    /// Head dim of v (output columns).
    pub dv: u64,
    /// Queries per tile: a multiple of 32 (each AIV owns `ts / 2`, 16-aligned), or 16 with
    /// [`FlashCfg::single`].
    pub ts: u64,
    /// The single-vector-core fallback for problems of at most 16 queries: the scores and P V
    /// go whole to AIV0 (`SingleModeVec0`, `ts = 16`) and AIV1 only keeps the channel protocol,
    /// instead of padding the tile to 32 queries so each AIV holds 16 (half of the cube's
    /// work on padding, for the same vector work on AIV0).
    pub single: bool,
    /// Keys per KV tile (a multiple of 16).
    pub tkv: u64,
    /// Score buffers per AIV (2 where UB holds them, else 1): with two, the Fixpipe moves
    /// tile t + 1's scores into one while the vector core still works on tile t's in the
    /// other (channels S0 / S1, one per buffer), so the move is off the per-tile chain.
    pub s_bufs: u64,
    /// D slice of Q K^T (L0A/L0B operand width).
    pub ks: u64,
    /// Dv slice of P V.
    pub ns: u64,
    /// The `qk_softmax` variant: no V; two passes over the keys (the statistics, then P),
    /// writing P^T (`[N, M]`, keys by queries: each AIV's tile as it lies in UB) to `out`.
    pub write_p: bool,
    /// The device plan's wide tiling ([`FlashCfg::new`] on [`FlashSpec::device`]): query tiles
    /// of up to 256 (each AIV 128 queries), so K and V are read once per 256 queries, with the
    /// buffers that lets fit: one score accumulator and one score buffer per UB, P^T moved into
    /// L0A in two key halves (P V accumulates over them, one Acc per Dv slice), P cast into its
    /// own score buffer's bytes, P's NZ copy and the output cast in the mask tile's.
    pub wide: bool,
}

/// L1 bytes the kernel plans within (of 512 KiB).
const L1_BUDGET: u64 = 500 * 1024;
/// UB bytes per AIV the kernel plans within (of the 240 KiB safe).
const UB_BUDGET: u64 = 224 * 1024;
/// UB bytes per AIV the wide tiling plans within: the 240 KiB safe (ASCEND950.md §2).
const UB_WIDE_BUDGET: u64 = 240 * 1024;
/// L0A / L0B bytes.
const L0AB: u64 = 64 * 1024;
/// L0C bytes on the 950.
const L0C: u64 = 256 * 1024;

/// What a flash op asks of the DN-mode kernel, field by field: [`FlashCfg::new`] chooses the
/// tiling from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct FlashSpec {
    /// Kernel name prefix.
    pub name: &'static str,
    /// Data dtype (q, k, v, P, out).
    pub dtype: DType,
    /// Head dim of q and k.
    pub d: u64,
    /// Head dim of v.
    pub dv: u64,
    /// Queries of the call's longest problem.
    pub max_sq: u64,
    /// Keys of the call's longest problem.
    pub max_skv: u64,
    /// The `qk_softmax` variant ([`FlashCfg::write_p`]); the tiling does not depend on it.
    pub write_p: bool,
    /// Tiles for the device plan (`PlanTarget::Device`): the wide tiling
    /// ([`FlashCfg::wide`]) where it fits; the CPU plan keeps the 128-query tiles.
    pub device: bool,
    /// The call is causal. The wide tiling is for calls without the mask: on the causal
    /// bench shape it measured slower than the 128-query tiles (docs/measurements.md, "Flash
    /// attention: the wide device tiling"), its diagonal tiles loading a mask tile twice the
    /// size and its blocks running half as many, longer-to-start rows.
    pub causal: bool,
}

impl FlashCfg {
    /// The tiling for `spec`'s head dims and problems of at most `max_sq` queries and
    /// `max_skv` keys: query tiles of up to 128 (rounded to 32; 16 on one vector core when
    /// `max_sq <= 16`), KV tiles of up to 128 keys (the power of two from 16 that holds
    /// `max_skv`, so short sequences do not compute and simulate padding keys) and slices that
    /// fit L1, L0A/L0B and UB with K and V double buffered. On the device, calls without the
    /// causal mask whose problems have more than 128 queries take the wide tiling
    /// ([`FlashCfg::wide`]) where it fits.
    pub fn new(spec: FlashSpec) -> Self {
        if let Some(cfg) = Self::wide_tiling(spec) {
            return cfg;
        }
        let FlashSpec {
            name,
            dtype,
            d,
            dv,
            max_sq,
            max_skv,
            write_p,
            device: _,
            causal: _,
        } = spec;
        let es = dtype.size_bytes();
        let dp = round_up(d, 16);
        // V columns as the slices pad them (at most one slice more than dv; see `vp`).
        let vp = round_up(dv, 128).max(round_up(dv, 16));
        let single = max_sq <= 16;
        let ts = if single {
            16
        } else {
            round_up(max_sq.clamp(1, 128), 32)
        };
        let h = if single { ts } else { ts / 2 };
        let l1 = |tkv: u64| ts * dp * es + 2 * tkv * (dp + vp) * es + 2 * tkv * ts * es;
        let ub = |tkv: u64, s_bufs: u64| {
            // s (s_bufs of them), mask (f32) + P (dtype, ND and NZ) + O (f32) + PV slice + out
            // cast + stats.
            (s_bufs + 1) * tkv * h * 4
                + 2 * tkv * h * es
                + h * vp * 4
                + h * 128 * (4 + es)
                + 8 * h * 4
        };
        // L0A holds P^T [ts, tkv] beside two K slices of at least 16 columns.
        let l0a = |tkv: u64| ts * tkv * es + 2 * tkv * 16 * es;
        let mut tkv = max_skv.clamp(16, 128).next_power_of_two();
        while tkv > 16 && (l1(tkv) > L1_BUDGET || ub(tkv, 1) > UB_BUDGET || l0a(tkv) > 64 * 1024) {
            tkv /= 2;
        }
        let s_bufs = if ub(tkv, 2) <= UB_BUDGET { 2 } else { 1 };
        // L0A: P^T [ts, tkv] + two K slices [tkv, ks]; L0B: two Q^T slices [ks, ts] + two V
        // slices [tkv, ns], half each.
        let l0 = 64 * 1024;
        let ks_max = ((l0 - ts * tkv * es) / (2 * tkv * es)).min(l0 / 2 / (2 * ts * es));
        let ks = best_slice(dp, ks_max);
        let ns_max = (l0 / 2 / (2 * tkv * es)).min(128);
        // A power of two (tkv is one): the last slice may run past dv (zero padded), so that
        // an awkward Dv (e.g. 200) does not fall back to many 16-column slices.
        let ns = (ns_max.min(round_up(dv, 16)) / 16 * 16).max(16);
        FlashCfg {
            name,
            dtype,
            d,
            dv,
            ts,
            single,
            tkv,
            s_bufs,
            ks,
            ns,
            write_p,
            wide: false,
        }
    }

    /// The wide tiling of [`FlashCfg::wide`], when `spec` asks for the device plan, the call is
    /// not causal, its data are 16-bit, its longest problem has more than 128 queries and at
    /// least 128 keys, and the tiles fit: `ts` = 256 (or the multiple of 32 that holds the
    /// queries), 128-key KV tiles, D slices of 32, Dv slices of 64 (at most two).
    fn wide_tiling(spec: FlashSpec) -> Option<Self> {
        let (dtype, d, dv, max_sq) = (spec.dtype, spec.d, spec.dv, spec.max_sq);
        let es = dtype.size_bytes();
        let asked = spec.device && !spec.causal && !spec.write_p;
        if !asked || es != 2 || max_sq <= 128 || spec.max_skv < 128 {
            return None;
        }
        let (ts, tkv) = (round_up(max_sq.min(256), 32), 128);
        let h = ts / 2;
        let dp = round_up(d, 16);
        let ks = best_slice(dp, 32);
        let ns = 64.min(round_up(dv, 16));
        let vp = round_up(round_up(dv, 16), ns);
        let fits = vp / ns <= 2
            // L1: Q, K and V twice, P twice.
            && ts * dp * es + 2 * tkv * (dp + vp) * es + 2 * tkv * ts * es <= L1_BUDGET
            // L0A: half of P^T and two K slices; L0B: two Q^T slices and two V slices.
            && ts * (tkv / 2) * es + 2 * tkv * ks * es <= L0AB
            && 2 * ks * ts * es + 2 * (tkv / 2) * ns * es <= L0AB
            // L0C: one S^T accumulator and one P V accumulator per Dv slice.
            && tkv * ts * 4 + vp * ts * 4 <= L0C
            // UB: the scores and the mask (P and the output cast live in their bytes), O,
            // the P V slice and the statistics.
            && 2 * tkv * h * 4 + h * vp * 4 + h * ns * 4 + 16 * h * 4 <= UB_WIDE_BUDGET;
        fits.then_some(FlashCfg {
            name: spec.name,
            dtype,
            d,
            dv,
            ts,
            single: false,
            tkv,
            s_bufs: 1,
            ks,
            ns,
            write_p: false,
            wide: true,
        })
    }

    /// The cache key: the configuration itself (every static parameter the kernel reads).
    pub fn key(&self) -> &Self {
        self
    }

    /// q/k columns padded to 16.
    pub fn dp(&self) -> u64 {
        round_up(self.d, 16)
    }

    /// v columns padded to 16, then to whole Dv slices.
    pub fn vp(&self) -> u64 {
        round_up(round_up(self.dv, 16), self.ns)
    }

    /// Buffers of the output cast (`[H, ns]` each): two where they fit the 128 columns the UB
    /// plan gives it, else one.
    pub fn o_cast_bufs(&self) -> u64 {
        if !self.wide && 2 * self.ns <= 128 && self.vp() > self.ns {
            2
        } else {
            1
        }
    }

    /// Queries per vector core that holds any: `ts / 2`, or `ts` with [`FlashCfg::single`].
    pub fn h(&self) -> u64 {
        if self.single {
            self.ts
        } else {
            self.ts / 2
        }
    }

    /// The Acc -> Vec mode of the scores S^T `[tkv, ts]`: split by columns (queries), or whole
    /// to AIV0.
    pub fn s_mode(&self) -> AccToVecMode {
        if self.single {
            AccToVecMode::SingleModeVec0
        } else {
            AccToVecMode::DualModeSplitN
        }
    }

    /// The Acc -> Vec mode of P V `[ts, ns]`: split by rows (queries), or whole to AIV0.
    pub fn pv_mode(&self) -> AccToVecMode {
        if self.single {
            AccToVecMode::SingleModeVec0
        } else {
            AccToVecMode::DualModeSplitM
        }
    }

    /// The first query of this AIV's share of the tile: `SubBlockIdx * H` (0 with
    /// [`FlashCfg::single`], where only AIV0 works).
    pub(super) fn first_query(&self) -> Expr {
        if self.single {
            Expr::from(0)
        } else {
            Expr::SubBlockIdx * self.h() as i64
        }
    }

    /// Score accumulators in L0C: one with the wide tiling, else two (the cube computes tile
    /// t + 1's scores into the other while tile t's are still being moved out).
    pub fn s_accs(&self) -> u64 {
        if self.wide {
            1
        } else {
            2
        }
    }

    /// Keys of each part of P^T moved into L0A for P V: half a KV tile with the wide tiling,
    /// else all of it.
    pub fn pt_keys(&self) -> u64 {
        if self.wide {
            self.tkv / 2
        } else {
            self.tkv
        }
    }

    /// Rows of the causal mask band (`2 tkv + H - 1`, H = [`FlashCfg::h`]).
    pub fn mask_rows(&self) -> u64 {
        2 * self.tkv + self.h() - 1
    }

    /// The causal mask bands `[2 mask_rows, H]` f32 (see the module docs): the keep band
    /// (+inf where open, -inf where closed), then its negation, the low band.
    pub fn mask_band(&self) -> Vec<f32> {
        let h = self.h();
        let mut band = Vec::with_capacity((2 * self.mask_rows() * h) as usize);
        for sign in [1.0f32, -1.0] {
            for x in 0..self.mask_rows() as i64 {
                for c in 0..h as i64 {
                    let open = x - c < self.tkv as i64;
                    band.push(
                        sign * if open {
                            f32::INFINITY
                        } else {
                            f32::NEG_INFINITY
                        },
                    );
                }
            }
        }
        band
    }
}

/// The fields of a row of `flash_dn`'s descriptor table (one row per block), in column order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Desc {
    /// Element offset of the tile's first query row in `q`.
    QOff,
    /// Element offset of the problem's first key row in `k`.
    KOff,
    /// Element offset of the problem's first value row in `v`.
    VOff,
    /// Element offset of the tile's first output row in `out`.
    OOff,
    /// Offset of the tile's first lse entry in `lse` (consecutive per query).
    LseOff,
    /// Queries in the tile (`1..=ts`).
    Nq,
    /// Keys the tile visits (`1..=Skv`): all, or up to its last visible one when causal.
    KvEnd,
    /// The last key the tile's first query sees (`i0 + Skv - Sq` when causal), or a value past
    /// every key (no mask).
    Diag,
}

/// Columns of the descriptor table, as a count.
pub(crate) const DESC_COUNT: usize = Desc::COUNT as usize;

impl Desc {
    /// Columns of the descriptor table.
    pub(crate) const COUNT: i64 = 8;
}
