//! The paged index-key cache of [`super::lightning_indexer`]: FP8 e4m3 keys with one scale per
//! 128 values (f32 or ue8m0), or plain f32/f16/bf16 keys for comparison, and the append that
//! quantises new keys on the way in ([`index_cache_append`]).

use super::fp8::{
    check_finite, check_group_width, quantize_groups, ue8m0_to_f32, Fp8Conversion, ScaleFormat,
    FP8_GROUP,
};
use crate::backend::Backend;
use crate::bridge;
use crate::error::OpError;
use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, DType, Device, InplaceOp1, Layout, Storage, Tensor};
use rayon::prelude::*;
use tile_backend::sim::numeric::fp8_e4m3_to_f32;

const OP: &str = "index_key_cache";
const APPEND: &str = "index_cache_append";

/// How an [`IndexKeyCache`] stores its keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IndexKeyFormat {
    /// Plain keys (candle `F32`, `F16` or `BF16`), no scales.
    Dense(DType),
    /// FP8 e4m3 keys (candle `F8E4M3`) with one scale per 128 values.
    Fp8(ScaleFormat),
}

/// The paged cache of the indexer's keys: `data [num_blocks, block_size, D]` and, for FP8 keys,
/// `scales [num_blocks, block_size, D / 128]` (key `k[c] = data[c] * scales[c / 128]`). Slot
/// `s` is `data[s / block_size, s % block_size]`. Both tensors are contiguous and written in
/// place by [`index_cache_append`].
#[derive(Debug, Clone)]
pub struct IndexKeyCache {
    data: Tensor,
    scales: Option<Tensor>,
}

impl IndexKeyCache {
    /// An FP8 cache of zero keys (scales 1) for `num_blocks` blocks of `block_size` slots of
    /// `dim` values (`dim` a multiple of 128).
    ///
    /// # Errors
    /// [`OpError::Invalid`] naming `data` for a size of 0, a `dim` not a multiple of 128, or
    /// more than [`crate::limits::MAX_ELEMENTS`] values (checked before anything is allocated).
    pub fn zeros_fp8(
        num_blocks: usize,
        block_size: usize,
        dim: usize,
        scales: ScaleFormat,
        dev: &Device,
    ) -> Result<Self, OpError> {
        let dims = [num_blocks, block_size, dim];
        check_sizes(&dims)?;
        check_group_width(OP, "data", dim)?;
        let n = num_blocks * block_size * dim;
        let sdims = [num_blocks, block_size, dim / FP8_GROUP];
        let ns = n / FP8_GROUP;
        let data = Tensor::from_raw_buffer(&vec![0u8; n], DType::F8E4M3, &dims, dev)?;
        let scales = match scales {
            ScaleFormat::F32 => Tensor::ones(&sdims[..], DType::F32, dev)?,
            ScaleFormat::Ue8m0 => {
                Tensor::from_raw_buffer(&vec![127u8; ns], DType::F8E8M0, &sdims, dev)?
            }
        };
        Ok(IndexKeyCache {
            data,
            scales: Some(scales),
        })
    }

    /// A plain cache of zero keys in `dtype` (f32, f16 or bf16).
    ///
    /// # Errors
    /// [`OpError::Invalid`] naming `data` for a size of 0, another dtype, or more than
    /// [`crate::limits::MAX_ELEMENTS`] values.
    pub fn zeros(
        num_blocks: usize,
        block_size: usize,
        dim: usize,
        dtype: DType,
        dev: &Device,
    ) -> Result<Self, OpError> {
        let dims = [num_blocks, block_size, dim];
        check_sizes(&dims)?;
        bridge::data_dtype(OP, "data", dtype)?;
        Ok(IndexKeyCache {
            data: Tensor::zeros(&dims[..], dtype, dev)?,
            scales: None,
        })
    }

