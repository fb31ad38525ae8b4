//! The training forward: the inference model's math (models/src/deepseek/) as plain
//! differentiable candle ops over a batch of equal-length sequences, with MLA in the
//! non-absorbed form, the lightning indexer, the dense MLP and the MoE.

use super::{Result, TrainError};
use crate::deepseek::config::Config;
use crate::deepseek::indexer::causal_topk;
use crate::deepseek::ops::{layer_norm, linear, rms_norm, rope, rope_tables, sigmoid, silu};
use crate::weights::{specs, Kind, Rng, Weights};
use candle_core::{DType, Device, Tensor, Var, D};
use candle_nn::VarMap;
use std::collections::BTreeMap;
use tileops_ops::quantize_per_channel;

/// The additive mask value of positions a query may not see (finite, so no `inf - inf`).
const MASKED: f64 = -1e30;

/// How attention runs in a forward pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Dense causal attention; the indexer is not computed.
    Dense,
    /// Dense causal attention, and the indexer's KL against it over every causal position
    /// (the V3.2 dense warm-up).
    Warmup,
    /// Each query attends to the indexer's causal top-k only, and the indexer's KL runs over
    /// that selected set (the V3.2 sparse stage).
    Sparse,
}

/// What one forward pass produced.
#[derive(Debug)]
pub struct Forward {
    /// Logits `[B * T, vocab]`, row-major by sequence then position.
    pub logits: Tensor,
    /// The indexer's KL loss (mean over queries, summed over layers); `None` in [`Mode::Dense`].
    pub index_kl: Option<Tensor>,
    /// The sequence-wise balance loss of the MoE layers (unscaled, summed over layers).
    pub balance: Option<Tensor>,
    /// Tokens routed to each expert, per MoE layer.
    pub loads: Vec<Vec<usize>>,
}

/// The trainable model: one [`Var`] per tensor of [`specs`], under the loader's names.
pub struct TrainModel {
    /// The configuration.
    pub cfg: Config,
    /// The parameters (the router biases included; they are updated by the balancing rule).
    pub varmap: VarMap,
    vars: BTreeMap<String, Var>,
    dtype: DType,
    freqs: Vec<f32>,
}

impl std::fmt::Debug for TrainModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "TrainModel({} tensors, {:?})",
            self.vars.len(),
            self.dtype
        )
    }
}

/// The selected experts of one token's sigmoid `scores` under `bias`, by the inference rule
/// (`crate::deepseek::moe::Moe::route`): a group scores the sum of its two best biased scores,
/// the best `limited` groups are kept, then the best `active` experts in them (ties to the
/// lower index).
pub fn route(
    scores: &[f32],
    bias: &[f32],
    groups: usize,
    limited: usize,
    active: usize,
) -> Vec<usize> {
    let per = scores.len() / groups;
    let biased: Vec<f32> = scores.iter().zip(bias).map(|(s, b)| s + b).collect();
    let desc = |v: &[f32], a: &usize, b: &usize| v[*b].total_cmp(&v[*a]).then(a.cmp(b));
    let group_score: Vec<f32> = (0..groups)
        .map(|g| {
            let mut v: Vec<f32> = biased[g * per..(g + 1) * per].to_vec();
            v.sort_by(|a, b| b.total_cmp(a));
            v.iter().take(2).sum()
        })
        .collect();
    let mut gs: Vec<usize> = (0..groups).collect();
    gs.sort_by(|a, b| desc(&group_score, a, b));
    let mut cand: Vec<usize> = gs[..limited]
        .iter()
        .flat_map(|g| g * per..(g + 1) * per)
        .collect();
    cand.sort_by(|a, b| desc(&biased, a, b));
    cand.truncate(active);
    cand
}

/// Whether a tensor name belongs to an indexer.
pub fn is_indexer(name: &str) -> bool {
    name.contains(".indexer.")
}

/// Whether a tensor name is a router bias (not learned by gradient).
pub fn is_router_bias(name: &str) -> bool {
    name.ends_with(".gate.bias")
}

fn f32s(t: &Tensor) -> Result<Vec<f32>> {
    Ok(t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?)
}

/// Softmax over the last dim (max subtracted, detached).
fn softmax(s: &Tensor) -> Result<Tensor> {
    let e = s
        .broadcast_sub(&s.max_keepdim(D::Minus1)?.detach())?
        .exp()?;
    Ok(e.broadcast_div(&e.sum_keepdim(D::Minus1)?)?)
}

