//! Kernel templates shared by several ops: each op folder builds its kernels from these and
//! never from another op's folder.

pub(crate) mod attention;
pub(crate) mod common;
pub(crate) mod row_copy;
