//! `reshape_and_cache` cases: write rows by slot mapping, then read them back with
//! `paged_gather` through a block table.

use crate::support::*;
use candle_core::{DType, Device, Tensor};
use tileops_ops::{paged_gather, reshape_and_cache, Backend, OpError};

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

/// The raw little-endian bytes of a data tensor (f32, f16, bf16), NaN payloads included.
fn raw_bytes(t: &Tensor) -> Vec<u8> {
    let t = t.flatten_all().expect("flattening a test tensor");
    match t.dtype() {
        DType::F32 => t
            .to_vec1::<f32>()
            .expect("reading f32")
            .iter()
            .flat_map(|v| v.to_bits().to_le_bytes())
            .collect(),
        DType::F16 => t
            .to_vec1::<half::f16>()
            .expect("reading f16")
            .iter()
            .flat_map(|v| v.to_bits().to_le_bytes())
            .collect(),
        DType::BF16 => t
            .to_vec1::<half::bf16>()
            .expect("reading bf16")
            .iter()
            .flat_map(|v| v.to_bits().to_le_bytes())
            .collect(),
        other => panic!("no raw bytes for {other:?}"),
    }
}

/// `n` bytes of a pattern full of values a float conversion would change: NaNs with payloads
/// (quiet and signalling, both signs), infinities, -0.0 and subnormals of `dtype`, mixed with
/// random bits.
fn odd_bytes(rng: &mut Rng, dtype: DType, n: usize) -> Vec<u8> {
    let specials: &[u64] = match dtype {
        DType::F32 => &[
            0x7fc0_1234,
            0xffa5_5a5a,
            0x7f80_0001,
            0x8000_0000,
            0x0000_0001,
            0x7f80_0000,
        ],
        _ => &[
            0x7e5a, 0xfd01, 0x7f81, 0x8000, 0x0001, 0x7c00, 0x7c01, 0xffff,
        ],
    };
    let es = dtype.size_in_bytes();
    let mut out = Vec::with_capacity(n * es);
    for i in 0..n {
        let bits = if i % 3 == 0 {
            specials[rng.below(specials.len())]
        } else {
            rng.next_u64()
        };
        out.extend_from_slice(&bits.to_le_bytes()[..es]);
    }
    out
}

/// The cache is a view (`narrow`) into a larger contiguous buffer whose every element is an odd
/// bit pattern (NaN payloads, -0.0, subnormals); the rows carry such patterns too. After the
/// write, the written slots hold the rows' bytes and every other byte of the whole buffer (the
/// rest of the cache, and the blocks before and after the view) is bit-identical. Ascend950:
/// nothing runs, so the whole buffer is unchanged.
fn untouched_bytes_are_bit_exact(backend: Backend) {
    for (seed, dtype) in [(21, DType::F32), (22, DType::F16), (23, DType::BF16)] {
        let mut rng = Rng::new(seed);
        let (num_blocks, block_size, hkv, d) = (5, 8, 2, 12);
        let width = hkv * d;
        let es = dtype.size_in_bytes();
        // One spare block before and after the cache's view.
        let total = (num_blocks + 2) * block_size * width;
        let before = odd_bytes(&mut rng, dtype, total);
        let parent = Tensor::from_raw_buffer(
            &before,
            dtype,
            &[num_blocks + 2, block_size, hkv, d],
            &Device::Cpu,
        )
        .expect("building the buffer");
        let cache = parent.narrow(0, 1, num_blocks).expect("the cache view");
        let n = 7;
        let row_bytes = odd_bytes(&mut rng, dtype, n * width);
        let rows = Tensor::from_raw_buffer(&row_bytes, dtype, &[n, hkv, d], &Device::Cpu)
            .expect("building the rows");
        let slots: Vec<i64> = vec![3, -1, 39, 0, 17, -1, 22];
        let slot_t = ints(&slots, &[n], DType::I32);
        let r = reshape_and_cache(&rows, &cache, &slot_t, Some(backend));
        let mut want = before.clone();
        match backend {
            Backend::Ascend950 => {
                assert!(
                    matches!(r, Err(OpError::DeviceUnavailable { .. })),
                    "{dtype:?}: {r:?}"
                );
            }
            _ => {
                r.unwrap_or_else(|e| panic!("{backend:?} {dtype:?}: {e}"));
                let rb = width * es;
                // Slot s of the view is row s + block_size of the buffer.
                for (i, &s) in slots.iter().enumerate() {
                    if s >= 0 {
                        let at = (s as usize + block_size) * rb;
                        want[at..at + rb].copy_from_slice(&row_bytes[i * rb..(i + 1) * rb]);
                    }
                }
            }
        }
        let got = raw_bytes(&parent);
        assert_eq!(got.len(), want.len());
        if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
            let row = i / (width * es);
            panic!(
                "{backend:?} {dtype:?}: byte {i} (buffer row {row}) is {:#04x}, want {:#04x} (was {:#04x})",
                got[i], want[i], before[i]
            );
        }
    }
}

for_each_backend!(untouched_bytes_are_bit_exact);
