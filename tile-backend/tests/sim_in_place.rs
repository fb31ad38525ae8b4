//! The simulator computes f32 vector ops whose destination is also their first operand in place
//! in the UB (no scratch round trip). Each such op must give bit for bit what the same op gives
//! into a separate tile (the scratch path, itself checked against scalar models in `sim_ops.rs`),
//! on full and partial valid shapes (rows of a partial region are a tile row apart), and must
//! still refuse never-written bytes.

#[path = "support/mod.rs"]
mod support;

use support::{planned, simulate};
use tile_backend::arch::Arch;
use tile_backend::dsl::{Body, KernelBuilder};
use tile_backend::ir::*;
use tile_backend::sim::{Arg, GmTensor, SimError};

const R: u64 = 8;
const C: u64 = 64;

/// A vector op under test: `op(dst, x, y, row_operand, col_operand)`.
type OpFn = Box<dyn Fn(&mut Body<'_>, TileId, TileId, TileId, TileId, TileId)>;

fn cases() -> Vec<(String, OpFn)> {
    let mut v: Vec<(String, OpFn)> = Vec::new();
    for u in [
        UnaryOp::Exp,
        UnaryOp::Ln,
        UnaryOp::Abs,
        UnaryOp::Neg,
        UnaryOp::Sqrt,
        UnaryOp::Rsqrt,
        UnaryOp::Recip,
        UnaryOp::Relu,
    ] {
        v.push((
            format!("unary {u:?}"),
            Box::new(move |b, d, x, _, _, _| b.unary(u, d, x)),
        ));
    }
    for op in [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Max,
        BinaryOp::Min,
    ] {
        v.push((
            format!("binary {op:?}"),
            Box::new(move |b, d, x, y, _, _| b.binary(op, d, x, y)),
        ));
        // The second operand aliasing the destination (read where it lies only when apart);
        // max and min of x with itself are x, which the test below counts as doing nothing.
        if !matches!(op, BinaryOp::Max | BinaryOp::Min) {
            v.push((
                format!("binary {op:?} of x with itself"),
                Box::new(move |b, d, x, _, _, _| b.binary(op, d, x, x)),
            ));
        }
        v.push((
            format!("binary_scalar {op:?}"),
            Box::new(move |b, d, x, _, _, _| b.binary_scalar(op, d, x, -0.375)),
        ));
        v.push((
            format!("row broadcast {op:?}"),
            Box::new(move |b, d, x, _, rw, _| b.broadcast(op, Axis::Row, d, x, rw)),
        ));
        v.push((
            format!("column broadcast {op:?}"),
            Box::new(move |b, d, x, _, _, cl| b.broadcast(op, Axis::Col, d, x, cl)),
        ));
    }
    v
}

fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = tile_backend::sim::io::Rng::new(seed);
    (0..n)
        .map(|i| {
            // Zeros (in the data, not the broadcast operands, seeds 3 and 4, so every op
            // changes something), negatives (NaN from ln / sqrt) and a spread of magnitudes.
            let v = rng.uniform(-3.0, 3.0);
            match (i % 11, seed) {
                (0, 1 | 2) => 0.0,
                (1, 1 | 2) => -0.0,
                _ if v == 0.0 => 0.5,
                _ => v,
            }
        })
        .collect()
}

/// Loads x and y (valid `vr x vc`), the row operand `[vr, 1]` and the column operand `[1, vc]`,
/// applies `op` into x itself (`in_place`) or into a separate tile, and stores the result.
fn kernel(op: &OpFn, in_place: bool, (vr, vc): (u64, u64)) -> Kernel {
    let dt = DType::F32;
    let mut kb = KernelBuilder::new("in_place");
    let x = kb.input("x", dt, [R, C]);
    let y = kb.input("y", dt, [R, C]);
    let rw = kb.input("row", dt, [R, 1]);
    let cl = kb.input("col", dt, [1, C]);
    let z = kb.output("z", dt, [R, C]);
    let tile = |r, c, l| TileType::new(MemSpace::Vec, dt, r, c, l).dynamic();
    let tx = kb.tile("tx", tile(R, C, Layout::ND));
    let ty = kb.tile("ty", tile(R, C, Layout::ND));
    let tz = kb.tile("tz", tile(R, C, Layout::ND));
    let trw = kb.tile("trow", tile(R, 1, Layout::DN));
    let tcl = kb.tile("tcol", tile(1, C, Layout::ND));
    kb.vector(|v| {
        v.if_(Expr::SubBlockIdx.eq_(0), |v| {
            for t in [tx, ty, tz] {
                v.set_validshape(t, vr, vc);
            }
            v.set_validshape(trw, vr, 1);
            v.set_validshape(tcl, 1, vc);
            v.load(tx, GmView::nd(x, 0, vr, vc, C));
            v.load(ty, GmView::nd(y, 0, vr, vc, C));
            v.load(trw, GmView::dn(rw, 0, vr, 1, R));
            v.load(tcl, GmView::nd(cl, 0, 1, vc, C));
            let dst = if in_place { tx } else { tz };
            op(v, dst, tx, ty, trw, tcl);
            v.store(GmView::nd(z, 0, vr, vc, C), dst);
        });
    });
    let k = kb.build();
    planned(k)
}

