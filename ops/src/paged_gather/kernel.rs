//! The paged-gather kernel in the tile DSL (rows GM -> UB -> GM), and its host code.
//!
//! CONTRACT (the op layer in `mod.rs` calls exactly this): [`run`] receives a validated
//! [`GatherCall`] and the storage of src it describes.
//!
//! # Kernel
//!
//! Vector program only (the cube has no path from L1 to GM, so `gather_in_l1` cannot produce a
//! GM result). The `n` output rows are split into contiguous runs, one per AIV (two per
//! block). Each AIV loads the block table into UB once and its run's indices 2048 at a time,
//! then walks its run in batches of up to `batch_rows` rows
//! (`templates::row_copy::emit_row_gather`), two batch buffers in flight:
//!
//! ```text
//! MTE2  block_table -> table_ub                   (once per AIV, if nb <= TABLE_CAP)
//! per chunk:  MTE2  indices[c0 .. c0 + cm] -> keys_ub                    (one burst)
//!   per batch (buffer b, rows u0 .. u0 + m):
//!     per row u:  S     t = keys_ub[u]; e = table_ub[t / block_size]   (UB scalar reads)
//!                       physical row = e * block_size + t % block_size
//!                 MTE2  src[row, 0..size] -> row u - u0 of batch_ub[b]
//!     MTE3  batch_ub[b][0..m] -> out[u0 .. u0 + m, 0..size]              (one store)
//! ```
//!
//! A block table longer than `TABLE_CAP` entries is read from GM per row instead (a runtime
//! branch, same kernel). The output rows of a batch are consecutive, so one store moves the
//! whole batch; the batch flags (one event id per buffer) are written by hand, the key and
//! table tiles' MTE2 -> S / S -> MTE2 pairs are the sync pass's. Rows wider than
//! `CHUNK_BYTES` (`templates::row_copy`) take the row-at-a-time copy (`emit_row_copy`, one UB
//! buffer per row in flight, each row in column chunks; the indices from UB, each block-table
//! entry from GM).
//!
//! Only the dtype and `size` are static (the compile key); `n`, `T`, `C`, the block-table
//! length and `block_size` are runtime scalar arguments, so a decode step never recompiles.

use super::GatherCall;
use crate::bridge::{self, gm_i32};
use crate::error::OpError;
use crate::registry::{Checked, PagedGatherShape};
use crate::runtime::{compiled, PlanTarget, Runner};
use crate::templates::row_copy::{
    batch_rows, block_dim_for, emit_row_copy, emit_row_gather, GatherKeys, RowPlan, RowTiles, Table,
};
use tile_backend::dsl::{Body, KernelBuilder};
use tile_backend::ir::{DType, Expr, Kernel};
use tile_backend::launch::{Arg, GmInput, GmOutput};
#[cfg(test)]
use tile_backend::launch::{GmInOut, GmTensor};

#[cfg(test)]
pub(crate) use crate::templates::row_copy::{KEY_CHUNK, TABLE_CAP};

const OP: &str = "paged_gather";

/// The gather kernel for `dtype` rows of `size` columns. Parameters (bound by name): scalars
/// `n`, `tokens` (T), `cols` (C), `table_len` (nb), `block_size`; tensors `src [T, C]`,
/// `indices [1, n]` (i32), `block_table [1, nb]` (i32), `out [n, size]` (output).
pub(crate) fn gather_kernel(dtype: DType, size: u64) -> Kernel {
    let rt = RowTiles::new(dtype, size);
    let mut kb = KernelBuilder::new(format!("paged_gather_{dtype}_{size}"));
    let n = Expr::Param(kb.scalar("n", DType::I64));
    let tokens = Expr::Param(kb.scalar("tokens", DType::I64));
    let cols = Expr::Param(kb.scalar("cols", DType::I64));
    let nb = Expr::Param(kb.scalar("table_len", DType::I64));
    let bs = Expr::Param(kb.scalar("block_size", DType::I64));
    let src = kb.input("src", dtype, [tokens, cols.clone()]);
    let idx = kb.input("indices", DType::I32, [Expr::from(1), n.clone()]);
    let bt = kb.input("block_table", DType::I32, [Expr::from(1), nb.clone()]);
    let out = kb.output("out", dtype, [n.clone(), Expr::from(size)]);
    // The physical row of token t: its block's table entry, then the offset in the block.
    let physical = move |b: &mut Body<'_>, t: Expr, table: Table| -> Expr {
        let e = table.read(b, "entry", t.clone() / bs.clone());
        Expr::from(e) * bs.clone() + t % bs.clone()
    };
    if batch_rows(rt) > 0 {
        let keys = GatherKeys {
            keys: idx,
            table: Some((bt, nb)),
        };
        let locate = move |b: &mut Body<'_>, t: Expr, table: Option<Table>| {
            physical(b, t, table.unwrap_or(Table::Gm(bt)))
        };
        emit_row_gather(&mut kb, rt, n, (src, cols), out, keys, &locate);
    } else {
        let plan = |b: &mut Body<'_>, u: Expr, t: Expr| RowPlan {
            when: None,
            src_row: physical(b, t, Table::Gm(bt)),
            dst_row: u,
        };
        let out_rows = (out, Expr::from(size));
        emit_row_copy(&mut kb, rt, n, (src, cols), out_rows, idx, &plan);
    }
    kb.build()
}

