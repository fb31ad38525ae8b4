//! quant_matmul: quantisation rules, the exact modelled result on every backend, the error bound
//! against an f64 product, the int8 variant, safetensors round trips and bad inputs.

#![allow(clippy::result_large_err)] // OpError carries the simulator's error by value

// The ops' shared test support, for its per-backend test macro and its generator.
#[macro_use]
#[path = "support/mod.rs"]
mod support;

use candle_core::{DType, Device, Tensor};
use half::f16;
use tileops_ops::round_scale_19;
use tileops_ops::{
    profile, quant_matmul, quant_matmul_int8, quantize_per_channel, quantize_per_token, Backend,
    Int8MatmulParams, OpError, QuantMatmulParams, QuantizedActivations, QuantizedWeight,
};

use support::Rng;

/// A `[rows, cols]` f32 tensor uniform in `[-amp, amp)`.
fn random(rng: &mut Rng, rows: usize, cols: usize, amp: f32) -> Tensor {
    let v: Vec<f32> = rng
        .vec(rows * cols, -1.0, 1.0)
        .iter()
        .map(|x| x * amp)
        .collect();
    Tensor::from_vec(v, (rows, cols), &Device::Cpu).expect("tensor")
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
    let mut rng = Rng::new((m * 1000 + k * 10 + n) as u64);
    let x = random(&mut rng, m, k, 2.0).to_dtype(dtype).expect("x");
    let w = quantize_per_channel(&random(&mut rng, n, k, 0.5)).expect("w");
    let b: Option<Vec<f32>> = bias.then(|| (0..n).map(|_| rng.uniform(-1.0, 1.0)).collect());
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

/// Each weight keeps its own dequantisation words (computed on its first call): two weights of
/// one shape and different scales, called in turn, on the CPU plan and on the device plan
/// (different padded word counts), a clone too, each give exactly their own model values.
#[test]
fn each_weight_keeps_its_own_words_across_calls_and_plans() {
    let mut rng = Rng::new(77);
    let (m, k, n) = (3, 64, 300);
    let x = random(&mut rng, m, k, 2.0);
    let wf = random(&mut rng, n, k, 0.5);
    let w1 = quantize_per_channel(&wf).expect("w1");
    let w2 = quantize_per_channel(&(wf * 64.0).expect("scaled")).expect("w2");
    assert_ne!(w1.scale(), w2.scale());
    let p = QuantMatmulParams::default();
    let check = |w: &QuantizedWeight, profiled: bool| {
        let run = || quant_matmul(&x, w, &p, Some(Backend::TileSim));
        let got = if profiled { profile(run).0 } else { run() };
        let got = as_f32(&got.expect("runs"));
        let want = model(&x, w, None, false).0;
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&want), "profiled {profiled}");
    };
    for profiled in [false, true, false] {
        check(&w1, profiled);
        check(&w2, profiled);
    }
    check(&w2.clone(), false);
    check(&w1, true);
}

fn exact_on_shapes(backend: Backend) {
    // M in {1, 7, 16, 33, 256}, K and N tails of the 128 x 256 x 256 tiles (300 x 257), one and
    // several K slices (K = 1100 also crosses the Reference's 1024 slice).
    for m in [1, 7, 16, 33, 256] {
        check_exact(backend, m, 300, 257, DType::F32, false, false);
    }
    check_exact(backend, 65, 64, 32, DType::F32, true, false);
    check_exact(backend, 5, 1100, 40, DType::F32, true, true);
    check_exact(backend, 3, 512, 513, DType::BF16, true, false);
    check_exact(backend, 4, 64, 20, DType::F16, false, true);
}

