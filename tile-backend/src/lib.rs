//! `tile-backend`: the Ascend 950 tile machine as a compiler target.
//!
//! - [`arch`]: the machine model as data (Ascend 950, A2/A3).
//! - [`ir`]: the tile IR (typed tiles, GM views, expressions, ops, control flow, sections).
//! - [`dsl`]: a builder in which a kernel reads like the kernel it builds.
//! - [`verify`]: every rule of the machine that can be checked before running.
//! - [`kernels`]: tile-level reference kernels (matmul, attention tile, gather matmul).
//! - [`passes`]: memory planning and sync insertion; [`passes::compile`] runs verify, plan, sync.
//! - [`sim`]: the CPU simulator, byte-exact execution of compiled tile programs.
//! - [`codegen`]: PTO-ISA C++ for Ascend 950 (kernel, launcher, manifest) from compiled kernels.
//!
//! This crate knows nothing of candle.

pub mod arch;
pub mod codegen;
pub mod dsl;
pub mod ir;
pub mod kernels;
pub mod launch;
pub mod passes;
pub mod sim;
pub mod verify;
