//! Unit tests of the attention template's plan and host side.

use super::host::workspace;
use super::merge::MAX_SPLITS;
use super::plan::{choose_splits, compiling_cfg};
use super::split::attn_split;
use super::*;
use crate::runtime::Runner;
use crate::runtime::{device_clusters, profile, PlanTarget};
use crate::templates::common::round_up;
use tile_backend::ir::DType;
use tile_backend::launch::{GmInput, GmTensor};

/// One head tile of `heads` heads over a latent cache of `d` columns whose first `v_dim` are V
/// (the sparse form), blocks of 64 tokens, the device's double buffering.
fn latent_spec(dtype: DType, heads: u64, d: u64, v_dim: u64) -> AttnSpec {
    AttnSpec {
        name: "t",
        dtype,
        heads,
        hg: heads,
        dqk: d,
        v_dim,
        kv_cols: d,
        head_col_stride: 0,
        values: Values::KeyPrefix,
        block_size: 64,
        tokens: 0,
        double_buffer: true,
    }
}

/// `n` f32 values in [-0.5, 0.5) from `seed`, as little-endian bytes.
fn vals(n: usize, seed: u32) -> Vec<u8> {
    (0..n)
        .flat_map(|i| {
            let x = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 9;
            (x as f32 / (1u32 << 23) as f32 - 0.5).to_le_bytes()
        })
        .collect()
}

#[test]
fn a_recycled_result_becomes_the_next_workspace_zeroed() {
    std::thread::spawn(|| {
        let old = GmTensor::from_f32(DType::F32, &[64], &[7.5; 64]);
        let cap = old.data.capacity();
        recycle_result(old);
        let ws = workspace::zeroed(100);
        assert!(ws.capacity() >= cap, "the result's buffer is reused");
        assert_eq!(ws, vec![0u8; 100], "none of the old result shows through");
        workspace::keep(ws);
        // A smaller buffer does not replace a larger kept one.
        recycle_result(GmTensor::zeros(DType::F32, &[2]));
        assert!(workspace::zeroed(8).capacity() >= cap);
    })
    .join()
    .expect("the workspace checks pass on their own thread");
}

#[test]
fn splits_fill_the_blocks_the_target_runs_at_once() {
    // DeepSeek decode: 4 rows x 1 head tile, 16 chunks each.
    assert_eq!(
        choose_splits(4, 16, 32),
        (8, 2),
        "the Ascend 950's 32 clusters"
    );
    assert_eq!(
        choose_splits(4, 16, 2),
        (1, 16),
        "two CPU threads: a block per row"
    );
    assert_eq!(
        choose_splits(1, 16, 2),
        (2, 8),
        "one row still splits for two threads"
    );
    assert_eq!(
        choose_splits(1, 3, 32),
        (3, 1),
        "never more splits than chunks"
    );
    assert_eq!(choose_splits(3, 5, 32), (5, 1));
    assert_eq!(
        choose_splits(0, 0, 0),
        (1, 1),
        "degenerate inputs still give one split"
    );
    for (items, chunks, concurrent) in [(1, 40, 32), (7, 33, 5), (2, 1, 2), (64, 9, 32)] {
        let (splits, cps) = choose_splits(items, chunks, concurrent);
        assert!(splits * cps >= chunks, "every chunk is covered");
        assert!((splits - 1) * cps < chunks, "no split is empty");
        assert!(splits <= MAX_SPLITS as usize);
    }
}

