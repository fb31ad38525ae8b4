//! [`QuantizedWeight`]: int8 per-channel weights, their quantisation and their safetensors form.
//!
//! candle has no i8 dtype, so the int8 data lives in a `Vec<i8>` of ours; in a safetensors file
//! it is stored with the real `I8` dtype (tensor `name`, `[N, K]`) beside its scales (tensor
//! `{name}_scale`, F32 `[N]`), so a checkpoint written elsewhere in that form loads too.

use super::{Dequant, WeightDequant};
use crate::error::OpError;
use crate::limits::{
    MAX_ACTIVATION_SCALE, MAX_QUANT_K, MAX_WEIGHT_SCALE, MIN_ACTIVATION_SCALE, MIN_WEIGHT_SCALE,
};
use candle_core::{DType as CDType, Device, Tensor};
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use std::path::Path;
use std::sync::OnceLock;

const OP: &str = "quantize";

/// Largest quantised magnitude (symmetric int8: `-127..=127`, -128 unused).
pub(crate) const QMAX: f32 = 127.0;

/// The range a row's scale must lie in, with its bounds as text for the message.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ScaleRange {
    lo: f32,
    hi: f32,
    text: &'static str,
}

/// [`MIN_WEIGHT_SCALE`]..=[`MAX_WEIGHT_SCALE`].
pub(crate) const WEIGHT_SCALES: ScaleRange = ScaleRange {
    lo: MIN_WEIGHT_SCALE,
    hi: MAX_WEIGHT_SCALE,
    text: "[2^-58, 2^44]",
};

/// [`MIN_ACTIVATION_SCALE`]..=[`MAX_ACTIVATION_SCALE`].
pub(crate) const ACTIVATION_SCALES: ScaleRange = ScaleRange {
    lo: MIN_ACTIVATION_SCALE,
    hi: MAX_ACTIVATION_SCALE,
    text: "[2^-66, 2^52]",
};

impl ScaleRange {
    /// Checks the scale `s` of row `row` (`amax` its largest magnitude, for the message).
    fn check(
        &self,
        op: &'static str,
        arg: &'static str,
        row: usize,
        amax: f32,
        s: f32,
    ) -> Result<(), OpError> {
        if (self.lo..=self.hi).contains(&s) {
            Ok(())
        } else {
            Err(OpError::invalid(
                op,
                arg,
                format!(
                    "row {row} has max |value| {amax:e}, whose int8 scale {s:e} (max / 127) is outside the supported range {} (docs/ops.md, quant_matmul limits): the int8 path would overflow or underflow its f16 intermediate",
                    self.text
                ),
            ))
        }
    }
}

/// Rounds an f32 scale to the 19 bits (1 sign + 8 exponent + 10 mantissa) the Fixpipe uses from a
/// per-channel word (ASCEND950.md §6: it ignores bits \[12:0\]), to nearest, ties to even, so that
/// the hardware's truncation leaves it unchanged and every backend applies the same scale.
pub fn round_scale_19(s: f32) -> f32 {
    let b = s.to_bits();
    let lsb = (b >> 13) & 1;
    f32::from_bits(b.wrapping_add(0x0fff + lsb) & !0x1fff)
}

/// Int8 weights `[N, K]` (row-major, one row per output channel) with one f32 scale per channel
/// (`w[n, k] ≈ data[n, k] * scale[n]`), the scales already rounded to the Fixpipe's 19 bits
/// ([`round_scale_19`]).
#[derive(Debug, Clone)]
pub struct QuantizedWeight {
    data: Vec<i8>,
    scale: Vec<f32>,
    n: usize,
    k: usize,
    /// The Reference backend's f32 copy of the data, built on first use (see `reference.rs`).
    pub(crate) reference: OnceLock<Tensor>,
    /// The float dequantisation and its Fixpipe words, built on first use.
    dequant: OnceLock<WeightDequant>,
}

