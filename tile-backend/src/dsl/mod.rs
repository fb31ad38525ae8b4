//! The kernel builder: Rust code that reads like the kernel it builds.
//!
//! ```
//! use tile_backend::dsl::KernelBuilder;
//! use tile_backend::ir::{DType, Layout, MemSpace, TileType, GmView};
//!
//! let mut k = KernelBuilder::new("copy");
//! let x = k.input("x", DType::F32, [16, 64]);
//! let y = k.output("y", DType::F32, [16, 64]);
//! let t = k.tile("t", TileType::new(MemSpace::Vec, DType::F32, 16, 64, Layout::ND));
//! k.vector(|v| {
//!     v.load(t, GmView::nd(x, 0, 16, 64, 64));
//!     v.store(GmView::nd(y, 0, 16, 64, 64), t);
//! });
//! let kernel = k.build();
//! assert_eq!(kernel.tiles.len(), 1);
//! ```
//!
//! The builder checks nothing: [`crate::verify`] does, so that broken kernels can be built on
//! purpose.

use crate::arch::Target;
use crate::ir::*;

/// Builds a [`Kernel`].
#[derive(Debug, Clone)]
pub struct KernelBuilder {
    kernel: Kernel,
}

impl KernelBuilder {
    /// A new empty kernel for Ascend 950.
    pub fn new(name: impl Into<String>) -> Self {
        Self::for_target(name, Target::Ascend950)
    }

    /// A new empty kernel for a target.
    pub fn for_target(name: impl Into<String>, target: Target) -> Self {
        KernelBuilder {
            kernel: Kernel {
                name: name.into(),
                target,
                params: vec![],
                tiles: vec![],
                vars: vec![],
                channels: vec![],
                cube: vec![],
                vector: vec![],
            },
        }
    }

    fn param(&mut self, name: impl Into<String>, kind: ParamKind) -> ParamId {
        self.kernel.params.push(Param {
            name: name.into(),
            kind,
            range: None,
        });
        ParamId(self.kernel.params.len() as u32 - 1)
    }

    fn tensor<E: Into<Expr>>(
        &mut self,
        name: impl Into<String>,
        dtype: DType,
        shape: impl IntoIterator<Item = E>,
        output: bool,
    ) -> ParamId {
        let shape = shape.into_iter().map(Into::into).collect();
        self.param(
            name,
            ParamKind::Tensor {
                dtype,
                shape,
                output,
            },
        )
    }

    /// A GM tensor the kernel reads.
    pub fn input<E: Into<Expr>>(
        &mut self,
        name: impl Into<String>,
        dtype: DType,
        shape: impl IntoIterator<Item = E>,
    ) -> ParamId {
        self.tensor(name, dtype, shape, false)
    }

    /// A GM tensor the kernel writes.
    pub fn output<E: Into<Expr>>(
        &mut self,
        name: impl Into<String>,
        dtype: DType,
        shape: impl IntoIterator<Item = E>,
    ) -> ParamId {
        self.tensor(name, dtype, shape, true)
    }

    /// A runtime scalar argument.
    pub fn scalar(&mut self, name: impl Into<String>, dtype: DType) -> ParamId {
        self.param(name, ParamKind::Scalar { dtype })
    }

    /// Declares the values an argument's elements take (inclusive), for generated inputs.
    pub fn range(&mut self, p: ParamId, min: f64, max: f64) {
        if let Some(param) = self.kernel.params.get_mut(p.0 as usize) {
            param.range = Some(ValueRange { min, max });
        }
    }

    /// Declares a tile.
    pub fn tile(&mut self, name: impl Into<String>, ty: TileType) -> TileId {
        self.tile_group(name, ty, 1)
    }

    /// Declares a group of `buffers` rotating tiles (use `group.at(i % n)`).
    pub fn tile_group(&mut self, name: impl Into<String>, ty: TileType, buffers: u32) -> TileId {
        self.kernel.tiles.push(TileDecl {
            name: name.into(),
            ty,
            buffers,
            storage: Storage::Alloc,
            addr: None,
        });
        TileId(self.kernel.tiles.len() as u32 - 1)
    }

    /// Declares a tile at a fixed byte address of its space (PTO `TASSIGN`).
    pub fn tile_at(&mut self, name: impl Into<String>, ty: TileType, addr: u64) -> TileId {
        let id = self.tile(name, ty);
        self.kernel.tiles[id.0 as usize].addr = Some(addr);
        id
    }

