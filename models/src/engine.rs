//! The engine: a batch of prompts of different lengths, one prefill pass over all their
//! tokens, then decode steps of one token per sequence, over the paged cache manager.

use crate::batch::{Batch, StepRows};
use crate::deepseek::config::Config;
use crate::deepseek::indexer::IndexerCall;
use crate::deepseek::model::{AttentionCall, Model};
use crate::deepseek::ops::to_vec_f32;
use crate::error::{ModelError, Result};
use crate::kv_cache::{PagedKvCache, SeqId};
use crate::weights::{Rng, Weights};
use candle_core::{Device, Tensor};
use std::time::{Duration, Instant};
use tileops_ops::{
    index_cache_append, profile, quantize_index_q, scales_to_f32, Backend, Fp8Conversion,
    IndexKeyCache, LightningIndexerParams, ScaleFormat, SparseAttentionParams,
};

/// How the next token is chosen.
#[derive(Debug, Clone)]
pub enum Sampling {
    /// The largest logit (the lowest id on a tie).
    Greedy,
    /// Seeded sampling from `softmax(logits / temperature)` cut to the top-p nucleus.
    TopP {
        /// Temperature (> 0).
        temperature: f32,
        /// Nucleus mass in `(0, 1]`.
        top_p: f32,
        /// The sampler's seed.
        seed: u64,
    },
    /// Given tokens (`[sequence][step]`), e.g. to replay another run's choices.
    Forced(Vec<Vec<u32>>),
}

/// What a generation did and how long it took.
#[derive(Debug, Clone, Default)]
pub struct Generation {
    /// The generated tokens of each sequence.
    pub tokens: Vec<Vec<u32>>,
    /// The logits each token was chosen from (`[step][sequence]`).
    pub logits: Vec<Vec<Vec<f32>>>,
    /// Prompt tokens prefilled.
    pub prefill_tokens: usize,
    /// The prefill's wall time.
    pub prefill_time: Duration,
    /// Decode forward passes (steps) and the tokens they produced.
    pub decode_steps: usize,
    /// Tokens produced by decode steps after the first.
    pub decode_tokens: usize,
    /// Wall time of the decode steps after the first.
    pub decode_time: Duration,
    /// Wall time of the first decode step (its shapes may compile kernels).
    pub first_decode_time: Duration,
}

/// Greedy answers to questions about one context ([`Engine::answer_questions`]).
#[derive(Debug, Clone, Default)]
pub struct Answers {
    /// Each question's answer tokens (the stop token left out).
    pub tokens: Vec<Vec<u32>>,
    /// Per question, per layer: the positions that layer's sparse attention read for the
    /// question's last row (the row that chooses the first answer token); empty for a layer
    /// that took the dense prefill.
    pub selected: Vec<Vec<Vec<i32>>>,
}

/// Pins candle's CPU thread count for this process: sets `RAYON_NUM_THREADS` to the number of
/// physical cores (candle's own default) unless it is already set, and returns the count in
/// force. Without it candle 0.11 re-derives the count on every CPU matmul by reading and
/// parsing `/proc/cpuinfo` (about 0.2 ms a call on a loaded 2-core VM: more than a whole
/// decode-shape matmul), which taxes the Reference backend, made of candle matmuls, far more
/// than TileSim. The variable also sizes rayon's global pool, which the simulator uses.
///
/// Call it first thing in `main`, before any other thread starts (it writes the process
/// environment).
pub fn pin_thread_count() -> usize {
    const VAR: &str = "RAYON_NUM_THREADS";
    if let Some(n) = std::env::var(VAR)
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
    {
        return n;
    }
    let n = num_cpus::get_physical().max(1);
    std::env::set_var(VAR, n.to_string());
    n
}

/// The greedy choice: the largest logit, the lowest id on a tie.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = i;
        }
    }
    best as u32
}

