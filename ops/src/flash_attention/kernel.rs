//! The flash-attention ops' host code for the kernel backends: each (sequence, head) problem of
//! a call, in the flat form of the shared DN-mode kernel (`templates::attention::flash_dn`).
//!
//! CONTRACT (the op layer in `mod.rs` calls exactly this): the calls are validated.

use super::{Dense, Varlen};
use crate::error::OpError;
use crate::runtime::Runner;
use crate::templates::attention::{run_flash, FlashCfg, FlashInputs, FlashProblem, FlashSpec};
use tile_backend::ir::DType;
use tile_backend::launch::{GmInput, GmTensor};

/// The kernel's static shape for head dims `d`/`dv` of `dtype` and problems of at most
/// `max_sq` queries and `max_skv` keys. The ops and [`crate::kernels`] both build their kernels
/// from it.
pub(crate) fn flash_cfg(
    name: &'static str,
    dtype: DType,
    (d, dv): (usize, usize),
    max_sq: usize,
    max_skv: usize,
) -> FlashCfg {
    FlashCfg::new(FlashSpec {
        name,
        dtype,
        d: d as u64,
        dv: dv as u64,
        max_sq: max_sq as u64,
        max_skv: max_skv as u64,
        write_p: false,
    })
}

/// The problems of a dense call `q [B, H, Sq, D]`, `k [B, Hkv, Skv, D]`, `v [B, Hkv, Skv, Dv]`
/// -> `out [B, H, Sq, Dv]`, `lse [B, H, Sq]`, and the row strides `[D, D, Dv, Dv]`.
pub(crate) fn dense_problems(p: &Dense) -> (Vec<FlashProblem>, [usize; 4]) {
    let g = p.heads / p.kv_heads.max(1);
    let mut problems = Vec::with_capacity(p.batch * p.heads);
    for b in 0..p.batch {
        for h in 0..p.heads {
            let row = b * p.heads + h;
            let kv = b * p.kv_heads + h / g.max(1);
            problems.push(FlashProblem {
                q_off: row * p.sq * p.d,
                k_off: kv * p.skv * p.d,
                v_off: kv * p.skv * p.dv,
                o_off: row * p.sq * p.dv,
                lse_off: row * p.sq,
                sq: p.sq,
                skv: p.skv,
            });
        }
    }
    (problems, [p.d, p.d, p.dv, p.dv])
}

/// Runs a dense call: `out [B*H*Sq*Dv]` (q's dtype) and `lse [B*H*Sq]` f32, flat.
pub(crate) fn run_dense(
    runner: &mut Runner,
    op: &'static str,
    q: GmInput<'_>,
    k: GmInput<'_>,
    v: GmInput<'_>,
    p: &Dense,
) -> Result<(GmTensor, GmTensor), OpError> {
    let cfg = flash_cfg("flash_attn", q.dtype, (p.d, p.dv), p.sq, p.skv);
    let (problems, strides) = dense_problems(p);
    let rows = p.batch * p.heads * p.sq;
    run_flash(
        runner,
        op,
        &cfg,
        FlashInputs {
            q,
            k,
            v: Some(v),
            strides,
            o_len: rows * p.dv,
            lse_len: rows,
            problems,
            scale: p.scale,
            causal: p.causal,
        },
    )
}

