//! PTO-ISA C++ for Ascend 950 (`dav-c310`): one translation unit per compiled kernel, a host
//! launcher and a JSON manifest (docs/codegen.md).
//!
//! [`emit`] takes a kernel that went through [`crate::passes::compile`] (every tile has its
//! planned address, every sync is explicit, channels are lowered to cross-core flags) and writes
//! the code a CANN kernel author would write against `pto/pto-inst.hpp`:
//!
//! - one `using` alias per tile declaration with the real `Tile` template parameters (the A5
//!   `TileLeft` / `TileRight` / `TileAcc` aliases where they apply) and one per distinct GM view
//!   (`GlobalTensor<T, Shape<...>, Stride<...>, Layout>`);
//! - an `extern "C" __global__ AICORE` entry with a cube section (`__DAV_CUBE__`) and a vector
//!   section (`__DAV_VEC__`), each declaring the tiles it touches once, with `TASSIGN` at the
//!   planned addresses (`TRESHAPE` for reinterpret aliases);
//! - the statements: every op as its PTO instruction (the machine model's table,
//!   [`crate::arch::instruction`]), loops, ifs,
//!   lets and scalar GM reads as C++, syncs as `set_flag` / `wait_flag` / `pipe_barrier` /
//!   `set_intra_block` / `wait_intra_block`.
//!
//! Like `verify/` and `sim/exec/`, each op family has its own file here.

mod gather;
mod host;
mod load_store;
mod matmul;
mod moves;
mod scalar;
mod sort;
mod sync;
mod types;
mod vector;

use crate::arch::{Arch, Target};
use crate::ir::{
    walk_ops, CoreKind, Kernel, MemSpace, Op, Stmt, Storage, SyncOp, TileId, TileRef, VectorOp,
};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// The instruction table lives with the machine model; re-exported here for readers of emitted
/// packages.
pub use crate::arch::instruction;
pub use types::{ctype, tile_type_spelling};

/// How a kernel is launched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchSpec {
    /// Clusters (1 AIC + 2 AIV each) to launch.
    pub block_dim: u64,
}

impl LaunchSpec {
    /// A launch on `block_dim` clusters.
    pub fn new(block_dim: u64) -> Self {
        LaunchSpec { block_dim }
    }
}

/// Why a kernel could not be emitted.
#[derive(Debug, Error)]
pub enum CodegenError {
    /// The kernel did not go through `passes::compile` (a tile without an address, a channel op
    /// not lowered to flags).
    #[error("kernel `{kernel}` is not compiled: {reason} (run passes::compile before codegen::pto::emit)")]
    NotCompiled {
        /// Kernel name.
        kernel: String,
        /// What is missing.
        reason: String,
    },
    /// The kernel is written for a machine this emitter does not write code for.
    #[error("kernel `{kernel}` targets {target}; the PTO emitter writes Ascend 950 (dav-c310) code only")]
    UnsupportedTarget {
        /// Kernel name.
        kernel: String,
        /// Its target.
        target: Target,
    },
    /// An op (or a declaration) has no PTO form on this target.
    #[error("{location} ({what}): {reason}")]
    Unsupported {
        /// Where (`cube op #4`, `tile k_l1`).
        location: String,
        /// The op or declaration kind.
        what: String,
        /// Why.
        reason: String,
    },
    /// The kernel refers to something it does not declare.
    #[error("kernel `{kernel}` is malformed: {reason}")]
    Malformed {
        /// Kernel name.
        kernel: String,
        /// What is wrong.
        reason: String,
    },
    /// The launch is not valid.
    #[error("invalid launch of `{kernel}`: {reason}")]
    Launch {
        /// Kernel name.
        kernel: String,
        /// What is wrong.
        reason: String,
    },
    /// Writing the package failed.
    #[error("cannot write {}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// What [`emit`] produces for one kernel: what a CANN user compiles with bisheng and launches.
#[derive(Debug, Clone, PartialEq)]
pub struct Package {
    /// Kernel (entry point) name; also the stem of the file names.
    pub name: String,
    /// The kernel translation unit (`<name>.cpp`).
    pub kernel_cpp: String,
    /// The host launcher (`<name>_launcher.cpp`).
    pub launcher_cpp: String,
    /// The manifest (`<name>.json`): arguments, block_dim, tiles, build commands.
    pub manifest: serde_json::Value,
}

impl Package {
    /// File name of the kernel source.
    pub fn kernel_file(&self) -> String {
        format!("{}.cpp", self.name)
    }
    /// File name of the launcher source.
    pub fn launcher_file(&self) -> String {
        format!("{}_launcher.cpp", self.name)
    }
    /// File name of the manifest.
    pub fn manifest_file(&self) -> String {
        format!("{}.json", self.name)
    }

