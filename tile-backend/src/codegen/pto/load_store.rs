//! GM <-> tile: `TLOAD` (GM -> Vec/Mat) and `TSTORE` (Vec -> GM on MTE3, Acc -> GM through the
//! Fixpipe with unit-flag phase, ReLU, atomic add and quantisation; `TSTORE_FP` with a
//! per-channel Scaling tile).

use super::moves::{phase_name, scale_word};
use super::{CodegenError, Emitter};
use crate::ir::{LoadStoreOp, MemSpace, Scale};

pub(super) fn emit(e: &mut Emitter<'_>, op: &LoadStoreOp) -> Result<(), CodegenError> {
    match op {
        LoadStoreOp::Load { dst, src } => {
            let (view, _) = e.gm_view(src)?;
            let t = e.tile(dst)?;
            e.line(format!("TLOAD({t}, {view});"));
        }
        LoadStoreOp::Store {
            dst,
            src,
            relu,
            scale,
            atomic_add,
            phase,
        } => {
            let space = e.decl(src.tile)?.ty.space;
            let (view, gm_ty) = e.gm_view(dst)?;
            let t = e.tile(src)?;
            let src_ty = e.tile_type(src.tile)?;
            let atomic = if *atomic_add {
                "AtomicType::AtomicAdd"
            } else {
                "AtomicType::AtomicNone"
            };
            let relu_mode = if *relu {
                "ReluPreMode::NormalRelu"
            } else {
                "ReluPreMode::NoRelu"
            };
            match space {
                MemSpace::Vec => {
                    if *relu || scale.is_some() || phase.is_some() {
                        return Err(e.unsupported(
                            op.name(),
                            "ReLU, quantisation and phase apply to Fixpipe stores (from Acc) only",
                        ));
                    }
                    if *atomic_add {
                        e.line(format!("TSTORE<{src_ty}, {gm_ty}, {atomic}>({view}, {t});"));
                    } else {
                        e.line(format!("TSTORE({view}, {t});"));
                    }
                }
                MemSpace::Acc => {
                    let ph = phase.map(phase_name);
                    match scale {
                        Some(Scale::Tile(fp)) => {
                            if ph.is_some() {
                                return Err(e.unsupported(
                                    op.name(),
                                    "PTO has no unit-flag (phase) form of TSTORE_FP; order the store with an M -> FIX flag instead",
                                ));
                            }
                            let fp_ty = e.tile_type(fp.tile)?;
                            let f = e.tile(fp)?;
                            e.line(format!(
                                "TSTORE_FP<{src_ty}, {gm_ty}, {fp_ty}, {atomic}, {relu_mode}>({view}, {t}, {f});"
                            ));
                        }
                        Some(s) => {
                            let w = scale_word(e, s)?;
                            let head = ph.map(|p| format!("{p}, ")).unwrap_or_default();
                            e.line(format!(
                                "TSTORE<{head}{src_ty}, {gm_ty}, {atomic}, {relu_mode}>({view}, {t}, {w});"
                            ));
                        }
                        None => {
                            let line = match (ph, *atomic_add, *relu) {
                                (None, false, false) => format!("TSTORE({view}, {t});"),
                                (Some(p), false, false) => format!("TSTORE<{p}>({view}, {t});"),
                                (None, _, false) => {
                                    format!("TSTORE<{src_ty}, {gm_ty}, {atomic}>({view}, {t});")
                                }
                                (Some(p), _, false) => format!(
                                    "TSTORE<{p}, {src_ty}, {gm_ty}, {atomic}>({view}, {t});"
                                ),
                                (None, _, true) => format!(
                                    "TSTORE<{src_ty}, {gm_ty}, {atomic}, {relu_mode}>({view}, {t});"
                                ),
                                (Some(p), _, true) => format!(
                                    "TSTORE<{p}, {src_ty}, {gm_ty}, {atomic}, {relu_mode}>({view}, {t});"
                                ),
                            };
                            e.line(line);
                        }
                    }
                }
                other => {
                    return Err(e.unsupported(
                        op.name(),
                        format!("GM stores leave from Vec (MTE3) or Acc (Fixpipe), not {other}"),
                    ))
                }
            }
        }
    }
    Ok(())
}
