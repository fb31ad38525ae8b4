//! `tile-backend`: the Ascend 950 tile machine as a compiler target.
//!
//! - [`arch`]: the machine model as data (Ascend 950, A2/A3).
//! - [`ir`]: the tile IR (typed tiles, GM views, expressions, ops, control flow, sections).
//! - [`dsl`]: a builder in which a kernel reads like the kernel it builds.
//! - [`verify`]: every rule of the machine that can be checked before running.
//!
//! This crate knows nothing of candle.

pub mod arch;
pub mod dsl;
pub mod ir;
pub mod verify;
