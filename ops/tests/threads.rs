//! Every op called from several threads at once through the bridge (each call has its own
//! error, extra-output and workspace channels): each thread's TileSim result equals the
//! Reference result of its own inputs.

use candle_core::{Device, Tensor};
use tile_backend::sim::io::Rng;
use tileops_ops::{
    flash_attention, paged_attention, paged_gather, qk_softmax, quant_matmul, quantize_per_channel,
    reshape_and_cache, sparse_paged_attention, Backend, FlashAttentionParams, PagedAttentionParams,
    QuantMatmulParams, SparseAttentionParams,
};

fn values(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.unit() as f32 - 0.5).collect()
}

fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
    let a: Vec<f32> = a.flatten_all().and_then(|t| t.to_vec1()).expect("f32");
    let b: Vec<f32> = b.flatten_all().and_then(|t| t.to_vec1()).expect("f32");
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// One call of every op on inputs drawn from `seed`, checked against the Reference.
fn every_op(seed: u64) {
    let dev = Device::Cpu;
    let mut rng = Rng::new(seed);
    // paged_gather: 24 rows of 40 columns in blocks of 4, gather 10.
    let src = Tensor::from_vec(values(&mut rng, 24 * 40), (24, 40), &dev).expect("src");
    let table = Tensor::from_vec(vec![5i64, 3, 0, 1, 2, 4], (1, 6), &dev).expect("table");
    let idx: Vec<i64> = (0..10).map(|_| rng.int(0, 23)).collect();
    let idx = Tensor::from_vec(idx, (1, 10), &dev).expect("indices");
    let got = paged_gather(&src, &idx, &table, 4, 40, Some(Backend::TileSim)).expect("sim");
    let want = paged_gather(&src, &idx, &table, 4, 40, Some(Backend::Reference)).expect("ref");
    assert_eq!(max_diff(&got, &want), 0.0, "paged_gather, seed {seed}");

    // sparse_paged_attention: B 2, H 16, Dqk 64, v_dim 32, top-k 24 over 32 cached tokens.
    let (b, h, d, vd, topk, bs, nblk) = (2, 16, 64, 32, 24, 8, 4);
    let q = Tensor::from_vec(values(&mut rng, b * h * d), (b, h, d), &dev).expect("q");
    let kv = Tensor::from_vec(values(&mut rng, nblk * bs * d), (nblk, bs, d), &dev).expect("kv");
    let ind: Vec<i64> = (0..b * topk).map(|_| rng.int(-1, 31)).collect();
    let ind = Tensor::from_vec(ind, (b, topk), &dev).expect("indices");
    let bt = Tensor::from_vec(vec![3i64, 1, 0, 2, 0, 1, 2, 3], (b, nblk), &dev).expect("table");
    let params = SparseAttentionParams {
        v_dim: vd,
        scale: 0.125,
        topk_length: None,
        sink: None,
        batch_invariant: false,
    };
    let (o, lse) =
        sparse_paged_attention(&q, &kv, &ind, &bt, &params, Some(Backend::TileSim)).expect("sim");
    let (ro, rlse) =
        sparse_paged_attention(&q, &kv, &ind, &bt, &params, Some(Backend::Reference)).expect("ref");
    assert!(max_diff(&o, &ro) < 1e-4, "sparse out, seed {seed}");
    let finite = |t: &Tensor| -> Vec<f32> {
        let v: Vec<f32> = t.flatten_all().and_then(|t| t.to_vec1()).expect("f32");
        v.into_iter()
            .map(|x| if x.is_finite() { x } else { 1e9 })
            .collect()
    };
    let (l, rl) = (finite(&lse), finite(&rlse));
    assert!(
        l.iter().zip(&rl).all(|(x, y)| (x - y).abs() < 1e-3),
        "sparse lse, seed {seed}"
    );

    // paged_attention: B 2, H 8 over Hkv 2, D 32, contexts 11 and 20, blocks of 8.
    let (b, h, hkv, d, bs, nblk) = (2, 8, 2, 32, 8, 6);
    let q = Tensor::from_vec(values(&mut rng, b * h * d), (b, h, d), &dev).expect("q");
    let n = nblk * bs * hkv * d;
    let kc = Tensor::from_vec(values(&mut rng, n), (nblk, bs, hkv, d), &dev).expect("k");
    let vc = Tensor::from_vec(values(&mut rng, n), (nblk, bs, hkv, d), &dev).expect("v");
    let bt = Tensor::from_vec(vec![5i64, 2, 0, 1, 3, 4], (b, 3), &dev).expect("table");
    let lens = Tensor::from_vec(vec![11i64, 20], (b,), &dev).expect("lens");
    let p = PagedAttentionParams { scale: 0.2 };
    let o = paged_attention(&q, &kc, &vc, &bt, &lens, &p, Some(Backend::TileSim)).expect("sim");
    let r = paged_attention(&q, &kc, &vc, &bt, &lens, &p, Some(Backend::Reference)).expect("ref");
    assert!(max_diff(&o, &r) < 1e-4, "paged_attention, seed {seed}");

    // reshape_and_cache: 5 rows of 2 x 16 into 4 blocks of 4 slots.
    let rows = Tensor::from_vec(values(&mut rng, 5 * 32), (5, 2, 16), &dev).expect("rows");
    let slots = Tensor::from_vec(vec![3i64, -1, 7, 12, 0], (5,), &dev).expect("slots");
    let fresh = || Tensor::zeros((4, 4, 2, 16), candle_core::DType::F32, &dev).expect("cache");
    let (c_sim, c_ref) = (fresh(), fresh());
    reshape_and_cache(&rows, &c_sim, &slots, Some(Backend::TileSim)).expect("sim");
    reshape_and_cache(&rows, &c_ref, &slots, Some(Backend::Reference)).expect("ref");
    assert_eq!(
        max_diff(&c_sim, &c_ref),
        0.0,
        "reshape_and_cache, seed {seed}"
    );

    // flash_attention: B 1, H 4 over Hkv 2, Sq 20, Skv 37, D 32, Dv 16, causal.
    let (h, hkv, sq, skv, d, dv) = (4, 2, 20, 37, 32, 16);
    let q = Tensor::from_vec(values(&mut rng, h * sq * d), (1, h, sq, d), &dev).expect("q");
    let k = Tensor::from_vec(values(&mut rng, hkv * skv * d), (1, hkv, skv, d), &dev).expect("k");
    let v = Tensor::from_vec(values(&mut rng, hkv * skv * dv), (1, hkv, skv, dv), &dev).expect("v");
    let p = FlashAttentionParams::new(0.25, true);
    let (o, lse) = flash_attention(&q, &k, &v, &p, Some(Backend::TileSim)).expect("sim");
    let (ro, rlse) = flash_attention(&q, &k, &v, &p, Some(Backend::Reference)).expect("ref");
    assert!(max_diff(&o, &ro) < 1e-4, "flash out, seed {seed}");
    assert!(max_diff(&lse, &rlse) < 1e-3, "flash lse, seed {seed}");

    // qk_softmax: M 9, N 45, D 32.
    let q = Tensor::from_vec(values(&mut rng, 9 * 32), (9, 32), &dev).expect("q");
    let k = Tensor::from_vec(values(&mut rng, 45 * 32), (45, 32), &dev).expect("k");
    let got = qk_softmax(&q, &k, 0.3, Some(Backend::TileSim)).expect("sim");
    let want = qk_softmax(&q, &k, 0.3, Some(Backend::Reference)).expect("ref");
    assert!(max_diff(&got, &want) < 1e-5, "qk_softmax, seed {seed}");

    // quant_matmul: x [5, 40] against int8 weights [24, 40].
    let w = Tensor::from_vec(values(&mut rng, 24 * 40), (24, 40), &dev).expect("w");
    let w = quantize_per_channel(&w).expect("quantise");
    let x = Tensor::from_vec(values(&mut rng, 5 * 40), (5, 40), &dev).expect("x");
    let p = QuantMatmulParams::default();
    let got = quant_matmul(&x, &w, &p, Some(Backend::TileSim)).expect("sim");
    let want = quant_matmul(&x, &w, &p, Some(Backend::Reference)).expect("ref");
    assert_eq!(max_diff(&got, &want), 0.0, "quant_matmul, seed {seed}");
}

#[test]
fn every_op_from_several_threads_at_once_gives_each_its_own_result() {
    std::thread::scope(|s| {
        let threads: Vec<_> = (0..4u64)
            .map(|t| s.spawn(move || (0..2).for_each(|i| every_op(100 + 10 * t + i))))
            .collect();
        for t in threads {
            t.join()
                .expect("every thread's results match the Reference");
        }
    });
}

#[test]
fn errors_stay_with_their_call_across_threads() {
    std::thread::scope(|s| {
        for t in 0..4usize {
            s.spawn(move || {
                let dev = Device::Cpu;
                let src = Tensor::zeros((8, 4), candle_core::DType::F32, &dev).expect("src");
                let table = Tensor::from_vec(vec![0i64, 1], (1, 2), &dev).expect("table");
                let idx = Tensor::from_vec(vec![0i64, 1], (1, 2), &dev).expect("indices");
                // Thread t asks for 5 + t columns of a 4-column source: its own error.
                let e = paged_gather(&src, &idx, &table, 4, 5 + t, Some(Backend::TileSim))
                    .expect_err("size > C is refused");
                assert!(e.to_string().contains(&format!("{}", 5 + t)), "{e}");
            });
        }
    });
}
