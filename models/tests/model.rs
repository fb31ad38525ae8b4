//! The model against itself and against plain references: Reference vs TileSim decode, the
//! absorbed MLA form vs the naive one, the indexer's top-k vs brute force. The model's indexer
//! runs the `lightning_indexer` op: its selection equals the candle one (scores + causal
//! top-k) on both backends; the FP8 index cache (padded, rotated, quantised) selects nearly the
//! same positions, agrees across backends and survives copy-on-write; the engine refuses a
//! format change while anything is cached.

use candle_core::{DType, Device, Tensor};
use tileops_models::deepseek::cache::{CacheEngine, IndexKeys};
use tileops_models::deepseek::config::Config;
use tileops_models::deepseek::indexer::{causal_topk, Indexer};
use tileops_models::deepseek::mla::{Mla, Queries};
use tileops_models::deepseek::ops::to_vec_f32;
use tileops_models::engine::{argmax, Engine, Sampling};
use tileops_models::kv_cache::{CopyBlock, PagedKvCache};
use tileops_models::weights::{Rng, Weights};
use tileops_ops::{
    reshape_and_cache, scales_to_f32, sparse_paged_attention, Backend, IndexKeyCache, ScaleFormat,
    SparseAttentionParams,
};

/// Logits may differ between the backends by this much (absolute): f32 everywhere, but the
/// int8 expert matmuls quantise activations per token and the kernels sum in another order.
const LOGIT_TOL: f32 = 2e-2;

/// Prefill through flash_attention against the indexer + sparse path, same backend: the same
/// attention summed in another order, in f32 (measured 1.7e-6 on both backends with these
/// weights; an int8 activation rounding flip in the experts would show as more).
const PREFILL_TOL: f32 = 1e-4;

fn small() -> Config {
    Config {
        n_layers: 2,
        index_topk: 16,
        ..Config::default()
    }
}

fn rand(rng: &mut Rng, shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|_| 2.0 * rng.uniform() - 1.0).collect();
    Tensor::from_vec(v, shape, &Device::Cpu).unwrap()
}

#[test]
fn greedy_decode_matches_across_backends() {
    let cfg = small();
    let w = Weights::generate(&cfg, 3).unwrap();
    let prompts: Vec<Vec<u32>> = vec![
        (0..5).map(|i| i * 7 + 1).collect(),
        (0..12).map(|i| i * 13 + 2).collect(),
        (0..20).map(|i| (i * 31 + 3) % 1000).collect(),
    ];
    let max_new = 8;
    let mut reference = Engine::new(&cfg, &w, Backend::Reference, 16, 16).unwrap();
    let r = reference
        .generate(&prompts, max_new, &Sampling::Greedy, |_, _| {})
        .unwrap();
    // TileSim replays the Reference's tokens, so a near-tie cannot derail the comparison.
    let mut sim = Engine::new(&cfg, &w, Backend::TileSim, 16, 16).unwrap();
    let forced = Sampling::Forced(r.tokens.clone());
    let s = sim.generate(&prompts, max_new, &forced, |_, _| {}).unwrap();
    let (mut compared, mut worst) = (0, 0f32);
    for (step, (rl, sl)) in r.logits.iter().zip(&s.logits).enumerate() {
        for (seq, (a, b)) in rl.iter().zip(sl).enumerate() {
            let d = a
                .iter()
                .zip(b)
                .map(|(x, y)| (x - y).abs())
                .fold(0f32, f32::max);
            worst = worst.max(d);
            assert!(
                d <= LOGIT_TOL,
                "step {step} seq {seq}: logits differ by {d}"
            );
            let mut sorted = a.clone();
            sorted.sort_by(|x, y| y.total_cmp(x));
            if sorted[0] - sorted[1] < 2.0 * LOGIT_TOL {
                continue; // a near-tie: either token is right
            }
            assert_eq!(argmax(b), r.tokens[seq][step], "step {step} seq {seq}");
            compared += 1;
        }
    }
    assert!(
        compared >= 12,
        "only {compared} steps were decisive (worst diff {worst})"
    );
}

