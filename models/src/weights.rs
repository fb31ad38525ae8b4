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
use tileops_ops::round_scale_19;
use tileops_ops::{quantize_per_channel, QuantizedWeight};

/// A weight-file error. Every error of [`Weights::load`] names the file, and the tensor
/// whenever one is involved (only a file that cannot be opened or whose header cannot be
/// read names none).
#[derive(Debug, thiserror::Error)]
pub enum WeightError {
    /// A tensor the config needs is not in the file.
    #[error("weights {path}: tensor `{name}` is missing")]
    Missing {
        /// The tensor.
        name: String,
        /// The file.
        path: String,
    },
    /// A tensor has the wrong shape or dtype.
    #[error("weights {path}: tensor `{name}` is {found}, but the config needs {want}")]
    Mismatch {
        /// The tensor.
        name: String,
        /// The file.
        path: String,
        /// What the file holds.
        found: String,
        /// What the config needs.
        want: String,
    },
    /// A tensor's data is unusable: a non-finite value, a scale that is not positive, bytes
    /// cut off by a truncated file.
    #[error("weights {path}: tensor `{name}`: {msg}")]
    BadValue {
        /// The tensor.
        name: String,
        /// The file.
        path: String,
        /// What is wrong, with the element and its value.
        msg: String,
    },
    /// File or format trouble that no single tensor is to blame for.
    #[error("weights {path}: {msg}")]
    Io {
        /// The file.
        path: String,
        /// What went wrong.
        msg: String,
    },
    /// A tensor is not among loaded weights ([`Weights::get`]).
    #[error("weights: tensor `{0}` is not among the loaded weights")]
    NotLoaded(String),
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
    /// dtype, shape, values) and copies it out. F32 values must be finite, int8 scales finite
    /// and positive; every error names the file and the tensor ([`WeightError`]).
    pub fn load(cfg: &Config, path: &Path) -> Result<Weights, WeightError> {
        Weights::load_where(cfg, path, |_| true)
    }

    /// Replaces the lightning indexer's tensors (`layers.{i}.indexer.*`) with those of the
    /// file `path`, which must hold every one of them for `cfg` (checked as [`Weights::load`]
    /// checks; other tensors in it are ignored): for instance the indexer as it was before
    /// its warm-up, which the demo's retrieval report compares.
    pub fn replace_indexer(&mut self, cfg: &Config, path: &Path) -> Result<(), WeightError> {
        let other = Weights::load_where(cfg, path, |s| s.name.contains(".indexer."))?;
        self.dense.extend(other.dense);
        Ok(())
    }

    /// [`Weights::load`] of the tensors of [`specs`] that `wanted` keeps.
    fn load_where(
        cfg: &Config,
        path: &Path,
        wanted: impl Fn(&Spec) -> bool,
    ) -> Result<Weights, WeightError> {
        let file_name = path.display().to_string();
        let io = |msg: String| WeightError::Io {
            path: file_name.clone(),
            msg,
        };
        let file = std::fs::File::open(path).map_err(|e| io(e.to_string()))?;
        // SAFETY: the map is read only and dropped at the end of this function, after every
        // tensor has been copied out of it. The file is not modified while mapped: the demo
        // writes it once, before loading, and nothing else in this process touches it (another
        // process rewriting it meanwhile is the usual, documented hazard of mmap'd checkpoints).
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| io(e.to_string()))?;
        let st = SafeTensors::deserialize(&map)
            .map_err(|e| diagnose_unreadable(&map, &file_name, &e.to_string()))?;
        let f = File {
            st: &st,
            path: &file_name,
        };
        let mut w = Weights::default();
        for s in specs(cfg).into_iter().filter(|s| wanted(s)) {
            if s.kind == Kind::Int8 {
                let q = f.int8(&s)?;
                w.quant.insert(s.name, q);
                continue;
            }
            let data = f.f32s(&s.name, &s.shape)?;
            let t = Tensor::from_vec(data, s.shape.as_slice(), &Device::Cpu)
                .map_err(|e| f.bad(&s.name, e.to_string()))?;
            w.dense.insert(s.name, t);
        }
        Ok(w)
    }

    /// The F32 tensor `name`.
    pub fn get(&self, name: &str) -> Result<Tensor, WeightError> {
        self.dense
            .get(name)
            .cloned()
            .ok_or_else(|| WeightError::NotLoaded(name.to_string()))
    }

    /// The int8 tensor `name`.
    pub fn get_quant(&self, name: &str) -> Result<QuantizedWeight, WeightError> {
        self.quant
            .get(name)
            .cloned()
            .ok_or_else(|| WeightError::NotLoaded(name.to_string()))
    }
}

/// A deserialized checkpoint and its file name, for errors.
struct File<'a> {
    st: &'a SafeTensors<'a>,
    path: &'a str,
}

