//! The attention computation `Attention` and `MultiHeadAttention` share, with
//! onnxruntime's masking: the mask is a `[B, S, T]` table of values *added* to
//! the scaled scores (0 for visible keys, `mask_filter_value` for masked
//! ones, the lowest f32 for keys a unidirectional mask hides, whatever the
//! mask said of them), then the attention bias, then a softmax per row.

use onyx_core::ep::EpError;
use onyx_core::ops::microsoft::attention::{MaskParams, MhaGeometry};
use rayon::prelude::*;

use crate::par::Loop;

use super::super::KernelIo;
use super::{kernel_err, load_f32, product};

/// Queries, keys and values in f32, each `[batch, heads, rows, size]`; keys
/// and values include the cache.
pub(crate) struct Heads {
    /// `[B, N, S, H]`.
    pub q: Vec<f32>,
    /// `[B, N, T, H]`.
    pub k: Vec<f32>,
    /// `[B, N, T, Hv]`.
    pub v: Vec<f32>,
}

/// The mask table `[B, S, T]` from onnxruntime's `mask_index` forms (input
/// `slot`, int32), with the unidirectional mask applied; `None` when there is
/// neither.
///
/// # Errors
/// [`EpError::Kernel`] for a mask shape onnxruntime does not accept.
pub(crate) fn mask_table(
    io: &KernelIo,
    slot: usize,
    g: &MhaGeometry,
    p: &MaskParams,
) -> Result<Option<Vec<f32>>, EpError> {
    let (b, s, t) = (g.batch, g.q_len, g.total_len());
    let given = io.input_view(slot).map(|v| v.shape.clone());
    if given.is_none() && !p.unidirectional {
        return Ok(None);
    }
    let mut m = vec![0f32; b * s * t];
    if let Some(shape) = given {
        fill_mask(&mut m, &shape, io.input::<i32>(slot)?, (b, s, t), p.mask_filter_value)?;
    }
    if p.unidirectional {
        for row in 0..b * s {
            let first = (g.past_len + row % s + 1).min(t);
            m[row * t + first..(row + 1) * t].fill(f32::MIN);
        }
    }
    Ok(Some(m))
}

/// Writes `filter` where a mask of shape `shape` hides a key, into the zeroed `[B, S, T]` table.
fn fill_mask(
    m: &mut [f32],
    shape: &[usize],
    ids: &[i32],
    (b, s, t): (usize, usize, usize),
    filter: f32,
) -> Result<(), EpError> {
    match shape[..] {
        [mb, ms, mt] if (mb, ms, mt) == (b, s, t) => {
            m.iter_mut().zip(ids).for_each(|(v, &x)| *v = if x > 0 { 0.0 } else { filter });
        }
        [mb, mt] if (mb, mt) == (b, t) => {
            for (r, row) in m.chunks_mut(t.max(1)).enumerate().take(b * s) {
                let raw = &ids[(r / s) * t..(r / s + 1) * t];
                row.iter_mut().zip(raw).for_each(|(v, &x)| *v = if x > 0 { 0.0 } else { filter });
            }
        }
        [n] if n == b || n == 2 * b => {
            for (r, row) in m.chunks_mut(t.max(1)).enumerate().take(b * s) {
                let bi = r / s;
                let end = usize::try_from(ids[bi]).unwrap_or(0).min(t);
                row[end..].fill(filter);
                if n == 2 * b {
                    let start = usize::try_from(ids[bi + b]).unwrap_or(0).min(t);
                    row[..start].fill(filter);
                }
            }
        }
        _ => {
            return Err(kernel_err(format!(
                "attention mask of shape {shape:?} for batch {b}, {s} queries and {t} keys"
            )));
        }
    }
    Ok(())
}

/// An additive attention bias `[B|1, N|1, S, T]` with its batch and head strides.
pub(crate) struct AttnBias {
    values: Vec<f32>,
    batch_stride: usize,
    head_stride: usize,
}

impl AttnBias {
    /// Input `slot`, when present.
    ///
    /// # Errors
    /// [`EpError::Kernel`] when its shape does not broadcast to `[B, N, S, T]`.
    pub(crate) fn load(
        io: &KernelIo,
        slot: usize,
        g: &MhaGeometry,
    ) -> Result<Option<AttnBias>, EpError> {
        let Some(view) = io.input_view(slot) else { return Ok(None) };
        let (s, t) = (g.q_len, g.total_len());
        match view.shape[..] {
            [bb, bn, bs, bt]
                if (bb == 1 || bb == g.batch)
                    && (bn == 1 || bn == g.heads)
                    && (bs, bt) == (s, t) =>
            {
                let head_stride = if bn == 1 { 0 } else { s * t };
                let batch_stride = if bb == 1 { 0 } else { bn * s * t };
                Ok(Some(AttnBias { values: load_f32(io, slot)?, batch_stride, head_stride }))
            }
            _ => Err(kernel_err(format!(
                "attention_bias {:?} does not broadcast to [{}, {}, {s}, {t}]",
                view.shape, g.batch, g.heads
            ))),
        }
    }
}

/// In-place softmax of one row.
pub(crate) fn softmax(row: &mut [f32]) {
    let max = row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let mut sum = 0f32;
    for x in row.iter_mut() {
        *x = (*x - max).exp();
        sum += *x;
    }
    if sum > 0.0 {
        row.iter_mut().for_each(|x| *x /= sum);
    }
}

