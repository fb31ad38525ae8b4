//! `paged_gather`: rows of a paged buffer gathered by logical token index (the semantics of
//! `gather_in_l1`, ASCEND950.md §8) as a candle op.
//!
//! `src [T, C]`, `indices [1, n]`, `block_table [1, nb]`: row `i` of the result is
//! `src[block_table[t / block_size] * block_size + t % block_size, 0..size]` for
//! `t = indices[0, i]`.

pub(crate) mod kernel;
mod reference;
pub(crate) mod shape;

use crate::backend::Backend;
use crate::bridge::{self, Bridge};
use crate::error::OpError;
use crate::registry::Checked;
use candle_core::{CpuStorage, CustomOp1, Layout, Shape, Tensor};
pub use shape::PagedGatherShape;
use tile_backend::ir::DType;

const OP: &str = "paged_gather";

/// Gathers `n` rows of `src [T, C]` by logical token index through a block table: returns
/// `[n, size]` in src's dtype (f32, f16 or bf16).
///
/// `indices [1, n]` (I32/I64) are logical tokens, each in `0..nb * block_size`; `block_table
/// [1, nb]` (I32/I64/U32) maps token `t` to physical row `block_table[0, t / block_size] *
/// block_size + t % block_size`, which must be `< T` (only entries an index reaches are checked);
/// `size` columns (`1..=C`) are kept. A non-contiguous `src` is made contiguous first.
///
/// `backend`: `None` uses the process default ([`Backend::from_env`]).
///
/// # Errors
/// [`OpError::Invalid`] naming the argument for any broken rule; [`OpError::DeviceUnavailable`]
/// for [`Backend::Ascend950`] after the package is written; kernel errors for
/// [`Backend::TileSim`].
pub fn paged_gather(
    src: &Tensor,
    indices: &Tensor,
    block_table: &Tensor,
    block_size: usize,
    size: usize,
    backend: Option<Backend>,
) -> Result<Tensor, OpError> {
    let backend = bridge::resolve_backend(backend)?;
    let call = GatherCall::validate(src, indices, block_table, block_size, size)?;
    // A non-contiguous src is made contiguous (docs/ops.md), for every backend.
    let src = &src.contiguous()?;
    match backend {
        Backend::Reference => reference::paged_gather(src, &call),
        Backend::TileSim | Backend::Ascend950 => {
            let op = GatherOp {
                call,
                backend,
                bridge: Bridge::new(OP),
            };
            Ok(op.bridge.finish(src.contiguous()?.apply_op1_no_bwd(&op))?.0)
        }
    }
}

/// One validated `paged_gather` call: its [`shape`](Self::shape) (what the launch plan, the
/// kernel and `tileops emit --op paged-gather` read) and the host copies of the index arguments.
/// Made only by [`GatherCall::validate`]; the kernel runs it with [`kernel::run`] on src's
/// storage.
#[derive(Debug, Clone)]
pub(crate) struct GatherCall {
    /// The call's shape: dtype, rows gathered `n` and columns kept `size`.
    pub shape: Checked<PagedGatherShape>,
    /// Rows `T` of src.
    pub(crate) tokens: usize,
    /// Columns `C` of src (`>= size`).
    pub(crate) cols: usize,
    /// Tokens per block.
    pub(crate) block_size: usize,
    /// Logical tokens (`n` of them), each `< block_table.len() * block_size`.
    pub(crate) indices: Vec<i64>,
    /// Block table (`nb` entries); every physical row an index reaches is `< T`.
    pub(crate) block_table: Vec<i64>,
    /// Physical row of each index (`< T`).
    pub(crate) rows: Vec<i64>,
}

