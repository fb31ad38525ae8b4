//! Bad inputs: each case expects `OpError::Invalid` naming the op, the argument and the numbers
//! of the broken rule, on every backend (validation runs before any backend work).

use crate::support::*;
use candle_core::{DType, Device, Tensor};
use tileops_ops::{
    paged_attention, paged_gather, reshape_and_cache, sparse_paged_attention, Backend,
    PagedAttentionParams, SparseAttentionParams,
};

const G: &str = "paged_gather";
const S: &str = "sparse_paged_attention";
const P: &str = "paged_attention";
const C: &str = "reshape_and_cache";

fn zeros(shape: &[usize], dtype: DType) -> Tensor {
    Tensor::zeros(shape, dtype, &Device::Cpu).expect("zeros")
}

// ----- paged_gather: src [16, 8] f32, indices [[0, 5, 7]], table [[3, 0, 7, 1]], block 2 -----

struct Gather {
    src: Tensor,
    indices: Tensor,
    table: Tensor,
    block_size: usize,
    size: usize,
}

impl Gather {
    fn ok() -> Gather {
        Gather {
            src: zeros(&[16, 8], DType::F32),
            indices: ints(&[0, 5, 7], &[1, 3], DType::I32),
            table: ints(&[3, 0, 7, 1], &[1, 4], DType::I32),
            block_size: 2,
            size: 8,
        }
    }

    fn call(&self, bk: Backend) -> Result<Tensor, tileops_ops::OpError> {
        paged_gather(
            &self.src,
            &self.indices,
            &self.table,
            self.block_size,
            self.size,
            Some(bk),
        )
    }
}

fn gather_src_rank(bk: Backend) {
    let mut g = Gather::ok();
    g.src = zeros(&[16, 8, 1], DType::F32);
    expect_invalid(g.call(bk), G, "src", &["rank 2", "[16, 8, 1]"]);
}

fn gather_src_dtype(bk: Backend) {
    let mut g = Gather::ok();
    g.src = zeros(&[16, 8], DType::F64);
    expect_invalid(g.call(bk), G, "src", &["F64", "f32, f16 or bf16"]);
}

fn gather_indices_dtype(bk: Backend) {
    let mut g = Gather::ok();
    g.indices = zeros(&[1, 3], DType::F32);
    expect_invalid(g.call(bk), G, "indices", &["F32", "I32, I64"]);
}

fn gather_indices_rows(bk: Backend) {
    let mut g = Gather::ok();
    g.indices = ints(&[0, 1, 2, 3], &[2, 2], DType::I32);
    expect_invalid(g.call(bk), G, "indices", &["is 2", "must be 1"]);
}

fn gather_indices_empty(bk: Backend) {
    let mut g = Gather::ok();
    g.indices = ints(&[], &[1, 0], DType::I32);
    expect_invalid(g.call(bk), G, "indices", &["empty", "[1, 0]"]);
}

fn gather_block_size_zero(bk: Backend) {
    let mut g = Gather::ok();
    g.block_size = 0;
    expect_invalid(g.call(bk), G, "block_size", &["found 0"]);
}

fn gather_size_zero(bk: Backend) {
    let mut g = Gather::ok();
    g.size = 0;
    expect_invalid(g.call(bk), G, "size", &["1..=8", "found 0"]);
}

fn gather_size_too_big(bk: Backend) {
    let mut g = Gather::ok();
    g.size = 9;
    expect_invalid(g.call(bk), G, "size", &["1..=8", "found 9"]);
}

fn gather_index_beyond_capacity(bk: Backend) {
    let mut g = Gather::ok();
    g.indices = ints(&[0, 8], &[1, 2], DType::I64);
    expect_invalid(g.call(bk), G, "indices", &["indices[0, 1] = 8", "0..8"]);
}

fn gather_index_negative(bk: Backend) {
    let mut g = Gather::ok();
    g.indices = ints(&[-1], &[1, 1], DType::I32);
    expect_invalid(g.call(bk), G, "indices", &["= -1", "0..8"]);
}

