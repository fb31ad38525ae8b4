//! Tile-to-tile moves: `TMOV`, `TEXTRACT` (read at an offset of a larger source) and `TINSERT`
//! (write at an offset of a larger destination), and the Fixpipe forms out of Acc with
//! `AccToVecMode`, `ReluPreMode`, `STPhase`, a per-tensor quantisation word or a per-channel
//! Scaling tile (`TMOV_FP` / `TEXTRACT_FP` / `TINSERT_FP`).

use super::{CodegenError, Emitter, Helper};
use crate::ir::{AccToVecMode, DType, MemSpace, MoveOp, ParamKind, Phase, Scale};

/// `STPhase::Partial` / `STPhase::Final`.
pub(super) fn phase_name(p: Phase) -> &'static str {
    match p {
        Phase::Partial => "STPhase::Partial",
        Phase::Final => "STPhase::Final",
    }
}

fn mode_name(m: AccToVecMode) -> &'static str {
    match m {
        AccToVecMode::SingleModeVec0 => "AccToVecMode::SingleModeVec0",
        AccToVecMode::SingleModeVec1 => "AccToVecMode::SingleModeVec1",
        AccToVecMode::DualModeSplitM => "AccToVecMode::DualModeSplitM",
        AccToVecMode::DualModeSplitN => "AccToVecMode::DualModeSplitN",
    }
}

/// A per-tensor quantisation word as C++: a literal, or a runtime scalar argument (fp32 scales
/// are bit-cast, int32/int64 arguments are pre-encoded words).
pub(super) fn scale_word(e: &mut Emitter<'_>, s: &Scale) -> Result<String, CodegenError> {
    match s {
        Scale::Const(w) => Ok(format!("{:#x}ULL /* scale {} */", w.0, w.scale())),
        Scale::Scalar(p) => {
            let param =
                e.k.try_param(*p)
                    .ok_or_else(|| e.malformed(format!("argument {} is not declared", p.0)))?;
            let name = e.param_names[p.0 as usize].clone();
            match param.kind {
                ParamKind::Scalar { dtype: DType::F32 } => {
                    e.helper(Helper::QuantWord);
                    Ok(format!("quant_word({name})"))
                }
                ParamKind::Scalar {
                    dtype: DType::I32 | DType::I64 | DType::U64,
                } => Ok(format!("static_cast<uint64_t>({name})")),
                _ => Err(e.malformed(format!(
                    "`{}` is not an f32, i32, i64 or u64 scalar, so it cannot be a Fixpipe scale",
                    param.name
                ))),
            }
        }
        Scale::Tile(_) => Err(e.malformed("a Scaling tile is not a scalar word")),
    }
}

pub(super) fn emit(e: &mut Emitter<'_>, op: &MoveOp) -> Result<(), CodegenError> {
    let MoveOp::Move {
        dst,
        src,
        offset,
        acc_to_vec,
        relu,
        scale,
        phase,
    } = op;
    let (ds, ss) = (e.decl(dst.tile)?.ty.space, e.decl(src.tile)?.ty.space);
    let (d, s) = (e.tile(dst)?, e.tile(src)?);
    let (dt, st) = (e.tile_type(dst.tile)?, e.tile_type(src.tile)?);
    let off = offset.as_ref().map(|[r, c]| (e.expr(r), e.expr(c)));
    let fixpipe = ss == MemSpace::Acc;
    if !fixpipe && (*relu || scale.is_some() || phase.is_some() || acc_to_vec.is_some()) {
        return Err(e.unsupported(
            op.name(),
            format!("ReLU, quantisation, phase and AccToVecMode are Fixpipe options (moves out of Acc), not of {ss} -> {ds}"),
        ));
    }
    let comment = if matches!(
        (ss, ds),
        (MemSpace::Acc, MemSpace::Vec) | (MemSpace::Vec, MemSpace::Mat)
    ) {
        format!("  // {}: {ss} -> {ds}", e.loc())
    } else {
        String::new()
    };
    let name = op.instruction(e.k);
    if !fixpipe {
        let line = match off {
            None => format!("{name}({d}, {s});"),
            Some((r, c)) => format!("{name}({d}, {s}, {r}, {c});"),
        };
        e.line(format!("{line}{comment}"));
        return Ok(());
    }
    let relu_mode = if *relu {
        "ReluPreMode::NormalRelu"
    } else {
        "ReluPreMode::NoRelu"
    };
    let mode = acc_to_vec.map(mode_name);
    let ph = phase.map(phase_name);
    if ph.is_some() && off.is_some() {
        return Err(e.unsupported(
            op.name(),
            "phase and offset cannot be combined on a Fixpipe move (ASCEND950.md §5)",
        ));
    }
    // The quantisation operand and the Scaling tile type, if any.
    let (quant, fp_ty) = match scale {
        None => (None, None),
        Some(Scale::Tile(fp)) => {
            let t = e.tile(fp)?;
            (Some(t), Some(e.tile_type(fp.tile)?))
        }
        Some(sc) => (Some(scale_word(e, sc)?), None),
    };
    let mut targs: Vec<String> = Vec::new();
    if let Some(p) = ph {
        targs.push(p.into());
    }
    let explicit_types = mode.is_some() || quant.is_some() || *relu;
    if explicit_types {
        targs.push(dt.clone());
        targs.push(st.clone());
        if let Some(f) = &fp_ty {
            targs.push(f.clone());
        }
        if let Some(m) = mode {
            targs.push(m.into());
        }
        targs.push(relu_mode.into());
    }
    let mut args = vec![d, s];
    if let Some(q) = quant {
        args.push(q);
    }
    if let Some((r, c)) = off {
        args.push(r);
        args.push(c);
    }
    let targs = if targs.is_empty() {
        String::new()
    } else {
        format!("<{}>", targs.join(", "))
    };
    e.line(format!("{name}{targs}({});{comment}", args.join(", ")));
    Ok(())
}
