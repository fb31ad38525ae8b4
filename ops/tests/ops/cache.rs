//! `reshape_and_cache` cases: write rows by slot mapping, then read them back with
//! `paged_gather` through a block table.

use crate::support::*;
use candle_core::DType;
use tileops_ops::{paged_gather, reshape_and_cache, Backend};

/// Writes `n` rows of shape `row` into a `[num_blocks, block_size, ...row]` cache for one
/// sequence whose block table is `table`; token `i` goes to its slot, except the padding rows in
/// `skip` (slot -1). Checks the whole cache after the write and the rows gathered back.
#[allow(clippy::too_many_arguments)]
fn round_trip(
    backend: Backend,
    seed: u64,
    dtype: DType,
    num_blocks: usize,
    block_size: usize,
    row: &[usize],
    table: &[i64],
    n: usize,
    skip: &[usize],
) {
    let mut rng = Rng::new(seed);
    let width: usize = row.iter().product();
    let mut cache_shape = vec![num_blocks, block_size];
    cache_shape.extend_from_slice(row);
    let mut rows_shape = vec![n];
    rows_shape.extend_from_slice(row);
    let (cache0, cache_v) = rand_data(&mut rng, &cache_shape, dtype);
    let (rows, rows_v) = rand_data(&mut rng, &rows_shape, dtype);
    // Token i of the sequence (padding rows take no token).
    let mut slots = Vec::with_capacity(n);
    let mut tokens = Vec::new();
    let mut tok = 0usize;
    for i in 0..n {
        if skip.contains(&i) {
            slots.push(-1);
        } else {
            slots.push(table[tok / block_size] * block_size as i64 + (tok % block_size) as i64);
            tokens.push((i, tok as i64));
            tok += 1;
        }
    }
    let slot_t = ints(&slots, &[n], DType::I64);
    let idx: Vec<i64> = tokens.iter().map(|&(_, t)| t).collect();
    let idx_t = ints(&idx, &[1, idx.len()], DType::I32);
    let table_t = ints(table, &[1, table.len()], DType::I32);
    check_backend(
        backend,
        || {
            let written = cache_model(&cache_v, &rows_v, width, &slots);
            let back: Vec<f32> = tokens
                .iter()
                .flat_map(|&(i, _)| rows_v[i * width..(i + 1) * width].to_vec())
                .collect();
            vec![written, back]
        },
        |bk| {
            let cache = cache0.copy()?;
            reshape_and_cache(&rows, &cache, &slot_t, Some(bk))?;
            let flat = cache.reshape((num_blocks * block_size, width))?;
            let back = paged_gather(&flat, &idx_t, &table_t, block_size, width, Some(bk))?;
            Ok(vec![
                Part::of("cache", &cache, EXACT),
                Part::of("gathered", &back, EXACT),
            ])
        },
    );
}

/// K/V-shaped rows `[N, Hkv, D]`, f32, a shuffled table, one padding row.
fn round_trip_f32(backend: Backend) {
    round_trip(backend, 11, DType::F32, 6, 4, &[2, 8], &[5, 1, 3], 10, &[4]);
}

/// f16, block size 16, rows not filling the last block.
fn round_trip_f16(backend: Backend) {
    round_trip(
        backend,
        12,
        DType::F16,
        5,
        16,
        &[4, 16],
        &[2, 4, 0],
        37,
        &[0, 36],
    );
}

/// bf16 MLA latent rows `[N, 576]`, block 64.
fn round_trip_bf16_latent(backend: Backend) {
    round_trip(backend, 13, DType::BF16, 4, 64, &[576], &[3, 1], 70, &[]);
}

/// All rows but one are padding: only one slot changes.
fn mostly_padding(backend: Backend) {
    round_trip(backend, 14, DType::F32, 2, 4, &[8], &[1], 4, &[0, 1, 3]);
}

for_each_backend!(
    round_trip_f32,
    round_trip_f16,
    round_trip_bf16_latent,
    mostly_padding
);