fn gather_table_negative_reached(bk: Backend) {
    let mut g = Gather::ok();
    g.table = ints(&[3, -1, 7, 1], &[1, 4], DType::I32);
    g.indices = ints(&[0, 2], &[1, 2], DType::I32);
    expect_invalid(
        g.call(bk),
        G,
        "block_table",
        &["[0, 1] = -1", "indices[0, 1] = 2"],
    );
}

fn gather_table_row_beyond_src(bk: Backend) {
    let mut g = Gather::ok();
    g.table = ints(&[3, 8, 7, 1], &[1, 4], DType::I64);
    g.indices = ints(&[3], &[1, 1], DType::I32);
    expect_invalid(
        g.call(bk),
        G,
        "block_table",
        &["[0, 1] = 8", "row 17", "0..16"],
    );
}

fn gather_table_dtype(bk: Backend) {
    let mut g = Gather::ok();
    g.table = ints(&[3, 0, 7, 1], &[1, 4], DType::I64)
        .to_dtype(DType::U8)
        .expect("u8");
    expect_invalid(g.call(bk), G, "block_table", &["U8"]);
}

// ----- sparse: q [2, 4, 16] f16, kv [6, 4, 16], indices [2, 3], table [2, 3], v_dim 8 -----

struct Sparse {
    q: Tensor,
    kv: Tensor,
    indices: Tensor,
    table: Tensor,
    params: SparseAttentionParams,
}

impl Sparse {
    fn ok() -> Sparse {
        Sparse {
            q: zeros(&[2, 4, 16], DType::F16),
            kv: zeros(&[6, 4, 16], DType::F16),
            indices: ints(&[0, 5, -1, 11, -1, 3], &[2, 3], DType::I32),
            table: ints(&[2, 0, -1, 5, 4, 1], &[2, 3], DType::I32),
            params: SparseAttentionParams::new(8, 0.25),
        }
    }

    fn call(&self, bk: Backend) -> Result<(Tensor, Tensor), tileops_ops::OpError> {
        sparse_paged_attention(
            &self.q,
            &self.kv,
            &self.indices,
            &self.table,
            &self.params,
            Some(bk),
        )
    }
}

fn sparse_q_rank(bk: Backend) {
    let mut s = Sparse::ok();
    s.q = zeros(&[8, 16], DType::F16);
    expect_invalid(s.call(bk), S, "q", &["rank 3", "[B, H, Dqk]"]);
}

fn sparse_kv_dtype(bk: Backend) {
    let mut s = Sparse::ok();
    s.kv = zeros(&[6, 4, 16], DType::BF16);
    expect_invalid(s.call(bk), S, "kv_cache", &["BF16", "F16"]);
}

fn sparse_kv_dqk(bk: Backend) {
    let mut s = Sparse::ok();
    s.kv = zeros(&[6, 4, 32], DType::F16);
    expect_invalid(s.call(bk), S, "kv_cache", &["Dqk", "is 32", "must be 16"]);
}

fn sparse_indices_batch(bk: Backend) {
    let mut s = Sparse::ok();
    s.indices = ints(&[0, 1, 2], &[1, 3], DType::I32);
    expect_invalid(s.call(bk), S, "indices", &["(B) is 1", "must be 2"]);
}

fn sparse_table_batch(bk: Backend) {
    let mut s = Sparse::ok();
    s.table = ints(&[2, 0, 1], &[3, 1], DType::I32);
    expect_invalid(s.call(bk), S, "block_table", &["(B) is 3", "must be 2"]);
}

fn sparse_v_dim_zero(bk: Backend) {
    let mut s = Sparse::ok();
    s.params.v_dim = 0;
    expect_invalid(s.call(bk), S, "v_dim", &["1..=16", "found 0"]);
}

fn sparse_v_dim_too_big(bk: Backend) {
    let mut s = Sparse::ok();
    s.params.v_dim = 17;
    expect_invalid(s.call(bk), S, "v_dim", &["1..=16", "found 17"]);
}

fn sparse_scale_nan(bk: Backend) {
    let mut s = Sparse::ok();
    s.params.scale = f32::NAN;
    expect_invalid(s.call(bk), S, "scale", &["finite", "NaN"]);
}