#[test]
fn the_simulator_plans_for_a_fixed_grid_and_profiling_for_the_device() {
    let runner = Runner::for_backend("test", crate::Backend::TileSim);
    assert_eq!(runner.concurrent_blocks(), crate::runtime::CPU_PLAN_BLOCKS);
    let (inside, _) =
        profile(|| Runner::for_backend("test", crate::Backend::TileSim).concurrent_blocks());
    assert_eq!(inside, device_clusters());
    assert_eq!(device_clusters(), 32);
    let dir = std::env::temp_dir();
    assert_eq!(Runner::package("test", &dir).concurrent_blocks(), 32);
    // Pipes overlap on the device only; an explicit plan target overrides either way.
    assert!(!runner.pipes_overlap());
    assert!(profile(|| Runner::for_backend("test", crate::Backend::TileSim).pipes_overlap()).0);
    assert!(Runner::package("test", &dir).pipes_overlap());
    let device = Runner::sim("test", PlanTarget::Device);
    assert_eq!(
        (device.concurrent_blocks(), device.pipes_overlap()),
        (32, true)
    );
    let (cpu, _) = profile(|| {
        let r = Runner::sim("test", PlanTarget::Cpu);
        (r.concurrent_blocks(), r.pipes_overlap())
    });
    assert_eq!(cpu, (crate::runtime::CPU_PLAN_BLOCKS, false));
    // The plan is chosen once, with the backend, and the runner keeps it.
    use crate::Backend;
    assert_eq!(
        PlanTarget::for_backend(Backend::Ascend950),
        PlanTarget::Device
    );
    assert_eq!(PlanTarget::for_backend(Backend::TileSim), PlanTarget::Cpu);
    assert_eq!(PlanTarget::for_backend(Backend::Reference), PlanTarget::Cpu);
    let (profiled, _) = profile(|| PlanTarget::for_backend(Backend::TileSim));
    assert_eq!(profiled, PlanTarget::Device);
    let made_outside = Runner::for_backend("test", Backend::TileSim);
    let (kept, _) = profile(|| made_outside.plan_target());
    assert_eq!(kept, PlanTarget::Cpu);
}

#[test]
fn one_f32_split_on_the_cpu_plan_skips_the_merge_with_the_same_result() {
    // CPU_PLAN_BLOCKS rows of 16 heads (as many rows as the CPU plan's grid, so one split per
    // row), Dqk 64, v_dim 32, 600 tokens in row 0 (the other rows: none valid) out of 648
    // cached in blocks of 8 (more than one of the device plan's 256-token chunks).
    let batch = crate::runtime::CPU_PLAN_BLOCKS;
    let (heads, d, v_dim, bs, topk) = (16u64, 64u64, 32u64, 8usize, 600usize);
    let (tokens, max_blocks) = (648, 81);
    let q = vals(batch * heads as usize * d as usize, 1);
    let kv = vals(tokens * d as usize, 2);
    let table: Vec<i64> = (0..batch * max_blocks)
        .map(|i| {
            if i < max_blocks {
                (i * 5 % max_blocks) as i64
            } else {
                0
            }
        })
        .collect();
    let indices: Vec<i64> = (0..batch * topk)
        .map(|i| if i < topk { (i * 7 % tokens) as i64 } else { 0 })
        .collect();
    let run = |target: PlanTarget| {
        let cfg = AttnCfg::new(AttnSpec {
            name: "sparse_attn",
            block_size: bs as u64,
            tokens: 0,
            double_buffer: target == PlanTarget::Device,
            ..latent_spec(DType::F32, heads, d, v_dim)
        });
        let mut runner = Runner::sim("test", target);
        let plan = plan(cfg, batch, topk, false, false, runner.plan_target());
        let splits = plan.split.splits;
        let inp = AttnInputs {
            q: GmInput {
                dtype: DType::F32,
                shape: vec![batch * heads as usize, d as usize],
                data: &q,
            },
            kv: GmInput {
                dtype: DType::F32,
                shape: vec![tokens, d as usize],
                data: &kv,
            },
            v: None,
            indices: indices.clone(),
            topk,
            counts: (0..batch)
                .map(|r| if r == 0 { topk as i64 } else { 0 })
                .collect(),
            block_table: &table,
            max_blocks,
            scale: 0.125,
            sink: None,
        };
        let (out, lse) = run_attention(&mut runner, "test", &plan, inp).expect("runs");
        let f32s = |b: &[u8]| -> Vec<f32> {
            b.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        };
        (f32s(&out.data), f32s(&lse.data), runner.launches(), splits)
    };
    // With as many rows as its grid the CPU plan runs one split per row; the device plan
    // (32 clusters) splits and merges.
    let (out_cpu, lse_cpu, launches_cpu, splits_cpu) = run(PlanTarget::Cpu);
    let (out_dev, lse_dev, launches_dev, splits_dev) = run(PlanTarget::Device);
    assert_eq!(splits_cpu, 1);
    assert_eq!(launches_cpu, 1, "one f32 split without a sink: no merge");
    assert!(splits_dev > 1);
    assert_eq!(launches_dev, 2, "several splits merge");
    let h = heads as usize;
    assert_eq!(lse_cpu.len(), batch * h);
    for (g, (a, b)) in lse_cpu.iter().zip(&lse_dev).enumerate() {
        if g >= h {
            assert_eq!(*a, f32::INFINITY, "row {g} has no valid index: lse +inf");
        } else {
            assert!(
                a.is_finite() && (a - b).abs() <= 1e-5,
                "lse row {g}: {a} vs {b}"
            );
        }
    }
    assert_eq!(out_cpu.len(), out_dev.len());
    for (i, (a, b)) in out_cpu.iter().zip(&out_dev).enumerate() {
        assert!((a - b).abs() <= 1e-6, "out {i}: {a} vs {b}");
        if i >= h * v_dim as usize {
            assert_eq!(*a, 0.0, "an empty row's out is 0");
        }
    }
}

