//! Each simulator op family against a scalar model, including the tails and traps of
//! ASCEND950.md §5-§7.

#[path = "support/mod.rs"]
mod support;

use support::{op_fault, run_verified, simulate_on, vec_tile};
use tile_backend::arch::Arch;
use tile_backend::dsl::{KernelBuilder, Reinterpret};
use tile_backend::ir::*;
use tile_backend::sim::io::Rng;
use tile_backend::sim::{numeric, Arg, GmTensor, SimError, SimFault};

/// Memory planning (the real pass; these kernels carry their own syncs).
fn plan(k: Kernel) -> Kernel {
    tile_backend::passes::memory::plan(&k, &Arch::ascend950()).expect("kernel fits")
}

fn values(n: usize, seed: u64) -> Vec<f32> {
    Rng::new(seed).uniform_vec(n, -2.0, 2.0)
}

fn out(args: &[Arg], i: usize) -> Vec<f32> {
    args[i].tensor().unwrap().to_f32()
}

/// One vector kernel: load x (and y) [r, c], apply `body`, store z. Only AIV0 works.
fn vector_kernel(
    dt: DType,
    r: u64,
    c: u64,
    out_shape: (u64, u64),
    body: impl FnOnce(&mut tile_backend::dsl::Body<'_>, TileId, TileId, TileId),
    out_ty: TileType,
) -> Kernel {
    let mut kb = KernelBuilder::new("v");
    let x = kb.input("x", dt, [r, c]);
    let y = kb.input("y", dt, [r, c]);
    let z = kb.output("z", out_ty.dtype, [out_shape.0, out_shape.1]);
    let tx = kb.tile("tx", vec_tile(dt, r, c));
    let ty = kb.tile("ty", vec_tile(dt, r, c));
    let tz = kb.tile("tz", out_ty);
    kb.vector(|v| {
        v.if_(Expr::SubBlockIdx.eq_(0), |v| {
            v.load(tx, GmView::nd(x, 0, r, c, c));
            v.load(ty, GmView::nd(y, 0, r, c, c));
            body(v, tx, ty, tz);
            v.store(GmView::nd(z, 0, out_shape.0, out_shape.1, out_shape.1), tz);
        });
    });
    plan(kb.build())
}

fn vector_args(
    dt: DType,
    r: usize,
    c: usize,
    out: (usize, usize),
    odt: DType,
) -> (Vec<Arg<'static>>, Vec<f32>, Vec<f32>) {
    let x = GmTensor::from_f32(dt, &[r, c], &values(r * c, 1));
    let y = GmTensor::from_f32(dt, &[r, c], &values(r * c, 2));
    let (xv, yv) = (x.to_f32(), y.to_f32());
    (
        vec![
            Arg::Tensor(x),
            Arg::Tensor(y),
            Arg::Tensor(GmTensor::zeros(odt, &[out.0, out.1])),
        ],
        xv,
        yv,
    )
}

#[test]
fn elementwise_ops_round_once_per_op() {
    for dt in [DType::F32, DType::F16, DType::BF16] {
        for (op, f) in [
            (BinaryOp::Add, (|a, b| a + b) as fn(f32, f32) -> f32),
            (BinaryOp::Sub, |a, b| a - b),
            (BinaryOp::Mul, |a, b| a * b),
            (BinaryOp::Div, |a, b| a / b),
            (BinaryOp::Max, f32::max),
            (BinaryOp::Min, f32::min),
        ] {
            if dt == DType::BF16 && op == BinaryOp::Div {
                // Ascend 950's TDIV has no bf16 form (the verifier's vector-dtype rule).
                continue;
            }
            let (r, c) = (8u64, 32u64);
            let k = vector_kernel(
                dt,
                r,
                c,
                (r, c),
                |v, x, y, z| v.binary(op, z, x, y),
                vec_tile(dt, r, c),
            );
            let (mut args, xv, yv) =
                vector_args(dt, r as usize, c as usize, (r as usize, c as usize), dt);
            run_verified(&k, &mut args);
            let got = out(&args, 2);
            for i in 0..xv.len() {
                let want = numeric::round_to(dt, f(xv[i], yv[i]));
                assert_eq!(
                    got[i].to_bits(),
                    want.to_bits(),
                    "{dt} {op:?} at {i}: {} vs {}",
                    got[i],
                    want
                );
            }
        }
    }
}

#[test]
fn unary_and_scalar_forms() {
    let (r, c) = (16u64, 16u64);
    for dt in [DType::F32, DType::F16] {
        let k = vector_kernel(
            dt,
            r,
            c,
            (r, c),
            |v, x, _, z| {
                v.exp(z, x);
                v.muls(z, z, 0.5f64);
                v.binary_scalar(BinaryOp::Add, z, z, 1.0f64);
            },
            vec_tile(dt, r, c),
        );
        let (mut args, xv, _) =
            vector_args(dt, r as usize, c as usize, (r as usize, c as usize), dt);
        run_verified(&k, &mut args);
        let got = out(&args, 2);
        for i in 0..xv.len() {
            // The simulator's exp model (itself checked against f64 exp in `numeric`).
            let e = numeric::round_to(dt, numeric::exp_f32(xv[i]));
            let h = numeric::round_to(dt, e * 0.5);
            let want = numeric::round_to(dt, h + 1.0);
            assert_eq!(got[i], want, "{dt} at {i}");
        }
    }
}

#[test]
fn row_and_column_reductions_and_broadcasts() {
    let (r, c) = (8u64, 24u64);
    let dt = DType::F32;
    // Row max, subtract it, exp, row sum, divide: a row softmax.
    let mut kb = KernelBuilder::new("softmax_rows");
    let x = kb.input("x", dt, [r, c]);
    let z = kb.output("z", dt, [r, c]);
    let tx = kb.tile("tx", vec_tile(dt, r, c));
    let m = kb.tile("m", TileType::new(MemSpace::Vec, dt, r, 1, Layout::DN));
    let s = kb.tile("s", TileType::new(MemSpace::Vec, dt, r, 1, Layout::DN));
    kb.vector(|v| {
        v.if_(Expr::SubBlockIdx.eq_(0), |v| {
            v.load(tx, GmView::nd(x, 0, r, c, c));
            v.row_max(m, tx);
            v.broadcast(BinaryOp::Sub, Axis::Row, tx, tx, m);
            v.exp(tx, tx);
            v.row_sum(s, tx);
            v.broadcast(BinaryOp::Div, Axis::Row, tx, tx, s);
            v.store(GmView::nd(z, 0, r, c, c), tx);
        });
    });
    let k = plan(kb.build());
    let xv = values((r * c) as usize, 3);
    let mut args = vec![
        Arg::Tensor(GmTensor::from_f32(dt, &[r as usize, c as usize], &xv)),
        Arg::Tensor(GmTensor::zeros(dt, &[r as usize, c as usize])),
    ];
    run_verified(&k, &mut args);
    let got = out(&args, 1);
    for i in 0..r as usize {
        let row = &xv[i * c as usize..(i + 1) * c as usize];
        let mx = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        let e: Vec<f32> = row.iter().map(|v| (v - mx).exp()).collect();
        let sum: f32 = e.iter().sum();
        for j in 0..c as usize {
            let want = e[j] / sum;
            assert!((got[i * c as usize + j] - want).abs() < 1e-6);
        }
    }

    // Column max and column broadcast multiply.
    let k = vector_kernel(
        dt,
        r,
        c,
        (r, c),
        |v, x, _, z| {
            v.col_max(z, x);
        },
        vec_tile(dt, 1, c),
    );
    let mut k2 = k.clone();
    // Output is [1, c]: fix the output tensor shape.
    if let ParamKind::Tensor { shape, .. } = &mut k2.params[2].kind {
        *shape = vec![Expr::Const(1), Expr::Const(c as i64)];
    }
    if let Some(Stmt::If { then_body, .. }) = k2.vector.first_mut() {
        if let Some(Stmt::Op(Op::LoadStore(LoadStoreOp::Store { dst, .. }))) = then_body.last_mut()
        {
            dst.rows = Expr::Const(1);
        }
    }
    let (mut args, xv, _) = vector_args(dt, r as usize, c as usize, (1, c as usize), dt);
    run_verified(&k2, &mut args);
    let got = out(&args, 2);
    for j in 0..c as usize {
        let want = (0..r as usize)
            .map(|i| xv[i * c as usize + j])
            .fold(f32::NEG_INFINITY, f32::max);
        assert_eq!(got[j], want);
    }
}

#[test]
fn casts_use_their_rounding_mode_and_saturate() {
    let (r, c) = (1u64, 8u64);
    let src = [2.5f32, -2.5, 3.5, 1e10, -1e10, 0.49999997, -0.5, 200.7];
    for (mode, want) in [
        (
            RoundMode::Rint,
            [2i64, -2, 4, i32::MAX as i64, i32::MIN as i64, 0, 0, 201],
        ),
        (
            RoundMode::Round,
            [3, -3, 4, i32::MAX as i64, i32::MIN as i64, 0, -1, 201],
        ),
        (
            RoundMode::Floor,
            [2, -3, 3, i32::MAX as i64, i32::MIN as i64, 0, -1, 200],
        ),
        (
            RoundMode::Ceil,
            [3, -2, 4, i32::MAX as i64, i32::MIN as i64, 1, 0, 201],
        ),
        (
            RoundMode::Trunc,
            [2, -2, 3, i32::MAX as i64, i32::MIN as i64, 0, 0, 200],
        ),
    ] {
        let k = vector_kernel(
            DType::F32,
            r,
            c,
            (r, c),
            |v, x, _, z| v.cast(z, x, mode),
            vec_tile(DType::I32, r, c),
        );
        let mut args = vec![
            Arg::Tensor(GmTensor::from_f32(DType::F32, &[1, 8], &src)),
            Arg::Tensor(GmTensor::zeros(DType::F32, &[1, 8])),
            Arg::Tensor(GmTensor::zeros(DType::I32, &[1, 8])),
        ];
        run_verified(&k, &mut args);
        assert_eq!(args[2].tensor().unwrap().to_i64(), want, "{mode:?}");
    }
}

#[test]
fn dynamic_valid_shape_fillpad_and_partial_loads() {
    // Load a 5x7 window into an 8x8 f32 tile, pad with Min, row max over the full tile must
    // ignore padding because the reduction runs on the valid region only; fillpad writes -inf.
    let dt = DType::F32;
    let mut kb = KernelBuilder::new("tail");
    let x = kb.input("x", dt, [5, 7]);
    let z = kb.output("z", dt, [8, 8]);
    let t = kb.tile(
        "t",
        TileType::new(MemSpace::Vec, dt, 8, 8, Layout::ND)
            .dynamic()
            .pad(PadValue::Min),
    );
    kb.vector(|v| {
        v.if_(Expr::SubBlockIdx.eq_(0), |v| {
            v.set_validshape(t, 5, 7);
            v.load(t, GmView::nd(x, 0, 5, 7, 7));
            v.fillpad(t);
            v.set_validshape(t, 8, 8);
            v.store(GmView::nd(z, 0, 8, 8, 8), t);
        });
    });
    let k = plan(kb.build());
    let xv = values(35, 4);
    let mut args = vec![
        Arg::Tensor(GmTensor::from_f32(dt, &[5, 7], &xv)),
        Arg::Tensor(GmTensor::zeros(dt, &[8, 8])),
    ];
    run_verified(&k, &mut args);
    let got = out(&args, 1);
    for i in 0..8 {
        for j in 0..8 {
            let g = got[i * 8 + j];
            if i < 5 && j < 7 {
                assert_eq!(g, xv[i * 7 + j]);
            } else {
                assert_eq!(g, f32::NEG_INFINITY, "padding at ({i},{j})");
            }
        }
    }
}

/// Cube: load A [m, k] and B [k, n] (f16), matmul into Acc [m_alloc, n_alloc] with valid [m, n],
/// move to UB with `mode`, then each AIV stores its UB tile [rows, cols] to out[sub_block].
fn split_kernel(
    m: u64,
    n: u64,
    acc_rows: u64,
    acc_cols: u64,
    mode: AccToVecMode,
    dst: (u64, u64),
    whole: bool,
) -> Kernel {
    let k = 16u64;
    let dt = DType::F16;
    let mut kb = KernelBuilder::new("split");
    let a = kb.input("a", dt, [m, k]);
    let b = kb.input("b", dt, [k, n]);
    let o = kb.output("o", DType::F32, [2 * dst.0, dst.1]);
    let a1 = kb.tile(
        "a1",
        TileType::new(MemSpace::Mat, dt, acc_rows, k, Layout::NZ).valid(m, k),
    );
    let b1 = kb.tile(
        "b1",
        TileType::new(MemSpace::Mat, dt, k, acc_cols, Layout::NZ).valid(k, n),
    );
    let a0 = kb.tile(
        "a0",
        TileType::new(MemSpace::Left, dt, acc_rows, k, Layout::NZ).valid(m, k),
    );
    let b0 = kb.tile(
        "b0",
        TileType::new(MemSpace::Right, dt, k, acc_cols, Layout::ZN).valid(k, n),
    );
    let acc = kb.tile(
        "acc",
        TileType::new(MemSpace::Acc, DType::F32, acc_rows, acc_cols, Layout::NZ).valid(m, n),
    );
    let ub = kb.tile(
        "ub",
        TileType::new(MemSpace::Vec, DType::F32, dst.0, dst.1, Layout::ND).dynamic(),
    );
    // What each AIV receives (ASCEND950.md §5 tails): v0 for AIV0, v1 for AIV1.
    let (real_rows, real_cols) = match mode {
        AccToVecMode::DualModeSplitM => {
            let v0 = m.div_ceil(2) * 2 / 2;
            (
                Expr::select(Expr::SubBlockIdx.eq_(0), v0, m - v0),
                Expr::from(n),
            )
        }
        _ => {
            let v0 = n.div_ceil(32) * 32 / 2;
            (
                Expr::from(m),
                Expr::select(Expr::SubBlockIdx.eq_(0), v0.min(n), n.saturating_sub(v0)),
            )
        }
    };
    kb.cube(|q| {
        q.load(a1, GmView::nd(a, 0, m, k, k));
        q.load(b1, GmView::nd(b, 0, k, n, n));
        q.mov(a0, a1);
        q.mov(b0, b1);
        q.matmul(acc, a0, b0);
        q.mov(ub, acc).mode(mode);
        q.set_cross_flag(Pipe::Fix, 0);
        q.set_cross_flag(Pipe::Fix, 16);
    });
    kb.vector(|v| {
        v.wait_cross_flag(Pipe::Mte3, 0);
        // Store what this AIV received, or (`whole`) the whole UB tile, whose bytes the Fixpipe
        // never wrote are poison.
        let (rows, cols) = if whole {
            (Expr::from(dst.0), Expr::from(dst.1))
        } else {
            (real_rows.clone(), real_cols.clone())
        };
        v.set_validshape(ub, rows.clone(), cols.clone());
        v.store(
            GmView::nd(o, Expr::SubBlockIdx * (dst.0 * dst.1), rows, cols, dst.1),
            ub,
        );
    });
    plan(kb.build())
}

fn ones_args(m: u64, n: u64, dst: (u64, u64)) -> Vec<Arg<'static>> {
    let k = 16usize;
    // A = row index + 1 in every column / 16, B = ones * (col + 1) => C[i, j] = (i + 1) * (j + 1).
    let av: Vec<f32> = (0..m as usize * k)
        .map(|x| ((x / k) + 1) as f32 / 16.0)
        .collect();
    let bv: Vec<f32> = (0..k * n as usize)
        .map(|x| ((x % n as usize) + 1) as f32)
        .collect();
    vec![
        Arg::Tensor(GmTensor::from_f32(DType::F16, &[m as usize, k], &av)),
        Arg::Tensor(GmTensor::from_f32(DType::F16, &[k, n as usize], &bv)),
        Arg::Tensor(GmTensor::zeros(
            DType::F32,
            &[2 * dst.0 as usize, dst.1 as usize],
        )),
    ]
}

