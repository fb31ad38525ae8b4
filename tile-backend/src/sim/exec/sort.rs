//! TSORT32 and TMRGSORT (A5-FACTS §6): what they compute on UB bytes.
//!
//! A pair is 8 bytes, the value (an f32, or an f16 in the low half and zero above) then the u32
//! index, whatever the tile's dtype. Values compare as floats, descending, with two modelled
//! choices no public source settles (docs/simulator.md, "Sort instructions"): `-0 == +0`, and
//! NaN ordered by its sign, a positive NaN above `+inf` and a negative one below `-inf` (IEEE
//! totalOrder). TSORT32 breaks ties by the smaller index (documented); TMRGSORT compares values
//! only and takes the earlier list first on a tie, an assumption ([`MrgSortTies`]).
//!
//! TSORT32's tail form pads the last block with the value A5's header writes,
//! `-(0.0 / 0.0)`: a negative quiet NaN, so the padded pairs sort last (the ISA page calls it
//! `-inf`; the bits are the header's).

use super::ExecCtx;
use crate::arch::MrgSortTies;
use crate::ir::{pair_cols, DType, SortOp, TileRef};
use crate::sim::tile::TileLoc;
use crate::sim::trace::SortWork;
use crate::sim::SimFault;
use crate::verify::sort::{
    mrgsort_rules, Broken, MrgSortListDims, Sort32Dims, BLOCK, TAIL_WHOLE_ROW_BYTES,
};
use half::f16;
use smallvec::SmallVec;
use std::cell::RefCell;

thread_local! {
    /// Pair lists the sort instructions reuse on this thread (sorted rows, merge inputs and
    /// outputs), so a steady-state launch sorts without allocating.
    static PAIR_LISTS: RefCell<Vec<Vec<Pair>>> = const { RefCell::new(Vec::new()) };
}

/// An empty pair list, in the allocation of one an earlier op gave back when there is one.
fn pair_list() -> Vec<Pair> {
    let mut v = PAIR_LISTS
        .with(|p| p.borrow_mut().pop())
        .unwrap_or_default();
    v.clear();
    v
}

/// Gives a pair list back for the thread's next sort (at most 8 are kept).
fn keep_pair_list(v: Vec<Pair>) {
    PAIR_LISTS.with(|p| {
        let mut p = p.borrow_mut();
        if p.len() < 8 && v.capacity() > 0 {
            p.push(v);
        }
    });
}

/// One (value, index) pair as it sits in UB, with its sort key.
#[derive(Debug, Clone, Copy)]
struct Pair {
    /// The pair's 8 UB bytes as one little-endian word: the value in the low half, the index
    /// in the high half.
    word: u64,
    key: i32,
    /// The index bytes were written (poison travels with them).
    index_defined: bool,
}

impl Pair {
    fn new(value: [u8; 4], dtype: DType, index: [u8; 4], index_defined: bool) -> Self {
        let word =
            u64::from(u32::from_le_bytes(value)) | (u64::from(u32::from_le_bytes(index)) << 32);
        Pair::of_word(word, dtype, index_defined)
    }

    /// The pair of the word `word` (value bits low, index high): the value is an f16 in the
    /// low 16 bits for f16 tiles, an f32 otherwise (only f32 and f16 reach here:
    /// `values_dtype`).
    fn of_word(word: u64, dtype: DType, index_defined: bool) -> Self {
        let v = if dtype == DType::F16 {
            f16::from_bits(word as u16).to_f32()
        } else {
            f32::from_bits(word as u32)
        };
        Pair {
            word,
            key: order_key(v),
            index_defined,
        }
    }

    fn from_bytes(b: &[u8], dtype: DType) -> Self {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[..8]);
        Pair::of_word(u64::from_le_bytes(w), dtype, true)
    }

    fn bytes(&self) -> [u8; 8] {
        self.word.to_le_bytes()
    }

    fn index(&self) -> u32 {
        (self.word >> 32) as u32
    }
}

