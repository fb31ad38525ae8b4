//! A second opinion on `flash_attention`: candle-nn's own CPU flash attention
//! (`candle_nn::attention::flash_attn`, inputs `[B, S, H, D]`, output `[B, H, S, D]`, `Dv = D`)
//! against our TileSim kernel and our Reference, on the shapes both accept (causal only with
//! `Skv >= Sq`: candle-nn's `kv_offset = Skv - Sq` is the same bottom-right alignment).

use candle_core::{DType, Device, Tensor};
use candle_nn::attention::{flash_attn, AttnMask};
use tile_backend::sim::io::Rng;
use tileops_ops::{flash_attention, Backend, FlashAttentionParams};

/// `[b, h, s, d]` f32 values in [-1, 1) from `rng`.
fn tensor(rng: &mut Rng, shape: (usize, usize, usize, usize)) -> Tensor {
    let n = shape.0 * shape.1 * shape.2 * shape.3;
    let v: Vec<f32> = (0..n).map(|_| 2.0 * rng.unit() as f32 - 1.0).collect();
    Tensor::from_vec(v, shape, &Device::Cpu).expect("tensor")
}

/// Largest |a - b| over two tensors of one shape, in f32.
fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
    assert_eq!(a.dims(), b.dims());
    let a: Vec<f32> = a
        .to_dtype(DType::F32)
        .and_then(|t| t.flatten_all())
        .and_then(|t| t.to_vec1())
        .expect("a");
    let b: Vec<f32> = b
        .to_dtype(DType::F32)
        .and_then(|t| t.flatten_all())
        .and_then(|t| t.to_vec1())
        .expect("b");
    a.iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// candle-nn's flash attention of our `[B, H, S, D]` tensors, back in `[B, H, Sq, D]`.
fn candle_nn_flash(q: &Tensor, k: &Tensor, v: &Tensor, scale: f32, causal: bool) -> Tensor {
    let bshd = |t: &Tensor| {
        t.transpose(1, 2)
            .and_then(|t| t.contiguous())
            .expect("[B, S, H, D]")
    };
    let (sq, skv) = (q.dims()[2], k.dims()[2]);
    let mask = if causal {
        AttnMask::causal_with_offset(skv - sq)
    } else {
        AttnMask::None
    };
    let out = match q.dtype() {
        DType::F16 => {
            flash_attn::<half::f16>(&bshd(q), &bshd(k), &bshd(v), scale, mask, None, None)
        }
        _ => flash_attn::<f32>(&bshd(q), &bshd(k), &bshd(v), scale, mask, None, None),
    };
    out.expect("candle-nn flash_attn")
}

#[test]
fn tilesim_and_reference_agree_with_candle_nn_flash_attention() {
    let mut rng = Rng::new(19);
    // (B, H, Hkv, Sq, Skv, D, causal): decode-like, square, longer context, GQA 4, D 128.
    let cases = [
        (1, 4, 4, 1, 70, 64, false),
        (1, 4, 4, 1, 70, 64, true),
        (2, 4, 1, 33, 33, 64, true),
        (1, 8, 2, 17, 100, 128, true),
        (1, 2, 2, 100, 100, 128, false),
    ];
    for (b, h, hkv, sq, skv, d, causal) in cases {
        let q = tensor(&mut rng, (b, h, sq, d));
        let k = tensor(&mut rng, (b, hkv, skv, d));
        let v = tensor(&mut rng, (b, hkv, skv, d));
        let scale = 1.0 / (d as f32).sqrt();
        let params = FlashAttentionParams::new(scale, causal);
        for (dtype, tol) in [(DType::F32, 2e-5f32), (DType::F16, 4e-3)] {
            let cast = |t: &Tensor| t.to_dtype(dtype).expect("cast");
            let (q, k, v) = (cast(&q), cast(&k), cast(&v));
            // candle-nn repeats nothing for GQA: it takes Hkv < H as we do.
            let theirs = candle_nn_flash(&q, &k, &v, scale, causal);
            for backend in [Backend::TileSim, Backend::Reference] {
                let (ours, _) = flash_attention(&q, &k, &v, &params, Some(backend)).expect("ours");
                let diff = max_diff(&ours, &theirs);
                assert!(
                    diff <= tol,
                    "{backend:?} {dtype:?} B {b} H {h} Hkv {hkv} Sq {sq} Skv {skv} D {d} causal {causal}: max |ours - candle-nn| = {diff}"
                );
            }
        }
    }
}
