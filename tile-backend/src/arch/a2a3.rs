//! Ascend A2/A3 (910B/910C, `dav-c220`): capacities, C0 and rates. Its own move and vector-dtype
//! tables are not transcribed yet; it borrows the 950 tables (flagged by `rules_documented = false`).

use super::{
    cast_pairs_950, move_table_950, vector_dtypes_950, Arch, Figure, LoadRule, MatmulDtypes,
    MrgSortTies, Rates, SpaceSpec, Target,
};
use crate::ir::{DType, Layout, MemSpace};

const KIB: u64 = 1024;

pub(super) fn arch() -> Arch {
    use Layout::*;
    let space = |space, capacity, safe, hw_align, plan_align| SpaceSpec {
        space,
        capacity,
        safe_capacity: safe,
        hw_align,
        plan_align,
    };
    Arch {
        target: Target::A2A3,
        compiler_target: "dav-c220".into(),
        spaces: vec![
            space(MemSpace::Mat, 512 * KIB, 512 * KIB, 32, 128),
            space(MemSpace::Left, 64 * KIB, 64 * KIB, 32, 64),
            space(MemSpace::Right, 64 * KIB, 64 * KIB, 32, 64),
            space(MemSpace::Acc, 128 * KIB, 128 * KIB, 32, 128),
            space(MemSpace::Bias, KIB, KIB, 32, 64),
            space(MemSpace::Scaling, 2 * KIB, 2 * KIB, 128, 128),
            space(MemSpace::Vec, 192 * KIB, 184 * KIB, 32, 128),
        ],
        left_layout: ZZ,
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
        moves: move_table_950()
            .into_iter()
            .map(|mut r| {
                // The one documented difference: Left is ZZ on A2/A3.
                if r.dst == MemSpace::Left {
                    if let super::LayoutRule::Pairs(p) = &mut r.layouts {
                        for pair in p.iter_mut() {
                            pair.1 = ZZ;
                        }
                    }
                }
                r
            })
            .collect(),
        matmul_dtypes: vec![
            MatmulDtypes {
                a: DType::I8,
                b: DType::I8,
                acc: DType::I32,
            },
            MatmulDtypes {
                a: DType::F16,
                b: DType::F16,
                acc: DType::F32,
            },
            MatmulDtypes {
                a: DType::BF16,
                b: DType::BF16,
                acc: DType::F32,
            },
            MatmulDtypes {
                a: DType::F32,
                b: DType::F32,
                acc: DType::F32,
            },
        ],
        matmul_max_dim: 4095,
        scaling_n_multiple: 16,
        flag_events: 8,
        cross_flags: 32,
        gather_dtypes: vec![DType::F32, DType::F16, DType::BF16, DType::I8],
        vector_dtypes: vector_dtypes_950(),
        cast_pairs: cast_pairs_950(),
        rates: Rates {
            clock_ghz: Figure::assumed(1.8),
            clusters: Figure::assumed(24.0),
            chip_gm_bytes_per_s: Figure::assumed(1.6e12),
            mte2_cube: Figure::assumed(32.0),
            mte2_vector: Figure::assumed(16.0),
            mte1: Figure::assumed(256.0),
            fix: Figure::assumed(128.0),
            ub_to_l1: Figure::assumed(128.0),
            mte3: Figure::assumed(32.0),
            cube_macs_fp16: Figure::doc(4096.0),
            cube_macs_int8: Figure::doc(8192.0),
            cube_macs_fp32: Figure::doc(1024.0),
            matmul_fixed_cycles: Figure::assumed(6.0),
            vector_bytes_per_cycle: Figure::assumed(256.0),
            vector_exp_cycles_per_repeat: Figure::assumed(2.0),
            // The 950's A5 figures (no A2/A3 source read).
            vector_row_max_cycles_per_repeat: Figure::assumed(3.5),
            vector_row_sum_cycles_per_repeat: Figure::assumed(4.0),
            vector_binary_2d_cycles_per_repeat: Figure::assumed(1.9),
            vector_binary_2d_row_cycles: Figure::assumed(3.0),
            vector_col_reduce_cycles_per_repeat: Figure::assumed(0.5),
            vector_issue_cycles: Figure::assumed(55.0),
            dma_latency_cycles: Figure::assumed(500.0),
            dma_half_peak_bytes: Figure::doc(30.0 * 1024.0),
            dma_latency_overlaps: Figure::assumed(1.0),
            scalar_gm_read_cycles: Figure::assumed(200.0),
            scalar_ub_read_cycles: Figure::assumed(20.0),
            // cce_costmodel_vector_compute.hpp:87-90 (vbitsort's default) and :271-278
            // (vmrgsort4 measured on a 910B3), as on the 950.
            sort32_head_cycles: Figure::a2a3(6.0),
            sort32_cycles_per_block: Figure::a2a3(2.0),
            mrgsort_head_cycles: Figure::a2a3(20.0),
            mrgsort_cycles_per_128_pairs: Figure::a2a3(78.0),
            l2_bytes: Figure::assumed(128.0 * 1024.0 * 1024.0),
            l2_line_bytes: Figure::a2a3(512.0),
            l2_hit_latency_cycles: Figure::a2a3(50.0),
            l2_read_bytes_per_cycle: Figure::a2a3(256.0),
        },
        rules_documented: false,
        l2: false,
        mrgsort_ties: MrgSortTies::EarlierListFirst,
    }
}
