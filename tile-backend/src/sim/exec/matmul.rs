//! Cube matmul (TMATMUL / TMATMUL_ACC): whole fractals, f32 accumulation (int32 for int8).

use super::moves;
use super::ExecCtx;
use crate::ir::{c0, DType, Layout, MemSpace, Op};
use crate::sim::gm::PrefetchQueue;
use crate::sim::host::{host_isa, int8_gemm};
use crate::sim::numeric;
use crate::sim::state::mark_bits;
use crate::sim::tile::{self, Order, TileLoc};

fn round_up(v: usize, to: usize) -> usize {
    v.div_ceil(to.max(1)) * to.max(1)
}

pub(super) fn exec(cx: &mut ExecCtx<'_, '_, '_>, op: &Op) -> Result<(), String> {
    let Op::Matmul {
        dst,
        a,
        b,
        bias,
        accumulate,
        ..
    } = op
    else {
        return Ok(());
    };
    let (la, lb, lc) = (cx.tile(a)?, cx.tile(b)?, cx.tile(dst)?);
    let (m, k) = la.valid()?;
    let (kb, n) = lb.valid()?;
    if k != kb {
        return Err(format!("A is {m}x{k} but B is {kb}x{n}"));
    }
    // The cube computes whole fractals: m and n to 16, k to C0, within the tiles.
    let kc = c0(la.ty.dtype) as usize;
    let mp = round_up(m, 16).min(la.rows()).min(lc.rows());
    let np = round_up(n, 16).min(lb.cols()).min(lc.cols());
    let kp = round_up(k, kc).min(la.cols()).min(lb.rows());
    if m > lc.rows() || n > lc.cols() {
        return Err(format!(
            "{m}x{n} product does not fit the {}x{} Acc tile",
            lc.rows(),
            lc.cols()
        ));
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
        return Err(format!(
            "poison: matmul output [{}, {}] of `{}` uses never-written bytes (of A's row, B's column over the padded k = {kp}, the bias or the accumulator)",
            i / np,
            i % np,
            lc.name()
        ));
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
) -> Result<bool, String> {
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
    op: &Op,
    (la, lb, lc): (&TileLoc, &TileLoc, &TileLoc),
    (mp, kp, np): (usize, usize, usize),
    all_defined: bool,
    defined: &[bool],
) -> Result<(), String> {
    let Op::Matmul {
        bias, accumulate, ..
    } = op
    else {
        return Ok(());
    };
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
            return Err("B was not decoded densely".into());
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
) -> Result<BForm, String> {
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
) -> Result<bool, String> {
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
/// `[m, 16]` matrix at `c[s * c_strip ..]`; each element sums over `k` in order. Runs the fused
/// multiply-add form on x86-64 CPUs with AVX-512F (16-lane registers, [`panels_gemm_avx512`]) or
/// else AVX2 and FMA (chosen at run time, the same bits either way), the portable form elsewhere.
/// Between row groups it hints a few lines of `ahead` (rows a later gather will read), so their
/// memory latency hides behind the arithmetic.
fn panels_gemm(
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
/// skipped). Where the CPU has AVX2 the same
/// loops run compiled for it (8-lane `vpmulld` instead of the baseline's 4-lane SSE2
/// emulation), chosen at run time; elsewhere the portable build.
fn int_gemm(c: &mut [i32], a: &[i32], b: &[i32], dims: (usize, usize, usize)) {
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
    crate::sim::host::HostIsa::Avx2.supported()
}

/// Whether this CPU runs the AVX-512 kernels (AVX-512F beside AVX2 and FMA; the tests'
/// question, whatever the switch selects).
#[cfg(all(test, target_arch = "x86_64"))]
fn has_avx512() -> bool {
    crate::sim::host::HostIsa::Avx512.supported()
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
