//! Per-pipe rates and throughput figures for the cost model (ASCEND950.md §10).
//!
//! **Frozen** (#32): the Ascend 950 figures are calibrated against PTO-ISA's public A5 data
//! where it has any (the vector costs, A5-FACTS §2) and frozen; kernels are tuned against
//! them, never the reverse. A figure changes only with a cited public source (file and line),
//! in a commit of its own, and `tests/frozen_figures.rs` holds every value so that no change
//! goes unnoticed. docs/simulator.md ("Cost figures") gives each figure's source, or says it is
//! an assumption.

use serde::{Deserialize, Serialize};

/// Where a figure comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Basis {
    /// From a platform file or hardware documentation of this target.
    Documented,
    /// Our assumption (no platform file gives it); frozen before kernels are tuned against it.
    Assumption,
    /// From PTO-ISA's A2/A3 cost models (no A5 source): the L2 model's figures, used only when
    /// the model is switched on ([`crate::arch::Arch::l2`]), and the sort instructions'
    /// (TSORT32, TMRGSORT). An assumption on the 950.
    A2A3Derived,
}

/// A number with its provenance.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Figure {
    /// The value.
    pub value: f64,
    /// Documented or assumed.
    pub basis: Basis,
}

impl Figure {
    /// A documented figure.
    pub const fn doc(value: f64) -> Self {
        Figure {
            value,
            basis: Basis::Documented,
        }
    }
    /// An assumed figure.
    pub const fn assumed(value: f64) -> Self {
        Figure {
            value,
            basis: Basis::Assumption,
        }
    }
    /// A figure taken from PTO-ISA's A2/A3 perf-sim.
    pub const fn a2a3(value: f64) -> Self {
        Figure {
            value,
            basis: Basis::A2A3Derived,
        }
    }
}

/// Rates of one chip: bytes per cycle per core unless stated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rates {
    /// Core clock in GHz.
    pub clock_ghz: Figure,
    /// Clusters (AIC) on the chip; blocks beyond this run in waves.
    pub clusters: Figure,
    /// Chip GM bandwidth in bytes per second, shared by all running cores.
    pub chip_gm_bytes_per_s: Figure,
    /// GM -> AIC (MTE2) bytes per cycle.
    pub mte2_cube: Figure,
    /// GM -> AIV (MTE2) bytes per cycle.
    pub mte2_vector: Figure,
    /// L1 -> L0A/L0B (MTE1) bytes per cycle.
    pub mte1: Figure,
    /// L0C -> UB/L1 (FIX) bytes per cycle.
    pub fix: Figure,
    /// UB -> L1 bytes per cycle.
    pub ub_to_l1: Figure,
    /// UB -> GM (MTE3) bytes per cycle.
    pub mte3: Figure,
    /// Cube MACs per cycle for fp16/bf16 (one 16x16x16 fractal step).
    pub cube_macs_fp16: Figure,
    /// Cube MACs per cycle for int8/fp8 (16x32x16).
    pub cube_macs_int8: Figure,
    /// Cube MACs per cycle for fp32 (a quarter of fp16).
    pub cube_macs_fp32: Figure,
    /// Fixed cycles per matmul instruction.
    pub matmul_fixed_cycles: Figure,
    /// Bytes one vector repeat covers per cycle.
    pub vector_bytes_per_cycle: Figure,
    /// Cycles per repeat of exp-class ops (exp: per 64 elements, a repeat of f32, whatever the
    /// dtype).
    pub vector_exp_cycles_per_repeat: Figure,
    /// Cycles per 256-byte repeat of the source of a row max or min (TROWMAX / TROWMIN): a
    /// per-row chain on one execution unit.
    pub vector_row_max_cycles_per_repeat: Figure,
    /// Cycles per 256-byte repeat of the source of a row sum (TROWSUM).
    pub vector_row_sum_cycles_per_repeat: Figure,
    /// Cycles per 256-byte repeat of each row of a two-source op whose destination rows are
    /// apart (fewer valid columns than columns: PTO's 2-D vector loop).
    pub vector_binary_2d_cycles_per_repeat: Figure,
    /// Cycles per row of that 2-D loop.
    pub vector_binary_2d_row_cycles: Figure,
    /// Cycles per 256-byte repeat of the source of a column reduction (TCOLSUM / TCOLMAX /
    /// TCOLMIN): element-wise ops between rows, two per cycle.
    pub vector_col_reduce_cycles_per_repeat: Figure,
    /// Issue overhead per vector instruction, cycles.
    pub vector_issue_cycles: Figure,
    /// GM access latency per DMA, cycles.
    pub dma_latency_cycles: Figure,
    /// Transfer size at which a DMA reaches half of peak bandwidth, bytes.
    pub dma_half_peak_bytes: Figure,
    /// Whether DMAs queued on one MTE2 overlap their latency (1 = yes, 0 = serial).
    pub dma_latency_overlaps: Figure,
    /// A scalar GM read through the data cache, cycles.
    pub scalar_gm_read_cycles: Figure,
    /// A scalar read of one UB (Vec tile) element, cycles: the scalar unit reaches UB directly,
    /// without the data cache (no public figure gives its latency: an assumption).
    pub scalar_ub_read_cycles: Figure,
    /// TSORT32's head, cycles (once per instruction).
    pub sort32_head_cycles: Figure,
    /// TSORT32's cycles per sorted 32-element block (VBS32 repeat).
    pub sort32_cycles_per_block: Figure,
    /// TMRGSORT's head, cycles (once per instruction).
    pub mrgsort_head_cycles: Figure,
    /// TMRGSORT's cycles per 128 merged pairs (one `vmrgsort4` repeat of four 32-pair f32
    /// blocks, the form it was measured in).
    pub mrgsort_cycles_per_128_pairs: Figure,
    /// L2 capacity in bytes (the L2 model, off by default: [`crate::arch::Arch::l2`]).
    pub l2_bytes: Figure,
    /// L2 line, bytes: a DMA read hits per line already in L2.
    pub l2_line_bytes: Figure,
    /// Latency of a DMA whose every line hits L2, cycles (in place of `dma_latency_cycles`).
    pub l2_hit_latency_cycles: Figure,
    /// L2 read bandwidth per core, bytes per cycle.
    pub l2_read_bytes_per_cycle: Figure,
}

