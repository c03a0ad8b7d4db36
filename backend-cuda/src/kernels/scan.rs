//! CumSum and CumProd: one warp per line along the axis, scanning 32
//! elements at a time with shuffles and carrying the running result
//! (`cumulative_T` in scan.cu). A long axis is 32 lanes wide instead of
//! one thread walking it; many short lines get a warp each.

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::scatter::Cumulative;
use onyx_core::shape::normalize_axis;
use onyx_kernels::Kernel;

use super::elementwise::entry;
use super::{CudaKernel, Io, Registry, unsupported};
use crate::gpu::{Args, Gpu};

/// `ScanShape` in scan.cu.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
struct ScanShape {
    lines: i64,
    len: i64,
    inner: i64,
    product: i32,
    exclusive: i32,
    reverse: i32,
    pad: i32,
}

// SAFETY: plain `#[repr(C)]` data matching `struct ScanShape` in scan.cu.
unsafe impl cudarc::driver::DeviceRepr for ScanShape {}

/// The lines of `dims` along `axis`: `(lines, len, inner)`.
fn lines(dims: &[usize], axis: usize) -> (usize, usize, usize) {
    let len = dims[axis];
    let inner: usize = dims[axis + 1..].iter().product();
    let outer: usize = dims[..axis].iter().product();
    (outer * inner, len, inner)
}

/// A prepared CumSum or CumProd.
struct ScanKernel {
    op: Cumulative,
    name: &'static str,
}

impl CudaKernel for ScanKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
        let dims = &io.input(0)?.shape;
        let axis = match io.ints(1)?[..] {
            [a] => normalize_axis(a, dims.len())
                .ok_or_else(|| EpError::Kernel(format!("axis {a} out of range")))?,
            ref v => return Err(EpError::Kernel(format!("axis {v:?} is not one value"))),
        };
        let (lines, len, inner) = lines(dims, axis);
        if lines * len == 0 {
            return Ok(());
        }
        let shape = ScanShape {
            lines: lines as i64,
            len: len as i64,
            inner: inner as i64,
            product: self.op.product.into(),
            exclusive: self.op.exclusive.into(),
            reverse: self.op.reverse.into(),
            pad: 0,
        };
        let f = gpu.function(Kernel::Scan, self.name)?;
        let a = Args::new().push(shape).push(io.in_ptr(0)?).push(io.out_ptr(0)?);
        // SAFETY: matches `cumulative_T(ScanShape, const T*, T*)` with T the
        // input's dtype; the lines cover exactly the input's elements, and the
        // output has its shape (the same buffer when in place, which the
        // kernel allows: each lane reads its element before writing it).
        unsafe { a.launch(gpu, &f, gpu.grid(lines as u64 * 32)) }
    }

    fn in_place(&self) -> bool {
        true
    }
}

fn build(spec: &KernelSpec<'_>) -> Result<Box<dyn CudaKernel>, EpError> {
    let c = spec.op_as::<Cumulative>()?;
    let name = if c.product { "CumProd" } else { "CumSum" };
    let dtype = spec.input_dtype(0)?;
    use DType::*;
    if !matches!(dtype, F32 | F64 | F16 | BF16 | I32 | U32 | I64 | U64) {
        return Err(unsupported(name, dtype));
    }
    Ok(Box::new(ScanKernel { op: c.clone(), name: entry("cumulative", dtype)? }))
}

/// Registers CumSum and CumProd.
pub(crate) fn register_all(r: &mut Registry) {
    r.register("CumSum", build);
    r.register("CumProd", build);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_shapes_have_the_size_of_their_cuda_struct() {
        assert_eq!(std::mem::size_of::<ScanShape>(), 40);
    }

    #[test]
    fn lines_run_along_the_axis_with_the_inner_dims_as_their_stride() {
        assert_eq!(lines(&[2, 3, 4], 1), (8, 3, 4));
        assert_eq!(lines(&[5], 0), (1, 5, 1));
        assert_eq!(lines(&[2, 3], 1), (2, 3, 1));
        assert_eq!(lines(&[2, 0, 4], 0), (0, 2, 0));
    }
}
