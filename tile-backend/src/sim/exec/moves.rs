//! Tile moves (TMOV / TEXTRACT / TINSERT) and the Fixpipe (Acc -> Vec/Mat/GM) with ReLU,
//! quantisation and the dual-destination split (ASCEND950.md §5-§6).

use super::ExecCtx;
use crate::ir::{AccToVecMode, DType, Layout, MemSpace, MoveOp, QuantWord, Scale, ValidDim};
use crate::sim::numeric;
use crate::sim::tile::TileLoc;
use crate::sim::SimFault;

/// One scale per output column (per-channel) or one for all (per-tensor).
enum Words {
    None,
    Tensor(QuantWord),
    Channel(Vec<QuantWord>),
}

fn scale_words(
    cx: &mut ExecCtx<'_, '_, '_>,
    scale: Option<&Scale>,
    c0: usize,
    cols: usize,
) -> Result<Words, SimFault> {
    Ok(match scale {
        None => Words::None,
        Some(Scale::Const(w)) => Words::Tensor(*w),
        Some(Scale::Scalar(p)) => match cx.args.get(p.0 as usize) {
            // fp32 scalars are bit-cast: bit 46 (signed int8 output) is clear.
            Some(crate::sim::Arg::Float(v)) => {
                Words::Tensor(QuantWord((*v as f32).to_bits() as u64))
            }
            Some(crate::sim::Arg::Int(v)) => Words::Tensor(QuantWord(*v as u64)),
            _ => return Err(SimFault::arg_kind(*p, "a scalar (a Fixpipe scale)")),
        },
        Some(Scale::Tile(t)) => {
            let loc = cx.tile(t)?;
            if !matches!(loc.ty.dtype, DType::I64 | DType::U64) {
                return Err(SimFault::UnsupportedDtype {
                    what: "a Fixpipe scale",
                    tile: loc.name().to_string(),
                    dtype: loc.ty.dtype,
                    supported: "int64 or uint64",
                });
            }
            if c0 + cols > loc.cols() {
                // One scale word per output column.
                return Err(loc.region_fault((1, c0 + cols)));
            }
            cx.require_defined(&loc, 0, (0, c0), (1, cols), "a Fixpipe scale")?;
            let mut b = Vec::new();
            cx.read_bytes(&loc, 0, (0, c0), (1, cols), &mut b)?;
            Words::Channel(
                b.chunks_exact(8)
                    .map(|w| QuantWord(u64::from_le_bytes(w.try_into().unwrap_or([0; 8]))))
                    .collect(),
            )
        }
    })
}

/// Converts one accumulator value on its way out of the Fixpipe.
#[inline]
fn convert(x: f32, word: Option<(f32, QuantWord)>, dst: DType, out: &mut [u8]) {
    match word {
        None => numeric::encode_one(dst, x, out),
        Some((s, w)) => {
            let y = x * s + w.offset() as f32;
            match dst {
                DType::I8 if w.signed() => {
                    out[0] = numeric::sat_round(y, -128.0, 127.0) as i8 as u8
                }
                // Without bit 46, 8-bit outputs saturate as unsigned.
                DType::I8 | DType::U8 => out[0] = numeric::sat_round(y, 0.0, 255.0) as u8,
                DType::F16 => numeric::encode_one(dst, y.clamp(-65504.0, 65504.0), out),
                DType::F8E4M3 => numeric::encode_one(dst, y.clamp(-448.0, 448.0), out),
                _ => numeric::encode_one(dst, y, out),
            }
        }
    }
}

