//! The attention kernels' static shape ([`AttnCfg`]) and launch plan ([`AttnPlan`]).

use super::attn_split;
use super::merge::{attn_merge, merge_blocks, MergeCfg};
use crate::error::OpError;
use crate::limits::MAX_DIM;
use crate::registry::Launch;
use crate::runtime::{compiled_keyed, DebugKey, PlanTarget};
use tile_backend::ir::{AccToVecMode, DType};

/// The running max a head starts with (finite, so empty splits stay NaN-free).
pub(crate) const M_INIT: f64 = -1e30;
/// Largest number of top-k splits the merge kernel takes (rows of its lse tile).
pub(crate) const MAX_SPLITS: u64 = 32;
/// Largest head tile the CPU plan hands whole to AIV0 ([`AttnCfg::single`]): 64 rows, as many
/// as one AIV holds in the widest split head tile (128 heads), so its UB tiles are no larger.
pub(crate) const SINGLE_MAX_ROWS: u64 = 64;

pub(crate) use tile_backend::ir::round_up;

/// Static shape of one attention kernel (its specialisation key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AttnCfg {
    /// Kernel name prefix.
    pub name: &'static str,
    /// Data dtype (q, caches, P).
    pub dtype: DType,
    /// Query heads per batch row (rows of q per batch entry).
    pub heads: u64,
    /// Query heads per head tile.
    pub hg: u64,
    /// Head tiles (`ceil(heads / hg)`).
    pub nht: u64,
    /// Columns gathered for K (the contraction).
    pub dqk: u64,
    /// Output columns (V width).
    pub v_dim: u64,
    /// Columns of a cache row.
    pub kv_cols: u64,
    /// Cache column offset per head tile (dense GQA: D; sparse: 0).
    pub head_col_stride: u64,
    /// V comes from its own cache (dense) instead of the first columns of K (sparse).
    pub separate_v: bool,
    /// Tokens per cache block.
    pub block_size: u64,
    /// Padded head-tile rows: a multiple of 32 (each AIV owns `th / 2` rows, whole 16-row
    /// fractals), or of 16 with [`AttnCfg::single`].
    pub th: u64,
    /// The single-vector-core head tile of the CPU plan (head tiles of at most
    /// [`SINGLE_MAX_ROWS`] rows): `th` is `hg` rounded up to 16, not 32, the scores and P V move
    /// whole to AIV0 (`SingleModeVec0`) and P goes into L1 without an offset; AIV1 keeps only
    /// the channel protocol. A target that runs a block's instructions one after another then
    /// computes no padding rows beyond the cube's 16-row fractal (16 heads: half the matmul rows
    /// and none of a second AIV's vector work) and issues each vector op once, not twice. The
    /// device plan keeps both AIVs busy (`DualModeSplitM`).
    pub single: bool,
    /// Top-k tokens per chunk (rows of a gathered tile).
    pub chunk: u64,
    /// K slice width of Q K^T (`bufs` Q slices fit L0A beside P).
    pub ks: u64,
    /// V slice width of P V (`bufs` V slices fit L0B beside the K^T slices).
    pub ns: u64,
    /// Buffers per gathered L1 tile and per L0A/L0B operand tile: 2 (ping-pong: the next
    /// chunk's gather and the next slice's move overlap this one's matmul) or 1 (a target that
    /// runs a block's instructions one after another, where buffers twice the size halve the
    /// chunks and slices instead).
    pub bufs: u64,
    /// Buffers of P in L1: 2 where L1 has room and the target runs a block's instructions one
    /// after another (the simulator's CPU plan), so that writing the next chunk's P never meets
    /// the L1 -> L0A move of the previous one still pending in the simulator (which would then
    /// have to make it); 1 otherwise (the device plan is unchanged).
    pub pbufs: u64,
    /// Work items (batch row, head tile, split) per block, one after another: 1 but where the
    /// device plan would run its items in more than one wave ([`plan`]); then each block loops
    /// over `ipb` consecutive items, so one item's gathers overlap the previous one's last
    /// chunk, normalisation and stores instead of waiting for the next wave.
    pub ipb: u64,
    /// Buffers of Q in L1: 1, or 2 where the device plan runs several items per block, L1 has
    /// room and the kernel still compiles (see [`plan`]): the cube then unrolls its item loop
    /// by two, each half with its own Q, so the next item's Q load need not wait for the
    /// previous item's last Q K^T moves.
    pub qbufs: u64,
    /// The split kernel writes the call's result itself, `o` in the data dtype, and no merge
    /// kernel runs ([`plan`]): one top-k split (its merge weight is exp(lse - lse) = 1), no
    /// sink, and either a CPU run (the host sets lse = +inf on rows with no valid index) or a
    /// dense call, where every row has a token. The o written is the merge's bit for bit (its
    /// `0 + o * 1` turns a -0 into +0, and so does the kernel's `o + 0` before the cast).
    pub direct: bool,
}

