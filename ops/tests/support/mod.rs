//! Test support: deterministic data, per-dtype tolerances, plain-Rust scalar models of every op
//! (the oracle for every backend), and the harness that runs one test body on each backend.
#![allow(dead_code)]

use candle_core::{DType, Device, Tensor};
use std::path::Path;
use tileops_ops::{profile, Backend, OpError};

/// Instantiates each named case `fn case(backend: Backend)` once per backend, as
/// `case::reference`, `case::tilesim` and `case::ascend950`; with `simulated:` before the names,
/// only `case::reference` and `case::tilesim` (cases whose body runs the result, while the
/// Ascend950 package path has a test of its own).
macro_rules! for_each_backend {
    (simulated: $($name:ident),* $(,)?) => {
        $( for_each_backend!(@case $name: reference = Reference, tilesim = TileSim); )*
    };
    (@case $name:ident: $($test:ident = $backend:ident),*) => {
        mod $name {
            $(
                #[test]
                fn $test() {
                    super::$name(tileops_ops::Backend::$backend)
                }
            )*
        }
    };
    ($($name:ident),* $(,)?) => {
        $(
            for_each_backend!(
                @case $name: reference = Reference, tilesim = TileSim, ascend950 = Ascend950
            );
        )*
    };
}

// ---------------------------------------------------------------------------------------------
// Data
// ---------------------------------------------------------------------------------------------

/// The test inputs' generator: the simulator's splitmix64 ([`tile_backend::sim::io::Rng`]) with
/// the draws the op tests use.
pub struct Rng(tile_backend::sim::io::Rng);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(tile_backend::sim::io::Rng::new(seed))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        self.0.uniform(lo, hi)
    }

    /// Uniform integer in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        self.0.below(n as u64) as usize
    }

    /// `n` values uniform in `[lo, hi)`.
    pub fn vec(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        self.0.uniform_vec(n, lo, hi)
    }

    /// Shuffles `v` in place (Fisher-Yates).
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, self.below(i + 1));
        }
    }

    /// A random permutation of `0..n`.
    pub fn perm(&mut self, n: usize) -> Vec<usize> {
        let mut p: Vec<usize> = (0..n).collect();
        self.shuffle(&mut p);
        p
    }
}

/// A data tensor of `dtype` from f32 values, and the values it actually holds (rounded to
/// `dtype`), which the oracles read.
pub fn data(values: Vec<f32>, shape: &[usize], dtype: DType) -> (Tensor, Vec<f32>) {
    let t = Tensor::from_vec(values, shape, &Device::Cpu)
        .and_then(|t| t.to_dtype(dtype))
        .expect("building a test tensor");
    let seen = t
        .to_dtype(DType::F32)
        .and_then(|t| t.flatten_all())
        .and_then(|t| t.to_vec1::<f32>())
        .expect("reading a test tensor");
    (t, seen)
}

/// Random data in `[-1, 1)`.
pub fn rand_data(rng: &mut Rng, shape: &[usize], dtype: DType) -> (Tensor, Vec<f32>) {
    let n = shape.iter().product();
    data(rng.vec(n, -1.0, 1.0), shape, dtype)
}

/// An integer tensor of `dtype` (I32, I64 or U32) from i64 values.
pub fn ints(values: &[i64], shape: &[usize], dtype: DType) -> Tensor {
    let t = Tensor::from_slice(values, shape, &Device::Cpu).expect("building an index tensor");
    match dtype {
        DType::I64 => t,
        // candle has no direct I64 -> I32/U32 cast for negative values: go through f64, exact
        // for every value used in tests.
        other => t
            .to_dtype(DType::F64)
            .and_then(|t| t.to_dtype(other))
            .expect("casting an index tensor"),
    }
}

/// A simulator tensor (f32, f16 or bf16) as a candle tensor of the same dtype, shape and values,
/// for the validation of a call whose storage the test hands to an op's `kernel::run`.
pub fn from_gm(t: &tile_backend::launch::GmTensor) -> Tensor {
    use tile_backend::ir::DType as T;
    let dtype = match t.dtype {
        T::F32 => DType::F32,
        T::F16 => DType::F16,
        _ => DType::BF16,
    };
    data(t.to_f32(), &t.shape, dtype).0
}