/// Reads `size` of an Acc tile at `origin` through the Fixpipe: ReLU, then scale, then conversion
/// to `dst`. Returns row-major bytes of `dst`.
pub(super) fn fixpipe(
    cx: &mut ExecCtx<'_, '_, '_>,
    acc: &TileLoc,
    origin: (usize, usize),
    size: (usize, usize),
    dst: DType,
    relu: bool,
    scale: Option<&Scale>,
) -> Result<Vec<u8>, SimFault> {
    let (rows, cols) = size;
    // The region is read over every byte of `raw`.
    let mut raw = cx.core.pool.bytes_to_overwrite(rows * cols * acc.es());
    cx.read_bytes(acc, 0, origin, (rows, cols), &mut raw)?;
    let words = scale_words(cx, scale, origin.1, cols)?;
    let src = acc.ty.dtype;
    let es = dst.size_bytes() as usize;
    let mut out = cx.core.pool.bytes_to_overwrite(rows * cols * es);
    out.fill(0);
    if matches!(words, Words::None) && src == DType::F32 {
        // The common path (no quantisation): whole-buffer conversion, the dtype matched once.
        let mut vals = cx.core.pool.f32s(rows * cols);
        numeric::decode_f32(src, &raw, &mut vals);
        if relu {
            vals.iter_mut().for_each(|v| *v = v.max(0.0));
        }
        numeric::encode_f32(dst, &vals, &mut out);
        cx.core.pool.put_f32s(vals);
        cx.core.pool.put_bytes(raw);
        return Ok(out);
    }
    if src == DType::I32 && matches!(dst, DType::F16 | DType::BF16 | DType::F32) {
        if let Some(cols_words) = column_words(&words, cols) {
            // A dequantising move (int32 Acc to a float): each column's scale and offset
            // decoded once, the values scaled in one pass and encoded in one call, with
            // `convert`'s arithmetic and bits.
            let mut vals = cx.core.pool.f32s_to_overwrite(rows * cols);
            dequantise_i32(&raw, &cols_words, relu, dst == DType::F16, &mut vals);
            numeric::encode_f32(dst, &vals, &mut out);
            cx.core.pool.put_f32s(vals);
            cx.core.pool.put_bytes(raw);
            return Ok(out);
        }
    }
    let ses = src.size_bytes() as usize;
    for r in 0..rows {
        for c in 0..cols {
            let i = r * cols + c;
            let b = &raw[i * ses..(i + 1) * ses];
            let o = &mut out[i * es..(i + 1) * es];
            if src == DType::I32 && dst == DType::I32 && matches!(words, Words::None) {
                let mut v = numeric::decode_i64(src, b);
                if relu {
                    v = v.max(0);
                }
                numeric::encode_i64(dst, v, o);
                continue;
            }
            let mut x = numeric::decode_one(src, b);
            if relu {
                x = x.max(0.0);
            }
            let word = match &words {
                Words::None => None,
                Words::Tensor(w) => Some((w.scale(), *w)),
                Words::Channel(ws) => ws.get(c).map(|w| (w.scale_19bit(), *w)),
            };
            convert(x, word, dst, o);
        }
    }
    cx.core.pool.put_bytes(raw);
    Ok(out)
}

/// Each of `cols` columns' `(scale, offset)` as [`convert`] applies them, or `None` without
/// words (or fewer words than columns: the per-element path handles that).
fn column_words(words: &Words, cols: usize) -> Option<Vec<(f32, f32)>> {
    match words {
        Words::None => None,
        Words::Tensor(w) => Some(vec![(w.scale(), w.offset() as f32); cols]),
        Words::Channel(ws) if ws.len() >= cols => Some(
            ws[..cols]
                .iter()
                .map(|w| (w.scale_19bit(), w.offset() as f32))
                .collect(),
        ),
        Words::Channel(_) => None,
    }
}

/// Row-major int32 accumulators `raw` (little-endian) to `f32(acc) · scale + offset` per
/// column (ReLU first; clamped to the f16 range when `f16`), what [`convert`] computes before
/// encoding a float: `vals` gets the values, `raw.len() / 4` of them.
fn dequantise_i32(raw: &[u8], cols: &[(f32, f32)], relu: bool, f16: bool, vals: &mut [f32]) {
    let n = cols.len();
    if n == 0 {
        return;
    }
    for (row_in, row_out) in raw.chunks_exact(4 * n).zip(vals.chunks_exact_mut(n)) {
        for ((b, o), &(s, off)) in row_in.chunks_exact(4).zip(row_out.iter_mut()).zip(cols) {
            let mut x = i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f32;
            if relu {
                x = x.max(0.0);
            }
            let y = x * s + off;
            *o = if f16 { y.clamp(-65504.0, 65504.0) } else { y };
        }
    }
}

