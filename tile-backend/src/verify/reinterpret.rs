//! `reinterpret` (ASCEND950.md §7): a zero-copy re-declaration of a planned allocation.

use super::{Ctx, Rule};
use crate::ir::{Storage, ValidDim};

pub(super) fn check_declarations(cx: &mut Ctx<'_>) {
    let kernel = cx.kernel;
    for decl in &kernel.tiles {
        let Storage::Alias { of } = decl.storage else {
            continue;
        };
        cx.at_decl(format!("reinterpret `{}`", decl.name));
        let Some(src) = kernel.try_tile(of) else {
            cx.error(
                Rule::ReinterpretSource,
                format!("source tile id {} is not declared", of.0),
            );
            continue;
        };
        if src.storage != Storage::Alloc {
            cx.error(
                Rule::ReinterpretSource,
                format!(
                    "the source must be a planned allocation; `{}` is itself a reinterpret (reinterpret its source instead)",
                    src.name
                ),
            );
            continue;
        }
        if decl.addr.is_some() {
            cx.error(
                Rule::ReinterpretSource,
                "a reinterpret has its source's address; it cannot be placed on its own",
            );
        }
        let (t, s) = (&decl.ty, &src.ty);
        if t.space != s.space {
            cx.error(
                Rule::ReinterpretAttrs,
                format!(
                    "reinterpret cannot change the memory space ({} -> {})",
                    s.space, t.space
                ),
            );
        }
        if (t.dtype, t.rows, t.cols, t.layout) == (s.dtype, s.rows, s.cols, s.layout) {
            cx.error(
                Rule::ReinterpretAttrs,
                "reinterpret must change at least one of dtype, shape or layout",
            );
        }
        if t.dtype != s.dtype
            && t.dtype.size_bytes() != s.dtype.size_bytes()
            && (t.rows, t.cols) == (s.rows, s.cols)
        {
            cx.error(
                Rule::ReinterpretAttrs,
                format!(
                    "a dtype change needs a new shape: {} -> {} keeps {}x{}",
                    s.dtype, t.dtype, t.rows, t.cols
                ),
            );
        }
        if let Some(addr) = src.addr {
            let es = t.dtype.size_bytes();
            if addr % es != 0 {
                cx.error(
                    Rule::ReinterpretAlign,
                    format!(
                        "base address {addr:#x} is not a multiple of the new element size {es} B"
                    ),
                );
            }
        }
        if t.bytes() > s.bytes() {
            cx.error(
                Rule::ReinterpretSize,
                format!(
                    "the new footprint {}x{} {} = {} B exceeds the source buffer `{}` of {} B",
                    t.rows,
                    t.cols,
                    t.dtype,
                    t.bytes(),
                    src.name,
                    s.bytes()
                ),
            );
        }
        if (t.valid_rows, t.valid_cols) != (ValidDim::Dynamic, ValidDim::Dynamic) {
            cx.error(
                Rule::ReinterpretInherit,
                "the valid shape is not inherited: a reinterpret starts with a dynamic valid shape (set it with set_validshape)",
            );
        }
        if t.pad != s.pad {
            cx.error(
                Rule::ReinterpretInherit,
                format!("the pad value is inherited ({:?}), not {:?}", s.pad, t.pad),
            );
        }
        if decl.buffers != src.buffers {
            cx.error(
                Rule::ReinterpretInherit,
                format!(
                    "a reinterpreted group shares its source's rotation of {} buffers, not {}",
                    src.buffers, decl.buffers
                ),
            );
        }
        if t.layout == s.layout && t.dtype == s.dtype && t.fractal != s.fractal {
            cx.error(
                Rule::ReinterpretInherit,
                format!(
                    "the fractal is inherited ({:?}), not {:?}",
                    s.fractal, t.fractal
                ),
            );
        }
    }
}
