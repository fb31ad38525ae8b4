//! The registered shapes of the flash ops (`tileops emit --op flash-attention|qk-softmax`):
//! what each parameter means, its default, the shape's checks and its launches, which are the
//! kernel plan's ([`super::kernel::plan`], [`super::kernel::qk_plan`]).

use super::kernel::{plan, qk_plan};
use super::{Seqs, MAX_HEAD_DIM};
use crate::error::OpError;
use crate::limits::MAX_DIM;
use crate::registry::{check_dims, check_dtype, check_range, CheckPath};
use crate::runtime::PlanTarget;
use tile_backend::ir::DType;

/// The shape of a [`crate::flash_attention()`] call (`q [batch, heads, seq_q, head_dim]`, `k
/// [batch, kv_heads, seq_kv, head_dim]`, `v [batch, kv_heads, seq_kv, v_dim]`); of a
/// [`crate::flash_attention_varlen`] call, `batch` sequences of at most `seq_q` queries and
/// `seq_kv` keys. The default is the prefill bench shape: batch 1, 16 heads, 2048 tokens,
/// D 128, causal, bf16.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlashAttentionShape {
    /// Data dtype of q, k, v and out: f32, f16 or bf16.
    pub dtype: DType,
    /// Batch `B`.
    pub batch: usize,
    /// Query heads `H`.
    pub heads: usize,
    /// KV heads `Hkv` (divides `H`).
    pub kv_heads: usize,
    /// Queries per sequence `Sq` (sets the query tile and the blocks).
    pub seq_q: usize,
    /// Keys per sequence `Skv`.
    pub seq_kv: usize,
    /// Head dim `D` of q and k.
    pub head_dim: usize,
    /// Head dim `Dv` of v.
    pub v_dim: usize,
    /// Bottom-right causal mask.
    pub causal: bool,
}

impl Default for FlashAttentionShape {
    fn default() -> Self {
        FlashAttentionShape {
            dtype: DType::BF16,
            batch: 1,
            heads: 16,
            kv_heads: 16,
            seq_q: 2048,
            seq_kv: 2048,
            head_dim: 128,
            v_dim: 128,
            causal: true,
        }
    }
}

/// The shape of a [`crate::qk_softmax()`] call (`q [m, head_dim]`, `k [n, head_dim]`; result
/// `[m, n]`). The default: 512 queries against 2048 keys, D 128, bf16.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QkSoftmaxShape {
    /// Data dtype of q, k and P: f32, f16 or bf16.
    pub dtype: DType,
    /// Queries `M` (sets the query tile and the blocks).
    pub m: usize,
    /// Keys `N`.
    pub n: usize,
    /// Head dim `D`.
    pub head_dim: usize,
}

impl Default for QkSoftmaxShape {
    fn default() -> Self {
        QkSoftmaxShape {
            dtype: DType::BF16,
            m: 512,
            n: 2048,
            head_dim: 128,
        }
    }
}

crate::op_shape! {
    FlashAttentionShape = "flash-attention",
    "dense prefill attention with GQA and a bottom-right causal mask \
     (tileops_ops::flash_attention): the DN-mode kernel, one row per query tile, at most one block per cluster";
    check(s, path) = check_flash(s, path);
    plan(s) = vec![plan(s, &Seqs::Dense, PlanTarget::Device).launch()];
    dtype: "q, k, v dtype: f32, f16, bf16",
    batch: "batch B",
    heads: "query heads H",
    kv_heads: "KV heads Hkv (divides H)",
    seq_q: "queries per sequence Sq (sets the query tile and the blocks)",
    seq_kv: "keys per sequence Skv",
    head_dim: "head dim D of q and k (at most 256)",
    v_dim: "head dim Dv of v (at most 256)",
    causal: "bottom-right causal mask: true or false",
}

crate::op_shape! {
    QkSoftmaxShape = "qk-softmax",
    "softmax(scale q k^T) along the keys (tileops_ops::qk_softmax): the flash kernel's \
     P-writing variant, one row per query tile, at most one block per cluster";
    check(s, _path) = qk_check(s);
    plan(s) = vec![qk_plan(s).launch()];
    dtype: "q, k, P dtype: f32, f16, bf16",
    m: "queries M (sets the query tile and the blocks)",
    n: "keys N",
    head_dim: "head dim D (at most 256)",
}

