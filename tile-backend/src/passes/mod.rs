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
pub fn compile(kernel: &Kernel, arch: &Arch) -> Result<Compiled, CompileError> {
    verify_with(kernel, arch).into_result(&kernel.name)?;
    let planned = memory::plan(kernel, arch)?;
    Ok(Compiled(sync::insert(&planned, arch)?))
}

/// A kernel that passed [`compile`]: verified, every tile placed, its syncs inserted. Only
/// [`compile`] makes one, so a consumer that takes a `Compiled` (the simulator's lowered form,
/// [`crate::sim::Program::lower`]) knows by its type what the verifier and the passes
/// established. It reads as the [`Kernel`] it holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Compiled(Kernel);

impl Compiled {
    /// The compiled kernel.
    pub fn kernel(&self) -> &Kernel {
        &self.0
    }

    /// The compiled kernel, owned (it is no longer known to be compiled once it can change).
    pub fn into_kernel(self) -> Kernel {
        self.0
    }
}

impl std::ops::Deref for Compiled {
    type Target = Kernel;
    fn deref(&self) -> &Kernel {
        &self.0
    }
}

impl AsRef<Kernel> for Compiled {
    fn as_ref(&self) -> &Kernel {
        &self.0
    }
}

impl From<Compiled> for Kernel {
    fn from(c: Compiled) -> Kernel {
        c.0
    }
}
