//! The registered ops launch what `emit` plans, and their shapes are checked.

use super::*;
use crate::error::OpError;
use crate::limits::{MAX_DIM, MAX_WIDTH};
use crate::runtime::profile;
use tile_backend::ir::DType;

/// Kernel names and block_dims of what the op launched, inside `profile`.
fn launched(run: impl FnOnce() -> Result<(), OpError>) -> Vec<(String, u64)> {
    let (r, records) = profile(run);
    if let Err(e) = r {
        panic!("the op failed: {e}");
    }
    records
        .iter()
        .map(|l| (l.kernel.clone(), l.block_dim as u64))
        .collect()
}

fn planned(launches: &[Launch]) -> Vec<(String, u64)> {
    launches
        .iter()
        .map(|l| (l.kernel.name.clone(), l.block_dim))
        .collect()
}

/// Valid tokens `0..len` of each row, -1 after (so the fullest row counts `max(lens)`).
fn indices(lens: &[usize], topk: usize) -> Vec<i64> {
    lens.iter()
        .flat_map(|&n| (0..topk).map(move |t| if t < n { t as i64 } else { -1 }))
        .collect()
}

/// The attention ops and the cache write launch what `plan(shape, PlanTarget::Device)` says
/// (a profiled run plans for the device), and the shape their validation yields is the one
/// `emit` takes.
#[test]
fn attention_and_cache_launch_what_emit_plans() {
    use crate::Backend;
    use candle_core::{DType as C, Device, Tensor};
    let dev = &Device::Cpu;
    let ints = |v: Vec<i64>, shape: (usize, usize)| Tensor::from_vec(v, shape, dev);
    let sim = Some(Backend::TileSim);
    // Sparse: one batch row (many splits) and three rows, with and without a sink.
    for (batch, heads, lens, sink) in [
        (1usize, 16usize, vec![300usize], false),
        (3, 20, vec![40, 200, 7], true),
    ] {
        let (dqk, v_dim, bs, topk, nblk) = (64, 32, 16, 320, 20);
        let q = Tensor::zeros((batch, heads, dqk), C::BF16, dev).expect("q");
        let kv = Tensor::zeros((nblk, bs, dqk), C::BF16, dev).expect("kv");
        let idx = ints(indices(&lens, topk), (batch, topk)).expect("indices");
        let table = (0..batch * nblk).map(|i| (i % nblk) as i64).collect();
        let table = ints(table, (batch, nblk)).expect("table");
        let mut params = crate::SparseAttentionParams::new(v_dim, 0.1);
        params.sink = sink.then(|| Tensor::full(0.5f32, heads, dev).expect("sink"));
        let call = crate::sparse_attention::SparseCall::validate(&q, &kv, &idx, &table, &params)
            .expect("a valid call");
        let shape = SparseAttentionShape {
            dtype: DType::BF16,
            batch,
            heads,
            dqk,
            v_dim,
            topk: lens.iter().copied().max().unwrap_or(0),
            block_size: bs,
            sink,
            batch_invariant: false,
        };
        assert_eq!(*call.shape, shape);
        let got = launched(|| {
            crate::sparse_paged_attention(&q, &kv, &idx, &table, &params, sim).map(|_| ())
        });
        let want = launches(&shape).expect("a valid shape");
        assert_eq!(got, planned(&want), "sparse {shape:?}");
        assert_eq!(want[1].kernel.params.iter().any(|p| p.name == "sink"), sink);
        let splits = want[0].scalar("splits").expect("splits");
        assert_eq!(want[1].scalar("splits"), Some(splits));
        assert_eq!(want[1].scalar("rows"), Some((batch * heads) as i64));
    }

    // Dense: GQA 4 query heads per KV head, ragged contexts.
    let (batch, heads, hkv, d, bs, nblk) = (2, 8, 2, 32, 16, 8);
    let q = Tensor::zeros((batch, heads, d), C::F16, dev).expect("q");
    let kc = Tensor::zeros((nblk, bs, hkv, d), C::F16, dev).expect("cache");
    let table = (0..batch * nblk).map(|i| (i % nblk) as i64).collect();
    let table = ints(table, (batch, nblk)).expect("table");
    let lens = Tensor::new(&[40i64, 70], dev).expect("lens");
    let params = crate::PagedAttentionParams { scale: 0.2 };
    let call = crate::paged_attention::PagedCall::validate(&q, &kc, &kc, &table, &lens, &params)
        .expect("a valid call");
    let shape = PagedAttentionShape {
        dtype: DType::F16,
        batch,
        heads,
        kv_heads: hkv,
        head_dim: d,
        context_len: 70,
        block_size: bs,
    };
    assert_eq!(*call.shape, shape);
    let got =
        launched(|| crate::paged_attention(&q, &kc, &kc, &table, &lens, &params, sim).map(|_| ()));
    assert_eq!(got, planned(&launches(&shape).expect("valid")));

    // Cache write: block_dim from the row count, kernel keyed by dtype and width.
    let cache = Tensor::zeros((4, 4, 2, 8), C::F16, dev).expect("cache");
    let rows = Tensor::zeros((7, 2, 8), C::F16, dev).expect("rows");
    let slots = Tensor::new(&[0i64, 5, -1, 9, 2, 15, 11], dev).expect("slots");
    let call = crate::kv_cache::CacheCall::validate(&rows, &cache, &slots).expect("valid");
    let shape = ReshapeAndCacheShape {
        dtype: DType::F16,
        tokens: 7,
        width: 16,
    };
    assert_eq!(*call.shape, shape);
    let got = launched(|| crate::reshape_and_cache(&rows, &cache, &slots, sim));
    assert_eq!(got, planned(&launches(&shape).expect("valid")));
}

