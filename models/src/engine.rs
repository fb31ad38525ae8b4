//! The engine: a batch of prompts of different lengths, one prefill pass over all their
//! tokens, then decode steps of one token per sequence, over the paged cache manager.

use crate::deepseek::config::Config;
use crate::deepseek::model::{AttentionCall, Batch, Model, SeqRows};
use crate::deepseek::ops::{to_vec_f32, ModelError, Result};
use crate::kv_cache::{PagedKvCache, SeqId};
use crate::weights::{Rng, Weights};
use candle_core::{Device, Tensor};
use std::time::{Duration, Instant};
use tileops_ops::{profile, Backend, SparseAttentionParams};

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

/// Top-p sampling of `logits` at `temperature` with a uniform draw `u` in `[0, 1)`.
pub fn sample_top_p(logits: &[f32], temperature: f32, top_p: f32, u: f32) -> u32 {
    let m = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut p: Vec<(usize, f32)> = logits
        .iter()
        .enumerate()
        .map(|(i, &l)| (i, ((l - m) / temperature).exp()))
        .collect();
    p.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
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
            return i as u32;
        }
    }
    p[keep - 1].0 as u32
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
    /// An engine for `cfg` with a pool of `num_blocks` blocks of `block_size`.
    pub fn new(
        cfg: &Config,
        weights: &Weights,
        backend: Backend,
        num_blocks: usize,
        block_size: usize,
    ) -> Result<Engine> {
        Ok(Engine {
            model: Model::new(cfg, weights, num_blocks, block_size)?,
            cache: PagedKvCache::new(num_blocks, block_size)?,
            backend,
        })
    }

    /// Reserves slots for `tokens[i]` in `seqs[i]` and lays out their batch.
    fn batch(&mut self, seqs: &[SeqId], tokens: &[Vec<u32>]) -> Result<Batch> {
        let mut b = Batch::default();
        for (&id, toks) in seqs.iter().zip(tokens) {
            let start = self.cache.len(id)?;
            let w = self.cache.append(id, toks.len())?;
            if let Some(c) = w.copy {
                self.model.copy_block(c, self.backend)?;
            }
            let table = self.cache.block_table(id)?.to_vec();
            let bs = self.cache.block_size();
            let slots = (0..start + toks.len())
                .map(|t| table[t / bs] as i64 * bs as i64 + (t % bs) as i64)
                .collect();
            b.seqs.push(SeqRows {
                table,
                slots,
                first_row: b.tokens.len(),
                rows: toks.len(),
            });
            b.tokens.extend_from_slice(toks);
            b.positions.extend(start..start + toks.len());
            b.slots.extend(w.slots);
        }
        Ok(b)
    }

    /// Runs the new `tokens` of `seqs` and returns each sequence's last-row logits.
    fn step(&mut self, seqs: &[SeqId], tokens: &[Vec<u32>]) -> Result<Vec<Vec<f32>>> {
        let b = self.batch(seqs, tokens)?;
        let last: Vec<usize> = b.seqs.iter().map(|s| s.first_row + s.rows - 1).collect();
        let logits = self.model.forward(&b, &last, self.backend)?;
        let v = to_vec_f32(&logits)?;
        let vocab = self.model.config().vocab_size;
        Ok(v.chunks(vocab).map(<[f32]>::to_vec).collect())
    }

    /// Prefills `prompts` and runs one decode step on scratch sequences, then frees them: the
    /// first calls compile the kernels of these shapes. Returns its wall time.
    pub fn warm_up(&mut self, prompts: &[Vec<u32>]) -> Result<Duration> {
        let t = Instant::now();
        let seqs: Vec<SeqId> = prompts.iter().map(|_| self.cache.add_sequence()).collect();
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
    /// each one is chosen. The sequences are freed at the end.
    pub fn generate(
        &mut self,
        prompts: &[Vec<u32>],
        max_new: usize,
        sampling: &Sampling,
        mut on_token: impl FnMut(usize, u32),
    ) -> Result<Generation> {
        let max_len = self.model.config().max_seq_len;
        for (i, p) in prompts.iter().enumerate() {
            if p.is_empty() {
                return Err(ModelError::Invalid(format!("prompt {i} is empty")));
            }
            if p.len() + max_new > max_len {
                return Err(ModelError::Invalid(format!(
                    "prompt {i} has {} tokens; with {max_new} new ones that exceeds max_seq_len {max_len}",
                    p.len()
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
        }
        let seqs: Vec<SeqId> = prompts.iter().map(|_| self.cache.add_sequence()).collect();
        let r = self.run(&seqs, prompts, max_new, sampling, &mut on_token);
        for &id in &seqs {
            self.cache.free(id)?;
        }
        r
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
                let tok = match sampling {
                    Sampling::Greedy => argmax(l),
                    Sampling::TopP {
                        temperature, top_p, ..
                    } => sample_top_p(l, *temperature, *top_p, rng.uniform()),
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

/// The simulator's estimated Ascend 950 time (seconds) of one sparse-attention call: the call
/// re-run on TileSim inside `tileops_ops::profile`, its launches' cost reports summed.
pub fn estimate_950(call: &AttentionCall) -> Result<f64> {
    let (r, records) = profile(|| call.run(Backend::TileSim));
    r?;
    Ok(records
        .iter()
        .filter_map(|r| r.cost.as_ref())
        .map(|c| c.seconds)
        .sum())
}

/// One decode step of sparse attention at DeepSeek-V3.2's real per-layer shape: B = 1,
/// H = 128, Dqk = 576 (latent 512 + rope 64), v_dim = 512, top-k 2048 of `context` cached
/// tokens (block 64), deterministic inputs from `seed`.
pub fn v32_attention_call(context: usize, seed: u64) -> Result<AttentionCall> {
    let (h, d, v, topk, bs) = (128, 576, 512, 2048, 64);
    if context < topk {
        return Err(ModelError::Invalid(format!(
            "context {context} < top-k {topk}"
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
    Ok(AttentionCall {
        q,
        cache,
        indices: Tensor::from_vec(indices, (1, topk), dev)?,
        table: Tensor::from_vec(table, (1, blocks), dev)?,
        // (qk_nope + qk_rope)^-0.5 = 192^-0.5 times the YaRN mscale² of factor 40.
        params: SparseAttentionParams::new(v, 0.13523),
    })
}
