//! The kernels each op launches, built from shape parameters alone (no tensors): what
//! `tileops emit --op NAME` writes, and what the [`crate::Backend::Ascend950`] backend packages
//! for a call of that shape.
//!
//! Each function validates its shape and returns the op's launches in order ([`Launch`]: the tile
//! kernel as its builder writes it, the `block_dim` the op launches it on, and the runtime scalar
//! arguments the shape fixes). The kernels come from the same builders and the same tiling
//! functions the op uses at run time, so they are the kernels the op would launch. The numbers
//! that only runtime data decides — batch, top-k width, context length, rows to copy — are
//! parameters too, because they set the block counts (and, for attention, the top-k splits).
//!
//! | op | launches |
//! | --- | --- |
//! | [`sparse_paged_attention`] | `sparse_attn_<dtype>` (split), `attn_merge_<dtype>` (merge) |
//! | [`paged_attention`] | `paged_attn_<dtype>` (split), `attn_merge_<dtype>` (merge) |
//! | [`paged_gather`] | `paged_gather_<dtype>_<size>` |
//! | [`reshape_and_cache`] | `reshape_and_cache_<dtype>_<width>` |
//! | [`quant_matmul`] | `quant_matmul_<out>_b<bias>_r<relu>` (or `quant_matmul_i8_r<relu>`) |
//! | [`flash_attention`] | `flash_attn_<dtype>` (DN mode, one block per query tile) |
//! | [`qk_softmax`] | `qk_softmax_<dtype>` (the flash kernel writing P^T) |
//!
//! ```
//! use tileops_ops::kernels::{sparse_paged_attention, SparseAttentionShape};
//!
//! // The DeepSeek-V3.2 decode shape: B = 4, H = 128, Dqk = 576, v_dim = 512, top-k 2048, bf16.
//! let launches = sparse_paged_attention(&SparseAttentionShape::default())?;
//! assert_eq!(launches.len(), 2); // the top-k split kernel, then the merge
//! assert_eq!(launches[0].kernel.name, "sparse_attn_bf16");
//! assert_eq!(launches[0].block_dim, 32); // 4 rows x 1 head tile x 8 top-k splits
//! assert_eq!(launches[0].scalar("splits"), Some(8));
//! assert_eq!(launches[1].kernel.name, "attn_merge_bf16");
//!
//! let bad = SparseAttentionShape { v_dim: 600, ..Default::default() };
//! assert!(sparse_paged_attention(&bad).is_err()); // v_dim > Dqk
//! # Ok::<(), tileops_ops::OpError>(())
//! ```

use crate::error::OpError;
use crate::runtime::PlanTarget;
use tile_backend::ir::{DType, Kernel};

/// One kernel launch of an op.
#[derive(Debug, Clone)]
pub struct Launch {
    /// The kernel as its builder writes it (not yet compiled: `tile_backend::passes::compile`
    /// verifies it, plans its memory and inserts its syncs).
    pub kernel: Kernel,
    /// Blocks (clusters of 1 AIC + 2 AIV) the op launches it on.
    pub block_dim: u64,
    /// The runtime scalar arguments this shape fixes, by parameter name, in argument order
    /// (e.g. the top-k `splits` of an attention split kernel, which must agree with its
    /// `block_dim`). The others (cache sizes, table widths, the scale) come from the call.
    pub scalars: Vec<(&'static str, i64)>,
}

impl Launch {
    /// A launch of `kernel` on `block_dim` blocks, no scalar fixed by the shape.
    pub fn new(kernel: Kernel, block_dim: u64) -> Self {
        Launch {
            kernel,
            block_dim,
            scalars: Vec::new(),
        }
    }

    /// The value of the runtime scalar `name`, if this shape fixes it.
    pub fn scalar(&self, name: &str) -> Option<i64> {
        self.scalars
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, v)| v)
    }
}

/// Largest size or count any shape parameter may take: the kernels take these values as
/// 32-bit scalar arguments (or index GM with them).
pub const MAX_DIM: usize = i32::MAX as usize;

/// Largest row width (`dqk`, `v_dim`, `head_dim`, gathered `size`, cache `width`): these are
/// static tile columns, and the builders unroll over column slices and chunks, so an unbounded
/// width would build an unbounded kernel. The attention kernels stop fitting L1 far below it.
pub const MAX_WIDTH: usize = 65536;

// ---------------------------------------------------------------------------------------------
// Shapes

/// The shape of a [`crate::sparse_paged_attention`] call: DeepSeek-V3.2 sparse (DSA) decode in
/// the absorbed MLA form (`q [batch, heads, dqk]`, a paged latent cache `[num_blocks,
/// block_size, dqk]` whose first `v_dim` columns are V, `indices [batch, topk]`). The default is
/// the DeepSeek-V3.2 decode shape: batch 4, 128 heads, Dqk 576, v_dim 512, top-k 2048, block 64,
/// bf16, no sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SparseAttentionShape {
    /// Data dtype of `q` and the cache (and of `out`): f32, f16 or bf16.
    pub dtype: DType,
    /// Batch rows `B` (runtime: sets the block count and the top-k splits).
    pub batch: usize,
    /// Query heads `H`.
    pub heads: usize,
    /// Columns of q and of a cache row (`Dqk`, the contraction of Q K^T).
    pub dqk: usize,
    /// V columns, the first `v_dim` of a cache row (`1..=dqk`).
    pub v_dim: usize,
    /// Valid indices of the fullest row (runtime: sets the top-k splits). The op counts only
    /// valid ones (not -1, not past `topk_length`); the default 2048 is every entry valid.
    pub topk: usize,
    /// Tokens per cache block.
    pub block_size: usize,
    /// Whether a per-head attention sink is applied (the merge kernel takes a `sink` argument).
    pub sink: bool,
}

