//! Registry descriptions of tile-backend's example kernels (`tile_backend::kernels`), so that
//! `tileops emit --op` serves them like the ops.

use super::{CheckPath, Checked, Launch, OpShape, Param, ParamValue};
use crate::limits::{MAX_DIM, MAX_WIDTH};
use crate::OpError;
use tile_backend::kernels::{AttentionParams, GatherMatmulParams, MatmulParams};

/// Refuses a size outside `1..=max` before a builder computes with it (the builders multiply
/// sizes and tile counts in u64): `sizes` are `(parameter, value, max)`, `max` being
/// [`MAX_DIM`] for counts and [`MAX_WIDTH`] for static tile dimensions.
fn check_sizes(op: &'static str, sizes: &[(&'static str, u64, usize)]) -> Result<(), OpError> {
    for &(arg, value, max) in sizes {
        if value == 0 || value > max as u64 {
            return Err(OpError::invalid(
                op,
                arg,
                format!("{value} is outside 1..={max}"),
            ));
        }
    }
    Ok(())
}

crate::op_shape! {
    MatmulParams = "matmul",
    "tiled double-buffered C = A B (tile_backend::kernels::matmul), one output tile per block";
    check(p, _path) = check_sizes("matmul", &[
        ("m", p.m, MAX_DIM), ("k", p.k, MAX_DIM), ("n", p.n, MAX_DIM),
        ("tile_m", p.tile_m, MAX_WIDTH), ("tile_n", p.tile_n, MAX_WIDTH),
        ("tile_k", p.tile_k, MAX_WIDTH),
    ]);
    plan(p) = vec![Launch::new(tile_backend::kernels::matmul(p), p.block_dim())];
    m: "rows of A and C",
    k: "columns of A, rows of B",
    n: "columns of B and C",
    tile_m: "rows of an output tile",
    tile_n: "columns of an output tile",
    tile_k: "depth of a K slice",
    dtype: "operand dtype: f16, bf16, f32, i8",
}

crate::op_shape! {
    AttentionParams = "attention",
    "one-tile flash-attention core, Q K^T -> softmax -> P V the 950 way (kernels::attention_tile)";
    check(p, _path) = check_sizes("attention", &[
        ("ts", p.ts, MAX_WIDTH), ("tkv", p.tkv, MAX_WIDTH), ("d", p.d, MAX_WIDTH),
        ("batch", p.batch, MAX_DIM),
    ]);
    plan(p) = vec![Launch::new(tile_backend::kernels::attention_tile(p), p.block_dim())];
    ts: "queries per tile (multiple of 32)",
    tkv: "keys per tile (multiple of 16)",
    d: "head dimension (multiple of 16)",
    dtype: "f16 or bf16",
    batch: "independent tiles, one per block",
    handoff: "channels or cross-flags",
}

/// The `gather-matmul` example: a preset the other parameters start from, then the parameters.
#[derive(Debug, Clone, Copy, Default)]
pub struct GatherMatmulShape {
    /// The preset's name (`default`, `int8`, `upstream-small`, `upstream-int8`).
    pub preset: &'static str,
    /// The kernel's parameters.
    pub params: GatherMatmulParams,
}

const PRESETS: [&str; 4] = ["default", "int8", "upstream-small", "upstream-int8"];

