//! The top-k kernel (`kernels::topk`) in the simulator against brute force: row lengths 1 to
//! 8192 with k = 1, 32 and 2048 (k above the length included), spread scores and scores made of
//! ties, and the same results with TMRGSORT's modelled cross-list tie order flipped.

use tile_backend::arch::{Arch, MrgSortTies};
use tile_backend::ir::{DType, Kernel};
use tile_backend::kernels::{lanes, topk, TopkParams};
use tile_backend::passes::compile;
use tile_backend::sim::io::{decode_pairs, Rng};
use tile_backend::sim::{Arg, GmTensor};

mod support;
use support::arch;

/// Brute force: every (score, position) by score descending (`-0 == +0`), equal scores by the
/// smaller position, the first `k`, then `(-inf, -1)` up to `k`. Values as bits.
fn expected(scores: &[f32], k: usize) -> Vec<(u32, i32)> {
    let mut all: Vec<(f32, i32)> = scores
        .iter()
        .enumerate()
        .map(|(i, v)| (*v, i as i32))
        .collect();
    all.sort_by(|a, b| b.0.partial_cmp(&a.0).expect("no NaN").then(a.1.cmp(&b.1)));
    let mut out: Vec<(u32, i32)> = all
        .into_iter()
        .take(k)
        .map(|(v, i)| (v.to_bits(), i))
        .collect();
    out.resize(k, (f32::NEG_INFINITY.to_bits(), -1));
    out
}

fn run(kernel: &Kernel, arch: &Arch, scores: &[f32], k: usize) -> Vec<(u32, i32)> {
    let n = scores.len();
    let compiled = compile(kernel, arch).unwrap_or_else(|e| panic!("{e}"));
    let mut args = vec![
        Arg::Int(n as i64),
        Arg::Tensor(GmTensor::from_f32(DType::F32, &[1, n], scores)),
        Arg::Tensor(GmTensor::from_i64(
            DType::U32,
            &[1, lanes().len()],
            &lanes(),
        )),
        Arg::Tensor(GmTensor::zeros(DType::F32, &[1, 2 * k])),
    ];
    support::simulate_with(&compiled, arch, &mut args, 1)
        .unwrap_or_else(|e| panic!("n {n} k {k}: {e}"));
    let out = args[3].tensor().expect("out");
    decode_pairs(&out.data)
        .into_iter()
        .map(|(v, i)| (v.to_bits(), i))
        .collect()
}

fn scores(rng: &mut Rng, n: usize, ties: bool) -> Vec<f32> {
    (0..n)
        .map(|_| {
            if ties {
                [-1.5, -0.0, 0.0, 2.0, 7.0, f32::NEG_INFINITY][rng.below(6) as usize]
            } else {
                rng.uniform(-10.0, 10.0)
            }
        })
        .collect()
}

fn check(k: usize, n: usize, ties: bool, seed: u64) {
    let kernel = topk(&TopkParams { k: k as u64 });
    let report = tile_backend::verify::verify(&kernel);
    assert!(report.is_ok(), "{report}");
    let mut rng = Rng::new(seed);
    let s = scores(&mut rng, n, ties);
    let want = expected(&s, k);
    for ties_model in [MrgSortTies::EarlierListFirst, MrgSortTies::LaterListFirst] {
        let got = run(&kernel, &arch().with_mrgsort_ties(ties_model), &s, k);
        assert_eq!(got.len(), k);
        if let Some(i) = got.iter().zip(&want).position(|(g, w)| g != w) {
            panic!(
                "n {n} k {k} ties {ties} {ties_model:?}: pair {i} is {:?}, brute force {:?}",
                got[i], want[i]
            );
        }
    }
}

#[test]
fn topk_matches_brute_force_on_every_length_and_k() {
    let mut seed = 1;
    for k in [1, 32, 2048] {
        for n in [1, 31, 32, 33, 1000, 8192] {
            seed += 1;
            check(k, n, false, seed);
        }
    }
}

/// Scores made of ties (a handful of values, `-0` and `+0`, `-inf`): the result is ordered by
/// position within each value under either modelled cross-list tie order.
#[test]
fn topk_of_ties_goes_to_the_earlier_position_whatever_the_merge_tie_order() {
    let mut seed = 100;
    for k in [1, 32, 2048] {
        for n in [33, 100, 1000, 4100] {
            seed += 1;
            check(k, n, true, seed);
        }
    }
}

/// Every score equal: the first k positions, in order.
#[test]
fn topk_of_one_value_is_the_first_positions() {
    let k = 64;
    let kernel = topk(&TopkParams { k: k as u64 });
    let s = vec![3.0f32; 500];
    for ties_model in [MrgSortTies::EarlierListFirst, MrgSortTies::LaterListFirst] {
        let got = run(&kernel, &arch().with_mrgsort_ties(ties_model), &s, k);
        let idx: Vec<i32> = got.iter().map(|p| p.1).collect();
        assert_eq!(idx, (0..k as i32).collect::<Vec<_>>(), "{ties_model:?}");
    }
}

/// An empty row gives k missing pairs.
#[test]
fn an_empty_row_gives_only_missing_pairs() {
    let kernel = topk(&TopkParams { k: 32 });
    let got = run(&kernel, &arch(), &[], 32);
    assert!(got.iter().all(|p| *p == (f32::NEG_INFINITY.to_bits(), -1)));
}

/// The compiled kernel is race-free: the sync pass orders every sort op's tiles (the chunk's
/// load before its sort, the probe's merge before the scalar read of its result, the stores
/// after the last merge), on a traced run with the hazard checker.
#[test]
fn the_compiled_topk_has_no_hazard() {
    for (n, k) in [(100usize, 32usize), (1000, 2048)] {
        let arch = arch();
        let kernel = compile(&topk(&TopkParams { k: k as u64 }), &arch).expect("compiles");
        let mut rng = Rng::new(n as u64);
        let mut args = vec![
            Arg::Int(n as i64),
            Arg::Tensor(GmTensor::from_f32(
                DType::F32,
                &[1, n],
                &scores(&mut rng, n, true),
            )),
            Arg::Tensor(GmTensor::from_i64(
                DType::U32,
                &[1, lanes().len()],
                &lanes(),
            )),
            Arg::Tensor(GmTensor::zeros(DType::F32, &[1, 2 * k])),
        ];
        let trace = support::trace_on(&kernel, &arch, &mut args, 1).expect("runs");
        let hazards = tile_backend::sim::hazards::check(&kernel, &trace);
        assert!(hazards.is_empty(), "n {n} k {k}: {hazards:?}");
    }
}
