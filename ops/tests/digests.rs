//! Behaviour digests: a fingerprint of every registry kernel's emitted package and simulated
//! outputs, and of every op's TileSim outputs under both launch plans, compared against the
//! committed file `ops/tests/data/digests.txt`.
//!
//! The file is the proof that a refactor of the simulator, the IR or the registry moved no
//! byte: a change that alters an output or an emitted package fails [`digests_match`] with the
//! names of the entries that moved. To record the file anew (only when a change of behaviour is
//! intended, and say so in the commit):
//!
//! ```text
//! TILEOPS_RECORD_DIGESTS=1 cargo test --workspace --test digests
//! ```
//!
//! Each entry is `name<TAB>digest`: the 64-bit FNV-1a of the bytes (the checksum
//! `tileops sim` prints), or, for a launch the simulator refuses, the error text itself.
//! Registry entries: `emit/<op>/<params>/<launch>` hashes the kernel source, the launcher and
//! the manifest; `sim/<op>/<params>/<launch>/<output>` the outputs of a run on inputs seeded with
//! [`SEED`] within the kernel's declared argument ranges. Op entries: `op/<plan>/<case>/<output>`
//! with `<plan>` `cpu` (TileSim's own tiling, a plain call) or `device` (the plan `emit` writes,
//! a call inside `tileops_ops::profile`).

// `OpError` is large by design (ops/src/lib.rs); the closures return it.
#![allow(clippy::result_large_err)]

#[allow(unused_macros)]
#[path = "support/mod.rs"]
mod support;

use candle_core::{DType, Tensor};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use support::{ints, rand_data, shuffled_table, Rng};
use tile_backend::arch::Arch;
use tile_backend::codegen::pto::{emit, LaunchSpec};
use tile_backend::sim::{self, io, SimOptions};
use tileops_ops::registry::{Launch, OPS};
use tileops_ops::{
    flash_attention, flash_attention_varlen, paged_attention, paged_gather, profile, qk_softmax,
    quant_matmul, quantize_per_channel, reshape_and_cache, sparse_paged_attention, Backend,
    FlashAttentionParams, PagedAttentionParams, QuantMatmulParams, SparseAttentionParams,
};

/// The seed of every simulated registry launch's inputs.
const SEED: u64 = 42;

/// The 64-bit FNV-1a of `bytes` (the checksum `tileops sim` prints for an output).
fn fnv(bytes: &[u8]) -> String {
    let h = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ *b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("{h:016x}")
}

// ---------------------------------------------------------------------------------------------
// Registry kernels: emitted packages and simulated outputs
// ---------------------------------------------------------------------------------------------

