//! Trains the tiny DeepSeek-V3.2-style model on CPU (candle autograd) on the repository's
//! generated text, then exports it for the ops model: `config.json`, `model.safetensors` (int8
//! experts) and `tokenizer.json` in `--out`, the loss curve as SVG, the training log.
//!
//! ```text
//! cargo run --release --example train_tiny [-- --dense 1000 --warmup 100 --sparse 400 --minutes 42]
//! ```
//!
//! Stages (models/src/train/mod.rs): dense pre-training, the indexer's dense warm-up (only the
//! indexer learns), sparse training with the top-k on. The run state (weights, AdamW moments,
//! log) is saved to `--state` every `--save-every` steps and at the end; `--resume` continues
//! it, also when `--minutes` stopped it early.

use anyhow::{bail, Context, Result};
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::time::Instant;
use tileops_models::engine::pin_thread_count;
use tileops_models::tokenizer::Tokenizer;
use tileops_models::train::batches::{CopyRuns, Phase, RunData, WindowKind};
use tileops_models::train::eval::retrieval_exact;
use tileops_models::train::model::{Mode, TrainModel};
use tileops_models::train::optim::{AdamParams, Schedule};
use tileops_models::train::{
    load_histogram, plot_losses, tiny_config, AnswerWeight, Stage, TrainConfig, Trainer,
};

#[derive(Parser, Debug)]
#[command(about = "Train the tiny DeepSeek-V3.2-style model on generated text")]
struct Args {
    /// Steps of dense pre-training.
    #[arg(long, default_value_t = 1000)]
    dense: u64,
    /// Steps of the indexer's dense warm-up.
    #[arg(long, default_value_t = 100)]
    warmup: u64,
    /// Steps of sparse training.
    #[arg(long, default_value_t = 400)]
    sparse: u64,
    /// Sequences per step.
    #[arg(long, default_value_t = 4)]
    batch: usize,
    /// Tokens per sequence.
    #[arg(long, default_value_t = 256)]
    seq_len: usize,
    /// How windows are cut: `documents` (each starts at a document sized to fit it) or
    /// `offsets` (anywhere in the stream, the first shipped run's way).
    #[arg(long, default_value = "documents", value_parser = parse_windows)]
    windows: WindowKind,
    /// Share of retrieval documents (with `--windows documents`).
    #[arg(long, default_value_t = 0.5)]
    retrieval_share: f64,
    /// Weight of answer tokens (after `<|assistant|>` through `<|end|>`) in the optimised
    /// loss (default: 1, a plain mean).
    #[arg(long)]
    answer_weight: Option<f64>,
    /// Keys per retrieval document at most (default: what the window holds, up to 6).
    #[arg(long)]
    max_keys: Option<usize>,
    /// The first this many dense steps train on random tokens repeated (the copy pattern
    /// retrieval needs) instead of text (part of `--dense`).
    #[arg(long, default_value_t = 0)]
    copy_steps: u64,
    /// After the copy steps, this share of each step's sequences are copy sequences (keeps
    /// the copy pattern while text trains).
    #[arg(long, default_value_t = 0.0)]
    copy_share: f64,
    /// How copy runs draw their tokens: `distinct` (every token of a run distinct: the copy
    /// pattern forms) or `mixed` (the first runs' alphabets, tokens repeated within a run).
    #[arg(long, default_value = "distinct", value_parser = parse_copy_runs)]
    copy_runs: CopyRuns,
    /// Train the steps from `--long-from` on at this window length (0: no long phase).
    #[arg(long, default_value_t = 0)]
    long_seq_len: usize,
    /// Sequences per step of the long phase.
    #[arg(long, default_value_t = 1)]
    long_batch: usize,
    /// The first global step of the long phase.
    #[arg(long, default_value_t = 0)]
    long_from: u64,
    /// Only write `indexer_init.safetensors` (the indexer before its warm-up) into `--out`
    /// for the run logged in its `train_log.json`, then exit.
    #[arg(long)]
    indexer_init_only: bool,
    /// Every this many steps, print the held-out retrieval exact-match of 32 short questions
    /// (0: never).
    #[arg(long, default_value_t = 50)]
    probe_every: u64,
    /// Peak learning rate of the LM stages.
    #[arg(long, default_value_t = 3e-3)]
    lr: f64,
    /// Seed of the weights and the data.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Words of generated training text.
    #[arg(long, default_value_t = 400_000)]
    words: usize,
    /// Folder of the exported checkpoint.
    #[arg(long, default_value = "models/checkpoints/tiny")]
    out: PathBuf,
    /// Folder of the run state.
    #[arg(long, default_value = "target/tileops-models/train-state")]
    state: PathBuf,
    /// Continue the run saved in `--state` (its hyper-parameters win).
    #[arg(long)]
    resume: bool,
    /// Save the state every this many steps.
    #[arg(long, default_value_t = 100)]
    save_every: u64,
    /// Stop (saving the state) after this many minutes; resume later (0 with `--resume`:
    /// only the evaluation).
    #[arg(long)]
    minutes: Option<f64>,
    /// Print a log line (losses, expert loads) every this many steps.
    #[arg(long, default_value_t = 25)]
    log_every: u64,
    /// Held-out retrieval documents of the closing evaluation.
    #[arg(long, default_value_t = 24)]
    eval_docs: usize,
    /// The evaluation's grammar stories use the Train split's names (new seeds) instead of
    /// the held-out names.
    #[arg(long)]
    eval_train_names: bool,
}

