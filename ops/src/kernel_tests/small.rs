//! The paged-gather and reshape_and_cache tile kernels, called through their host code
//! (`kernel::run`) and checked byte for byte against plain Rust, with every simulated launch's
//! hazards checked; and their Ascend 950 path (package written, no device).

use crate::kv_cache::{kernel as kv, CacheCall};
use crate::paged_gather::{kernel as pg, GatherCall};
use crate::runtime::{PlanTarget, Runner, CPU_PLAN_BLOCKS};
use crate::{profile, LaunchRecord, OpError};
use tile_backend::ir::DType;
use tile_backend::sim::GmTensor;

use super::support;

use support::{from_gm, Rng};

fn random_tensor(rng: &mut Rng, dtype: DType, shape: &[usize]) -> GmTensor {
    let n: usize = shape.iter().product();
    GmTensor::from_f32(dtype, shape, &rng.vec(n, -4.0, 4.0))
}

fn assert_clean(records: &[LaunchRecord], launches: usize) {
    assert_eq!(records.len(), launches, "launches: {records:?}");
    for r in records {
        assert!(
            r.hazards.is_empty(),
            "kernel {} has hazards:\n{}",
            r.kernel,
            r.hazards.join("\n")
        );
        assert!(r.cost.is_some(), "a profiled launch has a cost report");
    }
}

/// A gather's arguments as plain data: src and the index arguments.
struct GatherCase<'a> {
    src: &'a GmTensor,
    indices: Vec<i64>,
    block_table: Vec<i64>,
    block_size: usize,
    size: usize,
}

/// The validated call of `p` (its index arguments as `[1, n]` / `[1, nb]` i64 tensors).
fn gather_call(p: &GatherCase) -> Result<GatherCall, OpError> {
    let dev = &candle_core::Device::Cpu;
    let idx = candle_core::Tensor::from_vec(p.indices.clone(), (1, p.indices.len()), dev)?;
    let nb = p.block_table.len();
    let table = candle_core::Tensor::from_vec(p.block_table.clone(), (1, nb), dev)?;
    GatherCall::validate(&from_gm(p.src), &idx, &table, p.block_size, p.size)
}

/// Plain Rust: row i is src[block_table[t / bs] * bs + t % bs, 0..size].
fn gather_expected(p: &GatherCase) -> Vec<u8> {
    let es = p.src.dtype.size_bytes() as usize;
    let c = p.src.shape[1];
    let mut out = Vec::with_capacity(p.indices.len() * p.size * es);
    for &t in &p.indices {
        let (t, bs) = (t as usize, p.block_size);
        let row = p.block_table[t / bs] as usize * bs + t % bs;
        out.extend_from_slice(&p.src.data[row * c * es..(row * c + p.size) * es]);
    }
    out
}

fn check_gather(p: &GatherCase) {
    let call = gather_call(p).expect("a valid call");
    let (out, records) = profile(|| {
        pg::run(
            &mut Runner::for_backend("paged_gather", crate::Backend::TileSim),
            &call,
            p.src.as_input(),
        )
    });
    let out = out.expect("the gather runs");
    assert_eq!(out.dtype, p.src.dtype);
    assert_eq!(out.shape, vec![p.indices.len(), p.size]);
    assert!(out.data == gather_expected(p), "gathered rows differ");
    assert_clean(&records, usize::from(!p.indices.is_empty()));
}

/// A shuffled block table of `nb` entries over blocks whose rows exist in `[tokens, ..]`, and
/// `n` logical tokens (with repeats) whose physical rows are `< tokens`.
fn paged(
    rng: &mut Rng,
    tokens: usize,
    block_size: usize,
    nb: usize,
    n: usize,
) -> (Vec<i64>, Vec<i64>) {
    let blocks = tokens.div_ceil(block_size);
    let mut pool: Vec<i64> = (0..blocks.max(nb) as i64)
        .map(|b| b % blocks as i64)
        .collect();
    rng.shuffle(&mut pool);
    let table: Vec<i64> = pool[..nb].to_vec();
    let reachable: Vec<i64> = (0..nb * block_size)
        .filter(|&t| table[t / block_size] as usize * block_size + t % block_size < tokens)
        .map(|t| t as i64)
        .collect();
    let indices = (0..n)
        .map(|_| reachable[rng.below(reachable.len())])
        .collect();
    (indices, table)
}