/// Top-p sampling of `logits` at `temperature` with a uniform draw `u` in `[0, 1)`. Errors
/// (naming the argument) on empty or non-finite logits, a temperature that is not finite and
/// positive, `top_p` outside `(0, 1]` and `u` outside `[0, 1)`.
pub fn sample_top_p(logits: &[f32], temperature: f32, top_p: f32, u: f32) -> Result<u32> {
    let bad = |what: &str| Err(ModelError::Invalid(format!("sample_top_p: {what}")));
    if logits.is_empty() {
        return bad("logits must not be empty");
    }
    if let Some(i) = logits.iter().position(|l| !l.is_finite()) {
        return bad(&format!("logits[{i}] = {} is not finite", logits[i]));
    }
    if !(temperature.is_finite() && temperature > 0.0) {
        return bad(&format!(
            "temperature must be finite and > 0 (got {temperature})"
        ));
    }
    if !(top_p > 0.0 && top_p <= 1.0) {
        return bad(&format!("top_p must be in (0, 1] (got {top_p})"));
    }
    if !(0.0..1.0).contains(&u) {
        return bad(&format!("u must be in [0, 1) (got {u})"));
    }
    let m = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut p: Vec<(usize, f32)> = logits
        .iter()
        .enumerate()
        .map(|(i, &l)| (i, ((l - m) / temperature).exp()))
        .collect();
    p.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    // The largest term is e^0 = 1, so the total is in [1, len] and finite.
    let total: f32 = p.iter().map(|x| x.1).sum();
    let mut keep = 0;
    let mut mass = 0.0;
    while keep < p.len() {
        mass += p[keep].1 / total;
        keep += 1;
        if mass >= top_p {
            break;
        }
    }
    let target = u * mass * total;
    let mut acc = 0.0;
    for &(i, w) in &p[..keep] {
        acc += w;
        if acc > target {
            return Ok(i as u32);
        }
    }
    // `keep >= 1`: the loop ran at least once on non-empty logits.
    Ok(p[keep.max(1) - 1].0 as u32)
}

/// Longest context [`v32_attention_call`] builds (V3.2's 128K tokens): its cache tensor is
/// `context x 576` f32.
pub const MAX_V32_CONTEXT: usize = 128 * 1024;

/// Checks a cache pool for `cfg` without making its tensors, and returns its (empty)
/// manager: the manager's limits ([`crate::kv_cache::MAX_SLOTS`]), and each layer's cache
/// tensor (`num_blocks x block_size x` the latent row or the indexer key) at most
/// [`tileops_ops::limits::MAX_ELEMENTS`] elements, the most an op's tensor argument may have.
pub fn check_pool(cfg: &Config, num_blocks: usize, block_size: usize) -> Result<PagedKvCache> {
    let cache = PagedKvCache::new(num_blocks, block_size)?;
    let row = (cfg.kv_lora_rank + cfg.qk_rope_head_dim).max(cfg.index_head_dim);
    if cache
        .capacity()
        .checked_mul(row)
        .is_none_or(|n| n > tileops_ops::limits::MAX_ELEMENTS)
    {
        return Err(ModelError::Invalid(format!(
            "a cache of {num_blocks} blocks x {block_size} slots x {row} values exceeds the \
             {} elements a tensor argument may have",
            tileops_ops::limits::MAX_ELEMENTS
        )));
    }
    Ok(cache)
}

