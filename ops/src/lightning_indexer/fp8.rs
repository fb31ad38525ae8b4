//! FP8 e4m3 as the index-key cache stores it: the A5 conversion's rounding and saturation modes
//! ([`Fp8Conversion`]), DeepSeek's per-128-value group quantisation with f32 or ue8m0
//! power-of-two scales ([`ScaleFormat`]), q's quantisation ([`quantize_index_q`]) and the
//! Hadamard rotation DeepSeek applies to q and k before quantising them ([`hadamard_rotate`])
//! (A5-FACTS §5, §7; docs/ops.md, "`lightning_indexer`").

use crate::bridge;
use crate::error::OpError;
use candle_core::{DType, Tensor};
pub use tile_backend::ir::RoundMode;
use tile_backend::sim::numeric::f32_to_fp8_e4m3;

/// Values per FP8 scale group: one scale per 128 values, as DeepSeek stores its index keys.
pub const FP8_GROUP: usize = 128;

/// The largest finite e4m3 value (OCP e4m3: no infinities, `0x7f`/`0xff` are NaN).
pub const FP8_E4M3_MAX: f32 = 448.0;

/// DeepSeek's floor on a group's absolute maximum (`act_quant`): an all-zero group gets the
/// scale `1e-4 / 448`, never 0.
pub const FP8_MIN_AMAX: f32 = 1e-4;

/// What the f32 -> e4m3 conversion does with a value whose rounding leaves e4m3's range
/// (`|v| > 448` after rounding) and with ±inf (A5's TCVT takes a saturation mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Fp8Saturation {
    /// Clamp to ±448; ±inf gives ±448; NaN stays NaN (the `float8` crate's `from_f32`, i.e.
    /// candle's cast, and DeepSeek's clamp before its cast).
    #[default]
    Saturate,
    /// No clamp: e4m3 has no infinity, so an overflow that IEEE rounding would carry to ±inf
    /// (nearest modes; the directed mode pointing away from zero) and ±inf itself give NaN,
    /// while an overflow rounded toward zero gives ±448 (IEEE 754 §7.4); NaN stays NaN.
    Passthrough,
}

/// The f32 -> FP8 e4m3 conversion: A5's TCVT rounding mode and saturation mode, as explicit
/// parameters. The default (nearest even, saturating) gives the bits of candle's `to_dtype`
/// (the `float8` crate) for every f32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fp8Conversion {
    /// How a value between two e4m3 neighbours is rounded (`Rint`: nearest, ties to even).
    pub round: RoundMode,
    /// What an out-of-range value and ±inf give.
    pub saturation: Fp8Saturation,
}

impl Default for Fp8Conversion {
    fn default() -> Self {
        Fp8Conversion {
            round: RoundMode::Rint,
            saturation: Fp8Saturation::Saturate,
        }
    }
}

/// How the per-group scales of an FP8 tensor are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ScaleFormat {
    /// `amax / 448` as an f32 (candle `F32`).
    #[default]
    F32,
    /// `2^ceil(log2(amax / 448))` as an unsigned e8m0 power of two (candle `F8E8M0`: code `c`
    /// is `2^(c - 127)`, 255 is NaN), DeepSeek-V3.2's `scale_fmt = "ue8m0"`.
    Ue8m0,
}

impl ScaleFormat {
    /// The candle dtype the scales are stored in.
    pub fn dtype(self) -> DType {
        match self {
            ScaleFormat::F32 => DType::F32,
            ScaleFormat::Ue8m0 => DType::F8E8M0,
        }
    }
}

/// The binary exponent of a finite non-zero f64 (`floor(log2 |x|)`, exact).
fn exponent(x: f64) -> i32 {
    ((x.to_bits() >> 52) & 0x7ff) as i32 - 1023
}

