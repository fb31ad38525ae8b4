//! Retrieval evaluation of the ops model: held-out documents whose keys ("The code of the blue
//! door is 4821.") sit at chosen depths of a long context, each document prefilled once and
//! every question answered greedily on a fork of its sequence ([`Engine::answer_questions`]).
//! It reports exact match and, per layer, the recall of the selection: the share of questions
//! for which the code's first token was among the positions that layer's sparse attention
//! read for the question's last row (the row that chooses the first digit: a copying head
//! reads the token it copies, and each later digit is chosen by a later row).
//!
//! The demo prints this report over a grid of context length x key depth, for the trained
//! indexer's top-k, random positions, the indexer before its warm-up and dense attention
//! ([`crate::deepseek::model::Selection`]); the checkpoint test holds the trained top-k to its
//! target on TileSim.

use crate::data::{retrieval_doc_with, RetrievalSpec, Split};
use crate::engine::Engine;
use crate::error::{ModelError, Result};
use crate::tokenizer::{Tokenizer, BOS};

/// One held-out question, tokenised: the shared context, the question turn, the expected
/// answer and the code's token positions in the context.
#[derive(Debug, Clone)]
pub struct Question {
    /// `<|user|>question<|assistant|>`.
    pub query: Vec<u32>,
    /// The code's text (four digits).
    pub answer: String,
    /// The code's token positions in the context (`<|bos|>` included in the count).
    pub key_positions: std::ops::Range<usize>,
}

/// A tokenised retrieval document and its questions.
#[derive(Debug, Clone)]
pub struct Case {
    /// `<|bos|>` context `\n`, tokenised.
    pub context: Vec<u32>,
    /// The questions about it.
    pub questions: Vec<Question>,
}

/// Held-out cases: one document per seed in `seeds` with `words` words of filler and one key
/// at each of `depths` (fractions of the filler before the key), Heldout split (names, key
/// pairs and codes never seen in training).
pub fn held_out_cases(
    tok: &Tokenizer,
    seeds: std::ops::Range<u64>,
    words: usize,
    depths: &[f64],
) -> Result<Vec<Case>> {
    let tk = |e: crate::tokenizer::TokenizerError| ModelError::Invalid(e.to_string());
    let mut cases = Vec::new();
    for seed in seeds {
        let doc = retrieval_doc_with(&RetrievalSpec {
            seed,
            split: Split::Heldout,
            approx_words: words,
            depths: depths.to_vec(),
        });
        let text = format!("{BOS}{}\n", doc.context);
        let context = tok.encode(&text).map_err(tk)?;
        let mut questions = Vec::with_capacity(doc.questions.len());
        for q in &doc.questions {
            let at = BOS.len();
            let span = q.key_span.start + at..q.key_span.end + at;
            questions.push(Question {
                query: tok.encode(&q.query()).map_err(tk)?,
                answer: q.answer.clone(),
                key_positions: tok.token_span(&text, span).map_err(tk)?,
            });
        }
        cases.push(Case { context, questions });
    }
    Ok(cases)
}

/// Counts of a report cell.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Questions asked.
    pub questions: usize,
    /// Answers exactly right.
    pub exact: usize,
    /// Per layer: questions whose code's first token was selected (by the row that chooses
    /// the first digit).
    pub recall: Vec<usize>,
    /// Context tokens (summed over cases).
    pub context_tokens: usize,
    /// Every question's answer tokens, in order (to compare backends).
    pub answers: Vec<Vec<u32>>,
    /// Every question's selection per layer, in order: the positions the layer read for the
    /// question's last row (empty where it took the dense prefill).
    pub selected: Vec<Vec<Vec<i32>>>,
}

impl Report {
    /// Exact match in percent.
    pub fn exact_percent(&self) -> f64 {
        100.0 * self.exact as f64 / self.questions.max(1) as f64
    }

    /// Layer `l`'s recall in percent.
    pub fn recall_percent(&self, l: usize) -> f64 {
        100.0 * self.recall.get(l).copied().unwrap_or(0) as f64 / self.questions.max(1) as f64
    }
}

