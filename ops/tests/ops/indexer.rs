//! `lightning_indexer`, its FP8 index-key cache and DeepSeek's host-side preparation of q and k:
//! the Reference backend against an f64 brute force (scores and selection), the cache's FP8
//! codes and scales against a host quantisation built from the `float8` crate, ties, -1
//! padding, prefill causal rows, the non-finite policy, every bad input. Every case body runs on
//! every backend: TileSim runs the tile kernels (f32/f16/bf16 keys with q exact in the keys'
//! dtype or split; FP8 keys with FP8 q at D = 128 on the cube's e4m3 x e4m3) traced on the
//! device's plan (no hazard) and untraced on the CPU's plan (same bits), Ascend950 writes their
//! package; the cases the kernels do not take (FP8 keys with a q that is not FP8, D = 256 FP8
//! keys, blocks of 1 FP8 slot, q wider than f16 keys) expect `OpError::NoKernel` there.

use crate::support::{expect_invalid, expect_package, ints, values, Rng};
use candle_core::{CpuStorage, DType, Device, Storage, Tensor};
use float8::F8E4M3;
use tileops_ops::{f32_to_e4m3, scales_to_f32, ue8m0_to_f32, RoundMode};
use tileops_ops::{
    hadamard_rotate, index_cache_append, lightning_indexer, profile, quantize_index_q, Backend,
    Fp8Conversion, Fp8Saturation, IndexKeyCache, LightningIndexerParams, OpError, ScaleFormat,
};

const CPU: Device = Device::Cpu;
const OP: &str = "lightning_indexer";
const APPEND: &str = "index_cache_append";

/// The key cache kinds under test.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Keys {
    Dense(DType),
    Fp8(ScaleFormat),
}

// ---------------------------------------------------------------------------------------------
// The host FP8 quantisation (float8 crate) and the f64 brute force
// ---------------------------------------------------------------------------------------------

/// DeepSeek's per-128 quantisation of one row on the host, from `float8`: `(codes, scales)`.
fn host_quant(row: &[f32], fmt: ScaleFormat) -> (Vec<u8>, Vec<f32>) {
    let mut codes = Vec::new();
    let mut scales = Vec::new();
    for g in row.chunks(128) {
        let amax = g.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-4);
        let mut s = amax * (1.0 / 448.0);
        if fmt == ScaleFormat::Ue8m0 {
            s = 2f32.powi((s as f64).log2().ceil() as i32);
        }
        codes.extend(g.iter().map(|&v| F8E4M3::from_f32(v / s).to_bits()));
        scales.push(s);
    }
    (codes, scales)
}

/// The keys a cache holds after appending `keys` (rows of `d`) at `slots`, dequantised in f64
/// the way the host quantisation says, and `num_slots` rows of them (unwritten rows 0).
fn host_keys(keys: &[f32], d: usize, slots: &[i64], num_slots: usize, kind: Keys) -> Vec<f64> {
    let mut out = vec![0f64; num_slots * d];
    for (i, &s) in slots.iter().enumerate() {
        if s < 0 {
            continue;
        }
        let row = &keys[i * d..(i + 1) * d];
        let dst = &mut out[s as usize * d..(s as usize + 1) * d];
        match kind {
            Keys::Dense(dt) => {
                let t = Tensor::from_slice(row, d, &CPU).expect("row");
                let seen = values(&t.to_dtype(dt).expect("cast"));
                for (o, v) in dst.iter_mut().zip(seen) {
                    *o = f64::from(v);
                }
            }
            Keys::Fp8(fmt) => {
                let (codes, scales) = host_quant(row, fmt);
                for (c, (o, &code)) in dst.iter_mut().zip(&codes).enumerate() {
                    *o = F8E4M3::from_bits(code).to_f64() * f64::from(scales[c / 128]);
                }
            }
        }
    }
    out
}

/// One row's f64 scores of positions `0..ctx` and their magnitude `sum_h |w| |q . k|` (for the
/// tolerance).
struct RowModel {
    scores: Vec<f64>,
    mag: Vec<f64>,
}

/// The brute force: every visible position of every row, in f64.
#[allow(clippy::too_many_arguments)]
fn model(
    q: &[f32],
    w: &[f32],
    keys: &[f64],
    (h, d, bs): (usize, usize, usize),
    table: &[i64],
    max_blocks: usize,
    lens: &[i64],
) -> Vec<RowModel> {
    lens.iter()
        .enumerate()
        .map(|(t, &len)| {
            let mut m = RowModel {
                scores: Vec::new(),
                mag: Vec::new(),
            };
            for p in 0..len as usize {
                let slot = table[t * max_blocks + p / bs] as usize * bs + p % bs;
                let k = &keys[slot * d..(slot + 1) * d];
                let (mut s, mut mag) = (0f64, 0f64);
                for hh in 0..h {
                    let qr = &q[(t * h + hh) * d..(t * h + hh + 1) * d];
                    let dot: f64 = qr.iter().zip(k).map(|(&a, &b)| f64::from(a) * b).sum();
                    let wt = f64::from(w[t * h + hh]);
                    s += wt * dot.max(0.0);
                    mag += wt.abs() * dot.abs();
                }
                m.scores.push(s);
                m.mag.push(mag);
            }
            m
        })
        .collect()
}

/// The model's order: descending score, ties to the earlier position.
fn model_order(scores: &[f64]) -> Vec<usize> {
    let mut p: Vec<usize> = (0..scores.len()).collect();
    p.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    p
}

