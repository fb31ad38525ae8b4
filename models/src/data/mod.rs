//! Seeded training and evaluation data written for this repository: simple English from a
//! grammar of our own and long-range retrieval tasks (skeleton; the generator lands here).
