//! The flash-attention ops' launch plans and host code for the kernel backends: each
//! (sequence, head) problem of a call, in the flat form of the shared DN-mode kernel
//! (`dn::flash_dn`).
//!
//! CONTRACT (the op layer in `mod.rs` calls exactly this): [`run`] and [`run_qk`] receive a
//! validated call ([`FlashCall`], [`QkCall`]) and the storage it describes; [`plan`] and
//! [`qk_plan`] are the calls' one launch plans, which the runs and `tileops emit`
//! ([`super::shape::launches`], [`super::shape::qk_launches`]) both launch from. The flash plan
//! depends on the target ([`PlanTarget`]): the device plan of a call without the causal mask
//! takes the kernel's wide tiling (256-query tiles, so K and V are read once per 256 queries,
//! `FlashCfg::wide`) where it fits, the CPU plan keeps the 128-query tiles the simulator runs
//! fastest; `qk_softmax`'s plan is the same on every target.

use super::dn::cfg::{FlashCfg, FlashSpec};
use super::dn::host::{run_flash, FlashInputs, FlashLens, FlashPlan, FlashProblem};
use super::{FlashAttentionShape, FlashCall, QkCall, QkSoftmaxShape, Seqs};
use crate::bridge;
use crate::error::OpError;
use crate::registry::Checked;
use crate::runtime::{PlanTarget, Runner};
use tile_backend::ir::DType;
use tile_backend::launch::{GmInput, GmTensor};

/// The launch plan of a flash call of `shape` whose sequences lie as `seqs` says, for
/// `target`: the kernel tiled for problems of at most `seq_q` queries and `seq_kv` keys (on
/// the device and without the causal mask, wide where that fits), and one problem per
/// (sequence, head), head `h` reading KV head `h / (H / Hkv)`.
///
/// Dense: `q [B, H, Sq, D]`, `k [B, Hkv, Skv, D]`, `v [B, Hkv, Skv, Dv]` -> `out [B, H, Sq, Dv]`,
/// `lse [B, H, Sq]`; row strides `[D, D, Dv, Dv]`. Packed: `q [total_q, H, D]`, `k [total_k,
/// Hkv, D]`, `v [total_k, Hkv, Dv]` -> `out [total_q, H, Dv]`, lse head-major `[H, total_q]`;
/// row strides `[H D, Hkv D, Hkv Dv, H Dv]`.
pub(crate) fn plan(
    shape: &Checked<FlashAttentionShape>,
    seqs: &Seqs,
    target: PlanTarget,
) -> FlashPlan {
    let s = shape;
    let cfg = FlashCfg::new(FlashSpec {
        name: "flash_attn",
        dtype: s.dtype,
        d: s.head_dim as u64,
        dv: s.v_dim as u64,
        max_sq: s.seq_q as u64,
        max_skv: s.seq_kv as u64,
        write_p: false,
        device: target == PlanTarget::Device,
        causal: s.causal,
    });
    let (h, hkv, d, dv) = (s.heads, s.kv_heads.max(1), s.head_dim, s.v_dim);
    let g = (h / hkv).max(1);
    let mut problems = Vec::new();
    let (strides, rows_q, rows_k) = match seqs {
        Seqs::Dense => {
            for b in 0..s.batch {
                for head in 0..h {
                    let row = b * h + head;
                    let kv = b * hkv + head / g;
                    problems.push(FlashProblem {
                        q_off: row * s.seq_q * d,
                        k_off: kv * s.seq_kv * d,
                        v_off: kv * s.seq_kv * dv,
                        o_off: row * s.seq_q * dv,
                        lse_off: row * s.seq_q,
                        sq: s.seq_q,
                        skv: s.seq_kv,
                    });
                }
            }
            ([d, d, dv, dv], s.batch * s.seq_q, s.batch * s.seq_kv)
        }
        Seqs::Packed { cu_q, cu_k } => {
            let total_q = cu_q.last().copied().unwrap_or(0);
            for (wq, wk) in cu_q.windows(2).zip(cu_k.windows(2)) {
                for head in 0..h {
                    problems.push(FlashProblem {
                        q_off: (wq[0] * h + head) * d,
                        k_off: (wk[0] * hkv + head / g) * d,
                        v_off: (wk[0] * hkv + head / g) * dv,
                        o_off: (wq[0] * h + head) * dv,
                        // Head-major [H, total_q] in the kernel; `run` transposes it.
                        lse_off: head * total_q + wq[0],
                        sq: wq[1] - wq[0],
                        skv: wk[1] - wk[0],
                    });
                }
            }
            let total_k = cu_k.last().copied().unwrap_or(0);
            ([h * d, hkv * d, hkv * dv, h * dv], total_q, total_k)
        }
    };
    FlashPlan {
        cfg,
        problems,
        causal: s.causal,
        strides,
        lens: FlashLens {
            q: rows_q * h * d,
            k: rows_k * hkv * d,
            v: rows_k * hkv * dv,
            o: rows_q * h * dv,
            lse: rows_q * h,
        },
    }
}

