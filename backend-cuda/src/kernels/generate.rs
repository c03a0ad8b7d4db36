//! Generated data: Shape, Size, ConstantOfShape and Range, and the fill
//! helper Dropout's mask uses.

use onyx_core::dtype::DType;
use onyx_core::ep::EpError;
use onyx_core::ops::generate::ConstantOfShape;
use onyx_core::ops::shape::ShapeOf;
use onyx_kernels::Kernel;

use super::movement::{elem_width, name};
use super::{CudaKernel, Io, Registry, is_float, is_int, suffix, unsupported};
use crate::gpu::{Args, Gpu};

/// Values per `put_i64` launch (`Values::v` in movement.cu).
const PUT: usize = 16;

/// `Values` in movement.cu.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
struct Values {
    n: i64,
    off: i64,
    v: [i64; PUT],
}

// SAFETY: plain `#[repr(C)]` data matching `struct Values` in movement.cu.
unsafe impl cudarc::driver::DeviceRepr for Values {}

/// One element's bytes repeated into the widest element (at most 16 bytes)
/// whose count divides `n`: `(repeated bytes, element count)`.
fn fill_pattern(value: &[u8], n: usize) -> (Vec<u8>, usize) {
    let mut k = 16 / value.len().max(1);
    while k > 1 && n % k != 0 {
        k /= 2;
    }
    let k = k.max(1);
    (value.repeat(k), n / k)
}

/// Queues filling `n` elements at `y` with the element whose bytes are `value`
/// (1, 2, 4, 8 or 16 of them).
pub(crate) fn fill(gpu: &Gpu, y: u64, n: usize, value: &[u8]) -> Result<(), EpError> {
    if !matches!(value.len(), 1 | 2 | 4 | 8 | 16) {
        return Err(EpError::Unsupported(format!("a fill of {}-byte elements", value.len())));
    }
    if n == 0 {
        return Ok(());
    }
    let (pattern, count) = fill_pattern(value, n);
    let mut bits = pattern.clone();
    bits.resize(16, 0);
    let word = |k: usize| u64::from_le_bytes(bits[8 * k..8 * k + 8].try_into().expect("8 bytes"));
    let f = gpu.function(Kernel::Movement, name(format!("fill_w{}", pattern.len())))?;
    let a = Args::new().push(count as i64).push(word(0)).push(word(1)).push(y);
    // SAFETY: matches `fill_wW(i64, u64, u64, W*)` with W of `pattern.len()`
    // bytes; `count` such elements cover exactly the `n` elements at `y`.
    unsafe { a.launch(gpu, &f, gpu.grid(count as u64)) }
}

/// Queues writing `values` as int64s at `y` (which holds at least that many).
fn put_i64(gpu: &Gpu, y: u64, values: &[i64]) -> Result<(), EpError> {
    let f = gpu.function(Kernel::Movement, "put_i64")?;
    for (c, chunk) in values.chunks(PUT).enumerate() {
        let mut v = Values { n: chunk.len() as i64, off: (c * PUT) as i64, v: [0; PUT] };
        v.v[..chunk.len()].copy_from_slice(chunk);
        let a = Args::new().push(v).push(y);
        // SAFETY: matches `put_i64(Values, i64*)`; it writes y[off..off + n),
        // inside the `values.len()` int64s at `y`.
        unsafe { a.launch(gpu, &f, gpu.grid(PUT as u64)) }?;
    }
    Ok(())
}

/// Shape: the input's dims in `[start, end)`.
struct ShapeKernel {
    op: ShapeOf,
}

impl CudaKernel for ShapeKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
        let shape = &io.input(0)?.shape;
        let dims: Vec<i64> = shape[self.op.range(shape.len())].iter().map(|&d| d as i64).collect();
        if io.output(0)?.numel() != dims.len() {
            return Err(EpError::Kernel("Shape output does not match the input's rank".into()));
        }
        put_i64(gpu, io.out_ptr(0)?, &dims)
    }
}

/// Size: the input's element count.
struct SizeKernel;

impl CudaKernel for SizeKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
        if io.output(0)?.numel() != 1 {
            return Err(EpError::Kernel("Size output must hold one element".into()));
        }
        put_i64(gpu, io.out_ptr(0)?, &[io.input(0)?.numel() as i64])
    }
}

/// ConstantOfShape: the value's bytes over the whole output.
struct ConstantKernel {
    value: Vec<u8>,
}

impl CudaKernel for ConstantKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
        fill(gpu, io.out_ptr(0)?, io.output(0)?.numel(), &self.value)
    }
}

/// Range(start, limit, delta) from value inputs; the count is the output's.
struct RangeKernel {
    dtype: DType,
    name: &'static str,
}

impl CudaKernel for RangeKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
        let n = io.output(0)?.numel() as i64;
        if n == 0 {
            return Ok(());
        }
        let first =
            |v: Vec<f64>| v.first().copied().ok_or(EpError::Kernel("empty Range input".into()));
        let f = gpu.function(Kernel::Movement, self.name)?;
        let a = if is_float(self.dtype) {
            Args::new().push(n).push(first(io.floats(0)?)?).push(first(io.floats(2)?)?)
        } else {
            let first =
                |v: Vec<i64>| v.first().copied().ok_or(EpError::Kernel("empty Range input".into()));
            Args::new().push(n).push(first(io.ints(0)?)?).push(first(io.ints(2)?)?)
        };
        let a = a.push(io.out_ptr(0)?);
        // SAFETY: matches `range_float_T(i64, double, double, T*)` or
        // `range_int_T(i64, i64, i64, T*)` by dtype; the output holds n elements.
        unsafe { a.launch(gpu, &f, gpu.grid(n as u64)) }
    }
}

/// Registers Shape, Size, ConstantOfShape and Range.
pub(crate) fn register_all(r: &mut Registry) {
    r.register("Shape", |s| Ok(Box::new(ShapeKernel { op: s.op_as::<ShapeOf>()?.clone() })));
    r.register("Size", |_| Ok(Box::new(SizeKernel)));
    r.register("ConstantOfShape", |s| {
        let c = s.op_as::<ConstantOfShape>()?;
        let dtype = c.value.dtype();
        elem_width("ConstantOfShape", dtype)?;
        let value = c.value.bytes().map_err(|_| unsupported("ConstantOfShape", dtype))?.to_vec();
        Ok(Box::new(ConstantKernel { value }))
    });
    r.register("Range", |s| {
        let dtype = s.output_dtype(0)?;
        let sfx = suffix(dtype).ok_or_else(|| unsupported("Range", dtype))?;
        let kind = match dtype {
            d if is_float(d) => "float",
            d if is_int(d) => "int",
            d => return Err(unsupported("Range", d)),
        };
        Ok(Box::new(RangeKernel { dtype, name: name(format!("range_{kind}_{sfx}")) }))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_values_have_the_size_of_their_cuda_struct() {
        assert_eq!(std::mem::size_of::<Values>(), 144);
    }

    #[test]
    fn fill_patterns_repeat_the_element_into_whole_wider_elements() {
        assert_eq!(fill_pattern(&[1], 32), (vec![1; 16], 2));
        assert_eq!(fill_pattern(&[1], 6), (vec![1; 2], 3));
        assert_eq!(fill_pattern(&[1, 2, 3, 4], 3), (vec![1, 2, 3, 4], 3));
        assert_eq!(fill_pattern(&[9; 8], 4), (vec![9; 16], 2));
        assert_eq!(fill_pattern(&[7; 16], 5), (vec![7; 16], 5));
    }
}