impl QuantizedWeight {
    /// Weights from int8 `data` (`n * k` values, row-major `[n, k]`) and `n` scales, each finite
    /// and positive (rounded here to 19 bits: a no-op for scales from
    /// [`quantize_per_channel`](crate::quantize_per_channel)).
    pub fn new(data: Vec<i8>, scale: Vec<f32>, n: usize, k: usize) -> Result<Self, OpError> {
        if n == 0 || k == 0 {
            return Err(OpError::invalid(
                OP,
                "weight",
                format!("must not be empty: shape [N, K] is [{n}, {k}]"),
            ));
        }
        let want = n
            .checked_mul(k)
            .ok_or_else(|| OpError::invalid(OP, "weight", format!("[{n}, {k}] overflows usize")))?;
        if data.len() != want {
            return Err(OpError::invalid(
                OP,
                "data",
                format!(
                    "holds {} values, but [N, K] = [{n}, {k}] needs {want}",
                    data.len()
                ),
            ));
        }
        if scale.len() != n {
            return Err(OpError::invalid(
                OP,
                "scale",
                format!(
                    "holds {} values, but must hold one per channel (N = {n})",
                    scale.len()
                ),
            ));
        }
        if k > MAX_QUANT_K {
            return Err(OpError::invalid(
                OP,
                "weight",
                format!(
                    "K = {k} exceeds {MAX_QUANT_K} (2^17 - 1), the most input features the int32 accumulator holds without overflow"
                ),
            ));
        }
        let scale: Vec<f32> = scale.into_iter().map(round_scale_19).collect();
        if let Some((i, s)) = scale
            .iter()
            .enumerate()
            .find(|(_, s)| !(s.is_finite() && **s > 0.0))
        {
            return Err(OpError::invalid(
                OP,
                "scale",
                format!("scale[{i}] = {s} must be finite and positive"),
            ));
        }
        if let Some((i, s)) = scale
            .iter()
            .enumerate()
            .find(|(_, s)| !(MIN_WEIGHT_SCALE..=MAX_WEIGHT_SCALE).contains(*s))
        {
            return Err(OpError::invalid(
                OP,
                "scale",
                format!(
                    "scale[{i}] = {s:e} is outside the supported range [2^-58, 2^44] (docs/ops.md, quant_matmul limits): the Fixpipe's f16 intermediate would overflow or underflow"
                ),
            ));
        }
        Ok(QuantizedWeight {
            data,
            scale,
            n,
            k,
            reference: OnceLock::new(),
            dequant: OnceLock::new(),
        })
    }

    /// The float dequantisation of this weight and its Fixpipe words (computed on first use:
    /// the weight never changes after it is made).
    pub(crate) fn dequant(&self) -> &WeightDequant {
        self.dequant.get_or_init(|| {
            let dequant = Dequant::new(self);
            let word_bytes = super::kernel::word_bytes(&dequant.words, self.n.div_ceil(256) * 256);
            WeightDequant {
                dequant,
                word_bytes,
            }
        })
    }

    /// The channels of `parts` stacked into one `[N_0 + N_1 + .., K]` weight, when a
    /// [`quant_matmul`](crate::quant_matmul()) on it gives, bit for bit, the columns of the calls
    /// on each part: the parts share K and the Fixpipe's power of two (module docs of
    /// `quant_matmul`: it follows K and the largest scale), so every channel keeps its scale
    /// word. `None` otherwise (or for no parts). One call then replaces several on the same x
    /// (a SwiGLU's gate and up projections).
    pub fn concat_channels(parts: &[&QuantizedWeight]) -> Option<QuantizedWeight> {
        let first = parts.first()?;
        let pow2 = first.dequant().dequant.pow2;
        if parts
            .iter()
            .any(|p| p.k != first.k || p.dequant().dequant.pow2 != pow2)
        {
            return None;
        }
        let n = parts.iter().map(|p| p.n).sum();
        let data = parts.iter().flat_map(|p| p.data.iter().copied()).collect();
        let scale = parts.iter().flat_map(|p| p.scale.iter().copied()).collect();
        let w = QuantizedWeight::new(data, scale, n, first.k).ok()?;
        // The largest scale is one of the parts', so the power of two is theirs.
        (w.dequant().dequant.pow2 == pow2).then_some(w)
    }

