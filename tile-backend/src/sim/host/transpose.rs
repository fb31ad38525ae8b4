//! Host speed for moving values between layouts: the 8 x 8 register transposes of f32 NZ <->
//! ZN copies and of ZN boxes into panel rows, and the bf16 ZN box widened into f32 panel rows.
//! Each only moves bits; its portable body (or the caller's element-by-element loop, when
//! [`transpose_8x8_bytes`] declines) is the meaning, and every build gives the same bits.

use super::host_isa;

/// Transposes one f32 ZN box (8 rows x 16 columns, column-major: element `(i, j)` at
/// `bx[j * 8 + i]`) into 8 panel rows of 16 (row `i` at `block[i * 16..]`): two 8 x 8
/// register transposes where the host level allows AVX ([`host_isa`]), element by element
/// elsewhere. Only moves values, so both give the same bits.
#[inline]
pub(crate) fn zn_box_to_panel_rows(bx: &[f32; 128], block: &mut [f32; 128]) {
    #[cfg(target_arch = "x86_64")]
    if host_isa().avx() {
        // SAFETY: `zn_box_to_panel_rows_avx` requires only that the CPU supports AVX, which
        // `host_isa()` allows only when the CPU runs it.
        unsafe { zn_box_to_panel_rows_avx(bx, block) };
        return;
    }
    zn_box_to_panel_rows_portable(bx, block);
}

/// [`zn_box_to_panel_rows`] one element at a time.
pub(crate) fn zn_box_to_panel_rows_portable(bx: &[f32; 128], block: &mut [f32; 128]) {
    for j in 0..16 {
        for i in 0..8 {
            block[i * 16 + j] = bx[j * 8 + i];
        }
    }
}

/// [`zn_box_to_panel_rows`] with AVX: each half of the box's columns is eight 8-value
/// columns, transposed in registers into the eight rows' halves.
///
/// # Safety
/// The CPU must support AVX.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn zn_box_to_panel_rows_avx(bx: &[f32; 128], block: &mut [f32; 128]) {
    for h in 0..2 {
        // Column 8h + k of the box is 32 bytes at (8h + k) * 32; row i's half h of the panel is
        // 32 bytes at i * 64 + 32h.
        let cols: [usize; 8] = std::array::from_fn(|k| (8 * h + k) * 32);
        let rows: [usize; 8] = std::array::from_fn(|i| i * 64 + 32 * h);
        // SAFETY: AVX is the caller's promise; (8h + k) * 32 + 32 <= 512 and i * 64 + 32h + 32
        // <= 512 bytes, the size of `bx` and of `block`, for h < 2 and i, k < 8, and the two
        // arrays are distinct borrows, so they do not overlap.
        unsafe { transpose_8x8_pieces(bx.as_ptr().cast(), cols, block.as_mut_ptr().cast(), rows) };
    }
}

