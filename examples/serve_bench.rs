//! Closed-loop load on `tileops-serve`'s HTTP API over loopback (issue #34 item 7), serving the
//! shipped trained model (models/checkpoints/tiny, the server's default; `--random-weights`:
//! the demo's larger generated model, `Config::default()`): for each backend and concurrency, 8 warm-up requests then `4 x concurrency` streaming greedy requests
//! with prompts of 32-256 tokens and `max_tokens` 32-128 from a fixed seed; prints output
//! tokens/s, TTFT and inter-token latency percentiles, and writes an SVG plot of throughput
//! against concurrency.
//!
//! ```text
//! cargo run --profile test --example serve_bench -- --concurrency 1,4,16,64 --svg docs/serving-throughput.svg
//! ```

use anyhow::{bail, Result};
use clap::Parser;
use serde_json::{json, Value};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tileops::ops::Backend;
use tileops::serve::{serve, AppState};
use tileops_models::deepseek::config::Config;
use tileops_models::engine::pin_thread_count;
use tileops_models::serving::{Engine, EngineConfig};
use tileops_models::tokenizer::Tokenizer;
use tileops_models::weights::{cache_dir, load_or_generate, Rng, Weights};

#[derive(Parser, Debug)]
struct Args {
    /// Concurrency levels.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16,64")]
    concurrency: Vec<usize>,
    /// Backends (reference, sim).
    #[arg(long, value_delimiter = ',', default_value = "reference,sim")]
    backends: Vec<String>,
    /// Requests per point = this x concurrency.
    #[arg(long, default_value_t = 4)]
    per_client: usize,
    /// Write the throughput plot here.
    #[arg(long)]
    svg: Option<std::path::PathBuf>,
    /// Tokens in one engine step at most (the chunked-prefill budget; the engine's default 256).
    #[arg(long, default_value_t = 256)]
    max_batch_tokens: usize,
    /// Serve the demo's generated random weights (`Config::default()`, seed 0, in
    /// target/tileops-models) instead of the shipped trained checkpoint.
    #[arg(long)]
    random_weights: bool,
}

/// The prompts' token ids are drawn from `0..PROMPT_IDS`.
const PROMPT_IDS: u64 = 1000;

struct Point {
    backend: String,
    concurrency: usize,
    tok_s: f64,
    ttft: (f64, f64),
    itl: (f64, f64),
}

fn pct(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// One streamed request: (TTFT, inter-token gaps, completion tokens).
async fn one(
    c: &reqwest::Client,
    url: &str,
    prompt: Vec<u32>,
    max_tokens: usize,
) -> Result<(f64, Vec<f64>, usize)> {
    let body = json!({"model": "deepseek-tiny", "prompt": prompt, "max_tokens": max_tokens,
                      "temperature": 0, "stream": true, "stream_options": {"include_usage": true}});
    let t0 = Instant::now();
    let mut r = c
        .post(format!("{url}/v1/completions"))
        .body(body.to_string())
        .send()
        .await?;
    if !r.status().is_success() {
        bail!("status {}", r.status());
    }
    let (mut buf, mut first, mut last, mut gaps, mut toks) =
        (String::new(), None, None, Vec::new(), 0);
    while let Some(chunk) = r.chunk().await? {
        buf.push_str(std::str::from_utf8(&chunk)?);
        while let Some(i) = buf.find("\n\n") {
            let ev: String = buf.drain(..i + 2).collect();
            let Some(d) = ev.trim().strip_prefix("data: ") else {
                continue;
            };
            if d == "[DONE]" {
                continue;
            }
            let v: Value = serde_json::from_str(d)?;
            if let Some(n) = v["usage"]["completion_tokens"].as_u64() {
                toks = n as usize;
                continue;
            }
            let now = Instant::now();
            match last {
                None => first = Some(now.duration_since(t0).as_secs_f64()),
                Some(l) => gaps.push(now.duration_since(l).as_secs_f64()),
            }
            last = Some(now);
        }
    }
    Ok((first.unwrap_or(f64::NAN), gaps, toks))
}

async fn run(
    url: &str,
    concurrency: usize,
    n: usize,
    seed: u64,
) -> Result<(f64, Vec<f64>, Vec<f64>, usize)> {
    let c = reqwest::Client::new();
    let mut rng = Rng(seed);
    let jobs: Vec<(Vec<u32>, usize)> = (0..n)
        .map(|_| {
            let len = 32 + (rng.next_u64() % 225) as usize;
            let p = (0..len)
                .map(|_| (rng.next_u64() % PROMPT_IDS) as u32)
                .collect();
            (p, 32 + (rng.next_u64() % 97) as usize)
        })
        .collect();
    let jobs = Arc::new(std::sync::Mutex::new(jobs));
    let t = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (c, jobs, url) = (c.clone(), jobs.clone(), url.to_string());
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            loop {
                let job = jobs.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.pop();
                let Some((p, m)) = job else { break };
                out.push(one(&c, &url, p, m).await?);
            }
            anyhow::Ok(out)
        }));
    }
    let (mut ttft, mut itl, mut toks) = (Vec::new(), Vec::new(), 0);
    for task in tasks {
        for (f, g, k) in task.await?? {
            ttft.push(f);
            itl.extend(g);
            toks += k;
        }
    }
    Ok((t.elapsed().as_secs_f64(), ttft, itl, toks))
}

