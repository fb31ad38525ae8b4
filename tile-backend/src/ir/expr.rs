//! Scalar expressions: a pure i64 tree for index arithmetic, loop bounds and valid shapes.

use serde::{Deserialize, Serialize};
use std::fmt;
use thiserror::Error;

/// A scalar variable: a loop index, a `let` binding or the result of a GM scalar read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct VarId(pub u32);

/// A kernel argument (GM tensor or runtime scalar), by position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ParamId(pub u32);

/// Binary operators of scalar expressions. Comparisons and logic yield 0 or 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BinOp {
    /// `a + b` (wrapping is an evaluation error).
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// Floor division; division by zero is an evaluation error.
    Div,
    /// Remainder with the sign of the divisor (Euclidean for positive divisors).
    Rem,
    /// `min(a, b)`.
    Min,
    /// `max(a, b)`.
    Max,
    /// `a < b`.
    Lt,
    /// `a <= b`.
    Le,
    /// `a > b`.
    Gt,
    /// `a >= b`.
    Ge,
    /// `a == b`.
    Eq,
    /// `a != b`.
    Ne,
    /// Logical and (non-zero is true).
    And,
    /// Logical or.
    Or,
}

impl BinOp {
    /// The C++ spelling, for infix operators; `None` for min/max.
    pub const fn symbol(self) -> Option<&'static str> {
        Some(match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::And => "&&",
            BinOp::Or => "||",
            BinOp::Min | BinOp::Max => return None,
        })
    }
}

/// A pure integer expression.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Expr {
    /// A literal.
    Const(i64),
    /// A scalar variable in scope.
    Var(VarId),
    /// A runtime scalar kernel argument.
    Param(ParamId),
    /// The cluster's block index, `get_block_idx()`.
    BlockIdx,
    /// The number of launched blocks.
    BlockDim,
    /// The vector core's sub-block id (0 or 1); 0 in cube code.
    SubBlockIdx,
    /// A binary operation.
    Bin(BinOp, Box<Expr>, Box<Expr>),
    /// `cond != 0 ? a : b`.
    Select(Box<Expr>, Box<Expr>, Box<Expr>),
}

/// Why an expression could not be evaluated.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EvalError {
    /// Division or remainder by zero.
    #[error("division by zero in `{0}`")]
    DivisionByZero(String),
    /// i64 overflow.
    #[error("integer overflow in `{0}`")]
    Overflow(String),
    /// The expression reads something the environment does not know.
    #[error("`{0}` is not known here")]
    Unknown(String),
}

/// What an expression may read while it is evaluated.
pub trait ExprEnv {
    /// Value of a scalar variable.
    fn var(&self, v: VarId) -> Option<i64>;
    /// Value of a runtime scalar argument.
    fn param(&self, p: ParamId) -> Option<i64>;
    /// Block index.
    fn block_idx(&self) -> Option<i64>;
    /// Block count.
    fn block_dim(&self) -> Option<i64>;
    /// Sub-block id.
    fn sub_block_idx(&self) -> Option<i64>;
}

/// An environment that knows nothing: evaluating in it succeeds only for constant expressions.
pub struct NoEnv;

impl ExprEnv for NoEnv {
    fn var(&self, _: VarId) -> Option<i64> {
        None
    }
    fn param(&self, _: ParamId) -> Option<i64> {
        None
    }
    fn block_idx(&self) -> Option<i64> {
        None
    }
    fn block_dim(&self) -> Option<i64> {
        None
    }
    fn sub_block_idx(&self) -> Option<i64> {
        None
    }
}

impl Expr {
    fn bin(op: BinOp, a: impl Into<Expr>, b: impl Into<Expr>) -> Expr {
        let (a, b) = (a.into(), b.into());
        // Fold constants so static shapes stay static through the builder.
        if let (Some(x), Some(y)) = (a.as_const(), b.as_const()) {
            if let Ok(v) = apply(op, x, y, &|| String::new()) {
                return Expr::Const(v);
            }
        }
        Expr::Bin(op, Box::new(a), Box::new(b))
    }

