//! The demo's tokenizer: a byte-level BPE trained with the `tokenizers` crate from
//! `models/data/tokenizer_corpus.txt` (text written for this repository), saved as
//! `tokenizer.json` and loaded back; any other `tokenizer.json` loads too.

use std::path::Path;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{BpeTrainerBuilder, BPE};
use tokenizers::models::TrainerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::Tokenizer as HfTokenizer;

/// The shipped training text.
pub const CORPUS: &str = include_str!("../data/tokenizer_corpus.txt");

/// Vocabulary the training asks for (256 byte symbols plus merges; at most this many).
pub const TRAIN_VOCAB: usize = 1000;

/// A tokenizer error.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// The `tokenizers` crate failed (training, file, encoding).
    #[error("tokenizer: {0}")]
    Hf(String),
    /// A token id does not fit the model's vocabulary (ids must be below `vocab_size`).
    #[error(
        "tokenizer token `{token}` has id {id}, but the model's vocab_size is {max} (ids 0..{max})"
    )]
    TooLarge {
        /// The token with the largest id (an added token counts too).
        token: String,
        /// Its id.
        id: u32,
        /// The model's `vocab_size`.
        max: usize,
    },
}

fn hf(e: impl std::fmt::Display) -> TokenizerError {
    TokenizerError::Hf(e.to_string())
}

/// A tokenizer checked against a model's vocabulary size.
#[derive(Clone)]
pub struct Tokenizer {
    inner: HfTokenizer,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tokenizer({} tokens)", self.vocab_size())
    }
}

impl Tokenizer {
    /// Trains the byte-level BPE on [`CORPUS`] (deterministic).
    pub fn train() -> Result<Tokenizer, TokenizerError> {
        let mut trainer: TrainerWrapper = BpeTrainerBuilder::new()
            .vocab_size(TRAIN_VOCAB)
            .min_frequency(2)
            .show_progress(false)
            .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
            .build()
            .into();
        let mut inner = HfTokenizer::new(BPE::default());
        inner.with_pre_tokenizer(Some(ByteLevel::default().add_prefix_space(false)));
        inner.with_decoder(Some(ByteLevelDecoder::default()));
        inner.train(&mut trainer, CORPUS.lines()).map_err(hf)?;
        Ok(Tokenizer { inner })
    }

    /// Loads a `tokenizer.json`.
    pub fn from_file(path: &Path) -> Result<Tokenizer, TokenizerError> {
        let inner = HfTokenizer::from_file(path)
            .map_err(|e| TokenizerError::Hf(format!("{}: {e}", path.display())))?;
        Ok(Tokenizer { inner })
    }

    /// Saves as `tokenizer.json` at `path`.
    pub fn save(&self, path: &Path) -> Result<(), TokenizerError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(hf)?;
        }
        self.inner.save(path, false).map_err(hf)
    }

    /// The cached trained tokenizer at `path`, trained and saved on first use.
    pub fn load_or_train(path: &Path) -> Result<Tokenizer, TokenizerError> {
        if !path.exists() {
            Tokenizer::train()?.save(path)?;
        }
        Tokenizer::from_file(path)
    }

    /// Tokens in the vocabulary (added tokens included).
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The largest token id and its token (added tokens included), `None` for an empty
    /// vocabulary.
    pub fn max_id(&self) -> Option<(String, u32)> {
        self.inner
            .get_vocab(true)
            .into_iter()
            .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(&a.0)))
    }

    /// An error unless every token id (added tokens included) is below `max`: the ids index
    /// the model's embedding, so the largest id counts, not the number of tokens (a
    /// tokenizer.json of 10 tokens with an id of 5000 does not fit a 1024-token model).
    pub fn check_fits(&self, max: usize) -> Result<(), TokenizerError> {
        match self.max_id() {
            Some((token, id)) if id as usize >= max => {
                Err(TokenizerError::TooLarge { token, id, max })
            }
            _ => Ok(()),
        }
    }

    /// Token ids of `text`.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        Ok(self
            .inner
            .encode(text, false)
            .map_err(hf)?
            .get_ids()
            .to_vec())
    }

    /// The text of `ids`.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        self.inner.decode(ids, false).map_err(hf)
    }
}

/// Start of a document.
pub const BOS: &str = "<|bos|>";
/// End of a document.
pub const EOS: &str = "<|eos|>";
/// Start of a user turn (the chat template).
pub const USER: &str = "<|user|>";
/// Start of an assistant turn (the chat template).
pub const ASSISTANT: &str = "<|assistant|>";
/// End of a turn (the chat template).
pub const END: &str = "<|end|>";
/// The special tokens of [`Tokenizer::train_generated`], in id order (ids 0 to 4).
pub const SPECIAL_TOKENS: [&str; 5] = [BOS, EOS, USER, ASSISTANT, END];

/// Vocabulary [`Tokenizer::train_generated`] asks for (special tokens, 256 bytes, merges).
pub const GENERATED_VOCAB: usize = 1024;

