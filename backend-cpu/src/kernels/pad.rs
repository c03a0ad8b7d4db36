//! Pad, by element width: one output row (the last axis) at a time.

use onyx_core::dtype::DType;
use onyx_core::ep::EpError;
use onyx_core::ops::pad::Pad;
use onyx_core::shape::strides;
use rayon::prelude::*;

use super::conv::unravel;
use super::dispatch::by_width;
use super::{CpuKernel, KernelIo, KernelRegistry, in_dtype, op};

/// The resolved pads and fill bytes of one launch.
pub(crate) fn launch_pads(io: &KernelIo, p: &Pad) -> Result<(Vec<(i64, i64)>, Vec<u8>), EpError> {
    let v = io.in_view(0)?;
    let (rank, dtype) = (v.shape.len(), v.dtype);
    let kernel = |e: onyx_core::error::OpError| EpError::Kernel(e.to_string());
    let (pads, constant) = match &p.attrs {
        Some((pads, _)) => (Pad::resolve(rank, pads, None).map_err(kernel)?, None),
        None => {
            let axes = io.present(3).then(|| io.ints(3)).transpose()?;
            let pads = Pad::resolve(rank, &io.ints(1)?, axes.as_deref()).map_err(kernel)?;
            (pads, io.present(2).then(|| io.host(2)).transpose()?)
        }
    };
    Ok((pads, p.fill(dtype, constant.as_ref()).map_err(kernel)?))
}

fn pad<T: bytemuck::Pod + Send + Sync>(io: &KernelIo, p: &Pad) -> Result<(), EpError> {
    let (pads, fill) = launch_pads(io, p)?;
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
    out.par_chunks_mut(row).enumerate().for_each(|(r, dst)| {
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
        Ok(Box::new(PadKernel { dtype: in_dtype(s, 0)?, op: op::<Pad>(s)?.clone() }))
    });
}
