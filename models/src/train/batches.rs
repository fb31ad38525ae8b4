//! Training batches: deterministic from the run's seed and the step, so a resumed or replayed
//! run sees the same tokens.
//!
//! Two ways to cut windows ([`WindowKind`]): at seeded offsets anywhere in the stream (the
//! first shipped run), or starting at a document's `<|bos|>` with every document sized to fit
//! the window ([`crate::data::Mix::for_window`]), so a retrieval document's questions are
//! always seen with the keys they ask about.

use super::{Result, TrainConfig, TrainError};
use crate::data::Mix;
use crate::tokenizer::Tokenizer;
use crate::weights::Rng;
use serde::{Deserialize, Serialize};

/// How a run cuts its training windows from the generated text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum WindowKind {
    /// Windows at seeded offsets anywhere in [`crate::data::training_text`] (the default
    /// [`Mix`]): a retrieval document longer than the window is mostly seen without its keys.
    #[default]
    Offsets,
    /// Every window starts at a document's `<|bos|>`, and documents come from
    /// [`Mix::for_window`] of the window's length (with the run's retrieval share), so each
    /// retrieval document, keys and questions, lies inside the window that starts it.
    Documents,
}

/// A stretch of the run trained at another window length and batch (for example long
/// windows at the end, so retrieval is learnt over long contexts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Phase {
    /// The first global step of the phase (it lasts to the end of the run).
    pub from_step: u64,
    /// Tokens per sequence.
    pub seq_len: usize,
    /// Sequences per step.
    pub batch: usize,
}

/// A stream of training token windows, cut from a token stream at seeded offsets.
#[derive(Debug, Clone)]
pub struct Windows {
    tokens: Vec<u32>,
    seed: u64,
    /// Where windows may start (document starts); empty: anywhere.
    starts: Vec<usize>,
}

impl Windows {
    /// Windows over `tokens` (the training text, tokenised), offsets from `seed`.
    pub fn new(tokens: Vec<u32>, seed: u64) -> Windows {
        Windows {
            tokens,
            seed,
            starts: Vec::new(),
        }
    }

    /// Windows over `tokens` that start only at a position holding `bos` (a document start).
    pub fn at_documents(tokens: Vec<u32>, seed: u64, bos: u32) -> Windows {
        let starts = tokens
            .iter()
            .enumerate()
            .filter(|(_, &t)| t == bos)
            .map(|(i, _)| i)
            .collect();
        Windows {
            tokens,
            seed,
            starts,
        }
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
            return Err(TrainError::Invalid(format!(
                "the training text has {} tokens, not more than a window of {len}",
                self.tokens.len()
            )));
        }
        let mut rng = Rng(self.seed ^ step.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let span = (self.tokens.len() - len) as u64;
        if self.starts.is_empty() {
            return Ok((0..batch)
                .map(|_| {
                    let at = (rng.next_u64() % span) as usize;
                    self.tokens[at..at + len].to_vec()
                })
                .collect());
        }
        // Document starts from which a whole window fits in the stream.
        let fit = self.starts.partition_point(|&s| s as u64 <= span);
        if fit == 0 {
            return Err(TrainError::Invalid(format!(
                "no document start leaves a window of {len} tokens"
            )));
        }
        Ok((0..batch)
            .map(|_| {
                let at = self.starts[(rng.next_u64() % fit as u64) as usize];
                self.tokens[at..at + len].to_vec()
            })
            .collect())
    }
}

/// The training stream of a run: [`crate::data::training_text`] of `seed` and `words`,
/// tokenised by `tok`, cut at offsets from `seed`.
pub fn training_windows(tok: &Tokenizer, seed: u64, words: usize) -> Result<Windows> {
    let text = crate::data::training_text(seed, words);
    Ok(Windows::new(encode(tok, &text)?, seed))
}

fn encode(tok: &Tokenizer, text: &str) -> Result<Vec<u32>> {
    tok.encode(text)
        .map_err(|e| TrainError::Invalid(e.to_string()))
}

/// Document-aligned windows of `len` tokens: documents of [`Mix::for_window`]`(len)` (or
/// [`Mix::for_window_keys`] with `max_keys`) with `retrieval_share`, from `seed`.
pub fn document_windows(
    tok: &Tokenizer,
    seed: u64,
    words: usize,
    len: usize,
    retrieval_share: f64,
    max_keys: Option<usize>,
) -> Result<Windows> {
    let sized = match max_keys {
        Some(k) => Mix::for_window_keys(len, k),
        None => Mix::for_window(len),
    };
    let mix = Mix {
        retrieval_share,
        ..sized
    };
    let text = crate::data::training_text_with(seed, words, &mix);
    let bos = tok
        .special_ids()
        .map_err(|e| TrainError::Invalid(e.to_string()))?
        .bos;
    Ok(Windows::at_documents(encode(tok, &text)?, seed, bos))
}

/// Tokens per window of the copy steps ([`TrainConfig::copy_steps`]) at most; a step keeps
/// the run's tokens per step in more, shorter windows.
pub const COPY_WINDOW: usize = 64;

/// Every window of a run: the main stream and, when the run has one, its [`Phase`]'s.
#[derive(Debug, Clone)]
pub struct RunData {
    main: Windows,
    phase: Option<(Phase, Windows)>,
}