#[test]
fn dual_split_n_tails() {
    for n in [10u64, 16, 17, 32, 48, 100] {
        let m = 16u64;
        let aligned = n.div_ceil(32) * 32;
        let half = aligned / 2;
        let acc_cols = aligned.max(16);
        let k = split_kernel(
            m,
            n,
            16,
            acc_cols,
            AccToVecMode::DualModeSplitN,
            (m, half),
            false,
        );
        let mut args = ones_args(m, n, (m, half));
        run_verified(&k, &mut args);
        let got = out(&args, 2);
        let (v0, v1) = (half.min(n), n.saturating_sub(half));
        for aiv in 0..2u64 {
            let real = if aiv == 0 { v0 } else { v1 };
            for i in 0..m {
                for j in 0..real {
                    let col = aiv * half + j;
                    let g = got[((aiv * m + i) * half + j) as usize];
                    assert_eq!(g, ((i + 1) * (col + 1)) as f32, "n={n} aiv{aiv} ({i},{j})");
                }
            }
        }
    }
}

#[test]
fn dual_split_m_tails() {
    for m in [1u64, 7, 8, 15] {
        let n = 32u64;
        let half = m.div_ceil(2) * 2 / 2;
        let k = split_kernel(
            m,
            n,
            16,
            n,
            AccToVecMode::DualModeSplitM,
            (half.max(1), n),
            false,
        );
        let mut args = ones_args(m, n, (half.max(1), n));
        run_verified(&k, &mut args);
        let got = out(&args, 2);
        let rows1 = m - half;
        for i in 0..half {
            for j in 0..n {
                assert_eq!(
                    got[(i * n + j) as usize],
                    ((i + 1) * (j + 1)) as f32,
                    "m={m} aiv0 ({i},{j})"
                );
            }
        }
        for i in 0..half {
            for j in 0..n {
                let g = got[((half + i) * n + j) as usize];
                if i < rows1 {
                    assert_eq!(g, ((half + i + 1) * (j + 1)) as f32, "m={m} aiv1 ({i},{j})");
                } else {
                    // Not received, so not stored (storing it would be poison, tested below).
                    assert_eq!(g, 0.0, "m={m}: AIV1 row {i} must not be stored");
                }
            }
        }
    }
}

