//! The end-to-end demo: a tiny DeepSeek-V3.2-style model (by default the trained checkpoint in
//! models/checkpoints/tiny; `--random-weights` for generated weights, whose text is
//! meaningless) prefills a batch of prompts of different lengths and decodes them through the
//! tileops operators, on the Reference backend (candle) or on the tile kernels in the Ascend 950
//! simulator (TileSim).
//!
//! ```text
//! cargo run --release --example deepseek_decode [-- --backend sim --batch 4 --max-new-tokens 64]
//! ```

use anyhow::{bail, Context, Result};
use clap::Parser;
use std::io::Write;
use std::path::{Path, PathBuf};
use tileops::ops::{Backend, ScaleFormat};
use tileops_models::deepseek::cache::IndexKeys;
use tileops_models::deepseek::config::Config;
use tileops_models::engine::{
    check_pool, check_request, estimate_950, pin_thread_count, v32_attention_call, Engine, Sampling,
};
use tileops_models::progress::Progress;
use tileops_models::tokenizer::{Tokenizer, BOS};
use tileops_models::weights::{cache_dir, load_or_generate, Weights};

/// Prompts of different lengths; `--batch` takes the first N (cycling).
const PROMPTS: [&str; 4] = [
    "The keeper climbed the stairs every evening, lit the lamp and watched the ships come home.",
    "What is a block?",
    "In winter the storms were long and the nights were longer, and the keeper read books by the lamp while the wind turned to the west.",
    "The baker made a cake in the shape of the lighthouse.",
];

/// Tokens per cache block.
const BLOCK: usize = 16;

#[derive(Parser, Debug)]
#[command(about = "DeepSeek-V3.2-style decode demo on the tileops operators")]
struct Args {
    /// reference | sim (default: TILEOPS_BACKEND, else the process default).
    #[arg(long)]
    backend: Option<String>,
    /// Sequences decoded together.
    #[arg(long, default_value_t = 4)]
    batch: usize,
    /// Tokens generated per sequence.
    #[arg(long, default_value_t = 64)]
    max_new_tokens: usize,
    /// Seed of the generated weights and of the sampler.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Replaces the first prompt.
    #[arg(long)]
    prompt: Option<String>,
    /// Folder of the generated weights (default: target/tileops-models).
    #[arg(long)]
    weights: Option<PathBuf>,
    /// A tokenizer.json to use instead of the trained one.
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// Top-p nucleus for sampling.
    #[arg(long, default_value_t = 0.9)]
    top_p: f32,
    /// No progress line on stderr (it is drawn only when stderr is a terminal).
    #[arg(long)]
    quiet: bool,
    /// Today's generated random weights (`Config::default()`, `--seed`) instead of the trained
    /// checkpoint in models/checkpoints/tiny.
    #[arg(long)]
    random_weights: bool,
    /// Held-out retrieval documents per cell of the report's grid (0: no report; the report
    /// needs the trained checkpoint).
    #[arg(long, default_value_t = 2)]
    retrieval_docs: u64,
}

/// The retrieval report's grid: words of filler (about 1.9 held-out tokens a word) and the
/// key's depth in it.
const GRID_WORDS: [usize; 2] = [300, 600];
const GRID_DEPTHS: [f64; 3] = [0.1, 0.5, 0.9];

/// One row of the retrieval report: exact match and per-layer recall per grid cell, printed;
/// returns every question's answer and selections, cells merged.
fn report_row(
    label: &str,
    engine: &mut Engine,
    tok: &Tokenizer,
    cells: &[Vec<tileops_models::eval::Case>],
) -> Result<tileops_models::eval::Report> {
    let t = std::time::Instant::now();
    let mut line = format!("  {label:<34}");
    let mut all = tileops_models::eval::Report::default();
    for cases in cells {
        let r = tileops_models::eval::evaluate(engine, tok, cases)?;
        let recall: Vec<String> = (0..r.recall.len())
            .map(|l| format!("{:.0}", r.recall_percent(l)))
            .collect();
        line.push_str(&format!(
            " {:>4.0} {:>9}",
            r.exact_percent(),
            recall.join("/")
        ));
        all.answers.extend(r.answers);
        all.selected.extend(r.selected);
    }
    println!("{line}   [{:.1} s]", t.elapsed().as_secs_f64());
    Ok(all)
}

