//! The layer-normalization family: LayerNormalization, the RMS forms
//! (RMSNormalization, SimplifiedLayerNormalization) and onnxruntime's
//! SkipLayerNormalization and SkipSimplifiedLayerNormalization. Rows are
//! computed in f64, except LayerNormalization in f32, which normalizes in f32
//! and accumulates its sums in f64; statistics are written in each output's
//! own dtype.

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::graph::MICROSOFT_DOMAIN;
use onyx_core::ops::norm::{LayerNorm, SkipNorm};
use rayon::prelude::*;

use crate::par::Loop;

use super::dispatch::{AsF64, floats};
use super::fastmath::{self, vectorized};
use super::nn::{is_float, output_from_input};
use super::{CpuKernel, KernelIo, KernelRegistry, unsupported_dtype};

/// `(mean, 1 / sqrt(var + eps))` of a row, or `(0, 1 / sqrt(mean(x²) + eps))` for RMS.
fn row_stats(row: &[f64], rms: bool, eps: f64) -> (f64, f64) {
    let n = row.len() as f64;
    if rms {
        return (0.0, 1.0 / (row.iter().map(|v| v * v).sum::<f64>() / n + eps).sqrt());
    }
    let mean = row.iter().sum::<f64>() / n;
    let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
    (mean, 1.0 / (var + eps).sqrt())
}

/// Writes per-row statistics to output `o` in that output's dtype, if requested.
fn write_stats(io: &KernelIo, o: usize, values: &[f64]) -> Result<(), EpError> {
    if !io.has_output(o) {
        return Ok(());
    }
    let dtype = io.out_view(o)?.dtype;
    floats!(dtype, S => {
        io.output::<S>(o)?.iter_mut().zip(values).for_each(|(d, v)| *d = S::from_f64(*v));
        Ok(())
    }, else Err(unsupported_dtype("normalization statistics", dtype)))
}

/// A per-feature parameter as `len` f64s (a single value broadcasts).
fn param<T: AsF64 + bytemuck::Pod>(
    io: &KernelIo,
    i: usize,
    len: usize,
) -> Result<Vec<f64>, EpError> {
    let v: Vec<f64> = io.input::<T>(i)?.iter().map(|v| v.to_f64()).collect();
    match v.len() {
        n if n == len => Ok(v),
        1 => Ok(vec![v[0]; len]),
        n => Err(EpError::Kernel(format!("a parameter of {n} elements for rows of {len}"))),
    }
}

fn layer_norm<T: AsF64 + bytemuck::Pod + Send + Sync>(
    io: &KernelIo,
    ln: &LayerNorm,
) -> Result<(), EpError> {
    let shape = io.in_view(0)?.shape.clone();
    let axis = ln.axis(shape.len()).map_err(|e| EpError::Kernel(e.to_string()))?;
    let len: usize = shape[axis..].iter().product();
    let scale = param::<T>(io, 1, len)?;
    let bias =
        if !ln.rms && io.input_view(2).is_some() { Some(param::<T>(io, 2, len)?) } else { None };
    let eps = ln.epsilon as f64;
    let data = output_from_input::<T>(io)?;
    let rows = data.len().checked_div(len).unwrap_or(0);
    let mut stats = vec![(0f64, 0f64); rows];
    if len > 0 {
        data.par_chunks_mut(len).zip(stats.par_iter_mut()).each(|(row, st)| {
            let v: Vec<f64> = row.iter().map(|x| x.to_f64()).collect();
            let (mean, inv) = row_stats(&v, ln.rms, eps);
            for (i, o) in row.iter_mut().enumerate() {
                let b = bias.as_ref().map_or(0.0, |b| b[i]);
                *o = T::from_f64((v[i] - mean) * inv * scale[i] + b);
            }
            *st = (mean, inv);
        });
    }
    let (means, invs): (Vec<f64>, Vec<f64>) = stats.into_iter().unzip();
    if ln.rms {
        return write_stats(io, 1, &invs);
    }
    write_stats(io, 1, &means)?;
    write_stats(io, 2, &invs)
}

