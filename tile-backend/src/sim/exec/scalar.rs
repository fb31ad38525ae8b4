//! Scalar GM access through the core's data cache, and scalar reads of UB tile elements.

use super::ExecCtx;
use crate::ir::{MemSpace, ParamId, ParamKind, ScalarOp, TileRef};
use crate::sim::numeric;
use crate::sim::trace::Mem;
use crate::sim::SimFault;

pub(super) fn exec(cx: &mut ExecCtx<'_, '_, '_>, op: &ScalarOp) -> Result<(), SimFault> {
    match op {
        ScalarOp::ReadScalar { var, tensor, index } => {
            let idx = cx.core.eval(index)?;
            let (dtype, off) = element(cx, tensor.0, idx)?;
            let es = dtype.size_bytes() as usize;
            // A stack buffer, not a Vec: this runs once per scalar read (per row of a gather).
            let mut buf = [0u8; 8];
            let Some(b) = buf.get_mut(..es) else {
                return Err(SimFault::Internal(
                    "a scalar read of an element over 8 bytes",
                ));
            };
            // The core's own pending writes first (same data cache), else GM.
            match cx.core.dcache.get(&(tensor.0, off / 64)) {
                Some(line) => b.copy_from_slice(&line[off % 64..off % 64 + es]),
                None => cx.gm_read(*tensor, off, b)?,
            }
            let v = numeric::decode_i64(dtype, b);
            cx.core.set_var(*var, v);
        }
        ScalarOp::ReadTileScalar { var, tile, index } => {
            let idx = cx.core.eval(index)?;
            let v = read_tile_element(cx, tile, idx)?;
            cx.core.set_var(*var, v);
        }
        ScalarOp::WriteScalar {
            tensor,
            index,
            value,
        } => {
            let idx = cx.core.eval(index)?;
            let v = cx.core.eval(value)?;
            let (dtype, off) = element(cx, tensor.0, idx)?;
            let es = dtype.size_bytes() as usize;
            let line_no = off / 64;
            if !cx.core.dcache.contains_key(&(tensor.0, line_no)) {
                // The line is fetched from GM as it is now; the whole line is written back.
                let len = match cx.args.get(tensor.0 as usize) {
                    Some(a) if a.is_writable() => a.as_gm().map_or(0, |t| t.data.len()),
                    _ => {
                        return Err(SimFault::GmReadOnly {
                            param: *tensor,
                            name: String::new(),
                        })
                    }
                };
                let start = line_no * 64;
                let end = (start + 64).min(len);
                let mut line = [0u8; 64];
                cx.gm
                    .read(cx.args, *tensor, start, &mut line[..end - start])?;
                cx.core.dcache.insert((tensor.0, line_no), line);
            }
            if let Some(line) = cx.core.dcache.get_mut(&(tensor.0, line_no)) {
                numeric::encode_i64(dtype, v, &mut line[off % 64..off % 64 + es]);
            }
            if let Some(r) = &mut cx.rec {
                r.touch(Mem::Gm(tensor.0), off, es, true);
            }
        }
    }
    Ok(())
}

fn element(
    cx: &ExecCtx<'_, '_, '_>,
    param: u32,
    idx: i64,
) -> Result<(crate::ir::DType, usize), SimFault> {
    let dtype = match cx.kernel.params.get(param as usize).map(|p| &p.kind) {
        Some(ParamKind::Tensor { dtype, .. }) => *dtype,
        _ => return Err(SimFault::arg_kind(ParamId(param), "a GM tensor")),
    };
    let len = cx.args[param as usize]
        .as_gm()
        .map(|t| t.len())
        .unwrap_or(0);
    if idx < 0 || idx as usize >= len {
        return Err(SimFault::ScalarIndex {
            name: cx.kernel.params[param as usize].name.clone(),
            index: idx,
            len: len as u64,
        });
    }
    Ok((dtype, idx as usize * dtype.size_bytes() as usize))
}

/// Element `idx` (storage order) of the Vec tile `tile` in this core's UB, as an integer. A
/// never-written element is poison reaching a value: an error.
fn read_tile_element(
    cx: &mut ExecCtx<'_, '_, '_>,
    tile: &TileRef,
    idx: i64,
) -> Result<i64, SimFault> {
    let loc = cx.tile(tile)?;
    let (ty, name) = (loc.ty, loc.name());
    if loc.space() != MemSpace::Vec {
        return Err(SimFault::ScalarSpace {
            tile: name.to_string(),
            space: loc.space(),
        });
    }
    let numel = (ty.rows * ty.cols) as i64;
    if idx < 0 || idx >= numel {
        return Err(SimFault::ScalarIndex {
            name: name.to_string(),
            index: idx,
            len: numel as u64,
        });
    }
    let es = ty.dtype.size_bytes() as usize;
    let start = loc.addr + idx as usize * es;
    let aiv = cx.own_aiv();
    if !cx.mem.defined(MemSpace::Vec, aiv, start, es) {
        let cols = (ty.cols as usize).max(1);
        return Err(SimFault::Poison {
            what: "read_tile_scalar",
            tile: name.to_string(),
            element: (idx as usize / cols, idx as usize % cols),
        });
    }
    let buf = cx.mem.buf(MemSpace::Vec, aiv)?;
    let bytes = buf
        .get(start..start + es)
        .ok_or_else(|| SimFault::BufferOverrun {
            tile: name.to_string(),
            space: MemSpace::Vec,
            addr: loc.addr,
            bytes: ty.bytes() as usize,
            buffer: buf.len(),
        })?;
    let v = numeric::decode_i64(ty.dtype, bytes);
    if let Some(r) = &mut cx.rec {
        r.touch(
            Mem::Chip {
                space: MemSpace::Vec,
                aiv,
            },
            start,
            es,
            false,
        );
    }
    Ok(v)
}