/// The share of `reference`'s selected positions that `other` selected too, over every
/// question and layer both selected for (same questions in the same order, e.g. the FP8 index
/// cache against the f32 one); `None` when no selection is comparable.
pub fn selection_overlap(other: &Report, reference: &Report) -> Option<f64> {
    let (mut kept, mut total) = (0usize, 0usize);
    for (a, b) in other.selected.iter().zip(&reference.selected) {
        for (sa, sb) in a.iter().zip(b) {
            if sa.is_empty() || sb.is_empty() {
                continue;
            }
            let want: Vec<i32> = sb.iter().copied().filter(|&p| p >= 0).collect();
            kept += want.iter().filter(|p| sa.contains(p)).count();
            total += want.len();
        }
    }
    (total > 0).then(|| kept as f64 / total as f64)
}

/// Answers every question of `cases` on `engine` (its model's selection and backend as set)
/// and counts exact matches and per-layer recall. Answers stop at `<|end|>` or `<|eos|>`, at
/// most 6 tokens.
pub fn evaluate(engine: &mut Engine, tok: &Tokenizer, cases: &[Case]) -> Result<Report> {
    let ids = tok
        .special_ids()
        .map_err(|e| ModelError::Invalid(e.to_string()))?;
    let layers = engine.model.config().n_layers;
    let mut r = Report {
        recall: vec![0; layers],
        ..Report::default()
    };
    for case in cases {
        let queries: Vec<Vec<u32>> = case.questions.iter().map(|q| q.query.clone()).collect();
        let a = engine.answer_questions(&case.context, &queries, 6, &[ids.end, ids.eos])?;
        r.context_tokens += case.context.len();
        for (qi, q) in case.questions.iter().enumerate() {
            r.questions += 1;
            let text = tok
                .decode(&a.tokens[qi])
                .map_err(|e| ModelError::Invalid(e.to_string()))?;
            r.exact += usize::from(text.trim() == q.answer);
            r.answers.push(a.tokens[qi].clone());
            r.selected.push(a.selected[qi].clone());
            for (l, sel) in a.selected[qi].iter().enumerate() {
                // A layer that read every position (dense prefill) recalls trivially.
                let first = q.key_positions.start as i32;
                let hit = sel.is_empty() || sel.contains(&first);
                if let Some(c) = r.recall.get_mut(l) {
                    *c += usize::from(hit);
                }
            }
        }
    }
    Ok(r)
}

/// Held-out cases with `keys` keys per document, their depths spread over `lo..=0.95` of the
/// filler (evenly, offset per document by its seed so that the documents together cover the
/// range): one document per seed in `seeds`, `words` words of filler, Heldout split.
pub fn held_out_spread(
    tok: &Tokenizer,
    seeds: std::ops::Range<u64>,
    words: usize,
    keys: usize,
    lo: f64,
) -> Result<Vec<Case>> {
    let keys = keys.max(1);
    let (lo, hi) = (lo.clamp(0.0, 0.95), 0.95);
    let mut cases = Vec::new();
    for seed in seeds {
        // The document's offset in [0, 1): a golden-ratio sequence of the seed.
        let u = (seed as f64 * 0.618_033_988_749_895).fract();
        let depths: Vec<f64> = (0..keys)
            .map(|j| lo + (hi - lo) * (j as f64 + u) / keys as f64)
            .collect();
        cases.extend(held_out_cases(tok, seed..seed + 1, words, &depths)?);
    }
    Ok(cases)
}

/// `-log softmax(logits)[target]` in f64 (nats); +inf for a target outside the row.
pub fn next_token_nll(logits: &[f32], target: u32) -> f64 {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)) as f64;
    let lse = max
        + logits
            .iter()
            .map(|&v| (v as f64 - max).exp())
            .sum::<f64>()
            .ln();
    logits
        .get(target as usize)
        .map_or(f64::INFINITY, |&t| lse - t as f64)
}