    /// `reinterpret(src, dtype?, shape?, layout?)`: the same bytes re-declared (ASCEND950.md §7).
    ///
    /// The new tile starts with a dynamic valid shape (set it with `set_validshape`); pad value
    /// and buffer rotation are the source's; a boxed layout gets its fractal for the new dtype.
    /// A source that is not a declared tile yields an alias the verifier rejects.
    pub fn reinterpret(&mut self, name: impl Into<String>, src: TileId, to: Reinterpret) -> TileId {
        let (ty, buffers) = match self.kernel.try_tile(src) {
            Some(d) => {
                let mut ty = d.ty.clone();
                if let Some(dtype) = to.dtype {
                    ty.dtype = dtype;
                }
                if let Some((r, c)) = to.shape {
                    ty.rows = r;
                    ty.cols = c;
                }
                if let Some(layout) = to.layout {
                    ty.layout = layout;
                }
                ty.fractal = if ty.layout.is_boxed() && (to.layout.is_some() || to.dtype.is_some())
                {
                    ty.layout.default_fractal(ty.dtype, ty.space)
                } else {
                    ty.fractal
                };
                ty.valid_rows = ValidDim::Dynamic;
                ty.valid_cols = ValidDim::Dynamic;
                (ty, d.buffers)
            }
            None => (
                TileType::new(MemSpace::Vec, DType::F32, 0, 0, Layout::ND).dynamic(),
                1,
            ),
        };
        self.kernel.tiles.push(TileDecl {
            name: name.into(),
            ty,
            buffers,
            storage: Storage::Alias { of: src },
            addr: None,
        });
        TileId(self.kernel.tiles.len() as u32 - 1)
    }

    /// Declares a cube <-> vector channel.
    pub fn channel(
        &mut self,
        name: impl Into<String>,
        producer: CoreKind,
        depth: u32,
    ) -> ChannelId {
        self.kernel.channels.push(Channel {
            name: name.into(),
            producer,
            depth,
        });
        ChannelId(self.kernel.channels.len() as u32 - 1)
    }

    /// Appends to the cube program.
    pub fn cube(&mut self, f: impl FnOnce(&mut Body<'_>)) {
        let stmts = self.body(f);
        self.kernel.cube.extend(stmts);
    }

    /// Appends to the vector program (run by both AIVs).
    pub fn vector(&mut self, f: impl FnOnce(&mut Body<'_>)) {
        let stmts = self.body(f);
        self.kernel.vector.extend(stmts);
    }

    fn body(&mut self, f: impl FnOnce(&mut Body<'_>)) -> Vec<Stmt> {
        let mut b = Body {
            vars: &mut self.kernel.vars,
            stmts: vec![],
        };
        f(&mut b);
        b.stmts
    }

    /// The kernel built so far (for inspection).
    pub fn kernel(&self) -> &Kernel {
        &self.kernel
    }

    /// Finishes the kernel.
    pub fn build(self) -> Kernel {
        self.kernel
    }
}

/// The attributes a `reinterpret` changes; at least one must be set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reinterpret {
    /// New element type (requires `shape`).
    pub dtype: Option<DType>,
    /// New allocated shape `(rows, cols)`.
    pub shape: Option<(u64, u64)>,
    /// New layout.
    pub layout: Option<Layout>,
}

impl GmView {
    /// A row-major window: `(r, c)` at `offset + r * stride + c`.
    pub fn nd(
        tensor: ParamId,
        offset: impl Into<Expr>,
        rows: impl Into<Expr>,
        cols: impl Into<Expr>,
        stride: impl Into<Expr>,
    ) -> GmView {
        GmView {
            tensor,
            offset: offset.into(),
            rows: rows.into(),
            cols: cols.into(),
            stride: stride.into(),
            layout: Layout::ND,
        }
    }

    /// A column-major window: `(r, c)` at `offset + c * stride + r` (a transposed view).
    pub fn dn(
        tensor: ParamId,
        offset: impl Into<Expr>,
        rows: impl Into<Expr>,
        cols: impl Into<Expr>,
        stride: impl Into<Expr>,
    ) -> GmView {
        GmView {
            layout: Layout::DN,
            ..GmView::nd(tensor, offset, rows, cols, stride)
        }
    }
}

/// A statement list under construction (a section, loop body or branch).
pub struct Body<'k> {
    vars: &'k mut Vec<VarDecl>,
    stmts: Vec<Stmt>,
}

/// Options of a move; set through the chained methods of [`MoveBuilder`].
pub struct MoveBuilder<'a>(&'a mut Op);

