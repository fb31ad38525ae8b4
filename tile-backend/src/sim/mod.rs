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

mod core;
pub mod cost;
mod exec;
mod fault;
mod gm;
pub mod hazards;
pub mod host;
mod interp;
pub mod io;
pub mod numeric;
pub mod perfetto;
mod program;
mod state;
mod tile;
pub mod timeline;
pub mod trace;

/// The launch ABI, re-exported where the simulator's callers have always found it.
pub use crate::launch::{Arg, GmInOut, GmInput, GmSlice, GmTensor};
pub use fault::SimFault;
pub use program::Program;

use crate::arch::Arch;
use crate::ir::{Kernel, OpLoc, ParamId};
use smallvec::SmallVec;
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
    #[error("block {block}, {core}, {loc} ({op}): {fault}")]
    Op {
        /// Block index.
        block: usize,
        /// Core name (AIC, AIV0, AIV1).
        core: &'static str,
        /// Where the op is.
        loc: OpLoc,
        /// Op name (`let`, `for` or `if` for a statement's expression).
        op: &'static str,
        /// What went wrong.
        #[source]
        fault: SimFault,
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
///
/// The kernel is lowered on every call, whether or not it went through
/// [`crate::passes::compile`] (a hand-written or edited one is checked as it runs); a caller that
/// launches the same compiled kernel again keeps its [`Program`] ([`Program::lower`]) and calls
/// [`run_program`].
pub fn run(
    kernel: &Kernel,
    arch: &Arch,
    args: &mut [Arg],
    opts: SimOptions,
) -> Result<RunSummary, SimError> {
    run_program(&Program::lower_any(kernel, arch)?, args, opts)
}

/// [`run`] of a lowered kernel.
pub fn run_program(
    program: &Program<'_, '_>,
    args: &mut [Arg],
    opts: SimOptions,
) -> Result<RunSummary, SimError> {
    run_impl(program, args, opts, RunLimits::default(), false).map(|(s, _)| s)
}

/// [`run`], also recording every executed op with its pipe, bytes and synchronisation, for the
/// timeline, cost report and hazard checks.
pub fn run_traced<'k>(
    kernel: &'k Kernel,
    arch: &Arch,
    args: &mut [Arg],
    opts: SimOptions,
) -> Result<(RunSummary, trace::Trace<'k>), SimError> {
    run_program_traced(&Program::lower_any(kernel, arch)?, args, opts)
}

/// [`run_traced`] of a lowered kernel.
pub fn run_program_traced<'k>(
    program: &Program<'k, '_>,
    args: &mut [Arg],
    opts: SimOptions,
) -> Result<(RunSummary, trace::Trace<'k>), SimError> {
    run_impl(program, args, opts, RunLimits::default(), true)
}

/// [`run_traced`] within `limits`.
pub fn run_traced_limited<'k>(
    kernel: &'k Kernel,
    arch: &Arch,
    args: &mut [Arg],
    opts: SimOptions,
    limits: RunLimits,
) -> Result<(RunSummary, trace::Trace<'k>), SimError> {
    run_impl(&Program::lower_any(kernel, arch)?, args, opts, limits, true)
}