/// int32 Acc -> int8 Vec through a per-channel Scaling tile; bit 46 decides signedness.
fn quant_kernel(signed: bool) -> (Kernel, Vec<Arg<'static>>, Vec<i64>) {
    quant_kernel_with(signed, true)
}

/// [`quant_kernel`], with or without the move that writes the Scaling tile.
fn quant_kernel_with(signed: bool, write_scales: bool) -> (Kernel, Vec<Arg<'static>>, Vec<i64>) {
    let (m, k, n) = (16u64, 32u64, 32u64);
    let mut kb = KernelBuilder::new("quant");
    let a = kb.input("a", DType::I8, [m, k]);
    let b = kb.input("b", DType::I8, [k, n]);
    let sw = kb.input("scales", DType::U64, [1, n]);
    let o = kb.output("o", DType::I8, [m, n]);
    let a1 = kb.tile(
        "a1",
        TileType::new(MemSpace::Mat, DType::I8, m, k, Layout::NZ),
    );
    let b1 = kb.tile(
        "b1",
        TileType::new(MemSpace::Mat, DType::I8, k, n, Layout::NZ),
    );
    let s1 = kb.tile(
        "s1",
        TileType::new(MemSpace::Mat, DType::U64, 1, n, Layout::ND),
    );
    let a0 = kb.tile(
        "a0",
        TileType::new(MemSpace::Left, DType::I8, m, k, Layout::NZ),
    );
    let b0 = kb.tile(
        "b0",
        TileType::new(MemSpace::Right, DType::I8, k, n, Layout::ZN),
    );
    let sc = kb.tile(
        "sc",
        TileType::new(MemSpace::Scaling, DType::U64, 1, n, Layout::ND),
    );
    let acc = kb.tile(
        "acc",
        TileType::new(MemSpace::Acc, DType::I32, m, n, Layout::NZ),
    );
    let ub = kb.tile(
        "ub",
        TileType::new(MemSpace::Vec, DType::I8, m, n * 2, Layout::ND).valid(m, n),
    );
    kb.cube(|q| {
        q.load(a1, GmView::nd(a, 0, m, k, k));
        q.load(b1, GmView::nd(b, 0, k, n, n));
        q.load(s1, GmView::nd(sw, 0, 1, n, n));
        q.mov(a0, a1);
        q.mov(b0, b1);
        if write_scales {
            q.mov(sc, s1);
        }
        q.matmul(acc, a0, b0);
        q.mov(ub, acc).scale(Scale::Tile(sc.into()));
        q.set_cross_flag(Pipe::Fix, 0);
    });
    kb.vector(|v| {
        v.if_(Expr::SubBlockIdx.eq_(0), |v| {
            v.wait_cross_flag(Pipe::Mte3, 0);
            v.store(GmView::nd(o, 0, m, n, n), ub);
        });
    });
    let kern = plan(kb.build());
    let av: Vec<i64> = (0..m * k).map(|i| (i as i64 * 37 % 255) - 127).collect();
    let bv: Vec<i64> = (0..k * n).map(|i| (i as i64 * 91 % 255) - 127).collect();
    // Scales with low mantissa bits set: the hardware keeps only bits [31:13].
    let scales: Vec<f32> = (0..n)
        .map(|j| f32::from_bits((0.0011f32 * (j + 1) as f32).to_bits() | 0x1fff))
        .collect();
    let words: Vec<i64> = scales
        .iter()
        .map(|s| QuantWord::new(*s, signed).0 as i64)
        .collect();
    let mut want = vec![];
    for i in 0..m as usize {
        for j in 0..n as usize {
            let acc: i64 = (0..k as usize)
                .map(|p| av[i * k as usize + p] * bv[p * n as usize + j])
                .sum();
            let s = f32::from_bits(scales[j].to_bits() & !0x1fff);
            let y = (acc as f32 * s).round_ties_even();
            want.push(if signed {
                y.clamp(-128.0, 127.0) as i64
            } else {
                y.clamp(0.0, 255.0) as u8 as i8 as i64
            });
        }
    }
    let args = vec![
        Arg::Tensor(GmTensor::from_i64(
            DType::I8,
            &[m as usize, k as usize],
            &av,
        )),
        Arg::Tensor(GmTensor::from_i64(
            DType::I8,
            &[k as usize, n as usize],
            &bv,
        )),
        Arg::Tensor(GmTensor::from_i64(DType::U64, &[1, n as usize], &words)),
        Arg::Tensor(GmTensor::zeros(DType::I8, &[m as usize, n as usize])),
    ];
    (kern, args, want)
}

