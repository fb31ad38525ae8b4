//! The sort instructions' A5 rules (PTO-ISA `include/pto/npu/a5/TSort32.hpp`, `TMrgSort.hpp`,
//! `docs/isa/TSORT32.md`, `TMRGSORT.md`; A5-FACTS §6): Vec tiles, row-major, f32/f16 values
//! with u32 indices, whole 32-element blocks or the tail form's scratch, TMRGSORT's one-row
//! tiles, block lengths, repeats, list counts and UB budget.
//!
//! The shape rules are functions of numbers ([`Sort32Dims`], [`mrgsort_rules`],
//! [`MrgSortListDims`]): the verifier runs them on static valid shapes, the simulator on the
//! runtime ones, so a dynamic shape meets the same rule with the same message.

use super::{static_dim, Ctx, Rule};
use crate::ir::{pair_cols, DType, Layout, MemSpace, SortOp, TileDecl, TileRef};

/// VBS32's block: 32 elements.
pub(crate) const BLOCK: u64 = 32;
/// VBS32 and `vmrgsort4` take a repeat of at most 255 (`REPEAT_MAX`, `common/constants.hpp`).
pub(crate) const REPEAT_MAX: u64 = 255;
/// A5 TSORT32's tail form copies the whole row into `tmp` when the row is at most this many
/// bytes, else the last block only (`MAX_UB_TMP = 32 * 255`, `npu/a5/TSort32.hpp`).
pub(crate) const TAIL_WHOLE_ROW_BYTES: u64 = 32 * 255;
/// `vmrgsort4` counts each list's pairs in a 16-bit field (`VMS4_SR`, `npu/a5/TMrgSort.hpp`).
pub(crate) const MAX_LIST_PAIRS: u64 = 0xffff;
/// TMRGSORT's single-list form: block lengths are multiples of this (`docs/isa/TMRGSORT.md`).
pub(crate) const MRG_BLOCK_MULTIPLE: u64 = 64;

/// A rule broken, with its message.
pub(crate) type Broken = (Rule, String);

/// The numbers TSORT32's shape rules read (valid shapes static, or the runtime ones).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sort32Dims {
    /// Element size of the values (4 or 2).
    pub es: u64,
    /// Tile columns per pair (2 or 4).
    pub pc: u64,
    /// Valid rows of `src` and of `dst` (A5 sorts `dst`'s valid rows).
    pub src_rows: u64,
    pub dst_rows: u64,
    /// Valid columns of `src`.
    pub cols: u64,
    /// Allocated columns of `dst`.
    pub dst_cols: u64,
    /// Valid rows and columns of `idx`, and its allocated columns.
    pub idx_rows: u64,
    pub idx_cols: u64,
    pub idx_alloc_cols: u64,
    /// Allocated columns of `tmp` (the tail form), `None` for the 3-argument form.
    pub tmp_cols: Option<u64>,
}

impl Sort32Dims {
    /// Blocks sorted per row: `ceil(C / 32)` (the tail form pads the last).
    pub fn blocks(&self) -> u64 {
        self.cols.div_ceil(BLOCK)
    }

