//! OpenAI's request and response shapes (the subset docs/serving.md lists), with serde.
//!
//! Requests deny unknown fields: a field this server does not implement is refused with a 400
//! naming it rather than silently ignored.

use serde::{Deserialize, Serialize};

/// A prompt: a string, one string in an array, or token ids.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    /// Text.
    Text(String),
    /// A batch of texts (only one is accepted: `n` and batched prompts are not supported).
    Texts(Vec<String>),
    /// Token ids.
    Tokens(Vec<u32>),
}

/// `stop`: one string or several.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    /// One stop string.
    One(String),
    /// Several.
    Many(Vec<String>),
}

impl Stop {
    /// The strings.
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Stop::One(s) => vec![s],
            Stop::Many(v) => v,
        }
    }
}

/// `stream_options`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamOptions {
    /// Send a last chunk with `usage` (and every other chunk with `"usage": null`).
    #[serde(default)]
    pub include_usage: bool,
}

/// `POST /v1/completions`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompletionRequest {
    /// The prompt.
    pub prompt: Prompt,
    /// The model id (must be the served one).
    pub model: String,
    /// Tokens to generate at most (default 16, as OpenAI).
    pub max_tokens: Option<usize>,
    /// Each token's log-probability and this many alternatives (0 to 5).
    pub logprobs: Option<usize>,
    /// Temperature in `[0, 2]` (default 1).
    pub temperature: Option<f32>,
    /// Nucleus in `(0, 1]` (default 1).
    pub top_p: Option<f32>,
    /// Top-k (a vLLM extension; 0 or absent: off).
    pub top_k: Option<usize>,
    /// Seed of the request's sampler (default 0).
    pub seed: Option<u64>,
    /// Stop strings (at most 4).
    pub stop: Option<Stop>,
    /// Stream server-sent events.
    #[serde(default)]
    pub stream: bool,
    /// Streaming options.
    pub stream_options: Option<StreamOptions>,
    /// Choices per prompt: only 1.
    pub n: Option<usize>,
    /// An end-user id (accepted, unused).
    pub user: Option<String>,
}

/// One chat message.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// Its text.
    pub content: String,
    /// A participant name (accepted, unused).
    pub name: Option<String>,
}

/// `POST /v1/chat/completions`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatRequest {
    /// The conversation.
    pub messages: Vec<Message>,
    /// The model id (must be the served one).
    pub model: String,
    /// Tokens to generate at most (default: up to the context length).
    pub max_tokens: Option<usize>,
    /// The newer name of `max_tokens` (wins when both are given).
    pub max_completion_tokens: Option<usize>,
    /// Report each token's log-probability.
    pub logprobs: Option<bool>,
    /// With `logprobs`, this many alternatives per token (0 to 20).
    pub top_logprobs: Option<usize>,
    /// Temperature in `[0, 2]` (default 1).
    pub temperature: Option<f32>,
    /// Nucleus in `(0, 1]` (default 1).
    pub top_p: Option<f32>,
    /// Top-k (a vLLM extension; 0 or absent: off).
    pub top_k: Option<usize>,
    /// Seed of the request's sampler (default 0).
    pub seed: Option<u64>,
    /// Stop strings (at most 4).
    pub stop: Option<Stop>,
    /// Stream server-sent events.
    #[serde(default)]
    pub stream: bool,
    /// Streaming options.
    pub stream_options: Option<StreamOptions>,
    /// Choices per prompt: only 1.
    pub n: Option<usize>,
    /// An end-user id (accepted, unused).
    pub user: Option<String>,
}

/// Token counts of a request.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Generated tokens.
    pub completion_tokens: usize,
    /// Their sum.
    pub total_tokens: usize,
}

/// An error object: `{"error": {message, type, param, code}}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorObject,
}

/// OpenAI's error fields.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorObject {
    /// What went wrong.
    pub message: String,
    /// `invalid_request_error`, `rate_limit_error`, `server_error`...
    #[serde(rename = "type")]
    pub kind: String,
    /// The offending parameter, if one.
    pub param: Option<String>,
    /// A short machine-readable code, if one.
    pub code: Option<String>,
}

/// The fixed chat template (documented in docs/serving.md): each message as
/// `<|role|>\n{content}\n`, then `<|assistant|>\n` for the reply. The markers are plain text to
/// today's byte-level tokenizer. `Err(index)` names a message with an unknown role.
pub fn chat_prompt(messages: &[Message]) -> Result<String, usize> {
    let mut s = String::new();
    for (i, m) in messages.iter().enumerate() {
        match m.role.as_str() {
            "system" | "user" | "assistant" => {}
            _ => return Err(i),
        }
        s.push_str("<|");
        s.push_str(&m.role);
        s.push_str("|>\n");
        s.push_str(&m.content);
        s.push('\n');
    }
    s.push_str("<|assistant|>\n");
    Ok(s)
}
