//! CPU kernels for the attention family: `Attention`, with its two products
//! through `gemm` in f32 and the reference implementation's roundings to the
//! input dtype between stages (so f16 and bf16 follow it closely), and the
//! relatives: `LinearAttention` in [`linear`], and `RotaryEmbedding`, `Swish`
//! and `SwiGLU` in [`rotary`].

mod linear;
mod rotary;

use half::{bf16, f16};
use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::attention::{Attention, AttentionGeometry, QkOutput};
use rayon::prelude::*;

use crate::par::Loop;

use super::dispatch::{AsF64, floats};
use super::matmul::{Mat, gemm_into};
use super::nn::is_float;
use super::{CpuKernel, KernelIo, KernelRegistry, unsupported_dtype};

/// Rounding of f32 results to the precision of a dtype (none for f32 and f64).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Round {
    Exact,
    F16,
    BF16,
}

impl Round {
    /// The rounding for `dtype`.
    pub(crate) fn of(dtype: DType) -> Round {
        match dtype {
            DType::F16 => Round::F16,
            DType::BF16 => Round::BF16,
            _ => Round::Exact,
        }
    }

    /// Rounds every value in place (nothing to do for f32 and f64).
    pub(crate) fn round_all(self, xs: &mut [f32]) {
        if self != Round::Exact {
            xs.iter_mut().for_each(|x| *x = self.apply(*x));
        }
    }

    /// `x` rounded to the dtype's precision.
    #[inline]
    pub(crate) fn apply(self, x: f32) -> f32 {
        match self {
            Round::Exact => x,
            Round::F16 => f16::from_f32(x).to_f32(),
            Round::BF16 => bf16::from_f32(x).to_f32(),
        }
    }
}

fn kernel_err(e: impl ToString) -> EpError {
    EpError::Kernel(e.to_string())
}

/// Writes f32 values to output `o`, converted to its dtype.
pub(crate) fn store(io: &KernelIo, o: usize, values: &[f32], what: &str) -> Result<(), EpError> {
    let dtype = io.out_view(o)?.dtype;
    floats!(dtype, T => {
        let out = io.output::<T>(o)?;
        if out.len() != values.len() {
            return Err(kernel_err(format!(
                "{what}: output {o} holds {} elements, computed {}", out.len(), values.len()
            )));
        }
        out.iter_mut().zip(values).for_each(|(d, &v)| *d = T::from_f64(f64::from(v)));
        Ok(())
    }, else Err(unsupported_dtype(what, dtype)))
}

/// Reorders `[batch, seq, heads × size]` to `[batch, heads, seq, size]`
/// (4-D inputs already have that order).
fn to_bhsd<E: Copy>(x: &[E], (b, h, s, d): (usize, usize, usize, usize), rank3: bool) -> Vec<E> {
    if !rank3 {
        return x.to_vec();
    }
    let mut out = Vec::with_capacity(x.len());
    for bi in 0..b {
        for hi in 0..h {
            for si in 0..s {
                let start = ((bi * s + si) * h + hi) * d;
                out.extend_from_slice(&x[start..start + d]);
            }
        }
    }
    out
}

/// Concatenates `[blocks, past_rows, d]` and `[blocks, new_rows, d]` along the rows.
fn concat_rows<E: Copy>(
    past: &[E],
    new: &[E],
    blocks: usize,
    rows: (usize, usize),
    d: usize,
) -> Vec<E> {
    let (p, n) = (rows.0 * d, rows.1 * d);
    let mut out = Vec::with_capacity(past.len() + new.len());
    for blk in 0..blocks {
        out.extend_from_slice(&past[blk * p..(blk + 1) * p]);
        out.extend_from_slice(&new[blk * n..(blk + 1) * n]);
    }
    out
}