fn run(k: &Kernel) -> Result<Vec<u32>, SimError> {
    let t = |shape: &[usize], seed| {
        let n = shape.iter().product();
        Arg::Tensor(GmTensor::from_f32(DType::F32, shape, &values(n, seed)))
    };
    let mut args = vec![
        t(&[R as usize, C as usize], 1),
        t(&[R as usize, C as usize], 2),
        t(&[R as usize, 1], 3),
        t(&[1, C as usize], 4),
        Arg::Tensor(GmTensor::zeros(DType::F32, &[R as usize, C as usize])),
    ];
    simulate(k, &mut args)?;
    Ok(args[4]
        .tensor()
        .map(|t| t.to_f32().iter().map(|v| v.to_bits()).collect())
        .unwrap_or_default())
}

#[test]
fn in_place_f32_ops_equal_the_scratch_path_bit_for_bit() {
    let mut checked = 0;
    for (name, op) in cases() {
        // Whole tile, a partial region (rows a tile row apart), one row, one column.
        for valid in [(R, C), (5, 24), (1, C), (R, 1)] {
            let a = run(&kernel(&op, true, valid)).unwrap_or_else(|e| panic!("{name}: {e}"));
            let b = run(&kernel(&op, false, valid)).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(a, b, "{name}, valid {valid:?}: in place differs");
            // The op did something: the region is not just x copied.
            let x = values((R * C) as usize, 1);
            let changed = (0..valid.0 as usize)
                .flat_map(|i| (0..valid.1 as usize).map(move |j| i * C as usize + j))
                .any(|e| a[e] != x[e].to_bits());
            assert!(changed, "{name}, valid {valid:?}: output equals the input");
            checked += 1;
        }
    }
    assert_eq!(checked, 36 * 4);
}

#[test]
fn fill_and_reductions_read_and_write_f32_tiles_in_place() {
    // fill then a row sum and a column max of the filled tile: exact values.
    let dt = DType::F32;
    let mut kb = KernelBuilder::new("fill_reduce");
    let rs = kb.output("row_sums", dt, [R, 1]);
    let cm = kb.output("col_max", dt, [1, C]);
    let tile = |r, c, l| TileType::new(MemSpace::Vec, dt, r, c, l).dynamic();
    let tx = kb.tile("tx", tile(R, C, Layout::ND));
    let trs = kb.tile("trs", tile(R, 1, Layout::DN));
    let tcm = kb.tile("tcm", tile(1, C, Layout::ND));
    kb.vector(|v| {
        v.if_(Expr::SubBlockIdx.eq_(0), |v| {
            v.set_validshape(tx, 6, 40);
            v.set_validshape(trs, 6, 1);
            v.set_validshape(tcm, 1, 40);
            v.fill(tx, 0.25);
            v.row_sum(trs, tx);
            v.col_max(tcm, tx);
            v.store(GmView::dn(rs, 0, 6, 1, R), trs);
            v.store(GmView::nd(cm, 0, 1, 40, C), tcm);
        });
    });
    let k = tile_backend::passes::memory::plan(&kb.build(), &Arch::ascend950()).unwrap();
    let mut args = vec![
        Arg::Tensor(GmTensor::zeros(dt, &[R as usize, 1])),
        Arg::Tensor(GmTensor::zeros(dt, &[1, C as usize])),
    ];
    simulate(&k, &mut args).unwrap();
    let sums = args[0].tensor().unwrap().to_f32();
    let maxes = args[1].tensor().unwrap().to_f32();
    assert_eq!(&sums[..6], &[10.0; 6]);
    assert_eq!(&sums[6..], &[0.0; 2]);
    assert_eq!(&maxes[..40], &[0.25; 40]);
    assert_eq!(&maxes[40..], &[0.0; 24]);
}

