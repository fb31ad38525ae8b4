//! The L0C stride of a Fixpipe read out of an Acc tile against the stride the matmul wrote
//! (ASCEND950.md §12, A5-FACTS §1).
//!
//! A5's `TMATMUL` lays the Acc out in NZ column blocks of `ceil16(m)` rows, `m` being the Left
//! tile's valid rows (`npu/a5/TMatmul.hpp:176`, `m = aMatrix.GetValidRow()`). The Fixpipe reads
//! the Acc at a source stride of its own: `TMOV` (`npu/a5/TMov.hpp:123-131`,
//! `GetTmovAccSrcStride`, used by the Acc -> UB path at :228 and Acc -> L1 at :170) takes the
//! Acc's *runtime* valid rows rounded up to 16 when its valid rows are dynamic (or equal the
//! static rows), its static rows when they are static and fewer, and the static rows when the
//! destination is NZ (`validRow = SrcTileData::Rows`, :206); `TEXTRACT` and `TSTORE` out of an
//! Acc take the static rows (the IR has no compact mode). When the two strides differ the
//! Fixpipe reads column blocks 1.. at the wrong place, and no host model shows it.
//!
//! The check runs over each section in program order (branch-insensitive: the last
//! `set_validshape` before an op is the one that counts), records the rows of every matmul into
//! each Acc tile, and compares every Fixpipe read of that tile with each of them. Two
//! strides are equal when both are constants with the same multiple of 16, or when they are
//! the same expression; anything else cannot be proven and is an error.

use super::{Ctx, Rule};
use crate::ir::{
    CoreKind, Expr, Layout, LoadStoreOp, MatmulOp, MemSpace, MoveOp, Op, OpLoc, TileId, ValidDim,
};
use std::collections::HashMap;

/// The rows that set an L0C stride (the stride is these rounded up to 16).
#[derive(Debug, Clone, PartialEq)]
enum Rows {
    /// Known before running.
    Const(u64),
    /// A runtime expression (the tile's last `set_validshape` rows).
    Dyn(Expr),
    /// A dynamic valid shape no `set_validshape` set before this op (another rule's concern).
    Unset,
}

impl Rows {
    /// True when the two strides are provably the same.
    fn same_stride(&self, other: &Rows) -> bool {
        match (self, other) {
            (Rows::Const(a), Rows::Const(b)) => a.div_ceil(16) == b.div_ceil(16),
            (Rows::Dyn(a), Rows::Dyn(b)) => a == b,
            // Nothing to compare against: the valid-shape rules and the simulator report it.
            (Rows::Unset, _) | (_, Rows::Unset) => true,
            _ => false,
        }
    }
}

impl Rows {
    /// The rows and their stride in words; a variable or a scalar argument by its name (`mv`,
    /// not `v2`).
    fn describe(&self, kernel: &crate::ir::Kernel) -> String {
        match self {
            Rows::Const(r) => format!("{} rows (stride {})", r, r.div_ceil(16) * 16),
            Rows::Dyn(e) => {
                let name = match e {
                    Expr::Var(v) => kernel.vars.get(v.0 as usize).map(|d| d.name.clone()),
                    Expr::Param(p) => kernel.try_param(*p).map(|d| d.name.clone()),
                    _ => None,
                };
                let name = name.unwrap_or_else(|| e.to_string());
                format!("`{name}` rows (stride ceil16 of it, known only at run time)")
            }
            Rows::Unset => "unset rows".to_string(),
        }
    }
}

/// A Fixpipe read of an Acc tile, found in program order.
struct Read {
    loc: OpLoc,
    name: &'static str,
    acc: TileId,
    rows: Rows,
}

