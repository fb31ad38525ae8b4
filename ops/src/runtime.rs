//! Running compiled tile kernels for an op: the kernel cache, the op's [`Runner`] (which picks
//! the launch target — simulate, profile or write the Ascend 950 package — and hands each launch
//! to [`tile_backend::launch::run`], the one fork between them), and the profiling hook that
//! collects cost reports and hazards of every simulated launch.
//!
//! An op's host code is backend-agnostic: it builds its kernels through [`compiled`] (cached by a
//! specialisation key, so a decode step does not recompile) and launches them on a [`Runner`].

use crate::backend::Backend;
use crate::error::OpError;
use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use tile_backend::arch::{Arch, Sku};
use tile_backend::ir::Kernel;
use tile_backend::launch::{self, Arg, GmTensor, LaunchError, LaunchTarget};
use tile_backend::passes::compile;
use tile_backend::sim::cost::CostReport;
use tile_backend::sim::{Program, SimError};

/// The environment variable naming the directory the Ascend950 backend writes packages into
/// (default: `<temp dir>/tileops-packages`).
pub const PACKAGE_DIR_ENV: &str = "TILEOPS_PACKAGE_DIR";

/// A cache entry: the compiled kernel, or the compiler's refusal of a kernel an op only prefers
/// ([`compiles`]).
#[derive(Clone, Copy)]
enum Entry {
    Compiled(&'static CompiledKernel),
    Refused,
}

/// A kernel as the cache keeps it: compiled (verified, memory planned, syncs inserted) and, from
/// its first simulated launch on, lowered for the simulator ([`Program`]), so a launch of a
/// cached kernel lowers nothing. Cached kernels live as long as the process (the cache is never
/// emptied), which is what lets the program borrow its kernel. Derefs to the [`Kernel`].
pub struct CompiledKernel {
    kernel: Kernel,
    program: OnceLock<Result<Program<'static, 'static>, SimError>>,
}

impl CompiledKernel {
    /// Keeps `kernel` (compiled) for the rest of the process.
    fn keep(kernel: Kernel) -> &'static CompiledKernel {
        Box::leak(Box::new(CompiledKernel {
            kernel,
            program: OnceLock::new(),
        }))
    }

    /// The kernel lowered for the simulator on the ops' machine ([`arch`]), built on first use.
    pub fn program(&'static self) -> Result<&'static Program<'static, 'static>, SimError> {
        self.program
            .get_or_init(|| Program::lower(&self.kernel, arch()))
            .as_ref()
            .map_err(Clone::clone)
    }
}

impl std::ops::Deref for CompiledKernel {
    type Target = Kernel;
    fn deref(&self) -> &Kernel {
        &self.kernel
    }
}

impl std::fmt::Debug for CompiledKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("CompiledKernel")
            .field(&self.kernel.name)
            .finish()
    }
}

type Cache = Mutex<HashMap<String, Entry>>;

fn cache() -> &'static Cache {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The Ascend 950 machine model every op compiles for.
pub fn arch() -> &'static Arch {
    static ARCH: OnceLock<Arch> = OnceLock::new();
    // `TILEOPS_L2=1` switches on the simulator's L2 model (off by default: its figures are
    // A2/A3-derived; docs/simulator.md, "L2").
    ARCH.get_or_init(|| {
        Arch::ascend950().with_l2(std::env::var_os("TILEOPS_L2").is_some_and(|v| v == "1"))
    })
}

/// Clusters of the Ascend 950 (one block runs on each at a time): the grid an op's launch plan
/// fills on the device.
pub fn device_clusters() -> usize {
    (arch().rates.clusters.value as usize).max(1)
}

/// The compiled kernel for `key` (verified, memory planned, syncs inserted), built with `build`
/// and compiled on first use, then shared. `key` must determine the kernel: every static
/// parameter `build` reads belongs in it.
pub fn compiled(
    op: &'static str,
    key: &str,
    build: impl FnOnce() -> Kernel,
) -> Result<&'static CompiledKernel, OpError> {
    if let Some(Entry::Compiled(k)) = cache().lock().ok().and_then(|c| c.get(key).copied()) {
        return Ok(k);
    }
    let kernel = compile_kernel(op, build)?;
    let Ok(mut c) = cache().lock() else {
        return Ok(CompiledKernel::keep(kernel));
    };
    // Another thread may have compiled the same key meanwhile: keep one.
    if let Some(Entry::Compiled(k)) = c.get(key).copied() {
        return Ok(k);
    }
    let done = CompiledKernel::keep(kernel);
    c.insert(key.to_string(), Entry::Compiled(done));
    Ok(done)
}

