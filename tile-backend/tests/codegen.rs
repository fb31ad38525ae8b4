//! PTO-ISA code generation (`codegen::pto`):
//!
//! - golden snapshots (kernel, launcher, manifest) of the matmul, the one-tile attention core and
//!   the gather matmul (`TILEOPS_BLESS=1` rewrites them);
//! - every emitted file passes `g++ -std=c++17 -fsyntax-only` against the declaration header
//!   `tile-backend/codegen/include/pto/pto-inst.hpp` (cube and vector sections separately, the
//!   launcher with `-DTILEOPS_SYNTAX_CHECK`); the test fails loudly when g++ is missing;
//! - kernels that break a documented constraint (built without the verifier) emit code that
//!   fails that check with the header's static_assert message;
//! - every IR op kind has an emission path, checked per kind.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use tile_backend::arch::Arch;
use tile_backend::codegen::pto::{emit, instruction, CodegenError, LaunchSpec, Package};
use tile_backend::dsl::KernelBuilder;
use tile_backend::ir::*;
use tile_backend::kernels::{self, AttentionParams, GatherMatmulParams, Handoff, MatmulParams};
use tile_backend::passes::{compile, memory, sync};

mod support;

fn arch() -> Arch {
    Arch::ascend950()
}

fn package(kernel: &Kernel, block_dim: u64) -> Package {
    let arch = arch();
    let compiled =
        compile(kernel, &arch).unwrap_or_else(|e| panic!("{} compiles: {e}", kernel.name));
    emit(&compiled, &arch, &LaunchSpec::new(block_dim))
        .unwrap_or_else(|e| panic!("{} emits: {e}", kernel.name))
}

/// Plans memory and inserts syncs without the verifier (for kernels that break a rule on
/// purpose), then emits.
fn package_unverified(kernel: &Kernel) -> Package {
    let arch = arch();
    let planned = memory::plan(kernel, &arch).expect("plan");
    let synced = sync::insert(&planned, &arch).expect("sync");
    emit(&synced, &arch, &LaunchSpec::new(1)).expect("emit")
}

fn include_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("codegen/include")
}

