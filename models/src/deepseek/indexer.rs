//! The lightning indexer: per-token keys in their own paged cache, per-head ReLU scores
//! weighted by a learned per-head weight, and a causal top-k of the sequence's tokens.
//!
//! The projections are candle code; the scores and the top-k are the `lightning_indexer` op
//! ([`Indexer::call`], [`IndexerCall::run`]) on the model's backend, over an f32 key cache
//! (the model as trained) or DeepSeek-V3.2's FP8 one ([`super::cache::IndexKeys::Fp8`]: keys
//! and queries padded to 128 values, Hadamard-rotated and quantised, as V3.2 does). [`Indexer::scores`] and
//! [`causal_topk`] are the same selection in candle code, for training and tests.

use super::config::Config;
use super::ops::{layer_norm, linear, matmul_rows, rope, to_vec_f32};
use crate::error::{ModelError, Result};
use crate::weights::Weights;
use candle_core::Tensor;
use tileops_ops::{
    hadamard_rotate, index_cache_append, lightning_indexer, quantize_index_q, reshape_and_cache,
    scales_to_f32, Backend, Fp8Conversion, IndexKeyCache, IndexKeyFormat, LightningIndexerParams,
};

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

    /// `x [N, .., head_dim]` zero-padded on its last dim to `width` and Hadamard-rotated: the
    /// FP8 cache's form of keys and queries.
    fn fp8_form(&self, x: &Tensor, width: usize) -> Result<Tensor> {
        let last = x.rank() - 1;
        let x = if width > self.head_dim {
            x.pad_with_zeros(last, 0, width - self.head_dim)?
        } else {
            x.clone()
        };
        Ok(hadamard_rotate(&x)?)
    }

    /// Writes keys `k [N, head_dim]` (from [`Indexer::keys`]) into slots `slots [N]` of
    /// `cache`: f32 rows through `reshape_and_cache` on `backend`; an FP8 cache pads, rotates
    /// and quantises them on the way in (`index_cache_append`, on the host: no tile kernel
    /// quantises into the cache yet).
    pub fn append(
        &self,
        k: &Tensor,
        cache: &IndexKeyCache,
        slots: &Tensor,
        backend: Backend,
    ) -> Result<()> {
        match cache.format() {
            IndexKeyFormat::Fp8(_) => {
                let kp = self.fp8_form(k, cache.dims().2)?;
                index_cache_append(
                    cache,
                    &kp,
                    slots,
                    Fp8Conversion::default(),
                    Some(Backend::Reference),
                )?;
            }
            IndexKeyFormat::Dense(_) => reshape_and_cache(k, cache.data(), slots, Some(backend))?,
        }
        Ok(())
    }

    /// The `lightning_indexer` call that selects the causal top-k of query rows (`q [R, heads,
    /// head_dim]`, `w [R, heads]` from [`Indexer::queries`]) over `cache`, row `r` seeing
    /// `context_lens[r]` positions through its `table [R, max_blocks]` row. The score scale
    /// `head_dim^-0.5` is folded into the weights (as [`Indexer::scores`] applies it); with an
    /// FP8 cache q is padded, rotated and quantised per 128 values in the keys' scale format,
    /// its scales folded into the weights.
    pub fn call(
        &self,
        q: &Tensor,
        w: &Tensor,
        cache: &IndexKeyCache,
        table: &Tensor,
        context_lens: &Tensor,
    ) -> Result<IndexerCall> {
        let w = (w * (self.head_dim as f64).powf(-0.5))?;
        let (q, weights) = match cache.format() {
            IndexKeyFormat::Fp8(fmt) => {
                let width = cache.dims().2;
                if width != tileops_ops::FP8_GROUP {
                    return Err(ModelError::Invalid(format!(
                        "an FP8 index key of {width} values: q folds one scale per head into its \
                         weight, so a key must be one group of {} values",
                        tileops_ops::FP8_GROUP
                    )));
                }
                let qp = self.fp8_form(q, width)?;
                let (codes, qs) = quantize_index_q(&qp, fmt, Fp8Conversion::default())?;
                // One scale per head (one group of 128 values): folded into its weight.
                let qs = scales_to_f32(&qs)?.squeeze(2)?;
                (codes, (w * qs)?)
            }
            IndexKeyFormat::Dense(_) => (q.clone(), w),
        };
        Ok(IndexerCall {
            q,
            weights,
            cache: cache.clone(),
            table: table.clone(),
            context_lens: context_lens.clone(),
            params: LightningIndexerParams::new(self.topk),
        })
    }
}

/// One `lightning_indexer` call with its inputs as the op takes them (q and weights prepared
/// for the cache's format), kept to run again, e.g. to estimate its Ascend 950 time.
#[derive(Debug, Clone)]
pub struct IndexerCall {
    /// `[R, heads, D]`: f32, or the FP8 codes of an FP8 cache's q.
    pub q: Tensor,
    /// `[R, heads]` f32, the score scale (and FP8 q's scales) folded in.
    pub weights: Tensor,
    /// The key cache (shares the model's storage).
    pub cache: IndexKeyCache,
    /// `[R, max_blocks]`.
    pub table: Tensor,
    /// `[R]` I32.
    pub context_lens: Tensor,
    /// Its parameters.
    pub params: LightningIndexerParams,
}

impl IndexerCall {
    /// Runs the call on `backend`: the indices `[R, topk]` (I32 logical positions by
    /// descending score, ties to the earlier position, -1 padded).
    pub fn run(&self, backend: Backend) -> Result<Tensor> {
        let (indices, _) = lightning_indexer(
            &self.q,
            &self.weights,
            &self.cache,
            &self.table,
            &self.context_lens,
            &self.params,
            Some(backend),
        )?;
        Ok(indices)
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