/// Whether the kernel of `key` compiles: a variant an op prefers where the compiler accepts it
/// (attention's second Q buffer, whose unrolled loop may leave the sync pass without event
/// ids), tried once per key; the compiled kernel, or the refusal, stays in the cache, so the
/// trial costs one compile per shape and a launch of an accepted kernel finds it compiled.
pub(crate) fn compiles(
    op: &'static str,
    key: impl std::fmt::Display,
    build: impl FnOnce() -> Kernel,
) -> bool {
    with_key_text(key, |key| {
        // A key whose Display failed is not a whole key: try without the cache.
        let Some(key) = key else {
            return compile_kernel(op, build).is_ok();
        };
        match cache().lock().ok().and_then(|c| c.get(key).copied()) {
            Some(Entry::Compiled(_)) => return true,
            Some(Entry::Refused) => return false,
            None => {}
        }
        let entry = match compile_kernel(op, build) {
            Ok(k) => Entry::Compiled(CompiledKernel::keep(k)),
            Err(_) => Entry::Refused,
        };
        let ok = matches!(entry, Entry::Compiled(_));
        if let Ok(mut c) = cache().lock() {
            c.insert(key.to_string(), entry);
        }
        ok
    })
}

/// Runs `f` on the text of `key` written into a buffer this thread reuses (`None` when the
/// key's `Display` failed), so a cache lookup allocates no key string; the buffer is taken out
/// of the thread's slot while in use (an `f` that looked up another key would find the slot
/// empty, not borrowed) and put back after.
fn with_key_text<R>(key: impl std::fmt::Display, f: impl FnOnce(Option<&str>) -> R) -> R {
    thread_local! {
        static KEY: RefCell<String> = const { RefCell::new(String::new()) };
    }
    use std::fmt::Write;
    let mut text = KEY.with(|k| std::mem::take(&mut *k.borrow_mut()));
    text.clear();
    let r = match write!(text, "{key}") {
        Ok(()) => f(Some(&text)),
        Err(_) => f(None),
    };
    KEY.with(|k| *k.borrow_mut() = text);
    r
}

/// Whether the cache holds a refusal for `key` ([`compiles`] found that it does not compile).
#[cfg(test)]
pub(crate) fn refused(key: &str) -> bool {
    cache()
        .lock()
        .ok()
        .is_some_and(|c| matches!(c.get(key), Some(Entry::Refused)))
}

/// [`compiled`] for a key given as anything that writes its text (a plan implementing
/// `Display`, `format_args!`): the text is written into a buffer this thread reuses, so a cache
/// hit (every call of a decode step) allocates no key string.
pub fn compiled_keyed(
    op: &'static str,
    key: impl std::fmt::Display,
    build: impl FnOnce() -> Kernel,
) -> Result<&'static CompiledKernel, OpError> {
    with_key_text(key, |key| match key {
        Some(key) => compiled(op, key, build),
        // A key whose Display failed is not a whole key: compile outside the cache.
        None => compile_kernel(op, build).map(CompiledKernel::keep),
    })
}

/// A kernel cache key written as a prefix and then the `Debug` text of a static shape (every
/// field the kernel reads), for [`compiled_keyed`]: nothing is allocated to look a kernel up.
pub(crate) struct DebugKey<'a, T: std::fmt::Debug>(pub &'static str, pub &'a T);

impl<T: std::fmt::Debug> std::fmt::Display for DebugKey<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{:?}", self.0, self.1)
    }
}

/// Builds and compiles a kernel (no cache).
fn compile_kernel(op: &'static str, build: impl FnOnce() -> Kernel) -> Result<Kernel, OpError> {
    let kernel = build();
    compile(&kernel, arch()).map_err(|source| OpError::Compile {
        op,
        kernel: kernel.name.clone(),
        source,
    })
}

/// What one launch did.
#[derive(Debug, Clone)]
pub struct LaunchRecord {
    /// The op that launched it.
    pub op: &'static str,
    /// The kernel's name.
    pub kernel: String,
    /// Blocks launched.
    pub block_dim: usize,
    /// The estimated Ascend 950 cost (profiled simulator runs).
    pub cost: Option<CostReport>,
    /// Hazards the simulator found (races, lost signals, hangs), one line each (profiled runs).
    pub hazards: Vec<String>,
    /// Files written (Ascend950 backend).
    pub files: Vec<PathBuf>,
}

