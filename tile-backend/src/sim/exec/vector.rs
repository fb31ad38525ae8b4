//! Vector ops on the valid region: decode to scratch (f32 for floats, f64 for integers so they
//! stay exact), compute, round once on the way back.

use super::ExecCtx;
use crate::ir::{Axis, BinaryOp, DType, Layout, PadValue, ReduceOp, RoundMode, UnaryOp, VectorOp};
use crate::sim::numeric;
use crate::sim::state::ScratchPool;
use crate::sim::tile::{self, TileLoc};
use crate::sim::SimFault;
use num_traits::Float;

/// Scratch element type: f32 for float tiles, f64 for integer tiles.
trait Scratch: Float + Send + Sync + 'static {
    fn from_bytes(dtype: DType, b: &[u8]) -> Self;
    fn to_bytes(self, dtype: DType, round: RoundMode, out: &mut [u8]);
    fn from_f64(v: f64) -> Self;
    /// `n` zeroed values from the core's pool.
    fn take(pool: &mut ScratchPool, n: usize) -> Vec<Self>;
    /// `n` values of unspecified content from the core's pool, for a caller that overwrites
    /// every one before reading it.
    fn take_dirty(pool: &mut ScratchPool, n: usize) -> Vec<Self>;
    /// Gives a buffer back to the pool.
    fn give(pool: &mut ScratchPool, v: Vec<Self>);
    /// The vector unit's exponential (f32: [`numeric::exp_f32`]).
    fn exp_model(self) -> Self;
    /// [`Scratch::exp_model`] over a slice in place.
    fn exp_in_place(x: &mut [Self]) {
        x.iter_mut().for_each(|v| *v = v.exp_model());
    }
    /// Decodes a whole buffer (f32: the dtype is matched once).
    fn decode(dtype: DType, bytes: &[u8], out: &mut [Self]) {
        let es = dtype.size_bytes() as usize;
        for (o, b) in out.iter_mut().zip(bytes.chunks_exact(es)) {
            *o = Self::from_bytes(dtype, b);
        }
    }
    /// Encodes a whole buffer.
    fn encode(dtype: DType, round: RoundMode, vals: &[Self], bytes: &mut [u8]) {
        let es = dtype.size_bytes() as usize;
        for (v, b) in vals.iter().zip(bytes.chunks_exact_mut(es)) {
            v.to_bytes(dtype, round, b);
        }
    }
}

fn encode_any(dtype: DType, v: f64, round: RoundMode, out: &mut [u8]) {
    if dtype.is_float() {
        numeric::encode_one(dtype, v as f32, out)
    } else if v.is_nan() {
        numeric::encode_i64(dtype, 0, out)
    } else {
        numeric::encode_i64(
            dtype,
            round.round(v).clamp(i64::MIN as f64, i64::MAX as f64) as i64,
            out,
        )
    }
}

impl Scratch for f32 {
    fn from_bytes(dtype: DType, b: &[u8]) -> Self {
        numeric::decode_one(dtype, b)
    }
    fn exp_model(self) -> Self {
        numeric::exp_f32(self)
    }
    fn exp_in_place(x: &mut [Self]) {
        numeric::exp_f32_in_place(x)
    }
    fn to_bytes(self, dtype: DType, round: RoundMode, out: &mut [u8]) {
        encode_any(dtype, self as f64, round, out)
    }
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn take(pool: &mut ScratchPool, n: usize) -> Vec<Self> {
        pool.f32s(n)
    }
    fn take_dirty(pool: &mut ScratchPool, n: usize) -> Vec<Self> {
        pool.f32s_to_overwrite(n)
    }
    fn give(pool: &mut ScratchPool, v: Vec<Self>) {
        pool.put_f32s(v)
    }
    fn decode(dtype: DType, bytes: &[u8], out: &mut [Self]) {
        numeric::decode_f32(dtype, bytes, out)
    }
    fn encode(dtype: DType, round: RoundMode, vals: &[Self], bytes: &mut [u8]) {
        if dtype.is_float() {
            numeric::encode_f32(dtype, vals, bytes)
        } else {
            let es = dtype.size_bytes() as usize;
            for (v, b) in vals.iter().zip(bytes.chunks_exact_mut(es)) {
                v.to_bytes(dtype, round, b);
            }
        }
    }
}

