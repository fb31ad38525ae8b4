//! `tileops-models`: models built on the tileops operators.
//!
//! A paged KV-cache manager ([`kv_cache`]), a tiny DeepSeek-V3.2-style model ([`deepseek`]: MLA
//! in the absorbed decode form and a flash prefill, a lightning indexer picking top-k, int8 MoE
//! experts), a safetensors weight generator and loader ([`weights`]), a BPE tokenizer
//! ([`tokenizer`]), an engine that prefills and decodes a batch of prompts through the ops
//! ([`engine`]), the continuous-batching serving engine ([`serving`]: scheduler, prefix cache,
//! per-request sampling, metrics, on a thread of its own) and a progress line for the demo
//! ([`progress`]); their errors are all in [`error`]. It uses only the public
//! `tileops_ops` API.

pub mod batch;
pub mod data;
pub mod deepseek;
pub mod engine;
pub mod error;
pub mod eval;
pub mod kv_cache;
pub mod progress;
pub mod serving;
pub mod tokenizer;
pub mod train;
pub mod weights;
