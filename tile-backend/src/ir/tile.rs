//! Tiles: typed on-chip buffers with an allocated and a valid shape.

use super::{DType, Expr, Fractal, Layout, MemSpace, ParamId};
use serde::{Deserialize, Serialize};
use std::fmt;

/// A declared tile (or tile group), by position in [`crate::ir::Kernel::tiles`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TileId(pub u32);

/// One dimension of a tile's valid shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ValidDim {
    /// Known when the kernel is built.
    Static(u64),
    /// Set at run time by `set_validshape` (PTO `DYNAMIC`).
    Dynamic,
}

/// The value reads outside the valid region see, and that `fillpad` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PadValue {
    /// No pad value: the padding holds whatever was there.
    Null,
    /// Zero.
    Zero,
    /// The dtype's largest value (+inf for floats).
    Max,
    /// The dtype's smallest value (-inf for floats).
    Min,
}

/// The static type of a tile.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TileType {
    /// Memory space.
    pub space: MemSpace,
    /// Element type.
    pub dtype: DType,
    /// Allocated rows.
    pub rows: u64,
    /// Allocated columns.
    pub cols: u64,
    /// Storage layout.
    pub layout: Layout,
    /// Inner box of a boxed layout (`None` for ND/DN).
    pub fractal: Option<Fractal>,
    /// Valid rows.
    pub valid_rows: ValidDim,
    /// Valid columns.
    pub valid_cols: ValidDim,
    /// Pad value.
    pub pad: PadValue,
}

impl TileType {
    /// A tile of `rows x cols` in `space` with the layout's default fractal, fully valid, no pad.
    pub fn new(space: MemSpace, dtype: DType, rows: u64, cols: u64, layout: Layout) -> Self {
        TileType {
            space,
            dtype,
            rows,
            cols,
            layout,
            fractal: layout.default_fractal(dtype, space),
            valid_rows: ValidDim::Static(rows),
            valid_cols: ValidDim::Static(cols),
            pad: PadValue::Null,
        }
    }

    /// Same tile with a runtime valid shape.
    pub fn dynamic(mut self) -> Self {
        self.valid_rows = ValidDim::Dynamic;
        self.valid_cols = ValidDim::Dynamic;
        self
    }

    /// Same tile with the given static valid shape.
    pub fn valid(mut self, rows: u64, cols: u64) -> Self {
        self.valid_rows = ValidDim::Static(rows);
        self.valid_cols = ValidDim::Static(cols);
        self
    }

    /// Same tile with the given pad value.
    pub fn pad(mut self, pad: PadValue) -> Self {
        self.pad = pad;
        self
    }

    /// Elements allocated (saturating at `u64::MAX`).
    pub fn elems(&self) -> u64 {
        self.rows.saturating_mul(self.cols)
    }

    /// Bytes allocated for one buffer of this tile. Saturates at `u64::MAX` (a tile of 2^63
    /// rows must fail the capacity check, not wrap around to a small size and pass it).
    pub fn bytes(&self) -> u64 {
        self.elems().saturating_mul(self.dtype.size_bytes())
    }

    /// Element offset of `(row, col)` in this tile's storage.
    pub fn element_offset(&self, row: u64, col: u64) -> u64 {
        self.layout
            .element_offset(row, col, self.rows, self.cols, self.fractal)
    }
}

impl fmt::Display for TileType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = |d: ValidDim| match d {
            ValidDim::Static(n) => n.to_string(),
            ValidDim::Dynamic => "?".into(),
        };
        write!(
            f,
            "{}<{}, {}x{}, {}",
            self.space, self.dtype, self.rows, self.cols, self.layout
        )?;
        if (self.valid_rows, self.valid_cols)
            != (ValidDim::Static(self.rows), ValidDim::Static(self.cols))
        {
            write!(f, ", valid {}x{}", v(self.valid_rows), v(self.valid_cols))?;
        }
        f.write_str(">")
    }
}

/// Where a tile's bytes come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Storage {
    /// Its own allocation (address chosen by memory planning unless `addr` is set).
    Alloc,
    /// A `reinterpret` of another tile: the same bytes, re-declared (ASCEND950.md §7).
    Alias {
        /// The tile whose bytes this one re-declares.
        of: TileId,
    },
}

/// A tile declaration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TileDecl {
    /// Name for dumps, diagnostics and emitted code.
    pub name: String,
    /// The tile's type.
    pub ty: TileType,
    /// Number of rotating buffers (2 for ping-pong); a reference picks one with its slot.
    pub buffers: u32,
    /// Own allocation or alias.
    pub storage: Storage,
    /// Byte address of buffer 0 in its space, if fixed by the author or by memory planning.
    /// Buffer `i` lives at `addr + i * stride` where the stride is the planner's aligned size.
    pub addr: Option<u64>,
}

/// A use of a tile: which tile and, for a tile group, which buffer (`group[i % n]`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TileRef {
    /// The tile.
    pub tile: TileId,
    /// The buffer index, `0` for a single buffer.
    pub slot: Expr,
}

impl TileId {
    /// Buffer `slot` of this tile group; `slot` is taken modulo the group size when run.
    pub fn at(self, slot: impl Into<Expr>) -> TileRef {
        TileRef {
            tile: self,
            slot: slot.into(),
        }
    }
}

impl From<TileId> for TileRef {
    fn from(t: TileId) -> Self {
        TileRef {
            tile: t,
            slot: Expr::Const(0),
        }
    }
}

impl From<&TileRef> for TileRef {
    fn from(t: &TileRef) -> Self {
        t.clone()
    }
}

/// A 2-D window of a GM tensor (PTO `GlobalTensor`).
///
/// Element `(r, c)` of an ND view is at `offset + r * stride + c`, of a DN view at
/// `offset + c * stride + r`; an NZ view is a tile-shaped boxed block starting at `offset`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GmView {
    /// The GM tensor argument.
    pub tensor: ParamId,
    /// Element offset of the window's first element.
    pub offset: Expr,
    /// Rows of the window.
    pub rows: Expr,
    /// Columns of the window.
    pub cols: Expr,
    /// Elements between consecutive rows (ND) or columns (DN).
    pub stride: Expr,
    /// Layout of the window in GM.
    pub layout: Layout,
}
