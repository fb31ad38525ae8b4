//! A parser of the generator's grammar ([`super::grammar`]): [`accepts`] says whether a sentence
//! could have come from it. The parser is nondeterministic recursive descent: each rule maps a
//! token position to every position where a match can end, so ambiguous words ("her" as a
//! determiner or a pronoun, "and" between subjects or clauses) need no lookahead.
//!
//! The grammar (terminal words from [`super::lexicon`]; `[x]` optional; agreement `a` is
//! I / third person singular / plural, and a verb, "be" or "do" must agree with its subject):
//!
//! ```text
//! sentence   := [Name ":"] body
//! body       := statement ("." | "!") | question "?" | exclaim "!" | imperative ("." | "!")
//!             | interjection "!" | short_answer ("." | "!") | key "."
//! statement  := [opener [","]] clause [("," comma_conj | bare_conj) clause]
//! clause     := subject(a) vp(a) | "there" be(a) det_np(a) ["named" Name] tail
//! vp(a)      := verb_t(a) object tail | verb_i(a) tail | be(a) ["not"] adjs | be(a) ["not"] pp
//!             | do(a) "not" (verb_t.base object | verb_i.base) tail
//! subject    := simple(a) | simple "and" simple            (the pair is plural)
//! simple(a)  := Name | "I" | you | we | they | he | she | it | det_np(a)
//! object     := Name | me | you | him | her | it | us | them | det_np
//! det_np(a)  := det_sg [adj [adj]] noun.sg | det_pl [adj [adj]] noun.pl   (det: a/an agree, Name's)
//! adjs       := adj ["and" adj]        pp := preposition object        tail := (adverb | pp){0,2}
//! question   := "where" be(a) subject(a) | "where" do(a) subject(a) verb_i.base [tail]
//!             | be(a) subject(a) (adjs | pp) | do(a) subject(a) (verb_t.base object | verb_i.base) tail
//!             | "who" (verb_t(3sg) object | verb_i(3sg)) tail | "what" do(a) subject(a) verb_t.base tail
//!             | "what" be(3sg) pp | "what is the code of the" Colour KeyObject
//!             | "which code opens the" Colour KeyObject
//! exclaim    := "what" a/an adj noun.sg | "how" adj subject(a) be(a)
//! imperative := ["please"] (verb_t.base object | verb_i.base) tail
//! short_answer := ("yes" | "no") "," subject(a) (be(a) | do(a)) ["not"]
//! key        := "the code of the" Colour KeyObject "is" Code
//!             | "the" Colour KeyObject "has the code" Code            (Code: 4 digits, 1000-9999)
//! ```
//!
//! The first word of the body is capitalised (and read in lower case); every other word must
//! be written as the lexicon writes it (names and "I" capitalised, the rest lower case).

use super::grammar::{be, do_, finite, Agr, Tense};
use super::lexicon as lx;
use std::collections::HashSet;
use std::sync::OnceLock;

/// The lexicon as sets, built once.
struct Lex {
    names: HashSet<&'static str>,
    noun_sg: HashSet<&'static str>,
    noun_pl: HashSet<&'static str>,
    adjectives: HashSet<&'static str>,
    colors: HashSet<&'static str>,
    key_objects: HashSet<&'static str>,
}

fn lex() -> &'static Lex {
    static LEX: OnceLock<Lex> = OnceLock::new();
    LEX.get_or_init(|| {
        let nouns = || lx::ANIMATE.iter().chain(lx::THINGS).chain(lx::PLACES);
        Lex {
            names: lx::NAMES_TRAIN
                .iter()
                .chain(lx::NAMES_HELDOUT)
                .map(|n| n.word)
                .collect(),
            noun_sg: nouns().map(|n| n.sg).collect(),
            noun_pl: nouns().map(|n| n.pl).collect(),
            adjectives: lx::ANIMATE_ADJECTIVES
                .iter()
                .chain(lx::THING_ADJECTIVES)
                .chain(lx::COLORS)
                .copied()
                .collect(),
            colors: lx::COLORS.iter().copied().collect(),
            key_objects: lx::KEY_OBJECTS.iter().copied().collect(),
        }
    })
}

