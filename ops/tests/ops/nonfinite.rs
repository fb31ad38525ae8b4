//! The non-finite policy (docs/ops.md, "Non-finite data"; issue #18 item 6): NaN or ±inf in a
//! value a row reads (its q, a cache row a valid index or position reaches) makes that row's
//! `out` and `lse` NaN, on every backend and both launch plans (`check_backend` runs TileSim's
//! device plan inside `profile` and its CPU plan outside it); a non-finite V value of the dense
//! op makes the output elements of its column NaN; rows that read no such value match the
//! finite oracle. Each case is built so that the softmax alone would not say NaN everywhere
//! (a score of -inf is a weight of 0, and a max may drop NaN).

use crate::support::*;
use candle_core::{DType, Device, Tensor};
use tileops_ops::{
    paged_attention, sparse_paged_attention, Backend, PagedAttentionParams, SparseAttentionParams,
};

/// Physical cache rows (slots) that row `b` of a block table reaches for its `tokens`.
fn slots_of(table: &[i64], max_blocks: usize, bs: usize, b: usize, tokens: &[i64]) -> Vec<usize> {
    tokens
        .iter()
        .filter(|&&t| t >= 0)
        .map(|&t| table[b * max_blocks + t as usize / bs] as usize * bs + t as usize % bs)
        .collect()
}

/// Sparse decode, 8 batch rows (so the f32 CPU plan runs one split and skips the merge, and the
/// device plan runs several splits and the merge), 160 indices with -1 entries (a tail chunk):
/// - rows 0 and 7 clean (row 7 with NaN in every slot of its blocks that it does not read);
/// - row 1: NaN in q of head 1; row 2: +inf in q of head 0, -inf in q of head 2;
/// - row 3: NaN in column `v_dim` (K only) of a cache row it reads; row 4: +inf in column 3;
/// - row 5: q all positive and -inf in column 0 of one cache row it reads: that token's
///   scores are -inf for every head (a weight of 0 to the softmax);
/// - row 6: -inf in column 1 of q's head 3 and column 1 of every cache row it reads positive:
///   all of head 3's scores are -inf (the split looks empty to the softmax).
fn sparse_nonfinite(backend: Backend) {
    let (b, h, dqk, vd, bs, mb, topk) = (8usize, 4usize, 64usize, 32usize, 16usize, 12usize, 160);
    let nb = b * mb;
    for dtype in [DType::F32, DType::BF16] {
        let mut rng = Rng::new(181);
        let table = shuffled_table(&mut rng, b, mb, mb, nb);
        let ctx = mb * bs;
        let indices: Vec<i64> = (0..b * topk)
            .map(|_| {
                if rng.uniform(0.0, 1.0) < 0.1 {
                    -1
                } else {
                    rng.below(ctx) as i64
                }
            })
            .collect();
        let mut q = rng.vec(b * h * dqk, -1.0, 1.0);
        let mut kv = rng.vec(nb * bs * dqk, -1.0, 1.0);
        let row_slots = |r: usize| slots_of(&table, mb, bs, r, &indices[r * topk..(r + 1) * topk]);
        let qi = |r: usize, head: usize, c: usize| (r * h + head) * dqk + c;
        q[qi(1, 1, 7)] = f32::NAN;
        q[qi(2, 0, 9)] = f32::INFINITY;
        q[qi(2, 2, 9)] = f32::NEG_INFINITY;
        kv[row_slots(3)[5] * dqk + vd] = f32::NAN;
        kv[row_slots(4)[11] * dqk + 3] = f32::INFINITY;
        for head in 0..h {
            for c in 0..dqk {
                q[qi(5, head, c)] = rng.uniform(0.1, 1.0);
            }
        }
        kv[row_slots(5)[17] * dqk] = f32::NEG_INFINITY;
        q[qi(6, 3, 1)] = f32::NEG_INFINITY;
        for s in row_slots(6) {
            kv[s * dqk + 1] = rng.uniform(0.1, 1.0);
        }
        let read7 = row_slots(7);
        for j in 0..mb {
            let block = table[7 * mb + j] as usize;
            for s in block * bs..(block + 1) * bs {
                if !read7.contains(&s) {
                    kv[s * dqk..(s + 1) * dqk].fill(f32::NAN);
                }
            }
        }
        let (q_t, q_v) = data(q, &[b, h, dqk], dtype);
        let (kv_t, kv_v) = data(kv, &[nb, bs, dqk], dtype);
        let idx_t = ints(&indices, &[b, topk], DType::I32);
        let table_t = ints(&table, &[b, mb], DType::I32);
        let scale = 0.2;
        let model = SparseModel::new(
            &q_v,
            &kv_v,
            &indices,
            &table,
            [b, h, dqk, topk, bs, mb, vd],
            scale,
        );
        let (want_out, want_lse) = model.run();
        // The cases are what they claim: the poisoned heads and only they are NaN.
        let nan_heads: Vec<usize> = (0..b * h).filter(|&g| want_lse[g].is_nan()).collect();
        let expected: Vec<usize> = [(1, 1), (2, 0), (2, 2), (6, 3)]
            .iter()
            .map(|&(r, head)| r * h + head)
            .chain((3..6).flat_map(|r| (0..h).map(move |head| r * h + head)))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        assert_eq!(nan_heads, expected, "{dtype:?}: the oracle's NaN rows");
        check_backend(
            backend,
            || vec![want_out.clone(), want_lse.clone()],
            |bk| {
                let params = SparseAttentionParams::new(vd, scale);
                let (out, lse) =
                    sparse_paged_attention(&q_t, &kv_t, &idx_t, &table_t, &params, Some(bk))?;
                Ok(vec![
                    Part::of("out", &out, out_tol(dtype)),
                    Part::of("lse", &lse, LSE_TOL),
                ])
            },
        );
    }
}

