//! Moving data between candle's CPU storage and the simulator's GM tensors.
//!
//! Data tensors (f32, f16, bf16) keep their dtype; index tensors (I64, U32, U8, I32-in-I64) are
//! converted to the I32 the kernels read, after the op has validated their values.

use crate::error::OpError;
use crate::limits::{MAX_ELEMENTS, MAX_POSITION};
use bytemuck::{cast_slice, cast_slice_mut, Pod};
use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, DType as CDType, Layout, Storage, Tensor};
use std::sync::Mutex;
use tile_backend::ir::DType;
use tile_backend::launch::{GmInOut, GmInput, GmTensor};

/// The tile dtype of a candle data dtype (f32, f16, bf16).
pub fn data_dtype(op: &'static str, arg: &'static str, d: CDType) -> Result<DType, OpError> {
    match d {
        CDType::F32 => Ok(DType::F32),
        CDType::F16 => Ok(DType::F16),
        CDType::BF16 => Ok(DType::BF16),
        other => Err(OpError::invalid(
            op,
            arg,
            format!("dtype {other:?} is not supported: use f32, f16 or bf16"),
        )),
    }
}

/// The contiguous element range of `layout`, or an error naming the argument.
fn contiguous(
    op: &'static str,
    arg: &'static str,
    layout: &Layout,
) -> Result<(usize, usize), OpError> {
    layout.contiguous_offsets().ok_or_else(|| {
        OpError::invalid(
            op,
            arg,
            "must be contiguous (call `.contiguous()` first)".to_string(),
        )
    })
}

/// A data tensor (f32/f16/bf16, or an FP8 e4m3 key cache and its ue8m0 scales as u8) of CPU
/// storage as a read-only kernel input borrowing the storage's bytes (no copy: the simulator
/// reads the candle buffer in place).
pub fn gm_input<'s>(
    op: &'static str,
    arg: &'static str,
    s: &'s CpuStorage,
    layout: &Layout,
) -> Result<GmInput<'s>, OpError> {
    let (a, b) = contiguous(op, arg, layout)?;
    let shape = layout.shape().dims().to_vec();
    let (dtype, data): (DType, &[u8]) = match s {
        CpuStorage::F32(v) => (DType::F32, cast_slice(&v[a..b])),
        CpuStorage::F16(v) => (DType::F16, cast_slice(&v[a..b])),
        CpuStorage::BF16(v) => (DType::BF16, cast_slice(&v[a..b])),
        // FP8 key caches and their ue8m0 scales (the ops that take them check their dtypes).
        CpuStorage::F8E4M3(v) => (DType::F8E4M3, cast_slice(&v[a..b])),
        CpuStorage::F8E8M0(v) => (DType::U8, &v[a..b]),
        other => {
            return Err(OpError::invalid(
                op,
                arg,
                format!(
                    "dtype {:?} is not supported: use f32, f16 or bf16",
                    other.dtype()
                ),
            ))
        }
    };
    Ok(GmInput { dtype, shape, data })
}

/// The bytes of elements `a..b` of `v`, or an error naming the argument when the layout's range
/// is not inside the storage.
fn bytes_mut<'v, T: Pod>(
    op: &'static str,
    arg: &'static str,
    v: &'v mut [T],
    a: usize,
    b: usize,
) -> Result<&'v mut [u8], OpError> {
    let len = v.len();
    v.get_mut(a..b).map(cast_slice_mut::<T, u8>).ok_or_else(|| {
        OpError::invalid(
            op,
            arg,
            format!("its layout spans elements {a}..{b} of a {len}-element storage"),
        )
    })
}

/// A data tensor (f32/f16/bf16) of CPU storage as a kernel argument borrowing the storage's
/// bytes mutably (no copy: the simulator reads the candle buffer and writes the kernel's
/// results into it in place). The argument has the layout's shape; a kernel may view it with
/// any shape of the same element count.
pub fn gm_inout<'s>(
    op: &'static str,
    arg: &'static str,
    s: &'s mut CpuStorage,
    layout: &Layout,
) -> Result<GmInOut<'s>, OpError> {
    let (a, b) = contiguous(op, arg, layout)?;
    let shape = layout.shape().dims().to_vec();
    let (dtype, data): (DType, &mut [u8]) = match s {
        CpuStorage::F32(v) => (DType::F32, bytes_mut(op, arg, v, a, b)?),
        CpuStorage::F16(v) => (DType::F16, bytes_mut(op, arg, v, a, b)?),
        CpuStorage::BF16(v) => (DType::BF16, bytes_mut(op, arg, v, a, b)?),
        other => {
            return Err(OpError::invalid(
                op,
                arg,
                format!(
                    "dtype {:?} is not supported: use f32, f16 or bf16",
                    other.dtype()
                ),
            ))
        }
    };
    Ok(GmInOut { dtype, shape, data })
}

