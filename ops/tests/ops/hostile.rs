//! A table-driven sweep of hostile inputs over every public function of `tileops-ops` (issue
//! #37): extreme and empty shapes, broadcast (stride-0) and non-contiguous views, non-finite
//! data and parameters, the boundary values of every integer argument, truncated and mistyped
//! weight files, and every numeric parameter of every registered `emit` shape. Each case runs on
//! every backend (the tensor ops) inside `catch_unwind`, and states what must happen: `Ok` (on
//! the Ascend950, `DeviceUnavailable` after the package), or an `Invalid` naming the op and the
//! argument. A panic, a different error, or an `Ok` where an error is due fails the sweep, which
//! reports every failing case at once and the number of cases run.

use crate::support::*;
use candle_core::{DType, Device, Tensor};
use std::panic::{catch_unwind, AssertUnwindSafe};
use tileops_ops::limits::MAX_DIM;
use tileops_ops::registry::OPS;
use tileops_ops::{
    flash_attention, flash_attention_varlen, paged_attention, paged_gather, qk_softmax,
    quant_matmul, quant_matmul_int8, quantize_per_channel, quantize_per_token, reshape_and_cache,
    sparse_paged_attention, Backend, FlashAttentionParams, Int8MatmulParams, OpError,
    PagedAttentionParams, QuantMatmulParams, QuantizedActivations, QuantizedWeight,
    SparseAttentionParams,
};
use tileops_ops::{
    hadamard_rotate, index_cache_append, lightning_indexer, quantize_index_q, Fp8Conversion,
    IndexKeyCache, LightningIndexerParams, ScaleFormat,
};

const CPU: Device = Device::Cpu;

/// What a case must give.
#[derive(Debug, Clone, Copy)]
enum Want {
    /// Success (the Ascend950: `DeviceUnavailable`).
    Ok,
    /// `OpError::Invalid` of this op naming this argument.
    Invalid(&'static str, &'static str),
}

type Run = Box<dyn Fn(Backend) -> Result<(), OpError>>;

/// One row of the table.
struct Case {
    name: String,
    want: Want,
    run: Run,
    /// Whether the result depends on the backend (tensor ops) or not (constructors, files).
    per_backend: bool,
}

fn case(
    name: impl Into<String>,
    want: Want,
    run: impl Fn(Backend) -> Result<(), OpError> + 'static,
) -> Case {
    Case {
        name: name.into(),
        want,
        run: Box::new(run),
        per_backend: true,
    }
}

fn once(
    name: impl Into<String>,
    want: Want,
    run: impl Fn() -> Result<(), OpError> + 'static,
) -> Case {
    Case {
        name: name.into(),
        want,
        run: Box::new(move |_| run()),
        per_backend: false,
    }
}

fn f32s(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
        .collect();
    Tensor::from_vec(v, shape, &CPU).expect("data")
}

/// A stride-0 view of `shape` (one stored element broadcast).
fn wide(shape: &[usize]) -> Tensor {
    let one = vec![1usize; shape.len()];
    Tensor::zeros(one.as_slice(), DType::F32, &CPU)
        .and_then(|t| t.broadcast_as(shape))
        .expect("broadcast")
}

/// A stride-0 view of a moderate `shape` (valid size: made contiguous by the op).
fn bcast(shape: &[usize]) -> Tensor {
    let mut one = shape.to_vec();
    one[0] = 1;
    f32s(&one).broadcast_as(shape).expect("broadcast")
}

fn with_nan(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let mut v: Vec<f32> = (0..n).map(|i| (i % 7) as f32 / 7.0).collect();
    v[n / 2] = f32::NAN;
    Tensor::from_vec(v, shape, &CPU).expect("data")
}

fn i64s(v: &[i64], shape: &[usize]) -> Tensor {
    ints(v, shape, DType::I64)
}

const HUGE: usize = 1 << 31;

// ---------------------------------------------------------------------------------------------
// The tensor ops

fn sparse_cases(out: &mut Vec<Case>) {
    const OP: &str = "sparse_paged_attention";
    #[derive(Clone)]
    struct A {
        q: Tensor,
        kv: Tensor,
        idx: Tensor,
        table: Tensor,
        v_dim: usize,
        scale: f32,
        len: Option<Tensor>,
        sink: Option<Tensor>,
    }
    let base = A {
        q: f32s(&[2, 4, 32]),
        kv: f32s(&[3, 8, 32]),
        idx: i64s(&[0, 5, 9, -1, 3, 17, 2, 8], &[2, 4]),
        table: i64s(&[0, 2, 1, 1, 0, 2], &[2, 3]),
        v_dim: 16,
        scale: 0.2,
        len: None,
        sink: None,
    };
    let mut add = |name: &str, want: Want, f: fn(&mut A)| {
        let mut a = base.clone();
        f(&mut a);
        out.push(case(format!("{OP}: {name}"), want, move |bk| {
            let mut p = SparseAttentionParams::new(a.v_dim, a.scale);
            p.topk_length = a.len.clone();
            p.sink = a.sink.clone();
            sparse_paged_attention(&a.q, &a.kv, &a.idx, &a.table, &p, Some(bk)).map(|_| ())
        }));
    };
    let inv = |arg| Want::Invalid(OP, arg);
    add("base", Want::Ok, |_| {});
    add("huge broadcast q", inv("q"), |a| a.q = wide(&[HUGE, 4, 32]));
    add("huge broadcast kv", inv("kv_cache"), |a| {
        a.kv = wide(&[HUGE, 8, 32])
    });
    add("huge broadcast indices", inv("indices"), |a| {
        a.idx = i64s(&[0], &[1, 1]).broadcast_as((2, HUGE)).expect("b")
    });
    add("huge broadcast table", inv("block_table"), |a| {
        a.table = i64s(&[0], &[1, 1]).broadcast_as((2, HUGE)).expect("b")
    });
    add("broadcast q", Want::Ok, |a| a.q = bcast(&[2, 4, 32]));
    add("transposed q", Want::Ok, |a| {
        a.q = f32s(&[4, 2, 32]).transpose(0, 1).expect("t")
    });
    add("empty q", inv("q"), |a| a.q = f32s(&[2, 0, 32]));
    add("rank-2 q", inv("q"), |a| a.q = f32s(&[2, 32]));
    add("i64 q", inv("q"), |a| a.q = i64s(&[0; 8], &[2, 2, 2]));
    add("NaN q (policy: NaN out)", Want::Ok, |a| {
        a.q = with_nan(&[2, 4, 32])
    });
    add("NaN scale", inv("scale"), |a| a.scale = f32::NAN);
    add("inf scale", inv("scale"), |a| a.scale = f32::INFINITY);
    add("v_dim 0", inv("v_dim"), |a| a.v_dim = 0);
    add("v_dim usize::MAX", inv("v_dim"), |a| a.v_dim = usize::MAX);
    add("index i64::MAX", inv("indices"), |a| {
        a.idx = i64s(&[i64::MAX, 0, 0, 0, 0, 0, 0, 0], &[2, 4])
    });
    add("index i64::MIN", inv("indices"), |a| {
        a.idx = i64s(&[i64::MIN, 0, 0, 0, 0, 0, 0, 0], &[2, 4])
    });
    add("index -2", inv("indices"), |a| {
        a.idx = i64s(&[-2, 0, 0, 0, 0, 0, 0, 0], &[2, 4])
    });
    add("index = capacity", inv("indices"), |a| {
        a.idx = i64s(&[24, 0, 0, 0, 0, 0, 0, 0], &[2, 4])
    });
    add("every index -1", Want::Ok, |a| {
        a.idx = i64s(&[-1; 8], &[2, 4])
    });
    add("u32 indices", inv("indices"), |a| {
        a.idx = ints(&[0; 8], &[2, 4], DType::U32)
    });
    add("table entry i64::MAX", inv("block_table"), |a| {
        a.table = i64s(&[i64::MAX, 0, 0, 0, 0, 0], &[2, 3])
    });
    add("table entry -1 reached", inv("block_table"), |a| {
        a.table = i64s(&[-1, 0, 0, 0, 0, 0], &[2, 3])
    });
    add("table entry = num_blocks", inv("block_table"), |a| {
        a.table = i64s(&[3, 0, 0, 0, 0, 0], &[2, 3])
    });
    add("topk_length -1", inv("topk_length"), |a| {
        a.len = Some(i64s(&[-1, 0], &[2]))
    });
    add("topk_length topk + 1", inv("topk_length"), |a| {
        a.len = Some(i64s(&[5, 0], &[2]))
    });
    add("topk_length i64::MAX", inv("topk_length"), |a| {
        a.len = Some(i64s(&[i64::MAX, 0], &[2]))
    });
    add("topk_length 0, junk past it", Want::Ok, |a| {
        a.len = Some(i64s(&[0, 1], &[2]));
        a.idx = i64s(&[i64::MAX, -7, i64::MIN, 1 << 40, 3, -9, -9, -9], &[2, 4]);
    });
    add("sink NaN", inv("sink"), |a| {
        a.sink = Some(Tensor::new(&[0f32, f32::NAN, 0.0, 0.0], &CPU).expect("s"))
    });
    add("sink +-inf", Want::Ok, |a| {
        a.sink = Some(Tensor::new(&[f32::INFINITY, f32::NEG_INFINITY, 0.0, 1.0], &CPU).expect("s"))
    });
    add("sink f64", inv("sink"), |a| {
        a.sink = Some(Tensor::new(&[0f64; 4], &CPU).expect("s"))
    });
    add("sink of H + 1", inv("sink"), |a| a.sink = Some(f32s(&[5])));
}

