//! The tile IR: typed tiles, GM views, scalar expressions, operations, structured control flow
//! and per-core sections. Kernels are plain data (serde) built by [`crate::dsl::KernelBuilder`].
//! The IR depends on no other module of the crate: the machine model (`arch`), the simulator and
//! the code generator read it, never the reverse.

mod dtype;
mod expr;
mod kernel;
mod layout;
mod op;
mod space;
mod tile;

pub use dtype::DType;
pub use expr::{BinOp, EvalError, Expr, ExprEnv, NoEnv, ParamId, VarId};
pub use kernel::{
    walk_ops, Channel, Kernel, OpLoc, Param, ParamKind, Stmt, Target, ValueRange, VarDecl,
};
pub use layout::{c0, round_up, Fractal, Layout, C0_BYTES};
pub use op::{
    op_names, pair_cols, AccToVecMode, Axis, BinaryOp, ChannelId, CostClass, GatherOp, GmUse,
    Listing, LoadStoreOp, MatmulOp, MoveOp, Op, OpDisplay, Phase, Pipe, QuantWord, ReduceOp,
    RoundMode, ScalarArg, ScalarOp, Scale, SortOp, SpaceOf, SyncOp, UnaryOp, UnitFlag, VectorOp,
};
pub use space::{CoreKind, MemSpace};
pub use tile::{GmView, PadValue, Storage, TileDecl, TileId, TileRef, TileType, ValidDim};
