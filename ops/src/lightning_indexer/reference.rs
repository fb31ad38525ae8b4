//! The Reference backend of `lightning_indexer`, composed from candle tensor ops in f32 and a
//! partial selection on the host.
//!
//! Rows are taken in runs of consecutive rows whose block tables agree on every entry both
//! reach (a prompt's prefill rows; a decode batch is one row per run), cut into chunks of at
//! most [`CHUNK_ELEMENTS`] head scores (a row that sees more is scored in windows of positions,
//! so no intermediate grows past the chunk). Per chunk (window): the physical slots of positions
//! `0..longest context` (host-computed from the validated table), their keys gathered and
//! dequantised in one pass (`IndexKeyCache::keys_f32`: FP8 codes through a 256-entry table
//! times their scales; plain keys one `index_select`), one matmul `[rows * H, D] x [D, L]`,
//! ReLU, the weighted head sum as a batched matmul `[rows, 1, H] x [rows, H, L]`, and the
//! non-finite fold (below). Then each row selects its top-k among
//! its own `context_lens[t]` scores with `select_nth_unstable_by` and sorts only those k
//! (O(L + k log k), not a sort of the row).
//!
//! Reads: only slots of positions below the chunk's longest context are gathered (no padding,
//! no unused block); a row ranks only its own positions, so a key another row of its chunk sees
//! (prefill: a later token) cannot reach its result, whatever it holds.
//!
//! Non-finite data (docs/ops.md): a score is NaN when anything it reads is not finite. ReLU
//! would hide a -inf or NaN dot product, so each score adds `0 * sum(q[t]) + 0 * sum(w[t]) + 0
//! * sum(k[s])` (0, or NaN), then `0 * I` (turning ±inf into NaN); NaN ranks last.

use super::{IndexKeyCache, IndexerCall};
use crate::error::OpError;
use candle_core::{DType, Tensor};
use std::cmp::Ordering;

/// Most head scores (`rows * H * L` f32 values) one chunk holds: 16M, 64 MiB.
const CHUNK_ELEMENTS: usize = 1 << 24;

/// `(indices [T, topk]` I32, `scores [T, topk]` F32 if asked`)`.
pub(crate) fn lightning_indexer(
    q: &Tensor,
    weights: &Tensor,
    cache: &IndexKeyCache,
    call: &IndexerCall,
) -> Result<(Tensor, Option<Tensor>), OpError> {
    let s = &call.shape;
    let (t, topk) = (s.tokens, s.topk);
    let mut indices = vec![-1i32; t * topk];
    let mut scores = vec![f32::NEG_INFINITY; t * topk];
    let qf = q.to_dtype(DType::F32)?;
    let wf = weights.to_dtype(DType::F32)?;
    for (r0, r1) in chunks(call) {
        let len = call.context_lens[r0..r1].iter().copied().max().unwrap_or(0) as usize;
        if len == 0 {
            continue;
        }
        let rows = chunk_scores(&qf, &wf, cache, call, r0, r1, len)?;
        for (i, row) in rows.iter().enumerate() {
            let r = r0 + i;
            let ctx = call.context_lens[r] as usize;
            let best = top_k(&row[..ctx], topk);
            for (j, &p) in best.iter().enumerate() {
                indices[r * topk + j] = p as i32;
                scores[r * topk + j] = row[p as usize];
            }
        }
    }
    let dev = q.device();
    let indices = Tensor::from_vec(indices, (t, topk), dev)?;
    let scores = if call.return_scores {
        Some(Tensor::from_vec(scores, (t, topk), dev)?)
    } else {
        None
    };
    Ok((indices, scores))
}

