//! The launch ABI and the launch itself: the host tensors a kernel is launched with
//! ([`GmTensor`] owned, [`GmInput`] borrowed read-only, [`GmInOut`] borrowed read-write) and its
//! arguments ([`Arg`], bound to the kernel's parameters by name with [`bind`] and read back
//! with [`take_tensor`]), shared by the simulator (`crate::sim`), the package writer and the
//! ops; and [`run`], the one fork between simulating a kernel (plainly or profiled) and writing
//! its Ascend 950 package ([`LaunchTarget`]).

mod target;

pub use target::{run, run_program, LaunchError, LaunchTarget, Launched};

use crate::ir::DType;
use crate::sim::numeric;

/// A GM tensor argument: dtype, shape and little-endian bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct GmTensor {
    /// Element type.
    pub dtype: DType,
    /// Dimensions.
    pub shape: Vec<usize>,
    /// `product(shape) * size_of(dtype)` bytes.
    pub data: Vec<u8>,
}

impl GmTensor {
    /// A zero-filled tensor.
    pub fn zeros(dtype: DType, shape: &[usize]) -> Self {
        let n: usize = shape.iter().product();
        GmTensor {
            dtype,
            shape: shape.to_vec(),
            data: vec![0; n * dtype.size_bytes() as usize],
        }
    }

    /// A tensor from f32 values, encoded (rounded) to `dtype`.
    pub fn from_f32(dtype: DType, shape: &[usize], values: &[f32]) -> Self {
        let mut t = GmTensor::zeros(dtype, shape);
        numeric::encode_f32(dtype, values, &mut t.data);
        t
    }

    /// A tensor from integer values, encoded (saturated) to `dtype`.
    pub fn from_i64(dtype: DType, shape: &[usize], values: &[i64]) -> Self {
        let mut t = GmTensor::zeros(dtype, shape);
        let es = dtype.size_bytes() as usize;
        for (v, b) in values.iter().zip(t.data.chunks_exact_mut(es)) {
            numeric::encode_i64(dtype, *v, b);
        }
        t
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// True when the tensor has no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// This tensor as a borrowed read-only kernel input ([`Arg::Input`]: not copied).
    pub fn as_input(&self) -> GmInput<'_> {
        GmInput {
            dtype: self.dtype,
            shape: self.shape.clone(),
            data: &self.data,
        }
    }

    /// This tensor as a borrowed kernel argument the kernel may read and write in place
    /// ([`Arg::InOut`]: not copied; its writes land in `self.data`).
    pub fn as_inout(&mut self) -> GmInOut<'_> {
        GmInOut {
            dtype: self.dtype,
            shape: self.shape.clone(),
            data: &mut self.data,
        }
    }

    /// The elements decoded to f32.
    pub fn to_f32(&self) -> Vec<f32> {
        let mut out = vec![0.0; self.len()];
        numeric::decode_f32(self.dtype, &self.data, &mut out);
        out
    }

    /// The elements decoded as integers.
    pub fn to_i64(&self) -> Vec<i64> {
        let es = self.dtype.size_bytes() as usize;
        self.data
            .chunks_exact(es)
            .map(|b| numeric::decode_i64(self.dtype, b))
            .collect()
    }
}

/// A read-only GM tensor borrowed from the caller: the simulator reads its bytes in place, so
/// a large input (a KV cache) is not copied per launch. A kernel may not write it.
#[derive(Debug, Clone, PartialEq)]
pub struct GmInput<'a> {
    /// Element type.
    pub dtype: DType,
    /// Dimensions.
    pub shape: Vec<usize>,
    /// `product(shape) * size_of(dtype)` little-endian bytes.
    pub data: &'a [u8],
}

