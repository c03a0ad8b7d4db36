//! Element-rearranging ops: Trilu, OneHot, EyeLike, CumSum and CumProd,
//! ReverseSequence, DepthToSpace and SpaceToDepth.

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::scatter::{Cumulative, DepthSpace, EyeLike, OneHot, ReverseSequence, Trilu};
use onyx_core::shape::{normalize_axis, strides};
use rayon::prelude::*;

use crate::par::Loop;

use super::conv::unravel;
use super::dispatch::{AsF64, by_width, numeric};
use super::nn::output_from_input;
use super::scatter::Arith;
use super::{CpuKernel, KernelIo, KernelRegistry, unsupported_dtype};

/// `out = x` with its axes permuted: output axis `i` is input axis `perm[i]`.
pub(super) fn permute<T: Copy + Send + Sync>(
    x: &[T],
    dims: &[usize],
    perm: &[usize],
    out: &mut [T],
) {
    let in_strides = strides(dims);
    let out_dims: Vec<usize> = perm.iter().map(|&p| dims[p]).collect();
    let step: Vec<usize> = perm.iter().map(|&p| in_strides[p]).collect();
    let Some(&inner) = out_dims.last() else {
        out.copy_from_slice(x);
        return;
    };
    if inner == 0 || out.is_empty() {
        return;
    }
    let inner_step = step[step.len() - 1];
    let outer_dims = &out_dims[..out_dims.len() - 1];
    out.par_chunks_mut(inner).enumerate().each(|(row, dst)| {
        let pos = unravel(row, outer_dims);
        let base: usize = pos.iter().zip(&step).map(|(i, s)| i * s).sum();
        for (j, d) in dst.iter_mut().enumerate() {
            *d = x[base + j * inner_step];
        }
    });
}

fn trilu<T: bytemuck::Pod + Send + Sync>(io: &KernelIo, upper: bool) -> Result<(), EpError> {
    let dims = io.in_view(0)?.shape.clone();
    let k = if io.present(1) {
        match io.ints(1)?[..] {
            [k] => k,
            ref v => return Err(EpError::Kernel(format!("Trilu k {v:?} is not one value"))),
        }
    } else {
        0
    };
    let [.., n, m] = dims[..] else {
        return Err(EpError::Kernel(format!("Trilu needs rank 2 or more, got {dims:?}")));
    };
    let out = output_from_input::<T>(io)?;
    if n * m == 0 {
        return Ok(());
    }
    out.par_chunks_mut(n * m).each(|mat| {
        for (i, row) in mat.chunks_mut(m).enumerate() {
            for (j, v) in row.iter_mut().enumerate() {
                let d = j as i64 - i as i64;
                if (upper && d < k) || (!upper && d > k) {
                    *v = T::zeroed();
                }
            }
        }
    });
    Ok(())
}

fn one_hot<T: bytemuck::Pod + Send + Sync>(io: &KernelIo, oh: &OneHot) -> Result<(), EpError> {
    let idims = io.in_view(0)?.shape.clone();
    let axis = oh.axis(idims.len()).map_err(|e| EpError::Kernel(e.to_string()))?;
    let depth = OneHot::depth(&io.floats(1)?).map_err(|e| EpError::Kernel(e.to_string()))?;
    let indices = io.floats(0)?;
    let (off, on) = match io.input::<T>(2)? {
        &[off, on] => (off, on),
        v => return Err(EpError::Kernel(format!("OneHot values has {} entries, not 2", v.len()))),
    };
    let inner: usize = idims[axis..].iter().product();
    let out = io.output::<T>(0)?;
    out.fill(off);
    if inner == 0 {
        return Ok(());
    }
    out.par_chunks_mut(depth * inner).zip(indices.par_chunks(inner)).each(|(block, idx)| {
        for (i, &v) in idx.iter().enumerate() {
            let v = if v < 0.0 { v + depth as f64 } else { v };
            if v >= 0.0 && v < depth as f64 && v.fract() == 0.0 {
                block[v as usize * inner + i] = on;
            }
        }
    });
    Ok(())
}

fn eye<T: bytemuck::Pod>(io: &KernelIo, k: i64, one: T) -> Result<(), EpError> {
    let dims = io.out_view(0)?.shape.clone();
    let [n, m] = dims[..] else {
        return Err(EpError::Kernel(format!("EyeLike needs a matrix, got {dims:?}")));
    };
    let out = io.output::<T>(0)?;
    out.fill(bytemuck::Zeroable::zeroed());
    for i in 0..n {
        let j = i as i64 + k;
        if (0..m as i64).contains(&j) {
            out[i * m + j as usize] = one;
        }
    }
    Ok(())
}

fn cumulative<T: Arith>(io: &KernelIo, c: &Cumulative) -> Result<(), EpError> {
    let dims = io.in_view(0)?.shape.clone();
    let axis = match io.ints(1)?[..] {
        [a] => normalize_axis(a, dims.len())
            .ok_or_else(|| EpError::Kernel(format!("axis {a} out of range")))?,
        ref v => return Err(EpError::Kernel(format!("axis {v:?} is not one value"))),
    };
    let (len, inner) = (dims[axis], dims[axis + 1..].iter().product::<usize>());
    let out = output_from_input::<T>(io)?;
    if len * inner == 0 {
        return Ok(());
    }
    let (init, f): (T, fn(T, T) -> T) =
        if c.product { (T::ONE, T::mul) } else { (T::ZERO, T::add) };
    out.par_chunks_mut(len * inner).each(|block| {
        for i in 0..inner {
            let mut acc = init;
            for s in 0..len {
                let p = if c.reverse { len - 1 - s } else { s } * inner + i;
                let v = block[p];
                if c.exclusive {
                    block[p] = acc;
                    acc = f(acc, v);
                } else {
                    acc = f(acc, v);
                    block[p] = acc;
                }
            }
        }
    });
    Ok(())
}