    /// A cache of existing tensors: `data [num_blocks, block_size, D]` in f32, f16 or bf16 with
    /// no scales, or in `F8E4M3` with `scales [num_blocks, block_size, D / 128]` in `F32` or
    /// `F8E8M0` (D a multiple of 128). Both must be contiguous on the CPU (they are written in
    /// place).
    ///
    /// # Errors
    /// [`OpError::Invalid`] naming `data` or `scales` for any broken rule.
    pub fn from_parts(data: Tensor, scales: Option<Tensor>) -> Result<Self, OpError> {
        let dims = bridge::check_shape(OP, "data", &data, "[num_blocks, block_size, D]", 3)?;
        check_contiguous("data", &data)?;
        match (data.dtype(), &scales) {
            (DType::F8E4M3, Some(s)) => {
                check_group_width(OP, "data", dims[2])?;
                let sd =
                    bridge::check_shape(OP, "scales", s, "[num_blocks, block_size, D / 128]", 3)?;
                let want = [dims[0], dims[1], dims[2] / FP8_GROUP];
                if sd != want {
                    return Err(OpError::invalid(
                        OP,
                        "scales",
                        format!("shape {sd:?} must be {want:?} (one scale per {FP8_GROUP} values of data {dims:?})"),
                    ));
                }
                if !matches!(s.dtype(), DType::F32 | DType::F8E8M0) {
                    return Err(OpError::invalid(
                        OP,
                        "scales",
                        format!(
                            "dtype {:?} is not a scale format: use F32 or F8E8M0 (ue8m0)",
                            s.dtype()
                        ),
                    ));
                }
                check_contiguous("scales", s)?;
            }
            (DType::F8E4M3, None) => {
                return Err(OpError::invalid(
                    OP,
                    "scales",
                    "FP8 keys need their scales [num_blocks, block_size, D / 128]",
                ))
            }
            (d, None) => {
                bridge::data_dtype(OP, "data", d)?;
            }
            (d, Some(_)) => {
                return Err(OpError::invalid(
                    OP,
                    "scales",
                    format!("only FP8 (F8E4M3) keys have scales; data is {d:?}"),
                ))
            }
        }
        Ok(IndexKeyCache { data, scales })
    }

    /// The keys `[num_blocks, block_size, D]`.
    pub fn data(&self) -> &Tensor {
        &self.data
    }

    /// The scales `[num_blocks, block_size, D / 128]` of FP8 keys.
    pub fn scales(&self) -> Option<&Tensor> {
        self.scales.as_ref()
    }

    /// How the keys are stored.
    pub fn format(&self) -> IndexKeyFormat {
        match &self.scales {
            Some(s) if s.dtype() == DType::F8E8M0 => IndexKeyFormat::Fp8(ScaleFormat::Ue8m0),
            Some(_) => IndexKeyFormat::Fp8(ScaleFormat::F32),
            None => IndexKeyFormat::Dense(self.data.dtype()),
        }
    }

    /// Blocks, slots per block and values per key.
    pub fn dims(&self) -> (usize, usize, usize) {
        let d = self.data.dims();
        (d[0], d[1], d[2])
    }

    /// The f32 keys of `slots` (physical slot ids), `[n, D]`. Plain keys: one `index_select`
    /// and a cast. FP8 keys: one pass over the slots' codes and scales, each code decoded by a
    /// 256-entry table and multiplied by its group's scale in f32 (the values of candle's cast
    /// times the scale, without an f32 copy of the gathered codes first). Reads no other slot.
    pub(crate) fn keys_f32(&self, slots: &[i64]) -> Result<Tensor, OpError> {
        let (nb, bs, d) = self.dims();
        let dev = self.data.device();
        let n = slots.len();
        let Some(scales) = &self.scales else {
            let ids = Tensor::from_slice(slots, n, dev)?;
            let rows = self.data.reshape((nb * bs, d))?;
            return Ok(rows.index_select(&ids, 0)?.to_dtype(DType::F32)?);
        };
        let g = d / FP8_GROUP;
        let lut: [f32; 256] = std::array::from_fn(|c| fp8_e4m3_to_f32(c as u8));
        let (data, dl) = self.data.storage_and_layout();
        let (sdata, sl) = scales.storage_and_layout();
        let (Some((a, b)), Some((sa, sb))) = (dl.contiguous_offsets(), sl.contiguous_offsets())
        else {
            return Err(OpError::invalid(OP, "data", "must be contiguous"));
        };
        let Storage::Cpu(CpuStorage::F8E4M3(codes)) = &*data else {
            return Err(OpError::invalid(OP, "data", "must be F8E4M3 on the CPU"));
        };
        let codes = &codes[a..b];
        let scale: Box<dyn Fn(usize) -> f32 + Sync> = match &*sdata {
            Storage::Cpu(CpuStorage::F32(v)) => {
                let v = &v[sa..sb];
                Box::new(move |i| v[i])
            }
            Storage::Cpu(CpuStorage::F8E8M0(v)) => {
                let v = &v[sa..sb];
                Box::new(move |i| ue8m0_to_f32(v[i]))
            }
            _ => {
                return Err(OpError::invalid(
                    OP,
                    "scales",
                    "must be F32 or F8E8M0 on the CPU",
                ))
            }
        };
        let mut out = vec![0f32; n * d];
        out.par_chunks_mut(d)
            .zip(slots.par_iter())
            .for_each(|(o, &slot)| {
                let s = slot as usize;
                let row = &codes[s * d..(s + 1) * d];
                for (gi, (o, row)) in o
                    .chunks_exact_mut(FP8_GROUP)
                    .zip(row.chunks_exact(FP8_GROUP))
                    .enumerate()
                {
                    let sc = scale(s * g + gi);
                    for (o, c) in o.iter_mut().zip(row) {
                        *o = lut[usize::from(c.to_bits())] * sc;
                    }
                }
            });
        Ok(Tensor::from_vec(out, (n, d), dev)?)
    }

