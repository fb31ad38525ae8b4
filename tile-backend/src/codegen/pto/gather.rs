//! `gather_in_l1` (ASCEND950.md §8): the paged per-row GM -> L1 gather, one MTE2 DMA (`TLOAD`)
//! per gathered row, straight into the NZ tile.
//!
//! Row `i` of an NZ tile `[R, C]` starts `i * C0` elements after the tile's base, and its later
//! C0-column chunks sit at the NZ block offsets of row 0. So each row is a `TLOAD` into a tile of
//! the destination's type with valid shape `1 x size`, assigned at `base + i * 32` bytes: the
//! DMA lays the row out ND -> NZ exactly where the full tile expects it.

use super::types::ctype;
use super::{CodegenError, Emitter};
use crate::ir::{GatherOp, Layout, MemSpace, ParamKind};

pub(super) fn emit(e: &mut Emitter<'_>, op: &GatherOp) -> Result<(), CodegenError> {
    let GatherOp::GatherInL1 {
        dst,
        src,
        indices,
        block_table,
        block_size,
        size,
        col_offset,
        is_b_matrix,
        is_trans,
    } = op;
    let d = e.decl(dst.tile)?;
    if d.ty.space != MemSpace::Mat || d.ty.layout != Layout::NZ {
        return Err(e.unsupported(
            op.name(),
            format!("gather_in_l1 writes an NZ Mat tile, not {}", d.ty),
        ));
    }
    for v in [indices, block_table] {
        if v.layout != Layout::ND {
            return Err(e.unsupported(op.name(), "indices and block table are [1, n] ND views"));
        }
    }
    let param =
        e.k.try_param(*src)
            .ok_or_else(|| e.malformed(format!("argument {} is not declared", src.0)))?;
    let ParamKind::Tensor { dtype, shape, .. } = &param.kind else {
        return Err(e.malformed(format!("`{}` is not a GM tensor", param.name)));
    };
    let Some(row_len) = shape.get(1).cloned() else {
        return Err(e.unsupported(
            op.name(),
            format!("source `{}` is not 2-D [T, C]", param.name),
        ));
    };
    let c0_bytes = crate::ir::C0_BYTES;
    let ty = &d.ty;
    let row_tile = format!(
        "Tile<TileType::Mat, {}, {}, {}, BLayout::ColMajor, 1, {size}, SLayout::RowMajor, 512>",
        ctype(ty.dtype),
        ty.rows,
        ty.cols
    );
    let row_ty = e.extra_type(&format!("{}Row", super::types::camel(&d.name)), row_tile);
    let gm_row = format!(
        "GlobalTensor<{}, pto::Shape<1, 1, 1, 1, {size}>, pto::Stride<1, 1, 1, 1, 1>>",
        ctype(*dtype)
    );
    let src_name = e.param_names[src.0 as usize].clone();
    let gm_ty = e.extra_type(
        &format!("Gm{}Row", super::types::camel(&param.name)),
        gm_row,
    );
    let idx_name = e.param_names[indices.tensor.0 as usize].clone();
    let bt_name = e.param_names[block_table.tensor.0 as usize].clone();
    let nonneg = |p: crate::ir::ParamId| {
        e.k.try_param(p)
            .and_then(|p| p.range.as_ref())
            .is_some_and(|r| r.min >= 0.0)
    };
    let idx_nonneg = nonneg(indices.tensor);

    // Base byte address of the destination buffer.
    let root = e.decl(e.k.root_tile(dst.tile))?;
    let (base, stride) = e.buffer_addr(dst.tile, 0)?;
    let base_expr = if root.buffers > 1 {
        let slot = e.slot(&dst.slot, root.buffers);
        format!("{base:#x} + ({slot}) * {stride:#x}")
    } else {
        format!("{base:#x}")
    };

    let n = e.expr_prec(&indices.cols, 5);
    let loc = e.loc();
    let i = e.unique("gi");
    let tok = e.unique("token");
    let row = e.unique("row");
    let role = match (is_b_matrix, is_trans) {
        (true, true) => "B, consumed transposed",
        (true, false) => "B",
        (false, true) => "A, consumed transposed",
        (false, false) => "A",
    };
    e.line(format!(
        "// {loc}: gather_in_l1 into {} ({role}): one MTE2 DMA per row, row {i} at byte {i} * {c0_bytes}",
        e.tile_vars[dst.tile.0 as usize]
    ));
    e.open(format!("for (int64_t {i} = 0; {i} < {n}; ++{i}) {{"));
    let idx_off = if indices.offset.as_const() == Some(0) {
        i.clone()
    } else {
        format!("{} + {i}", e.expr_prec(&indices.offset, 5))
    };
    e.line(format!(
        "const int64_t {tok} = static_cast<int64_t>({idx_name}[{idx_off}]);"
    ));
    let bs = e.expr_prec(block_size, 6);
    let bs_pos = e.lower_bound(block_size).is_some_and(|v| v >= 1);
    let (q, r) = if idx_nonneg && bs_pos {
        (format!("{tok} / {bs}"), format!("{tok} % {bs}"))
    } else {
        e.helper(super::Helper::DivEuclid);
        e.helper(super::Helper::RemEuclid);
        (
            format!("div_euclid({tok}, {bs})"),
            format!("rem_euclid({tok}, {bs})"),
        )
    };
    let bt_at = match block_table.offset.as_const() {
        Some(0) => q,
        _ => format!("{} + {q}", e.expr_prec(&block_table.offset, 5)),
    };
    e.line(format!(
        "const int64_t {row} = static_cast<int64_t>({bt_name}[{bt_at}]) * {bs} + {r};"
    ));
    let c = e.expr_prec(&row_len, 6);
    let col = match col_offset.as_const() {
        Some(0) => String::new(),
        _ => format!(" + {}", e.expr_prec(col_offset, 5)),
    };
    let gm = e.unique(&format!("{src_name}_row"));
    let tile = e.unique(&format!("{}_row", e.tile_vars[dst.tile.0 as usize]));
    e.line(format!("{gm_ty} {gm}({src_name} + {row} * {c}{col});"));
    e.line(format!("{row_ty} {tile};"));
    e.line(format!("TASSIGN({tile}, {base_expr} + {i} * {c0_bytes});"));
    e.line(format!("TLOAD({tile}, {gm});"));
    e.close("}");
    Ok(())
}