/// `x` with rows 0 and 2 all zero, `w` with channel 1 all zero: the zero rows get scale 1 and
/// quantise to zeros; their outputs are exactly the bias.
fn zero_rows(backend: Backend) {
    let mut rng = Rng::new(5);
    let (m, k, n) = (4, 96, 40);
    let mask = Tensor::new(&[[0f32], [1.0], [0.0], [1.0]], &Device::Cpu).expect("mask");
    let x = random(&mut rng, m, k, 1.0).broadcast_mul(&mask).expect("x");
    let wmask: Vec<f32> = (0..n).map(|j| if j == 1 { 0.0 } else { 1.0 }).collect();
    let wmask = Tensor::from_vec(wmask, (n, 1), &Device::Cpu).expect("wm");
    let w = quantize_per_channel(
        &random(&mut rng, n, k, 1.0)
            .broadcast_mul(&wmask)
            .expect("w"),
    )
    .expect("quantise");
    assert_eq!(w.scale()[1], 1.0);
    assert!(w.data()[k..2 * k].iter().all(|&q| q == 0));
    let b: Vec<f32> = (0..n).map(|j| j as f32 * 0.25 - 3.0).collect();
    let params = QuantMatmulParams {
        bias: Some(Tensor::from_slice(&b, n, &Device::Cpu).expect("b")),
        ..Default::default()
    };
    let y = match quant_matmul(&x, &w, &params, Some(backend)) {
        Err(OpError::DeviceUnavailable { .. }) if backend == Backend::Ascend950 => return,
        r => as_f32(&r.expect("runs")),
    };
    for i in [0, 2] {
        assert_eq!(&y[i * n..(i + 1) * n], &b[..], "row {i}");
    }
    for i in [1, 3] {
        assert_eq!(y[i * n + 1], b[1], "channel 1 of row {i}");
    }
    check_exact(backend, 1, 32, 16, DType::F32, false, false);
}

/// The distance to exact products: to `acc · s_w · s_x` (+ bias) within the Fixpipe's f16 and
/// the f32 steps (docs/ops.md), and to the f64 product of the unquantised data within the
/// quantisation error `Σ_k (s_x/2 |w_k| + |x_k| s_w/2 + s_x s_w / 4)`.
fn error_bounds(backend: Backend) {
    let mut rng = Rng::new(77);
    let (m, k, n) = (9, 700, 70);
    let x = random(&mut rng, m, k, 3.0);
    let wf = random(&mut rng, n, k, 0.02);
    let w = quantize_per_channel(&wf).expect("w");
    let b: Vec<f32> = (0..n).map(|_| rng.uniform(-1.0, 1.0)).collect();
    let params = QuantMatmulParams {
        bias: Some(Tensor::from_slice(&b, n, &Device::Cpu).expect("b")),
        ..Default::default()
    };
    let y = match quant_matmul(&x, &w, &params, Some(backend)) {
        Err(OpError::DeviceUnavailable { .. }) if backend == Backend::Ascend950 => return,
        r => as_f32(&r.expect("runs")),
    };
    let (xq, sx) = quantize_per_token(&x).expect("xq");
    let sx = sx.to_vec1::<f32>().expect("sx");
    let smax = w.scale().iter().copied().fold(0f32, f32::max) as f64;
    let e = (127.0 * 127.0 * k as f64 * smax / 49152.0).log2().ceil();
    let (xv, wv) = (as_f32(&x), as_f32(&wf));
    for i in 0..m {
        for j in 0..n {
            let (mut acc, mut exact, mut qerr) = (0i64, 0f64, 0f64);
            let (s_x, s_w) = (sx[i] as f64, w.scale()[j] as f64);
            for p in 0..k {
                acc += i64::from(xq[i * k + p]) * i64::from(w.data()[j * k + p]);
                let (a, c) = (xv[i * k + p] as f64, wv[j * k + p] as f64);
                exact += a * c;
                qerr += s_x / 2.0 * c.abs() + a.abs() * s_w / 2.0 + s_x * s_w / 4.0;
            }
            let ex = acc as f64 * s_w * s_x;
            let got = y[i * n + j] as f64 - b[j] as f64;
            let tol = (2f64.powi(-11) + 2f64.powi(-21)) * ex.abs()
                + 2f64.powi(-24) * (ex + b[j] as f64).abs() * 2.0
                + 2f64.powf(e - 25.0) * s_x;
            assert!(
                (got - ex).abs() <= tol,
                "[{i}, {j}] {got} vs {ex} (tol {tol})"
            );
            assert!(
                (got - exact).abs() <= tol + qerr,
                "[{i}, {j}] {got} vs unquantised {exact} (tol {})",
                tol + qerr
            );
        }
    }
}

#[test]
fn reference_gives_the_modelled_values() {
    exact_on_shapes(Backend::Reference);
}

#[test]
fn tilesim_gives_the_modelled_values() {
    exact_on_shapes(Backend::TileSim);
}

