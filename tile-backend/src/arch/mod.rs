//! The machine model as data: capacities, alignment, fractal rules, legal move paths, pipes and
//! rates. Nothing else in the crate hard-wires a machine fact; it asks an [`Arch`].

mod a2a3;
mod ascend950;
mod instructions;
mod rates;
mod vector_dtypes;

pub use crate::ir::Target;
pub use instructions::instruction;
pub use rates::{Basis, Figure, Rates};

use crate::ir::{DType, Layout, MemSpace, MoveOp, Op, Pipe, SpaceOf};
use serde::{Deserialize, Serialize};

/// A chip variant of a target, for rates (950PR vs 950DT bandwidth).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum Sku {
    /// Ascend 950PR (1.6 TB/s GM).
    #[default]
    Ascend950PR,
    /// Ascend 950DT (~4 TB/s GM).
    Ascend950DT,
    /// A2/A3 (910B/910C).
    A2A3,
}

/// Which shapes a move rule covers, comparing destination and source (allocated) shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ShapeRel {
    /// Any shapes.
    Any,
    /// Destination no larger than the source in both dims (a copy or sub-tile extract).
    DstLeSrc,
    /// Destination larger than the source in some dim (an insert).
    DstGtSrc,
    /// Destination at least the source in both dims.
    DstGeSrc,
}

/// Layouts a rule accepts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum LayoutRule {
    /// Not checked by the hardware documentation.
    Unchecked,
    /// Allowed (source, destination) pairs.
    Pairs(Vec<(Layout, Layout)>),
}

impl LayoutRule {
    fn from_each(srcs: &[Layout], dsts: &[Layout]) -> Self {
        LayoutRule::Pairs(
            srcs.iter()
                .flat_map(|s| dsts.iter().map(move |d| (*s, *d)))
                .collect(),
        )
    }

    /// True if `(src, dst)` is allowed.
    pub fn allows(&self, src: Layout, dst: Layout) -> bool {
        match self {
            LayoutRule::Unchecked => true,
            LayoutRule::Pairs(p) => p.contains(&(src, dst)),
        }
    }
}

/// Whether a rule needs a Fixpipe scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ScaleRule {
    /// The move has no scale.
    Without,
    /// The move carries a scale.
    With,
    /// Either.
    Either,
}

/// One row of the legal-move table (ASCEND950.md §5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoveRule {
    /// Source space.
    pub src: MemSpace,
    /// Destination space.
    pub dst: MemSpace,
    /// The pipe that runs it.
    pub pipe: Pipe,
    /// Which shape relation this row covers.
    pub shape: ShapeRel,
    /// Whether it is the scaled (quantising) form.
    pub scale: ScaleRule,
    /// Allowed layouts.
    pub layouts: LayoutRule,
    /// Allowed (source, destination) dtypes.
    pub dtypes: Vec<(DType, DType)>,
}

impl MoveRule {
    /// Whether this row's shape and scale conditions cover a move.
    pub fn covers(&self, rel_le: bool, rel_ge: bool, scaled: bool) -> bool {
        let shape_ok = match self.shape {
            ShapeRel::Any => true,
            ShapeRel::DstLeSrc => rel_le,
            ShapeRel::DstGtSrc => !rel_le,
            ShapeRel::DstGeSrc => rel_ge,
        };
        let scale_ok = match self.scale {
            ScaleRule::Without => !scaled,
            ScaleRule::With => scaled,
            ScaleRule::Either => true,
        };
        shape_ok && scale_ok
    }
}

/// A legal GM load: destination space and (GM layout, tile layout).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadRule {
    /// Destination space.
    pub dst: MemSpace,
    /// Allowed (GM layout, tile layout) pairs.
    pub layouts: Vec<(Layout, Layout)>,
}

/// A legal cube matmul dtype triple.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MatmulDtypes {
    /// Left operand.
    pub a: DType,
    /// Right operand.
    pub b: DType,
    /// Accumulator.
    pub acc: DType,
}

