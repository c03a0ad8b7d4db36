//! Data movement (Transpose, Concat, Split, Slice, Gather, Expand, Tile) by element
//! width, and the generators (Shape, Size, ConstantOfShape, Range).

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::generate::ConstantOfShape;
use onyx_core::ops::movement::{Concat, Gather, Slice, Split, Transpose};
use onyx_core::ops::shape::ShapeOf;
use onyx_core::shape::{normalize_axis, strides};
use rayon::prelude::*;

use crate::par::Loop;

use super::broadcast::{Broadcast, Run};
use super::conv::unravel;
use super::dispatch::{AsF64, by_width, numeric};
use super::{CpuKernel, KernelIo, KernelRegistry, unsupported_dtype};

fn axis_of(axis: i64, rank: usize) -> Result<usize, EpError> {
    normalize_axis(axis, rank)
        .ok_or_else(|| EpError::Kernel(format!("axis {axis} out of range for rank {rank}")))
}

fn width_of(spec: &KernelSpec<'_>, op: &str) -> Result<DType, EpError> {
    let d = spec.input_dtype(0)?;
    if !d.is_byte_aligned() {
        return Err(unsupported_dtype(op, d));
    }
    Ok(d)
}

/// A kernel that only moves elements: run `$f::<T>` with `T` of the dtype's width.
macro_rules! movement_kernel {
    ($name:ident, $f:ident $(, $field:ident : $ty:ty)*) => {
        struct $name { dtype: DType $(, $field: $ty)* }
        impl CpuKernel for $name {
            fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
                by_width!(self.dtype, T => $f::<T>(io $(, &self.$field)*),
                    else Err(unsupported_dtype(stringify!($name), self.dtype)))
            }
        }
    };
}

/// Output elements per Transpose task.
const TRANSPOSE_TASK: usize = 16 * 1024;

/// The output dims of a transpose with the input stride of each, size-1 dims
/// dropped and neighbours merged where the input is contiguous across them
/// (`[1, 128, 12, 32]` by `[0, 2, 1, 3]` becomes `[12, 128, 32]`).
fn transpose_dims(shape: &[usize], perm: &[usize]) -> Vec<(usize, usize)> {
    let in_strides = strides(shape);
    let mut dims: Vec<(usize, usize)> = Vec::new();
    for &p in perm {
        let (size, stride) = (shape[p], in_strides[p]);
        if size == 1 {
            continue;
        }
        match dims.last_mut() {
            Some(last) if last.1 == stride * size => *last = (last.0 * size, stride),
            _ => dims.push((size, stride)),
        }
    }
    dims
}

fn transpose<T: bytemuck::Pod + Send + Sync>(io: &KernelIo, t: &Transpose) -> Result<(), EpError> {
    let shape = io.in_view(0)?.shape.clone();
    let perm = t.perm(shape.len()).map_err(|e| EpError::Kernel(e.to_string()))?;
    let x = io.input::<T>(0)?;
    let out = io.output::<T>(0)?;
    if out.is_empty() {
        return Ok(());
    }
    let dims = transpose_dims(&shape, &perm);
    let Some(&(inner, inner_step)) = dims.last() else {
        out.copy_from_slice(x);
        return Ok(());
    };
    if dims.len() == 1 && inner_step == 1 {
        out.copy_from_slice(x);
        return Ok(());
    }
    let outer = &dims[..dims.len() - 1];
    let rows_per_task = (TRANSPOSE_TASK / inner).max(1);
    out.par_chunks_mut(inner * rows_per_task).enumerate().each(|(task, chunk)| {
        // An odometer over the outer dims, with the input offset kept in step.
        let mut index =
            unravel(task * rows_per_task, &outer.iter().map(|d| d.0).collect::<Vec<_>>());
        let mut base: usize = index.iter().zip(outer).map(|(i, d)| i * d.1).sum();
        for dst in chunk.chunks_mut(inner) {
            if inner_step == 1 {
                dst.copy_from_slice(&x[base..base + inner]);
            } else {
                let src = &x[base..];
                dst.iter_mut().enumerate().for_each(|(j, d)| *d = src[j * inner_step]);
            }
            for d in (0..outer.len()).rev() {
                index[d] += 1;
                base += outer[d].1;
                if index[d] < outer[d].0 {
                    break;
                }
                base -= outer[d].1 * outer[d].0;
                index[d] = 0;
            }
        }
    });
    Ok(())
}
movement_kernel!(TransposeKernel, transpose, op: Transpose);

