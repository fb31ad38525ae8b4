//! Cube matmul (TMATMUL / TMATMUL_ACC): whole fractals, f32 accumulation (int32 for int8).

use super::moves;
use super::ExecCtx;
use crate::ir::{c0, round_up, DType, Layout, MatmulOp, MemSpace};
use crate::sim::host::gemm::{int_gemm, panels_gemm};
use crate::sim::host::int8_gemm;
use crate::sim::numeric;
use crate::sim::state::mark_bits;
use crate::sim::tile::{self, Order, TileLoc};
use crate::sim::SimFault;

/// [`round_up`] on element counts.
fn round_up_usize(v: usize, to: usize) -> usize {
    round_up(v as u64, to as u64) as usize
}

pub(super) fn exec(cx: &mut ExecCtx<'_, '_, '_>, op: &MatmulOp) -> Result<(), SimFault> {
    let MatmulOp::Matmul {
        dst,
        a,
        b,
        bias,
        accumulate,
        ..
    } = op;
    let (la, lb, lc) = (cx.tile(a)?, cx.tile(b)?, cx.tile(dst)?);
    let (m, k) = la.valid()?;
    let (kb, n) = lb.valid()?;
    if k != kb {
        return Err(SimFault::ShapeMismatch {
            what: "matmul A and B over k",
            a: (m, k),
            b: (kb, n),
        });
    }
    // The cube computes whole fractals: m and n to 16, k to C0, within the tiles.
    let kc = c0(la.ty.dtype) as usize;
    let mp = round_up_usize(m, 16).min(la.rows()).min(lc.rows());
    let np = round_up_usize(n, 16).min(lb.cols()).min(lc.cols());
    let kp = round_up_usize(k, kc).min(la.cols()).min(lb.rows());
    if m > lc.rows() || n > lc.cols() {
        return Err(lc.region_fault((m, n)));
    }
    cx.note_cube(mp, kp, np);
    moves::note_matmul_rows(cx, &lc, m);
    // Poison: output (i, j) is defined when row i of A and column j of B are over the whole
    // (padded) k, and so are the old accumulator and the bias where they contribute.
    let all_defined = cx.region_defined(&la, 0, (0, 0), (mp, kp))?
        && cx.region_defined(&lb, 0, (0, 0), (kp, np))?
        && (!*accumulate || cx.region_defined(&lc, 0, (0, 0), (mp, np))?)
        && match bias {
            Some(t) => {
                let lt = cx.tile(t)?;
                lt.cols() >= np && cx.region_defined(&lt, 0, (0, 0), (1, np))?
            }
            None => true,
        };
    let defined = if all_defined {
        Vec::new()
    } else {
        let am = cx.defined_mask(&la, 0, (0, 0), (mp, kp))?;
        let bm = cx.defined_mask(&lb, 0, (0, 0), (kp, np))?;
        let all = am.iter().all(|d| *d) && bm.iter().all(|d| *d);
        let rows: Vec<bool> = if all {
            vec![true; mp]
        } else {
            (0..mp)
                .map(|i| am[i * kp..(i + 1) * kp].iter().all(|d| *d))
                .collect()
        };
        let mut cols = vec![true; np];
        if !all {
            for p in 0..kp {
                for (c, d) in cols.iter_mut().zip(&bm[p * np..(p + 1) * np]) {
                    *c &= *d;
                }
            }
        }
        let old = if *accumulate {
            Some(cx.defined_mask(&lc, 0, (0, 0), (mp, np))?)
        } else {
            None
        };
        let bias_ok = match bias {
            Some(t) => {
                let lt = cx.tile(t)?;
                let w = np.min(lt.cols());
                let mut v = cx.defined_mask(&lt, 0, (0, 0), (1, w))?;
                v.resize(np, false);
                v
            }
            None => vec![true; np],
        };
        let mut out = vec![false; mp * np];
        for i in 0..mp {
            for j in 0..np {
                out[i * np + j] =
                    rows[i] && cols[j] && bias_ok[j] && old.as_ref().is_none_or(|o| o[i * np + j]);
            }
        }
        out
    };
    if let Some(i) = (0..if all_defined { 0 } else { m * n })
        .map(|e| (e / n.max(1)) * np + e % n.max(1))
        .find(|&e| !defined[e])
    {
        // A's row, B's column over the padded k, the bias or the accumulator is poison.
        return Err(SimFault::Poison {
            what: "matmul output",
            tile: lc.name().to_string(),
            element: (i / np, i % np),
        });
    }
    let acc_dtype = lc.ty.dtype;
    if acc_dtype != DType::I32 {
        return matmul_f32(cx, op, (&la, &lb, &lc), (mp, kp, np), all_defined, &defined);
    }
    if bias.is_none()
        && all_defined
        && int8_into_acc(cx, (&la, &lb, &lc), (mp, kp, np), *accumulate)?
    {
        return Ok(());
    }
    let mut abytes = cx.core.pool.bytes();
    let mut bbytes = cx.core.pool.bytes();
    let mut out = cx.core.pool.bytes();
    cx.read_bytes(&la, 0, (0, 0), (mp, kp), &mut abytes)?;
    cx.read_bytes(&lb, 0, (0, 0), (kp, np), &mut bbytes)?;
    let bias_bytes = match bias {
        Some(t) => {
            let lt = cx.tile(t)?;
            let mut v = Vec::new();
            cx.read_bytes(&lt, 0, (0, 0), (1, np.min(lt.cols())), &mut v)?;
            Some((lt.ty.dtype, v))
        }
        None => None,
    };
    let pool = &mut cx.core.pool;
    let (mut ai, mut bi, mut c) = (pool.i32s(mp * kp), pool.i32s(kp * np), pool.i32s(mp * np));
    for (d, &x) in ai.iter_mut().zip(abytes.iter()) {
        *d = decode_int8(la.ty.dtype, x);
    }
    for (d, &x) in bi.iter_mut().zip(bbytes.iter()) {
        *d = decode_int8(lb.ty.dtype, x);
    }
    if *accumulate {
        cx.read_bytes(&lc, 0, (0, 0), (mp, np), &mut out)?;
        for (ci, b) in c.iter_mut().zip(out.chunks_exact(4)) {
            *ci = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
    }
    int_gemm(&mut c, &ai, &bi, (mp, kp, np));
    if let Some((bd, bb)) = &bias_bytes {
        let es = bd.size_bytes() as usize;
        for j in 0..np.min(bb.len() / es) {
            let bv = numeric::decode_i64(*bd, &bb[j * es..(j + 1) * es]) as i32;
            for i in 0..mp {
                c[i * np + j] = c[i * np + j].wrapping_add(bv);
            }
        }
    }
    out.clear();
    out.extend(c.iter().flat_map(|v| v.to_le_bytes()));
    let pool = &mut cx.core.pool;
    pool.put_i32s(ai);
    pool.put_i32s(bi);
    pool.put_i32s(c);
    let r = if all_defined {
        cx.write_bytes(&lc, 0, (0, 0), (mp, np), &out)
    } else {
        cx.write_bytes_masked(&lc, 0, (0, 0), (mp, np), &out, &defined)
    };
    let pool = &mut cx.core.pool;
    pool.put_bytes(abytes);
    pool.put_bytes(bbytes);
    pool.put_bytes(out);
    r
}

/// The int8 product accumulated straight into an int32 NZ Acc tile with 16 x 16 boxes (see
/// [`int8_gemm`]): A's rows read from its tile (or the L1 source of its pending move), B read in
/// place from its ZN tile (or source) box by box, each 16-column strip of the Acc a row-major
/// `[rows, 16]` int32 matrix updated where it lies. False (nothing done) when the operands are
/// not int8 or not of that form; the general path then runs.
fn int8_into_acc(
    cx: &mut ExecCtx<'_, '_, '_>,
    (la, lb, lc): (&TileLoc, &TileLoc, &TileLoc),
    (mp, kp, np): (usize, usize, usize),
    accumulate: bool,
) -> Result<bool, SimFault> {
    let boxes = |t: &crate::ir::TileType, r: u64, c: u64| {
        t.fractal.is_some_and(|f| f.rows == r && f.cols == c)
    };
    let fits = la.ty.dtype == DType::I8
        && lb.ty.dtype == DType::I8
        && lc.ty.dtype == DType::I32
        && lc.ty.layout == Layout::NZ
        && boxes(lc.ty, 16, 16)
        && lc.rows() % 16 == 0
        && mp <= lc.rows()
        && np <= lc.cols()
        && kp % 32 == 0
        && np % 16 == 0;
    if !fits {
        return Ok(false);
    }
    // Each operand where its values are: the L1 source of a pending move, or its own tile.
    let source = |cx: &ExecCtx<'_, '_, '_>, l: &TileLoc, size| {
        cx.operand_source(l, (0, 0), size)
            .unwrap_or_else(|| (l.ty.clone(), l.addr, (0, 0)))
    };
    let (a_ty, a_addr, a_at) = source(cx, la, (mp, kp));
    let (b_ty, b_addr, b_at) = source(cx, lb, (kp, np));
    let b_src = TileLoc::of_type(&b_ty, b_addr);
    let b_zn = b_ty.layout == Layout::ZN && boxes(&b_ty, 32, 16);
    if !b_zn || b_at.0 % 32 != 0 || b_at.1 % 16 != 0 {
        return Ok(false);
    }
    tile::check_region(
        &b_src,
        cx.mem.buf_len(b_ty.space, 0)?,
        b_at.0,
        b_at.1,
        kp,
        np,
    )?;
    // Every byte is overwritten by the read: no zero fill.
    let a_loc = TileLoc::of_type(&a_ty, a_addr);
    let mut abytes = cx.core.pool.bytes_to_overwrite(mp * kp * a_loc.es());
    let r = cx.read_bytes(&a_loc, 0, a_at, (mp, kp), &mut abytes);
    if let Err(e) = r {
        cx.core.pool.put_bytes(abytes);
        return Err(e);
    }
    // Box (bk, s) of the region: tile box (b_at.0 / 32 + bk, b_at.1 / 16 + s), boxes in rows
    // of `cols / 16`.
    let nbc = b_src.cols() / 16;
    let b_first = b_addr + (nbc * (b_at.0 / 32) + b_at.1 / 16) * 512;
    let rows = lc.rows();
    let end = lc.addr + lc.ty.bytes() as usize;
    cx.mem.touch(MemSpace::Acc, 0, lc.addr, end);
    let done = match cx.mem.src_dst((b_ty.space, 0), (MemSpace::Acc, 0))? {
        Some((src, dst, bits)) => match (
            src.get(b_first..),
            dst.get_mut(lc.addr..end)
                .map(bytemuck::try_cast_slice_mut::<u8, i32>),
        ) {
            (Some(b), Some(Ok(acc))) => {
                let ops = int8_gemm::Int8Operands {
                    a: bytemuck::cast_slice(&abytes[..mp * kp]),
                    b: bytemuck::cast_slice(b),
                    b_pitch: nbc * 512,
                    dims: (mp, kp, np / 16),
                };
                let path = int8_gemm::Int8Path::best();
                let done = int8_gemm::int8_gemm(path, acc, rows * 16, &ops, accumulate);
                if done {
                    tile::for_each_span(lc, usize::MAX, (0, 0), (mp, np), |start, len| {
                        mark_bits(bits, start, len, true)
                    })?;
                }
                done
            }
            _ => false,
        },
        None => false,
    };
    cx.core.pool.put_bytes(abytes);
    if done {
        cx.note_region(&b_src, 0, b_at, (kp, np), false);
        cx.note_acc(lc, (mp, np), accumulate);
    }
    Ok(done)
}

