//! IR op -> PTO-ISA instruction on Ascend 950: the instruction (or intrinsic) each op is emitted
//! as, which each op family states next to its ops ([`Op::instruction`]). The verifier looks up
//! an op's element types and layouts by this name ([`super::Arch::instruction_dtypes`]) and the
//! code generator writes it, so both take it from there; docs/codegen.md's "IR op -> PTO
//! instruction" is that table in prose.

use crate::ir::{Kernel, Op};

/// The PTO instruction (or intrinsic) an op is emitted as. Channel ops never reach the emitter
/// (the sync pass lowers them); their entry names the intrinsic they become.
pub fn instruction(kernel: &Kernel, op: &Op) -> &'static str {
    op.instruction(kernel)
}