fn concat<T: bytemuck::Pod>(io: &KernelIo, axis: &i64) -> Result<(), EpError> {
    let out_shape = io.out_view(0)?.shape.clone();
    let axis = axis_of(*axis, out_shape.len())?;
    let outer: usize = out_shape[..axis].iter().product();
    let inner: usize = out_shape[axis + 1..].iter().product();
    let out = io.output::<T>(0)?;
    let row = out_shape[axis] * inner;
    let mut offset = 0;
    for i in 0..io.inputs.len() {
        let Some(v) = io.input_view(i) else { continue };
        let block = v.shape[axis] * inner;
        let x = io.input::<T>(i)?;
        for o in 0..outer {
            out[o * row + offset..o * row + offset + block]
                .copy_from_slice(&x[o * block..(o + 1) * block]);
        }
        offset += block;
    }
    Ok(())
}
movement_kernel!(ConcatKernel, concat, axis: i64);

fn split<T: bytemuck::Pod>(io: &KernelIo, s: &Split) -> Result<(), EpError> {
    let shape = io.in_view(0)?.shape.clone();
    let axis = axis_of(s.axis, shape.len())?;
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let x = io.input::<T>(0)?;
    let row = shape[axis] * inner;
    let mut offset = 0;
    for o in 0..io.outputs.len() {
        let Some(v) = io.outputs[o].as_ref() else {
            return Err(EpError::Kernel("Split outputs must all be present".into()));
        };
        let block = v.shape[axis] * inner;
        let out = io.output::<T>(o)?;
        for i in 0..outer {
            out[i * block..(i + 1) * block]
                .copy_from_slice(&x[i * row + offset..i * row + offset + block]);
        }
        offset += block;
    }
    Ok(())
}
movement_kernel!(SplitKernel, split, op: Split);

fn slice<T: bytemuck::Pod + Send + Sync>(io: &KernelIo, s: &Slice) -> Result<(), EpError> {
    let shape = io.in_view(0)?.shape.clone();
    let resolved = match &s.attrs {
        Some(a) => Slice::resolve(&shape, &a.starts, &a.ends, a.axes.as_deref(), None),
        None => {
            let opt = |i: usize| io.present(i).then(|| io.ints(i)).transpose();
            let (axes, steps) = (opt(3)?, opt(4)?);
            Slice::resolve(&shape, &io.ints(1)?, &io.ints(2)?, axes.as_deref(), steps.as_deref())
        }
    }
    .map_err(|e| EpError::Kernel(e.to_string()))?;
    let x = io.input::<T>(0)?;
    let out = io.output::<T>(0)?;
    let out_dims: Vec<usize> = resolved.iter().map(|a| a.len).collect();
    let in_strides = strides(&shape);
    let Some(&inner) = out_dims.last() else {
        out.copy_from_slice(x);
        return Ok(());
    };
    if inner == 0 || out.is_empty() {
        return Ok(());
    }
    let last = resolved.len() - 1;
    let outer_dims = &out_dims[..last];
    out.par_chunks_mut(inner).enumerate().with_min_len(super::min_rows(inner)).each(
        |(row, dst)| {
            // The row's offset in x, digit by digit (no allocation per row).
            let (mut rest, mut base) = (row, 0i64);
            for d in (0..last).rev() {
                let i = (rest % outer_dims[d]) as i64;
                rest /= outer_dims[d];
                base += (resolved[d].start + i * resolved[d].step) * in_strides[d] as i64;
            }
            let (start, step) = (base + resolved[last].start, resolved[last].step);
            if step == 1 {
                dst.copy_from_slice(&x[start as usize..start as usize + dst.len()]);
            } else {
                for (j, d) in dst.iter_mut().enumerate() {
                    *d = x[(start + j as i64 * step) as usize];
                }
            }
        },
    );
    Ok(())
}
movement_kernel!(SliceKernel, slice, op: Slice);

