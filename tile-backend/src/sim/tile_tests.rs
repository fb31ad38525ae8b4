//! Differential tests of the fast tile walks against the element-by-element layout formulas.
//!
//! The reference for every check is `TileType::element_offset` (ASCEND950.md §3), applied one
//! element at a time; the fast paths under test are `for_each_run`, `for_each_span`,
//! `read_region`, `decode_dense`, `encode_dense`, `write_dense_bytes` and `copy_between` (including the blocked
//! `transpose_blocks` between row-major and column-major layouts). Values are decoded and
//! encoded with the same `numeric` routines one element at a time, so only placement is tested.
//!
//! Each driver returns `Err(description)` on the first disagreement; the deterministic sweeps
//! cover every layout (pair), dtype size and fractal, the proptests search random tiles and
//! regions and shrink a failure to a small case.

use super::*;
use crate::ir::{c0, DType, Layout, MemSpace, TileType};
use crate::sim::host::transpose::zn_box_to_panel_rows_portable;
use crate::sim::numeric::{decode_f32, encode_f32};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

const LAYOUTS: [Layout; 5] = [Layout::ND, Layout::DN, Layout::NZ, Layout::ZN, Layout::ZZ];
/// 4-, 2-, 2-, 1- and 8-byte elements: C0 = 8, 16, 16, 32 and 4.
const DTYPES: [DType; 5] = [DType::F32, DType::F16, DType::BF16, DType::I8, DType::I64];
/// Acc boxes are 16 x 16, every other space uses 16 x C0 (NZ/ZZ) or C0 x 16 (ZN).
const SPACES: [MemSpace; 5] = [
    MemSpace::Vec,
    MemSpace::Mat,
    MemSpace::Left,
    MemSpace::Right,
    MemSpace::Acc,
];
/// The layout/order pairs `for_each_strip` documents as mapped.
const MAPPED: [(Layout, Order); 4] = [
    (Layout::ND, Order::RowMajor),
    (Layout::DN, Order::ColMajor),
    (Layout::NZ, Order::RowMajor),
    (Layout::ZN, Order::ColMajor),
];
/// What `decode_dense` must leave in scratch it does not write.
const SENTINEL: u32 = 0x7fc0_dead;

/// A region: origin `(r0, c0)` and size `(rows, cols)`.
type Region = ((usize, usize), (usize, usize));

/// The simulator's generator ([`crate::sim::io::Rng`]) with the draws of these tests: buffer
/// contents and sweep regions.
struct Rng(crate::sim::io::Rng);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(crate::sim::io::Rng::new(seed))
    }

    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    fn below(&mut self, n: usize) -> usize {
        self.0.below(n as u64) as usize
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }

    /// Values in [-120, 120] with two decimals: distinct after rounding to any tested dtype
    /// often enough, never saturating int8.
    fn vals(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| (self.below(24_001) as f32 - 12_000.0) / 100.0)
            .collect()
    }
}

/// Box rows and columns of a tile (1 x 1 for ND/DN).
fn box_of(ty: &TileType) -> (usize, usize) {
    ty.fractal
        .map(|f| (f.rows as usize, f.cols as usize))
        .unwrap_or((1, 1))
}

/// The shape unit of a layout: its box, or 16 x C0 for ND/DN (legal unboxed shapes).
fn unit(space: MemSpace, dtype: DType, layout: Layout) -> (usize, usize) {
    match layout.default_fractal(dtype, space) {
        Some(f) => (f.rows as usize, f.cols as usize),
        None => (16, c0(dtype) as usize),
    }
}

/// A tile `nr x nc` units in size, with the fractal `TileType::new` gives it.
fn tile(space: MemSpace, dtype: DType, layout: Layout, nr: usize, nc: usize) -> TileType {
    let (ur, uc) = unit(space, dtype, layout);
    TileType::new(space, dtype, (ur * nr) as u64, (uc * nc) as u64, layout)
}

fn loc_at(ty: &TileType, addr: usize) -> TileLoc<'_> {
    TileLoc {
        ty,
        addr,
        valid: Some((ty.rows as usize, ty.cols as usize)),
        name: "t",
    }
}

/// Byte offset in the buffer of element `(r, c)` by the reference formula.
fn off(loc: &TileLoc, r: usize, c: usize) -> usize {
    loc.addr + loc.ty.element_offset(r as u64, c as u64) as usize * loc.es()
}

fn describe(loc: &TileLoc) -> String {
    let fr = match loc.ty.fractal {
        Some(f) => format!("{}x{}", f.rows, f.cols),
        None => "none".into(),
    };
    format!("{} fractal {fr} at {:#x}", loc.ty, loc.addr)
}

/// The tile element (if any) holding buffer byte `b`.
fn element_at(loc: &TileLoc, b: usize) -> Option<(usize, usize)> {
    let es = loc.es();
    (0..loc.rows())
        .flat_map(|r| (0..loc.cols()).map(move |c| (r, c)))
        .find(|&(r, c)| (off(loc, r, c)..off(loc, r, c) + es).contains(&b))
}

/// `Ok` when `got == want`, else where they first differ, naming the tile element there.
fn same_bytes(got: &[u8], want: &[u8], loc: &TileLoc, region: Region) -> Result<(), String> {
    let Some(b) = (0..got.len()).find(|&i| got[i] != want[i]) else {
        return Ok(());
    };
    let ((r0, c0), (h, w)) = region;
    let what = match element_at(loc, b) {
        Some((r, c)) if (r0..r0 + h).contains(&r) && (c0..c0 + w).contains(&c) => {
            format!("element ({r}, {c}) inside the region")
        }
        Some((r, c)) => format!("element ({r}, {c}) outside the region"),
        None => "a byte outside the tile".into(),
    };
    let n = got.iter().zip(want).filter(|(a, b)| a != b).count();
    Err(format!(
        "byte {b:#x} ({what}) is {:#04x}, want {:#04x}; {n} bytes differ",
        got[b], want[b]
    ))
}