/// A GM tensor borrowed mutably from the caller: the simulator reads its bytes in place and
/// merges the kernel's writes (and atomic adds) straight into them, so a large tensor updated
/// in place (a KV cache) is neither copied in nor copied back per launch. It behaves exactly like
/// an owned [`Arg::Tensor`] (same reads, writes, races and hazards); it may bind an input or an
/// output parameter.
#[derive(Debug, PartialEq)]
pub struct GmInOut<'a> {
    /// Element type.
    pub dtype: DType,
    /// Dimensions (the kernel's view: any shape of the right element count may be given).
    pub shape: Vec<usize>,
    /// `product(shape) * size_of(dtype)` little-endian bytes, read and written in place.
    pub data: &'a mut [u8],
}

/// A result tensor whose bytes the caller has not initialised (the spare capacity of the
/// vector a result tensor will own): the kernel writes it in place, so the result is neither
/// zero-filled first nor copied after. It may bind only a parameter the kernel writes with plain
/// stores and never reads (a write-only output: docs/simulator.md); a launch that returns `Ok`
/// leaves every byte initialised, those the kernel did not write as zero (exactly what a
/// zero-filled [`GmInOut`] would hold), and turns the argument into that [`Arg::InOut`]. After
/// an `Err`, the bytes may be partly uninitialised.
pub struct GmOutput<'a> {
    /// Element type.
    pub dtype: DType,
    /// Dimensions.
    pub shape: Vec<usize>,
    /// `product(shape) * size_of(dtype)` bytes, not yet initialised.
    pub data: &'a mut [std::mem::MaybeUninit<u8>],
}

impl<'a> GmOutput<'a> {
    /// Zero-fills every byte and makes this the [`GmInOut`] it then is.
    pub fn zeroed(self) -> GmInOut<'a> {
        self.data.fill(std::mem::MaybeUninit::new(0));
        // SAFETY: every byte was just initialised.
        unsafe { self.assume_init() }
    }

    /// This output as the [`GmInOut`] it becomes once every byte is initialised.
    ///
    /// # Safety
    /// Every byte of `data` must be initialised.
    pub(crate) unsafe fn assume_init(self) -> GmInOut<'a> {
        let len = self.data.len();
        let ptr = self.data.as_mut_ptr().cast::<u8>();
        GmInOut {
            dtype: self.dtype,
            shape: self.shape,
            // SAFETY: `MaybeUninit<u8>` has the layout of `u8`, the caller guarantees every
            // byte is initialised, and the unique borrow moves from `self.data` to the result.
            data: unsafe { std::slice::from_raw_parts_mut(ptr, len) },
        }
    }
}

impl std::fmt::Debug for GmOutput<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GmOutput")
            .field("dtype", &self.dtype)
            .field("shape", &self.shape)
            .field("bytes", &self.data.len())
            .finish()
    }
}

impl PartialEq for GmOutput<'_> {
    /// Same dtype and shape over the same bytes (their values are not read).
    fn eq(&self, other: &Self) -> bool {
        self.dtype == other.dtype
            && self.shape == other.shape
            && std::ptr::eq(self.data.as_ptr(), other.data.as_ptr())
            && self.data.len() == other.data.len()
    }
}

/// Dtype, shape and bytes of a tensor argument, owned ([`Arg::Tensor`]) or borrowed
/// ([`Arg::Input`], [`Arg::InOut`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GmSlice<'x> {
    /// Element type.
    pub dtype: DType,
    /// Dimensions.
    pub shape: &'x [usize],
    /// The bytes.
    pub data: &'x [u8],
}

