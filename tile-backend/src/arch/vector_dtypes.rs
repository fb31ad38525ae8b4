//! Element types of the PTO-ISA vector instructions on Ascend 950 (A5, `dav-c310`).
//!
//! Facts only, transcribed from the public PTO-ISA sources (github.com/hw-native-sys/pto-isa):
//! the element-type `static_assert`s of the A5 implementations in `include/pto/npu/a5/*.hpp`
//! and the "Constraints" sections of `docs/isa/<INSTR>.md`. Where A5 and A2/A3 differ, A5 is
//! transcribed. A list holds the tileops dtypes the instruction takes; PTO's int16 and uint16
//! forms have no tileops dtype and are named in the comments only (uint32 is `U32`). An instruction without
//! a row here is not restricted by the verifier (the sources state no element-type limit).
//!
//! Other rules still apply on top of this table: `vector-dtype` rejects arithmetic on 64-bit and
//! fp8 data and division or transcendental ops on integers, whatever an instruction accepts.

use super::VectorDtypes;
use crate::ir::DType::{self, *};

/// Every element type an 8/16/32/64-bit element-wise PTO instruction takes on A5 (no fp8).
const ARITH: &[DType] = &[F32, F16, BF16, I8, U8, I32, U32, I64, U64];
/// The forms without 8-bit integers (multiplication).
const MUL: &[DType] = &[F32, F16, BF16, I32, U32, I64, U64];
/// The forms without 8-bit integers and bf16 (division).
const DIV: &[DType] = &[F32, F16, I32, U32, I64, U64];
/// The row/column broadcast binary forms: 8/16/32-bit, bf16 included, no 64-bit.
const EXPAND_BIN: &[DType] = &[F32, F16, BF16, I8, U8, I32, U32];

fn row(instruction: &str, dtypes: &[DType]) -> VectorDtypes {
    VectorDtypes {
        instruction: instruction.to_string(),
        dtypes: dtypes.to_vec(),
    }
}

