//! The `tileops` command line.
//!
//! - `tileops`: a tour of the tile stack on an embedded kernel: builds the worked matmul kernel of
//!   docs/tile-ir.md, prints it as an IR listing, verifies it, simulates it and prints the cost
//!   report. (The project's main job, the DeepSeek-style decode demo, is an example:
//!   `cargo run --release --example deepseek_decode`.)
//! - `tileops check FILE.json [--json]`: verifies a serialized kernel. Exit status 0 when there is
//!   no error, 1 when there are errors, 2 when the file cannot be read or parsed.
//! - `tileops sim FILE.json [--seed N] [--block-dim N] [--sku 950PR|950DT] [--trace out.json]`:
//!   compiles the kernel, runs it in the simulator on seeded inputs within the kernel's declared
//!   argument ranges, prints its outputs and the estimated Ascend 950 cost, and can write a
//!   Chrome/Perfetto trace.
//! - `tileops example NAME`: prints an embedded kernel as JSON, a starting file for `check`/`sim`.
//! - `tileops emit FILE.json -o DIR [--block-dim N]`: compiles a serialized kernel and writes its
//!   PTO-ISA package (kernel source, launcher, manifest) for Ascend 950 (dav-c310).
//! - `tileops emit --op NAME [--FLAG VALUE ...] -o DIR`: the same for a registered op's kernels
//!   built from shape flags (`tileops emit --op list` lists the ops, their flags and defaults).
//!   An op with one launch writes its package into DIR; an op that launches several kernels
//!   (split + merge attention) writes one package per launch into `DIR/<i>-<kernel>/`, `i` the
//!   launch order from 0 (the layout the Ascend950 backend writes), and nothing at all when one
//!   of its kernels does not compile.

use anyhow::{anyhow, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tile_backend::arch::Arch;
use tile_backend::codegen::pto::{emit, LaunchSpec};
use tile_backend::ir::{Kernel, Op};
use tile_backend::sim::io::ScalarValue;
use tile_backend::verify::{verify, Report};
use tileops_ops::registry::{self, BuildError, Launch, OpSpec};
use tileops_ops::OpError;

/// Exit status for a kernel with verifier errors.
const EXIT_ERRORS: u8 = 1;
/// Exit status for an unreadable file or bad JSON (and for usage errors, as clap does).
const EXIT_INPUT: u8 = 2;

#[derive(Parser)]
#[command(
    name = "tileops",
    version,
    about = "Tile kernels for Ascend 950: check, simulate and emit serialized kernels and the \
             registered ops' kernels",
    long_about = "Tile kernels for Ascend 950: check, simulate and emit serialized kernels and the \
                  registered ops' kernels.\n\nWithout a subcommand, builds the worked matmul \
                  kernel of docs/tile-ir.md, lists its IR, verifies it, simulates it and prints \
                  its estimated Ascend 950 cost. The DeepSeek-style decode demo (the project's \
                  main job) is `cargo run --release --example deepseek_decode`."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Verify a serialized kernel (JSON) and print its diagnostics.
    ///
    /// Exit status: 0 when there is no error, 1 when the verifier reports errors, 2 when the file
    /// cannot be read or is not a kernel.
    Check {
        /// The kernel file (as written by `tileops example` or `Kernel::to_json`); `-` reads stdin.
        file: PathBuf,
        /// Print the report as JSON instead of one diagnostic per line.
        #[arg(long)]
        json: bool,
    },
    /// Compile a serialized kernel (verify, plan memory, insert syncs), run it in the simulator on
    /// seeded inputs within its declared argument ranges, and print its outputs and the estimated
    /// Ascend 950 cost.
    ///
    /// Exit status: 0 on success, 1 when the kernel does not compile, the simulation fails or the
    /// run shows hazards (races, lost signals, hangs), 2 when the file cannot be read or is not a
    /// kernel.
    Sim {
        /// The kernel file; `-` reads stdin.
        file: PathBuf,
        /// Seed of the generated inputs.
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Blocks (clusters) to launch, 1..=65535 (others: exit 1).
        #[arg(long, default_value_t = 1)]
        block_dim: u64,
        /// Chip variant whose rates the cost report uses.
        #[arg(long, value_enum, default_value_t = SkuArg::Ascend950PR)]
        sku: SkuArg,
        /// Write a Chrome/Perfetto trace (one track per pipe per core) to this file.
        #[arg(long)]
        trace: Option<PathBuf>,
        /// Set a runtime scalar argument by name (repeatable): `--scalar n=4096 --scalar
        /// scale=0.5`. Loop counts and branches that read it follow. Unset scalars take the low
        /// end of their declared range (1 without one).
        #[arg(long = "scalar", value_name = "NAME=VALUE", value_parser = parse_scalar)]
        scalars: Vec<(String, ScalarValue)>,
        /// Stop the run (exit 1) once it has taken this many steps: statements, ops and loop
        /// iterations, summed over blocks and cores.
        #[arg(long, default_value_t = DEFAULT_MAX_STEPS)]
        max_steps: u64,
    },
    /// Write the PTO-ISA package (kernel .cpp, launcher .cpp, manifest .json) of a kernel for
    /// Ascend 950 (dav-c310): a serialized kernel (`tileops emit k.json -o out`), or a registered
    /// op's kernels built from shape flags (`tileops emit --op matmul --m 128 --dtype bf16 -o
    /// out`; `tileops emit --op list` lists the ops, their flags and defaults). An op that
    /// launches several kernels writes one package per launch into `DIR/<i>-<kernel>/`.
    ///
    /// Exit status: 0 on success, 1 when the kernel does not compile or has no PTO form, 2 for
    /// bad input (unreadable file, unknown op or flag, bad value).
    #[command(allow_hyphen_values = true)]
    Emit {
        /// Output directory (created if missing); required except for `--op list`.
        #[arg(short = 'o', long = "out")]
        out: Option<PathBuf>,
        /// A registered op kernel instead of a file (`list` prints the registry).
        #[arg(long)]
        op: Option<String>,
        /// Blocks to launch a kernel read from a file with (ops know their own).
        #[arg(long)]
        block_dim: Option<u64>,
        /// The kernel file (`-` reads stdin), or, with --op, the op's shape flags
        /// (`--m 128 --dtype f16`, also `--m=128`).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Print an embedded example kernel as JSON (e.g. `tileops example matmul > k.json`).
    Example {
        /// Which kernel.
        #[arg(value_enum)]
        name: Example,
    },
}

/// Chip variants for `--sku`.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum SkuArg {
    /// Ascend 950PR (1.6 TB/s GM).
    #[value(name = "950PR", alias = "950pr")]
    Ascend950PR,
    /// Ascend 950DT (~4 TB/s GM).
    #[value(name = "950DT", alias = "950dt")]
    Ascend950DT,
}

