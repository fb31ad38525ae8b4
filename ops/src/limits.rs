//! Every limit an op checks, in one place. A call past a limit fails with
//! [`OpError::Invalid`](crate::OpError::Invalid) naming the argument, before anything is copied,
//! allocated or launched; nothing is clamped. docs/ops.md ("Limits") says which op checks which.

/// Most elements (logical, whatever the strides) any tensor argument or result may have, checked
/// before anything is copied or allocated: a stride-0 view of a huge logical shape is an error,
/// not an aborted allocation.
pub const MAX_ELEMENTS: usize = i32::MAX as usize;

/// Largest token position, cache slot, context length or count an op accepts: the kernels take
/// them as 32-bit integers.
pub const MAX_POSITION: i64 = i32::MAX as i64;

/// Largest size or count any shape parameter may take: the kernels take these values as 32-bit
/// scalar arguments (or index GM with them).
pub const MAX_DIM: usize = i32::MAX as usize;

/// Largest row width (`dqk`, `v_dim`, `head_dim`, gathered `size`, cache `width`): these are
/// static tile columns, and the kernel builders unroll over column slices and chunks, so an
/// unbounded width would build an unbounded kernel. The attention kernels stop fitting L1 far
/// below it.
pub const MAX_WIDTH: usize = 65536;

/// The largest head dim (`D` of q/k, `Dv` of v) of `flash_attention` and `qk_softmax`: what the
/// kernel's L1/UB tiles hold.
pub const MAX_HEAD_DIM: usize = 256;

/// Most query heads one KV head may serve in `paged_attention` (H / Hkv): a GQA group is one
/// head tile of its kernel.
pub const MAX_KV_GROUP: usize = 128;

/// Largest `K` (input features) of a quantised weight: `2^17 - 1`, so that the int32
/// accumulator `sum_k x_k w_k` of any int8 data (`|x_k w_k| <= 128 * 128 = 2^14`) cannot
/// overflow.
pub const MAX_QUANT_K: usize = (1 << 17) - 1;

/// Smallest per-channel weight scale (after the 19-bit rounding): `2^-58`. With
/// [`MAX_WEIGHT_SCALE`] and [`MAX_QUANT_K`] it keeps the Fixpipe's power of two `2^-e` in
/// `e = -59..=60` for every K, so that the f16 intermediate neither overflows nor underflows and
/// every scale word is a normal f32 (docs/ops.md derives the range).
pub const MIN_WEIGHT_SCALE: f32 = 1.0 / (1u64 << 58) as f32;

/// Largest per-channel weight scale: `2^44` (see [`MIN_WEIGHT_SCALE`]).
pub const MAX_WEIGHT_SCALE: f32 = (1u64 << 44) as f32;

/// Smallest per-token activation scale of `quant_matmul` and `quantize_per_token` (a row of max
/// `|x|` below about `127 * 2^-66 = 1.7e-18` that is not all zero): `2^-66`, so that the vector
/// side's row factor `s_x * 2^e` is a normal f32 for every weight in range.
pub const MIN_ACTIVATION_SCALE: f32 = 1.0 / (1u128 << 66) as f32;

/// Largest per-token activation scale (a row of max `|x|` above about `127 * 2^52 = 5.7e17`):
/// `2^52` (see [`MIN_ACTIVATION_SCALE`]).
pub const MAX_ACTIVATION_SCALE: f32 = (1u64 << 52) as f32;

/// Most positions `lightning_indexer` keeps per row on the kernel backends (TileSim,
/// Ascend950): the top-k's UB tiles take about `40 * k` bytes of the 240 KiB one vector core
/// plans within. The Reference has no such limit.
pub const MAX_INDEXER_KERNEL_TOPK: usize = 4096;
