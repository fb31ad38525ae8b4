//! Host speed for the cube's int8 x int8 -> int32 product (its meaning: `exec::matmul`, the
//! wrapping i32 sums), on the operands' own bytes: A's rows (k contiguous,
//! as an NZ Left tile holds them inside its 16 x 32 boxes) times B as it lies in a ZN Right
//! tile (32 x 16 boxes, each column's 32 k contiguous), accumulated into the 16-column strips of
//! an NZ Acc tile (16 x 16 boxes: a strip is a row-major `[rows, 16]` int32 matrix).
//!
//! Three builds of the same integers, chosen at run time by the host level
//! ([`crate::sim::host::host_isa`], the switch `TILEOPS_SIM_ISA`):
//!
//! - **AVX-512 VNNI** (`vpdpbusd`): one 64-byte load is two columns' 32 k of a B box; A's 32 k
//!   are broadcast to both halves. `vpdpbusd` multiplies unsigned by signed bytes, so B is
//!   flipped to `b + 128` (xor 0x80) and `128 · Σ_k a` is taken off each row's sums afterwards.
//!   Three rows share each B load; each row's 8 column-pair accumulators are reduced to the
//!   strip's 16 sums in registers once per strip.
//! - **AVX2** (`vpmaddwd`): A's and B's bytes sign-extended to i16, pairs of products summed into
//!   i32 lanes (|2 · 128 · 128| fits).
//! - **Portable**: plain wrapping i32 loops.
//!
//! All arithmetic is modulo 2^32 (`vpdpbusd` and `vpaddd` wrap, as `wrapping_add` does), so the
//! three give the same bits for any operands and any accumulator, however the sums are grouped.
//! Rows of A that are all zero add nothing and are skipped (a decode step's few tokens fill 1 of
//! a fractal's 16 rows).
//!
//! The AVX-512 intrinsics are stable since Rust 1.89, the workspace's `rust-version`.

use super::{host_isa, HostIsa};

/// Rows and columns of a B (ZN, int8) box, and its bytes.
const BOX_K: usize = 32;
const BOX_N: usize = 16;
const BOX_BYTES: usize = BOX_K * BOX_N;

/// The operands of [`int8_gemm`]: A row-major `[m, k]` (`k` a multiple of 32), and B as
/// `strips` columns of ZN boxes: box `(bk, s)` (k `32 bk ..`, columns `16 s ..`) at
/// `b[bk * b_pitch + s * 512 ..]`, its column `j` at `+ 32 j`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Int8Operands<'a> {
    pub a: &'a [i8],
    pub b: &'a [i8],
    pub b_pitch: usize,
    /// `m`, `k`, strips of 16 columns.
    pub dims: (usize, usize, usize),
}

impl Int8Operands<'_> {
    /// Whether every byte the product reads lies inside the slices (checked once, so the
    /// kernels' unchecked loads stay in bounds).
    fn in_bounds(&self) -> bool {
        let (m, k, strips) = self.dims;
        if k % BOX_K != 0 || m == 0 || k == 0 || strips == 0 {
            return m == 0 || strips == 0 || (k % BOX_K == 0 && self.a.len() >= m * k);
        }
        let b_end = (k / BOX_K - 1) * self.b_pitch + strips * BOX_BYTES;
        self.a.len() >= m * k && self.b.len() >= b_end && self.b_pitch >= strips * BOX_BYTES
    }
}

/// Which build of the product runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Int8Path {
    /// Plain wrapping i32 loops.
    Portable,
    /// `vpmaddwd` on sign-extended i16 (x86-64 with AVX2).
    Avx2,
    /// `vpdpbusd` (x86-64 with AVX-512 F, BW and VNNI).
    Avx512Vnni,
}

impl Int8Path {
    /// The fastest build the host level ([`host_isa`], `TILEOPS_SIM_ISA`) allows.
    pub fn best() -> Int8Path {
        let isa = host_isa();
        if isa.avx512_vnni() {
            Int8Path::Avx512Vnni
        } else if isa.avx2_fma() {
            Int8Path::Avx2
        } else {
            Int8Path::Portable
        }
    }

    /// Whether this CPU runs the build (whatever the switch selects).
    pub fn available(self) -> bool {
        match self {
            Int8Path::Portable => true,
            Int8Path::Avx2 => HostIsa::Avx2.supported(),
            Int8Path::Avx512Vnni => HostIsa::Avx512.supported() && HostIsa::Avx512.avx512_vnni(),
        }
    }
}

