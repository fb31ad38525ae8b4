//! Intra-core flags: the must-be-ordered dataflow analysis and the placement of set/wait pairs.

use super::access::{conflict, op_accesses, Access, Loops};
use super::SyncError;
use crate::arch::Arch;
use crate::ir::{
    CoreKind, Expr, Kernel, MemSpace, Op, Phase, Pipe, Stmt, SyncOp, TileId, UnitFlag, VarId,
};
use std::collections::{BTreeMap, BTreeSet};

/// The pipes whose ordering the pass tracks: every pipe (`All` is not one). Of the S-pipe ops,
/// only a scalar read of a UB tile (`read_tile_scalar`) touches a tile, so it is the one S op
/// that takes flags: MTE2 -> S after the load that fills its tile, S -> MTE2 before a later
/// overwrite; GM scalar reads and writes and `set_validshape` stay untracked.
const PIPES: [Pipe; 7] = Pipe::ALL;

/// A fixed-size bit set of op ids.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Bits(Vec<u64>);

impl Bits {
    fn new(n: usize) -> Self {
        Bits(vec![0; n.div_ceil(64)])
    }
    fn insert(&mut self, i: usize) {
        if let Some(w) = self.0.get_mut(i / 64) {
            *w |= 1 << (i % 64);
        }
    }
    fn union_with(&mut self, o: &Bits) {
        for (a, b) in self.0.iter_mut().zip(&o.0) {
            *a |= b;
        }
    }
    fn intersect_with(&mut self, o: &Bits) {
        for (a, b) in self.0.iter_mut().zip(&o.0) {
            *a &= b;
        }
    }
    fn clear(&mut self) {
        self.0.iter_mut().for_each(|w| *w = 0);
    }
    /// Members of `self & o`.
    fn and_iter<'a>(&'a self, o: &'a Bits) -> impl Iterator<Item = usize> + 'a {
        self.0
            .iter()
            .zip(&o.0)
            .enumerate()
            .flat_map(|(wi, (a, b))| {
                let w = a & b;
                (0..64)
                    .filter(move |bit| w >> bit & 1 == 1)
                    .map(move |bit| wi * 64 + bit)
            })
    }
}

/// A statement of the program under transformation: original ops carry their id; inserted
/// flags refer to their pair.
// Ops dominate, so they are stored inline (as in `Stmt`).
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
enum Node {
    Op {
        id: usize,
        op: Op,
    },
    Ins {
        pair: usize,
        set: bool,
    },
    For {
        /// Stable id of the loop (positions shift as flags are inserted).
        lid: usize,
        var: VarId,
        start: Expr,
        end: Expr,
        step: i64,
        body: Vec<Node>,
    },
    If {
        cond: Expr,
        then_body: Vec<Node>,
        else_body: Vec<Node>,
    },
    Let {
        var: VarId,
        value: Expr,
    },
}

/// One step of a node's position: an index in the current block, or which block of the node
/// just selected to enter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Idx(usize),
    Body,
    Then,
    Else,
}

/// An Acc buffer named by a reference: its root allocation and the slot expression as written.
type AccBuf = (TileId, String);

/// The unit-flag (phase) role of an op on an Acc tile.
#[derive(Debug, Clone)]
enum Unit {
    /// A matmul with `phase: Final` into this Acc buffer.
    Set(AccBuf),
    /// A Fixpipe move or store with `phase: Final` out of this Acc buffer.
    Wait(AccBuf),
}

/// What the analysis knows of an op.
#[derive(Debug, Clone)]
struct Info {
    /// Tracked pipe (index into [`PIPES`]), `None` for sync ops and the scalar ops that touch
    /// no tile.
    pipe: Option<usize>,
    /// Accesses that later ops must be ordered after.
    src: Vec<Access>,
    /// Accesses that must be ordered after earlier ops.
    snk: Vec<Access>,
    unit: Option<Unit>,
    name: &'static str,
}

/// An inserted flag: its pipes (the event is chosen at the end).
#[derive(Debug, Clone, Copy)]
struct Pair {
    src: Pipe,
    dst: Pipe,
}

/// A flag slot: an author's `(src, dst, event)`, an inserted pair, or the unit flag of an Acc
/// allocation.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    Author(Pipe, Pipe, u8),
    Ins(usize),
    Unit(AccBuf),
}

