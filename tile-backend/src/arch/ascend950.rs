//! Ascend 950 (A5, `dav-c310`): ASCEND950.md §2-§6, §10.

use super::{
    cast_pairs_950, vector_dtypes_950, Arch, Figure, LayoutRule, LoadRule, MatmulDtypes, MoveRule,
    MrgSortTies, Rates, ScaleRule, ShapeRel, Sku, SpaceSpec, Target,
};
use crate::ir::{DType, Layout, MemSpace, Pipe};

const KIB: u64 = 1024;

pub(super) fn arch(sku: Sku) -> Arch {
    use Layout::*;
    Arch {
        target: Target::Ascend950,
        compiler_target: "dav-c310".into(),
        spaces: vec![
            space(MemSpace::Mat, 512 * KIB, 512 * KIB, 32, 128),
            space(MemSpace::Left, 64 * KIB, 64 * KIB, 32, 64),
            space(MemSpace::Right, 64 * KIB, 64 * KIB, 32, 64),
            space(MemSpace::Acc, 256 * KIB, 256 * KIB, 32, 128),
            space(MemSpace::Bias, 4 * KIB, 4 * KIB, 32, 64),
            space(MemSpace::Scaling, 4 * KIB, 4 * KIB, 128, 128),
            space(MemSpace::Vec, 248 * KIB, 240 * KIB, 32, 128),
        ],
        left_layout: NZ,
        right_layout: ZN,
        acc_layout: NZ,
        loads: vec![
            LoadRule {
                dst: MemSpace::Vec,
                layouts: vec![(ND, ND), (DN, DN), (NZ, NZ)],
            },
            LoadRule {
                dst: MemSpace::Mat,
                layouts: vec![(ND, ND), (DN, DN), (NZ, NZ), (ND, NZ), (DN, ZN)],
            },
        ],
        moves: move_table_950(),
        matmul_dtypes: matmul_dtypes_950(),
        matmul_max_dim: 4095,
        scaling_n_multiple: 16,
        flag_events: 8,
        cross_flags: 32,
        gather_dtypes: vec![DType::F32, DType::F16, DType::BF16, DType::I8],
        vector_dtypes: vector_dtypes_950(),
        cast_pairs: cast_pairs_950(),
        rates: rates_950(sku),
        rules_documented: true,
        l2: false,
        mrgsort_ties: MrgSortTies::EarlierListFirst,
    }
}

fn space(space: MemSpace, capacity: u64, safe: u64, hw_align: u64, plan_align: u64) -> SpaceSpec {
    SpaceSpec {
        space,
        capacity,
        safe_capacity: safe,
        hw_align,
        plan_align,
    }
}

fn same(dtypes: &[DType]) -> Vec<(DType, DType)> {
    dtypes.iter().map(|d| (*d, *d)).collect()
}

