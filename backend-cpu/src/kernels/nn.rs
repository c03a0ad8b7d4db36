//! Softmax family, BatchNormalization (inference) and Dropout.
//! Each reads a whole row before writing it, so the in-place case needs no copy.

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::nn::{BatchNorm, Softmax, SoftmaxKind};
use rayon::prelude::*;

use crate::par::Loop;

use super::dispatch::{AsF64, floats};
use super::fastmath::{self, vectorized};
use super::{CpuKernel, KernelIo, KernelRegistry, unsupported_dtype};

/// Output 0, after copying input 0 into it unless they already share the buffer.
#[allow(clippy::mut_from_ref)]
pub(crate) fn output_from_input<T: bytemuck::Pod>(io: &KernelIo) -> Result<&mut [T], EpError> {
    if !io.aliased(0, 0) {
        let x = io.input::<T>(0)?;
        let out = io.output::<T>(0)?;
        out.copy_from_slice(x);
        return Ok(out);
    }
    io.output::<T>(0)
}

pub(crate) fn is_float(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
}

struct SoftmaxKernel {
    op: Softmax,
    dtype: DType,
}

fn softmax<T: AsF64 + bytemuck::Pod + Send + Sync>(
    io: &KernelIo,
    s: &Softmax,
) -> Result<(), EpError> {
    let shape = io.in_view(0)?.shape.clone();
    let (outer, len, inner) = s.layout(&shape).map_err(|e| EpError::Kernel(e.to_string()))?;
    let data = output_from_input::<T>(io)?;
    if len == 0 {
        return Ok(());
    }
    let kind = s.kind;
    data.par_chunks_mut(len * inner).each(|block| {
        let mut row = vec![0f64; len];
        for j in 0..inner {
            for (i, r) in row.iter_mut().enumerate() {
                *r = block[i * inner + j].to_f64();
            }
            match kind {
                SoftmaxKind::Hardmax => {
                    let mut best = 0;
                    for i in 1..len {
                        if row[i] > row[best] {
                            best = i;
                        }
                    }
                    row.iter_mut().enumerate().for_each(|(i, r)| *r = (i == best) as u8 as f64);
                }
                _ => {
                    let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let sum: f64 = row.iter().map(|&v| (v - max).exp()).sum();
                    if kind == SoftmaxKind::Softmax {
                        row.iter_mut().for_each(|r| *r = (*r - max).exp() / sum);
                    } else {
                        let log_sum = sum.ln();
                        row.iter_mut().for_each(|r| *r = *r - max - log_sum);
                    }
                }
            }
            for (i, r) in row.iter().enumerate() {
                block[i * inner + j] = T::from_f64(*r);
            }
        }
    });
    let _ = outer;
    Ok(())
}

/// Rows per rayon task in the f32 softmax: about 16K elements, so short rows
/// (attention's 128) do not cost a task each.
const SOFTMAX_TASK: usize = 16 * 1024;

/// Softmax (or log-softmax) of one f32 row, in place.
#[inline(always)]
fn softmax_row(row: &mut [f32], log: bool) {
    let max = fastmath::max(row);
    if log {
        let sum = fastmath::sum_f32(row, |v| fastmath::exp(v - max));
        let shift = max + sum.ln();
        row.iter_mut().for_each(|v| *v -= shift);
    } else {
        row.iter_mut().for_each(|v| *v = fastmath::exp(*v - max));
        let inv = 1.0 / fastmath::sum_f32(row, |v| v);
        row.iter_mut().for_each(|v| *v *= inv);
    }
}

/// f32 softmax over contiguous rows: the hot path of attention.
fn softmax_f32_rows(io: &KernelIo, s: &Softmax) -> Result<bool, EpError> {
    let shape = io.in_view(0)?.shape.clone();
    let (_, len, inner) = s.layout(&shape).map_err(|e| EpError::Kernel(e.to_string()))?;
    if inner != 1 || s.kind == SoftmaxKind::Hardmax || len == 0 {
        return Ok(false);
    }
    let data = output_from_input::<f32>(io)?;
    let log = s.kind == SoftmaxKind::LogSoftmax;
    let task = len * (SOFTMAX_TASK / len).max(1);
    data.par_chunks_mut(task).each(|rows| {
        vectorized(|| rows.chunks_mut(len).for_each(|row| softmax_row(row, log)));
    });
    Ok(true)
}

impl CpuKernel for SoftmaxKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        if self.dtype == DType::F32 && softmax_f32_rows(io, &self.op)? {
            return Ok(());
        }
        floats!(self.dtype, T => softmax::<T>(io, &self.op), else Err(unsupported_dtype("Softmax", self.dtype)))
    }
}

