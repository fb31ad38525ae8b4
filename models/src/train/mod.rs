//! Training the tiny DeepSeek-V3.2-style model on CPU with candle's autograd (skeleton; the
//! training loop lands here).