#[test]
fn gather_and_quant_matmul_launch_what_emit_plans() {
    use crate::Backend;
    use candle_core::{DType as C, Device, Tensor};
    let dev = &Device::Cpu;
    let sim = Some(Backend::TileSim);
    // Gather: block_dim from the row count, kernel keyed by dtype and width.
    let src = Tensor::zeros((16, 24), C::F32, dev).expect("src");
    let indices = Tensor::new(&[[0i64, 3, 5, 7, 9]], dev).expect("indices");
    let table = Tensor::new(&[[1i64, 0, 3, 2, 5, 4, 7, 6]], dev).expect("table");
    let call =
        crate::paged_gather::GatherCall::validate(&src, &indices, &table, 2, 20).expect("valid");
    let shape = PagedGatherShape {
        dtype: DType::F32,
        n: 5,
        size: 20,
    };
    assert_eq!(*call.shape, shape);
    let got = launched(|| crate::paged_gather(&src, &indices, &table, 2, 20, sim).map(|_| ()));
    assert_eq!(got, planned(&launches(&shape).expect("valid")));

    // quant_matmul (profiled: the device plan): 128 x 128 tiles fill more clusters than
    // 128 x 256 ones; kernel keyed by the epilogue and tiles.
    let x = Tensor::ones((70, 96), C::F16, dev).expect("x");
    let w = crate::quantize_per_channel(
        &Tensor::ones((300, 96), candle_core::DType::F32, &Device::Cpu).expect("w"),
    )
    .expect("w");
    let params = crate::QuantMatmulParams {
        relu: true,
        ..Default::default()
    };
    let (r, records) = profile(|| crate::quant_matmul(&x, &w, &params, sim));
    r.expect("runs");
    let got: Vec<(String, u64)> = records
        .iter()
        .map(|l| (l.kernel.clone(), l.block_dim as u64))
        .collect();
    let shape = QuantMatmulShape {
        out_dtype: DType::F16,
        m: 70,
        k: 96,
        n: 300,
        bias: false,
        relu: true,
    };
    let call =
        crate::quant_matmul::QuantCall::validate(&x, &w, &params, Backend::TileSim).expect("valid");
    assert_eq!(*call.shape, shape);
    assert_eq!(got, planned(&launches(&shape).expect("valid")));
    assert_eq!(got, [("quant_matmul_f16_b0_r1_128x128x128".to_string(), 3)]);
}

