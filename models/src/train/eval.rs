//! Retrieval evaluation of the training forward: a question is answered when greedy decoding
//! after `context \n <|user|>question<|assistant|>` gives exactly the code's digits then
//! `<|end|>` (or `<|eos|>`). Computed by teacher forcing: one forward over the prompt and the
//! expected answer, every answer position's argmax compared; that is the same verdict as
//! greedy decoding, since greedy reproduces the answer exactly when each of its argmaxes does.

use super::model::{Mode, TrainModel};
use super::{Result, TrainError};
use crate::data::RetrievalDoc;
use crate::engine::argmax;
use crate::tokenizer::{Tokenizer, BOS};

/// Questions answered and asked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Score {
    /// Questions whose answer came out exactly.
    pub right: usize,
    /// Questions asked.
    pub total: usize,
    /// Answer tokens (digits and the closing `<|end|>`) whose argmax was right.
    pub tokens_right: usize,
    /// Answer tokens scored.
    pub tokens_total: usize,
}

impl Score {
    /// The share answered, in percent (0 when nothing was asked).
    pub fn percent(&self) -> f64 {
        100.0 * self.right as f64 / self.total.max(1) as f64
    }

    /// The share of answer tokens right, in percent.
    pub fn token_percent(&self) -> f64 {
        100.0 * self.tokens_right as f64 / self.tokens_total.max(1) as f64
    }
}

fn tok_err(e: impl std::fmt::Display) -> TrainError {
    TrainError::Invalid(e.to_string())
}

/// Exact-match retrieval of `m` in `mode` over every question of `docs` (each asked alone
/// after its document's context), by teacher forcing.
pub fn retrieval_exact(
    m: &TrainModel,
    tok: &Tokenizer,
    docs: &[RetrievalDoc],
    mode: Mode,
) -> Result<Score> {
    let ids = tok.special_ids().map_err(tok_err)?;
    let v = m.cfg.vocab_size;
    let mut score = Score::default();
    for doc in docs {
        for q in &doc.questions {
            let prompt = tok
                .encode(&format!("{BOS}{}\n{}", doc.context, q.query()))
                .map_err(tok_err)?;
            // The answer's tokens as training sees them: the whole turn encoded in place.
            let full = tok
                .encode(&format!("{BOS}{}\n{}", doc.context, q.turn()))
                .map_err(tok_err)?;
            if !full.starts_with(&prompt)
                || full.len() <= prompt.len()
                || full.last() != Some(&ids.end)
            {
                return Err(TrainError::Invalid(format!(
                    "the answer `{}` does not tokenise apart from its question",
                    q.answer
                )));
            }
            let answer = full[prompt.len()..].to_vec();
            let seq = full[..full.len() - 1].to_vec();
            if seq.len() > m.cfg.max_seq_len {
                return Err(TrainError::Invalid(format!(
                    "a question's prompt and answer take {} tokens, past max_seq_len {}",
                    seq.len(),
                    m.cfg.max_seq_len
                )));
            }
            let f = m.forward(&[seq], mode)?;
            let from = prompt.len() - 1;
            let logits = f.logits.narrow(0, from, answer.len())?.to_vec2::<f32>()?;
            let hits: Vec<bool> = logits
                .iter()
                .zip(&answer)
                .enumerate()
                .map(|(j, (row, &want))| {
                    let got = argmax(&row[..v]);
                    got == want || (j + 1 == answer.len() && got == ids.eos)
                })
                .collect();
            score.tokens_right += hits.iter().filter(|&&h| h).count();
            score.tokens_total += hits.len();
            score.right += usize::from(hits.iter().all(|&h| h));
            score.total += 1;
        }
    }
    Ok(score)
}
