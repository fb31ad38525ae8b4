//! Structure: unknown ids, variable scopes, scalar arguments, loop steps and which core may touch
//! which space.

use tile_backend::dsl::KernelBuilder;
use tile_backend::ir::*;
use tile_backend::verify::{verify, Rule};

use DType::*;
use Layout::*;
use MemSpace::*;

mod support;
use support::*;

fn vt(rows: u64, cols: u64) -> TileType {
    TileType::new(Vec, F32, rows, cols, ND)
}

// ---------------------------------------------------------------- unknown ids

#[test]
fn unknown_tile_id_is_reported() {
    let mut kb = KernelBuilder::new("u");
    let a = kb.tile("a", vt(8, 8));
    kb.vector(|v| v.add(a, a, TileId(5)));
    let r = verify(&kb.build());
    let d = expect_err(
        &r,
        Rule::UnknownTile,
        &["tile id 5 is not declared (the kernel has 1 tiles)"],
    );
    assert_eq!(d.subject, "binary");
    assert_eq!(
        d.loc,
        Some(OpLoc {
            section: CoreKind::Vector,
            index: 0
        })
    );
}

#[test]
fn unknown_param_is_reported() {
    let mut kb = KernelBuilder::new("u");
    let a = kb.tile("a", vt(8, 8));
    kb.vector(|v| {
        v.load(a, GmView::nd(ParamId(3), 0, 8, 8, 8));
        v.set_validshape(a, Expr::Param(ParamId(4)), 8);
    });
    let r = verify(&kb.build());
    expect_err(&r, Rule::UnknownParam, &["argument 3 is not declared"]);
    expect_err(&r, Rule::UnknownParam, &["argument 4 is not declared"]);
}

#[test]
fn unknown_channel_is_reported() {
    let mut kb = KernelBuilder::new("u");
    kb.channel("c", CoreKind::Cube, 2);
    kb.vector(|v| v.pop(ChannelId(1)));
    let r = verify(&kb.build());
    expect_err(
        &r,
        Rule::UnknownChannel,
        &["channel id 1 is not declared (the kernel has 1 channels)"],
    );
}

// ---------------------------------------------------------------- var-scope

#[test]
fn loop_variable_used_after_its_loop_is_out_of_scope() {
    let mut kb = KernelBuilder::new("scope");
    let x = kb.input("x", F32, [64u64, 8]);
    let t = kb.tile_group("t", vt(8, 8), 2);
    let mut leaked = None;
    kb.vector(|v| {
        v.for_range("i", 0, 8, 1, |v, i| {
            v.load(t.at(i % 2), GmView::nd(x, i * 64, 8, 8, 8));
            leaked = Some(i);
        });
        if let Some(i) = leaked {
            v.load(t.at(i % 2), GmView::nd(x, 0, 8, 8, 8));
        }
    });
    let r = verify(&kb.build());
    let i = leaked.expect("loop body ran");
    let msg = format!(
        "variable v{} is used outside the loop or branch that defines it",
        i.0
    );
    let d = expect_err(&r, Rule::VarScope, &[&msg]);
    assert_eq!(d.loc.map(|l| l.index), Some(1));
    assert_eq!(r.errors().count(), 1, "{r}");
}

#[test]
fn let_inside_a_branch_does_not_escape_and_read_scalar_binds() {
    let mut kb = KernelBuilder::new("scope");
    let n = kb.scalar("n", I32);
    let lens = kb.input("lens", I32, [4u64]);
    let a = kb.tile("a", vt(8, 8).dynamic());
    let mut inner = None;
    kb.vector(|v| {
        let len = v.read_scalar("len", lens, Expr::BlockIdx);
        v.if_(Expr::Param(n).gt(0), |v| {
            let k = v.let_("k", Expr::Var(len).min(8));
            v.set_validshape(a, k, 8);
            inner = Some(k);
        });
        v.set_validshape(a, len, 8);
    });
    expect_clean(&verify(&kb.build()));
    // Using `k` after the branch is an error.
    let mut kb = KernelBuilder::new("scope");
    let a = kb.tile("a", vt(8, 8).dynamic());
    let mut k = None;
    kb.vector(|v| {
        v.if_(Expr::SubBlockIdx.eq_(0), |v| {
            k = Some(v.let_("k", 4));
        });
        if let Some(k) = k {
            v.set_validshape(a, k, 8);
        }
    });
    let k = k.expect("branch built");
    let msg = format!("variable v{} is used outside", k.0);
    expect_err(&verify(&kb.build()), Rule::VarScope, &[&msg]);
}

#[test]
fn use_before_read_scalar_is_out_of_scope() {
    let mut kb = KernelBuilder::new("scope");
    let lens = kb.input("lens", I32, [4u64]);
    let a = kb.tile("a", vt(8, 8).dynamic());
    kb.vector(|v| {
        // v0 is the variable read_scalar is about to define.
        v.set_validshape(a, VarId(0), 8);
        v.read_scalar("len", lens, 0);
    });
    let r = verify(&kb.build());
    expect_err(&r, Rule::VarScope, &["variable v0 is used outside"]);
}

