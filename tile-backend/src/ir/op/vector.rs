//! Vector-unit ops (V pipe), plus the tile metadata ops that go with them: `fillpad` (V, or MTE2
//! on a Mat tile) and `set_validshape` (S).

use super::display::Names;
use super::{CostClass, GmUse, ParamId, Pipe, ScalarArg, SpaceOf};
use crate::ir::{Expr, Kernel, MemSpace, TileRef};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Element-wise unary vector operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum UnaryOp {
    /// `e^x` (TEXP).
    Exp,
    /// Natural log (TLOG).
    Ln,
    /// `|x|` (TABS).
    Abs,
    /// `-x` (TNEG).
    Neg,
    /// `sqrt(x)` (TSQRT).
    Sqrt,
    /// `1 / sqrt(x)` (TRSQRT).
    Rsqrt,
    /// `1 / x` (TRECIP).
    Recip,
    /// `max(x, 0)` (TRELU).
    Relu,
}

/// Element-wise binary vector operations (also the operator of broadcasts and scalar forms).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BinaryOp {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// `a / b`.
    Div,
    /// `max(a, b)`.
    Max,
    /// `min(a, b)`.
    Min,
}

/// Reductions along one axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ReduceOp {
    /// Sum (pad with 0).
    Sum,
    /// Maximum (pad with min).
    Max,
    /// Minimum (pad with max).
    Min,
}

/// Which axis a reduction or broadcast runs along.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Axis {
    /// Along each row: `[R, C] -> [R, 1]` (TROW*), broadcast of a `[R, 1]` operand across columns.
    Row,
    /// Along each column: `[R, C] -> [1, C]` (TCOL*), broadcast of a `[1, C]` operand down rows.
    Col,
}

impl Axis {
    /// `row` or `col`, as the listing and the verifier spell it.
    pub const fn lower(self) -> &'static str {
        match self {
            Axis::Row => "row",
            Axis::Col => "col",
        }
    }
}

/// Rounding of a conversion (PTO `RoundMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RoundMode {
    /// Round to nearest, ties to even (CAST_RINT).
    Rint,
    /// Round to nearest, ties away from zero (CAST_ROUND).
    Round,
    /// Toward -inf (CAST_FLOOR).
    Floor,
    /// Toward +inf (CAST_CEIL).
    Ceil,
    /// Toward zero (CAST_TRUNC).
    Trunc,
}

impl RoundMode {
    /// `v` rounded to an integer (as f64) the way this mode rounds.
    pub fn round(self, v: f64) -> f64 {
        match self {
            RoundMode::Rint => v.round_ties_even(),
            RoundMode::Round => v.round(),
            RoundMode::Floor => v.floor(),
            RoundMode::Ceil => v.ceil(),
            RoundMode::Trunc => v.trunc(),
        }
    }
}

