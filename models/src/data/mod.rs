//! Seeded training and evaluation data written for this repository: simple English from a
//! grammar of our own ([`grammar_text`], parsed back by [`accepts`]) and long-range retrieval
//! documents ([`retrieval_doc`]): keys stated once in grammar filler, then questions whose
//! answers are copied from far back. No text is copied from anywhere; every word list is in
//! `lexicon.rs` and every sentence comes from the rules in `grammar.rs` (listed in `parse.rs`).
//!
//! Everything is a pure function of its seed (SplitMix64, no crate RNG), so a seed names the
//! same text on every machine. The [`Split::Heldout`] side uses names, key pairs and codes that
//! [`Split::Train`] never produces (see [`Split`]), so evaluation questions are unseen.
//!
//! A training stream ([`training_text`]) is documents wrapped in the tokenizer's special tokens:
//! `<|bos|>` text `<|eos|>`, and a retrieval document's questions as chat turns after its
//! context: `<|user|>What is the code of the blue door?<|assistant|>4821<|end|>`.

mod grammar;
mod lexicon;
mod parse;
mod retrieval;
mod rng;

#[cfg(test)]
mod tests;

pub use parse::accepts;

use crate::tokenizer::{ASSISTANT, BOS, END, EOS, USER};
use grammar::{join, Gen};
use rng::Rng;

/// Which side of the train / held-out partition a text is drawn from.
///
/// Disjoint by construction: names come from two disjoint lists (32 train, 16 held-out); a key
/// (colour, object) pair and a 4-digit code belong to Heldout when a fixed hash of it is 0
/// mod 4 (27 of the 144 pairs, about a quarter of the codes 1000-9999), to Train otherwise.
/// Colours, key objects and every other word are shared, so held-out text tokenizes with the
/// trained vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Split {
    /// Training text.
    Train,
    /// Evaluation text: names, key pairs and codes never produced for Train.
    Heldout,
}

impl Split {
    fn names(self) -> &'static [lexicon::Name] {
        match self {
            Split::Train => lexicon::NAMES_TRAIN,
            Split::Heldout => lexicon::NAMES_HELDOUT,
        }
    }

    /// Whether `name` is one of this split's names.
    pub fn has_name(self, name: &str) -> bool {
        self.names().iter().any(|n| n.word == name)
    }

    /// Whether the 4-digit `code` belongs to this split.
    pub fn has_code(self, code: u32) -> bool {
        (1000..=9999).contains(&code) && retrieval::code_split(code) == self
    }

    /// Whether the key "the `color` `object`" belongs to this split (false for unknown words).
    pub fn has_key(self, color: &str, object: &str) -> bool {
        let c = lexicon::COLORS.iter().position(|&w| w == color);
        let o = lexicon::KEY_OBJECTS.iter().position(|&w| w == object);
        matches!((c, o), (Some(c), Some(o)) if retrieval::pair_split((c, o)) == self)
    }

    /// How many distinct keys (and so questions) one document of this split can hold.
    pub fn max_keys(self) -> usize {
        retrieval::pairs(self).len()
    }
}

/// Simple English from the grammar (stories, dialogue, sentences), at least `approx_words`
/// words (a few more: it ends at the end of a piece); Train names. Deterministic per seed.
pub fn grammar_text(seed: u64, approx_words: usize) -> String {
    grammar_text_in(seed, Split::Train, approx_words)
}

/// [`grammar_text`] with the names of `split`.
pub fn grammar_text_in(seed: u64, split: Split, approx_words: usize) -> String {
    join(&Gen::new(seed, split.names()).units(approx_words))
}

