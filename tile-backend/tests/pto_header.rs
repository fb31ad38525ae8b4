//! Tests for the declaration-only PTO-ISA stand-in header (`codegen/include/pto/pto-inst.hpp`)
//! that emitted Ascend 950 kernels are syntax-checked against in CI.
//!
//! Correct kernels must compile with `g++ -std=c++17 -fsyntax-only` in every section pass (no
//! section macro, the cube pass and the vector pass), without warnings from the header; each
//! documented constraint the header states as a `static_assert` must reject a kernel that violates
//! it, with that assert's "PTO: ..." message on stderr.
//!
//! g++ is required: when it is missing these tests fail (CI installs it), they do not skip.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The three ways an emitted kernel is compiled: plain, the AIC (cube) pass and the AIV (vector) pass.
const SECTION_PASSES: [&[&str]; 3] = [
    &[],
    &["-D__DAV_CUBE__", "-D__DAV_C310_CUBE__"],
    &["-D__DAV_VEC__", "-D__DAV_C310_VEC__"],
];

fn include_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("codegen")
        .join("include")
}

fn require_gxx() {
    let out = Command::new("g++").arg("--version").output();
    match out {
        Ok(o) if o.status.success() => {}
        Ok(o) => panic!(
            "`g++ --version` failed ({}); the PTO header tests need a working g++ (CI installs it): {}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => panic!(
            "g++ not found ({e}); the PTO header tests need g++ on PATH (CI installs it: apt-get install g++). \
             These tests do not skip."
        ),
    }
}

fn scratch_dir(test: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("tileops_pto_header_{}_{test}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create scratch dir for C++ sources");
    dir
}

struct Compiled {
    ok: bool,
    stderr: String,
}