impl Scratch for f64 {
    fn exp_model(self) -> Self {
        self.exp()
    }
    fn from_bytes(dtype: DType, b: &[u8]) -> Self {
        if dtype.is_float() {
            numeric::decode_one(dtype, b) as f64
        } else {
            numeric::decode_i64(dtype, b) as f64
        }
    }
    fn to_bytes(self, dtype: DType, round: RoundMode, out: &mut [u8]) {
        encode_any(dtype, self, round, out)
    }
    fn from_f64(v: f64) -> Self {
        v
    }
    fn take(pool: &mut ScratchPool, n: usize) -> Vec<Self> {
        pool.f64s(n)
    }
    fn take_dirty(pool: &mut ScratchPool, n: usize) -> Vec<Self> {
        pool.f64s(n)
    }
    fn give(pool: &mut ScratchPool, v: Vec<Self>) {
        pool.put_f64s(v)
    }
}

fn load<F: Scratch>(
    cx: &mut ExecCtx<'_, '_, '_>,
    loc: &TileLoc,
    rows: usize,
    cols: usize,
) -> Result<Vec<F>, SimFault> {
    let aiv = cx.own_aiv();
    cx.require_defined(loc, aiv, (0, 0), (rows, cols), "a vector op")?;
    // Every element is decoded below before it is read.
    let mut out = F::take_dirty(&mut cx.core.pool, rows * cols);
    let (dtype, es) = (loc.ty.dtype, loc.es());
    // Decoded straight from the tile's runs into row-major scratch.
    let r = cx.read_runs(loc, aiv, (0, 0), (rows, cols), |b, run| {
        if run.stride == 1 {
            F::decode(dtype, b, &mut out[run.elem..run.elem + run.len]);
        } else {
            // Down a column: decode a chunk at once, then spread it over the rows.
            let mut tmp = [F::zero(); 64];
            for (k, chunk) in b.chunks(64 * es).enumerate() {
                let n = chunk.len() / es;
                F::decode(dtype, chunk, &mut tmp[..n]);
                let first = run.elem + k * 64 * run.stride;
                for (i, v) in tmp[..n].iter().enumerate() {
                    out[first + i * run.stride] = *v;
                }
            }
        }
    });
    match r {
        Ok(()) => Ok(out),
        Err(e) => {
            F::give(&mut cx.core.pool, out);
            Err(e)
        }
    }
}

/// Encodes `vals` into the tile's `rows x cols` region and gives the buffer back to the pool.
fn store<F: Scratch>(
    cx: &mut ExecCtx<'_, '_, '_>,
    loc: &TileLoc,
    rows: usize,
    cols: usize,
    vals: Vec<F>,
    round: RoundMode,
) -> Result<(), SimFault> {
    let (dtype, es) = (loc.ty.dtype, loc.es());
    let aiv = cx.own_aiv();
    // Encoded straight into the tile's runs.
    let r = cx.write_runs(loc, aiv, (0, 0), (rows, cols), |b, run| {
        if run.stride == 1 {
            F::encode(dtype, round, &vals[run.elem..run.elem + run.len], b);
        } else {
            // Down a column: gather a chunk from the rows, then encode it at once.
            let mut tmp = [F::zero(); 64];
            for (k, chunk) in b.chunks_mut(64 * es).enumerate() {
                let n = chunk.len() / es;
                let first = run.elem + k * 64 * run.stride;
                for (i, v) in tmp[..n].iter_mut().enumerate() {
                    *v = vals[first + i * run.stride];
                }
                F::encode(dtype, round, &tmp[..n], chunk);
            }
        }
    });
    F::give(&mut cx.core.pool, vals);
    r
}

fn same(a: (usize, usize), b: (usize, usize), what: &'static str) -> Result<(), SimFault> {
    if a != b {
        return Err(SimFault::ShapeMismatch { what, a, b });
    }
    Ok(())
}

