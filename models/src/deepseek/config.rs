//! The model configuration, with DeepSeek-V3.2's inference field names.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// A configuration error, naming the field.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A field breaks a rule.
    #[error("config field `{field}`: {msg}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// What is wrong.
        msg: String,
    },
    /// The file could not be read or parsed.
    #[error("config {path}: {msg}")]
    Read {
        /// The file.
        path: String,
        /// What went wrong.
        msg: String,
    },
}

/// A DeepSeek-V3.2-style model configuration (field names as in DeepSeek's `config_*.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Vocabulary rows of the embedding and the head.
    pub vocab_size: usize,
    /// Hidden size.
    pub dim: usize,
    /// Dense MLP width.
    pub inter_dim: usize,
    /// Width of each routed and shared expert.
    pub moe_inter_dim: usize,
    /// Layers.
    pub n_layers: usize,
    /// Leading layers with a dense MLP instead of MoE.
    pub n_dense_layers: usize,
    /// Attention heads.
    pub n_heads: usize,
    /// Routed experts.
    pub n_routed_experts: usize,
    /// Shared experts (their widths add up).
    pub n_shared_experts: usize,
    /// Routed experts per token.
    pub n_activated_experts: usize,
    /// Expert groups.
    pub n_expert_groups: usize,
    /// Groups a token may route into.
    pub n_limited_groups: usize,
    /// Routed weights' scale.
    pub route_scale: f32,
    /// Query LoRA rank.
    pub q_lora_rank: usize,
    /// Key/value latent rank.
    pub kv_lora_rank: usize,
    /// Per-head query/key dims without RoPE.
    pub qk_nope_head_dim: usize,
    /// Per-head dims with RoPE (the shared `k_pe` too).
    pub qk_rope_head_dim: usize,
    /// Per-head value dims.
    pub v_head_dim: usize,
    /// Indexer heads.
    pub index_n_heads: usize,
    /// Indexer head dims.
    pub index_head_dim: usize,
    /// Tokens the indexer keeps per query.
    pub index_topk: usize,
    /// RoPE base.
    pub rope_theta: f32,
    /// YaRN context extension factor.
    pub rope_factor: f32,
    /// Context the RoPE was trained for (YaRN applies beyond it).
    pub original_seq_len: usize,
    /// YaRN fast boundary.
    pub beta_fast: f32,
    /// YaRN slow boundary.
    pub beta_slow: f32,
    /// YaRN attention-scale coefficient.
    pub mscale: f32,
    /// Longest sequence (prompt + generated).
    pub max_seq_len: usize,
}

impl Default for Config {
    /// The demo's pinned tiny shape (docs/models.md); not tuned for any backend.
    fn default() -> Self {
        Config {
            vocab_size: 1024,
            dim: 256,
            inter_dim: 512,
            moe_inter_dim: 128,
            n_layers: 4,
            n_dense_layers: 1,
            n_heads: 16,
            n_routed_experts: 8,
            n_shared_experts: 1,
            n_activated_experts: 2,
            n_expert_groups: 2,
            n_limited_groups: 1,
            route_scale: 2.5,
            q_lora_rank: 128,
            kv_lora_rank: 128,
            qk_nope_head_dim: 64,
            qk_rope_head_dim: 64,
            v_head_dim: 64,
            index_n_heads: 4,
            index_head_dim: 64,
            index_topk: 64,
            rope_theta: 10000.0,
            rope_factor: 40.0,
            original_seq_len: 4096,
            beta_fast: 32.0,
            beta_slow: 1.0,
            mscale: 1.0,
            max_seq_len: 512,
        }
    }
}

fn invalid(field: &'static str, msg: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field,
        msg: msg.into(),
    }
}

/// A pass over a config's object that fails on a field given twice, or on a document that is
/// not an object.
struct UniqueFields;

impl<'de> serde::de::Visitor<'de> for UniqueFields {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object of config fields")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            map.next_value::<serde::de::IgnoredAny>()?;
            if !seen.insert(key.clone()) {
                return Err(serde::de::Error::custom(format!("duplicate field `{key}`")));
            }
        }
        Ok(())
    }
}