/// The sink's limits: -inf is no sink, +inf takes all the weight (out 0, lse unchanged); with a
/// NaN row (NaN in q) the row stays NaN. The sink makes the CPU plan launch the merge too.
fn sparse_sink_limits(backend: Backend) {
    let (b, h, dqk, vd, bs, mb, topk) = (2usize, 4usize, 32usize, 16usize, 8usize, 4usize, 24);
    let mut rng = Rng::new(182);
    let nb = b * mb;
    let table = shuffled_table(&mut rng, b, mb, mb, nb);
    let indices: Vec<i64> = (0..b * topk).map(|_| rng.below(mb * bs) as i64).collect();
    let mut q = rng.vec(b * h * dqk, -1.0, 1.0);
    q[(h + 2) * dqk + 5] = f32::NAN; // row 1, head 2
    let sink = vec![f32::NEG_INFINITY, f32::INFINITY, 0.25, f32::INFINITY];
    let (q_t, q_v) = data(q, &[b, h, dqk], DType::F32);
    let (kv_t, kv_v) = rand_data(&mut rng, &[nb, bs, dqk], DType::F32);
    let idx_t = ints(&indices, &[b, topk], DType::I32);
    let table_t = ints(&table, &[b, mb], DType::I32);
    let model = SparseModel {
        sink: Some(&sink),
        ..SparseModel::new(
            &q_v,
            &kv_v,
            &indices,
            &table,
            [b, h, dqk, topk, bs, mb, vd],
            0.3,
        )
    };
    let (want_out, want_lse) = model.run();
    assert!(want_out[vd..2 * vd].iter().all(|&x| x == 0.0) && want_lse[1].is_finite());
    check_backend(
        backend,
        || vec![want_out.clone(), want_lse.clone()],
        |bk| {
            let mut params = SparseAttentionParams::new(vd, 0.3);
            params.sink = Some(Tensor::from_slice(&sink, h, &Device::Cpu)?);
            let (out, lse) =
                sparse_paged_attention(&q_t, &kv_t, &idx_t, &table_t, &params, Some(bk))?;
            Ok(vec![
                Part::of("out", &out, out_tol(DType::F32)),
                Part::of("lse", &lse, LSE_TOL),
            ])
        },
    );
}