impl File<'_> {
    fn bad(&self, name: &str, msg: String) -> WeightError {
        WeightError::BadValue {
            name: name.to_string(),
            path: self.path.to_string(),
            msg,
        }
    }

    fn view(&self, name: &str) -> Result<TensorView<'_>, WeightError> {
        self.st.tensor(name).map_err(|e| match e {
            safetensors::SafeTensorError::TensorNotFound(_) => WeightError::Missing {
                name: name.to_string(),
                path: self.path.to_string(),
            },
            other => self.bad(name, other.to_string()),
        })
    }

    /// A tensor of `dtype` and `shape`, else [`WeightError::Mismatch`] wanting `want`.
    fn checked_view(
        &self,
        name: &str,
        dtype: Dtype,
        shape: &[usize],
        want: &str,
    ) -> Result<TensorView<'_>, WeightError> {
        let view = self.view(name)?;
        if view.dtype() != dtype || view.shape() != shape {
            return Err(WeightError::Mismatch {
                name: name.to_string(),
                path: self.path.to_string(),
                found: format!("{:?} {:?}", view.dtype(), view.shape()),
                want: want.to_string(),
            });
        }
        Ok(view)
    }

    /// The finite F32 values of tensor `name` of `shape`.
    fn f32s(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, WeightError> {
        let want = format!("F32 {shape:?}");
        let view = self.checked_view(name, Dtype::F32, shape, &want)?;
        let data: Vec<f32> = view
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        if let Some(i) = data.iter().position(|v| !v.is_finite()) {
            return Err(self.bad(
                name,
                format!("element {i} is {}; weights must be finite", data[i]),
            ));
        }
        Ok(data)
    }

    /// The int8 weight `s.name` (I8 `[N, K]`) with its scales `{name}_scale` (F32 `[N]`, finite
    /// and positive).
    fn int8(&self, s: &Spec) -> Result<QuantizedWeight, WeightError> {
        self.checked_view(&s.name, Dtype::I8, &s.shape, &want_of(s))?;
        let n = s.shape.first().copied().unwrap_or(0);
        let sname = format!("{}_scale", s.name);
        let scales = self.f32s(&sname, &[n])?;
        if let Some(i) = scales.iter().position(|v| *v <= 0.0) {
            return Err(self.bad(
                &sname,
                format!(
                    "scale {i} (row {i} of `{}`) is {}; scales must be positive",
                    s.name, scales[i]
                ),
            ));
        }
        if let Some(i) = scales.iter().position(|v| round_scale_19(*v) <= 0.0) {
            return Err(self.bad(
                &sname,
                format!(
                    "scale {i} (row {i} of `{}`) is {:e}, which the Fixpipe's 19 bits round to 0; \
                     scales must be finite and positive",
                    s.name, scales[i]
                ),
            ));
        }
        // Anything the quantised weight still refuses (a scale that rounds to 0 in the
        // Fixpipe's 19 bits) is named too.
        QuantizedWeight::from_safetensors(self.st, &s.name)
            .map_err(|e| self.bad(&s.name, e.to_string()))
    }
}

fn want_of(s: &Spec) -> String {
    let dt = if s.kind == Kind::Int8 { "I8" } else { "F32" };
    format!("{dt} {:?}", s.shape)
}

/// The error for a file safetensors refuses: a truncated file names the first tensor whose
/// bytes are cut off (the header gives every tensor's byte range), else the header's trouble.
fn diagnose_unreadable(bytes: &[u8], path: &str, why: &str) -> WeightError {
    let io = |msg: String| WeightError::Io {
        path: path.to_string(),
        msg,
    };
    let len = bytes.len() as u64;
    let Some(head) = bytes.get(..8) else {
        return io(format!(
            "{len} bytes: too short for a safetensors header ({why})"
        ));
    };
    let n = u64::from_le_bytes([
        head[0], head[1], head[2], head[3], head[4], head[5], head[6], head[7],
    ]);
    let Some(end) = n.checked_add(8).filter(|&e| e <= len) else {
        return io(format!(
            "the header says it takes {n} bytes, but the file has {len} bytes in all: truncated or not safetensors ({why})"
        ));
    };
    let header: Option<serde_json::Map<String, serde_json::Value>> = bytes
        .get(8..end as usize)
        .and_then(|h| serde_json::from_slice(h).ok());
    let Some(header) = header else {
        return io(format!("the header is not valid JSON ({why})"));
    };
    let data = len - end;
    let mut cut: Vec<(u64, &String)> = header
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .filter_map(|(k, v)| {
            let stop = v.get("data_offsets")?.get(1)?.as_u64()?;
            (stop > data).then_some((stop, k))
        })
        .collect();
    cut.sort();
    match cut.first() {
        Some((stop, name)) => WeightError::BadValue {
            name: (*name).clone(),
            path: path.to_string(),
            msg: format!(
                "its bytes end at {stop} of the data section, but the file holds only {data} bytes of data: the file is truncated ({why})"
            ),
        },
        None => io(why.to_string()),
    }
}

impl From<tileops_ops::OpError> for WeightError {
    fn from(e: tileops_ops::OpError) -> Self {
        WeightError::Op(Box::new(e))
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
