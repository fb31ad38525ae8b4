//! `gather_in_l1` (ASCEND950.md §8): dtypes, [1, n] indices, [1, nb] block table, size <= C and
//! an NZ Mat destination; the upstream small and large shapes verify clean.

use tile_backend::dsl::{Gather, KernelBuilder};
use tile_backend::ir::*;
use tile_backend::verify::{verify, Report, Rule};

use DType::*;
use Layout::*;
use MemSpace::*;

mod support;
use support::*;

/// One gather's configuration; `small()` is the upstream small shape (33 buffer tokens,
/// 30 columns, block 10, fp16), gathering 16 indices.
#[derive(Clone)]
struct Cfg {
    src_dtype: DType,
    src_shape: std::vec::Vec<u64>,
    idx_dtype: DType,
    idx_shape: std::vec::Vec<u64>,
    idx_window: (u64, u64),
    bt_dtype: DType,
    bt_shape: std::vec::Vec<u64>,
    bt_window: (u64, u64),
    block_size: i64,
    size: u64,
    dst: TileType,
}

fn small() -> Cfg {
    Cfg {
        src_dtype: F16,
        src_shape: vec![33, 30],
        idx_dtype: I32,
        idx_shape: vec![1, 16],
        idx_window: (1, 16),
        bt_dtype: I32,
        bt_shape: vec![1, 4],
        bt_window: (1, 4),
        block_size: 10,
        size: 30,
        dst: TileType::new(Mat, F16, 16, 32, NZ),
    }
}

fn gather(cfg: Cfg) -> Report {
    let mut kb = KernelBuilder::new("gather");
    let src = kb.input("src", cfg.src_dtype, cfg.src_shape.clone());
    let idx = kb.input("idx", cfg.idx_dtype, cfg.idx_shape.clone());
    let bt = kb.input("bt", cfg.bt_dtype, cfg.bt_shape.clone());
    let dst = kb.tile("dst", cfg.dst.clone());
    let (ir, ic) = cfg.idx_window;
    let (br, bc) = cfg.bt_window;
    kb.cube(|c| {
        c.gather_in_l1(Gather {
            dst: dst.into(),
            src,
            indices: GmView::nd(idx, 0, ir, ic, ic),
            block_table: GmView::nd(bt, 0, br, bc, bc),
            block_size: cfg.block_size.into(),
            size: cfg.size,
            col_offset: 0.into(),
            is_b_matrix: false,
            is_trans: false,
        });
    });
    verify(&kb.build())
}

#[test]
fn upstream_small_shape_is_clean() {
    expect_clean(&gather(small()));
}

#[test]
fn source_dtypes_f32_f16_bf16_i8() {
    for dt in [F32, F16, BF16, I8] {
        let mut c = small();
        c.src_dtype = dt;
        // 32 columns are whole boxes for C0 = 8, 16 and 32.
        c.dst = TileType::new(Mat, dt, 16, 32, NZ);
        expect_clean(&gather(c));
    }
    for dt in [I32, U8, F8E4M3] {
        let mut c = small();
        c.src_dtype = dt;
        c.dst = TileType::new(Mat, dt, 16, 32, NZ);
        let what = format!("gather_in_l1 source `src` is {dt}; it must be f32, f16, bf16, i8");
        expect_err(&gather(c), Rule::GatherDtype, &[&what]);
    }
    let mut c = small();
    c.src_shape = vec![4, 33, 30];
    expect_err(
        &gather(c),
        Rule::GatherDtype,
        &["gather_in_l1 source `src` must be 2-D [T, C], it has 3 dims"],
    );
}

#[test]
fn indices_are_a_1_by_n_row_of_int32_or_int64() {
    let mut c = small();
    c.idx_dtype = I64;
    expect_clean(&gather(c));
    let mut c = small();
    c.idx_dtype = F32;
    expect_err(
        &gather(c),
        Rule::GatherIndices,
        &["gather_in_l1 indices `idx` is f32; it must be i32 or i64"],
    );
    let mut c = small();
    c.idx_shape = vec![16];
    expect_err(
        &gather(c),
        Rule::GatherIndices,
        &["gather_in_l1 indices `idx` must be 2-D, it has 1 dims"],
    );
    let mut c = small();
    c.idx_shape = vec![2, 8];
    c.idx_window = (2, 8);
    expect_err(
        &gather(c),
        Rule::GatherIndices,
        &["gather_in_l1 indices is a [1, n] row, the window has 2 rows"],
    );
    let mut c = small();
    c.idx_window = (1, 0);
    expect_err(
        &gather(c),
        Rule::GatherIndices,
        &["gather_in_l1 indices must be non-empty, the window has 0 columns"],
    );
}

