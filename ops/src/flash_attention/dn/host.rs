//! The host side of `flash_dn`: a call's launch plan ([`FlashPlan`]: each (sequence, head)
//! problem cut into query tiles, one descriptor row per block), and [`run_flash`], which
//! launches it and fixes the lse of queries that see no key.

use super::cfg::{Desc, FlashCfg, DESC_COUNT};
use super::flash_dn;
use crate::error::OpError;
use crate::registry::Launch;
use crate::runtime::{compiled, Runner};
use tile_backend::ir::DType;
use tile_backend::launch::{Arg, GmInput, GmTensor};

/// One (sequence, head) attention problem of a call, in element offsets of the call's
/// tensors (row strides are the call's [`FlashPlan::strides`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FlashProblem {
    /// Offset of query 0's row in `q`.
    pub q_off: usize,
    /// Offset of key 0's row in `k`.
    pub k_off: usize,
    /// Offset of value 0's row in `v`.
    pub v_off: usize,
    /// Offset of query 0's output row in `out`.
    pub o_off: usize,
    /// Offset of query 0's lse (the problem's lse entries are consecutive).
    pub lse_off: usize,
    /// Queries.
    pub sq: usize,
    /// Keys.
    pub skv: usize,
}

/// Elements of each tensor of a flash launch (the kernel's `*_len` arguments).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FlashLens {
    /// Elements of q.
    pub q: usize,
    /// Elements of k.
    pub k: usize,
    /// Elements of v (0 for the `write_p` variant).
    pub v: usize,
    /// Elements of out.
    pub o: usize,
    /// Entries of lse.
    pub lse: usize,
}

/// The launch plan of one flash call, made by its op's `plan` (`flash_attention::kernel::plan`,
/// `qk_plan`): the kernel's static shape, the call's (sequence, head) problems, which give the
/// grid (one descriptor row per query tile that sees a key, [`FlashPlan::descriptors`], run
/// by at most one block per cluster), and the
/// tensors' lengths and row strides. The host ([`run_flash`]) and `tileops emit`
/// ([`FlashPlan::launch`]) both launch from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FlashPlan {
    /// The kernel's static shape.
    pub cfg: FlashCfg,
    /// The problems, in element offsets of the call's flat tensors.
    pub problems: Vec<FlashProblem>,
    /// Bottom-right causal mask.
    pub causal: bool,
    /// Row strides (elements) of q, k, v and out.
    pub strides: [usize; 4],
    /// The tensors' lengths.
    pub lens: FlashLens,
}

impl FlashPlan {
    /// The descriptor table: one row per block ([`descriptors`]).
    pub(crate) fn descriptors(&self) -> Vec<i64> {
        descriptors(&self.problems, &self.cfg, self.causal, self.strides)
    }

    /// The kernel's integer scalar arguments for `blocks` blocks, by parameter name.
    fn ints(&self, blocks: usize) -> [(&'static str, usize); 10] {
        let l = self.lens;
        let [q_rs, k_rs, v_rs, o_rs] = self.strides;
        [
            ("blocks", blocks),
            ("q_len", l.q),
            ("k_len", l.k),
            ("v_len", l.v),
            ("o_len", l.o),
            ("lse_len", l.lse),
            ("q_rs", q_rs),
            ("k_rs", k_rs),
            ("v_rs", v_rs),
            ("o_rs", o_rs),
        ]
    }

    /// The plan's launch as `tileops emit` writes it: the kernel on one block per descriptor
    /// row, with the scalars the shape fixes (the `write_p` variant has no V, so no `v_len` and
    /// `v_rs`).
    pub(crate) fn launch(&self) -> Launch {
        let blocks = self.descriptors().len() / DESC_COUNT;
        let no_v = |n: &str| !(self.cfg.write_p && n.starts_with("v_"));
        Launch {
            kernel: flash_dn(&self.cfg),
            block_dim: blocks as u64,
            scalars: self
                .ints(blocks)
                .into_iter()
                .filter(|(n, _)| no_v(n))
                .map(|(n, v)| (n, v as i64))
                .collect(),
        }
    }
}

/// The tensors of one flash call, flat, in the dtype of its plan (checked by the op against
/// the call).
pub(crate) struct FlashInputs<'a> {
    /// Queries.
    pub q: GmInput<'a>,
    /// Keys.
    pub k: GmInput<'a>,
    /// Values (none for the `write_p` variant).
    pub v: Option<GmInput<'a>>,
    /// Softmax scale.
    pub scale: f32,
}

/// A diagonal past every key (no causal mask).
const NO_MASK: i64 = i32::MAX as i64 / 2;

