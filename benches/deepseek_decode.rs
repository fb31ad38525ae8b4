//! The decode demo's model (`tileops-models`, the pinned tiny default) on the Reference backend
//! and on TileSim, side by side, for a batch of 4 prompts (22, 6, 42 and 16 tokens), one warm-up
//! generation first:
//!
//! - `deepseek_decode_generate_8`: 8 greedy tokens, prefill included (one forward pass over
//!   the prompts, then 7 decode steps);
//! - `deepseek_decode_steps_16`: decode only, 16 decode steps (64 tokens) after a prefill that
//!   runs outside the timed part (criterion's `iter_custom` sums the engine's own decode
//!   timers, so the prefill, the sampling and the freeing of the sequences are not counted).
//!   Throughput is decode tokens/s;
//! - `deepseek_decode_sparse_attention_call`: the decode step's `sparse_paged_attention` call of
//!   layer 0 as the warm-up left it (B = 4, H = 16, Dqk = 192, v_dim = 128, top-k 64), alone
//!   in a loop: the op's own cost at the demo's shape, outside the model.
//!
//! `cargo bench --workspace --bench deepseek_decode` (a minute or two); quote Reference time /
//! TileSim time.
//!
//! candle reads the host's CPU count for every matmul unless `RAYON_NUM_THREADS` is set (see
//! [`tileops_models::engine::pin_thread_count`]), which costs the Reference more than TileSim;
//! the bench pins it, as the demo does.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;
use std::time::Duration;
use tileops::ops::Backend;
use tileops_models::deepseek::config::Config;
use tileops_models::engine::{pin_thread_count, Engine, Sampling};
use tileops_models::weights::Weights;

/// Decode steps timed per iteration of the decode-only group.
const DECODE_STEPS: usize = 16;

fn prompts() -> Vec<Vec<u32>> {
    [22u32, 6, 42, 16]
        .iter()
        .map(|&n| (0..n).map(|i| (i * 37 + n) % 589).collect())
        .collect()
}

/// A warmed-up engine per backend (the ones that could be built).
fn engines(cfg: &Config, w: &Weights, p: &[Vec<u32>]) -> Vec<(Backend, Engine)> {
    let mut v = Vec::new();
    for backend in [Backend::Reference, Backend::TileSim] {
        let mut e = match Engine::new(cfg, w, backend, 128, 16) {
            Ok(e) => e,
            Err(err) => {
                eprintln!("{} engine could not be built: {err}", backend.name());
                continue;
            }
        };
        if let Err(err) = e.warm_up(p) {
            eprintln!("{}: {err}", backend.name());
            continue;
        }
        v.push((backend, e));
    }
    v
}

fn bench(c: &mut Criterion) {
    pin_thread_count();
    let cfg = Config::default();
    let Ok(w) = Weights::generate(&cfg, 0) else {
        eprintln!("weights could not be generated");
        return;
    };
    let p = prompts();
    let mut engines = engines(&cfg, &w, &p);

    let mut g = c.benchmark_group("deepseek_decode_generate_8");
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    for (backend, e) in &mut engines {
        g.bench_function(backend.name(), |b| {
            b.iter(|| black_box(e.generate(&p, 8, &Sampling::Greedy, |_, _| {}).is_ok()))
        });
    }
    g.finish();

    let mut g = c.benchmark_group("deepseek_decode_steps_16");
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    g.throughput(Throughput::Elements((DECODE_STEPS * p.len()) as u64));
    for (backend, e) in &mut engines {
        g.bench_function(backend.name(), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    // DECODE_STEPS + 1 tokens: the first comes from the prefill's logits.
                    match e.generate(&p, DECODE_STEPS + 1, &Sampling::Greedy, |_, _| {}) {
                        Ok(g) => total += g.first_decode_time + g.decode_time,
                        Err(err) => eprintln!("{}: {err}", backend.name()),
                    }
                }
                total
            })
        });
    }
    g.finish();

    // The same call (the Reference engine's; both engines hold the same cache contents) on
    // each backend.
    let Some(call) = engines
        .first()
        .and_then(|(_, e)| e.model.last_attention.clone())
    else {
        return;
    };
    let mut g = c.benchmark_group("deepseek_decode_sparse_attention_call");
    g.sample_size(20).measurement_time(Duration::from_secs(5));
    for (backend, _) in &engines {
        let backend = *backend;
        g.bench_function(backend.name(), |b| {
            b.iter(|| black_box(call.run(backend).is_ok()))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