impl Default for SparseAttentionShape {
    fn default() -> Self {
        SparseAttentionShape {
            dtype: DType::BF16,
            batch: 4,
            heads: 128,
            dqk: 576,
            v_dim: 512,
            topk: 2048,
            block_size: 64,
            sink: false,
        }
    }
}

/// The shape of a [`crate::paged_attention()`] call: vLLM-style dense decode with GQA (`q [batch,
/// heads, head_dim]`, K and V caches `[num_blocks, block_size, kv_heads, head_dim]`). The default:
/// batch 8, 32 heads over 8 KV heads, head_dim 128, context 2048, block 16, f16.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PagedAttentionShape {
    /// Data dtype of `q` and the caches: f32, f16 or bf16.
    pub dtype: DType,
    /// Batch rows `B` (runtime: sets the block count and the splits).
    pub batch: usize,
    /// Query heads `H`.
    pub heads: usize,
    /// KV heads `Hkv`: divides `H`, with at most 128 query heads per KV head.
    pub kv_heads: usize,
    /// Head dimension `D`.
    pub head_dim: usize,
    /// Tokens of the longest context (runtime: sets the splits).
    pub context_len: usize,
    /// Tokens per cache block.
    pub block_size: usize,
}

impl Default for PagedAttentionShape {
    fn default() -> Self {
        PagedAttentionShape {
            dtype: DType::F16,
            batch: 8,
            heads: 32,
            kv_heads: 8,
            head_dim: 128,
            context_len: 2048,
            block_size: 16,
        }
    }
}

/// The shape of a [`crate::paged_gather()`] call (`src [T, C]`, `indices [1, n]`; result `[n,
/// size]`). Only the dtype and `size` are static; `n` sets the block count. The default gathers
/// the 2048 top-k rows of a DeepSeek latent cache (576 bf16 columns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PagedGatherShape {
    /// Dtype of `src` and the result: f32, f16 or bf16.
    pub dtype: DType,
    /// Rows gathered (`n`, the indices; runtime: sets the block count).
    pub n: usize,
    /// Columns gathered per row (`size <= C`).
    pub size: usize,
}

impl Default for PagedGatherShape {
    fn default() -> Self {
        PagedGatherShape {
            dtype: DType::BF16,
            n: 2048,
            size: 576,
        }
    }
}

/// The shape of a [`crate::reshape_and_cache`] call (`rows [tokens, ...]` written into a paged
/// cache of rows of `width` elements). Only the dtype and `width` are static; `tokens` sets the
/// block count. The default appends one token per sequence of the dense decode default (8 rows
/// of Hkv 8 x D 128 = 1024 f16 elements).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReshapeAndCacheShape {
    /// Dtype of the rows and the cache: f32, f16 or bf16.
    pub dtype: DType,
    /// New rows `N` (runtime: sets the block count).
    pub tokens: usize,
    /// Elements per row (the product of the trailing dims: `Hkv * D`, or the MLA latent width).
    pub width: usize,
}

impl Default for ReshapeAndCacheShape {
    fn default() -> Self {
        ReshapeAndCacheShape {
            dtype: DType::F16,
            tokens: 8,
            width: 1024,
        }
    }
}

/// The shape of a [`crate::quant_matmul()`] call (`x [m, k]`, int8 weight `[n, k]`; result `[m,
/// n]`), or of [`crate::quant_matmul_int8`] when `out` is i8. Only the output dtype, the bias
/// and the ReLU are static; `m`, `k` and `n` are runtime scalars that set the block count. The
/// default is one DeepSeek-V3 MoE expert projection for 16 tokens (7168 -> 2048, bf16).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuantMatmulShape {
    /// Result dtype: f32, f16, bf16, or i8 for the int8-output variant.
    pub out_dtype: DType,
    /// Rows `M` (tokens).
    pub m: usize,
    /// Input features `K`.
    pub k: usize,
    /// Output channels `N`.
    pub n: usize,
    /// A bias argument (float output only).
    pub bias: bool,
    /// ReLU.
    pub relu: bool,
}

impl Default for QuantMatmulShape {
    fn default() -> Self {
        QuantMatmulShape {
            out_dtype: DType::BF16,
            m: 16,
            k: 7168,
            n: 2048,
            bias: false,
            relu: false,
        }
    }
}

/// The shape of a [`crate::flash_attention()`] call (`q [batch, heads, seq_q, head_dim]`, `k
/// [batch, kv_heads, seq_kv, head_dim]`, `v [batch, kv_heads, seq_kv, v_dim]`). The default is
/// the prefill bench shape: batch 1, 16 heads, 2048 tokens, D 128, causal, bf16.
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

// ---------------------------------------------------------------------------------------------
// The registry

mod examples;
pub use crate::registry::{shape_table, BuildError, OpShape, OpSpec, Param};
pub use examples::{GatherMatmulShape, WorkedMatmul};