/// The element types one PTO vector instruction accepts (all its tile operands share one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VectorDtypes {
    /// The PTO-ISA instruction, spelled as the code generator emits it (`TROWMAX`).
    pub instruction: String,
    /// The element types it takes.
    pub dtypes: Vec<DType>,
}

/// Capacity and alignment of one on-chip space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpaceSpec {
    /// The space.
    pub space: MemSpace,
    /// Physical bytes.
    pub capacity: u64,
    /// Bytes a plan may use without a warning (UB: the top is corrupted by PTO-ISA).
    pub safe_capacity: u64,
    /// Minimum hardware address alignment.
    pub hw_align: u64,
    /// Alignment the memory planner uses (PyPTO's allocator).
    pub plan_align: u64,
}

/// A machine description.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Arch {
    /// Which target this is.
    pub target: Target,
    /// Compiler target (`dav-c310`).
    pub compiler_target: String,
    /// Per-space capacities and alignment.
    pub spaces: Vec<SpaceSpec>,
    /// Layout of Left (L0A) tiles: NZ on 950, ZZ on A2/A3.
    pub left_layout: Layout,
    /// Layout of Right (L0B) tiles.
    pub right_layout: Layout,
    /// Layout of Acc (L0C) tiles.
    pub acc_layout: Layout,
    /// Legal GM loads.
    pub loads: Vec<LoadRule>,
    /// Legal moves.
    pub moves: Vec<MoveRule>,
    /// Legal matmul dtype triples.
    pub matmul_dtypes: Vec<MatmulDtypes>,
    /// Matmul m, k, n upper bound (each in `1..=max`).
    pub matmul_max_dim: u64,
    /// Per-channel Scaling tile: N must be a multiple of this.
    pub scaling_n_multiple: u64,
    /// Event ids per pipe pair for set/wait flag.
    pub flag_events: u8,
    /// Cross-core flag ids (0..n/2 reach AIV0, n/2..n AIV1).
    pub cross_flags: u8,
    /// Dtypes `gather_in_l1` accepts for its source.
    pub gather_dtypes: Vec<DType>,
    /// Element types of the vector instructions (an instruction without a row is unrestricted).
    pub vector_dtypes: Vec<VectorDtypes>,
    /// The (source, destination) dtype pairs the vector conversion (TCVT) performs.
    pub cast_pairs: Vec<(DType, DType)>,
    /// Rates for the cost model.
    pub rates: Rates,
    /// True where the rule tables are transcribed from documentation for this target; false where
    /// they are borrowed from another target until documented.
    pub rules_documented: bool,
    /// The L2 model is on: DMA reads of GM lines already read hit L2 (`sim::timeline`,
    /// docs/simulator.md "L2"). Off by default; [`Arch::with_l2`] switches it.
    #[serde(default)]
    pub l2: bool,
    /// Which list TMRGSORT takes first when the heads of two lists hold equal values: PTO-ISA
    /// documents no order, so this is a modelled assumption (earlier list first, as PTO's CPU
    /// model `include/pto/cpu/TMrgSort.hpp` picks); tests flip it to show a result does not
    /// depend on it.
    #[serde(default)]
    pub mrgsort_ties: MrgSortTies,
}

/// The order TMRGSORT gives equal values from different lists (an assumption: undocumented).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum MrgSortTies {
    /// The list given first wins a tie (the model).
    #[default]
    EarlierListFirst,
    /// The list given last wins a tie (the flipped model, for tests).
    LaterListFirst,
}

impl Arch {
    /// Ascend 950PR.
    pub fn ascend950() -> Arch {
        ascend950::arch(Sku::Ascend950PR)
    }

    /// Ascend 950 with the rates of a given SKU.
    pub fn ascend950_sku(sku: Sku) -> Arch {
        ascend950::arch(sku)
    }

    /// This machine with the L2 model on or off (off by default).
    pub fn with_l2(mut self, on: bool) -> Arch {
        self.l2 = on;
        self
    }

    /// This machine with TMRGSORT's cross-list tie order set (tests flip the assumption).
    pub fn with_mrgsort_ties(mut self, ties: MrgSortTies) -> Arch {
        self.mrgsort_ties = ties;
        self
    }