/// Checks a generation request against `cfg` before anything runs: every prompt non-empty
/// with ids below `vocab_size`, `prompt.len() + max_new <= max_seq_len` (checked, so a huge
/// `max_new` is an error, not a wrap), valid sampling parameters, and forced tokens covering
/// every sequence and step with ids below `vocab_size`. [`Engine::generate`] calls it; the
/// demo calls it before its warm-up.
pub fn check_request(
    cfg: &Config,
    prompts: &[Vec<u32>],
    max_new: usize,
    sampling: &Sampling,
) -> Result<()> {
    let (max_len, vocab) = (cfg.max_seq_len, cfg.vocab_size);
    if prompts.is_empty() {
        return Err(ModelError::Invalid("no prompt to generate from".into()));
    }
    for (i, p) in prompts.iter().enumerate() {
        if p.is_empty() {
            return Err(ModelError::Invalid(format!("prompt {i} is empty")));
        }
        if p.len().checked_add(max_new).is_none_or(|n| n > max_len) {
            return Err(ModelError::Invalid(format!(
                "prompt {i} has {} tokens; with {max_new} new ones that exceeds max_seq_len {max_len}",
                p.len()
            )));
        }
        if let Some(t) = p.iter().find(|&&t| t as usize >= vocab) {
            return Err(ModelError::Invalid(format!(
                "prompt {i}: token {t} is outside the vocabulary of {vocab}"
            )));
        }
    }
    if let Sampling::TopP {
        temperature, top_p, ..
    } = sampling
    {
        if !(temperature.is_finite() && *temperature > 0.0 && *top_p > 0.0 && *top_p <= 1.0) {
            return Err(ModelError::Invalid(format!(
                "sampling needs a finite temperature > 0 (got {temperature}) and top_p in (0, 1] (got {top_p})"
            )));
        }
    }
    if let Sampling::Forced(f) = sampling {
        if f.len() < prompts.len() || f.iter().any(|s| s.len() < max_new) {
            return Err(ModelError::Invalid(
                "forced tokens must cover every sequence and step".into(),
            ));
        }
        for (i, s) in f.iter().enumerate() {
            if let Some(t) = s.iter().find(|&&t| t as usize >= vocab) {
                return Err(ModelError::Invalid(format!(
                    "forced tokens of sequence {i}: token {t} is outside the vocabulary of {vocab}"
                )));
            }
        }
    }
    Ok(())
}

/// The engine.
pub struct Engine {
    /// The model.
    pub model: Model,
    /// The cache manager.
    pub cache: PagedKvCache,
    /// The backend of every op call.
    pub backend: Backend,
}

impl Engine {
    /// An engine for `cfg` with a pool of `num_blocks` blocks of `block_size`, checked by
    /// [`check_pool`] before any cache tensor is made.
    pub fn new(
        cfg: &Config,
        weights: &Weights,
        backend: Backend,
        num_blocks: usize,
        block_size: usize,
    ) -> Result<Engine> {
        let cache = check_pool(cfg, num_blocks, block_size)?;
        Ok(Engine {
            model: Model::new(cfg, weights, num_blocks, block_size)?,
            cache,
            backend,
        })
    }

    /// Stores the indexer's keys as `keys` (f32, or DeepSeek-V3.2's FP8 index cache): every
    /// layer's caches are made anew, so it is allowed only while nothing is cached.
    ///
    /// # Errors
    /// [`ModelError::Invalid`] while a sequence or a retained block holds cache rows, or for
    /// FP8 keys of a model whose `index_head_dim` is past 128.
    pub fn set_index_keys(&mut self, keys: crate::deepseek::cache::IndexKeys) -> Result<()> {
        if self.cache.sequences().next().is_some()
            || self.cache.free_blocks() != self.cache.num_blocks()
        {
            return Err(ModelError::Invalid(
                "the index-key format changes only while nothing is cached".into(),
            ));
        }
        self.model.set_index_keys(keys)
    }

    /// `n` new sequences, or none (the ones made are freed) on an error.
    fn add_sequences(&mut self, n: usize) -> Result<Vec<SeqId>> {
        let mut seqs = Vec::with_capacity(n);
        for _ in 0..n {
            match self.cache.add_sequence() {
                Ok(id) => seqs.push(id),
                Err(e) => {
                    for id in seqs {
                        self.cache.free(id)?;
                    }
                    return Err(e.into());
                }
            }
        }
        Ok(seqs)
    }

    /// Reserves slots for `tokens[i]` in `seqs[i]` and lays out their batch.
    fn batch(&mut self, seqs: &[SeqId], tokens: &[Vec<u32>]) -> Result<Batch> {
        let mut parts = Vec::with_capacity(seqs.len());
        for (&id, toks) in seqs.iter().zip(tokens) {
            let start = self.cache.len(id)?;
            let w = self.cache.append(id, toks.len())?;
            if let Some(c) = w.copy {
                self.model.copy_block(c, self.backend)?;
            }
            parts.push(StepRows {
                seq: id,
                start,
                tokens: toks,
            });
        }
        Ok(self.cache.batch(&parts)?)
    }