/// A key whose integer order is the modelled value order: IEEE totalOrder with `-0 = +0`.
fn order_key(v: f32) -> i32 {
    let v = if v == 0.0 { 0.0 } else { v };
    let b = v.to_bits() as i32;
    b ^ (((b >> 31) as u32) >> 1) as i32
}

/// The value bytes A5's tail form pads with: `-(0.0 / 0.0)`, a negative quiet NaN.
fn pad_value(dtype: DType) -> [u8; 4] {
    if dtype == DType::F16 {
        let [a, b] = 0xfe00u16.to_le_bytes();
        [a, b, 0, 0]
    } else {
        0xffc0_0000u32.to_le_bytes()
    }
}

pub(super) fn exec(cx: &mut ExecCtx<'_, '_, '_>, op: &SortOp) -> Result<(), SimFault> {
    match op {
        SortOp::Sort32 { dst, src, idx, tmp } => sort32(cx, dst, src, idx, tmp.as_ref()),
        SortOp::MrgSort {
            dst,
            src,
            block_len,
        } => mrgsort(cx, dst, src, *block_len),
        SortOp::MrgSortLists { dst, tmp, srcs } => mrgsort_lists(cx, dst, tmp, srcs),
    }
}

/// The rules a runtime shape breaks, as the simulator's error.
fn runtime(what: &'static str, broken: Vec<Broken>) -> Result<(), SimFault> {
    if broken.is_empty() {
        return Ok(());
    }
    Err(SimFault::RulesBroken { what, broken })
}

fn values_dtype(loc: &TileLoc<'_>, what: &'static str) -> Result<(DType, usize), SimFault> {
    let dtype = loc.ty.dtype;
    let pc = pair_cols(dtype).ok_or_else(|| SimFault::UnsupportedDtype {
        what,
        tile: loc.name().to_string(),
        dtype,
        supported: "f32 or f16",
    })?;
    Ok((dtype, pc as usize))
}

/// The pairs of the first `n` pairs of row 0 of a list tile (all written).
fn read_pairs(
    cx: &mut ExecCtx<'_, '_, '_>,
    loc: &TileLoc<'_>,
    pc: usize,
    n: usize,
    what: &'static str,
) -> Result<Vec<Pair>, SimFault> {
    let aiv = cx.own_aiv();
    cx.require_defined(loc, aiv, (0, 0), (1, n * pc), what)?;
    // Every byte of the region is read over (sized takes converge on the pool's buffers).
    let mut b = cx.core.pool.bytes_to_overwrite(n * pc * loc.es());
    cx.read_bytes(loc, aiv, (0, 0), (1, n * pc), &mut b)?;
    let mut pairs = pair_list();
    pairs.extend(b.chunks_exact(8).map(|c| Pair::from_bytes(c, loc.ty.dtype)));
    cx.core.pool.put_bytes(b);
    Ok(pairs)
}

/// Writes pairs at the start of row `row` of `loc` (an index whose bytes were never written
/// stays poison).
fn write_pairs(
    cx: &mut ExecCtx<'_, '_, '_>,
    loc: &TileLoc<'_>,
    row: usize,
    pc: usize,
    pairs: &[Pair],
) -> Result<(), SimFault> {
    let aiv = cx.own_aiv();
    let mut bytes = cx.core.pool.bytes_to_overwrite(pairs.len() * 8);
    for (b, p) in bytes.chunks_exact_mut(8).zip(pairs) {
        b.copy_from_slice(&p.bytes());
    }
    let size = (1, pairs.len() * pc);
    let r = if pairs.iter().all(|p| p.index_defined) {
        // Every byte written (the usual case): no mask to build.
        cx.write_bytes(loc, aiv, (row, 0), size, &bytes)
    } else {
        // The index is the last 4 bytes of a pair: the last element (f32) or two (f16).
        let index_elems = 4 / loc.es().max(1);
        let mut defined = Vec::with_capacity(pairs.len() * pc);
        for p in pairs {
            defined.extend((0..pc).map(|e| e < pc - index_elems || p.index_defined));
        }
        cx.write_bytes_masked(loc, aiv, (row, 0), size, &bytes, &defined)
    };
    cx.core.pool.put_bytes(bytes);
    r
}

