//! The scatters: ScatterElements (and Scatter), ScatterND and TensorScatter.
//! Updates apply in index order, so with duplicate indices the last one wins
//! (or every one is folded in, with a reduction), as the reference does.
//! Also the element arithmetic the cumulative ops share.

use half::{bf16, f16};
use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::scatter::{Reduction, ScatterElements, ScatterNd, TensorScatter};
use onyx_core::shape::{normalize_axis, strides};
use rayon::prelude::*;

use crate::par::Loop;

use super::dispatch::{by_width, numeric};
use super::nn::output_from_input;
use super::{CpuKernel, KernelIo, KernelRegistry, unsupported_dtype};

/// Element arithmetic as numpy does it: integers wrap, halves round each step.
pub(super) trait Arith: bytemuck::Pod + Send + Sync + PartialOrd {
    /// The additive identity.
    const ZERO: Self;
    /// The multiplicative identity.
    const ONE: Self;
    /// `a + b`.
    fn add(self, b: Self) -> Self;
    /// `a * b`.
    fn mul(self, b: Self) -> Self;
}

macro_rules! int_arith {
    ($($t:ty),*) => { $(impl Arith for $t {
        const ZERO: Self = 0;
        const ONE: Self = 1;
        fn add(self, b: Self) -> Self { self.wrapping_add(b) }
        fn mul(self, b: Self) -> Self { self.wrapping_mul(b) }
    })* };
}
int_arith!(i8, i16, i32, i64, u8, u16, u32, u64);

macro_rules! float_arith {
    ($($t:ty),*) => { $(impl Arith for $t {
        const ZERO: Self = 0.0;
        const ONE: Self = 1.0;
        fn add(self, b: Self) -> Self { self + b }
        fn mul(self, b: Self) -> Self { self * b }
    })* };
}
float_arith!(f32, f64);

macro_rules! half_arith {
    ($($t:ty),*) => { $(impl Arith for $t {
        const ZERO: Self = <$t>::ZERO;
        const ONE: Self = <$t>::ONE;
        fn add(self, b: Self) -> Self { <$t>::from_f32(self.to_f32() + b.to_f32()) }
        fn mul(self, b: Self) -> Self { <$t>::from_f32(self.to_f32() * b.to_f32()) }
    })* };
}
half_arith!(f16, bf16);

/// `f(old, update)` for a reduction (`None` is handled by the caller).
fn combine<T: Arith>(r: Reduction) -> impl Fn(T, T) -> T + Copy {
    move |a: T, b: T| match r {
        Reduction::None => b,
        Reduction::Add => a.add(b),
        Reduction::Mul => a.mul(b),
        // NaN propagates as with np.minimum / np.maximum.
        Reduction::Min => {
            if b < a || b.partial_cmp(&b).is_none() {
                b
            } else {
                a
            }
        }
        Reduction::Max => {
            if b > a || b.partial_cmp(&b).is_none() {
                b
            } else {
                a
            }
        }
    }
}

/// Resolves an index against a dim of `size` (negative counts from the end).
pub(super) fn resolve(i: i64, size: usize, op: &str) -> Result<usize, EpError> {
    let j = if i < 0 { i + size as i64 } else { i };
    if j < 0 || j >= size as i64 {
        return Err(EpError::Kernel(format!(
            "{op} index {i} is out of bounds for a dim of {size}"
        )));
    }
    Ok(j as usize)
}

fn scatter_elements<T: bytemuck::Pod + Send + Sync>(
    io: &KernelIo,
    axis: i64,
    f: impl Fn(T, T) -> T,
) -> Result<(), EpError> {
    let data = io.in_view(0)?.shape.clone();
    let dims = io.in_view(1)?.shape.clone();
    let axis = normalize_axis(axis, data.len())
        .ok_or_else(|| EpError::Kernel(format!("axis {axis} out of range")))?;
    let fits = dims.len() == data.len()
        && dims.iter().zip(&data).enumerate().all(|(d, (&n, &m))| d == axis || n <= m);
    if !fits || io.in_view(2)?.shape != dims {
        return Err(EpError::Kernel(format!(
            "ScatterElements indices {dims:?} and updates {:?} do not fit data {data:?}",
            io.in_view(2)?.shape
        )));
    }
    let indices = io.ints(1)?;
    let updates = io.input::<T>(2)?;
    let out = output_from_input::<T>(io)?;
    let ds = strides(&data);
    let mut pos = vec![0usize; dims.len()];
    for (&k, &u) in indices.iter().zip(updates) {
        let k = resolve(k, data[axis], "ScatterElements")?;
        let dst: usize =
            pos.iter().enumerate().map(|(d, &p)| if d == axis { k } else { p } * ds[d]).sum();
        out[dst] = f(out[dst], u);
        for d in (0..dims.len()).rev() {
            pos[d] += 1;
            if pos[d] < dims[d] {
                break;
            }
            pos[d] = 0;
        }
    }
    Ok(())
}

fn scatter_nd<T: bytemuck::Pod + Send + Sync>(
    io: &KernelIo,
    f: impl Fn(T, T) -> T,
) -> Result<(), EpError> {
    let data = io.in_view(0)?.shape.clone();
    let idims = io.in_view(1)?.shape.clone();
    let udims = io.in_view(2)?.shape.clone();
    let k = ScatterNd::check(&data, &idims, &udims).map_err(|e| EpError::Kernel(e.to_string()))?;
    let indices = io.ints(1)?;
    let updates = io.input::<T>(2)?;
    let out = output_from_input::<T>(io)?;
    let ds = strides(&data);
    let inner: usize = data[k..].iter().product();
    let tuples: usize = idims[..idims.len() - 1].iter().product();
    for j in 0..tuples {
        let mut dst = 0;
        for (t, &i) in indices[j * k..(j + 1) * k].iter().enumerate() {
            dst += resolve(i, data[t], "ScatterND")? * ds[t];
        }
        for (o, &u) in out[dst..dst + inner].iter_mut().zip(&updates[j * inner..]) {
            *o = f(*o, u);
        }
    }
    Ok(())
}

