//! The ops' tests: every case is one body instantiated for each backend (`case::reference`,
//! `case::tilesim`, `case::ascend950`), checked against plain-Rust scalar models.

#![allow(clippy::result_large_err)]

#[macro_use]
#[path = "../support/mod.rs"]
mod support;

mod cache;
mod gather;
mod hardening;
mod hostile;
mod indexer;
mod invalid;
mod nonfinite;
mod paged;
mod round2;
mod snippets;
mod sparse;
mod tolerance;
mod unread;
