//! A tiny DeepSeek-V3.2-style model: MLA, the lightning indexer, MoE.

pub mod config;