/// A vector-unit op.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum VectorOp {
    /// `dst = op(src)` element-wise (V).
    Unary {
        /// Operation.
        op: UnaryOp,
        /// Destination.
        dst: TileRef,
        /// Source.
        src: TileRef,
    },
    /// `dst = lhs op rhs` element-wise (V).
    Binary {
        /// Operation.
        op: BinaryOp,
        /// Destination.
        dst: TileRef,
        /// Left operand.
        lhs: TileRef,
        /// Right operand.
        rhs: TileRef,
    },
    /// `dst = src op scalar` (TADDS, TMULS, TMAXS, ...; V).
    BinaryScalar {
        /// Operation.
        op: BinaryOp,
        /// Destination.
        dst: TileRef,
        /// Tile operand.
        src: TileRef,
        /// Scalar operand.
        scalar: ScalarArg,
    },
    /// Reduction along rows (`[R, C] -> [R, 1]`) or columns (`[R, C] -> [1, C]`) (V).
    Reduce {
        /// Operation.
        op: ReduceOp,
        /// Axis.
        axis: Axis,
        /// Destination.
        dst: TileRef,
        /// Source.
        src: TileRef,
    },
    /// `dst = src op broadcast(operand)`: a `[R, 1]` operand across columns (Row) or a `[1, C]`
    /// operand down rows (Col) (TROWEXPANDSUB, TCOLEXPANDMUL, ...; V).
    Broadcast {
        /// Operation.
        op: BinaryOp,
        /// Axis of the operand.
        axis: Axis,
        /// Destination.
        dst: TileRef,
        /// Full-shape operand.
        src: TileRef,
        /// Broadcast operand.
        operand: TileRef,
    },
    /// `dst = broadcast(src)` of a `[R, 1]` (Row) or `[1, C]` (Col) tile (TROWEXPAND / TCOLEXPAND).
    Expand {
        /// Axis of the source.
        axis: Axis,
        /// Destination.
        dst: TileRef,
        /// Source.
        src: TileRef,
    },
    /// `dst = convert(src)` with a rounding mode (TCVT; V).
    Cast {
        /// Destination.
        dst: TileRef,
        /// Source.
        src: TileRef,
        /// Rounding.
        round: RoundMode,
    },
    /// Leaky ReLU: `dst = src > 0 ? src : src * slope` element-wise (TLRELU; V).
    LeakyRelu {
        /// Destination.
        dst: TileRef,
        /// Source.
        src: TileRef,
        /// Slope of the negative side.
        slope: ScalarArg,
    },
    /// Every valid element of `dst` set to a scalar (TEXPANDS; V).
    Fill {
        /// Destination.
        dst: TileRef,
        /// Value.
        value: ScalarArg,
    },
    /// Sets a tile's runtime valid shape.
    SetValidShape {
        /// The tile.
        tile: TileRef,
        /// Valid rows.
        rows: Expr,
        /// Valid columns.
        cols: Expr,
    },
    /// Writes the tile's pad value into its invalid region (TFILLPAD).
    FillPad {
        /// The tile.
        tile: TileRef,
    },
}

