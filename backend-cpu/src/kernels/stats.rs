//! Normalizations over computed statistics (LpNormalization,
//! MeanVarianceNormalization, InstanceNormalization, GroupNormalization, LRN)
//! and the losses (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss).
//! Statistics and losses are computed in f64 and written in the input's dtype.

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::stats::{GroupNorm, Loss, LossReduction, LpNorm, Lrn, MeanVarianceNorm};
use onyx_core::shape::normalize_axis;
use rayon::prelude::*;

use crate::par::Loop;

use super::dispatch::{AsF64, floats};
use super::nn::output_from_input;
use super::{CpuKernel, KernelIo, KernelRegistry, unsupported_dtype};

fn kernel_err(e: impl std::fmt::Display) -> EpError {
    EpError::Kernel(e.to_string())
}

fn lp_norm<T: AsF64 + bytemuck::Pod + Send + Sync>(
    io: &KernelIo,
    l: &LpNorm,
) -> Result<(), EpError> {
    let dims = io.in_view(0)?.shape.clone();
    let axis = normalize_axis(l.axis, dims.len())
        .ok_or_else(|| EpError::Kernel(format!("axis {} out of range", l.axis)))?;
    let (len, inner) = (dims[axis], dims[axis + 1..].iter().product::<usize>());
    let out = output_from_input::<T>(io)?;
    if len * inner == 0 {
        return Ok(());
    }
    let p = l.p;
    out.par_chunks_mut(len * inner).each(|block| {
        for i in 0..inner {
            let line = (0..len).map(|j| block[j * inner + i].to_f64().abs());
            let norm =
                if p == 1 { line.sum::<f64>() } else { line.map(|v| v * v).sum::<f64>().sqrt() };
            for j in 0..len {
                let v = &mut block[j * inner + i];
                *v = T::from_f64(if norm == 0.0 { 0.0 } else { v.to_f64() / norm });
            }
        }
    });
    Ok(())
}

fn mean_variance<T: AsF64 + bytemuck::Pod + Send + Sync>(
    io: &KernelIo,
    m: &MeanVarianceNorm,
) -> Result<(), EpError> {
    let dims = io.in_view(0)?.shape.clone();
    let reduced = m.axes(dims.len()).map_err(kernel_err)?;
    // For each element, the index of its statistics group (its kept coordinates).
    let groups: usize = dims.iter().zip(&reduced).filter(|p| !*p.1).map(|p| *p.0).product();
    let mut group_stride = vec![0usize; dims.len()];
    let mut acc = 1;
    for d in (0..dims.len()).rev() {
        if !reduced[d] {
            group_stride[d] = acc;
            acc *= dims[d];
        }
    }
    let out = output_from_input::<T>(io)?;
    let mut group_of = Vec::with_capacity(out.len());
    let (mut pos, mut g) = (vec![0usize; dims.len()], 0usize);
    for _ in 0..out.len() {
        group_of.push(g);
        for d in (0..dims.len()).rev() {
            pos[d] += 1;
            g += group_stride[d];
            if pos[d] < dims[d] {
                break;
            }
            g -= group_stride[d] * dims[d];
            pos[d] = 0;
        }
    }
    let mut sums = vec![(0f64, 0f64); groups];
    for (v, &g) in out.iter().zip(&group_of) {
        let v = v.to_f64();
        sums[g].0 += v;
        sums[g].1 += v * v;
    }
    let n = (out.len() / groups.max(1)) as f64;
    let stats: Vec<(f64, f64)> = sums
        .iter()
        .map(|&(s, sq)| {
            let mean = s / n;
            (mean, (sq / n - mean * mean).max(0.0).sqrt() + 1e-9)
        })
        .collect();
    out.par_iter_mut().zip(group_of.par_iter()).each(|(v, &g)| {
        *v = T::from_f64((v.to_f64() - stats[g].0) / stats[g].1);
    });
    Ok(())
}