/// The flash ops launch what `emit` plans for the shape their validation yields; a varlen
/// call's shape is its sequences and longest runs, and its grid skips the tiles that see no key.
#[test]
fn flash_and_qk_softmax_launch_what_emit_plans() {
    use crate::Backend;
    use crate::FlashAttentionParams;
    use candle_core::{DType as C, Device, Tensor};
    let dev = &Device::Cpu;
    let sim = Some(Backend::TileSim);
    let zeros = |dims: &[usize]| Tensor::zeros(dims, C::BF16, dev).expect("zeros");
    let p = FlashAttentionParams::new(0.2, true);
    // Dense, GQA, Sq != Skv; then a short call on one vector core.
    for (sq, kernel) in [(40, "flash_attn_bf16"), (10, "flash_attn_single_bf16")] {
        let (q, k, v) = (
            zeros(&[2, 4, sq, 32]),
            zeros(&[2, 2, 70, 32]),
            zeros(&[2, 2, 70, 16]),
        );
        let call = crate::flash_attention::FlashCall::validate(&q, &k, &v, &p).expect("valid");
        let shape = FlashAttentionShape {
            dtype: DType::BF16,
            batch: 2,
            heads: 4,
            kv_heads: 2,
            seq_q: sq,
            seq_kv: 70,
            head_dim: 32,
            v_dim: 16,
            causal: true,
        };
        assert_eq!(*call.shape, shape);
        let got = launched(|| crate::flash_attention(&q, &k, &v, &p, sim).map(|_| ()));
        let want = launches(&shape).expect("a valid shape");
        assert_eq!(got, planned(&want));
        assert_eq!(got[0].0, kernel);
    }
    // Varlen: 3 sequences of 3, 0 and 40 queries against 5, 7 and 0 keys; only the first
    // sees a key (one query tile per head).
    let (q, k, v) = (
        zeros(&[43, 2, 32]),
        zeros(&[12, 1, 32]),
        zeros(&[12, 1, 32]),
    );
    let cu_q = Tensor::new(&[0i64, 3, 3, 43], dev).expect("cu_q");
    let cu_k = Tensor::new(&[0i64, 5, 12, 12], dev).expect("cu_k");
    let call = crate::flash_attention::FlashCall::validate_varlen(&q, &k, &v, &cu_q, &cu_k, &p)
        .expect("valid");
    let shape = FlashAttentionShape {
        batch: 3,
        heads: 2,
        kv_heads: 1,
        seq_q: 40,
        seq_kv: 7,
        head_dim: 32,
        v_dim: 32,
        ..*call.shape
    };
    assert_eq!(*call.shape, shape);
    let got =
        launched(|| crate::flash_attention_varlen(&q, &k, &v, &cu_q, &cu_k, &p, sim).map(|_| ()));
    assert_eq!(got, [("flash_attn_bf16".to_string(), 2)]);
    // qk_softmax.
    let (q, k) = (zeros(&[40, 64]), zeros(&[100, 64]));
    let call = crate::flash_attention::QkCall::validate(&q, &k, 0.2).expect("valid");
    let shape = QkSoftmaxShape {
        dtype: DType::BF16,
        m: 40,
        n: 100,
        head_dim: 64,
    };
    assert_eq!(*call.shape, shape);
    let got = launched(|| crate::qk_softmax(&q, &k, 0.2, sim).map(|_| ()));
    assert_eq!(got, planned(&launches(&shape).expect("a valid shape")));
    assert_eq!(got, [("qk_softmax_bf16".to_string(), 1)]);
}

#[test]
fn defaults_are_the_documented_shapes() {
    let sparse = launches(&SparseAttentionShape::default()).expect("valid");
    // 4 rows x 1 head tile: 8 splits of 2 chunks of 128 tokens occupy the 32 clusters.
    assert_eq!(planned(&sparse)[0], ("sparse_attn_bf16".to_string(), 32));
    assert_eq!(sparse[0].scalar("chunks_per_split"), Some(2));
    // 512 rows, 16 per block.
    assert_eq!(planned(&sparse)[1], ("attn_merge_bf16".to_string(), 32));
    let paged = launches(&PagedAttentionShape::default()).expect("valid");
    // 8 rows x 8 KV heads = 64 work items: one split each, 2 items per block on 32 clusters.
    assert_eq!(planned(&paged)[0], ("paged_attn_f16".to_string(), 32));
    assert_eq!(paged[0].scalar("splits"), Some(1));
    assert_eq!(
        paged.len(),
        1,
        "one split: the split kernel writes the result, no merge"
    );
    let g = launches(&PagedGatherShape::default()).expect("valid");
    assert_eq!(planned(&g), [("paged_gather_bf16_576".to_string(), 32)]);
    let c = launches(&ReshapeAndCacheShape::default()).expect("valid");
    assert_eq!(planned(&c), [("reshape_and_cache_f16_1024".to_string(), 4)]);
    // 7168 -> 2048 for 16 tokens: one row of 16-row tiles; 8 tiles of 256 channels would
    // leave clusters idle, so 16 of 128 over K slices of 512.
    let q = launches(&QuantMatmulShape::default()).expect("valid");
    assert_eq!(
        planned(&q),
        [("quant_matmul_bf16_b0_r0_16x128x512".to_string(), 16)]
    );
}

