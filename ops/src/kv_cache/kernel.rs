//! The `reshape_and_cache` kernel in the tile DSL (rows GM -> UB -> GM at slots), and its host
//! code.
//!
//! CONTRACT (the op layer in `mod.rs` calls exactly this): `run` receives validated inputs.

use crate::error::OpError;
use crate::runtime::Runner;
use tile_backend::sim::GmTensor;

/// One validated cache write: row `i` of `rows` goes to physical slot `slot_mapping[i]` of
/// `cache` (slot = block * block_size + offset); a slot of -1 skips the row (padding tokens).
#[derive(Debug, Clone)]
pub struct CacheWrite {
    /// New rows `[N, row]` (row = Hkv * D, or the MLA latent width), the cache's dtype.
    pub rows: GmTensor,
    /// Destination slots, `N` of them, each `-1` or in `0..num_blocks * block_size` (checked);
    /// no two valid slots are equal (checked: the result would depend on the order).
    pub slot_mapping: Vec<i64>,
}

/// Writes `w.rows` into `cache` (`[num_blocks, block_size, row]` or any shape whose trailing
/// dims multiply to `row`), in place.
pub fn run(runner: &mut Runner, cache: &mut GmTensor, w: &CacheWrite) -> Result<(), OpError> {
    let _ = (runner, cache, w);
    Err(OpError::Package {
        op: "reshape_and_cache",
        why: "the tile kernel is not written yet".into(),
    })
}