/// Q, K or V (input `i`) as f32 in `[batch, heads, seq, size]` order, the cache
/// (input `past`) prepended; the concatenation is written exactly to output
/// `present` when it is requested.
fn load<T: AsF64 + bytemuck::Pod>(
    io: &KernelIo,
    i: usize,
    cache: Option<(usize, usize)>,
    (heads, len, size): (usize, usize, usize),
    g: &AttentionGeometry,
) -> Result<Vec<f32>, EpError> {
    let x = to_bhsd(io.input::<T>(i)?, (g.batch, heads, len, size), g.rank3);
    let Some((past, present)) = cache else {
        return Ok(x.iter().map(|v| v.to_f64() as f32).collect());
    };
    let all = if io.present(past) {
        let blocks = g.batch * heads;
        let p = io.input::<T>(past)?;
        if p.len() != blocks * g.past_len * size || x.len() != blocks * len * size {
            return Err(kernel_err("Attention: cache and new entries do not fit together"));
        }
        concat_rows(p, &x, blocks, (g.past_len, len), size)
    } else {
        x
    };
    if io.has_output(present) {
        let out = io.output::<T>(present)?;
        if out.len() != all.len() {
            return Err(kernel_err(format!("Attention: output {present} has the wrong size")));
        }
        out.copy_from_slice(&all);
    }
    Ok(all.iter().map(|v| v.to_f64() as f32).collect())
}

/// The attention mask as an additive bias, padded with `-inf` to the total
/// key length, and its strides over `[batch, q_heads, q_len, total]` (0 along
/// broadcast axes). Bool masks map true to 0 and false to `-inf`.
struct Mask {
    values: Vec<f32>,
    strides: [usize; 4],
}

impl Mask {
    fn load(io: &KernelIo, g: &AttentionGeometry) -> Result<Option<Mask>, EpError> {
        let Some(view) = io.input_view(3) else { return Ok(None) };
        let shape = view.shape.clone();
        let total = g.total_len();
        let Some(&last) = shape.last().filter(|_| shape.len() <= 4) else {
            return Err(kernel_err(format!("Attention: a mask of shape {shape:?}")));
        };
        if last > total {
            return Err(kernel_err(format!("Attention: a mask of {last} keys for {total} keys")));
        }
        let raw: Vec<f32> = if view.dtype == DType::Bool {
            io.input::<u8>(3)?
                .iter()
                .map(|&b| if b != 0 { 0.0 } else { f32::NEG_INFINITY })
                .collect()
        } else {
            floats!(view.dtype, T => io.input::<T>(3)?.iter().map(|v| v.to_f64() as f32).collect(),
                else return Err(unsupported_dtype("Attention mask", view.dtype)))
        };
        let rows: usize = shape[..shape.len() - 1].iter().product();
        let mut values = Vec::with_capacity(rows * total);
        for r in 0..rows {
            values.extend_from_slice(&raw[r * last..(r + 1) * last]);
            values.extend(std::iter::repeat_n(f32::NEG_INFINITY, total - last));
        }
        let mut dims = vec![1; 4 - shape.len()];
        dims.extend_from_slice(&shape[..shape.len() - 1]);
        dims.push(total);
        let target = [g.batch, g.q_heads, g.q_len, total];
        let mut strides = [0; 4];
        for a in 0..4 {
            if dims[a] == target[a] {
                strides[a] = dims[a + 1..].iter().product();
            } else if dims[a] != 1 {
                return Err(kernel_err(format!(
                    "Attention: mask {shape:?} does not broadcast to {target:?}"
                )));
            }
        }
        Ok(Some(Mask { values, strides }))
    }
}

/// NaN-propagating maximum (numpy's `max`).
fn nan_max(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() { f32::NAN } else { a.max(b) }
}

/// In-place softmax of one row, the reference's way: an all `-inf` row gives
/// zeros, NaNs propagate, and every stage is rounded with `round` (to emulate
/// a half-precision softmax).
fn softmax(row: &mut [f32], round: Round) {
    if round == Round::Exact {
        softmax_with(row, |x| x);
    } else {
        softmax_with(row, |x| round.apply(x));
    }
}

fn softmax_with(row: &mut [f32], rd: impl Fn(f32) -> f32) {
    // numpy's max propagates NaN; f32::max ignores it, so NaNs are looked for apart.
    let nan = row.iter().fold(false, |n, v| n | v.is_nan());
    let max = if nan { f32::NAN } else { row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v)) };
    let safe = if max == f32::NEG_INFINITY { 0.0 } else { max };
    let mut sum = 0f32;
    for x in row.iter_mut() {
        *x = rd(rd(*x - safe).exp());
        sum += *x;
    }
    let sum = rd(sum);
    let sum = if sum == 0.0 { 1.0 } else { sum };
    row.iter_mut().for_each(|x| *x = rd(*x / sum));
}

