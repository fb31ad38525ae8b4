//! C++ spellings: element types, `Tile` template parameters, `GlobalTensor` views, identifiers.

use super::{CodegenError, Emitter};
use crate::arch::Arch;
use crate::ir::{c0, DType, Expr, GmView, Layout, MemSpace, PadValue, TileType, ValidDim};
use std::collections::BTreeSet;

/// The PTO element type of a dtype.
pub fn ctype(dt: DType) -> &'static str {
    match dt {
        DType::F32 => "float",
        DType::F16 => "half",
        DType::BF16 => "bfloat16_t",
        DType::I8 => "int8_t",
        DType::U8 => "uint8_t",
        DType::I32 => "int32_t",
        DType::U32 => "uint32_t",
        DType::I64 => "int64_t",
        DType::U64 => "uint64_t",
        DType::F8E4M3 => "float8_e4m3_t",
        DType::F8E5M2 => "float8_e5m2_t",
    }
}

/// `TileType::Mat`, ...
fn space_name(space: MemSpace) -> Result<&'static str, String> {
    Ok(match space {
        MemSpace::Mat => "TileType::Mat",
        MemSpace::Left => "TileType::Left",
        MemSpace::Right => "TileType::Right",
        MemSpace::Acc => "TileType::Acc",
        MemSpace::Bias => "TileType::Bias",
        MemSpace::Scaling => "TileType::Scaling",
        MemSpace::Vec => "TileType::Vec",
        MemSpace::Gm => return Err("a tile cannot live in GM".into()),
    })
}

/// (BLayout, SLayout) of a layout: the outer (block) order and the inner box order.
fn blayout_slayout(layout: Layout) -> (&'static str, &'static str) {
    match layout {
        Layout::ND => ("BLayout::RowMajor", "SLayout::NoneBox"),
        Layout::DN => ("BLayout::ColMajor", "SLayout::NoneBox"),
        Layout::NZ => ("BLayout::ColMajor", "SLayout::RowMajor"),
        Layout::ZN => ("BLayout::RowMajor", "SLayout::ColMajor"),
        Layout::ZZ => ("BLayout::RowMajor", "SLayout::RowMajor"),
    }
}

fn pad_name(p: PadValue) -> &'static str {
    match p {
        PadValue::Null => "PadValue::Null",
        PadValue::Zero => "PadValue::Zero",
        PadValue::Max => "PadValue::Max",
        PadValue::Min => "PadValue::Min",
    }
}

fn valid(d: ValidDim) -> String {
    match d {
        ValidDim::Static(n) => n.to_string(),
        ValidDim::Dynamic => "DYNAMIC".into(),
    }
}

/// PTO's fractal size parameter for a tile: 512 (16 x C0 or C0 x 16 boxes, and unboxed tiles),
/// 1024 (the 16 x 16 Acc box). A box PTO cannot describe is an error.
fn fractal_size(ty: &TileType) -> Result<u64, String> {
    if !ty.layout.is_boxed() {
        return Ok(512);
    }
    let Some(f) = ty.fractal.or(ty.layout.default_fractal(ty.dtype, ty.space)) else {
        return Ok(512);
    };
    if ty.space == MemSpace::Acc && f.rows == 16 && f.cols == 16 {
        return Ok(1024);
    }
    let c = c0(ty.dtype);
    let expected = match ty.layout {
        Layout::ZN => (c, 16),
        _ => (16, c),
    };
    if (f.rows, f.cols) == expected {
        Ok(512)
    } else {
        Err(format!(
            "a {}x{} box in a {} tile has no PTO Tile form (PTO boxes are 16 x C0, C0 x 16, or 16 x 16 in Acc)",
            f.rows, f.cols, ty.layout
        ))
    }
}