fn scratch_dir(stem: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "tileops-codegen-{}-{}-{stem}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// Runs `g++ -std=c++17 -fsyntax-only` on one file with extra defines; Err(stderr) on failure.
fn gxx(file: &Path, defines: &[&str]) -> Result<(), String> {
    let mut cmd = Command::new("g++");
    cmd.args(["-std=c++17", "-fsyntax-only", "-I"])
        .arg(include_dir())
        .args(defines.iter().map(|d| format!("-D{d}")))
        .arg(file);
    let out = cmd.output().unwrap_or_else(|e| {
        panic!("g++ is required for the PTO syntax check and could not be run: {e}")
    });
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The syntax check of a package: the kernel as cube and as vector code, and the launcher.
fn syntax_check(p: &Package) -> Result<(), String> {
    let dir = scratch_dir(&p.name);
    let files = p.write_to(&dir).map_err(|e| e.to_string())?;
    let result = (|| {
        gxx(&files[0], &["__DAV_CUBE__"]).map_err(|e| format!("cube section:\n{e}"))?;
        gxx(&files[0], &["__DAV_VEC__"]).map_err(|e| format!("vector section:\n{e}"))?;
        // The CPU-simulation build of PTO-ISA defines both: the sections must not clash.
        gxx(&files[0], &["__DAV_CUBE__", "__DAV_VEC__"])
            .map_err(|e| format!("both sections as one unit:\n{e}"))?;
        gxx(&files[1], &["TILEOPS_SYNTAX_CHECK"]).map_err(|e| format!("launcher:\n{e}"))
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn assert_syntax_ok(p: &Package) {
    if let Err(e) = syntax_check(p) {
        panic!(
            "emitted code of `{}` fails the syntax check:\n{e}\n--- kernel ---\n{}",
            p.name, p.kernel_cpp
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Golden files

fn golden(kernel: &Kernel, block_dim: u64) {
    let p = package(kernel, block_dim);
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(&p.name);
    if std::env::var_os("TILEOPS_BLESS").is_some() {
        p.write_to(&dir).expect("write golden files");
        return;
    }
    let manifest = serde_json::to_string_pretty(&p.manifest).expect("manifest json") + "\n";
    for (file, text) in [
        (p.kernel_file(), &p.kernel_cpp),
        (p.launcher_file(), &p.launcher_cpp),
        (p.manifest_file(), &manifest),
    ] {
        let path = dir.join(&file);
        let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "cannot read golden file {} ({e}); run with TILEOPS_BLESS=1 to create it",
                path.display()
            )
        });
        if &want != text {
            let first = want
                .lines()
                .zip(text.lines())
                .position(|(a, b)| a != b)
                .unwrap_or(want.lines().count().min(text.lines().count()));
            panic!(
                "{} differs from the emitted code at line {} (TILEOPS_BLESS=1 rewrites it):\n\
                 golden:  {:?}\nemitted: {:?}",
                path.display(),
                first + 1,
                want.lines().nth(first),
                text.lines().nth(first)
            );
        }
    }
}

#[test]
fn golden_matmul() {
    let p = MatmulParams::default();
    golden(&kernels::matmul(&p), p.block_dim());
}

#[test]
fn golden_attention_tile() {
    let p = AttentionParams::default();
    golden(&kernels::attention_tile(&p), p.block_dim());
}

#[test]
fn golden_gather_matmul() {
    let p = GatherMatmulParams::default();
    golden(&kernels::gather_matmul(&p), p.block_dim());
}

// ---------------------------------------------------------------------------------------------
// Content checks on the reference kernels

#[test]
fn matmul_reads_like_pto() {
    let p = package(&kernels::matmul(&MatmulParams::default()), 4);
    let k = &p.kernel_cpp;
    for needle in [
        "#include <pto/pto-inst.hpp>",
        "extern \"C\" __global__ AICORE void matmul_f16(__gm__ half *a, __gm__ half *b, __gm__ float *c)",
        "#if defined(__DAV_CUBE__)",
        "using AL0 = TileLeft<half, 64, 64>;",
        "using BL0 = TileRight<half, 64, 64>;",
        "using Acc = TileAcc<float, 64, 64>;",
        "using AL1 = Tile<TileType::Mat, half, 64, 64, BLayout::ColMajor, 64, 64, SLayout::RowMajor, 512, PadValue::Null>;",
        "const int64_t block_idx = get_block_idx();",
        "TASSIGN(a_l1[1], 0x2000);",
        "for (int64_t kp = 0; kp < 4; kp += 2) {",
        "TMATMUL<AccPhase::Partial>(acc, a_l0[kp % 2], b_l0[kp % 2]);",
        "TMATMUL_ACC<AccPhase::Final>(acc, a_l0[kp % 2], b_l0[kp % 2]);",
        "set_flag(PIPE_MTE2, PIPE_MTE1, EVENT_ID0);",
        "TSTORE(c_gm, acc);",
    ] {
        assert!(k.contains(needle), "missing `{needle}` in:\n{k}");
    }
    // No vector section: the matmul runs on the cube only.
    assert!(!k.contains("#if defined(__DAV_VEC__)"), "{k}");
    assert!(p
        .launcher_cpp
        .contains("matmul_f16<<<block_dim, nullptr, stream>>>("));
    assert_eq!(p.manifest["block_dim"], 4);
    assert_eq!(p.manifest["args"][2]["direction"], "out");
    assert_eq!(p.manifest["soc"], "dav-c310");
}

#[test]
fn matmul_tails_use_dynamic_valid_shapes() {
    let params = MatmulParams {
        m: 100,
        k: 200,
        n: 72,
        ..Default::default()
    };
    let p = package(&kernels::matmul(&params), params.block_dim());
    let k = &p.kernel_cpp;
    assert!(
        k.contains("using AL1 = Tile<TileType::Mat, half, 64, 64, BLayout::ColMajor, DYNAMIC, DYNAMIC, SLayout::RowMajor, 512, PadValue::Zero>;"),
        "{k}"
    );
    assert!(
        k.contains("using Acc = TileAcc<float, 64, 64, DYNAMIC, DYNAMIC>;"),
        "{k}"
    );
    assert!(k.contains(".SetValidShape(mv, "), "{k}");
    assert!(k.contains("TFILLPAD(a_l1[kp % 2], a_l1[kp % 2]);"), "{k}");
    assert!(k.contains("pto::Shape<1, 1, 1, DYNAMIC, DYNAMIC>"), "{k}");
    assert_syntax_ok(&p);
}

#[test]
fn attention_reads_like_pto() {
    let p = package(&kernels::attention_tile(&AttentionParams::default()), 1);
    let k = &p.kernel_cpp;
    for needle in [
        "TMOV<STPhase::Final, SUb, SAcc, AccToVecMode::DualModeSplitN, ReluPreMode::NoRelu>(s_ub, s_acc);",
        "TMOV<STPhase::Final, OUb, OAcc, AccToVecMode::DualModeSplitM, ReluPreMode::NoRelu>(o_ub, o_acc);",
        "TRESHAPE(pt_l1, p_l1);",
        "TRESHAPE(sum_col, sum);",
        "const int64_t sub_block_idx = get_subblockid();",
        "TINSERT(p_l1, p_nz, 0, sub_block_idx * 16);",
        "TCOLMAX(mx, s_ub);",
        "TCOLEXPANDSUB(s_ub, s_ub, mx);",
        "TEXP(s_ub, s_ub);",
        "TCVT(p_ub, s_ub, RoundMode::CAST_RINT);",
        "TROWEXPANDDIV(o_ub, o_ub, sum_col);",
        "TMULS(s_ub, s_ub, scale);",
        "using GmQ = GlobalTensor<half, pto::Shape<1, 1, 1, 64, 32>, pto::Stride<1, 1, 1, 1, 64>, Layout::DN>;",
        "#if defined(__DAV_VEC__)",
    ] {
        assert!(k.contains(needle), "missing `{needle}` in:\n{k}");
    }
    // Channels became cross-core flags: the cube signals both AIVs (id, id + 16).
    assert!(k.contains("set_intra_block(PIPE_FIX, 0);  // AIV0"), "{k}");
    assert!(k.contains("set_intra_block(PIPE_FIX, 16);  // AIV1"), "{k}");
    assert!(k.contains("wait_intra_block(PIPE_V, 0);"), "{k}");
}

#[test]
fn gather_reads_like_pto() {
    let p = package(&kernels::gather_matmul(&GatherMatmulParams::default()), 2);
    let k = &p.kernel_cpp;
    for needle in [
        "const int64_t token = static_cast<int64_t>(indices[tile * 32 + gi]);",
        "const int64_t row = static_cast<int64_t>(block_table[token / 16]) * 16 + token % 16;",
        "TASSIGN(k_l1_row, 0x1000 + (tp % 2) * 0x2000 + gi * 32);",
        "TLOAD(k_l1_row, cache_row);",
        "using KL1Row = Tile<TileType::Mat, half, 32, 128, BLayout::ColMajor, 1, 128, SLayout::RowMajor, 512>;",
        "TRESHAPE(kt_l1[1], k_l1[1]);",
        "for (int64_t tp = 0; tp < (2 + block_num - 1) / block_num; tp += 2) {",
    ] {
        assert!(k.contains(needle), "missing `{needle}` in:\n{k}");
    }
    assert_eq!(p.manifest["args"][2]["range"]["min"], 0.0);
}

// ---------------------------------------------------------------------------------------------
// Syntax check of every kernel and variants

#[test]
fn every_reference_kernel_passes_the_syntax_check() {
    let mut kernels_and_dims: Vec<(Kernel, u64)> =
        kernels::all().into_iter().map(|k| (k, 1)).collect();
    kernels_and_dims.push((kernels::worked_matmul(), 1));
    for (k, b) in kernels_and_dims {
        assert_syntax_ok(&package(&k, b));
    }
}

#[test]
fn variants_pass_the_syntax_check() {
    let variants: Vec<(Kernel, u64)> = vec![
        (
            kernels::gather_matmul(&GatherMatmulParams::int8()),
            GatherMatmulParams::int8().block_dim(),
        ),
        (
            kernels::gather_matmul(&GatherMatmulParams::upstream_small()),
            GatherMatmulParams::upstream_small().block_dim(),
        ),
        (
            kernels::attention_tile(&AttentionParams {
                dtype: DType::BF16,
                handoff: Handoff::CrossFlags,
                batch: 2,
                ..Default::default()
            }),
            2,
        ),
        (
            kernels::matmul(&MatmulParams {
                m: 100,
                k: 200,
                n: 72,
                ..Default::default()
            }),
            4,
        ),
        (
            kernels::matmul(&MatmulParams {
                dtype: DType::I8,
                tile_n: 64,
                tile_k: 64,
                ..Default::default()
            }),
            4,
        ),
        (
            kernels::matmul(&MatmulParams {
                dtype: DType::BF16,
                m: 64,
                k: 64,
                n: 64,
                ..Default::default()
            }),
            1,
        ),
    ];
    for (k, b) in variants {
        let p = package(&k, b);
        assert_syntax_ok(&p);
    }
}

#[test]
fn bf16_attention_with_cross_flags_uses_hand_written_ids() {
    let k = kernels::attention_tile(&AttentionParams {
        dtype: DType::BF16,
        handoff: Handoff::CrossFlags,
        ..Default::default()
    });
    let p = package(&k, 1);
    assert!(
        p.kernel_cpp
            .contains("using KL0 = TileLeft<bfloat16_t, 128, 64>;"),
        "{}",
        p.kernel_cpp
    );
    assert!(
        p.kernel_cpp
            .contains("wait_intra_block(PIPE_MTE1, 17);  // AIV1"),
        "{}",
        p.kernel_cpp
    );
    assert!(
        p.kernel_cpp.contains("set_intra_block(PIPE_MTE3, 1);"),
        "{}",
        p.kernel_cpp
    );
}

// ---------------------------------------------------------------------------------------------
// Documented constraints fail the syntax check

fn expect_static_assert(p: &Package, message: &str) {
    match syntax_check(p) {
        Ok(()) => panic!(
            "`{}` breaks a documented constraint but passed the syntax check:\n{}",
            p.name, p.kernel_cpp
        ),
        Err(e) => assert!(
            e.contains(message),
            "expected the static_assert `{message}`, got:\n{e}"
        ),
    }
}

/// A one-tile matmul whose operand tiles are declared with `left` and `right` layouts.
fn matmul_with_layouts(left: Layout, right: Layout) -> Kernel {
    let (m, k, n) = (32u64, 32u64, 32u64);
    let mut kb = KernelBuilder::new("bad_matmul");
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
        TileType::new(MemSpace::Left, DType::F16, m, k, left),
    );
    let b_l0 = kb.tile(
        "b_l0",
        TileType::new(MemSpace::Right, DType::F16, k, n, right),
    );
    let acc = kb.tile(
        "acc",
        TileType::new(MemSpace::Acc, DType::F32, m, n, Layout::NZ),
    );
    kb.cube(|cb| {
        cb.load(a_l1, GmView::nd(a, 0, m, k, k));
        cb.load(b_l1, GmView::nd(b, 0, k, n, n));
        cb.mov(a_l0, a_l1);
        cb.mov(b_l0, b_l1);
        cb.matmul(acc, a_l0, b_l0).phase(Phase::Final);
        cb.store(GmView::nd(c, 0, m, n, n), acc);
    });
    kb.build()
}

#[test]
fn the_well_formed_control_kernel_passes() {
    // The control for the violation tests below: the same kernel with the documented layouts.
    let k = matmul_with_layouts(Layout::NZ, Layout::ZN);
    assert!(tile_backend::verify::verify(&k).is_ok());
    assert_syntax_ok(&package_unverified(&k));
}

#[test]
fn left_tile_in_zn_fails_the_syntax_check() {
    let k = matmul_with_layouts(Layout::ZN, Layout::ZN);
    assert!(
        !tile_backend::verify::verify(&k).is_ok(),
        "the verifier rejects it too"
    );
    let p = package_unverified(&k);
    assert!(p
        .kernel_cpp
        .contains("using AL0 = Tile<TileType::Left, half, 32, 32, BLayout::RowMajor"));
    expect_static_assert(&p, "PTO: TMATMUL requires A to be a TileLeft");
}

#[test]
fn right_tile_in_nz_fails_the_syntax_check() {
    let p = package_unverified(&matmul_with_layouts(Layout::NZ, Layout::NZ));
    expect_static_assert(&p, "PTO: TMATMUL requires B to be a TileRight");
}

/// Acc -> Vec move with a mode and a scale, and a per-channel Scaling tile of `scale_n` columns.
fn fixpipe_kernel(mode: AccToVecMode, scale: Option<Scale>, scale_n: u64) -> Kernel {
    let (m, n) = (32u64, 32u64);
    let mut kb = KernelBuilder::new("fixpipe");
    let acc = kb.tile(
        "acc",
        TileType::new(MemSpace::Acc, DType::F32, m, n, Layout::NZ),
    );
    let rows = if mode.is_dual() { m / 2 } else { m };
    let out = kb.tile(
        "out",
        TileType::new(MemSpace::Vec, DType::F16, rows, n, Layout::ND),
    );
    let sc_l1 = kb.tile(
        "sc_l1",
        TileType::new(MemSpace::Mat, DType::U64, 1, scale_n, Layout::ND),
    );
    let sc = kb.tile(
        "sc",
        TileType::new(MemSpace::Scaling, DType::U64, 1, scale_n, Layout::ND),
    );
    let words = kb.input("words", DType::U64, [1, scale_n]);
    let scale = scale.map(|s| match s {
        Scale::Tile(_) => Scale::Tile(sc.into()),
        other => other,
    });
    kb.cube(|cb| {
        cb.load(sc_l1, GmView::nd(words, 0, 1, scale_n, scale_n));
        cb.mov(sc, sc_l1);
        let mv = cb.mov(out, acc).mode(mode);
        if let Some(s) = scale {
            mv.scale(s);
        }
    });
    kb.build()
}

#[test]
fn dual_mode_move_with_a_scale_fails_the_syntax_check() {
    let word = Scale::Const(QuantWord::new(0.5, false));
    // Control: the same quantising move in a single mode is well-formed.
    let ok = package_unverified(&fixpipe_kernel(
        AccToVecMode::SingleModeVec0,
        Some(word.clone()),
        16,
    ));
    assert_syntax_ok(&ok);
    let p = package_unverified(&fixpipe_kernel(
        AccToVecMode::DualModeSplitM,
        Some(word),
        16,
    ));
    assert!(
        p.kernel_cpp.contains("AccToVecMode::DualModeSplitM"),
        "{}",
        p.kernel_cpp
    );
    expect_static_assert(&p, "cannot be combined with quantisation");
    let p = package_unverified(&fixpipe_kernel(
        AccToVecMode::DualModeSplitN,
        Some(Scale::Tile(TileId(0).into())),
        16,
    ));
    expect_static_assert(&p, "cannot be combined with quantisation");
}

#[test]
fn scaling_tile_with_n_not_a_multiple_of_16_fails_the_syntax_check() {
    let tile_scale = Some(Scale::Tile(TileId(0).into()));
    assert_syntax_ok(&package_unverified(&fixpipe_kernel(
        AccToVecMode::SingleModeVec0,
        tile_scale.clone(),
        32,
    )));
    let p = package_unverified(&fixpipe_kernel(AccToVecMode::SingleModeVec0, tile_scale, 8));
    expect_static_assert(&p, "PTO: Scaling Tile N must be a multiple of 16");
}

/// A vector kernel: load `x` [16, 32] of `src` into UB, then `body` on (x tile, an `out` tile).
fn vector_op_kernel(
    name: &str,
    src: DType,
    out: TileType,
    body: impl FnOnce(&mut tile_backend::dsl::Body<'_>, TileId, TileId),
) -> Kernel {
    let (r, c) = (16u64, 32u64);
    let mut kb = KernelBuilder::new(name);
    let x = kb.input("x", src, [r, c]);
    let tx = kb.tile("tx", TileType::new(MemSpace::Vec, src, r, c, Layout::ND));
    let to = kb.tile("to", out);
    kb.vector(|v| {
        v.load(tx, GmView::nd(x, 0, r, c, c));
        body(v, tx, to);
    });
    kb.build()
}

#[test]
fn a_vector_op_in_a_dtype_its_instruction_lacks_fails_the_syntax_check() {
    // Row reductions have no bf16 form on Ascend 950 (a5/TRowReduce.hpp); the verifier's
    // vector-dtype rule and the header's static_assert both say so.
    let row_max = |dt: DType| {
        let per_row = TileType::new(MemSpace::Vec, dt, 16, 16, Layout::ND).valid(16, 1);
        vector_op_kernel("row_max", dt, per_row, |v, x, o| v.row_max(o, x))
    };
    for dt in [DType::F32, DType::F16] {
        let k = row_max(dt);
        let report = tile_backend::verify::verify(&k);
        assert!(report.is_ok(), "{report}");
        assert_syntax_ok(&package_unverified(&k));
    }
    let k = row_max(DType::BF16);
    let report = tile_backend::verify::verify(&k);
    assert!(
        report
            .errors()
            .any(|d| d.message.contains("row_max on bf16") && d.message.contains("TROWMAX")),
        "{report}"
    );
    let p = package_unverified(&k);
    assert!(p.kernel_cpp.contains("TROWMAX("), "{}", p.kernel_cpp);
    expect_static_assert(&p, "PTO: TROWMAX/TROWMIN support half, float");

    // TCVT has no int32 -> half on Ascend 950 (a5/TCvt.hpp, docs/isa/TCVT.md); int32 -> float is.
    let cast = |to: DType| {
        let out = TileType::new(MemSpace::Vec, to, 16, 32, Layout::ND);
        vector_op_kernel("cast", DType::I32, out, |v, x, o| {
            v.cast(o, x, RoundMode::Rint)
        })
    };
    let ok = cast(DType::F32);
    assert!(tile_backend::verify::verify(&ok).is_ok());
    assert_syntax_ok(&package_unverified(&ok));
    let bad = cast(DType::F16);
    assert!(!tile_backend::verify::verify(&bad).is_ok());
    expect_static_assert(
        &package_unverified(&bad),
        "PTO: TCVT does not implement this source -> destination element type pair on A5",
    );

    // TMUL has no 8-bit integer form: the same kernel in int32 compiles.
    let mul = |dt: DType| {
        let out = TileType::new(MemSpace::Vec, dt, 16, 32, Layout::ND);
        vector_op_kernel("mul", dt, out, |v, x, o| v.mul(o, x, x))
    };
    assert!(tile_backend::verify::verify(&mul(DType::I32)).is_ok());
    assert_syntax_ok(&package_unverified(&mul(DType::I32)));
    assert!(!tile_backend::verify::verify(&mul(DType::I8)).is_ok());
    expect_static_assert(
        &package_unverified(&mul(DType::I8)),
        "PTO: TMUL does not support this element type on A5",
    );
}

// ---------------------------------------------------------------------------------------------
// Every IR op kind has an emission path

/// The kind of an op, by an exhaustive match: a new `Op` variant does not compile here until
/// this test covers it.
fn kind(op: &Op) -> &'static str {
    match op {
        Op::LoadStore(LoadStoreOp::Load { .. }) => "Load",
        Op::LoadStore(LoadStoreOp::Store { .. }) => "Store",
        Op::Move(MoveOp::Move { .. }) => "Move",
        Op::Matmul(MatmulOp::Matmul { .. }) => "Matmul",
        Op::Gather(GatherOp::GatherInL1 { .. }) => "GatherInL1",
        Op::Vector(VectorOp::Unary { .. }) => "Unary",
        Op::Vector(VectorOp::Binary { .. }) => "Binary",
        Op::Vector(VectorOp::BinaryScalar { .. }) => "BinaryScalar",
        Op::Vector(VectorOp::Reduce { .. }) => "Reduce",
        Op::Vector(VectorOp::Broadcast { .. }) => "Broadcast",
        Op::Vector(VectorOp::Expand { .. }) => "Expand",
        Op::Vector(VectorOp::Cast { .. }) => "Cast",
        Op::Vector(VectorOp::LeakyRelu { .. }) => "LeakyRelu",
        Op::Vector(VectorOp::Fill { .. }) => "Fill",
        Op::Vector(VectorOp::SetValidShape { .. }) => "SetValidShape",
        Op::Vector(VectorOp::FillPad { .. }) => "FillPad",
        Op::Sort(SortOp::Sort32 { .. }) => "Sort32",
        Op::Sort(SortOp::MrgSort { .. }) => "MrgSort",
        Op::Sort(SortOp::MrgSortLists { .. }) => "MrgSortLists",
        Op::Scalar(ScalarOp::ReadScalar { .. }) => "ReadScalar",
        Op::Scalar(ScalarOp::ReadTileScalar { .. }) => "ReadTileScalar",
        Op::Scalar(ScalarOp::WriteScalar { .. }) => "WriteScalar",
        Op::Sync(SyncOp::SetFlag { .. }) => "SetFlag",
        Op::Sync(SyncOp::WaitFlag { .. }) => "WaitFlag",
        Op::Sync(SyncOp::Barrier { .. }) => "Barrier",
        Op::Sync(SyncOp::SetCrossFlag { .. }) => "SetCrossFlag",
        Op::Sync(SyncOp::WaitCrossFlag { .. }) => "WaitCrossFlag",
        Op::Sync(SyncOp::ChannelAcquire { .. }) => "ChannelAcquire",
        Op::Sync(SyncOp::ChannelPush { .. }) => "ChannelPush",
        Op::Sync(SyncOp::ChannelPop { .. }) => "ChannelPop",
        Op::Sync(SyncOp::ChannelRelease { .. }) => "ChannelRelease",
    }
}

/// Number of `Op` variants (the arms of `kind`).
const OP_KINDS: usize = 31;

/// Emits `ops` in one section of `base` (planned): each op alone, checking its instruction
/// appears, then all together through the syntax check; returns the kinds seen.
fn emit_ops(base: Kernel, section: CoreKind, ops: Vec<Op>) -> BTreeSet<&'static str> {
    let arch = arch();
    let with_ops = |ops: &[Op]| {
        let mut k = base.clone();
        let stmts: Vec<Stmt> = ops.iter().cloned().map(Stmt::Op).collect();
        match section {
            CoreKind::Cube => k.cube = stmts,
            CoreKind::Vector => k.vector = stmts,
        }
        memory::plan(&k, &arch).expect("plan")
    };
    let mut seen = BTreeSet::new();
    for op in &ops {
        let planned = with_ops(std::slice::from_ref(op));
        let p = emit(&planned, &arch, &LaunchSpec::new(1))
            .unwrap_or_else(|e| panic!("{} has no emission path: {e}", kind(op)));
        let name = instruction(&planned, op);
        assert!(
            p.kernel_cpp.contains(name),
            "{} should emit {name}:\n{}",
            kind(op),
            p.kernel_cpp
        );
        seen.insert(kind(op));
    }
    let p = emit(&with_ops(&ops), &arch, &LaunchSpec::new(1)).expect("emit");
    assert_syntax_ok(&p);
    seen
}

fn t(space: MemSpace, dt: DType, r: u64, c: u64, l: Layout) -> TileType {
    TileType::new(space, dt, r, c, l)
}

#[test]
fn every_op_kind_has_an_emission_path() {
    use MemSpace::*;
    let mut seen = BTreeSet::new();

    // Cube: loads, moves of every path and Fixpipe option, matmuls, gather, stores.
    let mut kb = KernelBuilder::new("cube_ops");
    let a = kb.input("a", DType::F16, [64, 32]);
    let idx = kb.input("idx", DType::I32, [1, 32]);
    let bt = kb.input("bt", DType::I32, [1, 4]);
    let out = kb.output("out", DType::F32, [32, 32]);
    let out16 = kb.output("out16", DType::F16, [32, 32]);
    let f32s = kb.scalar("qscale", DType::F32);
    let words = kb.input("words", DType::U64, [1, 32]);
    let bias_gm = kb.input("bias", DType::F32, [1, 32]);
    let a_big = kb.tile("a_big", t(Mat, DType::F16, 64, 32, Layout::NZ));
    let a_l1 = kb.tile(
        "a_l1",
        t(Mat, DType::F16, 32, 32, Layout::NZ)
            .dynamic()
            .pad(PadValue::Zero),
    );
    let b_l1 = kb.tile("b_l1", t(Mat, DType::F16, 32, 32, Layout::NZ));
    let bias_l1 = kb.tile("bias_l1", t(Mat, DType::F32, 1, 32, Layout::ND));
    let sc_l1 = kb.tile("sc_l1", t(Mat, DType::U64, 1, 32, Layout::ND));
    let acc_l1 = kb.tile("acc_l1", t(Mat, DType::F32, 32, 32, Layout::NZ));
    let a_l0 = kb.tile("a_l0", t(Left, DType::F16, 32, 32, Layout::NZ));
    let b_l0 = kb.tile("b_l0", t(Right, DType::F16, 32, 32, Layout::ZN));
    let bias = kb.tile("bias_bt", t(Bias, DType::F32, 1, 32, Layout::ND));
    let sc = kb.tile("sc", t(Scaling, DType::U64, 1, 32, Layout::ND));
    let acc = kb.tile("acc", t(Acc, DType::F32, 32, 32, Layout::NZ));
    let v_full = kb.tile("v_full", t(Vec, DType::F32, 32, 32, Layout::ND));
    let v_half = kb.tile("v_half", t(Vec, DType::F32, 16, 32, Layout::ND));
    let v_f16 = kb.tile("v_f16", t(Vec, DType::F16, 32, 32, Layout::ND));
    let v_part = kb.tile("v_part", t(Vec, DType::F32, 16, 16, Layout::ND));
    let view = |p, r: u64, c: u64| GmView::nd(p, 0, r, c, c);
    let mv = |dst: TileId, src: TileId| {
        Op::Move(MoveOp::Move {
            dst: dst.into(),
            src: src.into(),
            offset: None,
            acc_to_vec: None,
            relu: false,
            scale: None,
            phase: None,
        })
    };
    let with = |op: Op, f: &dyn Fn(&mut Op)| {
        let mut op = op;
        f(&mut op);
        op
    };
    let store = |src: TileId, dst: GmView| {
        Op::LoadStore(LoadStoreOp::Store {
            dst,
            src: src.into(),
            relu: false,
            scale: None,
            atomic_add: false,
            phase: None,
        })
    };
    let word = Scale::Const(QuantWord::new(0.25, false));
    let cube_ops = vec![
        Op::LoadStore(LoadStoreOp::Load {
            dst: b_l1.into(),
            src: view(a, 32, 32),
        }),
        Op::LoadStore(LoadStoreOp::Load {
            dst: a_big.into(),
            src: view(a, 64, 32),
        }),
        Op::LoadStore(LoadStoreOp::Load {
            dst: bias_l1.into(),
            src: view(bias_gm, 1, 32),
        }),
        Op::LoadStore(LoadStoreOp::Load {
            dst: sc_l1.into(),
            src: view(words, 1, 32),
        }),
        Op::Vector(VectorOp::SetValidShape {
            tile: a_l1.into(),
            rows: 32.into(),
            cols: 30.into(),
        }),
        Op::Gather(GatherOp::GatherInL1 {
            dst: a_l1.into(),
            src: a,
            indices: view(idx, 1, 32),
            block_table: view(bt, 1, 4),
            block_size: 16.into(),
            size: 30,
            col_offset: 2.into(),
            is_b_matrix: false,
            is_trans: false,
        }),
        Op::Vector(VectorOp::FillPad { tile: a_l1.into() }),
        mv(a_l0, b_l1),
        with(mv(a_l0, a_big), &|o| {
            if let Op::Move(MoveOp::Move { offset, .. }) = o {
                *offset = Some([32.into(), 0.into()])
            }
        }),
        mv(b_l0, b_l1),
        mv(bias, bias_l1),
        mv(sc, sc_l1),
        Op::Matmul(MatmulOp::Matmul {
            dst: acc.into(),
            a: a_l0.into(),
            b: b_l0.into(),
            bias: None,
            accumulate: false,
            phase: Some(Phase::Partial),
        }),
        Op::Matmul(MatmulOp::Matmul {
            dst: acc.into(),
            a: a_l0.into(),
            b: b_l0.into(),
            bias: None,
            accumulate: true,
            phase: Some(Phase::Final),
        }),
        Op::Matmul(MatmulOp::Matmul {
            dst: acc.into(),
            a: a_l0.into(),
            b: b_l0.into(),
            bias: Some(bias.into()),
            accumulate: false,
            phase: None,
        }),
        Op::Matmul(MatmulOp::Matmul {
            dst: acc.into(),
            a: a_l0.into(),
            b: b_l0.into(),
            bias: None,
            accumulate: true,
            phase: None,
        }),
        with(mv(v_full, acc), &|o| {
            if let Op::Move(MoveOp::Move {
                acc_to_vec, phase, ..
            }) = o
            {
                *acc_to_vec = Some(AccToVecMode::SingleModeVec1);
                *phase = Some(Phase::Final)
            }
        }),
        with(mv(v_half, acc), &|o| {
            if let Op::Move(MoveOp::Move {
                acc_to_vec, relu, ..
            }) = o
            {
                *acc_to_vec = Some(AccToVecMode::DualModeSplitM);
                *relu = true
            }
        }),
        with(mv(v_f16, acc), &|o| {
            if let Op::Move(MoveOp::Move { scale, .. }) = o {
                *scale = Some(word.clone())
            }
        }),
        with(mv(v_f16, acc), &|o| {
            if let Op::Move(MoveOp::Move {
                scale, acc_to_vec, ..
            }) = o
            {
                *scale = Some(Scale::Scalar(f32s));
                *acc_to_vec = Some(AccToVecMode::SingleModeVec0)
            }
        }),
        with(mv(v_f16, acc), &|o| {
            if let Op::Move(MoveOp::Move { scale, .. }) = o {
                *scale = Some(Scale::Tile(sc.into()))
            }
        }),
        with(mv(v_f16, acc), &|o| {
            if let Op::Move(MoveOp::Move {
                scale,
                acc_to_vec,
                relu,
                ..
            }) = o
            {
                *scale = Some(Scale::Tile(sc.into()));
                *acc_to_vec = Some(AccToVecMode::SingleModeVec0);
                *relu = true
            }
        }),
        with(mv(v_part, acc), &|o| {
            if let Op::Move(MoveOp::Move { offset, .. }) = o {
                *offset = Some([16.into(), 16.into()])
            }
        }),
        with(mv(v_part, acc), &|o| {
            if let Op::Move(MoveOp::Move {
                offset,
                acc_to_vec,
                relu,
                ..
            }) = o
            {
                *offset = Some([0.into(), 16.into()]);
                *acc_to_vec = Some(AccToVecMode::SingleModeVec0);
                *relu = true
            }
        }),
        mv(acc_l1, acc),
        store(acc, view(out, 32, 32)),
        with(store(acc, view(out, 32, 32)), &|o| {
            if let Op::LoadStore(LoadStoreOp::Store { phase, relu, .. }) = o {
                *phase = Some(Phase::Final);
                *relu = true
            }
        }),
        with(store(acc, view(out, 32, 32)), &|o| {
            if let Op::LoadStore(LoadStoreOp::Store { atomic_add, .. }) = o {
                *atomic_add = true
            }
        }),
        with(store(acc, view(out16, 32, 32)), &|o| {
            if let Op::LoadStore(LoadStoreOp::Store { scale, .. }) = o {
                *scale = Some(word.clone())
            }
        }),
        with(store(acc, view(out16, 32, 32)), &|o| {
            if let Op::LoadStore(LoadStoreOp::Store { scale, relu, .. }) = o {
                *scale = Some(Scale::Tile(sc.into()));
                *relu = true
            }
        }),
        Op::Sync(SyncOp::SetFlag {
            src: Pipe::Mte2,
            dst: Pipe::Mte1,
            event: 7,
        }),
        Op::Sync(SyncOp::WaitFlag {
            src: Pipe::Mte2,
            dst: Pipe::Mte1,
            event: 7,
        }),
        Op::Sync(SyncOp::Barrier { pipe: Pipe::All }),
        Op::Sync(SyncOp::SetCrossFlag {
            pipe: Pipe::Fix,
            id: 17,
        }),
        Op::Sync(SyncOp::WaitCrossFlag {
            pipe: Pipe::Mte1,
            id: 2,
        }),
        Op::Scalar(ScalarOp::ReadScalar {
            var: VarId(0),
            tensor: bt,
            index: 3.into(),
        }),
    ];
    let mut base = kb.build();
    base.vars.push(VarDecl {
        name: "entry".into(),
    });
    seen.extend(emit_ops(base, CoreKind::Cube, cube_ops));

    // Vector: element-wise, scalar forms, reductions, broadcasts, casts, fills, moves, stores.
    let mut kb = KernelBuilder::new("vector_ops");
    let x = kb.input("x", DType::F32, [16, 32]);
    let y = kb.output("y", DType::F32, [16, 32]);
    let cnt = kb.output("cnt", DType::I32, [1, 16]);
    let alpha = kb.scalar("alpha", DType::F32);
    let s0 = kb.tile(
        "s0",
        t(Vec, DType::F32, 16, 32, Layout::ND).pad(PadValue::Min),
    );
    let s1 = kb.tile("s1", t(Vec, DType::F32, 16, 32, Layout::ND));
    let s2 = kb.tile(
        "s2",
        t(Vec, DType::F32, 16, 32, Layout::ND)
            .dynamic()
            .pad(PadValue::Zero),
    );
    let rowv = kb.tile("rowv", t(Vec, DType::F32, 16, 1, Layout::DN));
    let colv = kb.tile("colv", t(Vec, DType::F32, 1, 32, Layout::ND));
    let h = kb.tile("h", t(Vec, DType::F16, 16, 32, Layout::ND));
    let hz = kb.tile("hz", t(Vec, DType::F16, 16, 32, Layout::NZ));
    let hsmall = kb.tile("hsmall", t(Vec, DType::F16, 16, 16, Layout::ND));
    let keys = kb.tile("keys", t(Vec, DType::I32, 1, 8, Layout::ND));
    let sort_idx = kb.tile("sort_idx", t(Vec, DType::U32, 1, 64, Layout::ND));
    let pairs = kb.tile("pairs", t(Vec, DType::F32, 1, 128, Layout::ND));
    let pairs2 = kb.tile("pairs2", t(Vec, DType::F32, 1, 256, Layout::ND));
    let sort_tmp = kb.tile("sort_tmp", t(Vec, DType::F32, 1, 256, Layout::ND));
    let p_l1 = kb.tile("p_l1", t(Mat, DType::F16, 32, 32, Layout::NZ));
    let un = |op, dst: TileId, src: TileId| {
        Op::Vector(VectorOp::Unary {
            op,
            dst: dst.into(),
            src: src.into(),
        })
    };
    let bin = |op, dst: TileId| {
        Op::Vector(VectorOp::Binary {
            op,
            dst: dst.into(),
            lhs: s0.into(),
            rhs: s1.into(),
        })
    };
    let bs = |op, sc: ScalarArg| {
        Op::Vector(VectorOp::BinaryScalar {
            op,
            dst: s1.into(),
            src: s0.into(),
            scalar: sc,
        })
    };
    let red = |op, axis, dst: TileId| {
        Op::Vector(VectorOp::Reduce {
            op,
            axis,
            dst: dst.into(),
            src: s0.into(),
        })
    };
    let bc = |op, axis, operand: TileId| {
        Op::Vector(VectorOp::Broadcast {
            op,
            axis,
            dst: s1.into(),
            src: s0.into(),
            operand: operand.into(),
        })
    };
    let mut vops = vec![
        Op::LoadStore(LoadStoreOp::Load {
            dst: s0.into(),
            src: view(x, 16, 32),
        }),
        Op::Vector(VectorOp::SetValidShape {
            tile: s2.into(),
            rows: Expr::SubBlockIdx * 8 + 8,
            cols: 32.into(),
        }),
        Op::Vector(VectorOp::FillPad { tile: s2.into() }),
        Op::Vector(VectorOp::Fill {
            dst: s1.into(),
            value: ScalarArg::Const(f64::NEG_INFINITY),
        }),
        Op::Vector(VectorOp::Fill {
            dst: h.into(),
            value: ScalarArg::Const(0.5),
        }),
    ];
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
        vops.push(un(u, s1, s0));
    }
    for b in [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Max,
        BinaryOp::Min,
    ] {
        vops.push(bin(b, s1));
        vops.push(bs(b, ScalarArg::Const(2.0)));
        vops.push(bc(b, Axis::Row, rowv));
        vops.push(bc(b, Axis::Col, colv));
    }
    vops.push(bs(BinaryOp::Mul, ScalarArg::Param(alpha)));
    vops.push(Op::Vector(VectorOp::LeakyRelu {
        dst: s1.into(),
        src: s0.into(),
        slope: ScalarArg::Param(alpha),
    }));
    for r in [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min] {
        vops.push(red(r, Axis::Row, rowv));
        vops.push(red(r, Axis::Col, colv));
    }
    vops.extend([
        Op::Vector(VectorOp::Expand {
            axis: Axis::Row,
            dst: s1.into(),
            src: rowv.into(),
        }),
        Op::Vector(VectorOp::Expand {
            axis: Axis::Col,
            dst: s1.into(),
            src: colv.into(),
        }),
        Op::Vector(VectorOp::Cast {
            dst: h.into(),
            src: s1.into(),
            round: RoundMode::Round,
        }),
        Op::Vector(VectorOp::Cast {
            dst: s1.into(),
            src: h.into(),
            round: RoundMode::Trunc,
        }),
        mv(hz, h),
        with(mv(hsmall, h), &|o| {
            if let Op::Move(MoveOp::Move { offset, .. }) = o {
                *offset = Some([0.into(), 16.into()])
            }
        }),
        with(mv(p_l1, hz), &|o| {
            if let Op::Move(MoveOp::Move { offset, .. }) = o {
                *offset = Some([Expr::SubBlockIdx * 16, 0.into()])
            }
        }),
        store(s1, GmView::nd(y, Expr::SubBlockIdx * 256, 8, 32, 32)),
        with(store(s1, view(y, 16, 32)), &|o| {
            if let Op::LoadStore(LoadStoreOp::Store { atomic_add, .. }) = o {
                *atomic_add = true
            }
        }),
        Op::Sync(SyncOp::SetCrossFlag {
            pipe: Pipe::Mte3,
            id: 4,
        }),
        Op::Sync(SyncOp::WaitCrossFlag {
            pipe: Pipe::V,
            id: 15,
        }),
        Op::Sync(SyncOp::SetFlag {
            src: Pipe::V,
            dst: Pipe::Mte3,
            event: 0,
        }),
        Op::Sync(SyncOp::WaitFlag {
            src: Pipe::V,
            dst: Pipe::Mte3,
            event: 0,
        }),
        Op::Sync(SyncOp::Barrier { pipe: Pipe::V }),
        Op::Scalar(ScalarOp::WriteScalar {
            tensor: cnt,
            index: Expr::SubBlockIdx * 16,
            value: Expr::BlockIdx + 1,
        }),
        Op::Scalar(ScalarOp::ReadTileScalar {
            var: VarId(0),
            tile: keys.into(),
            index: 5.into(),
        }),
        Op::Sort(SortOp::Sort32 {
            dst: pairs.into(),
            src: colv.into(),
            idx: sort_idx.into(),
            tmp: None,
        }),
        Op::Sort(SortOp::Sort32 {
            dst: pairs.into(),
            src: colv.into(),
            idx: sort_idx.into(),
            tmp: Some(sort_tmp.into()),
        }),
        Op::Sort(SortOp::MrgSort {
            dst: pairs2.into(),
            src: sort_tmp.into(),
            block_len: 64,
        }),
        Op::Sort(SortOp::MrgSortLists {
            dst: pairs.into(),
            tmp: pairs2.into(),
            srcs: vec![pairs.into(), sort_tmp.into()],
        }),
    ]);
    let mut vbase = kb.build();
    vbase.vars.push(VarDecl { name: "key".into() });
    seen.extend(emit_ops(vbase, CoreKind::Vector, vops));

    // Channel ops: the sync pass lowers them to cross-core flags; emitting one that was not
    // lowered is an error naming the pass.
    let k = kernels::attention_tile(&AttentionParams::default());
    let planned = memory::plan(&k, &arch()).expect("plan");
    match emit(&planned, &arch(), &LaunchSpec::new(1)) {
        Err(CodegenError::NotCompiled { reason, .. }) => {
            assert!(reason.contains("channel op"), "{reason}")
        }
        other => panic!("an unlowered channel op must be refused, got {other:?}"),
    }
    let p = package(&k, 1);
    let mut channel_kinds = BTreeSet::new();
    walk_ops(&k.cube, &mut |op| {
        channel_kinds.insert(kind(op));
    });
    walk_ops(&k.vector, &mut |op| {
        channel_kinds.insert(kind(op));
    });
    for ch in [
        "ChannelAcquire",
        "ChannelPush",
        "ChannelPop",
        "ChannelRelease",
    ] {
        assert!(channel_kinds.contains(ch), "attention_tile uses {ch}");
        seen.insert(ch);
    }
    assert!(
        p.kernel_cpp.contains("set_intra_block(") && p.kernel_cpp.contains("wait_intra_block(")
    );

    assert_eq!(
        seen.len(),
        OP_KINDS,
        "kinds without an emission test: have {seen:?}"
    );
}

#[test]
fn not_compiled_kernels_are_refused() {
    let k = kernels::worked_matmul();
    match emit(&k, &arch(), &LaunchSpec::new(1)) {
        Err(CodegenError::NotCompiled { reason, .. }) => {
            assert!(reason.contains("no planned address"), "{reason}")
        }
        other => panic!("expected NotCompiled, got {other:?}"),
    }
    let compiled = compile(&k, &arch()).expect("compile");
    assert!(matches!(
        emit(&compiled, &arch(), &LaunchSpec::new(0)),
        Err(CodegenError::Launch { .. })
    ));
    assert!(matches!(
        emit(&compiled, &Arch::a2a3(), &LaunchSpec::new(1)),
        Err(CodegenError::UnsupportedTarget { .. })
    ));
}

#[test]
fn package_writes_three_files() {
    let p = package(&kernels::worked_matmul(), 1);
    let dir = scratch_dir("write");
    let files = p.write_to(&dir).expect("write");
    let names: Vec<String> = files
        .iter()
        .map(|f| {
            f.file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert_eq!(
        names,
        [
            "matmul_f16.cpp",
            "matmul_f16_launcher.cpp",
            "matmul_f16.json"
        ]
    );
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&files[2]).expect("read")).expect("json");
    assert_eq!(manifest, p.manifest);
    assert!(manifest["build"]["cube"]
        .as_str()
        .unwrap_or_default()
        .contains("--cce-aicore-arch=dav-c310-cube"));
    assert!(manifest["build"]["vec"]
        .as_str()
        .unwrap_or_default()
        .contains("--cce-aicore-arch=dav-c310-vec"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_element_wise_op_on_a_dn_column_fails_the_syntax_check() {
    // A5's TADD / TEXP / TMAXS take row-major tiles only (a5/TAdd.hpp, TUnaryOp.hpp,
    // docs/isa/TMAXS.md): the verifier's vector-layout rule and the header's static_assert agree.
    let col = |layout: Layout| {
        let (rows, cols) = if layout == Layout::DN {
            (32, 1)
        } else {
            (1, 32)
        };
        let mut kb = KernelBuilder::new("stats");
        let x = kb.input("x", DType::F32, [32u64]);
        let a = kb.tile(
            "a",
            TileType::new(MemSpace::Vec, DType::F32, rows, cols, layout),
        );
        let b = kb.tile(
            "b",
            TileType::new(MemSpace::Vec, DType::F32, rows, cols, layout),
        );
        kb.vector(|v| {
            let view = if layout == Layout::DN {
                GmView::dn(x, 0, 32, 1, 1)
            } else {
                GmView::nd(x, 0, 1, 32, 32)
            };
            v.load(a, view);
            v.fill(b, 0.0);
            v.add(b, b, a);
            v.exp(b, b);
            v.binary_scalar(BinaryOp::Max, b, b, 1.0);
        });
        kb.build()
    };
    let ok = col(Layout::ND);
    let report = tile_backend::verify::verify(&ok);
    assert!(report.is_ok(), "{report}");
    assert_syntax_ok(&package_unverified(&ok));
    let bad = col(Layout::DN);
    let report = tile_backend::verify::verify(&bad);
    for inst in ["TEXPANDS", "TADD", "TEXP", "TMAXS"] {
        assert!(
            report
                .errors()
                .any(|d| d.rule == tile_backend::verify::Rule::VectorLayout
                    && d.message.starts_with(&format!("{inst} on Ascend 950"))),
            "{inst}: {report}"
        );
    }
    expect_static_assert(
        &package_unverified(&bad),
        "takes row-major tiles only on A5",
    );
}

#[test]
fn a_row_broadcast_with_an_nd_per_row_operand_fails_the_syntax_check() {
    // A5's TROWEXPANDMUL reads a row-major per-row operand as a 32-byte block per row
    // (a5/TRowExpandBinOp.hpp; TRowExpandMul.hpp's PTO_ASSERT wants 32 / sizeof(T) valid
    // columns): the verifier's broadcast-operand rule and the header's static_assert agree.
    let kernel = |operand: TileType| {
        let mut kb = KernelBuilder::new("row_scale");
        let x = kb.input("x", DType::F32, [16u64, 64]);
        let tx = kb.tile(
            "tx",
            TileType::new(MemSpace::Vec, DType::F32, 16, 64, Layout::ND),
        );
        let m = kb.tile("m", operand);
        kb.vector(|v| {
            v.load(tx, GmView::nd(x, 0, 16, 64, 64));
            v.row_max(m, tx);
            v.broadcast(BinaryOp::Mul, Axis::Row, tx, tx, m);
            v.broadcast(BinaryOp::Div, Axis::Row, tx, tx, m);
        });
        kb.build()
    };
    let ok = kernel(TileType::new(MemSpace::Vec, DType::F32, 16, 1, Layout::DN));
    let report = tile_backend::verify::verify(&ok);
    assert!(report.is_ok(), "{report}");
    assert_syntax_ok(&package_unverified(&ok));
    let bad = kernel(TileType::new(MemSpace::Vec, DType::F32, 16, 8, Layout::ND).valid(16, 1));
    let report = tile_backend::verify::verify(&bad);
    for inst in ["TROWEXPANDMUL", "TROWEXPANDDIV"] {
        assert!(
            report
                .errors()
                .any(|d| d.rule == tile_backend::verify::Rule::BroadcastOperand
                    && d.message.starts_with(&format!("{inst} on Ascend 950"))),
            "{inst}: {report}"
        );
    }
    expect_static_assert(
        &package_unverified(&bad),
        "takes its per-row operand as a DN column [R, 1]",
    );
}

/// The PTO instruction names a function body of the code generator can produce: every string
/// literal of the form `"T..."` (upper case), plus the sync and scalar forms.
fn emitted_names(src: &str, func: &str) -> BTreeSet<String> {
    let start = src
        .find(&format!("fn {func}("))
        .unwrap_or_else(|| panic!("no fn {func}"));
    // The body ends at the first closing brace at the `fn` line's indentation.
    let line = src[..start].rsplit('\n').next().unwrap_or("");
    let indent: String = line.chars().take_while(|c| *c == ' ').collect();
    let body = &src[start..];
    let end = body
        .find(&format!("\n{indent}}}\n"))
        .map_or(body.len(), |e| e);
    body[..end]
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|t| {
            !t.is_empty()
                && !t.contains(' ')
                && t.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && t != &"not"
        })
        .map(str::to_string)
        .collect()
}

#[test]
fn every_emitted_instruction_has_an_audit_row() {
    let doc = include_str!("../../docs/codegen.md");
    let audit = doc
        .split("## A5 audit")
        .nth(1)
        .and_then(|a| a.split("\n## ").next())
        .expect("docs/codegen.md has the A5 audit section");
    let rows: Vec<&str> = audit.lines().filter(|l| l.starts_with("| `")).collect();
    let first_cells: Vec<&str> = rows.iter().filter_map(|l| l.split(" | ").next()).collect();
    // Each op family names its instructions next to its ops (`fn instruction`).
    let families = [
        include_str!("../src/ir/op/load_store.rs"),
        include_str!("../src/ir/op/moves.rs"),
        include_str!("../src/ir/op/matmul.rs"),
        include_str!("../src/ir/op/gather.rs"),
        include_str!("../src/ir/op/vector.rs"),
        include_str!("../src/ir/op/sort.rs"),
        include_str!("../src/ir/op/scalar.rs"),
        include_str!("../src/ir/op/sync.rs"),
    ];
    let mut names = BTreeSet::new();
    for family in families {
        names.extend(emitted_names(family, "instruction"));
    }
    assert!(names.len() > 50, "found only {names:?}");
    for n in &names {
        let cell = format!("`{n}`");
        assert!(
            first_cells.iter().any(|c| c.contains(&cell)),
            "the emitter can produce {n}, but docs/codegen.md's A5 audit has no row for it"
        );
    }
    // Multi-word names ("GM scalar read") are matched whole.
    for n in ["GM scalar read", "GM scalar write"] {
        assert!(audit.contains(&format!("`{n}`")), "{n}");
    }
}

/// TLRELU (`VectorOp::LeakyRelu`, the instruction added to show what a new IR op touches): the
/// simulator computes `x > 0 ? x : x * slope` rounded once to the tile's dtype, the verifier
/// refuses an integer tile, and the emitted call passes the syntax check.
#[test]
fn leaky_relu_simulates_verifies_and_emits() {
    use tile_backend::sim::{numeric, Arg, GmTensor};
    let (r, c) = (8u64, 32u64);
    let build = |dt: DType| {
        let mut kb = KernelBuilder::new("leaky_relu");
        let x = kb.input("x", dt, [r, c]);
        let z = kb.output("z", dt, [r, c]);
        let slope = kb.scalar("slope", DType::F32);
        let tx = kb.tile("tx", TileType::new(MemSpace::Vec, dt, r, c, Layout::ND));
        let tz = kb.tile("tz", TileType::new(MemSpace::Vec, dt, r, c, Layout::ND));
        kb.vector(|v| {
            v.if_(Expr::SubBlockIdx.eq_(0), |v| {
                v.load(tx, GmView::nd(x, 0, r, c, c));
                v.leaky_relu(tz, tx, slope);
                v.store(GmView::nd(z, 0, r, c, c), tz);
            });
        });
        kb.build()
    };
    for dt in [DType::F32, DType::F16] {
        let k = build(dt);
        let report = tile_backend::verify::verify(&k);
        assert!(report.is_ok(), "{dt}: {report}");
        let xs: Vec<f32> = (0..r * c).map(|i| (i as f32 - 128.0) / 16.0).collect();
        let x = GmTensor::from_f32(dt, &[r as usize, c as usize], &xs);
        let xv = x.to_f32();
        let mut args = vec![
            Arg::Tensor(x),
            Arg::Tensor(GmTensor::zeros(dt, &[r as usize, c as usize])),
            Arg::Float(0.1),
        ];
        let compiled = compile(&k, &arch()).expect("compiles");
        support::simulate_with(&compiled, &arch(), &mut args, 1).expect("runs");
        let got = args[1].tensor().expect("tensor").to_f32();
        let slope = 0.1f64 as f32;
        for (i, (g, x)) in got.iter().zip(&xv).enumerate() {
            let want = numeric::round_to(dt, if *x > 0.0 { *x } else { x * slope });
            assert_eq!(g.to_bits(), want.to_bits(), "{dt} at {i}: {g} vs {want}");
        }
        assert!(got.iter().any(|v| *v < 0.0) && got.iter().any(|v| *v > 1.0));
        let p = package(&k, 1);
        assert!(p.kernel_cpp.contains("TLRELU(tz, tx, "), "{}", p.kernel_cpp);
        assert_syntax_ok(&p);
    }
    let report = tile_backend::verify::verify(&build(DType::I32));
    assert!(
        report
            .errors()
            .any(|d| d.rule == tile_backend::verify::Rule::VectorDtype
                && d.message.contains("TLRELU")),
        "{report}"
    );
}

/// The sort instructions: the emitted calls pass the syntax check, and a sort the verifier
/// refuses (i32 indices, a two-row merge list) also fails it, on the declaration header's
/// static_asserts from `a5/TSort32.hpp` and `a5/TMrgSort.hpp`.
#[test]
fn sort_instructions_emit_and_their_constraints_fail_the_syntax_check() {
    let sort = |idx_dtype: DType, list_rows: u64| {
        let mut kb = KernelBuilder::new("sorts");
        let src = kb.tile("src", t(MemSpace::Vec, DType::F32, 1, 64, Layout::ND));
        let idx = kb.tile("idx", t(MemSpace::Vec, idx_dtype, 1, 64, Layout::ND));
        let pairs = kb.tile("pairs", t(MemSpace::Vec, DType::F32, 1, 128, Layout::ND));
        let other = kb.tile(
            "other",
            t(MemSpace::Vec, DType::F32, list_rows, 128, Layout::ND).valid(1, 128),
        );
        let tmp = kb.tile("tmp", t(MemSpace::Vec, DType::F32, 1, 256, Layout::ND));
        let best = kb.tile("best", t(MemSpace::Vec, DType::F32, 1, 64, Layout::ND));
        kb.vector(|v| {
            v.fill(src, 1.0);
            v.fill(idx, 0.0);
            v.sort32(pairs, src, idx);
            v.sort32(other, src, idx);
            v.mrgsort_lists(best, tmp, [pairs.into(), other.into()]);
        });
        kb.build()
    };
    let p = package(&sort(DType::U32, 1), 1);
    for call in [
        "TSORT32(pairs, src, idx);",
        "MrgSortExecutedNumList",
        "false>(best, ",
    ] {
        assert!(p.kernel_cpp.contains(call), "{call}:\n{}", p.kernel_cpp);
    }
    assert_syntax_ok(&p);
    assert!(!tile_backend::verify::verify(&sort(DType::I32, 1)).is_ok());
    expect_static_assert(
        &package_unverified(&sort(DType::I32, 1)),
        "PTO: TSORT32 indices must be uint32_t",
    );
    assert!(!tile_backend::verify::verify(&sort(DType::U32, 2)).is_ok());
    expect_static_assert(
        &package_unverified(&sort(DType::U32, 2)),
        "PTO: TMRGSORT tiles must have one row",
    );
}