/// The retrieval report: held-out documents (names, key pairs and codes never seen in
/// training), one key each at a grid of context length x depth; each row a way of choosing
/// the positions sparse attention reads.
fn retrieval_report(
    cfg: &Config,
    weights: &Weights,
    trained: &Path,
    tok: &Tokenizer,
    backend: Backend,
    num_blocks: usize,
    docs: u64,
) -> Result<()> {
    use tileops_models::deepseek::model::Selection;
    let mut cells = Vec::new();
    let mut header = format!("  {:<34}", "");
    for (wi, &words) in GRID_WORDS.iter().enumerate() {
        for (di, &depth) in GRID_DEPTHS.iter().enumerate() {
            let seed = 5_000_000 + 1000 * (wi * GRID_DEPTHS.len() + di) as u64;
            let cases =
                tileops_models::eval::held_out_cases(tok, seed..seed + docs, words, &[depth])?;
            let avg = cases.iter().map(|c| c.context.len()).sum::<usize>() / cases.len().max(1);
            header.push_str(&format!(" {:>14}", format!("{avg}t d{depth:.1}")));
            cells.push(cases);
        }
    }
    let k = cfg.index_topk;
    println!(
        "\nretrieval: {} held-out questions per cell (names, key pairs and codes never seen in training), \
         one key at depth d of a context of t tokens; each cell: exact match % and the recall of the \
         code's first token among the positions each layer read for the question (layer 0/1 %)",
        docs
    );
    println!("{header}");
    let other = match backend {
        Backend::Reference => Backend::TileSim,
        _ => Backend::Reference,
    };
    let mut engine = Engine::new(cfg, weights, backend, num_blocks, BLOCK)?;
    let mine = report_row(
        &format!("trained top-{k} ({})", backend.name()),
        &mut engine,
        tok,
        &cells,
    )?;
    // DeepSeek-V3.2's FP8 index cache: keys (and q) padded to 128, rotated, e4m3 + ue8m0.
    let mut fp8 = Engine::new(cfg, weights, backend, num_blocks, BLOCK)?;
    fp8.set_index_keys(IndexKeys::Fp8(ScaleFormat::Ue8m0))?;
    let fp8 = report_row(
        &format!("trained top-{k}, FP8 keys ({})", backend.name()),
        &mut fp8,
        tok,
        &cells,
    )?;
    let mut check = Engine::new(cfg, weights, other, num_blocks, BLOCK)?;
    let theirs = report_row(
        &format!("trained top-{k} ({})", other.name()),
        &mut check,
        tok,
        &cells,
    )?;
    engine.model.selection = Selection::Random { seed: 7 };
    report_row(
        &format!("{k} random positions ({})", backend.name()),
        &mut engine,
        tok,
        &cells,
    )?;
    let init = trained.join("indexer_init.safetensors");
    let mut before = weights.clone();
    before.replace_indexer(cfg, &init)?;
    let mut pre = Engine::new(cfg, &before, backend, num_blocks, BLOCK)?;
    report_row(
        &format!("indexer before warm-up ({})", backend.name()),
        &mut pre,
        tok,
        &cells,
    )?;
    let mut dense = Engine::new(cfg, weights, Backend::Reference, num_blocks, BLOCK)?;
    dense.model.selection = Selection::Dense;
    report_row("dense attention (reference)", &mut dense, tok, &cells)?;
    println!(
        "  trained top-{k}: {} and {} give {} answers ({} questions)",
        backend.name(),
        other.name(),
        if mine.answers == theirs.answers {
            "identical"
        } else {
            "DIFFERENT"
        },
        mine.answers.len()
    );
    if let Some(o) = tileops_models::eval::selection_overlap(&fp8, &mine) {
        println!(
            "  FP8 index keys: {:.1}% of the f32 keys' selected positions kept (question rows, every layer)",
            100.0 * o
        );
    }
    Ok(())
}

/// Prompts in the trained model's style (its data generator's), after `<|bos|>`.
const TRAINED_PROMPTS: [&str; 4] = [
    "One day, Jonah found",
    "There was a loud owl named",
    "The next morning, the children",
    "Anna: Are you tired?",
];