#[test]
fn per_channel_int8_output_signed_and_unsigned() {
    for signed in [true, false] {
        let (k, mut args, want) = quant_kernel(signed);
        run_verified(&k, &mut args);
        let got = args[3].tensor().unwrap().to_i64();
        assert!(
            want.iter().any(|v| *v < 0) || !signed,
            "the case must have negative outputs"
        );
        assert_eq!(got, want, "signed = {signed}");
    }
}

#[test]
fn nz_reinterpreted_as_zn_is_a_transpose() {
    // X [32, 16] f16 -> Mat NZ; reinterpret as ZN [16, 32]; move to Left (NZ) => X^T; multiply by
    // the identity (Right) => Acc = X^T.
    let dt = DType::F16;
    let mut kb = KernelBuilder::new("transpose");
    let x = kb.input("x", dt, [32, 16]);
    let id = kb.input("id", dt, [32, 32]);
    let o = kb.output("o", DType::F32, [16, 32]);
    let xm = kb.tile("xm", TileType::new(MemSpace::Mat, dt, 32, 16, Layout::NZ));
    let xt = kb.reinterpret(
        "xt",
        xm,
        Reinterpret {
            shape: Some((16, 32)),
            layout: Some(Layout::ZN),
            ..Default::default()
        },
    );
    let im = kb.tile("im", TileType::new(MemSpace::Mat, dt, 32, 32, Layout::NZ));
    let l = kb.tile("l", TileType::new(MemSpace::Left, dt, 16, 32, Layout::NZ));
    let r = kb.tile("r", TileType::new(MemSpace::Right, dt, 32, 32, Layout::ZN));
    let acc = kb.tile(
        "acc",
        TileType::new(MemSpace::Acc, DType::F32, 16, 32, Layout::NZ),
    );
    kb.cube(|q| {
        q.load(xm, GmView::nd(x, 0, 32, 16, 16));
        q.load(im, GmView::nd(id, 0, 32, 32, 32));
        q.set_validshape(xt, 16, 32);
        q.mov(l, xt);
        q.mov(r, im);
        q.matmul(acc, l, r);
        q.store(GmView::nd(o, 0, 16, 32, 32), acc);
    });
    let k = plan(kb.build());
    let xv = values(512, 5);
    let idv: Vec<f32> = (0..1024)
        .map(|i| if i / 32 == i % 32 { 1.0 } else { 0.0 })
        .collect();
    let xt16 = GmTensor::from_f32(dt, &[32, 16], &xv);
    let xr = xt16.to_f32();
    let mut args = vec![
        Arg::Tensor(xt16),
        Arg::Tensor(GmTensor::from_f32(dt, &[32, 32], &idv)),
        Arg::Tensor(GmTensor::zeros(DType::F32, &[16, 32])),
    ];
    run_verified(&k, &mut args);
    let got = out(&args, 2);
    for i in 0..16 {
        for j in 0..32 {
            assert_eq!(got[i * 32 + j], xr[j * 16 + i], "({i},{j})");
        }
    }
}

