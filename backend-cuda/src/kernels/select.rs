//! TopK (`topk_T` in select.cu): each element finds its rank in its line and
//! writes itself and its index there when the rank is below k; sorted output,
//! ties in axis order, NaN above every number. Every numeric dtype.

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::select::TopK;
use onyx_core::shape::normalize_axis;
use onyx_kernels::Kernel;

use super::elementwise::entry;
use super::{CudaKernel, Io, Registry, unsupported};
use crate::gpu::{Args, Gpu};

/// `TopKArgs` in select.cu.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
struct TopKArgs {
    lines: i64,
    len: i64,
    inner: i64,
    k: i64,
    largest: i32,
    pad: i32,
}

// SAFETY: plain `#[repr(C)]` data matching `struct TopKArgs` in select.cu.
unsafe impl cudarc::driver::DeviceRepr for TopKArgs {}

struct TopKKernel {
    op: TopK,
    name: &'static str,
}

impl CudaKernel for TopKKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
        let x = &io.input(0)?.shape;
        let y = &io.output(0)?.shape;
        let axis = normalize_axis(self.op.axis, x.len())
            .ok_or_else(|| EpError::Kernel(format!("TopK axis {} out of range", self.op.axis)))?;
        // k is the output's length along the axis (checked when it was inferred).
        let k = y.get(axis).copied().unwrap_or(0);
        let same_rest = y.len() == x.len() && (0..x.len()).all(|d| d == axis || x[d] == y[d]);
        if !same_rest || k > x[axis] || io.output(1)?.shape != *y {
            return Err(EpError::Kernel(format!("TopK of {x:?} into {y:?}")));
        }
        let total: usize = x.iter().product();
        if total == 0 || k == 0 {
            return Ok(());
        }
        let len = x[axis];
        let inner: usize = x[axis + 1..].iter().product();
        let args = TopKArgs {
            lines: (total / len) as i64,
            len: len as i64,
            inner: inner as i64,
            k: k as i64,
            largest: self.op.largest as i32,
            pad: 0,
        };
        let f = gpu.function(Kernel::Select, self.name)?;
        let a =
            Args::new().push(args).push(io.in_ptr(0)?).push(io.out_ptr(0)?).push(io.out_ptr(1)?);
        // SAFETY: matches `topk_T(TopKArgs, const T*, T*, i64*)`; X holds `total`
        // elements and both outputs `total / len * k` (checked above).
        unsafe { a.launch(gpu, &f, gpu.grid(total as u64)) }
    }
}

fn build_topk(spec: &KernelSpec<'_>) -> Result<Box<dyn CudaKernel>, EpError> {
    let dtype = spec.input_dtype(0)?;
    if matches!(dtype, DType::Bool) {
        return Err(unsupported("TopK", dtype));
    }
    Ok(Box::new(TopKKernel { op: spec.op_as::<TopK>()?.clone(), name: entry("topk", dtype)? }))
}

/// Registers TopK.
pub(crate) fn register_all(r: &mut Registry) {
    r.register("TopK", build_topk);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_argument_struct_has_the_size_of_its_cuda_twin() {
        assert_eq!(std::mem::size_of::<TopKArgs>(), 40);
    }
}
