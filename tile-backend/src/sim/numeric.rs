//! Element encodings: decoding stored bytes to f32 (or i64) scratch and encoding back with the
//! machine's rounding (nearest even for float narrowing) and saturation rules.

use crate::ir::DType;
use half::{bf16, f16};

/// Decodes `n` elements of `dtype` from `bytes` into `out` as f32.
///
/// Integers convert exactly where f32 can hold them (int32 beyond 2^24 rounds). The dtype is
/// matched once; each arm is a plain loop the compiler vectorises. The float arms are inlined
/// into the caller (ops decode many short runs); the others are out of line.
#[inline(always)]
pub fn decode_f32(dtype: DType, bytes: &[u8], out: &mut [f32]) {
    // Whole elements seen as native integers when the bytes are aligned for them (always, for
    // buffers the simulator allocates): plain loops the compiler vectorises. The byte-wise loops
    // below are the fallback, with the same results.
    #[cfg(target_endian = "little")]
    match dtype {
        DType::F32 => {
            if let Ok(v) = bytemuck::try_cast_slice::<u8, f32>(bytes_of_whole(bytes, 4)) {
                let n = v.len().min(out.len());
                out[..n].copy_from_slice(&v[..n]);
                return;
            }
        }
        DType::F16 | DType::BF16 => {
            if let Ok(v) = bytemuck::try_cast_slice::<u8, u16>(bytes_of_whole(bytes, 2)) {
                if dtype == DType::BF16 {
                    for (o, h) in out.iter_mut().zip(v) {
                        *o = f32::from_bits((*h as u32) << 16);
                    }
                } else {
                    for (o, h) in out.iter_mut().zip(v) {
                        *o = f16_to_f32(*h);
                    }
                }
                return;
            }
        }
        _ => {}
    }
    match dtype {
        DType::F32 => {
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        DType::F16 => {
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
            }
        }
        DType::BF16 => {
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = f32::from_bits((u16::from_le_bytes([b[0], b[1]]) as u32) << 16);
            }
        }
        _ => decode_f32_other(dtype, bytes, out),
    }
}

/// Copies `lines` lines of `width` elements from `src` (lines `src_line` apart) to `dst` (lines
/// `dst_line` apart). Lines of 8, 16, 32 and 64 elements (an f32 box row is 8 f32s or 32 bytes,
/// a bf16-width row 16 f32s or 64 bytes) are fixed-size moves: a `memcpy` call per 32-byte line
/// costs more than the bytes.
pub(crate) fn copy_lines<T: Copy>(
    dst: &mut [T],
    dst_line: usize,
    src: &[T],
    src_line: usize,
    (lines, width): (usize, usize),
) {
    // One loop per width, so each is a loop of fixed-size moves (copy_fixed takes the
    // `copy_from_slice` path for any other width).
    let lines_of = (dst, dst_line, src, src_line, lines, width);
    match width {
        8 => lines_fixed::<8, T>(lines_of),
        16 => lines_fixed::<16, T>(lines_of),
        32 => lines_fixed::<32, T>(lines_of),
        64 => lines_fixed::<64, T>(lines_of),
        _ => lines_fixed::<0, T>(lines_of),
    }
}

/// [`copy_lines`]'s arguments: dst, its line step, src, its line step, lines, width.
type Lines<'a, T> = (&'a mut [T], usize, &'a [T], usize, usize, usize);

/// The lines of [`copy_lines`] as [`copy_fixed`] moves of `N` elements (`N` = 0: any width).
#[inline(always)]
fn lines_fixed<const N: usize, T: Copy>(
    (dst, dst_line, src, src_line, lines, width): Lines<'_, T>,
) {
    for i in 0..lines {
        let (d, s) = (i * dst_line, i * src_line);
        copy_fixed::<N, _>(&mut dst[d..d + width], &src[s..s + width]);
    }
}

/// `dst.copy_from_slice(src)`, as a fixed-size move when both hold `N` elements (a fractal row
/// is 32 bytes, 8 or 16 f32s; [`copy_lines`] also uses 32- and 64-element lines) instead of a
/// `memcpy` call; other lengths take `copy_from_slice`.
#[inline(always)]
pub(crate) fn copy_fixed<const N: usize, T: Copy>(dst: &mut [T], src: &[T]) {
    if let (Ok(d), Ok(s)) = (<&mut [T; N]>::try_from(&mut *dst), <&[T; N]>::try_from(src)) {
        *d = *s;
        return;
    }
    dst.copy_from_slice(src);
}

