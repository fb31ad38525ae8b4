//! Replays the first 20 training steps of the shipped checkpoint's run and matches the losses
//! its training log recorded (models/checkpoints/tiny/train_log.json) to 1e-5, at the thread
//! count the run used.

use std::path::Path;
use tileops_models::tokenizer::Tokenizer;
use tileops_models::train::batches::RunData;
use tileops_models::train::{TrainConfig, Trainer};

#[test]
fn the_first_20_training_steps_replay_the_logged_losses() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("checkpoints/tiny");
    let text = std::fs::read_to_string(dir.join("train_log.json")).expect("train_log.json");
    let log: serde_json::Value = serde_json::from_str(&text).expect("json");
    let threads = log["threads"].as_u64().expect("threads") as usize;
    // Before any candle op starts the thread pool (this binary holds this one test only).
    std::env::set_var("RAYON_NUM_THREADS", threads.to_string());
    let cfg: TrainConfig = serde_json::from_value(log["config"].clone()).expect("config");
    let want: Vec<f64> = log["first_losses"]
        .as_array()
        .expect("first_losses")
        .iter()
        .map(|v| v.as_f64().expect("loss"))
        .collect();
    assert_eq!(want.len(), 20);
    let tok = Tokenizer::train_generated().expect("tokenizer");
    let data = RunData::new(&tok, &cfg).expect("data");
    let mut tr = Trainer::new(cfg.clone(), threads).expect("trainer");
    for (step, want) in want.iter().enumerate() {
        let (batch, _) = data.batch(&cfg, step as u64).expect("batch");
        let got = tr.step(&batch).expect("step").lm;
        assert!(
            (got - want).abs() <= 1e-5,
            "step {step}: loss {got} vs logged {want}"
        );
    }
}
