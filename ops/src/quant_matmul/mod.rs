//! `quant_matmul`: per-channel W8A8 matmul (`x [M, K] · w^T -> [M, N]`, `w` int8 `[N, K]` with
//! one scale per output channel) with the dequantisation done by the Fixpipe (ASCEND950.md §6).
//!
//! ```text
//! x (f32/f16/bf16) --per-token quantise--> xq int8 [M, K], s_x [M]
//! cube:   acc[M, N] = xq · wq^T                      int8 x int8, int32 accumulation over K tiles
//! FIX:    d = f16( f32(acc) · word[n] )              per-channel Scaling tile, word = s_w[n] · 2^-e
//! vector: y = f32(d) · (s_x[m] · 2^e) (+ bias[n]) (ReLU) -> out_dtype
//! ```
//!
//! The Fixpipe's scaled int32 path produces int8, uint8, f16 or bf16 only (§5). The op
//! dequantises to f16, whose 11-bit significand beats bf16's 8, with a power of two `2^-e` folded
//! into the scale words so that `|acc · word| <= 127 · 127 · K · max(s_w) · 2^-e` provably stays
//! below 65504 (e is chosen per call from K and the largest scale; the vector side multiplies
//! the `2^e` back, exactly). docs/ops.md derives the error bound.
//!
//! [`quant_matmul_int8`] is the int8-output variant for chaining layers: the Fixpipe requantises
//! `acc · (s_x · s_w[n] / s_y)` to int8 through the signed (bit 46) path, so nothing runs on the
//! vector side but the store.

pub(crate) mod kernel;
mod reference;
pub(crate) mod shape;
mod weight;

use crate::limits::MAX_QUANT_K;
pub use weight::{quantize_per_channel, quantize_per_token, round_scale_19, QuantizedWeight};

use crate::backend::Backend;
use crate::bridge;
use crate::error::OpError;
use crate::registry::Checked;
use candle_core::{DType as CDType, Device, Tensor};
pub use shape::QuantMatmulShape;
use std::borrow::Cow;
use tile_backend::ir::DType;

const OP: &str = "quant_matmul";
const OP8: &str = "quant_matmul_int8";

/// The argument carrying each parameter of [`QuantMatmulShape`] (for the shape's checks run on
/// a call: [`Checked::call`]).
const QUANT_ARGS: &[(&str, &str)] = &[("m", "x"), ("k", "x"), ("n", "w")];

/// Options of [`quant_matmul`].
#[derive(Debug, Clone, Default)]
pub struct QuantMatmulParams {
    /// Dtype of the result (f32, f16 or bf16); `None`: x's dtype.
    pub out_dtype: Option<CDType>,
    /// A bias `[N]` (any float dtype, applied in f32 after the scales).
    pub bias: Option<Tensor>,
    /// ReLU after the bias.
    pub relu: bool,
}

/// The largest |value| the Fixpipe's f16 intermediate is allowed to reach (below 65504, so the
/// f32 product's rounding can never carry it to infinity).
const F16_RANGE: f64 = 49152.0;

/// The Fixpipe dequantisation of one call: the per-channel scale words and the power of two the
/// vector side multiplies back.
#[derive(Debug, Clone)]
pub(crate) struct Dequant {
    /// `s_w[n] · 2^-e` (19-bit values: a power of two keeps them so).
    pub words: Vec<f32>,
    /// `2^e`.
    pub pow2: f32,
}

/// A weight's float dequantisation, computed on its first call and kept in the weight (which
/// never changes after it is made): the [`Dequant`] and its words as the kernel's u64 Fixpipe
/// words, zero words padding them to a multiple of 256 channels (the largest channel tile, so
/// every plan's padded width `n_pad` is a prefix).
#[derive(Debug, Clone)]
pub(crate) struct WeightDequant {
    /// The dequantisation.
    pub dequant: Dequant,
    /// The Fixpipe words (`u64` little-endian), padded.
    pub word_bytes: Vec<u8>,
}

impl Dequant {
    /// `e` from the bound `|acc| <= 127 · 127 · K` and the largest weight scale. The weight's
    /// limits ([`MIN_WEIGHT_SCALE`](crate::limits::MIN_WEIGHT_SCALE), [`MAX_WEIGHT_SCALE`](crate::limits::MAX_WEIGHT_SCALE), [`MAX_QUANT_K`], checked when it is
    /// made) keep `e` in `-59..=60`, so the clamp (which would break the bound) never acts.
    pub(crate) fn new(w: &QuantizedWeight) -> Dequant {
        let smax = w.scale().iter().copied().fold(0f32, f32::max) as f64;
        let bound = 127.0 * 127.0 * w.k() as f64 * smax;
        let e = (bound / F16_RANGE).log2().ceil().clamp(-60.0, 60.0) as i32;
        let down = 2f32.powi(-e);
        Dequant {
            words: w.scale().iter().map(|s| s * down).collect(),
            pow2: 2f32.powi(e),
        }
    }
}

