//! `tileops`: high-level inference operators for candle, compiled through a tile compiler to
//! Ascend 950 kernels and run on a faithful CPU simulator.
//!
//! The operators (sparse top-k PagedAttention in the DeepSeek-V3.2 style, dense PagedAttention,
//! flash attention and per-channel int8 quantized matmul) take and return candle tensors. Their
//! forward passes are written as kernel templates in a tile DSL and lowered by our own tile
//! compiler; the same compiled tile program either runs on a CPU simulator of the Ascend 950 tile
//! machine or is emitted as PTO-ISA C++ for the device. Data flows one way:
//!
//! ```text
//! candle tensors -> op validation -> kernel template (tile DSL)
//!     -> compile (verify, plan memory, insert sync)
//!     -> { simulate on CPU | emit PTO-ISA C++ } -> candle tensor out
//! ```
//!
//! This facade re-exports the workspace crates:
//!
//! - [`tile_backend`]: the machine model, tile IR and builder, verifier, passes (memory planning,
//!   sync insertion), the CPU simulator with its cost report and hazard checks, and the PTO-ISA
//!   C++ code generator.
//! - [`ops`] (`tileops-ops`): the candle custom ops `paged_gather`, `sparse_paged_attention`,
//!   `paged_attention`, `reshape_and_cache`, `flash_attention`, `flash_attention_varlen`,
//!   `qk_softmax` and `quant_matmul` (with its quantisers and the int8-output
//!   `quant_matmul_int8`), each on the Reference, TileSim and Ascend950 backends,
//!   `lightning_indexer` (with its FP8 index-key cache; on the kernel backends for f32/f16/bf16
//!   key caches, FP8 keys Reference only), and the op registry that `tileops emit --op` serves.
//! - [`models`] (`tileops-models`): the paged KV-cache manager, the DeepSeek-V3.2-style model
//!   (MLA, lightning indexer, int8 MoE) with its config, weight loader and tokenizer, the
//!   training loop and its seeded data generators (which made the shipped checkpoint
//!   `models/checkpoints/tiny`), the decode engine the `deepseek_decode` example runs, and the
//!   continuous-batching serving engine.
//!
//! The `tileops` binary checks, simulates and emits serialized kernels (`check`, `sim`, `emit`,
//! `example`) and writes the registered ops' kernel packages (`emit --op`).
//! With the default `server` feature, [`serve`] is the OpenAI-compatible HTTP layer over
//! `tileops_models::serving` and `tileops-serve` its binary (docs/serving.md).

pub use tile_backend;
pub use tileops_models as models;
pub use tileops_ops as ops;

#[cfg(feature = "server")]
pub mod serve;