/// What an attention op asks of the split kernel, field by field: [`AttnCfg::new`] chooses
/// the tiling from it. Each op fills it in its `plan` (`sparse_attention::kernel::plan`,
/// `paged_attention::kernel::plan`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AttnSpec {
    /// Kernel name prefix.
    pub name: &'static str,
    /// Data dtype (q, caches, P).
    pub dtype: DType,
    /// Query heads per batch row.
    pub heads: u64,
    /// Query heads per head tile (clamped to `1..=128`).
    pub hg: u64,
    /// Columns gathered for K (the contraction).
    pub dqk: u64,
    /// Output columns (V width).
    pub v_dim: u64,
    /// Columns of a cache row.
    pub kv_cols: u64,
    /// Cache column offset per head tile (dense GQA: D; sparse: 0).
    pub head_col_stride: u64,
    /// V comes from its own cache (dense) instead of the first columns of K (sparse).
    pub separate_v: bool,
    /// Tokens per cache block.
    pub block_size: u64,
    /// Valid tokens of the call's fullest row where the caller knows them before planning (a
    /// dense call's longest context), else 0: on the CPU plan a dense call's chunk grows only
    /// while it is shorter than that.
    pub tokens: u64,
    /// Whether the target overlaps a block's pipes (the device, and profiling for it): then
    /// the gathered and L0 operand tiles are ping-ponged; otherwise (the simulator's CPU runs)
    /// they are buffered once and sized to the room that leaves
    /// ([`PlanTarget::pipes_overlap`]).
    pub double_buffer: bool,
}