/// The float matmul: operands decoded straight from their tiles into f32 scratch, the product
/// encoded straight into the Acc tile.
fn matmul_f32(
    cx: &mut ExecCtx<'_, '_, '_>,
    op: &MatmulOp,
    (la, lb, lc): (&TileLoc, &TileLoc, &TileLoc),
    (mp, kp, np): (usize, usize, usize),
    all_defined: bool,
    defined: &[bool],
) -> Result<(), SimFault> {
    let MatmulOp::Matmul {
        bias, accumulate, ..
    } = op;
    let pool = &mut cx.core.pool;
    // Every element is written before it is read: A and B are decoded over their whole
    // regions, and C is read (accumulate) or written by the gemm without being read.
    // (C's scratch is taken only off the fast path, A's only when it is not kept already.)
    let (mut af, mut bf, mut c) = (Vec::new(), pool.f32s_to_overwrite(kp * np), Vec::new());
    let mut keep_a = None;
    let r = (|| {
        // An operand whose L1 -> L0 move is pending is decoded from the move's source region
        // (the same values), which is then never copied into L0.
        // A's values are kept per source region while its bytes are unchanged, so an A read
        // again (Q's K slices in every chunk, P for every V slice) is decoded once.
        match cx.operand_source(la, (0, 0), (mp, kp)) {
            Some((ty, addr, at)) => match cx.mem.take_decoded(&ty, addr, at, (mp, kp)) {
                Some(kept) => {
                    af = kept;
                    keep_a = Some((ty, addr, at));
                }
                None => {
                    af = cx.core.pool.f32s_to_overwrite(mp * kp);
                    let src = TileLoc::of_type(&ty, addr);
                    cx.read_f32(&src, 0, at, (mp, kp), &mut af)?;
                    keep_a = Some((ty, addr, at));
                }
            },
            None => {
                af = cx.core.pool.f32s_to_overwrite(mp * kp);
                cx.read_f32(la, 0, (0, 0), (mp, kp), &mut af)?;
            }
        }
        // B is decoded in the order its bytes lie, strip by strip (a ZN Right tile or a ZN view
        // column-major, an NZ source row-major), or straight into the strip kernel's panels
        // when the product goes that way and B is f32.
        let strips = bias.is_none() && all_defined && strip_acc_fits(lc, (mp, kp, np));
        let pending = cx.operand_source(lb, (0, 0), (kp, np));
        let b_src = match &pending {
            Some((ty, addr, at)) => (TileLoc::of_type(ty, *addr), *at),
            None => (*lb, (0, 0)),
        };
        let mut b_form = read_b(cx, &b_src, (kp, np), strips, &mut bf)?;
        let bias_vals = match bias {
            Some(t) => {
                let lt = cx.tile(t)?;
                let mut b = Vec::new();
                cx.read_bytes(&lt, 0, (0, 0), (1, np.min(lt.cols())), &mut b)?;
                let es = lt.es();
                let v: Vec<f32> = b
                    .chunks_exact(es)
                    .map(|e| numeric::decode_one(lt.ty.dtype, e))
                    .collect();
                Some(v)
            }
            None => None,
        };
        if strips && gemm_into_acc(cx, lc, (mp, kp, np), &af, (&bf, b_form), *accumulate)? {
            return Ok(());
        }
        if b_form == BForm::Panels {
            b_form = read_b(cx, &b_src, (kp, np), false, &mut bf)?;
        }
        let BForm::Dense(b_order) = b_form else {
            return Err(SimFault::Internal("B was not decoded densely"));
        };
        c = cx.core.pool.f32s_to_overwrite(mp * np);
        if *accumulate {
            cx.read_f32(lc, 0, (0, 0), (mp, np), &mut c)?;
        }
        gemm_f32(mp, kp, np, &af, (&bf, b_order), &mut c, *accumulate);
        if let Some(bv) = &bias_vals {
            for (j, b) in bv.iter().enumerate() {
                for i in 0..mp {
                    c[i * np + j] += *b;
                }
            }
        }
        if all_defined {
            cx.write_f32(lc, 0, (0, 0), (mp, np), &c)
        } else {
            let mut out = cx.core.pool.bytes();
            out.resize(mp * np * lc.es(), 0);
            numeric::encode_f32(lc.ty.dtype, &c, &mut out);
            let r = cx.write_bytes_masked(lc, 0, (0, 0), (mp, np), &out, defined);
            cx.core.pool.put_bytes(out);
            r
        }
    })();
    match keep_a {
        Some((ty, addr, at)) if r.is_ok() => {
            let len = cx.mem.buf_len(ty.space, 0)?;
            let span = tile::region_span(&TileLoc::of_type(&ty, addr), len, at, (mp, kp))?;
            cx.mem.keep_decoded(&ty, addr, (at, (mp, kp)), span, af);
        }
        _ => cx.core.pool.put_f32s(af),
    }
    let pool = &mut cx.core.pool;
    pool.put_f32s(bf);
    pool.put_f32s(c);
    r
}

