//! The cube: `dst (+)= a * b` (TMATMUL / TMATMUL_ACC / TMATMUL_BIAS, M pipe).

use super::display::Names;
use super::{CostClass, GmUse, ParamId, Phase, Pipe, UnitFlag};
use crate::ir::{Kernel, TileRef};
use serde::{Deserialize, Serialize};
use std::fmt::{self, Write};

/// A cube matmul.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum MatmulOp {
    /// `dst (+)= a * b` on the cube (TMATMUL / TMATMUL_ACC, M pipe).
    Matmul {
        /// Acc tile `[m, n]`.
        dst: TileRef,
        /// Left tile `[m, k]`.
        a: TileRef,
        /// Right tile `[k, n]`.
        b: TileRef,
        /// Optional Bias tile `[1, n]`.
        bias: Option<TileRef>,
        /// Accumulate into `dst` instead of overwriting it.
        accumulate: bool,
        /// Unit-flag phase.
        phase: Option<Phase>,
    },
}

impl MatmulOp {
    /// The JSON variant names.
    pub(super) const NAMES: &'static [&'static str] = &["Matmul"];

    /// Short name for diagnostics.
    pub fn name(&self) -> &'static str {
        match self {
            MatmulOp::Matmul { .. } => "matmul",
        }
    }

    /// Tiles read: both operands, the bias, and the Acc tile when accumulating.
    pub fn tile_reads(&self) -> Vec<&TileRef> {
        match self {
            MatmulOp::Matmul {
                dst,
                a,
                b,
                bias,
                accumulate,
                ..
            } => {
                let mut v = vec![a, b];
                v.extend(bias.iter());
                if *accumulate {
                    v.push(dst);
                }
                v
            }
        }
    }

    /// Tiles written: the Acc tile.
    pub fn tile_writes(&self) -> Vec<&TileRef> {
        match self {
            MatmulOp::Matmul { dst, .. } => vec![dst],
        }
    }

    /// A matmul touches no GM tensor.
    pub fn gm_use(&self, _: ParamId) -> GmUse {
        match self {
            MatmulOp::Matmul { .. } => GmUse::None,
        }
    }

    /// The M pipe.
    pub fn pipe(&self) -> Pipe {
        match self {
            MatmulOp::Matmul { .. } => Pipe::M,
        }
    }

    /// The PTO instruction.
    pub fn instruction(&self, _: &Kernel) -> &'static str {
        match self {
            MatmulOp::Matmul {
                bias, accumulate, ..
            } => match (bias.is_some(), accumulate) {
                (true, _) => "TMATMUL_BIAS",
                (false, true) => "TMATMUL_ACC",
                (false, false) => "TMATMUL",
            },
        }
    }

    /// The cost formula.
    pub fn cost_class(&self) -> CostClass<'_> {
        match self {
            MatmulOp::Matmul { a, .. } => CostClass::Matmul { a },
        }
    }

    /// The unit-flag handshake on the Acc tile.
    pub fn unit_flag(&self) -> Option<UnitFlag<'_>> {
        match self {
            MatmulOp::Matmul { dst, phase, .. } => phase.map(|p| UnitFlag::Matmul(dst, p)),
        }
    }

    pub(super) fn fmt(&self, n: &Names<'_>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MatmulOp::Matmul {
                dst,
                a,
                b,
                bias,
                accumulate,
                phase,
            } => {
                let eq = if *accumulate { "+=" } else { "=" };
                let mut s = format!("matmul {} {eq} {} * {}", n.tile(dst), n.tile(a), n.tile(b));
                if let Some(bias) = bias {
                    let _ = write!(s, " + bias {}", n.tile(bias));
                }
                if let Some(p) = phase {
                    let _ = write!(s, " phase {p:?}");
                }
                f.write_str(&s)
            }
        }
    }
}

#[cfg(test)]
impl MatmulOp {
    /// One op of every variant, in `NAMES` order (the name table's round-trip test).
    pub(super) fn samples() -> Vec<Self> {
        use super::sample::*;
        vec![MatmulOp::Matmul {
            dst: t(),
            a: t(),
            b: t(),
            bias: None,
            accumulate: false,
            phase: None,
        }]
    }
}
