//! TSORT32 and TMRGSORT in the simulator against brute force (A5-FACTS §6): many shapes, f32
//! and f16, tails (both A5 tail paths), one index row for all rows, ties (equal values, `-0`
//! and `+0`); the merge's modelled cross-list tie order and its flipped twin; the runtime
//! form of the shape rules; the cost of each form; the JSON round trip.

use tile_backend::arch::{Arch, MrgSortTies};
use tile_backend::dsl::KernelBuilder;
use tile_backend::ir::*;
use tile_backend::passes::compile;
use tile_backend::sim::io::{decode_pairs, Rng};
use tile_backend::sim::timeline::{block_timeline, LaunchRates};
use tile_backend::sim::{Arg, GmTensor, SimFault};
use tile_backend::verify::Rule;

mod support;
use support::*;

/// One (value, index) pair as the sort instructions write it: the value's bits (an f16 in the
/// low half) and the index.
type Pair = (u32, u32);

fn pairs_of(bytes: &[u8]) -> Vec<Pair> {
    decode_pairs(bytes)
        .into_iter()
        .map(|(v, i)| (v.to_bits(), i as u32))
        .collect()
}

fn bytes_of(pairs: &[Pair]) -> Vec<u8> {
    pairs
        .iter()
        .flat_map(|(v, i)| v.to_le_bytes().into_iter().chain(i.to_le_bytes()))
        .collect()
}

/// The value a pair's bits hold.
fn value(dtype: DType, bits: u32) -> f32 {
    if dtype == DType::F16 {
        half::f16::from_bits(bits as u16).to_f32()
    } else {
        f32::from_bits(bits)
    }
}

/// The bits of element `k` of a GM tensor, as a pair's value field.
fn elem_bits(t: &GmTensor, k: usize) -> u32 {
    if t.dtype == DType::F16 {
        u16::from_le_bytes([t.data[2 * k], t.data[2 * k + 1]]) as u32
    } else {
        u32::from_le_bytes([
            t.data[4 * k],
            t.data[4 * k + 1],
            t.data[4 * k + 2],
            t.data[4 * k + 3],
        ])
    }
}

/// The pad A5's tail form writes, `-(0.0 / 0.0)`.
fn pad_bits(dtype: DType) -> u32 {
    if dtype == DType::F16 {
        0xfe00
    } else {
        0xffc0_0000
    }
}

fn pc(dtype: DType) -> usize {
    pair_cols(dtype).expect("f32 or f16") as usize
}

/// Columns of a Vec tile holding `n` elements (whole 32-byte rows).
fn alloc_cols(dtype: DType, n: usize) -> u64 {
    let per = 32 / dtype.size_bytes() as usize;
    (n.div_ceil(per) * per) as u64
}

/// Values with many ties: a few levels, `-0` and `+0` among them; or spread values.
fn values(rng: &mut Rng, n: usize, ties: bool) -> Vec<f32> {
    (0..n)
        .map(|_| {
            if ties {
                [-2.0, -0.0, 0.0, 0.5, 1.0, 3.0][rng.below(6) as usize]
            } else {
                rng.uniform(-100.0, 100.0)
            }
        })
        .collect()
}

/// Distinct indices in no particular order (an odd multiplier is a bijection mod 2^32).
fn indices(n: usize, salt: u32) -> Vec<i64> {
    (0..n as u32)
        .map(|k| (k.wrapping_add(salt).wrapping_mul(2_654_435_761) >> 1) as i64)
        .collect()
}

// ------------------------------------------------------------------------------------ TSORT32

struct Sort32Case {
    dtype: DType,
    rows: usize,
    cols: usize,
    broadcast_idx: bool,
    ties: bool,
}