/// [`softmax`] in f64 (`softmax_precision` double).
fn softmax_wide(row: &mut [f32]) {
    let x: Vec<f64> = row.iter().map(|&v| f64::from(v)).collect();
    let max = x.iter().fold(f64::NEG_INFINITY, |m, &v| {
        if m.is_nan() || v.is_nan() { f64::NAN } else { m.max(v) }
    });
    let safe = if max == f64::NEG_INFINITY { 0.0 } else { max };
    let e: Vec<f64> = x.iter().map(|&v| (v - safe).exp()).collect();
    let sum: f64 = e.iter().sum();
    let sum = if sum == 0.0 { 1.0 } else { sum };
    row.iter_mut().zip(e).for_each(|(o, v)| *o = (v / sum) as f32);
}

/// Everything one `(batch, head)` task reads.
struct Ctx<'a> {
    op: &'a Attention,
    g: AttentionGeometry,
    /// Scaled queries, keys (cache included) and values, `[batch, heads, seq, size]`.
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    mask: Option<Mask>,
    /// Valid keys per batch (opset 24's `nonpad_kv_seqlen`).
    nonpad: Option<Vec<i64>>,
    /// Rounding to the input dtype and to the softmax dtype.
    round: Round,
    round_softmax: Round,
    /// Softmax in f64 (`softmax_precision` double).
    wide: bool,
    want_qk: bool,
}

impl Ctx<'_> {
    /// The keys query `i` of batch `b` may attend, `lo..=hi`, under the causal,
    /// window and padding terms; the others get `-inf` added to their mask value
    /// (which is what adding each term's `0` or `-inf` amounts to).
    fn allowed(&self, b: usize, i: usize, offset: i64) -> (i64, i64) {
        let op = self.op;
        // Query i sits at position p; key j is at distance p - j.
        let p = (i as i64).saturating_add(offset);
        let (mut lo, mut hi) = (i64::MIN, i64::MAX);
        if op.is_causal {
            hi = hi.min(p);
        }
        if op.left_window >= 0 {
            lo = lo.max(p.saturating_sub(op.left_window));
        }
        if op.right_window >= 0 {
            hi = hi.min(p.saturating_add(op.right_window));
        }
        if let Some(n) = &self.nonpad {
            hi = hi.min(n[b].saturating_sub(1));
        }
        (lo, hi)
    }

    /// Adds the bias of query `i` (of batch `b`, head `h`) to its row of scores:
    /// the mask value, plus `-inf` for keys outside [`allowed`](Self::allowed).
    /// Returns whether the bias masks the whole row (the reference then zeroes
    /// its probabilities).
    fn add_bias(&self, row: &mut [f32], (b, h, i): (usize, usize, usize), offset: i64) -> bool {
        let (lo, hi) = self.allowed(b, i, offset);
        let t = row.len() as i64;
        // The allowed keys, clamped to the row.
        let (a, z) = (lo.clamp(0, t) as usize, (hi.saturating_add(1)).clamp(0, t) as usize);
        let z = z.max(a);
        let Some(m) = &self.mask else {
            let (head, rest) = row.split_at_mut(a);
            head.iter_mut().chain(&mut rest[z - a..]).for_each(|x| *x += f32::NEG_INFINITY);
            return a == z;
        };
        let s = m.strides;
        let values = &m.values[b * s[0] + h * s[1] + i * s[2]..];
        let mut max_bias = f32::NEG_INFINITY;
        for (j, x) in row.iter_mut().enumerate() {
            let mut bias = values[j * s[3]];
            if j < a || j >= z {
                bias += f32::NEG_INFINITY;
            }
            max_bias = nan_max(max_bias, bias);
            *x += bias;
        }
        max_bias == f32::NEG_INFINITY
    }

    /// One `(batch, head)`: its output rows `[q_len, v_head_size]` and, when
    /// requested, its `qk_matmul_output` rows `[q_len, total]`.
    fn head(&self, bh: usize) -> (Vec<f32>, Vec<f32>) {
        let g = &self.g;
        let (b, h) = (bh / g.q_heads, bh % g.q_heads);
        let kvh = b * g.kv_heads + h / (g.q_heads / g.kv_heads);
        let (sq, t, d, dv) = (g.q_len, g.total_len(), g.head_size, g.v_head_size);
        let mut scores = vec![0f32; sq * t];
        if sq * t * d > 0 {
            // SAFETY: q holds (bh + 1)·sq·d and k (kvh + 1)·t·d elements; scores is its own.
            unsafe {
                gemm_into(
                    (sq, t, d),
                    &mut scores,
                    0,
                    &self.q,
                    Mat::row_major(bh * sq * d, d, false),
                    &self.k,
                    Mat::row_major(kvh * t * d, d, true),
                    false,
                    1.0,
                )
            };
        }
        let (r, cap) = (self.round, self.op.softcap);
        // The reference's softcap is an f32 scalar: it promotes half inputs to f32
        // from here until the softmax output is cast back.
        let stage = if cap > 0.0 { Round::Exact } else { r };
        r.round_all(&mut scores);
        if cap > 0.0 {
            scores.iter_mut().for_each(|s| *s = (*s / cap).tanh() * cap);
        }
        let mut qk = if self.want_qk && self.op.qk_output == QkOutput::Product {
            scores.clone()
        } else {
            Vec::new()
        };
        let offset = match &self.nonpad {
            Some(n) => n[b] - sq as i64,
            None => g.past_len as i64,
        };
        let mut probs = scores;
        for (i, row) in probs.chunks_mut(t.max(1)).enumerate().take(sq) {
            let masked = self.add_bias(row, (b, h, i), offset);
            stage.round_all(row);
            if self.want_qk && self.op.qk_output == QkOutput::WithBias {
                qk.extend_from_slice(row);
            }
            let rs = self.round_softmax;
            rs.round_all(row);
            if masked {
                row.fill(0.0);
            } else if self.wide {
                softmax_wide(row);
            } else {
                softmax(row, rs);
            }
            r.round_all(row);
            if self.want_qk && self.op.qk_output == QkOutput::Softmax {
                qk.extend_from_slice(row);
            }
        }
        let mut out = vec![0f32; sq * dv];
        if sq * dv * t > 0 {
            // SAFETY: probs holds sq·t and v (kvh + 1)·t·dv elements; out is its own.
            unsafe {
                gemm_into(
                    (sq, dv, t),
                    &mut out,
                    0,
                    &probs,
                    Mat::row_major(0, t, false),
                    &self.v,
                    Mat::row_major(kvh * t * dv, dv, false),
                    false,
                    1.0,
                )
            };
        }
        (out, qk)
    }
}

