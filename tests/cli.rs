//! The `tileops` binary: `check`, `example` and the default main job, run as a user would.

use std::path::PathBuf;
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
    for op in ["matmul", "attention", "gather-matmul", "worked-matmul"] {
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
    ] {
        assert!(text.contains(needle), "missing {needle}:\n{text}");
    }
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