impl VectorOp {
    /// The JSON variant names.
    pub(super) const NAMES: &'static [&'static str] = &[
        "Unary",
        "Binary",
        "BinaryScalar",
        "Reduce",
        "Broadcast",
        "Expand",
        "Cast",
        "LeakyRelu",
        "Fill",
        "SetValidShape",
        "FillPad",
    ];

    /// Short name for diagnostics.
    pub fn name(&self) -> &'static str {
        match self {
            VectorOp::Unary { .. } => "unary",
            VectorOp::Binary { .. } => "binary",
            VectorOp::BinaryScalar { .. } => "binary_scalar",
            VectorOp::Reduce { .. } => "reduce",
            VectorOp::Broadcast { .. } => "broadcast",
            VectorOp::Expand { .. } => "expand",
            VectorOp::Cast { .. } => "cast",
            VectorOp::LeakyRelu { .. } => "leaky_relu",
            VectorOp::Fill { .. } => "fill",
            VectorOp::SetValidShape { .. } => "set_validshape",
            VectorOp::FillPad { .. } => "fillpad",
        }
    }

    /// Tiles read.
    pub fn tile_reads(&self) -> Vec<&TileRef> {
        match self {
            VectorOp::Unary { src, .. }
            | VectorOp::BinaryScalar { src, .. }
            | VectorOp::Reduce { src, .. }
            | VectorOp::Expand { src, .. }
            | VectorOp::Cast { src, .. }
            | VectorOp::LeakyRelu { src, .. } => vec![src],
            VectorOp::Binary { lhs, rhs, .. } => vec![lhs, rhs],
            VectorOp::Broadcast { src, operand, .. } => vec![src, operand],
            VectorOp::Fill { .. } | VectorOp::SetValidShape { .. } | VectorOp::FillPad { .. } => {
                vec![]
            }
        }
    }

    /// Tiles written (a valid-shape change writes metadata only).
    pub fn tile_writes(&self) -> Vec<&TileRef> {
        self.written().into_iter().collect()
    }

    /// The one tile the op writes, if it writes one (a vector op writes at most one).
    pub fn written(&self) -> Option<&TileRef> {
        match self {
            VectorOp::Unary { dst, .. }
            | VectorOp::Binary { dst, .. }
            | VectorOp::BinaryScalar { dst, .. }
            | VectorOp::Reduce { dst, .. }
            | VectorOp::Broadcast { dst, .. }
            | VectorOp::Expand { dst, .. }
            | VectorOp::Cast { dst, .. }
            | VectorOp::LeakyRelu { dst, .. }
            | VectorOp::Fill { dst, .. } => Some(dst),
            VectorOp::FillPad { tile } => Some(tile),
            VectorOp::SetValidShape { .. } => None,
        }
    }

    /// The tile and valid shape a `set_validshape` sets (`None` for every other op).
    pub fn valid_shape_set(&self) -> Option<(&TileRef, &Expr, &Expr)> {
        match self {
            VectorOp::SetValidShape { tile, rows, cols } => Some((tile, rows, cols)),
            VectorOp::Unary { .. }
            | VectorOp::Binary { .. }
            | VectorOp::BinaryScalar { .. }
            | VectorOp::Reduce { .. }
            | VectorOp::Broadcast { .. }
            | VectorOp::Expand { .. }
            | VectorOp::Cast { .. }
            | VectorOp::LeakyRelu { .. }
            | VectorOp::Fill { .. }
            | VectorOp::FillPad { .. } => None,
        }
    }

    /// The scalar operands (literals or scalar arguments).
    pub fn scalar_args(&self) -> Vec<&ScalarArg> {
        match self {
            VectorOp::BinaryScalar { scalar, .. } => vec![scalar],
            VectorOp::Fill { value, .. } => vec![value],
            VectorOp::LeakyRelu { slope, .. } => vec![slope],
            VectorOp::Unary { .. }
            | VectorOp::Binary { .. }
            | VectorOp::Reduce { .. }
            | VectorOp::Broadcast { .. }
            | VectorOp::Expand { .. }
            | VectorOp::Cast { .. }
            | VectorOp::SetValidShape { .. }
            | VectorOp::FillPad { .. } => vec![],
        }
    }

    /// Vector ops touch no GM tensor.
    pub fn gm_use(&self, _: ParamId) -> GmUse {
        GmUse::None
    }

    /// The pipe: V; a fillpad on a Mat tile runs on MTE2, a valid-shape change on S.
    pub fn pipe(&self, space_of: SpaceOf<'_>) -> Option<Pipe> {
        Some(match self {
            VectorOp::FillPad { tile } => match space_of(tile)? {
                MemSpace::Mat => Pipe::Mte2,
                _ => Pipe::V,
            },
            VectorOp::SetValidShape { .. } => Pipe::S,
            VectorOp::Unary { .. }
            | VectorOp::Binary { .. }
            | VectorOp::BinaryScalar { .. }
            | VectorOp::Reduce { .. }
            | VectorOp::Broadcast { .. }
            | VectorOp::Expand { .. }
            | VectorOp::Cast { .. }
            | VectorOp::LeakyRelu { .. }
            | VectorOp::Fill { .. } => Pipe::V,
        })
    }

    /// The PTO instruction.
    pub fn instruction(&self, kernel: &Kernel) -> &'static str {
        match self {
            VectorOp::Unary { op, .. } => match op {
                UnaryOp::Exp => "TEXP",
                UnaryOp::Ln => "TLOG",
                UnaryOp::Abs => "TABS",
                UnaryOp::Neg => "TNEG",
                UnaryOp::Sqrt => "TSQRT",
                UnaryOp::Rsqrt => "TRSQRT",
                UnaryOp::Recip => "TRECIP",
                UnaryOp::Relu => "TRELU",
            },
            VectorOp::Binary { op, .. } => match op {
                BinaryOp::Add => "TADD",
                BinaryOp::Sub => "TSUB",
                BinaryOp::Mul => "TMUL",
                BinaryOp::Div => "TDIV",
                BinaryOp::Max => "TMAX",
                BinaryOp::Min => "TMIN",
            },
            VectorOp::BinaryScalar { op, .. } => match op {
                BinaryOp::Add => "TADDS",
                BinaryOp::Sub => "TSUBS",
                BinaryOp::Mul => "TMULS",
                BinaryOp::Div => "TDIVS",
                BinaryOp::Max => "TMAXS",
                BinaryOp::Min => "TMINS",
            },
            VectorOp::Reduce { op, axis, .. } => match (axis, op) {
                (Axis::Row, ReduceOp::Sum) => "TROWSUM",
                (Axis::Row, ReduceOp::Max) => "TROWMAX",
                (Axis::Row, ReduceOp::Min) => "TROWMIN",
                (Axis::Col, ReduceOp::Sum) => "TCOLSUM",
                (Axis::Col, ReduceOp::Max) => "TCOLMAX",
                (Axis::Col, ReduceOp::Min) => "TCOLMIN",
            },
            VectorOp::Broadcast { op, axis, .. } => match (axis, op) {
                (Axis::Row, BinaryOp::Add) => "TROWEXPANDADD",
                (Axis::Row, BinaryOp::Sub) => "TROWEXPANDSUB",
                (Axis::Row, BinaryOp::Mul) => "TROWEXPANDMUL",
                (Axis::Row, BinaryOp::Div) => "TROWEXPANDDIV",
                (Axis::Row, BinaryOp::Max) => "TROWEXPANDMAX",
                (Axis::Row, BinaryOp::Min) => "TROWEXPANDMIN",
                (Axis::Col, BinaryOp::Add) => "TCOLEXPANDADD",
                (Axis::Col, BinaryOp::Sub) => "TCOLEXPANDSUB",
                (Axis::Col, BinaryOp::Mul) => "TCOLEXPANDMUL",
                (Axis::Col, BinaryOp::Div) => "TCOLEXPANDDIV",
                (Axis::Col, BinaryOp::Max) => "TCOLEXPANDMAX",
                (Axis::Col, BinaryOp::Min) => "TCOLEXPANDMIN",
            },
            VectorOp::Expand { axis, .. } => match axis {
                Axis::Row => "TROWEXPAND",
                Axis::Col => "TCOLEXPAND",
            },
            VectorOp::Cast { .. } => "TCVT",
            VectorOp::LeakyRelu { .. } => "TLRELU",
            VectorOp::Fill { .. } => "TEXPANDS",
            VectorOp::SetValidShape { .. } => "SetValidShape",
            VectorOp::FillPad { tile } => match kernel.space_of(tile) {
                Some(MemSpace::Vec) => "TFILLPAD_INPLACE",
                _ => "TFILLPAD",
            },
        }
    }

    /// The cost formula (docs/simulator.md, "Vector costs").
    pub fn cost_class(&self) -> CostClass<'_> {
        match self {
            VectorOp::Binary { .. } | VectorOp::Broadcast { .. } => CostClass::VectorBinary,
            VectorOp::Unary { op, dst, .. } => match op {
                UnaryOp::Exp => CostClass::VectorExp { dst },
                UnaryOp::Ln | UnaryOp::Sqrt | UnaryOp::Rsqrt | UnaryOp::Recip => {
                    CostClass::VectorTranscendental
                }
                UnaryOp::Abs | UnaryOp::Neg | UnaryOp::Relu => CostClass::VectorSimple,
            },
            VectorOp::Reduce {
                axis: Axis::Row,
                op,
                ..
            } => CostClass::RowReduce(*op),
            VectorOp::Reduce {
                axis: Axis::Col, ..
            } => CostClass::ColReduce,
            VectorOp::BinaryScalar { .. }
            | VectorOp::Expand { .. }
            | VectorOp::Cast { .. }
            | VectorOp::LeakyRelu { .. }
            | VectorOp::Fill { .. }
            | VectorOp::FillPad { .. } => CostClass::VectorSimple,
            VectorOp::SetValidShape { .. } => CostClass::Unit,
        }
    }

    pub(super) fn fmt(&self, n: &Names<'_>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lower = |x: &dyn fmt::Debug| format!("{x:?}").to_lowercase();
        match self {
            VectorOp::Unary { op, dst, src } => {
                write!(f, "{} {} <- {}", lower(op), n.tile(dst), n.tile(src))
            }
            VectorOp::Binary { op, dst, lhs, rhs } => write!(
                f,
                "{} {} <- {}, {}",
                lower(op),
                n.tile(dst),
                n.tile(lhs),
                n.tile(rhs)
            ),
            VectorOp::BinaryScalar {
                op,
                dst,
                src,
                scalar,
            } => write!(
                f,
                "{}s {} <- {}, {}",
                lower(op),
                n.tile(dst),
                n.tile(src),
                n.scalar(scalar)
            ),
            VectorOp::Reduce { op, axis, dst, src } => write!(
                f,
                "{}_{} {} <- {}",
                axis.lower(),
                lower(op),
                n.tile(dst),
                n.tile(src)
            ),
            VectorOp::Broadcast {
                op,
                axis,
                dst,
                src,
                operand,
            } => write!(
                f,
                "{}_expand_{} {} <- {}, {}",
                axis.lower(),
                lower(op),
                n.tile(dst),
                n.tile(src),
                n.tile(operand)
            ),
            VectorOp::Expand { axis, dst, src } => write!(
                f,
                "{}_expand {} <- {}",
                axis.lower(),
                n.tile(dst),
                n.tile(src)
            ),
            VectorOp::Cast { dst, src, round } => write!(
                f,
                "cast {} <- {} round {}",
                n.tile(dst),
                n.tile(src),
                lower(round)
            ),
            VectorOp::LeakyRelu { dst, src, slope } => write!(
                f,
                "leaky_relu {} <- {}, slope {}",
                n.tile(dst),
                n.tile(src),
                n.scalar(slope)
            ),
            VectorOp::Fill { dst, value } => {
                write!(f, "fill {} = {}", n.tile(dst), n.scalar(value))
            }
            VectorOp::SetValidShape { tile, rows, cols } => {
                write!(f, "set_validshape {} = [{rows}, {cols}]", n.tile(tile))
            }
            VectorOp::FillPad { tile } => write!(f, "fillpad {}", n.tile(tile)),
        }
    }
}

