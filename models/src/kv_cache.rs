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

/// Most slots a pool may hold (`num_blocks * block_size`): 2^31, so that every slot number
/// (at most `MAX_SLOTS - 1` = [`tileops_ops::limits::MAX_POSITION`]) and every block id fits the
/// kernels' 32-bit positions and block tables (`reshape_and_cache`'s `slot_mapping`,
/// `sparse_paged_attention`'s `block_table`).
pub const MAX_SLOTS: usize = tileops_ops::limits::MAX_POSITION as usize + 1;

/// Errors of the cache manager. A call that returns one has changed nothing.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
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
    /// The pool would hold more than [`MAX_SLOTS`] slots.
    #[error(
        "a KV-cache pool of {num_blocks} blocks x {block_size} slots exceeds the limit of {max} slots \
         (num_blocks * block_size <= 2^31: slot numbers and block ids are 32-bit in the kernels)"
    )]
    PoolTooLarge {
        /// Blocks asked for.
        num_blocks: usize,
        /// Slots per block asked for.
        block_size: usize,
        /// [`MAX_SLOTS`].
        max: usize,
    },
    /// The sequence would hold more tokens than the whole pool has slots (whatever is free).
    #[error(
        "sequence {id} holds {len} tokens; {n} more exceed the pool's {capacity} slots \
         ({num_blocks} blocks of {block_size})"
    )]
    SequenceTooLong {
        /// The sequence.
        id: SeqId,
        /// Tokens it holds.
        len: usize,
        /// Tokens asked for.
        n: usize,
        /// Slots in the pool.
        capacity: usize,
        /// Blocks in the pool.
        num_blocks: usize,
        /// Slots per block.
        block_size: usize,
    },
    /// Every sequence id has been handed out (2^64 of them).
    #[error("no sequence id left: all 2^64 ids have been handed out")]
    IdsExhausted,
    /// A block is shared by 2^32 - 1 sequences already; one more fork cannot count it.
    #[error("block {block} is shared by {count} sequences, the most a reference count holds")]
    TooManyShares {
        /// The block.
        block: u32,
        /// Its reference count.
        count: u32,
    },
    /// Memory for the request's slot list could not be reserved.
    #[error("cannot reserve memory for {0} slots")]
    NoMemory(usize),
    /// A step's rows of a sequence are empty or lie past the tokens it holds
    /// ([`PagedKvCache::batch`]: reserve them with `append` first).
    #[error(
        "sequence {id} holds {len} tokens; a step's {n} new rows from position {start} are empty \
         or lie past them"
    )]
    RowsPastSequence {
        /// The sequence.
        id: SeqId,
        /// The position of the first row.
        start: usize,
        /// Rows.
        n: usize,
        /// Tokens the sequence holds.
        len: usize,
    },
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

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Sequence {
    blocks: Vec<u32>,
    len: usize,
}

/// The paged KV-cache manager.
///
/// Limits: `1 <= num_blocks`, `1 <= block_size`, `num_blocks * block_size <= MAX_SLOTS`
/// (2^31), so every slot number is at most [`tileops_ops::limits::MAX_POSITION`] and every block id
/// fits an i32 block table; a sequence holds at most the pool's slots. Blocks are handed out
/// lowest id first and the bookkeeping grows with the blocks in use (a pool of 2^31 one-slot
/// blocks costs nothing until used). Every call that fails returns an error and leaves the
/// manager as it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PagedKvCache {
    block_size: usize,
    num_blocks: usize,
    /// Reference counts of the blocks handed out at least once (ids `0..refcount.len()`).
    refcount: Vec<u32>,
    /// Blocks returned to the pool, reused last in first out before fresh ones.
    free: Vec<u32>,
    seqs: BTreeMap<SeqId, Sequence>,
    next_id: SeqId,
}

