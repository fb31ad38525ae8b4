//! Hardening, round 2 (issue #37, the ops side), one test per defect class on every backend
//! where it applies: the prefill ops' element-count limits (item 1), non-contiguous data on
//! every backend (item 2), `quant_matmul`'s documented scale range (item 3), the per-tensor
//! activation quantiser (item 4), and indices past `topk_length` (item 8).

use crate::support::*;
use candle_core::{DType, Device, Tensor};
use tileops_ops::limits::MAX_QUANT_K;
use tileops_ops::{
    flash_attention, flash_attention_varlen, paged_attention, paged_gather, qk_softmax,
    quant_matmul, quant_matmul_int8, quantize_per_channel, quantize_per_token, reshape_and_cache,
    sparse_paged_attention, Backend, FlashAttentionParams, Int8MatmulParams, OpError,
    PagedAttentionParams, QuantMatmulParams, QuantizedActivations, QuantizedWeight,
    SparseAttentionParams,
};

const CPU: Device = Device::Cpu;

fn zeros(shape: &[usize]) -> Tensor {
    Tensor::zeros(shape, DType::F32, &CPU).expect("zeros")
}

/// A stride-0 view of `shape` over one stored row of `shape`'s last dim.
fn broadcast(shape: &[usize]) -> Tensor {
    let mut one = vec![1usize; shape.len()];
    one[shape.len() - 1] = shape[shape.len() - 1];
    zeros(&one).broadcast_as(shape).expect("a broadcast view")
}

// ---------------------------------------------------------------------------------------------
// Item 1: every tensor argument (and every result) of the prefill ops is counted before anything
// is copied or allocated; a stride-0 view counts its whole shape.

fn flash_counts_every_argument(bk: Backend) {
    let p = FlashAttentionParams::new(0.125, true);
    let huge = broadcast(&[2, 4, 1 << 28, 32]);
    let small = zeros(&[2, 4, 8, 32]);
    let r = flash_attention(&huge, &small, &small, &p, Some(bk));
    expect_invalid(r, "flash_attention", "q", &["2147483647 elements"]);
    let r = flash_attention(&small, &huge, &small, &p, Some(bk));
    expect_invalid(r, "flash_attention", "k", &["2147483647 elements"]);
    let r = flash_attention(&small, &small, &huge, &p, Some(bk));
    expect_invalid(r, "flash_attention", "v", &["2147483647 elements"]);
    // Every argument fits, the result does not: q [1, 1, 2^23, 1] with Dv = 256.
    let q = broadcast(&[1, 1, 1 << 23, 1]);
    let k = zeros(&[1, 1, 4, 1]);
    let v = zeros(&[1, 1, 4, 256]);
    let r = flash_attention(&q, &k, &v, &p, Some(bk));
    expect_invalid(r, "flash_attention", "v", &["out", "2147483647 elements"]);
}

fn varlen_counts_every_argument(bk: Backend) {
    let p = FlashAttentionParams::new(0.125, false);
    let cu = |n: i64| ints(&[0, n], &[2], DType::I64);
    let huge = broadcast(&[1 << 28, 4, 32]);
    let small = zeros(&[8, 4, 32]);
    let r = flash_attention_varlen(&huge, &small, &small, &cu(1 << 28), &cu(8), &p, Some(bk));
    expect_invalid(r, "flash_attention_varlen", "q", &["2147483647 elements"]);
    let r = flash_attention_varlen(&small, &huge, &huge, &cu(8), &cu(1 << 28), &p, Some(bk));
    expect_invalid(r, "flash_attention_varlen", "k", &["2147483647 elements"]);
    let q = broadcast(&[1 << 23, 1, 1]);
    let k = zeros(&[4, 1, 1]);
    let v = zeros(&[4, 1, 256]);
    let r = flash_attention_varlen(&q, &k, &v, &cu(1 << 23), &cu(4), &p, Some(bk));
    expect_invalid(r, "flash_attention_varlen", "v", &["out"]);
}

