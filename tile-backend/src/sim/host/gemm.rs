//! Host speed for the cube's float and integer products (their meaning: `exec::matmul`, sums
//! over `k` in order per output element, fused multiply-adds for f32, wrapping i32 for int8):
//! the panel GEMM into 16-column Acc strips in AVX-512 and AVX2 + FMA registers beside its
//! portable fused body, and the general int32 product's AVX2 build. Every build gives the bits
//! of the portable body (the tests below check each against it on this CPU).

use super::host_isa;
#[cfg(all(test, target_arch = "x86_64"))]
use super::HostIsa;
use crate::sim::gm::PrefetchQueue;

/// `c (+)= a · b` for `c` a row-major `[m, 16]` strip, `a` row-major `[m, k]` and `b` a
/// row-major `[k, 16]` panel (`m = c.len() / 16`): [`panels_gemm`] with one strip.
#[cfg(test)]
fn strip_gemm(c: &mut [f32], a: &[f32], b: &[f32], k: usize, accumulate: bool) {
    let m = c.len() / 16;
    panels_gemm(
        c,
        m * 16,
        a,
        b,
        (m, k, 1),
        accumulate,
        &mut PrefetchQueue::default(),
    );
}

/// `C (+)= A · B` for `A` row-major `[m, k]` and `B` given as `strips` row-major `[k, 16]`
/// panels one after another, where strip `s` of `C` (its columns `16 s ..`) is the row-major
/// `[m, 16]` matrix at `c[s * c_strip ..]`; each element is the fused multiply-adds over `k` in
/// order. Runs in AVX-512 registers ([`panels_gemm_avx512`]) or else AVX2 + FMA ones as the
/// host level allows ([`host_isa`]), the portable fused form otherwise: the same bits each way.
/// Between row groups it hints a few lines of `ahead` (rows a later gather will read), so their
/// memory latency hides behind the arithmetic.
pub(crate) fn panels_gemm(
    c: &mut [f32],
    c_strip: usize,
    a: &[f32],
    panels: &[f32],
    dims: (usize, usize, usize),
    accumulate: bool,
    ahead: &mut PrefetchQueue<'_>,
) {
    #[cfg(target_arch = "x86_64")]
    if host_isa().avx512f() {
        // SAFETY: `panels_gemm_avx512` requires only that the CPU supports AVX-512F, AVX2 and
        // FMA; `host_isa()` allows AVX-512F builds only at a level the CPU runs, which includes
        // all three. Its arguments are ordinary slices.
        unsafe { panels_gemm_avx512(c, c_strip, a, panels, dims, accumulate, ahead) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if host_isa().avx2_fma() {
        // SAFETY: `panels_gemm_fma` requires only that the CPU supports AVX2 and FMA, which
        // `host_isa()` allows only when the CPU runs them; its arguments are ordinary slices it
        // indexes with bounds checks.
        unsafe { panels_gemm_fma(c, c_strip, a, panels, dims, accumulate, ahead) };
        return;
    }
    panels_gemm_body::<PORTABLE_FUSED>(c, c_strip, a, panels, dims, accumulate, ahead);
}

/// `c [m, n] += a [m, k] · b [k, n]` in wrapping i32 arithmetic (the int8 x int8 -> int32
/// product: exact, and the same bits in any summation order, so terms with a zero `a` are
/// skipped). Where the host level allows AVX2 ([`host_isa`]) the same loops run compiled for
/// it (8-lane `vpmulld` instead of the baseline's 4-lane SSE2 emulation); elsewhere the
/// portable build.
pub(crate) fn int_gemm(c: &mut [i32], a: &[i32], b: &[i32], dims: (usize, usize, usize)) {
    #[cfg(target_arch = "x86_64")]
    if host_isa().avx2_fma() {
        // SAFETY: `int_gemm_avx2` requires only that the CPU supports AVX2, which `host_isa()`
        // allows only when the CPU runs it; its arguments are ordinary slices it indexes with
        // bounds checks.
        unsafe { int_gemm_avx2(c, a, b, dims) };
        return;
    }
    int_gemm_body(c, a, b, dims);
}

/// [`int_gemm`] compiled for AVX2.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn int_gemm_avx2(c: &mut [i32], a: &[i32], b: &[i32], dims: (usize, usize, usize)) {
    int_gemm_body(c, a, b, dims);
}

/// The loops of [`int_gemm`], inlined into each build.
#[inline(always)]
fn int_gemm_body(c: &mut [i32], a: &[i32], b: &[i32], (m, k, n): (usize, usize, usize)) {
    if k == 0 || n == 0 {
        return;
    }
    for (crow, arow) in c.chunks_exact_mut(n).zip(a.chunks_exact(k)).take(m) {
        for (&av, brow) in arow.iter().zip(b.chunks_exact(n)) {
            // `c += 0 · b` leaves c as it is: the zero padding of a tail (a decode step's few
            // tokens fill 1 of the fractal's 16 rows) and zero activations cost nothing.
            if av == 0 {
                continue;
            }
            for (cv, bv) in crow.iter_mut().zip(brow) {
                *cv = cv.wrapping_add(av.wrapping_mul(*bv));
            }
        }
    }
}

/// Whether this CPU runs the AVX2 + FMA kernels (whatever the switch selects: the tests'
/// question).
#[cfg(all(test, target_arch = "x86_64"))]
fn has_avx2_fma() -> bool {
    HostIsa::Avx2.supported()
}

/// Whether this CPU runs the AVX-512 kernels (AVX-512F beside AVX2 and FMA; the tests'
/// question, whatever the switch selects).
#[cfg(all(test, target_arch = "x86_64"))]
fn has_avx512() -> bool {
    HostIsa::Avx512.supported()
}

/// Whether the slices of a register group of `R` rows and `S` strips hold what it reads and
/// writes: `S` strips of C `[R, 16]` `c_strip` apart, A `[R, k]`, `S` panels `[k, 16]`.
#[cfg(target_arch = "x86_64")]
fn group_fits<const R: usize, const S: usize>(
    (c, c_strip, a, b, k): (usize, usize, usize, usize, usize),
) -> bool {
    S >= 1 && c >= (S - 1) * c_strip + R * 16 && a >= R * k && b >= S * k * 16
}

/// `step(p)` for `p` in `0..k` in order, unrolled by four (the register kernels' depth loop).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn each_depth(k: usize, mut step: impl FnMut(usize)) {
    let mut p = 0;
    while p + 4 <= k {
        step(p);
        step(p + 1);
        step(p + 2);
        step(p + 3);
        p += 4;
    }
    while p < k {
        step(p);
        p += 1;
    }
}