#[derive(Clone, Copy, ValueEnum)]
enum Example {
    /// The worked kernel of docs/tile-ir.md: GM -> Mat -> Left/Right -> Acc -> GM, f16 in, f32 out.
    Matmul,
    /// The tiled, double-buffered matmul (`tile_backend::kernels::matmul`, 4 blocks).
    TiledMatmul,
    /// The one-tile flash-attention core, the 950 way (`tile_backend::kernels::attention_tile`).
    Attention,
    /// Paged gather into L1 feeding Q K^T (`tile_backend::kernels::gather_matmul`).
    GatherMatmul,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(EXIT_INPUT)
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    let code = match cli.command {
        None => main_job(&mut out)?,
        Some(Command::Check { file, json }) => check(&mut out, &file, json)?,
        Some(Command::Sim {
            file,
            seed,
            block_dim,
            sku,
            trace,
            scalars,
            max_steps,
        }) => {
            let kernel = read_kernel(&file)?;
            let req = SimRequest {
                seed,
                block_dim: usize::try_from(block_dim).unwrap_or(usize::MAX),
                sku,
                trace: trace.as_deref(),
                scalars,
                max_steps,
            };
            sim(&mut out, &kernel, &req)?
        }
        Some(Command::Emit {
            out: dir,
            op,
            block_dim,
            args,
        }) => {
            // Options after the file or the first shape flag land in `args`: take them out.
            let (dir, block_dim, rest) = split_emit_options(dir, block_dim, args)?;
            emit_cmd(&mut out, dir.as_deref(), op.as_deref(), block_dim, &rest)?
        }
        Some(Command::Example { name }) => {
            let kernel = match name {
                Example::Matmul => matmul_kernel(),
                Example::TiledMatmul => tile_backend::kernels::matmul(&Default::default()),
                Example::Attention => tile_backend::kernels::attention_tile(&Default::default()),
                Example::GatherMatmul => tile_backend::kernels::gather_matmul(&Default::default()),
            };
            writeln!(out, "{}", kernel.to_json()).context("cannot write to stdout")?;
            ExitCode::SUCCESS
        }
    };
    out.flush().context("cannot write to stdout")?;
    Ok(code)
}

