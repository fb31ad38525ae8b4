//! `paged_gather` cases.

use crate::support::*;
use candle_core::DType;
use tileops_ops::{paged_gather, Backend};

/// One gather case: random `src [t, c]` of `dtype`, the given indices and one-row table.
#[allow(clippy::too_many_arguments)]
fn gather_case(
    backend: Backend,
    seed: u64,
    (t, c): (usize, usize),
    dtype: DType,
    indices: &[i64],
    table: &[i64],
    block_size: usize,
    size: usize,
    index_dtype: DType,
    table_dtype: DType,
) {
    let mut rng = Rng::new(seed);
    let (src, src_v) = rand_data(&mut rng, &[t, c], dtype);
    let idx = ints(indices, &[1, indices.len()], index_dtype);
    let tab = ints(table, &[1, table.len()], table_dtype);
    check_backend(
        backend,
        || vec![gather_model(&src_v, c, indices, table, block_size, size)],
        |bk| {
            let out = paged_gather(&src, &idx, &tab, block_size, size, Some(bk))?;
            assert_eq!(out.dims(), &[indices.len(), size]);
            assert_eq!(out.dtype(), dtype);
            Ok(vec![Part::of("out", &out, EXACT)])
        },
    );
}

/// The upstream doc example: src [16, 32], 32 indices, block_table [1, 4], block_size 2,
/// size 16.
fn doc_example(backend: Backend) {
    let indices: Vec<i64> = (0..32).map(|i| (i * 5 + 3) % 8).collect();
    gather_case(
        backend,
        1,
        (16, 32),
        DType::F32,
        &indices,
        &[5, 2, 7, 0],
        2,
        16,
        DType::I32,
        DType::I32,
    );
}

/// The upstream small case: 33 buffer tokens, 30 columns, block 10, fp16 (the last block is
/// partial: only its first 3 rows exist).
fn small_odd_f16(backend: Backend) {
    // table [3, 0, 2, 1]: tokens 0..3 -> rows 30..33 (the partial block), 10..40 -> full blocks.
    let mut indices: Vec<i64> = vec![0, 1, 2, 2, 0];
    indices.extend((10..40).rev().step_by(3));
    indices.extend([39, 10, 25, 1]);
    gather_case(
        backend,
        2,
        (33, 30),
        DType::F16,
        &indices,
        &[3, 0, 2, 1],
        10,
        30,
        DType::I64,
        DType::I32,
    );
}

/// Partial columns, bf16, I64 indices and a U32 table.
fn partial_columns_bf16(backend: Backend) {
    let indices: Vec<i64> = (0..40).map(|i| (i * 7) % 24).collect();
    gather_case(
        backend,
        3,
        (64, 48),
        DType::BF16,
        &indices,
        &[7, 1, 4, 6, 0, 3],
        4,
        17,
        DType::I64,
        DType::U32,
    );
}

/// A table padded with -1 beyond the blocks any index reaches.
fn padded_table_f32(backend: Backend) {
    let indices: Vec<i64> = vec![0, 15, 3, 8, 12, 1];
    gather_case(
        backend,
        4,
        (40, 8),
        DType::F32,
        &indices,
        &[9, 2, 6, 4, -1, -1, -1],
        4,
        8,
        DType::I32,
        DType::I64,
    );
}

for_each_backend!(
    doc_example,
    small_odd_f16,
    partial_columns_bf16,
    padded_table_f32
);