/// Decodes `lines` lines of `width` elements, line `i` starting `i * stride` elements into
/// `bytes`, into `out` with line `i` at `i * out_line`: one dtype dispatch for a whole strip.
pub fn decode_f32_lines(
    dtype: DType,
    bytes: &[u8],
    (lines, width, stride): (usize, usize, usize),
    out: &mut [f32],
    out_line: usize,
) {
    let es = dtype.size_bytes() as usize;
    #[cfg(target_endian = "little")]
    match dtype {
        DType::F32 => {
            if let Ok(v) = bytemuck::try_cast_slice::<u8, f32>(bytes_of_whole(bytes, 4)) {
                copy_lines(out, out_line, v, stride, (lines, width));
                return;
            }
        }
        DType::BF16 | DType::F16 => {
            if let Ok(v) = bytemuck::try_cast_slice::<u8, u16>(bytes_of_whole(bytes, 2)) {
                for i in 0..lines {
                    let src = &v[i * stride..i * stride + width];
                    let dst = &mut out[i * out_line..i * out_line + width];
                    if dtype == DType::BF16 {
                        for (o, h) in dst.iter_mut().zip(src) {
                            *o = f32::from_bits((*h as u32) << 16);
                        }
                    } else {
                        for (o, h) in dst.iter_mut().zip(src) {
                            *o = f16_to_f32(*h);
                        }
                    }
                }
                return;
            }
        }
        _ => {}
    }
    for i in 0..lines {
        let b = i * stride * es;
        decode_f32(
            dtype,
            &bytes[b..b + width * es],
            &mut out[i * out_line..i * out_line + width],
        );
    }
}

/// Encodes `lines` lines of `width` values (line `i` at `i * src_line` of `src`) into `bytes`,
/// line `i` starting `i * stride` elements in: the inverse of [`decode_f32_lines`].
pub fn encode_f32_lines(
    dtype: DType,
    src: &[f32],
    src_line: usize,
    bytes: &mut [u8],
    (lines, width, stride): (usize, usize, usize),
) {
    let es = dtype.size_bytes() as usize;
    #[cfg(target_endian = "little")]
    {
        let whole = bytes.len() / es * es;
        match dtype {
            DType::F32 => {
                if let Ok(v) = bytemuck::try_cast_slice_mut::<u8, f32>(&mut bytes[..whole]) {
                    copy_lines(v, stride, src, src_line, (lines, width));
                    return;
                }
            }
            DType::BF16 => {
                if let Ok(v) = bytemuck::try_cast_slice_mut::<u8, u16>(&mut bytes[..whole]) {
                    for i in 0..lines {
                        let dst = &mut v[i * stride..i * stride + width];
                        for (h, x) in dst.iter_mut().zip(&src[i * src_line..i * src_line + width]) {
                            *h = f32_to_bf16_bits(*x);
                        }
                    }
                    return;
                }
            }
            _ => {}
        }
    }
    for i in 0..lines {
        let b = i * stride * es;
        encode_f32(
            dtype,
            &src[i * src_line..i * src_line + width],
            &mut bytes[b..b + width * es],
        );
    }
}

/// The leading whole `es`-byte elements of `bytes`.
#[cfg(target_endian = "little")]
fn bytes_of_whole(bytes: &[u8], es: usize) -> &[u8] {
    &bytes[..bytes.len() / es * es]
}

/// [`decode_f32`] for the integer and fp8 dtypes.
#[inline(never)]
fn decode_f32_other(dtype: DType, bytes: &[u8], out: &mut [f32]) {
    match dtype {
        DType::I8 => {
            for (o, b) in out.iter_mut().zip(bytes) {
                *o = *b as i8 as f32;
            }
        }
        DType::U8 => {
            for (o, b) in out.iter_mut().zip(bytes) {
                *o = *b as f32;
            }
        }
        DType::I32 => {
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *o = i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f32;
            }
        }
        DType::F8E4M3 => {
            for (o, b) in out.iter_mut().zip(bytes) {
                *o = E4M3_VALUES[usize::from(*b)];
            }
        }
        _ => {
            let es = dtype.size_bytes() as usize;
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(es)) {
                *o = decode_one(dtype, b);
            }
        }
    }
}

/// f16 bits to f32, exactly as `half::f16::to_f32` (a NaN keeps its payload and becomes
/// quiet), written branch-free so that whole-slice loops vectorise.
#[inline(always)]
pub fn f16_to_f32(h: u16) -> f32 {
    let h = h as u32;
    let sign = (h & 0x8000) << 16;
    let em = h & 0x7fff;
    // Exponent and mantissa moved into place, exponent rebiased (15 -> 127).
    let o = (em << 13) + ((127 - 15) << 23);
    let exp = em & 0x7c00;
    // Inf / NaN: all exponent bits; a NaN also gets the quiet bit.
    let inf_nan = (o + ((128 - 16) << 23)) | if em > 0x7c00 { 0x0040_0000 } else { 0 };
    // Zero / subnormal: let an f32 subtraction normalise (exact).
    let sub = (f32::from_bits(o + (1 << 23)) - f32::from_bits(113 << 23)).to_bits();
    let r = if exp == 0x7c00 {
        inf_nan
    } else if exp == 0 {
        sub
    } else {
        o
    };
    f32::from_bits(r | sign)
}

