// tileops: declaration-only stand-in for the PTO-ISA C++ tile library (<pto/pto-inst.hpp>).
//
// This file is NOT the real library. It was written in this project from the public PTO-ISA
// signatures (github.com/hw-native-sys/pto-isa, include/pto/...) so that the C++ kernels emitted by
// tile-backend's code generator can be syntax-checked on a host with
//     g++ -std=c++17 -fsyntax-only -I tile-backend/codegen/include kernel.cpp
// It keeps the public names, template parameter orders and argument lists, has empty bodies, and
// states documented Ascend 950 (A5, dav-c310) constraints as static_asserts whose messages all start
// with "PTO: " so a test can grep for them. No code was copied from the real library.
//
// Emitted kernels include <pto/pto-inst.hpp> exactly as they would against CANN; compile them with
// bisheng and the real include path to build them for the device. This stand-in refuses to be used
// for a device build (__CCE_AICORE__).
//
// Section macros: a mixed kernel is compiled once per core type; use -D__DAV_CUBE__ (and
// -D__DAV_C310_CUBE__) for the AIC pass and -D__DAV_VEC__ (-D__DAV_C310_VEC__) for the AIV pass.

#ifndef TILEOPS_PTO_INST_HPP
#define TILEOPS_PTO_INST_HPP

#if defined(__CCE_AICORE__)
#error "tileops PTO stand-in header: this is a declaration-only syntax-check header; compile device code against the real pto-isa include directory"
#endif

#define TILEOPS_PTO_DECLS 1

#include <cstddef>
#include <cstdint>
#include <type_traits>

// ----------------------------------------------------------------------------------------------
// Device qualifiers and attribute macros (empty on the host)
// ----------------------------------------------------------------------------------------------
#ifndef __global__
#define __global__
#endif
#ifndef __aicore__
#define __aicore__
#endif
#ifndef AICORE
#define AICORE
#endif
#ifndef __gm__
#define __gm__
#endif
#ifndef __ubuf__
#define __ubuf__
#endif
#ifndef __cbuf__
#define __cbuf__
#endif
#ifndef __ca__
#define __ca__
#endif
#ifndef __cb__
#define __cb__
#endif
#ifndef __cc__
#define __cc__
#endif
#ifndef __fbuf__
#define __fbuf__
#endif
#ifndef __biasbuf__
#define __biasbuf__
#endif
#ifndef __in__
#define __in__
#endif
#ifndef __out__
#define __out__
#endif
#ifndef __tf__
#define __tf__
#endif
#ifndef PTO_INLINE
#define PTO_INLINE inline __attribute__((always_inline))
#endif
#ifndef PTO_INST
#define PTO_INST AICORE PTO_INLINE
#endif
#ifndef PTO_INTERNAL
#define PTO_INTERNAL AICORE PTO_INLINE
#endif
#ifndef GM_ADDR
#define GM_ADDR __gm__ uint8_t*
#endif

// Ascend 950 = A5 = __NPU_ARCH__ 3101 (950PR) / 3510 (950DT).
#ifndef __NPU_ARCH__
#define __NPU_ARCH__ 3101
#endif
#if (__NPU_ARCH__ != 3101) && (__NPU_ARCH__ != 3510)
#error "tileops PTO stand-in header only models Ascend 950 (A5): __NPU_ARCH__ must be 3101 or 3510"
#endif
#ifndef PTO_NPU_ARCH_A5
#define PTO_NPU_ARCH_A5
#endif

// On-chip buffer capacities in bytes (overridable with -D like the real buffer_limits.hpp).
// Vec: the public header says 256 KiB, but the top ~8 KiB is reserved by PTO-ISA; we check 248 KiB.
#ifndef PTO_UBUF_SIZE_BYTES
#define PTO_UBUF_SIZE_BYTES (248u * 1024u)
#endif
#ifndef PTO_CBUF_SIZE_BYTES
#define PTO_CBUF_SIZE_BYTES (512u * 1024u)
#endif
#ifndef PTO_L0A_SIZE_BYTES
#define PTO_L0A_SIZE_BYTES (64u * 1024u)
#endif
#ifndef PTO_L0B_SIZE_BYTES
#define PTO_L0B_SIZE_BYTES (64u * 1024u)
#endif
#ifndef PTO_L0C_SIZE_BYTES
#define PTO_L0C_SIZE_BYTES (256u * 1024u)
#endif
#ifndef PTO_BIAS_SIZE_BYTES
#define PTO_BIAS_SIZE_BYTES (4u * 1024u)
#endif
#ifndef PTO_FBUF_SIZE_BYTES
#define PTO_FBUF_SIZE_BYTES (4u * 1024u)
#endif
#ifndef PTO_SCALELEFT_SIZE_BYTES
#define PTO_SCALELEFT_SIZE_BYTES (4u * 1024u)
#endif
#ifndef PTO_SCALERIGHT_SIZE_BYTES
#define PTO_SCALERIGHT_SIZE_BYTES (4u * 1024u)
#endif

// ----------------------------------------------------------------------------------------------
// Scalar element types the device compiler provides as built-ins. Host stand-ins: 16/8-bit storage
// with float conversions (values are never computed here; only the types matter).
// ----------------------------------------------------------------------------------------------
struct half {
    uint16_t bits = 0;
    constexpr half() = default;
    half(float) {}
    half(double) {}
    half(int) {}
    operator float() const { return 0.0f; }
};
struct bfloat16_t {
    uint16_t bits = 0;
    constexpr bfloat16_t() = default;
    bfloat16_t(float) {}
    bfloat16_t(double) {}
    bfloat16_t(int) {}
    operator float() const { return 0.0f; }
};
struct float8_e4m3_t {
    uint8_t bits = 0;
};
struct float8_e5m2_t {
    uint8_t bits = 0;
};
struct hifloat8_t {
    uint8_t bits = 0;
};
struct float8_e8m0_t {
    uint8_t bits = 0;
};
typedef half float16_t;
typedef float float32_t;

// ----------------------------------------------------------------------------------------------
// CCE intrinsics used by PTO kernels (global namespace, as in the device compiler)
// ----------------------------------------------------------------------------------------------
enum pipe_t : int {
    PIPE_S = 0,
    PIPE_V,
    PIPE_M,
    PIPE_MTE1,
    PIPE_MTE2,
    PIPE_MTE3,
    PIPE_ALL,
    PIPE_FIX,
};
enum event_t : int {
    EVENT_ID0 = 0,
    EVENT_ID1,
    EVENT_ID2,
    EVENT_ID3,
    EVENT_ID4,
    EVENT_ID5,
    EVENT_ID6,
    EVENT_ID7,
};
// Intra-core pipe-to-pipe ordering. Eight event ids per (src, dst) pipe pair.
AICORE inline void set_flag(pipe_t, pipe_t, event_t) {}
AICORE inline void wait_flag(pipe_t, pipe_t, event_t) {}
AICORE inline void pipe_barrier(pipe_t) {}
// AIC <-> AIV (same cluster) sync on A5. Cube: ids 0-15 reach AIV0, 16-31 reach AIV1. An AIV sets
// the plain id; the hardware presents AIV1's flag as id + 16 to the cube.
AICORE inline void set_intra_block(pipe_t, uint64_t) {}
AICORE inline void wait_intra_block(pipe_t, uint64_t) {}
AICORE inline int64_t get_block_idx() { return 0; }
AICORE inline int64_t get_block_num() { return 1; }
AICORE inline int64_t get_subblockid() { return 0; }
AICORE inline int64_t get_subblockdim() { return 2; }

namespace pto {

// ----------------------------------------------------------------------------------------------
// Enumerations (include/pto/common/type.hpp)
// ----------------------------------------------------------------------------------------------
enum class TileType { Vec, Mat, Left, Right, Acc, Bias, Scaling, ScaleLeft, ScaleRight, Ctrl };
enum class BLayout { RowMajor = 0, ColMajor = 1 };
enum class SLayout { NoneBox = 0, RowMajor = 1, ColMajor = 2 };
enum class Layout {
    ND,
    DN,
    NZ,
    SCALE,
    MX_A_ND,
    MX_A_DN,
    MX_A_ZZ,
    MX_B_ND,
    MX_B_DN,
    MX_B_NN,
    HIF4_A_ZZ,
    HIF4_B_NN,
    NC1HWC0,
    GNC1HWC0,
    NCHW,
    GNCHW,
    NHWC,
    NDC1HWC0,
    NCDHW,
    FRACTAL_Z,
    FRACTAL_Z_S16S8,
    FRACTAL_Z_3D,
    MAX,
};
enum class CmpMode : uint8_t { EQ = 0, NE = 1, LT = 2, LE = 3, GT = 4, GE = 5 };
enum class STPhase : uint8_t { Unspecified = 0x0, Partial = 0x2, Final = 0x3 };
enum class AccPhase : uint8_t { Unspecified = 0x0, Unknown = Unspecified, Partial = 0x2, Final = 0x3 };
enum class RoundMode : uint8_t {
    CAST_NONE = 0,
    CAST_RINT = 1,
    CAST_ROUND = 2,
    CAST_FLOOR = 3,
    CAST_CEIL = 4,
    CAST_TRUNC = 5,
    CAST_ODD = 6,
};
enum class AccToVecMode : uint8_t { SingleModeVec0 = 0, SingleModeVec1 = 1, DualModeSplitM = 2, DualModeSplitN = 3 };
enum class ReluPreMode : uint8_t { NoRelu = 0, NormalRelu = 1 };
enum class AtomicType : uint8_t { AtomicNone = 0, AtomicAdd = 1 };
enum class PadValue : uint64_t { Null = 0, Zero = 1, Max = 2, Min = 3, CustomBase = 0x100000000ULL };
enum class TFillPadMode : uint8_t { Normal = 0, InPlace = 1, Expand = 2 };
enum class SaturationMode : uint8_t { ON = 0, OFF = 1 };
enum class CompactMode { Null, Normal, RowPlusOne, RowAlignedPadding };
enum class TInsertMode : uint8_t { SPLIT2 = 2, SPLIT4 = 3 };
enum class Coalesce : uint8_t { Row = 0, Elem = 1 };
enum class GatherOOB : uint8_t { Undefined = 0, Clamp = 1, Wrap = 2, Zero = 3 };
enum class PowAlgorithm : uint8_t { DEFAULT, HIGH_PRECISION };
enum class DivAlgorithm : uint8_t { DEFAULT, HIGH_PRECISION };
enum class SqrtAlgorithm : uint8_t { DEFAULT, HIGH_PRECISION };
enum class RsqrtAlgorithm : uint8_t { DEFAULT, HIGH_PRECISION };
enum class RecipAlgorithm : uint8_t { DEFAULT, HIGH_PRECISION };
enum class ExpAlgorithm : uint8_t { DEFAULT, HIGH_PRECISION };
enum class LogAlgorithm : uint8_t { DEFAULT, HIGH_PRECISION };

namespace GlobalTensorDim {
constexpr int DIM_0 = 0;
constexpr int DIM_1 = 1;
constexpr int DIM_2 = 2;
constexpr int DIM_3 = 3;
constexpr int DIM_4 = 4;
constexpr int TOTAL_DIM = 5;
} // namespace GlobalTensorDim

// ----------------------------------------------------------------------------------------------
// Constants (include/pto/common/constants.hpp, pto_tile.hpp)
// ----------------------------------------------------------------------------------------------
constexpr int DYNAMIC = -1;
constexpr int REPEAT_BYTE = 256;
constexpr int BLOCK_BYTE_SIZE = 32;
constexpr int C0_SIZE_BYTE = 32;
constexpr int FRACTAL_NZ_ROW = 16;
constexpr int BLOCK_LEN = 16;
constexpr int CUBE_BLOCK_SIZE = 512;
constexpr int ACC_C0_SIZE = 16;

namespace TileConfig {
static constexpr int alignedSize = 32;
static constexpr int fixedRowSize = 16;
static constexpr int fixedColSize = 16;
static constexpr int fixedMxRowSize = 16;
static constexpr int fixedMxColSize = 2;
static constexpr int fractalABSize = 512;
static constexpr int fractalCSize = 1024;
static constexpr int fractalMxSize = 32;
} // namespace TileConfig

namespace detail {
template <TileType L>
constexpr std::size_t buffer_capacity()
{
    if constexpr (L == TileType::Vec) {
        return PTO_UBUF_SIZE_BYTES;
    } else if constexpr (L == TileType::Mat) {
        return PTO_CBUF_SIZE_BYTES;
    } else if constexpr (L == TileType::Left) {
        return PTO_L0A_SIZE_BYTES;
    } else if constexpr (L == TileType::Right) {
        return PTO_L0B_SIZE_BYTES;
    } else if constexpr (L == TileType::Acc) {
        return PTO_L0C_SIZE_BYTES;
    } else if constexpr (L == TileType::Bias) {
        return PTO_BIAS_SIZE_BYTES;
    } else if constexpr (L == TileType::Scaling) {
        return PTO_FBUF_SIZE_BYTES;
    } else if constexpr (L == TileType::ScaleLeft) {
        return PTO_SCALELEFT_SIZE_BYTES;
    } else if constexpr (L == TileType::ScaleRight) {
        return PTO_SCALERIGHT_SIZE_BYTES;
    } else {
        return ~static_cast<std::size_t>(0);
    }
}

template <typename T, typename... Us>
constexpr bool is_one_of_v = (std::is_same_v<T, Us> || ...);

template <typename T>
constexpr bool is_fp8_v = is_one_of_v<T, float8_e4m3_t, float8_e5m2_t>;
} // namespace detail

// ----------------------------------------------------------------------------------------------
// Shape / Stride / GlobalTensor (include/pto/common/pto_tile.hpp)
// ----------------------------------------------------------------------------------------------
template <int64_t N1 = DYNAMIC, int64_t N2 = DYNAMIC, int64_t N3 = DYNAMIC, int64_t N4 = DYNAMIC, int64_t N5 = DYNAMIC>
struct Shape {
    static constexpr int64_t staticShape[5] = {N1, N2, N3, N4, N5};
    static constexpr int dynamicCount = (N1 == DYNAMIC) + (N2 == DYNAMIC) + (N3 == DYNAMIC) + (N4 == DYNAMIC) +
                                        (N5 == DYNAMIC);
    PTO_INTERNAL Shape() {}
    PTO_INTERNAL Shape(int64_t, int64_t, int64_t, int64_t, int64_t) {}
    PTO_INTERNAL Shape(int64_t)
    {
        static_assert(dynamicCount == 1, "PTO: Shape 1-argument constructor needs exactly 1 dynamic dimension");
    }
    PTO_INTERNAL Shape(int64_t, int64_t)
    {
        static_assert(dynamicCount == 2, "PTO: Shape 2-argument constructor needs exactly 2 dynamic dimensions");
    }
    PTO_INTERNAL Shape(int64_t, int64_t, int64_t)
    {
        static_assert(dynamicCount == 3, "PTO: Shape 3-argument constructor needs exactly 3 dynamic dimensions");
    }
    PTO_INTERNAL Shape(int64_t, int64_t, int64_t, int64_t)
    {
        static_assert(dynamicCount == 4, "PTO: Shape 4-argument constructor needs exactly 4 dynamic dimensions");
    }
    int64_t shape[GlobalTensorDim::TOTAL_DIM] = {1, 1, 1, 1, 1};
};

template <
    int64_t SN1 = DYNAMIC, int64_t SN2 = DYNAMIC, int64_t SN3 = DYNAMIC, int64_t SN4 = DYNAMIC, int64_t SN5 = DYNAMIC>
struct Stride {
    static constexpr int64_t staticStride[GlobalTensorDim::TOTAL_DIM] = {SN1, SN2, SN3, SN4, SN5};
    static constexpr int dynamicCount = (SN1 == DYNAMIC) + (SN2 == DYNAMIC) + (SN3 == DYNAMIC) + (SN4 == DYNAMIC) +
                                        (SN5 == DYNAMIC);
    PTO_INTERNAL Stride() {}
    PTO_INTERNAL Stride(int64_t, int64_t, int64_t, int64_t, int64_t) {}
    PTO_INTERNAL Stride(int64_t)
    {
        static_assert(dynamicCount == 1, "PTO: Stride 1-argument constructor needs exactly 1 dynamic dimension");
    }
    PTO_INTERNAL Stride(int64_t, int64_t)
    {
        static_assert(dynamicCount == 2, "PTO: Stride 2-argument constructor needs exactly 2 dynamic dimensions");
    }
    PTO_INTERNAL Stride(int64_t, int64_t, int64_t)
    {
        static_assert(dynamicCount == 3, "PTO: Stride 3-argument constructor needs exactly 3 dynamic dimensions");
    }
    PTO_INTERNAL Stride(int64_t, int64_t, int64_t, int64_t)
    {
        static_assert(dynamicCount == 4, "PTO: Stride 4-argument constructor needs exactly 4 dynamic dimensions");
    }
    int64_t stride[GlobalTensorDim::TOTAL_DIM] = {1, 1, 1, 1, 1};
};

template <typename T>
struct remove_gm {
    using type = T;
};
template <typename T>
using remove_gm_t = typename remove_gm<std::remove_cv_t<T>>::type;

template <typename Element_, typename Shape_, typename Stride_, Layout Layout_ = Layout::ND>
struct GlobalTensor {
    using Shape = Shape_;
    using Stride = Stride_;
    using RawDType = remove_gm_t<Element_>;
    using DType = __gm__ RawDType;
    static constexpr Layout layout = Layout_;
    static constexpr int64_t staticShape[GlobalTensorDim::TOTAL_DIM] = {
        Shape::staticShape[0], Shape::staticShape[1], Shape::staticShape[2], Shape::staticShape[3],
        Shape::staticShape[4]};
    static constexpr int64_t staticStride[GlobalTensorDim::TOTAL_DIM] = {
        Stride::staticStride[0], Stride::staticStride[1], Stride::staticStride[2], Stride::staticStride[3],
        Stride::staticStride[4]};

