//! The generator of simple English: sentences, short stories and dialogue from a small grammar
//! written for this repository (the rules are listed in [`super::parse`], which accepts them).
//! Everything is drawn from [`Rng`], so a seed names one text.

use super::lexicon::{self as lx, Name, Noun, Verb};
use super::rng::Rng;

/// Grammatical person and number, for verb agreement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Agr {
    /// "I": "am", "do", base form.
    I,
    /// He, she, it, a name, a singular noun phrase: "is", "does", "-s".
    Sg3,
    /// You, we, they, plural or coordinated noun phrases: "are", "do", base form.
    Pl,
}

/// Tense of a clause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tense {
    /// Simple present.
    Present,
    /// Simple past.
    Past,
}

/// "to be" in `agr` and `tense`.
pub(crate) fn be(agr: Agr, tense: Tense) -> &'static str {
    match (tense, agr) {
        (Tense::Present, Agr::I) => "am",
        (Tense::Present, Agr::Sg3) => "is",
        (Tense::Present, Agr::Pl) => "are",
        (Tense::Past, Agr::Pl) => "were",
        (Tense::Past, _) => "was",
    }
}

/// "to do" in `agr` and `tense`.
pub(crate) fn do_(agr: Agr, tense: Tense) -> &'static str {
    match (tense, agr) {
        (Tense::Present, Agr::Sg3) => "does",
        (Tense::Present, _) => "do",
        (Tense::Past, _) => "did",
    }
}

/// The finite form of `verb` in `agr` and `tense`.
pub(crate) fn finite(verb: &Verb, agr: Agr, tense: Tense) -> &'static str {
    match (tense, agr) {
        (Tense::Present, Agr::Sg3) => verb.s3,
        (Tense::Present, _) => verb.base,
        (Tense::Past, _) => verb.past,
    }
}

/// One sentence (or dialogue line) and the whitespace that follows it in the text.
#[derive(Debug, Clone)]
pub(crate) struct Unit {
    /// The sentence, ending in '.', '?' or '!'.
    pub text: String,
    /// What follows it: " " inside a paragraph, "\n" after a dialogue line, "\n\n" after a piece.
    pub sep: &'static str,
}

/// Words of a sentence being built; `finish` joins them, capitalises and punctuates.
#[derive(Debug, Default)]
struct Words(Vec<String>);

impl Words {
    fn push(&mut self, w: impl Into<String>) {
        self.0.push(w.into());
    }

    fn extend(&mut self, ws: Words) {
        self.0.extend(ws.0);
    }

    /// Attaches a comma to the last word.
    fn comma(&mut self) {
        if let Some(last) = self.0.last_mut() {
            last.push(',');
        }
    }

    fn finish(self, end: char) -> String {
        let mut s = self.0.join(" ");
        if let Some(first) = s.get(..1) {
            let upper = first.to_uppercase();
            s.replace_range(..1, &upper);
        }
        s.push(end);
        s
    }
}

/// The generator of one split's text.
#[derive(Debug)]
pub(crate) struct Gen {
    rng: Rng,
    names: &'static [Name],
}

impl Gen {
    /// A generator for `seed` drawing names from `names` (one split's list).
    pub(crate) fn new(seed: u64, names: &'static [Name]) -> Gen {
        Gen {
            rng: Rng::new(seed, 0x6772_616d),
            names,
        }
    }

    /// The random stream (shared with the retrieval documents' layout).
    pub(crate) fn rng(&mut self) -> &mut Rng {
        &mut self.rng
    }

    fn name(&mut self) -> Name {
        *self.rng.pick(self.names)
    }

    fn other_name(&mut self, not: &str) -> Name {
        loop {
            let n = self.name();
            if n.word != not {
                return n;
            }
        }
    }