fn sort32_kernel(c: &Sort32Case) -> Kernel {
    let (rows, cols, dt) = (c.rows as u64, c.cols as u64, c.dtype);
    let padded = cols.div_ceil(32) * 32;
    let irows = if c.broadcast_idx { 1 } else { rows };
    let out_cols = padded * pc(dt) as u64;
    let mut kb = KernelBuilder::new("sort32");
    let x = kb.input("x", dt, [rows, cols]);
    let ix = kb.input("ix", DType::U32, [irows, padded]);
    let y = kb.output("y", dt, [rows, out_cols]);
    let src = kb.tile(
        "src",
        vec_tile(dt, rows, alloc_cols(dt, c.cols)).valid(rows, cols),
    );
    let idx = kb.tile("idx", vec_tile(DType::U32, irows, padded));
    let dst = kb.tile("dst", vec_tile(dt, rows, out_cols));
    let tmp = (cols % 32 != 0).then(|| kb.tile("tmp", vec_tile(dt, 1, padded)));
    kb.vector(|v| {
        v.if_(Expr::SubBlockIdx.eq_(0), |v| {
            v.load(src, GmView::nd(x, 0, rows, cols, cols));
            v.load(idx, GmView::nd(ix, 0, irows, padded, padded));
            match tmp {
                Some(t) => v.sort32_tail(dst, src, idx, t),
                None => v.sort32(dst, src, idx),
            }
            v.store(GmView::nd(y, 0, rows, out_cols, out_cols), dst);
        });
    });
    kb.build()
}

/// Brute force: each block's real elements by value descending (`-0 == +0`), ties to the
/// smaller index, then the block's padded slots (the pad sorts last), by index.
fn sort32_expected(c: &Sort32Case, x: &GmTensor, ix: &[i64]) -> Vec<Pair> {
    let padded = c.cols.div_ceil(32) * 32;
    let mut out = vec![];
    for r in 0..c.rows {
        let ir = if c.broadcast_idx { 0 } else { r };
        for b in 0..padded / 32 {
            let mut real = vec![];
            let mut pads = vec![];
            for k in b * 32..b * 32 + 32 {
                let index = ix[ir * padded + k] as u32;
                if k < c.cols {
                    real.push((elem_bits(x, r * c.cols + k), index));
                } else {
                    pads.push((pad_bits(c.dtype), index));
                }
            }
            real.sort_by(|a, b| {
                let (va, vb) = (value(c.dtype, a.0), value(c.dtype, b.0));
                vb.partial_cmp(&va)
                    .expect("finite values")
                    .then(a.1.cmp(&b.1))
            });
            pads.sort_by_key(|p| p.1);
            out.extend(real);
            out.extend(pads);
        }
    }
    out
}

fn run_sort32(c: &Sort32Case, seed: u64) {
    let k = sort32_kernel(c);
    let padded = c.cols.div_ceil(32) * 32;
    let irows = if c.broadcast_idx { 1 } else { c.rows };
    let mut rng = Rng::new(seed);
    let x = GmTensor::from_f32(
        c.dtype,
        &[c.rows, c.cols],
        &values(&mut rng, c.rows * c.cols, c.ties),
    );
    let ix = indices(irows * padded, seed as u32);
    let want = sort32_expected(c, &x, &ix);
    let mut args = vec![
        Arg::Tensor(x),
        Arg::Tensor(GmTensor::from_i64(DType::U32, &[irows, padded], &ix)),
        Arg::Tensor(GmTensor::zeros(c.dtype, &[c.rows, padded * pc(c.dtype)])),
    ];
    run_verified(&compiled(&k), &mut args);
    let got = pairs_of(&args[2].tensor().expect("output").data);
    let what = format!(
        "{} {}x{} broadcast {} ties {}",
        c.dtype, c.rows, c.cols, c.broadcast_idx, c.ties
    );
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(
            g,
            w,
            "{what}: pair {i} (row {}, block {})",
            i / padded,
            i % padded / 32
        );
    }
}

#[test]
fn sort32_sorts_every_block_like_brute_force() {
    let shapes = [
        (1, 32),
        (2, 64),
        (3, 96),
        (1, 256),
        (1, 1),
        (2, 31),
        (2, 33),
        (4, 100),
        (1, 2040),
    ];
    let mut seed = 1;
    for dtype in [DType::F32, DType::F16] {
        for (rows, cols) in shapes {
            for broadcast_idx in [false, true] {
                for ties in [false, true] {
                    seed += 1;
                    let c = Sort32Case {
                        dtype,
                        rows,
                        cols,
                        broadcast_idx,
                        ties,
                    };
                    run_sort32(&c, seed);
                }
            }
        }
    }
}

