//! `sparse_paged_attention`: DeepSeek-V3.2 sparse (top-k) attention decode over a paged latent
//! cache, in the absorbed MLA form, as a candle op.

pub(crate) mod kernel;
mod reference;
pub(crate) mod shape;

use crate::backend::Backend;
use crate::bridge::{self, Bridge};
use crate::error::OpError;
use crate::registry::Checked;
use candle_core::{CpuStorage, CustomOp2, DType, Layout, Shape, Tensor};
pub use shape::SparseAttentionShape;
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
    /// Batch-invariant plan: a row's top-k split and chunking depend only on the shape of the
    /// call's tensors per row (the `indices` width, heads, dims), never on the batch size or on
    /// the other rows' valid counts, so a row's bits are the same alone and in any batch (what
    /// a serving engine needs; docs/ops.md). Off by default: the plan then sizes its splits for
    /// the batch and the fullest row, which is faster for short rows.
    pub batch_invariant: bool,
}

impl SparseAttentionParams {
    /// Parameters without `topk_length` and sink.
    pub fn new(v_dim: usize, scale: f32) -> Self {
        SparseAttentionParams {
            v_dim,
            scale,
            topk_length: None,
            sink: None,
            batch_invariant: false,
        }
    }

    /// The same parameters with the batch-invariant plan ([`Self::batch_invariant`]).
    pub fn batch_invariant(self) -> Self {
        SparseAttentionParams {
            batch_invariant: true,
            ..self
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
    let call = SparseCall::validate(q, kv_cache, indices, block_table, params)?;
    // Non-contiguous data tensors are made contiguous (docs/ops.md), for every backend.
    let (q, kv_cache) = (&q.contiguous()?, &kv_cache.contiguous()?);
    match backend {
        Backend::Reference => reference::sparse_paged_attention(q, kv_cache, &call),
        Backend::TileSim | Backend::Ascend950 => {
            let op = SparseOp {
                call,
                backend,
                bridge: Bridge::new(OP),
            };
            let (out, lse) = op.bridge.finish(
                q.contiguous()?
                    .apply_op2_no_bwd(&kv_cache.contiguous()?, &op),
            )?;
            let lse =
                Tensor::from_vec(lse, (op.call.shape.batch, op.call.shape.heads), q.device())?;
            Ok((out, lse))
        }
    }
}

/// One validated `sparse_paged_attention` call: its [`shape`](Self::shape) (what the launch
/// plan, the kernels and `tileops emit --op sparse-paged-attention` read) and the host data the
/// kernels and the Reference take. Made only by [`SparseCall::validate`]; the kernels run it
/// with [`kernel::run`] on q's and the cache's storage.
#[derive(Debug, Clone)]
pub(crate) struct SparseCall {
    /// The call's shape; its `topk` is the valid indices of the fullest row (the count the
    /// plan splits), its `sink` whether a sink is given.
    pub shape: Checked<SparseAttentionShape>,
    /// Columns of `indices` (`topk` of the op's signature).
    pub(crate) topk_width: usize,
    /// Blocks of the cache.
    pub(crate) num_blocks: usize,
    /// Columns of the block table.
    pub(crate) max_blocks: usize,
    /// Softmax scale.
    pub(crate) scale: f32,
    /// `[B, topk_width]` indices with every entry at or past `topk_length[b]` replaced by -1.
    pub(crate) indices: Vec<i64>,
    /// `[B, topk_width]` physical cache slot of each counted valid index, -1 elsewhere.
    pub(crate) slots: Vec<i64>,
    /// Valid indices per row (the entries of `indices` that are not -1).
    pub(crate) counts: Vec<i64>,
    /// `[B, max_blocks]` block table.
    pub(crate) block_table: Vec<i64>,
    /// Per-head sink values (`[H]`).
    pub(crate) sink: Option<Vec<f32>>,
}

impl SparseCall {
    /// Checks a call of [`sparse_paged_attention`] (every rule its doc states) and reads its
    /// index tensors.
    ///
    /// # Errors
    /// [`OpError::Invalid`] naming the argument for any broken rule.
    pub fn validate(
        q: &Tensor,
        kv: &Tensor,
        indices: &Tensor,
        block_table: &Tensor,
        p: &SparseAttentionParams,
    ) -> Result<SparseCall, OpError> {
        let qd = bridge::check_data(OP, "q", q, "[B, H, Dqk]", 3)?;
        let (batch, heads, dqk) = (qd[0], qd[1], qd[2]);
        let kd = bridge::check_data(OP, "kv_cache", kv, "[num_blocks, block_size, Dqk]", 3)?;
        bridge::check_same_dtype(OP, "kv_cache", kv, "q", q.dtype())?;
        let (num_blocks, block_size) = (kd[0], kd[1]);
        bridge::check_dim(OP, "kv_cache", kd, 2, "Dqk", dqk, "q is [B, H, Dqk]")?;
        // Entries past `topk_length` are ignored and may hold anything (docs/ops.md): the
        // 32-bit rule applies to the counted entries only, in the loop below.
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
        check_v_dim(p.v_dim, dqk, "Dqk")?;
        bridge::check_scale(OP, p.scale)?;
        let topk_length = match &p.topk_length {
            None => None,
            Some(t) => {
                let (ld, lens) = bridge::check_positions(OP, "topk_length", t, "[B]", 1)?;
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
        let mut counts = vec![0i64; batch];
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
                if t > crate::limits::MAX_POSITION {
                    return Err(OpError::invalid(
                        OP,
                        "indices",
                        format!(
                            "indices[{b}, {j}] = {t} does not fit the kernels' 32-bit positions (at most {})",
                            crate::limits::MAX_POSITION
                        ),
                    ));
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
                slots[k] =
                    bridge::reach(OP, &table, b, max_blocks, block_size, num_blocks, t, || {
                        format!("indices[{b}, {j}] = {t}")
                    })?;
                counts[b] += 1;
            }
        }
        let dtype = bridge::data_dtype(OP, "q", q.dtype())?;
        let shape = SparseAttentionShape {
            dtype,
            batch,
            heads,
            dqk,
            v_dim: p.v_dim,
            // The batch-invariant plan splits the full width for every row.
            topk: if p.batch_invariant {
                topk
            } else {
                counts.iter().copied().max().unwrap_or(0) as usize
            },
            block_size,
            sink: sink.is_some(),
            batch_invariant: p.batch_invariant,
        };
        let shape = Checked::call(
            shape,
            OP,
            &[
                ("dtype", "q"),
                ("batch", "q"),
                ("heads", "q"),
                ("dqk", "q"),
                ("topk", "indices"),
                ("block_size", "kv_cache"),
            ],
        )?;
        Ok(SparseCall {
            shape,
            topk_width: topk,
            num_blocks,
            max_blocks,
            scale: p.scale,
            indices: eff,
            slots,
            counts,
            block_table: table,
            sink,
        })
    }
}

/// The rule on `v_dim`: V is the first `v_dim` of the `dqk` cache columns (`what` names `dqk`
/// as the caller's argument does). The op and the `emit` shape both check it here.
pub(crate) fn check_v_dim(v_dim: usize, dqk: usize, what: &str) -> Result<(), OpError> {
    if v_dim == 0 || v_dim > dqk {
        return Err(OpError::invalid(
            OP,
            "v_dim",
            format!(
                "must be in 1..={dqk} (V is the first v_dim of the {what} = {dqk} cache columns), found {v_dim}"
            ),
        ));
    }
    Ok(())
}

/// The candle op running the tile kernels (simulated, or packaged for the Ascend 950); `lse`
/// receives the second output.
struct SparseOp {
    call: SparseCall,
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
        let s = &self.call.shape;
        let q = bridge::gm_input(OP, "q", qs, ql)?;
        let kv = bridge::gm_input(OP, "kv_cache", ks, kl)?;
        let mut runner = bridge::runner(OP, self.backend);
        let (out, lse): (GmTensor, GmTensor) = kernel::run(&mut runner, &self.call, q, kv)
            .map_err(|e| {
                bridge::kernel_limit(e, "q", || {
                    format!(
                        "Dqk = {} (q dim 2) with v_dim = {} and H = {} in {}",
                        s.dqk, s.v_dim, s.heads, s.dtype
                    )
                })
            })?;
        runner.finish()?;
        bridge::expect_shape(OP, &out.shape, &[s.batch, s.heads, s.v_dim], "out")?;
        bridge::expect_shape(OP, &lse.shape, &[s.batch, s.heads], "lse")?;
        if out.dtype != s.dtype || lse.dtype != tile_backend::ir::DType::F32 {
            return Err(OpError::Internal {
                op: OP,
                what: format!(
                    "the kernel returned out {} / lse {}, expected {} / f32",
                    out.dtype, lse.dtype, s.dtype
                ),
            });
        }
        let storage = self.bridge.storage(out)?;
        Ok((
            (storage, Shape::from((s.batch, s.heads, s.v_dim))),
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