/// The integer values of an index tensor (I32, I64, U32, U8; any shape, made contiguous), for host-side
/// validation and conversion to I32.
pub fn index_values(op: &'static str, arg: &'static str, t: &Tensor) -> Result<Vec<i64>, OpError> {
    let t = t.flatten_all()?;
    Ok(match t.dtype() {
        CDType::I64 => t.to_vec1::<i64>()?,
        CDType::I32 => t.to_vec1::<i32>()?.into_iter().map(i64::from).collect(),
        CDType::U32 => t.to_vec1::<u32>()?.into_iter().map(i64::from).collect(),
        CDType::U8 => t.to_vec1::<u8>()?.into_iter().map(i64::from).collect(),
        other => {
            return Err(OpError::invalid(
                op,
                arg,
                format!("dtype {other:?} is not an index dtype: use i32, i64 or u32"),
            ))
        }
    })
}

/// An I32 GM tensor from validated integer values (every value fits i32: the op checked it).
#[allow(dead_code)] // for kernel host code
pub fn gm_i32(shape: &[usize], values: &[i64]) -> GmTensor {
    GmTensor::from_i64(DType::I32, shape, values)
}

/// Little-endian element bytes (any alignment) as a vector of `T`; trailing bytes that do not
/// fill an element are ignored.
fn collect<T: Pod>(bytes: &[u8]) -> Vec<T> {
    let n = bytes.len() / std::mem::size_of::<T>();
    let bytes = &bytes[..n * std::mem::size_of::<T>()];
    // One copy into a new vector (no zero fill first); unaligned bytes are read element-wise.
    match bytemuck::try_cast_slice::<u8, T>(bytes) {
        Ok(v) => v.to_vec(),
        Err(_) => bytes
            .chunks_exact(std::mem::size_of::<T>())
            .map(bytemuck::pod_read_unaligned)
            .collect(),
    }
}