    /// Every shape rule this call breaks.
    pub fn broken(&self) -> Vec<Broken> {
        let mut out = vec![];
        let (c, blocks) = (self.cols, self.blocks());
        if self.dst_rows != self.src_rows {
            out.push((
                Rule::SortShape,
                format!(
                    "sort32 sorts dst's {} valid rows but src has {} (they must be equal)",
                    self.dst_rows, self.src_rows
                ),
            ));
        }
        if self.idx_rows != 1 && self.idx_rows != self.src_rows {
            out.push((
                Rule::SortShape,
                format!(
                    "sort32's idx has {} valid rows: one row for every row, or one per row ({})",
                    self.idx_rows, self.src_rows
                ),
            ));
        }
        if self.idx_cols < c {
            out.push((
                Rule::SortShape,
                format!(
                    "sort32's idx has {} valid columns, src {c}: an index per value",
                    self.idx_cols
                ),
            ));
        }
        if self.dst_cols < blocks * BLOCK * self.pc {
            out.push((
                Rule::SortShape,
                format!(
                    "sort32 writes {} pairs per row ({} blocks of 32), {} columns of dst; dst has {}",
                    blocks * BLOCK,
                    blocks,
                    blocks * BLOCK * self.pc,
                    self.dst_cols
                ),
            ));
        }
        if c.is_multiple_of(BLOCK) {
            return out;
        }
        // The tail form.
        if self.idx_alloc_cols < blocks * BLOCK {
            out.push((
                Rule::SortShape,
                format!(
                    "sort32's padded last block reads {} indices per row; idx has {} columns",
                    blocks * BLOCK,
                    self.idx_alloc_cols
                ),
            ));
        }
        let row_bytes = c * self.es;
        let Some(tmp_cols) = self.tmp_cols else {
            out.push((
                Rule::SortTmp,
                format!(
                    "sort32 of {c} valid columns (not a multiple of 32) needs the tail form's tmp tile (TSORT32's 4-argument form)"
                ),
            ));
            return out;
        };
        let need = if row_bytes <= TAIL_WHOLE_ROW_BYTES {
            blocks * BLOCK
        } else {
            BLOCK
        };
        if tmp_cols < need {
            out.push((
                Rule::SortTmp,
                format!(
                    "sort32's tmp holds {tmp_cols} columns; a {c}-column row ({row_bytes} bytes, {} 8160) needs {need}",
                    if row_bytes <= TAIL_WHOLE_ROW_BYTES { "at most" } else { "over" }
                ),
            ));
        }
        if row_bytes > TAIL_WHOLE_ROW_BYTES && blocks.is_multiple_of(REPEAT_MAX) {
            out.push((
                Rule::SortRepeat,
                format!(
                    "sort32 of {c} columns: A5's long-row tail path sorts `ceil(C / 32) % 255 - 1` blocks before the tail, which underflows at {blocks} blocks (a multiple of 255)"
                ),
            ));
        }
        out
    }
}

/// TMRGSORT's single-list rules: `src_cols` valid columns, `dst_cols` allocated in dst.
pub(crate) fn mrgsort_rules(block_len: u64, src_cols: u64, dst_cols: u64) -> Vec<Broken> {
    let mut out = vec![];
    if block_len == 0 || !block_len.is_multiple_of(MRG_BLOCK_MULTIPLE) {
        out.push((
            Rule::SortRepeat,
            format!("mrgsort's block length is {block_len} elements; it must be a positive multiple of 64"),
        ));
        return out;
    }
    let group = 4 * block_len;
    if !src_cols.is_multiple_of(group) {
        out.push((
            Rule::SortRepeat,
            format!("mrgsort's src has {src_cols} valid columns, not a multiple of 4 x block length ({group})"),
        ));
    }
    let repeat = src_cols / group;
    if !(1..=REPEAT_MAX).contains(&repeat) {
        out.push((
            Rule::SortRepeat,
            format!("mrgsort's repeat is {src_cols} / {group} = {repeat}; it must be in 1..=255"),
        ));
    }
    if dst_cols < src_cols {
        out.push((
            Rule::SortShape,
            format!("mrgsort writes {src_cols} columns; dst has {dst_cols}"),
        ));
    }
    out
}

/// The numbers TMRGSORT's multi-list rules read.
#[derive(Debug, Clone)]
pub(crate) struct MrgSortListDims {
    /// Tile columns per pair.
    pub pc: u64,
    /// Each list's valid columns (inline up to the 4 lists a merge takes: the simulator checks
    /// these per op without allocating).
    pub list_cols: smallvec::SmallVec<[u64; 4]>,
    /// Each list's allocated columns.
    pub list_alloc_cols: smallvec::SmallVec<[u64; 4]>,
    /// Allocated columns of tmp.
    pub tmp_cols: u64,
    /// Valid columns of dst (what is copied out of tmp).
    pub dst_cols: u64,
}

