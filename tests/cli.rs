//! The `tileops` binary: `check`, `example`, `sim`, `emit` and the default main job, run as a
//! user would.

// The ops crate's test support: its g++ syntax check of emitted PTO-ISA C++ is reused here for
// `tileops emit --op`.
#[allow(unused_macros, clippy::result_large_err)]
#[path = "../ops/tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use tileops::tile_backend::dsl::KernelBuilder;
use tileops::tile_backend::ir::{DType, Layout, MemSpace, TileType};

const BIN: &str = env!("CARGO_BIN_EXE_tileops");

/// A file in the temp dir with a name unique to this process and call, removed on drop.
struct TempFile(PathBuf);

impl TempFile {
    fn new(stem: &str, contents: &str) -> TempFile {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!(
            "tileops-cli-test-{}-{n}-{stem}.json",
            std::process::id()
        ));
        std::fs::write(&path, contents).expect("write temp file");
        TempFile(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn tileops(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run tileops")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A cube program that moves a Vec tile straight into L0A.
fn vec_to_left_json() -> String {
    let mut kb = KernelBuilder::new("vec_to_left");
    let v = kb.tile(
        "v",
        TileType::new(MemSpace::Vec, DType::F16, 16, 16, Layout::NZ),
    );
    let l = kb.tile(
        "l",
        TileType::new(MemSpace::Left, DType::F16, 16, 16, Layout::NZ),
    );
    kb.cube(|c| {
        c.mov(l, v);
    });
    kb.build().to_json()
}

#[test]
fn check_rejects_vec_to_left_naming_the_rule() {
    let file = TempFile::new("vec-to-left", &vec_to_left_json());
    let out = tileops(&["check", file.0.to_str().expect("utf-8 temp path")]);
    let text = stdout(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "stdout:\n{text}\nstderr:\n{}",
        stderr(&out)
    );
    assert!(
        text.contains(
            "move Vec -> Left is not a legal path on Ascend 950: Left is reached only from Mat"
        ),
        "stdout:\n{text}"
    );
    assert!(text.contains("error[move-path]"), "stdout:\n{text}");
    let summary = text.lines().next_back().unwrap_or_default();
    assert!(
        summary.contains("error") && summary.contains("warning"),
        "last line should be the summary, got {summary:?}"
    );
    assert!(!summary.starts_with("0 errors"), "summary: {summary:?}");
}

#[test]
fn check_json_prints_the_report_as_json() {
    let file = TempFile::new("vec-to-left-json", &vec_to_left_json());
    let out = tileops(&["check", "--json", file.0.to_str().expect("utf-8 temp path")]);
    assert_eq!(out.status.code(), Some(1), "stderr:\n{}", stderr(&out));
    let report: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("--json prints valid JSON");
    let diags = report["diagnostics"]
        .as_array()
        .expect("a diagnostics array");
    assert!(
        diags.iter().any(|d| d["rule"] == "MovePath"
            && d["message"]
                .as_str()
                .is_some_and(|m| m.contains("Left is reached only from Mat"))),
        "{report:#}"
    );
}

#[test]
fn example_matmul_checks_clean() {
    let example = tileops(&["example", "matmul"]);
    assert_eq!(
        example.status.code(),
        Some(0),
        "stderr:\n{}",
        stderr(&example)
    );
    let file = TempFile::new("example-matmul", &stdout(&example));
    let out = tileops(&["check", file.0.to_str().expect("utf-8 temp path")]);
    let text = stdout(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{text}\nstderr:\n{}",
        stderr(&out)
    );
    assert_eq!(text.trim(), "0 errors, 0 warnings");
}

#[test]
fn bad_json_exits_2_naming_the_file_and_location() {
    let file = TempFile::new("bad-json", "{\"name\": \"k\",\n  \"target\": ");
    let path = file.0.to_str().expect("utf-8 temp path");
    let out = tileops(&["check", path]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "stderr:\n{err}");
    assert!(err.contains(path), "stderr should name the file:\n{err}");
    assert!(
        err.contains("line 2"),
        "stderr should give the location:\n{err}"
    );
    assert!(out.stdout.is_empty(), "nothing on stdout for bad input");
}

#[test]
fn json_that_is_not_a_kernel_exits_2() {
    let file = TempFile::new("not-a-kernel", "{\"hello\": 1}");
    let path = file.0.to_str().expect("utf-8 temp path");
    let out = tileops(&["check", path]);
    assert_eq!(out.status.code(), Some(2), "stderr:\n{}", stderr(&out));
    assert!(stderr(&out).contains(path));
}

#[test]
fn missing_file_exits_2() {
    let path = std::env::temp_dir().join(format!(
        "tileops-cli-test-{}-does-not-exist.json",
        std::process::id()
    ));
    let path = path.to_str().expect("utf-8 temp path");
    let out = tileops(&["check", path]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "stderr:\n{err}");
    assert!(err.contains(path), "stderr should name the file:\n{err}");
}

#[test]
fn default_run_lists_and_verifies_the_embedded_kernel() {
    let out = tileops(&[]);
    let text = stdout(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{text}\nstderr:\n{}",
        stderr(&out)
    );
    assert!(text.contains("kernel matmul_f16"), "{text}");
    assert!(text.contains("Left<f16, 64x128, NZ>"), "{text}");
    assert!(
        text.contains("matmul acc = a_l0 * b_l0 phase Final"),
        "{text}"
    );
    assert!(text.contains("set_flag MTE2 -> MTE1 event 0"), "{text}");
    assert!(text.contains("\n0 errors, 0 warnings\n"), "{text}");
    // Then it simulates the kernel and prints its estimated Ascend 950 cost.
    assert!(
        text.contains("c f32 [64, 96]") && text.contains("0 non-finite"),
        "{text}"
    );
    assert!(text.contains("estimated time"), "{text}");
}

#[test]
fn sim_runs_an_example_and_writes_a_perfetto_trace() {
    let example = tileops(&["example", "attention"]);
    assert!(example.status.success());
    let file = TempFile::new("attention", &stdout(&example));
    let trace = TempFile::new("attention-trace", "");
    let out = tileops(&[
        "sim",
        file.0.to_str().expect("utf-8 temp path"),
        "--trace",
        trace.0.to_str().expect("utf-8 temp path"),
        "--sku",
        "950DT",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let text = stdout(&out);
    for needle in [
        "hazards: none",
        "outputs:",
        "o f32 [1, 32, 64]",
        "0 non-finite",
        "estimated time",
        "roofline bound",
        "Ascend950DT",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace.0).expect("trace file"))
            .expect("trace is JSON");
    let events = json["traceEvents"].as_array().expect("traceEvents");
    assert!(events.iter().any(|e| e["args"]["name"] == "AIC M"));
    assert!(events
        .iter()
        .any(|e| e["ph"] == "X" && e["name"] == "matmul"));
}

#[test]
fn sim_of_a_kernel_that_does_not_verify_exits_1() {
    let file = TempFile::new("vec-to-left-sim", &vec_to_left_json());
    let out = tileops(&["sim", file.0.to_str().expect("utf-8 temp path")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).contains("does not compile"),
        "{}",
        stdout(&out)
    );
}

// ---------------------------------------------------------------------------------------------
// tileops emit

/// A fresh empty directory under the temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(stem: &str) -> TempDir {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!(
            "tileops-cli-emit-{}-{n}-{stem}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&path);
        TempDir(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("utf-8 temp path")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn emit_file_writes_kernel_launcher_and_manifest() {
    let example = tileops(&["example", "tiled-matmul"]);
    assert_eq!(
        example.status.code(),
        Some(0),
        "stderr:\n{}",
        stderr(&example)
    );
    let file = TempFile::new("emit-tiled", &stdout(&example));
    let dir = TempDir::new("file");
    let out = tileops(&[
        "emit",
        file.0.to_str().expect("utf-8 temp path"),
        "-o",
        dir.path(),
        "--block-dim",
        "4",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        stdout(&out),
        stderr(&out)
    );
    let kernel = std::fs::read_to_string(dir.0.join("matmul_f16.cpp")).expect("kernel written");
    assert!(kernel.contains("extern \"C\" __global__ AICORE void matmul_f16("));
    assert!(kernel.contains("TMATMUL_ACC<AccPhase::Final>"), "{kernel}");
    let launcher =
        std::fs::read_to_string(dir.0.join("matmul_f16_launcher.cpp")).expect("launcher written");
    assert!(
        launcher.contains("constexpr uint32_t block_dim = 4;"),
        "{launcher}"
    );
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.0.join("matmul_f16.json")).expect("manifest written"),
    )
    .expect("manifest is JSON");
    assert_eq!(manifest["block_dim"], 4);
    assert_eq!(manifest["kernel"], "matmul_f16");
    assert!(stdout(&out).contains("matmul_f16.cpp"), "{}", stdout(&out));
}

#[test]
fn emit_file_that_does_not_compile_exits_1() {
    let file = TempFile::new("emit-broken", &vec_to_left_json());
    let dir = TempDir::new("broken");
    let out = tileops(&[
        "emit",
        file.0.to_str().expect("utf-8 temp path"),
        "-o",
        dir.path(),
    ]);
    assert_eq!(out.status.code(), Some(1), "stderr:\n{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("does not compile"), "{text}");
    assert!(text.contains("Left is reached only from Mat"), "{text}");
    assert!(!dir.0.join("vec_to_left.cpp").exists());
}

#[test]
fn emit_op_with_shape_flags() {
    let dir = TempDir::new("op");
    let out = tileops(&[
        "emit",
        "--op",
        "matmul",
        "--m",
        "100",
        "--n=72",
        "--dtype",
        "bf16",
        "-o",
        dir.path(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        stdout(&out),
        stderr(&out)
    );
    let kernel = std::fs::read_to_string(dir.0.join("matmul_bf16.cpp")).expect("kernel written");
    assert!(kernel.contains("TileLeft<bfloat16_t, 64, 64>"), "{kernel}");
    assert!(
        kernel.contains("DYNAMIC"),
        "tails need runtime valid shapes:\n{kernel}"
    );
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.0.join("matmul_bf16.json")).expect("manifest written"),
    )
    .expect("manifest is JSON");
    // ceil(100 / 64) * ceil(72 / 64) output tiles.
    assert_eq!(manifest["block_dim"], 4);
    assert_eq!(manifest["args"][0]["shape"], serde_json::json!([100, 256]));
}

#[test]
fn emit_every_registered_op_with_defaults() {
    // The single-launch ops write their three files straight into DIR.
    for op in [
        "matmul",
        "attention",
        "gather-matmul",
        "worked-matmul",
        "paged-gather",
        "reshape-and-cache",
        "flash-attention",
        "qk-softmax",
    ] {
        let dir = TempDir::new(op);
        let out = tileops(&["emit", "--op", op, "-o", dir.path()]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{op}: stdout:\n{}\nstderr:\n{}",
            stdout(&out),
            stderr(&out)
        );
        let n = std::fs::read_dir(&dir.0).expect("output dir").count();
        assert_eq!(n, 3, "{op}: kernel, launcher and manifest");
    }
    let dir = TempDir::new("attention-cross");
    let out = tileops(&[
        "emit",
        "--op",
        "attention",
        "--dtype",
        "bf16",
        "--handoff",
        "cross-flags",
        "-o",
        dir.path(),
    ]);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{}", stderr(&out));
    assert!(dir.0.join("attention_tile_bf16.cpp").exists());
}

/// `emit --op flash-attention` (MLA prefill shape) and `--op qk-softmax`: the DN-mode kernel's
/// source compiles against the PTO declaration header, and its listing moves S^T to the vector
/// cores with DualModeSplitN (and, for flash attention, P V back with DualModeSplitM).
#[test]
fn emit_flash_ops_syntax_check_with_dual_mode_moves() {
    for (op, flags, file, split_m) in [
        (
            "flash-attention",
            vec![
                "--seq-q",
                "1024",
                "--seq-kv",
                "1024",
                "--head-dim",
                "192",
                "--v-dim",
                "128",
            ],
            "flash_attn_bf16.cpp",
            true,
        ),
        (
            "qk-softmax",
            vec!["--dtype", "f32", "--m", "40"],
            "qk_softmax_f32.cpp",
            false,
        ),
    ] {
        let dir = TempDir::new(op);
        let mut args = vec!["emit", "--op", op];
        args.extend(flags);
        args.extend(["-o", dir.path()]);
        let out = tileops(&args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{op}: stderr:\n{}",
            stderr(&out)
        );
        let path = dir.0.join(file);
        let kernel = std::fs::read_to_string(&path).expect("kernel written");
        assert!(kernel.contains("AccToVecMode::DualModeSplitN"), "{op}");
        assert_eq!(
            kernel.contains("AccToVecMode::DualModeSplitM"),
            split_m,
            "{op}"
        );
        assert!(
            kernel.contains("TCOLMAX") && kernel.contains("TCOLSUM"),
            "{op}"
        );
        support::syntax_check(&path);
    }
}

#[test]
fn emit_op_list_names_ops_and_flags() {
    let out = tileops(&["emit", "--op", "list", "-o", "unused"]);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{}", stderr(&out));
    let text = stdout(&out);
    for needle in [
        "matmul:",
        "attention:",
        "gather-matmul:",
        "--block-size",
        "--tkv",
        "sparse-paged-attention:",
        "paged-attention:",
        "paged-gather:",
        "reshape-and-cache:",
        "--v-dim",
        "--kv-heads",
        "--context-len",
        "--width",
        "DIR/<i>-<kernel>/",
    ] {
        assert!(text.contains(needle), "missing {needle}:\n{text}");
    }
    // Defaults are listed as the builders read them: the DeepSeek decode shape for sparse.
    let sparse = text
        .split("\n\n")
        .find(|s| s.starts_with("sparse-paged-attention:"))
        .expect("a sparse-paged-attention section");
    for needle in [
        "--dtype        q and cache dtype: f32, f16, bf16 [default: bf16]",
        "[default: 576]",
        "[default: 512]",
        "[default: 2048]",
        "[default: 64]",
        "[default: false]",
    ] {
        assert!(sparse.contains(needle), "missing {needle}:\n{sparse}");
    }
    let handoff = text
        .lines()
        .find(|l| l.contains("--handoff"))
        .expect("--handoff listed");
    assert!(handoff.ends_with("[default: channels]"), "{handoff}");
}

#[test]
fn emit_bad_input_exits_2() {
    let dir = TempDir::new("bad");
    for args in [
        vec!["emit", "--op", "nope", "-o", dir.path()],
        vec!["emit", "--op", "matmul", "--q", "3", "-o", dir.path()],
        vec!["emit", "--op", "matmul", "--m", "many", "-o", dir.path()],
        vec!["emit", "--op", "matmul", "--dtype", "f7", "-o", dir.path()],
        vec!["emit", "/nonexistent/kernel.json", "-o", dir.path()],
    ] {
        let out = tileops(&args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: stderr:\n{}",
            stderr(&out)
        );
        assert!(!stderr(&out).is_empty(), "{args:?} explains itself");
    }
    let out = tileops(&["emit", "--op", "matmul", "--q", "3", "-o", dir.path()]);
    assert!(
        stderr(&out).contains("--tile-m"),
        "lists the op's flags:\n{}",
        stderr(&out)
    );
}

#[test]
fn emit_op_that_does_not_compile_exits_1() {
    // 1000 x 1000 tiles do not fit L0A: memory planning fails, so compilation does.
    let dir = TempDir::new("too-big");
    let out = tileops(&[
        "emit",
        "--op",
        "matmul",
        "--tile-m",
        "1024",
        "--tile-k",
        "1024",
        "-o",
        dir.path(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "stdout:\n{}\nstderr:\n{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(
        stdout(&out).contains("does not compile"),
        "{}",
        stdout(&out)
    );
}

// ---------------------------------------------------------------------------------------------
// tileops emit --op for the ops crate's registered ops (tileops_ops::registry)

/// Every file under `dir`, recursively, sorted.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).expect("readable output dir") {
            let p = e.expect("dir entry").path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Runs `tileops emit --op OP ARGS... -o DIR` expecting success, then syntax-checks every
/// emitted C++ file with g++ against the PTO declaration header: kernels with `-D__DAV_CUBE__`
/// and with `-D__DAV_VEC__`, launchers with `-DTILEOPS_SYNTAX_CHECK`. Returns the files written
/// (relative to DIR) and stdout. Every file, the merge kernel's vector section included, must
/// pass.
fn emit_and_syntax_check(op: &str, args: &[&str]) -> (Vec<String>, String) {
    let dir = TempDir::new(op);
    let mut argv = vec!["emit", "--op", op];
    argv.extend_from_slice(args);
    argv.extend_from_slice(&["-o", dir.path()]);
    let out = tileops(&argv);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{argv:?}: stdout:\n{}\nstderr:\n{}",
        stdout(&out),
        stderr(&out)
    );
    let files = files_under(&dir.0);
    let mut cpp = 0;
    for f in &files {
        assert!(
            std::fs::metadata(f).map(|m| m.len()).unwrap_or(0) > 0,
            "{} is empty",
            f.display()
        );
        if f.extension().is_some_and(|e| e == "cpp") {
            cpp += 1;
            support::syntax_check(f);
        }
    }
    assert!(cpp >= 2, "{argv:?}: a kernel and a launcher at least");
    let names = files
        .iter()
        .map(|f| {
            f.strip_prefix(&dir.0)
                .expect("under the output dir")
                .to_string_lossy()
                .replace('\\', "/")
        })
        .collect();
    (names, stdout(&out))
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[test]
fn emit_sparse_paged_attention_passes_the_syntax_check() {
    let (files, _) = emit_and_syntax_check("sparse-paged-attention", &[]);
    assert_eq!(
        files,
        names(&[
            "0-sparse_attn_bf16/sparse_attn_bf16.cpp",
            "0-sparse_attn_bf16/sparse_attn_bf16.json",
            "0-sparse_attn_bf16/sparse_attn_bf16_launcher.cpp",
            "1-attn_merge_bf16/attn_merge_bf16.cpp",
            "1-attn_merge_bf16/attn_merge_bf16.json",
            "1-attn_merge_bf16/attn_merge_bf16_launcher.cpp",
        ])
    );
    // The sink variant of the merge kernel (an extra argument), f16, one row of 16 heads.
    let (files, out) = emit_and_syntax_check(
        "sparse-paged-attention",
        &[
            "--sink", "true", "--dtype", "f16", "--batch", "1", "--heads", "16", "--topk", "300",
        ],
    );
    assert_eq!(files.len(), 6, "{files:?}");
    // One row, 300 tokens in chunks of 128: 3 splits, one chunk each.
    assert!(
        out.contains("(block_dim 3, batch = 1, topk = 300, splits = 3, chunks_per_split = 1)"),
        "{out}"
    );
}

#[test]
fn emit_lightning_indexer_passes_the_syntax_check() {
    // V3.2's decode shape with bf16 keys: scores, segment top-k, and the merge tree's four
    // levels (16 segments a row), one launch each.
    let (files, out) = emit_and_syntax_check("lightning-indexer", &[]);
    let mut want = vec![
        "0-indexer_scores_bf16_h64_d128/indexer_scores_bf16_h64_d128.cpp".to_string(),
        "0-indexer_scores_bf16_h64_d128/indexer_scores_bf16_h64_d128.json".to_string(),
        "0-indexer_scores_bf16_h64_d128/indexer_scores_bf16_h64_d128_launcher.cpp".to_string(),
        "1-indexer_topk_2048/indexer_topk_2048.cpp".to_string(),
        "1-indexer_topk_2048/indexer_topk_2048.json".to_string(),
        "1-indexer_topk_2048/indexer_topk_2048_launcher.cpp".to_string(),
    ];
    for level in 2..6 {
        for file in ["indexer_merge_2048.cpp", "indexer_merge_2048.json"] {
            want.push(format!("{level}-indexer_merge_2048/{file}"));
        }
        want.push(format!(
            "{level}-indexer_merge_2048/indexer_merge_2048_launcher.cpp"
        ));
    }
    let want: Vec<&str> = want.iter().map(String::as_str).collect();
    assert_eq!(files, names(&want));
    assert!(out.contains("srcs = 64, dsts = 32, entries = 32"), "{out}");
    assert!(out.contains("srcs = 8, dsts = 4, entries = 4"), "{out}");
    // f32 q against bf16 keys: q split in three, one more K loop of the scores kernel.
    let (files, _) = emit_and_syntax_check(
        "lightning-indexer",
        &[
            "--dtype",
            "f32",
            "--heads",
            "8",
            "--topk",
            "100",
            "--context-len",
            "700",
        ],
    );
    assert!(
        files
            .iter()
            .any(|f| f.contains("indexer_scores_bf16_h8_d128_q3")),
        "{files:?}"
    );
    // V3.2's FP8 q and keys with ue8m0 scales: e4m3 x e4m3 on the cube, the scales read per
    // block of 64.
    let (files, _) = emit_and_syntax_check(
        "lightning-indexer",
        &[
            "--dtype",
            "f8e4m3",
            "--key-dtype",
            "f8e4m3",
            "--ue8m0",
            "true",
        ],
    );
    assert!(
        files
            .iter()
            .any(|f| f.contains("indexer_scores_f8e4m3_h64_d128_ue8m0_p64")),
        "{files:?}"
    );
}

#[test]
fn emit_paged_attention_passes_the_syntax_check() {
    // B 8 x Hkv 8 work items fill the device without a top-k split: the split kernel writes
    // the result, no merge.
    let (files, _) = emit_and_syntax_check("paged-attention", &[]);
    assert_eq!(
        files,
        names(&[
            "paged_attn_f16.cpp",
            "paged_attn_f16.json",
            "paged_attn_f16_launcher.cpp",
        ])
    );
    // One row: 8 work items split 4 ways, then the merge.
    let (files, _) = emit_and_syntax_check("paged-attention", &["--batch", "1"]);
    assert_eq!(
        files,
        names(&[
            "0-paged_attn_f16/paged_attn_f16.cpp",
            "0-paged_attn_f16/paged_attn_f16.json",
            "0-paged_attn_f16/paged_attn_f16_launcher.cpp",
            "1-attn_merge_f16/attn_merge_f16.cpp",
            "1-attn_merge_f16/attn_merge_f16.json",
            "1-attn_merge_f16/attn_merge_f16_launcher.cpp",
        ])
    );
}

#[test]
fn emit_paged_gather_and_reshape_and_cache_pass_the_syntax_check() {
    let (files, _) = emit_and_syntax_check("paged-gather", &[]);
    assert_eq!(
        files,
        names(&[
            "paged_gather_bf16_576.cpp",
            "paged_gather_bf16_576.json",
            "paged_gather_bf16_576_launcher.cpp",
        ])
    );
    let (files, out) = emit_and_syntax_check(
        "reshape-and-cache",
        &["--dtype", "f32", "--tokens", "5", "--width", "576"],
    );
    assert_eq!(
        files,
        names(&[
            "reshape_and_cache_f32_576.cpp",
            "reshape_and_cache_f32_576.json",
            "reshape_and_cache_f32_576_launcher.cpp",
        ])
    );
    assert!(out.contains("(block_dim 3, n = 5)"), "{out}");
}

/// `emit --op quant-matmul` with tails in M, K and N (K = 300: the last K slice is fill-padded),
/// at the largest tile class used there and the smallest, float and int8 output: every file compiles against the PTO declaration header, whose TFILLPAD
/// on a Mat tile takes NZ only (A5's `TFillPad.hpp`).
#[test]
fn emit_quant_matmul_with_tails_passes_the_syntax_check() {
    // 33 x 300 x 257: 64 x 128 x 512 tiles (the device plan); 3 x 20 x 20: 16 x 32 x 32.
    for (m, k, n) in [("33", "300", "257"), ("3", "20", "20")] {
        for out_dtype in ["bf16", "i8"] {
            let (files, _) = emit_and_syntax_check(
                "quant-matmul",
                &["--out-dtype", out_dtype, "--m", m, "--k", k, "--n", n],
            );
            assert_eq!(files.len(), 3, "{out_dtype} {m}x{k}x{n}: {files:?}");
        }
    }
}

/// Reads DIR/SUB/NAME.json.
fn manifest(dir: &Path, sub: &str, name: &str) -> serde_json::Value {
    let path = dir.join(sub).join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("manifest is JSON")
}

#[test]
fn emit_multi_launch_op_writes_one_directory_per_launch_in_order() {
    let dir = TempDir::new("layout");
    let out = tileops(&["emit", "--op", "sparse-paged-attention", "-o", dir.path()]);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{}", stderr(&out));
    // DIR holds the launch directories only, named <launch index>-<kernel>.
    let mut entries: Vec<String> = std::fs::read_dir(&dir.0)
        .expect("output dir")
        .map(|e| {
            let e = e.expect("dir entry");
            assert!(
                e.path().is_dir(),
                "{} is not a directory",
                e.path().display()
            );
            e.file_name().to_string_lossy().into_owned()
        })
        .collect();
    entries.sort();
    assert_eq!(entries, ["0-sparse_attn_bf16", "1-attn_merge_bf16"]);
    // The DeepSeek decode default: 4 rows x 1 head tile x 8 top-k splits, and 512 rows merged
    // 16 per block.
    let split = manifest(&dir.0, "0-sparse_attn_bf16", "sparse_attn_bf16");
    assert_eq!(split["kernel"], "sparse_attn_bf16");
    assert_eq!(split["block_dim"], 32);
    let merge = manifest(&dir.0, "1-attn_merge_bf16", "attn_merge_bf16");
    assert_eq!(merge["kernel"], "attn_merge_bf16");
    assert_eq!(merge["block_dim"], 32);
    let text = stdout(&out);
    let split_line = text
        .find("emitted `sparse_attn_bf16`")
        .expect("split reported");
    let merge_line = text
        .find("emitted `attn_merge_bf16`")
        .expect("merge reported");
    assert!(split_line < merge_line, "launch order:\n{text}");
    assert!(
        text.contains("splits = 8, chunks_per_split = 2") && text.contains("rows = 512"),
        "the runtime scalars the shape fixes:\n{text}"
    );

    // Dense: 8 rows x 8 KV heads occupy the 32 clusters without splitting the context.
    let dir = TempDir::new("layout-paged");
    let out = tileops(&[
        "emit",
        "--op",
        "paged-attention",
        "--batch",
        "2",
        "--kv-heads",
        "4",
        "--heads",
        "16",
        "--context-len",
        "1000",
        "-o",
        dir.path(),
    ]);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{}", stderr(&out));
    // 2 x 4 = 8 work items want 4 splits of the 8 chunks of 128 tokens.
    let split = manifest(&dir.0, "0-paged_attn_f16", "paged_attn_f16");
    assert_eq!(split["block_dim"], 32);
    let merge = manifest(&dir.0, "1-attn_merge_f16", "attn_merge_f16");
    assert_eq!(merge["block_dim"], 2);
}

#[test]
fn emit_ops_crate_bad_flags_exit_2_naming_the_flag() {
    let dir = TempDir::new("bad-ops");
    for (args, needle) in [
        (
            vec!["--op", "sparse-paged-attention", "--q", "3"],
            "op `sparse-paged-attention` has no flag --q; its flags: --dtype, --batch",
        ),
        (
            vec!["--op", "sparse-paged-attention", "--v-dim", "600"],
            "op `sparse-paged-attention`: --v-dim: must be in 1..=576",
        ),
        (
            vec!["--op", "sparse-paged-attention", "--batch", "0"],
            "op `sparse-paged-attention`: --batch: must be in 1..=2147483647, got 0",
        ),
        (
            vec!["--op", "sparse-paged-attention", "--sink", "maybe"],
            "--sink maybe: expected true or false",
        ),
        (
            vec!["--op", "sparse-paged-attention", "--dtype", "i8"],
            "op `sparse-paged-attention`: --dtype: i8 is not supported: use f32, f16 or bf16",
        ),
        (
            vec!["--op", "paged-attention", "--kv-heads", "3"],
            "op `paged-attention`: --kv-heads: H = 32 must be a multiple of Hkv = 3",
        ),
        (
            vec!["--op", "paged-attention", "--context-len", "0"],
            "--context-len: must be in 1..=",
        ),
        (
            vec!["--op", "paged-gather", "--size", "0"],
            "op `paged-gather`: --size: must be in 1..=",
        ),
        (
            vec!["--op", "paged-gather", "--n", "-4"],
            "--n -4: expected a non-negative integer",
        ),
        (
            vec!["--op", "reshape-and-cache", "--width", "0"],
            "op `reshape-and-cache`: --width: must be in 1..=",
        ),
    ] {
        let mut argv = vec!["emit"];
        argv.extend_from_slice(&args);
        argv.extend_from_slice(&["-o", dir.path()]);
        let out = tileops(&argv);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{argv:?}: stderr:\n{err}");
        assert!(
            err.contains(needle),
            "{argv:?}: expected {needle:?} in:\n{err}"
        );
        assert!(!dir.0.exists(), "{argv:?} wrote files");
    }
}

// ---------------------------------------------------------------------------------------------
// tileops sim: limits and runtime scalars (issue #18 item 9)

/// What each iteration of [`loop_kernel_json`]'s loop does.
#[derive(Clone, Copy)]
enum LoopBody {
    Empty,
    /// One `pipe_barrier(V)`.
    Barrier,
    /// A V -> MTE3 `set_flag` and its `wait_flag`.
    FlagPair,
}

/// A vector program that runs `n` (a runtime scalar) iterations of `body`, with an output
/// `out [rows, 8]` when `rows` is given.
fn loop_kernel_json(name: &str, body: LoopBody, rows: Option<u64>) -> String {
    use tileops::tile_backend::ir::{Expr, Pipe};
    let mut kb = KernelBuilder::new(name);
    let n = kb.scalar("n", DType::I64);
    if let Some(rows) = rows {
        kb.output("out", DType::F32, [Expr::from(rows), Expr::from(8u64)]);
    }
    kb.vector(|v| {
        v.for_range("i", 0i64, Expr::Param(n), 1, |b, _| match body {
            LoopBody::Empty => {}
            LoopBody::Barrier => b.barrier(Pipe::V),
            LoopBody::FlagPair => {
                b.set_flag(Pipe::V, Pipe::Mte3, 0);
                b.wait_flag(Pipe::V, Pipe::Mte3, 0);
            }
        });
    });
    kb.build().to_json()
}

/// Asserts the run exited with `code` and its stdout contains every needle.
fn expect_exit(out: &Output, code: i32, needles: &[&str]) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "{}{}",
        stdout(out),
        stderr(out)
    );
    let text = stdout(out);
    for n in needles {
        assert!(text.contains(n), "missing {n:?} in:\n{text}");
    }
}

fn sim_file(file: &TempFile, extra: &[&str]) -> Output {
    let mut args = vec!["sim", file.0.to_str().expect("utf-8 temp path")];
    args.extend_from_slice(extra);
    tileops(&args)
}

#[test]
fn sim_scalar_sets_a_loop_count_by_name() {
    let file = TempFile::new(
        "loop-barrier",
        &loop_kernel_json("barriers", LoopBody::Barrier, None),
    );
    let ops = |n: &str| -> String {
        let out = sim_file(&file, &["--scalar", &format!("n={n}")]);
        expect_exit(&out, 0, &[]);
        let text = stdout(&out);
        text.lines()
            .find(|l| l.starts_with("simulated"))
            .unwrap_or_default()
            .to_string()
    };
    // One barrier per iteration on each of the two AIVs.
    assert!(ops("3").contains(" 6 ops"), "{}", ops("3"));
    assert!(ops("10").contains(" 20 ops"), "{}", ops("10"));
}

#[test]
fn sim_scalar_errors_name_the_scalar() {
    let file = TempFile::new(
        "loop-scalar",
        &loop_kernel_json("barriers", LoopBody::Barrier, None),
    );
    let out = sim_file(&file, &["--scalar", "m=3"]);
    expect_exit(&out, 1, &["`m`", "its scalars: n"]);
    let out = sim_file(&file, &["--scalar", "n=2.5"]);
    expect_exit(&out, 1, &["not an integer"]);
    let out = sim_file(&file, &["--scalar", "n"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "a malformed flag is a usage error"
    );
    assert!(stderr(&out).contains("NAME=VALUE"), "{}", stderr(&out));
}

#[test]
fn sim_stops_a_runaway_loop_at_the_step_limit() {
    // An empty loop of 10^15 iterations, and 10^12 flag pairs (whose trace would fill memory).
    let runaway = [
        ("empty", LoopBody::Empty, "1000000000000000"),
        ("pairs", LoopBody::FlagPair, "1000000000000"),
    ];
    for (name, body, n) in runaway {
        let file = TempFile::new(name, &loop_kernel_json(name, body, None));
        let n = format!("n={n}");
        let out = sim_file(&file, &["--scalar", &n, "--max-steps", "100000"]);
        expect_exit(&out, 1, &["step limit of 100000"]);
    }
    // Within the limit the same kernel runs.
    let file = TempFile::new("small", &loop_kernel_json("small", LoopBody::Barrier, None));
    let out = sim_file(&file, &["--scalar", "n=100", "--max-steps", "100000"]);
    expect_exit(&out, 0, &["200 ops"]);
}

#[test]
fn sim_refuses_huge_gm_shapes_and_block_dims() {
    let huge = loop_kernel_json("huge", LoopBody::Empty, Some(1u64 << 31));
    let file = TempFile::new("huge-gm", &huge);
    let out = sim_file(&file, &["--scalar", "n=1"]);
    expect_exit(&out, 1, &["`out`", "past the limit"]);
    let file = TempFile::new("blocks", &loop_kernel_json("blocks", LoopBody::Empty, None));
    for bd in ["0", "1000000", "4611686018427387904"] {
        let out = sim_file(&file, &["--block-dim", bd]);
        expect_exit(&out, 1, &["outside 1..=65535"]);
    }
}

#[test]
fn check_rejects_a_tile_whose_byte_size_overflows() {
    // 2^63 rows of f16: the byte size wrapped around to 0 and passed the capacity check.
    let mut kb = KernelBuilder::new("huge_tile");
    let t = kb.tile(
        "t",
        TileType::new(MemSpace::Vec, DType::F16, 1u64 << 63, 16, Layout::ND),
    );
    kb.vector(|v| v.fill(t, 0.0));
    let file = TempFile::new("huge-tile", &kb.build().to_json());
    let out = tileops(&["check", file.0.to_str().expect("utf-8 temp path")]);
    expect_exit(&out, 1, &["capacity"]);
    expect_exit(&sim_file(&file, &[]), 1, &["does not compile"]);
}

// ---------------------------------------------------------------------------------------------
// statically invalid kernels (issue #37 item 10): `check` exits 1 naming the rule, `emit`
// refuses what `check` refuses, a key twice is unreadable

/// `tileops example attention` as JSON, edited by `edit`.
fn edited_attention(edit: impl FnOnce(&mut serde_json::Value)) -> String {
    let out = tileops(&["example", "attention"]);
    assert_eq!(out.status.code(), Some(0));
    let mut k: serde_json::Value = serde_json::from_slice(&out.stdout).expect("example is JSON");
    edit(&mut k);
    k.to_string()
}

#[test]
fn check_and_emit_refuse_statically_invalid_kernels_naming_the_rule() {
    use serde_json::json;
    type Edit = fn(&mut serde_json::Value);
    let cases: [(&str, Edit, &str); 12] = [
        (
            "shape-0",
            |k| k["params"][0]["kind"]["Tensor"]["shape"][1] = json!({"Const": 0}),
            "error[param-shape]",
        ),
        (
            "shape-neg",
            |k| k["params"][0]["kind"]["Tensor"]["shape"][1] = json!({"Const": -64}),
            "error[param-shape]",
        ),
        (
            "rows-2-63",
            |k| k["tiles"][0]["ty"]["rows"] = json!(1u64 << 63),
            "error[tile-range]",
        ),
        (
            "slot-neg",
            |k| k["cube"][0]["Op"]["Load"]["dst"]["slot"] = json!({"Const": -1}),
            "error[tile-slot]",
        ),
        (
            "slot-2-62",
            |k| k["cube"][0]["Op"]["Load"]["dst"]["slot"] = json!({"Const": 1i64 << 62}),
            "error[tile-slot]",
        ),
        (
            "offset-neg",
            |k| k["cube"][0]["Op"]["Load"]["src"]["offset"] = json!({"Const": -8}),
            "error[view-range]",
        ),
        (
            "offset-huge",
            |k| k["cube"][0]["Op"]["Load"]["src"]["offset"] = json!({"Const": 1i64 << 62}),
            "error[view-range]",
        ),
        (
            "stride-neg",
            |k| k["cube"][0]["Op"]["Load"]["src"]["stride"] = json!({"Const": -64}),
            "error[view-range]",
        ),
        (
            "extent-overflow",
            |k| {
                let src = &mut k["cube"][0]["Op"]["Load"]["src"];
                src["offset"] = json!({"Const": 0});
                src["stride"] = json!({"Const": 1i64 << 62});
            },
            "error[view-range]",
        ),
        (
            "div-0",
            |k| {
                k["cube"][0]["Op"]["Load"]["src"]["offset"] =
                    json!({"Bin": ["Div", {"Const": 1}, {"Const": 0}]})
            },
            "error[const-expr]",
        ),
        (
            "mul-overflow",
            |k| {
                k["cube"][0]["Op"]["Load"]["src"]["offset"] =
                    json!({"Bin": ["Mul", {"Const": 1i64 << 62}, {"Const": 4}]})
            },
            "error[const-expr]",
        ),
        (
            "range-empty",
            |k| k["params"][4]["range"] = json!({"min": 1.0, "max": 0.0}),
            "error[param-range]",
        ),
    ];
    for (name, edit, code) in cases {
        let file = TempFile::new(name, &edited_attention(edit));
        let path = file.0.to_str().expect("utf-8 temp path");
        let out = tileops(&["check", path]);
        expect_exit(&out, 1, &[code]);
        let dir = TempDir::new(name);
        let out = tileops(&["emit", path, "-o", dir.path()]);
        expect_exit(&out, 1, &["does not compile", &code["error".len()..]]);
        assert!(!dir.0.exists(), "{name}: emit wrote files");
    }
    // The unedited example passes both.
    let file = TempFile::new("clean", &edited_attention(|_| {}));
    let out = tileops(&["check", file.0.to_str().expect("utf-8 temp path")]);
    expect_exit(&out, 0, &["0 errors"]);
}

#[test]
fn emit_op_with_zero_tokens_exits_2() {
    let dir = TempDir::new("tokens-0");
    let out = tileops(&[
        "emit",
        "--op",
        "gather-matmul",
        "--tokens",
        "0",
        "-o",
        dir.path(),
    ]);
    // A bad shape flag is bad input (exit 2), as for every registered op; it is refused before
    // a kernel is built.
    assert_eq!(out.status.code(), Some(2), "stderr:\n{}", stderr(&out));
    assert!(
        stderr(&out).contains("--tokens: 0 is outside 1..="),
        "stderr:\n{}",
        stderr(&out)
    );
    assert!(!dir.0.exists());
}

#[test]
fn a_json_key_twice_is_unreadable() {
    let clean = edited_attention(|_| {});
    for (from, to) in [
        (r#""name":"#, r#""name":"x","name":"#),
        (r#"{"Const":64}"#, r#"{"Const":64,"Const":65}"#),
    ] {
        assert!(clean.contains(from), "{from}");
        let file = TempFile::new("dup", &clean.replacen(from, to, 1));
        let path = file.0.to_str().expect("utf-8 temp path");
        for args in [vec!["check", path], vec!["sim", path]] {
            let out = tileops(&args);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stdout(&out));
            assert!(stderr(&out).contains("duplicate key"), "{}", stderr(&out));
        }
    }
}

/// The integer literals of a JSON text, as byte ranges (a `-` sign included; digits inside
/// strings, such as kernel names, are skipped).
fn int_literals(json: &str) -> Vec<(usize, usize)> {
    let b = json.as_bytes();
    let (mut out, mut i, mut in_string) = (Vec::new(), 0, false);
    while i < b.len() {
        match b[i] {
            b'"' if i == 0 || b[i - 1] != b'\\' => in_string = !in_string,
            c if !in_string && (c == b'-' || c.is_ascii_digit()) => {
                let start = i;
                i += 1;
                while i < b.len() && (b[i].is_ascii_digit() || b".eE+-".contains(&b[i])) {
                    i += 1;
                }
                if json[start..i].parse::<i64>().is_ok() {
                    out.push((start, i));
                }
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// What a mutation does to a kernel file.
#[derive(Debug, Clone)]
enum Mutation {
    /// Sets integer literal `n % count` to a value.
    SetInt(usize, i64),
    /// Cuts the file at byte `n % len` (not JSON any more, or a kernel missing its end).
    Truncate(usize),
}

fn mutation() -> impl proptest::strategy::Strategy<Value = Mutation> {
    use proptest::prelude::*;
    // Mostly values a field of the file can hold (small, or a power of two), so most files
    // still parse and many still compile and reach the simulator; a few hostile ones.
    let value = prop_oneof![
        6 => 0i64..=300,
        2 => (0u32..17).prop_map(|b| 1i64 << b),
        1 => prop_oneof![Just(-1i64), Just(1 << 31), Just(1 << 40), Just(i64::MAX), Just(i64::MIN)],
    ];
    prop_oneof![
        12 => (any::<usize>(), value).prop_map(|(i, v)| Mutation::SetInt(i, v)),
        1 => any::<usize>().prop_map(Mutation::Truncate),
    ]
}

/// `json` with `mutations` applied in turn.
fn mutated(json: &str, mutations: &[Mutation]) -> String {
    let mut text = json.to_string();
    for m in mutations {
        match m {
            Mutation::SetInt(i, v) => {
                let lits = int_literals(&text);
                if lits.is_empty() {
                    continue;
                }
                let (s, e) = lits[i % lits.len()];
                text.replace_range(s..e, &v.to_string());
            }
            Mutation::Truncate(i) => {
                let mut at = i % text.len().max(1);
                while !text.is_char_boundary(at) {
                    at -= 1;
                }
                text.truncate(at);
            }
        }
    }
    text
}

/// Reference kernel files (as a user would write them: not compiled) with up to three integer
/// literals changed, or cut short, through `tileops sim` on 1 to 3 blocks (256 cases, a fixed
/// seed): every run ends with exit 0, 1 (does not compile, faults, hazards, the step limit) or
/// 2 (not a kernel), never a panic (101) or a signal; and enough of them reach the simulator
/// for that to say something about it.
#[test]
fn sim_of_mutated_kernel_files_exits_with_an_error_never_a_panic() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    use tileops::tile_backend::kernels;
    let mut all = kernels::all();
    all.push(kernels::worked_matmul());
    let files: Vec<String> = all.iter().map(|k| k.to_json()).collect();
    let mut runner = TestRunner::new_with_rng(
        Config::with_cases(256),
        TestRng::deterministic_rng(RngAlgorithm::ChaCha),
    );
    let simulated = std::cell::Cell::new(0usize);
    let cases = (
        0..files.len(),
        proptest::collection::vec(mutation(), 1..4),
        1u64..4,
    );
    let result = runner.run(&cases, |(which, mutations, block_dim)| {
        let file = TempFile::new("mutated", &mutated(&files[which], &mutations));
        let out = sim_file(
            &file,
            &[
                "--block-dim",
                &block_dim.to_string(),
                "--max-steps",
                "300000",
            ],
        );
        let code = out.status.code();
        prop_assert!(
            matches!(code, Some(0..=2)),
            "exit {code:?} for {mutations:?} of kernel {which}\nstderr: {}",
            stderr(&out)
        );
        prop_assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
        let text = stdout(&out) + &stderr(&out);
        if text.contains("simulated `") || text.contains("simulation of `") {
            simulated.set(simulated.get() + 1);
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    assert!(
        simulated.get() >= 16,
        "{} of 256 mutated files reached the simulator",
        simulated.get()
    );
}

/// The mutation helpers find a kernel file's numbers (and only them) and change what they say.
#[test]
fn mutations_change_the_numbers_of_a_kernel_file() {
    let json = r#"{"name": "k2", "v": [12, -3, 4.5], "s": "a1"}"#;
    let lits: Vec<&str> = int_literals(json)
        .iter()
        .map(|&(s, e)| &json[s..e])
        .collect();
    assert_eq!(lits, ["12", "-3"]);
    let once = mutated(json, &[Mutation::SetInt(3, 7)]);
    assert_eq!(once, r#"{"name": "k2", "v": [12, 7, 4.5], "s": "a1"}"#);
    let cut = mutated(json, &[Mutation::Truncate(json.len() + 4)]);
    assert_eq!(cut, &json[..4]);
}