/// `C (+)= A · B` (see [`Int8Operands`]) in wrapping i32 arithmetic, strip `s` of C being the
/// row-major `[m, 16]` matrix at `c[s * c_strip ..]`, with the build `path` (which must be
/// [`Int8Path::available`]; an unavailable one, or operands out of bounds, returns false having
/// done nothing).
pub(crate) fn int8_gemm(
    path: Int8Path,
    c: &mut [i32],
    c_strip: usize,
    ops: &Int8Operands<'_>,
    accumulate: bool,
) -> bool {
    let (m, k, strips) = ops.dims;
    let c_ok =
        strips == 0 || m == 0 || (c_strip >= m * 16 && c.len() >= (strips - 1) * c_strip + m * 16);
    if !ops.in_bounds() || !c_ok || !path.available() {
        return false;
    }
    // Rows of A that are all zero add nothing: skipped (cleared when not accumulating).
    let mut live = Vec::with_capacity(m);
    for i in 0..m {
        if !all_zero(&ops.a[i * k..(i + 1) * k]) {
            live.push(i);
        } else if !accumulate {
            for s in 0..strips {
                c[s * c_strip + i * 16..s * c_strip + i * 16 + 16].fill(0);
            }
        }
    }
    match path {
        Int8Path::Portable => portable(c, c_strip, ops, &live, accumulate),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `path.available()` checked that the CPU has AVX2 above; the operands and C were checked to
        // hold every byte and element the kernel reads or writes.
        Int8Path::Avx2 => unsafe { avx2(c, c_strip, ops, &live, accumulate) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above, for AVX-512 F, BW and VNNI.
        Int8Path::Avx512Vnni => unsafe { vnni(c, c_strip, ops, &live, accumulate) },
        #[cfg(not(target_arch = "x86_64"))]
        _ => return false,
    }
    true
}

/// Whether every byte is zero: OR-folded 64 bytes at a time, which vectorises (a byte loop that
/// stops at the first non-zero does not, and scanning a decode step's 15 zero rows that way cost
/// more than the product of its one live row).
fn all_zero(row: &[i8]) -> bool {
    row.chunks(64)
        .all(|c| c.iter().fold(0i8, |acc, v| acc | *v) == 0)
}

/// The sums of row `i`, strip `s`, into C.
#[inline(always)]
fn put(c: &mut [i32], at: usize, sums: &[i32; 16], accumulate: bool) {
    for (d, v) in c[at..at + 16].iter_mut().zip(sums) {
        *d = if accumulate { d.wrapping_add(*v) } else { *v };
    }
}

/// The portable build.
fn portable(c: &mut [i32], c_strip: usize, ops: &Int8Operands<'_>, live: &[usize], acc: bool) {
    let (_, k, strips) = ops.dims;
    for &i in live {
        let a = &ops.a[i * k..(i + 1) * k];
        for s in 0..strips {
            let mut sums = [0i32; 16];
            for (bk, ak) in a.chunks_exact(BOX_K).enumerate() {
                let bx = &ops.b[bk * ops.b_pitch + s * BOX_BYTES..][..BOX_BYTES];
                for (sum, col) in sums.iter_mut().zip(bx.chunks_exact(BOX_K)) {
                    for (x, y) in ak.iter().zip(col) {
                        *sum = sum.wrapping_add(*x as i32 * *y as i32);
                    }
                }
            }
            put(c, s * c_strip + i * 16, &sums, acc);
        }
    }
}

/// The AVX2 build: per live row and strip, eight columns at a time, each column's sums in the
/// eight i32 lanes of one register, reduced with `vphaddd` at the end of the strip.
///
/// # Safety
/// The CPU must support AVX2; `ops` must be in bounds ([`Int8Operands::in_bounds`]) and C hold
/// every strip's `[m, 16]` rows.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn avx2(c: &mut [i32], c_strip: usize, ops: &Int8Operands<'_>, live: &[usize], acc: bool) {
    use std::arch::x86_64::*;
    let (_, k, strips) = ops.dims;
    for &i in live {
        let a = ops.a[i * k..].as_ptr();
        for s in 0..strips {
            let mut sums = [0i32; 16];
            for half in 0..2 {
                let mut v = [_mm256_setzero_si256(); 8];
                for bk in 0..k / BOX_K {
                    // SAFETY: row `i` holds k bytes and box (bk, s) lies in `b` (in_bounds);
                    // unaligned loads need no alignment.
                    let (a_lo, a_hi, bx) = unsafe {
                        let ap = a.add(bk * BOX_K);
                        (
                            _mm256_cvtepi8_epi16(_mm_loadu_si128(ap.cast())),
                            _mm256_cvtepi8_epi16(_mm_loadu_si128(ap.add(16).cast())),
                            ops.b
                                .as_ptr()
                                .add(bk * ops.b_pitch + s * BOX_BYTES + half * 256),
                        )
                    };
                    for (j, vj) in v.iter_mut().enumerate() {
                        // SAFETY: column `8 half + j` of the box: 32 bytes inside it.
                        let (b_lo, b_hi) = unsafe {
                            let col = bx.add(j * BOX_K);
                            (
                                _mm256_cvtepi8_epi16(_mm_loadu_si128(col.cast())),
                                _mm256_cvtepi8_epi16(_mm_loadu_si128(col.add(16).cast())),
                            )
                        };
                        let p = _mm256_add_epi32(
                            _mm256_madd_epi16(a_lo, b_lo),
                            _mm256_madd_epi16(a_hi, b_hi),
                        );
                        *vj = _mm256_add_epi32(*vj, p);
                    }
                }
                let h01 = _mm256_hadd_epi32(v[0], v[1]);
                let h23 = _mm256_hadd_epi32(v[2], v[3]);
                let h45 = _mm256_hadd_epi32(v[4], v[5]);
                let h67 = _mm256_hadd_epi32(v[6], v[7]);
                let h0 = _mm256_hadd_epi32(h01, h23);
                let h1 = _mm256_hadd_epi32(h45, h67);
                let r = _mm256_add_epi32(
                    _mm256_permute2x128_si256::<0x20>(h0, h1),
                    _mm256_permute2x128_si256::<0x31>(h0, h1),
                );
                // SAFETY: 8 i32s into the 16-element array at 8 half.
                unsafe { _mm256_storeu_si256(sums[half * 8..].as_mut_ptr().cast(), r) };
            }
            put(c, s * c_strip + i * 16, &sums, acc);
        }
    }
}