#[test]
fn the_cpu_plan_buffers_tiles_once_and_makes_them_larger() {
    let tiling = |dt: DType, heads: u64, d: u64, separate_v: bool, double: bool| {
        let c = AttnCfg::new(AttnSpec {
            values: if separate_v {
                Values::OwnCache
            } else {
                Values::KeyPrefix
            },
            double_buffer: double,
            ..latent_spec(dt, heads, d, d.min(512))
        });
        (c.chunk, c.ks, c.ns, c.bufs)
    };
    // f32 DeepSeek: Q takes 288 KiB of L1, so ping-ponged chunks are 32 tokens; one buffer
    // holds 64, and one Q slice beside P in L0A can be 64 columns wide instead of 48.
    assert_eq!(tiling(DType::F32, 128, 576, false, true), (32, 48, 128, 2));
    assert_eq!(tiling(DType::F32, 128, 576, false, false), (64, 64, 128, 1));
    // bf16 reaches the largest chunk either way; the CPU's K slices are 96 wide, not 64,
    // and its V slices 128, not 64.
    assert_eq!(tiling(DType::BF16, 128, 576, false, true), (128, 64, 64, 2));
    assert_eq!(
        tiling(DType::BF16, 128, 576, false, false),
        (128, 96, 128, 1)
    );
    // Separate V (dense GQA) counts both gathered tiles.
    assert_eq!(tiling(DType::F32, 128, 384, true, true).0, 32);
    assert_eq!(tiling(DType::F32, 128, 384, true, false).0, 64);
    // A small problem: the CPU plan keeps the base chunk, single buffered; the device plan's
    // narrow head tile (32 rows) takes the longest chunk, 256 tokens, with narrower slices.
    assert_eq!(tiling(DType::F32, 8, 64, false, true), (256, 16, 16, 2));
    assert_eq!(tiling(DType::F32, 8, 64, false, false), (64, 64, 64, 1));
    // P: two L1 buffers on the CPU plan where they fit (f32 DeepSeek: 288 + 144 + 2 x 32
    // KiB), one on the device plan.
    let p_bufs = |dt: DType, d: u64, separate_v: bool, double: bool| {
        AttnCfg::new(AttnSpec {
            values: if separate_v {
                Values::OwnCache
            } else {
                Values::KeyPrefix
            },
            double_buffer: double,
            ..latent_spec(dt, 128, d, 512)
        })
        .pbufs
    };
    assert_eq!(p_bufs(DType::F32, 576, false, false), 2);
    assert_eq!(p_bufs(DType::BF16, 576, false, false), 2);
    assert_eq!(p_bufs(DType::F32, 576, false, true), 1);
    assert_eq!(p_bufs(DType::BF16, 576, false, true), 1);
    // f32 with 768 columns: Q 384 + K 96 + P 16 KiB leave no room for a second P.
    assert_eq!(p_bufs(DType::F32, 768, false, false), 1);
    assert_eq!(p_bufs(DType::F32, 512, true, false), 2);
}