thread_local! {
    static PROFILE: RefCell<Option<Vec<LaunchRecord>>> = const { RefCell::new(None) };
}

/// Runs `f` with profiling on for this thread: every simulated launch inside it runs traced, and
/// its cost report (Ascend 950PR) and hazard list are returned with `f`'s result. Nested calls
/// collect into the innermost.
pub fn profile<R>(f: impl FnOnce() -> R) -> (R, Vec<LaunchRecord>) {
    let outer = PROFILE.with(|p| p.borrow_mut().replace(Vec::new()));
    let r = f();
    let records = PROFILE.with(|p| {
        let mine = p.borrow_mut().take().unwrap_or_default();
        *p.borrow_mut() = outer;
        mine
    });
    (r, records)
}

fn profiling() -> bool {
    PROFILE.with(|p| p.borrow().is_some())
}

fn record(r: LaunchRecord) {
    PROFILE.with(|p| {
        if let Some(v) = p.borrow_mut().as_mut() {
            v.push(r);
        }
    });
}

enum Mode {
    Sim,
    Package { dir: PathBuf, files: Vec<PathBuf> },
}

/// Launches an op's compiled kernels: simulates them ([`Runner::sim`]) or writes their Ascend
/// 950 package ([`Runner::package`]), for the launch plan of one [`PlanTarget`], fixed when the
/// runner is made ([`Runner::for_backend`]). Call [`Runner::finish`] after the last launch.
pub struct Runner {
    op: &'static str,
    mode: Mode,
    launches: usize,
    plan: PlanTarget,
}

/// The machine an op's launch plan (its grid and its kernels' tiling) is made for. The kernels
/// compute the same thing either way; only the number of blocks, the work per block and the
/// tile sizes change (and with them the summation order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanTarget {
    /// The Ascend 950: a grid for its clusters, and tiles double-buffered, since a block's pipes
    /// run concurrently and the next load overlaps this tile's compute.
    Device,
    /// The simulator's CPU execution: a grid for [`CPU_PLAN_BLOCKS`] concurrent blocks whatever
    /// the host's thread count (so a call gives the same bits on every machine), and, since it
    /// runs a block's instructions one after another, tiles buffered once and so twice as large
    /// (fewer, larger operations).
    Cpu,
}

/// The concurrent blocks the CPU plan sizes its grid for. Fixed, not the host's thread count:
/// the grid decides the top-k splits and so the summation order, and results must not depend
/// on the machine (1, 2 or 16 threads give the same bits; the blocks run in waves on fewer).
pub const CPU_PLAN_BLOCKS: usize = 8;

impl PlanTarget {
    /// How many blocks this target runs at once, which an op's launch plan sizes its grid for:
    /// the device's clusters, or [`CPU_PLAN_BLOCKS`] for the simulator.
    pub fn concurrent_blocks(self) -> usize {
        match self {
            PlanTarget::Cpu => CPU_PLAN_BLOCKS,
            PlanTarget::Device => device_clusters(),
        }
    }

    /// Whether this target runs a block's pipes concurrently (so double buffering pays).
    pub fn pipes_overlap(self) -> bool {
        self == PlanTarget::Device
    }

    /// The plan a call on `backend` runs, chosen here and nowhere else, where the call's backend
    /// is chosen, and passed down to every launch (the runner of the call): the device's for
    /// [`Backend::Ascend950`] (its package is what a device would run), and for
    /// [`Backend::TileSim`] inside [`profile`] (the cost estimate must be the device launch's);
    /// the CPU plan for a plain simulated call (and the Reference, which plans nothing).
    pub fn for_backend(backend: Backend) -> PlanTarget {
        match backend {
            Backend::Ascend950 => PlanTarget::Device,
            Backend::TileSim if profiling() => PlanTarget::Device,
            Backend::TileSim | Backend::Reference => PlanTarget::Cpu,
        }
    }
}

impl Runner {
    /// The runner of a call of `op` on a kernel backend: the simulator for
    /// [`Backend::TileSim`], the package writer (into [`Runner::default_package_dir`]) for
    /// [`Backend::Ascend950`], with the plan [`PlanTarget::for_backend`] chooses.
    pub fn for_backend(op: &'static str, backend: Backend) -> Self {
        match backend {
            Backend::Ascend950 => Runner::package(op, &Runner::default_package_dir(op)),
            _ => Runner::sim(op, PlanTarget::for_backend(backend)),
        }
    }