/// The AVX-512 VNNI build: live rows three at a time (then two, one) against each strip.
///
/// # Safety
/// The CPU must support AVX-512 F, BW and VNNI; `ops` must be in bounds and C hold every
/// strip's `[m, 16]` rows.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn vnni(c: &mut [i32], c_strip: usize, ops: &Int8Operands<'_>, live: &[usize], acc: bool) {
    let (_, k, strips) = ops.dims;
    // 128 · Σ_k a per row: what flipping B to `b + 128` adds to each of the row's sums.
    let flip_sum = |i: usize| -> i32 {
        let s: i32 = ops.a[i * k..(i + 1) * k].iter().map(|v| *v as i32).sum();
        s.wrapping_mul(128)
    };
    let mut g = 0;
    while g < live.len() {
        let take = (live.len() - g).min(3);
        let rows = &live[g..g + take];
        let corr: Vec<i32> = rows.iter().map(|&i| flip_sum(i)).collect();
        for s in 0..strips {
            let mut sums = [[0i32; 16]; 3];
            // SAFETY: AVX-512 F, BW and VNNI are enabled here; rows and boxes in bounds.
            unsafe {
                match take {
                    3 => vnni_rows::<3>(ops, [rows[0], rows[1], rows[2]], s, &mut sums),
                    2 => vnni_rows::<2>(ops, [rows[0], rows[1]], s, &mut sums),
                    _ => vnni_rows::<1>(ops, [rows[0]], s, &mut sums),
                }
            }
            for (r, &i) in rows.iter().enumerate() {
                let fixed = sums[r].map(|v| v.wrapping_sub(corr[r]));
                put(c, s * c_strip + i * 16, &fixed, acc);
            }
        }
        g += take;
    }
}