/// f32 to f16 bits, round to nearest even, exactly as `half::f16::from_f32` (overflow to
/// infinity; a NaN keeps the top of its payload and becomes quiet), written branch-free so that
/// whole-slice loops vectorise.
#[inline(always)]
pub fn f32_to_f16(v: f32) -> u16 {
    let x = v.to_bits();
    let sign = ((x >> 16) & 0x8000) as u16;
    let a = x & 0x7fff_ffff;
    // Inf or NaN (from 2^16 up: the f16 exponent would overflow).
    let big = if a > 0x7f80_0000 {
        0x7e00 | ((a >> 13) & 0x3ff) as u16
    } else {
        0x7c00
    };
    // Subnormal or zero: adding 0.5 aligns the 10 mantissa bits at the bottom, rounding to
    // nearest even in the f32 addition.
    let sub = (f32::from_bits(a) + 0.5)
        .to_bits()
        .wrapping_sub(0x3f00_0000) as u16;
    // Normal: rebias (127 -> 15) and round to nearest even on the 13 dropped bits (a carry
    // into the exponent rounds up to the next binade or to infinity).
    let odd = (a >> 13) & 1;
    let norm = (a
        .wrapping_add(((15u32.wrapping_sub(127)) << 23).wrapping_add(0xfff))
        .wrapping_add(odd)
        >> 13) as u16;
    let r = if a >= 0x4780_0000 {
        big
    } else if a < 0x3880_0000 {
        sub
    } else {
        norm
    };
    r | sign
}

/// Decodes one element.
#[inline]
pub fn decode_one(dtype: DType, b: &[u8]) -> f32 {
    match dtype {
        DType::F32 => f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        DType::F16 => f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32(),
        DType::BF16 => bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32(),
        DType::I8 => b[0] as i8 as f32,
        DType::U8 => b[0] as f32,
        DType::I32 => i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f32,
        DType::U32 => u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f32,
        DType::I64 => i64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8])) as f32,
        DType::U64 => u64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8])) as f32,
        DType::F8E4M3 => fp8_e4m3_to_f32(b[0]),
        DType::F8E5M2 => fp8_e5m2_to_f32(b[0]),
    }
}

/// Decodes an integer element exactly (floats truncate toward zero).
#[inline]
pub fn decode_i64(dtype: DType, b: &[u8]) -> i64 {
    match dtype {
        DType::I8 => b[0] as i8 as i64,
        DType::U8 => b[0] as i64,
        DType::I32 => i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as i64,
        DType::U32 => u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as i64,
        DType::I64 => i64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8])),
        DType::U64 => u64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8])) as i64,
        _ => decode_one(dtype, b) as i64,
    }
}

/// `e^x` in f32, the simulator's model of the vector unit's exponential: within 2 units in the
/// last place of the correctly rounded value over the whole range (subnormal results included),
/// `exp(-inf) = 0`, `exp(+inf) = +inf`, NaN stays NaN. Written without branches or library calls
/// (range reduction by ln 2 in two parts, a degree-7 polynomial, the power of two built in the
/// exponent bits, in two steps so that subnormal results round once) so loops over it vectorise.
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 = LN2_HI + LN2_LO, LN2_HI with 8 low mantissa bits clear (n * LN2_HI is exact).
    const LN2_HI: f32 = f32::from_bits(0x3f31_7200);
    const LN2_LO: f32 = f32::from_bits(0x35bf_be8e);
    // Rounds to the nearest integer (ties to even) for |v| < 2^22 without SSE4.1.
    const ROUND: f32 = 12_582_912.0;
    // Below -105 the result rounds to 0, above 89 to infinity; NaN passes through the clamp.
    let xc = x.clamp(-105.0, 89.0);
    // At the clamp's floor (masked scores are -inf) the result is +0, but computing it
    // underflows, which x86 cores finish in a microcode assist about 15 times slower than the
    // lane's arithmetic: those lanes compute e^0 instead and select +0 at the end (the same
    // bits for every f32 input, checked over all 2^32 of them when this was written).
    let dead = xc <= -105.0;
    let xc = if dead { 0.0 } else { xc };
    let shifted = xc * LOG2E + ROUND;
    let n = shifted - ROUND;
    let r = (xc - n * LN2_HI) - n * LN2_LO;
    // e^r for |r| <= ln 2 / 2: the Taylor polynomial of degree 7 (truncation below 6e-9).
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0
                    + r * (1.0 / 24.0
                        + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    // 2^n = 2^n1 * 2^n2 with both factors normal (n is in -152 ..= 129).
    // `shifted` lies in [2^23, 2^24), where the spacing is 1, so its bits minus ROUND's bits are
    // the integer n (the same value as `n as i32`, without a per-lane float-to-int conversion).
    // A NaN input gives a NaN p, and NaN times any power of two stays NaN.
    let ni = (shifted.to_bits() as i32).wrapping_sub(ROUND.to_bits() as i32);
    let n1 = ni >> 1;
    let n2 = ni.wrapping_sub(n1);
    let pow2 = |k: i32| f32::from_bits((k.wrapping_add(127) as u32) << 23);
    let r = p * pow2(n1) * pow2(n2);
    if dead {
        0.0
    } else {
        r
    }
}

