//! Values an op must not read: cache slots no valid index or context position reaches hold NaN,
//! and every backend's result stays the finite oracle's (DESIGN.md: the Reference never reads
//! the value of a slot the op must not read, so NaN or inf there cannot reach its result).

use crate::support::*;
use candle_core::DType;
use std::collections::HashSet;
use tileops_ops::{
    paged_attention, sparse_paged_attention, Backend, PagedAttentionParams, SparseAttentionParams,
};

/// `values` with NaN in every slot (a row of `width`) outside `kept`.
fn poison_except(mut values: Vec<f32>, width: usize, kept: &HashSet<usize>) -> Vec<f32> {
    for (slot, row) in values.chunks_exact_mut(width).enumerate() {
        if !kept.contains(&slot) {
            row.fill(f32::NAN);
        }
    }
    values
}

/// Dense decode: unused blocks (block 0 among them) and the positions past each context in
/// its last block hold NaN in K and V.
fn paged_unused_slots(backend: Backend) {
    let (b, h, hkv, d, bs, mb, nb) = (2usize, 4usize, 2usize, 32usize, 8usize, 3usize, 6usize);
    let table = vec![3i64, 5, -1, 1, -1, -1];
    let lens = [11i64, 5];
    let kept: HashSet<usize> = (0..b)
        .flat_map(|s| {
            let table = &table;
            (0..lens[s] as usize).map(move |t| table[s * mb + t / bs] as usize * bs + t % bs)
        })
        .collect();
    let mut rng = Rng::new(71);
    for dtype in [DType::F32, DType::BF16] {
        let (q, q_v) = rand_data(&mut rng, &[b, h, d], dtype);
        let shape = [nb, bs, hkv, d];
        let k_raw = poison_except(rng.vec(nb * bs * hkv * d, -1.0, 1.0), hkv * d, &kept);
        let v_raw = poison_except(rng.vec(nb * bs * hkv * d, -1.0, 1.0), hkv * d, &kept);
        let (k, k_v) = data(k_raw, &shape, dtype);
        let (v, v_v) = data(v_raw, &shape, dtype);
        let table_t = ints(&table, &[b, mb], DType::I32);
        let lens_t = ints(&lens, &[b], DType::I32);
        let scale = (d as f32).powf(-0.5);
        check_backend(
            backend,
            || {
                let dims = [b, h, hkv, d, bs, mb];
                vec![paged_model_with_spread(&q_v, &k_v, &v_v, &table, &lens, dims, scale).0]
            },
            |bk| {
                let params = PagedAttentionParams { scale };
                let out = paged_attention(&q, &k, &v, &table_t, &lens_t, &params, Some(bk))?;
                assert!(
                    values(&out).iter().all(|x| x.is_finite()),
                    "{bk}: NaN in out"
                );
                Ok(vec![Part::of("out", &out, out_tol(dtype))])
            },
        );
    }
}

/// Sparse decode: -1 entries, entries past `topk_length` (pointing at poisoned slots) and a row
/// with no counted valid entry; every slot no counted index reaches holds NaN (slot 0 among
/// them).
fn sparse_unused_slots(backend: Backend) {
    let (b, h, dqk, vd, bs, mb, nb, topk) = (3, 4, 64, 32, 8, 2, 4, 6);
    let table = vec![2i64, 3, 1, 0, 3, -1];
    let indices = vec![
        3, -1, 9, -1, 12, 1, // row 0: four valid
        -1, 5, 3, 0, 9, 1, // row 1: topk_length 2, one valid (token 5)
        -1, -1, -1, -1, -1, -1, // row 2: none
    ];
    let topk_length = vec![6i64, 2, 6];
    let mut kept = HashSet::new();
    for r in 0..b {
        for &t in indices[r * topk..r * topk + topk_length[r] as usize].iter() {
            if t >= 0 {
                let t = t as usize;
                kept.insert(table[r * mb + t / bs] as usize * bs + t % bs);
            }
        }
    }
    assert!(
        !kept.contains(&0),
        "slot 0 must be one of the poisoned slots"
    );
    let mut rng = Rng::new(72);
    for dtype in [DType::F32, DType::BF16] {
        let (q, q_v) = rand_data(&mut rng, &[b, h, dqk], dtype);
        let kv_raw = poison_except(rng.vec(nb * bs * dqk, -1.0, 1.0), dqk, &kept);
        let (kv, kv_v) = data(kv_raw, &[nb, bs, dqk], dtype);
        let idx_t = ints(&indices, &[b, topk], DType::I32);
        let table_t = ints(&table, &[b, mb], DType::I32);
        let len_t = ints(&topk_length, &[b], DType::I32);
        let scale = 0.125;
        check_backend(
            backend,
            || {
                let (out, lse) = SparseModel {
                    topk_length: Some(&topk_length),
                    ..SparseModel::new(
                        &q_v,
                        &kv_v,
                        &indices,
                        &table,
                        [b, h, dqk, topk, bs, mb, vd],
                        scale,
                    )
                }
                .run();
                vec![out, lse]
            },
            |bk| {
                let mut params = SparseAttentionParams::new(vd, scale);
                params.topk_length = Some(len_t.clone());
                let (out, lse) =
                    sparse_paged_attention(&q, &kv, &idx_t, &table_t, &params, Some(bk))?;
                assert!(
                    values(&out).iter().all(|x| x.is_finite()),
                    "{bk}: NaN in out"
                );
                assert!(values(&lse).iter().all(|x| !x.is_nan()), "{bk}: NaN in lse");
                Ok(vec![
                    Part::of("out", &out, out_tol(dtype)),
                    Part::of("lse", &lse, LSE_TOL),
                ])
            },
        );
    }
}

for_each_backend!(paged_unused_slots, sparse_unused_slots);
