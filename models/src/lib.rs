//! `tileops-models`: models built on the tileops operators.
//!
//! This crate will hold a paged KV-cache manager (block allocator, per-sequence block tables, slot
//! mapping), a small DeepSeek-V3.2-style model (MLA in the absorbed decode form, a lightning
//! indexer picking top-k, int8 MoE experts), a safetensors weight loader, a tokenizer and an
//! engine that prefills and decodes a batch of prompts through the ops.
//!
//! It is empty today: nothing is implemented until its issue lands.