/// The launch plan of a gather of `shape` on a target: the kernel for its dtype and width (the
/// same on every target: the row copy has no tiling to choose), on the blocks
/// [`block_dim_for`] gives (the device: every AIV a row; the simulator: at least 64 rows a
/// block), at most the blocks the target runs at once. [`run`] and `tileops emit`
/// ([`crate::registry::launches`], with [`PlanTarget::Device`]) both launch from it.
pub(crate) struct GatherPlan {
    /// Row dtype.
    pub dtype: DType,
    /// Columns gathered per row.
    pub size: u64,
    /// Blocks launched.
    pub block_dim: usize,
}

impl GatherPlan {
    /// The kernel cache key: what the kernel depends on (dtype and row size).
    pub fn key(&self) -> (DType, u64) {
        (self.dtype, self.size)
    }

    /// The kernel, as its builder writes it.
    pub fn kernel(&self) -> Kernel {
        gather_kernel(self.dtype, self.size)
    }
}

/// The plan of a gather of `shape` on `target`.
pub(crate) fn plan(shape: &Checked<PagedGatherShape>, target: PlanTarget) -> GatherPlan {
    GatherPlan {
        dtype: shape.dtype,
        size: shape.size as u64,
        block_dim: block_dim_for(shape.n, target),
    }
}

#[cfg(test)]
/// Runs the gather of `call` over `src` (borrowed storage, `[T, C]`): returns `[n, size]` in
/// src's dtype.
///
/// # Errors
/// [`OpError::Invalid`] when `src` is not the storage `call` describes; kernel errors.
pub fn run(runner: &mut Runner, call: &GatherCall, src: GmInput<'_>) -> Result<GmTensor, OpError> {
    let s = &call.shape;
    let mut out = GmTensor::zeros(s.dtype, &[s.n, s.size]);
    run_into(runner, call, src, &mut out.data)?;
    Ok(out)
}

#[cfg(test)]
/// [`run`] writing the `[n, size]` result into `out` (`n * size` zero-initialised elements of
/// src's dtype, as little-endian bytes) in place: the op gathers straight into the buffer its
/// candle tensor then owns, with no result copy.
///
/// # Errors
/// [`OpError::Invalid`] when `src` or `out` is not the storage `call` describes; kernel errors.
pub fn run_into(
    runner: &mut Runner,
    call: &GatherCall,
    src: GmInput<'_>,
    out: &mut [u8],
) -> Result<(), OpError> {
    let s = &call.shape;
    let out = GmInOut {
        dtype: s.dtype,
        shape: vec![s.n, s.size],
        data: out,
    };
    run_with(runner, call, src, Arg::InOut(out))
}

/// [`run_into`] writing the result into `out`, `n * size` elements of src's dtype as bytes the
/// caller has not initialised (the spare capacity of the vector the result tensor will own):
/// the kernel only stores into its output, so nothing zero-fills it first. On `Ok` every byte
/// of `out` is initialised (the gather writes them all).
///
/// # Errors
/// As [`run_into`]; after an error `out` may be partly uninitialised.
pub fn run_uninit(
    runner: &mut Runner,
    call: &GatherCall,
    src: GmInput<'_>,
    out: &mut [std::mem::MaybeUninit<u8>],
) -> Result<(), OpError> {
    let s = &call.shape;
    let out = GmOutput {
        dtype: s.dtype,
        shape: vec![s.n, s.size],
        data: out,
    };
    run_with(runner, call, src, Arg::Output(out))
}

/// Launches the gather of `call` over `src` into the output argument `out` (an
/// [`Arg::InOut`] or an [`Arg::Output`] of `[n, size]`).
fn run_with(
    runner: &mut Runner,
    call: &GatherCall,
    src: GmInput<'_>,
    out: Arg<'_>,
) -> Result<(), OpError> {
    let s = &call.shape;
    let (n, t, c) = (s.n, call.tokens, call.cols);
    bridge::check_storage(OP, "src", (src.dtype, src.data.len()), s.dtype, t * c)?;
    let out_bytes = out.gm_shape().map_or(0, |(_, _, b)| b);
    bridge::check_storage(OP, "out", (s.dtype, out_bytes), s.dtype, n * s.size)?;
    let plan = plan(s, runner.plan_target());
    let kernel = compiled(OP, &plan.key(), || plan.kernel())?;
    let nb = call.block_table.len();
    let named = vec![
        ("n", Arg::Int(n as i64)),
        ("tokens", Arg::Int(t as i64)),
        ("cols", Arg::Int(c as i64)),
        ("table_len", Arg::Int(nb as i64)),
        ("block_size", Arg::Int(call.block_size as i64)),
        (
            "src",
            Arg::Input(GmInput {
                shape: vec![t, c],
                ..src
            }),
        ),
        ("indices", Arg::Tensor(gm_i32(&[1, n], &call.indices))),
        (
            "block_table",
            Arg::Tensor(gm_i32(&[1, nb], &call.block_table)),
        ),
        ("out", out),
    ];
    runner.launch_named(kernel, plan.block_dim, named)?;
    Ok(())
}
