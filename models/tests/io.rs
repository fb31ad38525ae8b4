//! Weight and tokenizer round trips, and the loader's errors.

use candle_core::{Device, Tensor};
use tileops_models::deepseek::config::Config;
use tileops_models::tokenizer::{Tokenizer, TokenizerError};
use tileops_models::weights::{specs, WeightError, Weights};

fn small() -> Config {
    Config {
        n_layers: 2,
        ..Config::default()
    }
}

fn tmp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("tileops-models-{}-{name}", std::process::id()))
}

fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
    (a - b)
        .unwrap()
        .abs()
        .unwrap()
        .flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar()
        .unwrap()
}

#[test]
fn weights_round_trip_exactly() {
    let cfg = small();
    let w = Weights::generate(&cfg, 7).unwrap();
    assert_eq!(w.dense.len() + w.quant.len(), specs(&cfg).len());
    let path = tmp("round.safetensors");
    w.save(&path).unwrap();
    let back = Weights::load(&cfg, &path).unwrap();
    for (name, t) in &w.dense {
        assert_eq!(max_diff(t, &back.dense[name]), 0.0, "{name}");
    }
    for (name, q) in &w.quant {
        assert_eq!(q.data(), back.quant[name].data(), "{name}");
        assert_eq!(q.scale(), back.quant[name].scale(), "{name}");
    }
    // The same seed gives the same weights, another seed others.
    let again = Weights::generate(&cfg, 7).unwrap();
    let other = Weights::generate(&cfg, 8).unwrap();
    assert_eq!(
        max_diff(&w.dense["embed.weight"], &again.dense["embed.weight"]),
        0.0
    );
    assert!(max_diff(&w.dense["embed.weight"], &other.dense["embed.weight"]) > 0.0);
    std::fs::remove_file(&path).ok();
}

#[test]
fn loader_names_missing_and_misshapen_tensors() {
    let cfg = small();
    let mut w = Weights::generate(&cfg, 1).unwrap();
    let path = tmp("bad.safetensors");
    w.dense.remove("layers.1.attn.wq_a.weight");
    w.save(&path).unwrap();
    match Weights::load(&cfg, &path) {
        Err(WeightError::Missing(n)) => assert_eq!(n, "layers.1.attn.wq_a.weight"),
        other => panic!("expected Missing, got {other:?}"),
    }
    let wrong = Tensor::zeros((3, 5), candle_core::DType::F32, &Device::Cpu).unwrap();
    w.dense.insert("layers.1.attn.wq_a.weight".into(), wrong);
    w.save(&path).unwrap();
    let err = Weights::load(&cfg, &path).unwrap_err().to_string();
    assert!(
        err.contains("layers.1.attn.wq_a.weight") && err.contains("[3, 5]"),
        "{err}"
    );
    // A checkpoint for another shape is refused too (its first differing tensor named).
    let bigger = Config {
        dim: 128,
        ..small()
    };
    let err = Weights::load(&bigger, &path).unwrap_err().to_string();
    assert!(err.contains("embed.weight"), "{err}");
    // The indexer's k_norm is a LayerNorm: its bias is required and shaped [index_head_dim].
    let mut w = Weights::generate(&cfg, 1).unwrap();
    let bias = "layers.0.attn.indexer.k_norm.bias";
    let b = w.dense.remove(bias).unwrap();
    assert_eq!(b.dims(), [cfg.index_head_dim]);
    w.save(&path).unwrap();
    match Weights::load(&cfg, &path) {
        Err(WeightError::Missing(n)) => assert_eq!(n, bias),
        other => panic!("expected Missing, got {other:?}"),
    }
    let wrong = Tensor::zeros(
        cfg.index_head_dim + 1,
        candle_core::DType::F32,
        &Device::Cpu,
    )
    .unwrap();
    w.dense.insert(bias.into(), wrong);
    w.save(&path).unwrap();
    let err = Weights::load(&cfg, &path).unwrap_err().to_string();
    assert!(err.contains(bias) && err.contains("[65]"), "{err}");
    assert!(Weights::load(&cfg, &tmp("absent.safetensors")).is_err());
    std::fs::remove_file(&path).ok();
}

#[test]
fn tokenizer_trains_saves_and_loads_back() {
    let t = Tokenizer::train().unwrap();
    let path = tmp("tokenizer.json");
    t.save(&path).unwrap();
    let back = Tokenizer::from_file(&path).unwrap();
    assert_eq!(t.vocab_size(), back.vocab_size());
    assert!(t.vocab_size() > 256 && t.vocab_size() <= Config::default().vocab_size);
    let text = "The keeper lit the lamp and watched the ships, 42 of them!";
    let ids = back.encode(text).unwrap();
    assert_eq!(ids, t.encode(text).unwrap());
    assert!(ids.len() < text.len(), "merges shorten the text");
    assert_eq!(back.decode(&ids).unwrap(), text);
    back.check_fits(Config::default().vocab_size).unwrap();
    match back.check_fits(100) {
        Err(TokenizerError::TooLarge { found, max: 100 }) => assert_eq!(found, t.vocab_size()),
        other => panic!("expected TooLarge, got {other:?}"),
    }
    assert!(Tokenizer::from_file(&tmp("no-such-tokenizer.json")).is_err());
    std::fs::remove_file(&path).ok();
}
