//! Moving data between candle's CPU storage and the simulator's GM tensors.
//!
//! Data tensors (f32, f16, bf16) keep their dtype; index tensors (I64, U32, U8, I32-in-I64) are
//! converted to the I32 the kernels read, after the op has validated their values.

use crate::error::OpError;
use bytemuck::{cast_slice, pod_collect_to_vec};
use candle_core::{CpuStorage, DType as CDType, Layout, Storage, Tensor};
use tile_backend::ir::DType;
use tile_backend::sim::GmTensor;

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

/// A data tensor (f32/f16/bf16) of CPU storage as a GM tensor of the same dtype and shape.
pub fn gm_from_storage(
    op: &'static str,
    arg: &'static str,
    s: &CpuStorage,
    layout: &Layout,
) -> Result<GmTensor, OpError> {
    let (a, b) = contiguous(op, arg, layout)?;
    let shape = layout.shape().dims().to_vec();
    let (dtype, data): (DType, Vec<u8>) = match s {
        CpuStorage::F32(v) => (DType::F32, cast_slice(&v[a..b]).to_vec()),
        CpuStorage::F16(v) => (DType::F16, cast_slice(&v[a..b]).to_vec()),
        CpuStorage::BF16(v) => (DType::BF16, cast_slice(&v[a..b]).to_vec()),
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
    Ok(GmTensor { dtype, shape, data })
}

/// A data tensor as a GM tensor (see [`gm_from_storage`]).
pub fn gm_from_tensor(
    op: &'static str,
    arg: &'static str,
    t: &Tensor,
) -> Result<GmTensor, OpError> {
    let (storage, layout) = t.storage_and_layout();
    match &*storage {
        Storage::Cpu(s) => gm_from_storage(op, arg, s, layout),
        _ => Err(OpError::invalid(
            op,
            arg,
            "must be on the CPU device (the simulator and the reference run on the host)",
        )),
    }
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
pub fn gm_i32(shape: &[usize], values: &[i64]) -> GmTensor {
    GmTensor::from_i64(DType::I32, shape, values)
}

/// A GM tensor's bytes as CPU storage of the same dtype (f32, f16, bf16 or i64 results).
pub fn storage_from_gm(op: &'static str, t: &GmTensor) -> Result<CpuStorage, OpError> {
    Ok(match t.dtype {
        DType::F32 => CpuStorage::F32(pod_collect_to_vec::<u8, f32>(&t.data)),
        DType::F16 => CpuStorage::F16(pod_collect_to_vec::<u8, half::f16>(&t.data)),
        DType::BF16 => CpuStorage::BF16(pod_collect_to_vec::<u8, half::bf16>(&t.data)),
        DType::I64 => CpuStorage::I64(pod_collect_to_vec::<u8, i64>(&t.data)),
        other => {
            return Err(OpError::Package {
                op,
                why: format!("result dtype {other} has no candle storage"),
            })
        }
    })
}