fn parse_copy_runs(s: &str) -> Result<CopyRuns, String> {
    match s {
        "distinct" => Ok(CopyRuns::Distinct),
        "mixed" => Ok(CopyRuns::Mixed),
        other => Err(format!("`{other}`: use distinct or mixed")),
    }
}

fn parse_windows(s: &str) -> Result<WindowKind, String> {
    match s {
        "documents" => Ok(WindowKind::Documents),
        "offsets" => Ok(WindowKind::Offsets),
        _ => Err(format!("`{s}`: expected `documents` or `offsets`")),
    }
}

/// The retrieval probe: held-out documents of about `words` words of filler with 2 keys.
fn probe_docs(words: usize, n: usize) -> Vec<tileops_models::data::RetrievalDoc> {
    (0..n as u64)
        .map(|i| {
            tileops_models::data::retrieval_doc(
                3_000_000 + i,
                tileops_models::data::Split::Heldout,
                words,
                2,
            )
        })
        .collect()
}

/// Writes `indexer_init.safetensors` into `out`: the indexer before its warm-up, i.e. the
/// fresh model's of the run's seed (the dense stage leaves it alone), for the demo's retrieval
/// report.
fn write_indexer_init(cfg: &TrainConfig, out: &std::path::Path) -> Result<()> {
    TrainModel::new(&cfg.model, cfg.seed, candle_core::DType::F32)?
        .export_indexer()?
        .save(&out.join("indexer_init.safetensors"))?;
    Ok(())
}

/// Greedy continuation of `prompt` by the training forward in `mode`, up to `max` tokens or
/// a token of `stop`.
fn greedy(
    m: &tileops_models::train::model::TrainModel,
    prompt: &[u32],
    max: usize,
    stop: &[u32],
    mode: Mode,
) -> Result<Vec<u32>> {
    let mut seq = prompt.to_vec();
    let v = m.cfg.vocab_size;
    let mut out = Vec::new();
    for _ in 0..max {
        let start = seq.len().saturating_sub(m.cfg.max_seq_len);
        let f = m.forward(&[seq[start..].to_vec()], mode)?;
        let rows = f.logits.dim(0)?;
        let last: Vec<f32> = f.logits.narrow(0, rows - 1, 1)?.flatten_all()?.to_vec1()?;
        let id = tileops_models::engine::argmax(&last[..v]);
        if stop.contains(&id) {
            break;
        }
        out.push(id);
        seq.push(id);
    }
    Ok(out)
}