const AGRS: [Agr; 3] = [Agr::I, Agr::Sg3, Agr::Pl];
const TENSES: [Tense; 2] = [Tense::Present, Tense::Past];

/// End positions of matches (deduplicated, small).
type Ends = Vec<usize>;

fn push(ends: &mut Ends, e: usize) {
    if !ends.contains(&e) {
        ends.push(e);
    }
}

struct Parser {
    toks: Vec<String>,
}

impl Parser {
    fn tok(&self, i: usize) -> Option<&str> {
        self.toks.get(i).map(String::as_str)
    }

    fn word(&self, i: usize, w: &str) -> Option<usize> {
        (self.tok(i) == Some(w)).then_some(i + 1)
    }

    /// A space-separated phrase of words.
    fn phrase(&self, i: usize, p: &str) -> Option<usize> {
        p.split(' ').try_fold(i, |j, w| self.word(j, w))
    }

    fn phrases(&self, i: usize, ps: &[&str]) -> Ends {
        let mut ends = Vec::new();
        for p in ps {
            if let Some(e) = self.phrase(i, p) {
                push(&mut ends, e);
            }
        }
        ends
    }

    fn in_set(&self, i: usize, set: &HashSet<&'static str>) -> Option<usize> {
        self.tok(i).filter(|t| set.contains(t)).map(|_| i + 1)
    }

    fn name(&self, i: usize) -> Option<usize> {
        self.in_set(i, &lex().names)
    }

    fn possessive(&self, i: usize) -> Option<usize> {
        let t = self.tok(i)?;
        let stem = t.strip_suffix("'s")?;
        lex().names.contains(stem).then_some(i + 1)
    }

    /// `verb`'s finite form agreeing with `agr` in either tense.
    fn verb(&self, i: usize, verbs: &[lx::Verb], agr: Agr) -> Option<usize> {
        let t = self.tok(i)?;
        verbs
            .iter()
            .any(|v| TENSES.iter().any(|&tn| finite(v, agr, tn) == t))
            .then_some(i + 1)
    }

    fn base(&self, i: usize, verbs: &[lx::Verb]) -> Option<usize> {
        let t = self.tok(i)?;
        verbs.iter().any(|v| v.base == t).then_some(i + 1)
    }

    fn aux(&self, i: usize, agr: Agr, f: fn(Agr, Tense) -> &'static str) -> Option<usize> {
        let t = self.tok(i)?;
        TENSES.iter().any(|&tn| f(agr, tn) == t).then_some(i + 1)
    }

    fn adjs_after(&self, i: usize, max: usize) -> Ends {
        let mut ends = vec![i];
        let mut j = i;
        for _ in 0..max {
            match self.in_set(j, &lex().adjectives) {
                Some(e) => {
                    ends.push(e);
                    j = e;
                }
                None => break,
            }
        }
        ends
    }

    fn det_np(&self, i: usize) -> Vec<(usize, Agr)> {
        let mut out = Vec::new();
        let Some(t) = self.tok(i) else {
            return out;
        };
        let poss = self.possessive(i).is_some();
        let sg = poss || t == "a" || t == "an" || lx::DET_SG.contains(&t);
        let pl = poss || lx::DET_PL.contains(&t);
        if let Some(next) = self.tok(i + 1) {
            if (t == "a" && lx::takes_an(next)) || (t == "an" && !lx::takes_an(next)) {
                return out;
            }
        }
        for j in self.adjs_after(i + 1, 2) {
            if sg && self.in_set(j, &lex().noun_sg).is_some() {
                out.push((j + 1, Agr::Sg3));
            }
            if pl && self.in_set(j, &lex().noun_pl).is_some() {
                out.push((j + 1, Agr::Pl));
            }
        }
        out
    }

    fn simple(&self, i: usize) -> Vec<(usize, Agr)> {
        let mut out = self.det_np(i);
        if let Some(e) = self.name(i) {
            out.push((e, Agr::Sg3));
        }
        for (p, agr) in [
            ("I", Agr::I),
            ("you", Agr::Pl),
            ("we", Agr::Pl),
            ("they", Agr::Pl),
            ("he", Agr::Sg3),
            ("she", Agr::Sg3),
            ("it", Agr::Sg3),
        ] {
            if let Some(e) = self.word(i, p) {
                out.push((e, agr));
            }
        }
        out
    }

