//! `gather_in_l1`: one DMA per logical token, through the block table, into an L1 tile (§8).

use super::load_store::View;
use super::ExecCtx;
use crate::ir::{DType, GatherOp, Layout, ParamId, ParamKind};
use crate::sim::gm::Overlay;
use crate::sim::numeric;
use crate::sim::tile::{self, TileLoc};
use crate::sim::SimFault;

pub(super) fn exec(cx: &mut ExecCtx<'_, '_, '_>, op: &GatherOp) -> Result<(), SimFault> {
    let GatherOp::GatherInL1 {
        dst,
        src,
        indices,
        block_table,
        block_size,
        size,
        col_offset,
        ..
    } = op;
    let loc = cx.tile(dst)?;
    let (src_dtype, t_rows, t_cols) = match cx.kernel.params.get(src.0 as usize).map(|p| &p.kind) {
        Some(ParamKind::Tensor { dtype, .. }) => {
            let t = cx.args[src.0 as usize]
                .as_gm()
                .ok_or_else(|| SimFault::arg_kind(*src, "a GM tensor"))?;
            match t.shape[..] {
                [r, c] => (*dtype, r, c),
                _ => return Err(SimFault::arg_kind(*src, "a 2-D GM tensor")),
            }
        }
        _ => return Err(SimFault::arg_kind(*src, "a GM tensor")),
    };
    if src_dtype != loc.ty.dtype {
        return Err(SimFault::DtypeMismatch {
            what: "gather rows into a tile",
            found: src_dtype,
            expected: loc.ty.dtype,
        });
    }
    let iv = View::eval(cx, indices)?;
    let bv = View::eval(cx, block_table)?;
    let width = |what, cols: i64| {
        usize::try_from(cols).map_err(|_| SimFault::TooSmall {
            what,
            value: cols,
            min: 0,
        })
    };
    let n = width("indices window width", iv.cols)?;
    let nb = width("block-table window width", bv.cols)?;
    let bs = cx.core.eval(block_size)?;
    let col0 = cx.core.eval(col_offset)?;
    let size = *size as usize;
    if bs <= 0 {
        return Err(SimFault::TooSmall {
            what: "gather block_size",
            value: bs,
            min: 1,
        });
    }
    if col0 < 0 || col0 as usize + size > t_cols {
        return Err(SimFault::GatherColumns {
            start: col0,
            end: col0.saturating_add(size as i64),
            cols: t_cols,
        });
    }
    if n > loc.rows() || size > loc.cols() {
        return Err(loc.region_fault((n, size)));
    }
    // A window row longer than its tensor cannot be read (checked before its buffer is made).
    for (v, len) in [(&iv, n), (&bv, nb)] {
        let size = v.tensor_len(cx);
        if len > size {
            let es = v.dtype.size_bytes() as usize;
            return Err(SimFault::GmOutOfBounds {
                param: v.param,
                name: String::new(),
                offset: usize::try_from(v.offset).unwrap_or(0).saturating_mul(es),
                len: len.saturating_mul(es),
                size: size * es,
            });
        }
    }
    let ibytes = iv.read(cx, 1, n)?;
    let bbytes = bv.read(cx, 1, nb)?;
    let ies = iv.dtype.size_bytes() as usize;
    let es = src_dtype.size_bytes() as usize;
    // Every row's source offset, checked, before any is read.
    let table = (&bbytes[..], bv.dtype, nb);
    let src_shape = (t_rows, t_cols, col0 as usize, es);
    let mut offsets = cx.core.pool.usizes();
    for i in 0..n {
        let t = numeric::decode_i64(iv.dtype, &ibytes[i * ies..(i + 1) * ies]);
        offsets.push(source_row(t, table, bs, src_shape).map_err(|e| match e {
            RowError::Index => SimFault::GatherIndex {
                index: t,
                position: i,
                blocks: nb,
                block_size: bs,
            },
            RowError::Entry(entry, block) => SimFault::GatherTableEntry {
                entry,
                block,
                token: t,
                rows: t_rows,
            },
        })?);
    }
    let row_bytes = size * es;
    // Untraced, rows the block did not write are copied from the argument straight into the
    // tile's strips (no staging buffer); otherwise all rows land in one row-major buffer,
    // written into the tile at once (strip by strip). Every row is read into below. The rows
    // lie anywhere in GM: each is asked for a few rows ahead of its copy, so their memory
    // latency overlaps the copies.
    if cx.rec.is_none() && n > 0 && gather_in_place(cx, &loc, (*src, size), &offsets)? {
        queue_next_window(cx, (*src, row_bytes), &iv, n, table, bs, src_shape);
        let pool = &mut cx.core.pool;
        pool.put_bytes(ibytes);
        pool.put_bytes(bbytes);
        pool.put_usizes(offsets);
        return Ok(());
    }
    const AHEAD: usize = 4;
    for &off in offsets.iter().take(AHEAD) {
        cx.gm_prefetch(*src, off, row_bytes);
    }
    let mut rows = cx.core.pool.bytes_to_overwrite(n * row_bytes);
    for (i, &off) in offsets.iter().enumerate() {
        if let Some(&ahead) = offsets.get(i + AHEAD) {
            cx.gm_prefetch(*src, ahead, row_bytes);
        }
        cx.gm_read(*src, off, &mut rows[i * row_bytes..(i + 1) * row_bytes])?;
    }
    let r = cx.write_bytes(&loc, 0, (0, 0), (n, size), &rows);
    queue_next_window(cx, (*src, row_bytes), &iv, n, table, bs, src_shape);
    let pool = &mut cx.core.pool;
    pool.put_bytes(rows);
    pool.put_bytes(ibytes);
    pool.put_bytes(bbytes);
    pool.put_usizes(offsets);
    r
}

