//! Findings of the hardening review (issue #18), one test each: a non-contiguous `src` for
//! `paged_gather` on every backend, and candle errors that read as one line.

use crate::support::*;
use candle_core::{DType, Device, Tensor};
use tileops_ops::{paged_gather, Backend, OpError};

/// `src` passed as a transposed (non-contiguous) view gathers the rows of the view.
fn gather_non_contiguous_src(backend: Backend) {
    let (t, c, bs, size) = (12usize, 6usize, 4usize, 5usize);
    let mut rng = Rng::new(91);
    let stored = rng.vec(c * t, -1.0, 1.0); // [C, T], transposed below
    let src = Tensor::from_vec(stored.clone(), (c, t), &Device::Cpu)
        .and_then(|x| x.t())
        .expect("building the view");
    assert!(!src.is_contiguous());
    let src_v: Vec<f32> = (0..t)
        .flat_map(|r| (0..c).map(move |col| (r, col)))
        .map(|(r, col)| stored[col * t + r])
        .collect();
    let indices = [0i64, 7, 11, 4, 7];
    let table = [2i64, 0, 1];
    let idx = ints(&indices, &[1, indices.len()], DType::I32);
    let tab = ints(&table, &[1, table.len()], DType::I32);
    check_backend(
        backend,
        || vec![gather_model(&src_v, c, &indices, &table, bs, size)],
        |bk| {
            let out = paged_gather(&src, &idx, &tab, bs, size, Some(bk))?;
            Ok(vec![Part::of("rows", &out, EXACT)])
        },
    );
}

for_each_backend!(gather_non_contiguous_src);

/// A candle error carrying a captured backtrace becomes an `OpError` whose message is the
/// error's one line, without the stack dump.
#[test]
fn candle_errors_read_as_one_line_without_the_backtrace() {
    let inner = candle_core::Error::Msg("shape mismatch in index_select".into());
    let with_bt = candle_core::Error::WithBacktrace {
        inner: Box::new(inner),
        backtrace: Box::new(std::backtrace::Backtrace::force_capture()),
    };
    let e = OpError::from(with_bt.context("gathering rows"));
    let msg = e.to_string();
    assert!(!msg.contains('\n'), "multi-line message: {msg}");
    assert!(msg.contains("shape mismatch in index_select"), "{msg}");
    assert!(msg.contains("gathering rows"), "{msg}");
}