/// The package of a call with tails in M, K and N (K = 64 < TK: the K slice is fill-padded) is
/// written and compiles against the PTO declaration header, whose TFILLPAD on a Mat tile takes
/// NZ only (as A5's does).
#[test]
fn ascend950_writes_the_package_and_reports_no_device() {
    let mut rng = Rng::new(3);
    let x = random(&mut rng, 2, 64, 1.0);
    let w = quantize_per_channel(&random(&mut rng, 32, 64, 1.0)).expect("w");
    match quant_matmul(
        &x,
        &w,
        &QuantMatmulParams::default(),
        Some(Backend::Ascend950),
    ) {
        Err(OpError::DeviceUnavailable { op, package, .. }) => {
            assert_eq!(op, "quant_matmul");
            assert!(package.exists(), "{}", package.display());
        }
        other => panic!("expected DeviceUnavailable, got {other:?}"),
    }
    // Every file of the package compiles against the declaration header.
    support::expect_package(|| {
        quant_matmul(
            &x,
            &w,
            &QuantMatmulParams::default(),
            Some(Backend::Ascend950),
        )
        .map(|_| ())
    });
}

/// A weight of stacked channels gives, bit for bit, the columns of the calls on its parts when
/// they share K and the Fixpipe's power of two (a gate and an up projection of one SwiGLU); a
/// part whose scales need another power of two, or another K, is refused.
fn concatenated_channels_give_the_parts_columns(backend: Backend) {
    let mut rng = Rng::new(31);
    let (m, k) = (3, 256);
    let x = random(&mut rng, m, k, 1.5);
    let a = quantize_per_channel(&random(&mut rng, 128, k, 0.1)).expect("a");
    let b = quantize_per_channel(&random(&mut rng, 96, k, 0.1)).expect("b");
    let w = QuantizedWeight::concat_channels(&[&a, &b]).expect("same power of two");
    assert_eq!((w.n(), w.k()), (224, k));
    let p = QuantMatmulParams::default();
    let run = |w: &QuantizedWeight| {
        let t = quant_matmul(&x, w, &p, Some(backend)).expect("runs");
        t.to_vec2::<f32>().expect("f32")
    };
    let (ya, yb, y) = (run(&a), run(&b), run(&w));
    for r in 0..m {
        let parts: Vec<u32> = ya[r].iter().chain(&yb[r]).map(|v| v.to_bits()).collect();
        let whole: Vec<u32> = y[r].iter().map(|v| v.to_bits()).collect();
        assert_eq!(whole, parts, "row {r}");
    }
    // 64 times the scales: a power of two 2^6 higher.
    let big = quantize_per_channel(&random(&mut rng, 32, k, 6.4)).expect("big");
    assert!(QuantizedWeight::concat_channels(&[&a, &big]).is_none());
    let short = quantize_per_channel(&random(&mut rng, 32, 128, 0.1)).expect("short");
    assert!(QuantizedWeight::concat_channels(&[&a, &short]).is_none());
    assert!(QuantizedWeight::concat_channels(&[]).is_none());
}

for_each_backend!(
    simulated:
    zero_rows,
    concatenated_channels_give_the_parts_columns,
    error_bounds,
    int8_variant,
    int8_ties_and_saturation
);

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

/// The int8 variant's scalar model: `sat(rint(relu?(f32(acc)) · word))`.
fn model_int8(
    x: &QuantizedActivations,
    w: &QuantizedWeight,
    out_scale: f32,
    relu: bool,
) -> Vec<i8> {
    let (m, k, n) = (x.m(), x.k(), w.n());
    let mut out = Vec::with_capacity(m * n);
    for i in 0..m {
        for j in 0..n {
            let acc: i64 = (0..k)
                .map(|p| i64::from(x.data()[i * k + p]) * i64::from(w.data()[j * k + p]))
                .sum();
            let word = round_scale_19(
                ((x.scale() as f64 * w.scale()[j] as f64) / out_scale as f64) as f32,
            );
            let mut a = acc as i32 as f32;
            if relu {
                a = a.max(0.0);
            }
            out.push((a * word).round_ties_even().clamp(-128.0, 127.0) as i8);
        }
    }
    out
}