/// A tensor's values as f32 (any dtype, any shape).
pub fn values(t: &Tensor) -> Vec<f32> {
    t.to_dtype(DType::F32)
        .and_then(|t| t.flatten_all())
        .and_then(|t| t.to_vec1::<f32>())
        .expect("reading a result tensor")
}

/// A block table for `batch` sequences of `used` blocks each, out of `num_blocks` physical
/// blocks, shuffled (no block shared), padded with `-1` up to `max_blocks` columns.
pub fn shuffled_table(
    rng: &mut Rng,
    batch: usize,
    used: usize,
    max_blocks: usize,
    num_blocks: usize,
) -> Vec<i64> {
    assert!(batch * used <= num_blocks && used <= max_blocks);
    let perm = rng.perm(num_blocks);
    let mut t = vec![-1i64; batch * max_blocks];
    for b in 0..batch {
        for j in 0..used {
            t[b * max_blocks + j] = perm[b * used + j] as i64;
        }
    }
    t
}

// ---------------------------------------------------------------------------------------------
// Tolerances and comparison
// ---------------------------------------------------------------------------------------------

/// `|got - want| <= atol + rtol * |want|`.
#[derive(Debug, Clone, Copy)]
pub struct Tol {
    /// Absolute part.
    pub atol: f32,
    /// Relative part.
    pub rtol: f32,
}

/// Bit-exact (gathers and cache writes move data without arithmetic).
pub const EXACT: Tol = Tol {
    atol: 0.0,
    rtol: 0.0,
};
/// The lse tolerance (f32, natural log).
pub const LSE_TOL: Tol = Tol {
    atol: 1e-4,
    rtol: 1e-5,
};

/// The attention-output tolerance for a dtype: f32 (1e-5, 1e-4), f16 (1e-3, 2^-9), bf16
/// (1e-3, 2^-7).
pub fn out_tol(dtype: DType) -> Tol {
    match dtype {
        DType::F32 => Tol {
            atol: 1e-5,
            rtol: 1e-4,
        },
        DType::F16 => Tol {
            atol: 1e-3,
            rtol: 1.0 / 512.0,
        },
        DType::BF16 => Tol {
            atol: 1e-3,
            rtol: 1.0 / 128.0,
        },
        other => panic!("no tolerance for {other:?}"),
    }
}

/// The unit roundoff of the dtype the kernels round P to before P V: bf16 2^-8, f16 2^-11; f32
/// none (P stays f32). Rounding P adds up to `p_rounding(dtype) * sum_j pi_j |v_j|` to an
/// attention output (docs/ops.md, "Tolerances").
pub fn p_rounding(dtype: DType) -> f32 {
    match dtype {
        DType::BF16 => 1.0 / 256.0,
        DType::F16 => 1.0 / 2048.0,
        _ => 0.0,
    }
}

/// Asserts `got` matches `want` elementwise within `tol`; infinities must match exactly, and NaN
/// is accepted only where the oracle wants NaN (docs/ops.md's non-finite policy), and then
/// required.
pub fn assert_close(what: &str, got: &[f32], want: &[f32], tol: Tol) {
    assert_close_with(what, got, want, tol, &[]);
}

/// [`assert_close`] with a per-element term added to each bound (`slack[i]`; empty: none).
pub fn assert_close_with(what: &str, got: &[f32], want: &[f32], tol: Tol, slack: &[f32]) {
    if let Some(v) = violations(got, want, tol, slack).first() {
        panic!("{what}{v}");
    }
}

