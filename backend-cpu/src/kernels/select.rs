//! Value-dependent selections: TopK, Compress, NonZero and Unique. Their
//! size-deciding inputs arrive as host values (see `onyx_core::ops::select`).

use std::cmp::Ordering;

use onyx_core::dtype::DType;
use onyx_core::ep::EpError;
use onyx_core::ops::select::{Compress, TopK, Unique};
use onyx_core::shape::normalize_axis;
use onyx_core::tensor::Tensor;
use rayon::prelude::*;

use crate::par::Loop;

use super::conv::unravel;
use super::dispatch::{by_width, numeric};
use super::{CpuKernel, KernelIo, KernelRegistry, unsupported_dtype};

fn kernel_err(e: impl std::fmt::Display) -> EpError {
    EpError::Kernel(e.to_string())
}

/// Orders as numpy's sorts do: NaN above everything, NaNs equal to each other.
fn nan_last<T: PartialOrd>(a: &T, b: &T) -> Ordering {
    #[allow(clippy::eq_op)] // x != x only for NaN.
    let nan = |x: &T| x.partial_cmp(x).is_none();
    a.partial_cmp(b).unwrap_or_else(|| nan(a).cmp(&nan(b)))
}

fn top_k<T: bytemuck::Pod + PartialOrd + Send + Sync>(
    io: &KernelIo,
    t: &TopK,
) -> Result<(), EpError> {
    let dims = io.in_view(0)?.shape.clone();
    let axis = normalize_axis(t.axis, dims.len())
        .ok_or_else(|| EpError::Kernel(format!("axis {} out of range", t.axis)))?;
    let k_input = if t.k_attr.is_none() { Some(io.ints(1)?) } else { None };
    let k = t.k(k_input.as_deref(), Some(dims[axis])).map_err(kernel_err)?.unwrap_or(0);
    let (len, inner) = (dims[axis], dims[axis + 1..].iter().product::<usize>());
    let x = io.input::<T>(0)?;
    let mut values = vec![T::zeroed(); x.len() / len.max(1) * k];
    let mut indices = vec![0i64; values.len()];
    if k == 0 || inner == 0 {
        return Ok(());
    }
    let largest = t.largest;
    let order = |a: &(T, usize), b: &(T, usize)| {
        let by_value = if largest { nan_last(&b.0, &a.0) } else { nan_last(&a.0, &b.0) };
        by_value.then(a.1.cmp(&b.1))
    };
    values.par_chunks_mut(k * inner).zip(indices.par_chunks_mut(k * inner)).enumerate().each(
        |(o, (vals, idx))| {
            let block = &x[o * len * inner..][..len * inner];
            let mut line: Vec<(T, usize)> = Vec::with_capacity(len);
            for i in 0..inner {
                line.clear();
                line.extend((0..len).map(|j| (block[j * inner + i], j)));
                if k < len {
                    line.select_nth_unstable_by(k - 1, order);
                }
                line[..k].sort_unstable_by(order);
                for (j, &(v, at)) in line[..k].iter().enumerate() {
                    vals[j * inner + i] = v;
                    idx[j * inner + i] = at as i64;
                }
            }
        },
    );
    if io.has_output(0) {
        io.output::<T>(0)?.copy_from_slice(&values);
    }
    if io.has_output(1) {
        io.output::<i64>(1)?.copy_from_slice(&indices);
    }
    Ok(())
}

fn compress<T: bytemuck::Pod + Send + Sync>(io: &KernelIo, c: &Compress) -> Result<(), EpError> {
    let dims = io.in_view(0)?.shape.clone();
    let (outer, len, inner) = match c.axis {
        None => (1, dims.iter().product(), 1),
        Some(a) => {
            let axis = normalize_axis(a, dims.len())
                .ok_or_else(|| EpError::Kernel(format!("axis {a} out of range")))?;
            (dims[..axis].iter().product(), dims[axis], dims[axis + 1..].iter().product())
        }
    };
    let kept = Compress::kept(&io.ints(1)?, len).map_err(kernel_err)?;
    let x = io.input::<T>(0)?;
    let out = io.output::<T>(0)?;
    let mut w = 0;
    for o in 0..outer {
        for &j in &kept {
            out[w..w + inner].copy_from_slice(&x[(o * len + j) * inner..][..inner]);
            w += inner;
        }
    }
    Ok(())
}