/// `v` converted to an FP8 e4m3 code under `conv`. Subnormals (steps of 2^-9 below 2^-6) are
/// kept; a value rounding to 0 keeps its sign (`0x80` for negative).
pub fn f32_to_e4m3(v: f32, conv: Fp8Conversion) -> u8 {
    if conv == Fp8Conversion::default() {
        // The simulator's encoder: the same bits as `float8` (tested there and here).
        return f32_to_fp8_e4m3(v);
    }
    let sign = if v.is_sign_negative() { 0x80u8 } else { 0 };
    const NAN: u8 = 0x7f;
    const MAX: u8 = 0x7e;
    if v.is_nan() {
        return sign | NAN;
    }
    let sat = conv.saturation == Fp8Saturation::Saturate;
    if v.is_infinite() {
        return sign | if sat { MAX } else { NAN };
    }
    let x = f64::from(v);
    if x == 0.0 {
        return sign;
    }
    // The e4m3 grid around |x|: 3 mantissa bits, exponents from -6 (below that, the subnormal
    // step 2^-9), unbounded above; overflow is decided after rounding.
    let e = exponent(x).max(-6);
    let step = 2f64.powi(e - 3);
    let r = conv.round.round(x / step) * step; // exact: a power-of-two scale
    let m = r.abs();
    if m > f64::from(FP8_E4M3_MAX) {
        // Rounded toward zero (Trunc; Floor of a positive, Ceil of a negative value): IEEE's
        // overflow gives the largest finite value in every saturation mode.
        let toward_zero = match conv.round {
            RoundMode::Trunc => true,
            RoundMode::Floor => x > 0.0,
            RoundMode::Ceil => x < 0.0,
            RoundMode::Rint | RoundMode::Round => false,
        };
        return sign | if sat || toward_zero { MAX } else { NAN };
    }
    if m == 0.0 {
        return sign;
    }
    let code = if m < 2f64.powi(-6) {
        (m * 512.0) as u8 // subnormal: k * 2^-9
    } else {
        let e = exponent(m);
        (((e + 7) as u8) << 3) | ((m / 2f64.powi(e - 3)) as u8 - 8)
    };
    sign | code
}

/// The f32 value of a ue8m0 code: `2^(code - 127)`, NaN for 255.
pub fn ue8m0_to_f32(code: u8) -> f32 {
    match code {
        255 => f32::NAN,
        0 => f32::from_bits(0x0040_0000), // 2^-127, an f32 subnormal
        c => f32::from_bits(u32::from(c) << 23),
    }
}

/// The ue8m0 code of `2^ceil(log2 s)` for a positive normal f32 `s` (DeepSeek's
/// `fast_round_scale`: the exponent, plus one when any mantissa bit is set).
fn ue8m0_ceil(s: f32) -> u8 {
    let bits = s.to_bits();
    let e = ((bits >> 23) & 0xff) + u32::from(bits & 0x7f_ffff != 0);
    e.min(254) as u8
}

/// One group's scale: `max(amax, 1e-4) * (1 / 448)` in f32, rounded up to a power of two for
/// ue8m0 (DeepSeek's `act_quant`). Returns the scale and its stored form's code (ue8m0) or 0.
fn group_scale(amax: f32, fmt: ScaleFormat) -> (f32, u8) {
    let s = amax.max(FP8_MIN_AMAX) * (1.0 / FP8_E4M3_MAX);
    match fmt {
        ScaleFormat::F32 => (s, 0),
        ScaleFormat::Ue8m0 => {
            let c = ue8m0_ceil(s);
            (ue8m0_to_f32(c), c)
        }
    }
}

/// Quantised rows: the e4m3 codes and, per group of [`FP8_GROUP`] values, the scale (as f32)
/// and its ue8m0 code (0 for f32 scales).
pub(crate) struct Quantized {
    /// e4m3 codes, row-major like the input.
    pub codes: Vec<u8>,
    /// One f32 scale per group.
    pub scales: Vec<f32>,
    /// One ue8m0 code per group (ue8m0 format only; zeros otherwise).
    pub scale_codes: Vec<u8>,
}

/// Quantises `values` (finite, a whole number of groups) group by group: `code = e4m3(v / s)`
/// under `conv` with the group's scale `s` (DeepSeek's `act_quant`).
pub(crate) fn quantize_groups(values: &[f32], fmt: ScaleFormat, conv: Fp8Conversion) -> Quantized {
    let groups = values.len() / FP8_GROUP;
    let mut q = Quantized {
        codes: Vec::with_capacity(values.len()),
        scales: Vec::with_capacity(groups),
        scale_codes: Vec::with_capacity(groups),
    };
    for g in values.chunks_exact(FP8_GROUP) {
        let amax = g.iter().fold(0f32, |m, v| m.max(v.abs()));
        let (s, c) = group_scale(amax, fmt);
        q.codes.extend(g.iter().map(|&v| f32_to_e4m3(v / s, conv)));
        q.scales.push(s);
        q.scale_codes.push(c);
    }
    q
}

