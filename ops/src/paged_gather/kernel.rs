//! The paged-gather kernel in the tile DSL (rows GM -> UB -> GM), and its host code.
//!
//! CONTRACT (the op layer in `mod.rs` calls exactly this): `run` receives validated inputs.
//!
//! # Kernel
//!
//! Vector program only (the cube has no path from L1 to GM, so `gather_in_l1` cannot produce a
//! GM result). The `n` output rows are split into contiguous runs, one per AIV (two per
//! block). Each AIV walks its run `DEPTH` rows at a time, one UB buffer per row in flight:
//!
//! ```text
//! per row u (buffer u % DEPTH):
//!   S     t = indices[u]; e = block_table[t / block_size]       (read_scalar)
//!         physical row = e * block_size + t % block_size
//!   MTE2  src[row, 0..size] -> row_ub[slot]  (valid [1, size], columns padded to 32 bytes)
//!   MTE3  row_ub[slot] -> out[u, 0..size]
//! ```
//!
//! Buffer `j` has its own event id `j` for the MTE2 -> MTE3 "loaded" flag and the loop-carried
//! MTE3 -> MTE2 "free" flag, so loads of later rows overlap stores of earlier ones. The flags
//! are written by hand: the sync pass would give the four buffers' MTE2 -> MTE3 pairs one
//! shared id (their spans look disjoint in program order), and the MTE2 pipe running ahead
//! could then set it twice before MTE3 waits (a lost signal the hazard check reports).
//! Rows wider than [`CHUNK_BYTES`] are copied in column chunks through the same buffer.
//!
//! Only the dtype and `size` are static (the compile key); `n`, `T`, `C`, the block-table
//! length and `block_size` are runtime scalar arguments, so a decode step never recompiles.

use crate::bridge::gm_i32;
use crate::error::OpError;
use crate::runtime::{compiled, Runner};
use tile_backend::dsl::{Body, KernelBuilder};
use tile_backend::ir::{DType, Expr, GmView, Kernel, Layout, MemSpace, ParamId, Pipe, TileType};
use tile_backend::sim::{Arg, GmInput, GmTensor};

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

/// Rows (row copies) each UB buffer group keeps in flight per AIV.
pub(crate) const DEPTH: u32 = 4;

/// The largest row chunk one UB buffer holds, in bytes (wider rows are copied in chunks).
pub(crate) const CHUNK_BYTES: u64 = 16 * 1024;

/// Clusters of the Ascend 950 (more blocks run in waves).
const MAX_BLOCKS: usize = 32;

/// The static shape of a row copy: `size` columns of `dtype` per row, moved through UB in
/// `chunks` column chunks of at most `chunk` columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RowTiles {
    /// Element type.
    pub dtype: DType,
    /// Columns per row.
    pub size: u64,
    /// Columns per chunk (the last chunk may be narrower).
    pub chunk: u64,
    /// Chunks per row.
    pub chunks: u64,
}

impl RowTiles {
    /// Chunks of at most [`CHUNK_BYTES`], balanced and rounded to 32 bytes.
    pub(crate) fn new(dtype: DType, size: u64) -> Self {
        let es = dtype.size_bytes().max(1);
        let align = (32 / es).max(1);
        let max_cols = (CHUNK_BYTES / es).max(align);
        let chunks = size.div_ceil(max_cols).max(1);
        let chunk = if chunks == 1 {
            size
        } else {
            size.div_ceil(chunks).div_ceil(align) * align
        };
        let chunks = size.div_ceil(chunk.max(1)).max(1);
        RowTiles {
            dtype,
            size,
            chunk,
            chunks,
        }
    }

    /// Allocated columns of a row buffer: the chunk padded to 32 bytes (unboxed UB rows).
    fn padded(&self) -> u64 {
        let align = (32 / self.dtype.size_bytes().max(1)).max(1);
        self.chunk.div_ceil(align) * align
    }
}

/// Where one row copy reads and writes, computed in the kernel from the row's index.
pub(crate) struct RowPlan {
    /// Copy only when this is non-zero (`None`: always).
    pub when: Option<Expr>,
    /// Source row.
    pub src_row: Expr,
    /// Destination row.
    pub dst_row: Expr,
}