/// The ids of the special tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpecialIds {
    /// `<|bos|>`.
    pub bos: u32,
    /// `<|eos|>`.
    pub eos: u32,
    /// `<|user|>`.
    pub user: u32,
    /// `<|assistant|>`.
    pub assistant: u32,
    /// `<|end|>`.
    pub end: u32,
}

/// An incremental detokeniser: feed ids one at a time, get text only once it is whole UTF-8
/// (a token that ends inside a character yields nothing until the character completes).
pub struct TextStream<'a> {
    inner: tokenizers::DecodeStream<
        'a,
        tokenizers::ModelWrapper,
        tokenizers::NormalizerWrapper,
        tokenizers::PreTokenizerWrapper,
        tokenizers::PostProcessorWrapper,
        tokenizers::DecoderWrapper,
    >,
}

impl std::fmt::Debug for TextStream<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TextStream")
    }
}

impl TextStream<'_> {
    /// Adds `id`; returns the new text, or `None` while a character is incomplete.
    pub fn step(&mut self, id: u32) -> Result<Option<String>, TokenizerError> {
        self.inner.step(id).map_err(hf)
    }
}

impl Tokenizer {
    /// Trains the byte-level BPE on [`crate::data::tokenizer_corpus`] (text of the data
    /// generator, Train split), about [`GENERATED_VOCAB`] tokens: [`SPECIAL_TOKENS`] first (ids
    /// 0-4), digits split into single-digit tokens (a pre-tokenizer isolates every digit, so
    /// codes are copied digit by digit), then byte-level BPE. Deterministic.
    pub fn train_generated() -> Result<Tokenizer, TokenizerError> {
        use tokenizers::pre_tokenizers::{digits::Digits, sequence::Sequence};
        let specials: Vec<tokenizers::AddedToken> = SPECIAL_TOKENS
            .iter()
            .map(|t| tokenizers::AddedToken::from(*t, true))
            .collect();
        let mut trainer: TrainerWrapper = BpeTrainerBuilder::new()
            .vocab_size(GENERATED_VOCAB)
            .min_frequency(2)
            .show_progress(false)
            .special_tokens(specials)
            .initial_alphabet(ByteLevel::alphabet().into_iter().collect())
            .build()
            .into();
        let mut inner = HfTokenizer::new(BPE::default());
        inner.with_pre_tokenizer(Some(Sequence::new(vec![
            Digits::new(true).into(),
            ByteLevel::default().add_prefix_space(false).into(),
        ])));
        inner.with_decoder(Some(ByteLevelDecoder::default()));
        let corpus = crate::data::tokenizer_corpus();
        inner.train(&mut trainer, corpus.lines()).map_err(hf)?;
        Ok(Tokenizer { inner })
    }

    /// The id of token `token`, if it is in the vocabulary.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The special tokens' ids; an error naming the first one missing (a tokenizer not made by
    /// [`Tokenizer::train_generated`] may lack them).
    pub fn special_ids(&self) -> Result<SpecialIds, TokenizerError> {
        let id = |t: &str| {
            self.token_id(t)
                .ok_or_else(|| TokenizerError::Hf(format!("no special token {t}")))
        };
        Ok(SpecialIds {
            bos: id(BOS)?,
            eos: id(EOS)?,
            user: id(USER)?,
            assistant: id(ASSISTANT)?,
            end: id(END)?,
        })
    }

    /// Token ids of `text` and each token's byte range in it.
    pub fn encode_with_offsets(
        &self,
        text: &str,
    ) -> Result<(Vec<u32>, Vec<std::ops::Range<usize>>), TokenizerError> {
        let enc = self.inner.encode(text, false).map_err(hf)?;
        let offsets = enc.get_offsets().iter().map(|&(a, b)| a..b).collect();
        Ok((enc.get_ids().to_vec(), offsets))
    }

    /// The positions of the tokens of `text` that overlap the byte range `span` (e.g. a
    /// retrieval key's [`crate::data::Question::key_span`]).
    pub fn token_span(
        &self,
        text: &str,
        span: std::ops::Range<usize>,
    ) -> Result<std::ops::Range<usize>, TokenizerError> {
        let (_, offsets) = self.encode_with_offsets(text)?;
        let hit = |r: &std::ops::Range<usize>| r.start < span.end && span.start < r.end;
        let first = offsets.iter().position(hit);
        let last = offsets.iter().rposition(hit);
        match (first, last) {
            (Some(a), Some(b)) => Ok(a..b + 1),
            _ => Err(TokenizerError::Hf(format!(
                "no token overlaps bytes {span:?} of a {}-byte text",
                text.len()
            ))),
        }
    }

    /// An incremental detokeniser (special tokens kept unless `skip_special`).
    pub fn stream(&self, skip_special: bool) -> TextStream<'_> {
        TextStream {
            inner: self.inner.decode_stream(skip_special),
        }
    }
}