#[cfg(test)]
impl VectorOp {
    /// One op of every variant, in `NAMES` order (the name table's round-trip test).
    pub(super) fn samples() -> Vec<Self> {
        use super::sample::*;
        vec![
            VectorOp::Unary {
                op: UnaryOp::Abs,
                dst: t(),
                src: t(),
            },
            VectorOp::Binary {
                op: BinaryOp::Add,
                dst: t(),
                lhs: t(),
                rhs: t(),
            },
            VectorOp::BinaryScalar {
                op: BinaryOp::Mul,
                dst: t(),
                src: t(),
                scalar: 2.0f64.into(),
            },
            VectorOp::Reduce {
                op: ReduceOp::Sum,
                axis: Axis::Row,
                dst: t(),
                src: t(),
            },
            VectorOp::Broadcast {
                op: BinaryOp::Sub,
                axis: Axis::Row,
                dst: t(),
                src: t(),
                operand: t(),
            },
            VectorOp::Expand {
                axis: Axis::Col,
                dst: t(),
                src: t(),
            },
            VectorOp::Cast {
                dst: t(),
                src: t(),
                round: RoundMode::Rint,
            },
            VectorOp::LeakyRelu {
                dst: t(),
                src: t(),
                slope: 0.1f64.into(),
            },
            VectorOp::Fill {
                dst: t(),
                value: 1.0f64.into(),
            },
            VectorOp::SetValidShape {
                tile: t(),
                rows: e(),
                cols: e(),
            },
            VectorOp::FillPad { tile: t() },
        ]
    }
}
