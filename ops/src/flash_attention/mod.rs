//! `flash_attention`, `flash_attention_varlen` and `qk_softmax`: dense (prefill) attention with
//! GQA, a bottom-right aligned causal mask and the log-sum-exp side output, as candle ops.
//!
//! The kernel backends run the DN-mode kernel (`dn::flash_dn`, in this folder: S^T =
//! K Q^T moved to the vector cores with DualModeSplitN, the softmax down each AIV's columns, P V
//! moved back with DualModeSplitM); [`Backend::Ascend950`] writes its package.

mod dn;
pub(crate) mod kernel;
mod reference;
pub(crate) mod shape;

use crate::backend::Backend;
use crate::bridge::{self, Bridge};
use crate::error::OpError;
use crate::limits::MAX_HEAD_DIM;
use crate::registry::{self, Checked};
use candle_core::{CpuStorage, CustomOp3, DType, Layout, Shape, Tensor};
use tile_backend::launch::GmTensor;

pub use shape::{FlashAttentionShape, QkSoftmaxShape};

const FLASH: &str = "flash_attention";
const VARLEN: &str = "flash_attention_varlen";
const QK: &str = "qk_softmax";

/// The tensor argument carrying each parameter of [`FlashAttentionShape`] (for the shape's
/// checks run on a tensor call: [`Checked::call`]).
const FLASH_ARGS: &[(&str, &str)] = &[
    ("dtype", "q"),
    ("batch", "q"),
    ("heads", "q"),
    ("seq_q", "q"),
    ("head_dim", "q"),
    ("kv_heads", "k"),
    ("seq_kv", "k"),
    ("v_dim", "v"),
];

/// The tensor argument carrying each parameter of [`QkSoftmaxShape`].
const QK_ARGS: &[(&str, &str)] = &[("dtype", "q"), ("m", "q"), ("head_dim", "q"), ("n", "k")];

/// The scalar parameters of [`flash_attention`] and [`flash_attention_varlen`].
#[derive(Debug, Clone, Copy)]
pub struct FlashAttentionParams {
    /// Softmax scale multiplying the f32 scores `q . k` (must be finite; usually `1 / sqrt(D)`).
    pub scale: f32,
    /// Causal mask aligned bottom-right: query `i` sees key `j` iff `j <= i + Skv - Sq`.
    pub causal: bool,
}

impl FlashAttentionParams {
    /// Parameters with the given scale and causal flag.
    pub fn new(scale: f32, causal: bool) -> Self {
        FlashAttentionParams { scale, causal }
    }
}

/// Dense attention: `q [B, H, Sq, D]`, `k [B, Hkv, Skv, D]`, `v [B, Hkv, Skv, Dv]` ->
/// `(out [B, H, Sq, Dv]` in q's dtype, `lse [B, H, Sq]` f32`)`.
///
/// q, k and v share one dtype (f32, f16, bf16); `H` is a multiple of `Hkv` (head `h` reads KV
/// head `h / (H / Hkv)`); `D` and `Dv` are at most [`MAX_HEAD_DIM`]. `s = scale * q . k` in f32,
/// `out = softmax(s) . v`, `lse = ln sum exp(s)` (natural log). `Sq` and `Skv` may be 0. A query
/// that sees no key (causal with `i + Skv - Sq < 0`, or `Skv = 0`) gives out 0 and lse +inf; a
/// call with no key or no query launches no kernel on any backend.
///
/// # Errors
/// [`OpError::Invalid`] naming the argument for any broken rule; [`OpError::DeviceUnavailable`]
/// for [`Backend::Ascend950`] after the package is written; kernel errors for
/// [`Backend::TileSim`].
pub fn flash_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    params: &FlashAttentionParams,
    backend: Option<Backend>,
) -> Result<(Tensor, Tensor), OpError> {
    let backend = bridge::resolve_backend(backend)?;
    let call = FlashCall::validate(q, k, v, params)?;
    // Non-contiguous data tensors are made contiguous (docs/ops.md), for every backend.
    let (q, k, v) = (&q.contiguous()?, &k.contiguous()?, &v.contiguous()?);
    match backend {
        Backend::Reference => reference::dense(q, k, v, &call.shape, call.scale),
        Backend::TileSim | Backend::Ascend950 => {
            let s = call.shape;
            if s.seq_q == 0 || s.seq_kv == 0 {
                // Nothing to compute: every query sees no key.
                return nothing_seen(q, &call);
            }
            run_op(q, k, v, call, backend)
        }
    }
}