/// The elements of `got` outside `want`'s tolerance (`atol + rtol |want| + slack[i]`; NaN where
/// and only where `want` is NaN; infinities equal), each described as `[i]: got .., want ..`.
pub fn violations(got: &[f32], want: &[f32], tol: Tol, slack: &[f32]) -> Vec<String> {
    assert_eq!(got.len(), want.len(), "length");
    assert!(
        slack.is_empty() || slack.len() == want.len(),
        "slack length"
    );
    let mut bad = Vec::new();
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if w.is_nan() || g.is_nan() {
            if !(w.is_nan() && g.is_nan()) {
                bad.push(format!(
                    "[{i}]: got {g}, want {w} (NaN where and only where wanted)"
                ));
            }
            continue;
        }
        if w.is_infinite() || g.is_infinite() {
            if g != w {
                bad.push(format!("[{i}]: got {g}, want {w} (infinities must match)"));
            }
            continue;
        }
        let err = (g - w).abs();
        let extra = slack.get(i).copied().unwrap_or(0.0);
        let bound = tol.atol + tol.rtol * w.abs() + extra;
        if err > bound {
            bad.push(format!(
                "[{i}]: got {g}, want {w}, |err| {err} > {bound} (atol {}, rtol {}, P rounding {extra})",
                tol.atol, tol.rtol
            ));
        }
    }
    bad
}

/// One output of an op run, with the tolerance it is checked at.
#[derive(Debug, Clone)]
pub struct Part {
    /// Its name in messages.
    pub name: &'static str,
    /// Its values.
    pub values: Vec<f32>,
    /// Its tolerance.
    pub tol: Tol,
    /// A per-element term added to the tolerance (empty: none).
    pub slack: Vec<f32>,
}

impl Part {
    /// A part read from a tensor.
    pub fn of(name: &'static str, t: &Tensor, tol: Tol) -> Part {
        Part {
            name,
            values: values(t),
            tol,
            slack: Vec::new(),
        }
    }

