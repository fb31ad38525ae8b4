//! The IR listing: an op, or a whole kernel, printed with the kernel's names (what `tileops`
//! prints for its main job).

use super::{ChannelId, Op, ParamId, Pipe, ScalarArg, Scale};
use crate::ir::{CoreKind, GmView, Kernel, ParamKind, Stmt, Storage, TileRef};
use std::fmt::{self, Write};

/// The kernel's names for the ids an op holds.
pub(crate) struct Names<'a>(pub(crate) &'a Kernel);

impl Names<'_> {
    pub(crate) fn tile_name(&self, id: u32) -> String {
        match self.0.tiles.get(id as usize) {
            Some(t) => t.name.clone(),
            None => format!("<tile {id}?>"),
        }
    }

    pub(crate) fn tile(&self, r: &TileRef) -> String {
        let name = self.tile_name(r.tile.0);
        let grouped = self.0.try_tile(r.tile).is_some_and(|d| d.buffers > 1);
        if grouped || r.slot.as_const() != Some(0) {
            format!("{name}[{}]", r.slot)
        } else {
            name
        }
    }

    pub(crate) fn param(&self, p: ParamId) -> String {
        match self.0.try_param(p) {
            Some(param) => param.name.clone(),
            None => format!("<arg {}?>", p.0),
        }
    }

    pub(crate) fn var(&self, v: u32) -> String {
        match self.0.vars.get(v as usize) {
            Some(d) => format!("{}(v{v})", d.name),
            None => format!("v{v}"),
        }
    }

    pub(crate) fn channel(&self, c: ChannelId) -> String {
        match self.0.try_channel(c) {
            Some(ch) => ch.name.clone(),
            None => format!("<channel {}?>", c.0),
        }
    }

    pub(crate) fn view(&self, v: &GmView) -> String {
        format!(
            "{}[{} {}x{} at {}, stride {}]",
            self.param(v.tensor),
            v.layout,
            v.rows,
            v.cols,
            v.offset,
            v.stride
        )
    }

    pub(crate) fn scalar(&self, a: &ScalarArg) -> String {
        match a {
            ScalarArg::Const(v) => v.to_string(),
            ScalarArg::Param(p) => self.param(*p),
        }
    }

    pub(crate) fn scale(&self, sc: &Scale) -> String {
        match sc {
            Scale::Const(w) => format!("scale {} ({:#x})", w.scale(), w.0),
            Scale::Scalar(p) => format!("scale {}", self.param(*p)),
            Scale::Tile(t) => format!("scale tile {}", self.tile(t)),
        }
    }

    pub(crate) fn space(&self, r: &TileRef) -> String {
        match self.0.space_of(r) {
            Some(s) => s.to_string(),
            None => "?".into(),
        }
    }
}

/// An op printed with its kernel's names ([`Op::display`]).
pub struct OpDisplay<'a> {
    op: &'a Op,
    names: Names<'a>,
}

impl<'a> OpDisplay<'a> {
    pub(super) fn new(op: &'a Op, kernel: &'a Kernel) -> Self {
        OpDisplay {
            op,
            names: Names(kernel),
        }
    }
}

impl fmt::Display for OpDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = &self.names;
        match self.op {
            Op::LoadStore(o) => o.fmt(n, f),
            Op::Move(o) => o.fmt(n, f),
            Op::Matmul(o) => o.fmt(n, f),
            Op::Gather(o) => o.fmt(n, f),
            Op::Vector(o) => o.fmt(n, f),
            Op::Sort(o) => o.fmt(n, f),
            Op::Scalar(o) => o.fmt(n, f),
            Op::Sync(o) => o.fmt(n, f),
        }
    }
}

/// A short listing of a kernel: arguments, tiles with their types, and each section's ops
/// numbered as the verifier numbers them (`cube op #3`), with the pipe each runs on
/// ([`Kernel::listing`]).
pub struct Listing<'a> {
    kernel: &'a Kernel,
    pipe_of: &'a dyn Fn(&Op) -> Option<Pipe>,
}

