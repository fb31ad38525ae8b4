//! The whole model: embedding, layers (MLA + indexer, then a dense MLP or the MoE), final norm
//! and head, over paged caches (one latent cache and one index-key cache per layer).

use super::config::Config;
use super::indexer::{causal_topk, Indexer};
use super::mla::Mla;
use super::moe::{Mlp, Moe};
use super::ops::{linear, rms_norm, rope_tables, ModelError, Result, Timers};
use crate::kv_cache::CopyBlock;
use crate::weights::Weights;
use candle_core::{DType, Device, Tensor};
use tileops_ops::{
    flash_attention_varlen, reshape_and_cache, sparse_paged_attention, Backend,
    FlashAttentionParams, SparseAttentionParams,
};

/// One sequence's part of a [`Batch`].
#[derive(Debug, Clone)]
pub struct SeqRows {
    /// The sequence's block table.
    pub table: Vec<u32>,
    /// The slot of every cached position `0..len` (new tokens included).
    pub slots: Vec<i64>,
    /// Its first row in the batch; its rows are consecutive, positions increasing.
    pub first_row: usize,
    /// Its new rows.
    pub rows: usize,
}

/// The new tokens of a forward pass: one row per token.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    /// Token ids, one per row.
    pub tokens: Vec<u32>,
    /// Each row's position in its sequence.
    pub positions: Vec<usize>,
    /// Each row's cache slot.
    pub slots: Vec<i64>,
    /// The sequences, in row order.
    pub seqs: Vec<SeqRows>,
}

enum Ffn {
    Dense(Mlp),
    Moe(Moe),
}

struct Layer {
    attn_norm: Tensor,
    ffn_norm: Tensor,
    mla: Mla,
    indexer: Indexer,
    ffn: Ffn,
    /// Latent cache `[num_blocks, block_size, kv_lora + qk_rope]`.
    latent: Tensor,
    /// Index-key cache `[num_blocks, block_size, index_head_dim]`.
    index_keys: Tensor,
}

/// The inputs of one sparse-attention call, kept to estimate its Ascend 950 time.
#[derive(Debug, Clone)]
pub struct AttentionCall {
    /// `[N, H, kv_lora + qk_rope]`.
    pub q: Tensor,
    /// The latent cache.
    pub cache: Tensor,
    /// `[N, index_topk]`.
    pub indices: Tensor,
    /// `[N, max_blocks]`.
    pub table: Tensor,
    /// Its parameters.
    pub params: SparseAttentionParams,
}

impl AttentionCall {
    /// Runs the call on `backend`: `(out, lse)`.
    pub fn run(&self, backend: Backend) -> Result<(Tensor, Tensor)> {
        Ok(sparse_paged_attention(
            &self.q,
            &self.cache,
            &self.indices,
            &self.table,
            &self.params,
            Some(backend),
        )?)
    }
}

/// The model.
pub struct Model {
    cfg: Config,
    embed: Tensor,
    layers: Vec<Layer>,
    norm: Tensor,
    head: Tensor,
    freqs: Vec<f32>,
    block_size: usize,
    /// Per-op wall time.
    pub timers: Timers,
    /// The last sparse-attention call of layer 0.
    pub last_attention: Option<AttentionCall>,
    /// Prefill of fresh prompts no longer than `index_topk` runs the non-absorbed form through
    /// `flash_attention_varlen` (the default); `false` sends it through the indexer and
    /// `sparse_paged_attention` like longer prompts (the tests compare the two).
    pub dense_prefill: bool,
}