/// `x[i] = op(x[i], y[i])`, the op matched once so each loop vectorises.
fn zip_apply<F: Float>(op: BinaryOp, x: &mut [F], y: &[F]) {
    macro_rules! go {
        ($f:expr) => {
            for (p, q) in x.iter_mut().zip(y) {
                *p = $f(*p, *q);
            }
        };
    }
    match op {
        BinaryOp::Add => go!(|a: F, b: F| a + b),
        BinaryOp::Sub => go!(|a: F, b: F| a - b),
        BinaryOp::Mul => go!(|a: F, b: F| a * b),
        BinaryOp::Div => go!(|a: F, b: F| a / b),
        BinaryOp::Max => go!(|a: F, b: F| a.max(b)),
        BinaryOp::Min => go!(|a: F, b: F| a.min(b)),
    }
}

/// `x[i] = op(x[i], k)`, the op matched once. A multiply or divide by exactly 1 leaves `x`
/// as it is (the same values bit for bit, a signalling NaN aside, which the arithmetic would
/// quieten): an online softmax rescales by `exp(0) = 1` every row whose maximum did not grow.
fn scalar_apply<F: Float>(op: BinaryOp, x: &mut [F], k: F) {
    if matches!(op, BinaryOp::Mul | BinaryOp::Div) && k == F::one() {
        return;
    }
    macro_rules! go {
        ($f:expr) => {
            for p in x.iter_mut() {
                *p = $f(*p, k);
            }
        };
    }
    match op {
        BinaryOp::Add => go!(|a: F, b: F| a + b),
        BinaryOp::Sub => go!(|a: F, b: F| a - b),
        BinaryOp::Mul => go!(|a: F, b: F| a * b),
        BinaryOp::Div => go!(|a: F, b: F| a / b),
        BinaryOp::Max => go!(|a: F, b: F| a.max(b)),
        BinaryOp::Min => go!(|a: F, b: F| a.min(b)),
    }
}

/// `x[i] = op(x[i])`, the op matched once.
fn unary_apply<F: Scratch>(op: UnaryOp, x: &mut [F]) {
    macro_rules! go {
        ($f:expr) => {
            for p in x.iter_mut() {
                *p = $f(*p);
            }
        };
    }
    match op {
        UnaryOp::Exp => F::exp_in_place(x),
        UnaryOp::Ln => go!(|v: F| v.ln()),
        UnaryOp::Abs => go!(|v: F| v.abs()),
        UnaryOp::Neg => go!(|v: F| -v),
        UnaryOp::Sqrt => go!(|v: F| v.sqrt()),
        UnaryOp::Rsqrt => go!(|v: F| v.sqrt().recip()),
        UnaryOp::Recip => go!(|v: F| v.recip()),
        UnaryOp::Relu => go!(|v: F| v.max(F::zero())),
    }
}

fn pad_value(dtype: DType, pad: PadValue) -> Option<f64> {
    let (lo, hi) = match dtype {
        d if d.is_float() => (f64::NEG_INFINITY, f64::INFINITY),
        DType::I8 => (-128.0, 127.0),
        DType::U8 => (0.0, 255.0),
        DType::I32 => (i32::MIN as f64, i32::MAX as f64),
        DType::I64 => (i64::MIN as f64, i64::MAX as f64),
        _ => (0.0, u64::MAX as f64),
    };
    match pad {
        PadValue::Null => None,
        PadValue::Zero => Some(0.0),
        PadValue::Max => Some(hi),
        PadValue::Min => Some(lo),
    }
}

/// A vector op's tiles, each resolved once for the op: the one it writes and up to two it
/// reads, in the order of its fields (the first source, then the second: `lhs` and `rhs`, or
/// `src` and the broadcast `operand`).
struct Locs<'k> {
    dst: TileLoc<'k>,
    a: Option<TileLoc<'k>>,
    b: Option<TileLoc<'k>>,
}

