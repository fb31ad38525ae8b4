//! The sparse and dense paged-attention tile kernels, run in the simulator under `profile`
//! (no hazards allowed), against a plain f64 scalar model.

use crate::paged_attention::{kernel as paged, PagedCall};
use crate::runtime::{PlanTarget, Runner};
use crate::sparse_attention::{kernel as sparse, SparseCall};
use crate::{PagedAttentionParams, SparseAttentionParams};
use candle_core::{Device, Tensor};
use tile_backend::ir::DType;
use tile_backend::sim::GmTensor;

use super::support;

use support::{from_gm, Rng};

fn tensor(rng: &mut Rng, dtype: DType, shape: &[usize], amp: f32) -> GmTensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|_| rng.uniform(-1.0, 1.0) * amp).collect();
    GmTensor::from_f32(dtype, shape, &v)
}

/// Integers as an I64 candle tensor of `shape`.
fn ints(v: &[i64], shape: &[usize]) -> Tensor {
    support::ints(v, shape, candle_core::DType::I64)
}

/// The validated sparse call of these host values.
fn sparse_call(
    q: &GmTensor,
    kv: &GmTensor,
    indices: &[i64],
    block_table: &[i64],
    max_blocks: usize,
    params: SparseAttentionParams,
) -> SparseCall {
    let b = q.shape[0];
    SparseCall::validate(
        &from_gm(q),
        &from_gm(kv),
        &ints(indices, &[b, indices.len() / b]),
        &ints(block_table, &[b, max_blocks]),
        &params,
    )
    .expect("a valid call")
}

/// Tolerances (atol, rtol) of `out` per dtype.
fn out_tol(dtype: DType) -> (f64, f64) {
    match dtype {
        DType::F32 => (1e-5, 1e-4),
        DType::F16 => (1e-3, 2f64.powi(-9)),
        _ => (1e-3, 2f64.powi(-7)),
    }
}

fn check(what: &str, got: &[f32], want: &[f64], (atol, rtol): (f64, f64)) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let mut worst = (0.0f64, 0usize);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = if w.is_infinite() {
            g as f64 == w
        } else {
            let err = (g as f64 - w).abs();
            let excess = err - (atol + rtol * w.abs());
            if excess > worst.0 {
                worst = (excess, i);
            }
            err <= atol + rtol * w.abs()
        };
        assert!(
            ok,
            "{what}[{i}]: got {g}, want {w} (atol {atol}, rtol {rtol}); worst excess {:?}",
            worst
        );
    }
}

/// One attention row in f64: softmax(scale * q . K_j) . V_j over `rows` (K_j, V_j slices).
/// Returns (out, lse); no row: (0, +inf).
fn attend(
    q: &[f64],
    keys: &[&[f64]],
    vals: &[&[f64]],
    v_dim: usize,
    scale: f64,
) -> (Vec<f64>, f64) {
    if keys.is_empty() {
        return (vec![0.0; v_dim], f64::INFINITY);
    }
    let s: Vec<f64> = keys
        .iter()
        .map(|k| scale * q.iter().zip(k.iter()).map(|(a, b)| a * b).sum::<f64>())
        .collect();
    let m = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
    let sum: f64 = e.iter().sum();
    let mut out = vec![0.0; v_dim];
    for (w, v) in e.iter().zip(vals) {
        for (o, x) in out.iter_mut().zip(v.iter()) {
            *o += w / sum * x;
        }
    }
    (out, m + sum.ln())
}

fn hazard_free(records: &[crate::LaunchRecord]) {
    assert!(!records.is_empty(), "no launch was profiled");
    for r in records {
        assert!(
            r.hazards.is_empty(),
            "{}: hazards:\n{}",
            r.kernel,
            r.hazards.join("\n")
        );
    }
}

#[derive(Debug, Clone)]
struct SparseCase {
    b: usize,
    h: usize,
    dqk: usize,
    v_dim: usize,
    topk: usize,
    bs: usize,
    dtype: DType,
    /// Fraction (per 8) of slots set to -1.
    invalid: usize,
    /// A row whose indices are all -1.
    empty_row: bool,
    dups: bool,
    topk_length: bool,
    sink: bool,
    seed: u64,
    /// Plan the launch for this target instead of the device (the profiled default).
    plan: Option<PlanTarget>,
}

