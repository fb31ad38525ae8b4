//! `gather_in_l1`: one DMA per logical token, through the block table, into an L1 tile (§8).

use super::load_store::View;
use super::ExecCtx;
use crate::ir::{Op, ParamKind};
use crate::sim::numeric;

pub(super) fn exec(cx: &mut ExecCtx<'_, '_, '_>, op: &Op) -> Result<(), String> {
    let Op::GatherInL1 {
        dst,
        src,
        indices,
        block_table,
        block_size,
        size,
        col_offset,
        ..
    } = op
    else {
        return Ok(());
    };
    let loc = cx.tile(dst)?;
    let (src_dtype, t_rows, t_cols) = match cx.kernel.params.get(src.0 as usize).map(|p| &p.kind) {
        Some(ParamKind::Tensor { dtype, .. }) => {
            let t = cx.args[src.0 as usize]
                .as_gm()
                .ok_or_else(|| format!("argument {} is not a GM tensor", src.0))?;
            match t.shape[..] {
                [r, c] => (*dtype, r, c),
                _ => return Err(format!("gather source must be 2-D, it is {:?}", t.shape)),
            }
        }
        _ => return Err(format!("argument {} is not a GM tensor", src.0)),
    };
    if src_dtype != loc.ty.dtype {
        return Err(format!(
            "gather of {src_dtype} rows into a {} tile",
            loc.ty.dtype
        ));
    }
    let iv = View::eval(cx, indices)?;
    let bv = View::eval(cx, block_table)?;
    let n =
        usize::try_from(iv.cols).map_err(|_| format!("indices window has {} columns", iv.cols))?;
    let nb = usize::try_from(bv.cols)
        .map_err(|_| format!("block-table window has {} columns", bv.cols))?;
    let bs = cx.core.eval(block_size)?;
    let col0 = cx.core.eval(col_offset)?;
    let size = *size as usize;
    if bs <= 0 {
        return Err(format!("block_size {bs} is not positive"));
    }
    if col0 < 0 || col0 as usize + size > t_cols {
        return Err(format!(
            "columns {col0}..{} are outside the source's {t_cols}",
            col0 + size as i64
        ));
    }
    if n > loc.rows() || size > loc.cols() {
        return Err(format!(
            "{n}x{size} rows do not fit the {}x{} tile",
            loc.rows(),
            loc.cols()
        ));
    }
    let ibytes = iv.read(cx, 1, n)?;
    let bbytes = bv.read(cx, 1, nb)?;
    let ies = iv.dtype.size_bytes() as usize;
    let bes = bv.dtype.size_bytes() as usize;
    let es = src_dtype.size_bytes() as usize;
    // Every row's source offset, checked, before any is read.
    let mut offsets = Vec::with_capacity(n);
    for i in 0..n {
        let t = numeric::decode_i64(iv.dtype, &ibytes[i * ies..(i + 1) * ies]);
        if t < 0 || (t / bs) as usize >= nb {
            return Err(format!(
                "index {t} at position {i} is outside the block table's {nb} blocks of {bs} tokens"
            ));
        }
        let blk = (t / bs) as usize;
        let entry = numeric::decode_i64(bv.dtype, &bbytes[blk * bes..(blk + 1) * bes]);
        let phys = entry.checked_mul(bs).and_then(|x| x.checked_add(t % bs));
        let phys = match phys {
            Some(p) if entry >= 0 && (p as usize) < t_rows => p as usize,
            _ => {
                return Err(format!(
                    "block-table entry {entry} (block {blk}) maps token {t} outside the source's {t_rows} rows"
                ))
            }
        };
        offsets.push((phys * t_cols + col0 as usize) * es);
    }
    // All rows land in one row-major buffer, written into the tile at once (strip by strip).
    // Every row is read into below. The rows lie anywhere in GM: each is asked for a few rows
    // ahead of its copy, so their memory latency overlaps the copies.
    const AHEAD: usize = 4;
    let row_bytes = size * es;
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
    let pool = &mut cx.core.pool;
    pool.put_bytes(rows);
    pool.put_bytes(ibytes);
    pool.put_bytes(bbytes);
    r
}