/// A GM tensor's bytes as CPU storage of the same dtype (f32, f16, bf16 or i64 results).
pub fn storage_from_gm(op: &'static str, t: &GmTensor) -> Result<CpuStorage, OpError> {
    Ok(match t.dtype {
        DType::F32 => CpuStorage::F32(collect::<f32>(&t.data)),
        DType::F16 => CpuStorage::F16(collect::<half::f16>(&t.data)),
        DType::BF16 => CpuStorage::BF16(collect::<half::bf16>(&t.data)),
        DType::I64 => CpuStorage::I64(collect::<i64>(&t.data)),
        other => {
            return Err(OpError::Internal {
                op,
                what: format!("result dtype {other} has no candle storage"),
            })
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Argument checks shared by the ops. Every error names the op, the argument and the rule.
// ---------------------------------------------------------------------------------------------

/// The dtypes accepted for index tensors (indices, context lengths, slot mappings).
pub(crate) const INDEX_DTYPES: &[CDType] = &[CDType::I32, CDType::I64];

/// The dtypes accepted for block tables.
pub(crate) const TABLE_DTYPES: &[CDType] = &[CDType::I32, CDType::I64, CDType::U32];

/// Checks that `t` lives on the CPU (the simulator and the reference run on the host).
pub(crate) fn check_cpu(op: &'static str, arg: &'static str, t: &Tensor) -> Result<(), OpError> {
    if t.device().is_cpu() {
        Ok(())
    } else {
        Err(OpError::invalid(
            op,
            arg,
            format!(
                "must be on the CPU device, found {:?} (the simulator and the reference run on the host)",
                t.device().location()
            ),
        ))
    }
}

/// Checks device and rank (empty dims allowed); returns the dims. `form` names the dims.
pub(crate) fn check_rank<'a>(
    op: &'static str,
    arg: &'static str,
    t: &'a Tensor,
    form: &str,
    rank: usize,
) -> Result<&'a [usize], OpError> {
    check_cpu(op, arg, t)?;
    let dims = t.dims();
    if dims.len() != rank {
        return Err(OpError::invalid(
            op,
            arg,
            format!(
                "must have rank {rank} {form}, found rank {} with shape {dims:?}",
                dims.len()
            ),
        ));
    }
    check_elements(op, arg, dims)?;
    Ok(dims)
}

/// Checks that a tensor of `dims` has at most [`MAX_ELEMENTS`] elements (its logical shape:
/// a stride-0 view counts them all), before anything is copied or allocated.
pub(crate) fn check_elements(
    op: &'static str,
    arg: &'static str,
    dims: &[usize],
) -> Result<(), OpError> {
    let elems = dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    if elems.is_none_or(|n| n > MAX_ELEMENTS) {
        return Err(OpError::invalid(
            op,
            arg,
            format!(
                "shape {dims:?} has more than {MAX_ELEMENTS} elements, the most a tensor argument may have"
            ),
        ));
    }
    Ok(())
}

/// Checks that a result the call would make (`what`, of `dims`, decided by argument `arg`)
/// has at most [`MAX_ELEMENTS`] elements, before anything is allocated.
pub(crate) fn check_result_elements(
    op: &'static str,
    arg: &'static str,
    what: &str,
    dims: &[usize],
) -> Result<(), OpError> {
    let elems = dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    if elems.is_none_or(|n| n > MAX_ELEMENTS) {
        return Err(OpError::invalid(
            op,
            arg,
            format!(
                "the result {what} of shape {dims:?} would have more than {MAX_ELEMENTS} elements, the most a tensor may have"
            ),
        ));
    }
    Ok(())
}

/// Checks device, rank and non-emptiness; returns the dims. `form` names the dims, e.g.
/// `"[B, H, Dqk]"`.
pub(crate) fn check_shape<'a>(
    op: &'static str,
    arg: &'static str,
    t: &'a Tensor,
    form: &str,
    rank: usize,
) -> Result<&'a [usize], OpError> {
    let dims = check_rank(op, arg, t, form, rank)?;
    if dims.contains(&0) {
        return Err(OpError::invalid(
            op,
            arg,
            format!("must not be empty: shape {form} is {dims:?}"),
        ));
    }
    Ok(dims)
}

/// [`check_index`] for tensors of positions, slots or counts (indices, context lengths, slot
/// mappings, top-k lengths): every value must also fit the kernels' 32-bit integers
/// ([`MAX_POSITION`]); the op checks its own lower bounds.
pub(crate) fn check_positions(
    op: &'static str,
    arg: &'static str,
    t: &Tensor,
    form: &str,
    rank: usize,
) -> Result<(Vec<usize>, Vec<i64>), OpError> {
    let (dims, values) = check_index(op, arg, t, form, rank, INDEX_DTYPES)?;
    if let Some((i, v)) = values
        .iter()
        .enumerate()
        .find(|(_, &v)| v > MAX_POSITION || v < i64::from(i32::MIN))
    {
        return Err(OpError::invalid(
            op,
            arg,
            format!(
                "element {i} = {v} does not fit the kernels' 32-bit positions (at most {MAX_POSITION})"
            ),
        ));
    }
    Ok((dims, values))
}

/// Checks a data tensor (f32, f16, bf16): device, rank, non-empty; returns its dims.
pub(crate) fn check_data<'a>(
    op: &'static str,
    arg: &'static str,
    t: &'a Tensor,
    form: &str,
    rank: usize,
) -> Result<&'a [usize], OpError> {
    let dims = check_shape(op, arg, t, form, rank)?;
    data_dtype(op, arg, t.dtype())?;
    Ok(dims)
}

/// Checks that `t` has the same dtype as the reference argument `ref_arg`.
pub(crate) fn check_same_dtype(
    op: &'static str,
    arg: &'static str,
    t: &Tensor,
    ref_arg: &str,
    want: CDType,
) -> Result<(), OpError> {
    if t.dtype() == want {
        Ok(())
    } else {
        Err(OpError::invalid(
            op,
            arg,
            format!(
                "dtype {:?} differs from `{ref_arg}` ({want:?}): all data tensors must share one dtype",
                t.dtype()
            ),
        ))
    }
}

