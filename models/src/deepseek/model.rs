//! The whole model: embedding, layers (MLA + indexer, then a dense MLP or the MoE), final norm
//! and head, over paged caches (one latent cache and one index-key cache per layer, owned by
//! the [`CacheEngine`]). One forward pass reads a [`Batch`] the cache manager built.

use super::cache::{CacheEngine, IndexKeys, LayerCache};
use super::config::Config;
use super::indexer::{Indexer, IndexerCall};
use super::mla::Mla;
use super::moe::{Mlp, Moe};
use super::ops::{linear, rms_norm, rope_tables, with_row_invariance, Timers};
use crate::batch::Batch;
use crate::error::{ModelError, Result};
use crate::kv_cache::CopyBlock;
use crate::weights::Weights;
use candle_core::{Device, Tensor};
use tileops_ops::{
    flash_attention_varlen, reshape_and_cache, sparse_paged_attention, Backend,
    FlashAttentionParams, SparseAttentionParams,
};

enum Ffn {
    Dense(Mlp),
    Moe(Moe),
}

/// One decoder layer: attention (MLA with the indexer's top-k, or dense over a fresh prompt),
/// then a dense MLP or the MoE, each behind an RMSNorm and a residual.
struct Layer {
    attn_norm: Tensor,
    ffn_norm: Tensor,
    mla: Mla,
    indexer: Indexer,
    ffn: Ffn,
}

/// Which cached positions a query row's sparse attention reads (the retrieval report compares
/// them; the model itself uses [`Selection::Indexer`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Selection {
    /// The lightning indexer's causal top-k (the model as trained).
    #[default]
    Indexer,
    /// `index_topk` positions drawn uniformly, without repeats, among the row's visible ones
    /// (all of them when fewer), from `seed`, the layer and the row's position.
    Random {
        /// Seed of the draw.
        seed: u64,
    },
    /// Every visible position: dense attention through the same sparse op (the ceiling).
    Dense,
}

/// The indices `[rows, width]` of `selection` (not [`Selection::Indexer`]) for rows at
/// `positions`: ascending positions, -1 padded; the width is `topk` (random) or the longest
/// row's visible positions (dense).
fn chosen_positions(
    selection: Selection,
    positions: &[usize],
    topk: usize,
    layer: usize,
) -> (Vec<i32>, usize) {
    let width = match selection {
        Selection::Dense => positions.iter().map(|p| p + 1).max().unwrap_or(1),
        _ => topk,
    };
    let mut out = vec![-1i32; positions.len() * width];
    let mut pool: Vec<usize> = Vec::new();
    for (row, &p) in positions.iter().enumerate() {
        pool.clear();
        pool.extend(0..=p);
        if let Selection::Random { seed } = selection {
            if pool.len() > width {
                let mut rng = crate::weights::Rng(
                    seed ^ (layer as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
                        ^ (p as u64).wrapping_mul(0xbf58_476d_1ce4_e5b9),
                );
                for i in 0..width {
                    let j = i + (rng.next_u64() % (pool.len() - i) as u64) as usize;
                    pool.swap(i, j);
                }
                pool.truncate(width);
                pool.sort_unstable();
            }
        }
        for (j, &q) in pool.iter().take(width).enumerate() {
            out[row * width + j] = q as i32;
        }
    }
    (out, width)
}

/// What every layer of one forward pass reads, made once from the [`Batch`].
struct StepInputs<'a> {
    batch: &'a Batch,
    cos: Tensor,
    sin: Tensor,
    /// Each row's cache slot, `[rows]`.
    slots: Tensor,
    /// Each row's block table, `[rows, table_width]`.
    table: Tensor,
    /// Each row's visible positions (its position + 1), `[rows]` I32.
    context_lens: Tensor,
    /// The packed row offsets when the batch takes the dense prefill path.
    dense: Option<Tensor>,
    scale: f32,
    topk: usize,
    kv_lora_rank: usize,
    batch_invariant: bool,
    selection: Selection,
    layer: usize,
}