/// Packed (varlen) attention over `B` sequences of different lengths: `q [total_q, H, D]`,
/// `k [total_k, Hkv, D]`, `v [total_k, Hkv, Dv]`, `cu_seqlens_q/k [B + 1]` (I32/I64/U32,
/// starting at 0, non-decreasing, ending at `total_q` / `total_k`) -> `(out [total_q, H, Dv]`,
/// `lse [total_q, H]` f32`)`. Sequence `b` is rows `cu_seqlens_q[b]..cu_seqlens_q[b + 1]` of q
/// against rows `cu_seqlens_k[b]..cu_seqlens_k[b + 1]` of k/v, with the rules of
/// [`flash_attention`] (a sequence may be empty).
///
/// # Errors
/// As [`flash_attention`], plus cu_seqlens that are not monotone, do not start at 0 or do not
/// end at the totals.
#[allow(clippy::too_many_arguments)]
pub fn flash_attention_varlen(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    cu_seqlens_q: &Tensor,
    cu_seqlens_k: &Tensor,
    params: &FlashAttentionParams,
    backend: Option<Backend>,
) -> Result<(Tensor, Tensor), OpError> {
    let backend = bridge::resolve_backend(backend)?;
    let call = FlashCall::validate_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, params)?;
    let (q, k, v) = (&q.contiguous()?, &k.contiguous()?, &v.contiguous()?);
    match backend {
        Backend::Reference => reference::varlen(q, k, v, &call),
        Backend::TileSim | Backend::Ascend950 => {
            if call.total_q() == 0 || call.total_k() == 0 {
                return nothing_seen(q, &call);
            }
            run_op(q, k, v, call, backend)
        }
    }
}

/// `q [M, D]`, `k [N, D]` (one dtype: f32, f16, bf16; `D` at most [`MAX_HEAD_DIM`]) ->
/// `P [M, N] = softmax(scale * q k^T)` along N, computed in f32 and returned in q's dtype.
///
/// # Errors
/// [`OpError::Invalid`] naming the argument for any broken rule; [`OpError::DeviceUnavailable`]
/// for [`Backend::Ascend950`] after the package is written; kernel errors for
/// [`Backend::TileSim`].
pub fn qk_softmax(
    q: &Tensor,
    k: &Tensor,
    scale: f32,
    backend: Option<Backend>,
) -> Result<Tensor, OpError> {
    let backend = bridge::resolve_backend(backend)?;
    let call = QkCall::validate(q, k, scale)?;
    let (q, k) = (&q.contiguous()?, &k.contiguous()?);
    match backend {
        Backend::Reference => reference::qk_softmax(q, k, call.scale),
        Backend::TileSim | Backend::Ascend950 => {
            let op = QkOp {
                call,
                backend,
                bridge: Bridge::new(QK),
            };
            let r = q.contiguous()?.apply_op2_no_bwd(&k.contiguous()?, &op);
            Ok(op.bridge.finish(r)?.0)
        }
    }
}

/// One validated `qk_softmax` call: its [`shape`](Self::shape) (what the launch plan, the
/// kernel and `tileops emit --op qk-softmax` read) and the scale. Made only by
/// [`QkCall::validate`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct QkCall {
    /// The call's shape: `q [m, head_dim]`, `k [n, head_dim]`.
    pub shape: Checked<QkSoftmaxShape>,
    /// Softmax scale.
    pub(crate) scale: f32,
}

impl QkCall {
    /// Checks a call of [`qk_softmax`] (every rule its doc states).
    ///
    /// # Errors
    /// [`OpError::Invalid`] naming the argument for any broken rule.
    pub fn validate(q: &Tensor, k: &Tensor, scale: f32) -> Result<QkCall, OpError> {
        let qd = data_dims(QK, "q", q, "[M, D]", 2, &[0, 1])?;
        let kd = data_dims(QK, "k", k, "[N, D]", 2, &[0, 1])?;
        bridge::check_same_dtype(QK, "k", k, "q", q.dtype())?;
        check_head_dim(QK, "q", qd[1], "D")?;
        bridge::check_dim(QK, "k", &kd, 1, "D", qd[1], "q is [M, D]")?;
        bridge::check_scale(QK, scale)?;
        let shape = QkSoftmaxShape {
            dtype: bridge::data_dtype(QK, "q", q.dtype())?,
            m: qd[0],
            n: kd[0],
            head_dim: qd[1],
        };
        let shape = Checked::call(shape, QK, QK_ARGS)?;
        Ok(QkCall { shape, scale })
    }
}

