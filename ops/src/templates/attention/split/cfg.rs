//! The static shape of `attn_split` ([`AttnCfg`], chosen from an op's [`AttnSpec`]): what the
//! kernel builder, its cube and vector programs and the launch plan read. A leaf of the
//! kernel's folder.

use crate::templates::common::{best_slice, round_up};
use tile_backend::ir::{AccToVecMode, DType};

/// Where an attention call's values come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Values {
    /// The first `v_dim` columns of the gathered K rows: one cache, one gather (MLA's latent
    /// cache, sparse attention).
    KeyPrefix,
    /// A cache of their own, gathered like K through the same block table (dense paged
    /// attention).
    OwnCache,
}

impl Values {
    /// Gathered L1 tiles per chunk: K's, and V's when V has its own cache.
    pub(crate) fn gathered_tiles(self) -> u64 {
        match self {
            Values::KeyPrefix => 1,
            Values::OwnCache => 2,
        }
    }
}

/// Largest head tile the CPU plan hands whole to AIV0 ([`AttnCfg::single`]): 64 rows, as many
/// as one AIV holds in the widest split head tile (128 heads), so its UB tiles are no larger.
pub(crate) const SINGLE_MAX_ROWS: u64 = 64;

/// Static shape of one attention kernel (its specialisation key).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct AttnCfg {
    /// Kernel name prefix.
    pub name: &'static str,
    /// Data dtype (q, caches, P).
    pub dtype: DType,
    /// Query heads per batch row (rows of q per batch entry).
    pub heads: u64,
    /// Query heads per head tile.
    pub hg: u64,
    /// Head tiles (`ceil(heads / hg)`).
    pub nht: u64,
    /// Columns gathered for K (the contraction).
    pub dqk: u64,
    /// Output columns (V width).
    pub v_dim: u64,
    /// Columns of a cache row.
    pub kv_cols: u64,
    /// Cache column offset per head tile (dense GQA: D; sparse: 0).
    pub head_col_stride: u64,
    /// Where V comes from: the first columns of the gathered K rows (sparse) or a cache of its
    /// own (dense).
    pub values: Values,
    /// Tokens per cache block.
    pub block_size: u64,
    /// Padded head-tile rows: a multiple of 32 (each AIV owns `th / 2` rows, whole 16-row
    /// fractals), or of 16 with [`AttnCfg::single`].
    pub th: u64,
    /// The single-vector-core head tile of the CPU plan (head tiles of at most
    /// [`SINGLE_MAX_ROWS`] rows): `th` is `hg` rounded up to 16, not 32, the scores and P V move
    /// whole to AIV0 (`SingleModeVec0`) and P goes into L1 without an offset; AIV1 keeps only
    /// the channel protocol. A target that runs a block's instructions one after another then
    /// computes no padding rows beyond the cube's 16-row fractal (16 heads: half the matmul rows
    /// and none of a second AIV's vector work) and issues each vector op once, not twice. The
    /// device plan keeps both AIVs busy (`DualModeSplitM`).
    pub single: bool,
    /// Top-k tokens per chunk (rows of a gathered tile).
    pub chunk: u64,
    /// K slice width of Q K^T (`bufs` Q slices fit L0A beside P).
    pub ks: u64,
    /// V slice width of P V (`bufs` V slices fit L0B beside the K^T slices).
    pub ns: u64,
    /// Buffers per gathered L1 tile and per L0A/L0B operand tile: 2 (ping-pong: the next
    /// chunk's gather and the next slice's move overlap this one's matmul) or 1 (a target that
    /// runs a block's instructions one after another, where buffers twice the size halve the
    /// chunks and slices instead).
    pub bufs: u64,
    /// Buffers of P in L1: 2 where L1 has room and the target runs a block's instructions one
    /// after another (the simulator's CPU plan), so that writing the next chunk's P never meets
    /// the L1 -> L0A move of the previous one still pending in the simulator (which would then
    /// have to make it); 1 otherwise (the device plan is unchanged).
    pub pbufs: u64,
    /// Work items (batch row, head tile, split) per block, one after another: 1 but where the
    /// device plan would run its items in more than one wave ([`plan`]); then each block loops
    /// over `ipb` consecutive items, so one item's gathers overlap the previous one's last
    /// chunk, normalisation and stores instead of waiting for the next wave.
    pub ipb: u64,
    /// Buffers of Q in L1: 1, or 2 where the device plan runs several items per block and L1 has
    /// room (the plan asks for two; the launch keeps one where that kernel does not compile,
    /// `plan::compiling_cfg`): the cube then unrolls its item loop
    /// by two, each half with its own Q, so the next item's Q load need not wait for the
    /// previous item's last Q K^T moves.
    pub qbufs: u64,
    /// The split kernel writes the call's result itself, `o` in the data dtype, and no merge
    /// kernel runs ([`plan`]): one top-k split (its merge weight is exp(lse - lse) = 1), no
    /// sink, and either a CPU run (the host sets lse = +inf on rows with no valid index) or a
    /// dense call, where every row has a token. The o written is the merge's bit for bit (its
    /// `0 + o * 1` turns a -0 into +0, and so does the kernel's `o + 0` before the cast).
    pub direct: bool,
}

