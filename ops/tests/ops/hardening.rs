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

// ---------------------------------------------------------------------------------------------
// Positions past 2^31 are errors, never clamped; huge logical shapes are errors, never aborts.

/// `2^31 + 5`: a valid token for a block table of `2^15 + 1` blocks of `2^16` tokens, but not a
/// 32-bit position (the kernels clamped it and read another token).
const PAST_I32: i64 = (1i64 << 31) + 5;

fn huge_capacity_table() -> Tensor {
    ints(&vec![0i64; (1 << 15) + 1], &[1, (1 << 15) + 1], DType::I32)
}

fn sparse_index_past_32_bits(bk: Backend) {
    let q = Tensor::zeros((1, 2, 16), DType::F32, &Device::Cpu).expect("q");
    let kv = Tensor::zeros((1, 1 << 16, 16), DType::F32, &Device::Cpu).expect("kv");
    let idx = ints(&[3, PAST_I32], &[1, 2], DType::I64);
    let params = tileops_ops::SparseAttentionParams::new(16, 0.25);
    let r = tileops_ops::sparse_paged_attention(
        &q,
        &kv,
        &idx,
        &huge_capacity_table(),
        &params,
        Some(bk),
    );
    expect_invalid(
        r,
        "sparse_paged_attention",
        "indices",
        &["2147483653", "32-bit"],
    );
}

fn gather_index_past_32_bits(bk: Backend) {
    let src = Tensor::zeros((1 << 16, 4), DType::F32, &Device::Cpu).expect("src");
    let idx = ints(&[PAST_I32], &[1, 1], DType::I64);
    let r = paged_gather(&src, &idx, &huge_capacity_table(), 1 << 16, 4, Some(bk));
    expect_invalid(r, "paged_gather", "indices", &["2147483653", "32-bit"]);
}

fn cache_slot_past_32_bits(bk: Backend) {
    let cache = Tensor::zeros((4, 8, 16), DType::F32, &Device::Cpu).expect("cache");
    let rows = Tensor::ones((1, 16), DType::F32, &Device::Cpu).expect("rows");
    let slots = ints(&[1i64 << 31], &[1], DType::I64);
    let r = tileops_ops::reshape_and_cache(&rows, &cache, &slots, Some(bk));
    expect_invalid(
        r,
        "reshape_and_cache",
        "slot_mapping",
        &["2147483648", "32-bit"],
    );
}

fn paged_context_past_32_bits(bk: Backend) {
    let q = Tensor::zeros((1, 2, 16), DType::F32, &Device::Cpu).expect("q");
    let kc = Tensor::zeros((2, 16, 1, 16), DType::F32, &Device::Cpu).expect("cache");
    let table = ints(&[0, 1], &[1, 2], DType::I32);
    let lens = ints(&[1i64 << 31], &[1], DType::I64);
    let params = tileops_ops::PagedAttentionParams { scale: 0.25 };
    let r = tileops_ops::paged_attention(&q, &kc, &kc, &table, &lens, &params, Some(bk));
    expect_invalid(
        r,
        "paged_attention",
        "context_lens",
        &["2147483648", "32-bit"],
    );
}

/// A stride-0 view of a huge logical shape is refused before anything is made contiguous.
fn broadcast_huge_q(bk: Backend) {
    let q = Tensor::zeros((1, 1, 16), DType::F32, &Device::Cpu)
        .and_then(|t| t.broadcast_as((1usize << 26, 128, 16)))
        .expect("a broadcast view");
    let kv = Tensor::zeros((1, 16, 16), DType::F32, &Device::Cpu).expect("kv");
    let idx = ints(&[0], &[1, 1], DType::I32);
    let table = ints(&[0], &[1, 1], DType::I32);
    let params = tileops_ops::SparseAttentionParams::new(16, 0.25);
    let r = tileops_ops::sparse_paged_attention(&q, &kv, &idx, &table, &params, Some(bk));
    expect_invalid(r, "sparse_paged_attention", "q", &["2147483647 elements"]);
}

for_each_backend!(
    sparse_index_past_32_bits,
    gather_index_past_32_bits,
    cache_slot_past_32_bits,
    paged_context_past_32_bits,
    broadcast_huge_q,
);

// ---------------------------------------------------------------------------------------------
// Results do not depend on the machine: 1, 2 and 16 worker threads give the same bits.

/// The bits of `f`'s result tensors, run on a dedicated rayon pool of `threads` threads.
fn bits_on(threads: usize, f: &(dyn Fn() -> Vec<Tensor> + Sync)) -> Vec<Vec<u32>> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("a rayon pool");
    pool.install(|| {
        f().iter()
            .map(|t| {
                t.to_dtype(DType::F32)
                    .and_then(|t| t.flatten_all())
                    .and_then(|t| t.to_vec1::<f32>())
                    .expect("reading a result")
                    .into_iter()
                    .map(f32::to_bits)
                    .collect()
            })
            .collect()
    })
}

