//! `paged_attention`: vLLM-style dense decode attention over a paged K/V cache with GQA and
//! ragged context lengths, as a candle op.

pub(crate) mod kernel;
mod reference;
pub(crate) mod shape;

use crate::backend::Backend;
use crate::bridge::{self, Bridge};
use crate::error::OpError;
use crate::registry::Checked;
use candle_core::{CpuStorage, CustomOp3, Layout, Shape, Tensor};
pub use shape::PagedAttentionShape;

const OP: &str = "paged_attention";

/// The scalar parameters of [`paged_attention`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PagedAttentionParams {
    /// Softmax scale multiplying the f32 scores (must be finite; usually `D^-0.5`).
    pub scale: f32,
}

/// Dense paged decode attention: returns `out [B, H, D]` in q's dtype.
///
/// `q [B, H, D]`, `k_cache` and `v_cache [num_blocks, block_size, Hkv, D]` share one dtype (f32,
/// f16, bf16); `H % Hkv == 0` and query head `h` reads KV head `h / (H / Hkv)`. Sequence `b`
/// attends to its first `context_lens[b]` tokens (`1..=max_blocks * block_size`, I32/I64), token
/// `t` living in slot `block_table[b, t / block_size] * block_size + t % block_size` of the cache
/// (`block_table [B, max_blocks]`, I32/I64/U32; only the first `ceil(context_len / block_size)`
/// entries of a row are read and checked, so tables may be padded with -1). Scores are `scale *
/// q . k` in f32. Non-contiguous inputs are made contiguous first.
///
/// # Errors
/// [`OpError::Invalid`] naming the argument for any broken rule; [`OpError::DeviceUnavailable`]
/// for [`Backend::Ascend950`] after the package is written; kernel errors for
/// [`Backend::TileSim`].
pub fn paged_attention(
    q: &Tensor,
    k_cache: &Tensor,
    v_cache: &Tensor,
    block_table: &Tensor,
    context_lens: &Tensor,
    params: &PagedAttentionParams,
    backend: Option<Backend>,
) -> Result<Tensor, OpError> {
    let backend = bridge::resolve_backend(backend)?;
    let call = PagedCall::validate(q, k_cache, v_cache, block_table, context_lens, params)?;
    // Non-contiguous data tensors are made contiguous (docs/ops.md), for every backend.
    let (q, k_cache, v_cache) = (
        &q.contiguous()?,
        &k_cache.contiguous()?,
        &v_cache.contiguous()?,
    );
    match backend {
        Backend::Reference => reference::paged_attention(q, k_cache, v_cache, &call),
        Backend::TileSim | Backend::Ascend950 => {
            let op = PagedOp {
                call,
                backend,
                bridge: Bridge::new(OP),
            };
            let r = q.contiguous()?.apply_op3_no_bwd(
                &k_cache.contiguous()?,
                &v_cache.contiguous()?,
                &op,
            );
            Ok(op.bridge.finish(r)?.0)
        }
    }
}

/// One validated `paged_attention` call: its [`shape`](Self::shape) (what the launch plan, the
/// kernels and `tileops emit --op paged-attention` read) and the host data the kernels and the
/// Reference take. Made only by [`PagedCall::validate`]; the kernels run it with
/// [`kernel::run`] on q's and the caches' storage.
#[derive(Debug, Clone)]
pub(crate) struct PagedCall {
    /// The call's shape; its `context_len` is the longest context (the count the plan splits).
    pub shape: Checked<PagedAttentionShape>,
    /// Blocks of each cache.
    pub(crate) num_blocks: usize,
    /// Columns of the block table.
    pub(crate) max_blocks: usize,
    /// Softmax scale.
    pub(crate) scale: f32,
    /// `[B, max_blocks]` block table.
    pub(crate) block_table: Vec<i64>,
    /// Tokens of context per sequence.
    pub(crate) context_lens: Vec<i64>,
    /// Per sequence, the physical slot of each of its `context_lens[b]` tokens.
    pub(crate) slots: Vec<Vec<i64>>,
}