/// The reference: byte offset of every region element, row-major over the region.
fn region_offsets(loc: &TileLoc, ((r0, c0), (h, w)): Region) -> Vec<usize> {
    (0..h)
        .flat_map(|i| (0..w).map(move |j| (i, j)))
        .map(|(i, j)| off(loc, r0 + i, c0 + j))
        .collect()
}

/// Each run element sits where the formula puts the region element it claims, and every region
/// element is in exactly one run.
fn check_runs(loc: &TileLoc, region: Region, runs: &[Run]) -> Result<(), String> {
    let (_, (h, w)) = region;
    let want = region_offsets(loc, region);
    let es = loc.es();
    let mut seen = vec![0u32; h * w];
    for run in runs {
        for k in 0..run.len {
            let idx = run.elem + k * run.stride;
            if idx >= h * w {
                return Err(format!(
                    "{run:?}: element {k} is region index {idx} >= {}",
                    h * w
                ));
            }
            let at = run.buf + k * es;
            if at != want[idx] {
                return Err(format!(
                    "{run:?}: element {k} (region ({}, {})) at byte {at:#x}, formula says {:#x}",
                    idx / w,
                    idx % w,
                    want[idx]
                ));
            }
            seen[idx] += 1;
        }
    }
    match seen.iter().position(|&n| n != 1) {
        Some(i) => Err(format!(
            "region element ({}, {}) is in {} runs",
            i / w,
            i % w,
            seen[i]
        )),
        None => Ok(()),
    }
}

/// The spans cover exactly the region's element bytes, each once, inside the buffer, and no
/// span continues the one before it (those merge).
fn check_spans(
    loc: &TileLoc,
    buf_len: usize,
    region: Region,
    spans: &[(usize, usize)],
) -> Result<(), String> {
    let es = loc.es();
    let mut want = vec![false; buf_len];
    for o in region_offsets(loc, region) {
        for b in &mut want[o..o + es] {
            if *b {
                return Err(format!("reference: byte {o:#x} of two elements"));
            }
            *b = true;
        }
    }
    let mut cover = vec![0u32; buf_len];
    let mut prev_end = None;
    for &(s, l) in spans {
        if s + l > buf_len {
            return Err(format!(
                "span ({s:#x}, {l}) passes the {buf_len}-byte buffer"
            ));
        }
        if l == 0 {
            return Err(format!("empty span at {s:#x}"));
        }
        if prev_end == Some(s) {
            return Err(format!(
                "span ({s:#x}, {l}) continues the previous one unmerged"
            ));
        }
        prev_end = Some(s + l);
        for c in &mut cover[s..s + l] {
            *c += 1;
        }
    }
    for b in 0..buf_len {
        let expect = u32::from(want[b]);
        if cover[b] != expect {
            let what = match element_at(loc, b) {
                Some((r, c)) => format!("element ({r}, {c})"),
                None => "outside the tile".into(),
            };
            return Err(format!(
                "byte {b:#x} ({what}) covered {} times, want {expect}",
                cover[b]
            ));
        }
    }
    Ok(())
}

/// `read_region`'s row-major bytes are the region elements' bytes.
fn check_read(buf: &[u8], loc: &TileLoc, region: Region, out: &[u8]) -> Result<(), String> {
    let (_, (h, w)) = region;
    let es = loc.es();
    if out.len() != h * w * es {
        return Err(format!("read_region gave {} bytes for {h}x{w}", out.len()));
    }
    for (idx, o) in region_offsets(loc, region).into_iter().enumerate() {
        if out[idx * es..(idx + 1) * es] != buf[o..o + es] {
            return Err(format!(
                "read_region: region element ({}, {}) differs from the bytes at {o:#x}",
                idx / w,
                idx % w
            ));
        }
    }
    Ok(())
}

/// Index in a dense matrix of `order` of region element `(i, j)`.
fn dense_index(order: Order, (h, w): (usize, usize), i: usize, j: usize) -> usize {
    match order {
        Order::RowMajor => i * w + j,
        Order::ColMajor => j * h + i,
    }
}

/// `out` holds the decode of every region element at its dense index, sentinels after.
fn check_decode(
    buf: &[u8],
    loc: &TileLoc,
    region: Region,
    order: Order,
    out: &[f32],
) -> Result<(), String> {
    let ((r0, c0), (h, w)) = region;
    let es = loc.es();
    for i in 0..h {
        for j in 0..w {
            let o = off(loc, r0 + i, c0 + j);
            let mut want = [0f32];
            decode_f32(loc.ty.dtype, &buf[o..o + es], &mut want);
            let d = dense_index(order, (h, w), i, j);
            if out[d].to_bits() != want[0].to_bits() {
                return Err(format!(
                    "{order:?} out[{d}] (element ({}, {})) is {:?} ({:#x}), want {:?} ({:#x})",
                    r0 + i,
                    c0 + j,
                    out[d],
                    out[d].to_bits(),
                    want[0],
                    want[0].to_bits()
                ));
            }
        }
    }
    match out[h * w..].iter().position(|v| v.to_bits() != SENTINEL) {
        Some(k) => Err(format!(
            "{order:?}: out[{}] past the region written",
            h * w + k
        )),
        None => Ok(()),
    }
}

/// `buf` with the region encoded from `vals` element by element.
fn encode_reference(
    buf: &[u8],
    loc: &TileLoc,
    region: Region,
    order: Order,
    vals: &[f32],
) -> Vec<u8> {
    let ((r0, c0), (h, w)) = region;
    let es = loc.es();
    let mut want = buf.to_vec();
    for i in 0..h {
        for j in 0..w {
            let o = off(loc, r0 + i, c0 + j);
            let v = vals[dense_index(order, (h, w), i, j)];
            encode_f32(loc.ty.dtype, &[v], &mut want[o..o + es]);
        }
    }
    want
}

/// `dst` with the region copied element by element.
fn copy_reference(
    src: &[u8],
    s: &TileLoc,
    (sr0, sc0): (usize, usize),
    dst: &[u8],
    d: &TileLoc,
    (dr0, dc0): (usize, usize),
    (h, w): (usize, usize),
) -> Vec<u8> {
    let es = s.es();
    let mut want = dst.to_vec();
    for i in 0..h {
        for j in 0..w {
            let (so, dof) = (off(s, sr0 + i, sc0 + j), off(d, dr0 + i, dc0 + j));
            want[dof..dof + es].copy_from_slice(&src[so..so + es]);
        }
    }
    want
}

