//! The CPU simulator: runs a compiled tile program on real data, byte-exact.
//!
//! Execution model (docs/simulator.md):
//! - One cluster per block: the AIC (cube program) and two AIVs (vector program, sub-block 0/1),
//!   each with its own buffers (L1/L0A/L0B/L0C/bias/scaling on the AIC, a UB per AIV), stored in
//!   the tile's declared layout (NZ is stored as NZ).
//! - Within a core, ops run in program order (a legal serialisation when intra-core syncs are
//!   right; the race detector checks that). Across cores, cross-core flags block: the three
//!   programs are interleaved deterministically (AIC, AIV0, AIV1, each until it waits), and a
//!   state where every unfinished core waits is reported as a hang.
//! - GM: kernel arguments as host byte buffers. Each block writes through a private overlay
//!   (reading its own writes); overlays are merged in block order after all blocks ran, so results
//!   are bit-identical whatever the thread count. Scalar writes sit in each core's 64-byte-line
//!   data cache and reach GM at kernel end.
//! - Numerics: integers exact; f16/bf16 element-wise ops compute in f32 and round once (nearest
//!   even); matmul accumulates in f32 (int32 for int8); exp and the summation order are models.

pub mod cost;
mod exec;
mod gm;
pub mod hazards;
mod interp;
pub mod io;
pub mod numeric;
pub mod perfetto;
mod state;
mod tile;
pub mod timeline;
pub mod trace;

/// The launch ABI, re-exported where the simulator's callers have always found it.
pub use crate::launch::{Arg, GmInOut, GmInput, GmSlice, GmTensor};

use crate::arch::Arch;
use crate::ir::{Kernel, OpLoc, ParamId};
use rayon::prelude::*;
use thiserror::Error;

/// Why a simulation failed.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum SimError {
    /// The arguments do not match the kernel's parameters.
    #[error("bad argument `{name}`: {why}")]
    BadArg {
        /// Parameter name (or position).
        name: String,
        /// What is wrong.
        why: String,
    },
    /// A tile has no address: run `passes::compile` (memory planning) first.
    #[error(
        "tile `{0}` has no address: compile the kernel (memory planning) before simulating it"
    )]
    NotPlanned(String),
    /// An op failed at run time.
    #[error("block {block}, {core}, {loc} ({op}): {why}")]
    Op {
        /// Block index.
        block: usize,
        /// Core name (AIC, AIV0, AIV1).
        core: String,
        /// Where the op is.
        loc: OpLoc,
        /// Op name.
        op: String,
        /// What went wrong.
        why: String,
    },
    /// Every unfinished core of a block waits for a flag nobody will set.
    #[error("block {block} hangs: {waits}")]
    Hang {
        /// Block index.
        block: usize,
        /// What each core waits for.
        waits: String,
    },
    /// The run executed more steps than [`RunLimits::max_steps`] allows.
    #[error(
        "block {block} stopped after the run's step limit of {limit} steps (statements, ops and loop iterations over all blocks and cores)"
    )]
    StepLimit {
        /// The block that took the step past the limit.
        block: usize,
        /// The limit.
        limit: u64,
    },
}

/// Limits of a run, for kernels from untrusted files (`tileops sim`): a kernel whose loops run
/// for very long (or forever, with a huge dynamic bound) stops with [`SimError::StepLimit`]
/// instead of running on and growing its trace. The ops' own runs have no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunLimits {
    /// Most steps the whole run may take: every statement a core executes (op, `let`, `if`,
    /// `for`) and every loop iteration, summed over blocks and cores. `None`: no limit.
    pub max_steps: Option<u64>,
}

/// Options of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimOptions {
    /// Number of blocks (clusters) launched.
    pub block_dim: usize,
}

/// What a run reports besides the outputs written into the arguments.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunSummary {
    /// Blocks run.
    pub blocks: usize,
    /// Ops executed, summed over blocks and cores.
    pub ops_executed: u64,
}

/// Runs a compiled kernel (every allocated tile has an address) on `args`, writing its outputs
/// into the argument tensors.
///
/// The kernel should come from [`crate::passes::compile`]: the simulator checks what it touches
/// (bounds, declared ids, valid shapes) and returns errors rather than panicking, but the
/// machine's rules are the verifier's job, not re-checked here. On an error, the arguments are
/// untouched except a write-only output (one the kernel only stores into, written in place:
/// docs/simulator.md), which may hold part of the blocks' writes.
pub fn run(
    kernel: &Kernel,
    arch: &Arch,
    args: &mut [Arg],
    opts: SimOptions,
) -> Result<RunSummary, SimError> {
    run_impl(kernel, arch, args, opts, RunLimits::default(), false).map(|(s, _)| s)
}

