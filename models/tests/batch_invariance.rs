//! Batch-invariant numerics (#34 item 3): with `Model::batch_invariant` on and the dense prefill
//! off, one sequence's logits have the same bits alone, in a mixed batch of 16, prefilled in
//! chunks, recomputed after its generated tokens (what a preemption does), and on a prefix shared
//! with another sequence, on both backends; and through the serving engine, one request's tokens
//! and log-probabilities have the same bits alone and among 15 others in a pool small enough to
//! preempt.

use std::sync::{mpsc, Arc};
use std::time::Duration;
use tileops_models::batch::StepRows;
use tileops_models::deepseek::config::Config;
use tileops_models::deepseek::model::Model;
use tileops_models::deepseek::ops::{matmul_rows, row_invariant_min_rows, with_row_invariance};
use tileops_models::engine::argmax;
use tileops_models::kv_cache::{PagedKvCache, SeqId};
use tileops_models::serving::request::{Event, GenerateRequest};
use tileops_models::serving::sampler::SamplingParams;
use tileops_models::serving::{Engine, EngineConfig};
use tileops_models::tokenizer::Tokenizer;
use tileops_models::weights::Weights;
use tileops_ops::Backend;

const BLOCK: usize = 16;
const DECODES: usize = 3;

fn cfg() -> Config {
    Config {
        n_layers: 2,
        max_seq_len: 256,
        ..Config::default()
    }
}

/// The target: 70 tokens, past the top-k of 64, so the indexer's selection matters.
fn target() -> Vec<u32> {
    (0..70).map(|i| (i * 37 % 1000 + 5) as u32).collect()
}

fn other(k: usize) -> Vec<u32> {
    (0..3 + k * 13)
        .map(|i| ((i * 13 + k * 7) % 1000 + 5) as u32)
        .collect()
}

/// A model and its cache manager over one pool.
struct Run {
    model: Model,
    cache: PagedKvCache,
    backend: Backend,
}

impl Run {
    fn new(w: &Weights, backend: Backend) -> Run {
        let mut model = Model::new(&cfg(), w, 512, BLOCK).expect("model");
        model.dense_prefill = false;
        model.batch_invariant = true;
        Run {
            model,
            cache: PagedKvCache::new(512, BLOCK).expect("pool"),
            backend,
        }
    }

