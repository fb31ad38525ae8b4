//! `tileops-ops`: the tileops operators as candle custom ops.
//!
//! Every op takes candle tensors and a [`Backend`] chosen per call (`None`: the process default
//! from `TILEOPS_BACKEND`): [`Backend::Reference`] composes candle tensor ops, [`Backend::TileSim`]
//! runs the op's compiled tile kernels in the Ascend 950 simulator, [`Backend::Ascend950`]
//! writes the kernel package and reports that no device is present. See docs/ops.md.
//!
//! The ops: [`paged_gather()`], [`sparse_paged_attention`], [`paged_attention()`],
//! [`reshape_and_cache`], [`flash_attention()`], [`flash_attention_varlen`], [`qk_softmax`],
//! [`quant_matmul()`] (with [`quantize_per_channel`], [`quantize_per_token`] and the int8-output
//! [`quant_matmul_int8`]), [`lightning_indexer()`] (with its FP8 [`IndexKeyCache`],
//! [`index_cache_append`] and [`quantize_index_q`]).
//!
//! Public: the ops, their parameter and data types, [`Backend`], [`OpError`], [`profile`] and
//! its [`LaunchRecord`]s, [`limits`] (every limit an op checks) and [`registry`] (every op's
//! shape, its one set of shape rules, and the kernels it launches with their block counts, built
//! from shape parameters alone: what `tileops emit --op` writes). docs/ops.md lists the surface
//! and `tests/public_api.rs` holds it to that list.
//!
//! Crate-private: `runtime` (kernel cache, launcher, profiling hook), `bridge` (candle storage
//! <-> GM tensors, shared argument checks), `templates` (kernel templates shared by op folders),
//! and one folder per op family with `mod.rs` (the candle op and its validation), `shape.rs` (its
//! registry shape), `kernel.rs` (the tile DSL kernels and their host code) and `reference.rs`
//! (the Reference backend). Their tests live inside the crate (`kernel_tests`, and `tests`
//! modules beside the code).
//!
//! ```
//! use candle_core::{DType, Device, Tensor};
//! use tileops_ops::{paged_gather, Backend};
//!
//! let src = Tensor::arange(0f32, 64.0, &Device::Cpu)?.reshape((16, 4))?;
//! let indices = Tensor::new(&[[0i32, 5, 7]], &Device::Cpu)?;
//! let table = Tensor::new(&[[3u32, 0, 7, 1]], &Device::Cpu)?; // 4 blocks of 2 tokens
//! let rows = paged_gather(&src, &indices, &table, 2, 4, Some(Backend::Reference))?;
//! // token 5 -> block table[2] = 7, offset 1 -> physical row 15
//! assert_eq!(rows.to_vec2::<f32>()?[1], vec![60.0, 61.0, 62.0, 63.0]);
//! # let _ = DType::F32;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

// `OpError` carries the compiler's and the simulator's errors by value (runtime.rs and the kernels
// build those variants); errors are the cold path, so their size does not matter.
#![allow(clippy::result_large_err)]

mod backend;
mod bridge;
mod error;
mod flash_attention;
mod kv_cache;
mod lightning_indexer;
pub mod limits;
mod paged_attention;
mod paged_gather;
mod quant_matmul;
pub mod registry;
mod runtime;
mod sparse_attention;
mod templates;

// The crate's own tests of its kernels and runtime (crate-private items) share the integration
// tests' support module, which names this crate `tileops_ops`.
#[cfg(test)]
extern crate self as tileops_ops;
#[cfg(test)]
mod kernel_tests;

pub use backend::{Backend, BACKEND_ENV};
pub use error::OpError;
pub use flash_attention::{
    flash_attention, flash_attention_varlen, qk_softmax, FlashAttentionParams,
};
pub use kv_cache::reshape_and_cache;
pub use lightning_indexer::{
    f32_to_e4m3, hadamard_rotate, index_cache_append, lightning_indexer, quantize_index_q,
    scales_to_f32, ue8m0_to_f32, Fp8Conversion, Fp8Saturation, IndexKeyCache, IndexKeyFormat,
    LightningIndexerParams, RoundMode, ScaleFormat, FP8_E4M3_MAX, FP8_GROUP, FP8_MIN_AMAX,
};
pub use paged_attention::{paged_attention, PagedAttentionParams};
pub use paged_gather::paged_gather;
pub use quant_matmul::{
    quant_matmul, quant_matmul_int8, quantize_per_channel, quantize_per_token, round_scale_19,
    Int8MatmulParams, QuantMatmulParams, QuantizedActivations, QuantizedWeight,
};
pub use runtime::{arch, profile, LaunchRecord, PlanTarget, CPU_PLAN_BLOCKS, PACKAGE_DIR_ENV};
pub use sparse_attention::{sparse_paged_attention, SparseAttentionParams};