impl AttnCfg {
    /// Chooses the tiling for `spec`: head tile, chunk, K and V slices within L1/L0/UB.
    pub fn new(spec: AttnSpec) -> Self {
        let AttnSpec {
            name,
            dtype,
            heads,
            hg,
            dqk,
            v_dim,
            kv_cols,
            head_col_stride,
            separate_v,
            block_size,
            tokens,
            double_buffer,
        } = spec;
        let es = dtype.size_bytes();
        let hg = hg.clamp(1, 128);
        let single = !double_buffer && round_up(hg, 16) <= SINGLE_MAX_ROWS;
        let th = if single {
            round_up(hg, 16)
        } else {
            round_up(hg, 32)
        };
        let dp = round_up(dqk, 16);
        let vp = round_up(v_dim, 16);
        let bufs = if double_buffer { 2 } else { 1 };
        // Chunk: as large as L1 allows (Q + `bufs` K (and V) tiles + P), at most 128 (64 for
        // f32).
        let mut chunk = if es == 2 { 128 } else { 64 };
        // On the device, a narrow head tile takes longer chunks, up to the score-tile area of
        // the widest one (`th * chunk * es` <= 128 x 128 x 2 bytes: S, P and their Acc / UB /
        // L0A tiles stay within the sizes that case uses) and 256 tokens: each gathered tile's
        // MTE2 -> MTE1 flag waits for the DMA latency of its last row before the next gather
        // may start on MTE2, so fewer, larger gathers expose that latency less often. A dense
        // call (`separate_v`: every row a whole context) does the same on the CPU plan while
        // the chunk is shorter than its longest context: each chunk's fixed work (the Fixpipe
        // moves, the softmax update of the output, the flags and statements) is then paid a
        // quarter (f32) or half (bf16) as often, and a short context is not padded further.
        if double_buffer || separate_v {
            while chunk < 256
                && th * (2 * chunk) * es <= 128 * 128 * 2
                && (double_buffer || chunk < tokens)
            {
                chunk *= 2;
            }
        }
        let l1 = |c: u64| {
            let kv = if separate_v { 2 } else { 1 } * bufs * c * dp * es;
            th * dp * es + kv + th * c * es
        };
        while chunk > 16 && l1(chunk) > 500 * 1024 {
            chunk /= 2;
        }
        let pbufs = if !double_buffer && l1(chunk) + th * chunk * es <= 500 * 1024 {
            2
        } else {
            1
        };
        // K slice: `bufs` Q slices + P in L0A (64 KiB) ...
        let l0a = 64 * 1024 - th * chunk * es;
        // ... and the K^T slices take at most half of L0B (64 KiB), leaving room for V slices.
        let ks_max = (l0a / (bufs * th * es))
            .min(32 * 1024 / (bufs * chunk * es))
            .max(16)
            / 16
            * 16;
        let ks = best_slice(dp, ks_max);
        // V slice: K^T slices + V slices in L0B (64 KiB); at most 128 columns (UB).
        let l0b = 64 * 1024 - bufs * ks * chunk * es;
        let ns_max = (l0b / (bufs * chunk * es)).clamp(16, 128) / 16 * 16;
        let ns = best_slice(vp, ns_max);
        AttnCfg {
            name,
            dtype,
            heads,
            hg,
            nht: heads.div_ceil(hg),
            dqk,
            v_dim,
            kv_cols,
            head_col_stride,
            separate_v,
            block_size,
            th,
            single,
            chunk,
            ks,
            ns,
            bufs,
            pbufs,
            ipb: 1,
            qbufs: 1,
            direct: false,
        }
    }

    /// The cache key (every static parameter the kernel reads).
    pub fn key(&self) -> impl std::fmt::Display + '_ {
        DebugKey("", self)
    }

    /// Whether Q may take two L1 buffers ([`AttnCfg::qbufs`]): a device block running several
    /// work items, with room in L1 for a second Q beside the gathered tiles and P.
    fn q_double_fits(&self) -> bool {
        let es = self.dtype.size_bytes();
        let q = self.th * self.dp() * es;
        let kv = if self.separate_v { 2 } else { 1 } * self.bufs * self.chunk * self.dp() * es;
        let p = self.pbufs * self.th * self.chunk * es;
        self.ipb > 1 && self.bufs > 1 && 2 * q + kv + p <= 500 * 1024
    }

    /// Q/K columns padded to a multiple of 16.
    pub fn dp(&self) -> u64 {
        round_up(self.dqk, 16)
    }

    /// V columns padded to a multiple of 16.
    pub fn vp(&self) -> u64 {
        round_up(self.v_dim, 16)
    }

    /// Head rows per AIV that holds any: `th / 2`, or `th` with [`AttnCfg::single`].
    pub fn r(&self) -> u64 {
        if self.single {
            self.th
        } else {
            self.th / 2
        }
    }

    /// How the Fixpipe hands the scores and P V to the vector cores: whole to AIV0 with
    /// [`AttnCfg::single`], else split by rows.
    pub fn acc_mode(&self) -> AccToVecMode {
        if self.single {
            AccToVecMode::SingleModeVec0
        } else {
            AccToVecMode::DualModeSplitM
        }
    }
}

/// The largest multiple of 16 that divides `total` (a multiple of 16) and is at most `max`.
pub(crate) fn best_slice(total: u64, max: u64) -> u64 {
    let mut s = max.min(total) / 16 * 16;
    while s > 16 && !total.is_multiple_of(s) {
        s -= 16;
    }
    s.max(16)
}