    /// Every key as f32 `[num_blocks, block_size, D]` (dequantised): for comparisons, e.g.
    /// candle's own matmul on pre-dequantised keys.
    ///
    /// # Errors
    /// A candle error.
    pub fn dequantize(&self) -> Result<Tensor, OpError> {
        let (nb, bs, d) = self.dims();
        let all: Vec<i64> = (0..(nb * bs) as i64).collect();
        Ok(self.keys_f32(&all)?.reshape((nb, bs, d))?)
    }
}

fn check_sizes(dims: &[usize]) -> Result<(), OpError> {
    if dims.contains(&0) {
        return Err(OpError::invalid(
            OP,
            "data",
            format!("must not be empty: [num_blocks, block_size, D] is {dims:?}"),
        ));
    }
    bridge::check_elements(OP, "data", dims)
}

fn check_contiguous(arg: &'static str, t: &Tensor) -> Result<(), OpError> {
    if t.is_contiguous() {
        Ok(())
    } else {
        Err(OpError::invalid(
            OP,
            arg,
            "must be contiguous: the cache is written in place",
        ))
    }
}

/// Writes key `i` of `k [N, D]` (f32, f16 or bf16) into slot `slot_mapping[i]` of `cache`, in
/// place; `slot_mapping [N]` (I32/I64) holds -1 (skip) or a slot in `0..num_blocks *
/// block_size`, the valid ones distinct. An FP8 cache quantises on the way in as DeepSeek does
/// (per group of 128 values: `s = max(amax, 1e-4) / 448`, ue8m0 rounding `s` up to a power of
/// two; codes `e4m3(k / s)` under `conv`, A5's rounding and saturation modes); a plain cache
/// takes `k` cast to its dtype (`conv` unused). Runs on the host for every backend choice
/// that can run it: [`Backend::Reference`] only for now.
///
/// # Errors
/// [`OpError::Invalid`] naming the argument for any broken rule, a non-finite value of `k`
/// for an FP8 cache included (nothing is written); [`OpError::NoKernel`] for
/// [`Backend::TileSim`] and [`Backend::Ascend950`] (no tile kernel quantises into the cache
/// yet), after validation.
pub fn index_cache_append(
    cache: &IndexKeyCache,
    k: &Tensor,
    slot_mapping: &Tensor,
    conv: Fp8Conversion,
    backend: Option<Backend>,
) -> Result<(), OpError> {
    let backend = bridge::resolve_backend(backend)?;
    let (nb, bs, d) = cache.dims();
    bridge::check_cpu(APPEND, "cache", cache.data())?;
    let kd = bridge::check_data(APPEND, "k", k, "[N, D]", 2)?;
    bridge::check_dim(
        APPEND,
        "k",
        kd,
        1,
        "D",
        d,
        "the cache is [num_blocks, block_size, D]",
    )?;
    let n = kd[0];
    let (sd, slots) = bridge::check_positions(APPEND, "slot_mapping", slot_mapping, "[N]", 1)?;
    bridge::check_dim(APPEND, "slot_mapping", &sd, 0, "N", n, "k is [N, D]")?;
    bridge::check_slots(APPEND, &slots, nb * bs, (nb, bs))?;
    let keep: Vec<usize> = (0..n).filter(|&i| slots[i] >= 0).collect();
    let dst: Vec<usize> = keep.iter().map(|&i| slots[i] as usize).collect();
    let ids = Tensor::from_vec(
        keep.iter().map(|&i| i as i64).collect(),
        keep.len(),
        k.device(),
    )?;
    let rows = k.index_select(&ids, 0)?;
    // FP8: the kept rows' values, checked finite before any backend is chosen.
    let values = match cache.scales() {
        Some(_) if !keep.is_empty() => {
            let v = rows.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
            check_finite(APPEND, "k", &v, d, |r| keep[r])?;
            v
        }
        _ => Vec::new(),
    };
    if backend != Backend::Reference {
        return Err(OpError::NoKernel {
            op: APPEND,
            backend,
            missing: "no tile kernel quantises keys into the cache yet",
        });
    }
    if keep.is_empty() {
        return Ok(());
    }
    let Some(scales) = cache.scales() else {
        let rows = rows.to_dtype(cache.data().dtype())?;
        let op = WriteRows {
            slots: &dst,
            rows: &rows,
            width: d,
        };
        return Ok(cache.data().inplace_op1(&op)?);
    };
    let fmt = match scales.dtype() {
        DType::F8E8M0 => ScaleFormat::Ue8m0,
        _ => ScaleFormat::F32,
    };
    let q = quantize_groups(&values, fmt, conv);
    let dev = k.device();
    let m = keep.len();
    let g = d / FP8_GROUP;
    let codes = super::fp8::fp8_tensor(&q.codes, &[m, d], dev)?;
    let svals = super::fp8::scale_tensor(&q, fmt, &[m, g], dev)?;
    cache.data().inplace_op1(&WriteRows {
        slots: &dst,
        rows: &codes,
        width: d,
    })?;
    scales.inplace_op1(&WriteRows {
        slots: &dst,
        rows: &svals,
        width: g,
    })?;
    Ok(())
}