/// The analysis state at a program point.
///
/// `unord[p]` holds the ops whose latest executed instance may NOT be ordered before the next
/// instruction of pipe `p` (ops never executed are vacuously ordered). `tokens[k]` is, for a flag
/// that is surely set, the ops its set did not cover; an absent key is a flag that may be unset.
#[derive(Debug, Clone, PartialEq, Eq)]
struct State {
    unord: Vec<Bits>,
    tokens: BTreeMap<Key, Bits>,
}

impl State {
    fn new(n: usize) -> Self {
        State {
            unord: vec![Bits::new(n); PIPES.len()],
            tokens: BTreeMap::new(),
        }
    }

    /// The state of a join point: whatever holds on both paths.
    fn meet(&self, o: &State) -> State {
        let mut unord = self.unord.clone();
        for (a, b) in unord.iter_mut().zip(&o.unord) {
            a.union_with(b);
        }
        let mut tokens = BTreeMap::new();
        for (k, a) in &self.tokens {
            if let Some(b) = o.tokens.get(k) {
                let mut t = a.clone();
                t.union_with(b);
                tokens.insert(k.clone(), t);
            }
        }
        State { unord, tokens }
    }
}

struct Analysis<'a> {
    infos: &'a [Info],
    /// For each op `b`: the ops whose accesses conflict with `b`'s on another pipe.
    conf: &'a [Bits],
    pairs: &'a [Pair],
    found: BTreeSet<(usize, usize)>,
}

impl Analysis<'_> {
    fn run(&mut self, nodes: &[Node], st: &mut State) {
        for node in nodes {
            match node {
                Node::Op { id, op } => self.op(*id, op, st),
                Node::Ins { pair, set } => {
                    let Some(p) = self.pairs.get(*pair) else {
                        continue;
                    };
                    let (Some(s), Some(d)) = (p.src.index(), p.dst.index()) else {
                        continue;
                    };
                    if *set {
                        st.tokens.insert(Key::Ins(*pair), st.unord[s].clone());
                    } else if let Some(t) = st.tokens.remove(&Key::Ins(*pair)) {
                        st.unord[d].intersect_with(&t);
                    }
                }
                Node::For { body, .. } => {
                    // Greatest fixed point of head = entry ⊓ body(head); the loop exits from
                    // its head (zero or more iterations).
                    let entry = st.clone();
                    let mut head = entry.clone();
                    loop {
                        let mut s = head.clone();
                        self.run(body, &mut s);
                        let next = entry.meet(&s);
                        if next == head {
                            break;
                        }
                        head = next;
                    }
                    *st = head;
                }
                Node::If {
                    then_body,
                    else_body,
                    ..
                } => {
                    let mut a = st.clone();
                    self.run(then_body, &mut a);
                    let mut b = st.clone();
                    self.run(else_body, &mut b);
                    *st = a.meet(&b);
                }
                Node::Let { .. } => {}
            }
        }
    }

    fn op(&mut self, id: usize, op: &Op, st: &mut State) {
        if let Op::Sync(sync) = op {
            match sync {
                SyncOp::SetFlag { src, dst, event } => {
                    if let Some(s) = src.index() {
                        st.tokens
                            .insert(Key::Author(*src, *dst, *event), st.unord[s].clone());
                    }
                    return;
                }
                SyncOp::WaitFlag { src, dst, event } => {
                    if let Some(t) = st.tokens.remove(&Key::Author(*src, *dst, *event)) {
                        if let Some(d) = dst.index() {
                            st.unord[d].intersect_with(&t);
                        }
                    }
                    return;
                }
                SyncOp::Barrier { pipe: Pipe::All } => {
                    st.unord.iter_mut().for_each(Bits::clear);
                    return;
                }
                SyncOp::Barrier { .. } => return,
                SyncOp::SetCrossFlag { .. }
                | SyncOp::WaitCrossFlag { .. }
                | SyncOp::ChannelAcquire { .. }
                | SyncOp::ChannelPush { .. }
                | SyncOp::ChannelPop { .. }
                | SyncOp::ChannelRelease { .. } => {}
            }
        }
        let Some(info) = self.infos.get(id) else {
            return;
        };
        let Some(p) = info.pipe else { return };
        if let Some(Unit::Wait(t)) = &info.unit {
            if let Some(tok) = st.tokens.get(&Key::Unit(t.clone())) {
                let tok = tok.clone();
                st.unord[p].intersect_with(&tok);
            }
        }
        if let Some(conf) = self.conf.get(id) {
            for a in st.unord[p].and_iter(conf) {
                self.found.insert((a, id));
            }
        }
        for (q, u) in st.unord.iter_mut().enumerate() {
            if q != p {
                u.insert(id);
            }
        }
        for t in st.tokens.values_mut() {
            t.insert(id);
        }
        if let Some(Unit::Set(t)) = &info.unit {
            st.tokens.insert(Key::Unit(t.clone()), st.unord[p].clone());
        }
    }
}