#[test]
fn tilesim_bits_do_not_depend_on_the_thread_count() {
    let mut rng = Rng::new(93);
    let (b, h, dqk, vd, bs, nb, topk) = (3usize, 8usize, 64usize, 32usize, 16usize, 24usize, 120);
    let (q, _) = rand_data(&mut rng, &[b, h, dqk], DType::BF16);
    let (kv, _) = rand_data(&mut rng, &[nb, bs, dqk], DType::BF16);
    let table = shuffled_table(&mut rng, b, 8, 8, nb);
    let idx: Vec<i64> = (0..b * topk).map(|_| rng.below(8 * bs) as i64).collect();
    let idx_t = ints(&idx, &[b, topk], DType::I32);
    let table_t = ints(&table, &[b, 8], DType::I32);
    let (pq, _) = rand_data(&mut rng, &[b, h, dqk], DType::F32);
    let (pk, _) = rand_data(&mut rng, &[nb, bs, 2, dqk], DType::F32);
    let lens = ints(&[128, 77, 1], &[b], DType::I32);
    let run = || {
        let params = tileops_ops::SparseAttentionParams::new(vd, 0.2);
        let (o, l) = tileops_ops::sparse_paged_attention(
            &q,
            &kv,
            &idx_t,
            &table_t,
            &params,
            Some(Backend::TileSim),
        )
        .expect("sparse attention runs");
        let params = tileops_ops::PagedAttentionParams { scale: 0.2 };
        let d = tileops_ops::paged_attention(
            &pq,
            &pk,
            &pk,
            &table_t,
            &lens,
            &params,
            Some(Backend::TileSim),
        )
        .expect("paged attention runs");
        vec![o, l, d]
    };
    let one = bits_on(1, &run);
    for threads in [2, 16] {
        assert!(
            bits_on(threads, &run) == one,
            "results on {threads} threads differ from 1 thread"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Limits users would otherwise hit as compiler errors, named by the user's argument.

/// Dqk = v_dim = 1024 with 128 heads: the split kernel's tiles do not fit the vector core's
/// UB. The kernel backends say so up front, naming `q`; the Reference computes it.
fn sparse_head_dim_beyond_the_kernel(bk: Backend) {
    let (h, d) = (128usize, 1024usize);
    let q = Tensor::zeros((1, h, d), DType::F32, &Device::Cpu).expect("q");
    let kv = Tensor::zeros((1, 16, d), DType::F32, &Device::Cpu).expect("kv");
    let idx = ints(&[0, 1, 2], &[1, 3], DType::I32);
    let table = ints(&[0], &[1, 1], DType::I32);
    let params = tileops_ops::SparseAttentionParams::new(d, 0.03);
    let r = tileops_ops::sparse_paged_attention(&q, &kv, &idx, &table, &params, Some(bk));
    match bk {
        Backend::Reference => assert!(r.is_ok(), "the Reference has no such limit: {r:?}"),
        _ => expect_invalid(
            r,
            "sparse_paged_attention",
            "q",
            &["Dqk = 1024", "too large for the kernel backends"],
        ),
    }
}

/// 256 query heads per KV head: more than the kernels' head tile; named on `q` up front.
fn paged_too_many_heads_per_kv_head(bk: Backend) {
    let q = Tensor::zeros((1, 256, 16), DType::F32, &Device::Cpu).expect("q");
    let kc = Tensor::zeros((1, 16, 1, 16), DType::F32, &Device::Cpu).expect("cache");
    let table = ints(&[0], &[1, 1], DType::I32);
    let lens = ints(&[4], &[1], DType::I32);
    let params = tileops_ops::PagedAttentionParams { scale: 0.25 };
    let r = tileops_ops::paged_attention(&q, &kc, &kc, &table, &lens, &params, Some(bk));
    expect_invalid(
        r,
        "paged_attention",
        "q",
        &["256 query heads per KV head", "at most 128"],
    );
}

/// A block size past 32 bits (it became -1 inside the kernel).
fn gather_block_size_past_32_bits(bk: Backend) {
    let src = Tensor::zeros((8, 4), DType::F32, &Device::Cpu).expect("src");
    let idx = ints(&[0], &[1, 1], DType::I32);
    let table = ints(&[0], &[1, 1], DType::I32);
    let r = paged_gather(&src, &idx, &table, 1usize << 63, 4, Some(bk));
    expect_invalid(r, "paged_gather", "block_size", &["32-bit"]);
}

for_each_backend!(
    sparse_head_dim_beyond_the_kernel,
    paged_too_many_heads_per_kv_head,
    gather_block_size_past_32_bits,
);
