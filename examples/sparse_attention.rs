//! One DeepSeek-V3.2 sparse-attention decode step at real shapes, on the Reference backend
//! (candle) and on the tile kernels in the Ascend 950 simulator (TileSim).
//!
//! B = 4 sequences of 8192 cached tokens, H = 128 heads, Dqk = 576 (latent 512 + rope 64),
//! v_dim = 512, top-k 2048, block 64, scale 0.13523, bf16 by default. Inputs are deterministic
//! (seeded PRNG): a paged latent cache with shuffled block tables and top-k indices drawn
//! without replacement. The report gives the largest difference of `out` and `lse` between the
//! two backends, the CPU wall time of each (median of a few runs after a warm-up, the two
//! backends alternating so both see the same machine load), and the simulator's estimate for
//! the Ascend 950: device time, per-pipe utilisation and the fraction of the roofline reached.
//!
//! ```text
//! cargo run --release --example sparse_attention [-- --dtype f32|f16|bf16 --runs N --seq-len T]
//! ```
//! (`TILEOPS_DTYPE` sets the dtype too.)

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor};
use std::time::Instant;
use tileops::ops::{profile, sparse_paged_attention, Backend, SparseAttentionParams};

mod common;
use common::{
    max_abs_diff, parse_dtype, parse_flags, print_dma_sensitivity, print_launches, timed_pair,
    Flags,
};

const BATCH: usize = 4;
const HEADS: usize = 128;
const DQK: usize = 576;
const V_DIM: usize = 512;
const TOPK: usize = 2048;
const BLOCK: usize = 64;
const SCALE: f32 = 0.13523;

/// Command-line settings.
struct Settings {
    dtype: DType,
    runs: usize,
    seq_len: usize,
    seed: u64,
}

fn settings() -> Result<Settings> {
    let defaults = Flags {
        dtype: match std::env::var("TILEOPS_DTYPE") {
            Ok(v) => parse_dtype(&v).context("TILEOPS_DTYPE")?,
            Err(_) => DType::BF16,
        },
        runs: 3,
        seed: 0x5eed,
    };
    let (f, seq_len) = parse_flags("sparse_attention", defaults, ("--seq-len", 8192))?;
    if seq_len < TOPK {
        bail!("--seq-len must be at least the top-k width {TOPK}");
    }
    Ok(Settings {
        dtype: f.dtype,
        runs: f.runs,
        seq_len,
        seed: f.seed,
    })
}

/// A small deterministic PRNG (splitmix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n`.
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    /// Uniform in `[-1, 1)`.
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i + 1);
            v.swap(i, j);
        }
    }
}

/// The decode step's inputs.
struct Inputs {
    q: Tensor,
    kv: Tensor,
    indices: Tensor,
    table: Tensor,
}

fn inputs(s: &Settings) -> Result<Inputs> {
    let dev = Device::Cpu;
    let mut rng = Rng(s.seed);
    let blocks_per_seq = s.seq_len.div_ceil(BLOCK);
    let num_blocks = BATCH * blocks_per_seq;
    // Every sequence owns `blocks_per_seq` blocks scattered over the cache.
    let mut pool: Vec<i32> = (0..num_blocks as i32).collect();
    rng.shuffle(&mut pool);
    // Top-k positions without replacement among the sequence's tokens (partial Fisher-Yates).
    let mut indices = Vec::with_capacity(BATCH * TOPK);
    for _ in 0..BATCH {
        let mut tokens: Vec<i32> = (0..s.seq_len as i32).collect();
        for i in 0..TOPK {
            let j = i + rng.below(s.seq_len - i);
            tokens.swap(i, j);
        }
        indices.extend_from_slice(&tokens[..TOPK]);
    }
    let q: Vec<f32> = (0..BATCH * HEADS * DQK).map(|_| rng.unit()).collect();
    let kv: Vec<f32> = (0..num_blocks * BLOCK * DQK).map(|_| rng.unit()).collect();
    Ok(Inputs {
        q: Tensor::from_vec(q, (BATCH, HEADS, DQK), &dev)?.to_dtype(s.dtype)?,
        kv: Tensor::from_vec(kv, (num_blocks, BLOCK, DQK), &dev)?.to_dtype(s.dtype)?,
        indices: Tensor::from_vec(indices, (BATCH, TOPK), &dev)?,
        table: Tensor::from_vec(pool, (BATCH, blocks_per_seq), &dev)?,
    })
}

fn step(x: &Inputs, backend: Backend) -> Result<(Tensor, Tensor)> {
    let params = SparseAttentionParams {
        v_dim: V_DIM,
        scale: SCALE,
        topk_length: None,
        sink: None,
        batch_invariant: false,
    };
    Ok(sparse_paged_attention(
        &x.q,
        &x.kv,
        &x.indices,
        &x.table,
        &params,
        Some(backend),
    )?)
}

fn main() -> Result<()> {
    let s = settings()?;
    println!(
        "DeepSeek-V3.2 sparse attention decode: B={BATCH} H={HEADS} Dqk={DQK} v_dim={V_DIM} \
         top-k={TOPK} block={BLOCK} scale={SCALE} dtype={:?}, {} cached tokens per sequence",
        s.dtype, s.seq_len
    );
    let t = Instant::now();
    let x = inputs(&s)?;
    println!(
        "inputs: q {:?}, cache {:?} ({:.1} MB), indices {:?}, block table {:?}  [{:.2?}]",
        x.q.dims(),
        x.kv.dims(),
        (x.kv.elem_count() * s.dtype.size_in_bytes()) as f64 / 1e6,
        x.indices.dims(),
        x.table.dims(),
        t.elapsed()
    );

    let timed = timed_pair(s.runs, |backend| step(&x, backend))?;
    let ((ref_out, ref_lse), (sim_out, sim_lse)) = (&timed.reference, &timed.sim);
    let (profiled, records) = profile(|| step(&x, Backend::TileSim));
    profiled.context("profiled TileSim run")?;

    println!();
    println!("accuracy (TileSim vs Reference)");
    println!(
        "  out  max |diff| {:.3e}   (max |out| {:.3e})",
        max_abs_diff(sim_out, ref_out)?,
        ref_out
            .to_dtype(DType::F32)?
            .abs()?
            .flatten_all()?
            .max(0)?
            .to_scalar::<f32>()?
    );
    println!("  lse  max |diff| {:.3e}", max_abs_diff(sim_lse, ref_lse)?);

    println!();
    timed.print();

    println!();
    let (total, _) = print_launches(&records);
    match total {
        Some(c) => {
            println!(
                "  estimated device time {:.2} us, roofline {:.2} us ({}-bound), {:.1}% of roofline",
                c.seconds * 1e6,
                c.roofline_seconds * 1e6,
                c.bound,
                c.roofline_fraction() * 100.0
            );
            println!("  pipe utilisation: {}", c.busy_summary());
            print_dma_sensitivity("  ", &c, c.roofline_seconds);
            println!();
            print!("{c}");
        }
        None => println!("  no cost report (no simulated launch)"),
    }
    Ok(())
}