/// The legal-move table of ASCEND950.md §5.
pub(crate) fn move_table_950() -> Vec<MoveRule> {
    use DType::*;
    use Layout::*;
    let cube_operand = [I8, F8E4M3, F8E5M2, F16, BF16, F32];
    let vec_insert = [I8, I32, F16, BF16, F32, F8E4M3, F8E5M2];
    vec![
        MoveRule {
            src: MemSpace::Mat,
            dst: MemSpace::Left,
            pipe: Pipe::Mte1,
            shape: ShapeRel::DstLeSrc,
            scale: ScaleRule::Without,
            layouts: LayoutRule::from_each(&[ND, NZ, ZN, ZZ], &[NZ]),
            dtypes: same(&cube_operand),
        },
        MoveRule {
            src: MemSpace::Mat,
            dst: MemSpace::Right,
            pipe: Pipe::Mte1,
            shape: ShapeRel::DstLeSrc,
            scale: ScaleRule::Without,
            layouts: LayoutRule::from_each(&[ND, NZ, ZN, ZZ], &[ZN]),
            dtypes: same(&cube_operand),
        },
        MoveRule {
            src: MemSpace::Vec,
            dst: MemSpace::Vec,
            pipe: Pipe::V,
            shape: ShapeRel::DstLeSrc,
            scale: ScaleRule::Without,
            layouts: LayoutRule::Unchecked,
            dtypes: same(&DType::ALL),
        },
        MoveRule {
            src: MemSpace::Vec,
            dst: MemSpace::Vec,
            pipe: Pipe::V,
            shape: ShapeRel::DstGtSrc,
            scale: ScaleRule::Without,
            layouts: LayoutRule::Pairs(vec![(ND, ND), (NZ, NZ)]),
            dtypes: same(&vec_insert),
        },
        MoveRule {
            src: MemSpace::Vec,
            dst: MemSpace::Mat,
            pipe: Pipe::Mte3,
            shape: ShapeRel::DstLeSrc,
            scale: ScaleRule::Without,
            layouts: LayoutRule::from_each(&[ND, NZ], &[ND, DN, NZ, ZN, ZZ]),
            dtypes: same(&DType::ALL),
        },
        // Inserting into a larger L1 tile: the §5 table allows int32 only, yet the 950 flash
        // attention (§9) inserts fp16 P, NZ in UB, at a column offset of an NZ L1 tile. We
        // follow both: NZ -> NZ inserts take every dtype, other layouts int32 only.
        MoveRule {
            src: MemSpace::Vec,
            dst: MemSpace::Mat,
            pipe: Pipe::Mte3,
            shape: ShapeRel::DstGtSrc,
            scale: ScaleRule::Without,
            layouts: LayoutRule::Pairs(vec![(NZ, NZ)]),
            dtypes: same(&DType::ALL),
        },
        MoveRule {
            src: MemSpace::Vec,
            dst: MemSpace::Mat,
            pipe: Pipe::Mte3,
            shape: ShapeRel::DstGtSrc,
            scale: ScaleRule::Without,
            layouts: LayoutRule::from_each(&[ND, NZ], &[ND, DN, NZ, ZN, ZZ]),
            dtypes: same(&[I32]),
        },
        MoveRule {
            src: MemSpace::Mat,
            dst: MemSpace::Bias,
            pipe: Pipe::Mte1,
            shape: ShapeRel::Any,
            scale: ScaleRule::Without,
            layouts: LayoutRule::from_each(&[ND, DN, NZ, ZN, ZZ], &[ND]),
            dtypes: vec![(I32, I32), (F32, F32), (F16, F32), (BF16, F32)],
        },
        MoveRule {
            src: MemSpace::Mat,
            dst: MemSpace::Scaling,
            pipe: Pipe::Fix,
            shape: ShapeRel::Any,
            scale: ScaleRule::Without,
            layouts: LayoutRule::Unchecked,
            dtypes: vec![(I64, I64), (U64, U64), (I64, U64), (U64, I64)],
        },
        MoveRule {
            src: MemSpace::Acc,
            dst: MemSpace::Vec,
            pipe: Pipe::Fix,
            shape: ShapeRel::Any,
            scale: ScaleRule::Without,
            layouts: LayoutRule::from_each(&[NZ], &[ND, DN, NZ]),
            dtypes: vec![(F32, F32), (F32, F16), (F32, BF16), (I32, I32)],
        },
        MoveRule {
            src: MemSpace::Acc,
            dst: MemSpace::Vec,
            pipe: Pipe::Fix,
            shape: ShapeRel::Any,
            scale: ScaleRule::With,
            layouts: LayoutRule::from_each(&[NZ], &[ND, DN, NZ]),
            dtypes: vec![
                (F32, I8),
                (F32, U8),
                (F32, F16),
                (F32, BF16),
                (F32, F8E4M3),
                (F32, F32),
                (I32, I8),
                (I32, U8),
                (I32, F16),
                (I32, BF16),
            ],
        },
        MoveRule {
            src: MemSpace::Acc,
            dst: MemSpace::Mat,
            pipe: Pipe::Fix,
            shape: ShapeRel::DstGeSrc,
            scale: ScaleRule::Without,
            layouts: LayoutRule::Pairs(vec![(NZ, NZ)]),
            dtypes: vec![(F32, F32), (F32, F16), (F32, BF16), (I32, I32)],
        },
    ]
}

fn matmul_dtypes_950() -> Vec<MatmulDtypes> {
    use DType::*;
    let mut v = vec![
        MatmulDtypes {
            a: I8,
            b: I8,
            acc: I32,
        },
        MatmulDtypes {
            a: F16,
            b: F16,
            acc: F32,
        },
        MatmulDtypes {
            a: BF16,
            b: BF16,
            acc: F32,
        },
        MatmulDtypes {
            a: F32,
            b: F32,
            acc: F32,
        },
    ];
    for a in [F8E4M3, F8E5M2] {
        for b in [F8E4M3, F8E5M2] {
            v.push(MatmulDtypes { a, b, acc: F32 });
        }
    }
    v
}