/// Every op `tileops emit --op` serves, in the order `--op list` shows them: each entry is the
/// op's shape description ([`OpShape`]). Adding an op is one line here.
pub const OPS: &[OpSpec] = &[
    OpSpec::of::<tile_backend::kernels::MatmulParams>(),
    OpSpec::of::<tile_backend::kernels::AttentionParams>(),
    OpSpec::of::<GatherMatmulShape>(),
    OpSpec::of::<WorkedMatmul>(),
    OpSpec::of::<SparseAttentionShape>(),
    OpSpec::of::<PagedAttentionShape>(),
    OpSpec::of::<PagedGatherShape>(),
    OpSpec::of::<ReshapeAndCacheShape>(),
    OpSpec::of::<QuantMatmulShape>(),
    OpSpec::of::<FlashAttentionShape>(),
    OpSpec::of::<QkSoftmaxShape>(),
];

/// The registered op called `name`.
pub fn find_op(name: &str) -> Option<&'static OpSpec> {
    OPS.iter().find(|o| o.name == name)
}

crate::op_shape! {
    SparseAttentionShape = "sparse-paged-attention",
    "DeepSeek-V3.2 sparse top-k decode (tileops_ops::sparse_paged_attention): top-k split \
     kernel, then the merge; defaults are the DeepSeek decode shape",
    |s| sparse_paged_attention(s);
    dtype: "q and cache dtype: f32, f16, bf16",
    batch: "batch rows B (sets the blocks and the top-k splits)",
    heads: "query heads H",
    dqk: "columns of q and of a cache row",
    v_dim: "V columns, the first v-dim of a cache row (<= dqk)",
    topk: "valid indices of the fullest row (sets the top-k splits)",
    block_size: "tokens per cache block",
    sink: "per-head attention sink: false or true",
}

crate::op_shape! {
    PagedAttentionShape = "paged-attention",
    "vLLM-style dense decode with GQA (tileops_ops::paged_attention): split kernel, then the \
     merge",
    |s| paged_attention(s);
    dtype: "q and cache dtype: f32, f16, bf16",
    batch: "batch rows B (sets the blocks and the splits)",
    heads: "query heads H",
    kv_heads: "KV heads Hkv (divides H, at most 128 query heads each)",
    head_dim: "head dimension D",
    context_len: "tokens of the longest context (sets the splits)",
    block_size: "tokens per cache block",
}

crate::op_shape! {
    PagedGatherShape = "paged-gather",
    "rows gathered from a paged source through a block table, GM -> UB -> GM \
     (tileops_ops::paged_gather)",
    |s| paged_gather(s);
    dtype: "source dtype: f32, f16, bf16",
    n: "rows gathered (sets the blocks)",
    size: "columns gathered per row",
}

crate::op_shape! {
    ReshapeAndCacheShape = "reshape-and-cache",
    "new K/V (or MLA latent) rows written into a paged cache by slot mapping \
     (tileops_ops::reshape_and_cache)",
    |s| reshape_and_cache(s);
    dtype: "row and cache dtype: f32, f16, bf16",
    tokens: "new rows N (sets the blocks)",
    width: "elements per row (Hkv * D, or the latent width)",
}

crate::op_shape! {
    QuantMatmulShape = "quant-matmul",
    "per-channel W8A8 matmul, int32 accumulation, Fixpipe dequantisation from a Scaling tile \
     (tileops_ops::quant_matmul; --out-dtype i8: quant_matmul_int8)",
    |s| quant_matmul(s);
    out_dtype: "result dtype: f32, f16, bf16, or i8 (the int8-output variant)",
    m: "rows M (tokens; sets the blocks)",
    k: "input features K",
    n: "output channels N (sets the blocks)",
    bias: "a bias argument: true or false",
    relu: "ReLU: true or false",
}

crate::op_shape! {
    FlashAttentionShape = "flash-attention",
    "dense prefill attention with GQA and a bottom-right causal mask \
     (tileops_ops::flash_attention): the DN-mode kernel, one block per query tile",
    |s| flash_attention(s);
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
     P-writing variant, one block per query tile",
    |s| qk_softmax(s);
    dtype: "q, k, P dtype: f32, f16, bf16",
    m: "queries M (sets the query tile and the blocks)",
    n: "keys N",
    head_dim: "head dim D (at most 256)",
}

// ---------------------------------------------------------------------------------------------
// Launches

/// The launch of [`crate::qk_softmax()`] for `shape` on the Ascend 950: the flash kernel's
/// P-writing variant on one block per query tile. Errors: a size of 0 or above [`MAX_DIM`], a
/// head dim above 256, a dtype other than f32/f16/bf16, more than [`MAX_DIM`] elements in P.
pub fn qk_softmax(shape: &QkSoftmaxShape) -> Result<Vec<Launch>, OpError> {
    use crate::templates::attention::{flash_descriptors, flash_dn, DESC_COUNT};
    const OP: &str = "qk_softmax";
    let s = shape;
    data_dtype(OP, s.dtype)?;
    for (arg, v) in [("m", s.m), ("n", s.n)] {
        dim(OP, arg, v)?;
    }
    head_dim(OP, "head_dim", s.head_dim)?;
    if s.m.checked_mul(s.n).is_none_or(|x| x > MAX_DIM) {
        return Err(OpError::invalid(
            OP,
            "n",
            format!("P [m, n] would hold more than {MAX_DIM} elements"),
        ));
    }
    let (cfg, problem, strides) =
        crate::flash_attention::kernel::qk_plan(s.dtype, s.m, s.n, s.head_dim);
    let blocks = flash_descriptors(&[problem], &cfg, false, strides).len() / DESC_COUNT;
    Ok(vec![Launch {
        kernel: flash_dn(&cfg),
        block_dim: blocks as u64,
        scalars: vec![
            ("blocks", blocks as i64),
            ("q_len", (s.m * s.head_dim) as i64),
            ("k_len", (s.n * s.head_dim) as i64),
            ("o_len", (s.m * s.n) as i64),
            ("lse_len", s.m as i64),
            ("q_rs", s.head_dim as i64),
            ("k_rs", s.head_dim as i64),
            ("o_rs", s.m as i64),
        ],
    }])
}

