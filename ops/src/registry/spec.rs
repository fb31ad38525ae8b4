//! How an op's shape describes itself once ([`OpShape`], written with
//! [`op_shape!`](crate::op_shape)) and how the registry reads it ([`OpSpec`]): the
//! `tileops emit --op` flags and their defaults, `--op list`, the shape table of docs/ops.md.

use super::Launch;
use crate::error::OpError;
use tile_backend::ir::DType;
use tile_backend::kernels::Handoff;

/// One shape parameter of an op: the field name (`v_dim`; its command-line flag is
/// [`Param::flag`], `--v-dim`) and what it means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Param {
    /// The field (and [`OpError::Invalid`] argument) name, snake_case.
    pub name: &'static str,
    /// What the parameter means (one line).
    pub about: &'static str,
}

impl Param {
    /// The flag name, kebab-case (`v_dim` -> `v-dim`).
    pub fn flag(&self) -> String {
        self.name.replace('_', "-")
    }
}

/// The shape of one op's call, described once: its name, its parameters with their defaults
/// (the shape's `Default`), its rules and the launches it makes.
///
/// The rules ([`OpShape::check`]) are the op's one validation path: the launch plan takes a
/// [`Checked`] shape, which only the check makes, and both `tileops emit --op` ([`launches`])
/// and the op's tensor call (`Checked::call`) reach the plan through it. A new op therefore
/// cannot plan a kernel from a shape its rules have not seen.
pub trait OpShape: Default + Clone {
    /// The op's name under `tileops emit --op`.
    const NAME: &'static str;
    /// What the op is (one line).
    const ABOUT: &'static str;
    /// Its parameters, in the order they are applied and listed.
    const PARAMS: &'static [Param];
    /// Sets parameter `name` from its text; the error says what was expected.
    fn set(&mut self, name: &str, value: &str) -> Result<(), String>;
    /// The value of parameter `name` as text (`None`: no such parameter).
    fn get(&self, name: &str) -> Option<String>;
    /// Every rule of the shape, naming the shape parameter it breaks; `path` says who asks
    /// (a tensor call may carry a runtime count of 0 that `emit` refuses).
    fn check(&self, path: CheckPath) -> Result<(), OpError>;
    /// The kernels a checked shape launches on the device, in order; empty only for an op with
    /// no tile kernel yet ([`launches`] then reports [`OpError::NoKernel`]).
    fn plan(shape: &Checked<Self>) -> Vec<Launch>;
}

/// Which path asks an [`OpShape`] to check itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckPath {
    /// `tileops emit --op` and [`launches`]: every runtime count is at least 1.
    Emit,
    /// A tensor call: a count the data decides may be 0 where the op allows it (every index
    /// -1, no query), and the call then launches nothing.
    Tensor,
}

/// A shape its op's [`OpShape::check`] accepted: what every launch plan takes, so that no
/// kernel is planned from an unchecked shape. Made only by [`Checked::emit`] and, for a tensor
/// call, `Checked::call` (crate-private); reads as the shape (`Deref`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checked<S>(S);

impl<S: OpShape> Checked<S> {
    /// `shape` checked for `tileops emit --op` ([`CheckPath::Emit`]).
    ///
    /// # Errors
    /// The first rule `shape` breaks, naming the shape parameter.
    pub fn emit(shape: S) -> Result<Self, OpError> {
        run_check(&shape, CheckPath::Emit)?;
        Ok(Checked(shape))
    }