/// Rows over 8160 bytes take A5's other tail path (full blocks from src, the tail from tmp):
/// the same result.
#[test]
fn sort32_long_rows_take_the_tail_only_path() {
    for (dtype, cols) in [(DType::F32, 2050), (DType::F16, 4100), (DType::F32, 2080)] {
        let c = Sort32Case {
            dtype,
            rows: 2,
            cols,
            broadcast_idx: false,
            ties: true,
        };
        run_sort32(&c, cols as u64);
    }
}

/// Equal values in one block leave by their indices, not their positions: the result is the
/// indices in increasing order whatever the order they were given in.
#[test]
fn sort32_ties_go_to_the_smaller_index_not_the_earlier_position() {
    let dt = DType::F32;
    let c = Sort32Case {
        dtype: dt,
        rows: 1,
        cols: 32,
        broadcast_idx: false,
        ties: true,
    };
    let k = sort32_kernel(&c);
    let ix: Vec<i64> = (0..32).rev().map(|i| i * 3).collect();
    let mut args = vec![
        Arg::Tensor(GmTensor::from_f32(dt, &[1, 32], &[1.0; 32])),
        Arg::Tensor(GmTensor::from_i64(DType::U32, &[1, 32], &ix)),
        Arg::Tensor(GmTensor::zeros(dt, &[1, 64])),
    ];
    run_verified(&compiled(&k), &mut args);
    let got: Vec<u32> = pairs_of(&args[2].tensor().expect("out").data)
        .iter()
        .map(|p| p.1)
        .collect();
    let want: Vec<u32> = (0..32).map(|i| i * 3).collect();
    assert_eq!(got, want);
}

// ----------------------------------------------------------------------------------- TMRGSORT

/// Sorted lists of pairs with many ties across lists (values from a few levels).
fn sorted_lists(rng: &mut Rng, dtype: DType, lens: &[usize], salt: u32) -> Vec<Vec<Pair>> {
    let mut next = salt;
    lens.iter()
        .map(|&n| {
            let mut l: Vec<Pair> = values(rng, n, true)
                .into_iter()
                .map(|v| {
                    next += 1;
                    let bits = if dtype == DType::F16 {
                        half::f16::from_f32(v).to_bits() as u32
                    } else {
                        v.to_bits()
                    };
                    (bits, next)
                })
                .collect();
            l.sort_by(|a, b| {
                value(dtype, b.0)
                    .partial_cmp(&value(dtype, a.0))
                    .expect("finite")
            });
            l
        })
        .collect()
}

/// Brute force of the merge: a stable sort, by value descending, of the lists concatenated in
/// the order that wins a tie.
fn merged(dtype: DType, lists: &[Vec<Pair>], ties: MrgSortTies) -> Vec<Pair> {
    let mut all: Vec<Pair> = match ties {
        MrgSortTies::EarlierListFirst => lists.iter().flatten().copied().collect(),
        MrgSortTies::LaterListFirst => lists.iter().rev().flatten().copied().collect(),
    };
    all.sort_by(|a, b| {
        value(dtype, b.0)
            .partial_cmp(&value(dtype, a.0))
            .expect("finite")
    });
    all
}