/// Softmax of `row` with one more logit, `sink`, that takes part in the
/// denominator but has no value to weigh: the weights sum to less than 1.
pub(crate) fn softmax_with_sink(row: &mut [f32], sink: f32) {
    let max = row.iter().fold(sink, |m, &v| m.max(v));
    let mut sum = (sink - max).exp();
    for x in row.iter_mut() {
        *x = (*x - max).exp();
        sum += *x;
    }
    row.iter_mut().for_each(|x| *x /= sum);
}

/// `softmax(scale · Q·Kᵀ + mask + bias) · V`, returned as `[B, S, N · Hv]`.
///
/// # Errors
/// [`EpError::Kernel`] when the buffers do not fit the geometry.
pub(crate) fn attend(
    g: &MhaGeometry,
    heads: &Heads,
    mask: Option<&[f32]>,
    bias: Option<&AttnBias>,
    scale: f32,
) -> Result<Vec<f32>, EpError> {
    let (n, s, t, h, hv) = (g.heads, g.q_len, g.total_len(), g.head_size, g.v_head_size);
    let one = |bh: usize| -> Result<Vec<f32>, EpError> {
        let (b, head) = (bh / n, bh % n);
        let mut scores = vec![0f32; s * t];
        let q = heads.q.get(bh * s * h..(bh + 1) * s * h).unwrap_or_default();
        let k = heads.k.get(bh * t * h..(bh + 1) * t * h).unwrap_or_default();
        product(&mut scores, q, k, (s, t, h), true, scale)?;
        for (i, row) in scores.chunks_mut(t.max(1)).enumerate().take(s) {
            if let Some(m) = mask {
                let m = &m[(b * s + i) * t..(b * s + i + 1) * t];
                row.iter_mut().zip(m).for_each(|(x, m)| *x += m);
            }
            if let Some(ab) = bias {
                let at = b * ab.batch_stride + head * ab.head_stride + i * t;
                row.iter_mut().zip(&ab.values[at..at + t]).for_each(|(x, v)| *x += v);
            }
            softmax(row);
        }
        let mut out = vec![0f32; s * hv];
        let v = heads.v.get(bh * t * hv..(bh + 1) * t * hv).unwrap_or_default();
        product(&mut out, &scores, v, (s, hv, t), false, 1.0)?;
        Ok(out)
    };
    let per_head: Vec<Vec<f32>> =
        (0..g.batch * n).into_par_iter().map_collect::<_, Result<_, _>, _>(one)?;
    let mut y = vec![0f32; g.batch * s * n * hv];
    for (bh, out) in per_head.iter().enumerate() {
        let (b, head) = (bh / n, bh % n);
        for (i, row) in out.chunks(hv.max(1)).enumerate().take(s) {
            let at = ((b * s + i) * n + head) * hv;
            y[at..at + hv].copy_from_slice(row);
        }
    }
    Ok(y)
}

/// The scale of the scores: the attribute, else `1 / sqrt(head_size)`.
pub(crate) fn scale_of(p: &MaskParams, head_size: usize) -> f32 {
    p.scale.unwrap_or_else(|| (1.0 / (head_size as f64).sqrt()) as f32)
}

/// `[B, L, N · H]` rows (starting at column `offset` of rows `stride` wide)
/// reordered to `[B, N, L, H]`.
pub(crate) fn split_heads(
    x: &[f32],
    (b, l, n, h): (usize, usize, usize, usize),
    stride: usize,
    offset: usize,
) -> Vec<f32> {
    let mut out = Vec::with_capacity(b * n * l * h);
    for bi in 0..b {
        for head in 0..n {
            for li in 0..l {
                let at = (bi * l + li) * stride + offset + head * h;
                out.extend_from_slice(&x[at..at + h]);
            }
        }
    }
    out
}

/// Prepends a cache `[B, N, P, H]` to new entries `[B, N, L, H]` along the rows.
pub(crate) fn with_past(
    past: Option<&[f32]>,
    new: Vec<f32>,
    blocks: usize,
    (p, l): (usize, usize),
    h: usize,
) -> Vec<f32> {
    let Some(past) = past.filter(|_| p > 0) else { return new };
    let mut out = Vec::with_capacity(past.len() + new.len());
    for blk in 0..blocks {
        out.extend_from_slice(&past[blk * p * h..(blk + 1) * p * h]);
        out.extend_from_slice(&new[blk * l * h..(blk + 1) * l * h]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_are_split_out_of_stacked_rows() {
        // Rows of [q0 q1 | k0 k1] for 2 tokens, 2 heads of size 1; take K.
        let x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
        assert_eq!(split_heads(&x, (1, 2, 2, 1), 4, 2), vec![3.0, 7.0, 4.0, 8.0]);
    }

    #[test]
    fn the_cache_goes_before_the_new_rows_of_each_head() {
        let out = with_past(Some(&[1.0, 2.0]), vec![3.0, 4.0], 2, (1, 1), 1);
        assert_eq!(out, vec![1.0, 3.0, 2.0, 4.0]);
    }

    #[test]
    fn softmax_of_a_masked_score_is_tiny_but_not_zero_divided() {
        let mut row = [0.0, 0.0 - 10000.0, 0.0];
        softmax(&mut row);
        assert!((row[0] - 0.5).abs() < 1e-6 && row[1] == 0.0);
    }
}
