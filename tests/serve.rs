//! The OpenAI-compatible server over real HTTP on loopback: every route, streaming chunk by
//! chunk, a bounded load test that forces preemption, bad inputs, disconnects and SIGTERM.
#![cfg(feature = "server")]

use serde_json::{json, Value};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tileops::serve::{serve, AppState};
use tileops_models::deepseek::config::Config;
use tileops_models::engine::{Engine as StaticEngine, Sampling};
use tileops_models::serving::{Engine, EngineConfig, EngineHandle};
use tileops_models::tokenizer::Tokenizer;
use tileops_models::weights::Weights;
use tileops_ops::Backend;

const MODEL: &str = "tiny";

fn cfg() -> Config {
    Config {
        n_layers: 2,
        max_seq_len: 128,
        ..Config::default()
    }
}

fn weights() -> &'static Weights {
    static W: OnceLock<Weights> = OnceLock::new();
    W.get_or_init(|| Weights::generate(&cfg(), 11).unwrap())
}

fn tokenizer() -> Arc<Tokenizer> {
    static T: OnceLock<Arc<Tokenizer>> = OnceLock::new();
    T.get_or_init(|| Arc::new(Tokenizer::train().unwrap()))
        .clone()
}

fn engine_cfg() -> EngineConfig {
    EngineConfig {
        kv_blocks: 64,
        block_size: 8,
        max_running: 8,
        max_batch_tokens: 64,
        max_waiting: 128,
        max_model_len: 128,
        ..EngineConfig::default()
    }
}

struct Server {
    url: String,
    engine: EngineHandle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        let e = self.engine.clone();
        std::thread::spawn(move || e.shutdown(true));
    }
}

async fn start(ec: EngineConfig) -> Server {
    start_with_timeout(ec, None).await
}

async fn start_with_timeout(ec: EngineConfig, timeout: Option<Duration>) -> Server {
    let engine = Engine::spawn(&cfg(), weights(), ec, tokenizer()).unwrap();
    let state = AppState::new(engine.clone(), tokenizer(), MODEL.into(), timeout);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve(listener, state, async move {
        let _ = rx.await;
    }));
    Server {
        url,
        engine,
        stop: Some(tx),
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::new()
}

async fn post(s: &Server, path: &str, body: &Value) -> (u16, Value) {
    post_raw(s, path, body.to_string()).await
}

async fn post_raw(s: &Server, path: &str, body: String) -> (u16, Value) {
    let r = client()
        .post(format!("{}{path}", s.url))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    let v = serde_json::from_str(&text).unwrap_or_else(|_| json!({ "raw": text }));
    (status, v)
}

/// The `data:` payloads of a streamed response, read chunk by chunk; also the number of
/// network chunks seen.
async fn stream(s: &Server, path: &str, body: &Value) -> (Vec<String>, usize) {
    let mut r = client()
        .post(format!("{}{path}", s.url))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let (mut buf, mut events, mut chunks) = (String::new(), Vec::new(), 0);
    while let Some(c) = r.chunk().await.unwrap() {
        chunks += 1;
        buf.push_str(std::str::from_utf8(&c).unwrap());
        while let Some(i) = buf.find("\n\n") {
            let ev: String = buf[..i].to_string();
            buf.drain(..i + 2);
            for line in ev.lines() {
                if let Some(d) = line.strip_prefix("data: ") {
                    events.push(d.to_string());
                }
            }
        }
    }
    (events, chunks)
}

/// The greedy tokens of `prompt` run alone through the static engine (the same weights, the
/// serving engine's sparse prefill path).
fn alone(prompt: &[u32], max_new: usize) -> Vec<u32> {
    let mut e = StaticEngine::new(&cfg(), weights(), Backend::Reference, 32, 8).unwrap();
    e.model.dense_prefill = false;
    e.generate(&[prompt.to_vec()], max_new, &Sampling::Greedy, |_, _| {})
        .unwrap()
        .tokens
        .remove(0)
}

