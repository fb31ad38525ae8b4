//! The operations of the tile machine (ASCEND950.md §4-§8), two-level: [`Op`] is one variant per
//! family, each family an enum of its own in a file of its own (`load_store.rs`, `moves.rs`,
//! `matmul.rs`, `gather.rs`, `vector.rs`, `sort.rs`, `scalar.rs`, `sync.rs`) holding that family's facts
//! next to its ops: name, tiles read and written, GM use, pipe, PTO instruction, cost class and
//! listing. Every match over ops is exhaustive, so a new op fails to compile until each fact is
//! given (docs/adding-an-op.md).
//!
//! The JSON form is the flat, externally tagged one of a single enum (`{"Load": {...}}`): the
//! outer enum serialises as its family does and reads the variant name first, then hands the
//! rest to the family that owns that name.

mod display;
mod gather;
mod load_store;
mod matmul;
mod moves;
mod scalar;
mod sort;
mod sync;
mod vector;

pub use display::{Listing, OpDisplay};
pub use gather::GatherOp;
pub use load_store::LoadStoreOp;
pub use matmul::MatmulOp;
pub use moves::{AccToVecMode, MoveOp};
pub use scalar::ScalarOp;
pub use sort::{pair_cols, SortOp};
pub use sync::SyncOp;
pub use vector::{Axis, BinaryOp, ReduceOp, RoundMode, UnaryOp, VectorOp};

use super::{MemSpace, ParamId, TileRef};
use serde::de::{self, DeserializeSeed, EnumAccess, IntoDeserializer, VariantAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
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

    /// The pipe's position in [`Pipe::ALL`] (the one pipe index: per-pipe arrays of the
    /// timeline, the cost report, the trace, the hazard checker and the sync pass use it);
    /// `None` for [`Pipe::All`], which is no track.
    pub const fn index(self) -> Option<usize> {
        match self {
            Pipe::S => Some(0),
            Pipe::Mte2 => Some(1),
            Pipe::Mte1 => Some(2),
            Pipe::M => Some(3),
            Pipe::Fix => Some(4),
            Pipe::V => Some(5),
            Pipe::Mte3 => Some(6),
            Pipe::All => None,
        }
    }

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

impl Scale {
    /// The Scaling tile a per-channel scale reads (the one tile a scale adds to an op's reads).
    pub fn tile(scale: &Option<Scale>) -> Option<&TileRef> {
        match scale {
            Some(Scale::Tile(t)) => Some(t),
            Some(Scale::Const(_) | Scale::Scalar(_)) | None => None,
        }
    }
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

/// A cube <-> vector channel, by position in [`crate::ir::Kernel::channels`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ChannelId(pub u32);

/// The memory space of a tile reference, where the kernel declares it (`None` otherwise): what
/// the pipe and instruction of a move, store or fillpad depend on.
pub type SpaceOf<'a> = &'a dyn Fn(&TileRef) -> Option<MemSpace>;

/// How an op uses one GM tensor parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GmUse {
    /// Not at all.
    None,
    /// Only as the window of a plain (not atomic) store.
    PlainStore,
    /// Any other way (read, atomic add, scalar access, gather source).
    Other,
}

impl GmUse {
    /// [`GmUse::Other`] when `hit`, else [`GmUse::None`].
    pub(crate) fn other_if(hit: bool) -> Self {
        if hit {
            GmUse::Other
        } else {
            GmUse::None
        }
    }
}

/// Which cost formula the timeline applies to an op (sim/timeline.rs turns a class into cycles
/// with the machine's rates; docs/simulator.md, "Timing model"). Each family says which class
/// each of its ops is, next to the op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CostClass<'a> {
    /// A GM -> tile DMA: one transfer of the GM bytes read.
    Load,
    /// The paged gather: one DMA per gathered row.
    Gather,
    /// A store to GM: through the Fixpipe from Acc, or a DMA from Vec.
    Store,
    /// A tile-to-tile move at its pipe's rate.
    Move,
    /// A cube matmul, costed by its left operand's dtype and the traced `[m, k, n]`.
    Matmul {
        /// The left operand.
        a: &'a TileRef,
    },
    /// A two-source element-wise op or a broadcast: a repeat per destination repeat (the 2-D
    /// form when its rows are apart).
    VectorBinary,
    /// `exp`: its figure per f32-sized repeat whatever the dtype.
    VectorExp {
        /// The destination (its dtype scales the repeats).
        dst: &'a TileRef,
    },
    /// `ln`, `sqrt`, `rsqrt`, `recip`: the exp figure per repeat.
    VectorTranscendental,
    /// A row reduction (a per-row chain on one execution unit).
    RowReduce(ReduceOp),
    /// A column reduction (element-wise over rows).
    ColReduce,
    /// Any other vector instruction: one cycle per repeat of its larger side.
    VectorSimple,
    /// TSORT32: a head and a figure per sorted 32-element block (A2/A3-derived, an assumption).
    Sort32,
    /// TMRGSORT: a head and a figure per 128 merged pairs (A2/A3-derived, an assumption), plus
    /// the multi-list form's UB copy.
    MrgSort,
    /// A scalar read of GM through the data cache.
    ScalarGmRead,
    /// A scalar read of a UB tile element.
    ScalarUbRead,
    /// One cycle: scalar writes, metadata, sync and channel ops.
    Unit,
}

