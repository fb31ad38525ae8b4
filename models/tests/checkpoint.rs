//! The shipped trained checkpoint (models/checkpoints/tiny/) loads through the existing loader
//! and its tokenizer, and the ops model (Reference) gives the training forward's logits on it.

use candle_core::DType;
use std::path::Path;
use tileops_models::deepseek::config::Config;
use tileops_models::deepseek::model::{Batch, Model, SeqRows};
use tileops_models::tokenizer::Tokenizer;
use tileops_models::train::model::{Mode, TrainModel};
use tileops_models::weights::Weights;
use tileops_ops::Backend;

#[test]
fn the_shipped_checkpoint_loads_and_the_ops_model_matches_the_training_forward() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("checkpoints/tiny");
    let cfg = Config::from_file(&dir.join("config.json")).expect("config");
    assert!(cfg.yarn() && cfg.index_head_dim > cfg.qk_rope_head_dim);
    let w = Weights::load(&cfg, &dir.join("model.safetensors")).expect("weights");
    let tok = Tokenizer::from_file(&dir.join("tokenizer.json")).expect("tokenizer");
    tok.check_fits(cfg.vocab_size).expect("fits");
    let text = tileops_models::data::grammar_text(4242, 60);
    let mut ids = tok.encode(&text).expect("encode");
    ids.truncate(80);
    assert!(ids.len() > cfg.index_topk, "the prompt must pass the top-k");
    let t = ids.len();
    let bs = 16;
    let nb = t.div_ceil(bs);
    let mut model = Model::new(&cfg, &w, nb, bs).expect("ops model");
    model.dense_prefill = false;
    let slots: Vec<i64> = (0..t as i64).collect();
    let batch = Batch {
        tokens: ids.clone(),
        positions: (0..t).collect(),
        slots: slots.clone(),
        seqs: vec![SeqRows {
            table: (0..nb as u32).collect(),
            slots,
            first_row: 0,
            rows: t,
        }],
    };
    let rows: Vec<usize> = (0..t).collect();
    let ops = model
        .forward(&batch, &rows, Backend::Reference)
        .expect("forward");
    let ops: Vec<f32> = ops.flatten_all().expect("f").to_vec1().expect("v");
    let train = TrainModel::from_weights(&cfg, &w, DType::F32).expect("train model");
    let f = train.forward(&[ids], Mode::Sparse).expect("train forward");
    let tr: Vec<f32> = f.logits.flatten_all().expect("f").to_vec1().expect("v");
    let scale = tr.iter().fold(0f32, |m, v| m.max(v.abs()));
    let diff = tr
        .iter()
        .zip(&ops)
        .fold(0f32, |m, (a, b)| m.max((a - b).abs()))
        / scale;
    assert!(diff < 2e-2, "max |diff| / max |logit| = {diff}");
}