#[test]
fn absorbed_decode_equals_naive_attention() {
    let cfg = small();
    let w = Weights::generate(&cfg, 5).unwrap();
    let mla = Mla::load(&w, &cfg, 0).unwrap();
    let mut rng = Rng(11);
    let (h, t, bs) = (cfg.n_heads, 37, 8);
    let width = cfg.kv_lora_rank + cfg.qk_rope_head_dim;
    let latent = rand(&mut rng, &[t, width]);
    let mut mgr = PagedKvCache::new(8, bs).unwrap();
    let _other = mgr.add_sequence().unwrap();
    mgr.append(_other, 3).unwrap(); // the sequence's blocks do not start at 0
    let id = mgr.add_sequence().unwrap();
    let slots = mgr.append(id, t).unwrap().slots;
    let cache = Tensor::zeros((8, bs, width), candle_core::DType::F32, &Device::Cpu).unwrap();
    let slots_t = Tensor::from_vec(slots, t, &Device::Cpu).unwrap();
    reshape_and_cache(&latent, &cache, &slots_t, Some(Backend::Reference)).unwrap();
    let table: Vec<i32> = mgr
        .block_table(id)
        .unwrap()
        .iter()
        .map(|&b| b as i32)
        .collect();
    let table = Tensor::from_vec(table.clone(), (1, table.len()), &Device::Cpu).unwrap();
    // Attend to a subset of positions, as the indexer would choose.
    let chosen: Vec<i32> = (0..t as i32).filter(|p| p % 3 != 1).collect();
    let k = chosen.len();
    let q = Queries {
        qr: rand(&mut rng, &[1, cfg.q_lora_rank]),
        nope: rand(&mut rng, &[1, h, cfg.qk_nope_head_dim]),
        pe: rand(&mut rng, &[1, h, cfg.qk_rope_head_dim]),
    };
    let scale = cfg.softmax_scale();
    let qa = mla.absorb(&q).unwrap();
    let idx = Tensor::from_vec(chosen.clone(), (1, k), &Device::Cpu).unwrap();
    let params = SparseAttentionParams::new(cfg.kv_lora_rank, scale);
    let sel = Tensor::from_vec(
        chosen.iter().map(|&p| p as u32).collect::<Vec<_>>(),
        k,
        &Device::Cpu,
    )
    .unwrap();
    let naive = mla
        .naive_attention(
            &q.nope.squeeze(0).unwrap(),
            &q.pe.squeeze(0).unwrap(),
            &latent.index_select(&sel, 0).unwrap(),
            scale,
        )
        .unwrap();
    let naive_out = {
        // wo(naive) equals the absorbed output path applied to the latent attention output.
        let flat = naive.reshape((1, h * cfg.v_head_dim)).unwrap();
        flat.matmul(&w.get("layers.0.attn.wo.weight").unwrap().t().unwrap())
            .unwrap()
    };
    for backend in [Backend::Reference, Backend::TileSim] {
        let (o, _) =
            sparse_paged_attention(&qa, &cache, &idx, &table, &params, Some(backend)).unwrap();
        let out = mla.output(&o).unwrap();
        let d = to_vec_f32(&(out - &naive_out).unwrap().abs().unwrap()).unwrap();
        let worst = d.iter().copied().fold(0f32, f32::max);
        assert!(
            worst < 1e-4,
            "{backend:?}: absorbed vs naive differ by {worst}"
        );
    }
}