/// The rules of a [`crate::flash_attention()`] shape, whose launch on the Ascend 950 is the
/// DN-mode kernel with one descriptor row per query tile that sees a key (fully masked tiles
/// are not launched), run by at most one block per cluster. `emit`: [`check`] without empty
/// sequences, and [`check_elements`]; a tensor call: [`check`] with empty sequences (the dense
/// call checks the element counts itself, the packed one counts its tensors instead).
fn check_flash(s: &FlashAttentionShape, path: CheckPath) -> Result<(), OpError> {
    match path {
        CheckPath::Emit => check(s, false).and_then(|()| check_elements(s)),
        CheckPath::Tensor => check(s, true),
    }
}

/// The rules of a flash shape, shared by `tileops emit --op flash-attention` and the tensor
/// calls (which rename the parameter to the tensor that carries it): a size of 0 or above
/// [`MAX_DIM`] (`seq_q` and `seq_kv` may be 0 when `empty_seqs`: a call with no query or no key
/// launches nothing), head dims above 256, `heads % kv_heads != 0`, a dtype other than
/// f32/f16/bf16.
fn check(s: &FlashAttentionShape, empty_seqs: bool) -> Result<(), OpError> {
    const OP: &str = "flash_attention";
    check_dtype(OP, s.dtype)?;
    check_dims(
        OP,
        &[
            ("batch", s.batch),
            ("heads", s.heads),
            ("kv_heads", s.kv_heads),
        ],
    )?;
    for (name, v) in [("seq_q", s.seq_q), ("seq_kv", s.seq_kv)] {
        if !(empty_seqs && v == 0) {
            check_dims(OP, &[(name, v)])?;
        }
    }
    check_head_dim(OP, "head_dim", s.head_dim)?;
    check_head_dim(OP, "v_dim", s.v_dim)?;
    if !s.heads.is_multiple_of(s.kv_heads) {
        return Err(OpError::invalid(
            OP,
            "kv_heads",
            format!("must divide heads = {}, got {}", s.heads, s.kv_heads),
        ));
    }
    Ok(())
}

/// The element counts of a dense flash shape: q, k, v and out each hold at most [`MAX_DIM`]
/// elements.
pub(crate) fn check_elements(s: &FlashAttentionShape) -> Result<(), OpError> {
    const OP: &str = "flash_attention";
    let elems = |a: usize, b: usize, c: usize, d: usize| {
        a.checked_mul(b)
            .and_then(|x| x.checked_mul(c))
            .and_then(|x| x.checked_mul(d))
            .filter(|&x| x <= MAX_DIM)
    };
    let width = s.head_dim.max(s.v_dim);
    if elems(s.batch, s.heads, s.seq_q, width).is_none() {
        return Err(OpError::invalid(
            OP,
            "seq_q",
            format!(
                "q or out [batch, heads, seq_q, {width}] = [{}, {}, {}, {width}] would hold more than {MAX_DIM} elements",
                s.batch, s.heads, s.seq_q
            ),
        ));
    }
    if elems(s.batch, s.kv_heads, s.seq_kv, width).is_none() {
        return Err(OpError::invalid(
            OP,
            "seq_kv",
            format!(
                "k or v [batch, kv_heads, seq_kv, {width}] = [{}, {}, {}, {width}] would hold more than {MAX_DIM} elements",
                s.batch, s.kv_heads, s.seq_kv
            ),
        ));
    }
    Ok(())
}

/// The rules of a `qk_softmax` shape, shared by `tileops emit --op qk-softmax` and the tensor
/// call (its launch on the Ascend 950: the flash kernel's P-writing variant, one descriptor row
/// per query tile, at most one block per cluster): a size of 0 or above [`MAX_DIM`], a head dim above 256, a dtype other than
/// f32/f16/bf16, more than [`MAX_DIM`] elements in P.
fn qk_check(s: &QkSoftmaxShape) -> Result<(), OpError> {
    const OP: &str = "qk_softmax";
    check_dtype(OP, s.dtype)?;
    check_dims(OP, &[("m", s.m), ("n", s.n)])?;
    check_head_dim(OP, "head_dim", s.head_dim)?;
    if s.m.checked_mul(s.n).is_none_or(|x| x > MAX_DIM) {
        return Err(OpError::invalid(
            OP,
            "n",
            format!(
                "P [m, n] = [{}, {}] would hold more than {MAX_DIM} elements",
                s.m, s.n
            ),
        ));
    }
    Ok(())
}

/// A head dim: `1..=MAX_HEAD_DIM` (what the flash kernel's L1/UB tiles hold).
fn check_head_dim(op: &'static str, arg: &'static str, v: usize) -> Result<(), OpError> {
    check_range(op, arg, v, MAX_HEAD_DIM, "")
}
