//! Tile <-> tile moves (TMOV / TEXTRACT / TINSERT and their Fixpipe `_FP` forms). The pipe of a
//! move follows from its spaces through the machine's legal-move table (`Arch::pipe_of`).

use super::display::Names;
use super::{CostClass, GmUse, ParamId, Phase, Scale, UnitFlag};
use crate::ir::{Expr, Kernel, TileRef};
use serde::{Deserialize, Serialize};
use std::fmt::{self, Write};

/// How the Fixpipe distributes an Acc tile to the vector cores' UBs (ASCEND950.md §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AccToVecMode {
    /// The whole tile to AIV0's UB.
    SingleModeVec0,
    /// The whole tile to AIV1's UB.
    SingleModeVec1,
    /// Rows split: AIV0 the first half, AIV1 the rest.
    DualModeSplitM,
    /// Columns split: AIV0 the first half, AIV1 the rest.
    DualModeSplitN,
}

impl AccToVecMode {
    /// True for the dual (split) modes.
    pub const fn is_dual(self) -> bool {
        matches!(
            self,
            AccToVecMode::DualModeSplitM | AccToVecMode::DualModeSplitN
        )
    }
}

/// A tile-to-tile move.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum MoveOp {
    /// A tile-to-tile move (TMOV / TEXTRACT / TINSERT); the pipe follows from the spaces.
    Move {
        /// Destination tile.
        dst: TileRef,
        /// Source tile.
        src: TileRef,
        /// `[row, col]`: where to read in a larger source (extract) or write in a larger
        /// destination (insert).
        offset: Option<[Expr; 2]>,
        /// Acc -> Vec distribution to the vector cores.
        acc_to_vec: Option<AccToVecMode>,
        /// Fixpipe ReLU (`relu_pre_mode = NormalRelu`).
        relu: bool,
        /// Fixpipe quantisation.
        scale: Option<Scale>,
        /// Unit-flag handshake with the matmul that wrote the Acc tile.
        phase: Option<Phase>,
    },
}

impl MoveOp {
    /// The JSON variant names.
    pub(super) const NAMES: &'static [&'static str] = &["Move"];

    /// Short name for diagnostics.
    pub fn name(&self) -> &'static str {
        match self {
            MoveOp::Move { .. } => "move",
        }
    }

    /// Tiles read: the source and a Scaling tile.
    pub fn tile_reads(&self) -> Vec<&TileRef> {
        match self {
            MoveOp::Move { src, scale, .. } => {
                std::iter::once(src).chain(Scale::tile(scale)).collect()
            }
        }
    }

    /// Tiles written: the destination.
    pub fn tile_writes(&self) -> Vec<&TileRef> {
        match self {
            MoveOp::Move { dst, .. } => vec![dst],
        }
    }

    /// Moves touch no GM tensor.
    pub fn gm_use(&self, _: ParamId) -> GmUse {
        match self {
            MoveOp::Move { .. } => GmUse::None,
        }
    }

    /// The PTO instruction: `TMOV`, `TEXTRACT` (an offset into a source at least as large as the
    /// destination) or `TINSERT`, each with its `_FP` form when a Scaling tile quantises it
    /// outside an `AccToVecMode` move.
    pub fn instruction(&self, kernel: &Kernel) -> &'static str {
        match self {
            MoveOp::Move {
                dst,
                src,
                offset,
                acc_to_vec,
                scale,
                ..
            } => {
                let fp = matches!(scale, Some(Scale::Tile(_))) && acc_to_vec.is_none();
                let extract = match (kernel.try_tile(dst.tile), kernel.try_tile(src.tile)) {
                    (Some(d), Some(s)) => s.ty.rows >= d.ty.rows && s.ty.cols >= d.ty.cols,
                    _ => true,
                };
                match (offset.is_some(), extract, fp) {
                    (false, _, false) => "TMOV",
                    (false, _, true) => "TMOV_FP",
                    (true, true, false) => "TEXTRACT",
                    (true, true, true) => "TEXTRACT_FP",
                    (true, false, false) => "TINSERT",
                    (true, false, true) => "TINSERT_FP",
                }
            }
        }
    }

    /// The cost formula.
    pub fn cost_class(&self) -> CostClass<'_> {
        match self {
            MoveOp::Move { .. } => CostClass::Move,
        }
    }

    /// A Fixpipe read's unit-flag handshake.
    pub fn unit_flag(&self) -> Option<UnitFlag<'_>> {
        match self {
            MoveOp::Move { src, phase, .. } => phase.map(|p| UnitFlag::Read(src, p)),
        }
    }

    pub(super) fn fmt(&self, n: &Names<'_>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MoveOp::Move {
                dst,
                src,
                offset,
                acc_to_vec,
                relu,
                scale,
                phase,
            } => {
                let (sp, dp) = (n.space(src), n.space(dst));
                let mut s = format!("move {} <- {} ({sp} -> {dp})", n.tile(dst), n.tile(src));
                if let Some([r, c]) = offset {
                    let _ = write!(s, " offset [{r}, {c}]");
                }
                if let Some(m) = acc_to_vec {
                    let _ = write!(s, " {m:?}");
                }
                if *relu {
                    s.push_str(" relu");
                }
                if let Some(sc) = scale {
                    let _ = write!(s, " {}", n.scale(sc));
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
impl MoveOp {
    /// One op of every variant, in `NAMES` order (the name table's round-trip test).
    pub(super) fn samples() -> Vec<Self> {
        use super::sample::*;
        vec![MoveOp::Move {
            dst: t(),
            src: t(),
            offset: None,
            acc_to_vec: None,
            relu: false,
            scale: None,
            phase: None,
        }]
    }
}