    fn subject(&self, i: usize) -> Vec<(usize, Agr)> {
        let mut out = self.simple(i);
        for (e, _) in self.simple(i) {
            if let Some(e) = self.word(e, "and") {
                for (e2, _) in self.simple(e) {
                    out.push((e2, Agr::Pl));
                }
            }
        }
        out
    }

    fn object(&self, i: usize) -> Ends {
        let mut ends: Ends = self.det_np(i).into_iter().map(|(e, _)| e).collect();
        if let Some(e) = self.name(i) {
            push(&mut ends, e);
        }
        for e in self.phrases(i, &["me", "you", "him", "her", "it", "us", "them"]) {
            push(&mut ends, e);
        }
        ends
    }

    fn pp(&self, i: usize) -> Ends {
        let mut ends = Vec::new();
        for j in self.phrases(i, lx::PREPOSITIONS) {
            for e in self.object(j) {
                push(&mut ends, e);
            }
        }
        ends
    }

    fn modifier(&self, i: usize) -> Ends {
        let mut ends = self.phrases(i, lx::ADVERBS);
        for e in self.pp(i) {
            push(&mut ends, e);
        }
        ends
    }

    fn tail(&self, i: usize) -> Ends {
        let mut ends = vec![i];
        for e in self.modifier(i) {
            push(&mut ends, e);
            for e2 in self.modifier(e) {
                push(&mut ends, e2);
            }
        }
        ends
    }

    fn adjs(&self, i: usize) -> Ends {
        let mut ends = Vec::new();
        if let Some(e) = self.in_set(i, &lex().adjectives) {
            push(&mut ends, e);
            if let Some(e2) = self
                .word(e, "and")
                .and_then(|j| self.in_set(j, &lex().adjectives))
            {
                push(&mut ends, e2);
            }
        }
        ends
    }

    /// `verb_t.base object | verb_i.base`, then a tail.
    fn base_vp(&self, i: usize) -> Ends {
        let mut ends = Vec::new();
        let mut heads = Vec::new();
        if let Some(j) = self.base(i, lx::TRANSITIVE) {
            heads.extend(self.object(j));
        }
        if let Some(j) = self.base(i, lx::INTRANSITIVE) {
            heads.push(j);
        }
        for h in heads {
            for e in self.tail(h) {
                push(&mut ends, e);
            }
        }
        ends
    }

    fn vp(&self, i: usize, agr: Agr) -> Ends {
        let mut ends = Vec::new();
        let mut heads = Vec::new();
        if let Some(j) = self.verb(i, lx::TRANSITIVE, agr) {
            heads.extend(self.object(j));
        }
        if let Some(j) = self.verb(i, lx::INTRANSITIVE, agr) {
            heads.push(j);
        }
        for h in heads {
            for e in self.tail(h) {
                push(&mut ends, e);
            }
        }
        if let Some(j) = self.aux(i, agr, be) {
            let j2 = self.word(j, "not").unwrap_or(j);
            for k in [j, j2] {
                for e in self.adjs(k).into_iter().chain(self.pp(k)) {
                    push(&mut ends, e);
                }
            }
        }
        if let Some(j) = self.aux(i, agr, do_).and_then(|j| self.word(j, "not")) {
            for e in self.base_vp(j) {
                push(&mut ends, e);
            }
        }
        ends
    }

    fn clause(&self, i: usize) -> Ends {
        let mut ends = Vec::new();
        for (j, agr) in self.subject(i) {
            for e in self.vp(j, agr) {
                push(&mut ends, e);
            }
        }
        if let Some(j) = self.word(i, "there") {
            for agr in AGRS {
                let Some(k) = self.aux(j, agr, be) else {
                    continue;
                };
                for (n, a) in self.det_np(k) {
                    if a != agr {
                        continue;
                    }
                    let named = self.word(n, "named").and_then(|m| self.name(m));
                    for h in [Some(n), named].into_iter().flatten() {
                        for e in self.tail(h) {
                            push(&mut ends, e);
                        }
                    }
                }
            }
        }
        ends
    }

