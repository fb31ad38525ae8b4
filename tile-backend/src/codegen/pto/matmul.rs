//! Cube matmul: `TMATMUL` / `TMATMUL_ACC` (with `AccPhase` for the unit-flag handshake) and
//! `TMATMUL_BIAS`.

use super::{CodegenError, Emitter};
use crate::ir::{MatmulOp, Phase};

fn acc_phase(p: Phase) -> &'static str {
    match p {
        Phase::Partial => "AccPhase::Partial",
        Phase::Final => "AccPhase::Final",
    }
}

pub(super) fn emit(e: &mut Emitter<'_>, op: &MatmulOp) -> Result<(), CodegenError> {
    let MatmulOp::Matmul {
        dst,
        a,
        b,
        bias,
        accumulate,
        phase,
    } = op;
    let (c, l, r) = (e.tile(dst)?, e.tile(a)?, e.tile(b)?);
    let loc = e.loc();
    let targs = phase
        .map(|p| format!("<{}>", acc_phase(p)))
        .unwrap_or_default();
    let line = match (bias, accumulate) {
        (Some(_), true) => {
            return Err(e.unsupported(
                op.name(),
                "PTO's TMATMUL_BIAS starts a new accumulation; a bias cannot be added to an accumulating matmul",
            ))
        }
        (Some(bias), false) => {
            if phase.is_some() {
                return Err(e.unsupported(
                    op.name(),
                    "PTO's TMATMUL_BIAS has no unit-flag (phase) form; order the Fixpipe read with an M -> FIX flag",
                ));
            }
            let bt = e.tile(bias)?;
            format!("TMATMUL_BIAS({c}, {l}, {r}, {bt});")
        }
        (None, true) => format!("TMATMUL_ACC{targs}({c}, {l}, {r});"),
        (None, false) => format!("TMATMUL{targs}({c}, {l}, {r});"),
    };
    e.line(format!("{line}  // {loc}"));
    Ok(())
}
