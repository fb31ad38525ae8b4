//! Scalar-unit accesses (S pipe): GM elements through the core's data cache, and UB tile
//! elements read directly.

use super::display::Names;
use super::{CostClass, GmUse, ParamId, Pipe};
use crate::ir::{Expr, Kernel, TileRef, VarId};
use serde::{Deserialize, Serialize};
use std::fmt;

/// A scalar read or write.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ScalarOp {
    /// Reads one GM element into a scalar variable (through the core's data cache; S).
    ReadScalar {
        /// Variable receiving the value.
        var: VarId,
        /// GM tensor.
        tensor: ParamId,
        /// Element index.
        index: Expr,
    },
    /// Reads one element of a Vec (UB) tile into a scalar variable (PTO `Tile::GetValue`; S).
    /// The scalar unit reads UB directly, without the data cache: a batch of control values
    /// (indices, block-table entries) loaded GM -> UB by one DMA is then read at UB cost.
    ReadTileScalar {
        /// Variable receiving the value.
        var: VarId,
        /// The Vec tile read.
        tile: TileRef,
        /// Element offset in the tile's storage order (row-major for ND: `row * cols + col`).
        index: Expr,
    },
    /// Writes one GM element (held in the core's data cache until kernel end; S).
    WriteScalar {
        /// GM tensor.
        tensor: ParamId,
        /// Element index.
        index: Expr,
        /// Value.
        value: Expr,
    },
}

impl ScalarOp {
    /// The JSON variant names.
    pub(super) const NAMES: &'static [&'static str] =
        &["ReadScalar", "ReadTileScalar", "WriteScalar"];

    /// Short name for diagnostics.
    pub fn name(&self) -> &'static str {
        match self {
            ScalarOp::ReadScalar { .. } => "read_scalar",
            ScalarOp::ReadTileScalar { .. } => "read_tile_scalar",
            ScalarOp::WriteScalar { .. } => "write_scalar",
        }
    }

    /// The variable a read defines.
    pub fn defines(&self) -> Option<VarId> {
        match self {
            ScalarOp::ReadScalar { var, .. } | ScalarOp::ReadTileScalar { var, .. } => Some(*var),
            ScalarOp::WriteScalar { .. } => None,
        }
    }

    /// Tiles read: the UB tile of a tile-element read.
    pub fn tile_reads(&self) -> Vec<&TileRef> {
        match self {
            ScalarOp::ReadTileScalar { tile, .. } => vec![tile],
            ScalarOp::ReadScalar { .. } | ScalarOp::WriteScalar { .. } => vec![],
        }
    }

    /// Tiles written: none.
    pub fn tile_writes(&self) -> Vec<&TileRef> {
        vec![]
    }

    /// GM reads and writes of one element.
    pub fn gm_use(&self, p: ParamId) -> GmUse {
        match self {
            ScalarOp::ReadScalar { tensor, .. } | ScalarOp::WriteScalar { tensor, .. } => {
                GmUse::other_if(*tensor == p)
            }
            ScalarOp::ReadTileScalar { .. } => GmUse::None,
        }
    }

    /// The scalar pipe.
    pub fn pipe(&self) -> Pipe {
        Pipe::S
    }

    /// The intrinsic.
    pub fn instruction(&self, _: &Kernel) -> &'static str {
        match self {
            ScalarOp::ReadScalar { .. } => "GM scalar read",
            ScalarOp::ReadTileScalar { .. } => "GetValue",
            ScalarOp::WriteScalar { .. } => "GM scalar write",
        }
    }

    /// The cost formula.
    pub fn cost_class(&self) -> CostClass<'_> {
        match self {
            ScalarOp::ReadScalar { .. } => CostClass::ScalarGmRead,
            ScalarOp::ReadTileScalar { .. } => CostClass::ScalarUbRead,
            ScalarOp::WriteScalar { .. } => CostClass::Unit,
        }
    }

    pub(super) fn fmt(&self, n: &Names<'_>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScalarOp::ReadScalar { var, tensor, index } => write!(
                f,
                "read_scalar {} = {}[{index}]",
                n.var(var.0),
                n.param(*tensor)
            ),
            ScalarOp::ReadTileScalar { var, tile, index } => write!(
                f,
                "read_tile_scalar {} = {}[{index}]",
                n.var(var.0),
                n.tile(tile)
            ),
            ScalarOp::WriteScalar {
                tensor,
                index,
                value,
            } => write!(f, "write_scalar {}[{index}] = {value}", n.param(*tensor)),
        }
    }
}

#[cfg(test)]
impl ScalarOp {
    /// One op of every variant, in `NAMES` order (the name table's round-trip test).
    pub(super) fn samples() -> Vec<Self> {
        use super::sample::*;
        vec![
            ScalarOp::ReadScalar {
                var: VarId(0),
                tensor: ParamId(0),
                index: e(),
            },
            ScalarOp::ReadTileScalar {
                var: VarId(0),
                tile: t(),
                index: e(),
            },
            ScalarOp::WriteScalar {
                tensor: ParamId(0),
                index: e(),
                value: e(),
            },
        ]
    }
}
