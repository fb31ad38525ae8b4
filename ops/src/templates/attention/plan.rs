//! The attention kernels' launch plan ([`AttnPlan`]): top-k splits, items per block and the
//! merge, for an op's [`AttnCfg`] on a target.

use super::merge::{attn_merge, merge_blocks, MergeCfg, MAX_SPLITS};
use super::split::attn_split;
use super::split::cfg::{AttnCfg, Values};
use crate::error::OpError;
use crate::limits::MAX_DIM;
use crate::registry::Launch;
use crate::runtime::{compiles, PlanTarget};

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
        // Two Q buffers wherever they fit; whether that kernel compiles is the launch's
        // question (`compiling_cfg`), so the plan stays a function of its arguments.
        if cfg.q_double_fits() {
            cfg.qbufs = 2;
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
            kernel: attn_split(&compiling_cfg(self.cfg.name, &self.cfg)),
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

/// The split kernel's shape as it is launched: `cfg`, or `cfg` with one Q buffer where the
/// plan's two ([`AttnCfg::qbufs`]) make a kernel the compiler refuses (the sync pass may run out
/// of event ids for the unrolled item loop: e.g. D 64 bf16 needs 9 MTE1 -> M ids where there
/// are 8). The trial is the runtime's: one compile per shape, its outcome cached, so a launch
/// of the accepted kernel finds it compiled and a refused shape is not compiled again.
pub(crate) fn compiling_cfg(op: &'static str, cfg: &AttnCfg) -> AttnCfg {
    if cfg.qbufs > 1 && !compiles(op, cfg.key(), || attn_split(cfg)) {
        AttnCfg {
            qbufs: 1,
            ..cfg.clone()
        }
    } else {
        cfg.clone()
    }
}

/// Whether the split kernel writes the result itself ([`AttnCfg::direct`]) and the merge is not
/// launched: one split (its weight is exp(lse - lse) = 1 exactly and the weights sum to 1, so
/// o and lse pass through bit for bit; the kernel casts o to the data dtype as the merge
/// would), no sink. What is left of the merge, lse = +inf on rows with no valid index, the
/// host does while reading the result; the device plan takes this only for a dense call
/// (`Values::OwnCache`: every row has at least one token, so there is nothing to fix), so a kernel
/// package and a profile stay complete in themselves. On the device this saves the merge
/// launch (dense decode, B 8, H 32, context 2048, bf16: 1.44 us of 57.60).
fn merge_is_identity(target: PlanTarget, cfg: &AttnCfg, splits: usize, sink: bool) -> bool {
    splits == 1 && !sink && (target == PlanTarget::Cpu || cfg.values == Values::OwnCache)
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