fn paged_cases(out: &mut Vec<Case>) {
    const OP: &str = "paged_attention";
    #[derive(Clone)]
    struct A {
        q: Tensor,
        k: Tensor,
        v: Tensor,
        table: Tensor,
        lens: Tensor,
        scale: f32,
    }
    let base = A {
        q: f32s(&[2, 4, 16]),
        k: f32s(&[4, 8, 2, 16]),
        v: f32s(&[4, 8, 2, 16]),
        table: i64s(&[0, 3, 2, 1], &[2, 2]),
        lens: i64s(&[9, 16], &[2]),
        scale: 0.25,
    };
    let mut add = |name: &str, want: Want, f: fn(&mut A)| {
        let mut a = base.clone();
        f(&mut a);
        out.push(case(format!("{OP}: {name}"), want, move |bk| {
            let p = PagedAttentionParams { scale: a.scale };
            paged_attention(&a.q, &a.k, &a.v, &a.table, &a.lens, &p, Some(bk)).map(|_| ())
        }));
    };
    let inv = |arg| Want::Invalid(OP, arg);
    add("base", Want::Ok, |_| {});
    add("huge broadcast q", inv("q"), |a| a.q = wide(&[HUGE, 4, 16]));
    add("huge broadcast k_cache", inv("k_cache"), |a| {
        a.k = wide(&[HUGE, 8, 2, 16])
    });
    add("huge broadcast v_cache", inv("v_cache"), |a| {
        a.v = wide(&[HUGE, 8, 2, 16])
    });
    add("huge broadcast context_lens", inv("context_lens"), |a| {
        a.lens = i64s(&[1], &[1]).broadcast_as(HUGE).expect("b")
    });
    add("broadcast k_cache", Want::Ok, |a| {
        a.k = bcast(&[4, 8, 2, 16])
    });
    add("transposed v_cache", Want::Ok, |a| {
        a.v = f32s(&[8, 4, 2, 16]).transpose(0, 1).expect("t")
    });
    add("NaN k_cache (policy)", Want::Ok, |a| {
        a.k = with_nan(&[4, 8, 2, 16])
    });
    add("context 0", inv("context_lens"), |a| {
        a.lens = i64s(&[0, 1], &[2])
    });
    add("context -1", inv("context_lens"), |a| {
        a.lens = i64s(&[-1, 1], &[2])
    });
    add("context past the table", inv("context_lens"), |a| {
        a.lens = i64s(&[17, 1], &[2])
    });
    add("context i64::MAX", inv("context_lens"), |a| {
        a.lens = i64s(&[i64::MAX, 1], &[2])
    });
    add("context i64::MIN", inv("context_lens"), |a| {
        a.lens = i64s(&[i64::MIN, 1], &[2])
    });
    add("table entry i64::MIN reached", inv("block_table"), |a| {
        a.table = i64s(&[i64::MIN, 0, 0, 0], &[2, 2])
    });
    add("table entry past num_blocks", inv("block_table"), |a| {
        a.table = i64s(&[4, 0, 0, 0], &[2, 2])
    });
    add("H not a multiple of Hkv", inv("k_cache"), |a| {
        a.q = f32s(&[2, 3, 16])
    });
    add("v_cache shape differs", inv("v_cache"), |a| {
        a.v = f32s(&[4, 8, 1, 16])
    });
    add("-inf scale", inv("scale"), |a| a.scale = f32::NEG_INFINITY);
    add("zero scale", Want::Ok, |a| a.scale = 0.0);
}