/// What an attention op asks of the split kernel, field by field: [`AttnCfg::new`] chooses
/// the tiling from it. Each op fills it in its `plan` (`sparse_attention::kernel::plan`,
/// `paged_attention::kernel::plan`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct AttnSpec {
    /// Kernel name prefix.
    pub name: &'static str,
    /// Data dtype (q, caches, P).
    pub dtype: DType,
    /// Query heads per batch row.
    pub heads: u64,
    /// Query heads per head tile (clamped to `1..=128`).
    pub hg: u64,
    /// Columns gathered for K (the contraction).
    pub dqk: u64,
    /// Output columns (V width).
    pub v_dim: u64,
    /// Columns of a cache row.
    pub kv_cols: u64,
    /// Cache column offset per head tile (dense GQA: D; sparse: 0).
    pub head_col_stride: u64,
    /// Where V comes from: the first columns of the gathered K rows (sparse) or a cache of its
    /// own (dense).
    pub values: Values,
    /// Tokens per cache block.
    pub block_size: u64,
    /// Valid tokens of the call's fullest row where the caller knows them before planning (a
    /// dense call's longest context), else 0: on the CPU plan a dense call's chunk grows only
    /// while it is shorter than that.
    pub tokens: u64,
    /// Whether the target overlaps a block's pipes (the device, and profiling for it): then
    /// the gathered and L0 operand tiles are ping-ponged; otherwise (the simulator's CPU runs)
    /// they are buffered once and sized to the room that leaves
    /// ([`PlanTarget::pipes_overlap`]).
    pub double_buffer: bool,
}