impl Config {
    /// Reads and validates a JSON config: this crate's own files, and DeepSeek-V3.2's
    /// `config_671B_v3.2.json` as DeepSeek ships it.
    ///
    /// DeepSeek's files omit the YaRN fields and `max_seq_len`; a missing one takes V3.2's
    /// `ModelArgs` default ([`Config::V32_DEFAULTS`]). They also carry fields that describe
    /// DeepSeek's own weight files and runtime, which are checked and then dropped:
    /// `score_func` (must be `"sigmoid"`, the V3 router this model implements), `dtype`
    /// (`"bf16"` or `"fp8"`), `scale_fmt` (`null` or `"ue8m0"`) and `max_batch_size` (a positive
    /// integer). Any other unknown field is an error naming it (a misspelt field is not ignored).
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let read = |msg: String| ConfigError::Read {
            path: path.display().to_string(),
            msg,
        };
        let text = std::fs::read_to_string(path).map_err(|e| read(e.to_string()))?;
        let cfg = Config::from_json(&text).map_err(|e| match e {
            ConfigError::Read { msg, .. } => read(msg),
            e => e,
        })?;
        Ok(cfg)
    }

    /// The defaults V3.2's `ModelArgs` gives the fields its config files omit.
    pub const V32_DEFAULTS: [(&'static str, f64); 7] = [
        ("rope_theta", 10000.0),
        ("rope_factor", 40.0),
        ("original_seq_len", 4096.0),
        ("beta_fast", 32.0),
        ("beta_slow", 1.0),
        ("mscale", 1.0),
        ("max_seq_len", 16384.0),
    ];

    /// [`Config::from_file`] of a JSON text (a [`ConfigError::Read`] names no path).
    pub fn from_json(text: &str) -> Result<Config, ConfigError> {
        let read = |msg: String| ConfigError::Read {
            path: "(text)".into(),
            msg,
        };
        // A field twice is an error, as it is for a plain derived struct (a `Value` would keep
        // the last one silently).
        let mut de = serde_json::Deserializer::from_str(text);
        serde::Deserializer::deserialize_any(&mut de, UniqueFields)
            .map_err(|e| read(e.to_string()))?;
        let mut v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| read(e.to_string()))?;
        let obj = v
            .as_object_mut()
            .ok_or_else(|| read("the config is not a JSON object".into()))?;
        if let Some(f) = obj.get("score_func") {
            if f != "sigmoid" {
                return Err(invalid(
                    "score_func",
                    format!("{f} is not supported: this model routes with \"sigmoid\" (V3)"),
                ));
            }
        }
        if let Some(d) = obj.get("dtype") {
            if !(d == "bf16" || d == "fp8") {
                return Err(invalid("dtype", format!("{d} is not \"bf16\" or \"fp8\"")));
            }
        }
        if let Some(f) = obj.get("scale_fmt") {
            if !(f.is_null() || f == "ue8m0") {
                return Err(invalid(
                    "scale_fmt",
                    format!("{f} is not null or \"ue8m0\""),
                ));
            }
        }
        if let Some(b) = obj.get("max_batch_size") {
            if b.as_u64().is_none_or(|b| b == 0) {
                return Err(invalid(
                    "max_batch_size",
                    format!("{b} is not a positive integer"),
                ));
            }
        }
        for field in ["score_func", "dtype", "scale_fmt", "max_batch_size"] {
            obj.remove(field);
        }
        for (field, default) in Config::V32_DEFAULTS {
            if !obj.contains_key(field) {
                let n = serde_json::Number::from_f64(default)
                    .ok_or_else(|| read(format!("default of {field}")))?;
                let value = if default.fract() == 0.0 && field.ends_with("_len") {
                    serde_json::Value::from(default as u64)
                } else {
                    serde_json::Value::Number(n)
                };
                obj.insert(field.into(), value);
            }
        }
        let cfg: Config = serde_json::from_value(v).map_err(|e| read(e.to_string()))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks every rule the model relies on.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let positive = [
            ("vocab_size", self.vocab_size),
            ("dim", self.dim),
            ("inter_dim", self.inter_dim),
            ("moe_inter_dim", self.moe_inter_dim),
            ("n_layers", self.n_layers),
            ("n_heads", self.n_heads),
            ("n_routed_experts", self.n_routed_experts),
            ("n_activated_experts", self.n_activated_experts),
            ("n_expert_groups", self.n_expert_groups),
            ("n_limited_groups", self.n_limited_groups),
            ("q_lora_rank", self.q_lora_rank),
            ("kv_lora_rank", self.kv_lora_rank),
            ("qk_nope_head_dim", self.qk_nope_head_dim),
            ("qk_rope_head_dim", self.qk_rope_head_dim),
            ("v_head_dim", self.v_head_dim),
            ("index_n_heads", self.index_n_heads),
            ("index_head_dim", self.index_head_dim),
            ("index_topk", self.index_topk),
            ("original_seq_len", self.original_seq_len),
            ("max_seq_len", self.max_seq_len),
        ];
        for (field, v) in positive {
            if v == 0 {
                return Err(invalid(field, "must be at least 1"));
            }
        }
        if self.n_dense_layers > self.n_layers {
            return Err(invalid("n_dense_layers", "must not exceed n_layers"));
        }
        if !self.qk_rope_head_dim.is_multiple_of(2) {
            return Err(invalid(
                "qk_rope_head_dim",
                "must be even (RoPE rotates pairs)",
            ));
        }
        if self.index_head_dim < self.qk_rope_head_dim {
            return Err(invalid(
                "index_head_dim",
                "must be at least qk_rope_head_dim (the indexer ropes its first dims)",
            ));
        }
        if !self.n_routed_experts.is_multiple_of(self.n_expert_groups) {
            return Err(invalid("n_expert_groups", "must divide n_routed_experts"));
        }
        if self.n_limited_groups > self.n_expert_groups {
            return Err(invalid(
                "n_limited_groups",
                "must not exceed n_expert_groups",
            ));
        }
        let per_group = self.n_routed_experts / self.n_expert_groups;
        if self.n_activated_experts > self.n_limited_groups * per_group {
            return Err(invalid(
                "n_activated_experts",
                "must not exceed the experts of the n_limited_groups groups",
            ));
        }
        for (field, v) in [
            ("rope_theta", self.rope_theta),
            ("rope_factor", self.rope_factor),
            ("route_scale", self.route_scale),
            ("mscale", self.mscale),
            ("beta_fast", self.beta_fast),
            ("beta_slow", self.beta_slow),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(invalid(field, "must be finite and positive"));
            }
        }
        Ok(())
    }

    /// Whether YaRN extends the context (`max_seq_len > original_seq_len`).
    pub fn yarn(&self) -> bool {
        self.max_seq_len > self.original_seq_len
    }

    /// MLA's softmax scale: `(qk_nope + qk_rope)^-0.5`, times YaRN's mscale² when it extends.
    pub fn softmax_scale(&self) -> f32 {
        let base = ((self.qk_nope_head_dim + self.qk_rope_head_dim) as f32).powf(-0.5);
        if self.yarn() {
            let m = 0.1 * self.mscale * self.rope_factor.ln() + 1.0;
            base * m * m
        } else {
            base
        }
    }

    /// The RoPE frequencies of the `qk_rope_head_dim / 2` pairs, YaRN-corrected when it extends.
    pub fn rope_freqs(&self) -> Vec<f32> {
        let d = self.qk_rope_head_dim;
        let theta = self.rope_theta as f64;
        let base: Vec<f64> = (0..d / 2)
            .map(|i| 1.0 / theta.powf(2.0 * i as f64 / d as f64))
            .collect();
        if !self.yarn() {
            return base.into_iter().map(|f| f as f32).collect();
        }
        // The pair index whose wavelength fits `rotations` turns in the original context.
        let dim_for = |rotations: f64| {
            d as f64
                * (self.original_seq_len as f64 / (rotations * 2.0 * std::f64::consts::PI)).ln()
                / (2.0 * theta.ln())
        };
        let low = dim_for(self.beta_fast as f64).floor().max(0.0);
        let high = dim_for(self.beta_slow as f64).ceil().min(d as f64 - 1.0);
        let span = if high > low { high - low } else { 1e-3 };
        let factor = self.rope_factor as f64;
        base.iter()
            .enumerate()
            .map(|(i, &f)| {
                let ramp = ((i as f64 - low) / span).clamp(0.0, 1.0);
                let keep = 1.0 - ramp;
                (f / factor * (1.0 - keep) + f * keep) as f32
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid_and_errors_name_the_field() {
        Config::default().validate().unwrap();
        let c = Config {
            n_expert_groups: 3,
            ..Config::default()
        };
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("n_expert_groups"));
        let c = Config {
            dim: 0,
            ..Config::default()
        };
        assert!(c.validate().unwrap_err().to_string().contains("`dim`"));
        let json = serde_json::to_string(&Config::default()).unwrap();
        let back: Config = serde_json::from_str(&json).unwrap();
        assert_eq!(back, Config::default());
        let long = Config {
            max_seq_len: 8192,
            ..Config::default()
        };
        assert!(long.softmax_scale() > Config::default().softmax_scale());
        let path = std::env::temp_dir().join(format!("tileops-cfg-{}.json", std::process::id()));
        let mut v = serde_json::to_value(Config::default()).unwrap();
        v["n_limited_groups"] = 5.into();
        std::fs::write(&path, v.to_string()).unwrap();
        let err = Config::from_file(&path).unwrap_err().to_string();
        assert!(err.contains("n_limited_groups"), "{err}");
        v["n_limited_groups"] = 1.into();
        v["hidden_size"] = 7.into();
        std::fs::write(&path, v.to_string()).unwrap();
        let err = Config::from_file(&path).unwrap_err().to_string();
        assert!(err.contains("hidden_size"), "{err}");
        v.as_object_mut().unwrap().remove("hidden_size");
        std::fs::write(&path, v.to_string()).unwrap();
        assert_eq!(Config::from_file(&path).unwrap(), Config::default());
        std::fs::remove_file(&path).ok();
        let (a, b) = (long.rope_freqs(), Config::default().rope_freqs());
        assert_eq!(a[0], b[0]);
        assert!((a[31] - b[31] / 40.0).abs() < 1e-9);
    }
}