/// The sentences of `text`, trimmed: split after '.', '?' or '!' (when followed by whitespace,
/// a special token or the end), at line breaks and at special tokens (`<|...|>`, dropped). A
/// trailing piece without final punctuation is returned too ([`accepts`] rejects it), so a
/// caller scoring a continuation cut mid-sentence should drop it.
pub fn sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for chunk in text.split("<|").enumerate().flat_map(|(i, c)| {
        // After a "<|", the special token's name runs to "|>".
        let c = if i == 0 {
            c
        } else {
            c.split_once("|>").map_or("", |(_, rest)| rest)
        };
        c.split('\n')
    }) {
        let mut start = 0;
        let bytes = chunk.as_bytes();
        for (i, &b) in bytes.iter().enumerate() {
            let end = matches!(b, b'.' | b'?' | b'!');
            if end && bytes.get(i + 1).is_none_or(|n| n.is_ascii_whitespace()) {
                push_trimmed(&mut out, &chunk[start..=i]);
                start = i + 1;
            }
        }
        push_trimmed(&mut out, &chunk[start..]);
    }
    out
}

/// How much of a text the grammar accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Acceptance {
    /// Complete sentences (those ending in '.', '?' or '!').
    pub sentences: usize,
    /// Of those, how many [`accepts`] accepts.
    pub accepted: usize,
}

impl Acceptance {
    /// The accepted share (1 for a text without a complete sentence).
    pub fn rate(&self) -> f64 {
        if self.sentences == 0 {
            1.0
        } else {
            self.accepted as f64 / self.sentences as f64
        }
    }
}

/// Scores a model's continuation: every sentence of `text` counts except a last one cut off
/// before its final mark (a continuation stops mid-sentence); a piece without a final mark
/// elsewhere counts as a rejected sentence.
pub fn acceptance(text: &str) -> Acceptance {
    let mut parts = sentences(text);
    let cut = !text.trim_end().ends_with(['.', '?', '!']);
    if cut {
        parts.pop();
    }
    Acceptance {
        sentences: parts.len(),
        accepted: parts.iter().filter(|s| accepts(s)).count(),
    }
}

fn push_trimmed<'a>(out: &mut Vec<&'a str>, s: &'a str) {
    let s = s.trim();
    if !s.is_empty() {
        out.push(s);
    }
}

/// One retrieval question: the prompt, its answer, and where the answer is stated.
#[derive(Debug, Clone, PartialEq)]
pub struct Question {
    /// The question ("What is the code of the blue door?").
    pub prompt: String,
    /// The answer: the code's digits ("4821").
    pub answer: String,
    /// Byte range, in the document's `context`, of the code where the key states it.
    pub key_span: std::ops::Range<usize>,
    /// The key's requested depth: a fraction of the filler's words (0 = before the first
    /// sentence, 1 = after the last); the key sits at the first sentence end reaching it.
    pub depth: f64,
}

impl Question {
    /// The text a model sees after the context: `<|user|>{prompt}<|assistant|>`.
    pub fn query(&self) -> String {
        format!("{USER}{}{ASSISTANT}", self.prompt)
    }

    /// The whole chat turn: [`Question::query`], the answer, then `<|end|>`.
    pub fn turn(&self) -> String {
        format!("{}{}{END}", self.query(), self.answer)
    }
}

/// A long context with keys stated once, and questions about them.
#[derive(Debug, Clone, PartialEq)]
pub struct RetrievalDoc {
    /// Grammar filler with the key statements inside it.
    pub context: String,
    /// One question per key.
    pub questions: Vec<Question>,
}

impl RetrievalDoc {
    /// The document as training text: the context, a line break, then every question's turn.
    pub fn text(&self) -> String {
        let mut s = self.context.clone();
        s.push('\n');
        for q in &self.questions {
            s.push_str(&q.turn());
        }
        s
    }
}

/// Where each of the keys goes: which document, which depths, how many words of filler.
#[derive(Debug, Clone, PartialEq)]
pub struct RetrievalSpec {
    /// Seed of the filler, the key pairs and the codes.
    pub seed: u64,
    /// The split whose names, pairs and codes are drawn.
    pub split: Split,
    /// Words of filler (at least; it ends at the end of a piece).
    pub approx_words: usize,
    /// One key per entry: the fraction of filler words before it, in `0.0..=1.0`; the
    /// questions come in this order. At most [`Split::max_keys`] are used.
    pub depths: Vec<f64>,
}

