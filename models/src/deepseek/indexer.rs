//! The lightning indexer: per-token keys in their own paged cache, per-head ReLU scores
//! weighted by a learned per-head weight, and a causal top-k of the sequence's tokens.
//!
//! Left out of the real model: the Hadamard rotation of queries and keys and the fp8 index
//! cache (this one is f32).

use super::config::Config;
use super::ops::{layer_norm, linear, matmul_rows, rope, to_vec_f32};
use crate::error::Result;
use crate::weights::Weights;
use candle_core::Tensor;

/// One layer's indexer weights.
#[derive(Debug, Clone)]
pub struct Indexer {
    wq_b: Tensor,
    wk: Tensor,
    /// The keys' LayerNorm: weight and bias.
    k_norm: (Tensor, Tensor),
    weights_proj: Tensor,
    /// Heads.
    pub heads: usize,
    /// Head dims.
    pub head_dim: usize,
    rope_dim: usize,
    /// Tokens kept per query.
    pub topk: usize,
}

impl Indexer {
    /// The indexer of layer `i`.
    pub fn load(w: &Weights, cfg: &Config, i: usize) -> Result<Indexer> {
        let p = format!("layers.{i}.attn.indexer");
        let g = |n: &str| w.get(&format!("{p}.{n}"));
        Ok(Indexer {
            wq_b: g("wq_b.weight")?,
            wk: g("wk.weight")?,
            k_norm: (g("k_norm.weight")?, g("k_norm.bias")?),
            weights_proj: g("weights_proj.weight")?,
            heads: cfg.index_n_heads,
            head_dim: cfg.index_head_dim,
            rope_dim: cfg.qk_rope_head_dim,
            topk: cfg.index_topk,
        })
    }

    fn rope_front(&self, x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
        let r = rope(&x.narrow(2, 0, self.rope_dim)?, cos, sin, false)?;
        let rest = x.narrow(2, self.rope_dim, self.head_dim - self.rope_dim)?;
        Ok(Tensor::cat(&[r, rest], 2)?)
    }

    /// Keys `[N, head_dim]` of the normed hidden rows `x [N, dim]`: `LayerNorm(wk x)`, RoPE on
    /// the first `qk_rope` dims.
    pub fn keys(&self, x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
        let n = x.dim(0)?;
        let (w, b) = &self.k_norm;
        let k = layer_norm(&linear(x, &self.wk)?, w, b)?.reshape((n, 1, self.head_dim))?;
        Ok(self.rope_front(&k, cos, sin)?.reshape((n, self.head_dim))?)
    }

    /// Queries `[N, heads, head_dim]` from `qr [N, q_lora]` and head weights `[N, heads]`
    /// (`weights_proj(x) · heads^-0.5`).
    pub fn queries(
        &self,
        qr: &Tensor,
        x: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
    ) -> Result<(Tensor, Tensor)> {
        let n = qr.dim(0)?;
        let q = linear(qr, &self.wq_b)?.reshape((n, self.heads, self.head_dim))?;
        let w = (linear(x, &self.weights_proj)? * (self.heads as f64).powf(-0.5))?;
        Ok((self.rope_front(&q, cos, sin)?, w))
    }

    /// Index scores `[R, T]` of query rows (`q [R, heads, head_dim]`, `w [R, heads]`) against
    /// keys `[T, head_dim]`: `sum_h w_h · ReLU(q_h · k_t) · head_dim^-0.5`.
    pub fn scores(&self, q: &Tensor, w: &Tensor, keys: &Tensor) -> Result<Tensor> {
        let r = q.dim(0)?;
        let s = matmul_rows(&q.reshape((r * self.heads, self.head_dim))?, &keys.t()?)?
            .relu()?
            .reshape((r, self.heads, keys.dim(0)?))?;
        let s = s.broadcast_mul(&w.unsqueeze(2)?)?.sum(1)?;
        Ok((s * (self.head_dim as f64).powf(-0.5))?)
    }
}

/// The causal top-k of each row of `scores [R, T]`: row `r` ranks positions `0..=positions[r]`
/// (by score, ties to the earlier position) and keeps the best `topk`, all of them when fewer;
/// the rest of its `topk` entries are -1. Row-major `[R, topk]`.
pub fn causal_topk(scores: &Tensor, positions: &[usize], topk: usize) -> Result<Vec<i32>> {
    let (r, t) = scores.dims2()?;
    let s = to_vec_f32(scores)?;
    let mut out = vec![-1i32; r * topk];
    let mut order: Vec<usize> = Vec::with_capacity(t);
    for (row, &pos) in positions.iter().enumerate().take(r) {
        let s = &s[row * t..(row + 1) * t];
        order.clear();
        order.extend(0..=pos.min(t.saturating_sub(1)));
        if order.len() > topk {
            order.select_nth_unstable_by(topk - 1, |&a, &b| s[b].total_cmp(&s[a]).then(a.cmp(&b)));
            order.truncate(topk);
        }
        order.sort_unstable();
        for (j, &p) in order.iter().enumerate() {
            out[row * topk + j] = p as i32;
        }
    }
    Ok(out)
}
