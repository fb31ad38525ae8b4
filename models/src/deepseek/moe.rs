//! The feed-forward blocks: a dense SwiGLU MLP, and the MoE with sigmoid group-limited routing,
//! int8 routed experts through `tileops_ops::quant_matmul`, and a shared expert.

use super::config::Config;
use super::ops::{linear, sigmoid, silu, to_vec_f32, Timers};
use crate::error::Result;
use crate::weights::Weights;
use candle_core::{Device, Tensor};
use tileops_ops::{quant_matmul, Backend, QuantMatmulParams, QuantizedWeight};

/// A dense SwiGLU MLP `w2(silu(w1 x) * w3 x)`.
#[derive(Debug, Clone)]
pub struct Mlp {
    w1: Tensor,
    w2: Tensor,
    w3: Tensor,
}

impl Mlp {
    /// The MLP under `prefix` (`{prefix}.w1.weight`, ...).
    pub fn load(w: &Weights, prefix: &str) -> Result<Mlp> {
        let g = |n: &str| w.get(&format!("{prefix}.{n}.weight"));
        Ok(Mlp {
            w1: g("w1")?,
            w2: g("w2")?,
            w3: g("w3")?,
        })
    }

    /// `[N, dim] -> [N, dim]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = (silu(&linear(x, &self.w1)?)? * linear(x, &self.w3)?)?;
        linear(&h, &self.w2)
    }
}

/// A routed expert with int8 per-channel weights.
#[derive(Debug, Clone)]
struct Expert {
    w1: QuantizedWeight,
    w2: QuantizedWeight,
    w3: QuantizedWeight,
    /// `w1` and `w3` stacked (`[2 inter, dim]`): one call for both, the same bits
    /// ([`QuantizedWeight::concat_channels`]); `None` when their scales forbid it.
    w13: Option<QuantizedWeight>,
}

impl Expert {
    fn new(w1: QuantizedWeight, w2: QuantizedWeight, w3: QuantizedWeight) -> Expert {
        let w13 = QuantizedWeight::concat_channels(&[&w1, &w3]);
        Expert { w1, w2, w3, w13 }
    }

    fn forward(&self, x: &Tensor, backend: Backend) -> Result<Tensor> {
        let p = QuantMatmulParams::default();
        let (a, b) = match &self.w13 {
            Some(w13) => {
                let ab = quant_matmul(x, w13, &p, Some(backend))?;
                let inter = self.w1.n();
                (ab.narrow(1, 0, inter)?, ab.narrow(1, inter, self.w3.n())?)
            }
            None => (
                quant_matmul(x, &self.w1, &p, Some(backend))?,
                quant_matmul(x, &self.w3, &p, Some(backend))?,
            ),
        };
        Ok(quant_matmul(
            &(silu(&a)? * b)?,
            &self.w2,
            &p,
            Some(backend),
        )?)
    }
}

/// The MoE block.
#[derive(Debug, Clone)]
pub struct Moe {
    gate: Tensor,
    bias: Vec<f32>,
    experts: Vec<Expert>,
    shared: Option<Mlp>,
    groups: usize,
    limited: usize,
    active: usize,
    route_scale: f32,
}

impl Moe {
    /// The MoE of layer `i`.
    pub fn load(w: &Weights, cfg: &Config, i: usize) -> Result<Moe> {
        let p = format!("layers.{i}.ffn");
        let mut experts = Vec::with_capacity(cfg.n_routed_experts);
        for e in 0..cfg.n_routed_experts {
            let g = |n: &str| w.get_quant(&format!("{p}.experts.{e}.{n}.weight"));
            experts.push(Expert::new(g("w1")?, g("w2")?, g("w3")?));
        }
        Ok(Moe {
            gate: w.get(&format!("{p}.gate.weight"))?,
            bias: to_vec_f32(&w.get(&format!("{p}.gate.bias"))?)?,
            experts,
            shared: match cfg.n_shared_experts {
                0 => None,
                _ => Some(Mlp::load(w, &format!("{p}.shared_experts"))?),
            },
            groups: cfg.n_expert_groups,
            limited: cfg.n_limited_groups,
            active: cfg.n_activated_experts,
            route_scale: cfg.route_scale,
        })
    }