/// Copies an 8 x 8 block of 4-byte elements from eight 32-byte pieces of `src` (at `base +
/// at[k]`) to eight 32-byte pieces of `dst`, transposed (element `i` of source piece `k` becomes
/// element `k` of destination piece `i`), in registers where the host level allows AVX; false
/// (nothing done) where it does not or a piece lies outside its buffer.
pub(crate) fn transpose_8x8_bytes(
    (src, s_base, s_at): (&[u8], usize, [usize; 8]),
    (dst, d_base, d_at): (&mut [u8], usize, [usize; 8]),
) -> bool {
    #[cfg(target_arch = "x86_64")]
    if host_isa().avx() {
        let inside = |base: usize, o: usize, len: usize| {
            base.checked_add(o)
                .and_then(|b| b.checked_add(32))
                .is_some_and(|end| end <= len)
        };
        if s_at.iter().all(|&o| inside(s_base, o, src.len()))
            && d_at.iter().all(|&o| inside(d_base, o, dst.len()))
        {
            let (s, d) = (s_at.map(|o| s_base + o), d_at.map(|o| d_base + o));
            // SAFETY: the CPU runs AVX (`host_isa()` allows it only then), every piece read or written was checked to
            // lie inside its buffer (32 bytes from `base + at[k]`), and `src` and `dst` are
            // distinct borrows, so they do not overlap.
            unsafe { transpose_8x8_pieces(src.as_ptr(), s, dst.as_mut_ptr(), d) };
            return true;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (src, s_base, s_at, dst, d_base, d_at);
    false
}

/// Loads eight 32-byte pieces (8 f32 lanes each) at `src + s_at[k]`, transposes them
/// ([`transpose8x8`]) and stores the results at `dst + d_at[i]`.
///
/// # Safety
/// The CPU must support AVX; every source piece must be readable and every destination piece
/// writable (32 bytes from its offset), and no destination piece may overlap a source piece.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn transpose_8x8_pieces(src: *const u8, s_at: [usize; 8], dst: *mut u8, d_at: [usize; 8]) {
    use std::arch::x86_64::*;
    // SAFETY (both blocks): the pieces are readable / writable as the caller promises; unaligned
    // loads and stores need no alignment.
    let c: [__m256; 8] =
        std::array::from_fn(|k| unsafe { _mm256_loadu_ps(src.add(s_at[k]).cast()) });
    for (i, row) in transpose8x8(c).into_iter().enumerate() {
        unsafe { _mm256_storeu_ps(dst.add(d_at[i]).cast(), row) };
    }
}

/// The 8 x 8 transpose of eight 8-lane registers: lane `k` of result `i` is lane `i` of `c[k]`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
fn transpose8x8(c: [std::arch::x86_64::__m256; 8]) -> [std::arch::x86_64::__m256; 8] {
    use std::arch::x86_64::*;
    let t0 = _mm256_unpacklo_ps(c[0], c[1]);
    let t1 = _mm256_unpackhi_ps(c[0], c[1]);
    let t2 = _mm256_unpacklo_ps(c[2], c[3]);
    let t3 = _mm256_unpackhi_ps(c[2], c[3]);
    let t4 = _mm256_unpacklo_ps(c[4], c[5]);
    let t5 = _mm256_unpackhi_ps(c[4], c[5]);
    let t6 = _mm256_unpacklo_ps(c[6], c[7]);
    let t7 = _mm256_unpackhi_ps(c[6], c[7]);
    // s_q holds rows q (low 128 bits) and q + 4 (high) of columns 0..4 (or 4..8).
    let s0 = _mm256_shuffle_ps::<0x44>(t0, t2);
    let s1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
    let s2 = _mm256_shuffle_ps::<0x44>(t1, t3);
    let s3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
    let s4 = _mm256_shuffle_ps::<0x44>(t4, t6);
    let s5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
    let s6 = _mm256_shuffle_ps::<0x44>(t5, t7);
    let s7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
    [
        _mm256_permute2f128_ps::<0x20>(s0, s4),
        _mm256_permute2f128_ps::<0x20>(s1, s5),
        _mm256_permute2f128_ps::<0x20>(s2, s6),
        _mm256_permute2f128_ps::<0x20>(s3, s7),
        _mm256_permute2f128_ps::<0x31>(s0, s4),
        _mm256_permute2f128_ps::<0x31>(s1, s5),
        _mm256_permute2f128_ps::<0x31>(s2, s6),
        _mm256_permute2f128_ps::<0x31>(s3, s7),
    ]
}

/// Decodes one bf16 ZN box (16 x 16, column-major: element `(i, j)` at `bx[j * 16 + i]`, as
/// K^T is seen in a gathered bf16 NZ K tile) into 16 panel rows of 16 f32 (row `i` at
/// `block[i * 16..]`), each value `f32::from_bits((h as u32) << 16)` as `numeric::decode_f32` gives:
/// widened and transposed in AVX-512 registers where the host level allows AVX-512F
/// ([`host_isa`]), element by element elsewhere. Only moves bits, so both give the same values.
#[inline]
pub(crate) fn bf16_zn_box_to_panel_rows(bx: &[u16; 256], block: &mut [f32; 256]) {
    #[cfg(target_arch = "x86_64")]
    if host_isa().avx512f() {
        // SAFETY: `bf16_zn_box_to_panel_rows_avx512` requires only that the CPU supports
        // AVX-512F, which `host_isa()` allows only when the CPU runs it.
        unsafe { bf16_zn_box_to_panel_rows_avx512(bx, block) };
        return;
    }
    bf16_zn_box_to_panel_rows_portable(bx, block);
}

/// [`bf16_zn_box_to_panel_rows`] one element at a time.
pub(crate) fn bf16_zn_box_to_panel_rows_portable(bx: &[u16; 256], block: &mut [f32; 256]) {
    for j in 0..16 {
        for i in 0..16 {
            block[i * 16 + j] = f32::from_bits((bx[j * 16 + i] as u32) << 16);
        }
    }
}

/// [`bf16_zn_box_to_panel_rows`] in AVX-512 registers: each column's 16 bf16 widened to f32
/// bits (zero-extend, shift by 16), then a 16 x 16 transpose of 32-bit lanes (unpacks of 32-
/// and 64-bit pairs, then two rounds of 128-bit lane shuffles).
///
/// # Safety
/// The CPU must support AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn bf16_zn_box_to_panel_rows_avx512(bx: &[u16; 256], block: &mut [f32; 256]) {
    use std::arch::x86_64::*;
    let (src, dst) = (bx.as_ptr(), block.as_mut_ptr());
    // Column j: 16 bf16 at `src + 16 j` (32 bytes), as 16 f32 bit patterns.
    // SAFETY: 16 j + 16 <= 256 elements of `bx` for j < 16; unaligned loads need no alignment.
    let c: [__m512i; 16] = std::array::from_fn(|j| unsafe {
        let h = _mm256_loadu_si256(src.add(16 * j).cast());
        _mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(h))
    });
    // Pairs of columns interleaved by 32-bit lanes, then by 64-bit pairs: in each 128-bit lane
    // `l` of `u[4 q + t]`, rows 4 l + t of columns 4 q .. 4 q + 4.
    let t: [__m512i; 16] = std::array::from_fn(|k| {
        let (a, b) = (c[2 * (k / 2)], c[2 * (k / 2) + 1]);
        if k % 2 == 0 {
            _mm512_unpacklo_epi32(a, b)
        } else {
            _mm512_unpackhi_epi32(a, b)
        }
    });
    let u: [__m512i; 16] = std::array::from_fn(|k| {
        let q = k / 4;
        let (a, b) = (t[4 * q + (k % 4) / 2], t[4 * q + (k % 4) / 2 + 2]);
        if k % 2 == 0 {
            _mm512_unpacklo_epi64(a, b)
        } else {
            _mm512_unpackhi_epi64(a, b)
        }
    });
    // 128-bit lanes: first gather lanes {0, 2} / {1, 3} of column groups (q, q + 1), then again
    // across the pairs of groups, so that row `r` ends up whole in one register.
    let v: [__m512i; 16] = std::array::from_fn(|k| {
        let (q, t, hi) = (2 * (k / 8), k % 4, (k / 4) % 2 == 1);
        let (a, b) = (u[4 * q + t], u[4 * (q + 1) + t]);
        if hi {
            _mm512_shuffle_i32x4::<0xdd>(a, b)
        } else {
            _mm512_shuffle_i32x4::<0x88>(a, b)
        }
    });
    for k in 0..8 {
        let (a, b) = (v[k], v[k + 8]);
        let lo = _mm512_shuffle_i32x4::<0x88>(a, b);
        let hi = _mm512_shuffle_i32x4::<0xdd>(a, b);
        // SAFETY: rows `k` and `k + 8` are 16 f32 at `dst + 16 row`, inside the 256 of `block`;
        // `bx` and `block` are distinct borrows; unaligned stores need no alignment.
        unsafe {
            _mm512_storeu_si512(dst.add(16 * ROW_LO[k]).cast(), lo);
            _mm512_storeu_si512(dst.add(16 * ROW_HI[k]).cast(), hi);
        }
    }
}

/// The panel rows the transpose of [`bf16_zn_box_to_panel_rows_avx512`] leaves in its final
/// low and high shuffles.
#[cfg(target_arch = "x86_64")]
const ROW_LO: [usize; 8] = [0, 1, 2, 3, 4, 5, 6, 7];
#[cfg(target_arch = "x86_64")]
const ROW_HI: [usize; 8] = [8, 9, 10, 11, 12, 13, 14, 15];
