//! Memory spaces and the core that owns each.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Where a tile or tensor lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum MemSpace {
    /// Global memory (HBM), shared by all cores.
    Gm,
    /// L1 (cbuf) of the cube core; PTO `TileType::Mat`.
    Mat,
    /// L0A, the cube's left operand buffer.
    Left,
    /// L0B, the cube's right operand buffer.
    Right,
    /// L0C, the cube's accumulator.
    Acc,
    /// The bias table.
    Bias,
    /// The Fixpipe's scaling (quantisation parameter) buffer.
    Scaling,
    /// UB, the unified buffer of one vector core.
    Vec,
}

/// The kind of core a space belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum CoreKind {
    /// The cube core (AIC).
    Cube,
    /// A vector core (AIV); each cluster has two.
    Vector,
}

impl MemSpace {
    /// Every on-chip space (everything but GM).
    pub const ON_CHIP: [MemSpace; 7] = [
        MemSpace::Mat,
        MemSpace::Left,
        MemSpace::Right,
        MemSpace::Acc,
        MemSpace::Bias,
        MemSpace::Scaling,
        MemSpace::Vec,
    ];

    /// The core owning this space, `None` for GM.
    pub const fn core(self) -> Option<CoreKind> {
        match self {
            MemSpace::Gm => None,
            MemSpace::Vec => Some(CoreKind::Vector),
            _ => Some(CoreKind::Cube),
        }
    }

    /// PTO-ISA / PyPTO name of the space.
    pub const fn name(self) -> &'static str {
        match self {
            MemSpace::Gm => "GM",
            MemSpace::Mat => "Mat",
            MemSpace::Left => "Left",
            MemSpace::Right => "Right",
            MemSpace::Acc => "Acc",
            MemSpace::Bias => "Bias",
            MemSpace::Scaling => "Scaling",
            MemSpace::Vec => "Vec",
        }
    }

    /// Hardware name of the buffer.
    pub const fn hardware_name(self) -> &'static str {
        match self {
            MemSpace::Gm => "GM",
            MemSpace::Mat => "L1",
            MemSpace::Left => "L0A",
            MemSpace::Right => "L0B",
            MemSpace::Acc => "L0C",
            MemSpace::Bias => "BT",
            MemSpace::Scaling => "FB",
            MemSpace::Vec => "UB",
        }
    }
}

impl fmt::Display for MemSpace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for CoreKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CoreKind::Cube => "cube",
            CoreKind::Vector => "vector",
        })
    }
}
