//! The verifier: every rule of the machine (ASCEND950.md) that can be checked before running.
//!
//! Each violation is a [`Diagnostic`] naming the rule, the op and the numbers involved. Rules live
//! in one file per family: `memory` (tile shapes, capacity, alignment, loads and stores),
//! `moves`, `acc_stride` (the L0C stride of a Fixpipe read against the matmul's), `matmul`,
//! `quant`, `gather`, `reinterpret`, `vector`, `sort`, `scalar`, `sync` and `structure` (ids, scopes
//! and which core may touch which space), and `ranges` (every number in range: run first, and
//! alone when it finds an error).

mod acc_stride;
mod gather;
mod matmul;
mod memory;
mod moves;
mod quant;
mod ranges;
mod reinterpret;
mod scalar;
pub(crate) mod sort;
mod structure;
mod sync;
mod vector;

use crate::arch::Arch;
use crate::ir::{CoreKind, Kernel, Op, OpLoc, Stmt, TileDecl, TileRef, ValidDim, VarId};
use serde::Serialize;
use std::collections::HashSet;
use std::fmt;
use thiserror::Error;

/// How serious a diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Severity {
    /// The kernel is wrong on the machine.
    Error,
    /// Legal but risky (e.g. UB planned above the safe 240 KiB).
    Warning,
}

/// Declares [`Rule`] and [`Rule::ALL`] from one list.
macro_rules! rules {
    ($($rule:ident,)*) => {
        /// The rule a diagnostic is about. `code()` is its stable kebab-case name.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
        #[allow(missing_docs)]
        pub enum Rule {
            $($rule,)*
        }

        impl Rule {
            /// Every rule, in declaration order: the one list of rules (the tests iterate it).
            pub const ALL: &'static [Rule] = &[$(Rule::$rule,)*];
        }
    };
}

rules! {
    // structure
    UnknownTile,
    UnknownParam,
    UnknownChannel,
    VarScope,
    ScalarParam,
    LoopStep,
    SectionSpace,
    // memory
    TileShape,
    Capacity,
    Alignment,
    LoadSpace,
    LoadLayout,
    LoadDtype,
    ViewShape,
    StoreSource,
    StoreLayout,
    StoreDtype,
    // moves
    MovePath,
    MoveLayout,
    MoveDtype,
    MoveShape,
    MoveOption,
    DualSplitScale,
    DualSplitLayout,
    DualSplitWidth,
    DualSplitShape,
    PhaseOffset,
    // the L0C stride of a Fixpipe read out of Acc
    AccStride,
    // matmul
    MatmulSpace,
    MatmulLayout,
    MatmulDtype,
    MatmulShape,
    MatmulBias,
    // quantisation
    ScaleTile,
    ScaleScalar,
    // reinterpret
    ReinterpretAttrs,
    ReinterpretSource,
    ReinterpretAlign,
    ReinterpretSize,
    ReinterpretInherit,
    // gather
    GatherDtype,
    GatherIndices,
    GatherBlockTable,
    GatherSize,
    GatherDst,
    // vector
    VectorSpace,
    VectorShape,
    VectorDtype,
    VectorLayout,
    BroadcastOperand,
    ReducePad,
    ReduceLayout,
    PadValue,
    FillpadLayout,
    ValidShape,
    // sort (TSORT32, TMRGSORT)
    SortSpace,
    SortLayout,
    SortDtype,
    SortShape,
    SortTmp,
    SortRepeat,
    SortLists,
    SortUb,
    // scalar
    ScalarTileSpace,
    ScalarTileDtype,
    ScalarTileIndex,
    // sync
    FlagEvent,
    FlagPipe,
    CrossFlag,
    ChannelSide,
    ChannelDepth,
    // ranges (static validity of the numbers)
    ParamShape,
    ParamRange,
    ConstExpr,
    TileRange,
    TileSlot,
    ViewRange,
}

