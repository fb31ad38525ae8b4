//! Per-block machine state: on-chip buffers of the AIC and both AIVs, cross-core flags.

use crate::arch::Arch;
use crate::ir::MemSpace;
use std::collections::VecDeque;
use std::fmt;

/// Byte every on-chip buffer starts with: an all-ones pattern (NaN for floats, -1 for signed
/// integers), so that padding a kernel forgot to fill shows up instead of passing as zero.
pub(crate) const FRESH_BYTE: u8 = 0xff;

/// A core of the cluster: the cube core or vector core 0/1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CoreId {
    /// The cube core.
    Aic,
    /// Vector core 0 or 1.
    Aiv(u8),
}

impl CoreId {
    /// The three cores of a cluster, in trace order.
    pub const ALL: [CoreId; 3] = [CoreId::Aic, CoreId::Aiv(0), CoreId::Aiv(1)];
}

impl fmt::Display for CoreId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CoreId::Aic => f.write_str("AIC"),
            CoreId::Aiv(k) => write!(f, "AIV{k}"),
        }
    }
}

/// The buffers of one cluster, each with a shadow bit per byte: set once the byte was written
/// with a defined value (never-written bytes are poison).
pub(crate) struct BlockMem {
    cube: [Vec<u8>; 6],
    ub: [Vec<u8>; 2],
    /// Written bits, indexed like [`BlockMem::slot`]: six cube spaces, then the two UBs.
    init: [Vec<u64>; 8],
}

fn cube_slot(space: MemSpace) -> Option<usize> {
    Some(match space {
        MemSpace::Mat => 0,
        MemSpace::Left => 1,
        MemSpace::Right => 2,
        MemSpace::Acc => 3,
        MemSpace::Bias => 4,
        MemSpace::Scaling => 5,
        _ => return None,
    })
}

impl BlockMem {
    pub fn new(arch: &Arch) -> Self {
        let cap = |s: MemSpace| arch.space(s).map(|s| s.capacity as usize).unwrap_or(0);
        let fresh = |s: MemSpace| vec![FRESH_BYTE; cap(s)];
        BlockMem {
            cube: [
                fresh(MemSpace::Mat),
                fresh(MemSpace::Left),
                fresh(MemSpace::Right),
                fresh(MemSpace::Acc),
                fresh(MemSpace::Bias),
                fresh(MemSpace::Scaling),
            ],
            ub: [fresh(MemSpace::Vec), fresh(MemSpace::Vec)],
            init: [
                MemSpace::Mat,
                MemSpace::Left,
                MemSpace::Right,
                MemSpace::Acc,
                MemSpace::Bias,
                MemSpace::Scaling,
                MemSpace::Vec,
                MemSpace::Vec,
            ]
            .map(|s| vec![0u64; cap(s).div_ceil(64)]),
        }
    }

    fn slot(space: MemSpace, aiv: u8) -> Option<usize> {
        match space {
            MemSpace::Vec => Some(6 + (aiv as usize & 1)),
            s => cube_slot(s),
        }
    }

    /// Marks `len` bytes at `start` of a buffer as written (`defined`) or poison.
    pub fn mark(&mut self, space: MemSpace, aiv: u8, start: usize, len: usize, defined: bool) {
        let Some(i) = Self::slot(space, aiv) else {
            return;
        };
        let bits = &mut self.init[i];
        let end = (start + len).min(bits.len() * 64);
        let mut b = start;
        while b < end {
            let (w, o) = (b / 64, b % 64);
            let n = (64 - o).min(end - b);
            let mask = if n == 64 {
                u64::MAX
            } else {
                ((1u64 << n) - 1) << o
            };
            if defined {
                bits[w] |= mask;
            } else {
                bits[w] &= !mask;
            }
            b += n;
        }
    }

    /// True when every one of `len` bytes at `start` was written.
    pub fn defined(&self, space: MemSpace, aiv: u8, start: usize, len: usize) -> bool {
        let Some(i) = Self::slot(space, aiv) else {
            return true;
        };
        let bits = &self.init[i];
        let end = start + len;
        if end > bits.len() * 64 {
            return false;
        }
        let mut b = start;
        while b < end {
            let (w, o) = (b / 64, b % 64);
            let n = (64 - o).min(end - b);
            let mask = if n == 64 {
                u64::MAX
            } else {
                ((1u64 << n) - 1) << o
            };
            if bits[w] & mask != mask {
                return false;
            }
            b += n;
        }
        true
    }

    /// The buffer of `space` that `core` owns; a Vec buffer needs the AIV.
    pub fn buf(&self, space: MemSpace, aiv: u8) -> Result<&[u8], String> {
        match (space, cube_slot(space)) {
            (MemSpace::Vec, _) => Ok(&self.ub[aiv as usize & 1]),
            (_, Some(i)) => Ok(&self.cube[i]),
            _ => Err(format!("{space} is not an on-chip buffer")),
        }
    }