/// Log-softmax over the last dim.
fn log_softmax(s: &Tensor) -> Result<Tensor> {
    let z = s.broadcast_sub(&s.max_keepdim(D::Minus1)?.detach())?;
    Ok(z.broadcast_sub(&z.exp()?.sum_keepdim(D::Minus1)?.log()?)?)
}

impl TrainModel {
    /// A model of `cfg` initialised from `seed` (uniform `±fan_in^-0.5` matrices, unit norms,
    /// zero biases) in `dtype` (F32 to train, F64 for the gradient checks).
    pub fn new(cfg: &Config, seed: u64, dtype: DType) -> Result<TrainModel> {
        cfg.validate()
            .map_err(|e| TrainError::Invalid(e.to_string()))?;
        let mut rng = Rng(seed);
        let mut tensors = BTreeMap::new();
        for s in specs(cfg) {
            let n: usize = s.shape.iter().product();
            let bound = (*s.shape.last().unwrap_or(&1) as f32).powf(-0.5);
            let data: Vec<f32> = (0..n)
                .map(|_| match s.kind {
                    Kind::Ones => 1.0,
                    Kind::Zeros | Kind::Bias => 0.0,
                    Kind::Dense | Kind::Int8 => (2.0 * rng.uniform() - 1.0) * bound,
                })
                .collect();
            tensors.insert(
                s.name,
                Tensor::from_vec(data, s.shape.as_slice(), &Device::Cpu)?,
            );
        }
        Self::from_tensors(cfg, tensors, dtype)
    }

    /// A model holding `w` (int8 experts dequantised), e.g. an exported checkpoint.
    pub fn from_weights(cfg: &Config, w: &Weights, dtype: DType) -> Result<TrainModel> {
        let mut tensors = BTreeMap::new();
        for s in specs(cfg) {
            let t = match s.kind {
                Kind::Int8 => w.get_quant(&s.name)?.dequantize(&Device::Cpu)?,
                _ => w.get(&s.name)?,
            };
            tensors.insert(s.name, t);
        }
        Self::from_tensors(cfg, tensors, dtype)
    }

    fn from_tensors(
        cfg: &Config,
        tensors: BTreeMap<String, Tensor>,
        dtype: DType,
    ) -> Result<TrainModel> {
        let varmap = VarMap::new();
        let mut vars = BTreeMap::new();
        {
            let mut data = varmap
                .data()
                .lock()
                .map_err(|_| TrainError::Invalid("the VarMap lock is poisoned".into()))?;
            for (name, t) in tensors {
                let v = Var::from_tensor(&t.to_dtype(dtype)?)?;
                data.insert(name.clone(), v.clone());
                vars.insert(name, v);
            }
        }
        Ok(TrainModel {
            cfg: cfg.clone(),
            varmap,
            vars,
            dtype,
            freqs: cfg.rope_freqs(),
        })
    }

    /// The parameters by name.
    pub fn vars(&self) -> &BTreeMap<String, Var> {
        &self.vars
    }

    /// The parameter `name`.
    pub fn var(&self, name: &str) -> Result<&Var> {
        self.vars
            .get(name)
            .ok_or_else(|| TrainError::Invalid(format!("no parameter `{name}`")))
    }

    fn p(&self, name: &str) -> Result<Tensor> {
        Ok(self.var(name)?.as_tensor().clone())
    }

    /// Parameters in the model (router biases included).
    pub fn param_count(&self) -> usize {
        self.vars.values().map(|v| v.elem_count()).sum()
    }

    /// The weights under the loader's names, routed experts int8 per channel
    /// (`quantize_per_channel`), everything else F32.
    pub fn export(&self) -> Result<Weights> {
        let mut w = Weights::default();
        for s in specs(&self.cfg) {
            let t = self.p(&s.name)?.to_dtype(DType::F32)?;
            if s.kind == Kind::Int8 {
                w.quant.insert(s.name, quantize_per_channel(&t)?);
            } else {
                w.dense.insert(s.name, t);
            }
        }
        Ok(w)
    }

    /// The lightning indexer's tensors alone (F32), for [`Weights::replace_indexer`]: of a
    /// fresh model of the run's seed they are the indexer before its warm-up (the dense stage
    /// does not train it).
    pub fn export_indexer(&self) -> Result<Weights> {
        let mut w = Weights::default();
        for s in specs(&self.cfg).into_iter().filter(|s| is_indexer(&s.name)) {
            w.dense
                .insert(s.name.clone(), self.p(&s.name)?.to_dtype(DType::F32)?);
        }
        Ok(w)
    }

