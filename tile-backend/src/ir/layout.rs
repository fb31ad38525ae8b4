//! Tile layouts and their element-offset formulas (ASCEND950.md §3).

use super::{DType, MemSpace};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Bytes of one C0 unit: a boxed row of 16-element fractals holds C0 = 32 B / element size.
pub const C0_BYTES: u64 = 32;

/// How a 2-D tile is laid out in its buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Layout {
    /// Row-major.
    ND,
    /// Column-major.
    DN,
    /// Column-major grid of row-major boxes (16 x C0; 16 x 16 in Acc).
    NZ,
    /// Row-major grid of column-major boxes (C0 x 16).
    ZN,
    /// Row-major grid of row-major boxes (16 x C0).
    ZZ,
}

/// The inner box of a boxed layout: `rows x cols` elements, row-major for NZ/ZZ, column-major for ZN.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Fractal {
    /// Rows of one box.
    pub rows: u64,
    /// Columns of one box.
    pub cols: u64,
}

impl Fractal {
    /// Elements in one box.
    pub const fn elems(self) -> u64 {
        self.rows * self.cols
    }
}

/// `v` rounded up to a multiple of `m` (`m` = 0 is treated as 1): the one round-up of the
/// workspace (tile shapes, fractal padding, plan sizes).
pub const fn round_up(v: u64, m: u64) -> u64 {
    let m = if m == 0 { 1 } else { m };
    v.div_ceil(m) * m
}

/// C0 of a dtype: how many elements make 32 bytes (fp32 8, fp16 16, int8 32).
pub const fn c0(dtype: DType) -> u64 {
    C0_BYTES / dtype.size_bytes()
}

impl Layout {
    /// True for the fractal (boxed) layouts NZ, ZN and ZZ.
    pub const fn is_boxed(self) -> bool {
        matches!(self, Layout::NZ | Layout::ZN | Layout::ZZ)
    }

    /// The box this layout uses for `dtype` in `space`: 16 x 16 in Acc, 16 x C0 for NZ/ZZ,
    /// C0 x 16 for ZN; `None` for ND/DN.
    pub const fn default_fractal(self, dtype: DType, space: MemSpace) -> Option<Fractal> {
        match (self, space) {
            (Layout::ND | Layout::DN, _) => None,
            (_, MemSpace::Acc) => Some(Fractal { rows: 16, cols: 16 }),
            (Layout::ZN, _) => Some(Fractal {
                rows: c0(dtype),
                cols: 16,
            }),
            (Layout::NZ | Layout::ZZ, _) => Some(Fractal {
                rows: 16,
                cols: c0(dtype),
            }),
        }
    }

    /// Element offset of `(row, col)` in a tile of `rows x cols` stored in this layout.
    ///
    /// `fractal` is the inner box for boxed layouts (ignored for ND/DN); `rows` and `cols` must be
    /// multiples of the box for boxed layouts.
    pub fn element_offset(
        self,
        row: u64,
        col: u64,
        rows: u64,
        cols: u64,
        fractal: Option<Fractal>,
    ) -> u64 {
        match self {
            Layout::ND => row * cols + col,
            Layout::DN => col * rows + row,
            Layout::NZ | Layout::ZN | Layout::ZZ => {
                let f = fractal.unwrap_or(Fractal { rows: 1, cols: 1 });
                let (ir, ic) = (f.rows.max(1), f.cols.max(1));
                let (br, bc) = (row / ir, col / ic);
                let (r, c) = (row % ir, col % ic);
                let (nbr, nbc) = (rows / ir, cols / ic);
                match self {
                    Layout::NZ => (nbr * bc + br) * ir * ic + r * ic + c,
                    Layout::ZN => (nbc * br + bc) * ir * ic + c * ir + r,
                    _ => (nbc * br + bc) * ir * ic + r * ic + c,
                }
            }
        }
    }

    /// PTO name of the layout.
    pub const fn name(self) -> &'static str {
        match self {
            Layout::ND => "ND",
            Layout::DN => "DN",
            Layout::NZ => "NZ",
            Layout::ZN => "ZN",
            Layout::ZZ => "ZZ",
        }
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
