//! Weights: the tensor list of a [`Config`] with DeepSeek-like names, deterministic tiny
//! weights from a seed written as a safetensors checkpoint, and the loader that memory-maps a
//! checkpoint and refuses missing tensors and wrong shapes, naming the tensor.
//!
//! Routed experts are stored int8 per output channel (`name` I8 `[N, K]` and `{name}_scale` F32
//! `[N]`, see `tileops_ops::QuantizedWeight`); everything else is F32.

use crate::deepseek::config::Config;
use candle_core::{Device, Tensor};
use safetensors::{tensor::TensorView, Dtype, SafeTensors};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use tileops_ops::{quantize_per_channel, QuantizedWeight};

/// A weight-file error, naming the tensor or the file.
#[derive(Debug, thiserror::Error)]
pub enum WeightError {
    /// A tensor the config needs is not in the file.
    #[error("weights: tensor `{0}` is missing")]
    Missing(String),
    /// A tensor has the wrong shape or dtype.
    #[error("weights: tensor `{name}` is {found}, but the config needs {want}")]
    Mismatch {
        /// The tensor.
        name: String,
        /// What the file holds.
        found: String,
        /// What the config needs.
        want: String,
    },
    /// File or format trouble.
    #[error("weights {path}: {msg}")]
    Io {
        /// The file.
        path: String,
        /// What went wrong.
        msg: String,
    },
    /// A tensor operation failed.
    #[error("weights: {0}")]
    Op(#[from] Box<tileops_ops::OpError>),
    /// A candle operation failed.
    #[error("weights: {0}")]
    Candle(#[from] candle_core::Error),
}

/// How a tensor is stored and initialised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// F32, uniform in `±fan_in^-0.5`.
    Dense,
    /// F32 ones (norm weights).
    Ones,
    /// F32 zeros (LayerNorm biases).
    Zeros,
    /// F32, small uniform (the router's bias).
    Bias,
    /// Int8 per channel (routed experts).
    Int8,
}

/// One tensor of the checkpoint.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Its name.
    pub name: String,
    /// Its shape.
    pub shape: Vec<usize>,
    /// Storage and initialisation.
    pub kind: Kind,
}

fn spec(name: String, shape: &[usize], kind: Kind) -> Spec {
    Spec {
        name,
        shape: shape.to_vec(),
        kind,
    }
}

fn mlp(out: &mut Vec<Spec>, p: &str, dim: usize, inter: usize, kind: Kind) {
    out.push(spec(format!("{p}.w1.weight"), &[inter, dim], kind));
    out.push(spec(format!("{p}.w2.weight"), &[dim, inter], kind));
    out.push(spec(format!("{p}.w3.weight"), &[inter, dim], kind));
}