impl SparseCase {
    fn new(
        b: usize,
        h: usize,
        dqk: usize,
        v_dim: usize,
        topk: usize,
        bs: usize,
        dtype: DType,
    ) -> Self {
        SparseCase {
            b,
            h,
            dqk,
            v_dim,
            topk,
            bs,
            dtype,
            invalid: 0,
            empty_row: false,
            dups: false,
            topk_length: false,
            sink: false,
            seed: 1,
            plan: None,
        }
    }
}

fn run_sparse(c: &SparseCase) {
    let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15 ^ c.seed.wrapping_mul(7919));
    // Logical context long enough for the top-k (distinct unless duplicates are wanted).
    let ctx = (c.topk + 5).max(c.bs);
    let max_blocks = ctx.div_ceil(c.bs) + 1;
    let num_blocks = c.b * max_blocks + 3;
    let q = tensor(&mut rng, c.dtype, &[c.b, c.h, c.dqk], 1.0);
    let kv = tensor(&mut rng, c.dtype, &[num_blocks, c.bs, c.dqk], 1.0);
    // Shuffled block tables over distinct physical blocks; the unreachable tail is -1.
    let mut phys: Vec<i64> = (0..num_blocks as i64).collect();
    rng.shuffle(&mut phys);
    let mut block_table = vec![-1i64; c.b * max_blocks];
    for row in 0..c.b {
        for j in 0..ctx.div_ceil(c.bs) {
            block_table[row * max_blocks + j] = phys[row * max_blocks + j];
        }
    }
    let mut indices = Vec::with_capacity(c.b * c.topk);
    for row in 0..c.b {
        let mut toks: Vec<i64> = (0..ctx as i64).collect();
        rng.shuffle(&mut toks);
        for j in 0..c.topk {
            let mut t = toks[j];
            if c.dups && j % 3 == 1 {
                t = toks[j / 2];
            }
            if c.invalid > 0 && rng.below(8) < c.invalid {
                t = -1;
            }
            if c.empty_row && row == c.b - 1 {
                t = -1;
            }
            indices.push(t);
        }
    }
    let topk_length = c.topk_length.then(|| {
        (0..c.b)
            .map(|r| ((r * 7 + 3) % (c.topk + 1)) as i64)
            .collect::<Vec<_>>()
    });
    let sink = c.sink.then(|| {
        (0..c.h)
            .map(|_| rng.uniform(-1.0, 1.0) * 2.0)
            .collect::<Vec<f32>>()
    });
    let scale = 1.0 / (c.dqk as f32).sqrt() * 1.5;
    let mut params = SparseAttentionParams::new(c.v_dim, scale);
    params.topk_length = topk_length.as_ref().map(|l| ints(l, &[c.b]));
    params.sink = sink
        .as_ref()
        .map(|s| Tensor::from_slice(s, c.h, &Device::Cpu).expect("sink"));
    let call = sparse_call(&q, &kv, &indices, &block_table, max_blocks, params);
    let (res, records) = crate::profile(|| {
        let mut runner = Runner::for_backend("sparse_paged_attention", crate::Backend::TileSim);
        if let Some(target) = c.plan {
            runner = runner.plan_for(target);
        }
        sparse::run(&mut runner, &call, q.as_input(), kv.as_input())
    });
    let (out, lse) = res.unwrap_or_else(|e| panic!("{c:?}: {e}"));
    hazard_free(&records);
    assert_eq!(out.shape, vec![c.b, c.h, c.v_dim]);
    assert_eq!(out.dtype, c.dtype);
    assert_eq!(lse.shape, vec![c.b, c.h]);

    // The f64 model.
    let qf: Vec<f64> = q.to_f32().into_iter().map(f64::from).collect();
    let kf: Vec<f64> = kv.to_f32().into_iter().map(f64::from).collect();
    let mut want_out = Vec::new();
    let mut want_lse = Vec::new();
    for row in 0..c.b {
        let len = topk_length.as_ref().map_or(c.topk, |l| l[row] as usize);
        let rows: Vec<&[f64]> = indices[row * c.topk..row * c.topk + len]
            .iter()
            .filter(|&&t| t >= 0)
            .map(|&t| {
                let t = t as usize;
                let blk = block_table[row * max_blocks + t / c.bs] as usize;
                let r = blk * c.bs + t % c.bs;
                &kf[r * c.dqk..(r + 1) * c.dqk]
            })
            .collect();
        let vals: Vec<&[f64]> = rows.iter().map(|k| &k[..c.v_dim]).collect();
        for hh in 0..c.h {
            let qrow = &qf[(row * c.h + hh) * c.dqk..(row * c.h + hh + 1) * c.dqk];
            let (mut o, l) = attend(qrow, &rows, &vals, c.v_dim, scale as f64);
            if let Some(s) = &sink {
                if l.is_finite() {
                    let f = 1.0 / (1.0 + (s[hh] as f64 - l).exp());
                    o.iter_mut().for_each(|x| *x *= f);
                }
            }
            want_out.extend(o);
            want_lse.push(l);
        }
    }
    check(
        &format!("{c:?} out"),
        &out.to_f32(),
        &want_out,
        out_tol(c.dtype),
    );
    check(
        &format!("{c:?} lse"),
        &lse.to_f32(),
        &want_lse,
        (1e-4, 1e-5),
    );
}