/// Shape overrides per registered op: the first sets are small or odd enough to simulate in a
/// test; `emit_only` sets (the defaults: DeepSeek-scale shapes) are only emitted.
fn registry_shapes(op: &str) -> (Vec<&'static str>, Vec<&'static str>) {
    let (sim, emit_only): (&[&str], &[&str]) = match op {
        "matmul" => (
            &["--m 48 --k 80 --n 40 --tile-m 32 --tile-n 32 --tile-k 32 --dtype f32", "--m 64 --k 64 --n 64 --tile-m 32 --tile-n 32 --tile-k 32 --dtype i8", "--m 32 --k 96 --n 48 --tile-m 32 --tile-n 16 --tile-k 32 --dtype bf16"],
            &[""],
        ),
        "attention" => (
            &["", "--dtype bf16 --batch 2 --handoff cross-flags"],
            &[],
        ),
        "gather-matmul" => (
            &["", "--preset upstream-small", "--dtype f32 --n 40 --tile-n 16", "--preset int8 --tokens 300 --n 64"],
            &["--preset upstream-int8"],
        ),
        "worked-matmul" => (&[""], &[]),
        // The ops' kernels take their sizes from the call (table widths, context lengths),
        // which seeded inputs cannot make consistent: they are simulated through the op calls
        // below (`op/...`), and only emitted here.
        "sparse-paged-attention" => (&[], &["", "--dtype f32", "--batch 1 --topk 300", "--dtype f16 --batch 1 --heads 8 --dqk 64 --v-dim 48 --topk 65 --block-size 8 --sink true"]),
        "paged-attention" => (&[], &["", "--dtype f32", "--batch 1", "--dtype bf16 --batch 3 --heads 4 --kv-heads 4 --head-dim 32 --context-len 513 --block-size 8"]),
        "paged-gather" => (&[], &["", "--dtype f32 --n 37 --size 30", "--dtype f16 --n 64 --size 576"]),
        "reshape-and-cache" => (&[], &["", "--dtype f32 --tokens 3 --width 72", "--dtype bf16 --tokens 9 --width 576"]),
        "quant-matmul" => (&[], &["", "--m 300", "--out-dtype f32 --m 1", "--m 1 --k 64 --n 32", "--m 40 --k 96 --n 48 --out-dtype f16 --bias true", "--m 33 --k 128 --n 16 --out-dtype f32 --relu true", "--m 70 --k 64 --n 64 --out-dtype i8"]),
        "flash-attention" => (&[], &["", "--dtype f16 --head-dim 192 --v-dim 128 --seq-q 1024 --seq-kv 1024", "--dtype f32 --heads 2 --kv-heads 1 --seq-q 40 --seq-kv 72 --head-dim 64 --v-dim 32", "--causal false"]),
        "qk-softmax" => (&[], &["--dtype f16", "--dtype f32"]),
        "lightning-indexer" => (&[], &["", "--dtype f32 --key-dtype f32 --tokens 3 --heads 4 --head-dim 256 --topk 40 --context-len 300 --block-size 16", "--dtype f8e4m3 --key-dtype f8e4m3 --ue8m0 true", "--dtype f8e4m3 --key-dtype f8e4m3 --tokens 2 --heads 4 --topk 40 --context-len 700 --block-size 256"]),
        _ => (&[""], &[]),
    };
    (sim.to_vec(), emit_only.to_vec())
}

/// `--flag value` pairs as the registry takes them.
fn pairs(flags: &str) -> Vec<(String, String)> {
    let words: Vec<&str> = flags.split_whitespace().collect();
    words
        .chunks(2)
        .map(|c| {
            (
                c[0].trim_start_matches("--").replace('-', "_"),
                c.get(1).unwrap_or(&"").to_string(),
            )
        })
        .collect()
}