impl PagedKvCache {
    /// A pool of `num_blocks` blocks of `block_size` slots, all free. Errors on an empty pool
    /// and on one of more than [`MAX_SLOTS`] slots.
    pub fn new(num_blocks: usize, block_size: usize) -> Result<Self, CacheError> {
        if num_blocks == 0 || block_size == 0 {
            return Err(CacheError::EmptyPool(num_blocks, block_size));
        }
        if num_blocks
            .checked_mul(block_size)
            .is_none_or(|n| n > MAX_SLOTS)
        {
            return Err(CacheError::PoolTooLarge {
                num_blocks,
                block_size,
                max: MAX_SLOTS,
            });
        }
        Ok(PagedKvCache {
            block_size,
            num_blocks,
            refcount: Vec::new(),
            free: Vec::new(),
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
        self.num_blocks
    }

    /// Slots in the pool (`num_blocks * block_size`, at most [`MAX_SLOTS`]).
    pub fn capacity(&self) -> usize {
        // Checked in `new`.
        self.num_blocks * self.block_size
    }

    /// Blocks free now.
    pub fn free_blocks(&self) -> usize {
        self.free.len() + (self.num_blocks - self.refcount.len())
    }

    fn take_id(&mut self) -> Result<SeqId, CacheError> {
        let id = self.next_id;
        self.next_id = id.checked_add(1).ok_or(CacheError::IdsExhausted)?;
        Ok(id)
    }

    /// A new, empty sequence. Errors only once 2^64 - 1 ids have been handed out.
    pub fn add_sequence(&mut self) -> Result<SeqId, CacheError> {
        let id = self.take_id()?;
        self.seqs.insert(id, Sequence::default());
        Ok(id)
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

    /// How many sequences hold `block` (0 for a free block or an id outside the pool).
    pub fn refcount(&self, block: u32) -> u32 {
        self.refcount.get(block as usize).copied().unwrap_or(0)
    }

    /// The slot of token `t` in a sequence holding `blocks` (`block * block_size + t %
    /// block_size`), checked: `None` when `t` lies past the table.
    fn slot_in(&self, blocks: &[u32], t: usize) -> Option<i64> {
        let b = *blocks.get(t / self.block_size)? as usize;
        let slot = b
            .checked_mul(self.block_size)?
            .checked_add(t % self.block_size)?;
        i64::try_from(slot).ok()
    }

    /// The slot of every token `id` holds, in order (what attention reads through its table).
    pub fn slots(&self, id: SeqId) -> Result<Vec<i64>, CacheError> {
        let s = self.seq(id)?;
        let mut out = Vec::new();
        out.try_reserve_exact(s.len)
            .map_err(|_| CacheError::NoMemory(s.len))?;
        for t in 0..s.len {
            // Every token below `len` lies in the table (the invariant `append` keeps).
            out.push(self.slot_in(&s.blocks, t).unwrap_or(-1));
        }
        Ok(out)
    }

    /// Reserves slots for `n` new tokens of `id`. All or nothing: on any error the sequence
    /// and the pool are unchanged ([`CacheError::OutOfBlocks`] when too few blocks are free,
    /// [`CacheError::SequenceTooLong`] when the whole pool could not hold the sequence).
    pub fn append(&mut self, id: SeqId, n: usize) -> Result<Append, CacheError> {
        let bs = self.block_size;
        let capacity = self.capacity();
        let s = self.seq(id)?;
        let (len, have) = (s.len, s.blocks.len());
        let end =
            len.checked_add(n)
                .filter(|&e| e <= capacity)
                .ok_or(CacheError::SequenceTooLong {
                    id,
                    len,
                    n,
                    capacity,
                    num_blocks: self.num_blocks,
                    block_size: bs,
                })?;
        // A partly filled shared last block must be copied before it is written.
        let cow = match s.blocks.last() {
            Some(&b) if n > 0 && len % bs != 0 && self.refcount(b) > 1 => Some(b),
            _ => None,
        };
        // `end <= capacity`, so `end / bs` blocks fit the pool and at most one more is copied.
        let new_blocks = end.div_ceil(bs).saturating_sub(have) + usize::from(cow.is_some());
        let free = self.free_blocks();
        if new_blocks > free {
            return Err(CacheError::OutOfBlocks {
                needed: new_blocks,
                free,
                total: self.num_blocks,
            });
        }
        let mut slots = Vec::new();
        slots
            .try_reserve_exact(n)
            .map_err(|_| CacheError::NoMemory(n))?;
        let mut fresh = Vec::new();
        fresh
            .try_reserve_exact(new_blocks)
            .map_err(|_| CacheError::NoMemory(n))?;
        // Nothing fails past this point.
        for _ in 0..new_blocks {
            let b = match self.free.pop() {
                Some(b) => b,
                None => {
                    // `refcount.len() < num_blocks <= MAX_SLOTS = 2^31`: the id fits a u32.
                    let b = self.refcount.len() as u32;
                    self.refcount.push(0);
                    b
                }
            };
            self.refcount[b as usize] = 1;
            fresh.push(b);
        }
        let Some(s) = self.seqs.get_mut(&id) else {
            return Err(CacheError::UnknownSequence(id));
        };
        let mut fresh = fresh.into_iter();
        let copy = match (cow, s.blocks.last_mut()) {
            (Some(src), Some(last)) => {
                // `new_blocks >= 1` when copying.
                let dst = fresh.next().unwrap_or(src);
                self.refcount[src as usize] -= 1;
                *last = dst;
                Some(CopyBlock { src, dst })
            }
            _ => None,
        };
        s.blocks.extend(fresh);
        s.len = end;
        let s = &self.seqs[&id];
        slots.extend((len..end).map(|t| self.slot_in(&s.blocks, t).unwrap_or(-1)));
        Ok(Append { slots, copy })
    }

    /// A new sequence sharing all of `id`'s blocks (prefix sharing; reference counts go up).
    /// Nothing changes on an error.
    pub fn fork(&mut self, id: SeqId) -> Result<SeqId, CacheError> {
        let s = self.seq(id)?.clone();
        if let Some(&block) = s.blocks.iter().find(|&&b| self.refcount(b) == u32::MAX) {
            return Err(CacheError::TooManyShares {
                block,
                count: u32::MAX,
            });
        }
        let child = self.take_id()?;
        for &b in &s.blocks {
            self.refcount[b as usize] += 1;
        }
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
            *r = r.saturating_sub(1);
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
        let n = ids
            .len()
            .checked_mul(width)
            .ok_or(CacheError::NoMemory(usize::MAX))?;
        let mut out = Vec::new();
        out.try_reserve_exact(n)
            .map_err(|_| CacheError::NoMemory(n))?;
        out.resize(n, -1i32);
        for (row, &id) in ids.iter().enumerate() {
            for (j, &b) in self.seq(id)?.blocks.iter().enumerate() {
                // Block ids are below num_blocks <= 2^31.
                out[row * width + j] = i32::try_from(b).unwrap_or(-1);
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
        let id = self.take_id().ok()?;
        for &b in blocks {
            self.refcount[b as usize] += 1;
        }
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
        let mut c = PagedKvCache::new(3, 4).unwrap();
        let b = c.add_sequence().unwrap();
        c.append(b, 1).unwrap();
        let a = c.add_sequence().unwrap();
        c.append(a, 5).unwrap();
        let before = c.clone();
        let err = c.append(a, 4).unwrap_err();
        assert_eq!(
            err,
            CacheError::OutOfBlocks {
                needed: 1,
                free: 0,
                total: 3
            }
        );
        assert_eq!(c, before);
        assert_eq!(c.len(a).unwrap(), 5);
        assert_eq!(c.block_table(a).unwrap().len(), 2);
        assert_eq!(c.append(a, 3).unwrap().slots.len(), 3);
    }

    #[test]
    fn fork_copies_the_shared_partial_block_on_write() {
        let mut c = PagedKvCache::new(4, 4).unwrap();
        let a = c.add_sequence().unwrap();
        c.append(a, 6).unwrap();
        let b = c.fork(a).unwrap();
        assert_eq!(c.block_table(a).unwrap(), c.block_table(b).unwrap());
        let w = c.append(b, 1).unwrap();
        let shared_last = c.block_table(a).unwrap()[1];
        assert_eq!(w.copy.map(|x| x.src), Some(shared_last));
        assert_ne!(c.block_table(b).unwrap()[1], shared_last);
        assert_eq!(c.block_table(b).unwrap()[0], c.block_table(a).unwrap()[0]);
        assert_eq!(
            c.slots(b).unwrap()[..6],
            c.slots(a).unwrap()[..4]
                .iter()
                .copied()
                .chain((0..2).map(|i| i64::from(c.block_table(b).unwrap()[1]) * 4 + i))
                .collect::<Vec<_>>()[..]
        );
        c.free(a).unwrap();
        c.free(b).unwrap();
        assert_eq!(c.free_blocks(), 4);
        assert_eq!(c.free(a), Err(CacheError::UnknownSequence(a)));
        assert!(PagedKvCache::new(0, 4).is_err());
    }

    /// Huge append counts: `len + n` wrapping used to return Ok with a shorter sequence.
    #[test]
    fn huge_append_counts_are_errors_and_change_nothing() {
        let mut c = PagedKvCache::new(4, 4).unwrap();
        let a = c.add_sequence().unwrap();
        c.append(a, 5).unwrap();
        let before = c.clone();
        for n in [usize::MAX, usize::MAX - 4, usize::MAX - 2, 1 << 40, 12] {
            let err = c.append(a, n).unwrap_err();
            assert!(
                matches!(
                    err,
                    CacheError::SequenceTooLong {
                        len: 5,
                        capacity: 16,
                        ..
                    }
                ),
                "n = {n}: {err}"
            );
            assert_eq!(c, before, "n = {n}");
        }
        // Exactly the pool fills it.
        assert_eq!(c.append(a, 11).unwrap().slots.len(), 11);
    }

    /// Pools whose slot numbers would not fit the kernels' 32-bit positions (or i64 at all)
    /// are refused with the rule they break, not the empty-pool one.
    #[test]
    fn pools_past_the_slot_limit_are_refused_naming_the_limit() {
        for (nb, bs) in [
            (u32::MAX as usize + 1, 1),
            (4, 1 << 62),
            (usize::MAX, 2),
            (1, usize::MAX),
            (1 << 16, (1 << 15) + 1),
        ] {
            let err = PagedKvCache::new(nb, bs).unwrap_err();
            assert_eq!(
                err,
                CacheError::PoolTooLarge {
                    num_blocks: nb,
                    block_size: bs,
                    max: MAX_SLOTS
                }
            );
            assert!(err.to_string().contains("2^31"), "{err}");
        }
        // The largest pool: free to make, and its last block's slots are the largest positions.
        let mut c = PagedKvCache::new(2, 1 << 30).unwrap();
        assert_eq!(c.capacity(), MAX_SLOTS);
        let a = c.add_sequence().unwrap();
        let b = c.add_sequence().unwrap();
        c.append(a, 1).unwrap();
        assert_eq!(c.append(b, 2).unwrap().slots, vec![1 << 30, (1 << 30) + 1]);
        let before = c.clone();
        assert!(matches!(
            c.append(b, MAX_SLOTS),
            Err(CacheError::SequenceTooLong { .. })
        ));
        assert_eq!(c, before);
        let (t, w) = c.block_tables(&[a, b]).unwrap();
        assert_eq!((t, w), (vec![0, 1], 1));
    }

    #[test]
    fn exhausted_ids_and_counts_are_errors_that_change_nothing() {
        let mut c = PagedKvCache::new(4, 4).unwrap();
        let a = c.add_sequence().unwrap();
        c.append(a, 3).unwrap();
        c.next_id = u64::MAX;
        let before = c.clone();
        assert_eq!(c.add_sequence(), Err(CacheError::IdsExhausted));
        assert_eq!(c.fork(a), Err(CacheError::IdsExhausted));
        assert_eq!(c, before);
        c.next_id = 7;
        c.refcount[0] = u32::MAX;
        let before = c.clone();
        assert_eq!(
            c.fork(a),
            Err(CacheError::TooManyShares {
                block: 0,
                count: u32::MAX
            })
        );
        assert_eq!(c, before);
        assert_eq!(c.append(99, 1), Err(CacheError::UnknownSequence(99)));
        assert_eq!(c, before);
    }

    #[test]
    fn retained_blocks_outlive_their_sequence_and_seed_new_ones() {
        let mut c = PagedKvCache::new(4, 2).unwrap();
        let a = c.add_sequence().unwrap();
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
