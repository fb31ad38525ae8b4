//! Element types of tiles and GM tensors.

use serde::{Deserialize, Serialize};
use std::fmt;

/// An element type the machine stores.
///
/// fp8 types are storage types here: they are loaded, moved and fed to the cube, and produced by the
/// Fixpipe's quantisation, but vector arithmetic on them is not modelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// IEEE binary32.
    F32,
    /// IEEE binary16.
    F16,
    /// bfloat16.
    BF16,
    /// Signed 8-bit integer.
    I8,
    /// Unsigned 8-bit integer.
    U8,
    /// Signed 32-bit integer.
    I32,
    /// Unsigned 32-bit integer (the index tiles of the sort instructions, TSORT32's `idx`).
    U32,
    /// Signed 64-bit integer.
    I64,
    /// Unsigned 64-bit integer (Fixpipe scale words).
    U64,
    /// fp8 with 4 exponent and 3 mantissa bits.
    F8E4M3,
    /// fp8 with 5 exponent and 2 mantissa bits.
    F8E5M2,
}

impl DType {
    /// Every dtype, for exhaustive tests and tables.
    pub const ALL: [DType; 11] = [
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::I8,
        DType::U8,
        DType::I32,
        DType::U32,
        DType::I64,
        DType::U64,
        DType::F8E4M3,
        DType::F8E5M2,
    ];

    /// Size of one element in bytes.
    pub const fn size_bytes(self) -> u64 {
        match self {
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::I8 | DType::U8 | DType::F8E4M3 | DType::F8E5M2 => 1,
            DType::I64 | DType::U64 => 8,
        }
    }

    /// True for floating-point types (including fp8).
    pub const fn is_float(self) -> bool {
        matches!(
            self,
            DType::F32 | DType::F16 | DType::BF16 | DType::F8E4M3 | DType::F8E5M2
        )
    }

    /// True for the fp8 family.
    pub const fn is_fp8(self) -> bool {
        matches!(self, DType::F8E4M3 | DType::F8E5M2)
    }

    /// True for 64-bit types (GM loads of these are ND/DN only).
    pub const fn is_64bit(self) -> bool {
        matches!(self, DType::I64 | DType::U64)
    }

    /// Name as written in IR dumps and diagnostics.
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I8 => "i8",
            DType::U8 => "u8",
            DType::I32 => "i32",
            DType::U32 => "u32",
            DType::I64 => "i64",
            DType::U64 => "u64",
            DType::F8E4M3 => "f8e4m3",
            DType::F8E5M2 => "f8e5m2",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