/// Runs, spans and `read_region` of one region of a tile at `addr` in a buffer `tail` bytes
/// longer than the tile.
fn walks_case(
    ty: &TileType,
    addr: usize,
    tail: usize,
    region: Region,
    seed: u64,
) -> Result<(), String> {
    let loc = loc_at(ty, addr);
    let len = addr + ty.bytes() as usize + tail;
    let buf = Rng::new(seed).bytes(len);
    let (at, size) = region;
    let ctx = |e: String| format!("{}, region {size:?} at {at:?}: {e}", describe(&loc));
    let mut runs = vec![];
    for_each_run(&loc, len, at, size, |r| runs.push(r)).map_err(|e| ctx(e.to_string()))?;
    check_runs(&loc, region, &runs).map_err(|e| ctx(format!("for_each_run: {e}")))?;
    let mut spans = vec![];
    for_each_span(&loc, len, at, size, |s, l| spans.push((s, l)))
        .map_err(|e| ctx(e.to_string()))?;
    check_spans(&loc, len, region, &spans).map_err(|e| ctx(format!("for_each_span: {e}")))?;
    let mut out = vec![0xa5; 3];
    read_region(&buf, &loc, at, size, &mut out).map_err(|e| ctx(e.to_string()))?;
    check_read(&buf, &loc, region, &out).map_err(ctx)
}

/// `decode_dense` and `encode_dense` of one region, both orders.
fn dense_case(
    ty: &TileType,
    addr: usize,
    tail: usize,
    region: Region,
    seed: u64,
) -> Result<(), String> {
    let loc = loc_at(ty, addr);
    let len = addr + ty.bytes() as usize + tail;
    let mut rng = Rng::new(seed);
    let buf = rng.bytes(len);
    let (at, size) = region;
    let n = size.0 * size.1;
    for order in [Order::RowMajor, Order::ColMajor] {
        let ctx = |e: String| {
            format!(
                "{}, region {size:?} at {at:?}, {order:?}: {e}",
                describe(&loc)
            )
        };
        let mapped = MAPPED.contains(&(ty.layout, order));
        // Decode.
        let mut out = vec![f32::from_bits(SENTINEL); n + 5];
        match decode_dense(&buf, &loc, at, size, order, &mut out).map_err(|e| ctx(e.to_string()))? {
            true => check_decode(&buf, &loc, region, order, &out)
                .map_err(|e| ctx(format!("decode_dense: {e}")))?,
            false if mapped => return Err(ctx("decode_dense declined a mapped pair".into())),
            false => {
                if let Some(k) = out.iter().position(|v| v.to_bits() != SENTINEL) {
                    return Err(ctx(format!(
                        "decode_dense returned false but wrote out[{k}]"
                    )));
                }
            }
        }
        // Encode (more values than needed: the extra ones must be ignored).
        let vals = rng.vals(n + 3);
        let mut got = buf.clone();
        let wrote =
            encode_dense(&mut got, &loc, at, size, order, &vals).map_err(|e| ctx(e.to_string()))?;
        let want = match wrote {
            true => encode_reference(&buf, &loc, region, order, &vals),
            false if mapped => return Err(ctx("encode_dense declined a mapped pair".into())),
            false => buf.clone(),
        };
        same_bytes(&got, &want, &loc, region)
            .map_err(|e| ctx(format!("encode_dense (returned {wrote}): {e}")))?;
    }
    // Row-major element bytes copied in (more than needed: the extra ones must be ignored).
    let ctx = |e: String| format!("{}, region {size:?} at {at:?}: {e}", describe(&loc));
    let es = loc.es();
    let data = rng.bytes((n + 2) * es);
    let mut got = buf.clone();
    let wrote =
        write_dense_bytes(&mut got, &loc, at, size, &data).map_err(|e| ctx(e.to_string()))?;
    let want = match wrote {
        true => {
            let ((r0, c0), (h, w)) = region;
            let mut want = buf.clone();
            for i in 0..h {
                for j in 0..w {
                    let (o, d) = (off(&loc, r0 + i, c0 + j), (i * w + j) * es);
                    want[o..o + es].copy_from_slice(&data[d..d + es]);
                }
            }
            want
        }
        false if MAPPED.contains(&(ty.layout, Order::RowMajor)) => {
            return Err(ctx("write_dense_bytes declined a row-major layout".into()))
        }
        false => buf.clone(),
    };
    same_bytes(&got, &want, &loc, region)
        .map_err(|e| ctx(format!("write_dense_bytes (returned {wrote}): {e}")))?;
    pitched_case(&loc, &buf, region, rng.next()).map_err(ctx)?;
    rows_case(&loc, &buf, region, rng.next()).map_err(ctx)?;
    // A pad fill writes what the repeated value copied in writes (a mixed and a uniform value).
    for one in [rng.bytes(es), vec![0; es]] {
        let mut want = buf.clone();
        let dense = write_dense_bytes(&mut want, &loc, at, size, &one.repeat(n))
            .map_err(|e| ctx(e.to_string()))?;
        let mut got = buf.clone();
        let filled = fill_dense(&mut got, &loc, at, size, &one).map_err(|e| ctx(e.to_string()))?;
        if filled != dense && n > 0 {
            return Err(ctx(format!(
                "fill_dense returned {filled}, write_dense_bytes {dense}"
            )));
        }
        let want = if filled { want } else { buf.clone() };
        same_bytes(&got, &want, &loc, region)
            .map_err(|e| ctx(format!("fill_dense (returned {filled}): {e}")))?;
    }
    Ok(())
}