/// One side of the unit-flag handshake on an Acc tile (ASCEND950.md §4 / §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnitFlag<'a> {
    /// The matmul writing the Acc tile, in this phase.
    Matmul(&'a TileRef, Phase),
    /// A Fixpipe move or store reading the tile (its source), in this phase.
    Read(&'a TileRef, Phase),
}

/// One machine operation: one variant per family, each family an enum of its own.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Op {
    /// GM <-> tile: load, store.
    LoadStore(LoadStoreOp),
    /// Tile <-> tile moves, including the Fixpipe.
    Move(MoveOp),
    /// Cube matmul.
    Matmul(MatmulOp),
    /// Paged gather into L1.
    Gather(GatherOp),
    /// Vector-unit ops, fillpad and set_validshape.
    Vector(VectorOp),
    /// The sort instructions (TSORT32, TMRGSORT).
    Sort(SortOp),
    /// Scalar reads (GM through the data cache, or a UB tile element) and GM writes.
    Scalar(ScalarOp),
    /// Flags, barriers, cross-core flags and channel ops.
    Sync(SyncOp),
}

/// Calls `$body` with `$o` bound to the family op inside `$op`, whatever the family (the one
/// place the outer enum is dispatched for the facts every family has).
macro_rules! each_family {
    ($op:expr, $o:ident => $body:expr) => {
        match $op {
            Op::LoadStore($o) => $body,
            Op::Move($o) => $body,
            Op::Matmul($o) => $body,
            Op::Gather($o) => $body,
            Op::Vector($o) => $body,
            Op::Sort($o) => $body,
            Op::Scalar($o) => $body,
            Op::Sync($o) => $body,
        }
    };
}

impl Op {
    /// Short name for diagnostics (`move`, `matmul`, ...).
    pub fn name(&self) -> &'static str {
        each_family!(self, o => o.name())
    }

    /// Tiles this op reads.
    pub fn tile_reads(&self) -> Vec<&TileRef> {
        each_family!(self, o => o.tile_reads())
    }

    /// Tiles this op writes.
    pub fn tile_writes(&self) -> Vec<&TileRef> {
        each_family!(self, o => o.tile_writes())
    }

    /// How this op uses GM tensor parameter `p`.
    pub fn gm_use(&self, p: ParamId) -> GmUse {
        each_family!(self, o => o.gm_use(p))
    }

    /// The PTO instruction (or intrinsic) this op is emitted as on Ascend 950, given the tiles
    /// `kernel` declares. The verifier looks up element types and layouts by this name and the code
    /// generator writes it. Channel ops never reach the emitter (the sync pass lowers them);
    /// theirs names the intrinsic they become.
    pub fn instruction(&self, kernel: &super::Kernel) -> &'static str {
        each_family!(self, o => o.instruction(kernel))
    }

    /// Which cost formula the timeline applies.
    pub fn cost_class(&self) -> CostClass<'_> {
        each_family!(self, o => o.cost_class())
    }

    /// The op's side of a unit-flag handshake: a phased matmul's, or a phased Fixpipe read's
    /// (`None` for every other op, and where no phase is set).
    pub fn unit_flag(&self) -> Option<UnitFlag<'_>> {
        match self {
            Op::LoadStore(o) => o.unit_flag(),
            Op::Move(o) => o.unit_flag(),
            Op::Matmul(o) => o.unit_flag(),
            Op::Gather(_) | Op::Vector(_) | Op::Sort(_) | Op::Scalar(_) | Op::Sync(_) => None,
        }
    }

    /// The GM tensors this op's DMA reads (`false`) or writes (`true`); scalar accesses go
    /// through the data cache and are not listed.
    pub fn dma_gm(&self) -> Vec<(ParamId, bool)> {
        match self {
            Op::LoadStore(o) => o.dma_gm(),
            Op::Gather(o) => o.dma_gm(),
            Op::Move(_)
            | Op::Matmul(_)
            | Op::Vector(_)
            | Op::Sort(_)
            | Op::Scalar(_)
            | Op::Sync(_) => vec![],
        }
    }

    /// Whether the op touches data (a tile, or GM by DMA): what the sync pass orders. Valid-shape
    /// changes, GM scalar accesses and sync ops touch none.
    pub fn touches_data(&self) -> bool {
        !self.tile_reads().is_empty() || !self.tile_writes().is_empty() || !self.dma_gm().is_empty()
    }

    /// The op listed with the kernel's names (`load q_l1 <- q[...]`).
    pub fn display<'a>(&'a self, kernel: &'a super::Kernel) -> OpDisplay<'a> {
        OpDisplay::new(self, kernel)
    }
}