    /// `min(self, b)`.
    pub fn min(self, b: impl Into<Expr>) -> Expr {
        Expr::bin(BinOp::Min, self, b)
    }
    /// `max(self, b)`.
    pub fn max(self, b: impl Into<Expr>) -> Expr {
        Expr::bin(BinOp::Max, self, b)
    }
    /// Ceiling division `(self + b - 1) / b` for positive `b`.
    pub fn ceil_div(self, b: impl Into<Expr>) -> Expr {
        let b = b.into();
        (self + b.clone() - 1) / b
    }
    /// `self < b`.
    pub fn lt(self, b: impl Into<Expr>) -> Expr {
        Expr::bin(BinOp::Lt, self, b)
    }
    /// `self <= b`.
    pub fn le(self, b: impl Into<Expr>) -> Expr {
        Expr::bin(BinOp::Le, self, b)
    }
    /// `self > b`.
    pub fn gt(self, b: impl Into<Expr>) -> Expr {
        Expr::bin(BinOp::Gt, self, b)
    }
    /// `self >= b`.
    pub fn ge(self, b: impl Into<Expr>) -> Expr {
        Expr::bin(BinOp::Ge, self, b)
    }
    /// `self == b`.
    pub fn eq_(self, b: impl Into<Expr>) -> Expr {
        Expr::bin(BinOp::Eq, self, b)
    }
    /// `self != b`.
    pub fn ne_(self, b: impl Into<Expr>) -> Expr {
        Expr::bin(BinOp::Ne, self, b)
    }
    /// Logical and.
    pub fn and(self, b: impl Into<Expr>) -> Expr {
        Expr::bin(BinOp::And, self, b)
    }
    /// Logical or.
    pub fn or(self, b: impl Into<Expr>) -> Expr {
        Expr::bin(BinOp::Or, self, b)
    }
    /// `cond ? a : b`.
    pub fn select(cond: impl Into<Expr>, a: impl Into<Expr>, b: impl Into<Expr>) -> Expr {
        let cond = cond.into();
        match cond.as_const() {
            Some(0) => b.into(),
            Some(_) => a.into(),
            None => Expr::Select(Box::new(cond), Box::new(a.into()), Box::new(b.into())),
        }
    }

    /// The value if the expression is a literal.
    pub fn as_const(&self) -> Option<i64> {
        match self {
            Expr::Const(v) => Some(*v),
            _ => None,
        }
    }

    /// Evaluates the expression.
    ///
    /// The value comes from [`Self::try_eval`], which carries no error (an `Option` in
    /// registers instead of a `Result` holding a `String`, built through every level of the
    /// tree); only when that fails is the expression evaluated again to name the error. Both
    /// walk the tree in the same order with the same checked arithmetic, so they fail on the
    /// same expressions and agree on every value (tested).
    #[inline]
    pub fn eval<E: ExprEnv + ?Sized>(&self, env: &E) -> Result<i64, EvalError> {
        match self.try_eval(env) {
            Some(v) => Ok(v),
            None => self.eval_reporting(env),
        }
    }

    /// The value of the expression, or `None` where [`Self::eval`] gives an error (an unknown
    /// name, a division by zero, an overflow).
    pub fn try_eval<E: ExprEnv + ?Sized>(&self, env: &E) -> Option<i64> {
        match self {
            Expr::Const(v) => Some(*v),
            Expr::Var(v) => env.var(*v),
            Expr::Param(p) => env.param(*p),
            Expr::BlockIdx => env.block_idx(),
            Expr::BlockDim => env.block_dim(),
            Expr::SubBlockIdx => env.sub_block_idx(),
            Expr::Bin(op, a, b) => {
                // A literal or a variable operand (most of them) is read without a call.
                let x = match &**a {
                    Expr::Const(v) => *v,
                    Expr::Var(v) => env.var(*v)?,
                    a => a.try_eval(env)?,
                };
                let y = match &**b {
                    Expr::Const(v) => *v,
                    Expr::Var(v) => env.var(*v)?,
                    b => b.try_eval(env)?,
                };
                apply_checked(*op, x, y)
            }
            Expr::Select(c, a, b) => {
                if c.try_eval(env)? != 0 {
                    a.try_eval(env)
                } else {
                    b.try_eval(env)
                }
            }
        }
    }

    /// [`Self::eval`] building the error on failure (the tree walk of [`Self::try_eval`]).
    fn eval_reporting<E: ExprEnv + ?Sized>(&self, env: &E) -> Result<i64, EvalError> {
        let unknown = || EvalError::Unknown(self.to_string());
        match self {
            Expr::Const(v) => Ok(*v),
            Expr::Var(v) => env.var(*v).ok_or_else(unknown),
            Expr::Param(p) => env.param(*p).ok_or_else(unknown),
            Expr::BlockIdx => env.block_idx().ok_or_else(unknown),
            Expr::BlockDim => env.block_dim().ok_or_else(unknown),
            Expr::SubBlockIdx => env.sub_block_idx().ok_or_else(unknown),
            Expr::Bin(op, a, b) => {
                let (x, y) = (a.eval_reporting(env)?, b.eval_reporting(env)?);
                apply(*op, x, y, &|| self.to_string())
            }
            Expr::Select(c, a, b) => {
                if c.eval_reporting(env)? != 0 {
                    a.eval_reporting(env)
                } else {
                    b.eval_reporting(env)
                }
            }
        }
    }