    /// `shape`, read from the tensors of a call of `op`, checked for that call
    /// ([`CheckPath::Tensor`]): an error names `op` and the tensor argument carrying the
    /// parameter (`args`: parameter -> argument; a parameter not listed keeps its name), the
    /// rule kept.
    pub(crate) fn call(
        shape: S,
        op: &'static str,
        args: &[(&str, &'static str)],
    ) -> Result<Self, OpError> {
        run_check(&shape, CheckPath::Tensor).map_err(|e| as_call_error(e, op, args))?;
        Ok(Checked(shape))
    }
}

/// Runs `shape`'s [`OpShape::check`] for `path`: the one place either path calls it (the crate's
/// tests read what it ran from `CHECKS_RUN`).
fn run_check<S: OpShape>(shape: &S, path: CheckPath) -> Result<(), OpError> {
    #[cfg(test)]
    CHECKS_RUN.with(|c| c.borrow_mut().push((S::NAME, path)));
    shape.check(path)
}

#[cfg(test)]
thread_local! {
    /// The checks [`run_check`] ran on this thread, in order: the op's name and the path.
    pub(super) static CHECKS_RUN: std::cell::RefCell<Vec<(&'static str, CheckPath)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

impl<S> std::ops::Deref for Checked<S> {
    type Target = S;
    fn deref(&self) -> &S {
        &self.0
    }
}

/// An [`OpError::Invalid`] of a shape check, whose argument is a shape parameter (`heads`,
/// `v_dim`), restated for a tensor call of `op`: the parameter is renamed to the tensor
/// argument that carries it (`map`: parameter -> argument; a parameter not listed keeps its
/// name), the rule kept and the parameter named in it. [`Checked::call`] restates the check's
/// errors through it; an op's extra shape rule on a tensor call does too.
pub(crate) fn as_call_error(e: OpError, op: &'static str, map: &[(&str, &'static str)]) -> OpError {
    match e {
        OpError::Invalid { arg, rule, .. } => {
            let to = map.iter().find(|(p, _)| *p == arg).map_or(arg, |(_, a)| *a);
            let rule = if to == arg {
                rule
            } else {
                format!("{rule} (shape parameter `{arg}`)")
            };
            OpError::Invalid { op, arg: to, rule }
        }
        other => other,
    }
}

/// The kernels `shape` launches on the device, in order: the shape's check, then its plan (what
/// `tileops emit --op` writes and what [`crate::Backend::Ascend950`] packages for a call of
/// that shape).
///
/// # Errors
/// The first rule `shape` breaks ([`OpError::Invalid`] naming the shape parameter);
/// [`OpError::NoKernel`] for a shape whose plan launches nothing because its op has no tile
/// kernel for it yet (`lightning_indexer` with FP8 keys).
pub fn launches<S: OpShape>(shape: &S) -> Result<Vec<Launch>, OpError> {
    let plan = S::plan(&Checked::emit(shape.clone())?);
    if plan.is_empty() {
        return Err(OpError::NoKernel {
            op: S::NAME,
            backend: crate::Backend::Ascend950,
            missing: "its shape plans no device launch",
        });
    }
    Ok(plan)
}

/// Why a registered op could not build its launches from named values.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// No parameter of that name.
    #[error("op `{op}` has no parameter `{param}`")]
    Unknown {
        /// The op.
        op: &'static str,
        /// The name given.
        param: String,
    },
    /// A value that does not parse.
    #[error("{param} {value}: {why}")]
    Value {
        /// The parameter.
        param: &'static str,
        /// The text given.
        value: String,
        /// What was expected.
        why: String,
    },
    /// The shape parses but the op refuses it.
    #[error(transparent)]
    Op(#[from] OpError),
}

/// One entry of the registry: an [`OpShape`] seen through plain data and function pointers, so
/// that a `const` list can hold ops of different shape types.
#[derive(Debug, Clone, Copy)]
pub struct OpSpec {
    /// The op's name.
    pub name: &'static str,
    /// What it is.
    pub about: &'static str,
    /// Its parameters.
    pub params: &'static [Param],
    defaults: fn(&str) -> Option<String>,
    build: BuildFn,
}

/// How an [`OpSpec`] builds its launches from named values.
type BuildFn = fn(&[(String, String)]) -> Result<Vec<Launch>, BuildError>;

impl OpSpec {
    /// The entry of shape `S`.
    pub const fn of<S: OpShape>() -> OpSpec {
        OpSpec {
            name: S::NAME,
            about: S::ABOUT,
            params: S::PARAMS,
            defaults: default_of::<S>,
            build: build::<S>,
        }
    }

    /// The default value of parameter `name`, as text.
    pub fn default_of(&self, name: &str) -> Option<String> {
        (self.defaults)(name)
    }

    /// The parameter called `name` (snake_case field or kebab-case flag).
    pub fn param(&self, name: &str) -> Option<&'static Param> {
        let name = name.replace('-', "_");
        self.params.iter().find(|p| p.name == name)
    }

    /// The launches for `values` (parameter name, text): every other parameter keeps its
    /// default. Values are applied in the order of [`OpSpec::params`] (so a preset that resets
    /// the others comes first), whatever their order in `values`.
    pub fn launches(&self, values: &[(String, String)]) -> Result<Vec<Launch>, BuildError> {
        (self.build)(values)
    }
}

fn default_of<S: OpShape>(name: &str) -> Option<String> {
    S::default().get(name)
}

fn build<S: OpShape>(values: &[(String, String)]) -> Result<Vec<Launch>, BuildError> {
    let mut shape = S::default();
    if let Some((name, _)) = values
        .iter()
        .find(|(n, _)| !S::PARAMS.iter().any(|p| p.name == n.replace('-', "_")))
    {
        return Err(BuildError::Unknown {
            op: S::NAME,
            param: name.clone(),
        });
    }
    for p in S::PARAMS {
        for (_, value) in values.iter().filter(|(n, _)| n.replace('-', "_") == p.name) {
            shape.set(p.name, value).map_err(|why| BuildError::Value {
                param: p.name,
                value: value.clone(),
                why,
            })?;
        }
    }
    Ok(launches(&shape)?)
}

/// A shape parameter's value type: parsed from and shown as text.
pub trait ParamValue: Sized {
    /// Parses `s`; the error says what was expected.
    fn parse_param(s: &str) -> Result<Self, String>;
    /// The value as the command line writes it.
    fn show_param(&self) -> String;
}

macro_rules! unsigned_param {
    ($($t:ty),*) => {$(
        impl ParamValue for $t {
            fn parse_param(s: &str) -> Result<Self, String> {
                s.parse().map_err(|_| "expected a non-negative integer".to_string())
            }
            fn show_param(&self) -> String {
                self.to_string()
            }
        }
    )*};
}
unsigned_param!(u64, usize);

impl ParamValue for bool {
    fn parse_param(s: &str) -> Result<Self, String> {
        match s {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err("expected true or false".to_string()),
        }
    }
    fn show_param(&self) -> String {
        self.to_string()
    }
}

impl ParamValue for DType {
    fn parse_param(s: &str) -> Result<Self, String> {
        DType::ALL
            .into_iter()
            .find(|d| d.name() == s.to_ascii_lowercase())
            .ok_or_else(|| "not a dtype (f32, f16, bf16, i8, ...)".to_string())
    }
    fn show_param(&self) -> String {
        self.to_string()
    }
}

impl ParamValue for Handoff {
    fn parse_param(s: &str) -> Result<Self, String> {
        match s {
            "channels" => Ok(Handoff::Channels),
            "cross-flags" => Ok(Handoff::CrossFlags),
            _ => Err("expected one of channels, cross-flags".to_string()),
        }
    }
    fn show_param(&self) -> String {
        match self {
            Handoff::Channels => "channels",
            Handoff::CrossFlags => "cross-flags",
        }
        .to_string()
    }
}