/// Rows per rayon task in the f32 path: about 16K elements.
const NORM_TASK: usize = 16 * 1024;

/// Normalizes one f32 row in place; returns its `(mean, 1 / deviation)`.
#[inline(always)]
fn norm_row_f32(
    row: &mut [f32],
    scale: &[f32],
    bias: Option<&[f32]>,
    rms: bool,
    eps: f64,
) -> (f64, f64) {
    let n = row.len() as f64;
    let (mean, inv) = if rms {
        let sq = fastmath::sum_f64(row, |v| v as f64 * v as f64);
        (0.0, 1.0 / (sq / n + eps).sqrt())
    } else {
        let mean = fastmath::sum_f64(row, |v| v as f64) / n;
        let var = fastmath::sum_f64(row, |v| (v as f64 - mean) * (v as f64 - mean)) / n;
        (mean, 1.0 / (var + eps).sqrt())
    };
    let (m, s) = (mean as f32, inv as f32);
    match bias {
        Some(bias) => {
            row.iter_mut().zip(scale).zip(bias).for_each(|((v, &g), &b)| *v = (*v - m) * s * g + b)
        }
        None => row.iter_mut().zip(scale).for_each(|(v, &g)| *v = (*v - m) * s * g),
    }
    (mean, inv)
}

/// LayerNormalization in f32 with a full-length scale (and bias): no f64
/// copies of rows or parameters. Returns false (nothing done) for other shapes.
fn layer_norm_f32(io: &KernelIo, ln: &LayerNorm) -> Result<bool, EpError> {
    let shape = io.in_view(0)?.shape.clone();
    let axis = ln.axis(shape.len()).map_err(|e| EpError::Kernel(e.to_string()))?;
    let len: usize = shape[axis..].iter().product();
    let f32_param = |i: usize| io.input_view(i).is_none_or(|v| v.dtype == DType::F32);
    if !f32_param(1) || !f32_param(2) {
        return Ok(false);
    }
    let scale = io.input::<f32>(1)?;
    let bias = match !ln.rms && io.input_view(2).is_some() {
        true => Some(io.input::<f32>(2)?),
        false => None,
    };
    if len == 0 || scale.len() != len || bias.is_some_and(|b| b.len() != len) {
        return Ok(false);
    }
    let eps = ln.epsilon as f64;
    let data = output_from_input::<f32>(io)?;
    let mut stats = vec![(0f64, 0f64); data.len() / len];
    let per = (NORM_TASK / len).max(1);
    data.par_chunks_mut(len * per).zip(stats.par_chunks_mut(per)).each(|(rows, st)| {
        vectorized(|| {
            for (row, st) in rows.chunks_mut(len).zip(st) {
                *st = norm_row_f32(row, scale, bias, ln.rms, eps);
            }
        });
    });
    let (means, invs): (Vec<f64>, Vec<f64>) = stats.into_iter().unzip();
    if ln.rms {
        write_stats(io, 1, &invs)?;
    } else {
        write_stats(io, 1, &means)?;
        write_stats(io, 2, &invs)?;
    }
    Ok(true)
}

