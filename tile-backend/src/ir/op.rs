//! The operations of the tile machine (ASCEND950.md §4-§8).

use super::{Expr, GmView, ParamId, TileRef, VarId};
use serde::{Deserialize, Serialize};
use std::fmt;

/// An instruction pipe of a core.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Pipe {
    /// GM -> Vec/Mat loads, the per-row gather into L1, fill-pad on Mat.
    Mte2,
    /// Mat -> Left/Right/Bias moves.
    Mte1,
    /// The cube (matmul).
    M,
    /// The Fixpipe: Acc -> Vec/Mat/GM, Mat -> Scaling.
    Fix,
    /// Vector unit.
    V,
    /// Vec -> GM stores, Vec -> Mat moves.
    Mte3,
    /// Scalar unit.
    S,
    /// Every pipe (only as a barrier target).
    All,
}

impl Pipe {
    /// Every pipe, in the timeline's track order: the one list of pipes (the timeline, the cost
    /// report, the trace, the hazard checker and the sync pass iterate it).
    pub const ALL: [Pipe; 7] = [
        Pipe::S,
        Pipe::Mte2,
        Pipe::Mte1,
        Pipe::M,
        Pipe::Fix,
        Pipe::V,
        Pipe::Mte3,
    ];
}

impl Pipe {
    /// PTO spelling (`PIPE_MTE2`, ...).
    pub const fn pto_name(self) -> &'static str {
        match self {
            Pipe::Mte2 => "PIPE_MTE2",
            Pipe::Mte1 => "PIPE_MTE1",
            Pipe::M => "PIPE_M",
            Pipe::Fix => "PIPE_FIX",
            Pipe::V => "PIPE_V",
            Pipe::Mte3 => "PIPE_MTE3",
            Pipe::S => "PIPE_S",
            Pipe::All => "PIPE_ALL",
        }
    }
}

impl fmt::Display for Pipe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Pipe::Mte2 => "MTE2",
            Pipe::Mte1 => "MTE1",
            Pipe::M => "M",
            Pipe::Fix => "FIX",
            Pipe::V => "V",
            Pipe::Mte3 => "MTE3",
            Pipe::S => "S",
            Pipe::All => "ALL",
        })
    }
}

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

/// The unit-flag handshake between a matmul and the Fixpipe read of the same Acc tile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Phase {
    /// An intermediate K-slice (unit flag 0x2).
    Partial,
    /// The last K-slice (unit flag 0x3): the Fixpipe read waits for it and releases the tile.
    Final,
}

/// A Fixpipe quantisation word (ASCEND950.md §6): bits \[31:0\] the fp32 scale, bit 46 signed 8-bit
/// output, bits \[45:37\] a 9-bit offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct QuantWord(pub u64);

impl QuantWord {
    /// Bit selecting signed output for 8-bit destinations.
    pub const SIGNED_BIT: u64 = 1 << 46;

    /// A word for `scale`, with signed 8-bit output when `signed` is set.
    pub fn new(scale: f32, signed: bool) -> Self {
        QuantWord(scale.to_bits() as u64 | if signed { Self::SIGNED_BIT } else { 0 })
    }
    /// The fp32 scale in bits \[31:0\].
    pub fn scale(self) -> f32 {
        f32::from_bits(self.0 as u32)
    }
    /// The scale the per-channel hardware uses: bits \[12:0\] of the fp32 cleared (19 bits kept).
    pub fn scale_19bit(self) -> f32 {
        f32::from_bits(self.0 as u32 & !0x1fff)
    }
    /// Whether 8-bit outputs are signed (bit 46).
    pub fn signed(self) -> bool {
        self.0 & Self::SIGNED_BIT != 0
    }
    /// The 9-bit offset of bits \[45:37\], sign-extended.
    pub fn offset(self) -> i32 {
        let raw = ((self.0 >> 37) & 0x1ff) as i32;
        if raw & 0x100 != 0 {
            raw - 0x200
        } else {
            raw
        }
    }
}

/// The Fixpipe's quantisation scale on a move or store out of Acc.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Scale {
    /// A compile-time per-tensor word.
    Const(QuantWord),
    /// A runtime per-tensor scalar argument: fp32 is bit-cast; int32/int64 are pre-encoded words.
    Scalar(ParamId),
    /// A per-channel Scaling tile `[1, N]` of int64/uint64 words.
    Tile(TileRef),
}

/// A float operand of a vector scalar form: a literal or a runtime scalar argument.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ScalarArg {
    /// A literal (stored as f64, used at the tile's dtype).
    Const(f64),
    /// A runtime scalar argument.
    Param(ParamId),
}

impl Eq for ScalarArg {}
impl std::hash::Hash for ScalarArg {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        match self {
            ScalarArg::Const(v) => v.to_bits().hash(state),
            ScalarArg::Param(p) => p.hash(state),
        }
    }
}