/// Copies the `size`-element rows at GM byte `offsets` of `src` from the argument's bytes
/// straight into the top rows of the tile `loc` ([`tile::write_rows_from`]) and marks them
/// written: the bytes the staged copy writes. False (nothing done) when the block wrote into
/// any of those rows' GM pages or the layout does not map onto rows: the caller stages then.
fn gather_in_place(
    cx: &mut ExecCtx<'_, '_, '_>,
    loc: &TileLoc,
    (src, size): (ParamId, usize),
    offsets: &[usize],
) -> Result<bool, SimFault> {
    let row_bytes = size * loc.es();
    let args = cx.args;
    // Every row is checked before any is copied; then each is lent again from the argument.
    for &off in offsets {
        if cx.gm.unwritten(args, src, off, row_bytes)?.is_none() {
            return Ok(false);
        }
    }
    // The argument's bytes, found once (each row was checked in bounds above).
    let data = match args.get(src.0 as usize).and_then(crate::launch::Arg::as_gm) {
        Some(t) => t.data,
        None => return Ok(false),
    };
    let row = |i: usize| {
        let off = *offsets.get(i)?;
        data.get(off..off.checked_add(row_bytes)?)
    };
    cx.write_dense(loc, 0, (0, 0), (offsets.len(), size), |buf| {
        tile::write_rows_from(buf, loc, (0, 0), size, offsets.len(), row)
    })
}

/// Why a logical token has no source row.
enum RowError {
    /// The token is negative or beyond the block table.
    Index,
    /// The token's block-table entry (and block) maps outside the source.
    Entry(i64, usize),
}

/// The GM byte offset of logical token `t`'s row (§8: through the block table `table` = (its
/// bytes, dtype, entries) with blocks of `bs` tokens) in a `t_rows x t_cols` source of `es`-byte
/// elements, from column `col0`.
fn source_row(
    t: i64,
    (table, dtype, nb): (&[u8], DType, usize),
    bs: i64,
    (t_rows, t_cols, col0, es): (usize, usize, usize, usize),
) -> Result<usize, RowError> {
    if t < 0 || (t / bs) as usize >= nb {
        return Err(RowError::Index);
    }
    let blk = (t / bs) as usize;
    let bes = dtype.size_bytes() as usize;
    let entry = numeric::decode_i64(dtype, &table[blk * bes..(blk + 1) * bes]);
    match entry.checked_mul(bs).and_then(|x| x.checked_add(t % bs)) {
        Some(p) if entry >= 0 && (p as usize) < t_rows => Ok((p as usize * t_cols + col0) * es),
        _ => Err(RowError::Entry(entry, blk)),
    }
}