#[test]
fn the_device_plan_gathers_longer_chunks_for_narrow_head_tiles() {
    // Dense GQA decode (4 query heads per KV head: a 32-row head tile, D 128, K and V from
    // their own caches): the device plan's chunk grows until the score tile is as large as
    // the widest head tile's (128 x 128 bf16) or L1 is full; the CPU plan keeps its chunk (and
    // pads its head tile to 16 rows only: `AttnCfg::single`).
    let dense = |dt: DType, double: bool| {
        let c = AttnCfg::new(AttnSpec {
            hg: 4,
            values: Values::OwnCache,
            double_buffer: double,
            ..latent_spec(dt, 32, 128, 128)
        });
        (c.th, c.chunk)
    };
    assert_eq!(dense(DType::BF16, true), (32, 256));
    assert_eq!(dense(DType::BF16, false), (16, 128));
    // f32: 256 tokens of K and V, double buffered, would take 512 KiB of L1.
    assert_eq!(dense(DType::F32, true), (32, 128));
    assert_eq!(dense(DType::F32, false), (16, 64));
    // The widest head tile (DeepSeek, 128 heads) keeps its chunk.
    let wide = AttnCfg::new(latent_spec(DType::BF16, 128, 576, 512));
    assert_eq!(wide.chunk, 128);
}

#[test]
fn the_cpu_plan_gathers_longer_chunks_for_long_dense_contexts() {
    // Dense GQA decode as above, with the call's longest context known: on the CPU plan the
    // chunk doubles while it is shorter than that context, up to 256 tokens (the device's
    // bound); the device plan does not look at the context.
    let dense = |dt: DType, sep: bool, tokens: u64, double: bool| {
        AttnCfg::new(AttnSpec {
            hg: 4,
            values: if sep {
                Values::OwnCache
            } else {
                Values::KeyPrefix
            },
            tokens,
            double_buffer: double,
            ..latent_spec(dt, 32, 128, 128)
        })
        .chunk
    };
    assert_eq!(dense(DType::F32, true, 2048, false), 256);
    assert_eq!(dense(DType::BF16, true, 2048, false), 256);
    // A short context is not padded further: f32 stops at the first chunk that holds it.
    assert_eq!(dense(DType::F32, true, 100, false), 128);
    assert_eq!(dense(DType::F32, true, 64, false), 64);
    assert_eq!(dense(DType::BF16, true, 100, false), 128);
    assert_eq!(dense(DType::F32, true, 0, false), 64);
    // Sparse calls (V within K's rows) keep their chunk whatever their top-k.
    assert_eq!(dense(DType::F32, false, 2048, false), 64);
    // The device plan is unchanged by the context.
    assert_eq!(
        dense(DType::F32, true, 2048, true),
        dense(DType::F32, true, 0, true)
    );
    // The tiling still fits: K and V of 256 f32 tokens, Q and P in L1, P beside a Q slice in
    // L0A, the K^T and V slices in L0B.
    let c = AttnCfg::new(AttnSpec {
        hg: 4,
        values: Values::OwnCache,
        tokens: 2048,
        double_buffer: false,
        ..latent_spec(DType::F32, 32, 128, 128)
    });
    assert!(
        c.th * c.dp() * 4 + 2 * c.chunk * c.dp() * 4 + c.pbufs * c.th * c.chunk * 4 <= 500 * 1024
    );
    assert!(c.th * c.chunk * 4 + c.th * c.ks * 4 <= 64 * 1024);
    assert!(c.ks * c.chunk * 4 + c.ns * c.chunk * 4 <= 64 * 1024);
}