fn run_impl<'k>(
    program: &Program<'k, '_>,
    args: &mut [Arg],
    opts: SimOptions,
    limits: RunLimits,
    traced: bool,
) -> Result<(RunSummary, trace::Trace<'k>), SimError> {
    let kernel = program.kernel;
    gm::check_args(kernel, args)?;
    let budget = interp::StepBudget::new(limits.max_steps);
    // Write-only outputs leave the arguments the blocks see (a placeholder of the same dtype
    // and shape, with no bytes, takes their place) and are lent to the blocks to write in place.
    let write_only = &program.write_only;
    check_outputs(kernel, args, write_only)?;
    let mut lent: SmallVec<[(usize, Arg); 4]> = SmallVec::new();
    for p in write_only {
        let i = p.0 as usize;
        let Some(a) = args.get_mut(i) else {
            continue;
        };
        let Some((dtype, _, _)) = a.gm_shape() else {
            continue;
        };
        if a.is_writable() {
            // The placeholder takes the lent argument's shape (moved, not copied: it moves back
            // when the argument returns below).
            let shape = shape_mut(a).map(std::mem::take).unwrap_or_default();
            let placeholder = Arg::Input(GmInput {
                dtype,
                shape,
                data: &[],
            });
            lent.push((i, std::mem::replace(a, placeholder)));
        }
    }
    // Every lent `Arg::Output` becomes a `WriteOnly` (that arm cannot be skipped), which
    // initialises all its bytes when it ends (`into_lines`).
    let direct: SmallVec<[gm::WriteOnly; 4]> = lent
        .iter_mut()
        .filter_map(|(i, a)| {
            let p = ParamId(*i as u32);
            Some(match a {
                Arg::Output(o) => gm::WriteOnly::new_uninit(p, &mut *o.data),
                a => gm::WriteOnly::new(p, a.writable_bytes()?),
            })
        })
        .collect();
    let results = run_blocks(program, (args, &direct), &budget, opts, traced);
    let lines: SmallVec<[gm::Lines; 4]> =
        direct.into_iter().map(gm::WriteOnly::into_lines).collect();
    for (i, mut a) in lent {
        if let (Some(back), Some(placeholder)) = (shape_mut(&mut a), shape_mut(&mut args[i])) {
            std::mem::swap(back, placeholder);
        }
        args[i] = match a {
            // SAFETY: its `WriteOnly` initialised every byte the blocks did not write in place
            // (`into_lines` above), and the blocks' in-place writes initialised the rest.
            Arg::Output(o) => Arg::InOut(unsafe { o.assume_init() }),
            a => a,
        };
    }
    // A failed block fails the launch before any block's writes are merged.
    if let Some(Err(e)) = results.iter().find(|r| r.is_err()) {
        return Err(e.clone());
    }
    let mut summary = RunSummary {
        blocks: opts.block_dim,
        ops_executed: 0,
    };
    let mut trace = trace::Trace::default();
    for (i, b) in results.into_iter().enumerate() {
        let Ok(b) = b else { continue };
        summary.ops_executed += b.ops_executed;
        b.gm.merge_into(args, i, &lines);
        trace.blocks.extend(b.trace);
    }
    lines.into_iter().for_each(gm::Lines::recycle);
    Ok((summary, trace))
}

/// The shape of a tensor argument, to move in and out of a placeholder.
fn shape_mut<'x>(a: &'x mut Arg<'_>) -> Option<&'x mut Vec<usize>> {
    match a {
        Arg::Tensor(t) => Some(&mut t.shape),
        Arg::Input(t) => Some(&mut t.shape),
        Arg::InOut(t) => Some(&mut t.shape),
        Arg::Output(t) => Some(&mut t.shape),
        Arg::Int(_) | Arg::Float(_) => None,
    }
}

/// Checks that every uninitialised output ([`Arg::Output`]) binds a write-only parameter (see
/// [`gm::write_only_params`]: one the kernel only stores into), since its bytes may not be read.
fn check_outputs(kernel: &Kernel, args: &[Arg], write_only: &[ParamId]) -> Result<(), SimError> {
    for (i, a) in args.iter().enumerate() {
        if matches!(a, Arg::Output(_)) && !write_only.contains(&ParamId(i as u32)) {
            let name = kernel
                .params
                .get(i)
                .map_or_else(|| format!("#{i}"), |p| p.name.clone());
            return Err(SimError::BadArg {
                name,
                why: "an uninitialised output (Arg::Output) must bind a parameter the kernel only \
                      writes with plain stores; this kernel reads it, adds to it or writes \
                      scalars into it: pass a zero-filled Arg::InOut instead"
                    .into(),
            });
        }
    }
    Ok(())
}

/// The results of a launch's blocks, in block order (inline up to 8: no allocation).
type Blocks<'k> = SmallVec<[Result<interp::BlockResult<'k>, SimError>; 8]>;