/// `tileops` without a subcommand: build, list, verify and simulate the worked matmul kernel,
/// with its estimated Ascend 950 cost.
fn main_job(out: &mut impl Write) -> Result<ExitCode> {
    let kernel = matmul_kernel();
    let report = verify(&kernel);
    let mut text = String::new();
    let _ = writeln!(
        text,
        "tileops {}: the worked matmul kernel of docs/tile-ir.md, built, verified and simulated\n\
         (the DeepSeek-style decode demo: cargo run --release --example deepseek_decode)\n",
        env!("CARGO_PKG_VERSION")
    );
    text.push_str(&listing(&kernel));
    let _ = writeln!(text, "\nverify ({}):", kernel.target);
    text.push_str(&report_text(&report));
    out.write_all(text.as_bytes())
        .context("cannot write to stdout")?;
    if !report.is_ok() {
        return Ok(exit_for(&report));
    }
    writeln!(out, "\nsimulate (inputs seeded with 42):").context("cannot write to stdout")?;
    let req = SimRequest {
        seed: 42,
        block_dim: 1,
        sku: SkuArg::Ascend950PR,
        trace: None,
        scalars: Vec::new(),
        max_steps: DEFAULT_MAX_STEPS,
    };
    sim(out, &kernel, &req)
}

/// `tileops check FILE`.
fn check(out: &mut impl Write, file: &Path, json: bool) -> Result<ExitCode> {
    let kernel = read_kernel(file)?;
    let report = verify(&kernel);
    let text = if json {
        let mut s = serde_json::to_string_pretty(&report).context("cannot serialize the report")?;
        s.push('\n');
        s
    } else {
        report_text(&report)
    };
    out.write_all(text.as_bytes())
        .context("cannot write to stdout")?;
    Ok(exit_for(&report))
}

/// Most blocks `tileops sim --block-dim` launches (a CANN launch takes at most 65535).
const MAX_BLOCK_DIM: u64 = 65535;
/// `tileops sim --max-steps` by default: enough for every kernel the ops build at real shapes,
/// small enough that a runaway loop stops within seconds, before its trace fills memory.
const DEFAULT_MAX_STEPS: u64 = 20_000_000;