/// [`exp_f32`] over a slice in place, element by element: the same bits as `exp_f32` one by
/// one, run as wide as the host level allows (`sim::host::exp`).
pub fn exp_f32_in_place(x: &mut [f32]) {
    crate::sim::host::exp::exp_in_place(x);
}

/// The bf16 bits of `x` rounded to nearest even (overflow to infinity; a NaN stays a NaN with
/// its top payload bits and the quiet bit set): the same bits as `half::bf16::from_f32`, written
/// without branches so that loops over it vectorise.
#[inline(always)]
pub fn f32_to_bf16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    let rounded = b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16;
    let nan = (b >> 16) | 0x0040;
    (if b & 0x7fff_ffff > 0x7f80_0000 {
        nan
    } else {
        rounded
    }) as u16
}

/// Encodes one f32 value as `dtype`: floats round to nearest even (IEEE overflow to inf);
/// integers round to nearest even and saturate.
#[inline]
pub fn encode_one(dtype: DType, v: f32, out: &mut [u8]) {
    match dtype {
        DType::F32 => out[..4].copy_from_slice(&v.to_le_bytes()),
        DType::F16 => out[..2].copy_from_slice(&f16::from_f32(v).to_bits().to_le_bytes()),
        DType::BF16 => out[..2].copy_from_slice(&f32_to_bf16_bits(v).to_le_bytes()),
        DType::I8 => out[0] = sat_round(v, -128.0, 127.0) as i8 as u8,
        DType::U8 => out[0] = sat_round(v, 0.0, 255.0) as u8,
        DType::I32 => out[..4].copy_from_slice(
            &(sat_round(v, i32::MIN as f32, i32::MAX as f32) as i32).to_le_bytes(),
        ),
        DType::U32 => {
            out[..4].copy_from_slice(&(sat_round(v, 0.0, u32::MAX as f32) as u32).to_le_bytes())
        }
        DType::I64 => out[..8].copy_from_slice(&(v.round_ties_even() as i64).to_le_bytes()),
        DType::U64 => {
            out[..8].copy_from_slice(&(v.max(0.0).round_ties_even() as u64).to_le_bytes())
        }
        DType::F8E4M3 => out[0] = f32_to_fp8_e4m3(v),
        DType::F8E5M2 => out[0] = f32_to_fp8_e5m2(v),
    }
}

/// Encodes an integer value as `dtype` (integers saturate; floats convert).
#[inline]
pub fn encode_i64(dtype: DType, v: i64, out: &mut [u8]) {
    match dtype {
        DType::I8 => out[0] = v.clamp(-128, 127) as i8 as u8,
        DType::U8 => out[0] = v.clamp(0, 255) as u8,
        DType::I32 => out[..4]
            .copy_from_slice(&(v.clamp(i32::MIN as i64, i32::MAX as i64) as i32).to_le_bytes()),
        DType::U32 => out[..4].copy_from_slice(&(v.clamp(0, u32::MAX as i64) as u32).to_le_bytes()),
        DType::I64 => out[..8].copy_from_slice(&v.to_le_bytes()),
        DType::U64 => out[..8].copy_from_slice(&(v.max(0) as u64).to_le_bytes()),
        _ => encode_one(dtype, v as f32, out),
    }
}