impl Rule {
    /// Stable kebab-case name (`move-path`, `matmul-dtype`, ...).
    pub fn code(self) -> String {
        let name = format!("{self:?}");
        let mut out = String::new();
        for (i, ch) in name.chars().enumerate() {
            if ch.is_ascii_uppercase() {
                if i > 0 {
                    out.push('-');
                }
                out.push(ch.to_ascii_lowercase());
            } else {
                out.push(ch);
            }
        }
        out
    }
}

/// One finding of the verifier.
#[derive(Debug, Clone, PartialEq, Eq, Error, Serialize)]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// The rule broken.
    pub rule: Rule,
    /// The op, if the finding is about one (tile declarations have none).
    pub loc: Option<OpLoc>,
    /// The op's name or the tile's name.
    pub subject: String,
    /// What is wrong, with the numbers involved.
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sev = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(f, "{sev}[{}] ", self.rule.code())?;
        match self.loc {
            Some(loc) => write!(f, "{loc} ({}): ", self.subject)?,
            None => write!(f, "{}: ", self.subject)?,
        }
        f.write_str(&self.message)
    }
}

/// All findings for a kernel.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Findings in program order (declarations first).
    pub diagnostics: Vec<Diagnostic>,
}

/// A kernel the verifier rejected.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("kernel `{kernel}` fails verification with {} error(s):\n{}", .errors.len(), .errors.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("\n"))]
pub struct VerifyError {
    /// The kernel's name.
    pub kernel: String,
    /// The errors (warnings are not included).
    pub errors: Vec<Diagnostic>,
}

impl Report {
    /// The errors.
    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
    }

    /// The warnings.
    pub fn warnings(&self) -> impl Iterator<Item = &Diagnostic> {
        self.diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Warning)
    }

    /// True when there is no error.
    pub fn is_ok(&self) -> bool {
        self.errors().next().is_none()
    }

    /// True when some diagnostic is about `rule`.
    pub fn has(&self, rule: Rule) -> bool {
        self.diagnostics.iter().any(|d| d.rule == rule)
    }

    /// `Ok` when there is no error, else the errors.
    pub fn into_result(self, kernel: &str) -> Result<(), VerifyError> {
        let errors: Vec<Diagnostic> = self.errors().cloned().collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(VerifyError {
                kernel: kernel.to_string(),
                errors,
            })
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for d in &self.diagnostics {
            writeln!(f, "{d}")?;
        }
        Ok(())
    }
}

/// Verifies a kernel against the machine of its own target.
pub fn verify(kernel: &Kernel) -> Report {
    verify_with(kernel, &Arch::for_target(kernel.target))
}

/// Verifies a kernel against a given machine description.
pub fn verify_with(kernel: &Kernel, arch: &Arch) -> Report {
    let mut cx = Ctx {
        kernel,
        arch,
        diags: vec![],
        loc: None,
        subject: String::new(),
    };
    // The other families compute with these numbers: they run only when all are in range.
    if !ranges::check(&mut cx) {
        return Report {
            diagnostics: cx.diags,
        };
    }
    memory::check_declarations(&mut cx);
    reinterpret::check_declarations(&mut cx);
    structure::check_channels(&mut cx);
    for section in [CoreKind::Cube, CoreKind::Vector] {
        let mut walker = Walker {
            section,
            index: 0,
            scope: HashSet::new(),
        };
        walker.stmts(&mut cx, kernel.section(section));
    }
    acc_stride::check(&mut cx);
    Report {
        diagnostics: cx.diags,
    }
}

/// State shared by the rule families while they check one op.
pub(crate) struct Ctx<'a> {
    pub kernel: &'a Kernel,
    pub arch: &'a Arch,
    pub(super) diags: Vec<Diagnostic>,
    pub(super) loc: Option<OpLoc>,
    pub(super) subject: String,
}

impl<'a> Ctx<'a> {
    /// Reports an error on the current op or declaration.
    pub fn error(&mut self, rule: Rule, message: impl Into<String>) {
        self.push(Severity::Error, rule, message.into());
    }

