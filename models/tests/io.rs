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
        Err(WeightError::Missing { name, path: p }) => {
            assert_eq!(name, "layers.1.attn.wq_a.weight");
            assert_eq!(p, path.display().to_string());
        }
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
        Err(WeightError::Missing { name, .. }) => assert_eq!(name, bias),
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
        Err(TokenizerError::TooLarge { id, max: 100, .. }) => {
            assert_eq!(id as usize, t.vocab_size() - 1)
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
    assert!(Tokenizer::from_file(&tmp("no-such-tokenizer.json")).is_err());
    std::fs::remove_file(&path).ok();
}

/// Every tensor of a safetensors file: name, dtype, shape, bytes.
type Raw = Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)>;

fn read_raw(path: &std::path::Path) -> Raw {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut out: Raw = st
        .tensors()
        .into_iter()
        .map(|(n, v)| (n, v.dtype(), v.shape().to_vec(), v.data().to_vec()))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn write_raw(path: &std::path::Path, raw: &Raw) {
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = raw
        .iter()
        .map(|(n, d, s, b)| {
            (
                n.clone(),
                safetensors::tensor::TensorView::new(*d, s.clone(), b).unwrap(),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, None, path).unwrap();
}

/// A bad value inside a weight file is an error naming the tensor and the file: a NaN or an
/// inf, a zero, negative or NaN `_scale`, an empty expert, a wrong dtype, a truncated file.
#[test]
fn loader_errors_name_the_tensor_and_the_file() {
    let cfg = small();
    let good = tmp("good-values.safetensors");
    Weights::generate(&cfg, 3).unwrap().save(&good).unwrap();
    let raw = read_raw(&good);
    let expert = "layers.1.ffn.experts.3.w2.weight";
    let scale = format!("{expert}_scale");
    let dense = "layers.0.attn.wkv_a.weight";
    let f32_at = |v: f32, i: usize| {
        move |t: &mut (String, safetensors::Dtype, Vec<usize>, Vec<u8>)| {
            t.3[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes())
        }
    };
    type Edit = Box<dyn Fn(&mut (String, safetensors::Dtype, Vec<usize>, Vec<u8>))>;
    let cases: Vec<(&str, Edit, &str)> = vec![
        (dense, Box::new(f32_at(f32::NAN, 5)), "element 5 is NaN"),
        (
            dense,
            Box::new(f32_at(f32::INFINITY, 0)),
            "element 0 is inf",
        ),
        (&scale, Box::new(f32_at(0.0, 2)), "scale 2 (row 2 of"),
        (
            &scale,
            Box::new(f32_at(-0.5, 0)),
            "is -0.5; scales must be positive",
        ),
        (&scale, Box::new(f32_at(f32::NAN, 1)), "element 1 is NaN"),
        // A scale that the Fixpipe's 19 bits round to 0.
        (
            &scale,
            Box::new(f32_at(1e-45, 0)),
            "must be finite and positive",
        ),
        (
            expert,
            Box::new(|t| {
                t.2 = vec![0, t.2[1]];
                t.3.clear();
            }),
            "is I8 [0, 128], but the config needs I8 [256, 128]",
        ),
        (
            dense,
            Box::new(|t| {
                t.1 = safetensors::Dtype::F16;
                t.3.truncate(t.3.len() / 2);
            }),
            "is F16",
        ),
        (
            &scale,
            Box::new(|t| {
                t.1 = safetensors::Dtype::I32;
            }),
            "is I32",
        ),
    ];
    let path = tmp("bad-values.safetensors");
    for (name, edit, frag) in &cases {
        let mut r = raw.clone();
        let t = r.iter_mut().find(|t| t.0 == *name).unwrap();
        edit(t);
        write_raw(&path, &r);
        let err = Weights::load(&cfg, &path).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(&format!("`{name}`"))
                && text.contains(&path.display().to_string())
                && text.contains(frag),
            "{name}: {text}"
        );
    }
    // A truncated file names the first tensor whose bytes are cut off.
    let bytes = std::fs::read(&good).unwrap();
    for keep in [bytes.len() - 1, bytes.len() / 2] {
        std::fs::write(&path, &bytes[..keep]).unwrap();
        let err = Weights::load(&cfg, &path).unwrap_err();
        match &err {
            WeightError::BadValue { name, path: p, msg } => {
                assert!(raw.iter().any(|t| t.0 == *name), "{err}");
                assert_eq!(*p, path.display().to_string());
                assert!(msg.contains("truncated"), "{err}");
            }
            other => panic!("expected BadValue naming a tensor, got {other:?}"),
        }
    }
    // Cut inside the header: only the file can be named.
    for keep in [0, 5, 20] {
        std::fs::write(&path, &bytes[..keep]).unwrap();
        let err = Weights::load(&cfg, &path).unwrap_err().to_string();
        assert!(err.contains(&path.display().to_string()), "{err}");
    }
    std::fs::remove_file(&path).ok();
    std::fs::remove_file(&good).ok();
}

/// `check_fits` checks the largest id (added tokens too), not the token count: a
/// tokenizer.json of three tokens with an id of 5000 does not fit a 1024-token model.
#[test]
fn check_fits_checks_the_largest_id_not_the_count() {
    let model = |vocab: &str, added: &str| {
        format!(
            r#"{{"version":"1.0","truncation":null,"padding":null,"added_tokens":[{added}],
            "normalizer":null,"pre_tokenizer":{{"type":"Whitespace"}},"post_processor":null,
            "decoder":null,"model":{{"type":"WordLevel","vocab":{{{vocab}}},"unk_token":"[UNK]"}}}}"#
        )
    };
    let added = r#"{"id":5000,"content":"<x>","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":true}"#;
    let path = tmp("sparse-ids-tokenizer.json");
    // The loader numbers an added token after the model's ids (the file's id is not kept), so
    // the added token of the second file is id 2: it must fit too.
    for (json, token, id) in [
        (model(r#""a":0,"[UNK]":1,"far":5000"#, ""), "far", 5000),
        (model(r#""a":0,"[UNK]":1"#, added), "<x>", 2),
    ] {
        std::fs::write(&path, json).unwrap();
        let t = Tokenizer::from_file(&path).unwrap();
        assert_eq!(t.vocab_size(), 3);
        for max in [id as usize, 2.min(id as usize)] {
            match t.check_fits(max) {
                Err(TokenizerError::TooLarge {
                    token: tok,
                    id: got,
                    max: m,
                }) => {
                    assert_eq!((tok.as_str(), got, m), (token, id, max))
                }
                other => panic!("expected TooLarge, got {other:?}"),
            }
        }
        t.check_fits(id as usize + 1).unwrap();
        if id == 5000 {
            // The old count check passed it for a 1024-token model.
            assert!(t.check_fits(1024).is_err());
        }
    }
    std::fs::remove_file(&path).ok();
}