/// Rows of A per group of [`panels_gemm_avx512`].
const ROWS_512: usize = 8;
/// Strips (16-column panels) per group of [`panels_gemm_avx512`].
const STRIPS_512: usize = 2;

/// [`panels_gemm`] in AVX-512 registers: one 16-lane register holds a panel row, so a group
/// of eight rows of A against two strips keeps its 8 x 32 sums in sixteen registers over the
/// whole `k` (each step: two panel loads, eight broadcasts, sixteen multiply-adds). Blocks of
/// A's rows of about 12 KiB stay in the L1 cache while the strips pass, as in
/// [`panels_gemm_body`]. Every sum is the fused multiply-adds over `k` in order that the AVX2
/// form makes, so the bits are the same.
///
/// # Safety
/// The CPU must support AVX-512F, AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn panels_gemm_avx512(
    c: &mut [f32],
    c_strip: usize,
    a: &[f32],
    panels: &[f32],
    (m, k, strips): (usize, usize, usize),
    accumulate: bool,
    ahead: &mut PrefetchQueue<'_>,
) {
    if k == 0 {
        // No multiply-adds: the sums are the accumulator or zeros, as the portable form gives.
        return panels_gemm_body::<true>(c, c_strip, a, panels, (m, k, strips), accumulate, ahead);
    }
    let block = (12 * 1024 / 4 / k).max(ROWS_512) / ROWS_512 * ROWS_512;
    for b0 in (0..m).step_by(block) {
        let b1 = (b0 + block).min(m);
        let mut s = 0;
        while s < strips {
            let s_take = (strips - s).min(STRIPS_512);
            let b = &panels[s * k * 16..(s + s_take) * k * 16];
            let mut r0 = b0;
            while r0 < b1 {
                let take = match b1 - r0 {
                    8.. => 8,
                    4..=7 => 4,
                    2 | 3 => 2,
                    _ => 1,
                };
                let a_rows = &a[r0 * k..(r0 + take) * k];
                let first = s * c_strip + r0 * 16;
                let c_rows = &mut c[first..first + (s_take - 1) * c_strip + take * 16];
                let args = (c_rows, c_strip, a_rows, b, k, accumulate);
                // SAFETY: the CPU supports AVX-512F (this function's contract); the kernels check
                // their slices' lengths themselves.
                unsafe {
                    match (take, s_take) {
                        (8, 2) => rows_times_panels_avx512::<8, 2>(args),
                        (8, _) => rows_times_panels_avx512::<8, 1>(args),
                        (4, 2) => rows_times_panels_avx512::<4, 2>(args),
                        (4, _) => rows_times_panels_avx512::<4, 1>(args),
                        (2, 2) => rows_times_panels_avx512::<2, 2>(args),
                        (2, _) => rows_times_panels_avx512::<2, 1>(args),
                        (_, 2) => rows_times_panels_avx512::<1, 2>(args),
                        _ => rows_times_panels_avx512::<1, 1>(args),
                    }
                }
                // The same hinting rate per row and strip as the six-row form.
                ahead.hint_lines((take * s_take * LINES_PER_GROUP).div_ceil(6));
                r0 += take;
            }
            s += s_take;
        }
    }
}