/// The descriptor rows of `problems` for `cfg`'s query tiles, the tiles visiting the most keys
/// first (a stable sort: a causal call's long tiles start together and the short ones fill the
/// last waves, instead of every wave of 32 blocks waiting for its one long tile); tiles whose
/// queries see no key are left out (their output stays 0 and their lse +inf).
pub(crate) fn descriptors(
    problems: &[FlashProblem],
    cfg: &FlashCfg,
    causal: bool,
    strides: [usize; 4],
) -> Vec<i64> {
    let [q_rs, _, _, o_rs] = strides;
    let ts = cfg.ts as usize;
    // Consecutive queries are rows of O, or columns of P^T.
    let o_step = if cfg.write_p { 1 } else { o_rs };
    let mut rows: Vec<[i64; DESC_COUNT]> = Vec::new();
    for p in problems {
        for i0 in (0..p.sq).step_by(ts.max(1)) {
            let nq = ts.min(p.sq - i0);
            let shift = p.skv as i64 - p.sq as i64;
            let (kv_end, diag) = if causal {
                let last = i0 as i64 + nq as i64 - 1 + shift;
                ((last + 1).clamp(0, p.skv as i64), i0 as i64 + shift)
            } else {
                (p.skv as i64, NO_MASK)
            };
            if kv_end == 0 {
                continue;
            }
            rows.push([
                (p.q_off + i0 * q_rs) as i64,
                p.k_off as i64,
                p.v_off as i64,
                (p.o_off + i0 * o_step) as i64,
                (p.lse_off + i0) as i64,
                nq as i64,
                kv_end,
                diag,
            ]);
        }
    }
    rows.sort_by_key(|r| std::cmp::Reverse(r[Desc::KvEnd as usize]));
    rows.concat()
}

