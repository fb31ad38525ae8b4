//! Training the tiny DeepSeek-V3.2-style model on CPU with candle's autograd.
//!
//! The custom ops have no backward, so [`model::TrainModel`] runs the inference model's math as
//! plain differentiable candle ops (MLA non-absorbed, the indexer, dense MLP, MoE), and the
//! trained weights are exported under the loader's names (int8 experts) to run through the ops.
//!
//! The schedule follows DeepSeek-V3.2 (A5-FACTS §5) after a dense pre-training stage the tiny
//! model needs: (1) **dense**: every parameter but the indexer learns the language-model loss
//! with dense causal attention; (2) **warm-up**: dense attention kept, only the indexer learns,
//! by the KL from the main attention (summed over heads, L1-normalised) to its softmax; (3)
//! **sparse**: every query attends to the indexer's top-k, all parameters learn, the indexer's
//! KL runs over the selected set and its input is detached. MoE balancing is DeepSeek-V3's:
//! the router bias moves by `bias_rate` against each expert's load after every step, plus a
//! small sequence-wise balance loss.

pub mod batches;
pub mod eval;
pub mod model;
pub mod optim;

use crate::deepseek::config::Config;
use crate::error::ModelError;
use crate::weights::WeightError;
use batches::CopyRuns;
use candle_core::{DType, Device, Tensor};
use model::{is_indexer, is_router_bias, Mode, TrainModel};
use optim::{clip_scale, grad_norm, AdamParams, AdamW, Schedule};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

/// A training error.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// A tensor operation failed.
    #[error("train: tensor: {0}")]
    Candle(Box<candle_core::Error>),
    /// The model code failed.
    #[error("train: {0}")]
    Model(Box<ModelError>),
    /// Weights could not be read, written or quantised.
    #[error("train: {0}")]
    Weights(Box<WeightError>),
    /// An operator failed (quantisation).
    #[error("train: {0}")]
    Op(Box<tileops_ops::OpError>),
    /// A file could not be read or written.
    #[error("train: {path}: {msg}")]
    Io {
        /// The file.
        path: String,
        /// What went wrong.
        msg: String,
    },
    /// Bad input or state.
    #[error("train: {0}")]
    Invalid(String),
}

macro_rules! boxed_from {
    ($($t:ty => $v:ident),*) => {$(
        impl From<$t> for TrainError {
            fn from(e: $t) -> Self {
                TrainError::$v(Box::new(e))
            }
        }
    )*};
}
boxed_from!(candle_core::Error => Candle, ModelError => Model, WeightError => Weights,
    tileops_ops::OpError => Op);

/// The training result type.
pub type Result<T> = std::result::Result<T, TrainError>;

fn io(path: &Path, e: impl std::fmt::Display) -> TrainError {
    TrainError::Io {
        path: path.display().to_string(),
        msg: e.to_string(),
    }
}

/// The shape of the shipped trained model for a tokenizer of `vocab_size` tokens: every
/// V3.2 path runs (a dense and a MoE layer, 4 routed experts top-2 in 2 groups, a shared
/// expert, q-LoRA, `index_head_dim > qk_rope_head_dim`, YaRN on: `max_seq_len >
/// original_seq_len`).
pub fn tiny_config(vocab_size: usize) -> Config {
    Config {
        vocab_size,
        dim: 128,
        inter_dim: 256,
        moe_inter_dim: 128,
        n_layers: 2,
        n_dense_layers: 1,
        n_heads: 4,
        n_routed_experts: 4,
        n_shared_experts: 1,
        n_activated_experts: 2,
        n_expert_groups: 2,
        n_limited_groups: 2,
        route_scale: 1.0,
        q_lora_rank: 64,
        kv_lora_rank: 64,
        qk_nope_head_dim: 32,
        qk_rope_head_dim: 16,
        v_head_dim: 32,
        index_n_heads: 4,
        index_head_dim: 32,
        index_topk: 32,
        rope_theta: 10000.0,
        rope_factor: 4.0,
        original_seq_len: 512,
        beta_fast: 32.0,
        beta_slow: 1.0,
        mscale: 1.0,
        max_seq_len: 2048,
    }
}