impl OpShape for GatherMatmulShape {
    const NAME: &'static str = "gather-matmul";
    const ABOUT: &'static str =
        "S = Q K^T with K rows gathered from a paged cache into L1 (kernels::gather_matmul)";
    const PARAMS: &'static [Param] = &[
        Param {
            name: "preset",
            about: "start from default, int8, upstream-small or upstream-int8",
        },
        Param {
            name: "m",
            about: "query rows",
        },
        Param {
            name: "size",
            about: "columns gathered per row (the contraction)",
        },
        Param {
            name: "cols",
            about: "columns of a cache row",
        },
        Param {
            name: "tokens",
            about: "rows of the paged cache",
        },
        Param {
            name: "block_size",
            about: "tokens per cache block",
        },
        Param {
            name: "table_len",
            about: "entries of the block table",
        },
        Param {
            name: "n",
            about: "rows gathered (top-k)",
        },
        Param {
            name: "tile_n",
            about: "rows gathered per tile",
        },
        Param {
            name: "dtype",
            about: "f16, bf16, f32 or i8",
        },
    ];

    fn set(&mut self, name: &str, value: &str) -> Result<(), String> {
        let p = &mut self.params;
        match name {
            "preset" => {
                let Some(&preset) = PRESETS.iter().find(|&&n| n == value) else {
                    return Err(format!("expected one of {}", PRESETS.join(", ")));
                };
                self.preset = preset;
                *p = match preset {
                    "int8" => GatherMatmulParams::int8(),
                    "upstream-small" => GatherMatmulParams::upstream_small(),
                    "upstream-int8" => GatherMatmulParams::upstream_int8(),
                    _ => GatherMatmulParams::default(),
                };
            }
            "m" => p.m = u64::parse_param(value)?,
            "size" => p.size = u64::parse_param(value)?,
            "cols" => p.cols = u64::parse_param(value)?,
            "tokens" => p.tokens = u64::parse_param(value)?,
            "block_size" => p.block_size = u64::parse_param(value)?,
            "table_len" => p.table_len = u64::parse_param(value)?,
            "n" => p.n = u64::parse_param(value)?,
            "tile_n" => p.tile_n = u64::parse_param(value)?,
            "dtype" => p.dtype = ParamValue::parse_param(value)?,
            _ => return Err(format!("no parameter `{name}`")),
        }
        Ok(())
    }

    fn get(&self, name: &str) -> Option<String> {
        let p = &self.params;
        Some(match name {
            "preset" => (if self.preset.is_empty() {
                PRESETS[0]
            } else {
                self.preset
            })
            .to_string(),
            "m" => p.m.show_param(),
            "size" => p.size.show_param(),
            "cols" => p.cols.show_param(),
            "tokens" => p.tokens.show_param(),
            "block_size" => p.block_size.show_param(),
            "table_len" => p.table_len.show_param(),
            "n" => p.n.show_param(),
            "tile_n" => p.tile_n.show_param(),
            "dtype" => p.dtype.show_param(),
            _ => return None,
        })
    }

    fn check(&self, _: CheckPath) -> Result<(), OpError> {
        let p = &self.params;
        check_sizes(
            Self::NAME,
            &[
                ("m", p.m, MAX_WIDTH),
                ("size", p.size, MAX_WIDTH),
                ("cols", p.cols, MAX_WIDTH),
                ("tokens", p.tokens, MAX_DIM),
                ("block_size", p.block_size, MAX_DIM),
                ("table_len", p.table_len, MAX_DIM),
                ("n", p.n, MAX_DIM),
                ("tile_n", p.tile_n, MAX_WIDTH),
            ],
        )
    }

    fn plan(shape: &Checked<Self>) -> Vec<Launch> {
        vec![Launch::new(
            tile_backend::kernels::gather_matmul(&shape.params),
            shape.params.block_dim(),
        )]
    }
}

/// The `worked-matmul` example: the single-tile matmul of docs/tile-ir.md, no parameters.
#[derive(Debug, Clone, Copy, Default)]
pub struct WorkedMatmul;

impl OpShape for WorkedMatmul {
    const NAME: &'static str = "worked-matmul";
    const ABOUT: &'static str =
        "the single-tile matmul of docs/tile-ir.md (kernels::worked_matmul)";
    const PARAMS: &'static [Param] = &[];
    fn set(&mut self, name: &str, _: &str) -> Result<(), String> {
        Err(format!("no parameter `{name}`"))
    }
    fn get(&self, _: &str) -> Option<String> {
        None
    }
    fn check(&self, _: CheckPath) -> Result<(), OpError> {
        Ok(())
    }
    fn plan(_: &Checked<Self>) -> Vec<Launch> {
        vec![Launch::new(tile_backend::kernels::worked_matmul(), 1)]
    }
}
