//! A core's runtime scalar state ([`CoreRt`]): what the interpreter (`interp.rs`) keeps per core
//! of a running block and the instruction semantics (`exec/`) read and write. A leaf beside
//! both, so neither imports the other for it.

use super::gm::PrefetchQueue;
use super::state::{CoreId, ScratchPool};
use super::SimFault;
use crate::ir::{Expr, ExprEnv, ParamId, VarId};
use crate::launch::Arg;
use std::collections::BTreeMap;

/// A core's scalar state: variables, runtime valid shapes and its data cache.
pub(crate) struct CoreRt<'a> {
    pub id: CoreId,
    pub vars: Vec<Option<i64>>,
    /// Runtime valid shapes set on this core, indexed by tile id.
    pub valid: Vec<Option<(u64, u64)>>,
    /// Scalar writes held per 64-byte line until kernel end: (param, line) -> bytes.
    pub dcache: BTreeMap<(u32, usize), [u8; 64]>,
    pub args: &'a [Arg<'a>],
    pub block: usize,
    pub block_dim: usize,
    /// Scratch buffers reused across this core's ops.
    pub pool: ScratchPool,
    /// GM rows this core's next gather will likely read, hinted from inside long compute loops.
    pub prefetch: PrefetchQueue<'a>,
    /// Per Acc buffer (its L0C address), the rows `m` of the last matmul that wrote it: the
    /// matmul laid its column blocks out `ceil16(m)` rows apart (`sim::exec::moves`, the
    /// Fixpipe's source stride).
    pub acc_rows: Vec<(usize, usize)>,
}

impl ExprEnv for CoreRt<'_> {
    fn var(&self, v: VarId) -> Option<i64> {
        self.vars.get(v.0 as usize).copied().flatten()
    }
    fn param(&self, p: ParamId) -> Option<i64> {
        match self.args.get(p.0 as usize)? {
            Arg::Int(v) => Some(*v),
            _ => None,
        }
    }
    fn block_idx(&self) -> Option<i64> {
        Some(self.block as i64)
    }
    fn block_dim(&self) -> Option<i64> {
        Some(self.block_dim as i64)
    }
    fn sub_block_idx(&self) -> Option<i64> {
        Some(match self.id {
            CoreId::Aic => 0,
            CoreId::Aiv(k) => k as i64,
        })
    }
}

impl CoreRt<'_> {
    pub fn eval(&self, e: &Expr) -> Result<i64, SimFault> {
        Ok(e.eval(self)?)
    }
    pub fn set_var(&mut self, v: VarId, value: i64) {
        let i = v.0 as usize;
        if self.vars.len() <= i {
            self.vars.resize(i + 1, None);
        }
        self.vars[i] = Some(value);
    }
}