    /// Runs the new `tokens` of `seqs` and returns each sequence's last-row logits.
    fn step(&mut self, seqs: &[SeqId], tokens: &[Vec<u32>]) -> Result<Vec<Vec<f32>>> {
        let b = self.batch(seqs, tokens)?;
        let last = b.last_rows();
        let logits = self.model.forward(&b, &last, self.backend)?;
        let v = to_vec_f32(&logits)?;
        let vocab = self.model.config().vocab_size;
        Ok(v.chunks(vocab).map(<[f32]>::to_vec).collect())
    }

    /// Prefills `prompts` and runs one decode step on scratch sequences, then frees them: the
    /// first calls compile the kernels of these shapes. Returns its wall time. The prompts are
    /// checked first ([`check_request`] with one new token).
    pub fn warm_up(&mut self, prompts: &[Vec<u32>]) -> Result<Duration> {
        check_request(self.model.config(), prompts, 1, &Sampling::Greedy)?;
        let t = Instant::now();
        let seqs = self.add_sequences(prompts.len())?;
        let r = self.step(&seqs, prompts).and_then(|l| {
            let next: Vec<Vec<u32>> = l.iter().map(|l| vec![argmax(l)]).collect();
            self.step(&seqs, &next)
        });
        for id in seqs {
            self.cache.free(id)?;
        }
        r?;
        self.model.timers.reset();
        Ok(t.elapsed())
    }

    /// Generates `max_new` tokens for every prompt, calling `on_token(sequence, token)` as
    /// each one is chosen. The request is checked first ([`check_request`]); a step whose
    /// logits are not finite is an error. The sequences are freed at the end, also on an error.
    pub fn generate(
        &mut self,
        prompts: &[Vec<u32>],
        max_new: usize,
        sampling: &Sampling,
        mut on_token: impl FnMut(usize, u32),
    ) -> Result<Generation> {
        check_request(self.model.config(), prompts, max_new, sampling)?;
        let seqs = self.add_sequences(prompts.len())?;
        let r = self.run(&seqs, prompts, max_new, sampling, &mut on_token);
        for &id in &seqs {
            self.cache.free(id)?;
        }
        r
    }

    /// Greedy answers to `questions` about `context`, the context computed once: it is
    /// prefilled in one sequence, every question continues on a fork of that sequence (sharing
    /// its blocks; the partly filled last one is copied on write), and all questions decode
    /// together, each for at most `max_new` tokens or until a token of `stop` (left out). Each
    /// question is checked with the context as one prompt ([`check_request`]); the sequences
    /// are freed at the end, also on an error.
    pub fn answer_questions(
        &mut self,
        context: &[u32],
        questions: &[Vec<u32>],
        max_new: usize,
        stop: &[u32],
    ) -> Result<Answers> {
        if context.is_empty() {
            return Err(ModelError::Invalid("the context is empty".into()));
        }
        if questions.is_empty() {
            return Err(ModelError::Invalid("no question to answer".into()));
        }
        for (i, q) in questions.iter().enumerate() {
            if q.is_empty() {
                return Err(ModelError::Invalid(format!("question {i} is empty")));
            }
            let whole: Vec<u32> = context.iter().chain(q).copied().collect();
            check_request(self.model.config(), &[whole], max_new, &Sampling::Greedy)?;
        }
        let mut seqs = self.add_sequences(1)?;
        let r = self.answer_on(&mut seqs, context, questions, max_new, stop);
        for id in seqs {
            self.cache.free(id)?;
        }
        r
    }