fn qk_softmax_counts_every_argument(bk: Backend) {
    let huge = broadcast(&[1 << 26, 64]);
    let small = zeros(&[8, 64]);
    expect_invalid(
        qk_softmax(&huge, &small, 0.1, Some(bk)),
        "qk_softmax",
        "q",
        &["2147483647 elements"],
    );
    expect_invalid(
        qk_softmax(&small, &huge, 0.1, Some(bk)),
        "qk_softmax",
        "k",
        &["2147483647 elements"],
    );
    // q [2^16, 1] and k [2^16, 1] fit; P [2^16, 2^16] does not.
    let q = broadcast(&[1 << 16, 1]);
    expect_invalid(
        qk_softmax(&q, &q, 0.1, Some(bk)),
        "qk_softmax",
        "k",
        &["P [m, n]", "2147483647 elements"],
    );
}

for_each_backend!(
    flash_counts_every_argument,
    varlen_counts_every_argument,
    qk_softmax_counts_every_argument,
);

// ---------------------------------------------------------------------------------------------
// Item 2: non-contiguous data tensors are made contiguous, on every backend: each op gives, bit
// for bit, what it gives on the same values stored contiguously.

/// The bits of a call's result tensors.
fn bits(ts: &[Tensor]) -> Vec<Vec<u32>> {
    ts.iter()
        .map(|t| values(t).into_iter().map(f32::to_bits).collect())
        .collect()
}

/// Runs `call(strided)` with non-contiguous views and with contiguous copies: the same bits on
/// the Reference and TileSim; on the Ascend950, the package and `DeviceUnavailable`.
fn same_as_contiguous(bk: Backend, call: impl Fn(bool, Backend) -> Result<Vec<Tensor>, OpError>) {
    match bk {
        Backend::Ascend950 => expect_package(|| call(true, bk).map(|_| ())),
        _ => {
            let strided = call(true, bk).expect("the non-contiguous call runs");
            let dense = call(false, bk).expect("the contiguous call runs");
            assert_eq!(bits(&strided), bits(&dense), "non-contiguous vs contiguous");
        }
    }
}

/// `shape` data stored with axes `a` and `b` swapped and transposed back (non-contiguous), or
/// its contiguous copy.
fn transposed_on(
    rng: &mut Rng,
    shape: &[usize],
    (a, b): (usize, usize),
    dtype: DType,
    strided: bool,
) -> Tensor {
    let mut stored = shape.to_vec();
    stored.swap(a, b);
    let n: usize = shape.iter().product();
    let (t, _) = data(rng.vec(n, -1.0, 1.0), &stored, dtype);
    let t = t.transpose(a, b).expect("transpose");
    assert!(!t.is_contiguous());
    if strided {
        t
    } else {
        t.contiguous().expect("contiguous")
    }
}

/// [`transposed_on`] axes 0 and 1.
fn transposed(rng: &mut Rng, shape: &[usize], dtype: DType, strided: bool) -> Tensor {
    transposed_on(rng, shape, (0, 1), dtype, strided)
}

fn flash_strided_kv(bk: Backend) {
    same_as_contiguous(bk, |strided, bk| {
        let mut rng = Rng::new(3701);
        let q = transposed_on(&mut rng, &[2, 4, 24, 32], (1, 2), DType::F32, strided);
        // k and v: the everyday [B, S, H, D] tensors viewed as [B, H, S, D].
        let k = transposed_on(&mut rng, &[2, 2, 40, 32], (1, 2), DType::F32, strided);
        let v = transposed_on(&mut rng, &[2, 2, 40, 16], (1, 2), DType::F32, strided);
        let p = FlashAttentionParams::new(0.17, true);
        let (o, l) = flash_attention(&q, &k, &v, &p, Some(bk))?;
        Ok(vec![o, l])
    });
}