/// `R` rows of A against `S` panels in AVX-512 registers (one per row and strip): `c` holds the
/// `S` strips' `[R, 16]` rows `c_strip` apart, `a` is `[R, k]`, `b` the `S` panels `[k, 16]`
/// one after another. Each sum is `fma(a[r][p], b[s][p][j], sum)` for `p` in order from the
/// accumulator (or zero), as in [`rows_times_panel`]`::<true, R>`.
///
/// # Safety
/// The CPU must support AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn rows_times_panels_avx512<const R: usize, const S: usize>(
    (c, c_strip, a, b, k, accumulate): (&mut [f32], usize, &[f32], &[f32], usize, bool),
) {
    use std::arch::x86_64::*;
    assert!(
        group_fits::<R, S>((c.len(), c_strip, a.len(), b.len(), k)),
        "AVX-512 panel kernel: slices too short"
    );
    let (cp, ap, bp) = (c.as_mut_ptr(), a.as_ptr(), b.as_ptr());
    // SAFETY (every block below): the assert above bounds every offset: C's row `r` of strip
    // `s` is at `s * c_strip + r * 16 .. + 16`, A's element (r, p) at `r * k + p` (p < k),
    // panel `s`'s row `p` at `(s * k + p) * 16 .. + 16`; unaligned loads and stores need no
    // alignment.
    let mut acc = [[_mm512_setzero_ps(); S]; R];
    if accumulate {
        for (r, row) in acc.iter_mut().enumerate() {
            for (s, v) in row.iter_mut().enumerate() {
                *v = unsafe { _mm512_loadu_ps(cp.add(s * c_strip + r * 16)) };
            }
        }
    }
    // Each row of A and each panel through its own pointer, so a step's addresses are a
    // pointer plus `p` (no per-step address arithmetic).
    let rows: [*const f32; R] = std::array::from_fn(|r| unsafe { ap.add(r * k) });
    let strips: [*const f32; S] = std::array::from_fn(|s| unsafe { bp.add(s * k * 16) });
    let step = |p: usize| {
        let bv: [__m512; S] =
            std::array::from_fn(|s| unsafe { _mm512_loadu_ps(strips[s].add(p * 16)) });
        for (row, a_row) in acc.iter_mut().zip(&rows) {
            let x = unsafe { _mm512_set1_ps(*a_row.add(p)) };
            for (v, bs) in row.iter_mut().zip(&bv) {
                *v = _mm512_fmadd_ps(x, *bs, *v);
            }
        }
    };
    each_depth(k, step);
    for (r, row) in acc.iter().enumerate() {
        for (s, v) in row.iter().enumerate() {
            unsafe { _mm512_storeu_ps(cp.add(s * c_strip + r * 16), *v) };
        }
    }
}

/// Strips (16-column panels) a group of [`panels_gemm_fma`] with `rows` rows of A (below six)
/// spans: 12 sums in registers where the strips allow (two rows x three strips), eight for four
/// rows or one row (four strips).
#[cfg(target_arch = "x86_64")]
const fn strips_fma(rows: usize) -> usize {
    match rows {
        4 => 1,
        2 => 3,
        _ => 4,
    }
}