/// Dense decode, 8 sequences of 100-200 tokens, H 4 over Hkv 2 (the f32 CPU plan runs one split,
/// the device plan several and the merge):
/// - rows 0, 6 and 7 clean;
/// - row 1: NaN in q of head 1 (head 1 NaN);
/// - row 2: +inf in a K row of KV head 0 it reads (heads 0 and 1 NaN, heads 2 and 3 clean);
/// - row 3: +inf in V column 5 of KV head 1 (column 5 of heads 2 and 3 NaN, the rest clean);
/// - row 4: NaN in V column 0 of KV head 0;
/// - row 5: q all positive and -inf in column 0 of a K row of KV head 0 (a weight of 0 to the
///   softmax; heads 0 and 1 NaN).
fn paged_nonfinite(backend: Backend) {
    let (b, h, hkv, d, bs, mb) = (8usize, 4usize, 2usize, 32usize, 16usize, 13usize);
    let nb = b * mb;
    let lens: Vec<i64> = vec![200, 150, 177, 100, 163, 129, 199, 101];
    for dtype in [DType::F32, DType::BF16] {
        let mut rng = Rng::new(183);
        let table = shuffled_table(&mut rng, b, mb, mb, nb);
        let mut q = rng.vec(b * h * d, -1.0, 1.0);
        let mut k = rng.vec(nb * bs * hkv * d, -1.0, 1.0);
        let mut v = rng.vec(nb * bs * hkv * d, -1.0, 1.0);
        let slot = |r: usize, t: usize| table[r * mb + t / bs] as usize * bs + t % bs;
        let at = |s: usize, kh: usize, c: usize| (s * hkv + kh) * d + c;
        q[(h + 1) * d + 4] = f32::NAN;
        k[at(slot(2, 40), 0, 6)] = f32::INFINITY;
        v[at(slot(3, 99), 1, 5)] = f32::INFINITY;
        v[at(slot(4, 0), 0, 0)] = f32::NAN;
        for x in &mut q[5 * h * d..6 * h * d] {
            *x = rng.uniform(0.1, 1.0);
        }
        k[at(slot(5, 128), 0, 0)] = f32::NEG_INFINITY;
        let shape = [nb, bs, hkv, d];
        let (q_t, q_v) = data(q, &[b, h, d], dtype);
        let (k_t, k_v) = data(k, &shape, dtype);
        let (v_t, v_v) = data(v, &shape, dtype);
        let table_t = ints(&table, &[b, mb], DType::I32);
        let lens_t = ints(&lens, &[b], DType::I32);
        let scale = 0.25;
        let (want, _) = paged_model_with_spread(
            &q_v,
            &k_v,
            &v_v,
            &table,
            &lens,
            [b, h, hkv, d, bs, mb],
            scale,
        );
        let nan_row = |r: usize, head: usize| {
            let row = &want[(r * h + head) * d..(r * h + head + 1) * d];
            row.iter().filter(|x| x.is_nan()).count()
        };
        let counts: Vec<usize> = (0..b * h).map(|g| nan_row(g / h, g % h)).collect();
        #[rustfmt::skip]
        let expected = [
            0, 0, 0, 0,   0, d, 0, 0,   d, d, 0, 0,   0, 0, 1, 1,
            1, 1, 0, 0,   d, d, 0, 0,   0, 0, 0, 0,   0, 0, 0, 0,
        ];
        assert_eq!(
            counts, expected,
            "{dtype:?}: the oracle's NaN elements per head"
        );
        check_backend(
            backend,
            || vec![want.clone()],
            |bk| {
                let params = PagedAttentionParams { scale };
                let out = paged_attention(&q_t, &k_t, &v_t, &table_t, &lens_t, &params, Some(bk))?;
                Ok(vec![Part::of("out", &out, out_tol(dtype))])
            },
        );
    }
}

for_each_backend!(sparse_nonfinite, sparse_sink_limits, paged_nonfinite);