    /// Writes the three files into `dir` (created if missing); returns their paths.
    pub fn write_to(&self, dir: &Path) -> Result<Vec<PathBuf>, CodegenError> {
        std::fs::create_dir_all(dir).map_err(|source| CodegenError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let manifest =
            serde_json::to_string_pretty(&self.manifest).map_err(|e| CodegenError::Io {
                path: dir.join(self.manifest_file()),
                source: std::io::Error::other(e),
            })? + "\n";
        let files = [
            (self.kernel_file(), &self.kernel_cpp),
            (self.launcher_file(), &self.launcher_cpp),
            (self.manifest_file(), &manifest),
        ];
        let mut out = Vec::new();
        for (name, text) in files {
            let path = dir.join(name);
            std::fs::write(&path, text).map_err(|source| CodegenError::Io {
                path: path.clone(),
                source,
            })?;
            out.push(path);
        }
        Ok(out)
    }
}

/// Emits the PTO-ISA package of a compiled kernel (the output of [`crate::passes::compile`]).
pub fn emit(kernel: &Kernel, arch: &Arch, launch: &LaunchSpec) -> Result<Package, CodegenError> {
    check_compiled(kernel, arch)?;
    if launch.block_dim == 0 || launch.block_dim > u64::from(u32::MAX) {
        return Err(CodegenError::Launch {
            kernel: kernel.name.clone(),
            reason: format!("block_dim {} is not in 1..=2^32-1", launch.block_dim),
        });
    }
    let mut e = Emitter::new(kernel, arch)?;
    let cube = e.section(CoreKind::Cube)?;
    let vector = e.section(CoreKind::Vector)?;
    let kernel_cpp = e.translation_unit(&cube, &vector);
    let launcher_cpp = host::launcher(&e, launch);
    let manifest = host::manifest(&e, launch);
    Ok(Package {
        name: e.entry.clone(),
        kernel_cpp,
        launcher_cpp,
        manifest,
    })
}

/// Rejects kernels that did not go through `passes::compile`, or for another target.
fn check_compiled(kernel: &Kernel, arch: &Arch) -> Result<(), CodegenError> {
    if kernel.target != Target::Ascend950 || arch.target != Target::Ascend950 {
        return Err(CodegenError::UnsupportedTarget {
            kernel: kernel.name.clone(),
            target: if kernel.target != Target::Ascend950 {
                kernel.target
            } else {
                arch.target
            },
        });
    }
    let not_compiled = |reason: String| CodegenError::NotCompiled {
        kernel: kernel.name.clone(),
        reason,
    };
    for (i, d) in kernel.tiles.iter().enumerate() {
        match d.storage {
            Storage::Alloc if d.addr.is_none() => {
                return Err(not_compiled(format!(
                    "tile `{}` has no planned address",
                    d.name
                )))
            }
            Storage::Alias { .. } => {
                let root = kernel.root_tile(TileId(i as u32));
                let ok = kernel
                    .try_tile(root)
                    .is_some_and(|r| r.storage == Storage::Alloc && r.addr.is_some());
                if !ok {
                    return Err(not_compiled(format!(
                        "reinterpret `{}` does not resolve to a planned allocation",
                        d.name
                    )));
                }
            }
            Storage::Alloc => {}
        }
    }
    for (loc, op) in kernel.ops() {
        if matches!(
            op,
            Op::Sync(SyncOp::ChannelAcquire { .. })
                | Op::Sync(SyncOp::ChannelPush { .. })
                | Op::Sync(SyncOp::ChannelPop { .. })
                | Op::Sync(SyncOp::ChannelRelease { .. })
        ) {
            return Err(not_compiled(format!(
                "{loc} ({}) is a channel op; the sync pass lowers channels to cross-core flags",
                op.name()
            )));
        }
    }
    Ok(())
}

/// Small C++ helpers a translation unit defines only when its code uses them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Helper {
    Min,
    Max,
    DivEuclid,
    RemEuclid,
    QuantWord,
}

impl Helper {
    fn definition(self) -> &'static str {
        match self {
            Helper::Min => {
                "AICORE inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }"
            }
            Helper::Max => {
                "AICORE inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }"
            }
            Helper::DivEuclid => {
                "// Euclidean division, as the tile IR defines `/` (floor division for b > 0).\n\
                 AICORE inline int64_t div_euclid(int64_t a, int64_t b)\n{\n    \
                 const int64_t q = a / b;\n    \
                 return (a % b < 0) ? (b > 0 ? q - 1 : q + 1) : q;\n}"
            }
            Helper::RemEuclid => {
                "// Euclidean remainder, as the tile IR defines `%` (never negative).\n\
                 AICORE inline int64_t rem_euclid(int64_t a, int64_t b)\n{\n    \
                 const int64_t r = a % b;\n    \
                 return r < 0 ? (b < 0 ? r - b : r + b) : r;\n}"
            }
            Helper::QuantWord => {
                "// Fixpipe quantisation word of a runtime fp32 scale: bits [31:0] = the fp32 bits\n\
                 // (bit 46, signed 8-bit output, clear).\n\
                 AICORE inline uint64_t quant_word(float scale)\n{\n    \
                 union {\n        float f;\n        uint32_t u;\n    } bits;\n    \
                 bits.f = scale;\n    return static_cast<uint64_t>(bits.u);\n}"
            }
        }
    }
}

