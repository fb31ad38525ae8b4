//! Which machine an op call runs on.

use crate::error::OpError;
use std::fmt;
use std::str::FromStr;

/// The environment variable that sets the process default backend.
pub const BACKEND_ENV: &str = "TILEOPS_BACKEND";

/// Where an op's forward pass runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Backend {
    /// Composed from candle tensor ops (f32): the oracle and the speed bar.
    Reference,
    /// The compiled tile program, run by the CPU simulator of the Ascend 950.
    #[default]
    TileSim,
    /// Writes the Ascend 950 kernel package (PTO-ISA C++, launcher, manifest). Launching needs a
    /// CANN runtime and a device; without them the call returns [`OpError::DeviceUnavailable`].
    Ascend950,
}

impl Backend {
    /// The names accepted by [`Backend::from_str`] and `TILEOPS_BACKEND`.
    pub const CHOICES: [&'static str; 3] = ["reference", "sim", "ascend950"];

    /// The process default: `TILEOPS_BACKEND` if set (`reference`, `sim` or `ascend950`),
    /// otherwise [`Backend::TileSim`]. An unknown value is an error listing the choices.
    pub fn from_env() -> Result<Backend, OpError> {
        match std::env::var(BACKEND_ENV) {
            Ok(v) => v.parse(),
            Err(std::env::VarError::NotPresent) => Ok(Backend::default()),
            Err(std::env::VarError::NotUnicode(_)) => Err(OpError::BadBackend {
                value: "<not unicode>".into(),
            }),
        }
    }

    /// The name used by `TILEOPS_BACKEND`.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Reference => "reference",
            Backend::TileSim => "sim",
            Backend::Ascend950 => "ascend950",
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Backend {
    type Err = OpError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "reference" => Ok(Backend::Reference),
            "sim" => Ok(Backend::TileSim),
            "ascend950" => Ok(Backend::Ascend950),
            _ => Err(OpError::BadBackend { value: s.into() }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_choice_and_rejects_others() {
        for c in Backend::CHOICES {
            let b: Backend = c.parse().expect("a listed choice parses");
            assert_eq!(b.name(), c);
        }
        let e = "cuda".parse::<Backend>().expect_err("unknown backend");
        let msg = e.to_string();
        assert!(
            msg.contains("cuda") && msg.contains("reference, sim, ascend950"),
            "{msg}"
        );
    }
}
