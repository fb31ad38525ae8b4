//! Paged KV-cache manager: a block allocator over a fixed pool, one block table per sequence,
//! slot mapping for new tokens, and prefix sharing by reference count.
//!
//! The manager owns no tensor: it hands out slot numbers (`block * block_size + offset`) that
//! the caller writes with `tileops_ops::reshape_and_cache`, and block tables that
//! `tileops_ops::sparse_paged_attention` reads. A forked sequence shares its parent's blocks;
//! the first append into a shared, partly filled last block gets a fresh block and a
//! [`CopyBlock`] the caller must apply (copy-on-write), so no two live sequences ever write the
//! same block.

use std::collections::BTreeMap;

/// Errors of the cache manager.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CacheError {
    /// The pool has fewer free blocks than the request needs (nothing was allocated).
    #[error("out of KV-cache blocks: need {needed}, {free} free of {total}")]
    OutOfBlocks {
        /// Blocks the request needs.
        needed: usize,
        /// Blocks free now.
        free: usize,
        /// Blocks in the pool.
        total: usize,
    },
    /// The sequence id is not live.
    #[error("unknown sequence {0}")]
    UnknownSequence(SeqId),
    /// A pool needs at least one block of at least one slot.
    #[error("a KV-cache pool needs num_blocks >= 1 and block_size >= 1 (got {0} x {1})")]
    EmptyPool(usize, usize),
}

/// A sequence handle.
pub type SeqId = u64;

/// A block copy the caller must apply to its cache tensors before writing the new slots:
/// every row of block `src` goes to block `dst` (copy-on-write of a shared block).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyBlock {
    /// The shared block.
    pub src: u32,
    /// The sequence's new private block.
    pub dst: u32,
}

/// What [`PagedKvCache::append`] reserved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Append {
    /// One slot per new token, in order.
    pub slots: Vec<i64>,
    /// A copy-on-write to apply first, if the last block was shared.
    pub copy: Option<CopyBlock>,
}

#[derive(Debug, Clone, Default)]
struct Sequence {
    blocks: Vec<u32>,
    len: usize,
}

/// The paged KV-cache manager.
#[derive(Debug, Clone)]
pub struct PagedKvCache {
    block_size: usize,
    refcount: Vec<u32>,
    free: Vec<u32>,
    seqs: BTreeMap<SeqId, Sequence>,
    next_id: SeqId,
}

impl PagedKvCache {
    /// A pool of `num_blocks` blocks of `block_size` slots, all free.
    pub fn new(num_blocks: usize, block_size: usize) -> Result<Self, CacheError> {
        if num_blocks == 0 || block_size == 0 || num_blocks > u32::MAX as usize {
            return Err(CacheError::EmptyPool(num_blocks, block_size));
        }
        Ok(PagedKvCache {
            block_size,
            refcount: vec![0; num_blocks],
            // Popped from the end: block 0 is handed out first.
            free: (0..num_blocks as u32).rev().collect(),
            seqs: BTreeMap::new(),
            next_id: 0,
        })
    }

    /// Slots per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// Blocks in the pool.
    pub fn num_blocks(&self) -> usize {
        self.refcount.len()
    }

    /// Blocks free now.
    pub fn free_blocks(&self) -> usize {
        self.free.len()
    }

    /// A new, empty sequence.
    pub fn add_sequence(&mut self) -> SeqId {
        let id = self.next_id;
        self.next_id += 1;
        self.seqs.insert(id, Sequence::default());
        id
    }

    fn seq(&self, id: SeqId) -> Result<&Sequence, CacheError> {
        self.seqs.get(&id).ok_or(CacheError::UnknownSequence(id))
    }

    /// Tokens cached for `id`.
    pub fn len(&self, id: SeqId) -> Result<usize, CacheError> {
        Ok(self.seq(id)?.len)
    }

    /// Whether `id` has no token cached.
    pub fn is_empty(&self, id: SeqId) -> Result<bool, CacheError> {
        Ok(self.seq(id)?.len == 0)
    }

    /// The block table of `id`.
    pub fn block_table(&self, id: SeqId) -> Result<&[u32], CacheError> {
        Ok(&self.seq(id)?.blocks)
    }

