//! Tile shapes and fractals, capacity and alignment, and the GM load/store rules (ASCEND950.md
//! §2-§3).

use super::{static_dim, Ctx, Rule};
use crate::ir::{c0, DType, Layout, LoadStoreOp, MemSpace, ParamKind, Storage, TileType, ValidDim};

/// Size of one buffer of a tile rounded up to the planner's alignment for its space.
pub(crate) fn aligned_bytes(ty: &TileType, align: u64) -> u64 {
    let b = ty.bytes();
    b.div_ceil(align.max(1)).saturating_mul(align.max(1))
}

pub(super) fn check_declarations(cx: &mut Ctx<'_>) {
    let kernel = cx.kernel;
    for decl in &kernel.tiles {
        cx.at_decl(format!("tile `{}`", decl.name));
        let ty = &decl.ty;
        if ty.space == MemSpace::Gm {
            cx.error(
                Rule::TileShape,
                "a tile cannot live in GM; GM data is a kernel argument viewed with a GmView",
            );
            continue;
        }
        if decl.buffers == 0 {
            cx.error(
                Rule::TileShape,
                "a tile group needs at least 1 buffer, got 0",
            );
        }
        check_shape(cx, ty);
        if let Some(addr) = decl.addr {
            if let Some(spec) = cx.arch.space(ty.space) {
                if addr % spec.hw_align != 0 {
                    cx.error(
                        Rule::Alignment,
                        format!(
                            "{} address {addr:#x} is not {}-byte aligned ({addr} % {} = {})",
                            ty.space,
                            spec.hw_align,
                            spec.hw_align,
                            addr % spec.hw_align
                        ),
                    );
                }
            }
        }
    }
    check_capacity(cx);
}

fn check_shape(cx: &mut Ctx<'_>, ty: &TileType) {
    if ty.rows == 0 || ty.cols == 0 {
        cx.error(
            Rule::TileShape,
            format!("tile shape {}x{} has a zero dimension", ty.rows, ty.cols),
        );
        return;
    }
    let es = ty.dtype.size_bytes();
    match ty.layout {
        Layout::ND if !(ty.cols * es).is_multiple_of(32) => cx.error(
            Rule::TileShape,
            format!(
                "a row-major (ND) tile needs Cols * element size to be a multiple of 32 bytes: {} x {es} B = {} B",
                ty.cols,
                ty.cols * es
            ),
        ),
        Layout::DN if !(ty.rows * es).is_multiple_of(32) => cx.error(
            Rule::TileShape,
            format!(
                "a column-major (DN) tile needs Rows * element size to be a multiple of 32 bytes: {} x {es} B = {} B",
                ty.rows,
                ty.rows * es
            ),
        ),
        l if l.is_boxed() => match ty.fractal {
            None => cx.error(
                Rule::TileShape,
                format!("a {l} tile needs a fractal box; none is declared"),
            ),
            Some(f) => {
                if f.rows == 0 || f.cols == 0 || f.elems() * es != 512 && !(ty.space == MemSpace::Acc && f.rows == 16 && f.cols == 16) {
                    cx.error(
                        Rule::TileShape,
                        format!(
                            "fractal {}x{} of {} is not a 512-byte box (16 x C0 = 16 x {}; Acc uses 16 x 16)",
                            f.rows, f.cols, ty.dtype, c0(ty.dtype)
                        ),
                    );
                } else if !ty.rows.is_multiple_of(f.rows) || !ty.cols.is_multiple_of(f.cols) {
                    cx.error(
                        Rule::TileShape,
                        format!(
                            "a {l} tile's shape must be a whole number of {}x{} boxes, got {}x{}",
                            f.rows, f.cols, ty.rows, ty.cols
                        ),
                    );
                }
            }
        },
        _ => {}
    }
    if ty.layout.is_boxed() && ty.dtype.is_64bit() {
        cx.error(
            Rule::TileShape,
            format!(
                "64-bit {} data cannot be stored in the boxed layout {}",
                ty.dtype, ty.layout
            ),
        );
    }
    for (what, valid, alloc) in [
        ("rows", ty.valid_rows, ty.rows),
        ("cols", ty.valid_cols, ty.cols),
    ] {
        if let ValidDim::Static(v) = valid {
            if v > alloc {
                cx.error(
                    Rule::TileShape,
                    format!("valid {what} {v} exceed the allocated {alloc}"),
                );
            }
        }
    }
    if ty.space == MemSpace::Acc {
        if let Some(f) = ty.fractal {
            if (f.rows, f.cols) != (16, 16) {
                cx.error(
                    Rule::TileShape,
                    format!(
                        "Acc boxes are 16x16, this tile declares {}x{}",
                        f.rows, f.cols
                    ),
                );
            }
        }
    }
}

