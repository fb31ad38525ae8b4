//! `gather_matmul`: `S = Q · K^T` with K gathered from a paged cache straight into L1.

use super::{acc_dtype, ping_pong, round_up};
use crate::dsl::{Body, Gather, KernelBuilder, Reinterpret};
use crate::ir::{c0, DType, Expr, GmView, Kernel, Layout, MemSpace, PadValue, Pipe, TileType};

/// Shapes of [`gather_matmul`].
///
/// `tile_n` must be a multiple of 16 (of 32 for i8: the gathered tile is NZ [tile_n, size]);
/// `size` need not be a multiple of C0 (the tile is padded with zeros), nor `m` of 16, nor `n`
/// of `tile_n`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GatherMatmulParams {
    /// Query rows (M).
    pub m: u64,
    /// Columns gathered per row: the contraction dimension.
    pub size: u64,
    /// Columns of a cache row (C >= size).
    pub cols: u64,
    /// Rows of the paged cache (T).
    pub tokens: u64,
    /// Tokens per cache block.
    pub block_size: u64,
    /// Entries of the block table (nb): logical tokens reach `table_len * block_size`.
    pub table_len: u64,
    /// Rows gathered (the number of indices, e.g. top-k).
    pub n: u64,
    /// Rows gathered per tile (one L1 tile, one matmul).
    pub tile_n: u64,
    /// dtype of Q and the cache: f16, bf16, f32 (S in f32) or i8 (S in i32).
    pub dtype: DType,
}

impl Default for GatherMatmulParams {
    fn default() -> Self {
        GatherMatmulParams {
            m: 16,
            size: 128,
            cols: 128,
            tokens: 256,
            block_size: 16,
            table_len: 16,
            n: 64,
            tile_n: 32,
            dtype: DType::F16,
        }
    }
}

impl GatherMatmulParams {
    /// A small int8 x int8 -> int32 instance (fast to simulate).
    pub fn int8() -> Self {
        GatherMatmulParams {
            m: 16,
            size: 128,
            cols: 128,
            tokens: 1024,
            block_size: 128,
            table_len: 8,
            n: 256,
            tile_n: 128,
            dtype: DType::I8,
        }
    }

    /// The small upstream shape of ASCEND950.md §8: 33 buffer tokens, 30 columns, block 10, f16.
    pub fn upstream_small() -> Self {
        GatherMatmulParams {
            m: 16,
            size: 30,
            cols: 30,
            tokens: 33,
            block_size: 10,
            table_len: 4,
            n: 16,
            tile_n: 16,
            dtype: DType::F16,
        }
    }

    /// The large upstream shape of ASCEND950.md §8: 82816 buffer tokens, top-k 2048, block 128,
    /// int8 -> int32 (128 int8 columns per row, 64 query rows, as an indexer's Q · K^T).
    pub fn upstream_int8() -> Self {
        GatherMatmulParams {
            m: 64,
            size: 128,
            cols: 128,
            tokens: 82816,
            block_size: 128,
            table_len: 647,
            n: 2048,
            tile_n: 128,
            dtype: DType::I8,
        }
    }

    /// Gathered tiles (`ceil(n / tile_n)`).
    pub fn tiles(&self) -> u64 {
        self.n.div_ceil(self.tile_n.max(1))
    }

    /// Blocks to launch: one per gathered tile (any count works: blocks stride over the tiles).
    pub fn block_dim(&self) -> u64 {
        self.tiles()
    }

    /// The dtype of S: i32 for i8 inputs, f32 otherwise.
    pub fn out_dtype(&self) -> DType {
        acc_dtype(self.dtype)
    }
}