    /// Live sequence ids.
    pub fn sequences(&self) -> impl Iterator<Item = SeqId> + '_ {
        self.seqs.keys().copied()
    }

    /// How many sequences hold `block`.
    pub fn refcount(&self, block: u32) -> u32 {
        self.refcount.get(block as usize).copied().unwrap_or(0)
    }

    /// Reserves slots for `n` new tokens of `id`. All or nothing: on [`CacheError::OutOfBlocks`]
    /// the sequence and the pool are unchanged.
    pub fn append(&mut self, id: SeqId, n: usize) -> Result<Append, CacheError> {
        let bs = self.block_size;
        let s = self.seq(id)?;
        let (len, have) = (s.len, s.blocks.len());
        // A partly filled shared last block must be copied before it is written.
        let cow = match s.blocks.last() {
            Some(&b) if n > 0 && len % bs != 0 && self.refcount[b as usize] > 1 => Some(b),
            _ => None,
        };
        let new_blocks = (len + n).div_ceil(bs) - have + usize::from(cow.is_some());
        if new_blocks > self.free.len() {
            return Err(CacheError::OutOfBlocks {
                needed: new_blocks,
                free: self.free.len(),
                total: self.num_blocks(),
            });
        }
        let mut fresh: Vec<u32> = (0..new_blocks).filter_map(|_| self.free.pop()).collect();
        for &b in &fresh {
            self.refcount[b as usize] = 1;
        }
        let s = self
            .seqs
            .get_mut(&id)
            .ok_or(CacheError::UnknownSequence(id))?;
        let copy = match cow {
            Some(src) => {
                let dst = fresh.remove(0);
                self.refcount[src as usize] -= 1;
                if let Some(last) = s.blocks.last_mut() {
                    *last = dst;
                }
                Some(CopyBlock { src, dst })
            }
            None => None,
        };
        s.blocks.extend(fresh);
        let slots = (len..len + n)
            .map(|t| s.blocks[t / bs] as i64 * bs as i64 + (t % bs) as i64)
            .collect();
        s.len += n;
        Ok(Append { slots, copy })
    }

    /// A new sequence sharing all of `id`'s blocks (prefix sharing; reference counts go up).
    pub fn fork(&mut self, id: SeqId) -> Result<SeqId, CacheError> {
        let s = self.seq(id)?.clone();
        for &b in &s.blocks {
            self.refcount[b as usize] += 1;
        }
        let child = self.next_id;
        self.next_id += 1;
        self.seqs.insert(child, s);
        Ok(child)
    }

    /// Ends `id`: blocks no other sequence holds return to the pool.
    pub fn free(&mut self, id: SeqId) -> Result<(), CacheError> {
        let s = self
            .seqs
            .remove(&id)
            .ok_or(CacheError::UnknownSequence(id))?;
        for b in s.blocks {
            let r = &mut self.refcount[b as usize];
            *r -= 1;
            if *r == 0 {
                self.free.push(b);
            }
        }
        Ok(())
    }

    /// The block tables of `ids` as one row-major `[ids.len(), width]` table padded with -1,
    /// `width` the longest table (at least 1).
    pub fn block_tables(&self, ids: &[SeqId]) -> Result<(Vec<i32>, usize), CacheError> {
        let mut width = 1;
        for &id in ids {
            width = width.max(self.seq(id)?.blocks.len());
        }
        let mut out = vec![-1i32; ids.len() * width];
        for (row, &id) in ids.iter().enumerate() {
            for (j, &b) in self.seq(id)?.blocks.iter().enumerate() {
                out[row * width + j] = b as i32;
            }
        }
        Ok((out, width))
    }

    /// Takes one more reference on `block` for an owner outside any sequence (a prefix cache),
    /// which keeps it out of the pool. Only a held block (reference count >= 1) can be retained;
    /// returns whether it was.
    pub fn retain_block(&mut self, block: u32) -> bool {
        match self.refcount.get_mut(block as usize) {
            Some(r) if *r > 0 => match r.checked_add(1) {
                Some(n) => {
                    *r = n;
                    true
                }
                None => false,
            },
            _ => false,
        }
    }

    /// Drops a reference taken by [`PagedKvCache::retain_block`]; the block returns to the pool
    /// when no one holds it any more. Returns whether `block` was held.
    pub fn release_block(&mut self, block: u32) -> bool {
        match self.refcount.get_mut(block as usize) {
            Some(r) if *r > 0 => {
                *r -= 1;
                if *r == 0 {
                    self.free.push(block);
                }
                true
            }
            _ => false,
        }
    }

    /// A new sequence whose first `blocks.len() * block_size` tokens are the given full,
    /// already written blocks (prefix sharing: each block's reference count goes up, and a
    /// later append writes only new blocks). `None`, with nothing changed, if a block is not
    /// held or the length overflows.
    pub fn add_sequence_with_blocks(&mut self, blocks: &[u32]) -> Option<SeqId> {
        let len = blocks.len().checked_mul(self.block_size)?;
        let held = |b: &u32| {
            self.refcount
                .get(*b as usize)
                .is_some_and(|&r| r > 0 && r < u32::MAX)
        };
        if !blocks.iter().all(held) {
            return None;
        }
        for &b in blocks {
            self.refcount[b as usize] += 1;
        }
        let id = self.next_id;
        self.next_id += 1;
        self.seqs.insert(
            id,
            Sequence {
                blocks: blocks.to_vec(),
                len,
            },
        );
        Some(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_blocks_allocates_nothing() {
        let mut c = PagedKvCache::new(2, 4).unwrap();
        let a = c.add_sequence();
        c.append(a, 5).unwrap();
        let err = c.append(a, 4).unwrap_err();
        assert_eq!(
            err,
            CacheError::OutOfBlocks {
                needed: 1,
                free: 0,
                total: 2
            }
        );
        assert_eq!(c.len(a).unwrap(), 5);
        assert_eq!(c.block_table(a).unwrap().len(), 2);
        assert_eq!(c.append(a, 3).unwrap().slots.len(), 3);
    }

    #[test]
    fn fork_copies_the_shared_partial_block_on_write() {
        let mut c = PagedKvCache::new(4, 4).unwrap();
        let a = c.add_sequence();
        c.append(a, 6).unwrap();
        let b = c.fork(a).unwrap();
        assert_eq!(c.block_table(a).unwrap(), c.block_table(b).unwrap());
        let w = c.append(b, 1).unwrap();
        let shared_last = c.block_table(a).unwrap()[1];
        assert_eq!(w.copy.map(|x| x.src), Some(shared_last));
        assert_ne!(c.block_table(b).unwrap()[1], shared_last);
        assert_eq!(c.block_table(b).unwrap()[0], c.block_table(a).unwrap()[0]);
        c.free(a).unwrap();
        c.free(b).unwrap();
        assert_eq!(c.free_blocks(), 4);
        assert_eq!(c.free(a), Err(CacheError::UnknownSequence(a)));
        assert!(PagedKvCache::new(0, 4).is_err());
    }

    #[test]
    fn retained_blocks_outlive_their_sequence_and_seed_new_ones() {
        let mut c = PagedKvCache::new(4, 2).unwrap();
        let a = c.add_sequence();
        c.append(a, 3).unwrap();
        let full = c.block_table(a).unwrap()[0];
        assert!(c.retain_block(full));
        c.free(a).unwrap();
        // The retained block stays out of the pool; the partial one came back.
        assert_eq!((c.free_blocks(), c.refcount(full)), (3, 1));
        let b = c.add_sequence_with_blocks(&[full]).unwrap();
        assert_eq!((c.len(b).unwrap(), c.refcount(full)), (2, 2));
        // Appending after a shared full block copies nothing.
        let w = c.append(b, 1).unwrap();
        assert_eq!(w.copy, None);
        assert_ne!(c.block_table(b).unwrap()[1], full);
        // Free blocks cannot be shared or retained.
        let spare = (0..4).find(|&x| c.refcount(x) == 0).unwrap();
        assert_eq!(c.add_sequence_with_blocks(&[spare]), None);
        assert!(!c.retain_block(spare) && !c.release_block(spare));
        c.free(b).unwrap();
        assert!(c.release_block(full));
        assert_eq!(c.free_blocks(), 4);
    }
}