/// Checks an integer tensor (device, rank, non-empty, dtype in `allowed`) and returns its dims and
/// values (row-major, whatever the tensor's strides).
pub(crate) fn check_index(
    op: &'static str,
    arg: &'static str,
    t: &Tensor,
    form: &str,
    rank: usize,
    allowed: &[CDType],
) -> Result<(Vec<usize>, Vec<i64>), OpError> {
    let dims = check_shape(op, arg, t, form, rank)?.to_vec();
    if !allowed.contains(&t.dtype()) {
        let names: Vec<String> = allowed.iter().map(|d| format!("{d:?}")).collect();
        return Err(OpError::invalid(
            op,
            arg,
            format!(
                "dtype {:?} is not accepted: use one of {}",
                t.dtype(),
                names.join(", ")
            ),
        ));
    }
    let values = index_values(op, arg, t)?;
    Ok((dims, values))
}

/// Checks that `dims[axis] == want`, naming what the size must agree with.
pub(crate) fn check_dim(
    op: &'static str,
    arg: &'static str,
    dims: &[usize],
    axis: usize,
    name: &str,
    want: usize,
    why: &str,
) -> Result<(), OpError> {
    if dims[axis] == want {
        Ok(())
    } else {
        Err(OpError::invalid(
            op,
            arg,
            format!(
                "dim {axis} ({name}) is {}, but must be {want} ({why}); shape {dims:?}",
                dims[axis]
            ),
        ))
    }
}

/// Checks that `scale` is finite.
pub(crate) fn check_scale(op: &'static str, scale: f32) -> Result<(), OpError> {
    if scale.is_finite() {
        Ok(())
    } else {
        Err(OpError::invalid(
            op,
            "scale",
            format!("must be finite, found {scale}"),
        ))
    }
}

/// Checks a `slot_mapping` of `op`: each value -1 (skip) or a slot in `0..num_slots`, the valid ones
/// distinct. O(rows written), whatever the cache's size (it never allocates per cache slot).
pub(crate) fn check_slots(
    op: &'static str,
    slots: &[i64],
    num_slots: usize,
    (num_blocks, block_size): (usize, usize),
) -> Result<(), OpError> {
    // The first row writing each slot: O(rows written), whatever the cache's size.
    let mut first: std::collections::HashMap<i64, usize> =
        std::collections::HashMap::with_capacity(slots.len());
    for (i, &s) in slots.iter().enumerate() {
        if s == -1 {
            continue;
        }
        if s < -1 || s >= num_slots as i64 {
            return Err(OpError::invalid(
                op,
                "slot_mapping",
                format!(
                    "slot_mapping[{i}] = {s} must be -1 (skip) or in 0..{num_slots} (num_blocks {num_blocks} * block_size {block_size})"
                ),
            ));
        }
        if let Some(f) = first.insert(s, i) {
            return Err(OpError::invalid(
                op,
                "slot_mapping",
                format!("slot_mapping[{i}] = {s} duplicates slot_mapping[{f}]: valid slots must be distinct"),
            ));
        }
    }
    Ok(())
}

/// The block table `[rows, max_blocks]` (I32/I64/U32) and the context lengths `[rows]` (I32/I64)
/// of a call with one table row and one context per query row (`row` names that dim, e.g.
/// `"B"`; `why` says which argument sets it): their shapes checked, their values read. Returns
/// `(max_blocks, table, lens)`; the lengths' range is [`check_context_lens`]'s.
pub(crate) fn read_table_and_lens(
    op: &'static str,
    block_table: &Tensor,
    context_lens: &Tensor,
    (rows, row, why): (usize, &str, &str),
) -> Result<(usize, Vec<i64>, Vec<i64>), OpError> {
    let form = format!("[{row}, max_blocks]");
    let (td, table) = check_index(op, "block_table", block_table, &form, 2, TABLE_DTYPES)?;
    check_dim(op, "block_table", &td, 0, row, rows, why)?;
    let (cd, lens) = check_positions(op, "context_lens", context_lens, &format!("[{row}]"), 1)?;
    check_dim(op, "context_lens", &cd, 0, row, rows, why)?;
    Ok((td[1], table, lens))
}