/// The state of one emission: names, collected type aliases, helpers, the text being written.
pub(crate) struct Emitter<'k> {
    pub(crate) k: &'k Kernel,
    pub(crate) arch: &'k Arch,
    /// The C++ entry name.
    pub(crate) entry: String,
    /// Every identifier taken (C++ keywords, PTO names, aliases, variables).
    used: BTreeSet<String>,
    /// Alias name and spelling per tile.
    pub(crate) tile_types: Vec<(String, String)>,
    /// Variable name per tile.
    pub(crate) tile_vars: Vec<String>,
    /// C++ name per argument.
    pub(crate) param_names: Vec<String>,
    /// C++ name per scalar variable.
    pub(crate) var_names: Vec<String>,
    /// A known lower bound of each variable (plain `/` and `%` are exact on non-negatives).
    pub(crate) var_lb: Vec<Option<i64>>,
    /// Extra type aliases (GM views, gather row tiles): spelling -> (name, definition line).
    extra_types: BTreeMap<String, (String, String)>,
    extra_order: Vec<String>,
    helpers: BTreeSet<Helper>,
    /// The section being written.
    pub(crate) section: CoreKind,
    op_index: usize,
    /// Section-level uses of the block / sub-block ids.
    uses: BTreeSet<&'static str>,
    out: String,
    indent: usize,
}

impl<'k> Emitter<'k> {
    fn new(k: &'k Kernel, arch: &'k Arch) -> Result<Self, CodegenError> {
        let mut e = Emitter {
            k,
            arch,
            entry: String::new(),
            used: types::reserved(),
            tile_types: Vec::new(),
            tile_vars: Vec::new(),
            param_names: Vec::new(),
            var_names: Vec::new(),
            var_lb: vec![None; k.vars.len()],
            extra_types: BTreeMap::new(),
            extra_order: Vec::new(),
            helpers: BTreeSet::new(),
            section: CoreKind::Cube,
            op_index: 0,
            uses: BTreeSet::new(),
            out: String::new(),
            indent: 0,
        };
        e.entry = e.unique(&k.name);
        for p in &k.params {
            let n = e.unique(&p.name);
            e.param_names.push(n);
        }
        for d in &k.tiles {
            let spelling = types::tile_type_spelling(&d.ty, arch).map_err(|reason| {
                CodegenError::Unsupported {
                    location: format!("tile `{}`", d.name),
                    what: format!("{}", d.ty),
                    reason,
                }
            })?;
            let alias = e.unique(&types::camel(&d.name));
            e.tile_types.push((alias, spelling));
            let var = e.unique(&d.name);
            e.tile_vars.push(var);
        }
        for v in &k.vars {
            let n = e.unique(&v.name);
            e.var_names.push(n);
        }
        Ok(e)
    }