    PTO_INTERNAL GlobalTensor() : data_(nullptr) {}
    PTO_INTERNAL GlobalTensor(DType* data, const Shape& shape = Shape(), const Stride& stride = Stride())
        : data_(data), shape_(shape), stride_(stride)
    {}

    PTO_INTERNAL int64_t GetShape(const int dim) { return shape_.shape[dim]; }
    PTO_INTERNAL int64_t GetStride(const int dim) { return stride_.stride[dim]; }
    template <int dim>
    AICORE static constexpr int64_t GetShape()
    {
        static_assert(dim >= 0 && dim < GlobalTensorDim::TOTAL_DIM, "PTO: GlobalTensor dim must be 0..4");
        static_assert(staticShape[dim] != DYNAMIC, "PTO: GlobalTensor::GetShape<dim>() needs a static dimension");
        return staticShape[dim];
    }
    template <int dim>
    AICORE static constexpr int64_t GetStride()
    {
        static_assert(dim >= 0 && dim < GlobalTensorDim::TOTAL_DIM, "PTO: GlobalTensor dim must be 0..4");
        static_assert(staticStride[dim] != DYNAMIC, "PTO: GlobalTensor::GetStride<dim>() needs a static dimension");
        return staticStride[dim];
    }
    template <int dim>
    PTO_INTERNAL void SetShape(int64_t s)
    {
        static_assert(staticShape[dim] == DYNAMIC, "PTO: GlobalTensor::SetShape needs a DYNAMIC dimension");
        shape_.shape[dim] = s;
    }
    template <int dim1, int dim2>
    PTO_INTERNAL void SetShape(int64_t s1, int64_t s2)
    {
        SetShape<dim1>(s1);
        SetShape<dim2>(s2);
    }
    template <int dim>
    PTO_INTERNAL void SetStride(int64_t s)
    {
        static_assert(staticStride[dim] == DYNAMIC, "PTO: GlobalTensor::SetStride needs a DYNAMIC dimension");
        stride_.stride[dim] = s;
    }
    template <int dim1, int dim2>
    PTO_INTERNAL void SetStride(int64_t s1, int64_t s2)
    {
        SetStride<dim1>(s1);
        SetStride<dim2>(s2);
    }
    AICORE DType* data() { return data_; }
    AICORE void SetAddr(DType* addr) { data_ = addr; }

private:
    DType* data_;
    Shape shape_;
    Stride stride_;
};

// ----------------------------------------------------------------------------------------------
// Tile (include/pto/common/pto_tile.hpp)
// ----------------------------------------------------------------------------------------------
template <
    TileType Loc_, typename Element_, const int Rows_, const int Cols_, const BLayout BFractal_ = BLayout::RowMajor,
    const int RowValid_ = Rows_, const int ColValid_ = Cols_, const SLayout SFractal_ = SLayout::NoneBox,
    const int SFractalSize_ = TileConfig::fractalABSize, auto PadVal_ = PadValue::Null,
    const CompactMode Compact_ = CompactMode::Null>
struct Tile {
public:
    using DType = Element_;
    static constexpr TileType Loc = Loc_;
    static constexpr int Rows = Rows_;
    static constexpr int Cols = Cols_;
    static constexpr int RowStride = BFractal_ == BLayout::RowMajor ? Cols : 1;
    static constexpr int ColStride = BFractal_ == BLayout::RowMajor ? 1 : Rows;
    static constexpr int ValidRow = RowValid_;
    static constexpr int ValidCol = ColValid_;
    static constexpr BLayout BFractal = BFractal_;
    static constexpr SLayout SFractal = SFractal_;
    static constexpr int Numel = Rows * Cols;
    static constexpr bool isRowMajor = BFractal_ == BLayout::RowMajor;
    static constexpr int SFractalSize = SFractalSize_;
    static constexpr auto PadVal = PadVal_;
    static constexpr CompactMode Compact = Compact_;
    static constexpr bool isBoxedLayout = (SFractal_ != SLayout::NoneBox);
    static constexpr bool isInnerRowMajor = (SFractal_ == SLayout::RowMajor);
    static constexpr bool isInnerColMajor = (SFractal_ == SLayout::ColMajor);

    static constexpr int getInnerRow()
    {
        if constexpr (SFractalSize_ == TileConfig::fractalCSize) {
            return TileConfig::fixedRowSize;
        } else if constexpr (SFractalSize_ == TileConfig::fractalMxSize) {
            return isInnerRowMajor ? TileConfig::fixedMxRowSize : TileConfig::fixedMxColSize;
        } else {
            return isBoxedLayout ? (isInnerRowMajor ? TileConfig::fixedRowSize
                                                    : static_cast<int>(TileConfig::alignedSize / sizeof(DType)))
                                 : 1;
        }
    }
    static constexpr int getInnerCol()
    {
        if constexpr (SFractalSize_ == TileConfig::fractalCSize) {
            return TileConfig::fixedColSize;
        } else if constexpr (SFractalSize_ == TileConfig::fractalMxSize) {
            return isInnerRowMajor ? TileConfig::fixedMxColSize : TileConfig::fixedMxRowSize;
        } else {
            return isBoxedLayout ? (isInnerRowMajor ? static_cast<int>(TileConfig::alignedSize / sizeof(DType))
                                                    : TileConfig::fixedColSize)
                                 : 1;
        }
    }
    static constexpr int InnerRows = getInnerRow();
    static constexpr int InnerCols = getInnerCol();
    static constexpr int InnerNumel = InnerRows * InnerCols;
    static constexpr std::size_t Bytes = static_cast<std::size_t>(Rows) * Cols * sizeof(DType);

    // ---- documented constraints ------------------------------------------------------------
    static_assert(Rows > 0 && Cols > 0, "PTO: Tile Rows and Cols must be positive");
    static_assert(RowValid_ == DYNAMIC || (RowValid_ >= 0 && RowValid_ <= Rows),
        "PTO: Tile static valid rows must be <= Rows");
    static_assert(ColValid_ == DYNAMIC || (ColValid_ >= 0 && ColValid_ <= Cols),
        "PTO: Tile static valid cols must be <= Cols");
    static_assert(SFractalSize_ == TileConfig::fractalABSize || SFractalSize_ == TileConfig::fractalCSize ||
                      SFractalSize_ == TileConfig::fractalMxSize,
        "PTO: Tile SFractalSize must be 512 (A/B box), 1024 (Acc box) or 32 (MX scale box)");
    static_assert(Bytes <= detail::buffer_capacity<Loc_>(),
        "PTO: Tile Rows*Cols*sizeof(T) exceeds the capacity of its TileType buffer "
        "(Mat 512 KiB, Left/Right 64 KiB, Acc 256 KiB, Vec 248 KiB, Bias 4 KiB, Scaling 4 KiB)");
    static_assert(isBoxedLayout || !isRowMajor || (Cols * sizeof(DType)) % TileConfig::alignedSize == 0,
        "PTO: unboxed row-major (ND) Tile needs Cols*sizeof(T) % 32 == 0");
    static_assert(isBoxedLayout || isRowMajor || (Rows * sizeof(DType)) % TileConfig::alignedSize == 0,
        "PTO: unboxed column-major (DN) Tile needs Rows*sizeof(T) % 32 == 0");
    static_assert(!isBoxedLayout || Loc_ == TileType::Vec || SFractalSize_ == TileConfig::fractalMxSize ||
                      Rows_ == 1 || Rows % InnerRows == 0,
        "PTO: boxed (NZ/ZN/ZZ) Tile Rows must be a multiple of the box rows (16, or C0 = 32/sizeof(T) for ZN)");
    static_assert(!isBoxedLayout || Cols % InnerCols == 0,
        "PTO: boxed (NZ/ZN/ZZ) Tile Cols must be a multiple of the box cols (C0 = 32/sizeof(T), or 16 for ZN)");
    static_assert(Loc_ != TileType::Acc || (!isRowMajor && SFractal_ == SLayout::RowMajor &&
                                              SFractalSize_ == TileConfig::fractalCSize),
        "PTO: Acc (L0C) Tile must be NZ with 16x16 boxes (BLayout::ColMajor, SLayout::RowMajor, SFractalSize 1024): "
        "use TileAcc");
    static_assert(Loc_ != TileType::Acc || std::is_same_v<DType, float> || std::is_same_v<DType, int32_t>,
        "PTO: Acc (L0C) Tile element type must be float or int32_t");
    static_assert(Loc_ != TileType::Scaling || Rows_ == 1,
        "PTO: Scaling (Fixpipe per-channel scale) Tile must have exactly 1 row ([1, N], column scaling only)");
    static_assert(Loc_ != TileType::Scaling || std::is_same_v<DType, uint64_t> || std::is_same_v<DType, int64_t>,
        "PTO: Scaling Tile element type must be a 64-bit word (uint64_t or int64_t)");
    static_assert(Loc_ != TileType::Scaling || (Cols * sizeof(DType)) % 128 == 0,
        "PTO: Scaling Tile N must be a multiple of 16 (N*8 bytes in 128-byte units)");
    static_assert(Loc_ != TileType::Scaling || Cols * sizeof(DType) <= PTO_FBUF_SIZE_BYTES,
        "PTO: Scaling Tile N must be <= 512 (4 KiB fixpipe buffer)");
    static_assert(Loc_ != TileType::Bias || (Rows_ == 1 && isRowMajor && !isBoxedLayout),
        "PTO: Bias Tile must be a single row-major row [1, N]");
    static_assert(Loc_ != TileType::Bias || (Cols * sizeof(DType)) % 64 == 0,
        "PTO: Bias Tile N*sizeof(T) must be a multiple of 64 bytes");

    using TileDType = DType*;

    // ---- constructors (static valid shape, or runtime valid row/col) ------------------------
    AICORE Tile() {}
    template <int RowMask = ValidRow, int ColMask = ValidCol>
    AICORE Tile(std::enable_if_t<RowMask == DYNAMIC && ColMask == DYNAMIC, unsigned> vr,
        std::enable_if_t<RowMask == DYNAMIC && ColMask == DYNAMIC, unsigned> vc)
        : RowMaskInternal(vr), ColMaskInternal(vc)
    {}
    template <int RowMask = ValidRow, int ColMask = ValidCol>
    AICORE Tile(std::enable_if_t<(RowMask == DYNAMIC) && (ColMask > 0), unsigned> vr) : RowMaskInternal(vr)
    {}
    template <int RowMask = ValidRow, int ColMask = ValidCol>
    AICORE Tile(std::enable_if_t<(RowMask > 0) && (ColMask == DYNAMIC), unsigned> vc) : ColMaskInternal(vc)
    {}

    template <int RowMask = ValidRow>
    AICORE static constexpr std::enable_if_t<(RowMask > 0), unsigned> GetValidRow()
    {
        return RowMask;
    }
    template <int RowMask = ValidRow>
    AICORE std::enable_if_t<RowMask == DYNAMIC, unsigned> GetValidRow() const
    {
        return RowMaskInternal;
    }
    template <int ColMask = ValidCol>
    AICORE static constexpr std::enable_if_t<(ColMask > 0), unsigned> GetValidCol()
    {
        return ColMask;
    }
    template <int ColMask = ValidCol>
    AICORE std::enable_if_t<ColMask == DYNAMIC, unsigned> GetValidCol() const
    {
        return ColMaskInternal;
    }
    PTO_INTERNAL void SetValidRow(unsigned rowMask)
    {
        static_assert(ValidRow == DYNAMIC, "PTO: SetValidRow needs a Tile declared with ValidRow = DYNAMIC");
        RowMaskInternal = rowMask;
    }
    PTO_INTERNAL void SetValidCol(unsigned colMask)
    {
        static_assert(ValidCol == DYNAMIC, "PTO: SetValidCol needs a Tile declared with ValidCol = DYNAMIC");
        ColMaskInternal = colMask;
    }
    PTO_INTERNAL void SetValidShape(unsigned rowMask, unsigned colMask)
    {
        static_assert(ValidRow == DYNAMIC && ValidCol == DYNAMIC,
            "PTO: SetValidShape needs a Tile declared with ValidRow = ValidCol = DYNAMIC");
        RowMaskInternal = rowMask;
        ColMaskInternal = colMask;
    }
    AICORE void SetValue(const uint32_t, const DType)
    {
        static_assert(Loc == TileType::Vec, "PTO: Tile::SetValue is only for Vec tiles");
    }
    AICORE DType GetValue(const uint32_t)
    {
        static_assert(Loc == TileType::Vec, "PTO: Tile::GetValue is only for Vec tiles");
        return DType();
    }
    AICORE TileDType& data() { return data_; }
    AICORE const TileDType& data() const { return data_; }