/// Greedy samples and held-out retrieval exact-match (sparse top-k and dense), printed.
fn evaluate(
    m: &tileops_models::train::model::TrainModel,
    tok: &Tokenizer,
    docs: usize,
    train_names: bool,
) -> Result<()> {
    use tileops_models::data::{retrieval_doc, Split};
    use tileops_models::tokenizer::BOS;
    let ids = tok.special_ids()?;
    // Greedy continuations of 8 prompts (a grammar text's first 4 words), their sentences
    // (the prompt's first one included, a cut-off last one left out) scored by the parser.
    let (mut sentences, mut accepted) = (0, 0);
    for seed in 1..=8u64 {
        let text = tileops_models::data::grammar_text(900 + seed, 20);
        let p: String = text
            .split_whitespace()
            .take(4)
            .collect::<Vec<_>>()
            .join(" ");
        let prompt = tok.encode(&format!("{BOS}{p}"))?;
        let out = greedy(m, &prompt, 40, &[ids.eos], Mode::Sparse)?;
        let cont = tok.decode(&out)?;
        let a = tileops_models::data::acceptance(&format!("{p}{cont}"));
        sentences += a.sentences;
        accepted += a.accepted;
        if seed <= 3 {
            println!("sample: {p}|{}", cont.replace('\n', " / "));
        }
    }
    println!(
        "greedy continuations of 8 prompts: {accepted}/{sentences} sentences accepted by the \
         grammar parser"
    );
    // Next-token loss on held-out grammar stories of 512 tokens, past 4 x top-k: within the
    // training window (256) and beyond it.
    let from = 4 * m.cfg.index_topk;
    let spans = [(from, 256), (256, 512)];
    let mut acc = [[0f64; 2]; 2];
    let mut n = 0usize;
    let split = if train_names {
        Split::Train
    } else {
        Split::Heldout
    };
    for seed in 0..8u64 {
        let text = tileops_models::data::grammar_text_in(2_000_000 + seed, split, 600);
        let ids = tok.encode(&format!("{BOS}{text}"))?;
        if ids.len() < 513 {
            continue;
        }
        for (mi, mode) in [Mode::Sparse, Mode::Dense].into_iter().enumerate() {
            let f = m.forward(&[ids[..512].to_vec()], mode)?;
            for (si, &(a, b)) in spans.iter().enumerate() {
                let targets = candle_core::Tensor::from_slice(
                    &ids[a + 1..b + 1],
                    b - a,
                    &candle_core::Device::Cpu,
                )?;
                let logits = f.logits.narrow(0, a, b - a)?;
                let l = candle_nn::loss::cross_entropy(&logits, &targets)?;
                acc[si][mi] += l.to_scalar::<f32>()? as f64;
            }
        }
        n += 1;
    }
    for (si, &(a, b)) in spans.iter().enumerate() {
        let (s, d) = (acc[si][0] / n.max(1) as f64, acc[si][1] / n.max(1) as f64);
        println!(
            "grammar stories ({split:?} names, {n} x 512 tokens), next-token loss at positions {a}-{b}: \
             {s:.4} with the top-{}, {d:.4} dense ({:+.1}%)",
            m.cfg.index_topk,
            100.0 * (s / d - 1.0)
        );
    }
    let (mut right_sparse, mut right_dense, mut total) = (0, 0, 0);
    for d in 0..docs {
        let doc = retrieval_doc(1_000_000 + d as u64, Split::Heldout, 120, 2);
        for q in &doc.questions {
            let prompt = tok.encode(&format!("{BOS}{}\n{}", doc.context, q.query()))?;
            for (mode, right) in [
                (Mode::Sparse, &mut right_sparse),
                (Mode::Dense, &mut right_dense),
            ] {
                let out = greedy(m, &prompt, 6, &[ids.end, ids.eos], mode)?;
                if tok.decode(&out)?.trim() == q.answer {
                    *right += 1;
                }
            }
            total += 1;
        }
    }
    println!(
        "held-out retrieval ({total} questions, ~120-word contexts, 2 keys): exact match \
         {right_sparse}/{total} with the top-{}, {right_dense}/{total} dense",
        m.cfg.index_topk
    );
    Ok(())
}