fn gather_cases(out: &mut Vec<Case>) {
    const OP: &str = "paged_gather";
    #[derive(Clone)]
    struct A {
        src: Tensor,
        idx: Tensor,
        table: Tensor,
        bs: usize,
        size: usize,
    }
    let base = A {
        src: f32s(&[16, 8]),
        idx: i64s(&[0, 5, 7], &[1, 3]),
        table: i64s(&[3, 0, 2, 1], &[1, 4]),
        bs: 4,
        size: 8,
    };
    let mut add = |name: &str, want: Want, f: fn(&mut A)| {
        let mut a = base.clone();
        f(&mut a);
        out.push(case(format!("{OP}: {name}"), want, move |bk| {
            paged_gather(&a.src, &a.idx, &a.table, a.bs, a.size, Some(bk)).map(|_| ())
        }));
    };
    let inv = |arg| Want::Invalid(OP, arg);
    add("base", Want::Ok, |_| {});
    add("huge broadcast src", inv("src"), |a| {
        a.src = wide(&[HUGE, 8])
    });
    add("huge broadcast indices", inv("indices"), |a| {
        a.idx = i64s(&[0], &[1, 1]).broadcast_as((1, HUGE)).expect("b")
    });
    add("broadcast src", Want::Ok, |a| a.src = bcast(&[16, 8]));
    add("NaN src (a copy)", Want::Ok, |a| a.src = with_nan(&[16, 8]));
    add("block_size 0", inv("block_size"), |a| a.bs = 0);
    add("block_size usize::MAX", inv("block_size"), |a| {
        a.bs = usize::MAX
    });
    add("size 0", inv("size"), |a| a.size = 0);
    add("size past C", inv("size"), |a| a.size = 9);
    add("size usize::MAX", inv("size"), |a| a.size = usize::MAX);
    add("index -1", inv("indices"), |a| a.idx = i64s(&[-1], &[1, 1]));
    add("index i64::MAX", inv("indices"), |a| {
        a.idx = i64s(&[i64::MAX], &[1, 1])
    });
    add("index past the table", inv("indices"), |a| {
        a.idx = i64s(&[16], &[1, 1])
    });
    add("table entry past src", inv("block_table"), |a| {
        a.table = i64s(&[4, 0, 0, 0], &[1, 4])
    });
    add("table entry i64::MAX", inv("block_table"), |a| {
        a.table = i64s(&[i64::MAX, 0, 0, 0], &[1, 4])
    });
    add("two index rows", inv("indices"), |a| {
        a.idx = i64s(&[0, 1], &[2, 1])
    });
    add("result of more than MAX_ELEMENTS", inv("indices"), |a| {
        a.src = f32s(&[16, 4096]);
        a.size = 4096;
        a.idx = i64s(&[0], &[1, 1]).broadcast_as((1, 1 << 20)).expect("b");
    });
    // The emit shape's row-width rule (MAX_WIDTH = 65536 static tile columns), run by the call.
    add("size past MAX_WIDTH", inv("size"), |a| {
        a.src = f32s(&[16, 65537]);
        a.size = 65537;
    });
}

fn cache_cases(out: &mut Vec<Case>) {
    const OP: &str = "reshape_and_cache";
    #[derive(Clone)]
    struct A {
        rows: Tensor,
        cache: Tensor,
        slots: Tensor,
    }
    let base = A {
        rows: f32s(&[3, 2, 8]),
        cache: f32s(&[4, 4, 2, 8]),
        slots: i64s(&[0, 15, -1], &[3]),
    };
    let mut add = |name: &str, want: Want, f: fn(&mut A)| {
        let mut a = base.clone();
        f(&mut a);
        out.push(case(format!("{OP}: {name}"), want, move |bk| {
            // A fresh cache per run: the op writes it in place.
            let cache = if a.cache.is_contiguous() {
                a.cache.copy()?
            } else {
                a.cache.clone()
            };
            reshape_and_cache(&a.rows, &cache, &a.slots, Some(bk))
        }));
    };
    let inv = |arg| Want::Invalid(OP, arg);
    add("base", Want::Ok, |_| {});
    add("huge broadcast rows", inv("rows"), |a| {
        a.rows = wide(&[HUGE, 2, 8])
    });
    add("huge broadcast slot_mapping", inv("slot_mapping"), |a| {
        a.slots = i64s(&[0], &[1]).broadcast_as(HUGE).expect("b")
    });
    add("broadcast rows (distinct slots)", Want::Ok, |a| {
        a.rows = bcast(&[3, 2, 8])
    });
    add("row width past MAX_WIDTH", inv("rows"), |a| {
        a.rows = f32s(&[1, 65537]);
        a.cache = f32s(&[1, 2, 65537]);
        a.slots = i64s(&[1], &[1]);
    });
    add("transposed rows", Want::Ok, |a| {
        a.rows = f32s(&[2, 3, 8]).transpose(0, 1).expect("t")
    });
    add("broadcast cache", inv("cache"), |a| {
        a.cache = bcast(&[4, 4, 2, 8])
    });
    add("transposed cache", inv("cache"), |a| {
        a.cache = f32s(&[4, 4, 8, 2]).transpose(2, 3).expect("t")
    });
    add("NaN rows (a copy)", Want::Ok, |a| {
        a.rows = with_nan(&[3, 2, 8])
    });
    add("slot -2", inv("slot_mapping"), |a| {
        a.slots = i64s(&[-2, 0, 1], &[3])
    });
    add("slot = num slots", inv("slot_mapping"), |a| {
        a.slots = i64s(&[16, 0, 1], &[3])
    });
    add("slot i64::MAX", inv("slot_mapping"), |a| {
        a.slots = i64s(&[i64::MAX, 0, 1], &[3])
    });
    add("slot i64::MIN", inv("slot_mapping"), |a| {
        a.slots = i64s(&[i64::MIN, 0, 1], &[3])
    });
    add("duplicate slots", inv("slot_mapping"), |a| {
        a.slots = i64s(&[3, 3, -1], &[3])
    });
    add("rows width differs", inv("rows"), |a| {
        a.rows = f32s(&[3, 16, 2]).narrow(1, 0, 15).expect("n")
    });
    out.push(case(
        format!("{OP}: rows sharing the cache"),
        inv("rows"),
        |bk| {
            let cache = f32s(&[4, 4, 2, 8]);
            let rows = cache.reshape((16, 2, 8))?.narrow(0, 0, 3)?;
            reshape_and_cache(&rows, &cache, &i64s(&[0, 1, 2], &[3]), Some(bk))
        },
    ));
}

