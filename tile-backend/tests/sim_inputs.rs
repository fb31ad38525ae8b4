//! Borrowed arguments: read-only inputs (`Arg::Input`) are read in place like owned tensors and
//! never written; mutable borrows (`Arg::InOut`) are read and written in place exactly like owned
//! tensors (`Arg::Tensor`): same results, atomic adds, races and hazards.

#[path = "support/mod.rs"]
mod support;

use support::simulate;
use tile_backend::arch::Arch;
use tile_backend::dsl::KernelBuilder;
use tile_backend::ir::*;
use tile_backend::passes;
use tile_backend::sim::hazards::{self, HazardKind};
use tile_backend::sim::trace::Mem;
use tile_backend::sim::{Arg, GmTensor, SimError, SimFault};

const N: u64 = 16;

/// AIV0 loads `x [16, 16]` f32, doubles it and stores it to `y`; with `in_place`, it also
/// stores the doubled tile back into `x` (an input parameter).
fn double_kernel(in_place: bool) -> Kernel {
    let mut kb = KernelBuilder::new("double");
    let x = kb.input("x", DType::F32, [N, N]);
    let y = kb.output("y", DType::F32, [N, N]);
    let t = kb.tile(
        "t",
        TileType::new(MemSpace::Vec, DType::F32, N, N, Layout::ND),
    );
    kb.vector(|v| {
        v.if_(Expr::SubBlockIdx.lt(1), |b| {
            b.load(t, GmView::nd(x, 0, N, N, N));
            b.add(t, t, t);
            b.store(GmView::nd(y, 0, N, N, N), t);
            if in_place {
                b.store(GmView::nd(x, 0, N, N, N), t);
            }
        });
    });
    passes::compile(&kb.build(), &Arch::ascend950())
        .expect("the kernel compiles")
        .into_kernel()
}

fn x_values() -> GmTensor {
    let v: Vec<f32> = (0..N * N).map(|i| i as f32 * 0.25 - 7.0).collect();
    GmTensor::from_f32(DType::F32, &[N as usize, N as usize], &v)
}

#[test]
fn a_borrowed_input_reads_like_an_owned_one() {
    let k = double_kernel(false);
    let x = x_values();
    let zeros = || GmTensor::zeros(DType::F32, &[N as usize, N as usize]);
    let mut owned = vec![Arg::Tensor(x.clone()), Arg::Tensor(zeros())];
    simulate(&k, &mut owned).expect("owned inputs run");
    let mut borrowed = vec![Arg::Input(x.as_input()), Arg::Tensor(zeros())];
    simulate(&k, &mut borrowed).expect("borrowed inputs run");
    let want: Vec<f32> = x.to_f32().iter().map(|v| v * 2.0).collect();
    assert_eq!(owned[1].tensor().expect("y").to_f32(), want);
    assert_eq!(borrowed[1].tensor().expect("y").to_f32(), want);
    // The borrowed bytes are those of `x`, untouched.
    assert_eq!(borrowed[0].as_gm().expect("x").data, &x.data[..]);
}

#[test]
fn an_output_cannot_be_a_borrowed_input() {
    let k = double_kernel(false);
    let (x, y) = (x_values(), x_values());
    let mut args = vec![Arg::Tensor(x), Arg::Input(y.as_input())];
    match simulate(&k, &mut args) {
        Err(SimError::BadArg { name, why }) => {
            assert_eq!(name, "y");
            assert!(why.contains("borrowed"), "{why}");
        }
        other => panic!("expected BadArg for y, got {other:?}"),
    }
}

#[test]
fn a_kernel_that_writes_a_borrowed_input_fails_and_an_owned_one_is_written() {
    let k = double_kernel(true);
    let x = x_values();
    let zeros = GmTensor::zeros(DType::F32, &[N as usize, N as usize]);
    let mut args = vec![Arg::Input(x.as_input()), Arg::Tensor(zeros.clone())];
    let e = simulate(&k, &mut args).expect_err("a store into a borrowed input is an error");
    assert!(
        matches!(&e, SimError::Op { fault: SimFault::GmReadOnly { name, .. }, .. } if name == "x"),
        "{e}"
    );
    // Owned, the same kernel writes x in place.
    let mut args = vec![Arg::Tensor(x.clone()), Arg::Tensor(zeros)];
    simulate(&k, &mut args).expect("an owned input may be written");
    let want: Vec<f32> = x.to_f32().iter().map(|v| v * 2.0).collect();
    assert_eq!(args[0].tensor().expect("x").to_f32(), want);
}