/// Where a set/wait pair goes.
#[derive(Debug, Clone)]
enum Placement {
    /// Set after `block[ia]`, wait before `block[ib]` (`ia < ib`).
    Forward {
        block: Vec<Step>,
        ia: usize,
        ib: usize,
    },
    /// Across iterations of the loop `parent[l]`: set before it, wait before `body[ib]`, set
    /// after `body[ia]` (`ia >= ib`), wait after the loop.
    Carried {
        parent: Vec<Step>,
        l: usize,
        ia: usize,
        ib: usize,
    },
}

fn classify(pa: &[Step], pb: &[Step]) -> Option<Placement> {
    let k = pa.iter().zip(pb).take_while(|(x, y)| x == y).count();
    if let (Some(Step::Idx(x)), Some(Step::Idx(y))) = (pa.get(k), pb.get(k)) {
        if x < y {
            return Some(Placement::Forward {
                block: pa[..k].to_vec(),
                ia: *x,
                ib: *y,
            });
        }
    }
    let j = pa[..k].iter().rposition(|s| *s == Step::Body)?;
    let Step::Idx(l) = *pa.get(j.checked_sub(1)?)? else {
        return None;
    };
    let (Some(Step::Idx(ia)), Some(Step::Idx(ib))) = (pa.get(j + 1), pb.get(j + 1)) else {
        return None;
    };
    Some(Placement::Carried {
        parent: pa[..j - 1].to_vec(),
        l,
        ia: *ia,
        ib: *ib,
    })
}

fn paths(nodes: &[Node], prefix: &mut Vec<Step>, out: &mut [Option<Vec<Step>>]) {
    for (i, n) in nodes.iter().enumerate() {
        prefix.push(Step::Idx(i));
        match n {
            Node::Op { id, .. } => {
                if let Some(slot) = out.get_mut(*id) {
                    *slot = Some(prefix.clone());
                }
            }
            Node::For { body, .. } => {
                prefix.push(Step::Body);
                paths(body, prefix, out);
                prefix.pop();
            }
            Node::If {
                then_body,
                else_body,
                ..
            } => {
                prefix.push(Step::Then);
                paths(then_body, prefix, out);
                prefix.pop();
                prefix.push(Step::Else);
                paths(else_body, prefix, out);
                prefix.pop();
            }
            Node::Ins { .. } | Node::Let { .. } => {}
        }
        prefix.pop();
    }
}

fn block_mut<'a>(mut cur: &'a mut Vec<Node>, path: &[Step]) -> Option<&'a mut Vec<Node>> {
    let mut i = 0;
    while i < path.len() {
        let Step::Idx(x) = path[i] else { return None };
        let next = path.get(i + 1)?;
        cur = match (cur.get_mut(x)?, next) {
            (Node::For { body, .. }, Step::Body) => body,
            (Node::If { then_body, .. }, Step::Then) => then_body,
            (Node::If { else_body, .. }, Step::Else) => else_body,
            _ => return None,
        };
        i += 2;
    }
    Some(cur)
}

fn place(nodes: &mut Vec<Node>, at: &Placement, pair: usize) -> Option<()> {
    let set = Node::Ins { pair, set: true };
    let wait = Node::Ins { pair, set: false };
    match at {
        Placement::Forward { block, ia, ib } => {
            let b = block_mut(nodes, block)?;
            b.insert(*ib, wait);
            b.insert(ia + 1, set);
        }
        Placement::Carried { parent, l, ia, ib } => {
            let mut body_path = parent.clone();
            body_path.extend([Step::Idx(*l), Step::Body]);
            let body = block_mut(nodes, &body_path)?;
            body.insert(ia + 1, set.clone());
            body.insert(*ib, wait.clone());
            let outer = block_mut(nodes, parent)?;
            outer.insert(l + 1, wait);
            outer.insert(*l, set);
        }
    }
    Some(())
}

