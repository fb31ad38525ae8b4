//! The generator's vocabulary: every word the grammar can produce, with its forms. The
//! generator ([`super::grammar`]) and the parser ([`super::parse`]) both read these lists, so
//! they cannot drift apart. All lists were written for this repository.

/// A person's or an animal's name, with the pronoun the stories use for it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Name {
    /// The name as written (capitalised).
    pub word: &'static str,
    /// True for "she"/"her", false for "he"/"him".
    pub she: bool,
}

const fn n(word: &'static str, she: bool) -> Name {
    Name { word, she }
}

/// Names of the training split (never in held-out text).
pub(crate) const NAMES_TRAIN: &[Name] = &[
    n("Anna", true),
    n("Ben", false),
    n("Cora", true),
    n("Dan", false),
    n("Ella", true),
    n("Finn", false),
    n("Greta", true),
    n("Hugo", false),
    n("Ida", true),
    n("Jonah", false),
    n("Kira", true),
    n("Leo", false),
    n("Mona", true),
    n("Nico", false),
    n("Olga", true),
    n("Pablo", false),
    n("Rosa", true),
    n("Sami", false),
    n("Tara", true),
    n("Umar", false),
    n("Vera", true),
    n("Wim", false),
    n("Yara", true),
    n("Zeno", false),
    n("Clara", true),
    n("Bruno", false),
    n("Lina", true),
    n("Milo", false),
    n("Nora", true),
    n("Otto", false),
    n("Pia", true),
    n("Rafi", false),
];

/// Names of the held-out split (never in training text, nor in the tokenizer's corpus).
pub(crate) const NAMES_HELDOUT: &[Name] = &[
    n("Thea", true),
    n("Soren", false),
    n("Wanda", true),
    n("Viggo", false),
    n("Zara", true),
    n("Yusuf", false),
    n("Freya", true),
    n("Emre", false),
    n("Hedda", true),
    n("Gaspar", false),
    n("Juno", true),
    n("Ilya", false),
    n("Dagny", true),
    n("Bodo", false),
    n("Alba", true),
    n("Kaspar", false),
];

/// A noun with its plural.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Noun {
    /// Singular.
    pub sg: &'static str,
    /// Plural.
    pub pl: &'static str,
}

const fn nn(sg: &'static str, pl: &'static str) -> Noun {
    Noun { sg, pl }
}

/// Animals (the first [`ANIMALS`] entries) and people: subjects of verbs of action.
pub(crate) const ANIMATE: &[Noun] = &[
    nn("cat", "cats"),
    nn("dog", "dogs"),
    nn("bird", "birds"),
    nn("fox", "foxes"),
    nn("frog", "frogs"),
    nn("horse", "horses"),
    nn("rabbit", "rabbits"),
    nn("duck", "ducks"),
    nn("bear", "bears"),
    nn("goat", "goats"),
    nn("owl", "owls"),
    nn("girl", "girls"),
    nn("boy", "boys"),
    nn("teacher", "teachers"),
    nn("farmer", "farmers"),
    nn("baker", "bakers"),
    nn("friend", "friends"),
    nn("sister", "sisters"),
    nn("brother", "brothers"),
    nn("neighbour", "neighbours"),
];

/// How many of [`ANIMATE`] are animals (the rest are people).
pub(crate) const ANIMALS: usize = 11;

/// Things that can be held, found, or lost.
pub(crate) const THINGS: &[Noun] = &[
    nn("ball", "balls"),
    nn("box", "boxes"),
    nn("cup", "cups"),
    nn("hat", "hats"),
    nn("book", "books"),
    nn("lamp", "lamps"),
    nn("chair", "chairs"),
    nn("bag", "bags"),
    nn("coat", "coats"),
    nn("boat", "boats"),
    nn("kite", "kites"),
    nn("cake", "cakes"),
    nn("apple", "apples"),
    nn("shoe", "shoes"),
    nn("stone", "stones"),
    nn("bell", "bells"),
    nn("drum", "drums"),
    nn("map", "maps"),
    nn("letter", "letters"),
    nn("flower", "flowers"),
    nn("egg", "eggs"),
    nn("basket", "baskets"),
    nn("blanket", "blankets"),
    nn("spoon", "spoons"),
];

/// Places: the first [`AREAS`] are areas ("in the park"), the rest surfaces ("on the table").
pub(crate) const PLACES: &[Noun] = &[
    nn("park", "parks"),
    nn("garden", "gardens"),
    nn("kitchen", "kitchens"),
    nn("forest", "forests"),
    nn("river", "rivers"),
    nn("house", "houses"),
    nn("school", "schools"),
    nn("market", "markets"),
    nn("field", "fields"),
    nn("barn", "barns"),
    nn("room", "rooms"),
    nn("hill", "hills"),
    nn("table", "tables"),
    nn("bed", "beds"),
    nn("tree", "trees"),
    nn("bench", "benches"),
    nn("bridge", "bridges"),
];

/// How many of [`PLACES`] are areas.
pub(crate) const AREAS: usize = 11;

/// Adjectives of people and animals.
pub(crate) const ANIMATE_ADJECTIVES: &[&str] = &[
    "big", "small", "little", "old", "young", "happy", "sad", "tired", "hungry", "quiet", "loud",
    "kind", "brave", "funny", "clever", "gentle", "sleepy", "busy", "tall", "cold", "warm",
];

/// Adjectives of things and places (colours too, see [`COLORS`]).
pub(crate) const THING_ADJECTIVES: &[&str] = &[
    "big", "small", "little", "old", "new", "warm", "cold", "soft", "round", "shiny", "heavy",
    "empty", "clean", "wet", "tall", "quiet",
];