#[test]
fn sparse_small_shapes_all_dtypes() {
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for (h, topk, bs) in [(1, 1, 1), (4, 63, 16), (16, 64, 64), (20, 65, 16)] {
            run_sparse(&SparseCase::new(2, h, 64, 48, topk, bs, dtype));
        }
    }
}

#[test]
fn sparse_tails_and_options() {
    let base = SparseCase::new(3, 8, 64, 32, 65, 16, DType::BF16);
    run_sparse(&SparseCase {
        invalid: 2,
        dups: true,
        seed: 2,
        ..base.clone()
    });
    run_sparse(&SparseCase {
        empty_row: true,
        sink: true,
        seed: 3,
        ..base.clone()
    });
    run_sparse(&SparseCase {
        topk_length: true,
        invalid: 1,
        seed: 4,
        dtype: DType::F16,
        ..base.clone()
    });
    run_sparse(&SparseCase {
        topk: 300,
        bs: 1,
        sink: true,
        dtype: DType::F32,
        seed: 5,
        ..base
    });
}

#[test]
fn sparse_several_chunks_per_split() {
    // 8 rows x 1 head tile: 4 splits, so each split runs several chunks (odd and even counts).
    run_sparse(&SparseCase {
        invalid: 1,
        dups: true,
        seed: 8,
        ..SparseCase::new(8, 4, 64, 64, 300, 16, DType::BF16)
    });
    run_sparse(&SparseCase {
        topk_length: true,
        sink: true,
        seed: 9,
        ..SparseCase::new(12, 2, 32, 16, 200, 64, DType::F32)
    });
}

#[test]
fn sparse_merge_loads_its_parts_in_groups() {
    // One row of one head tile: on the device every 256-token chunk is its own split, and the
    // merge loads up to 4 parts under one flag. 6 splits end on a partial group; 9 splits make
    // an odd number of groups (the second buffer of the last pair unused), the last of one part.
    for (topk, dtype, seed) in [
        (5 * 256 + 3, DType::F32, 11),
        (8 * 256 + 1, DType::BF16, 12),
    ] {
        run_sparse(&SparseCase {
            seed,
            ..SparseCase::new(1, 4, 64, 64, topk, 16, dtype)
        });
    }
}

#[test]
fn sparse_many_heads() {
    run_sparse(&SparseCase::new(1, 128, 64, 64, 100, 16, DType::BF16));
    run_sparse(&SparseCase {
        seed: 6,
        ..SparseCase::new(1, 33, 80, 40, 70, 64, DType::F32)
    });
}

