//! `reshape_and_cache`: writes new K/V (or MLA latent) rows into a paged cache at the slots of a
//! slot mapping, in place (a candle in-place op).
//!
//! On [`Backend::TileSim`] the kernel runs on the cache's candle storage itself: the storage is
//! lent to the simulator as an [`Arg::InOut`](tile_backend::launch::Arg::InOut) and the rows as an
//! [`Arg::Input`](tile_backend::launch::Arg::Input), so a call costs O(N rows), never a copy of the
//! cache (a decode step writes a few rows into a cache of tens of MB).

pub(crate) mod kernel;
mod reference;
pub(crate) mod shape;

use crate::backend::Backend;
use crate::bridge::{self, Bridge};
use crate::error::OpError;
use crate::registry::Checked;
use candle_core::{CpuStorage, InplaceOp2, Layout, Tensor};
pub use shape::ReshapeAndCacheShape;

const OP: &str = "reshape_and_cache";

/// Writes row `i` of `rows [N, ...]` into slot `slot_mapping[i]` of `cache [num_blocks,
/// block_size, ...]`, in place (slot `s` is `cache[s / block_size, s % block_size]`).
///
/// `rows` and `cache` share one dtype (f32, f16, bf16) and one row width (the product of the
/// dims after `N`, respectively after `block_size`; e.g. rows `[N, Hkv, D]` into a cache
/// `[num_blocks, block_size, Hkv, D]`). `slot_mapping [N]` (I32/I64) holds `-1` (skip the row,
/// e.g. a padding token) or a slot in `0..num_blocks * block_size`; no two valid slots may be
/// equal (the result would depend on the write order). `cache` must be contiguous (it is written
/// in place: a copy would not be the caller's cache) and must not share storage with `rows`; a
/// non-contiguous `rows` is made contiguous first.
///
/// # Errors
/// [`OpError::Invalid`] naming the argument for any broken rule (nothing is written);
/// [`OpError::DeviceUnavailable`] for [`Backend::Ascend950`] after the package is written (the
/// cache is unchanged); kernel errors for [`Backend::TileSim`].
pub fn reshape_and_cache(
    rows: &Tensor,
    cache: &Tensor,
    slot_mapping: &Tensor,
    backend: Option<Backend>,
) -> Result<(), OpError> {
    let backend = bridge::resolve_backend(backend)?;
    let call = CacheCall::validate(rows, cache, slot_mapping)?;
    // Non-contiguous rows are made contiguous (the cache must be: it is written in place).
    let rows = &rows.contiguous()?;
    match backend {
        Backend::Reference => reference::reshape_and_cache(rows, cache, &call),
        Backend::TileSim | Backend::Ascend950 => {
            let op = CacheOp {
                call,
                backend,
                bridge: Bridge::new(OP),
            };
            op.bridge
                .finish(cache.inplace_op2(&rows.contiguous()?, &op))
                .map(|_| ())
        }
    }
}

/// One validated `reshape_and_cache` call: its [`shape`](Self::shape) (what the launch plan, the
/// kernel and `tileops emit --op reshape-and-cache` read) and the slots. Made only by
/// [`CacheCall::validate`]; the kernel runs it with [`kernel::run`] on the cache's and the rows'
/// storage.
#[derive(Debug, Clone)]
pub(crate) struct CacheCall {
    /// The call's shape: dtype, rows `N` (`tokens`) and row width.
    pub shape: Checked<ReshapeAndCacheShape>,
    /// Blocks of the cache.
    pub(crate) num_blocks: usize,
    /// Slots per block.
    pub(crate) block_size: usize,
    /// Destination slot of each row: -1 (skip) or a slot of the cache, the valid ones distinct.
    pub(crate) slot_mapping: Vec<i64>,
}