/// `S[m, n] = Q[m, size] · K^T`, where row `i` of K is cache row
/// `block_table[indices[i] / block_size] * block_size + indices[i] % block_size`, columns
/// `0..size` (ASCEND950.md §8).
///
/// Arguments: `q` [m, size] and `cache` [tokens, cols] (inputs, `dtype`), `indices` [1, n] i32
/// (logical tokens, in `0..table_len * block_size`), `block_table` [1, table_len] i32 (entries in
/// `0..tokens / block_size`), `s` [m, n] (output, f32 or i32). Blocks stride over the gathered
/// tiles: block `b` handles tiles `b, b + block_dim, ...`.
///
/// Cube program:
///
/// ```text
/// MTE2  Q -> q_l1 Mat NZ [M, K] (M, K = m, size padded to 16 / C0 with zeros); MTE1 -> q_l0 Left
/// per gathered tile t (ping-pong slot s = local iteration % 2, event id s):
///   MTE2  gather_in_l1: tile_n rows of `size` columns -> k_l1[s] Mat NZ [tile_n, K]
///         (one DMA per row; is_b_matrix, is_trans: consumed as K^T); tails: fillpad zeros
///   MTE1  k_l1[s] reinterpreted as ZN [K, tile_n] is K^T (same bytes) -> kt_l0[s] Right ZN
///   M     acc[s] Acc [M, tile_n] = q_l0 · kt_l0[s]
///   FIX   acc[s] -> S[:, t * tile_n ..]
/// with MTE1->MTE2 (L1 slot free), MTE2->MTE1, M->MTE1 (L0B slot free), MTE1->M, M->FIX and
/// FIX->M (L0C slot free) flags, two event ids each.
/// ```
pub fn gather_matmul(p: &GatherMatmulParams) -> Kernel {
    let dt = p.dtype;
    let (m, size, n) = (p.m, p.size, p.n);
    let tn = p.tile_n.max(1);
    let bs = p.block_size.max(1);
    let nb = p.table_len;
    let nt = p.tiles();
    let mp = round_up(m, 16);
    let kp = round_up(round_up(size, c0(dt)), 16);
    let tail_n = n % tn != 0;
    let q_pad = mp != m || kp != size;
    let k_dyn = tail_n || kp != size;
    let out_dt = p.out_dtype();

    let mut kb = KernelBuilder::new(format!("gather_matmul_{dt}"));
    let q = kb.input("q", dt, [m, size]);
    let cache = kb.input("cache", dt, [p.tokens, p.cols]);
    let idx = kb.input("indices", DType::I32, [1, n]);
    let bt = kb.input("block_table", DType::I32, [1, nb]);
    let s = kb.output("s", out_dt, [m, n]);
    kb.range(idx, 0.0, (nb * bs) as f64 - 1.0);
    kb.range(bt, 0.0, (p.tokens / bs).max(1) as f64 - 1.0);

    let mut q_ty = TileType::new(MemSpace::Mat, dt, mp, kp, Layout::NZ).valid(m, size);
    if q_pad {
        q_ty = q_ty.pad(PadValue::Zero);
    }
    let q_l1 = kb.tile("q_l1", q_ty);
    let q_l0 = kb.tile(
        "q_l0",
        TileType::new(MemSpace::Left, dt, mp, kp, Layout::NZ),
    );
    let k_ty = TileType::new(MemSpace::Mat, dt, tn, kp, Layout::NZ);
    let k_l1 = kb.tile_group(
        "k_l1",
        if k_dyn {
            k_ty.dynamic().pad(PadValue::Zero)
        } else {
            k_ty
        },
        2,
    );
    let kt_l1 = kb.reinterpret(
        "kt_l1",
        k_l1,
        Reinterpret {
            dtype: None,
            shape: Some((kp, tn)),
            layout: Some(Layout::ZN),
        },
    );
    let kt_l0 = kb.tile_group(
        "kt_l0",
        TileType::new(MemSpace::Right, dt, kp, tn, Layout::ZN),
        2,
    );
    let acc_ty = TileType::new(MemSpace::Acc, out_dt, mp, tn, Layout::NZ);
    let acc = kb.tile_group(
        "acc",
        if tail_n {
            acc_ty.dynamic()
        } else {
            acc_ty.valid(m, tn)
        },
        2,
    );

    kb.cube(|c| {
        c.load(q_l1, GmView::nd(q, 0, m, size, size));
        if q_pad {
            c.fillpad(q_l1);
        }
        c.set_flag(Pipe::Mte2, Pipe::Mte1, 2);
        c.wait_flag(Pipe::Mte2, Pipe::Mte1, 2);
        c.mov(q_l0, q_l1);
        for ev in 0..2 {
            c.set_flag(Pipe::Mte1, Pipe::Mte2, ev);
            c.set_flag(Pipe::M, Pipe::Mte1, ev);
            c.set_flag(Pipe::Fix, Pipe::M, ev);
        }
        let iters = (Expr::from(nt) + Expr::BlockDim - 1) / Expr::BlockDim;
        let mut step = |b: &mut Body<'_>, it: Expr, ev: u8| {
            let tile = b.let_("tile", Expr::BlockIdx + it.clone() * Expr::BlockDim);
            b.if_(Expr::Var(tile).lt(nt), |t| {
                let slot = it.clone() % 2;
                let nv: Expr = if tail_n {
                    Expr::Var(t.let_("nv", (Expr::from(n) - tile * tn).min(tn)))
                } else {
                    tn.into()
                };
                // MTE2: gather tile_n cache rows into L1.
                t.wait_flag(Pipe::Mte1, Pipe::Mte2, ev);
                if k_dyn {
                    t.set_validshape(k_l1.at(slot.clone()), nv.clone(), size);
                }
                t.gather_in_l1(Gather {
                    dst: k_l1.at(slot.clone()),
                    src: cache,
                    indices: GmView::nd(idx, tile * tn, 1, nv.clone(), n),
                    block_table: GmView::nd(bt, 0, 1, nb, nb),
                    block_size: bs.into(),
                    size,
                    col_offset: 0.into(),
                    is_b_matrix: true,
                    is_trans: true,
                });
                if k_dyn {
                    t.fillpad(k_l1.at(slot.clone()));
                }
                t.set_flag(Pipe::Mte2, Pipe::Mte1, ev);
                // MTE1: K^T (the ZN view of the gathered NZ tile) -> L0B.
                t.wait_flag(Pipe::Mte2, Pipe::Mte1, ev);
                t.wait_flag(Pipe::M, Pipe::Mte1, ev);
                t.set_validshape(kt_l1.at(slot.clone()), size, nv.clone());
                t.mov(kt_l0.at(slot.clone()), kt_l1.at(slot.clone()));
                t.set_flag(Pipe::Mte1, Pipe::Mte2, ev);
                t.set_flag(Pipe::Mte1, Pipe::M, ev);
                // M: S tile = Q · K^T.
                t.wait_flag(Pipe::Mte1, Pipe::M, ev);
                t.wait_flag(Pipe::Fix, Pipe::M, ev);
                if tail_n {
                    t.set_validshape(acc.at(slot.clone()), m, nv.clone());
                }
                t.matmul(acc.at(slot.clone()), q_l0, kt_l0.at(slot.clone()));
                t.set_flag(Pipe::M, Pipe::Mte1, ev);
                t.set_flag(Pipe::M, Pipe::Fix, ev);
                // FIX: Acc -> GM.
                t.wait_flag(Pipe::M, Pipe::Fix, ev);
                t.store(
                    GmView::nd(s, tile * tn, m, nv.clone(), n),
                    acc.at(slot.clone()),
                );
                t.set_flag(Pipe::Fix, Pipe::M, ev);
            });
        };
        ping_pong(c, "tp", iters, &mut step);
        for ev in 0..2 {
            c.wait_flag(Pipe::Mte1, Pipe::Mte2, ev);
            c.wait_flag(Pipe::M, Pipe::Mte1, ev);
            c.wait_flag(Pipe::Fix, Pipe::M, ev);
        }
    });
    kb.build()
}
