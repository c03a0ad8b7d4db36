//! `com.microsoft` `RotaryEmbedding`, and the rotation GroupQueryAttention
//! applies to its queries and keys.

use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::graph::MICROSOFT_DOMAIN;
use onyx_core::ops::microsoft::rotary::{ContribRotary, RopeGeometry};
use rayon::prelude::*;

use crate::par::Loop;

use super::super::dispatch::{AsF64, floats};
use super::super::nn::{is_float, output_from_input};
use super::super::{CpuKernel, KernelIo, KernelRegistry, unsupported_dtype};
use super::{kernel_err, load_f32};

/// Rotates the leading `2 · cos.len()` features of one head vector by the
/// angles whose cosines and sines are given: halves `(x[i], x[i + half])`,
/// or adjacent pairs `(x[2i], x[2i + 1])` when interleaved.
pub(crate) fn rotate(x: &mut [f32], cos: &[f32], sin: &[f32], interleaved: bool) {
    let half = cos.len();
    for i in 0..half {
        let (i1, i2) = if interleaved { (2 * i, 2 * i + 1) } else { (i, i + half) };
        let (x1, x2) = (x[i1], x[i2]);
        x[i1] = x1 * cos[i] - x2 * sin[i];
        x[i2] = x1 * sin[i] + x2 * cos[i];
    }
}

/// The position of each `(batch, token)`: `position_ids` is one offset (the
/// first token's position) or one id per token.
///
/// # Errors
/// [`EpError::Kernel`] for another shape or a position outside the caches.
pub(crate) fn positions(
    ids: &[i64],
    batch: usize,
    seq: usize,
    max: usize,
) -> Result<Vec<usize>, EpError> {
    let all: Vec<i64> = if ids.len() == 1 && batch * seq != 1 || batch * seq == 0 {
        let first = ids.first().copied().unwrap_or(0);
        (0..batch * seq).map(|i| first.saturating_add((i % seq.max(1)) as i64)).collect()
    } else if ids.len() == batch * seq {
        ids.to_vec()
    } else {
        return Err(kernel_err(format!(
            "RotaryEmbedding: {} position ids for batch {batch} and sequence {seq}",
            ids.len()
        )));
    };
    all.into_iter()
        .map(|p| {
            usize::try_from(p).ok().filter(|&p| p < max).ok_or_else(|| {
                kernel_err(format!("RotaryEmbedding: position {p} is outside the caches of {max}"))
            })
        })
        .collect()
}

/// `(batch, token)` of the `v`-th head vector in memory order.
fn batch_and_token(g: &RopeGeometry, v: usize) -> (usize, usize) {
    if g.rank3 {
        (v / (g.seq * g.heads), (v / g.heads) % g.seq)
    } else {
        (v / (g.heads * g.seq), v % g.seq)
    }
}

fn rope<T: AsF64 + bytemuck::Pod + Send + Sync>(
    io: &KernelIo,
    op: &ContribRotary,
) -> Result<(), EpError> {
    let cache = io.in_view(2)?.shape.clone();
    if io.in_view(3)?.shape != cache {
        return Err(kernel_err("RotaryEmbedding: cos and sin caches differ in shape"));
    }
    let g = op.geometry(&io.in_view(0)?.shape, &cache).map_err(kernel_err)?;
    let pos = positions(&io.ints(1)?, g.batch, g.seq, g.max_positions)?;
    let (cos, sin) = (load_f32(io, 2)?, load_f32(io, 3)?);
    let half = g.rotary_dim / 2;
    let data = output_from_input::<T>(io)?;
    if g.head_size == 0 || half == 0 {
        return Ok(());
    }
    data.par_chunks_mut(g.head_size).enumerate().each(|(v, x)| {
        let (b, s) = batch_and_token(&g, v);
        let row = pos[b * g.seq + s] * half;
        let mut head: Vec<f32> = x[..g.rotary_dim].iter().map(|v| v.to_f64() as f32).collect();
        rotate(&mut head, &cos[row..row + half], &sin[row..row + half], op.interleaved);
        x.iter_mut().zip(head).for_each(|(d, v)| *d = T::from_f64(f64::from(v)));
    });
    Ok(())
}

struct RopeKernel {
    op: ContribRotary,
    dtype: onyx_core::dtype::DType,
}

impl CpuKernel for RopeKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        floats!(self.dtype, T => rope::<T>(io, &self.op),
            else Err(unsupported_dtype("RotaryEmbedding", self.dtype)))
    }
}

/// Registers `com.microsoft` `RotaryEmbedding`.
pub(super) fn register_all(r: &mut KernelRegistry) {
    r.register_in(MICROSOFT_DOMAIN, "RotaryEmbedding", |s: &KernelSpec<'_>| {
        let dtype = s.input_dtype(0)?;
        if !is_float(dtype) {
            return Err(unsupported_dtype("RotaryEmbedding", dtype));
        }
        Ok(Box::new(RopeKernel { op: s.op_as::<ContribRotary>()?.clone(), dtype }))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quarter_turn_swaps_halves_or_neighbours() {
        let mut x = [1.0, 2.0, 3.0, 4.0];
        rotate(&mut x, &[0.0, 0.0], &[1.0, 1.0], false);
        assert_eq!(x, [-3.0, -4.0, 1.0, 2.0]);
        let mut x = [1.0, 2.0, 3.0, 4.0];
        rotate(&mut x, &[0.0, 0.0], &[1.0, 1.0], true);
        assert_eq!(x, [-2.0, 1.0, -4.0, 3.0]);
    }

    #[test]
    fn an_offset_numbers_the_tokens_and_the_caches_bound_them() {
        assert_eq!(positions(&[5], 2, 3, 16).unwrap(), vec![5, 6, 7, 5, 6, 7]);
        assert_eq!(positions(&[1, 0], 2, 1, 16).unwrap(), vec![1, 0]);
        assert!(positions(&[14], 1, 3, 16).is_err());
        assert!(positions(&[1, 2], 1, 3, 16).is_err());
    }
}