/// The stable id of the loop at `parent[l]`.
fn loop_id(nodes: &mut Vec<Node>, parent: &[Step], l: usize) -> Option<usize> {
    match block_mut(nodes, parent)?.get(l)? {
        Node::For { lid, .. } => Some(*lid),
        _ => None,
    }
}

/// Moves the in-body wait of carried `pair` up to before `body[ib]` and its in-body set down
/// to after `body[ia]`, where that widens its span.
fn widen(body: &mut Vec<Node>, pair: usize, ia: usize, ib: usize) -> Option<()> {
    let find = |body: &[Node], set: bool| {
        body.iter()
            .position(|n| matches!(n, Node::Ins { pair: p, set: s } if *p == pair && *s == set))
    };
    let old_s = find(body, true)?;
    if ia + 1 > old_s {
        body.insert(ia + 1, Node::Ins { pair, set: true });
        body.remove(old_s);
    }
    let old_w = find(body, false)?;
    if ib < old_w {
        body.remove(old_w);
        body.insert(ib, Node::Ins { pair, set: false });
    }
    Some(())
}

/// Context for building nodes.
struct Build<'a> {
    kernel: &'a Kernel,
    arch: &'a Arch,
    crossing: &'a [Access],
    infos: Vec<Info>,
    loops: usize,
    /// The loops enclosing the statement being built.
    scope: Loops,
}

impl Build<'_> {
    fn nodes(&mut self, stmts: &[Stmt]) -> Result<Vec<Node>, SyncError> {
        let mut out = Vec::with_capacity(stmts.len());
        for s in stmts {
            out.push(match s {
                Stmt::Op(op) => {
                    let id = self.infos.len();
                    let info = self.info(op)?;
                    self.infos.push(info);
                    Node::Op { id, op: op.clone() }
                }
                Stmt::For {
                    var,
                    start,
                    end,
                    step,
                    body,
                } => {
                    self.scope.insert(*var, (start.clone(), *step));
                    let body = self.nodes(body);
                    self.scope.remove(var);
                    self.loops += 1;
                    Node::For {
                        lid: self.loops - 1,
                        var: *var,
                        start: start.clone(),
                        end: end.clone(),
                        step: *step,
                        body: body?,
                    }
                }
                Stmt::If {
                    cond,
                    then_body,
                    else_body,
                } => Node::If {
                    cond: cond.clone(),
                    then_body: self.nodes(then_body)?,
                    else_body: self.nodes(else_body)?,
                },
                Stmt::Let { var, value } => Node::Let {
                    var: *var,
                    value: value.clone(),
                },
            });
        }
        Ok(out)
    }

    fn info(&self, op: &Op) -> Result<Info, SyncError> {
        let (k, arch) = (self.kernel, self.arch);
        let none = Info {
            pipe: None,
            src: vec![],
            snk: vec![],
            unit: None,
            name: op.name(),
        };
        Ok(match op {
            // A cross-core wait stands for the other core's accesses to the shared resources; a
            // cross-core set must come after this core's own accesses to them.
            Op::Sync(SyncOp::WaitCrossFlag { pipe, .. }) => Info {
                pipe: pipe.index(),
                src: self.crossing.to_vec(),
                snk: self.crossing.to_vec(),
                ..none
            },
            Op::Sync(SyncOp::SetCrossFlag { pipe, .. }) => Info {
                pipe: pipe.index(),
                snk: self.crossing.to_vec(),
                ..none
            },
            Op::Sync(
                SyncOp::SetFlag { .. }
                | SyncOp::WaitFlag { .. }
                | SyncOp::Barrier { .. }
                | SyncOp::ChannelAcquire { .. }
                | SyncOp::ChannelPush { .. }
                | SyncOp::ChannelPop { .. }
                | SyncOp::ChannelRelease { .. },
            ) => none,
            // Valid-shape metadata and GM scalar accesses touch no data the pipes order.
            Op::LoadStore(_)
            | Op::Move(_)
            | Op::Matmul(_)
            | Op::Gather(_)
            | Op::Vector(_)
            | Op::Sort(_)
            | Op::Scalar(_)
                if !op.touches_data() =>
            {
                none
            }
            Op::LoadStore(_)
            | Op::Move(_)
            | Op::Matmul(_)
            | Op::Gather(_)
            | Op::Vector(_)
            | Op::Sort(_)
            | Op::Scalar(_) => {
                let space_of = |r: &crate::ir::TileRef| k.space_of(r);
                let pipe = arch
                    .pipe_of(op, &space_of)
                    .ok_or_else(|| SyncError::NoPipe { op: op.name() })?;
                let acc = op_accesses(k, arch, op, &self.scope)?;
                let is_acc = |r: &crate::ir::TileRef| space_of(r) == Some(MemSpace::Acc);
                let unit = match op.unit_flag() {
                    Some(UnitFlag::Matmul(dst, Phase::Final)) => {
                        Some(Unit::Set((k.root_tile(dst.tile), dst.slot.to_string())))
                    }
                    Some(UnitFlag::Read(src, Phase::Final)) if is_acc(src) => {
                        Some(Unit::Wait((k.root_tile(src.tile), src.slot.to_string())))
                    }
                    Some(UnitFlag::Matmul(_, Phase::Partial) | UnitFlag::Read(..)) | None => None,
                };
                Info {
                    pipe: pipe.index(),
                    src: acc.clone(),
                    snk: acc,
                    unit,
                    name: op.name(),
                }
            }
        })
    }
}