impl MoveBuilder<'_> {
    fn with(
        self,
        f: impl FnOnce(
            &mut Option<[Expr; 2]>,
            &mut Option<AccToVecMode>,
            &mut bool,
            &mut Option<Scale>,
            &mut Option<Phase>,
        ),
    ) -> Self {
        if let Op::Move(MoveOp::Move {
            offset,
            acc_to_vec,
            relu,
            scale,
            phase,
            ..
        }) = self.0
        {
            f(offset, acc_to_vec, relu, scale, phase);
        }
        self
    }
    /// Reads at `[row, col]` of a larger source, or writes there in a larger destination.
    pub fn offset(self, row: impl Into<Expr>, col: impl Into<Expr>) -> Self {
        let v = [row.into(), col.into()];
        self.with(|o, _, _, _, _| *o = Some(v))
    }
    /// Acc -> Vec distribution mode.
    pub fn mode(self, mode: AccToVecMode) -> Self {
        self.with(|_, m, _, _, _| *m = Some(mode))
    }
    /// Fixpipe ReLU.
    pub fn relu(self) -> Self {
        self.with(|_, _, r, _, _| *r = true)
    }
    /// Fixpipe quantisation.
    pub fn scale(self, scale: Scale) -> Self {
        self.with(|_, _, _, s, _| *s = Some(scale))
    }
    /// Unit-flag phase.
    pub fn phase(self, phase: Phase) -> Self {
        self.with(|_, _, _, _, p| *p = Some(phase))
    }
}

/// Options of a matmul; set through the chained methods.
pub struct MatmulBuilder<'a>(&'a mut Op);

impl MatmulBuilder<'_> {
    /// Unit-flag phase.
    pub fn phase(self, p: Phase) -> Self {
        if let Op::Matmul(MatmulOp::Matmul { phase, .. }) = self.0 {
            *phase = Some(p);
        }
        self
    }
    /// Adds a Bias tile.
    pub fn bias(self, t: impl Into<TileRef>) -> Self {
        if let Op::Matmul(MatmulOp::Matmul { bias, .. }) = self.0 {
            *bias = Some(t.into());
        }
        self
    }
}

/// Options of a store; set through the chained methods.
pub struct StoreOp<'a>(&'a mut Op);

impl StoreOp<'_> {
    /// Fixpipe ReLU (Acc sources).
    pub fn relu(self) -> Self {
        if let Op::LoadStore(LoadStoreOp::Store { relu, .. }) = self.0 {
            *relu = true;
        }
        self
    }
    /// Fixpipe quantisation (Acc sources).
    pub fn scale(self, s: Scale) -> Self {
        if let Op::LoadStore(LoadStoreOp::Store { scale, .. }) = self.0 {
            *scale = Some(s);
        }
        self
    }
    /// Unit-flag phase (Acc sources).
    pub fn phase(self, p: Phase) -> Self {
        if let Op::LoadStore(LoadStoreOp::Store { phase, .. }) = self.0 {
            *phase = Some(p);
        }
        self
    }
    /// Atomic add into GM.
    pub fn atomic_add(self) -> Self {
        if let Op::LoadStore(LoadStoreOp::Store { atomic_add, .. }) = self.0 {
            *atomic_add = true;
        }
        self
    }
}

impl<'k> Body<'k> {
    fn var(&mut self, name: impl Into<String>) -> VarId {
        self.vars.push(VarDecl { name: name.into() });
        VarId(self.vars.len() as u32 - 1)
    }