#[test]
fn gather_upstream_doc_example() {
    // src [16, 32], 32 indices, block_table [1, 4], block_size 2, size 16.
    for dtype in [DType::F32, DType::F16] {
        let mut rng = Rng::new(1);
        let src = random_tensor(&mut rng, dtype, &[16, 32]);
        let (indices, block_table) = paged(&mut rng, 16, 2, 4, 32);
        check_gather(&GatherCase {
            src: &src,
            indices,
            block_table,
            block_size: 2,
            size: 16,
        });
    }
}

#[test]
fn gather_upstream_small_odd_shape() {
    // 33 buffer tokens, 30 columns (60 bytes: the UB row is padded), block 10, fp16.
    let mut rng = Rng::new(2);
    let src = random_tensor(&mut rng, DType::F16, &[33, 30]);
    for n in [1, 16, 37] {
        let (indices, block_table) = paged(&mut rng, 33, 10, 4, n);
        check_gather(&GatherCase {
            src: &src,
            indices,
            block_table,
            block_size: 10,
            size: 30,
        });
    }
}

#[test]
fn gather_every_dtype_partial_columns_odd_counts() {
    for (i, dtype) in [DType::F32, DType::F16, DType::BF16]
        .into_iter()
        .enumerate()
    {
        let mut rng = Rng::new(10 + i as u64);
        // size < C, n a prime, shuffled table with more entries than needed.
        let src = random_tensor(&mut rng, dtype, &[200, 72]);
        let (indices, block_table) = paged(&mut rng, 200, 16, 13, 101);
        check_gather(&GatherCase {
            src: &src,
            indices,
            block_table,
            block_size: 16,
            size: 43,
        });
        // The DeepSeek latent width, V part only, block 64: 576 -> 512 columns.
        let src = random_tensor(&mut rng, dtype, &[256, 576]);
        let (indices, block_table) = paged(&mut rng, 256, 64, 4, 67);
        check_gather(&GatherCase {
            src: &src,
            indices,
            block_table,
            block_size: 64,
            size: 512,
        });
    }
}

#[test]
fn gather_runs_many_batches_per_core_with_a_ragged_tail() {
    // 2100 rows on 32 blocks: 33 rows per AIV, two full batches of 16 and one of 1, so a batch
    // buffer is reused across loop iterations; the last AIV's run is shorter (21 rows: one full
    // batch and one of 5).
    for (i, (dtype, size)) in [(DType::F32, 24), (DType::BF16, 512)]
        .into_iter()
        .enumerate()
    {
        let mut rng = Rng::new(50 + i as u64);
        let src = random_tensor(&mut rng, dtype, &[300, size + 8]);
        let (indices, block_table) = paged(&mut rng, 300, 16, 19, 2100);
        check_gather(&GatherCase {
            src: &src,
            indices,
            block_table,
            block_size: 16,
            size,
        });
    }
}

#[test]
fn gather_reads_a_block_table_too_long_for_ub_from_gm() {
    // Block size 1: the table has one entry per token. 16384 entries (64 KiB) is the longest
    // the kernel copies into UB; one more and every entry is read from GM instead. Both paths
    // give the same rows.
    let cap = crate::paged_gather::kernel::TABLE_CAP as usize;
    for nb in [cap, cap + 1] {
        let mut rng = Rng::new(60 + nb as u64);
        let src = random_tensor(&mut rng, DType::F32, &[nb, 8]);
        let (indices, block_table) = paged(&mut rng, nb, 1, nb, 150);
        check_gather(&GatherCase {
            src: &src,
            indices,
            block_table,
            block_size: 1,
            size: 8,
        });
    }
}

