//! Prefix caching: full KV blocks indexed by the tokens they hold and by everything before
//! them, so a request whose prompt starts like an earlier one reuses those blocks instead of
//! recomputing them.
//!
//! An entry's key is the chain hash of its block's tokens and its parent's key (the block
//! before it), and the entry keeps the tokens and the parent key to confirm a match. The cache
//! holds one reference on each of its blocks ([`PagedKvCache::retain_block`]), so a block
//! outlives the sequence that wrote it; a block only the cache holds is evictable, least
//! recently used first. Only full blocks are shared, and a sequence never writes a full block
//! again, so a shared block is read-only.

use crate::kv_cache::PagedKvCache;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

/// The key of a block holding `tokens` after the blocks keyed `parent` (0 for the first block).
pub fn chain_hash(parent: u64, tokens: &[u32]) -> u64 {
    // SipHash with fixed keys: the same on every run.
    #[allow(deprecated)]
    let mut h = std::hash::SipHasher::new();
    parent.hash(&mut h);
    tokens.hash(&mut h);
    h.finish()
}

#[derive(Debug, Clone)]
struct Entry {
    block: u32,
    parent: u64,
    tokens: Vec<u32>,
    last_used: u64,
}

/// The prefix cache (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct PrefixCache {
    map: HashMap<u64, Entry>,
    tick: u64,
    /// Prompt tokens looked up at admission.
    pub query_tokens: u64,
    /// Of those, tokens found cached.
    pub hit_tokens: u64,
}

impl PrefixCache {
    /// The cached full blocks that begin `tokens`, at most `(tokens.len() - 1) / block_size`
    /// of them (at least one token is always left to compute, for its logits), and their keys.
    /// A `block_size` of 0 finds nothing.
    pub fn lookup(&mut self, tokens: &[u32], block_size: usize) -> (Vec<u32>, Vec<u64>) {
        let (mut blocks, mut keys) = (Vec::new(), Vec::new());
        if block_size == 0 {
            return (blocks, keys);
        }
        let most = tokens.len().saturating_sub(1) / block_size;
        let mut parent = 0;
        self.tick += 1;
        for chunk in tokens.chunks_exact(block_size).take(most) {
            let key = chain_hash(parent, chunk);
            match self.map.get_mut(&key) {
                Some(e) if e.parent == parent && e.tokens == chunk => {
                    e.last_used = self.tick;
                    blocks.push(e.block);
                    keys.push(key);
                    parent = key;
                }
                _ => break,
            }
        }
        (blocks, keys)
    }

    /// Records `block` (full, holding `tokens` after the blocks keyed `parent`) under `key`,
    /// taking a reference on it, unless the key is cached already.
    pub fn insert(
        &mut self,
        cache: &mut PagedKvCache,
        key: u64,
        parent: u64,
        tokens: &[u32],
        block: u32,
    ) {
        self.tick += 1;
        if let Some(e) = self.map.get_mut(&key) {
            e.last_used = self.tick;
            return;
        }
        if cache.retain_block(block) {
            self.map.insert(
                key,
                Entry {
                    block,
                    parent,
                    tokens: tokens.to_vec(),
                    last_used: self.tick,
                },
            );
        }
    }

    /// Evicts the least recently used entry whose block only the cache holds, returning the
    /// block to the pool; `false` if there is none.
    pub fn evict_one(&mut self, cache: &mut PagedKvCache) -> bool {
        let victim = self
            .map
            .iter()
            .filter(|(_, e)| cache.refcount(e.block) == 1)
            .min_by_key(|(_, e)| e.last_used)
            .map(|(&k, _)| k);
        match victim.and_then(|k| self.map.remove(&k)) {
            Some(e) => cache.release_block(e.block),
            None => false,
        }
    }

    /// Drops every entry (blocks only the cache held return to the pool).
    pub fn clear(&mut self, cache: &mut PagedKvCache) {
        for (_, e) in self.map.drain() {
            cache.release_block(e.block);
        }
    }

    /// The cached blocks.
    pub fn blocks(&self) -> impl Iterator<Item = u32> + '_ {
        self.map.values().map(|e| e.block)
    }

    /// Blocks cached.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Cached blocks only the cache holds (evictable now).
    pub fn evictable(&self, cache: &PagedKvCache) -> usize {
        self.map
            .values()
            .filter(|e| cache.refcount(e.block) == 1)
            .count()
    }
}