    /// Ascend A2/A3 (capacities, C0 and rates; move rules borrowed from 950).
    pub fn a2a3() -> Arch {
        a2a3::arch()
    }

    /// The description of a target (default SKU).
    pub fn for_target(target: Target) -> Arch {
        match target {
            Target::Ascend950 => Arch::ascend950(),
            Target::A2A3 => Arch::a2a3(),
        }
    }

    /// Capacity and alignment of an on-chip space (`None` for GM).
    pub fn space(&self, space: MemSpace) -> Option<&SpaceSpec> {
        self.spaces.iter().find(|s| s.space == space)
    }

    /// Bytes between consecutive buffers of a tile group: one buffer rounded up to the planner's
    /// alignment for its space. Memory planning, the verifier's capacity check and the simulator
    /// all use this.
    pub fn buffer_stride(&self, ty: &crate::ir::TileType) -> u64 {
        let align = self
            .space(ty.space)
            .map(|s| s.plan_align)
            .unwrap_or(32)
            .max(1);
        crate::ir::round_up(ty.bytes(), align)
    }

    /// Legal GM load layouts into `dst`, if GM loads reach it at all.
    pub fn load_rule(&self, dst: MemSpace) -> Option<&LoadRule> {
        self.loads.iter().find(|r| r.dst == dst)
    }

    /// The move-table rows for a space pair.
    pub fn move_rules(&self, src: MemSpace, dst: MemSpace) -> impl Iterator<Item = &MoveRule> {
        self.moves
            .iter()
            .filter(move |r| r.src == src && r.dst == dst)
    }

    /// Spaces from which `dst` is reached by a move.
    pub fn move_sources(&self, dst: MemSpace) -> Vec<MemSpace> {
        let mut v: Vec<MemSpace> = self
            .moves
            .iter()
            .filter(|r| r.dst == dst)
            .map(|r| r.src)
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// The element types the vector instruction `instruction` takes; `None` where the machine
    /// description states no limit.
    pub fn instruction_dtypes(&self, instruction: &str) -> Option<&[DType]> {
        self.vector_dtypes
            .iter()
            .find(|r| r.instruction == instruction)
            .map(|r| r.dtypes.as_slice())
    }

    /// Whether the vector conversion turns `src` into `dst`.
    pub fn can_cast(&self, src: DType, dst: DType) -> bool {
        self.cast_pairs.contains(&(src, dst))
    }

    /// The layout a space requires for cube operands (`None` where any layout is allowed).
    pub fn required_layout(&self, space: MemSpace) -> Option<Layout> {
        match space {
            MemSpace::Left => Some(self.left_layout),
            MemSpace::Right => Some(self.right_layout),
            MemSpace::Acc => Some(self.acc_layout),
            _ => None,
        }
    }

    /// The pipe that runs `op`, given the tiles' spaces (`space_of`); `None` where the op is not
    /// a legal form (the verifier says why). Each family gives its own, except a move's, which
    /// the legal-move table decides.
    pub fn pipe_of(&self, op: &Op, space_of: SpaceOf<'_>) -> Option<Pipe> {
        match op {
            Op::LoadStore(o) => o.pipe(space_of),
            Op::Move(MoveOp::Move {
                dst, src, scale, ..
            }) => {
                let (s, d) = (space_of(src)?, space_of(dst)?);
                let scaled = scale.is_some();
                self.move_rules(s, d)
                    .find(|r| r.scale != ScaleRule::With || scaled)
                    .map(|r| r.pipe)
            }
            Op::Matmul(o) => Some(o.pipe()),
            Op::Gather(o) => Some(o.pipe()),
            Op::Sort(o) => Some(o.pipe()),
            Op::Vector(o) => o.pipe(space_of),
            Op::Scalar(o) => Some(o.pipe()),
            Op::Sync(o) => Some(o.pipe()),
        }
    }
}

pub(crate) use ascend950::move_table_950;
pub(crate) use vector_dtypes::{cast_pairs_950, vector_dtypes_950};