fn expect_invalid(r: Result<Vec<Launch>, OpError>, op: &str, arg: &str, needle: &str) {
    match r {
        Err(e @ OpError::Invalid { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.starts_with(&format!("{op}: argument `{arg}`: ")) && msg.contains(needle),
                "{msg}"
            );
        }
        Err(e) => panic!("expected Invalid({op}, {arg}), got {e}"),
        Ok(l) => panic!("expected Invalid({op}, {arg}), got {} launches", l.len()),
    }
}

#[test]
fn bad_shapes_name_the_argument_and_rule() {
    let sp = SparseAttentionShape::default();
    let sparse = |s: SparseAttentionShape| launches(&s);
    let op = "sparse_paged_attention";
    expect_invalid(
        sparse(SparseAttentionShape { v_dim: 577, ..sp }),
        op,
        "v_dim",
        "1..=576",
    );
    expect_invalid(
        sparse(SparseAttentionShape { batch: 0, ..sp }),
        op,
        "batch",
        "got 0",
    );
    expect_invalid(
        sparse(SparseAttentionShape { topk: 0, ..sp }),
        op,
        "topk",
        "got 0",
    );
    expect_invalid(
        sparse(SparseAttentionShape { dqk: 0, ..sp }),
        op,
        "dqk",
        "got 0",
    );
    expect_invalid(
        sparse(SparseAttentionShape {
            dqk: MAX_WIDTH + 1,
            v_dim: 16,
            ..sp
        }),
        op,
        "dqk",
        "1..=65536",
    );
    expect_invalid(
        sparse(SparseAttentionShape {
            dtype: DType::I8,
            ..sp
        }),
        op,
        "dtype",
        "i8",
    );
    expect_invalid(
        sparse(SparseAttentionShape {
            batch: MAX_DIM,
            ..sp
        }),
        op,
        "batch",
        "32-bit",
    );
    expect_invalid(
        sparse(SparseAttentionShape {
            heads: MAX_DIM + 1,
            ..sp
        }),
        op,
        "heads",
        "1..=2147483647",
    );
    let pa = PagedAttentionShape::default();
    let op = "paged_attention";
    for (heads, kv_heads) in [(32, 3), (1024, 4)] {
        expect_invalid(
            launches(&PagedAttentionShape {
                heads,
                kv_heads,
                ..pa
            }),
            op,
            "kv_heads",
            "multiple of Hkv",
        );
    }
    expect_invalid(
        launches(&PagedAttentionShape { kv_heads: 0, ..pa }),
        op,
        "kv_heads",
        "got 0",
    );
    expect_invalid(
        launches(&PagedAttentionShape {
            context_len: 0,
            ..pa
        }),
        op,
        "context_len",
        "got 0",
    );
    let pg = PagedGatherShape::default();
    expect_invalid(
        launches(&PagedGatherShape { size: 0, ..pg }),
        "paged_gather",
        "size",
        "got 0",
    );
    expect_invalid(
        launches(&PagedGatherShape { n: 0, ..pg }),
        "paged_gather",
        "n",
        "got 0",
    );
    expect_invalid(
        launches(&PagedGatherShape {
            size: MAX_WIDTH + 1,
            ..pg
        }),
        "paged_gather",
        "size",
        "static tile columns",
    );
    let qm = QuantMatmulShape::default();
    expect_invalid(
        launches(&QuantMatmulShape { k: 0, ..qm }),
        "quant_matmul",
        "k",
        "got 0",
    );
    expect_invalid(
        launches(&QuantMatmulShape {
            out_dtype: DType::I8,
            bias: true,
            ..qm
        }),
        "quant_matmul_int8",
        "bias",
        "no bias",
    );
    expect_invalid(
        launches(&QuantMatmulShape {
            out_dtype: DType::I32,
            ..qm
        }),
        "quant_matmul",
        "out_dtype",
        "f32, f16, bf16 or i8",
    );
    let rc = ReshapeAndCacheShape::default();
    expect_invalid(
        launches(&ReshapeAndCacheShape { width: 0, ..rc }),
        "reshape_and_cache",
        "width",
        "got 0",
    );
    expect_invalid(
        launches(&ReshapeAndCacheShape {
            dtype: DType::I32,
            ..rc
        }),
        "reshape_and_cache",
        "dtype",
        "f32, f16 or bf16",
    );
}

