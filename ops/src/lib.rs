//! `tileops-ops`: the tileops operators as candle custom ops.
//!
//! This crate will hold, per operator family (paged gather, sparse and dense PagedAttention,
//! flash attention, per-channel int8 quantization and quantized matmul, KV-cache writes): the
//! candle `CustomOp` with its input validation, the kernel template written in the tile DSL of
//! `tile-backend`, and a reference implementation composed from candle tensor ops. Each call will
//! pick a backend (`reference`, `sim` or `ascend950`).
//!
//! It is empty today: no operator is implemented yet. The operators arrive with their own issues;
//! until then nothing here should be mistaken for a working API.