/// A log line above the bar, or on stdout when the bar is hidden (not a terminal).
fn say(bar: &ProgressBar, line: String) {
    if bar.is_hidden() {
        println!("{line}");
    } else {
        bar.println(line);
    }
}

fn main() -> Result<()> {
    let threads = pin_thread_count();
    let args = Args::parse();
    if args.indexer_init_only {
        let p = args.out.join("train_log.json");
        let log: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(&p).with_context(|| p.display().to_string())?,
        )?;
        let cfg: TrainConfig = serde_json::from_value(log["config"].clone())?;
        write_indexer_init(&cfg, &args.out)?;
        println!(
            "wrote {}",
            args.out.join("indexer_init.safetensors").display()
        );
        return Ok(());
    }
    let tok = Tokenizer::train_generated().context("training the tokenizer")?;
    if args.copy_steps > args.dense {
        bail!(
            "--copy-steps {} exceeds --dense {}: the copy steps are the first dense steps",
            args.copy_steps,
            args.dense
        );
    }
    let mut tr = if args.resume {
        Trainer::resume(&args.state).context("resuming")?
    } else {
        let total = args.dense;
        let cfg = TrainConfig {
            model: tiny_config(tok.vocab_size()),
            seed: args.seed,
            words: args.words,
            batch: args.batch,
            seq_len: args.seq_len,
            dense_steps: args.dense,
            warmup_steps: args.warmup,
            sparse_steps: args.sparse,
            lr: Schedule {
                peak: args.lr,
                floor: args.lr / 10.0,
                warmup: (total / 20).max(1),
                total,
            },
            warmup_lr: 1e-3,
            adam: AdamParams::default(),
            clip: 1.0,
            balance_weight: 1e-4,
            bias_rate: 1e-3,
            windows: args.windows,
            retrieval_share: args.retrieval_share,
            max_keys: args.max_keys,
            answer_weight: match args.answer_weight {
                Some(weight) => {
                    let ids = tok.special_ids()?;
                    Some(AnswerWeight {
                        assistant: ids.assistant,
                        end: ids.end,
                        weight,
                    })
                }
                None => None,
            },
            copy_steps: args.copy_steps,
            copy_share: args.copy_share,
            copy_runs: args.copy_runs,
            phase: (args.long_seq_len > 0).then_some(Phase {
                from_step: args.long_from,
                seq_len: args.long_seq_len,
                batch: args.long_batch,
            }),
        };
        Trainer::new(cfg, threads)?
    };
    let cfg = tr.state.config.clone();
    if tr.state.threads != threads {
        eprintln!(
            "note: the run was logged with {} threads, this one has {threads}",
            tr.state.threads
        );
    }
    let words = cfg.words;
    let data = RunData::new(&tok, &cfg)?;
    if data.len() <= cfg.seq_len + 1 {
        bail!("the training text is too short: {} tokens", data.len());
    }
    println!(
        "model: {} parameters, vocab {}, {} layers ({} dense), {} experts top-{}; data: {} tokens \
         ({words} words, seed {}); {} threads",
        tr.model.param_count(),
        cfg.model.vocab_size,
        cfg.model.n_layers,
        cfg.model.n_dense_layers,
        cfg.model.n_routed_experts,
        cfg.model.n_activated_experts,
        data.len(),
        cfg.seed,
        threads
    );
    let total = cfg.total_steps();
    if args.minutes == Some(0.0) {
        evaluate(&tr.model, &tok, args.eval_docs, args.eval_train_names)?;
        return Ok(());
    }
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} {msg} [{elapsed} < {eta}]")
            .context("progress style")?,
    );
    bar.set_position(tr.state.step);
    let t0 = Instant::now();
    let first_step = tr.state.step;
    let (mut tokens, mut flops, mut secs) = (0usize, 0f64, 0f64);
    while tr.state.step < total {
        if args
            .minutes
            .is_some_and(|m| t0.elapsed().as_secs_f64() > m * 60.0)
        {
            say(
                &bar,
                "time budget reached; saving the state (resume with --resume)".into(),
            );
            break;
        }
        let step = tr.state.step;
        let (batch, seq_len) = data.batch(&cfg, step)?;
        let log = tr.step(&batch)?;
        let mode = match log.stage {
            Stage::Dense => Mode::Dense,
            Stage::Warmup => Mode::Warmup,
            Stage::Sparse => Mode::Sparse,
        };
        tokens += batch.len() * seq_len;
        flops += 3.0 * tr.model.forward_flops(batch.len(), seq_len, mode);
        secs += log.secs;
        let tps = tokens as f64 / secs;
        bar.set_message(format!(
            "{:?} lm {:.3} kl {} {:.0} tok/s {:.2} GFLOP/s",
            log.stage,
            log.lm,
            log.index_kl.map_or("-".into(), |k| format!("{k:.3}")),
            tps,
            flops / secs / 1e9
        ));
        bar.inc(1);
        if step % args.log_every == 0 || step + 1 == total {
            say(
                &bar,
                format!(
                    "step {step} {:?} lr {:.2e} lm {:.4} kl {} bal {} |g| {:.3} {:.0} tok/s",
                    log.stage,
                    log.lr,
                    log.lm,
                    log.index_kl.map_or("-".into(), |k| format!("{k:.4}")),
                    log.balance.map_or("-".into(), |b| format!("{b:.3}")),
                    log.grad_norm,
                    tps
                ),
            );
            for (i, l) in log.loads.iter().enumerate() {
                say(
                    &bar,
                    format!(
                        "  loads layer {}: {}",
                        cfg.model.n_dense_layers + i,
                        load_histogram(l)
                    ),
                );
            }
        }
        if args.probe_every > 0 && (step + 1) % args.probe_every == 0 {
            let probe_mode = match log.stage {
                Stage::Sparse => Mode::Sparse,
                _ => Mode::Dense,
            };
            let s = retrieval_exact(&tr.model, &tok, &probe_docs(100, 16), probe_mode)?;
            say(
                &bar,
                format!(
                    "  probe step {step}: held-out retrieval (~100 words, {:?}) {}/{} = {:.0}%, \
                     answer tokens {:.0}%",
                    probe_mode,
                    s.right,
                    s.total,
                    s.percent(),
                    s.token_percent()
                ),
            );
        }
        if (step + 1) % args.save_every == 0 {
            tr.save(&args.state)?;
        }
    }
    bar.finish();
    tr.save(&args.state)?;
    println!(
        "trained {} steps this run in {:.0} s: {:.0} tokens/s, {:.2} GFLOP/s (3x forward FLOPs)",
        tr.state.step - first_step,
        secs,
        tokens as f64 / secs.max(1e-9),
        flops / secs.max(1e-9) / 1e9
    );
    // The export: int8 experts, the config and the tokenizer beside them.
    std::fs::create_dir_all(&args.out)?;
    tr.model
        .export()?
        .save(&args.out.join("model.safetensors"))?;
    std::fs::write(
        args.out.join("config.json"),
        serde_json::to_string_pretty(&cfg.model)?,
    )?;
    tok.save(&args.out.join("tokenizer.json"))?;
    write_indexer_init(&cfg, &args.out)?;
    plot_losses(&tr.state.log, &args.out.join("loss.svg"))?;
    let first: Vec<f64> = tr.state.log.iter().take(20).map(|l| l.lm).collect();
    let replay = serde_json::json!({
        "config": cfg,
        "threads": tr.state.threads,
        "words": words,
        "first_losses": first,
        "steps": tr.state.step,
        "final": tr.state.log.last(),
    });
    std::fs::write(
        args.out.join("train_log.json"),
        serde_json::to_string_pretty(&replay)?,
    )?;
    println!("wrote {}", args.out.display());
    evaluate(&tr.model, &tok, args.eval_docs, args.eval_train_names)?;
    Ok(())
}