fn rates_950(sku: Sku) -> Rates {
    let dt = sku == Sku::Ascend950DT;
    // Sources: docs/simulator.md, "Cost figures" (every figure, its source or "assumption").
    // No public file models the 950's MTE2, MTE3, FIX, MTE1 or cube timing (A5-FACTS §3: PTO's
    // perf-sim is A2/A3 only): those rates are the machine notes' (ASCEND950.md §10) and stay
    // assumptions, as does the DMA latency, which nothing public gives.
    Rates {
        clock_ghz: Figure::doc(1.65),
        clusters: Figure::doc(32.0),
        chip_gm_bytes_per_s: Figure::doc(if dt { 4.0e12 } else { 1.6e12 }),
        mte2_cube: Figure::assumed(if dt { 70.0 } else { 31.0 }),
        mte2_vector: Figure::assumed(if dt { 35.0 } else { 16.0 }),
        mte1: Figure::assumed(256.0),
        fix: Figure::assumed(128.0),
        ub_to_l1: Figure::assumed(128.0),
        mte3: Figure::assumed(40.0),
        // One 16x16x16 fractal step per cycle (PTO's A2/A3 perf-sim has the same formula,
        // A5-FACTS §3; no A5 timing source).
        cube_macs_fp16: Figure::assumed(4096.0),
        cube_macs_int8: Figure::assumed(8192.0),
        cube_macs_fp32: Figure::assumed(1024.0),
        matmul_fixed_cycles: Figure::assumed(6.0),
        // The 256-byte repeat of A5's vector function (VfSim, A5-FACTS §2).
        vector_bytes_per_cycle: Figure::doc(256.0),
        // VfSim and the fitted TEXP formulas (formula_params.csv:44 fp32 1.967 per repeat).
        vector_exp_cycles_per_repeat: Figure::doc(2.0),
        // PTO-ISA's A5 VfSim (A5-FACTS §2, over VfSim/params/isa.csv:26-31: VCMAX latency 16,
        // VCADD latency 22, throughput 1, EXU0 only): TROWMAX 504 / TROWSUM 531 cycles at f32
        // 64x128, 485 / 612 at 128x128 fp16, each 128 repeats: (x - 55) / 128 = 3.5 / 3.4 and
        // 3.7 / 4.4 per repeat.
        vector_row_max_cycles_per_repeat: Figure::doc(3.5),
        vector_row_sum_cycles_per_repeat: Figure::doc(4.0),
        // Hardware, two-source ops on rows apart (st_a5_fit/testcase/tadd_fit/main.cpp:77-93):
        // 20x1280 valid in 20x1312 = 869 and 20x128 in 20x160 = 191 cycles, 400 and 40
        // repeats over 20 rows: 869 - 191 = 360 a, a = 1.88; b = (191 - 55 - 40 a) / 20 = 3.0.
        vector_binary_2d_cycles_per_repeat: Figure::doc(1.9),
        vector_binary_2d_row_cycles: Figure::doc(3.0),
        // VfSim (A5-FACTS §2, npu/a5/TColReduceOps.hpp): TCOLMAX / TCOLSUM f32 128x64 118 / 119
        // cycles over 128 source repeats: (x - 55) / 128 = 0.49 / 0.5.
        vector_col_reduce_cycles_per_repeat: Figure::doc(0.5),
        // The hardware-measured TADD f32 1x64 = 55 cycles (one repeat:
        // tests/costmodel/st_a5_fit/testcase/tadd_fit/main.cpp:52); fitted intercept 55.07
        // (formula_params.csv:12).
        vector_issue_cycles: Figure::doc(55.0),
        dma_latency_cycles: Figure::assumed(500.0),
        dma_half_peak_bytes: Figure::assumed(30.0 * 1024.0),
        dma_latency_overlaps: Figure::assumed(1.0),
        scalar_gm_read_cycles: Figure::assumed(200.0),
        scalar_ub_read_cycles: Figure::assumed(20.0),
        // No A5 source times the sort instructions. PTO-ISA's A2/A3 cost model
        // (include/pto/costmodel/a2a3/cce_costmodel/cce_costmodel_vector_compute.hpp:87-90)
        // gives vbitsort (TSORT32) its uncalibrated default, EstimateLinearCycles(repeat) =
        // 6 + 2 x repeat (cce_costmodel_core.hpp:130); vmrgsort4 (TMRGSORT) was measured on a
        // 910B3, fp32 single-list blockLen 64: 78 x repeat + 20 (:271-278), a repeat merging
        // 4 x 32 pairs. A2/A3-derived, an assumption on the 950 (docs/simulator.md).
        sort32_head_cycles: Figure::a2a3(6.0),
        sort32_cycles_per_block: Figure::a2a3(2.0),
        mrgsort_head_cycles: Figure::a2a3(20.0),
        mrgsort_cycles_per_128_pairs: Figure::a2a3(78.0),
        // The L2 model (off by default): the 950's 128 MiB (ASCEND950.md §1); line, hit latency
        // and read bandwidth from PTO-ISA's A2/A3 perf-sim
        // (include/pto/costmodel/perf_sim/config.hpp:46-49, pypto's CacheConfig defaults:
        // 512-byte lines, 50-cycle hits, 256 B/cycle read). Its 150 extra cycles on a miss
        // (:48) are not taken: a miss costs our DMA latency, no more.
        l2_bytes: Figure::doc(128.0 * 1024.0 * 1024.0),
        l2_line_bytes: Figure::a2a3(512.0),
        l2_hit_latency_cycles: Figure::a2a3(50.0),
        l2_read_bytes_per_cycle: Figure::a2a3(256.0),
    }
}
