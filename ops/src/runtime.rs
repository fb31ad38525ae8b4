//! Running compiled tile kernels for an op: the kernel cache, the op's [`Runner`] (which picks
//! the launch target — simulate, profile or write the Ascend 950 package — and hands each launch
//! to [`tile_backend::launch::run`], the one fork between them), and the profiling hook that
//! collects cost reports and hazards of every simulated launch.
//!
//! An op's host code is backend-agnostic: it builds its kernels through [`compiled`] (cached by a
//! specialisation key, so a decode step does not recompile) and launches them on a [`Runner`].

use crate::backend::Backend;
use crate::error::OpError;
use std::any::{Any, TypeId};
use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use tile_backend::arch::{Arch, Sku};
use tile_backend::ir::Kernel;
use tile_backend::launch::{self, Arg, GmTensor, LaunchError, LaunchTarget};
use tile_backend::passes::{compile, Compiled};
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
    kernel: Compiled,
    program: OnceLock<Result<Program<'static, 'static>, SimError>>,
}

impl CompiledKernel {
    /// Keeps `kernel` for the rest of the process.
    fn keep(kernel: Compiled) -> &'static CompiledKernel {
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

/// What determines a kernel: every static parameter its builder reads, as a typed value (an
/// op's plan or kernel configuration, or a tuple naming the kernel and its parameters). Keys of
/// different types never match, whatever their values.
pub trait KernelKey: Hash + Eq + Clone + Send + Sync + 'static {}

impl<T: Hash + Eq + Clone + Send + Sync + 'static> KernelKey for T {}

/// A key as the cache holds it: its op and its value (of any [`KernelKey`] type).
trait StoredKey: Send + Sync {
    /// Whether this is `op`'s key `key` (same type, equal value).
    fn matches(&self, op: &'static str, key: &dyn Any) -> bool;
}

struct Stored<K> {
    op: &'static str,
    key: K,
}

impl<K: KernelKey> StoredKey for Stored<K> {
    fn matches(&self, op: &'static str, key: &dyn Any) -> bool {
        self.op == op && key.downcast_ref::<K>() == Some(&self.key)
    }
}

/// Entries by the hash of (op, key type, key), each bucket's keys compared in full: a lookup
/// hashes the key it is given and allocates nothing.
type Cache = Mutex<HashMap<u64, Vec<(Box<dyn StoredKey>, Entry)>>>;

fn cache() -> &'static Cache {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The bucket of `op`'s key `key`.
fn bucket<K: KernelKey>(op: &'static str, key: &K) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    op.hash(&mut h);
    TypeId::of::<K>().hash(&mut h);
    key.hash(&mut h);
    h.finish()
}

/// The entry of `op`'s key `key`, if the cache has one.
fn find<K: KernelKey>(op: &'static str, key: &K) -> Option<Entry> {
    let h = bucket(op, key);
    let c = cache().lock().ok()?;
    c.get(&h)?
        .iter()
        .find(|(k, _)| k.matches(op, key))
        .map(|(_, e)| *e)
}

/// Keeps `entry` for `op`'s key `key`, unless the cache has one already: the entry kept.
fn keep<K: KernelKey>(op: &'static str, key: &K, entry: Entry) -> Entry {
    let h = bucket(op, key);
    let Ok(mut c) = cache().lock() else {
        return entry;
    };
    let bucket = c.entry(h).or_default();
    // Another thread may have compiled the same key meanwhile: keep one.
    if let Some((_, e)) = bucket.iter().find(|(k, _)| k.matches(op, key)) {
        return *e;
    }
    bucket.push((
        Box::new(Stored {
            op,
            key: key.clone(),
        }),
        entry,
    ));
    entry
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

/// The compiled kernel of `op`'s key `key` (verified, memory planned, syncs inserted), built
/// with `build` and compiled on first use, then shared. `key` must determine the kernel: every
/// static parameter `build` reads belongs in it.
pub fn compiled<K: KernelKey>(
    op: &'static str,
    key: &K,
    build: impl FnOnce() -> Kernel,
) -> Result<&'static CompiledKernel, OpError> {
    if let Some(Entry::Compiled(k)) = find(op, key) {
        return Ok(k);
    }
    let done = CompiledKernel::keep(compile_kernel(op, build)?);
    match keep(op, key, Entry::Compiled(done)) {
        Entry::Compiled(k) => Ok(k),
        // A refusal cached for a kernel that compiled (a build that is not a function of the
        // key): the compiled kernel is the answer.
        Entry::Refused => Ok(done),
    }
}

/// Whether the kernel of `op`'s key `key` compiles: a variant an op prefers where the compiler
/// accepts it (attention's second Q buffer, whose unrolled loop may leave the sync pass without
/// event ids), tried once per key; the compiled kernel, or the refusal, stays in the cache, so
/// the trial costs one compile per shape and a launch of an accepted kernel finds it compiled.
pub(crate) fn compiles<K: KernelKey>(
    op: &'static str,
    key: &K,
    build: impl FnOnce() -> Kernel,
) -> bool {
    if let Some(e) = find(op, key) {
        return matches!(e, Entry::Compiled(_));
    }
    let entry = match compile_kernel(op, build) {
        Ok(k) => Entry::Compiled(CompiledKernel::keep(k)),
        Err(_) => Entry::Refused,
    };
    matches!(keep(op, key, entry), Entry::Compiled(_))
}

/// Whether the cache holds a refusal for `op`'s key `key` ([`compiles`] found that it does not
/// compile).
#[cfg(test)]
pub(crate) fn refused<K: KernelKey>(op: &'static str, key: &K) -> bool {
    matches!(find(op, key), Some(Entry::Refused))
}

/// Builds and compiles a kernel (no cache).
fn compile_kernel(op: &'static str, build: impl FnOnce() -> Kernel) -> Result<Compiled, OpError> {
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

    /// A key finds the kernel compiled before under an equal key of the same type and op (no
    /// build); another value, another type with the same fields, or another op builds its own.
    #[test]
    fn a_key_is_its_type_and_value() {
        let first =
            compiled("t", &("runtime-test/a", 1u64), || empty_kernel("k1")).expect("compiles");
        let again = compiled("t", &("runtime-test/a", 1u64), || -> Kernel {
            panic!("a cached key must not build again")
        })
        .expect("cached");
        assert!(std::ptr::eq(first, again));
        let other =
            compiled("t", &("runtime-test/a", 2u64), || empty_kernel("k2")).expect("compiles");
        assert!(!std::ptr::eq(first, other));
        assert_eq!(other.name, "k2");
        let typed =
            compiled("t", &("runtime-test/a", 1u32), || empty_kernel("k3")).expect("compiles");
        assert_eq!(
            typed.name, "k3",
            "a u32 key is not the u64 key of the same value"
        );
        let op = compiled("u", &("runtime-test/a", 1u64), || empty_kernel("k4")).expect("compiles");
        assert_eq!(op.name, "k4", "another op's equal key is its own");
    }

    /// `compiles` caches a refusal, and a later `compiled` of the same key finds no kernel there:
    /// it compiles (and fails) again rather than handing out nothing.
    #[test]
    fn a_refusal_is_cached_per_key() {
        // A 4 MiB UB tile: the verifier refuses it (the UB holds 240 KiB).
        let bad = || {
            use tile_backend::ir::{DType, Layout, MemSpace, TileType};
            let mut kb = KernelBuilder::new("bad");
            let t = kb.tile(
                "big",
                TileType::new(MemSpace::Vec, DType::F32, 1024, 1024, Layout::ND),
            );
            kb.vector(|v| v.fill(t, 0.0));
            kb.build()
        };
        assert!(!compiles("t", &("runtime-test/refused", 1u64), bad));
        assert!(refused("t", &("runtime-test/refused", 1u64)));
        assert!(!compiles(
            "t",
            &("runtime-test/refused", 1u64),
            || -> Kernel { panic!("a cached refusal must not build again") }
        ));
        assert!(compiles("t", &("runtime-test/refused", 2u64), || {
            empty_kernel("ok")
        }));
        assert!(!refused("t", &("runtime-test/refused", 2u64)));
    }

    /// A cached kernel is lowered for the simulator once: every launch finds the same program.
    #[test]
    fn a_cached_kernel_is_lowered_once() {
        let k =
            compiled("t", &"runtime-test/lowered-once", || empty_kernel("l1")).expect("compiles");
        let p = k.program().expect("lowers");
        let again = k.program().expect("lowers");
        assert!(std::ptr::eq(p, again));
        assert!(std::ptr::eq(p.kernel(), &**k));
    }
}