impl PagedCall {
    /// Checks a call of [`paged_attention()`] (every rule its doc states) and reads its index
    /// tensors.
    ///
    /// # Errors
    /// [`OpError::Invalid`] naming the argument for any broken rule.
    pub fn validate(
        q: &Tensor,
        k: &Tensor,
        vc: &Tensor,
        block_table: &Tensor,
        context_lens: &Tensor,
        p: &PagedAttentionParams,
    ) -> Result<PagedCall, OpError> {
        let qd = bridge::check_data(OP, "q", q, "[B, H, D]", 3)?;
        let (batch, heads, head_dim) = (qd[0], qd[1], qd[2]);
        let form = "[num_blocks, block_size, Hkv, D]";
        let kd = bridge::check_data(OP, "k_cache", k, form, 4)?.to_vec();
        bridge::check_same_dtype(OP, "k_cache", k, "q", q.dtype())?;
        let vd = bridge::check_data(OP, "v_cache", vc, form, 4)?;
        bridge::check_same_dtype(OP, "v_cache", vc, "q", q.dtype())?;
        bridge::check_dim(OP, "k_cache", &kd, 3, "D", head_dim, "q is [B, H, D]")?;
        if vd != kd.as_slice() {
            return Err(OpError::invalid(
                OP,
                "v_cache",
                format!("shape {vd:?} must equal k_cache's shape {kd:?}"),
            ));
        }
        let (num_blocks, block_size, kv_heads) = (kd[0], kd[1], kd[2]);
        if heads % kv_heads == 0 && heads / kv_heads > crate::limits::MAX_KV_GROUP {
            return Err(OpError::invalid(
                OP,
                "q",
                format!(
                    "H = {heads} query heads (q dim 1) over Hkv = {kv_heads} KV heads (k_cache dim 2) is {} query heads per KV head; at most {} are supported",
                    heads / kv_heads,
                    crate::limits::MAX_KV_GROUP
                ),
            ));
        }
        if heads % kv_heads != 0 {
            return Err(OpError::invalid(
                OP,
                "k_cache",
                format!(
                    "H = {heads} query heads (q dim 1) must be a multiple of Hkv = {kv_heads} KV heads (k_cache dim 2)"
                ),
            ));
        }
        let (max_blocks, table, lens) = bridge::read_table_and_lens(
            OP,
            block_table,
            context_lens,
            (batch, "B", "q is [B, H, D]"),
        )?;
        bridge::check_scale(OP, p.scale)?;
        bridge::check_context_lens(OP, &lens, 1, max_blocks, block_size)?;
        let mut slots = Vec::with_capacity(batch);
        for (b, &len) in lens.iter().enumerate() {
            let mut row = Vec::with_capacity(len as usize);
            for t in 0..len {
                row.push(bridge::reach(
                    OP,
                    &table,
                    b,
                    max_blocks,
                    block_size,
                    num_blocks,
                    t,
                    || format!("token {t} of sequence {b}, context_lens[{b}] = {len}"),
                )?);
            }
            slots.push(row);
        }
        let shape = PagedAttentionShape {
            dtype: bridge::data_dtype(OP, "q", q.dtype())?,
            batch,
            heads,
            kv_heads,
            head_dim,
            context_len: lens.iter().copied().max().unwrap_or(0) as usize,
            block_size,
        };
        let shape = Checked::call(
            shape,
            OP,
            &[
                ("dtype", "q"),
                ("batch", "q"),
                ("heads", "q"),
                ("head_dim", "q"),
                ("kv_heads", "k_cache"),
                ("block_size", "k_cache"),
                ("context_len", "context_lens"),
            ],
        )?;
        Ok(PagedCall {
            shape,
            num_blocks,
            max_blocks,
            scale: p.scale,
            block_table: table,
            context_lens: lens,
            slots,
        })
    }
}

/// The candle op running the tile kernels (simulated, or packaged for the Ascend 950).
struct PagedOp {
    call: PagedCall,
    backend: Backend,
    bridge: Bridge,
}

impl PagedOp {
    #[allow(clippy::too_many_arguments)]
    fn forward(
        &self,
        qs: &CpuStorage,
        ql: &Layout,
        ks: &CpuStorage,
        kl: &Layout,
        vs: &CpuStorage,
        vl: &Layout,
    ) -> Result<((CpuStorage, Shape), ()), OpError> {
        let s = &self.call.shape;
        let q = bridge::gm_input(OP, "q", qs, ql)?;
        let k = bridge::gm_input(OP, "k_cache", ks, kl)?;
        let v = bridge::gm_input(OP, "v_cache", vs, vl)?;
        let mut runner = bridge::runner(OP, self.backend);
        let out = kernel::run(&mut runner, &self.call, q, k, v).map_err(|e| {
            bridge::kernel_limit(e, "q", || {
                format!(
                    "D = {} (q dim 2) with H / Hkv = {} query heads per KV head in {}",
                    s.head_dim,
                    s.heads / s.kv_heads.max(1),
                    s.dtype
                )
            })
        })?;
        runner.finish()?;
        let shape = [s.batch, s.heads, s.head_dim];
        bridge::expect_shape(OP, &out.shape, &shape, "out")?;
        if out.dtype != s.dtype {
            return Err(OpError::Internal {
                op: OP,
                what: format!(
                    "the kernel returned out {}, expected {}",
                    out.dtype, s.dtype
                ),
            });
        }
        let storage = self.bridge.storage(out)?;
        Ok(((storage, Shape::from(shape.to_vec())), ()))
    }
}

impl CustomOp3 for PagedOp {
    fn name(&self) -> &'static str {
        OP
    }

    fn cpu_fwd(
        &self,
        qs: &CpuStorage,
        ql: &Layout,
        ks: &CpuStorage,
        kl: &Layout,
        vs: &CpuStorage,
        vl: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        self.bridge.forward(|| self.forward(qs, ql, ks, kl, vs, vl))
    }
}