fn sparse_index_below_minus_one(bk: Backend) {
    let mut s = Sparse::ok();
    s.indices = ints(&[0, -2, -1, 1, 2, 3], &[2, 3], DType::I64);
    expect_invalid(s.call(bk), S, "indices", &["indices[0, 1] = -2", "0..12"]);
}

fn sparse_index_beyond_capacity(bk: Backend) {
    let mut s = Sparse::ok();
    s.indices = ints(&[0, 1, 2, 3, 12, 4], &[2, 3], DType::I32);
    expect_invalid(s.call(bk), S, "indices", &["indices[1, 1] = 12", "0..12"]);
}

fn sparse_table_entry_too_big(bk: Backend) {
    let mut s = Sparse::ok();
    s.table = ints(&[2, 0, -1, 5, 6, 1], &[2, 3], DType::I32);
    s.indices = ints(&[0, 5, -1, 1, 4, 3], &[2, 3], DType::I32);
    expect_invalid(
        s.call(bk),
        S,
        "block_table",
        &["[1, 1] = 6", "indices[1, 1] = 4", "0..6"],
    );
}

fn sparse_table_negative_reached(bk: Backend) {
    let mut s = Sparse::ok();
    s.indices = ints(&[0, 8, -1, 1, 2, 3], &[2, 3], DType::I32);
    expect_invalid(
        s.call(bk),
        S,
        "block_table",
        &["[0, 2] = -1", "indices[0, 1] = 8"],
    );
}

fn sparse_topk_length_range(bk: Backend) {
    let mut s = Sparse::ok();
    s.params.topk_length = Some(ints(&[3, 4], &[2], DType::I32));
    expect_invalid(
        s.call(bk),
        S,
        "topk_length",
        &["topk_length[1] = 4", "0..=3"],
    );
}

fn sparse_topk_length_shape(bk: Backend) {
    let mut s = Sparse::ok();
    s.params.topk_length = Some(ints(&[3, 3, 3], &[3], DType::I32));
    expect_invalid(s.call(bk), S, "topk_length", &["(B) is 3", "must be 2"]);
}

fn sparse_sink_shape(bk: Backend) {
    let mut s = Sparse::ok();
    s.params.sink = Some(zeros(&[5], DType::F32));
    expect_invalid(s.call(bk), S, "sink", &["(H) is 5", "must be 4"]);
}

fn sparse_sink_dtype(bk: Backend) {
    let mut s = Sparse::ok();
    s.params.sink = Some(zeros(&[4], DType::F16));
    expect_invalid(s.call(bk), S, "sink", &["F16", "f32"]);
}

fn sparse_sink_nan(bk: Backend) {
    let mut s = Sparse::ok();
    let v = [0.0f32, f32::NAN, 0.0, 0.0];
    s.params.sink = Some(Tensor::from_slice(&v, 4, &Device::Cpu).expect("sink"));
    expect_invalid(s.call(bk), S, "sink", &["sink[1] is NaN"]);
}

fn sparse_empty_q(bk: Backend) {
    let mut s = Sparse::ok();
    s.q = zeros(&[2, 0, 16], DType::F16);
    expect_invalid(s.call(bk), S, "q", &["empty", "[2, 0, 16]"]);
}

// ----- paged: q [2, 4, 8] f32, caches [5, 4, 2, 8], table [2, 3], lens [3, 9] -----

struct Paged {
    q: Tensor,
    k: Tensor,
    v: Tensor,
    table: Tensor,
    lens: Tensor,
    scale: f32,
}

impl Paged {
    fn ok() -> Paged {
        Paged {
            q: zeros(&[2, 4, 8], DType::F32),
            k: zeros(&[5, 4, 2, 8], DType::F32),
            v: zeros(&[5, 4, 2, 8], DType::F32),
            table: ints(&[1, -1, -1, 4, 0, 2], &[2, 3], DType::I64),
            lens: ints(&[3, 9], &[2], DType::I32),
            scale: 0.35,
        }
    }