/// TMRGSORT's merge of sorted lists: at each step, the largest head, scanning the lists in
/// order; equal heads by the modelled cross-list order (`ties`); within a list, its own order.
/// (Two lists in a tile merge through [`merge_two_bytes`], the same order on their bytes.)
/// Appends the merged pairs to `out`.
fn merge_any(lists: &[&[Pair]], ties: MrgSortTies, out: &mut Vec<Pair>) {
    let total = lists.iter().map(|l| l.len()).sum();
    let mut at: SmallVec<[usize; 4]> = smallvec::smallvec![0; lists.len()];
    out.reserve(total);
    for _ in 0..total {
        let mut pick: Option<(usize, i32)> = None;
        for (i, l) in lists.iter().enumerate() {
            let Some(p) = l.get(at[i]) else { continue };
            let better = match pick {
                None => true,
                Some((_, k)) => match ties {
                    MrgSortTies::EarlierListFirst => p.key > k,
                    MrgSortTies::LaterListFirst => p.key >= k,
                },
            };
            if better {
                pick = Some((i, p.key));
            }
        }
        let Some((i, _)) = pick else { break };
        out.push(lists[i][at[i]]);
        at[i] += 1;
    }
}

fn sort32(
    cx: &mut ExecCtx<'_, '_, '_>,
    dst: &TileRef,
    src: &TileRef,
    idx: &TileRef,
    tmp: Option<&TileRef>,
) -> Result<(), SimFault> {
    let (d, s, i) = (cx.tile(dst)?, cx.tile(src)?, cx.tile(idx)?);
    let t = tmp.map(|r| cx.tile(r)).transpose()?;
    let (dtype, pc) = values_dtype(&s, "sort32")?;
    let ((src_rows, cols), (dst_rows, _), (idx_rows, idx_cols)) =
        (s.valid()?, d.valid()?, i.valid()?);
    let dims = Sort32Dims {
        es: s.es() as u64,
        pc: pc as u64,
        src_rows: src_rows as u64,
        dst_rows: dst_rows as u64,
        cols: cols as u64,
        dst_cols: d.cols() as u64,
        idx_rows: idx_rows as u64,
        idx_cols: idx_cols as u64,
        idx_alloc_cols: i.cols() as u64,
        tmp_cols: t.as_ref().map(|t| t.cols() as u64),
    };
    runtime("sort32", dims.broken())?;
    let (blocks, es, aiv) = (dims.blocks() as usize, s.es(), cx.own_aiv());
    let padded = blocks * BLOCK as usize;
    let tail = cols % BLOCK as usize;
    let mut work = SortWork {
        units: dst_rows * blocks,
        copied_bytes: 0,
    };
    // Read over in full, row by row.
    let (mut vb, mut ib) = (
        cx.core.pool.bytes_to_overwrite(cols * es),
        cx.core.pool.bytes_to_overwrite(padded * 4),
    );
    let mut pairs = pair_list();
    for r in 0..dst_rows {
        cx.require_defined(&s, aiv, (r, 0), (1, cols), "sort32")?;
        cx.read_bytes(&s, aiv, (r, 0), (1, cols), &mut vb)?;
        let ir = if idx_rows == 1 { 0 } else { r };
        cx.require_defined(&i, aiv, (ir, 0), (1, cols), "sort32")?;
        // The padded last block reads the indices past the valid columns too; their bytes
        // may be poison (a mask only then).
        let idef = if cx.region_defined(&i, aiv, (ir, 0), (1, padded))? {
            None
        } else {
            let mut m = cx.core.pool.bools();
            cx.defined_mask_into(&i, aiv, (ir, 0), (1, padded), &mut m)?;
            Some(m)
        };
        cx.read_bytes(&i, aiv, (ir, 0), (1, padded), &mut ib)?;
        let value = |k: usize| -> [u8; 4] {
            if k >= cols {
                return pad_value(dtype);
            }
            let mut v = [0u8; 4];
            v[..es].copy_from_slice(&vb[k * es..(k + 1) * es]);
            v
        };
        if let (Some(t), true) = (&t, tail != 0) {
            // The tail form sorts the padded copy in tmp: the whole row when it is at most
            // 8160 bytes, else the last block.
            let first = if cols * es <= TAIL_WHOLE_ROW_BYTES as usize {
                0
            } else {
                padded - BLOCK as usize
            };
            let mut copy = cx.core.pool.bytes();
            copy.extend((first..padded).flat_map(|k| value(k).into_iter().take(es)));
            let wrote = cx.write_bytes(t, aiv, (0, 0), (1, padded - first), &copy);
            cx.core.pool.put_bytes(copy);
            wrote?;
            work.copied_bytes += ((cols - first) * es).div_ceil(32) * 32;
        }
        pairs.clear();
        pairs.extend((0..padded).map(|k| {
            let mut index = [0u8; 4];
            index.copy_from_slice(&ib[k * 4..k * 4 + 4]);
            Pair::new(value(k), dtype, index, idef.as_ref().is_none_or(|m| m[k]))
        }));
        for block in pairs.chunks_mut(BLOCK as usize) {
            // Descending by value, ties to the smaller index (stable, so equal pairs keep
            // their order).
            block.sort_by(|a, b| b.key.cmp(&a.key).then(a.index().cmp(&b.index())));
        }
        write_pairs(cx, &d, r, pc, &pairs)?;
        if let Some(m) = idef {
            cx.core.pool.put_bools(m);
        }
    }
    cx.core.pool.put_bytes(vb);
    cx.core.pool.put_bytes(ib);
    keep_pair_list(pairs);
    cx.note_sort(work);
    Ok(())
}