#[test]
fn sparse_deepseek_shape_b1() {
    // DeepSeek-V3.2 decode: 128 heads sharing one 576-wide latent row, V = its first 512 columns.
    run_sparse(&SparseCase {
        invalid: 0,
        ..SparseCase::new(1, 128, 576, 512, 2048, 64, DType::BF16)
    });
    // f32 on the device plan: 32-token ping-ponged chunks and 48-wide K slices (12 of them).
    run_sparse(&SparseCase {
        invalid: 1,
        seed: 14,
        ..SparseCase::new(4, 128, 576, 512, 1024, 64, DType::F32)
    });
}

#[test]
fn sparse_deepseek_shape_cpu_plan() {
    // The CPU plan's f32 DeepSeek kernel gathers 64-token chunks into one L1 buffer (the device
    // plan ping-pongs 32-token chunks) and moves 64-wide K slices through one L0 buffer; 200
    // tokens make 4 chunks, a tail, and, over the CPU's splits, chunks that reuse the buffers
    // one after another. Traced: no hazard allowed.
    run_sparse(&SparseCase {
        invalid: 1,
        plan: Some(PlanTarget::Cpu),
        seed: 11,
        ..SparseCase::new(4, 128, 576, 512, 1024, 64, DType::F32)
    });
    run_sparse(&SparseCase {
        plan: Some(PlanTarget::Cpu),
        seed: 12,
        ..SparseCase::new(2, 128, 576, 512, 130, 64, DType::F32)
    });
    // bf16: 128-token chunks and 96-wide K slices on the CPU (64 on the device).
    run_sparse(&SparseCase {
        invalid: 1,
        plan: Some(PlanTarget::Cpu),
        seed: 13,
        ..SparseCase::new(1, 128, 576, 512, 300, 64, DType::BF16)
    });
}

#[test]
fn sparse_cpu_plan_single_vector_core_head_tiles() {
    // The CPU plan hands head tiles of at most 64 rows whole to AIV0 (padded to 16 rows, not
    // 32): 1, 8, 16 (the decode demo's 16 heads, Dqk 192, v_dim 128), 17 and 32 heads, both
    // data dtypes, tail chunks (65 and 100 tokens), invalid slots, an empty row, a sink.
    // Traced: no hazard allowed.
    for dtype in [DType::F32, DType::BF16] {
        for (h, dqk, v_dim, topk) in [
            (1, 64, 48, 65),
            (8, 64, 32, 100),
            (16, 192, 128, 64),
            (17, 80, 40, 100),
            (32, 64, 64, 65),
        ] {
            run_sparse(&SparseCase {
                invalid: 1,
                empty_row: h == 16,
                sink: h == 17,
                plan: Some(PlanTarget::Cpu),
                seed: h as u64,
                ..SparseCase::new(3, h, dqk, v_dim, topk, 16, dtype)
            });
        }
    }
}

struct DenseCase {
    b: usize,
    hkv: usize,
    group: usize,
    d: usize,
    bs: usize,
    ctx: Vec<i64>,
    dtype: DType,
    /// Plan the launch for this target instead of the device (the profiled default).
    plan: Option<PlanTarget>,
}