#[test]
fn items_per_block_folds_the_waves_into_each_block() {
    use super::plan::items_per_block;
    // One wave or less: one item per block.
    assert_eq!(items_per_block(32, 32), 1);
    assert_eq!(items_per_block(48, 32), 1);
    assert_eq!(items_per_block(7, 32), 1);
    // Whole waves: one item per wave in each block.
    assert_eq!(items_per_block(64, 32), 2);
    assert_eq!(items_per_block(128, 32), 4);
    // Rounded down to a divisor of the items, so every block runs as many.
    assert_eq!(items_per_block(100, 32), 2);
    assert_eq!(items_per_block(99, 32), 3);
    assert_eq!(items_per_block(97, 32), 1);
    assert_eq!(items_per_block(10, 0), 10);
}

#[test]
fn the_device_plan_runs_two_items_per_block_without_hazards_and_same_results() {
    // 64 rows of one 4-head tile (dense GQA form: K and V from their own caches), so 64 work
    // items: twice the device's 32 clusters. The device plan folds them into 32 blocks of 2
    // items; the rows count 0 to 600 valid tokens (0 to 3 of its 256-token chunks, so both
    // halves of the ping-pong end an item), and the traced run must be hazard-free and agree
    // with the CPU plan (one item per block). At D 32 the sync pass has no event ids for two
    // Q buffers, so Q has one.
    device_items_agree_with_the_cpu_plan(64, 32, (2, 1, 32), 1);
}

#[test]
fn three_items_per_block_with_two_q_buffers_run_without_hazards_and_same_results() {
    // 96 rows at D 128: 3 items per block, Q double-buffered, so the cube's item loop unrolled
    // by two ends on its odd half.
    device_items_agree_with_the_cpu_plan(96, 128, (3, 1, 32), 2);
}

/// Runs `batch` rows of one 4-head tile at head size `d` (f32) on the device plan (traced,
/// expecting `(ipb, splits, blocks)` and `qbufs`) and on the CPU plan, and checks that the
/// device run is hazard-free and both agree.
fn device_items_agree_with_the_cpu_plan(
    batch: usize,
    d: u64,
    expect: (u64, usize, u64),
    qbufs: u64,
) {
    let (heads, bs, topk) = (4u64, 8usize, 600usize);
    let (tokens, max_blocks) = (600usize, 75usize);
    let q = vals(batch * heads as usize * d as usize, 1);
    let k = vals(tokens * d as usize, 2);
    let v = vals(tokens * d as usize, 3);
    let table: Vec<i64> = (0..batch * max_blocks)
        .map(|i| ((i % max_blocks) * 7 % max_blocks) as i64)
        .collect();
    let indices: Vec<i64> = (0..batch * topk).map(|i| (i % topk) as i64).collect();
    let counts: Vec<i64> = (0..batch).map(|r| ((r * 97) % (topk + 1)) as i64).collect();
    let run = |target: PlanTarget| {
        let cfg = AttnCfg::new(AttnSpec {
            name: "paged_attn",
            hg: heads,
            values: Values::OwnCache,
            block_size: bs as u64,
            tokens: 0,
            double_buffer: target == PlanTarget::Device,
            head_col_stride: d,
            ..latent_spec(DType::F32, heads, d, d)
        });
        let mut runner = Runner::sim("test", target);
        let plan = plan(cfg, batch, topk, false, false, runner.plan_target());
        let shape = (
            plan.cfg.ipb,
            plan.split.splits,
            plan.split.blocks,
            compiling_cfg("t", &plan.cfg).qbufs,
        );
        let input = |data| GmInput {
            dtype: DType::F32,
            shape: vec![tokens, d as usize],
            data,
        };
        let inp = AttnInputs {
            q: GmInput {
                dtype: DType::F32,
                shape: vec![batch * heads as usize, d as usize],
                data: &q,
            },
            kv: input(&k),
            v: Some(input(&v)),
            indices: indices.clone(),
            topk,
            counts: counts.clone(),
            block_table: &table,
            max_blocks,
            scale: 0.125,
            sink: None,
        };
        let (out, _lse) = run_traced(&mut runner, &plan, inp);
        let f32s: Vec<f32> = out
            .data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        (f32s, shape)
    };
    let (out_dev, dev) = run(PlanTarget::Device);
    assert_eq!(
        dev,
        (expect.0, expect.1, expect.2, qbufs),
        "items per block, splits, blocks, Q buffers"
    );
    let (out_cpu, cpu) = run(PlanTarget::Cpu);
    assert_eq!(cpu.0, 1, "the CPU plan keeps one item per block");
    assert_eq!(out_cpu.len(), out_dev.len());
    for (i, (a, b)) in out_cpu.iter().zip(&out_dev).enumerate() {
        assert!((a - b).abs() <= 1e-5, "out {i}: {a} vs {b}");
    }
}