/// [`panels_gemm`] in AVX2 + FMA registers. Within blocks of A's rows of about 12 KiB (which
/// stay in the L1 cache while the strips pass, as in [`panels_gemm_body`]), each strip runs
/// six rows at a time (12 sums in 8-lane registers: two panel loads, six broadcasts and twelve
/// multiply-adds per step); the block's last rows (a 16-row fractal's four, a 128-row tile's
/// two) then run against several strips at once, so that they too keep eight or twelve
/// independent sums instead of waiting on one multiply-add chain. Every sum is the fused
/// multiply-adds over `k` in order, so the bits are those of the portable fused form.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn panels_gemm_fma(
    c: &mut [f32],
    c_strip: usize,
    a: &[f32],
    panels: &[f32],
    (m, k, strips): (usize, usize, usize),
    accumulate: bool,
    ahead: &mut PrefetchQueue<'_>,
) {
    if k == 0 {
        // No multiply-adds: the sums are the accumulator or zeros, as the portable form gives.
        return panels_gemm_body::<true>(c, c_strip, a, panels, (m, k, strips), accumulate, ahead);
    }
    let block = (12 * 1024 / 4 / k).max(6) / 6 * 6;
    for b0 in (0..m).step_by(block) {
        let b1 = (b0 + block).min(m);
        let full = b0 + (b1 - b0) / 6 * 6;
        for s in 0..strips {
            let b = &panels[s * k * 16..(s + 1) * k * 16];
            for r0 in (b0..full).step_by(6) {
                let first = s * c_strip + r0 * 16;
                let args = (
                    &mut c[first..first + 96],
                    c_strip,
                    &a[r0 * k..(r0 + 6) * k],
                    b,
                    k,
                );
                // SAFETY: the CPU supports AVX2 and FMA (this function's contract); the kernel
                // checks its slices' lengths itself.
                unsafe { rows_times_panels_fma::<6, 1>(args, accumulate) };
                ahead.hint_lines(LINES_PER_GROUP);
            }
        }
        let mut r0 = full;
        while r0 < b1 {
            let take = match b1 - r0 {
                4 | 5 => 4,
                2 | 3 => 2,
                _ => 1,
            };
            let mut s = 0;
            while s < strips {
                let s_take = (strips - s).min(strips_fma(take));
                let first = s * c_strip + r0 * 16;
                let c_rows = &mut c[first..first + (s_take - 1) * c_strip + take * 16];
                let b = &panels[s * k * 16..(s + s_take) * k * 16];
                let args = (c_rows, c_strip, &a[r0 * k..(r0 + take) * k], b, k);
                // SAFETY: as above.
                unsafe {
                    match (take, s_take) {
                        (4, _) => rows_times_panels_fma::<4, 1>(args, accumulate),
                        (2, 3) => rows_times_panels_fma::<2, 3>(args, accumulate),
                        (2, 2) => rows_times_panels_fma::<2, 2>(args, accumulate),
                        (2, _) => rows_times_panels_fma::<2, 1>(args, accumulate),
                        (_, 4) => rows_times_panels_fma::<1, 4>(args, accumulate),
                        (_, 3) => rows_times_panels_fma::<1, 3>(args, accumulate),
                        (_, 2) => rows_times_panels_fma::<1, 2>(args, accumulate),
                        _ => rows_times_panels_fma::<1, 1>(args, accumulate),
                    }
                }
                // The same hinting rate per row and strip as the six-row groups.
                ahead.hint_lines((take * s_take * LINES_PER_GROUP).div_ceil(6));
                s += s_take;
            }
            r0 += take;
        }
    }
}

/// `R` rows of A against `S` panels in AVX2 + FMA registers (two 8-lane sums per row and
/// strip): `c` holds the `S` strips' `[R, 16]` rows `c_strip` apart, `a` is `[R, k]`, `b` the
/// `S` panels `[k, 16]` one after another. Each sum is `fma(a[r][p], b[s][p][j], sum)` for `p`
/// in order from the accumulator (or zero), as in [`rows_times_panel`]`::<true, R>`; the rows
/// of A and the panels are read through their own pointers and `k` is unrolled by four, so
/// each step issues its panel loads, `R` broadcasts and `2 R S` multiply-adds with little else.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn rows_times_panels_fma<const R: usize, const S: usize>(
    (c, c_strip, a, b, k): (&mut [f32], usize, &[f32], &[f32], usize),
    accumulate: bool,
) {
    use std::arch::x86_64::*;
    assert!(
        group_fits::<R, S>((c.len(), c_strip, a.len(), b.len(), k)),
        "AVX2 panel kernel: slices too short"
    );
    let (cp, ap, bp) = (c.as_mut_ptr(), a.as_ptr(), b.as_ptr());
    // SAFETY (every block below): the assert above bounds every offset: C's row `r` of strip
    // `s` is at `s * c_strip + r * 16 .. + 16`, A's element (r, p) at `r * k + p` (p < k),
    // panel `s`'s row `p` at `(s * k + p) * 16 .. + 16`; unaligned loads and stores need no
    // alignment.
    let mut acc = [[[_mm256_setzero_ps(); 2]; S]; R];
    if accumulate {
        for (r, row) in acc.iter_mut().enumerate() {
            for (s, v) in row.iter_mut().enumerate() {
                let at = s * c_strip + r * 16;
                *v = unsafe { [_mm256_loadu_ps(cp.add(at)), _mm256_loadu_ps(cp.add(at + 8))] };
            }
        }
    }
    let rows: [*const f32; R] = std::array::from_fn(|r| unsafe { ap.add(r * k) });
    let strips: [*const f32; S] = std::array::from_fn(|s| unsafe { bp.add(s * k * 16) });
    let step = |p: usize| {
        let bv: [[__m256; 2]; S] = std::array::from_fn(|s| unsafe {
            let at = strips[s].add(p * 16);
            [_mm256_loadu_ps(at), _mm256_loadu_ps(at.add(8))]
        });
        for (row, a_row) in acc.iter_mut().zip(&rows) {
            let x = unsafe { _mm256_broadcast_ss(&*a_row.add(p)) };
            for (v, bs) in row.iter_mut().zip(&bv) {
                v[0] = _mm256_fmadd_ps(x, bs[0], v[0]);
                v[1] = _mm256_fmadd_ps(x, bs[1], v[1]);
            }
        }
    };
    each_depth(k, step);
    for (r, row) in acc.iter().enumerate() {
        for (s, v) in row.iter().enumerate() {
            let at = s * c_strip + r * 16;
            unsafe {
                _mm256_storeu_ps(cp.add(at), v[0]);
                _mm256_storeu_ps(cp.add(at + 8), v[1]);
            }
        }
    }
}