fn flash_cases(out: &mut Vec<Case>) {
    const OP: &str = "flash_attention";
    #[derive(Clone)]
    struct A {
        q: Tensor,
        k: Tensor,
        v: Tensor,
        scale: f32,
    }
    let base = A {
        q: f32s(&[1, 4, 20, 32]),
        k: f32s(&[1, 2, 24, 32]),
        v: f32s(&[1, 2, 24, 16]),
        scale: 0.17,
    };
    let mut add = |name: &str, want: Want, f: fn(&mut A)| {
        let mut a = base.clone();
        f(&mut a);
        out.push(case(format!("{OP}: {name}"), want, move |bk| {
            let p = FlashAttentionParams::new(a.scale, true);
            flash_attention(&a.q, &a.k, &a.v, &p, Some(bk)).map(|_| ())
        }));
    };
    let inv = |arg| Want::Invalid(OP, arg);
    add("base", Want::Ok, |_| {});
    add("huge broadcast q", inv("q"), |a| {
        a.q = wide(&[2, 4, 1 << 28, 32])
    });
    add("huge broadcast k", inv("k"), |a| {
        a.k = wide(&[1, 2, 1 << 30, 32])
    });
    add("huge broadcast v", inv("v"), |a| {
        a.v = wide(&[1, 2, 1 << 30, 16])
    });
    add("result too large", inv("v"), |a| {
        a.q = wide(&[1, 1, 1 << 23, 1]);
        a.k = f32s(&[1, 1, 4, 1]);
        a.v = f32s(&[1, 1, 4, 256]);
    });
    add("broadcast k", Want::Ok, |a| a.k = bcast(&[1, 2, 24, 32]));
    add("transposed k and v", Want::Ok, |a| {
        a.k = f32s(&[1, 24, 2, 32]).transpose(1, 2).expect("t");
        a.v = f32s(&[1, 24, 2, 16]).transpose(1, 2).expect("t");
    });
    add("Sq 0", Want::Ok, |a| a.q = f32s(&[1, 4, 0, 32]));
    add("Skv 0", Want::Ok, |a| {
        a.k = f32s(&[1, 2, 0, 32]);
        a.v = f32s(&[1, 2, 0, 16]);
    });
    add("B 0", inv("q"), |a| a.q = f32s(&[0, 4, 20, 32]));
    add("D 257", inv("q"), |a| {
        a.q = f32s(&[1, 4, 2, 257]);
        a.k = f32s(&[1, 2, 2, 257]);
        a.v = f32s(&[1, 2, 2, 16]);
    });
    add("Dv 257", inv("v"), |a| a.v = f32s(&[1, 2, 24, 257]));
    add("GQA 4/3", inv("k"), |a| {
        a.k = f32s(&[1, 3, 24, 32]);
        a.v = f32s(&[1, 3, 24, 16]);
    });
    add("NaN v (policy)", Want::Ok, |a| {
        a.v = with_nan(&[1, 2, 24, 16])
    });
    add("NaN scale", inv("scale"), |a| a.scale = f32::NAN);
    add("u8 q", inv("q"), |a| {
        a.q = ints(&[0; 4], &[1, 1, 1, 4], DType::U8)
    });
    add("f16 k with f32 q", inv("k"), |a| {
        a.k = a.k.to_dtype(DType::F16).expect("f16")
    });
}

fn varlen_cases(out: &mut Vec<Case>) {
    const OP: &str = "flash_attention_varlen";
    #[derive(Clone)]
    struct A {
        q: Tensor,
        k: Tensor,
        v: Tensor,
        cq: Tensor,
        ck: Tensor,
    }
    let base = A {
        q: f32s(&[12, 2, 16]),
        k: f32s(&[10, 1, 16]),
        v: f32s(&[10, 1, 16]),
        cq: i64s(&[0, 5, 12], &[3]),
        ck: i64s(&[0, 4, 10], &[3]),
    };
    let mut add = |name: &str, want: Want, f: fn(&mut A)| {
        let mut a = base.clone();
        f(&mut a);
        out.push(case(format!("{OP}: {name}"), want, move |bk| {
            let p = FlashAttentionParams::new(0.25, false);
            flash_attention_varlen(&a.q, &a.k, &a.v, &a.cq, &a.ck, &p, Some(bk)).map(|_| ())
        }));
    };
    let inv = |arg| Want::Invalid(OP, arg);
    add("base", Want::Ok, |_| {});
    add("huge broadcast q", inv("q"), |a| {
        a.q = wide(&[1 << 28, 2, 16]);
        a.cq = i64s(&[0, 5, 1 << 28], &[3]);
    });
    add("huge broadcast cu_seqlens_q", inv("cu_seqlens_q"), |a| {
        a.cq = i64s(&[0], &[1]).broadcast_as(HUGE).expect("b")
    });
    add("transposed q", Want::Ok, |a| {
        a.q = f32s(&[2, 12, 16]).transpose(0, 1).expect("t")
    });
    add("cu_seqlens_q not from 0", inv("cu_seqlens_q"), |a| {
        a.cq = i64s(&[1, 5, 12], &[3])
    });
    add("cu_seqlens_q decreasing", inv("cu_seqlens_q"), |a| {
        a.cq = i64s(&[0, 13, 12], &[3])
    });
    add("cu_seqlens_q i64::MIN", inv("cu_seqlens_q"), |a| {
        a.cq = i64s(&[0, i64::MIN, 12], &[3])
    });
    add("cu_seqlens_k u32::MAX end", inv("cu_seqlens_k"), |a| {
        a.ck = ints(&[0, 4, i64::from(u32::MAX)], &[3], DType::U32)
    });
    add("cu_seqlens of B + 1 = 1", inv("cu_seqlens_q"), |a| {
        a.cq = i64s(&[12], &[1])
    });
    add("cu lengths differ", inv("cu_seqlens_k"), |a| {
        a.ck = i64s(&[0, 10], &[2])
    });
    add("empty sequences", Want::Ok, |a| {
        a.cq = i64s(&[0, 0, 12], &[3]);
        a.ck = i64s(&[0, 10, 10], &[3]);
    });
}

fn qk_cases(out: &mut Vec<Case>) {
    const OP: &str = "qk_softmax";
    let base = (f32s(&[8, 32]), f32s(&[24, 32]), 0.2f32);
    let mut add = |name: &str, want: Want, f: fn(&mut (Tensor, Tensor, f32))| {
        let mut a = base.clone();
        f(&mut a);
        out.push(case(format!("{OP}: {name}"), want, move |bk| {
            qk_softmax(&a.0, &a.1, a.2, Some(bk)).map(|_| ())
        }));
    };
    let inv = |arg| Want::Invalid(OP, arg);
    add("base", Want::Ok, |_| {});
    add("huge broadcast q", inv("q"), |a| a.0 = wide(&[1 << 26, 32]));
    add("huge broadcast k", inv("k"), |a| a.1 = wide(&[1 << 26, 32]));
    add("P too large", inv("k"), |a| {
        a.0 = wide(&[1 << 16, 1]);
        a.1 = wide(&[1 << 16, 1]);
    });
    add("transposed k", Want::Ok, |a| {
        a.1 = f32s(&[32, 24]).t().expect("t")
    });
    add("M 0", inv("q"), |a| a.0 = f32s(&[0, 32]));
    add("D 257", inv("q"), |a| {
        a.0 = f32s(&[2, 257]);
        a.1 = f32s(&[2, 257]);
    });
    add("NaN q (policy)", Want::Ok, |a| a.0 = with_nan(&[8, 32]));
    add("inf scale", inv("scale"), |a| a.2 = f32::INFINITY);
}