/// The host copy of value input `i`.
fn host_value(io: &KernelIo, i: usize) -> Result<&Tensor, EpError> {
    io.values
        .get(i)
        .and_then(Option::as_ref)
        .ok_or_else(|| EpError::Kernel(format!("internal: input {i} is not on the host")))
}

struct NonZeroKernel;

impl CpuKernel for NonZeroKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        let t = host_value(io, 0)?;
        let positions = onyx_core::ops::select::NonZero::positions(t).map_err(kernel_err)?;
        let dims = t.shape().to_vec();
        let out = io.output::<i64>(0)?;
        let n = positions.len();
        for (j, &p) in positions.iter().enumerate() {
            for (d, c) in unravel(p, &dims).into_iter().enumerate() {
                out[d * n + j] = c as i64;
            }
        }
        Ok(())
    }
}

struct UniqueKernel {
    op: Unique,
}

impl CpuKernel for UniqueKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        let t = host_value(io, 0)?;
        let g = self.op.groups(t).map_err(kernel_err)?;
        let (outer, n, inner) = g.layout;
        let size = t.dtype().bits() / 8;
        if !t.dtype().is_byte_aligned() || size == 0 {
            return Err(unsupported_dtype("Unique", t.dtype()));
        }
        let x = t.bytes().map_err(kernel_err)?;
        let slice = inner * size;
        let y = io.output_bytes(0)?;
        let mut w = 0;
        for o in 0..outer {
            for &f in &g.first {
                y[w..w + slice].copy_from_slice(&x[(o * n + f) * slice..][..slice]);
                w += slice;
            }
        }
        let lists = [&g.first, &g.inverse, &g.counts];
        for (slot, list) in lists.into_iter().enumerate() {
            if io.has_output(slot + 1) {
                let out = io.output::<i64>(slot + 1)?;
                out.iter_mut().zip(list).for_each(|(o, &v)| *o = v as i64);
            }
        }
        Ok(())
    }
}

struct TopKKernel {
    dtype: DType,
    op: TopK,
}

impl CpuKernel for TopKKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        numeric!(self.dtype, T => top_k::<T>(io, &self.op),
            else Err(unsupported_dtype("TopK", self.dtype)))
    }
}

struct CompressKernel {
    dtype: DType,
    op: Compress,
}

impl CpuKernel for CompressKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        by_width!(self.dtype, T => compress::<T>(io, &self.op),
            else Err(unsupported_dtype("Compress", self.dtype)))
    }
}

/// Registers the family.
pub(crate) fn register_all(r: &mut KernelRegistry) {
    r.register("TopK", |s| {
        let dtype = s.input_dtype(0)?;
        Ok(Box::new(TopKKernel { dtype, op: s.op_as::<TopK>()?.clone() }))
    });
    r.register("Compress", |s| {
        let dtype = s.input_dtype(0)?;
        Ok(Box::new(CompressKernel { dtype, op: s.op_as::<Compress>()?.clone() }))
    });
    r.register("NonZero", |_| Ok(Box::new(NonZeroKernel)));
    r.register("Unique", |s| Ok(Box::new(UniqueKernel { op: s.op_as::<Unique>()?.clone() })));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nan_sorts_above_every_number() {
        let mut v = [2.0, f64::NAN, -1.0, f64::INFINITY];
        v.sort_by(nan_last);
        assert_eq!(&v[..3], &[-1.0, 2.0, f64::INFINITY]);
        assert!(v[3].is_nan());
        assert_eq!(nan_last(&3u8, &3u8), Ordering::Equal);
    }
}