fn run_on(k: &Kernel, arch: &Arch, args: &mut [Arg<'_>]) {
    let report = tile_backend::verify::verify(k);
    assert!(report.is_ok(), "{report}");
    let c = compile(k, arch).unwrap_or_else(|e| panic!("{}: {e}", k.name));
    support::simulate_with(&c, arch, args, 1).unwrap_or_else(|e| panic!("{e}"));
}

/// The single-list form over `repeat` groups of four blocks of `block_len` elements.
fn run_mrgsort(dtype: DType, block_len: usize, repeat: usize, ties: MrgSortTies, seed: u64) {
    let per_block = block_len / pc(dtype);
    let cols = 4 * block_len * repeat;
    let mut rng = Rng::new(seed);
    let groups: Vec<Vec<Vec<Pair>>> = (0..repeat)
        .map(|g| sorted_lists(&mut rng, dtype, &[per_block; 4], (g * 1000) as u32))
        .collect();
    let input: Vec<Pair> = groups.iter().flatten().flatten().copied().collect();
    let want: Vec<Pair> = groups.iter().flat_map(|g| merged(dtype, g, ties)).collect();
    let mut kb = KernelBuilder::new("mrgsort");
    let x = kb.input("x", dtype, [1, cols as u64]);
    let y = kb.output("y", dtype, [1, cols as u64]);
    let src = kb.tile("src", vec_tile(dtype, 1, cols as u64));
    let dst = kb.tile("dst", vec_tile(dtype, 1, cols as u64));
    kb.vector(|v| {
        v.if_(Expr::SubBlockIdx.eq_(0), |v| {
            v.load(src, GmView::nd(x, 0, 1, cols as i64, cols as i64));
            v.mrgsort(dst, src, block_len as u64);
            v.store(GmView::nd(y, 0, 1, cols as i64, cols as i64), dst);
        });
    });
    let k = kb.build();
    let mut args = vec![
        Arg::Tensor(GmTensor {
            dtype,
            shape: vec![1, cols],
            data: bytes_of(&input),
        }),
        Arg::Tensor(GmTensor::zeros(dtype, &[1, cols])),
    ];
    run_on(&k, &arch().with_mrgsort_ties(ties), &mut args);
    let got = pairs_of(&args[1].tensor().expect("out").data);
    assert_eq!(got, want, "{dtype} block {block_len} x {repeat} {ties:?}");
}

#[test]
fn mrgsort_merges_each_group_of_four_blocks() {
    let mut seed = 100;
    for dtype in [DType::F32, DType::F16] {
        for (block_len, repeat) in [(64, 1), (64, 3), (128, 2), (256, 1)] {
            for ties in [MrgSortTies::EarlierListFirst, MrgSortTies::LaterListFirst] {
                seed += 1;
                run_mrgsort(dtype, block_len, repeat, ties, seed);
            }
        }
    }
}

/// The multi-list form: the lists merged, `dst` keeping the first `keep` pairs.
fn run_lists(dtype: DType, lens: &[usize], keep: usize, ties: MrgSortTies, seed: u64) {
    let p = pc(dtype);
    let mut rng = Rng::new(seed);
    let lists = sorted_lists(&mut rng, dtype, lens, 0);
    let want: Vec<Pair> = merged(dtype, &lists, ties).into_iter().take(keep).collect();
    let mut kb = KernelBuilder::new("mrgsort_lists");
    let list_tiles: Vec<(ParamId, TileId, u64)> = lists
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let c = (l.len() * p) as u64;
            let x = kb.input(format!("x{i}"), dtype, [1, c]);
            let t = kb.tile(
                format!("l{i}"),
                vec_tile(dtype, 1, alloc_cols(dtype, c as usize)).valid(1, c),
            );
            (x, t, c)
        })
        .collect();
    let tmp_cols: u64 = list_tiles
        .iter()
        .map(|l| alloc_cols(dtype, l.2 as usize))
        .sum();
    let out = (keep * p) as u64;
    let y = kb.output("y", dtype, [1, out]);
    let tmp = kb.tile("tmp", vec_tile(dtype, 1, tmp_cols));
    let dst = kb.tile(
        "dst",
        vec_tile(dtype, 1, alloc_cols(dtype, out as usize)).valid(1, out),
    );
    kb.vector(|v| {
        v.if_(Expr::SubBlockIdx.eq_(0), |v| {
            for (x, t, c) in &list_tiles {
                v.load(*t, GmView::nd(*x, 0, 1, *c as i64, *c as i64));
            }
            v.mrgsort_lists(dst, tmp, list_tiles.iter().map(|l| l.1.into()));
            v.store(GmView::nd(y, 0, 1, out as i64, out as i64), dst);
        });
    });
    let k = kb.build();
    let mut args: Vec<Arg<'_>> = lists
        .iter()
        .map(|l| {
            Arg::Tensor(GmTensor {
                dtype,
                shape: vec![1, l.len() * p],
                data: bytes_of(l),
            })
        })
        .collect();
    args.push(Arg::Tensor(GmTensor::zeros(dtype, &[1, keep * p])));
    run_on(&k, &arch().with_mrgsort_ties(ties), &mut args);
    let got = pairs_of(&args[lists.len()].tensor().expect("out").data);
    assert_eq!(got, want, "{dtype} lists {lens:?} keep {keep} {ties:?}");
}