/// Inserts the missing intra-core flags of one section (channel ops already lowered).
pub(super) fn insert_section(
    kernel: &Kernel,
    arch: &Arch,
    section: CoreKind,
    stmts: &[Stmt],
    crossing: &[Access],
) -> Result<Vec<Stmt>, SyncError> {
    let mut b = Build {
        kernel,
        arch,
        crossing,
        infos: Vec::new(),
        loops: 0,
        scope: Loops::new(),
    };
    let mut nodes = b.nodes(stmts)?;
    let infos = b.infos;
    let n = infos.len();
    let conf: Vec<Bits> = (0..n)
        .map(|bi| {
            let mut s = Bits::new(n);
            let ib = &infos[bi];
            for (ai, ia) in infos.iter().enumerate() {
                if ia.pipe.is_some()
                    && ib.pipe.is_some()
                    && ia.pipe != ib.pipe
                    && conflict(&ia.src, &ib.snk)
                {
                    s.insert(ai);
                }
            }
            s
        })
        .collect();

    let mut pairs: Vec<Pair> = Vec::new();
    let mut attempted: BTreeSet<(usize, usize)> = BTreeSet::new();
    // Inserted loop-carried pairs and the loop they belong to.
    let mut carried: Vec<(usize, usize)> = Vec::new();
    loop {
        let mut an = Analysis {
            infos: &infos,
            conf: &conf,
            pairs: &pairs,
            found: BTreeSet::new(),
        };
        an.run(&nodes, &mut State::new(n));
        let found = an.found;
        let Some(b) = found.iter().map(|&(_, b)| b).min() else {
            break;
        };
        let mut where_: Vec<Option<Vec<Step>>> = vec![None; n];
        paths(&nodes, &mut Vec::new(), &mut where_);
        let pb = where_[b].clone().unwrap_or_default();
        let mut best: Option<(bool, usize, Placement)> = None;
        for &(a, _) in found.iter().filter(|&&(_, x)| x == b) {
            let pa = where_[a].clone().unwrap_or_default();
            let Some(pl) = classify(&pa, &pb) else {
                continue;
            };
            let fwd = matches!(pl, Placement::Forward { .. });
            // Forward pairs first; then the latest source (its set covers earlier ones).
            if best
                .as_ref()
                .is_none_or(|(bf, ba, _)| (fwd, a) > (*bf, *ba))
            {
                best = Some((fwd, a, pl));
            }
        }
        let unresolved = || SyncError::Unresolved {
            section,
            earlier: infos[found.iter().find(|p| p.1 == b).map_or(b, |p| p.0)].name,
            later: infos[b].name,
        };
        let Some((_, a, pl)) = best else {
            return Err(unresolved());
        };
        if !attempted.insert((a, b)) {
            return Err(unresolved());
        }
        let (Some(pa), Some(pbp)) = (infos[a].pipe, infos[b].pipe) else {
            return Err(unresolved());
        };
        let (src, dst) = (PIPES[pa], PIPES[pbp]);
        let pl = merge_forward(pl, (pa, pbp), &found, &where_, &infos);
        if let Placement::Carried { parent, l, ia, ib } = &pl {
            let lid = loop_id(&mut nodes, parent, *l).ok_or_else(unresolved)?;
            // A carried pair of the same loop and pipes widens to cover this dependency too:
            // fewer event ids, at the price of a little overlap.
            if let Some(&(pair, _)) = carried
                .iter()
                .find(|(p, l2)| *l2 == lid && (pairs[*p].src, pairs[*p].dst) == (src, dst))
            {
                let mut body_path = parent.clone();
                body_path.extend([Step::Idx(*l), Step::Body]);
                let body = block_mut(&mut nodes, &body_path).ok_or_else(unresolved)?;
                widen(body, pair, *ia, *ib).ok_or_else(unresolved)?;
                continue;
            }
            carried.push((pairs.len(), lid));
        }
        pairs.push(Pair { src, dst });
        place(&mut nodes, &pl, pairs.len() - 1).ok_or_else(unresolved)?;
    }

    let events = color(&nodes, &pairs, stmts, arch.flag_events, section)?;
    Ok(to_stmts(nodes, &pairs, &events))
}

