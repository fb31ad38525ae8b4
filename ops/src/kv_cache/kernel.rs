//! The `reshape_and_cache` kernel in the tile DSL (rows GM -> UB -> GM at slots), and its host
//! code.
//!
//! CONTRACT (the op layer in `mod.rs` calls exactly this): [`run`] receives a validated
//! [`CacheCall`] and the storage it describes.
//!
//! # Kernel
//!
//! Vector program only, the row copy of the paged gather with the indirection on the other side:
//! the `N` new rows are split into contiguous runs, one per AIV, and each AIV walks its run
//! with `DEPTH` UB buffers in flight:
//!
//! ```text
//! per chunk of 2048 rows:  MTE2  slot_mapping[chunk] -> keys_ub             (one burst)
//! per row i (buffer i % DEPTH):
//!   S     s = keys_ub[i - chunk start]                (UB scalar read)
//!   if s >= 0:
//!     MTE2  rows[i, 0..row] -> row_ub[slot]
//!     MTE3  row_ub[slot] -> cache[s, 0..row]
//! ```
//!
//! The cache is an output argument that the kernel writes only at the mapped slots: the
//! simulator merges each block's written bytes into the argument it was given, so every other
//! cache row keeps its value (the in-place update). Valid slots are distinct (checked by the op
//! layer), so no two cores write the same row. Only the dtype and the row width are static;
//! `N` and the cache's slot count are runtime scalars.
//!
//! # Host side: no copy of the cache
//!
//! [`run`] takes the cache as a [`GmInOut`], a mutable borrow of the caller's bytes (the op
//! layer borrows candle's storage), and passes it as [`Arg::InOut`] viewed as `[slots, row]`
//! (only the shape changes, no byte moves); the rows are borrowed too ([`Arg::Input`]). The
//! simulator reads both in place and merges the kernel's writes straight into the cache, so a
//! call costs O(N rows), not O(cache size). A simulated launch is lent only the window of
//! slots the call writes (`Window`: lowest to highest valid slot, the slot mapping made
//! relative to it), so the simulator's bookkeeping of the written argument follows that span,
//! not the cache's megabytes. For the Ascend 950 the launch only writes the package (over the
//! whole cache) and the cache is left as it was.

use super::CacheCall;
use crate::bridge::{self, gm_i32};
use crate::error::OpError;
use crate::registry::{Checked, ReshapeAndCacheShape};
use crate::runtime::{compiled, PlanTarget, Runner};
use crate::templates::row_copy::{block_dim_for, emit_row_copy, RowPlan, RowTiles};
use tile_backend::dsl::{Body, KernelBuilder};
use tile_backend::ir::{DType, Expr, Kernel};
use tile_backend::launch::{Arg, GmInOut, GmInput};

#[cfg(test)]
pub(crate) use crate::templates::row_copy::KEY_CHUNK;

const OP: &str = "reshape_and_cache";

/// The cache kernel for `dtype` rows of `row` columns. Parameters (bound by name): scalars `n` (N),
/// `slots` (rows of the cache); tensors `rows [N, row]`, `slot_mapping [1, N]` (i32),
/// `cache [slots, row]` (output, written only at the mapped slots).
pub(crate) fn cache_kernel(dtype: DType, row: u64) -> Kernel {
    let rt = RowTiles::new(dtype, row);
    let mut kb = KernelBuilder::new(format!("reshape_and_cache_{dtype}_{row}"));
    let n = Expr::Param(kb.scalar("n", DType::I64));
    let slots = Expr::Param(kb.scalar("slots", DType::I64));
    let rows = kb.input("rows", dtype, [n.clone(), Expr::from(row)]);
    let map = kb.input("slot_mapping", DType::I32, [Expr::from(1), n.clone()]);
    let cache = kb.output("cache", dtype, [slots, Expr::from(row)]);
    // Row i's key is its slot (read from UB by the template); -1 skips the row.
    let plan = |_: &mut Body<'_>, i: Expr, slot: Expr| RowPlan {
        when: Some(slot.clone().ge(0)),
        src_row: i,
        dst_row: slot,
    };
    let stride = Expr::from(row);
    emit_row_copy(
        &mut kb,
        rt,
        n,
        (rows, stride.clone()),
        (cache, stride),
        map,
        &plan,
    );
    kb.build()
}

/// The launch plan of a cache write of `shape` on a target: the kernel for its dtype and row
/// width (the same on every target: the row copy has no tiling to choose), on the blocks
/// [`block_dim_for`] gives (the device: every AIV a row; the simulator: at least 64 rows a
/// block), at most the blocks the target runs at once. [`run`] and `tileops emit`
/// ([`crate::registry::launches`], with [`PlanTarget::Device`]) both launch from it.
pub(crate) struct CachePlan {
    /// Row dtype.
    pub dtype: DType,
    /// Elements per row.
    pub width: u64,
    /// Blocks launched.
    pub block_dim: usize,
}

impl CachePlan {
    /// The kernel cache key: what the kernel depends on (dtype and row width).
    pub fn key(&self) -> (DType, u64) {
        (self.dtype, self.width)
    }

    /// The kernel, as its builder writes it.
    pub fn kernel(&self) -> Kernel {
        cache_kernel(self.dtype, self.width)
    }
}

