//! The legal-move table of ASCEND950.md §5: paths, layouts, dtypes, shapes, offsets, Acc -> Vec
//! modes and their restrictions.

use super::{static_dim, Ctx, Rule};
use crate::ir::{round_up, AccToVecMode, Layout, MemSpace, MoveOp, Phase, TileType};

fn dims(ty: &TileType) -> (u64, u64) {
    (
        static_dim(ty.valid_rows).unwrap_or(ty.rows),
        static_dim(ty.valid_cols).unwrap_or(ty.cols),
    )
}

pub(super) fn check(cx: &mut Ctx<'_>, op: &MoveOp) {
    let MoveOp::Move {
        dst,
        src,
        offset,
        acc_to_vec,
        relu,
        scale,
        phase,
    } = op;
    let (Some(sd), Some(dd)) = (cx.tile(src), cx.tile(dst)) else {
        return;
    };
    let (s, d) = (&sd.ty, &dd.ty);
    let path = format!("move {} -> {}", s.space, d.space);
    let rules: Vec<_> = cx.arch.move_rules(s.space, d.space).cloned().collect();
    if rules.is_empty() {
        let why = if s.space == MemSpace::Mat && d.space == MemSpace::Vec {
            format!("Mat -> Vec is not in the documented tables for {} (no source gives its pipe or dtype rules)", cx.machine())
        } else if d.space == MemSpace::Acc {
            "Acc is written only by matmul".to_string()
        } else {
            let from: Vec<&str> = cx
                .arch
                .move_sources(d.space)
                .iter()
                .map(|m| m.name())
                .collect();
            if from.is_empty() {
                format!("no move reaches {}", d.space)
            } else {
                format!("{} is reached only from {}", d.space, from.join(" or "))
            }
        };
        cx.error(
            Rule::MovePath,
            format!("{path} is not a legal path on {}: {why}", cx.machine()),
        );
        return;
    }

    let from_acc = s.space == MemSpace::Acc;
    let acc_to_vec_path = from_acc && d.space == MemSpace::Vec;
    // The dual modes exist only on Acc -> Vec; elsewhere the mode is a move-option error.
    let dual = acc_to_vec.filter(|m| m.is_dual() && acc_to_vec_path);

    // Options that only some paths have.
    if acc_to_vec.is_some() && !acc_to_vec_path {
        cx.error(
            Rule::MoveOption,
            format!("acc_to_vec_mode applies only to Acc -> Vec moves, not to {path}"),
        );
    }
    if *relu && !from_acc {
        cx.error(
            Rule::MoveOption,
            format!("ReLU is a Fixpipe feature of moves out of Acc, not of {path}"),
        );
    }
    if phase.is_some() && !from_acc {
        cx.error(
            Rule::MoveOption,
            format!(
                "a phase (unit flag) belongs to the Fixpipe read of an Acc tile, not to {path}"
            ),
        );
    }
    if scale.is_some() && !from_acc {
        cx.error(
            Rule::MoveOption,
            format!("quantisation (scale) is a Fixpipe feature of moves out of Acc, not of {path}"),
        );
    }
    if phase.is_some() && offset.is_some() && acc_to_vec_path {
        cx.error(
            Rule::PhaseOffset,
            "phase and offset cannot be used together on Acc -> Vec",
        );
    }

    // Shape relation (for the dual modes each AIV's destination is a half tile: no relation).
    let (le, ge) = if dual.is_some() {
        (true, true)
    } else {
        (
            d.rows <= s.rows && d.cols <= s.cols,
            d.rows >= s.rows && d.cols >= s.cols,
        )
    };
    if !le && !ge {
        cx.error(
            Rule::MoveShape,
            format!(
                "destination {}x{} is larger than the source {}x{} in one dimension and smaller in the other: a move either extracts (dst <= src) or inserts (dst >= src)",
                d.rows, d.cols, s.rows, s.cols
            ),
        );
        return;
    }
    let scaled = scale.is_some() && from_acc;
    // Several rows may cover the shape (e.g. NZ inserts vs other inserts into Mat): prefer one that
    // takes both the layouts and the dtypes, then one that takes the layouts.
    let covering: Vec<_> = rules.iter().filter(|r| r.covers(le, ge, scaled)).collect();
    let best = covering
        .iter()
        .find(|r| r.layouts.allows(s.layout, d.layout) && r.dtypes.contains(&(s.dtype, d.dtype)))
        .or_else(|| {
            covering
                .iter()
                .find(|r| r.layouts.allows(s.layout, d.layout))
        })
        .or(covering.first())
        .copied();
    let Some(rule) = best else {
        let shape_ok: Vec<_> = rules.iter().filter(|r| r.covers(le, ge, !scaled)).collect();
        if !shape_ok.is_empty() {
            // The shape is fine; only the presence of a scale is not.
            cx.error(
                Rule::MoveOption,
                if scaled {
                    format!(
                        "{path} has no quantising (scaled) form on {}: only Acc -> Vec moves and stores from Acc take a scale",
                        cx.machine()
                    )
                } else {
                    format!("{path} needs a scale on {}", cx.machine())
                },
            );
        } else {
            cx.error(
                Rule::MoveShape,
                format!(
                    "{path} with destination {}x{} and source {}x{} is not a legal shape: {}",
                    d.rows,
                    d.cols,
                    s.rows,
                    s.cols,
                    describe_shapes(&rules)
                ),
            );
        }
        return;
    };

    if !rule.layouts.allows(s.layout, d.layout) {
        let allowed = match &rule.layouts {
            crate::arch::LayoutRule::Pairs(p) => p
                .iter()
                .map(|(a, b)| format!("{a}->{b}"))
                .collect::<Vec<_>>()
                .join(", "),
            crate::arch::LayoutRule::Unchecked => String::new(),
        };
        cx.error(
            Rule::MoveLayout,
            format!(
                "{path} cannot take {} -> {} on {}; allowed: {allowed}",
                s.layout,
                d.layout,
                cx.machine()
            ),
        );
    }
    if !rule.dtypes.contains(&(s.dtype, d.dtype)) {
        let allowed = rule
            .dtypes
            .iter()
            .map(|(a, b)| {
                if a == b {
                    a.to_string()
                } else {
                    format!("{a}->{b}")
                }
            })
            .collect::<Vec<_>>()
            .join(", ");
        // Say when the other (scaled / unscaled) form of the same path takes this conversion.
        let other_form = rules.iter().any(|r| {
            r.covers(le, ge, !scaled)
                && !r.covers(le, ge, scaled)
                && r.dtypes.contains(&(s.dtype, d.dtype))
        });
        let hint = match (other_form, scaled) {
            (true, false) => " (this conversion needs a scale: quantisation on the Fixpipe)",
            (true, true) => " (this conversion is legal only without a scale)",
            (false, _) => "",
        };
        cx.error(
            Rule::MoveDtype,
            format!(
                "{path}{} cannot convert {} -> {}; allowed: {allowed}{hint}",
                if scaled { " with scale" } else { "" },
                s.dtype,
                d.dtype
            ),
        );
    }

    if let Some(mode) = dual {
        check_dual(cx, mode, s, d, scaled, *phase);
    }

    // Offsets: the copied region lies inside both tiles.
    if let Some([r, c]) = offset {
        if let (Some(r), Some(c)) = (r.as_const(), c.as_const()) {
            if r < 0 || c < 0 {
                cx.error(
                    Rule::MoveShape,
                    format!("move offset [{r}, {c}] is negative"),
                );
            } else {
                let (r, c) = (r as u64, c as u64);
                let (outer, copied, what) = if le {
                    (s, dims(d), "source")
                } else {
                    (d, dims(s), "destination")
                };
                if r + copied.0 > outer.rows || c + copied.1 > outer.cols {
                    cx.error(
                        Rule::MoveShape,
                        format!(
                            "the copied {}x{} region at offset [{r}, {c}] ends at [{}, {}], outside the {what}'s {}x{}",
                            copied.0,
                            copied.1,
                            r + copied.0,
                            c + copied.1,
                            outer.rows,
                            outer.cols
                        ),
                    );
                }
            }
        }
    }
}

