//! Shared pieces of the model: RMSNorm, LayerNorm, RoPE, linear layers, per-op timers.

use candle_core::{DType, Tensor, D};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::error::Result;

/// Wall time per operation name, accumulated.
#[derive(Debug, Default)]
pub struct Timers {
    inner: RefCell<BTreeMap<&'static str, (Duration, usize)>>,
}

impl Timers {
    /// Runs `f`, charging its time to `name`.
    pub fn time<R>(&self, name: &'static str, f: impl FnOnce() -> R) -> R {
        let t = Instant::now();
        let r = f();
        let mut m = self.inner.borrow_mut();
        let e = m.entry(name).or_default();
        e.0 += t.elapsed();
        e.1 += 1;
        r
    }

    /// `(name, total time, calls)`, largest time first.
    pub fn report(&self) -> Vec<(&'static str, Duration, usize)> {
        let mut v: Vec<_> = self
            .inner
            .borrow()
            .iter()
            .map(|(k, v)| (*k, v.0, v.1))
            .collect();
        v.sort_by_key(|e| std::cmp::Reverse(e.1));
        v
    }

    /// Forgets everything recorded.
    pub fn reset(&self) {
        self.inner.borrow_mut().clear();
    }
}

/// RMSNorm over the last dim (eps 1e-6) times `w`.
pub fn rms_norm(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let ms = x.sqr()?.mean_keepdim(D::Minus1)?;
    Ok(x.broadcast_div(&(ms + 1e-6)?.sqrt()?)?.broadcast_mul(w)?)
}

/// LayerNorm over the last dim (eps 1e-6, biased variance) times `w` plus `b`.
pub fn layer_norm(x: &Tensor, w: &Tensor, b: &Tensor) -> Result<Tensor> {
    let centred = x.broadcast_sub(&x.mean_keepdim(D::Minus1)?)?;
    let var = centred.sqr()?.mean_keepdim(D::Minus1)?;
    Ok(centred
        .broadcast_div(&(var + 1e-6)?.sqrt()?)?
        .broadcast_mul(w)?
        .broadcast_add(b)?)
}

/// `x · w^T` for `x [.., K]` and `w [N, K]`, row-invariant ([`matmul_rows`]).
pub fn linear(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    matmul_rows(x, &w.t()?)
}

/// `a · b` (broadcast over the leading dims) for `a [.., M, K]` and `b [.., K, N]`, in which a
/// row's result does not depend on the other rows, bit for bit.
///
/// candle's CPU matmul (the `gemm` crate) picks its kernel by size: a single row takes a
/// matrix-vector kernel and products with `M * N <= 256` a horizontal kernel, each summing in
/// its own order, so the same row gets other bits inside a larger batch. Products with fewer
/// than [`row_invariant_min_rows`] rows are padded with zero rows to that count (and the padding
/// dropped), so every product runs the general kernel, whose result for a row is the same for
/// every `M`. This is what makes a request's logits independent of the batch it runs in (the
/// serving engine's batch invariance).
///
/// The padding is on only inside [`with_row_invariance`]`(true, ..)` (the model's
/// `batch_invariant` mode): it costs the serving engine's single-sequence decode about 2.4x
/// (docs/serving.md); elsewhere this is a plain `broadcast_matmul`.
pub fn matmul_rows(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let rank = a.rank();
    if rank < 2 || !ROW_INVARIANT.with(Cell::get) {
        return Ok(a.broadcast_matmul(b)?);
    }
    let (m, k) = (a.dim(rank - 2)?, a.dim(rank - 1)?);
    let n = b.dim(b.rank().saturating_sub(1))?;
    let min = row_invariant_min_rows(n, k);
    if m == 0 || m >= min {
        return Ok(a.broadcast_matmul(b)?);
    }
    let mut pad_shape = a.dims().to_vec();
    pad_shape[rank - 2] = min - m;
    let pad = Tensor::zeros(pad_shape, a.dtype(), a.device())?;
    let padded = Tensor::cat(&[a, &pad], rank - 2)?;
    Ok(padded.broadcast_matmul(b)?.narrow(rank - 2, 0, m)?)
}