    /// The routing of one token's sigmoid scores: `(expert, weight)` pairs. Selection ranks
    /// `score + bias`; a group's score is the sum of its two best biased scores; the best
    /// `n_limited_groups` groups are kept, then the best `n_activated_experts` experts in them;
    /// the weights are the unbiased scores, normalised to sum 1, times `route_scale`.
    pub fn route(&self, scores: &[f32]) -> Vec<(usize, f32)> {
        let n = scores.len();
        let per = n / self.groups;
        let biased: Vec<f32> = scores.iter().zip(&self.bias).map(|(s, b)| s + b).collect();
        let desc = |v: &[f32], a: &usize, b: &usize| v[*b].total_cmp(&v[*a]).then(a.cmp(b));
        let group_score: Vec<f32> = (0..self.groups)
            .map(|g| {
                let mut v: Vec<f32> = biased[g * per..(g + 1) * per].to_vec();
                v.sort_by(|a, b| b.total_cmp(a));
                v.iter().take(2).sum()
            })
            .collect();
        let mut gs: Vec<usize> = (0..self.groups).collect();
        gs.sort_by(|a, b| desc(&group_score, a, b));
        let mut cand: Vec<usize> = gs[..self.limited]
            .iter()
            .flat_map(|g| g * per..(g + 1) * per)
            .collect();
        cand.sort_by(|a, b| desc(&biased, a, b));
        cand.truncate(self.active);
        let sum: f32 = cand.iter().map(|&e| scores[e]).sum();
        let norm = if sum > 0.0 { sum } else { 1.0 };
        cand.into_iter()
            .map(|e| (e, scores[e] / norm * self.route_scale))
            .collect()
    }

    /// `[N, dim] -> [N, dim]`.
    pub fn forward(&self, x: &Tensor, backend: Backend, timers: &Timers) -> Result<Tensor> {
        let (n, e) = (x.dim(0)?, self.experts.len());
        let scores = to_vec_f32(&sigmoid(&linear(x, &self.gate)?)?)?;
        // Rows and weights per expert.
        let mut rows: Vec<Vec<u32>> = vec![Vec::new(); e];
        let mut weights: Vec<Vec<f32>> = vec![Vec::new(); e];
        for t in 0..n {
            for (ex, w) in self.route(&scores[t * e..(t + 1) * e]) {
                rows[ex].push(t as u32);
                weights[ex].push(w);
            }
        }
        let mut y = match &self.shared {
            Some(s) => s.forward(x)?,
            None => x.zeros_like()?,
        };
        for ex in 0..e {
            if rows[ex].is_empty() {
                continue;
            }
            let m = rows[ex].len();
            let idx = Tensor::from_slice(&rows[ex], m, &Device::Cpu)?;
            let xs = x.index_select(&idx, 0)?;
            let out = timers.time("quant_matmul (2-3 per expert)", || {
                self.experts[ex].forward(&xs, backend)
            })?;
            let w = Tensor::from_slice(&weights[ex], (m, 1), &Device::Cpu)?;
            y = y.index_add(&idx, &out.broadcast_mul(&w)?, 0)?;
        }
        Ok(y)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tileops_ops::quantize_per_channel;

    fn weight(n: usize, k: usize, seed: u32, amp: f32) -> QuantizedWeight {
        let v: Vec<f32> = (0..(n * k) as u32)
            .map(|i| {
                let h = (i ^ seed).wrapping_mul(2_654_435_761) >> 8;
                (h as f32 / (1u32 << 24) as f32 - 0.5) * amp
            })
            .collect();
        let t = Tensor::from_vec(v, (n, k), &Device::Cpu).expect("w");
        quantize_per_channel(&t).expect("quantise")
    }

    /// An expert whose gate and up projections run as one stacked call gives the bits of the
    /// two calls, on both backends; weights whose scales need another Fixpipe power of two
    /// keep two calls.
    #[test]
    fn the_stacked_gate_and_up_call_gives_the_two_calls_bits() {
        let (dim, inter) = (256, 128);
        let e = Expert::new(
            weight(inter, dim, 1, 0.2),
            weight(dim, inter, 2, 0.2),
            weight(inter, dim, 3, 0.2),
        );
        assert!(e.w13.is_some());
        let apart = Expert {
            w13: None,
            ..e.clone()
        };
        let v: Vec<f32> = (0..3 * dim)
            .map(|i| ((i * 7919) % 113) as f32 / 50.0 - 1.1)
            .collect();
        let x = Tensor::from_vec(v, (3, dim), &Device::Cpu).expect("x");
        for backend in [Backend::Reference, Backend::TileSim] {
            let bits = |e: &Expert| -> Vec<u32> {
                let y = e.forward(&x, backend).expect("forward");
                let y = y
                    .flatten_all()
                    .expect("flat")
                    .to_vec1::<f32>()
                    .expect("f32");
                y.into_iter().map(f32::to_bits).collect()
            };
            assert_eq!(bits(&e), bits(&apart), "{backend:?}");
        }
        let far = Expert::new(
            weight(inter, dim, 1, 0.2),
            weight(dim, inter, 2, 0.2),
            weight(inter, dim, 3, 25.0),
        );
        assert!(far.w13.is_none());
    }
}
