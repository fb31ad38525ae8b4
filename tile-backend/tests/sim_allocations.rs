//! Heap allocations of a steady-state launch of a lowered kernel ([`sim::Program`]), counted by
//! a counting global allocator: neither the launch framework (argument checks, blocks, cores,
//! their code and scalar state) nor the instructions (their scratch) allocate once a thread has
//! run the kernel a few times.
//!
//! The count is per thread, so the tests of this binary do not count each other's allocations.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use tile_backend::arch::Arch;
use tile_backend::sim::{self, Arg, GmInOut, GmInput, Program, SimOptions};
use tile_backend::{ir, passes};

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded unchanged to the system allocator, which upholds
// `GlobalAlloc`'s contract; the count is a thread-local `Cell` with a const initialiser and no
// destructor, so touching it neither allocates nor re-enters the allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: forwarded with the caller's layout (see the impl's comment).
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with this layout (every allocation goes there).
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: as `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        // SAFETY: `ptr` came from `System` with `layout`; the caller upholds `new_size`'s rules.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCS.with(Cell::get)
}

/// [`tile_backend::kernels::add_one`], compiled.
fn add_one() -> passes::Compiled {
    passes::compile(&tile_backend::kernels::add_one(), &Arch::ascend950()).expect("compiles")
}

#[test]
fn a_steady_state_launch_allocates_nothing() {
    let arch = Arch::ascend950();
    let k = add_one();
    let p = Program::lower(&k, &arch).expect("lowers");
    let rows = 4usize;
    let x: Vec<u8> = (0..rows * 64)
        .flat_map(|i| (i as f32).to_le_bytes())
        .collect();
    let mut y = vec![0u8; rows * 64 * 4];
    let launch = |y: &mut [u8]| {
        let mut args = [
            Arg::Int(rows as i64),
            Arg::Input(GmInput {
                dtype: ir::DType::F32,
                shape: vec![rows, 64],
                data: &x,
            }),
            Arg::InOut(GmInOut {
                dtype: ir::DType::F32,
                shape: vec![rows, 64],
                data: y,
            }),
        ];
        let before = allocations();
        sim::run_program(&p, &mut args, SimOptions { block_dim: rows }).expect("runs");
        allocations() - before
    };
    // The first launches fill the thread's pools.
    for _ in 0..3 {
        launch(&mut y);
    }
    // A launch whose first block a busy host holds up for over a third of a millisecond hands
    // the other three to rayon's pool (`sim::run_shared`), and spawning those jobs allocates:
    // the least of five launches is a launch run on the caller's thread, as every one is here
    // on an idle host.
    let steady = (0..5).map(|_| launch(&mut y)).min().unwrap_or(u64::MAX);
    let got: Vec<f32> = y
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    assert!(got.iter().enumerate().all(|(i, v)| *v == i as f32 + 1.0));
    assert_eq!(steady, 0, "heap allocations of a steady-state launch");
}

/// The least heap allocations of five one-block launches of `p` on `args`, after three that
/// let the thread's pools fill.
fn steady_one_block_allocations(p: &Program<'_, '_>, args: &mut [Arg]) -> u64 {
    let mut launch = || {
        let before = allocations();
        sim::run_program(p, args, SimOptions { block_dim: 1 }).expect("runs");
        allocations() - before
    };
    for _ in 0..3 {
        launch();
    }
    (0..5).map(|_| launch()).min().unwrap_or(u64::MAX)
}

/// Every reference kernel (a matmul; an attention tile with its softmax and cross-core flags;
/// a gather-matmul with padded tiles, a block-table gather and a Fixpipe store; a top-k built
/// from TSORT32 and TMRGSORT), one block each: the instructions themselves allocate nothing
/// either once the thread has run them (their scratch comes from the core's pool and the sort
/// instructions' pair lists from the thread's; the flags and the prefetch queue are the last
/// block's).
#[test]
fn the_reference_kernels_steady_launches_allocate_nothing() {
    let arch = Arch::ascend950();
    let kernels = tile_backend::kernels::all();
    assert_eq!(
        kernels.len(),
        4,
        "matmul, attention tile, gather-matmul, top-k"
    );
    for kernel in kernels {
        let k = passes::compile(&kernel, &arch).expect("compiles");
        let p = Program::lower(&k, &arch).expect("lowers");
        let mut args = sim::io::generate(&k, 7).expect("inputs");
        let steady = steady_one_block_allocations(&p, &mut args);
        assert_eq!(
            steady, 0,
            "{}: heap allocations of a steady-state launch",
            k.name
        );
    }
}

/// `y = x` with the 16 x 16 f32 tile's columns past `n` padded with the dtype's maximum
/// (`fillpad`), once through an ND tile and once through a DN one (the two fill paths); one
/// block: a steady launch allocates nothing either.
#[test]
fn a_fill_pad_launch_allocates_nothing() {
    use ir::{DType, Expr, GmView, Layout, MemSpace, PadValue, TileType};
    use tile_backend::dsl::KernelBuilder;
    let arch = Arch::ascend950();
    for layout in [Layout::ND, Layout::DN] {
        let mut kb = KernelBuilder::new("fill_pad");
        let n = Expr::Param(kb.scalar("n", DType::I64));
        let x = kb.input("x", DType::F32, [Expr::from(16), Expr::from(16)]);
        let y = kb.output("y", DType::F32, [Expr::from(16), Expr::from(16)]);
        let ty = TileType::new(MemSpace::Vec, DType::F32, 16, 16, layout)
            .dynamic()
            .pad(PadValue::Max);
        let t = kb.tile("t", ty);
        kb.vector(|v| {
            v.if_(Expr::SubBlockIdx.eq_(0), |v| {
                v.set_validshape(t, 16, n.clone());
                let view = |p| match layout {
                    Layout::DN => GmView::dn(p, 0, 16, n.clone(), 16),
                    _ => GmView::nd(p, 0, 16, n.clone(), 16),
                };
                v.load(t, view(x));
                v.fillpad(t);
                v.set_validshape(t, 16, 16);
                let out = match layout {
                    Layout::DN => GmView::dn(y, 0, 16, 16, 16),
                    _ => GmView::nd(y, 0, 16, 16, 16),
                };
                v.store(out, t);
            });
        });
        let k = passes::compile(&kb.build(), &arch).expect("compiles");
        let p = Program::lower(&k, &arch).expect("lowers");
        let mut args = sim::io::generate(&k, 3).expect("inputs");
        if let Some(a) = args.first_mut() {
            *a = Arg::Int(5);
        }
        let steady = steady_one_block_allocations(&p, &mut args);
        assert_eq!(
            steady, 0,
            "{layout:?}: heap allocations of a steady-state launch"
        );
    }
}