/// Top-k splits and chunks per split for `batch * nht` work items of up to `max_chunks` chunks:
/// enough splits to occupy the `concurrent` blocks the target runs at once
/// ([`PlanTarget::concurrent_blocks`]), none of them empty.
pub(crate) fn choose_splits(items: usize, max_chunks: usize, concurrent: usize) -> (usize, usize) {
    let max_chunks = max_chunks.max(1);
    let want = concurrent
        .max(1)
        .div_ceil(items.max(1))
        .clamp(1, MAX_SPLITS as usize);
    let splits = want.min(max_chunks);
    let cps = max_chunks.div_ceil(splits);
    (max_chunks.div_ceil(cps), cps)
}

/// How the split kernel is launched for `batch` rows whose fullest row counts `longest` valid
/// tokens on a target running `concurrent` blocks at once: top-k `splits`, chunks per split
/// `cps` ([`choose_splits`] over `batch * nht` work items of that row's chunks) and `blocks =
/// batch * nht * splits`; part of the call's [`AttnPlan`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SplitPlan {
    pub splits: usize,
    pub cps: usize,
    pub blocks: u64,
}

/// The [`SplitPlan`] of a call; a `batch_invariant` one chooses its splits as for a single row
/// (the blocks still cover every row), so a row's split and chunking do not depend on the batch.
pub(crate) fn split_plan(
    cfg: &AttnCfg,
    batch: usize,
    longest: usize,
    batch_invariant: bool,
    concurrent: usize,
) -> SplitPlan {
    let nht = cfg.nht as usize;
    let max_chunks = longest.div_ceil(cfg.chunk as usize);
    let items = if batch_invariant { nht } else { batch * nht };
    let (splits, cps) = choose_splits(items, max_chunks, concurrent);
    SplitPlan {
        splits,
        cps,
        blocks: batch as u64 * nht as u64 * splits as u64,
    }
}

/// Work items per block for `items` items on a target running `concurrent` blocks at once:
/// where the items take more than one wave, the wave count, rounded down to a divisor of
/// `items` (every block then runs the same number of items, so the kernel needs no bound
/// check); 1 otherwise.
pub(crate) fn items_per_block(items: u64, concurrent: u64) -> u64 {
    let mut ipb = items / concurrent.max(1);
    while ipb > 1 && !items.is_multiple_of(ipb) {
        ipb -= 1;
    }
    ipb.max(1)
}

/// The launch plan of one attention call: the kernel shape for its target, the split kernel's
/// grid and, unless it would hand the split result back unchanged, the merge kernel's. Each op
/// makes it with its own `plan(shape, target)` (`sparse_attention::kernel::plan`,
/// `paged_attention::kernel::plan`) and every consumer launches from that one value: the host
/// ([`run_attention`](super::run_attention)) and the `emit --op` registry ([`crate::registry`],
/// through [`AttnPlan::launches`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AttnPlan {
    /// The split kernel's static shape (its tiling depends on the target).
    pub cfg: AttnCfg,
    /// Batch rows.
    pub batch: usize,
    /// Valid tokens of the fullest row.
    pub longest: usize,
    /// The split kernel's splits, chunks per split and blocks.
    pub split: SplitPlan,
    /// Global rows (`batch * heads`).
    pub rows: usize,
    /// The merge kernel's shape and blocks; `None` where it would be the identity (see
    /// `merge_is_identity`).
    pub merge: Option<(MergeCfg, usize)>,
}

