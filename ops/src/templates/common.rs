//! Small pieces the kernel templates and the op kernels built from them share: the AIV and
//! ping-pong loop helpers, the f32-to-data-dtype store, the slice chooser and the running-max
//! seed. A leaf: it imports nothing of the crate.

use tile_backend::dsl::Body;
use tile_backend::ir::{Expr, GmView, RoundMode, TileId, TileRef};

pub(crate) use tile_backend::ir::round_up;

/// The running max a head starts with (finite, so empty splits stay NaN-free).
pub(crate) const M_INIT: f64 = -1e30;

/// Runs `f` on the AIVs that hold data: both, or AIV0 alone in a single-vector-core kernel
/// (`AttnCfg::single`, `FlashCfg::single`: `SingleModeVec0` writes only AIV0's UB, so
/// AIV1's copies of the handed-over tiles are never written). AIV1 still runs every channel
/// op, so the sync pass, which binds a channel op to the pipe of its neighbouring data op,
/// pairs the same flags on both AIVs.
pub(crate) fn aiv0(b: &mut Body<'_>, single: bool, f: impl FnOnce(&mut Body<'_>)) {
    if single {
        b.if_(Expr::SubBlockIdx.eq_(0), f);
    } else {
        f(b);
    }
}

/// Emits a ping-pong loop over `iters` iterations unrolled by two: `body(b, it, slot)` with the
/// constant slot 0 for even iterations and 1 for odd ones.
pub(crate) fn ping_pong(
    b: &mut Body<'_>,
    iters: Expr,
    body: &mut dyn FnMut(&mut Body<'_>, Expr, u64),
) {
    b.for_range("cp", 0, iters.clone(), 2, |lb, ip| {
        body(lb, Expr::Var(ip), 0);
        let odd = ip + 1;
        lb.if_(odd.clone().lt(iters), |ib| body(ib, odd, 1));
    });
}

/// Stores the f32 tile `src` to `dst`; when the data dtype is not f32, through `cast` (the
/// data dtype's tile, its valid shape set to `rows x cols` first).
pub(crate) fn store_in_dtype(
    b: &mut Body<'_>,
    dst: GmView,
    src: impl Into<TileRef>,
    cast: Option<TileId>,
    (rows, cols): (impl Into<Expr>, impl Into<Expr>),
) {
    match cast {
        Some(ct) => {
            b.set_validshape(ct, rows, cols);
            b.cast(ct, src, RoundMode::Rint);
            b.store(dst, ct);
        }
        None => {
            b.store(dst, src);
        }
    }
}

/// The largest multiple of 16 that divides `total` (a multiple of 16) and is at most `max`.
pub(crate) fn best_slice(total: u64, max: u64) -> u64 {
    let mut s = max.min(total) / 16 * 16;
    while s > 16 && !total.is_multiple_of(s) {
        s -= 16;
    }
    s.max(16)
}