/// The entries of one registry op at one shape.
fn registry_entries(
    out: &mut BTreeMap<String, String>,
    op: &'static str,
    flags: &str,
    simulate: bool,
) {
    let arch = Arch::ascend950();
    let entry = tileops_ops::registry::find_op(op).expect("a registered op");
    let tag = if flags.is_empty() {
        "default".to_string()
    } else {
        flags.replace(' ', "")
    };
    let launches = match entry.launches(&pairs(flags)) {
        Ok(l) => l,
        Err(e) => {
            out.insert(format!("emit/{op}/{tag}"), format!("error: {e}"));
            return;
        }
    };
    for (
        i,
        Launch {
            kernel,
            block_dim,
            scalars,
        },
    ) in launches.iter().enumerate()
    {
        let at = format!("{op}/{tag}/{i}-{}", kernel.name);
        let compiled = match tile_backend::passes::compile(kernel, &arch) {
            Ok(k) => k,
            Err(e) => {
                out.insert(format!("emit/{at}"), format!("compile error: {e}"));
                continue;
            }
        };
        match emit(&compiled, &arch, &LaunchSpec::new(*block_dim)) {
            Ok(p) => {
                let manifest = p.manifest.to_string();
                let bytes = [
                    p.kernel_cpp.as_bytes(),
                    p.launcher_cpp.as_bytes(),
                    manifest.as_bytes(),
                ]
                .concat();
                out.insert(format!("emit/{at}"), fnv(&bytes));
            }
            Err(e) => {
                out.insert(format!("emit/{at}"), format!("emit error: {e}"));
            }
        }
        if !simulate {
            continue;
        }
        let gen = io::GenOptions {
            scalars: scalars
                .iter()
                .map(|(n, v)| (n.to_string(), io::ScalarValue::Int(*v)))
                .collect(),
            ..io::GenOptions::default()
        };
        let run = io::generate_with(&compiled, SEED, &gen).and_then(|mut args| {
            let opts = SimOptions {
                block_dim: (*block_dim).clamp(1, 64) as usize,
            };
            sim::run(&compiled, &arch, &mut args, opts)?;
            Ok(io::output_stats(&compiled, &args))
        });
        match run {
            Ok(stats) => {
                for o in stats {
                    out.insert(
                        format!("sim/{at}/{}", o.name),
                        format!("{:016x}", o.checksum),
                    );
                }
            }
            Err(e) => {
                out.insert(format!("sim/{at}"), format!("sim error: {e}"));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Op calls on TileSim, both plans
// ---------------------------------------------------------------------------------------------

/// The bytes of a tensor (any dtype), in row-major order.
fn tensor_bytes(t: &Tensor) -> Vec<u8> {
    let t = t.flatten_all().expect("flatten");
    match t.dtype() {
        DType::F32 => t
            .to_vec1::<f32>()
            .expect("f32")
            .iter()
            .flat_map(|v| v.to_bits().to_le_bytes())
            .collect(),
        DType::F16 => t
            .to_vec1::<half::f16>()
            .expect("f16")
            .iter()
            .flat_map(|v| v.to_bits().to_le_bytes())
            .collect(),
        DType::BF16 => t
            .to_vec1::<half::bf16>()
            .expect("bf16")
            .iter()
            .flat_map(|v| v.to_bits().to_le_bytes())
            .collect(),
        DType::U8 => t.to_vec1::<u8>().expect("u8"),
        other => panic!("no digest for dtype {other:?}"),
    }
}

/// One op case: a name and a call returning named outputs.
type OpCase = (
    String,
    Box<dyn Fn() -> Result<Vec<(&'static str, Tensor)>, tileops_ops::OpError>>,
);

const DTYPES: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

fn dname(d: DType) -> &'static str {
    match d {
        DType::F32 => "f32",
        DType::F16 => "f16",
        _ => "bf16",
    }
}

fn op_cases() -> Vec<OpCase> {
    let mut cases: Vec<OpCase> = Vec::new();
    let be = Some(Backend::TileSim);
    for (di, &dt) in DTYPES.iter().enumerate() {
        let seed = 1000 + di as u64;
        // paged_gather: odd sizes, a shuffled padded table.
        for &(n, size, block) in &[(19usize, 30usize, 8usize), (64, 32, 16)] {
            let mut rng = Rng::new(seed + n as u64);
            let (src, _) = rand_data(&mut rng, &[40, 32], dt);
            let table = shuffled_table(&mut rng, 1, 40 / block, 40 / block + 1, 40 / block);
            let ctx = (40 / block) * block;
            let idx: Vec<i64> = (0..n).map(|_| rng.below(ctx) as i64).collect();
            let idx = ints(&idx, &[1, n], DType::I32);
            let table = ints(&table, &[1, 40 / block + 1], DType::I32);
            cases.push((
                format!("paged_gather/{}/n{n}s{size}b{block}", dname(dt)),
                Box::new(move || {
                    Ok(vec![(
                        "rows",
                        paged_gather(&src, &idx, &table, block, size, be)?,
                    )])
                }),
            ));
        }
        // sparse_paged_attention: odd heads and top-k, invalid entries, a sink.
        for &(b, h, dqk, v_dim, block, topk, used, sink) in &[
            (
                2usize, 3usize, 72usize, 64usize, 16usize, 37usize, 4usize, false,
            ),
            (1, 16, 64, 48, 8, 65, 9, true),
        ] {
            let mut rng = Rng::new(seed * 7 + topk as u64);
            let num_blocks = b * used + 3;
            let (q, _) = rand_data(&mut rng, &[b, h, dqk], dt);
            let (cache, _) = rand_data(&mut rng, &[num_blocks, block, dqk], dt);
            let table = shuffled_table(&mut rng, b, used, used + 1, num_blocks);
            let ctx = used * block;
            let idx: Vec<i64> = (0..b * topk)
                .map(|i| {
                    if i % 11 == 5 {
                        -1
                    } else {
                        rng.below(ctx) as i64
                    }
                })
                .collect();
            let idx = ints(&idx, &[b, topk], DType::I32);
            let table = ints(&table, &[b, used + 1], DType::I32);
            let mut params = SparseAttentionParams::new(v_dim, 0.125);
            if sink {
                params.sink = Some(
                    Tensor::from_vec(rng.vec(h, -1.0, 1.0), h, &candle_core::Device::Cpu)
                        .expect("sink"),
                );
            }
            cases.push((
                format!(
                    "sparse_paged_attention/{}/b{b}h{h}d{dqk}v{v_dim}k{topk}",
                    dname(dt)
                ),
                Box::new(move || {
                    let (o, l) = sparse_paged_attention(&q, &cache, &idx, &table, &params, be)?;
                    Ok(vec![("out", o), ("lse", l)])
                }),
            ));
        }
        // paged_attention: GQA, uneven contexts.
        {
            let (b, h, hkv, d, block, max_blocks) =
                (3usize, 8usize, 2usize, 64usize, 16usize, 9usize);
            let mut rng = Rng::new(seed * 13);
            let num_blocks = b * max_blocks + 1;
            let (q, _) = rand_data(&mut rng, &[b, h, d], dt);
            let (k, _) = rand_data(&mut rng, &[num_blocks, block, hkv, d], dt);
            let (v, _) = rand_data(&mut rng, &[num_blocks, block, hkv, d], dt);
            let table = shuffled_table(&mut rng, b, max_blocks, max_blocks, num_blocks);
            let table = ints(&table, &[b, max_blocks], DType::I32);
            let lens = ints(&[130, 7, 144], &[b], DType::I32);
            let params = PagedAttentionParams { scale: 0.125 };
            cases.push((
                format!("paged_attention/{}/b{b}h{h}kv{hkv}d{d}", dname(dt)),
                Box::new(move || {
                    Ok(vec![(
                        "out",
                        paged_attention(&q, &k, &v, &table, &lens, &params, be)?,
                    )])
                }),
            ));
        }
        // reshape_and_cache: a padded slot mapping, odd width.
        {
            let mut rng = Rng::new(seed * 17);
            let (rows, _) = rand_data(&mut rng, &[5, 72], dt);
            let (cache0, _) = rand_data(&mut rng, &[4, 8, 72], dt);
            let slots = ints(&[3, -1, 17, 30, 8], &[5], DType::I64);
            cases.push((
                format!("reshape_and_cache/{}/n5w72", dname(dt)),
                Box::new(move || {
                    let cache = cache0.copy()?;
                    reshape_and_cache(&rows, &cache, &slots, be)?;
                    Ok(vec![("cache", cache)])
                }),
            ));
        }
        // flash_attention dense (GQA, causal, Sq != Skv), varlen, qk_softmax.
        {
            let mut rng = Rng::new(seed * 19);
            let (q, _) = rand_data(&mut rng, &[1, 4, 40, 64], dt);
            let (k, _) = rand_data(&mut rng, &[1, 2, 72, 64], dt);
            let (v, _) = rand_data(&mut rng, &[1, 2, 72, 32], dt);
            let params = FlashAttentionParams::new(0.125, true);
            cases.push((
                format!("flash_attention/{}/h4kv2q40k72d64v32", dname(dt)),
                Box::new(move || {
                    let (o, l) = flash_attention(&q, &k, &v, &params, be)?;
                    Ok(vec![("out", o), ("lse", l)])
                }),
            ));
            let (q, _) = rand_data(&mut rng, &[50, 2, 64], dt);
            let (k, _) = rand_data(&mut rng, &[61, 1, 64], dt);
            let (v, _) = rand_data(&mut rng, &[61, 1, 64], dt);
            let cq = ints(&[0, 17, 17, 50], &[4], DType::I32);
            let ck = ints(&[0, 20, 31, 61], &[4], DType::I32);
            let params = FlashAttentionParams::new(0.125, true);
            cases.push((
                format!("flash_attention_varlen/{}/3seq", dname(dt)),
                Box::new(move || {
                    let (o, l) = flash_attention_varlen(&q, &k, &v, &cq, &ck, &params, be)?;
                    Ok(vec![("out", o), ("lse", l)])
                }),
            ));
            let (q, _) = rand_data(&mut rng, &[33, 64], dt);
            let (k, _) = rand_data(&mut rng, &[70, 64], dt);
            cases.push((
                format!("qk_softmax/{}/m33n70d64", dname(dt)),
                Box::new(move || Ok(vec![("p", qk_softmax(&q, &k, 0.125, be)?)])),
            ));
        }
        // quant_matmul: odd M (the Acc tails), each output dtype, bias and ReLU.
        {
            let mut rng = Rng::new(seed * 23);
            let (w, _) = rand_data(&mut rng, &[48, 96], DType::F32);
            let w = quantize_per_channel(&w).expect("quantize");
            for &m in &[1usize, 40, 70] {
                let (x, _) = rand_data(&mut rng, &[m, 96], dt);
                let bias = Tensor::from_vec(rng.vec(48, -1.0, 1.0), 48, &candle_core::Device::Cpu)
                    .expect("bias");
                let w = w.clone();
                let out_dtype = dt;
                cases.push((
                    format!("quant_matmul/{}/m{m}", dname(dt)),
                    Box::new(move || {
                        let p = QuantMatmulParams {
                            out_dtype: Some(out_dtype),
                            bias: Some(bias.clone()),
                            relu: m == 40,
                        };
                        Ok(vec![("out", quant_matmul(&x, &w, &p, be)?)])
                    }),
                ));
            }
        }
    }
    cases
}

fn op_entries(out: &mut BTreeMap<String, String>) {
    for (name, call) in op_cases() {
        for plan in ["cpu", "device"] {
            let r = if plan == "device" {
                profile(&*call).0
            } else {
                call()
            };
            match r {
                Ok(outputs) => {
                    for (o, t) in outputs {
                        out.insert(format!("op/{plan}/{name}/{o}"), fnv(&tensor_bytes(&t)));
                    }
                }
                Err(e) => {
                    out.insert(format!("op/{plan}/{name}"), format!("error: {e}"));
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The file
// ---------------------------------------------------------------------------------------------

fn digests_file() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/digests.txt")
}

fn compute() -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for spec in OPS {
        let (sim, emit_only) = registry_shapes(spec.name);
        for flags in sim {
            registry_entries(&mut out, spec.name, flags, true);
        }
        for flags in emit_only {
            registry_entries(&mut out, spec.name, flags, false);
        }
    }
    op_entries(&mut out);
    out
}

fn render(d: &BTreeMap<String, String>) -> String {
    let mut s = String::from(
        "# Behaviour digests (ops/tests/digests.rs): name<TAB>FNV-1a 64 of the bytes, or an error.\n\
         # Record anew only for an intended change: TILEOPS_RECORD_DIGESTS=1 cargo test --workspace --test digests\n",
    );
    for (k, v) in d {
        let _ = writeln!(s, "{k}\t{v}");
    }
    s
}

fn parse(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split_once('\t'))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Every digest equals the committed file (or, with `TILEOPS_RECORD_DIGESTS=1`, the file is
/// written anew).
#[test]
fn digests_match() {
    let got = compute();
    let path = digests_file();
    if std::env::var_os("TILEOPS_RECORD_DIGESTS").is_some() {
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("create tests/data");
        std::fs::write(&path, render(&got)).expect("write the digests");
        eprintln!("recorded {} digests to {}", got.len(), path.display());
        return;
    }
    let want =
        parse(&std::fs::read_to_string(&path).expect("ops/tests/data/digests.txt is committed"));
    let mut moved = Vec::new();
    for (k, v) in &want {
        match got.get(k) {
            Some(g) if g == v => {}
            Some(g) => moved.push(format!("moved:   {k}: {v} -> {g}")),
            None => moved.push(format!("missing: {k}")),
        }
    }
    for k in got.keys().filter(|k| !want.contains_key(*k)) {
        moved.push(format!("new:     {k}"));
    }
    assert!(
        moved.is_empty(),
        "{} of {} digests differ from {}:\n{}",
        moved.len(),
        want.len(),
        path.display(),
        moved.join("\n")
    );
}

/// The digest file holds no error entry for a registry kernel that must simulate, and covers
/// every registered op (so a new op cannot go unrecorded).
#[test]
fn every_registered_op_is_digested() {
    let want = parse(&std::fs::read_to_string(digests_file()).expect("digests file"));
    for spec in OPS {
        assert!(
            want.keys()
                .any(|k| k.starts_with(&format!("emit/{}/", spec.name))),
            "op `{}` has no digest: record the file anew",
            spec.name
        );
    }
}
