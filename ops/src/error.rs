//! The error type of every op.

use std::path::PathBuf;
use thiserror::Error;

/// Why an op call failed. Bad input is reported before anything runs, naming the argument and
/// the rule it breaks.
#[derive(Debug, Error)]
pub enum OpError {
    /// An argument breaks the op's contract.
    #[error("{op}: argument `{arg}`: {rule}")]
    Invalid {
        /// The op.
        op: &'static str,
        /// The argument.
        arg: &'static str,
        /// The rule it breaks, with the numbers involved.
        rule: String,
    },
    /// `TILEOPS_BACKEND` (or a parsed backend name) is not one of the choices.
    #[error("unknown backend `{value}`: choose one of reference, sim, ascend950")]
    BadBackend {
        /// The rejected value.
        value: String,
    },
    /// The Ascend 950 kernel package was written, but there is no CANN runtime and device to
    /// launch it on.
    #[error("{op}: the Ascend 950 kernel package was written to {}, but it cannot run here: {missing}", package.display())]
    DeviceUnavailable {
        /// The op.
        op: &'static str,
        /// Where the package (kernel source, launcher, manifest per launch) was written.
        package: PathBuf,
        /// What is missing (the CANN runtime, a device).
        missing: String,
    },
    /// The op has no tile kernel yet, so this backend cannot run it (only
    /// [`Backend::Reference`](crate::Backend::Reference) does); the call was validated first.
    /// Never a fallback to another backend.
    #[error("{op}: the {backend} backend cannot run this op: it has no tile kernel yet ({missing}); only the reference backend runs it")]
    NoKernel {
        /// The op.
        op: &'static str,
        /// The backend asked for.
        backend: crate::Backend,
        /// What is missing.
        missing: &'static str,
    },
    /// A kernel failed to compile (a defect of the op's kernel template for these shapes).
    #[error("{op}: kernel `{kernel}` does not compile: {source}")]
    Compile {
        /// The op.
        op: &'static str,
        /// The kernel.
        kernel: String,
        /// The compiler's error.
        source: tile_backend::passes::CompileError,
    },
    /// The simulator stopped (out-of-range access, poison, hang).
    #[error("{op}: simulating kernel `{kernel}` failed: {source}")]
    Sim {
        /// The op.
        op: &'static str,
        /// The kernel.
        kernel: String,
        /// The simulator's error.
        source: tile_backend::sim::SimError,
    },
    /// Writing the Ascend 950 kernel package failed (a file or folder could not be written).
    #[error("{op}: writing the kernel package failed: {why}")]
    Package {
        /// The op.
        op: &'static str,
        /// What failed.
        why: String,
    },
    /// A defect inside tileops, not of the call: a kernel returned outputs of another shape or
    /// dtype than its op expects, or the op's own arguments did not bind to its kernel. The
    /// call was valid; please report the message.
    #[error("{op}: internal error (a tileops defect, not a bad argument): {what}")]
    Internal {
        /// The op.
        op: &'static str,
        /// What the op found.
        what: String,
    },
    /// A candle operation failed (the message only: a backtrace candle captured is dropped, so
    /// the error reads as one line).
    #[error(transparent)]
    Candle(candle_core::Error),
}

impl From<candle_core::Error> for OpError {
    fn from(e: candle_core::Error) -> Self {
        OpError::Candle(without_backtrace(e))
    }
}

/// `e` as one line: without the backtraces candle attaches when `RUST_BACKTRACE` is set (a
/// multi-line stack dump inside the message), and with a context joined by `: ` rather than a
/// line break.
fn without_backtrace(e: candle_core::Error) -> candle_core::Error {
    match e {
        candle_core::Error::WithBacktrace { inner, .. } => without_backtrace(*inner),
        candle_core::Error::Context { inner, context } => {
            candle_core::Error::Msg(format!("{context}: {}", without_backtrace(*inner)))
        }
        other => other,
    }
}

impl OpError {
    /// An [`OpError::Invalid`].
    pub fn invalid(op: &'static str, arg: &'static str, rule: impl Into<String>) -> Self {
        OpError::Invalid {
            op,
            arg,
            rule: rule.into(),
        }
    }
}

impl From<OpError> for candle_core::Error {
    fn from(e: OpError) -> Self {
        match e {
            OpError::Candle(c) => c,
            other => candle_core::Error::wrap(other),
        }
    }
}
