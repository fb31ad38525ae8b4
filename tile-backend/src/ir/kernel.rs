//! Kernels: arguments, tile declarations, channels and the cube and vector programs.

use super::{
    ChannelId, CoreKind, DType, Expr, MemSpace, Op, ParamId, TileDecl, TileId, TileRef, VarId,
};
use serde::{Deserialize, Serialize};
use std::fmt;

/// A machine a kernel can be written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum Target {
    /// Ascend 950 (A5, `dav-c310`).
    #[default]
    Ascend950,
    /// Ascend 910B/910C (A2/A3, `dav-c220`).
    A2A3,
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Target::Ascend950 => "Ascend 950",
            Target::A2A3 => "Ascend A2/A3",
        })
    }
}

/// The values a tensor's elements (or a scalar) take, for generating valid inputs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ValueRange {
    /// Smallest value (inclusive).
    pub min: f64,
    /// Largest value (inclusive).
    pub max: f64,
}

/// What a kernel argument is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ParamKind {
    /// A GM tensor of the given shape (dimensions may use runtime scalar arguments).
    Tensor {
        /// Element type.
        dtype: DType,
        /// Dimensions, outermost first.
        shape: Vec<Expr>,
        /// True if the kernel writes it.
        output: bool,
    },
    /// A runtime scalar (integer arguments are usable in expressions; f32 ones in vector ops
    /// and as Fixpipe scales).
    Scalar {
        /// Scalar type.
        dtype: DType,
    },
}

/// A kernel argument.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Param {
    /// Name (emitted as the C++ parameter name).
    pub name: String,
    /// Tensor or scalar.
    pub kind: ParamKind,
    /// Valid input values, if restricted (e.g. block-table entries in `[0, num_blocks - 1]`).
    pub range: Option<ValueRange>,
}

/// A declared cube <-> vector channel (like PTO's tile FIFOs): the sync passes turn its
/// acquire/push/pop/release into cross-core flags.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Channel {
    /// Name for diagnostics.
    pub name: String,
    /// The core that produces; the other side consumes (for the vector side, both AIVs).
    pub producer: CoreKind,
    /// Slots in flight (1 = no overlap, 2 = ping-pong).
    pub depth: u32,
}

/// A scalar variable declaration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VarDecl {
    /// Name for dumps and emitted code.
    pub name: String,
}

/// A statement of a core's program.
// Ops dominate statement lists, so they are stored inline rather than boxed.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Stmt {
    /// A machine operation.
    Op(Op),
    /// `for var in (start..end).step_by(step)`; bounds are evaluated once, at loop entry.
    For {
        /// Loop index.
        var: VarId,
        /// First value.
        start: Expr,
        /// Exclusive end.
        end: Expr,
        /// Positive step.
        step: i64,
        /// Loop body.
        body: Vec<Stmt>,
    },
    /// `if cond != 0 { then } else { otherwise }`.
    If {
        /// Condition.
        cond: Expr,
        /// Taken branch.
        then_body: Vec<Stmt>,
        /// Other branch.
        else_body: Vec<Stmt>,
    },
    /// Binds a scalar variable.
    Let {
        /// The variable.
        var: VarId,
        /// Its value.
        value: Expr,
    },
}

/// A complete kernel: what `tileops check`, the simulator and the code generator consume.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Kernel {
    /// Kernel (entry point) name.
    pub name: String,
    /// The machine it is written for.
    pub target: Target,
    /// Arguments, in order.
    pub params: Vec<Param>,
    /// Tile declarations.
    pub tiles: Vec<TileDecl>,
    /// Scalar variables.
    pub vars: Vec<VarDecl>,
    /// Cube <-> vector channels.
    pub channels: Vec<Channel>,
    /// The cube core's program.
    pub cube: Vec<Stmt>,
    /// The vector program, run by both AIVs (each sees its sub-block id).
    pub vector: Vec<Stmt>,
}