/// The registered ops that have no tensor call (tile-backend's example kernels): `emit` is
/// their only path.
const NO_TENSOR_CALL: &[&str] = &["matmul", "attention", "gather-matmul", "worked-matmul"];

/// A registered op seen from both paths: `emit` given `values` must refuse the shape with
/// `param`'s rule; `bad` is a tensor call of that same shape (Reference backend), which must
/// refuse it naming `arg`, with the shape's rule when `shape_rule` (otherwise the call refuses
/// the shape earlier, on its tensors, with a tensor rule of its own); `good` is a valid call.
struct Row {
    op: &'static str,
    values: &'static [(&'static str, &'static str)],
    param: &'static str,
    arg: &'static str,
    shape_rule: bool,
    bad: fn() -> Result<(), OpError>,
    good: fn() -> Result<(), OpError>,
}

fn rows() -> Vec<Row> {
    use crate::Backend;
    use candle_core::{DType as C, Device, Tensor};
    const REF: Option<Backend> = Some(Backend::Reference);
    fn z(dims: &[usize], dt: C) -> Tensor {
        Tensor::zeros(dims, dt, &Device::Cpu).expect("zeros")
    }
    fn ints(v: &[i64], dims: &[usize]) -> Tensor {
        Tensor::from_slice(v, dims, &Device::Cpu).expect("ints")
    }
    fn sparse(dqk: usize, heads: usize, v_dim: usize, blocks: usize) -> Result<(), OpError> {
        let idx: Vec<i64> = (0..blocks as i64).collect();
        let table = idx.clone();
        let (q, kv) = (z(&[1, heads, dqk], C::BF16), z(&[blocks, 16, dqk], C::BF16));
        let p = crate::SparseAttentionParams::new(v_dim, 0.1);
        let (idx, table) = (ints(&idx, &[1, blocks]), ints(&table, &[1, blocks]));
        crate::sparse_paged_attention(&q, &kv, &idx, &table, &p, REF).map(|_| ())
    }
    fn paged(d: usize, blocks: usize) -> Result<(), OpError> {
        let (q, kc) = (z(&[1, 2, d], C::F16), z(&[blocks, 4, 1, d], C::F16));
        let table: Vec<i64> = (0..blocks as i64).collect();
        let (table, lens) = (ints(&table, &[1, blocks]), ints(&[1], &[1]));
        let p = crate::PagedAttentionParams { scale: 0.2 };
        crate::paged_attention(&q, &kc, &kc, &table, &lens, &p, REF).map(|_| ())
    }
    fn gather(size: usize) -> Result<(), OpError> {
        let (idx, table) = (ints(&[0], &[1, 1]), ints(&[0, 1], &[1, 2]));
        crate::paged_gather(&z(&[4, size], C::F32), &idx, &table, 2, size, REF).map(|_| ())
    }
    fn cache(width: usize) -> Result<(), OpError> {
        let (rows, cache) = (z(&[2, width], C::F32), z(&[2, 2, width], C::F32));
        crate::reshape_and_cache(&rows, &cache, &ints(&[0, 3], &[2]), REF)
    }
    fn quant(m: usize, k: usize, n: usize) -> Result<(), OpError> {
        let w = crate::quantize_per_channel(&z(&[n, k], C::F32).ones_like()?)?;
        let x = z(&[m, k], C::F32).ones_like()?;
        crate::quant_matmul(&x, &w, &crate::QuantMatmulParams::default(), REF).map(|_| ())
    }
    fn flash(d: usize) -> Result<(), OpError> {
        let (q, k, v) = (
            z(&[1, 2, 3, d], C::BF16),
            z(&[1, 1, 5, d], C::BF16),
            z(&[1, 1, 5, d], C::BF16),
        );
        let p = crate::FlashAttentionParams::new(0.2, true);
        crate::flash_attention(&q, &k, &v, &p, REF).map(|_| ())
    }
    fn qk(m: usize, n: usize, d: usize) -> Result<(), OpError> {
        crate::qk_softmax(&z(&[m, d], C::BF16), &z(&[n, d], C::BF16), 0.2, REF).map(|_| ())
    }
    fn indexer(d: usize) -> Result<(), OpError> {
        let (q, w) = (z(&[1, 2, d], C::F32), z(&[1, 2], C::F32));
        let cache = crate::IndexKeyCache::zeros(1, 4, d, C::F32, &Device::Cpu)?;
        let (table, lens) = (ints(&[0], &[1, 1]), ints(&[3], &[1]));
        let p = crate::LightningIndexerParams::new(2);
        crate::lightning_indexer(&q, &w, &cache, &table, &lens, &p, REF).map(|_| ())
    }
    vec![
        Row {
            op: "lightning-indexer",
            values: &[("head_dim", "65537")],
            param: "head_dim",
            arg: "q",
            shape_rule: true,
            bad: || indexer(65537),
            good: || indexer(16),
        },
        Row {
            op: "sparse-paged-attention",
            values: &[("dqk", "65537")],
            param: "dqk",
            arg: "q",
            shape_rule: true,
            bad: || sparse(65537, 1, 1, 1),
            good: || sparse(16, 2, 8, 2),
        },
        Row {
            op: "paged-attention",
            values: &[("head_dim", "65537")],
            param: "head_dim",
            arg: "q",
            shape_rule: true,
            bad: || paged(65537, 1),
            good: || paged(16, 2),
        },
        Row {
            op: "paged-gather",
            values: &[("size", "65537")],
            param: "size",
            arg: "size",
            shape_rule: true,
            bad: || gather(65537),
            good: || gather(8),
        },
        Row {
            op: "reshape-and-cache",
            values: &[("width", "65537")],
            param: "width",
            arg: "rows",
            shape_rule: true,
            bad: || cache(65537),
            good: || cache(8),
        },
        Row {
            op: "quant-matmul",
            values: &[("m", "65536"), ("k", "1"), ("n", "65536")],
            param: "m",
            arg: "x",
            shape_rule: true,
            bad: || quant(65536, 1, 65536),
            good: || quant(3, 32, 5),
        },
        Row {
            op: "flash-attention",
            values: &[("head_dim", "300")],
            param: "head_dim",
            arg: "q",
            shape_rule: false,
            bad: || flash(300),
            good: || flash(16),
        },
        Row {
            op: "qk-softmax",
            values: &[("m", "65536"), ("n", "65536"), ("head_dim", "1")],
            param: "n",
            arg: "k",
            shape_rule: true,
            bad: || qk(65536, 65536, 1),
            good: || qk(3, 5, 16),
        },
    ]
}