/// Instruction -> element types on Ascend 950, one row per instruction the code generator emits
/// for a vector op (`arch::instruction`). Sources, per row:
///
/// | instruction | source |
/// | --- | --- |
/// | TEXP, TLOG, TSQRT: f32, f16 | `npu/a5/TUnaryOp.hpp` `TUnaryCheck` static_assert (float, half); `docs/isa/TEXP.md`, `TLOG.md`, `TSQRT.md` |
/// | TRSQRT: f32, f16 | `npu/a5/TRsqrt.hpp` `TRSQRT_IMPL` static_assert; `docs/isa/TRSQRT.md` |
/// | TRECIP: f32, f16, i32 (+i16) | `docs/isa/TRECIP.md` (float, half, int32_t, int16_t); `common/pto_instr.hpp` lowers it to `TDIVS(dst, 1, src)` |
/// | TABS: f32, f16, i32, i8 (+i16) | `npu/a5/TUnaryOp.hpp` `TABS_IMPL` static_assert; `docs/isa/TABS.md` ("For A5") — no bf16, no u8 |
/// | TNEG: f32, f16, bf16, i32, u32, i64, u64 (+i16, u16) | `npu/a5/TUnaryOp.hpp` `TNEG_IMPL` is `TMULS(dst, src, -1)`: `npu/a5/TMulS.hpp` static_assert; `docs/isa/TNEG.md` (A5) — no 8-bit |
/// | TRELU: f32, f16, i32 | `npu/a5/TUnaryOp.hpp` `TRELU_IMPL` static_assert; `docs/isa/TRELU.md` |
/// | TADD, TSUB, TMAX, TMIN: f32, f16, bf16, i8, u8, i32, u32, i64, u64 (+i16, u16) | `npu/a5/TAdd.hpp`, `TSub.hpp`, `TMax.hpp`, `TMin.hpp` static_asserts |
/// | TMUL: f32, f16, bf16, i32, u32, i64, u64 (+i16, u16) | `npu/a5/TMul.hpp` static_assert — no 8-bit |
/// | TDIV: f32, f16, i32, u32, i64, u64 (+i16, u16) | `npu/a5/TDiv.hpp` static_assert — no bf16, no 8-bit |
/// | TADDS, TSUBS, TMAXS, TMINS: as TADD | `npu/a5/TAddS.hpp`, `TSubS.hpp`, `TMaxs.hpp`, `TMins.hpp` static_asserts |
/// | TMULS: as TMUL | `npu/a5/TMulS.hpp` static_assert |
/// | TLRELU: f32, f16 | `npu/a2a3/TLRelu.hpp` `TLRELU_IMPL` static_assert (the public tree has no A5 header for it); `docs/isa/TLRELU.md` |
/// | TDIVS: as TDIV | `npu/a5/TDivS.hpp` `TDIVS_IMPL` (tile, scalar) static_assert |
/// | TROWSUM: f32, f16, i32, i64, u64 (+i16) | `npu/a5/TRowReduce.hpp` `TRowSum` static_assert, 64-bit via `TROWSUM_IMPL`; `docs/isa/TROWSUM.md` (A5) — no bf16, no 8-bit |
/// | TROWMAX, TROWMIN: f32, f16, i32, i8, u8, i64, u64 (+i16) | `npu/a5/TRowReduce.hpp` `TRowMax`/`TRowMin` static_asserts, 64-bit via `TROWMAX_IMPL`/`TROWMIN_IMPL` — no bf16 |
/// | TCOLSUM, TCOLMAX, TCOLMIN: f32, f16, bf16, i8, u8, i32, u32, i64, u64 (+i16, u16) | `npu/a5/TColReduceOps.hpp` `TColReduceCheck` static_assert; `docs/isa/TCOLMAX.md` (A5) |
/// | TROWEXPANDADD/SUB/MUL/DIV/MAX/MIN: f32, f16, bf16, i8, u8, i32, u32 (+i16, u16) | `npu/a5/TRowExpandAdd.hpp` ... `TRowExpandMin.hpp` static_asserts; `docs/isa/TROWEXPANDDIV.md` |
/// | TCOLEXPANDADD/SUB/MUL/DIV/MAX/MIN: as TROWEXPAND* | `npu/a5/TColExpandBinOp.hpp` `TCOLEXPANDOP_IMPL` static_assert; `docs/isa/TCOLEXPANDDIV.md` |
/// | TROWEXPAND, TCOLEXPAND: any 1/2/4/8-byte type | `npu/a5/TRowExpand.hpp`, `TColExpand.hpp` (b8/b16/b32/b64 static_asserts) |
/// | TEXPANDS: f32, f16, bf16, i8, u8, i32, u32, i64, u64 (+i16, u16) | `npu/a5/TExpandS.hpp` `TEXPANDS_IMPL` static_assert; `docs/isa/TEXPANDS.md` (A5) |
pub(crate) fn vector_dtypes_950() -> Vec<VectorDtypes> {
    let mut v = vec![
        row("TEXP", &[F32, F16]),
        row("TLOG", &[F32, F16]),
        row("TSQRT", &[F32, F16]),
        row("TRSQRT", &[F32, F16]),
        row("TRECIP", &[F32, F16, I32]),
        row("TABS", &[F32, F16, I32, I8]),
        row("TNEG", MUL),
        row("TRELU", &[F32, F16, I32]),
        row("TMUL", MUL),
        row("TDIV", DIV),
        row("TMULS", MUL),
        row("TLRELU", &[F32, F16]),
        row("TDIVS", DIV),
        row("TROWSUM", &[F32, F16, I32, I64, U64]),
        row("TROWMAX", &[F32, F16, I32, I8, U8, I64, U64]),
        row("TROWMIN", &[F32, F16, I32, I8, U8, I64, U64]),
        row("TROWEXPAND", &DType::ALL),
        row("TCOLEXPAND", &DType::ALL),
        row("TEXPANDS", ARITH),
    ];
    for inst in [
        "TADD", "TSUB", "TMAX", "TMIN", "TADDS", "TSUBS", "TMAXS", "TMINS", "TCOLSUM", "TCOLMAX",
        "TCOLMIN",
    ] {
        v.push(row(inst, ARITH));
    }
    for op in ["ADD", "SUB", "MUL", "DIV", "MAX", "MIN"] {
        for axis in ["ROW", "COL"] {
            v.push(row(&format!("T{axis}EXPAND{op}"), EXPAND_BIN));
        }
    }
    v
}

/// The (source, destination) conversions TCVT performs on Ascend 950, in tileops dtypes.
///
/// Source: `npu/a5/TCvt.hpp` (one `castData` overload per pair, dispatched for every
/// `RoundMode`) and the A5 column of "Supported Conversions" in `docs/isa/TCVT.md`:
/// f32 -> f32, f16, bf16, i32, i64, fp8 e4m3/e5m2 (+i16, hif8); f16 -> f32, i32, i8, u8 (+i16,
/// hif8); bf16 -> f32, i32, f16 (+fp4); i8 -> f16, i32 (+i16); u8 -> f16 (+u16); i32 -> f32, u8,
/// i64 (+i16, u16); i64 -> f32, i32; fp8 e4m3/e5m2 -> f32. Not on A5: i32 -> f16 (A2/A3 only, a
/// dequant path), f16 -> bf16, f16 -> fp8, f32 -> 8-bit integers, and same-type copies other
/// than f32 -> f32.
pub(crate) fn cast_pairs_950() -> Vec<(DType, DType)> {
    vec![
        (F32, F32),
        (F32, F16),
        (F32, BF16),
        (F32, I32),
        (F32, I64),
        (F32, F8E4M3),
        (F32, F8E5M2),
        (F16, F32),
        (F16, I32),
        (F16, I8),
        (F16, U8),
        (BF16, F32),
        (BF16, I32),
        (BF16, F16),
        (I8, F16),
        (I8, I32),
        (U8, F16),
        (I32, F32),
        (I32, U8),
        (I32, I64),
        (I64, F32),
        (I64, I32),
        (F8E4M3, F32),
        (F8E5M2, F32),
    ]
}