/// A forward placement moved to set after the latest statement of its block that holds the
/// source of another unordered dependency waited on before the same statement `ib`, with the
/// same pipes: the waiting pipe needs every such set before `ib` anyway, and the set after
/// the latest statement follows the earlier sources on the setting pipe, so one pair orders
/// them all (instead of one pair, and one event id, per source, e.g. per tile stored after a
/// loop).
fn merge_forward(
    pl: Placement,
    pipes: (usize, usize),
    found: &BTreeSet<(usize, usize)>,
    where_: &[Option<Vec<Step>>],
    infos: &[Info],
) -> Placement {
    let Placement::Forward { block, ia, ib } = pl else {
        return pl;
    };
    let latest = found
        .iter()
        .filter(|&&(a, b)| (infos[a].pipe, infos[b].pipe) == (Some(pipes.0), Some(pipes.1)))
        .filter_map(|&(a, b)| {
            let (pa, pb) = (where_[a].as_ref()?, where_[b].as_ref()?);
            match classify(pa, pb)? {
                Placement::Forward {
                    block: blk,
                    ia: x,
                    ib: y,
                } if blk == block && y == ib => Some(x),
                _ => None,
            }
        })
        .fold(ia, usize::max);
    Placement::Forward {
        block,
        ia: latest,
        ib,
    }
}

/// Pre-order positions of every inserted pair's ops: the whole span, and the first set and last
/// wait.
#[derive(Debug, Clone, Copy, Default)]
struct Span {
    /// First and last position of any of the pair's ops.
    all: Option<(usize, usize)>,
    /// Position of the pair's first set.
    first_set: Option<usize>,
    /// Position of the pair's last wait.
    last_wait: Option<usize>,
}

fn spans(nodes: &[Node], pos: &mut usize, out: &mut [Span]) {
    for n in nodes {
        *pos += 1;
        match n {
            Node::Ins { pair, set } => {
                if let Some(s) = out.get_mut(*pair) {
                    let p = *pos;
                    s.all = Some(match s.all {
                        Some((a, b)) => (a.min(p), b.max(p)),
                        None => (p, p),
                    });
                    if *set {
                        s.first_set = Some(s.first_set.map_or(p, |f| f.min(p)));
                    } else {
                        s.last_wait = Some(s.last_wait.map_or(p, |w| w.max(p)));
                    }
                }
            }
            Node::For { body, .. } => spans(body, pos, out),
            Node::If {
                then_body,
                else_body,
                ..
            } => {
                spans(then_body, pos, out);
                spans(else_body, pos, out);
            }
            Node::Op { .. } | Node::Let { .. } => {}
        }
    }
}

