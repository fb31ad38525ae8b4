//! `sparse_paged_attention` cases.

use crate::support::*;
use candle_core::{DType, Tensor};
use tileops_ops::{sparse_paged_attention, Backend, SparseAttentionParams};

/// One sparse case; `indices` is `[B, topk]`.
struct Case {
    seed: u64,
    dtype: DType,
    b: usize,
    h: usize,
    dqk: usize,
    v_dim: usize,
    block_size: usize,
    topk: usize,
    num_blocks: usize,
    max_blocks: usize,
    scale: f32,
    indices: Vec<i64>,
    /// The shuffled, -1-padded table.
    table: Vec<i64>,
    topk_length: Option<Vec<i64>>,
    sink: Option<Vec<f32>>,
    index_dtype: DType,
    table_dtype: DType,
    /// Pass q as a non-contiguous (transposed) view.
    strided_q: bool,
    /// Run with the batch-invariant plan.
    batch_invariant: bool,
}

impl Case {
    /// A case with `used` blocks of context per sequence (shuffled table, -1 padding to
    /// `max_blocks`) and random indices (with repeats) into that context; `invalid` in 0..1 is
    /// the share of -1 entries.
    #[allow(clippy::too_many_arguments)]
    fn new(
        seed: u64,
        dtype: DType,
        (b, h, dqk, v_dim): (usize, usize, usize, usize),
        block_size: usize,
        topk: usize,
        (used, max_blocks, num_blocks): (usize, usize, usize),
        invalid: f32,
    ) -> Case {
        let mut rng = Rng::new(seed ^ 0x5eed);
        let table = shuffled_table(&mut rng, b, used, max_blocks, num_blocks);
        let ctx = used * block_size;
        let indices = (0..b * topk)
            .map(|_| {
                if rng.uniform(0.0, 1.0) < invalid {
                    -1
                } else {
                    rng.below(ctx) as i64
                }
            })
            .collect();
        Case {
            seed,
            dtype,
            b,
            h,
            dqk,
            v_dim,
            block_size,
            topk,
            num_blocks,
            max_blocks,
            scale: (dqk as f32).powf(-0.5),
            indices,
            table,
            topk_length: None,
            sink: None,
            index_dtype: DType::I32,
            table_dtype: DType::I32,
            strided_q: false,
            batch_invariant: false,
        }
    }

    fn run(&self, backend: Backend) {
        let mut rng = Rng::new(self.seed);
        let (b, h, d) = (self.b, self.h, self.dqk);
        let (q, q_v) = if self.strided_q {
            let (qt, _) = rand_data(&mut rng, &[b, d, h], self.dtype);
            let q = qt.transpose(1, 2).expect("transpose");
            assert!(!q.is_contiguous());
            let v = values(&q);
            (q, v)
        } else {
            rand_data(&mut rng, &[b, h, d], self.dtype)
        };
        let (kv, kv_v) = rand_data(&mut rng, &[self.num_blocks, self.block_size, d], self.dtype);
        let idx = ints(&self.indices, &[b, self.topk], self.index_dtype);
        let table = ints(&self.table, &[b, self.max_blocks], self.table_dtype);
        let mut params = SparseAttentionParams::new(self.v_dim, self.scale);
        params.batch_invariant = self.batch_invariant;
        params.topk_length = self.topk_length.as_ref().map(|l| ints(l, &[b], DType::I64));
        params.sink = self
            .sink
            .as_ref()
            .map(|s| Tensor::from_slice(s, h, &candle_core::Device::Cpu).expect("sink"));
        let model = SparseModel {
            q: &q_v,
            kv: &kv_v,
            indices: &self.indices,
            table: &self.table,
            dims: [
                b,
                h,
                d,
                self.topk,
                self.block_size,
                self.max_blocks,
                self.v_dim,
            ],
            scale: self.scale,
            topk_length: self.topk_length.as_deref(),
            sink: self.sink.as_deref(),
        };
        let (want_out, want_lse, spread) = model.run_with_spread();
        check_backend(
            backend,
            || vec![want_out.clone(), want_lse.clone()],
            |bk| {
                let (out, lse) = sparse_paged_attention(&q, &kv, &idx, &table, &params, Some(bk))?;
                assert_eq!(out.dims(), &[b, h, self.v_dim]);
                assert_eq!(out.dtype(), self.dtype);
                assert_eq!(lse.dims(), &[b, h]);
                assert_eq!(lse.dtype(), DType::F32);
                Ok(vec![
                    Part::attention_out(&out, self.dtype, &spread),
                    Part::of("lse", &lse, LSE_TOL),
                ])
            },
        );
    }
}