async fn get(s: &Server, path: &str) -> (u16, String) {
    let r = client()
        .get(format!("{}{path}", s.url))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(' ')))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no metric {name} in\n{text}"))
}

async fn wait_idle(s: &Server) -> String {
    let t = Instant::now();
    loop {
        let (_, m) = get(s, "/metrics").await;
        // Every block free or held only by the prefix cache (evictable).
        if metric(&m, "tileops_requests_running") == 0.0
            && metric(&m, "tileops_requests_waiting") == 0.0
            && metric(&m, "tileops_kv_blocks_used")
                == metric(&m, "tileops_prefix_cache_evictable_blocks")
        {
            return m;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "never idle:\n{m}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_answer_in_openai_format() {
    let s = start(engine_cfg()).await;
    let (st, h) = get(&s, "/health").await;
    assert_eq!((st, h.contains("ok")), (200, true));
    let (st, m) = get(&s, "/v1/models").await;
    let m: Value = serde_json::from_str(&m).unwrap();
    assert_eq!(st, 200);
    assert_eq!(m["data"][0]["id"], MODEL);
    let (st, e) = get(&s, "/nope").await;
    assert_eq!(st, 404);
    assert!(e.contains("not_found_error"));

    // A greedy completion: the tokens the model gives the prompt alone.
    let prompt = "The keeper climbed the stairs";
    let ids = tokenizer().encode(prompt).unwrap();
    let want = tokenizer().decode(&alone(&ids, 12)).unwrap();
    let body = json!({"model": MODEL, "prompt": prompt, "max_tokens": 12, "temperature": 0});
    let (st, r) = post(&s, "/v1/completions", &body).await;
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["object"], "text_completion");
    assert_eq!(r["choices"][0]["text"], want.as_str());
    assert_eq!(r["choices"][0]["finish_reason"], "length");
    assert_eq!(r["usage"]["prompt_tokens"], ids.len());
    assert_eq!(r["usage"]["completion_tokens"], 12);
    assert_eq!(r["usage"]["total_tokens"], ids.len() + 12);
    // Token-id prompts give the same.
    let body = json!({"model": MODEL, "prompt": ids, "max_tokens": 12, "temperature": 0});
    let (_, r2) = post(&s, "/v1/completions", &body).await;
    assert_eq!(r2["choices"][0]["text"], want.as_str());

    // Streaming: chunks concatenate to the same text, a usage chunk, then [DONE].
    let body = json!({"model": MODEL, "prompt": prompt, "max_tokens": 12, "temperature": 0,
                      "stream": true, "stream_options": {"include_usage": true}});
    let (events, chunks) = stream(&s, "/v1/completions", &body).await;
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    assert!(chunks >= 3, "{chunks} network chunks");
    let parsed: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    let (usage, body_chunks) = parsed.split_last().unwrap();
    assert_eq!(usage["choices"].as_array().unwrap().len(), 0);
    assert_eq!(usage["usage"]["completion_tokens"], 12);
    let text: String = body_chunks
        .iter()
        .map(|c| c["choices"][0]["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(text, want);
    assert!(body_chunks.iter().all(|c| c["usage"].is_null()));
    assert_eq!(
        body_chunks.last().unwrap()["choices"][0]["finish_reason"],
        "length"
    );

    // n = 2: two choices, each the greedy text; streamed, both indices before one [DONE].
    let body =
        json!({"model": MODEL, "prompt": prompt, "max_tokens": 12, "temperature": 0, "n": 2});
    let (st, r) = post(&s, "/v1/completions", &body).await;
    assert_eq!(st, 200, "{r}");
    for i in 0..2 {
        assert_eq!(r["choices"][i]["index"], i);
        assert_eq!(r["choices"][i]["text"], want.as_str());
    }
    assert_eq!(r["usage"]["completion_tokens"], 24);
    let body = json!({"model": MODEL, "prompt": prompt, "max_tokens": 12, "temperature": 0, "n": 2,
                      "stream": true, "stream_options": {"include_usage": true}});
    let (events, _) = stream(&s, "/v1/completions", &body).await;
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let parsed: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert_eq!(parsed.last().unwrap()["usage"]["completion_tokens"], 24);
    for i in 0..2u64 {
        let text: String = parsed
            .iter()
            .filter_map(|c| c["choices"].get(0))
            .filter(|c| c["index"] == i)
            .map(|c| c["text"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(text, want, "choice {i}");
    }

    // Log-probabilities: greedy picks the most likely token, offsets follow the token strings.
    let body = json!({"model": MODEL, "prompt": prompt, "max_tokens": 12, "temperature": 0, "logprobs": 2});
    let (st, r) = post(&s, "/v1/completions", &body).await;
    assert_eq!(st, 200, "{r}");
    let lp = &r["choices"][0]["logprobs"];
    let toks = lp["tokens"].as_array().unwrap();
    assert_eq!(toks.len(), 12);
    assert_eq!(
        toks.iter().map(|t| t.as_str().unwrap()).collect::<String>(),
        want
    );
    let offs = lp["text_offset"].as_array().unwrap();
    for k in 0..12 {
        let l = lp["token_logprobs"][k].as_f64().unwrap();
        assert!(l <= 0.0);
        let top = lp["top_logprobs"][k].as_object().unwrap();
        assert!(!top.is_empty() && top.len() <= 2);
        // Greedy picks the most likely token (two tokens may spell alike and share a key).
        assert!(
            top.values().all(|v| v.as_f64().unwrap() <= l),
            "token {k}: {l} below {top:?}"
        );
        if k > 0 {
            let prev = toks[k - 1].as_str().unwrap().len() as u64;
            assert_eq!(
                offs[k].as_u64().unwrap(),
                offs[k - 1].as_u64().unwrap() + prev
            );
        }
    }

    // Chat, whole and streamed.
    let msgs = json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is a block?"}]);
    let body =
        json!({"model": MODEL, "messages": msgs, "max_completion_tokens": 6, "temperature": 0});
    let (st, c) = post(&s, "/v1/chat/completions", &body).await;
    assert_eq!(st, 200, "{c}");
    assert_eq!(c["object"], "chat.completion");
    assert_eq!(c["choices"][0]["message"]["role"], "assistant");
    assert_eq!(c["usage"]["completion_tokens"], 6);
    let chat_text = c["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    let body = json!({"model": MODEL, "messages": msgs, "max_tokens": 6, "temperature": 0, "stream": true,
                      "logprobs": true, "top_logprobs": 1});
    let (events, _) = stream(&s, "/v1/chat/completions", &body).await;
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let parsed: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert_eq!(parsed[0]["object"], "chat.completion.chunk");
    assert_eq!(parsed[0]["choices"][0]["delta"]["role"], "assistant");
    let streamed: String = parsed
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(streamed, chat_text);
    assert!(parsed.iter().all(|c| c.get("usage").is_none()));
    // Each of the 6 tokens came with its log-probability.
    let lps: Vec<&Value> = parsed
        .iter()
        .filter_map(|c| c["choices"][0]["logprobs"]["content"].as_array())
        .flatten()
        .collect();
    assert_eq!(lps.len(), 6);
    assert!(lps
        .iter()
        .all(|e| e["top_logprobs"].as_array().unwrap().len() == 1));

    // A stop string cuts the text before it and finishes with "stop".
    let stop: String = want
        .chars()
        .skip(want.chars().count() / 2)
        .take(3)
        .collect();
    if !stop.trim().is_empty() {
        let body = json!({"model": MODEL, "prompt": prompt, "max_tokens": 12, "temperature": 0, "stop": stop});
        let (_, r) = post(&s, "/v1/completions", &body).await;
        let cut = &want[..want.find(&stop).unwrap()];
        assert_eq!(r["choices"][0]["text"], cut, "stop {stop:?}");
        assert_eq!(r["choices"][0]["finish_reason"], "stop");
    }

    // Seeded sampling replays; metrics count what ran.
    let body = json!({"model": MODEL, "prompt": prompt, "max_tokens": 8, "temperature": 0.9, "top_p": 0.9, "top_k": 50, "seed": 5});
    let (_, a) = post(&s, "/v1/completions", &body).await;
    let (_, b) = post(&s, "/v1/completions", &body).await;
    assert_eq!(a["choices"][0]["text"], b["choices"][0]["text"]);
    let m = wait_idle(&s).await;
    assert!(metric(&m, "tileops_generation_tokens_total") >= 12.0 * 3.0 + 12.0);
    assert!(metric(&m, "tileops_time_to_first_token_seconds_count") >= 7.0);
    assert!(m.contains("tileops_inter_token_latency_seconds_bucket{le=\"+Inf\"}"));
    assert!(metric(&m, "tileops_prefix_cache_hit_rate") > 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn load_with_preemption_gives_every_request_its_alone_tokens() {
    // 12 blocks of 8 = 96 slots for 64 requests of up to 40 + 24 tokens: preemption is certain.
    let ec = EngineConfig {
        kv_blocks: 12,
        block_size: 8,
        max_running: 8,
        max_batch_tokens: 48,
        ..engine_cfg()
    };
    let s = Arc::new(start(ec).await);
    let prompts: Vec<Vec<u32>> = (0..6u32)
        .map(|p| {
            (0..8 + 6 * p)
                .map(|i| (i * 37 + p * 101 + 5) % 1000)
                .collect()
        })
        .collect();
    let max_new = 24;
    let want: Vec<Vec<u32>> = prompts.iter().map(|p| alone(p, max_new)).collect();
    let tok = tokenizer();
    let mut tasks = Vec::new();
    for i in 0..64usize {
        let (s, p) = (s.clone(), prompts[i % prompts.len()].clone());
        let n = 4 + (i * 7) % (max_new - 3);
        tasks.push(tokio::spawn(async move {
            let body = json!({"model": MODEL, "prompt": p, "max_tokens": n, "temperature": 0,
                              "stream": true, "stream_options": {"include_usage": true}});
            let (ev, _) = stream(&s, "/v1/completions", &body).await;
            (i, n, ev)
        }));
    }
    let t = Instant::now();
    for task in tasks {
        let (i, n, ev) = task.await.unwrap();
        assert_eq!(ev.last().map(String::as_str), Some("[DONE]"), "request {i}");
        let parsed: Vec<Value> = ev[..ev.len() - 1]
            .iter()
            .map(|e| serde_json::from_str(e).unwrap())
            .collect();
        let text: String = parsed
            .iter()
            .filter_map(|c| c["choices"].get(0).and_then(|c| c["text"].as_str()))
            .collect();
        let expect = tok.decode(&want[i % prompts.len()][..n]).unwrap();
        assert_eq!(text, expect, "request {i} (max_tokens {n})");
        assert_eq!(parsed.last().unwrap()["usage"]["completion_tokens"], n);
    }
    assert!(t.elapsed() < Duration::from_secs(50));
    let m = wait_idle(&s).await;
    assert!(
        metric(&m, "tileops_preemptions_total") > 0.0,
        "the pool was meant to force preemption:\n{m}"
    );
    // Whether a request of the load found its prompt cached depends on how the 64 interleaved
    // (the 12-block pool evicts cached blocks as soon as it needs them): one prompt sent twice
    // after the load, on the idle engine, must hit.
    let before = metric(&m, "tileops_prefix_cache_hit_tokens_total");
    let body = json!({"model": MODEL, "prompt": prompts[5], "max_tokens": 2, "temperature": 0});
    for _ in 0..2 {
        let (status, _) = post(&s, "/v1/completions", &body).await;
        assert_eq!(status, 200);
    }
    let m = wait_idle(&s).await;
    assert!(
        metric(&m, "tileops_prefix_cache_hit_tokens_total") > before,
        "the second of two equal prompts finds the first's blocks:\n{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_inputs_get_openai_errors() {
    let ec = EngineConfig {
        max_running: 1,
        max_waiting: 1,
        ..engine_cfg()
    };
    let s = start(ec).await;
    let ok = json!({"model": MODEL, "prompt": "hello", "max_tokens": 2});
    let cases: Vec<(String, u16, &str, Option<&str>)> = vec![
        ("{not json".into(), 400, "invalid_request_error", None),
        (
            json!({"model": MODEL, "prompt": "hi", "echo": true}).to_string(),
            400,
            "invalid_request_error",
            Some("echo"),
        ),
        (
            json!({"model": MODEL, "prompt": "hi", "logprobs": 6}).to_string(),
            400,
            "invalid_request_error",
            Some("logprobs"),
        ),
        (
            json!({"model": "gpt-9", "prompt": "hi"}).to_string(),
            404,
            "invalid_request_error",
            Some("model"),
        ),
        (
            json!({"model": MODEL, "prompt": "hi", "max_tokens": 0}).to_string(),
            400,
            "invalid_request_error",
            Some("max_tokens"),
        ),
        (
            json!({"model": MODEL, "prompt": "hi", "max_tokens": 500}).to_string(),
            400,
            "invalid_request_error",
            Some("max_tokens"),
        ),
        (
            json!({"model": MODEL, "prompt": vec![1u32; 200]}).to_string(),
            400,
            "invalid_request_error",
            Some("prompt"),
        ),
        (
            json!({"model": MODEL, "prompt": "hi", "temperature": 3.0}).to_string(),
            400,
            "invalid_request_error",
            Some("temperature"),
        ),
        (
            json!({"model": MODEL, "prompt": "hi", "top_p": 0.0}).to_string(),
            400,
            "invalid_request_error",
            Some("top_p"),
        ),
        (
            json!({"model": MODEL, "prompt": "hi", "n": 9}).to_string(),
            400,
            "invalid_request_error",
            Some("n"),
        ),
        (
            json!({"model": MODEL, "prompt": "x".repeat(2 << 20)}).to_string(),
            413,
            "invalid_request_error",
            None,
        ),
    ];
    for (body, status, kind, param) in cases {
        let (st, e) = post_raw(&s, "/v1/completions", body.clone()).await;
        let head: String = body.chars().take(60).collect();
        assert_eq!(st, status, "{head}: {e}");
        assert_eq!(e["error"]["type"], kind, "{head}: {e}");
        if let Some(p) = param {
            assert_eq!(e["error"]["param"], p, "{head}: {e}");
        }
    }
    let (st, e) = post(
        &s,
        "/v1/chat/completions",
        &json!({"model": MODEL, "messages": [{"role": "wizard", "content": "hi"}]}),
    )
    .await;
    assert_eq!((st, e["error"]["param"].as_str()), (400, Some("messages")));
    let (st, e) = post(
        &s,
        "/v1/chat/completions",
        &json!({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2}),
    )
    .await;
    assert_eq!(
        (st, e["error"]["param"].as_str()),
        (400, Some("top_logprobs"))
    );

    // A full queue: one running (long), one waiting, the third gets a 429 with Retry-After.
    let long = json!({"model": MODEL, "prompt": "hello", "max_tokens": 120, "stream": true});
    let r1 = client()
        .post(format!("{}/v1/completions", s.url))
        .body(long.to_string())
        .send()
        .await
        .unwrap();
    // The first is admitted once it streams.
    let mut r1 = r1;
    assert!(r1.chunk().await.unwrap().is_some());
    let r2 = client()
        .post(format!("{}/v1/completions", s.url))
        .body(long.to_string())
        .send()
        .await
        .unwrap();
    let r3 = client()
        .post(format!("{}/v1/completions", s.url))
        .body(ok.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r3.status().as_u16(), 429);
    assert_eq!(r3.headers()["retry-after"], "1");
    let e: Value = serde_json::from_str(&r3.text().await.unwrap()).unwrap();
    assert_eq!(e["error"]["type"], "rate_limit_error");
    drop(r1);
    drop(r2);
    // Nothing else was disturbed: the server idles with every block free and answers.
    wait_idle(&s).await;
    let (st, r) = post(&s, "/v1/completions", &ok).await;
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["usage"]["completion_tokens"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_frees_its_blocks() {
    let s = start(engine_cfg()).await;
    let body = json!({"model": MODEL, "prompt": "The keeper", "max_tokens": 100, "stream": true});
    let mut r = client()
        .post(format!("{}/v1/completions", s.url))
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert!(r.chunk().await.unwrap().is_some());
    let (_, m) = get(&s, "/metrics").await;
    assert_eq!(metric(&m, "tileops_requests_running"), 1.0);
    assert!(metric(&m, "tileops_kv_blocks_used") > 0.0);
    drop(r);
    let m = wait_idle(&s).await;
    assert!(metric(&m, "tileops_generation_tokens_total") < 100.0);
    assert!(m.contains("tileops_requests_finished_total{reason=\"cancelled\"} 1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_past_the_timeout_is_cancelled() {
    let s = start_with_timeout(engine_cfg(), Some(Duration::from_millis(50))).await;
    let body = json!({"model": MODEL, "prompt": "The keeper", "max_tokens": 120, "temperature": 0});
    let (st, e) = post(&s, "/v1/completions", &body).await;
    assert_eq!(st, 504, "{e}");
    assert_eq!(e["error"]["type"], "timeout_error");
    let m = wait_idle(&s).await;
    assert!(metric(&m, "tileops_generation_tokens_total") < 120.0);
}

#[test]
fn sigterm_exits_zero() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let dir = std::env::temp_dir().join(format!("tileops-serve-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_string(&cfg()).unwrap(),
    )
    .unwrap();
    tokenizer().save(&dir.join("tokenizer.json")).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tileops-serve"))
        .args([
            "--port",
            "0",
            "--backend",
            "reference",
            "--kv-blocks",
            "32",
            "--model",
        ])
        .arg(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line.trim().rsplit("http://").next().unwrap().to_string();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let pid = child.id().to_string();
    let tail = rt.block_on(async {
        let r = client()
            .post(format!("http://{addr}/v1/completions"))
            .body(json!({"model": "deepseek-tiny", "prompt": "hi", "max_tokens": 3}).to_string())
            .send()
            .await
            .unwrap();
        let body = r.text().await.unwrap();
        assert!(body.contains("text_completion"), "{body}");
        // A stream running when SIGTERM arrives still finishes, with its [DONE].
        let mut r = client()
            .post(format!("http://{addr}/v1/completions"))
            .body(
                json!({"model": "deepseek-tiny", "prompt": "hi", "max_tokens": 40, "stream": true})
                    .to_string(),
            )
            .send()
            .await
            .unwrap();
        assert!(r.chunk().await.unwrap().is_some());
        let st = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(st.success());
        let mut tail = String::new();
        while let Some(c) = r.chunk().await.unwrap() {
            tail.push_str(std::str::from_utf8(&c).unwrap());
        }
        tail
    });
    assert!(tail.trim_end().ends_with("data: [DONE]"), "{tail}");
    let t = Instant::now();
    let code = loop {
        if let Some(c) = child.try_wait().unwrap() {
            break c;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "no exit after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(code.success(), "{code:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
