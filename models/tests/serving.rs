//! The serving engine through its channel API: tokens equal the static engine's, cancellation
//! and metrics.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tileops_models::deepseek::config::Config;
use tileops_models::engine::{Engine as StaticEngine, Sampling};
use tileops_models::serving::request::{Event, FinishReason, GenerateRequest};
use tileops_models::serving::sampler::SamplingParams;
use tileops_models::serving::{Engine, EngineConfig, EngineHandle};
use tileops_models::tokenizer::Tokenizer;
use tileops_models::weights::Weights;
use tileops_ops::Backend;

fn cfg() -> Config {
    Config {
        n_layers: 2,
        max_seq_len: 96,
        ..Config::default()
    }
}

fn spawn(w: &Weights, ec: EngineConfig) -> EngineHandle {
    let tok = Arc::new(Tokenizer::train().unwrap());
    Engine::spawn(&cfg(), w, ec, tok).unwrap()
}

fn submit(e: &EngineHandle, prompt: Vec<u32>, max_tokens: usize) -> (u64, mpsc::Receiver<Event>) {
    let (tx, rx) = mpsc::channel();
    let req = GenerateRequest {
        prompt,
        max_tokens,
        sampling: SamplingParams::greedy(),
        stop: vec![],
        logprobs: Some(2),
    };
    let id = e
        .submit(req, Box::new(move |ev| tx.send(ev).is_ok()))
        .unwrap();
    (id, rx)
}

fn collect(rx: &mpsc::Receiver<Event>) -> (Vec<u32>, FinishReason) {
    let mut toks = Vec::new();
    loop {
        match rx.recv_timeout(Duration::from_secs(30)).unwrap() {
            Event::Token { token, logprob, .. } => {
                // The greedy token is the most likely one.
                let lp = logprob.unwrap();
                assert_eq!(lp.top.len(), 2);
                assert_eq!(lp.top[0], (token, lp.logprob));
                assert!(lp.logprob <= 0.0 && lp.top[1].1 <= lp.logprob);
                toks.push(token)
            }
            Event::Finished { reason, .. } => return (toks, reason),
            Event::Error(m) => panic!("{m}"),
        }
    }
}

fn wait_idle(e: &EngineHandle) {
    let t = Instant::now();
    loop {
        let m = e.metrics().snapshot();
        if m.running == 0 && m.waiting == 0 && m.kv_blocks_used == m.prefix_cache_evictable_blocks {
            return;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "{m:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn concurrent_requests_under_preemption_get_their_alone_tokens_and_cancel_frees() {
    let w = Weights::generate(&cfg(), 4).unwrap();
    let prompts: Vec<Vec<u32>> = (0..4u32)
        .map(|p| {
            (0..6 + 9 * p)
                .map(|i| (i * 53 + p * 7 + 1) % 1000)
                .collect()
        })
        .collect();
    let n = 16;
    let mut alone = StaticEngine::new(&cfg(), &w, Backend::Reference, 16, 4).unwrap();
    alone.model.dense_prefill = false;
    let want: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| {
            alone
                .generate(std::slice::from_ref(p), n, &Sampling::Greedy, |_, _| {})
                .unwrap()
                .tokens
                .remove(0)
        })
        .collect();
    // 10 blocks of 4 tokens for 12 requests of up to 33 + 16 tokens.
    let e = spawn(
        &w,
        EngineConfig {
            kv_blocks: 13,
            block_size: 4,
            max_running: 6,
            max_batch_tokens: 20,
            max_model_len: 96,
            ..EngineConfig::default()
        },
    );
    let subs: Vec<_> = (0..12)
        .map(|i| submit(&e, prompts[i % 4].clone(), n))
        .collect();
    for (i, (_, rx)) in subs.iter().enumerate() {
        let (toks, reason) = collect(rx);
        assert_eq!(reason, FinishReason::Length);
        assert_eq!(toks, want[i % 4], "request {i}");
    }
    wait_idle(&e);
    let m = e.metrics().snapshot();
    assert!(m.preemptions > 0, "{m:?}");
    // Prefix sharing gives the same tokens as none: the last prompt again finds its blocks.
    let mut hits = vec![];
    for _ in 0..2 {
        let (_, rx) = submit(&e, prompts[3].clone(), n);
        assert_eq!(collect(&rx).0, want[3]);
        hits.push(e.metrics().snapshot().prefix_cache_hit_tokens);
    }
    // The second run reuses all 8 full blocks of its 33-token prompt.
    assert_eq!(hits[1] - hits[0], 32, "{hits:?}");
    assert_eq!(m.finished[1], 12);
    assert_eq!(
        m.prompt_tokens,
        3 * prompts.iter().map(Vec::len).sum::<usize>() as u64
    );
    assert_eq!(m.generated_tokens, 12 * n as u64);

    // Cancelling mid-generation frees the blocks.
    let (id, rx) = submit(&e, prompts[0].clone(), 40);
    assert!(matches!(rx.recv().unwrap(), Event::Token { .. }));
    e.cancel(id);
    let (_, reason) = collect(&rx);
    assert_eq!(reason, FinishReason::Cancelled);
    wait_idle(&e);
    // A dropped receiver cancels too.
    let (_, rx) = submit(&e, prompts[0].clone(), 40);
    assert!(matches!(rx.recv().unwrap(), Event::Token { .. }));
    drop(rx);
    wait_idle(&e);
    assert_eq!(e.metrics().snapshot().finished[2], 2);
    e.shutdown(false);
    assert!(!e.is_accepting());
}

/// A pool past the cache's limits is an error from `spawn`, before any cache tensor is
/// allocated (it used to reach the allocator: an abort for a huge `kv_blocks`).
#[test]
fn spawn_refuses_pools_past_the_limits() {
    let w = Weights::generate(&cfg(), 0).unwrap();
    for (kv_blocks, block_size) in [(0, 16), (1 << 40, 16), (1 << 26, 64), (4, 0)] {
        let ec = EngineConfig {
            kv_blocks,
            block_size,
            backend: Backend::Reference,
            ..EngineConfig::default()
        };
        let tok = Arc::new(Tokenizer::train().unwrap());
        let r = Engine::spawn(&cfg(), &w, ec, tok);
        assert!(
            r.is_err(),
            "kv_blocks {kv_blocks} x {block_size} was accepted"
        );
    }
}