/// What the Fixpipe produced for a tile: f32 values still to be encoded (no quantisation from an
/// f32 Acc, the common path), or encoded bytes.
enum Fixed {
    Vals(Vec<f32>),
    Bytes(Vec<u8>),
}

/// [`fixpipe`] for a move into a tile: the common path stays in f32 and is encoded straight
/// into the destination's runs by [`write_fixed`].
fn fixpipe_to_tile(
    cx: &mut ExecCtx<'_, '_, '_>,
    acc: &TileLoc,
    origin: (usize, usize),
    size: (usize, usize),
    dst: DType,
    relu: bool,
    scale: Option<&Scale>,
) -> Result<Fixed, SimFault> {
    if scale.is_some() || acc.ty.dtype != DType::F32 {
        return fixpipe(cx, acc, origin, size, dst, relu, scale).map(Fixed::Bytes);
    }
    // Every value is decoded from the Acc region before it is read.
    let mut vals = cx.core.pool.f32s_to_overwrite(size.0 * size.1);
    cx.read_f32(acc, 0, origin, size, &mut vals)?;
    if relu {
        vals.iter_mut().for_each(|v| *v = v.max(0.0));
    }
    Ok(Fixed::Vals(vals))
}

/// One Fixpipe move of the `size` region at `src_at` of the Acc tile `s` to `dst_at` of tile
/// `d` in AIV `aiv`'s UB. An f32 Acc moved to an f32 tile unchanged (no ReLU, no quantisation)
/// whose region is all written is copied layout to layout in one pass; anything else goes
/// through [`fixpipe_to_tile`] and [`write_fixed`].
fn fixpipe_into(
    cx: &mut ExecCtx<'_, '_, '_>,
    (s, src_at): (&TileLoc, (usize, usize)),
    (d, aiv, dst_at): (&TileLoc, u8, (usize, usize)),
    size: (usize, usize),
    relu: bool,
    scale: Option<&Scale>,
) -> Result<(), SimFault> {
    let plain = !relu && scale.is_none() && s.ty.dtype == DType::F32 && d.ty.dtype == DType::F32;
    if plain && cx.copy_tiles(s, 0, src_at, d, aiv, dst_at, size)? {
        return Ok(());
    }
    let data = fixpipe_to_tile(cx, s, src_at, size, d.ty.dtype, relu, scale)?;
    write_fixed(cx, d, aiv, dst_at, size, data, (s, 0, src_at))
}

/// [`write_out`] for what the Fixpipe produced.
fn write_fixed(
    cx: &mut ExecCtx<'_, '_, '_>,
    d: &TileLoc,
    aiv: u8,
    at: (usize, usize),
    size: (usize, usize),
    data: Fixed,
    src: Source<'_, '_>,
) -> Result<(), SimFault> {
    match data {
        Fixed::Bytes(b) => write_out(cx, d, aiv, at, size, b, src),
        Fixed::Vals(v) => {
            let r = if cx.region_defined(src.0, src.1, src.2, size)? {
                cx.write_f32(d, aiv, at, size, &v)
            } else {
                let mut b = cx.core.pool.bytes();
                b.resize(v.len() * d.es(), 0);
                numeric::encode_f32(d.ty.dtype, &v, &mut b);
                let mask = cx.defined_mask(src.0, src.1, src.2, size)?;
                let r = cx.write_bytes_masked(d, aiv, at, size, &b, &mask);
                cx.core.pool.put_bytes(b);
                r
            };
            cx.core.pool.put_f32s(v);
            r
        }
    }
}

/// Where copied data came from: its tile, the AIV whose UB holds it, and the region's origin.
type Source<'a, 'k> = (&'a TileLoc<'k>, u8, (usize, usize));