fn run_dense(c: &DenseCase) {
    let mut rng = Rng::new(0x1234_5678 ^ (c.group * 131 + c.d) as u64);
    let h = c.hkv * c.group;
    let max_ctx = *c.ctx.iter().max().expect("a context") as usize;
    let max_blocks = max_ctx.div_ceil(c.bs) + 1;
    let num_blocks = c.b * max_blocks + 2;
    let q = tensor(&mut rng, c.dtype, &[c.b, h, c.d], 1.0);
    let k = tensor(&mut rng, c.dtype, &[num_blocks, c.bs, c.hkv, c.d], 1.0);
    let v = tensor(&mut rng, c.dtype, &[num_blocks, c.bs, c.hkv, c.d], 1.0);
    let mut phys: Vec<i64> = (0..num_blocks as i64).collect();
    rng.shuffle(&mut phys);
    let mut block_table = vec![-1i64; c.b * max_blocks];
    for row in 0..c.b {
        for j in 0..(c.ctx[row] as usize).div_ceil(c.bs) {
            block_table[row * max_blocks + j] = phys[row * max_blocks + j];
        }
    }
    let scale = 1.0 / (c.d as f32).sqrt();
    let call = PagedCall::validate(
        &from_gm(&q),
        &from_gm(&k),
        &from_gm(&v),
        &ints(&block_table, &[c.b, max_blocks]),
        &ints(&c.ctx, &[c.b]),
        &PagedAttentionParams { scale },
    )
    .expect("a valid call");
    let (res, records) = crate::profile(|| {
        let mut runner = Runner::for_backend("paged_attention", crate::Backend::TileSim);
        if let Some(target) = c.plan {
            runner = runner.plan_for(target);
        }
        paged::run(&mut runner, &call, q.as_input(), k.as_input(), v.as_input())
    });
    let out = res.unwrap_or_else(|e| panic!("dense {:?}: {e}", (c.b, h, c.hkv, c.d, &c.ctx)));
    hazard_free(&records);
    assert_eq!(out.shape, vec![c.b, h, c.d]);
    let qf: Vec<f64> = q.to_f32().into_iter().map(f64::from).collect();
    let kf: Vec<f64> = k.to_f32().into_iter().map(f64::from).collect();
    let vf: Vec<f64> = v.to_f32().into_iter().map(f64::from).collect();
    let mut want = Vec::new();
    for row in 0..c.b {
        for hh in 0..h {
            let g = hh / c.group;
            let slot = |t: usize| {
                let blk = block_table[row * max_blocks + t / c.bs] as usize;
                ((blk * c.bs + t % c.bs) * c.hkv + g) * c.d
            };
            let n = c.ctx[row] as usize;
            let keys: Vec<&[f64]> = (0..n).map(|t| &kf[slot(t)..slot(t) + c.d]).collect();
            let vals: Vec<&[f64]> = (0..n).map(|t| &vf[slot(t)..slot(t) + c.d]).collect();
            let qrow = &qf[(row * h + hh) * c.d..(row * h + hh + 1) * c.d];
            want.extend(attend(qrow, &keys, &vals, c.d, scale as f64).0);
        }
    }
    check(
        &format!("dense {:?} out", (c.b, h, c.hkv, c.d, &c.ctx, c.dtype)),
        &out.to_f32(),
        &want,
        out_tol(c.dtype),
    );
}

#[test]
fn dense_gqa() {
    for (group, dtype) in [(1, DType::F16), (4, DType::BF16), (8, DType::F32)] {
        run_dense(&DenseCase {
            b: 3,
            hkv: 2,
            group,
            d: 64,
            bs: 16,
            ctx: vec![1, 17, 100],
            dtype,
            plan: None,
        });
    }
    // 16 sequences: two splits, several chunks each.
    run_dense(&DenseCase {
        b: 16,
        hkv: 1,
        group: 2,
        d: 64,
        bs: 16,
        ctx: (0..16).map(|i| 1 + i * 23).collect(),
        dtype: DType::F16,
        plan: None,
    });
    run_dense(&DenseCase {
        b: 1,
        hkv: 1,
        group: 4,
        d: 128,
        bs: 16,
        ctx: vec![33],
        dtype: DType::BF16,
        plan: None,
    });
    // The CPU plan's kernels (single-buffered L1 and L0 tiles), traced: several chunks per
    // split reuse each buffer one after another.
    for (group, dtype) in [(4, DType::BF16), (8, DType::F32)] {
        run_dense(&DenseCase {
            b: 3,
            hkv: 2,
            group,
            d: 128,
            bs: 16,
            ctx: vec![1, 150, 300],
            dtype,
            plan: Some(PlanTarget::Cpu),
        });
    }
}

