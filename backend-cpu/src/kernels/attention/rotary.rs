//! `RotaryEmbedding` and the Swish gates (`Swish`, `SwiGLU`), computed in f32
//! and written in the input's float dtype.

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::attention::{RotaryEmbedding, Swish};
use rayon::prelude::*;

use crate::par::Loop;

use super::super::dispatch::{AsF64, floats};
use super::super::nn::{is_float, output_from_input};
use super::super::{CpuKernel, KernelIo, KernelRegistry, unsupported_dtype};
use super::{Round, kernel_err};

/// How a `RotaryEmbedding` input is laid out: `[batch, heads, seq, size]` (4-D)
/// or `[batch, seq, heads × size]` (3-D).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RopeLayout {
    batch: usize,
    heads: usize,
    seq: usize,
    size: usize,
    rank3: bool,
}

impl RopeLayout {
    fn new(shape: &[usize], num_heads: usize) -> Result<RopeLayout, EpError> {
        match *shape {
            [batch, heads, seq, size] => Ok(RopeLayout { batch, heads, seq, size, rank3: false }),
            [batch, seq, hidden] if num_heads > 0 && hidden % num_heads == 0 => Ok(RopeLayout {
                batch,
                heads: num_heads,
                seq,
                size: hidden / num_heads,
                rank3: true,
            }),
            _ => Err(kernel_err(format!(
                "RotaryEmbedding: input {shape:?} with num_heads {num_heads}"
            ))),
        }
    }

    /// `(batch, position)` of the `v`-th head vector in memory order.
    fn batch_and_position(&self, v: usize) -> (usize, usize) {
        if self.rank3 {
            (v / (self.seq * self.heads), (v / self.heads) % self.seq)
        } else {
            (v / (self.heads * self.seq), v % self.seq)
        }
    }
}

/// The row of the cos/sin caches each `(batch, position)` reads.
fn cache_rows(
    io: &KernelIo,
    l: &RopeLayout,
    cache: &[usize],
    half: usize,
) -> Result<Vec<usize>, EpError> {
    let bad = || {
        kernel_err(format!(
            "RotaryEmbedding: caches of shape {cache:?} for input {l:?} and {half} rotated pairs"
        ))
    };
    if cache.last() != Some(&half) {
        return Err(bad());
    }
    if io.present(3) {
        let ids = io.ints(3)?;
        if cache.len() != 2 || ids.len() != l.batch * l.seq {
            return Err(bad());
        }
        return ids
            .iter()
            .map(|&p| {
                usize::try_from(p).ok().filter(|&p| p < cache[0]).ok_or_else(|| {
                    kernel_err(format!(
                        "RotaryEmbedding: position {p} outside the cache of {}",
                        cache[0]
                    ))
                })
            })
            .collect();
    }
    let [cb, cs, _] = *cache else { return Err(bad()) };
    if !(cb == l.batch || cb == 1) || !(cs == l.seq || cs == 1) {
        return Err(bad());
    }
    let mut rows = Vec::with_capacity(l.batch * l.seq);
    for b in 0..l.batch {
        for s in 0..l.seq {
            rows.push(if cb == 1 { 0 } else { b * cs } + if cs == 1 { 0 } else { s });
        }
    }
    Ok(rows)
}

fn rope<T: AsF64 + bytemuck::Pod + Send + Sync>(
    io: &KernelIo,
    op: &RotaryEmbedding,
) -> Result<(), EpError> {
    let l = RopeLayout::new(&io.in_view(0)?.shape, op.num_heads)?;
    let dim = if op.rotary_dim == 0 { l.size } else { op.rotary_dim };
    if dim > l.size || dim % 2 != 0 {
        return Err(kernel_err(format!(
            "RotaryEmbedding: rotary_embedding_dim {dim} for heads of {}",
            l.size
        )));
    }
    let half = dim / 2;
    let cache = io.in_view(1)?.shape.clone();
    if io.in_view(2)?.shape != cache {
        return Err(kernel_err("RotaryEmbedding: cos and sin caches differ in shape"));
    }
    let rows = cache_rows(io, &l, &cache, half)?;
    let load = |i: usize| -> Result<Vec<f32>, EpError> {
        Ok(io.input::<T>(i)?.iter().map(|v| v.to_f64() as f32).collect())
    };
    let (cos, sin) = (load(1)?, load(2)?);
    let data = output_from_input::<T>(io)?;
    if l.size == 0 || half == 0 {
        return Ok(());
    }
    data.par_chunks_mut(l.size).enumerate().each(|(v, x)| {
        let (b, s) = l.batch_and_position(v);
        let row = rows[b * l.seq + s] * half;
        for i in 0..half {
            let (i1, i2) = if op.interleaved { (2 * i, 2 * i + 1) } else { (i, i + half) };
            let (x1, x2) = (x[i1].to_f64() as f32, x[i2].to_f64() as f32);
            let (c, sn) = (cos[row + i], sin[row + i]);
            x[i1] = T::from_f64(f64::from(c * x1 - sn * x2));
            x[i2] = T::from_f64(f64::from(sn * x1 + c * x2));
        }
    });
    Ok(())
}