impl GmSlice<'_> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// True when the tensor has no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A kernel argument.
///
/// Not `Clone`: an [`Arg::InOut`] holds a unique borrow (see [`Arg::try_clone`]).
#[derive(Debug, PartialEq)]
pub enum Arg<'a> {
    /// A GM tensor the kernel may read and write (outputs are written back into it).
    Tensor(GmTensor),
    /// A read-only GM tensor borrowed from the caller (inputs only; not copied).
    Input(GmInput<'a>),
    /// A GM tensor borrowed mutably from the caller, read and written in place (input or
    /// output; not copied). Same semantics as [`Arg::Tensor`].
    InOut(GmInOut<'a>),
    /// A write-only result the caller has not initialised, written in place ([`GmOutput`]).
    Output(GmOutput<'a>),
    /// An integer scalar.
    Int(i64),
    /// A float scalar.
    Float(f64),
}

impl<'a> Arg<'a> {
    /// The owned tensor, if this is one.
    pub fn tensor(&self) -> Option<&GmTensor> {
        match self {
            Arg::Tensor(t) => Some(t),
            _ => None,
        }
    }

    /// Dtype, shape and bytes of a tensor argument, owned or borrowed.
    pub fn as_gm(&self) -> Option<GmSlice<'_>> {
        match self {
            Arg::Tensor(t) => Some(GmSlice {
                dtype: t.dtype,
                shape: &t.shape,
                data: &t.data,
            }),
            Arg::Input(t) => Some(GmSlice {
                dtype: t.dtype,
                shape: &t.shape,
                data: t.data,
            }),
            Arg::InOut(t) => Some(GmSlice {
                dtype: t.dtype,
                shape: &t.shape,
                data: &*t.data,
            }),
            _ => None,
        }
    }

    /// Dtype, shape and byte length of any tensor argument, an uninitialised
    /// [`Arg::Output`] included (whose bytes [`Arg::as_gm`] cannot lend).
    pub fn gm_shape(&self) -> Option<(DType, &[usize], usize)> {
        match self {
            Arg::Output(t) => Some((t.dtype, &t.shape, t.data.len())),
            other => other.as_gm().map(|t| (t.dtype, t.shape, t.data.len())),
        }
    }

    /// The bytes of a tensor argument the kernel may write (owned or [`Arg::InOut`]); `None`
    /// for a borrowed input, an uninitialised [`Arg::Output`] or a scalar.
    pub(crate) fn writable_bytes(&mut self) -> Option<&mut [u8]> {
        match self {
            Arg::Tensor(t) => Some(&mut t.data),
            Arg::InOut(t) => Some(&mut *t.data),
            _ => None,
        }
    }

    /// True for a tensor argument the kernel may write: owned ([`Arg::Tensor`]) or borrowed
    /// mutably ([`Arg::InOut`], [`Arg::Output`]).
    pub fn is_writable(&self) -> bool {
        matches!(self, Arg::Tensor(_) | Arg::InOut(_) | Arg::Output(_))
    }

    /// A copy of this argument, or `None` for an [`Arg::InOut`] or [`Arg::Output`] (a unique
    /// borrow cannot be shared). Borrowed inputs stay borrowed.
    pub fn try_clone(&self) -> Option<Arg<'a>> {
        match self {
            Arg::Tensor(t) => Some(Arg::Tensor(t.clone())),
            Arg::Input(t) => Some(Arg::Input(t.clone())),
            Arg::InOut(_) | Arg::Output(_) => None,
            Arg::Int(v) => Some(Arg::Int(*v)),
            Arg::Float(v) => Some(Arg::Float(*v)),
        }
    }
}

/// Why named arguments do not bind to a kernel's parameters.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindError {
    /// A name that is not a parameter of the kernel.
    #[error("kernel `{kernel}` has no parameter `{name}`")]
    Unknown {
        /// The kernel.
        kernel: String,
        /// The name given.
        name: String,
    },
    /// A parameter given twice.
    #[error("kernel `{kernel}`: parameter `{name}` is given twice")]
    Twice {
        /// The kernel.
        kernel: String,
        /// The parameter.
        name: String,
    },
    /// A parameter not given.
    #[error("kernel `{kernel}`: parameter `{name}` is not given")]
    Missing {
        /// The kernel.
        kernel: String,
        /// The parameter.
        name: String,
    },
}

