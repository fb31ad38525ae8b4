//! (op layer: candle op, validation; reference in reference.rs)

pub mod kernel;