    /// A runner that simulates every launch (traced when inside [`profile`]) of `plan`'s
    /// launch plans.
    pub fn sim(op: &'static str, plan: PlanTarget) -> Self {
        Runner {
            op,
            mode: Mode::Sim,
            launches: 0,
            plan,
        }
    }

    /// A runner that writes each launch's kernel package under `dir` (`dir/<n>-<kernel>/`),
    /// of the device's plans, and does not run anything; [`Runner::finish`] then reports that
    /// no device is present.
    pub fn package(op: &'static str, dir: &Path) -> Self {
        Runner {
            op,
            mode: Mode::Package {
                dir: dir.to_path_buf(),
                files: Vec::new(),
            },
            launches: 0,
            plan: PlanTarget::Device,
        }
    }

    /// A fresh package directory for one call of `op`:
    /// `$TILEOPS_PACKAGE_DIR/<op>/<pid>-<call>` (default base `<temp dir>/tileops-packages`), so
    /// concurrent calls never overwrite each other's files.
    pub fn default_package_dir(op: &str) -> PathBuf {
        static CALLS: AtomicUsize = AtomicUsize::new(0);
        let call = CALLS.fetch_add(1, Ordering::Relaxed);
        let base = std::env::var_os(PACKAGE_DIR_ENV)
            .map(PathBuf::from)
            .unwrap_or_else(|| std::env::temp_dir().join("tileops-packages"));
        base.join(op).join(format!("{}-{call}", std::process::id()))
    }

    #[cfg(test)]
    /// Makes every launch plan for `target`, whatever the runner does: e.g. run the CPU plan's
    /// kernels traced under [`profile`] to check them for hazards.
    pub fn plan_for(mut self, target: PlanTarget) -> Self {
        self.plan = target;
        self
    }

    /// The machine this runner's launch plans are made for (chosen when it was made).
    pub fn plan_target(&self) -> PlanTarget {
        self.plan
    }

    #[cfg(test)]
    /// How many blocks the plan's target runs at once, which an op's launch plan sizes its grid
    /// for (e.g. how many top-k splits attention uses): the Ascend 950's clusters, or the
    /// simulator's worker threads (see [`PlanTarget`]).
    pub fn concurrent_blocks(&self) -> usize {
        self.plan_target().concurrent_blocks()
    }

    #[cfg(test)]
    /// Whether the plan's target runs a block's pipes concurrently, so that double buffering
    /// overlaps loads with compute (see [`PlanTarget`]).
    pub fn pipes_overlap(&self) -> bool {
        self.plan_target().pipes_overlap()
    }

    #[cfg(test)]
    /// How many kernels this runner has launched so far.
    pub fn launches(&self) -> usize {
        self.launches
    }

    /// True when launches actually run (the outputs are meaningful).
    pub fn executes(&self) -> bool {
        matches!(self.mode, Mode::Sim)
    }

    /// Launches `kernel` (from [`compiled`]) on `block_dim` blocks with `args` (in the kernel's
    /// parameter order); outputs are written into `args`.
    pub fn launch(
        &mut self,
        kernel: &'static CompiledKernel,
        block_dim: usize,
        args: &mut [Arg],
    ) -> Result<(), OpError> {
        let n = self.launches;
        self.launches += 1;
        let op = self.op;
        let sub;
        let target = match &self.mode {
            Mode::Sim if profiling() => LaunchTarget::Profile(Sku::Ascend950PR),
            Mode::Sim => LaunchTarget::Simulate,
            Mode::Package { dir, .. } => {
                sub = dir.join(format!("{n}-{}", kernel.name));
                LaunchTarget::Package(&sub)
            }
        };
        let traced = target != LaunchTarget::Simulate;
        let done = match target {
            LaunchTarget::Package(_) => launch::run(kernel, arch(), block_dim, args, target),
            _ => kernel
                .program()
                .map_err(LaunchError::from)
                .and_then(|p| launch::run_program(p, block_dim, args, target)),
        };
        let done = done.map_err(|e| match e {
            LaunchError::Sim(source) => OpError::Sim {
                op,
                kernel: kernel.name.clone(),
                source,
            },
            LaunchError::Package(e) => OpError::Package {
                op,
                why: e.to_string(),
            },
        })?;
        if let Mode::Package { files, .. } = &mut self.mode {
            files.extend(done.files.iter().cloned());
        }
        if traced {
            record(LaunchRecord {
                op,
                kernel: kernel.name.clone(),
                block_dim,
                cost: done.cost,
                hazards: done.hazards.iter().map(|h| h.to_string()).collect(),
                files: done.files,
            });
        }
        Ok(())
    }