/// Keys of the two-Q-buffer kernels the compiler refused (the device plan then keeps one
/// buffer): each is tried once per process.
pub(crate) static ONE_Q_ONLY: std::sync::Mutex<std::collections::BTreeSet<String>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// The plan of an attention call of `batch` rows whose fullest row counts `longest` valid
/// tokens, with or without a `sink`, on `target` (`cfg` is the kernel shape made for the same
/// target); `batch_invariant` as in [`split_plan`].
pub(crate) fn plan(
    mut cfg: AttnCfg,
    batch: usize,
    longest: usize,
    sink: bool,
    batch_invariant: bool,
    target: PlanTarget,
) -> AttnPlan {
    let mut split = split_plan(
        &cfg,
        batch,
        longest,
        batch_invariant,
        target.concurrent_blocks(),
    );
    cfg.direct = merge_is_identity(target, &cfg, split.splits, sink);
    if target.pipes_overlap() {
        cfg.ipb = items_per_block(split.blocks, target.concurrent_blocks() as u64);
        split.blocks /= cfg.ipb;
        // Two Q buffers where they fit, unless the sync pass then runs out of event ids (the
        // unrolled item loop doubles its L0-slot pairs: e.g. D 64 bf16 needs 9 MTE1 -> M ids
        // where there are 8); the compiled kernel is cached for the launch, a refusal in
        // `ONE_Q_ONLY` so that the shape is not compiled again on every call.
        if cfg.q_double_fits() {
            let two = AttnCfg {
                qbufs: 2,
                ..cfg.clone()
            };
            let refused = || {
                ONE_Q_ONLY
                    .lock()
                    .is_ok_and(|set| set.contains(&two.key().to_string()))
            };
            if !refused() {
                if compiled_keyed(cfg.name, two.key(), || attn_split(&two)).is_ok() {
                    cfg = two;
                } else if let Ok(mut set) = ONE_Q_ONLY.lock() {
                    set.insert(two.key().to_string());
                }
            }
        }
    }
    let rows = batch * cfg.heads as usize;
    let merge = (!cfg.direct).then(|| {
        (
            MergeCfg {
                dtype: cfg.dtype,
                v_dim: cfg.v_dim,
                sink,
            },
            merge_blocks(rows),
        )
    });
    AttnPlan {
        cfg,
        batch,
        longest,
        split,
        rows,
        merge,
    }
}

impl AttnPlan {
    /// The plan's launches as `tileops emit --op` writes them: the split kernel with the
    /// scalars the shape fixes, then the merge kernel when the plan has one.
    pub(crate) fn launches(&self) -> Vec<Launch> {
        let split = self.split;
        let mut launches = vec![Launch {
            kernel: attn_split(&self.cfg),
            block_dim: split.blocks,
            scalars: vec![
                ("batch", self.batch as i64),
                ("topk", self.longest as i64),
                ("splits", split.splits as i64),
                ("chunks_per_split", split.cps as i64),
            ],
        }];
        if let Some((mcfg, blocks)) = &self.merge {
            launches.push(Launch {
                kernel: attn_merge(mcfg),
                block_dim: *blocks as u64,
                scalars: vec![("rows", self.rows as i64), ("splits", split.splits as i64)],
            });
        }
        launches
    }
}

/// Whether the split kernel writes the result itself ([`AttnCfg::direct`]) and the merge is not
/// launched: one split (its weight is exp(lse - lse) = 1 exactly and the weights sum to 1, so
/// o and lse pass through bit for bit; the kernel casts o to the data dtype as the merge
/// would), no sink. What is left of the merge, lse = +inf on rows with no valid index, the
/// host does while reading the result; the device plan takes this only for a dense call
/// (`separate_v`: every row has at least one token, so there is nothing to fix), so a kernel
/// package and a profile stay complete in themselves. On the device this saves the merge
/// launch (dense decode, B 8, H 32, context 2048, bf16: 1.44 us of 57.60).
fn merge_is_identity(target: PlanTarget, cfg: &AttnCfg, splits: usize, sink: bool) -> bool {
    splits == 1 && !sink && (target == PlanTarget::Cpu || cfg.separate_v)
}

/// The rule on an attention call's rows: `batch * heads` at most [`MAX_DIM`] (the kernels take
/// it as a 32-bit scalar). It also bounds `batch * head tiles` (< 2^31) and, with at most 32
/// splits, the blocks in u64. (The code generator refuses a block_dim above 2^32 - 1.)
pub(crate) fn check_rows(op: &'static str, batch: usize, heads: usize) -> Result<(), OpError> {
    match batch.checked_mul(heads) {
        Some(rows) if rows <= MAX_DIM => Ok(()),
        _ => Err(OpError::invalid(
            op,
            "batch",
            format!(
                "batch {batch} x {heads} heads must be at most {MAX_DIM} rows (the kernels take \
                 it as a 32-bit scalar)"
            ),
        )),
    }
}