/// How B's f32 values were laid out by [`read_b`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BForm {
    /// A dense `[kp, np]` matrix in this order.
    Dense(Order),
    /// `np / 16` row-major `[kp, 16]` panels, one per 16-column strip.
    Panels,
}

/// Decodes B's `[kp, np]` region (at `at` of `src`) into `out`: as panels when `panels` is
/// asked for and B is f32, otherwise densely in the order its bytes lie.
fn read_b(
    cx: &mut ExecCtx<'_, '_, '_>,
    (src, at): &(TileLoc, (usize, usize)),
    (kp, np): (usize, usize),
    panels: bool,
    out: &mut Vec<f32>,
) -> Result<BForm, SimFault> {
    out.resize(kp * np, 0.0);
    if panels && cx.read_f32_panels(src, 0, *at, (kp, np), out)? {
        return Ok(BForm::Panels);
    }
    let order = match src.ty.layout {
        Layout::ZN | Layout::DN => Order::ColMajor,
        _ => Order::RowMajor,
    };
    cx.read_f32_ordered(src, 0, *at, (kp, np), order, out)?;
    Ok(BForm::Dense(order))
}

/// Whether an `mp x np` product over `kp` can go strip by strip into the Acc tile `lc` (f32
/// NZ with 16 x 16 boxes, whole 16-column strips).
fn strip_acc_fits(lc: &TileLoc, (mp, kp, np): (usize, usize, usize)) -> bool {
    let boxes16 = lc.ty.fractal.is_some_and(|f| f.rows == 16 && f.cols == 16);
    let rows = lc.rows();
    lc.ty.dtype == DType::F32
        && lc.ty.layout == Layout::NZ
        && boxes16
        && rows.is_multiple_of(16)
        && np % 16 == 0
        && mp <= rows
        && np <= lc.cols()
        && kp > 0
        && mp > 0
}

