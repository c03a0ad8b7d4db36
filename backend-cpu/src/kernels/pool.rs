//! MaxPool (with Indices), AveragePool and the global pools, over any number of spatial dims.

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::conv::{GlobalPool, Pool, PoolKind};
use rayon::prelude::*;

use crate::par::Loop;

use super::conv::unravel;
use super::dispatch::{AsF64, floats};
use super::{CpuKernel, KernelIo, KernelRegistry, unsupported_dtype};

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

/// A window's output and MaxPool index: the maximum (and its flat index past
/// `plane_start`; -inf and -1 when the window saw no element), or the average.
fn window_result<T: AsF64>(
    kind: &PoolKind,
    best: Option<(f64, usize)>,
    sum: f64,
    count: usize,
    plane_start: usize,
) -> (T, i64) {
    match kind {
        PoolKind::Max => match best {
            Some((v, i)) => (T::from_f64(v), (plane_start + i) as i64),
            None => (T::from_f64(f64::NEG_INFINITY), -1),
        },
        PoolKind::Average { .. } => {
            (T::from_f64(if count > 0 { sum / count as f64 } else { 0.0 }), 0)
        }
    }
}

/// The 2-D case (images), with no allocation per window: the same results as
/// the n-d path, which handles every other rank.
fn pool2d<T: AsF64 + bytemuck::Pod + PartialOrd + Send + Sync>(
    io: &KernelIo,
    p: &Pool,
    xs: &[usize],
    geo: &onyx_core::ops::conv::Geometry,
) -> Result<(), EpError> {
    let (h, w) = (xs[2], xs[3]);
    let (oh, ow) = (geo.output[0], geo.output[1]);
    let (kh, kw) = (geo.kernel[0], geo.kernel[1]);
    let (sh, sw) = (geo.strides[0], geo.strides[1]);
    let (dh, dw) = (geo.dilations[0], geo.dilations[1]);
    let (ph, pw) = (geo.pads_begin[0] as isize, geo.pads_begin[1] as isize);
    // Rows and columns inside the padded extent count for count_include_pad.
    let (eh, ew) = ((h + geo.pads_end[0]) as isize, (w + geo.pads_end[1]) as isize);
    let (is, os) = (h * w, oh * ow);
    let x = io.input::<T>(0)?;
    let col_major = p.storage_order == 1;
    let window = |plane: usize, oy: usize, ox: usize| -> (T, i64) {
        let src = &x[plane * is..(plane + 1) * is];
        let mut best: Option<(f64, usize)> = None;
        let (mut sum, mut count) = (0.0f64, 0usize);
        for ky in 0..kh {
            let iy = (oy * sh + ky * dh) as isize - ph;
            for kx in 0..kw {
                let ix = (ox * sw + kx * dw) as isize - pw;
                if iy < 0 || iy >= h as isize || ix < 0 || ix >= w as isize {
                    if let PoolKind::Average { count_include_pad: true } = p.kind
                        && iy < eh
                        && ix < ew
                    {
                        count += 1;
                    }
                    continue;
                }
                let (iy, ix) = (iy as usize, ix as usize);
                let v = src[iy * w + ix].to_f64();
                match p.kind {
                    PoolKind::Max => {
                        if best.is_none_or(|(b, _)| v > b || b.is_nan()) {
                            best = Some((v, if col_major { ix * h + iy } else { iy * w + ix }));
                        }
                    }
                    PoolKind::Average { .. } => {
                        sum += v;
                        count += 1;
                    }
                }
            }
        }
        window_result::<T>(&p.kind, best, sum, count, plane * is)
    };
    let out = io.output::<T>(0)?;
    if io.has_output(1) {
        let idx = io.output::<i64>(1)?;
        out.par_chunks_mut(os.max(1)).zip(idx.par_chunks_mut(os.max(1))).enumerate().each(
            |(plane, (row, irow))| {
                for o in 0..os {
                    (row[o], irow[o]) = window(plane, o / ow, o % ow);
                }
            },
        );
    } else {
        out.par_chunks_mut(os.max(1)).enumerate().each(|(plane, row)| {
            for (o, slot) in row.iter_mut().enumerate() {
                *slot = window(plane, o / ow, o % ow).0;
            }
        });
    }
    Ok(())
}

fn pool<T: AsF64 + bytemuck::Pod + PartialOrd + Send + Sync>(
    io: &KernelIo,
    p: &Pool,
) -> Result<(), EpError> {
    let vx = io.in_view(0)?;
    let xs = vx.shape.clone();
    let geo =
        p.window.geometry(&xs[2..], p.kernel()).map_err(|e| EpError::Kernel(e.to_string()))?;
    if xs.len() == 4 {
        return pool2d::<T>(io, p, &xs, &geo);
    }
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
                    if let PoolKind::Average { count_include_pad: true } = p.kind
                        && in_padded
                    {
                        count += 1;
                    }
                }
            }
        }
        window_result::<T>(&p.kind, best, sum, count, plane * is)
    };
    out.par_chunks_mut(os.max(1)).enumerate().each(|(plane, row)| {
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
    let p = spec.op_as::<Pool>()?.clone();
    let dtype = spec.input_dtype(0)?;
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
    out.par_iter_mut().enumerate().each(|(plane, o)| {
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
    let max = spec.op_as::<GlobalPool>()?.max;
    let dtype = spec.input_dtype(0)?;
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