/// The source-row byte offsets ([`source_row`]) of the indices in `ibytes` (of `dtype`) that
/// map to one, in order; the rest are skipped.
fn mapped_rows<'x>(
    ibytes: &'x [u8],
    dtype: DType,
    table: (&'x [u8], DType, usize),
    bs: i64,
    src_shape: (usize, usize, usize, usize),
) -> impl Iterator<Item = usize> + 'x {
    let ies = dtype.size_bytes() as usize;
    ibytes
        .chunks_exact(ies)
        .filter_map(move |b| source_row(numeric::decode_i64(dtype, b), table, bs, src_shape).ok())
}

/// Queues for prefetching ([`PrefetchQueue`](crate::sim::gm::PrefetchQueue)) the rows of the
/// `n` indices that follow this gather's window in the same one-row ND index tensor, mapped
/// through the same block-table window: usually the kernel's next chunk. Indices past the
/// tensor, invalid or unmapped ones are skipped; nothing is recorded or checked, since the
/// kernel has not asked for these bytes.
fn queue_next_window(
    cx: &mut ExecCtx<'_, '_, '_>,
    (src, row_bytes): (ParamId, usize),
    iv: &View,
    n: usize,
    table: (&[u8], DType, usize),
    bs: i64,
    src_shape: (usize, usize, usize, usize),
) {
    let ies = iv.dtype.size_bytes() as usize;
    let next = usize::try_from(iv.offset)
        .ok()
        .and_then(|o| o.checked_add(n)?.checked_mul(ies));
    let mut ibytes = cx.core.pool.bytes_to_overwrite(n * ies);
    let readable = iv.rows == 1
        && iv.layout == Layout::ND
        && next.is_some_and(|at| cx.gm.read(cx.args, iv.param, at, &mut ibytes).is_ok());
    if readable {
        let args = cx.args;
        let rows = mapped_rows(&ibytes, iv.dtype, table, bs, src_shape)
            .filter_map(|off| Overlay::argument_bytes(args, src, off, row_bytes));
        cx.core.prefetch.replace(rows);
    } else {
        cx.core.prefetch.replace([]);
    }
    cx.core.pool.put_bytes(ibytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn i32s(v: &[i32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn a_token_maps_through_its_block_table_entry_or_says_why_not() {
        // Blocks of 4 tokens; the table sends logical block 0 to physical 2, block 1 to 0,
        // block 2 to -1 and block 3 to 9 (beyond a 12-row source).
        let table = i32s(&[2, 0, -1, 9]);
        let table = (&table[..], DType::I32, 4);
        // 12 rows of 6 f16 columns, read from column 1.
        let shape = (12, 6, 1, 2);
        let row = |t| source_row(t, table, 4, shape);
        assert!(matches!(row(1), Ok(o) if o == ((2 * 4 + 1) * 6 + 1) * 2));
        assert!(matches!(row(7), Ok(o) if o == (3 * 6 + 1) * 2));
        assert!(matches!(row(-1), Err(RowError::Index)));
        assert!(matches!(row(16), Err(RowError::Index)));
        assert!(matches!(row(9), Err(RowError::Entry(-1, 2))));
        assert!(matches!(row(13), Err(RowError::Entry(9, 3))));
        // The next window's rows: those that map, in order; the others are skipped.
        let window = i32s(&[7, -1, 9, 1, 16, 13, 7]);
        let rows: Vec<usize> = mapped_rows(&window, DType::I32, table, 4, shape).collect();
        let at = |phys: usize| (phys * 6 + 1) * 2;
        assert_eq!(rows, [at(3), at(9), at(3)]);
    }
}