/// Every tensor a model of `cfg` needs.
pub fn specs(cfg: &Config) -> Vec<Spec> {
    use Kind::*;
    let (d, h) = (cfg.dim, cfg.n_heads);
    let qk = cfg.qk_nope_head_dim + cfg.qk_rope_head_dim;
    let mut v = vec![spec("embed.weight".into(), &[cfg.vocab_size, d], Dense)];
    for i in 0..cfg.n_layers {
        let a = format!("layers.{i}.attn");
        v.push(spec(format!("layers.{i}.attn_norm.weight"), &[d], Ones));
        v.push(spec(format!("layers.{i}.ffn_norm.weight"), &[d], Ones));
        v.push(spec(
            format!("{a}.wq_a.weight"),
            &[cfg.q_lora_rank, d],
            Dense,
        ));
        v.push(spec(format!("{a}.q_norm.weight"), &[cfg.q_lora_rank], Ones));
        v.push(spec(
            format!("{a}.wq_b.weight"),
            &[h * qk, cfg.q_lora_rank],
            Dense,
        ));
        let kv_a = cfg.kv_lora_rank + cfg.qk_rope_head_dim;
        v.push(spec(format!("{a}.wkv_a.weight"), &[kv_a, d], Dense));
        v.push(spec(
            format!("{a}.kv_norm.weight"),
            &[cfg.kv_lora_rank],
            Ones,
        ));
        let kv_b = h * (cfg.qk_nope_head_dim + cfg.v_head_dim);
        v.push(spec(
            format!("{a}.wkv_b.weight"),
            &[kv_b, cfg.kv_lora_rank],
            Dense,
        ));
        v.push(spec(
            format!("{a}.wo.weight"),
            &[d, h * cfg.v_head_dim],
            Dense,
        ));
        let ih = cfg.index_n_heads * cfg.index_head_dim;
        v.push(spec(
            format!("{a}.indexer.wq_b.weight"),
            &[ih, cfg.q_lora_rank],
            Dense,
        ));
        v.push(spec(
            format!("{a}.indexer.wk.weight"),
            &[cfg.index_head_dim, d],
            Dense,
        ));
        v.push(spec(
            format!("{a}.indexer.k_norm.weight"),
            &[cfg.index_head_dim],
            Ones,
        ));
        v.push(spec(
            format!("{a}.indexer.k_norm.bias"),
            &[cfg.index_head_dim],
            Zeros,
        ));
        v.push(spec(
            format!("{a}.indexer.weights_proj.weight"),
            &[cfg.index_n_heads, d],
            Dense,
        ));
        let f = format!("layers.{i}.ffn");
        if i < cfg.n_dense_layers {
            mlp(&mut v, &f, d, cfg.inter_dim, Dense);
        } else {
            v.push(spec(
                format!("{f}.gate.weight"),
                &[cfg.n_routed_experts, d],
                Dense,
            ));
            v.push(spec(
                format!("{f}.gate.bias"),
                &[cfg.n_routed_experts],
                Bias,
            ));
            for e in 0..cfg.n_routed_experts {
                mlp(
                    &mut v,
                    &format!("{f}.experts.{e}"),
                    d,
                    cfg.moe_inter_dim,
                    Int8,
                );
            }
            let shared = cfg.n_shared_experts * cfg.moe_inter_dim;
            if shared > 0 {
                mlp(&mut v, &format!("{f}.shared_experts"), d, shared, Dense);
            }
        }
    }
    v.push(spec("norm.weight".into(), &[d], Ones));
    v.push(spec("head.weight".into(), &[cfg.vocab_size, d], Dense));
    v
}

/// A small deterministic PRNG (splitmix64).
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// Loaded weights: F32 tensors and int8 expert weights by name.
#[derive(Debug, Clone, Default)]
pub struct Weights {
    /// F32 tensors.
    pub dense: HashMap<String, Tensor>,
    /// Int8 per-channel tensors.
    pub quant: HashMap<String, QuantizedWeight>,
}

impl Weights {
    /// Deterministic weights for `cfg` from `seed`.
    pub fn generate(cfg: &Config, seed: u64) -> Result<Weights, WeightError> {
        let mut rng = Rng(seed);
        let mut w = Weights::default();
        for s in specs(cfg) {
            let n: usize = s.shape.iter().product();
            let bound = match s.kind {
                Kind::Ones | Kind::Zeros => 0.0,
                Kind::Bias => 0.1,
                Kind::Dense | Kind::Int8 => (*s.shape.last().unwrap_or(&1) as f32).powf(-0.5),
            };
            let data: Vec<f32> = (0..n)
                .map(|_| match s.kind {
                    Kind::Ones => 1.0,
                    Kind::Zeros => 0.0,
                    _ => (2.0 * rng.uniform() - 1.0) * bound,
                })
                .collect();
            let t = Tensor::from_vec(data, s.shape.as_slice(), &Device::Cpu)?;
            if s.kind == Kind::Int8 {
                w.quant.insert(s.name, quantize_per_channel(&t)?);
            } else {
                w.dense.insert(s.name, t);
            }
        }
        Ok(w)
    }

    /// Writes the weights as one safetensors file.
    pub fn save(&self, path: &Path) -> Result<(), WeightError> {
        let io = |msg: String| WeightError::Io {
            path: path.display().to_string(),
            msg,
        };
        let mut bytes: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
        for (name, t) in &self.dense {
            let v = t.flatten_all()?.to_vec1::<f32>()?;
            let b = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            bytes.push((name.clone(), t.dims().to_vec(), b));
        }
        let mut views: Vec<(String, TensorView<'_>)> = Vec::new();
        for (name, shape, b) in &bytes {
            let view =
                TensorView::new(Dtype::F32, shape.clone(), b).map_err(|e| io(e.to_string()))?;
            views.push((name.clone(), view));
        }
        for (name, q) in &self.quant {
            views.extend(q.safetensors_entries(name));
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| io(e.to_string()))?;
        }
        safetensors::serialize_to_file(views, None, path).map_err(|e| io(e.to_string()))
    }