#[test]
fn a_scalar_write_into_a_borrowed_input_is_an_error() {
    // The cube writes element 3 of an int32 input `x` through its data cache.
    let mut kb = KernelBuilder::new("poke");
    let x = kb.input("x", DType::I32, [16u64]);
    kb.cube(|c| c.write_scalar(x, 3, 42));
    let k = passes::compile(&kb.build(), &Arch::ascend950()).expect("the kernel compiles");
    let x = GmTensor::from_i64(DType::I32, &[16], &[0; 16]);
    let mut args = vec![Arg::Input(x.as_input())];
    let e = simulate(&k, &mut args).expect_err("a scalar write into a borrowed input is an error");
    assert!(
        matches!(&e, SimError::Op { fault: SimFault::GmReadOnly { name, .. }, .. } if name == "x"),
        "{e}"
    );
    let mut args = vec![Arg::Tensor(x)];
    simulate(&k, &mut args).expect("an owned input may be written");
    assert_eq!(args[0].tensor().expect("x").to_i64()[3], 42);
}

// ---------------------------------------------------------------------------------------------
// Arg::InOut
// ---------------------------------------------------------------------------------------------

/// Values of `y` before a run: distinct from anything the kernels write.
fn y_values() -> GmTensor {
    let v: Vec<f32> = (0..N * N).map(|i| 100.0 + i as f32 * 0.5).collect();
    GmTensor::from_f32(DType::F32, &[N as usize, N as usize], &v)
}

#[test]
fn an_inout_arg_is_read_and_written_in_place_like_an_owned_one() {
    // x (an input parameter) is read and overwritten with 2x; y (an output) is written.
    let k = double_kernel(true);
    let (x, y) = (x_values(), y_values());
    let mut owned = vec![Arg::Tensor(x.clone()), Arg::Tensor(y.clone())];
    simulate(&k, &mut owned).expect("owned arguments run");
    let (mut x_in, mut y_in) = (x.clone(), y.clone());
    let mut borrowed = vec![Arg::InOut(x_in.as_inout()), Arg::InOut(y_in.as_inout())];
    simulate(&k, &mut borrowed).expect("borrowed in/out arguments run");
    // Views of the results while the borrows are alive, then the caller's own bytes.
    assert_eq!(borrowed[0].as_gm(), owned[0].as_gm());
    assert_eq!(borrowed[1].as_gm(), owned[1].as_gm());
    assert!(
        borrowed[0].tensor().is_none(),
        "an InOut is not an owned tensor"
    );
    drop(borrowed);
    let want: Vec<f32> = x.to_f32().iter().map(|v| v * 2.0).collect();
    assert_eq!(x_in.to_f32(), want, "x was read, then written in place");
    assert_eq!(y_in.to_f32(), want, "y was written in place");
    assert_eq!(owned[0].tensor(), Some(&x_in));
    assert_eq!(owned[1].tensor(), Some(&y_in));
}

