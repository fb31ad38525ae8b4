//! A table-driven sweep of hostile inputs over the public functions of tileops-models that
//! issue #37 hardened (the KV-cache manager, the engine's checks and sampler, the tokenizer's
//! fit check, the weight loader): extreme counts and sizes, boundary values of every integer
//! argument, non-finite floats, files truncated or of the wrong dtype. Every case must give
//! its expected `Ok` or an `Err` carrying the expected words, never a panic; a failed
//! cache call must leave the manager unchanged. The case count is printed (`--nocapture`).

use std::panic::{catch_unwind, AssertUnwindSafe};
use tileops_models::deepseek::config::Config;
use tileops_models::engine::{
    argmax, check_pool, check_request, sample_top_p, v32_attention_call, Engine, Sampling,
};
use tileops_models::kv_cache::{PagedKvCache, MAX_SLOTS};
use tileops_models::serving::prefix::PrefixCache;
use tileops_models::serving::request::{GenerateRequest, TextState, TokenLogprob};
use tileops_models::serving::sampler::{sample_from, Sampler, SamplingParams};
use tileops_models::serving::{Engine as ServingEngine, EngineConfig, MAX_STOP_STRINGS};
use tileops_models::tokenizer::Tokenizer;
use tileops_models::weights::{specs, Kind, Weights};
use tileops_ops::Backend;

/// What a case must give: `Ok`, or an `Err` whose text holds every fragment.
enum Want {
    Ok,
    Err(Vec<String>),
}

fn err(frags: &[&str]) -> Want {
    Want::Err(frags.iter().map(|s| s.to_string()).collect())
}

struct Sweep {
    cases: usize,
    failures: Vec<String>,
}

impl Sweep {
    fn case(
        &mut self,
        name: impl Into<String>,
        want: Want,
        f: impl FnOnce() -> Result<(), String>,
    ) {
        let name = name.into();
        self.cases += 1;
        let got = catch_unwind(AssertUnwindSafe(f));
        let bad = match (got, &want) {
            (Err(_), _) => Some("panicked".to_string()),
            (Ok(Ok(())), Want::Ok) => None,
            (Ok(Ok(())), Want::Err(_)) => Some("returned Ok, expected an error".into()),
            (Ok(Err(e)), Want::Ok) => Some(format!("expected Ok, got {e}")),
            (Ok(Err(e)), Want::Err(frags)) => frags
                .iter()
                .find(|f| !e.contains(f.as_str()))
                .map(|f| format!("error lacks `{f}`: {e}")),
        };
        if let Some(b) = bad {
            self.failures.push(format!("{name}: {b}"));
        }
    }
}

fn tmp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("tileops-sweep-{}-{name}", std::process::id()))
}

const COUNTS: [usize; 9] = [
    0,
    1,
    15,
    16,
    17,
    MAX_SLOTS,
    MAX_SLOTS + 1,
    usize::MAX / 2,
    usize::MAX,
];