fn varlen_and_qk_strided(bk: Backend) {
    same_as_contiguous(bk, |strided, bk| {
        let mut rng = Rng::new(3702);
        let q = transposed(&mut rng, &[30, 4, 32], DType::BF16, strided);
        let k = transposed(&mut rng, &[20, 2, 32], DType::BF16, strided);
        let v = transposed(&mut rng, &[20, 2, 32], DType::BF16, strided);
        let cq = ints(&[0, 10, 30], &[3], DType::I32);
        let ck = ints(&[0, 12, 20], &[3], DType::I32);
        let p = FlashAttentionParams::new(0.17, false);
        let (o, l) = flash_attention_varlen(&q, &k, &v, &cq, &ck, &p, Some(bk))?;
        let q2 = transposed(&mut rng, &[24, 64], DType::F32, strided);
        let k2 = transposed(&mut rng, &[40, 64], DType::F32, strided);
        let s = qk_softmax(&q2, &k2, 0.125, Some(bk))?;
        Ok(vec![o, l, s])
    });
}

fn decode_ops_strided(bk: Backend) {
    same_as_contiguous(bk, |strided, bk| {
        let mut rng = Rng::new(3703);
        let q = transposed(&mut rng, &[2, 8, 64], DType::F32, strided);
        let kv = transposed(&mut rng, &[4, 16, 64], DType::F32, strided);
        let idx = ints(&[0, 5, 17, 40, 3, 9, -1, 63], &[2, 4], DType::I32);
        let table = ints(&[2, 0, 1, 3, 3, 1, 0, 2], &[2, 4], DType::I32);
        let (o, l) = sparse_paged_attention(
            &q,
            &kv,
            &idx,
            &table,
            &SparseAttentionParams::new(32, 0.2),
            Some(bk),
        )?;
        let kc = transposed(&mut rng, &[4, 16, 2, 32], DType::F32, strided);
        let vc = transposed(&mut rng, &[4, 16, 2, 32], DType::F32, strided);
        let pq = transposed(&mut rng, &[2, 4, 32], DType::F32, strided);
        let lens = ints(&[20, 33], &[2], DType::I32);
        let d = paged_attention(
            &pq,
            &kc,
            &vc,
            &table,
            &lens,
            &PagedAttentionParams { scale: 0.2 },
            Some(bk),
        )?;
        Ok(vec![o, l, d])
    });
}

fn cache_and_quant_strided(bk: Backend) {
    same_as_contiguous(bk, |strided, bk| {
        let mut rng = Rng::new(3704);
        let rows = transposed(&mut rng, &[3, 16], DType::F32, strided);
        let cache = zeros(&[2, 4, 16]);
        reshape_and_cache(
            &rows,
            &cache,
            &ints(&[5, -1, 2], &[3], DType::I32),
            Some(bk),
        )?;
        let x = transposed(&mut rng, &[5, 48], DType::F32, strided);
        let (w, _) = rand_data(&mut rng, &[24, 48], DType::F32);
        let w = quantize_per_channel(&w)?;
        let y = quant_matmul(&x, &w, &QuantMatmulParams::default(), Some(bk))?;
        Ok(vec![cache, y])
    });
}

for_each_backend!(
    flash_strided_kv,
    varlen_and_qk_strided,
    decode_ops_strided,
    cache_and_quant_strided,
);

// ---------------------------------------------------------------------------------------------
// Item 3: quant_matmul's weight and activation scales have a documented range, checked when the
// weight or the activations are made; inside it every backend gives the same bits and the
// documented error bound holds, at its edges too.

#[test]
fn weight_scales_outside_the_range_are_refused_when_the_weight_is_made() {
    for s in [
        2f32.powi(45),
        1e30,
        2f32.powi(-59),
        1e-30,
        f32::MIN_POSITIVE / 4.0,
    ] {
        let r = QuantizedWeight::new(vec![1; 4], vec![1.0, s], 2, 2);
        expect_invalid(r, "quantize", "scale", &["scale[1]", "[2^-58, 2^44]"]);
    }
    for s in [2f32.powi(44), 2f32.powi(-58)] {
        assert!(QuantizedWeight::new(vec![1; 4], vec![1.0, s], 2, 2).is_ok());
    }
    // A weight row of max |w| 1e20 quantises to a scale above 2^44.
    let w = Tensor::new(&[[1.0f32, 2.0], [1e20, -3.0]], &CPU).expect("w");
    expect_invalid(
        quantize_per_channel(&w),
        "quantize_per_channel",
        "w",
        &["row 1", "[2^-58, 2^44]"],
    );
    // K past the int32 accumulator's reach.
    let k = MAX_QUANT_K + 1;
    let r = QuantizedWeight::new(vec![0; k], vec![1.0], 1, k);
    expect_invalid(r, "quantize", "weight", &["131072", "131071"]);
}

