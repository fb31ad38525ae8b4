//! The sort instructions (PTO-ISA `include/pto/common/pto_instr.hpp`): `TSORT32(dst, src, idx
//! [, tmp])`; `TMRGSORT(dst, src, blockLen)`; the multi-list `TMRGSORT<Dst, Tmp, Src0, ..,
//! exhausted>(dst, executedNumList, tmp, src0, ..)` in its non-exhausted mode, with a
//! `MrgSortExecutedNumList` of its own (unread there).

use super::{CodegenError, Emitter};
use crate::ir::SortOp;

pub(super) fn emit(e: &mut Emitter<'_>, op: &SortOp) -> Result<(), CodegenError> {
    let name = op.instruction(e.k);
    let line = match op {
        SortOp::Sort32 { dst, src, idx, tmp } => {
            let (d, s, i) = (e.tile(dst)?, e.tile(src)?, e.tile(idx)?);
            match tmp {
                Some(t) => {
                    let t = e.tile(t)?;
                    format!("{name}({d}, {s}, {i}, {t});")
                }
                None => format!("{name}({d}, {s}, {i});"),
            }
        }
        SortOp::MrgSort {
            dst,
            src,
            block_len,
        } => {
            let (d, s) = (e.tile(dst)?, e.tile(src)?);
            format!("{name}({d}, {s}, {block_len}u);")
        }
        SortOp::MrgSortLists { dst, tmp, srcs } => {
            let mut types = vec![e.tile_type(dst.tile)?, e.tile_type(tmp.tile)?];
            let mut args = vec![];
            for s in srcs {
                types.push(e.tile_type(s.tile)?);
                args.push(e.tile(s)?);
            }
            let (d, t) = (e.tile(dst)?, e.tile(tmp)?);
            let list = e.unique("executed");
            format!(
                "{{ MrgSortExecutedNumList {list}; {name}<{}, false>({d}, {list}, {t}, {}); }}",
                types.join(", "),
                args.join(", ")
            )
        }
    };
    e.line(line);
    Ok(())
}