/// The first `want` documents of [`held_out_spread`] (seeds from `first_seed` on) whose
/// contexts have a token count in `tokens`: a context-length band for an evaluation (documents
/// of the same filler words vary by a quarter in tokens). Seeds outside the band are skipped,
/// whatever their answers.
///
/// # Errors
/// [`ModelError::Invalid`] when 50 seeds per wanted document give too few.
pub fn held_out_band(
    tok: &Tokenizer,
    first_seed: u64,
    want: usize,
    words: usize,
    keys: usize,
    lo: f64,
    tokens: std::ops::RangeInclusive<usize>,
) -> Result<Vec<Case>> {
    let mut cases = Vec::with_capacity(want);
    let tries = 50 * want as u64;
    for seed in first_seed..first_seed + tries {
        if cases.len() == want {
            break;
        }
        let c = held_out_spread(tok, seed..seed + 1, words, keys, lo)?;
        cases.extend(c.into_iter().filter(|c| tokens.contains(&c.context.len())));
    }
    if cases.len() < want {
        return Err(ModelError::Invalid(format!(
            "{} of {want} documents of {words} words fall in {tokens:?} tokens after {tries} seeds",
            cases.len()
        )));
    }
    Ok(cases)
}

/// The next-token loss of grammar text over a range of positions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StoryLoss {
    /// Texts scored.
    pub texts: usize,
    /// Positions scored (those at or past `from`, over every text).
    pub positions: usize,
    /// Mean next-token loss (nats) over those positions.
    pub loss: f64,
}

/// The mean next-token loss (nats) of grammar text (stories, dialogue) on `model` as set (its
/// selection and backend), over the positions at or past `from` of `tokens`-token texts, one
/// text per seed in `seeds` (`<|bos|>` then [`crate::data::grammar_text`]`(seed, ..)`, cut to
/// `tokens`): the training split's names (the held-out names are unseen tokens, which would
/// dominate the loss), text of seeds the caller keeps disjoint from training's. Each text is one
/// prefill of every row (the sparse path once it passes the top-k). `model`'s pool needs
/// `tokens.div_ceil(block_size)` blocks.
pub fn story_loss(
    model: &mut crate::deepseek::model::Model,
    tok: &Tokenizer,
    seeds: std::ops::Range<u64>,
    tokens: usize,
    from: usize,
    backend: tileops_ops::Backend,
) -> Result<StoryLoss> {
    let tk = |e: crate::tokenizer::TokenizerError| ModelError::Invalid(e.to_string());
    if from + 1 >= tokens {
        return Err(ModelError::Invalid(format!(
            "from {from} leaves no position of a {tokens}-token text to score"
        )));
    }
    let bs = model.caches().block_size();
    let (mut sum, mut n, mut texts) = (0f64, 0usize, 0usize);
    for seed in seeds {
        // At least a token per word: ask for as many words as tokens, then cut.
        let text = crate::data::grammar_text(seed, tokens);
        let mut ids = tok.encode(&format!("{BOS}{text}")).map_err(tk)?;
        if ids.len() < tokens {
            return Err(ModelError::Invalid(format!(
                "seed {seed}: {} tokens of text, {tokens} needed",
                ids.len()
            )));
        }
        ids.truncate(tokens);
        let batch = crate::batch::prompt_batch(&ids, bs)?;
        let rows: Vec<usize> = (from..tokens - 1).collect();
        let logits = model.forward(&batch, &rows, backend)?;
        let logits = crate::deepseek::ops::to_vec_f32(&logits)?;
        let vocab = logits.len() / rows.len();
        for (i, &r) in rows.iter().enumerate() {
            sum += next_token_nll(&logits[i * vocab..(i + 1) * vocab], ids[r + 1]);
            n += 1;
        }
        texts += 1;
    }
    Ok(StoryLoss {
        texts,
        positions: n,
        loss: sum / n.max(1) as f64,
    })
}