/// Writes copied data into a tile (poison in the source region stays poison in the destination)
/// and gives its buffer back to the pool.
fn write_out(
    cx: &mut ExecCtx<'_, '_, '_>,
    d: &TileLoc,
    aiv: u8,
    at: (usize, usize),
    size: (usize, usize),
    data: Vec<u8>,
    src: Source<'_, '_>,
) -> Result<(), SimFault> {
    let r = if cx.region_defined(src.0, src.1, src.2, size)? {
        cx.write_bytes(d, aiv, at, size, &data)
    } else {
        let mask = cx.defined_mask(src.0, src.1, src.2, size)?;
        cx.write_bytes_masked(d, aiv, at, size, &data, &mask)
    };
    cx.core.pool.put_bytes(data);
    r
}

/// Records that a matmul of `m` rows (its Left tile's valid rows) wrote the Acc buffer `acc`:
/// A5's `TMATMUL` lays the Acc's NZ column blocks `ceil16(m)` rows apart.
pub(super) fn note_matmul_rows(cx: &mut ExecCtx<'_, '_, '_>, acc: &TileLoc, m: usize) {
    let rows = &mut cx.core.acc_rows;
    match rows.iter_mut().find(|(addr, _)| *addr == acc.addr) {
        Some(e) => e.1 = m,
        None => rows.push((acc.addr, m)),
    }
}

/// The rows whose multiple of 16 is the L0C source stride of a Fixpipe read of `acc`: A5's
/// `TMOV` (`npu/a5/TMov.hpp:123-131`) takes the runtime valid rows unless the destination is NZ
/// (:206) or the valid rows are static and fewer than the rows; `TEXTRACT` (a read at an
/// `offset`) and `TSTORE` take the static rows.
pub(super) fn read_stride_rows(
    acc: &TileLoc,
    tmov: bool,
    dst_layout: Option<Layout>,
) -> Result<usize, SimFault> {
    let static_fewer =
        matches!(acc.ty.valid_rows, ValidDim::Static(v) if (v as usize) < acc.rows());
    if tmov && dst_layout != Some(Layout::NZ) && !static_fewer {
        Ok(acc.valid()?.0)
    } else {
        Ok(acc.rows())
    }
}

/// Refuses a Fixpipe read of `acc` whose L0C source stride (`read_rows` rounded up to 16)
/// differs from the stride of the matmul that wrote it: the device would read column blocks
/// 1.. from the wrong rows (the verifier's `acc-stride` rule, ASCEND950.md §12).
pub(super) fn check_acc_stride(
    cx: &ExecCtx<'_, '_, '_>,
    acc: &TileLoc,
    read_rows: usize,
    what: &'static str,
) -> Result<(), SimFault> {
    let Some(&(_, m)) = cx.core.acc_rows.iter().find(|(addr, _)| *addr == acc.addr) else {
        return Ok(());
    };
    if m.div_ceil(16) == read_rows.div_ceil(16) {
        return Ok(());
    }
    Err(SimFault::AccStride {
        what,
        tile: acc.name().to_string(),
        read_rows,
        written_rows: m,
    })
}