impl Rates {
    /// These rates with the DMA latency scaled by `factor`: the latency has no public source,
    /// so every headline estimate is also shown at half and at double it
    /// (`sim::cost::report_with_sensitivity`).
    pub fn with_dma_latency_scaled(&self, factor: f64) -> Rates {
        let mut r = self.clone();
        r.dma_latency_cycles.value *= factor;
        r
    }

    /// These rates with the four sort figures (TSORT32's and TMRGSORT's heads and per-block
    /// cycles) scaled by `factor`: no A5 source times the sort instructions (A2/A3-derived
    /// assumptions), so estimates of sorting kernels are also shown at half and at double them
    /// (`sim::cost::report_with_sensitivity`).
    pub fn with_sort_costs_scaled(&self, factor: f64) -> Rates {
        let mut r = self.clone();
        for f in [
            &mut r.sort32_head_cycles,
            &mut r.sort32_cycles_per_block,
            &mut r.mrgsort_head_cycles,
            &mut r.mrgsort_cycles_per_128_pairs,
        ] {
            f.value *= factor;
        }
        r
    }

    /// Every figure with its field name, in declaration order (the frozen table, the docs'
    /// sources table and the sensitivity runs iterate over it).
    pub fn figures(&self) -> Vec<(&'static str, Figure)> {
        let Rates {
            clock_ghz,
            clusters,
            chip_gm_bytes_per_s,
            mte2_cube,
            mte2_vector,
            mte1,
            fix,
            ub_to_l1,
            mte3,
            cube_macs_fp16,
            cube_macs_int8,
            cube_macs_fp32,
            matmul_fixed_cycles,
            vector_bytes_per_cycle,
            vector_exp_cycles_per_repeat,
            vector_row_max_cycles_per_repeat,
            vector_row_sum_cycles_per_repeat,
            vector_binary_2d_cycles_per_repeat,
            vector_binary_2d_row_cycles,
            vector_col_reduce_cycles_per_repeat,
            vector_issue_cycles,
            dma_latency_cycles,
            dma_half_peak_bytes,
            dma_latency_overlaps,
            scalar_gm_read_cycles,
            scalar_ub_read_cycles,
            sort32_head_cycles,
            sort32_cycles_per_block,
            mrgsort_head_cycles,
            mrgsort_cycles_per_128_pairs,
            l2_bytes,
            l2_line_bytes,
            l2_hit_latency_cycles,
            l2_read_bytes_per_cycle,
        } = *self;
        vec![
            ("clock_ghz", clock_ghz),
            ("clusters", clusters),
            ("chip_gm_bytes_per_s", chip_gm_bytes_per_s),
            ("mte2_cube", mte2_cube),
            ("mte2_vector", mte2_vector),
            ("mte1", mte1),
            ("fix", fix),
            ("ub_to_l1", ub_to_l1),
            ("mte3", mte3),
            ("cube_macs_fp16", cube_macs_fp16),
            ("cube_macs_int8", cube_macs_int8),
            ("cube_macs_fp32", cube_macs_fp32),
            ("matmul_fixed_cycles", matmul_fixed_cycles),
            ("vector_bytes_per_cycle", vector_bytes_per_cycle),
            ("vector_exp_cycles_per_repeat", vector_exp_cycles_per_repeat),
            (
                "vector_row_max_cycles_per_repeat",
                vector_row_max_cycles_per_repeat,
            ),
            (
                "vector_row_sum_cycles_per_repeat",
                vector_row_sum_cycles_per_repeat,
            ),
            (
                "vector_binary_2d_cycles_per_repeat",
                vector_binary_2d_cycles_per_repeat,
            ),
            ("vector_binary_2d_row_cycles", vector_binary_2d_row_cycles),
            (
                "vector_col_reduce_cycles_per_repeat",
                vector_col_reduce_cycles_per_repeat,
            ),
            ("vector_issue_cycles", vector_issue_cycles),
            ("dma_latency_cycles", dma_latency_cycles),
            ("dma_half_peak_bytes", dma_half_peak_bytes),
            ("dma_latency_overlaps", dma_latency_overlaps),
            ("scalar_gm_read_cycles", scalar_gm_read_cycles),
            ("scalar_ub_read_cycles", scalar_ub_read_cycles),
            ("sort32_head_cycles", sort32_head_cycles),
            ("sort32_cycles_per_block", sort32_cycles_per_block),
            ("mrgsort_head_cycles", mrgsort_head_cycles),
            ("mrgsort_cycles_per_128_pairs", mrgsort_cycles_per_128_pairs),
            ("l2_bytes", l2_bytes),
            ("l2_line_bytes", l2_line_bytes),
            ("l2_hit_latency_cycles", l2_hit_latency_cycles),
            ("l2_read_bytes_per_cycle", l2_read_bytes_per_cycle),
        ]
    }
}