    /// Binds `named` to `kernel`'s parameters by name ([`tile_backend::launch::bind`]: every
    /// parameter exactly once) and launches it as [`Runner::launch`] does; returns the arguments
    /// in parameter order, outputs written in, for [`Runner::take`].
    pub fn launch_named<'a>(
        &mut self,
        kernel: &'static CompiledKernel,
        block_dim: usize,
        named: Vec<(&str, Arg<'a>)>,
    ) -> Result<Vec<Arg<'a>>, OpError> {
        let mut args = launch::bind(kernel, named).map_err(|e| OpError::Internal {
            op: self.op,
            what: e.to_string(),
        })?;
        self.launch(kernel, block_dim, &mut args)?;
        Ok(args)
    }

    /// Takes the tensor bound to `kernel`'s parameter `name` out of `args` (as
    /// [`Runner::launch_named`] returned them).
    pub fn take(
        &self,
        kernel: &Kernel,
        args: &mut [Arg<'_>],
        name: &str,
    ) -> Result<GmTensor, OpError> {
        launch::take_tensor(kernel, args, name).ok_or_else(|| OpError::Internal {
            op: self.op,
            what: format!("kernel argument `{name}` is not a tensor"),
        })
    }

    /// Ends the op's launches: `Ok` after simulation; for the Ascend950 backend, the error saying
    /// where the package is and what is missing to run it.
    pub fn finish(self) -> Result<(), OpError> {
        match self.mode {
            Mode::Sim => Ok(()),
            Mode::Package { dir, .. } => Err(OpError::DeviceUnavailable {
                op: self.op,
                package: dir,
                missing: "no CANN runtime (libascendcl) and no Ascend 950 device are available \
                          to this process; launching through CANN is not implemented yet"
                    .to_string(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tile_backend::dsl::KernelBuilder;

    fn empty_kernel(name: &str) -> Kernel {
        KernelBuilder::new(name.to_string()).build()
    }

    /// A key is its text, whatever type writes it: the same text finds the kernel compiled
    /// before (no build), another text builds its own.
    #[test]
    fn a_key_is_its_text_whatever_writes_it() {
        let first = compiled_keyed("t", format_args!("runtime-test/{}/{}", "a", 1), || {
            empty_kernel("k1")
        })
        .expect("compiles");
        let again = compiled("t", "runtime-test/a/1", || -> Kernel {
            panic!("a cached key must not build again")
        })
        .expect("cached");
        assert!(std::ptr::eq(first, again));
        let other = compiled_keyed("t", format_args!("runtime-test/{}/{}", "a", 2), || {
            empty_kernel("k2")
        })
        .expect("compiles");
        assert!(!std::ptr::eq(first, other));
        assert_eq!(other.name, "k2");
    }

    /// A `DebugKey` is its prefix then the shape's `Debug` text, and finds the kernel cached
    /// under that text.
    #[test]
    fn a_debug_key_is_the_prefix_and_the_debug_text() {
        let shape = (7u64, "x");
        let key = DebugKey("runtime-test/debug ", &shape);
        assert_eq!(key.to_string(), format!("runtime-test/debug {shape:?}"));
        let first = compiled_keyed("t", key, || empty_kernel("d1")).expect("compiles");
        let again = compiled("t", r#"runtime-test/debug (7, "x")"#, || {
            panic!("a cached key must not build again")
        })
        .expect("cached");
        assert!(std::ptr::eq(first, again));
    }

    /// A cached kernel is lowered for the simulator once: every launch finds the same program.
    #[test]
    fn a_cached_kernel_is_lowered_once() {
        let k =
            compiled("t", "runtime-test/lowered-once", || empty_kernel("l1")).expect("compiles");
        let p = k.program().expect("lowers");
        let again = k.program().expect("lowers");
        assert!(std::ptr::eq(p, again));
        assert!(std::ptr::eq(p.kernel(), &**k));
    }
}