impl Layer {
    /// The layer on `x` (`[rows, dim]`), writing the rows' latent and index-key cache entries;
    /// with the sparse path, also the layer's sparse-attention call.
    fn forward(
        &self,
        x: Tensor,
        step: &StepInputs<'_>,
        cache: &LayerCache,
        backend: Backend,
        t: &Timers,
    ) -> Result<(Tensor, Option<AttentionCall>)> {
        let dev = &Device::Cpu;
        let (batch, cos, sin) = (step.batch, &step.cos, &step.sin);
        let h = rms_norm(&x, &self.attn_norm)?;
        let q = t.time("mla projections (candle)", || {
            self.mla.queries(&h, cos, sin)
        })?;
        let rows = t.time("mla projections (candle)", || {
            self.mla.latent_rows(&h, cos, sin)
        })?;
        t.time("reshape_and_cache", || {
            reshape_and_cache(&rows, &cache.latent, &step.slots, Some(backend))
                .map_err(ModelError::from)
        })?;
        // The indexer's keys go into their cache either way: later steps rank them. Their
        // write is timed with the latent rows': `reshape_and_cache` for f32 keys (on TileSim a
        // kernel launch), the host's quantising append for FP8 keys.
        let k = t.time("indexer projections (candle)", || {
            self.indexer.keys(&h, cos, sin)
        })?;
        t.time("reshape_and_cache", || {
            self.indexer
                .append(&k, &cache.index_keys, &step.slots, backend)
        })?;
        let mut call = None;
        let a = match &step.dense {
            // Every token keeps all of its causal context: dense causal attention over the new
            // rows, in the non-absorbed form.
            Some(cu) => {
                let (k, v) = t.time("mla expand (candle)", || self.mla.expand_latent(&rows))?;
                let qf = self.mla.full_queries(&q)?;
                let params = FlashAttentionParams::new(step.scale, true);
                let (o, _lse) = t.time("flash_attention", || {
                    flash_attention_varlen(&qf, &k, &v, cu, cu, &params, Some(backend))
                        .map_err(ModelError::from)
                })?;
                t.time("mla output (candle)", || self.mla.output_heads(&o))?
            }
            None => {
                // Each row's causal top-k of the indexer's scores (or the report's other choices).
                let topk = step.topk;
                let (indices, indexer) = if step.selection == Selection::Indexer {
                    let c = t.time("indexer projections (candle)", || {
                        let (qi, wi) = self.indexer.queries(&q.qr, &h, cos, sin)?;
                        self.indexer.call(
                            &qi,
                            &wi,
                            &cache.index_keys,
                            &step.table,
                            &step.context_lens,
                        )
                    })?;
                    (t.time("lightning_indexer", || c.run(backend))?, Some(c))
                } else {
                    let (all, width) =
                        chosen_positions(step.selection, &batch.positions, topk, step.layer);
                    (Tensor::from_vec(all, (batch.len(), width), dev)?, None)
                };
                let qa = t.time("mla absorb (candle)", || self.mla.absorb(&q))?;
                let mut params = SparseAttentionParams::new(step.kv_lora_rank, step.scale);
                params.batch_invariant = step.batch_invariant;
                let (o, _lse) = t.time("sparse_paged_attention", || {
                    sparse_paged_attention(
                        &qa,
                        &cache.latent,
                        &indices,
                        &step.table,
                        &params,
                        Some(backend),
                    )
                    .map_err(ModelError::from)
                })?;
                call = Some(AttentionCall {
                    q: qa,
                    cache: cache.latent.clone(),
                    indices,
                    table: step.table.clone(),
                    params,
                    indexer,
                });
                t.time("mla output (candle)", || self.mla.output(&o))?
            }
        };
        let x = (x + a)?;
        let h = rms_norm(&x, &self.ffn_norm)?;
        let f = match &self.ffn {
            Ffn::Dense(m) => t.time("dense mlp (candle)", || m.forward(&h))?,
            Ffn::Moe(m) => m.forward(&h, backend, t)?,
        };
        Ok(((x + f)?, call))
    }
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
    /// The indexer call that chose `indices` (`None` when the retrieval report's baselines
    /// chose them).
    pub indexer: Option<IndexerCall>,
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
    caches: CacheEngine,
    /// Per-op wall time.
    pub timers: Timers,
    /// The last sparse-attention call of layer 0.
    pub last_attention: Option<AttentionCall>,
    /// Each layer's selected positions `[rows, width]` (i32 logical positions, -1 padded) in
    /// the last forward pass; `None` for a layer that took the dense prefill.
    pub last_indices: Vec<Option<Tensor>>,
    /// Prefill of fresh prompts no longer than `index_topk` runs the non-absorbed form through
    /// `flash_attention_varlen` (the default); `false` sends it through the indexer and
    /// `sparse_paged_attention` like longer prompts (the tests compare the two).
    pub dense_prefill: bool,
    /// Batch-invariant numerics: every candle matmul of the model row-invariant
    /// (`ops::matmul_rows`'s padding) and sparse attention with the batch-invariant plan
    /// (`SparseAttentionParams::batch_invariant`). With it (and `dense_prefill` off) a row's
    /// logits have the same bits whatever else is in its batch, and a prompt prefilled in one
    /// chunk or several, or recomputed, caches the same rows. Off by default (it slows a
    /// single-sequence decode step).
    pub batch_invariant: bool,
    /// Which positions sparse attention reads: the indexer's top-k (the default), or the
    /// retrieval report's baselines (random positions, every position).
    pub selection: Selection,
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
            });
        }
        let caches = CacheEngine::new(
            cfg.n_layers,
            cfg.kv_lora_rank + cfg.qk_rope_head_dim,
            cfg.index_head_dim,
            num_blocks,
            block_size,
            IndexKeys::F32,
        )?;
        Ok(Model {
            cfg: cfg.clone(),
            embed: weights.get("embed.weight")?,
            layers,
            norm: weights.get("norm.weight")?,
            head: weights.get("head.weight")?,
            freqs: cfg.rope_freqs(),
            caches,
            timers: Timers::default(),
            last_attention: None,
            last_indices: vec![None; cfg.n_layers],
            dense_prefill: true,
            batch_invariant: false,
            selection: Selection::Indexer,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The per-layer caches.
    pub fn caches(&self) -> &CacheEngine {
        &self.caches
    }

    /// Stores the indexer's keys as `keys` from now on: every layer's caches are allocated
    /// anew (zeroed), so call it before anything is cached (the engine's
    /// [`crate::engine::Engine::set_index_keys`] checks that).
    ///
    /// # Errors
    /// [`ModelError::Invalid`] for FP8 keys when `index_head_dim` is past 128.
    pub fn set_index_keys(&mut self, keys: IndexKeys) -> Result<()> {
        self.caches = CacheEngine::new(
            self.cfg.n_layers,
            self.cfg.kv_lora_rank + self.cfg.qk_rope_head_dim,
            self.cfg.index_head_dim,
            self.caches.num_blocks(),
            self.caches.block_size(),
            keys,
        )?;
        Ok(())
    }

    /// Applies a copy-on-write of the cache manager to every cache.
    pub fn copy_block(&self, c: CopyBlock, backend: Backend) -> Result<()> {
        self.caches.copy_block(c, backend)
    }

    /// Runs the batch's tokens through every layer (writing their cache rows) and returns the
    /// logits `[logit_rows.len(), vocab]` of the chosen rows.
    pub fn forward(
        &mut self,
        batch: &Batch,
        logit_rows: &[usize],
        backend: Backend,
    ) -> Result<Tensor> {
        let n = batch.len();
        let dev = &Device::Cpu;
        if n == 0 {
            return Err(ModelError::Invalid("an empty batch".into()));
        }
        let rows_agree = batch.positions.len() == n
            && batch.slots.len() == n
            && batch.table_width >= 1
            && n.checked_mul(batch.table_width) == Some(batch.tables.len());
        if !rows_agree {
            return Err(ModelError::Invalid(format!(
                "a batch of {n} tokens with {} positions, {} slots and a {}-entry table of width \
                 {} (build it with PagedKvCache::batch)",
                batch.positions.len(),
                batch.slots.len(),
                batch.tables.len(),
                batch.table_width
            )));
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
        if let Some(&r) = logit_rows.iter().find(|&&r| r >= n) {
            return Err(ModelError::Invalid(format!(
                "logit row {r} of a batch of {n} rows"
            )));
        }
        let ids = Tensor::from_slice(&batch.tokens, n, dev)?;
        let mut x = self.embed.index_select(&ids, 0)?;
        let (cos, sin) = rope_tables(&self.freqs, &batch.positions)?;
        let topk = self.cfg.index_topk;
        let dense = self
            .dense_prefill
            .then(|| prefill_offsets(batch, topk))
            .flatten()
            .map(|cu| Tensor::from_vec(cu, batch.seqs.len() + 1, dev))
            .transpose()?;
        let mut step = StepInputs {
            batch,
            cos,
            sin,
            slots: Tensor::from_slice(&batch.slots, n, dev)?,
            table: Tensor::from_slice(&batch.tables, (n, batch.table_width), dev)?,
            context_lens: Tensor::from_vec(context_lens(&batch.positions)?, n, dev)?,
            dense,
            scale: self.cfg.softmax_scale(),
            topk,
            kv_lora_rank: self.cfg.kv_lora_rank,
            batch_invariant: self.batch_invariant,
            selection: self.selection,
            layer: 0,
        };
        with_row_invariance(self.batch_invariant, || {
            for (li, (l, cache)) in self.layers.iter().zip(self.caches.layers()).enumerate() {
                step.layer = li;
                let (y, call) = l.forward(x, &step, cache, backend, &self.timers)?;
                x = y;
                if let Some(slot) = self.last_indices.get_mut(li) {
                    *slot = call.as_ref().map(|c| c.indices.clone());
                }
                if li == 0 && call.is_some() {
                    self.last_attention = call;
                }
            }
            let idx: Vec<u32> = logit_rows.iter().map(|&r| r as u32).collect();
            let idx = Tensor::from_vec(idx, logit_rows.len(), dev)?;
            let last = rms_norm(&x.index_select(&idx, 0)?, &self.norm)?;
            self.timers
                .time("head (candle)", || linear(&last, &self.head))
        })
    }
}

/// Each row's visible positions, `position + 1`, as the indexer op takes them.
fn context_lens(positions: &[usize]) -> Result<Vec<i32>> {
    positions
        .iter()
        .map(|&p| {
            i32::try_from(p + 1).map_err(|_| ModelError::Invalid(format!("position {p} past i32")))
        })
        .collect()
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