#[test]
fn gather_loads_the_keys_in_chunks() {
    // 64 AIVs with 2053 rows each: every AIV loads its keys (indices) into UB in two chunks,
    // 2048 and 5, so the second load overwrites keys the scalar unit read (an S -> MTE2 edge).
    let chunk = crate::paged_gather::kernel::KEY_CHUNK as usize;
    let n = 64 * (chunk + 5);
    let mut rng = Rng::new(70);
    let src = random_tensor(&mut rng, DType::F16, &[96, 16]);
    let (indices, block_table) = paged(&mut rng, 96, 16, 6, n);
    check_gather(&GatherCase {
        src: &src,
        indices,
        block_table,
        block_size: 16,
        size: 16,
    });
}

#[test]
fn gather_wide_rows_go_in_chunks() {
    // 5000 f32 columns = 20000 bytes: two chunks per row, the second narrower.
    let mut rng = Rng::new(20);
    let src = random_tensor(&mut rng, DType::F32, &[24, 5003]);
    let (indices, block_table) = paged(&mut rng, 24, 4, 6, 9);
    check_gather(&GatherCase {
        src: &src,
        indices,
        block_table,
        block_size: 4,
        size: 5000,
    });
}

#[test]
fn gather_reuses_one_kernel_across_runtime_shapes() {
    // n, T, C and the table length change; dtype and size stay: the same kernel (by name)
    // serves every call, and many rows spread over 32 blocks.
    let mut names = Vec::new();
    for (k, (t, c, nb, n)) in [(40, 64, 5, 3), (1000, 80, 70, 700), (64, 64, 8, 64)]
        .into_iter()
        .enumerate()
    {
        let mut rng = Rng::new(30 + k as u64);
        let src = random_tensor(&mut rng, DType::BF16, &[t, c]);
        let (indices, block_table) = paged(&mut rng, t, 8, nb, n);
        let p = GatherCase {
            src: &src,
            indices,
            block_table,
            block_size: 8,
            size: 64,
        };
        let call = gather_call(&p).expect("a valid call");
        let (out, records) = profile(|| {
            pg::run(
                &mut Runner::for_backend("paged_gather", crate::Backend::TileSim),
                &call,
                src.as_input(),
            )
        });
        assert!(out.expect("runs").data == gather_expected(&p));
        assert_clean(&records, 1);
        names.push(records[0].kernel.clone());
        if n == 700 {
            assert_eq!(records[0].block_dim, 32, "700 rows fill a wave");
        }
    }
    assert!(names.windows(2).all(|w| w[0] == w[1]), "{names:?}");
}

#[test]
fn gather_on_the_cpu_plan_runs_on_the_cpu_blocks() {
    // The simulator's plan splits the rows over CPU_PLAN_BLOCKS blocks (the device's over 32):
    // the same kernel and the same bytes, fewer simulated blocks, each with more batches.
    let mut rng = Rng::new(80);
    let src = random_tensor(&mut rng, DType::BF16, &[1000, 80]);
    let (indices, block_table) = paged(&mut rng, 1000, 8, 70, 700);
    let p = GatherCase {
        src: &src,
        indices,
        block_table,
        block_size: 8,
        size: 64,
    };
    let call = gather_call(&p).expect("a valid call");
    for (target, blocks) in [(PlanTarget::Cpu, CPU_PLAN_BLOCKS), (PlanTarget::Device, 32)] {
        let mut runner = Runner::sim("paged_gather", target);
        let (out, records) = profile(|| pg::run(&mut runner, &call, src.as_input()));
        assert!(out.expect("runs").data == gather_expected(&p), "{target:?}");
        assert_clean(&records, 1);
        assert_eq!(records[0].block_dim, blocks, "{target:?}");
    }
}

#[test]
fn gather_of_nothing_is_rejected_and_launches_nothing() {
    let mut rng = Rng::new(40);
    let src = random_tensor(&mut rng, DType::F16, &[8, 16]);
    let (r, records) = profile(|| {
        gather_call(&GatherCase {
            src: &src,
            indices: vec![],
            block_table: vec![0],
            block_size: 8,
            size: 16,
        })
    });
    let e = r.expect_err("no indices");
    assert!(matches!(e, OpError::Invalid { arg: "indices", .. }), "{e}");
    assert!(records.is_empty(), "{records:?}");
}