/// The launch plan of a `qk_softmax` call of `shape`: the kernel's P-writing variant over one
/// problem, `q [M, D]` against `k [N, D]`, writing P^T `[N, M]` (row strides `[D, D, 0, M]`).
pub(crate) fn qk_plan(shape: &Checked<QkSoftmaxShape>) -> FlashPlan {
    let (m, n, d) = (shape.m, shape.n, shape.head_dim);
    FlashPlan {
        cfg: FlashCfg::new(FlashSpec {
            name: "qk_softmax",
            dtype: shape.dtype,
            d: d as u64,
            dv: 16,
            max_sq: m as u64,
            max_skv: n as u64,
            write_p: true,
            device: false,
            causal: false,
        }),
        problems: vec![FlashProblem {
            q_off: 0,
            k_off: 0,
            v_off: 0,
            o_off: 0,
            lse_off: 0,
            sq: m,
            skv: n,
        }],
        causal: false,
        strides: [d, d, 0, m],
        lens: FlashLens {
            q: m * d,
            k: n * d,
            v: 0,
            o: n * m,
            lse: m,
        },
    }
}

/// Runs a flash call on q, k, v (borrowed storage, the call's dtype and sizes): `out` flat in
/// the call's output order (q's dtype) and `lse` f32 flat (`[B, H, Sq]` dense, token-major
/// `[total_q, H]` packed).
///
/// # Errors
/// [`OpError::Invalid`] when q, k or v is not the storage `call` describes; kernel errors.
pub(crate) fn run(
    runner: &mut Runner,
    call: &FlashCall,
    q: GmInput<'_>,
    k: GmInput<'_>,
    v: GmInput<'_>,
) -> Result<(GmTensor, GmTensor), OpError> {
    let op = call.op();
    let plan = plan(&call.shape, &call.seqs, runner.plan_target());
    let dtype = call.shape.dtype;
    for (arg, t, len) in [
        ("q", &q, plan.lens.q),
        ("k", &k, plan.lens.k),
        ("v", &v, plan.lens.v),
    ] {
        bridge::check_storage(op, arg, (t.dtype, t.data.len()), dtype, len)?;
    }
    let (out, lse) = run_flash(
        runner,
        op,
        &plan,
        FlashInputs {
            q,
            k,
            v: Some(v),
            scale: call.scale,
        },
    )?;
    if call.seqs == Seqs::Dense {
        return Ok((out, lse));
    }
    // Packed: the kernel wrote lse head-major, [H, total_q].
    let (h_n, total_q) = (call.shape.heads, call.total_q());
    let hm = lse.to_f32();
    let mut tm = vec![0f32; hm.len()];
    for h in 0..h_n {
        for t in 0..total_q {
            tm[t * h_n + h] = hm[h * total_q + t];
        }
    }
    Ok((out, GmTensor::from_f32(DType::F32, &[tm.len()], &tm)))
}

/// Runs `qk_softmax` on `q [M, D]`, `k [N, D]` (borrowed storage, the call's dtype and sizes):
/// the kernel's P-writing variant writes P^T `[N, M]` (each AIV's `[keys, queries]` tile as it
/// lies in UB); returned transposed, `[M, N]` (q's dtype, flat).
///
/// # Errors
/// [`OpError::Invalid`] when q or k is not the storage `call` describes; kernel errors.
pub(crate) fn run_qk(
    runner: &mut Runner,
    op: &'static str,
    call: &QkCall,
    q: GmInput<'_>,
    k: GmInput<'_>,
) -> Result<GmTensor, OpError> {
    let s = &call.shape;
    let plan = qk_plan(s);
    for (arg, t, len) in [("q", &q, plan.lens.q), ("k", &k, plan.lens.k)] {
        bridge::check_storage(op, arg, (t.dtype, t.data.len()), s.dtype, len)?;
    }
    let (pt, _lse) = run_flash(
        runner,
        op,
        &plan,
        FlashInputs {
            q,
            k,
            v: None,
            scale: call.scale,
        },
    )?;
    if !runner.executes() {
        return Ok(pt);
    }
    let (m, n) = (s.m, s.n);
    let es = s.dtype.size_bytes() as usize;
    let mut p = vec![0u8; pt.data.len()];
    for j in 0..n {
        for i in 0..m {
            let (src, dst) = ((j * m + i) * es, (i * n + j) * es);
            p[dst..dst + es].copy_from_slice(&pt.data[src..src + es]);
        }
    }
    Ok(GmTensor {
        dtype: s.dtype,
        shape: vec![m * n],
        data: p,
    })
}