/// Colours: adjectives of the filler, and the first word of every retrieval key.
pub(crate) const COLORS: &[&str] = &[
    "red", "blue", "green", "yellow", "white", "black", "brown", "orange", "purple", "grey",
    "pink", "silver",
];

/// Things that have a code (the second word of every retrieval key).
pub(crate) const KEY_OBJECTS: &[&str] = &[
    "door", "safe", "gate", "locker", "chest", "drawer", "case", "cabinet", "lock", "vault",
    "trunk", "crate",
];

/// A verb's present (base and third person singular) and past forms.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Verb {
    /// Base form ("see").
    pub base: &'static str,
    /// Third person singular present ("sees").
    pub s3: &'static str,
    /// Simple past ("saw").
    pub past: &'static str,
}

const fn v(base: &'static str, s3: &'static str, past: &'static str) -> Verb {
    Verb { base, s3, past }
}

/// Verbs that take an object.
pub(crate) const TRANSITIVE: &[Verb] = &[
    v("see", "sees", "saw"),
    v("like", "likes", "liked"),
    v("find", "finds", "found"),
    v("take", "takes", "took"),
    v("open", "opens", "opened"),
    v("carry", "carries", "carried"),
    v("hold", "holds", "held"),
    v("want", "wants", "wanted"),
    v("help", "helps", "helped"),
    v("watch", "watches", "watched"),
    v("follow", "follows", "followed"),
    v("paint", "paints", "painted"),
    v("bring", "brings", "brought"),
    v("make", "makes", "made"),
    v("lose", "loses", "lost"),
    v("push", "pushes", "pushed"),
    v("hug", "hugs", "hugged"),
    v("give", "gives", "gave"),
    v("need", "needs", "needed"),
    v("clean", "cleans", "cleaned"),
    v("have", "has", "had"),
];

/// Transitive verbs whose object is a person or an animal.
pub(crate) const ANIMATE_OBJECT_VERBS: &[&str] = &["help", "follow", "hug"];

/// Transitive verbs whose object may be a person, an animal or a thing.
pub(crate) const ANY_OBJECT_VERBS: &[&str] = &["see", "like", "find", "watch", "paint", "need"];

/// Verbs without an object.
pub(crate) const INTRANSITIVE: &[Verb] = &[
    v("run", "runs", "ran"),
    v("sleep", "sleeps", "slept"),
    v("sing", "sings", "sang"),
    v("jump", "jumps", "jumped"),
    v("wait", "waits", "waited"),
    v("smile", "smiles", "smiled"),
    v("laugh", "laughs", "laughed"),
    v("walk", "walks", "walked"),
    v("swim", "swims", "swam"),
    v("play", "plays", "played"),
    v("dance", "dances", "danced"),
    v("rest", "rests", "rested"),
    v("sit", "sits", "sat"),
    v("go", "goes", "went"),
    v("look", "looks", "looked"),
    v("know", "knows", "knew"),
    v("cry", "cries", "cried"),
    v("hide", "hides", "hid"),
];

/// Prepositions (a preposition and a noun phrase make a place or a companion).
pub(crate) const PREPOSITIONS: &[&str] = &[
    "in", "on", "under", "near", "behind", "beside", "with", "to", "into", "at", "from",
];

/// Prepositions before an area ("in the park").
pub(crate) const AREA_PREPOSITIONS: &[&str] = &["in", "near", "behind", "beside"];

/// Prepositions before a surface ("on the table").
pub(crate) const SURFACE_PREPOSITIONS: &[&str] = &["on", "under", "near", "beside", "behind"];

/// Adverbs and adverbial phrases that end a verb phrase.
pub(crate) const ADVERBS: &[&str] = &[
    "slowly",
    "quickly",
    "quietly",
    "happily",
    "loudly",
    "again",
    "together",
    "every day",
    "all day",
    "at night",
    "in the morning",
    "after lunch",
];

/// Phrases that may open a statement (a comma may follow).
pub(crate) const OPENERS: &[&str] = &[
    "one day",
    "later",
    "then",
    "soon",
    "in the morning",
    "at night",
    "after that",
    "the next day",
    "in the end",
    "yes",
    "no",
    "oh",
];

/// Openers the stories use before a past-tense event.
pub(crate) const STORY_OPENERS: &[&str] = &[
    "one day",
    "later",
    "then",
    "soon",
    "after that",
    "the next day",
];

/// Conjunctions written after a comma.
pub(crate) const COMMA_CONJUNCTIONS: &[&str] = &["and", "but", "so"];

/// Conjunctions written without a comma.
pub(crate) const BARE_CONJUNCTIONS: &[&str] = &["and", "because", "when", "while"];

/// Whole-sentence interjections (written with '!').
pub(crate) const INTERJECTIONS: &[&str] =
    &["oh no", "hooray", "wow", "thank you", "okay", "yes", "no"];

/// Determiners of a singular noun (besides "a"/"an" and possessive names).
pub(crate) const DET_SG: &[&str] = &[
    "the", "my", "your", "his", "her", "our", "their", "this", "that", "every",
];

/// Determiners of a plural noun (besides possessive names).
pub(crate) const DET_PL: &[&str] = &[
    "the", "my", "your", "his", "her", "our", "their", "these", "those", "some", "two", "three",
    "many",
];

/// True when the indefinite article before `word` is "an".
pub(crate) fn takes_an(word: &str) -> bool {
    word.starts_with(['a', 'e', 'i', 'o', 'u'])
}

/// "a" or "an" before `word`.
pub(crate) fn article(word: &str) -> &'static str {
    if takes_an(word) {
        "an"
    } else {
        "a"
    }
}