impl Model {
    /// The model of `cfg` with `weights` and caches of `num_blocks` blocks of `block_size`.
    pub fn new(
        cfg: &Config,
        weights: &Weights,
        num_blocks: usize,
        block_size: usize,
    ) -> Result<Model> {
        cfg.validate()
            .map_err(|e| ModelError::Invalid(e.to_string()))?;
        let dev = &Device::Cpu;
        let mut layers = Vec::with_capacity(cfg.n_layers);
        for i in 0..cfg.n_layers {
            let ffn = if i < cfg.n_dense_layers {
                Ffn::Dense(Mlp::load(weights, &format!("layers.{i}.ffn"))?)
            } else {
                Ffn::Moe(Moe::load(weights, cfg, i)?)
            };
            layers.push(Layer {
                attn_norm: weights.get(&format!("layers.{i}.attn_norm.weight"))?,
                ffn_norm: weights.get(&format!("layers.{i}.ffn_norm.weight"))?,
                mla: Mla::load(weights, cfg, i)?,
                indexer: Indexer::load(weights, cfg, i)?,
                ffn,
                latent: Tensor::zeros(
                    (
                        num_blocks,
                        block_size,
                        cfg.kv_lora_rank + cfg.qk_rope_head_dim,
                    ),
                    DType::F32,
                    dev,
                )?,
                index_keys: Tensor::zeros(
                    (num_blocks, block_size, cfg.index_head_dim),
                    DType::F32,
                    dev,
                )?,
            });
        }
        Ok(Model {
            cfg: cfg.clone(),
            embed: weights.get("embed.weight")?,
            layers,
            norm: weights.get("norm.weight")?,
            head: weights.get("head.weight")?,
            freqs: cfg.rope_freqs(),
            block_size,
            timers: Timers::default(),
            last_attention: None,
            dense_prefill: true,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Applies a copy-on-write of the cache manager to every cache.
    pub fn copy_block(&self, c: CopyBlock, backend: Backend) -> Result<()> {
        let bs = self.block_size as i64;
        let slots: Vec<i64> = (0..bs).map(|j| c.dst as i64 * bs + j).collect();
        let slots = Tensor::from_vec(slots, self.block_size, &Device::Cpu)?;
        for l in &self.layers {
            for cache in [&l.latent, &l.index_keys] {
                let rows = cache.narrow(0, c.src as usize, 1)?.squeeze(0)?.copy()?;
                reshape_and_cache(&rows, cache, &slots, Some(backend))?;
            }
        }
        Ok(())
    }

    /// Runs the batch's tokens through every layer (writing their cache rows) and returns the
    /// logits `[rows.len(), vocab]` of the chosen rows.
    pub fn forward(
        &mut self,
        batch: &Batch,
        logit_rows: &[usize],
        backend: Backend,
    ) -> Result<Tensor> {
        let n = batch.tokens.len();
        let dev = &Device::Cpu;
        if n == 0 {
            return Err(ModelError::Invalid("an empty batch".into()));
        }
        if let Some(&t) = batch
            .tokens
            .iter()
            .find(|&&t| t as usize >= self.cfg.vocab_size)
        {
            return Err(ModelError::Invalid(format!(
                "token {t} is outside the vocabulary of {}",
                self.cfg.vocab_size
            )));
        }
        let ids = Tensor::from_slice(&batch.tokens, n, dev)?;
        let mut x = self.embed.index_select(&ids, 0)?;
        let (cos, sin) = rope_tables(&self.freqs, &batch.positions)?;
        let slots = Tensor::from_slice(&batch.slots, n, dev)?;
        // Every row reads its own sequence's block table.
        let width = batch
            .seqs
            .iter()
            .map(|s| s.table.len())
            .max()
            .unwrap_or(1)
            .max(1);
        let mut table = vec![-1i32; n * width];
        for s in &batch.seqs {
            for r in s.first_row..s.first_row + s.rows {
                for (j, &b) in s.table.iter().enumerate() {
                    table[r * width + j] = b as i32;
                }
            }
        }
        let table = Tensor::from_vec(table, (n, width), dev)?;
        let scale = self.cfg.softmax_scale();
        let topk = self.cfg.index_topk;
        let dense = self
            .dense_prefill
            .then(|| prefill_offsets(batch, topk))
            .flatten();
        let dense = dense
            .map(|cu| Tensor::from_vec(cu, batch.seqs.len() + 1, dev))
            .transpose()?;
        let t = &self.timers;
        for (li, l) in self.layers.iter().enumerate() {
            let h = rms_norm(&x, &l.attn_norm)?;
            let q = t.time("mla projections (candle)", || l.mla.queries(&h, &cos, &sin))?;
            let rows = t.time("mla projections (candle)", || {
                l.mla.latent_rows(&h, &cos, &sin)
            })?;
            t.time("reshape_and_cache", || {
                reshape_and_cache(&rows, &l.latent, &slots, Some(backend)).map_err(ModelError::from)
            })?;
            // The indexer's keys go into their cache either way: later steps rank them. Their
            // write is the op's (on TileSim a kernel launch), timed with the latent rows'.
            let k = t.time("indexer (candle)", || l.indexer.keys(&h, &cos, &sin))?;
            t.time("reshape_and_cache", || {
                reshape_and_cache(&k, &l.index_keys, &slots, Some(backend))
                    .map_err(ModelError::from)
            })?;
            let a = match &dense {
                // Every token keeps all of its causal context: dense causal attention over
                // the new rows, in the non-absorbed form.
                Some(cu) => {
                    let (k, v) = t.time("mla expand (candle)", || l.mla.expand_latent(&rows))?;
                    let qf = l.mla.full_queries(&q)?;
                    let params = FlashAttentionParams::new(scale, true);
                    let (o, _lse) = t.time("flash_attention", || {
                        flash_attention_varlen(&qf, &k, &v, cu, cu, &params, Some(backend))
                            .map_err(ModelError::from)
                    })?;
                    t.time("mla output (candle)", || l.mla.output_heads(&o))?
                }
                None => {
                    // Each row's causal top-k of the indexer's scores.
                    let indices = t.time("indexer (candle)", || -> Result<Tensor> {
                        let (qi, wi) = l.indexer.queries(&q.qr, &h, &cos, &sin)?;
                        let flat = l.index_keys.reshape(((), l.indexer.head_dim))?;
                        let mut all = Vec::with_capacity(n * topk);
                        for s in &batch.seqs {
                            let sl = Tensor::from_slice(&s.slots, s.slots.len(), dev)?;
                            let keys = flat.index_select(&sl, 0)?;
                            let qs = qi.narrow(0, s.first_row, s.rows)?;
                            let ws = wi.narrow(0, s.first_row, s.rows)?;
                            let scores = l.indexer.scores(&qs, &ws, &keys)?;
                            let pos = &batch.positions[s.first_row..s.first_row + s.rows];
                            all.extend(causal_topk(&scores, pos, topk)?);
                        }
                        Ok(Tensor::from_vec(all, (n, topk), dev)?)
                    })?;
                    let qa = t.time("mla absorb (candle)", || l.mla.absorb(&q))?;
                    let params = SparseAttentionParams::new(self.cfg.kv_lora_rank, scale);
                    let (o, _lse) = t.time("sparse_paged_attention", || {
                        sparse_paged_attention(
                            &qa,
                            &l.latent,
                            &indices,
                            &table,
                            &params,
                            Some(backend),
                        )
                        .map_err(ModelError::from)
                    })?;
                    if li == 0 {
                        self.last_attention = Some(AttentionCall {
                            q: qa.clone(),
                            cache: l.latent.clone(),
                            indices: indices.clone(),
                            table: table.clone(),
                            params: params.clone(),
                        });
                    }
                    t.time("mla output (candle)", || l.mla.output(&o))?
                }
            };
            x = (x + a)?;
            let h = rms_norm(&x, &l.ffn_norm)?;
            let f = match &l.ffn {
                Ffn::Dense(m) => t.time("dense mlp (candle)", || m.forward(&h))?,
                Ffn::Moe(m) => m.forward(&h, backend, t)?,
            };
            x = (x + f)?;
        }
        let idx: Vec<u32> = logit_rows.iter().map(|&r| r as u32).collect();
        let idx = Tensor::from_vec(idx, logit_rows.len(), dev)?;
        let last = rms_norm(&x.index_select(&idx, 0)?, &self.norm)?;
        t.time("head (candle)", || linear(&last, &self.head))
    }
}

/// The packed row offsets `[0, rows_0, rows_0 + rows_1, ..]` of a batch whose sequences are
/// all fresh prompts (their new rows are their whole context) no longer than `topk`, so that
/// each row's causal top-k keeps every position up to its own and dense causal attention is
/// the same attention; `None` otherwise (decode rows, or a longer prompt).
pub fn prefill_offsets(batch: &Batch, topk: usize) -> Option<Vec<u32>> {
    let mut cu = vec![0u32];
    for s in &batch.seqs {
        if s.rows != s.slots.len() || s.rows > topk {
            return None;
        }
        cu.push(cu.last().copied().unwrap_or(0) + u32::try_from(s.rows).ok()?);
    }
    Some(cu)
}