    fn answer_on(
        &mut self,
        seqs: &mut Vec<SeqId>,
        context: &[u32],
        questions: &[Vec<u32>],
        max_new: usize,
        stop: &[u32],
    ) -> Result<Answers> {
        self.step(&seqs[..1], &[context.to_vec()])?;
        let mut forks = Vec::with_capacity(questions.len());
        for _ in questions {
            let f = self.cache.fork(seqs[0])?;
            seqs.push(f);
            forks.push(f);
        }
        let b = self.batch(&forks, questions)?;
        let last = b.last_rows();
        let logits = to_vec_f32(&self.model.forward(&b, &last, self.backend)?)?;
        let mut ans = Answers {
            tokens: vec![Vec::new(); questions.len()],
            selected: vec![Vec::new(); questions.len()],
        };
        for idx in &self.model.last_indices {
            let rows: Vec<Vec<i32>> = match idx {
                Some(t) => t.to_vec2::<i32>()?,
                None => Vec::new(),
            };
            for (q, &r) in last.iter().enumerate() {
                ans.selected[q].push(rows.get(r).cloned().unwrap_or_default());
            }
        }
        let vocab = self.model.config().vocab_size;
        let mut live: Vec<usize> = (0..questions.len()).collect();
        let mut rows: Vec<Vec<f32>> = logits.chunks(vocab).map(<[f32]>::to_vec).collect();
        for step in 0..max_new {
            let mut next = Vec::new();
            let mut still = Vec::new();
            for (&q, l) in live.iter().zip(&rows) {
                let t = argmax(l);
                if stop.contains(&t) {
                    continue;
                }
                ans.tokens[q].push(t);
                next.push(vec![t]);
                still.push(q);
            }
            live = still;
            if live.is_empty() || step + 1 == max_new {
                break;
            }
            let ids: Vec<SeqId> = live.iter().map(|&q| forks[q]).collect();
            rows = self.step(&ids, &next)?;
        }
        Ok(ans)
    }

    fn run(
        &mut self,
        seqs: &[SeqId],
        prompts: &[Vec<u32>],
        max_new: usize,
        sampling: &Sampling,
        on_token: &mut impl FnMut(usize, u32),
    ) -> Result<Generation> {
        let mut g = Generation {
            tokens: vec![Vec::new(); prompts.len()],
            prefill_tokens: prompts.iter().map(Vec::len).sum(),
            ..Generation::default()
        };
        let mut rng = match sampling {
            Sampling::TopP { seed, .. } => Rng(*seed),
            _ => Rng(0),
        };
        let t = Instant::now();
        let mut logits = self.step(seqs, prompts)?;
        g.prefill_time = t.elapsed();
        for step in 0..max_new {
            let mut next = Vec::with_capacity(seqs.len());
            for (i, l) in logits.iter().enumerate() {
                if let Some(j) = l.iter().position(|v| !v.is_finite()) {
                    return Err(ModelError::Invalid(format!(
                        "step {step}: logit {j} of sequence {i} is {}, not finite",
                        l[j]
                    )));
                }
                let tok = match sampling {
                    Sampling::Greedy => argmax(l),
                    Sampling::TopP {
                        temperature, top_p, ..
                    } => sample_top_p(l, *temperature, *top_p, rng.uniform())?,
                    Sampling::Forced(f) => f[i][step],
                };
                on_token(i, tok);
                g.tokens[i].push(tok);
                next.push(vec![tok]);
            }
            g.logits.push(std::mem::take(&mut logits));
            if step + 1 == max_new {
                break;
            }
            let t = Instant::now();
            logits = self.step(seqs, &next)?;
            if g.decode_steps == 0 {
                g.first_decode_time = t.elapsed();
            } else {
                g.decode_time += t.elapsed();
                g.decode_tokens += seqs.len();
            }
            g.decode_steps += 1;
        }
        Ok(g)
    }
}

/// The simulator's estimated Ascend 950 time of one layer's decode-step attention: the
/// `lightning_indexer` call that chose the positions (when the indexer chose them) and the
/// sparse-attention call, in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate950 {
    /// The indexer's scores and top-k (`None` when the report's baselines chose).
    pub indexer: Option<f64>,
    /// Sparse attention over the kept positions.
    pub attention: f64,
}

impl Estimate950 {
    /// Indexer + attention.
    pub fn total(&self) -> f64 {
        self.indexer.unwrap_or(0.0) + self.attention
    }
}

/// The summed cost reports (seconds) of the launches `f` makes on TileSim inside
/// `tileops_ops::profile`.
fn profiled_seconds<T>(f: impl FnOnce() -> Result<T>) -> Result<f64> {
    let (r, records) = profile(f);
    r?;
    Ok(records
        .iter()
        .filter_map(|r| r.cost.as_ref())
        .map(|c| c.seconds)
        .sum())
}