#[test]
fn scalar_writes_to_one_line_from_two_cores_lose_one() {
    // AIV0 writes element 0 and AIV1 element 1 of the same 64-byte line: each core's data cache
    // writes the whole line back at kernel end, so AIV1's later flush carries a stale element 0.
    // Their second writes hit different lines (16 and 32) and both survive.
    let mut kb = KernelBuilder::new("lines");
    let o = kb.output("o", DType::I32, [48]);
    kb.vector(|v| {
        v.write_scalar(o, Expr::SubBlockIdx, Expr::SubBlockIdx + 10);
        v.write_scalar(o, Expr::SubBlockIdx * 16 + 16, Expr::SubBlockIdx + 20);
    });
    let k = plan(kb.build());
    let mut args = vec![Arg::Tensor(GmTensor::zeros(DType::I32, &[48]))];
    run_verified(&k, &mut args);
    let got = args[0].tensor().unwrap().to_i64();
    assert_eq!(got[0], 0, "AIV0's write to the shared line is lost");
    assert_eq!(got[1], 11);
    assert_eq!(got[16], 20);
    assert_eq!(got[32], 21);
}

#[test]
fn results_do_not_depend_on_thread_count() {
    let (m, k, n) = (32u64, 64u64, 32u64);
    let mut kb = KernelBuilder::new("blocks");
    let a = kb.input("a", DType::F16, [4 * m, k]);
    let b = kb.input("b", DType::F16, [k, n]);
    let c = kb.output("c", DType::F32, [4 * m, n]);
    let a1 = kb.tile(
        "a1",
        TileType::new(MemSpace::Mat, DType::F16, m, k, Layout::NZ),
    );
    let b1 = kb.tile(
        "b1",
        TileType::new(MemSpace::Mat, DType::F16, k, n, Layout::NZ),
    );
    let a0 = kb.tile(
        "a0",
        TileType::new(MemSpace::Left, DType::F16, m, k, Layout::NZ),
    );
    let b0 = kb.tile(
        "b0",
        TileType::new(MemSpace::Right, DType::F16, k, n, Layout::ZN),
    );
    let acc = kb.tile(
        "acc",
        TileType::new(MemSpace::Acc, DType::F32, m, n, Layout::NZ),
    );
    kb.cube(|q| {
        q.load(a1, GmView::nd(a, Expr::BlockIdx * (m * k), m, k, k));
        q.load(b1, GmView::nd(b, 0, k, n, n));
        q.mov(a0, a1);
        q.mov(b0, b1);
        q.matmul(acc, a0, b0);
        q.store(GmView::nd(c, Expr::BlockIdx * (m * n), m, n, n), acc);
    });
    let kern = plan(kb.build());
    let mk = || {
        vec![
            Arg::Tensor(GmTensor::from_f32(
                DType::F16,
                &[4 * m as usize, k as usize],
                &values((4 * m * k) as usize, 9),
            )),
            Arg::Tensor(GmTensor::from_f32(
                DType::F16,
                &[k as usize, n as usize],
                &values((k * n) as usize, 10),
            )),
            Arg::Tensor(GmTensor::zeros(DType::F32, &[4 * m as usize, n as usize])),
        ]
    };
    let mut results = vec![];
    for threads in [1, 2, 4] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let mut args = mk();
        pool.install(|| simulate_on(&kern, &mut args, 4).unwrap());
        results.push(args[2].tensor().unwrap().data.clone());
    }
    assert_eq!(results[0], results[1]);
    assert_eq!(results[0], results[2]);
}

#[test]
fn hang_is_reported_not_spun() {
    let mut kb = KernelBuilder::new("hang");
    kb.cube(|q| q.wait_cross_flag(Pipe::Fix, 3));
    let k = plan(kb.build());
    let err = simulate_on(&k, &mut [], 1).unwrap_err();
    assert!(err.to_string().contains("hangs"), "{err}");
}

#[test]
fn bad_arguments_are_errors() {
    let k = vector_kernel(
        DType::F32,
        8,
        8,
        (8, 8),
        |v, x, y, z| v.add(z, x, y),
        vec_tile(DType::F32, 8, 8),
    );
    let mut args = vec![Arg::Tensor(GmTensor::zeros(DType::F16, &[8, 8]))];
    assert!(simulate_on(&k, &mut args, 1).is_err());
    let mut args = vec![
        Arg::Tensor(GmTensor::zeros(DType::F32, &[8, 8])),
        Arg::Tensor(GmTensor::zeros(DType::F32, &[8, 9])),
        Arg::Tensor(GmTensor::zeros(DType::F32, &[8, 8])),
    ];
    let err = simulate_on(&k, &mut args, 1).unwrap_err();
    assert!(err.to_string().contains("`y`"), "{err}");
}

#[test]
fn vec_moves_extract_and_insert_at_offsets() {
    // Extract the 8x16 window at [4, 16] of a 16x32 tile, then insert it at [8, 0] of a zeroed
    // 16x32 tile (Vec -> Vec), store both.
    let dt = DType::F32;
    let mut kb = KernelBuilder::new("vec_moves");
    let x = kb.input("x", dt, [16, 32]);
    let small = kb.output("small", dt, [8, 16]);
    let big = kb.output("big", dt, [16, 32]);
    let tx = kb.tile("tx", vec_tile(dt, 16, 32));
    let ts = kb.tile("ts", vec_tile(dt, 8, 16));
    let tb = kb.tile("tb", vec_tile(dt, 16, 32));
    kb.vector(|v| {
        v.if_(Expr::SubBlockIdx.eq_(0), |v| {
            v.load(tx, GmView::nd(x, 0, 16, 32, 32));
            v.mov(ts, tx).offset(4, 16);
            v.fill(tb, 0.0f64);
            v.mov(tb, ts).offset(8, 0);
            v.store(GmView::nd(small, 0, 8, 16, 16), ts);
            v.store(GmView::nd(big, 0, 16, 32, 32), tb);
        });
    });
    let k = plan(kb.build());
    let xv = values(512, 21);
    let mut args = vec![
        Arg::Tensor(GmTensor::from_f32(dt, &[16, 32], &xv)),
        Arg::Tensor(GmTensor::zeros(dt, &[8, 16])),
        Arg::Tensor(GmTensor::zeros(dt, &[16, 32])),
    ];
    run_verified(&k, &mut args);
    let (s, b) = (out(&args, 1), out(&args, 2));
    for i in 0..8 {
        for j in 0..16 {
            assert_eq!(s[i * 16 + j], xv[(4 + i) * 32 + 16 + j]);
        }
    }
    for i in 0..16 {
        for j in 0..32 {
            let want = if (8..16).contains(&i) && j < 16 {
                xv[(i - 4) * 32 + 16 + j]
            } else {
                0.0
            };
            assert_eq!(b[i * 32 + j], want, "({i},{j})");
        }
    }
}