struct AttentionKernel {
    op: Attention,
}

impl AttentionKernel {
    fn context<'a>(&'a self, io: &KernelIo) -> Result<Ctx<'a>, EpError> {
        let shape = |i: usize| io.in_view(i).map(|v| v.shape.clone());
        let past = if io.present(4) || io.present(5) { Some((shape(4)?, shape(5)?)) } else { None };
        let g = self
            .op
            .geometry(
                &shape(0)?,
                &shape(1)?,
                &shape(2)?,
                past.as_ref().map(|(a, b)| (a.as_slice(), b.as_slice())),
            )
            .map_err(kernel_err)?;
        let t1 = io.in_view(0)?.dtype;
        let t2 = io.in_view(2)?.dtype;
        let kv = (g.kv_heads, g.kv_len, g.head_size);
        let (q, k) = floats!(t1, T => (
            load::<T>(io, 0, None, (g.q_heads, g.q_len, g.head_size), &g)?,
            load::<T>(io, 1, Some((4, 1)), kv, &g)?,
        ), else return Err(unsupported_dtype("Attention", t1)));
        let vs = (g.kv_heads, g.kv_len, g.v_head_size);
        let v = floats!(t2, T => load::<T>(io, 2, Some((5, 2)), vs, &g)?,
            else return Err(unsupported_dtype("Attention", t2)));
        let nonpad = if io.present(6) {
            let n = io.ints(6)?;
            if n.len() != g.batch {
                return Err(kernel_err(format!(
                    "Attention: nonpad_kv_seqlen has {} values for batch {}",
                    n.len(),
                    g.batch
                )));
            }
            Some(n)
        } else {
            None
        };
        // The reference scales Q and K each by sqrt(scale), cast to the input dtype.
        let scale = self.op.scale.map_or(1.0 / (g.head_size as f64).sqrt(), f64::from);
        let round = Round::of(t1);
        let s = round.apply(scale.sqrt() as f32);
        let scaled = |x: Vec<f32>| x.into_iter().map(|v| round.apply(v * s)).collect::<Vec<f32>>();
        let staged = if self.op.softcap > 0.0 && matches!(t1, DType::F16 | DType::BF16) {
            DType::F32
        } else {
            t1
        };
        let precision = self.op.softmax_precision.unwrap_or(staged);
        Ok(Ctx {
            op: &self.op,
            g,
            q: scaled(q),
            k: scaled(k),
            v,
            mask: Mask::load(io, &g)?,
            nonpad,
            round,
            round_softmax: Round::of(precision),
            wide: precision == DType::F64,
            want_qk: io.has_output(3),
        })
    }
}