/// Runs the blocks of a launch, each seeing `args` and writing the write-only outputs `direct`
/// in place: block 0 on the caller's thread, timed; when the other blocks, at its pace, would
/// take less than [`SERIAL_BELOW`], they run on the caller's thread too, since waking the
/// pool's sleeping workers (and waiting for them on a busy machine) costs more than they save;
/// otherwise the caller shares them with the pool ([`run_shared`]). Results come in block order
/// either way, so the outputs do not change.
fn run_blocks<'k, 'a>(
    program: &Program<'k, '_>,
    (args, direct): (&'a [Arg<'a>], &'a [gm::WriteOnly<'a>]),
    budget: &interp::StepBudget,
    opts: SimOptions,
    traced: bool,
) -> Blocks<'k> {
    let one = |block: usize| {
        let at = interp::BlockAt {
            block,
            block_dim: opts.block_dim,
            traced,
        };
        interp::run_block(program, (args, direct), at, budget)
    };
    let mut results = Blocks::new();
    if opts.block_dim > 0 {
        let start = std::time::Instant::now();
        results.push(one(0));
        let estimate = start
            .elapsed()
            .saturating_mul(u32::try_from(opts.block_dim - 1).unwrap_or(u32::MAX));
        if estimate < SERIAL_BELOW {
            results.extend((1..opts.block_dim).map(one));
        } else {
            results.extend(run_shared(opts.block_dim, &one));
        }
    }
    results
}

/// Runs blocks `1..block_dim` with `one`, the caller taking part: the caller and up to one
/// pool task per other pool thread take the next block from a shared counter until none is
/// left. A pool worker that a busy host does not schedule then costs no more than the block it
/// runs, where handing all the blocks to the pool had the caller wait for its slowest worker.
/// Results in block order.
fn run_shared<R: Send>(block_dim: usize, one: &(dyn Fn(usize) -> R + Sync)) -> Vec<R> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    let rest = block_dim.saturating_sub(1);
    let next = AtomicUsize::new(1);
    let slots: Vec<Mutex<Option<R>>> = (0..rest).map(|_| Mutex::new(None)).collect();
    let work = || loop {
        let b = next.fetch_add(1, Ordering::Relaxed);
        let Some(slot) = b.checked_sub(1).and_then(|i| slots.get(i)) else {
            break;
        };
        let r = one(b);
        if let Ok(mut s) = slot.lock() {
            *s = Some(r);
        }
    };
    let helpers = rayon::current_num_threads()
        .saturating_sub(1)
        .min(rest.saturating_sub(1));
    rayon::in_place_scope(|s| {
        for _ in 0..helpers {
            s.spawn(|_| work());
        }
        work();
    });
    // Every block was taken and run before the scope ended; a slot left empty (a poisoned
    // lock) is run again here, on the caller.
    slots
        .into_iter()
        .enumerate()
        .map(|(i, s)| match s.into_inner() {
            Ok(Some(r)) => r,
            _ => one(i + 1),
        })
        .collect()
}

/// Below this estimated time for the blocks after the first, a launch runs them all on the
/// caller's thread. In the DeepSeek decode demo (2 shared cores) every decode launch (sparse
/// attention on 4 blocks, ~0.1 ms a block, an estimate of ~0.3 ms; reshape_and_cache on 2)
/// falls below it, and running them serially took the TileSim run from ~15,000 context
/// switches to ~4,000 with no op slower; prefill's flash attention (32 blocks, ~0.3 ms a block)
/// still fans out, and so does a 2048-row paged_gather (8 blocks of ~0.2 ms, an estimate of
/// ~1.5 ms, which ran serially under the former 2 ms).
const SERIAL_BELOW: std::time::Duration = std::time::Duration::from_millis(1);

#[cfg(test)]
mod tests {
    use super::run_shared;
    use super::*;
    use crate::dsl::KernelBuilder;
    use crate::ir::{DType, Expr, GmView, Layout, MemSpace, TileType};
    use crate::launch::{GmInOut, GmOutput};
    use std::mem::MaybeUninit;

