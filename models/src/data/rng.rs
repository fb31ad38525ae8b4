//! A small seeded generator (SplitMix64): the data must not depend on any crate's RNG stream,
//! so a seed names the same text on every machine and every dependency version.

/// SplitMix64's output function: a bijective mix of 64 bits.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A deterministic random stream (SplitMix64).
#[derive(Debug, Clone)]
pub(crate) struct Rng {
    state: u64,
}

impl Rng {
    /// A stream for `seed`, kept apart from other uses of the same seed by `stream`.
    pub(crate) fn new(seed: u64, stream: u64) -> Rng {
        Rng {
            state: mix(seed ^ mix(stream.wrapping_add(0x5eed))),
        }
    }

    /// The next 64 random bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.state)
    }

    /// A uniform integer in `0..n` (`n > 0`; 0 when `n == 0`).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        // 128-bit multiply-shift: unbiased enough for text generation, exact and portable.
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }

    /// A uniform integer in `lo..=hi`.
    pub(crate) fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi.saturating_sub(lo) + 1)
    }

    /// True with probability `p`.
    pub(crate) fn chance(&mut self, p: f64) -> bool {
        ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
    }

    /// A uniform element of a non-empty slice.
    pub(crate) fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// A seed for a sub-generator (a new independent stream).
    pub(crate) fn fork(&mut self) -> u64 {
        self.next_u64()
    }

    /// Shuffles `items` in place (Fisher-Yates).
    pub(crate) fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i + 1);
            items.swap(i, j);
        }
    }
}
