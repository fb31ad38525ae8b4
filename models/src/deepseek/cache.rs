//! The cache engine: the per-layer cache tensors the model's attention reads and writes (the
//! MLA latent rows and the indexer's keys), sized by the block pool the cache manager
//! ([`crate::kv_cache::PagedKvCache`]) accounts for, so that one block id names the same rows in
//! every layer's caches.

use crate::error::Result;
use crate::kv_cache::CopyBlock;
use candle_core::{DType, Device, Tensor};
use tileops_ops::{reshape_and_cache, Backend};

/// One layer's caches.
#[derive(Debug, Clone)]
pub struct LayerCache {
    /// Latent cache `[num_blocks, block_size, kv_lora_rank + qk_rope_head_dim]`.
    pub latent: Tensor,
    /// Index-key cache `[num_blocks, block_size, index_head_dim]`.
    pub index_keys: Tensor,
}

/// Every layer's caches over one pool of `num_blocks` blocks of `block_size` slots.
#[derive(Debug, Clone)]
pub struct CacheEngine {
    layers: Vec<LayerCache>,
    num_blocks: usize,
    block_size: usize,
}

impl CacheEngine {
    /// Zeroed caches for `layers` layers of latent rows `latent_dim` wide and index keys
    /// `index_dim` wide. The caller checks the pool's limits first
    /// ([`crate::engine::check_pool`]).
    pub fn new(
        layers: usize,
        latent_dim: usize,
        index_dim: usize,
        num_blocks: usize,
        block_size: usize,
    ) -> Result<CacheEngine> {
        let dev = &Device::Cpu;
        let layers = (0..layers)
            .map(|_| {
                Ok(LayerCache {
                    latent: Tensor::zeros((num_blocks, block_size, latent_dim), DType::F32, dev)?,
                    index_keys: Tensor::zeros(
                        (num_blocks, block_size, index_dim),
                        DType::F32,
                        dev,
                    )?,
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
    /// every cache of every layer.
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
}
