//! GM <-> tile: TLOAD (MTE2), TSTORE (MTE3 from Vec) and the Fixpipe store out of Acc.

use super::display::Names;
use super::{CostClass, GmUse, ParamId, Phase, Pipe, Scale, SpaceOf, UnitFlag};
use crate::ir::{GmView, Kernel, MemSpace, TileRef};
use serde::{Deserialize, Serialize};
use std::fmt::{self, Write};

/// A GM <-> tile transfer.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LoadStoreOp {
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
}

impl LoadStoreOp {
    /// The JSON variant names.
    pub(super) const NAMES: &'static [&'static str] = &["Load", "Store"];

    /// Short name for diagnostics.
    pub fn name(&self) -> &'static str {
        match self {
            LoadStoreOp::Load { .. } => "load",
            LoadStoreOp::Store { .. } => "store",
        }
    }

    /// Tiles read: a store's source and its Scaling tile.
    pub fn tile_reads(&self) -> Vec<&TileRef> {
        match self {
            LoadStoreOp::Load { .. } => vec![],
            LoadStoreOp::Store { src, scale, .. } => {
                std::iter::once(src).chain(Scale::tile(scale)).collect()
            }
        }
    }

    /// Tiles written: a load's destination.
    pub fn tile_writes(&self) -> Vec<&TileRef> {
        match self {
            LoadStoreOp::Load { dst, .. } => vec![dst],
            LoadStoreOp::Store { .. } => vec![],
        }
    }

    /// How the op uses GM tensor `p`.
    pub fn gm_use(&self, p: ParamId) -> GmUse {
        match self {
            LoadStoreOp::Load { src, .. } => GmUse::other_if(src.tensor == p),
            LoadStoreOp::Store {
                dst, atomic_add, ..
            } => match (dst.tensor == p, atomic_add) {
                (false, _) => GmUse::None,
                (true, false) => GmUse::PlainStore,
                (true, true) => GmUse::Other,
            },
        }
    }

    /// The pipe: MTE2 for a load; a store from Acc runs on the Fixpipe, from Vec on MTE3.
    pub fn pipe(&self, space_of: SpaceOf<'_>) -> Option<Pipe> {
        match self {
            LoadStoreOp::Load { .. } => Some(Pipe::Mte2),
            LoadStoreOp::Store { src, .. } => match space_of(src)? {
                MemSpace::Acc => Some(Pipe::Fix),
                MemSpace::Vec => Some(Pipe::Mte3),
                _ => None,
            },
        }
    }

    /// The PTO instruction.
    pub fn instruction(&self, kernel: &Kernel) -> &'static str {
        match self {
            LoadStoreOp::Load { .. } => "TLOAD",
            LoadStoreOp::Store { scale, src, .. } => match (kernel.space_of(src), scale) {
                (Some(MemSpace::Acc), Some(Scale::Tile(_))) => "TSTORE_FP",
                _ => "TSTORE",
            },
        }
    }

    /// The cost formula.
    pub fn cost_class(&self) -> CostClass<'_> {
        match self {
            LoadStoreOp::Load { .. } => CostClass::Load,
            LoadStoreOp::Store { .. } => CostClass::Store,
        }
    }

    /// A Fixpipe store's unit-flag handshake.
    pub fn unit_flag(&self) -> Option<UnitFlag<'_>> {
        match self {
            LoadStoreOp::Load { .. } => None,
            LoadStoreOp::Store { src, phase, .. } => phase.map(|p| UnitFlag::Read(src, p)),
        }
    }

    /// The GM tensor the DMA reads (load) or writes (store).
    pub fn dma_gm(&self) -> Vec<(ParamId, bool)> {
        match self {
            LoadStoreOp::Load { src, .. } => vec![(src.tensor, false)],
            LoadStoreOp::Store { dst, .. } => vec![(dst.tensor, true)],
        }
    }

    pub(super) fn fmt(&self, n: &Names<'_>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadStoreOp::Load { dst, src } => {
                write!(f, "load {} <- {}", n.tile(dst), n.view(src))
            }
            LoadStoreOp::Store {
                dst,
                src,
                relu,
                scale,
                atomic_add,
                phase,
            } => {
                let mut s = format!("store {} <- {}", n.view(dst), n.tile(src));
                if let Some(p) = phase {
                    let _ = write!(s, " phase {p:?}");
                }
                if *relu {
                    s.push_str(" relu");
                }
                if let Some(sc) = scale {
                    let _ = write!(s, " {}", n.scale(sc));
                }
                if *atomic_add {
                    s.push_str(" atomic_add");
                }
                f.write_str(&s)
            }
        }
    }
}

#[cfg(test)]
impl LoadStoreOp {
    /// One op of every variant, in `NAMES` order (the name table's round-trip test).
    pub(super) fn samples() -> Vec<Self> {
        use super::sample::*;
        vec![
            LoadStoreOp::Load { dst: t(), src: v() },
            LoadStoreOp::Store {
                dst: v(),
                src: t(),
                relu: false,
                scale: None,
                atomic_add: false,
                phase: None,
            },
        ]
    }
}
