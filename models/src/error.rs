//! The errors of the models crate, in one place: [`ModelError`] (the model and the engines) is
//! defined here; each subsystem's own error is re-exported beside it.

pub use crate::deepseek::config::ConfigError;
pub use crate::kv_cache::CacheError;
pub use crate::serving::ServingError;
pub use crate::tokenizer::TokenizerError;
pub use crate::train::TrainError;
pub use crate::weights::WeightError;

/// An error of the model or the engine.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// An operator refused its inputs or failed.
    #[error(transparent)]
    Op(Box<tileops_ops::OpError>),
    /// A candle tensor operation failed.
    #[error("tensor: {0}")]
    Candle(Box<candle_core::Error>),
    /// Weights are missing or misshapen.
    #[error(transparent)]
    Weights(Box<WeightError>),
    /// The KV cache is out of blocks or the sequence is unknown.
    #[error(transparent)]
    Cache(#[from] CacheError),
    /// A bad request (e.g. a prompt too long for `max_seq_len`).
    #[error("{0}")]
    Invalid(String),
}

impl From<tileops_ops::OpError> for ModelError {
    fn from(e: tileops_ops::OpError) -> Self {
        ModelError::Op(Box::new(e))
    }
}

impl From<candle_core::Error> for ModelError {
    fn from(e: candle_core::Error) -> Self {
        ModelError::Candle(Box::new(e))
    }
}

impl From<WeightError> for ModelError {
    fn from(e: WeightError) -> Self {
        ModelError::Weights(Box::new(e))
    }
}

/// The model's result type.
pub type Result<T> = std::result::Result<T, ModelError>;