#[test]
fn expand_rows_and_columns() {
    let dt = DType::F32;
    let mut kb = KernelBuilder::new("expand");
    let x = kb.input("x", dt, [8, 16]);
    let rows = kb.output("rows", dt, [8, 16]);
    let cols = kb.output("cols", dt, [8, 16]);
    let tx = kb.tile("tx", vec_tile(dt, 8, 16));
    let r = kb.tile("r", TileType::new(MemSpace::Vec, dt, 8, 1, Layout::DN));
    let c = kb.tile("c", vec_tile(dt, 1, 16));
    let t = kb.tile("t", vec_tile(dt, 8, 16));
    kb.vector(|v| {
        v.if_(Expr::SubBlockIdx.eq_(0), |v| {
            v.load(tx, GmView::nd(x, 0, 8, 16, 16));
            v.row_sum(r, tx);
            v.col_max(c, tx);
            v.expand(Axis::Row, t, r);
            v.store(GmView::nd(rows, 0, 8, 16, 16), t);
            v.expand(Axis::Col, t, c);
            v.store(GmView::nd(cols, 0, 8, 16, 16), t);
        });
    });
    let k = plan(kb.build());
    let xv = values(128, 22);
    let mut args = vec![
        Arg::Tensor(GmTensor::from_f32(dt, &[8, 16], &xv)),
        Arg::Tensor(GmTensor::zeros(dt, &[8, 16])),
        Arg::Tensor(GmTensor::zeros(dt, &[8, 16])),
    ];
    run_verified(&k, &mut args);
    let (gr, gc) = (out(&args, 1), out(&args, 2));
    for i in 0..8 {
        let sum: f32 = xv[i * 16..(i + 1) * 16].iter().sum();
        for j in 0..16 {
            assert!((gr[i * 16 + j] - sum).abs() < 1e-5);
            let mx = (0..8)
                .map(|r| xv[r * 16 + j])
                .fold(f32::NEG_INFINITY, f32::max);
            assert_eq!(gc[i * 16 + j], mx);
        }
    }
}

#[test]
fn atomic_add_stores_sum_over_blocks() {
    let dt = DType::F32;
    let mut kb = KernelBuilder::new("atomic");
    let x = kb.input("x", dt, [4, 8, 16]);
    let o = kb.output("o", dt, [8, 16]);
    let t = kb.tile("t", vec_tile(dt, 8, 16));
    kb.vector(|v| {
        v.if_(Expr::SubBlockIdx.eq_(0), |v| {
            v.load(t, GmView::nd(x, Expr::BlockIdx * 128, 8, 16, 16));
            v.store(GmView::nd(o, 0, 8, 16, 16), t).atomic_add();
        });
    });
    let k = plan(kb.build());
    let xv = values(512, 23);
    let mut args = vec![
        Arg::Tensor(GmTensor::from_f32(dt, &[4, 8, 16], &xv)),
        Arg::Tensor(GmTensor::from_f32(dt, &[8, 16], &[1.0; 128])),
    ];
    assert!(tile_backend::verify::verify(&k).is_ok());
    simulate_on(&k, &mut args, 4).unwrap();
    let got = out(&args, 1);
    for e in 0..128 {
        // Applied in block order: ((((1 + b0) + b1) + b2) + b3) in f32.
        let want = (0..4).fold(1.0f32, |acc, b| acc + xv[b * 128 + e]);
        assert_eq!(got[e], want);
    }
}

#[test]
fn matmul_with_bias_accumulate_and_acc_to_mat() {
    // C = A B + bias; then C += A B (accumulate); then C goes Acc -> Mat (f32 -> f16) -> Left
    // and is multiplied by the identity, stored: 2 A B + bias, rounded to f16 on the way.
    let dt = DType::F16;
    let (m, k, n) = (16u64, 32u64, 16u64);
    let mut kb = KernelBuilder::new("bias_acc");
    let a = kb.input("a", dt, [m, k]);
    let b = kb.input("b", dt, [k, n]);
    let bias = kb.input("bias", dt, [1, n]);
    let id = kb.input("id", dt, [n, n]);
    let o = kb.output("o", DType::F32, [m, n]);
    let a1 = kb.tile("a1", TileType::new(MemSpace::Mat, dt, m, k, Layout::NZ));
    let b1 = kb.tile("b1", TileType::new(MemSpace::Mat, dt, k, n, Layout::NZ));
    let bias1 = kb.tile("bias1", TileType::new(MemSpace::Mat, dt, 1, n, Layout::ND));
    let id1 = kb.tile("id1", TileType::new(MemSpace::Mat, dt, n, n, Layout::NZ));
    let c1 = kb.tile("c1", TileType::new(MemSpace::Mat, dt, m, n, Layout::NZ));
    let a0 = kb.tile("a0", TileType::new(MemSpace::Left, dt, m, k, Layout::NZ));
    let b0 = kb.tile("b0", TileType::new(MemSpace::Right, dt, k, n, Layout::ZN));
    let c0 = kb.tile("c0", TileType::new(MemSpace::Left, dt, m, n, Layout::NZ));
    let id0 = kb.tile("id0", TileType::new(MemSpace::Right, dt, n, n, Layout::ZN));
    let bt = kb.tile(
        "bt",
        TileType::new(MemSpace::Bias, DType::F32, 1, n, Layout::ND),
    );
    let acc = kb.tile(
        "acc",
        TileType::new(MemSpace::Acc, DType::F32, m, n, Layout::NZ),
    );
    let acc2 = kb.tile(
        "acc2",
        TileType::new(MemSpace::Acc, DType::F32, m, n, Layout::NZ),
    );
    kb.cube(|q| {
        q.load(a1, GmView::nd(a, 0, m, k, k));
        q.load(b1, GmView::nd(b, 0, k, n, n));
        q.load(bias1, GmView::nd(bias, 0, 1, n, n));
        q.load(id1, GmView::nd(id, 0, n, n, n));
        q.mov(a0, a1);
        q.mov(b0, b1);
        q.mov(bt, bias1);
        q.mov(id0, id1);
        q.matmul(acc, a0, b0).bias(bt);
        q.matmul_acc(acc, a0, b0);
        q.mov(c1, acc);
        q.mov(c0, c1);
        q.matmul(acc2, c0, id0);
        q.store(GmView::nd(o, 0, m, n, n), acc2);
    });
    let kern = plan(kb.build());
    let at = GmTensor::from_f32(dt, &[m as usize, k as usize], &values((m * k) as usize, 31));
    let btn = GmTensor::from_f32(dt, &[k as usize, n as usize], &values((k * n) as usize, 32));
    let biast = GmTensor::from_f32(dt, &[1, n as usize], &values(n as usize, 33));
    let idv: Vec<f32> = (0..n * n)
        .map(|i| if i / n == i % n { 1.0 } else { 0.0 })
        .collect();
    let (av, bv, biasv) = (at.to_f32(), btn.to_f32(), biast.to_f32());
    let mut args = vec![
        Arg::Tensor(at),
        Arg::Tensor(btn),
        Arg::Tensor(biast),
        Arg::Tensor(GmTensor::from_f32(dt, &[n as usize, n as usize], &idv)),
        Arg::Tensor(GmTensor::zeros(DType::F32, &[m as usize, n as usize])),
    ];
    run_verified(&kern, &mut args);
    let got = out(&args, 4);
    let (m, k, n) = (m as usize, k as usize, n as usize);
    for i in 0..m {
        for j in 0..n {
            let ab: f32 = (0..k).map(|p| av[i * k + p] * bv[p * n + j]).sum();
            let want = numeric::round_to(DType::F16, 2.0 * ab + biasv[j]);
            assert!(
                (got[i * n + j] - want).abs() <= 1e-3 * want.abs().max(1.0),
                "({i},{j}) {} vs {want}",
                got[i * n + j]
            );
        }
    }
}