// ---------------------------------------------------------------- scalar-param

#[test]
fn index_expressions_need_integer_scalars() {
    let mut kb = KernelBuilder::new("sp");
    let f = kb.scalar("scale", F32);
    let x = kb.input("x", F32, [8u64, 8]);
    let a = kb.tile("a", vt(8, 8).dynamic());
    kb.vector(|v| {
        v.set_validshape(a, Expr::Param(f), 8);
        v.set_validshape(a, 8, Expr::Param(x));
    });
    let r = verify(&kb.build());
    expect_err(
        &r,
        Rule::ScalarParam,
        &["argument `scale` is a f32 scalar; index expressions need an integer scalar"],
    );
    expect_err(
        &r,
        Rule::ScalarParam,
        &["argument `x` is a GM tensor, not a scalar; read an element with read_scalar"],
    );
}

#[test]
fn tensors_and_scalar_operands_are_not_interchangeable() {
    let mut kb = KernelBuilder::new("sp");
    let s = kb.scalar("s", I32);
    let x = kb.input("x", F32, [8u64, 8]);
    let a = kb.tile("a", vt(8, 8));
    kb.vector(|v| {
        v.load(a, GmView::nd(s, 0, 8, 8, 8));
        v.muls(a, a, x);
    });
    let r = verify(&kb.build());
    expect_err(
        &r,
        Rule::ScalarParam,
        &["argument `s` is a scalar where a GM tensor is needed"],
    );
    expect_err(
        &r,
        Rule::ScalarParam,
        &["argument `x` is a GM tensor; a vector scalar operand must be a scalar argument"],
    );
    // A float scalar as a vector operand is what it is for.
    let mut kb = KernelBuilder::new("sp");
    let f = kb.scalar("f", F32);
    let a = kb.tile("a", vt(8, 8));
    kb.vector(|v| v.muls(a, a, f));
    expect_clean(&verify(&kb.build()));
}

// ---------------------------------------------------------------- loop-step

#[test]
fn loop_step_must_be_positive() {
    for step in [0i64, -1] {
        let mut kb = KernelBuilder::new("ls");
        kb.vector(|v| v.for_range("i", 0, 8, step, |_, _| {}));
        let r = verify(&kb.build());
        let msg = format!("loop step must be positive, got {step}");
        let d = expect_err(&r, Rule::LoopStep, &[&msg]);
        assert_eq!(d.subject, "for");
    }
    let mut kb = KernelBuilder::new("ls");
    let n = kb.scalar("n", I64);
    kb.vector(|v| v.for_range("i", 0, Expr::Param(n), 3, |_, _| {}));
    expect_clean(&verify(&kb.build()));
}

// ---------------------------------------------------------------- section-space

#[test]
fn vector_code_cannot_touch_an_l1_tile() {
    let mut kb = KernelBuilder::new("ss");
    let m = kb.tile(
        "k_l1",
        TileType::new(Mat, F16, 32, 32, NZ).pad(PadValue::Zero),
    );
    kb.vector(|v| v.fillpad(m));
    let r = verify(&kb.build());
    expect_err(
        &r,
        Rule::SectionSpace,
        &[
            "vector code cannot touch Mat tile `k_l1`: L1 belongs to the cube core",
            "Fixpipe moves Acc -> Vec, MTE3 moves Vec -> Mat, or GM",
        ],
    );
}

#[test]
fn cube_code_cannot_touch_a_vec_tile() {
    let mut kb = KernelBuilder::new("ss");
    let x = kb.input("x", F32, [8u64, 8]);
    let v = kb.tile("ub", vt(8, 8));
    kb.cube(|c| c.load(v, GmView::nd(x, 0, 8, 8, 8)));
    let r = verify(&kb.build());
    expect_err(
        &r,
        Rule::SectionSpace,
        &["cube code cannot touch Vec tile `ub`: UB belongs to the vector cores"],
    );
    // Not even as the source of a Vec -> Mat move (that is MTE3, vector code).
    let mut kb = KernelBuilder::new("ss");
    let v = kb.tile("ub", TileType::new(Vec, F16, 32, 32, ND));
    let m = kb.tile("l1", TileType::new(Mat, F16, 32, 32, NZ));
    kb.cube(|c| {
        c.mov(m, v);
    });
    expect_err(
        &verify(&kb.build()),
        Rule::SectionSpace,
        &["cube code cannot touch Vec tile `ub`"],
    );
}