    /// A fresh identifier based on `base`.
    pub(crate) fn unique(&mut self, base: &str) -> String {
        let base = types::sanitize(base);
        let mut name = base.clone();
        let mut n = 1;
        while self.used.contains(&name) {
            name = format!("{base}_{n}");
            n += 1;
        }
        self.used.insert(name.clone());
        name
    }

    /// Registers (once) a type alias with the given spelling; returns its name.
    pub(crate) fn extra_type(&mut self, base: &str, spelling: String) -> String {
        if let Some((name, _)) = self.extra_types.get(&spelling) {
            return name.clone();
        }
        let name = self.unique(base);
        let line = format!("using {name} = {spelling};");
        self.extra_types
            .insert(spelling.clone(), (name.clone(), line));
        self.extra_order.push(spelling);
        name
    }

    pub(crate) fn helper(&mut self, h: Helper) {
        self.helpers.insert(h);
    }

    pub(crate) fn uses(&mut self, what: &'static str) {
        self.uses.insert(what);
    }

    /// Writes one line at the current indentation.
    pub(crate) fn line(&mut self, text: impl AsRef<str>) {
        for l in text.as_ref().lines() {
            if l.is_empty() {
                self.out.push('\n');
            } else {
                for _ in 0..self.indent {
                    self.out.push_str("    ");
                }
                self.out.push_str(l);
                self.out.push('\n');
            }
        }
    }

    pub(crate) fn open(&mut self, text: impl AsRef<str>) {
        self.line(text);
        self.indent += 1;
    }

    pub(crate) fn close(&mut self, text: impl AsRef<str>) {
        self.indent = self.indent.saturating_sub(1);
        self.line(text);
    }

    /// `cube op #4`, the location of the op being emitted.
    pub(crate) fn loc(&self) -> String {
        format!("{} op #{}", self.section, self.op_index)
    }

    /// The op named `what` has no PTO form, for `reason`.
    pub(crate) fn unsupported(&self, what: &str, reason: impl Into<String>) -> CodegenError {
        CodegenError::Unsupported {
            location: self.loc(),
            what: what.to_string(),
            reason: reason.into(),
        }
    }

    pub(crate) fn malformed(&self, reason: impl Into<String>) -> CodegenError {
        CodegenError::Malformed {
            kernel: self.k.name.clone(),
            reason: reason.into(),
        }
    }