/// True when pair `b`'s set is ordered after pair `a`'s last wait on the pipes themselves, not
/// just in program text: some pair `c` in the reverse direction is set (on `a`'s waiting pipe)
/// after `a`'s last wait and waited (on `b`'s setting pipe) before `b`'s first set. Without
/// that edge the setting pipe may run ahead and set the shared id again before `a`'s wait has
/// consumed it (a lost signal).
fn ordered_after(pairs: &[Pair], span: &[Span], a: usize, b: usize) -> bool {
    let (Some(a_wait), Some(b_set)) = (span[a].last_wait, span[b].first_set) else {
        return false;
    };
    (0..pairs.len()).any(|c| {
        pairs[c].src == pairs[a].dst
            && pairs[c].dst == pairs[a].src
            && matches!((span[c].first_set, span[c].last_wait),
                (Some(cs), Some(cw)) if cs > a_wait && cw < b_set && cs < cw)
    })
}

/// Event ids for the inserted pairs: per pipe pair, ids the author never uses, shared by pairs
/// whose live spans (from first set to last wait, contiguous in one block) are disjoint and whose
/// order the pipes themselves keep ([`ordered_after`]).
fn color(
    nodes: &[Node],
    pairs: &[Pair],
    original: &[Stmt],
    flag_events: u8,
    section: CoreKind,
) -> Result<Vec<u8>, SyncError> {
    let mut author: BTreeMap<(Pipe, Pipe), BTreeSet<u8>> = BTreeMap::new();
    crate::ir::walk_ops(original, &mut |op| {
        if let Op::Sync(SyncOp::SetFlag { src, dst, event })
        | Op::Sync(SyncOp::WaitFlag { src, dst, event }) = op
        {
            author.entry((*src, *dst)).or_default().insert(*event);
        }
    });
    let mut span = vec![Span::default(); pairs.len()];
    spans(nodes, &mut 0, &mut span);
    let mut order: Vec<usize> = (0..pairs.len()).collect();
    order.sort_by_key(|&i| (span[i].all.map_or(0, |s| s.0), i));
    let mut events = vec![0u8; pairs.len()];
    // Per pipe pair: (event, the last pair that uses it).
    let mut in_use: BTreeMap<(Pipe, Pipe), Vec<(u8, usize)>> = BTreeMap::new();
    for i in order {
        let key = (pairs[i].src, pairs[i].dst);
        let (start, _) = span[i].all.unwrap_or((0, 0));
        let taken = author.get(&key).cloned().unwrap_or_default();
        let slots = in_use.entry(key).or_default();
        if let Some(slot) = slots.iter_mut().find(|(_, last)| {
            span[*last].all.is_some_and(|(_, end)| end < start)
                && ordered_after(pairs, &span, *last, i)
        }) {
            slot.1 = i;
            events[i] = slot.0;
            continue;
        }
        let used: BTreeSet<u8> = slots.iter().map(|(e, _)| *e).collect();
        let Some(ev) = (0..flag_events).find(|e| !taken.contains(e) && !used.contains(e)) else {
            return Err(SyncError::NoFreeEvent {
                section,
                src: key.0,
                dst: key.1,
                author: taken.into_iter().collect(),
                needed: slots.len() + 1,
            });
        };
        slots.push((ev, i));
        events[i] = ev;
    }
    Ok(events)
}

fn to_stmts(nodes: Vec<Node>, pairs: &[Pair], events: &[u8]) -> Vec<Stmt> {
    nodes
        .into_iter()
        .map(|n| match n {
            Node::Op { op, .. } => Stmt::Op(op),
            Node::Ins { pair, set } => {
                let (src, dst) = (pairs[pair].src, pairs[pair].dst);
                let event = events[pair];
                Stmt::Op(if set {
                    Op::Sync(SyncOp::SetFlag { src, dst, event })
                } else {
                    Op::Sync(SyncOp::WaitFlag { src, dst, event })
                })
            }
            Node::For {
                var,
                start,
                end,
                step,
                body,
                ..
            } => Stmt::For {
                var,
                start,
                end,
                step,
                body: to_stmts(body, pairs, events),
            },
            Node::If {
                cond,
                then_body,
                else_body,
            } => Stmt::If {
                cond,
                then_body: to_stmts(then_body, pairs, events),
                else_body: to_stmts(else_body, pairs, events),
            },
            Node::Let { var, value } => Stmt::Let { var, value },
        })
        .collect()
}