#[test]
fn the_cpu_plan_hands_small_head_tiles_whole_to_one_vector_core() {
    let tile = |hg: u64, double: bool| {
        let c = AttnCfg::new(AttnSpec {
            hg,
            double_buffer: double,
            ..latent_spec(DType::BF16, 128, 192, 128)
        });
        (c.th, c.single, c.r(), c.acc_mode())
    };
    use tile_backend::ir::AccToVecMode::{DualModeSplitM, SingleModeVec0};
    // The CPU plan pads to the cube's 16-row fractal, up to SINGLE_MAX_ROWS rows on AIV0 ...
    for (hg, th) in [
        (1, 16),
        (8, 16),
        (16, 16),
        (17, 32),
        (32, 32),
        (33, 48),
        (64, 64),
    ] {
        assert_eq!(tile(hg, false), (th, true, th, SingleModeVec0), "hg {hg}");
    }
    // ... and splits wider head tiles between both AIVs, as the device plan always does.
    for (hg, th) in [(65, 96), (128, 128)] {
        assert_eq!(
            tile(hg, false),
            (th, false, th / 2, DualModeSplitM),
            "hg {hg}"
        );
    }
    for (hg, th) in [(1, 32), (16, 32), (17, 32), (33, 64), (64, 64), (128, 128)] {
        assert_eq!(
            tile(hg, true),
            (th, false, th / 2, DualModeSplitM),
            "hg {hg}"
        );
    }
    // The single tile is its own kernel.
    let single = AttnCfg::new(AttnSpec {
        double_buffer: false,
        ..latent_spec(DType::F32, 16, 64, 32)
    });
    assert!(attn_split(&single).name.contains("_single"));
}

/// Runs `plan` traced and checks that every launch is hazard-free; returns `(out, lse)`.
fn run_traced(runner: &mut Runner, plan: &AttnPlan, inp: AttnInputs<'_>) -> (GmTensor, GmTensor) {
    let (res, records) = profile(|| run_attention(runner, "test", plan, inp).expect("runs"));
    assert!(!records.is_empty(), "no launch was traced");
    for r in &records {
        assert!(r.hazards.is_empty(), "{}: {:#?}", r.kernel, r.hazards);
    }
    res
}

/// `vals` as `dtype` bytes (f32 as is, f16/bf16 rounded to nearest).
fn in_dtype(dtype: DType, f32_bytes: &[u8]) -> Vec<u8> {
    let xs = f32_bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]));
    match dtype {
        DType::BF16 => xs
            .flat_map(|x| half::bf16::from_f32(x).to_le_bytes())
            .collect(),
        DType::F16 => xs
            .flat_map(|x| half::f16::from_f32(x).to_le_bytes())
            .collect(),
        _ => f32_bytes.to_vec(),
    }
}