impl RunData {
    /// The streams `config` trains on (its seed, words, window kind, retrieval share and
    /// phase).
    pub fn new(tok: &Tokenizer, config: &TrainConfig) -> Result<RunData> {
        let build = |len: usize, seed: u64| match config.windows {
            WindowKind::Offsets => training_windows(tok, seed, config.words),
            WindowKind::Documents => document_windows(
                tok,
                seed,
                config.words,
                len + 1,
                config.retrieval_share,
                config.max_keys,
            ),
        };
        let main = build(config.seq_len, config.seed)?;
        let phase = match config.phase {
            Some(p) => Some((p, build(p.seq_len, config.seed ^ 0x7068_6173_6532)?)),
            None => None,
        };
        Ok(RunData { main, phase })
    }

    /// Tokens of the main stream.
    pub fn len(&self) -> usize {
        self.main.len()
    }

    /// Whether the main stream is empty.
    pub fn is_empty(&self) -> bool {
        self.main.is_empty()
    }

    /// The sequences of global step `step` (each its window's length + 1 tokens: inputs and
    /// shifted targets), and the window length.
    pub fn batch(&self, config: &TrainConfig, step: u64) -> Result<(Vec<Vec<u32>>, usize)> {
        if step < config.copy_steps {
            // The step's tokens in short windows (config.shape_at).
            let (n, len) = config.shape_at(step);
            let first = crate::tokenizer::SPECIAL_TOKENS.len() as u32;
            return Ok((
                copy_batch(
                    config.seed,
                    step,
                    n,
                    len + 1,
                    first..config.model.vocab_size as u32,
                    config.copy_runs,
                )?,
                len,
            ));
        }
        let (mut seqs, len) = match &self.phase {
            Some((p, w)) if step >= p.from_step => {
                (w.batch(step, p.batch, p.seq_len + 1)?, p.seq_len)
            }
            _ => (
                self.main.batch(step, config.batch, config.seq_len + 1)?,
                config.seq_len,
            ),
        };
        let copies = ((seqs.len() as f64 * config.copy_share.clamp(0.0, 1.0)).ceil() as usize)
            .min(seqs.len());
        if copies > 0 {
            let first = crate::tokenizer::SPECIAL_TOKENS.len() as u32;
            let extra = copy_batch(
                config.seed ^ 0x006d_6978,
                step,
                copies,
                len + 1,
                first..config.model.vocab_size as u32,
                config.copy_runs,
            )?;
            let keep = seqs.len() - copies;
            seqs.truncate(keep);
            seqs.extend(extra);
        }
        Ok((seqs, len))
    }
}

/// How the runs of copy windows ([`copy_batch`]) draw their tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum CopyRuns {
    /// Every fourth run from all the ids, the others from a stretch of 8, 16 or 64 ids, tokens
    /// drawn with repetition (the first copy runs; the model never learnt to copy from them:
    /// a token repeated inside a run makes its next token ambiguous to a one-token match).
    #[default]
    Mixed,
    /// Every token of a run distinct, drawn from all the ids: the one-token match is exact,
    /// and the induction pattern forms (docs/models.md).
    Distinct,
}

/// The sequences of copy step `step`: `batch` sequences of `len` tokens, each a run of a
/// quarter to a half of `len` tokens drawn from `ids` as `runs` says (seeded by `seed` and
/// `step`) and then that run again, cut to `len`. Predicting the repeats is pure copying (the
/// induction pattern: find where the current token was seen, emit what followed it).
pub fn copy_batch(
    seed: u64,
    step: u64,
    batch: usize,
    len: usize,
    ids: std::ops::Range<u32>,
    runs: CopyRuns,
) -> Result<Vec<Vec<u32>>> {
    if ids.is_empty() || len < 2 {
        return Err(TrainError::Invalid(format!(
            "copy sequences need a token range and 2 tokens, not {ids:?} and {len}"
        )));
    }
    let all = u64::from(ids.end - ids.start);
    let mut rng = Rng(seed ^ 0x636f_7079 ^ step.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    Ok((0..batch)
        .map(|i| {
            let span = [all, 8, 16, 64][i % 4].min(all);
            let base = ids.start + (rng.next_u64() % (all - span + 1)) as u32;
            // The period varies (a quarter to a half of the window), so no fixed offset
            // predicts the copy: only finding the earlier occurrence does.
            let half = len.div_ceil(2);
            let period =
                (half / 2 + (rng.next_u64() % (half - half / 2 + 1) as u64) as usize).max(1);
            let run: Vec<u32> = match runs {
                CopyRuns::Mixed => (0..period)
                    .map(|_| base + (rng.next_u64() % span) as u32)
                    .collect(),
                CopyRuns::Distinct => {
                    // Rejection draws: a run is at most half of the window, and the windows
                    // are far shorter than the vocabulary (a run longer than `all` is cut).
                    let mut seen = std::collections::HashSet::new();
                    let mut v = Vec::with_capacity(period);
                    while v.len() < period.min(all as usize) {
                        let x = ids.start + (rng.next_u64() % all) as u32;
                        if seen.insert(x) {
                            v.push(x);
                        }
                    }
                    v
                }
            };
            run.iter().cycle().copied().take(len).collect()
        })
        .collect())
}