    /// An attention output `out` of `dtype`, checked at [`out_tol`] plus P's rounding term
    /// `p_rounding(dtype) * spread[i]` (docs/ops.md, "Tolerances"), `spread[i] = sum_j pi_j
    /// |v_j|` from the oracle ([`SparseModel::run_with_spread`], [`paged_model_with_spread`]).
    pub fn attention_out(out: &Tensor, dtype: DType, spread: &[f32]) -> Part {
        let u = p_rounding(dtype);
        Part {
            name: "out",
            values: values(out),
            tol: out_tol(dtype),
            slack: spread.iter().map(|s| u * s).collect(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The harness
// ---------------------------------------------------------------------------------------------

/// Runs one case on `backend`:
/// - Reference: the result matches the oracle `want` (one vector per part).
/// - TileSim: runs inside `profile` (the device's launch plan, traced); at least one launch, no
///   launch reports a hazard; the result matches the oracle and the Reference backend's result,
///   each within the part's tolerance. Then runs again outside it, as an ordinary call does
///   (the CPU's launch plan, untraced), and matches the oracle again.
/// - Ascend950: the call fails with `DeviceUnavailable`, naming a package directory in which
///   every launch's files were written.
pub fn check_backend(
    backend: Backend,
    want: impl FnOnce() -> Vec<Vec<f32>>,
    run: impl Fn(Backend) -> Result<Vec<Part>, OpError>,
) {
    match backend {
        Backend::Reference => {
            let got = run(Backend::Reference).expect("the Reference backend runs");
            compare_all("reference vs oracle", &got, &want());
        }
        Backend::TileSim => {
            let (got, launches) = profile(|| run(Backend::TileSim));
            let got = got.expect("the TileSim backend runs");
            assert!(!launches.is_empty(), "TileSim launched no kernel");
            for l in &launches {
                assert!(
                    l.hazards.is_empty(),
                    "kernel {} ({} blocks) reported hazards: {:#?}",
                    l.kernel,
                    l.block_dim,
                    l.hazards
                );
            }
            let want = want();
            compare_all("tilesim vs oracle", &got, &want);
            let reference = run(Backend::Reference).expect("the Reference backend runs");
            let reference: Vec<Vec<f32>> = reference.into_iter().map(|p| p.values).collect();
            compare_all("tilesim vs reference", &got, &reference);
            let cpu_plan = run(Backend::TileSim).expect("the TileSim backend runs untraced");
            compare_all("tilesim (CPU plan, untraced) vs oracle", &cpu_plan, &want);
        }
        Backend::Ascend950 => expect_package(|| run(Backend::Ascend950).map(|_| ())),
    }
}

fn compare_all(what: &str, got: &[Part], want: &[Vec<f32>]) {
    assert_eq!(got.len(), want.len(), "{what}: number of outputs");
    for (p, w) in got.iter().zip(want) {
        assert_close_with(
            &format!("{what}: {}", p.name),
            &p.values,
            w,
            p.tol,
            &p.slack,
        );
    }
}

/// Asserts that `run` (an Ascend950 call) wrote its kernel package and then failed with
/// `DeviceUnavailable` naming the package directory and what is missing.
pub fn expect_package(run: impl FnOnce() -> Result<(), OpError>) {
    let (r, launches) = profile(run);
    match r {
        Err(OpError::DeviceUnavailable {
            package, missing, ..
        }) => {
            assert!(!missing.is_empty(), "the error must say what is missing");
            assert!(
                package.is_dir(),
                "package dir {} missing",
                package.display()
            );
            assert!(!launches.is_empty(), "no launch was packaged");
            for l in &launches {
                assert!(!l.files.is_empty(), "launch {} wrote no file", l.kernel);
                for f in &l.files {
                    assert!(
                        f.starts_with(&package) && f.is_file(),
                        "package file {} missing or outside {}",
                        f.display(),
                        package.display()
                    );
                    assert!(file_len(f) > 0, "package file {} is empty", f.display());
                    syntax_check(f);
                }
            }
        }
        Err(e) => panic!("Ascend950: expected DeviceUnavailable, got error: {e}"),
        Ok(()) => panic!("Ascend950: expected DeviceUnavailable, but the call succeeded"),
    }
}

/// Runs `g++ -std=c++17 -fsyntax-only` on an emitted C++ file against the PTO declaration header
/// (kernels once per core type, launchers with `TILEOPS_SYNTAX_CHECK`); JSON manifests are
/// skipped. Fails loudly when g++ is missing (CI installs it). Also used by the facade's
/// `tests/cli.rs` (`tileops emit --op`).
pub fn syntax_check(f: &Path) {
    if f.extension().and_then(|e| e.to_str()) != Some("cpp") {
        return;
    }
    let include = pto_include_dir();
    let launcher = f
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.ends_with("_launcher.cpp"));
    let passes: &[&str] = if launcher {
        &["-DTILEOPS_SYNTAX_CHECK"]
    } else {
        &["-D__DAV_CUBE__", "-D__DAV_VEC__"]
    };
    for define in passes {
        let out = std::process::Command::new("g++")
            .args(["-std=c++17", "-fsyntax-only", define, "-I"])
            .arg(&include)
            .arg(f)
            .output()
            .expect("g++ must be installed (the emitted PTO-ISA C++ is syntax-checked)");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "{} ({define}) does not compile against the PTO declaration header:\n{stderr}",
            f.display(),
        );
    }
}

/// The workspace's `tile-backend/codegen/include` (the PTO declaration header), found from the
/// manifest directory of the package whose test includes this file (`ops/` or the workspace root).
fn pto_include_dir() -> std::path::PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .map(|d| d.join("tile-backend/codegen/include"))
        .find(|d| d.is_dir())
        .unwrap_or_else(|| {
            panic!(
                "no tile-backend/codegen/include above {}",
                manifest.display()
            )
        })
}

fn file_len(p: &Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

/// Asserts `r` is `OpError::Invalid` for `op` and `arg`, and that the message names the
/// argument and contains every string of `needles` (the numbers of the broken rule).
pub fn expect_invalid<T: std::fmt::Debug>(
    r: Result<T, OpError>,
    op: &str,
    arg: &str,
    needles: &[&str],
) {
    match r {
        Err(e @ OpError::Invalid { .. }) => {
            let msg = e.to_string();
            if let OpError::Invalid { op: o, arg: a, .. } = &e {
                assert_eq!((*o, *a), (op, arg), "wrong op/argument in: {msg}");
            }
            assert!(msg.contains(op), "message does not name the op: {msg}");
            assert!(
                msg.contains(&format!("`{arg}`")),
                "message does not name `{arg}`: {msg}"
            );
            for n in needles {
                assert!(msg.contains(n), "message lacks {n:?}: {msg}");
            }
        }
        Err(e) => panic!("expected Invalid({op}, {arg}), got: {e}"),
        Ok(v) => panic!("expected Invalid({op}, {arg}), got Ok({v:?})"),
    }
}

// ---------------------------------------------------------------------------------------------
// Scalar models (f64), the oracle for every backend
// ---------------------------------------------------------------------------------------------

/// `paged_gather`: `src [T, C]`, indices, one table row, block size, size.
pub fn gather_model(
    src: &[f32],
    cols: usize,
    indices: &[i64],
    table: &[i64],
    block_size: usize,
    size: usize,
) -> Vec<f32> {
    let mut out = Vec::with_capacity(indices.len() * size);
    for &t in indices {
        let t = t as usize;
        let row = table[t / block_size] as usize * block_size + t % block_size;
        out.extend_from_slice(&src[row * cols..row * cols + size]);
    }
    out
}

/// A sparse attention problem in host form.
pub struct SparseModel<'a> {
    /// `[B, H, Dqk]`.
    pub q: &'a [f32],
    /// `[num_blocks, block_size, Dqk]`.
    pub kv: &'a [f32],
    /// `[B, topk]`.
    pub indices: &'a [i64],
    /// `[B, max_blocks]`.
    pub table: &'a [i64],
    /// B, H, Dqk, topk, block_size, max_blocks, v_dim.
    pub dims: [usize; 7],
    /// The scale.
    pub scale: f32,
    /// Optional `[B]`.
    pub topk_length: Option<&'a [i64]>,
    /// Optional `[H]`.
    pub sink: Option<&'a [f32]>,
}

impl<'a> SparseModel<'a> {
    /// A problem without `topk_length` or sink (set those fields after, where a case has them).
    pub fn new(
        q: &'a [f32],
        kv: &'a [f32],
        indices: &'a [i64],
        table: &'a [i64],
        dims: [usize; 7],
        scale: f32,
    ) -> Self {
        SparseModel {
            q,
            kv,
            indices,
            table,
            dims,
            scale,
            topk_length: None,
            sink: None,
        }
    }