/// [`run`], also recording every executed op with its pipe, bytes and synchronisation, for the
/// timeline, cost report and hazard checks.
pub fn run_traced<'k>(
    kernel: &'k Kernel,
    arch: &Arch,
    args: &mut [Arg],
    opts: SimOptions,
) -> Result<(RunSummary, trace::Trace<'k>), SimError> {
    run_impl(kernel, arch, args, opts, RunLimits::default(), true)
}

/// [`run_traced`] within `limits`.
pub fn run_traced_limited<'k>(
    kernel: &'k Kernel,
    arch: &Arch,
    args: &mut [Arg],
    opts: SimOptions,
    limits: RunLimits,
) -> Result<(RunSummary, trace::Trace<'k>), SimError> {
    run_impl(kernel, arch, args, opts, limits, true)
}

fn run_impl<'k>(
    kernel: &'k Kernel,
    arch: &Arch,
    args: &mut [Arg],
    opts: SimOptions,
    limits: RunLimits,
    traced: bool,
) -> Result<(RunSummary, trace::Trace<'k>), SimError> {
    gm::check_args(kernel, args)?;
    tile::check_planned(kernel)?;
    let locs = interp::OpLocs::new(kernel);
    let budget = interp::StepBudget::new(limits.max_steps);
    // Write-only outputs leave the arguments the blocks see (a placeholder of the same dtype
    // and shape, with no bytes, takes their place) and are lent to the blocks to write in place.
    let mut lent: Vec<(usize, Arg)> = Vec::new();
    for p in gm::write_only_params(kernel) {
        let i = p.0 as usize;
        let Some(placeholder) = args.get(i).and_then(Arg::as_gm).map(|t| {
            Arg::Input(GmInput {
                dtype: t.dtype,
                shape: t.shape.to_vec(),
                data: &[],
            })
        }) else {
            continue;
        };
        if args[i].is_writable() {
            lent.push((i, std::mem::replace(&mut args[i], placeholder)));
        }
    }
    let direct: Vec<gm::WriteOnly> = lent
        .iter_mut()
        .filter_map(|(i, a)| Some(gm::WriteOnly::new(ParamId(*i as u32), a.writable_bytes()?)))
        .collect();
    let results = run_blocks(
        kernel,
        arch,
        (args, &direct),
        (&locs, &budget),
        opts,
        traced,
    );
    let lines: Vec<gm::Lines> = direct.into_iter().map(gm::WriteOnly::into_lines).collect();
    for (i, a) in lent {
        args[i] = a;
    }
    let mut summary = RunSummary {
        blocks: opts.block_dim,
        ops_executed: 0,
    };
    let mut blocks = Vec::with_capacity(results.len());
    for r in results {
        let r = r?;
        summary.ops_executed += r.ops_executed;
        blocks.push(r);
    }
    let mut trace = trace::Trace::default();
    for (i, b) in blocks.into_iter().enumerate() {
        b.gm.merge_into(args, i, &lines);
        trace.blocks.extend(b.trace);
    }
    Ok((summary, trace))
}

/// Runs the blocks of a launch, each seeing `args` and writing the write-only outputs `direct`
/// in place: block 0 on the caller's thread, timed; when the other blocks, at its pace, would
/// take less than [`SERIAL_BELOW`], they run on the caller's thread too, since waking the
/// pool's sleeping workers (and waiting for them on a busy machine) costs more than they save.
/// Results come in block order either way, so the outputs do not change.
fn run_blocks<'k, 'a>(
    kernel: &'k Kernel,
    arch: &Arch,
    (args, direct): (&'a [Arg<'a>], &'a [gm::WriteOnly<'a>]),
    (locs, budget): (&interp::OpLocs<'_>, &interp::StepBudget),
    opts: SimOptions,
    traced: bool,
) -> Vec<Result<interp::BlockResult<'k>, SimError>> {
    let one = |block: usize| {
        let at = interp::BlockAt {
            block,
            block_dim: opts.block_dim,
            traced,
        };
        interp::run_block(kernel, arch, (args, direct), locs, at, budget)
    };
    let mut results = Vec::with_capacity(opts.block_dim);
    if opts.block_dim > 0 {
        let start = std::time::Instant::now();
        results.push(one(0));
        let estimate = start
            .elapsed()
            .saturating_mul(u32::try_from(opts.block_dim - 1).unwrap_or(u32::MAX));
        if estimate < SERIAL_BELOW {
            results.extend((1..opts.block_dim).map(one));
        } else {
            results.par_extend((1..opts.block_dim).into_par_iter().map(one));
        }
    }
    results
}

/// Below this estimated time for the blocks after the first, a launch runs them all on the
/// caller's thread. In the DeepSeek decode demo (2 shared cores) every decode launch (sparse
/// attention on 4 blocks, ~0.1 ms a block; reshape_and_cache on 2) falls below it, and running
/// them serially took the TileSim run from ~15,000 context switches to ~4,000 with no op slower;
/// prefill's flash attention (32 blocks, ~0.3 ms a block) still fans out.
const SERIAL_BELOW: std::time::Duration = std::time::Duration::from_millis(2);
