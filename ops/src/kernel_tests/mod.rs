//! Tests of the crate-private kernel host code and runtime: each op's tile kernels called through
//! `kernel::run` with a [`Runner`](crate::runtime::Runner), checked against plain Rust models,
//! every simulated launch's hazards checked, and their Ascend 950 packages written. The tests of
//! the public ops are the integration tests in `ops/tests/`; both share its support module.

// The integration tests' support: the generator, tolerances and `for_each_backend!`.
#[allow(unused_macros)]
#[path = "../../tests/support/mod.rs"]
mod support;

mod attention;
mod small;