/// Runs a kernel `[R, C]` x -> z whose AIV 0 section `body(v, x, z, tx, ty)` works on two
/// f32 ND UB tiles, and returns the simulator's error (`why` it must fail).
fn poison_error(
    why: &str,
    seed: u64,
    body: impl Fn(&mut Body<'_>, ParamId, ParamId, TileId, TileId),
) -> String {
    let dt = DType::F32;
    let mut kb = KernelBuilder::new("poison");
    let x = kb.input("x", dt, [R, C]);
    let z = kb.output("z", dt, [R, C]);
    let tile = || TileType::new(MemSpace::Vec, dt, R, C, Layout::ND).dynamic();
    let tx = kb.tile("tx", tile());
    let ty = kb.tile("ty", tile());
    kb.vector(|v| v.if_(Expr::SubBlockIdx.eq_(0), |v| body(v, x, z, tx, ty)));
    let k = tile_backend::passes::memory::plan(&kb.build(), &Arch::ascend950()).unwrap();
    let mut args = vec![
        Arg::Tensor(GmTensor::from_f32(
            dt,
            &[R as usize, C as usize],
            &values((R * C) as usize, seed),
        )),
        Arg::Tensor(GmTensor::zeros(dt, &[R as usize, C as usize])),
    ];
    simulate(&k, &mut args)
        .map(|_| ())
        .expect_err(why)
        .to_string()
}

#[test]
fn an_in_place_op_on_never_written_bytes_is_poison() {
    // x is loaded over 4 of its 8 valid rows only: exp in place must refuse the rest.
    let msg = poison_error("exp over never-written rows", 5, |v, x, z, tx, _| {
        v.set_validshape(tx, 4, C);
        v.load(tx, GmView::nd(x, 0, 4, C, C));
        v.set_validshape(tx, R, C);
        v.exp(tx, tx);
        v.store(GmView::nd(z, 0, R, C, C), tx);
    });
    assert!(
        msg.contains("poison") && msg.contains("tx") && msg.contains("[4, 0]"),
        "{msg}"
    );
}

#[test]
fn an_in_place_binary_op_with_a_never_written_operand_is_poison() {
    // x is whole, y is loaded over 4 of its 8 valid rows: x += y in place must refuse y's rest.
    let msg = poison_error(
        "y's last 4 rows were never written",
        6,
        |v, x, z, tx, ty| {
            v.set_validshape(tx, R, C);
            v.load(tx, GmView::nd(x, 0, R, C, C));
            v.set_validshape(ty, 4, C);
            v.load(ty, GmView::nd(x, 0, 4, C, C));
            v.set_validshape(ty, R, C);
            v.add(tx, tx, ty);
            v.store(GmView::nd(z, 0, R, C, C), tx);
        },
    );
    assert!(msg.contains("poison"), "{msg}");
}

#[test]
fn a_row_broadcast_by_exactly_one_leaves_those_rows_and_only_those_as_they_were() {
    // The online softmax rescales its output by exp(0) = 1 in every row whose maximum held;
    // the simulator leaves such rows untouched. Every op must still give x op k exactly: rows
    // of factor 1 against rows of other factors, for the ops that skip (mul, div) and those
    // that must not (add, sub with 1 change the row).
    let dt = DType::F32;
    let factors: Vec<f32> = (0..R)
        .map(|i| [1.0, -2.5, 1.0, 0.5][i as usize % 4])
        .collect();
    let x = values((R * C) as usize, 1);
    for op in [BinaryOp::Mul, BinaryOp::Div, BinaryOp::Add, BinaryOp::Sub] {
        let mut kb = KernelBuilder::new("row_by_one");
        let xin = kb.input("x", dt, [R, C]);
        let rin = kb.input("row", dt, [R, 1]);
        let z = kb.output("z", dt, [R, C]);
        let tile = |r, c, l| TileType::new(MemSpace::Vec, dt, r, c, l);
        let tx = kb.tile("tx", tile(R, C, Layout::ND));
        let trw = kb.tile("trow", tile(R, 1, Layout::DN));
        kb.vector(|v| {
            v.if_(Expr::SubBlockIdx.eq_(0), |v| {
                v.load(tx, GmView::nd(xin, 0, R, C, C));
                v.load(trw, GmView::dn(rin, 0, R, 1, R));
                v.broadcast(op, Axis::Row, tx, tx, trw);
                v.store(GmView::nd(z, 0, R, C, C), tx);
            });
        });
        let k = tile_backend::passes::memory::plan(&kb.build(), &Arch::ascend950()).unwrap();
        let mut args = vec![
            Arg::Tensor(GmTensor::from_f32(dt, &[R as usize, C as usize], &x)),
            Arg::Tensor(GmTensor::from_f32(dt, &[R as usize, 1], &factors)),
            Arg::Tensor(GmTensor::zeros(dt, &[R as usize, C as usize])),
        ];
        simulate(&k, &mut args).unwrap_or_else(|e| panic!("{op:?}: {e}"));
        let got = args[2].tensor().map(|t| t.to_f32()).unwrap_or_default();
        assert_eq!(got.len(), x.len(), "{op:?}");
        for (e, (g, v)) in got.iter().zip(&x).enumerate() {
            let k = factors[e / C as usize];
            let want = match op {
                BinaryOp::Mul => v * k,
                BinaryOp::Div => v / k,
                BinaryOp::Add => v + k,
                _ => v - k,
            };
            assert_eq!(
                g.to_bits(),
                want.to_bits(),
                "{op:?}: z[{}, {}] = {g}, expected {v} {op:?} {k} = {want}",
                e / C as usize,
                e % C as usize
            );
        }
    }
}