fn tensor_scatter<T: bytemuck::Pod + Send + Sync>(
    io: &KernelIo,
    ts: &TensorScatter,
) -> Result<(), EpError> {
    let cache = io.in_view(0)?.shape.clone();
    let udims = io.in_view(1)?.shape.clone();
    let axis = ts.check(&cache, &udims).map_err(|e| EpError::Kernel(e.to_string()))?;
    let batch = cache[0];
    let writes = if io.present(2) { io.ints(2)? } else { vec![0; batch] };
    if writes.len() != batch {
        return Err(EpError::Kernel(format!(
            "TensorScatter write_indices of {} entries for a batch of {batch}",
            writes.len()
        )));
    }
    let (max, seq) = (cache[axis], udims[axis]);
    let inner: usize = cache[axis + 1..].iter().product();
    let per_batch: usize = cache[1..axis].iter().product();
    let update = io.input::<T>(1)?;
    let out = output_from_input::<T>(io)?;
    if inner == 0 || max == 0 || seq == 0 {
        return Ok(());
    }
    out.par_chunks_mut(max * inner).enumerate().try_each(|(p, dst)| {
        let start = writes[p / per_batch.max(1)];
        for s in 0..seq {
            let pos = start + s as i64;
            let pos = if ts.circular { pos.rem_euclid(max as i64) } else { pos };
            if pos < 0 || pos >= max as i64 {
                return Err(EpError::Kernel(format!(
                    "TensorScatter writes position {pos} of a cache of {max}"
                )));
            }
            let src = &update[(p * seq + s) * inner..][..inner];
            dst[pos as usize * inner..][..inner].copy_from_slice(src);
        }
        Ok(())
    })
}

struct ScatterElementsKernel {
    dtype: DType,
    op: ScatterElements,
}

impl CpuKernel for ScatterElementsKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        let (axis, r) = (self.op.axis, self.op.reduction);
        if r == Reduction::None {
            return by_width!(self.dtype, T => scatter_elements::<T>(io, axis, |_, u| u),
                else Err(unsupported_dtype("ScatterElements", self.dtype)));
        }
        numeric!(self.dtype, T => scatter_elements::<T>(io, axis, combine::<T>(r)),
            else Err(unsupported_dtype("ScatterElements with a reduction", self.dtype)))
    }
}

struct ScatterNdKernel {
    dtype: DType,
    reduction: Reduction,
}

impl CpuKernel for ScatterNdKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        let r = self.reduction;
        if r == Reduction::None {
            return by_width!(self.dtype, T => scatter_nd::<T>(io, |_, u| u),
                else Err(unsupported_dtype("ScatterND", self.dtype)));
        }
        numeric!(self.dtype, T => scatter_nd::<T>(io, combine::<T>(r)),
            else Err(unsupported_dtype("ScatterND with a reduction", self.dtype)))
    }
}

struct TensorScatterKernel {
    dtype: DType,
    op: TensorScatter,
}

impl CpuKernel for TensorScatterKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        by_width!(self.dtype, T => tensor_scatter::<T>(io, &self.op),
            else Err(unsupported_dtype("TensorScatter", self.dtype)))
    }
}

fn build_scatter_elements(s: &KernelSpec<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let dtype = s.input_dtype(0)?;
    Ok(Box::new(ScatterElementsKernel { dtype, op: s.op_as::<ScatterElements>()?.clone() }))
}

/// Registers the scatters.
pub(crate) fn register_all(r: &mut KernelRegistry) {
    r.register("ScatterElements", build_scatter_elements);
    r.register("Scatter", build_scatter_elements);
    r.register("ScatterND", |s| {
        let dtype = s.input_dtype(0)?;
        Ok(Box::new(ScatterNdKernel { dtype, reduction: s.op_as::<ScatterNd>()?.reduction }))
    });
    r.register("TensorScatter", |s| {
        let dtype = s.input_dtype(0)?;
        Ok(Box::new(TensorScatterKernel { dtype, op: s.op_as::<TensorScatter>()?.clone() }))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reductions_fold_updates_into_the_old_value() {
        assert_eq!(combine::<f32>(Reduction::Add)(1.0, 2.0), 3.0);
        assert_eq!(combine::<i32>(Reduction::Mul)(3, 4), 12);
        assert_eq!(combine::<u8>(Reduction::Add)(250, 10), 4, "integers wrap");
        assert_eq!(combine::<f32>(Reduction::Min)(1.0, 2.0), 1.0);
        assert_eq!(combine::<f32>(Reduction::Max)(1.0, 2.0), 2.0);
        assert!(combine::<f32>(Reduction::Max)(1.0, f32::NAN).is_nan());
        assert_eq!(combine::<f16>(Reduction::Add)(f16::ONE, f16::ONE), f16::from_f32(2.0));
    }

    #[test]
    fn negative_indices_count_from_the_end() {
        assert_eq!(resolve(-1, 5, "t").unwrap(), 4);
        assert!(resolve(5, 5, "t").is_err());
        assert!(resolve(-6, 5, "t").is_err());
    }
}