/// Checks a result against the model: `min(topk, ctx)` distinct visible positions then -1;
/// the j-th position's model score within f32 rounding of the model's j-th best (so the set and
/// order are the model's wherever its scores are apart by more than that); the scores given
/// within the same bound of the model's.
fn check_rows(what: &str, idx: &[i32], scores: Option<&[f32]>, rows: &[RowModel], topk: usize) {
    for (t, m) in rows.iter().enumerate() {
        let ctx = m.scores.len();
        let n = topk.min(ctx);
        let got = &idx[t * topk..(t + 1) * topk];
        assert!(
            got[n..].iter().all(|&i| i == -1),
            "{what}: row {t} must end in -1 after {n}: {got:?}"
        );
        let mut seen = vec![false; ctx];
        let want = model_order(&m.scores);
        for j in 0..n {
            let p = usize::try_from(got[j]).expect("a position");
            assert!(
                p < ctx && !seen[p],
                "{what}: row {t} entry {j} = {p} (ctx {ctx})"
            );
            seen[p] = true;
            let w = want[j];
            let tol = 2e-5 * (1.0 + m.mag[p].max(m.mag[w]));
            assert!(
                (m.scores[p] - m.scores[w]).abs() <= tol,
                "{what}: row {t} rank {j}: got position {p} (score {}), the model's is {w} ({})",
                m.scores[p],
                m.scores[w]
            );
            if let Some(s) = scores {
                let g = f64::from(s[t * topk + j]);
                assert!(
                    (g - m.scores[p]).abs() <= tol,
                    "{what}: row {t} rank {j}: score {g}, model {}",
                    m.scores[p]
                );
            }
        }
        if let Some(s) = scores {
            let pad = &s[t * topk + n..(t + 1) * topk];
            assert!(
                pad.iter().all(|&v| v == f32::NEG_INFINITY),
                "{what}: score padding"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Building calls
// ---------------------------------------------------------------------------------------------

/// A cache of `kind` with `keys` (rows of `d`) appended at `slots`.
fn cache_with(
    kind: Keys,
    (nb, bs, d): (usize, usize, usize),
    keys: &[f32],
    slots: &[i64],
) -> IndexKeyCache {
    let cache = match kind {
        Keys::Dense(dt) => IndexKeyCache::zeros(nb, bs, d, dt, &CPU),
        Keys::Fp8(fmt) => IndexKeyCache::zeros_fp8(nb, bs, d, fmt, &CPU),
    }
    .expect("a cache");
    let n = slots.len();
    let k = Tensor::from_slice(keys, (n, d), &CPU).expect("keys");
    let sm = ints(slots, &[n], DType::I64);
    let conv = Fp8Conversion::default();
    index_cache_append(&cache, &k, &sm, conv, Some(Backend::Reference)).expect("append");
    cache
}

/// One indexer case: rows with their contexts and tables, data, cache kind.
#[derive(Clone)]
struct Case {
    t: usize,
    h: usize,
    d: usize,
    bs: usize,
    nb: usize,
    max_blocks: usize,
    topk: usize,
    table: Vec<i64>,
    lens: Vec<i64>,
    qdt: DType,
    kind: Keys,
    /// Keys of every slot (rows of d), written into the cache.
    keys: Vec<f32>,
    q: Vec<f32>,
    w: Vec<f32>,
}

impl Case {
    /// Random data; row t's table is its own shuffled blocks (or one shared table if `shared`).
    #[allow(clippy::too_many_arguments)]
    fn random(
        rng: &mut Rng,
        (t, h, d, bs): (usize, usize, usize, usize),
        lens: Vec<i64>,
        topk: usize,
        qdt: DType,
        kind: Keys,
        shared: bool,
    ) -> Case {
        let used = (lens.iter().copied().max().unwrap_or(0) as usize)
            .div_ceil(bs)
            .max(1);
        let max_blocks = used + 1;
        let nb = if shared { used + 2 } else { t * used + 2 };
        let perm = rng.perm(nb);
        let mut table = vec![-1i64; t * max_blocks];
        for r in 0..t {
            for j in 0..used {
                let b = if shared { j } else { r * used + j };
                table[r * max_blocks + j] = perm[b] as i64;
            }
        }
        let keys = rng.vec(nb * bs * d, -1.0, 1.0);
        let q = rng.vec(t * h * d, -1.0, 1.0);
        let w = rng.vec(t * h, -1.0, 1.0);
        Case {
            t,
            h,
            d,
            bs,
            nb,
            max_blocks,
            topk,
            table,
            lens,
            qdt,
            kind,
            keys,
            q,
            w,
        }
    }

    fn cache(&self) -> IndexKeyCache {
        let slots: Vec<i64> = (0..(self.nb * self.bs) as i64).collect();
        cache_with(self.kind, (self.nb, self.bs, self.d), &self.keys, &slots)
    }

    fn tensors(&self, table_dt: DType) -> (Tensor, Vec<f32>, Tensor, Tensor, Tensor) {
        let (q, qseen) = crate::support::data(self.q.clone(), &[self.t, self.h, self.d], self.qdt);
        let w = Tensor::from_slice(&self.w, (self.t, self.h), &CPU).expect("w");
        let table = ints(&self.table, &[self.t, self.max_blocks], table_dt);
        let lens = ints(&self.lens, &[self.t], DType::I32);
        (q, qseen, w, table, lens)
    }

    fn run(&self, backend: Backend, table_dt: DType) -> Result<(Vec<i32>, Vec<f32>), OpError> {
        self.run_on(&self.cache(), backend, table_dt)
    }

    fn run_on(
        &self,
        cache: &IndexKeyCache,
        backend: Backend,
        table_dt: DType,
    ) -> Result<(Vec<i32>, Vec<f32>), OpError> {
        let (q, _, w, table, lens) = self.tensors(table_dt);
        let mut p = LightningIndexerParams::new(self.topk);
        p.return_scores = true;
        let (idx, scores) = lightning_indexer(&q, &w, cache, &table, &lens, &p, Some(backend))?;
        assert_eq!(
            (idx.dims(), idx.dtype()),
            (&[self.t, self.topk][..], DType::I32)
        );
        let scores = scores.expect("scores asked for");
        assert_eq!(scores.dtype(), DType::F32);
        let idx = idx.flatten_all()?.to_vec1::<i32>()?;
        Ok((idx, values(&scores)))
    }

    fn model(&self) -> Vec<RowModel> {
        let (_, qseen, ..) = self.tensors(DType::I32);
        let slots: Vec<i64> = (0..(self.nb * self.bs) as i64).collect();
        let keys = host_keys(&self.keys, self.d, &slots, self.nb * self.bs, self.kind);
        let dims = (self.h, self.d, self.bs);
        model(
            &qseen,
            &self.w,
            &keys,
            dims,
            &self.table,
            self.max_blocks,
            &self.lens,
        )
    }

    /// Whether the tile kernels take this case (plain keys: f32 or bf16 with any q, f16 with
    /// f16 or FP8 q; FP8 keys: FP8 q at D = 128 in blocks of a size that divides 128, at
    /// least 8, or is a multiple of it).
    fn kernel_runs(&self) -> bool {
        match self.kind {
            Keys::Dense(k) => {
                k == self.qdt || self.qdt == DType::F8E4M3 || k == DType::F32 || k == DType::BF16
            }
            Keys::Fp8(_) => {
                self.qdt == DType::F8E4M3
                    && self.d == 128
                    && (self.bs.is_multiple_of(128)
                        || (128usize.is_multiple_of(self.bs) && self.bs >= 8))
            }
        }
    }

    /// Runs the case on `backend` with `cache` as [`Case::run_on`] does; on TileSim also checks
    /// the traced run on the device's plan (at least one launch, no hazard) against the
    /// untraced run on the CPU's plan (the same bits).
    fn run_checked(
        &self,
        cache: &IndexKeyCache,
        backend: Backend,
        table_dt: DType,
    ) -> Result<(Vec<i32>, Vec<f32>), OpError> {
        if backend != Backend::TileSim {
            return self.run_on(cache, backend, table_dt);
        }
        let (traced, launches) = profile(|| self.run_on(cache, backend, table_dt));
        let traced = traced?;
        assert!(!launches.is_empty(), "TileSim launched no kernel");
        for l in &launches {
            assert!(
                l.hazards.is_empty(),
                "kernel {} reported hazards: {:#?}",
                l.kernel,
                l.hazards
            );
        }
        let plain = self.run_on(cache, backend, table_dt)?;
        assert_eq!(plain.0, traced.0, "the CPU plan's indices");
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&plain.1), bits(&traced.1), "the CPU plan's scores");
        Ok(plain)
    }

    /// Checks the case on `backend`: the Reference and TileSim against the model; Ascend950
    /// writes its package; the kernel backends give `NoKernel` for a case the kernels do not
    /// take.
    fn check(&self, backend: Backend, what: &str) {
        match backend {
            Backend::Ascend950 if self.kernel_runs() => {
                expect_package(|| self.run(backend, DType::I32).map(|_| ()))
            }
            Backend::Reference | Backend::TileSim
                if backend == Backend::Reference || self.kernel_runs() =>
            {
                let (idx, scores) = self
                    .run_checked(&self.cache(), backend, DType::I32)
                    .expect("the backend runs");
                check_rows(what, &idx, Some(&scores), &self.model(), self.topk);
            }
            other => expect_no_kernel(self.run(other, DType::I32)),
        }
    }

    /// Runs the case on `backend` when it can (`None` for Ascend950, after checking its
    /// package, and for a kernel backend the case's dtypes have no kernel on, after checking
    /// `NoKernel`).
    fn try_run(&self, cache: &IndexKeyCache, backend: Backend) -> Option<(Vec<i32>, Vec<f32>)> {
        match backend {
            Backend::Reference => Some(self.run_on(cache, backend, DType::I32).expect("runs")),
            _ if !self.kernel_runs() => {
                expect_no_kernel(self.run_on(cache, backend, DType::I32));
                None
            }
            Backend::TileSim => Some(
                self.run_checked(cache, backend, DType::I32)
                    .expect("TileSim runs"),
            ),
            Backend::Ascend950 => {
                expect_package(|| self.run_on(cache, backend, DType::I32).map(|_| ()));
                None
            }
        }
    }
}

fn expect_no_kernel<T: std::fmt::Debug>(r: Result<T, OpError>) {
    match r {
        Err(e @ OpError::NoKernel { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("no tile kernel yet"), "{msg}");
        }
        other => panic!("expected NoKernel, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Cases, one body per backend
// ---------------------------------------------------------------------------------------------

for_each_backend!(
    many_shapes_match_the_brute_force,
    plain_keys_match_the_brute_force,
    fp8_q_matches_the_brute_force,
    fp8_keys_on_the_cube,
    fp8_non_finite_keys_and_scales_rank_last,
    long_contexts_stream_and_merge,
    ties_go_to_the_earlier_position,
    prefill_causal_rows,
    non_finite_scores_are_nan_and_rank_last,
    unread_slots_never_matter,
    index_dtypes_agree,
);

/// Checks 18 cases on `backend`: T 1..5, H 1/4/64, D 128/256, block sizes 1/16/64, top-k
/// 1/7/40, contexts 1, block_size - 1, many blocks, below and past the top-k (the longest `3 *
/// topk + tail`); `pick(j)` gives the q dtype and the keys of the `j`-th combination.
fn sweep_shapes(backend: Backend, seed: u64, tail: i64, pick: &dyn Fn(usize) -> (DType, Keys)) {
    let mut rng = Rng::new(seed);
    let mut n = 0;
    for (i, &(t, h, d, bs)) in [
        (1usize, 1usize, 128usize, 1usize),
        (2, 4, 128, 16),
        (3, 64, 128, 64),
        (5, 4, 256, 16),
        (4, 1, 256, 64),
        (1, 64, 256, 1),
    ]
    .iter()
    .enumerate()
    {
        for topk in [1usize, 7, 40] {
            let lens: Vec<i64> = (0..t)
                .map(|r| match (r + i) % 5 {
                    0 => 1,
                    1 => (bs.max(2) - 1) as i64,
                    2 => (5 * bs + 3) as i64,
                    3 => topk as i64 - 1,
                    _ => 3 * topk as i64 + tail,
                })
                .map(|l| l.max(1))
                .collect();
            let (qdt, kind) = pick(i + topk);
            let case = Case::random(&mut rng, (t, h, d, bs), lens, topk, qdt, kind, false);
            let what = format!("T {t} H {h} D {d} bs {bs} topk {topk} {kind:?} q {qdt:?}");
            case.check(backend, &what);
            n += 1;
        }
    }
    assert_eq!(n, 18);
}

/// The sweep with f32/bf16 q and f32, bf16 and FP8 (f32, ue8m0 scales) keys.
fn many_shapes_match_the_brute_force(backend: Backend) {
    let kinds = [
        Keys::Fp8(ScaleFormat::Ue8m0),
        Keys::Fp8(ScaleFormat::F32),
        Keys::Dense(DType::F32),
        Keys::Dense(DType::BF16),
    ];
    sweep_shapes(backend, 36, 5, &|j| {
        let qdt = if j % 2 == 0 { DType::F32 } else { DType::BF16 };
        (qdt, kinds[j % kinds.len()])
    });
}

/// The sweep with plain keys in every dtype pair the kernels take (f32 q and keys, bf16 q and
/// keys, bf16 and f16 q with f32 keys, f32 and f16 q with bf16 keys: q split in three bf16
/// parts, f16 q and keys), the longest contexts past one score tile (128 positions): every
/// case runs on the kernel backends.
fn plain_keys_match_the_brute_force(backend: Backend) {
    let pairs = [
        (DType::F32, DType::F32),
        (DType::BF16, DType::BF16),
        (DType::BF16, DType::F32),
        (DType::F16, DType::F32),
        (DType::F32, DType::BF16),
        (DType::F16, DType::BF16),
        (DType::F16, DType::F16),
    ];
    sweep_shapes(backend, 360, 130, &|j| {
        let (qdt, kdt) = pairs[j % pairs.len()];
        (qdt, Keys::Dense(kdt))
    });
}

/// The sweep with FP8 q (DeepSeek's quantised q) against FP8 keys (f32 and ue8m0 scales) and
/// plain keys, the longest contexts past one score tile: the kernels run FP8 q with FP8 keys
/// on the cube (e4m3 x e4m3) where D is 128 and the block size lets a block's run of scales
/// land in its place (16, 64), q converted exactly to plain keys' dtype, and give `NoKernel`
/// for the rest (D 256, blocks of 1).
fn fp8_q_matches_the_brute_force(backend: Backend) {
    let kinds = [
        Keys::Fp8(ScaleFormat::Ue8m0),
        Keys::Fp8(ScaleFormat::F32),
        Keys::Dense(DType::BF16),
        Keys::Dense(DType::F16),
    ];
    sweep_shapes(backend, 3600, 130, &|j| {
        (DType::F8E4M3, kinds[j % kinds.len()])
    });
}

/// FP8 q and keys on the cube at every block size class the scale reads take (8, 32: several
/// blocks a 128-position tile; 128, 256: a tile inside one block), contexts of several tiles
/// and top-k segments with tails, both scale formats, every row its own blocks.
fn fp8_keys_on_the_cube(backend: Backend) {
    let mut rng = Rng::new(2026);
    for (i, &(t, h, bs, len)) in [
        (2usize, 4usize, 8usize, 300i64),
        (3, 16, 32, 700),
        (2, 64, 128, 1100),
        (2, 4, 256, 530),
    ]
    .iter()
    .enumerate()
    {
        for fmt in [ScaleFormat::F32, ScaleFormat::Ue8m0] {
            let lens: Vec<i64> = (0..t as i64).map(|r| len - 37 * r).collect();
            let topk = [40usize, 300, 64, 7][i];
            let kind = Keys::Fp8(fmt);
            let case = Case::random(
                &mut rng,
                (t, h, 128, bs),
                lens,
                topk,
                DType::F8E4M3,
                kind,
                false,
            );
            assert!(case.kernel_runs());
            let what = format!("T {t} H {h} bs {bs} len {len} topk {topk} {kind:?}");
            case.check(backend, &what);
        }
    }
}

/// FP8 q and keys: a key holding the NaN code, a NaN scale (ue8m0 255, f32 NaN) and an
/// infinite f32 scale make their positions' scores NaN, ranked last (earlier first); the
/// other scores are the model's.
fn fp8_non_finite_keys_and_scales_rank_last(backend: Backend) {
    let mut rng = Rng::new(55);
    for fmt in [ScaleFormat::F32, ScaleFormat::Ue8m0] {
        let case = Case::random(
            &mut rng,
            (2, 4, 128, 16),
            vec![40, 40],
            40,
            DType::F8E4M3,
            Keys::Fp8(fmt),
            false,
        );
        let slot =
            |r: usize, p: usize| case.table[r * case.max_blocks + p / 16] as usize * 16 + p % 16;
        let n = case.nb * case.bs;
        let keep = vec![true; n];
        let good = host_fp8_cache(&case, fmt, &keep);
        let mut codes = raw(good.data());
        codes[slot(0, 7) * 128 + 5] = 0x7f; // the NaN code
        let mut scales: Vec<f32> = match fmt {
            ScaleFormat::F32 => values(good.scales().expect("scales")),
            ScaleFormat::Ue8m0 => vec![],
        };
        let mut scale_codes = match fmt {
            ScaleFormat::Ue8m0 => raw(good.scales().expect("scales")),
            ScaleFormat::F32 => vec![],
        };
        let bad = [(0usize, 21usize), (1, 3)];
        for (k, &(r, p)) in bad.iter().enumerate() {
            match fmt {
                ScaleFormat::F32 => {
                    scales[slot(r, p)] = if k == 0 { f32::NAN } else { f32::INFINITY }
                }
                ScaleFormat::Ue8m0 => scale_codes[slot(r, p)] = 0xff,
            }
        }
        let dims = [case.nb, case.bs, 128];
        let sdims = [case.nb, case.bs, 1];
        let data = Tensor::from_raw_buffer(&codes, DType::F8E4M3, &dims, &CPU).expect("data");
        let sc = match fmt {
            ScaleFormat::Ue8m0 => {
                Tensor::from_raw_buffer(&scale_codes, DType::F8E8M0, &sdims, &CPU)
            }
            ScaleFormat::F32 => Tensor::from_slice(&scales, &sdims[..], &CPU),
        }
        .expect("scales");
        let cache = IndexKeyCache::from_parts(data, Some(sc)).expect("cache");
        let Some((idx, scores)) = case.try_run(&cache, backend) else {
            continue;
        };
        assert_eq!(
            &idx[38..40],
            &[7, 21],
            "{fmt:?} row 0: NaN last, earlier first"
        );
        assert_eq!(idx[79], 3, "{fmt:?} row 1: NaN last");
        assert!(scores[38].is_nan() && scores[39].is_nan() && scores[79].is_nan());
        assert!(scores[..38]
            .iter()
            .chain(&scores[40..79])
            .all(|s| s.is_finite()));
        let m = case.model();
        for (r, row) in m.iter().enumerate() {
            let nan: &[usize] = if r == 0 { &[7, 21] } else { &[3] };
            let mut order: Vec<usize> = model_order(&row.scores)
                .into_iter()
                .filter(|p| !nan.contains(p))
                .collect();
            order.truncate(40 - nan.len());
            for (j, &p) in order.iter().enumerate() {
                let got = idx[r * 40 + j] as usize;
                assert!(
                    (row.scores[got] - row.scores[p]).abs() <= 2e-5 * (1.0 + row.mag[p]),
                    "{fmt:?} row {r} rank {j}"
                );
            }
        }
    }
}

/// Contexts of several score tiles, work items and top-k segments (1000 and 2100 positions,
/// one row empty), a top-k of 300 (the merges keep 300 of every chunk's 32) and one past a
/// row's context; a top-k of 2048 over 9000 positions (18 segments of 512: a merge tree of 5
/// levels with odd lists carried); a row of ties across segments.
fn long_contexts_stream_and_merge(backend: Backend) {
    let mut rng = Rng::new(17);
    for (lens, topk) in [
        (vec![1000i64, 0, 2100], 300usize),
        (vec![200, 37], 260),
        (vec![9000], 2048),
    ] {
        let t = lens.len();
        let case = Case::random(
            &mut rng,
            (t, 8, 128, 64),
            lens,
            topk,
            DType::BF16,
            Keys::Dense(DType::BF16),
            false,
        );
        case.check(
            backend,
            &format!("long contexts {:?} topk {topk}", case.lens),
        );
    }
    // Every key equal: every score ties, across the top-k's segments (1500 positions: three
    // on the kernel backends) too; the earlier positions win, in order, exactly.
    let mut case = Case::random(
        &mut rng,
        (1, 4, 128, 64),
        vec![1500],
        700,
        DType::F32,
        Keys::Dense(DType::F32),
        false,
    );
    let d = case.d;
    let first: Vec<f32> = case.keys[..d].iter().map(|v| v.abs()).collect();
    for k in case.keys.chunks_exact_mut(d) {
        k.copy_from_slice(&first);
    }
    case.q.iter_mut().for_each(|v| *v = v.abs());
    case.w.iter_mut().for_each(|v| *v = v.abs() + 0.1);
    if let Some((idx, _)) = case.try_run(&case.cache(), backend) {
        let want: Vec<i32> = (0..700).collect();
        assert_eq!(idx, want, "all ties: the first 700 positions in order");
    }
}

/// Equal keys give equal scores: the earlier position first, exactly.
fn ties_go_to_the_earlier_position(backend: Backend) {
    let mut rng = Rng::new(7);
    for kind in [Keys::Fp8(ScaleFormat::Ue8m0), Keys::Dense(DType::F32)] {
        // FP8 keys with FP8 q (the cube's e4m3 x e4m3).
        let qdt = match kind {
            Keys::Fp8(_) => DType::F8E4M3,
            Keys::Dense(_) => DType::F32,
        };
        let mut case = Case::random(
            &mut rng,
            (2, 4, 128, 16),
            vec![40, 37],
            10,
            qdt,
            kind,
            false,
        );
        let d = case.d;
        // Every key equal to one row, but three better ones (a scaled copy) at slots of
        // positions 30, 5 and 20 of row 0.
        let base: Vec<f32> = case.keys[..d].to_vec();
        for s in 0..case.nb * case.bs {
            case.keys[s * d..(s + 1) * d].copy_from_slice(&base);
        }
        case.q.iter_mut().for_each(|v| *v = v.abs());
        case.w.iter_mut().for_each(|v| *v = v.abs() + 0.1);
        let base_pos: Vec<f32> = base.iter().map(|v| v.abs()).collect();
        for s in 0..case.nb * case.bs {
            case.keys[s * d..(s + 1) * d].copy_from_slice(&base_pos);
        }
        let better: Vec<f32> = base_pos.iter().map(|v| v * 2.0).collect();
        for p in [30usize, 5, 20] {
            let s = case.table[p / 16] as usize * 16 + p % 16;
            case.keys[s * d..(s + 1) * d].copy_from_slice(&better);
        }
        let Some((idx, _)) = case.try_run(&case.cache(), backend) else {
            continue;
        };
        assert_eq!(
            &idx[..10],
            &[5, 20, 30, 0, 1, 2, 3, 4, 6, 7],
            "{kind:?} row 0"
        );
        assert_eq!(
            &idx[10..],
            &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
            "{kind:?} row 1"
        );
    }
}

/// Prefill: one prompt's tokens as rows sharing one table, row t seeing t + 1 positions; fewer
/// positions than the top-k give -1 padding.
fn prefill_causal_rows(backend: Backend) {
    let mut rng = Rng::new(11);
    let t = 5;
    let lens: Vec<i64> = (1..=t as i64).map(|r| r * 9).collect(); // 9..45, top-k 20
    let case = Case::random(
        &mut rng,
        (t, 4, 128, 16),
        lens,
        20,
        DType::BF16,
        Keys::Fp8(ScaleFormat::F32),
        true,
    );
    for (qdt, kind) in [
        (DType::BF16, Keys::Fp8(ScaleFormat::F32)),
        (DType::BF16, Keys::Dense(DType::BF16)),
    ] {
        let case = Case {
            qdt,
            kind,
            ..case.clone()
        };
        case.check(backend, "prefill, shared table");
        // Each row's table only up to its own context (-1 after): rows agree where both reach.
        let mut trimmed = case.clone();
        for r in 0..t {
            let used = (trimmed.lens[r] as usize).div_ceil(16);
            trimmed.table[r * trimmed.max_blocks + used..(r + 1) * trimmed.max_blocks].fill(-1);
        }
        trimmed.check(backend, "prefill, tables trimmed to each context");
        if let Some(full) = case.try_run(&case.cache(), backend) {
            assert_eq!(trimmed.try_run(&trimmed.cache(), backend), Some(full));
        }
    }
    let lens: Vec<i64> = (1..=t as i64).collect(); // t + 1
    let case = Case::random(
        &mut rng,
        (t, 4, 128, 1),
        lens,
        3,
        DType::F32,
        Keys::Dense(DType::F32),
        true,
    );
    case.check(backend, "prefill, contexts t + 1");
    if let Some((idx, _)) = case.try_run(&case.cache(), backend) {
        assert_eq!(&idx[..3], &[0, -1, -1], "row 0 sees position 0 only");
        assert_eq!(
            idx[3..6].iter().filter(|&&i| i == -1).count(),
            1,
            "row 1: 2 positions"
        );
    }
}

/// NaN or ±inf in a key a row reads makes that position's score NaN, ranked after every
/// number; NaN in a row's q or weights makes all its scores NaN (positions in order).
fn non_finite_scores_are_nan_and_rank_last(backend: Backend) {
    let mut rng = Rng::new(5);
    let mut case = Case::random(
        &mut rng,
        (3, 4, 128, 16),
        vec![30, 30, 30],
        30,
        DType::F32,
        Keys::Dense(DType::F32),
        false,
    );
    let d = case.d;
    let slot =
        |c: &Case, r: usize, p: usize| c.table[r * c.max_blocks + p / 16] as usize * 16 + p % 16;
    let (s0, s1) = (slot(&case, 0, 4), slot(&case, 0, 17));
    case.keys[s0 * d + 3] = f32::NAN;
    case.keys[s1 * d + 100] = f32::NEG_INFINITY; // ReLU alone would hide it
    case.q[(case.h + 2) * d + 9] = f32::INFINITY; // row 1, head 2
    case.w[2 * case.h + 1] = f32::NAN; // row 2
    let Some((idx, scores)) = case.try_run(&case.cache(), backend) else {
        return;
    };
    let row0 = &idx[..30];
    assert_eq!(
        &row0[28..],
        &[4, 17],
        "row 0: the NaN positions last, earlier first"
    );
    assert!(scores[28].is_nan() && scores[29].is_nan());
    assert!(scores[..28].iter().all(|s| s.is_finite()));
    let want: Vec<i32> = (0..30).collect();
    assert_eq!(&idx[30..60], &want[..], "row 1: every score NaN");
    assert!(
        scores[30..90].iter().all(|s| s.is_nan()),
        "rows 1 and 2 are NaN"
    );
    assert_eq!(&idx[60..], &want[..], "row 2: every score NaN");
    // Rows 0's finite part still matches the model.
    let clean = {
        let mut c = case.clone();
        c.keys[s0 * d + 3] = 0.0;
        c.keys[s1 * d + 100] = 0.0;
        c.model()
    };
    let m = &clean[0];
    let mut order: Vec<usize> = model_order(&m.scores)
        .into_iter()
        .filter(|&p| p != 4 && p != 17)
        .collect();
    order.truncate(28);
    for (j, &p) in order.iter().enumerate() {
        let got = row0[j] as usize;
        assert!(
            (m.scores[got] - m.scores[p]).abs() <= 2e-5 * (1.0 + m.mag[p]),
            "rank {j}"
        );
    }
}

/// NaN in every slot no row may read (past a context, unused blocks, -1 table padding; FP8:
/// the NaN code and a NaN ue8m0 scale) gives the same bits as finite keys there.
fn unread_slots_never_matter(backend: Backend) {
    let mut rng = Rng::new(3);
    for (kind, qdt) in [
        (Keys::Dense(DType::F32), DType::F32),
        (Keys::Fp8(ScaleFormat::Ue8m0), DType::F32),
        (Keys::Fp8(ScaleFormat::Ue8m0), DType::F8E4M3),
        (Keys::Fp8(ScaleFormat::F32), DType::F8E4M3),
    ] {
        let case = Case::random(
            &mut rng,
            (3, 4, 128, 16),
            vec![20, 33, 5],
            8,
            qdt,
            kind,
            false,
        );
        let mut read = vec![false; case.nb * case.bs];
        for r in 0..case.t {
            for p in 0..case.lens[r] as usize {
                read[case.table[r * case.max_blocks + p / 16] as usize * 16 + p % 16] = true;
            }
        }
        assert!(read.iter().any(|r| !r), "some slot is unread");
        let poisoned = match kind {
            Keys::Dense(_) => {
                let mut keys = case.keys.clone();
                for (s, _) in read.iter().enumerate().filter(|(_, &r)| !r) {
                    keys[s * 128..(s + 1) * 128].fill(f32::NAN);
                }
                let slots: Vec<i64> = (0..read.len() as i64).collect();
                cache_with(kind, (case.nb, case.bs, case.d), &keys, &slots)
            }
            Keys::Fp8(fmt) => host_fp8_cache(&case, fmt, &read),
        };
        let Some((want, want_s)) = case.try_run(&case.cache(), backend) else {
            continue;
        };
        let (got, got_s) = case.try_run(&poisoned, backend).expect("runs");
        assert_eq!(got, want, "{kind:?}");
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got_s), bits(&want_s), "{kind:?}");
    }
}

/// An FP8 cache made from the host quantisation's bytes (`float8`) through `from_parts`; the
/// slots not `keep` hold the NaN code and the NaN scale (ue8m0 255, or f32 NaN).
fn host_fp8_cache(case: &Case, fmt: ScaleFormat, keep: &[bool]) -> IndexKeyCache {
    let d = case.d;
    let g = d / 128;
    let mut codes = Vec::new();
    let mut scale_codes = Vec::new();
    let mut scales = Vec::new();
    for (s, &k) in keep.iter().enumerate() {
        let (c, sc) = host_quant(&case.keys[s * d..(s + 1) * d], fmt);
        if k {
            codes.extend(c);
            scale_codes.extend(sc.iter().map(|v| (v.to_bits() >> 23) as u8));
            scales.extend(sc);
        } else {
            codes.extend(std::iter::repeat_n(0x7fu8, d));
            scale_codes.extend(std::iter::repeat_n(0xffu8, g));
            scales.extend(std::iter::repeat_n(f32::NAN, g));
        }
    }
    let dims = [case.nb, case.bs, d];
    let sdims = [case.nb, case.bs, g];
    let data = Tensor::from_raw_buffer(&codes, DType::F8E4M3, &dims, &CPU).expect("data");
    let scales = match fmt {
        ScaleFormat::Ue8m0 => Tensor::from_raw_buffer(&scale_codes, DType::F8E8M0, &sdims, &CPU),
        ScaleFormat::F32 => Tensor::from_slice(&scales, &sdims[..], &CPU),
    }
    .expect("scales");
    IndexKeyCache::from_parts(data, Some(scales)).expect("a valid cache")
}

/// I32, I64 and U32 block tables give the same bits.
fn index_dtypes_agree(backend: Backend) {
    let mut rng = Rng::new(13);
    for (kind, qdt) in [
        (Keys::Fp8(ScaleFormat::F32), DType::BF16),
        (Keys::Fp8(ScaleFormat::F32), DType::F8E4M3),
        (Keys::Dense(DType::BF16), DType::BF16),
    ] {
        let case = Case::random(
            &mut rng,
            (3, 4, 128, 16),
            vec![30, 1, 47],
            12,
            qdt,
            kind,
            false,
        );
        let Some(want) = case.try_run(&case.cache(), backend) else {
            for dt in [DType::I64, DType::U32] {
                if backend == Backend::Ascend950 && case.kernel_runs() {
                    expect_package(|| case.run(backend, dt).map(|_| ()));
                } else {
                    expect_no_kernel(case.run(backend, dt));
                }
            }
            continue;
        };
        for dt in [DType::I64, DType::U32] {
            let got = case.run_checked(&case.cache(), backend, dt).expect("runs");
            assert_eq!(got.0, want.0, "{dt:?}");
            assert_eq!(got.1, want.1, "{dt:?}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The FP8 cache, q's quantisation, the conversion modes, the Hadamard rotation
// ---------------------------------------------------------------------------------------------

/// The raw bytes of an F8E4M3 or F8E8M0 tensor.
fn raw(t: &Tensor) -> Vec<u8> {
    let t = t.contiguous().expect("contiguous");
    let (s, l) = t.storage_and_layout();
    let (a, b) = l.contiguous_offsets().expect("contiguous");
    match &*s {
        Storage::Cpu(CpuStorage::F8E4M3(v)) => v[a..b].iter().map(|c| c.to_bits()).collect(),
        Storage::Cpu(CpuStorage::F8E8M0(v)) => v[a..b].to_vec(),
        _ => panic!("not an FP8 tensor"),
    }
}

/// The append writes the host quantisation's codes and scales (float8, DeepSeek's rule) into
/// the mapped slots only, for f32 and ue8m0 scales, D 128 and 256; -1 rows are skipped.
#[test]
fn append_quantises_like_the_host_model() {
    let mut rng = Rng::new(21);
    for fmt in [ScaleFormat::F32, ScaleFormat::Ue8m0] {
        for d in [128usize, 256] {
            let (nb, bs, n) = (3usize, 4usize, 5usize);
            let cache = IndexKeyCache::zeros_fp8(nb, bs, d, fmt, &CPU).expect("cache");
            let mut keys = rng.vec(n * d, -3.0, 3.0);
            keys[d..2 * d].fill(0.0); // an all-zero row: scale 1e-4 / 448
            keys[2 * d + 5] = 1e30; // one huge value in a group
            let slots = [7i64, 0, -1, 11, 2];
            let k = Tensor::from_slice(&keys, (n, d), &CPU).expect("k");
            let sm = ints(&slots, &[n], DType::I32);
            index_cache_append(
                &cache,
                &k,
                &sm,
                Fp8Conversion::default(),
                Some(Backend::Reference),
            )
            .expect("append");
            let data = raw(cache.data());
            let scales: Vec<f32> = match fmt {
                ScaleFormat::F32 => values(cache.scales().expect("scales")),
                ScaleFormat::Ue8m0 => raw(cache.scales().expect("scales"))
                    .into_iter()
                    .map(ue8m0_to_f32)
                    .collect(),
            };
            let g = d / 128;
            for slot in 0..nb * bs {
                let row = slots.iter().position(|&s| s == slot as i64);
                let (want_c, want_s) = match row {
                    Some(i) if slots[i] >= 0 => host_quant(&keys[i * d..(i + 1) * d], fmt),
                    _ => (vec![0u8; d], vec![1f32; g]),
                };
                assert_eq!(
                    &data[slot * d..(slot + 1) * d],
                    &want_c[..],
                    "{fmt:?} D {d} slot {slot} codes"
                );
                assert_eq!(
                    &scales[slot * g..(slot + 1) * g],
                    &want_s[..],
                    "{fmt:?} D {d} slot {slot} scales"
                );
            }
        }
    }
}

/// q's quantisation gives the host model's codes and scales; the dequantised q with the scale
/// folded into the weights scores like DeepSeek's FP8 form.
#[test]
fn q_quantisation_matches_the_host_model() {
    let mut rng = Rng::new(4);
    for fmt in [ScaleFormat::F32, ScaleFormat::Ue8m0] {
        let v = rng.vec(2 * 3 * 256, -2.0, 2.0);
        let q = Tensor::from_slice(&v, (2, 3, 256), &CPU).expect("q");
        let (codes, scales) =
            quantize_index_q(&q, fmt, Fp8Conversion::default()).expect("quantises");
        assert_eq!(
            (codes.dims(), codes.dtype()),
            (&[2, 3, 256][..], DType::F8E4M3)
        );
        assert_eq!(
            (scales.dims(), scales.dtype()),
            (&[2, 3, 2][..], fmt.dtype())
        );
        let got_s: Vec<f32> = match fmt {
            ScaleFormat::F32 => values(&scales),
            ScaleFormat::Ue8m0 => raw(&scales).into_iter().map(ue8m0_to_f32).collect(),
        };
        let (want_c, want_s) = host_quant(&v, fmt);
        assert_eq!(raw(&codes), want_c, "{fmt:?}");
        assert_eq!(got_s, want_s, "{fmt:?}");
        // scales_to_f32 gives the same values in f32, shape kept, whatever the format.
        let f = scales_to_f32(&scales).expect("decodes");
        assert_eq!((f.dims(), f.dtype()), (&[2, 3, 2][..], DType::F32));
        assert_eq!(values(&f), want_s, "{fmt:?}");
    }
    expect_invalid(
        scales_to_f32(&Tensor::zeros(4, DType::BF16, &CPU).expect("t")),
        "scales_to_f32",
        "scales",
        &["BF16", "scale format"],
    );
    expect_invalid(
        quantize_index_q(
            &Tensor::zeros((2, 100), DType::F32, &CPU).expect("q"),
            ScaleFormat::F32,
            Fp8Conversion::default(),
        ),
        "quantize_index_q",
        "q",
        &["multiple of 128"],
    );
    let bad = Tensor::from_slice(&[f32::NAN; 128], (1, 128), &CPU).expect("q");
    expect_invalid(
        quantize_index_q(&bad, ScaleFormat::F32, Fp8Conversion::default()),
        "quantize_index_q",
        "q",
        &["row 0, column 0", "finite"],
    );
}

/// Every finite e4m3 value, ascending (the 126 positive codes' values with their negatives and 0).
fn e4m3_grid() -> Vec<f64> {
    let mut v: Vec<f64> = (0u8..0x7f).map(|c| F8E4M3::from_bits(c).to_f64()).collect();
    v.extend((1u8..0x7f).map(|c| -F8E4M3::from_bits(c).to_f64()));
    v.sort_by(f64::total_cmp);
    v
}

/// The brute-force conversion: the e4m3 neighbours of `x` on the finite grid, the mode's pick,
/// IEEE overflow past 448 (toward zero: 448; otherwise NaN unless saturating).
fn brute_e4m3(x: f32, round: RoundMode, sat: Fp8Saturation, grid: &[f64]) -> u8 {
    let code = |v: f64| F8E4M3::from_f64(v).to_bits();
    let neg = x.is_sign_negative();
    let sign = if neg { 0x80 } else { 0 };
    if x.is_nan() {
        return sign | 0x7f;
    }
    let xf = f64::from(x);
    let max = 448.0f64;
    if x.is_infinite() {
        return sign
            | if sat == Fp8Saturation::Saturate {
                0x7e
            } else {
                0x7f
            };
    }
    if xf.abs() > max {
        // The unbounded grid's next value above 448 is 480: decide by rounding there.
        let next = 480.0f64;
        let a = xf.abs();
        let up = match round {
            RoundMode::Trunc => false,
            RoundMode::Floor => neg,
            RoundMode::Ceil => !neg,
            RoundMode::Rint => a > 464.0,
            RoundMode::Round => a >= 464.0,
        } || a > next;
        let toward_zero = match round {
            RoundMode::Trunc => true,
            RoundMode::Floor => !neg,
            RoundMode::Ceil => neg,
            _ => false,
        };
        if !up || sat == Fp8Saturation::Saturate || toward_zero {
            return sign | 0x7e;
        }
        return sign | 0x7f;
    }
    let i = grid.partition_point(|&g| g <= xf);
    let lo = grid[i - 1];
    if lo == xf {
        return if xf == 0.0 { sign } else { code(xf) };
    }
    let hi = grid[i];
    let pick = match round {
        RoundMode::Floor => lo,
        RoundMode::Ceil => hi,
        RoundMode::Trunc => {
            if xf > 0.0 {
                lo
            } else {
                hi
            }
        }
        RoundMode::Rint | RoundMode::Round => {
            let (dl, dh) = (xf - lo, hi - xf);
            if dl < dh {
                lo
            } else if dh < dl {
                hi
            } else if round == RoundMode::Round {
                if xf > 0.0 {
                    hi
                } else {
                    lo
                }
            } else if code(lo) & 1 == 0 {
                lo
            } else {
                hi
            }
        }
    };
    if pick == 0.0 {
        sign
    } else {
        code(pick)
    }
}

/// The conversion under every rounding and saturation mode against the brute force, on every
/// code's value, every midpoint, a quarter past each, values past 448 and ±inf; the default
/// mode also against candle's cast (the `float8` crate).
#[test]
fn fp8_conversion_modes_match_the_brute_force() {
    let grid = e4m3_grid();
    let mut probes: Vec<f32> = Vec::new();
    for w in grid.windows(2) {
        let (a, b) = (w[0], w[1]);
        for f in [0.0, 0.25, 0.5, 0.75] {
            probes.push((a + (b - a) * f) as f32);
        }
    }
    probes.extend([
        448.0,
        449.0,
        463.9,
        464.0,
        470.0,
        479.0,
        480.0,
        500.0,
        1e6,
        f32::INFINITY,
    ]);
    let more: Vec<f32> = probes.iter().map(|v| -v).collect();
    probes.extend(more);
    probes.extend([
        f32::NAN,
        1e-30,
        -1e-30,
        2f32.powi(-10),
        2f32.powi(-10) * 1.01,
    ]);
    let modes = [
        RoundMode::Rint,
        RoundMode::Round,
        RoundMode::Floor,
        RoundMode::Ceil,
        RoundMode::Trunc,
    ];
    for &round in &modes {
        for saturation in [Fp8Saturation::Saturate, Fp8Saturation::Passthrough] {
            let conv = Fp8Conversion { round, saturation };
            for &v in &probes {
                let got = f32_to_e4m3(v, conv);
                let want = brute_e4m3(v, round, saturation, &grid);
                assert_eq!(got, want, "{v} under {conv:?}: {got:#04x} vs {want:#04x}");
            }
        }
    }
    for &v in &probes {
        assert_eq!(
            f32_to_e4m3(v, Fp8Conversion::default()),
            F8E4M3::from_f32(v).to_bits(),
            "{v}"
        );
    }
}

/// The rotation equals `x H / sqrt(D)` with the Sylvester matrix (f64), keeps the dtype, and
/// leaves the indexer's dot products unchanged (orthogonal).
#[test]
fn hadamard_matches_the_sylvester_matrix() {
    let mut rng = Rng::new(8);
    for d in [1usize, 2, 8, 128, 256] {
        let v = rng.vec(3 * d, -1.0, 1.0);
        let x = Tensor::from_slice(&v, (3, d), &CPU).expect("x");
        let y = values(&hadamard_rotate(&x).expect("rotates"));
        for r in 0..3 {
            for i in 0..d {
                let want: f64 = (0..d)
                    .map(|j| {
                        let s = if (i & j).count_ones() % 2 == 0 {
                            1.0
                        } else {
                            -1.0
                        };
                        s * f64::from(v[r * d + j])
                    })
                    .sum::<f64>()
                    / (d as f64).sqrt();
                assert!(
                    (f64::from(y[r * d + i]) - want).abs() <= 1e-5,
                    "D {d} [{r}, {i}]"
                );
            }
        }
        // Orthogonal: row 0 . row 1 is kept.
        let dot = |a: &[f32], b: &[f32]| {
            a.iter()
                .zip(b)
                .map(|(x, y)| f64::from(*x) * f64::from(*y))
                .sum::<f64>()
        };
        let before = dot(&v[..d], &v[d..2 * d]);
        let after = dot(&y[..d], &y[d..2 * d]);
        assert!((before - after).abs() <= 1e-4, "D {d}: {before} vs {after}");
    }
    let b = Tensor::from_slice(&[1f32; 256], (2, 128), &CPU)
        .expect("x")
        .to_dtype(DType::BF16)
        .expect("bf16");
    assert_eq!(hadamard_rotate(&b).expect("rotates").dtype(), DType::BF16);
    expect_invalid(
        hadamard_rotate(&Tensor::zeros((2, 96), DType::F32, &CPU).expect("x")),
        "hadamard_rotate",
        "x",
        &["power of two"],
    );
}

/// A dense bf16 cache and an FP8 cache of the same keys agree with their own models; candle's
/// matmul on the pre-dequantised keys (`dequantize`) gives the Reference's FP8 scores.
#[test]
fn dequantized_keys_give_the_fp8_scores() {
    let mut rng = Rng::new(17);
    let case = Case::random(
        &mut rng,
        (2, 4, 128, 16),
        vec![40, 25],
        6,
        DType::F32,
        Keys::Fp8(ScaleFormat::Ue8m0),
        false,
    );
    let cache = case.cache();
    let deq = cache.dequantize().expect("dequantises");
    let dense = IndexKeyCache::from_parts(deq, None).expect("a dense f32 cache");
    let a = case
        .run_on(&cache, Backend::Reference, DType::I32)
        .expect("fp8");
    let b = case
        .run_on(&dense, Backend::Reference, DType::I32)
        .expect("dequantised");
    assert_eq!(a.0, b.0);
    for (x, y) in a.1.iter().zip(&b.1) {
        assert!((x - y).abs() <= 1e-5 * (1.0 + x.abs()), "{x} vs {y}");
    }
}

// ---------------------------------------------------------------------------------------------
// Bad input: one test per rule, each an `Invalid` naming the argument
// ---------------------------------------------------------------------------------------------

/// A valid small call to break one argument of.
struct Call {
    q: Tensor,
    w: Tensor,
    cache: IndexKeyCache,
    table: Tensor,
    lens: Tensor,
    p: LightningIndexerParams,
}

fn good() -> Call {
    let mut rng = Rng::new(1);
    let q = Tensor::from_vec(rng.vec(2 * 4 * 128, -1.0, 1.0), (2, 4, 128), &CPU).expect("q");
    let w = Tensor::from_vec(rng.vec(8, -1.0, 1.0), (2, 4), &CPU).expect("w");
    let cache = IndexKeyCache::zeros_fp8(4, 8, 128, ScaleFormat::Ue8m0, &CPU).expect("cache");
    let table = ints(&[0, 2, -1, 3, 1, -1], &[2, 3], DType::I64);
    let lens = ints(&[16, 9], &[2], DType::I64);
    Call {
        q,
        w,
        cache,
        table,
        lens,
        p: LightningIndexerParams::new(4),
    }
}

fn call(c: &Call) -> Result<(Tensor, Option<Tensor>), OpError> {
    lightning_indexer(
        &c.q,
        &c.w,
        &c.cache,
        &c.table,
        &c.lens,
        &c.p,
        Some(Backend::Reference),
    )
}

fn bad(arg: &str, needles: &[&str], f: impl FnOnce(&mut Call)) {
    let mut c = good();
    f(&mut c);
    expect_invalid(call(&c), OP, arg, needles);
}

#[test]
fn the_good_call_runs() {
    let (idx, s) = call(&good()).expect("runs");
    assert_eq!(idx.dims(), &[2, 4]);
    assert!(s.is_none());
}

#[test]
fn bad_q_rank() {
    bad("q", &["rank 3"], |c| c.q = c.q.flatten_from(1).expect("q"));
}

#[test]
fn bad_q_dtype() {
    bad("q", &["I64"], |c| {
        c.q = Tensor::zeros((2, 4, 128), DType::I64, &CPU).expect("q")
    });
}

#[test]
fn bad_q_empty() {
    bad("q", &["empty"], |c| {
        c.q = Tensor::zeros((0, 4, 128), DType::F32, &CPU).expect("q")
    });
}

#[test]
fn bad_q_head_dim() {
    bad("k_cache", &["D", "128"], |c| {
        c.q = Tensor::zeros((2, 4, 256), DType::F32, &CPU).expect("q")
    });
}

#[test]
fn bad_weights_shape() {
    bad("weights", &["H_idx"], |c| {
        c.w = Tensor::zeros((2, 5), DType::F32, &CPU).expect("w")
    });
    bad("weights", &["T"], |c| {
        c.w = Tensor::zeros((3, 4), DType::F32, &CPU).expect("w")
    });
}

#[test]
fn bad_weights_dtype() {
    bad("weights", &["F32 or q's dtype"], |c| {
        c.w = c.w.to_dtype(DType::BF16).expect("w");
    });
}

#[test]
fn bad_block_size_param() {
    bad("block_size", &["16", "8 slots"], |c| {
        c.p.block_size = Some(16)
    });
}

#[test]
fn bad_topk() {
    bad("topk", &["1..="], |c| c.p.topk = 0);
    bad("topk", &["1..="], |c| c.p.topk = usize::MAX);
    bad("topk", &["indices"], |c| c.p.topk = 1 << 30); // [2, 2^30] past MAX_ELEMENTS
}

#[test]
fn bad_table_rank_and_rows() {
    bad("block_table", &["rank 2"], |c| {
        c.table = ints(&[0, 1], &[2], DType::I64)
    });
    bad("block_table", &["T"], |c| {
        c.table = ints(&[0, 1, 2], &[1, 3], DType::I64)
    });
    bad("block_table", &["F32"], |c| {
        c.table = Tensor::zeros((2, 3), DType::F32, &CPU).expect("t")
    });
}

#[test]
fn bad_reached_table_entry() {
    // Row 1 reaches entries 0 and 1 (9 positions, blocks of 8): entry [1, 1] = -1.
    bad(
        "block_table",
        &["entry [1, 1] = -1", "position 8 of row 1"],
        |c| {
            c.table = ints(&[0, 2, -1, 3, -1, -1], &[2, 3], DType::I64);
        },
    );
    bad("block_table", &["entry [0, 0] = 4", "0..4"], |c| {
        c.table = ints(&[4, 2, -1, 3, 1, -1], &[2, 3], DType::I64);
    });
    // Entries past the context are not read: anything goes there.
    let mut c = good();
    c.table = ints(&[0, 2, i64::MIN, 3, 1, i64::MAX], &[2, 3], DType::I64);
    call(&c).expect("padding past the context is never read");
}

#[test]
fn bad_context_lens() {
    bad("context_lens", &["context_lens[1] = 25", "0..=24"], |c| {
        c.lens = ints(&[16, 25], &[2], DType::I64)
    });
    bad("context_lens", &["context_lens[0] = -1"], |c| {
        c.lens = ints(&[-1, 3], &[2], DType::I64)
    });
    bad("context_lens", &["32-bit"], |c| {
        c.lens = ints(&[1 << 40, 3], &[2], DType::I64)
    });
    bad("context_lens", &["T"], |c| {
        c.lens = ints(&[1], &[1], DType::I64)
    });
    let mut c = good();
    c.lens = ints(&[0, 3], &[2], DType::I64);
    let (idx, _) = call(&c).expect("an empty row is legal");
    assert_eq!(idx.to_vec2::<i32>().expect("idx")[0], [-1, -1, -1, -1]);
}

#[test]
fn bad_cache_parts() {
    let op = "index_key_cache";
    let f8 = |dims: &[usize]| {
        let n: usize = dims.iter().product();
        Tensor::from_raw_buffer(&vec![0u8; n], DType::F8E4M3, dims, &CPU).expect("f8")
    };
    let s32 = |dims: &[usize]| Tensor::zeros(dims, DType::F32, &CPU).expect("s");
    expect_invalid(
        IndexKeyCache::from_parts(f8(&[2, 4, 96]), Some(s32(&[2, 4, 1]))),
        op,
        "data",
        &["multiple of 128"],
    );
    expect_invalid(
        IndexKeyCache::from_parts(f8(&[2, 4, 256]), Some(s32(&[2, 4, 1]))),
        op,
        "scales",
        &["[2, 4, 2]"],
    );
    expect_invalid(
        IndexKeyCache::from_parts(f8(&[2, 4, 128]), None),
        op,
        "scales",
        &["need their scales"],
    );
    expect_invalid(
        IndexKeyCache::from_parts(s32(&[2, 4, 128]), Some(s32(&[2, 4, 1]))),
        op,
        "scales",
        &["only FP8"],
    );
    let sbf = s32(&[2, 4, 1]).to_dtype(DType::BF16).expect("bf16");
    expect_invalid(
        IndexKeyCache::from_parts(f8(&[2, 4, 128]), Some(sbf)),
        op,
        "scales",
        &["scale format"],
    );
    let t = s32(&[4, 2, 128]).transpose(0, 1).expect("view");
    expect_invalid(
        IndexKeyCache::from_parts(t, None),
        op,
        "data",
        &["contiguous"],
    );
    expect_invalid(
        IndexKeyCache::zeros_fp8(2, 4, 100, ScaleFormat::F32, &CPU),
        op,
        "data",
        &["multiple of 128"],
    );
    expect_invalid(
        IndexKeyCache::zeros_fp8(1 << 20, 1 << 10, 1 << 10, ScaleFormat::F32, &CPU),
        op,
        "data",
        &["elements"],
    );
    expect_invalid(
        IndexKeyCache::zeros(0, 4, 128, DType::F32, &CPU),
        op,
        "data",
        &["empty"],
    );
    expect_invalid(
        IndexKeyCache::zeros(2, 4, 128, DType::I64, &CPU),
        op,
        "data",
        &["I64"],
    );
}

#[test]
fn bad_append() {
    let cache = IndexKeyCache::zeros_fp8(2, 4, 128, ScaleFormat::F32, &CPU).expect("cache");
    let k = Tensor::ones((3, 128), DType::F32, &CPU).expect("k");
    let run = |k: &Tensor, slots: &[i64]| {
        let sm = ints(slots, &[slots.len()], DType::I64);
        index_cache_append(
            &cache,
            k,
            &sm,
            Fp8Conversion::default(),
            Some(Backend::Reference),
        )
    };
    expect_invalid(
        run(&k, &[0, 8, 1]),
        APPEND,
        "slot_mapping",
        &["slot_mapping[1] = 8", "0..8"],
    );
    expect_invalid(run(&k, &[0, 3, 3]), APPEND, "slot_mapping", &["duplicates"]);
    expect_invalid(run(&k, &[0, -2, 3]), APPEND, "slot_mapping", &["-2"]);
    expect_invalid(run(&k, &[0, 1]), APPEND, "slot_mapping", &["N"]);
    let k256 = Tensor::ones((3, 256), DType::F32, &CPU).expect("k");
    expect_invalid(run(&k256, &[0, 1, 2]), APPEND, "k", &["D"]);
    let mut v = vec![1f32; 3 * 128];
    v[2 * 128 + 7] = f32::INFINITY;
    let kinf = Tensor::from_vec(v, (3, 128), &CPU).expect("k");
    let before = raw(cache.data());
    expect_invalid(
        run(&kinf, &[0, 1, 2]),
        APPEND,
        "k",
        &["row 2, column 7", "finite"],
    );
    assert_eq!(raw(cache.data()), before, "nothing written");
    // A skipped row is never read: its inf does not matter.
    run(&kinf, &[0, 1, -1]).expect("row 2 is skipped");
    for bk in [Backend::TileSim, Backend::Ascend950] {
        let sm = ints(&[0, 1, 2], &[3], DType::I64);
        expect_no_kernel(index_cache_append(
            &cache,
            &k,
            &sm,
            Fp8Conversion::default(),
            Some(bk),
        ));
    }
}

/// The kernel backends validate first (bad input is `Invalid` there too); an FP8 cache (or q
/// wider than the keys) has no tile kernel yet and they say so plainly, as the registry's
/// launches of such a shape do; a top-k past the kernels' limit is `Invalid` naming `topk`.
#[test]
fn kernel_backends_refuse_what_they_cannot_run() {
    for bk in [Backend::TileSim, Backend::Ascend950] {
        let c = good();
        let r = lightning_indexer(&c.q, &c.w, &c.cache, &c.table, &c.lens, &c.p, Some(bk));
        expect_no_kernel(r);
        let mut c = good();
        c.p.topk = 0;
        let r = lightning_indexer(&c.q, &c.w, &c.cache, &c.table, &c.lens, &c.p, Some(bk));
        expect_invalid(r, OP, "topk", &[]);
        let mut c = good();
        c.cache = IndexKeyCache::zeros(4, 8, 128, DType::F16, &CPU).expect("cache");
        let r = lightning_indexer(&c.q, &c.w, &c.cache, &c.table, &c.lens, &c.p, Some(bk));
        expect_no_kernel(r); // f32 q, f16 keys
        c.cache = IndexKeyCache::zeros(4, 8, 128, DType::F32, &CPU).expect("cache");
        c.p.topk = tileops_ops::limits::MAX_INDEXER_KERNEL_TOPK + 1;
        let r = lightning_indexer(&c.q, &c.w, &c.cache, &c.table, &c.lens, &c.p, Some(bk));
        expect_invalid(r, OP, "topk", &["at most"]);
    }
    use tileops_ops::registry::{launches, LightningIndexerShape};
    let fp8 = LightningIndexerShape {
        key_dtype: tile_backend::ir::DType::F8E4M3,
        ue8m0: true,
        ..Default::default()
    };
    expect_no_kernel(launches(&fp8));
    let launched = launches(&LightningIndexerShape::default()).expect("bf16 keys launch");
    // 4 rows of 8192 scores: 16 segments of 512 a row, merged in a tree of 4 levels.
    let names: Vec<&str> = launched.iter().map(|l| l.kernel.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "indexer_scores_bf16_h64_d128",
            "indexer_topk_2048",
            "indexer_merge_2048",
            "indexer_merge_2048",
            "indexer_merge_2048",
            "indexer_merge_2048"
        ],
        "scores, segment top-k, the merge tree's levels"
    );
    let entries: Vec<Option<i64>> = launched.iter().map(|l| l.scalar("entries")).collect();
    assert_eq!(entries[2..], [Some(32), Some(16), Some(8), Some(4)]);
    assert_eq!(
        launched[5].scalar("dsts"),
        Some(4),
        "the last level writes the 4 rows"
    );
    let bad = LightningIndexerShape {
        head_dim: 192,
        ..fp8
    };
    expect_invalid(launches(&bad), OP, "head_dim", &["multiple of 128"]);
    let bad = LightningIndexerShape {
        key_dtype: tile_backend::ir::DType::F32,
        ..fp8
    };
    expect_invalid(launches(&bad), OP, "ue8m0", &["no scales"]);
}

/// One row whose head scores (H 64 x 300000 positions) exceed the Reference's chunk: computed in
/// windows of positions, still the brute force's top-k.
#[test]
fn a_row_past_the_chunk_is_windowed() {
    let mut rng = Rng::new(29);
    let (h, d, bs, len, topk) = (64usize, 1usize, 1000usize, 300_000usize, 50usize);
    let nb = len / bs;
    let keys = rng.vec(len * d, -1.0, 1.0);
    let slots: Vec<i64> = (0..len as i64).collect();
    let cache = cache_with(Keys::Dense(DType::F32), (nb, bs, d), &keys, &slots);
    let q = rng.vec(h * d, -1.0, 1.0);
    let w = rng.vec(h, -1.0, 1.0);
    let table: Vec<i64> = (0..nb as i64).rev().collect();
    let (qt, wt) = (
        Tensor::from_slice(&q, (1, h, d), &CPU).expect("q"),
        Tensor::from_slice(&w, (1, h), &CPU).expect("w"),
    );
    let (tt, lt) = (
        ints(&table, &[1, nb], DType::I32),
        ints(&[len as i64], &[1], DType::I32),
    );
    let mut p = LightningIndexerParams::new(topk);
    p.return_scores = true;
    let (idx, s) =
        lightning_indexer(&qt, &wt, &cache, &tt, &lt, &p, Some(Backend::Reference)).expect("runs");
    let idx = idx
        .flatten_all()
        .and_then(|i| i.to_vec1::<i32>())
        .expect("idx");
    let k64: Vec<f64> = keys.iter().map(|&v| f64::from(v)).collect();
    let rows = model(&q, &w, &k64, (h, d, bs), &table, nb, &[len as i64]);
    check_rows(
        "windowed row",
        &idx,
        Some(&values(&s.expect("scores"))),
        &rows,
        topk,
    );
}
