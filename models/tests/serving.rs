//! The serving engine through its channel API: tokens equal the static engine's, cancellation
//! and metrics.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tileops_models::deepseek::config::Config;
use tileops_models::engine::{Engine as StaticEngine, Sampling};
use tileops_models::serving::request::{Event, EventSink, FinishReason, GenerateRequest};
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

/// `n` choices through `submit_choices`: the prompt is computed once and forked, and choice `i`
/// gets the tokens of a request of its own seeded `seed + i` (sampled at temperature 0.9, so the
/// choices differ), on both backends; the pool is whole afterwards, and `n` past `max_running`
/// or 0 is refused.
#[test]
fn n_choices_fork_one_prompt_and_match_separate_requests() {
    let w = Weights::generate(&cfg(), 6).unwrap();
    let prompt: Vec<u32> = (0..37u32).map(|i| (i * 31 + 3) % 1000).collect();
    let req = |seed: u64| GenerateRequest {
        prompt: prompt.clone(),
        max_tokens: 7,
        sampling: SamplingParams {
            temperature: 0.9,
            top_p: 1.0,
            top_k: 0,
            seed,
        },
        stop: vec![],
        logprobs: None,
    };
    let tokens = |rx: &mpsc::Receiver<Event>| -> Vec<u32> {
        let mut t = vec![];
        loop {
            match rx.recv_timeout(Duration::from_secs(30)).unwrap() {
                Event::Token { token, .. } => t.push(token),
                Event::Finished { .. } => return t,
                Event::Error(m) => panic!("{m}"),
            }
        }
    };
    for backend in [Backend::Reference, Backend::TileSim] {
        let ec = EngineConfig {
            backend,
            kv_blocks: 32,
            block_size: 8,
            max_running: 4,
            prefix_caching: false,
            ..EngineConfig::default()
        };
        let e = spawn(&w, ec);
        let alone: Vec<Vec<u32>> = (0..3)
            .map(|i| {
                let (tx, rx) = mpsc::channel();
                e.submit(req(10 + i), Box::new(move |ev| tx.send(ev).is_ok()))
                    .unwrap();
                tokens(&rx)
            })
            .collect();
        assert!(
            alone[0] != alone[1] || alone[1] != alone[2],
            "the seeds give one text"
        );
        let before = e.metrics().snapshot();
        let mut rxs = vec![];
        let sinks: Vec<EventSink> = (0..3)
            .map(|_| {
                let (tx, rx) = mpsc::channel();
                rxs.push(rx);
                Box::new(move |ev| tx.send(ev).is_ok()) as EventSink
            })
            .collect();
        let ids = e.submit_choices(req(10), sinks).unwrap();
        assert_eq!(ids.len(), 3);
        let forked: Vec<Vec<u32>> = rxs.iter().map(tokens).collect();
        assert_eq!(
            forked, alone,
            "{backend:?}: a forked choice differs from its own request"
        );
        // The prompt's 37 rows once, then 6 decode rows per choice (alone: 37 + 6 each).
        wait_idle(&e);
        let m = e.metrics().snapshot();
        assert_eq!(
            m.forward_tokens - before.forward_tokens,
            37 + 3 * 6,
            "{backend:?}"
        );
        assert_eq!(before.forward_tokens, 3 * (37 + 6), "{backend:?}");
        assert_eq!(m.kv_blocks_used, 0);
        for n in [0, 5] {
            let sinks: Vec<EventSink> = (0..n).map(|_| Box::new(|_| true) as EventSink).collect();
            assert!(e.submit_choices(req(1), sinks).is_err(), "n = {n} accepted");
        }
        e.shutdown(false);
    }
}