/// `--scalar NAME=VALUE`: an integer, else a float.
fn parse_scalar(s: &str) -> std::result::Result<(String, ScalarValue), String> {
    let (name, value) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}` is not NAME=VALUE"))?;
    let name = name.trim();
    if name.is_empty() {
        return Err(format!("`{s}` has no name before `=`"));
    }
    let value = value.trim();
    let v = match value.parse::<i64>() {
        Ok(i) => ScalarValue::Int(i),
        Err(_) => match value.parse::<f64>() {
            Ok(f) if f.is_finite() => ScalarValue::Float(f),
            _ => return Err(format!("`{value}` is not a finite number")),
        },
    };
    Ok((name.to_string(), v))
}

/// Prints why `tileops sim` stops and returns its exit status (1).
fn refuse(out: &mut impl Write, why: &str) -> Result<ExitCode> {
    writeln!(out, "{why}").context("cannot write to stdout")?;
    Ok(ExitCode::from(EXIT_ERRORS))
}

/// What `tileops sim` was asked to do, besides the kernel.
struct SimRequest<'a> {
    seed: u64,
    block_dim: usize,
    sku: SkuArg,
    trace: Option<&'a Path>,
    scalars: Vec<(String, ScalarValue)>,
    max_steps: u64,
}

/// `tileops sim FILE`: compile, simulate on seeded inputs, print outputs and the cost report.
fn sim(out: &mut impl Write, kernel: &Kernel, req: &SimRequest<'_>) -> Result<ExitCode> {
    use tile_backend::arch::Sku;
    use tile_backend::sim::{self, cost, io, perfetto, timeline, RunLimits, SimOptions};
    let (seed, block_dim, trace_file) = (req.seed, req.block_dim, req.trace);
    let sku = req.sku;
    if block_dim == 0 || block_dim as u64 > MAX_BLOCK_DIM {
        return refuse(
            out,
            &format!(
                "--block-dim {block_dim} is outside 1..={MAX_BLOCK_DIM} (a launch takes at most {MAX_BLOCK_DIM} blocks)"
            ),
        );
    }
    let sku = match sku {
        SkuArg::Ascend950PR => Sku::Ascend950PR,
        SkuArg::Ascend950DT => Sku::Ascend950DT,
    };
    let arch = Arch::ascend950_sku(sku);
    let mut text = String::new();
    let compiled = match tile_backend::passes::compile(kernel, &arch) {
        Ok(k) => k,
        Err(e) => {
            return refuse(
                out,
                &format!("kernel `{}` does not compile: {e}", kernel.name),
            )
        }
    };
    let gen = io::GenOptions {
        scalars: req.scalars.clone(),
        ..io::GenOptions::default()
    };
    let mut args = match io::generate_with(&compiled, seed, &gen) {
        Ok(a) => a,
        Err(e) => {
            return refuse(
                out,
                &format!("cannot make the arguments of `{}`: {e}", kernel.name),
            )
        }
    };
    let limits = RunLimits {
        max_steps: Some(req.max_steps),
    };
    let (summary, trace) = match sim::run_traced_limited(
        &compiled,
        &arch,
        &mut args,
        SimOptions {
            block_dim: block_dim.max(1),
        },
        limits,
    ) {
        Ok(r) => r,
        Err(e) => return refuse(out, &format!("simulation of `{}` failed: {e}", kernel.name)),
    };
    let _ = writeln!(
        text,
        "simulated `{}`: {} block(s), {} ops, inputs seeded with {seed}",
        kernel.name, summary.blocks, summary.ops_executed
    );
    let _ = writeln!(text, "outputs:");
    for o in io::output_stats(&compiled, &args) {
        let _ = writeln!(
            text,
            "  {} {} {:?}: min {:.6} max {:.6} mean {:.6}, {} non-finite, checksum {:016x}",
            o.name, o.dtype, o.shape, o.min, o.max, o.mean, o.non_finite, o.checksum
        );
    }
    let hazards = sim::hazards::check(&compiled, &trace);
    if hazards.is_empty() {
        let _ = writeln!(
            text,
            "hazards: none (races, lost signals, unmatched waits, phases, shared lines)"
        );
    } else {
        let _ = writeln!(text, "hazards: {}", hazards.len());
        for h in &hazards {
            let _ = writeln!(text, "  {h}");
        }
    }
    let tls = timeline::timelines(&compiled, &arch, &trace, summary.blocks);
    let report = cost::report_from(&compiled, &arch, sku, &trace, &tls, summary.blocks);
    let _ = writeln!(text, "\n{report}");
    if let Some(path) = trace_file {
        let json = perfetto::chrome_trace(&trace, &tls, arch.rates.clock_ghz.value);
        let body = serde_json::to_string(&json).context("cannot serialize the trace")?;
        std::fs::write(path, body)
            .with_context(|| format!("cannot write the trace to {}", path.display()))?;
        let _ = writeln!(
            text,
            "trace written to {} (open it at ui.perfetto.dev)",
            path.display()
        );
    }
    out.write_all(text.as_bytes())
        .context("cannot write to stdout")?;
    Ok(if hazards.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_ERRORS)
    })
}

fn read_kernel(file: &Path) -> Result<Kernel> {
    let text = if file == Path::new("-") {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("cannot read the kernel from stdin")?;
        s
    } else {
        std::fs::read_to_string(file)
            .with_context(|| format!("cannot read kernel file {}", file.display()))?
    };
    Kernel::from_json(&text).map_err(|e| {
        anyhow!(
            "{} is not a valid tileops kernel (JSON error at line {}, column {}): {e}",
            file.display(),
            e.line(),
            e.column()
        )
    })
}

/// Every diagnostic on its own line, then the summary line.
fn report_text(report: &Report) -> String {
    let mut s = String::new();
    for d in &report.diagnostics {
        let _ = writeln!(s, "{d}");
    }
    let (errors, warnings) = (report.errors().count(), report.warnings().count());
    let _ = writeln!(
        s,
        "{errors} error{}, {warnings} warning{}",
        plural(errors),
        plural(warnings)
    );
    s
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn exit_for(report: &Report) -> ExitCode {
    if report.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_ERRORS)
    }
}

// ---------------------------------------------------------------------------------------------
// emit

/// Takes `-o DIR` / `--out DIR` / `--out=DIR` and `--block-dim N` out of the trailing arguments
/// of `emit` (clap hands everything after the first positional or unknown flag to `args`).
fn split_emit_options(
    mut dir: Option<PathBuf>,
    mut block_dim: Option<u64>,
    args: Vec<String>,
) -> Result<(Option<PathBuf>, Option<u64>, Vec<String>)> {
    let mut rest = Vec::new();
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let (key, inline) = match a.split_once('=') {
            Some((k, v)) if k.starts_with("--") => (k.to_string(), Some(v.to_string())),
            _ => (a.clone(), None),
        };
        match key.as_str() {
            "-o" | "--out" | "--block-dim" => {
                let value = match inline {
                    Some(v) => v,
                    None => it.next().ok_or_else(|| anyhow!("{key} needs a value"))?,
                };
                if key == "--block-dim" {
                    let n = value
                        .parse()
                        .map_err(|_| anyhow!("--block-dim {value}: expected a positive integer"))?;
                    if block_dim.replace(n).is_some() {
                        return Err(anyhow!("--block-dim is given twice"));
                    }
                } else if dir.replace(PathBuf::from(value)).is_some() {
                    return Err(anyhow!("-o/--out is given twice"));
                }
            }
            _ => rest.push(a),
        }
    }
    Ok((dir, block_dim, rest))
}

/// `tileops emit`: compile and write PTO-ISA packages.
fn emit_cmd(
    out: &mut impl Write,
    dir: Option<&Path>,
    op: Option<&str>,
    block_dim: Option<u64>,
    args: &[String],
) -> Result<ExitCode> {
    let arch = Arch::ascend950();
    if op == Some("list") {
        out.write_all(op_list().as_bytes())
            .context("cannot write to stdout")?;
        return Ok(ExitCode::SUCCESS);
    }
    let dir = dir.ok_or_else(|| anyhow!("emit needs an output directory: -o DIR"))?;
    let (launches, many) = match op {
        Some(name) => {
            if block_dim.is_some() {
                return Err(anyhow!(
                    "--block-dim applies to kernel files; op `{name}` knows its launches"
                ));
            }
            let entry = registry::find_op(name).ok_or_else(|| {
                anyhow!(
                    "unknown op `{name}`; registered ops: {}",
                    registry::OPS
                        .iter()
                        .map(|e| e.name)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })?;
            let values = op_flags(entry, args)?;
            let launches = entry
                .launches(&values)
                .map_err(|e| build_error(entry.name, e))?;
            let many = launches.len() > 1;
            (launches, many)
        }
        None => {
            let [file] = args else {
                return Err(anyhow!(
                    "emit takes one kernel file (or --op NAME with shape flags), got {} argument(s)",
                    args.len()
                ));
            };
            let kernel = read_kernel(Path::new(file))?;
            (vec![Launch::new(kernel, block_dim.unwrap_or(1))], false)
        }
    };
    // Compile and emit every launch before writing anything: an op whose second kernel fails
    // leaves no half-written package behind.
    let mut text = String::new();
    let mut packages = Vec::with_capacity(launches.len());
    for Launch {
        kernel,
        block_dim: blocks,
        ..
    } in &launches
    {
        let compiled = match tile_backend::passes::compile(kernel, &arch) {
            Ok(k) => k,
            Err(e) => {
                let _ = writeln!(text, "kernel `{}` does not compile: {e}", kernel.name);
                out.write_all(text.as_bytes())
                    .context("cannot write to stdout")?;
                return Ok(ExitCode::from(EXIT_ERRORS));
            }
        };
        let package = match emit(&compiled, &arch, &LaunchSpec::new(*blocks)) {
            Ok(p) => p,
            Err(e) => {
                let _ = writeln!(text, "kernel `{}` cannot be emitted: {e}", kernel.name);
                out.write_all(text.as_bytes())
                    .context("cannot write to stdout")?;
                return Ok(ExitCode::from(EXIT_ERRORS));
            }
        };
        packages.push(package);
    }
    for (i, (package, launch)) in packages.iter().zip(&launches).enumerate() {
        let target = if many {
            dir.join(launch_dir(i, &package.name))
        } else {
            dir.to_path_buf()
        };
        let files = package
            .write_to(&target)
            .with_context(|| format!("cannot write the package of `{}`", package.name))?;
        let scalars: String = launch
            .scalars
            .iter()
            .map(|(name, v)| format!(", {name} = {v}"))
            .collect();
        let _ = writeln!(
            text,
            "emitted `{}` for {} (block_dim {}{scalars}):",
            package.name, arch.compiler_target, launch.block_dim
        );
        for f in files {
            let _ = writeln!(text, "  {}", f.display());
        }
    }
    out.write_all(text.as_bytes())
        .context("cannot write to stdout")?;
    Ok(ExitCode::SUCCESS)
}

/// The subdirectory of launch `i` (from 0) of a multi-launch op: `<i>-<kernel>`, as the
/// Ascend950 backend names them (the ops crate's `Runner::package`), so the order is in the
/// name and two launches of one kernel never share a directory.
fn launch_dir(i: usize, kernel: &str) -> String {
    format!("{i}-{kernel}")
}

/// A build error of a registered op as the command line reports it: the flag (`--v-dim` for
/// the argument `v_dim`) and the rule.
fn build_error(op: &str, e: BuildError) -> anyhow::Error {
    match e {
        BuildError::Op(OpError::Invalid { arg, rule, .. }) => {
            anyhow!("op `{op}`: --{}: {rule}", arg.replace('_', "-"))
        }
        BuildError::Op(other) => anyhow!("op `{op}`: {other}"),
        BuildError::Value { param, value, why } => {
            anyhow!("--{} {value}: {why} (op `{op}`)", param.replace('_', "-"))
        }
        BuildError::Unknown { param, .. } => anyhow!("op `{op}` has no flag --{param}"),
    }
}

/// `tileops emit --op list`: every registered op with its flags and their defaults.
fn op_list() -> String {
    let mut s = String::from(
        "ops for `tileops emit --op NAME [--FLAG VALUE ...] -o DIR` (an op with several \
         launches writes DIR/<i>-<kernel>/ per launch):\n",
    );
    for e in registry::OPS {
        let _ = writeln!(s, "\n{}: {}", e.name, e.about);
        for p in e.params {
            let flag = p.flag();
            match e.default_of(p.name) {
                Some(d) => {
                    let _ = writeln!(s, "  --{flag:<12} {} [default: {d}]", p.about);
                }
                None => {
                    let _ = writeln!(s, "  --{flag:<12} {}", p.about);
                }
            }
        }
    }
    s
}

/// The `--FLAG VALUE` (or `--FLAG=VALUE`) pairs given to op `entry`, each a flag it has, none
/// twice.
fn op_flags(entry: &OpSpec, args: &[String]) -> Result<Vec<(String, String)>> {
    let mut values: Vec<(String, String)> = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let Some(flag) = a.strip_prefix("--") else {
            return Err(anyhow!(
                "op `{}` takes --FLAG VALUE pairs, got `{a}`",
                entry.name
            ));
        };
        let (key, value) = match flag.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => {
                let v = it.next().ok_or_else(|| anyhow!("--{flag} needs a value"))?;
                (flag.to_string(), v.clone())
            }
        };
        if entry.params.iter().all(|p| p.flag() != key) {
            let known: Vec<String> = entry
                .params
                .iter()
                .map(|p| format!("--{}", p.flag()))
                .collect();
            return Err(anyhow!(
                "op `{}` has no flag --{key}; its flags: {}",
                entry.name,
                if known.is_empty() {
                    "(none)".to_string()
                } else {
                    known.join(", ")
                }
            ));
        }
        if values.iter().any(|(k, _)| *k == key) {
            return Err(anyhow!("--{key} is given twice"));
        }
        values.push((key, value));
    }
    Ok(values)
}

/// The worked kernel of docs/tile-ir.md (`tile_backend::kernels::worked_matmul`).
fn matmul_kernel() -> Kernel {
    tile_backend::kernels::worked_matmul()
}

// ---------------------------------------------------------------------------------------------
// IR listing

/// The kernel's listing (`Kernel::listing`), each op with the pipe it runs on.
fn listing(kernel: &Kernel) -> String {
    let arch = Arch::for_target(kernel.target);
    let pipe_of = |op: &Op| arch.pipe_of(op, &|r| kernel.space_of(r));
    kernel.listing(&pipe_of).to_string()
}