/// Binds arguments to `kernel`'s parameters by name: the result is in parameter order, ready to
/// launch. Every parameter must be given exactly once, and no other name.
pub fn bind<'a>(
    kernel: &crate::ir::Kernel,
    named: Vec<(&str, Arg<'a>)>,
) -> Result<Vec<Arg<'a>>, BindError> {
    let mut slots: Vec<Option<Arg<'a>>> = kernel.params.iter().map(|_| None).collect();
    for (name, arg) in named {
        let i = kernel
            .params
            .iter()
            .position(|p| p.name == name)
            .ok_or_else(|| BindError::Unknown {
                kernel: kernel.name.clone(),
                name: name.to_string(),
            })?;
        if slots[i].replace(arg).is_some() {
            return Err(BindError::Twice {
                kernel: kernel.name.clone(),
                name: name.to_string(),
            });
        }
    }
    slots
        .into_iter()
        .zip(&kernel.params)
        .map(|(a, p)| {
            a.ok_or_else(|| BindError::Missing {
                kernel: kernel.name.clone(),
                name: p.name.clone(),
            })
        })
        .collect()
}

/// The index of `kernel`'s parameter `name` (to read an output back after a launch).
pub fn param_index(kernel: &crate::ir::Kernel, name: &str) -> Option<usize> {
    kernel.params.iter().position(|p| p.name == name)
}

/// Takes the owned tensor bound to `kernel`'s parameter `name` out of `args` (in parameter
/// order, as [`bind`] made them) after a launch, leaving a scalar in its place; `None` when no
/// such parameter exists or its argument is not an owned tensor ([`Arg::Tensor`]).
pub fn take_tensor(
    kernel: &crate::ir::Kernel,
    args: &mut [Arg<'_>],
    name: &str,
) -> Option<GmTensor> {
    let slot = param_index(kernel, name).and_then(|i| args.get_mut(i))?;
    match std::mem::replace(slot, Arg::Int(0)) {
        Arg::Tensor(t) => Some(t),
        other => {
            *slot = other;
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dsl::KernelBuilder;

    fn kernel() -> crate::ir::Kernel {
        let mut kb = KernelBuilder::new("k");
        let n = kb.scalar("n", DType::I32);
        kb.input("x", DType::F32, [crate::ir::Expr::Param(n)]);
        kb.build()
    }

    #[test]
    fn arguments_bind_by_name_in_parameter_order() {
        let k = kernel();
        let x = GmTensor::zeros(DType::F32, &[3]);
        let args =
            bind(&k, vec![("x", Arg::Tensor(x.clone())), ("n", Arg::Int(3))]).expect("binds");
        assert_eq!(args, vec![Arg::Int(3), Arg::Tensor(x)]);
        assert_eq!(param_index(&k, "x"), Some(1));
        assert_eq!(param_index(&k, "y"), None);
    }

    #[test]
    fn take_tensor_takes_an_owned_tensor_by_name_only() {
        let k = kernel();
        let x = GmTensor::zeros(DType::F32, &[3]);
        let mut args =
            bind(&k, vec![("x", Arg::Tensor(x.clone())), ("n", Arg::Int(3))]).expect("binds");
        assert_eq!(take_tensor(&k, &mut args, "n"), None);
        assert_eq!(args[0], Arg::Int(3), "a scalar stays in place");
        assert_eq!(take_tensor(&k, &mut args, "y"), None);
        assert_eq!(take_tensor(&k, &mut args, "x"), Some(x));
        assert_eq!(take_tensor(&k, &mut args, "x"), None, "taken once");
    }

    #[test]
    fn unknown_repeated_and_missing_names_are_errors() {
        let k = kernel();
        assert!(matches!(
            bind(&k, vec![("y", Arg::Int(1))]),
            Err(BindError::Unknown { .. })
        ));
        assert!(matches!(
            bind(&k, vec![("n", Arg::Int(1)), ("n", Arg::Int(2))]),
            Err(BindError::Twice { .. })
        ));
        assert!(matches!(
            bind(&k, vec![("n", Arg::Int(1))]),
            Err(BindError::Missing { name, .. }) if name == "x"
        ));
    }
}