    /// Rounds every routed expert to its int8 grid (quantise and dequantise in place), so that
    /// the f32 weights are the ones the exported checkpoint holds.
    pub fn snap_experts(&self) -> Result<()> {
        for s in specs(&self.cfg) {
            if s.kind == Kind::Int8 {
                let v = self.var(&s.name)?;
                let q = quantize_per_channel(&v.as_tensor().to_dtype(DType::F32)?)?;
                v.set(&q.dequantize(&Device::Cpu)?.to_dtype(self.dtype)?)?;
            }
        }
        Ok(())
    }

    /// The mask `[T, T]` (0 visible, [`MASKED`] not) of causal attention.
    fn causal_mask(&self, t: usize) -> Result<Tensor> {
        let m: Vec<f32> = (0..t * t)
            .map(|i| if i % t <= i / t { 0.0 } else { MASKED as f32 })
            .collect();
        Ok(Tensor::from_vec(m, (t, t), &Device::Cpu)?.to_dtype(self.dtype)?)
    }

    /// Runs `seqs` (equal lengths) through the model in `mode`.
    pub fn forward(&self, seqs: &[Vec<u32>], mode: Mode) -> Result<Forward> {
        let cfg = &self.cfg;
        let b = seqs.len();
        let t = seqs.first().map_or(0, Vec::len);
        if b == 0 || t == 0 || seqs.iter().any(|s| s.len() != t) {
            return Err(TrainError::Invalid(
                "a batch needs non-empty sequences of one length".into(),
            ));
        }
        if t > cfg.max_seq_len {
            return Err(TrainError::Invalid(format!(
                "sequences of {t} tokens exceed max_seq_len {}",
                cfg.max_seq_len
            )));
        }
        if let Some(&tok) = seqs
            .iter()
            .flatten()
            .find(|&&x| x as usize >= cfg.vocab_size)
        {
            return Err(TrainError::Invalid(format!(
                "token {tok} is outside the vocabulary of {}",
                cfg.vocab_size
            )));
        }
        let n = b * t;
        let dev = &Device::Cpu;
        let ids = Tensor::from_vec(seqs.concat(), n, dev)?;
        let mut x = self.p("embed.weight")?.index_select(&ids, 0)?;
        let positions: Vec<usize> = (0..b).flat_map(|_| 0..t).collect();
        let (cos, sin) = rope_tables(&self.freqs, &positions)?;
        let (cos, sin) = (cos.to_dtype(self.dtype)?, sin.to_dtype(self.dtype)?);
        let causal = self.causal_mask(t)?;
        let (h, nope, rd, vd) = (
            cfg.n_heads,
            cfg.qk_nope_head_dim,
            cfg.qk_rope_head_dim,
            cfg.v_head_dim,
        );
        let (hi, di) = (cfg.index_n_heads, cfg.index_head_dim);
        let kvl = cfg.kv_lora_rank;
        let scale = cfg.softmax_scale() as f64;
        // [N, heads, d] -> [B, heads, T, d]
        let bhtd = |x: &Tensor, heads: usize, d: usize| -> Result<Tensor> {
            Ok(x.reshape((b, t, heads, d))?.transpose(1, 2)?.contiguous()?)
        };
        let rope_front = |x: &Tensor| -> Result<Tensor> {
            let r = rope(&x.narrow(2, 0, rd)?, &cos, &sin, false)?;
            let rest = x.narrow(2, rd, di - rd)?;
            Ok(Tensor::cat(&[r, rest], 2)?)
        };
        let mut index_kl: Option<Tensor> = None;
        let mut balance: Option<Tensor> = None;
        let mut loads = Vec::new();
        for li in 0..cfg.n_layers {
            let a = format!("layers.{li}.attn");
            let g = |n: &str| self.p(&format!("{a}.{n}"));
            let hn = rms_norm(&x, &self.p(&format!("layers.{li}.attn_norm.weight"))?)?;
            // MLA, non-absorbed.
            let qr = rms_norm(&linear(&hn, &g("wq_a.weight")?)?, &g("q_norm.weight")?)?;
            let q = linear(&qr, &g("wq_b.weight")?)?.reshape((n, h, nope + rd))?;
            let q_nope = bhtd(&q.narrow(2, 0, nope)?, h, nope)?;
            let q_pe = rope(&q.narrow(2, nope, rd)?.contiguous()?, &cos, &sin, true)?;
            let q_pe = bhtd(&q_pe, h, rd)?;
            let kv = linear(&hn, &g("wkv_a.weight")?)?;
            let c = rms_norm(&kv.narrow(1, 0, kvl)?, &g("kv_norm.weight")?)?;
            let k_pe = kv.narrow(1, kvl, rd)?.reshape((n, 1, rd))?;
            let k_pe = bhtd(&rope(&k_pe, &cos, &sin, true)?, 1, rd)?;
            let kvb = linear(&c, &g("wkv_b.weight")?)?.reshape((n, h, nope + vd))?;
            let k_nope = bhtd(&kvb.narrow(2, 0, nope)?, h, nope)?;
            let v = bhtd(&kvb.narrow(2, nope, vd)?, h, vd)?;
            let s = (q_nope.matmul(&k_nope.t()?)? + q_pe.broadcast_matmul(&k_pe.t()?)?)?;
            let s = (s * scale)?; // [B, H, T, T]
                                  // The indexer: its input detached, so it learns from its KL only.
            let index = if mode == Mode::Dense {
                None
            } else {
                let hd = hn.detach();
                let qrd = qr.detach();
                let qi = linear(&qrd, &g("indexer.wq_b.weight")?)?.reshape((n, hi, di))?;
                let qi = bhtd(&rope_front(&qi)?, hi, di)?; // [B, Hi, T, Di]
                let wi =
                    (linear(&hd, &g("indexer.weights_proj.weight")?)? * (hi as f64).powf(-0.5))?;
                let wi = wi.reshape((b, t, hi))?.transpose(1, 2)?.unsqueeze(3)?; // [B,Hi,T,1]
                let ki = layer_norm(
                    &linear(&hd, &g("indexer.wk.weight")?)?,
                    &g("indexer.k_norm.weight")?,
                    &g("indexer.k_norm.bias")?,
                )?
                .reshape((n, 1, di))?;
                let ki = rope_front(&ki)?.reshape((b, t, di))?;
                let kt = ki.transpose(1, 2)?.unsqueeze(1)?; // [B, 1, Di, T]
                let dots = qi.broadcast_matmul(&kt)?.relu()?;
                let scores = (dots.broadcast_mul(&wi)?.sum(1)? * (di as f64).powf(-0.5))?;
                Some(scores) // [B, T, T]
            };
            // The visible set of every query: causal, or the indexer's causal top-k.
            let mask = match (&index, mode) {
                (Some(scores), Mode::Sparse) => {
                    let pos: Vec<usize> = (0..t).collect();
                    let mut m = vec![MASKED as f32; b * t * t];
                    for bi in 0..b {
                        let sc = scores.get(bi)?.to_dtype(DType::F32)?;
                        let sel = causal_topk(&sc, &pos, cfg.index_topk)?;
                        for (row, chunk) in sel.chunks(cfg.index_topk).enumerate() {
                            for &p in chunk.iter().filter(|&&p| p >= 0) {
                                m[(bi * t + row) * t + p as usize] = 0.0;
                            }
                        }
                    }
                    Tensor::from_vec(m, (b, t, t), dev)?.to_dtype(self.dtype)?
                }
                _ => causal.unsqueeze(0)?.broadcast_as((b, t, t))?.contiguous()?,
            };
            let p = softmax(&s.broadcast_add(&mask.unsqueeze(1)?)?)?; // [B, H, T, T]
            if let Some(scores) = &index {
                // Target: the main attention summed over heads, L1-normalised (each head's
                // row sums to 1 over the visible set, so the sum over heads / H).
                let target = (p.detach().sum(1)? / h as f64)?;
                let logq = log_softmax(&scores.broadcast_add(&mask)?)?;
                let plogp = (&target * (&target + 1e-30)?.log()?)?;
                let kl = (plogp - (&target * logq)?)?.sum(D::Minus1)?.mean_all()?;
                index_kl = Some(match index_kl {
                    Some(k) => (k + kl)?,
                    None => kl,
                });
            }
            let o = p.matmul(&v)?.transpose(1, 2)?.reshape((n, h * vd))?;
            x = (x + linear(&o, &g("wo.weight")?)?)?;
            // FFN.
            let f = format!("layers.{li}.ffn");
            let hn = rms_norm(&x, &self.p(&format!("layers.{li}.ffn_norm.weight"))?)?;
            let mlp = |x: &Tensor, p: &str| -> Result<Tensor> {
                let w = |n: &str| self.p(&format!("{p}.{n}.weight"));
                let a = (silu(&linear(x, &w("w1")?)?)? * linear(x, &w("w3")?)?)?;
                Ok(linear(&a, &w("w2")?)?)
            };
            let y = if li < cfg.n_dense_layers {
                mlp(&hn, &f)?
            } else {
                let e = cfg.n_routed_experts;
                let scores = sigmoid(&linear(&hn, &self.p(&format!("{f}.gate.weight"))?)?)?;
                let sv = f32s(&scores)?;
                let bias = f32s(&self.p(&format!("{f}.gate.bias"))?)?;
                let mut sel_mask = vec![0f32; n * e];
                let mut rows: Vec<Vec<u32>> = vec![Vec::new(); e];
                let mut counts = vec![0f32; b * e];
                for r in 0..n {
                    for ex in route(
                        &sv[r * e..(r + 1) * e],
                        &bias,
                        cfg.n_expert_groups,
                        cfg.n_limited_groups,
                        cfg.n_activated_experts,
                    ) {
                        sel_mask[r * e + ex] = 1.0;
                        rows[ex].push(r as u32);
                        counts[(r / t) * e + ex] += 1.0;
                    }
                }
                let sel = Tensor::from_vec(sel_mask, (n, e), dev)?.to_dtype(self.dtype)?;
                let ws = (&scores * sel)?;
                let w = (ws.broadcast_div(&ws.sum_keepdim(1)?)? * cfg.route_scale as f64)?;
                let mut y = if cfg.n_shared_experts > 0 {
                    mlp(&hn, &format!("{f}.shared_experts"))?
                } else {
                    hn.zeros_like()?
                };
                for (ex, r) in rows.iter().enumerate() {
                    if r.is_empty() {
                        continue;
                    }
                    let idx = Tensor::from_slice(r, r.len(), dev)?;
                    let out = mlp(&hn.index_select(&idx, 0)?, &format!("{f}.experts.{ex}"))?;
                    let wcol = w.index_select(&idx, 0)?.narrow(1, ex, 1)?;
                    y = y.index_add(&idx, &out.broadcast_mul(&wcol)?, 0)?;
                }
                // V3's sequence-wise balance loss: sum_i f_i P_i per sequence, f_i the
                // expert's routed share times E/K, P_i its mean normalised score.
                let k = cfg.n_activated_experts as f64;
                let fi: Vec<f32> = counts
                    .iter()
                    .map(|&c| (c as f64 * e as f64 / (k * t as f64)) as f32)
                    .collect();
                let fi = Tensor::from_vec(fi, (b, e), dev)?.to_dtype(self.dtype)?;
                let pi = scores
                    .broadcast_div(&scores.sum_keepdim(1)?)?
                    .reshape((b, t, e))?
                    .mean(1)?;
                let bal = ((pi * fi)?.sum_all()? / b as f64)?;
                balance = Some(match balance {
                    Some(x) => (x + bal)?,
                    None => bal,
                });
                loads.push(rows.iter().map(Vec::len).collect());
                y
            };
            x = (x + y)?;
        }
        let last = rms_norm(&x, &self.p("norm.weight")?)?;
        let logits = linear(&last, &self.p("head.weight")?)?;
        Ok(Forward {
            logits,
            index_kl,
            balance,
            loads,
        })
    }