#[test]
fn gather_rejects_malformed_problems() {
    let mut rng = Rng::new(41);
    let src = random_tensor(&mut rng, DType::F16, &[8, 16]);
    let bad = GatherCase {
        src: &src,
        indices: vec![0],
        block_table: vec![0],
        block_size: 8,
        size: 17,
    };
    let e = gather_call(&bad).expect_err("size > C");
    assert!(matches!(e, OpError::Invalid { arg: "size", .. }), "{e}");
    // A valid call run on storage it does not describe: rejected before any launch.
    let call = gather_call(&GatherCase { size: 16, ..bad }).expect("a valid call");
    let other = random_tensor(&mut rng, DType::F16, &[4, 16]);
    let bf = random_tensor(&mut rng, DType::BF16, &[8, 16]);
    for (src, why) in [(&other, "holds"), (&bf, "differs")] {
        let (r, records) = profile(|| {
            pg::run(
                &mut Runner::for_backend("paged_gather", crate::Backend::TileSim),
                &call,
                src.as_input(),
            )
        });
        let e = r.expect_err("not the call's src");
        assert!(matches!(e, OpError::Invalid { arg: "src", .. }), "{e}");
        assert!(e.to_string().contains(why), "{e}");
        assert!(records.is_empty(), "{records:?}");
    }
}

/// Plain Rust: row i of rows goes to cache row slot[i] (skipping -1).
fn cache_expected(cache: &GmTensor, rows: &GmTensor, slot_mapping: &[i64]) -> Vec<u8> {
    let n = slot_mapping.len();
    let row_bytes = rows.data.len() / n.max(1);
    let mut out = cache.data.clone();
    for (i, &s) in slot_mapping.iter().enumerate() {
        if s >= 0 {
            let s = s as usize;
            out[s * row_bytes..(s + 1) * row_bytes]
                .copy_from_slice(&rows.data[i * row_bytes..(i + 1) * row_bytes]);
        }
    }
    out
}

/// The validated call writing `rows` into `cache` at `slot_mapping`.
fn cache_call(
    cache: &GmTensor,
    rows: &GmTensor,
    slot_mapping: &[i64],
) -> Result<CacheCall, OpError> {
    let slots = support::ints(slot_mapping, &[slot_mapping.len()], candle_core::DType::I64);
    CacheCall::validate(&from_gm(rows), &from_gm(cache), &slots)
}

fn check_cache(cache: &GmTensor, rows: &GmTensor, slot_mapping: &[i64]) {
    let call = cache_call(cache, rows, slot_mapping).expect("a valid call");
    let mut got = cache.clone();
    let (r, records) = profile(|| {
        let mut runner = Runner::for_backend("reshape_and_cache", crate::Backend::TileSim);
        kv::run(&mut runner, &call, got.as_inout(), rows.as_input())
    });
    r.expect("the cache write runs");
    assert!(
        got.data == cache_expected(cache, rows, slot_mapping),
        "cache contents differ"
    );
    let launches = usize::from(slot_mapping.iter().any(|&s| s >= 0));
    assert_clean(&records, launches);
}

/// `n` distinct slots out of `slots` (some replaced by -1 when `pad`).
fn slot_mapping(rng: &mut Rng, slots: usize, n: usize, pad: bool) -> Vec<i64> {
    let mut all: Vec<i64> = (0..slots as i64).collect();
    rng.shuffle(&mut all);
    let mut m = all[..n].to_vec();
    if pad {
        for s in m.iter_mut() {
            if rng.below(4) == 0 {
                *s = -1;
            }
        }
    }
    m
}

#[test]
fn cache_write_with_padding_slots_in_place() {
    for (i, dtype) in [DType::F32, DType::F16, DType::BF16]
        .into_iter()
        .enumerate()
    {
        let mut rng = Rng::new(50 + i as u64);
        // [num_blocks 6, block_size 16, Hkv 2, D 24]: rows of 48 elements.
        let cache = random_tensor(&mut rng, dtype, &[6, 16, 2, 24]);
        let n = 37;
        let rows = random_tensor(&mut rng, dtype, &[n, 2, 24]);
        let w: Vec<i64> = slot_mapping(&mut rng, 96, n, true);
        check_cache(&cache, &rows, &w);
    }
}