/// `R` rows of A (`rows`) against strip `s` of B: `sums[r][j] = Σ_k a[rows[r], k] · (b[k, j]
/// + 128)` (wrapping).
///
/// # Safety
/// As [`vnni`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn vnni_rows<const R: usize>(
    ops: &Int8Operands<'_>,
    rows: [usize; R],
    s: usize,
    sums: &mut [[i32; 16]; 3],
) {
    use std::arch::x86_64::*;
    let (_, k, _) = ops.dims;
    let flip = _mm512_set1_epi8(-128);
    let mut acc = [[_mm512_setzero_si512(); 8]; R];
    let a: [*const i8; R] = rows.map(|i| ops.a[i * k..].as_ptr());
    for bk in 0..k / BOX_K {
        // SAFETY: each row holds k bytes, so its 32 bytes at 32 bk are in bounds; box (bk, s)
        // (512 bytes) lies in `b` (in_bounds). Unaligned loads need no alignment.
        let av: [__m512i; R] = std::array::from_fn(|r| unsafe {
            _mm512_broadcast_i64x4(_mm256_loadu_si256(a[r].add(bk * BOX_K).cast()))
        });
        let bx = unsafe { ops.b.as_ptr().add(bk * ops.b_pitch + s * BOX_BYTES) };
        for q in 0..8 {
            // Columns 2q and 2q + 1: bytes 0..32 and 32..64 of this load.
            let bv = _mm512_xor_si512(unsafe { _mm512_loadu_si512(bx.add(q * 64).cast()) }, flip);
            for (row, a) in acc.iter_mut().zip(&av) {
                row[q] = _mm512_dpbusd_epi32(row[q], bv, *a);
            }
        }
    }
    for r in 0..R {
        let out = reduce_pairs(acc[r]);
        // SAFETY: 16 i32s into a 16-element array.
        unsafe { _mm512_storeu_si512(sums[r].as_mut_ptr().cast(), out) };
    }
}