impl AttnCfg {
    /// Chooses the tiling for `spec`: head tile, chunk, K and V slices within L1/L0/UB.
    pub fn new(spec: AttnSpec) -> Self {
        let AttnSpec {
            name,
            dtype,
            heads,
            hg,
            dqk,
            v_dim,
            kv_cols,
            head_col_stride,
            values,
            block_size,
            tokens,
            double_buffer,
        } = spec;
        let es = dtype.size_bytes();
        let hg = hg.clamp(1, 128);
        let single = !double_buffer && round_up(hg, 16) <= SINGLE_MAX_ROWS;
        let th = if single {
            round_up(hg, 16)
        } else {
            round_up(hg, 32)
        };
        let dp = round_up(dqk, 16);
        let vp = round_up(v_dim, 16);
        let bufs = if double_buffer { 2 } else { 1 };
        // Chunk: as large as L1 allows (Q + `bufs` K (and V) tiles + P), at most 128 (64 for
        // f32).
        let mut chunk = if es == 2 { 128 } else { 64 };
        // On the device, a narrow head tile takes longer chunks, up to the score-tile area of
        // the widest one (`th * chunk * es` <= 128 x 128 x 2 bytes: S, P and their Acc / UB /
        // L0A tiles stay within the sizes that case uses) and 256 tokens: each gathered tile's
        // MTE2 -> MTE1 flag waits for the DMA latency of its last row before the next gather
        // may start on MTE2, so fewer, larger gathers expose that latency less often. A dense
        // call (`Values::OwnCache`: every row a whole context) does the same on the CPU plan while
        // the chunk is shorter than its longest context: each chunk's fixed work (the Fixpipe
        // moves, the softmax update of the output, the flags and statements) is then paid a
        // quarter (f32) or half (bf16) as often, and a short context is not padded further.
        if double_buffer || values == Values::OwnCache {
            while chunk < 256
                && th * (2 * chunk) * es <= 128 * 128 * 2
                && (double_buffer || chunk < tokens)
            {
                chunk *= 2;
            }
        }
        // On the CPU plan a sparse call's chunk is no longer than its top-k rounded up to 16:
        // every row's indices then fit one chunk, and a wider one would only compute padding
        // (the demo's top-k of 32 took 64-token f32 chunks, half of each matmul and softmax
        // wasted).
        if !double_buffer && values == Values::KeyPrefix && tokens > 0 {
            chunk = chunk.min(round_up(tokens, 16));
        }
        let l1 = |c: u64| {
            let kv = values.gathered_tiles() * bufs * c * dp * es;
            th * dp * es + kv + th * c * es
        };
        while chunk > 16 && l1(chunk) > 500 * 1024 {
            chunk /= 2;
        }
        let pbufs = if !double_buffer && l1(chunk) + th * chunk * es <= 500 * 1024 {
            2
        } else {
            1
        };
        // K slice: `bufs` Q slices + P in L0A (64 KiB) ...
        let l0a = 64 * 1024 - th * chunk * es;
        // ... and the K^T slices take at most half of L0B (64 KiB), leaving room for V slices.
        let ks_max = (l0a / (bufs * th * es))
            .min(32 * 1024 / (bufs * chunk * es))
            .max(16)
            / 16
            * 16;
        let ks = best_slice(dp, ks_max);
        // V slice: K^T slices + V slices in L0B (64 KiB); at most 128 columns (UB).
        let l0b = 64 * 1024 - bufs * ks * chunk * es;
        let ns_max = (l0b / (bufs * chunk * es)).clamp(16, 128) / 16 * 16;
        let ns = best_slice(vp, ns_max);
        AttnCfg {
            name,
            dtype,
            heads,
            hg,
            nht: heads.div_ceil(hg),
            dqk,
            v_dim,
            kv_cols,
            head_col_stride,
            values,
            block_size,
            th,
            single,
            chunk,
            ks,
            ns,
            bufs,
            pbufs,
            ipb: 1,
            qbufs: 1,
            direct: false,
        }
    }

    /// The cache key: the configuration itself (every static parameter the kernel reads).
    pub fn key(&self) -> &Self {
        self
    }

    /// Whether Q may take two L1 buffers ([`AttnCfg::qbufs`]): a device block running several
    /// work items, with room in L1 for a second Q beside the gathered tiles and P.
    pub(crate) fn q_double_fits(&self) -> bool {
        let es = self.dtype.size_bytes();
        let q = self.th * self.dp() * es;
        let kv = self.values.gathered_tiles() * self.bufs * self.chunk * self.dp() * es;
        let p = self.pbufs * self.th * self.chunk * es;
        self.ipb > 1 && self.bufs > 1 && 2 * q + kv + p <= 500 * 1024
    }

    /// Q/K columns padded to a multiple of 16.
    pub fn dp(&self) -> u64 {
        round_up(self.dqk, 16)
    }

    /// V columns padded to a multiple of 16.
    pub fn vp(&self) -> u64 {
        round_up(self.v_dim, 16)
    }

    /// Head rows per AIV that holds any: `th / 2`, or `th` with [`AttnCfg::single`].
    pub fn r(&self) -> u64 {
        if self.single {
            self.th
        } else {
            self.th / 2
        }
    }

    /// How the Fixpipe hands the scores and P V to the vector cores: whole to AIV0 with
    /// [`AttnCfg::single`], else split by rows.
    pub fn acc_mode(&self) -> AccToVecMode {
        if self.single {
            AccToVecMode::SingleModeVec0
        } else {
            AccToVecMode::DualModeSplitM
        }
    }
}