fn backend(name: Option<&str>) -> Result<Backend> {
    Ok(match name {
        None => Backend::from_env()?,
        Some("reference") => Backend::Reference,
        Some("sim") | Some("tilesim") => Backend::TileSim,
        Some(other) => bail!("unknown backend `{other}`: choose reference or sim"),
    })
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() -> Result<()> {
    // Before any thread starts: candle otherwise re-reads /proc/cpuinfo on every matmul.
    let threads = pin_thread_count();
    let a = Args::parse();
    let backend = backend(a.backend.as_deref())?;
    if a.batch == 0 {
        bail!("--batch must be at least 1");
    }
    if !(a.temperature >= 0.0 && a.temperature.is_finite()) {
        bail!("--temperature must be finite and >= 0");
    }
    if !(a.top_p > 0.0 && a.top_p <= 1.0) {
        bail!("--top-p must be in (0, 1]");
    }
    let trained = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/checkpoints/tiny");
    let cfg = if a.random_weights {
        Config::default()
    } else {
        Config::from_file(&trained.join("config.json"))?
    };
    let dir = a.weights.clone().unwrap_or_else(cache_dir);
    let blocks_per_seq = cfg.max_seq_len.div_ceil(BLOCK);
    // Room for the batch twice: the warm-up's scratch sequences are freed before the run.
    let num_blocks = a.batch.saturating_mul(2 * blocks_per_seq);
    check_pool(&cfg, num_blocks, BLOCK).with_context(|| {
        format!(
            "--batch {}: the cache (2 x batch x {blocks_per_seq} blocks of {BLOCK})",
            a.batch
        )
    })?;
    let sampling = if a.temperature == 0.0 {
        Sampling::Greedy
    } else {
        Sampling::TopP {
            temperature: a.temperature,
            top_p: a.top_p,
            seed: a.seed,
        }
    };

    let tok = match (&a.tokenizer, a.random_weights) {
        (Some(f), _) => Tokenizer::from_file(f)?,
        (None, true) => Tokenizer::load_or_train(&dir.join("tokenizer.json"))?,
        (None, false) => Tokenizer::from_file(&trained.join("tokenizer.json"))?,
    };
    tok.check_fits(cfg.vocab_size)?;
    let list: &[&str] = if a.random_weights {
        &PROMPTS
    } else {
        &TRAINED_PROMPTS
    };
    let mut texts: Vec<String> = (0..a.batch)
        .map(|i| list[i % list.len()].to_string())
        .collect();
    if let Some(p) = &a.prompt {
        texts[0] = p.clone();
    }
    // The trained model saw every document after `<|bos|>`.
    let bos = if a.random_weights { "" } else { BOS };
    let prompts: Vec<Vec<u32>> = texts
        .iter()
        .map(|t| tok.encode(&format!("{bos}{t}")))
        .collect::<Result<_, _>>()?;
    // Every argument is checked before the weights load and the warm-up runs.
    check_request(&cfg, &prompts, a.max_new_tokens, &sampling).context("arguments")?;

    let t = std::time::Instant::now();
    let (weights, path) = if a.random_weights {
        load_or_generate(&cfg, a.seed, &dir)?
    } else {
        let path = trained.join("model.safetensors");
        (Weights::load(&cfg, &path)?, path)
    };
    println!(
        "model: DeepSeek-V3.2-style, dim {} x {} layers ({} dense), {} heads, MLA kv_lora {} + rope {}, \
         indexer {} heads top-{}, {} routed experts (top-{}, int8) + {} shared; vocab {} ({} used by the tokenizer)",
        cfg.dim, cfg.n_layers, cfg.n_dense_layers, cfg.n_heads, cfg.kv_lora_rank,
        cfg.qk_rope_head_dim, cfg.index_n_heads, cfg.index_topk, cfg.n_routed_experts,
        cfg.n_activated_experts, cfg.n_shared_experts, cfg.vocab_size, tok.vocab_size()
    );
    let what = if a.random_weights {
        format!("random, seed {}: the generated text is meaningless", a.seed)
    } else {
        "trained by examples/train_tiny.rs, see docs/models.md's model card".into()
    };
    println!(
        "weights: {} ({what})  [{:.0} ms]",
        path.display(),
        ms(t.elapsed())
    );

    let mut engine = Engine::new(&cfg, &weights, backend, num_blocks, BLOCK)?;
    println!(
        "backend: {}; batch {} prompts of {:?} tokens, {} new tokens each, cache {} blocks of {}; {threads} threads",
        backend.name(),
        a.batch,
        prompts.iter().map(Vec::len).collect::<Vec<_>>(),
        a.max_new_tokens,
        engine.cache.num_blocks(),
        BLOCK
    );
    let mut progress = Progress::new(!a.quiet);
    progress.show("warm-up: a prefill and a decode step on scratch sequences ...");
    let warm = engine.warm_up(&prompts).context("warm-up")?;
    progress.clear();
    println!(
        "warm-up (first calls, compiles the kernels of these shapes): {:.0} ms",
        ms(warm)
    );

    // With the progress line on, sequence 0's text streams inside it (stdout and stderr share
    // the terminal); otherwise it streams on stdout.
    let streamed = !progress.is_on();
    println!("\nsequence 0: {}", texts[0]);
    if streamed {
        print!("  ->");
        std::io::stdout().flush()?;
    }
    let prefill_tokens: usize = prompts.iter().map(Vec::len).sum();
    progress.show(&format!(
        "prefill: {prefill_tokens} tokens of {} prompts ...",
        a.batch
    ));
    let (mut seq0, mut shown, mut chosen) = (Vec::<u32>::new(), 0, 0usize);
    let start = std::time::Instant::now();
    let g = engine.generate(&prompts, a.max_new_tokens, &sampling, |seq, t| {
        chosen += 1;
        if seq == 0 {
            seq0.push(t);
        }
        let text = tok.decode(&seq0).unwrap_or_default();
        if streamed && seq == 0 && text.len() >= shown && text.is_char_boundary(shown) {
            print!("{}", &text[shown..]);
            shown = text.len();
            let _ = std::io::stdout().flush();
        }
        if seq + 1 == a.batch {
            let step = chosen / a.batch;
            progress.show(&format!(
                "decode {step}/{} steps, {chosen} tokens, {:.1} s | seq 0 ->{text}",
                a.max_new_tokens,
                start.elapsed().as_secs_f64()
            ));
        }
    })?;
    progress.clear();
    println!("{}", if streamed { "\n" } else { "" });
    for (i, toks) in g.tokens.iter().enumerate() {
        println!("[{i}] {} ->{}", texts[i], tok.decode(toks)?);
    }
    // Greedy decoding is deterministic: the other backend must give the same tokens.
    if matches!(sampling, Sampling::Greedy) {
        let other = match backend {
            Backend::Reference => Backend::TileSim,
            _ => Backend::Reference,
        };
        let t = std::time::Instant::now();
        let mut check = Engine::new(&cfg, &weights, other, num_blocks, BLOCK)?;
        let g2 = check.generate(&prompts, a.max_new_tokens, &sampling, |_, _| {})?;
        let n: usize = g.tokens.iter().map(Vec::len).sum();
        let same = g2.tokens == g.tokens;
        println!(
            "\n{} and {} greedy tokens: {} ({} sequences, {n} tokens; checked in {:.0} ms)",
            backend.name(),
            other.name(),
            if same { "identical" } else { "DIFFERENT" },
            g.tokens.len(),
            ms(t.elapsed())
        );
        if !same {
            bail!("the backends' greedy tokens differ");
        }
    }

    if !a.random_weights && a.retrieval_docs > 0 {
        retrieval_report(
            &cfg,
            &weights,
            &trained,
            &tok,
            backend,
            num_blocks,
            a.retrieval_docs,
        )?;
    }

    let tps = |n: usize, d: std::time::Duration| n as f64 / d.as_secs_f64().max(1e-12);
    println!();
    println!(
        "prefill: {} tokens in {:.1} ms = {:.0} tokens/s",
        g.prefill_tokens,
        ms(g.prefill_time),
        tps(g.prefill_tokens, g.prefill_time)
    );
    println!(
        "first decode step: {:.1} ms (reported alone: new shapes may compile kernels)",
        ms(g.first_decode_time)
    );
    println!(
        "decode: {} steps after the first, {} tokens in {:.1} ms = {:.0} tokens/s ({})",
        g.decode_steps.saturating_sub(1),
        g.decode_tokens,
        ms(g.decode_time),
        tps(g.decode_tokens, g.decode_time),
        backend.name()
    );
    println!("\nper-op wall time (prefill + decode)");
    for (name, d, calls) in engine.model.timers.report() {
        println!("  {name:<30} {:>9.1} ms  {calls:>6} calls", ms(d));
    }

    println!("\nsimulated Ascend 950, one decode step of one layer: lightning_indexer + sparse attention");
    let line = |e: tileops_models::engine::Estimate950| match e.indexer {
        Some(ix) => format!(
            "indexer {:.2} us + attention {:.2} us = {:.2} us",
            ix * 1e6,
            e.attention * 1e6,
            e.total() * 1e6
        ),
        None => format!("attention {:.2} us", e.attention * 1e6),
    };
    if let Some(call) = &engine.model.last_attention {
        let e = estimate_950(call)?;
        println!(
            "  demo shape  B={} H={} Dqk={} v_dim={} index heads {} x {} top-k {}: {}",
            call.q.dim(0)?,
            cfg.n_heads,
            cfg.kv_lora_rank + cfg.qk_rope_head_dim,
            cfg.kv_lora_rank,
            cfg.index_n_heads,
            cfg.index_head_dim,
            cfg.index_topk,
            line(e)
        );
    }
    let real = v32_attention_call(4096, a.seed)?;
    let e = estimate_950(&real)?;
    println!(
        "  V3.2 shape  B=1 context 4096, H=128 Dqk=576 v_dim=512 (f32), index heads 64 x 128 \
         FP8, top-k 2048: {} per layer, {:.2} ms for 61 layers",
        line(e),
        e.total() * 61e3
    );
    Ok(())
}