/// The product accumulated straight into an f32 NZ Acc tile with 16 x 16 boxes, strip by strip
/// (a 16-column strip is a row-major `[rows, 16]` matrix in the buffer, so the Acc is neither
/// decoded nor encoded): each strip of B is a row-major `[kp, 16]` panel (decoded so, or laid
/// out so here) and [`panels_gemm`] accumulates `A · panel` into each strip. False (nothing
/// done) when the tile is not of that form.
fn gemm_into_acc(
    cx: &mut ExecCtx<'_, '_, '_>,
    lc: &TileLoc,
    (mp, kp, np): (usize, usize, usize),
    af: &[f32],
    (bf, b_form): (&[f32], BForm),
    accumulate: bool,
) -> Result<bool, SimFault> {
    let rows = lc.rows();
    if !strip_acc_fits(lc, (mp, kp, np)) || af.len() < mp * kp || bf.len() < kp * np {
        return Ok(false);
    }
    let space = lc.space();
    let end = lc.addr + lc.ty.bytes() as usize;
    // B as np / 16 row-major [kp, 16] panels, one per 16-column strip, one after another.
    let mut built = match b_form {
        BForm::Panels => Vec::new(),
        BForm::Dense(_) => cx.core.pool.f32s_to_overwrite(kp * np),
    };
    match b_form {
        BForm::Panels => {}
        BForm::Dense(Order::RowMajor) => {
            for (strip, panel) in built.chunks_exact_mut(kp * 16).enumerate() {
                for (p, row) in panel.chunks_exact_mut(16).enumerate() {
                    let at = p * np + strip * 16;
                    row.copy_from_slice(&bf[at..at + 16]);
                }
            }
        }
        BForm::Dense(Order::ColMajor) => {
            for (strip, panel) in built.chunks_exact_mut(kp * 16).enumerate() {
                for j in 0..16 {
                    let col = &bf[(strip * 16 + j) * kp..(strip * 16 + j + 1) * kp];
                    for (row, v) in panel.chunks_exact_mut(16).zip(col) {
                        row[j] = *v;
                    }
                }
            }
        }
    }
    let panels: &[f32] = match b_form {
        BForm::Panels => bf,
        BForm::Dense(_) => &built,
    };
    cx.mem.touch(space, 0, lc.addr, end);
    let (buf, bits) = cx.mem.buf_bits_mut(space, 0)?;
    let Some(Ok(acc)) = buf
        .get_mut(lc.addr..end)
        .map(bytemuck::try_cast_slice_mut::<u8, f32>)
    else {
        cx.core.pool.put_f32s(built);
        return Ok(false);
    };
    // Column `strip * 16 + j` of row `r` is element `strip * rows * 16 + r * 16 + j`.
    panels_gemm(
        acc,
        rows * 16,
        &af[..mp * kp],
        &panels[..kp * np],
        (mp, kp, np / 16),
        accumulate,
        &mut cx.core.prefetch,
    );
    tile::for_each_span(lc, buf.len(), (0, 0), (mp, np), |start, len| {
        mark_bits(bits, start, len, true)
    })?;
    cx.core.pool.put_f32s(built);
    cx.note_acc(lc, (mp, np), accumulate);
    Ok(true)
}