#[test]
fn a_fixpipe_scale_from_a_never_written_scaling_tile_is_poison() {
    // A block's bytes are those the previous block on the thread left (as on the machine), so
    // scale words nobody wrote must stop the run, not pick up an earlier block's scales.
    let (k, mut args, _) = quant_kernel_with(true, false);
    let f = op_fault(simulate_on(&k, &mut args, 1));
    assert!(
        matches!(&f, SimFault::Poison { what: "a Fixpipe scale", tile, .. } if tile == "sc"),
        "{f}"
    );
}

#[test]
fn bytes_an_earlier_block_wrote_are_poison_to_the_next() {
    // Block 0 loads its tile, block 1 only when `both`; each stores it. On one thread block 1
    // runs in block 0's recycled buffers, which still hold block 0's bytes: they must read as
    // never written, not as block 0's data.
    let (r, c) = (4u64, 32u64);
    let build = |both: bool| {
        let mut kb = KernelBuilder::new("stale");
        let x = kb.input("x", DType::F32, [2 * r, c]);
        let z = kb.output("z", DType::F32, [2 * r, c]);
        let t = kb.tile("t", vec_tile(DType::F32, r, c));
        kb.vector(|v| {
            v.if_(Expr::SubBlockIdx.eq_(0), |v| {
                let off = Expr::BlockIdx * (r * c);
                let load = |v: &mut tile_backend::dsl::Body<'_>| {
                    v.load(t, GmView::nd(x, off.clone(), r, c, c))
                };
                if both {
                    load(v);
                } else {
                    v.if_(Expr::BlockIdx.eq_(0), load);
                }
                v.store(GmView::nd(z, off.clone(), r, c, c), t);
            });
        });
        plan(kb.build())
    };
    let n = (2 * r * c) as usize;
    let xv = values(n, 3);
    for both in [true, false] {
        let mut args = vec![
            Arg::Tensor(GmTensor::from_f32(
                DType::F32,
                &[n / c as usize, c as usize],
                &xv,
            )),
            Arg::Tensor(GmTensor::zeros(DType::F32, &[n / c as usize, c as usize])),
        ];
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let k = build(both);
        let r = pool.install(|| simulate_on(&k, &mut args, 2));
        if both {
            r.unwrap();
            assert_eq!(
                out(&args, 1),
                GmTensor::from_f32(DType::F32, &[n], &xv).to_f32()
            );
        } else {
            let err = r.unwrap_err();
            assert!(
                matches!(
                    &err,
                    SimError::Op {
                        block: 1,
                        fault: SimFault::Poison {
                            what: "a store to GM",
                            ..
                        },
                        ..
                    }
                ),
                "{err}"
            );
        }
    }
}

#[test]
fn poison_reaching_gm_or_a_value_is_an_error() {
    // SplitM of 7 rows: AIV1 receives 3 rows of its 4-row tile; storing the whole tile sends a
    // never-written row to GM.
    let k = split_kernel(7, 32, 16, 32, AccToVecMode::DualModeSplitM, (4, 32), true);
    let mut args = ones_args(7, 32, (4, 32));
    let err = simulate_on(&k, &mut args, 1).unwrap_err();
    assert!(
        matches!(
            &err,
            SimError::Op {
                core: "AIV1",
                fault: SimFault::Poison {
                    element: (3, 0),
                    ..
                },
                ..
            }
        ),
        "{err}"
    );

    // A matmul whose K tail was never filled: the cube multiplies the padding, so the valid
    // outputs are poisoned; declaring a zero pad and filling it fixes the kernel.
    for fill in [false, true] {
        let (m, kk, n) = (16u64, 10u64, 16u64);
        let dt = DType::F16;
        let pad = if fill { PadValue::Zero } else { PadValue::Null };
        let mut kb = KernelBuilder::new("k_tail");
        let a = kb.input("a", dt, [m, kk]);
        let b = kb.input("b", dt, [kk, n]);
        let c = kb.output("c", DType::F32, [m, n]);
        let a1 = kb.tile(
            "a1",
            TileType::new(MemSpace::Mat, dt, m, 16, Layout::NZ)
                .valid(m, kk)
                .pad(pad),
        );
        let b1 = kb.tile(
            "b1",
            TileType::new(MemSpace::Mat, dt, 16, n, Layout::NZ)
                .valid(kk, n)
                .pad(pad),
        );
        let a0 = kb.tile(
            "a0",
            TileType::new(MemSpace::Left, dt, m, 16, Layout::NZ).valid(m, kk),
        );
        let b0 = kb.tile(
            "b0",
            TileType::new(MemSpace::Right, dt, 16, n, Layout::ZN).valid(kk, n),
        );
        let acc = kb.tile(
            "acc",
            TileType::new(MemSpace::Acc, DType::F32, m, n, Layout::NZ),
        );
        kb.cube(|q| {
            q.load(a1, GmView::nd(a, 0, m, kk, kk));
            q.load(b1, GmView::nd(b, 0, kk, n, n));
            if fill {
                q.fillpad(a1);
                q.fillpad(b1);
            }
            q.mov(a0, a1);
            q.mov(b0, b1);
            q.matmul(acc, a0, b0);
            q.store(GmView::nd(c, 0, m, n, n), acc);
        });
        let k = plan(kb.build());
        let mut args = vec![
            Arg::Tensor(GmTensor::from_f32(
                dt,
                &[m as usize, kk as usize],
                &values((m * kk) as usize, 41),
            )),
            Arg::Tensor(GmTensor::from_f32(
                dt,
                &[kk as usize, n as usize],
                &values((kk * n) as usize, 42),
            )),
            Arg::Tensor(GmTensor::zeros(DType::F32, &[m as usize, n as usize])),
        ];
        let r = simulate_on(&k, &mut args, 1);
        if fill {
            r.unwrap();
            assert!(out(&args, 2).iter().all(|v| v.is_finite()));
        } else {
            let f = op_fault(r);
            assert!(
                matches!(
                    f,
                    SimFault::Poison {
                        what: "matmul output",
                        ..
                    }
                ),
                "{f}"
            );
        }
    }
}

