//! `tileops-serve`: an OpenAI-compatible HTTP server (completions and chat completions, with
//! streaming) over the continuous-batching engine of `tileops_models::serving`, running the tiny
//! DeepSeek-V3.2-style model through the tileops operators. See docs/serving.md.
//!
//! ```text
//! cargo run --release --bin tileops-serve -- --port 8000
//! curl -s localhost:8000/v1/completions -H 'content-type: application/json' \
//!   -d '{"model": "deepseek-tiny", "prompt": "The keeper", "max_tokens": 16, "temperature": 0}'
//! ```

use anyhow::{bail, Context, Result};
use clap::Parser;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tileops::ops::Backend;
use tileops::serve::{serve, AppState};
use tileops_models::deepseek::config::Config;
use tileops_models::engine::pin_thread_count;
use tileops_models::serving::{Engine, EngineConfig};
use tileops_models::tokenizer::Tokenizer;
use tileops_models::weights::{cache_dir, load_or_generate, Weights};

#[derive(Parser, Debug)]
#[command(about = "OpenAI-compatible server over the tileops continuous-batching engine")]
struct Args {
    /// Model folder. A trained checkpoint is `config.json`, `model.safetensors` and
    /// `tokenizer.json` (as models/checkpoints/tiny); a folder without `model.safetensors` gets
    /// generated random weights (config.json optional: default the demo's config) and a trained
    /// tokenizer on first use, like the demo's `--random-weights`. Default: the shipped trained
    /// checkpoint, models/checkpoints/tiny.
    #[arg(long)]
    model: Option<PathBuf>,
    /// Serve generated random weights (in target/tileops-models, or the `--model` folder)
    /// instead of the trained checkpoint.
    #[arg(long)]
    random_weights: bool,
    /// Seed of the generated checkpoint (the demo's default is 0).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// The model id clients send.
    #[arg(long, default_value = "deepseek-tiny")]
    served_model_name: String,
    /// reference | sim (default: TILEOPS_BACKEND, else the process default).
    #[arg(long)]
    backend: Option<String>,
    /// Address to bind.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port to bind (0: any free port; the chosen address is printed).
    #[arg(long, default_value_t = 8000)]
    port: u16,
    /// Sequences in one engine step at most.
    #[arg(long, default_value_t = 16)]
    max_running: usize,
    /// Blocks in the KV pool.
    #[arg(long, default_value_t = 256)]
    kv_blocks: usize,
    /// Tokens per KV block.
    #[arg(long, default_value_t = 16)]
    block_size: usize,
    /// Tokens in one engine step at most (the chunked-prefill budget).
    #[arg(long, default_value_t = 256)]
    max_batch_tokens: usize,
    /// New requests queued at most; past it requests get a 429.
    #[arg(long, default_value_t = 256)]
    max_waiting: usize,
    /// Longest sequence (prompt + generated); capped at the model's max_seq_len.
    #[arg(long)]
    max_model_len: Option<usize>,
    /// Turn off prefix caching (sharing full prompt blocks between requests).
    #[arg(long)]
    no_prefix_caching: bool,
    /// Seconds a request may run before it is cancelled (0: no limit).
    #[arg(long, default_value_t = 600)]
    request_timeout: u64,
    /// Seconds to let running requests finish after SIGINT/SIGTERM before cancelling them.
    #[arg(long, default_value_t = 10)]
    shutdown_grace: u64,
}

fn backend(name: Option<&str>) -> Result<Backend> {
    Ok(match name {
        None => Backend::from_env()?,
        Some("reference") => Backend::Reference,
        Some("sim") | Some("tilesim") => Backend::TileSim,
        Some(other) => bail!("unknown backend `{other}`: choose reference or sim"),
    })
}

async fn signal() {
    let int = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = int => {},
                    _ = term.recv() => {},
                }
            }
            Err(_) => {
                let _ = int.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = int.await;
    }
}

fn main() -> Result<()> {
    // Before any thread starts: candle otherwise re-reads /proc/cpuinfo on every matmul.
    pin_thread_count();
    let a = Args::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .init();
    let backend = backend(a.backend.as_deref())?;
    let trained = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models/checkpoints/tiny");
    let dir = match (&a.model, a.random_weights) {
        (Some(d), _) => d.clone(),
        (None, true) => cache_dir(),
        (None, false) => trained,
    };
    let cfg_file = dir.join("config.json");
    let cfg = if cfg_file.exists() {
        Config::from_file(&cfg_file)?
    } else {
        Config::default()
    };
    let checkpoint = dir.join("model.safetensors");
    let (tok, weights, path) = if checkpoint.exists() && !a.random_weights {
        let tok = Tokenizer::from_file(&dir.join("tokenizer.json"))?;
        let w = Weights::load(&cfg, &checkpoint)?;
        (tok, w, checkpoint)
    } else {
        let tok = Tokenizer::load_or_train(&dir.join("tokenizer.json"))?;
        let (w, path) = load_or_generate(&cfg, a.seed, &dir)
            .with_context(|| format!("loading the checkpoint in {}", dir.display()))?;
        (tok, w, path)
    };
    tok.check_fits(cfg.vocab_size)?;
    // A tokenizer with the trained model's special tokens ends a sequence at `<|eos|>`.
    let eos_token = tok.special_ids().ok().map(|s| s.eos);
    let engine_cfg = EngineConfig {
        kv_blocks: a.kv_blocks,
        block_size: a.block_size,
        max_running: a.max_running,
        max_batch_tokens: a.max_batch_tokens,
        max_waiting: a.max_waiting,
        max_model_len: a.max_model_len.unwrap_or(cfg.max_seq_len),
        eos_token,
        backend,
        dense_prefill: false,
        batch_invariant: true,
        prefix_caching: !a.no_prefix_caching,
    };
    let tok = Arc::new(tok);
    let engine = Engine::spawn(&cfg, &weights, engine_cfg, tok.clone())?;
    drop(weights);
    tracing::info!(
        checkpoint = %path.display(),
        backend = ?backend,
        kv_blocks = a.kv_blocks,
        max_model_len = engine.config().max_model_len,
        "engine started"
    );
    let timeout = (a.request_timeout > 0).then(|| Duration::from_secs(a.request_timeout));
    let state = AppState::new(engine.clone(), tok, a.served_model_name.clone(), timeout);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let grace = Duration::from_secs(a.shutdown_grace);
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind((a.host.as_str(), a.port))
            .await
            .with_context(|| format!("binding {}:{}", a.host, a.port))?;
        let addr = listener.local_addr()?;
        println!("tileops-serve listening on http://{addr}");
        tracing::info!(%addr, model = %a.served_model_name, "listening");
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let eng = engine.clone();
        let server = tokio::spawn(serve(listener, state, async move {
            signal().await;
            tracing::info!("shutdown signal: draining");
            eng.stop_accepting();
            let _ = stop_tx.send(());
        }));
        // After the signal: running requests get `grace` to finish, then are cancelled.
        let _ = stop_rx.await;
        let drained = tokio::time::timeout(grace, server).await;
        if drained.is_err() {
            tracing::warn!("grace period over: cancelling the running requests");
        }
        tokio::task::spawn_blocking(move || engine.shutdown(true)).await?;
        anyhow::Ok(())
    })?;
    rt.shutdown_timeout(Duration::from_secs(1));
    tracing::info!("stopped");
    Ok(())
}
