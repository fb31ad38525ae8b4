//! Execution of each op family, one file per family (as in verify/ and codegen/).

mod gather;
mod load_store;
mod matmul;
mod moves;
mod scalar;
mod vector;

use super::gm::{Arg, Overlay};
use super::interp::CoreRt;
use super::state::{BlockMem, CoreId, CrossFlags};
use super::tile::{self, TileLoc};
use super::trace::{Mem, OpRecord, SyncInfo};
use crate::arch::Arch;
use crate::ir::{Kernel, Op, OpFamily, ParamId, ScalarArg, TileRef};

/// Whether an op completed or must wait.
pub(crate) enum Flow {
    /// Done; go to the next statement.
    Continue,
    /// Waiting (for a cross-core flag); retry later.
    Blocked(String),
}

/// Everything an op may touch.
pub(crate) struct ExecCtx<'k, 'a, 'b> {
    pub kernel: &'k Kernel,
    pub arch: &'a Arch,
    pub args: &'a [Arg],
    pub mem: &'b mut BlockMem,
    pub gm: &'b mut Overlay,
    pub flags: &'b mut CrossFlags,
    pub core: &'b mut CoreRt<'a>,
    /// What the running op touched, when the run is traced.
    pub rec: Option<OpRecord>,
    /// Index the running op will have in this core's trace.
    pub event_index: usize,
}

pub(crate) fn exec(cx: &mut ExecCtx<'_, '_, '_>, op: &Op) -> Result<Flow, String> {
    match op.family() {
        OpFamily::LoadStore => load_store::exec(cx, op)?,
        OpFamily::Move => moves::exec(cx, op)?,
        OpFamily::Matmul => matmul::exec(cx, op)?,
        OpFamily::Gather => gather::exec(cx, op)?,
        OpFamily::Vector => vector::exec(cx, op)?,
        OpFamily::Scalar | OpFamily::Sync => return scalar::exec(cx, op),
    }
    Ok(Flow::Continue)
}