/// Checks every context length in `min..=max_blocks * block_size` (the table's capacity).
pub(crate) fn check_context_lens(
    op: &'static str,
    lens: &[i64],
    min: i64,
    max_blocks: usize,
    block_size: usize,
) -> Result<(), OpError> {
    let capacity = (max_blocks as u128 * block_size as u128).min(i64::MAX as u128) as i64;
    match lens
        .iter()
        .enumerate()
        .find(|(_, &l)| !(min..=capacity).contains(&l))
    {
        None => Ok(()),
        Some((b, len)) => Err(OpError::invalid(
            op,
            "context_lens",
            format!(
                "context_lens[{b}] = {len} must be in {min}..={capacity} (block table capacity {max_blocks} blocks * block_size {block_size})"
            ),
        )),
    }
}

/// The physical slot (`block * block_size + offset`) of logical token `t` of row `row` of a
/// block table (`max_blocks` columns), checking the entry it reaches: non-negative and
/// `< num_blocks`. `who` describes the index reaching it, for the message. `t` must already be in
/// `0..max_blocks * block_size`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn reach(
    op: &'static str,
    table: &[i64],
    row: usize,
    max_blocks: usize,
    block_size: usize,
    num_blocks: usize,
    t: i64,
    who: impl FnOnce() -> String,
) -> Result<i64, OpError> {
    let bs = block_size as i64;
    let col = (t / bs) as usize;
    let entry = table[row * max_blocks + col];
    if entry < 0 || entry >= num_blocks as i64 {
        return Err(OpError::invalid(
            op,
            "block_table",
            format!(
                "entry [{row}, {col}] = {entry} (reached by {}) must be in 0..{num_blocks} (num_blocks)",
                who()
            ),
        ));
    }
    let slot = entry * bs + t % bs;
    if slot > MAX_POSITION {
        return Err(OpError::invalid(
            op,
            "block_table",
            format!(
                "entry [{row}, {col}] = {entry} (reached by {}) puts the token at slot {slot}, past the kernels' 32-bit positions (at most {MAX_POSITION})",
                who()
            ),
        ));
    }
    Ok(slot)
}

/// A kernel that does not fit the machine's buffers for the call's shape (a capacity error of
/// the compiler) as an [`OpError::Invalid`] naming the user's argument `arg` whose size decides
/// it, with the call's shape (`shape`) and the compiler's numbers; any other error unchanged.
/// The kernel backends compile before they run anything, so this is reported up front.
pub(crate) fn kernel_limit(
    e: OpError,
    arg: &'static str,
    shape: impl FnOnce() -> String,
) -> OpError {
    use tile_backend::passes::{memory::PlanError, CompileError};
    use tile_backend::verify::Rule;
    let OpError::Compile { op, source, .. } = &e else {
        return e;
    };
    let why = match source {
        CompileError::Verify(v) => v
            .errors
            .iter()
            .find(|d| d.rule == Rule::Capacity)
            .map(|d| d.message.clone()),
        CompileError::Plan(p @ PlanError::Capacity { .. }) => Some(p.to_string()),
        _ => None,
    };
    match why {
        Some(why) => OpError::invalid(
            op,
            arg,
            format!(
                "{} is too large for the kernel backends (TileSim, Ascend950): {why}; docs/ops.md lists the limits",
                shape()
            ),
        ),
        None => e,
    }
}

/// Resolves the backend of a call: the given one or the process default.
pub(crate) fn resolve_backend(backend: Option<crate::Backend>) -> Result<crate::Backend, OpError> {
    match backend {
        Some(b) => Ok(b),
        None => crate::Backend::from_env(),
    }
}

/// The side channels of one candle custom-op call that runs tile kernels, in one place for
/// every op: the original [`OpError`] (candle wraps errors crossing its op boundary), the op's
/// extra output beside the tensor candle returns (`X`: attention's lse; `()` for none), and the
/// result bytes handed back to the thread's workspace ([`Bridge::storage`]). An op's `cpu_fwd`
/// runs its body through [`Bridge::forward`]; its public function reads the outcome with
/// [`Bridge::finish`]. A `Bridge` belongs to one call, so concurrent calls never share one.
#[derive(Debug)]
pub(crate) struct Bridge<X = ()> {
    op: &'static str,
    error: Mutex<Option<OpError>>,
    extra: Mutex<Option<X>>,
}