impl From<f64> for ScalarArg {
    fn from(v: f64) -> Self {
        ScalarArg::Const(v)
    }
}
impl From<f32> for ScalarArg {
    fn from(v: f32) -> Self {
        ScalarArg::Const(v as f64)
    }
}
impl From<ParamId> for ScalarArg {
    fn from(p: ParamId) -> Self {
        ScalarArg::Param(p)
    }
}

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

/// A cube <-> vector channel, by position in [`crate::ir::Kernel::channels`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ChannelId(pub u32);

/// One machine operation.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Op {
    /// GM -> Vec/Mat (TLOAD, MTE2). Copies the destination's valid shape.
    Load {
        /// Destination tile.
        dst: TileRef,
        /// Source window.
        src: GmView,
    },
    /// Vec -> GM (TSTORE, MTE3) or Acc -> GM through the Fixpipe (TSTORE_FP, FIX).
    Store {
        /// Destination window.
        dst: GmView,
        /// Source tile.
        src: TileRef,
        /// Fixpipe ReLU (Acc sources only).
        relu: bool,
        /// Fixpipe quantisation (Acc sources only).
        scale: Option<Scale>,
        /// Atomic add into GM instead of overwrite.
        atomic_add: bool,
        /// Unit-flag handshake with the matmul that wrote the Acc tile (Acc sources only; a
        /// `Final` store waits for the `Final` matmul and releases the tile).
        #[serde(default)]
        phase: Option<Phase>,
    },
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
    /// `set_flag(src, dst, event)`.
    SetFlag {
        /// Signalling pipe.
        src: Pipe,
        /// Waiting pipe.
        dst: Pipe,
        /// Event id (0..8).
        event: u8,
    },
    /// `wait_flag(src, dst, event)`.
    WaitFlag {
        /// Signalling pipe.
        src: Pipe,
        /// Waiting pipe.
        dst: Pipe,
        /// Event id (0..8).
        event: u8,
    },
    /// `pipe_barrier(pipe)`.
    Barrier {
        /// The pipe (or `All`).
        pipe: Pipe,
    },
    /// Cross-core signal (`set_intra_block`): ids 0-15 reach AIV0, 16-31 AIV1.
    SetCrossFlag {
        /// The pipe whose completion is signalled.
        pipe: Pipe,
        /// Flag id (0..32).
        id: u8,
    },
    /// Cross-core wait (`wait_intra_block`).
    WaitCrossFlag {
        /// The pipe that waits.
        pipe: Pipe,
        /// Flag id (0..32).
        id: u8,
    },
    /// Producer: wait until the channel has a free slot.
    ChannelAcquire {
        /// The channel.
        channel: ChannelId,
    },
    /// Producer: the slot's data is written; signal the consumer(s).
    ChannelPush {
        /// The channel.
        channel: ChannelId,
    },
    /// Consumer: wait until the next slot's data has arrived.
    ChannelPop {
        /// The channel.
        channel: ChannelId,
    },
    /// Consumer: done reading the slot; signal the producer.
    ChannelRelease {
        /// The channel.
        channel: ChannelId,
    },
}

/// The op families. Each has a file of the same name in `verify/` and `sim/exec/`; adding an op
/// means adding it to its family there (docs/tile-ir.md, "Adding an IR op").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpFamily {
    /// GM <-> tile: load, store.
    LoadStore,
    /// Tile <-> tile moves, including the Fixpipe.
    Move,
    /// Cube matmul.
    Matmul,
    /// Paged gather into L1.
    Gather,
    /// Vector-unit ops, fillpad and set_validshape.
    Vector,
    /// Scalar reads (GM through the data cache, or a UB tile element) and GM writes.
    Scalar,
    /// Flags, barriers, cross-core flags and channel ops.
    Sync,
}

impl Op {
    /// The family this op belongs to.
    pub fn family(&self) -> OpFamily {
        match self {
            Op::Load { .. } | Op::Store { .. } => OpFamily::LoadStore,
            Op::Move { .. } => OpFamily::Move,
            Op::Matmul { .. } => OpFamily::Matmul,
            Op::GatherInL1 { .. } => OpFamily::Gather,
            Op::Unary { .. }
            | Op::Binary { .. }
            | Op::BinaryScalar { .. }
            | Op::Reduce { .. }
            | Op::Broadcast { .. }
            | Op::Expand { .. }
            | Op::Cast { .. }
            | Op::Fill { .. }
            | Op::FillPad { .. }
            | Op::SetValidShape { .. } => OpFamily::Vector,
            Op::ReadScalar { .. } | Op::ReadTileScalar { .. } | Op::WriteScalar { .. } => {
                OpFamily::Scalar
            }
            Op::SetFlag { .. }
            | Op::WaitFlag { .. }
            | Op::Barrier { .. }
            | Op::SetCrossFlag { .. }
            | Op::WaitCrossFlag { .. }
            | Op::ChannelAcquire { .. }
            | Op::ChannelPush { .. }
            | Op::ChannelPop { .. }
            | Op::ChannelRelease { .. } => OpFamily::Sync,
        }
    }