fn gather<T: bytemuck::Pod + Send + Sync>(io: &KernelIo, g: &Gather) -> Result<(), EpError> {
    let shape = io.in_view(0)?.shape.clone();
    let axis = axis_of(g.axis, shape.len())?;
    let indices = io.ints(1)?;
    let dim = shape[axis];
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let mut norm = Vec::with_capacity(indices.len());
    for &i in &indices {
        let j = if i < 0 { i + dim as i64 } else { i };
        if j < 0 || j >= dim as i64 {
            return Err(EpError::Kernel(format!(
                "Gather index {i} is out of bounds for axis {axis} of size {dim}"
            )));
        }
        norm.push(j as usize);
    }
    let x = io.input::<T>(0)?;
    let out = io.output::<T>(0)?;
    let block = norm.len() * inner;
    if block == 0 {
        return Ok(());
    }
    out.par_chunks_mut(block).enumerate().with_min_len(super::min_rows(block)).each(|(o, dst)| {
        for (k, &j) in norm.iter().enumerate() {
            let src = (o * dim + j) * inner;
            dst[k * inner..(k + 1) * inner].copy_from_slice(&x[src..src + inner]);
        }
    });
    let _ = outer;
    Ok(())
}
movement_kernel!(GatherKernel, gather, op: Gather);

fn expand<T: bytemuck::Pod + Send + Sync>(io: &KernelIo) -> Result<(), EpError> {
    let (vx, out_shape) = (io.in_view(0)?.shape.clone(), io.out_view(0)?.shape.clone());
    let x = io.input::<T>(0)?;
    let out = io.output::<T>(0)?;
    Broadcast::new(&out_shape, &[&vx]).for_each(out, |o, _, runs| match runs[0] {
        Run::Slice(s) => o.copy_from_slice(&x[s..s + o.len()]),
        Run::Scalar(s) => o.fill(x[s]),
    });
    Ok(())
}
movement_kernel!(ExpandKernel, expand);

fn tile<T: bytemuck::Pod + Send + Sync>(io: &KernelIo) -> Result<(), EpError> {
    let shape = io.in_view(0)?.shape.clone();
    let out_dims = io.out_view(0)?.shape.clone();
    let x = io.input::<T>(0)?;
    let out = io.output::<T>(0)?;
    let in_strides = strides(&shape);
    let Some(&inner) = out_dims.last() else {
        out.copy_from_slice(x);
        return Ok(());
    };
    if inner == 0 || out.is_empty() {
        return Ok(());
    }
    let last = out_dims.len() - 1;
    out.par_chunks_mut(inner).enumerate().with_min_len(super::min_rows(inner)).each(
        |(row, dst)| {
            let (mut rest, mut base) = (row, 0);
            for d in (0..last).rev() {
                base += (rest % out_dims[d] % shape[d]) * in_strides[d];
                rest /= out_dims[d];
            }
            // The input row repeats along the output row.
            let src = &x[base..base + shape[last]];
            for (d, s) in dst.iter_mut().zip(src.iter().cycle()) {
                *d = *s;
            }
        },
    );
    Ok(())
}
movement_kernel!(TileKernel, tile);

struct ShapeKernel {
    op: ShapeOf,
}

impl CpuKernel for ShapeKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        let shape = &io.in_view(0)?.shape;
        let range = self.op.range(shape.len());
        let dims: Vec<i64> = shape[range].iter().map(|&d| d as i64).collect();
        io.output::<i64>(0)?.copy_from_slice(&dims);
        Ok(())
    }
}

struct SizeKernel;

impl CpuKernel for SizeKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        let n = io.in_view(0)?.numel() as i64;
        io.output::<i64>(0)?[0] = n;
        Ok(())
    }
}

struct ConstantOfShapeKernel {
    value: Vec<u8>,
}

impl CpuKernel for ConstantOfShapeKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        let out = io.output_bytes(0)?;
        if self.value.iter().all(|&b| b == 0) {
            out.fill(0);
        } else {
            out.chunks_exact_mut(self.value.len()).for_each(|c| c.copy_from_slice(&self.value));
        }
        Ok(())
    }
}

struct RangeKernel {
    dtype: DType,
}

fn first<T: onyx_core::tensor::Element>(io: &KernelIo, i: usize) -> Result<T, EpError> {
    io.host_vec::<T>(i)?
        .first()
        .copied()
        .ok_or_else(|| EpError::Kernel(format!("input {i} is empty")))
}

