//! The decode demo's model (`tileops-models`, the pinned tiny default) on the Reference backend
//! and on TileSim, side by side: one group that generates 8 greedy tokens for a batch of 4
//! prompts (22, 6, 42 and 16 tokens; prefill included, one warm-up generation first).
//!
//! `cargo bench --bench deepseek_decode` (about a minute); quote Reference time / TileSim time.

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use std::time::Duration;
use tileops::ops::Backend;
use tileops_models::deepseek::config::Config;
use tileops_models::engine::{Engine, Sampling};
use tileops_models::weights::Weights;

fn prompts() -> Vec<Vec<u32>> {
    [22u32, 6, 42, 16]
        .iter()
        .map(|&n| (0..n).map(|i| (i * 37 + n) % 589).collect())
        .collect()
}

fn bench(c: &mut Criterion) {
    let cfg = Config::default();
    let Ok(w) = Weights::generate(&cfg, 0) else {
        eprintln!("weights could not be generated");
        return;
    };
    let p = prompts();
    let mut g = c.benchmark_group("deepseek_decode_generate_8");
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    for backend in [Backend::Reference, Backend::TileSim] {
        let Ok(mut e) = Engine::new(&cfg, &w, backend, 128, 16) else {
            eprintln!("{} engine could not be built", backend.name());
            continue;
        };
        if let Err(err) = e.warm_up(&p) {
            eprintln!("{}: {err}", backend.name());
            continue;
        }
        g.bench_function(backend.name(), |b| {
            b.iter(|| black_box(e.generate(&p, 8, &Sampling::Greedy, |_, _| {}).is_ok()))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