impl<'k> Locs<'k> {
    /// Resolves `op`'s tiles, sources first (`None` for an op that writes no tile).
    fn of(cx: &ExecCtx<'k, '_, '_>, op: &VectorOp) -> Result<Option<Self>, SimFault> {
        let (a, b) = match op {
            VectorOp::Unary { src, .. }
            | VectorOp::BinaryScalar { src, .. }
            | VectorOp::Reduce { src, .. }
            | VectorOp::Expand { src, .. }
            | VectorOp::Cast { src, .. }
            | VectorOp::LeakyRelu { src, .. } => (Some(cx.tile(src)?), None),
            VectorOp::Binary { lhs, rhs, .. } => (Some(cx.tile(lhs)?), Some(cx.tile(rhs)?)),
            VectorOp::Broadcast { src, operand, .. } => {
                (Some(cx.tile(src)?), Some(cx.tile(operand)?))
            }
            VectorOp::Fill { .. } | VectorOp::SetValidShape { .. } | VectorOp::FillPad { .. } => {
                (None, None)
            }
        };
        let Some(dst) = op.written() else {
            return Ok(None);
        };
        Ok(Some(Locs {
            dst: cx.tile(dst)?,
            a,
            b,
        }))
    }

    /// The first source. (A match, not `ok_or`, which would build the fault on every call.)
    fn a(&self) -> Result<TileLoc<'k>, SimFault> {
        match self.a {
            Some(l) => Ok(l),
            None => Err(SimFault::Internal("a vector op without its first source")),
        }
    }

    /// The second source.
    fn b(&self) -> Result<TileLoc<'k>, SimFault> {
        match self.b {
            Some(l) => Ok(l),
            None => Err(SimFault::Internal("a vector op without its second source")),
        }
    }
}

pub(super) fn exec(cx: &mut ExecCtx<'_, '_, '_>, op: &VectorOp) -> Result<(), SimFault> {
    match op {
        VectorOp::SetValidShape { tile, rows, cols } => {
            let (r, c) = (cx.core.eval(rows)?, cx.core.eval(cols)?);
            let decl = cx
                .kernel
                .try_tile(tile.tile)
                .ok_or(SimFault::UnknownTile { id: tile.tile.0 })?;
            if r < 0 || c < 0 || r as u64 > decl.ty.rows || c as u64 > decl.ty.cols {
                return Err(SimFault::ValidShapeTooLarge {
                    tile: decl.name.clone(),
                    rows: r,
                    cols: c,
                    shape: (decl.ty.rows, decl.ty.cols),
                });
            }
            if let Some(v) = cx.core.valid.get_mut(tile.tile.0 as usize) {
                *v = Some((r as u64, c as u64));
            }
            Ok(())
        }
        VectorOp::FillPad { tile } => {
            let loc = cx.tile(tile)?;
            let Some(v) = pad_value(loc.ty.dtype, loc.ty.pad) else {
                return Ok(());
            };
            let es = loc.es();
            // One element's bytes (at most 8).
            let mut one_buf = [0u8; 8];
            let Some(one) = one_buf.get_mut(..es) else {
                return Err(SimFault::Internal("a pad element wider than 8 bytes"));
            };
            encode_any(loc.ty.dtype, v, RoundMode::Rint, one);
            let one: &[u8] = one;
            let (vr, vc) = loc.valid()?;
            let aiv = cx.own_aiv();
            // Right of the valid columns, then below the valid rows.
            let regions = [
                ((0, vc), (vr, loc.cols() - vc)),
                ((vr, 0), (loc.rows() - vr, loc.cols())),
            ];
            // ND and NZ tiles are filled in place, strip by strip.
            if matches!(loc.ty.layout, Layout::ND | Layout::NZ) {
                for (at, size) in regions {
                    if size.0 > 0 && size.1 > 0 {
                        let filled = cx.write_dense(&loc, aiv, at, size, |buf| {
                            tile::fill_dense(buf, &loc, at, size, one)
                        })?;
                        if !filled {
                            return Err(SimFault::Internal(
                                "a fill-pad of an ND or NZ tile declined",
                            ));
                        }
                    }
                }
                return Ok(());
            }
            // Other layouts: the pad regions' bytes, row-major, in a pooled buffer.
            let fill = |cx: &mut ExecCtx<'_, '_, '_>, at, (h, w): (usize, usize)| {
                let mut b = cx.core.pool.bytes_to_overwrite(h * w * es);
                b.chunks_exact_mut(es).for_each(|e| e.copy_from_slice(one));
                let r = cx.write_bytes(&loc, aiv, at, (h, w), &b);
                cx.core.pool.put_bytes(b);
                r
            };
            if vc < loc.cols() {
                fill(cx, (0, vc), (vr, loc.cols() - vc))?;
            }
            if vr < loc.rows() {
                fill(cx, (vr, 0), (loc.rows() - vr, loc.cols()))?;
            }
            Ok(())
        }
        VectorOp::Unary { .. }
        | VectorOp::Binary { .. }
        | VectorOp::BinaryScalar { .. }
        | VectorOp::Reduce { .. }
        | VectorOp::Broadcast { .. }
        | VectorOp::Expand { .. }
        | VectorOp::Cast { .. }
        | VectorOp::LeakyRelu { .. }
        | VectorOp::Fill { .. } => {
            let Some(l) = Locs::of(cx, op)? else {
                return Ok(());
            };
            // Integer tiles (and casts from them) compute in f64 to stay exact.
            let src_float = match op {
                VectorOp::Cast { .. } => l.a()?.ty.dtype.is_float(),
                VectorOp::Unary { .. }
                | VectorOp::Binary { .. }
                | VectorOp::BinaryScalar { .. }
                | VectorOp::Reduce { .. }
                | VectorOp::Broadcast { .. }
                | VectorOp::Expand { .. }
                | VectorOp::LeakyRelu { .. }
                | VectorOp::Fill { .. }
                | VectorOp::SetValidShape { .. }
                | VectorOp::FillPad { .. } => true,
            };
            if l.dst.ty.dtype.is_float() && src_float {
                if in_place_f32(cx, op, &l)? {
                    return Ok(());
                }
                run::<f32>(cx, op, &l)
            } else {
                run::<f64>(cx, op, &l)
            }
        }
    }
}

