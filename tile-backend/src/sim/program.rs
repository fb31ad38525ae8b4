//! A compiled kernel lowered once for the simulator ([`Program`]): what every launch of the
//! same kernel would otherwise work out again — the tiles' placement, the write-only outputs,
//! each op's location, and the statement trees flattened into straight-line code with jumps
//! whose control expressions are folded where they are constant.
//!
//! The interpreter (`interp.rs`) runs this code; a launch pays only for what depends on its
//! arguments. The ops' runtime keeps one program per cached kernel, so a decode step's launches
//! lower nothing (`runtime` in tileops-ops); [`super::run`] lowers the kernel it is given on every
//! call.

use super::tile::{self, Placed};
use super::{gm, SimError};
use crate::arch::Arch;
use crate::ir::{CoreKind, Expr, ExprEnv, Kernel, NoEnv, Op, OpLoc, ParamId, Stmt, VarId};
use crate::passes::Compiled;

/// A compiled kernel (every allocated tile has an address) lowered for the simulator, for one
/// machine. Built by [`Program::lower`]; run by [`super::run_program`] and
/// [`super::run_program_traced`] as often as wanted.
pub struct Program<'k, 'a> {
    pub(crate) kernel: &'k Kernel,
    pub(crate) arch: &'a Arch,
    /// Every tile's placement, indexed by tile id (`None`: resolved per access, with its error).
    pub(crate) placed: Vec<Option<Placed<'k>>>,
    /// The tensor parameters the kernel only stores into ([`gm::write_only_params`]).
    pub(crate) write_only: Vec<ParamId>,
    /// The cube section's code, then the vector section's.
    pub(crate) code: [Vec<Instr<'k>>; 2],
}

impl std::fmt::Debug for Program<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Program")
            .field("kernel", &self.kernel.name)
            .field("cube_instrs", &self.code[0].len())
            .field("vector_instrs", &self.code[1].len())
            .finish()
    }
}

impl<'k, 'a> Program<'k, 'a> {
    /// Lowers `kernel` for `arch`. It passed [`crate::passes::compile`] (its type says so), so
    /// every tile has an address; the [`SimError::NotPlanned`] check stays as a guard.
    pub fn lower(kernel: &'k Compiled, arch: &'a Arch) -> Result<Self, SimError> {
        Self::lower_any(kernel.kernel(), arch)
    }

    /// Lowers a kernel that may not have been compiled (a hand-written or edited one that
    /// [`super::run`] is given): the interpreter checks at run time everything it runs, so this
    /// is sound; fails with [`SimError::NotPlanned`] when a tile has no address.
    pub(crate) fn lower_any(kernel: &'k Kernel, arch: &'a Arch) -> Result<Self, SimError> {
        tile::check_planned(kernel)?;
        let code = [CoreKind::Cube, CoreKind::Vector].map(|section| {
            let mut out = Vec::new();
            let mut index = 0;
            flatten(kernel.section(section), section, &mut index, &mut out);
            out
        });
        Ok(Program {
            kernel,
            arch,
            placed: tile::place_all(kernel, arch),
            write_only: gm::write_only_params(kernel),
            code,
        })
    }

    /// The kernel this program runs.
    pub fn kernel(&self) -> &'k Kernel {
        self.kernel
    }

    /// The machine it was lowered for.
    pub fn arch(&self) -> &'a Arch {
        self.arch
    }

    /// The code of `section`.
    pub(crate) fn section(&self, section: CoreKind) -> &[Instr<'k>] {
        match section {
            CoreKind::Cube => &self.code[0],
            CoreKind::Vector => &self.code[1],
        }
    }
}