/// The simulator's estimated Ascend 950 time of `call` and of the indexer call that chose its
/// positions: each re-run on TileSim inside `tileops_ops::profile`, its launches' cost reports
/// summed.
pub fn estimate_950(call: &AttentionCall) -> Result<Estimate950> {
    let indexer = match &call.indexer {
        Some(c) => Some(profiled_seconds(|| c.run(Backend::TileSim))?),
        None => None,
    };
    Ok(Estimate950 {
        indexer,
        attention: profiled_seconds(|| call.run(Backend::TileSim))?,
    })
}

/// One decode step of one layer at DeepSeek-V3.2's real per-layer shape: B = 1. Sparse
/// attention with H = 128, Dqk = 576 (latent 512 + rope 64), v_dim = 512, top-k 2048 of
/// `context` cached tokens (block 64), after the lightning indexer as V3.2 runs it (64 index
/// heads of D = 128, FP8 e4m3 keys with ue8m0 scales and FP8 q, top-k 2048 of the same
/// context); deterministic inputs from `seed`. `context` must be in
/// `2048..=`[`MAX_V32_CONTEXT`].
pub fn v32_attention_call(context: usize, seed: u64) -> Result<AttentionCall> {
    let (h, d, v, topk, bs) = (128, 576, 512, 2048, 64);
    if !(topk..=MAX_V32_CONTEXT).contains(&context) {
        return Err(ModelError::Invalid(format!(
            "context {context} must be in {topk}..={MAX_V32_CONTEXT} (top-k {topk}, at most V3.2's 128K tokens)"
        )));
    }
    let dev = &Device::Cpu;
    let mut rng = Rng(seed);
    let blocks = context.div_ceil(bs);
    let mut unit = |n: usize| -> Vec<f32> { (0..n).map(|_| 2.0 * rng.uniform() - 1.0).collect() };
    let q = Tensor::from_vec(unit(h * d), (1, h, d), dev)?;
    let cache = Tensor::from_vec(unit(blocks * bs * d), (blocks, bs, d), dev)?;
    // Every other position up to 2 * top-k, the rest of the context unread.
    let indices: Vec<i32> = (0..topk as i32).map(|i| (2 * i) % context as i32).collect();
    let table: Vec<i32> = (0..blocks as i32).rev().collect();
    let table = Tensor::from_vec(table, (1, blocks), dev)?;
    // The indexer: 64 heads of 128, its keys quantised into an FP8 cache on the way in.
    let (ih, id) = (64, 128);
    let keys = IndexKeyCache::zeros_fp8(blocks, bs, id, ScaleFormat::Ue8m0, dev)?;
    let k = Tensor::from_vec(unit(blocks * bs * id), (blocks * bs, id), dev)?;
    let slots = Tensor::arange(0i64, (blocks * bs) as i64, dev)?;
    index_cache_append(
        &keys,
        &k,
        &slots,
        Fp8Conversion::default(),
        Some(Backend::Reference),
    )?;
    let qi = Tensor::from_vec(unit(ih * id), (1, ih, id), dev)?;
    let (qi, qs) = quantize_index_q(&qi, ScaleFormat::Ue8m0, Fp8Conversion::default())?;
    let w = Tensor::from_vec(unit(ih), (1, ih), dev)?;
    let weights = (w * scales_to_f32(&qs)?.squeeze(2)?)?;
    let indexer = IndexerCall {
        q: qi,
        weights,
        cache: keys,
        table: table.clone(),
        context_lens: Tensor::from_vec(vec![context as i32], 1, dev)?,
        params: LightningIndexerParams::new(topk),
    };
    Ok(AttentionCall {
        q,
        cache,
        indices: Tensor::from_vec(indices, (1, topk), dev)?,
        table,
        // (qk_nope + qk_rope)^-0.5 = 192^-0.5 times the YaRN mscale² of factor 40.
        params: SparseAttentionParams::new(v, 0.13523),
        indexer: Some(indexer),
    })
}