/// The training stages, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Stage {
    /// Dense pre-training (the indexer is idle).
    Dense,
    /// Only the indexer learns, against dense attention.
    Warmup,
    /// Top-k attention, everything learns.
    Sparse,
}

/// The hyper-parameters of a run (saved with its state, so a resumed run keeps them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    /// The model.
    pub model: Config,
    /// Seed of the initial weights and of the data.
    pub seed: u64,
    /// Words of generated training text ([`batches::training_windows`]).
    pub words: usize,
    /// Sequences per step.
    pub batch: usize,
    /// Tokens per sequence.
    pub seq_len: usize,
    /// Steps of the dense stage.
    pub dense_steps: u64,
    /// Steps of the indexer's warm-up.
    pub warmup_steps: u64,
    /// Steps of the sparse stage.
    pub sparse_steps: u64,
    /// The LM stages' schedule (the dense stage's; the sparse stage restarts it at its peak / 3).
    pub lr: Schedule,
    /// The indexer warm-up's constant learning rate (V3.2: 1e-3).
    pub warmup_lr: f64,
    /// AdamW.
    pub adam: AdamParams,
    /// Gradient-norm clip.
    pub clip: f64,
    /// Weight of the sequence-wise balance loss (V3: 1e-4).
    pub balance_weight: f64,
    /// The router bias's step per update (V3: 1e-3).
    pub bias_rate: f64,
    /// How windows are cut from the generated text (runs logged before this field existed
    /// used [`batches::WindowKind::Offsets`]).
    #[serde(default)]
    pub windows: batches::WindowKind,
    /// Share of retrieval documents in a [`batches::WindowKind::Documents`] stream.
    #[serde(default = "half")]
    pub retrieval_share: f64,
    /// A final stretch at another window length and batch, if any.
    #[serde(default)]
    pub phase: Option<batches::Phase>,
    /// Keys per retrieval document at most (`None`: what the window holds, up to 6).
    #[serde(default)]
    pub max_keys: Option<usize>,
    /// Weight of the answer tokens in the optimised next-token loss (`None`: every token
    /// weighs 1). The logged `lm` stays the plain mean.
    #[serde(default)]
    pub answer_weight: Option<AnswerWeight>,
    /// The first `copy_steps` dense steps train on [`batches::copy_batch`] (random tokens,
    /// repeated) instead of text: the cheap way to form the induction (copy) pattern that
    /// retrieval needs before the text stage (0: none).
    #[serde(default)]
    pub copy_steps: u64,
    /// After the copy steps, this share of each step's sequences (rounded up) are copy
    /// sequences of the window's length, so the copy pattern is kept while text trains (0:
    /// none).
    #[serde(default)]
    pub copy_share: f64,
    /// How copy runs draw their tokens (logs written before the field: [`CopyRuns::Mixed`]).
    #[serde(default)]
    pub copy_runs: CopyRuns,
}

/// The answer tokens of chat turns weigh more in the optimised loss: every target from the
/// one after `<|assistant|>` up to and including `<|end|>`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AnswerWeight {
    /// The id of `<|assistant|>`.
    pub assistant: u32,
    /// The id of `<|end|>`.
    pub end: u32,
    /// The answer targets' weight (the others weigh 1).
    pub weight: f64,
}

impl AnswerWeight {
    /// The weight of each target of `seq` (`seq.len() - 1` of them: target `i` is `seq[i + 1]`).
    pub fn weights(&self, seq: &[u32]) -> Vec<f32> {
        let mut inside = false;
        let mut w = Vec::with_capacity(seq.len().saturating_sub(1));
        for pair in seq.windows(2) {
            if pair[0] == self.assistant {
                inside = true;
            }
            w.push(if inside { self.weight as f32 } else { 1.0 });
            if pair[1] == self.end {
                inside = false;
            }
        }
        w
    }
}