    fn statement(&self, i: usize) -> Ends {
        let mut starts = vec![i];
        for j in self.phrases(i, lx::OPENERS) {
            starts.push(j);
            if let Some(k) = self.word(j, ",") {
                starts.push(k);
            }
        }
        let mut ends = Vec::new();
        for s in starts {
            for e in self.clause(s) {
                push(&mut ends, e);
                let mut conj = self.phrases(e, lx::BARE_CONJUNCTIONS);
                if let Some(c) = self.word(e, ",") {
                    conj.extend(self.phrases(c, lx::COMMA_CONJUNCTIONS));
                }
                for c in conj {
                    for e2 in self.clause(c) {
                        push(&mut ends, e2);
                    }
                }
            }
        }
        ends
    }

    fn key_np(&self, i: usize) -> Option<usize> {
        let j = self.in_set(i, &lex().colors)?;
        self.in_set(j, &lex().key_objects)
    }

    fn code(&self, i: usize) -> Option<usize> {
        let t = self.tok(i)?;
        let ok = t.len() == 4 && t.bytes().all(|b| b.is_ascii_digit()) && !t.starts_with('0');
        ok.then_some(i + 1)
    }

    fn key(&self, i: usize) -> Ends {
        let a = self
            .phrase(i, "the code of the")
            .and_then(|j| self.key_np(j))
            .and_then(|j| self.word(j, "is"))
            .and_then(|j| self.code(j));
        let b = self
            .word(i, "the")
            .and_then(|j| self.key_np(j))
            .and_then(|j| self.phrase(j, "has the code"))
            .and_then(|j| self.code(j));
        [a, b].into_iter().flatten().collect()
    }

    /// Ends of `aux(a) subject(a)` at `i` (`aux` is "be" or "do"), the subject agreeing.
    fn inverted(&self, i: Option<usize>, agr: Agr, aux: fn(Agr, Tense) -> &'static str) -> Ends {
        let Some(k) = i.and_then(|i| self.aux(i, agr, aux)) else {
            return Vec::new();
        };
        self.subject(k)
            .into_iter()
            .filter(|&(_, a)| a == agr)
            .map(|(e, _)| e)
            .collect()
    }

    /// Ends of `verbs.base tail` at `i`.
    fn base_tail(&self, i: usize, verbs: &[lx::Verb]) -> Ends {
        self.base(i, verbs).map_or_else(Vec::new, |v| self.tail(v))
    }

    fn question(&self, i: usize) -> Ends {
        let mut ends = Vec::new();
        let mut add = |es: Ends| es.into_iter().for_each(|e| push(&mut ends, e));
        let (where_, what) = (self.word(i, "where"), self.word(i, "what"));
        for agr in AGRS {
            // where be(a) subject(a)
            add(self.inverted(where_, agr, be));
            // where do(a) subject(a) verb_i.base tail
            for s in self.inverted(where_, agr, do_) {
                add(self.base_tail(s, lx::INTRANSITIVE));
            }
            // be(a) subject(a) (adjs | pp)
            for s in self.inverted(Some(i), agr, be) {
                add(self.adjs(s));
                add(self.pp(s));
            }
            // do(a) subject(a) (verb_t.base object | verb_i.base) tail
            for s in self.inverted(Some(i), agr, do_) {
                add(self.base_vp(s));
            }
            // what do(a) subject(a) verb_t.base tail
            for s in self.inverted(what, agr, do_) {
                add(self.base_tail(s, lx::TRANSITIVE));
            }
        }
        // who (verb_t(3sg) object | verb_i(3sg)) tail
        if let Some(j) = self.word(i, "who") {
            if let Some(k) = self.verb(j, lx::TRANSITIVE, Agr::Sg3) {
                for o in self.object(k) {
                    add(self.tail(o));
                }
            }
            if let Some(k) = self.verb(j, lx::INTRANSITIVE, Agr::Sg3) {
                add(self.tail(k));
            }
        }
        // what be(3sg) pp
        if let Some(j) = what.and_then(|j| self.aux(j, Agr::Sg3, be)) {
            add(self.pp(j));
        }
        let keyq = [
            self.phrase(i, "what is the code of the"),
            self.phrase(i, "which code opens the"),
        ];
        add(keyq
            .into_iter()
            .flatten()
            .filter_map(|j| self.key_np(j))
            .collect());
        ends
    }