/// A per-channel (or per-group) parameter as f64s, checked to hold `len` values.
fn param<T: AsF64 + bytemuck::Pod>(
    io: &KernelIo,
    i: usize,
    len: usize,
) -> Result<Vec<f64>, EpError> {
    let v: Vec<f64> = io.input::<T>(i)?.iter().map(|v| v.to_f64()).collect();
    if v.len() != len {
        return Err(EpError::Kernel(format!("input {i} has {} values, expected {len}", v.len())));
    }
    Ok(v)
}

fn group_norm<T: AsF64 + bytemuck::Pod + Send + Sync>(
    io: &KernelIo,
    g: &GroupNorm,
) -> Result<(), EpError> {
    let dims = io.in_view(0)?.shape.clone();
    let channels = dims.get(1).copied().unwrap_or(0);
    let groups = g.groups.unwrap_or(channels);
    if groups == 0 || channels % groups != 0 {
        return Err(EpError::Kernel(format!("{channels} channels in {groups} groups")));
    }
    let params = if g.per_group_params { groups } else { channels };
    let (scale, bias) = (param::<T>(io, 1, params)?, param::<T>(io, 2, params)?);
    let spatial: usize = dims[2..].iter().product();
    let per_group = channels / groups;
    let len = per_group * spatial;
    let eps = g.epsilon as f64;
    let out = output_from_input::<T>(io)?;
    if len == 0 {
        return Ok(());
    }
    out.par_chunks_mut(len).enumerate().each(|(b, block)| {
        let group = b % groups;
        let v: Vec<f64> = block.iter().map(|x| x.to_f64()).collect();
        let mean = v.iter().sum::<f64>() / len as f64;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / len as f64;
        let inv = 1.0 / (var + eps).sqrt();
        for (c, chunk) in block.chunks_mut(spatial).enumerate() {
            let p = if g.per_group_params { group } else { group * per_group + c };
            for (o, x) in chunk.iter_mut().zip(&v[c * spatial..]) {
                *o = T::from_f64((x - mean) * inv * scale[p] + bias[p]);
            }
        }
    });
    Ok(())
}

fn lrn<T: AsF64 + bytemuck::Pod + Send + Sync>(io: &KernelIo, l: &Lrn) -> Result<(), EpError> {
    let dims = io.in_view(0)?.shape.clone();
    let Some(&channels) = dims.get(1) else {
        return Err(EpError::Kernel(format!("LRN needs rank 2 or more, got {dims:?}")));
    };
    let spatial: usize = dims[2..].iter().product();
    let (before, after) = ((l.size - 1) / 2, (l.size - 1).div_ceil(2));
    let (alpha, beta, bias) = (l.alpha as f64 / l.size as f64, l.beta as f64, l.bias as f64);
    let x = io.input::<T>(0)?;
    let out = io.output::<T>(0)?;
    if channels * spatial == 0 {
        return Ok(());
    }
    out.par_chunks_mut(channels * spatial).zip(x.par_chunks(channels * spatial)).each(
        |(dst, src)| {
            for c in 0..channels {
                let (lo, hi) = (c.saturating_sub(before), (c + after).min(channels - 1));
                for s in 0..spatial {
                    let sq: f64 = (lo..=hi).map(|i| src[i * spatial + s].to_f64().powi(2)).sum();
                    let v = src[c * spatial + s].to_f64();
                    dst[c * spatial + s] = T::from_f64(v / (bias + alpha * sq).powf(beta));
                }
            }
        },
    );
    Ok(())
}

