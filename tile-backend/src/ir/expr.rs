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
    pub fn eval<E: ExprEnv + ?Sized>(&self, env: &E) -> Result<i64, EvalError> {
        let unknown = || EvalError::Unknown(self.to_string());
        match self {
            Expr::Const(v) => Ok(*v),
            Expr::Var(v) => env.var(*v).ok_or_else(unknown),
            Expr::Param(p) => env.param(*p).ok_or_else(unknown),
            Expr::BlockIdx => env.block_idx().ok_or_else(unknown),
            Expr::BlockDim => env.block_dim().ok_or_else(unknown),
            Expr::SubBlockIdx => env.sub_block_idx().ok_or_else(unknown),
            Expr::Bin(op, a, b) => {
                let (x, y) = (a.eval(env)?, b.eval(env)?);
                apply(*op, x, y, &|| self.to_string())
            }
            Expr::Select(c, a, b) => {
                if c.eval(env)? != 0 {
                    a.eval(env)
                } else {
                    b.eval(env)
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

#[inline]
fn apply(op: BinOp, x: i64, y: i64, text: &dyn Fn() -> String) -> Result<i64, EvalError> {
    let ovf = || EvalError::Overflow(text());
    Ok(match op {
        BinOp::Add => x.checked_add(y).ok_or_else(ovf)?,
        BinOp::Sub => x.checked_sub(y).ok_or_else(ovf)?,
        BinOp::Mul => x.checked_mul(y).ok_or_else(ovf)?,
        BinOp::Div => {
            if y == 0 {
                return Err(EvalError::DivisionByZero(text()));
            }
            x.checked_div_euclid(y).ok_or_else(ovf)?
        }
        BinOp::Rem => {
            if y == 0 {
                return Err(EvalError::DivisionByZero(text()));
            }
            x.checked_rem_euclid(y).ok_or_else(ovf)?
        }
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
