//! `tileops-ops`: the tileops operators as candle custom ops.
//!
//! Every op takes candle tensors and a [`Backend`] chosen per call (process default from
//! `TILEOPS_BACKEND`): [`Backend::Reference`] composes candle tensor ops, [`Backend::TileSim`]
//! runs the op's compiled tile kernels in the Ascend 950 simulator, [`Backend::Ascend950`]
//! writes the kernel package and reports that no device is present. See docs/ops.md.
//!
//! Layout: [`backend`], [`error`], [`runtime`] (kernel cache, launcher, profiling), `bridge`
//! (candle storage <-> GM tensors), and one folder per op family with `mod.rs` (the candle op and
//! its validation), `kernel.rs` (the tile DSL kernels and their host code) and `reference.rs`.

pub mod backend;
mod bridge;
pub mod error;
pub mod kv_cache;
pub mod paged_attention;
pub mod paged_gather;
pub mod runtime;
pub mod sparse_attention;

pub use backend::Backend;
pub use error::OpError;
pub use runtime::{profile, LaunchRecord};