fn activation_scales_outside_the_range_are_refused(bk: Backend) {
    let w = QuantizedWeight::new(vec![1; 8], vec![0.5; 2], 2, 4).expect("w");
    let p = QuantMatmulParams::default();
    for amax in [1e-20f32, 1e-40, 1e18, 3e38] {
        let x = Tensor::new(&[[0.0f32, 1.0, 0.5, -1.0], [amax, 0.0, 0.0, 0.0]], &CPU).expect("x");
        expect_invalid(
            quant_matmul(&x, &w, &p, Some(bk)),
            "quant_matmul",
            "x",
            &["row 1", "[2^-66, 2^52]"],
        );
        expect_invalid(
            quantize_per_token(&x),
            "quantize_per_token",
            "x",
            &["row 1", "[2^-66, 2^52]"],
        );
    }
}

/// The exact product `xq . wq^T` and the documented bound of an f32 result (docs/ops.md,
/// "Numerics and the error bound"): `(2^-11 + 2^-21) |E| + 2^-23 |E| + 2^(e - 25) s_x`.
fn check_bound(y: &[f32], xq: &[i8], sx: &[f32], w: &QuantizedWeight, m: usize) {
    let (n, k) = (w.n(), w.k());
    let smax = w.scale().iter().copied().fold(0f32, f32::max) as f64;
    let e = (127.0 * 127.0 * k as f64 * smax / 49152.0).log2().ceil();
    assert!((-60.0..=60.0).contains(&e), "e = {e} outside the clamp");
    for r in 0..m {
        for c in 0..n {
            let acc: i64 = (0..k)
                .map(|i| i64::from(xq[r * k + i]) * i64::from(w.data()[c * k + i]))
                .sum();
            let exact = acc as f64 * f64::from(w.scale()[c]) * f64::from(sx[r]);
            let bound = (2f64.powi(-11) + 2f64.powi(-21) + 2f64.powi(-23)) * exact.abs()
                + 2f64.powf(e - 25.0) * f64::from(sx[r]);
            let got = f64::from(y[r * n + c]);
            assert!(
                (got - exact).abs() <= bound,
                "y[{r}, {c}] = {got:e}, exact {exact:e}, bound {bound:e}"
            );
        }
    }
}

/// At the edges of both ranges (weight scales 2^44 and 2^-58, together and apart; activation
/// scales near 2^52 and 2^-66), the Reference and TileSim give the same bits and the bound holds.
#[test]
fn scale_range_edges_give_the_same_bits_and_hold_the_bound() {
    let (m, k, n) = (3usize, 40usize, 4usize);
    let mut rng = Rng::new(3705);
    let wq: Vec<i8> = (0..n * k)
        .map(|_| (rng.below(255) as i32 - 127) as i8)
        .collect();
    let big = 2f32.powi(44);
    let tiny = 2f32.powi(-58);
    let weights = [
        vec![big; n],
        vec![tiny; n],
        vec![big, tiny, 1.0, big / 3.0],
        vec![tiny, tiny * 5.0, tiny * 1000.0, tiny * 2.0],
    ];
    let x_scales = [1.0f32, 127.0 * 2f32.powi(51), 127.0 * 2f32.powi(-65)];
    for ws in weights {
        let w = QuantizedWeight::new(wq.clone(), ws.clone(), n, k).expect("a weight in range");
        for amax in x_scales {
            let v: Vec<f32> = (0..m * k).map(|_| rng.uniform(-1.0, 1.0) * amax).collect();
            let x = Tensor::from_vec(v, (m, k), &CPU).expect("x");
            let (xq, sx) = quantize_per_token(&x).expect("x in range");
            let sx = sx.to_vec1::<f32>().expect("scales");
            let p = QuantMatmulParams::default();
            let r = quant_matmul(&x, &w, &p, Some(Backend::Reference)).expect("reference");
            let t = quant_matmul(&x, &w, &p, Some(Backend::TileSim)).expect("tilesim");
            let (r, t) = (values(&r), values(&t));
            assert_eq!(
                r.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                t.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "weight scales {ws:?}, x scale {amax:e}: backends differ"
            );
            check_bound(&r, &xq, &sx, &w, m);
        }
    }
}

