//! `sparse_paged_attention`: DeepSeek-V3.2 sparse (top-k) attention decode over a paged latent
//! cache, in the absorbed MLA form, as a candle op.

pub mod kernel;
mod reference;

use crate::backend::Backend;
use crate::bridge::{self, Bridge};
use crate::error::OpError;
use candle_core::{CpuStorage, CustomOp2, DType, Layout, Shape, Tensor};
use kernel::SparseProblem;
use tile_backend::launch::GmTensor;

const OP: &str = "sparse_paged_attention";

/// The scalar parameters and optional extras of [`sparse_paged_attention`].
#[derive(Debug, Clone)]
pub struct SparseAttentionParams {
    /// V columns: V is the first `v_dim` columns of each cache row (`1..=Dqk`).
    pub v_dim: usize,
    /// Softmax scale multiplying the f32 scores (must be finite; DeepSeek-V3.2 uses 0.13523).
    pub scale: f32,
    /// Optional `[B]` (I32/I64): only the leftmost `topk_length[b]` entries of row `b` of
    /// `indices` count (each in `0..=topk`); later entries are ignored and may hold anything.
    pub topk_length: Option<Tensor>,
    /// Optional per-head attention sink, f32 `[H]`: `out *= 1 / (1 + exp(sink[h] - lse))`.
    pub sink: Option<Tensor>,
}

impl SparseAttentionParams {
    /// Parameters without `topk_length` and sink.
    pub fn new(v_dim: usize, scale: f32) -> Self {
        SparseAttentionParams {
            v_dim,
            scale,
            topk_length: None,
            sink: None,
        }
    }
}

/// Sparse top-k attention over a paged latent cache: returns `(out [B, H, v_dim]` in q's dtype,
/// `lse [B, H]` f32`)`.
///
/// `q [B, H, Dqk]` and `kv_cache [num_blocks, block_size, Dqk]` share one dtype (f32, f16,
/// bf16). `indices [B, topk]` (I32/I64) are logical token positions mapped through `block_table
/// [B, max_blocks]` (I32/I64/U32): slot `block_table[b, t / block_size] * block_size + t %
/// block_size`; `-1` marks an invalid entry (skipped), any other value must be in
/// `0..max_blocks * block_size` and reach a table entry in `0..num_blocks` (unreached entries
/// are not checked, so tables may be padded with -1). Each cache row is K; V is its first
/// `v_dim` columns. `s_j = scale * q . K_j` (f32), `out = softmax(s) . V`, `lse = ln sum exp(s)`
/// (natural log, without the sink). Duplicated indices count twice. A row with no valid index
/// gives `out = 0`, `lse = +inf`. Non-contiguous `q`/`kv_cache` are made contiguous first.
///
/// # Errors
/// [`OpError::Invalid`] naming the argument for any broken rule; [`OpError::DeviceUnavailable`]
/// for [`Backend::Ascend950`] after the package is written; kernel errors for
/// [`Backend::TileSim`].
pub fn sparse_paged_attention(
    q: &Tensor,
    kv_cache: &Tensor,
    indices: &Tensor,
    block_table: &Tensor,
    params: &SparseAttentionParams,
    backend: Option<Backend>,
) -> Result<(Tensor, Tensor), OpError> {
    let backend = bridge::resolve_backend(backend)?;
    let v = validate(q, kv_cache, indices, block_table, params)?;
    match backend {
        Backend::Reference => reference::sparse_paged_attention(q, kv_cache, &v),
        Backend::TileSim | Backend::Ascend950 => {
            let op = SparseOp {
                v,
                backend,
                bridge: Bridge::new(OP),
            };
            let (out, lse) = op.bridge.finish(
                q.contiguous()?
                    .apply_op2_no_bwd(&kv_cache.contiguous()?, &op),
            )?;
            let lse = Tensor::from_vec(lse, (op.v.batch, op.v.heads), q.device())?;
            Ok((out, lse))
        }
    }
}

/// A validated call in host form.
#[derive(Debug, Clone)]
pub(crate) struct Validated {
    pub batch: usize,
    pub heads: usize,
    pub dqk: usize,
    pub topk: usize,
    pub block_size: usize,
    pub max_blocks: usize,
    pub v_dim: usize,
    pub scale: f32,
    /// `[B, topk]` indices with every entry at or past `topk_length[b]` replaced by -1.
    pub indices: Vec<i64>,
    /// `[B, topk]` physical cache slot of each counted valid index, -1 elsewhere.
    pub slots: Vec<i64>,
    pub topk_length: Option<Vec<i64>>,
    pub block_table: Vec<i64>,
    pub sink: Option<Vec<f32>>,
}