fn quant_cases(out: &mut Vec<Case>) {
    const OP: &str = "quant_matmul";
    let w = || quantize_per_channel(&f32s(&[12, 40])).expect("w");
    let inv = |arg| Want::Invalid(OP, arg);
    let xs: Vec<(&str, Want, Tensor)> = vec![
        ("base", Want::Ok, f32s(&[3, 40])),
        (
            "bf16 x",
            Want::Ok,
            f32s(&[3, 40]).to_dtype(DType::BF16).expect("bf16"),
        ),
        ("broadcast x", Want::Ok, bcast(&[3, 40])),
        ("transposed x", Want::Ok, f32s(&[40, 3]).t().expect("t")),
        ("huge broadcast x", inv("x"), wide(&[1 << 26, 40])),
        ("NaN x", inv("x"), with_nan(&[3, 40])),
        ("x of K + 1", inv("x"), f32s(&[3, 41])),
        ("empty x", inv("x"), f32s(&[0, 40])),
        (
            "x row of max 1e-30",
            inv("x"),
            (f32s(&[2, 40]) * 1e-30).expect("tiny"),
        ),
        (
            "x row of max 1e30",
            inv("x"),
            (f32s(&[2, 40]) * 1e30).expect("big"),
        ),
        (
            "x all zero",
            Want::Ok,
            Tensor::zeros((2, 40), DType::F32, &CPU).expect("z"),
        ),
    ];
    for (name, want, x) in xs {
        let w = w();
        out.push(case(format!("{OP}: {name}"), want, move |bk| {
            quant_matmul(&x, &w, &QuantMatmulParams::default(), Some(bk)).map(|_| ())
        }));
    }
    let biases: Vec<(&str, Want, Tensor)> = vec![
        ("bias [N]", Want::Ok, f32s(&[12])),
        ("bias [N + 1]", inv("bias"), f32s(&[13])),
        ("bias huge broadcast", inv("bias"), wide(&[HUGE])),
        ("bias broadcast [N]", Want::Ok, wide(&[12])),
    ];
    for (name, want, b) in biases {
        let w = w();
        out.push(case(format!("{OP}: {name}"), want, move |bk| {
            let p = QuantMatmulParams {
                bias: Some(b.clone()),
                ..Default::default()
            };
            quant_matmul(&f32s(&[2, 40]), &w, &p, Some(bk)).map(|_| ())
        }));
    }
    out.push(case(
        format!("{OP}: result of more than MAX_ELEMENTS"),
        inv("x"),
        |bk| {
            let w = QuantizedWeight::new(vec![1; 1 << 16], vec![1.0; 1 << 16], 1 << 16, 1)?;
            quant_matmul(
                &wide(&[1 << 16, 1]),
                &w,
                &QuantMatmulParams::default(),
                Some(bk),
            )
            .map(|_| ())
        },
    ));
    let w1 = w();
    out.push(case(
        format!("{OP}: out dtype u32"),
        inv("out_dtype"),
        move |bk| {
            let p = QuantMatmulParams {
                out_dtype: Some(DType::U32),
                ..Default::default()
            };
            quant_matmul(&f32s(&[2, 40]), &w1, &p, Some(bk)).map(|_| ())
        },
    ));
    // The int8 chain.
    const OP8: &str = "quant_matmul_int8";
    for (name, want, s) in [
        ("out_scale 0.05", Want::Ok, 0.05f32),
        ("out_scale 0", Want::Invalid(OP8, "out_scale"), 0.0),
        ("out_scale -1", Want::Invalid(OP8, "out_scale"), -1.0),
        ("out_scale NaN", Want::Invalid(OP8, "out_scale"), f32::NAN),
        (
            "out_scale inf",
            Want::Invalid(OP8, "out_scale"),
            f32::INFINITY,
        ),
        (
            "out_scale 1e38 (word below f32's normal range)",
            Want::Invalid(OP8, "out_scale"),
            1e38,
        ),
    ] {
        let w = w();
        out.push(case(format!("{OP8}: {name}"), want, move |bk| {
            let x = QuantizedActivations::new(vec![3; 2 * 40], 2, 40, 0.01)?;
            let p = Int8MatmulParams {
                out_scale: s,
                relu: true,
            };
            quant_matmul_int8(&x, &w, &p, Some(bk)).map(|_| ())
        }));
    }
    let w2 = w();
    out.push(case(
        format!("{OP8}: x of K + 1"),
        Want::Invalid(OP8, "x"),
        move |bk| {
            let x = QuantizedActivations::new(vec![3; 41], 1, 41, 0.01)?;
            let p = Int8MatmulParams {
                out_scale: 1.0,
                relu: false,
            };
            quant_matmul_int8(&x, &w2, &p, Some(bk)).map(|_| ())
        },
    ));
}

// ---------------------------------------------------------------------------------------------
// Constructors, quantisers and weight files (no backend)