/// A head dim: `1..=MAX_HEAD_DIM` (what the flash kernel's L1/UB tiles hold).
fn head_dim(op: &'static str, arg: &'static str, v: usize) -> Result<(), OpError> {
    let max = crate::flash_attention::MAX_HEAD_DIM;
    if (1..=max).contains(&v) {
        Ok(())
    } else {
        Err(OpError::invalid(
            op,
            arg,
            format!("must be in 1..={max}, got {v}"),
        ))
    }
}

/// The launch of [`crate::flash_attention()`] for `shape` on the Ascend 950: the DN-mode kernel
/// on one block per query tile that sees a key (fully masked tiles are not launched). Errors: a
/// size of 0 or above [`MAX_DIM`], head dims above 256, `heads % kv_heads != 0`, a dtype other
/// than f32/f16/bf16, more than [`MAX_DIM`] elements in a tensor.
pub fn flash_attention(shape: &FlashAttentionShape) -> Result<Vec<Launch>, OpError> {
    use crate::flash_attention::kernel::{dense_problems, flash_cfg};
    use crate::templates::attention::{flash_descriptors, flash_dn};
    const OP: &str = "flash_attention";
    let s = shape;
    data_dtype(OP, s.dtype)?;
    for (arg, v) in [
        ("batch", s.batch),
        ("heads", s.heads),
        ("kv_heads", s.kv_heads),
        ("seq_q", s.seq_q),
        ("seq_kv", s.seq_kv),
    ] {
        dim(OP, arg, v)?;
    }
    for (arg, v) in [("head_dim", s.head_dim), ("v_dim", s.v_dim)] {
        if !(1..=crate::flash_attention::MAX_HEAD_DIM).contains(&v) {
            return Err(OpError::invalid(
                OP,
                arg,
                format!(
                    "must be in 1..={}, got {v}",
                    crate::flash_attention::MAX_HEAD_DIM
                ),
            ));
        }
    }
    if !s.heads.is_multiple_of(s.kv_heads) {
        return Err(OpError::invalid(
            OP,
            "kv_heads",
            format!("must divide heads = {}, got {}", s.heads, s.kv_heads),
        ));
    }
    let elems = |a: usize, b: usize, c: usize, d: usize| {
        a.checked_mul(b)
            .and_then(|x| x.checked_mul(c))
            .and_then(|x| x.checked_mul(d))
            .filter(|&x| x <= MAX_DIM)
    };
    let fits = elems(s.batch, s.heads, s.seq_q, s.head_dim.max(s.v_dim)).is_some()
        && elems(s.batch, s.kv_heads, s.seq_kv, s.head_dim.max(s.v_dim)).is_some();
    if !fits {
        return Err(OpError::invalid(
            OP,
            "batch",
            format!("q, k, v or out would hold more than {MAX_DIM} elements"),
        ));
    }
    let dense = crate::flash_attention::Dense {
        batch: s.batch,
        heads: s.heads,
        kv_heads: s.kv_heads,
        sq: s.seq_q,
        skv: s.seq_kv,
        d: s.head_dim,
        dv: s.v_dim,
        scale: 1.0,
        causal: s.causal,
    };
    let cfg = flash_cfg(
        "flash_attn",
        s.dtype,
        (s.head_dim, s.v_dim),
        s.seq_q,
        s.seq_kv,
    );
    let (problems, strides) = dense_problems(&dense);
    let blocks = flash_descriptors(&problems, &cfg, s.causal, strides).len()
        / crate::templates::attention::DESC_COUNT;
    let rows = s.batch * s.heads * s.seq_q;
    Ok(vec![Launch {
        kernel: flash_dn(&cfg),
        block_dim: blocks as u64,
        scalars: vec![
            ("blocks", blocks as i64),
            ("q_len", (rows * s.head_dim) as i64),
            (
                "k_len",
                (s.batch * s.kv_heads * s.seq_kv * s.head_dim) as i64,
            ),
            ("v_len", (s.batch * s.kv_heads * s.seq_kv * s.v_dim) as i64),
            ("o_len", (rows * s.v_dim) as i64),
            ("lse_len", rows as i64),
            ("q_rs", strides[0] as i64),
            ("k_rs", strides[1] as i64),
            ("v_rs", strides[2] as i64),
            ("o_rs", strides[3] as i64),
        ],
    }])
}