fn validate(
    q: &Tensor,
    kv: &Tensor,
    indices: &Tensor,
    block_table: &Tensor,
    p: &SparseAttentionParams,
) -> Result<Validated, OpError> {
    let qd = bridge::check_data(OP, "q", q, "[B, H, Dqk]", 3)?;
    let (batch, heads, dqk) = (qd[0], qd[1], qd[2]);
    let kd = bridge::check_data(OP, "kv_cache", kv, "[num_blocks, block_size, Dqk]", 3)?;
    bridge::check_same_dtype(OP, "kv_cache", kv, "q", q.dtype())?;
    let (num_blocks, block_size) = (kd[0], kd[1]);
    bridge::check_dim(OP, "kv_cache", kd, 2, "Dqk", dqk, "q is [B, H, Dqk]")?;
    let (id, idx) =
        bridge::check_index(OP, "indices", indices, "[B, topk]", 2, bridge::INDEX_DTYPES)?;
    bridge::check_dim(OP, "indices", &id, 0, "B", batch, "q is [B, H, Dqk]")?;
    let topk = id[1];
    let (td, table) = bridge::check_index(
        OP,
        "block_table",
        block_table,
        "[B, max_blocks]",
        2,
        bridge::TABLE_DTYPES,
    )?;
    bridge::check_dim(OP, "block_table", &td, 0, "B", batch, "q is [B, H, Dqk]")?;
    let max_blocks = td[1];
    if p.v_dim == 0 || p.v_dim > dqk {
        return Err(OpError::invalid(
            OP,
            "v_dim",
            format!(
                "must be in 1..={dqk} (V is the first v_dim of the Dqk = {dqk} cache columns), found {}",
                p.v_dim
            ),
        ));
    }
    bridge::check_scale(OP, p.scale)?;
    let topk_length = match &p.topk_length {
        None => None,
        Some(t) => {
            let (ld, lens) =
                bridge::check_index(OP, "topk_length", t, "[B]", 1, bridge::INDEX_DTYPES)?;
            bridge::check_dim(OP, "topk_length", &ld, 0, "B", batch, "q is [B, H, Dqk]")?;
            if let Some((b, &l)) = lens
                .iter()
                .enumerate()
                .find(|(_, &l)| l < 0 || l > topk as i64)
            {
                return Err(OpError::invalid(
                    OP,
                    "topk_length",
                    format!("topk_length[{b}] = {l} must be in 0..={topk} (topk)"),
                ));
            }
            Some(lens)
        }
    };
    let sink = match &p.sink {
        None => None,
        Some(s) => {
            let sd = bridge::check_shape(OP, "sink", s, "[H]", 1)?;
            bridge::check_dim(OP, "sink", sd, 0, "H", heads, "q is [B, H, Dqk]")?;
            if s.dtype() != DType::F32 {
                return Err(OpError::invalid(
                    OP,
                    "sink",
                    format!("dtype {:?} is not accepted: the sink is f32", s.dtype()),
                ));
            }
            let vals = s.to_vec1::<f32>()?;
            if let Some(h) = vals.iter().position(|x| x.is_nan()) {
                return Err(OpError::invalid(OP, "sink", format!("sink[{h}] is NaN")));
            }
            Some(vals)
        }
    };
    let capacity = (max_blocks as u128 * block_size as u128).min(i64::MAX as u128) as i64;
    let mut eff = idx;
    let mut slots = vec![-1i64; eff.len()];
    for b in 0..batch {
        let len = topk_length.as_ref().map_or(topk, |l| l[b] as usize);
        for j in 0..topk {
            let k = b * topk + j;
            if j >= len {
                eff[k] = -1;
                continue;
            }
            let t = eff[k];
            if t == -1 {
                continue;
            }
            if t < -1 || t >= capacity {
                return Err(OpError::invalid(
                    OP,
                    "indices",
                    format!(
                        "indices[{b}, {j}] = {t} must be -1 (invalid) or in 0..{capacity} (block table capacity {max_blocks} blocks * block_size {block_size})"
                    ),
                ));
            }
            slots[k] = bridge::reach(OP, &table, b, max_blocks, block_size, num_blocks, t, || {
                format!("indices[{b}, {j}] = {t}")
            })?;
        }
    }
    Ok(Validated {
        batch,
        heads,
        dqk,
        topk,
        block_size,
        max_blocks,
        v_dim: p.v_dim,
        scale: p.scale,
        indices: eff,
        slots,
        topk_length,
        block_table: table,
        sink,
    })
}

/// The candle op running the tile kernels (simulated, or packaged for the Ascend 950); `lse`
/// receives the second output.
struct SparseOp {
    v: Validated,
    backend: Backend,
    bridge: Bridge<Vec<f32>>,
}

impl SparseOp {
    fn forward(
        &self,
        qs: &CpuStorage,
        ql: &Layout,
        ks: &CpuStorage,
        kl: &Layout,
    ) -> Result<((CpuStorage, Shape), Vec<f32>), OpError> {
        let v = &self.v;
        let p = SparseProblem {
            q: bridge::gm_input(OP, "q", qs, ql)?,
            kv: bridge::gm_input(OP, "kv_cache", ks, kl)?,
            indices: v.indices.clone(),
            topk: v.topk,
            topk_length: v.topk_length.clone(),
            block_table: v.block_table.clone(),
            max_blocks: v.max_blocks,
            block_size: v.block_size,
            v_dim: v.v_dim,
            scale: v.scale,
            sink: v.sink.clone(),
        };
        let mut runner = bridge::runner(OP, self.backend);
        let (out, lse): (GmTensor, GmTensor) = kernel::run(&mut runner, &p)?;
        runner.finish()?;
        bridge::expect_shape(OP, &out.shape, &[v.batch, v.heads, v.v_dim], "out")?;
        bridge::expect_shape(OP, &lse.shape, &[v.batch, v.heads], "lse")?;
        if out.dtype != p.q.dtype || lse.dtype != tile_backend::ir::DType::F32 {
            return Err(OpError::Package {
                op: OP,
                why: format!(
                    "the kernel returned out {} / lse {}, expected {} / f32",
                    out.dtype, lse.dtype, p.q.dtype
                ),
            });
        }
        let storage = self.bridge.storage(out)?;
        Ok((
            (storage, Shape::from((v.batch, v.heads, v.v_dim))),
            lse.to_f32(),
        ))
    }
}

impl CustomOp2 for SparseOp {
    fn name(&self) -> &'static str {
        OP
    }

    fn cpu_fwd(
        &self,
        qs: &CpuStorage,
        ql: &Layout,
        ks: &CpuStorage,
        kl: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        self.bridge.forward(|| self.forward(qs, ql, ks, kl))
    }
}