#[test]
fn an_inout_arg_keeps_the_bytes_the_kernel_does_not_write() {
    // The kernel reads x [16, 16] and writes only rows 4..8 of y [16, 16]; every other byte of
    // y keeps its prior value, bit for bit (NaN payloads included).
    let mut kb = KernelBuilder::new("rows");
    let x = kb.input("x", DType::F32, [N, N]);
    let y = kb.output("y", DType::F32, [N, N]);
    let t = kb.tile(
        "t",
        TileType::new(MemSpace::Vec, DType::F32, 4, N, Layout::ND),
    );
    kb.vector(|v| {
        v.if_(Expr::SubBlockIdx.lt(1), |b| {
            b.load(t, GmView::nd(x, 0, 4u64, N, N));
            b.store(GmView::nd(y, 4 * N, 4u64, N, N), t);
        });
    });
    let k = passes::compile(&kb.build(), &Arch::ascend950()).expect("the kernel compiles");
    let x = x_values();
    let mut y = GmTensor::zeros(DType::F32, &[N as usize, N as usize]);
    for (i, b) in y.data.chunks_exact_mut(4).enumerate() {
        b.copy_from_slice(&(0x7fc0_0000u32 | i as u32).to_le_bytes());
    }
    let y0 = y.clone();
    let mut owned = vec![Arg::Tensor(x.clone()), Arg::Tensor(y0.clone())];
    simulate(&k, &mut owned).expect("owned arguments run");
    let mut args = vec![Arg::Input(x.as_input()), Arg::InOut(y.as_inout())];
    simulate(&k, &mut args).expect("an InOut output runs");
    drop(args);
    let rb = N as usize * 4;
    assert_eq!(y.data[..4 * rb], y0.data[..4 * rb]);
    assert_eq!(y.data[4 * rb..8 * rb], x.data[..4 * rb]);
    assert_eq!(y.data[8 * rb..], y0.data[8 * rb..]);
    assert_eq!(owned[1].tensor(), Some(&y));
}

#[test]
fn an_inout_arg_is_checked_like_an_owned_one() {
    let k = double_kernel(false);
    let x = x_values();
    let mut wrong_shape = GmTensor::zeros(DType::F32, &[N as usize, N as usize + 1]);
    let mut args = vec![Arg::Input(x.as_input()), Arg::InOut(wrong_shape.as_inout())];
    match simulate(&k, &mut args) {
        Err(SimError::BadArg { name, why }) => {
            assert_eq!(name, "y");
            assert!(why.contains("shape"), "{why}");
        }
        other => panic!("expected BadArg for y's shape, got {other:?}"),
    }
    let mut wrong_dtype = GmTensor::zeros(DType::F16, &[N as usize, N as usize]);
    let mut args = vec![Arg::Input(x.as_input()), Arg::InOut(wrong_dtype.as_inout())];
    match simulate(&k, &mut args) {
        Err(SimError::BadArg { name, why }) => {
            assert_eq!(name, "y");
            assert!(why.contains("f16") || why.contains("F16"), "{why}");
        }
        other => panic!("expected BadArg for y's dtype, got {other:?}"),
    }
    assert!(wrong_shape.data.iter().all(|&b| b == 0), "nothing written");
    assert!(wrong_dtype.data.iter().all(|&b| b == 0), "nothing written");
}

/// Each AIV of every block loads 16 rows of `x [64, 16]` f32 (rows `16 * sub_block`) and stores
/// them to the same rows of `y`; `atomic` makes the store an atomic add. With two blocks, both
/// blocks store the same rows: a GM race unless the stores are atomic.
fn shared_rows_kernel(atomic: bool) -> Kernel {
    let mut kb = KernelBuilder::new("shared_rows");
    let x = kb.input("x", DType::F32, [64u64, 16]);
    let y = kb.output("y", DType::F32, [64u64, 16]);
    let ub = kb.tile(
        "ub",
        TileType::new(MemSpace::Vec, DType::F32, 16, 16, Layout::ND),
    );
    kb.vector(|v| {
        let row = Expr::SubBlockIdx * 16u64;
        v.load(ub, GmView::nd(x, row.clone() * 16u64, 16u64, 16u64, 16u64));
        let st = v.store(GmView::nd(y, row * 16u64, 16u64, 16u64, 16u64), ub);
        if atomic {
            st.atomic_add();
        }
    });
    passes::compile(&kb.build(), &Arch::ascend950())
        .expect("the kernel compiles")
        .into_kernel()
}

fn shared_x() -> GmTensor {
    let v: Vec<f32> = (0..64 * 16).map(|i| (i % 37) as f32 * 0.5 - 4.0).collect();
    GmTensor::from_f32(DType::F32, &[64, 16], &v)
}