/// Sixteen column sums from eight column-pair accumulators (`v[q]`: lanes 0-7 column 2q's
/// partial sums, lanes 8-15 column 2q + 1's), in column order.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn reduce_pairs(v: [std::arch::x86_64::__m512i; 8]) -> std::arch::x86_64::__m512i {
    use std::arch::x86_64::*;
    // 128-bit chunks: [x0 x1 | x2 x3] (columns 4t, 4t+1) and [y0 y1 | y2 y3] (4t+2, 4t+3) ->
    // chunk c holds column 4t + c, four partial sums each.
    let quad = |x: __m512i, y: __m512i| {
        _mm512_add_epi32(
            _mm512_shuffle_i64x2::<0x88>(x, y),
            _mm512_shuffle_i64x2::<0xDD>(x, y),
        )
    };
    let w = [
        quad(v[0], v[1]),
        quad(v[2], v[3]),
        quad(v[4], v[5]),
        quad(v[6], v[7]),
    ];
    // Chunk l: columns 8u + l and 8u + 4 + l, two partial sums each.
    let pair = |x: __m512i, y: __m512i| {
        _mm512_add_epi32(_mm512_unpacklo_epi64(x, y), _mm512_unpackhi_epi64(x, y))
    };
    let (z0, z1) = (pair(w[0], w[1]), pair(w[2], w[3]));
    // Chunk l: columns l, 8 + l, 4 + l, 12 + l.
    let (t0, t1) = (_mm512_unpacklo_epi32(z0, z1), _mm512_unpackhi_epi32(z0, z1));
    let r = _mm512_add_epi32(_mm512_unpacklo_epi64(t0, t1), _mm512_unpackhi_epi64(t0, t1));
    let order = _mm512_setr_epi32(0, 4, 8, 12, 2, 6, 10, 14, 1, 5, 9, 13, 3, 7, 11, 15);
    _mm512_permutexvar_epi32(order, r)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic bytes, every value of i8 included (-128 and 127 often).
    fn bytes(n: usize, seed: u32, density: u32) -> Vec<i8> {
        (0..n as u32)
            .map(|i| {
                let h = (i ^ seed).wrapping_mul(2_654_435_761).rotate_left(11);
                if h % 100 >= density {
                    0
                } else if h.is_multiple_of(7) {
                    -128
                } else if h.is_multiple_of(11) {
                    127
                } else {
                    (h >> 8) as u8 as i8
                }
            })
            .collect()
    }

    /// The triple loop on the same operands.
    fn model(c0: &[i32], c_strip: usize, ops: &Int8Operands<'_>, accumulate: bool) -> Vec<i32> {
        let (m, k, strips) = ops.dims;
        let mut c = c0.to_vec();
        for s in 0..strips {
            for i in 0..m {
                for j in 0..16 {
                    let mut v = if accumulate {
                        c[s * c_strip + i * 16 + j]
                    } else {
                        0
                    };
                    for p in 0..k {
                        let b = ops.b[(p / 32) * ops.b_pitch + s * 512 + j * 32 + p % 32];
                        v = v.wrapping_add(ops.a[i * k + p] as i32 * b as i32);
                    }
                    c[s * c_strip + i * 16 + j] = v;
                }
            }
        }
        c
    }

    #[test]
    fn every_build_gives_the_triple_loops_bits() {
        let mut skipped = Vec::new();
        // Row counts around the three-row groups, one and several K boxes and strips, B boxes
        // packed and a wider tile apart, dense and sparse A (zero rows), wrapping accumulators.
        for (m, kb, strips, extra) in [
            (1, 1, 1, 0),
            (2, 3, 2, 1),
            (3, 8, 1, 0),
            (4, 2, 3, 2),
            (7, 5, 2, 0),
            (16, 8, 16, 0),
            (17, 9, 4, 1),
        ] {
            let k = kb * 32;
            let pitch = (strips + extra) * 512;
            for density in [100, 30, 0] {
                for accumulate in [false, true] {
                    let a = bytes(m * k, 1 + m as u32, density);
                    let b = bytes(kb * pitch, 2 + kb as u32, 100);
                    let c_strip = m * 16 + 5;
                    let c0: Vec<i32> = (0..strips * c_strip)
                        .map(|i| {
                            (i as i32)
                                .wrapping_mul(0x7654_3211)
                                .wrapping_add(i32::MAX - 3)
                        })
                        .collect();
                    let ops = Int8Operands {
                        a: &a,
                        b: &b,
                        b_pitch: pitch,
                        dims: (m, k, strips),
                    };
                    let want = model(&c0, c_strip, &ops, accumulate);
                    for path in [Int8Path::Portable, Int8Path::Avx2, Int8Path::Avx512Vnni] {
                        if !path.available() {
                            skipped.push(path);
                            continue;
                        }
                        let mut got = c0.clone();
                        assert!(int8_gemm(path, &mut got, c_strip, &ops, accumulate));
                        for s in 0..strips {
                            let rows = s * c_strip..s * c_strip + m * 16;
                            assert_eq!(
                                got[rows.clone()],
                                want[rows],
                                "{path:?} m={m} k={k} strips={strips} density={density} acc={accumulate} strip {s}"
                            );
                            // Between strips nothing is written.
                            let gap = s * c_strip + m * 16..(s + 1) * c_strip;
                            assert_eq!(got[gap.clone()], c0[gap], "{path:?} wrote between strips");
                        }
                    }
                }
            }
        }
        skipped.dedup();
        for p in skipped {
            eprintln!("{p:?} is not available on this CPU: its int8 build was not tested");
        }
    }

    #[test]
    fn the_largest_sums_wrap_alike() {
        // k = 4096 of (-128) · (-128) = 2^26 per row, on top of an accumulator near i32::MAX.
        let (m, k, strips) = (2, 4096, 1);
        let a = vec![-128i8; m * k];
        let b = vec![-128i8; k / 32 * 512];
        let ops = Int8Operands {
            a: &a,
            b: &b,
            b_pitch: 512,
            dims: (m, k, strips),
        };
        let c0 = vec![i32::MAX - 5; m * 16];
        let want = vec![(i32::MAX - 5).wrapping_add(1 << 26); m * 16];
        for path in [Int8Path::Portable, Int8Path::Avx2, Int8Path::Avx512Vnni] {
            if !path.available() {
                eprintln!("{path:?} is not available on this CPU: skipped");
                continue;
            }
            let mut got = c0.clone();
            assert!(int8_gemm(path, &mut got, m * 16, &ops, true));
            assert_eq!(got, want, "{path:?}");
        }
    }

    #[test]
    fn operands_out_of_bounds_are_refused() {
        let (a, b) = (vec![1i8; 64], vec![1i8; 512]);
        let mut c = vec![0i32; 32];
        // k = 64 needs two B boxes; k = 40 is not a whole box.
        for dims in [(1, 64, 1), (1, 40, 1), (3, 32, 1)] {
            let ops = Int8Operands {
                a: &a,
                b: &b,
                b_pitch: 512,
                dims,
            };
            assert!(
                !int8_gemm(Int8Path::Portable, &mut c, 16, &ops, false),
                "{dims:?}"
            );
        }
    }
}
