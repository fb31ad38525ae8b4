//! Tests of the data generator, its parser and the tokenizer trained on its text.

use super::*;
use crate::tokenizer::{Tokenizer, GENERATED_VOCAB, SPECIAL_TOKENS};
use proptest::prelude::*;
use std::sync::OnceLock;

/// Words of `text` that are names of `split`.
fn names_in(text: &str, split: Split) -> Vec<String> {
    text.split(|c: char| !c.is_alphabetic())
        .filter(|w| split.has_name(w))
        .map(String::from)
        .collect()
}

/// The words of `sentence` (speaker and final mark removed) shuffled into a new order,
/// re-capitalised like a sentence; `None` when no other order exists.
fn shuffled(sentence: &str, seed: u64) -> Option<String> {
    let body = match sentence.split_once(": ") {
        Some((speaker, rest))
            if Split::Train.has_name(speaker) || Split::Heldout.has_name(speaker) =>
        {
            rest
        }
        _ => sentence,
    };
    let mark = body.chars().last()?;
    let words: Vec<String> = body[..body.len() - mark.len_utf8()]
        .split_whitespace()
        .map(|w| {
            let named = Split::Train.has_name(w.trim_end_matches(',').trim_end_matches("'s"))
                || Split::Heldout.has_name(w.trim_end_matches(',').trim_end_matches("'s"));
            if named || w == "I" {
                w.to_string()
            } else {
                w.to_lowercase()
            }
        })
        .collect();
    let mut rng = rng::Rng::new(seed, 7);
    for _ in 0..20 {
        let mut s = words.clone();
        rng.shuffle(&mut s);
        if s != words {
            let mut out = s.join(" ");
            if let Some(first) = out.get(..1) {
                let upper = first.to_uppercase();
                out.replace_range(..1, &upper);
            }
            out.push(mark);
            return Some(out);
        }
    }
    None
}

#[test]
fn grammar_text_is_deterministic_per_seed() {
    assert_eq!(grammar_text(7, 500), grammar_text(7, 500));
    assert_ne!(grammar_text(7, 500), grammar_text(8, 500));
    assert_eq!(
        grammar_text_in(7, Split::Heldout, 200),
        grammar_text_in(7, Split::Heldout, 200)
    );
    let t = grammar_text(3, 1000);
    let words = t.split_whitespace().count();
    assert!((1000..1300).contains(&words), "{words} words");
}

#[test]
fn grammar_text_has_stories_dialogue_and_every_mark() {
    let t = grammar_text(11, 3000);
    assert!(t.contains("In the end,") || t.contains("After that,") || t.contains("smiled."));
    assert!(t.lines().any(|l| l
        .split_once(": ")
        .is_some_and(|(n, _)| Split::Train.has_name(n))));
    for mark in ['.', '?', '!'] {
        assert!(
            sentences(&t).iter().any(|s| s.ends_with(mark)),
            "no sentence ends with {mark}"
        );
    }
    let vocab: std::collections::HashSet<&str> = t
        .split(|c: char| !c.is_alphanumeric() && c != '\'')
        .filter(|w| !w.is_empty())
        .collect();
    assert!(vocab.len() > 250, "only {} distinct words", vocab.len());
}

#[test]
fn sentences_split_marks_lines_and_special_tokens() {
    let text = "Anna: Where is the cup?\nBen: It is here. Oh no! A\n\n<|user|>Why?<|assistant|>4821<|end|>";
    assert_eq!(
        sentences(text),
        [
            "Anna: Where is the cup?",
            "Ben: It is here.",
            "Oh no!",
            "A",
            "Why?",
            "4821"
        ]
    );
    assert!(sentences("").is_empty());
}

#[test]
fn accepts_hand_written_sentences_of_the_grammar() {
    for s in [
        "The cat runs.",
        "Anna and Ben played together every day.",
        "Where is the red ball?",
        "Yes, I do.",
        "The code of the blue door is 4821.",
        "What is the code of the blue door?",
        "Ben: It is under an old table.",
        "There was a little fox named Leo in the garden.",
        "One day, Thea found a shiny box near the river.",
        "What a funny owl!",
        "Please bring the cup!",
        "I do not know.",
    ] {
        assert!(accepts(s), "rejected {s:?}");
    }
}