    /// Reports a warning on the current op or declaration.
    pub fn warn(&mut self, rule: Rule, message: impl Into<String>) {
        self.push(Severity::Warning, rule, message.into());
    }

    fn push(&mut self, severity: Severity, rule: Rule, message: String) {
        self.diags.push(Diagnostic {
            severity,
            rule,
            loc: self.loc,
            subject: self.subject.clone(),
            message,
        });
    }

    /// Sets the subject of the following diagnostics to a declaration.
    pub fn at_decl(&mut self, what: String) {
        self.loc = None;
        self.subject = what;
    }

    /// The declaration behind a tile reference, reporting an unknown id.
    pub fn tile(&mut self, r: &TileRef) -> Option<&'a TileDecl> {
        let kernel = self.kernel;
        match kernel.try_tile(r.tile) {
            Some(d) => Some(d),
            None => {
                self.error(
                    Rule::UnknownTile,
                    format!(
                        "tile id {} is not declared (the kernel has {} tiles)",
                        r.tile.0,
                        kernel.tiles.len()
                    ),
                );
                None
            }
        }
    }

    /// The target's display name.
    pub fn machine(&self) -> String {
        self.arch.target.to_string()
    }
}

/// A static dimension's value, `None` for a runtime one.
pub(crate) fn static_dim(d: ValidDim) -> Option<u64> {
    match d {
        ValidDim::Static(n) => Some(n),
        ValidDim::Dynamic => None,
    }
}

struct Walker {
    section: CoreKind,
    index: usize,
    scope: HashSet<VarId>,
}

impl Walker {
    fn stmts(&mut self, cx: &mut Ctx<'_>, stmts: &[Stmt]) {
        let saved = self.scope.clone();
        for s in stmts {
            match s {
                Stmt::Op(op) => self.op(cx, op),
                Stmt::Let { var, value } => {
                    self.at(cx, "let");
                    structure::check_expr(cx, value, &self.scope);
                    self.scope.insert(*var);
                }
                Stmt::For {
                    var,
                    start,
                    end,
                    step,
                    body,
                } => {
                    self.at(cx, "for");
                    structure::check_expr(cx, start, &self.scope);
                    structure::check_expr(cx, end, &self.scope);
                    if *step <= 0 {
                        cx.error(
                            Rule::LoopStep,
                            format!("loop step must be positive, got {step}"),
                        );
                    }
                    self.scope.insert(*var);
                    self.stmts(cx, body);
                    self.scope.remove(var);
                }
                Stmt::If {
                    cond,
                    then_body,
                    else_body,
                } => {
                    self.at(cx, "if");
                    structure::check_expr(cx, cond, &self.scope);
                    self.stmts(cx, then_body);
                    self.stmts(cx, else_body);
                }
            }
        }
        self.scope = saved;
    }

    /// Points diagnostics at the next op index (control statements share the index of the op
    /// that follows them).
    fn at(&self, cx: &mut Ctx<'_>, subject: &str) {
        cx.loc = Some(OpLoc {
            section: self.section,
            index: self.index,
        });
        cx.subject = subject.to_string();
    }

    fn op(&mut self, cx: &mut Ctx<'_>, op: &Op) {
        self.at(cx, op.name());
        structure::check_op(cx, op, self.section, &self.scope);
        match op {
            Op::LoadStore(o) => {
                memory::check_op(cx, o);
                quant::check_store(cx, o);
            }
            Op::Move(o) => {
                moves::check(cx, o);
                quant::check_move(cx, o);
            }
            Op::Matmul(o) => matmul::check(cx, o),
            Op::Gather(o) => gather::check(cx, o),
            Op::Vector(o) => vector::check(cx, o),
            Op::Sort(o) => sort::check(cx, o),
            Op::Sync(o) => sync::check(cx, o, self.section),
            Op::Scalar(o) => {
                scalar::check(cx, o);
                self.scope.extend(o.defines());
            }
        }
        self.index += 1;
    }
}
