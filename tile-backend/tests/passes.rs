//! Memory planning, sync insertion and channel lowering (`tile_backend::passes`).

use std::collections::HashMap;
use tile_backend::arch::Arch;
use tile_backend::dsl::{KernelBuilder, Reinterpret};
use tile_backend::ir::*;
use tile_backend::passes::memory::{buffer_range, plan, PlanError};
use tile_backend::passes::sync::{insert, SyncError};
use tile_backend::passes::{compile, CompileError};

mod support;

fn arch() -> Arch {
    Arch::ascend950()
}

fn flat(stmts: &[Stmt]) -> Vec<Op> {
    let mut v = Vec::new();
    walk_ops(stmts, &mut |op| v.push(op.clone()));
    v
}

fn is_sync(op: &Op) -> bool {
    matches!(
        op,
        Op::Sync(SyncOp::SetFlag { .. })
            | Op::Sync(SyncOp::WaitFlag { .. })
            | Op::Sync(SyncOp::SetCrossFlag { .. })
            | Op::Sync(SyncOp::WaitCrossFlag { .. })
    )
}

fn set(src: Pipe, dst: Pipe, event: u8) -> Op {
    Op::Sync(SyncOp::SetFlag { src, dst, event })
}
fn wait(src: Pipe, dst: Pipe, event: u8) -> Op {
    Op::Sync(SyncOp::WaitFlag { src, dst, event })
}