/// The candle op running `qk_softmax`'s kernel (the P-writing variant of the flash kernel).
struct QkOp {
    call: QkCall,
    backend: Backend,
    bridge: Bridge,
}

impl QkOp {
    fn forward(
        &self,
        qs: &CpuStorage,
        ql: &Layout,
        ks: &CpuStorage,
        kl: &Layout,
    ) -> Result<((CpuStorage, Shape), ()), OpError> {
        let q = bridge::gm_input(QK, "q", qs, ql)?;
        let k = bridge::gm_input(QK, "k", ks, kl)?;
        let shape = vec![self.call.shape.m, self.call.shape.n];
        let mut runner = bridge::runner(QK, self.backend);
        let p = kernel::run_qk(&mut runner, QK, &self.call, q, k)?;
        runner.finish()?;
        bridge::expect_shape(QK, &p.shape, &[shape[0] * shape[1]], "P")?;
        let storage = self.bridge.storage(p)?;
        Ok(((storage, Shape::from(shape)), ()))
    }
}

impl candle_core::CustomOp2 for QkOp {
    fn name(&self) -> &'static str {
        QK
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

/// How a flash call's sequences lie in its tensors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seqs {
    /// `q [B, H, Sq, D]`, `k [B, Hkv, Skv, D]`, `v [B, Hkv, Skv, Dv]`: every sequence has the
    /// shape's `seq_q` queries and `seq_kv` keys.
    Dense,
    /// `q [total_q, H, D]`, `k [total_k, Hkv, D]`, `v [total_k, Hkv, Dv]`: sequence `b` is rows
    /// `cu_q[b]..cu_q[b + 1]` of q against rows `cu_k[b]..cu_k[b + 1]` of k and v.
    Packed {
        /// `B + 1` offsets into q's rows.
        cu_q: Vec<usize>,
        /// `B + 1` offsets into k's rows.
        cu_k: Vec<usize>,
    },
}

/// One validated `flash_attention` or `flash_attention_varlen` call: its
/// [`shape`](Self::shape) (what the launch plan, the kernel and `tileops emit --op
/// flash-attention` read), how its sequences lie in the tensors, and the scale. Made only by
/// [`FlashCall::validate`] and [`FlashCall::validate_varlen`]; the kernel backends run it with
/// `kernel::run` on q's, k's and v's storage.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FlashCall {
    /// The call's shape. Varlen: `batch` is the sequences, `seq_q` and `seq_kv` the longest
    /// runs of `cu_seqlens_q` and `cu_seqlens_k` (what the kernel's tiles are sized for).
    pub shape: Checked<FlashAttentionShape>,
    /// Where the sequences lie.
    pub(crate) seqs: Seqs,
    /// Softmax scale.
    pub(crate) scale: f32,
}

impl FlashCall {
    /// The op's name.
    fn op(&self) -> &'static str {
        match self.seqs {
            Seqs::Dense => FLASH,
            Seqs::Packed { .. } => VARLEN,
        }
    }

    /// Rows of q: `B * Sq` (dense) or `total_q` (packed).
    fn total_q(&self) -> usize {
        match &self.seqs {
            Seqs::Dense => self.shape.batch * self.shape.seq_q,
            Seqs::Packed { cu_q, .. } => cu_q.last().copied().unwrap_or(0),
        }
    }

    /// Rows of k and v: `B * Skv` (dense) or `total_k` (packed).
    fn total_k(&self) -> usize {
        match &self.seqs {
            Seqs::Dense => self.shape.batch * self.shape.seq_kv,
            Seqs::Packed { cu_k, .. } => cu_k.last().copied().unwrap_or(0),
        }
    }

    /// The output's shape (lse's is the same without the last dim).
    fn out_shape(&self) -> Vec<usize> {
        let s = &self.shape;
        match self.seqs {
            Seqs::Dense => vec![s.batch, s.heads, s.seq_q, s.v_dim],
            Seqs::Packed { .. } => vec![self.total_q(), s.heads, s.v_dim],
        }
    }
}