fn reverse_sequence<T: bytemuck::Pod + Send + Sync>(
    io: &KernelIo,
    rs: &ReverseSequence,
) -> Result<(), EpError> {
    let dims = io.in_view(0)?.shape.clone();
    let (batch, time) = (dims[rs.batch_axis], dims[rs.time_axis]);
    let lens = io.ints(1)?;
    if lens.len() != batch || lens.iter().any(|&l| l < 0 || l as usize > time) {
        return Err(EpError::Kernel(format!(
            "sequence_lens {lens:?} do not fit {batch} sequences of {time} steps"
        )));
    }
    let inner: usize = dims[2..].iter().product();
    let x = io.input::<T>(0)?;
    let out = io.output::<T>(0)?;
    let at = |b: usize, t: usize| {
        let (i0, i1) = if rs.batch_axis == 0 { (b, t) } else { (t, b) };
        (i0 * dims[1] + i1) * inner
    };
    for (b, &len) in lens.iter().enumerate() {
        let len = len as usize;
        for t in 0..time {
            let src = if t < len { len - 1 - t } else { t };
            out[at(b, t)..][..inner].copy_from_slice(&x[at(b, src)..][..inner]);
        }
    }
    Ok(())
}

fn depth_space<T: bytemuck::Pod + Send + Sync>(
    io: &KernelIo,
    ds: &DepthSpace,
) -> Result<(), EpError> {
    let dims = io.in_view(0)?.shape.clone();
    ds.output_dims(&dims).map_err(|e| EpError::Kernel(e.to_string()))?;
    let (view, perm) = ds.plan(&dims);
    permute(io.input::<T>(0)?, &view, &perm, io.output::<T>(0)?);
    Ok(())
}

/// A kernel that runs `$body` with `$T` bound to the element type of width `dtype`.
macro_rules! width_kernel {
    ($name:ident, $op:ty, |$io:ident, $o:ident| $T:ident => $body:expr) => {
        struct $name {
            dtype: DType,
            op: $op,
        }
        impl CpuKernel for $name {
            fn run(&self, $io: &mut KernelIo) -> Result<(), EpError> {
                let $o = &self.op;
                by_width!(self.dtype, $T => $body,
                    else Err(unsupported_dtype(stringify!($name), self.dtype)))
            }
        }
    };
}

width_kernel!(TriluKernel, Trilu, |io, o| T => trilu::<T>(io, o.upper));
width_kernel!(OneHotKernel, OneHot, |io, o| T => one_hot::<T>(io, o));
width_kernel!(ReverseSequenceKernel, ReverseSequence, |io, o| T => reverse_sequence::<T>(io, o));
width_kernel!(DepthSpaceKernel, DepthSpace, |io, o| T => depth_space::<T>(io, o));

struct EyeLikeKernel {
    dtype: DType,
    k: i64,
}

impl CpuKernel for EyeLikeKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        if self.dtype == DType::Bool {
            return eye::<u8>(io, self.k, 1);
        }
        numeric!(self.dtype, T => eye::<T>(io, self.k, T::from_f64(1.0)),
            else Err(unsupported_dtype("EyeLike", self.dtype)))
    }
}

struct CumulativeKernel {
    dtype: DType,
    op: Cumulative,
}

impl CpuKernel for CumulativeKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        let name = if self.op.product { "CumProd" } else { "CumSum" };
        numeric!(self.dtype, T => cumulative::<T>(io, &self.op),
            else Err(unsupported_dtype(name, self.dtype)))
    }
}

fn build_cumulative(s: &KernelSpec<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let dtype = s.input_dtype(0)?;
    Ok(Box::new(CumulativeKernel { dtype, op: s.op_as::<Cumulative>()?.clone() }))
}

fn build_depth_space(s: &KernelSpec<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let dtype = s.input_dtype(0)?;
    Ok(Box::new(DepthSpaceKernel { dtype, op: s.op_as::<DepthSpace>()?.clone() }))
}

/// Registers the family.
pub(crate) fn register_all(r: &mut KernelRegistry) {
    r.register("Trilu", |s| {
        let dtype = s.input_dtype(0)?;
        Ok(Box::new(TriluKernel { dtype, op: s.op_as::<Trilu>()?.clone() }))
    });
    r.register("OneHot", |s| {
        let dtype = s.input_dtype(2)?;
        Ok(Box::new(OneHotKernel { dtype, op: s.op_as::<OneHot>()?.clone() }))
    });
    r.register("EyeLike", |s| {
        Ok(Box::new(EyeLikeKernel { dtype: s.output_dtype(0)?, k: s.op_as::<EyeLike>()?.k }))
    });
    r.register("CumSum", build_cumulative);
    r.register("CumProd", build_cumulative);
    r.register("ReverseSequence", |s| {
        let dtype = s.input_dtype(0)?;
        Ok(Box::new(ReverseSequenceKernel { dtype, op: s.op_as::<ReverseSequence>()?.clone() }))
    });
    r.register("DepthToSpace", build_depth_space);
    r.register("SpaceToDepth", build_depth_space);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permute_moves_each_output_axis_from_its_input_axis() {
        let x: Vec<u32> = (0..6).collect();
        let mut out = vec![0; 6];
        permute(&x, &[2, 3], &[1, 0], &mut out);
        assert_eq!(out, vec![0, 3, 1, 4, 2, 5]);
        let mut same = vec![0; 6];
        permute(&x, &[2, 3], &[0, 1], &mut same);
        assert_eq!(same, x);
    }
}