    /// An adjective for a person or animal (`animate`), or for a thing (colours included).
    fn adjective(&mut self, animate: bool) -> &'static str {
        if animate {
            return lx::ANIMATE_ADJECTIVES[self.rng.below(lx::ANIMATE_ADJECTIVES.len())];
        }
        let i = self
            .rng
            .below(lx::THING_ADJECTIVES.len() + lx::COLORS.len());
        lx::THING_ADJECTIVES
            .get(i)
            .copied()
            .unwrap_or_else(|| lx::COLORS[i - lx::THING_ADJECTIVES.len()])
    }

    /// Determiner, adjectives and noun from `pool`.
    fn det_np(&mut self, pool: &[Noun], plural: bool) -> Words {
        let animate = pool
            .first()
            .is_some_and(|n| lx::ANIMATE.iter().any(|a| a.sg == n.sg));
        let mut adjs: Vec<&str> = Vec::new();
        let n_adj = match self.rng.below(20) {
            0..=9 => 0,
            10..=16 => 1,
            _ => 2,
        };
        while adjs.len() < n_adj {
            let a = self.adjective(animate);
            if !adjs.contains(&a) {
                adjs.push(a);
            }
        }
        let noun = self.rng.pick(pool);
        let noun = if plural { noun.pl } else { noun.sg };
        let next = adjs.first().copied().unwrap_or(noun);
        let det: String = match (plural, self.rng.below(20)) {
            (_, 0..=1) => format!("{}'s", self.name().word),
            (true, _) => self.rng.pick(lx::DET_PL).to_string(),
            (false, 2..=8) => "the".into(),
            (false, 9..=14) => lx::article(next).into(),
            (false, _) => self.rng.pick(lx::DET_SG).to_string(),
        };
        let mut w = Words::default();
        w.push(det);
        for a in adjs {
            w.push(a);
        }
        w.push(noun);
        w
    }

    /// A name, a pronoun (when `pronouns`) or an animate noun phrase, and its agreement.
    fn simple_subject(&mut self, pronouns: bool) -> (Words, Agr) {
        let mut w = Words::default();
        let r = self.rng.below(20);
        let r = if !pronouns && (8..=10).contains(&r) {
            0
        } else {
            r
        };
        let agr = match r {
            0..=7 => {
                w.push(self.name().word);
                Agr::Sg3
            }
            8..=10 => {
                let (p, agr) = *self.rng.pick(&[
                    ("I", Agr::I),
                    ("you", Agr::Pl),
                    ("we", Agr::Pl),
                    ("they", Agr::Pl),
                    ("he", Agr::Sg3),
                    ("she", Agr::Sg3),
                    ("it", Agr::Sg3),
                ]);
                w.push(p);
                agr
            }
            _ => {
                let plural = self.rng.chance(0.25);
                w = self.det_np(lx::ANIMATE, plural);
                if plural {
                    Agr::Pl
                } else {
                    Agr::Sg3
                }
            }
        };
        (w, agr)
    }

    fn subject(&mut self) -> (Words, Agr) {
        let pair = self.rng.chance(0.1);
        let (mut w, agr) = self.simple_subject(!pair);
        if pair {
            let (b, _) = self.simple_subject(false);
            w.push("and");
            w.extend(b);
            return (w, Agr::Pl);
        }
        (w, agr)
    }

    /// An object that suits `verb`: a thing, a person or animal, or either.
    fn object_of(&mut self, verb: &Verb) -> Words {
        if lx::ANIMATE_OBJECT_VERBS.contains(&verb.base) {
            let mut w = Words::default();
            match self.rng.below(10) {
                0..=3 => w.push(self.name().word),
                4..=7 => {
                    let plural = self.rng.chance(0.2);
                    w = self.det_np(lx::ANIMATE, plural);
                }
                _ => w.push(*self.rng.pick(&["me", "you", "him", "her", "us", "them"])),
            }
            w
        } else if lx::ANY_OBJECT_VERBS.contains(&verb.base) {
            self.object()
        } else {
            self.thing()
        }
    }

    /// A thing: a noun phrase, "it" or "them".
    fn thing(&mut self) -> Words {
        if self.rng.chance(0.1) {
            let mut w = Words::default();
            w.push(*self.rng.pick(&["it", "them"]));
            return w;
        }
        let plural = self.rng.chance(0.2);
        self.det_np(lx::THINGS, plural)
    }

    /// Any object: a thing, a person or animal, a name or a pronoun.
    fn object(&mut self) -> Words {
        match self.rng.below(20) {
            0..=11 => {
                let plural = self.rng.chance(0.2);
                self.det_np(lx::THINGS, plural)
            }
            12..=14 => self.det_np(lx::ANIMATE, false),
            15..=17 => {
                let mut w = Words::default();
                w.push(self.name().word);
                w
            }
            _ => {
                let mut w = Words::default();
                w.push(
                    *self
                        .rng
                        .pick(&["me", "you", "him", "her", "it", "us", "them"]),
                );
                w
            }
        }
    }

    /// "in the park", "on the table": a preposition of place that suits its noun.
    fn place_pp(&mut self) -> Words {
        let mut w = Words::default();
        if self.rng.chance(0.5) {
            w.push(*self.rng.pick(lx::AREA_PREPOSITIONS));
            w.extend(self.area());
        } else {
            w.push(*self.rng.pick(lx::SURFACE_PREPOSITIONS));
            w.extend(self.det_np(&lx::PLACES[lx::AREAS..], false));
        }
        w
    }

    /// An area ("the park").
    fn area(&mut self) -> Words {
        self.det_np(&lx::PLACES[..lx::AREAS], false)
    }

    fn pp(&mut self) -> Words {
        match self.rng.below(10) {
            0..=5 => self.place_pp(),
            6..=7 => {
                let mut w = Words::default();
                w.push("with");
                let (b, _) = self.simple_subject_object();
                w.extend(b);
                w
            }
            _ => {
                let mut w = Words::default();
                w.push(*self.rng.pick(&["to", "into", "from", "at"]));
                w.extend(self.area());
                w
            }
        }
    }

    /// A companion after "with": a name or an animate noun phrase.
    fn simple_subject_object(&mut self) -> (Words, Agr) {
        if self.rng.chance(0.5) {
            let mut w = Words::default();
            w.push(self.name().word);
            (w, Agr::Sg3)
        } else {
            (self.det_np(lx::ANIMATE, false), Agr::Sg3)
        }
    }

    /// Up to two adverbs or prepositional phrases.
    fn tail(&mut self) -> Words {
        self.tail_of(2)
    }

    /// Up to `max` adverbs or prepositional phrases.
    fn tail_of(&mut self, max: usize) -> Words {
        let n = match self.rng.below(20) {
            0..=9 => 0,
            10..=16 => 1,
            _ => 2,
        }
        .min(max);
        let mut w = Words::default();
        for _ in 0..n {
            if self.rng.chance(0.5) {
                w.push(*self.rng.pick(lx::ADVERBS));
            } else {
                w.extend(self.pp());
            }
        }
        w
    }

    /// A predicate's adjectives (of a person or animal).
    fn adjectives(&mut self) -> Words {
        let mut w = Words::default();
        let a = self.adjective(true);
        w.push(a);
        if self.rng.chance(0.2) {
            let b = self.adjective(true);
            if b != a {
                w.push("and");
                w.push(b);
            }
        }
        w
    }

    fn vp(&mut self, agr: Agr, tense: Tense) -> Words {
        let mut w = Words::default();
        match self.rng.below(20) {
            0..=7 => {
                let verb = *self.rng.pick(lx::TRANSITIVE);
                w.push(finite(&verb, agr, tense));
                w.extend(self.object_of(&verb));
                w.extend(self.tail());
            }
            8..=12 => {
                let verb = *self.rng.pick(lx::INTRANSITIVE);
                w.push(finite(&verb, agr, tense));
                if verb.base == "go" {
                    w.push("to");
                    w.extend(self.area());
                    w.extend(self.tail_of(1));
                } else {
                    w.extend(self.tail());
                }
            }
            13..=15 => {
                w.push(be(agr, tense));
                if self.rng.chance(0.2) {
                    w.push("not");
                }
                w.extend(self.adjectives());
            }
            16..=17 => {
                w.push(be(agr, tense));
                w.extend(self.place_pp());
            }
            _ => {
                w.push(do_(agr, tense));
                w.push("not");
                if self.rng.chance(0.5) {
                    let verb = *self.rng.pick(lx::TRANSITIVE);
                    w.push(verb.base);
                    w.extend(self.object_of(&verb));
                } else {
                    w.push(self.rng.pick(lx::INTRANSITIVE).base);
                }
                w.extend(self.tail());
            }
        }
        w
    }

    fn existential(&mut self, tense: Tense) -> Words {
        let mut w = Words::default();
        w.push("there");
        let plural = self.rng.chance(0.3);
        let animate = self.rng.chance(0.5);
        w.push(be(if plural { Agr::Pl } else { Agr::Sg3 }, tense));
        let pool = if animate {
            &lx::ANIMATE[..lx::ANIMALS]
        } else {
            lx::THINGS
        };
        w.extend(self.det_np(pool, plural));
        if animate && !plural && self.rng.chance(0.5) {
            w.push("named");
            w.push(self.name().word);
        }
        if self.rng.chance(0.6) {
            w.extend(self.place_pp());
        }
        w
    }

    fn clause(&mut self, tense: Tense) -> Words {
        if self.rng.chance(0.08) {
            return self.existential(tense);
        }
        let (mut w, agr) = self.subject();
        w.extend(self.vp(agr, tense));
        w
    }

    /// A statement: [opener[,]] clause [conjunction clause] '.' (sometimes '!').
    pub(crate) fn statement(&mut self, tense: Tense) -> String {
        let mut w = Words::default();
        if self.rng.chance(0.2) {
            let opener = *self.rng.pick(&lx::OPENERS[..9]);
            w.push(opener);
            if opener.contains(' ') || self.rng.chance(0.5) {
                w.comma();
            }
        }
        w.extend(self.clause(tense));
        if self.rng.chance(0.2) {
            if self.rng.chance(0.5) {
                w.comma();
                w.push(*self.rng.pick(lx::COMMA_CONJUNCTIONS));
            } else {
                w.push(*self.rng.pick(lx::BARE_CONJUNCTIONS));
            }
            w.extend(self.clause(tense));
        }
        w.finish(if self.rng.chance(0.05) { '!' } else { '.' })
    }

    fn tense(&mut self) -> Tense {
        if self.rng.chance(0.6) {
            Tense::Present
        } else {
            Tense::Past
        }
    }

    /// A question of one of the grammar's seven forms.
    pub(crate) fn question(&mut self) -> String {
        let tense = self.tense();
        let mut w = Words::default();
        match self.rng.below(7) {
            0 => {
                w.push("where");
                let (s, agr) = self.subject();
                w.push(be(agr, tense));
                w.extend(s);
            }
            1 => {
                w.push("where");
                let (s, agr) = self.subject();
                w.push(do_(agr, tense));
                w.extend(s);
                w.push(self.rng.pick(lx::INTRANSITIVE).base);
            }
            2 => {
                let (s, agr) = self.subject();
                w.push(be(agr, tense));
                w.extend(s);
                if self.rng.chance(0.5) {
                    w.extend(self.adjectives());
                } else {
                    w.extend(self.place_pp());
                }
            }
            3 => {
                let (s, agr) = self.subject();
                w.push(do_(agr, tense));
                w.extend(s);
                if self.rng.chance(0.6) {
                    let verb = *self.rng.pick(lx::TRANSITIVE);
                    w.push(verb.base);
                    w.extend(self.object_of(&verb));
                } else {
                    w.push(self.rng.pick(lx::INTRANSITIVE).base);
                }
                w.extend(self.tail());
            }
            4 => {
                w.push("who");
                if self.rng.chance(0.6) {
                    let verb = *self.rng.pick(lx::TRANSITIVE);
                    w.push(finite(&verb, Agr::Sg3, tense));
                    w.extend(self.object_of(&verb));
                } else {
                    let verb = *self.rng.pick(lx::INTRANSITIVE);
                    w.push(finite(&verb, Agr::Sg3, tense));
                }
                w.extend(self.tail());
            }
            5 => {
                w.push("what");
                let (s, agr) = self.subject();
                w.push(do_(agr, tense));
                w.extend(s);
                w.push(self.rng.pick(lx::TRANSITIVE).base);
                w.extend(self.tail());
            }
            _ => {
                w.push("what");
                w.push(be(Agr::Sg3, tense));
                w.extend(self.place_pp());
            }
        }
        w.finish('?')
    }

    /// An exclamation: "What a big dog!", "How tall the tree is!" or an interjection.
    pub(crate) fn exclamation(&mut self) -> String {
        let mut w = Words::default();
        match self.rng.below(3) {
            0 => {
                let adj = self.adjective(true);
                w.push("what");
                w.push(lx::article(adj));
                w.push(adj);
                w.push(self.rng.pick(lx::ANIMATE).sg);
            }
            1 => {
                w.push("how");
                w.push(self.adjective(true));
                let (s, agr) = self.subject();
                w.extend(s);
                let tense = self.tense();
                w.push(be(agr, tense));
            }
            _ => w.push(*self.rng.pick(lx::INTERJECTIONS)),
        }
        w.finish('!')
    }

    /// An imperative: ["Please"] verb [object] [tail] '.' or '!'.
    pub(crate) fn imperative(&mut self) -> String {
        let mut w = Words::default();
        if self.rng.chance(0.3) {
            w.push("please");
        }
        if self.rng.chance(0.6) {
            let verb = *self.rng.pick(lx::TRANSITIVE);
            w.push(verb.base);
            w.extend(self.object_of(&verb));
        } else {
            w.push(self.rng.pick(lx::INTRANSITIVE).base);
        }
        w.extend(self.tail());
        w.finish(if self.rng.chance(0.5) { '!' } else { '.' })
    }

    /// A paragraph of 3 to 7 sentences of every kind.
    pub(crate) fn facts(&mut self) -> Vec<Unit> {
        let n = self.rng.range(3, 7);
        (0..n)
            .map(|_| {
                let text = match self.rng.below(20) {
                    0..=11 => {
                        let t = self.tense();
                        self.statement(t)
                    }
                    12..=15 => self.question(),
                    16..=17 => self.exclamation(),
                    _ => self.imperative(),
                };
                Unit { text, sep: " " }
            })
            .collect()
    }

    /// One question from `a` to `b` and `b`'s answer, as dialogue lines.
    fn exchange(&mut self, a: Name, b: Name) -> [String; 2] {
        let (q, ans) = match self.rng.below(7) {
            0 => {
                let mut q = Words::default();
                q.push("where");
                q.push("is");
                q.extend(self.det_np(lx::THINGS, false));
                let mut r = Words::default();
                if self.rng.chance(0.8) {
                    r.push("it");
                    r.push("is");
                    r.extend(self.place_pp());
                } else {
                    r.push("I do not know");
                }
                (q.finish('?'), r.finish('.'))
            }
            1 => {
                let mut q = Words::default();
                q.push("do you");
                let verb = *self.rng.pick(lx::TRANSITIVE);
                q.push(verb.base);
                q.extend(self.object_of(&verb));
                let r = if self.rng.chance(0.6) {
                    "Yes, I do."
                } else {
                    "No, I do not."
                };
                (q.finish('?'), r.to_string())
            }
            2 => {
                let mut q = Words::default();
                q.push("are you");
                q.push(self.adjective(true));
                let r = if self.rng.chance(0.6) {
                    "Yes, I am."
                } else {
                    "No, I am not."
                };
                (q.finish('?'), r.to_string())
            }
            3 => {
                let who = self.name();
                let mut q = Words::default();
                q.push("what does");
                q.push(who.word);
                q.push("want");
                let mut r = Words::default();
                r.push(if who.she { "she wants" } else { "he wants" });
                r.extend(self.thing());
                (q.finish('?'), r.finish('.'))
            }
            4 => {
                let r = if self.rng.chance(0.5) {
                    "Okay!"
                } else {
                    "Thank you!"
                };
                (self.imperative(), r.to_string())
            }
            5 => {
                let adj = self.adjective(true);
                let mut q = Words::default();
                q.push("what");
                q.push(lx::article(adj));
                q.push(adj);
                q.push(self.rng.pick(lx::ANIMATE).sg);
                let mut r = Words::default();
                r.push("yes,");
                r.push("it is");
                r.push(self.adjective(true));
                (q.finish('!'), r.finish('!'))
            }
            _ => {
                let t = self.tense();
                let s = self.statement(t);
                let r = self.question();
                (s, r)
            }
        };
        [format!("{}: {q}", a.word), format!("{}: {ans}", b.word)]
    }

    /// A dialogue of two to four exchanges between two names, one line each.
    pub(crate) fn dialogue(&mut self) -> Vec<Unit> {
        let a = self.name();
        let b = self.other_name(a.word);
        let n = self.rng.range(2, 4);
        let mut units = Vec::new();
        for i in 0..n {
            let (x, y) = if i % 2 == 0 { (a, b) } else { (b, a) };
            for text in self.exchange(x, y) {
                units.push(Unit { text, sep: "\n" });
            }
        }
        units
    }

    /// A short story in the past tense: an opening, events, maybe a dialogue, an ending.
    pub(crate) fn story(&mut self) -> Vec<Unit> {
        let hero = self.name();
        let friend = self.other_name(hero.word);
        let pron = if hero.she { "she" } else { "he" };
        let mut units = Vec::new();
        let say = |units: &mut Vec<Unit>, text: String| units.push(Unit { text, sep: " " });
        let kind = self.rng.below(3);
        let adj = self.adjective(kind != 1);
        let opening = match kind {
            0 => {
                let pet = self.rng.pick(&lx::ANIMATE[..lx::ANIMALS]).sg;
                format!(
                    "There was {} {adj} {pet} named {}.",
                    lx::article(adj),
                    hero.word
                )
            }
            1 => {
                let thing = self.rng.pick(lx::THINGS).sg;
                let mut w = Words::default();
                w.push(format!(
                    "one day, {} found {} {adj} {thing}",
                    hero.word,
                    lx::article(adj)
                ));
                w.extend(self.place_pp());
                w.finish('.')
            }
            _ => {
                let pet = self.rng.pick(&lx::ANIMATE[..lx::ANIMALS]).sg;
                format!("{} had {} {adj} {pet}.", hero.word, lx::article(adj))
            }
        };
        say(&mut units, opening);
        for _ in 0..self.rng.range(3, 6) {
            let mut w = Words::default();
            if self.rng.chance(0.4) {
                let opener = *self.rng.pick(lx::STORY_OPENERS);
                w.push(opener);
                if opener.contains(' ') {
                    w.comma();
                }
            }
            match self.rng.below(5) {
                0 => {
                    w.push(hero.word);
                    w.push("and");
                    w.push(friend.word);
                    let v = *self
                        .rng
                        .pick(&["played", "sang", "danced", "walked", "swam"]);
                    w.push(v);
                    w.push("together");
                }
                1 => {
                    w.push(friend.word);
                    let v = *self
                        .rng
                        .pick(&["helped", "followed", "hugged", "found", "saw", "watched"]);
                    w.push(v);
                    w.push(hero.word);
                    w.extend(self.tail());
                }
                2 => {
                    w.push(hero.word);
                    w.push("went to");
                    w.extend(self.area());
                }
                _ => {
                    w.push(if self.rng.chance(0.5) {
                        hero.word
                    } else {
                        pron
                    });
                    w.extend(self.vp(Agr::Sg3, Tense::Past));
                }
            }
            say(&mut units, w.finish('.'));
        }
        if self.rng.chance(0.5) {
            if let Some(last) = units.last_mut() {
                last.sep = "\n";
            }
            for text in self.exchange(hero, friend) {
                units.push(Unit { text, sep: "\n" });
            }
        }
        let ending = match self.rng.below(3) {
            0 => format!("In the end, {} was happy.", hero.word),
            1 => format!(
                "After that, {} and {} played together every day.",
                hero.word, friend.word
            ),
            _ => format!("{} smiled.", hero.word),
        };
        say(&mut units, ending);
        units
    }

    /// One piece of text: a story, a dialogue or a paragraph of sentences.
    pub(crate) fn piece(&mut self) -> Vec<Unit> {
        let mut units = match self.rng.below(10) {
            0..=3 => self.story(),
            4..=6 => self.dialogue(),
            _ => self.facts(),
        };
        if let Some(last) = units.last_mut() {
            last.sep = "\n\n";
        }
        units
    }

    /// Pieces until at least `approx_words` words.
    pub(crate) fn units(&mut self, approx_words: usize) -> Vec<Unit> {
        let mut units = Vec::new();
        let mut words = 0;
        while words < approx_words.max(1) {
            for u in self.piece() {
                words += u.text.split_whitespace().count();
                units.push(u);
            }
        }
        units
    }
}

impl Gen {
    /// Pieces until at least `target` words, stopping early rather than pass `cap` words
    /// (cut at a sentence end; at least one sentence).
    pub(crate) fn units_capped(&mut self, target: usize, cap: usize) -> Vec<Unit> {
        let mut units: Vec<Unit> = Vec::new();
        let mut words = 0;
        while words < target.max(1) {
            for u in self.piece() {
                let w = u.text.split_whitespace().count();
                if words + w > cap && !units.is_empty() {
                    if let Some(last) = units.last_mut() {
                        last.sep = "\n\n";
                    }
                    return units;
                }
                words += w;
                units.push(u);
            }
        }
        units
    }
}

/// Joins units into text (the last separator dropped).
pub(crate) fn join(units: &[Unit]) -> String {
    let mut s = String::new();
    for (i, u) in units.iter().enumerate() {
        s.push_str(&u.text);
        if i + 1 < units.len() {
            s.push_str(u.sep);
        }
    }
    s
}