/// The result of a call in which no query sees a key: out 0, lse +inf.
fn nothing_seen(q: &Tensor, call: &FlashCall) -> Result<(Tensor, Tensor), OpError> {
    let dev = q.device();
    let shape = call.out_shape();
    let out = Tensor::zeros(shape.as_slice(), q.dtype(), dev)?;
    let lse = Tensor::full(f32::INFINITY, &shape[..shape.len() - 1], dev)?;
    Ok((out, lse))
}

/// Runs a call on a kernel backend: `(out, lse values)`.
fn run_op(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    call: FlashCall,
    backend: Backend,
) -> Result<(Tensor, Tensor), OpError> {
    let op = FlashOp {
        bridge: Bridge::new(call.op()),
        call,
        backend,
    };
    let (out, lse) = op.bridge.finish(q.contiguous()?.apply_op3_no_bwd(
        &k.contiguous()?,
        &v.contiguous()?,
        &op,
    ))?;
    let shape = op.call.out_shape();
    let lse = Tensor::from_vec(lse, &shape[..shape.len() - 1], q.device())?;
    Ok((out, lse))
}

/// The candle op running the flash kernel (simulated, or packaged for the Ascend 950); `lse`
/// comes back through the bridge.
struct FlashOp {
    call: FlashCall,
    backend: Backend,
    bridge: Bridge<Vec<f32>>,
}

impl FlashOp {
    #[allow(clippy::too_many_arguments)]
    fn forward(
        &self,
        qs: &CpuStorage,
        ql: &Layout,
        ks: &CpuStorage,
        kl: &Layout,
        vs: &CpuStorage,
        vl: &Layout,
    ) -> Result<((CpuStorage, Shape), Vec<f32>), OpError> {
        let op = self.call.op();
        let q = bridge::gm_input(op, "q", qs, ql)?;
        let k = bridge::gm_input(op, "k", ks, kl)?;
        let v = bridge::gm_input(op, "v", vs, vl)?;
        let dtype = q.dtype;
        let mut runner = bridge::runner(op, self.backend);
        let (out, lse): (GmTensor, GmTensor) = kernel::run(&mut runner, &self.call, q, k, v)?;
        runner.finish()?;
        let shape = self.call.out_shape();
        let elems: usize = shape.iter().product();
        bridge::expect_shape(op, &out.shape, &[elems], "out")?;
        if out.dtype != dtype {
            return Err(OpError::Internal {
                op,
                what: format!("the kernel returned out {}, expected {dtype}", out.dtype),
            });
        }
        let storage = self.bridge.storage(out)?;
        Ok(((storage, Shape::from(shape)), lse.to_f32()))
    }
}