pub(super) fn exec(cx: &mut ExecCtx<'_, '_, '_>, op: &MoveOp) -> Result<(), SimFault> {
    let MoveOp::Move {
        dst,
        src,
        offset,
        acc_to_vec,
        relu,
        scale,
        ..
    } = op;
    let s = cx.tile(src)?;
    let d = cx.tile(dst)?;
    let off = match offset {
        Some([r, c]) => {
            let (r, c) = (cx.core.eval(r)?, cx.core.eval(c)?);
            for (what, value) in [("move offset row", r), ("move offset column", c)] {
                if value < 0 {
                    return Err(SimFault::TooSmall {
                        what,
                        value,
                        min: 0,
                    });
                }
            }
            (r as usize, c as usize)
        }
        None => (0, 0),
    };
    if s.space() == MemSpace::Acc {
        let rows = read_stride_rows(&s, offset.is_none(), Some(d.ty.layout))?;
        let what = if offset.is_some() { "TEXTRACT" } else { "TMOV" };
        check_acc_stride(cx, &s, rows, what)?;
    }
    match (s.space(), d.space()) {
        (MemSpace::Acc, MemSpace::Vec) => acc_to_vec_move(
            cx,
            &s,
            &d,
            off,
            acc_to_vec.unwrap_or(AccToVecMode::SingleModeVec0),
            *relu,
            scale.as_ref(),
        ),
        (MemSpace::Acc, MemSpace::Mat) => {
            cx.require_defined(&s, 0, (0, 0), s.valid()?, "a Fixpipe move")?;
            let data = fixpipe_to_tile(
                cx,
                &s,
                (0, 0),
                s.valid()?,
                d.ty.dtype,
                *relu,
                scale.as_ref(),
            )?;
            write_fixed(cx, &d, 0, off, s.valid()?, data, (&s, 0, (0, 0)))
        }
        (MemSpace::Mat, MemSpace::Left | MemSpace::Right) => {
            // MTE1 moves whole fractals: round the region up to the destination's boxes.
            let f =
                d.ty.fractal
                    .map(|f| (f.rows as usize, f.cols as usize))
                    .unwrap_or((1, 1));
            let rows = d.valid()?.0.div_ceil(f.0) * f.0;
            let cols = d.valid()?.1.div_ceil(f.1) * f.1;
            let rows = rows.min(d.rows()).min(s.rows().saturating_sub(off.0));
            let cols = cols.min(d.cols()).min(s.cols().saturating_sub(off.1));
            copy(cx, &s, &d, off, (0, 0), (rows, cols))
        }
        (MemSpace::Mat, MemSpace::Bias | MemSpace::Scaling)
        | (MemSpace::Vec, MemSpace::Vec)
        | (MemSpace::Vec, MemSpace::Mat) => {
            let extract = d.rows() <= s.rows() && d.cols() <= s.cols();
            if extract {
                copy(cx, &s, &d, off, (0, 0), d.valid()?)
            } else {
                copy(cx, &s, &d, (0, 0), off, s.valid()?)
            }
        }
        (from, to) => Err(SimFault::IllegalMove { from, to }),
    }
}

/// Copies a region between tiles of this core (Vec tiles in this core's UB), converting dtype
/// where the path converts (Mat -> Bias).
fn copy(
    cx: &mut ExecCtx<'_, '_, '_>,
    s: &TileLoc,
    d: &TileLoc,
    src_at: (usize, usize),
    dst_at: (usize, usize),
    size: (usize, usize),
) -> Result<(), SimFault> {
    let aiv = cx.own_aiv();
    if s.ty.dtype == d.ty.dtype && cx.copy_tiles(s, aiv, src_at, d, aiv, dst_at, size)? {
        return Ok(());
    }
    let mut bytes = cx.core.pool.bytes();
    cx.read_bytes(s, aiv, src_at, size, &mut bytes)?;
    if s.ty.dtype != d.ty.dtype {
        let mut vals = cx.core.pool.f32s(size.0 * size.1);
        numeric::decode_f32(s.ty.dtype, &bytes, &mut vals);
        bytes.clear();
        bytes.resize(vals.len() * d.es(), 0);
        numeric::encode_f32(d.ty.dtype, &vals, &mut bytes);
        cx.core.pool.put_f32s(vals);
    }
    write_out(cx, d, aiv, dst_at, size, bytes, (s, aiv, src_at))
}

