//! The sort instructions of the vector core (A5-FACTS §6; PTO-ISA `docs/isa/TSORT32.md`,
//! `TMRGSORT.md`, `include/pto/npu/a5/TSort32.hpp`, `TMrgSort.hpp`): TSORT32 (the SFU's VBS32,
//! `vbitsort`) sorts 32-element blocks into (value, index) pairs, TMRGSORT (`vmrgsort4`) merges
//! up to four sorted lists of pairs. Both are issued on the V pipe: the A5 TMRGSORT waits
//! `PIPE_V -> PIPE_S` before it reads the merge's status register (`npu/a5/TMrgSort.hpp`,
//! `GetExhaustedData`), and PTO's A5 tests order both with `PIPE_MTE2 -> PIPE_V` before and
//! `PIPE_V -> PIPE_MTE3` after (`tests/npu/a5/src/st/testcase/tsort32/tsort32_kernel.cpp:56-63`).
//!
//! A pair is 8 bytes: the value (f32, or f16 zero-padded to 4 bytes) then a u32 index, so a row
//! of `n` pairs is `2n` f32 or `4n` f16 columns ([`pair_cols`]). Lists are sorted descending.

use super::display::Names;
use super::{CostClass, GmUse, ParamId, Pipe};
use crate::ir::{DType, Kernel, TileRef};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Elements of `dtype` one 8-byte (value, index) pair spans: 2 for f32, 4 for f16 (`None` for a
/// dtype the sort instructions do not take).
pub const fn pair_cols(dtype: DType) -> Option<u64> {
    match dtype {
        DType::F32 => Some(2),
        DType::F16 => Some(4),
        DType::BF16
        | DType::I8
        | DType::U8
        | DType::I32
        | DType::U32
        | DType::I64
        | DType::U64
        | DType::F8E4M3
        | DType::F8E5M2 => None,
    }
}

/// A sort instruction.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SortOp {
    /// TSORT32 (VBS32; V): each 32-element block of each valid row of `src` with its u32 indices
    /// from `idx` (one row, or one per row) becomes 32 (value, index) pairs in `dst`, sorted
    /// descending, ties to the smaller index. With `tmp` (the 4-argument form) a row whose valid
    /// columns are not a multiple of 32 has its last block padded with the lowest value in `tmp`
    /// and sorted whole (the padded pairs land last and are written too).
    Sort32 {
        /// Pairs out: `[R, ceil32(C) * pair_cols]`.
        dst: TileRef,
        /// Values `[R, C]` (f32 or f16).
        src: TileRef,
        /// u32 indices `[R, C]` or `[1, C]` (one row for every row).
        idx: TileRef,
        /// Padding scratch of the tail form (same dtype as `src`).
        tmp: Option<TileRef>,
    },
    /// TMRGSORT, single-list form (`vmrgsort4` with repeat; V): the valid columns of `src` are
    /// groups of four sorted blocks of `block_len` elements each; each group is merged into one
    /// sorted run at the same place in `dst`.
    MrgSort {
        /// Merged runs, one row.
        dst: TileRef,
        /// Sorted blocks, one row.
        src: TileRef,
        /// Elements (not pairs) per block: a multiple of 64.
        block_len: u64,
    },
    /// TMRGSORT, multi-list form (`vmrgsort4`, non-exhausted mode; V): 2 to 4 sorted lists of
    /// pairs merged into `tmp`, whose first `dst` valid columns are then copied to `dst` (so a
    /// `dst` of `2k` f32 columns keeps the best `k` pairs). Ties across lists: the earlier list
    /// first is the simulator's model, an assumption (PTO-ISA documents no order).
    MrgSortLists {
        /// The best pairs, one row.
        dst: TileRef,
        /// The whole merge, one row (at least the sum of the lists' columns).
        tmp: TileRef,
        /// The sorted lists, one row each.
        srcs: Vec<TileRef>,
    },
}