    /// Mutable form of [`BlockMem::buf`].
    pub fn buf_mut(&mut self, space: MemSpace, aiv: u8) -> Result<&mut [u8], String> {
        match (space, cube_slot(space)) {
            (MemSpace::Vec, _) => Ok(&mut self.ub[aiv as usize & 1]),
            (_, Some(i)) => Ok(&mut self.cube[i]),
            _ => Err(format!("{space} is not an on-chip buffer")),
        }
    }
}

/// Cross-core flags of one cluster: 32 ids on the AIC, 16 per AIV. Each pending signal remembers
/// who set it (core and event index), so a wait can name the set that released it.
pub(crate) struct CrossFlags {
    slots: Vec<VecDeque<(CoreId, usize)>>,
}

impl Default for CrossFlags {
    fn default() -> Self {
        CrossFlags {
            slots: vec![VecDeque::new(); 64],
        }
    }
}

/// Index of `core`'s flag `id` in the flat slot list.
fn slot_index(core: CoreId, id: u8) -> Option<usize> {
    match core {
        CoreId::Aic if id < 32 => Some(id as usize),
        CoreId::Aiv(k) if id < 16 => Some(32 + 16 * (k as usize & 1) + id as usize),
        _ => None,
    }
}

impl CrossFlags {
    /// Where `set_intra_block(id)` from `from` lands: the receiving core and its flag id.
    pub fn target(from: CoreId, id: u8) -> Option<(CoreId, u8)> {
        match from {
            CoreId::Aic if id < 16 => Some((CoreId::Aiv(0), id)),
            CoreId::Aic if id < 32 => Some((CoreId::Aiv(1), id - 16)),
            CoreId::Aiv(k) if id < 16 => Some((CoreId::Aic, id + 16 * (k & 1))),
            _ => None,
        }
    }

    /// `set_intra_block` from `from` with `id`, as `from`'s event `index`.
    pub fn set(&mut self, from: CoreId, id: u8, index: usize) -> Result<(CoreId, u8), String> {
        let (to, slot) = Self::target(from, id)
            .ok_or_else(|| format!("cross-core flag id {id} out of range for {from}"))?;
        let i = slot_index(to, slot).ok_or_else(|| format!("no flag {slot} on {to}"))?;
        self.slots[i].push_back((from, index));
        Ok((to, slot))
    }

    /// `wait_intra_block` on `core` with `id`: the releasing set, if one is pending (consumed).
    pub fn try_wait(&mut self, core: CoreId, id: u8) -> Result<Option<(CoreId, usize)>, String> {
        let i = slot_index(core, id)
            .ok_or_else(|| format!("cross-core flag id {id} out of range for {core}"))?;
        Ok(self.slots[i].pop_front())
    }
}

/// Reusable scratch buffers of one core, so ops do not allocate per instruction: an op takes a
/// buffer, uses it, and gives it back (an op that fails early just drops it).
#[derive(Default)]
pub(crate) struct ScratchPool {
    bytes: Free<u8>,
    f32s: Free<f32>,
    f64s: Free<f64>,
    i32s: Free<i32>,
}

/// Buffers kept per kind; enough for the most an op holds at once.
const POOL_DEPTH: usize = 8;

/// Free buffers of one element type.
struct Free<T>(Vec<Vec<T>>);

impl<T> Default for Free<T> {
    fn default() -> Self {
        Free(Vec::new())
    }
}

impl<T: Clone + Default> Free<T> {
    /// `n` default values, in the capacity of an earlier buffer when one is free.
    fn take(&mut self, n: usize) -> Vec<T> {
        let mut v = self.0.pop().unwrap_or_default();
        v.clear();
        v.resize(n, T::default());
        v
    }

    fn put(&mut self, v: Vec<T>) {
        if self.0.len() < POOL_DEPTH {
            self.0.push(v);
        }
    }
}

impl ScratchPool {
    /// An empty byte buffer.
    pub fn bytes(&mut self) -> Vec<u8> {
        self.bytes.take(0)
    }

    /// Returns a byte buffer.
    pub fn put_bytes(&mut self, v: Vec<u8>) {
        self.bytes.put(v)
    }

    /// `n` zeroed f32s.
    pub fn f32s(&mut self, n: usize) -> Vec<f32> {
        self.f32s.take(n)
    }

    /// Returns an f32 buffer.
    pub fn put_f32s(&mut self, v: Vec<f32>) {
        self.f32s.put(v)
    }

    /// `n` zeroed f64s.
    pub fn f64s(&mut self, n: usize) -> Vec<f64> {
        self.f64s.take(n)
    }

    /// Returns an f64 buffer.
    pub fn put_f64s(&mut self, v: Vec<f64>) {
        self.f64s.put(v)
    }

    /// `n` zeroed i32s.
    pub fn i32s(&mut self, n: usize) -> Vec<i32> {
        self.i32s.take(n)
    }

    /// Returns an i32 buffer.
    pub fn put_i32s(&mut self, v: Vec<i32>) {
        self.i32s.put(v)
    }
}