#[test]
fn cache_write_loads_the_slots_in_chunks() {
    // 64 AIVs with 2051 rows each: every AIV loads its slots into UB in two chunks, 2048 and 3,
    // so the second load overwrites slots the scalar unit read (an S -> MTE2 edge); a quarter of
    // the slots are -1 (skipped).
    let n = 64 * (kv::KEY_CHUNK as usize + 3);
    let mut rng = Rng::new(90);
    // [num_blocks, block_size 64, 16]: f16 rows of 32 bytes.
    let cache = random_tensor(&mut rng, DType::F16, &[n.div_ceil(64) + 2, 64, 16]);
    let rows = random_tensor(&mut rng, DType::F16, &[n, 16]);
    let w: Vec<i64> = slot_mapping(&mut rng, (n.div_ceil(64) + 2) * 64, n, true);
    check_cache(&cache, &rows, &w);
}

#[test]
fn cache_write_spans_blocks_decode_and_prefill() {
    let mut rng = Rng::new(60);
    // MLA latent rows (576 bf16), block 64: a prefill of 150 contiguous tokens starting in the
    // middle of a block (so it spans three blocks of a shuffled table), then a decode step of 4
    // sequences writing one row each.
    let dtype = DType::BF16;
    let cache = random_tensor(&mut rng, dtype, &[8, 64, 576]);
    let mut table: Vec<i64> = (0..8).collect();
    rng.shuffle(&mut table);
    let slot = |t: usize| table[t / 64] * 64 + (t % 64) as i64;
    let prefill_rows = random_tensor(&mut rng, dtype, &[150, 576]);
    let prefill: Vec<i64> = (40..190).map(slot).collect();
    check_cache(&cache, &prefill_rows, &prefill);
    let decode_rows = random_tensor(&mut rng, dtype, &[4, 576]);
    let decode: Vec<i64> = vec![slot(7), -1, slot(300), slot(511)];
    check_cache(&cache, &decode_rows, &decode);
    // f32, rows that are not a multiple of 8 elements.
    let cache = random_tensor(&mut rng, DType::F32, &[5, 10, 13]);
    let rows = random_tensor(&mut rng, DType::F32, &[23, 13]);
    let w: Vec<i64> = slot_mapping(&mut rng, 50, 23, true);
    check_cache(&cache, &rows, &w);
}

#[test]
fn cache_write_on_the_cpu_plan_runs_few_rows_as_one_block() {
    // The simulator's plan gives a block at least 64 rows: a decode step's 4 rows are one
    // block, 1000 rows fill the CPU blocks; the device's gives every AIV a row. Scattered
    // slots far apart, the window lent to the kernel spans most of the cache: every byte
    // outside the written rows must keep its value on every plan.
    let mut rng = Rng::new(81);
    let cache = random_tensor(&mut rng, DType::F32, &[64, 16, 24]);
    for (n, cpu_blocks, device_blocks) in [(4, 1, 2), (65, 2, 32), (1000, CPU_PLAN_BLOCKS, 32)] {
        let rows = random_tensor(&mut rng, DType::F32, &[n, 24]);
        // Distinct slots, the first and the last of them 1023 and 3.
        let mut w: Vec<i64> = slot_mapping(&mut rng, 64 * 16, n + 2, false)
            .into_iter()
            .filter(|s| ![3, 1023].contains(s))
            .take(n - 2)
            .collect();
        w.insert(0, 1023);
        w.push(3);
        let call = cache_call(&cache, &rows, &w).expect("a valid call");
        for (target, blocks) in [
            (PlanTarget::Cpu, cpu_blocks),
            (PlanTarget::Device, device_blocks),
        ] {
            let mut got = cache.clone();
            let mut runner = Runner::sim("reshape_and_cache", target);
            let (r, records) =
                profile(|| kv::run(&mut runner, &call, got.as_inout(), rows.as_input()));
            r.expect("the cache write runs");
            assert!(
                got.data == cache_expected(&cache, &rows, &w),
                "{target:?}, {n} rows: cache contents differ"
            );
            assert_clean(&records, 1);
            assert_eq!(records[0].block_dim, blocks, "{target:?}, {n} rows");
        }
    }
}