/// The first non-finite value of `values` (rows of `width`) as an error naming `arg`, with the
/// row as the caller numbers it (`row_id` of the row's place in `values`) and the column.
pub(crate) fn check_finite(
    op: &'static str,
    arg: &'static str,
    values: &[f32],
    width: usize,
    row_id: impl Fn(usize) -> usize,
) -> Result<(), OpError> {
    match values.iter().position(|v| !v.is_finite()) {
        None => Ok(()),
        Some(i) => Err(OpError::invalid(
            op,
            arg,
            format!(
                "row {}, column {} is {}: FP8 quantisation takes finite values only (e4m3 has no infinity and a NaN would poison its group's scale)",
                row_id(i / width.max(1)),
                i % width.max(1),
                values[i]
            ),
        )),
    }
}

/// Checks that a width `d` splits into FP8 scale groups.
pub(crate) fn check_group_width(
    op: &'static str,
    arg: &'static str,
    d: usize,
) -> Result<(), OpError> {
    if d.is_multiple_of(FP8_GROUP) {
        Ok(())
    } else {
        Err(OpError::invalid(
            op,
            arg,
            format!(
                "D = {d} must be a multiple of {FP8_GROUP} for FP8: one scale covers {FP8_GROUP} values"
            ),
        ))
    }
}

/// Scales as f32 values of the same shape: `F32` scales as they are, ue8m0 (`F8E8M0`) codes
/// decoded exactly ([`ue8m0_to_f32`]; candle has no cast from `F8E8M0`). For folding
/// [`quantize_index_q`]'s scales into the head weights whatever their format.
///
/// # Errors
/// [`OpError::Invalid`] naming `scales` for another dtype or a tensor off the CPU.
pub fn scales_to_f32(scales: &Tensor) -> Result<Tensor, OpError> {
    const OP: &str = "scales_to_f32";
    match scales.dtype() {
        DType::F32 => Ok(scales.clone()),
        DType::F8E8M0 => {
            let s = scales.contiguous()?;
            let (storage, layout) = s.storage_and_layout();
            let (candle_core::Storage::Cpu(candle_core::CpuStorage::F8E8M0(v)), Some((a, b))) =
                (&*storage, layout.contiguous_offsets())
            else {
                return Err(OpError::invalid(OP, "scales", "must be on the CPU"));
            };
            let out: Vec<f32> = v[a..b].iter().map(|&c| ue8m0_to_f32(c)).collect();
            Ok(Tensor::from_vec(out, s.dims(), s.device())?)
        }
        other => Err(OpError::invalid(
            OP,
            "scales",
            format!("dtype {other:?} is not a scale format: F32 or F8E8M0 (ue8m0)"),
        )),
    }
}

/// Scales as a candle tensor of `fmt`'s dtype and `shape`.
pub(crate) fn scale_tensor(
    q: &Quantized,
    fmt: ScaleFormat,
    shape: &[usize],
    dev: &candle_core::Device,
) -> Result<Tensor, OpError> {
    Ok(match fmt {
        ScaleFormat::F32 => Tensor::from_slice(&q.scales, shape, dev)?,
        ScaleFormat::Ue8m0 => Tensor::from_raw_buffer(&q.scale_codes, DType::F8E8M0, shape, dev)?,
    })
}

/// e4m3 codes as a candle `F8E4M3` tensor of `shape`.
pub(crate) fn fp8_tensor(
    codes: &[u8],
    shape: &[usize],
    dev: &candle_core::Device,
) -> Result<Tensor, OpError> {
    Ok(Tensor::from_raw_buffer(codes, DType::F8E4M3, shape, dev)?)
}

const Q_OP: &str = "quantize_index_q";

