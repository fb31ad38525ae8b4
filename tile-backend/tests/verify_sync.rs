//! Flags, barriers, cross-core flags and channels (ASCEND950.md §4).

use tile_backend::dsl::{Body, KernelBuilder};
use tile_backend::ir::*;
use tile_backend::verify::{verify, Report, Rule};

fn cube(f: impl FnOnce(&mut Body<'_>)) -> Report {
    let mut kb = KernelBuilder::new("s");
    kb.cube(f);
    verify(&kb.build())
}

fn vector(f: impl FnOnce(&mut Body<'_>)) -> Report {
    let mut kb = KernelBuilder::new("s");
    kb.vector(f);
    verify(&kb.build())
}

use Pipe::*;

mod support;
use support::*;

/// One side of a channel's protocol.
type Side = fn(&mut Body<'_>, ChannelId);

// ---------------------------------------------------------------- flag-event

#[test]
fn event_ids_are_0_to_7() {
    let r = cube(|c| {
        c.set_flag(Mte2, Mte1, 8);
        c.wait_flag(Mte2, Mte1, 8);
    });
    let d = expect_err(
        &r,
        Rule::FlagEvent,
        &["event id 8 is out of range: each pipe pair has 8 (0..=7)"],
    );
    assert_eq!(d.subject, "set_flag");
    assert_eq!(r.errors().filter(|d| d.rule == Rule::FlagEvent).count(), 2);
    expect_clean(&cube(|c| {
        c.set_flag(Mte2, Mte1, 7);
        c.wait_flag(Mte2, Mte1, 7);
    }));
}

// ---------------------------------------------------------------- flag-pipe

#[test]
fn flags_name_pipes_the_core_has() {
    let r = cube(|c| c.set_flag(Mte2, V, 0));
    expect_err(
        &r,
        Rule::FlagPipe,
        &["the cube core has no V pipe (it has MTE2, MTE1, M, FIX, S)"],
    );
    let r = vector(|v| v.wait_flag(M, V, 0));
    expect_err(
        &r,
        Rule::FlagPipe,
        &["the vector core has no M pipe (it has MTE2, V, MTE3, S)"],
    );
    let r = vector(|v| v.barrier(Fix));
    expect_err(&r, Rule::FlagPipe, &["the vector core has no FIX pipe"]);
    // A flag cannot use PIPE_ALL; a barrier can.
    let r = cube(|c| c.set_flag(All, M, 0));
    expect_err(&r, Rule::FlagPipe, &["the cube core has no ALL pipe"]);
    let r = cube(|c| c.set_flag(M, M, 0));
    expect_err(
        &r,
        Rule::FlagPipe,
        &["a flag orders two different pipes; both are M (use pipe_barrier)"],
    );
    expect_clean(&cube(|c| {
        c.barrier(All);
        c.barrier(M);
        c.set_flag(M, Fix, 1);
        c.wait_flag(M, Fix, 1);
    }));
    expect_clean(&vector(|v| {
        v.barrier(All);
        v.set_flag(Mte2, V, 0);
        v.wait_flag(Mte2, V, 0);
        v.set_flag(V, Mte3, 0);
        v.wait_flag(V, Mte3, 0);
    }));
}

// ---------------------------------------------------------------- cross-flag

#[test]
fn cross_core_ids_are_0_to_31_in_cube_code() {
    expect_clean(&cube(|c| {
        c.set_cross_flag(Fix, 0);
        c.set_cross_flag(Fix, 16);
        c.wait_cross_flag(Mte1, 31);
    }));
    let r = cube(|c| c.set_cross_flag(Fix, 32));
    expect_err(
        &r,
        Rule::CrossFlag,
        &[
            "cross-core flag id 32 is out of range for cube code (0..=31",
            "ids 0-15 reach AIV0, 16-31 AIV1",
        ],
    );
}

#[test]
fn cross_core_ids_are_0_to_15_in_vector_code() {
    expect_clean(&vector(|v| {
        v.set_cross_flag(Mte3, 15);
        v.wait_cross_flag(V, 0);
    }));
    let r = vector(|v| v.wait_cross_flag(V, 16));
    expect_err(
        &r,
        Rule::CrossFlag,
        &[
            "cross-core flag id 16 is out of range for vector code (0..=15",
            "offset by 16k automatically",
        ],
    );
    // The pipe must exist on the core too.
    let r = vector(|v| v.set_cross_flag(Fix, 1));
    expect_err(&r, Rule::FlagPipe, &["the vector core has no FIX pipe"]);
}

// ---------------------------------------------------------------- channels

#[test]
fn channel_sides_follow_the_producer() {
    let build = |producer: CoreKind, swap: bool| {
        let mut kb = KernelBuilder::new("ch");
        let ch = kb.channel("scores", producer, 2);
        let (prod, cons): (Side, Side) = (
            |b, ch| {
                b.acquire(ch);
                b.push(ch);
            },
            |b, ch| {
                b.pop(ch);
                b.release(ch);
            },
        );
        let (cube_side, vec_side) = match (producer, swap) {
            (CoreKind::Cube, false) | (CoreKind::Vector, true) => (prod, cons),
            _ => (cons, prod),
        };
        kb.cube(|c| cube_side(c, ch));
        kb.vector(|v| vec_side(v, ch));
        verify(&kb.build())
    };
    expect_clean(&build(CoreKind::Cube, false));
    expect_clean(&build(CoreKind::Vector, false));
    let r = build(CoreKind::Cube, true);
    expect_err(
        &r,
        Rule::ChannelSide,
        &["channel_pop is a consumer operation but channel `scores` is produced by the cube core and this is cube code"],
    );
    expect_err(
        &r,
        Rule::ChannelSide,
        &["channel_acquire is a producer operation but channel `scores` is produced by the cube core and this is vector code"],
    );
    assert_eq!(
        r.errors().filter(|d| d.rule == Rule::ChannelSide).count(),
        4
    );
    let r = build(CoreKind::Vector, true);
    expect_err(
        &r,
        Rule::ChannelSide,
        &[
            "channel_push is a producer operation",
            "produced by the vector core and this is cube code",
        ],
    );
}

#[test]
fn channel_depth_is_at_least_1() {
    let mut kb = KernelBuilder::new("ch");
    kb.channel("p", CoreKind::Vector, 0);
    let r = verify(&kb.build());
    let d = expect_err(
        &r,
        Rule::ChannelDepth,
        &["channel depth must be at least 1, got 0"],
    );
    assert_eq!(d.subject, "channel `p`");
    assert_eq!(d.loc, None);
    let mut kb = KernelBuilder::new("ch");
    kb.channel("p", CoreKind::Vector, 1);
    expect_clean(&verify(&kb.build()));
}