    fn nested(&mut self, f: impl FnOnce(&mut Body<'_>)) -> Vec<Stmt> {
        let mut b = Body {
            vars: &mut *self.vars,
            stmts: vec![],
        };
        f(&mut b);
        b.stmts
    }

    /// Appends any op (the escape hatch; the named methods below cover every op).
    pub fn op(&mut self, op: Op) -> &mut Op {
        self.stmts.push(Stmt::Op(op));
        match self.stmts.last_mut() {
            Some(Stmt::Op(op)) => op,
            _ => unreachable!("an op was just pushed"),
        }
    }

    /// `for name in (start..end).step_by(step)`.
    pub fn for_range(
        &mut self,
        name: impl Into<String>,
        start: impl Into<Expr>,
        end: impl Into<Expr>,
        step: i64,
        f: impl FnOnce(&mut Body<'_>, VarId),
    ) {
        let var = self.var(name);
        let body = self.nested(|b| f(b, var));
        self.stmts.push(Stmt::For {
            var,
            start: start.into(),
            end: end.into(),
            step,
            body,
        });
    }

    /// `if cond { then }`.
    pub fn if_(&mut self, cond: impl Into<Expr>, then: impl FnOnce(&mut Body<'_>)) {
        self.if_else(cond, then, |_| {});
    }

    /// `if cond { then } else { otherwise }`.
    pub fn if_else(
        &mut self,
        cond: impl Into<Expr>,
        then: impl FnOnce(&mut Body<'_>),
        otherwise: impl FnOnce(&mut Body<'_>),
    ) {
        let then_body = self.nested(then);
        let else_body = self.nested(otherwise);
        self.stmts.push(Stmt::If {
            cond: cond.into(),
            then_body,
            else_body,
        });
    }

    /// `let name = value`.
    pub fn let_(&mut self, name: impl Into<String>, value: impl Into<Expr>) -> VarId {
        let var = self.var(name);
        self.stmts.push(Stmt::Let {
            var,
            value: value.into(),
        });
        var
    }

    /// Reads `tensor[index]` from GM into a new scalar variable.
    pub fn read_scalar(
        &mut self,
        name: impl Into<String>,
        tensor: ParamId,
        index: impl Into<Expr>,
    ) -> VarId {
        let var = self.var(name);
        self.op(Op::Scalar(ScalarOp::ReadScalar {
            var,
            tensor,
            index: index.into(),
        }));
        var
    }

    /// Reads element `index` (storage order) of the Vec tile `tile` into a new scalar variable
    /// (PTO `Tile::GetValue`, on the scalar unit: order it after the load that fills the tile).
    pub fn read_tile_scalar(
        &mut self,
        name: impl Into<String>,
        tile: impl Into<TileRef>,
        index: impl Into<Expr>,
    ) -> VarId {
        let var = self.var(name);
        self.op(Op::Scalar(ScalarOp::ReadTileScalar {
            var,
            tile: tile.into(),
            index: index.into(),
        }));
        var
    }

    /// Writes `tensor[index] = value` (reaches GM at kernel end).
    pub fn write_scalar(
        &mut self,
        tensor: ParamId,
        index: impl Into<Expr>,
        value: impl Into<Expr>,
    ) {
        self.op(Op::Scalar(ScalarOp::WriteScalar {
            tensor,
            index: index.into(),
            value: value.into(),
        }));
    }

    /// GM -> Vec/Mat.
    pub fn load(&mut self, dst: impl Into<TileRef>, src: GmView) {
        self.op(Op::LoadStore(LoadStoreOp::Load {
            dst: dst.into(),
            src,
        }));
    }

    /// Vec/Acc -> GM.
    pub fn store(&mut self, dst: GmView, src: impl Into<TileRef>) -> StoreOp<'_> {
        StoreOp(self.op(Op::LoadStore(LoadStoreOp::Store {
            dst,
            src: src.into(),
            relu: false,
            scale: None,
            atomic_add: false,
            phase: None,
        })))
    }

    /// A tile move (TMOV / TEXTRACT / TINSERT); chain `.offset()`, `.mode()`, `.phase()`, ...
    pub fn mov(&mut self, dst: impl Into<TileRef>, src: impl Into<TileRef>) -> MoveBuilder<'_> {
        MoveBuilder(self.op(Op::Move(MoveOp::Move {
            dst: dst.into(),
            src: src.into(),
            offset: None,
            acc_to_vec: None,
            relu: false,
            scale: None,
            phase: None,
        })))
    }

    /// `dst = a * b`.
    pub fn matmul(
        &mut self,
        dst: impl Into<TileRef>,
        a: impl Into<TileRef>,
        b: impl Into<TileRef>,
    ) -> MatmulBuilder<'_> {
        self.matmul_impl(dst, a, b, false)
    }

    /// `dst += a * b`.
    pub fn matmul_acc(
        &mut self,
        dst: impl Into<TileRef>,
        a: impl Into<TileRef>,
        b: impl Into<TileRef>,
    ) -> MatmulBuilder<'_> {
        self.matmul_impl(dst, a, b, true)
    }

    fn matmul_impl(
        &mut self,
        dst: impl Into<TileRef>,
        a: impl Into<TileRef>,
        b: impl Into<TileRef>,
        accumulate: bool,
    ) -> MatmulBuilder<'_> {
        MatmulBuilder(self.op(Op::Matmul(MatmulOp::Matmul {
            dst: dst.into(),
            a: a.into(),
            b: b.into(),
            bias: None,
            accumulate,
            phase: None,
        })))
    }

