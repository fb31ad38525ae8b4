//! The usage snippets of docs/ops.md, compiled and run (Reference backend), and a check that the
//! document still shows exactly this code.

use std::error::Error;

type R = Result<(), Box<dyn Error>>;

#[test]
fn paged_gather_snippet() -> R {
    use candle_core::{Device, Tensor};
    use tileops_ops::{paged_gather, Backend};

    let dev = Device::Cpu;
    let src = Tensor::randn(0f32, 1.0, (16, 32), &dev)?; // [T, C]
    let indices = Tensor::new(&[[0i32, 3, 5, 7]], &dev)?; // [1, n] logical tokens
    let block_table = Tensor::new(&[[5i32, 2, 7, 0]], &dev)?; // [1, nb], block_size 2
    let backend = Some(Backend::Reference); // None: TILEOPS_BACKEND, default sim
    let rows = paged_gather(&src, &indices, &block_table, 2, 16, backend)?;
    // Row 1 is src[block_table[0, 3 / 2] * 2 + 3 % 2, ..16] = src[5, ..16].
    assert_eq!(rows.dims(), &[4, 16]);
    Ok(())
}

#[test]
fn sparse_paged_attention_snippet() -> R {
    use candle_core::{DType, Device, Tensor};
    use tileops_ops::{sparse_paged_attention, Backend, SparseAttentionParams};

    let dev = Device::Cpu;
    let (b, h, dqk, v_dim, block_size, topk) = (2, 16, 576, 512, 64, 128);
    let q = Tensor::randn(0f32, 1.0, (b, h, dqk), &dev)?.to_dtype(DType::BF16)?;
    let kv_cache = Tensor::randn(0f32, 1.0, (8, block_size, dqk), &dev)?.to_dtype(DType::BF16)?;
    let block_table = Tensor::new(&[[3i32, 0, -1, -1], [6, 1, 7, -1]], &dev)?; // -1: unused
    let row0 = 0..topk as i32; // tokens 0..128
    let row1 = (0..topk as i32).map(|t| if t % 3 == 0 { -1 } else { t + 60 }); // -1: skipped
    let indices = Tensor::from_vec(row0.chain(row1).collect::<Vec<i32>>(), (b, topk), &dev)?;
    let mut params = SparseAttentionParams::new(v_dim, 0.13523);
    params.topk_length = Some(Tensor::new(&[128i32, 100], &dev)?); // optional
    params.sink = Some(Tensor::zeros(h, DType::F32, &dev)?); // optional, f32 [H]
    let (out, lse) = sparse_paged_attention(
        &q,
        &kv_cache,
        &indices,
        &block_table,
        &params,
        Some(Backend::Reference),
    )?;
    assert_eq!((out.dims(), out.dtype()), (&[b, h, v_dim][..], DType::BF16));
    assert_eq!((lse.dims(), lse.dtype()), (&[b, h][..], DType::F32));
    Ok(())
}

#[test]
fn paged_attention_snippet() -> R {
    use candle_core::{DType, Device, Tensor};
    use tileops_ops::{paged_attention, Backend, PagedAttentionParams};

    let dev = Device::Cpu;
    let (b, h, hkv, d, block_size) = (2, 8, 2, 64, 16);
    let q = Tensor::randn(0f32, 1.0, (b, h, d), &dev)?.to_dtype(DType::F16)?;
    let k_cache = Tensor::randn(0f32, 1.0, (10, block_size, hkv, d), &dev)?.to_dtype(DType::F16)?;
    let v_cache = Tensor::randn(0f32, 1.0, (10, block_size, hkv, d), &dev)?.to_dtype(DType::F16)?;
    let block_table = Tensor::new(&[[4i64, 1, -1], [0, 9, 3]], &dev)?; // -1 past the context
    let context_lens = Tensor::new(&[20i32, 33], &dev)?;
    let params = PagedAttentionParams {
        scale: (d as f32).powf(-0.5),
    };
    let out = paged_attention(
        &q,
        &k_cache,
        &v_cache,
        &block_table,
        &context_lens,
        &params,
        Some(Backend::Reference),
    )?;
    assert_eq!(out.dims(), &[b, h, d]);
    Ok(())
}