impl CustomOp3 for FlashOp {
    fn name(&self) -> &'static str {
        self.call.op()
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

/// Checks device, rank and dtype of a data tensor; the dims listed in `nonzero` must not be 0
/// (the others may, e.g. a sequence length). Returns the dims.
fn data_dims(
    op: &'static str,
    arg: &'static str,
    t: &Tensor,
    form: &str,
    rank: usize,
    nonzero: &[usize],
) -> Result<Vec<usize>, OpError> {
    let dims = bridge::check_rank(op, arg, t, form, rank)?.to_vec();
    bridge::data_dtype(op, arg, t.dtype())?;
    if let Some(&a) = nonzero.iter().find(|&&a| dims[a] == 0) {
        return Err(OpError::invalid(
            op,
            arg,
            format!("dim {a} of {form} must not be 0; shape {dims:?}"),
        ));
    }
    Ok(dims)
}

/// Checks a head dim against [`MAX_HEAD_DIM`].
fn check_head_dim(
    op: &'static str,
    arg: &'static str,
    dim: usize,
    name: &str,
) -> Result<(), OpError> {
    if dim <= MAX_HEAD_DIM {
        Ok(())
    } else {
        Err(OpError::invalid(
            op,
            arg,
            format!(
                "head dim {name} = {dim} exceeds {MAX_HEAD_DIM}, the most the kernel's L1/UB tiles hold"
            ),
        ))
    }
}

/// Checks the head counts: `H` a multiple of `Hkv`.
fn check_heads(op: &'static str, heads: usize, kv_heads: usize) -> Result<(), OpError> {
    if heads.is_multiple_of(kv_heads) {
        Ok(())
    } else {
        Err(OpError::invalid(
            op,
            "k",
            format!(
                "the query heads H = {heads} must be a multiple of the KV heads Hkv = {kv_heads} (GQA)"
            ),
        ))
    }
}

/// Checks what q, k, v of either form share once their dims are read: dtypes, head dims, heads
/// and the scale. `qd`/`kd`/`vd` are `(heads, D)` of q, `(heads, D)` of k, `(heads, Dv)` of v.
#[allow(clippy::too_many_arguments)]
fn check_common(
    op: &'static str,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    (h, d): (usize, usize),
    (hk, dk): (usize, usize),
    (hv, dv): (usize, usize),
    params: &FlashAttentionParams,
) -> Result<(), OpError> {
    bridge::check_same_dtype(op, "k", k, "q", q.dtype())?;
    bridge::check_same_dtype(op, "v", v, "q", q.dtype())?;
    check_head_dim(op, "q", d, "D")?;
    check_head_dim(op, "v", dv, "Dv")?;
    if dk != d {
        return Err(OpError::invalid(
            op,
            "k",
            format!("head dim D is {dk}, but q's is {d}: q and k share D"),
        ));
    }
    if hv != hk {
        return Err(OpError::invalid(
            op,
            "v",
            format!("has {hv} KV heads, but k has {hk}: k and v share Hkv"),
        ));
    }
    check_heads(op, h, hk)?;
    bridge::check_scale(op, params.scale)
}

impl FlashCall {
    /// Checks a call of [`flash_attention`] (every rule its doc states).
    ///
    /// # Errors
    /// [`OpError::Invalid`] naming the argument for any broken rule.
    pub fn validate(
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        params: &FlashAttentionParams,
    ) -> Result<FlashCall, OpError> {
        let op = FLASH;
        let qd = data_dims(op, "q", q, "[B, H, Sq, D]", 4, &[0, 1, 3])?;
        let kd = data_dims(op, "k", k, "[B, Hkv, Skv, D]", 4, &[0, 1, 3])?;
        let vd = data_dims(op, "v", v, "[B, Hkv, Skv, Dv]", 4, &[0, 1, 3])?;
        bridge::check_dim(op, "k", &kd, 0, "B", qd[0], "q is [B, H, Sq, D]")?;
        bridge::check_dim(op, "v", &vd, 0, "B", qd[0], "q is [B, H, Sq, D]")?;
        bridge::check_dim(op, "v", &vd, 2, "Skv", kd[2], "k is [B, Hkv, Skv, D]")?;
        check_common(
            op,
            q,
            k,
            v,
            (qd[1], qd[3]),
            (kd[1], kd[3]),
            (vd[1], vd[3]),
            params,
        )?;
        let shape = FlashAttentionShape {
            dtype: bridge::data_dtype(op, "q", q.dtype())?,
            batch: qd[0],
            heads: qd[1],
            kv_heads: kd[1],
            seq_q: qd[2],
            seq_kv: kd[2],
            head_dim: qd[3],
            v_dim: vd[3],
            causal: params.causal,
        };
        let shape = Checked::call(shape, op, FLASH_ARGS)?;
        bridge::check_result_elements(op, "v", "out", &[qd[0], qd[1], qd[2], vd[3]])?;
        // The dense call's element counts, with the rule `emit` states them in.
        shape::check_elements(&shape).map_err(|e| registry::as_call_error(e, op, FLASH_ARGS))?;
        Ok(FlashCall {
            shape,
            seqs: Seqs::Dense,
            scale: params.scale,
        })
    }