/// The C++ type of a tile: the A5 `TileLeft` / `TileRight` / `TileAcc` aliases when the tile is
/// exactly what they describe, otherwise the full `Tile<...>` parameter list.
pub fn tile_type_spelling(ty: &TileType, arch: &Arch) -> Result<String, String> {
    let t = ctype(ty.dtype);
    let fs = fractal_size(ty)?;
    let default_box =
        ty.fractal.is_none() || ty.fractal == ty.layout.default_fractal(ty.dtype, ty.space);
    let (vr, vc) = (valid(ty.valid_rows), valid(ty.valid_cols));
    let full =
        ty.valid_rows == ValidDim::Static(ty.rows) && ty.valid_cols == ValidDim::Static(ty.cols);
    let alias = match ty.space {
        MemSpace::Left if ty.layout == arch.left_layout => Some("TileLeft"),
        MemSpace::Right if ty.layout == arch.right_layout => Some("TileRight"),
        MemSpace::Acc if ty.layout == arch.acc_layout && fs == 1024 => Some("TileAcc"),
        _ => None,
    };
    if let Some(a) = alias {
        if default_box && ty.pad == PadValue::Null {
            return Ok(if full {
                format!("{a}<{t}, {}, {}>", ty.rows, ty.cols)
            } else {
                format!("{a}<{t}, {}, {}, {vr}, {vc}>", ty.rows, ty.cols)
            });
        }
    }
    let (bl, sl) = blayout_slayout(ty.layout);
    Ok(format!(
        "Tile<{}, {t}, {}, {}, {bl}, {vr}, {vc}, {sl}, {fs}, {}>",
        space_name(ty.space)?,
        ty.rows,
        ty.cols,
        pad_name(ty.pad)
    ))
}

/// `a_l1` -> `AL1`, `s_acc` -> `SAcc`.
pub(crate) fn camel(name: &str) -> String {
    let mut s = String::new();
    for part in name.split(|c: char| !c.is_ascii_alphanumeric()) {
        let mut ch = part.chars();
        if let Some(f) = ch.next() {
            s.push(f.to_ascii_uppercase());
            s.extend(ch);
        }
    }
    if s.is_empty() {
        s.push_str("Tile");
    }
    if s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, 'T');
    }
    s
}

/// A C++ identifier made of `name`'s characters.
pub(crate) fn sanitize(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, 'v');
    }
    // Identifiers with a double underscore or a leading underscore + capital are reserved.
    while s.contains("__") {
        s = s.replace("__", "_");
    }
    if s.starts_with('_') {
        s.insert(0, 'v');
    }
    s
}

/// Identifiers the emitted code must not redeclare: C++ keywords, PTO names, our locals.
pub(crate) fn reserved() -> BTreeSet<String> {
    const WORDS: &[&str] = &[
        // C++ keywords and common library names.
        "alignas",
        "alignof",
        "and",
        "asm",
        "auto",
        "bool",
        "break",
        "case",
        "catch",
        "char",
        "class",
        "const",
        "constexpr",
        "continue",
        "decltype",
        "default",
        "delete",
        "do",
        "double",
        "else",
        "enum",
        "explicit",
        "export",
        "extern",
        "false",
        "float",
        "for",
        "friend",
        "goto",
        "if",
        "inline",
        "int",
        "long",
        "mutable",
        "namespace",
        "new",
        "noexcept",
        "not",
        "nullptr",
        "operator",
        "or",
        "private",
        "protected",
        "public",
        "register",
        "return",
        "short",
        "signed",
        "sizeof",
        "static",
        "struct",
        "switch",
        "template",
        "this",
        "throw",
        "true",
        "try",
        "typedef",
        "typeid",
        "typename",
        "union",
        "unsigned",
        "using",
        "virtual",
        "void",
        "volatile",
        "while",
        "xor",
        "std",
        "main",
        "int8_t",
        "uint8_t",
        "int16_t",
        "int32_t",
        "uint32_t",
        "int64_t",
        "uint64_t",
        "half",
        "bfloat16_t",
        "float8_e4m3_t",
        "float8_e5m2_t",
        "size_t",
        "min",
        "max",
        // PTO-ISA and CCE names.
        "pto",
        "Tile",
        "TileLeft",
        "TileRight",
        "TileAcc",
        "TileType",
        "BLayout",
        "SLayout",
        "Layout",
        "PadValue",
        "Shape",
        "Stride",
        "GlobalTensor",
        "DYNAMIC",
        "TileConfig",
        "RoundMode",
        "AccToVecMode",
        "ReluPreMode",
        "STPhase",
        "AccPhase",
        "AtomicType",
        "RecordEvent",
        "Event",
        "Op",
        "AICORE",
        "stream",
        "block_dim",
        "get_block_idx",
        "get_block_num",
        "get_subblockid",
        "set_flag",
        "wait_flag",
        "pipe_barrier",
        "set_intra_block",
        "wait_intra_block",
        // Locals and helpers of the emitted code.
        "block_idx",
        "block_num",
        "sub_block_idx",
        "min64",
        "max64",
        "div_euclid",
        "rem_euclid",
        "quant_word",
    ];
    WORDS.iter().map(|s| s.to_string()).collect()
}

