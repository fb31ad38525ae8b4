//! A tiny DeepSeek-V3.2-style model: MLA (absorbed decode over a latent cache), the lightning
//! indexer, a dense first layer, then MoE layers with int8 routed experts.

pub mod cache;
pub mod config;
pub mod indexer;
pub mod mla;
pub mod model;
pub mod moe;
pub mod ops;
