//! The host side of the attention kernels: [`run_attention`] builds their arguments, launches
//! the split and merge kernels and keeps the split workspace between calls.

use super::merge::attn_merge;
use super::plan::{compiling_cfg, AttnPlan, SplitPlan};
use super::split::attn_split;
use crate::error::OpError;
use crate::runtime::{compiled, Runner};
use tile_backend::ir::DType;
use tile_backend::launch::{Arg, GmInput, GmTensor};

/// Host-side inputs of one attention call, already in kernel form.
pub(crate) struct AttnInputs<'a> {
    /// `q [batch*heads, dqk]`.
    pub q: GmInput<'a>,
    /// `[tokens, kv_cols]`.
    pub kv: GmInput<'a>,
    /// Separate V cache `[tokens, kv_cols]` (dense).
    pub v: Option<GmInput<'a>>,
    /// `[batch, topk]` compacted logical indices.
    pub indices: Vec<i64>,
    /// Columns of `indices`.
    pub topk: usize,
    /// Valid indices per batch row (the fullest is the plan's `longest`).
    pub counts: Vec<i64>,
    /// `[batch, max_blocks]` block table.
    pub block_table: &'a [i64],
    /// Columns of the block table.
    pub max_blocks: usize,
    /// Softmax scale.
    pub scale: f32,
    /// Per-head sink (`[heads]`).
    pub sink: Option<&'a [f32]>,
}

/// Runs the split kernel and the merge kernel as `plan` says (the call's plan for the runner's
/// target): returns `out [batch*heads, v_dim]` (data dtype) and `lse [batch*heads]` f32.
pub(crate) fn run_attention(
    runner: &mut Runner,
    op: &'static str,
    plan: &AttnPlan,
    inp: AttnInputs<'_>,
) -> Result<(GmTensor, GmTensor), OpError> {
    let AttnPlan {
        cfg,
        batch,
        split: SplitPlan {
            splits,
            cps,
            blocks,
        },
        rows,
        merge,
        ..
    } = plan;
    let (batch, splits, rows) = (*batch, *splits, *rows);
    let v_dim = cfg.v_dim as usize;
    if rows == 0 {
        return Ok((
            GmTensor::zeros(cfg.dtype, &[0, v_dim]),
            GmTensor::zeros(DType::F32, &[0]),
        ));
    }
    let tokens = inp.kv.shape.first().copied().unwrap_or(0);
    let cfg = &compiling_cfg(op, cfg);
    let kernel = compiled(op, cfg.key(), || attn_split(cfg))?;
    let as_i32 = |shape: &[usize], v: &[i64]| GmTensor::from_i64(DType::I32, shape, v);
    let ws = splits * rows;
    // A direct kernel's o is the result, in the data dtype (see `AttnCfg::direct`).
    let o_dt = if cfg.direct { cfg.dtype } else { DType::F32 };
    let mut named = vec![
        ("batch", Arg::Int(batch as i64)),
        ("topk", Arg::Int(inp.topk as i64)),
        ("max_blocks", Arg::Int(inp.max_blocks as i64)),
        ("tokens", Arg::Int(tokens as i64)),
        ("splits", Arg::Int(splits as i64)),
        ("chunks_per_split", Arg::Int(*cps as i64)),
        ("scale", Arg::Float(inp.scale as f64)),
        ("q", Arg::Input(inp.q)),
        ("kv", Arg::Input(inp.kv)),
        (
            "indices",
            Arg::Tensor(as_i32(&[batch, inp.topk], &inp.indices)),
        ),
        (
            "block_table",
            Arg::Tensor(as_i32(&[batch, inp.max_blocks], inp.block_table)),
        ),
        ("counts", Arg::Tensor(as_i32(&[batch], &inp.counts))),
        (
            "o_ws",
            Arg::Tensor(GmTensor {
                dtype: o_dt,
                shape: vec![ws, v_dim],
                data: workspace::zeroed(ws * v_dim * o_dt.size_bytes() as usize),
            }),
        ),
        ("lse_ws", Arg::Tensor(GmTensor::zeros(DType::F32, &[ws]))),
    ];
    if let Some(v) = inp.v {
        named.push(("v", Arg::Input(v)));
    }
    let mut args = runner.launch_named(kernel, *blocks as usize, named)?;
    let mut lse_ws = runner.take(kernel, &mut args, "lse_ws")?;
    let o_ws = runner.take(kernel, &mut args, "o_ws")?;
    drop(args);
    let heads = cfg.heads as usize;
    let has_token = |g: usize| inp.counts[g / heads] > 0;
    let Some((mcfg, merge_blocks)) = merge else {
        // The plan skips an identity merge: the one split's o and lse are the result as they
        // are; rows with no valid index take lse = +inf (their o is already 0).
        for (g, lse) in lse_ws.data.chunks_exact_mut(4).enumerate() {
            if !has_token(g) {
                lse.copy_from_slice(&f32::INFINITY.to_le_bytes());
            }
        }
        return Ok((o_ws, lse_ws));
    };
    let merge = compiled(op, mcfg.key(), || attn_merge(mcfg))?;
    // Added to the merged lse: +inf on rows with no valid index, 0 (NaN stays NaN) elsewhere.
    let fix: Vec<f32> = (0..rows)
        .map(|g| if has_token(g) { 0.0 } else { f32::INFINITY })
        .collect();
    let mut named = vec![
        ("rows", Arg::Int(rows as i64)),
        ("splits", Arg::Int(splits as i64)),
        ("o_ws", Arg::Tensor(o_ws)),
        ("lse_ws", Arg::Tensor(lse_ws)),
        (
            "fix",
            Arg::Tensor(GmTensor::from_f32(DType::F32, &[rows], &fix)),
        ),
        (
            "out",
            Arg::Tensor(GmTensor::zeros(cfg.dtype, &[rows, v_dim])),
        ),
        ("lse", Arg::Tensor(GmTensor::zeros(DType::F32, &[rows]))),
    ];
    if let Some(s) = inp.sink {
        let per_row: Vec<f32> = (0..rows).map(|g| s[g % heads]).collect();
        named.push((
            "sink",
            Arg::Tensor(GmTensor::from_f32(DType::F32, &[rows], &per_row)),
        ));
    }
    let mut margs = runner.launch_named(merge, *merge_blocks, named)?;
    let lse = runner.take(merge, &mut margs, "lse")?;
    let out = runner.take(merge, &mut margs, "out")?;
    if let Ok(o_ws) = runner.take(merge, &mut margs, "o_ws") {
        workspace::keep(o_ws.data);
    }
    Ok((out, lse))
}