    /// `(out [B, H, v_dim], lse [B, H])`, computed in f64 from the definition, with the
    /// non-finite policy of docs/ops.md: a row one of whose scores is not finite (NaN or ±inf in
    /// its q or in a cache row it reads) has NaN `out` and `lse`.
    pub fn run(&self) -> (Vec<f32>, Vec<f32>) {
        let (out, lse, _) = self.run_with_spread();
        (out, lse)
    }

    /// [`run`](Self::run)'s `(out, lse)` and each output element's spread `sum_j pi_j |v_j|`
    /// (times the sink's factor), the scale of P's rounding error ([`Part::attention_out`]).
    pub fn run_with_spread(&self) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let [b_n, h_n, d, topk, bs, mb, vd] = self.dims;
        let mut out = vec![0f32; b_n * h_n * vd];
        let mut spread = vec![0f32; b_n * h_n * vd];
        let mut lse = vec![0f32; b_n * h_n];
        for b in 0..b_n {
            let len = self.topk_length.map_or(topk, |l| l[b] as usize);
            let rows: Vec<usize> = (0..len)
                .map(|j| self.indices[b * topk + j])
                .filter(|&t| t >= 0)
                .map(|t| {
                    let t = t as usize;
                    self.table[b * mb + t / bs] as usize * bs + t % bs
                })
                .collect();
            for h in 0..h_n {
                let qo = (b * h_n + h) * d;
                let o = &mut out[(b * h_n + h) * vd..(b * h_n + h + 1) * vd];
                if rows.is_empty() {
                    lse[b * h_n + h] = f32::INFINITY;
                    continue;
                }
                let s: Vec<f64> = rows
                    .iter()
                    .map(|&r| {
                        let k = &self.kv[r * d..(r + 1) * d];
                        let dot: f64 = (0..d)
                            .map(|i| f64::from(self.q[qo + i]) * f64::from(k[i]))
                            .sum();
                        dot * f64::from(self.scale)
                    })
                    .collect();
                if s.iter().any(|x| !x.is_finite()) {
                    o.fill(f32::NAN);
                    lse[b * h_n + h] = f32::NAN;
                    continue;
                }
                let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
                let sum: f64 = e.iter().sum();
                let l = m + sum.ln();
                let factor = self
                    .sink
                    .map_or(1.0, |sk| 1.0 / (1.0 + (f64::from(sk[h]) - l).exp()));
                let sp = &mut spread[(b * h_n + h) * vd..(b * h_n + h + 1) * vd];
                for (c, (o, sp)) in o.iter_mut().zip(sp).enumerate() {
                    let (mut acc, mut abs) = (0f64, 0f64);
                    for (&r, &p) in rows.iter().zip(&e) {
                        let x = f64::from(self.kv[r * d + c]);
                        acc += p * x;
                        abs += p * x.abs();
                    }
                    *o = (acc / sum * factor) as f32;
                    *sp = (abs / sum * factor) as f32;
                }
                lse[b * h_n + h] = l as f32;
            }
        }
        (out, lse, spread)
    }
}