/// The document `spec` describes (see [`RetrievalSpec`]).
pub fn retrieval_doc_with(spec: &RetrievalSpec) -> RetrievalDoc {
    retrieval::build(
        spec.seed,
        spec.split,
        spec.approx_words,
        &spec.depths,
        false,
    )
}

/// A document of about `approx_words` words of filler holding `n_keys` keys (at most
/// [`Split::max_keys`]) at spread depths (key `i` uniformly within the `i`-th of `n_keys`
/// equal slices), then one question per key in random order.
pub fn retrieval_doc(seed: u64, split: Split, approx_words: usize, n_keys: usize) -> RetrievalDoc {
    spread_doc(seed, split, approx_words, n_keys, false)
}

/// [`retrieval_doc`], the filler capped at `approx_words` words when `cap`.
fn spread_doc(
    seed: u64,
    split: Split,
    approx_words: usize,
    n_keys: usize,
    cap: bool,
) -> RetrievalDoc {
    let mut rng = Rng::new(seed, 0x6465_7074);
    let n = n_keys.max(1) as f64;
    let depths: Vec<f64> = (0..n_keys)
        .map(|i| (i as f64 + rng.below(1001) as f64 / 1000.0) / n)
        .collect();
    let mut doc = retrieval::build(seed, split, approx_words, &depths, cap);
    rng.shuffle(&mut doc.questions);
    doc
}

/// A document with a single key at `depth_fraction` of the filler (0 = first, 1 = last).
pub fn retrieval_doc_at(
    seed: u64,
    split: Split,
    approx_words: usize,
    depth_fraction: f64,
) -> RetrievalDoc {
    retrieval::build(seed, split, approx_words, &[depth_fraction], false)
}

/// What a training stream is made of.
#[derive(Debug, Clone, PartialEq)]
pub struct Mix {
    /// Share of documents that are retrieval documents (the rest are grammar text).
    pub retrieval_share: f64,
    /// Words of a grammar document (inclusive range).
    pub grammar_words: (usize, usize),
    /// Words of a retrieval document's filler (inclusive range).
    pub context_words: (usize, usize),
    /// Keys in a retrieval document (inclusive range).
    pub keys: (usize, usize),
    /// Whether the word counts are maxima (documents cut at a sentence end), as a training
    /// window needs; otherwise minima (documents end at the end of a piece).
    pub cap: bool,
}

impl Default for Mix {
    /// Half retrieval; grammar documents of 60-400 words; contexts of 100-900 words (about
    /// 150-1300 tokens of the generated tokenizer, 1.46 tokens a word) with 1-6 keys.
    fn default() -> Mix {
        Mix {
            retrieval_share: 0.5,
            grammar_words: (60, 400),
            context_words: (100, 900),
            keys: (1, 6),
            cap: false,
        }
    }
}

/// Tokens a word of Train-split text takes with [`crate::tokenizer::Tokenizer::train_generated`]
/// (measured on 20 000 words of [`training_text`]: 1.46; rounded up).
pub const TOKENS_PER_WORD: f64 = 1.5;

impl Mix {
    /// A mix whose documents fit a training window of `tokens` tokens (so a retrieval
    /// document's questions are seen with their keys): documents capped at about 80% of the
    /// window, questions included.
    pub fn for_window(tokens: usize) -> Mix {
        let words = (tokens as f64 * 0.8 / TOKENS_PER_WORD) as usize;
        Mix::for_window_keys(tokens, (words / 60).clamp(1, 6))
    }

