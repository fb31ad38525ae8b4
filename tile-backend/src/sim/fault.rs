//! Why an op failed at run time: [`SimFault`], carried by [`SimError::Op`](super::SimError::Op)
//! with the block, core and op it happened in.
//!
//! A fault is built only on the failing branch (no formatting, no allocation on a run that
//! succeeds); its text is made when it is displayed.

use crate::ir::{DType, EvalError, Kernel, MemSpace, ParamId};
use crate::verify::Rule;
use std::fmt;
use thiserror::Error;

/// What went wrong in an op at run time, with the numbers involved. Each variant's text names
/// the rule the kernel broke; [`SimFault::Internal`] alone is the simulator's own fault.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum SimFault {
    /// An index or bound expression failed: division or remainder by zero, i64 overflow, or a
    /// read of a variable or argument the core does not know.
    #[error("expression: {0}")]
    Expr(#[from] EvalError),
    /// A runtime value is below the least its use allows (a loop step of 0, a gather's
    /// `block_size` of 0, a negative move offset, GM element index or window width).
    #[error("{what} is {value}, below its minimum {min}")]
    TooSmall {
        /// The value's role.
        what: &'static str,
        /// Its value.
        value: i64,
        /// The least it may be.
        min: i64,
    },
    /// A GM access (load, store, gather row, scalar) reaches outside its tensor's bytes. An
    /// access whose end overflows has `len` saturated to `usize::MAX`.
    #[error("GM access of {len} B at byte {offset} is outside argument {} ({size} B)", ArgName(*param, name))]
    GmOutOfBounds {
        /// The tensor's parameter.
        param: ParamId,
        /// Its name (empty until the run names it).
        name: String,
        /// First byte accessed.
        offset: usize,
        /// Bytes accessed.
        len: usize,
        /// Bytes of the tensor.
        size: usize,
    },
    /// A store, atomic add or scalar write into a tensor passed as a borrowed (read-only) input.
    #[error("GM write into argument {}, a read-only borrowed input", ArgName(*param, name))]
    GmReadOnly {
        /// The tensor's parameter.
        param: ParamId,
        /// Its name (empty until the run names it).
        name: String,
    },
    /// An argument is not of the kind the op needs (a GM tensor, a 2-D one, a scalar).
    #[error("argument {} is not {expected}", ArgName(*param, name))]
    ArgKind {
        /// The parameter.
        param: ParamId,
        /// Its name (empty until the run names it).
        name: String,
        /// What the op needs.
        expected: &'static str,
    },
    /// An element of the region an op moves lies outside its GM view window (the tile's valid
    /// shape is larger than the window).
    #[error("element ({row}, {col}) is outside the {rows}x{cols} GM window")]
    WindowOutOfBounds {
        /// Element row in the window.
        row: usize,
        /// Element column.
        col: usize,
        /// The window's rows.
        rows: i64,
        /// The window's columns.
        cols: i64,
    },
    /// A scalar read or write (`read_scalar`, `write_scalar`, `read_tile_scalar`) at an element
    /// outside its tensor or tile.
    #[error("scalar access at element {index} is outside `{name}` ({len} elements)")]
    ScalarIndex {
        /// The tensor's or tile's name.
        name: String,
        /// The element index.
        index: i64,
        /// Elements of the tensor or tile.
        len: u64,
    },
    /// `read_tile_scalar` of a tile outside UB: the scalar unit reads only Vec tiles.
    #[error(
        "read_tile_scalar of tile `{tile}` in {space}: the scalar unit reads only UB (Vec) tiles"
    )]
    ScalarSpace {
        /// The tile.
        tile: String,
        /// Its space.
        space: MemSpace,
    },
    /// A tile with a dynamic valid shape is used on a core that never set it.
    #[error("tile `{tile}` has a dynamic valid shape that was never set (set_validshape)")]
    ValidShapeUnset {
        /// The tile.
        tile: String,
    },
    /// `set_validshape` to a shape negative or larger than the tile.
    #[error("valid shape {rows}x{cols} is outside `{tile}`'s {}x{}", shape.0, shape.1)]
    ValidShapeTooLarge {
        /// The tile.
        tile: String,
        /// Valid rows asked for.
        rows: i64,
        /// Valid columns asked for.
        cols: i64,
        /// The tile's rows and columns.
        shape: (u64, u64),
    },
    /// A region an op reads or writes (its valid shape, a product, gathered rows, scale words)
    /// reaches past the tile's rows or columns.
    #[error("a region up to [{}, {}] is outside the {}x{} tile `{tile}`", end.0, end.1, shape.0, shape.1)]
    RegionOutsideTile {
        /// The tile.
        tile: String,
        /// One past the region's last row and column.
        end: (usize, usize),
        /// The tile's rows and columns.
        shape: (usize, usize),
    },
    /// A tile's bytes run past the end of its buffer (its planned address does not fit).
    #[error("tile `{tile}` at {addr:#x} ({bytes} B) overruns its {space} buffer of {buffer} B")]
    BufferOverrun {
        /// The tile.
        tile: String,
        /// Its space.
        space: MemSpace,
        /// Its byte address.
        addr: usize,
        /// Its bytes.
        bytes: usize,
        /// Bytes of the buffer.
        buffer: usize,
    },
    /// A reference to a tile id the kernel does not declare (or an alias of one).
    #[error("tile id {id} is not declared")]
    UnknownTile {
        /// The tile id.
        id: u32,
    },
    /// A tile has no planned address (the kernel was not compiled).
    #[error("tile `{tile}` has no address")]
    NoAddress {
        /// The tile.
        tile: String,
    },
    /// Two operands whose dtypes must agree do not (a load, store or gather across dtypes).
    #[error("{what}: {found} where {expected} is needed")]
    DtypeMismatch {
        /// The transfer.
        what: &'static str,
        /// The dtype found.
        found: DType,
        /// The dtype needed.
        expected: DType,
    },
    /// An operand's dtype is not one the instruction takes.
    #[error("{what} of {dtype} tile `{tile}`: {supported} only")]
    UnsupportedDtype {
        /// The operand.
        what: &'static str,
        /// The tile.
        tile: String,
        /// Its dtype.
        dtype: DType,
        /// The dtypes it takes.
        supported: &'static str,
    },
    /// Two shapes that must agree do not (a matmul's A and B over k, a vector op's operands).
    #[error("{what}: {}x{} and {}x{} differ", a.0, a.1, b.0, b.1)]
    ShapeMismatch {
        /// The operands.
        what: &'static str,
        /// The first shape.
        a: (usize, usize),
        /// The second shape.
        b: (usize, usize),
    },
    /// A move between two spaces no data path joins.
    #[error("move {from} -> {to} is not a legal path")]
    IllegalMove {
        /// The source space.
        from: MemSpace,
        /// The destination space.
        to: MemSpace,
    },
    /// The verifier's `acc-stride` rule: a Fixpipe read of an Acc tile at an L0C stride other
    /// than the one the matmul wrote its column blocks at (the device would read the wrong rows).
    #[error("acc-stride: {what} of Acc `{tile}` reads L0C at a stride of {} rows (from {read_rows} rows), but the matmul wrote column blocks of {} rows (m = {written_rows}): the device would read the wrong rows, so TileSim refuses it", read_rows.div_ceil(16) * 16, written_rows.div_ceil(16) * 16)]
    AccStride {
        /// The instruction (`TMOV`, `TEXTRACT`, `TSTORE`).
        what: &'static str,
        /// The Acc tile.
        tile: String,
        /// The rows the read takes its stride from.
        read_rows: usize,
        /// The rows `m` of the matmul that wrote the tile.
        written_rows: usize,
    },
    /// A gather's logical token is negative or beyond its block table.
    #[error("gather index {index} at position {position} is outside the block table's {blocks} blocks of {block_size} tokens")]
    GatherIndex {
        /// The token.
        index: i64,
        /// Its position in the indices.
        position: usize,
        /// Entries of the block table window.
        blocks: usize,
        /// Tokens per block.
        block_size: i64,
    },
    /// A block-table entry maps a gathered token outside the source's rows.
    #[error("block-table entry {entry} (block {block}) maps token {token} outside the source's {rows} rows")]
    GatherTableEntry {
        /// The entry.
        entry: i64,
        /// Its position in the block table.
        block: usize,
        /// The token.
        token: i64,
        /// Rows of the source.
        rows: usize,
    },
    /// A gather's columns (`col_offset .. col_offset + size`) reach outside its source's columns.
    #[error("gather columns {start}..{end} are outside the source's {cols}")]
    GatherColumns {
        /// First column.
        start: i64,
        /// One past the last column.
        end: i64,
        /// Columns of the source.
        cols: usize,
    },
    /// Never-written (poison) bytes reach a value: an op reads an element nothing wrote.
    #[error("poison: {what} uses never-written bytes of tile `{tile}` (element [{}, {}])", element.0, element.1)]
    Poison {
        /// The reader (`a vector op`, `a store to GM`, `matmul output`, ...).
        what: &'static str,
        /// The tile.
        tile: String,
        /// The first poison element: row and column of the region read (for a matmul, of its
        /// output; for `read_tile_scalar`, the element index split at the tile's columns).
        element: (usize, usize),
    },
    /// Shape rules of the verifier that depend on runtime valid shapes, broken when the op ran
    /// (sort instructions), each with its rule and message.
    #[error("{what} at run time: {}", Broken(broken))]
    RulesBroken {
        /// The instruction.
        what: &'static str,
        /// The rules broken and why.
        broken: Vec<(Rule, String)>,
    },
    /// A cross-core flag id out of range for the core that sets or waits on it.
    #[error("cross-core flag id {id} out of range for this core")]
    CrossFlag {
        /// The flag id.
        id: u8,
    },
    /// A channel op reached the simulator: channels must be lowered to cross-core flags first
    /// (`passes::compile`).
    #[error("channel ops must be lowered to cross-core flags first (passes::compile)")]
    ChannelNotLowered,
    /// An invariant of the simulator itself failed (a bug in TileSim, not in the kernel).
    #[error("internal simulator error: {0}")]
    Internal(&'static str),
}