/// Dense paged attention: `q [B, H, D]`, caches `[num_blocks, block_size, Hkv, D]`; dims are
/// B, H, Hkv, D, block_size, max_blocks. Returns `out [B, H, D]`, in f64 from the definition,
/// with the non-finite policy of docs/ops.md: a head one of whose scores is not finite has a
/// NaN row; otherwise an element whose V column holds NaN or ±inf is NaN. Also returns each
/// element's spread `sum_j pi_j |v_j|`, the scale of P's rounding error
/// ([`Part::attention_out`]).
#[allow(clippy::too_many_arguments)]
pub fn paged_model_with_spread(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    table: &[i64],
    context_lens: &[i64],
    dims: [usize; 6],
    scale: f32,
) -> (Vec<f32>, Vec<f32>) {
    let [b_n, h_n, hkv, d, bs, mb] = dims;
    let group = h_n / hkv;
    let mut out = vec![0f32; b_n * h_n * d];
    let mut spread = vec![0f32; b_n * h_n * d];
    for b in 0..b_n {
        let slots: Vec<usize> = (0..context_lens[b] as usize)
            .map(|t| table[b * mb + t / bs] as usize * bs + t % bs)
            .collect();
        for h in 0..h_n {
            let kh = h / group;
            let qo = (b * h_n + h) * d;
            let s: Vec<f64> = slots
                .iter()
                .map(|&r| {
                    let ko = (r * hkv + kh) * d;
                    let dot: f64 = (0..d)
                        .map(|i| f64::from(q[qo + i]) * f64::from(k[ko + i]))
                        .sum();
                    dot * f64::from(scale)
                })
                .collect();
            if s.iter().any(|x| !x.is_finite()) {
                out[qo..qo + d].fill(f32::NAN);
                continue;
            }
            let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
            let sum: f64 = e.iter().sum();
            for c in 0..d {
                let column = slots.iter().map(|&r| v[(r * hkv + kh) * d + c]);
                if column.clone().any(|x| !x.is_finite()) {
                    out[qo + c] = f32::NAN;
                    continue;
                }
                let (mut acc, mut abs) = (0f64, 0f64);
                for (x, &p) in column.zip(&e) {
                    acc += p * f64::from(x);
                    abs += p * f64::from(x).abs();
                }
                out[qo + c] = (acc / sum) as f32;
                spread[qo + c] = (abs / sum) as f32;
            }
        }
    }
    (out, spread)
}

/// `reshape_and_cache` on host vectors: `cache` viewed as `[slots, width]`.
pub fn cache_model(cache: &[f32], rows: &[f32], width: usize, slots: &[i64]) -> Vec<f32> {
    let mut c = cache.to_vec();
    for (i, &s) in slots.iter().enumerate() {
        if s >= 0 {
            let s = s as usize;
            c[s * width..(s + 1) * width].copy_from_slice(&rows[i * width..(i + 1) * width]);
        }
    }
    c
}
