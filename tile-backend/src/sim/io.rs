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

    /// Uniform integer in `[lo, hi]`.
    pub fn int(&mut self, lo: i64, hi: i64) -> i64 {
        if hi <= lo {
            return lo;
        }
        let span = (hi - lo) as u64 + 1;
        lo + (self.next_u64() % span) as i64
    }
}

/// Makes arguments for `kernel`: scalars at the low end of their range (1 without one), input
/// tensors uniform within their range (floats in [-1, 1], integers in [0, 7] by default), outputs
/// zero-filled.
pub fn generate(kernel: &Kernel, seed: u64) -> Result<Vec<Arg<'static>>, SimError> {
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
        let n: usize = dims.iter().product();
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