#[test]
fn the_single_vector_core_head_tile_gives_the_split_tiles_bits_without_hazards() {
    // Sparse form (V = the first v_dim columns of K), 3 rows counting 100, 37 and 0 valid
    // tokens: two f32 chunks of 64 (the second a tail), one bf16 chunk of 128 (a tail), an
    // empty row. Each head tile runs on the CPU plan once handed whole to AIV0 and once split
    // between both AIVs (the 32-row-padded tile the plan used before); the traced runs must be
    // hazard-free and give the same bytes.
    let (batch, d, v_dim, bs, topk) = (3usize, 64u64, 48u64, 8usize, 100usize);
    let (tokens, max_blocks) = (104usize, 13usize);
    let table: Vec<i64> = (0..batch * max_blocks)
        .map(|i| ((i % max_blocks) * 5 % max_blocks) as i64)
        .collect();
    let indices: Vec<i64> = (0..batch * topk).map(|i| (i * 7 % tokens) as i64).collect();
    let counts = vec![100i64, 37, 0];
    for dtype in [DType::F32, DType::BF16] {
        for (heads, hg) in [(1u64, 1u64), (8, 8), (16, 16), (17, 17), (32, 32), (32, 12)] {
            let q = in_dtype(dtype, &vals(batch * heads as usize * d as usize, 1));
            let kv = in_dtype(dtype, &vals(tokens * d as usize, 2));
            let run = |cfg: AttnCfg| {
                let mut runner = Runner::sim("test", PlanTarget::Cpu);
                let plan = plan(cfg, batch, topk, false, false, runner.plan_target());
                let inp = AttnInputs {
                    q: GmInput {
                        dtype,
                        shape: vec![batch * heads as usize, d as usize],
                        data: &q,
                    },
                    kv: GmInput {
                        dtype,
                        shape: vec![tokens, d as usize],
                        data: &kv,
                    },
                    v: None,
                    indices: indices.clone(),
                    topk,
                    counts: counts.clone(),
                    block_table: &table,
                    max_blocks,
                    scale: 0.125,
                    sink: None,
                };
                let (out, lse) = run_traced(&mut runner, &plan, inp);
                (out.data, lse.data)
            };
            let single = AttnCfg::new(AttnSpec {
                hg,
                block_size: bs as u64,
                tokens: 0,
                double_buffer: false,
                ..latent_spec(dtype, heads, d, v_dim)
            });
            assert!(single.single);
            let split = AttnCfg {
                single: false,
                th: round_up(single.hg, 32),
                ..single.clone()
            };
            let what = format!("{dtype} heads {heads} hg {hg}");
            let (out, lse) = run(single);
            assert!(out.iter().any(|&b| b != 0), "{what}: out is not all zero");
            assert_eq!((out, lse), run(split), "{what}");
        }
    }
}

#[test]
fn the_device_plan_double_buffers_q_where_the_kernel_compiles() {
    // Dense GQA shapes (4 heads per KV head, 8 KV heads) of 8 or 12 rows of 2048 tokens: 2 or
    // 3 items per device block. Q is double-buffered where L1 has room and the sync pass
    // finds its event ids for the unrolled item loop; where it does not (D 64 in 16-bit data)
    // the plan keeps one buffer. Every chosen kernel compiles.
    let arch = tile_backend::arch::Arch::ascend950();
    let (mut chosen, mut refused) = (Vec::new(), Vec::new());
    for dtype in [DType::F32, DType::BF16] {
        for d in [32u64, 64, 128, 256] {
            for batch in [8usize, 12] {
                let cfg = AttnCfg::new(AttnSpec {
                    name: "paged_attn",
                    hg: 4,
                    values: Values::OwnCache,
                    block_size: 16,
                    tokens: 0,
                    head_col_stride: d,
                    kv_cols: 8 * d,
                    ..latent_spec(dtype, 32, d, d)
                });
                let p = plan(cfg, batch, 2048, false, false, PlanTarget::Device);
                assert!(p.cfg.ipb > 1, "{dtype} D {d}: several items per block");
                // The plan asks for two Q buffers wherever they fit, as a pure function; the
                // launch's trial compile decides.
                let again = plan(p.cfg.clone(), batch, 2048, false, false, PlanTarget::Device);
                assert_eq!(
                    again.cfg.qbufs, p.cfg.qbufs,
                    "{dtype} D {d}: the plan is pure"
                );
                let cfg = compiling_cfg("t", &p.cfg);
                let kernel = attn_split(&cfg);
                if let Err(e) = tile_backend::passes::compile(&kernel, &arch) {
                    panic!("{dtype} D {d} qbufs {}: {e}", cfg.qbufs);
                }
                if cfg.qbufs < p.cfg.qbufs {
                    refused.push(p.cfg.clone());
                }
                chosen.push((dtype, d, batch, cfg.qbufs));
            }
        }
    }
    assert!(chosen.contains(&(DType::BF16, 128, 8, 2)), "{chosen:?}");
    assert!(chosen.contains(&(DType::F32, 128, 12, 2)), "{chosen:?}");
    assert!(chosen.contains(&(DType::BF16, 64, 8, 1)), "{chosen:?}");
    // The refusal is remembered in the runtime's cache, so the next launch of that shape does
    // not compile it again.
    assert!(
        refused
            .iter()
            .any(|k| k.dtype == DType::BF16 && k.qbufs == 2),
        "{refused:?}"
    );
    assert!(
        refused.iter().all(|k| crate::runtime::refused("t", k)),
        "{refused:?}"
    );
    // The CPU plan keeps one Q buffer.
    let cfg = AttnCfg::new(AttnSpec {
        double_buffer: false,
        ..latent_spec(DType::BF16, 32, 128, 128)
    });
    assert_eq!(
        plan(cfg, 8, 2048, false, false, PlanTarget::Cpu).cfg.qbufs,
        1
    );
}