/// Calls `$go!(init, step)` with the reduction's starting value and step as an inlined closure,
/// so each use is compiled (and vectorised) per op rather than calling a step per element.
macro_rules! with_reduction {
    ($red:expr, $F:ty, $go:ident) => {
        match $red {
            ReduceOp::Sum => $go!(<$F>::zero(), |a: $F, b: $F| a + b),
            ReduceOp::Max => $go!(<$F>::neg_infinity(), |a: $F, b: $F| a.max(b)),
            ReduceOp::Min => $go!(<$F>::infinity(), |a: $F, b: $F| a.min(b)),
        }
    };
}

/// The reduction of one row: eight interleaved partial results (element `i` goes to lane `i %
/// 8`), combined pairwise in a fixed order, so the order is the same on every host and the
/// loop vectorises. An empty row gives the starting value.
fn reduce_row<F: Float>(red: ReduceOp, row: &[F]) -> F {
    macro_rules! go {
        ($init:expr, $f:expr) => {{
            let f = $f;
            let mut acc = [$init; 8];
            let mut chunks = row.chunks_exact(8);
            for c in chunks.by_ref() {
                for j in 0..8 {
                    acc[j] = f(acc[j], c[j]);
                }
            }
            for (a, v) in acc.iter_mut().zip(chunks.remainder()) {
                *a = f(*a, *v);
            }
            let q = [
                f(acc[0], acc[4]),
                f(acc[1], acc[5]),
                f(acc[2], acc[6]),
                f(acc[3], acc[7]),
            ];
            f(f(q[0], q[2]), f(q[1], q[3]))
        }};
    }
    with_reduction!(red, F, go)
}

/// Folds `rows` rows of a slab (`out.len()` values each, `pitch` apart) into `out` column by
/// column, starting from the reduction's starting value.
fn reduce_cols<F: Float>(red: ReduceOp, slab: &[F], pitch: usize, rows: usize, out: &mut [F]) {
    macro_rules! go {
        ($init:expr, $f:expr) => {{
            let f = $f;
            out.fill($init);
            let cols = out.len();
            for i in 0..rows {
                let row = &slab[i * pitch..i * pitch + cols];
                for (a, b) in out.iter_mut().zip(row) {
                    *a = f(*a, *b);
                }
            }
        }};
    }
    with_reduction!(red, F, go)
}