impl SortOp {
    /// The JSON variant names.
    pub(super) const NAMES: &'static [&'static str] = &["Sort32", "MrgSort", "MrgSortLists"];

    /// Short name for diagnostics.
    pub fn name(&self) -> &'static str {
        match self {
            SortOp::Sort32 { .. } => "sort32",
            SortOp::MrgSort { .. } => "mrgsort",
            SortOp::MrgSortLists { .. } => "mrgsort_lists",
        }
    }

    /// Tiles read (the tail form's scratch is written, then read).
    pub fn tile_reads(&self) -> Vec<&TileRef> {
        match self {
            SortOp::Sort32 { src, idx, tmp, .. } => {
                let mut v = vec![src, idx];
                v.extend(tmp);
                v
            }
            SortOp::MrgSort { src, .. } => vec![src],
            SortOp::MrgSortLists { tmp, srcs, .. } => {
                let mut v: Vec<&TileRef> = srcs.iter().collect();
                v.push(tmp);
                v
            }
        }
    }

    /// Tiles written.
    pub fn tile_writes(&self) -> Vec<&TileRef> {
        match self {
            SortOp::Sort32 { dst, tmp, .. } => {
                let mut v = vec![dst];
                v.extend(tmp);
                v
            }
            SortOp::MrgSort { dst, .. } => vec![dst],
            SortOp::MrgSortLists { dst, tmp, .. } => vec![dst, tmp],
        }
    }

    /// Sort ops touch no GM tensor.
    pub fn gm_use(&self, _: ParamId) -> GmUse {
        GmUse::None
    }

    /// V (see the module doc for the source).
    pub fn pipe(&self) -> Pipe {
        match self {
            SortOp::Sort32 { .. } | SortOp::MrgSort { .. } | SortOp::MrgSortLists { .. } => Pipe::V,
        }
    }

    /// The PTO instruction.
    pub fn instruction(&self, _: &Kernel) -> &'static str {
        match self {
            SortOp::Sort32 { .. } => "TSORT32",
            SortOp::MrgSort { .. } | SortOp::MrgSortLists { .. } => "TMRGSORT",
        }
    }

    /// The cost formula: the A2/A3-derived sort figures (docs/simulator.md, "Cost figures").
    pub fn cost_class(&self) -> CostClass<'_> {
        match self {
            SortOp::Sort32 { .. } => CostClass::Sort32,
            SortOp::MrgSort { .. } | SortOp::MrgSortLists { .. } => CostClass::MrgSort,
        }
    }

    pub(super) fn fmt(&self, n: &Names<'_>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SortOp::Sort32 { dst, src, idx, tmp } => {
                write!(
                    f,
                    "sort32 {} <- {} with indices {}",
                    n.tile(dst),
                    n.tile(src),
                    n.tile(idx)
                )?;
                match tmp {
                    Some(t) => write!(f, " tmp {}", n.tile(t)),
                    None => Ok(()),
                }
            }
            SortOp::MrgSort {
                dst,
                src,
                block_len,
            } => write!(
                f,
                "mrgsort {} <- {} blocks of {block_len}",
                n.tile(dst),
                n.tile(src)
            ),
            SortOp::MrgSortLists { dst, tmp, srcs } => {
                let lists: Vec<String> = srcs.iter().map(|s| n.tile(s)).collect();
                write!(
                    f,
                    "mrgsort_lists {} <- merge({}) tmp {}",
                    n.tile(dst),
                    lists.join(", "),
                    n.tile(tmp)
                )
            }
        }
    }
}

#[cfg(test)]
impl SortOp {
    /// One op of every variant, in `NAMES` order (the name table's round-trip test).
    pub(super) fn samples() -> Vec<Self> {
        use super::sample::*;
        vec![
            SortOp::Sort32 {
                dst: t(),
                src: t(),
                idx: t(),
                tmp: Some(t()),
            },
            SortOp::MrgSort {
                dst: t(),
                src: t(),
                block_len: 64,
            },
            SortOp::MrgSortLists {
                dst: t(),
                tmp: t(),
                srcs: vec![t(), t()],
            },
        ]
    }
}