    /// One step: `parts[i]` new tokens for sequence `seqs[i]`; the logits of each sequence's
    /// last row.
    fn step(&mut self, work: &[(SeqId, Vec<u32>)]) -> Vec<Vec<f32>> {
        let mut starts = vec![];
        for (s, toks) in work {
            starts.push(self.cache.len(*s).expect("len"));
            let w = self.cache.append(*s, toks.len()).expect("append");
            if let Some(c) = w.copy {
                self.model.copy_block(c, self.backend).expect("copy");
            }
        }
        let parts: Vec<StepRows<'_>> = work
            .iter()
            .zip(&starts)
            .map(|((seq, tokens), &start)| StepRows {
                seq: *seq,
                start,
                tokens,
            })
            .collect();
        let batch = self.cache.batch(&parts).expect("batch");
        let logits = self
            .model
            .forward(&batch, &batch.last_rows(), self.backend)
            .expect("forward");
        let v: Vec<f32> = logits.flatten_all().unwrap().to_vec1().unwrap();
        v.chunks(cfg().vocab_size).map(<[f32]>::to_vec).collect()
    }
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The target's logits after its prompt and after each of its greedy decode steps, with
/// `others` prompts prefilled (and decoded) in the same steps, the target's prompt cut into
/// `chunk`-token prefill steps.
fn target_logits(w: &Weights, backend: Backend, others: usize, chunk: usize) -> Vec<Vec<u32>> {
    let mut r = Run::new(w, backend);
    let t = r.cache.add_sequence().unwrap();
    let os: Vec<(SeqId, Vec<u32>)> = (0..others)
        .map(|k| (r.cache.add_sequence().unwrap(), other(k)))
        .collect();
    let prompt = target();
    let mut out = vec![];
    let mut first = true;
    for piece in prompt.chunks(chunk) {
        // The others prefill in the target's first step, in the middle of the batch.
        let mut work: Vec<(SeqId, Vec<u32>)> = if first { os.clone() } else { vec![] };
        work.insert(work.len() / 2, (t, piece.to_vec()));
        let at = work.iter().position(|(s, _)| *s == t).unwrap();
        let logits = r.step(&work);
        out = vec![logits[at].clone()];
        first = false;
    }
    let mut next: Vec<(SeqId, u32)> = os.iter().map(|(s, p)| (*s, p[0])).collect();
    next.insert(next.len() / 2, (t, argmax(&out[0])));
    let mut result = vec![bits(&out[0])];
    for _ in 0..DECODES {
        let work: Vec<(SeqId, Vec<u32>)> = next.iter().map(|&(s, x)| (s, vec![x])).collect();
        let logits = r.step(&work);
        for (i, (s, x)) in next.iter_mut().enumerate() {
            *x = argmax(&logits[i]);
            if *s == t {
                result.push(bits(&logits[i]));
            }
        }
    }
    result
}

#[test]
fn one_sequence_s_logits_do_not_depend_on_its_batch_or_its_chunks() {
    let w = Weights::generate(&cfg(), 3).unwrap();
    for backend in [Backend::Reference, Backend::TileSim] {
        let alone = target_logits(&w, backend, 0, 70);
        assert_eq!(alone.len(), DECODES + 1);
        let mixed = target_logits(&w, backend, 15, 70);
        assert!(
            alone == mixed,
            "{backend:?}: alone and in a batch of 16 differ"
        );
        let chunked = target_logits(&w, backend, 15, 17);
        assert!(alone == chunked, "{backend:?}: a chunked prefill differs");
    }
}

#[test]
fn recompute_and_a_shared_prefix_give_the_same_logits() {
    let w = Weights::generate(&cfg(), 3).unwrap();
    for backend in [Backend::Reference, Backend::TileSim] {
        // Decode step by step.
        let mut r = Run::new(&w, backend);
        let s = r.cache.add_sequence().unwrap();
        let mut tokens = target();
        let mut logits = r.step(&[(s, tokens.clone())]).remove(0);
        for _ in 0..DECODES {
            let x = argmax(&logits);
            tokens.push(x);
            logits = r.step(&[(s, vec![x])]).remove(0);
        }
        // Recompute: the prompt and the generated tokens in one prefill.
        let mut again = Run::new(&w, backend);
        let s2 = again.cache.add_sequence().unwrap();
        let re = again.step(&[(s2, tokens.clone())]).remove(0);
        assert_eq!(bits(&re), bits(&logits), "{backend:?}: recompute differs");
        // And the recomputed rows of every cache are the decoded ones, bit for bit (the cache
        // rows of the last token are written in both runs too).
        let rows = |run: &Run, seq: SeqId| -> Vec<u32> {
            let slots = run.cache.slots(seq).unwrap();
            let idx = candle_core::Tensor::from_vec(
                slots.iter().map(|&x| x as u32).collect::<Vec<u32>>(),
                slots.len(),
                &candle_core::Device::Cpu,
            )
            .unwrap();
            let mut out = vec![];
            for l in run.model.caches().layers() {
                for c in [&l.latent, l.index_keys.data()] {
                    let flat = c.reshape(((), c.dim(2).unwrap())).unwrap();
                    let v: Vec<f32> = flat
                        .index_select(&idx, 0)
                        .unwrap()
                        .flatten_all()
                        .unwrap()
                        .to_vec1()
                        .unwrap();
                    out.extend(bits(&v));
                }
            }
            out
        };
        assert!(
            rows(&r, s) == rows(&again, s2),
            "{backend:?}: recomputed cache rows differ"
        );
        // A prefix shared with another sequence: the first 48 tokens' blocks are the other
        // sequence's, only the rest is computed.
        let owner = again.cache.add_sequence().unwrap();
        let shared_len = 3 * BLOCK;
        let mut other_prompt = tokens[..shared_len].to_vec();
        other_prompt.extend([7, 8, 9]);
        again.step(&[(owner, other_prompt)]);
        let blocks = again.cache.block_table(owner).unwrap()[..3].to_vec();
        let s3 = again.cache.add_sequence_with_blocks(&blocks).unwrap();
        let shared = again.step(&[(s3, tokens[shared_len..].to_vec())]).remove(0);
        assert_eq!(
            bits(&shared),
            bits(&logits),
            "{backend:?}: shared prefix differs"
        );
    }
}

/// `matmul_rows(a, b)`'s values.
fn product(a: &candle_core::Tensor, b: &candle_core::Tensor) -> Vec<f32> {
    let p = with_row_invariance(true, || matmul_rows(a, b)).unwrap();
    p.flatten_all().unwrap().to_vec1().unwrap()
}

#[test]
fn matmul_rows_is_row_invariant_at_every_kernel_boundary() {
    // Without the padding a single row's bits differ (the test's cases can fail).
    {
        use candle_core::{Device, Tensor};
        let a = Tensor::randn(0f32, 1.0, (16, 128), &Device::Cpu).unwrap();
        let b = Tensor::randn(0f32, 1.0, (256, 128), &Device::Cpu)
            .unwrap()
            .t()
            .unwrap();
        let all: Vec<f32> = matmul_rows(&a, &b)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let one = matmul_rows(&a.narrow(0, 0, 1).unwrap(), &b).unwrap();
        let one: Vec<f32> = one.flatten_all().unwrap().to_vec1().unwrap();
        assert_ne!(
            bits(&one),
            bits(&all[..256]),
            "candle's single-row kernel changed"
        );
    }
    use candle_core::{Device, Tensor};
    let dev = &Device::Cpu;
    // Column counts on both sides of gemm's size thresholds (N = 4, 64 and 65, 128, 192),
    // contractions up to 512; rows 1, 2, 3, 64, 65, 300 against the same rows of 301.
    for (k, n) in [
        (128, 4),
        (64, 64),
        (256, 65),
        (128, 128),
        (512, 192),
        (32, 30),
        (1024, 64),
        (768, 32),
        (2048, 256),
    ] {
        let a = Tensor::randn(0f32, 1.0, (301, k), dev).unwrap();
        let b = Tensor::randn(0f32, 1.0, (n, k), dev).unwrap().t().unwrap();
        let all = product(&a, &b);
        for m in [1, 2, 3, 64, 65, 300] {
            let part =
                with_row_invariance(true, || matmul_rows(&a.narrow(0, 0, m).unwrap(), &b)).unwrap();
            assert_eq!(part.dims(), &[m, n]);
            let got: Vec<f32> = part.flatten_all().unwrap().to_vec1().unwrap();
            assert_eq!(bits(&got), bits(&all[..m * n]), "k {k} n {n} m {m}");
        }
    }
    // Per-head products [H, M, K] x [H, K, N], as MLA's absorb and output run them.
    let a = Tensor::randn(0f32, 1.0, (4, 20, 32), dev).unwrap();
    let b = Tensor::randn(0f32, 1.0, (4, 32, 64), dev).unwrap();
    let all = product(&a, &b);
    let one = product(&a.narrow(1, 0, 1).unwrap().contiguous().unwrap(), &b);
    for h in 0..4 {
        assert_eq!(
            bits(&one[h * 64..(h + 1) * 64]),
            bits(&all[h * 20 * 64..h * 20 * 64 + 64])
        );
    }
    assert_eq!(row_invariant_min_rows(64, 128), 5);
    assert_eq!(row_invariant_min_rows(64, 1024), 65);
    assert_eq!(row_invariant_min_rows(128, 128), 3);
    assert_eq!(row_invariant_min_rows(4096, 4096), 2);
}

/// The request's tokens and, for each, the bits of every token's log-probability.
fn serve(backend: Backend, kv_blocks: usize, others: usize) -> (Vec<(u32, Vec<u32>)>, u64) {
    let c = Config {
        n_layers: 2,
        max_seq_len: 128,
        ..Config::default()
    };
    let w = Weights::generate(&c, 5).unwrap();
    let tok = Arc::new(Tokenizer::train().unwrap());
    let ec = EngineConfig {
        kv_blocks,
        block_size: BLOCK,
        max_batch_tokens: 64,
        backend,
        ..EngineConfig::default()
    };
    let e = Engine::spawn(&c, &w, ec, tok).unwrap();
    let req = |prompt: Vec<u32>, seed: u64| GenerateRequest {
        prompt,
        max_tokens: 6,
        sampling: SamplingParams {
            temperature: 0.8,
            top_p: 0.9,
            top_k: 0,
            seed,
        },
        stop: vec![],
        logprobs: Some(c.vocab_size),
    };
    let mut rxs = vec![];
    for k in 0..others {
        let (tx, rx) = mpsc::channel();
        let p = other(k)[..(3 + k * 5).min(60)].to_vec();
        e.submit(req(p, k as u64), Box::new(move |ev| tx.send(ev).is_ok()))
            .unwrap();
        rxs.push(rx);
    }
    // The target arrives last: the newest, which a full pool preempts first.
    let (tx, rx) = mpsc::channel();
    e.submit(req(target(), 99), Box::new(move |ev| tx.send(ev).is_ok()))
        .unwrap();
    let mut got = vec![];
    loop {
        match rx.recv_timeout(Duration::from_secs(120)).expect("an event") {
            Event::Token { token, logprob, .. } => {
                let lp = logprob.expect("logprobs");
                let mut all: Vec<u32> = vec![lp.logprob.to_bits()];
                all.extend(lp.top.iter().flat_map(|&(t, l)| [t, l.to_bits()]));
                got.push((token, all));
            }
            Event::Finished { .. } => break,
            Event::Error(m) => panic!("{m}"),
        }
    }
    for rx in rxs {
        while let Ok(ev) = rx.recv_timeout(Duration::from_secs(120)) {
            if matches!(ev, Event::Finished { .. } | Event::Error(_)) {
                break;
            }
        }
    }
    let pre = e.metrics().snapshot().preemptions;
    e.shutdown(true);
    (got, pre)
}

#[test]
fn a_request_s_tokens_and_logprobs_are_the_same_alone_and_under_preemption() {
    for backend in [Backend::Reference, Backend::TileSim] {
        let (alone, _) = serve(backend, 64, 0);
        assert_eq!(alone.len(), 6);
        // 16 blocks of 16: the target (76 tokens, 5 blocks) and 15 others cannot all run.
        let (crowded, preemptions) = serve(backend, 16, 15);
        assert!(preemptions > 0, "{backend:?}: the pool never ran out");
        assert!(
            alone == crowded,
            "{backend:?}: the request's tokens or log-probabilities moved"
        );
    }
}
