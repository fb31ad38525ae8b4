//! Assertions shared by the verifier tests.
#![allow(dead_code)]

use tile_backend::ir::{DType, Layout, MemSpace, TileType};
use tile_backend::verify::{Diagnostic, Report, Rule, Severity};

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
