//! Host speed apart from semantics: which of the host CPU's instruction sets the simulator's
//! fast paths use, decided once per process in this one place.
//!
//! What an instruction does is defined in `sim/exec/<family>.rs`, `sim/tile.rs` and
//! `sim/numeric.rs`; the AVX2 / AVX-512 / VNNI builds of their inner loops (panel GEMMs, the
//! int8 product, strip copies and transposes, panel decodes, exp) are the same arithmetic run
//! faster, and every one of them gives the bits of its portable body. Each dispatch site asks
//! [`host_isa`] which builds it may run instead of detecting CPU features itself, so that the
//! switch `TILEOPS_SIM_ISA` selects the host paths on any machine and each path can be checked
//! against the behaviour digests (`ops/tests/digests.rs`) wherever the tests run.
//!
//! `TILEOPS_SIM_ISA` (read once, on the first dispatch, and cached for the process):
//! - `portable`: no x86 vector builds (the portable bodies only);
//! - `avx2`: AVX, AVX2 and FMA builds (needs a CPU with all three);
//! - `avx512`: the AVX2 builds plus the AVX-512F ones, and the AVX-512 VNNI int8 product where
//!   the CPU also has AVX-512 BW and VNNI (needs AVX-512F, AVX2 and FMA);
//! - unset or empty: the best level this CPU runs.
//!
//! An unknown value, or a level this CPU cannot run, falls back to the best level the CPU runs,
//! with a one-line warning on stderr (a simulator run is never refused for it, and no path the
//! CPU lacks ever runs). Case and surrounding blanks are ignored.

use std::sync::OnceLock;

pub(crate) mod exp;
pub(crate) mod gemm;
pub(crate) mod int8_gemm;
pub(crate) mod transpose;

/// The environment variable that selects the host paths.
pub const ISA_VAR: &str = "TILEOPS_SIM_ISA";

/// A level of host instruction set the simulator's fast paths may use, each including the ones
/// below it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HostIsa {
    /// The portable bodies only.
    Portable,
    /// AVX, AVX2 and FMA builds (x86-64).
    Avx2,
    /// AVX-512F builds beside the AVX2 ones, and the VNNI int8 product where the CPU has
    /// AVX-512 BW and VNNI (x86-64).
    Avx512,
}

/// A CPU feature a host build needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Feature {
    Avx,
    Avx2,
    Fma,
    Avx512f,
    Avx512bw,
    Avx512vnni,
}

/// Whether this CPU has `f` (detected at run time, cached by std): the only place the
/// simulator asks the CPU.
fn cpu_has(f: Feature) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        match f {
            Feature::Avx => std::arch::is_x86_feature_detected!("avx"),
            Feature::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            Feature::Fma => std::arch::is_x86_feature_detected!("fma"),
            Feature::Avx512f => std::arch::is_x86_feature_detected!("avx512f"),
            Feature::Avx512bw => std::arch::is_x86_feature_detected!("avx512bw"),
            Feature::Avx512vnni => std::arch::is_x86_feature_detected!("avx512vnni"),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = f;
        false
    }
}

impl HostIsa {
    /// Every level, lowest first.
    pub const ALL: [HostIsa; 3] = [HostIsa::Portable, HostIsa::Avx2, HostIsa::Avx512];

    /// The switch's spelling of the level.
    pub fn name(self) -> &'static str {
        match self {
            HostIsa::Portable => "portable",
            HostIsa::Avx2 => "avx2",
            HostIsa::Avx512 => "avx512",
        }
    }

    /// The level a switch value names (case and surrounding blanks ignored), if any.
    pub fn parse(value: &str) -> Option<HostIsa> {
        let v = value.trim();
        HostIsa::ALL
            .into_iter()
            .find(|isa| isa.name().eq_ignore_ascii_case(v))
    }

    /// Whether this CPU runs every build of the level.
    pub fn supported(self) -> bool {
        match self {
            HostIsa::Portable => true,
            HostIsa::Avx2 => [Feature::Avx, Feature::Avx2, Feature::Fma]
                .into_iter()
                .all(cpu_has),
            HostIsa::Avx512 => HostIsa::Avx2.supported() && cpu_has(Feature::Avx512f),
        }
    }

    /// The highest level this CPU runs.
    pub fn best() -> HostIsa {
        HostIsa::ALL
            .into_iter()
            .rev()
            .find(|isa| isa.supported())
            .unwrap_or(HostIsa::Portable)
    }

    /// Whether the AVX builds (8 x 8 register transposes) may run: AVX2 level and up.
    pub(crate) fn avx(self) -> bool {
        self >= HostIsa::Avx2
    }

    /// Whether the AVX2 builds (integer and float, with FMA) may run: AVX2 level and up.
    pub(crate) fn avx2_fma(self) -> bool {
        self >= HostIsa::Avx2
    }

    /// Whether the AVX-512F builds may run (the AVX-512 level; it includes AVX2 and FMA).
    pub(crate) fn avx512f(self) -> bool {
        self >= HostIsa::Avx512
    }

    /// Whether the AVX-512 VNNI int8 product may run: the AVX-512 level on a CPU that also has
    /// AVX-512 BW and VNNI.
    pub(crate) fn avx512_vnni(self) -> bool {
        self.avx512f() && cpu_has(Feature::Avx512bw) && cpu_has(Feature::Avx512vnni)
    }
}