#[test]
fn a_direct_split_gives_the_merged_bits_without_hazards() {
    // Dense GQA form (K and V from their own caches), 64 rows of one 4-head tile: one split
    // per item on the device plan, which then writes the result in the data dtype itself
    // (`AttnCfg::direct`) instead of launching the merge. Its bytes must be the merge's, in
    // bf16 (the kernel's cast) and f32, and both traced runs hazard-free.
    for dtype in [DType::BF16, DType::F32] {
        let (batch, d, heads, bs, topk) = (64usize, 64u64, 4u64, 8usize, 600usize);
        let (tokens, max_blocks) = (600usize, 75usize);
        let q = in_dtype(dtype, &vals(batch * heads as usize * d as usize, 1));
        let k = in_dtype(dtype, &vals(tokens * d as usize, 2));
        let v = in_dtype(dtype, &vals(tokens * d as usize, 3));
        let table: Vec<i64> = (0..batch * max_blocks)
            .map(|i| ((i % max_blocks) * 7 % max_blocks) as i64)
            .collect();
        let indices: Vec<i64> = (0..batch * topk).map(|i| (i % topk) as i64).collect();
        let counts: Vec<i64> = (0..batch).map(|r| 1 + ((r * 97) % topk) as i64).collect();
        let cfg = AttnCfg::new(AttnSpec {
            name: "paged_attn",
            hg: heads,
            values: Values::OwnCache,
            block_size: bs as u64,
            tokens: 0,
            double_buffer: true,
            head_col_stride: d,
            ..latent_spec(dtype, heads, d, d)
        });
        let mut runner = Runner::sim("test", PlanTarget::Device);
        let direct = plan(cfg, batch, topk, false, false, runner.plan_target());
        assert!(
            direct.cfg.direct && direct.merge.is_none(),
            "{dtype}: direct"
        );
        assert_eq!(direct.launches().len(), 1, "{dtype}: no merge launch");
        let mut merged = direct.clone();
        merged.cfg.direct = false;
        merged.merge = Some((
            merge::MergeCfg {
                dtype,
                v_dim: d,
                sink: false,
            },
            merge::merge_blocks(direct.rows),
        ));
        let input = |data, rows| GmInput {
            dtype,
            shape: vec![rows, d as usize],
            data,
        };
        let mut run = |p: &AttnPlan| {
            let inp = AttnInputs {
                q: input(&q, batch * heads as usize),
                kv: input(&k, tokens),
                v: Some(input(&v, tokens)),
                indices: indices.clone(),
                topk,
                counts: counts.clone(),
                block_table: &table,
                max_blocks,
                scale: 0.125,
                sink: None,
            };
            run_traced(&mut runner, p, inp)
        };
        let (out_d, lse_d) = run(&direct);
        let (out_m, lse_m) = run(&merged);
        assert_eq!(out_d.dtype, dtype);
        assert!(out_d.data == out_m.data, "{dtype}: out bits differ");
        assert!(lse_d.data == lse_m.data, "{dtype}: lse bits differ");
    }
}