fn int8_variant(backend: Backend) {
    let mut rng = Rng::new(11);
    // Two chained layers: [7, 300] -> [7, 257] -> [7, 33].
    let x = QuantizedActivations::quantize(&random(&mut rng, 7, 300, 1.0), 1.0 / 127.0).expect("x");
    let w1 = quantize_per_channel(&random(&mut rng, 257, 300, 0.1)).expect("w1");
    let w2 = quantize_per_channel(&random(&mut rng, 33, 257, 0.1)).expect("w2");
    for relu in [false, true] {
        let p1 = Int8MatmulParams {
            out_scale: 0.02,
            relu,
        };
        let h = quant_matmul_int8(&x, &w1, &p1, Some(backend)).expect("layer 1");
        assert_eq!((h.m(), h.k(), h.scale()), (7, 257, 0.02));
        assert_eq!(
            h.data(),
            &model_int8(&x, &w1, 0.02, relu)[..],
            "layer 1 relu={relu}"
        );
        assert!(h.data().iter().any(|&v| v != 0) && h.data().iter().any(|&v| v.abs() < 127));
        if relu {
            assert!(h.data().iter().all(|&v| v >= 0));
        }
        let p2 = Int8MatmulParams {
            out_scale: 0.05,
            relu: false,
        };
        let y = quant_matmul_int8(&h, &w2, &p2, Some(backend)).expect("layer 2");
        assert_eq!(
            y.data(),
            &model_int8(&h, &w2, 0.05, false)[..],
            "layer 2 relu={relu}"
        );
    }
}

/// acc · 0.5 lands on exact .5 ties (rounded to even by the Fixpipe) and past ±127 (saturated
/// to 127 and, on the signed path, -128).
fn int8_ties_and_saturation(backend: Backend) {
    let xs: Vec<i8> = vec![1, 3, 5, -1, -3, 127, -127, 0];
    let x = QuantizedActivations::new(xs.clone(), 1, 8, 1.0).expect("x");
    // Channel j picks x[j] (twice for j >= 5, so acc = ±254, ±254·... saturates).
    let mut w = vec![0i8; 8 * 8];
    for j in 0..8 {
        w[j * 8 + j] = if j >= 5 { 2 } else { 1 };
    }
    let w = QuantizedWeight::new(w, vec![1.0; 8], 8, 8).expect("w");
    let y = quant_matmul_int8(
        &x,
        &w,
        &Int8MatmulParams {
            out_scale: 2.0,
            relu: false,
        },
        Some(backend),
    )
    .expect("runs");
    // 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, -0.5 -> 0, -1.5 -> -2, 127 -> 127, -127 -> -127, 0.
    assert_eq!(y.data(), &[0, 2, 2, 0, -2, 127, -127, 0]);
    let y = quant_matmul_int8(
        &x,
        &w,
        &Int8MatmulParams {
            out_scale: 0.5,
            relu: false,
        },
        Some(backend),
    )
    .expect("runs");
    assert_eq!(y.data(), &[2, 6, 10, -2, -6, 127, -128, 0]);
}

fn expect_invalid<T: std::fmt::Debug>(r: Result<T, OpError>, arg: &str, needle: &str) {
    match r {
        Err(e @ OpError::Invalid { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains(&format!("argument `{arg}`")) && msg.contains(needle),
                "{msg}"
            );
        }
        other => panic!("expected Invalid({arg}), got {other:?}"),
    }
}