macro_rules! from_family {
    ($($family:ident($ty:ident)),* $(,)?) => {$(
        impl From<$ty> for Op {
            fn from(o: $ty) -> Self {
                Op::$family(o)
            }
        }
    )*};
}

from_family!(
    LoadStore(LoadStoreOp),
    Move(MoveOp),
    Matmul(MatmulOp),
    Gather(GatherOp),
    Vector(VectorOp),
    Sort(SortOp),
    Scalar(ScalarOp),
    Sync(SyncOp),
);

// --- JSON: the flat, externally tagged form ---------------------------------------------------

/// The family that owns a JSON variant name.
#[derive(Debug, Clone, Copy)]
enum Family {
    LoadStore,
    Move,
    Matmul,
    Gather,
    Vector,
    Sort,
    Scalar,
    Sync,
}

/// The name table: each family's variant names (every family lists its own, next to its enum).
const FAMILIES: [(Family, &[&str]); 8] = [
    (Family::LoadStore, LoadStoreOp::NAMES),
    (Family::Move, MoveOp::NAMES),
    (Family::Matmul, MatmulOp::NAMES),
    (Family::Gather, GatherOp::NAMES),
    (Family::Vector, VectorOp::NAMES),
    (Family::Sort, SortOp::NAMES),
    (Family::Scalar, ScalarOp::NAMES),
    (Family::Sync, SyncOp::NAMES),
];

/// Every op's JSON variant name, in family order.
pub fn op_names() -> impl Iterator<Item = &'static str> {
    FAMILIES.iter().flat_map(|(_, names)| names.iter().copied())
}

impl Serialize for Op {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        each_family!(self, o => o.serialize(s))
    }
}

impl<'de> Deserialize<'de> for Op {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_enum("Op", &[], OpVisitor)
    }
}

struct OpVisitor;

impl<'de> Visitor<'de> for OpVisitor {
    type Value = Op;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an op (`{\"Load\": {...}}`)")
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<Op, A::Error> {
        let (name, variant): (String, A::Variant) = data.variant()?;
        let Some(family) = FAMILIES
            .iter()
            .find(|(_, names)| names.contains(&name.as_str()))
            .map(|(f, _)| *f)
        else {
            let known: Vec<String> = op_names().map(|n| format!("`{n}`")).collect();
            return Err(de::Error::custom(format_args!(
                "unknown op `{name}`, expected one of {}",
                known.join(", ")
            )));
        };
        let one = OneVariant { name, variant };
        Ok(match family {
            Family::LoadStore => Op::LoadStore(LoadStoreOp::deserialize(one)?),
            Family::Move => Op::Move(MoveOp::deserialize(one)?),
            Family::Matmul => Op::Matmul(MatmulOp::deserialize(one)?),
            Family::Gather => Op::Gather(GatherOp::deserialize(one)?),
            Family::Vector => Op::Vector(VectorOp::deserialize(one)?),
            Family::Sort => Op::Sort(SortOp::deserialize(one)?),
            Family::Scalar => Op::Scalar(ScalarOp::deserialize(one)?),
            Family::Sync => Op::Sync(SyncOp::deserialize(one)?),
        })
    }
}