impl GatherCall {
    /// Checks a call of [`paged_gather`] (every rule its doc states) and reads the indices and
    /// the block table.
    ///
    /// # Errors
    /// [`OpError::Invalid`] naming the argument for any broken rule.
    pub fn validate(
        src: &Tensor,
        indices: &Tensor,
        block_table: &Tensor,
        block_size: usize,
        size: usize,
    ) -> Result<GatherCall, OpError> {
        let sd = bridge::check_data(OP, "src", src, "[T, C]", 2)?;
        let (t_rows, cols) = (sd[0], sd[1]);
        let (id, idx) = bridge::check_positions(OP, "indices", indices, "[1, n]", 2)?;
        bridge::check_dim(OP, "indices", &id, 0, "rows", 1, "indices is [1, n]")?;
        let (td, table) = bridge::check_index(
            OP,
            "block_table",
            block_table,
            "[1, nb]",
            2,
            bridge::TABLE_DTYPES,
        )?;
        bridge::check_dim(
            OP,
            "block_table",
            &td,
            0,
            "rows",
            1,
            "block_table is [1, nb]",
        )?;
        if block_size == 0 || block_size as u64 > crate::limits::MAX_POSITION as u64 {
            return Err(OpError::invalid(
                OP,
                "block_size",
                format!(
                    "must be in 1..={} (the kernels take it as a 32-bit integer), found {block_size}",
                    crate::limits::MAX_POSITION
                ),
            ));
        }
        if size == 0 || size > cols {
            return Err(OpError::invalid(
                OP,
                "size",
                format!("must be in 1..={cols} (the columns C of src [T, C]), found {size}"),
            ));
        }
        let nb = td[1];
        let capacity = (nb as u128) * (block_size as u128);
        let mut rows = Vec::with_capacity(idx.len());
        for (i, &t) in idx.iter().enumerate() {
            if t < 0 || (t as u128) >= capacity {
                return Err(OpError::invalid(
                    OP,
                    "indices",
                    format!(
                        "indices[0, {i}] = {t} must be in 0..{capacity} (block table capacity {nb} blocks * block_size {block_size})"
                    ),
                ));
            }
            let col = (t as u128 / block_size as u128) as usize;
            let off = (t as u128 % block_size as u128) as i128;
            let entry = table[col];
            let phys = (entry as i128) * (block_size as i128) + off;
            if entry < 0 || phys >= t_rows as i128 {
                return Err(OpError::invalid(
                    OP,
                    "block_table",
                    format!(
                        "entry [0, {col}] = {entry} (reached by indices[0, {i}] = {t}) maps to physical row {phys}, which must be in 0..{t_rows} (the rows T of src)"
                    ),
                ));
            }
            rows.push(phys as i64);
        }
        let shape = PagedGatherShape {
            dtype: bridge::data_dtype(OP, "src", src.dtype())?,
            n: idx.len(),
            size,
        };
        let shape = Checked::call(shape, OP, &[("dtype", "src"), ("n", "indices")])?;
        Ok(GatherCall {
            shape,
            tokens: t_rows,
            cols,
            block_size,
            indices: idx,
            block_table: table,
            rows,
        })
    }
}

/// The candle op running the tile kernel (simulated, or packaged for the Ascend 950).
struct GatherOp {
    call: GatherCall,
    backend: Backend,
    bridge: Bridge,
}

impl GatherOp {
    fn forward(&self, s: &CpuStorage, l: &Layout) -> Result<((CpuStorage, Shape), ()), OpError> {
        let src = bridge::gm_input(OP, "src", s, l)?;
        let mut runner = bridge::runner(OP, self.backend);
        let shape = &self.call.shape;
        // The kernel writes into the storage the result tensor then owns (no result copy).
        let storage = match shape.dtype {
            DType::F32 => CpuStorage::F32(gather_into(&mut runner, &self.call, src)?),
            DType::F16 => CpuStorage::F16(gather_into(&mut runner, &self.call, src)?),
            DType::BF16 => CpuStorage::BF16(gather_into(&mut runner, &self.call, src)?),
            other => {
                return Err(OpError::invalid(
                    OP,
                    "src",
                    format!("dtype {other} is not supported: use f32, f16 or bf16"),
                ))
            }
        };
        runner.finish()?;
        Ok(((storage, Shape::from((shape.n, shape.size))), ()))
    }
}

/// The `n * size` elements of `T` (src's element type) the gather writes, in a vector it
/// writes straight into: its spare capacity is lent uninitialised ([`kernel::run_uninit`]), so
/// the 2 MiB result of a 2048-row gather is not zero-filled first.
fn gather_into<T: bytemuck::Pod>(
    runner: &mut crate::runtime::Runner,
    call: &GatherCall,
    src: tile_backend::launch::GmInput<'_>,
) -> Result<Vec<T>, OpError> {
    let n = call.shape.n * call.shape.size;
    let mut out: Vec<T> = Vec::with_capacity(n);
    let spare = out.spare_capacity_mut();
    let bytes = std::mem::size_of_val(spare).min(n * std::mem::size_of::<T>());
    // SAFETY: the spare capacity holds at least `n` elements of `T` (`with_capacity`), so
    // `bytes` (at most `n * size_of::<T>()`) bytes from its start are in bounds; viewing
    // `MaybeUninit<T>` storage as `MaybeUninit<u8>` asserts nothing about its contents, and
    // `MaybeUninit<u8>` needs no alignment.
    let raw = unsafe {
        std::slice::from_raw_parts_mut(
            spare.as_mut_ptr().cast::<std::mem::MaybeUninit<u8>>(),
            bytes,
        )
    };
    kernel::run_uninit(runner, call, src, raw)?;
    // SAFETY: `run_uninit` returned `Ok`, so the launch initialised all `bytes` bytes (the
    // contract of `tile_backend::launch::GmOutput`), and it checked they are exactly
    // `n * size_of::<T>()`; `T` is `Pod`, so any initialised bytes are a valid `T`.
    unsafe { out.set_len(n) };
    Ok(out)
}

impl CustomOp1 for GatherOp {
    fn name(&self) -> &'static str {
        OP
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        self.bridge.forward(|| self.forward(s, l))
    }
}