impl Kernel {
    /// The kernel's listing; `pipe_of` gives each op's pipe (`Arch::pipe_of`; `?` where `None`).
    pub fn listing<'a>(&'a self, pipe_of: &'a dyn Fn(&Op) -> Option<Pipe>) -> Listing<'a> {
        Listing {
            kernel: self,
            pipe_of,
        }
    }
}

impl Listing<'_> {
    fn stmts(&self, s: &mut String, stmts: &[Stmt], depth: usize, index: &mut usize) {
        let n = Names(self.kernel);
        let pad = "  ".repeat(depth);
        for st in stmts {
            match st {
                Stmt::Op(op) => {
                    let pipe =
                        (self.pipe_of)(op).map_or_else(|| "?".to_string(), |p| p.to_string());
                    let _ = writeln!(s, "{pad}#{index:<3} {pipe:<4} {}", op.display(self.kernel));
                    *index += 1;
                }
                Stmt::Let { var, value } => {
                    let _ = writeln!(s, "{pad}let {} = {value}", n.var(var.0));
                }
                Stmt::For {
                    var,
                    start,
                    end,
                    step,
                    body,
                } => {
                    let step = if *step == 1 {
                        String::new()
                    } else {
                        format!(" step {step}")
                    };
                    let _ = writeln!(s, "{pad}for {} in {start}..{end}{step}:", n.var(var.0));
                    self.stmts(s, body, depth + 1, index);
                }
                Stmt::If {
                    cond,
                    then_body,
                    else_body,
                } => {
                    let _ = writeln!(s, "{pad}if {cond}:");
                    self.stmts(s, then_body, depth + 1, index);
                    if !else_body.is_empty() {
                        let _ = writeln!(s, "{pad}else:");
                        self.stmts(s, else_body, depth + 1, index);
                    }
                }
            }
        }
    }
}

impl fmt::Display for Listing<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kernel = self.kernel;
        let n = Names(kernel);
        let mut s = String::new();
        let _ = writeln!(s, "kernel {} ({})", kernel.name, kernel.target);
        let _ = writeln!(s, "params:");
        for (i, p) in kernel.params.iter().enumerate() {
            let kind = match &p.kind {
                ParamKind::Tensor {
                    dtype,
                    shape,
                    output,
                } => {
                    let dims: Vec<String> = shape.iter().map(|e| e.to_string()).collect();
                    let dir = if *output { "out" } else { "in" };
                    format!("{dir} {dtype} [{}]", dims.join(", "))
                }
                ParamKind::Scalar { dtype } => format!("scalar {dtype}"),
            };
            let range = match &p.range {
                Some(r) => format!(" in [{}, {}]", r.min, r.max),
                None => String::new(),
            };
            let _ = writeln!(s, "  arg{i} {}: {kind}{range}", p.name);
        }
        let _ = writeln!(s, "tiles:");
        let width = kernel.tiles.iter().map(|t| t.name.len()).max().unwrap_or(0);
        for t in &kernel.tiles {
            let mut extra = String::new();
            if t.buffers > 1 {
                let _ = write!(extra, " x{} buffers", t.buffers);
            }
            if let Storage::Alias { of } = t.storage {
                let _ = write!(extra, " = reinterpret({})", n.tile_name(of.0));
            }
            if let Some(addr) = t.addr {
                let _ = write!(extra, " @{addr:#x}");
            }
            let _ = writeln!(s, "  {:width$}  {}{extra}", t.name, t.ty);
        }
        for (i, ch) in kernel.channels.iter().enumerate() {
            let _ = writeln!(
                s,
                "channel {i} {}: {} produces, depth {}",
                ch.name, ch.producer, ch.depth
            );
        }
        for core in [CoreKind::Cube, CoreKind::Vector] {
            let stmts = kernel.section(core);
            if stmts.is_empty() {
                let _ = writeln!(s, "{core}: (empty)");
                continue;
            }
            let _ = writeln!(s, "{core}:");
            let mut index = 0;
            self.stmts(&mut s, stmts, 1, &mut index);
        }
        f.write_str(&s)
    }
}