    /// Output channels `N`.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Input features `K` (the contraction).
    pub fn k(&self) -> usize {
        self.k
    }

    /// The int8 data, row-major `[N, K]`.
    pub fn data(&self) -> &[i8] {
        &self.data
    }

    /// The per-channel scales (`N`, 19-bit rounded).
    pub fn scale(&self) -> &[f32] {
        &self.scale
    }

    /// The dequantised weights `data[n, k] * scale[n]` as an f32 `[N, K]` tensor on `device`.
    pub fn dequantize(&self, device: &Device) -> Result<Tensor, OpError> {
        let q = int8_tensor(&self.data, (self.n, self.k), device)?;
        let s = Tensor::from_slice(&self.scale, (self.n, 1), device)?;
        Ok(q.broadcast_mul(&s)?)
    }

    /// The weight stored as tensors `name` (I8 `[N, K]`) and `{name}_scale` (F32 `[N]`) of a
    /// safetensors file. Errors name the tensor: missing, wrong dtype, wrong shape.
    pub fn from_safetensors(st: &SafeTensors<'_>, name: &str) -> Result<Self, OpError> {
        let bad = |rule: String| OpError::invalid(OP, "safetensors", rule);
        let data = st
            .tensor(name)
            .map_err(|e| bad(format!("tensor `{name}`: {e}")))?;
        if data.dtype() != Dtype::I8 {
            return Err(bad(format!(
                "tensor `{name}` has dtype {:?}, but quantised weights are I8",
                data.dtype()
            )));
        }
        let [n, k] = data.shape()[..] else {
            return Err(bad(format!(
                "tensor `{name}` has shape {:?}, but must be 2-D [N, K]",
                data.shape()
            )));
        };
        let sname = format!("{name}_scale");
        let scale = st
            .tensor(&sname)
            .map_err(|e| bad(format!("tensor `{sname}`: {e}")))?;
        if scale.dtype() != Dtype::F32 {
            return Err(bad(format!(
                "tensor `{sname}` has dtype {:?}, but scales are F32",
                scale.dtype()
            )));
        }
        if scale.shape() != [n] {
            return Err(bad(format!(
                "tensor `{sname}` has shape {:?}, but must be [N] = [{n}] (one scale per row of `{name}`)",
                scale.shape()
            )));
        }
        let q: Vec<i8> = data.data().iter().map(|&b| b as i8).collect();
        let s: Vec<f32> = scale
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        QuantizedWeight::new(q, s, n, k)
    }

    /// The two tensors of [`Self::from_safetensors`], borrowing this weight's bytes, to pass to
    /// `safetensors::serialize` together with other tensors (a multi-tensor checkpoint).
    pub fn safetensors_entries(&self, name: &str) -> Vec<(String, TensorView<'_>)> {
        let data: &[u8] = bytemuck::cast_slice(&self.data);
        let scale: &[u8] = bytemuck::cast_slice(&self.scale);
        // Both views are consistent by construction (data n * k bytes, scale 4 n bytes), so
        // `TensorView::new` cannot fail; an entry it refused would be left out.
        [
            (name.to_string(), Dtype::I8, vec![self.n, self.k], data),
            (format!("{name}_scale"), Dtype::F32, vec![self.n], scale),
        ]
        .into_iter()
        .filter_map(|(n, d, s, b)| TensorView::new(d, s, b).ok().map(|v| (n, v)))
        .collect()
    }

    /// Writes the weight to a safetensors file at `path` as tensors `name` and `{name}_scale`.
    pub fn save(&self, path: &Path, name: &str) -> Result<(), OpError> {
        safetensors::serialize_to_file(self.safetensors_entries(name), None, path)
            .map_err(|e| OpError::invalid(OP, "path", format!("writing {}: {e}", path.display())))
    }

