//! Untraced runs defer L1 -> L0A/L0B moves: the move marks the L0 bytes written, and a matmul
//! decodes the move's L1 source instead of the L0 copy (traced runs copy at once). The values a
//! matmul sees must be exactly those a copy made at the move would hold: a later write to the
//! L1 source, a second move landing on part of the L0 tile, or an operand region the pending
//! move does not cover must all give the copied bytes. Each case is checked against a plain-Rust
//! product and against the traced run, bit for bit.

#[path = "support/mod.rs"]
mod support;

use support::{simulate, simulate_traced};
use tile_backend::arch::Arch;
use tile_backend::dsl::{Body, KernelBuilder};
use tile_backend::ir::*;
use tile_backend::sim::io::Rng;
use tile_backend::sim::{self, Arg, GmTensor};

const M: u64 = 16;
const K: u64 = 32;
const N: u64 = 32;

fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng::new(seed);
    // Small integers times 1/8: every product and sum is exact in f32.
    (0..n).map(|_| rng.below(17) as f32 / 8.0 - 1.0).collect()
}

/// The tiles and GM views of a kernel computing one `M x N` product from two candidate A
/// matrices (`a`, `a2`) and two candidate B matrices (`b`, `b2`).
struct Parts {
    a2: ParamId,
    b2: ParamId,
    a1: TileId,
    b1: TileId,
    a0: TileId,
    b0: TileId,
    /// Half-depth operands: `[M, K/2]` and `[K/2, N]`.
    a0h: TileId,
    b0h: TileId,
    acc: TileId,
}

