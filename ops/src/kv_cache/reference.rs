//! The Reference backend of `reshape_and_cache`: one `index_select` of the rows to keep and one
//! in-place `scatter_set` into the cache viewed as `[slots, width]`.

use super::CacheCall;
use crate::error::OpError;
use candle_core::Tensor;

/// Writes the valid rows into `cache` in place.
pub(crate) fn reshape_and_cache(
    rows: &Tensor,
    cache: &Tensor,
    call: &CacheCall,
) -> Result<(), OpError> {
    let dev = cache.device();
    let (n, width) = (call.shape.tokens, call.shape.width);
    let (keep, slots): (Vec<i64>, Vec<i64>) = call
        .slot_mapping
        .iter()
        .enumerate()
        .filter(|(_, &s)| s >= 0)
        .map(|(i, &s)| (i as i64, s))
        .unzip();
    if keep.is_empty() {
        return Ok(());
    }
    let nv = keep.len();
    let mut src = rows.reshape((n, width))?;
    if nv != n {
        src = src.index_select(&Tensor::from_vec(keep, nv, dev)?, 0)?;
    }
    let src = src.contiguous()?;
    let idx = Tensor::from_vec(slots, (nv, 1), dev)?
        .broadcast_as((nv, width))?
        .contiguous()?;
    // `cache` is contiguous (checked), so the reshape shares its storage and the scatter writes
    // the caller's cache.
    let flat = cache.reshape((call.num_slots(), width))?;
    flat.scatter_set(&idx, &src, 0)?;
    Ok(())
}
