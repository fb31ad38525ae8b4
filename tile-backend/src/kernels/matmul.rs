//! `matmul`: a tiled, double-buffered `C = A · B` on the cube.

use super::{acc_dtype, ping_pong};
use crate::dsl::{Body, KernelBuilder};
use crate::ir::{DType, Expr, GmView, Kernel, Layout, MemSpace, PadValue, Phase, Pipe, TileType};

/// Shapes and tiling of [`matmul`].
///
/// Tiles must be whole fractals: `tile_m` and `tile_n` multiples of 16 (`tile_n` a multiple of
/// C0 too, since the B tile is NZ in L1: 32 for int8), `tile_k` a multiple of 16 and of C0.
/// `m`, `k` and `n` need not be multiples of their tiles: the tails use runtime valid shapes and
/// zero padding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatmulParams {
    /// Rows of A and C.
    pub m: u64,
    /// Columns of A, rows of B (the contraction).
    pub k: u64,
    /// Columns of B and C.
    pub n: u64,
    /// Rows of an output tile.
    pub tile_m: u64,
    /// Columns of an output tile.
    pub tile_n: u64,
    /// Depth of one K slice.
    pub tile_k: u64,
    /// Operand dtype: f16, bf16, f32 (accumulate in f32) or i8 (accumulate in i32).
    pub dtype: DType,
}

impl Default for MatmulParams {
    fn default() -> Self {
        MatmulParams {
            m: 128,
            k: 256,
            n: 128,
            tile_m: 64,
            tile_n: 64,
            tile_k: 64,
            dtype: DType::F16,
        }
    }
}

impl MatmulParams {
    /// Output tiles along M.
    pub fn tiles_m(&self) -> u64 {
        self.m.div_ceil(self.tile_m.max(1))
    }
    /// Output tiles along N.
    pub fn tiles_n(&self) -> u64 {
        self.n.div_ceil(self.tile_n.max(1))
    }
    /// K slices per output tile.
    pub fn k_steps(&self) -> u64 {
        self.k.div_ceil(self.tile_k.max(1))
    }
    /// Blocks to launch: one per output tile.
    pub fn block_dim(&self) -> u64 {
        self.tiles_m() * self.tiles_n()
    }
    /// The dtype of C: i32 for i8 operands, f32 otherwise.
    pub fn out_dtype(&self) -> DType {
        acc_dtype(self.dtype)
    }
}