/// The launch of [`crate::quant_matmul()`] (or [`crate::quant_matmul_int8`] for an i8 `out`) for
/// `shape`: one block per output tile (at most 128 x 256, `quant_matmul::kernel::Tiles`). Errors: a size of 0 or above [`MAX_DIM`], an
/// output dtype other than f32/f16/bf16/i8, a bias with the int8 output.
pub fn quant_matmul(shape: &QuantMatmulShape) -> Result<Vec<Launch>, OpError> {
    let op = if shape.out_dtype == DType::I8 {
        "quant_matmul_int8"
    } else {
        "quant_matmul"
    };
    for (arg, v) in [("m", shape.m), ("k", shape.k), ("n", shape.n)] {
        dim(op, arg, v)?;
    }
    match shape.out_dtype {
        DType::I8 if shape.bias => {
            return Err(OpError::invalid(
                op,
                "bias",
                "the int8-output variant takes no bias",
            ))
        }
        DType::I8 => {}
        out => {
            data_dtype(op, out).map_err(|_| {
                OpError::invalid(
                    op,
                    "out_dtype",
                    format!("{out} is not supported: use f32, f16, bf16 or i8"),
                )
            })?;
        }
    }
    let plan = crate::quant_matmul::kernel::plan(shape, PlanTarget::Device);
    Ok(vec![Launch {
        kernel: plan.kernel(),
        block_dim: plan.block_dim as u64,
        scalars: plan.scalars.to_vec(),
    }])
}

/// The launches of [`crate::sparse_paged_attention`] for `shape`: the top-k split kernel on
/// `batch * head_tiles * splits` blocks, then the merge kernel. Errors: a size of 0 or above
/// [`MAX_DIM`] ([`MAX_WIDTH`] for `dqk` and `v_dim`), `v_dim > dqk`, a dtype other than
/// f32/f16/bf16, `batch * heads` above [`MAX_DIM`].
pub fn sparse_paged_attention(shape: &SparseAttentionShape) -> Result<Vec<Launch>, OpError> {
    const OP: &str = "sparse_paged_attention";
    let s = shape;
    data_dtype(OP, s.dtype)?;
    for (arg, v) in [
        ("batch", s.batch),
        ("heads", s.heads),
        ("topk", s.topk),
        ("block_size", s.block_size),
    ] {
        dim(OP, arg, v)?;
    }
    width(OP, "dqk", s.dqk)?;
    width(OP, "v_dim", s.v_dim)?;
    crate::sparse_attention::check_v_dim(s.v_dim, s.dqk, "dqk")?;
    attention_rows(OP, s.batch, s.heads)?;
    Ok(crate::sparse_attention::kernel::plan(s, PlanTarget::Device).launches())
}

/// The launches of [`crate::paged_attention()`] for `shape`: the split kernel (the sparse
/// template with one head tile per KV head and a separate V cache) on `batch * kv_heads *
/// splits` blocks, then the merge kernel. Errors: a size of 0 or above [`MAX_DIM`]
/// ([`MAX_WIDTH`] for `head_dim`), `heads % kv_heads != 0` or more than 128 query heads per KV
/// head, a dtype other than f32/f16/bf16, `batch * heads` above [`MAX_DIM`].
pub fn paged_attention(shape: &PagedAttentionShape) -> Result<Vec<Launch>, OpError> {
    const OP: &str = "paged_attention";
    let s = shape;
    data_dtype(OP, s.dtype)?;
    for (arg, v) in [
        ("batch", s.batch),
        ("heads", s.heads),
        ("kv_heads", s.kv_heads),
        ("context_len", s.context_len),
        ("block_size", s.block_size),
    ] {
        dim(OP, arg, v)?;
    }
    width(OP, "head_dim", s.head_dim)?;
    crate::paged_attention::kernel::head_group(s.heads, s.kv_heads)
        .map_err(|rule| OpError::invalid(OP, "kv_heads", rule))?;
    attention_rows(OP, s.batch, s.heads)?;
    Ok(crate::paged_attention::kernel::plan(s, PlanTarget::Device).launches())
}

/// The launch of [`crate::paged_gather()`] for `shape`: one row-copy kernel on as many blocks as
/// give every AIV a row (at most 32). Errors: `n` 0 or above [`MAX_DIM`], `size` 0 or above
/// [`MAX_WIDTH`], a dtype other than f32/f16/bf16.
pub fn paged_gather(shape: &PagedGatherShape) -> Result<Vec<Launch>, OpError> {
    const OP: &str = "paged_gather";
    data_dtype(OP, shape.dtype)?;
    dim(OP, "n", shape.n)?;
    width(OP, "size", shape.size)?;
    let plan = crate::paged_gather::kernel::plan(shape);
    Ok(vec![Launch {
        kernel: plan.kernel(),
        block_dim: plan.block_dim as u64,
        scalars: vec![("n", shape.n as i64)],
    }])
}

/// The launch of [`crate::reshape_and_cache`] for `shape`: one row-copy kernel on as many
/// blocks as give every AIV a row (at most 32). Errors: `tokens` 0 or above [`MAX_DIM`],
/// `width` 0 or above [`MAX_WIDTH`], a dtype other than f32/f16/bf16.
pub fn reshape_and_cache(shape: &ReshapeAndCacheShape) -> Result<Vec<Launch>, OpError> {
    const OP: &str = "reshape_and_cache";
    data_dtype(OP, shape.dtype)?;
    dim(OP, "tokens", shape.tokens)?;
    width(OP, "width", shape.width)?;
    let plan = crate::kv_cache::kernel::plan(shape);
    Ok(vec![Launch {
        kernel: plan.kernel(),
        block_dim: plan.block_dim as u64,
        scalars: vec![("n", shape.tokens as i64)],
    }])
}