/// Where an op sits: its section and its index in a pre-order walk of that section.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct OpLoc {
    /// The section.
    pub section: CoreKind,
    /// Pre-order index among the section's ops.
    pub index: usize,
}

impl std::fmt::Display for OpLoc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} op #{}", self.section, self.index)
    }
}

impl Kernel {
    /// A tile declaration (panics only on an id not made by this kernel's builder; use
    /// [`Kernel::try_tile`] for untrusted ids).
    pub fn tile(&self, id: TileId) -> &TileDecl {
        &self.tiles[id.0 as usize]
    }

    /// A tile declaration, if the id is valid.
    pub fn try_tile(&self, id: TileId) -> Option<&TileDecl> {
        self.tiles.get(id.0 as usize)
    }

    /// The memory space of a tile reference, if its tile is declared.
    pub fn space_of(&self, r: &TileRef) -> Option<MemSpace> {
        self.try_tile(r.tile).map(|d| d.ty.space)
    }

    /// An argument, if the id is valid.
    pub fn try_param(&self, id: ParamId) -> Option<&Param> {
        self.params.get(id.0 as usize)
    }

    /// A channel, if the id is valid.
    pub fn try_channel(&self, id: ChannelId) -> Option<&Channel> {
        self.channels.get(id.0 as usize)
    }

    /// The program of a section.
    pub fn section(&self, core: CoreKind) -> &[Stmt] {
        match core {
            CoreKind::Cube => &self.cube,
            CoreKind::Vector => &self.vector,
        }
    }

    /// The tile whose allocation backs `id` (follows reinterpret aliases; stops on cycles).
    pub fn root_tile(&self, id: TileId) -> TileId {
        let mut cur = id;
        for _ in 0..=self.tiles.len() {
            match self.try_tile(cur).map(|d| &d.storage) {
                Some(super::Storage::Alias { of }) => cur = *of,
                _ => return cur,
            }
        }
        cur
    }

    /// Every op of both sections with its location, in pre-order.
    pub fn ops(&self) -> Vec<(OpLoc, &Op)> {
        let mut out = Vec::new();
        for core in [CoreKind::Cube, CoreKind::Vector] {
            let mut index = 0;
            walk_ops(self.section(core), &mut |op| {
                out.push((
                    OpLoc {
                        section: core,
                        index,
                    },
                    op,
                ));
                index += 1;
            });
        }
        out
    }

    /// Serializes to pretty JSON.
    pub fn to_json(&self) -> String {
        // Serializing plain data with string keys cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Parses a kernel from JSON. A document with a key twice in one object is refused
    /// (`duplicate key`, with its line and column), wherever it is: JSON leaves duplicates'
    /// meaning open, so a kernel file must not have any.
    pub fn from_json(text: &str) -> Result<Kernel, serde_json::Error> {
        use serde::de::DeserializeSeed;
        let mut de = serde_json::Deserializer::from_str(text);
        UniqueKeys.deserialize(&mut de)?;
        de.end()?;
        serde_json::from_str(text)
    }
}

/// A pass over a JSON document that fails on the first object holding a key twice.
struct UniqueKeys;

impl<'de> serde::de::DeserializeSeed<'de> for UniqueKeys {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for UniqueKeys {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(UniqueKeys)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                return Err(serde::de::Error::custom(format!(
                    "duplicate key `{key}` in one object"
                )));
            }
            map.next_value_seed(UniqueKeys)?;
        }
        Ok(())
    }
}

/// Calls `f` on every op of `stmts` in pre-order (loop and branch bodies in place).
pub fn walk_ops<'a>(stmts: &'a [Stmt], f: &mut dyn FnMut(&'a Op)) {
    for s in stmts {
        match s {
            Stmt::Op(op) => f(op),
            Stmt::For { body, .. } => walk_ops(body, f),
            Stmt::If {
                then_body,
                else_body,
                ..
            } => {
                walk_ops(then_body, f);
                walk_ops(else_body, f);
            }
            Stmt::Let { .. } => {}
        }
    }
}