/// Encodes `src` as `dtype` into `bytes` (the dtype is matched once per call; the float arms
/// are inlined into the caller).
#[inline(always)]
pub fn encode_f32(dtype: DType, src: &[f32], bytes: &mut [u8]) {
    // As in `decode_f32`: aligned whole elements as native integers, byte-wise loops otherwise.
    #[cfg(target_endian = "little")]
    match dtype {
        DType::F32 => {
            let whole = bytes.len() / 4 * 4;
            if let Ok(v) = bytemuck::try_cast_slice_mut::<u8, f32>(&mut bytes[..whole]) {
                let n = v.len().min(src.len());
                v[..n].copy_from_slice(&src[..n]);
                return;
            }
        }
        DType::BF16 => {
            let whole = bytes.len() / 2 * 2;
            if let Ok(v) = bytemuck::try_cast_slice_mut::<u8, u16>(&mut bytes[..whole]) {
                for (h, x) in v.iter_mut().zip(src) {
                    *h = f32_to_bf16_bits(*x);
                }
                return;
            }
        }
        _ => {}
    }
    match dtype {
        DType::F32 => {
            for (v, b) in src.iter().zip(bytes.chunks_exact_mut(4)) {
                b.copy_from_slice(&v.to_le_bytes());
            }
        }
        DType::F16 => {
            for (v, b) in src.iter().zip(bytes.chunks_exact_mut(2)) {
                b.copy_from_slice(&f32_to_f16(*v).to_le_bytes());
            }
        }
        DType::BF16 => {
            for (v, b) in src.iter().zip(bytes.chunks_exact_mut(2)) {
                b.copy_from_slice(&f32_to_bf16_bits(*v).to_le_bytes());
            }
        }
        _ => encode_f32_other(dtype, src, bytes),
    }
}

/// [`encode_f32`] for the integer and fp8 dtypes.
#[inline(never)]
fn encode_f32_other(dtype: DType, src: &[f32], bytes: &mut [u8]) {
    let es = dtype.size_bytes() as usize;
    for (v, b) in src.iter().zip(bytes.chunks_exact_mut(es)) {
        encode_one(dtype, *v, b);
    }
}

/// Round half to even, then clamp to `[lo, hi]`; NaN becomes 0.
#[inline]
pub fn sat_round(v: f32, lo: f32, hi: f32) -> f32 {
    if v.is_nan() {
        0.0
    } else {
        v.round_ties_even().clamp(lo, hi)
    }
}

/// Rounds an f32 to f16 precision and back (one rounding, nearest even).
#[inline]
pub fn round_to(dtype: DType, v: f32) -> f32 {
    match dtype {
        DType::F16 => f16::from_f32(v).to_f32(),
        DType::BF16 => bf16::from_f32(v).to_f32(),
        DType::F8E4M3 => fp8_e4m3_to_f32(f32_to_fp8_e4m3(v)),
        DType::F8E5M2 => fp8_e5m2_to_f32(f32_to_fp8_e5m2(v)),
        _ => v,
    }
}

/// OCP fp8 e4m3 (no infinities; 0x7f/0xff NaN; max 448) to f32.
pub fn fp8_e4m3_to_f32(b: u8) -> f32 {
    E4M3_VALUES[usize::from(b)]
}

/// Every e4m3 code's f32 value ([`e4m3_bits`] at compile time), the decode's lookup table.
static E4M3_VALUES: [f32; 256] = {
    let mut t = [0f32; 256];
    let mut c = 0;
    while c < 256 {
        t[c] = f32::from_bits(e4m3_bits(c as u8));
        c += 1;
    }
    t
};

/// The f32 bits of e4m3 code `b`, exactly: sign, 4 exponent bits (bias 7), 3 mantissa bits;
/// exponent 0 holds the subnormals `m * 2^-9`; `S.1111.111` is NaN (no infinities).
const fn e4m3_bits(b: u8) -> u32 {
    let sign = ((b as u32) >> 7) << 31;
    let e = ((b >> 3) & 0xf) as u32;
    let m = (b & 7) as u32;
    if e == 0xf && m == 7 {
        return sign | 0x7fc0_0000;
    }
    if e != 0 {
        // (1 + m / 8) * 2^(e - 7): f32 exponent e - 7 + 127, mantissa m in its top 3 bits.
        return sign | ((e + 120) << 23) | (m << 20);
    }
    if m == 0 {
        return sign;
    }
    // m * 2^-9 with m's leading bit at p (0..=2): 2^(p - 9) * (m / 2^p).
    let p = 31 - m.leading_zeros();
    sign | ((p + 118) << 23) | ((m << (23 - p)) & 0x7f_ffff)
}

/// OCP fp8 e5m2 (IEEE-like, max 57344) to f32.
pub fn fp8_e5m2_to_f32(b: u8) -> f32 {
    // e5m2 is the top byte of an f16.
    f16::from_bits((b as u16) << 8).to_f32()
}

/// f32 to fp8 e4m3 (OCP), nearest even, saturating to +-448 (from 448 up: (448, 464] rounds to
/// 448 anyway; infinities too); NaN gives the NaN code with its sign (0x7f / 0xff); below 2^-10
/// gives a signed zero. The same bits as the `float8` crate's `F8E4M3::from_f32` (candle's FP8)
/// for every f32 (tested).
pub fn f32_to_fp8_e4m3(v: f32) -> u8 {
    f32_to_fp8(v, 3, 7, 448.0, 0x7e)
}