#[test]
fn bad_inputs_name_the_argument() {
    let mut rng = Rng::new(9);
    let w = quantize_per_channel(&random(&mut rng, 16, 64, 1.0)).expect("w");
    let x = random(&mut rng, 3, 64, 1.0);
    let p = QuantMatmulParams::default();
    for backend in [Backend::Reference, Backend::TileSim] {
        let b = Some(backend);
        expect_invalid(
            quant_matmul(&random(&mut rng, 3, 48, 1.0), &w, &p, b),
            "x",
            "K = 64",
        );
        let empty = Tensor::zeros((0, 64), DType::F32, &Device::Cpu).expect("e");
        expect_invalid(quant_matmul(&empty, &w, &p, b), "x", "must not be empty");
        let ints = Tensor::zeros((3, 64), DType::I64, &Device::Cpu).expect("i");
        expect_invalid(quant_matmul(&ints, &w, &p, b), "x", "not supported");
        let v = Tensor::zeros(64, DType::F32, &Device::Cpu).expect("v");
        expect_invalid(quant_matmul(&v, &w, &p, b), "x", "rank 2");
        let nan = x
            .affine(1.0, 0.0)
            .and_then(|t| t.slice_assign(&[0..1, 0..1], &Tensor::new(&[[f32::NAN]], &Device::Cpu)?))
            .expect("nan");
        expect_invalid(quant_matmul(&nan, &w, &p, b), "x", "must be finite");
        let inf = (x.clone() / 0.0).expect("inf");
        expect_invalid(quant_matmul(&inf, &w, &p, b), "x", "must be finite");
        let bad_out = QuantMatmulParams {
            out_dtype: Some(DType::I64),
            ..Default::default()
        };
        expect_invalid(
            quant_matmul(&x, &w, &bad_out, b),
            "out_dtype",
            "not supported",
        );
        let bad_bias = QuantMatmulParams {
            bias: Some(Tensor::zeros(15, DType::F32, &Device::Cpu).expect("b")),
            ..Default::default()
        };
        expect_invalid(quant_matmul(&x, &w, &bad_bias, b), "bias", "N = 16");
        let xq = QuantizedActivations::new(vec![0; 3 * 32], 3, 32, 1.0).expect("xq");
        let p8 = Int8MatmulParams {
            out_scale: 1.0,
            relu: false,
        };
        expect_invalid(quant_matmul_int8(&xq, &w, &p8, b), "x", "K = 32");
        let xq = QuantizedActivations::new(vec![0; 3 * 64], 3, 64, 1.0).expect("xq");
        for bad in [f32::NAN, 0.0, -1.0, f32::INFINITY] {
            let p8 = Int8MatmulParams {
                out_scale: bad,
                relu: false,
            };
            expect_invalid(
                quant_matmul_int8(&xq, &w, &p8, b),
                "out_scale",
                "finite and positive",
            );
        }
        let p8 = Int8MatmulParams {
            out_scale: 1e-45,
            relu: false,
        };
        expect_invalid(
            quant_matmul_int8(&xq, &w, &p8, b),
            "out_scale",
            "not a finite positive",
        );
    }
    expect_invalid(
        QuantizedWeight::new(vec![0; 10], vec![1.0; 2], 2, 4),
        "data",
        "needs 8",
    );
    expect_invalid(
        QuantizedWeight::new(vec![0; 8], vec![1.0; 3], 2, 4),
        "scale",
        "N = 2",
    );
    expect_invalid(
        QuantizedWeight::new(vec![], vec![], 0, 4),
        "weight",
        "must not be empty",
    );
    for bad in [f32::NAN, f32::INFINITY, 0.0, -0.5] {
        expect_invalid(
            QuantizedWeight::new(vec![0; 8], vec![1.0, bad], 2, 4),
            "scale",
            "scale[1]",
        );
    }
    expect_invalid(
        QuantizedActivations::new(vec![0; 5], 2, 3, 1.0),
        "data",
        "[2, 3]",
    );
    expect_invalid(
        QuantizedActivations::new(vec![0; 6], 2, 3, f32::NAN),
        "scale",
        "finite",
    );
    expect_invalid(
        quantize_per_channel(&Tensor::zeros((2, 0), DType::F32, &Device::Cpu).expect("e")),
        "w",
        "must not be empty",
    );
    expect_invalid(
        quantize_per_token(&Tensor::zeros((2, 3, 4), DType::F32, &Device::Cpu).expect("e")),
        "x",
        "rank 2",
    );
}

/// A scratch path for one test's file.
fn scratch(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "tileops-quant-{}-{name}.safetensors",
        std::process::id()
    ))
}