/// The split workspace's bytes, kept between calls on a thread: a fresh multi-megabyte
/// allocation per decode step (8.4 MB at the DeepSeek shape) costs a page fault per 4 KiB on
/// first touch. A thread holds at most one such buffer (the largest it needed last).
pub(super) mod workspace {
    use std::cell::RefCell;

    thread_local! {
        static KEPT: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    }

    /// `len` zero bytes, in the kept buffer when there is one.
    pub(in crate::templates::attention) fn zeroed(len: usize) -> Vec<u8> {
        let mut v = KEPT.with(|k| std::mem::take(&mut *k.borrow_mut()));
        v.clear();
        v.resize(len, 0);
        v
    }

    /// Keeps `v` for the next call on this thread.
    pub(in crate::templates::attention) fn keep(v: Vec<u8>) {
        KEPT.with(|k| *k.borrow_mut() = v);
    }

    /// Keeps `v` for the next call on this thread unless the kept buffer is larger.
    pub(crate) fn recycle(v: Vec<u8>) {
        KEPT.with(|k| {
            let mut kept = k.borrow_mut();
            if v.capacity() > kept.capacity() {
                *kept = v;
            }
        });
    }
}

/// Hands an attention result's bytes, once copied into candle's storage, back to this thread's
/// split workspace: with one f32 split the workspace *is* the result, and without this every
/// decode step would allocate (and page-fault) its workspace afresh.
pub(crate) fn recycle_result(out: GmTensor) {
    workspace::recycle(out.data);
}