/// DeepSeek-V3.2 decode shape (H=128, Dqk=576, v_dim=512, block 64, topk 2048), B=1, bf16,
/// scale 0.13523, 48 blocks of context in a shuffled table over 64 physical blocks.
fn deepseek_bf16(backend: Backend) {
    let mut c = Case::new(
        100,
        DType::BF16,
        (1, 128, 576, 512),
        64,
        2048,
        (48, 56, 64),
        0.0,
    );
    c.scale = 0.13523;
    c.run(backend);
}

/// The DeepSeek head shape in f32 with a short top-k (200: three full 64-token chunks and a
/// tail; 5% invalid). In f32 the device plan ping-pongs 32-token chunks and the CPU plan
/// (TileSim outside `profile`) gathers 64-token chunks into one buffer: both run here.
fn deepseek_f32_short(backend: Backend) {
    let mut c = Case::new(
        113,
        DType::F32,
        (1, 128, 576, 512),
        64,
        200,
        (8, 10, 12),
        0.05,
    );
    c.scale = 0.13523;
    c.run(backend);
}

fn small(backend: Backend, seed: u64, dtype: DType) {
    // topk 100: not a multiple of 64; 10% invalid entries.
    Case::new(seed, dtype, (3, 8, 72, 64), 16, 100, (9, 12, 30), 0.1).run(backend);
}

/// Small cases over each dtype.
fn small_f32(backend: Backend) {
    small(backend, 101, DType::F32)
}
fn small_f16(backend: Backend) {
    small(backend, 102, DType::F16)
}
fn small_bf16(backend: Backend) {
    small(backend, 103, DType::BF16)
}

/// Duplicated indices count twice: every row repeats a few tokens many times.
fn duplicates(backend: Backend) {
    let mut c = Case::new(104, DType::F32, (2, 16, 64, 64), 16, 96, (4, 4, 8), 0.0);
    for (k, t) in c.indices.iter_mut().enumerate() {
        *t = [3, 3, 17, 40, 3, 63][k % 6];
    }
    c.run(backend);
}

/// A row whose indices are all -1 gives out 0 and lse +inf; other rows are unaffected.
fn all_invalid_rows(backend: Backend) {
    let mut c = Case::new(105, DType::F16, (3, 16, 96, 64), 32, 64, (3, 4, 12), 0.2);
    let topk = c.topk;
    c.indices[topk..2 * topk].fill(-1);
    c.run(backend);
}

/// topk not a multiple of the chunk sizes (1, 65 and 300).
fn odd_topk(backend: Backend) {
    Case::new(106, DType::F32, (2, 4, 64, 32), 16, 1, (2, 2, 4), 0.0).run(backend);
    Case::new(107, DType::BF16, (1, 16, 128, 128), 16, 65, (8, 8, 8), 0.0).run(backend);
    Case::new(108, DType::F16, (2, 8, 64, 48), 8, 300, (40, 48, 96), 0.05).run(backend);
}

/// topk_length: rows count 0, 5 and all of their entries; entries past the length hold values
/// that would be invalid (they are ignored).
fn topk_length(backend: Backend) {
    let mut c = Case::new(109, DType::BF16, (3, 8, 64, 64), 16, 80, (5, 6, 16), 0.0);
    let topk = c.topk;
    c.topk_length = Some(vec![0, 5, topk as i64]);
    c.indices[3] = 1_000_000; // row 0 counts nothing
    c.indices[topk + 5] = -7; // row 1 counts 5
    c.indices[topk + 70] = 99_999;
    c.run(backend);
}

