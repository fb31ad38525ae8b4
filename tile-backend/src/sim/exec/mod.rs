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
use crate::ir::{Kernel, Op, ParamId, ScalarArg, TileRef};

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
    match op {
        Op::Load { .. } | Op::Store { .. } => load_store::exec(cx, op)?,
        Op::Move { .. } => moves::exec(cx, op)?,
        Op::Matmul { .. } => matmul::exec(cx, op)?,
        Op::GatherInL1 { .. } => gather::exec(cx, op)?,
        Op::Unary { .. }
        | Op::Binary { .. }
        | Op::BinaryScalar { .. }
        | Op::Reduce { .. }
        | Op::Broadcast { .. }
        | Op::Expand { .. }
        | Op::Cast { .. }
        | Op::Fill { .. }
        | Op::FillPad { .. }
        | Op::SetValidShape { .. } => vector::exec(cx, op)?,
        Op::ReadScalar { .. }
        | Op::WriteScalar { .. }
        | Op::SetFlag { .. }
        | Op::WaitFlag { .. }
        | Op::Barrier { .. }
        | Op::SetCrossFlag { .. }
        | Op::WaitCrossFlag { .. }
        | Op::ChannelAcquire { .. }
        | Op::ChannelPush { .. }
        | Op::ChannelPop { .. }
        | Op::ChannelRelease { .. } => return scalar::exec(cx, op),
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
        self.note_region(loc, aiv, (r0, c0), (rows, cols), true);
        Ok(())
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
