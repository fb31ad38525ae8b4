//! The reference tile kernels compiled (verify, plan, sync) and simulated end to end, against
//! plain-Rust computations on the same (rounded) inputs.

use tile_backend::ir::{DType, Kernel};
use tile_backend::kernels::*;
use tile_backend::sim::{self, io, Arg};

mod support;

fn simulate(kernel: &Kernel, block_dim: u64, seed: u64) -> Vec<Arg<'static>> {
    let compiled = support::compiled(kernel);
    let mut args = io::generate(&compiled, seed).unwrap();
    support::simulate_on(&compiled, &mut args, block_dim as usize)
        .unwrap_or_else(|e| panic!("{}: {e}", kernel.name));
    args
}

fn f(args: &[Arg], i: usize) -> Vec<f32> {
    args[i].tensor().unwrap().to_f32()
}

fn close(got: &[f32], want: &[f64], atol: f64, rtol: f64, what: &str) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let err = (*g as f64 - w).abs();
        assert!(
            err <= atol + rtol * w.abs(),
            "{what}[{i}]: got {g}, want {w} (err {err:e})"
        );
    }
}

fn matmul_ref(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut c = vec![0f64; m * n];
    for i in 0..m {
        for p in 0..k {
            let av = a[i * k + p] as f64;
            for j in 0..n {
                c[i * n + j] += av * b[p * n + j] as f64;
            }
        }
    }
    c
}

#[test]
fn matmul_kernel_matches_on_dtypes_and_tails() {
    let cases = [
        MatmulParams::default(),
        MatmulParams {
            dtype: DType::BF16,
            ..Default::default()
        },
        MatmulParams {
            dtype: DType::F32,
            m: 64,
            k: 96,
            n: 64,
            ..Default::default()
        },
        MatmulParams {
            m: 100,
            k: 200,
            n: 72,
            ..Default::default()
        },
        MatmulParams {
            dtype: DType::I8,
            m: 64,
            k: 128,
            n: 64,
            tile_n: 64,
            ..Default::default()
        },
    ];
    for p in cases {
        let args = simulate(&matmul(&p), p.block_dim(), 11);
        let (a, b, c) = (f(&args, 0), f(&args, 1), f(&args, 2));
        let want = matmul_ref(&a, &b, p.m as usize, p.k as usize, p.n as usize);
        let atol = if p.dtype == DType::I8 { 0.0 } else { 1e-4 };
        close(&c, &want, atol, 1e-5, &format!("matmul {:?}", p));
    }
}

fn attention_ref(args: &[Arg], p: &AttentionParams) -> Vec<f64> {
    let (q, k, v) = (f(args, 0), f(args, 1), f(args, 2));
    let scale = match args[4] {
        Arg::Float(s) => s as f32,
        _ => panic!("scale"),
    };
    let (ts, tkv, d) = (p.ts as usize, p.tkv as usize, p.d as usize);
    let mut out = vec![];
    for b in 0..p.batch as usize {
        for i in 0..ts {
            let s: Vec<f32> = (0..tkv)
                .map(|j| {
                    let dot: f32 = (0..d)
                        .map(|c| q[(b * ts + i) * d + c] * k[(b * tkv + j) * d + c])
                        .sum();
                    dot * scale
                })
                .collect();
            let mx = s.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            let e: Vec<f32> = s.iter().map(|x| (x - mx).exp()).collect();
            let sum: f32 = e.iter().sum();
            // P takes the input dtype for P V.
            let pr: Vec<f32> = e
                .iter()
                .map(|x| sim::numeric::round_to(p.dtype, *x))
                .collect();
            for c in 0..d {
                let o: f64 = (0..tkv)
                    .map(|j| pr[j] as f64 * v[(b * tkv + j) * d + c] as f64)
                    .sum();
                out.push(o / sum as f64);
            }
        }
    }
    out
}

#[test]
fn one_tile_attention_matches_softmax_reference() {
    for p in [
        AttentionParams::default(),
        AttentionParams {
            handoff: Handoff::CrossFlags,
            ..Default::default()
        },
        AttentionParams {
            dtype: DType::BF16,
            batch: 2,
            ..Default::default()
        },
        AttentionParams {
            ts: 64,
            tkv: 64,
            d: 32,
            ..Default::default()
        },
    ] {
        let args = simulate(&attention_tile(&p), p.block_dim(), 5);
        let want = attention_ref(&args, &p);
        let rtol = if p.dtype == DType::BF16 {
            2f64.powi(-7)
        } else {
            2f64.powi(-9)
        };
        close(&f(&args, 3), &want, 1e-3, rtol, &format!("attention {p:?}"));
    }
}

#[test]
fn gather_matmul_matches_paged_reference() {
    // A block per gathered tile, and one block for all of them (its gathers after the first
    // follow its own GM stores: they read the cache through the block's GM overlay).
    for (p, one_block) in [
        GatherMatmulParams::default(),
        GatherMatmulParams::upstream_small(),
        GatherMatmulParams::int8(),
    ]
    .into_iter()
    .flat_map(|p| [(p, false), (p, true)])
    .filter(|(p, one_block)| !one_block || p.tiles() > 1)
    {
        let blocks = if one_block { 1 } else { p.block_dim() };
        let args = simulate(&gather_matmul(&p), blocks, 3);
        let q = f(&args, 0);
        let cache = f(&args, 1);
        let idx = args[2].tensor().unwrap().to_i64();
        let bt = args[3].tensor().unwrap().to_i64();
        let (m, size, cols, bs, n) = (
            p.m as usize,
            p.size as usize,
            p.cols as usize,
            p.block_size as i64,
            p.n as usize,
        );
        let mut want = vec![0f64; m * n];
        for (i, &t) in idx.iter().enumerate() {
            let phys = (bt[(t / bs) as usize] * bs + t % bs) as usize;
            for r in 0..m {
                want[r * n + i] = (0..size)
                    .map(|c| q[r * size + c] as f64 * cache[phys * cols + c] as f64)
                    .sum();
            }
        }
        let atol = if p.dtype == DType::I8 { 0.0 } else { 1e-4 };
        close(
            &f(&args, 4),
            &want,
            atol,
            1e-5,
            &format!("gather {p:?} on {blocks} blocks"),
        );
    }
}