    /// Reads tensors `name` and `{name}_scale` from the safetensors file at `path` (memory
    /// mapped, then copied into the weight).
    pub fn load(path: &Path, name: &str) -> Result<Self, OpError> {
        let io = |e: std::io::Error| {
            OpError::invalid(OP, "path", format!("reading {}: {e}", path.display()))
        };
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: the map is read only and lives only inside this function; every byte read from
        // it is copied out into the weight before it is dropped. Another process truncating or
        // rewriting the file meanwhile would be undefined behaviour, as for every mmap'd
        // checkpoint (candle's loader makes the same assumption): the file is not ours to lock.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        let st = SafeTensors::deserialize(&map).map_err(|e| {
            OpError::invalid(
                OP,
                "path",
                format!("{} is not a safetensors file: {e}", path.display()),
            )
        })?;
        Self::from_safetensors(&st, name)
    }
}

/// Int8 values as an f32 tensor of `shape` (exact).
pub(crate) fn int8_tensor(
    q: &[i8],
    shape: (usize, usize),
    device: &Device,
) -> Result<Tensor, OpError> {
    let f: Vec<f32> = q.iter().map(|&v| f32::from(v)).collect();
    Ok(Tensor::from_vec(f, shape, device)?)
}

/// The scale of a row whose largest |value| is `amax`: `round_scale_19(amax / 127)`, 1 for an
/// all-zero row (a scale out of range, including one that rounds to 0, is refused by
/// [`ScaleRange::check`]).
fn row_scale(amax: f32) -> f32 {
    if amax == 0.0 {
        1.0
    } else {
        round_scale_19(amax / QMAX)
    }
}

/// Error of a tensor with a NaN or an infinity.
pub(crate) fn not_finite(op: &'static str, arg: &'static str) -> OpError {
    OpError::invalid(
        op,
        arg,
        "must be finite: a NaN or an infinity has no int8 quantisation",
    )
}

/// [`quantize_rows`] in one pass per row on the host, as the kernel backends quantise their
/// activations (a decode step's few rows cost the candle ops' dispatch and temporaries many
/// times over): the same f32 division, rounding half away from zero and clamp, so the same
/// bits (the ops' tests compare TileSim with the Reference, which quantises with candle ops).
pub(crate) fn quantize_rows_host(
    op: &'static str,
    arg: &'static str,
    x: &Tensor,
    range: ScaleRange,
) -> Result<(Vec<i8>, Vec<f32>), OpError> {
    let (r, k) = crate::bridge::check_data(op, arg, x, "[R, K]", 2).map(|d| (d[0], d[1]))?;
    // A contiguous f32 tensor is read in place; anything else is converted first.
    let (storage, layout) = x.storage_and_layout();
    let borrowed = match (&*storage, layout.contiguous_offsets()) {
        (candle_core::Storage::Cpu(candle_core::CpuStorage::F32(v)), Some((a, b))) => v.get(a..b),
        _ => None,
    };
    let owned;
    let v = match borrowed {
        Some(v) => v,
        None => {
            owned = x.to_dtype(CDType::F32)?.flatten_all()?.to_vec1::<f32>()?;
            &owned[..]
        }
    };
    let mut q = vec![0i8; r * k];
    let mut scale = Vec::with_capacity(r);
    for (i, (row, qrow)) in v.chunks(k.max(1)).zip(q.chunks_mut(k.max(1))).enumerate() {
        let amax = finite_amax(row).ok_or_else(|| not_finite(op, arg))?;
        let s = row_scale(amax);
        range.check(op, arg, i, amax, s)?;
        for (d, e) in qrow.iter_mut().zip(row) {
            *d = round_clamp(e / s);
        }
        scale.push(s);
    }
    Ok((q, scale))
}