fn describe_shapes(rules: &[crate::arch::MoveRule]) -> String {
    use crate::arch::ShapeRel::*;
    let v: Vec<&str> = rules
        .iter()
        .map(|r| match r.shape {
            Any => "any shapes",
            DstLeSrc => "destination no larger than the source",
            DstGtSrc => "destination larger than the source",
            DstGeSrc => "destination at least the source",
        })
        .collect();
    v.join(" or ")
}

fn check_dual(
    cx: &mut Ctx<'_>,
    mode: AccToVecMode,
    s: &TileType,
    d: &TileType,
    scaled: bool,
    phase: Option<Phase>,
) {
    if scaled {
        cx.error(
            Rule::DualSplitScale,
            format!("{mode:?} cannot be combined with quantisation (scale)"),
        );
    }
    if s.layout == Layout::NZ && d.layout == Layout::DN {
        cx.error(
            Rule::DualSplitLayout,
            format!("{mode:?} cannot produce an NZ -> DN output"),
        );
    }
    let (m, n) = dims(s);
    match mode {
        AccToVecMode::DualModeSplitN => {
            if phase.is_some() && n % 32 != 0 {
                cx.error(
                    Rule::DualSplitWidth,
                    format!(
                        "DualModeSplitN under phase with N = {n}, not a multiple of 32, can hang the hardware: pad the Right tile's valid N to {} before the matmul",
                        round_up(n, 32)
                    ),
                );
            }
            let half = round_up(n, 32) / 2;
            if d.cols < half || d.rows < m {
                cx.error(
                    Rule::DualSplitShape,
                    format!(
                        "DualModeSplitN of {m}x{n} writes {m}x{half} (aligned N {} / 2) into each AIV's UB, but the destination is {}x{}",
                        round_up(n, 32),
                        d.rows,
                        d.cols
                    ),
                );
            }
        }
        AccToVecMode::DualModeSplitM => {
            let half = m.div_ceil(2) * 2 / 2;
            if d.rows < half || d.cols < n {
                cx.error(
                    Rule::DualSplitShape,
                    format!(
                        "DualModeSplitM of {m}x{n} writes {half}x{n} (aligned M {} / 2) into each AIV's UB, but the destination is {}x{}",
                        m.div_ceil(2) * 2,
                        d.rows,
                        d.cols
                    ),
                );
            }
        }
        _ => {}
    }
}
