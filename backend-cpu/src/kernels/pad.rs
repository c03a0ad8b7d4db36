//! Pad, by element width: one output row (the last axis) at a time.

use onyx_core::dtype::DType;
use onyx_core::ep::EpError;
use onyx_core::ops::pad::{Pad, PadLaunch};
use onyx_core::shape::strides;
use rayon::prelude::*;

use crate::par::Loop;

use super::conv::unravel;
use super::dispatch::by_width;
use super::{CpuKernel, KernelIo, KernelRegistry};

/// The resolved pads and fill bytes of one launch.
fn launch(io: &KernelIo, p: &Pad) -> Result<PadLaunch, EpError> {
    let v = io.in_view(0)?;
    let opt = |i: usize| io.present(i).then(|| io.ints(i)).transpose();
    let (pads, axes) = if p.attrs.is_some() { (None, None) } else { (opt(1)?, opt(3)?) };
    let constant =
        if p.attrs.is_some() { None } else { io.present(2).then(|| io.host(2)).transpose()? };
    p.launch(v.shape.len(), v.dtype, pads.as_deref(), axes.as_deref(), constant.as_ref())
        .map_err(|e| EpError::Kernel(e.to_string()))
}

fn pad<T: bytemuck::Pod + Send + Sync>(io: &KernelIo, p: &Pad) -> Result<(), EpError> {
    let PadLaunch { pads, fill } = launch(io, p)?;
    let fill: T = bytemuck::pod_read_unaligned(&fill);
    let dims = io.in_view(0)?.shape.clone();
    let out_dims = io.out_view(0)?.shape.clone();
    let (x, out) = (io.input::<T>(0)?, io.output::<T>(0)?);
    let Some(&row) = out_dims.last() else {
        out.copy_from_slice(x);
        return Ok(());
    };
    if row == 0 || out.is_empty() {
        return Ok(());
    }
    let (mode, last) = (p.mode, dims.len() - 1);
    let ins = strides(&dims);
    let outer = &out_dims[..last];
    out.par_chunks_mut(row).enumerate().with_min_len(super::min_rows(row)).each(|(r, dst)| {
        let mut base = Some(0usize);
        for (d, c) in unravel(r, outer).into_iter().enumerate() {
            base =
                base.and_then(|b| Some(b + mode.source(c as i64 - pads[d].0, dims[d])? * ins[d]));
        }
        let Some(base) = base else {
            dst.fill(fill);
            return;
        };
        for (j, o) in dst.iter_mut().enumerate() {
            *o = match mode.source(j as i64 - pads[last].0, dims[last]) {
                Some(s) => x[base + s],
                None => fill,
            };
        }
    });
    Ok(())
}

struct PadKernel {
    dtype: DType,
    op: Pad,
}

impl CpuKernel for PadKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        by_width!(self.dtype, T => pad::<T>(io, &self.op),
            else Err(super::unsupported_dtype("Pad", self.dtype)))
    }
}

/// Registers Pad.
pub fn register_all(r: &mut KernelRegistry) {
    r.register("Pad", |s| {
        Ok(Box::new(PadKernel { dtype: s.input_dtype(0)?, op: s.op_as::<Pad>()?.clone() }))
    });
}