    fn call(&self, bk: Backend) -> Result<Tensor, tileops_ops::OpError> {
        let params = PagedAttentionParams { scale: self.scale };
        paged_attention(
            &self.q,
            &self.k,
            &self.v,
            &self.table,
            &self.lens,
            &params,
            Some(bk),
        )
    }
}

fn paged_heads_not_divisible(bk: Backend) {
    let mut p = Paged::ok();
    p.k = zeros(&[5, 4, 3, 8], DType::F32);
    p.v = zeros(&[5, 4, 3, 8], DType::F32);
    expect_invalid(p.call(bk), P, "k_cache", &["H = 4", "Hkv = 3"]);
}

fn paged_v_shape(bk: Backend) {
    let mut p = Paged::ok();
    p.v = zeros(&[5, 4, 2, 16], DType::F32);
    expect_invalid(p.call(bk), P, "v_cache", &["[5, 4, 2, 16]", "[5, 4, 2, 8]"]);
}

fn paged_k_head_dim(bk: Backend) {
    let mut p = Paged::ok();
    p.k = zeros(&[5, 4, 2, 16], DType::F32);
    expect_invalid(p.call(bk), P, "k_cache", &["(D) is 16", "must be 8"]);
}

fn paged_v_dtype(bk: Backend) {
    let mut p = Paged::ok();
    p.v = zeros(&[5, 4, 2, 8], DType::F16);
    expect_invalid(p.call(bk), P, "v_cache", &["F16", "F32"]);
}

fn paged_context_len_zero(bk: Backend) {
    let mut p = Paged::ok();
    p.lens = ints(&[0, 9], &[2], DType::I32);
    expect_invalid(
        p.call(bk),
        P,
        "context_lens",
        &["context_lens[0] = 0", "1..=12"],
    );
}

fn paged_context_len_beyond_capacity(bk: Backend) {
    let mut p = Paged::ok();
    p.lens = ints(&[3, 13], &[2], DType::I64);
    expect_invalid(
        p.call(bk),
        P,
        "context_lens",
        &["context_lens[1] = 13", "1..=12"],
    );
}

fn paged_table_entry_reached(bk: Backend) {
    let mut p = Paged::ok();
    p.lens = ints(&[5, 9], &[2], DType::I32);
    expect_invalid(
        p.call(bk),
        P,
        "block_table",
        &["[0, 1] = -1", "token 4 of sequence 0"],
    );
}

fn paged_table_entry_too_big(bk: Backend) {
    let mut p = Paged::ok();
    p.table = ints(&[1, -1, -1, 4, 5, 2], &[2, 3], DType::I64);
    expect_invalid(p.call(bk), P, "block_table", &["[1, 1] = 5", "0..5"]);
}

fn paged_lens_dtype(bk: Backend) {
    let mut p = Paged::ok();
    p.lens = ints(&[3, 9], &[2], DType::U32);
    expect_invalid(p.call(bk), P, "context_lens", &["U32", "I32, I64"]);
}

fn paged_scale_inf(bk: Backend) {
    let mut p = Paged::ok();
    p.scale = f32::INFINITY;
    expect_invalid(p.call(bk), P, "scale", &["finite", "inf"]);
}

// ----- reshape_and_cache: rows [3, 2, 4] bf16, cache [4, 2, 2, 4], slots [5, -1, 0] -----

struct Cache {
    rows: Tensor,
    cache: Tensor,
    slots: Tensor,
}

impl Cache {
    fn ok() -> Cache {
        Cache {
            rows: zeros(&[3, 2, 4], DType::BF16),
            cache: zeros(&[4, 2, 2, 4], DType::BF16),
            slots: ints(&[5, -1, 0], &[3], DType::I64),
        }
    }

    fn call(&self, bk: Backend) -> Result<(), tileops_ops::OpError> {
        reshape_and_cache(&self.rows, &self.cache, &self.slots, Some(bk))
    }
}

fn cache_width(bk: Backend) {
    let mut c = Cache::ok();
    c.rows = zeros(&[3, 9], DType::BF16);
    expect_invalid(c.call(bk), C, "rows", &["row width 9", "row width 8"]);
}