/// Every registered op with a tensor call checks its shape through the one `OpShape::check`
/// on both paths: `emit` and the tensor call refuse the same bad shape with the same rule
/// (restated for the tensor argument that carries the parameter), and a valid `emit` and a
/// valid call each run that check exactly once.
#[test]
fn every_op_checks_once_on_both_paths() {
    let rows = rows();
    for spec in OPS {
        assert!(
            rows.iter().any(|r| r.op == spec.name) || NO_TENSOR_CALL.contains(&spec.name),
            "registered op `{}` has no row here: give its tensor call one",
            spec.name
        );
    }
    for r in &rows {
        let entry = find_op(r.op).expect("a registered op");
        let values: Vec<(String, String)> = r
            .values
            .iter()
            .map(|&(p, v)| (p.to_string(), v.to_string()))
            .collect();
        let emit_rule = match entry.launches(&values) {
            Err(BuildError::Op(OpError::Invalid { arg, rule, .. })) if arg == r.param => rule,
            other => panic!("{}: emit {values:?} gave {other:?}", r.op),
        };
        match (r.bad)() {
            Err(OpError::Invalid { arg, rule, .. }) if arg == r.arg => {
                if r.shape_rule {
                    let want = if r.arg == r.param {
                        emit_rule.clone()
                    } else {
                        format!("{emit_rule} (shape parameter `{}`)", r.param)
                    };
                    assert_eq!(rule, want, "{}", r.op);
                }
            }
            other => panic!(
                "{}: the tensor call gave {other:?}, not Invalid({})",
                r.op, r.arg
            ),
        }
        spec::CHECKS_RUN.with(|c| c.borrow_mut().clear());
        entry.launches(&[]).expect("the defaults are valid");
        (r.good)().unwrap_or_else(|e| panic!("{}: a valid call failed: {e}", r.op));
        let ran = spec::CHECKS_RUN.with(|c| c.take());
        assert_eq!(
            ran,
            [
                (entry.name, CheckPath::Emit),
                (entry.name, CheckPath::Tensor)
            ],
            "{}",
            r.op
        );
    }
}