    /// Copies `x [1, 8]` into columns 8..16 of row `block_idx` of `y [rows, 24]` (the rest of
    /// `y` is never written), reading `y` back first when `read_y`.
    fn partial_copy(read_y: bool) -> crate::passes::Compiled {
        let mut kb = KernelBuilder::new("partial");
        let rows = Expr::Param(kb.scalar("rows", DType::I64));
        let x = kb.input("x", DType::F32, [Expr::from(1), Expr::from(8)]);
        let y = kb.output("y", DType::F32, [rows, Expr::from(24)]);
        let t = kb.tile(
            "t",
            TileType::new(MemSpace::Vec, DType::F32, 1, 8, Layout::ND),
        );
        kb.vector(|v| {
            let at = Expr::BlockIdx * 24 + 8;
            if read_y {
                v.load(t, GmView::nd(y, at.clone(), 1, 8, 8));
            }
            v.load(t, GmView::nd(x, 0, 1, 8, 8));
            v.store(GmView::nd(y, at, 1, 8, 8), t);
        });
        let arch = Arch::ascend950();
        crate::passes::compile(&kb.build(), &arch).expect("compiles")
    }

    /// An uninitialised output (its bytes stale, here 0x5a) ends exactly as a zero-filled one:
    /// the bytes the kernel writes, zero elsewhere; it comes back an `InOut`.
    #[test]
    fn an_uninitialised_output_ends_as_a_zero_filled_one() {
        let arch = Arch::ascend950();
        let k = partial_copy(false);
        let x: Vec<f32> = (0..8).map(|i| i as f32 + 0.5).collect();
        let x = GmTensor::from_f32(DType::F32, &[1, 8], &x);
        for rows in [1usize, 3, 50] {
            let opts = SimOptions { block_dim: rows };
            let mut zeroed = vec![0u8; rows * 24 * 4];
            let mut args = vec![
                Arg::Int(rows as i64),
                Arg::Input(x.as_input()),
                Arg::InOut(GmInOut {
                    dtype: DType::F32,
                    shape: vec![rows, 24],
                    data: &mut zeroed,
                }),
            ];
            run(&k, &arch, &mut args, opts).expect("runs");
            drop(args);
            let mut raw = vec![MaybeUninit::new(0x5au8); rows * 24 * 4];
            let mut args = vec![
                Arg::Int(rows as i64),
                Arg::Input(x.as_input()),
                Arg::Output(GmOutput {
                    dtype: DType::F32,
                    shape: vec![rows, 24],
                    data: &mut raw,
                }),
            ];
            run(&k, &arch, &mut args, opts).expect("runs");
            let Arg::InOut(out) = &args[2] else {
                panic!("the output comes back an InOut: {:?}", args[2]);
            };
            assert_eq!(out.data, &zeroed[..], "rows {rows}");
            assert!(zeroed.iter().any(|&b| b != 0) && zeroed[..32].iter().all(|&b| b == 0));
        }
    }

    /// An uninitialised output may not bind a parameter the kernel reads.
    #[test]
    fn an_uninitialised_output_that_the_kernel_reads_is_refused() {
        let arch = Arch::ascend950();
        let k = partial_copy(true);
        let x = GmTensor::zeros(DType::F32, &[1, 8]);
        let mut raw = vec![MaybeUninit::new(0u8); 24 * 4];
        let mut args = vec![
            Arg::Int(1),
            Arg::Input(x.as_input()),
            Arg::Output(GmOutput {
                dtype: DType::F32,
                shape: vec![1, 24],
                data: &mut raw,
            }),
        ];
        let err = run(&k, &arch, &mut args, SimOptions { block_dim: 1 }).unwrap_err();
        assert!(
            matches!(&err, SimError::BadArg { name, .. } if name == "y"),
            "{err}"
        );
    }

    #[test]
    fn shared_blocks_each_run_once_and_come_back_in_block_order() {
        for block_dim in [0, 1, 2, 3, 8, 33] {
            let runs = std::sync::atomic::AtomicUsize::new(0);
            let one = |b: usize| {
                runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                b * 10
            };
            let got = run_shared(block_dim, &one);
            let want: Vec<usize> = (1..block_dim.max(1)).map(|b| b * 10).collect();
            assert_eq!(got, want, "block_dim {block_dim}");
            assert_eq!(runs.into_inner(), want.len(), "block_dim {block_dim}");
        }
    }
}
