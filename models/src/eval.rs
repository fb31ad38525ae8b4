//! Retrieval evaluation of the ops model: held-out documents whose keys ("The code of the blue
//! door is 4821.") sit at chosen depths of a long context, each document prefilled once and
//! every question answered greedily on a fork of its sequence ([`Engine::answer_questions`]).
//! It reports exact match and, per layer, the recall of the selection: the share of questions
//! for which every token of the asked code was among the positions that layer's sparse
//! attention read for the question's last row (the row that chooses the first digit).
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
    /// Per layer: questions whose code tokens were all selected.
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
                let hit =
                    sel.is_empty() || q.key_positions.clone().all(|p| sel.contains(&(p as i32)));
                if let Some(c) = r.recall.get_mut(l) {
                    *c += usize::from(hit);
                }
            }
        }
    }
    Ok(r)
}