    /// Paged gather of GM rows into an L1 tile (ASCEND950.md §8).
    pub fn gather_in_l1(&mut self, g: Gather) {
        self.op(Op::Gather(GatherOp::GatherInL1 {
            dst: g.dst,
            src: g.src,
            indices: g.indices,
            block_table: g.block_table,
            block_size: g.block_size,
            size: g.size,
            col_offset: g.col_offset,
            is_b_matrix: g.is_b_matrix,
            is_trans: g.is_trans,
        }));
    }

    /// `dst = op(src)`.
    pub fn unary(&mut self, op: UnaryOp, dst: impl Into<TileRef>, src: impl Into<TileRef>) {
        self.op(Op::Vector(VectorOp::Unary {
            op,
            dst: dst.into(),
            src: src.into(),
        }));
    }

    /// `dst = exp(src)`.
    pub fn exp(&mut self, dst: impl Into<TileRef>, src: impl Into<TileRef>) {
        self.unary(UnaryOp::Exp, dst, src);
    }

    /// `dst = lhs op rhs`.
    pub fn binary(
        &mut self,
        op: BinaryOp,
        dst: impl Into<TileRef>,
        lhs: impl Into<TileRef>,
        rhs: impl Into<TileRef>,
    ) {
        self.op(Op::Vector(VectorOp::Binary {
            op,
            dst: dst.into(),
            lhs: lhs.into(),
            rhs: rhs.into(),
        }));
    }

    /// `dst = lhs + rhs`.
    pub fn add(
        &mut self,
        dst: impl Into<TileRef>,
        lhs: impl Into<TileRef>,
        rhs: impl Into<TileRef>,
    ) {
        self.binary(BinaryOp::Add, dst, lhs, rhs);
    }

    /// `dst = lhs * rhs`.
    pub fn mul(
        &mut self,
        dst: impl Into<TileRef>,
        lhs: impl Into<TileRef>,
        rhs: impl Into<TileRef>,
    ) {
        self.binary(BinaryOp::Mul, dst, lhs, rhs);
    }

    /// `dst = lhs max rhs`.
    pub fn max(
        &mut self,
        dst: impl Into<TileRef>,
        lhs: impl Into<TileRef>,
        rhs: impl Into<TileRef>,
    ) {
        self.binary(BinaryOp::Max, dst, lhs, rhs);
    }

    /// `dst = src op scalar`.
    pub fn binary_scalar(
        &mut self,
        op: BinaryOp,
        dst: impl Into<TileRef>,
        src: impl Into<TileRef>,
        scalar: impl Into<ScalarArg>,
    ) {
        self.op(Op::Vector(VectorOp::BinaryScalar {
            op,
            dst: dst.into(),
            src: src.into(),
            scalar: scalar.into(),
        }));
    }

    /// `dst = src * scalar` (TMULS).
    pub fn muls(
        &mut self,
        dst: impl Into<TileRef>,
        src: impl Into<TileRef>,
        scalar: impl Into<ScalarArg>,
    ) {
        self.binary_scalar(BinaryOp::Mul, dst, src, scalar);
    }

    /// `dst = src > 0 ? src : src * slope` (TLRELU).
    pub fn leaky_relu(
        &mut self,
        dst: impl Into<TileRef>,
        src: impl Into<TileRef>,
        slope: impl Into<ScalarArg>,
    ) {
        self.op(Op::Vector(VectorOp::LeakyRelu {
            dst: dst.into(),
            src: src.into(),
            slope: slope.into(),
        }));
    }

    /// TSORT32: each 32-element block of each row of `src` with its u32 indices from `idx`
    /// into sorted (value, index) pairs in `dst` (valid columns a multiple of 32).
    pub fn sort32(
        &mut self,
        dst: impl Into<TileRef>,
        src: impl Into<TileRef>,
        idx: impl Into<TileRef>,
    ) {
        self.op(Op::Sort(SortOp::Sort32 {
            dst: dst.into(),
            src: src.into(),
            idx: idx.into(),
            tmp: None,
        }));
    }