/// An enum value whose variant name has been read: presents it again, as an enum, to a
/// family's derived `Deserialize`.
struct OneVariant<V> {
    name: String,
    variant: V,
}

impl<'de, A: VariantAccess<'de>> Deserializer<'de> for OneVariant<A> {
    type Error = A::Error;

    fn deserialize_any<W: Visitor<'de>>(self, visitor: W) -> Result<W::Value, A::Error> {
        visitor.visit_enum(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map struct enum identifier
        ignored_any
    }
}

impl<'de, A: VariantAccess<'de>> EnumAccess<'de> for OneVariant<A> {
    type Error = A::Error;
    type Variant = A;

    fn variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<(S::Value, A), A::Error> {
        let tag = seed.deserialize(self.name.into_deserializer())?;
        Ok((tag, self.variant))
    }
}

/// Operands for the families' test samples.
#[cfg(test)]
mod sample {
    pub(super) use super::{ChannelId, ParamId, Pipe, TileRef};
    pub(super) use crate::ir::{Expr, GmView, Layout, TileId, VarId};

    /// Tile 0.
    pub(super) fn t() -> TileRef {
        TileRef::from(TileId(0))
    }
    /// The constant 0.
    pub(super) fn e() -> Expr {
        Expr::from(0i64)
    }
    /// A window of tensor 0.
    pub(super) fn v() -> GmView {
        GmView {
            tensor: ParamId(0),
            offset: e(),
            rows: e(),
            cols: e(),
            stride: e(),
            layout: Layout::ND,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_name_is_unique_and_pascal_case() {
        let names: Vec<&str> = op_names().collect();
        for (i, n) in names.iter().enumerate() {
            assert!(!names[..i].contains(n), "{n} listed twice");
            assert!(n.starts_with(|c: char| c.is_ascii_uppercase()), "{n}");
        }
    }

    /// One op of every variant, each family in its `NAMES` order.
    fn one_of_each() -> Vec<Op> {
        let mut ops: Vec<Op> = Vec::new();
        ops.extend(LoadStoreOp::samples().into_iter().map(Op::from));
        ops.extend(MoveOp::samples().into_iter().map(Op::from));
        ops.extend(MatmulOp::samples().into_iter().map(Op::from));
        ops.extend(GatherOp::samples().into_iter().map(Op::from));
        ops.extend(VectorOp::samples().into_iter().map(Op::from));
        ops.extend(SortOp::samples().into_iter().map(Op::from));
        ops.extend(ScalarOp::samples().into_iter().map(Op::from));
        ops.extend(SyncOp::samples().into_iter().map(Op::from));
        ops
    }

    #[test]
    fn every_variant_round_trips_under_its_listed_name() {
        let ops = one_of_each();
        let names: Vec<&str> = op_names().collect();
        assert_eq!(ops.len(), names.len(), "one sample per listed name");
        for (op, name) in ops.iter().zip(names) {
            let json = serde_json::to_value(op).expect("serialises");
            let tag = json.as_object().and_then(|m| m.keys().next().cloned());
            assert_eq!(tag.as_deref(), Some(name), "{op:?}");
            let back: Op = serde_json::from_value(json).expect("reads back");
            assert_eq!(&back, op);
        }
    }

    #[test]
    fn a_misspelt_op_is_named_in_the_error() {
        let err = serde_json::from_str::<Op>(r#"{"Lod": {"dst": 0}}"#).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("unknown op `Lod`"), "{msg}");
        assert!(msg.contains("`Load`"), "lists the known ops: {msg}");
        // A known name with a bad body is the family's error, not an unknown op.
        let err = serde_json::from_str::<Op>(r#"{"Load": {}}"#).unwrap_err();
        assert!(err.to_string().contains("missing field"), "{err}");
    }

    #[test]
    fn pipe_index_follows_all() {
        for (i, p) in Pipe::ALL.iter().enumerate() {
            assert_eq!(p.index(), Some(i), "{p}");
        }
        assert_eq!(Pipe::All.index(), None);
    }
}