/// Whether the portable build of [`panels_gemm`] (`TILEOPS_SIM_ISA=portable`, or a CPU without
/// AVX2 and FMA) makes fused multiply-adds (`f32::mul_add`, one rounding each) like the
/// register builds, so that every host path gives the same bits (the behaviour digests hold
/// under each). On a CPU without FMA `mul_add` is a library call: slow, but exact.
const PORTABLE_FUSED: bool = true;

/// Lines of a later gather's rows hinted after each six-row group of the panel kernels: a
/// 64-row f32 chunk of 576 columns is 2304 lines, and one chunk's matmuls run about 1500 row
/// groups.
const LINES_PER_GROUP: usize = 2;

/// The body of [`panels_gemm`]: blocks of rows of A of about 12 KiB (48 rows at k = 64), which
/// stay in the L1 cache beside a panel while every strip passes; within a block strip by strip,
/// and within a strip six rows at a time (then 4, 2, 1: a lone row waits on its multiply-add
/// latency), each sum over the whole `k` (`FUSED`: one rounding per multiply-add, the reference
/// the register kernels' bits are tested against; the fused builds run this form only when
/// `k = 0`).
#[inline(always)]
fn panels_gemm_body<const FUSED: bool>(
    c: &mut [f32],
    c_strip: usize,
    a: &[f32],
    panels: &[f32],
    (m, k, strips): (usize, usize, usize),
    accumulate: bool,
    ahead: &mut PrefetchQueue<'_>,
) {
    let block = (12 * 1024 / 4 / k.max(1)).max(6) / 6 * 6;
    for b0 in (0..m).step_by(block) {
        let b1 = (b0 + block).min(m);
        for s in 0..strips {
            let b = &panels[s * k * 16..(s + 1) * k * 16];
            let mut r0 = b0;
            while r0 < b1 {
                let take = match b1 - r0 {
                    6.. => 6,
                    4 | 5 => 4,
                    2 | 3 => 2,
                    _ => 1,
                };
                let a_rows = &a[r0 * k..(r0 + take) * k];
                let first = s * c_strip + r0 * 16;
                let c_rows = &mut c[first..first + take * 16];
                match take {
                    6 => rows_times_panel::<FUSED, 6>(c_rows, a_rows, b, k, accumulate),
                    4 => rows_times_panel::<FUSED, 4>(c_rows, a_rows, b, k, accumulate),
                    2 => rows_times_panel::<FUSED, 2>(c_rows, a_rows, b, k, accumulate),
                    _ => rows_times_panel::<FUSED, 1>(c_rows, a_rows, b, k, accumulate),
                }
                ahead.hint_lines(LINES_PER_GROUP);
                r0 += take;
            }
        }
    }
}