struct RopeKernel {
    op: RotaryEmbedding,
    dtype: DType,
}

impl CpuKernel for RopeKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        floats!(self.dtype, T => rope::<T>(io, &self.op),
            else Err(unsupported_dtype("RotaryEmbedding", self.dtype)))
    }
}

/// `x · sigmoid(alpha · x)`, the sigmoid rounded to the dtype first as the reference does.
fn swish_of(x: f32, alpha: f32, round: Round) -> f32 {
    round.apply(x * round.apply(1.0 / (1.0 + (-alpha * x).exp())))
}

fn swish<T: AsF64 + bytemuck::Pod + Send + Sync>(
    io: &KernelIo,
    op: &Swish,
    round: Round,
) -> Result<(), EpError> {
    let gate: Option<Vec<f32>> = if op.glu {
        if io.in_view(1)?.shape != io.in_view(0)?.shape {
            return Err(kernel_err("SwiGLU: the inputs differ in shape"));
        }
        Some(io.input::<T>(1)?.iter().map(|v| v.to_f64() as f32).collect())
    } else {
        None
    };
    let data = output_from_input::<T>(io)?;
    data.par_iter_mut().enumerate().each(|(i, x)| {
        let y = swish_of(x.to_f64() as f32, op.alpha, round);
        let y = gate.as_ref().map_or(y, |g| y * g[i]);
        *x = T::from_f64(f64::from(y));
    });
    Ok(())
}

struct SwishKernel {
    op: Swish,
    dtype: DType,
}

impl CpuKernel for SwishKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        let round = Round::of(self.dtype);
        floats!(self.dtype, T => swish::<T>(io, &self.op, round),
            else Err(unsupported_dtype("Swish", self.dtype)))
    }
}

fn float_input(s: &KernelSpec<'_>) -> Result<DType, EpError> {
    let dtype = s.input_dtype(0)?;
    if is_float(dtype) { Ok(dtype) } else { Err(unsupported_dtype(&s.node.op_type, dtype)) }
}

/// Registers `RotaryEmbedding`, `Swish` and `SwiGLU`.
pub(super) fn register_all(r: &mut KernelRegistry) {
    r.register("RotaryEmbedding", |s| {
        let dtype = float_input(s)?;
        Ok(Box::new(RopeKernel { op: s.op_as::<RotaryEmbedding>()?.clone(), dtype }))
    });
    for name in ["Swish", "SwiGLU"] {
        r.register(name, |s| {
            let dtype = float_input(s)?;
            Ok(Box::new(SwishKernel { op: s.op_as::<Swish>()?.clone(), dtype }))
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_vectors_map_to_their_batch_and_position_in_both_layouts() {
        let four = RopeLayout::new(&[2, 3, 5, 4], 0).unwrap();
        // Vector (b=1, h=2, s=3) sits at (1·3 + 2)·5 + 3.
        assert_eq!(four.batch_and_position(28), (1, 3));
        let three = RopeLayout::new(&[2, 5, 12], 3).unwrap();
        assert_eq!(three.size, 4);
        // Vector (b=1, s=3, h=2) sits at (1·5 + 3)·3 + 2.
        assert_eq!(three.batch_and_position(26), (1, 3));
        assert!(RopeLayout::new(&[2, 5, 12], 5).is_err());
    }

    #[test]
    fn swish_at_zero_is_zero_and_approaches_identity_for_large_inputs() {
        let id = Round::Exact;
        assert_eq!(swish_of(0.0, 1.0, id), 0.0);
        assert!((swish_of(20.0, 1.0, id) - 20.0).abs() < 1e-6);
        assert!(swish_of(-20.0, 1.0, id).abs() < 1e-6);
    }
}