fn half() -> f64 {
    0.5
}

impl TrainConfig {
    /// The stage of global step `step`.
    pub fn stage(&self, step: u64) -> Stage {
        if step < self.dense_steps {
            Stage::Dense
        } else if step < self.dense_steps + self.warmup_steps {
            Stage::Warmup
        } else {
            Stage::Sparse
        }
    }

    /// Sequences per step and tokens per sequence at global step `step`.
    pub fn shape_at(&self, step: u64) -> (usize, usize) {
        if step < self.copy_steps {
            let len = self.seq_len.min(batches::COPY_WINDOW);
            return ((self.batch * self.seq_len).div_ceil(len), len);
        }
        match self.phase {
            Some(p) if step >= p.from_step => (p.batch, p.seq_len),
            _ => (self.batch, self.seq_len),
        }
    }

    /// Steps of the whole run.
    pub fn total_steps(&self) -> u64 {
        self.dense_steps + self.warmup_steps + self.sparse_steps
    }

    /// The learning rate of global step `step`.
    pub fn lr_at(&self, step: u64) -> f64 {
        match self.stage(step) {
            Stage::Dense => self.lr.lr(step),
            Stage::Warmup => self.warmup_lr,
            Stage::Sparse => {
                let s = Schedule {
                    peak: self.lr.peak / 3.0,
                    floor: self.lr.floor,
                    warmup: self.lr.warmup.min(self.sparse_steps / 10),
                    total: self.sparse_steps,
                };
                s.lr(step - self.dense_steps - self.warmup_steps)
            }
        }
    }
}

/// One step's record in the training log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepLog {
    /// Global step (0-based).
    pub step: u64,
    /// Its stage.
    pub stage: Stage,
    /// Learning rate.
    pub lr: f64,
    /// Next-token cross-entropy (nats).
    pub lm: f64,
    /// The indexer's KL (summed over layers), when computed.
    pub index_kl: Option<f64>,
    /// The balance loss (unweighted).
    pub balance: Option<f64>,
    /// Gradient norm before clipping.
    pub grad_norm: f64,
    /// Tokens routed to each expert, per MoE layer.
    pub loads: Vec<Vec<usize>>,
    /// Wall seconds of the step.
    pub secs: f64,
}

/// The run's saved progress (`state.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunState {
    /// The hyper-parameters.
    pub config: TrainConfig,
    /// Steps done.
    pub step: u64,
    /// Threads candle used (`RAYON_NUM_THREADS`).
    pub threads: usize,
    /// Every step's record.
    pub log: Vec<StepLog>,
}

/// A run in progress: model, optimiser, and log.
pub struct Trainer {
    /// The model.
    pub model: TrainModel,
    /// The optimiser.
    pub opt: AdamW,
    /// The progress.
    pub state: RunState,
}

impl std::fmt::Debug for Trainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Trainer(step {})", self.state.step)
    }
}

impl Trainer {
    /// A fresh run of `config`.
    pub fn new(config: TrainConfig, threads: usize) -> Result<Trainer> {
        let model = TrainModel::new(&config.model, config.seed, DType::F32)?;
        Ok(Trainer {
            model,
            opt: AdamW::new(config.adam),
            state: RunState {
                config,
                step: 0,
                threads,
                log: Vec::new(),
            },
        })
    }