    /// Loads a checkpoint for `cfg`: memory-maps `path`, checks every tensor of [`specs`] (name,
    /// dtype, shape) and copies it out.
    pub fn load(cfg: &Config, path: &Path) -> Result<Weights, WeightError> {
        let io = |msg: String| WeightError::Io {
            path: path.display().to_string(),
            msg,
        };
        let file = std::fs::File::open(path).map_err(|e| io(e.to_string()))?;
        // SAFETY: the map is read only and dropped at the end of this function, after every
        // tensor has been copied out of it. The file is not modified while mapped: the demo
        // writes it once, before loading, and nothing else in this process touches it (another
        // process rewriting it meanwhile is the usual, documented hazard of mmap'd checkpoints).
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| io(e.to_string()))?;
        let st = SafeTensors::deserialize(&map).map_err(|e| io(e.to_string()))?;
        let names: std::collections::HashSet<String> =
            st.names().into_iter().map(str::to_string).collect();
        let mut w = Weights::default();
        for s in specs(cfg) {
            if !names.contains(&s.name) {
                return Err(WeightError::Missing(s.name));
            }
            if s.kind == Kind::Int8 {
                let q = QuantizedWeight::from_safetensors(&st, &s.name)?;
                if [q.n(), q.k()] != s.shape[..] {
                    return Err(mismatch(&s, format!("I8 {:?}", [q.n(), q.k()])));
                }
                w.quant.insert(s.name, q);
                continue;
            }
            let view = st.tensor(&s.name).map_err(|e| io(e.to_string()))?;
            if view.dtype() != Dtype::F32 || view.shape() != s.shape.as_slice() {
                return Err(mismatch(
                    &s,
                    format!("{:?} {:?}", view.dtype(), view.shape()),
                ));
            }
            let data: Vec<f32> = view
                .data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            let t = Tensor::from_vec(data, s.shape.as_slice(), &Device::Cpu)?;
            w.dense.insert(s.name, t);
        }
        Ok(w)
    }

    /// The F32 tensor `name`.
    pub fn get(&self, name: &str) -> Result<Tensor, WeightError> {
        self.dense
            .get(name)
            .cloned()
            .ok_or_else(|| WeightError::Missing(name.to_string()))
    }

    /// The int8 tensor `name`.
    pub fn get_quant(&self, name: &str) -> Result<QuantizedWeight, WeightError> {
        self.quant
            .get(name)
            .cloned()
            .ok_or_else(|| WeightError::Missing(name.to_string()))
    }
}

impl From<tileops_ops::OpError> for WeightError {
    fn from(e: tileops_ops::OpError) -> Self {
        WeightError::Op(Box::new(e))
    }
}

fn mismatch(s: &Spec, found: String) -> WeightError {
    let dt = if s.kind == Kind::Int8 { "I8" } else { "F32" };
    WeightError::Mismatch {
        name: s.name.clone(),
        found,
        want: format!("{dt} {:?}", s.shape),
    }
}

/// The default cache folder of generated weights and tokenizers (`target/tileops-models`).
pub fn cache_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(t) => PathBuf::from(t).join("tileops-models"),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/tileops-models"),
    }
}

/// A short stable hash of the config (FNV-1a of its JSON), to name cached files.
pub fn config_hash(cfg: &Config) -> String {
    let json = serde_json::to_string(cfg).unwrap_or_default();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in json.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
    }
    format!("{h:016x}")
}

/// The version of [`specs`]' tensor list, in the generated checkpoints' names: bumped when a
/// tensor is added or renamed, so a cached file of an older list is not picked up (2: the
/// indexer's `k_norm.bias`).
pub const FORMAT: u32 = 2;

/// The checkpoint of `cfg` and `seed` in `dir`: generated and written on first use, then loaded
/// through [`Weights::load`] like any checkpoint.
pub fn load_or_generate(
    cfg: &Config,
    seed: u64,
    dir: &Path,
) -> Result<(Weights, PathBuf), WeightError> {
    let path = dir.join(format!(
        "deepseek-tiny-v{FORMAT}-{}-seed{seed}.safetensors",
        config_hash(cfg)
    ));
    if !path.exists() {
        let tmp = path.with_extension("tmp");
        Weights::generate(cfg, seed)?.save(&tmp)?;
        std::fs::rename(&tmp, &path).map_err(|e| WeightError::Io {
            path: path.display().to_string(),
            msg: e.to_string(),
        })?;
    }
    Ok((Weights::load(cfg, &path)?, path))
}
