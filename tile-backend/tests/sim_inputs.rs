//! Borrowed read-only inputs (`Arg::Input`): read in place like owned tensors, never written.

use tile_backend::arch::Arch;
use tile_backend::dsl::KernelBuilder;
use tile_backend::ir::*;
use tile_backend::passes;
use tile_backend::sim::{self, Arg, GmTensor, SimError, SimOptions};

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
    passes::compile(&kb.build(), &Arch::ascend950()).expect("the kernel compiles")
}

fn x_values() -> GmTensor {
    let v: Vec<f32> = (0..N * N).map(|i| i as f32 * 0.25 - 7.0).collect();
    GmTensor::from_f32(DType::F32, &[N as usize, N as usize], &v)
}

fn run(kernel: &Kernel, args: &mut [Arg<'_>]) -> Result<(), SimError> {
    sim::run(
        kernel,
        &Arch::ascend950(),
        args,
        SimOptions { block_dim: 1 },
    )
    .map(|_| ())
}

#[test]
fn a_borrowed_input_reads_like_an_owned_one() {
    let k = double_kernel(false);
    let x = x_values();
    let zeros = || GmTensor::zeros(DType::F32, &[N as usize, N as usize]);
    let mut owned = vec![Arg::Tensor(x.clone()), Arg::Tensor(zeros())];
    run(&k, &mut owned).expect("owned inputs run");
    let mut borrowed = vec![Arg::Input(x.as_input()), Arg::Tensor(zeros())];
    run(&k, &mut borrowed).expect("borrowed inputs run");
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
    match run(&k, &mut args) {
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
    let e = run(&k, &mut args).expect_err("a store into a borrowed input is an error");
    assert!(
        matches!(&e, SimError::Op { why, .. } if why.contains("read-only borrowed input")),
        "{e}"
    );
    // Owned, the same kernel writes x in place.
    let mut args = vec![Arg::Tensor(x.clone()), Arg::Tensor(zeros)];
    run(&k, &mut args).expect("an owned input may be written");
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
    let e = run(&k, &mut args).expect_err("a scalar write into a borrowed input is an error");
    assert!(
        matches!(&e, SimError::Op { why, .. } if why.contains("borrowed input is read-only")),
        "{e}"
    );
    let mut args = vec![Arg::Tensor(x)];
    run(&k, &mut args).expect("an owned input may be written");
    assert_eq!(args[0].tensor().expect("x").to_i64()[3], 42);
}