/// `write_pitched_bytes` of rows `pitch` elements apart (pitch > width: the gaps must be
/// skipped) writes what `write_dense_bytes` writes from the same rows packed, and declines what
/// it declines; a source one byte short is an error.
fn pitched_case(loc: &TileLoc, buf: &[u8], region: Region, seed: u64) -> Result<(), String> {
    let mut rng = Rng::new(seed);
    let ((r0, c0), (h, w)) = region;
    let es = loc.es();
    let pitch = w + 1 + rng.below(40);
    let src = rng.bytes((h.max(1) * pitch) * es);
    let mut packed = Vec::with_capacity(h * w * es);
    for i in 0..h {
        packed.extend_from_slice(&src[i * pitch * es..(i * pitch + w) * es]);
    }
    let mut want = buf.to_vec();
    let dense =
        write_dense_bytes(&mut want, loc, (r0, c0), (h, w), &packed).map_err(|e| e.to_string())?;
    let mut got = buf.to_vec();
    let pitched = write_pitched_bytes(&mut got, loc, (r0, c0), (h, w), &src, pitch)
        .map_err(|e| e.to_string())?;
    if pitched != dense && h > 0 && w > 0 {
        return Err(format!(
            "write_pitched_bytes returned {pitched}, write_dense_bytes {dense}"
        ));
    }
    if !pitched {
        return same_bytes(&got, buf, loc, region)
            .map_err(|e| format!("write_pitched_bytes declined but wrote: {e}"));
    }
    same_bytes(&got, &want, loc, region).map_err(|e| format!("write_pitched_bytes: {e}"))?;
    if h > 0 && w > 0 {
        let need = ((h - 1) * pitch + w) * es;
        let short = write_pitched_bytes(&mut got, loc, (r0, c0), (h, w), &src[..need - 1], pitch);
        if short.is_ok() {
            return Err(format!(
                "a {}-byte source for {need} bytes was accepted",
                need - 1
            ));
        }
    }
    Ok(())
}

/// `write_row_slices` of rows that lie apart (each its own allocation, some longer than the
/// region's width) writes what `write_dense_bytes` writes from the same rows packed, and
/// declines what it declines; a row one byte short is an error.
fn rows_case(loc: &TileLoc, buf: &[u8], region: Region, seed: u64) -> Result<(), String> {
    let mut rng = Rng::new(seed);
    let ((r0, c0), (h, w)) = region;
    let es = loc.es();
    let owned: Vec<Vec<u8>> = (0..h)
        .map(|_| {
            let extra = rng.below(3);
            rng.bytes((w + extra) * es)
        })
        .collect();
    let rows: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
    let packed: Vec<u8> = rows.iter().flat_map(|r| r[..w * es].to_vec()).collect();
    let mut want = buf.to_vec();
    let dense =
        write_dense_bytes(&mut want, loc, (r0, c0), (h, w), &packed).map_err(|e| e.to_string())?;
    let mut got = buf.to_vec();
    let wrote = write_row_slices(&mut got, loc, (r0, c0), w, &rows).map_err(|e| e.to_string())?;
    let strips = w.div_ceil((32 / es).max(1)) + 1;
    if wrote != dense && h > 0 && w > 0 && strips <= ROW_SLICE_STRIPS {
        return Err(format!(
            "write_row_slices returned {wrote}, write_dense_bytes {dense}"
        ));
    }
    if !wrote {
        return same_bytes(&got, buf, loc, region)
            .map_err(|e| format!("write_row_slices declined but wrote: {e}"));
    }
    same_bytes(&got, &want, loc, region).map_err(|e| format!("write_row_slices: {e}"))?;
    if h > 0 && w > 0 {
        let mut short = rows.clone();
        short[h - 1] = &owned[h - 1][..w * es - 1];
        if write_row_slices(&mut got, loc, (r0, c0), w, &short).is_ok() {
            return Err("a row one byte short was accepted".into());
        }
    }
    Ok(())
}

/// A gather's rows into an NZ tile of more box columns than `write_row_slices` lists
/// (f32 DeepSeek K rows are 72 columns of boxes; 130 here) are declined, nothing written;
/// 72 are taken, with `write_dense_bytes`' bytes.
#[test]
fn row_slices_decline_more_strips_than_they_list() {
    let mut rng = Rng::new(0x5eed_00a8);
    for (cols, taken) in [(576usize, true), (1040, false)] {
        let ty = TileType::new(MemSpace::Mat, DType::F32, 64, cols as u64, Layout::NZ);
        let loc = loc_at(&ty, 0);
        let buf = rng.bytes(ty.bytes() as usize);
        let owned: Vec<Vec<u8>> = (0..64).map(|_| rng.bytes(cols * 4)).collect();
        let rows: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
        let mut got = buf.clone();
        let wrote = write_row_slices(&mut got, &loc, (0, 0), cols, &rows);
        assert_eq!(wrote, Ok(taken), "{cols} columns");
        if taken {
            let mut want = buf.clone();
            let packed: Vec<u8> = owned.concat();
            let dense = write_dense_bytes(&mut want, &loc, (0, 0), (64, cols), &packed);
            assert_eq!(dense, Ok(true));
            assert!(got == want, "{cols} columns: the bytes differ");
        } else {
            assert!(got == buf, "declined but wrote");
        }
    }
}

/// An NZ tile with more box columns than `write_pitched_bytes` gathers on its stack (64) takes
/// its strip-by-strip path, with the same bytes.
#[test]
fn pitched_rows_into_a_wide_nz_tile() {
    let mut rng = Rng::new(0x5eed_00a7);
    for dtype in [DType::I8, DType::F32] {
        let ty = tile(MemSpace::Mat, dtype, Layout::NZ, 2, 70);
        let (rows, cols) = (ty.rows as usize, ty.cols as usize);
        let loc = loc_at(&ty, 64);
        let buf = rng.bytes(64 + ty.bytes() as usize);
        for region in [((0, 0), (rows, cols)), ((3, 5), (rows - 3, cols - 9))] {
            if let Err(e) = pitched_case(&loc, &buf, region, rng.next()) {
                panic!("{} region {region:?}: {e}", describe(&loc));
            }
        }
    }
}