    /// One training step on `seqs` (each `seq_len + 1` tokens: inputs and shifted targets).
    pub fn step(&mut self, seqs: &[Vec<u32>]) -> Result<StepLog> {
        let t0 = Instant::now();
        let cfg = &self.state.config;
        let step = self.state.step;
        let stage = cfg.stage(step);
        let lr = cfg.lr_at(step);
        let (inputs, targets): (Vec<Vec<u32>>, Vec<u32>) = {
            let mut ins = Vec::with_capacity(seqs.len());
            let mut tg = Vec::new();
            for s in seqs {
                if s.len() < 2 {
                    return Err(TrainError::Invalid("a sequence needs 2 tokens".into()));
                }
                ins.push(s[..s.len() - 1].to_vec());
                tg.extend_from_slice(&s[1..]);
            }
            (ins, tg)
        };
        let mode = match stage {
            Stage::Dense => Mode::Dense,
            Stage::Warmup => Mode::Warmup,
            Stage::Sparse => Mode::Sparse,
        };
        let fwd = self.model.forward(&inputs, mode)?;
        let n_targets = targets.len();
        let targets = Tensor::from_vec(targets, n_targets, &Device::Cpu)?;
        let lm = candle_nn::loss::cross_entropy(&fwd.logits, &targets)?;
        // The optimised LM term: the plain mean, or answer tokens weighted.
        let lm_opt = match &cfg.answer_weight {
            None => lm.clone(),
            Some(aw) => {
                let w: Vec<f32> = seqs.iter().flat_map(|s| aw.weights(s)).collect();
                let total: f32 = w.iter().sum();
                let w = Tensor::from_vec(w, (n_targets, 1), &Device::Cpu)?
                    .to_dtype(fwd.logits.dtype())?;
                let nll = candle_nn::ops::log_softmax(&fwd.logits, candle_core::D::Minus1)?
                    .gather(&targets.unsqueeze(1)?, 1)?
                    .neg()?;
                ((nll * w)?.sum_all()? / f64::from(total))?
            }
        };
        let scalar =
            |t: &Tensor| -> Result<f64> { Ok(t.to_dtype(DType::F64)?.to_scalar::<f64>()?) };
        let mut loss = match stage {
            Stage::Warmup => fwd
                .index_kl
                .clone()
                .ok_or_else(|| TrainError::Invalid("the warm-up needs the indexer".into()))?,
            _ => lm_opt,
        };
        if stage != Stage::Warmup {
            if let Some(b) = &fwd.balance {
                loss = (loss + (b * cfg.balance_weight)?)?;
            }
            if let (Stage::Sparse, Some(kl)) = (stage, &fwd.index_kl) {
                loss = (loss + kl)?;
            }
        }
        let grads = loss.backward()?;
        let learns = |name: &str| {
            !is_router_bias(name)
                && match stage {
                    Stage::Dense => !is_indexer(name),
                    Stage::Warmup => is_indexer(name),
                    Stage::Sparse => true,
                }
        };
        let vars = self.model.vars();
        let norm = grad_norm(
            vars.iter().filter(|(n, _)| learns(n)).map(|(_, v)| v),
            &grads,
        )?;
        let scale = clip_scale(norm, cfg.clip);
        self.opt
            .step(vars.iter().filter(|(n, _)| learns(n)), &grads, scale, lr)?;
        // Aux-loss-free balancing: each router bias moves against its expert's load.
        if stage != Stage::Warmup {
            let moe_layers = cfg.model.n_dense_layers..cfg.model.n_layers;
            for (li, load) in moe_layers.zip(&fwd.loads) {
                let var = self.model.var(&format!("layers.{li}.ffn.gate.bias"))?;
                let mean = load.iter().sum::<usize>() as f64 / load.len() as f64;
                let delta: Vec<f32> = load
                    .iter()
                    .map(|&l| (cfg.bias_rate * (mean - l as f64).signum()) as f32)
                    .collect();
                let delta = Tensor::from_vec(delta, load.len(), &Device::Cpu)?;
                var.set(&(var.as_tensor() + delta.to_dtype(var.dtype())?)?)?;
            }
        }
        let log = StepLog {
            step,
            stage,
            lr,
            lm: scalar(&lm)?,
            index_kl: fwd.index_kl.as_ref().map(scalar).transpose()?,
            balance: fwd.balance.as_ref().map(scalar).transpose()?,
            grad_norm: norm,
            loads: fwd.loads,
            secs: t0.elapsed().as_secs_f64(),
        };
        self.state.step += 1;
        self.state.log.push(log.clone());
        Ok(log)
    }