    /// [`Mix::for_window`] with up to `max_keys` keys per retrieval document (at least 1, at
    /// most [`Split::max_keys`] are used): more keys leave less filler.
    pub fn for_window_keys(tokens: usize, max_keys: usize) -> Mix {
        let words = (tokens as f64 * 0.8 / TOKENS_PER_WORD) as usize;
        let max_keys = max_keys.max(1);
        // Each key costs about 30 tokens (20 words): its statement (about 13 tokens) inside the
        // context and its question's turn (about 17) after it; keep them inside the window.
        let context = words.saturating_sub(max_keys * 20).max(20);
        Mix {
            retrieval_share: 0.5,
            grammar_words: ((words / 6).max(10), words.max(10)),
            context_words: ((context / 6).max(10), context),
            keys: (1, max_keys),
            cap: true,
        }
    }
}

/// The documents of [`training_text_with`] (same seeds, same order), without special tokens,
/// for a trainer that batches whole documents.
pub fn training_docs(seed: u64, approx_words: usize, mix: &Mix) -> Vec<String> {
    let mut rng = Rng::new(seed, 0x7374_7265);
    let mut docs = Vec::new();
    let mut words = 0;
    while words < approx_words.max(1) {
        let doc = training_doc(rng.fork(), mix);
        words += doc.split_whitespace().count();
        docs.push(doc);
    }
    docs
}

/// One training document for `seed` (Train split), without special tokens: grammar text, or a
/// retrieval document's [`RetrievalDoc::text`].
pub fn training_doc(seed: u64, mix: &Mix) -> String {
    let mut rng = Rng::new(seed, 0x0064_6f63);
    let doc_seed = rng.fork();
    if rng.chance(mix.retrieval_share) {
        let words = rng.range(mix.context_words.0, mix.context_words.1);
        let keys = rng.range(mix.keys.0, mix.keys.1);
        spread_doc(doc_seed, Split::Train, words, keys, mix.cap).text()
    } else {
        let words = rng.range(mix.grammar_words.0, mix.grammar_words.1);
        let mut gen = Gen::new(doc_seed, Split::Train.names());
        if mix.cap {
            join(&gen.units_capped(words, words))
        } else {
            join(&gen.units(words))
        }
    }
}

/// A training stream of at least `approx_words` words: [`training_doc`]s of the default
/// [`Mix`], each as `<|bos|>` document `<|eos|>`.
pub fn training_text(seed: u64, approx_words: usize) -> String {
    training_text_with(seed, approx_words, &Mix::default())
}

/// [`training_text`] with a chosen [`Mix`].
pub fn training_text_with(seed: u64, approx_words: usize, mix: &Mix) -> String {
    let mut s = String::new();
    for doc in training_docs(seed, approx_words, mix) {
        s.push_str(BOS);
        s.push_str(&doc);
        s.push_str(EOS);
    }
    s
}

/// Words of [`tokenizer_corpus`] (about: it ends at a document's end).
pub const TOKENIZER_CORPUS_WORDS: usize = 60_000;

/// The BPE's training text: Train-split documents only (so held-out names add no merges),
/// without special tokens (the tokenizer adds those itself), retrieval questions and answers
/// as plain lines. Deterministic.
pub fn tokenizer_corpus() -> String {
    let mut rng = Rng::new(0x0074_6f6b, 0);
    let mix = Mix::default();
    let mut s = String::new();
    let mut words = 0;
    while words < TOKENIZER_CORPUS_WORDS {
        let seed = rng.fork();
        let doc = if rng.chance(mix.retrieval_share) {
            let d = retrieval_doc(seed, Split::Train, rng.range(100, 400), rng.range(1, 6));
            let mut t = d.context;
            for q in d.questions {
                t.push('\n');
                t.push_str(&q.prompt);
                t.push('\n');
                t.push_str(&q.answer);
            }
            t
        } else {
            grammar_text(seed, rng.range(60, 400))
        };
        words += doc.split_whitespace().count();
        s.push_str(&doc);
        s.push_str("\n\n");
    }
    s
}