/// The scores `[rows, len]` of rows `r0..r1` against positions `0..len` (through row
/// `master`'s table, which every row of the chunk agrees with where it reaches), computed in
/// windows of positions so that no window holds more than [`CHUNK_ELEMENTS`] head scores (a
/// single row may see more).
fn chunk_scores(
    qf: &Tensor,
    wf: &Tensor,
    cache: &IndexKeyCache,
    call: &IndexerCall,
    r0: usize,
    r1: usize,
    len: usize,
) -> Result<Vec<Vec<f32>>, OpError> {
    let s = &call.shape;
    let (h, d, bs) = (s.heads, s.head_dim, s.block_size);
    let n = r1 - r0;
    let master = (r0..r1).max_by_key(|&r| call.context_lens[r]).unwrap_or(r0);
    let row = &call.block_table[master * call.max_blocks..(master + 1) * call.max_blocks];
    let q = qf.narrow(0, r0, n)?; // [n, H, D]
    let w = wf.narrow(0, r0, n)?; // [n, H]
    let qm = q.reshape((n * h, d))?;
    let wm = w.unsqueeze(1)?; // [n, 1, H]
                              // 0 or NaN per row (q, weights).
    let row_poison = (q.reshape((n, h * d))?.affine(0.0, 0.0)?.sum_keepdim(1)?
        + w.affine(0.0, 0.0)?.sum_keepdim(1)?)?; // [n, 1]
    let window = (CHUNK_ELEMENTS / (n * h)).max(1);
    let mut out = vec![Vec::with_capacity(len); n];
    for p0 in (0..len).step_by(window) {
        let l = window.min(len - p0);
        let slots: Vec<i64> = (p0..p0 + l)
            .map(|p| row[p / bs] * bs as i64 + (p % bs) as i64)
            .collect();
        let k = cache.keys_f32(&slots)?; // [l, D] f32
        let dots = qm.matmul(&k.t()?)?.reshape((n, h, l))?;
        let sum = wm.matmul(&dots.relu()?)?.squeeze(1)?; // [n, l]
        let key_poison = k.affine(0.0, 0.0)?.sum(1)?.unsqueeze(0)?; // [1, l]: 0 or NaN
        let sum = sum.broadcast_add(&row_poison)?.broadcast_add(&key_poison)?;
        let sum = (&sum + sum.affine(0.0, 0.0)?)?; // ±inf -> NaN
        for (o, r) in out.iter_mut().zip(sum.to_vec2::<f32>()?) {
            o.extend(r);
        }
    }
    Ok(out)
}

/// Row ranges `r0..r1`: runs of consecutive rows whose tables agree on every entry both reach,
/// cut so that `rows * H * longest context` stays within [`CHUNK_ELEMENTS`].
fn chunks(call: &IndexerCall) -> Vec<(usize, usize)> {
    let s = &call.shape;
    let (bs, mb) = (s.block_size as i64, call.max_blocks);
    let lens = &call.context_lens;
    let table = |r: usize| &call.block_table[r * mb..(r + 1) * mb];
    let mut out = Vec::new();
    let mut r0 = 0;
    let mut master = 0; // the chunk's longest row
    for r in 0..s.tokens {
        if r > r0 {
            let shared = ((lens[r].min(lens[master]) + bs - 1) / bs) as usize;
            let agree = table(r)[..shared] == table(master)[..shared];
            let longest = lens[r].max(lens[master]) as usize;
            let fits = (r + 1 - r0) * s.heads * longest <= CHUNK_ELEMENTS;
            if !(agree && fits) {
                out.push((r0, r));
                (r0, master) = (r, r);
            }
        }
        if lens[r] > lens[master] {
            master = r;
        }
    }
    if s.tokens > r0 {
        out.push((r0, s.tokens));
    }
    out
}

/// The selection order: higher score first, NaN after every number, ties (equal numbers, -0 =
/// +0, or both NaN) to the earlier position.
fn rank(a: (f32, u32), b: (f32, u32)) -> Ordering {
    match (a.0.is_nan(), b.0.is_nan()) {
        (false, false) => b.0.partial_cmp(&a.0).unwrap_or(Ordering::Equal),
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (true, true) => Ordering::Equal,
    }
    .then(a.1.cmp(&b.1))
}

/// The positions of the `k` best scores of `row` (all of them when fewer), best first: a
/// partial selection, then a sort of the selected only.
fn top_k(row: &[f32], k: usize) -> Vec<u32> {
    let mut pos: Vec<u32> = (0..row.len() as u32).collect();
    let by = |a: &u32, b: &u32| rank((row[*a as usize], *a), (row[*b as usize], *b));
    if k < pos.len() {
        pos.select_nth_unstable_by(k, by);
        pos.truncate(k);
    }
    pos.sort_unstable_by(by);
    pos
}

#[cfg(test)]
mod tests {
    use super::top_k;

    #[test]
    fn top_k_orders_by_score_then_position_with_nan_last() {
        let row = [1.0, f32::NAN, 3.0, 1.0, -0.0, 0.0, 3.0, f32::NAN];
        assert_eq!(top_k(&row, 8), [2, 6, 0, 3, 4, 5, 1, 7]);
        assert_eq!(top_k(&row, 3), [2, 6, 0]);
        assert_eq!(top_k(&row[..2], 5), [0, 1]);
        assert_eq!(top_k(&[f32::NAN, f32::NEG_INFINITY], 1), [1]);
    }
}