#[test]
fn indexer_topk_equals_brute_force() {
    let mut rng = Rng(21);
    let (r, t, topk) = (6, 40, 9);
    let scores = rand(&mut rng, &[r, t]);
    let positions = [0, 3, 8, 9, 25, 39];
    let got = causal_topk(&scores, &positions, topk).unwrap();
    let s = to_vec_f32(&scores).unwrap();
    for (row, &pos) in positions.iter().enumerate() {
        let mut all: Vec<usize> = (0..=pos).collect();
        all.sort_by(|&a, &b| s[row * t + b].partial_cmp(&s[row * t + a]).unwrap());
        let mut want: Vec<i32> = all.iter().take(topk).map(|&p| p as i32).collect();
        want.sort();
        want.resize(topk, -1);
        assert_eq!(
            &got[row * topk..(row + 1) * topk],
            want.as_slice(),
            "row {row}"
        );
    }
    // The model's own scores: ReLU-weighted heads against brute-force loops.
    let cfg = small();
    let w = Weights::generate(&cfg, 9).unwrap();
    let ix = tileops_models::deepseek::indexer::Indexer::load(&w, &cfg, 1).unwrap();
    let (ih, id) = (cfg.index_n_heads, cfg.index_head_dim);
    let q = rand(&mut rng, &[2, ih, id]);
    let wt = rand(&mut rng, &[2, ih]);
    let keys = rand(&mut rng, &[5, id]);
    let got = to_vec_f32(&ix.scores(&q, &wt, &keys).unwrap()).unwrap();
    let (qv, wv, kv) = (
        to_vec_f32(&q).unwrap(),
        to_vec_f32(&wt).unwrap(),
        to_vec_f32(&keys).unwrap(),
    );
    for row in 0..2 {
        for tk in 0..5 {
            let mut want = 0f32;
            for hh in 0..ih {
                let dot: f32 = (0..id)
                    .map(|j| qv[(row * ih + hh) * id + j] * kv[tk * id + j])
                    .sum();
                want += wv[row * ih + hh] * dot.max(0.0);
            }
            want /= (id as f32).sqrt();
            assert!(
                (got[row * 5 + tk] - want).abs() < 1e-4,
                "row {row} key {tk}"
            );
        }
    }
}

fn max_abs_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    a.iter()
        .flatten()
        .zip(b.iter().flatten())
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max)
}

/// The prefill logits of `prompts` (one step, no decode) and how many flash_attention calls
/// the model made.
fn prefill(
    cfg: &Config,
    w: &Weights,
    prompts: &[Vec<u32>],
    backend: Backend,
    dense: bool,
) -> (Vec<Vec<f32>>, usize) {
    let mut e = Engine::new(cfg, w, backend, 16, 16).unwrap();
    e.model.dense_prefill = dense;
    let g = e
        .generate(prompts, 1, &Sampling::Greedy, |_, _| {})
        .unwrap();
    let flash = e
        .model
        .timers
        .report()
        .iter()
        .find(|r| r.0 == "flash_attention")
        .map_or(0, |r| r.2);
    (g.logits[0].clone(), flash)
}

#[test]
fn short_prompt_prefill_through_flash_equals_the_sparse_path() {
    let cfg = small();
    let w = Weights::generate(&cfg, 4).unwrap();
    // All no longer than index_topk (16): the top-k keeps every token.
    let prompts: Vec<Vec<u32>> = vec![
        (0..5).map(|i| i * 11 + 4).collect(),
        (0..16).map(|i| (i * 37 + 5) % 1000).collect(),
        (0..12).map(|i| i * 17 + 9).collect(),
    ];
    let mut dense = Vec::new();
    for backend in [Backend::Reference, Backend::TileSim] {
        let (flash, calls) = prefill(&cfg, &w, &prompts, backend, true);
        assert_eq!(calls, cfg.n_layers, "{backend:?}: one flash call per layer");
        let (sparse, none) = prefill(&cfg, &w, &prompts, backend, false);
        assert_eq!(none, 0, "{backend:?}: the sparse path calls no flash");
        let d = max_abs_diff(&flash, &sparse);
        eprintln!("{backend:?}: flash vs sparse prefill logits differ by {d}");
        assert!(
            d <= PREFILL_TOL,
            "{backend:?}: flash vs sparse prefill differ by {d}"
        );
        dense.push(flash);
    }
    let d = max_abs_diff(&dense[0], &dense[1]);
    assert!(d <= LOGIT_TOL, "flash prefill: backends differ by {d}");
}