/// `max |e|` over `row` (0 when empty), or `None` when an element is a NaN or an infinity. In
/// one pass over the bits with sign cleared: for non-negative floats their order is the
/// integers' order, and every non-finite value is at least the bits of +inf; an integer max has
/// no NaN case and no order to keep, so it vectorises (a float `max` fold runs one element per
/// latency of `maxss`).
pub(crate) fn finite_amax(row: &[f32]) -> Option<f32> {
    const INF: u32 = 0x7f80_0000;
    let m = row
        .iter()
        .fold(0u32, |m, e| m.max(e.to_bits() & 0x7fff_ffff));
    (m < INF).then(|| f32::from_bits(m))
}

/// `v.round().clamp(-127, 127)` (half away from zero) as i8, for a finite or infinite `v`,
/// without the `roundf` call (which does not vectorise): clamping first changes nothing, ±127
/// being integers; the truncation and the fraction `c - trunc(c)` are exact below 2^23.
#[inline(always)]
pub(crate) fn round_clamp(v: f32) -> i8 {
    let c = v.clamp(-QMAX, QMAX);
    let t = c as i32;
    let f = c - t as f32;
    (t + i32::from(f >= 0.5) - i32::from(f <= -0.5)) as i8
}

/// Symmetric per-row int8 quantisation of a 2-D f32/f16/bf16 tensor, with candle ops: scale =
/// `round_scale_19(max|row| / 127)` (1 for an all-zero row), `q = round(x / scale)` half away
/// from zero, clamped to ±127. `arg` names the tensor in errors. Returns the values row-major
/// and the scales.
pub(crate) fn quantize_rows(
    op: &'static str,
    arg: &'static str,
    x: &Tensor,
    range: ScaleRange,
) -> Result<(Vec<i8>, Vec<f32>), OpError> {
    let (r, _) = crate::bridge::check_data(op, arg, x, "[R, K]", 2).map(|d| (d[0], d[1]))?;
    let xf = x.to_dtype(CDType::F32)?.contiguous()?;
    let finite = xf.abs()?.le(f32::MAX)?.min_all()?.to_scalar::<u8>()?;
    if finite == 0 {
        return Err(not_finite(op, arg));
    }
    let amax = xf.abs()?.max_keepdim(1)?.flatten_all()?.to_vec1::<f32>()?;
    let scale: Vec<f32> = amax.iter().map(|&a| row_scale(a)).collect();
    for (i, (&a, &s)) in amax.iter().zip(&scale).enumerate() {
        range.check(op, arg, i, a, s)?;
    }
    let st = Tensor::from_slice(&scale, (r, 1), x.device())?;
    // round() is half away from zero; +127 maps -127..=127 to the u8 range exactly.
    let q = xf
        .broadcast_div(&st)?
        .round()?
        .clamp(-QMAX, QMAX)?
        .affine(1.0, f64::from(QMAX))?
        .to_dtype(CDType::U8)?
        .flatten_all()?
        .to_vec1::<u8>()?;
    let q = q.into_iter().map(|v| (i16::from(v) - 127) as i8).collect();
    Ok((q, scale))
}

/// Quantises weights `w [N, K]` (f32, f16 or bf16) per output channel (row): symmetric, scale =
/// `max|w[n]| / 127` rounded to the Fixpipe's 19 bits, values rounded half away from zero and
/// clamped to ±127; an all-zero row gets scale 1. Non-finite weights, a scale outside
/// [`MIN_WEIGHT_SCALE`]..=[`MAX_WEIGHT_SCALE`] and K above [`MAX_QUANT_K`] are errors.
pub fn quantize_per_channel(w: &Tensor) -> Result<QuantizedWeight, OpError> {
    let (n, k) = w.dims2().unwrap_or((0, 0));
    let (q, s) = quantize_rows("quantize_per_channel", "w", w, WEIGHT_SCALES)?;
    QuantizedWeight::new(q, s, n, k)
}