#[test]
fn mrgsort_lists_merges_two_to_four_lists_and_keeps_the_best() {
    let mut seed = 200;
    let cases: [(&[usize], usize); 6] = [
        (&[4, 4], 8),
        (&[5, 17], 3),
        (&[32, 1, 16], 49),
        (&[8, 8, 8, 8], 32),
        (&[3, 40, 12, 7], 20),
        (&[64, 64], 1),
    ];
    for dtype in [DType::F32, DType::F16] {
        for (lens, keep) in cases {
            for ties in [MrgSortTies::EarlierListFirst, MrgSortTies::LaterListFirst] {
                seed += 1;
                run_lists(dtype, lens, keep, ties, seed);
            }
        }
    }
}

/// The modelled tie order is live: on lists made of one value, the two orders give different
/// results (so the tests above that pass under both are not vacuous).
#[test]
fn the_cross_list_tie_order_decides_equal_heads() {
    let dtype = DType::F32;
    let lists = vec![vec![(1.0f32.to_bits(), 1)], vec![(1.0f32.to_bits(), 2)]];
    let a = merged(dtype, &lists, MrgSortTies::EarlierListFirst);
    let b = merged(dtype, &lists, MrgSortTies::LaterListFirst);
    assert_ne!(a, b);
    // And the simulator follows the switch (through `run_lists`' ties-heavy lists).
    run_lists(dtype, &[16, 16], 32, MrgSortTies::EarlierListFirst, 7);
    run_lists(dtype, &[16, 16], 32, MrgSortTies::LaterListFirst, 7);
}

// ----------------------------------------------------------------------- runtime rules, cost

/// A dynamic valid shape meets the verifier's rules at run time: 33 columns without the tail
/// form's tmp is refused with the rule's code.
#[test]
fn a_runtime_shape_breaking_a_sort_rule_is_an_error() {
    let dt = DType::F32;
    let mut kb = KernelBuilder::new("sort32_dyn");
    let x = kb.input("x", dt, [1, 64]);
    let ix = kb.input("ix", DType::U32, [1, 64]);
    let n = kb.scalar("n", DType::I32);
    let src = kb.tile("src", vec_tile(dt, 1, 64).dynamic());
    let idx = kb.tile("idx", vec_tile(DType::U32, 1, 64));
    let dst = kb.tile("dst", vec_tile(dt, 1, 128));
    kb.vector(|v| {
        v.if_(Expr::SubBlockIdx.eq_(0), |v| {
            v.set_validshape(src, 1, 64);
            v.load(src, GmView::nd(x, 0, 1, 64, 64));
            v.load(idx, GmView::nd(ix, 0, 1, 64, 64));
            v.set_validshape(src, 1, Expr::Param(n));
            v.sort32(dst, src, idx);
        });
    });
    let k = compiled(&kb.build());
    let run = |cols: i64| {
        let mut args = vec![
            Arg::Tensor(GmTensor::zeros(dt, &[1, 64])),
            Arg::Tensor(GmTensor::zeros(DType::U32, &[1, 64])),
            Arg::Int(cols),
        ];
        simulate(&k, &mut args)
    };
    run(64).expect("64 columns are whole blocks");
    let f = op_fault(run(33));
    assert!(
        matches!(
            &f,
            SimFault::RulesBroken { what: "sort32", broken }
                if broken.iter().any(|(rule, m)| *rule == Rule::SortTmp && m.contains("4-argument form"))
        ),
        "{f}"
    );
    assert!(f.to_string().contains("[sort-tmp]"), "{f}");
}