#[test]
fn crossing_moves_are_the_exceptions() {
    // Cube code writes a Vec tile through the Fixpipe; vector code writes L1 through MTE3.
    let mut kb = KernelBuilder::new("ss");
    let acc = kb.tile("acc", TileType::new(Acc, F32, 32, 32, NZ));
    let s = kb.tile("s", TileType::new(Vec, F32, 16, 32, ND));
    let p = kb.tile("p", TileType::new(Vec, F16, 16, 32, ND));
    let p_l1 = kb.tile("p_l1", TileType::new(Mat, F16, 16, 32, NZ));
    kb.cube(|c| {
        c.mov(s, acc).mode(AccToVecMode::DualModeSplitM);
    });
    kb.vector(|v| {
        v.cast(p, s, RoundMode::Rint);
        v.mov(p_l1, p);
    });
    let r = verify(&kb.build());
    expect_no(&r, Rule::SectionSpace);
    expect_clean(&r);
    // But the Acc source of that Fixpipe move is still the cube's: vector code cannot issue it.
    let mut kb = KernelBuilder::new("ss");
    let acc = kb.tile("acc", TileType::new(Acc, F32, 32, 32, NZ));
    let s = kb.tile("s", TileType::new(Vec, F32, 32, 32, ND));
    kb.vector(|v| {
        v.mov(s, acc);
    });
    expect_err(
        &verify(&kb.build()),
        Rule::SectionSpace,
        &["vector code cannot touch Acc tile `acc`: L0C belongs to the cube core"],
    );
}

#[test]
fn ops_report_their_pre_order_index() {
    let mut kb = KernelBuilder::new("loc");
    kb.cube(|c| {
        c.set_flag(Pipe::Mte2, Pipe::Mte1, 0);
        c.for_range("i", 0, 2, 1, |c, _| {
            c.wait_flag(Pipe::Mte2, Pipe::Mte1, 0);
            c.set_flag(Pipe::Mte2, Pipe::Mte1, 9);
        });
    });
    let r = verify(&kb.build());
    let d = expect_err(&r, Rule::FlagEvent, &["event id 9"]);
    assert_eq!(
        d.loc,
        Some(OpLoc {
            section: CoreKind::Cube,
            index: 2
        })
    );
    assert!(
        d.to_string()
            .starts_with("error[flag-event] cube op #2 (set_flag): "),
        "{d}"
    );
}

// ---------------------------------------------------------------- coverage of the rule list

/// The test file that breaks and satisfies each rule. The match is exhaustive: a new `Rule`
/// variant does not compile here until it is given a file (which must then mention it).
fn covered_in(rule: Rule) -> &'static str {
    use Rule::*;
    match rule {
        UnknownTile | UnknownParam | UnknownChannel | VarScope | ScalarParam | LoopStep
        | SectionSpace => include_str!("verify_structure.rs"),
        TileShape | Capacity | Alignment | LoadSpace | LoadLayout | LoadDtype | ViewShape
        | StoreSource | StoreLayout | StoreDtype => include_str!("verify_memory.rs"),
        MovePath | MoveLayout | MoveDtype | MoveShape | MoveOption | DualSplitScale
        | DualSplitLayout | DualSplitWidth | DualSplitShape | PhaseOffset => {
            include_str!("verify_moves.rs")
        }
        AccStride => include_str!("verify_acc_stride.rs"),
        MatmulSpace | MatmulLayout | MatmulDtype | MatmulShape | MatmulBias => {
            include_str!("verify_matmul.rs")
        }
        ScaleTile | ScaleScalar => include_str!("verify_quant.rs"),
        ReinterpretAttrs | ReinterpretSource | ReinterpretAlign | ReinterpretSize
        | ReinterpretInherit => include_str!("verify_reinterpret.rs"),
        GatherDtype | GatherIndices | GatherBlockTable | GatherSize | GatherDst => {
            include_str!("verify_gather.rs")
        }
        VectorSpace | VectorShape | VectorDtype | VectorLayout | BroadcastOperand | ReducePad
        | ReduceLayout | PadValue | FillpadLayout | ValidShape => {
            include_str!("verify_vector.rs")
        }
        SortSpace | SortLayout | SortDtype | SortShape | SortTmp | SortRepeat | SortLists
        | SortUb => include_str!("verify_sort.rs"),
        ScalarTileSpace | ScalarTileDtype | ScalarTileIndex => include_str!("verify_scalar.rs"),
        FlagEvent | FlagPipe | CrossFlag | ChannelSide | ChannelDepth => {
            include_str!("verify_sync.rs")
        }
        ParamShape | ParamRange | ConstExpr | TileRange | TileSlot | ViewRange => {
            include_str!("verify_ranges.rs")
        }
    }
}

#[test]
fn every_rule_is_exercised_by_its_family_file() {
    let all = Rule::ALL;
    let codes: std::collections::HashSet<String> = all.iter().map(|r| r.code()).collect();
    assert_eq!(codes.len(), all.len(), "rule codes are unique");
    assert!(codes.contains("dual-split-width") && codes.contains("move-path"));
    for &rule in all {
        // Asserted as an expected diagnostic (expect_err / find / errors().filter) in its file.
        let needle = format!("Rule::{rule:?},");
        assert!(
            covered_in(rule).contains(&needle),
            "{rule:?} is not asserted in its family's test file"
        );
    }
}