/// f32 to fp8 e5m2 (OCP), nearest even in one rounding, saturating to +-57344 (from 61440 up,
/// infinities too, as candle's `float8` does); NaN gives a NaN code with its sign; below 2^-17 a
/// signed zero. The same bits as `float8`'s `F8E5M2::from_f32` for every non-NaN f32 (tested).
pub fn f32_to_fp8_e5m2(v: f32) -> u8 {
    f32_to_fp8(v, 2, 15, 61440.0, 0x7b)
}

/// f32 to an fp8 format of `mbits` mantissa bits and exponent `bias`: nearest even in one
/// rounding; `saturate_from` and up (infinities too) give `max_code`; NaN gives `0x7f` with the
/// sign.
fn f32_to_fp8(v: f32, mbits: u32, bias: u32, saturate_from: f32, max_code: u8) -> u8 {
    let bits = v.to_bits();
    let sign = ((bits >> 24) & 0x80) as u8;
    if v.is_nan() {
        return sign | 0x7f;
    }
    let a = v.abs();
    if a >= saturate_from {
        return sign | max_code;
    }
    let min_normal_exp = 1 - bias as i32;
    if a < 2f32.powi(min_normal_exp) {
        // Subnormal codes count steps of 2^(1 - bias - mbits) (2^mbits steps is the smallest
        // normal); the power-of-two scale is exact (of a value far above f32's subnormals, or
        // an f32 subnormal shifted left), so the rounding is the only one.
        let steps = a * 2f32.powi(mbits as i32 - min_normal_exp);
        return sign | steps.round_ties_even() as u8;
    }
    // Normal: the f32 exponent rebiased and `mbits` of the 23 mantissa bits, nearest even; a
    // carry out of the mantissa moves to the next exponent (never to the NaN or infinity codes:
    // `a` is below the saturation bound here).
    let exp = ((bits >> 23) & 0xff) + bias - 127;
    let drop = 23 - mbits;
    let mant = bits & 0x7f_ffff;
    let (keep, rest, half) = (mant >> drop, mant & ((1 << drop) - 1), 1 << (drop - 1));
    let up = rest > half || (rest == half && keep & 1 == 1);
    let code = ((exp << mbits) | keep) + u32::from(up);
    sign | code as u8
}

#[cfg(test)]
mod tests {
    /// The f32 inputs an fp8 encoder is held to: every finite code value `0..last` (decoded by
    /// `decode`) and every midpoint between neighbours (the last one `edge`, the saturation
    /// bound), each with the two f32 values either side, both signs; both zeros, f32 subnormals,
    /// `extra`; infinities, NaNs of both signs and two payloads; and a stride of 509 through all
    /// 2^32 bit patterns.
    fn fp8_probes(decode: fn(u8) -> f32, last: u8, edge: f32, extra: &[f32]) -> Vec<f32> {
        let next = |v: f32, d: i32| f32::from_bits((v.to_bits() as i64 + d as i64) as u32);
        let mut out = Vec::new();
        for code in 0..last {
            let c = decode(code);
            let mid = if code + 1 == last {
                edge
            } else {
                (c + decode(code + 1)) / 2.0
            };
            for v in [c, mid] {
                for d in [-2, -1, 0, 1, 2] {
                    if v == 0.0 && d < 0 {
                        continue;
                    }
                    out.extend([next(v, d), -next(v, d)]);
                }
            }
        }
        out.extend([
            0.0,
            -0.0,
            f32::MIN_POSITIVE,
            f32::from_bits(1),
            f32::MAX,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
            f32::from_bits(0x7fc0_0001),
            f32::from_bits(0xff80_0001),
        ]);
        out.extend_from_slice(extra);
        out.extend(
            (0..=u64::from(u32::MAX))
                .step_by(509)
                .map(|b| f32::from_bits(b as u32)),
        );
        out
    }

    /// `decode` equals `theirs` on all 256 codes (NaN codes decode to NaN on both).
    fn decodes_all_codes_alike(decode: fn(u8) -> f32, theirs: fn(u8) -> f32) {
        for code in 0..=255u8 {
            let (ours, theirs) = (decode(code), theirs(code));
            assert!(
                ours.to_bits() == theirs.to_bits() || (ours.is_nan() && theirs.is_nan()),
                "code {code:#04x}: {ours} vs {theirs}"
            );
        }
    }

    /// The e4m3 codec equals the `float8` crate's (candle's FP8) bit for bit: all 256 codes
    /// decode alike, and every probe of [`fp8_probes`] (the saturation edge 448 / 464 among
    /// them) encodes alike.
    #[test]
    fn e4m3_codec_matches_float8() {
        use super::{f32_to_fp8_e4m3, fp8_e4m3_to_f32};
        decodes_all_codes_alike(fp8_e4m3_to_f32, |c| float8::F8E4M3::from_bits(c).to_f32());
        let extra = [2f32.powi(-10), 2f32.powi(-9), 448.0, 464.0, 1e9];
        for v in fp8_probes(fp8_e4m3_to_f32, 0x7f, 464.0, &extra) {
            let (ours, theirs) = (f32_to_fp8_e4m3(v), float8::F8E4M3::from_f32(v).to_bits());
            assert_eq!(ours, theirs, "{v:e} ({:#010x})", v.to_bits());
        }
    }

