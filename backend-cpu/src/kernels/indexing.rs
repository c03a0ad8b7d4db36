//! GatherElements and GatherND, by element width.

use onyx_core::dtype::DType;
use onyx_core::ep::EpError;
use onyx_core::ops::indexing::{GatherElements, GatherNd};
use onyx_core::shape::{normalize_axis, strides};
use rayon::prelude::*;

use crate::par::Loop;

use super::conv::unravel;
use super::dispatch::by_width;
use super::{CpuKernel, KernelIo, KernelRegistry, unsupported_dtype};

/// Resolves an index against a dim of `size` (negative counts from the end).
fn resolve(i: i64, size: usize, op: &str) -> Result<usize, EpError> {
    let j = if i < 0 { i + size as i64 } else { i };
    if j < 0 || j >= size as i64 {
        return Err(EpError::Kernel(format!(
            "{op} index {i} is out of bounds for a dim of {size}"
        )));
    }
    Ok(j as usize)
}

fn gather_elements<T: bytemuck::Pod + Send + Sync>(
    io: &KernelIo,
    g: &GatherElements,
) -> Result<(), EpError> {
    let data = io.in_view(0)?.shape.clone();
    let dims = io.in_view(1)?.shape.clone();
    let axis = normalize_axis(g.axis, data.len())
        .ok_or_else(|| EpError::Kernel(format!("axis {} out of range", g.axis)))?;
    let indices = io.ints(1)?;
    let ds = strides(&data);
    let (x, out) = (io.input::<T>(0)?, io.output::<T>(0)?);
    for (d, (&n, &m)) in dims.iter().zip(&data).enumerate() {
        if d != axis && n > m {
            return Err(EpError::Kernel(format!(
                "GatherElements indices {dims:?} exceed data {data:?} on axis {d}"
            )));
        }
    }
    out.par_iter_mut().zip(indices.par_iter()).enumerate().try_each(|(i, (o, &k))| {
        let c = unravel(i, &dims);
        let k = resolve(k, data[axis], "GatherElements")?;
        let src: usize =
            c.iter().enumerate().map(|(d, &v)| if d == axis { k } else { v } * ds[d]).sum();
        *o = x[src];
        Ok(())
    })
}

fn gather_nd<T: bytemuck::Pod + Send + Sync>(io: &KernelIo, g: &GatherNd) -> Result<(), EpError> {
    let data = io.in_view(0)?.shape.clone();
    let idims = io.in_view(1)?.shape.clone();
    g.output_dims(&data, &idims).map_err(|e| EpError::Kernel(e.to_string()))?;
    let (b, rk) = (g.batch_dims, idims[idims.len() - 1]);
    let indices = io.ints(1)?;
    let ds = strides(&data);
    let inner: usize = data[b + rk..].iter().product();
    let per_batch: usize = idims[b..idims.len() - 1].iter().product();
    let batch_stride: usize = data[b..].iter().product();
    let (x, out) = (io.input::<T>(0)?, io.output::<T>(0)?);
    if inner == 0 || out.is_empty() {
        return Ok(());
    }
    out.par_chunks_mut(inner).enumerate().try_each(|(j, dst)| {
        let mut src = (j / per_batch.max(1)) * batch_stride;
        for t in 0..rk {
            src += resolve(indices[j * rk + t], data[b + t], "GatherND")? * ds[b + t];
        }
        dst.copy_from_slice(&x[src..src + inner]);
        Ok(())
    })
}

struct GatherElementsKernel {
    dtype: DType,
    op: GatherElements,
}

impl CpuKernel for GatherElementsKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        by_width!(self.dtype, T => gather_elements::<T>(io, &self.op),
            else Err(unsupported_dtype("GatherElements", self.dtype)))
    }
}

struct GatherNdKernel {
    dtype: DType,
    op: GatherNd,
}

impl CpuKernel for GatherNdKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        by_width!(self.dtype, T => gather_nd::<T>(io, &self.op),
            else Err(unsupported_dtype("GatherND", self.dtype)))
    }
}

/// Registers GatherElements and GatherND.
pub fn register_all(r: &mut KernelRegistry) {
    r.register("GatherElements", |s| {
        let dtype = s.input_dtype(0)?;
        Ok(Box::new(GatherElementsKernel { dtype, op: s.op_as::<GatherElements>()?.clone() }))
    });
    r.register("GatherND", |s| {
        let dtype = s.input_dtype(0)?;
        Ok(Box::new(GatherNdKernel { dtype, op: s.op_as::<GatherNd>()?.clone() }))
    });
}