impl MrgSortListDims {
    /// Every rule this call breaks.
    pub fn broken(&self) -> Vec<Broken> {
        let mut out = vec![];
        let n = self.list_cols.len();
        if !(2..=4).contains(&n) {
            out.push((
                Rule::SortLists,
                format!("mrgsort_lists merges 2 to 4 lists, got {n}"),
            ));
        }
        for (i, &c) in self.list_cols.iter().enumerate() {
            if !c.is_multiple_of(self.pc) {
                out.push((
                    Rule::SortLists,
                    format!(
                        "list {i} has {c} valid columns, not a whole number of {}-column pairs",
                        self.pc
                    ),
                ));
            }
            if c / self.pc > MAX_LIST_PAIRS {
                out.push((
                    Rule::SortLists,
                    format!(
                        "list {i} holds {} pairs; vmrgsort4 counts at most 65535 per list",
                        c / self.pc
                    ),
                ));
            }
        }
        let sum: u64 = self.list_alloc_cols.iter().sum();
        if self.tmp_cols < sum {
            out.push((
                Rule::SortTmp,
                format!(
                    "mrgsort_lists' tmp has {} columns; it must hold the lists' {sum} (the sum of their columns)",
                    self.tmp_cols
                ),
            ));
        }
        if self.dst_cols > self.tmp_cols {
            out.push((
                Rule::SortTmp,
                format!(
                    "mrgsort_lists copies dst's {} valid columns out of tmp's {}",
                    self.dst_cols, self.tmp_cols
                ),
            ));
        }
        out
    }
}

pub(super) fn check(cx: &mut Ctx<'_>, op: &SortOp) {
    let tiles: Vec<&TileRef> = op
        .tile_reads()
        .into_iter()
        .chain(op.tile_writes())
        .collect();
    let mut decls = vec![];
    for r in tiles {
        if let Some(d) = cx.tile(r) {
            decls.push(d);
        }
    }
    for d in &decls {
        if d.ty.space != MemSpace::Vec {
            cx.error(
                Rule::SortSpace,
                format!(
                    "{} tile `{}` is in {}; the sort instructions work in UB (Vec) only",
                    op.name(),
                    d.name,
                    d.ty.space
                ),
            );
        }
        if d.ty.layout != Layout::ND {
            cx.error(
                Rule::SortLayout,
                format!(
                    "{} tile `{}` is {}; the sort instructions take row-major (ND) tiles only",
                    op.name(),
                    d.name,
                    d.ty.layout
                ),
            );
        }
    }
    match op {
        SortOp::Sort32 { dst, src, idx, tmp } => sort32(cx, dst, src, idx, tmp.as_ref()),
        SortOp::MrgSort {
            dst,
            src,
            block_len,
        } => {
            let (Some(d), Some(s)) = (decl(cx, dst), decl(cx, src)) else {
                return;
            };
            let Some(_) = values(cx, op.name(), &[d, s]) else {
                return;
            };
            one_row(cx, op.name(), &[d, s]);
            if let Some(c) = static_dim(s.ty.valid_cols) {
                report(cx, mrgsort_rules(*block_len, c, d.ty.cols));
            }
            ub_budget(cx, op.name(), d.ty.cols * d.ty.dtype.size_bytes(), s);
        }
        SortOp::MrgSortLists { dst, tmp, srcs } => {
            let (Some(d), Some(t)) = (decl(cx, dst), decl(cx, tmp)) else {
                return;
            };
            let lists: Vec<&TileDecl> = srcs.iter().filter_map(|s| decl(cx, s)).collect();
            if lists.len() != srcs.len() {
                return;
            }
            let mut all = vec![d, t];
            all.extend(lists.iter().copied());
            let Some(pc) = values(cx, op.name(), &all) else {
                return;
            };
            one_row(cx, op.name(), &all);
            let list_cols: Option<smallvec::SmallVec<[u64; 4]>> =
                lists.iter().map(|l| static_dim(l.ty.valid_cols)).collect();
            if let (Some(list_cols), Some(dst_cols)) = (list_cols, static_dim(d.ty.valid_cols)) {
                let dims = MrgSortListDims {
                    pc,
                    list_cols,
                    list_alloc_cols: lists.iter().map(|l| l.ty.cols).collect(),
                    tmp_cols: t.ty.cols,
                    dst_cols,
                };
                report(cx, dims.broken());
            } else if !(2..=4).contains(&srcs.len()) {
                cx.error(
                    Rule::SortLists,
                    format!("mrgsort_lists merges 2 to 4 lists, got {}", srcs.len()),
                );
            }
            if let Some(first) = lists.first() {
                ub_budget(cx, op.name(), t.ty.cols * t.ty.dtype.size_bytes(), first);
            }
        }
    }
}