    unsigned RowMaskInternal = 0;
    unsigned ColMaskInternal = 0;

private:
    TileDType data_ = nullptr;
};

// A5 (dav-c310) operand aliases: Left (L0A) is NZ, Right (L0B) is ZN, Acc (L0C) is NZ with 16x16 boxes.
template <typename Element_, const int Rows_, const int Cols_, const int RowValid_ = Rows_, const int ColValid_ = Cols_>
using TileLeft = Tile<TileType::Left, Element_, Rows_, Cols_, BLayout::ColMajor, RowValid_, ColValid_,
    SLayout::RowMajor, TileConfig::fractalABSize>;
template <typename Element_, const int Rows_, const int Cols_, const int RowValid_ = Rows_, const int ColValid_ = Cols_>
using TileLeftCompact = Tile<TileType::Left, Element_, Rows_, Cols_, BLayout::ColMajor, RowValid_, ColValid_,
    SLayout::RowMajor, TileConfig::fractalABSize, PadValue::Null, CompactMode::Normal>;
template <typename Element_, const int Rows_, const int Cols_, const int RowValid_ = Rows_, const int ColValid_ = Cols_>
using TileRight = Tile<TileType::Right, Element_, Rows_, Cols_, BLayout::RowMajor, RowValid_, ColValid_,
    SLayout::ColMajor, TileConfig::fractalABSize>;
template <typename Element_, const int Rows_, const int Cols_, const int RowValid_ = Rows_, const int ColValid_ = Cols_>
using TileRightCompact = Tile<TileType::Right, Element_, Rows_, Cols_, BLayout::RowMajor, RowValid_, ColValid_,
    SLayout::ColMajor, TileConfig::fractalABSize, PadValue::Null, CompactMode::Normal>;
template <typename Element_, const int Rows_, const int Cols_, const int RowValid_ = Rows_, const int ColValid_ = Cols_>
using TileAcc = Tile<TileType::Acc, Element_, Rows_, Cols_, BLayout::ColMajor, RowValid_, ColValid_,
    SLayout::RowMajor, TileConfig::fractalCSize>;
template <typename Element_, const int Rows_, const int Cols_, const int RowValid_ = Rows_, const int ColValid_ = Cols_>
using TileAccCompact = Tile<TileType::Acc, Element_, Rows_, Cols_, BLayout::ColMajor, RowValid_, ColValid_,
    SLayout::RowMajor, TileConfig::fractalCSize, PadValue::Null, CompactMode::Normal>;

// ----------------------------------------------------------------------------------------------
// Traits
// ----------------------------------------------------------------------------------------------
template <typename T>
struct is_global : std::false_type {};
template <typename E, typename S, typename St, Layout L>
struct is_global<GlobalTensor<E, S, St, L>> : std::true_type {};
template <typename T>
struct is_tile : std::false_type {};
template <TileType Loc_, typename Element_, int Rows_, int Cols_, BLayout B_, int RV_, int CV_, SLayout S_, int FS_,
    auto P_, CompactMode C_>
struct is_tile<Tile<Loc_, Element_, Rows_, Cols_, B_, RV_, CV_, S_, FS_, P_, C_>> : std::true_type {};
template <typename T>
constexpr bool is_tile_data_v = is_tile<std::remove_cv_t<T>>::value;
template <typename T>
constexpr bool is_global_data_v = is_global<std::remove_cv_t<T>>::value;
template <typename T>
constexpr bool is_boxed_data_v = is_tile_data_v<T> && T::isBoxedLayout;
template <typename T>
struct is_Nz_layout {
    static constexpr bool value = !T::isRowMajor && T::isBoxedLayout && T::isInnerRowMajor;
};
template <typename T>
struct is_Zn_layout {
    static constexpr bool value = T::isRowMajor && T::isBoxedLayout && T::isInnerColMajor;
};
template <typename T>
struct is_Zz_layout {
    static constexpr bool value = T::isRowMajor && T::isBoxedLayout && T::isInnerRowMajor;
};

namespace detail {
template <typename T>
constexpr bool is_nd_v = T::isRowMajor && !T::isBoxedLayout;
template <typename T>
constexpr bool is_dn_v = !T::isRowMajor && !T::isBoxedLayout;
template <typename T>
constexpr bool is_nz_v = is_Nz_layout<T>::value;
template <typename T>
constexpr bool is_zn_v = is_Zn_layout<T>::value;
template <typename T>
constexpr bool is_zz_v = is_Zz_layout<T>::value;
template <TileType L, typename T>
constexpr bool at_v = T::Loc == L;
template <AccToVecMode M>
constexpr bool is_dual_v = (M == AccToVecMode::DualModeSplitM) || (M == AccToVecMode::DualModeSplitN);
template <typename T>
constexpr bool dyn_or_le(int v, int bound)
{
    return v == DYNAMIC || bound == DYNAMIC || v <= bound;
}
} // namespace detail

// ----------------------------------------------------------------------------------------------
// Events (the real instructions return RecordEvent and accept trailing wait events)
// ----------------------------------------------------------------------------------------------
struct RecordEvent {};
template <typename... Ts>
constexpr bool all_events_v = (std::is_same_v<std::remove_cv_t<Ts>, RecordEvent> && ...);
template <typename... WaitEvents>
PTO_INST void TSYNC(WaitEvents&...)
{}

// ----------------------------------------------------------------------------------------------
// Constraint checks shared by the instructions
// ----------------------------------------------------------------------------------------------
namespace detail {

template <typename TileRes, typename TileA, typename TileB>
constexpr void check_matmul()
{
    static_assert(is_tile_data_v<TileRes> && is_tile_data_v<TileA> && is_tile_data_v<TileB>,
        "PTO: TMATMUL operands must be Tiles");
    static_assert(TileA::Loc == TileType::Left && !TileA::isRowMajor && TileA::SFractal == SLayout::RowMajor,
        "PTO: TMATMUL requires A to be a TileLeft (TileType::Left, NZ on A5: BLayout::ColMajor + SLayout::RowMajor)");
    static_assert(TileB::Loc == TileType::Right && TileB::isRowMajor && TileB::SFractal == SLayout::ColMajor,
        "PTO: TMATMUL requires B to be a TileRight (TileType::Right, ZN: BLayout::RowMajor + SLayout::ColMajor)");
    static_assert(TileRes::Loc == TileType::Acc && !TileRes::isRowMajor && TileRes::SFractal == SLayout::RowMajor,
        "PTO: TMATMUL requires C to be a TileAcc (TileType::Acc, NZ with 16x16 boxes)");
    using A = typename TileA::DType;
    using B = typename TileB::DType;
    using C = typename TileRes::DType;
    static_assert(std::is_same_v<A, B> || (is_fp8_v<A> && is_fp8_v<B>),
        "PTO: TMATMUL requires A and B element types to be equal (fp8 e4m3/e5m2 mixes excepted)");
    static_assert((std::is_same_v<C, float> && is_one_of_v<A, half, bfloat16_t, float, float8_e4m3_t,
                                                   float8_e5m2_t, hifloat8_t>) ||
                      (std::is_same_v<C, int32_t> && std::is_same_v<A, int8_t>),
        "PTO: TMATMUL dtype triple must be f16/bf16/f32/fp8/hif8 -> f32 Acc or int8 -> int32 Acc");
    static_assert(TileA::ValidRow == DYNAMIC || (TileA::ValidRow >= 1 && TileA::ValidRow <= 4095),
        "PTO: TMATMUL m (A valid rows) must be in [1, 4095]");
    static_assert(TileA::ValidCol == DYNAMIC || (TileA::ValidCol >= 1 && TileA::ValidCol <= 4095),
        "PTO: TMATMUL k (A valid cols) must be in [1, 4095]");
    static_assert(TileB::ValidCol == DYNAMIC || (TileB::ValidCol >= 1 && TileB::ValidCol <= 4095),
        "PTO: TMATMUL n (B valid cols) must be in [1, 4095]");
}

template <typename TileRes, typename TileBias>
constexpr void check_bias()
{
    static_assert(is_tile_data_v<TileBias> && TileBias::Loc == TileType::Bias && TileBias::Rows == 1 &&
                      TileBias::isRowMajor,
        "PTO: TMATMUL_BIAS requires a Bias tile (TileType::Bias, one row-major row)");
    static_assert(std::is_same_v<typename TileRes::DType, typename TileBias::DType>,
        "PTO: TMATMUL_BIAS bias element type must equal the Acc element type");
}

// Acc -> Vec / Mat (Fixpipe) with optional quantisation and AccToVecMode.
template <typename Dst, typename Src, bool Quant, AccToVecMode Mode, bool HasMode>
constexpr void check_acc_out()
{
    static_assert(Src::Loc == TileType::Acc && !Src::isRowMajor && Src::SFractal == SLayout::RowMajor,
        "PTO: Fixpipe move source must be an Acc tile (NZ)");
    static_assert(Dst::Loc == TileType::Vec || Dst::Loc == TileType::Mat,
        "PTO: Fixpipe move destination must be a Vec or Mat tile");
    static_assert(!HasMode || Dst::Loc == TileType::Vec, "PTO: TMOV with an AccToVecMode requires a Vec destination");
    using S = typename Src::DType;
    using D = typename Dst::DType;
    if constexpr (Quant) {
        static_assert((std::is_same_v<S, float> && is_one_of_v<D, int8_t, uint8_t, hifloat8_t, half, bfloat16_t,
                                                       float8_e4m3_t, float>) ||
                          (std::is_same_v<S, int32_t> && is_one_of_v<D, int8_t, uint8_t, half, bfloat16_t>),
            "PTO: Fixpipe quantised output dtype must be f32 -> int8/uint8/hif8/f16/bf16/fp8e4m3/f32 or int32 -> "
            "int8/uint8/f16/bf16");
    } else {
        static_assert((std::is_same_v<S, float> && is_one_of_v<D, float, half, bfloat16_t>) ||
                          (std::is_same_v<S, int32_t> && std::is_same_v<D, int32_t>),
            "PTO: Fixpipe output dtype without a scale must be f32 -> f32/f16/bf16 or int32 -> int32");
    }
    static_assert(is_nd_v<Dst> || is_dn_v<Dst> || is_nz_v<Dst>,
        "PTO: Fixpipe output layout must be ND, DN or NZ (Acc NZ -> ND/DN/NZ)");
    static_assert(Dst::Loc != TileType::Mat || is_nz_v<Dst>, "PTO: Acc -> Mat move must produce an NZ Mat tile");
    if constexpr (is_dual_v<Mode>) {
        static_assert(!Quant,
            "PTO: dual AccToVecMode (DualModeSplitM/DualModeSplitN) cannot be combined with quantisation "
            "(scale argument or Fp tile)");
        static_assert(Quant || std::is_same_v<S, D>,
            "PTO: dual AccToVecMode requires dst dtype == Acc dtype (f32 -> f16/bf16 is a Fixpipe quant mode)");
        static_assert(!is_dn_v<Dst>,
            "PTO: dual AccToVecMode (DualModeSplitM/DualModeSplitN) cannot write a DN (nz2dn) destination");
    }
}

template <typename Fp>
constexpr void check_fp_tile()
{
    static_assert(is_tile_data_v<Fp> && Fp::Loc == TileType::Scaling,
        "PTO: per-channel quantisation needs an Fp tile of TileType::Scaling");
}

// Mat -> Left/Right/Bias/Scaling, Vec -> Vec/Mat (TMOV: whole-tile moves).
template <typename Dst, typename Src>
constexpr void check_tmov_plain()
{
    static_assert(is_tile_data_v<Dst> && is_tile_data_v<Src>, "PTO: TMOV operands must be Tiles");
    if constexpr (Src::Loc == TileType::Acc) {
        check_acc_out<Dst, Src, false, AccToVecMode::SingleModeVec0, false>();
    } else if constexpr (Src::Loc == TileType::Mat) {
        static_assert(Dst::Loc == TileType::Left || Dst::Loc == TileType::Right || Dst::Loc == TileType::Bias ||
                          Dst::Loc == TileType::Scaling || Dst::Loc == TileType::ScaleLeft ||
                          Dst::Loc == TileType::ScaleRight,
            "PTO: TMOV from Mat supports only Left, Right, Bias and Scaling destinations (Mat -> Vec has no path on "
            "A5)");
        static_assert(Src::Rows == Dst::Rows && Src::Cols == Dst::Cols,
            "PTO: TMOV from Mat requires equal src and dst shapes (use TEXTRACT for a sub-tile)");
        if constexpr (Dst::Loc == TileType::Left) {
            static_assert(is_nz_v<Dst>, "PTO: TMOV Mat -> Left requires an NZ destination (TileLeft)");
            static_assert(std::is_same_v<typename Dst::DType, typename Src::DType>,
                "PTO: TMOV Mat -> Left/Right requires equal element types");
            static_assert(is_nz_v<Src> || Src::isRowMajor, "PTO: TMOV Mat -> Left/Right source must be ND, NZ, ZN or ZZ");
        } else if constexpr (Dst::Loc == TileType::Right) {
            static_assert(is_zn_v<Dst>, "PTO: TMOV Mat -> Right requires a ZN destination (TileRight)");
            static_assert(std::is_same_v<typename Dst::DType, typename Src::DType>,
                "PTO: TMOV Mat -> Left/Right requires equal element types");
            static_assert(is_nz_v<Src> || Src::isRowMajor, "PTO: TMOV Mat -> Left/Right source must be ND, NZ, ZN or ZZ");
        } else if constexpr (Dst::Loc == TileType::Bias) {
            using S = typename Src::DType;
            using D = typename Dst::DType;
            static_assert((std::is_same_v<S, int32_t> && std::is_same_v<D, int32_t>) ||
                              (std::is_same_v<D, float> && is_one_of_v<S, float, half, bfloat16_t>),
                "PTO: TMOV Mat -> Bias dtype must be int32->int32, f32->f32, f16->f32 or bf16->f32");
        } else if constexpr (Dst::Loc == TileType::Scaling) {
            static_assert(sizeof(typename Src::DType) == 8, "PTO: TMOV Mat -> Scaling source must hold 64-bit words");
        }
    } else if constexpr (Src::Loc == TileType::Vec) {
        static_assert(Dst::Loc == TileType::Vec || Dst::Loc == TileType::Mat,
            "PTO: TMOV from Vec supports only Vec and Mat destinations");
        static_assert(std::is_same_v<typename Dst::DType, typename Src::DType>,
            "PTO: TMOV from Vec requires equal element types");
        if constexpr (Dst::Loc == TileType::Mat) {
            static_assert(is_nd_v<Src> || is_nz_v<Src>, "PTO: TMOV Vec -> Mat source must be ND or NZ");
        }
    } else {
        static_assert(Src::Loc == TileType::Vec, "PTO: TMOV source must be a Mat, Vec or Acc tile");
    }
}

// TEXTRACT: sub-tile read at (indexRow, indexCol) of the source.
template <typename Dst, typename Src>
constexpr void check_textract()
{
    static_assert(is_tile_data_v<Dst> && is_tile_data_v<Src>, "PTO: TEXTRACT operands must be Tiles");
    static_assert(Dst::Rows <= Src::Rows && Dst::Cols <= Src::Cols,
        "PTO: TEXTRACT destination must not be larger than the source");
    if constexpr (Src::Loc == TileType::Acc) {
        check_acc_out<Dst, Src, false, AccToVecMode::SingleModeVec0, false>();
    } else if constexpr (Src::Loc == TileType::Mat) {
        static_assert(Dst::Loc == TileType::Left || Dst::Loc == TileType::Right || Dst::Loc == TileType::ScaleLeft ||
                          Dst::Loc == TileType::ScaleRight,
            "PTO: TEXTRACT from Mat supports only Left and Right destinations");
        static_assert(std::is_same_v<typename Dst::DType, typename Src::DType>,
            "PTO: TEXTRACT requires equal element types");
        if constexpr (Dst::Loc == TileType::Left) {
            static_assert(is_nz_v<Dst>, "PTO: TEXTRACT Mat -> Left requires an NZ destination (TileLeft)");
            static_assert(is_nz_v<Src> || is_zn_v<Src> || (Src::Rows == 1 && Src::isRowMajor),
                "PTO: TEXTRACT Mat -> Left source must be NZ or ZN (or a single ND row)");
        } else if constexpr (Dst::Loc == TileType::Right) {
            static_assert(is_zn_v<Dst>, "PTO: TEXTRACT Mat -> Right requires a ZN destination (TileRight)");
            static_assert(is_nz_v<Src> || is_zn_v<Src>, "PTO: TEXTRACT Mat -> Right source must be NZ or ZN");
        }
    } else if constexpr (Src::Loc == TileType::Vec) {
        static_assert(Dst::Loc == TileType::Vec || Dst::Loc == TileType::Mat,
            "PTO: TEXTRACT from Vec supports only Vec and Mat destinations");
        static_assert(std::is_same_v<typename Dst::DType, typename Src::DType>,
            "PTO: TEXTRACT requires equal element types");
    } else {
        static_assert(Src::Loc == TileType::Vec, "PTO: TEXTRACT source must be a Mat, Vec or Acc tile");
    }
}

// TINSERT: write the source into the destination at (indexRow, indexCol).
template <typename Dst, typename Src>
constexpr void check_tinsert()
{
    static_assert(is_tile_data_v<Dst> && is_tile_data_v<Src>, "PTO: TINSERT operands must be Tiles");
    static_assert(Src::Rows <= Dst::Rows && Src::Cols <= Dst::Cols,
        "PTO: TINSERT source must not be larger than the destination");
    if constexpr (Src::Loc == TileType::Acc) {
        check_acc_out<Dst, Src, false, AccToVecMode::SingleModeVec0, false>();
    } else if constexpr (Src::Loc == TileType::Vec) {
        static_assert(Dst::Loc == TileType::Vec || Dst::Loc == TileType::Mat,
            "PTO: TINSERT from Vec supports only Vec and Mat destinations");
        static_assert(std::is_same_v<typename Dst::DType, typename Src::DType>,
            "PTO: TINSERT requires equal element types");
        if constexpr (Dst::Loc == TileType::Mat) {
            static_assert(is_nd_v<Src> || is_nz_v<Src>, "PTO: TINSERT Vec -> Mat source must be ND or NZ");
        }
    } else {
        static_assert(Src::Loc == TileType::Vec, "PTO: TINSERT source must be a Vec or Acc tile");
    }
}

template <typename TileT, typename GlobalT>
constexpr void check_tload()
{
    static_assert(is_tile_data_v<TileT> && is_global_data_v<GlobalT>, "PTO: TLOAD(tile, GlobalTensor) argument order");
    static_assert(TileT::Loc == TileType::Vec || TileT::Loc == TileType::Mat,
        "PTO: TLOAD destination must be a Vec or Mat tile (GM loads land only in UB or L1)");
    using T = typename TileT::DType;
    using G = typename GlobalT::RawDType;
    static_assert(sizeof(T) == sizeof(G), "PTO: TLOAD tile and GlobalTensor element sizes must match");
    constexpr bool same = (GlobalT::layout == Layout::ND && is_nd_v<TileT>) ||
                          (GlobalT::layout == Layout::DN && is_dn_v<TileT>) ||
                          (GlobalT::layout == Layout::NZ && is_nz_v<TileT>);
    if constexpr (TileT::Loc == TileType::Vec) {
        static_assert(same, "PTO: TLOAD into Vec supports only ND->ND, DN->DN, NZ->NZ");
    } else {
        static_assert(same || (GlobalT::layout == Layout::ND && is_nz_v<TileT>) ||
                          (GlobalT::layout == Layout::DN && is_zn_v<TileT>),
            "PTO: TLOAD into Mat supports only ND->ND, DN->DN, NZ->NZ, ND->NZ, DN->ZN");
    }
    if constexpr (sizeof(T) == 8) {
        static_assert((GlobalT::layout == Layout::ND && is_nd_v<TileT>) ||
                          (GlobalT::layout == Layout::DN && is_dn_v<TileT>),
            "PTO: TLOAD of 64-bit elements supports only ND->ND and DN->DN");
    }
    if constexpr (GlobalT::layout == Layout::NZ) {
        static_assert(GlobalT::staticShape[3] == FRACTAL_NZ_ROW &&
                          GlobalT::staticShape[4] == static_cast<int64_t>(C0_SIZE_BYTE / sizeof(T)),
            "PTO: NZ GlobalTensor needs static last two dims [16, 32/sizeof(T)]");
    }
}

template <typename TileT, typename GlobalT>
constexpr void check_tstore()
{
    static_assert(is_tile_data_v<TileT> && is_global_data_v<GlobalT>, "PTO: TSTORE(GlobalTensor, tile) argument order");
    static_assert(TileT::Loc == TileType::Vec || TileT::Loc == TileType::Acc || TileT::Loc == TileType::Mat,
        "PTO: TSTORE source must be a Vec, Acc or Mat tile");
    if constexpr (TileT::Loc == TileType::Vec) {
        static_assert(sizeof(typename TileT::DType) == sizeof(typename GlobalT::RawDType),
            "PTO: TSTORE tile and GlobalTensor element sizes must match");
        static_assert((GlobalT::layout == Layout::ND && is_nd_v<TileT>) ||
                          (GlobalT::layout == Layout::DN && is_dn_v<TileT>) ||
                          (GlobalT::layout == Layout::NZ && is_nz_v<TileT>),
            "PTO: TSTORE from Vec supports only ND->ND, DN->DN, NZ->NZ");
    }
}

} // namespace detail

// ----------------------------------------------------------------------------------------------
// TASSIGN: bind a tile to an on-chip address (from memory planning), or a GlobalTensor to a pointer.
// ----------------------------------------------------------------------------------------------
template <typename T, typename AddrType>
PTO_INST void TASSIGN(T& obj, AddrType addr)
{
    static_assert(is_tile_data_v<T> || is_global_data_v<T>, "PTO: TASSIGN target must be a Tile or a GlobalTensor");
    (void)obj;
    (void)addr;
}
template <std::size_t Addr, typename T>
PTO_INST std::enable_if_t<is_tile_data_v<T>> TASSIGN(T& obj)
{
    static_assert(Addr % 32 == 0, "PTO: TASSIGN<Addr> address must be 32-byte aligned");
    static_assert(T::Loc != TileType::Scaling || Addr % 128 == 0,
        "PTO: TASSIGN<Addr> Scaling tile address must be 128-byte aligned");
    static_assert(Addr + T::Bytes <= detail::buffer_capacity<T::Loc>(),
        "PTO: TASSIGN<Addr> Addr + tile bytes exceeds the capacity of its TileType buffer");
    (void)obj;
}

// ----------------------------------------------------------------------------------------------
// Memory: TLOAD / TSTORE / TSTORE_FP / MGATHER / TPREFETCH
// ----------------------------------------------------------------------------------------------
template <typename TileData, typename GlobalData, typename... WaitEvents>
PTO_INST RecordEvent TLOAD(TileData& dst, GlobalData& src, WaitEvents&... events)
{
    detail::check_tload<TileData, GlobalData>();
    (void)dst;
    (void)src;
    TSYNC(events...);
    return {};
}

template <typename TileData, typename GlobalData, typename... WaitEvents>
PTO_INST RecordEvent TSTORE(GlobalData& dst, TileData& src, WaitEvents&... events)
{
    detail::check_tstore<TileData, GlobalData>();
    (void)dst;
    (void)src;
    TSYNC(events...);
    return {};
}
template <STPhase Phase, typename TileData, typename GlobalData, typename... WaitEvents>
PTO_INST RecordEvent TSTORE(GlobalData& dst, TileData& src, WaitEvents&... events)
{
    detail::check_tstore<TileData, GlobalData>();
    static_assert(Phase == STPhase::Unspecified || TileData::Loc == TileType::Acc,
        "PTO: TSTORE with an STPhase (unit flag) needs an Acc source");
    (void)dst;
    (void)src;
    TSYNC(events...);
    return {};
}
template <typename TileData, typename GlobalData, AtomicType atomicType, typename... WaitEvents>
PTO_INST RecordEvent TSTORE(GlobalData& dst, TileData& src, WaitEvents&... events)
{
    detail::check_tstore<TileData, GlobalData>();
    (void)dst;
    (void)src;
    TSYNC(events...);
    return {};
}
template <STPhase Phase, typename TileData, typename GlobalData, AtomicType atomicType, typename... WaitEvents>
PTO_INST RecordEvent TSTORE(GlobalData& dst, TileData& src, WaitEvents&... events)
{
    detail::check_tstore<TileData, GlobalData>();
    (void)dst;
    (void)src;
    TSYNC(events...);
    return {};
}
template <typename TileData, typename GlobalData, AtomicType atomicType = AtomicType::AtomicNone,
    ReluPreMode reluPreMode, typename... WaitEvents>
PTO_INST RecordEvent TSTORE(GlobalData& dst, TileData& src, WaitEvents&... events)
{
    detail::check_tstore<TileData, GlobalData>();
    (void)dst;
    (void)src;
    TSYNC(events...);
    return {};
}
template <STPhase Phase, typename TileData, typename GlobalData, AtomicType atomicType = AtomicType::AtomicNone,
    ReluPreMode reluPreMode, typename... WaitEvents>
PTO_INST RecordEvent TSTORE(GlobalData& dst, TileData& src, WaitEvents&... events)
{
    detail::check_tstore<TileData, GlobalData>();
    (void)dst;
    (void)src;
    TSYNC(events...);
    return {};
}
template <typename TileData, typename GlobalData, AtomicType atomicType = AtomicType::AtomicNone,
    ReluPreMode reluPreMode = ReluPreMode::NoRelu, typename... WaitEvents>
PTO_INST RecordEvent TSTORE(GlobalData& dst, TileData& src, uint64_t preQuantScalar, WaitEvents&... events)
{
    detail::check_tstore<TileData, GlobalData>();
    static_assert(TileData::Loc == TileType::Acc, "PTO: TSTORE with a quantisation scale needs an Acc source");
    (void)dst;
    (void)src;
    (void)preQuantScalar;
    TSYNC(events...);
    return {};
}
template <STPhase Phase, typename TileData, typename GlobalData, AtomicType atomicType = AtomicType::AtomicNone,
    ReluPreMode reluPreMode = ReluPreMode::NoRelu, typename... WaitEvents>
PTO_INST RecordEvent TSTORE(GlobalData& dst, TileData& src, uint64_t preQuantScalar, WaitEvents&... events)
{
    detail::check_tstore<TileData, GlobalData>();
    static_assert(TileData::Loc == TileType::Acc, "PTO: TSTORE with a quantisation scale needs an Acc source");
    (void)dst;
    (void)src;
    (void)preQuantScalar;
    TSYNC(events...);
    return {};
}
template <typename TileData, typename GlobalData, typename FpTileData, AtomicType atomicType = AtomicType::AtomicNone,
    ReluPreMode reluPreMode = ReluPreMode::NoRelu, typename... WaitEvents>
PTO_INST RecordEvent TSTORE_FP(GlobalData& dst, TileData& src, FpTileData& fp, WaitEvents&... events)
{
    detail::check_tstore<TileData, GlobalData>();
    detail::check_fp_tile<FpTileData>();
    static_assert(TileData::Loc == TileType::Acc, "PTO: TSTORE_FP needs an Acc source");
    (void)dst;
    (void)src;
    (void)fp;
    TSYNC(events...);
    return {};
}

namespace detail {
template <typename Dst, typename Table, typename Idx>
constexpr void check_mgather()
{
    static_assert(is_tile_data_v<Dst> && is_global_data_v<Table>, "PTO: MGATHER(dst tile, GM table, indices)");
    using T = typename Dst::DType;
    static_assert(std::is_same_v<typename Table::RawDType, T>, "PTO: MGATHER table element type must equal dst's");
    static_assert(Table::layout == Layout::ND, "PTO: MGATHER table must be an ND GlobalTensor");
    if constexpr (Dst::Loc == TileType::Mat) {
        static_assert(is_global_data_v<Idx>,
            "PTO: MGATHER GM -> L1 (Mat destination) takes its indices as a GM GlobalTensor");
        static_assert(is_nz_v<Dst> && Dst::SFractalSize == TileConfig::fractalABSize,
            "PTO: MGATHER GM -> L1 destination must be an NZ Mat tile");
        static_assert(Dst::Rows % FRACTAL_NZ_ROW == 0, "PTO: MGATHER GM -> L1 destination Rows must be a multiple of 16");
        static_assert(Dst::Cols % (C0_SIZE_BYTE / sizeof(T)) == 0,
            "PTO: MGATHER GM -> L1 destination Cols must be a multiple of C0 = 32/sizeof(T)");
    } else {
        static_assert(Dst::Loc == TileType::Vec, "PTO: MGATHER destination must be a Vec or Mat tile");
    }
    if constexpr (is_global_data_v<Idx>) {
        static_assert(is_one_of_v<typename Idx::RawDType, int32_t, uint32_t>,
            "PTO: MGATHER indices must be int32_t or uint32_t");
    } else {
        static_assert(is_tile_data_v<Idx> && is_one_of_v<typename Idx::DType, int32_t, uint32_t>,
            "PTO: MGATHER indices must be int32_t or uint32_t");
    }
}
} // namespace detail

template <typename TileDst, typename GlobalData, typename TileInd, typename... WaitEvents>
PTO_INST RecordEvent MGATHER(TileDst& dst, GlobalData& src, TileInd& indexes, WaitEvents&... events)
{
    detail::check_mgather<TileDst, GlobalData, TileInd>();
    (void)dst;
    (void)src;
    (void)indexes;
    TSYNC(events...);
    return {};
}
template <Coalesce CMode, typename TileDst, typename GlobalData, typename TileInd, typename... WaitEvents>
PTO_INST RecordEvent MGATHER(TileDst& dst, GlobalData& src, TileInd& indexes, WaitEvents&... events)
{
    detail::check_mgather<TileDst, GlobalData, TileInd>();
    (void)dst;
    (void)src;
    (void)indexes;
    TSYNC(events...);
    return {};
}
template <Coalesce CMode, GatherOOB Mode, typename TileDst, typename GlobalData, typename TileInd,
    typename... WaitEvents>
PTO_INST RecordEvent MGATHER(TileDst& dst, GlobalData& src, TileInd& indexes, WaitEvents&... events)
{
    detail::check_mgather<TileDst, GlobalData, TileInd>();
    (void)dst;
    (void)src;
    (void)indexes;
    TSYNC(events...);
    return {};
}

template <typename TileData, typename GlobalData>
PTO_INST RecordEvent TPREFETCH(TileData& dst, GlobalData& src)
{
    (void)dst;
    (void)src;
    return {};
}

// ----------------------------------------------------------------------------------------------
// Cube: TMATMUL / TMATMUL_ACC / TMATMUL_BIAS
// ----------------------------------------------------------------------------------------------
template <typename TileRes, typename TileLeft, typename TileRight, typename... WaitEvents>
PTO_INST RecordEvent TMATMUL(TileRes& cMatrix, TileLeft& aMatrix, TileRight& bMatrix, WaitEvents&... events)
{
    detail::check_matmul<TileRes, TileLeft, TileRight>();
    (void)cMatrix;
    (void)aMatrix;
    (void)bMatrix;
    TSYNC(events...);
    return {};
}
template <AccPhase Phase, typename TileRes, typename TileLeft, typename TileRight, typename... WaitEvents>
PTO_INST RecordEvent TMATMUL(TileRes& cMatrix, TileLeft& aMatrix, TileRight& bMatrix, WaitEvents&... events)
{
    detail::check_matmul<TileRes, TileLeft, TileRight>();
    (void)cMatrix;
    (void)aMatrix;
    (void)bMatrix;
    TSYNC(events...);
    return {};
}
template <typename TileRes, typename TileLeft, typename TileRight, typename... WaitEvents>
PTO_INST RecordEvent TMATMUL_ACC(
    TileRes& cOutMatrix, TileRes& cInMatrix, TileLeft& aMatrix, TileRight& bMatrix, WaitEvents&... events)
{
    detail::check_matmul<TileRes, TileLeft, TileRight>();
    (void)cOutMatrix;
    (void)cInMatrix;
    (void)aMatrix;
    (void)bMatrix;
    TSYNC(events...);
    return {};
}
template <AccPhase Phase, typename TileRes, typename TileLeft, typename TileRight, typename... WaitEvents>
PTO_INST RecordEvent TMATMUL_ACC(
    TileRes& cOutMatrix, TileRes& cInMatrix, TileLeft& aMatrix, TileRight& bMatrix, WaitEvents&... events)
{
    detail::check_matmul<TileRes, TileLeft, TileRight>();
    (void)cOutMatrix;
    (void)cInMatrix;
    (void)aMatrix;
    (void)bMatrix;
    TSYNC(events...);
    return {};
}
template <AccPhase Phase = AccPhase::Unspecified, typename TileRes, typename TileLeft, typename TileRight,
    typename... WaitEvents>
PTO_INST RecordEvent TMATMUL_ACC(TileRes& cMatrix, TileLeft& aMatrix, TileRight& bMatrix, WaitEvents&... events)
{
    detail::check_matmul<TileRes, TileLeft, TileRight>();
    (void)cMatrix;
    (void)aMatrix;
    (void)bMatrix;
    TSYNC(events...);
    return {};
}
template <typename TileRes, typename TileLeft, typename TileRight, typename TileBias, typename... WaitEvents>
PTO_INST RecordEvent TMATMUL_BIAS(
    TileRes& cMatrix, TileLeft& aMatrix, TileRight& bMatrix, TileBias& biasData, WaitEvents&... events)
{
    detail::check_matmul<TileRes, TileLeft, TileRight>();
    detail::check_bias<TileRes, TileBias>();
    (void)cMatrix;
    (void)aMatrix;
    (void)bMatrix;
    (void)biasData;
    TSYNC(events...);
    return {};
}
template <AccPhase Phase, typename TileRes, typename TileLeft, typename TileRight, typename TileBias,
    typename... WaitEvents>
PTO_INST RecordEvent TMATMUL_BIAS(
    TileRes& cMatrix, TileLeft& aMatrix, TileRight& bMatrix, TileBias& biasData, WaitEvents&... events)
{
    detail::check_matmul<TileRes, TileLeft, TileRight>();
    detail::check_bias<TileRes, TileBias>();
    (void)cMatrix;
    (void)aMatrix;
    (void)bMatrix;
    (void)biasData;
    TSYNC(events...);
    return {};
}

// ----------------------------------------------------------------------------------------------
// Moves: TMOV / TMOV_FP / TEXTRACT / TEXTRACT_FP / TINSERT / TINSERT_FP
// Non-type template parameters come first or between the tile types exactly as in the public API,
// so e.g. TMOV<DstTile, AccTile, AccToVecMode::DualModeSplitM>(dst, acc) spells out both types.
// ----------------------------------------------------------------------------------------------
template <typename DstTileData, typename SrcTileData, typename... WaitEvents>
PTO_INST RecordEvent TMOV(DstTileData& dst, SrcTileData& src, WaitEvents&... events)
{
    detail::check_tmov_plain<DstTileData, SrcTileData>();
    (void)dst;
    (void)src;
    TSYNC(events...);
    return {};
}
// Vec ND -> Mat ZZ style moves through a temporary tile (MX scale paths).
template <typename DstTileData, typename SrcTileData, typename TmpTileData, typename... WaitEvents,
    std::enable_if_t<is_tile_data_v<TmpTileData>, int> = 0>
PTO_INST RecordEvent TMOV(DstTileData& dst, SrcTileData& src, TmpTileData& tmp, WaitEvents&... events)
{
    static_assert(TmpTileData::Loc != TileType::Scaling,
        "PTO: TMOV(dst, acc, fp) with a Scaling tile needs TMOV_FP or an explicit AccToVecMode");
    (void)dst;
    (void)src;
    (void)tmp;
    TSYNC(events...);
    return {};
}
template <typename DstTileData, typename SrcTileData, ReluPreMode reluMode, typename... WaitEvents>
PTO_INST RecordEvent TMOV(DstTileData& dst, SrcTileData& src, WaitEvents&... events)
{
    detail::check_acc_out<DstTileData, SrcTileData, false, AccToVecMode::SingleModeVec0, false>();
    (void)dst;
    (void)src;
    TSYNC(events...);
    return {};
}
template <STPhase Phase, typename DstTileData, typename SrcTileData, typename... WaitEvents>
PTO_INST RecordEvent TMOV(DstTileData& dst, SrcTileData& src, WaitEvents&... events)
{
    detail::check_acc_out<DstTileData, SrcTileData, false, AccToVecMode::SingleModeVec0, false>();
    (void)dst;
    (void)src;
    TSYNC(events...);
    return {};
}
template <STPhase Phase, typename DstTileData, typename SrcTileData, ReluPreMode reluMode, typename... WaitEvents>
PTO_INST RecordEvent TMOV(DstTileData& dst, SrcTileData& src, WaitEvents&... events)
{
    detail::check_acc_out<DstTileData, SrcTileData, false, AccToVecMode::SingleModeVec0, false>();
    (void)dst;
    (void)src;
    TSYNC(events...);
    return {};
}
template <typename DstTileData, typename SrcTileData, AccToVecMode mode, ReluPreMode reluMode = ReluPreMode::NoRelu,
    typename... WaitEvents>
PTO_INST RecordEvent TMOV(DstTileData& dst, SrcTileData& src, WaitEvents&... events)
{
    detail::check_acc_out<DstTileData, SrcTileData, false, mode, true>();
    (void)dst;
    (void)src;
    TSYNC(events...);
    return {};
}
template <STPhase Phase, typename DstTileData, typename SrcTileData, AccToVecMode mode,
    ReluPreMode reluMode = ReluPreMode::NoRelu, typename... WaitEvents>
PTO_INST RecordEvent TMOV(DstTileData& dst, SrcTileData& src, WaitEvents&... events)
{
    detail::check_acc_out<DstTileData, SrcTileData, false, mode, true>();
    (void)dst;
    (void)src;
    TSYNC(events...);
    return {};
}
template <typename DstTileData, typename SrcTileData, typename FpTileData, ReluPreMode reluMode = ReluPreMode::NoRelu,
    typename... WaitEvents>
PTO_INST RecordEvent TMOV_FP(DstTileData& dst, SrcTileData& src, FpTileData& fp, WaitEvents&... events)
{
    detail::check_fp_tile<FpTileData>();
    detail::check_acc_out<DstTileData, SrcTileData, true, AccToVecMode::SingleModeVec0, false>();
    (void)dst;
    (void)src;
    (void)fp;
    TSYNC(events...);
    return {};
}
template <STPhase Phase, typename DstTileData, typename SrcTileData, typename FpTileData,
    ReluPreMode reluMode = ReluPreMode::NoRelu, typename... WaitEvents>
PTO_INST RecordEvent TMOV_FP(DstTileData& dst, SrcTileData& src, FpTileData& fp, WaitEvents&... events)
{
    detail::check_fp_tile<FpTileData>();
    detail::check_acc_out<DstTileData, SrcTileData, true, AccToVecMode::SingleModeVec0, false>();
    (void)dst;
    (void)src;
    (void)fp;
    TSYNC(events...);
    return {};
}
template <typename DstTileData, typename SrcTileData, typename FpTileData, AccToVecMode mode,
    ReluPreMode reluMode = ReluPreMode::NoRelu, typename... WaitEvents>
PTO_INST RecordEvent TMOV(DstTileData& dst, SrcTileData& src, FpTileData& fp, WaitEvents&... events)
{
    detail::check_fp_tile<FpTileData>();
    detail::check_acc_out<DstTileData, SrcTileData, true, mode, true>();
    (void)dst;
    (void)src;
    (void)fp;
    TSYNC(events...);
    return {};
}
template <STPhase Phase, typename DstTileData, typename SrcTileData, typename FpTileData, AccToVecMode mode,
    ReluPreMode reluMode = ReluPreMode::NoRelu, typename... WaitEvents>
PTO_INST RecordEvent TMOV(DstTileData& dst, SrcTileData& src, FpTileData& fp, WaitEvents&... events)
{
    detail::check_fp_tile<FpTileData>();
    detail::check_acc_out<DstTileData, SrcTileData, true, mode, true>();
    (void)dst;
    (void)src;
    (void)fp;
    TSYNC(events...);
    return {};
}
template <typename DstTileData, typename SrcTileData, ReluPreMode reluMode = ReluPreMode::NoRelu,
    typename... WaitEvents>
PTO_INST RecordEvent TMOV(DstTileData& dst, SrcTileData& src, uint64_t preQuantScalar, WaitEvents&... events)
{
    detail::check_acc_out<DstTileData, SrcTileData, true, AccToVecMode::SingleModeVec0, false>();
    (void)dst;
    (void)src;
    (void)preQuantScalar;
    TSYNC(events...);
    return {};
}
template <STPhase Phase, typename DstTileData, typename SrcTileData, ReluPreMode reluMode = ReluPreMode::NoRelu,
    typename... WaitEvents>
PTO_INST RecordEvent TMOV(DstTileData& dst, SrcTileData& src, uint64_t preQuantScalar, WaitEvents&... events)
{
    detail::check_acc_out<DstTileData, SrcTileData, true, AccToVecMode::SingleModeVec0, false>();
    (void)dst;
    (void)src;
    (void)preQuantScalar;
    TSYNC(events...);
    return {};
}
template <typename DstTileData, typename SrcTileData, AccToVecMode mode, ReluPreMode reluMode = ReluPreMode::NoRelu,
    typename... WaitEvents>
PTO_INST RecordEvent TMOV(DstTileData& dst, SrcTileData& src, uint64_t preQuantScalar, WaitEvents&... events)
{
    detail::check_acc_out<DstTileData, SrcTileData, true, mode, true>();
    (void)dst;
    (void)src;
    (void)preQuantScalar;
    TSYNC(events...);
    return {};
}
template <STPhase Phase, typename DstTileData, typename SrcTileData, AccToVecMode mode,
    ReluPreMode reluMode = ReluPreMode::NoRelu, typename... WaitEvents>
PTO_INST RecordEvent TMOV(DstTileData& dst, SrcTileData& src, uint64_t preQuantScalar, WaitEvents&... events)
{
    detail::check_acc_out<DstTileData, SrcTileData, true, mode, true>();
    (void)dst;
    (void)src;
    (void)preQuantScalar;
    TSYNC(events...);
    return {};
}

// TEXTRACT: note there is no STPhase form (phase and offset cannot be combined on Acc -> Vec).
template <typename DstTileData, typename SrcTileData, typename... WaitEvents>
PTO_INST RecordEvent TEXTRACT(
    DstTileData& dst, SrcTileData& src, uint16_t indexRow = 0, uint16_t indexCol = 0, WaitEvents&... events)
{
    detail::check_textract<DstTileData, SrcTileData>();
    (void)dst;
    (void)src;
    (void)indexRow;
    (void)indexCol;
    TSYNC(events...);
    return {};
}
template <typename DstTileData, typename SrcTileData, ReluPreMode reluMode, typename... WaitEvents>
PTO_INST RecordEvent TEXTRACT(
    DstTileData& dst, SrcTileData& src, uint16_t indexRow, uint16_t indexCol, WaitEvents&... events)
{
    detail::check_acc_out<DstTileData, SrcTileData, false, AccToVecMode::SingleModeVec0, false>();
    (void)dst;
    (void)src;
    (void)indexRow;
    (void)indexCol;
    TSYNC(events...);
    return {};
}
template <typename DstTileData, typename SrcTileData, AccToVecMode mode, ReluPreMode reluMode = ReluPreMode::NoRelu,
    typename... WaitEvents>
PTO_INST RecordEvent TEXTRACT(
    DstTileData& dst, SrcTileData& src, uint16_t indexRow, uint16_t indexCol, WaitEvents&... events)
{
    detail::check_acc_out<DstTileData, SrcTileData, false, mode, true>();
    (void)dst;
    (void)src;
    (void)indexRow;
    (void)indexCol;
    TSYNC(events...);
    return {};
}
template <typename DstTileData, typename SrcTileData, ReluPreMode reluMode = ReluPreMode::NoRelu,
    typename... WaitEvents>
PTO_INST RecordEvent TEXTRACT(DstTileData& dst, SrcTileData& src, uint64_t preQuantScalar, uint16_t indexRow,
    uint16_t indexCol, WaitEvents&... events)
{
    detail::check_acc_out<DstTileData, SrcTileData, true, AccToVecMode::SingleModeVec0, false>();
    (void)dst;
    (void)src;
    (void)preQuantScalar;
    (void)indexRow;
    (void)indexCol;
    TSYNC(events...);
    return {};
}
template <typename DstTileData, typename SrcTileData, AccToVecMode mode, ReluPreMode reluMode = ReluPreMode::NoRelu,
    typename... WaitEvents>
PTO_INST RecordEvent TEXTRACT(DstTileData& dst, SrcTileData& src, uint64_t preQuantScalar, uint16_t indexRow,
    uint16_t indexCol, WaitEvents&... events)
{
    detail::check_acc_out<DstTileData, SrcTileData, true, mode, true>();
    (void)dst;
    (void)src;
    (void)preQuantScalar;
    (void)indexRow;
    (void)indexCol;
    TSYNC(events...);
    return {};
}
template <typename DstTileData, typename SrcTileData, typename FpTileData, ReluPreMode reluMode = ReluPreMode::NoRelu,
    typename... WaitEvents>
PTO_INST RecordEvent TEXTRACT_FP(DstTileData& dst, SrcTileData& src, FpTileData& fp, uint16_t indexRow,
    uint16_t indexCol, WaitEvents&... events)
{
    detail::check_fp_tile<FpTileData>();
    detail::check_acc_out<DstTileData, SrcTileData, true, AccToVecMode::SingleModeVec0, false>();
    (void)dst;
    (void)src;
    (void)fp;
    (void)indexRow;
    (void)indexCol;
    TSYNC(events...);
    return {};
}
template <typename DstTileData, typename SrcTileData, typename FpTileData, AccToVecMode mode,
    ReluPreMode reluMode = ReluPreMode::NoRelu, typename... WaitEvents>
PTO_INST RecordEvent TEXTRACT(DstTileData& dst, SrcTileData& src, FpTileData& fp, uint16_t indexRow,
    uint16_t indexCol, WaitEvents&... events)
{
    detail::check_fp_tile<FpTileData>();
    detail::check_acc_out<DstTileData, SrcTileData, true, mode, true>();
    (void)dst;
    (void)src;
    (void)fp;
    (void)indexRow;
    (void)indexCol;
    TSYNC(events...);
    return {};
}

template <typename DstTileData, typename SrcTileData, ReluPreMode reluMode, typename... WaitEvents>
PTO_INST RecordEvent TINSERT(
    DstTileData& dst, SrcTileData& src, uint16_t indexRow, uint16_t indexCol, WaitEvents&... events)
{
    detail::check_tinsert<DstTileData, SrcTileData>();
    (void)dst;
    (void)src;
    (void)indexRow;
    (void)indexCol;
    TSYNC(events...);
    return {};
}
template <typename DstTileData, typename SrcTileData, typename... WaitEvents>
PTO_INST RecordEvent TINSERT(
    DstTileData& dst, SrcTileData& src, uint16_t indexRow, uint16_t indexCol, WaitEvents&... events)
{
    detail::check_tinsert<DstTileData, SrcTileData>();
    (void)dst;
    (void)src;
    (void)indexRow;
    (void)indexCol;
    TSYNC(events...);
    return {};
}
template <typename DstTileData, typename SrcTileData, AccToVecMode mode, ReluPreMode reluMode = ReluPreMode::NoRelu,
    typename... WaitEvents>
PTO_INST RecordEvent TINSERT(
    DstTileData& dst, SrcTileData& src, uint16_t indexRow, uint16_t indexCol, WaitEvents&... events)
{
    detail::check_tinsert<DstTileData, SrcTileData>();
    detail::check_acc_out<DstTileData, SrcTileData, false, mode, true>();
    (void)dst;
    (void)src;
    (void)indexRow;
    (void)indexCol;
    TSYNC(events...);
    return {};
}
template <typename DstTileData, typename SrcTileData, ReluPreMode reluMode = ReluPreMode::NoRelu,
    typename... WaitEvents>
PTO_INST RecordEvent TINSERT(DstTileData& dst, SrcTileData& src, uint64_t preQuantScalar, uint16_t indexRow,
    uint16_t indexCol, WaitEvents&... events)
{
    detail::check_acc_out<DstTileData, SrcTileData, true, AccToVecMode::SingleModeVec0, false>();
    (void)dst;
    (void)src;
    (void)preQuantScalar;
    (void)indexRow;
    (void)indexCol;
    TSYNC(events...);
    return {};
}
template <typename DstTileData, typename SrcTileData, AccToVecMode mode, ReluPreMode reluMode = ReluPreMode::NoRelu,
    typename... WaitEvents>
PTO_INST RecordEvent TINSERT(DstTileData& dst, SrcTileData& src, uint64_t preQuantScalar, uint16_t indexRow,
    uint16_t indexCol, WaitEvents&... events)
{
    detail::check_acc_out<DstTileData, SrcTileData, true, mode, true>();
    (void)dst;
    (void)src;
    (void)preQuantScalar;
    (void)indexRow;
    (void)indexCol;
    TSYNC(events...);
    return {};
}
template <typename DstTileData, typename SrcTileData, typename FpTileData, ReluPreMode reluMode = ReluPreMode::NoRelu,
    typename... WaitEvents>
PTO_INST RecordEvent TINSERT_FP(DstTileData& dst, SrcTileData& src, FpTileData& fp, uint16_t indexRow,
    uint16_t indexCol, WaitEvents&... events)
{
    detail::check_fp_tile<FpTileData>();
    detail::check_acc_out<DstTileData, SrcTileData, true, AccToVecMode::SingleModeVec0, false>();
    (void)dst;
    (void)src;
    (void)fp;
    (void)indexRow;
    (void)indexCol;
    TSYNC(events...);
    return {};
}
template <typename DstTileData, typename SrcTileData, typename FpTileData, AccToVecMode mode,
    ReluPreMode reluMode = ReluPreMode::NoRelu, typename... WaitEvents>
PTO_INST RecordEvent TINSERT(DstTileData& dst, SrcTileData& src, FpTileData& fp, uint16_t indexRow, uint16_t indexCol,
    WaitEvents&... events)
{
    detail::check_fp_tile<FpTileData>();
    detail::check_acc_out<DstTileData, SrcTileData, true, mode, true>();
    (void)dst;
    (void)src;
    (void)fp;
    (void)indexRow;
    (void)indexCol;
    TSYNC(events...);
    return {};
}
template <TInsertMode mode, typename DstTileData, typename SrcTileData, typename... WaitEvents>
PTO_INST RecordEvent TINSERT(
    DstTileData& dst, SrcTileData& src, uint16_t indexRow = 0, uint16_t indexCol = 0, WaitEvents&... events)
{
    (void)dst;
    (void)src;
    (void)indexRow;
    (void)indexCol;
    TSYNC(events...);
    return {};
}

// ----------------------------------------------------------------------------------------------
// Vector unit (all operands Vec tiles)
// ----------------------------------------------------------------------------------------------
#define TILEOPS_PTO_VEC(NAME, T) static_assert(T::Loc == TileType::Vec, "PTO: " #NAME " operands must be Vec tiles")
// a5/TAdd.hpp ("TADD only support row major layout"), TSub, TMul, TDiv, TMax, TMin, TAnd, TOr,
// a5/TUnaryOp.hpp ("TUnaryOp: Not supported Layout type"), a5/TRsqrt.hpp, docs/isa/T<OP>S.md and
// TEXPANDS.md ("Tile layout must be row-major"), a5/TRowExpand<Op>.hpp (dst), a5/TColExpandBinOp.hpp.
#define TILEOPS_PTO_ROW_MAJOR(NAME, T) \
    static_assert(T::isRowMajor, "PTO: " #NAME " takes row-major tiles only on A5 (a DN [N, 1] column is not)")
#define TILEOPS_PTO_SAME(NAME, A, B)                                                  \
    static_assert(std::is_same_v<typename A::DType, typename B::DType>, "PTO: " #NAME \
                                                                        " requires equal element types")
// Element types of each instruction's A5 implementation: the static_asserts of
// include/pto/npu/a5/<Instr>.hpp and the "Constraints" of docs/isa/<INSTR>.md. The message names the
// instruction and lists the accepted types.
#define TILEOPS_PTO_STR(...) #__VA_ARGS__
#define TILEOPS_PTO_DTYPES(NAME, T, ...)                                                   \
    static_assert(detail::is_one_of_v<typename T::DType, __VA_ARGS__>,                     \
        "PTO: " #NAME " does not support this element type on A5 (supported: " TILEOPS_PTO_STR(__VA_ARGS__) ")")
// a5/TAdd.hpp, TSub.hpp, TMax.hpp, TMin.hpp, TAddS.hpp, TSubS.hpp, TMaxs.hpp, TMins.hpp, TExpandS.hpp;
// the column reductions (a5/TColReduceOps.hpp TColReduceCheck).
#define TILEOPS_PTO_ARITH_TYPES \
    int8_t, uint8_t, int16_t, uint16_t, int32_t, uint32_t, int64_t, uint64_t, half, bfloat16_t, float
// a5/TMul.hpp, TMulS.hpp (and TNEG, which A5 lowers to TMULS(dst, src, -1)): no 8-bit integers.
#define TILEOPS_PTO_MUL_TYPES int16_t, uint16_t, int32_t, uint32_t, int64_t, uint64_t, half, bfloat16_t, float
// a5/TDiv.hpp, TDivS.hpp (tile / scalar form): no 8-bit integers, no bfloat16.
#define TILEOPS_PTO_DIV_TYPES int16_t, uint16_t, int32_t, uint32_t, int64_t, uint64_t, half, float
// a5/TRowExpand<Op>.hpp and a5/TColExpandBinOp.hpp: 8/16/32-bit, bfloat16 included, no 64-bit.
#define TILEOPS_PTO_EXPAND_TYPES int8_t, uint8_t, int16_t, uint16_t, int32_t, uint32_t, half, bfloat16_t, float

// TAND / TOR take any 1-, 2- or 4-byte element type (a5/TAnd.hpp, TOr.hpp): the bool argument says
// whether a type list is checked.
#define TILEOPS_PTO_BINARY(NAME, CHECKED, ...)                                                                  \
    template <typename TileDataDst, typename TileDataSrc0, typename TileDataSrc1, typename... WaitEvents>      \
    PTO_INST RecordEvent NAME(TileDataDst& dst, TileDataSrc0& src0, TileDataSrc1& src1, WaitEvents&... events) \
    {                                                                                                           \
        TILEOPS_PTO_VEC(NAME, TileDataDst);  \
        TILEOPS_PTO_ROW_MAJOR(NAME, TileDataDst);                                                                     \
        TILEOPS_PTO_VEC(NAME, TileDataSrc0);  \
        TILEOPS_PTO_ROW_MAJOR(NAME, TileDataSrc0);                                                                    \
        TILEOPS_PTO_VEC(NAME, TileDataSrc1);  \
        TILEOPS_PTO_ROW_MAJOR(NAME, TileDataSrc1);                                                                    \
        TILEOPS_PTO_SAME(NAME, TileDataDst, TileDataSrc0);                                                      \
        TILEOPS_PTO_SAME(NAME, TileDataDst, TileDataSrc1);                                                      \
        static_assert(!CHECKED || detail::is_one_of_v<typename TileDataDst::DType, __VA_ARGS__>,               \
            "PTO: " #NAME " does not support this element type on A5 (supported: " TILEOPS_PTO_STR(__VA_ARGS__) ")"); \
        (void)dst;                                                                                              \
        (void)src0;                                                                                             \
        (void)src1;                                                                                             \
        TSYNC(events...);                                                                                       \
        return {};                                                                                              \
    }
TILEOPS_PTO_BINARY(TADD, true, TILEOPS_PTO_ARITH_TYPES)
TILEOPS_PTO_BINARY(TSUB, true, TILEOPS_PTO_ARITH_TYPES)
TILEOPS_PTO_BINARY(TMUL, true, TILEOPS_PTO_MUL_TYPES)
TILEOPS_PTO_BINARY(TMAX, true, TILEOPS_PTO_ARITH_TYPES)
TILEOPS_PTO_BINARY(TMIN, true, TILEOPS_PTO_ARITH_TYPES)
TILEOPS_PTO_BINARY(TAND, false, void)
TILEOPS_PTO_BINARY(TOR, false, void)
#undef TILEOPS_PTO_BINARY

template <auto PrecisionType = DivAlgorithm::DEFAULT, typename TileDataDst, typename TileDataSrc0,
    typename TileDataSrc1, typename... WaitEvents>
PTO_INST RecordEvent TDIV(TileDataDst& dst, TileDataSrc0& src0, TileDataSrc1& src1, WaitEvents&... events)
{
    TILEOPS_PTO_VEC(TDIV, TileDataDst);
    TILEOPS_PTO_ROW_MAJOR(TDIV, TileDataDst);
    TILEOPS_PTO_VEC(TDIV, TileDataSrc0);
    TILEOPS_PTO_ROW_MAJOR(TDIV, TileDataSrc0);
    TILEOPS_PTO_VEC(TDIV, TileDataSrc1);
    TILEOPS_PTO_ROW_MAJOR(TDIV, TileDataSrc1);
    TILEOPS_PTO_SAME(TDIV, TileDataDst, TileDataSrc0);
    TILEOPS_PTO_SAME(TDIV, TileDataDst, TileDataSrc1);
    TILEOPS_PTO_DTYPES(TDIV, TileDataDst, TILEOPS_PTO_DIV_TYPES);
    (void)dst;
    (void)src0;
    (void)src1;
    TSYNC(events...);
    return {};
}

#define TILEOPS_PTO_SCALAR(NAME, ...)                                                                        \
    template <typename TileDataDst, typename TileDataSrc, typename... WaitEvents>                            \
    PTO_INST RecordEvent NAME(                                                                               \
        TileDataDst& dst, TileDataSrc& src0, typename TileDataSrc::DType scalar, WaitEvents&... events)      \
    {                                                                                                        \
        TILEOPS_PTO_VEC(NAME, TileDataDst);  \
        TILEOPS_PTO_ROW_MAJOR(NAME, TileDataDst);                                                                  \
        TILEOPS_PTO_VEC(NAME, TileDataSrc);  \
        TILEOPS_PTO_ROW_MAJOR(NAME, TileDataSrc);                                                                  \
        TILEOPS_PTO_SAME(NAME, TileDataDst, TileDataSrc);                                                    \
        TILEOPS_PTO_DTYPES(NAME, TileDataDst, __VA_ARGS__);                                                  \
        (void)dst;                                                                                           \
        (void)src0;                                                                                          \
        (void)scalar;                                                                                        \
        TSYNC(events...);                                                                                    \
        return {};                                                                                           \
    }
TILEOPS_PTO_SCALAR(TADDS, TILEOPS_PTO_ARITH_TYPES)
TILEOPS_PTO_SCALAR(TSUBS, TILEOPS_PTO_ARITH_TYPES)
TILEOPS_PTO_SCALAR(TMULS, TILEOPS_PTO_MUL_TYPES)
TILEOPS_PTO_SCALAR(TMAXS, TILEOPS_PTO_ARITH_TYPES)
TILEOPS_PTO_SCALAR(TMINS, TILEOPS_PTO_ARITH_TYPES)
// a2a3/TLRelu.hpp (the public tree has no A5 header for TLRELU): half and float only.
TILEOPS_PTO_SCALAR(TLRELU, half, float)
#undef TILEOPS_PTO_SCALAR

template <auto PrecisionType = DivAlgorithm::DEFAULT, typename TileDataDst, typename TileDataSrc,
    typename... WaitEvents>
PTO_INST RecordEvent TDIVS(
    TileDataDst& dst, TileDataSrc& src0, typename TileDataSrc::DType scalar, WaitEvents&... events)
{
    TILEOPS_PTO_VEC(TDIVS, TileDataDst);
    TILEOPS_PTO_ROW_MAJOR(TDIVS, TileDataDst);
    TILEOPS_PTO_VEC(TDIVS, TileDataSrc);
    TILEOPS_PTO_ROW_MAJOR(TDIVS, TileDataSrc);
    TILEOPS_PTO_SAME(TDIVS, TileDataDst, TileDataSrc);
    TILEOPS_PTO_DTYPES(TDIVS, TileDataDst, TILEOPS_PTO_DIV_TYPES);
    (void)dst;
    (void)src0;
    (void)scalar;
    TSYNC(events...);
    return {};
}
// scalar / tile form: dst = scalar / src
template <auto PrecisionType = DivAlgorithm::DEFAULT, typename TileDataDst, typename TileDataSrc,
    typename... WaitEvents>
PTO_INST RecordEvent TDIVS(
    TileDataDst& dst, typename TileDataDst::DType scalar, TileDataSrc& src0, WaitEvents&... events)
{
    TILEOPS_PTO_VEC(TDIVS, TileDataDst);
    TILEOPS_PTO_ROW_MAJOR(TDIVS, TileDataDst);
    TILEOPS_PTO_VEC(TDIVS, TileDataSrc);
    TILEOPS_PTO_ROW_MAJOR(TDIVS, TileDataSrc);
    TILEOPS_PTO_SAME(TDIVS, TileDataDst, TileDataSrc);
    (void)dst;
    (void)src0;
    (void)scalar;
    TSYNC(events...);
    return {};
}

#define TILEOPS_PTO_UNARY(NAME, ...)                                                                   \
    template <typename TileDataDst, typename TileDataSrc, typename... WaitEvents>                      \
    PTO_INST RecordEvent NAME(TileDataDst& dst, TileDataSrc& src, WaitEvents&... events)               \
    {                                                                                                  \
        TILEOPS_PTO_VEC(NAME, TileDataDst);  \
        TILEOPS_PTO_ROW_MAJOR(NAME, TileDataDst);                                                            \
        TILEOPS_PTO_VEC(NAME, TileDataSrc);  \
        TILEOPS_PTO_ROW_MAJOR(NAME, TileDataSrc);                                                            \
        TILEOPS_PTO_SAME(NAME, TileDataDst, TileDataSrc);                                              \
        TILEOPS_PTO_DTYPES(NAME, TileDataSrc, __VA_ARGS__);                                            \
        (void)dst;                                                                                     \
        (void)src;                                                                                     \
        TSYNC(events...);                                                                              \
        return {};                                                                                     \
    }
// a5/TUnaryOp.hpp: TABS_IMPL (no bfloat16, no uint8), TNEG_IMPL (= TMULS by -1), TRELU_IMPL.
TILEOPS_PTO_UNARY(TABS, int8_t, int16_t, int32_t, half, float)
TILEOPS_PTO_UNARY(TNEG, TILEOPS_PTO_MUL_TYPES)
TILEOPS_PTO_UNARY(TRELU, int32_t, half, float)
#undef TILEOPS_PTO_UNARY

#define TILEOPS_PTO_UNARY_ALGO(NAME, ALGO, ...)                                                               \
    template <auto PrecisionType = ALGO::DEFAULT, typename TileDataDst, typename TileDataSrc,                \
        typename... WaitEvents>                                                                               \
    PTO_INST RecordEvent NAME(TileDataDst& dst, TileDataSrc& src, WaitEvents&... events)                      \
    {                                                                                                         \
        TILEOPS_PTO_VEC(NAME, TileDataDst);  \
        TILEOPS_PTO_ROW_MAJOR(NAME, TileDataDst);                                                                   \
        TILEOPS_PTO_VEC(NAME, TileDataSrc);  \
        TILEOPS_PTO_ROW_MAJOR(NAME, TileDataSrc);                                                                   \
        TILEOPS_PTO_SAME(NAME, TileDataDst, TileDataSrc);                                                     \
        TILEOPS_PTO_DTYPES(NAME, TileDataSrc, __VA_ARGS__);                                                   \
        (void)dst;                                                                                            \
        (void)src;                                                                                            \
        TSYNC(events...);                                                                                     \
        return {};                                                                                            \
    }
// a5/TUnaryOp.hpp TUnaryCheck (TEXP, TLOG, TSQRT), a5/TRsqrt.hpp; TRECIP is TDIVS(dst, 1, src)
// and docs/isa/TRECIP.md lists float, half, int32_t, int16_t.
TILEOPS_PTO_UNARY_ALGO(TEXP, ExpAlgorithm, half, float)
TILEOPS_PTO_UNARY_ALGO(TLOG, LogAlgorithm, half, float)
TILEOPS_PTO_UNARY_ALGO(TSQRT, SqrtAlgorithm, half, float)
TILEOPS_PTO_UNARY_ALGO(TRECIP, RecipAlgorithm, int16_t, int32_t, half, float)
TILEOPS_PTO_UNARY_ALGO(TRSQRT, RsqrtAlgorithm, half, float)
#undef TILEOPS_PTO_UNARY_ALGO

template <typename TileData, typename... WaitEvents>
PTO_INST RecordEvent TEXPANDS(TileData& dst, typename TileData::DType scalar, WaitEvents&... events)
{
    static_assert(TileData::Loc == TileType::Vec || TileData::Loc == TileType::Mat,
        "PTO: TEXPANDS destination must be a Vec (or Mat) tile");
    static_assert(TileData::Loc != TileType::Vec || TileData::isRowMajor,
        "PTO: TEXPANDS takes row-major Vec tiles only on A5 (a DN [N, 1] column is not)");
    TILEOPS_PTO_DTYPES(TEXPANDS, TileData, TILEOPS_PTO_ARITH_TYPES);
    (void)dst;
    (void)scalar;
    TSYNC(events...);
    return {};
}

// Row reductions: src ND [R, C] -> dst [R, 1] (ND, or DN with one column); tmp is a Vec scratch tile.
namespace detail {
template <typename Out, typename In, bool Sum>
constexpr void check_row_reduce()
{
    static_assert(Out::Loc == TileType::Vec && In::Loc == TileType::Vec, "PTO: row reductions work on Vec tiles");
    static_assert(is_nd_v<In>, "PTO: row reduction input must be ND (row-major, unboxed)");
    static_assert(!Out::isBoxedLayout && (Out::isRowMajor || Out::Cols == 1),
        "PTO: row reduction output must be ND, or DN with exactly one column");
    static_assert(std::is_same_v<typename Out::DType, typename In::DType>,
        "PTO: row reduction input and output element types must match");
    // a5/TRowReduce.hpp: TRowMax/TRowMin static_asserts, 64-bit through TROW*_IMPL's Int64 paths.
    static_assert(Sum || is_one_of_v<typename In::DType, half, float, int32_t, int16_t, int8_t, uint8_t, int64_t,
                             uint64_t>,
        "PTO: TROWMAX/TROWMIN support half, float, int32, int16, int8, uint8, int64, uint64 (no bf16)");
    // a5/TRowReduce.hpp: TRowSum static_assert (no 8-bit, no bf16), 64-bit through TROWSUM_IMPL.
    static_assert(!Sum || is_one_of_v<typename In::DType, half, float, int32_t, int16_t, int64_t, uint64_t>,
        "PTO: TROWSUM supports half, float, int32, int16, int64, uint64 (no bf16, no 8-bit)");
}
template <typename Out, typename In>
constexpr void check_col_reduce()
{
    static_assert(Out::Loc == TileType::Vec && In::Loc == TileType::Vec, "PTO: column reductions work on Vec tiles");
    static_assert(is_nd_v<In> && is_nd_v<Out>, "PTO: column reduction input and output must be ND");
    static_assert(std::is_same_v<typename Out::DType, typename In::DType>,
        "PTO: column reduction input and output element types must match");
    // a5/TColReduceOps.hpp TColReduceCheck.
    static_assert(is_one_of_v<typename In::DType, TILEOPS_PTO_ARITH_TYPES>,
        "PTO: column reductions support int8, uint8, int16, uint16, int32, uint32, int64, uint64, half, bfloat16, "
        "float");
}
} // namespace detail

template <typename TileDataOut, typename TileDataIn, typename TileDataTmp, typename... WaitEvents>
PTO_INST RecordEvent TROWMAX(TileDataOut& dst, TileDataIn& src, TileDataTmp& tmp, WaitEvents&... events)
{
    detail::check_row_reduce<TileDataOut, TileDataIn, false>();
    (void)dst;
    (void)src;
    (void)tmp;
    TSYNC(events...);
    return {};
}
template <typename TileDataOut, typename TileDataIn, typename TileDataTmp, typename... WaitEvents>
PTO_INST RecordEvent TROWMIN(TileDataOut& dst, TileDataIn& src, TileDataTmp& tmp, WaitEvents&... events)
{
    detail::check_row_reduce<TileDataOut, TileDataIn, false>();
    (void)dst;
    (void)src;
    (void)tmp;
    TSYNC(events...);
    return {};
}
template <typename TileDataOut, typename TileDataIn, typename TileDataTmp, typename... WaitEvents>
PTO_INST RecordEvent TROWSUM(TileDataOut& dst, TileDataIn& src, TileDataTmp& tmp, WaitEvents&... events)
{
    detail::check_row_reduce<TileDataOut, TileDataIn, true>();
    (void)dst;
    (void)src;
    (void)tmp;
    TSYNC(events...);
    return {};
}
template <typename TileDataOut, typename TileDataIn, typename... WaitEvents>
PTO_INST RecordEvent TCOLMAX(TileDataOut& dst, TileDataIn& src, WaitEvents&... events)
{
    detail::check_col_reduce<TileDataOut, TileDataIn>();
    (void)dst;
    (void)src;
    TSYNC(events...);
    return {};
}
template <typename TileDataOut, typename TileDataIn, typename... WaitEvents>
PTO_INST RecordEvent TCOLMIN(TileDataOut& dst, TileDataIn& src, WaitEvents&... events)
{
    detail::check_col_reduce<TileDataOut, TileDataIn>();
    (void)dst;
    (void)src;
    TSYNC(events...);
    return {};
}
template <typename TileDataOut, typename TileDataIn, typename... WaitEvents>
PTO_INST RecordEvent TCOLSUM(TileDataOut& dst, TileDataIn& src, WaitEvents&... events)
{
    detail::check_col_reduce<TileDataOut, TileDataIn>();
    (void)dst;
    (void)src;
    TSYNC(events...);
    return {};
}
template <typename TileDataOut, typename TileDataIn, typename TileDataTmp, typename... WaitEvents>
PTO_INST RecordEvent TCOLSUM(TileDataOut& dst, TileDataIn& src, TileDataTmp& tmp, bool isBinary, WaitEvents&... events)
{
    detail::check_col_reduce<TileDataOut, TileDataIn>();
    (void)dst;
    (void)src;
    (void)tmp;
    (void)isBinary;
    TSYNC(events...);
    return {};
}

// Broadcasts: TROWEXPAND(dst [R,C], src [R,1]); TCOLEXPAND(dst [R,C], src [1,C]);
// TROWEXPAND<OP>(dst, src0 [R,C], src1 [R,1]); TCOLEXPAND<OP>(dst, src0 [R,C], src1 [1,C]).
template <typename TileDataDst, typename TileDataSrc, typename... WaitEvents>
PTO_INST RecordEvent TROWEXPAND(TileDataDst& dst, TileDataSrc& src, WaitEvents&... events)
{
    TILEOPS_PTO_VEC(TROWEXPAND, TileDataDst);
    TILEOPS_PTO_VEC(TROWEXPAND, TileDataSrc);
    static_assert(sizeof(typename TileDataSrc::DType) == 1 || sizeof(typename TileDataSrc::DType) == 2 ||
                      sizeof(typename TileDataSrc::DType) == 4 || sizeof(typename TileDataSrc::DType) == 8,
        "PTO: TROWEXPAND element type must be 1, 2, 4 or 8 bytes (b8/b16/b32/b64)");
    (void)dst;
    (void)src;
    TSYNC(events...);
    return {};
}
template <typename TileDataDst, typename TileDataSrc, typename... WaitEvents>
PTO_INST RecordEvent TCOLEXPAND(TileDataDst& dst, TileDataSrc& src, WaitEvents&... events)
{
    TILEOPS_PTO_VEC(TCOLEXPAND, TileDataDst);
    TILEOPS_PTO_VEC(TCOLEXPAND, TileDataSrc);
    static_assert(sizeof(typename TileDataSrc::DType) == 1 || sizeof(typename TileDataSrc::DType) == 2 ||
                      sizeof(typename TileDataSrc::DType) == 4 || sizeof(typename TileDataSrc::DType) == 8,
        "PTO: TCOLEXPAND element type must be 1, 2, 4 or 8 bytes (b8/b16/b32/b64)");
    static_assert(detail::is_nd_v<TileDataDst> && detail::is_nd_v<TileDataSrc>, "PTO: TCOLEXPAND takes ND tiles only on A5");
    (void)dst;
    (void)src;
    TSYNC(events...);
    return {};
}

// The per-row operand of TROWEXPAND<OP> (npu/a5/TRowExpandBinOp.hpp, the PTO_ASSERT of
// TRowExpandMul.hpp and its siblings): unboxed; column-major with one valid column (one element
// per row), or row-major with 32 / sizeof(T) valid columns (a 32-byte block per row, combined
// element by element: not a per-row broadcast, so our verifier's `broadcast-operand` takes the DN
// column only). A dynamic valid column count is checked at run time on A5.
#define TILEOPS_PTO_ROW_OPERAND(NAME, T)                                                                     \
    static_assert(!T::isBoxedLayout &&                                                                        \
                      (T::ValidCol == DYNAMIC ||                                                              \
                          (T::isRowMajor ? T::ValidCol == static_cast<int>(32 / sizeof(typename T::DType))   \
                                         : T::ValidCol == 1)),                                                \
        "PTO: " #NAME " takes its per-row operand as a DN column [R, 1] with one valid column "                \
        "(row-major: 32 / sizeof(T) valid columns, one 32-byte block per row)")
// TCOLEXPAND<OP>'s per-column operand: checked by its row-major / ND asserts.
#define TILEOPS_PTO_COL_OPERAND(NAME, T) static_assert(true, "")
#define TILEOPS_PTO_EXPAND_BIN(NAME, OPERAND)                                                                   \
    template <typename TileDataDst, typename TileDataSrc0, typename TileDataSrc1, typename... WaitEvents>      \
    PTO_INST RecordEvent NAME(TileDataDst& dst, TileDataSrc0& src0, TileDataSrc1& src1, WaitEvents&... events) \
    {                                                                                                           \
        TILEOPS_PTO_VEC(NAME, TileDataDst);  \
        TILEOPS_PTO_ROW_MAJOR(NAME, TileDataDst);                                                                     \
        TILEOPS_PTO_VEC(NAME, TileDataSrc0);                                                                    \
        TILEOPS_PTO_VEC(NAME, TileDataSrc1);                                                                    \
        OPERAND(NAME, TileDataSrc1);                                                                           \
        TILEOPS_PTO_SAME(NAME, TileDataDst, TileDataSrc0);                                                      \
        TILEOPS_PTO_SAME(NAME, TileDataDst, TileDataSrc1);                                                      \
        TILEOPS_PTO_DTYPES(NAME, TileDataDst, TILEOPS_PTO_EXPAND_TYPES);                                        \
        (void)dst;                                                                                              \
        (void)src0;                                                                                             \
        (void)src1;                                                                                             \
        TSYNC(events...);                                                                                       \
        return {};                                                                                              \
    }
#define TILEOPS_PTO_EXPAND_BIN_TMP(NAME, OPERAND)                                                                 \
    template <typename TileDataDst, typename TileDataSrc0, typename TileDataSrc1, typename TileDataTmp,          \
        typename... WaitEvents>                                                                                   \
    PTO_INST RecordEvent NAME(                                                                                    \
        TileDataDst& dst, TileDataSrc0& src0, TileDataSrc1& src1, TileDataTmp& tmp, WaitEvents&... events)        \
    {                                                                                                             \
        TILEOPS_PTO_VEC(NAME, TileDataDst);  \
        TILEOPS_PTO_ROW_MAJOR(NAME, TileDataDst);                                                                       \
        TILEOPS_PTO_VEC(NAME, TileDataSrc0);                                                                      \
        TILEOPS_PTO_VEC(NAME, TileDataSrc1);                                                                      \
        OPERAND(NAME, TileDataSrc1);                                                                           \
        TILEOPS_PTO_SAME(NAME, TileDataDst, TileDataSrc0);                                                        \
        TILEOPS_PTO_DTYPES(NAME, TileDataDst, TILEOPS_PTO_EXPAND_TYPES);                                          \
        (void)dst;                                                                                                \
        (void)src0;                                                                                               \
        (void)src1;                                                                                               \
        (void)tmp;                                                                                                \
        TSYNC(events...);                                                                                         \
        return {};                                                                                                \
    }
TILEOPS_PTO_EXPAND_BIN(TROWEXPANDSUB, TILEOPS_PTO_ROW_OPERAND)
TILEOPS_PTO_EXPAND_BIN(TROWEXPANDMUL, TILEOPS_PTO_ROW_OPERAND)
TILEOPS_PTO_EXPAND_BIN(TROWEXPANDADD, TILEOPS_PTO_ROW_OPERAND)
TILEOPS_PTO_EXPAND_BIN(TROWEXPANDMAX, TILEOPS_PTO_ROW_OPERAND)
TILEOPS_PTO_EXPAND_BIN_TMP(TROWEXPANDSUB, TILEOPS_PTO_ROW_OPERAND)
TILEOPS_PTO_EXPAND_BIN_TMP(TROWEXPANDMUL, TILEOPS_PTO_ROW_OPERAND)
TILEOPS_PTO_EXPAND_BIN_TMP(TROWEXPANDADD, TILEOPS_PTO_ROW_OPERAND)
TILEOPS_PTO_EXPAND_BIN_TMP(TROWEXPANDMAX, TILEOPS_PTO_ROW_OPERAND)
TILEOPS_PTO_EXPAND_BIN(TCOLEXPANDSUB, TILEOPS_PTO_COL_OPERAND)
TILEOPS_PTO_EXPAND_BIN(TCOLEXPANDMUL, TILEOPS_PTO_COL_OPERAND)
TILEOPS_PTO_EXPAND_BIN(TCOLEXPANDADD, TILEOPS_PTO_COL_OPERAND)
TILEOPS_PTO_EXPAND_BIN(TCOLEXPANDMAX, TILEOPS_PTO_COL_OPERAND)
// TROWEXPANDMIN / TCOLEXPANDMIN: pto_instr.hpp declares them like the MAX forms (added by the
// code generator's helper; the emitter maps Broadcast { op: Min } to them).
TILEOPS_PTO_EXPAND_BIN(TROWEXPANDMIN, TILEOPS_PTO_ROW_OPERAND)
TILEOPS_PTO_EXPAND_BIN_TMP(TROWEXPANDMIN, TILEOPS_PTO_ROW_OPERAND)
TILEOPS_PTO_EXPAND_BIN(TCOLEXPANDMIN, TILEOPS_PTO_COL_OPERAND)
#undef TILEOPS_PTO_EXPAND_BIN
#undef TILEOPS_PTO_EXPAND_BIN_TMP
#undef TILEOPS_PTO_COL_OPERAND

template <auto PrecisionType = DivAlgorithm::DEFAULT, typename TileDataDst, typename TileDataSrc0,
    typename TileDataSrc1, typename... WaitEvents>
PTO_INST RecordEvent TROWEXPANDDIV(TileDataDst& dst, TileDataSrc0& src0, TileDataSrc1& src1, WaitEvents&... events)
{
    TILEOPS_PTO_VEC(TROWEXPANDDIV, TileDataDst);
    TILEOPS_PTO_VEC(TROWEXPANDDIV, TileDataSrc0);
    TILEOPS_PTO_VEC(TROWEXPANDDIV, TileDataSrc1);
    TILEOPS_PTO_ROW_OPERAND(TROWEXPANDDIV, TileDataSrc1);
    TILEOPS_PTO_SAME(TROWEXPANDDIV, TileDataDst, TileDataSrc0);
    TILEOPS_PTO_DTYPES(TROWEXPANDDIV, TileDataDst, TILEOPS_PTO_EXPAND_TYPES);
    (void)dst;
    (void)src0;
    (void)src1;
    TSYNC(events...);
    return {};
}
template <auto PrecisionType = DivAlgorithm::DEFAULT, typename TileDataDst, typename TileDataSrc0,
    typename TileDataSrc1, typename TileDataTmp, typename... WaitEvents>
PTO_INST RecordEvent TROWEXPANDDIV(
    TileDataDst& dst, TileDataSrc0& src0, TileDataSrc1& src1, TileDataTmp& tmp, WaitEvents&... events)
{
    TILEOPS_PTO_VEC(TROWEXPANDDIV, TileDataDst);
    TILEOPS_PTO_VEC(TROWEXPANDDIV, TileDataSrc0);
    TILEOPS_PTO_VEC(TROWEXPANDDIV, TileDataSrc1);
    TILEOPS_PTO_ROW_OPERAND(TROWEXPANDDIV, TileDataSrc1);
    TILEOPS_PTO_SAME(TROWEXPANDDIV, TileDataDst, TileDataSrc0);
    TILEOPS_PTO_DTYPES(TROWEXPANDDIV, TileDataDst, TILEOPS_PTO_EXPAND_TYPES);
    (void)dst;
    (void)src0;
    (void)src1;
    (void)tmp;
    TSYNC(events...);
    return {};
}
template <auto PrecisionType = DivAlgorithm::DEFAULT, typename TileDataDst, typename TileDataSrc0,
    typename TileDataSrc1, typename... WaitEvents>
PTO_INST RecordEvent TCOLEXPANDDIV(TileDataDst& dst, TileDataSrc0& src0, TileDataSrc1& src1, WaitEvents&... events)
{
    TILEOPS_PTO_VEC(TCOLEXPANDDIV, TileDataDst);
    TILEOPS_PTO_VEC(TCOLEXPANDDIV, TileDataSrc0);
    TILEOPS_PTO_VEC(TCOLEXPANDDIV, TileDataSrc1);
    TILEOPS_PTO_SAME(TCOLEXPANDDIV, TileDataDst, TileDataSrc0);
    TILEOPS_PTO_DTYPES(TCOLEXPANDDIV, TileDataDst, TILEOPS_PTO_EXPAND_TYPES);
    (void)dst;
    (void)src0;
    (void)src1;
    TSYNC(events...);
    return {};
}

// Conversions. RoundMode is a runtime argument; NeedSetCtrl is the first template parameter.
// The conversions A5 implements (one castData overload per pair in a5/TCvt.hpp; the A5 column of
// "Supported Conversions" in docs/isa/TCVT.md). Not on A5: int32 -> half, half -> bfloat16,
// float -> 8-bit integers, same-type copies other than float -> float.
namespace detail {
template <typename D, typename S>
constexpr bool a5_cvt_v =
    (std::is_same_v<S, float> &&
        is_one_of_v<D, float, half, bfloat16_t, int16_t, int32_t, int64_t, float8_e4m3_t, float8_e5m2_t, hifloat8_t>) ||
    (std::is_same_v<S, half> && is_one_of_v<D, float, int32_t, int16_t, int8_t, uint8_t, hifloat8_t>) ||
    (std::is_same_v<S, bfloat16_t> && is_one_of_v<D, float, int32_t, half>) ||
    (std::is_same_v<S, int16_t> && is_one_of_v<D, uint8_t, half, float, uint32_t, int32_t>) ||
    (std::is_same_v<S, int32_t> && is_one_of_v<D, float, int16_t, uint16_t, int64_t, uint8_t>) ||
    (std::is_same_v<S, int64_t> && is_one_of_v<D, float, int32_t>) ||
    (std::is_same_v<S, uint8_t> && is_one_of_v<D, half, uint16_t>) ||
    (std::is_same_v<S, int8_t> && is_one_of_v<D, half, int16_t, int32_t>) ||
    (std::is_same_v<S, uint32_t> && is_one_of_v<D, uint8_t, uint16_t, int16_t>) ||
    (is_one_of_v<S, float8_e4m3_t, float8_e5m2_t, hifloat8_t> && std::is_same_v<D, float>);
} // namespace detail
#define TILEOPS_PTO_CVT(D, S)                                                                   \
    static_assert(detail::a5_cvt_v<typename D::DType, typename S::DType>,                      \
        "PTO: TCVT does not implement this source -> destination element type pair on A5 "      \
        "(see docs/isa/TCVT.md, Supported Conversions)")
template <bool NeedSetCtrl = true, typename TileDataD, typename TileDataS, typename TmpTileData,
    typename... WaitEvents>
PTO_INST RecordEvent TCVT(
    TileDataD& dst, TileDataS& src, TmpTileData& tmp, RoundMode mode, SaturationMode satMode, WaitEvents&... events)
{
    TILEOPS_PTO_VEC(TCVT, TileDataD);
    TILEOPS_PTO_VEC(TCVT, TileDataS);
    TILEOPS_PTO_CVT(TileDataD, TileDataS);
    (void)dst;
    (void)src;
    (void)tmp;
    (void)mode;
    (void)satMode;
    TSYNC(events...);
    return {};
}
template <bool NeedSetCtrl = true, typename TileDataD, typename TileDataS, typename TmpTileData,
    typename... WaitEvents>
PTO_INST RecordEvent TCVT(TileDataD& dst, TileDataS& src, TmpTileData& tmp, RoundMode mode, WaitEvents&... events)
{
    TILEOPS_PTO_VEC(TCVT, TileDataD);
    TILEOPS_PTO_VEC(TCVT, TileDataS);
    TILEOPS_PTO_CVT(TileDataD, TileDataS);
    (void)dst;
    (void)src;
    (void)tmp;
    (void)mode;
    TSYNC(events...);
    return {};
}
template <bool NeedSetCtrl = true, typename TileDataD, typename TileDataS, typename... WaitEvents>
PTO_INST RecordEvent TCVT(
    TileDataD& dst, TileDataS& src, RoundMode mode, SaturationMode satMode, WaitEvents&... events)
{
    TILEOPS_PTO_VEC(TCVT, TileDataD);
    TILEOPS_PTO_VEC(TCVT, TileDataS);
    TILEOPS_PTO_CVT(TileDataD, TileDataS);
    (void)dst;
    (void)src;
    (void)mode;
    (void)satMode;
    TSYNC(events...);
    return {};
}
template <bool NeedSetCtrl = true, typename TileDataD, typename TileDataS, typename... WaitEvents>
PTO_INST RecordEvent TCVT(TileDataD& dst, TileDataS& src, RoundMode mode, WaitEvents&... events)
{
    TILEOPS_PTO_VEC(TCVT, TileDataD);
    TILEOPS_PTO_VEC(TCVT, TileDataS);
    TILEOPS_PTO_CVT(TileDataD, TileDataS);
    (void)dst;
    (void)src;
    (void)mode;
    TSYNC(events...);
    return {};
}

// Fill the invalid region with the destination tile's PadVal (a template parameter of the Tile).
template <typename TileData, PadValue PadVal = PadValue::Zero, std::enable_if_t<(TileData::Loc == TileType::Mat), int> = 0,
    typename... WaitEvents>
PTO_INST RecordEvent TFILLPAD(TileData& dst, TileData& src, WaitEvents&... events)
{
    static_assert(detail::is_nz_v<TileData>, "PTO: TFILLPAD on a Mat tile supports only NZ");
    (void)dst;
    (void)src;
    TSYNC(events...);
    return {};
}
template <TFillPadMode mode = TFillPadMode::Normal, typename DstTileData, typename SrcTileData,
    std::enable_if_t<(DstTileData::Loc == TileType::Vec) && (SrcTileData::Loc == TileType::Vec), int> = 0,
    typename... WaitEvents>
PTO_INST RecordEvent TFILLPAD(DstTileData& dst, SrcTileData& src, WaitEvents&... events)
{
    static_assert(DstTileData::PadVal != PadValue::Null,
        "PTO: TFILLPAD destination Vec tile needs a PadVal other than PadValue::Null");
    static_assert(sizeof(typename DstTileData::DType) == sizeof(typename SrcTileData::DType),
        "PTO: TFILLPAD src and dst element sizes must match");
    static_assert(DstTileData::Rows >= SrcTileData::Rows && DstTileData::Cols >= SrcTileData::Cols,
        "PTO: TFILLPAD destination must not be smaller than the source");
    (void)dst;
    (void)src;
    TSYNC(events...);
    return {};
}
template <typename DstTileData, typename SrcTileData, typename... WaitEvents>
PTO_INST RecordEvent TFILLPAD_INPLACE(DstTileData& dst, SrcTileData& src, WaitEvents&... events)
{
    static_assert(DstTileData::PadVal != PadValue::Null,
        "PTO: TFILLPAD destination Vec tile needs a PadVal other than PadValue::Null");
    (void)dst;
    (void)src;
    TSYNC(events...);
    return {};
}

// Zero-copy re-declaration of a tile's bytes with another type/shape/layout (same TileType).
template <typename TileDataOut, typename TileDataIn, typename... WaitEvents>
PTO_INST RecordEvent TRESHAPE(TileDataOut& dst, TileDataIn& src, WaitEvents&... events)
{
    static_assert(is_tile_data_v<TileDataOut> && is_tile_data_v<TileDataIn>, "PTO: TRESHAPE operands must be Tiles");
    static_assert(TileDataOut::Loc == TileDataIn::Loc, "PTO: TRESHAPE keeps the TileType");
    static_assert(TileDataOut::Bytes <= TileDataIn::Bytes, "PTO: TRESHAPE result must not be larger than its source");
    (void)dst;
    (void)src;
    TSYNC(events...);
    return {};
}

// ---- Sort instructions (a5/TSort32.hpp CheckStatic, a5/TMrgSort.hpp CheckStatic; docs/isa/TSORT32.md,
// TMRGSORT.md): Vec, row-major, half or float values, u32 indices; TMRGSORT's tiles are one row. ----
namespace detail {
template <typename Dst, typename Src>
constexpr void sort_values_check()
{
    TILEOPS_PTO_VEC(TSORT32_TMRGSORT, Dst);
    TILEOPS_PTO_VEC(TSORT32_TMRGSORT, Src);
    static_assert(Dst::isRowMajor && Src::isRowMajor, "PTO: the sort instructions take row-major tiles only");
    static_assert(std::is_same_v<typename Dst::DType, typename Src::DType>,
        "PTO: the sort instructions require equal value element types");
    static_assert(is_one_of_v<typename Dst::DType, half, float>,
        "PTO: the sort instructions sort half or float values only");
}
template <typename T>
constexpr void mrgsort_row_check()
{
    static_assert(T::Rows == 1, "PTO: TMRGSORT tiles must have one row");
}
// The multi-list form: dst, tmp and every list share the value type, one row each.
template <typename Dst, typename Tmp, typename... Srcs>
constexpr void mrgsort_lists_check()
{
    sort_values_check<Dst, Tmp>();
    (sort_values_check<Dst, Srcs>(), ...);
    mrgsort_row_check<Dst>();
    mrgsort_row_check<Tmp>();
    (mrgsort_row_check<Srcs>(), ...);
}
} // namespace detail

// Elements consumed from each list by an exhausted-mode TMRGSORT (read from VMS4_SR).
struct MrgSortExecutedNumList {
    uint16_t mrgSortList0;
    uint16_t mrgSortList1;
    uint16_t mrgSortList2;
    uint16_t mrgSortList3;
};

template <typename DstTileData, typename SrcTileData, typename IdxTileData>
PTO_INST RecordEvent TSORT32(DstTileData& dst, SrcTileData& src, IdxTileData& idx)
{
    detail::sort_values_check<DstTileData, SrcTileData>();
    TILEOPS_PTO_VEC(TSORT32, IdxTileData);
    static_assert(IdxTileData::isRowMajor, "PTO: the sort instructions take row-major tiles only");
    static_assert(std::is_same_v<typename IdxTileData::DType, uint32_t>, "PTO: TSORT32 indices must be uint32_t");
    (void)dst;
    (void)src;
    (void)idx;
    return {};
}
template <typename DstTileData, typename SrcTileData, typename IdxTileData, typename TmpTileData>
PTO_INST RecordEvent TSORT32(DstTileData& dst, SrcTileData& src, IdxTileData& idx, TmpTileData& tmp)
{
    detail::sort_values_check<DstTileData, SrcTileData>();
    detail::sort_values_check<TmpTileData, SrcTileData>();
    TILEOPS_PTO_VEC(TSORT32, IdxTileData);
    static_assert(IdxTileData::isRowMajor, "PTO: the sort instructions take row-major tiles only");
    static_assert(std::is_same_v<typename IdxTileData::DType, uint32_t>, "PTO: TSORT32 indices must be uint32_t");
    (void)dst;
    (void)src;
    (void)idx;
    (void)tmp;
    return {};
}

template <typename DstTileData, typename SrcTileData, typename... WaitEvents>
PTO_INST RecordEvent TMRGSORT(DstTileData& dst, SrcTileData& src, uint32_t blockLen, WaitEvents&... events)
{
    detail::sort_values_check<DstTileData, SrcTileData>();
    detail::mrgsort_row_check<DstTileData>();
    detail::mrgsort_row_check<SrcTileData>();
    (void)dst;
    (void)src;
    (void)blockLen;
    TSYNC(events...);
    return {};
}
template <typename DstTileData, typename TmpTileData, typename Src0TileData, typename Src1TileData,
    typename Src2TileData, typename Src3TileData, bool exhausted, typename... WaitEvents>
PTO_INST RecordEvent TMRGSORT(DstTileData& dst, MrgSortExecutedNumList& executedNumList, TmpTileData& tmp,
    Src0TileData& src0, Src1TileData& src1, Src2TileData& src2, Src3TileData& src3, WaitEvents&... events)
{
    detail::mrgsort_lists_check<DstTileData, TmpTileData, Src0TileData, Src1TileData, Src2TileData, Src3TileData>();
    (void)dst;
    (void)executedNumList;
    (void)tmp;
    (void)src0;
    (void)src1;
    (void)src2;
    (void)src3;
    TSYNC(events...);
    return {};
}
template <typename DstTileData, typename TmpTileData, typename Src0TileData, typename Src1TileData,
    typename Src2TileData, bool exhausted, typename... WaitEvents>
PTO_INST RecordEvent TMRGSORT(DstTileData& dst, MrgSortExecutedNumList& executedNumList, TmpTileData& tmp,
    Src0TileData& src0, Src1TileData& src1, Src2TileData& src2, WaitEvents&... events)
{
    detail::mrgsort_lists_check<DstTileData, TmpTileData, Src0TileData, Src1TileData, Src2TileData>();
    (void)dst;
    (void)executedNumList;
    (void)tmp;
    (void)src0;
    (void)src1;
    (void)src2;
    TSYNC(events...);
    return {};
}
template <typename DstTileData, typename TmpTileData, typename Src0TileData, typename Src1TileData, bool exhausted,
    typename... WaitEvents>
PTO_INST RecordEvent TMRGSORT(DstTileData& dst, MrgSortExecutedNumList& executedNumList, TmpTileData& tmp,
    Src0TileData& src0, Src1TileData& src1, WaitEvents&... events)
{
    detail::mrgsort_lists_check<DstTileData, TmpTileData, Src0TileData, Src1TileData>();
    (void)dst;
    (void)executedNumList;
    (void)tmp;
    (void)src0;
    (void)src1;
    TSYNC(events...);
    return {};
}

#undef TILEOPS_PTO_VEC
#undef TILEOPS_PTO_SAME
#undef TILEOPS_PTO_STR
#undef TILEOPS_PTO_DTYPES
#undef TILEOPS_PTO_CVT
#undef TILEOPS_PTO_ARITH_TYPES
#undef TILEOPS_PTO_MUL_TYPES
#undef TILEOPS_PTO_DIV_TYPES
#undef TILEOPS_PTO_EXPAND_TYPES

} // namespace pto

#endif // TILEOPS_PTO_INST_HPP