fn skip_norm<T: AsF64 + bytemuck::Pod + Send + Sync>(
    io: &KernelIo,
    sn: &SkipNorm,
) -> Result<(), EpError> {
    let shape = io.in_view(0)?.shape.clone();
    let skip_shape = io.in_view(1)?.shape.clone();
    SkipNorm::check_skip(&shape, &skip_shape).map_err(|e| EpError::Kernel(e.to_string()))?;
    let len = shape.last().copied().unwrap_or(1);
    let (beta_slot, bias_slot) = sn.slots();
    let gamma = param::<T>(io, 2, len)?;
    let present = |i: usize| io.input_view(i).is_some();
    let beta = beta_slot.filter(|&i| present(i)).map(|i| param::<T>(io, i, len)).transpose()?;
    let bias = present(bias_slot).then(|| param::<T>(io, bias_slot, len)).transpose()?;
    let skip: Vec<f64> = io.input::<T>(1)?.iter().map(|v| v.to_f64()).collect();
    let eps = sn.epsilon as f64;
    let data = output_from_input::<T>(io)?;
    let keep_sum = io.has_output(3);
    // Per row: mean, inverse deviation, and input + skip + bias when asked for.
    let rows: Vec<(f64, f64, Vec<f64>)> = if len == 0 || skip.is_empty() {
        Vec::new()
    } else {
        data.par_chunks_mut(len).enumerate().map_collect(|(r, row)| {
            let s: Vec<f64> = row
                .iter()
                .enumerate()
                .map(|(i, x)| {
                    let k = (r * len + i) % skip.len();
                    x.to_f64() + skip[k] + bias.as_ref().map_or(0.0, |b| b[i])
                })
                .collect();
            let (mean, inv) = row_stats(&s, sn.simplified, eps);
            for (i, o) in row.iter_mut().enumerate() {
                let b = beta.as_ref().map_or(0.0, |b| b[i]);
                *o = T::from_f64((s[i] - mean) * inv * gamma[i] + b);
            }
            (mean, inv, if keep_sum { s } else { Vec::new() })
        })
    };
    let means: Vec<f64> = rows.iter().map(|r| r.0).collect();
    let invs: Vec<f64> = rows.iter().map(|r| r.1).collect();
    write_stats(io, 1, &means)?;
    write_stats(io, 2, &invs)?;
    if keep_sum {
        let sums = rows.iter().flat_map(|r| r.2.iter());
        io.output::<T>(3)?.iter_mut().zip(sums).for_each(|(d, v)| *d = T::from_f64(*v));
    }
    Ok(())
}

struct LayerNormKernel {
    op: LayerNorm,
    dtype: DType,
}

impl CpuKernel for LayerNormKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        if self.dtype == DType::F32 && layer_norm_f32(io, &self.op)? {
            return Ok(());
        }
        floats!(self.dtype, T => layer_norm::<T>(io, &self.op),
            else Err(unsupported_dtype("LayerNormalization", self.dtype)))
    }
}

struct SkipNormKernel {
    op: SkipNorm,
    dtype: DType,
}

impl CpuKernel for SkipNormKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        floats!(self.dtype, T => skip_norm::<T>(io, &self.op),
            else Err(unsupported_dtype("SkipLayerNormalization", self.dtype)))
    }
}

/// Checks that the input and every requested statistics output are float.
fn float_io(spec: &KernelSpec<'_>, stats: std::ops::Range<usize>) -> Result<DType, EpError> {
    let dtype = spec.input_dtype(0)?;
    if !is_float(dtype) {
        return Err(unsupported_dtype(&spec.node.op_type, dtype));
    }
    for o in stats {
        if let Ok(d) = spec.output_dtype(o)
            && !is_float(d)
        {
            return Err(unsupported_dtype(&spec.node.op_type, d));
        }
    }
    Ok(dtype)
}

/// Registers the normalization family.
pub fn register_all(r: &mut KernelRegistry) {
    for name in ["LayerNormalization", "RMSNormalization", "SimplifiedLayerNormalization"] {
        r.register(name, |s| {
            let dtype = float_io(s, 1..3)?;
            Ok(Box::new(LayerNormKernel { op: s.op_as::<LayerNorm>()?.clone(), dtype }))
        });
    }
    for name in ["SkipLayerNormalization", "SkipSimplifiedLayerNormalization"] {
        r.register_in(MICROSOFT_DOMAIN, name, |s| {
            let dtype = float_io(s, 1..3)?;
            Ok(Box::new(SkipNormKernel { op: s.op_as::<SkipNorm>()?.clone(), dtype }))
        });
    }
}
