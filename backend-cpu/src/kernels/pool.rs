//! MaxPool (with Indices), AveragePool and the global pools, over any number of spatial dims.

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::conv::{GlobalPool, Pool, PoolKind};
use rayon::prelude::*;

use super::conv::unravel;
use super::dispatch::{AsF64, floats};
use super::{CpuKernel, KernelIo, KernelRegistry, in_dtype, op, unsupported_dtype};

struct PoolKernel {
    op: Pool,
    dtype: DType,
}

/// One window position of every spatial dim: its input coordinate, or `None` in padding,
/// and whether it lies inside the padded extent (for `count_include_pad`).
fn window_coords(
    geo: &onyx_core::ops::conv::Geometry,
    in_dims: &[usize],
    out_pos: &[usize],
    k: &[usize],
) -> (Option<Vec<usize>>, bool) {
    let mut coords = Vec::with_capacity(in_dims.len());
    let mut inside = true;
    let mut padded_extent = true;
    for d in 0..in_dims.len() {
        let i = (out_pos[d] * geo.strides[d] + k[d] * geo.dilations[d]) as isize
            - geo.pads_begin[d] as isize;
        if i < 0 || i as usize >= in_dims[d] {
            inside = false;
        }
        if i >= (in_dims[d] + geo.pads_end[d]) as isize {
            padded_extent = false;
        }
        coords.push(i.max(0) as usize);
    }
    (inside.then_some(coords), padded_extent)
}

fn pool<T: AsF64 + bytemuck::Pod + PartialOrd + Send + Sync>(
    io: &KernelIo,
    p: &Pool,
) -> Result<(), EpError> {
    let vx = io.in_view(0)?;
    let xs = vx.shape.clone();
    let geo =
        p.window.geometry(&xs[2..], p.kernel()).map_err(|e| EpError::Kernel(e.to_string()))?;
    let spatial = &xs[2..];
    let is: usize = spatial.iter().product();
    let os: usize = geo.output.iter().product();
    let ks: usize = geo.kernel.iter().product();
    let in_strides = onyx_core::shape::strides(spatial);
    let x = io.input::<T>(0)?;
    let out = io.output::<T>(0)?;
    let mut indices = if io.has_output(1) { Some(io.output::<i64>(1)?) } else { None };
    let col_major = p.storage_order == 1;
    let col_strides = {
        // Column-major strides of the spatial dims, for Indices with storage_order = 1.
        let mut s = vec![1; spatial.len()];
        for d in 1..spatial.len() {
            s[d] = s[d - 1] * spatial[d - 1];
        }
        s
    };
    let planes = xs[0] * xs[1];
    let compute = |plane: usize, o: usize| -> (T, i64) {
        let pos = unravel(o, &geo.output);
        let src = &x[plane * is..(plane + 1) * is];
        let mut best: Option<(f64, usize)> = None;
        let (mut sum, mut count) = (0.0f64, 0usize);
        for kk in 0..ks {
            let k = unravel(kk, &geo.kernel);
            let (coords, in_padded) = window_coords(&geo, spatial, &pos, &k);
            match coords {
                Some(c) => {
                    let flat: usize = c.iter().zip(&in_strides).map(|(a, b)| a * b).sum();
                    let v = src[flat].to_f64();
                    match p.kind {
                        PoolKind::Max => {
                            if best.is_none_or(|(b, _)| v > b || b.is_nan()) {
                                let index = if col_major {
                                    c.iter().zip(&col_strides).map(|(a, b)| a * b).sum()
                                } else {
                                    flat
                                };
                                best = Some((v, index));
                            }
                        }
                        PoolKind::Average { .. } => {
                            sum += v;
                            count += 1;
                        }
                    }
                }
                None => {
                    if let PoolKind::Average { count_include_pad: true } = p.kind {
                        if in_padded {
                            count += 1;
                        }
                    }
                }
            }
        }
        match p.kind {
            PoolKind::Max => match best {
                Some((v, i)) => (T::from_f64(v), (plane * is + i) as i64),
                None => (T::from_f64(f64::NEG_INFINITY), -1),
            },
            PoolKind::Average { .. } => {
                (T::from_f64(if count > 0 { sum / count as f64 } else { 0.0 }), 0)
            }
        }
    };
    out.par_chunks_mut(os.max(1)).enumerate().for_each(|(plane, row)| {
        for (o, slot) in row.iter_mut().enumerate() {
            *slot = compute(plane, o).0;
        }
    });
    if let Some(idx) = indices.as_mut() {
        for plane in 0..planes {
            for o in 0..os {
                idx[plane * os + o] = compute(plane, o).1;
            }
        }
    }
    Ok(())
}

impl CpuKernel for PoolKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        match self.dtype {
            DType::I8 => pool::<i8>(io, &self.op),
            DType::U8 => pool::<u8>(io, &self.op),
            d => {
                floats!(d, T => pool::<T>(io, &self.op), else Err(unsupported_dtype("pooling", d)))
            }
        }
    }
}

fn build_pool(spec: &KernelSpec<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let p = op::<Pool>(spec)?.clone();
    let dtype = in_dtype(spec, 0)?;
    let ints_ok = matches!(p.kind, PoolKind::Max) && matches!(dtype, DType::I8 | DType::U8);
    if !(matches!(dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16) || ints_ok) {
        return Err(unsupported_dtype(&spec.node.op_type, dtype));
    }
    Ok(Box::new(PoolKernel { op: p, dtype }))
}

struct GlobalPoolKernel {
    max: bool,
    dtype: DType,
}

fn global<T: AsF64 + bytemuck::Pod + Send + Sync>(io: &KernelIo, max: bool) -> Result<(), EpError> {
    let xs = io.in_view(0)?.shape.clone();
    let is: usize = xs[2..].iter().product();
    let x = io.input::<T>(0)?;
    let out = io.output::<T>(0)?;
    out.par_iter_mut().enumerate().for_each(|(plane, o)| {
        let src = &x[plane * is..(plane + 1) * is];
        let v = if max {
            src.iter()
                .map(|v| v.to_f64())
                .fold(f64::NEG_INFINITY, |a, b| if b > a || b.is_nan() { b } else { a })
        } else {
            src.iter().map(|v| v.to_f64()).sum::<f64>() / is.max(1) as f64
        };
        *o = T::from_f64(v);
    });
    Ok(())
}

impl CpuKernel for GlobalPoolKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        floats!(self.dtype, T => global::<T>(io, self.max), else Err(unsupported_dtype("global pooling", self.dtype)))
    }
}

fn build_global(spec: &KernelSpec<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let max = op::<GlobalPool>(spec)?.max;
    let dtype = in_dtype(spec, 0)?;
    if !matches!(dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16) {
        return Err(unsupported_dtype(&spec.node.op_type, dtype));
    }
    Ok(Box::new(GlobalPoolKernel { max, dtype }))
}

/// Registers the pooling kernels.
pub fn register_all(r: &mut KernelRegistry) {
    r.register("MaxPool", build_pool);
    r.register("AveragePool", build_pool);
    r.register("GlobalMaxPool", build_global);
    r.register("GlobalAveragePool", build_global);
}