    /// Saves the run in `dir`: `params.safetensors`, `optim.safetensors`, `state.json`.
    pub fn save(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        let params: HashMap<String, Tensor> = self
            .model
            .vars()
            .iter()
            .map(|(n, v)| (n.clone(), v.as_tensor().clone()))
            .collect();
        candle_core::safetensors::save(&params, dir.join("params.safetensors"))?;
        self.opt.save(&dir.join("optim.safetensors"))?;
        let json = serde_json::to_string_pretty(&self.state).map_err(|e| io(dir, e))?;
        let p = dir.join("state.json");
        std::fs::write(&p, json).map_err(|e| io(&p, e))
    }

    /// Resumes the run saved in `dir`.
    pub fn resume(dir: &Path) -> Result<Trainer> {
        let p = dir.join("state.json");
        let text = std::fs::read_to_string(&p).map_err(|e| io(&p, e))?;
        let state: RunState = serde_json::from_str(&text).map_err(|e| io(&p, e))?;
        let model = TrainModel::new(&state.config.model, state.config.seed, DType::F32)?;
        let params = candle_core::safetensors::load(dir.join("params.safetensors"), &Device::Cpu)?;
        for (name, var) in model.vars() {
            let t = params.get(name).ok_or_else(|| {
                TrainError::Invalid(format!("{}: parameter `{name}` is missing", dir.display()))
            })?;
            var.set(t)?;
        }
        let mut opt = AdamW::new(state.config.adam);
        opt.load(&dir.join("optim.safetensors"))?;
        Ok(Trainer { model, opt, state })
    }
}

/// A text histogram of one layer's expert loads: `e0 ####.. 27%` per expert.
pub fn load_histogram(load: &[usize]) -> String {
    let total = load.iter().sum::<usize>().max(1) as f64;
    load.iter()
        .enumerate()
        .map(|(e, &l)| {
            let share = l as f64 / total;
            let bar = (share * 20.0).round() as usize;
            format!(
                "e{e} {:<10} {:>3.0}%",
                "#".repeat(bar.min(10)),
                share * 100.0
            )
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

/// Writes the loss curves of `log` (LM loss, and the indexer's KL where computed) as an SVG.
pub fn plot_losses(log: &[StepLog], path: &Path) -> Result<()> {
    use plotters::prelude::*;
    let plot = |e: String| io(path, e);
    let lm: Vec<(f64, f64)> = log.iter().map(|l| (l.step as f64, l.lm)).collect();
    let kl: Vec<(f64, f64)> = log
        .iter()
        .filter_map(|l| l.index_kl.map(|k| (l.step as f64, k)))
        .collect();
    let xmax = log.last().map_or(1.0, |l| l.step as f64 + 1.0);
    let ymax = lm
        .iter()
        .chain(&kl)
        .map(|p| p.1)
        .filter(|v| v.is_finite())
        .fold(1.0f64, f64::max);
    let root = SVGBackend::new(path, (800, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| plot(e.to_string()))?;
    let mut chart = ChartBuilder::on(&root)
        .caption("tiny DeepSeek-V3.2: training losses", ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(45)
        .build_cartesian_2d(0f64..xmax, 0f64..ymax * 1.05)
        .map_err(|e| plot(e.to_string()))?;
    chart
        .configure_mesh()
        .x_desc("step")
        .y_desc("nats")
        .draw()
        .map_err(|e| plot(e.to_string()))?;
    chart
        .draw_series(LineSeries::new(lm, &BLUE))
        .map_err(|e| plot(e.to_string()))?
        .label("next-token loss")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
    chart
        .draw_series(LineSeries::new(kl, &RED))
        .map_err(|e| plot(e.to_string()))?
        .label("indexer KL (sum over layers)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED));
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE)
        .draw()
        .map_err(|e| plot(e.to_string()))?;
    root.present().map_err(|e| plot(e.to_string()))?;
    Ok(())
}

#[cfg(test)]
mod tests;