/// `C[m, n] = A[m, k] · B[k, n]`, C in f32 (i32 for int8 operands).
///
/// Arguments: `a` [m, k] and `b` [k, n] (inputs, `dtype`, row-major), `c` [m, n] (output).
/// Launch with [`MatmulParams::block_dim`] blocks: block `i` computes output tile
/// `(i / tiles_n, i % tiles_n)`; blocks beyond the tile count do nothing.
///
/// Cube program of one block (all on the cube; the vector program is empty):
///
/// ```text
/// for each K slice kk (ping-pong slot s = kk % 2, event id s):
///   MTE2: wait L1 slot free (MTE1->MTE2 s); load A[row0.., kk..] -> a_l1[s] (ND->NZ) and
///         B[kk.., col0..] -> b_l1[s] (ND->NZ); tails: fillpad with zeros; set MTE2->MTE1 s
///   MTE1: wait MTE2->MTE1 s; wait L0 slot free (M->MTE1 s); a_l1[s] -> a_l0[s] (Left NZ),
///         b_l1[s] -> b_l0[s] (Right ZN); set MTE1->MTE2 s (L1 slot free); set MTE1->M s
///   M:    wait MTE1->M s; kk == 0: matmul, else matmul_acc; phase Partial, Final on the last
///         slice; set M->MTE1 s (L0 slot free)
/// FIX: M->FIX flag, then the Fixpipe stores the Acc tile to C (the store has no phase).
/// ```
pub fn matmul(p: &MatmulParams) -> Kernel {
    let (m, k, n, dt) = (p.m, p.k, p.n, p.dtype);
    let (tm, tn, tk) = (p.tile_m.max(1), p.tile_n.max(1), p.tile_k.max(1));
    let (tiles, tiles_n, steps) = (p.block_dim(), p.tiles_n(), p.k_steps());
    let (tail_m, tail_n, tail_k) = (m % tm != 0, n % tn != 0, k % tk != 0);
    let out_dt = p.out_dtype();

    let mut kb = KernelBuilder::new(format!("matmul_{dt}"));
    let a = kb.input("a", dt, [m, k]);
    let b = kb.input("b", dt, [k, n]);
    let c = kb.output("c", out_dt, [m, n]);

    // L1 tiles with a tail get a runtime valid shape and zero padding, so the cube (which computes
    // whole fractals over the full tile) sees zeros beyond the valid region.
    let l1 = |rows: u64, cols: u64, tail: bool| {
        let t = TileType::new(MemSpace::Mat, dt, rows, cols, Layout::NZ);
        if tail {
            t.dynamic().pad(PadValue::Zero)
        } else {
            t
        }
    };
    let a_dyn = tail_m || tail_k;
    let b_dyn = tail_k || tail_n;
    let a_l1 = kb.tile_group("a_l1", l1(tm, tk, a_dyn), 2);
    let b_l1 = kb.tile_group("b_l1", l1(tk, tn, b_dyn), 2);
    let a_l0 = kb.tile_group(
        "a_l0",
        TileType::new(MemSpace::Left, dt, tm, tk, Layout::NZ),
        2,
    );
    let b_l0 = kb.tile_group(
        "b_l0",
        TileType::new(MemSpace::Right, dt, tk, tn, Layout::ZN),
        2,
    );
    let acc_dyn = tail_m || tail_n;
    let acc_ty = TileType::new(MemSpace::Acc, out_dt, tm, tn, Layout::NZ);
    let acc = kb.tile("acc", if acc_dyn { acc_ty.dynamic() } else { acc_ty });

    kb.cube(|cb| {
        cb.if_(Expr::BlockIdx.lt(tiles), |b0| {
            let bm = b0.let_("bm", Expr::BlockIdx / tiles_n);
            let bn = b0.let_("bn", Expr::BlockIdx % tiles_n);
            let mv: Expr = if tail_m {
                Expr::Var(b0.let_("mv", (Expr::from(m) - bm * tm).min(tm)))
            } else {
                tm.into()
            };
            let nv: Expr = if tail_n {
                Expr::Var(b0.let_("nv", (Expr::from(n) - bn * tn).min(tn)))
            } else {
                tn.into()
            };
            if acc_dyn {
                b0.set_validshape(acc, mv.clone(), nv.clone());
            }
            // Every buffer starts free: the first wait of each event pairs with these sets.
            for ev in 0..2 {
                b0.set_flag(Pipe::Mte1, Pipe::Mte2, ev);
                b0.set_flag(Pipe::M, Pipe::Mte1, ev);
            }
            let mut step = |s: &mut Body<'_>, kk: Expr, ev: u8| {
                let slot = kk.clone() % 2;
                let kv: Expr = if tail_k {
                    (Expr::from(k) - kk.clone() * tk).min(tk)
                } else {
                    tk.into()
                };
                // MTE2: GM -> L1.
                s.wait_flag(Pipe::Mte1, Pipe::Mte2, ev);
                if a_dyn {
                    s.set_validshape(a_l1.at(slot.clone()), mv.clone(), kv.clone());
                }
                if b_dyn {
                    s.set_validshape(b_l1.at(slot.clone()), kv.clone(), nv.clone());
                }
                let a_off = bm * (tm * k) + kk.clone() * tk;
                s.load(
                    a_l1.at(slot.clone()),
                    GmView::nd(a, a_off, mv.clone(), kv.clone(), k),
                );
                let b_off = kk.clone() * (tk * n) + bn * tn;
                s.load(
                    b_l1.at(slot.clone()),
                    GmView::nd(b, b_off, kv.clone(), nv.clone(), n),
                );
                if a_dyn {
                    s.fillpad(a_l1.at(slot.clone()));
                }
                if b_dyn {
                    s.fillpad(b_l1.at(slot.clone()));
                }
                s.set_flag(Pipe::Mte2, Pipe::Mte1, ev);
                // MTE1: L1 -> L0A / L0B.
                s.wait_flag(Pipe::Mte2, Pipe::Mte1, ev);
                s.wait_flag(Pipe::M, Pipe::Mte1, ev);
                s.mov(a_l0.at(slot.clone()), a_l1.at(slot.clone()));
                s.mov(b_l0.at(slot.clone()), b_l1.at(slot.clone()));
                s.set_flag(Pipe::Mte1, Pipe::Mte2, ev);
                s.set_flag(Pipe::Mte1, Pipe::M, ev);
                // M: accumulate into L0C.
                s.wait_flag(Pipe::Mte1, Pipe::M, ev);
                let mm = |t: &mut Body<'_>, accumulate: bool, phase: Phase| {
                    let (l, r) = (a_l0.at(slot.clone()), b_l0.at(slot.clone()));
                    if accumulate {
                        t.matmul_acc(acc, l, r).phase(phase);
                    } else {
                        t.matmul(acc, l, r).phase(phase);
                    }
                };
                if steps == 1 {
                    mm(s, false, Phase::Final);
                } else {
                    s.if_else(
                        kk.clone().eq_(0),
                        |t| mm(t, false, Phase::Partial),
                        |e| {
                            e.if_else(
                                kk.clone().eq_(steps as i64 - 1),
                                |t| mm(t, true, Phase::Final),
                                |t| mm(t, true, Phase::Partial),
                            )
                        },
                    );
                }
                s.set_flag(Pipe::M, Pipe::Mte1, ev);
            };
            ping_pong(b0, "kp", Expr::from(steps), &mut step);
            // FIX: the store carries no unit flag, so an explicit M -> FIX edge orders it.
            b0.set_flag(Pipe::M, Pipe::Fix, 0);
            b0.wait_flag(Pipe::M, Pipe::Fix, 0);
            let c_off = bm * (tm * n) + bn * tn;
            b0.store(GmView::nd(c, c_off, mv.clone(), nv.clone(), n), acc);
            // Drain: consume the last "free" signals so every flag is paired at kernel end.
            for ev in 0..2 {
                b0.wait_flag(Pipe::Mte1, Pipe::Mte2, ev);
                b0.wait_flag(Pipe::M, Pipe::Mte1, ev);
            }
        });
    });
    kb.build()
}