fn check_capacity(cx: &mut Ctx<'_>) {
    let kernel = cx.kernel;
    for space in MemSpace::ON_CHIP {
        let Some(spec) = cx.arch.space(space).copied() else {
            continue;
        };
        let mut total = 0u64;
        let mut parts = vec![];
        for decl in kernel.tiles.iter().filter(|d| d.ty.space == space) {
            if decl.storage != Storage::Alloc {
                continue;
            }
            // Saturating: a sum past u64 is past every capacity, never a small wrapped size.
            let size = aligned_bytes(&decl.ty, spec.plan_align).saturating_mul(decl.buffers as u64);
            let end = match decl.addr {
                Some(a) => a.saturating_add(size),
                None => size,
            };
            if decl.addr.is_some() {
                total = total.max(end);
            } else {
                total = total.saturating_add(size);
            }
            parts.push(format!("`{}` {} B", decl.name, size));
        }
        let list = parts.join(", ");
        if total > spec.capacity {
            cx.at_decl(format!("{space} ({})", space.hardware_name()));
            cx.error(
                Rule::Capacity,
                format!(
                    "tiles need {total} B of {space} but {} has {} B ({} KiB): {list}",
                    cx.machine(),
                    spec.capacity,
                    spec.capacity / 1024
                ),
            );
        } else if total > spec.safe_capacity {
            cx.at_decl(format!("{space} ({})", space.hardware_name()));
            cx.warn(
                Rule::Capacity,
                format!(
                    "tiles need {total} B of {space}, above the safe {} B ({} KiB; PTO-ISA corrupts the top of UB): {list}",
                    spec.safe_capacity,
                    spec.safe_capacity / 1024
                ),
            );
        }
    }
}

fn tensor_dtype(cx: &Ctx<'_>, p: crate::ir::ParamId) -> Option<DType> {
    match cx.kernel.try_param(p).map(|p| &p.kind) {
        Some(ParamKind::Tensor { dtype, .. }) => Some(*dtype),
        _ => None,
    }
}