    /// Short name for diagnostics (`move`, `matmul`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            Op::Load { .. } => "load",
            Op::Store { .. } => "store",
            Op::Move { .. } => "move",
            Op::Matmul { .. } => "matmul",
            Op::GatherInL1 { .. } => "gather_in_l1",
            Op::Unary { .. } => "unary",
            Op::Binary { .. } => "binary",
            Op::BinaryScalar { .. } => "binary_scalar",
            Op::Reduce { .. } => "reduce",
            Op::Broadcast { .. } => "broadcast",
            Op::Expand { .. } => "expand",
            Op::Cast { .. } => "cast",
            Op::Fill { .. } => "fill",
            Op::SetValidShape { .. } => "set_validshape",
            Op::FillPad { .. } => "fillpad",
            Op::ReadScalar { .. } => "read_scalar",
            Op::ReadTileScalar { .. } => "read_tile_scalar",
            Op::WriteScalar { .. } => "write_scalar",
            Op::SetFlag { .. } => "set_flag",
            Op::WaitFlag { .. } => "wait_flag",
            Op::Barrier { .. } => "pipe_barrier",
            Op::SetCrossFlag { .. } => "set_cross_flag",
            Op::WaitCrossFlag { .. } => "wait_cross_flag",
            Op::ChannelAcquire { .. } => "channel_acquire",
            Op::ChannelPush { .. } => "channel_push",
            Op::ChannelPop { .. } => "channel_pop",
            Op::ChannelRelease { .. } => "channel_release",
        }
    }

    /// Tiles this op reads.
    pub fn tile_reads(&self) -> Vec<&TileRef> {
        match self {
            Op::Store { src, scale, .. } => {
                let mut v = vec![src];
                if let Some(Scale::Tile(t)) = scale {
                    v.push(t);
                }
                v
            }
            Op::Move { src, scale, .. } => {
                let mut v = vec![src];
                if let Some(Scale::Tile(t)) = scale {
                    v.push(t);
                }
                v
            }
            Op::Matmul {
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
            Op::Unary { src, .. }
            | Op::BinaryScalar { src, .. }
            | Op::Reduce { src, .. }
            | Op::Expand { src, .. }
            | Op::Cast { src, .. } => vec![src],
            Op::ReadTileScalar { tile, .. } => vec![tile],
            Op::Binary { lhs, rhs, .. } => vec![lhs, rhs],
            Op::Broadcast { src, operand, .. } => vec![src, operand],
            // GM sources, metadata, scalars and sync: no tile read. Listed one by one (no
            // catch-all) so that a new op fails to compile until its reads are given.
            Op::Load { .. }
            | Op::GatherInL1 { .. }
            | Op::Fill { .. }
            | Op::FillPad { .. }
            | Op::SetValidShape { .. }
            | Op::ReadScalar { .. }
            | Op::WriteScalar { .. }
            | Op::SetFlag { .. }
            | Op::WaitFlag { .. }
            | Op::Barrier { .. }
            | Op::SetCrossFlag { .. }
            | Op::WaitCrossFlag { .. }
            | Op::ChannelAcquire { .. }
            | Op::ChannelPush { .. }
            | Op::ChannelPop { .. }
            | Op::ChannelRelease { .. } => vec![],
        }
    }

    /// Tiles this op writes.
    pub fn tile_writes(&self) -> Vec<&TileRef> {
        match self {
            Op::Load { dst, .. }
            | Op::Move { dst, .. }
            | Op::Matmul { dst, .. }
            | Op::GatherInL1 { dst, .. }
            | Op::Unary { dst, .. }
            | Op::Binary { dst, .. }
            | Op::BinaryScalar { dst, .. }
            | Op::Reduce { dst, .. }
            | Op::Broadcast { dst, .. }
            | Op::Expand { dst, .. }
            | Op::Cast { dst, .. }
            | Op::Fill { dst, .. } => vec![dst],
            Op::FillPad { tile } => vec![tile],
            // GM destinations, metadata, scalars and sync: no tile written (no catch-all, as in
            // `tile_reads`).
            Op::Store { .. }
            | Op::SetValidShape { .. }
            | Op::ReadScalar { .. }
            | Op::ReadTileScalar { .. }
            | Op::WriteScalar { .. }
            | Op::SetFlag { .. }
            | Op::WaitFlag { .. }
            | Op::Barrier { .. }
            | Op::SetCrossFlag { .. }
            | Op::WaitCrossFlag { .. }
            | Op::ChannelAcquire { .. }
            | Op::ChannelPush { .. }
            | Op::ChannelPop { .. }
            | Op::ChannelRelease { .. } => vec![],
        }
    }
}