    /// A tile's declaration, checked.
    pub(crate) fn decl(&self, id: TileId) -> Result<&'k crate::ir::TileDecl, CodegenError> {
        self.k
            .try_tile(id)
            .ok_or_else(|| self.malformed(format!("tile id {} is not declared", id.0)))
    }

    /// The type alias of a tile.
    pub(crate) fn tile_type(&self, id: TileId) -> Result<String, CodegenError> {
        self.tile_types
            .get(id.0 as usize)
            .map(|t| t.0.clone())
            .ok_or_else(|| self.malformed(format!("tile id {} is not declared", id.0)))
    }

    /// A use of a tile: `name` or `name[slot % n]`.
    pub(crate) fn tile(&mut self, r: &TileRef) -> Result<String, CodegenError> {
        let d = self.decl(r.tile)?;
        let var = self.tile_vars[r.tile.0 as usize].clone();
        if d.buffers <= 1 {
            return Ok(var);
        }
        let slot = self.slot(&r.slot, d.buffers);
        Ok(format!("{var}[{slot}]"))
    }

    /// The C++ index of buffer `slot` in a group of `n`.
    pub(crate) fn slot(&mut self, slot: &crate::ir::Expr, n: u32) -> String {
        use crate::ir::{BinOp, Expr};
        let n = i64::from(n);
        match slot {
            Expr::Const(c) => c.rem_euclid(n).to_string(),
            Expr::Bin(BinOp::Rem, _, d) if d.as_const() == Some(n) => self.expr(slot),
            _ => {
                let m = Expr::Bin(BinOp::Rem, Box::new(slot.clone()), Box::new(Expr::Const(n)));
                self.expr(&m)
            }
        }
    }

    /// Tiles a section touches (with the sources of the reinterprets among them), in id order.
    fn section_tiles(&self, stmts: &[Stmt]) -> Vec<TileId> {
        let mut set = BTreeSet::new();
        walk_ops(stmts, &mut |op| {
            for r in op.tile_reads().into_iter().chain(op.tile_writes()) {
                set.insert(r.tile);
            }
            if let Op::Vector(VectorOp::SetValidShape { tile, .. }) = op {
                set.insert(tile.tile);
            }
        });
        let mut all = BTreeSet::new();
        for id in set {
            let mut cur = id;
            for _ in 0..=self.k.tiles.len() {
                if !all.insert(cur) {
                    break;
                }
                match self.k.try_tile(cur).map(|d| &d.storage) {
                    Some(Storage::Alias { of }) => cur = *of,
                    _ => break,
                }
            }
        }
        all.into_iter()
            .filter(|id| self.k.try_tile(*id).is_some())
            .collect()
    }

    /// Byte address of buffer `i` of tile `id` (aliases resolve to their root).
    pub(crate) fn buffer_addr(&self, id: TileId, i: u64) -> Result<(u64, u64), CodegenError> {
        let root = self.decl(self.k.root_tile(id))?;
        let base = root.addr.ok_or_else(|| CodegenError::NotCompiled {
            kernel: self.k.name.clone(),
            reason: format!("tile `{}` has no planned address", root.name),
        })?;
        let stride = self.arch.buffer_stride(&root.ty);
        Ok((base + i * stride, stride))
    }

    /// The declarations of a section's tiles: one variable (or array) per tile, `TASSIGN` at the
    /// planned addresses, `TRESHAPE` for reinterprets.
    fn declarations(&mut self, tiles: &[TileId]) -> Result<String, CodegenError> {
        let saved = std::mem::take(&mut self.out);
        let mut last_space = None;
        for &id in tiles {
            let d = self.decl(id)?;
            let ty = self.tile_type(id)?;
            let var = self.tile_vars[id.0 as usize].clone();
            let n = d.buffers.max(1);
            if last_space.is_some() && last_space != Some(d.ty.space) {
                self.line("");
            }
            last_space = Some(d.ty.space);
            let names: Vec<String> = if n == 1 {
                self.line(format!("{ty} {var};"));
                vec![var.clone()]
            } else {
                self.line(format!("{ty} {var}[{n}];"));
                (0..n).map(|i| format!("{var}[{i}]")).collect()
            };
            match d.storage {
                Storage::Alloc => {
                    for (i, name) in names.iter().enumerate() {
                        let (addr, _) = self.buffer_addr(id, i as u64)?;
                        self.line(format!("TASSIGN({name}, {addr:#x});"));
                    }
                }
                Storage::Alias { of } => {
                    let src = self.decl(of)?;
                    let src_var = self.tile_vars[of.0 as usize].clone();
                    let same_bytes = src.ty.bytes() == d.ty.bytes()
                        && src.ty.layout.is_boxed() == d.ty.layout.is_boxed()
                        && src.ty.space == d.ty.space;
                    for (i, name) in names.iter().enumerate() {
                        if same_bytes {
                            let s = if src.buffers > 1 {
                                format!("{src_var}[{}]", i as u32 % src.buffers)
                            } else {
                                src_var.clone()
                            };
                            self.line(format!("TRESHAPE({name}, {s});"));
                        } else {
                            let (addr, _) = self.buffer_addr(id, i as u64)?;
                            self.line(format!(
                                "TASSIGN({name}, {addr:#x});  // reinterpret of {src_var} (a smaller view of its bytes)"
                            ));
                        }
                    }
                }
            }
        }
        Ok(std::mem::replace(&mut self.out, saved))
    }

    /// One section's code (without the `#if`), or an empty string for an empty section.
    fn section(&mut self, core: CoreKind) -> Result<String, CodegenError> {
        let stmts = self.k.section(core);
        if stmts.is_empty() {
            return Ok(String::new());
        }
        self.section = core;
        self.op_index = 0;
        self.uses.clear();
        self.out.clear();
        self.indent = 1;
        self.stmts(stmts)?;
        let body = std::mem::take(&mut self.out);
        let tiles = self.section_tiles(stmts);
        let decls = self.declarations(&tiles)?;
        let mut s = String::new();
        if self.uses.contains("block_idx") {
            s.push_str("    const int64_t block_idx = get_block_idx();\n");
        }
        if self.uses.contains("block_num") {
            s.push_str("    const int64_t block_num = get_block_num();\n");
        }
        if self.uses.contains("sub_block_idx") {
            match core {
                CoreKind::Vector => {
                    s.push_str("    const int64_t sub_block_idx = get_subblockid();\n")
                }
                CoreKind::Cube => s.push_str("    const int64_t sub_block_idx = 0;\n"),
            }
        }
        if !s.is_empty() {
            s.push('\n');
        }
        s.push_str(&decls);
        s.push('\n');
        s.push_str(&body);
        Ok(s)
    }

    /// Emits a statement list at the current indentation.
    pub(crate) fn stmts(&mut self, stmts: &[Stmt]) -> Result<(), CodegenError> {
        for s in stmts {
            match s {
                Stmt::Op(op) => {
                    self.op(op)?;
                    self.op_index += 1;
                }
                _ => scalar::control(self, s)?,
            }
        }
        Ok(())
    }

    fn op(&mut self, op: &Op) -> Result<(), CodegenError> {
        match op {
            Op::LoadStore(o) => load_store::emit(self, o),
            Op::Move(o) => moves::emit(self, o),
            Op::Matmul(o) => matmul::emit(self, o),
            Op::Gather(o) => gather::emit(self, o),
            Op::Vector(o) => vector::emit(self, o),
            Op::Sort(o) => sort::emit(self, o),
            Op::Scalar(o) => scalar::emit(self, o),
            Op::Sync(o) => sync::emit(self, o),
        }
    }

    /// The whole kernel translation unit.
    fn translation_unit(&self, cube: &str, vector: &str) -> String {
        let k = self.k;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "// {}: PTO-ISA C++ for {} ({}), generated by tileops from the compiled tile IR.",
            self.entry, k.target, self.arch.compiler_target
        );
        s.push_str(
            "// Compiled once per core type: the cube section for the AIC (__DAV_CUBE__), the vector\n\
             // section for both AIVs (__DAV_VEC__). Tile addresses come from memory planning, every\n\
             // flag from sync insertion; the manifest beside this file has the build commands.\n",
        );
        s.push_str("#include <pto/pto-inst.hpp>\n\nusing namespace pto;\n");
        let spaces = [
            (MemSpace::Mat, "L1 (Mat)"),
            (MemSpace::Left, "L0A (Left)"),
            (MemSpace::Right, "L0B (Right)"),
            (MemSpace::Acc, "L0C (Acc)"),
            (MemSpace::Bias, "bias table (Bias)"),
            (MemSpace::Scaling, "Fixpipe buffer (Scaling)"),
            (MemSpace::Vec, "UB (Vec), one per AIV"),
        ];
        for (space, title) in spaces {
            let ids: Vec<usize> = (0..k.tiles.len())
                .filter(|&i| k.tiles[i].ty.space == space)
                .collect();
            if ids.is_empty() {
                continue;
            }
            let _ = writeln!(s, "\n// Tiles in {title}");
            for i in ids {
                let (alias, spelling) = &self.tile_types[i];
                let _ = writeln!(s, "using {alias} = {spelling};");
            }
        }
        if !self.extra_order.is_empty() {
            s.push_str("\n// GM views and gather rows\n");
            for spelling in &self.extra_order {
                if let Some((_, line)) = self.extra_types.get(spelling) {
                    s.push_str(line);
                    s.push('\n');
                }
            }
        }
        for h in &self.helpers {
            s.push('\n');
            s.push_str(h.definition());
            s.push('\n');
        }
        let _ = writeln!(
            s,
            "\nextern \"C\" __global__ AICORE void {}({})\n{{",
            self.entry,
            host::signature(self)
        );
        if !cube.is_empty() {
            // Each section is its own scope: the CPU-simulation build of PTO-ISA defines both
            // macros in one unit, and both sections declare `block_idx`.
            s.push_str("#if defined(__DAV_CUBE__)\n    {\n");
            s.push_str(cube);
            s.push_str("    }\n#endif  // __DAV_CUBE__\n");
        }
        if !vector.is_empty() {
            s.push_str("#if defined(__DAV_VEC__)\n    {\n");
            s.push_str(vector);
            s.push_str("    }\n#endif  // __DAV_VEC__\n");
        }
        s.push_str("}\n");
        s
    }
}
