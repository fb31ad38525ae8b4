//! Multi-head latent attention (MLA): the query and latent projections, the absorbed decode
//! form that runs through `tileops_ops::sparse_paged_attention`, and the non-absorbed form
//! (per-head keys and values expanded from the latent rows) that the short-prompt prefill runs
//! through `tileops_ops::flash_attention_varlen` and the tests use as the naive reference.

use super::config::Config;
use super::ops::{linear, matmul_rows, rms_norm, rope};
use crate::error::Result;
use crate::weights::Weights;
use candle_core::{Tensor, D};

/// One layer's MLA weights.
#[derive(Debug, Clone)]
pub struct Mla {
    wq_a: Tensor,
    q_norm: Tensor,
    wq_b: Tensor,
    wkv_a: Tensor,
    kv_norm: Tensor,
    /// `W_UK`: `[H, qk_nope, kv_lora]` (the qk_nope rows of `wkv_b` per head).
    w_uk: Tensor,
    /// `W_UV`: `[H, v_head, kv_lora]` (the v_head rows of `wkv_b` per head).
    w_uv: Tensor,
    wo: Tensor,
    heads: usize,
    nope: usize,
    rope_dim: usize,
    kv_lora: usize,
    v_head: usize,
}

/// The queries of a batch of rows.
#[derive(Debug, Clone)]
pub struct Queries {
    /// `q_norm(wq_a x)`, `[N, q_lora]` (the indexer reads it too).
    pub qr: Tensor,
    /// `[N, H, qk_nope]`.
    pub nope: Tensor,
    /// `[N, H, qk_rope]`, rotated.
    pub pe: Tensor,
}

impl Mla {
    /// The weights of layer `i`.
    pub fn load(w: &Weights, cfg: &Config, i: usize) -> Result<Mla> {
        let p = format!("layers.{i}.attn");
        let g = |n: &str| w.get(&format!("{p}.{n}"));
        let (h, nope, v) = (cfg.n_heads, cfg.qk_nope_head_dim, cfg.v_head_dim);
        let wkv_b = g("wkv_b.weight")?.reshape((h, nope + v, cfg.kv_lora_rank))?;
        Ok(Mla {
            wq_a: g("wq_a.weight")?,
            q_norm: g("q_norm.weight")?,
            wq_b: g("wq_b.weight")?,
            wkv_a: g("wkv_a.weight")?,
            kv_norm: g("kv_norm.weight")?,
            w_uk: wkv_b.narrow(1, 0, nope)?.contiguous()?,
            w_uv: wkv_b.narrow(1, nope, v)?.contiguous()?,
            wo: g("wo.weight")?,
            heads: h,
            nope,
            rope_dim: cfg.qk_rope_head_dim,
            kv_lora: cfg.kv_lora_rank,
            v_head: v,
        })
    }