/// Writes row `i` of `rows [m, width]` (the cache's dtype, contiguous) into slot `slots[i]`
/// of a contiguous cache tensor viewed as `[slots, width]`.
struct WriteRows<'a> {
    slots: &'a [usize],
    rows: &'a Tensor,
    width: usize,
}

impl WriteRows<'_> {
    fn copy<T: Copy>(&self, dst: &mut [T], src: &[T]) -> candle_core::Result<()> {
        let w = self.width;
        for (i, &s) in self.slots.iter().enumerate() {
            let (d, r) = (dst.get_mut(s * w..(s + 1) * w), src.get(i * w..(i + 1) * w));
            match (d, r) {
                (Some(d), Some(r)) => d.copy_from_slice(r),
                _ => candle_core::bail!("{APPEND}: slot {s} or row {i} out of range"),
            }
        }
        Ok(())
    }
}

impl InplaceOp1 for WriteRows<'_> {
    fn name(&self) -> &'static str {
        APPEND
    }

    fn cpu_fwd(&self, storage: &mut CpuStorage, layout: &Layout) -> candle_core::Result<()> {
        let Some((a, b)) = layout.contiguous_offsets() else {
            candle_core::bail!("{APPEND}: the cache must be contiguous");
        };
        let rows = self.rows.contiguous()?;
        let (src, rl) = rows.storage_and_layout();
        let Some((ra, rb)) = rl.contiguous_offsets() else {
            candle_core::bail!("{APPEND}: rows must be contiguous");
        };
        let Storage::Cpu(src) = &*src else {
            candle_core::bail!("{APPEND}: rows must be on the CPU");
        };
        match (storage, src) {
            (CpuStorage::F32(d), CpuStorage::F32(s)) => self.copy(&mut d[a..b], &s[ra..rb]),
            (CpuStorage::F16(d), CpuStorage::F16(s)) => self.copy(&mut d[a..b], &s[ra..rb]),
            (CpuStorage::BF16(d), CpuStorage::BF16(s)) => self.copy(&mut d[a..b], &s[ra..rb]),
            (CpuStorage::F8E4M3(d), CpuStorage::F8E4M3(s)) => self.copy(&mut d[a..b], &s[ra..rb]),
            (CpuStorage::F8E8M0(d), CpuStorage::F8E8M0(s)) => self.copy(&mut d[a..b], &s[ra..rb]),
            (d, s) => candle_core::bail!(
                "{APPEND}: rows of {:?} cannot go into a cache of {:?}",
                s.dtype(),
                d.dtype()
            ),
        }
    }
}