#[test]
fn cache_write_of_only_padding_touches_nothing() {
    let mut rng = Rng::new(70);
    let cache = random_tensor(&mut rng, DType::F16, &[2, 4, 16]);
    let rows = random_tensor(&mut rng, DType::F16, &[3, 16]);
    let w: Vec<i64> = vec![-1, -1, -1];
    check_cache(&cache, &rows, &w);
}

#[test]
fn cache_write_rejects_malformed_problems() {
    let mut rng = Rng::new(71);
    let mut cache = random_tensor(&mut rng, DType::F16, &[2, 4, 16]);
    let before = cache.clone();
    let rows = random_tensor(&mut rng, DType::F16, &[2, 16]);
    let e = cache_call(&cache, &rows, &[0, 8]).expect_err("slot 8");
    assert!(
        matches!(
            e,
            OpError::Invalid {
                arg: "slot_mapping",
                ..
            }
        ),
        "{e}"
    );
    // Storage that is not the validated call's: an f32 cache under an f16 call.
    let call = cache_call(&cache, &rows, &[0, 1]).expect("a valid call");
    let mut other = random_tensor(&mut rng, DType::F32, &[2, 4, 16]);
    let other_before = other.clone();
    let e = kv::run(
        &mut Runner::for_backend("reshape_and_cache", crate::Backend::TileSim),
        &call,
        other.as_inout(),
        rows.as_input(),
    )
    .expect_err("dtype");
    assert!(matches!(e, OpError::Invalid { arg: "cache", .. }), "{e}");
    assert_eq!(other, other_before, "a rejected call writes nothing");
    let short = random_tensor(&mut rng, DType::F16, &[1, 16]);
    let e = kv::run(
        &mut Runner::for_backend("reshape_and_cache", crate::Backend::TileSim),
        &call,
        cache.as_inout(),
        short.as_input(),
    )
    .expect_err("one row short");
    assert!(matches!(e, OpError::Invalid { arg: "rows", .. }), "{e}");
    assert_eq!(cache, before, "a rejected call writes nothing");
}

fn package_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("tileops-small-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn ascend950_path_writes_packages_and_reports_no_device() {
    let mut rng = Rng::new(80);
    let dir = package_dir("gather");
    let src = random_tensor(&mut rng, DType::F16, &[33, 30]);
    let (indices, block_table) = paged(&mut rng, 33, 10, 4, 16);
    let p = GatherCase {
        src: &src,
        indices,
        block_table,
        block_size: 10,
        size: 30,
    };
    let call = gather_call(&p).expect("a valid call");
    let (r, records) = profile(|| {
        let mut runner = Runner::package("paged_gather", &dir);
        assert!(!runner.executes());
        pg::run(&mut runner, &call, src.as_input()).expect("packaging the gather works");
        runner.finish()
    });
    match r {
        Err(OpError::DeviceUnavailable { package, .. }) => assert_eq!(package, dir),
        other => panic!("expected DeviceUnavailable, got {other:?}"),
    }
    assert_eq!(records.len(), 1);
    assert!(!records[0].files.is_empty());
    for f in &records[0].files {
        assert!(f.starts_with(&dir) && f.is_file(), "{}", f.display());
    }

    let dir = package_dir("cache");
    let mut cache = random_tensor(&mut rng, DType::BF16, &[4, 8, 32]);
    let before = cache.clone();
    let rows = random_tensor(&mut rng, DType::BF16, &[5, 32]);
    let call = cache_call(&cache, &rows, &[3, 9, -1, 31, 0]).expect("a valid call");
    let (r, records) = profile(|| {
        let mut runner = Runner::package("reshape_and_cache", &dir);
        kv::run(&mut runner, &call, cache.as_inout(), rows.as_input())
            .expect("packaging the cache write works");
        runner.finish()
    });
    assert!(matches!(r, Err(OpError::DeviceUnavailable { .. })), "{r:?}");
    assert_eq!(cache, before, "nothing ran, so the cache is unchanged");
    assert_eq!(records.len(), 1);
    assert!(records[0].files.iter().all(|f| f.is_file()));
    let _ = std::fs::remove_dir_all(package_dir("gather"));
    let _ = std::fs::remove_dir_all(&dir);
}