/// q's FP8 quantisation as DeepSeek applies it to the indexer's queries (after
/// [`hadamard_rotate`]): one scale per 128 values of the last dim, `s = max(amax, 1e-4) / 448`
/// (ue8m0: rounded up to a power of two), codes `e4m3(q / s)` under `conv`. `q [..., D]` is
/// f32, f16 or bf16 with `D` a multiple of 128; returns `(q_fp8 [..., D]` as candle `F8E4M3`,
/// `scales [..., D / 128]` as `F32` or `F8E8M0`).
///
/// DeepSeek folds the scale into the head weights (`weights * q_scale`, one scale per head at
/// D = 128) and scores with the FP8 codes: `lightning_indexer(q_fp8.to_dtype(F32)?, weights *
/// scale, ..)` computes the same scores (e4m3 values are exact in f32 and bf16).
///
/// # Errors
/// [`OpError::Invalid`] naming `q`: not on the CPU, rank 0, empty, a dtype other than f32,
/// f16, bf16, `D` not a multiple of 128, more than [`crate::limits::MAX_ELEMENTS`] elements, or a
/// non-finite value (with its row and column).
pub fn quantize_index_q(
    q: &Tensor,
    fmt: ScaleFormat,
    conv: Fp8Conversion,
) -> Result<(Tensor, Tensor), OpError> {
    let dims = q.dims().to_vec();
    let rank = dims.len().max(1);
    bridge::check_data(Q_OP, "q", q, "[..., D]", rank)?;
    let d = dims[rank - 1];
    check_group_width(Q_OP, "q", d)?;
    let values = q.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
    check_finite(Q_OP, "q", &values, d, |r| r)?;
    let quant = quantize_groups(&values, fmt, conv);
    let dev = q.device();
    let mut sdims = dims.clone();
    sdims[rank - 1] = d / FP8_GROUP;
    Ok((
        fp8_tensor(&quant.codes, &dims, dev)?,
        scale_tensor(&quant, fmt, &sdims, dev)?,
    ))
}

const H_OP: &str = "hadamard_rotate";

/// The Hadamard rotation DeepSeek applies to the indexer's q and k before quantising them
/// (`rotate_activation`: `x H / sqrt(D)` along the last dim, `H` the Sylvester-ordered ±1
/// Walsh-Hadamard matrix, `H[i][j] = (-1)^popcount(i & j)`): an orthogonal map, so scores are
/// unchanged in exact arithmetic while outliers spread over the group before FP8 quantisation.
/// Computed in f32 as `log2(D)` butterfly stages of candle ops (a fast Walsh-Hadamard
/// transform: `D log2 D` additions per row instead of the `D^2` of a matmul), scaled by
/// `D^-0.5`, returned in x's dtype. `x [..., D]`: f32, f16 or bf16, `D` a power of two.
///
/// # Errors
/// [`OpError::Invalid`] naming `x`: not on the CPU, rank 0, empty, a dtype other than f32,
/// f16, bf16, more than [`crate::limits::MAX_ELEMENTS`] elements, or `D` not a power of two.
pub fn hadamard_rotate(x: &Tensor) -> Result<Tensor, OpError> {
    let dims = x.dims().to_vec();
    let rank = dims.len().max(1);
    bridge::check_data(H_OP, "x", x, "[..., D]", rank)?;
    let d = dims[rank - 1];
    if !d.is_power_of_two() {
        return Err(OpError::invalid(
            H_OP,
            "x",
            format!("D = {d} (the last dim) must be a power of two"),
        ));
    }
    let rows = x.elem_count() / d;
    let mut y = x.to_dtype(DType::F32)?.reshape((rows, d))?;
    let mut h = 1;
    while h < d {
        // Element j pairs with j + h inside each block of 2h: (a + b, a - b).
        let v = y.reshape((rows, d / (2 * h), 2, h))?;
        let (a, b) = (v.narrow(2, 0, 1)?, v.narrow(2, 1, 1)?);
        y = Tensor::cat(&[(&a + &b)?, (&a - &b)?], 2)?.reshape((rows, d))?;
        h *= 2;
    }
    Ok((y * (d as f64).powf(-0.5))?
        .to_dtype(x.dtype())?
        .reshape(dims)?)
}
