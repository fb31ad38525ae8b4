//! Passes that turn a kernel as written into the program the simulator and the code generator
//! consume: [`memory::plan`] (addresses), [`sync::insert`] (intra-core flags, channel lowering),
//! and [`compile`], which verifies and runs both.

pub mod memory;
pub mod sync;

use crate::arch::Arch;
use crate::ir::Kernel;
use crate::verify::{verify_with, VerifyError};
use thiserror::Error;

pub use memory::PlanError;
pub use sync::SyncError;

/// Why a kernel could not be compiled.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CompileError {
    /// The verifier found errors.
    #[error(transparent)]
    Verify(#[from] VerifyError),
    /// Memory planning failed.
    #[error("memory planning of kernel failed: {0}")]
    Plan(#[from] PlanError),
    /// Sync insertion failed.
    #[error("sync insertion failed: {0}")]
    Sync(#[from] SyncError),
}

/// Verifies `kernel` against `arch`, plans its memory and inserts its syncs. Warnings of the
/// verifier do not stop compilation.
pub fn compile(kernel: &Kernel, arch: &Arch) -> Result<Kernel, CompileError> {
    verify_with(kernel, arch).into_result(&kernel.name)?;
    let planned = memory::plan(kernel, arch)?;
    Ok(sync::insert(&planned, arch)?)
}