/// Quantises activations `x [M, K]` (f32, f16 or bf16) per token (row), exactly as
/// [`quantize_per_channel`] quantises a weight's rows: returns the int8 values row-major and the
/// f32 scales `[M]`. Non-finite values and a row scale outside
/// [`MIN_ACTIVATION_SCALE`]..=[`MAX_ACTIVATION_SCALE`] are errors.
pub fn quantize_per_token(x: &Tensor) -> Result<(Vec<i8>, Tensor), OpError> {
    let (q, s) = quantize_rows("quantize_per_token", "x", x, ACTIVATION_SCALES)?;
    let m = s.len();
    Ok((q, Tensor::from_vec(s, m, x.device())?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel backends' host pass gives the candle ops' bits: ties at .5 (half away from
    /// zero), saturation, an all-zero row, random rows, a 16-bit input; both refuse a NaN.
    #[test]
    fn host_quantisation_gives_the_candle_ops_bits() {
        let dev = Device::Cpu;
        let k = 9;
        let mut v = vec![127.0f32, 0.5, -0.5, 1.5, -2.5, 126.5, -126.5, 0.0, 3.25];
        v.extend([0.0f32; 9]);
        v.extend((0..27u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as f32 / 1e7 - 100.0));
        let x = Tensor::from_vec(v, (5, k), &dev).expect("x");
        for t in [x.clone(), x.to_dtype(CDType::BF16).expect("bf16")] {
            let want = quantize_rows("t", "x", &t, ACTIVATION_SCALES).expect("candle");
            let got = quantize_rows_host("t", "x", &t, ACTIVATION_SCALES).expect("host");
            assert_eq!(got, want);
        }
        assert_eq!(
            quantize_rows("t", "x", &x, ACTIVATION_SCALES)
                .expect("candle")
                .0[..5],
            [127, 1, -1, 2, -3]
        );
        let bad = Tensor::from_vec(vec![1.0f32, f32::NAN], (1, 2), &dev).expect("bad");
        assert!(quantize_rows("t", "x", &bad, ACTIVATION_SCALES).is_err());
        assert!(quantize_rows_host("t", "x", &bad, ACTIVATION_SCALES).is_err());
        // A strided (transposed) f32 view is converted, not read in place.
        let t = x.t().expect("t");
        assert_eq!(
            quantize_rows_host("t", "x", &t, ACTIVATION_SCALES).expect("host"),
            quantize_rows("t", "x", &t, ACTIVATION_SCALES).expect("candle")
        );
    }

    /// The bit-wise magnitude max is the float fold `max(|e|)` on finite rows (signs, -0.0,
    /// subnormals, the largest finite value) and refuses every NaN and infinity.
    #[test]
    fn the_bitwise_amax_is_the_float_max_and_refuses_non_finite_values() {
        let rows: [&[f32]; 5] = [
            &[],
            &[-0.0, 0.0],
            &[1e-45, -3e-42, 2.5e-40],
            &[-7.5, 3.0, 7.25, -0.0],
            &[f32::MAX, f32::MIN, 1.0],
        ];
        for r in rows {
            let want = r.iter().fold(0f32, |a, e| a.max(e.abs()));
            assert_eq!(
                finite_amax(r).map(f32::to_bits),
                Some(want.to_bits()),
                "{r:?}"
            );
        }
        let nan = f32::from_bits(0xffc0_0001);
        for bad in [f32::NAN, -f32::NAN, nan, f32::INFINITY, f32::NEG_INFINITY] {
            assert_eq!(finite_amax(&[1.0, bad, 2.0]), None, "{bad}");
        }
    }

    /// The host rounding is `round().clamp(-127, 127)` bit for bit: at and next to every
    /// half-integer of the range, past the clamp, and at the extremes.
    #[test]
    fn host_rounding_is_round_then_clamp() {
        let mut vals = vec![
            0.0f32,
            -0.0,
            f32::MAX,
            f32::MIN,
            1e30,
            -1e30,
            0.49999997,
            -0.49999997,
        ];
        for i in -130..=130 {
            let h = i as f32 + 0.5;
            vals.extend([h, h.next_up(), h.next_down(), i as f32]);
        }
        for v in vals {
            assert_eq!(round_clamp(v), v.round().clamp(-QMAX, QMAX) as i8, "{v}");
        }
    }
}
