//! The Reference backend of `quant_matmul`: an exact integer-valued product from candle's f32
//! matmul, then the Fixpipe's and the vector side's roundings modelled with candle ops.
//!
//! Exactness: int8 x int8 products are at most 127² = 16129 in magnitude, so over a K slice of
//! [`CHUNK`] = 1024 every partial sum is an integer below 2^24 and f32 arithmetic is exact in any
//! summation order. Longer K is cut into slices (zero-padded), multiplied as one batched matmul
//! and the slices summed in f64 (exact below 2^53).

use super::weight::{int8_tensor, QuantizedWeight};
use super::QuantCall;
use crate::error::OpError;
use candle_core::{DType as CDType, Device, Tensor};
use tile_backend::ir::DType;

/// K slice of the exact product (`127² · 1024 < 2^24`).
const CHUNK: usize = 1024;

/// The weight as the product's right operand: f32 `[K, N]` (K <= CHUNK) or `[C, CHUNK, N]`
/// slices; built once per weight and kept.
fn weight_operand(w: &QuantizedWeight) -> Result<&Tensor, OpError> {
    if let Some(t) = w.reference.get() {
        return Ok(t);
    }
    let (n, k) = (w.n(), w.k());
    let f = int8_tensor(w.data(), (n, k), &Device::Cpu)?;
    let t = if k <= CHUNK {
        f.t()?.contiguous()?
    } else {
        let c = k.div_ceil(CHUNK);
        f.pad_with_zeros(1, 0, c * CHUNK - k)?
            .reshape((n, c, CHUNK))?
            .permute((1, 2, 0))?
            .contiguous()?
    };
    Ok(w.reference.get_or_init(|| t))
}

/// `xq [M, K] · wq^T`, exact, as f64 `[M, N]`.
fn exact_product(xq: &[i8], m: usize, w: &QuantizedWeight) -> Result<Tensor, OpError> {
    let k = w.k();
    let b = weight_operand(w)?;
    let x = int8_tensor(xq, (m, k), &Device::Cpu)?;
    Ok(if k <= CHUNK {
        x.matmul(b)?.to_dtype(CDType::F64)?
    } else {
        let c = k.div_ceil(CHUNK);
        x.pad_with_zeros(1, 0, c * CHUNK - k)?
            .reshape((m, c, CHUNK))?
            .transpose(0, 1)?
            .contiguous()?
            .matmul(b)?
            .to_dtype(CDType::F64)?
            .sum(0)?
    })
}

/// The f32 value the Fixpipe starts from: the int32 accumulator converted to f32 (nearest even,
/// as `i32 as f32`; exact below 2^24).
fn acc_f32(xq: &[i8], m: usize, w: &QuantizedWeight) -> Result<Tensor, OpError> {
    Ok(exact_product(xq, m, w)?.to_dtype(CDType::F32)?)
}

/// `quant_matmul` on candle ops: `f16(acc · word)`, then `· row factor`, bias, ReLU, cast.
pub(crate) fn quant_matmul(
    w: &QuantizedWeight,
    call: &QuantCall<'_>,
    device: &Device,
) -> Result<Tensor, OpError> {
    let (m, n) = (call.shape.m, call.shape.n);
    let words = Tensor::from_slice(&call.words, (1, n), &Device::Cpu)?;
    let rows = Tensor::from_slice(&call.row_factor, (m, 1), &Device::Cpu)?;
    let d = acc_f32(&call.xq, m, w)?
        .broadcast_mul(&words)?
        .to_dtype(CDType::F16)?
        .to_dtype(CDType::F32)?;
    let mut y = d.broadcast_mul(&rows)?;
    if let Some(b) = &call.bias {
        y = y.broadcast_add(&Tensor::from_slice(b, (1, n), &Device::Cpu)?)?;
    }
    if call.shape.relu {
        y = y.relu()?;
    }
    let out = match call.shape.out_dtype {
        DType::F32 => CDType::F32,
        DType::F16 => CDType::F16,
        _ => CDType::BF16,
    };
    Ok(y.to_dtype(out)?.to_device(device)?)
}

/// Ties-to-even rounding in f32 arithmetic: adding and subtracting 1.5 · 2^23 rounds any |y| <
/// 2^22 to an integer, ties to even (IEEE round to nearest).
const RINT_MAGIC: f64 = 12_582_912.0;

/// `quant_matmul_int8` on candle ops: `sat(rint(relu?(f32(acc)) · word))`.
pub(crate) fn quant_matmul_int8(
    w: &QuantizedWeight,
    call: &QuantCall<'_>,
) -> Result<Vec<i8>, OpError> {
    let words = Tensor::from_slice(&call.words, (1, call.shape.n), &Device::Cpu)?;
    let mut acc = acc_f32(&call.xq, call.shape.m, w)?;
    if call.shape.relu {
        acc = acc.relu()?;
    }
    let q = acc
        .broadcast_mul(&words)?
        .clamp(-256f32, 256f32)?
        .affine(1.0, RINT_MAGIC)?
        .affine(1.0, -RINT_MAGIC)?
        .clamp(-128f32, 127f32)?
        .affine(1.0, 128.0)?
        .to_dtype(CDType::U8)?
        .flatten_all()?
        .to_vec1::<u8>()?;
    Ok(q.into_iter().map(|v| (i16::from(v) - 128) as i8).collect())
}
