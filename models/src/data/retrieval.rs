//! Long-range retrieval documents: keys ("The code of the blue door is 4821.") stated once
//! inside grammar filler, then questions whose answers must be copied from far back.

use super::grammar::{Gen, Unit};
use super::lexicon as lx;
use super::rng::{mix, Rng};
use super::{Question, RetrievalDoc, Split};
use std::ops::Range;

/// A key: a colour and a key object (indices into [`lx::COLORS`] and [`lx::KEY_OBJECTS`]).
pub(crate) type Pair = (usize, usize);

/// Which split a (colour, object) pair belongs to: a fixed hash sends a quarter to Heldout.
pub(crate) fn pair_split(pair: Pair) -> Split {
    let h = mix(0x7061_6972 ^ ((pair.0 as u64) << 8) ^ pair.1 as u64);
    if h.is_multiple_of(4) {
        Split::Heldout
    } else {
        Split::Train
    }
}

/// Which split a code (1000..=9999) belongs to: a fixed hash sends a quarter to Heldout.
pub(crate) fn code_split(code: u32) -> Split {
    if mix(0x636f_6465 ^ u64::from(code)).is_multiple_of(4) {
        Split::Heldout
    } else {
        Split::Train
    }
}

/// The (colour, object) pairs of `split`, in a fixed order.
pub(crate) fn pairs(split: Split) -> Vec<Pair> {
    (0..lx::COLORS.len())
        .flat_map(|c| (0..lx::KEY_OBJECTS.len()).map(move |o| (c, o)))
        .filter(|&p| pair_split(p) == split)
        .collect()
}

fn draw_code(rng: &mut Rng, split: Split, used: &[u32]) -> u32 {
    loop {
        let code = 1000 + rng.below(9000) as u32;
        if code_split(code) == split && !used.contains(&code) {
            return code;
        }
    }
}

/// The key statement, and the byte range of the code in it.
fn key_sentence(rng: &mut Rng, pair: Pair, code: u32) -> (String, Range<usize>) {
    let (c, o) = (lx::COLORS[pair.0], lx::KEY_OBJECTS[pair.1]);
    let head = if rng.chance(0.7) {
        format!("The code of the {c} {o} is ")
    } else {
        format!("The {c} {o} has the code ")
    };
    let span = head.len()..head.len() + 4;
    (format!("{head}{code}."), span)
}

fn question_text(rng: &mut Rng, pair: Pair) -> String {
    let (c, o) = (lx::COLORS[pair.0], lx::KEY_OBJECTS[pair.1]);
    if rng.chance(0.8) {
        format!("What is the code of the {c} {o}?")
    } else {
        format!("Which code opens the {c} {o}?")
    }
}

/// Words of a unit's text.
fn words(u: &Unit) -> usize {
    u.text.split_whitespace().count()
}

/// Where each key goes: `(at, k)` puts key `k` before filler unit `at` (the first unit whose
/// preceding words reach the key's depth; `filler.len()` for after the last), sorted by `at`.
fn slots(filler: &[Unit], depths: &[f64]) -> Vec<(usize, usize)> {
    let total: usize = filler.iter().map(words).sum();
    let mut slots: Vec<(usize, usize)> = depths
        .iter()
        .enumerate()
        .map(|(k, d)| {
            let target = (d.clamp(0.0, 1.0) * total as f64).round() as usize;
            let mut before = 0;
            let mut at = filler.len();
            for (i, u) in filler.iter().enumerate() {
                if before >= target {
                    at = i;
                    break;
                }
                before += words(u);
            }
            (at, k)
        })
        .collect();
    slots.sort();
    slots
}

/// The context: filler with the keys (sentence, code's range in it) at their slots, and each
/// code's byte range in the context.
fn assemble(
    filler: &[Unit],
    slots: &[(usize, usize)],
    keys: &[(String, Range<usize>)],
) -> (String, Vec<Range<usize>>) {
    let mut context = String::new();
    let mut spans = vec![0..0; keys.len()];
    let mut put = |context: &mut String, k: usize, sep: &str| {
        let (text, span) = &keys[k];
        spans[k] = context.len() + span.start..context.len() + span.end;
        context.push_str(text);
        context.push_str(sep);
    };
    let mut slot = slots.iter().peekable();
    for (i, u) in filler.iter().enumerate() {
        while let Some(&(_, k)) = slot.next_if(|(at, _)| *at == i) {
            // The key takes the separator of the sentence before it (a dialogue line stays one).
            let sep = if i == 0 { " " } else { filler[i - 1].sep };
            put(&mut context, k, sep);
        }
        context.push_str(&u.text);
        context.push_str(u.sep);
    }
    for &(_, k) in slot {
        put(&mut context, k, " ");
    }
    (context.trim_end().to_string(), spans)
}

/// A document with one key per entry of `depths` (fractions of the filler's words before the
/// key, clamped to 0..=1), questions in the order of `depths`; with `cap`, the filler has at
/// most `approx_words` words.
pub(crate) fn build(
    seed: u64,
    split: Split,
    approx_words: usize,
    depths: &[f64],
    cap: bool,
) -> RetrievalDoc {
    let mut gen = Gen::new(seed, split.names());
    let filler = if cap {
        gen.units_capped(approx_words, approx_words)
    } else {
        gen.units(approx_words)
    };
    let rng = gen.rng();
    let mut pool = pairs(split);
    rng.shuffle(&mut pool);
    let n = depths.len().min(pool.len());
    let slots = slots(&filler, &depths[..n]);
    let mut codes: Vec<u32> = Vec::with_capacity(n);
    for _ in 0..n {
        let code = draw_code(rng, split, &codes);
        codes.push(code);
    }
    let keys: Vec<(String, Range<usize>)> = (0..n)
        .map(|k| key_sentence(rng, pool[k], codes[k]))
        .collect();
    let (context, spans) = assemble(&filler, &slots, &keys);
    let questions = (0..n)
        .map(|k| Question {
            prompt: question_text(rng, pool[k]),
            answer: codes[k].to_string(),
            key_span: spans[k].clone(),
            depth: depths[k].clamp(0.0, 1.0),
        })
        .collect();
    RetrievalDoc { context, questions }
}