    /// Visits every sub-expression, this one first.
    pub fn visit(&self, f: &mut dyn FnMut(&Expr)) {
        f(self);
        match self {
            Expr::Bin(_, a, b) => {
                a.visit(f);
                b.visit(f);
            }
            Expr::Select(c, a, b) => {
                c.visit(f);
                a.visit(f);
                b.visit(f);
            }
            _ => {}
        }
    }
}

/// `x op y` in checked arithmetic: `None` on overflow or a zero divisor (see [`apply`]).
#[inline]
fn apply_checked(op: BinOp, x: i64, y: i64) -> Option<i64> {
    Some(match op {
        BinOp::Add => x.checked_add(y)?,
        BinOp::Sub => x.checked_sub(y)?,
        BinOp::Mul => x.checked_mul(y)?,
        // `checked_*_euclid` is `None` for a zero divisor as well as for overflow.
        BinOp::Div => x.checked_div_euclid(y)?,
        BinOp::Rem => x.checked_rem_euclid(y)?,
        BinOp::Min => x.min(y),
        BinOp::Max => x.max(y),
        BinOp::Lt => (x < y) as i64,
        BinOp::Le => (x <= y) as i64,
        BinOp::Gt => (x > y) as i64,
        BinOp::Ge => (x >= y) as i64,
        BinOp::Eq => (x == y) as i64,
        BinOp::Ne => (x != y) as i64,
        BinOp::And => (x != 0 && y != 0) as i64,
        BinOp::Or => (x != 0 || y != 0) as i64,
    })
}

/// [`apply_checked`] with the cause of a failure: a zero divisor of `Div` or `Rem`, else an
/// overflow.
#[inline]
fn apply(op: BinOp, x: i64, y: i64, text: &dyn Fn() -> String) -> Result<i64, EvalError> {
    apply_checked(op, x, y).ok_or_else(|| match op {
        BinOp::Div | BinOp::Rem if y == 0 => EvalError::DivisionByZero(text()),
        _ => EvalError::Overflow(text()),
    })
}

impl From<i64> for Expr {
    fn from(v: i64) -> Self {
        Expr::Const(v)
    }
}
impl From<u64> for Expr {
    fn from(v: u64) -> Self {
        Expr::Const(v as i64)
    }
}
impl From<i32> for Expr {
    fn from(v: i32) -> Self {
        Expr::Const(v as i64)
    }
}
impl From<u32> for Expr {
    fn from(v: u32) -> Self {
        Expr::Const(v as i64)
    }
}
impl From<usize> for Expr {
    fn from(v: usize) -> Self {
        Expr::Const(v as i64)
    }
}
impl From<VarId> for Expr {
    fn from(v: VarId) -> Self {
        Expr::Var(v)
    }
}
impl From<&Expr> for Expr {
    fn from(e: &Expr) -> Self {
        e.clone()
    }
}

