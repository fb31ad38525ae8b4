//! JSON round trip of a non-trivial kernel: loops, if/else, let, read_scalar, read_tile_scalar,
//! tile groups picked with `i % 2`, a reinterpret, channels, a gather into L1, scaled Fixpipe
//! moves and stores.

use tile_backend::dsl::{Gather, KernelBuilder, Reinterpret};
use tile_backend::ir::*;
use tile_backend::verify::verify;

/// A sparse-attention-shaped kernel: the cube gathers K rows into L1 (ping-pong), computes
/// S = Q K^T per 32-token tile and hands S to the vector cores through a channel.
fn kernel() -> Kernel {
    let (h, d, tile, topk, tokens, nb, block) =
        (16u64, 64u64, 32u64, 128u64, 1024u64, 32u64, 32i64);
    let mut kb = KernelBuilder::new("sparse_scores");
    let q = kb.input("q", DType::F16, [h, d]);
    let kv = kb.input("kv", DType::F16, [tokens, d]);
    let idx = kb.input("idx", DType::I32, [1, topk]);
    let bt = kb.input("bt", DType::I32, [1, nb]);
    let lens = kb.input("lens", DType::I32, [4u64]);
    let scale = kb.scalar("scale", DType::F32);
    let n_heads = kb.scalar("n_heads", DType::I32);
    let out = kb.output("out", DType::F16, [h, topk]);
    let q8 = kb.output("q8", DType::I8, [h, tile]);
    let flags = kb.output("flags", DType::I32, [64u64]);
    kb.range(bt, 0.0, (nb - 1) as f64);
    kb.range(idx, -1.0, (tokens - 1) as f64);
    kb.range(n_heads, 1.0, 16.0);

    let q_l1 = kb.tile(
        "q_l1",
        TileType::new(MemSpace::Mat, DType::F16, h, d, Layout::NZ),
    );
    let k_l1 = kb.tile_group(
        "k_l1",
        TileType::new(MemSpace::Mat, DType::F16, tile, d, Layout::NZ),
        2,
    );
    // K^T for free: NZ [32, 64] is ZN [64, 32].
    let k_t = kb.reinterpret(
        "k_t",
        k_l1,
        Reinterpret {
            dtype: None,
            shape: Some((d, tile)),
            layout: Some(Layout::ZN),
        },
    );
    let q_l0 = kb.tile(
        "q_l0",
        TileType::new(MemSpace::Left, DType::F16, h, d, Layout::NZ),
    );
    let k_l0 = kb.tile_group(
        "k_l0",
        TileType::new(MemSpace::Right, DType::F16, d, tile, Layout::ZN),
        2,
    );
    let acc = kb.tile_group(
        "acc",
        TileType::new(MemSpace::Acc, DType::F32, h, tile, Layout::NZ),
        2,
    );
    let s_ub = kb.tile_group(
        "s_ub",
        TileType::new(MemSpace::Vec, DType::F16, h, tile, Layout::ND),
        2,
    );
    let idx_ub = kb.tile(
        "idx_ub",
        TileType::new(MemSpace::Vec, DType::I32, 1, 8, Layout::ND),
    );
    let p_ub = kb.tile(
        "p_ub",
        TileType::new(MemSpace::Vec, DType::F16, h, tile, Layout::ND)
            .dynamic()
            .pad(PadValue::Min),
    );
    let ch = kb.channel("scores", CoreKind::Cube, 2);

    kb.cube(|c| {
        c.load(q_l1, GmView::nd(q, 0, h, d, d));
        let len = c.read_scalar("len", lens, Expr::BlockIdx);
        let n_tiles = c.let_(
            "n_tiles",
            Expr::Var(len).min(topk as i64).ceil_div(tile as i64),
        );
        c.set_flag(Pipe::Mte2, Pipe::Mte1, 0);
        c.wait_flag(Pipe::Mte2, Pipe::Mte1, 0);
        c.mov(q_l0, q_l1);
        c.for_range("i", 0, n_tiles, 1, |c, i| {
            c.gather_in_l1(Gather {
                dst: k_l1.at(i % 2),
                src: kv,
                indices: GmView::nd(idx, i * tile as i64, 1, tile, topk),
                block_table: GmView::nd(bt, 0, 1, nb, nb),
                block_size: block.into(),
                size: d,
                col_offset: 0.into(),
                is_b_matrix: true,
                is_trans: true,
            });
            c.set_flag(Pipe::Mte2, Pipe::Mte1, 1);
            c.wait_flag(Pipe::Mte2, Pipe::Mte1, 1);
            c.mov(k_l0.at(i % 2), k_t.at(i % 2));
            c.set_flag(Pipe::Mte1, Pipe::M, 0);
            c.wait_flag(Pipe::Mte1, Pipe::M, 0);
            c.matmul(acc.at(i % 2), q_l0, k_l0.at(i % 2))
                .phase(Phase::Final);
            c.acquire(ch);
            c.mov(s_ub.at(i % 2), acc.at(i % 2))
                .mode(AccToVecMode::SingleModeVec0)
                .scale(Scale::Scalar(scale))
                .phase(Phase::Final);
            c.push(ch);
            c.if_else(
                Expr::Var(i).eq_(0),
                |c| {
                    c.store(GmView::nd(q8, 0, h, tile, tile), acc.at(0))
                        .scale(Scale::Const(QuantWord::new(0.125, true)))
                        .relu();
                },
                |c| {
                    c.barrier(Pipe::Fix);
                },
            );
        });
        c.if_(Expr::Var(len).gt(0).and(Expr::Param(n_heads).ge(1)), |c| {
            c.write_scalar(flags, Expr::BlockIdx * 16, n_tiles);
        });
    });

    kb.vector(|v| {
        let len = v.read_scalar("len", lens, Expr::BlockIdx);
        // The first index, through UB: one load, then a scalar read of the tile.
        v.load(idx_ub, GmView::nd(idx, 0, 1, 8, topk));
        v.set_flag(Pipe::Mte2, Pipe::S, 0);
        v.wait_flag(Pipe::Mte2, Pipe::S, 0);
        let first = v.read_tile_scalar("first", idx_ub, 0);
        let n_tiles = v.let_(
            "n_tiles",
            Expr::Var(len)
                .min(topk as i64)
                .min(Expr::Var(first).max(1) * topk as i64)
                .ceil_div(tile as i64),
        );
        v.for_range("i", 0, n_tiles, 1, |v, i| {
            v.pop(ch);
            v.set_validshape(p_ub, h, Expr::select(Expr::SubBlockIdx.eq_(0), tile, 0));
            v.exp(p_ub, s_ub.at(i % 2));
            v.release(ch);
            v.set_flag(Pipe::V, Pipe::Mte3, 0);
            v.wait_flag(Pipe::V, Pipe::Mte3, 0);
            v.store(GmView::nd(out, i * tile as i64, h, tile, topk), p_ub);
        });
    });
    kb.build()
}