fn shared_y() -> GmTensor {
    let v: Vec<f32> = (0..64 * 16).map(|i| (i % 11) as f32 + 1000.0).collect();
    GmTensor::from_f32(DType::F32, &[64, 16], &v)
}

#[test]
fn atomic_adds_land_in_an_inout_arg() {
    let k = shared_rows_kernel(true);
    let (x, y0) = (shared_x(), shared_y());
    let mut owned = vec![Arg::Tensor(x.clone()), Arg::Tensor(y0.clone())];
    support::simulate_on(&k, &mut owned, 2).expect("owned arguments run");
    let mut y = y0.clone();
    let mut args = vec![Arg::Input(x.as_input()), Arg::InOut(y.as_inout())];
    support::simulate_on(&k, &mut args, 2).expect("an InOut output runs");
    drop(args);
    // Rows 0..32 get x twice (one add per block) on top of their prior value; rows 32.. keep it.
    let (xv, y0v) = (x.to_f32(), y0.to_f32());
    let want: Vec<f32> = (0..64 * 16)
        .map(|i| {
            if i < 32 * 16 {
                y0v[i] + 2.0 * xv[i]
            } else {
                y0v[i]
            }
        })
        .collect();
    assert_eq!(y.to_f32(), want);
    assert_eq!(owned[1].tensor(), Some(&y));
}

#[test]
fn a_cross_block_race_on_an_inout_arg_is_reported_like_on_an_owned_one() {
    let arch = Arch::ascend950();
    let (x, y0) = (shared_x(), shared_y());
    for atomic in [false, true] {
        let k = shared_rows_kernel(atomic);
        let mut owned = vec![Arg::Tensor(x.clone()), Arg::Tensor(y0.clone())];
        let trace = support::trace_on(&k, &arch, &mut owned, 2).expect("owned run");
        let owned_hz = hazards::check(&k, &trace);
        let mut y = y0.clone();
        let mut args = vec![Arg::Input(x.as_input()), Arg::InOut(y.as_inout())];
        let trace = support::trace_on(&k, &arch, &mut args, 2).expect("InOut run");
        let inout_hz = hazards::check(&k, &trace);
        drop(args);
        assert_eq!(inout_hz, owned_hz, "atomic {atomic}");
        assert_eq!(owned[1].tensor(), Some(&y), "atomic {atomic}");
        let cross_block_gm_race = inout_hz.iter().any(|h| {
            h.kind == HazardKind::Race
                && h.ops[0].block != h.ops[1].block
                && matches!(h.bytes.map(|b| b.mem), Some(Mem::Gm(1)))
        });
        // Plain stores from both blocks race on y; atomic adds do not.
        assert_eq!(
            cross_block_gm_race, !atomic,
            "atomic {atomic}: {inout_hz:#?}"
        );
        if atomic {
            assert!(inout_hz.is_empty(), "{inout_hz:#?}");
        }
    }
}

#[test]
fn a_scalar_write_into_an_inout_arg_lands_in_place() {
    // The cube reads element 5 of an int32 `x` and writes it plus 1 to element 3 through its data
    // cache (flushed at kernel end); the rest of the 64-byte line keeps its values.
    let mut kb = KernelBuilder::new("poke");
    let x = kb.input("x", DType::I32, [16u64]);
    kb.cube(|c| {
        let v = c.read_scalar("v", x, 5);
        c.write_scalar(x, 3, Expr::from(v) + 1);
    });
    let k = passes::compile(&kb.build(), &Arch::ascend950()).expect("the kernel compiles");
    let vals: Vec<i64> = (0..16).map(|i| 10 * i).collect();
    let mut owned = vec![Arg::Tensor(GmTensor::from_i64(DType::I32, &[16], &vals))];
    simulate(&k, &mut owned).expect("an owned input may be written");
    let mut x = GmTensor::from_i64(DType::I32, &[16], &vals);
    let mut args = vec![Arg::InOut(x.as_inout())];
    simulate(&k, &mut args).expect("an InOut input may be written");
    drop(args);
    let mut want = vals.clone();
    want[3] = 51;
    assert_eq!(x.to_i64(), want);
    assert_eq!(owned[0].tensor(), Some(&x));
}