impl CacheCall {
    /// Checks a call of [`reshape_and_cache`] (every rule its doc states) and reads the slots.
    ///
    /// # Errors
    /// [`OpError::Invalid`] naming the argument for any broken rule.
    pub fn validate(
        rows: &Tensor,
        cache: &Tensor,
        slot_mapping: &Tensor,
    ) -> Result<CacheCall, OpError> {
        bridge::check_cpu(OP, "cache", cache)?;
        let cd = cache.dims();
        if cd.len() < 3 {
            return Err(OpError::invalid(
                OP,
                "cache",
                format!("must have rank >= 3 [num_blocks, block_size, ...row], found shape {cd:?}"),
            ));
        }
        let cd = bridge::check_data(
            OP,
            "cache",
            cache,
            "[num_blocks, block_size, ...row]",
            cd.len(),
        )?;
        if !cache.is_contiguous() {
            return Err(OpError::invalid(
                OP,
                "cache",
                "must be contiguous: it is written in place, so a contiguous copy would not be the caller's cache",
            ));
        }
        let (num_blocks, block_size) = (cd[0], cd[1]);
        let width: usize = cd[2..].iter().product();
        bridge::check_cpu(OP, "rows", rows)?;
        let rd = rows.dims();
        if rd.len() < 2 {
            return Err(OpError::invalid(
                OP,
                "rows",
                format!("must have rank >= 2 [N, ...row], found shape {rd:?}"),
            ));
        }
        let rd = bridge::check_data(OP, "rows", rows, "[N, ...row]", rd.len())?;
        bridge::check_same_dtype(OP, "rows", rows, "cache", cache.dtype())?;
        let n = rd[0];
        let rw: usize = rd[1..].iter().product();
        if rw != width {
            return Err(OpError::invalid(
                OP,
                "rows",
                format!(
                    "row width {rw} (shape {rd:?} after N) must equal the cache's row width {width} (shape {cd:?} after block_size)"
                ),
            ));
        }
        if bridge::storage_addr(rows) == bridge::storage_addr(cache) {
            return Err(OpError::invalid(
                OP,
                "rows",
                "must not share storage with `cache` (copy the rows first)",
            ));
        }
        let (sd, slots) = bridge::check_positions(OP, "slot_mapping", slot_mapping, "[N]", 1)?;
        bridge::check_dim(OP, "slot_mapping", &sd, 0, "N", n, "rows is [N, ...row]")?;
        let num_slots = num_blocks * block_size;
        bridge::check_slots(OP, &slots, num_slots, (num_blocks, block_size))?;
        let shape = ReshapeAndCacheShape {
            dtype: bridge::data_dtype(OP, "cache", cache.dtype())?,
            tokens: n,
            width,
        };
        let shape = Checked::call(
            shape,
            OP,
            &[("dtype", "cache"), ("tokens", "rows"), ("width", "rows")],
        )?;
        Ok(CacheCall {
            shape,
            num_blocks,
            block_size,
            slot_mapping: slots,
        })
    }

    /// Slots of the cache (`num_blocks * block_size`).
    pub(crate) fn num_slots(&self) -> usize {
        self.num_blocks * self.block_size
    }
}

/// The in-place candle op running the tile kernel (simulated, or packaged for the Ascend 950)
/// directly on the cache's storage: O(N rows) per call, whatever the cache size.
struct CacheOp {
    call: CacheCall,
    backend: Backend,
    bridge: Bridge,
}

impl CacheOp {
    fn forward(
        &self,
        cs: &mut CpuStorage,
        cl: &Layout,
        rs: &CpuStorage,
        rl: &Layout,
    ) -> Result<((), ()), OpError> {
        // Both are borrowed from candle's storage: the kernel writes the N mapped rows of the
        // cache in place, and no byte of the cache is copied in or out.
        let cache = bridge::gm_inout(OP, "cache", cs, cl)?;
        let rows = bridge::gm_input(OP, "rows", rs, rl)?;
        let mut runner = bridge::runner(OP, self.backend);
        kernel::run(&mut runner, &self.call, cache, rows)?;
        runner.finish().map(|()| ((), ()))
    }
}

impl InplaceOp2 for CacheOp {
    fn name(&self) -> &'static str {
        OP
    }

    fn cpu_fwd(
        &self,
        cs: &mut CpuStorage,
        cl: &Layout,
        rs: &CpuStorage,
        rl: &Layout,
    ) -> candle_core::Result<()> {
        self.bridge.forward(|| self.forward(cs, cl, rs, rl))
    }
}

#[cfg(test)]
mod tests {
    use super::OP;
    use crate::bridge;

    fn check_slots(slots: &[i64], n: usize, dims: (usize, usize)) -> Result<(), crate::OpError> {
        bridge::check_slots(OP, slots, n, dims)
    }

    /// A one-row write into a 2^28-slot cache: checked on the slot count alone, no cache, no
    /// per-slot scratch.
    #[test]
    fn slots_are_checked_in_the_rows_written_whatever_the_cache_size() {
        let (blocks, bs) = (1usize << 22, 64usize);
        let n = blocks * bs;
        assert!(check_slots(&[n as i64 - 1], n, (blocks, bs)).is_ok());
        assert!(check_slots(&[-1, 5, 7], n, (blocks, bs)).is_ok());
        let e = check_slots(&[n as i64], n, (blocks, bs))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("slot_mapping[0]") && e.contains("0..268435456"),
            "{e}"
        );
        let e = check_slots(&[3, -1, 3], n, (blocks, bs))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("slot_mapping[2] = 3 duplicates slot_mapping[0]"),
            "{e}"
        );
        assert!(check_slots(&[-2], n, (blocks, bs)).is_err());
    }
}