/// The rule on an attention call's rows: `batch * heads` at most [`MAX_DIM`] (the kernels take
/// it as a 32-bit scalar). It also bounds `batch * head tiles` (< 2^31) and, with at most 32
/// splits, the blocks in u64. (The code generator refuses a block_dim above 2^32 - 1.)
fn attention_rows(op: &'static str, batch: usize, heads: usize) -> Result<(), OpError> {
    match batch.checked_mul(heads) {
        Some(rows) if rows <= MAX_DIM => Ok(()),
        _ => Err(OpError::invalid(
            op,
            "batch",
            format!(
                "batch {batch} x {heads} heads must be at most {MAX_DIM} rows (the kernels take \
                 it as a 32-bit scalar)"
            ),
        )),
    }
}

/// A data dtype the ops take.
fn data_dtype(op: &'static str, dtype: DType) -> Result<(), OpError> {
    if matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        Ok(())
    } else {
        Err(OpError::invalid(
            op,
            "dtype",
            format!("{dtype} is not supported: use f32, f16 or bf16"),
        ))
    }
}

/// A size or count: `1..=MAX_DIM`.
fn dim(op: &'static str, arg: &'static str, v: usize) -> Result<(), OpError> {
    if (1..=MAX_DIM).contains(&v) {
        Ok(())
    } else {
        Err(OpError::invalid(
            op,
            arg,
            format!("must be in 1..={MAX_DIM}, got {v}"),
        ))
    }
}