/// `copy_between` of one region between two tiles of one dtype.
#[allow(clippy::too_many_arguments)]
fn copy_case(
    s_ty: &TileType,
    s_addr: usize,
    d_ty: &TileType,
    d_addr: usize,
    s_at: (usize, usize),
    d_at: (usize, usize),
    size: (usize, usize),
    seed: u64,
) -> Result<(), String> {
    let (s, d) = (loc_at(s_ty, s_addr), loc_at(d_ty, d_addr));
    let mut rng = Rng::new(seed);
    let (s_tail, d_tail) = (rng.below(40), rng.below(40));
    let src = rng.bytes(s_addr + s_ty.bytes() as usize + s_tail);
    let dst = rng.bytes(d_addr + d_ty.bytes() as usize + d_tail);
    let mut got = dst.clone();
    let ctx = |e: String| {
        format!(
            "copy {size:?} from {} at {s_at:?} to {} at {d_at:?}: {e}",
            describe(&s),
            describe(&d)
        )
    };
    copy_between(&src, &s, s_at, &mut got, &d, d_at, size).map_err(|e| ctx(e.to_string()))?;
    let want = copy_reference(&src, &s, s_at, &dst, &d, d_at, size);
    same_bytes(&got, &want, &d, (d_at, size)).map_err(ctx)
}

/// Interesting regions of a `rows x cols` tile with `ir x ic` boxes, plus `n` random ones.
fn sweep_regions(
    rows: usize,
    cols: usize,
    (ir, ic): (usize, usize),
    rng: &mut Rng,
    n: usize,
) -> Vec<Region> {
    let mut v = vec![
        ((0, 0), (rows, cols)),
        ((0, 0), (1, cols)),
        ((rows - 1, 0), (1, cols)),
        ((rows / 2, 0), (1, cols)),
        ((0, 0), (rows, 1)),
        ((0, cols - 1), (rows, 1)),
        ((0, cols / 2), (rows, 1)),
        ((rows - 1, cols - 1), (1, 1)),
        ((0, 0), (ir.min(rows), ic.min(cols))),
        ((rows / 2, cols / 2), (rows - rows / 2, cols - cols / 2)),
        (
            (1.min(rows - 1), 1.min(cols - 1)),
            (rows - 1.min(rows - 1), cols - 1.min(cols - 1)),
        ),
        ((0, 0), (rows, cols - 1.min(cols - 1))),
        ((0, 0), (rows - 1.min(rows - 1), cols)),
        ((0, 0), (0, cols)),
        ((rows, 0), (0, cols)),
        ((rows / 2, cols), (rows - rows / 2, 0)),
        ((rows, cols), (0, 0)),
    ];
    if rows > ir && cols > ic {
        v.push(((ir, ic), (rows - ir, cols - ic)));
        v.push((
            (ir - 1, ic - 1),
            (2.min(rows - ir + 1), 2.min(cols - ic + 1)),
        ));
        v.push(((ir / 2, ic / 2), (ir, ic)));
    }
    for _ in 0..n {
        v.push(random_region(rows, cols, (ir, ic), rng.next()));
    }
    v
}

/// A non-empty region from raw bits, sometimes snapped to box edges.
fn random_region(rows: usize, cols: usize, (ir, ic): (usize, usize), bits: u64) -> Region {
    let raw = |k: u32| ((bits >> (k * 14)) & 0x3fff) as usize;
    let align = (bits >> 56) as u8;
    let mut r0 = raw(0) % rows;
    let mut c0 = raw(1) % cols;
    if align & 1 != 0 {
        r0 -= r0 % ir;
    }
    if align & 2 != 0 {
        c0 -= c0 % ic;
    }
    let mut h = 1 + raw(2) % (rows - r0);
    let mut w = 1 + raw(3) % (cols - c0);
    if align & 4 != 0 {
        h = h.div_ceil(ir) * ir;
    }
    if align & 8 != 0 {
        w = w.div_ceil(ic) * ic;
    }
    ((r0, c0), (h.min(rows - r0), w.min(cols - c0)))
}

// ---- Sanity: the reference formula and the checkers themselves ----

#[test]
fn reference_formula_distinguishes_layouts() {
    // The fractals the tests rely on, as TileType::new sets them.
    let fr = |space, dtype, layout| box_of(&TileType::new(space, dtype, 64, 64, layout));
    assert_eq!(fr(MemSpace::Vec, DType::F32, Layout::NZ), (16, 8));
    assert_eq!(fr(MemSpace::Left, DType::F16, Layout::NZ), (16, 16));
    assert_eq!(fr(MemSpace::Right, DType::I8, Layout::ZN), (32, 16));
    assert_eq!(fr(MemSpace::Mat, DType::I8, Layout::ZZ), (16, 32));
    assert_eq!(fr(MemSpace::Acc, DType::F32, Layout::NZ), (16, 16));
    assert_eq!(fr(MemSpace::Acc, DType::F32, Layout::ZN), (16, 16));
    assert_eq!(fr(MemSpace::Vec, DType::I64, Layout::NZ), (16, 4));
    assert_eq!(fr(MemSpace::Vec, DType::F32, Layout::ND), (1, 1));

    // A 32 x 32 f16 tile: 2 x 2 boxes of 16 x 16.
    let tys: Vec<TileType> = LAYOUTS
        .iter()
        .map(|&l| TileType::new(MemSpace::Vec, DType::F16, 32, 32, l))
        .collect();
    let offs = |t: &TileType| -> Vec<u64> {
        (0..32)
            .flat_map(|r| (0..32).map(move |c| (r, c)))
            .map(|(r, c)| t.element_offset(r, c))
            .collect()
    };
    for t in &tys {
        let mut o = offs(t);
        o.sort_unstable();
        assert_eq!(o, (0..1024).collect::<Vec<_>>(), "{t} is not a bijection");
    }
    for (i, a) in tys.iter().enumerate() {
        for b in &tys[i + 1..] {
            assert_ne!(offs(a), offs(b), "{a} and {b} place every element alike");
        }
    }
    // Spot values from ASCEND950.md §3.
    let at = |l: usize, r, c| tys[l].element_offset(r, c);
    assert_eq!(at(0, 1, 0), 32); // ND
    assert_eq!(at(1, 0, 1), 32); // DN
    assert_eq!(at(2, 0, 16), 512); // NZ: next box column after nbr = 2 boxes
    assert_eq!(at(2, 1, 0), 16);
    assert_eq!(at(3, 1, 0), 1); // ZN: column-major box
    assert_eq!(at(3, 0, 1), 16);
    assert_eq!(at(3, 16, 0), 512); // ZN: next box row after nbc = 2 boxes
    assert_eq!(at(4, 0, 16), 256); // ZZ: next box along the row
    assert_eq!(at(4, 16, 0), 512);
    assert_ne!(at(2, 5, 20), at(0, 5, 20));
}

