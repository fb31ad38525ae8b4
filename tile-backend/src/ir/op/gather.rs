//! The paged gather of GM rows straight into an L1 tile (PyPTO `gather_in_l1`, ASCEND950.md §8;
//! MTE2).

use super::display::Names;
use super::{CostClass, GmUse, ParamId, Pipe};
use crate::ir::{Expr, GmView, Kernel, TileRef};
use serde::{Deserialize, Serialize};
use std::fmt;

/// A gather into L1.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum GatherOp {
    /// Paged gather of GM rows straight into an L1 tile (PyPTO `gather_in_l1`, ASCEND950.md §8).
    GatherInL1 {
        /// Mat tile `[n, size]` receiving the gathered rows.
        dst: TileRef,
        /// GM source `[T, C]`.
        src: ParamId,
        /// Logical token indices, a `[1, n]` window.
        indices: GmView,
        /// Block table, a `[1, nb]` window.
        block_table: GmView,
        /// Tokens per block.
        block_size: Expr,
        /// Columns gathered per row (`size <= C`).
        size: u64,
        /// First source column gathered (a cube tile's column start).
        col_offset: Expr,
        /// The result feeds the matmul as B (true) or A (false).
        is_b_matrix: bool,
        /// The result is consumed transposed.
        is_trans: bool,
    },
}

impl GatherOp {
    /// The JSON variant names.
    pub(super) const NAMES: &'static [&'static str] = &["GatherInL1"];

    /// Short name for diagnostics.
    pub fn name(&self) -> &'static str {
        match self {
            GatherOp::GatherInL1 { .. } => "gather_in_l1",
        }
    }

    /// Tiles read: none (the sources are GM).
    pub fn tile_reads(&self) -> Vec<&TileRef> {
        match self {
            GatherOp::GatherInL1 { .. } => vec![],
        }
    }

    /// Tiles written: the Mat tile.
    pub fn tile_writes(&self) -> Vec<&TileRef> {
        match self {
            GatherOp::GatherInL1 { dst, .. } => vec![dst],
        }
    }

    /// The source, the indices and the block table are read.
    pub fn gm_use(&self, p: ParamId) -> GmUse {
        match self {
            GatherOp::GatherInL1 {
                src,
                indices,
                block_table,
                ..
            } => GmUse::other_if(*src == p || indices.tensor == p || block_table.tensor == p),
        }
    }

    /// The source, indices and block table, read by DMA.
    pub fn dma_gm(&self) -> Vec<(ParamId, bool)> {
        match self {
            GatherOp::GatherInL1 {
                src,
                indices,
                block_table,
                ..
            } => vec![
                (*src, false),
                (indices.tensor, false),
                (block_table.tensor, false),
            ],
        }
    }

    /// MTE2.
    pub fn pipe(&self) -> Pipe {
        match self {
            GatherOp::GatherInL1 { .. } => Pipe::Mte2,
        }
    }

    /// The PTO instruction (one TLOAD per row).
    pub fn instruction(&self, _: &Kernel) -> &'static str {
        match self {
            GatherOp::GatherInL1 { .. } => "TLOAD",
        }
    }

    /// The cost formula.
    pub fn cost_class(&self) -> CostClass<'_> {
        match self {
            GatherOp::GatherInL1 { .. } => CostClass::Gather,
        }
    }

    pub(super) fn fmt(&self, n: &Names<'_>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GatherOp::GatherInL1 {
                dst,
                src,
                indices,
                block_table,
                block_size,
                size,
                col_offset,
                is_b_matrix,
                is_trans,
            } => {
                let mut s = format!(
                    "gather_in_l1 {} <- {} rows by {} through {}, block_size {block_size}, \
                     size {size}, col_offset {col_offset}",
                    n.tile(dst),
                    n.param(*src),
                    n.view(indices),
                    n.view(block_table)
                );
                if *is_b_matrix {
                    s.push_str(" b_matrix");
                }
                if *is_trans {
                    s.push_str(" trans");
                }
                f.write_str(&s)
            }
        }
    }
}

#[cfg(test)]
impl GatherOp {
    /// One op of every variant, in `NAMES` order (the name table's round-trip test).
    pub(super) fn samples() -> Vec<Self> {
        use super::sample::*;
        vec![GatherOp::GatherInL1 {
            dst: t(),
            src: ParamId(0),
            indices: v(),
            block_table: v(),
            block_size: e(),
            size: 1,
            col_offset: e(),
            is_b_matrix: false,
            is_trans: false,
        }]
    }
}
