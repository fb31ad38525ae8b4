//! The tile-backend tests' shared support, as `for_each_backend!` serves the ops: the verifier
//! tests' assertions, and the harness every simulator test runs its kernels through (the
//! machine, the passes, one launch on the simulator, tile shorthands).
#![allow(dead_code)]

use tile_backend::arch::Arch;
use tile_backend::ir::{DType, Kernel, Layout, MemSpace, TileType};
use tile_backend::sim::trace::Trace;
use tile_backend::sim::{self, Arg, SimError, SimFault, SimOptions};
use tile_backend::verify::{Diagnostic, Report, Rule, Severity};

// ---------------------------------------------------------------------------------------------
// The harness
// ---------------------------------------------------------------------------------------------

/// The machine every test runs on.
pub fn arch() -> Arch {
    Arch::ascend950()
}

/// `kernel` through the real memory-planning pass only (kernels that carry their own syncs).
pub fn planned(kernel: Kernel) -> Kernel {
    tile_backend::passes::memory::plan(&kernel, &arch())
        .unwrap_or_else(|e| panic!("{}: does not fit: {e}", kernel.name))
}

/// `kernel` through `passes::compile` (verified, planned, synced).
pub fn compiled(kernel: &Kernel) -> Kernel {
    tile_backend::passes::compile(kernel, &arch())
        .unwrap_or_else(|e| panic!("{}: does not compile: {e}", kernel.name))
        .into_kernel()
}

/// Runs `kernel` on `block_dim` blocks of the simulator of `arch` (untraced): for a machine
/// other than [`arch`]'s (another tie model, other rates).
pub fn simulate_with(
    kernel: &Kernel,
    arch: &Arch,
    args: &mut [Arg<'_>],
    block_dim: usize,
) -> Result<(), SimError> {
    sim::run(kernel, arch, args, SimOptions { block_dim }).map(|_| ())
}

/// Runs `kernel` on `block_dim` blocks of the simulator (untraced).
pub fn simulate_on(
    kernel: &Kernel,
    args: &mut [Arg<'_>],
    block_dim: usize,
) -> Result<(), SimError> {
    simulate_with(kernel, &arch(), args, block_dim)
}

/// Runs `kernel` traced on `block_dim` blocks of the simulator of `arch` and returns the trace
/// (timeline, hazards, cost report).
pub fn trace_on<'k>(
    kernel: &'k Kernel,
    arch: &Arch,
    args: &mut [Arg<'_>],
    block_dim: usize,
) -> Result<Trace<'k>, SimError> {
    sim::run_traced(kernel, arch, args, SimOptions { block_dim }).map(|(_, t)| t)
}

/// Runs `kernel` on one block of the simulator (untraced).
pub fn simulate(kernel: &Kernel, args: &mut [Arg<'_>]) -> Result<(), SimError> {
    simulate_on(kernel, args, 1)
}

/// Runs `kernel` on one block of the simulator, traced (timeline, hazards, poison).
pub fn simulate_traced(kernel: &Kernel, args: &mut [Arg<'_>]) -> Result<(), SimError> {
    trace_on(kernel, &arch(), args, 1).map(|_| ())
}

/// The fault of a run that stopped in an op (`SimError::Op`), panicking when it succeeded or
/// failed otherwise: what a test matches with `matches!`.
pub fn op_fault<T: std::fmt::Debug>(r: Result<T, SimError>) -> SimFault {
    match r {
        Err(SimError::Op { fault, .. }) => fault,
        other => panic!("expected a fault in an op, got {other:?}"),
    }
}

/// Verifies `kernel` (panicking with the report) and runs it on one block (panicking).
pub fn run_verified(kernel: &Kernel, args: &mut [Arg<'_>]) {
    let report = tile_backend::verify::verify(kernel);
    assert!(report.is_ok(), "{report}");
    simulate(kernel, args).unwrap_or_else(|e| panic!("{}: {e}", kernel.name));
}

/// A UB tile of `dtype`, `rows x cols`, ND.
pub fn vec_tile(dtype: DType, rows: u64, cols: u64) -> TileType {
    TileType::new(MemSpace::Vec, dtype, rows, cols, Layout::ND)
}

// ---------------------------------------------------------------------------------------------
// The verifier tests' assertions
// ---------------------------------------------------------------------------------------------

/// The diagnostics of `rule` with `severity`.
pub fn of(r: &Report, rule: Rule, severity: Severity) -> Vec<&Diagnostic> {
    r.diagnostics
        .iter()
        .filter(|d| d.rule == rule && d.severity == severity)
        .collect()
}

/// Asserts a diagnostic of `rule` and `severity` whose message contains every fragment.
pub fn find(r: &Report, rule: Rule, severity: Severity, frags: &[&str]) -> Diagnostic {
    let found = of(r, rule, severity);
    assert!(
        !found.is_empty(),
        "expected a {severity:?} {rule:?}, got:\n{r}"
    );
    found
        .iter()
        .find(|d| frags.iter().all(|f| d.message.contains(f)))
        .map(|d| (*d).clone())
        .unwrap_or_else(|| panic!("no {rule:?} contains {frags:?}; got:\n{r}"))
}

/// Asserts an error of `rule` whose message contains every fragment; returns it.
pub fn expect_err(r: &Report, rule: Rule, frags: &[&str]) -> Diagnostic {
    find(r, rule, Severity::Error, frags)
}

/// Asserts a warning of `rule` whose message contains every fragment; returns it.
pub fn expect_warn(r: &Report, rule: Rule, frags: &[&str]) -> Diagnostic {
    find(r, rule, Severity::Warning, frags)
}

/// Asserts no diagnostic of `rule`.
pub fn expect_no(r: &Report, rule: Rule) {
    assert!(!r.has(rule), "unexpected {rule:?} diagnostic:\n{r}");
}

/// Asserts an empty report.
pub fn expect_clean(r: &Report) {
    assert!(r.diagnostics.is_empty(), "expected a clean report:\n{r}");
}

/// Shorthand for [`TileType::new`].
pub fn t(space: MemSpace, dtype: DType, rows: u64, cols: u64, layout: Layout) -> TileType {
    TileType::new(space, dtype, rows, cols, layout)
}