fn kv_cache(s: &mut Sweep) {
    for nb in COUNTS {
        for bs in COUNTS {
            let ok = nb >= 1 && bs >= 1 && nb.checked_mul(bs).is_some_and(|n| n <= MAX_SLOTS);
            let want = if ok {
                Want::Ok
            } else if nb == 0 || bs == 0 {
                err(&["num_blocks >= 1"])
            } else {
                err(&["2^31"])
            };
            s.case(format!("PagedKvCache::new({nb}, {bs})"), want, || {
                PagedKvCache::new(nb, bs)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            });
        }
    }
    // Appends of every boundary count on a pool of 4 x 4 holding 5 tokens (one shared block),
    // on a fresh and a forked sequence; unknown ids.
    for n in COUNTS {
        for forked in [false, true] {
            let want = if n <= if forked { 7 } else { 11 } {
                Want::Ok
            } else {
                err(&[])
            };
            s.case(format!("append({n}), forked {forked}"), want, || {
                let mut c = PagedKvCache::new(4, 4).map_err(|e| e.to_string())?;
                let a = c.add_sequence().map_err(|e| e.to_string())?;
                c.append(a, 5).map_err(|e| e.to_string())?;
                let id = if forked {
                    c.fork(a).map_err(|e| e.to_string())?
                } else {
                    a
                };
                let before = c.clone();
                match c.append(id, n) {
                    Ok(w) if w.slots.len() == n => {
                        let max = (c.capacity() - 1) as i64;
                        match w.slots.iter().find(|&&x| !(0..=max).contains(&x)) {
                            Some(x) => Err(format!("slot {x} outside the pool")),
                            None => Ok(()),
                        }
                    }
                    Ok(w) => Err(format!("{} slots for {n} tokens", w.slots.len())),
                    Err(e) if c == before => Err(e.to_string()),
                    Err(e) => Err(format!("the manager changed on `{e}`")),
                }
            });
        }
    }
    for id in [1u64, 2, u64::MAX] {
        s.case(
            format!("unknown sequence {id}"),
            err(&["unknown sequence"]),
            || {
                let mut c = PagedKvCache::new(2, 2).map_err(|e| e.to_string())?;
                c.add_sequence().map_err(|e| e.to_string())?;
                let before = c.clone();
                let r = [
                    c.append(id, 1).map(|_| ()),
                    c.fork(id).map(|_| ()),
                    c.free(id),
                    c.len(id).map(|_| ()),
                    c.slots(id).map(|_| ()),
                    c.block_tables(&[0, id]).map(|_| ()),
                ];
                if c != before {
                    return Err("the manager changed".into());
                }
                match r.iter().find(|r| r.is_ok()) {
                    Some(_) => Ok(()),
                    None => Err(r[0].clone().unwrap_err().to_string()),
                }
            },
        );
    }
    s.case("refcount of ids outside the pool", Want::Ok, || {
        let c = PagedKvCache::new(2, 2).map_err(|e| e.to_string())?;
        match [0, 1, 2, u32::MAX].iter().all(|&b| c.refcount(b) == 0) {
            true => Ok(()),
            false => Err("a free block has a count".into()),
        }
    });
}