/// One validated [`quant_matmul`] or [`quant_matmul_int8`] call: its
/// [`shape`](Self::shape) (what the launch plan, the kernel and `tileops emit --op
/// quant-matmul` read; `out_dtype` i8 for the int8 variant) and the host data of the epilogue.
/// Made only by [`QuantCall::validate`] / [`QuantCall::validate_int8`].
#[derive(Debug, Clone)]
pub(crate) struct QuantCall<'a> {
    /// The call's shape: result dtype, `M`, `K`, `N`, bias, ReLU.
    pub shape: Checked<QuantMatmulShape>,
    /// The int8 activations `[M, K]`: quantised by the op, or borrowed from the caller's.
    pub xq: Cow<'a, [i8]>,
    /// The Fixpipe's per-channel scale words (`N`): the dequantisation words `s_w[n] · 2^-e`
    /// of a float result (borrowed from the weight), the requantisation words of an int8 one.
    pub words: Cow<'a, [f32]>,
    /// Float result: `s_x[m] · 2^e`, the vector side's row factor (`M`); int8: empty.
    pub row_factor: Vec<f32>,
    /// Float result: the bias `[N]` in f32, if any.
    pub bias: Option<Vec<f32>>,
}

impl<'a> QuantCall<'a> {
    /// Checks a call of [`quant_matmul`] and quantises x per token (with candle ops for the
    /// Reference, on the host in one pass for the kernel backends: the same bits).
    pub(crate) fn validate(
        x: &Tensor,
        w: &'a QuantizedWeight,
        params: &QuantMatmulParams,
        backend: Backend,
    ) -> Result<QuantCall<'a>, OpError> {
        let dims = bridge::check_data(OP, "x", x, "[M, K]", 2)?;
        let (m, k) = (dims[0], dims[1]);
        if k != w.k() {
            return Err(OpError::invalid(
                OP,
                "x",
                format!(
                    "has K = {k} columns, but the weight [N, K] = [{}, {}] needs K = {}",
                    w.n(),
                    w.k(),
                    w.k()
                ),
            ));
        }
        let out_dtype = params.out_dtype.unwrap_or(x.dtype());
        let out = bridge::data_dtype(OP, "out_dtype", out_dtype)?;
        let bias = match &params.bias {
            None => None,
            Some(b) => {
                bridge::check_data(OP, "bias", b, "[N]", 1)?;
                if b.dim(0)? != w.n() {
                    return Err(OpError::invalid(
                        OP,
                        "bias",
                        format!("has {} values, but must have N = {}", b.dim(0)?, w.n()),
                    ));
                }
                Some(b.to_dtype(CDType::F32)?.to_vec1::<f32>()?)
            }
        };
        let (xq, sx) = match backend {
            Backend::Reference => weight::quantize_rows(OP, "x", x, weight::ACTIVATION_SCALES)?,
            Backend::TileSim | Backend::Ascend950 => {
                weight::quantize_rows_host(OP, "x", x, weight::ACTIVATION_SCALES)?
            }
        };
        let dequant = &w.dequant().dequant;
        let row_factor = sx.iter().map(|s| s * dequant.pow2).collect();
        let shape = QuantMatmulShape {
            out_dtype: out,
            m,
            k,
            n: w.n(),
            bias: bias.is_some(),
            relu: params.relu,
        };
        let shape = Checked::call(shape, OP, QUANT_ARGS)?;
        Ok(QuantCall {
            shape,
            xq: Cow::Owned(xq),
            words: Cow::Borrowed(&dequant.words),
            row_factor,
            bias,
        })
    }
}

