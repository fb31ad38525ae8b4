//! The shape of a `lightning_indexer` call and its rules (the op's one validation path: the
//! tensor call checks the shape it reads through [`Checked::call`](crate::registry::Checked)).
//! Its launches are the kernel plan's ([`super::kernel::plan`] on the device); a shape the
//! kernels do not take (FP8 keys with a q that is not FP8 or D past 128, q wider than f16 keys)
//! plans none, so `registry::launches` of it is [`OpError::NoKernel`].

use crate::bridge;
use crate::error::OpError;
use crate::limits::MAX_DIM;
use crate::registry::{check_dims, check_range, check_width, CheckPath};
use tile_backend::ir::DType;

/// The shape of a [`crate::lightning_indexer()`] call: `q [tokens, heads, head_dim]`, keys of
/// `key_dtype` (FP8 with f32 or ue8m0 scales, or plain) in blocks of `block_size` slots, the
/// longest row's context and the top-k width. The default is DeepSeek-V3.2's decode shape
/// (4 rows, 64 heads of 128, top-k 2048 of 8192 positions in blocks of 64) with bf16 q and
/// keys; V3.2's own FP8 q and keys are `--dtype f8e4m3 --key-dtype f8e4m3 --ue8m0 true`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LightningIndexerShape {
    /// q's dtype: f32, f16, bf16, or f8e4m3 (DeepSeek's quantised q, its scales folded into the
    /// weights).
    pub dtype: DType,
    /// The key cache's dtype: f8e4m3 (with scales), f32, f16 or bf16.
    pub key_dtype: DType,
    /// FP8 scales stored as ue8m0 powers of two (`true`) or f32 (`false`); plain keys: false.
    pub ue8m0: bool,
    /// Query rows `T` (decode: one per sequence; prefill: one per token).
    pub tokens: usize,
    /// Indexer heads `H_idx`.
    pub heads: usize,
    /// Values per head and per key, `D` (a multiple of 128 for FP8 keys).
    pub head_dim: usize,
    /// Positions kept per row.
    pub topk: usize,
    /// The longest row's context (runtime; 0 on a tensor call whose every row is empty).
    pub context_len: usize,
    /// Slots per cache block.
    pub block_size: usize,
}

impl Default for LightningIndexerShape {
    fn default() -> Self {
        LightningIndexerShape {
            dtype: DType::BF16,
            key_dtype: DType::BF16,
            ue8m0: false,
            tokens: 4,
            heads: 64,
            head_dim: 128,
            topk: 2048,
            context_len: 8192,
            block_size: 64,
        }
    }
}

crate::op_shape! {
    LightningIndexerShape = "lightning-indexer",
    "DeepSeek-V3.2's lightning indexer (tileops_ops::lightning_indexer): scores on the cube, \
     top-k from TSORT32/TMRGSORT; f32/f16/bf16 keys, or FP8 keys with FP8 q (e4m3 x e4m3)";
    check(s, path) = check(s, path);
    plan(s) = device_launches(s);
    dtype: "q dtype: f32, f16, bf16, f8e4m3",
    key_dtype: "key cache dtype: f8e4m3 (with scales), f32, f16, bf16",
    ue8m0: "FP8 scales as ue8m0 powers of two: true, or f32: false",
    tokens: "query rows T",
    heads: "indexer heads H_idx",
    head_dim: "values per head and key D (a multiple of 128 for f8e4m3 keys)",
    topk: "positions kept per row",
    context_len: "positions of the longest row's context",
    block_size: "slots per cache block",
}

const OP: &str = "lightning_indexer";

/// The device launches of `shape` (none for a shape the kernels do not take).
fn device_launches(
    shape: &crate::registry::Checked<LightningIndexerShape>,
) -> Vec<crate::registry::Launch> {
    if super::kernel::unsupported(shape).is_some()
        || shape.topk > crate::limits::MAX_INDEXER_KERNEL_TOPK
    {
        return Vec::new();
    }
    let plan = super::kernel::plan(shape, crate::runtime::PlanTarget::Device);
    plan.launches(&vec![shape.context_len as i64; shape.tokens])
}

/// Every rule of the shape, naming the shape parameter.
fn check(s: &LightningIndexerShape, path: CheckPath) -> Result<(), OpError> {
    if !matches!(
        s.dtype,
        DType::F32 | DType::F16 | DType::BF16 | DType::F8E4M3
    ) {
        return Err(OpError::invalid(
            OP,
            "dtype",
            format!("{} is not supported: use f32, f16, bf16 or f8e4m3", s.dtype),
        ));
    }
    match s.key_dtype {
        DType::F8E4M3 => super::fp8::check_group_width(OP, "head_dim", s.head_dim)?,
        DType::F32 | DType::F16 | DType::BF16 if s.ue8m0 => {
            return Err(OpError::invalid(
                OP,
                "ue8m0",
                format!(
                    "plain {} keys have no scales: ue8m0 must be false",
                    s.key_dtype
                ),
            ))
        }
        DType::F32 | DType::F16 | DType::BF16 => {}
        other => {
            return Err(OpError::invalid(
                OP,
                "key_dtype",
                format!("{other} is not supported: use f8e4m3, f32, f16 or bf16"),
            ))
        }
    }
    check_dims(
        OP,
        &[
            ("tokens", s.tokens),
            ("heads", s.heads),
            ("topk", s.topk),
            ("block_size", s.block_size),
        ],
    )?;
    check_width(OP, "head_dim", s.head_dim)?;
    match path {
        CheckPath::Emit => check_dims(OP, &[("context_len", s.context_len)])?,
        CheckPath::Tensor if s.context_len > MAX_DIM => {
            check_range(OP, "context_len", s.context_len, MAX_DIM, "")?
        }
        CheckPath::Tensor => {}
    }
    bridge::check_result_elements(OP, "topk", "indices", &[s.tokens, s.topk])?;
    bridge::check_result_elements(OP, "heads", "q", &[s.tokens, s.heads])
}