macro_rules! arith {
    ($tr:ident, $m:ident, $op:expr) => {
        impl<T: Into<Expr>> std::ops::$tr<T> for Expr {
            type Output = Expr;
            fn $m(self, rhs: T) -> Expr {
                Expr::bin($op, self, rhs)
            }
        }
        impl<T: Into<Expr>> std::ops::$tr<T> for VarId {
            type Output = Expr;
            fn $m(self, rhs: T) -> Expr {
                Expr::bin($op, Expr::Var(self), rhs)
            }
        }
    };
}
arith!(Add, add, BinOp::Add);
arith!(Sub, sub, BinOp::Sub);
arith!(Mul, mul, BinOp::Mul);
arith!(Rem, rem, BinOp::Rem);
arith!(Div, div, BinOp::Div);

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Const(v) => write!(f, "{v}"),
            Expr::Var(v) => write!(f, "v{}", v.0),
            Expr::Param(p) => write!(f, "arg{}", p.0),
            Expr::BlockIdx => f.write_str("block_idx"),
            Expr::BlockDim => f.write_str("block_num"),
            Expr::SubBlockIdx => f.write_str("subblock_id"),
            Expr::Bin(op, a, b) => match op.symbol() {
                Some(s) => write!(f, "({a} {s} {b})"),
                None => {
                    let name = if *op == BinOp::Min { "min" } else { "max" };
                    write!(f, "{name}({a}, {b})")
                }
            },
            Expr::Select(c, a, b) => write!(f, "({c} ? {a} : {b})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Variables 0..4 known (one of them i64::MIN), variable 4 unknown, parameter 0 known.
    struct Env;

    impl ExprEnv for Env {
        fn var(&self, v: VarId) -> Option<i64> {
            [Some(7), Some(-3), Some(0), Some(i64::MIN)]
                .get(v.0 as usize)
                .copied()
                .flatten()
        }
        fn param(&self, p: ParamId) -> Option<i64> {
            (p.0 == 0).then_some(128)
        }
        fn block_idx(&self) -> Option<i64> {
            Some(2)
        }
        fn block_dim(&self) -> Option<i64> {
            Some(8)
        }
        fn sub_block_idx(&self) -> Option<i64> {
            Some(1)
        }
    }

    const OPS: [BinOp; 15] = [
        BinOp::Add,
        BinOp::Sub,
        BinOp::Mul,
        BinOp::Div,
        BinOp::Rem,
        BinOp::Min,
        BinOp::Max,
        BinOp::Lt,
        BinOp::Le,
        BinOp::Gt,
        BinOp::Ge,
        BinOp::Eq,
        BinOp::Ne,
        BinOp::And,
        BinOp::Or,
    ];

    /// A pseudo-random tree of `depth` levels (built without the builder's constant folding).
    fn tree(seed: &mut u64, depth: u32) -> Expr {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let r = *seed >> 33;
        if depth == 0 || r.is_multiple_of(5) {
            return match r % 9 {
                0 => Expr::Const(0),
                1 => Expr::Const(i64::MAX),
                2 => Expr::Const(-1),
                3 => Expr::Const((r % 200) as i64 - 100),
                4 => Expr::Var(VarId((r / 9 % 5) as u32)),
                5 => Expr::Param(ParamId((r / 9 % 2) as u32)),
                6 => Expr::BlockIdx,
                7 => Expr::BlockDim,
                _ => Expr::SubBlockIdx,
            };
        }
        if r.is_multiple_of(7) {
            let c = tree(seed, depth - 1);
            let a = tree(seed, depth - 1);
            let b = tree(seed, depth - 1);
            return Expr::Select(Box::new(c), Box::new(a), Box::new(b));
        }
        let op = OPS[(r / 7) as usize % OPS.len()];
        let a = tree(seed, depth - 1);
        let b = tree(seed, depth - 1);
        Expr::Bin(op, Box::new(a), Box::new(b))
    }

    #[test]
    fn the_fast_evaluation_agrees_with_the_reporting_one_on_values_and_failures() {
        let mut seed = 22;
        let (mut values, mut failures) = (0, 0);
        for _ in 0..20_000 {
            let e = tree(&mut seed, 5);
            let slow = e.eval_reporting(&Env);
            assert_eq!(e.try_eval(&Env), slow.clone().ok(), "{e}");
            assert_eq!(e.eval(&Env), slow, "{e}");
            match slow {
                Ok(_) => values += 1,
                Err(_) => failures += 1,
            }
        }
        // Both outcomes are exercised many times.
        assert!(
            values > 1000 && failures > 1000,
            "{values} values, {failures} failures"
        );
    }

    #[test]
    fn evaluation_errors_name_their_cause() {
        let div0 = Expr::Bin(
            BinOp::Div,
            Box::new(Expr::Var(VarId(0))),
            Box::new(Expr::Var(VarId(2))),
        );
        assert!(matches!(div0.eval(&Env), Err(EvalError::DivisionByZero(_))));
        let ovf = Expr::Bin(
            BinOp::Rem,
            Box::new(Expr::Var(VarId(3))),
            Box::new(Expr::Const(-1)),
        );
        assert!(matches!(ovf.eval(&Env), Err(EvalError::Overflow(_))));
        let unknown = Expr::Var(VarId(4)) + 1;
        assert_eq!(unknown.eval(&Env), Err(EvalError::Unknown("v4".into())));
        assert_eq!(
            (Expr::Param(ParamId(0)) * Expr::BlockDim).eval(&Env),
            Ok(1024)
        );
    }
}