impl<'a> QuantCall<'a> {
    /// Checks a call of [`quant_matmul_int8`] and computes its requantisation words; the
    /// activations are borrowed.
    pub(crate) fn validate_int8(
        x: &'a QuantizedActivations,
        w: &QuantizedWeight,
        params: &Int8MatmulParams,
    ) -> Result<QuantCall<'a>, OpError> {
        if x.k() != w.k() {
            return Err(OpError::invalid(
                OP8,
                "x",
                format!(
                    "has K = {}, but the weight [N, K] = [{}, {}] needs K = {}",
                    x.k(),
                    w.n(),
                    w.k(),
                    w.k()
                ),
            ));
        }
        let shape = QuantMatmulShape {
            out_dtype: DType::I8,
            m: x.m(),
            k: x.k(),
            n: w.n(),
            bias: false,
            relu: params.relu,
        };
        let shape = Checked::call(shape, OP8, QUANT_ARGS)?;
        Ok(QuantCall {
            shape,
            xq: Cow::Borrowed(x.data()),
            words: Cow::Owned(requant_words(x, w, params.out_scale)?),
            row_factor: Vec::new(),
            bias: None,
        })
    }
}

/// W8A8 matmul: `x [M, K]` (f32, f16 or bf16) times the int8 weight `w [N, K]` transposed,
/// `-> [M, N]` in `params.out_dtype` (default x's dtype).
///
/// x is quantised per token ([`quantize_per_token`]); the int8 product accumulates exactly in
/// int32; the Fixpipe dequantises it per channel to f16 (module docs); the per-token scale, the
/// bias and the ReLU are applied in f32. x must be finite.
///
/// # Errors
/// [`OpError::Invalid`] naming the argument: x not 2-D, empty, not f32/f16/bf16, not finite, or
/// its K differing from the weight's; a bias not of shape `[N]`; an unsupported out dtype.
pub fn quant_matmul(
    x: &Tensor,
    w: &QuantizedWeight,
    params: &QuantMatmulParams,
    backend: Option<Backend>,
) -> Result<Tensor, OpError> {
    let backend = bridge::resolve_backend(backend)?;
    let call = QuantCall::validate(x, w, params, backend)?;
    let device = x.device();
    match backend {
        Backend::Reference => reference::quant_matmul(w, &call, device),
        Backend::TileSim | Backend::Ascend950 => match call.shape.out_dtype {
            DType::F32 => run_into::<f32>(w, &call, backend, device),
            DType::F16 => run_into::<half::f16>(w, &call, backend, device),
            DType::BF16 => run_into::<half::bf16>(w, &call, backend, device),
            other => Err(OpError::Internal {
                op: OP,
                what: format!("the kernel has no {other} float result"),
            }),
        },
    }
}

/// Runs the float kernel of `call` into a zeroed `[M, N]` buffer of `T` (the out dtype) that
/// then becomes the result tensor's storage, uncopied.
fn run_into<T: bytemuck::Pod + candle_core::WithDType>(
    w: &QuantizedWeight,
    call: &QuantCall<'_>,
    backend: Backend,
    device: &Device,
) -> Result<Tensor, OpError> {
    let (m, n) = (call.shape.m, call.shape.n);
    let mut out = vec![T::zeroed(); m * n];
    let mut runner = bridge::runner(OP, backend);
    kernel::run_float(&mut runner, w, call, bytemuck::cast_slice_mut(&mut out))?;
    runner.finish()?;
    Ok(Tensor::from_vec(out, (m, n), device)?)
}

/// Int8 activations `[M, K]` with one per-tensor scale (`x ≈ data · scale`): the input and the
/// output of [`quant_matmul_int8`], so layers chain without leaving int8.
#[derive(Debug, Clone)]
pub struct QuantizedActivations {
    data: Vec<i8>,
    m: usize,
    k: usize,
    scale: f32,
}

impl QuantizedActivations {
    /// Activations from int8 `data` (`m * k` values, row-major) and a finite positive scale.
    pub fn new(data: Vec<i8>, m: usize, k: usize, scale: f32) -> Result<Self, OpError> {
        if m == 0 || k == 0 || m.checked_mul(k) != Some(data.len()) {
            return Err(OpError::invalid(
                OP8,
                "data",
                format!(
                    "holds {} values, but [M, K] = [{m}, {k}] must be non-empty and hold m * k",
                    data.len()
                ),
            ));
        }
        if !(scale.is_finite() && scale > 0.0) {
            return Err(OpError::invalid(
                OP8,
                "scale",
                format!("must be finite and positive, found {scale}"),
            ));
        }
        Ok(QuantizedActivations { data, m, k, scale })
    }