impl SimFault {
    /// Argument `param` is not `expected` (named later: see [`SimFault::named`]).
    pub(crate) fn arg_kind(param: ParamId, expected: &'static str) -> Self {
        SimFault::ArgKind {
            param,
            name: String::new(),
            expected,
        }
    }

    /// The fault with the kernel's parameter names filled in (GM faults are raised where only
    /// the parameter id is known). Called once, when the fault becomes a
    /// [`SimError`](super::SimError).
    pub(crate) fn named(mut self, kernel: &Kernel) -> Self {
        if let SimFault::GmOutOfBounds { param, name, .. }
        | SimFault::GmReadOnly { param, name }
        | SimFault::ArgKind { param, name, .. } = &mut self
        {
            if name.is_empty() {
                if let Some(p) = kernel.try_param(*param) {
                    name.clone_from(&p.name);
                }
            }
        }
        self
    }
}

/// An argument as a fault shows it: its name in backquotes, or `#id` when it has none.
struct ArgName<'a>(ParamId, &'a str);

impl fmt::Display for ArgName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.1 {
            "" => write!(f, "#{}", self.0 .0),
            name => write!(f, "`{name}`"),
        }
    }
}

/// Broken rules as `[code] message; ...`.
struct Broken<'a>(&'a [(Rule, String)]);

impl fmt::Display for Broken<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (rule, m)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "[{}] {m}", rule.code())?;
        }
        Ok(())
    }
}