impl CpuKernel for AttentionKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        let ctx = self.context(io)?;
        let g = ctx.g;
        let heads: Vec<(Vec<f32>, Vec<f32>)> =
            (0..g.batch * g.q_heads).into_par_iter().map_collect(|bh| ctx.head(bh));
        let (sq, dv) = (g.q_len, g.v_head_size);
        let mut y = vec![0f32; g.batch * g.q_heads * sq * dv];
        for (bh, (out, _)) in heads.iter().enumerate() {
            let (b, h) = (bh / g.q_heads, bh % g.q_heads);
            for (s, row) in out.chunks(dv.max(1)).enumerate().take(sq) {
                let start =
                    if g.rank3 { ((b * sq + s) * g.q_heads + h) * dv } else { (bh * sq + s) * dv };
                y[start..start + row.len()].copy_from_slice(row);
            }
        }
        store(io, 0, &y, "Attention")?;
        if ctx.want_qk {
            let qk: Vec<f32> = heads.into_iter().flat_map(|(_, qk)| qk).collect();
            store(io, 3, &qk, "Attention")?;
        }
        Ok(())
    }
}

fn build_attention(s: &KernelSpec<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    for i in [0, 1, 2] {
        let d = s.input_dtype(i)?;
        if !is_float(d) {
            return Err(unsupported_dtype("Attention", d));
        }
    }
    Ok(Box::new(AttentionKernel { op: s.op_as::<Attention>()?.clone() }))
}

/// Registers the family.
pub(crate) fn register_all(r: &mut KernelRegistry) {
    r.register("Attention", build_attention);
    linear::register_all(r);
    rotary::register_all(r);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_d_inputs_are_reordered_to_batch_head_seq_size() {
        // [batch 1, seq 2, heads 2 × size 2]: element (s, h, d) = 100·s + 10·h + d.
        let x = [0, 1, 10, 11, 100, 101, 110, 111];
        assert_eq!(to_bhsd(&x, (1, 2, 2, 2), true), vec![0, 1, 100, 101, 10, 11, 110, 111]);
        assert_eq!(to_bhsd(&x, (1, 2, 2, 2), false), x.to_vec());
    }

    #[test]
    fn the_cache_is_prepended_per_batch_and_head() {
        let out = concat_rows(&[1, 2, 3, 4], &[5, 6], 2, (2, 1), 1);
        assert_eq!(out, vec![1, 2, 5, 3, 4, 6]);
        assert_eq!(concat_rows::<i32>(&[], &[5, 6], 2, (0, 1), 1), vec![5, 6]);
    }

    #[test]
    fn a_fully_masked_row_softmaxes_to_zeros_and_nans_propagate() {
        let id = Round::Exact;
        let mut masked = [f32::NEG_INFINITY; 3];
        softmax(&mut masked, id);
        assert_eq!(masked, [0.0; 3]);
        let mut row = [0.0, f32::NEG_INFINITY, 0.0];
        softmax_wide(&mut row);
        assert_eq!(row, [0.5, 0.0, 0.5]);
        let mut poisoned = [1.0, f32::NAN];
        softmax(&mut poisoned, id);
        assert!(poisoned.iter().all(|v| v.is_nan()));
    }

    #[test]
    fn half_rounding_matches_the_half_types() {
        assert_eq!(Round::of(DType::F16).apply(1.0 + 1e-4), 1.0);
        assert_eq!(Round::of(DType::BF16).apply(1.0 + 1e-3), 1.0);
        assert_eq!(Round::of(DType::F32).apply(1.0 + 1e-4), 1.0 + 1e-4);
    }
}