/// Whether two resolved tiles are the same bytes of the same type (an op written in place).
fn same_tile(a: &TileLoc, b: &TileLoc) -> bool {
    a.addr == b.addr && a.ty == b.ty
}

/// Calls `f` on each of the `rows` rows (`cols` values, `pitch` apart) of a slab.
fn rows_of(
    slab: &mut [f32],
    pitch: usize,
    rows: usize,
    cols: usize,
    mut f: impl FnMut(usize, &mut [f32]),
) {
    if cols == pitch {
        for (i, row) in slab.chunks_exact_mut(cols).take(rows).enumerate() {
            f(i, row);
        }
    } else {
        for i in 0..rows {
            f(i, &mut slab[i * pitch..i * pitch + cols]);
        }
    }
}

/// The f32 ops whose destination is an f32 ND tile computed in place in the UB (the tile is
/// also the first operand, or a reduction reads one): no decode into scratch and encode back,
/// the same arithmetic as [`run`], the same poison checks and marks. False (nothing done) for
/// any other form, which [`run`] then takes.
fn in_place_f32<'k>(
    cx: &mut ExecCtx<'k, '_, '_>,
    op: &VectorOp,
    l: &Locs<'k>,
) -> Result<bool, SimFault> {
    let aiv = cx.own_aiv();
    match op {
        VectorOp::Unary { op: u, .. } => {
            let (s, d) = (l.a()?, l.dst);
            let (r, c) = s.valid()?;
            if !same_tile(&s, &d) || d.valid()? != (r, c) {
                return Ok(false);
            }
            cx.require_defined(&s, aiv, (0, 0), (r, c), "a vector op")?;
            let done = cx.f32_nd_in_place(&d, aiv, (r, c), true, |slab, pitch| {
                rows_of(slab, pitch, r, c, |_, row| unary_apply(*u, row))
            })?;
            Ok(done.is_some())
        }
        VectorOp::BinaryScalar { op: b, scalar, .. } => {
            let (s, d) = (l.a()?, l.dst);
            let (r, c) = s.valid()?;
            if !same_tile(&s, &d) || d.valid()? != (r, c) {
                return Ok(false);
            }
            let k = cx.scalar(scalar)? as f32;
            cx.require_defined(&s, aiv, (0, 0), (r, c), "a vector op")?;
            let done = cx.f32_nd_in_place(&d, aiv, (r, c), true, |slab, pitch| {
                rows_of(slab, pitch, r, c, |_, row| scalar_apply(*b, row, k))
            })?;
            Ok(done.is_some())
        }
        VectorOp::Binary { op: b, .. } => {
            let (a, bb, d) = (l.a()?, l.b()?, l.dst);
            let (r, c) = a.valid()?;
            if !same_tile(&a, &d) || d.valid()? != (r, c) || bb.valid()? != (r, c) {
                return Ok(false);
            }
            if super::f32_nd_slab(&d, (r, c)).is_none() {
                return Ok(false);
            }
            cx.require_defined(&a, aiv, (0, 0), (r, c), "a vector op")?;
            cx.require_defined(&bb, aiv, (0, 0), (r, c), "a vector op")?;
            // The other operand read where it lies when it is an f32 ND tile apart from dst.
            let beside = cx.f32_nd_in_place_with(&d, &bb, aiv, (r, c), |slab, dp, y, yp| {
                rows_of(slab, dp, r, c, |i, row| {
                    zip_apply(*b, row, &y[i * yp..i * yp + c])
                })
            })?;
            if beside.is_some() {
                return Ok(true);
            }
            let y = load::<f32>(cx, &bb, r, c)?;
            let done = cx.f32_nd_in_place(&d, aiv, (r, c), true, |slab, pitch| {
                rows_of(slab, pitch, r, c, |i, row| {
                    zip_apply(*b, row, &y[i * c..(i + 1) * c])
                })
            });
            f32::give(&mut cx.core.pool, y);
            Ok(done?.is_some())
        }
        VectorOp::Broadcast { op: b, axis, .. } => {
            let (s, o, d) = (l.a()?, l.b()?, l.dst);
            let (r, c) = s.valid()?;
            if !same_tile(&s, &d)
                || d.valid()? != (r, c)
                || super::f32_nd_slab(&d, (r, c)).is_none()
            {
                return Ok(false);
            }
            cx.require_defined(&s, aiv, (0, 0), (r, c), "a vector op")?;
            let (vr, vc) = match axis {
                Axis::Row => (r, 1),
                Axis::Col => (1, c),
            };
            let v = load::<f32>(cx, &o, vr, vc)?;
            let done = cx.f32_nd_in_place(&d, aiv, (r, c), true, |slab, pitch| {
                rows_of(slab, pitch, r, c, |i, row| match axis {
                    Axis::Row => scalar_apply(*b, row, v[i]),
                    Axis::Col => zip_apply(*b, row, &v),
                })
            });
            f32::give(&mut cx.core.pool, v);
            Ok(done?.is_some())
        }
        VectorOp::Fill { value, .. } => {
            let d = l.dst;
            let (r, c) = d.valid()?;
            let k = cx.scalar(value)? as f32;
            let done = cx.f32_nd_in_place(&d, aiv, (r, c), false, |slab, pitch| {
                rows_of(slab, pitch, r, c, |_, row| row.fill(k))
            })?;
            Ok(done.is_some())
        }
        VectorOp::Reduce { op: red, axis, .. } => {
            let (s, d) = (l.a()?, l.dst);
            let (r, c) = s.valid()?;
            if super::f32_nd_slab(&s, (r, c)).is_none() {
                return Ok(false);
            }
            cx.require_defined(&s, aiv, (0, 0), (r, c), "a vector op")?;
            let n = match axis {
                Axis::Row => r,
                Axis::Col => c,
            };
            let mut out = f32::take(&mut cx.core.pool, n);
            let done = cx.f32_nd_view(&s, aiv, (r, c), |slab, pitch| match axis {
                Axis::Row => {
                    for (i, o) in out.iter_mut().enumerate() {
                        *o = reduce_row(*red, &slab[i * pitch..i * pitch + c]);
                    }
                }
                Axis::Col => reduce_cols(*red, slab, pitch, r, &mut out),
            })?;
            if done.is_none() {
                f32::give(&mut cx.core.pool, out);
                return Ok(false);
            }
            match axis {
                Axis::Row => store(cx, &d, r, 1, out, RoundMode::Rint)?,
                Axis::Col => store(cx, &d, 1, c, out, RoundMode::Rint)?,
            }
            Ok(true)
        }
        VectorOp::Expand { .. }
        | VectorOp::Cast { .. }
        | VectorOp::LeakyRelu { .. }
        | VectorOp::SetValidShape { .. }
        | VectorOp::FillPad { .. } => Ok(false),
    }
}