pub(super) fn check_op(cx: &mut Ctx<'_>, op: &LoadStoreOp) {
    match op {
        LoadStoreOp::Load { dst, src } => {
            let Some(d) = cx.tile(dst) else { return };
            let ty = &d.ty;
            let Some(rule) = cx.arch.load_rule(ty.space) else {
                let reach: Vec<&str> = cx.arch.loads.iter().map(|r| r.dst.name()).collect();
                cx.error(
                    Rule::LoadSpace,
                    format!(
                        "GM loads land only in {} on {}, not in {} (tile `{}`)",
                        reach.join(" or "),
                        cx.machine(),
                        ty.space,
                        d.name
                    ),
                );
                return;
            };
            if !rule.layouts.contains(&(src.layout, ty.layout)) {
                let allowed: Vec<String> = rule
                    .layouts
                    .iter()
                    .map(|(a, b)| format!("{a}->{b}"))
                    .collect();
                cx.error(
                    Rule::LoadLayout,
                    format!(
                        "GM {} -> {} {} is not a legal load layout; into {} only {}",
                        src.layout,
                        ty.space,
                        ty.layout,
                        ty.space,
                        allowed.join(", ")
                    ),
                );
            }
            if let Some(g) = tensor_dtype(cx, src.tensor) {
                if g.is_64bit() && !matches!(src.layout, Layout::ND | Layout::DN) {
                    cx.error(
                        Rule::LoadLayout,
                        format!(
                            "64-bit {g} data is loaded ND or DN only, not {}",
                            src.layout
                        ),
                    );
                }
                if g != ty.dtype {
                    cx.error(
                        Rule::LoadDtype,
                        format!(
                            "a load copies bytes: GM tensor is {g} but tile `{}` is {}",
                            d.name, ty.dtype
                        ),
                    );
                }
            }
            check_view_covers(cx, src, ty);
        }
        LoadStoreOp::Store {
            dst,
            src,
            relu,
            scale,
            phase,
            ..
        } => {
            let Some(s) = cx.tile(src) else { return };
            let ty = &s.ty;
            let gm = tensor_dtype(cx, dst.tensor);
            match ty.space {
                MemSpace::Vec => {
                    if *relu || scale.is_some() {
                        cx.error(
                            Rule::StoreSource,
                            "ReLU and quantisation are Fixpipe features: only a store from Acc can apply them",
                        );
                    }
                    if phase.is_some() {
                        cx.error(
                            Rule::StoreSource,
                            "a phase (unit flag) belongs to the Fixpipe read of an Acc tile: a store from Vec has none",
                        );
                    }
                    if !matches!(
                        (ty.layout, dst.layout),
                        (Layout::ND, Layout::ND) | (Layout::DN, Layout::DN) | (Layout::NZ, Layout::NZ)
                    ) {
                        cx.error(
                            Rule::StoreLayout,
                            format!("Vec {} -> GM {} is not a legal store layout (ND->ND, DN->DN, NZ->NZ)", ty.layout, dst.layout),
                        );
                    }
                    if let Some(g) = gm {
                        if g != ty.dtype {
                            cx.error(
                                Rule::StoreDtype,
                                format!("a store from Vec copies bytes: tile `{}` is {} but the GM tensor is {g}", s.name, ty.dtype),
                            );
                        }
                    }
                }
                MemSpace::Acc => {
                    if let Some(g) = gm {
                        let scaled = scale.is_some();
                        let ok = cx
                            .arch
                            .move_rules(MemSpace::Acc, MemSpace::Vec)
                            .filter(|r| r.covers(true, true, scaled))
                            .any(|r| r.dtypes.contains(&(ty.dtype, g)));
                        if !ok {
                            cx.error(
                                Rule::StoreDtype,
                                format!(
                                    "the Fixpipe cannot convert {} -> {g} {} a scale",
                                    ty.dtype,
                                    if scaled { "with" } else { "without" }
                                ),
                            );
                        }
                    }
                }
                other => cx.error(
                    Rule::StoreSource,
                    format!(
                        "stores to GM come from Vec (MTE3) or Acc (Fixpipe), not from {other} (tile `{}`)",
                        s.name
                    ),
                ),
            }
        }
    }
}

/// With static sizes, the GM window must cover the tile's valid region.
fn check_view_covers(cx: &mut Ctx<'_>, v: &crate::ir::GmView, ty: &TileType) {
    let pairs = [
        ("rows", v.rows.as_const(), static_dim(ty.valid_rows)),
        ("cols", v.cols.as_const(), static_dim(ty.valid_cols)),
    ];
    for (what, view, valid) in pairs {
        if let (Some(view), Some(valid)) = (view, valid) {
            if (view as i128) < valid as i128 {
                cx.error(
                    Rule::ViewShape,
                    format!(
                        "the GM window has {view} {what} but the tile's valid shape needs {valid}"
                    ),
                );
            }
        }
    }
}