    /// Quantises `x [M, K]` (f32, f16 or bf16, finite) with a given (calibrated) per-tensor
    /// scale: `round(x / scale)` (an f32 division, rounded half away from zero), clamped to
    /// ±127, as the per-token quantiser does.
    ///
    /// # Errors
    /// [`OpError::Invalid`]: x not 2-D, empty, not f32/f16/bf16, or holding a NaN or an
    /// infinity (argument `x`); a scale that is not finite and positive.
    pub fn quantize(x: &Tensor, scale: f32) -> Result<Self, OpError> {
        let dims = bridge::check_data(OP8, "x", x, "[M, K]", 2)?;
        let (m, k) = (dims[0], dims[1]);
        if !(scale.is_finite() && scale > 0.0) {
            return Err(OpError::invalid(
                OP8,
                "scale",
                format!("must be finite and positive, found {scale}"),
            ));
        }
        let v = x.to_dtype(CDType::F32)?.flatten_all()?.to_vec1::<f32>()?;
        if weight::finite_amax(&v).is_none() {
            return Err(weight::not_finite(OP8, "x"));
        }
        let data = v.iter().map(|&e| weight::round_clamp(e / scale)).collect();
        Self::new(data, m, k, scale)
    }

    /// Rows `M`.
    pub fn m(&self) -> usize {
        self.m
    }
    /// Columns `K`.
    pub fn k(&self) -> usize {
        self.k
    }
    /// The int8 values, row-major.
    pub fn data(&self) -> &[i8] {
        &self.data
    }
    /// The per-tensor scale.
    pub fn scale(&self) -> f32 {
        self.scale
    }
    /// `data · scale` as an f32 `[M, K]` tensor.
    pub fn dequantize(&self, device: &Device) -> Result<Tensor, OpError> {
        Ok(weight::int8_tensor(&self.data, (self.m, self.k), device)?
            .affine(f64::from(self.scale), 0.0)?)
    }
}

/// Options of [`quant_matmul_int8`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Int8MatmulParams {
    /// The per-tensor scale `s_y` of the int8 result (calibrated for the layer).
    pub out_scale: f32,
    /// ReLU (applied by the Fixpipe before the scale; the scales are positive, so it equals a
    /// ReLU of the result).
    pub relu: bool,
}

/// The requantisation words of [`quant_matmul_int8`]: `round_scale_19(s_x · s_w[n] / s_y)`,
/// signed int8 output (bit 46).
pub(crate) fn requant_words(
    x: &QuantizedActivations,
    w: &QuantizedWeight,
    out_scale: f32,
) -> Result<Vec<f32>, OpError> {
    if !(out_scale.is_finite() && out_scale > 0.0) {
        return Err(OpError::invalid(
            OP8,
            "out_scale",
            format!("must be finite and positive, found {out_scale}"),
        ));
    }
    let words: Vec<f32> = w
        .scale()
        .iter()
        .map(|s| {
            round_scale_19(((f64::from(x.scale) * f64::from(*s)) / f64::from(out_scale)) as f32)
        })
        .collect();
    if let Some((n, s)) = words
        .iter()
        .enumerate()
        .find(|(_, s)| !(s.is_finite() && **s >= f32::MIN_POSITIVE))
    {
        return Err(OpError::invalid(
            OP8,
            "out_scale",
            format!("the requantisation scale s_x * s_w[{n}] / out_scale = {s:e} is not a finite positive f32 of the normal range (at least 2^-126)"),
        ));
    }
    Ok(words)
}

/// The int8-output W8A8 matmul for chaining layers: `y[m, n] = sat(round_half_even(f32(acc[m,
/// n]) · word[n]))` in `-128..=127` with `acc = x.data · w.data^T` exact in int32 and `word[n]
/// = round_scale_19(x.scale · s_w[n] / out_scale)`, applied by the Fixpipe's signed (bit 46)
/// requantisation; ReLU (if set) before it. Returns `[M, N]` activations with scale
/// `out_scale`, ready to be the `x` of the next layer.
///
/// # Errors
/// [`OpError::Invalid`]: `x.k() != w.k()` (argument `x`), a non-finite or non-positive
/// `out_scale`, or a requantisation scale that is not a finite positive f32.
pub fn quant_matmul_int8(
    x: &QuantizedActivations,
    w: &QuantizedWeight,
    params: &Int8MatmulParams,
    backend: Option<Backend>,
) -> Result<QuantizedActivations, OpError> {
    let backend = bridge::resolve_backend(backend)?;
    let call = QuantCall::validate_int8(x, w, params)?;
    let data = match backend {
        Backend::Reference => reference::quant_matmul_int8(w, &call)?,
        Backend::TileSim | Backend::Ascend950 => {
            let mut runner = bridge::runner(OP8, backend);
            let out = kernel::run_int8(&mut runner, w, &call)?;
            runner.finish()?;
            out
        }
    };
    QuantizedActivations::new(data, x.m(), w.n(), params.out_scale)
}