fn cache_dtype(bk: Backend) {
    let mut c = Cache::ok();
    c.rows = zeros(&[3, 2, 4], DType::F32);
    expect_invalid(c.call(bk), C, "rows", &["F32", "BF16"]);
}

fn cache_slot_out_of_range(bk: Backend) {
    let mut c = Cache::ok();
    c.slots = ints(&[5, 8, 0], &[3], DType::I32);
    expect_invalid(
        c.call(bk),
        C,
        "slot_mapping",
        &["slot_mapping[1] = 8", "0..8"],
    );
}

fn cache_slot_below_minus_one(bk: Backend) {
    let mut c = Cache::ok();
    c.slots = ints(&[5, -3, 0], &[3], DType::I32);
    expect_invalid(c.call(bk), C, "slot_mapping", &["slot_mapping[1] = -3"]);
}

fn cache_slot_duplicate(bk: Backend) {
    let mut c = Cache::ok();
    c.slots = ints(&[5, -1, 5], &[3], DType::I64);
    expect_invalid(
        c.call(bk),
        C,
        "slot_mapping",
        &["slot_mapping[2] = 5", "slot_mapping[0]"],
    );
}

fn cache_slot_len(bk: Backend) {
    let mut c = Cache::ok();
    c.slots = ints(&[5, -1], &[2], DType::I64);
    expect_invalid(c.call(bk), C, "slot_mapping", &["(N) is 2", "must be 3"]);
}

fn cache_rank(bk: Backend) {
    let mut c = Cache::ok();
    c.cache = zeros(&[8, 8], DType::BF16);
    expect_invalid(c.call(bk), C, "cache", &["rank >= 3", "[8, 8]"]);
}

fn cache_not_contiguous(bk: Backend) {
    let mut c = Cache::ok();
    c.cache = zeros(&[4, 2, 4, 2], DType::BF16)
        .transpose(2, 3)
        .expect("transpose");
    expect_invalid(c.call(bk), C, "cache", &["contiguous"]);
}

fn cache_rows_alias_cache(bk: Backend) {
    let c = Cache::ok();
    let rows = c
        .cache
        .reshape((8, 2, 4))
        .expect("view")
        .narrow(0, 0, 3)
        .expect("view");
    let r = reshape_and_cache(&rows, &c.cache, &c.slots, Some(bk));
    expect_invalid(r, C, "rows", &["share storage"]);
}

for_each_backend!(
    gather_src_rank,
    gather_src_dtype,
    gather_indices_dtype,
    gather_indices_rows,
    gather_indices_empty,
    gather_block_size_zero,
    gather_size_zero,
    gather_size_too_big,
    gather_index_beyond_capacity,
    gather_index_negative,
    gather_table_negative_reached,
    gather_table_row_beyond_src,
    gather_table_dtype,
    sparse_q_rank,
    sparse_kv_dtype,
    sparse_kv_dqk,
    sparse_indices_batch,
    sparse_table_batch,
    sparse_v_dim_zero,
    sparse_v_dim_too_big,
    sparse_scale_nan,
    sparse_index_below_minus_one,
    sparse_index_beyond_capacity,
    sparse_table_entry_too_big,
    sparse_table_negative_reached,
    sparse_topk_length_range,
    sparse_topk_length_shape,
    sparse_sink_shape,
    sparse_sink_dtype,
    sparse_sink_nan,
    sparse_empty_q,
    paged_heads_not_divisible,
    paged_v_shape,
    paged_k_head_dim,
    paged_v_dtype,
    paged_context_len_zero,
    paged_context_len_beyond_capacity,
    paged_table_entry_reached,
    paged_table_entry_too_big,
    paged_lens_dtype,
    paged_scale_inf,
    cache_width,
    cache_dtype,
    cache_slot_out_of_range,
    cache_slot_below_minus_one,
    cache_slot_duplicate,
    cache_slot_len,
    cache_rank,
    cache_not_contiguous,
    cache_rows_alias_cache,
);
