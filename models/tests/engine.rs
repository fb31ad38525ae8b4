//! The engine's bad inputs, its cache bookkeeping and seeded sampling.

use tileops_models::deepseek::config::Config;
use tileops_models::engine::{argmax, check_pool, check_request, sample_top_p, Engine, Sampling};
use tileops_models::weights::Weights;
use tileops_ops::Backend;

fn engine() -> Engine {
    let cfg = Config {
        n_layers: 2,
        max_seq_len: 32,
        ..Config::default()
    };
    let w = Weights::generate(&cfg, 2).unwrap();
    Engine::new(&cfg, &w, Backend::Reference, 8, 8).unwrap()
}

#[test]
fn bad_requests_are_errors_and_leave_the_pool_whole() {
    let mut e = engine();
    let none = |_: usize, _: u32| {};
    let err = e
        .generate(&[vec![]], 4, &Sampling::Greedy, none)
        .map(|_| ())
        .unwrap_err();
    assert!(err.to_string().contains("empty"), "{err}");
    let err = e
        .generate(&[vec![1; 30]], 4, &Sampling::Greedy, none)
        .map(|_| ())
        .unwrap_err();
    assert!(err.to_string().contains("max_seq_len"), "{err}");
    let err = e
        .generate(&[vec![5000]], 2, &Sampling::Greedy, none)
        .map(|_| ())
        .unwrap_err();
    assert!(err.to_string().contains("vocabulary"), "{err}");
    // Five sequences of 20 tokens need 15 blocks of 8; the pool has 8.
    let err = e
        .generate(&vec![vec![1; 16]; 5], 4, &Sampling::Greedy, none)
        .map(|_| ())
        .unwrap_err();
    assert!(err.to_string().contains("out of KV-cache blocks"), "{err}");
    assert_eq!(e.cache.free_blocks(), e.cache.num_blocks());
    for (temperature, top_p) in [(0.0, 0.9), (f32::NAN, 0.9), (1.0, 0.0), (1.0, 1.5)] {
        let s = Sampling::TopP {
            temperature,
            top_p,
            seed: 1,
        };
        let err = e.generate(&[vec![1]], 2, &s, none).map(|_| ()).unwrap_err();
        assert!(err.to_string().contains("sampling needs"), "{err}");
    }
    let err = e
        .generate(&[vec![1]], 2, &Sampling::Forced(vec![vec![1]]), none)
        .map(|_| ())
        .unwrap_err();
    assert!(err.to_string().contains("forced"), "{err}");
    let g = e
        .generate(&[vec![1, 2, 3]], 3, &Sampling::Greedy, none)
        .unwrap();
    assert_eq!(g.tokens[0].len(), 3);
    assert_eq!(e.cache.free_blocks(), e.cache.num_blocks());
}

#[test]
fn seeded_sampling_repeats_and_streams_every_token() {
    let mut e = engine();
    let s = Sampling::TopP {
        temperature: 1.0,
        top_p: 0.9,
        seed: 4,
    };
    let mut streamed = Vec::new();
    let a = e
        .generate(&[vec![3, 4, 5], vec![9]], 6, &s, |i, t| {
            streamed.push((i, t))
        })
        .unwrap();
    let b = e
        .generate(&[vec![3, 4, 5], vec![9]], 6, &s, |_, _| {})
        .unwrap();
    assert_eq!(a.tokens, b.tokens);
    assert_eq!(streamed.len(), 12);
    assert_eq!(
        streamed
            .iter()
            .filter(|x| x.0 == 1)
            .map(|x| x.1)
            .collect::<Vec<_>>(),
        a.tokens[1]
    );
    // A tiny nucleus keeps only the best token; a draw picks by mass.
    let l = [0.1, 3.0, 2.9, -1.0];
    assert_eq!(sample_top_p(&l, 1.0, 1e-6, 0.99).unwrap(), argmax(&l));
    assert_eq!(sample_top_p(&l, 1.0, 1.0, 0.0).unwrap(), 1);
    assert_eq!(sample_top_p(&l, 1.0, 1.0, 0.999).unwrap(), 3);
}

/// `prompt.len() + max_new` is checked: a huge `max_new` used to wrap past the length check
/// (release) or panic (overflow checks) and decode past `max_seq_len`.
#[test]
fn huge_lengths_and_pools_are_errors_that_leave_the_pool_whole() {
    let mut e = engine();
    let none = |_: usize, _: u32| {};
    for max_new in [usize::MAX, usize::MAX - 1, usize::MAX - 30, 1 << 40, 32] {
        let err = e
            .generate(&[vec![1, 2]], max_new, &Sampling::Greedy, none)
            .map(|_| ())
            .unwrap_err();
        assert!(
            err.to_string().contains("max_seq_len 32"),
            "{max_new}: {err}"
        );
        assert_eq!(e.cache.free_blocks(), e.cache.num_blocks());
    }
    // The warm-up checks its prompts too (it prefills and decodes one token).
    for prompts in [vec![vec![]], vec![vec![1; 32]], vec![vec![9999]], vec![]] {
        assert!(e.warm_up(&prompts).is_err(), "{prompts:?}");
        assert_eq!(e.cache.free_blocks(), e.cache.num_blocks());
    }
    // Forced tokens outside the vocabulary.
    let err = e
        .generate(&[vec![1]], 1, &Sampling::Forced(vec![vec![4096]]), none)
        .map(|_| ())
        .unwrap_err();
    assert!(err.to_string().contains("vocabulary"), "{err}");
    // A pool past the limits is refused before any cache tensor is made.
    let cfg = Config {
        n_layers: 2,
        ..Config::default()
    };
    let w = Weights::generate(&cfg, 2).unwrap();
    for (nb, bs) in [(usize::MAX, 16), (1 << 20, 1 << 12), (1 << 24, 16), (0, 16)] {
        assert!(
            Engine::new(&cfg, &w, Backend::Reference, nb, bs).is_err(),
            "{nb} x {bs}"
        );
        assert!(check_pool(&cfg, nb, bs).is_err());
    }
    assert!(check_request(&cfg, &[vec![1]], usize::MAX, &Sampling::Greedy).is_err());
    check_request(&cfg, &[vec![1]], cfg.max_seq_len - 1, &Sampling::Greedy).unwrap();
}

#[test]
fn sampling_refuses_what_it_cannot_sample() {
    let l = [0.1f32, 3.0, 2.9];
    for (logits, t, p, u) in [
        (&[][..], 1.0, 0.9, 0.5),
        (&[f32::NAN, 1.0][..], 1.0, 0.9, 0.5),
        (&[f32::INFINITY][..], 1.0, 0.9, 0.5),
        (&l[..], 0.0, 0.9, 0.5),
        (&l[..], f32::INFINITY, 0.9, 0.5),
        (&l[..], 1.0, 0.0, 0.5),
        (&l[..], 1.0, 1.5, 0.5),
        (&l[..], 1.0, 0.9, 1.0),
        (&l[..], 1.0, 0.9, -0.1),
    ] {
        assert!(
            sample_top_p(logits, t, p, u).is_err(),
            "{logits:?} {t} {p} {u}"
        );
    }
    // Extreme but finite logits sample a real index.
    let big = [f32::MAX, -f32::MAX, 0.0];
    assert_eq!(sample_top_p(&big, 1e-30, 1.0, 0.7).unwrap(), 0);
}