#[test]
fn prompts_longer_than_the_top_k_prefill_through_the_sparse_path() {
    let cfg = small();
    let w = Weights::generate(&cfg, 4).unwrap();
    let prompts: Vec<Vec<u32>> = vec![vec![3; 4], (0..17).map(|i| i * 5 + 1).collect()];
    let (_, calls) = prefill(&cfg, &w, &prompts, Backend::Reference, true);
    assert_eq!(
        calls, 0,
        "a 17-token prompt with top-k 16 needs the indexer"
    );
}

#[test]
fn indexer_keys_are_layer_normed() {
    let cfg = small();
    let mut w = Weights::generate(&cfg, 6).unwrap();
    let d = cfg.index_head_dim;
    let mut rng = Rng(31);
    let p = "layers.1.attn.indexer.k_norm";
    let (g, b) = (rand(&mut rng, &[d]), rand(&mut rng, &[d]));
    w.dense.insert(format!("{p}.weight"), g.clone());
    w.dense.insert(format!("{p}.bias"), b.clone());
    let ix = tileops_models::deepseek::indexer::Indexer::load(&w, &cfg, 1).unwrap();
    // At position 0 the RoPE is the identity, so each key is LayerNorm(wk x) itself: the
    // random weight and bias make an RMSNorm or a dropped bias fail.
    let x = rand(&mut rng, &[3, cfg.dim]);
    let (cos, sin) =
        tileops_models::deepseek::ops::rope_tables(&cfg.rope_freqs(), &[0, 0, 0]).unwrap();
    let got = to_vec_f32(&ix.keys(&x, &cos, &sin).unwrap()).unwrap();
    let proj = to_vec_f32(
        &x.matmul(
            &w.get("layers.1.attn.indexer.wk.weight")
                .unwrap()
                .t()
                .unwrap(),
        )
        .unwrap(),
    )
    .unwrap();
    let (gv, bv) = (to_vec_f32(&g).unwrap(), to_vec_f32(&b).unwrap());
    for r in 0..3 {
        let row = &proj[r * d..(r + 1) * d];
        let mean = row.iter().sum::<f32>() / d as f32;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / d as f32;
        for j in 0..d {
            let want = (row[j] - mean) / (var + 1e-6).sqrt() * gv[j] + bv[j];
            let have = got[r * d + j];
            assert!(
                (have - want).abs() < 1e-4,
                "row {r} dim {j}: {have} vs {want}"
            );
        }
    }
}

/// Row-major `[R, topk]` indices as each row's sorted set (the -1 padding dropped).
fn sets(ix: &Tensor) -> Vec<Vec<i32>> {
    let topk = ix.dim(1).unwrap();
    let v: Vec<i32> = ix.flatten_all().unwrap().to_vec1().unwrap();
    v.chunks(topk)
        .map(|r| {
            let mut s: Vec<i32> = r.iter().copied().filter(|&p| p >= 0).collect();
            s.sort_unstable();
            s
        })
        .collect()
}

/// A layer's indexer, `rows` query rows at `positions` of one sequence of `len` keys written
/// through [`Indexer::append`] into a cache of `keys` format (blocks of 8, the table reversed).
struct Case {
    ix: Indexer,
    q: Tensor,
    w: Tensor,
    keys: Tensor,
    positions: Vec<usize>,
    table: Tensor,
    lens: Tensor,
}