/// A row width: `1..=MAX_WIDTH`.
fn width(op: &'static str, arg: &'static str, v: usize) -> Result<(), OpError> {
    if (1..=MAX_WIDTH).contains(&v) {
        Ok(())
    } else {
        Err(OpError::invalid(
            op,
            arg,
            format!("must be in 1..={MAX_WIDTH} (static tile columns), got {v}"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::profile;

    /// Kernel names and block_dims of what the op launched, inside `profile`.
    fn launched(run: impl FnOnce() -> Result<(), OpError>) -> Vec<(String, u64)> {
        let (r, records) = profile(run);
        if let Err(e) = r {
            panic!("the op failed: {e}");
        }
        records
            .iter()
            .map(|l| (l.kernel.clone(), l.block_dim as u64))
            .collect()
    }

    fn planned(launches: &[Launch]) -> Vec<(String, u64)> {
        launches
            .iter()
            .map(|l| (l.kernel.name.clone(), l.block_dim))
            .collect()
    }

    /// Valid tokens `0..len` of each row, -1 after (so the fullest row counts `max(lens)`).
    fn indices(lens: &[usize], topk: usize) -> Vec<i64> {
        lens.iter()
            .flat_map(|&n| (0..topk).map(move |t| if t < n { t as i64 } else { -1 }))
            .collect()
    }

    /// The attention ops and the cache write launch what `plan(shape, PlanTarget::Device)` says
    /// (a profiled run plans for the device), and the shape their validation yields is the one
    /// `emit` takes.
    #[test]
    fn attention_and_cache_launch_what_emit_plans() {
        use crate::Backend;
        use candle_core::{DType as C, Device, Tensor};
        let dev = &Device::Cpu;
        let ints = |v: Vec<i64>, shape: (usize, usize)| Tensor::from_vec(v, shape, dev);
        let sim = Some(Backend::TileSim);
        // Sparse: one batch row (many splits) and three rows, with and without a sink.
        for (batch, heads, lens, sink) in [
            (1usize, 16usize, vec![300usize], false),
            (3, 20, vec![40, 200, 7], true),
        ] {
            let (dqk, v_dim, bs, topk, nblk) = (64, 32, 16, 320, 20);
            let q = Tensor::zeros((batch, heads, dqk), C::BF16, dev).expect("q");
            let kv = Tensor::zeros((nblk, bs, dqk), C::BF16, dev).expect("kv");
            let idx = ints(indices(&lens, topk), (batch, topk)).expect("indices");
            let table = (0..batch * nblk).map(|i| (i % nblk) as i64).collect();
            let table = ints(table, (batch, nblk)).expect("table");
            let mut params = crate::SparseAttentionParams::new(v_dim, 0.1);
            params.sink = sink.then(|| Tensor::full(0.5f32, heads, dev).expect("sink"));
            let call =
                crate::sparse_attention::SparseCall::validate(&q, &kv, &idx, &table, &params)
                    .expect("a valid call");
            let shape = SparseAttentionShape {
                dtype: DType::BF16,
                batch,
                heads,
                dqk,
                v_dim,
                topk: lens.iter().copied().max().unwrap_or(0),
                block_size: bs,
                sink,
            };
            assert_eq!(call.shape, shape);
            let got = launched(|| {
                crate::sparse_paged_attention(&q, &kv, &idx, &table, &params, sim).map(|_| ())
            });
            let want = sparse_paged_attention(&shape).expect("a valid shape");
            assert_eq!(got, planned(&want), "sparse {shape:?}");
            assert_eq!(want[1].kernel.params.iter().any(|p| p.name == "sink"), sink);
            let splits = want[0].scalar("splits").expect("splits");
            assert_eq!(want[1].scalar("splits"), Some(splits));
            assert_eq!(want[1].scalar("rows"), Some((batch * heads) as i64));
        }

        // Dense: GQA 4 query heads per KV head, ragged contexts.
        let (batch, heads, hkv, d, bs, nblk) = (2, 8, 2, 32, 16, 8);
        let q = Tensor::zeros((batch, heads, d), C::F16, dev).expect("q");
        let kc = Tensor::zeros((nblk, bs, hkv, d), C::F16, dev).expect("cache");
        let table = (0..batch * nblk).map(|i| (i % nblk) as i64).collect();
        let table = ints(table, (batch, nblk)).expect("table");
        let lens = Tensor::new(&[40i64, 70], dev).expect("lens");
        let params = crate::PagedAttentionParams { scale: 0.2 };
        let call =
            crate::paged_attention::PagedCall::validate(&q, &kc, &kc, &table, &lens, &params)
                .expect("a valid call");
        let shape = PagedAttentionShape {
            dtype: DType::F16,
            batch,
            heads,
            kv_heads: hkv,
            head_dim: d,
            context_len: 70,
            block_size: bs,
        };
        assert_eq!(call.shape, shape);
        let got = launched(|| {
            crate::paged_attention(&q, &kc, &kc, &table, &lens, &params, sim).map(|_| ())
        });
        assert_eq!(got, planned(&paged_attention(&shape).expect("valid")));

        // Cache write: block_dim from the row count, kernel keyed by dtype and width.
        let cache = Tensor::zeros((4, 4, 2, 8), C::F16, dev).expect("cache");
        let rows = Tensor::zeros((7, 2, 8), C::F16, dev).expect("rows");
        let slots = Tensor::new(&[0i64, 5, -1, 9, 2, 15, 11], dev).expect("slots");
        let call = crate::kv_cache::CacheCall::validate(&rows, &cache, &slots).expect("valid");
        let shape = ReshapeAndCacheShape {
            dtype: DType::F16,
            tokens: 7,
            width: 16,
        };
        assert_eq!(call.shape, shape);
        let got = launched(|| crate::reshape_and_cache(&rows, &cache, &slots, sim));
        assert_eq!(got, planned(&reshape_and_cache(&shape).expect("valid")));
    }

    #[test]
    fn gather_and_quant_matmul_launch_what_emit_plans() {
        use crate::Backend;
        use candle_core::{DType as C, Device, Tensor};
        let dev = &Device::Cpu;
        let sim = Some(Backend::TileSim);
        // Gather: block_dim from the row count, kernel keyed by dtype and width.
        let src = Tensor::zeros((16, 24), C::F32, dev).expect("src");
        let indices = Tensor::new(&[[0i64, 3, 5, 7, 9]], dev).expect("indices");
        let table = Tensor::new(&[[1i64, 0, 3, 2, 5, 4, 7, 6]], dev).expect("table");
        let call = crate::paged_gather::GatherCall::validate(&src, &indices, &table, 2, 20)
            .expect("valid");
        let shape = PagedGatherShape {
            dtype: DType::F32,
            n: 5,
            size: 20,
        };
        assert_eq!(call.shape, shape);
        let got = launched(|| crate::paged_gather(&src, &indices, &table, 2, 20, sim).map(|_| ()));
        assert_eq!(got, planned(&paged_gather(&shape).expect("valid")));

        // quant_matmul (profiled: the device plan): 128 x 128 tiles fill more clusters than
        // 128 x 256 ones; kernel keyed by the epilogue and tiles.
        let x = Tensor::ones((70, 96), C::F16, dev).expect("x");
        let w = crate::quantize_per_channel(
            &Tensor::ones((300, 96), candle_core::DType::F32, &Device::Cpu).expect("w"),
        )
        .expect("w");
        let params = crate::QuantMatmulParams {
            relu: true,
            ..Default::default()
        };
        let (r, records) = profile(|| crate::quant_matmul(&x, &w, &params, sim));
        r.expect("runs");
        let got: Vec<(String, u64)> = records
            .iter()
            .map(|l| (l.kernel.clone(), l.block_dim as u64))
            .collect();
        let shape = QuantMatmulShape {
            out_dtype: DType::F16,
            m: 70,
            k: 96,
            n: 300,
            bias: false,
            relu: true,
        };
        let call = crate::quant_matmul::QuantCall::validate(&x, &w, &params, Backend::TileSim)
            .expect("valid");
        assert_eq!(call.shape, shape);
        assert_eq!(got, planned(&quant_matmul(&shape).expect("valid")));
        assert_eq!(got, [("quant_matmul_f16_b0_r1_128x128x128".to_string(), 3)]);
    }

    #[test]
    fn defaults_are_the_documented_shapes() {
        let sparse = sparse_paged_attention(&SparseAttentionShape::default()).expect("valid");
        // 4 rows x 1 head tile: 8 splits of 2 chunks of 128 tokens occupy the 32 clusters.
        assert_eq!(planned(&sparse)[0], ("sparse_attn_bf16".to_string(), 32));
        assert_eq!(sparse[0].scalar("chunks_per_split"), Some(2));
        // 512 rows, 16 per block.
        assert_eq!(planned(&sparse)[1], ("attn_merge_bf16".to_string(), 32));
        let paged = paged_attention(&PagedAttentionShape::default()).expect("valid");
        // 8 rows x 8 KV heads = 64 work items: one split each.
        assert_eq!(planned(&paged)[0], ("paged_attn_f16".to_string(), 64));
        assert_eq!(paged[0].scalar("splits"), Some(1));
        let g = paged_gather(&PagedGatherShape::default()).expect("valid");
        assert_eq!(planned(&g), [("paged_gather_bf16_576".to_string(), 32)]);
        let c = reshape_and_cache(&ReshapeAndCacheShape::default()).expect("valid");
        assert_eq!(planned(&c), [("reshape_and_cache_f16_1024".to_string(), 4)]);
        // 7168 -> 2048 for 16 tokens: one row of 16-row tiles; 8 tiles of 256 channels would
        // leave clusters idle, so 16 of 128 over K slices of 512.
        let q = quant_matmul(&QuantMatmulShape::default()).expect("valid");
        assert_eq!(
            planned(&q),
            [("quant_matmul_bf16_b0_r0_16x128x512".to_string(), 16)]
        );
    }

    fn expect_invalid(r: Result<Vec<Launch>, OpError>, op: &str, arg: &str, needle: &str) {
        match r {
            Err(e @ OpError::Invalid { .. }) => {
                let msg = e.to_string();
                assert!(
                    msg.starts_with(&format!("{op}: argument `{arg}`: ")) && msg.contains(needle),
                    "{msg}"
                );
            }
            Err(e) => panic!("expected Invalid({op}, {arg}), got {e}"),
            Ok(l) => panic!("expected Invalid({op}, {arg}), got {} launches", l.len()),
        }
    }

    #[test]
    fn bad_shapes_name_the_argument_and_rule() {
        let sp = SparseAttentionShape::default();
        let sparse = |s: SparseAttentionShape| sparse_paged_attention(&s);
        let op = "sparse_paged_attention";
        expect_invalid(
            sparse(SparseAttentionShape { v_dim: 577, ..sp }),
            op,
            "v_dim",
            "1..=576",
        );
        expect_invalid(
            sparse(SparseAttentionShape { batch: 0, ..sp }),
            op,
            "batch",
            "got 0",
        );
        expect_invalid(
            sparse(SparseAttentionShape { topk: 0, ..sp }),
            op,
            "topk",
            "got 0",
        );
        expect_invalid(
            sparse(SparseAttentionShape { dqk: 0, ..sp }),
            op,
            "dqk",
            "got 0",
        );
        expect_invalid(
            sparse(SparseAttentionShape {
                dqk: MAX_WIDTH + 1,
                v_dim: 16,
                ..sp
            }),
            op,
            "dqk",
            "1..=65536",
        );
        expect_invalid(
            sparse(SparseAttentionShape {
                dtype: DType::I8,
                ..sp
            }),
            op,
            "dtype",
            "i8",
        );
        expect_invalid(
            sparse(SparseAttentionShape {
                batch: MAX_DIM,
                ..sp
            }),
            op,
            "batch",
            "32-bit",
        );
        expect_invalid(
            sparse(SparseAttentionShape {
                heads: MAX_DIM + 1,
                ..sp
            }),
            op,
            "heads",
            "1..=2147483647",
        );
        let pa = PagedAttentionShape::default();
        let op = "paged_attention";
        for (heads, kv_heads) in [(32, 3), (1024, 4)] {
            expect_invalid(
                paged_attention(&PagedAttentionShape {
                    heads,
                    kv_heads,
                    ..pa
                }),
                op,
                "kv_heads",
                "multiple of Hkv",
            );
        }
        expect_invalid(
            paged_attention(&PagedAttentionShape { kv_heads: 0, ..pa }),
            op,
            "kv_heads",
            "got 0",
        );
        expect_invalid(
            paged_attention(&PagedAttentionShape {
                context_len: 0,
                ..pa
            }),
            op,
            "context_len",
            "got 0",
        );
        let pg = PagedGatherShape::default();
        expect_invalid(
            paged_gather(&PagedGatherShape { size: 0, ..pg }),
            "paged_gather",
            "size",
            "got 0",
        );
        expect_invalid(
            paged_gather(&PagedGatherShape { n: 0, ..pg }),
            "paged_gather",
            "n",
            "got 0",
        );
        expect_invalid(
            paged_gather(&PagedGatherShape {
                size: MAX_WIDTH + 1,
                ..pg
            }),
            "paged_gather",
            "size",
            "static tile columns",
        );
        let qm = QuantMatmulShape::default();
        expect_invalid(
            quant_matmul(&QuantMatmulShape { k: 0, ..qm }),
            "quant_matmul",
            "k",
            "got 0",
        );
        expect_invalid(
            quant_matmul(&QuantMatmulShape {
                out_dtype: DType::I8,
                bias: true,
                ..qm
            }),
            "quant_matmul_int8",
            "bias",
            "no bias",
        );
        expect_invalid(
            quant_matmul(&QuantMatmulShape {
                out_dtype: DType::I32,
                ..qm
            }),
            "quant_matmul",
            "out_dtype",
            "f32, f16, bf16 or i8",
        );
        let rc = ReshapeAndCacheShape::default();
        expect_invalid(
            reshape_and_cache(&ReshapeAndCacheShape { width: 0, ..rc }),
            "reshape_and_cache",
            "width",
            "got 0",
        );
        expect_invalid(
            reshape_and_cache(&ReshapeAndCacheShape {
                dtype: DType::I32,
                ..rc
            }),
            "reshape_and_cache",
            "dtype",
            "f32, f16 or bf16",
        );
    }
}
