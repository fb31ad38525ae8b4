//! The optimiser pieces: AdamW with its moments kept where they can be saved and resumed,
//! gradient-norm clipping, and the warm-up + cosine learning-rate schedule.
//!
//! candle-nn 0.11's `AdamW` keeps its moments private (no way to save them), so a run could
//! not resume from saved optimiser state; this one is the same update (decoupled weight decay,
//! bias-corrected moments) with the moments in a map by parameter name.

use super::Result;
use candle_core::backprop::GradStore;
use candle_core::{Device, Tensor, Var};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// AdamW hyper-parameters.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AdamParams {
    /// First-moment decay.
    pub beta1: f64,
    /// Second-moment decay.
    pub beta2: f64,
    /// Denominator epsilon.
    pub eps: f64,
    /// Decoupled weight decay (applied to matrices only).
    pub weight_decay: f64,
}

impl Default for AdamParams {
    fn default() -> Self {
        AdamParams {
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-8,
            weight_decay: 0.1,
        }
    }
}

/// AdamW over named parameters; a parameter's moments start when it first gets a gradient.
#[derive(Debug, Default)]
pub struct AdamW {
    /// The hyper-parameters.
    pub params: AdamParams,
    /// `(m, v, updates)` per parameter name.
    state: BTreeMap<String, (Tensor, Tensor, u64)>,
}

impl AdamW {
    /// An optimiser with no state yet.
    pub fn new(params: AdamParams) -> AdamW {
        AdamW {
            params,
            state: BTreeMap::new(),
        }
    }

    /// One update of every `(name, var)` in `vars` that has a gradient in `grads`, the
    /// gradients scaled by `grad_scale` (the clipping factor), at learning rate `lr`.
    pub fn step<'a>(
        &mut self,
        vars: impl Iterator<Item = (&'a String, &'a Var)>,
        grads: &GradStore,
        grad_scale: f64,
        lr: f64,
    ) -> Result<()> {
        let AdamParams {
            beta1,
            beta2,
            eps,
            weight_decay,
        } = self.params;
        for (name, var) in vars {
            let Some(g) = grads.get(var.as_tensor()) else {
                continue;
            };
            let g = (g * grad_scale)?;
            let (m, v, t) = match self.state.remove(name) {
                Some(s) => s,
                None => (g.zeros_like()?, g.zeros_like()?, 0),
            };
            let t = t + 1;
            let m = ((m * beta1)? + (&g * (1.0 - beta1))?)?;
            let v = ((v * beta2)? + (g.sqr()? * (1.0 - beta2))?)?;
            let m_hat = (&m / (1.0 - beta1.powi(t as i32)))?;
            let v_hat = (&v / (1.0 - beta2.powi(t as i32)))?;
            let decay = if var.rank() >= 2 { weight_decay } else { 0.0 };
            let theta = (var.as_tensor() * (1.0 - lr * decay))?;
            let upd = (m_hat / (v_hat.sqrt()? + eps)?)?;
            var.set(&(theta - (upd * lr)?)?)?;
            self.state.insert(name.clone(), (m, v, t));
        }
        Ok(())
    }

    /// Writes the moments (`m.NAME`, `v.NAME`) and update counts (`t.NAME`, one u32 pair of
    /// the count's low and high words) as safetensors.
    pub fn save(&self, path: &Path) -> Result<()> {
        let mut map = HashMap::new();
        for (name, (m, v, t)) in &self.state {
            map.insert(format!("m.{name}"), m.clone());
            map.insert(format!("v.{name}"), v.clone());
            let words = vec![*t as u32, (*t >> 32) as u32];
            map.insert(
                format!("t.{name}"),
                Tensor::from_vec(words, 2, &Device::Cpu)?,
            );
        }
        candle_core::safetensors::save(&map, path)?;
        Ok(())
    }

    /// Reads the state [`AdamW::save`] wrote.
    pub fn load(&mut self, path: &Path) -> Result<()> {
        let map = candle_core::safetensors::load(path, &Device::Cpu)?;
        self.state.clear();
        for (key, m) in &map {
            let Some(name) = key.strip_prefix("m.") else {
                continue;
            };
            let missing = |what: &str| {
                super::TrainError::Invalid(format!(
                    "optimiser state {}: `{what}.{name}` is missing",
                    path.display()
                ))
            };
            let v = map.get(&format!("v.{name}")).ok_or_else(|| missing("v"))?;
            let t = map.get(&format!("t.{name}")).ok_or_else(|| missing("t"))?;
            let w = t.to_vec1::<u32>()?;
            let t = w.first().copied().unwrap_or(0) as u64
                | (w.get(1).copied().unwrap_or(0) as u64) << 32;
            self.state
                .insert(name.to_string(), (m.clone(), v.clone(), t));
        }
        Ok(())
    }
}

/// The global L2 norm of the gradients of `vars`.
pub fn grad_norm<'a>(vars: impl Iterator<Item = &'a Var>, grads: &GradStore) -> Result<f64> {
    let mut sq = 0.0f64;
    for v in vars {
        if let Some(g) = grads.get(v.as_tensor()) {
            sq += g
                .sqr()?
                .sum_all()?
                .to_dtype(candle_core::DType::F64)?
                .to_scalar::<f64>()?;
        }
    }
    Ok(sq.sqrt())
}

/// The scale that brings a gradient of norm `norm` down to `max_norm` (1 when it is below).
pub fn clip_scale(norm: f64, max_norm: f64) -> f64 {
    if norm.is_finite() && norm > max_norm && norm > 0.0 {
        max_norm / norm
    } else {
        1.0
    }
}

/// A linear warm-up over `warmup` steps to `peak`, then a cosine decay to `floor` at `total`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Schedule {
    /// The peak learning rate.
    pub peak: f64,
    /// The final learning rate.
    pub floor: f64,
    /// Warm-up steps.
    pub warmup: u64,
    /// Steps of the whole schedule.
    pub total: u64,
}

impl Schedule {
    /// The learning rate of step `step` (0-based).
    pub fn lr(&self, step: u64) -> f64 {
        if step < self.warmup {
            return self.peak * (step + 1) as f64 / self.warmup as f64;
        }
        let span = self.total.saturating_sub(self.warmup).max(1) as f64;
        let done = ((step - self.warmup) as f64 / span).min(1.0);
        self.floor + 0.5 * (self.peak - self.floor) * (1.0 + (std::f64::consts::PI * done).cos())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_warms_up_then_decays_to_the_floor() {
        let s = Schedule {
            peak: 1e-3,
            floor: 1e-4,
            warmup: 10,
            total: 110,
        };
        assert!((s.lr(0) - 1e-4).abs() < 1e-12);
        assert!((s.lr(9) - 1e-3).abs() < 1e-12);
        assert!((s.lr(10) - 1e-3).abs() < 1e-12);
        assert!((s.lr(60) - 5.5e-4).abs() < 1e-12);
        assert!((s.lr(110) - 1e-4).abs() < 1e-12);
        assert!((s.lr(500) - 1e-4).abs() < 1e-12);
        assert_eq!(clip_scale(2.0, 1.0), 0.5);
        assert_eq!(clip_scale(0.5, 1.0), 1.0);
        assert_eq!(clip_scale(f64::NAN, 1.0), 1.0);
    }
}