/// One dimension of a `Shape` / `Stride`: a template constant or `DYNAMIC` plus a runtime value.
enum Dim {
    Static(i64),
    Dynamic(String),
}

impl Emitter<'_> {
    fn dim(&mut self, e: &Expr) -> Dim {
        match e.as_const() {
            Some(v) if v >= 0 => Dim::Static(v),
            _ => Dim::Dynamic(self.expr(e)),
        }
    }

    /// Declares a `GlobalTensor` for a GM view in the current scope; returns the variable name
    /// and its type alias.
    pub(crate) fn gm_view(&mut self, v: &GmView) -> Result<(String, String), CodegenError> {
        let p = self
            .k
            .try_param(v.tensor)
            .ok_or_else(|| self.malformed(format!("argument {} is not declared", v.tensor.0)))?;
        let dtype = match &p.kind {
            crate::ir::ParamKind::Tensor { dtype, .. } => *dtype,
            crate::ir::ParamKind::Scalar { .. } => {
                return Err(self.malformed(format!("`{}` is a scalar, not a GM tensor", p.name)))
            }
        };
        let one = Expr::Const(1);
        let (shape, stride, layout): ([Expr; 5], [Expr; 5], &str) = match v.layout {
            Layout::ND => (
                [
                    one.clone(),
                    one.clone(),
                    one.clone(),
                    v.rows.clone(),
                    v.cols.clone(),
                ],
                [
                    one.clone(),
                    one.clone(),
                    one.clone(),
                    v.stride.clone(),
                    one.clone(),
                ],
                "",
            ),
            Layout::DN => (
                [
                    one.clone(),
                    one.clone(),
                    one.clone(),
                    v.rows.clone(),
                    v.cols.clone(),
                ],
                [
                    one.clone(),
                    one.clone(),
                    one.clone(),
                    one.clone(),
                    v.stride.clone(),
                ],
                ", Layout::DN",
            ),
            Layout::NZ => {
                let (Some(r), Some(c)) = (v.rows.as_const(), v.cols.as_const()) else {
                    return Err(CodegenError::Unsupported {
                        location: self.loc(),
                        what: "GM view".into(),
                        reason: "an NZ view of GM needs a static shape".into(),
                    });
                };
                let c0 = c0(dtype) as i64;
                (
                    [1, c / c0, r / 16, 16, c0].map(Expr::Const),
                    [r * c, r * c0, 16 * c0, c0, 1].map(Expr::Const),
                    ", Layout::NZ",
                )
            }
            Layout::ZN | Layout::ZZ => {
                return Err(CodegenError::Unsupported {
                    location: self.loc(),
                    what: "GM view".into(),
                    reason: format!(
                        "PTO GlobalTensor has ND, DN and NZ layouts, not {}",
                        v.layout
                    ),
                })
            }
        };
        let shape: Vec<Dim> = shape.iter().map(|e| self.dim(e)).collect();
        let stride: Vec<Dim> = stride.iter().map(|e| self.dim(e)).collect();
        let tmpl = |dims: &[Dim]| {
            dims.iter()
                .map(|d| match d {
                    Dim::Static(v) => v.to_string(),
                    Dim::Dynamic(_) => "DYNAMIC".into(),
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let runtime = |dims: &[Dim]| {
            dims.iter()
                .filter_map(|d| match d {
                    Dim::Dynamic(s) => Some(s.clone()),
                    Dim::Static(_) => None,
                })
                .collect::<Vec<_>>()
        };
        let spelling = format!(
            "GlobalTensor<{}, pto::Shape<{}>, pto::Stride<{}>{layout}>",
            ctype(dtype),
            tmpl(&shape),
            tmpl(&stride)
        );
        let pname = self.param_names[v.tensor.0 as usize].clone();
        let ty = self.extra_type(&format!("Gm{}", camel(&p.name)), spelling);
        let var = self.unique(&format!("{pname}_gm"));
        let ptr = match v.offset.as_const() {
            Some(0) => pname,
            _ => format!("{pname} + {}", self.expr_prec(&v.offset, 5)),
        };
        let (rs, rt) = (runtime(&shape), runtime(&stride));
        let mut args = vec![ptr];
        if !rs.is_empty() || !rt.is_empty() {
            args.push(format!("{ty}::Shape({})", rs.join(", ")));
        }
        if !rt.is_empty() {
            args.push(format!("{ty}::Stride({})", rt.join(", ")));
        }
        self.line(format!("{ty} {var}({});", args.join(", ")));
        Ok((var, ty))
    }
}
