//! quant_matmul: quantisation rules, the exact modelled result on every backend, the error bound
//! against an f64 product, the int8 variant, safetensors round trips and bad inputs.

#![allow(clippy::result_large_err)] // OpError carries the simulator's error by value

use candle_core::{DType, Device, Tensor};
use half::f16;
use tileops_ops::quant_matmul::round_scale_19;
use tileops_ops::{
    profile, quant_matmul, quant_matmul_int8, quantize_per_channel, quantize_per_token, Backend,
    Int8MatmulParams, OpError, QuantMatmulParams, QuantizedActivations, QuantizedWeight,
};

/// A small deterministic generator (splitmix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    fn value(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    fn tensor(&mut self, rows: usize, cols: usize, amp: f32) -> Tensor {
        let v: Vec<f32> = (0..rows * cols).map(|_| self.value() * amp).collect();
        Tensor::from_vec(v, (rows, cols), &Device::Cpu).expect("tensor")
    }
}

/// Runs `f` profiled on `backend` and fails on any hazard the simulator found; a TileSim call
/// must have launched one kernel.
fn no_hazards<R>(backend: Backend, f: impl FnOnce() -> R) -> R {
    let (r, records) = profile(f);
    for l in &records {
        assert!(l.hazards.is_empty(), "{}: {:?}", l.kernel, l.hazards);
    }
    if backend == Backend::TileSim {
        assert_eq!(records.len(), 1, "one launch");
    }
    r
}

/// The scalar model of the documented numerics: exact i64 accumulation, `f16(f32(acc) *
/// word)`, times the row factor, bias, ReLU (f32), cast.
fn model(
    x: &Tensor,
    w: &QuantizedWeight,
    bias: Option<&[f32]>,
    relu: bool,
) -> (Vec<f32>, usize, usize) {
    let (xq, sx) = quantize_per_token(x).expect("quantise");
    let sx = sx.to_vec1::<f32>().expect("scales");
    let (m, k, n) = (sx.len(), w.k(), w.n());
    let smax = w.scale().iter().copied().fold(0f32, f32::max) as f64;
    let e = (127.0 * 127.0 * k as f64 * smax / 49152.0)
        .log2()
        .ceil()
        .clamp(-60.0, 60.0) as i32;
    let mut out = vec![0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let acc: i64 = (0..k)
                .map(|p| i64::from(xq[i * k + p]) * i64::from(w.data()[j * k + p]))
                .sum();
            let word = w.scale()[j] * 2f32.powi(-e);
            let d = f16::from_f32(acc as i32 as f32 * word).to_f32();
            let mut y = d * (sx[i] * 2f32.powi(e));
            if let Some(b) = bias {
                y += b[j];
            }
            if relu {
                y = y.max(0.0);
            }
            out[i * n + j] = y;
        }
    }
    (out, m, n)
}

fn as_f32(t: &Tensor) -> Vec<f32> {
    t.to_dtype(DType::F32)
        .and_then(|t| t.flatten_all())
        .and_then(|t| t.to_vec1::<f32>())
        .expect("f32 values")
}

/// Every backend that runs gives exactly the model's values (cast to the output dtype).
fn check_exact(
    backend: Backend,
    m: usize,
    k: usize,
    n: usize,
    dtype: DType,
    bias: bool,
    relu: bool,
) {
    let mut rng = Rng((m * 1000 + k * 10 + n) as u64);
    let x = rng.tensor(m, k, 2.0).to_dtype(dtype).expect("x");
    let w = quantize_per_channel(&rng.tensor(n, k, 0.5)).expect("w");
    let b: Option<Vec<f32>> = bias.then(|| (0..n).map(|_| rng.value()).collect());
    let params = QuantMatmulParams {
        out_dtype: None,
        bias: b
            .as_ref()
            .map(|b| Tensor::from_slice(b, n, &Device::Cpu).expect("bias")),
        relu,
    };
    let got = no_hazards(backend, || quant_matmul(&x, &w, &params, Some(backend)));
    let got = match (backend, got) {
        (Backend::Ascend950, Err(OpError::DeviceUnavailable { .. })) => return,
        (_, r) => r.unwrap_or_else(|e| panic!("{backend} m={m} k={k} n={n}: {e}")),
    };
    assert_eq!(got.dims(), [m, n]);
    assert_eq!(got.dtype(), dtype);
    let (want, _, _) = model(&x, &w, b.as_deref(), relu);
    let want = Tensor::from_vec(want, (m, n), &Device::Cpu)
        .and_then(|t| t.to_dtype(dtype))
        .expect("want");
    let (g, wv) = (as_f32(&got), as_f32(&want));
    for (i, (a, b)) in g.iter().zip(&wv).enumerate() {
        assert_eq!(
            a.to_bits(),
            b.to_bits(),
            "{backend} {dtype:?} m={m} k={k} n={n}: [{}, {}] {a} vs {b}",
            i / n,
            i % n
        );
    }
}

fn exact_on_shapes(backend: Backend) {
    for (m, k, n) in [(1, 64, 32), (7, 300, 257), (16, 128, 64), (33, 96, 48)] {
        check_exact(backend, m, k, n, DType::F32, false, false);
    }
    check_exact(backend, 5, 1100, 40, DType::F32, true, true);
    check_exact(backend, 3, 200, 33, DType::BF16, true, false);
    check_exact(backend, 4, 64, 20, DType::F16, false, true);
}

#[test]
fn reference_gives_the_modelled_values() {
    exact_on_shapes(Backend::Reference);
}

#[test]
fn tilesim_gives_the_modelled_values() {
    exact_on_shapes(Backend::TileSim);
}

#[test]
fn quantisation_rounds_half_away_from_zero_with_19_bit_scales() {
    // Row max 127 * s with s a 19-bit value: the scale is s exactly, so x = 0.5 s and 2.5 s are
    // exact ties; half away gives 1 and 3 (half even would give 0 and 2).
    let s = round_scale_19(0.013);
    let row = [127.0 * s, 0.5 * s, -2.5 * s, 1.5 * s];
    let x = Tensor::new(&[row, [0.0; 4]], &Device::Cpu).expect("x");
    let w = quantize_per_channel(&x).expect("w");
    assert_eq!(w.scale(), &[s, 1.0]);
    assert_eq!(w.data(), &[127, 1, -3, 2, 0, 0, 0, 0]);
    let (q, sx) = quantize_per_token(&x).expect("x");
    assert_eq!(q, w.data());
    assert_eq!(sx.to_vec1::<f32>().expect("s"), vec![s, 1.0]);
    // 19 bits: bits [12:0] clear, nearest even.
    for v in [0.013f32, 1.0 / 127.0, 3.1e-5, 0.7] {
        let r = round_scale_19(v);
        assert_eq!(r.to_bits() & 0x1fff, 0);
        assert!(((r - v) / v).abs() <= 2f32.powi(-11), "{v} -> {r}");
    }
    assert_eq!(round_scale_19(f32::from_bits(0x3f80_1000)), 1.0); // tie -> even
    assert_eq!(
        round_scale_19(f32::from_bits(0x3f80_3000)).to_bits(),
        0x3f80_4000
    );
}