fn engine(s: &mut Sweep) {
    let cfg = Config {
        n_layers: 2,
        max_seq_len: 32,
        ..Config::default()
    };
    // Requests: boundary lengths and ids.
    let v = cfg.vocab_size as u32;
    /// Name, prompts, new tokens, sampling, whether it is a valid request.
    type Request = (&'static str, Vec<Vec<u32>>, usize, Sampling, bool);
    let requests: Vec<Request> = vec![
        ("no prompt", vec![], 1, Sampling::Greedy, false),
        ("empty prompt", vec![vec![]], 1, Sampling::Greedy, false),
        ("fits exactly", vec![vec![1; 31]], 1, Sampling::Greedy, true),
        (
            "one too long",
            vec![vec![1; 31]],
            2,
            Sampling::Greedy,
            false,
        ),
        (
            "max_new usize::MAX",
            vec![vec![1]],
            usize::MAX,
            Sampling::Greedy,
            false,
        ),
        ("last id", vec![vec![v - 1]], 1, Sampling::Greedy, true),
        ("id = vocab", vec![vec![v]], 1, Sampling::Greedy, false),
        (
            "id u32::MAX",
            vec![vec![u32::MAX]],
            1,
            Sampling::Greedy,
            false,
        ),
        (
            "forced past vocab",
            vec![vec![1]],
            1,
            Sampling::Forced(vec![vec![v]]),
            false,
        ),
        (
            "forced too short",
            vec![vec![1], vec![2]],
            2,
            Sampling::Forced(vec![vec![1, 2]]),
            false,
        ),
    ];
    for (name, prompts, max_new, sampling, ok) in requests {
        let want = if ok { Want::Ok } else { err(&[]) };
        s.case(format!("check_request: {name}"), want, || {
            check_request(&cfg, &prompts, max_new, &sampling).map_err(|e| e.to_string())
        });
    }
    for t in [0.0, -1.0, f32::NAN, f32::INFINITY, f32::MIN_POSITIVE, 1.0] {
        for p in [0.0, -0.0, 1e-30, 1.0, 1.0 + f32::EPSILON, f32::NAN] {
            let ok = t.is_finite() && t > 0.0 && p > 0.0 && p <= 1.0;
            let want = if ok { Want::Ok } else { err(&[]) };
            let sampling = Sampling::TopP {
                temperature: t,
                top_p: p,
                seed: 0,
            };
            s.case(format!("check_request top-p t={t} p={p}"), want, || {
                check_request(&cfg, &[vec![1]], 1, &sampling).map_err(|e| e.to_string())
            });
            let want = if ok { Want::Ok } else { err(&["sample_top_p"]) };
            s.case(format!("sample_top_p t={t} p={p}"), want, || {
                let i = sample_top_p(&[1.0, -3.0, 2.0], t, p, 0.5).map_err(|e| e.to_string())?;
                (i < 3).then_some(()).ok_or(format!("index {i}"))
            });
        }
    }
    for u in [-0.0, 0.0, 0.999_999_9, 1.0, f32::NAN, -1.0] {
        let want = if (0.0..1.0).contains(&u) {
            Want::Ok
        } else {
            err(&["u must be"])
        };
        s.case(format!("sample_top_p u={u}"), want, || {
            sample_top_p(&[0.0, 0.0], 1.0, 1.0, u)
                .map(|_| ())
                .map_err(|e| e.to_string())
        });
    }
    s.case("argmax of extremes", Want::Ok, || {
        let cases: [(&[f32], u32); 4] = [
            (&[], 0),
            (&[f32::MIN, f32::MAX, f32::MAX], 1),
            (&[-f32::INFINITY, -1.0], 1),
            (&[0.0, -0.0], 0),
        ];
        match cases.iter().find(|(l, want)| argmax(l) != *want) {
            Some((l, _)) => Err(format!("argmax({l:?}) = {}", argmax(l))),
            None => Ok(()),
        }
    });
    for (nb, bs) in [
        (0, 16),
        (16, 0),
        (usize::MAX, 16),
        (1 << 23, 256),
        (1 << 11, 16),
    ] {
        let want = if (nb, bs) == (1 << 11, 16) {
            Want::Ok
        } else {
            err(&[])
        };
        s.case(format!("check_pool({nb}, {bs})"), want, || {
            check_pool(&cfg, nb, bs)
                .map(|_| ())
                .map_err(|e| e.to_string())
        });
    }
    for c in [0, 2047, MAX_V32 + 1, usize::MAX] {
        s.case(
            format!("v32_attention_call({c})"),
            err(&["context"]),
            || {
                v32_attention_call(c, 0)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            },
        );
    }
    // The engine itself: a bad request changes nothing, a good one after it runs.
    let w = match Weights::generate(&cfg, 5) {
        Ok(w) => w,
        Err(e) => {
            s.failures.push(format!("Weights::generate: {e}"));
            return;
        }
    };
    s.case("engine: bad requests then a good one", Want::Ok, || {
        let mut e = Engine::new(&cfg, &w, Backend::Reference, 8, 8).map_err(|e| e.to_string())?;
        let bad: [(&[Vec<u32>], usize); 4] = [
            (&[vec![1; 40]], 1),
            (&[vec![1]], usize::MAX),
            (&[vec![u32::MAX]], 1),
            (
                &[
                    vec![1; 16],
                    vec![1; 16],
                    vec![1; 16],
                    vec![1; 16],
                    vec![1; 16],
                ],
                4,
            ),
        ];
        for (p, n) in bad {
            if e.generate(p, n, &Sampling::Greedy, |_, _| {}).is_ok() {
                return Err(format!("{n} tokens after {p:?} accepted"));
            }
            if e.cache.free_blocks() != e.cache.num_blocks() || e.cache.sequences().count() != 0 {
                return Err("a failed request left sequences behind".into());
            }
        }
        let g = e
            .generate(&[vec![1, 2]], 2, &Sampling::Greedy, |_, _| {})
            .map_err(|e| e.to_string())?;
        (g.tokens[0].len() == 2)
            .then_some(())
            .ok_or("wrong token count".into())
    });
}

/// The serving engine's public functions: `Engine::spawn`'s configuration, `validate` of hostile
/// requests, the sampler, the logprobs, the text state and the prefix cache.
fn serving(s: &mut Sweep) {
    let cfg = Config {
        n_layers: 2,
        max_seq_len: 64,
        ..Config::default()
    };
    let w = match Weights::generate(&cfg, 0) {
        Ok(w) => w,
        Err(e) => {
            s.failures.push(format!("Weights::generate: {e}"));
            return;
        }
    };
    let tok: std::sync::Arc<Tokenizer> = match Tokenizer::train() {
        Ok(t) => std::sync::Arc::new(t),
        Err(e) => {
            s.failures.push(format!("Tokenizer::train: {e}"));
            return;
        }
    };
    let base = EngineConfig {
        kv_blocks: 8,
        block_size: 8,
        ..EngineConfig::default()
    };
    let v = cfg.vocab_size as u32;
    // Spawn: every count at 0, pools past the limits, an EOS outside the vocabulary.
    type Spawn = (&'static str, EngineConfig, Option<&'static str>);
    let spawns: Vec<Spawn> = vec![
        ("the default pool", base.clone(), None),
        (
            "kv_blocks 0",
            EngineConfig {
                kv_blocks: 0,
                ..base.clone()
            },
            Some("block"),
        ),
        (
            "block_size 0",
            EngineConfig {
                block_size: 0,
                ..base.clone()
            },
            Some("block"),
        ),
        (
            "kv_blocks usize::MAX",
            EngineConfig {
                kv_blocks: usize::MAX,
                ..base.clone()
            },
            Some("block"),
        ),
        (
            "2^40 blocks",
            EngineConfig {
                kv_blocks: 1 << 40,
                ..base.clone()
            },
            Some("block"),
        ),
        (
            "max_running 0",
            EngineConfig {
                max_running: 0,
                ..base.clone()
            },
            Some("max_running"),
        ),
        (
            "max_batch_tokens 0",
            EngineConfig {
                max_batch_tokens: 0,
                ..base.clone()
            },
            Some("max_batch_tokens"),
        ),
        (
            "max_waiting 0",
            EngineConfig {
                max_waiting: 0,
                ..base.clone()
            },
            Some("max_waiting"),
        ),
        (
            "max_model_len 0",
            EngineConfig {
                max_model_len: 0,
                ..base.clone()
            },
            Some("max_model_len"),
        ),
        (
            "eos = vocab",
            EngineConfig {
                eos_token: Some(v),
                ..base.clone()
            },
            Some("eos"),
        ),
        (
            "eos u32::MAX",
            EngineConfig {
                eos_token: Some(u32::MAX),
                ..base.clone()
            },
            Some("eos"),
        ),
        (
            "eos the last id, counts usize::MAX",
            EngineConfig {
                eos_token: Some(v - 1),
                max_running: usize::MAX,
                max_batch_tokens: usize::MAX,
                max_waiting: usize::MAX,
                max_model_len: usize::MAX,
                ..base.clone()
            },
            None,
        ),
    ];
    for (name, ec, frag) in spawns {
        let want = match frag {
            None => Want::Ok,
            Some(f) => err(&[f]),
        };
        s.case(format!("serving::Engine::spawn: {name}"), want, || {
            let e = ServingEngine::spawn(&cfg, &w, ec, tok.clone()).map_err(|e| e.to_string())?;
            e.shutdown(true);
            Ok(())
        });
    }
    // Requests against a running engine (64 tokens, 8 blocks of 8).
    let e = match ServingEngine::spawn(&cfg, &w, base.clone(), tok.clone()) {
        Ok(e) => e,
        Err(e) => {
            s.failures.push(format!("serving::Engine::spawn: {e}"));
            return;
        }
    };
    let req = |prompt: Vec<u32>, max_tokens: usize| GenerateRequest {
        prompt,
        max_tokens,
        sampling: SamplingParams::default(),
        stop: vec![],
        logprobs: None,
    };
    let sampling = |temperature: f32, top_p: f32, top_k: usize| GenerateRequest {
        sampling: SamplingParams {
            temperature,
            top_p,
            top_k,
            seed: u64::MAX,
        },
        ..req(vec![1], 1)
    };
    let mut requests: Vec<(String, GenerateRequest, Option<&str>)> = vec![
        ("empty prompt".into(), req(vec![], 1), Some("prompt")),
        ("fits exactly".into(), req(vec![1; 63], 1), None),
        (
            "one past the length".into(),
            req(vec![1; 63], 2),
            Some("max_tokens"),
        ),
        (
            "prompt past the length".into(),
            req(vec![1; 65], 1),
            Some("prompt"),
        ),
        ("max_tokens 0".into(), req(vec![1], 0), Some("max_tokens")),
        (
            "max_tokens usize::MAX".into(),
            req(vec![1], usize::MAX),
            Some("max_tokens"),
        ),
        ("id = vocab".into(), req(vec![v], 1), Some("vocabulary")),
        (
            "id u32::MAX".into(),
            req(vec![u32::MAX], 1),
            Some("vocabulary"),
        ),
        ("last id".into(), req(vec![v - 1], 1), None),
        (
            "stop strings past the limit".into(),
            GenerateRequest {
                stop: vec!["x".into(); MAX_STOP_STRINGS + 1],
                ..req(vec![1], 1)
            },
            Some("stop"),
        ),
        (
            "empty and long stop strings, logprobs usize::MAX".into(),
            GenerateRequest {
                stop: vec![String::new(), "\u{fffd}".repeat(1000)],
                logprobs: Some(usize::MAX),
                ..req(vec![1], 1)
            },
            None,
        ),
    ];
    for t in [
        0.0,
        2.0,
        -0.0,
        -1.0,
        2.5,
        f32::NAN,
        f32::INFINITY,
        f32::MIN_POSITIVE,
    ] {
        for p in [1.0, f32::MIN_POSITIVE, 0.0, -1.0, 1.5, f32::NAN] {
            let t_ok = t.is_finite() && (0.0..=2.0).contains(&t);
            let p_ok = p.is_finite() && p > 0.0 && p <= 1.0;
            let frag = match (t_ok, p_ok) {
                (true, true) => None,
                (false, _) => Some("temperature"),
                (true, false) => Some("top_p"),
            };
            for k in [0, 1, usize::MAX] {
                requests.push((format!("t={t} p={p} k={k}"), sampling(t, p, k), frag));
            }
        }
    }
    for (name, r, frag) in requests {
        let want = match frag {
            None => Want::Ok,
            Some(f) => err(&[f]),
        };
        s.case(format!("serving::Engine::validate: {name}"), want, || {
            e.validate(&r).map_err(|e| e.to_string())
        });
    }
    s.case("serving: bad submits then a good one", Want::Ok, || {
        for r in [
            req(vec![], 1),
            req(vec![u32::MAX], 1),
            req(vec![1], usize::MAX),
        ] {
            if e.submit(r, Box::new(|_| true)).is_ok() {
                return Err("a bad request was queued".into());
            }
        }
        let (tx, rx) = std::sync::mpsc::channel();
        e.submit(req(vec![1, 2], 2), Box::new(move |ev| tx.send(ev).is_ok()))
            .map_err(|e| e.to_string())?;
        let deadline = std::time::Duration::from_secs(60);
        let mut tokens = 0;
        loop {
            match rx.recv_timeout(deadline).map_err(|e| e.to_string())? {
                tileops_models::serving::request::Event::Token { .. } => tokens += 1,
                tileops_models::serving::request::Event::Finished { .. } => break,
                tileops_models::serving::request::Event::Error(m) => return Err(m),
            }
        }
        (tokens == 2)
            .then_some(())
            .ok_or(format!("{tokens} tokens, not 2"))
    });
    e.shutdown(true);
    s.case(
        "serving: submit after shutdown",
        err(&["shutting down"]),
        || {
            e.submit(req(vec![1], 1), Box::new(|_| true))
                .map(|_| ())
                .map_err(|e| e.to_string())
        },
    );
    // The sampler, the logprobs and the text state on extreme logits and text.
    let logit_sets: Vec<(&str, Vec<f32>)> = vec![
        ("empty", vec![]),
        ("one", vec![0.0]),
        ("all NaN", vec![f32::NAN; 4]),
        (
            "infinities",
            vec![f32::INFINITY, f32::NEG_INFINITY, 0.0, f32::INFINITY],
        ),
        ("all -inf", vec![f32::NEG_INFINITY; 4]),
        (
            "extremes",
            vec![f32::MAX, f32::MIN, f32::MIN_POSITIVE, -0.0],
        ),
    ];
    for (name, logits) in &logit_sets {
        for (t, p, k) in [
            (1.0, 1.0, 0),
            (f32::MIN_POSITIVE, 0.5, 1),
            (2.0, f32::MIN_POSITIVE, usize::MAX),
        ] {
            s.case(
                format!("sample_from {name} t={t} p={p} k={k}"),
                Want::Ok,
                || {
                    let params = SamplingParams {
                        temperature: t,
                        top_p: p,
                        top_k: k,
                        seed: 7,
                    };
                    let mut sampler = Sampler::new(params.clone());
                    for u in [0.0, 0.5, 1.0 - f32::EPSILON, 1.0] {
                        let id = sample_from(logits, &params, u) as usize;
                        if id >= logits.len().max(1) {
                            return Err(format!("token {id} of {} logits", logits.len()));
                        }
                    }
                    let id = sampler.sample(logits) as usize;
                    (id < logits.len().max(1))
                        .then_some(())
                        .ok_or(format!("token {id} of {} logits", logits.len()))
                },
            );
        }
        s.case(format!("TokenLogprob::new {name}"), Want::Ok, || {
            for (token, top) in [(0, 0), (u32::MAX, usize::MAX), (1, 2)] {
                let lp = TokenLogprob::new(logits, token, top);
                if lp.top.len() > logits.len() {
                    return Err(format!("{} alternatives of {}", lp.top.len(), logits.len()));
                }
            }
            Ok(())
        });
    }
    s.case(
        "TextState on multi-byte text and stop strings",
        Want::Ok,
        || {
            let mut st = TextState::new(&["é\u{fffd}".into(), String::new(), "日本".into()]);
            let mut out = String::new();
            let mut text = String::new();
            for piece in ["a", "é", "\u{fffd}", "日", "本", "z"] {
                text.push_str(piece);
                let step = st.advance(&text, false);
                out.push_str(&step.text);
                if step.stopped {
                    break;
                }
            }
            // A shorter text than was already released, then a flush.
            out.push_str(&st.advance("", true).text);
            (out == "a")
                .then_some(())
                .ok_or(format!("released {out:?}"))
        },
    );
    s.case(
        "PrefixCache::lookup with block size 0 and 1",
        Want::Ok,
        || {
            let mut p = PrefixCache::default();
            for bs in [0, 1, usize::MAX] {
                for tokens in [&[][..], &[1][..], &[1, 2, 3][..]] {
                    let (blocks, keys) = p.lookup(tokens, bs);
                    if !blocks.is_empty() || !keys.is_empty() {
                        return Err(format!("an empty cache found {blocks:?}"));
                    }
                }
            }
            Ok(())
        },
    );
}

const MAX_V32: usize = tileops_models::engine::MAX_V32_CONTEXT;

fn tokenizer(s: &mut Sweep) {
    let path = tmp("tok.json");
    let files: [(&str, &[u8]); 4] = [
        ("empty file", b""),
        ("not JSON", b"\x00\xff garbage"),
        ("JSON, no model", b"{}"),
        (
            "truncated",
            br#"{"version":"1.0","model":{"type":"BPE","vocab":{"a":"#,
        ),
    ];
    for (name, bytes) in files {
        s.case(
            format!("Tokenizer::from_file: {name}"),
            err(&["tokenizer"]),
            || {
                std::fs::write(&path, bytes).map_err(|e| e.to_string())?;
                Tokenizer::from_file(&path)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            },
        );
    }
    s.case(
        "Tokenizer::from_file: a folder",
        err(&["tokenizer"]),
        || {
            Tokenizer::from_file(&std::env::temp_dir())
                .map(|_| ())
                .map_err(|e| e.to_string())
        },
    );
    let t = match Tokenizer::train() {
        Ok(t) => t,
        Err(e) => {
            s.failures.push(format!("Tokenizer::train: {e}"));
            return;
        }
    };
    let n = t.vocab_size();
    for max in [0, 1, n - 1, n, usize::MAX] {
        let want = if max >= n {
            Want::Ok
        } else {
            err(&["vocab_size"])
        };
        s.case(format!("check_fits({max}) of {n} ids"), want, || {
            t.check_fits(max).map_err(|e| e.to_string())
        });
    }
    // An error or a text, never a panic.
    s.case("decode of ids past the vocabulary", Want::Ok, || {
        let _ = t.decode(&[0, u32::MAX, n as u32]);
        Ok(())
    });
    std::fs::remove_file(&path).ok();
}

fn weights(s: &mut Sweep) {
    let cfg = Config {
        n_layers: 2,
        ..Config::default()
    };
    let good = tmp("w.safetensors");
    if let Err(e) = Weights::generate(&cfg, 1).and_then(|w| w.save(&good)) {
        s.failures.push(format!("weights: {e}"));
        return;
    }
    let bytes = std::fs::read(&good).unwrap_or_default();
    let path = tmp("w-bad.safetensors");
    let p = path.display().to_string();
    // Truncated at 24 points from the start to one byte short.
    let len = bytes.len();
    for i in 0..24 {
        let keep = match i {
            0 => 0,
            23 => len - 1,
            i => len * i / 23,
        };
        s.case(
            format!("load of the file cut at {keep} of {len}"),
            err(&[&p]),
            || {
                std::fs::write(&path, &bytes[..keep]).map_err(|e| e.to_string())?;
                Weights::load(&cfg, &path)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            },
        );
    }
    s.case("load of a missing file", err(&["no-such-file"]), || {
        Weights::load(&cfg, &tmp("no-such-file"))
            .map(|_| ())
            .map_err(|e| e.to_string())
    });
    // One tensor of each kind stored with each wrong dtype.
    let st = match safetensors::SafeTensors::deserialize(&bytes) {
        Ok(st) => st,
        Err(e) => {
            s.failures.push(format!("weights: {e}"));
            return;
        }
    };
    let mut picked: Vec<String> = Vec::new();
    for kind in [Kind::Dense, Kind::Ones, Kind::Zeros, Kind::Bias, Kind::Int8] {
        if let Some(sp) = specs(&cfg).into_iter().find(|sp| sp.kind == kind) {
            if kind == Kind::Int8 {
                picked.push(format!("{}_scale", sp.name));
            }
            picked.push(sp.name);
        }
    }
    use safetensors::Dtype::*;
    for name in &picked {
        for dtype in [F32, F16, BF16, F64, I8, U8, I32, I64, BOOL] {
            let Ok(view) = st.tensor(name) else { continue };
            if dtype == view.dtype() {
                continue;
            }
            s.case(
                format!("load of `{name}` stored as {dtype:?}"),
                err(&[name, &p]),
                || {
                    let es = dtype.bitsize() / 8;
                    let n: usize = view.shape().iter().product();
                    let data = vec![0u8; n * es];
                    let mut views: Vec<(String, safetensors::tensor::TensorView<'_>)> = Vec::new();
                    for (other, v) in st.tensors() {
                        if other != *name {
                            views.push((other, v));
                        }
                    }
                    let bad =
                        safetensors::tensor::TensorView::new(dtype, view.shape().to_vec(), &data)
                            .map_err(|e| format!("setup: {e}"))?;
                    views.push((name.clone(), bad));
                    safetensors::serialize_to_file(views, None, &path)
                        .map_err(|e| e.to_string())?;
                    Weights::load(&cfg, &path)
                        .map(|_| ())
                        .map_err(|e| e.to_string())
                },
            );
        }
    }
    std::fs::remove_file(&path).ok();
    std::fs::remove_file(&good).ok();
}

#[test]
fn hostile_inputs_give_errors_not_panics_or_wrong_results() {
    let mut s = Sweep {
        cases: 0,
        failures: Vec::new(),
    };
    kv_cache(&mut s);
    engine(&mut s);
    tokenizer(&mut s);
    weights(&mut s);
    serving(&mut s);
    println!("sweep: {} cases, {} failures", s.cases, s.failures.len());
    assert!(s.cases > 250, "the sweep shrank to {} cases", s.cases);
    assert!(
        s.failures.is_empty(),
        "{} of {} cases failed:\n{}",
        s.failures.len(),
        s.cases,
        s.failures.join("\n")
    );
}