fn decl<'a>(cx: &mut Ctx<'a>, r: &TileRef) -> Option<&'a TileDecl> {
    cx.kernel.try_tile(r.tile)
}

fn report(cx: &mut Ctx<'_>, broken: Vec<Broken>) {
    for (rule, msg) in broken {
        cx.error(rule, msg);
    }
}

/// The value tiles share one dtype, f32 or f16; returns its columns per pair.
fn values(cx: &mut Ctx<'_>, name: &str, tiles: &[&TileDecl]) -> Option<u64> {
    let first = tiles.first()?;
    let dtype = first.ty.dtype;
    let mut ok = true;
    for t in tiles {
        if t.ty.dtype != dtype {
            cx.error(
                Rule::SortDtype,
                format!(
                    "{name}: `{}` is {} but `{}` is {dtype}; the value tiles share one dtype",
                    t.name, t.ty.dtype, first.name
                ),
            );
            ok = false;
        }
    }
    let pc = pair_cols(dtype);
    if pc.is_none() {
        cx.error(
            Rule::SortDtype,
            format!(
                "{name} sorts f32 or f16 values, `{}` is {dtype}",
                first.name
            ),
        );
    }
    if ok {
        pc
    } else {
        None
    }
}

/// TMRGSORT's tiles are one row each (`TMrgSort.hpp` CheckStatic: `Rows == 1`).
fn one_row(cx: &mut Ctx<'_>, name: &str, tiles: &[&TileDecl]) {
    for t in tiles {
        if t.ty.rows != 1 {
            cx.error(
                Rule::SortShape,
                format!(
                    "{name}: `{}` has {} rows; TMRGSORT's tiles are one row",
                    t.name, t.ty.rows
                ),
            );
        }
    }
}

/// A5 TMRGSORT's `CheckOverMemory`: the output (tmp, or dst in the single-list form) and the
/// first source fit in UB together (`PTO_UBUF_SIZE_BYTES`; our UB capacity).
fn ub_budget(cx: &mut Ctx<'_>, name: &str, out_bytes: u64, first: &TileDecl) {
    let ub = cx
        .arch
        .space(MemSpace::Vec)
        .map_or(u64::MAX, |s| s.capacity);
    let src = first.ty.cols * first.ty.dtype.size_bytes();
    if out_bytes + src > ub {
        cx.error(
            Rule::SortUb,
            format!(
                "{name}: its output ({out_bytes} bytes) and `{}` ({src} bytes) exceed UB ({ub} bytes) together",
                first.name
            ),
        );
    }
}

fn sort32(cx: &mut Ctx<'_>, dst: &TileRef, src: &TileRef, idx: &TileRef, tmp: Option<&TileRef>) {
    let (Some(d), Some(s), Some(i)) = (decl(cx, dst), decl(cx, src), decl(cx, idx)) else {
        return;
    };
    let t = match tmp {
        Some(r) => match decl(cx, r) {
            Some(t) => Some(t),
            None => return,
        },
        None => None,
    };
    if i.ty.dtype != DType::U32 {
        cx.error(
            Rule::SortDtype,
            format!(
                "sort32's idx `{}` is {}; indices are u32",
                i.name, i.ty.dtype
            ),
        );
    }
    let mut vals = vec![d, s];
    vals.extend(t);
    let Some(pc) = values(cx, "sort32", &vals) else {
        return;
    };
    let dims = (|| {
        Some(Sort32Dims {
            es: s.ty.dtype.size_bytes(),
            pc,
            src_rows: static_dim(s.ty.valid_rows)?,
            dst_rows: static_dim(d.ty.valid_rows)?,
            cols: static_dim(s.ty.valid_cols)?,
            dst_cols: d.ty.cols,
            idx_rows: static_dim(i.ty.valid_rows)?,
            idx_cols: static_dim(i.ty.valid_cols)?,
            idx_alloc_cols: i.ty.cols,
            tmp_cols: t.map(|t| t.ty.cols),
        })
    })();
    if let Some(dims) = dims {
        report(cx, dims.broken());
    }
}