fn indexer_cases(out: &mut Vec<Case>) {
    const OP: &str = "lightning_indexer";
    #[derive(Clone)]
    struct A {
        q: Tensor,
        w: Tensor,
        cache: (Tensor, Option<Tensor>),
        table: Tensor,
        lens: Tensor,
        topk: usize,
        block_size: Option<usize>,
    }
    let fp8 = IndexKeyCache::zeros_fp8(3, 8, 128, ScaleFormat::Ue8m0, &CPU).expect("cache");
    let base = A {
        q: f32s(&[2, 4, 128]),
        w: f32s(&[2, 4]),
        cache: (f32s(&[3, 8, 128]), None),
        table: i64s(&[0, 2, -1, 1, 0, 2], &[2, 3]),
        lens: i64s(&[5, 20], &[2]),
        topk: 4,
        block_size: None,
    };
    let mut add = |name: &str, want: Want, f: &dyn Fn(&mut A)| {
        let mut a = base.clone();
        f(&mut a);
        out.push(case(format!("{OP}: {name}"), want, move |bk| {
            let cache = IndexKeyCache::from_parts(a.cache.0.clone(), a.cache.1.clone())?;
            let mut p = LightningIndexerParams::new(a.topk);
            p.block_size = a.block_size;
            lightning_indexer(&a.q, &a.w, &cache, &a.table, &a.lens, &p, Some(bk)).map(|_| ())
        }));
    };
    let inv = |arg| Want::Invalid(OP, arg);
    add("base", Want::Ok, &|_| {});
    let parts = (fp8.data().clone(), fp8.scales().cloned());
    add("FP8 ue8m0 cache", Want::Ok, &move |a| {
        a.cache = parts.clone()
    });
    add("huge broadcast q", inv("q"), &|a| {
        a.q = wide(&[HUGE, 4, 128])
    });
    add("huge broadcast weights", inv("weights"), &|a| {
        a.w = wide(&[HUGE, 4])
    });
    add("huge broadcast block_table", inv("block_table"), &|a| {
        a.table = i64s(&[0], &[1, 1]).broadcast_as((2, HUGE)).expect("b")
    });
    add("q rank 2", inv("q"), &|a| a.q = f32s(&[2, 512]));
    add("q empty", inv("q"), &|a| a.q = f32s(&[0, 4, 128]));
    add("q NaN (scores NaN)", Want::Ok, &|a| {
        a.q = with_nan(&[2, 4, 128])
    });
    add("q broadcast view", Want::Ok, &|a| a.q = bcast(&[2, 4, 128]));
    add("q transposed view", Want::Ok, &|a| {
        a.q = f32s(&[4, 2, 128]).transpose(0, 1).expect("t")
    });
    add("weights NaN (scores NaN)", Want::Ok, &|a| {
        a.w = with_nan(&[2, 4])
    });
    add("weights rows", inv("weights"), &|a| a.w = f32s(&[3, 4]));
    add("weights i64", inv("weights"), &|a| {
        a.w = i64s(&[0; 8], &[2, 4])
    });
    add("cache D differs", inv("k_cache"), &|a| {
        a.cache = (f32s(&[3, 8, 64]), None)
    });
    add("block_size param differs", inv("block_size"), &|a| {
        a.block_size = Some(16)
    });
    add("block_size param usize::MAX", inv("block_size"), &|a| {
        a.block_size = Some(usize::MAX)
    });
    add("block_table rank 1", inv("block_table"), &|a| {
        a.table = i64s(&[0, 1], &[2])
    });
    add("block_table reached -1", inv("block_table"), &|a| {
        a.table = i64s(&[-1, 2, -1, 1, 0, 2], &[2, 3])
    });
    add("block_table reached i64::MAX", inv("block_table"), &|a| {
        a.table = i64s(&[0, 2, -1, 1, 0, i64::MAX], &[2, 3])
    });
    add("block_table reached u32::MAX", inv("block_table"), &|a| {
        a.table = ints(&[0, 2, 0, 1, 0, u32::MAX as i64], &[2, 3], DType::U32)
    });
    add("block_table i64::MIN past the context", Want::Ok, &|a| {
        a.table = i64s(&[0, i64::MIN, i64::MIN, 1, 0, 2], &[2, 3])
    });
    add("block_table f32", inv("block_table"), &|a| {
        a.table = f32s(&[2, 3])
    });
    add("context_lens -1", inv("context_lens"), &|a| {
        a.lens = i64s(&[-1, 3], &[2])
    });
    add("context_lens i64::MIN", inv("context_lens"), &|a| {
        a.lens = i64s(&[i64::MIN, 3], &[2])
    });
    add("context_lens i64::MAX", inv("context_lens"), &|a| {
        a.lens = i64s(&[i64::MAX, 3], &[2])
    });
    add("context_lens past the table", inv("context_lens"), &|a| {
        a.lens = i64s(&[25, 3], &[2])
    });
    add("context_lens 0", Want::Ok, &|a| {
        a.lens = i64s(&[0, 0], &[2])
    });
    add("context_lens length", inv("context_lens"), &|a| {
        a.lens = i64s(&[1, 2, 3], &[3])
    });
    add("topk 0", inv("topk"), &|a| a.topk = 0);
    add("topk usize::MAX", inv("topk"), &|a| a.topk = usize::MAX);
    add("topk MAX_DIM + 1", inv("topk"), &|a| a.topk = MAX_DIM + 1);
    add("topk result past MAX_ELEMENTS", inv("topk"), &|a| {
        a.topk = HUGE / 2
    });
    add("topk past every context", Want::Ok, &|a| a.topk = 1000);

    const APPEND: &str = "index_cache_append";
    let mut append = |name: &str, want: Want, k: Tensor, slots: Tensor| {
        out.push(case(format!("{APPEND}: {name}"), want, move |bk| {
            let cache = IndexKeyCache::zeros_fp8(2, 4, 128, ScaleFormat::F32, &CPU)?;
            index_cache_append(&cache, &k, &slots, Fp8Conversion::default(), Some(bk))
        }));
    };
    let inv = |arg| Want::Invalid(APPEND, arg);
    append("base", Want::Ok, f32s(&[3, 128]), i64s(&[0, 7, -1], &[3]));
    append(
        "k NaN",
        inv("k"),
        with_nan(&[3, 128]),
        i64s(&[0, 7, 1], &[3]),
    );
    append(
        "k huge broadcast",
        inv("k"),
        wide(&[HUGE, 128]),
        i64s(&[0], &[1]),
    );
    append(
        "k D differs",
        inv("k"),
        f32s(&[3, 256]),
        i64s(&[0, 1, 2], &[3]),
    );
    append(
        "slot -2",
        inv("slot_mapping"),
        f32s(&[3, 128]),
        i64s(&[-2, 0, 1], &[3]),
    );
    append(
        "slot = num slots",
        inv("slot_mapping"),
        f32s(&[3, 128]),
        i64s(&[8, 0, 1], &[3]),
    );
    append(
        "slot i64::MAX",
        inv("slot_mapping"),
        f32s(&[3, 128]),
        i64s(&[i64::MAX, 0, 1], &[3]),
    );
    append(
        "slot i64::MIN",
        inv("slot_mapping"),
        f32s(&[3, 128]),
        i64s(&[i64::MIN, 0, 1], &[3]),
    );
    append(
        "duplicate slots",
        inv("slot_mapping"),
        f32s(&[3, 128]),
        i64s(&[3, 3, -1], &[3]),
    );

    let c = "index_key_cache";
    out.push(once(
        "IndexKeyCache::zeros_fp8 huge",
        Want::Invalid(c, "data"),
        || IndexKeyCache::zeros_fp8(HUGE, HUGE, 128, ScaleFormat::F32, &CPU).map(|_| ()),
    ));
    out.push(once(
        "IndexKeyCache::zeros_fp8 usize::MAX",
        Want::Invalid(c, "data"),
        || IndexKeyCache::zeros_fp8(usize::MAX, 2, 128, ScaleFormat::Ue8m0, &CPU).map(|_| ()),
    ));
    out.push(once(
        "IndexKeyCache::zeros_fp8 D 0",
        Want::Invalid(c, "data"),
        || IndexKeyCache::zeros_fp8(2, 2, 0, ScaleFormat::F32, &CPU).map(|_| ()),
    ));
    out.push(once(
        "quantize_index_q inf",
        Want::Invalid("quantize_index_q", "q"),
        || {
            let mut v = vec![0f32; 128];
            v[9] = f32::NEG_INFINITY;
            let q = Tensor::from_vec(v, (1, 128), &CPU)?;
            quantize_index_q(&q, ScaleFormat::Ue8m0, Fp8Conversion::default()).map(|_| ())
        },
    ));
    out.push(once(
        "quantize_index_q huge broadcast",
        Want::Invalid("quantize_index_q", "q"),
        || {
            quantize_index_q(
                &wide(&[HUGE, 128]),
                ScaleFormat::F32,
                Fp8Conversion::default(),
            )
            .map(|_| ())
        },
    ));
    out.push(once(
        "hadamard_rotate D 0",
        Want::Invalid("hadamard_rotate", "x"),
        || hadamard_rotate(&f32s(&[2, 0])).map(|_| ()),
    ));
    out.push(once(
        "hadamard_rotate huge broadcast",
        Want::Invalid("hadamard_rotate", "x"),
        || hadamard_rotate(&wide(&[HUGE, 128])).map(|_| ()),
    ));
}