fn run<'k, F: Scratch>(
    cx: &mut ExecCtx<'k, '_, '_>,
    op: &VectorOp,
    l: &Locs<'k>,
) -> Result<(), SimFault> {
    let rint = RoundMode::Rint;
    match op {
        VectorOp::Unary { op: u, .. } => {
            let (s, d) = (l.a()?, l.dst);
            let (r, c) = s.valid()?;
            same(s.valid()?, d.valid()?, "unary")?;
            let mut v = load::<F>(cx, &s, r, c)?;
            unary_apply(*u, &mut v);
            store(cx, &d, r, c, v, rint)
        }
        VectorOp::Binary { op: b, .. } => {
            let (a, bb, d) = (l.a()?, l.b()?, l.dst);
            same(a.valid()?, bb.valid()?, "binary")?;
            same(a.valid()?, d.valid()?, "binary")?;
            let (r, c) = a.valid()?;
            let mut x = load::<F>(cx, &a, r, c)?;
            let y = load::<F>(cx, &bb, r, c)?;
            zip_apply(*b, &mut x, &y);
            F::give(&mut cx.core.pool, y);
            store(cx, &d, r, c, x, rint)
        }
        VectorOp::BinaryScalar { op: b, scalar, .. } => {
            let (s, d) = (l.a()?, l.dst);
            same(s.valid()?, d.valid()?, "binary_scalar")?;
            let k = F::from_f64(cx.scalar(scalar)?);
            let (r, c) = s.valid()?;
            let mut x = load::<F>(cx, &s, r, c)?;
            scalar_apply(*b, &mut x, k);
            store(cx, &d, r, c, x, rint)
        }
        VectorOp::Reduce { op: red, axis, .. } => {
            let (s, d) = (l.a()?, l.dst);
            let (r, c) = s.valid()?;
            let x = load::<F>(cx, &s, r, c)?;
            match axis {
                Axis::Row => {
                    let mut out = F::take(&mut cx.core.pool, r);
                    for (i, o) in out.iter_mut().enumerate() {
                        *o = reduce_row(*red, &x[i * c..i * c + c]);
                    }
                    F::give(&mut cx.core.pool, x);
                    store(cx, &d, r, 1, out, rint)
                }
                Axis::Col => {
                    let mut out = F::take(&mut cx.core.pool, c);
                    reduce_cols(*red, &x, c, r, &mut out);
                    F::give(&mut cx.core.pool, x);
                    store(cx, &d, 1, c, out, rint)
                }
            }
        }
        VectorOp::Broadcast { op: b, axis, .. } => {
            let (s, o, d) = (l.a()?, l.b()?, l.dst);
            same(s.valid()?, d.valid()?, "broadcast")?;
            let (r, c) = s.valid()?;
            let mut x = load::<F>(cx, &s, r, c)?;
            match axis {
                Axis::Row => {
                    let v = load::<F>(cx, &o, r, 1)?;
                    for (row, k) in x.chunks_mut(c.max(1)).zip(&v) {
                        scalar_apply(*b, row, *k);
                    }
                    F::give(&mut cx.core.pool, v);
                }
                Axis::Col => {
                    let v = load::<F>(cx, &o, 1, c)?;
                    for row in x.chunks_mut(c.max(1)) {
                        zip_apply(*b, row, &v);
                    }
                    F::give(&mut cx.core.pool, v);
                }
            }
            store(cx, &d, r, c, x, rint)
        }
        VectorOp::Expand { axis, .. } => {
            let (s, d) = (l.a()?, l.dst);
            let (r, c) = d.valid()?;
            let mut x = F::take(&mut cx.core.pool, r * c);
            match axis {
                Axis::Row => {
                    let v = load::<F>(cx, &s, r, 1)?;
                    for (row, k) in x.chunks_mut(c.max(1)).zip(&v) {
                        row.fill(*k);
                    }
                    F::give(&mut cx.core.pool, v);
                }
                Axis::Col => {
                    let v = load::<F>(cx, &s, 1, c)?;
                    for row in x.chunks_mut(c.max(1)) {
                        row.copy_from_slice(&v);
                    }
                    F::give(&mut cx.core.pool, v);
                }
            }
            store(cx, &d, r, c, x, rint)
        }
        VectorOp::Cast { round, .. } => {
            let (s, d) = (l.a()?, l.dst);
            same(s.valid()?, d.valid()?, "cast")?;
            let (r, c) = s.valid()?;
            let x = load::<F>(cx, &s, r, c)?;
            store(cx, &d, r, c, x, *round)
        }
        VectorOp::LeakyRelu { slope, .. } => {
            let (s, d) = (l.a()?, l.dst);
            same(s.valid()?, d.valid()?, "leaky_relu")?;
            let k = F::from_f64(cx.scalar(slope)?);
            let (r, c) = s.valid()?;
            let mut x = load::<F>(cx, &s, r, c)?;
            // `x > 0 ? x : x * slope`; a NaN stays NaN either way.
            for v in x.iter_mut().filter(|v| **v <= F::zero()) {
                *v = *v * k;
            }
            store(cx, &d, r, c, x, rint)
        }
        VectorOp::Fill { value, .. } => {
            let d = l.dst;
            let (r, c) = d.valid()?;
            let k = F::from_f64(cx.scalar(value)?);
            let mut v = F::take(&mut cx.core.pool, r * c);
            v.fill(k);
            store(cx, &d, r, c, v, rint)
        }
        // Metadata and fillpad are done by `exec` before `run`.
        VectorOp::SetValidShape { .. } | VectorOp::FillPad { .. } => Ok(()),
    }
}