#[test]
fn the_kernel_is_well_formed() {
    let k = kernel();
    let report = verify(&k);
    assert!(report.diagnostics.is_empty(), "{report}");
    assert_eq!(k.channels.len(), 1);
    // cube: 5 before the loop, 12 in it, 1 in the if; vector: 5 + 7 in the loop.
    assert_eq!(k.ops().len(), 30, "{:#?}", k.ops());
}

#[test]
fn json_round_trip_is_lossless() {
    let k = kernel();
    let json = k.to_json();
    let back = Kernel::from_json(&json).expect("parses");
    assert_eq!(back, k);
    // The verifier sees the same kernel.
    assert_eq!(verify(&back), verify(&k));
}

#[test]
fn json_is_stable() {
    let k = kernel();
    let a = k.to_json();
    let b = k.to_json();
    assert_eq!(a, b);
    // Re-serialising the parsed kernel gives the same text.
    let again = Kernel::from_json(&a).expect("parses").to_json();
    assert_eq!(a, again);
    // A second build of the same kernel serialises identically.
    assert_eq!(a, kernel().to_json());
}

#[test]
fn json_carries_every_construct() {
    let json = kernel().to_json();
    for needle in [
        "\"For\"",
        "\"If\"",
        "\"Let\"",
        "\"ReadScalar\"",
        "\"ReadTileScalar\"",
        "\"WriteScalar\"",
        "\"Rem\"",
        "\"Alias\"",
        "\"GatherInL1\"",
        "\"ChannelAcquire\"",
        "\"ChannelRelease\"",
        "\"Scalar\"",
        "\"Const\"",
        "\"SingleModeVec0\"",
        "\"Final\"",
        "\"Select\"",
        "\"range\"",
        "\"f16\"",
    ] {
        assert!(json.contains(needle), "JSON lacks {needle}");
    }
}

#[test]
fn malformed_json_is_an_error_not_a_panic() {
    let json = kernel().to_json();
    assert!(Kernel::from_json(&json[..json.len() / 2]).is_err());
    assert!(Kernel::from_json("{}").is_err());
    let bad_dtype = json.replacen("\"f16\"", "\"f17\"", 1);
    assert!(Kernel::from_json(&bad_dtype).is_err());
}
