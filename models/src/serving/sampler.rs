//! Per-request sampling: temperature, top-k and top-p over the request's own seeded RNG, so a
//! request's draws never depend on what else runs.

use crate::weights::Rng;

/// How one request chooses its tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// Softmax temperature; `0` is greedy (the largest logit, the lowest id on a tie).
    pub temperature: f32,
    /// Nucleus mass in `(0, 1]`; `1` keeps every candidate.
    pub top_p: f32,
    /// Candidates kept by logit before top-p; `0` keeps them all.
    pub top_k: usize,
    /// The request's RNG seed.
    pub seed: u64,
}

impl Default for SamplingParams {
    /// OpenAI's defaults: temperature 1, top-p 1, no top-k; seed 0.
    fn default() -> Self {
        SamplingParams {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            seed: 0,
        }
    }
}

impl SamplingParams {
    /// Greedy decoding.
    pub fn greedy() -> Self {
        SamplingParams {
            temperature: 0.0,
            ..SamplingParams::default()
        }
    }

    /// `Err((field, why))` if a parameter is out of range: temperature finite in `[0, 2]`
    /// (OpenAI's range), top-p in `(0, 1]`.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        let t = self.temperature;
        if !(t.is_finite() && (0.0..=2.0).contains(&t)) {
            return Err(("temperature", format!("{t} is not in [0, 2]")));
        }
        let p = self.top_p;
        if !(p.is_finite() && p > 0.0 && p <= 1.0) {
            return Err(("top_p", format!("{p} is not in (0, 1]")));
        }
        Ok(())
    }
}

/// A request's sampler: its parameters and its own RNG.
#[derive(Debug, Clone)]
pub struct Sampler {
    params: SamplingParams,
    rng: Rng,
}

impl Sampler {
    /// A sampler seeded with `params.seed`.
    pub fn new(params: SamplingParams) -> Self {
        let rng = Rng(params.seed);
        Sampler { params, rng }
    }

    /// The parameters.
    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// The next token from `logits` (one draw from the RNG unless greedy).
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        if self.params.temperature == 0.0 || logits.len() <= 1 {
            return crate::engine::argmax(logits);
        }
        let u = self.rng.uniform();
        sample_from(logits, &self.params, u)
    }
}

/// The token `u` (uniform in `[0, 1)`) picks from `softmax(logits / temperature)` restricted to
/// the `top_k` largest logits and then to the smallest prefix (by probability, ties by id)
/// whose mass reaches `top_p`. An empty `logits` gives 0.
pub fn sample_from(logits: &[f32], p: &SamplingParams, u: f32) -> u32 {
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    if p.top_k > 0 {
        order.truncate(p.top_k);
    }
    let Some(&first) = order.first() else {
        return 0;
    };
    let m = logits[first];
    let w: Vec<f64> = order
        .iter()
        .map(|&i| (((logits[i] - m) / p.temperature) as f64).exp())
        .collect();
    let total: f64 = w.iter().sum();
    let mut keep = 0;
    let mut mass = 0.0;
    while keep < w.len() {
        mass += w[keep];
        keep += 1;
        if mass >= p.top_p as f64 * total {
            break;
        }
    }
    let target = u as f64 * mass;
    let mut acc = 0.0;
    for (j, &wj) in w[..keep].iter().enumerate() {
        acc += wj;
        if acc > target {
            return order[j] as u32;
        }
    }
    order[keep - 1] as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(temperature: f32, top_p: f32, top_k: usize) -> SamplingParams {
        SamplingParams {
            temperature,
            top_p,
            top_k,
            seed: 7,
        }
    }

    #[test]
    fn greedy_top_k_and_top_p_cut_the_candidates() {
        let logits = [0.0, 3.0, 1.0, 3.0, 2.0];
        assert_eq!(Sampler::new(SamplingParams::greedy()).sample(&logits), 1);
        // top-k 1 is greedy whatever the draw.
        for u in [0.0, 0.5, 0.999] {
            assert_eq!(sample_from(&logits, &params(1.0, 1.0, 1), u), 1);
        }
        // A tiny top-p keeps only the first candidate (ties by id).
        assert_eq!(sample_from(&logits, &params(1.0, 0.01, 0), 0.999), 1);
        // top-k 2 keeps the two 3.0 logits, split evenly.
        assert_eq!(sample_from(&logits, &params(1.0, 1.0, 2), 0.25), 1);
        assert_eq!(sample_from(&logits, &params(1.0, 1.0, 2), 0.75), 3);
        // Without a cut, the top of the range reaches the smallest logit's candidate.
        assert_eq!(sample_from(&logits, &params(1.0, 1.0, 0), 0.99999), 0);
    }

    #[test]
    fn a_seed_replays_its_draws_and_ranges_are_checked() {
        let logits: Vec<f32> = (0..50).map(|i| ((i * 37) % 11) as f32 * 0.3).collect();
        let draw = |seed| {
            let mut s = Sampler::new(SamplingParams {
                seed,
                ..params(1.0, 0.9, 20)
            });
            (0..32).map(|_| s.sample(&logits)).collect::<Vec<_>>()
        };
        assert_eq!(draw(3), draw(3));
        assert_ne!(draw(3), draw(4));
        assert!(params(2.5, 1.0, 0).validate().is_err());
        assert!(params(f32::NAN, 1.0, 0).validate().is_err());
        assert!(params(1.0, 0.0, 0).validate().is_err());
        assert!(params(1.0, 1.5, 0).validate().is_err());
        assert!(params(0.0, 1.0, 0).validate().is_ok());
    }
}