for_each_backend!(activation_scales_outside_the_range_are_refused);

// ---------------------------------------------------------------------------------------------
// Item 4: the per-tensor activation quantiser refuses non-finite data and computes round(x /
// scale), half away from zero, clamped.

#[test]
fn per_tensor_quantisation_refuses_non_finite_data() {
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let x = Tensor::new(&[[1.0f32, bad], [0.0, 2.0]], &CPU).expect("x");
        expect_invalid(
            QuantizedActivations::quantize(&x, 0.1),
            "quant_matmul_int8",
            "x",
            &["finite"],
        );
    }
}

/// `round(x / scale)` half away from zero, clamped, as plain Rust computes it (an f32 division).
fn model_quantize(v: &[f32], scale: f32) -> Vec<i8> {
    v.iter()
        .map(|&e| (e / scale).round().clamp(-127.0, 127.0) as i8)
        .collect()
}

#[test]
fn per_tensor_quantisation_divides_by_the_scale() {
    // Values at and next to the half-integers of several inexact scales, where x * (1 / scale)
    // and x / scale round differently; and a tiny scale, where 1 / scale is infinite and
    // 0 * inf made -127 of every 0.
    let scales = [3.0f32, 0.1, 7.0, 0.3, 1.0 / 3.0, 11.0, 1e-3, 0.017];
    for s in scales {
        let mut v = Vec::new();
        for i in -130..130 {
            let h = (i as f32 + 0.5) * s;
            v.extend([h, h.next_up(), h.next_down(), i as f32 * s]);
        }
        let n = v.len();
        let x = Tensor::from_vec(v.clone(), (n / 4, 4), &CPU).expect("x");
        let q = QuantizedActivations::quantize(&x, s).expect("quantise");
        assert_eq!(q.data(), model_quantize(&v, s).as_slice(), "scale {s}");
    }
    let x = Tensor::new(&[[0.0f32, -0.0, 1e-40, -1.0]], &CPU).expect("x");
    let q = QuantizedActivations::quantize(&x, 1e-39).expect("a tiny scale");
    assert_eq!(q.data(), &[0, 0, 0, -127]);
}

/// The int8 chain gives the same bits on the Reference and TileSim from quantised activations.
#[test]
fn per_tensor_activations_give_the_same_bits_on_both_backends() {
    let mut rng = Rng::new(3706);
    let (m, k, n) = (5usize, 64usize, 33usize);
    let x = Tensor::from_vec(rng.vec(m * k, -3.0, 3.0), (m, k), &CPU).expect("x");
    let xa = QuantizedActivations::quantize(&x, 3.0 / 127.0).expect("activations");
    let (w, _) = rand_data(&mut rng, &[n, k], DType::F32);
    let w = quantize_per_channel(&w).expect("w");
    let p = Int8MatmulParams {
        out_scale: 0.05,
        relu: false,
    };
    let r = quant_matmul_int8(&xa, &w, &p, Some(Backend::Reference)).expect("reference");
    let t = quant_matmul_int8(&xa, &w, &p, Some(Backend::TileSim)).expect("tilesim");
    assert_eq!(r.data(), t.data());
}

// ---------------------------------------------------------------------------------------------
// Item 8: entries past `topk_length` are ignored and may hold anything (any value of the index
// dtype); a counted entry past 32 bits is still an error.

