//! The Ascend 950 cost figures are frozen (#32): calibrated against PTO-ISA's public A5 data
//! where it has any, tagged as assumptions where it has none, and then held here. A change to a
//! figure must change this table in the same commit, with its public source cited (file and
//! line) in the commit message and in `arch` (docs/simulator.md, "Cost figures").

use tile_backend::arch::{Arch, Basis, Sku};

/// `(figure, 950PR value, 950DT value)`, in `Rates::figures` order.
const FROZEN: &[(&str, f64, f64)] = &[
    ("clock_ghz", 1.65, 1.65),
    ("clusters", 32.0, 32.0),
    ("chip_gm_bytes_per_s", 1.6e12, 4.0e12),
    ("mte2_cube", 31.0, 70.0),
    ("mte2_vector", 16.0, 35.0),
    ("mte1", 256.0, 256.0),
    ("fix", 128.0, 128.0),
    ("ub_to_l1", 128.0, 128.0),
    ("mte3", 40.0, 40.0),
    ("cube_macs_fp16", 4096.0, 4096.0),
    ("cube_macs_int8", 8192.0, 8192.0),
    ("cube_macs_fp32", 1024.0, 1024.0),
    ("matmul_fixed_cycles", 6.0, 6.0),
    ("vector_bytes_per_cycle", 256.0, 256.0),
    ("vector_exp_cycles_per_repeat", 2.0, 2.0),
    ("vector_row_max_cycles_per_repeat", 3.5, 3.5),
    ("vector_row_sum_cycles_per_repeat", 4.0, 4.0),
    ("vector_binary_2d_cycles_per_repeat", 1.9, 1.9),
    ("vector_binary_2d_row_cycles", 3.0, 3.0),
    ("vector_col_reduce_cycles_per_repeat", 0.5, 0.5),
    ("vector_issue_cycles", 55.0, 55.0),
    ("dma_latency_cycles", 500.0, 500.0),
    ("dma_half_peak_bytes", 30.0 * 1024.0, 30.0 * 1024.0),
    ("dma_latency_overlaps", 1.0, 1.0),
    ("scalar_gm_read_cycles", 200.0, 200.0),
    ("scalar_ub_read_cycles", 20.0, 20.0),
    ("sort32_head_cycles", 6.0, 6.0),
    ("sort32_cycles_per_block", 2.0, 2.0),
    ("mrgsort_head_cycles", 20.0, 20.0),
    ("mrgsort_cycles_per_128_pairs", 78.0, 78.0),
    ("l2_bytes", 134217728.0, 134217728.0),
    ("l2_line_bytes", 512.0, 512.0),
    ("l2_hit_latency_cycles", 50.0, 50.0),
    ("l2_read_bytes_per_cycle", 256.0, 256.0),
];

#[test]
fn every_950_cost_figure_is_the_frozen_one() {
    for (sku, col) in [(Sku::Ascend950PR, 1), (Sku::Ascend950DT, 2)] {
        let figures = Arch::ascend950_sku(sku).rates.figures();
        let names: Vec<&str> = figures.iter().map(|(n, _)| *n).collect();
        let frozen: Vec<&str> = FROZEN.iter().map(|r| r.0).collect();
        assert_eq!(names, frozen, "{sku:?}: the figures and the frozen table");
        for ((name, fig), row) in figures.iter().zip(FROZEN) {
            let want = if col == 1 { row.1 } else { row.2 };
            assert_eq!(fig.value, want, "{sku:?} {name}: frozen at {want}");
        }
    }
}

/// docs/simulator.md's "Cost figures" table has a row per figure whose basis word is the
/// machine model's tag ("assumption" for `Basis::Assumption`, "documented" otherwise) and a
/// non-empty source.
#[test]
fn every_figure_has_a_docs_row_with_its_source_or_assumption() {
    let doc = include_str!("../../docs/simulator.md");
    let table = doc
        .split("### Cost figures")
        .nth(1)
        .and_then(|t| t.split("\n## ").next())
        .expect("docs/simulator.md has the Cost figures section");
    for (name, fig) in Arch::ascend950().rates.figures() {
        let row = table
            .lines()
            .find(|l| l.starts_with(&format!("| `{name}` |")))
            .unwrap_or_else(|| panic!("no docs row for {name}"));
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let want = match fig.basis {
            Basis::Assumption => "assumption",
            Basis::Documented => "documented",
            Basis::A2A3Derived => "A2/A3-derived",
        };
        assert_eq!(cells.get(4).copied(), Some(want), "{name}: {row}");
        assert!(
            cells.get(5).is_some_and(|c| c.len() > 10),
            "{name}: no source"
        );
    }
}