    /// Checks a call of [`flash_attention_varlen`] (every rule its doc states) and reads its
    /// offsets.
    ///
    /// # Errors
    /// [`OpError::Invalid`] naming the argument for any broken rule.
    pub fn validate_varlen(
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        cu_q: &Tensor,
        cu_k: &Tensor,
        params: &FlashAttentionParams,
    ) -> Result<FlashCall, OpError> {
        let op = VARLEN;
        let qd = data_dims(op, "q", q, "[total_q, H, D]", 3, &[1, 2])?;
        let kd = data_dims(op, "k", k, "[total_k, Hkv, D]", 3, &[1, 2])?;
        let vd = data_dims(op, "v", v, "[total_k, Hkv, Dv]", 3, &[1, 2])?;
        bridge::check_dim(op, "v", &vd, 0, "total_k", kd[0], "k is [total_k, Hkv, D]")?;
        check_common(
            op,
            q,
            k,
            v,
            (qd[1], qd[2]),
            (kd[1], kd[2]),
            (vd[1], vd[2]),
            params,
        )?;
        let cq = offsets(op, "cu_seqlens_q", cu_q, qd[0], "total_q")?;
        let ck = offsets(op, "cu_seqlens_k", cu_k, kd[0], "total_k")?;
        if cq.len() != ck.len() {
            return Err(OpError::invalid(
                op,
                "cu_seqlens_k",
                format!(
                    "has {} entries, but cu_seqlens_q has {}: both are [B + 1]",
                    ck.len(),
                    cq.len()
                ),
            ));
        }
        let longest = |cu: &[usize]| cu.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
        let shape = FlashAttentionShape {
            dtype: bridge::data_dtype(op, "q", q.dtype())?,
            batch: cq.len() - 1,
            heads: qd[1],
            kv_heads: kd[1],
            seq_q: longest(&cq),
            seq_kv: longest(&ck),
            head_dim: qd[2],
            v_dim: vd[2],
            causal: params.causal,
        };
        // The packed tensors' counts are checked on the tensors (q, k, v above, out here): the
        // dense count `batch * longest` over-counts ragged sequences.
        let shape = Checked::call(shape, op, VARLEN_ARGS)?;
        bridge::check_result_elements(op, "v", "out", &[qd[0], qd[1], vd[2]])?;
        Ok(FlashCall {
            shape,
            seqs: Seqs::Packed { cu_q: cq, cu_k: ck },
            scale: params.scale,
        })
    }
}

/// The tensor argument carrying each parameter of a varlen call's [`FlashAttentionShape`]
/// (`batch` and the longest runs come from the offsets).
const VARLEN_ARGS: &[(&str, &str)] = &[
    ("dtype", "q"),
    ("batch", "cu_seqlens_q"),
    ("heads", "q"),
    ("seq_q", "cu_seqlens_q"),
    ("head_dim", "q"),
    ("kv_heads", "k"),
    ("seq_kv", "cu_seqlens_k"),
    ("v_dim", "v"),
];

/// Reads and checks cumulative sequence offsets: `[B + 1]`, B >= 1, starting at 0,
/// non-decreasing, ending at `total`.
fn offsets(
    op: &'static str,
    arg: &'static str,
    t: &Tensor,
    total: usize,
    total_name: &str,
) -> Result<Vec<usize>, OpError> {
    let (dims, vals) = bridge::check_index(op, arg, t, "[B + 1]", 1, bridge::TABLE_DTYPES)?;
    if dims[0] < 2 {
        return Err(OpError::invalid(
            op,
            arg,
            format!("must hold B + 1 >= 2 offsets, found {}", dims[0]),
        ));
    }
    if vals[0] != 0 {
        return Err(OpError::invalid(
            op,
            arg,
            format!("must start at 0, found {arg}[0] = {}", vals[0]),
        ));
    }
    if let Some(i) = (1..vals.len()).find(|&i| vals[i] < vals[i - 1]) {
        return Err(OpError::invalid(
            op,
            arg,
            format!(
                "must be non-decreasing, but {arg}[{i}] = {} < {arg}[{}] = {}",
                vals[i],
                i - 1,
                vals[i - 1]
            ),
        ));
    }
    let last = vals[vals.len() - 1];
    if last != total as i64 {
        return Err(OpError::invalid(
            op,
            arg,
            format!(
                "must end at {total_name} = {total}, found {arg}[{}] = {last}",
                vals.len() - 1
            ),
        ));
    }
    Ok(vals.into_iter().map(|x| x as usize).collect())
}

/// The lse dtype of every op here.
pub(crate) const LSE_DTYPE: DType = DType::F32;