impl<X> Bridge<X> {
    /// The side channels of one call of `op`.
    pub(crate) fn new(op: &'static str) -> Self {
        Bridge {
            op,
            error: Mutex::new(None),
            extra: Mutex::new(None),
        }
    }

    /// Runs a forward body for candle: its first result goes back to candle, its extra output
    /// is kept for [`Bridge::finish`]; an error is kept and stands as a candle error.
    pub(crate) fn forward<R>(
        &self,
        body: impl FnOnce() -> Result<(R, X), OpError>,
    ) -> candle_core::Result<R> {
        match body() {
            Ok((r, x)) => {
                if let Ok(mut g) = self.extra.lock() {
                    *g = Some(x);
                }
                Ok(r)
            }
            Err(e) => {
                let msg = e.to_string();
                if let Ok(mut g) = self.error.lock() {
                    *g = Some(e);
                }
                Err(candle_core::Error::Msg(msg))
            }
        }
    }

    /// The call's outcome: candle's result with the extra output, or the original error.
    pub(crate) fn finish<T>(&self, r: candle_core::Result<T>) -> Result<(T, X), OpError> {
        match r {
            Ok(t) => {
                let x = self.extra.lock().ok().and_then(|mut g| g.take());
                x.map(|x| (t, x)).ok_or_else(|| OpError::Internal {
                    op: self.op,
                    what: "the kernel returned no extra output".into(),
                })
            }
            Err(e) => Err(self
                .error
                .lock()
                .ok()
                .and_then(|mut g| g.take())
                .unwrap_or(OpError::Candle(e))),
        }
    }

    /// A kernel result copied into candle storage; its bytes then go back to this thread's
    /// workspace (see `templates::attention::recycle_result`), so a decode step does not
    /// allocate and page-fault a fresh workspace.
    pub(crate) fn storage(&self, out: GmTensor) -> Result<CpuStorage, OpError> {
        let storage = storage_from_gm(self.op, &out)?;
        crate::templates::attention::recycle_result(out);
        Ok(storage)
    }
}

/// Checks a kernel result's shape (a kernel defect otherwise, reported as such).
pub(crate) fn expect_shape(
    op: &'static str,
    got: &[usize],
    want: &[usize],
    what: &str,
) -> Result<(), OpError> {
    if got == want {
        Ok(())
    } else {
        Err(OpError::Internal {
            op,
            what: format!("the kernel returned {what} of shape {got:?}, expected {want:?}"),
        })
    }
}

/// The runner for a kernel backend: the simulator, or the package writer for the Ascend 950.
pub(crate) fn runner(op: &'static str, backend: crate::Backend) -> crate::runtime::Runner {
    crate::runtime::Runner::for_backend(op, backend)
}

/// The address of `t`'s storage (equal for tensors sharing one allocation).
pub(crate) fn storage_addr(t: &Tensor) -> usize {
    let (s, _) = t.storage_and_layout();
    std::ptr::from_ref::<Storage>(&s) as usize
}

/// Checks that storage handed to an op's host code (`dtype`, `bytes` long) is what its validated
/// call describes (`want` elements of `shape`, an element count, in `want_dtype`): the kernels see
/// it in the call's shape, so storage of another tensor is an error naming `arg`, never a
/// misread.
pub(crate) fn check_storage(
    op: &'static str,
    arg: &'static str,
    (dtype, bytes): (DType, usize),
    want_dtype: DType,
    elements: usize,
) -> Result<(), OpError> {
    if dtype != want_dtype {
        return Err(OpError::invalid(
            op,
            arg,
            format!("dtype {dtype} differs from the call's {want_dtype}"),
        ));
    }
    let want = elements.saturating_mul(dtype.size_bytes() as usize);
    if bytes != want {
        return Err(OpError::invalid(
            op,
            arg,
            format!("holds {bytes} bytes; the call's shape needs {want}"),
        ));
    }
    Ok(())
}