/// One line per op: its name, or the flag it is.
fn show(ops: &[Op]) -> Vec<String> {
    ops.iter()
        .map(|op| match op {
            Op::Sync(SyncOp::SetFlag { src, dst, event }) => format!("set {src}->{dst} {event}"),
            Op::Sync(SyncOp::WaitFlag { src, dst, event }) => format!("wait {src}->{dst} {event}"),
            Op::Sync(SyncOp::SetCrossFlag { pipe, id }) => format!("xset {pipe} {id}"),
            Op::Sync(SyncOp::WaitCrossFlag { pipe, id }) => format!("xwait {pipe} {id}"),
            other => other.name().to_string(),
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// An independent checker: unrolls a section for concrete arguments, counts binary flags, and
// checks with vector clocks that every pair of conflicting accesses on different pipes is
// ordered (program order per pipe, set/wait flags, barrier(ALL), unit flag of phase Final).
// ---------------------------------------------------------------------------------------------

const PIPES: [Pipe; 7] = [
    Pipe::Mte2,
    Pipe::Mte1,
    Pipe::M,
    Pipe::Fix,
    Pipe::V,
    Pipe::Mte3,
    Pipe::S,
];
fn pi(p: Pipe) -> usize {
    p.index().expect("tracked pipe")
}

struct Env<'a> {
    vars: &'a HashMap<VarId, i64>,
    params: &'a HashMap<ParamId, i64>,
}
impl ExprEnv for Env<'_> {
    fn var(&self, v: VarId) -> Option<i64> {
        self.vars.get(&v).copied()
    }
    fn param(&self, p: ParamId) -> Option<i64> {
        self.params.get(&p).copied()
    }
    fn block_idx(&self) -> Option<i64> {
        Some(0)
    }
    fn block_dim(&self) -> Option<i64> {
        Some(1)
    }
    fn sub_block_idx(&self) -> Option<i64> {
        Some(0)
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum R {
    Mem(MemSpace, u64, u64),
    Gm(ParamId),
}
fn overlap(a: R, b: R) -> bool {
    match (a, b) {
        (R::Mem(s, a0, a1), R::Mem(t, b0, b1)) => s == t && a0 < b1 && b0 < a1,
        (R::Gm(x), R::Gm(y)) => x == y,
        _ => false,
    }
}

struct Inst {
    name: String,
    pipe: usize,
    own: u64,
    vc: [u64; 7],
    acc: Vec<(R, bool)>,
}

struct Checker<'k> {
    kernel: &'k Kernel,
    arch: Arch,
    params: HashMap<ParamId, i64>,
    vars: HashMap<VarId, i64>,
    vc: [[u64; 7]; 7],
    flags: HashMap<(Pipe, Pipe, u8), [u64; 7]>,
    units: HashMap<TileId, [u64; 7]>,
    trace: Vec<Inst>,
    errors: Vec<String>,
    /// Cross-core flag ops in execution order, for the cluster check.
    cross: Vec<Op>,
}

fn join(a: &mut [u64; 7], b: &[u64; 7]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x = (*x).max(*y);
    }
}

impl<'k> Checker<'k> {
    fn run(kernel: &'k Kernel, stmts: &[Stmt], params: &[(ParamId, i64)]) -> Checker<'k> {
        let mut c = Checker {
            kernel,
            arch: arch(),
            params: params.iter().copied().collect(),
            vars: HashMap::new(),
            vc: [[0; 7]; 7],
            flags: HashMap::new(),
            units: HashMap::new(),
            trace: vec![],
            errors: vec![],
            cross: vec![],
        };
        c.stmts(stmts);
        for (k, _) in c.flags.iter() {
            c.errors.push(format!("flag {k:?} set but never waited"));
        }
        c.check_races();
        c
    }

    fn eval(&self, e: &Expr) -> i64 {
        e.eval(&Env {
            vars: &self.vars,
            params: &self.params,
        })
        .expect("evaluable")
    }

    fn stmts(&mut self, stmts: &[Stmt]) {
        for s in stmts {
            match s {
                Stmt::Op(op) => self.op(op),
                Stmt::For {
                    var,
                    start,
                    end,
                    step,
                    body,
                } => {
                    let (a, b) = (self.eval(start), self.eval(end));
                    let mut i = a;
                    while i < b {
                        self.vars.insert(*var, i);
                        self.stmts(body);
                        i += step;
                    }
                }
                Stmt::If {
                    cond,
                    then_body,
                    else_body,
                } => {
                    if self.eval(cond) != 0 {
                        self.stmts(then_body)
                    } else {
                        self.stmts(else_body)
                    }
                }
                Stmt::Let { var, value } => {
                    let v = self.eval(value);
                    self.vars.insert(*var, v);
                }
            }
        }
    }

    fn tile(&self, r: &TileRef) -> R {
        let slot = self.eval(&r.slot);
        let (s, a, b) = buffer_range(self.kernel, r.tile, slot).expect("planned");
        R::Mem(s, a, b)
    }

    fn op(&mut self, op: &Op) {
        match op {
            Op::Sync(SyncOp::SetFlag { src, dst, event }) => {
                let key = (*src, *dst, *event);
                if self.flags.contains_key(&key) {
                    self.errors
                        .push(format!("{key:?} set twice without a wait (lost signal)"));
                }
                self.flags.insert(key, self.vc[pi(*src)]);
                return;
            }
            Op::Sync(SyncOp::WaitFlag { src, dst, event }) => {
                let key = (*src, *dst, *event);
                match self.flags.remove(&key) {
                    Some(t) => join(&mut self.vc[pi(*dst)], &t),
                    None => self.errors.push(format!("{key:?} waited but not set")),
                }
                return;
            }
            Op::Sync(SyncOp::Barrier { pipe: Pipe::All }) => {
                let mut all = [0; 7];
                for v in &self.vc {
                    join(&mut all, v);
                }
                self.vc = [all; 7];
                return;
            }
            Op::Sync(SyncOp::SetCrossFlag { .. }) | Op::Sync(SyncOp::WaitCrossFlag { .. }) => {
                self.cross.push(op.clone());
                return;
            }
            Op::Sync(SyncOp::ChannelAcquire { .. })
            | Op::Sync(SyncOp::ChannelPush { .. })
            | Op::Sync(SyncOp::ChannelPop { .. })
            | Op::Sync(SyncOp::ChannelRelease { .. }) => {
                self.errors.push("channel op left in the output".into());
                return;
            }
            _ => {}
        }
        let k = self.kernel;
        let space_of = |r: &TileRef| k.try_tile(r.tile).map(|d| d.ty.space);
        let Some(pipe) = self.arch.pipe_of(op, &space_of) else {
            self.errors.push(format!("{} has no pipe", op.name()));
            return;
        };
        let p = pi(pipe);
        if let Op::Move(MoveOp::Move {
            src,
            phase: Some(Phase::Final),
            ..
        }) = op
        {
            if let Some(t) = self.units.get(&k.root_tile(src.tile)) {
                let t = *t;
                join(&mut self.vc[p], &t);
            }
        }
        let mut acc: Vec<(R, bool)> = op
            .tile_reads()
            .iter()
            .map(|r| (self.tile(r), false))
            .collect();
        acc.extend(op.tile_writes().iter().map(|r| (self.tile(r), true)));
        match op {
            Op::LoadStore(LoadStoreOp::Load { src, .. }) => acc.push((R::Gm(src.tensor), false)),
            Op::LoadStore(LoadStoreOp::Store { dst, .. }) => acc.push((R::Gm(dst.tensor), true)),
            _ => {}
        }
        self.vc[p][p] += 1;
        self.trace.push(Inst {
            name: op.name().into(),
            pipe: p,
            own: self.vc[p][p],
            vc: self.vc[p],
            acc,
        });
        if let Op::Matmul(MatmulOp::Matmul {
            dst,
            phase: Some(Phase::Final),
            ..
        }) = op
        {
            self.units.insert(k.root_tile(dst.tile), self.vc[p]);
        }
    }

    fn check_races(&mut self) {
        for (j, b) in self.trace.iter().enumerate() {
            for a in &self.trace[..j] {
                if a.pipe == b.pipe {
                    continue;
                }
                let conflict = a.acc.iter().any(|(ra, wa)| {
                    b.acc
                        .iter()
                        .any(|(rb, wb)| (*wa || *wb) && overlap(*ra, *rb))
                });
                if conflict && a.own > b.vc[a.pipe] {
                    self.errors.push(format!(
                        "race: {} on {} and {} on {} are unordered",
                        a.name, PIPES[a.pipe], b.name, PIPES[b.pipe]
                    ));
                }
            }
        }
    }
}

fn assert_clean(kernel: &Kernel, section: CoreKind, params: &[(ParamId, i64)]) {
    let c = Checker::run(kernel, kernel.section(section), params);
    assert!(
        c.errors.is_empty(),
        "{section} with {params:?}: {:#?}\n{:#?}",
        c.errors,
        show(&flat(kernel.section(section)))
    );
}

// ---------------------------------------------------------------------------------------------
// Memory planning
// ---------------------------------------------------------------------------------------------

#[test]
fn plan_aligns_groups_fixed_addresses_and_aliases() {
    let mut kb = KernelBuilder::new("plan");
    let vt = |r, c| TileType::new(MemSpace::Vec, DType::F32, r, c, Layout::ND);
    let a = kb.tile("a", vt(1, 8)); // 32 B -> stride 128
    let g = kb.tile_group(
        "g",
        TileType::new(MemSpace::Vec, DType::F16, 16, 48, Layout::ND),
        2,
    ); // 1536 B x 2
    let f = kb.tile_at("f", vt(8, 64), 4096); // [4096, 6144)
    let b = kb.tile("b", vt(32, 64)); // 8192 B: does not fit below f
    let c = kb.tile("c", vt(1, 8)); // fits in the hole below f
    let r = kb.reinterpret(
        "r",
        g,
        Reinterpret {
            dtype: Some(DType::F32),
            shape: Some((16, 24)),
            layout: None,
        },
    );
    let bias0 = kb.tile(
        "bias0",
        TileType::new(MemSpace::Bias, DType::F32, 1, 8, Layout::ND),
    );
    let bias1 = kb.tile(
        "bias1",
        TileType::new(MemSpace::Bias, DType::F32, 1, 8, Layout::ND),
    );
    let sc0 = kb.tile(
        "sc0",
        TileType::new(MemSpace::Scaling, DType::U64, 1, 4, Layout::ND),
    );
    let sc1 = kb.tile(
        "sc1",
        TileType::new(MemSpace::Scaling, DType::U64, 1, 4, Layout::ND),
    );
    let k = plan(&kb.build(), &arch()).expect("fits");
    let addr = |t: TileId| k.tile(t).addr;
    assert_eq!(addr(a), Some(0));
    assert_eq!(addr(g), Some(128));
    assert_eq!(addr(f), Some(4096), "fixed address kept");
    assert_eq!(addr(b), Some(6144), "first fit after the fixed tile");
    assert_eq!(addr(c), Some(128 + 2 * 1536), "first fit in the hole");
    assert_eq!(addr(r), None, "an alias has no address of its own");
    assert_eq!(addr(bias0), Some(0));
    assert_eq!(addr(bias1), Some(64), "Bias plans at 64 B");
    assert_eq!(addr(sc0), Some(0));
    assert_eq!(addr(sc1), Some(128), "Scaling plans at 128 B");
    // Group strides and alias resolution.
    assert_eq!(
        buffer_range(&k, g, 0),
        Some((MemSpace::Vec, 128, 128 + 1536))
    );
    assert_eq!(
        buffer_range(&k, g, 1),
        Some((MemSpace::Vec, 1664, 1664 + 1536))
    );
    assert_eq!(buffer_range(&k, g, 3), buffer_range(&k, g, 1), "slot mod 2");
    assert_eq!(buffer_range(&k, g, -1), buffer_range(&k, g, 1), "Euclidean");
    assert_eq!(
        buffer_range(&k, r, 1),
        Some((MemSpace::Vec, 1664, 1664 + 16 * 24 * 4)),
        "the alias resolves to its root's buffer 1, with its own footprint"
    );
    assert_eq!(buffer_range(&k, a, 0), Some((MemSpace::Vec, 0, 32)));
    assert_eq!(buffer_range(&k, TileId(99), 0), None);
    // Unplanned kernels resolve to nothing.
    let mut kb2 = KernelBuilder::new("unplanned");
    let t = kb2.tile("t", vt(1, 8));
    assert_eq!(buffer_range(&kb2.build(), t, 0), None);
}

#[test]
fn plan_packs_unaligned_sizes_at_128_bytes() {
    let mut kb = KernelBuilder::new("pack");
    let ids: Vec<TileId> = (0..4)
        .map(|i| {
            kb.tile(
                format!("t{i}"),
                TileType::new(MemSpace::Mat, DType::F16, 16, 16 * (i + 1), Layout::NZ),
            )
        })
        .collect();
    let k = plan(&kb.build(), &arch()).expect("fits");
    let mut expect = 0;
    for (i, id) in ids.iter().enumerate() {
        let d = k.tile(*id);
        assert_eq!(d.addr, Some(expect), "tile {i}");
        assert_eq!(d.addr.unwrap_or(1) % 128, 0);
        expect += d.ty.bytes().div_ceil(128) * 128;
    }
}

#[test]
fn ub_overflow_names_space_bytes_and_tiles_largest_first() {
    let mut kb = KernelBuilder::new("big");
    let vt = |rows| TileType::new(MemSpace::Vec, DType::F32, rows, 256, Layout::ND);
    kb.tile("small", vt(64)); // 64 KiB
    kb.tile("large", vt(128)); // 128 KiB
    kb.tile("medium", vt(96)); // 96 KiB
    let err = plan(&kb.build(), &arch()).expect_err("288 KiB of UB does not fit");
    match &err {
        PlanError::Capacity {
            space,
            needed,
            available,
            tiles,
        } => {
            assert_eq!(*space, MemSpace::Vec);
            assert_eq!(*needed, 288 * 1024);
            assert_eq!(*available, 240 * 1024);
            let names: Vec<&str> = tiles.iter().map(|t| t.name.as_str()).collect();
            assert_eq!(names, ["large", "medium", "small"]);
            assert_eq!(tiles[0].bytes, 128 * 1024);
        }
        other => panic!("wrong error {other:?}"),
    }
    let msg = err.to_string();
    assert!(
        msg.starts_with("tiles need 294912 B of Vec (UB) but 245760 B are available"),
        "{msg}"
    );
    assert!(
        msg.ends_with("`large` 131072 B, `medium` 98304 B, `small` 65536 B"),
        "{msg}"
    );
}

#[test]
fn ub_between_safe_and_physical_capacity_is_refused_by_the_planner() {
    // 244 KiB: the verifier only warns (above 240, below 248), the planner refuses.
    let mut kb = KernelBuilder::new("tight");
    kb.tile(
        "t",
        TileType::new(MemSpace::Vec, DType::F32, 244, 256, Layout::ND),
    );
    let err = compile(&kb.build(), &arch()).expect_err("above the safe capacity");
    assert!(
        matches!(
            err,
            CompileError::Plan(PlanError::Capacity {
                space: MemSpace::Vec,
                ..
            })
        ),
        "{err}"
    );
}

#[test]
fn compile_reports_verifier_errors() {
    let mut kb = KernelBuilder::new("bad");
    let v = kb.tile(
        "v",
        TileType::new(MemSpace::Vec, DType::F16, 16, 16, Layout::NZ),
    );
    let l = kb.tile(
        "l",
        TileType::new(MemSpace::Left, DType::F16, 16, 16, Layout::NZ),
    );
    kb.cube(|c| {
        c.mov(l, v);
    });
    match compile(&kb.build(), &arch()) {
        Err(CompileError::Verify(e)) => assert!(e.to_string().contains("move-path"), "{e}"),
        other => panic!("expected a verify error, got {other:?}"),
    }
}

#[test]
fn sync_needs_a_planned_kernel() {
    let (k, _) = straight_matmul(false, false);
    assert!(matches!(
        insert(&k, &arch()),
        Err(SyncError::NotPlanned { .. })
    ));
}

// ---------------------------------------------------------------------------------------------
// Straight-line sync insertion
// ---------------------------------------------------------------------------------------------

/// GM -> Mat -> Left/Right -> matmul -> store (or Fixpipe move with phase).
fn straight_matmul(hand_synced: bool, phased_move: bool) -> (Kernel, ParamId) {
    let (m, k, n) = (32u64, 64u64, 32u64);
    let mut kb = KernelBuilder::new("mm");
    let a = kb.input("a", DType::F16, [m, k]);
    let b = kb.input("b", DType::F16, [k, n]);
    let c = kb.output("c", DType::F32, [m, n]);
    let a_l1 = kb.tile(
        "a_l1",
        TileType::new(MemSpace::Mat, DType::F16, m, k, Layout::NZ),
    );
    let b_l1 = kb.tile(
        "b_l1",
        TileType::new(MemSpace::Mat, DType::F16, k, n, Layout::NZ),
    );
    let a_l0 = kb.tile(
        "a_l0",
        TileType::new(MemSpace::Left, DType::F16, m, k, Layout::NZ),
    );
    let b_l0 = kb.tile(
        "b_l0",
        TileType::new(MemSpace::Right, DType::F16, k, n, Layout::ZN),
    );
    let acc = kb.tile(
        "acc",
        TileType::new(MemSpace::Acc, DType::F32, m, n, Layout::NZ),
    );
    let out = kb.tile(
        "out",
        TileType::new(MemSpace::Mat, DType::F32, m, n, Layout::NZ),
    );
    kb.cube(|c0| {
        c0.load(a_l1, GmView::nd(a, 0, m, k, k));
        c0.load(b_l1, GmView::nd(b, 0, k, n, n));
        if hand_synced {
            c0.set_flag(Pipe::Mte2, Pipe::Mte1, 0);
            c0.wait_flag(Pipe::Mte2, Pipe::Mte1, 0);
        }
        c0.mov(a_l0, a_l1);
        c0.mov(b_l0, b_l1);
        if hand_synced {
            c0.set_flag(Pipe::Mte1, Pipe::M, 0);
            c0.wait_flag(Pipe::Mte1, Pipe::M, 0);
        }
        if phased_move {
            c0.matmul(acc, a_l0, b_l0).phase(Phase::Final);
            c0.mov(out, acc).phase(Phase::Final);
        } else {
            c0.matmul(acc, a_l0, b_l0).phase(Phase::Final);
            c0.store(GmView::nd(c, 0, m, n, n), acc);
        }
    });
    (kb.build(), c)
}

#[test]
fn straight_line_gets_mte2_mte1_m_fix_flags() {
    let (k, _) = straight_matmul(false, false);
    let out = compile(&k, &arch()).expect("compiles");
    use Pipe::*;
    assert_eq!(
        flat(&out.cube),
        vec![
            flat(&k.cube)[0].clone(),
            set(Mte2, Mte1, 0),
            flat(&k.cube)[1].clone(),
            set(Mte2, Mte1, 1),
            wait(Mte2, Mte1, 0),
            flat(&k.cube)[2].clone(),
            wait(Mte2, Mte1, 1),
            flat(&k.cube)[3].clone(),
            set(Mte1, M, 0),
            wait(Mte1, M, 0),
            flat(&k.cube)[4].clone(),
            set(M, Fix, 0),
            wait(M, Fix, 0),
            flat(&k.cube)[5].clone(),
        ]
    );
    assert_clean(&out, CoreKind::Cube, &[]);
    // Every data op and its order are kept.
    let data: Vec<Op> = flat(&out.cube)
        .into_iter()
        .filter(|o| !is_sync(o))
        .collect();
    assert_eq!(data, flat(&k.cube));
}

#[test]
fn phase_final_matmul_to_fixpipe_move_needs_no_flag() {
    let (k, _) = straight_matmul(false, true);
    let out = compile(&k, &arch()).expect("compiles");
    let names = show(&flat(&out.cube));
    assert!(
        !names.iter().any(|s| s.contains("M->FIX")),
        "the unit flag orders matmul -> move: {names:?}"
    );
    assert_eq!(names.iter().filter(|s| s.starts_with("set ")).count(), 3);
    assert_clean(&out, CoreKind::Cube, &[]);

    // Without phase on the matmul, the flag is needed.
    let mut k2 = k.clone();
    for s in &mut k2.cube {
        if let Stmt::Op(Op::Matmul(MatmulOp::Matmul { phase, .. })) = s {
            *phase = None;
        }
    }
    let out2 = tile_backend::passes::sync::insert(&plan(&k2, &arch()).expect("plans"), &arch())
        .expect("syncs");
    let names2 = show(&flat(&out2.cube));
    assert!(names2.contains(&"set M->FIX 0".to_string()), "{names2:?}");
}

#[test]
fn hand_written_syncs_are_kept_and_not_duplicated() {
    let (k, _) = straight_matmul(true, false);
    let out = compile(&k, &arch()).expect("compiles");
    let mut expect = flat(&k.cube);
    // Only the matmul -> store edge was missing.
    let mm = expect
        .iter()
        .position(|o| matches!(o, Op::Matmul(MatmulOp::Matmul { .. })))
        .expect("matmul");
    expect.insert(mm + 1, set(Pipe::M, Pipe::Fix, 0));
    expect.insert(mm + 2, wait(Pipe::M, Pipe::Fix, 0));
    assert_eq!(flat(&out.cube), expect);
    // Compiling the compiled kernel adds nothing.
    let again = compile(&out, &arch()).expect("compiles");
    assert_eq!(flat(&again.cube), flat(&out.cube));
}

#[test]
fn author_event_ids_are_not_reused() {
    let mut kb = KernelBuilder::new("ids");
    let x = kb.input("x", DType::F32, [16, 64]);
    let y = kb.output("y", DType::F32, [16, 64]);
    let vt = || TileType::new(MemSpace::Vec, DType::F32, 16, 64, Layout::ND);
    let (t0, t1, t2) = (
        kb.tile("t0", vt()),
        kb.tile("t1", vt()),
        kb.tile("t2", vt()),
    );
    kb.vector(|v| {
        v.load(t0, GmView::nd(x, 0, 16, 64, 64));
        v.set_flag(Pipe::Mte2, Pipe::V, 0);
        v.wait_flag(Pipe::Mte2, Pipe::V, 0);
        v.exp(t1, t0);
        v.set_flag(Pipe::Mte2, Pipe::V, 1); // an author id used for nothing in particular
        v.wait_flag(Pipe::Mte2, Pipe::V, 1);
        v.load(t2, GmView::nd(x, 0, 16, 64, 64)); // unsynced: needs MTE2 -> V
        v.add(t1, t1, t2);
        v.set_flag(Pipe::V, Pipe::Mte3, 3);
        v.wait_flag(Pipe::V, Pipe::Mte3, 3);
        v.store(GmView::nd(y, 0, 16, 64, 64), t1);
    });
    let k = kb.build();
    let out = compile(&k, &arch()).expect("compiles");
    let names = show(&flat(&out.vector));
    assert_eq!(
        names,
        [
            "load",
            "set MTE2->V 0",
            "wait MTE2->V 0",
            "unary",
            "set MTE2->V 1",
            "wait MTE2->V 1",
            "load",
            "set MTE2->V 2",
            "wait MTE2->V 2",
            "binary",
            "set V->MTE3 3",
            "wait V->MTE3 3",
            "store"
        ]
    );
    assert_clean(&out, CoreKind::Vector, &[]);
}

#[test]
fn no_free_event_id_is_an_error() {
    let mut kb = KernelBuilder::new("full");
    let x = kb.input("x", DType::F32, [16, 64]);
    let vt = || TileType::new(MemSpace::Vec, DType::F32, 16, 64, Layout::ND);
    let (t0, t1) = (kb.tile("t0", vt()), kb.tile("t1", vt()));
    kb.vector(|v| {
        for e in 0..8 {
            v.set_flag(Pipe::Mte2, Pipe::V, e);
            v.wait_flag(Pipe::Mte2, Pipe::V, e);
        }
        v.load(t0, GmView::nd(x, 0, 16, 64, 64));
        v.exp(t1, t0);
    });
    match compile(&kb.build(), &arch()) {
        Err(CompileError::Sync(SyncError::NoFreeEvent {
            section,
            src,
            dst,
            author,
            ..
        })) => {
            assert_eq!(section, CoreKind::Vector);
            assert_eq!((src, dst), (Pipe::Mte2, Pipe::V));
            assert_eq!(author, (0..8).collect::<Vec<u8>>());
        }
        other => panic!("expected NoFreeEvent, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Loops and branches
// ---------------------------------------------------------------------------------------------

/// A K-loop-free tile loop: per iteration load A and B tiles into ping-pong L1 groups, move to
/// L0, matmul, store. `n` iterations (runtime scalar).
fn pingpong(buffers: u32) -> (Kernel, ParamId) {
    let (m, k, n) = (32u64, 64u64, 32u64);
    let mut kb = KernelBuilder::new("pingpong");
    let iters = kb.scalar("n", DType::I32);
    let a = kb.input(
        "a",
        DType::F16,
        [Expr::from(m) * Expr::Param(iters), k.into()],
    );
    let b = kb.input("b", DType::F16, [k, n]);
    let c = kb.output(
        "c",
        DType::F32,
        [Expr::from(m) * Expr::Param(iters), n.into()],
    );
    let a_l1 = kb.tile_group(
        "a_l1",
        TileType::new(MemSpace::Mat, DType::F16, m, k, Layout::NZ),
        buffers,
    );
    let b_l1 = kb.tile_group(
        "b_l1",
        TileType::new(MemSpace::Mat, DType::F16, k, n, Layout::NZ),
        buffers,
    );
    let a_l0 = kb.tile(
        "a_l0",
        TileType::new(MemSpace::Left, DType::F16, m, k, Layout::NZ),
    );
    let b_l0 = kb.tile(
        "b_l0",
        TileType::new(MemSpace::Right, DType::F16, k, n, Layout::ZN),
    );
    let acc = kb.tile(
        "acc",
        TileType::new(MemSpace::Acc, DType::F32, m, n, Layout::NZ),
    );
    kb.cube(|c0| {
        c0.for_range("i", 0, Expr::Param(iters), 1, |c1, i| {
            c1.load(a_l1.at(i % 2), GmView::nd(a, i * (m * k) as i64, m, k, k));
            c1.load(b_l1.at(i % 2), GmView::nd(b, 0, k, n, n));
            c1.mov(a_l0, a_l1.at(i % 2));
            c1.mov(b_l0, b_l1.at(i % 2));
            c1.matmul(acc, a_l0, b_l0);
            c1.store(GmView::nd(c, i * (m * n) as i64, m, n, n), acc);
        });
    });
    (kb.build(), iters)
}

#[test]
fn loop_with_ping_pong_groups_is_balanced_and_race_free() {
    let (k, n) = pingpong(2);
    let out = compile(&k, &arch()).expect("compiles");
    for iters in [0, 1, 3] {
        assert_clean(&out, CoreKind::Cube, &[(n, iters)]);
    }
    // The shape: back-pressure flags pre-set before the loop and drained after it.
    // Loop-carried WAR edges: MTE1 (moves read a_l1, b_l1) -> MTE2 (next loads), M (matmul reads
    // L0) -> MTE1 (next moves), FIX (store reads acc) -> M (next matmul).
    let loop_at = out
        .cube
        .iter()
        .position(|s| matches!(s, Stmt::For { .. }))
        .expect("loop");
    let Stmt::For { body, .. } = &out.cube[loop_at] else {
        unreachable!()
    };
    assert_eq!(
        show(&flat(&out.cube[..loop_at])),
        ["set MTE1->MTE2 0", "set M->MTE1 0", "set FIX->M 0"]
    );
    assert_eq!(
        show(&flat(&out.cube[loop_at + 1..])),
        ["wait FIX->M 0", "wait M->MTE1 0", "wait MTE1->MTE2 0"]
    );
    assert_eq!(
        show(&flat(body)),
        [
            "wait MTE1->MTE2 0", // both L1 groups are free again
            "load",
            "set MTE2->MTE1 0",
            "load",
            "set MTE2->MTE1 1",
            "wait MTE2->MTE1 0",
            "wait M->MTE1 0", // L0 is free again
            "move",
            "wait MTE2->MTE1 1",
            "move",
            "set MTE1->M 0",
            "set MTE1->MTE2 0", // one carried flag covers both L1 groups
            "wait MTE1->M 0",
            "wait FIX->M 0", // acc is free again
            "matmul",
            "set M->FIX 0",
            "set M->MTE1 0",
            "wait M->FIX 0",
            "store",
            "set FIX->M 0",
        ]
    );
}

#[test]
fn removing_any_inserted_flag_pair_creates_a_race_or_imbalance() {
    // With single buffers (so that the pass's conservative slot reasoning is exact), the
    // inserted flags are all needed: drop each inserted (src, dst, event) in turn and the checker
    // must find something wrong with 3 iterations.
    let (k, n) = pingpong(1);
    let out = compile(&k, &arch()).expect("compiles");
    let mut keys: Vec<(Pipe, Pipe, u8)> = flat(&out.cube)
        .iter()
        .filter_map(|o| match o {
            Op::Sync(SyncOp::SetFlag { src, dst, event }) => Some((*src, *dst, *event)),
            _ => None,
        })
        .collect();
    keys.sort_by_key(|k| format!("{k:?}"));
    keys.dedup();
    assert!(keys.len() >= 6);
    fn strip(stmts: &[Stmt], key: (Pipe, Pipe, u8)) -> Vec<Stmt> {
        stmts
            .iter()
            .filter(|s| {
                !matches!(s, Stmt::Op(Op::Sync(SyncOp::SetFlag { src, dst, event }) | Op::Sync(SyncOp::WaitFlag { src, dst, event })) if (*src, *dst, *event) == key)
            })
            .map(|s| match s {
                Stmt::For { var, start, end, step, body } => Stmt::For {
                    var: *var,
                    start: start.clone(),
                    end: end.clone(),
                    step: *step,
                    body: strip(body, key),
                },
                other => other.clone(),
            })
            .collect()
    }
    for key in keys {
        let mut k2 = out.kernel().clone();
        k2.cube = strip(&out.cube, key);
        let c = Checker::run(&k2, &k2.cube, &[(n, 3)]);
        assert!(!c.errors.is_empty(), "flag {key:?} was not needed");
    }
}

#[test]
fn loop_with_partial_hand_sync_only_adds_the_missing_edges() {
    // The author synced MTE2 -> MTE1 inside the loop; the pass must add the rest, reuse nothing
    // of the author's, and stay balanced.
    let (mut k, n) = pingpong(2);
    let Stmt::For { body, .. } = &mut k.cube[0] else {
        panic!("loop")
    };
    body.insert(2, Stmt::Op(set(Pipe::Mte2, Pipe::Mte1, 0)));
    body.insert(3, Stmt::Op(wait(Pipe::Mte2, Pipe::Mte1, 0)));
    let out = compile(&k, &arch()).expect("compiles");
    let ops = flat(&out.cube);
    let mte2_mte1: Vec<&Op> = ops
        .iter()
        .filter(|o| {
            matches!(
                o,
                Op::Sync(SyncOp::SetFlag {
                    src: Pipe::Mte2,
                    dst: Pipe::Mte1,
                    ..
                }) | Op::Sync(SyncOp::WaitFlag {
                    src: Pipe::Mte2,
                    dst: Pipe::Mte1,
                    ..
                })
            )
        })
        .collect();
    assert_eq!(
        mte2_mte1.len(),
        2,
        "only the author's pair: {:?}",
        show(&ops)
    );
    for iters in [0, 1, 3] {
        assert_clean(&out, CoreKind::Cube, &[(n, iters)]);
    }
}

#[test]
fn nested_loops_and_branches_are_balanced_and_race_free() {
    let mut kb = KernelBuilder::new("nested");
    let outer = kb.scalar("outer", DType::I32);
    let inner = kb.scalar("inner", DType::I32);
    let x = kb.input("x", DType::F32, [16, 64]);
    let y = kb.output("y", DType::F32, [16, 64]);
    let vt = || TileType::new(MemSpace::Vec, DType::F32, 16, 64, Layout::ND);
    let g = kb.tile_group("g", vt(), 2);
    let t = kb.tile("t", vt());
    let acc = kb.tile("acc", vt());
    kb.vector(|v| {
        v.fill(acc, 0.0f32);
        v.for_range("i", 0, Expr::Param(outer), 1, |v1, i| {
            v1.if_else(
                Expr::from(i).lt(1),
                |th| th.load(t, GmView::nd(x, 0, 16, 64, 64)),
                |el| el.fill(t, 1.0f32),
            );
            v1.for_range("j", 0, Expr::Param(inner), 1, |v2, j| {
                v2.load(g.at(j % 2), GmView::nd(x, 0, 16, 64, 64));
                v2.add(acc, acc, g.at(j % 2));
                v2.add(acc, acc, t);
            });
            v1.store(GmView::nd(y, 0, 16, 64, 64), acc);
        });
    });
    let k = kb.build();
    let out = compile(&k, &arch()).expect("compiles");
    for o in [0, 1, 3] {
        for i in [0, 1, 3] {
            assert_clean(&out, CoreKind::Vector, &[(outer, o), (inner, i)]);
        }
    }
    // The load in the `then` branch reaches the V reads through a flag set after the `if`.
    let Stmt::For { body, .. } = &out.vector[out
        .vector
        .iter()
        .position(|s| matches!(s, Stmt::For { .. }))
        .expect("loop")]
    else {
        unreachable!()
    };
    let if_pos = body
        .iter()
        .position(|s| matches!(s, Stmt::If { .. }))
        .expect("if");
    assert!(
        matches!(
            body.get(if_pos + 1),
            Some(Stmt::Op(Op::Sync(SyncOp::SetFlag {
                src: Pipe::Mte2,
                dst: Pipe::V,
                ..
            })))
        ),
        "{:#?}",
        show(&flat(body))
    );
}

// ---------------------------------------------------------------------------------------------
// Channels
// ---------------------------------------------------------------------------------------------

/// Runs the three cores' cross-core flag streams against each other (cube ids 0-15 reach AIV0,
/// 16-31 AIV1; AIV k's id x reaches the cube's x + 16k), round robin, with binary flags.
fn cluster_check(cube: &[Op], vector: &[Op]) -> Result<(), String> {
    let mut aic = [0u8; 32];
    let mut aiv = [[0u8; 16]; 2];
    let streams: [&[Op]; 3] = [cube, vector, vector];
    let mut pc = [0usize; 3];
    loop {
        let mut progressed = false;
        for core in 0..3 {
            while let Some(op) = streams[core].get(pc[core]) {
                let ok = match (core, op) {
                    (0, Op::Sync(SyncOp::SetCrossFlag { id, .. })) => {
                        let slot = &mut aiv[(*id / 16) as usize][(*id % 16) as usize];
                        if *slot == 1 {
                            return Err(format!("cube set {id} twice"));
                        }
                        *slot = 1;
                        true
                    }
                    (k, Op::Sync(SyncOp::SetCrossFlag { id, .. })) => {
                        let slot = &mut aic[*id as usize + 16 * (k - 1)];
                        if *slot == 1 {
                            return Err(format!("AIV{} set {id} twice", k - 1));
                        }
                        *slot = 1;
                        true
                    }
                    (0, Op::Sync(SyncOp::WaitCrossFlag { id, .. })) => {
                        std::mem::take(&mut aic[*id as usize]) == 1
                    }
                    (k, Op::Sync(SyncOp::WaitCrossFlag { id, .. })) => {
                        std::mem::take(&mut aiv[k - 1][*id as usize]) == 1
                    }
                    _ => true,
                };
                if !ok {
                    break;
                }
                pc[core] += 1;
                progressed = true;
            }
        }
        if (0..3).all(|c| pc[c] == streams[c].len()) {
            break;
        }
        if !progressed {
            return Err(format!("hang at {pc:?}"));
        }
    }
    if aic.iter().any(|&f| f != 0) || aiv.iter().flatten().any(|&f| f != 0) {
        return Err("flags left set at kernel end".into());
    }
    Ok(())
}

fn cube_to_vector() -> (Kernel, ParamId) {
    let (m, k, n) = (16u64, 32u64, 16u64);
    let mut kb = KernelBuilder::new("c2v");
    let iters = kb.scalar("n", DType::I32);
    let a = kb.input("a", DType::F16, [m, k]);
    let b = kb.input("b", DType::F16, [k, n]);
    let y = kb.output("y", DType::F32, [m, n]);
    let a_l1 = kb.tile(
        "a_l1",
        TileType::new(MemSpace::Mat, DType::F16, m, k, Layout::NZ),
    );
    let b_l1 = kb.tile(
        "b_l1",
        TileType::new(MemSpace::Mat, DType::F16, k, n, Layout::NZ),
    );
    let a_l0 = kb.tile(
        "a_l0",
        TileType::new(MemSpace::Left, DType::F16, m, k, Layout::NZ),
    );
    let b_l0 = kb.tile(
        "b_l0",
        TileType::new(MemSpace::Right, DType::F16, k, n, Layout::ZN),
    );
    let acc = kb.tile(
        "acc",
        TileType::new(MemSpace::Acc, DType::F32, m, n, Layout::NZ),
    );
    let ub = kb.tile(
        "ub",
        TileType::new(MemSpace::Vec, DType::F32, m, n, Layout::ND),
    );
    let ub2 = kb.tile(
        "ub2",
        TileType::new(MemSpace::Vec, DType::F32, m, n, Layout::ND),
    );
    let ch = kb.channel("scores", CoreKind::Cube, 1);
    kb.cube(|c| {
        c.load(a_l1, GmView::nd(a, 0, m, k, k));
        c.load(b_l1, GmView::nd(b, 0, k, n, n));
        c.mov(a_l0, a_l1);
        c.mov(b_l0, b_l1);
        c.for_range("i", 0, Expr::Param(iters), 1, |c1, _| {
            c1.matmul(acc, a_l0, b_l0).phase(Phase::Final);
            c1.acquire(ch);
            c1.mov(ub, acc)
                .mode(AccToVecMode::SingleModeVec0)
                .phase(Phase::Final);
            c1.push(ch);
        });
        // A hand-written cross flag with id 0 (AIV0) / 16 (AIV1): the channel must avoid it.
        c.wait_cross_flag(Pipe::Fix, 0);
        c.wait_cross_flag(Pipe::Fix, 16);
    });
    kb.vector(|v| {
        v.for_range("i", 0, Expr::Param(iters), 1, |v1, _| {
            v1.pop(ch);
            v1.exp(ub2, ub);
            v1.release(ch);
            v1.store(GmView::nd(y, 0, m, n, n), ub2);
        });
        v.set_cross_flag(Pipe::Mte3, 0);
    });
    (kb.build(), iters)
}

#[test]
fn cube_to_vector_channel_lowers_to_cross_flags_for_both_aivs() {
    let (k, n) = cube_to_vector();
    let out = compile(&k, &arch()).expect("compiles");
    let cube = show(&flat(&out.cube));
    let vector = show(&flat(&out.vector));
    // Ids 1 (data) and 2 (free): 0 is the author's.
    assert_eq!(
        cube,
        [
            "load",
            "set MTE2->MTE1 0",
            "load",
            "set MTE2->MTE1 1",
            "wait MTE2->MTE1 0",
            "move",
            "wait MTE2->MTE1 1",
            "move",
            "set MTE1->M 0",
            "wait MTE1->M 0",
            // Loop: FIX (move reads acc) -> M (next matmul) is carried; matmul -> move needs
            // nothing (phase Final on both).
            "set FIX->M 0",
            "wait FIX->M 0",
            "matmul",
            "xwait FIX 2", // acquire: both AIVs released the slot
            "xwait FIX 18",
            "move",
            "set FIX->M 0",
            "xset FIX 1", // push: data for AIV0 and AIV1
            "xset FIX 17",
            "wait FIX->M 0",
            "xwait FIX 0", // the author's
            "xwait FIX 16",
            "xwait FIX 2", // drain of the free flag
            "xwait FIX 18",
        ],
        "{cube:#?}"
    );
    assert_eq!(
        vector,
        [
            "xset V 2", // the slot starts free
            "set MTE3->V 0",
            "xwait V 1", // pop
            "wait MTE3->V 0",
            "unary",
            "set V->MTE3 0",
            "xset V 2", // release
            "wait V->MTE3 0",
            "store",
            "set MTE3->V 0",
            "wait MTE3->V 0",
            "xset MTE3 0", // the author's
        ],
        "{vector:#?}"
    );
    for iters in [0, 1, 3] {
        let c = Checker::run(&out, &out.cube, &[(n, iters)]);
        let v = Checker::run(&out, &out.vector, &[(n, iters)]);
        assert!(c.errors.is_empty(), "{:?}", c.errors);
        assert!(v.errors.is_empty(), "{:?}", v.errors);
        cluster_check(&c.cross, &v.cross).unwrap_or_else(|e| panic!("{iters} iterations: {e}"));
    }
    // No channel op is left.
    let all: Vec<Op> = flat(&out.cube)
        .into_iter()
        .chain(flat(&out.vector))
        .collect();
    assert!(!all.iter().any(|o| o.name().starts_with("channel")));
}

#[test]
fn vector_to_cube_channel_lowers_with_offset_ids() {
    let mut kb = KernelBuilder::new("v2c");
    let x = kb.input("x", DType::F16, [16, 16]);
    let y = kb.output("y", DType::F32, [16, 16]);
    let ub = kb.tile(
        "ub",
        TileType::new(MemSpace::Vec, DType::F16, 16, 16, Layout::ND),
    );
    let l1 = kb.tile(
        "l1",
        TileType::new(MemSpace::Mat, DType::F16, 16, 16, Layout::NZ),
    );
    let b_l1 = kb.tile(
        "b_l1",
        TileType::new(MemSpace::Mat, DType::F16, 16, 16, Layout::NZ),
    );
    let a_l0 = kb.tile(
        "a_l0",
        TileType::new(MemSpace::Left, DType::F16, 16, 16, Layout::NZ),
    );
    let b_l0 = kb.tile(
        "b_l0",
        TileType::new(MemSpace::Right, DType::F16, 16, 16, Layout::ZN),
    );
    let acc = kb.tile(
        "acc",
        TileType::new(MemSpace::Acc, DType::F32, 16, 16, Layout::NZ),
    );
    let ch = kb.channel("p", CoreKind::Vector, 2);
    kb.vector(|v| {
        v.load(ub, GmView::nd(x, 0, 16, 16, 16));
        v.acquire(ch);
        v.mov(l1, ub);
        v.push(ch);
    });
    kb.cube(|c| {
        c.load(b_l1, GmView::nd(x, 0, 16, 16, 16));
        c.mov(b_l0, b_l1);
        c.pop(ch);
        c.mov(a_l0, l1);
        c.release(ch);
        c.matmul(acc, a_l0, b_l0);
        c.store(GmView::nd(y, 0, 16, 16, 16), acc);
    });
    let out = compile(&kb.build(), &arch()).expect("compiles");
    let cube = show(&flat(&out.cube));
    let vector = show(&flat(&out.vector));
    assert_eq!(
        vector,
        [
            "load",
            "set MTE2->MTE3 0",
            "xwait MTE3 1", // acquire
            "wait MTE2->MTE3 0",
            "move",
            "xset MTE3 0",  // push: reaches the cube's 0 (AIV0) / 16 (AIV1)
            "xwait MTE3 1", // drain of the free flag
        ]
    );
    assert_eq!(
        cube,
        [
            "xset MTE1 1", // the slot starts free, for AIV0 and AIV1
            "xset MTE1 17",
            "load",
            "set MTE2->MTE1 0",
            "wait MTE2->MTE1 0",
            "move",
            "xwait MTE1 0", // pop: data from AIV0 and AIV1
            "xwait MTE1 16",
            "move",
            "set MTE1->M 0",
            "xset MTE1 1", // release to both AIVs
            "xset MTE1 17",
            "wait MTE1->M 0",
            "matmul",
            "set M->FIX 0",
            "wait M->FIX 0",
            "store",
        ]
    );
    let c = Checker::run(&out, &out.cube, &[]);
    let v = Checker::run(&out, &out.vector, &[]);
    assert!(
        c.errors.is_empty() && v.errors.is_empty(),
        "{:?} {:?}",
        c.errors,
        v.errors
    );
    cluster_check(&c.cross, &v.cross).expect("balanced");
}

#[test]
fn channels_exhausting_cross_flag_ids_is_an_error() {
    let mut kb = KernelBuilder::new("many");
    let chans: Vec<ChannelId> = (0..9)
        .map(|i| kb.channel(format!("c{i}"), CoreKind::Cube, 1))
        .collect();
    kb.cube(|c| {
        for ch in &chans {
            c.acquire(*ch);
            c.push(*ch);
        }
    });
    kb.vector(|v| {
        for ch in &chans {
            v.pop(*ch);
            v.release(*ch);
        }
    });
    match compile(&kb.build(), &arch()) {
        Err(CompileError::Sync(SyncError::NoFreeCrossFlag { channel, .. })) => {
            assert_eq!(channel, "c8")
        }
        other => panic!("expected NoFreeCrossFlag, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Randomized programs: whatever the structure, the output is balanced and race-free.
// ---------------------------------------------------------------------------------------------

use tile_backend::sim::io::Rng;

struct Gen {
    x: ParamId,
    y: ParamId,
    n: ParamId,
    c: ParamId,
    tiles: Vec<TileId>,
    group: TileId,
}

impl Gen {
    fn tile(&self, rng: &mut Rng, vars: &[VarId]) -> TileRef {
        let k = rng.below(self.tiles.len() as u64 + 1) as usize;
        if k < self.tiles.len() {
            return self.tiles[k].into();
        }
        match (rng.below(3), vars.last()) {
            (0, _) | (_, None) => self.group.at(rng.below(2)),
            (1, Some(v)) => self.group.at(*v % 2),
            (_, Some(v)) => self.group.at((*v + 1) % 2),
        }
    }

    fn emit(&self, b: &mut tile_backend::dsl::Body<'_>, rng: &mut Rng, depth: u32, vars: &[VarId]) {
        let count = 1 + rng.below(5);
        for _ in 0..count {
            match rng.below(if depth < 2 { 10 } else { 8 }) {
                0 | 1 => {
                    let t = self.tile(rng, vars);
                    b.load(t, GmView::nd(self.x, 0, 16, 64, 64));
                }
                2 | 3 => {
                    let (d, s) = (self.tile(rng, vars), self.tile(rng, vars));
                    b.exp(d, s);
                }
                4 => {
                    let (d, l, r) = (
                        self.tile(rng, vars),
                        self.tile(rng, vars),
                        self.tile(rng, vars),
                    );
                    b.add(d, l, r);
                }
                5 => {
                    let t = self.tile(rng, vars);
                    b.store(GmView::nd(self.y, 0, 16, 64, 64), t);
                }
                6 => {
                    // A balanced hand-written pair or a full barrier.
                    match rng.below(3) {
                        0 => {
                            b.set_flag(Pipe::Mte2, Pipe::V, 5);
                            b.wait_flag(Pipe::Mte2, Pipe::V, 5);
                        }
                        1 => {
                            b.set_flag(Pipe::V, Pipe::Mte3, 6);
                            b.wait_flag(Pipe::V, Pipe::Mte3, 6);
                        }
                        _ => b.barrier(Pipe::All),
                    }
                }
                7 => {
                    let t = self.tile(rng, vars);
                    b.fill(t, 1.0f32);
                }
                8 => {
                    let seed = rng.next_u64();
                    let mut inner = Rng::new(seed);
                    let mut vs = vars.to_vec();
                    let step = 1 + rng.below(2) as i64;
                    b.for_range("i", 0, Expr::Param(self.n), step, |b2, v| {
                        vs.push(v);
                        self.emit(b2, &mut inner, depth + 1, &vs);
                    });
                }
                _ => {
                    let (s1, s2) = (rng.next_u64(), rng.next_u64());
                    let cond = match vars.last() {
                        Some(v) if rng.below(2) == 0 => Expr::from(*v).lt(1),
                        _ => Expr::Param(self.c),
                    };
                    let (v1, v2) = (vars.to_vec(), vars.to_vec());
                    b.if_else(
                        cond,
                        |t| self.emit(t, &mut Rng::new(s1), depth + 1, &v1),
                        |e| self.emit(e, &mut Rng::new(s2), depth + 1, &v2),
                    );
                }
            }
        }
    }
}

#[test]
fn random_vector_programs_are_balanced_and_race_free() {
    let mut inserted = 0;
    for seed in 0..300u64 {
        let mut kb = KernelBuilder::new(format!("rand{seed}"));
        let x = kb.input("x", DType::F32, [16, 64]);
        let y = kb.output("y", DType::F32, [16, 64]);
        let n = kb.scalar("n", DType::I32);
        let c = kb.scalar("c", DType::I32);
        let vt = || TileType::new(MemSpace::Vec, DType::F32, 16, 64, Layout::ND);
        let tiles = vec![
            kb.tile("t0", vt()),
            kb.tile("t1", vt()),
            kb.tile("t2", vt()),
        ];
        let group = kb.tile_group("g", vt(), 2);
        let gen = Gen {
            x,
            y,
            n,
            c,
            tiles,
            group,
        };
        let mut rng = Rng::new(seed);
        kb.vector(|v| gen.emit(v, &mut rng, 0, &[]));
        let k = kb.build();
        let out = compile(&k, &arch()).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        inserted += flat(&out.vector).len() - flat(&k.vector).len();
        for iters in [0, 1, 3, 4] {
            for cond in [0, 1] {
                let chk = Checker::run(&out, &out.vector, &[(n, iters), (c, cond)]);
                assert!(
                    chk.errors.is_empty(),
                    "seed {seed}, n = {iters}, c = {cond}: {:?}\n{:#?}",
                    chk.errors,
                    out.vector
                );
            }
        }
        // Hand-written ids 5 and 6 are never reused by the pass.
        let author = |o: &Op| {
            matches!(
                o,
                Op::Sync(SyncOp::SetFlag {
                    src: Pipe::Mte2,
                    dst: Pipe::V,
                    event: 5
                }) | Op::Sync(SyncOp::SetFlag {
                    src: Pipe::V,
                    dst: Pipe::Mte3,
                    event: 6
                })
            )
        };
        assert_eq!(
            flat(&out.vector).iter().filter(|o| author(o)).count(),
            flat(&k.vector).iter().filter(|o| author(o)).count(),
            "seed {seed}"
        );
    }
    assert!(
        inserted > 300,
        "the generator exercises the pass ({inserted} flags)"
    );
}

#[test]
fn unrolled_step_two_loop_resolves_slots_and_keeps_ping_pong_overlap() {
    // for i in (0..n).step_by(2): half A uses slot i % 2 (always 0), half B slot (i + 1) % 2
    // (always 1). The load of slot 1 must not wait for the move out of slot 0.
    let (m, k, n) = (16u64, 32u64, 16u64);
    let mut kb = KernelBuilder::new("unrolled");
    let iters = kb.scalar("n", DType::I32);
    let a = kb.input("a", DType::F16, [m, k]);
    let a_l1 = kb.tile_group(
        "a_l1",
        TileType::new(MemSpace::Mat, DType::F16, m, k, Layout::NZ),
        2,
    );
    let a_l0 = kb.tile_group(
        "a_l0",
        TileType::new(MemSpace::Left, DType::F16, m, k, Layout::NZ),
        2,
    );
    let b_l0 = kb.tile(
        "b_l0",
        TileType::new(MemSpace::Right, DType::F16, k, n, Layout::ZN),
    );
    let b_l1 = kb.tile(
        "b_l1",
        TileType::new(MemSpace::Mat, DType::F16, k, n, Layout::NZ),
    );
    let acc = kb.tile(
        "acc",
        TileType::new(MemSpace::Acc, DType::F32, m, n, Layout::NZ),
    );
    kb.cube(|c| {
        c.load(b_l1, GmView::nd(a, 0, k, n, n));
        c.mov(b_l0, b_l1);
        c.for_range("i", 0, Expr::Param(iters), 2, |c1, i| {
            for s in [Expr::from(i) % 2, (i + 1) % 2] {
                c1.load(a_l1.at(s.clone()), GmView::nd(a, 0, m, k, k));
                c1.mov(a_l0.at(s.clone()), a_l1.at(s.clone()));
                c1.matmul_acc(acc, a_l0.at(s), b_l0);
            }
        });
    });
    let out = compile(&kb.build(), &arch()).expect("compiles");
    for n_val in [0, 2, 6] {
        assert_clean(&out, CoreKind::Cube, &[(iters, n_val)]);
    }
    let loop_at = out
        .cube
        .iter()
        .position(|s| matches!(s, Stmt::For { .. }))
        .expect("loop");
    let Stmt::For { body, .. } = &out.cube[loop_at] else {
        unreachable!()
    };
    let names = show(&flat(body));
    let second_load = names
        .iter()
        .enumerate()
        .filter(|(_, s)| *s == "load")
        .nth(1)
        .expect("two loads")
        .0;
    let first_move = names.iter().position(|s| s == "move").expect("move");
    assert!(first_move < second_load, "{names:?}");
    // Between the first move and the second load, nothing makes MTE2 wait for MTE1.
    assert!(
        !names[first_move..second_load]
            .iter()
            .any(|s| s.starts_with("wait MTE1->MTE2")),
        "{names:?}"
    );
}

#[test]
fn a_final_store_after_a_final_matmul_needs_no_m_to_fix_flag() {
    let m_to_fix = |k: &Kernel| {
        flat(&k.cube).iter().any(|o| {
            matches!(
                o,
                Op::Sync(SyncOp::SetFlag {
                    src: Pipe::M,
                    dst: Pipe::Fix,
                    ..
                })
            )
        })
    };
    let plain = tile_backend::kernels::worked_matmul();
    assert!(m_to_fix(&compile(&plain, &arch()).expect("compiles")));
    let mut phased = plain.clone();
    for s in phased.cube.iter_mut() {
        if let Stmt::Op(Op::LoadStore(LoadStoreOp::Store { phase, .. })) = s {
            *phase = Some(Phase::Final);
        }
    }
    assert!(!m_to_fix(&compile(&phased, &arch()).expect("compiles")));
}

/// Two independent MTE1 -> M dependencies in a row (two Left buffers, two matmuls): program text
/// puts the first pair's wait before the second pair's set, but nothing on the pipes orders them
/// (MTE1 may run ahead of M), so the sync pass must not give both pairs one event id: the
/// hazard checker would see MTE1 set the flag twice before M waits (a lost signal).
#[test]
fn sync_pass_does_not_share_an_event_id_the_pipes_do_not_order() {
    use tile_backend::sim::{self, Arg, GmTensor};
    let mut kb = KernelBuilder::new("two_matmuls");
    let a = kb.input("a", DType::F16, [16u64, 32]);
    let b = kb.input("b", DType::F16, [32u64, 16]);
    let c0 = kb.output("c0", DType::F32, [16u64, 16]);
    let c1 = kb.output("c1", DType::F32, [16u64, 16]);
    let a_l1 = kb.tile(
        "a_l1",
        TileType::new(MemSpace::Mat, DType::F16, 16, 32, Layout::NZ),
    );
    let b_l1 = kb.tile(
        "b_l1",
        TileType::new(MemSpace::Mat, DType::F16, 32, 16, Layout::ZN),
    );
    let a0 = kb.tile(
        "a0",
        TileType::new(MemSpace::Left, DType::F16, 16, 32, Layout::NZ),
    );
    let a1 = kb.tile(
        "a1",
        TileType::new(MemSpace::Left, DType::F16, 16, 32, Layout::NZ),
    );
    let bl = kb.tile(
        "bl",
        TileType::new(MemSpace::Right, DType::F16, 32, 16, Layout::ZN),
    );
    let acc0 = kb.tile(
        "acc0",
        TileType::new(MemSpace::Acc, DType::F32, 16, 16, Layout::NZ),
    );
    let acc1 = kb.tile(
        "acc1",
        TileType::new(MemSpace::Acc, DType::F32, 16, 16, Layout::NZ),
    );
    kb.cube(|c| {
        c.load(a_l1, GmView::nd(a, 0, 16, 32, 32));
        c.load(b_l1, GmView::dn(b, 0, 32, 16, 32));
        c.mov(bl, b_l1);
        c.mov(a0, a_l1);
        c.matmul(acc0, a0, bl);
        c.mov(a1, a_l1);
        c.matmul(acc1, a1, bl);
        c.store(GmView::nd(c0, 0, 16, 16, 16), acc0);
        c.store(GmView::nd(c1, 0, 16, 16, 16), acc1);
    });
    let k = compile(&kb.build(), &arch()).expect("compiles");
    let ops = flat(&k.cube);
    let events: Vec<u8> = ops
        .iter()
        .filter_map(|op| match op {
            Op::Sync(SyncOp::SetFlag {
                src: Pipe::Mte1,
                dst: Pipe::M,
                event,
            }) => Some(*event),
            _ => None,
        })
        .collect();
    assert!(events.len() >= 2, "{:?}", show(&ops));
    let mut distinct = events.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), events.len(), "{:?}", show(&ops));
    let mut args = vec![
        Arg::Tensor(GmTensor::from_f32(DType::F16, &[16, 32], &[0.5; 512])),
        Arg::Tensor(GmTensor::from_f32(DType::F16, &[32, 16], &[0.25; 512])),
        Arg::Tensor(GmTensor::zeros(DType::F32, &[16, 16])),
        Arg::Tensor(GmTensor::zeros(DType::F32, &[16, 16])),
    ];
    let trace = support::trace_on(&k, &arch(), &mut args, 1).expect("runs");
    let hazards = sim::hazards::check(&k, &trace);
    assert!(hazards.is_empty(), "{hazards:?}");
}

/// The split-attention handoff in small (cube: S = A B -> channel S; P from channel P -> P B ->
/// channel PV; vector: P = cast(S) -> channel P; O += PV), looped `n` times with no
/// hand-written intra-core flag. The vector's acquire of channel P is a cross-core wait on MTE3
/// that stands for the cube's writes of the shared tiles (`pv_ub` among them), so the pass
/// orders the later `O += PV` after it with an MTE3 -> V pair. That pair's next set must also
/// wait for this iteration's `O += PV`: the pass orders a cross-core wait after this core's
/// earlier accesses of the shared tiles too. Without that, the acquire of the next iteration
/// can complete (the cube released P before it pushed PV) and MTE3 sets the flag again before
/// V has waited: a lost signal.
fn handoff_loop() -> Kernel {
    let (m, n) = (32u64, 16u64);
    let r = m / 2;
    let mut kb = KernelBuilder::new("handoff");
    let iters = kb.scalar("n", DType::I32);
    let a = kb.input("a", DType::F16, [m, n]);
    let b = kb.input("b", DType::F16, [n, n]);
    let y = kb.output("y", DType::F32, [m, n]);
    let mat = |kb: &mut KernelBuilder, name: &str, rows: u64| {
        kb.tile(
            name,
            TileType::new(MemSpace::Mat, DType::F16, rows, n, Layout::NZ),
        )
    };
    let a_l1 = mat(&mut kb, "a_l1", m);
    let b_l1 = mat(&mut kb, "b_l1", n);
    let p_l1 = mat(&mut kb, "p_l1", m);
    let left = |kb: &mut KernelBuilder, name: &str| {
        kb.tile(
            name,
            TileType::new(MemSpace::Left, DType::F16, m, n, Layout::NZ),
        )
    };
    let a_l0 = left(&mut kb, "a_l0");
    let p_l0 = left(&mut kb, "p_l0");
    let b_l0 = kb.tile(
        "b_l0",
        TileType::new(MemSpace::Right, DType::F16, n, n, Layout::ZN),
    );
    let acc = |kb: &mut KernelBuilder, name: &str| {
        kb.tile(
            name,
            TileType::new(MemSpace::Acc, DType::F32, m, n, Layout::NZ),
        )
    };
    let (s_acc, pv_acc) = (acc(&mut kb, "s_acc"), acc(&mut kb, "pv_acc"));
    let vec = |kb: &mut KernelBuilder, name: &str, dt: DType, layout: Layout| {
        kb.tile(name, TileType::new(MemSpace::Vec, dt, r, n, layout))
    };
    let s_ub = vec(&mut kb, "s_ub", DType::F32, Layout::ND);
    let pv_ub = vec(&mut kb, "pv_ub", DType::F32, Layout::ND);
    let o = vec(&mut kb, "o", DType::F32, Layout::ND);
    let p_ub = vec(&mut kb, "p_ub", DType::F16, Layout::ND);
    let p_nz = vec(&mut kb, "p_nz", DType::F16, Layout::NZ);
    let ch_s = kb.channel("s", CoreKind::Cube, 1);
    let ch_p = kb.channel("p", CoreKind::Vector, 1);
    let ch_pv = kb.channel("pv", CoreKind::Cube, 1);
    kb.cube(|c| {
        c.load(a_l1, GmView::nd(a, 0, m, n, n));
        c.load(b_l1, GmView::nd(b, 0, n, n, n));
        c.mov(a_l0, a_l1);
        c.mov(b_l0, b_l1);
        c.for_range("i", 0, Expr::Param(iters), 1, |c1, _| {
            c1.matmul(s_acc, a_l0, b_l0);
            c1.acquire(ch_s);
            c1.mov(s_ub, s_acc).mode(AccToVecMode::DualModeSplitM);
            c1.push(ch_s);
            c1.pop(ch_p);
            c1.mov(p_l0, p_l1);
            c1.release(ch_p);
            c1.matmul(pv_acc, p_l0, b_l0);
            c1.acquire(ch_pv);
            c1.mov(pv_ub, pv_acc).mode(AccToVecMode::DualModeSplitM);
            c1.push(ch_pv);
        });
    });
    kb.vector(|v| {
        v.fill(o, 0.0);
        v.for_range("i", 0, Expr::Param(iters), 1, |v1, _| {
            v1.pop(ch_s);
            v1.cast(p_ub, s_ub, RoundMode::Rint);
            v1.release(ch_s);
            v1.mov(p_nz, p_ub);
            v1.acquire(ch_p);
            v1.mov(p_l1, p_nz).offset(Expr::SubBlockIdx * r, 0);
            v1.push(ch_p);
            v1.pop(ch_pv);
            v1.add(o, o, pv_ub);
            v1.release(ch_pv);
        });
        v.store(GmView::nd(y, Expr::SubBlockIdx * (r * n), r, n, n), o);
    });
    kb.build()
}

/// Hazards of a traced run of `kernel` (scalar `n` first, then `a [32, 16]`, `b [16, 16]`, `y`).
fn handoff_hazards(kernel: &Kernel, n: i64) -> Vec<String> {
    use tile_backend::sim::{self, Arg, GmTensor};
    let mut args = vec![
        Arg::Int(n),
        Arg::Tensor(GmTensor::from_f32(DType::F16, &[32, 16], &[0.25; 512])),
        Arg::Tensor(GmTensor::from_f32(DType::F16, &[16, 16], &[0.5; 256])),
        Arg::Tensor(GmTensor::zeros(DType::F32, &[32, 16])),
    ];
    let trace = support::trace_on(kernel, &arch(), &mut args, 1).expect("runs");
    sim::hazards::check(kernel, &trace)
        .iter()
        .map(|h| h.to_string())
        .collect()
}

#[test]
fn pass_owned_flags_of_a_channel_handoff_loop_lose_no_signal() {
    let k = compile(&handoff_loop(), &arch()).expect("compiles");
    for n in [1, 2, 5] {
        let hazards = handoff_hazards(&k, n);
        assert!(
            hazards.is_empty(),
            "n = {n}: {hazards:#?}\n{:#?}",
            show(&flat(&k.vector))
        );
    }
}

/// Tiles written one after another and stored under one `if` after the loop that wrote them
/// (the split kernel's partial result): one V -> MTE3 pair, set after the last write, orders
/// them all (MTE3 waits for every write before the `if` anyway), instead of one pair and one
/// event id per tile, which ran out of the 8 ids at nine tiles.
#[test]
fn stores_under_one_if_share_one_pair_however_many_tiles() {
    let tiles = 12usize;
    let mut kb = KernelBuilder::new("many_stores");
    let write = kb.scalar("write", DType::I32);
    let y = kb.output("y", DType::F32, [16 * tiles as u64, 16]);
    let ubs: Vec<TileId> = (0..tiles)
        .map(|i| {
            kb.tile(
                format!("t{i}"),
                TileType::new(MemSpace::Vec, DType::F32, 16, 16, Layout::ND),
            )
        })
        .collect();
    kb.vector(|v| {
        for (i, &t) in ubs.iter().enumerate() {
            v.fill(t, i as f32);
        }
        v.if_(Expr::Param(write).gt(0), |t| {
            for (i, &u) in ubs.iter().enumerate() {
                t.store(GmView::nd(y, (i * 256) as u64, 16, 16, 16), u);
            }
        });
    });
    let k = compile(&kb.build(), &arch()).expect("compiles within the 8 event ids");
    let ops = flat(&k.vector);
    let pairs = ops
        .iter()
        .filter(|o| {
            matches!(
                o,
                Op::Sync(SyncOp::SetFlag {
                    src: Pipe::V,
                    dst: Pipe::Mte3,
                    ..
                })
            )
        })
        .count();
    assert_eq!(pairs, 1, "{:#?}", show(&ops));
    let last_fill = ops.iter().rposition(|o| o.name() == "fill").expect("fills");
    let set_at = ops
        .iter()
        .position(|o| matches!(o, Op::Sync(SyncOp::SetFlag { .. })))
        .expect("a set");
    assert!(set_at > last_fill, "{:#?}", show(&ops));
    assert_clean(&k, CoreKind::Vector, &[(write, 1)]);
}
