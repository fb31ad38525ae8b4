//! One forward pass's metadata: the new tokens, their positions, cache slots and context
//! lengths, and every row's padded block table, built once per step by the cache manager
//! ([`PagedKvCache::batch`]) from the sequences' new tokens.

use crate::kv_cache::{CacheError, PagedKvCache, SeqId};

/// One sequence's part of a [`Batch`].
#[derive(Debug, Clone, PartialEq, Eq)]
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

/// The new tokens of a forward pass, one row per token, and what the attention ops read for
/// them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Batch {
    /// Token ids, one per row.
    pub tokens: Vec<u32>,
    /// Each row's position in its sequence.
    pub positions: Vec<usize>,
    /// Each row's cache slot.
    pub slots: Vec<i64>,
    /// Each row's context length: the cached positions it may see (its position + 1).
    pub context_lens: Vec<usize>,
    /// Every row's block table, row-major `[rows, table_width]`, padded with -1.
    pub tables: Vec<i32>,
    /// Entries per row of [`Batch::tables`]: the longest sequence's table (at least 1).
    pub table_width: usize,
    /// The sequences, in row order.
    pub seqs: Vec<SeqRows>,
}

impl Batch {
    /// Rows (new tokens).
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether the batch has no row.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Each sequence's last row (where its next token's logits are).
    pub fn last_rows(&self) -> Vec<usize> {
        self.seqs
            .iter()
            .filter(|s| s.rows > 0)
            .map(|s| s.first_row + s.rows - 1)
            .collect()
    }
}

/// A sequence's new tokens in one step: `tokens` at positions `start..start + tokens.len()`,
/// whose slots the cache manager has already reserved ([`PagedKvCache::append`]).
#[derive(Debug, Clone, Copy)]
pub struct StepRows<'a> {
    /// The cache sequence.
    pub seq: SeqId,
    /// The position of the first new token.
    pub start: usize,
    /// The new tokens (at least one).
    pub tokens: &'a [u32],
}

impl PagedKvCache {
    /// The batch of one step: the sequences' new tokens in order, each row's slot, position and
    /// context length, and the padded block tables. An error (an unknown sequence, an empty
    /// part, or new tokens past what the sequence holds) changes nothing.
    pub fn batch(&self, parts: &[StepRows<'_>]) -> Result<Batch, CacheError> {
        let mut b = Batch::default();
        let mut width = 1;
        for p in parts {
            let len = self.len(p.seq)?;
            let end = p.start.checked_add(p.tokens.len());
            if p.tokens.is_empty() || end.is_none_or(|e| e > len) {
                return Err(CacheError::RowsPastSequence {
                    id: p.seq,
                    start: p.start,
                    n: p.tokens.len(),
                    len,
                });
            }
            width = width.max(self.block_table(p.seq)?.len());
        }
        for p in parts {
            let table = self.block_table(p.seq)?.to_vec();
            let end = p.start + p.tokens.len();
            let mut slots = self.slots(p.seq)?;
            slots.truncate(end);
            b.slots.extend_from_slice(&slots[p.start..end]);
            b.positions.extend(p.start..end);
            b.context_lens.extend(p.start + 1..end + 1);
            let mut row = vec![-1i32; width];
            for (j, &blk) in table.iter().enumerate() {
                // Block ids are below num_blocks <= 2^31.
                row[j] = i32::try_from(blk).unwrap_or(-1);
            }
            for _ in 0..p.tokens.len() {
                b.tables.extend_from_slice(&row);
            }
            b.seqs.push(SeqRows {
                table,
                slots,
                first_row: b.tokens.len(),
                rows: p.tokens.len(),
            });
            b.tokens.extend_from_slice(p.tokens);
        }
        b.table_width = width;
        Ok(b)
    }
}

/// The batch of one fresh prompt of `tokens` in a pool of exactly its
/// `tokens.len().div_ceil(block_size)` blocks (blocks `0..`, slots `0..tokens.len()`): one-off
/// forward passes and tests.
pub fn prompt_batch(tokens: &[u32], block_size: usize) -> Result<Batch, CacheError> {
    let mut cache = PagedKvCache::new(tokens.len().div_ceil(block_size.max(1)), block_size)?;
    let seq = cache.add_sequence()?;
    cache.append(seq, tokens.len())?;
    cache.batch(&[StepRows {
        seq,
        start: 0,
        tokens,
    }])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_of_a_prefill_chunk_and_a_decode() {
        let mut c = PagedKvCache::new(8, 4).unwrap();
        let (a, d) = (c.add_sequence().unwrap(), c.add_sequence().unwrap());
        c.append(a, 6).unwrap();
        c.append(d, 1).unwrap();
        let b = c
            .batch(&[
                StepRows {
                    seq: a,
                    start: 2,
                    tokens: &[7, 8, 9, 10],
                },
                StepRows {
                    seq: d,
                    start: 0,
                    tokens: &[5],
                },
            ])
            .unwrap();
        assert_eq!(b.tokens, [7, 8, 9, 10, 5]);
        assert_eq!(b.positions, [2, 3, 4, 5, 0]);
        assert_eq!(b.context_lens, [3, 4, 5, 6, 1]);
        assert_eq!(b.slots, [2, 3, 4, 5, 8]);
        assert_eq!(b.table_width, 2);
        assert_eq!(b.tables, [0, 1, 0, 1, 0, 1, 0, 1, 2, -1]);
        assert_eq!(b.seqs[0].slots, [0, 1, 2, 3, 4, 5]);
        assert_eq!((b.seqs[1].first_row, b.seqs[1].rows), (4, 1));
        assert_eq!(b.last_rows(), [3, 4]);
    }

    #[test]
    fn rows_past_the_sequence_or_unknown_sequences_are_errors() {
        let mut c = PagedKvCache::new(4, 4).unwrap();
        let a = c.add_sequence().unwrap();
        c.append(a, 3).unwrap();
        let part = |start, tokens: &'static [u32]| StepRows {
            seq: a,
            start,
            tokens,
        };
        for bad in [part(1, &[1, 2, 3]), part(0, &[]), part(usize::MAX, &[1])] {
            assert!(matches!(
                c.batch(&[bad]),
                Err(CacheError::RowsPastSequence { .. })
            ));
        }
        let unknown = StepRows {
            seq: 99,
            start: 0,
            tokens: &[1],
        };
        assert_eq!(c.batch(&[unknown]), Err(CacheError::UnknownSequence(99)));
        assert_eq!(c.batch(&[part(0, &[1, 2, 3])]).unwrap().len(), 3);
        assert!(prompt_batch(&[], 4).is_err());
        assert!(prompt_batch(&[1], 0).is_err());
        let p = prompt_batch(&[1, 2, 3, 4, 5], 4).unwrap();
        assert_eq!((p.slots, p.table_width), (vec![0, 1, 2, 3, 4], 2));
    }
}
