//! Code generation for the device.
//!
//! - [`pto`]: PTO-ISA C++ for Ascend 950 (`dav-c310`): the kernel translation unit, a host launcher
//!   and a JSON manifest per compiled kernel (docs/codegen.md).

pub mod pto;
