//! The op registry: every op `tileops emit --op NAME` serves ([`OPS`], which the CLI iterates;
//! [`find_op`]), how an op's shape describes itself once ([`OpShape`], written with
//! [`op_shape!`](crate::op_shape)), and the kernels each op launches, built from shape
//! parameters alone (no tensors): what `tileops emit --op NAME` writes, and what the
//! [`crate::Backend::Ascend950`] backend packages for a call of that shape.
//!
//! Each op's shape struct lives in its own folder (`<op>/shape.rs`, beside the op's one launch
//! plan in `<op>/kernel.rs`) and is re-exported here. [`launches`] checks a shape with its op's
//! rules ([`OpShape::check`]) and returns the op's launches in order ([`Launch`]: the tile
//! kernel as its builder writes it, the `block_dim` the op launches it on, and the runtime
//! scalar arguments the shape fixes). The tensor call runs the same check ([`Checked`]: the
//! launch plan takes only a checked shape), and the kernels come from the same builders and
//! the same tiling functions the op uses at run time, so they are the kernels the op would
//! launch. The numbers that only runtime data decides — batch, top-k width, context length,
//! rows to copy — are parameters too, because they set the block counts (and, for attention,
//! the top-k splits).
//!
//! | op | launches |
//! | --- | --- |
//! | [`crate::sparse_paged_attention`] | `sparse_attn_<dtype>` (split), `attn_merge_<dtype>` (merge) |
//! | [`crate::paged_attention()`] | `paged_attn_<dtype>` (split), `attn_merge_<dtype>` (merge; none with one split) |
//! | [`crate::paged_gather()`] | `paged_gather_<dtype>_<size>` |
//! | [`crate::reshape_and_cache`] | `reshape_and_cache_<dtype>_<width>` |
//! | [`crate::quant_matmul()`] | `quant_matmul_<out>_b<bias>_r<relu>` (or `quant_matmul_i8_r<relu>`) |
//! | [`crate::flash_attention()`] | `flash_attn_<dtype>` (DN mode, one row per query tile, at most one block per cluster) |
//! | [`crate::qk_softmax()`] | `qk_softmax_<dtype>` (the flash kernel writing P^T) |
//! | [`crate::lightning_indexer()`] | `indexer_scores_<dtype>_h<H>_d<D>[_q3]` (scores), `indexer_topk_<k>` (segment top-k), `indexer_merge_<k>` (one launch per level of the merge tree); FP8 keys `indexer_scores_f8e4m3_h<H>_d128_<f32s\|ue8m0>_p<piece>` with FP8 q (other q: `OpError::NoKernel`) |
//!
//! ```
//! use tileops_ops::registry::{launches, SparseAttentionShape};
//!
//! // The DeepSeek-V3.2 decode shape: B = 4, H = 128, Dqk = 576, v_dim = 512, top-k 2048, bf16.
//! let launches_ = launches(&SparseAttentionShape::default())?;
//! assert_eq!(launches_.len(), 2); // the top-k split kernel, then the merge
//! assert_eq!(launches_[0].kernel.name, "sparse_attn_bf16");
//! assert_eq!(launches_[0].block_dim, 32); // 4 rows x 1 head tile x 8 top-k splits
//! assert_eq!(launches_[0].scalar("splits"), Some(8));
//! assert_eq!(launches_[1].kernel.name, "attn_merge_bf16");
//!
//! let bad = SparseAttentionShape { v_dim: 600, ..Default::default() };
//! assert!(launches(&bad).is_err()); // v_dim > Dqk
//! # Ok::<(), tileops_ops::OpError>(())
//! ```

use tile_backend::ir::Kernel;

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

mod checks;
mod examples;
mod spec;

pub(crate) use checks::{check_dims, check_dtype, check_range, check_width};
pub use examples::{GatherMatmulShape, WorkedMatmul};
pub(crate) use spec::as_call_error;
pub use spec::{launches, BuildError, CheckPath, Checked, OpShape, OpSpec, Param, ParamValue};

pub use crate::flash_attention::{FlashAttentionShape, QkSoftmaxShape};
pub use crate::kv_cache::ReshapeAndCacheShape;
pub use crate::lightning_indexer::LightningIndexerShape;
pub use crate::paged_attention::PagedAttentionShape;
pub use crate::paged_gather::PagedGatherShape;
pub use crate::quant_matmul::QuantMatmulShape;
pub use crate::sparse_attention::SparseAttentionShape;

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
    OpSpec::of::<LightningIndexerShape>(),
];

/// The registered op called `name`.
pub fn find_op(name: &str) -> Option<&'static OpSpec> {
    OPS.iter().find(|o| o.name == name)
}

/// Implements [`OpShape`](crate::registry::OpShape) for a shape struct whose parameters are
/// fields of [`ParamValue`](crate::registry::ParamValue) types: its name and what it is, its
/// rules (`check`, given the [`CheckPath`](crate::registry::CheckPath)), its device launches
/// (`plan`, given the [`Checked`](crate::registry::Checked) shape) and its parameters:
///
/// ```ignore
/// op_shape! {
///     MyShape = "my-op", "what it is";
///     check(s, path) = my_op::check(s, path);
///     plan(s) = my_op::plan(s, PlanTarget::Device).launches();
///     dtype: "data dtype: f32, f16, bf16",
///     rows: "rows of the input",
/// }
/// ```
#[macro_export]
macro_rules! op_shape {
    ($shape:ty = $name:literal, $about:expr;
     check($cs:ident, $cp:ident) = $check:expr;
     plan($ps:ident) = $plan:expr;
     $($field:ident : $what:literal),* $(,)?) => {
        impl $crate::registry::OpShape for $shape {
            const NAME: &'static str = $name;
            const ABOUT: &'static str = $about;
            const PARAMS: &'static [$crate::registry::Param] = &[
                $($crate::registry::Param { name: stringify!($field), about: $what }),*
            ];
            fn set(&mut self, name: &str, value: &str) -> Result<(), String> {
                match name {
                    $(stringify!($field) => {
                        self.$field = $crate::registry::ParamValue::parse_param(value)?;
                    })*
                    _ => return Err(format!("no parameter `{name}`")),
                }
                Ok(())
            }
            fn get(&self, name: &str) -> Option<String> {
                match name {
                    $(stringify!($field) => {
                        Some($crate::registry::ParamValue::show_param(&self.$field))
                    })*
                    _ => None,
                }
            }
            fn check(
                &self,
                $cp: $crate::registry::CheckPath,
            ) -> Result<(), $crate::OpError> {
                let $cs = self;
                $check
            }
            fn plan(
                $ps: &$crate::registry::Checked<Self>,
            ) -> Vec<$crate::registry::Launch> {
                $plan
            }
        }
    };
}

/// The shape table of docs/ops.md: every registered op with its parameters, what they mean
/// and their defaults, as a Markdown table (a test keeps docs/ops.md equal to it).
pub fn shape_table(ops: &[OpSpec]) -> String {
    let mut s = String::from("| op | flag | meaning | default |\n| --- | --- | --- | --- |\n");
    for op in ops {
        for p in op.params {
            let d = op.default_of(p.name).unwrap_or_default();
            s.push_str(&format!(
                "| `{}` | `--{}` | {} | `{d}` |\n",
                op.name,
                p.flag(),
                p.about.replace('|', "\\|")
            ));
        }
    }
    s
}

#[cfg(test)]
mod tests;