fn svg(points: &[Point]) -> String {
    let (w, h, m) = (640.0, 400.0, 60.0);
    let maxc = points.iter().map(|p| p.concurrency).max().unwrap_or(1) as f64;
    let maxt = points.iter().map(|p| p.tok_s).fold(1.0, f64::max) * 1.1;
    let x = |c: usize| m + (c as f64).log2() / maxc.log2().max(1.0) * (w - 2.0 * m);
    let y = |t: f64| h - m - t / maxt * (h - 2.0 * m);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <line x1=\"{m}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n<line x1=\"{m}\" y1=\"{m}\" x2=\"{m}\" y2=\"{}\" stroke=\"black\"/>\n\
         <text x=\"{}\" y=\"{}\" text-anchor=\"middle\">concurrency (log2)</text>\n\
         <text x=\"15\" y=\"{}\" transform=\"rotate(-90 15 {})\" text-anchor=\"middle\">output tokens/s</text>\n",
        h - m, w - m, h - m, h - m, w / 2.0, h - 15.0, h / 2.0, h / 2.0
    );
    for &c in &[1usize, 4, 16, 64] {
        if c as f64 <= maxc {
            s += &format!(
                "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{c}</text>\n",
                x(c),
                h - m + 16.0
            );
        }
    }
    for k in 0..=4 {
        let t = maxt * k as f64 / 4.0;
        s += &format!(
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{t:.0}</text>\n",
            m - 4.0,
            y(t) + 4.0
        );
    }
    let mut backends: Vec<&str> = points.iter().map(|p| p.backend.as_str()).collect();
    backends.dedup();
    for (i, b) in backends.iter().enumerate() {
        let color = ["#1f77b4", "#d62728", "#2ca02c"][i % 3];
        let pts: Vec<String> = points
            .iter()
            .filter(|p| p.backend == *b)
            .map(|p| format!("{:.1},{:.1}", x(p.concurrency), y(p.tok_s)))
            .collect();
        s += &format!(
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"/>\n",
            pts.join(" ")
        );
        s += &format!(
            "<text x=\"{}\" y=\"{}\" fill=\"{color}\">{b}</text>\n",
            m + 10.0,
            m + 16.0 * (i as f64 + 1.0)
        );
    }
    s + "</svg>\n"
}

fn main() -> Result<()> {
    pin_thread_count();
    let a = Args::parse();
    let (cfg, weights, tok) = if a.random_weights {
        let (cfg, dir) = (Config::default(), cache_dir());
        let tok = Tokenizer::load_or_train(&dir.join("tokenizer.json"))?;
        (cfg.clone(), load_or_generate(&cfg, 0, &dir)?.0, tok)
    } else {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/checkpoints/tiny");
        let cfg = Config::from_file(&dir.join("config.json"))?;
        let weights = Weights::load(&cfg, &dir.join("model.safetensors"))?;
        (
            cfg,
            weights,
            Tokenizer::from_file(&dir.join("tokenizer.json"))?,
        )
    };
    tok.check_fits(cfg.vocab_size)?;
    // Prompt ids below both models' vocabularies.
    if cfg.vocab_size < PROMPT_IDS as usize {
        bail!(
            "the model's vocabulary ({}) is smaller than the prompts' {PROMPT_IDS} ids",
            cfg.vocab_size
        );
    }
    let tok = Arc::new(tok);
    let rt = tokio::runtime::Runtime::new()?;
    let mut points = Vec::new();
    println!("| backend | concurrency | requests | output tok/s | TTFT p50 / p99 (ms) | ITL p50 / p99 (ms) |");
    println!("|---|---|---|---|---|---|");
    for b in &a.backends {
        let backend = match b.as_str() {
            "reference" => Backend::Reference,
            "sim" => Backend::TileSim,
            other => bail!("unknown backend {other}"),
        };
        for &c in &a.concurrency {
            // A fresh engine per point: no prefix cache or queue carried over.
            let ec = EngineConfig {
                backend,
                max_running: 64,
                kv_blocks: 1024,
                max_waiting: 1024,
                max_batch_tokens: a.max_batch_tokens,
                ..EngineConfig::default()
            };
            let engine = Engine::spawn(&cfg, &weights, ec, tok.clone())?;
            let state = AppState::new(engine.clone(), tok.clone(), "deepseek-tiny".into(), None);
            let p = rt.block_on(async {
                let l = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
                let url = format!("http://{}", l.local_addr()?);
                let (tx, rx) = tokio::sync::oneshot::channel::<()>();
                let server = tokio::spawn(serve(l, state, async move {
                    let _ = rx.await;
                }));
                run(&url, c.min(8), 8, 1).await?;
                let (wall, mut ttft, mut itl, toks) = run(&url, c, a.per_client * c, 7).await?;
                let _ = tx.send(());
                let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
                anyhow::Ok(Point {
                    backend: b.clone(),
                    concurrency: c,
                    tok_s: toks as f64 / wall,
                    ttft: (pct(&mut ttft, 0.5), pct(&mut ttft, 0.99)),
                    itl: (pct(&mut itl, 0.5), pct(&mut itl, 0.99)),
                })
            })?;
            engine.shutdown(true);
            println!(
                "| {} | {c} | {} | {:.0} | {:.0} / {:.0} | {:.1} / {:.1} |",
                p.backend,
                a.per_client * c,
                p.tok_s,
                p.ttft.0 * 1e3,
                p.ttft.1 * 1e3,
                p.itl.0 * 1e3,
                p.itl.1 * 1e3
            );
            points.push(p);
        }
    }
    if let Some(path) = &a.svg {
        std::fs::write(path, svg(&points))?;
        println!("plot: {}", path.display());
    }
    Ok(())
}