/// `R` rows of [`panels_gemm_body`] against one panel: `c` is `[R, 16]`, `a` is `[R, k]`.
#[inline(always)]
fn rows_times_panel<const FUSED: bool, const R: usize>(
    c: &mut [f32],
    a: &[f32],
    b: &[f32],
    k: usize,
    accumulate: bool,
) {
    let mut acc = [[0f32; 16]; R];
    if accumulate {
        for (s, row) in acc.iter_mut().zip(c.chunks_exact(16)) {
            s.copy_from_slice(row);
        }
    }
    let a: [&[f32]; R] = std::array::from_fn(|r| &a[r * k..(r + 1) * k]);
    for (p, bp) in b.chunks_exact(16).enumerate() {
        for r in 0..R {
            let x = a[r][p];
            for j in 0..16 {
                acc[r][j] = if FUSED {
                    x.mul_add(bp[j], acc[r][j])
                } else {
                    acc[r][j] + x * bp[j]
                };
            }
        }
    }
    for (s, row) in acc.iter().zip(c.chunks_exact_mut(16)) {
        row.copy_from_slice(s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `c (+)= a · b` in f64, for the strip kernel's shapes.
    fn model(c: &[f32], a: &[f32], b: &[f32], k: usize, accumulate: bool) -> Vec<f64> {
        let m = c.len() / 16;
        let mut out = vec![0f64; m * 16];
        for i in 0..m {
            for j in 0..16 {
                let mut s = if accumulate {
                    c[i * 16 + j] as f64
                } else {
                    0.0
                };
                for p in 0..k {
                    s += a[i * k + p] as f64 * b[p * 16 + j] as f64;
                }
                out[i * 16 + j] = s;
            }
        }
        out
    }

    fn values(n: usize, seed: u32) -> Vec<f32> {
        (0..n as u32)
            .map(|i| {
                let h = (i ^ seed).wrapping_mul(2_654_435_761).rotate_left(13);
                (h % 2001) as f32 / 1000.0 - 1.0
            })
            .collect()
    }

    /// [`panels_gemm`]'s C: `strips` strips of `[m, 16]`, `gap` sentinel rows after each.
    fn strips_of(m: usize, strips: usize, gap: usize, seed: u32) -> Vec<f32> {
        let mut c = Vec::new();
        for s in 0..strips {
            c.extend(values(m * 16, seed + s as u32));
            c.extend(std::iter::repeat_n(f32::NAN, gap * 16));
        }
        c
    }

    #[test]
    fn panels_kernel_matches_the_f64_product_on_every_row_count() {
        // Row counts around the 6/4/2/1-row steps, depths from one to a full K slice, one and
        // several strips, strips packed and a tile's worth of rows apart.
        type Kernel = fn(
            &mut [f32],
            usize,
            &[f32],
            &[f32],
            (usize, usize, usize),
            bool,
            &mut PrefetchQueue<'_>,
        );
        let hinted = vec![0u8; 64 * 64];
        for m in [1usize, 2, 3, 4, 5, 6, 7, 12, 13, 64, 128] {
            for k in [1usize, 15, 16, 64, 130] {
                for (strips, gap) in [(1, 0), (3, 0), (2, 5)] {
                    for accumulate in [false, true] {
                        let a = values(m * k, 1);
                        let panels = values(strips * k * 16, 2);
                        let c0 = strips_of(m, strips, gap, 3);
                        let pitch = (m + gap) * 16;
                        let dims = (m, k, strips);
                        // Both kernels hint a queue of rows on the way; results must not
                        // change, and every row group hints lines.
                        let [portable, dispatched] =
                            [panels_gemm_body::<false>, panels_gemm].map(|kernel: Kernel| {
                                let mut c = c0.clone();
                                let mut ahead = PrefetchQueue::default();
                                ahead.replace([&hinted[..]]);
                                kernel(&mut c, pitch, &a, &panels, dims, accumulate, &mut ahead);
                                // At least the six-row form's rate: a line per three rows and strips.
                                let lines = (strips * m).div_ceil(6);
                                assert!(ahead.lines_hinted() >= lines.min(64), "m={m}");
                                c
                            });
                        for s in 0..strips {
                            let strip = |c: &[f32]| c[s * pitch..s * pitch + m * 16].to_vec();
                            let b = &panels[s * k * 16..(s + 1) * k * 16];
                            let want = model(&strip(&c0), &a, b, k, accumulate);
                            for (name, got) in
                                [("portable", &portable), ("dispatched", &dispatched)]
                            {
                                for (e, (g, w)) in strip(got).iter().zip(&want).enumerate() {
                                    let tol = 1e-5 * (k as f64 + 1.0);
                                    assert!(
                                        (*g as f64 - w).abs() <= tol,
                                        "{name} m={m} k={k} strip {s}/{strips} acc={accumulate}: [{}, {}] {g} vs {w}",
                                        e / 16,
                                        e % 16
                                    );
                                }
                                let gaps = &got[s * pitch + m * 16..(s + 1) * pitch];
                                assert!(
                                    gaps.iter().all(|v| v.is_nan()),
                                    "{name}: wrote between strips"
                                );
                            }
                        }
                    }
                }
            }
        }
        // The one-strip form.
        let (a, b, c0) = (values(7 * 9, 4), values(9 * 16, 5), values(7 * 16, 6));
        let mut c = c0.clone();
        strip_gemm(&mut c, &a, &b, 9, true);
        let want = model(&c0, &a, &b, 9, true);
        assert!(c
            .iter()
            .zip(&want)
            .all(|(g, w)| (*g as f64 - w).abs() <= 1e-4));
    }

    /// The int8 product's AVX2 build gives the portable build's bits (and both the plain
    /// triple loop's), on shapes with tails, including wrapping sums.
    #[test]
    fn the_int_gemm_paths_give_the_same_bits() {
        let ints = |n: usize, seed: u32, big: bool| -> Vec<i32> {
            (0..n as u32)
                .map(|i| {
                    let x = i.wrapping_mul(2_654_435_761).wrapping_add(seed) >> 7;
                    if big {
                        x as i32
                    } else {
                        (x % 256) as i32 - 128
                    }
                })
                .collect()
        };
        for (m, k, n) in [
            (1, 1, 1),
            (3, 7, 5),
            (16, 256, 128),
            (17, 33, 257),
            (2, 0, 8),
        ] {
            for big in [false, true] {
                let (a, b, c0) = (
                    ints(m * k, 1, big),
                    ints(k * n, 2, big),
                    ints(m * n, 3, big),
                );
                let mut want = c0.clone();
                for i in 0..m {
                    for j in 0..n {
                        for p in 0..k {
                            want[i * n + j] = want[i * n + j]
                                .wrapping_add(a[i * k + p].wrapping_mul(b[p * n + j]));
                        }
                    }
                }
                let mut portable = c0.clone();
                int_gemm_body(&mut portable, &a, &b, (m, k, n));
                assert_eq!(portable, want, "portable {m}x{k}x{n}");
                let mut chosen = c0.clone();
                int_gemm(&mut chosen, &a, &b, (m, k, n));
                assert_eq!(chosen, want, "dispatched {m}x{k}x{n}");
                #[cfg(target_arch = "x86_64")]
                if has_avx2_fma() {
                    let mut avx2 = c0.clone();
                    // SAFETY: AVX2 was checked just above.
                    unsafe { int_gemm_avx2(&mut avx2, &a, &b, (m, k, n)) };
                    assert_eq!(avx2, want, "avx2 {m}x{k}x{n}");
                } else {
                    println!("AVX2 not available: the int8 AVX2 path is not tested on this CPU");
                }
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn every_avx2_register_kernel_gives_the_fused_sums_bit_for_bit() {
        if !has_avx2_fma() {
            println!(
                "AVX2 + FMA not available: the AVX2 register kernels are not tested on this CPU"
            );
            return;
        }
        // Each rows x strips form panels_gemm_fma uses, at depths around the unrolling by four
        // (and none), accumulating or not, strips packed and a tile apart: the same
        // multiply-adds in the same order as the generic fused form, one strip at a time.
        fn check<const R: usize, const S: usize>() {
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            for k in [0usize, 1, 3, 4, 5, 8, 63, 64, 67] {
                for gap in [0usize, 3] {
                    for accumulate in [false, true] {
                        let pitch = (R + gap) * 16;
                        let (a, b) = (values(R * k, 7), values(S * 16 * k, 8));
                        let c0 = strips_of(R, S, gap, 9);
                        let mut want = c0.clone();
                        for s in 0..S {
                            let c = &mut want[s * pitch..s * pitch + R * 16];
                            let panel = &b[s * 16 * k..(s + 1) * 16 * k];
                            rows_times_panel::<true, R>(c, &a, panel, k, accumulate);
                        }
                        let mut got = c0.clone();
                        // SAFETY: AVX2 and FMA were checked above.
                        unsafe {
                            rows_times_panels_fma::<R, S>((&mut got, pitch, &a, &b, k), accumulate)
                        };
                        assert_eq!(
                            bits(&got),
                            bits(&want),
                            "{R}x{S} k={k} gap={gap} accumulate={accumulate}"
                        );
                    }
                }
            }
        }
        check::<6, 1>();
        check::<4, 1>();
        check::<2, 3>();
        check::<2, 2>();
        check::<2, 1>();
        check::<1, 4>();
        check::<1, 3>();
        check::<1, 2>();
        check::<1, 1>();
    }

    /// Every build of [`panels_gemm`] (portable, AVX2 + FMA, AVX-512, and the one the host
    /// level selects) gives bit for bit the portable fused sums (`f32::mul_add` over `k` in order, one row
    /// and one strip at a time), on row counts around each build's groups (8/6/4/2/1 rows), odd
    /// strip counts, strips a tile apart and depths around the unrolling. A build this CPU lacks
    /// is skipped with a printed notice.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn every_fused_panels_build_gives_the_portable_fused_bits() {
        type Kernel = unsafe fn(
            &mut [f32],
            usize,
            &[f32],
            &[f32],
            (usize, usize, usize),
            bool,
            &mut PrefetchQueue<'_>,
        );
        // The portable build first: the one `TILEOPS_SIM_ISA=portable` (or a CPU without AVX2
        // and FMA) runs must give the fused bits too.
        let mut builds: Vec<(&str, Kernel)> =
            vec![("portable", panels_gemm_body::<PORTABLE_FUSED>)];
        if has_avx2_fma() {
            builds.push(("avx2+fma", panels_gemm_fma));
            if has_avx512() {
                builds.push(("avx512", panels_gemm_avx512));
            } else {
                println!(
                    "AVX-512F not available: the AVX-512 panels kernel is not tested on this CPU"
                );
            }
            builds.push(("dispatched", |c, cs, a, p, d, acc, q| {
                panels_gemm(c, cs, a, p, d, acc, q)
            }));
        } else {
            println!("AVX2 + FMA not available: no fused panels kernel runs on this CPU");
        }
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for m in [1usize, 2, 3, 5, 6, 7, 8, 9, 13, 16, 17, 49, 128] {
            for k in [0usize, 1, 3, 4, 5, 64, 67, 200] {
                for (strips, gap) in [(1, 0), (2, 3), (3, 0), (5, 1)] {
                    for accumulate in [false, true] {
                        let a = values(m * k, 11);
                        let panels = values(strips * k * 16, 12);
                        let c0 = strips_of(m, strips, gap, 13);
                        let pitch = (m + gap) * 16;
                        let mut want = c0.clone();
                        for s in 0..strips {
                            let b = &panels[s * k * 16..(s + 1) * k * 16];
                            for r in 0..m {
                                let at = s * pitch + r * 16;
                                let a_row = &a[r * k..(r + 1) * k];
                                let c_row = &mut want[at..at + 16];
                                rows_times_panel::<true, 1>(c_row, a_row, b, k, accumulate);
                            }
                        }
                        for (name, kernel) in &builds {
                            let mut got = c0.clone();
                            let ahead = &mut PrefetchQueue::default();
                            // SAFETY: each build was listed only if the CPU has its features.
                            unsafe {
                                kernel(
                                    &mut got,
                                    pitch,
                                    &a,
                                    &panels,
                                    (m, k, strips),
                                    accumulate,
                                    ahead,
                                )
                            };
                            assert_eq!(
                                bits(&got),
                                bits(&want),
                                "{name}: m={m} k={k} strips={strips} gap={gap} acc={accumulate}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn fused_and_portable_panels_kernels_agree_on_exact_sums() {
        if !has_avx2_fma() {
            return;
        }
        // Small integers: every product and partial sum is exact, so the two forms agree bit for
        // bit exactly when they add the same terms.
        let (m, k, strips) = (13, 37, 2);
        let a: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 - 3.0).collect();
        let b: Vec<f32> = (0..strips * k * 16).map(|i| (i % 5) as f32 - 2.0).collect();
        let mut fused = vec![1.0f32; strips * m * 16];
        let mut portable = fused.clone();
        // SAFETY: AVX2 and FMA were detected above.
        let ahead = &mut PrefetchQueue::default();
        unsafe { panels_gemm_fma(&mut fused, m * 16, &a, &b, (m, k, strips), true, ahead) };
        panels_gemm_body::<false>(&mut portable, m * 16, &a, &b, (m, k, strips), true, ahead);
        assert_eq!(fused, portable);
        let want: Vec<f32> = (0..strips)
            .flat_map(|s| {
                model(
                    &vec![1.0; m * 16],
                    &a,
                    &b[s * k * 16..(s + 1) * k * 16],
                    k,
                    true,
                )
            })
            .map(|v| v as f32)
            .collect();
        assert_eq!(fused, want);
    }
}