fn constructor_cases(out: &mut Vec<Case>) {
    let q = "quantize";
    let rows = [
        (
            "QuantizedWeight::new n 0",
            Want::Invalid(q, "weight"),
            (vec![], vec![], 0, 4),
        ),
        (
            "QuantizedWeight::new k 0",
            Want::Invalid(q, "weight"),
            (vec![], vec![1.0], 1, 0),
        ),
        (
            "QuantizedWeight::new n * k overflows",
            Want::Invalid(q, "weight"),
            (vec![], vec![], usize::MAX, 2),
        ),
        (
            "QuantizedWeight::new short data",
            Want::Invalid(q, "data"),
            (vec![1; 3], vec![1.0], 1, 4),
        ),
        (
            "QuantizedWeight::new N + 1 scales",
            Want::Invalid(q, "scale"),
            (vec![1; 4], vec![1.0; 2], 1, 4),
        ),
        (
            "QuantizedWeight::new NaN scale",
            Want::Invalid(q, "scale"),
            (vec![1; 4], vec![f32::NAN], 1, 4),
        ),
        (
            "QuantizedWeight::new scale 0",
            Want::Invalid(q, "scale"),
            (vec![1; 4], vec![0.0], 1, 4),
        ),
        (
            "QuantizedWeight::new scale -1",
            Want::Invalid(q, "scale"),
            (vec![1; 4], vec![-1.0], 1, 4),
        ),
        (
            "QuantizedWeight::new scale 2^50",
            Want::Invalid(q, "scale"),
            (vec![1; 4], vec![2f32.powi(50)], 1, 4),
        ),
        (
            "QuantizedWeight::new scale 1e-40",
            Want::Invalid(q, "scale"),
            (vec![1; 4], vec![1e-40], 1, 4),
        ),
        (
            "QuantizedWeight::new -128 data",
            Want::Ok,
            (vec![-128; 4], vec![1.0], 1, 4),
        ),
    ];
    for (name, want, (d, s, n, k)) in rows {
        out.push(once(name, want, move || {
            QuantizedWeight::new(d.clone(), s.clone(), n, k).map(|_| ())
        }));
    }
    let q8 = "quant_matmul_int8";
    for (name, want, (m, k, s)) in [
        (
            "QuantizedActivations::new m * k overflows",
            Want::Invalid(q8, "data"),
            (usize::MAX, 2, 1.0f32),
        ),
        (
            "QuantizedActivations::new m 0",
            Want::Invalid(q8, "data"),
            (0, 4, 1.0),
        ),
        (
            "QuantizedActivations::new scale 0",
            Want::Invalid(q8, "scale"),
            (1, 4, 0.0),
        ),
        (
            "QuantizedActivations::new scale inf",
            Want::Invalid(q8, "scale"),
            (1, 4, f32::INFINITY),
        ),
        ("QuantizedActivations::new ok", Want::Ok, (1, 4, 0.5)),
    ] {
        out.push(once(name, want, move || {
            QuantizedActivations::new(vec![1; 4], m, k, s).map(|_| ())
        }));
    }
    for (name, want, x, s) in [
        (
            "QuantizedActivations::quantize NaN",
            Want::Invalid(q8, "x"),
            with_nan(&[2, 4]),
            1.0f32,
        ),
        (
            "QuantizedActivations::quantize huge broadcast",
            Want::Invalid(q8, "x"),
            wide(&[1 << 26, 64]),
            1.0,
        ),
        (
            "QuantizedActivations::quantize scale NaN",
            Want::Invalid(q8, "scale"),
            f32s(&[2, 4]),
            f32::NAN,
        ),
        (
            "QuantizedActivations::quantize scale 1e-45",
            Want::Ok,
            f32s(&[2, 4]),
            1e-45,
        ),
        (
            "QuantizedActivations::quantize transposed",
            Want::Ok,
            f32s(&[4, 2]).t().expect("t"),
            0.1,
        ),
    ] {
        out.push(once(name, want, move || {
            QuantizedActivations::quantize(&x, s).map(|_| ())
        }));
    }
    for (name, want, x) in [
        (
            "quantize_per_token NaN",
            Want::Invalid("quantize_per_token", "x"),
            with_nan(&[2, 4]),
        ),
        (
            "quantize_per_token rank 3",
            Want::Invalid("quantize_per_token", "x"),
            f32s(&[2, 2, 2]),
        ),
        (
            "quantize_per_token huge broadcast",
            Want::Invalid("quantize_per_token", "x"),
            wide(&[1 << 26, 64]),
        ),
        (
            "quantize_per_channel inf",
            Want::Invalid("quantize_per_channel", "w"),
            {
                let mut v = vec![1f32; 8];
                v[3] = f32::NEG_INFINITY;
                Tensor::from_vec(v, (2, 4), &CPU).expect("w")
            },
        ),
        (
            "quantize_per_channel row max 1e-30",
            Want::Invalid("quantize_per_channel", "w"),
            (f32s(&[2, 4]) * 1e-30).expect("w"),
        ),
        (
            "quantize_per_channel i64",
            Want::Invalid("quantize_per_channel", "w"),
            i64s(&[1; 4], &[2, 2]),
        ),
    ] {
        let per_channel = name.starts_with("quantize_per_channel");
        out.push(once(name, want, move || {
            if per_channel {
                quantize_per_channel(&x).map(|_| ())
            } else {
                quantize_per_token(&x).map(|_| ())
            }
        }));
    }
}