fn decode_int8(dtype: DType, b: u8) -> i32 {
    match dtype {
        DType::U8 => b as i32,
        _ => b as i8 as i32,
    }
}

/// `c (+)= a[m, k] * b[k, n]`, f32; `a` and `c` row-major, `b` in `b_order`.
fn gemm_f32(
    m: usize,
    k: usize,
    n: usize,
    a: &[f32],
    (b, b_order): (&[f32], Order),
    c: &mut [f32],
    accumulate: bool,
) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            c.fill(0.0);
        }
        return;
    }
    assert!(a.len() >= m * k && b.len() >= k * n && c.len() >= m * n);
    // B's element (p, j) is at p * n + j (row-major) or j * k + p (column-major).
    let (b_cs, b_rs) = match b_order {
        Order::RowMajor => (1, n as isize),
        Order::ColMajor => (k as isize, 1),
    };
    // SAFETY: `a` holds at least m*k, `b` k*n and `c` m*n f32 values (asserted just above); the
    // strides describe exactly those layouts (a and c row-major: column stride 1, row strides k
    // and n; b as matched above, every index below k*n), `c` does not alias `a` or `b`
    // (distinct Vecs), and gemm reads `c` only when `read_dst` is set, where it is initialised.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            accumulate,
            a.as_ptr(),
            1,
            k as isize,
            b.as_ptr(),
            b_cs,
            b_rs,
            1.0f32,
            1.0f32,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}
