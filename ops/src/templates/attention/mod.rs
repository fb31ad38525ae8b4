//! The attention kernels shared by sparse (top-k) and dense (GQA) paged attention: the split
//! kernel (`split/`: its static shape `cfg.rs`, what its programs share `shared.rs`, the cube
//! and vector programs, the builder), the merge kernel (`merge.rs`), the launch plan
//! (`plan.rs`) and the host side (`host.rs`). Every arrow points one way: `plan` and `host`
//! use `split` and `merge`, which use only `templates::common`. The flash ops' DN-mode kernel,
//! which has one consumer, lives in its op's folder (`flash_attention/dn/`).
//!
//! # `attn_split` (one kernel definition, several consumers)
//!
//! One work item = one (batch row `b`, head tile `ht`, top-k split `sp`); `item = (b * nht +
//! ht) * splits + sp`. A block runs one item (`item = block`) or, where the device plan folds
//! several waves into each block (`AttnCfg::ipb`), items `block * ipb ..` one after another, so
//! that one item's gathers overlap the previous one's tail. A head tile is `hg` query heads
//! (padded to `th`, a multiple of 32, so each AIV owns `r = th / 2` rows); all of them share
//! one gathered K (and V) tile per chunk, so K is read from GM once per chunk for the whole
//! head tile. The CPU plan's single-vector-core head tile (`AttnCfg::single`, head tiles of at
//! most 64 rows, kernel `<name>_single_<dtype>`) pads to 16 rows instead and moves the scores
//! and P V whole to AIV0 (`SingleModeVec0`, `r = th`, P into L1 without an offset); AIV1 skips
//! every data op and keeps only the channel ops, so the sync pass pairs the same flags on
//! both AIVs.
//!
//! ```text
//! cube   MTE2  Q [hv, Dqk] -> q_l1 Mat NZ [th, dp] (zero padded)
//!        per chunk c of the split (slot s = local chunk % bufs; bufs = 2 (ping-pong) on the
//!        device, 1 in the CPU plan; which flags the sync pass inserts: "Sync ownership"):
//!        MTE2  gather_in_l1: nv rows (indices[b, c*chunk ..], block table row b) of `dqk`
//!              columns from column `ht * head_col_stride` -> k_l1[s] Mat NZ [chunk, dp]
//!              (V likewise into v_l1[s] when the kernel has a separate V cache); zero pad
//!        per K slice j: MTE1 q_l1[:, j ks..] -> q_l0[j%bufs] Left; k_l1[s] seen as ZN [dp, chunk]
//!              (= K^T, same bytes) rows j ks.. -> kt_l0[j%bufs] Right; M s_acc[s] (+)= q · kt
//!        FIX   s_acc[s] -> s_ub (DualModeSplitM: AIV i gets heads i*r ..; single: all to AIV0)
//!                                                                                 -> channel S
//!        MTE1  (channel P) p_l1[c % pbufs] [th, chunk] -> p_l0 Left (pbufs = 2 in the CPU
//!              plan where L1 has room, else 1)
//!        per V slice j: MTE1 V[:, j ns..] (NZ -> ZN) -> v_l0[..%bufs] Right; M pv_acc[..%2] = P · V
//!              FIX pv_acc -> pv_ub (SplitM)                                     -> channel PV
//! vector (each AIV: r heads, f32): s *= scale; tail chunk: columns >= nv := -inf;
//!        m_new = max(m, rowmax s); alpha = exp(m - m_new); s = exp(s - m_new);
//!        l = l alpha + rowsum s; P = cast(s) ND -> NZ -> p_l1[c % pbufs] rows sub*r..
//!        (channel P);
//!        O_j = O_j alpha + PV_j.  End: l = max(l, 1) + 0 * (low + l) (low: the split's lowest
//!        score, taken before masking: NaN or ±inf data make the row NaN, docs/ops.md),
//!        o = O / l, lse = m + ln(l);
//!        MTE3 o -> o_ws[sp, b*H + h, :], lse -> lse_ws[sp, b*H + h].
//! ```
//!
//! `m` starts at -1e30 (finite), so a split with no token writes o = 0 and lse ~ -1e30, which
//! the merge weighs by exp(-1e30 - M) = 0. The cube <-> vector handoffs are the channels S, P
//! and PV.
//!
//! # Sync ownership
//!
//! The sync pass (`tile_backend::passes::sync`) owns every cross-core flag (it lowers the
//! channels S, P and PV) and every intra-core dependency a kernel leaves unordered; it keeps
//! hand-written flags as they are and adds only what they do not cover.
//!
//! - `attn_split` leaves to the pass the L0 slots' flags (M <-> MTE1: `q_l0` / `kt_l0` /
//!   `v_l0` slot free and loaded, `p_l0`) and all of the vector's (`p_nz` free again once its
//!   move to L1 has read it, P written before that move, the partial result written before
//!   its stores). With both loop halves of `ping_pong` in one body and the slots constant in
//!   each half, the pass sees each buffer apart and pairs its uses per slot; where a
//!   dependency crosses the channels (an acquire standing for the cube's next writes) it
//!   orders the acquire after this core's earlier accesses of the shared tiles, so no pair
//!   loses a signal. Measured against the hand-written flags they replaced (950 estimate of
//!   the DeepSeek decode step, B = 4, top-k 2048): bf16 split kernel 37997 cycles against
//!   38125, f32 71711 against 71351 (+0.5%, the step +0.4%); zero hazards in the traced
//!   tests; the same bits (flags do not change what is computed).
//! - `cube.rs` still writes two groups by hand, each one event per buffer, pre-set before the
//!   loop and drained after it: the gathered L1 tile `k_l1[s]` (MTE1 -> MTE2 free, MTE2 ->
//!   MTE1 loaded; event 2 for Q) and the Acc slots `s_acc[s]` / `pv_acc[s]` (FIX -> M free,
//!   M -> FIX ready; events 0, 1 / 2, 3). With the pass owning the gathered tiles, its pairs
//!   are hazard-free but let the next chunk's gather overlap less: the f32 split kernel's
//!   estimate rises 7% (76454 cycles against 71351; bf16 unchanged). With the pass owning the
//!   Acc slots too, the f32 device plan at the DeepSeek shape (B = 4, top-k 1024) loses an
//!   M -> FIX signal in the traced test `sparse_deepseek_shape_b1`.
//! - With several work items per block (the device plan), `cube.rs` also writes the chain
//!   that ends each item (MTE1 -> FIX, then FIX -> M event 4 and FIX -> MTE1 event 7): it
//!   orders the pass's next pre-sets of its L0-slot pairs after this item's final waits, which
//!   a barrier of the cube's pipes did before, and leaves MTE2 free to load the next item.
//!   With two Q buffers (`AttnCfg::qbufs`) each has its own Q-loaded event (2, 3).
//! - `attn_merge` (`merge.rs`) still writes the flags of its `o_i` buffers by hand: V -> MTE2
//!   / MTE2 -> V per group of up to 4 part buffers (ping-pong over the groups of splits, one
//!   event id per group, pre-set before the loads and drained after the loop), and one MTE2 ->
//!   V pair for its lse and fix loads: a flag set on MTE2 waits for the DMAs before it to land,
//!   so each one exposes the DMA latency once, and grouping the loads exposes it once per
//!   group (DeepSeek decode step, bf16: 53447 -> 51421 cycles). The pass's own pairs there are hazard-free but overlap
//!   less: re-measured at the DeepSeek decode step (`examples/sparse_attention`), the whole
//!   step's 950 estimate rises from 53447 to 54356 cycles in bf16 (+1.7%) and from 87586 to
//!   88495 in f32 (+1.0%), so these stay until the pass pairs the two `o_i` buffers as
//!   tightly. Its V -> MTE3 flags before the stores are the pass's (the same estimates to the
//!   cycle).
//! - The flash kernel (`flash_attention/dn/`) leaves its P tile to the pass (estimates unchanged to the
//!   cycle) and keeps by hand its L0 slots (pass-owned, its per-cluster row loop loses an
//!   MTE1 -> FIX signal and the estimates rise up to 2.7%), its Acc slots and the mask load
//!   under a runtime `if` (the pass hoists a pair out of the `if`, and when the branch is not
//!   taken nothing orders its next set after its wait); its module doc gives the
//!   figures.
//!
//! # `attn_merge` (vector only)
//!
//! Each AIV owns `hm` consecutive global rows `g = b*H + h`: M = max_i lse_i, w_i = exp(lse_i -
//! M), s = sum w_i, lse = M + ln s, out = sum_i (w_i / s) o_i; sink: out *= 1 / (1 + exp(sink -
//! lse)); lse = lse + fix where the host's `fix` row is +inf for a row with no valid index
//! (its out is already 0) and 0 otherwise (an add, not a max, so a NaN lse stays NaN); out
//! cast to the data dtype. With one split and no sink that is the identity but for the +inf
//! and the cast, so the plan has the split kernel write the result in the data dtype itself
//! (`AttnCfg::direct`) and does not launch the merge: on the CPU always, on the device for a
//! dense call, where every row has a token (`merge_is_identity`).
//!
//! ```text
//! vector (each AIV: hm rows g0..): MTE2 lse_ws -> lse_parts ND [splits, hm] (part i of row g in
//!        column g); M = colmax, w = exp(lse_parts - M) (column broadcast), s = colsum w,
//!        all ND [1, hm]; per group of up to 4 parts (two groups of buffers): MTE2 o_ws[i] ->
//!        o_i ND [hm, vp] for each part i of the group under one flag; then per part,
//!        w_i = row i of w, seen as DN [hm, 1]; acc += o_i * w_i (row broadcast).
//!        acc /= s (as DN [hm, 1]); lse = M + ln s; sink; lse = lse + fix; MTE3 out, lse.
//! ```

mod host;
mod merge;
mod plan;
mod split;
#[cfg(test)]
mod tests;

pub(crate) use host::{recycle_result, run_attention, AttnInputs};
pub(crate) use plan::{check_rows, plan, AttnPlan};
pub(crate) use split::cfg::{AttnCfg, AttnSpec, Values};