/// The plan of a cache write of `shape` on `target`.
pub(crate) fn plan(shape: &Checked<ReshapeAndCacheShape>, target: PlanTarget) -> CachePlan {
    CachePlan {
        dtype: shape.dtype,
        width: shape.width as u64,
        block_dim: block_dim_for(shape.tokens, target),
    }
}

/// Writes the rows `[N, ...]` (borrowed storage) into `cache` (a mutable borrow of the caller's
/// bytes, `[num_blocks, block_size, ...]`) at `call`'s slots, in place: the kernel writes the
/// borrowed bytes directly, only the `N` mapped rows change, nothing is copied. With a
/// packaging runner nothing runs and the cache is unchanged.
///
/// # Errors
/// [`OpError::Invalid`] when `cache` or `rows` is not the storage `call` describes (nothing is
/// written); kernel errors.
pub fn run(
    runner: &mut Runner,
    call: &CacheCall,
    cache: GmInOut<'_>,
    rows: GmInput<'_>,
) -> Result<(), OpError> {
    let s = &call.shape;
    let (n, row, slots) = (s.tokens, s.width, call.num_slots());
    bridge::check_storage(
        OP,
        "cache",
        (cache.dtype, cache.data.len()),
        s.dtype,
        slots * row,
    )?;
    bridge::check_storage(OP, "rows", (rows.dtype, rows.data.len()), s.dtype, n * row)?;
    let Some(window) = Window::of(&call.slot_mapping) else {
        return Ok(());
    };
    let plan = plan(s, runner.plan_target());
    let kernel = compiled(OP, &plan.key(), || plan.kernel())?;
    // The simulator is lent only the slots the call writes (see `Window`); the package keeps
    // the whole cache.
    let window = if runner.executes() {
        window
    } else {
        Window::whole(slots)
    };
    let es = s.dtype.size_bytes() as usize;
    let bytes = window.first * row * es..(window.first + window.slots) * row * es;
    let cache_bytes = cache.data.get_mut(bytes).ok_or_else(|| {
        OpError::invalid(
            OP,
            "cache",
            "the slots written lie outside the cache's bytes",
        )
    })?;
    // The kernel sees rows as [N, row] and the cache window as [slots, row]: new shapes over
    // the same borrowed bytes.
    let named = vec![
        ("n", Arg::Int(n as i64)),
        ("slots", Arg::Int(window.slots as i64)),
        (
            "rows",
            Arg::Input(GmInput {
                shape: vec![n, row],
                ..rows
            }),
        ),
        (
            "slot_mapping",
            Arg::Tensor(gm_i32(&[1, n], &window.relative(&call.slot_mapping))),
        ),
        (
            "cache",
            Arg::InOut(GmInOut {
                dtype: cache.dtype,
                shape: vec![window.slots, row],
                data: cache_bytes,
            }),
        ),
    ];
    runner.launch_named(kernel, plan.block_dim, named)?;
    Ok(())
}

/// The slots `first .. first + slots` of the cache that a simulated call lends the kernel: from
/// the lowest to the highest valid slot of the slot mapping, whose values are then relative to
/// `first`. The kernel runs unchanged on a cache argument that starts at `first` (a launcher
/// passing an offset pointer), and the simulator's per-launch work on a written argument (its
/// ownership lines for in-place writes) is then in the span written, not in the cache's size:
/// a decode step writes a few rows into a cache of megabytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Window {
    /// First slot lent.
    first: usize,
    /// Slots lent.
    slots: usize,
}

impl Window {
    /// The span of `slot_mapping`'s valid slots (none when every row is skipped).
    fn of(slot_mapping: &[i64]) -> Option<Window> {
        let valid = slot_mapping
            .iter()
            .filter(|&&s| s >= 0)
            .map(|&s| s as usize);
        let (lo, hi) = valid.fold(None, |span: Option<(usize, usize)>, s| match span {
            None => Some((s, s)),
            Some((lo, hi)) => Some((lo.min(s), hi.max(s))),
        })?;
        Some(Window {
            first: lo,
            slots: hi - lo + 1,
        })
    }

    /// The whole cache of `slots` slots.
    fn whole(slots: usize) -> Window {
        Window { first: 0, slots }
    }

    /// `slot_mapping` relative to the window (-1 stays -1).
    fn relative(&self, slot_mapping: &[i64]) -> Vec<i64> {
        let first = self.first as i64;
        slot_mapping
            .iter()
            .map(|&s| if s >= 0 { s - first } else { s })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::Window;

    /// The window spans the lowest to the highest valid slot, whatever their order, and the
    /// slots become relative to its first; skipped rows stay skipped.
    #[test]
    fn the_window_spans_the_valid_slots() {
        assert_eq!(Window::of(&[-1, -1]), None);
        assert_eq!(Window::of(&[]), None);
        let w = Window::of(&[700, -1, 517, 1023]).expect("valid slots");
        assert_eq!(
            w,
            Window {
                first: 517,
                slots: 507
            }
        );
        assert_eq!(w.relative(&[700, -1, 517, 1023]), vec![183, -1, 0, 506]);
        let w = Window::of(&[5]).expect("one slot");
        assert_eq!((w.first, w.slots), (5, 1));
        assert_eq!(Window::whole(64).relative(&[3, -1]), vec![3, -1]);
    }
}