fn case(seed: u64, len: usize) -> Case {
    let cfg = small();
    let w = Weights::generate(&cfg, 9).unwrap();
    let ix = Indexer::load(&w, &cfg, 1).unwrap();
    let mut rng = Rng(seed);
    let positions: Vec<usize> = vec![0, 5, 15, 16, 17, 31, len / 2, len - 1];
    let (h, d) = (ix.heads, ix.head_dim);
    let q = rand(&mut rng, &[positions.len(), h, d]);
    let wt = rand(&mut rng, &[positions.len(), h]);
    let keys = rand(&mut rng, &[len, d]);
    let blocks = len.div_ceil(8);
    let row: Vec<i32> = (0..blocks as i32).rev().collect();
    let table: Vec<i32> = positions.iter().flat_map(|_| row.clone()).collect();
    let lens: Vec<i32> = positions.iter().map(|&p| p as i32 + 1).collect();
    Case {
        ix,
        q,
        w: wt,
        keys,
        table: Tensor::from_vec(table, (positions.len(), blocks), &Device::Cpu).unwrap(),
        lens: Tensor::from_vec(lens, positions.len(), &Device::Cpu).unwrap(),
        positions,
    }
}

impl Case {
    /// A cache of `keys` format holding the case's keys at their reversed-table slots.
    fn cache(&self, keys: IndexKeys, backend: Backend) -> IndexKeyCache {
        let len = self.keys.dim(0).unwrap();
        let blocks = len.div_ceil(8);
        let engine = CacheEngine::new(1, 8, self.ix.head_dim, blocks, 8, keys).unwrap();
        let cache = engine.layer(0).unwrap().index_keys.clone();
        let slots: Vec<i64> = (0..len)
            .map(|p| ((blocks - 1 - p / 8) * 8 + p % 8) as i64)
            .collect();
        let slots = Tensor::from_vec(slots, len, &Device::Cpu).unwrap();
        self.ix.append(&self.keys, &cache, &slots, backend).unwrap();
        cache
    }

    fn select(&self, cache: &IndexKeyCache, backend: Backend) -> Tensor {
        self.ix
            .call(&self.q, &self.w, cache, &self.table, &self.lens)
            .unwrap()
            .run(backend)
            .unwrap()
    }
}

#[test]
fn the_models_indexer_op_selects_what_the_candle_selection_selects() {
    let c = case(41, 61);
    let scores = c.ix.scores(&c.q, &c.w, &c.keys).unwrap();
    let want = causal_topk(&scores, &c.positions, c.ix.topk).unwrap();
    let want = sets(&Tensor::from_vec(want, (c.positions.len(), c.ix.topk), &Device::Cpu).unwrap());
    for backend in [Backend::Reference, Backend::TileSim] {
        let cache = c.cache(IndexKeys::F32, backend);
        let got = sets(&c.select(&cache, backend));
        assert_eq!(got, want, "{backend:?}");
        // Each row keeps min(topk, its context) positions, all visible to it.
        for (s, &p) in got.iter().zip(&c.positions) {
            assert_eq!(s.len(), c.ix.topk.min(p + 1), "{backend:?} row at {p}");
            assert!(s.iter().all(|&x| x as usize <= p));
        }
    }
}

#[test]
fn fp8_index_keys_select_nearly_what_f32_keys_select_on_both_backends() {
    let c = case(43, 64);
    let f32_sets = sets(&c.select(
        &c.cache(IndexKeys::F32, Backend::Reference),
        Backend::Reference,
    ));
    let mut runs = Vec::new();
    for fmt in [ScaleFormat::Ue8m0, ScaleFormat::F32] {
        for backend in [Backend::Reference, Backend::TileSim] {
            let cache = c.cache(IndexKeys::Fp8(fmt), backend);
            assert_eq!(cache.data().dtype(), DType::F8E4M3);
            assert_eq!(cache.dims().2, 128, "keys padded to one FP8 group");
            let got = sets(&c.select(&cache, backend));
            // Overlap with the f32 selection over the rows that must choose (context > topk):
            // FP8 rounding moves only near-ties; a wrong padding, rotation or scale fold
            // would leave about topk / context (25-50%).
            let (mut kept, mut total) = (0, 0);
            for ((g, f), &p) in got.iter().zip(&f32_sets).zip(&c.positions) {
                assert_eq!(g.len(), f.len(), "{fmt:?} {backend:?} row at {p}");
                if p + 1 > c.ix.topk {
                    kept += g.iter().filter(|x| f.contains(x)).count();
                    total += f.len();
                }
            }
            let overlap = kept as f64 / total as f64;
            eprintln!("{fmt:?} {backend:?}: FP8 vs f32 top-k overlap {overlap:.3}");
            assert!(overlap >= 0.85, "{fmt:?} {backend:?}: overlap {overlap}");
            runs.push(got);
        }
        let n = runs.len();
        assert_eq!(runs[n - 2], runs[n - 1], "{fmt:?}: backends differ");
    }
}