#[test]
fn rejects_hand_written_word_salad() {
    for s in [
        "Dog the runs.",
        "The runs dog.",
        "The cat run.",
        "A apple is red.",
        "An cat sleeps.",
        "the cat runs.",
        "The cat runs",
        "Where is the cat.",
        "Cat the is where?",
        "The code of the blue door is 482.",
        "The Cat runs.",
        "Anna: ",
        "",
        "Runs quickly the ball happily cat.",
    ] {
        assert!(!accepts(s), "accepted {s:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Every sentence the generator emits parses, both splits, retrieval documents too.
    #[test]
    fn accepts_every_generated_sentence(seed in any::<u64>()) {
        let grammar = grammar_text(seed, 400);
        let held = grammar_text_in(seed, Split::Heldout, 200);
        let doc = retrieval_doc(seed, Split::Train, 200, 3);
        let questions: Vec<&str> = doc.questions.iter().map(|q| q.prompt.as_str()).collect();
        for s in sentences(&grammar).into_iter().chain(sentences(&held)).chain(sentences(&doc.context)).chain(questions) {
            prop_assert!(accepts(s), "rejected {:?} (seed {})", s, seed);
        }
    }

    /// Shuffling a sentence's words makes word salad the parser rejects (a shuffle can land
    /// on another grammatical order, "Ben sees Anna.", so the bar is 90% of sentences).
    #[test]
    fn rejects_shuffled_sentences(seed in any::<u64>()) {
        let t = grammar_text(seed, 600);
        let (mut tried, mut rejected) = (0, 0);
        for (i, s) in sentences(&t).into_iter().enumerate() {
            if s.split_whitespace().count() < 4 {
                continue;
            }
            if let Some(salad) = shuffled(s, seed ^ i as u64) {
                tried += 1;
                rejected += usize::from(!accepts(&salad));
            }
        }
        prop_assert!(tried >= 20, "only {} sentences tried", tried);
        prop_assert!(rejected * 10 >= tried * 9, "rejected {}/{} (seed {})", rejected, tried, seed);
    }

    /// Each key is stated once, its span holds the answer, the answer's code belongs to the
    /// split, and the questions are unique.
    #[test]
    fn key_span_points_at_the_answer(seed in any::<u64>(), held in any::<bool>(), n in 1usize..8) {
        let split = if held { Split::Heldout } else { Split::Train };
        let doc = retrieval_doc(seed, split, 300, n);
        prop_assert_eq!(doc.questions.len(), n);
        for q in &doc.questions {
            prop_assert_eq!(&doc.context[q.key_span.clone()], q.answer.as_str());
            prop_assert_eq!(doc.context.matches(q.answer.as_str()).count(), 1);
            let code: u32 = q.answer.parse().map_err(|e| TestCaseError::fail(format!("{e}")))?;
            prop_assert!(split.has_code(code));
            let key = &doc.context[..q.key_span.end];
            let sentence = &key[key.rfind(". ").or_else(|| key.rfind('\n')).map_or(0, |i| i + 1)..];
            let words: Vec<&str> = q.prompt.trim_end_matches('?').split(' ').collect();
            let (color, object) = (words[words.len() - 2], words[words.len() - 1]);
            prop_assert!(sentence.contains(&format!("{color} {object}")), "{:?} vs {:?}", sentence, q.prompt);
            prop_assert!(split.has_key(color, object));
        }
        let mut prompts: Vec<&str> = doc.questions.iter().map(|q| q.prompt.as_str()).collect();
        prompts.sort();
        prompts.dedup();
        prop_assert_eq!(prompts.len(), n);
    }
}

#[test]
fn train_and_heldout_are_disjoint() {
    assert_eq!(Split::Train.max_keys() + Split::Heldout.max_keys(), 12 * 12);
    assert!(Split::Heldout.max_keys() >= 16);
    let held: Vec<u32> = (1000..=9999)
        .filter(|&c| Split::Heldout.has_code(c))
        .collect();
    assert!(
        (1800..2700).contains(&held.len()),
        "{} held-out codes",
        held.len()
    );
    assert!(held.iter().all(|&c| !Split::Train.has_code(c)));
    for seed in 0..40 {
        let t = retrieval_doc(seed, Split::Train, 300, 4).text();
        let h = retrieval_doc(seed, Split::Heldout, 300, 4).text();
        assert!(names_in(&t, Split::Heldout).is_empty());
        assert!(
            names_in(&h, Split::Train).is_empty(),
            "{:?}",
            names_in(&h, Split::Train)
        );
        assert!(!names_in(&h, Split::Heldout).is_empty());
        assert!(names_in(&grammar_text(seed, 300), Split::Heldout).is_empty());
    }
    let corpus = tokenizer_corpus();
    assert!(names_in(&corpus, Split::Heldout).is_empty());
    let held_pairs: Vec<String> = (0..12 * 12)
        .map(|i| (lexicon::COLORS[i / 12], lexicon::KEY_OBJECTS[i % 12]))
        .filter(|(c, o)| Split::Heldout.has_key(c, o))
        .map(|(c, o)| format!("the {c} {o} "))
        .collect();
    assert!(held_pairs.iter().all(|p| !corpus.contains(p.as_str())));
}

#[test]
fn retrieval_doc_is_deterministic_and_reaches_length() {
    let a = retrieval_doc(5, Split::Heldout, 800, 4);
    assert_eq!(a, retrieval_doc(5, Split::Heldout, 800, 4));
    assert_ne!(a, retrieval_doc(6, Split::Heldout, 800, 4));
    assert!(a.context.split_whitespace().count() >= 800);
    let text = a.text();
    assert!(text.starts_with(&a.context));
    assert_eq!(text.matches(crate::tokenizer::ASSISTANT).count(), 4);
}

#[test]
fn retrieval_doc_at_places_the_key_at_its_depth() {
    let mut last = 0;
    for (i, depth) in [0.0, 0.25, 0.5, 0.75, 1.0].into_iter().enumerate() {
        let doc = retrieval_doc_at(9, Split::Heldout, 1000, depth);
        let q = &doc.questions[0];
        assert_eq!(&doc.context[q.key_span.clone()], q.answer);
        let before = doc.context[..q.key_span.start].split_whitespace().count() as f64;
        let total = doc.context.split_whitespace().count() as f64;
        assert!(
            (before / total - depth).abs() < 0.05,
            "depth {depth}: {}",
            before / total
        );
        assert!(i == 0 || q.key_span.start > last);
        last = q.key_span.start;
    }
    let end = retrieval_doc_at(9, Split::Heldout, 1000, 1.0);
    assert!(end
        .context
        .ends_with(&format!("{}.", end.questions[0].answer)));
    let spec = RetrievalSpec {
        seed: 1,
        split: Split::Train,
        approx_words: 500,
        depths: vec![0.9, 0.1],
    };
    let doc = retrieval_doc_with(&spec);
    assert!(doc.questions[0].key_span.start > doc.questions[1].key_span.start);
    assert_eq!(doc.questions[0].depth, 0.9);
}

#[test]
fn training_text_mixes_documents_between_special_tokens() {
    let t = training_text(1, 5000);
    assert_eq!(t, training_text(1, 5000));
    assert!(t.starts_with(crate::tokenizer::BOS) && t.ends_with(crate::tokenizer::EOS));
    let docs = t.matches(crate::tokenizer::BOS).count();
    assert_eq!(docs, t.matches(crate::tokenizer::EOS).count());
    let retrieval = t
        .split(crate::tokenizer::BOS)
        .filter(|d| d.contains(crate::tokenizer::USER))
        .count();
    assert!(retrieval > 0 && retrieval < docs, "{retrieval} of {docs}");
    for s in sentences(&t) {
        let is_answer = s.len() == 4 && s.bytes().all(|b| b.is_ascii_digit());
        assert!(is_answer || accepts(s), "rejected {s:?}");
    }
}

fn tokenizer() -> &'static Tokenizer {
    static TOK: OnceLock<Tokenizer> = OnceLock::new();
    TOK.get_or_init(|| Tokenizer::train_generated().unwrap())
}

#[test]
fn generated_tokenizer_has_specials_first_and_fits_the_target() {
    let t = tokenizer();
    assert!(
        (512..=GENERATED_VOCAB).contains(&t.vocab_size()),
        "{}",
        t.vocab_size()
    );
    let ids = t.special_ids().unwrap();
    assert_eq!(
        [ids.bos, ids.eos, ids.user, ids.assistant, ids.end],
        [0, 1, 2, 3, 4]
    );
    for (i, s) in SPECIAL_TOKENS.iter().enumerate() {
        assert_eq!(t.encode(s).unwrap(), [i as u32]);
    }
    let doc = retrieval_doc(3, Split::Train, 100, 1);
    let ids = t.encode(&format!("<|bos|>{}<|eos|>", doc.text())).unwrap();
    assert_eq!(ids.first(), Some(&0));
    assert_eq!(ids.last(), Some(&1));
    assert_eq!(ids.iter().filter(|&&i| i == 3).count(), 1);
    // A legacy tokenizer has no special tokens: an error, not a panic.
    assert!(Tokenizer::train().unwrap().special_ids().is_err());
}

#[test]
fn generated_tokenizer_splits_digits_and_round_trips() {
    let t = tokenizer();
    let text = training_text(4, 600);
    let ids = t.encode(&text).unwrap();
    assert_eq!(t.decode(&ids).unwrap(), text);
    let words = text.split_whitespace().count();
    assert!(
        ids.len() < words * 2,
        "{} tokens for {words} words",
        ids.len()
    );
    for &id in &ids {
        let piece = t.decode(&[id]).unwrap();
        if piece.chars().any(|c| c.is_ascii_digit()) {
            assert_eq!(piece.len(), 1, "token {piece:?} holds more than one digit");
        }
    }
    let again = Tokenizer::train_generated().unwrap();
    assert_eq!(
        again.encode(&text).unwrap(),
        ids,
        "training is not deterministic"
    );
    let path = std::env::temp_dir().join(format!("tileops-gen-tok-{}.json", std::process::id()));
    t.save(&path).unwrap();
    let back = Tokenizer::from_file(&path).unwrap();
    assert_eq!(back.special_ids().unwrap(), t.special_ids().unwrap());
    assert_eq!(back.encode(&text).unwrap(), ids);
    let _ = std::fs::remove_file(path);
}

#[test]
fn token_span_covers_the_code_digit_by_digit() {
    let t = tokenizer();
    for seed in 0..8 {
        let doc = retrieval_doc(seed, Split::Heldout, 400, 3);
        for q in &doc.questions {
            let span = t.token_span(&doc.context, q.key_span.clone()).unwrap();
            assert_eq!(span.len(), 4);
            let ids = t.encode(&doc.context).unwrap();
            assert_eq!(t.decode(&ids[span]).unwrap(), q.answer);
        }
    }
    assert!(t.token_span("abc", 10..12).is_err());
}

#[test]
fn stream_never_yields_half_a_character() {
    let t = tokenizer();
    let text = "Anna sang: Grüße, café 🙂 and 你好! The code is 4821.";
    let ids = t.encode(text).unwrap();
    let mut stream = t.stream(false);
    let (mut out, mut held) = (String::new(), 0);
    for &id in &ids {
        match stream.step(id).unwrap() {
            Some(chunk) => {
                assert!(!chunk.contains('\u{fffd}'), "half a character in {chunk:?}");
                out.push_str(&chunk);
            }
            None => held += 1,
        }
    }
    assert_eq!(out, text);
    assert!(
        held >= 3,
        "the 4-byte emoji should take several byte tokens, held {held}"
    );
    let special = t.encode("<|user|>Hi").unwrap();
    let mut skip = t.stream(true);
    let shown: String = special
        .iter()
        .filter_map(|&id| skip.step(id).unwrap())
        .collect();
    assert_eq!(shown, "Hi");
}

#[test]
fn mix_for_window_keeps_documents_inside_the_window() {
    let t = tokenizer();
    let sizes = [
        (256, None),
        (512, None),
        (1024, None),
        (256, Some(6)),
        (512, Some(6)),
    ];
    for (window, keys) in sizes {
        let mix = keys.map_or_else(
            || Mix::for_window(window),
            |k| Mix::for_window_keys(window, k),
        );
        let docs: Vec<String> = (0..4).flat_map(|s| training_docs(s, 6000, &mix)).collect();
        assert!(docs.iter().any(|d| d.contains(crate::tokenizer::USER)));
        for d in &docs {
            let n = t.encode(&format!("<|bos|>{d}<|eos|>")).unwrap().len();
            assert!(
                n <= window,
                "a {n}-token document for a {window}-token window"
            );
        }
        let docs = training_docs(3, 6000, &mix);
        let joined: String = docs.iter().map(|d| format!("<|bos|>{d}<|eos|>")).collect();
        assert_eq!(joined, training_text_with(3, 6000, &mix));
    }
}

/// FNV-1a, 64 bits: a hash that stays the same across Rust versions.
fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The shipped checkpoint was trained on these texts (its replay test needs them bit for bit):
/// a change to the generator must be deliberate, with a retrained model and new hashes.
#[test]
fn training_stream_and_tokenizer_corpus_are_frozen() {
    let got = [fnv(&training_text(1, 20_000)), fnv(&tokenizer_corpus())];
    assert_eq!(
        got,
        [0x14f3_7d33_d285_1b15, 0x0c73_dc11_5581_19d3],
        "got {:#018x} {:#018x}",
        got[0],
        got[1]
    );
}

#[test]
fn parser_checks_agreement() {
    for (good, bad) in [
        ("They run.", "They runs."),
        ("I am happy.", "I is happy."),
        ("The cats are big.", "The cats is big."),
        ("There was a dog.", "There were a dog."),
        ("She does not run.", "She do not run."),
        ("Does Anna like the cake?", "Do Anna like the cake?"),
        ("Anna and Ben were tired.", "Anna and Ben was tired."),
        ("Where are my shoes?", "Where is my shoes?"),
        ("An old cat sleeps.", "A old cat sleeps."),
        ("Yes, I am.", "Yes, I is."),
        ("How tall the boys are!", "How tall the boys is!"),
    ] {
        assert!(accepts(good), "rejected {good:?}");
        assert!(!accepts(bad), "accepted {bad:?}");
    }
}

/// Every form of the grammar shows up in generated text (the generator is not stuck on a few).
#[test]
fn generator_uses_every_form() {
    let text: String = (0..30).map(|s| grammar_text(s, 1500) + "\n\n").collect();
    let starts = |p: &str| sentences(&text).iter().any(|s| s.starts_with(p));
    let has = |p: &str| text.contains(p);
    for p in [
        "Where is",
        "Where do",
        "Who ",
        "What does",
        "What is",
        "Is ",
        "Does ",
        "Did ",
    ] {
        assert!(starts(p), "no question starting {p:?}");
    }
    for p in [
        "There was",
        "There are",
        "Please ",
        "Yes, I do.",
        "No, I am not.",
        "Thank you!",
    ] {
        assert!(has(p), "no {p:?}");
    }
    for p in [
        " and ",
        ", but ",
        " because ",
        " not ",
        "'s ",
        " named ",
        "!\n",
    ] {
        assert!(has(p), "no {p:?}");
    }
    let keys: String = (0..40)
        .map(|s| retrieval_doc(s, Split::Train, 50, 3).text())
        .collect();
    for p in [
        "The code of the ",
        " has the code ",
        "What is the code of",
        "Which code opens",
    ] {
        assert!(keys.contains(p), "no {p:?}");
    }
}

#[test]
fn retrieval_doc_spreads_keys_and_caps_their_number() {
    for seed in 0..20 {
        let doc = retrieval_doc(seed, Split::Train, 600, 5);
        let mut depths: Vec<f64> = doc.questions.iter().map(|q| q.depth).collect();
        depths.sort_by(f64::total_cmp);
        for (i, d) in depths.iter().enumerate() {
            assert!(
                (i as f64 / 5.0..=(i + 1) as f64 / 5.0).contains(d),
                "{depths:?}"
            );
        }
    }
    let all = retrieval_doc(1, Split::Heldout, 300, 1000);
    assert_eq!(all.questions.len(), Split::Heldout.max_keys());
    assert!(retrieval_doc(1, Split::Train, 100, 0).questions.is_empty());
}

#[test]
fn training_text_never_states_a_heldout_code() {
    let t = training_text(2, 30_000);
    let codes: Vec<u32> = t
        .split(|c: char| !c.is_ascii_digit())
        .filter(|w| w.len() == 4)
        .filter_map(|w| w.parse().ok())
        .collect();
    assert!(codes.len() > 200, "{} codes", codes.len());
    assert!(codes.iter().all(|&c| Split::Train.has_code(c)));
}

proptest! {
    /// Model output is arbitrary text: splitting and parsing it never panics, and random
    /// words are not sentences (3-8 random words of 1-6 letters all being lexicon words in a
    /// grammatical order is far too unlikely to happen in 256 cases).
    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,80}", words in proptest::collection::vec("[a-z]{1,6}", 3..9)) {
        for s in sentences(&text) {
            let _ = accepts(s);
        }
        let mut salad = words.join(" ");
        salad.push('.');
        let upper = salad[..1].to_uppercase();
        salad.replace_range(..1, &upper);
        prop_assert!(!accepts(&salad), "{}", salad);
    }
}