/// Emits the vector program copying `units` rows of `rt.size` columns from `src` (row stride
/// `src_stride`) to `dst` (row stride `dst_stride`), split over all AIVs of all blocks, with
/// `DEPTH` UB buffers in flight. `plan(body, u)` emits the scalar code that locates row `u`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn emit_row_copy(
    kb: &mut KernelBuilder,
    rt: RowTiles,
    units: Expr,
    src: ParamId,
    src_stride: Expr,
    dst: ParamId,
    dst_stride: Expr,
    plan: &dyn Fn(&mut Body<'_>, Expr) -> RowPlan,
) {
    let ty = TileType::new(MemSpace::Vec, rt.dtype, 1, rt.padded(), Layout::ND);
    let chunked = rt.chunks > 1;
    let ty = if chunked {
        ty.dynamic()
    } else {
        ty.valid(1, rt.size)
    };
    let row_ub = kb.tile_group("row_ub", ty, DEPTH);
    let depth = i64::from(DEPTH);
    kb.vector(|v| {
        let workers = Expr::BlockDim * 2;
        let w = v.let_("worker", Expr::BlockIdx * 2 + Expr::SubBlockIdx);
        let per = v.let_("per", units.clone().ceil_div(workers));
        let lo = v.let_("lo", (Expr::from(w) * per).min(units.clone()));
        let hi = v.let_("hi", (Expr::from(lo) + per).min(units.clone()));
        let iters = (Expr::from(hi) - lo).ceil_div(depth);
        // Buffer j is guarded by event j of both pipe pairs: MTE3 -> MTE2 "free" (pre-set
        // here, taken before each load, set after each store, drained after the loop) and
        // MTE2 -> MTE3 "loaded". Written by hand: one id per buffer keeps every set ordered
        // after the wait that took the previous one, and a skipped row touches no flag.
        for j in 0..DEPTH {
            v.set_flag(Pipe::Mte3, Pipe::Mte2, event(j));
        }
        v.for_range("it", 0, iters, 1, |lb, it| {
            for j in 0..DEPTH {
                let ev = event(j);
                let u = Expr::from(lo) + Expr::from(it) * depth + i64::from(j);
                lb.if_(u.clone().lt(hi), |b| {
                    let u = b.let_("u", u.clone());
                    let p = plan(b, Expr::from(u));
                    let slot = row_ub.at(i64::from(j));
                    let copy = |c: &mut Body<'_>| {
                        for k in 0..rt.chunks {
                            let col = k * rt.chunk;
                            let width = rt.chunk.min(rt.size - col);
                            if k > 0 {
                                // The previous chunk's store has read the buffer.
                                c.set_flag(Pipe::Mte3, Pipe::Mte2, ev);
                            }
                            c.wait_flag(Pipe::Mte3, Pipe::Mte2, ev);
                            if chunked {
                                c.set_validshape(slot.clone(), 1, width);
                            }
                            c.load(
                                slot.clone(),
                                GmView::nd(
                                    src,
                                    p.src_row.clone() * src_stride.clone() + col,
                                    1,
                                    width,
                                    src_stride.clone(),
                                ),
                            );
                            c.set_flag(Pipe::Mte2, Pipe::Mte3, ev);
                            c.wait_flag(Pipe::Mte2, Pipe::Mte3, ev);
                            c.store(
                                GmView::nd(
                                    dst,
                                    p.dst_row.clone() * dst_stride.clone() + col,
                                    1,
                                    width,
                                    dst_stride.clone(),
                                ),
                                slot.clone(),
                            );
                        }
                        c.set_flag(Pipe::Mte3, Pipe::Mte2, ev);
                    };
                    match p.when.clone() {
                        Some(cond) => b.if_(cond, copy),
                        None => copy(b),
                    }
                });
            }
        });
        for j in 0..DEPTH {
            v.wait_flag(Pipe::Mte3, Pipe::Mte2, event(j));
        }
    });
}

/// The event id guarding buffer `j` (DEPTH <= 8 ids per pipe pair).
fn event(j: u32) -> u8 {
    u8::try_from(j).unwrap_or(u8::MAX)
}

/// Blocks to launch for `units` row copies: as many as give every AIV a row, at most one wave
/// (the copy is bound by the scalar reads that locate each row, so it wants every AIV busy).
pub(crate) fn block_dim_for(units: usize) -> usize {
    units.div_ceil(2).clamp(1, MAX_BLOCKS)
}

/// The gather kernel for `dtype` rows of `size` columns. Arguments, in order: scalars `n`,
/// `tokens` (T), `cols` (C), `table_len` (nb), `block_size`; tensors `src [T, C]`,
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
    let plan = move |b: &mut Body<'_>, u: Expr| {
        let t = b.read_scalar("token", idx, u.clone());
        let e = b.read_scalar("entry", bt, Expr::from(t) / bs.clone());
        RowPlan {
            when: None,
            src_row: Expr::from(e) * bs.clone() + Expr::from(t) % bs.clone(),
            dst_row: u,
        }
    };
    emit_row_copy(&mut kb, rt, n, src, cols, out, Expr::from(size), &plan);
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
    let (t, c) = check(p)?;
    let dtype = p.src.dtype;
    let n = p.indices.len();
    let out = GmTensor::zeros(dtype, &[n, p.size]);
    if n == 0 {
        return Ok(out);
    }
    let size = p.size as u64;
    let key = format!("{OP}/{dtype}/{size}");
    let kernel = compiled(OP, &key, || gather_kernel(dtype, size))?;
    let nb = p.block_table.len();
    let mut args = vec![
        Arg::Int(n as i64),
        Arg::Int(t as i64),
        Arg::Int(c as i64),
        Arg::Int(nb as i64),
        Arg::Int(p.block_size as i64),
        Arg::Input(p.src.clone()),
        Arg::Tensor(gm_i32(&[1, n], &p.indices)),
        Arg::Tensor(gm_i32(&[1, nb], &p.block_table)),
        Arg::Tensor(out),
    ];
    runner.launch(&kernel, block_dim_for(n), &mut args)?;
    match args.pop() {
        Some(Arg::Tensor(out)) => Ok(out),
        _ => Err(OpError::Package {
            op: OP,
            why: "the launcher lost the output argument".into(),
        }),
    }
}