/// The DeepSeek-V3.2 decode step (B=4, H=128, Dqk=576, v_dim=512, top-k 2048, block 64, bf16):
/// the estimated Ascend 950 time against the roofline, and the simulator's CPU time against a
/// candle f32 composition (index_select, matmul, softmax, matmul). Slow in debug builds: run with
/// `cargo test --release --test attention_kernels -- --ignored --nocapture`.
#[test]
#[ignore = "DeepSeek-scale B=4 cost check; run explicitly"]
fn deepseek_decode_cost() {
    use candle_core::{Device, Tensor};
    use std::time::Instant;
    let (b, h, dqk, v_dim, topk, bs) = (4usize, 128usize, 576usize, 512usize, 2048usize, 64usize);
    let mut rng = Rng::new(77);
    let max_blocks = 4096 / bs;
    let num_blocks = b * max_blocks;
    let q = tensor(&mut rng, DType::BF16, &[b, h, dqk], 1.0);
    let kv = tensor(&mut rng, DType::BF16, &[num_blocks, bs, dqk], 1.0);
    let mut phys: Vec<i64> = (0..num_blocks as i64).collect();
    rng.shuffle(&mut phys);
    let block_table = phys.clone();
    let mut indices = Vec::new();
    for _ in 0..b {
        let mut toks: Vec<i64> = (0..(max_blocks * bs) as i64).collect();
        rng.shuffle(&mut toks);
        indices.extend_from_slice(&toks[..topk]);
    }
    let params = SparseAttentionParams::new(v_dim, 0.13523);
    let call = sparse_call(&q, &kv, &indices, &block_table, max_blocks, params);
    let run = || {
        let mut runner = Runner::for_backend("sparse_paged_attention", crate::Backend::TileSim);
        sparse::run(&mut runner, &call, q.as_input(), kv.as_input()).expect("runs")
    };
    let (_, records) = crate::profile(run);
    hazard_free(&records);
    let costs: Vec<_> = records.iter().filter_map(|r| r.cost.clone()).collect();
    for c in &costs {
        println!("{c}");
    }
    let total = tile_backend::sim::cost::CostReport::sum(&costs).expect("two launches");
    println!("{total}");
    // The op's own distinct bytes: the gathered K rows, q, out and lse.
    let op_bytes = (b * topk * dqk * 2 + b * h * dqk * 2 + b * h * v_dim * 2 + b * h * 4) as f64;
    let op_roofline = op_bytes / 1.6e12;
    println!(
        "estimate {:.2} us; summed roofline {:.2} us (ratio {:.2}); op-bytes roofline {:.2} us (ratio {:.2})",
        total.seconds * 1e6,
        total.roofline_seconds * 1e6,
        total.seconds / total.roofline_seconds,
        op_roofline * 1e6,
        total.seconds / op_roofline
    );
    // CPU time: simulator (untraced) vs candle f32.
    let _ = run();
    let t = Instant::now();
    let reps = 3;
    for _ in 0..reps {
        let _ = run();
    }
    let sim_s = t.elapsed().as_secs_f64() / reps as f64;
    let dev = Device::Cpu;
    let qf = Tensor::from_vec(q.to_f32(), (b, h, dqk), &dev).expect("q");
    let kvf = Tensor::from_vec(kv.to_f32(), (num_blocks * bs, dqk), &dev).expect("kv");
    let slots: Vec<u32> = (0..b * topk)
        .map(|i| {
            let (row, t) = (i / topk, indices[i] as usize);
            (block_table[row * max_blocks + t / bs] as usize * bs + t % bs) as u32
        })
        .collect();
    let slots = Tensor::from_vec(slots, b * topk, &dev).expect("slots");
    let cand = || -> candle_core::Result<Tensor> {
        let k = kvf.index_select(&slots, 0)?.reshape((b, topk, dqk))?;
        let s = (qf.matmul(&k.t()?)? * 0.13523)?;
        let pr = candle_core::D::Minus1;
        let m = s.max_keepdim(pr)?;
        let e = s.broadcast_sub(&m)?.exp()?;
        let pw = e.broadcast_div(&e.sum_keepdim(pr)?)?;
        pw.matmul(&k.narrow(2, 0, v_dim)?)
    };
    let _ = cand().expect("candle");
    let t = Instant::now();
    for _ in 0..reps {
        let _ = cand().expect("candle");
    }
    let cand_s = t.elapsed().as_secs_f64() / reps as f64;
    println!(
        "CPU: simulator {:.1} ms, candle f32 {:.1} ms (ratio {:.2})",
        sim_s * 1e3,
        cand_s * 1e3,
        sim_s / cand_s
    );
    assert!(total.seconds <= 2.0 * total.roofline_seconds);
}