/// Runs `plan`'s kernel over every problem: returns `out [lens.o]` (data dtype) and
/// `lse [lens.lse]` f32, with out 0 and lse +inf for every query that sees no key.
pub(crate) fn run_flash(
    runner: &mut Runner,
    op: &'static str,
    plan: &FlashPlan,
    inp: FlashInputs<'_>,
) -> Result<(GmTensor, GmTensor), OpError> {
    let cfg = &plan.cfg;
    let desc = plan.descriptors();
    let blocks = desc.len() / DESC_COUNT;
    let mut out = GmTensor::zeros(cfg.dtype, &[plan.lens.o]);
    let mut lse = GmTensor::from_f32(
        DType::F32,
        &[plan.lens.lse],
        &vec![f32::INFINITY; plan.lens.lse],
    );
    if blocks > 0 {
        let kernel = compiled(op, cfg.key(), || flash_dn(cfg))?;
        let h = cfg.h() as usize;
        let mut named: Vec<(&str, Arg<'_>)> = plan
            .ints(blocks)
            .into_iter()
            .map(|(n, v)| (n, Arg::Int(v as i64)))
            .collect();
        named.extend([
            ("scale", Arg::Float(f64::from(inp.scale))),
            ("q", Arg::Input(flat(inp.q))),
            ("k", Arg::Input(flat(inp.k))),
            (
                "desc",
                Arg::Tensor(GmTensor::from_i64(DType::I32, &[blocks, DESC_COUNT], &desc)),
            ),
            (
                "mask",
                Arg::Tensor(GmTensor::from_f32(
                    DType::F32,
                    &[2 * cfg.mask_rows() as usize, h],
                    &cfg.mask_band(),
                )),
            ),
            ("out", Arg::Tensor(out)),
            ("lse", Arg::Tensor(lse)),
        ]);
        if let Some(v) = inp.v {
            named.push(("v", Arg::Input(flat(v))));
        }
        // At most one block per cluster: the kernel loops over the rows (`for_each_row`).
        let launch = blocks.min(crate::runtime::arch().rates.clusters.value as usize);
        let mut args = runner.launch_named(kernel, launch.max(1), named)?;
        out = runner.take(kernel, &mut args, "out")?;
        lse = runner.take(kernel, &mut args, "lse")?;
    }
    if plan.causal {
        // Queries before the diagonal's start see no key: the kernel wrote lse ~ -1e30.
        for p in &plan.problems {
            let blind = p.sq.saturating_sub(p.skv).min(p.sq);
            for i in 0..blind {
                let at = (p.lse_off + i) * 4;
                if let Some(x) = lse.data.get_mut(at..at + 4) {
                    x.copy_from_slice(&f32::INFINITY.to_le_bytes());
                }
            }
        }
    }
    Ok((out, lse))
}

/// `t` as a flat tensor (the kernel views it through offsets and row strides).
fn flat(mut t: GmInput<'_>) -> GmInput<'_> {
    t.shape = vec![t.shape.iter().product()];
    t
}

#[cfg(test)]
mod tests {
    use super::super::cfg::FlashSpec;
    use super::*;

    fn spec(dtype: DType, (d, dv): (u64, u64), max_sq: u64, max_skv: u64) -> FlashSpec {
        FlashSpec {
            name: "t",
            dtype,
            d,
            dv,
            max_sq,
            max_skv,
            write_p: false,
            device: false,
            causal: false,
        }
    }

    fn problem(sq: usize, skv: usize) -> FlashProblem {
        FlashProblem {
            q_off: 0,
            k_off: 0,
            v_off: 0,
            o_off: 0,
            lse_off: 0,
            sq,
            skv,
        }
    }

    /// `(nq, kv_end, diag)` of each descriptor row.
    fn tiles(sq: usize, skv: usize, causal: bool) -> Vec<(i64, i64, i64)> {
        let cfg = FlashCfg::new(spec(DType::BF16, (64, 64), 128, 512));
        assert_eq!(cfg.ts, 128);
        descriptors(&[problem(sq, skv)], &cfg, causal, [64, 64, 64, 64])
            .chunks(DESC_COUNT)
            .map(|r| {
                (
                    r[Desc::Nq as usize],
                    r[Desc::KvEnd as usize],
                    r[Desc::Diag as usize],
                )
            })
            .collect()
    }

    #[test]
    fn causal_tiles_visit_keys_up_to_their_last_query_longest_first_and_blind_tiles_are_dropped() {
        // The square: query tile t sees keys up to its last query.
        // The most keys first.
        assert_eq!(
            tiles(512, 512, true),
            vec![
                (128, 512, 384),
                (128, 384, 256),
                (128, 256, 128),
                (128, 128, 0)
            ]
        );
        // Sq > Skv: queries 0..200 see nothing; tile 0 is not launched, tile 2 is a tail.
        assert_eq!(tiles(300, 100, true), vec![(44, 100, 56), (128, 56, -72)]);
        // Not causal: every key, no diagonal.
        assert_eq!(
            tiles(300, 100, false),
            vec![(128, 100, NO_MASK), (128, 100, NO_MASK), (44, 100, NO_MASK)]
        );
        // No key at all: nothing to launch.
        assert!(tiles(5, 0, false).is_empty());
    }

    #[test]
    fn tiles_shrink_to_short_calls() {
        let cfg = |sq, skv| FlashCfg::new(spec(DType::F32, (128, 64), sq, skv));
        // KV tiles: the power of two from 16 that holds the longest key run, at most 128.
        for (skv, tkv) in [
            (1, 16),
            (16, 16),
            (17, 32),
            (30, 32),
            (100, 128),
            (5000, 128),
        ] {
            assert_eq!(cfg(30, skv).tkv, tkv, "skv {skv}");
        }
        // Query tiles: 16 on one vector core up to 16 queries, else rounded up to 32.
        for (sq, ts, single) in [
            (1, 16, true),
            (16, 16, true),
            (17, 32, false),
            (100, 128, false),
        ] {
            let c = cfg(sq, 512);
            assert_eq!(
                (c.ts, c.single, c.h()),
                (ts, single, if single { 16 } else { ts / 2 })
            );
        }
    }

    #[test]
    fn the_device_plan_is_wide_without_the_causal_mask_where_it_fits() {
        let cfg = |dtype, (d, dv), sq, device, causal| {
            FlashCfg::new(FlashSpec {
                device,
                causal,
                ..spec(dtype, (d, dv), sq, 2048)
            })
        };
        // The bench shape without the mask, on the device: 256-query tiles, one score buffer.
        let wide = cfg(DType::BF16, (128, 128), 2048, true, false);
        assert!(wide.wide);
        assert_eq!(
            (
                wide.ts,
                wide.tkv,
                wide.s_bufs,
                wide.ks,
                wide.ns,
                wide.s_accs()
            ),
            (256, 128, 1, 32, 64, 1)
        );
        assert_eq!(wide.pt_keys(), 64);
        // MLA prefill's head dims fit too; a 300-query problem rounds to 256.
        assert!(cfg(DType::F16, (192, 128), 300, true, false).wide);
        // Not wide: the CPU plan, a causal call, f32 data, 128 queries or fewer, D 256.
        for (dtype, dims, sq, device, causal) in [
            (DType::BF16, (128, 128), 2048, false, false),
            (DType::BF16, (128, 128), 2048, true, true),
            (DType::F32, (128, 128), 2048, true, false),
            (DType::BF16, (128, 128), 128, true, false),
            (DType::BF16, (256, 256), 2048, true, false),
        ] {
            let c = cfg(dtype, dims, sq, device, causal);
            assert!(
                !c.wide,
                "{dtype:?} {dims:?} sq {sq} device {device} causal {causal}"
            );
            assert!(c.ts <= 128);
        }
    }

    #[test]
    fn the_mask_band_is_a_staircase() {
        let cfg = FlashCfg::new(spec(DType::F16, (64, 64), 32, 512));
        let h = cfg.h() as usize;
        let band = cfg.mask_band();
        let rows = cfg.mask_rows() as usize;
        assert_eq!(band.len(), 2 * rows * h);
        for (y, row) in band.chunks(h).enumerate() {
            let (x, sign) = if y < rows { (y, 1.0) } else { (y - rows, -1.0) };
            for (c, &m) in row.iter().enumerate() {
                let open = (x as i64 - c as i64) < cfg.tkv as i64;
                let want = sign
                    * if open {
                        f32::INFINITY
                    } else {
                        f32::NEG_INFINITY
                    };
                assert_eq!(m, want, "({y}, {c})");
            }
        }
    }
}