fn mrgsort(
    cx: &mut ExecCtx<'_, '_, '_>,
    dst: &TileRef,
    src: &TileRef,
    block_len: u64,
) -> Result<(), SimFault> {
    let (d, s) = (cx.tile(dst)?, cx.tile(src)?);
    let (_, pc) = values_dtype(&s, "mrgsort")?;
    let (_, cols) = s.valid()?;
    runtime(
        "mrgsort",
        mrgsort_rules(block_len, cols as u64, d.cols() as u64),
    )?;
    let pairs = read_pairs(cx, &s, pc, cols / pc, "mrgsort")?;
    let per_block = block_len as usize / pc;
    let ties = cx.arch.mrgsort_ties;
    let mut out = pair_list();
    for group in pairs.chunks(4 * per_block) {
        let lists: SmallVec<[&[Pair]; 4]> = group.chunks(per_block).collect();
        merge_any(&lists, ties, &mut out);
    }
    write_pairs(cx, &d, 0, pc, &out)?;
    cx.note_sort(SortWork {
        units: pairs.len(),
        copied_bytes: 0,
    });
    keep_pair_list(out);
    keep_pair_list(pairs);
    Ok(())
}

fn mrgsort_lists(
    cx: &mut ExecCtx<'_, '_, '_>,
    dst: &TileRef,
    tmp: &TileRef,
    srcs: &[TileRef],
) -> Result<(), SimFault> {
    let (d, t) = (cx.tile(dst)?, cx.tile(tmp)?);
    let (_, pc) = values_dtype(&d, "mrgsort_lists")?;
    let lists: SmallVec<[TileLoc<'_>; 4]> =
        srcs.iter().map(|r| cx.tile(r)).collect::<Result<_, _>>()?;
    let list_cols: SmallVec<[usize; 4]> = lists
        .iter()
        .map(|l| l.valid().map(|v| v.1))
        .collect::<Result<_, _>>()?;
    let dst_cols = d.valid()?.1;
    let dims = MrgSortListDims {
        pc: pc as u64,
        list_cols: list_cols.iter().map(|c| *c as u64).collect(),
        list_alloc_cols: lists.iter().map(|l| l.cols() as u64).collect(),
        tmp_cols: t.cols() as u64,
        dst_cols: dst_cols as u64,
    };
    runtime("mrgsort_lists", dims.broken())?;
    let merged = if let [a, b] = lists.as_slice() {
        merge_two_in_ub(cx, (a, b), &t, (pc, list_cols[0] / pc, list_cols[1] / pc))?
    } else {
        let mut pairs: SmallVec<[Vec<Pair>; 4]> = SmallVec::new();
        for (l, c) in lists.iter().zip(&list_cols) {
            pairs.push(read_pairs(cx, l, pc, c / pc, "mrgsort_lists")?);
        }
        let refs: SmallVec<[&[Pair]; 4]> = pairs.iter().map(|p| p.as_slice()).collect();
        let mut merged = pair_list();
        merge_any(&refs, cx.arch.mrgsort_ties, &mut merged);
        write_pairs(cx, &t, 0, pc, &merged)?;
        let n = merged.len();
        keep_pair_list(merged);
        drop(refs);
        pairs.into_iter().for_each(keep_pair_list);
        n
    };
    // The first dst valid columns of tmp, copied in 32-byte blocks (A5's MovUb2Ub).
    let (aiv, es) = (cx.own_aiv(), d.es());
    let copied = (dst_cols * es).div_ceil(32) * 32;
    let n = copied / es;
    let mut b = cx.core.pool.bytes_to_overwrite(n * es);
    let copied_out = if cx.region_defined(&t, aiv, (0, 0), (1, n))? {
        cx.read_bytes(&t, aiv, (0, 0), (1, n), &mut b)
            .and_then(|()| cx.write_bytes(&d, aiv, (0, 0), (1, n), &b))
    } else {
        // Poison in tmp's copied columns travels to dst.
        let mut defined = cx.core.pool.bools();
        let r = cx
            .defined_mask_into(&t, aiv, (0, 0), (1, n), &mut defined)
            .and_then(|()| cx.read_bytes(&t, aiv, (0, 0), (1, n), &mut b))
            .and_then(|()| cx.write_bytes_masked(&d, aiv, (0, 0), (1, n), &b, &defined));
        cx.core.pool.put_bools(defined);
        r
    };
    cx.core.pool.put_bytes(b);
    copied_out?;
    cx.note_sort(SortWork {
        units: merged,
        copied_bytes: copied,
    });
    Ok(())
}

/// The two-list merge (the top-k kernels' form) of the first `na` and `nb` pairs of `a` and
/// `b` into `tmp` ([`merge_two_bytes`] on the lists' bytes in the core's scratch buffers, no
/// pair structs); returns the pairs written. Every pair read is defined (as
/// [`read_pairs`] requires), so every byte written is.
fn merge_two_in_ub(
    cx: &mut ExecCtx<'_, '_, '_>,
    (a, b): (&TileLoc<'_>, &TileLoc<'_>),
    tmp: &TileLoc<'_>,
    (pc, na, nb): (usize, usize, usize),
) -> Result<usize, SimFault> {
    let aiv = cx.own_aiv();
    cx.require_defined(a, aiv, (0, 0), (1, na * pc), "mrgsort_lists")?;
    cx.require_defined(b, aiv, (0, 0), (1, nb * pc), "mrgsort_lists")?;
    // Read over in full.
    let es = a.es();
    let (mut ab, mut bb) = (
        cx.core.pool.bytes_to_overwrite(na * pc * es),
        cx.core.pool.bytes_to_overwrite(nb * pc * es),
    );
    let read = cx
        .read_bytes(a, aiv, (0, 0), (1, na * pc), &mut ab)
        .and_then(|()| cx.read_bytes(b, aiv, (0, 0), (1, nb * pc), &mut bb));
    let mut out = cx.core.pool.bytes_to_overwrite(8 * (na + nb));
    let result = read.and_then(|()| {
        let at = merge_two_bytes((&ab, &bb), a.ty.dtype, cx.arch.mrgsort_ties, &mut out);
        cx.write_bytes(tmp, aiv, (0, 0), (1, (na + nb) * pc), &out[..at])?;
        Ok(at / 8)
    });
    cx.core.pool.put_bytes(ab);
    cx.core.pool.put_bytes(bb);
    cx.core.pool.put_bytes(out);
    result
}

/// [`merge_any`] of two lists of pairs given as their bytes (8 a pair), written to `out`
/// (at least as long as both): each head's key is computed once, when it becomes the head.
/// Returns the bytes written.
fn merge_two_bytes(
    (a, b): (&[u8], &[u8]),
    dtype: DType,
    ties: MrgSortTies,
    out: &mut [u8],
) -> usize {
    // The key of pair `i` of a list's bytes.
    let key = |bytes: &[u8], i: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&bytes[8 * i..8 * i + 8]);
        Pair::of_word(u64::from_le_bytes(w), dtype, true).key
    };
    let (na, nb) = (a.len() / 8, b.len() / 8);
    let (mut i, mut j, mut at) = (0, 0, 0);
    let (mut kx, mut ky) = (
        if na > 0 { key(a, 0) } else { 0 },
        if nb > 0 { key(b, 0) } else { 0 },
    );
    while i < na && j < nb {
        let first = match ties {
            MrgSortTies::EarlierListFirst => kx >= ky,
            MrgSortTies::LaterListFirst => kx > ky,
        };
        if first {
            out[at..at + 8].copy_from_slice(&a[8 * i..8 * i + 8]);
            i += 1;
            if i < na {
                kx = key(a, i);
            }
        } else {
            out[at..at + 8].copy_from_slice(&b[8 * j..8 * j + 8]);
            j += 1;
            if j < nb {
                ky = key(b, j);
            }
        }
        at += 8;
    }
    for rest in [&a[8 * i..8 * na], &b[8 * j..8 * nb]] {
        out[at..at + rest.len()].copy_from_slice(rest);
        at += rest.len();
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two sorted lists of f32 pairs from `seed`, values drawn from a few levels so ties are
    /// common (within a list and across the two).
    fn lists(seed: u64) -> (Vec<Pair>, Vec<Pair>) {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut list = |n: usize, base: u32| {
            let mut v: Vec<Pair> = (0..n)
                .map(|k| {
                    let value =
                        [-1.0f32, 0.0, -0.0, 0.5, 2.0, f32::INFINITY][(next() % 6) as usize];
                    Pair::new(
                        value.to_le_bytes(),
                        DType::F32,
                        (base + k as u32).to_le_bytes(),
                        true,
                    )
                })
                .collect();
            v.sort_by(|a, b| b.key.cmp(&a.key).then(a.index().cmp(&b.index())));
            v
        };
        let (na, nb) = ((seed % 40) as usize, ((seed / 40) % 40) as usize);
        (list(na, 0), list(nb, 1000))
    }

    #[test]
    fn the_two_list_merge_on_bytes_is_the_general_merge() {
        for seed in 0..200 {
            let (a, b) = lists(seed);
            for ties in [MrgSortTies::EarlierListFirst, MrgSortTies::LaterListFirst] {
                let bytes = |v: &[Pair]| v.iter().flat_map(|p| p.bytes()).collect::<Vec<u8>>();
                let mut out = vec![0u8; 8 * (a.len() + b.len())];
                let n = merge_two_bytes((&bytes(&a), &bytes(&b)), DType::F32, ties, &mut out);
                let mut merged = Vec::new();
                merge_any(&[&a, &b], ties, &mut merged);
                assert_eq!(out[..n].to_vec(), bytes(&merged), "seed {seed}, {ties:?}");
            }
        }
    }
}