/// Builds a cube kernel: loads A and B into L1, then `body` (moves, overwrites, the matmul),
/// then stores the Acc tile to `c`.
fn kernel(body: impl Fn(&mut Body<'_>, &Parts)) -> Kernel {
    let dt = DType::F16;
    let mut kb = KernelBuilder::new("deferred");
    let a = kb.input("a", dt, [M, K]);
    let a2 = kb.input("a2", dt, [M, K]);
    let b = kb.input("b", dt, [K, N]);
    let b2 = kb.input("b2", dt, [K, N]);
    let c = kb.output("c", DType::F32, [M, N]);
    let a1 = kb.tile("a1", TileType::new(MemSpace::Mat, dt, M, K, Layout::NZ));
    let b1 = kb.tile("b1", TileType::new(MemSpace::Mat, dt, K, N, Layout::NZ));
    let a0 = kb.tile(
        "a0",
        TileType::new(MemSpace::Left, dt, M, K, Layout::NZ).dynamic(),
    );
    let b0 = kb.tile("b0", TileType::new(MemSpace::Right, dt, K, N, Layout::ZN));
    let a0h = kb.tile(
        "a0h",
        TileType::new(MemSpace::Left, dt, M, K / 2, Layout::NZ),
    );
    let b0h = kb.tile(
        "b0h",
        TileType::new(MemSpace::Right, dt, K / 2, N, Layout::ZN),
    );
    let acc = kb.tile(
        "acc",
        TileType::new(MemSpace::Acc, DType::F32, M, N, Layout::NZ),
    );
    let parts = Parts {
        a2,
        b2,
        a1,
        b1,
        a0,
        b0,
        a0h,
        b0h,
        acc,
    };
    kb.cube(|q| {
        q.load(a1, GmView::nd(a, 0, M, K, K));
        q.load(b1, GmView::nd(b, 0, K, N, N));
        q.set_validshape(a0, M, K);
        body(q, &parts);
        q.store(GmView::nd(c, 0, M, N, N), acc);
    });
    tile_backend::passes::memory::plan(&kb.build(), &Arch::ascend950()).expect("kernel fits")
}

/// The inputs the expected products use (as the f16 values the kernel sees) and the output.
struct Run {
    a: Vec<f32>,
    a2: Vec<f32>,
    b: Vec<f32>,
    c: Vec<f32>,
}

fn run(k: &Kernel, traced: bool) -> Run {
    let t = |r: u64, c: u64, seed| {
        GmTensor::from_f32(
            DType::F16,
            &[r as usize, c as usize],
            &values((r * c) as usize, seed),
        )
    };
    let (a, a2, b, b2) = (t(M, K, 1), t(M, K, 2), t(K, N, 3), t(K, N, 4));
    let inputs = [a.to_f32(), a2.to_f32(), b.to_f32()];
    let mut args = vec![
        Arg::Tensor(a),
        Arg::Tensor(a2),
        Arg::Tensor(b),
        Arg::Tensor(b2),
        Arg::Tensor(GmTensor::zeros(DType::F32, &[M as usize, N as usize])),
    ];
    let ran = if traced {
        simulate_traced(k, &mut args)
    } else {
        simulate(k, &mut args)
    };
    if let Err(e) = ran {
        panic!("the kernel failed (traced: {traced}): {e}");
    }
    let [a, a2, b] = inputs;
    Run {
        a,
        a2,
        b,
        c: args[4].tensor().map(|t| t.to_f32()).unwrap_or_default(),
    }
}

/// `a · b` for row-major `[M, K]` and `[K, N]`.
fn product(a: &[f32], b: &[f32]) -> Vec<f32> {
    let (m, k, n) = (M as usize, K as usize, N as usize);
    (0..m * n)
        .map(|e| (0..k).map(|p| a[e / n * k + p] * b[p * n + e % n]).sum())
        .collect()
}

/// Runs `k` untraced (moves deferred) and traced (moves copied): both must equal `want(run)`.
fn check(name: &str, k: &Kernel, want: impl Fn(&Run) -> Vec<f32>) {
    for traced in [false, true] {
        let r = run(k, traced);
        let w = want(&r);
        assert_eq!(r.c.len(), w.len(), "{name}");
        for (e, (g, x)) in r.c.iter().zip(&w).enumerate() {
            assert!(
                g.to_bits() == x.to_bits(),
                "{name} (traced: {traced}): c[{}, {}] = {g}, expected {x}",
                e / N as usize,
                e % N as usize
            );
        }
    }
}

#[test]
fn a_plain_move_then_matmul_reads_the_moved_values() {
    let k = kernel(|q, p| {
        q.mov(p.a0, p.a1);
        q.mov(p.b0, p.b1);
        q.matmul(p.acc, p.a0, p.b0);
    });
    check("plain", &k, |r| product(&r.a, &r.b));
}

#[test]
fn overwriting_the_l1_source_after_the_move_keeps_the_moved_values() {
    // A and B are moved, then their L1 tiles are loaded with other matrices: the matmul must
    // still multiply the values that were in L1 at the moves.
    let k = kernel(|q, p| {
        q.mov(p.a0, p.a1);
        q.mov(p.b0, p.b1);
        q.load(p.a1, GmView::nd(p.a2, 0, M, K, K));
        q.load(p.b1, GmView::nd(p.b2, 0, K, N, N));
        q.matmul(p.acc, p.a0, p.b0);
    });
    check("source overwritten", &k, |r| product(&r.a, &r.b));
}

#[test]
fn a_second_move_replacing_the_first_is_what_the_matmul_reads() {
    // Moves from A, then (after reloading L1 with A2) from A2 into the same L0 tile.
    let k = kernel(|q, p| {
        q.mov(p.a0, p.a1);
        q.load(p.a1, GmView::nd(p.a2, 0, M, K, K));
        q.mov(p.a0, p.a1);
        q.mov(p.b0, p.b1);
        q.matmul(p.acc, p.a0, p.b0);
    });
    check("second move", &k, |r| product(&r.a2, &r.b));
}

#[test]
fn a_second_move_onto_part_of_the_tile_leaves_the_rest_of_the_first() {
    // A is moved whole; L1 is reloaded with A2 and only its first 16 columns are moved (a0's
    // valid shape narrowed): columns 16.. of the operand must still be A's.
    let k = kernel(|q, p| {
        q.mov(p.a0, p.a1);
        q.load(p.a1, GmView::nd(p.a2, 0, M, K, K));
        q.set_validshape(p.a0, M, 16);
        q.mov(p.a0, p.a1);
        q.set_validshape(p.a0, M, K);
        q.mov(p.b0, p.b1);
        q.matmul(p.acc, p.a0, p.b0);
    });
    check("partial second move", &k, |r| {
        let k = K as usize;
        let mixed: Vec<f32> = (0..r.a.len())
            .map(|e| if e % k < 16 { r.a2[e] } else { r.a[e] })
            .collect();
        product(&mixed, &r.b)
    });
}

#[test]
fn a_move_with_an_offset_reads_the_offset_region() {
    // A is moved whole, then A's columns 16..32 are moved onto a0's first 16 columns (valid
    // shape narrowed, source offset); B's L1 tile is reloaded after its move.
    let k = kernel(|q, p| {
        q.mov(p.a0, p.a1);
        q.set_validshape(p.a0, M, 16);
        q.mov(p.a0, p.a1).offset(0, 16);
        q.set_validshape(p.a0, M, K);
        q.mov(p.b0, p.b1);
        q.load(p.b1, GmView::nd(p.b2, 0, K, N, N));
        q.matmul(p.acc, p.a0, p.b0);
    });
    check("offset move", &k, |r| {
        let k = K as usize;
        let shifted: Vec<f32> = (0..r.a.len())
            .map(|e| if e % k < 16 { r.a[e + 16] } else { r.a[e] })
            .collect();
        product(&shifted, &r.b)
    });
}

#[test]
fn a_whole_operand_moved_from_an_offset_reads_the_offset_region() {
    // The K-slice form of attention: half-depth L0 tiles filled from L1 at a K offset (the
    // matmul decodes L1 at that offset while the moves are pending).
    let k = kernel(|q, p| {
        q.mov(p.a0h, p.a1).offset(0, K / 2);
        q.mov(p.b0h, p.b1).offset(K / 2, 0);
        q.matmul(p.acc, p.a0h, p.b0h);
    });
    check("offset operands", &k, |r| {
        let (k, n, h) = (K as usize, N as usize, K as usize / 2);
        // Zero the first half of A's depth: the product is over depths h.. only.
        let a: Vec<f32> = (0..r.a.len())
            .map(|e| if e % k < h { 0.0 } else { r.a[e] })
            .collect();
        let b: Vec<f32> = (0..r.b.len())
            .map(|e| if e / n < h { 0.0 } else { r.b[e] })
            .collect();
        product(&a, &b)
    });
}

#[test]
fn a_source_region_inside_a_box_overwritten_while_its_move_is_pending_keeps_its_values() {
    // Half-depth operands moved from depth 8 (mid-box: f16 boxes are 16 wide), then both L1
    // tiles are reloaded: the pending moves' regions are kept aside (not in box alignment with
    // a compact tile of their own size) and the matmul must see the old values.
    let k = kernel(|q, p| {
        q.mov(p.a0h, p.a1).offset(0, 8);
        q.mov(p.b0h, p.b1).offset(8, 0);
        q.load(p.a1, GmView::nd(p.a2, 0, M, K, K));
        q.load(p.b1, GmView::nd(p.b2, 0, K, N, N));
        q.matmul(p.acc, p.a0h, p.b0h);
    });
    check("mid-box regions kept", &k, |r| {
        let (k, n) = (K as usize, N as usize);
        let depth = |d: usize| (8..8 + k / 2).contains(&d);
        let a: Vec<f32> = (0..r.a.len())
            .map(|e| if depth(e % k) { r.a[e] } else { 0.0 })
            .collect();
        let b: Vec<f32> = (0..r.b.len())
            .map(|e| if depth(e / n) { r.b[e] } else { 0.0 })
            .collect();
        product(&a, &b)
    });
}

#[test]
fn the_reference_kernels_give_the_same_bits_with_moves_deferred_and_copied() {
    use tile_backend::kernels::*;
    let arch = Arch::ascend950();
    let cases: Vec<(Kernel, u64)> = vec![
        (
            matmul(&MatmulParams::default()),
            MatmulParams::default().block_dim(),
        ),
        (
            attention_tile(&AttentionParams::default()),
            AttentionParams::default().block_dim(),
        ),
        (
            attention_tile(&AttentionParams {
                dtype: DType::BF16,
                batch: 2,
                ..Default::default()
            }),
            2,
        ),
        (
            gather_matmul(&GatherMatmulParams::default()),
            GatherMatmulParams::default().block_dim(),
        ),
        (
            gather_matmul(&GatherMatmulParams::int8()),
            GatherMatmulParams::int8().block_dim(),
        ),
    ];
    for (kernel, block_dim) in cases {
        let compiled = tile_backend::passes::compile(&kernel, &arch)
            .unwrap_or_else(|e| panic!("{}: {e}", kernel.name));
        let outputs = |traced: bool| {
            let mut args = sim::io::generate(&compiled, 11).expect("seeded inputs");
            let block_dim = block_dim as usize;
            let ran = if traced {
                support::trace_on(&compiled, &arch, &mut args, block_dim).map(|_| ())
            } else {
                support::simulate_with(&compiled, &arch, &mut args, block_dim)
            };
            ran.unwrap_or_else(|e| panic!("{} (traced: {traced}): {e}", kernel.name));
            args.iter()
                .filter_map(|a| a.tensor().map(|t| t.data.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(outputs(false), outputs(true), "{}", kernel.name);
    }
}

#[test]
fn a_decoded_operand_is_reused_only_while_its_l1_bytes_are_unchanged() {
    // The same A region feeds three matmuls: the second reuses the first's decode (A · B twice),
    // the third follows a reload of A's L1 tile with A2 and must see A2.
    let k = kernel(|q, p| {
        q.mov(p.b0, p.b1);
        q.mov(p.a0, p.a1);
        q.matmul(p.acc, p.a0, p.b0);
        q.mov(p.a0, p.a1);
        q.matmul_acc(p.acc, p.a0, p.b0);
        q.load(p.a1, GmView::nd(p.a2, 0, M, K, K));
        q.mov(p.a0, p.a1);
        q.matmul_acc(p.acc, p.a0, p.b0);
    });
    check("reused decode", &k, |r| {
        let (ab, a2b) = (product(&r.a, &r.b), product(&r.a2, &r.b));
        ab.iter().zip(&a2b).map(|(x, y)| x + x + y).collect()
    });
}
