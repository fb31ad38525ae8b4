//! Where a launch goes: [`run`] simulates a compiled kernel on the CPU (plainly, or profiled with
//! its Ascend 950 cost estimate and hazard check) or writes its Ascend 950 package. One function
//! of (kernel, arguments, target), so every caller forks the same way.

use super::Arg;
use crate::arch::{Arch, Sku};
use crate::codegen::pto::{emit, CodegenError, LaunchSpec};
use crate::ir::Kernel;
use crate::sim::{self, cost::CostReport, hazards::Hazard, Program, SimError, SimOptions};
use std::path::{Path, PathBuf};
use thiserror::Error;

/// What a launch does with a compiled kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaunchTarget<'d> {
    /// Run it in the simulator; outputs are written into the arguments.
    Simulate,
    /// Run it in the simulator with its timeline: outputs as [`LaunchTarget::Simulate`], plus
    /// the estimated cost on this chip and the hazards (races, lost signals, hangs) found.
    Profile(Sku),
    /// Write its package (PTO-ISA kernel source, host launcher, manifest) into this directory;
    /// nothing runs and the arguments are left as they were.
    Package(&'d Path),
}

/// What one launch produced besides the outputs written into its arguments.
#[derive(Debug, Clone, Default)]
pub struct Launched {
    /// The estimated cost ([`LaunchTarget::Profile`]).
    pub cost: Option<CostReport>,
    /// Hazards the simulator found ([`LaunchTarget::Profile`]).
    pub hazards: Vec<Hazard>,
    /// Files written ([`LaunchTarget::Package`]).
    pub files: Vec<PathBuf>,
}

/// Why a launch failed.
#[derive(Debug, Error)]
pub enum LaunchError {
    /// The simulator stopped with an error.
    #[error(transparent)]
    Sim(#[from] SimError),
    /// The package could not be emitted or written.
    #[error(transparent)]
    Package(#[from] CodegenError),
}

/// Launches a compiled kernel (the output of [`crate::passes::compile`]) on `block_dim` blocks
/// with `args` in its parameter order (see [`super::bind`]), on `target`. On `Ok`, every
/// uninitialised output ([`Arg::Output`]) is initialised and has become an [`Arg::InOut`].
///
/// A simulated launch lowers the kernel first, whether or not it was compiled; a caller that
/// launches the same compiled kernel again keeps its program ([`Program::lower`]) and calls
/// [`run_program`].
pub fn run(
    kernel: &Kernel,
    arch: &Arch,
    block_dim: usize,
    args: &mut [Arg],
    target: LaunchTarget<'_>,
) -> Result<Launched, LaunchError> {
    match target {
        LaunchTarget::Package(dir) => package(kernel, arch, block_dim, args, dir),
        _ => run_program(&Program::lower_any(kernel, arch)?, block_dim, args, target),
    }
}

/// [`run`] of a kernel lowered for the simulator.
pub fn run_program(
    program: &Program<'_, '_>,
    block_dim: usize,
    args: &mut [Arg],
    target: LaunchTarget<'_>,
) -> Result<Launched, LaunchError> {
    let opts = SimOptions { block_dim };
    let (kernel, arch) = (program.kernel(), program.arch());
    match target {
        LaunchTarget::Simulate => {
            sim::run_program(program, args, opts)?;
            Ok(Launched::default())
        }
        LaunchTarget::Profile(sku) => {
            let (_, trace) = sim::run_program_traced(program, args, opts)?;
            Ok(Launched {
                cost: Some(sim::cost::report_with_sensitivity(
                    kernel, arch, sku, &trace, block_dim,
                )),
                hazards: sim::hazards::check(kernel, &trace),
                files: Vec::new(),
            })
        }
        LaunchTarget::Package(dir) => package(kernel, arch, block_dim, args, dir),
    }
}

/// Writes the package of a launch into `dir`; nothing runs.
fn package(
    kernel: &Kernel,
    arch: &Arch,
    block_dim: usize,
    args: &mut [Arg],
    dir: &Path,
) -> Result<Launched, LaunchError> {
    let package = emit(kernel, arch, &LaunchSpec::new(block_dim as u64))?;
    let files = package.write_to(dir)?;
    // Nothing ran: an uninitialised output ends zero-filled, as a launch leaves it.
    for a in args.iter_mut() {
        if matches!(a, Arg::Output(_)) {
            if let Arg::Output(o) = std::mem::replace(a, Arg::Int(0)) {
                *a = Arg::InOut(o.zeroed());
            }
        }
    }
    Ok(Launched {
        files,
        ..Launched::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{kernels, passes, sim::io};

    #[test]
    fn each_target_simulates_profiles_or_writes_the_package() {
        let arch = Arch::ascend950();
        let kernel = passes::compile(&kernels::worked_matmul(), &arch).expect("compiles");
        let inputs = io::generate(&kernel, 7).expect("inputs");
        let copy = |a: &[Arg<'static>]| -> Vec<Arg<'static>> {
            a.iter().map(|x| x.try_clone().expect("owned")).collect()
        };
        let mut plain = copy(&inputs);
        let done = run(&kernel, &arch, 1, &mut plain, LaunchTarget::Simulate).expect("runs");
        assert!(done.cost.is_none() && done.hazards.is_empty() && done.files.is_empty());
        assert_ne!(plain, inputs, "the output is written");
        let mut profiled = copy(&inputs);
        let sku = Sku::Ascend950PR;
        let done = run(&kernel, &arch, 1, &mut profiled, LaunchTarget::Profile(sku)).expect("runs");
        assert_eq!(profiled, plain, "profiling computes the same bits");
        assert!(done.cost.is_some_and(|c| c.cycles > 0.0), "a cost");
        assert!(done.hazards.is_empty(), "{:?}", done.hazards);
        let dir = std::env::temp_dir().join(format!("launch-target-{}", std::process::id()));
        let mut packaged = copy(&inputs);
        let done = run(
            &kernel,
            &arch,
            1,
            &mut packaged,
            LaunchTarget::Package(&dir),
        )
        .expect("emits");
        assert_eq!(packaged, inputs, "nothing runs");
        assert_eq!(done.files.len(), 3, "{:?}", done.files);
        assert!(done.files.iter().all(|f| f.starts_with(&dir) && f.exists()));
        let _ = std::fs::remove_dir_all(&dir);
        let a2 = Arch::a2a3();
        let err = run(
            &kernel,
            &a2,
            1,
            &mut copy(&inputs),
            LaunchTarget::Package(&dir),
        );
        assert!(matches!(err, Err(LaunchError::Package(_))), "{err:?}");
    }
}