fn entries_past_topk_length_may_hold_anything(bk: Backend) {
    let mut rng = Rng::new(3708);
    let (b, h, dqk, vd, bs, nb, topk) = (2usize, 4usize, 32usize, 16usize, 8usize, 6usize, 6);
    let (q, qv) = rand_data(&mut rng, &[b, h, dqk], DType::F32);
    let (kv, kvv) = rand_data(&mut rng, &[nb, bs, dqk], DType::F32);
    let table = vec![3i64, 0, 5, 1, 2, 4];
    let table_t = ints(&table, &[b, 3], DType::I32);
    let junk = [
        i64::MAX,
        i64::MIN,
        1 << 40,
        -5,
        (1 << 31) + 5,
        i64::from(i32::MIN),
    ];
    // Row 0 counts 4 entries, row 1 counts 2; the rest is junk.
    let mut idx = vec![0i64, 9, 23, 1, junk[0], junk[1], 4, 17];
    idx.extend(&junk[2..]);
    let counted: Vec<i64> = idx
        .iter()
        .enumerate()
        .map(|(i, &t)| if (i % topk) < [4, 2][i / topk] { t } else { -1 })
        .collect();
    let idx_t = ints(&idx, &[b, topk], DType::I64);
    let mut params = SparseAttentionParams::new(vd, 0.3);
    params.topk_length = Some(ints(&[4, 2], &[b], DType::I32));
    let model = SparseModel::new(
        &qv,
        &kvv,
        &counted,
        &table,
        [b, h, dqk, topk, bs, 3, vd],
        0.3,
    );
    check_backend(
        bk,
        || {
            let (o, l) = model.run();
            vec![o, l]
        },
        |bk| {
            let (o, l) = sparse_paged_attention(&q, &kv, &idx_t, &table_t, &params, Some(bk))?;
            Ok(vec![
                Part::of("out", &o, out_tol(DType::F32)),
                Part::of("lse", &l, LSE_TOL),
            ])
        },
    );
    // A counted entry past 32 bits is an error naming it.
    let mut bad = idx.clone();
    bad[1] = (1 << 31) + 5;
    let r = sparse_paged_attention(
        &q,
        &kv,
        &ints(&bad, &[b, topk], DType::I64),
        &table_t,
        &params,
        Some(bk),
    );
    expect_invalid(
        r,
        "sparse_paged_attention",
        "indices",
        &["indices[0, 1] = 2147483653", "32-bit"],
    );
}

for_each_backend!(entries_past_topk_length_may_hold_anything);

/// `paged_gather` keeps working with its own stride checks (a smoke test that the shared
/// shape checks of the tensor call accept an ordinary call).
#[test]
fn shared_shape_checks_accept_ordinary_calls() {
    let src = zeros(&[16, 8]);
    let idx = ints(&[0, 3], &[1, 2], DType::I32);
    let table = ints(&[1, 0], &[1, 2], DType::I32);
    assert!(paged_gather(&src, &idx, &table, 8, 8, Some(Backend::Reference)).is_ok());
}

/// The far corner of the range: K = MAX_QUANT_K, every weight at +127 with scale 2^44 and x at
/// its largest (the accumulator at 127^2 K, just below 2^31; the power of two at e = 60).
#[test]
fn the_largest_k_and_weight_scale_hold_the_bound_on_both_backends() {
    let k = MAX_QUANT_K;
    let w = QuantizedWeight::new(vec![127; 2 * k], vec![2f32.powi(44), 1.0], 2, k).expect("w");
    let x = Tensor::ones((1, k), DType::F32, &CPU).expect("x");
    let (xq, sx) = quantize_per_token(&x).expect("x");
    let sx = sx.to_vec1::<f32>().expect("scales");
    let p = QuantMatmulParams::default();
    let r = values(&quant_matmul(&x, &w, &p, Some(Backend::Reference)).expect("reference"));
    let t = values(&quant_matmul(&x, &w, &p, Some(Backend::TileSim)).expect("tilesim"));
    assert_eq!(
        r.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        t.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );
    assert!(r.iter().all(|v| v.is_finite()), "{r:?}");
    check_bound(&r, &xq, &sx, &w, 1);
}