/// A per-head attention sink (with one empty row: its out stays 0 and lse +inf).
fn sink(backend: Backend) {
    let mut c = Case::new(110, DType::F32, (2, 8, 64, 64), 16, 48, (3, 4, 8), 0.1);
    c.indices[..48].fill(-1);
    c.sink = Some(vec![-2.0, -0.5, 0.0, 0.3, 1.0, 2.5, f32::NEG_INFINITY, 4.0]);
    c.run(backend);
}

/// I64 indices, a U32 table (no padding: U32 cannot hold -1) and a non-contiguous q.
fn i64_indices_u32_table_strided_q(backend: Backend) {
    let mut c = Case::new(111, DType::F16, (2, 8, 64, 32), 16, 40, (4, 4, 10), 0.1);
    c.index_dtype = DType::I64;
    c.table_dtype = DType::U32;
    c.strided_q = true;
    c.run(backend);
}

/// A shuffled table padded with -1 far beyond the reached blocks, one block per 4 tokens.
fn shuffled_padded_table(backend: Backend) {
    Case::new(112, DType::F32, (4, 4, 32, 16), 4, 24, (6, 64, 32), 0.0).run(backend);
}

/// The batch-invariant plan: row 0's `out` and `lse` have the same bits alone and in a batch of
/// 16 whose other rows hold other counts of valid indices (so the default plan, which sizes its
/// top-k splits for the batch and the fullest row, would split row 0 differently), for f32 and
/// bf16; the result still agrees with the scalar model.
fn batch_invariant_rows(backend: Backend) {
    let (b, h, d, v_dim, bs, topk) = (16usize, 4usize, 64usize, 32usize, 16usize, 512usize);
    for dtype in [DType::F32, DType::BF16] {
        let mut c = Case::new(301, dtype, (b, h, d, v_dim), bs, topk, (32, 32, 512), 0.0);
        // Row r > 0 keeps its first 16 * r entries; row 0 all of them.
        for r in 1..b {
            for j in 16 * r..topk {
                c.indices[r * topk + j] = -1;
            }
        }
        let mut rng = Rng::new(302);
        let (q, _) = rand_data(&mut rng, &[b, h, d], dtype);
        let (kv, _) = rand_data(&mut rng, &[c.num_blocks, bs, d], dtype);
        let idx = ints(&c.indices, &[b, topk], DType::I64);
        let table = ints(&c.table, &[b, c.max_blocks], DType::I64);
        let params = SparseAttentionParams::new(v_dim, 0.125).batch_invariant();
        let bits = |t: &Tensor| -> Vec<u32> {
            t.to_dtype(DType::F32)
                .and_then(|t| t.flatten_all())
                .and_then(|t| t.to_vec1::<f32>())
                .expect("values")
                .iter()
                .map(|v| v.to_bits())
                .collect()
        };
        let row0 = |t: &Tensor| t.narrow(0, 0, 1).expect("row 0");
        let (out, lse) = sparse_paged_attention(&q, &kv, &idx, &table, &params, Some(backend))
            .expect("the batch");
        let (out1, lse1) = sparse_paged_attention(
            &row0(&q),
            &kv,
            &row0(&idx),
            &row0(&table),
            &params,
            Some(backend),
        )
        .expect("row 0 alone");
        assert_eq!(bits(&row0(&out)), bits(&out1), "{dtype:?}: out of row 0");
        assert_eq!(bits(&row0(&lse)), bits(&lse1), "{dtype:?}: lse of row 0");
        // And the batch-invariant plan gives the op's usual result.
        c.seed = 303;
        c.batch_invariant = true;
        c.run(backend);
    }
}

for_each_backend!(simulated: batch_invariant_rows);

for_each_backend!(
    deepseek_bf16,
    deepseek_f32_short,
    small_f32,
    small_f16,
    small_bf16,
    duplicates,
    all_invalid_rows,
    odd_topk,
    topk_length,
    sink,
    i64_indices_u32_table_strided_q,
    shuffled_padded_table,
);
