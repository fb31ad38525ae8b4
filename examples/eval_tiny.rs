//! Evaluates a trained tiny checkpoint against issue #38's targets, on the ops model:
//!
//! - **retrieval**: held-out documents (names, key pairs and codes never seen in training) of
//!   `--min-context..=--max-context` tokens (seeds from `--seed` whose documents fall outside
//!   the band are skipped), `--keys` keys each at depths spread from `--lo` of the filler to
//!   its end; each document prefilled once and every question answered greedily on a
//!   fork of the sequence. Rows: the trained indexer's top-k (f32 keys, then DeepSeek-V3.2's
//!   FP8 index cache), k random visible positions, the indexer before its warm-up, and dense
//!   attention: exact match and per-layer recall of the code's first token;
//! - **story loss**: next-token loss of grammar text of unseen seeds (`--story-tokens` tokens per
//!   text) over the positions past 4 x top-k, the trained top-k against the same weights dense.
//!
//! ```text
//! cargo run --release --example eval_tiny [-- --checkpoint models/checkpoints/tiny --docs 128]
//! ```

use anyhow::{bail, Context, Result};
use clap::Parser;
use std::path::PathBuf;
use std::time::Instant;
use tileops::ops::{Backend, ScaleFormat};
use tileops_models::deepseek::cache::IndexKeys;
use tileops_models::deepseek::config::Config;
use tileops_models::deepseek::model::{Model, Selection};
use tileops_models::engine::{check_pool, pin_thread_count, Engine};
use tileops_models::eval::{evaluate, held_out_band, selection_overlap, story_loss, Case, Report};
use tileops_models::tokenizer::Tokenizer;
use tileops_models::weights::Weights;

const BLOCK: usize = 16;

#[derive(Parser, Debug)]
#[command(about = "Evaluate a trained tiny checkpoint: long-context retrieval and story loss")]
struct Args {
    /// Checkpoint folder (config.json, model.safetensors, tokenizer.json,
    /// indexer_init.safetensors).
    #[arg(long, default_value = "models/checkpoints/tiny")]
    checkpoint: PathBuf,
    /// Held-out retrieval documents (seeds from `--seed`).
    #[arg(long, default_value_t = 128)]
    docs: u64,
    /// Keys (questions) per document.
    #[arg(long, default_value_t = 4)]
    keys: usize,
    /// Filler words per document.
    #[arg(long, default_value_t = 520)]
    words: usize,
    /// Shallowest key depth, as a fraction of the filler.
    #[arg(long, default_value_t = 0.14)]
    lo: f64,
    /// Contexts have at least this many tokens (documents outside the band are skipped).
    #[arg(long, default_value_t = 1024)]
    min_context: usize,
    /// Contexts have at most this many tokens.
    #[arg(long, default_value_t = 1152)]
    max_context: usize,
    /// First seed of the held-out documents and texts.
    #[arg(long, default_value_t = 20_000_000)]
    seed: u64,
    /// Backend of the trained rows: reference | sim.
    #[arg(long, default_value = "reference")]
    backend: String,
    /// Grammar texts (seeds from `--seed`, the training split's names) for the story loss
    /// (0: none).
    #[arg(long, default_value_t = 16)]
    stories: u64,
    /// Tokens per story text.
    #[arg(long, default_value_t = 640)]
    story_tokens: usize,
}

/// One report row over every case, printed with its time.
fn row(label: &str, engine: &mut Engine, tok: &Tokenizer, cases: &[Case]) -> Result<Report> {
    let t = Instant::now();
    let r = evaluate(engine, tok, cases)?;
    let recall: Vec<String> = (0..r.recall.len())
        .map(|l| format!("{:.1}", r.recall_percent(l)))
        .collect();
    println!(
        "  {label:<36} {:>3}/{:<3} = {:>5.1}%   recall {:>11}   [{:.1} s]",
        r.exact,
        r.questions,
        r.exact_percent(),
        recall.join("/"),
        t.elapsed().as_secs_f64()
    );
    Ok(r)
}