/// Weight files: truncated, of the wrong dtype or shape, missing tensors, not safetensors.
fn file_cases(out: &mut Vec<Case>) {
    let dir = std::env::temp_dir().join(format!("tileops-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let w = quantize_per_channel(&f32s(&[4, 8])).expect("w");
    let good = dir.join("w.safetensors");
    w.save(&good, "w").expect("save");
    let bytes = std::fs::read(&good).expect("read");
    let write = |name: &str, b: &[u8]| {
        let p = dir.join(name);
        std::fs::write(&p, b).expect("write");
        p
    };
    let truncated = write("truncated.safetensors", &bytes[..bytes.len() - 5]);
    let header_only = write("header.safetensors", &bytes[..8]);
    let empty = write("empty.safetensors", &[]);
    let f32_data = {
        let t = f32s(&[4, 8]);
        let s = f32s(&[4]);
        let p = dir.join("f32.safetensors");
        candle_core::safetensors::save(
            &std::collections::HashMap::from([("w".to_string(), t), ("w_scale".to_string(), s)]),
            &p,
        )
        .expect("save f32");
        p
    };
    let nan_scale = {
        let scale = Tensor::new(&[1f32, f32::NAN, 1.0, 1.0], &CPU).expect("s");
        let data: Vec<u8> = vec![1u8; 32];
        let views = vec![(
            "w".to_string(),
            safetensors::tensor::TensorView::new(safetensors::Dtype::I8, vec![4, 8], &data)
                .expect("view"),
        )];
        let p = dir.join("nan.safetensors");
        let sb: Vec<u8> = scale
            .to_vec1::<f32>()
            .expect("s")
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let mut views = views;
        views.push((
            "w_scale".to_string(),
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![4], &sb)
                .expect("view"),
        ));
        safetensors::serialize_to_file(views, None, &p).expect("save");
        p
    };
    let q = "quantize";
    let rows = [
        ("load: good file", Want::Ok, good.clone(), "w"),
        (
            "load: missing tensor",
            Want::Invalid(q, "safetensors"),
            good.clone(),
            "nope",
        ),
        (
            "load: truncated file",
            Want::Invalid(q, "path"),
            truncated,
            "w",
        ),
        (
            "load: header only",
            Want::Invalid(q, "path"),
            header_only,
            "w",
        ),
        ("load: empty file", Want::Invalid(q, "path"), empty, "w"),
        (
            "load: no such file",
            Want::Invalid(q, "path"),
            dir.join("absent"),
            "w",
        ),
        (
            "load: f32 data",
            Want::Invalid(q, "safetensors"),
            f32_data,
            "w",
        ),
        ("load: NaN scale", Want::Invalid(q, "scale"), nan_scale, "w"),
    ];
    for (name, want, path, tensor) in rows {
        out.push(once(name, want, move || {
            QuantizedWeight::load(&path, tensor).map(|_| ())
        }));
    }
}

// ---------------------------------------------------------------------------------------------
// The registered `emit` shapes: every numeric parameter at 0 and past MAX_DIM is refused with
// an Invalid naming it, never a panic (tile-backend's example kernels included: their sizes
// are checked before their builders multiply them).

fn emit_cases(out: &mut Vec<Case>) {
    for op in OPS {
        for p in op.params {
            let default = op.default_of(p.name).unwrap_or_default();
            if default.parse::<u64>().is_err() {
                continue; // dtype, bool and preset parameters
            }
            for v in [
                "0".to_string(),
                (MAX_DIM as u64 + 1).to_string(),
                u64::MAX.to_string(),
            ] {
                let name = format!("emit {}: --{} {v}", op.name, p.flag());
                let spec = *op;
                let param = p.name;
                let value = v.clone();
                out.push(Case {
                    name,
                    want: Want::Invalid("(emit)", param),
                    run: Box::new(move |_| {
                        match spec.launches(&[(param.to_string(), value.clone())]) {
                            Ok(_) => Ok(()),
                            Err(tileops_ops::registry::BuildError::Op(e)) => Err(e),
                            Err(e) => Err(OpError::invalid("(emit)", param, e.to_string())),
                        }
                    }),
                    per_backend: false,
                });
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The sweep

/// Checks one outcome against what the case wants; `None` when it holds.
fn judge(want: Want, bk: Backend, r: Result<(), OpError>) -> Option<String> {
    match (want, r) {
        (Want::Ok, Ok(())) => None,
        (Want::Ok, Err(OpError::DeviceUnavailable { .. })) if bk == Backend::Ascend950 => None,
        // Calls with no tile kernel yet (docs/ops.md, "`lightning_indexer`": FP8 keys).
        (Want::Ok, Err(OpError::NoKernel { op, .. }))
            if bk != Backend::Reference && NO_KERNEL_YET.contains(&op) =>
        {
            None
        }
        (Want::Ok, Err(e)) => Some(format!("expected Ok, got: {e}")),
        (Want::Invalid(op, arg), Err(e @ OpError::Invalid { .. })) => {
            let OpError::Invalid { op: o, arg: a, .. } = &e else {
                return None;
            };
            let msg = e.to_string();
            // The emit rows accept any op name, as long as the parameter is named.
            let op_ok = op == "(emit)" || *o == op;
            if op_ok && *a == arg && msg.contains(&format!("`{arg}`")) {
                None
            } else {
                Some(format!("expected Invalid({op}, {arg}), got: {msg}"))
            }
        }
        (Want::Invalid(op, arg), Err(e)) => {
            Some(format!("expected Invalid({op}, {arg}), got: {e}"))
        }
        (Want::Invalid(op, arg), Ok(())) => Some(format!("expected Invalid({op}, {arg}), got Ok")),
    }
}

/// The ops the kernel backends may answer with `OpError::NoKernel` (after validating the call):
/// `lightning_indexer` with FP8 keys, `index_cache_append`.
const NO_KERNEL_YET: &[&str] = &["lightning_indexer", "index_cache_append"];

/// Every registered op (but tile-backend's example kernels) has rows in the sweep, so a new op
/// cannot join the registry without its hostile inputs.
#[test]
fn every_registered_op_is_swept() {
    let mut cases = Vec::new();
    sparse_cases(&mut cases);
    paged_cases(&mut cases);
    gather_cases(&mut cases);
    cache_cases(&mut cases);
    flash_cases(&mut cases);
    varlen_cases(&mut cases);
    qk_cases(&mut cases);
    quant_cases(&mut cases);
    indexer_cases(&mut cases);
    for op in OPS
        .iter()
        .filter(|o| !["matmul", "attention", "gather-matmul", "worked-matmul"].contains(&o.name))
    {
        let name = op.name.replace('-', "_");
        assert!(
            cases
                .iter()
                .any(|c| c.name.starts_with(&format!("{name}: "))),
            "op `{}` has no row in the hostile sweep",
            op.name
        );
    }
}

#[test]
fn hostile_inputs_sweep() {
    let mut cases = Vec::new();
    sparse_cases(&mut cases);
    paged_cases(&mut cases);
    gather_cases(&mut cases);
    cache_cases(&mut cases);
    flash_cases(&mut cases);
    varlen_cases(&mut cases);
    qk_cases(&mut cases);
    quant_cases(&mut cases);
    indexer_cases(&mut cases);
    constructor_cases(&mut cases);
    file_cases(&mut cases);
    emit_cases(&mut cases);
    let mut runs = 0usize;
    let mut failures = Vec::new();
    for c in &cases {
        let backends: &[Backend] = if c.per_backend {
            &[Backend::Reference, Backend::TileSim, Backend::Ascend950]
        } else {
            &[Backend::Reference]
        };
        for &bk in backends {
            runs += 1;
            match catch_unwind(AssertUnwindSafe(|| (c.run)(bk))) {
                Ok(r) => {
                    if let Some(why) = judge(c.want, bk, r) {
                        failures.push(format!("{} [{}]: {why}", c.name, bk.name()));
                    }
                }
                Err(_) => failures.push(format!("{} [{}]: panicked", c.name, bk.name())),
            }
        }
    }
    eprintln!("hostile sweep: {} cases, {runs} runs", cases.len());
    assert!(
        failures.is_empty(),
        "{} of {runs} runs failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
