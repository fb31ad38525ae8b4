//! Training batches: deterministic from the run's seed and the step, so a resumed or replayed
//! run sees the same tokens.

use super::Result;
use crate::weights::Rng;

/// A stream of training token windows, cut from a token stream at seeded offsets.
#[derive(Debug, Clone)]
pub struct Windows {
    tokens: Vec<u32>,
    seed: u64,
}

impl Windows {
    /// Windows over `tokens` (the training text, tokenised), offsets from `seed`.
    pub fn new(tokens: Vec<u32>, seed: u64) -> Windows {
        Windows { tokens, seed }
    }

    /// Tokens in the stream.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether the stream is empty.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The `batch` windows of `len` tokens of step `step`.
    pub fn batch(&self, step: u64, batch: usize, len: usize) -> Result<Vec<Vec<u32>>> {
        if self.tokens.len() <= len {
            return Err(super::TrainError::Invalid(format!(
                "the training text has {} tokens, not more than a window of {len}",
                self.tokens.len()
            )));
        }
        let mut rng = Rng(self.seed ^ step.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let span = (self.tokens.len() - len) as u64;
        Ok((0..batch)
            .map(|_| {
                let at = (rng.next_u64() % span) as usize;
                self.tokens[at..at + len].to_vec()
            })
            .collect())
    }
}

/// The training stream of a run: [`crate::data::training_text`] of `seed` and `words`,
/// tokenised by `tok`, cut at offsets from `seed`.
pub fn training_windows(
    tok: &crate::tokenizer::Tokenizer,
    seed: u64,
    words: usize,
) -> Result<Windows> {
    let text = crate::data::training_text(seed, words);
    let ids = tok
        .encode(&text)
        .map_err(|e| super::TrainError::Invalid(e.to_string()))?;
    Ok(Windows::new(ids, seed))
}