fn main() -> Result<()> {
    let a = Args::parse();
    let threads = pin_thread_count();
    let backend = match a.backend.as_str() {
        "reference" => Backend::Reference,
        "sim" | "tilesim" => Backend::TileSim,
        other => bail!("--backend {other}: use reference or sim"),
    };
    if a.docs == 0 || a.keys == 0 {
        bail!("--docs and --keys must be at least 1");
    }
    if !(0.0..0.95).contains(&a.lo) {
        bail!("--lo must be in [0, 0.95)");
    }
    let dir = &a.checkpoint;
    let cfg = Config::from_file(&dir.join("config.json"))
        .with_context(|| format!("{}: config.json", dir.display()))?;
    let w = Weights::load(&cfg, &dir.join("model.safetensors"))?;
    let tok = Tokenizer::from_file(&dir.join("tokenizer.json"))?;
    tok.check_fits(cfg.vocab_size)?;
    let k = cfg.index_topk;
    println!(
        "checkpoint {} ({} threads): top-{k}, {} layers",
        dir.display(),
        threads,
        cfg.n_layers
    );

    let cases = held_out_band(
        &tok,
        a.seed,
        a.docs as usize,
        a.words,
        a.keys,
        a.lo,
        a.min_context..=a.max_context,
    )?;
    let lens: Vec<usize> = cases.iter().map(|c| c.context.len()).collect();
    let (min, max) = (
        lens.iter().copied().min().unwrap_or(0),
        lens.iter().copied().max().unwrap_or(0),
    );
    let first_key = cases
        .iter()
        .flat_map(|c| c.questions.iter().map(|q| q.key_positions.start))
        .min()
        .unwrap_or(0);
    let questions: usize = cases.iter().map(|c| c.questions.len()).sum();
    println!(
        "\nretrieval: {questions} held-out questions in {} documents of {min}-{max} tokens \
         ({} keys each; the shallowest key at token {first_key}, 4 x top-k = {}); exact match \
         and the recall of the code's first token per layer",
        cases.len(),
        a.keys,
        4 * k
    );
    let longest = max + 64;
    let num_blocks = longest.div_ceil(BLOCK) * (a.keys + 1);
    check_pool(&cfg, num_blocks, BLOCK)?;
    let mut e = Engine::new(&cfg, &w, backend, num_blocks, BLOCK)?;
    let trained = row(
        &format!("trained top-{k} ({})", backend.name()),
        &mut e,
        &tok,
        &cases,
    )?;
    let mut f8 = Engine::new(&cfg, &w, backend, num_blocks, BLOCK)?;
    f8.set_index_keys(IndexKeys::Fp8(ScaleFormat::Ue8m0))?;
    let fp8 = row(
        &format!("trained top-{k}, FP8 keys ({})", backend.name()),
        &mut f8,
        &tok,
        &cases,
    )?;
    e.model.selection = Selection::Random { seed: 7 };
    row(
        &format!("{k} random positions ({})", backend.name()),
        &mut e,
        &tok,
        &cases,
    )?;
    let mut before = w.clone();
    before.replace_indexer(&cfg, &dir.join("indexer_init.safetensors"))?;
    let mut pre = Engine::new(&cfg, &before, backend, num_blocks, BLOCK)?;
    row(
        &format!("indexer before warm-up ({})", backend.name()),
        &mut pre,
        &tok,
        &cases,
    )?;
    let mut dense = Engine::new(&cfg, &w, Backend::Reference, num_blocks, BLOCK)?;
    dense.model.selection = Selection::Dense;
    let d = row("dense attention (reference)", &mut dense, &tok, &cases)?;
    println!(
        "  trained top-{k} - dense: {:+.1} points",
        trained.exact_percent() - d.exact_percent()
    );
    if let Some(o) = selection_overlap(&fp8, &trained) {
        println!(
            "  FP8 index keys kept {:.1}% of the f32 keys' selected positions (question rows, every layer)",
            100.0 * o
        );
    }

    if a.stories > 0 {
        let from = 4 * k;
        let mut m = Model::new(&cfg, &w, a.story_tokens.div_ceil(BLOCK), BLOCK)?;
        let seeds = a.seed..a.seed + a.stories;
        let t = Instant::now();
        let sparse = story_loss(&mut m, &tok, seeds.clone(), a.story_tokens, from, backend)?;
        m.selection = Selection::Dense;
        let dense = story_loss(
            &mut m,
            &tok,
            seeds,
            a.story_tokens,
            from,
            Backend::Reference,
        )?;
        println!(
            "\nstory loss: {} grammar texts (unseen seeds) of {} tokens, {} positions past {from}: \
             trained top-{k} ({}) {:.4} nats, dense {:.4}, ratio {:.4} [{:.1} s]",
            sparse.texts,
            a.story_tokens,
            sparse.positions,
            backend.name(),
            sparse.loss,
            dense.loss,
            sparse.loss / dense.loss,
            t.elapsed().as_secs_f64()
        );
    }
    Ok(())
}