#[test]
fn safetensors_round_trip_and_a_file_written_with_the_real_i8_dtype() {
    use safetensors::{tensor::TensorView, Dtype};
    let mut rng = Rng::new(21);
    let w = quantize_per_channel(&random(&mut rng, 33, 70, 1.0)).expect("w");
    let path = scratch("round-trip");
    w.save(&path, "layer.w").expect("save");
    let back = QuantizedWeight::load(&path, "layer.w").expect("load");
    assert_eq!((back.n(), back.k()), (33, 70));
    assert_eq!(back.data(), w.data());
    assert_eq!(back.scale(), w.scale());
    let d = w.dequantize(&Device::Cpu).expect("dq");
    assert_eq!(d.dims(), [33, 70]);
    assert_eq!(as_f32(&d)[71], w.data()[71] as f32 * w.scale()[1]);

    // A multi-tensor file written by hand with the I8 dtype (as another tool would write it).
    let data: Vec<u8> = [1i8, -2, 3, -127, 0, 127]
        .iter()
        .map(|&v| v as u8)
        .collect();
    let scale: Vec<u8> = [0.5f32, 0.25]
        .iter()
        .flat_map(|s| s.to_le_bytes())
        .collect();
    let other = [0u8; 12];
    let views = vec![
        (
            "m".to_string(),
            TensorView::new(Dtype::I8, vec![2, 3], &data).expect("v"),
        ),
        (
            "m_scale".to_string(),
            TensorView::new(Dtype::F32, vec![2], &scale).expect("v"),
        ),
        (
            "other".to_string(),
            TensorView::new(Dtype::F32, vec![3], &other).expect("v"),
        ),
    ];
    let bytes = safetensors::serialize(views, None).expect("serialize");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("parse");
    let m = QuantizedWeight::from_safetensors(&st, "m").expect("from file");
    assert_eq!(m.data(), &[1, -2, 3, -127, 0, 127]);
    assert_eq!(m.scale(), &[0.5, 0.25]);
    // Our entries beside other tensors, read back.
    let mut entries = w.safetensors_entries("a");
    entries.extend(m.safetensors_entries("b"));
    let bytes = safetensors::serialize(entries, None).expect("serialize");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("parse");
    assert_eq!(
        QuantizedWeight::from_safetensors(&st, "a")
            .expect("a")
            .data(),
        w.data()
    );
    assert_eq!(
        QuantizedWeight::from_safetensors(&st, "b")
            .expect("b")
            .scale(),
        m.scale()
    );

    // Wrong dtype, wrong shapes, missing tensors.
    let f32s = [0u8; 24];
    let bad = |views: Vec<(&str, Dtype, Vec<usize>, &[u8])>, needle: &str| {
        let v: Vec<(String, TensorView<'_>)> = views
            .into_iter()
            .map(|(n, d, s, b)| (n.to_string(), TensorView::new(d, s, b).expect("view")))
            .collect();
        let bytes = safetensors::serialize(v, None).expect("serialize");
        let st = safetensors::SafeTensors::deserialize(&bytes).expect("parse");
        expect_invalid(
            QuantizedWeight::from_safetensors(&st, "m"),
            "safetensors",
            needle,
        );
    };
    bad(
        vec![
            ("m", Dtype::U8, vec![2, 3], &data),
            ("m_scale", Dtype::F32, vec![2], &scale),
        ],
        "dtype U8",
    );
    bad(
        vec![
            ("m", Dtype::F32, vec![2, 3], &f32s),
            ("m_scale", Dtype::F32, vec![2], &scale),
        ],
        "I8",
    );
    bad(
        vec![
            ("m", Dtype::I8, vec![6], &data),
            ("m_scale", Dtype::F32, vec![2], &scale),
        ],
        "2-D",
    );
    bad(
        vec![
            ("m", Dtype::I8, vec![3, 2], &data),
            ("m_scale", Dtype::F32, vec![2], &scale),
        ],
        "[N] = [3]",
    );
    bad(
        vec![
            ("m", Dtype::I8, vec![2, 3], &data),
            ("m_scale", Dtype::F16, vec![4], &scale),
        ],
        "F32",
    );
    bad(vec![("m", Dtype::I8, vec![2, 3], &data)], "m_scale");
    bad(vec![("m_scale", Dtype::F32, vec![2], &scale)], "`m`");
    expect_invalid(
        QuantizedWeight::load(&scratch("missing"), "m"),
        "path",
        "reading",
    );
    std::fs::write(scratch("garbage"), b"not a safetensors file").expect("write");
    expect_invalid(
        QuantizedWeight::load(&scratch("garbage"), "m"),
        "path",
        "not a safetensors file",
    );
    let _ = std::fs::remove_file(scratch("garbage"));
    let _ = std::fs::remove_file(&path);
}