    /// The e5m2 codec equals `float8`'s: all 256 codes decode alike, and every probe encodes
    /// alike (a NaN to a NaN code of its sign: the payloads differ).
    #[test]
    fn e5m2_codec_matches_float8() {
        use super::{f32_to_fp8_e5m2, fp8_e5m2_to_f32};
        decodes_all_codes_alike(fp8_e5m2_to_f32, |c| float8::F8E5M2::from_bits(c).to_f32());
        let extra = [2f32.powi(-17), 2f32.powi(-16), 57344.0, 61440.0];
        for v in fp8_probes(fp8_e5m2_to_f32, 0x7b, 61440.0, &extra) {
            let (ours, theirs) = (f32_to_fp8_e5m2(v), float8::F8E5M2::from_f32(v));
            if v.is_nan() {
                // float8's `F8E5M2::is_nan` knows only 0x7e / 0xfe: decode instead.
                let nan = fp8_e5m2_to_f32(ours).is_nan() && theirs.to_f32().is_nan();
                assert!(
                    nan && ours & 0x80 == theirs.to_bits() & 0x80,
                    "{:#010x}",
                    v.to_bits()
                );
            } else {
                assert_eq!(ours, theirs.to_bits(), "{v:e} ({:#010x})", v.to_bits());
            }
        }
    }

    /// Units in the last place between `got` and the correctly rounded `want`.
    fn ulps(got: f32, want: f64) -> u64 {
        let w = want as f32;
        let key = |v: f32| {
            let b = v.to_bits() as i64;
            if b < 0 {
                i64::MIN - b
            } else {
                b
            }
        };
        (key(got) - key(w)).unsigned_abs()
    }

    #[test]
    fn exp_is_within_two_ulps_everywhere_and_exact_at_the_edges() {
        use super::exp_f32;
        let mut worst = (0u64, 0f32);
        let mut x = -110.0f32;
        while x < 90.0 {
            for v in [x, x + 1.3e-3, x - 7.1e-4] {
                let u = ulps(exp_f32(v), (v as f64).exp());
                if u > worst.0 {
                    worst = (u, v);
                }
            }
            x += 1.7e-3;
        }
        // Small arguments, where e^x is near 1.
        for i in -20_000..20_000 {
            let v = i as f32 * 1e-7;
            let u = ulps(exp_f32(v), (v as f64).exp());
            if u > worst.0 {
                worst = (u, v);
            }
        }
        assert!(worst.0 <= 2, "{} ulps at x = {}", worst.0, worst.1);
        assert_eq!(exp_f32(0.0), 1.0);
        assert_eq!(exp_f32(-0.0), 1.0);
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_f32(-1e30), 0.0);
        assert_eq!(exp_f32(f32::MIN), 0.0);
        assert_eq!(exp_f32(-104.0), 0.0);
        assert_eq!(exp_f32(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp_f32(89.0), f32::INFINITY);
        assert_eq!(exp_f32(1e30), f32::INFINITY);
        assert!(exp_f32(f32::NAN).is_nan());
        assert!(exp_f32(88.72).is_finite());
        // The smallest subnormal results are still there.
        assert!(exp_f32(-103.0) > 0.0 && exp_f32(-103.0) < f32::MIN_POSITIVE);
        // At and below the clamp's floor the result is +0 (not -0), as computing it gave.
        for v in [f32::NEG_INFINITY, f32::MIN, -105.0, -105.5, -104.99999] {
            assert_eq!(exp_f32(v).to_bits(), 0, "exp({v})");
        }
    }

    #[test]
    fn exp_over_a_slice_gives_the_bits_of_exp_one_by_one() {
        use super::{exp_f32, exp_f32_in_place};
        // Every lane position and tail length, across the range and its edges.
        let mut xs: Vec<f32> = (0..4099)
            .map(|i| -112.0 + i as f32 * 0.04951 + (i % 7) as f32 * 1.3e-4)
            .collect();
        xs.extend([
            0.0,
            -0.0,
            f32::NAN,
            -f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MIN,
            f32::MAX,
            -1e30,
            88.72,
            -103.0,
            1e-7,
        ]);
        // Lengths 0..=17 leave every tail of an 8-lane loop (and of a 16-wide unroll).
        for len in (0..=17).chain([31, xs.len()]) {
            let mut got = xs[..len].to_vec();
            exp_f32_in_place(&mut got);
            for (x, g) in xs.iter().zip(&got) {
                assert_eq!(
                    g.to_bits(),
                    exp_f32(*x).to_bits(),
                    "exp({x}) in a slice of {len}"
                );
            }
        }
    }