/// Runs a varlen call `q [total_q, H, D]`, `k [total_k, Hkv, D]`, `v [total_k, Hkv, Dv]`:
/// `out [total_q * H * Dv]` (q's dtype) and `lse [total_q * H]` f32 (token-major), flat.
pub(crate) fn run_varlen(
    runner: &mut Runner,
    op: &'static str,
    q: GmInput<'_>,
    k: GmInput<'_>,
    v: GmInput<'_>,
    p: &Varlen,
    d: usize,
) -> Result<(GmTensor, GmTensor), OpError> {
    let (h_n, hkv) = (p.heads, p.kv_heads.max(1));
    let g = (h_n / hkv).max(1);
    let longest = |cu: &[usize]| cu.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
    let cfg = flash_cfg(
        "flash_attn",
        q.dtype,
        (d, p.dv),
        longest(&p.cu_q),
        longest(&p.cu_k),
    );
    let mut problems = Vec::new();
    for (wq, wk) in p.cu_q.windows(2).zip(p.cu_k.windows(2)) {
        for h in 0..h_n {
            problems.push(FlashProblem {
                q_off: (wq[0] * h_n + h) * d,
                k_off: (wk[0] * hkv + h / g) * d,
                v_off: (wk[0] * hkv + h / g) * p.dv,
                o_off: (wq[0] * h_n + h) * p.dv,
                // Head-major [H, total_q] in the kernel; transposed below.
                lse_off: h * p.total_q + wq[0],
                sq: wq[1] - wq[0],
                skv: wk[1] - wk[0],
            });
        }
    }
    let (out, lse_hm) = run_flash(
        runner,
        op,
        &cfg,
        FlashInputs {
            q,
            k,
            v: Some(v),
            strides: [h_n * d, hkv * d, hkv * p.dv, h_n * p.dv],
            o_len: p.total_q * h_n * p.dv,
            lse_len: p.total_q * h_n,
            problems,
            scale: p.scale,
            causal: p.causal,
        },
    )?;
    let hm = lse_hm.to_f32();
    let mut tm = vec![0f32; hm.len()];
    for h in 0..h_n {
        for t in 0..p.total_q {
            tm[t * h_n + h] = hm[h * p.total_q + t];
        }
    }
    Ok((out, GmTensor::from_f32(DType::F32, &[tm.len()], &tm)))
}

/// The P-writing kernel's shape, its one problem and the row strides for `qk_softmax` of `m`
/// queries against `n` keys of head dim `d`. [`run_qk_softmax`] and [`crate::kernels`] both
/// launch from it.
pub(crate) fn qk_plan(
    dtype: DType,
    m: usize,
    n: usize,
    d: usize,
) -> (FlashCfg, FlashProblem, [usize; 4]) {
    let mut cfg = flash_cfg("qk_softmax", dtype, (d, 16), m, n);
    cfg.write_p = true;
    let problem = FlashProblem {
        q_off: 0,
        k_off: 0,
        v_off: 0,
        o_off: 0,
        lse_off: 0,
        sq: m,
        skv: n,
    };
    (cfg, problem, [d, d, 0, m])
}

/// Runs `qk_softmax` on `q [M, D]`, `k [N, D]`: the kernel's P-writing variant writes P^T
/// `[N, M]` (each AIV's `[keys, queries]` tile as it lies in UB); returned transposed, `[M, N]`
/// (q's dtype, flat).
pub(crate) fn run_qk_softmax(
    runner: &mut Runner,
    op: &'static str,
    q: GmInput<'_>,
    k: GmInput<'_>,
    scale: f32,
) -> Result<GmTensor, OpError> {
    let (m, d) = match q.shape[..] {
        [m, d] => (m, d),
        _ => return Err(OpError::invalid(op, "q", "must be [M, D]")),
    };
    let n = k.shape.first().copied().unwrap_or(0);
    let dtype = q.dtype;
    let (cfg, problem, strides) = qk_plan(dtype, m, n, d);
    let (pt, _lse) = run_flash(
        runner,
        op,
        &cfg,
        FlashInputs {
            q,
            k,
            v: None,
            strides,
            o_len: n * m,
            lse_len: m,
            problems: vec![problem],
            scale,
            causal: false,
        },
    )?;
    if !runner.executes() {
        return Ok(pt);
    }
    let es = dtype.size_bytes() as usize;
    let mut p = vec![0u8; pt.data.len()];
    for j in 0..n {
        for i in 0..m {
            let (src, dst) = ((j * m + i) * es, (i * n + j) * es);
            p[dst..dst + es].copy_from_slice(&pt.data[src..src + es]);
        }
    }
    Ok(GmTensor {
        dtype,
        shape: vec![m * n],
        data: p,
    })
}
