//! The cache engine: the per-layer cache tensors the model's attention reads and writes (the
//! MLA latent rows and the indexer's keys), sized by the block pool the cache manager
//! ([`crate::kv_cache::PagedKvCache`]) accounts for, so that one block id names the same rows in
//! every layer's caches.

use crate::error::{ModelError, Result};
use crate::kv_cache::CopyBlock;
use candle_core::{DType, Device, Tensor};
use tileops_ops::{reshape_and_cache, Backend, IndexKeyCache, ScaleFormat, FP8_GROUP};

/// How the index-key caches store the indexer's keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IndexKeys {
    /// f32 keys of `index_head_dim` values (the default; the model as trained).
    #[default]
    F32,
    /// DeepSeek-V3.2's FP8 index cache: each key zero-padded to a multiple of 128 values,
    /// Hadamard-rotated, and quantised to e4m3 with one scale per 128 values in `ScaleFormat`
    /// on the way in (`index_cache_append`, on the host whatever the backend); queries are
    /// padded, rotated and quantised the same way (`quantize_index_q`, their scales folded into
    /// the head weights). The padding adds zeros to every dot product, the rotation is
    /// orthogonal, so only the FP8 rounding changes the scores.
    Fp8(ScaleFormat),
}

impl IndexKeys {
    /// Values per stored key for keys of `dim` values: `dim`, or `dim` rounded up to 128.
    pub fn stored_dim(self, dim: usize) -> usize {
        match self {
            IndexKeys::F32 => dim,
            IndexKeys::Fp8(_) => dim.div_ceil(FP8_GROUP).max(1) * FP8_GROUP,
        }
    }
}

/// One layer's caches.
#[derive(Debug, Clone)]
pub struct LayerCache {
    /// Latent cache `[num_blocks, block_size, kv_lora_rank + qk_rope_head_dim]`.
    pub latent: Tensor,
    /// Index-key cache `[num_blocks, block_size, IndexKeys::stored_dim(index_head_dim)]`, in
    /// the engine's [`IndexKeys`] format.
    pub index_keys: IndexKeyCache,
}

/// Every layer's caches over one pool of `num_blocks` blocks of `block_size` slots.
#[derive(Debug, Clone)]
pub struct CacheEngine {
    layers: Vec<LayerCache>,
    num_blocks: usize,
    block_size: usize,
}

impl CacheEngine {
    /// Zeroed caches for `layers` layers of latent rows `latent_dim` wide and index keys of
    /// `index_dim` values stored as `index_keys`. The caller checks the pool's limits first
    /// ([`crate::engine::check_pool`]).
    pub fn new(
        layers: usize,
        latent_dim: usize,
        index_dim: usize,
        num_blocks: usize,
        block_size: usize,
        index_keys: IndexKeys,
    ) -> Result<CacheEngine> {
        let dev = &Device::Cpu;
        let stored = index_keys.stored_dim(index_dim);
        if matches!(index_keys, IndexKeys::Fp8(_)) && stored != FP8_GROUP {
            return Err(ModelError::Invalid(format!(
                "FP8 index keys need index_head_dim <= {FP8_GROUP} (one scale per key), not \
                 {index_dim}"
            )));
        }
        let layers = (0..layers)
            .map(|_| {
                let keys = match index_keys {
                    IndexKeys::F32 => {
                        IndexKeyCache::zeros(num_blocks, block_size, stored, DType::F32, dev)
                    }
                    IndexKeys::Fp8(fmt) => {
                        IndexKeyCache::zeros_fp8(num_blocks, block_size, stored, fmt, dev)
                    }
                }
                .map_err(ModelError::from)?;
                Ok(LayerCache {
                    latent: Tensor::zeros((num_blocks, block_size, latent_dim), DType::F32, dev)?,
                    index_keys: keys,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(CacheEngine {
            layers,
            num_blocks,
            block_size,
        })
    }

    /// Layer `i`'s caches.
    pub fn layer(&self, i: usize) -> Option<&LayerCache> {
        self.layers.get(i)
    }

    /// Every layer's caches, in layer order.
    pub fn layers(&self) -> &[LayerCache] {
        &self.layers
    }

    /// Blocks in the pool.
    pub fn num_blocks(&self) -> usize {
        self.num_blocks
    }

    /// Slots per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Applies a copy-on-write of the cache manager (block `src`'s rows into block `dst`) to
    /// every cache of every layer: through `reshape_and_cache` on `backend` for f32 rows; FP8
    /// codes and their scales are copied as they are, on the host (no kernel writes them).
    pub fn copy_block(&self, c: CopyBlock, backend: Backend) -> Result<()> {
        let bs = self.block_size as i64;
        let slots: Vec<i64> = (0..bs).map(|j| c.dst as i64 * bs + j).collect();
        let slots = Tensor::from_vec(slots, self.block_size, &Device::Cpu)?;
        let (src, dst) = (c.src as usize, c.dst as usize);
        for l in &self.layers {
            let mut f32_caches = vec![&l.latent];
            match l.index_keys.scales() {
                None => f32_caches.push(l.index_keys.data()),
                Some(scales) => {
                    for t in [l.index_keys.data(), scales] {
                        t.slice_set(&t.narrow(0, src, 1)?.copy()?, 0, dst)?;
                    }
                }
            }
            for cache in f32_caches {
                let rows = cache.narrow(0, src, 1)?.squeeze(0)?.copy()?;
                reshape_and_cache(&rows, cache, &slots, Some(backend))?;
            }
        }
        Ok(())
    }
}
