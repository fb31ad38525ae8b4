//! Scalar reads of a UB tile element (`read_tile_scalar`, PTO `Tile::GetValue`): the tile is a
//! Vec tile (the scalar unit reaches UB and GM, no other on-chip buffer), its dtype an integer
//! an i64 scalar holds exactly, and a constant index lies inside the tile.

use super::{Ctx, Rule};
use crate::ir::{DType, MemSpace, ScalarOp};

/// Dtypes whose every value an i64 scalar variable holds exactly.
pub(crate) const SCALAR_TILE_DTYPES: [DType; 4] = [DType::I8, DType::U8, DType::I32, DType::I64];

pub(super) fn check(cx: &mut Ctx<'_>, op: &ScalarOp) {
    let ScalarOp::ReadTileScalar { tile, index, .. } = op else {
        return;
    };
    // An unknown id is reported by `structure`.
    let Some(decl) = cx.kernel.try_tile(tile.tile) else {
        return;
    };
    let ty = &decl.ty;
    if ty.space != MemSpace::Vec {
        cx.error(
            Rule::ScalarTileSpace,
            format!(
                "read_tile_scalar of `{}` in {}: the scalar unit reads only UB (Vec) tiles and GM \
                 (PTO's Tile::GetValue static_asserts a Vec tile)",
                decl.name, ty.space
            ),
        );
    }
    if !SCALAR_TILE_DTYPES.contains(&ty.dtype) {
        let allowed: Vec<&str> = SCALAR_TILE_DTYPES.iter().map(|d| d.name()).collect();
        cx.error(
            Rule::ScalarTileDtype,
            format!(
                "read_tile_scalar of `{}` ({}): a scalar variable is an i64, so the tile must be \
                 an integer it holds exactly ({})",
                decl.name,
                ty.dtype,
                allowed.join(", ")
            ),
        );
    }
    if let Some(i) = index.as_const() {
        let numel = ty.rows.saturating_mul(ty.cols);
        if i < 0 || i as u64 >= numel {
            cx.error(
                Rule::ScalarTileIndex,
                format!(
                    "read_tile_scalar at element {i} of `{}`, which has {numel} elements ({}x{})",
                    decl.name, ty.rows, ty.cols
                ),
            );
        }
    }
}