fn build_softmax(spec: &KernelSpec<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let s = spec.op_as::<Softmax>()?.clone();
    let dtype = spec.input_dtype(0)?;
    if !is_float(dtype) {
        return Err(unsupported_dtype(&spec.node.op_type, dtype));
    }
    Ok(Box::new(SoftmaxKernel { op: s, dtype }))
}

struct BatchNormKernel {
    epsilon: f64,
    dtype: DType,
    param_dtype: DType,
}

fn is_f32<T: 'static>() -> bool {
    std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>()
}

fn batch_norm<T: AsF64 + bytemuck::Pod + Send + Sync + 'static, P: AsF64 + bytemuck::Pod>(
    io: &KernelIo,
    eps: f64,
) -> Result<(), EpError> {
    let shape = io.in_view(0)?.shape.clone();
    let channels = shape.get(1).copied().unwrap_or(1);
    let inner: usize = shape.get(2..).map_or(1, |s| s.iter().product());
    let param = |i: usize| -> Result<Vec<f64>, EpError> {
        let v: Vec<f64> = io.input::<P>(i)?.iter().map(|x| x.to_f64()).collect();
        if v.len() != channels {
            return Err(EpError::Kernel(format!(
                "BatchNormalization input {i} has {} values for {channels} channels",
                v.len()
            )));
        }
        Ok(v)
    };
    let (scale, bias, mean, var) = (param(1)?, param(2)?, param(3)?, param(4)?);
    let a: Vec<f64> = (0..channels).map(|c| scale[c] / (var[c] + eps).sqrt()).collect();
    let b: Vec<f64> = (0..channels).map(|c| bias[c] - mean[c] * a[c]).collect();
    let data = output_from_input::<T>(io)?;
    if inner == 0 {
        return Ok(());
    }
    if let Some(data) = bytemuck::try_cast_slice_mut::<T, f32>(data).ok().filter(|_| is_f32::<T>())
    {
        // f32: the folded affine map in f32, vectorized.
        let (a, b): (Vec<f32>, Vec<f32>) =
            a.iter().zip(&b).map(|(&a, &b)| (a as f32, b as f32)).unzip();
        data.par_chunks_mut(inner).enumerate().each(|(plane, row)| {
            let (a, b) = (a[plane % channels], b[plane % channels]);
            vectorized(|| row.iter_mut().for_each(|v| *v = *v * a + b));
        });
        return Ok(());
    }
    data.par_chunks_mut(inner).enumerate().each(|(plane, row)| {
        let c = plane % channels;
        row.iter_mut().for_each(|v| *v = T::from_f64(v.to_f64() * a[c] + b[c]));
    });
    Ok(())
}

impl CpuKernel for BatchNormKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        floats!(self.dtype, T => floats!(self.param_dtype, P => batch_norm::<T, P>(io, self.epsilon),
            else Err(unsupported_dtype("BatchNormalization", self.param_dtype))),
            else Err(unsupported_dtype("BatchNormalization", self.dtype)))
    }
}

fn build_batch_norm(spec: &KernelSpec<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let bn = spec.op_as::<BatchNorm>()?;
    let dtype = spec.input_dtype(0)?;
    let param_dtype = spec.input_dtype(1)?;
    let mean_dtype = spec.input_dtype(3)?;
    if !is_float(dtype)
        || !is_float(param_dtype)
        || mean_dtype != param_dtype && mean_dtype != dtype
    {
        return Err(unsupported_dtype("BatchNormalization", dtype));
    }
    Ok(Box::new(BatchNormKernel { epsilon: bn.epsilon as f64, dtype, param_dtype }))
}

struct DropoutKernel;

impl CpuKernel for DropoutKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        if io.input_view(2).is_some() && io.ints(2)?.first().copied().unwrap_or(0) != 0 {
            let ratio = if io.input_view(1).is_some() {
                io.floats(1)?.first().copied().unwrap_or(0.5)
            } else {
                0.5
            };
            if ratio != 0.0 {
                return Err(EpError::Unsupported("Dropout in training mode".into()));
            }
        }
        if !io.aliased(0, 0) {
            let x = io.input_bytes(0)?;
            io.output_bytes(0)?.copy_from_slice(x);
        }
        if io.has_output(1) {
            io.output::<u8>(1)?.fill(1);
        }
        Ok(())
    }
}

fn build_dropout(spec: &KernelSpec<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let dtype = spec.input_dtype(0)?;
    if !dtype.is_byte_aligned() {
        return Err(unsupported_dtype("Dropout", dtype));
    }
    Ok(Box::new(DropoutKernel))
}

/// Registers the nn kernels.
pub fn register_all(r: &mut KernelRegistry) {
    for op in ["Softmax", "LogSoftmax", "Hardmax"] {
        r.register(op, build_softmax);
    }
    r.register("BatchNormalization", build_batch_norm);
    r.register("Dropout", build_dropout);
}