#[test]
fn block_table_is_a_1_by_nb_int32_row_and_block_size_is_positive() {
    let mut c = small();
    c.bt_dtype = I64;
    expect_err(
        &gather(c),
        Rule::GatherBlockTable,
        &["gather_in_l1 block table `bt` is i64; it must be i32"],
    );
    let mut c = small();
    c.bt_shape = vec![2, 2];
    c.bt_window = (2, 2);
    expect_err(
        &gather(c),
        Rule::GatherBlockTable,
        &["gather_in_l1 block table is a [1, n] row, the window has 2 rows"],
    );
    let mut c = small();
    c.block_size = 0;
    expect_err(
        &gather(c),
        Rule::GatherBlockTable,
        &["block_size must be positive, got 0"],
    );
}

#[test]
fn size_fits_the_source_and_the_destination() {
    let mut c = small();
    c.size = 31;
    expect_err(
        &gather(c),
        Rule::GatherSize,
        &["gather_in_l1 size 31 exceeds the source's 30 columns"],
    );
    let mut c = small();
    c.size = 0;
    expect_err(&gather(c), Rule::GatherSize, &["size must be at least 1"]);
    let mut c = small();
    c.dst = TileType::new(Mat, F16, 16, 16, NZ);
    expect_err(
        &gather(c),
        Rule::GatherSize,
        &["gather_in_l1 size 30 exceeds the destination's 16 columns"],
    );
    // size < C is fine (only the first 16 columns of each row).
    let mut c = small();
    c.size = 16;
    c.dst = TileType::new(Mat, F16, 16, 16, NZ);
    expect_clean(&gather(c));
    // 32 indices need 32 rows.
    let mut c = small();
    c.idx_shape = vec![1, 32];
    c.idx_window = (1, 32);
    expect_err(
        &gather(c),
        Rule::GatherSize,
        &["gather_in_l1 of 32 indices needs 32 rows; `dst` has 16"],
    );
}

#[test]
fn destination_is_an_nz_mat_tile_of_the_source_dtype() {
    let mut c = small();
    c.dst = TileType::new(Mat, F16, 16, 32, ND);
    expect_err(
        &gather(c),
        Rule::GatherDst,
        &["gather_in_l1 lands in an NZ Mat (L1) tile; `dst` is Mat ND"],
    );
    let mut c = small();
    c.dst = TileType::new(Left, F16, 16, 32, NZ);
    expect_err(&gather(c), Rule::GatherDst, &["`dst` is Left NZ"]);
    let mut c = small();
    c.dst = TileType::new(Mat, BF16, 16, 32, NZ);
    expect_err(
        &gather(c),
        Rule::GatherDst,
        &["gather_in_l1 copies bytes: source is f16, `dst` is bf16"],
    );
}

#[test]
fn upstream_large_int8_shape_feeds_an_int32_matmul_clean() {
    // 82816 buffer tokens, top-k 2048, block 128, int8 -> int32 matmul. The 2048 gathered rows of
    // 128 columns (256 KiB of L1) are consumed 64 rows at a time.
    let (tokens, topk, block, cols) = (82816u64, 2048u64, 128i64, 128u64);
    let nb = tokens / block as u64; // 647 blocks
    let mut kb = KernelBuilder::new("gather_large");
    let kv = kb.input("kv", I8, [tokens, cols]);
    let idx = kb.input("idx", I32, [1, topk]);
    let bt = kb.input("bt", I32, [1, nb]);
    let q = kb.input("q", I8, [cols, 64u64]);
    let out = kb.output("out", I32, [topk, 64u64]);
    kb.range(bt, 0.0, (nb - 1) as f64);
    kb.range(idx, 0.0, (tokens - 1) as f64);
    let rows = kb.tile("rows", TileType::new(Mat, I8, topk, cols, NZ));
    let q_l1 = kb.tile("q_l1", TileType::new(Mat, I8, cols, 64, NZ));
    let a = kb.tile_group("a", TileType::new(Left, I8, 64, cols, NZ), 2);
    let b = kb.tile("b", TileType::new(Right, I8, cols, 64, ZN));
    let acc = kb.tile_group("acc", TileType::new(Acc, I32, 64, 64, NZ), 2);
    kb.cube(|c| {
        c.gather_in_l1(Gather {
            dst: rows.into(),
            src: kv,
            indices: GmView::nd(idx, 0, 1, topk, topk),
            block_table: GmView::nd(bt, 0, 1, nb, nb),
            block_size: block.into(),
            size: cols,
            col_offset: 0.into(),
            is_b_matrix: false,
            is_trans: false,
        });
        c.load(q_l1, GmView::nd(q, 0, cols, 64, 64));
        c.set_flag(Pipe::Mte2, Pipe::Mte1, 0);
        c.wait_flag(Pipe::Mte2, Pipe::Mte1, 0);
        c.mov(b, q_l1);
        c.for_range("i", 0, (topk / 64) as i64, 1, |c, i| {
            c.mov(a.at(i % 2), rows).offset(i * 64, 0);
            c.set_flag(Pipe::Mte1, Pipe::M, 0);
            c.wait_flag(Pipe::Mte1, Pipe::M, 0);
            c.matmul(acc.at(i % 2), a.at(i % 2), b).phase(Phase::Final);
            c.store(GmView::nd(out, i * 64 * 64, 64, 64, 64), acc.at(i % 2));
        });
    });
    expect_clean(&verify(&kb.build()));
}