    /// Forward FLOPs of a batch of `b` sequences of `t` tokens (matmuls and attention scores
    /// over the full `T x T` square, as computed; the MoE counts the active experts only).
    pub fn forward_flops(&self, b: usize, t: usize, mode: Mode) -> f64 {
        let c = &self.cfg;
        let (d, h) = (c.dim as f64, c.n_heads as f64);
        let (nope, rd, vd) = (
            c.qk_nope_head_dim as f64,
            c.qk_rope_head_dim as f64,
            c.v_head_dim as f64,
        );
        let (ql, kvl) = (c.q_lora_rank as f64, c.kv_lora_rank as f64);
        let (hi, di) = (c.index_n_heads as f64, c.index_head_dim as f64);
        let n = (b * t) as f64;
        let mut per_tok = 0.0;
        for li in 0..c.n_layers {
            per_tok += d * ql + ql * h * (nope + rd) + d * (kvl + rd) + kvl * h * (nope + vd);
            per_tok += h * vd * d;
            if mode != Mode::Dense {
                per_tok += ql * hi * di + d * di + d * hi;
            }
            per_tok += if li < c.n_dense_layers {
                3.0 * d * c.inter_dim as f64
            } else {
                let active = (c.n_activated_experts + c.n_shared_experts) as f64;
                d * c.n_routed_experts as f64 + active * 3.0 * d * c.moe_inter_dim as f64
            };
        }
        per_tok += d * c.vocab_size as f64;
        let tt = (b * t * t) as f64;
        let mut attn = c.n_layers as f64 * tt * h * (nope + rd + vd);
        if mode != Mode::Dense {
            attn += c.n_layers as f64 * tt * hi * di;
        }
        2.0 * (n * per_tok + attn)
    }
}