impl std::fmt::Display for HostIsa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The level a value of the switch selects on a CPU whose best level is `best` (`supported`
/// tells which levels it runs), and the warning to print when the value is not honoured.
fn resolve(
    value: Option<&str>,
    best: HostIsa,
    supported: impl Fn(HostIsa) -> bool,
) -> (HostIsa, Option<String>) {
    let Some(v) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return (best, None);
    };
    match HostIsa::parse(v) {
        Some(isa) if supported(isa) => (isa, None),
        Some(isa) => (
            best,
            Some(format!(
                "warning: {ISA_VAR}={v}: this CPU cannot run the {isa} paths; using {best}"
            )),
        ),
        None => (
            best,
            Some(format!(
                "warning: {ISA_VAR}={v:?} is not one of avx512, avx2, portable; using {best}"
            )),
        ),
    }
}

/// The level of host paths this process runs: `TILEOPS_SIM_ISA` if this CPU runs it, else the
/// best the CPU runs (see the module docs). Read once and cached; never a level the CPU lacks,
/// which is what makes the dispatch sites' `unsafe` calls of feature-enabled builds sound.
pub fn host_isa() -> HostIsa {
    static ISA: OnceLock<HostIsa> = OnceLock::new();
    *ISA.get_or_init(|| {
        let value = std::env::var(ISA_VAR).ok();
        let (isa, warning) = resolve(value.as_deref(), HostIsa::best(), HostIsa::supported);
        if let Some(w) = warning {
            eprintln!("{w}");
        }
        isa
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_switch_selects_a_level_the_cpu_runs_or_falls_back_with_a_warning() {
        // A pretend CPU that runs AVX2 but not AVX-512.
        let avx2_cpu = |isa: HostIsa| isa <= HostIsa::Avx2;
        let best = HostIsa::Avx2;
        assert_eq!(resolve(None, best, avx2_cpu), (HostIsa::Avx2, None));
        assert_eq!(resolve(Some("  "), best, avx2_cpu), (HostIsa::Avx2, None));
        assert_eq!(
            resolve(Some("portable"), best, avx2_cpu),
            (HostIsa::Portable, None)
        );
        assert_eq!(
            resolve(Some(" AVX2 "), best, avx2_cpu),
            (HostIsa::Avx2, None)
        );
        let (isa, warning) = resolve(Some("avx512"), best, avx2_cpu);
        assert_eq!(isa, HostIsa::Avx2);
        let w = warning.unwrap_or_default();
        assert!(
            w.contains("cannot run the avx512") && !w.contains('\n'),
            "{w}"
        );
        let (isa, warning) = resolve(Some("sse9"), best, avx2_cpu);
        assert_eq!(isa, HostIsa::Avx2);
        let w = warning.unwrap_or_default();
        assert!(
            w.contains("\"sse9\" is not one of") && w.ends_with("using avx2"),
            "{w}"
        );
        // A portable-only CPU (any non-x86 host) never gets a vector level.
        let plain = |isa: HostIsa| isa == HostIsa::Portable;
        for v in ["avx2", "avx512"] {
            let (isa, warning) = resolve(Some(v), HostIsa::Portable, plain);
            assert_eq!(isa, HostIsa::Portable, "{v}");
            assert!(warning.is_some(), "{v}");
        }
    }

    #[test]
    fn the_cached_level_is_one_this_cpu_runs_and_names_round_trip() {
        let isa = host_isa();
        assert!(isa.supported(), "{isa}");
        assert_eq!(host_isa(), isa, "read once");
        assert!(HostIsa::best().supported());
        assert!(HostIsa::Portable.supported());
        for level in HostIsa::ALL {
            assert_eq!(HostIsa::parse(level.name()), Some(level));
            // A level's builds imply the ones below it.
            assert!(!level.avx512f() || level.avx2_fma());
            assert!(!level.avx512_vnni() || level.avx512f());
        }
        assert!(!HostIsa::Portable.avx() && !HostIsa::Portable.avx2_fma());
        match std::env::var(ISA_VAR).ok().and_then(|v| HostIsa::parse(&v)) {
            Some(asked) if asked.supported() => assert_eq!(isa, asked),
            _ => assert_eq!(isa, HostIsa::best()),
        }
        println!("host ISA: {isa} (best on this CPU: {})", HostIsa::best());
    }
}