thread_local! {
    /// Whether [`matmul_rows`] pads on this thread.
    static ROW_INVARIANT: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with [`matmul_rows`]'s row-invariant padding `on` (or off) on this thread, restoring
/// the previous setting afterwards (also if `f` panics).
pub fn with_row_invariance<R>(on: bool, f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            ROW_INVARIANT.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(ROW_INVARIANT.with(|c| c.replace(on)));
    f()
}

/// The fewest rows with which a product of `n` columns and contraction `k` takes `gemm`'s
/// general kernel whatever the row count: at least 2 (no matrix-vector kernel) and more than
/// `256 / n` (no horizontal kernel). Up to `k = 512` the general kernel sums the whole
/// contraction in one pass for every block shape; past it, products with `M, N <= 64` would
/// block K otherwise, so a narrow product (`n <= 64`) then takes more than 64 rows.
pub fn row_invariant_min_rows(n: usize, k: usize) -> usize {
    if k > 512 && n <= 64 {
        65
    } else {
        (256 / n.max(1) + 1).max(2)
    }
}

/// SiLU.
pub fn silu(x: &Tensor) -> Result<Tensor> {
    Ok((x * sigmoid(x)?)?)
}

/// Logistic sigmoid.
pub fn sigmoid(x: &Tensor) -> Result<Tensor> {
    Ok((x.neg()?.exp()? + 1.0)?.recip()?)
}

/// RoPE tables for `positions`: `(cos, sin)`, each `[N, freqs.len()]`.
pub fn rope_tables(freqs: &[f32], positions: &[usize]) -> Result<(Tensor, Tensor)> {
    let n = positions.len();
    let half = freqs.len();
    let mut c = Vec::with_capacity(n * half);
    let mut s = Vec::with_capacity(n * half);
    for &p in positions {
        for &f in freqs {
            let a = p as f32 * f;
            c.push(a.cos());
            s.push(a.sin());
        }
    }
    let dev = &candle_core::Device::Cpu;
    Ok((
        Tensor::from_vec(c, (n, half), dev)?,
        Tensor::from_vec(s, (n, half), dev)?,
    ))
}

/// Rotates `x [N, heads, 2 * half]` by the tables: MLA's interleaved form (adjacent pairs)
/// or the indexer's halves form (`i` with `i + half`).
pub fn rope(x: &Tensor, cos: &Tensor, sin: &Tensor, interleaved: bool) -> Result<Tensor> {
    let (n, h, d) = x.dims3()?;
    let half = d / 2;
    let cos = cos.reshape((n, 1, half))?;
    let sin = sin.reshape((n, 1, half))?;
    let rot = |a: &Tensor, b: &Tensor| -> Result<(Tensor, Tensor)> {
        let ra = (a.broadcast_mul(&cos)? - b.broadcast_mul(&sin)?)?;
        let rb = (a.broadcast_mul(&sin)? + b.broadcast_mul(&cos)?)?;
        Ok((ra, rb))
    };
    if interleaved {
        let p = x.reshape((n, h, half, 2))?;
        let a = p.narrow(3, 0, 1)?.squeeze(3)?;
        let b = p.narrow(3, 1, 1)?.squeeze(3)?;
        let (ra, rb) = rot(&a, &b)?;
        Ok(Tensor::stack(&[ra, rb], 3)?.reshape((n, h, d))?)
    } else {
        let a = x.narrow(2, 0, half)?;
        let b = x.narrow(2, half, half)?;
        let (ra, rb) = rot(&a, &b)?;
        Ok(Tensor::cat(&[ra, rb], 2)?)
    }
}

/// A tensor's values as f32 (any float dtype, any shape).
pub fn to_vec_f32(t: &Tensor) -> Result<Vec<f32>> {
    Ok(t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?)
}