/// The cost of each form is its A2/A3-derived figure: TSORT32 6 + 2 per block, TMRGSORT 20 +
/// 78 per 128 pairs merged (+ a cycle per 256 bytes copied).
#[test]
fn sort_costs_follow_their_figures() {
    let dt = DType::F32;
    let mut kb = KernelBuilder::new("sort_cost");
    let x = kb.input("x", dt, [4, 64]);
    let ix = kb.input("ix", DType::U32, [1, 64]);
    let src = kb.tile("src", vec_tile(dt, 4, 64));
    let idx = kb.tile("idx", vec_tile(DType::U32, 1, 64));
    let dst = kb.tile("dst", vec_tile(dt, 4, 128));
    let row = kb.tile("row", vec_tile(dt, 1, 512));
    let merged_t = kb.tile("merged", vec_tile(dt, 1, 512));
    let l0 = kb.tile("l0", vec_tile(dt, 1, 256));
    let l1 = kb.tile("l1", vec_tile(dt, 1, 256));
    let best = kb.tile("best", vec_tile(dt, 1, 64));
    let tmp = kb.tile("tmp", vec_tile(dt, 1, 512));
    let xs = kb.input("xs", dt, [1, 512]);
    kb.vector(|v| {
        v.if_(Expr::SubBlockIdx.eq_(0), |v| {
            v.load(src, GmView::nd(x, 0, 4, 64, 64));
            v.load(idx, GmView::nd(ix, 0, 1, 64, 64));
            v.sort32(dst, src, idx);
            v.load(row, GmView::nd(xs, 0, 1, 512, 512));
            v.mrgsort(merged_t, row, 64);
            v.load(l0, GmView::nd(xs, 0, 1, 256, 512));
            v.load(l1, GmView::nd(xs, 256, 1, 256, 512));
            v.mrgsort_lists(best, tmp, [l0.into(), l1.into()]);
        });
    });
    let arch = arch();
    let k = compile(&kb.build(), &arch).expect("compiles");
    let sorted = |n: usize| -> Vec<f32> {
        (0..n)
            .flat_map(|i| [(n - i) as f32, f32::from_bits(i as u32)])
            .collect()
    };
    let mut xs_v = sorted(64);
    xs_v.extend(sorted(64));
    xs_v.extend(sorted(64));
    xs_v.extend(sorted(64));
    let mut args = vec![
        Arg::Tensor(GmTensor::zeros(dt, &[4, 64])),
        Arg::Tensor(GmTensor::zeros(DType::U32, &[1, 64])),
        Arg::Tensor(GmTensor::from_f32(dt, &[1, 512], &xs_v)),
    ];
    let trace = support::trace_on(&k, &arch, &mut args, 1).expect("runs");
    let tl = block_timeline(
        &k,
        &arch,
        &LaunchRates::new(&arch.rates, 1),
        &trace.blocks[0],
        None,
    );
    let aiv0 = &trace.blocks[0].cores[1].events;
    let cost = |name: &str| -> f64 {
        let i = aiv0
            .iter()
            .position(|e| e.op.name() == name)
            .unwrap_or_else(|| panic!("no {name}"));
        let s = tl.cores[1].iter().find(|s| s.event == i).expect("span");
        s.busy_until - s.start
    };
    // 4 rows x 2 blocks.
    assert_eq!(cost("sort32"), 6.0 + 2.0 * 8.0);
    // 256 pairs: 2 x 128.
    assert_eq!(cost("mrgsort"), 20.0 + 78.0 * 2.0);
    // 256 pairs merged, 64 columns (256 bytes) copied.
    assert_eq!(cost("mrgsort_lists"), 20.0 + 78.0 * 2.0 + 1.0);
}

#[test]
fn sort_ops_round_trip_through_json() {
    let c = Sort32Case {
        dtype: DType::F16,
        rows: 2,
        cols: 33,
        broadcast_idx: true,
        ties: false,
    };
    let mut kernels = vec![sort32_kernel(&c)];
    let mut kb = KernelBuilder::new("lists");
    let a = kb.tile("a", vec_tile(DType::F32, 1, 64));
    let b = kb.tile("b", vec_tile(DType::F32, 1, 64));
    let t = kb.tile("t", vec_tile(DType::F32, 1, 128));
    kb.vector(|v| {
        v.mrgsort(t, t, 64);
        v.mrgsort_lists(a, t, [a.into(), b.into()]);
    });
    kernels.push(kb.build());
    for k in kernels {
        let json = k.to_json();
        let back = Kernel::from_json(&json).expect("reads back");
        assert_eq!(back, k);
        assert!(json.contains("\"Sort32\"") || json.contains("\"MrgSortLists\""));
    }
}