#[test]
fn checkers_reject_the_wrong_layout() {
    // Results computed for an ND tile must fail every check against the NZ tile of the same
    // shape: each check can fail.
    let nz = TileType::new(MemSpace::Vec, DType::F16, 32, 32, Layout::NZ);
    let nd = TileType::new(MemSpace::Vec, DType::F16, 32, 32, Layout::ND);
    let (lz, ld) = (loc_at(&nz, 8), loc_at(&nd, 8));
    let region = ((3, 5), (20, 20));
    let (at, size) = region;
    let len = 8 + nz.bytes() as usize + 8;
    let buf = Rng::new(7).bytes(len);

    let mut runs = vec![];
    for_each_run(&ld, len, at, size, |r| runs.push(r)).unwrap();
    assert!(check_runs(&lz, region, &runs).is_err());
    assert!(check_runs(&ld, region, &runs).is_ok());

    let mut spans = vec![];
    for_each_span(&ld, len, at, size, |s, l| spans.push((s, l))).unwrap();
    assert!(check_spans(&lz, len, region, &spans).is_err());
    assert!(check_spans(&ld, len, region, &spans).is_ok());

    let mut bytes = vec![];
    read_region(&buf, &ld, at, size, &mut bytes).unwrap();
    assert!(check_read(&buf, &lz, region, &bytes).is_err());
    assert!(check_read(&buf, &ld, region, &bytes).is_ok());

    let mut out = vec![f32::from_bits(SENTINEL); 400 + 5];
    assert!(decode_dense(&buf, &ld, at, size, Order::RowMajor, &mut out).unwrap());
    assert!(check_decode(&buf, &lz, region, Order::RowMajor, &out).is_err());
    assert!(check_decode(&buf, &ld, region, Order::RowMajor, &out).is_ok());
    // The wrong order fails too.
    assert!(check_decode(&buf, &ld, region, Order::ColMajor, &out).is_err());

    let vals = Rng::new(8).vals(400);
    let mut got = buf.clone();
    assert!(encode_dense(&mut got, &ld, at, size, Order::RowMajor, &vals).unwrap());
    let want_z = encode_reference(&buf, &lz, region, Order::RowMajor, &vals);
    let want_d = encode_reference(&buf, &ld, region, Order::RowMajor, &vals);
    assert!(same_bytes(&got, &want_z, &lz, region).is_err());
    assert!(same_bytes(&got, &want_d, &ld, region).is_ok());

    let src = Rng::new(9).bytes(len);
    let mut got = buf.clone();
    copy_between(&src, &lz, (1, 2), &mut got, &ld, at, size).unwrap();
    let want_z = copy_reference(&src, &lz, (1, 2), &buf, &lz, at, size);
    let want_d = copy_reference(&src, &lz, (1, 2), &buf, &ld, at, size);
    assert!(same_bytes(&got, &want_z, &lz, region).is_err());
    assert!(same_bytes(&got, &want_d, &ld, region).is_ok());
}

#[test]
fn bad_regions_are_errors() {
    let ty = TileType::new(MemSpace::Vec, DType::F32, 32, 16, Layout::NZ);
    let loc = loc_at(&ty, 4);
    let len = 4 + ty.bytes() as usize;
    let buf = vec![0u8; len];
    assert!(for_each_span(&loc, len, (30, 0), (3, 1), |_, _| {}).is_err());
    assert!(for_each_span(&loc, len, (0, 10), (1, 7), |_, _| {}).is_err());
    assert!(for_each_span(&loc, len - 1, (0, 0), (1, 1), |_, _| {}).is_err());
    let mut out = vec![0f32; 4];
    assert!(decode_dense(&buf, &loc, (0, 0), (2, 4), Order::RowMajor, &mut out).is_err());
    let h = TileType::new(MemSpace::Vec, DType::F16, 32, 16, Layout::NZ);
    let mut dst = vec![0u8; 4 + h.bytes() as usize];
    let hl = loc_at(&h, 4);
    assert!(copy_between(&buf, &loc, (0, 0), &mut dst, &hl, (0, 0), (1, 1)).is_err());
}

// ---- Deterministic sweeps: every layout (pair), dtype size and fractal ----