    /// TSORT32's tail form: any valid column count, the last block padded through `tmp`.
    pub fn sort32_tail(
        &mut self,
        dst: impl Into<TileRef>,
        src: impl Into<TileRef>,
        idx: impl Into<TileRef>,
        tmp: impl Into<TileRef>,
    ) {
        self.op(Op::Sort(SortOp::Sort32 {
            dst: dst.into(),
            src: src.into(),
            idx: idx.into(),
            tmp: Some(tmp.into()),
        }));
    }

    /// TMRGSORT, single-list: merges each group of four sorted `block_len`-element blocks of
    /// `src` into `dst`.
    pub fn mrgsort(&mut self, dst: impl Into<TileRef>, src: impl Into<TileRef>, block_len: u64) {
        self.op(Op::Sort(SortOp::MrgSort {
            dst: dst.into(),
            src: src.into(),
            block_len,
        }));
    }

    /// TMRGSORT, multi-list: merges 2 to 4 sorted lists into `tmp` and keeps its first `dst`
    /// valid columns in `dst`.
    pub fn mrgsort_lists(
        &mut self,
        dst: impl Into<TileRef>,
        tmp: impl Into<TileRef>,
        srcs: impl IntoIterator<Item = TileRef>,
    ) {
        self.op(Op::Sort(SortOp::MrgSortLists {
            dst: dst.into(),
            tmp: tmp.into(),
            srcs: srcs.into_iter().collect(),
        }));
    }

    /// Reduction along `axis`.
    pub fn reduce(
        &mut self,
        op: ReduceOp,
        axis: Axis,
        dst: impl Into<TileRef>,
        src: impl Into<TileRef>,
    ) {
        self.op(Op::Vector(VectorOp::Reduce {
            op,
            axis,
            dst: dst.into(),
            src: src.into(),
        }));
    }

    /// `dst[r] = max_c src[r, c]` (TROWMAX).
    pub fn row_max(&mut self, dst: impl Into<TileRef>, src: impl Into<TileRef>) {
        self.reduce(ReduceOp::Max, Axis::Row, dst, src);
    }

    /// `dst[r] = sum_c src[r, c]` (TROWSUM).
    pub fn row_sum(&mut self, dst: impl Into<TileRef>, src: impl Into<TileRef>) {
        self.reduce(ReduceOp::Sum, Axis::Row, dst, src);
    }

    /// `dst[c] = max_r src[r, c]` (TCOLMAX).
    pub fn col_max(&mut self, dst: impl Into<TileRef>, src: impl Into<TileRef>) {
        self.reduce(ReduceOp::Max, Axis::Col, dst, src);
    }

    /// `dst[c] = sum_r src[r, c]` (TCOLSUM).
    pub fn col_sum(&mut self, dst: impl Into<TileRef>, src: impl Into<TileRef>) {
        self.reduce(ReduceOp::Sum, Axis::Col, dst, src);
    }

    /// `dst = src op broadcast(operand)` along `axis`.
    pub fn broadcast(
        &mut self,
        op: BinaryOp,
        axis: Axis,
        dst: impl Into<TileRef>,
        src: impl Into<TileRef>,
        operand: impl Into<TileRef>,
    ) {
        self.op(Op::Vector(VectorOp::Broadcast {
            op,
            axis,
            dst: dst.into(),
            src: src.into(),
            operand: operand.into(),
        }));
    }

    /// `dst = broadcast(src)` along `axis`.
    pub fn expand(&mut self, axis: Axis, dst: impl Into<TileRef>, src: impl Into<TileRef>) {
        self.op(Op::Vector(VectorOp::Expand {
            axis,
            dst: dst.into(),
            src: src.into(),
        }));
    }

    /// `dst = convert(src)` with rounding.
    pub fn cast(&mut self, dst: impl Into<TileRef>, src: impl Into<TileRef>, round: RoundMode) {
        self.op(Op::Vector(VectorOp::Cast {
            dst: dst.into(),
            src: src.into(),
            round,
        }));
    }

    /// Every valid element of `dst` = `value`.
    pub fn fill(&mut self, dst: impl Into<TileRef>, value: impl Into<ScalarArg>) {
        self.op(Op::Vector(VectorOp::Fill {
            dst: dst.into(),
            value: value.into(),
        }));
    }