fn loss<T: AsF64 + bytemuck::Pod + Send + Sync>(io: &KernelIo, l: &Loss) -> Result<(), EpError> {
    let dims = io.in_view(0)?.shape.clone();
    let [n, c, ..] = dims[..] else {
        return Err(EpError::Kernel(format!("a loss needs rank 2 or more, got {dims:?}")));
    };
    let d: usize = dims[2..].iter().product();
    let target = io.ints(1)?;
    if target.len() != n * d {
        return Err(EpError::Kernel(format!("{} targets for an input of {dims:?}", target.len())));
    }
    let weight = if io.present(2) { Some(param::<T>(io, 2, c)?) } else { None };
    let mut x: Vec<f64> = io.input::<T>(0)?.iter().map(|v| v.to_f64()).collect();
    if l.softmax && c * d > 0 {
        x.par_chunks_mut(c * d).each(|block| {
            for j in 0..d {
                let peak = (0..c).map(|k| block[k * d + j]).fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = (0..c).map(|k| (block[k * d + j] - peak).exp()).sum();
                let lse = peak + sum.ln();
                (0..c).for_each(|k| block[k * d + j] -= lse);
            }
        });
    }
    let mut losses = vec![0f64; n * d];
    let mut weights = vec![0f64; n * d];
    for (i, &t) in target.iter().enumerate() {
        if l.ignore_index == Some(t) {
            continue;
        }
        let class = usize::try_from(t).ok().filter(|&t| t < c).ok_or_else(|| {
            EpError::Kernel(format!("target {t} is not a class of {c} (nor ignore_index)"))
        })?;
        let w = weight.as_ref().map_or(1.0, |w| w[class]);
        let (b, j) = (i / d, i % d);
        losses[i] = -x[(b * c + class) * d + j] * w;
        weights[i] = w;
    }
    let out = io.output::<T>(0)?;
    match l.reduction {
        LossReduction::None => {
            out.iter_mut().zip(&losses).for_each(|(o, &v)| *o = T::from_f64(v));
        }
        LossReduction::Sum => out[0] = T::from_f64(losses.iter().sum()),
        LossReduction::Mean => {
            out[0] = T::from_f64(losses.iter().sum::<f64>() / weights.iter().sum::<f64>());
        }
    }
    if l.softmax && io.has_output(1) {
        io.output::<T>(1)?.iter_mut().zip(&x).for_each(|(o, &v)| *o = T::from_f64(v));
    }
    Ok(())
}

/// A kernel over the float types that runs `$f::<T>(io, &self.op)`.
macro_rules! float_kernel {
    ($name:ident, $op:ty, $f:ident) => {
        struct $name {
            dtype: DType,
            op: $op,
        }
        impl CpuKernel for $name {
            fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
                floats!(self.dtype, T => $f::<T>(io, &self.op),
                    else Err(unsupported_dtype(stringify!($name), self.dtype)))
            }
        }
    };
}

float_kernel!(LpNormKernel, LpNorm, lp_norm);
float_kernel!(MeanVarianceKernel, MeanVarianceNorm, mean_variance);
float_kernel!(GroupNormKernel, GroupNorm, group_norm);
float_kernel!(LrnKernel, Lrn, lrn);
float_kernel!(LossKernel, Loss, loss);

fn build_group_norm(s: &KernelSpec<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let dtype = s.input_dtype(0)?;
    Ok(Box::new(GroupNormKernel { dtype, op: s.op_as::<GroupNorm>()?.clone() }))
}

fn build_loss(s: &KernelSpec<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let dtype = s.input_dtype(0)?;
    Ok(Box::new(LossKernel { dtype, op: s.op_as::<Loss>()?.clone() }))
}

/// Registers the family.
pub(crate) fn register_all(r: &mut KernelRegistry) {
    r.register("LpNormalization", |s| {
        let dtype = s.input_dtype(0)?;
        Ok(Box::new(LpNormKernel { dtype, op: s.op_as::<LpNorm>()?.clone() }))
    });
    r.register("MeanVarianceNormalization", |s| {
        let dtype = s.input_dtype(0)?;
        Ok(Box::new(MeanVarianceKernel { dtype, op: s.op_as::<MeanVarianceNorm>()?.clone() }))
    });
    r.register("InstanceNormalization", build_group_norm);
    r.register("GroupNormalization", build_group_norm);
    r.register("LRN", |s| {
        let dtype = s.input_dtype(0)?;
        Ok(Box::new(LrnKernel { dtype, op: s.op_as::<Lrn>()?.clone() }))
    });
    r.register("NegativeLogLikelihoodLoss", build_loss);
    r.register("SoftmaxCrossEntropyLoss", build_loss);
}