#[test]
fn walks_match_formula_sweep() {
    let mut rng = Rng::new(0x5eed_0001);
    for &layout in &LAYOUTS {
        for &dtype in &DTYPES {
            for &space in &SPACES {
                for (nr, nc) in [(1, 1), (3, 2), (2, 4)] {
                    let ty = tile(space, dtype, layout, nr, nc);
                    let (rows, cols) = (ty.rows as usize, ty.cols as usize);
                    let b = box_of(&ty);
                    for region in sweep_regions(rows, cols, b, &mut rng, 12) {
                        let addr = rng.below(3) * (1 + rng.below(64));
                        let r = walks_case(&ty, addr, rng.below(48), region, rng.next());
                        if let Err(e) = r {
                            panic!("{e}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn dense_match_formula_sweep() {
    let mut rng = Rng::new(0x5eed_0002);
    for &layout in &LAYOUTS {
        for &dtype in &DTYPES {
            for &space in &SPACES {
                for (nr, nc) in [(1, 1), (3, 2), (2, 4)] {
                    let ty = tile(space, dtype, layout, nr, nc);
                    let (rows, cols) = (ty.rows as usize, ty.cols as usize);
                    let b = box_of(&ty);
                    for region in sweep_regions(rows, cols, b, &mut rng, 12) {
                        let addr = rng.below(3) * (1 + rng.below(64));
                        let r = dense_case(&ty, addr, rng.below(48), region, rng.next());
                        if let Err(e) = r {
                            panic!("{e}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn copy_matches_formula_sweep() {
    let mut rng = Rng::new(0x5eed_0003);
    // Source and destination spaces: same boxes, and Acc's 16 x 16 boxes against 16 x C0.
    let space_pairs = [
        (MemSpace::Vec, MemSpace::Vec),
        (MemSpace::Acc, MemSpace::Vec),
        (MemSpace::Mat, MemSpace::Acc),
        (MemSpace::Mat, MemSpace::Left),
        (MemSpace::Right, MemSpace::Mat),
    ];
    for &sl in &LAYOUTS {
        for &dl in &LAYOUTS {
            for &dtype in &DTYPES {
                for &(ss, ds) in &space_pairs {
                    for ((snr, snc), (dnr, dnc)) in
                        [((1, 1), (1, 1)), ((3, 2), (2, 4)), ((2, 3), (3, 2))]
                    {
                        let s_ty = tile(ss, dtype, sl, snr, snc);
                        let d_ty = tile(ds, dtype, dl, dnr, dnc);
                        let rows = s_ty.rows.min(d_ty.rows) as usize;
                        let cols = s_ty.cols.min(d_ty.cols) as usize;
                        let (sb, db) = (box_of(&s_ty), box_of(&d_ty));
                        let b = (sb.0.max(db.0), sb.1.max(db.1));
                        for ((r0, c0), (h, w)) in sweep_regions(rows, cols, b, &mut rng, 8) {
                            // The region at (r0, c0) of one side, shifted on the other.
                            let mut shift = |at: usize, n: usize, max: u64| {
                                if rng.below(2) == 0 {
                                    at
                                } else {
                                    rng.below(max as usize - n + 1)
                                }
                            };
                            let s_at = (shift(r0, h, s_ty.rows), shift(c0, w, s_ty.cols));
                            let d_at = (shift(r0, h, d_ty.rows), shift(c0, w, d_ty.cols));
                            let (sa, da) =
                                (rng.below(2) * rng.below(64), rng.below(2) * rng.below(64));
                            let r = copy_case(&s_ty, sa, &d_ty, da, s_at, d_at, (h, w), rng.next());
                            if let Err(e) = r {
                                panic!("{e}");
                            }
                        }
                    }
                }
            }
        }
    }
}

// ---- Random search (shrinks to a small failing case) ----

/// One tile: layout, dtype, space, size (boxes or, with `odd`, any ND/DN shape), address.
#[derive(Debug, Clone)]
struct TileCase {
    layout: usize,
    dtype: usize,
    space: usize,
    a: usize,
    b: usize,
    odd: bool,
    addr: usize,
}

impl TileCase {
    fn ty(&self) -> TileType {
        let (layout, dtype, space) = (LAYOUTS[self.layout], DTYPES[self.dtype], SPACES[self.space]);
        if self.odd && !layout.is_boxed() {
            TileType::new(
                space,
                dtype,
                1 + self.a as u64 % 40,
                1 + self.b as u64 % 40,
                layout,
            )
        } else {
            tile(space, dtype, layout, 1 + self.a % 4, 1 + self.b % 4)
        }
    }
}

fn tile_case(dtype: impl Strategy<Value = usize>) -> impl Strategy<Value = TileCase> {
    (
        0..5usize,
        dtype,
        0..5usize,
        0..40usize,
        0..40usize,
        any::<bool>(),
        0..70usize,
    )
        .prop_map(|(layout, dtype, space, a, b, odd, addr)| TileCase {
            layout,
            dtype,
            space,
            a,
            b,
            odd,
            addr,
        })
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn walks_match_formula(t in tile_case(0..5usize), bits in any::<u64>(), tail in 0..40usize, seed in any::<u64>()) {
        let ty = t.ty();
        let region = random_region(ty.rows as usize, ty.cols as usize, box_of(&ty), bits);
        walks_case(&ty, t.addr, tail, region, seed).map_err(TestCaseError::fail)?;
    }

    /// The whole tile (the fast path of `for_each_span`: one span, no geometry) in every layout.
    #[test]
    fn whole_tile_walks_match_formula(t in tile_case(0..5usize), tail in 0..40usize, seed in any::<u64>()) {
        let ty = t.ty();
        let region = ((0, 0), (ty.rows as usize, ty.cols as usize));
        walks_case(&ty, t.addr, tail, region, seed).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn dense_match_formula(t in tile_case(0..5usize), bits in any::<u64>(), tail in 0..40usize, seed in any::<u64>()) {
        let ty = t.ty();
        let region = random_region(ty.rows as usize, ty.cols as usize, box_of(&ty), bits);
        dense_case(&ty, t.addr, tail, region, seed).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn copy_matches_formula(
        (s, d) in (0..5usize).prop_flat_map(|k| (tile_case(Just(k)), tile_case(Just(k)))),
        raw in any::<[u16; 6]>(),
        align in 0u8..16,
        seed in any::<u64>(),
    ) {
        let (s_ty, d_ty) = (s.ty(), d.ty());
        let (sb, db) = (box_of(&s_ty), box_of(&d_ty));
        let (sr, sc, dr, dc) =
            (s_ty.rows as usize, s_ty.cols as usize, d_ty.rows as usize, d_ty.cols as usize);
        let h = 1 + raw[0] as usize % sr.min(dr);
        let w = 1 + raw[1] as usize % sc.min(dc);
        let pick = |x: u16, room: usize, snap: usize, on: bool| {
            let v = x as usize % (room + 1);
            if on { v - v % snap } else { v }
        };
        let s_at = (pick(raw[2], sr - h, sb.0, align & 1 != 0), pick(raw[3], sc - w, sb.1, align & 2 != 0));
        let d_at = (pick(raw[4], dr - h, db.0, align & 4 != 0), pick(raw[5], dc - w, db.1, align & 8 != 0));
        copy_case(&s_ty, s.addr, &d_ty, d.addr, s_at, d_at, (h, w), seed)
            .map_err(TestCaseError::fail)?;
    }
}

/// The box transpose under `decode_panels_f32`'s ZN path gives the same bits on every path
/// (AVX where the CPU has it, element by element otherwise), NaN payloads included.
#[test]
fn a_zn_box_becomes_the_same_panel_rows_on_every_path() {
    let mut rng = Rng::new(0x5eed_0006);
    for _ in 0..16 {
        let bx: [f32; 128] = std::array::from_fn(|_| f32::from_bits(rng.next() as u32));
        let mut portable = [0f32; 128];
        zn_box_to_panel_rows_portable(&bx, &mut portable);
        let mut dispatched = [0f32; 128];
        zn_box_to_panel_rows(&bx, &mut dispatched);
        for i in 0..8 {
            for j in 0..16 {
                assert_eq!(portable[i * 16 + j].to_bits(), bx[j * 8 + i].to_bits());
                assert_eq!(dispatched[i * 16 + j].to_bits(), bx[j * 8 + i].to_bits());
            }
        }
    }
}

/// `decode_panels_f32` puts element `(r0 + i, c0 + 16 s + j)`, decoded to f32, at
/// `out[(s * h + i) * 16 + j]` for every layout, space and float dtype it takes (f32, bf16,
/// f16), at random regions (16-column multiples) and addresses, and writes nothing past the
/// panels.
#[test]
fn panels_match_formula_sweep() {
    let mut rng = Rng::new(0x5eed_0005);
    for dtype in [DType::F32, DType::BF16, DType::F16] {
        for &layout in &LAYOUTS {
            for &space in &SPACES {
                for (nr, nc) in [(1, 2), (3, 4), (2, 6)] {
                    let ty = tile(space, dtype, layout, nr, nc);
                    let (rows, cols) = (ty.rows as usize, ty.cols as usize);
                    if cols < 16 {
                        continue;
                    }
                    for trial in 0..24 {
                        let w = 16 * (1 + rng.below(cols / 16));
                        let c0 = rng.below(cols - w + 1);
                        let h = 1 + rng.below(rows);
                        let r0 = rng.below(rows - h + 1);
                        // Every third region snapped to whole 8 x 16 boxes (the ZN fast path;
                        // 16 x 16 for bf16 and f16).
                        let snap = |v: usize, m: usize| v / m * m;
                        let br = if dtype == DType::F32 { 8 } else { 16 };
                        let (r0, h, c0) = if trial % 3 == 0 && rows >= br {
                            let h = snap(h, br).max(br).min(snap(rows, br));
                            (snap(rng.below(rows - h + 1), br), h, snap(c0, 16))
                        } else {
                            (r0, h, c0)
                        };
                        let addr = 4 * rng.below(8);
                        // Words, so the bytes are 4-byte aligned as a planned buffer's are.
                        let words: Vec<u32> = (0..addr / 4 + ty.bytes() as usize / 4 + 4)
                            .map(|_| rng.next() as u32)
                            .collect();
                        let buf: &[u8] = bytemuck::cast_slice(&words);
                        let loc = loc_at(&ty, addr);
                        let mut out = vec![f32::from_bits(SENTINEL); h * w + 5];
                        let what = format!("{} region ({r0}, {c0}) {h}x{w}", describe(&loc));
                        assert_eq!(
                            decode_panels_f32(buf, &loc, (r0, c0), (h, w), &mut out),
                            Ok(true),
                            "{what}"
                        );
                        for s in 0..w / 16 {
                            for i in 0..h {
                                for j in 0..16 {
                                    let o = off(&loc, r0 + i, c0 + s * 16 + j);
                                    let es = dtype.size_bytes() as usize;
                                    // The bulk decoder's value (NaN payloads kept as is).
                                    let mut want = [0f32];
                                    let bytes = &buf[o..o + es];
                                    crate::sim::numeric::decode_f32(dtype, bytes, &mut want);
                                    let want = want[0].to_bits();
                                    let got = out[(s * h + i) * 16 + j].to_bits();
                                    assert_eq!(got, want, "{what}: panel {s} row {i} column {j}");
                                }
                            }
                        }
                        assert!(
                            out[h * w..].iter().all(|v| v.to_bits() == SENTINEL),
                            "{what}: wrote past the panels"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn panels_are_declined_or_refused_off_their_form() {
    let words = vec![0u32; 4096];
    let buf: &[u8] = bytemuck::cast_slice(&words);
    let mut out = vec![0f32; 1024];
    // Not a float dtype it takes (f32, bf16, f16), or not whole 16-column strips: declined,
    // nothing read.
    let int = tile(MemSpace::Mat, DType::I32, Layout::NZ, 2, 2);
    assert_eq!(
        decode_panels_f32(buf, &loc_at(&int, 0), (0, 0), (16, 16), &mut out),
        Ok(false)
    );
    let f32_nz = tile(MemSpace::Mat, DType::F32, Layout::NZ, 2, 4);
    let loc = loc_at(&f32_nz, 0);
    assert_eq!(
        decode_panels_f32(buf, &loc, (0, 0), (16, 24), &mut out),
        Ok(false)
    );
    // A region outside the tile, or too little room for it: errors.
    assert!(decode_panels_f32(buf, &loc, (16, 0), (32, 16), &mut out).is_err());
    assert!(decode_panels_f32(buf, &loc, (0, 0), (32, 32), &mut out[..100]).is_err());
}

/// `fill_pattern` writes what copying the value element by element writes, for every element
/// size and line length up to a few hundred elements.
#[test]
fn fill_pattern_matches_element_copies() {
    for es in [1usize, 2, 4, 8] {
        let one: Vec<u8> = (0..es as u8)
            .map(|b| b.wrapping_mul(37).wrapping_add(5))
            .collect();
        for n in 0..300 {
            let mut got = vec![0xAAu8; n * es];
            fill_pattern(&mut got, &one);
            let want = one.repeat(n);
            assert_eq!(got, want, "{n} elements of {es} bytes");
        }
    }
}
