//! Scalar code: expressions, `let`, `for`, `if`, and GM scalar reads and writes.
//!
//! Expressions are i64 (`int64_t`). The IR's `/` and `%` are Euclidean; C++'s truncate. Where
//! the dividend is known non-negative and the divisor positive (from lower bounds: constants,
//! block ids, loop indices counting up from a known start, values read from tensors with a
//! declared range, and sums, products, quotients of those) the two agree and plain `/` `%` are
//! written; elsewhere the emitted `div_euclid` / `rem_euclid` helpers keep the IR's meaning.

use super::{CodegenError, Emitter, Helper};
use crate::ir::{BinOp, Expr, ParamKind, ScalarOp, Stmt};

/// C++ precedence levels (higher binds tighter).
fn prec(op: BinOp) -> u8 {
    match op {
        BinOp::Or => 1,
        BinOp::And => 2,
        BinOp::Eq | BinOp::Ne => 3,
        BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => 4,
        BinOp::Add | BinOp::Sub => 5,
        BinOp::Mul | BinOp::Div | BinOp::Rem => 6,
        BinOp::Min | BinOp::Max => 9,
    }
}

impl Emitter<'_> {
    /// An expression as C++.
    pub(crate) fn expr(&mut self, e: &Expr) -> String {
        self.expr_prec(e, 0)
    }

    /// True if `e` is never negative.
    pub(crate) fn nonneg(&self, e: &Expr) -> bool {
        self.lower_bound(e).is_some_and(|v| v >= 0)
    }

    /// A lower bound of `e`'s value, when one is known.
    pub(crate) fn lower_bound(&self, e: &Expr) -> Option<i64> {
        match e {
            Expr::Const(v) => Some(*v),
            Expr::Var(v) => self.var_lb.get(v.0 as usize).copied().flatten(),
            Expr::Param(p) => self
                .k
                .try_param(*p)
                .and_then(|p| p.range.as_ref())
                .map(|r| r.min.ceil() as i64),
            Expr::BlockIdx | Expr::SubBlockIdx => Some(0),
            Expr::BlockDim => Some(1),
            Expr::Bin(op, a, b) => {
                let (la, lb) = (self.lower_bound(a), self.lower_bound(b));
                match op {
                    BinOp::Add => la?.checked_add(lb?),
                    BinOp::Sub => la?.checked_sub(b.as_const()?),
                    BinOp::Mul => match (la?, lb?) {
                        (x, y) if x >= 0 && y >= 0 => x.checked_mul(y),
                        _ => None,
                    },
                    BinOp::Div => match (la?, lb?) {
                        (x, y) if x >= 0 && y >= 1 => Some(0),
                        _ => None,
                    },
                    // The Euclidean remainder is never negative.
                    BinOp::Rem => Some(0),
                    BinOp::Min => Some(la?.min(lb?)),
                    BinOp::Max => match (la, lb) {
                        (Some(x), Some(y)) => Some(x.max(y)),
                        (x, y) => x.or(y),
                    },
                    _ => Some(0),
                }
            }
            Expr::Select(_, a, b) => Some(self.lower_bound(a)?.min(self.lower_bound(b)?)),
        }
    }

    /// An expression as C++, parenthesised if its operator binds looser than `min_prec`.
    pub(crate) fn expr_prec(&mut self, e: &Expr, min_prec: u8) -> String {
        let (text, p) = match e {
            Expr::Const(v) => {
                if *v < 0 {
                    (
                        if *v == i64::MIN {
                            "INT64_MIN".to_string()
                        } else {
                            v.to_string()
                        },
                        7,
                    )
                } else {
                    (v.to_string(), 10)
                }
            }
            Expr::Var(v) => (
                self.var_names
                    .get(v.0 as usize)
                    .cloned()
                    .unwrap_or_else(|| format!("v{}", v.0)),
                10,
            ),
            Expr::Param(p) => (
                self.param_names
                    .get(p.0 as usize)
                    .cloned()
                    .unwrap_or_else(|| format!("arg{}", p.0)),
                10,
            ),
            Expr::BlockIdx => {
                self.uses("block_idx");
                ("block_idx".into(), 10)
            }
            Expr::BlockDim => {
                self.uses("block_num");
                ("block_num".into(), 10)
            }
            Expr::SubBlockIdx => {
                self.uses("sub_block_idx");
                ("sub_block_idx".into(), 10)
            }
            Expr::Bin(op, a, b) => {
                let exact = self.nonneg(a) && self.lower_bound(b).is_some_and(|v| v >= 1);
                match op {
                    BinOp::Min | BinOp::Max => {
                        let (h, f) = if *op == BinOp::Min {
                            (Helper::Min, "min64")
                        } else {
                            (Helper::Max, "max64")
                        };
                        self.helper(h);
                        let (x, y) = (self.expr(a), self.expr(b));
                        (format!("{f}({x}, {y})"), 10)
                    }
                    BinOp::Div | BinOp::Rem if !exact => {
                        let (h, f) = if *op == BinOp::Div {
                            (Helper::DivEuclid, "div_euclid")
                        } else {
                            (Helper::RemEuclid, "rem_euclid")
                        };
                        self.helper(h);
                        let (x, y) = (self.expr(a), self.expr(b));
                        (format!("{f}({x}, {y})"), 10)
                    }
                    _ => {
                        let p = prec(*op);
                        let sym = op.symbol().unwrap_or("?");
                        let x = self.expr_prec(a, p);
                        let y = self.expr_prec(b, p + 1);
                        (format!("{x} {sym} {y}"), p)
                    }
                }
            }
            Expr::Select(c, a, b) => {
                let (c, a, b) = (
                    self.expr_prec(c, 1),
                    self.expr_prec(a, 1),
                    self.expr_prec(b, 1),
                );
                (format!("{c} ? {a} : {b}"), 0)
            }
        };
        if p < min_prec {
            format!("({text})")
        } else {
            text
        }
    }
}

