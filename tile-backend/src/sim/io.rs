//! Inputs and outputs of standalone runs: seeded arguments within the kernel's declared ranges,
//! and a summary of what the outputs hold (for `tileops sim` and tests).

use super::gm::eval_shape;
use super::numeric;
use super::SimError;
use crate::ir::{Kernel, ParamKind};
use crate::launch::{Arg, GmTensor};

/// A small deterministic generator (SplitMix64).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform integer in `0..n` (`0` when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// Uniform f32 in `[lo, hi)`, from 24 random bits.
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        let u = (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        lo + (hi - lo) * u
    }

    /// `n` values uniform in `[lo, hi)` ([`Rng::uniform`]).
    pub fn uniform_vec(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| self.uniform(lo, hi)).collect()
    }

    /// Uniform integer in `[lo, hi]`.
    pub fn int(&mut self, lo: i64, hi: i64) -> i64 {
        if hi <= lo {
            return lo;
        }
        let span = (hi - lo) as u64 + 1;
        lo + (self.next_u64() % span) as i64
    }
}

/// A value given for a runtime scalar parameter ([`GenOptions::scalars`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ScalarValue {
    /// For an integer scalar.
    Int(i64),
    /// For a float scalar (an integer is accepted too).
    Float(f64),
}

/// How [`generate_with`] makes arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct GenOptions {
    /// Runtime scalars set by name (the others take the low end of their declared range, or 1).
    pub scalars: Vec<(String, ScalarValue)>,
    /// Most bytes all tensor arguments together may take; a kernel whose shapes need more is
    /// refused before anything is allocated.
    pub max_bytes: u64,
}

/// [`GenOptions::max_bytes`] by default: 4 GiB.
pub const DEFAULT_MAX_BYTES: u64 = 4 << 30;

impl Default for GenOptions {
    fn default() -> Self {
        GenOptions {
            scalars: Vec::new(),
            max_bytes: DEFAULT_MAX_BYTES,
        }
    }
}

/// Makes arguments for `kernel`: scalars at the low end of their range (1 without one), input
/// tensors uniform within their range (floats in [-1, 1], integers in [0, 7] by default), outputs
/// zero-filled. At most [`DEFAULT_MAX_BYTES`] of tensors.
pub fn generate(kernel: &Kernel, seed: u64) -> Result<Vec<Arg<'static>>, SimError> {
    generate_with(kernel, seed, &GenOptions::default())
}

/// [`generate`], with scalars set by name and a size limit. Errors: a scalar name that is not a
/// scalar parameter of the kernel, a float value for an integer scalar, a shape that does not
/// evaluate to sizes, and tensors past `max_bytes` (checked arithmetic, before allocating).
pub fn generate_with(
    kernel: &Kernel,
    seed: u64,
    opts: &GenOptions,
) -> Result<Vec<Arg<'static>>, SimError> {
    let mut rng = Rng::new(seed);
    let mut args: Vec<Arg> = kernel
        .params
        .iter()
        .map(|p| match &p.kind {
            ParamKind::Scalar { dtype } if dtype.is_float() => {
                Arg::Float(p.range.as_ref().map(|r| r.min).unwrap_or(1.0))
            }
            ParamKind::Scalar { .. } => {
                Arg::Int(p.range.as_ref().map(|r| r.min as i64).unwrap_or(1))
            }
            ParamKind::Tensor { .. } => Arg::Int(0),
        })
        .collect();
    for (name, value) in &opts.scalars {
        set_scalar(kernel, &mut args, name, *value)?;
    }
    let mut total: u64 = 0;
    for (i, p) in kernel.params.iter().enumerate() {
        let ParamKind::Tensor {
            dtype,
            shape,
            output,
        } = &p.kind
        else {
            continue;
        };
        let dims: Option<Vec<usize>> = shape
            .iter()
            .map(|e| eval_shape(e, &args).and_then(|v| usize::try_from(v).ok()))
            .collect();
        let dims = dims.ok_or_else(|| SimError::BadArg {
            name: p.name.clone(),
            why: "its shape does not evaluate to non-negative sizes".into(),
        })?;
        let too_big = || SimError::BadArg {
            name: p.name.clone(),
            why: format!(
                "shape {dims:?} of {dtype} takes the arguments past the limit of {} bytes",
                opts.max_bytes
            ),
        };
        let n = dims
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .ok_or_else(too_big)?;
        let bytes = (n as u64)
            .checked_mul(dtype.size_bytes())
            .ok_or_else(too_big)?;
        total = total
            .checked_add(bytes)
            .filter(|&t| t <= opts.max_bytes)
            .ok_or_else(too_big)?;
        let t = if *output {
            GmTensor::zeros(*dtype, &dims)
        } else if dtype.is_float() {
            let (lo, hi) = p
                .range
                .as_ref()
                .map(|r| (r.min, r.max))
                .unwrap_or((-1.0, 1.0));
            let v: Vec<f32> = (0..n)
                .map(|_| (lo + (hi - lo) * rng.unit()) as f32)
                .collect();
            GmTensor::from_f32(*dtype, &dims, &v)
        } else {
            let (lo, hi) = p
                .range
                .as_ref()
                .map(|r| (r.min as i64, r.max as i64))
                .unwrap_or((0, 7));
            let v: Vec<i64> = (0..n).map(|_| rng.int(lo, hi)).collect();
            GmTensor::from_i64(*dtype, &dims, &v)
        };
        args[i] = Arg::Tensor(t);
    }
    Ok(args)
}

