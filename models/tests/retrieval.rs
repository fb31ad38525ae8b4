//! The retrieval evaluation's pieces on small random-weight models: questions answered on
//! forks of one prefilled context equal separate greedy generations, the report's selections
//! (random positions, every position) read what they say, the held-out cases point at their
//! codes, and the indexer's weights can be swapped from a file.

use tileops_models::deepseek::config::Config;
use tileops_models::deepseek::model::Selection;
use tileops_models::engine::{Engine, Sampling};
use tileops_models::tokenizer::Tokenizer;
use tileops_models::weights::{Rng, Weights};
use tileops_ops::Backend;

fn small() -> Config {
    Config {
        n_layers: 2,
        index_topk: 8,
        max_seq_len: 96,
        ..Config::default()
    }
}

fn tokens(rng: &mut Rng, n: usize, vocab: usize) -> Vec<u32> {
    (0..n)
        .map(|_| (rng.next_u64() % vocab as u64) as u32)
        .collect()
}

/// Each question answered on a fork of the prefilled context gives the tokens a separate
/// greedy generation of context + question gives, on both backends, and the pool is whole
/// afterwards.
#[test]
fn answers_on_forks_equal_separate_generations() {
    let cfg = small();
    let w = Weights::generate(&cfg, 5).unwrap();
    let mut rng = Rng(11);
    let context = tokens(&mut rng, 37, cfg.vocab_size);
    let questions: Vec<Vec<u32>> = [5, 9, 1]
        .iter()
        .map(|&n| tokens(&mut rng, n, cfg.vocab_size))
        .collect();
    for backend in [Backend::Reference, Backend::TileSim] {
        let mut e = Engine::new(&cfg, &w, backend, 64, 8).unwrap();
        let free = e.cache.free_blocks();
        let a = e.answer_questions(&context, &questions, 4, &[]).unwrap();
        assert_eq!(e.cache.free_blocks(), free, "{backend:?}: blocks leaked");
        assert_eq!(a.tokens.len(), 3);
        for (q, got) in questions.iter().zip(&a.tokens) {
            let whole: Vec<u32> = context.iter().chain(q).copied().collect();
            let g = e
                .generate(&[whole], 4, &Sampling::Greedy, |_, _| {})
                .unwrap();
            assert_eq!(got, &g.tokens[0], "{backend:?}");
        }
        // Every layer's selection of each question's last row is its causal top-k.
        for sel in &a.selected {
            assert_eq!(sel.len(), cfg.n_layers);
            for l in sel {
                assert_eq!(l.len(), cfg.index_topk);
                assert!(l.iter().all(|&p| p >= 0));
            }
        }
        // A stop token ends an answer and is left out.
        let first = a.tokens[0][0];
        let s = e
            .answer_questions(&context, &questions[..1], 4, &[first])
            .unwrap();
        assert!(s.tokens[0].is_empty());
        // Bad input is an error that leaves the pool whole.
        assert!(e.answer_questions(&context, &[], 4, &[]).is_err());
        let err = e.answer_questions(&[], &questions, 4, &[]).unwrap_err();
        assert!(err.to_string().contains("context is empty"), "{err}");
        assert!(e.answer_questions(&context, &[vec![]], 4, &[]).is_err());
        let long = vec![1u32; cfg.max_seq_len];
        assert!(e.answer_questions(&long, &questions, 4, &[]).is_err());
        assert!(e
            .answer_questions(&context, &[vec![cfg.vocab_size as u32]], 4, &[])
            .is_err());
        assert_eq!(e.cache.free_blocks(), free);
    }
}

/// Random selection reads `index_topk` distinct visible positions, sorted; dense selection
/// reads every visible position; both differ from the indexer's choice on a long context.
#[test]
fn the_report_selections_read_what_they_say() {
    let cfg = small();
    let w = Weights::generate(&cfg, 6).unwrap();
    let mut rng = Rng(12);
    let context = tokens(&mut rng, 50, cfg.vocab_size);
    let q = vec![tokens(&mut rng, 3, cfg.vocab_size)];
    let mut e = Engine::new(&cfg, &w, Backend::Reference, 64, 8).unwrap();
    let last = (context.len() + 2) as i32;
    let indexer = e.answer_questions(&context, &q, 1, &[]).unwrap();
    e.model.selection = Selection::Random { seed: 3 };
    let random = e.answer_questions(&context, &q, 1, &[]).unwrap();
    let again = e.answer_questions(&context, &q, 1, &[]).unwrap();
    assert_eq!(random.selected, again.selected, "seeded: the same draw");
    for l in &random.selected[0] {
        assert_eq!(l.len(), cfg.index_topk);
        assert!(
            l.windows(2).all(|w| w[0] < w[1]),
            "sorted and distinct: {l:?}"
        );
        assert!(l.iter().all(|&p| (0..=last).contains(&p)));
    }
    assert_ne!(random.selected, indexer.selected);
    assert_ne!(random.selected[0][0], random.selected[0][1], "per layer");
    e.model.selection = Selection::Dense;
    let dense = e.answer_questions(&context, &q, 1, &[]).unwrap();
    for l in &dense.selected[0] {
        assert_eq!(l, &(0..=last).collect::<Vec<i32>>());
    }
}

/// A held-out case's key positions are the tokens of its code.
#[test]
fn held_out_cases_point_at_their_codes() {
    let tok = Tokenizer::train_generated().unwrap();
    let cases = tileops_models::eval::held_out_cases(&tok, 7..10, 120, &[0.2, 0.7]).unwrap();
    assert_eq!(cases.len(), 3);
    for c in &cases {
        assert_eq!(c.questions.len(), 2);
        for q in &c.questions {
            let code = tok.decode(&c.context[q.key_positions.clone()]).unwrap();
            assert_eq!(code.trim(), q.answer);
            assert_eq!(q.answer.len(), 4);
        }
    }
}

/// `replace_indexer` swaps exactly the indexer's tensors, and refuses a file without them.
#[test]
fn the_indexer_can_be_replaced_from_a_file() {
    let cfg = small();
    let a = Weights::generate(&cfg, 1).unwrap();
    let b = Weights::generate(&cfg, 2).unwrap();
    let dir = std::env::temp_dir().join(format!("tileops-replace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("b.safetensors");
    b.save(&path).unwrap();
    let mut c = a.clone();
    c.replace_indexer(&cfg, &path).unwrap();
    let same = |x: &Weights, y: &Weights, n: &str| {
        let (p, q) = (x.get(n).unwrap(), y.get(n).unwrap());
        p.flatten_all().unwrap().to_vec1::<f32>().unwrap()
            == q.flatten_all().unwrap().to_vec1::<f32>().unwrap()
    };
    let mut swapped = 0;
    for name in a.dense.keys() {
        if name.contains(".indexer.") {
            assert!(same(&c, &b, name), "{name}");
            swapped += 1;
        } else {
            assert!(same(&c, &a, name), "{name}");
        }
    }
    assert!(swapped >= 4 * cfg.n_layers, "{swapped}");
    // A file of other tensors only: an error naming a missing indexer tensor.
    let mut other = Weights::default();
    other
        .dense
        .insert("embed.weight".into(), a.get("embed.weight").unwrap());
    let bad = dir.join("bad.safetensors");
    other.save(&bad).unwrap();
    let err = c.replace_indexer(&cfg, &bad).unwrap_err().to_string();
    assert!(err.contains("indexer") && err.contains("missing"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}