    #[test]
    fn bf16_zn_box_decode_gives_the_portable_bits() {
        use crate::sim::host::transpose::{
            bf16_zn_box_to_panel_rows, bf16_zn_box_to_panel_rows_portable,
        };
        // Distinct patterns in every element (both bytes vary), then pseudo-random boxes.
        let mut seed = 0x9e37_79b9_u32;
        for round in 0..64 {
            let bx: [u16; 256] = std::array::from_fn(|e| {
                if round == 0 {
                    (e as u16).wrapping_mul(0x0101) ^ 0x8001
                } else {
                    seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    (seed >> 16) as u16
                }
            });
            let (mut want, mut got) = ([0f32; 256], [f32::NAN; 256]);
            bf16_zn_box_to_panel_rows_portable(&bx, &mut want);
            for i in 0..16 {
                for j in 0..16 {
                    assert_eq!(want[i * 16 + j].to_bits(), (bx[j * 16 + i] as u32) << 16);
                }
            }
            bf16_zn_box_to_panel_rows(&bx, &mut got);
            let (w, g): (Vec<u32>, Vec<u32>) = (
                want.iter().map(|v| v.to_bits()).collect(),
                got.iter().map(|v| v.to_bits()).collect(),
            );
            assert_eq!(g, w, "box round {round}");
        }
        #[cfg(target_arch = "x86_64")]
        if !crate::sim::host::host_isa().avx512f() {
            println!(
                "bf16_zn_box_decode: AVX-512F not selected or absent, only the portable path ran"
            );
        }
    }

    #[test]
    fn bf16_rounding_matches_half_bit_for_bit() {
        let mut bits: Vec<u32> = vec![
            0,
            0x8000_0000,
            0x7f80_0000,
            0xff80_0000,
            0x7f7f_ffff,
            0xff7f_ffff,
            0x7fc0_0000,
            0x7f80_0001,
            0xffff_ffff,
            0x7fbf_ffff,
            0x0000_8000,
            0x0001_8000,
            0x0000_7fff,
            0x3f80_8000,
            0x3f81_8000,
            0x3f80_8001,
            0x0080_0000,
            0x007f_ffff,
        ];
        // Every tie, near-tie and payload pattern of the low half over a spread of high halves.
        let mut h = 0x9e37_79b9u32;
        for _ in 0..20_000 {
            h = h.wrapping_mul(0x0019_660d).wrapping_add(0x3c6e_f35f);
            for low in [0x8000, 0x7fff, 0x8001, 0x0000, 0xffff, h & 0xffff] {
                bits.push((h & 0xffff_0000) | low);
            }
        }
        for b in bits {
            let x = f32::from_bits(b);
            assert_eq!(
                super::f32_to_bf16_bits(x),
                half::bf16::from_f32(x).to_bits(),
                "{b:#010x}"
            );
        }
    }

    use super::*;

    #[test]
    fn f16_conversions_match_half() {
        // Every f16 bit pattern, at an aligned and an unaligned start.
        let mut bytes = vec![0u8; 2 * 65536 + 1];
        for h in 0..=u16::MAX {
            let i = 2 * h as usize;
            bytes[i..i + 2].copy_from_slice(&h.to_le_bytes());
        }
        for start in [0, 1] {
            let mut b = bytes[..2 * 65536].to_vec();
            if start == 1 {
                b.insert(0, 0);
            }
            let mut out = vec![0f32; 65536];
            decode_f32(DType::F16, &b[start..], &mut out);
            for (h, v) in out.iter().enumerate() {
                let want = f16::from_bits(h as u16).to_f32();
                assert_eq!(v.to_bits(), want.to_bits(), "f16 {h:#06x}");
            }
        }
        // f32 patterns: a stride through all of them plus the rounding edges around f16 values.
        let mut vals: Vec<f32> = (0..=u32::MAX / 9973)
            .map(|i| f32::from_bits(i * 9973))
            .collect();
        for h in 0..=u16::MAX {
            let x = f16::from_bits(h).to_f32().to_bits();
            for d in [0x1000u32, 0xfff, 0x1001, 0x2000] {
                vals.push(f32::from_bits(x.wrapping_add(d)));
                vals.push(f32::from_bits(x.wrapping_sub(d)));
            }
        }
        let mut out = vec![0u8; vals.len() * 2];
        encode_f32(DType::F16, &vals, &mut out);
        for (v, b) in vals.iter().zip(out.chunks_exact(2)) {
            let want = f16::from_f32(*v).to_bits();
            assert_eq!(
                u16::from_le_bytes([b[0], b[1]]),
                want,
                "f32 {:#010x}",
                v.to_bits()
            );
        }
    }
}
