//! Resize and Upsample from the core's per-axis tap tables: each output row
//! (last axis) sums its outer taps' rows, weighted, at the last axis' taps.

use onyx_core::dtype::DType;
use onyx_core::ep::EpError;
use onyx_core::ops::resize::{AxisTaps, CoordinateMode, Resize, ResizeMode, ResizePlan};
use onyx_core::shape::strides;
use rayon::prelude::*;

use crate::par::Loop;

use super::conv::unravel;
use super::dispatch::{FloatExt, by_width, floats};
use super::{CpuKernel, KernelIo, KernelRegistry, unsupported_dtype};

/// The plan of one launch, from the host values of roi, scales and sizes.
fn launch_plan(io: &KernelIo, r: &Resize) -> Result<ResizePlan, EpError> {
    let dims = io.in_view(0)?.shape.clone();
    let present = |i: usize| io.present(i);
    let args = r.args(
        |i| present(i).then(|| io.floats(i).ok()).flatten(),
        |i| present(i).then(|| io.ints(i).ok()).flatten(),
    );
    r.plan(&dims, &args).map_err(|e| EpError::Kernel(e.to_string()))
}

/// The (offset, weight) pairs of an output row's outer coordinates, or `None`
/// when one of them is outside the crop box.
fn outer_taps(plan: &ResizePlan, coords: &[usize], ins: &[usize]) -> Option<Vec<(usize, f64)>> {
    let mut taps = vec![(0usize, 1.0f64)];
    for (d, &c) in coords.iter().enumerate() {
        let t = &plan.axes[d];
        if t.outside[c] {
            return None;
        }
        let mut next = Vec::with_capacity(taps.len() * t.taps);
        for &(off, w) in &taps {
            for k in c * t.taps..(c + 1) * t.taps {
                if t.weight[k] != 0.0 {
                    next.push((off + t.index[k] as usize * ins[d], w * t.weight[k] as f64));
                }
            }
        }
        taps = next;
    }
    Some(taps)
}

/// Runs `row(plan, input strides, x, output row index, output row)` over the
/// output's rows (its last axis), in parallel.
fn for_each_row<T: bytemuck::Pod + Send + Sync>(
    io: &KernelIo,
    r: &Resize,
    row: impl Fn(&ResizePlan, &[usize], &[T], usize, &mut [T]) + Sync,
) -> Result<(), EpError> {
    let plan = launch_plan(io, r)?;
    let ins = strides(&io.in_view(0)?.shape);
    let (x, out) = (io.input::<T>(0)?, io.output::<T>(0)?);
    let Some(&len) = plan.output.last() else {
        out.copy_from_slice(x);
        return Ok(());
    };
    if len == 0 || out.is_empty() {
        return Ok(());
    }
    out.par_chunks_mut(len).enumerate().each(|(i, dst)| row(&plan, &ins, x, i, dst));
    Ok(())
}

fn resize_float<T: FloatExt>(io: &KernelIo, r: &Resize) -> Result<(), EpError> {
    let extrapolation = T::c(r.extrapolation as f64);
    for_each_row::<T>(io, r, |plan, ins, x, i, dst| {
        let last = plan.output.len() - 1;
        let lt = &plan.axes[last];
        let Some(outer) = outer_taps(plan, &unravel(i, &plan.output[..last]), ins) else {
            dst.fill(extrapolation);
            return;
        };
        for (j, o) in dst.iter_mut().enumerate() {
            if lt.outside[j] {
                *o = extrapolation;
                continue;
            }
            let mut sum = 0.0f64;
            for &(off, w) in &outer {
                for k in j * lt.taps..(j + 1) * lt.taps {
                    if lt.weight[k] == 0.0 {
                        continue;
                    }
                    let v = x[off + lt.index[k] as usize].to_f64().unwrap_or(f64::NAN);
                    sum += w * lt.weight[k] as f64 * v;
                }
            }
            *o = T::c(sum);
        }
    })
}

/// The one input index a nearest-mode tap list selects.
fn nearest(t: &AxisTaps, c: usize) -> usize {
    let k = (c * t.taps..(c + 1) * t.taps).find(|&k| t.weight[k] != 0.0).unwrap_or(c * t.taps);
    t.index[k] as usize
}

/// Nearest on any dtype: a pure copy.
fn resize_nearest<T: bytemuck::Pod + Send + Sync>(
    io: &KernelIo,
    r: &Resize,
) -> Result<(), EpError> {
    for_each_row::<T>(io, r, |plan, ins, x, i, dst| {
        let last = plan.output.len() - 1;
        let coords = unravel(i, &plan.output[..last]);
        let base: usize =
            coords.iter().enumerate().map(|(d, &c)| nearest(&plan.axes[d], c) * ins[d]).sum();
        for (j, o) in dst.iter_mut().enumerate() {
            *o = x[base + nearest(&plan.axes[last], j)];
        }
    })
}

struct ResizeKernel {
    dtype: DType,
    op: Resize,
}

impl CpuKernel for ResizeKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        let float = floats!(self.dtype, T => Some(resize_float::<T>(io, &self.op)), else None);
        match float {
            Some(r) => r,
            None => by_width!(self.dtype, T => resize_nearest::<T>(io, &self.op),
                else Err(unsupported_dtype("Resize", self.dtype))),
        }
    }
}

/// Registers Resize and Upsample.
pub fn register_all(r: &mut KernelRegistry) {
    for name in ["Resize", "Upsample"] {
        r.register(name, |s| {
            let dtype = s.input_dtype(0)?;
            let op = s.op_as::<Resize>()?.clone();
            // Interpolating integers would need the spec's saturating casts: nearest only.
            if !dtype.is_float()
                && (op.mode != ResizeMode::Nearest
                    || op.coordinate == CoordinateMode::TfCropAndResize)
            {
                return Err(unsupported_dtype(&s.node.op_type, dtype));
            }
            Ok(Box::new(ResizeKernel { dtype, op }))
        });
    }
}