#[test]
fn fp8_index_keys_and_scales_are_copied_on_write() {
    let c = case(47, 16);
    let engine = CacheEngine::new(
        1,
        8,
        c.ix.head_dim,
        4,
        8,
        IndexKeys::Fp8(ScaleFormat::Ue8m0),
    )
    .unwrap();
    let cache = &engine.layer(0).unwrap().index_keys;
    let slots = Tensor::from_vec((0..16i64).collect::<Vec<_>>(), 16, &Device::Cpu).unwrap();
    c.ix.append(&c.keys, cache, &slots, Backend::Reference)
        .unwrap();
    engine
        .copy_block(CopyBlock { src: 1, dst: 3 }, Backend::TileSim)
        .unwrap();
    let bytes = |t: &Tensor, b: usize| -> Vec<u8> {
        let block = t.narrow(0, b, 1).unwrap();
        let f = if block.dtype() == DType::F8E8M0 {
            scales_to_f32(&block).unwrap()
        } else {
            block.to_dtype(DType::F32).unwrap()
        };
        f.flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect()
    };
    let scales = cache.scales().unwrap();
    for t in [cache.data(), scales] {
        assert_eq!(bytes(t, 3), bytes(t, 1));
        assert_ne!(bytes(t, 3), bytes(t, 2), "block 2 was never written");
    }
}

#[test]
fn the_engine_runs_fp8_index_keys_and_refuses_a_change_while_anything_is_cached() {
    let cfg = small();
    let w = Weights::generate(&cfg, 3).unwrap();
    let prompts: Vec<Vec<u32>> = vec![
        (0..30).map(|i| (i * 13 + 2) % 1000).collect(),
        (0..20).map(|i| (i * 31 + 3) % 1000).collect(),
    ];
    let mut tokens = Vec::new();
    for backend in [Backend::Reference, Backend::TileSim] {
        let mut e = Engine::new(&cfg, &w, backend, 16, 16).unwrap();
        e.set_index_keys(IndexKeys::Fp8(ScaleFormat::Ue8m0))
            .unwrap();
        e.model.dense_prefill = false;
        let g = e
            .generate(&prompts, 6, &Sampling::Greedy, |_, _| {})
            .unwrap();
        tokens.push(g.tokens);
        let kept = e.model.last_indices[0]
            .as_ref()
            .expect("layer 0's selection");
        assert_eq!(kept.dim(1).unwrap(), cfg.index_topk);
        // A sequence holds cache rows: the format may not change under it.
        let id = e.cache.add_sequence().unwrap();
        e.cache.append(id, 3).unwrap();
        assert!(e.set_index_keys(IndexKeys::F32).is_err());
    }
    assert_eq!(
        tokens[0], tokens[1],
        "FP8 keys: the backends' greedy tokens differ"
    );
    // FP8 keys hold one scale per key: a wider index head is refused.
    let wide = Config {
        index_head_dim: 192,
        ..small()
    };
    let ww = Weights::generate(&wide, 3).unwrap();
    let mut e = Engine::new(&wide, &ww, Backend::Reference, 16, 16).unwrap();
    let err = e
        .set_index_keys(IndexKeys::Fp8(ScaleFormat::F32))
        .unwrap_err();
    assert!(err.to_string().contains("index_head_dim"), "{err}");
}
