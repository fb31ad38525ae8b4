//! The Reference backend of `paged_gather`: one `index_select` over physical rows.

use super::GatherCall;
use crate::error::OpError;
use candle_core::Tensor;

/// `src[rows, 0..size]` with the physical rows computed on the host from the validated table. A
/// non-contiguous `src` is made contiguous first (candle's `index_select` needs it).
pub(crate) fn paged_gather(src: &Tensor, call: &GatherCall) -> Result<Tensor, OpError> {
    let src = src.contiguous()?;
    let ids = Tensor::from_slice(&call.rows, call.rows.len(), src.device())?;
    let picked = src.index_select(&ids, 0)?;
    Ok(if call.shape.size == call.cols {
        picked
    } else {
        picked.narrow(1, 0, call.shape.size)?.contiguous()?
    })
}