#[test]
fn out_of_range_gm_access_is_an_error_not_a_read() {
    // The window asks for 16 rows of a 8-row tensor: the simulator refuses instead of reading
    // past the argument.
    let dt = DType::F32;
    let mut kb = KernelBuilder::new("oob");
    let x = kb.input("x", dt, [8, 16]);
    let o = kb.output("o", dt, [16, 16]);
    let t = kb.tile("t", vec_tile(dt, 16, 16));
    kb.vector(|v| {
        v.load(t, GmView::nd(x, 0, 16, 16, 16));
        v.store(GmView::nd(o, 0, 16, 16, 16), t);
    });
    let k = plan(kb.build());
    let mut args = vec![
        Arg::Tensor(GmTensor::zeros(dt, &[8, 16])),
        Arg::Tensor(GmTensor::zeros(dt, &[16, 16])),
    ];
    let f = op_fault(simulate_on(&k, &mut args, 1));
    assert!(
        matches!(&f, SimFault::GmOutOfBounds { name, .. } if name == "x"),
        "{f}"
    );
}

#[test]
fn out_of_range_gm_store_is_an_error_and_writes_nothing() {
    // A 16-row tile stored through a 16-row window into an 8-row output: the simulator refuses
    // the whole store and the output keeps its bytes.
    let dt = DType::F32;
    let mut kb = KernelBuilder::new("oob_store");
    let x = kb.input("x", dt, [16, 16]);
    let o = kb.output("o", dt, [8, 16]);
    let t = kb.tile("t", vec_tile(dt, 16, 16));
    kb.vector(|v| {
        v.if_(Expr::SubBlockIdx.eq_(0), |v| {
            v.load(t, GmView::nd(x, 0, 16, 16, 16));
            v.store(GmView::nd(o, 0, 16, 16, 16), t);
        });
    });
    let k = plan(kb.build());
    let before = values(8 * 16, 9);
    let mut args = vec![
        Arg::Tensor(GmTensor::from_f32(dt, &[16, 16], &values(16 * 16, 8))),
        Arg::Tensor(GmTensor::from_f32(dt, &[8, 16], &before)),
    ];
    let f = op_fault(simulate_on(&k, &mut args, 1));
    assert!(
        matches!(&f, SimFault::GmOutOfBounds { name, size: 512, .. } if name == "o"),
        "{f}"
    );
    assert_eq!(out(&args, 1), before);
}

/// AIV0 loads `keys [1, 8]` (i32) into the first `loaded` elements of a UB tile, waits MTE2 ->
/// S, reads element `at` of the tile with the scalar unit and writes it to `out[0]`.
fn tile_scalar_kernel(loaded: u64, at: Expr) -> Kernel {
    let mut kb = KernelBuilder::new("tile_scalar");
    let keys = kb.input("keys", DType::I32, [1u64, 8]);
    let out = kb.output("out", DType::I32, [1u64, 16]);
    let ub = kb.tile("keys_ub", vec_tile(DType::I32, 1, 8).dynamic());
    kb.vector(|v| {
        v.if_(Expr::SubBlockIdx.eq_(0), |v| {
            v.set_validshape(ub, 1, loaded as i64);
            v.load(ub, GmView::nd(keys, 0, 1u64, loaded, 8u64));
            v.set_flag(Pipe::Mte2, Pipe::S, 0);
            v.wait_flag(Pipe::Mte2, Pipe::S, 0);
            let k = v.read_tile_scalar("key", ub, at);
            v.write_scalar(out, 0, k);
        });
    });
    plan(kb.build())
}

fn tile_scalar_run(k: &Kernel) -> Result<i64, SimError> {
    let keys: Vec<i64> = vec![-7, 3, 1 << 30, -(1 << 31), 0, 9, 11, 13];
    let mut args = vec![
        Arg::Tensor(GmTensor::from_i64(DType::I32, &[1, 8], &keys)),
        Arg::Tensor(GmTensor::zeros(DType::I32, &[1, 16])),
    ];
    support::simulate(k, &mut args)?;
    let t = args[1].tensor().expect("out is a tensor");
    Ok(numeric::decode_i64(DType::I32, &t.data[..4]))
}

#[test]
fn a_scalar_read_of_a_ub_tile_returns_the_loaded_element() {
    for (at, want) in [(0, -7), (2, 1 << 30), (3, -(1 << 31)), (7, 13)] {
        let got = tile_scalar_run(&tile_scalar_kernel(8, Expr::from(at))).expect("runs");
        assert_eq!(got, want, "element {at}");
    }
}

#[test]
fn a_scalar_read_of_a_never_written_or_outside_element_is_an_error() {
    // Only 4 elements were loaded: element 5 is poison.
    let f = op_fault(tile_scalar_run(&tile_scalar_kernel(4, Expr::from(5))));
    assert!(
        matches!(
            &f,
            SimFault::Poison { what: "read_tile_scalar", tile, element: (0, 5) } if tile == "keys_ub"
        ),
        "{f}"
    );
    // A runtime index past the tile (the verifier checks only constants).
    let f = op_fault(tile_scalar_run(&tile_scalar_kernel(
        8,
        Expr::SubBlockIdx + 8,
    )));
    assert!(
        matches!(&f, SimFault::ScalarIndex { name, index: 8, len: 8 } if name == "keys_ub"),
        "{f}"
    );
}
