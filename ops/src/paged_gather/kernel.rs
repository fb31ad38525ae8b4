//! The paged-gather kernel in the tile DSL (rows GM -> UB -> GM), and its host code.
//!
//! CONTRACT (the op layer in `mod.rs` calls exactly this): `run` receives validated inputs.
//!
//! # Kernel
//!
//! Vector program only (the cube has no path from L1 to GM, so `gather_in_l1` cannot produce a
//! GM result). The `n` output rows are split into contiguous runs, one per AIV (two per
//! block). Each AIV walks its run in batches of up to `batch_rows` rows
//! (`templates::row_copy::emit_row_gather`), two batch buffers in flight:
//!
//! ```text
//! per batch (buffer b, rows u0 .. u0 + m):
//!   per row u:  S     t = indices[u]; e = block_table[t / block_size]   (read_scalar)
//!                     physical row = e * block_size + t % block_size
//!               MTE2  src[row, 0..size] -> row u - u0 of batch_ub[b]
//!   MTE3  batch_ub[b][0..m] -> out[u0 .. u0 + m, 0..size]                  (one store)
//! ```
//!
//! The output rows of a batch are consecutive, so one store moves the whole batch; the flags
//! (one event id per buffer, written by hand) are per batch. Rows wider than `CHUNK_BYTES`
//! (`templates::row_copy`) take the row-at-a-time copy (`emit_row_copy`, one UB buffer per
//! row in flight, each row in column chunks).
//!
//! Only the dtype and `size` are static (the compile key); `n`, `T`, `C`, the block-table
//! length and `block_size` are runtime scalar arguments, so a decode step never recompiles.

use crate::bridge::gm_i32;
use crate::error::OpError;
use crate::runtime::{compiled, Runner};
use crate::templates::row_copy::{
    batch_rows, block_dim_for, emit_row_copy, emit_row_gather, RowPlan, RowTiles,
};
use tile_backend::dsl::{Body, KernelBuilder};
use tile_backend::ir::{DType, Expr, Kernel};
use tile_backend::launch::{Arg, GmInOut, GmInput, GmTensor};

const OP: &str = "paged_gather";

/// One validated paged-gather call.
#[derive(Debug, Clone)]
pub struct GatherProblem<'a> {
    /// Source rows `[T, C]`, f32/f16/bf16 (borrowed: [`GmTensor::as_input`]).
    pub src: GmInput<'a>,
    /// Logical tokens (`n` of them), each `< block_table.len() * block_size` (checked).
    pub indices: Vec<i64>,
    /// Block table (`nb` entries); entries reached by an index are in `0..T / block_size`...
    /// precisely: `entry * block_size + block_size - 1 < T` is not required, but every physical
    /// row an index reaches is `< T` (checked).
    pub block_table: Vec<i64>,
    /// Tokens per block.
    pub block_size: usize,
    /// Columns gathered (`<= C`).
    pub size: usize,
}

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
    let bt = kb.input("block_table", DType::I32, [Expr::from(1), nb]);
    let out = kb.output("out", dtype, [n.clone(), Expr::from(size)]);
    // Row u's physical row: its token t = indices[u], then its block's table entry.
    let locate = move |b: &mut Body<'_>, u: Expr| -> Expr {
        let t = b.read_scalar("token", idx, u);
        let e = b.read_scalar("entry", bt, Expr::from(t) / bs.clone());
        Expr::from(e) * bs.clone() + Expr::from(t) % bs.clone()
    };
    if batch_rows(rt) > 0 {
        emit_row_gather(&mut kb, rt, n, (src, cols), out, &locate);
    } else {
        let plan = |b: &mut Body<'_>, u: Expr| RowPlan {
            when: None,
            src_row: locate(b, u.clone()),
            dst_row: u,
        };
        emit_row_copy(&mut kb, rt, n, src, cols, out, Expr::from(size), &plan);
    }
    kb.build()
}

/// Checks the parts of a problem the kernel's arguments depend on (the op layer validated the
/// values), so a malformed call is an error, never a panic.
fn check(p: &GatherProblem<'_>) -> Result<(usize, usize), OpError> {
    let [t, c] = p.src.shape[..] else {
        return Err(OpError::invalid(
            OP,
            "src",
            format!("must be 2-D [T, C], got shape {:?}", p.src.shape),
        ));
    };
    if !matches!(p.src.dtype, DType::F32 | DType::F16 | DType::BF16) {
        return Err(OpError::invalid(
            OP,
            "src",
            format!(
                "dtype {} is not supported: use f32, f16 or bf16",
                p.src.dtype
            ),
        ));
    }
    if p.size == 0 || p.size > c {
        return Err(OpError::invalid(
            OP,
            "size",
            format!("must be in 1..={c} (the source's columns), got {}", p.size),
        ));
    }
    if p.block_size == 0 {
        return Err(OpError::invalid(OP, "block_size", "must be positive"));
    }
    Ok((t, c))
}

/// Runs the gather: returns `[n, size]` in src's dtype.
pub fn run(runner: &mut Runner, p: &GatherProblem<'_>) -> Result<GmTensor, OpError> {
    let mut out = GmTensor::zeros(p.src.dtype, &[p.indices.len(), p.size]);
    run_into(runner, p, &mut out.data)?;
    Ok(out)
}

/// [`run`] writing the `[n, size]` result into `out` (`n * size` zero-initialised elements of
/// src's dtype, as little-endian bytes) in place: the op gathers straight into the buffer its
/// candle tensor then owns, with no result copy.
pub fn run_into(runner: &mut Runner, p: &GatherProblem<'_>, out: &mut [u8]) -> Result<(), OpError> {
    let (t, c) = check(p)?;
    let dtype = p.src.dtype;
    let n = p.indices.len();
    let want = n * p.size * dtype.size_bytes() as usize;
    if out.len() != want {
        return Err(OpError::Package {
            op: OP,
            why: format!(
                "the result buffer holds {} bytes, [{n}, {}] {dtype} needs {want}",
                out.len(),
                p.size
            ),
        });
    }
    if n == 0 {
        return Ok(());
    }
    let size = p.size as u64;
    let key = format!("{OP}/{dtype}/{size}");
    let kernel = compiled(OP, &key, || gather_kernel(dtype, size))?;
    let nb = p.block_table.len();
    let named = vec![
        ("n", Arg::Int(n as i64)),
        ("tokens", Arg::Int(t as i64)),
        ("cols", Arg::Int(c as i64)),
        ("table_len", Arg::Int(nb as i64)),
        ("block_size", Arg::Int(p.block_size as i64)),
        ("src", Arg::Input(p.src.clone())),
        ("indices", Arg::Tensor(gm_i32(&[1, n], &p.indices))),
        ("block_table", Arg::Tensor(gm_i32(&[1, nb], &p.block_table))),
        (
            "out",
            Arg::InOut(GmInOut {
                dtype,
                shape: vec![n, p.size],
                data: out,
            }),
        ),
    ];
    runner.launch_named(&kernel, block_dim_for(n), named)?;
    Ok(())
}
