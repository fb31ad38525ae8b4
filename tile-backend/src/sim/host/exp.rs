//! Host speed for exp over a slice: the model is `numeric::exp_f32` (its meaning); these are
//! its loop compiled for wider vectors, the same bits.

use super::host_isa;
use crate::sim::numeric::exp_f32;

/// [`exp_f32`] over a slice in place. Where the host level allows AVX2 ([`host_isa`]) the loop
/// is compiled for 8-lane vectors (16 with AVX-512F) instead of the baseline's 4; the
/// arithmetic is the same (separate multiplies and adds, no fused multiply-add), so the results
/// are bit-identical to the portable body's.
pub(crate) fn exp_in_place(x: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if host_isa().avx512f() {
        // SAFETY: `exp_in_place_avx512` requires only that the CPU supports AVX-512F, which
        // `host_isa()` allows only when the CPU runs it; it indexes its slice safely.
        unsafe { exp_in_place_avx512(x) };
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if host_isa().avx2_fma() {
        // SAFETY: `exp_in_place_avx2` requires only that the CPU supports AVX2, which
        // `host_isa()` allows only when the CPU runs it; it indexes its slice safely.
        unsafe { exp_in_place_avx2(x) };
        return;
    }
    x.iter_mut().for_each(|v| *v = exp_f32(*v));
}

/// [`exp_in_place`] compiled for AVX2.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn exp_in_place_avx2(x: &mut [f32]) {
    x.iter_mut().for_each(|v| *v = exp_f32(*v));
}

/// [`exp_in_place`] compiled for AVX-512F (16 lanes; the same separate multiplies and
/// adds, so the same bits).
///
/// # Safety
/// The CPU must support AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn exp_in_place_avx512(x: &mut [f32]) {
    x.iter_mut().for_each(|v| *v = exp_f32(*v));
}