/// Checks every Fixpipe read of an Acc tile against the matmuls that wrote it.
pub(super) fn check(cx: &mut Ctx<'_>) {
    let kernel = cx.kernel;
    for section in [CoreKind::Cube, CoreKind::Vector] {
        let mut valid: HashMap<TileId, Expr> = HashMap::new();
        let mut written: HashMap<TileId, Vec<Rows>> = HashMap::new();
        let mut reads: Vec<Read> = Vec::new();
        for (loc, op) in kernel.ops() {
            if loc.section != section {
                continue;
            }
            let rows_of = |id: TileId, valid: &HashMap<TileId, Expr>| -> Option<Rows> {
                let ty = &kernel.try_tile(id)?.ty;
                Some(match ty.valid_rows {
                    ValidDim::Static(r) => Rows::Const(r),
                    ValidDim::Dynamic => match valid.get(&id) {
                        Some(e) => match e.as_const() {
                            Some(c) if c >= 0 => Rows::Const(c as u64),
                            _ => Rows::Dyn(e.clone()),
                        },
                        None => Rows::Unset,
                    },
                })
            };
            match op {
                Op::Vector(v) => {
                    if let Some((tile, rows, _)) = v.valid_shape_set() {
                        valid.insert(tile.tile, rows.clone());
                    }
                }
                Op::Matmul(MatmulOp::Matmul { dst, a, .. }) => {
                    if let Some(r) = rows_of(a.tile, &valid) {
                        let w = written.entry(dst.tile).or_default();
                        if !w.contains(&r) {
                            w.push(r);
                        }
                    }
                }
                Op::Move(MoveOp::Move {
                    dst, src, offset, ..
                }) => {
                    let (Some(s), Some(d)) = (kernel.try_tile(src.tile), kernel.try_tile(dst.tile))
                    else {
                        continue;
                    };
                    if s.ty.space != MemSpace::Acc {
                        continue;
                    }
                    // TMOV reads by the runtime valid rows unless the destination is NZ;
                    // TEXTRACT (an offset) by the static rows.
                    let by_valid = offset.is_none() && d.ty.layout != Layout::NZ;
                    let rows = match (by_valid, s.ty.valid_rows) {
                        (true, ValidDim::Dynamic) => rows_of(src.tile, &valid),
                        (true, ValidDim::Static(v)) if v == s.ty.rows => Some(Rows::Const(v)),
                        _ => Some(Rows::Const(s.ty.rows)),
                    };
                    if let Some(rows) = rows {
                        let name = if offset.is_some() { "TEXTRACT" } else { "TMOV" };
                        reads.push(Read {
                            loc,
                            name,
                            acc: src.tile,
                            rows,
                        });
                    }
                }
                Op::LoadStore(LoadStoreOp::Store { src, .. }) => {
                    let Some(s) = kernel.try_tile(src.tile) else {
                        continue;
                    };
                    if s.ty.space == MemSpace::Acc {
                        reads.push(Read {
                            loc,
                            name: "TSTORE",
                            acc: src.tile,
                            rows: Rows::Const(s.ty.rows),
                        });
                    }
                }
                Op::LoadStore(LoadStoreOp::Load { .. })
                | Op::Gather(_)
                | Op::Sort(_)
                | Op::Scalar(_)
                | Op::Sync(_) => {}
            }
        }
        for read in reads {
            let Some(ws) = written.get(&read.acc) else {
                continue;
            };
            for w in ws {
                if read.rows.same_stride(w) {
                    continue;
                }
                cx.loc = Some(read.loc);
                let acc = kernel.try_tile(read.acc).map_or("?", |d| d.name.as_str());
                cx.subject = read.name.to_lowercase();
                cx.error(
                    Rule::AccStride,
                    format!(
                        "{} of Acc `{acc}` reads L0C at the stride of {}, but a matmul into it wrote column blocks of {} (the Left tile's valid rows rounded up to 16): keep the Acc's valid rows equal to the rows the matmul wrote, or give the matmul the Acc's valid rows",
                        read.name,
                        read.rows.describe(kernel),
                        w.describe(kernel)
                    ),
                );
            }
        }
    }
}