#[test]
fn reshape_and_cache_snippet() -> R {
    use candle_core::{DType, Device, Tensor};
    use tileops_ops::{reshape_and_cache, Backend};

    let dev = Device::Cpu;
    let (block_size, hkv, d) = (16, 2, 64);
    let k_cache = Tensor::zeros((10, block_size, hkv, d), DType::F16, &dev)?;
    // New rows [N, Hkv, D].
    let new_k = Tensor::randn(0f32, 1.0, (3, hkv, d), &dev)?.to_dtype(DType::F16)?;
    // Token 0 -> block 4 slot 0, token 1 -> block 4 slot 1, row 2 is padding (-1: skipped).
    let slot_mapping = Tensor::new(&[64i64, 65, -1], &dev)?;
    reshape_and_cache(&new_k, &k_cache, &slot_mapping, Some(Backend::Reference))?;
    let written = k_cache.get(4)?.get(1)?; // in place: k_cache now holds the rows
    assert_eq!(
        written.to_dtype(DType::F32)?.to_vec2::<f32>()?,
        new_k.get(1)?.to_dtype(DType::F32)?.to_vec2::<f32>()?
    );
    Ok(())
}

#[test]
fn lightning_indexer_snippet() -> R {
    use candle_core::{DType, Device, Tensor};
    use tileops_ops::{
        index_cache_append, lightning_indexer, Backend, Fp8Conversion, IndexKeyCache,
        LightningIndexerParams, ScaleFormat,
    };

    let dev = Device::Cpu;
    let (t, h, d, block_size) = (2, 4, 128, 16);
    let cache = IndexKeyCache::zeros_fp8(8, block_size, d, ScaleFormat::Ue8m0, &dev)?;
    let keys = Tensor::randn(0f32, 1.0, (40, d), &dev)?; // 40 tokens' index keys
    let slots = Tensor::arange(16i64, 56, &dev)?; // tokens 0..40 in blocks 1, 2, 3
    let conv = Fp8Conversion::default(); // nearest even, saturating
    index_cache_append(&cache, &keys, &slots, conv, Some(Backend::Reference))?;
    let q = Tensor::randn(0f32, 1.0, (t, h, d), &dev)?.to_dtype(DType::BF16)?;
    let weights = Tensor::randn(0f32, 1.0, (t, h), &dev)?;
    let block_table = Tensor::new(&[[1i32, 2, 3], [1, 2, -1]], &dev)?; // -1: never reached
    let context_lens = Tensor::new(&[40i32, 20], &dev)?;
    let mut params = LightningIndexerParams::new(32);
    params.return_scores = true;
    let (indices, scores) = lightning_indexer(
        &q,
        &weights,
        &cache,
        &block_table,
        &context_lens,
        &params,
        Some(Backend::Reference),
    )?;
    assert_eq!(indices.dims(), &[t, 32]);
    assert_eq!(indices.dtype(), DType::I32);
    assert_eq!(indices.to_vec2::<i32>()?[1][20..], [-1; 12]); // row 1 sees 20 positions
    assert!(scores.is_some());
    Ok(())
}

/// Every ```rust block of docs/ops.md appears, line by line and in order, in this file.
#[test]
fn docs_show_these_snippets() {
    let doc = include_str!("../../../docs/ops.md");
    let me = include_str!("snippets.rs");
    let mut blocks = 0;
    let mut rest = doc;
    while let Some(start) = rest.find("```rust\n") {
        let body = &rest[start + 8..];
        let end = body
            .find("```")
            .expect("an unterminated ```rust block in docs/ops.md");
        let mut pos = 0;
        for line in body[..end].lines().map(str::trim).filter(|l| !l.is_empty()) {
            let found = me[pos..].find(line).unwrap_or_else(|| {
                panic!("docs/ops.md snippet line not in tests/ops/snippets.rs (in order): {line}")
            });
            pos += found + line.len();
        }
        blocks += 1;
        rest = &body[end + 3..];
    }
    assert_eq!(blocks, 5, "docs/ops.md should show one snippet per op");
}