/// Sets the scalar parameter `name` of `kernel` in `args`.
fn set_scalar(
    kernel: &Kernel,
    args: &mut [Arg],
    name: &str,
    value: ScalarValue,
) -> Result<(), SimError> {
    let bad = |why: String| SimError::BadArg {
        name: name.to_string(),
        why,
    };
    let (i, p) = kernel
        .params
        .iter()
        .enumerate()
        .find(|(_, p)| p.name == name)
        .ok_or_else(|| {
            let scalars: Vec<&str> = kernel
                .params
                .iter()
                .filter(|p| matches!(p.kind, ParamKind::Scalar { .. }))
                .map(|p| p.name.as_str())
                .collect();
            bad(format!(
                "the kernel has no parameter of that name (its scalars: {})",
                if scalars.is_empty() {
                    "none".to_string()
                } else {
                    scalars.join(", ")
                }
            ))
        })?;
    let ParamKind::Scalar { dtype } = &p.kind else {
        return Err(bad("is a tensor parameter, not a scalar".into()));
    };
    args[i] = match (dtype.is_float(), value) {
        (true, ScalarValue::Float(f)) => Arg::Float(f),
        (true, ScalarValue::Int(v)) => Arg::Float(v as f64),
        (false, ScalarValue::Int(v)) => Arg::Int(v),
        (false, ScalarValue::Float(f)) => {
            return Err(bad(format!(
                "is an integer scalar ({dtype}), but {f} is not an integer"
            )))
        }
    };
    Ok(())
}

/// What an output tensor holds after a run.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputStats {
    /// Argument name.
    pub name: String,
    /// Element type.
    pub dtype: crate::ir::DType,
    /// Shape.
    pub shape: Vec<usize>,
    /// Smallest finite value.
    pub min: f64,
    /// Largest finite value.
    pub max: f64,
    /// Mean of the finite values.
    pub mean: f64,
    /// Elements that are NaN or infinite.
    pub non_finite: usize,
    /// FNV-1a hash of the bytes, to compare runs.
    pub checksum: u64,
}

/// Summaries of the kernel's output tensors in `args` (owned or [`Arg::InOut`]).
pub fn output_stats(kernel: &Kernel, args: &[Arg]) -> Vec<OutputStats> {
    kernel
        .params
        .iter()
        .zip(args)
        .filter_map(|(p, a)| match (&p.kind, a) {
            (ParamKind::Tensor { output: true, .. }, a) if a.is_writable() => {
                let t = a.as_gm()?;
                let mut vals = vec![0.0f32; t.len()];
                numeric::decode_f32(t.dtype, t.data, &mut vals);
                let finite: Vec<f64> = vals
                    .iter()
                    .filter(|v| v.is_finite())
                    .map(|v| *v as f64)
                    .collect();
                let checksum = t.data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                    (h ^ *b as u64).wrapping_mul(0x0000_0100_0000_01b3)
                });
                Some(OutputStats {
                    name: p.name.clone(),
                    dtype: t.dtype,
                    shape: t.shape.to_vec(),
                    min: finite.iter().cloned().fold(f64::INFINITY, f64::min),
                    max: finite.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
                    mean: if finite.is_empty() {
                        0.0
                    } else {
                        finite.iter().sum::<f64>() / finite.len() as f64
                    },
                    non_finite: vals.len() - finite.len(),
                    checksum,
                })
            }
            _ => None,
        })
        .collect()
}

/// `(value, index)` of each 8-byte pair of the sort instructions (TSORT32, TMRGSORT) in `bytes`:
/// an f32 value, then the u32 index read as i32 (so `-1` marks a missing pair of
/// `kernels::topk`). For f32 pair tiles; an f16 pair's value is the low half of the first word.
pub fn decode_pairs(bytes: &[u8]) -> Vec<(f32, i32)> {
    bytes
        .chunks_exact(8)
        .map(|c| {
            (
                f32::from_le_bytes([c[0], c[1], c[2], c[3]]),
                i32::from_le_bytes([c[4], c[5], c[6], c[7]]),
            )
        })
        .collect()
}