/// One instruction of a section's straight-line code. Jump targets are indices into it.
pub(crate) enum Instr<'k> {
    /// A machine operation at `loc`.
    Op { op: &'k Op, loc: OpLoc },
    /// Binds a scalar variable.
    Let { var: VarId, value: Value<'k> },
    /// Enters a loop: its bounds are evaluated once; an empty range jumps to `exit` (past the
    /// loop's [`Instr::Next`]), otherwise `var` takes `start` and the body follows.
    For {
        var: VarId,
        start: Value<'k>,
        end: Value<'k>,
        step: i64,
        exit: usize,
    },
    /// The end of a loop body: the next iteration jumps back to `body`, the last falls through.
    Next { body: usize },
    /// Jumps to `target` when `cond` is zero (an `if` whose then-branch follows).
    Unless { cond: Value<'k>, target: usize },
    /// Jumps to `target` (past an `else` branch).
    Jump { target: usize },
}

/// A scalar expression in the form a core evaluates cheaply: a constant folded at lowering, a
/// variable read, or the expression's tree.
pub(crate) enum Value<'k> {
    Const(i64),
    Var(VarId),
    Tree(&'k Expr),
}

impl<'k> Value<'k> {
    fn of(e: &'k Expr) -> Self {
        match e {
            Expr::Const(v) => Value::Const(*v),
            Expr::Var(v) => Value::Var(*v),
            e => match e.try_eval(&NoEnv) {
                // An expression of literals alone (an error is left for run time, with its
                // message).
                Some(v) => Value::Const(v),
                None => Value::Tree(e),
            },
        }
    }

    /// Its value on `env`.
    #[inline]
    pub fn eval<E: ExprEnv>(&self, env: &E) -> Result<i64, crate::ir::EvalError> {
        match self {
            Value::Const(v) => Ok(*v),
            Value::Var(v) => match env.var(*v) {
                Some(x) => Ok(x),
                None => Expr::Var(*v).eval(env),
            },
            Value::Tree(e) => e.eval(env),
        }
    }
}

/// Appends the code of `stmts` to `out`; `index` counts the section's ops in pre-order (the
/// numbering of [`Kernel::ops`]).
fn flatten<'k>(stmts: &'k [Stmt], section: CoreKind, index: &mut usize, out: &mut Vec<Instr<'k>>) {
    for s in stmts {
        match s {
            Stmt::Op(op) => {
                out.push(Instr::Op {
                    op,
                    loc: OpLoc {
                        section,
                        index: *index,
                    },
                });
                *index += 1;
            }
            Stmt::Let { var, value } => out.push(Instr::Let {
                var: *var,
                value: Value::of(value),
            }),
            Stmt::For {
                var,
                start,
                end,
                step,
                body,
            } => {
                let at = out.len();
                out.push(Instr::For {
                    var: *var,
                    start: Value::of(start),
                    end: Value::of(end),
                    step: *step,
                    exit: 0,
                });
                flatten(body, section, index, out);
                out.push(Instr::Next { body: at + 1 });
                let exit = out.len();
                if let Some(Instr::For { exit: e, .. }) = out.get_mut(at) {
                    *e = exit;
                }
            }
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => {
                let at = out.len();
                out.push(Instr::Unless {
                    cond: Value::of(cond),
                    target: 0,
                });
                flatten(then_body, section, index, out);
                let jump = (!else_body.is_empty()).then(|| {
                    out.push(Instr::Jump { target: 0 });
                    out.len() - 1
                });
                let else_at = out.len();
                flatten(else_body, section, index, out);
                let end = out.len();
                if let Some(Instr::Unless { target, .. }) = out.get_mut(at) {
                    *target = else_at;
                }
                if let Some(Instr::Jump { target }) = jump.and_then(|j| out.get_mut(j)) {
                    *target = end;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The flattened code numbers ops as `Kernel::ops` does, and its jumps land where the
    /// statement trees say.
    #[test]
    fn ops_keep_their_locations_and_jumps_their_targets() {
        let arch = Arch::ascend950();
        let k = crate::passes::compile(&crate::kernels::worked_matmul(), &arch).expect("compiles");
        let p = Program::lower(&k, &arch).expect("lowers");
        let want: Vec<(OpLoc, *const Op)> = k
            .ops()
            .into_iter()
            .map(|(l, op)| (l, op as *const Op))
            .collect();
        let got: Vec<(OpLoc, *const Op)> = p
            .code
            .iter()
            .flatten()
            .filter_map(|i| match i {
                Instr::Op { op, loc } => Some((*loc, *op as *const Op)),
                _ => None,
            })
            .collect();
        assert_eq!(got, want);
        for code in &p.code {
            for (at, i) in code.iter().enumerate() {
                match i {
                    Instr::For { exit, .. } => {
                        assert!(matches!(code[exit - 1], Instr::Next { body } if body == at + 1))
                    }
                    Instr::Unless { target, .. } | Instr::Jump { target } => {
                        assert!(*target > at && *target <= code.len())
                    }
                    _ => {}
                }
            }
        }
    }

    /// One program runs many launches: each gives the bytes a fresh `sim::run` gives for the
    /// same arguments.
    #[test]
    fn a_program_runs_launch_after_launch_as_run_does() {
        use crate::sim::{io, run, run_program, SimOptions};
        let arch = Arch::ascend950();
        let k = crate::passes::compile(&crate::kernels::worked_matmul(), &arch).expect("compiles");
        let p = Program::lower(&k, &arch).expect("lowers");
        for seed in [1, 2, 3] {
            let inputs = io::generate(&k, seed).expect("inputs");
            let copy = || -> Vec<_> {
                inputs
                    .iter()
                    .map(|a| a.try_clone().expect("owned"))
                    .collect()
            };
            let (mut once, mut reused) = (copy(), copy());
            run(&k, &arch, &mut once, SimOptions { block_dim: 1 }).expect("runs");
            run_program(&p, &mut reused, SimOptions { block_dim: 1 }).expect("runs");
            assert_eq!(once, reused, "seed {seed}");
            assert_ne!(once, inputs, "seed {seed}: the output is written");
        }
    }

    /// A closed expression folds to its value; one that reads anything stays a tree.
    #[test]
    fn closed_expressions_fold() {
        let e = Expr::from(3) * 4 + 1;
        assert!(matches!(Value::of(&e), Value::Const(13)));
        let open = Expr::BlockIdx * 4;
        assert!(matches!(Value::of(&open), Value::Tree(_)));
        let div0 = Expr::from(1) / 0;
        assert!(matches!(Value::of(&div0), Value::Tree(_)));
    }
}