fn compile(dir: &Path, name: &str, source: &str, extra: &[&str]) -> Compiled {
    let path = dir.join(format!("{name}.cpp"));
    std::fs::write(&path, source).expect("write C++ source");
    let out = Command::new("g++")
        .arg("-std=c++17")
        .arg("-fsyntax-only")
        .arg("-I")
        .arg(include_dir())
        .args(extra)
        .arg(&path)
        .output()
        .expect("run g++");
    Compiled {
        ok: out.status.success(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A matmul-style mixed kernel: GM -> L1 -> L0A/L0B -> matmul -> Fixpipe to both AIVs, with syncs.
const GOOD_MATMUL: &str = r#"
#include <pto/pto-inst.hpp>
using namespace pto;

extern "C" __global__ AICORE void matmul_kernel(__gm__ half* a, __gm__ half* b, __gm__ float* c,
                                                __gm__ uint64_t* scale)
{
    constexpr int M = 128, K = 64, N = 128;
    using GA = GlobalTensor<half, Shape<1, 1, 1, M, K>, Stride<M * K, M * K, M * K, K, 1>>;
    using GB = GlobalTensor<half, Shape<1, 1, 1, K, N>, Stride<K * N, K * N, K * N, N, 1>>;
    using GC = GlobalTensor<float, Shape<1, 1, 1, M / 2, N>, Stride<M * N, M * N, M * N, N, 1>>;
    using GS = GlobalTensor<uint64_t, Shape<1, 1, 1, 1, N>, Stride<N, N, N, N, 1>>;
    using MatA = Tile<TileType::Mat, half, M, K, BLayout::ColMajor, M, K, SLayout::RowMajor, 512>;
    using MatB = Tile<TileType::Mat, half, K, N, BLayout::ColMajor, K, N, SLayout::RowMajor, 512>;
    using MatS = Tile<TileType::Mat, uint64_t, 1, N, BLayout::RowMajor, 1, N>;
    using LeftT = TileLeft<half, M, K>;
    using LeftHalfK = TileLeft<half, M, K / 2>;
    using RightT = TileRight<half, K, N>;
    using AccT = TileAcc<float, M, N>;
    using FpT = Tile<TileType::Scaling, uint64_t, 1, N, BLayout::RowMajor, 1, N>;
    using HalfRows = Tile<TileType::Vec, float, M / 2, N, BLayout::RowMajor, M / 2, N>;
    using WholeH = Tile<TileType::Vec, half, M, N, BLayout::RowMajor, M, N>;
    HalfRows out;
    TASSIGN(out, 0x0);
#if defined(__DAV_CUBE__)
    GA ga(a);
    GB gb(b);
    GS gs(scale);
    MatA ma;
    MatB mb;
    MatS ms;
    LeftT la;
    LeftHalfK lh;
    RightT rb;
    AccT acc;
    FpT fp;
    WholeH vh;
    TASSIGN(ma, 0x0);
    TASSIGN<0x10000>(mb);
    TASSIGN(ms, 0x20000);
    TASSIGN(la, 0x0);
    TASSIGN(lh, 0x8000);
    TASSIGN(rb, 0x0);
    TASSIGN(acc, 0x0);
    TASSIGN<0x0>(fp);
    TASSIGN(vh, 0x0);
    TLOAD(ma, ga);
    TLOAD(mb, gb);
    TLOAD(ms, gs);
    set_flag(PIPE_MTE2, PIPE_MTE1, EVENT_ID0);
    wait_flag(PIPE_MTE2, PIPE_MTE1, EVENT_ID0);
    set_flag(PIPE_MTE2, PIPE_FIX, EVENT_ID0);
    wait_flag(PIPE_MTE2, PIPE_FIX, EVENT_ID0);
    TMOV(fp, ms);
    TMOV(la, ma);
    TMOV(rb, mb);
    TEXTRACT(lh, ma, 0, K / 2);
    set_flag(PIPE_MTE1, PIPE_M, EVENT_ID0);
    wait_flag(PIPE_MTE1, PIPE_M, EVENT_ID0);
    TMATMUL<AccPhase::Partial>(acc, la, rb);
    TMATMUL_ACC<AccPhase::Final>(acc, la, rb);
    TMATMUL(acc, la, rb);
    TMATMUL_ACC(acc, acc, la, rb);
    set_flag(PIPE_M, PIPE_FIX, EVENT_ID1);
    wait_flag(PIPE_M, PIPE_FIX, EVENT_ID1);
    TMOV<STPhase::Final, HalfRows, AccT, AccToVecMode::DualModeSplitM>(out, acc);
    TMOV<HalfRows, AccT, AccToVecMode::DualModeSplitN, ReluPreMode::NormalRelu>(out, acc);
    TMOV(vh, acc);
    TMOV(vh, acc, static_cast<uint64_t>(0x3f800000u));
    TMOV_FP<WholeH, AccT, FpT>(vh, acc, fp);
    TMOV<WholeH, AccT, FpT, AccToVecMode::SingleModeVec1>(vh, acc, fp);
    set_intra_block(PIPE_FIX, 0);
    set_intra_block(PIPE_FIX, 16);
    wait_intra_block(PIPE_FIX, 1);
    wait_intra_block(PIPE_FIX, 17);
    pipe_barrier(PIPE_ALL);
#endif
#if defined(__DAV_VEC__)
    const int64_t row0 = get_block_idx() * M + get_subblockid() * (M / 2);
    GC gc(c + row0 * N);
    wait_intra_block(PIPE_V, 0);
    TMULS(out, out, 2.0f);
    set_flag(PIPE_V, PIPE_MTE3, EVENT_ID0);
    wait_flag(PIPE_V, PIPE_MTE3, EVENT_ID0);
    TSTORE(gc, out);
    set_intra_block(PIPE_V, 1);
#endif
}
"#;

/// A vector kernel: row softmax over a tile with a runtime valid column count, then a cast and store.
const GOOD_VECTOR: &str = r#"
#include <pto/pto-inst.hpp>
#include <pto/common/constants.hpp>
using namespace pto;

template <int R, int C>
AICORE void softmax_rows(__gm__ float* x, __gm__ half* y, int valid_cols)
{
    using GX = GlobalTensor<float, Shape<1, 1, 1, R, DYNAMIC>, Stride<R * C, R * C, R * C, C, 1>>;
    using GY = GlobalTensor<half, Shape<1, 1, 1, R, C>, Stride<R * C, R * C, R * C, C, 1>>;
    using Row = Tile<TileType::Vec, float, R, C, BLayout::RowMajor, R, DYNAMIC, SLayout::NoneBox, 512,
                     PadValue::Min>;
    using RowH = Tile<TileType::Vec, half, R, C, BLayout::RowMajor, R, C>;
    using Red = Tile<TileType::Vec, float, R, 1, BLayout::ColMajor, R, 1>;
    using ColRed = Tile<TileType::Vec, float, 1, C, BLayout::RowMajor, 1, C>;
    using RowB = Tile<TileType::Vec, bfloat16_t, R, C, BLayout::RowMajor, R, C>;
    using ColB = Tile<TileType::Vec, bfloat16_t, 1, C, BLayout::RowMajor, 1, C>;
    using RedB = Tile<TileType::Vec, bfloat16_t, R, 1, BLayout::ColMajor, R, 1>;
    using Row8 = Tile<TileType::Vec, int8_t, R, C, BLayout::RowMajor, R, C>;
    using Red8 = Tile<TileType::Vec, int8_t, R, 32, BLayout::RowMajor, R, 1>;
    GX gx(x, Shape<1, 1, 1, R, DYNAMIC>(valid_cols));
    GY gy(y);
    Row t(valid_cols);
    Row e(valid_cols);
    Row tmp(valid_cols);
    RowH th;
    Red mx;
    Red sm;
    ColRed cm;
    RowB tb;
    ColB cb;
    RedB rb;
    Row8 t8;
    Red8 r8;
    TASSIGN(t, 0x0);
    TASSIGN(e, 0x8000);
    TASSIGN(tmp, 0x10000);
    TASSIGN(mx, 0x18000);
    TASSIGN(sm, 0x18100);
    TASSIGN(th, 0x19000);
    TASSIGN(cm, 0x1d000);
    TASSIGN(tb, 0x20000);
    TASSIGN(cb, 0x24000);
    TASSIGN(rb, 0x24100);
    TASSIGN(t8, 0x25000);
    TASSIGN(r8, 0x27000);
    TLOAD(t, gx);
    set_flag(PIPE_MTE2, PIPE_V, EVENT_ID0);
    wait_flag(PIPE_MTE2, PIPE_V, EVENT_ID0);
    TFILLPAD(t, t);
    TROWMAX(mx, t, tmp);
    TROWEXPANDSUB(e, t, mx);
    TEXP(e, e);
    TROWSUM(sm, e, tmp);
    TROWEXPANDDIV(e, e, sm);
    TCOLMAX(cm, e);
    TCOLEXPANDSUB(e, e, cm);
    TCOLSUM(cm, e);
    TCOLEXPANDMUL(e, e, cm);
    TADD(e, e, t);
    TSUB(e, e, t);
    TMUL(e, e, t);
    TDIV(e, e, t);
    TMAX(e, e, t);
    TMIN(e, e, t);
    TADDS(e, e, 1.0f);
    TMAXS(e, e, 0.0f);
    TDIVS(e, e, 2.0f);
    TEXPANDS(th, half(0.0f));
    TCVT(th, e, RoundMode::CAST_RINT);
    // Forms A5 has in bf16 and 8-bit integers (the row reductions, TMUL and TDIV lack some).
    TCVT(tb, e, RoundMode::CAST_RINT);
    TCOLMAX(cb, tb);
    TCOLEXPANDSUB(tb, tb, cb);
    TROWEXPANDDIV(tb, tb, rb);
    TMUL(tb, tb, tb);
    TNEG(tb, tb);
    TADD(t8, t8, t8);
    TMAXS(t8, t8, static_cast<int8_t>(0));
    TROWMAX(r8, t8, t8);
    TABS(t8, t8);
    TCVT(th, tb, RoundMode::CAST_RINT);
    TCVT(th, t8, RoundMode::CAST_RINT);
    pipe_barrier(PIPE_V);
    set_flag(PIPE_V, PIPE_MTE3, EVENT_ID1);
    wait_flag(PIPE_V, PIPE_MTE3, EVENT_ID1);
    TSTORE(gy, th);
}

extern "C" __global__ AICORE void softmax_kernel(__gm__ float* x, __gm__ half* y, int valid_cols)
{
#if defined(__DAV_VEC__)
    softmax_rows<64, 128>(x, y, valid_cols);
#else
    (void)x;
    (void)y;
    (void)valid_cols;
#endif
}
"#;

#[test]
fn correct_kernels_compile_in_every_section_pass() {
    require_gxx();
    let dir = scratch_dir("good");
    for (name, src) in [("matmul", GOOD_MATMUL), ("vector", GOOD_VECTOR)] {
        for (i, pass) in SECTION_PASSES.iter().enumerate() {
            // Warnings are errors, except those a kernel's own section-only names raise in the other passes.
            let mut flags: Vec<&str> = vec![
                "-Wall",
                "-Wextra",
                "-Werror",
                "-Wno-unused-local-typedefs",
                "-Wno-unused-parameter",
                "-Wno-unused-variable",
            ];
            flags.extend_from_slice(pass);
            let r = compile(&dir, &format!("{name}_{i}"), src, &flags);
            assert!(
                r.ok,
                "{name} kernel failed to compile with {pass:?}:\n{}",
                r.stderr
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Shared prelude of the violating kernels: each case is the body of one kernel function.
const BAD_PRELUDE: &str = r#"
#include <pto/pto-inst.hpp>
using namespace pto;
using Acc64 = TileAcc<float, 64, 64>;
using Left64 = TileLeft<half, 64, 64>;
using Right64 = TileRight<half, 64, 64>;
using FpTile = Tile<TileType::Scaling, uint64_t, 1, 64, BLayout::RowMajor, 1, 64>;
"#;

struct Bad {
    name: &'static str,
    body: &'static str,
    message: &'static str,
}

const BAD_KERNELS: &[Bad] = &[
    // --- TMATMUL operand tiles --------------------------------------------------------------------
    Bad {
        name: "matmul_left_zz_a2a3_layout",
        body: "using L = Tile<TileType::Left, half, 64, 64, BLayout::RowMajor, 64, 64, SLayout::RowMajor, 512>;
               Acc64 c; L a; Right64 b; TMATMUL(c, a, b);",
        message: "PTO: TMATMUL requires A to be a TileLeft",
    },
    Bad {
        name: "matmul_right_is_left",
        body: "Acc64 c; Left64 a; Left64 b; TMATMUL(c, a, b);",
        message: "PTO: TMATMUL requires B to be a TileRight",
    },
    Bad {
        name: "matmul_c_not_acc",
        body: "Tile<TileType::Vec, float, 64, 64> c; Left64 a; Right64 b; TMATMUL(c, a, b);",
        message: "PTO: TMATMUL requires C to be a TileAcc",
    },
    Bad {
        name: "matmul_ab_dtype_mismatch",
        body: "Acc64 c; Left64 a; TileRight<bfloat16_t, 64, 64> b; TMATMUL_ACC(c, a, b);",
        message: "PTO: TMATMUL requires A and B element types to be equal",
    },
    Bad {
        name: "matmul_f16_into_int32_acc",
        body: "TileAcc<int32_t, 64, 64> c; Left64 a; Right64 b; TMATMUL(c, a, b);",
        message: "PTO: TMATMUL dtype triple must be",
    },
    Bad {
        name: "matmul_int8_into_f32_acc",
        body: "Acc64 c; TileLeft<int8_t, 64, 64> a; TileRight<int8_t, 64, 64> b; TMATMUL(c, a, b);",
        message: "PTO: TMATMUL dtype triple must be",
    },
    Bad {
        name: "matmul_k_4096",
        body: "TileAcc<int32_t, 16, 16> c; TileLeft<int8_t, 16, 4096> a; TileRight<int8_t, 4096, 16> b;
               TMATMUL(c, a, b);",
        message: "PTO: TMATMUL k (A valid cols) must be in [1, 4095]",
    },
    Bad {
        name: "matmul_bias_wrong_dtype",
        body: "Acc64 c; Left64 a; Right64 b;
               Tile<TileType::Bias, int32_t, 1, 64, BLayout::RowMajor, 1, 64> bias;
               TMATMUL_BIAS(c, a, b, bias);",
        message: "PTO: TMATMUL_BIAS bias element type must equal the Acc element type",
    },
    // --- Scaling (per-channel Fp) tile ------------------------------------------------------------
    Bad {
        name: "scaling_n_not_multiple_of_16",
        body: "Tile<TileType::Scaling, uint64_t, 1, 24, BLayout::RowMajor, 1, 24> fp; (void)fp;",
        message: "PTO: Scaling Tile N must be a multiple of 16",
    },
    Bad {
        name: "scaling_n_over_512",
        body: "Tile<TileType::Scaling, uint64_t, 1, 528, BLayout::RowMajor, 1, 528> fp; (void)fp;",
        message: "PTO: Scaling Tile N must be <= 512",
    },
    Bad {
        name: "scaling_not_64_bit",
        body: "Tile<TileType::Scaling, float, 1, 64, BLayout::RowMajor, 1, 64> fp; (void)fp;",
        message: "PTO: Scaling Tile element type must be a 64-bit word",
    },
    Bad {
        name: "scaling_row_scaling",
        body: "Tile<TileType::Scaling, uint64_t, 16, 4, BLayout::ColMajor, 16, 4> fp; (void)fp;",
        message: "PTO: Scaling (Fixpipe per-channel scale) Tile must have exactly 1 row",
    },
    // --- dual AccToVecMode ------------------------------------------------------------------------
    Bad {
        name: "dual_split_m_with_scalar_scale",
        body: "using V = Tile<TileType::Vec, int8_t, 32, 64>; Acc64 c; V v;
               TMOV<V, Acc64, AccToVecMode::DualModeSplitM>(v, c, static_cast<uint64_t>(1));",
        message: "PTO: dual AccToVecMode (DualModeSplitM/DualModeSplitN) cannot be combined with quantisation",
    },
    Bad {
        name: "dual_split_n_with_fp_tile",
        body: "using V = Tile<TileType::Vec, int8_t, 64, 32>; Acc64 c; V v; FpTile fp;
               TMOV<V, Acc64, FpTile, AccToVecMode::DualModeSplitN>(v, c, fp);",
        message: "PTO: dual AccToVecMode (DualModeSplitM/DualModeSplitN) cannot be combined with quantisation",
    },
    Bad {
        name: "dual_split_m_with_cast",
        body: "using V = Tile<TileType::Vec, half, 32, 64>; Acc64 c; V v;
               TMOV<V, Acc64, AccToVecMode::DualModeSplitM>(v, c);",
        message: "PTO: dual AccToVecMode requires dst dtype == Acc dtype",
    },
    Bad {
        name: "dual_split_n_dn_output",
        body: "using V = Tile<TileType::Vec, float, 64, 32, BLayout::ColMajor>; Acc64 c; V v;
               TMOV<STPhase::Final, V, Acc64, AccToVecMode::DualModeSplitN>(v, c);",
        message: "PTO: dual AccToVecMode (DualModeSplitM/DualModeSplitN) cannot write a DN (nz2dn) destination",
    },
    // --- buffer capacity per TileType -------------------------------------------------------------
    Bad {
        name: "capacity_mat_over_512k",
        body: "Tile<TileType::Mat, half, 512, 528, BLayout::ColMajor, 512, 528, SLayout::RowMajor> t; (void)t;",
        message: "PTO: Tile Rows*Cols*sizeof(T) exceeds the capacity of its TileType buffer",
    },
    Bad {
        name: "capacity_left_over_64k",
        body: "TileLeft<half, 256, 256> t; (void)t;",
        message: "PTO: Tile Rows*Cols*sizeof(T) exceeds the capacity of its TileType buffer",
    },
    Bad {
        name: "capacity_right_over_64k",
        body: "TileRight<float, 128, 256> t; (void)t;",
        message: "PTO: Tile Rows*Cols*sizeof(T) exceeds the capacity of its TileType buffer",
    },
    Bad {
        name: "capacity_acc_over_256k",
        body: "TileAcc<float, 512, 256> t; (void)t;",
        message: "PTO: Tile Rows*Cols*sizeof(T) exceeds the capacity of its TileType buffer",
    },
    Bad {
        name: "capacity_vec_over_248k",
        body: "Tile<TileType::Vec, float, 256, 256> t; (void)t;",
        message: "PTO: Tile Rows*Cols*sizeof(T) exceeds the capacity of its TileType buffer",
    },
    Bad {
        name: "capacity_bias_over_4k",
        body: "Tile<TileType::Bias, float, 1, 1040, BLayout::RowMajor, 1, 1040> t; (void)t;",
        message: "PTO: Tile Rows*Cols*sizeof(T) exceeds the capacity of its TileType buffer",
    },
    Bad {
        name: "tassign_addr_overflows_buffer",
        body: "Tile<TileType::Vec, float, 64, 256> t; TASSIGN<0x30000>(t);",
        message: "PTO: TASSIGN<Addr> Addr + tile bytes exceeds the capacity of its TileType buffer",
    },
    // --- unboxed alignment ------------------------------------------------------------------------
    Bad {
        name: "nd_cols_not_32_byte_aligned",
        body: "Tile<TileType::Vec, float, 16, 12> t; (void)t;",
        message: "PTO: unboxed row-major (ND) Tile needs Cols*sizeof(T) % 32 == 0",
    },
    Bad {
        name: "dn_rows_not_32_byte_aligned",
        body: "Tile<TileType::Vec, half, 8, 16, BLayout::ColMajor> t; (void)t;",
        message: "PTO: unboxed column-major (DN) Tile needs Rows*sizeof(T) % 32 == 0",
    },
    // --- boxed fractal rules ----------------------------------------------------------------------
    Bad {
        name: "nz_rows_not_multiple_of_16",
        body: "Tile<TileType::Mat, half, 24, 32, BLayout::ColMajor, 24, 32, SLayout::RowMajor> t; (void)t;",
        message: "PTO: boxed (NZ/ZN/ZZ) Tile Rows must be a multiple of the box rows",
    },
    Bad {
        name: "nz_cols_not_multiple_of_c0",
        body: "Tile<TileType::Mat, half, 32, 24, BLayout::ColMajor, 32, 24, SLayout::RowMajor> t; (void)t;",
        message: "PTO: boxed (NZ/ZN/ZZ) Tile Cols must be a multiple of the box cols",
    },
    Bad {
        name: "acc_without_16x16_boxes",
        body: "Tile<TileType::Acc, float, 64, 64, BLayout::ColMajor, 64, 64, SLayout::RowMajor, 512> t; (void)t;",
        message: "PTO: Acc (L0C) Tile must be NZ with 16x16 boxes",
    },
    // --- valid shape ------------------------------------------------------------------------------
    Bad {
        name: "valid_rows_over_rows",
        body: "Tile<TileType::Vec, float, 16, 16, BLayout::RowMajor, 17, 16> t; (void)t;",
        message: "PTO: Tile static valid rows must be <= Rows",
    },
    Bad {
        name: "valid_cols_over_cols",
        body: "Tile<TileType::Vec, float, 16, 16, BLayout::RowMajor, 16, 24> t; (void)t;",
        message: "PTO: Tile static valid cols must be <= Cols",
    },
    // --- reductions (the verifier's reduce-layout rule mirrors these) -------------------------------
    Bad {
        name: "trowmax_dn_input",
        body: "Tile<TileType::Vec, float, 8, 32, BLayout::ColMajor, 8, 32> s;
               Tile<TileType::Vec, float, 8, 1, BLayout::ColMajor, 8, 1> m; TROWMAX(m, s, s);",
        message: "PTO: row reduction input must be ND",
    },
    Bad {
        name: "trowsum_dn_output_with_8_columns",
        body: "Tile<TileType::Vec, float, 8, 32> s;
               Tile<TileType::Vec, float, 8, 8, BLayout::ColMajor, 8, 1> m; TROWSUM(m, s, s);",
        message: "PTO: row reduction output must be ND, or DN with exactly one column",
    },
    Bad {
        name: "tcolmax_dn_input",
        body: "Tile<TileType::Vec, float, 8, 32, BLayout::ColMajor, 8, 32> s;
               Tile<TileType::Vec, float, 1, 32> m; TCOLMAX(m, s);",
        message: "PTO: column reduction input and output must be ND",
    },
    // --- element types of the vector instructions (A5 implementations; the verifier's
    //     vector-dtype rule mirrors these, from the same machine-model table) ---------------------
    Bad {
        name: "trowmax_bf16",
        body: "Tile<TileType::Vec, bfloat16_t, 8, 32> s;
               Tile<TileType::Vec, bfloat16_t, 8, 16, BLayout::RowMajor, 8, 1> m; TROWMAX(m, s, s);",
        message: "PTO: TROWMAX/TROWMIN support half, float, int32, int16, int8, uint8, int64, uint64 (no bf16)",
    },
    Bad {
        name: "trowsum_int8",
        body: "Tile<TileType::Vec, int8_t, 8, 32> s;
               Tile<TileType::Vec, int8_t, 8, 32, BLayout::RowMajor, 8, 1> m; TROWSUM(m, s, s);",
        message: "PTO: TROWSUM supports half, float, int32, int16, int64, uint64 (no bf16, no 8-bit)",
    },
    Bad {
        name: "tcolmax_fp8",
        body: "Tile<TileType::Vec, float8_e4m3_t, 8, 32> s;
               Tile<TileType::Vec, float8_e4m3_t, 1, 32> m; TCOLMAX(m, s);",
        message: "PTO: column reductions support int8, uint8",
    },
    Bad {
        name: "texp_bf16",
        body: "Tile<TileType::Vec, bfloat16_t, 8, 32> t; TEXP(t, t);",
        message: "PTO: TEXP does not support this element type on A5 (supported: half, float)",
    },
    Bad {
        name: "tabs_uint8",
        body: "Tile<TileType::Vec, uint8_t, 8, 32> t; TABS(t, t);",
        message: "PTO: TABS does not support this element type on A5",
    },
    Bad {
        name: "tneg_int8",
        body: "Tile<TileType::Vec, int8_t, 8, 32> t; TNEG(t, t);",
        message: "PTO: TNEG does not support this element type on A5",
    },
    Bad {
        name: "trelu_bf16",
        body: "Tile<TileType::Vec, bfloat16_t, 8, 32> t; TRELU(t, t);",
        message: "PTO: TRELU does not support this element type on A5 (supported: int32_t, half, float)",
    },
    Bad {
        name: "tmul_int8",
        body: "Tile<TileType::Vec, int8_t, 8, 32> t; TMUL(t, t, t);",
        message: "PTO: TMUL does not support this element type on A5",
    },
    Bad {
        name: "tmuls_uint8",
        body: "Tile<TileType::Vec, uint8_t, 8, 32> t; TMULS(t, t, static_cast<uint8_t>(2));",
        message: "PTO: TMULS does not support this element type on A5",
    },
    Bad {
        name: "tdiv_bf16",
        body: "Tile<TileType::Vec, bfloat16_t, 8, 32> t; TDIV(t, t, t);",
        message: "PTO: TDIV does not support this element type on A5",
    },
    Bad {
        name: "tdivs_bf16",
        body: "Tile<TileType::Vec, bfloat16_t, 8, 32> t; TDIVS(t, t, bfloat16_t(2.0f));",
        message: "PTO: TDIVS does not support this element type on A5",
    },
    Bad {
        name: "tadd_fp8",
        body: "Tile<TileType::Vec, float8_e5m2_t, 8, 32> t; TADD(t, t, t);",
        message: "PTO: TADD does not support this element type on A5",
    },
    Bad {
        name: "texpands_fp8",
        body: "Tile<TileType::Vec, float8_e4m3_t, 8, 32> t; TEXPANDS(t, float8_e4m3_t{});",
        message: "PTO: TEXPANDS does not support this element type on A5",
    },
    Bad {
        name: "trowexpandadd_int64",
        body: "Tile<TileType::Vec, int64_t, 8, 32> t;
               Tile<TileType::Vec, int64_t, 8, 4, BLayout::RowMajor, 8, 1> m; TROWEXPANDADD(t, t, m);",
        message: "PTO: TROWEXPANDADD does not support this element type on A5",
    },
    Bad {
        name: "tcvt_int32_to_half",
        body: "Tile<TileType::Vec, int32_t, 8, 32> s; Tile<TileType::Vec, half, 8, 32> d;
               TCVT(d, s, RoundMode::CAST_RINT);",
        message: "PTO: TCVT does not implement this source -> destination element type pair on A5",
    },
    Bad {
        name: "tcvt_half_to_bf16",
        body: "Tile<TileType::Vec, half, 8, 32> s; Tile<TileType::Vec, bfloat16_t, 8, 32> d;
               TCVT(d, s, RoundMode::CAST_RINT);",
        message: "PTO: TCVT does not implement this source -> destination element type pair on A5",
    },
    // --- move paths -------------------------------------------------------------------------------
    Bad {
        name: "tmov_mat_to_vec_has_no_path",
        body: "Tile<TileType::Mat, half, 64, 64, BLayout::ColMajor, 64, 64, SLayout::RowMajor> m;
               Tile<TileType::Vec, half, 64, 64> v; TMOV(v, m);",
        message: "PTO: TMOV from Mat supports only Left, Right, Bias and Scaling destinations",
    },
    Bad {
        name: "tload_into_left",
        body: "using G = GlobalTensor<half, Shape<1, 1, 1, 64, 64>, Stride<4096, 4096, 4096, 64, 1>>;
               G g(nullptr); Left64 l; TLOAD(l, g);",
        message: "PTO: TLOAD destination must be a Vec or Mat tile",
    },
];

#[test]
fn each_documented_constraint_rejects_a_violating_kernel() {
    require_gxx();
    let dir = scratch_dir("bad");
    let mut problems = Vec::new();
    for bad in BAD_KERNELS {
        let source = format!(
            "{BAD_PRELUDE}\nextern \"C\" __global__ AICORE void {}()\n{{\n{}\n}}\n",
            bad.name, bad.body
        );
        let r = compile(&dir, bad.name, &source, &["-D__DAV_CUBE__"]);
        if r.ok {
            problems.push(format!(
                "{}: compiled, expected \"{}\"",
                bad.name, bad.message
            ));
        } else if !r.stderr.contains(bad.message) {
            problems.push(format!(
                "{}: failed without \"{}\":\n{}",
                bad.name, bad.message, r.stderr
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn header_refuses_a_device_build() {
    require_gxx();
    let dir = scratch_dir("device");
    let r = compile(
        &dir,
        "device",
        "#include <pto/pto-inst.hpp>\n",
        &["-D__CCE_AICORE__"],
    );
    assert!(
        !r.ok,
        "the stand-in header must not be used for a device build"
    );
    assert!(
        r.stderr.contains("declaration-only syntax-check header"),
        "unexpected diagnostics:\n{}",
        r.stderr
    );
    let _ = std::fs::remove_dir_all(&dir);
}
