//! `paged_attention` cases (GQA, ragged context lengths).

use crate::support::*;
use candle_core::DType;
use tileops_ops::{paged_attention, Backend, PagedAttentionParams};

/// One dense case: `(B, H, Hkv, D)`, block size, `max_blocks` and `num_blocks`, and one context
/// length per sequence; each sequence gets `ceil(len / block_size)` shuffled blocks, the rest of
/// its table row is -1.
#[allow(clippy::too_many_arguments)]
fn run(
    backend: Backend,
    seed: u64,
    dtype: DType,
    (b, h, hkv, d): (usize, usize, usize, usize),
    block_size: usize,
    (max_blocks, num_blocks): (usize, usize),
    lens: &[i64],
    table_dtype: DType,
) {
    assert_eq!(lens.len(), b);
    let mut rng = Rng::new(seed);
    let (q, q_v) = rand_data(&mut rng, &[b, h, d], dtype);
    let shape = [num_blocks, block_size, hkv, d];
    let (k, k_v) = rand_data(&mut rng, &shape, dtype);
    let (v, v_v) = rand_data(&mut rng, &shape, dtype);
    let perm = rng.perm(num_blocks);
    let mut table = vec![-1i64; b * max_blocks];
    let mut next = 0;
    for (s, &len) in lens.iter().enumerate() {
        for j in 0..(len as usize).div_ceil(block_size) {
            table[s * max_blocks + j] = perm[next] as i64;
            next += 1;
        }
    }
    if table_dtype == DType::U32 {
        for e in table.iter_mut().filter(|e| **e < 0) {
            *e = u32::MAX as i64; // unreached entries may hold anything
        }
    }
    let table_t = ints(&table, &[b, max_blocks], table_dtype);
    let lens_t = ints(lens, &[b], DType::I32);
    let scale = (d as f32).powf(-0.5);
    let (want, spread) = paged_model_with_spread(
        &q_v,
        &k_v,
        &v_v,
        &table,
        lens,
        [b, h, hkv, d, block_size, max_blocks],
        scale,
    );
    check_backend(
        backend,
        || vec![want.clone()],
        |bk| {
            let params = PagedAttentionParams { scale };
            let out = paged_attention(&q, &k, &v, &table_t, &lens_t, &params, Some(bk))?;
            assert_eq!(out.dims(), &[b, h, d]);
            assert_eq!(out.dtype(), dtype);
            Ok(vec![Part::attention_out(&out, dtype, &spread)])
        },
    );
}

/// GQA (4 query heads per KV head), context lengths 1, a block multiple and non-multiples.
fn gqa_f32(backend: Backend) {
    run(
        backend,
        201,
        DType::F32,
        (4, 8, 2, 64),
        16,
        (8, 24),
        &[1, 37, 16, 100],
        DType::I32,
    );
}

/// Contexts beyond 256 tokens (the CPU plan's longest chunk): several full chunks, a ragged
/// last one, and a short row beside them.
fn gqa_f32_long(backend: Backend) {
    run(
        backend,
        206,
        DType::F32,
        (3, 8, 2, 64),
        16,
        (40, 128),
        &[300, 513, 7],
        DType::I32,
    );
}

fn gqa_f16(backend: Backend) {
    run(
        backend,
        202,
        DType::F16,
        (3, 16, 4, 128),
        16,
        (6, 16),
        &[1, 17, 90],
        DType::I64,
    );
}

fn gqa_bf16(backend: Backend) {
    run(
        backend,
        203,
        DType::BF16,
        (2, 32, 8, 128),
        16,
        (12, 20),
        &[129, 1],
        DType::U32,
    );
}

/// Multi-head (Hkv = H) with a small block size, and multi-query (Hkv = 1) at full capacity.
fn mha_and_mqa(backend: Backend) {
    run(
        backend,
        204,
        DType::F32,
        (2, 4, 4, 32),
        4,
        (5, 12),
        &[3, 19],
        DType::I32,
    );
    run(
        backend,
        205,
        DType::BF16,
        (2, 8, 1, 64),
        8,
        (4, 8),
        &[32, 9],
        DType::I64,
    );
}

for_each_backend!(gqa_f32, gqa_f32_long, gqa_f16, gqa_bf16, mha_and_mqa);