fn range<T: AsF64 + onyx_core::tensor::Element>(io: &KernelIo) -> Result<(), EpError> {
    let start: T = first(io, 0)?;
    let delta: T = first(io, 2)?;
    let out = io.output::<T>(0)?;
    // Integer ranges stay exact: accumulate in i128 when both ends are integral.
    let (s, d) = (start.to_f64(), delta.to_f64());
    if s.fract() == 0.0 && d.fract() == 0.0 && s.abs() < 9e15 && d.abs() < 9e15 {
        let (s, d) = (s as i128, d as i128);
        out.iter_mut().enumerate().for_each(|(i, o)| *o = T::from_f64((s + i as i128 * d) as f64));
    } else {
        out.iter_mut().enumerate().for_each(|(i, o)| *o = T::from_f64(s + i as f64 * d));
    }
    Ok(())
}

fn range_i64(io: &KernelIo) -> Result<(), EpError> {
    let start: i64 = first(io, 0)?;
    let delta: i64 = first(io, 2)?;
    io.output::<i64>(0)?
        .iter_mut()
        .enumerate()
        .for_each(|(i, o)| *o = start.wrapping_add(i as i64 * delta));
    Ok(())
}

impl CpuKernel for RangeKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        if self.dtype == DType::I64 {
            return range_i64(io);
        }
        numeric!(self.dtype, T => range::<T>(io), else Err(unsupported_dtype("Range", self.dtype)))
    }
}

/// Registers the data-movement and generator kernels.
pub fn register_all(r: &mut KernelRegistry) {
    r.register("Transpose", |s| {
        Ok(Box::new(TransposeKernel {
            dtype: width_of(s, "Transpose")?,
            op: s.op_as::<Transpose>()?.clone(),
        }))
    });
    r.register("Concat", |s| {
        let axis = s.op_as::<Concat>()?.axis;
        Ok(Box::new(ConcatKernel { dtype: width_of(s, "Concat")?, axis }))
    });
    r.register("Split", |s| {
        Ok(Box::new(SplitKernel { dtype: width_of(s, "Split")?, op: s.op_as::<Split>()?.clone() }))
    });
    r.register("Slice", |s| {
        Ok(Box::new(SliceKernel { dtype: width_of(s, "Slice")?, op: s.op_as::<Slice>()?.clone() }))
    });
    r.register("Gather", |s| {
        Ok(Box::new(GatherKernel {
            dtype: width_of(s, "Gather")?,
            op: s.op_as::<Gather>()?.clone(),
        }))
    });
    r.register("Expand", |s| Ok(Box::new(ExpandKernel { dtype: width_of(s, "Expand")? })));
    r.register("Tile", |s| Ok(Box::new(TileKernel { dtype: width_of(s, "Tile")? })));
    r.register("Shape", |s| Ok(Box::new(ShapeKernel { op: s.op_as::<ShapeOf>()?.clone() })));
    r.register("Size", |_| Ok(Box::new(SizeKernel)));
    r.register("ConstantOfShape", |s| {
        let c = s.op_as::<ConstantOfShape>()?;
        let value = c.value.bytes().map_err(|e| EpError::Unsupported(e.to_string()))?.to_vec();
        if value.is_empty() {
            return Err(unsupported_dtype("ConstantOfShape", c.value.dtype()));
        }
        Ok(Box::new(ConstantOfShapeKernel { value }))
    });
    r.register("Range", |s| {
        let dtype = s.output_dtype(0)?;
        if !(dtype.is_byte_aligned()
            && (dtype.is_int()
                || matches!(dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16)))
        {
            return Err(unsupported_dtype("Range", dtype));
        }
        Ok(Box::new(RangeKernel { dtype }))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transpose_dims_drop_unit_dims_and_merge_contiguous_neighbours() {
        // Attention's head split: batch 1 dropped, the head dim kept contiguous.
        assert_eq!(
            transpose_dims(&[1, 128, 12, 32], &[0, 2, 1, 3]),
            vec![(12, 32), (128, 384), (32, 1)]
        );
        // The identity permutation is one contiguous run.
        assert_eq!(transpose_dims(&[2, 3, 4], &[0, 1, 2]), vec![(24, 1)]);
        // A matrix transpose keeps both dims.
        assert_eq!(transpose_dims(&[3, 5], &[1, 0]), vec![(5, 1), (3, 5)]);
    }
}