impl<'k> ExecCtx<'k, '_, '_> {
    /// Resolves a tile reference for this core.
    pub fn tile(&self, r: &TileRef) -> Result<TileLoc<'k>, String> {
        let slot = self.core.eval(&r.slot)?;
        let valid = &self.core.valid;
        tile::resolve(self.kernel, self.arch, r, slot, &|id| {
            valid.get(&id).copied()
        })
    }

    /// The AIV whose UB this core's Vec tiles live in.
    pub fn own_aiv(&self) -> u8 {
        match self.core.id {
            CoreId::Aiv(k) => k,
            CoreId::Aic => 0,
        }
    }

    /// Records a sync op's part (traced runs only).
    pub fn note_sync(&mut self, s: SyncInfo) {
        if let Some(r) = &mut self.rec {
            r.sync = Some(s);
        }
    }

    /// Records the m, k, n a matmul computed (traced runs only).
    pub fn note_cube(&mut self, m: usize, k: usize, n: usize) {
        if let Some(r) = &mut self.rec {
            r.cube = Some([m, k, n]);
        }
    }

    fn note_region(
        &mut self,
        loc: &TileLoc,
        aiv: u8,
        at: (usize, usize),
        size: (usize, usize),
        write: bool,
    ) {
        if let Some(r) = &mut self.rec {
            let mem = Mem::Chip {
                space: loc.space(),
                aiv: if loc.space() == crate::ir::MemSpace::Vec {
                    aiv
                } else {
                    0
                },
            };
            let es = loc.es();
            let _ = tile::for_each_run(loc, usize::MAX, at, size, |run| {
                r.touch(mem, run.buf, run.len * es, write)
            });
        }
    }

    /// Reads GM bytes through this block's overlay.
    pub fn gm_read(&mut self, p: ParamId, off: usize, out: &mut [u8]) -> Result<(), String> {
        self.gm.read(self.args, p, off, out)?;
        if let Some(r) = &mut self.rec {
            r.touch(Mem::Gm(p.0), off, out.len(), false);
        }
        Ok(())
    }

    /// Writes GM bytes into this block's overlay.
    pub fn gm_write(&mut self, p: ParamId, off: usize, bytes: &[u8]) -> Result<(), String> {
        self.gm.write(self.args, p, off, bytes)?;
        if let Some(r) = &mut self.rec {
            r.touch(Mem::Gm(p.0), off, bytes.len(), true);
        }
        Ok(())
    }

    /// Records an atomic add into GM.
    pub fn gm_atomic_add(
        &mut self,
        p: ParamId,
        off: usize,
        dtype: crate::ir::DType,
        bytes: &[u8],
    ) -> Result<(), String> {
        self.gm.atomic_add(self.args, p, off, dtype, bytes)?;
        if let Some(r) = &mut self.rec {
            r.touch(Mem::Gm(p.0), off, bytes.len(), true);
        }
        Ok(())
    }

    /// Reads a region as row-major bytes (a Vec tile is read from `aiv`'s UB).
    pub fn read_bytes(
        &mut self,
        loc: &TileLoc,
        aiv: u8,
        (r0, c0): (usize, usize),
        (rows, cols): (usize, usize),
        out: &mut Vec<u8>,
    ) -> Result<(), String> {
        let buf = self.mem.buf(loc.space(), aiv)?;
        tile::read_region(buf, loc, (r0, c0), (rows, cols), out)?;
        self.note_region(loc, aiv, (r0, c0), (rows, cols), false);
        Ok(())
    }

    /// Writes row-major bytes into a region.
    pub fn write_bytes(
        &mut self,
        loc: &TileLoc,
        aiv: u8,
        (r0, c0): (usize, usize),
        (rows, cols): (usize, usize),
        data: &[u8],
    ) -> Result<(), String> {
        let buf = self.mem.buf_mut(loc.space(), aiv)?;
        tile::write_region(buf, loc, (r0, c0), (rows, cols), data)?;
        let (space, es, mem) = (loc.space(), loc.es(), &mut *self.mem);
        tile::for_each_run(loc, usize::MAX, (r0, c0), (rows, cols), |run| {
            mem.mark(space, aiv, run.buf, run.len * es, true)
        })?;
        self.note_region(loc, aiv, (r0, c0), (rows, cols), true);
        Ok(())
    }

    /// [`ExecCtx::write_bytes`] for a copy: element `i` (row-major) of the region becomes
    /// defined only where `defined[i]` (poison travels with copied padding).
    pub fn write_bytes_masked(
        &mut self,
        loc: &TileLoc,
        aiv: u8,
        at: (usize, usize),
        size: (usize, usize),
        data: &[u8],
        defined: &[bool],
    ) -> Result<(), String> {
        self.write_bytes(loc, aiv, at, size, data)?;
        let (space, es, mem) = (loc.space(), loc.es(), &mut *self.mem);
        tile::for_each_run(loc, usize::MAX, at, size, |run| {
            for i in 0..run.len {
                let ok = defined
                    .get(run.elem + i * run.stride)
                    .copied()
                    .unwrap_or(true);
                if !ok {
                    mem.mark(space, aiv, run.buf + i * es, es, false);
                }
            }
        })
    }

    /// Whether each element (row-major) of a region was ever written.
    pub fn defined_mask(
        &self,
        loc: &TileLoc,
        aiv: u8,
        at: (usize, usize),
        size: (usize, usize),
    ) -> Result<Vec<bool>, String> {
        let mut out = vec![true; size.0 * size.1];
        let (space, es, mem) = (loc.space(), loc.es(), &*self.mem);
        tile::for_each_run(loc, usize::MAX, at, size, |run| {
            if !mem.defined(space, aiv, run.buf, run.len * es) {
                for i in 0..run.len {
                    out[run.elem + i * run.stride] = mem.defined(space, aiv, run.buf + i * es, es);
                }
            }
        })?;
        Ok(out)
    }

    /// An error when some byte of the region was never written: poison reaching a value.
    pub fn require_defined(
        &self,
        loc: &TileLoc,
        aiv: u8,
        at: (usize, usize),
        size: (usize, usize),
        what: &str,
    ) -> Result<(), String> {
        let mask = self.defined_mask(loc, aiv, at, size)?;
        match mask.iter().position(|d| !d) {
            None => Ok(()),
            Some(i) => Err(format!(
                "poison: {what} uses never-written bytes of tile `{}` (element [{}, {}] of the {}x{} region at [{}, {}])",
                loc.name(),
                at.0 + i / size.1.max(1),
                at.1 + i % size.1.max(1),
                size.0,
                size.1,
                at.0,
                at.1
            )),
        }
    }

    /// The value of a float scalar operand.
    pub fn scalar(&self, s: &ScalarArg) -> Result<f64, String> {
        match s {
            ScalarArg::Const(v) => Ok(*v),
            ScalarArg::Param(p) => match self.args.get(p.0 as usize) {
                Some(Arg::Float(v)) => Ok(*v),
                Some(Arg::Int(v)) => Ok(*v as f64),
                _ => Err(format!("argument {} is not a scalar", p.0)),
            },
        }
    }
}