#[test]
fn acceptance_scores_a_continuation() {
    let a = acceptance("The cat runs. Dog the runs. Anna: Where is the cup?\nBen: It is und");
    assert_eq!(
        a,
        Acceptance {
            sentences: 3,
            accepted: 2
        }
    );
    assert!((a.rate() - 2.0 / 3.0).abs() < 1e-12);
    assert_eq!(acceptance("The cat runs\nThe dog sleeps.").sentences, 2);
    assert_eq!(acceptance("").rate(), 1.0);
    let t = grammar_text(5, 500);
    let full = acceptance(&t);
    assert_eq!(full.accepted, full.sentences);
    assert_eq!(full.sentences, sentences(&t).len());
}

/// The figures docs/models.md quotes ("Training data"), printed:
/// `cargo test --workspace --lib -p tileops-models -- data::tests::print_data_figures --ignored --nocapture`.
#[test]
#[ignore = "prints the figures of docs/models.md; run by hand"]
fn print_data_figures() {
    let t0 = std::time::Instant::now();
    let tok = Tokenizer::train_generated().unwrap();
    println!(
        "train_generated: {:?}, {} tokens",
        t0.elapsed(),
        tok.vocab_size()
    );
    let c = tokenizer_corpus();
    println!(
        "tokenizer_corpus: {} words, {} bytes",
        c.split_whitespace().count(),
        c.len()
    );
    let tt = training_text(1, 20_000);
    let n = tok.encode(&tt).unwrap().len();
    let w = tt.split_whitespace().count();
    println!(
        "training_text(1, 20000): {w} words, {n} tokens, {:.3}/word",
        n as f64 / w as f64
    );
    let g = grammar_text_in(99, Split::Heldout, 5000);
    let n = tok.encode(&g).unwrap().len();
    let w = g.split_whitespace().count();
    println!(
        "held-out grammar: {w} words, {n} tokens, {:.3}/word",
        n as f64 / w as f64
    );
    let (mut tried, mut rejected) = (0, 0);
    for seed in 0..200u64 {
        for (i, s) in sentences(&grammar_text(seed, 600)).into_iter().enumerate() {
            if s.split_whitespace().count() < 4 {
                continue;
            }
            if let Some(salad) = shuffled(s, seed ^ i as u64) {
                tried += 1;
                rejected += usize::from(!accepts(&salad));
            }
        }
    }
    println!("shuffled sentences rejected: {rejected}/{tried}");
    let mut vocab = std::collections::HashSet::new();
    for seed in 0..50 {
        let t = grammar_text(seed, 2000);
        for w in t.split(|c: char| !c.is_alphanumeric() && c != '\'') {
            if !w.is_empty() {
                vocab.insert(w.to_lowercase());
            }
        }
    }
    println!(
        "distinct words over 50 documents of 2000 words: {}",
        vocab.len()
    );
    assert!(tried > 0 && !vocab.is_empty());
}

#[test]
fn stream_of_a_document_equals_its_decoding() {
    let t = tokenizer();
    let held = retrieval_doc(8, Split::Heldout, 400, 3).text();
    for text in [training_text(6, 800), held] {
        let ids = t.encode(&text).unwrap();
        assert_eq!(t.decode(&ids).unwrap(), text);
        let mut stream = t.stream(false);
        let mut out = String::new();
        for &id in &ids {
            out.extend(stream.step(id).unwrap());
        }
        assert_eq!(out, text);
    }
}