/// `let`, `for` and `if`.
pub(super) fn control(e: &mut Emitter<'_>, s: &Stmt) -> Result<(), CodegenError> {
    match s {
        Stmt::Let { var, value } => {
            let v = e.var_name(*var)?;
            let lb = e.lower_bound(value);
            let value = e.expr(value);
            e.line(format!("const int64_t {v} = {value};"));
            e.set_lower_bound(*var, lb);
        }
        Stmt::For {
            var,
            start,
            end,
            step,
            body,
        } => {
            if *step <= 0 {
                return Err(CodegenError::Unsupported {
                    location: format!("{} loop `{}`", e.section, e.var_name(*var)?),
                    what: "for".into(),
                    reason: format!("step {step} is not positive"),
                });
            }
            let v = e.var_name(*var)?;
            let lb = e.lower_bound(start);
            let (s, end) = (e.expr(start), e.expr_prec(end, 5));
            let inc = if *step == 1 {
                format!("++{v}")
            } else {
                format!("{v} += {step}")
            };
            e.set_lower_bound(*var, lb);
            e.open(format!("for (int64_t {v} = {s}; {v} < {end}; {inc}) {{"));
            e.stmts(body)?;
            e.close("}");
        }
        Stmt::If {
            cond,
            then_body,
            else_body,
        } => {
            let c = e.expr(cond);
            e.open(format!("if ({c}) {{"));
            e.stmts(then_body)?;
            let mut else_body = else_body;
            loop {
                match else_body.as_slice() {
                    [] => {
                        e.close("}");
                        break;
                    }
                    [Stmt::If {
                        cond,
                        then_body,
                        else_body: rest,
                    }] => {
                        let c = e.expr(cond);
                        e.close(format!("}} else if ({c}) {{"));
                        e.indent += 1;
                        e.stmts(then_body)?;
                        else_body = rest;
                    }
                    _ => {
                        e.close("} else {");
                        e.indent += 1;
                        e.stmts(else_body)?;
                        e.close("}");
                        break;
                    }
                }
            }
        }
        Stmt::Op(_) => {}
    }
    Ok(())
}

/// `read_scalar` / `write_scalar`: plain loads and stores through the core's data cache;
/// `read_tile_scalar`: PTO's `Tile::GetValue`, the scalar unit reading one UB element.
pub(super) fn emit(e: &mut Emitter<'_>, op: &ScalarOp) -> Result<(), CodegenError> {
    match op {
        ScalarOp::ReadScalar { var, tensor, index } => {
            let (name, range_min) = tensor_name(e, *tensor)?;
            let v = e.var_name(*var)?;
            let i = e.expr(index);
            e.line(format!(
                "const int64_t {v} = static_cast<int64_t>({name}[{i}]);  // GM scalar read"
            ));
            e.set_lower_bound(*var, range_min);
        }
        ScalarOp::ReadTileScalar { var, tile, index } => {
            let t = e.tile(tile)?;
            let v = e.var_name(*var)?;
            let i = e.expr(index);
            e.line(format!(
                "const int64_t {v} = static_cast<int64_t>({t}.GetValue(static_cast<uint32_t>({i})));  // UB scalar read"
            ));
        }
        ScalarOp::WriteScalar {
            tensor,
            index,
            value,
        } => {
            let (name, _) = tensor_name(e, *tensor)?;
            let dtype = match e.k.try_param(*tensor).map(|p| &p.kind) {
                Some(ParamKind::Tensor { dtype, .. }) => *dtype,
                _ => return Err(e.malformed(format!("argument {} is not a tensor", tensor.0))),
            };
            let (i, v) = (e.expr(index), e.expr(value));
            e.line(format!(
                "{name}[{i}] = static_cast<{}>({v});  // GM scalar write: reaches GM at kernel end",
                super::ctype(dtype)
            ));
        }
    }
    Ok(())
}

/// A tensor argument's C++ name and the lower end of its declared range.
fn tensor_name(
    e: &Emitter<'_>,
    p: crate::ir::ParamId,
) -> Result<(String, Option<i64>), CodegenError> {
    let param =
        e.k.try_param(p)
            .ok_or_else(|| e.malformed(format!("argument {} is not declared", p.0)))?;
    if !matches!(param.kind, ParamKind::Tensor { .. }) {
        return Err(e.malformed(format!("`{}` is a scalar, not a GM tensor", param.name)));
    }
    let min = param.range.as_ref().map(|r| r.min.ceil() as i64);
    Ok((e.param_names[p.0 as usize].clone(), min))
}

impl Emitter<'_> {
    pub(crate) fn var_name(&self, v: crate::ir::VarId) -> Result<String, CodegenError> {
        self.var_names
            .get(v.0 as usize)
            .cloned()
            .ok_or_else(|| self.malformed(format!("variable v{} is not declared", v.0)))
    }

    pub(crate) fn set_lower_bound(&mut self, v: crate::ir::VarId, lb: Option<i64>) {
        if let Some(slot) = self.var_lb.get_mut(v.0 as usize) {
            *slot = lb;
        }
    }
}
