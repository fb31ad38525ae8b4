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