    fn exclaim(&self, i: usize) -> Ends {
        let mut ends = Vec::new();
        if let Some(j) = self.word(i, "what") {
            if let (Some(art), Some(adj)) = (self.tok(j), self.tok(j + 1)) {
                let art_ok = art == lx::article(adj);
                if art_ok && self.in_set(j + 1, &lex().adjectives).is_some() {
                    if let Some(e) = self.in_set(j + 2, &lex().noun_sg) {
                        push(&mut ends, e);
                    }
                }
            }
        }
        if let Some(j) = self
            .word(i, "how")
            .and_then(|j| self.in_set(j, &lex().adjectives))
        {
            for (s, agr) in self.subject(j) {
                if let Some(e) = self.aux(s, agr, be) {
                    push(&mut ends, e);
                }
            }
        }
        ends
    }

    fn imperative(&self, i: usize) -> Ends {
        let mut ends = self.base_vp(i);
        if let Some(j) = self.word(i, "please") {
            for e in self.base_vp(j) {
                push(&mut ends, e);
            }
        }
        ends
    }

    fn short_answer(&self, i: usize) -> Ends {
        let mut ends = Vec::new();
        let Some(j) = self
            .phrases(i, &["yes", "no"])
            .first()
            .and_then(|&j| self.word(j, ","))
        else {
            return ends;
        };
        for (s, agr) in self.subject(j) {
            for f in [be as fn(Agr, Tense) -> &'static str, do_] {
                if let Some(e) = self.aux(s, agr, f) {
                    push(&mut ends, e);
                    if let Some(e2) = self.word(e, "not") {
                        push(&mut ends, e2);
                    }
                }
            }
        }
        ends
    }

    /// Whether the body starting at `i` parses up to the final punctuation token.
    fn body(&self, i: usize) -> bool {
        let n = self.toks.len();
        let Some(last) = self.tok(n.wrapping_sub(1)) else {
            return false;
        };
        let whole = |ends: Ends| ends.contains(&(n - 1));
        match last {
            "." => {
                whole(self.statement(i))
                    || whole(self.imperative(i))
                    || whole(self.short_answer(i))
                    || whole(self.key(i))
            }
            "!" => {
                whole(self.statement(i))
                    || whole(self.exclaim(i))
                    || whole(self.imperative(i))
                    || whole(self.phrases(i, lx::INTERJECTIONS))
                    || whole(self.short_answer(i))
            }
            "?" => whole(self.question(i)),
            _ => false,
        }
    }
}

/// Words and punctuation of `sentence` (',', ':', '.', '?', '!' split off the end of a word).
fn tokens(sentence: &str) -> Vec<String> {
    let mut toks = Vec::new();
    for piece in sentence.split_whitespace() {
        let word = piece.trim_end_matches([',', ':', '.', '?', '!']);
        if !word.is_empty() {
            toks.push(word.to_string());
        }
        toks.extend(piece[word.len()..].chars().map(String::from));
    }
    toks
}

/// Whether `sentence` (one sentence, as [`super::sentences`] returns it) is in the grammar.
pub fn accepts(sentence: &str) -> bool {
    let mut toks = tokens(sentence);
    let mut start = 0;
    if toks.len() > 2 && lex().names.contains(toks[0].as_str()) && toks[1] == ":" {
        start = 2;
    }
    let Some(first) = toks.get_mut(start) else {
        return false;
    };
    let keep = first == "I" || lex().names.contains(first.as_str()) || {
        first
            .strip_suffix("'s")
            .is_some_and(|s| lex().names.contains(s))
    };
    if !keep {
        if !first.starts_with(|c: char| c.is_ascii_uppercase()) {
            return false;
        }
        *first = first.to_lowercase();
    }
    Parser { toks }.body(start)
}