    /// Sets a tile's runtime valid shape.
    pub fn set_validshape(
        &mut self,
        tile: impl Into<TileRef>,
        rows: impl Into<Expr>,
        cols: impl Into<Expr>,
    ) {
        self.op(Op::Vector(VectorOp::SetValidShape {
            tile: tile.into(),
            rows: rows.into(),
            cols: cols.into(),
        }));
    }

    /// Sets the cube's handle of a Fixpipe destination `dst` (a dynamic Vec tile) to what an
    /// Acc -> Vec move of a `rows x cols` Acc in `mode` writes into each AIV's tile: all of it
    /// in the single modes, half the rows (`ceil(rows / 2)`) with `DualModeSplitM`, half the
    /// 32-aligned columns with `DualModeSplitN`. A5 ignores it; the public CPU model of PTO-ISA
    /// reads it (ASCEND950.md §12).
    pub fn set_fixpipe_validshape(
        &mut self,
        dst: impl Into<TileRef>,
        (rows, cols): (u64, u64),
        mode: AccToVecMode,
    ) {
        let (r, c) = match mode {
            AccToVecMode::SingleModeVec0 | AccToVecMode::SingleModeVec1 => (rows, cols),
            AccToVecMode::DualModeSplitM => (rows.div_ceil(2), cols),
            AccToVecMode::DualModeSplitN => (rows, round_up(cols, 32) / 2),
        };
        self.set_validshape(dst, r as i64, c as i64);
    }

    /// Writes the pad value into the tile's invalid region.
    pub fn fillpad(&mut self, tile: impl Into<TileRef>) {
        self.op(Op::Vector(VectorOp::FillPad { tile: tile.into() }));
    }

    /// `set_flag(src, dst, event)`.
    pub fn set_flag(&mut self, src: Pipe, dst: Pipe, event: u8) {
        self.op(Op::Sync(SyncOp::SetFlag { src, dst, event }));
    }

    /// `wait_flag(src, dst, event)`.
    pub fn wait_flag(&mut self, src: Pipe, dst: Pipe, event: u8) {
        self.op(Op::Sync(SyncOp::WaitFlag { src, dst, event }));
    }

    /// `pipe_barrier(pipe)`.
    pub fn barrier(&mut self, pipe: Pipe) {
        self.op(Op::Sync(SyncOp::Barrier { pipe }));
    }

    /// Cross-core signal.
    pub fn set_cross_flag(&mut self, pipe: Pipe, id: u8) {
        self.op(Op::Sync(SyncOp::SetCrossFlag { pipe, id }));
    }

    /// Cross-core wait.
    pub fn wait_cross_flag(&mut self, pipe: Pipe, id: u8) {
        self.op(Op::Sync(SyncOp::WaitCrossFlag { pipe, id }));
    }

    /// Producer waits for a free channel slot.
    pub fn acquire(&mut self, channel: ChannelId) {
        self.op(Op::Sync(SyncOp::ChannelAcquire { channel }));
    }

    /// Producer publishes a slot.
    pub fn push(&mut self, channel: ChannelId) {
        self.op(Op::Sync(SyncOp::ChannelPush { channel }));
    }

    /// Consumer waits for a slot.
    pub fn pop(&mut self, channel: ChannelId) {
        self.op(Op::Sync(SyncOp::ChannelPop { channel }));
    }

    /// Consumer frees a slot.
    pub fn release(&mut self, channel: ChannelId) {
        self.op(Op::Sync(SyncOp::ChannelRelease { channel }));
    }
}

/// Arguments of [`Body::gather_in_l1`].
#[derive(Debug, Clone)]
pub struct Gather {
    /// Mat tile `[n, size]` receiving the rows.
    pub dst: TileRef,
    /// GM source `[T, C]`.
    pub src: ParamId,
    /// `[1, n]` window of logical token indices.
    pub indices: GmView,
    /// `[1, nb]` window of the block table.
    pub block_table: GmView,
    /// Tokens per block.
    pub block_size: Expr,
    /// Columns gathered per row.
    pub size: u64,
    /// First source column gathered.
    pub col_offset: Expr,
    /// Feeds the matmul as B.
    pub is_b_matrix: bool,
    /// Consumed transposed.
    pub is_trans: bool,
}