/// Acc -> Vec: SingleModeVec0/1 sends the tile to one AIV; the dual modes split it (§5 tails).
fn acc_to_vec_move(
    cx: &mut ExecCtx<'_, '_, '_>,
    s: &TileLoc,
    d: &TileLoc,
    off: (usize, usize),
    mode: AccToVecMode,
    relu: bool,
    scale: Option<&Scale>,
) -> Result<(), SimFault> {
    let (vm, vn) = s.valid()?;
    cx.require_defined(s, 0, (0, 0), (vm, vn), "a Fixpipe move")?;
    match mode {
        AccToVecMode::SingleModeVec0 | AccToVecMode::SingleModeVec1 => {
            let aiv = if mode == AccToVecMode::SingleModeVec0 {
                0
            } else {
                1
            };
            let extract = d.rows() <= s.rows()
                && d.cols() <= s.cols()
                && (d.rows(), d.cols()) != (s.rows(), s.cols());
            let (src_at, dst_at, size) = if extract {
                (off, (0, 0), d.valid()?)
            } else {
                ((0, 0), off, (vm, vn))
            };
            fixpipe_into(cx, (s, src_at), (d, aiv, dst_at), size, relu, scale)
        }
        AccToVecMode::DualModeSplitM => {
            let half = vm.div_ceil(2) * 2 / 2;
            let size0 = (half.min(s.rows()), vn);
            fixpipe_into(cx, (s, (0, 0)), (d, 0, (0, 0)), size0, relu, scale)?;
            let rest = vm.saturating_sub(half);
            if rest > 0 {
                fixpipe_into(cx, (s, (half, 0)), (d, 1, (0, 0)), (rest, vn), relu, scale)?;
            }
            Ok(())
        }
        AccToVecMode::DualModeSplitN => {
            let aligned = vn.div_ceil(32) * 32;
            let half = aligned / 2;
            if aligned > s.cols() {
                // DualModeSplitN reads valid N rounded up to 32 columns.
                return Err(s.region_fault((vm, aligned)));
            }
            // Both halves are written in full (aligned N / 2 columns each), padding included.
            fixpipe_into(cx, (s, (0, 0)), (d, 0, (0, 0)), (vm, half), relu, scale)?;
            fixpipe_into(cx, (s, (0, half)), (d, 1, (0, 0)), (vm, half), relu, scale)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one-pass dequantising move gives the per-element `convert`'s bytes: int32 values
    /// across the range (f32 rounding above 2^24), per-channel words with offsets and the
    /// signed bit, one per-tensor word, with and without ReLU, to f16 (past its range too),
    /// bf16 and f32.
    #[test]
    fn the_one_pass_dequantisation_gives_the_per_element_bytes() {
        let (rows, cols) = (5, 37);
        let mut h = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            h ^= h << 13;
            h ^= h >> 7;
            h ^= h << 17;
            h
        };
        let acc: Vec<i32> = (0..rows * cols)
            .map(|i| match i % 7 {
                0 => i32::MAX - (next() % 1000) as i32,
                1 => i32::MIN + (next() % 1000) as i32,
                _ => (next() % 400_000) as i32 - 200_000,
            })
            .collect();
        let raw: Vec<u8> = acc.iter().flat_map(|v| v.to_le_bytes()).collect();
        let channel: Vec<QuantWord> = (0..cols)
            .map(|c| {
                let scale = f32::from_bits(0x3000_0000 + (next() as u32 & 0x0fff_ffff));
                let offset = (next() & 0x1ff) << 37;
                QuantWord(QuantWord::new(scale, c % 3 == 0).0 | offset)
            })
            .collect();
        let tensor = QuantWord(QuantWord::new(0.37, false).0 | (0x1f3 << 37));
        for words in [Words::Channel(channel), Words::Tensor(tensor)] {
            for relu in [false, true] {
                for dst in [DType::F16, DType::BF16, DType::F32] {
                    let es = dst.size_bytes() as usize;
                    let mut want = vec![0u8; rows * cols * es];
                    for (i, b) in raw.chunks_exact(4).enumerate() {
                        let mut x = numeric::decode_one(DType::I32, b);
                        if relu {
                            x = x.max(0.0);
                        }
                        let word = match &words {
                            Words::None => None,
                            Words::Tensor(w) => Some((w.scale(), *w)),
                            Words::Channel(ws) => ws.get(i % cols).map(|w| (w.scale_19bit(), *w)),
                        };
                        convert(x, word, dst, &mut want[i * es..(i + 1) * es]);
                    }
                    let cw = column_words(&words, cols).expect("words");
                    let mut vals = vec![0f32; rows * cols];
                    dequantise_i32(&raw, &cw, relu, dst == DType::F16, &mut vals);
                    let mut got = vec![0u8; rows * cols * es];
                    numeric::encode_f32(dst, &vals, &mut got);
                    assert_eq!(got, want, "{dst} relu {relu}");
                }
            }
        }
        assert!(column_words(&Words::None, 3).is_none());
        assert!(column_words(&Words::Channel(vec![QuantWord(0); 2]), 3).is_none());
    }
}
