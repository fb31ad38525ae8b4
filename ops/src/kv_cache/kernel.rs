//! The `reshape_and_cache` kernel in the tile DSL (rows GM -> UB -> GM at slots), and its host
//! code.
//!
//! CONTRACT (the op layer in `mod.rs` calls exactly this): `run` receives validated inputs.
//!
//! # Kernel
//!
//! Vector program only, the row copy of the paged gather with the indirection on the other side:
//! the `N` new rows are split into contiguous runs, one per AIV, and each AIV walks its run
//! with `DEPTH` UB buffers in flight:
//!
//! ```text
//! per row i (buffer i % DEPTH):
//!   S     s = slot_mapping[i]                         (read_scalar)
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
//! call costs O(N rows), not O(cache size). For the Ascend 950 the launch only writes the
//! package and the cache is left as it was.

use crate::bridge::gm_i32;
use crate::error::OpError;
use crate::runtime::{compiled, Runner};
use crate::templates::row_copy::{block_dim_for, emit_row_copy, RowPlan, RowTiles};
use tile_backend::dsl::{Body, KernelBuilder};
use tile_backend::ir::{DType, Expr, Kernel};
use tile_backend::launch::{Arg, GmInOut, GmInput};

const OP: &str = "reshape_and_cache";

/// One validated cache write: row `i` of `rows` goes to physical slot `slot_mapping[i]` of
/// `cache` (slot = block * block_size + offset); a slot of -1 skips the row (padding tokens).
#[derive(Debug, Clone)]
pub struct CacheWrite<'a> {
    /// New rows `[N, ...]` (the trailing dims multiply to row = Hkv * D, or the MLA latent
    /// width), the cache's dtype; borrowed, not copied.
    pub rows: GmInput<'a>,
    /// Destination slots, `N` of them, each `-1` or in `0..num_blocks * block_size` (checked);
    /// no two valid slots are equal (checked: the result would depend on the order).
    pub slot_mapping: Vec<i64>,
}

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
    let plan = move |b: &mut Body<'_>, i: Expr| {
        let s = b.read_scalar("slot", map, i.clone());
        RowPlan {
            when: Some(Expr::from(s).ge(0)),
            src_row: i,
            dst_row: Expr::from(s),
        }
    };
    let stride = Expr::from(row);
    emit_row_copy(&mut kb, rt, n, rows, stride.clone(), cache, stride, &plan);
    kb.build()
}

/// Checks the shapes the kernel's arguments depend on (the op layer validated the values), so
/// a malformed call is an error, never a panic. Returns `(N, row, slots)`.
fn check(cache: &GmInOut<'_>, w: &CacheWrite<'_>) -> Result<(usize, usize, usize), OpError> {
    if !matches!(w.rows.dtype, DType::F32 | DType::F16 | DType::BF16) {
        return Err(OpError::invalid(
            OP,
            "rows",
            format!(
                "dtype {} is not supported: use f32, f16 or bf16",
                w.rows.dtype
            ),
        ));
    }
    if cache.dtype != w.rows.dtype {
        return Err(OpError::invalid(
            OP,
            "cache",
            format!(
                "dtype {} differs from the rows' {}",
                cache.dtype, w.rows.dtype
            ),
        ));
    }
    let n = w.slot_mapping.len();
    let Some((&first, rest)) = w.rows.shape.split_first() else {
        return Err(OpError::invalid(
            OP,
            "rows",
            "must be at least 1-D [N, ...]",
        ));
    };
    if first != n {
        return Err(OpError::invalid(
            OP,
            "slot_mapping",
            format!("has {n} entries but rows has {first} rows"),
        ));
    }
    let row: usize = rest.iter().product();
    if row == 0 {
        return Err(OpError::invalid(OP, "rows", "rows must not be empty"));
    }
    let total: usize = cache.shape.iter().product();
    if !total.is_multiple_of(row) {
        return Err(OpError::invalid(
            OP,
            "cache",
            format!(
                "{total} elements (shape {:?}) are not a whole number of {row}-element rows",
                cache.shape
            ),
        ));
    }
    let slots = total / row;
    if let Some(bad) = w
        .slot_mapping
        .iter()
        .find(|&&s| s < -1 || s >= slots as i64)
    {
        return Err(OpError::invalid(
            OP,
            "slot_mapping",
            format!("slot {bad} is neither -1 nor in 0..{slots}"),
        ));
    }
    Ok((n, row, slots))
}

/// Writes `w.rows` into `cache` (`[num_blocks, block_size, row]` or any shape whose element
/// count is a whole number of rows), in place: the kernel writes the borrowed bytes directly,
/// only the `N` mapped rows change, nothing is copied. On an error before the launch (a malformed
/// call) nothing is written; with a packaging runner nothing runs and the cache is unchanged.
pub fn run(runner: &mut Runner, cache: GmInOut<'_>, w: &CacheWrite<'_>) -> Result<(), OpError> {
    let (n, row, slots) = check(&cache, w)?;
    if n == 0 || w.slot_mapping.iter().all(|&s| s < 0) {
        return Ok(());
    }
    let dtype = w.rows.dtype;
    let key = format!("{OP}/{dtype}/{row}");
    let kernel = compiled(OP, &key, || cache_kernel(dtype, row as u64))?;
    // The kernel sees rows as [N, row] and the cache as [slots, row]: new shapes over the same
    // borrowed bytes.
    let rows = GmInput {
        dtype,
        shape: vec![n, row],
        data: w.rows.data,
    };
    let cache = GmInOut {
        dtype,
        shape: vec![slots, row],
        data: cache.data,
    };
    let named = vec![
        ("n", Arg::Int(n as i64)),
        ("slots", Arg::Int(slots as i64)),
        ("rows", Arg::Input(rows)),
        (
            "slot_mapping",
            Arg::Tensor(gm_i32(&[1, n], &w.slot_mapping)),
        ),
        ("cache", Arg::InOut(cache)),
    ];
    runner.launch_named(&kernel, block_dim_for(n), named)?;
    Ok(())
}