    /// Queries of the normed hidden rows `x [N, dim]`; `cos`/`sin` from their positions.
    pub fn queries(&self, x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Queries> {
        let n = x.dim(0)?;
        let qr = rms_norm(&linear(x, &self.wq_a)?, &self.q_norm)?;
        let q = linear(&qr, &self.wq_b)?.reshape((n, self.heads, self.nope + self.rope_dim))?;
        let nope = q.narrow(2, 0, self.nope)?.contiguous()?;
        let pe = rope(&q.narrow(2, self.nope, self.rope_dim)?, cos, sin, true)?;
        Ok(Queries { qr, nope, pe })
    }

    /// Latent cache rows `[N, kv_lora + qk_rope]`: `[kv_norm(c) | rope(k_pe)]`.
    pub fn latent_rows(&self, x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
        let n = x.dim(0)?;
        let kv = linear(x, &self.wkv_a)?;
        let c = rms_norm(&kv.narrow(1, 0, self.kv_lora)?, &self.kv_norm)?;
        let pe = kv
            .narrow(1, self.kv_lora, self.rope_dim)?
            .reshape((n, 1, self.rope_dim))?;
        let pe = rope(&pe, cos, sin, true)?.reshape((n, self.rope_dim))?;
        Ok(Tensor::cat(&[c, pe], 1)?)
    }

    /// The absorbed query rows `[N, H, kv_lora + qk_rope]`: `[q_nope[h] · W_UK[h] | q_pe[h]]`.
    pub fn absorb(&self, q: &Queries) -> Result<Tensor> {
        let q_abs = matmul_rows(&q.nope.transpose(0, 1)?.contiguous()?, &self.w_uk)?;
        Ok(Tensor::cat(&[q_abs.transpose(0, 1)?, q.pe.clone()], 2)?.contiguous()?)
    }

    /// The layer output `[N, dim]` of the attention's latent output `o [N, H, kv_lora]`:
    /// `wo(o[h] · W_UV[h]^T)`.
    pub fn output(&self, o: &Tensor) -> Result<Tensor> {
        let uv_t = self.w_uv.transpose(1, 2)?;
        let v = matmul_rows(&o.transpose(0, 1)?.contiguous()?, &uv_t)?;
        self.output_heads(&v.transpose(0, 1)?)
    }

    /// The layer output `[N, dim]` of per-head values `v [N, H, v_head]` (the non-absorbed
    /// attention's output): `wo(v)`.
    pub fn output_heads(&self, v: &Tensor) -> Result<Tensor> {
        let n = v.dim(0)?;
        linear(&v.reshape((n, self.heads * self.v_head))?, &self.wo)
    }

    /// The non-absorbed query rows `[N, H, qk_nope + qk_rope]`: `[q_nope[h] | q_pe[h]]`.
    pub fn full_queries(&self, q: &Queries) -> Result<Tensor> {
        Ok(Tensor::cat(&[&q.nope, &q.pe], 2)?.contiguous()?)
    }

    /// The non-absorbed keys and values of latent rows `[T, kv_lora + qk_rope]`: keys
    /// `[T, H, qk_nope + qk_rope]` = `[c · W_UK[h]^T | k_pe]` (the one `k_pe` shared by every
    /// head) and values `[T, H, v_head]` = `c · W_UV[h]^T`.
    pub fn expand_latent(&self, latent: &Tensor) -> Result<(Tensor, Tensor)> {
        let t = latent.dim(0)?;
        let c = latent.narrow(1, 0, self.kv_lora)?;
        let per_head = |w: &Tensor, d: usize| -> Result<Tensor> {
            let w = w.reshape((self.heads * d, self.kv_lora))?;
            Ok(linear(&c, &w)?.reshape((t, self.heads, d))?)
        };
        let k_nope = per_head(&self.w_uk, self.nope)?;
        let k_pe = latent
            .narrow(1, self.kv_lora, self.rope_dim)?
            .unsqueeze(1)?
            .broadcast_as((t, self.heads, self.rope_dim))?;
        let k = Tensor::cat(&[&k_nope, &k_pe.contiguous()?], 2)?;
        Ok((k, per_head(&self.w_uv, self.v_head)?))
    }

    /// Naive, non-absorbed attention of one query (`nope [H, qk_nope]`, `pe [H, qk_rope]`)
    /// over latent rows `[T, kv_lora + qk_rope]` (keys and values of [`Mla::expand_latent`]),
    /// softmax with `scale`; `[H, v_head]`.
    pub fn naive_attention(
        &self,
        nope: &Tensor,
        pe: &Tensor,
        latent: &Tensor,
        scale: f32,
    ) -> Result<Tensor> {
        let (k, v) = self.expand_latent(latent)?;
        let q = Tensor::cat(&[nope, pe], 1)?.unsqueeze(1)?; // [H, 1, qk]
        let k = k.transpose(0, 1)?.contiguous()?; // [H, T, qk]
        let v = v.transpose(0, 1)?.contiguous()?; // [H, T, v]
        let s = (q.matmul(&k.transpose(1, 2)?)?.squeeze(1)? * scale as f64)?; // [H, T]
        let m = s.max_keepdim(D::Minus1)?;
        let e = s.broadcast_sub(&m)?.exp()?;
        let p = e.broadcast_div(&e.sum_keepdim(D::Minus1)?)?;
        Ok(p.unsqueeze(1)?.matmul(&v)?.squeeze(1)?)
    }
}
