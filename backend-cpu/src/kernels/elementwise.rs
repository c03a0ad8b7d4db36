//! Unary elementwise kernels and Clip, with their in-place paths.

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::elementwise::{Clip, UNARY_OPS, Unary, UnaryKind};
use rayon::prelude::*;

use crate::par::Loop;

use super::dispatch::{AsF64, FloatExt, floats, ints};
use super::fastmath::{self, Wide, vectorized_wide};
use super::{CpuKernel, KernelIo, KernelRegistry, unsupported_dtype};

const PAR_MIN: usize = 16 * 1024;

/// `f` over a slice in place, compiled for the widest vector ISA the CPU has
/// (a closure handed to `fastmath::vectorized` would be compiled for the
/// baseline ISA only).
struct MapInPlace<'a, T, F> {
    data: &'a mut [T],
    f: &'a F,
}

impl<T: Copy, F: Fn(T) -> T> Wide for MapInPlace<'_, T, F> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        for x in self.data.iter_mut() {
            *x = (self.f)(*x);
        }
    }
}

/// Applies a fused activation (see `FusedConv`) to `data` in place, with the
/// formulas of the standalone kernels; `false` for activations not fused.
// `max(0).min(1)`, not `clamp`: a NaN input gives 0 as in the standalone kernels.
#[allow(clippy::manual_clamp)]
pub(crate) fn activate(kind: UnaryKind, data: &mut [f32]) -> bool {
    fn run(data: &mut [f32], f: impl Fn(f32) -> f32) {
        vectorized_wide(MapInPlace { data, f: &f });
    }
    match kind {
        UnaryKind::Relu => run(data, move |x| if x < 0.0 { 0.0 } else { x }),
        UnaryKind::Tanh => run(data, move |x| x.tanh()),
        UnaryKind::Sigmoid => run(data, sigmoid::<f32>),
        UnaryKind::LeakyRelu { alpha } => run(data, move |x| if x < 0.0 { alpha * x } else { x }),
        UnaryKind::HardSigmoid { alpha, beta } => {
            run(data, move |x| (alpha * x + beta).max(0.0).min(1.0))
        }
        UnaryKind::HardSwish => run(data, move |x| x * (x * (1.0 / 6.0) + 0.5).max(0.0).min(1.0)),
        _ => return false,
    }
    true
}

/// `f` from one slice into another, as [`MapInPlace`].
struct MapInto<'a, T, U, F> {
    out: &'a mut [U],
    input: &'a [T],
    f: &'a F,
}

impl<T: Copy, U, F: Fn(T) -> U> Wide for MapInto<'_, T, U, F> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        for (o, &i) in self.out.iter_mut().zip(self.input) {
            *o = (self.f)(i);
        }
    }
}

/// Applies `f` elementwise from input 0 to output 0, in place when they share a buffer.
pub(crate) fn map_same<T>(io: &KernelIo, f: impl Fn(T) -> T + Sync + Send) -> Result<(), EpError>
where
    T: bytemuck::Pod + Send + Sync,
{
    let out = io.output::<T>(0)?;
    if io.aliased(0, 0) {
        let run = |data: &mut [T]| vectorized_wide(MapInPlace { data, f: &f });
        if out.len() >= PAR_MIN {
            out.par_chunks_mut(4096).each(run);
        } else {
            run(out);
        }
        return Ok(());
    }
    map_to(io, f)
}

/// Applies `f` elementwise from input 0 (type `T`) to output 0 (type `U`).
pub(crate) fn map_to<T, U>(io: &KernelIo, f: impl Fn(T) -> U + Sync + Send) -> Result<(), EpError>
where
    T: bytemuck::Pod + Send + Sync,
    U: bytemuck::Pod + Send + Sync,
{
    let x = io.input::<T>(0)?;
    let out = io.output::<U>(0)?;
    let run = |out: &mut [U], input: &[T]| vectorized_wide(MapInto { out, input, f: &f });
    if out.len() >= PAR_MIN {
        out.par_chunks_mut(4096).zip(x.par_chunks(4096)).each(|(o, i)| run(o, i));
    } else {
        run(out, x);
    }
    Ok(())
}

/// Round half to even, as numpy and ONNX do.
fn round_even<F: FloatExt>(x: F) -> F {
    let r = x.round();
    if (r - x).abs() == F::c(0.5) { F::c(2.0) * (x / F::c(2.0)).round() } else { r }
}

fn sigmoid<F: FloatExt>(x: F) -> F {
    if x >= F::zero() {
        F::one() / (F::one() + (-x).exp())
    } else {
        let e = x.exp();
        e / (F::one() + e)
    }
}

fn softplus<F: FloatExt>(x: F) -> F {
    if x > F::zero() { x + (-x).exp().ln_1p() } else { x.exp().ln_1p() }
}

/// The f32 ops that have a vectorizable form in [`fastmath`], or `None`.
fn fast_f32(kind: UnaryKind, io: &KernelIo) -> Option<Result<(), EpError>> {
    use UnaryKind::*;
    use std::f32::consts::{FRAC_1_SQRT_2, FRAC_2_PI};
    Some(match kind {
        Exp => map_same(io, fastmath::exp),
        Erf => map_same(io, fastmath::erf),
        Tanh => map_same(io, fastmath::tanh),
        Sigmoid => map_same(io, fastmath::sigmoid),
        Gelu { tanh_approximation: false } => {
            map_same(io, move |x: f32| 0.5 * x * (1.0 + fastmath::erf(x * FRAC_1_SQRT_2)))
        }
        Gelu { tanh_approximation: true } => {
            let k = FRAC_2_PI.sqrt();
            map_same(io, move |x: f32| {
                0.5 * x * (1.0 + fastmath::tanh(k * (x + 0.044715 * x * x * x)))
            })
        }
        _ => return None,
    })
}

fn float_unary<F: FloatExt>(kind: UnaryKind, io: &KernelIo) -> Result<(), EpError> {
    use UnaryKind::*;
    let c = F::c;
    let zero = F::zero();
    let one = F::one();
    match kind {
        Abs => map_same(io, move |x: F| x.abs()),
        Neg => map_same(io, move |x: F| -x),
        Exp => map_same(io, move |x: F| x.exp()),
        Log => map_same(io, move |x: F| x.ln()),
        Sqrt => map_same(io, move |x: F| x.sqrt()),
        Reciprocal => map_same(io, move |x: F| x.recip()),
        Floor => map_same(io, move |x: F| x.floor()),
        Ceil => map_same(io, move |x: F| x.ceil()),
        Round => map_same(io, round_even::<F>),
        Sign => map_same(io, move |x: F| {
            if x > zero {
                one
            } else if x < zero {
                -one
            } else {
                x
            }
        }),
        Sin => map_same(io, move |x: F| x.sin()),
        Cos => map_same(io, move |x: F| x.cos()),
        Tan => map_same(io, move |x: F| x.tan()),
        Asin => map_same(io, move |x: F| x.asin()),
        Acos => map_same(io, move |x: F| x.acos()),
        Atan => map_same(io, move |x: F| x.atan()),
        Sinh => map_same(io, move |x: F| x.sinh()),
        Cosh => map_same(io, move |x: F| x.cosh()),
        Asinh => map_same(io, move |x: F| x.asinh()),
        Acosh => map_same(io, move |x: F| x.acosh()),
        Atanh => map_same(io, move |x: F| x.atanh()),
        Relu => map_same(io, move |x: F| if x < zero { zero } else { x }),
        Sigmoid => map_same(io, sigmoid::<F>),
        Tanh => map_same(io, move |x: F| x.tanh()),
        Erf => map_same(io, move |x: F| x.erf()),
        Softplus => map_same(io, softplus::<F>),
        Softsign => map_same(io, move |x: F| x / (one + x.abs())),
        IsNaN => map_to(io, move |x: F| x.is_nan() as u8),
        IsInf { detect_positive, detect_negative } => map_to(io, move |x: F| {
            (x.is_infinite() && ((x > zero && detect_positive) || (x < zero && detect_negative)))
                as u8
        }),
        LeakyRelu { alpha } => {
            let a = c(alpha as f64);
            map_same(io, move |x: F| if x < zero { a * x } else { x })
        }
        Elu { alpha } => {
            let a = c(alpha as f64);
            map_same(io, move |x: F| if x < zero { a * (x.exp() - one) } else { x })
        }
        Selu { alpha, gamma } => {
            let (a, g) = (c(alpha as f64), c(gamma as f64));
            map_same(io, move |x: F| if x > zero { g * x } else { g * a * (x.exp() - one) })
        }
        HardSigmoid { alpha, beta } => {
            let (a, b) = (c(alpha as f64), c(beta as f64));
            map_same(io, move |x: F| (a * x + b).max(zero).min(one))
        }
        HardSwish => {
            let (sixth, half) = (c(1.0 / 6.0), c(0.5));
            map_same(io, move |x: F| x * (x * sixth + half).max(zero).min(one))
        }
        Celu { alpha } => {
            let a = c(alpha as f64);
            map_same(io, move |x: F| x.max(zero) + (a * ((x / a).exp() - one)).min(zero))
        }
        ThresholdedRelu { alpha } => {
            let a = c(alpha as f64);
            map_same(io, move |x: F| if x > a { x } else { zero })
        }
        Mish => map_same(io, move |x: F| x * softplus(x).tanh()),
        Gelu { tanh_approximation: false } => {
            let (half, inv_sqrt2) = (c(0.5), c(std::f64::consts::FRAC_1_SQRT_2));
            map_same(io, move |x: F| half * x * (one + (x * inv_sqrt2).erf()))
        }
        Gelu { tanh_approximation: true } => {
            let (half, k, a) = (c(0.5), c((2.0 / std::f64::consts::PI).sqrt()), c(0.044715));
            map_same(io, move |x: F| half * x * (one + (k * (x + a * x * x * x)).tanh()))
        }
        Shrink { bias, lambd } => {
            let (b, l) = (c(bias as f64), c(lambd as f64));
            map_same(io, move |x: F| {
                if x < -l {
                    x + b
                } else if x > l {
                    x - b
                } else {
                    zero
                }
            })
        }
        Not | BitwiseNot => Err(EpError::Unsupported(format!("{kind:?} on floats"))),
    }
}

/// Integer behaviour of the unary ops that accept integers.
pub(crate) trait IntOps: Copy + PartialOrd + bytemuck::Pod + Send + Sync + AsF64 {
    const ZERO: Self;
    const SIGNED: bool;
    fn abs_(self) -> Self;
    fn neg_(self) -> Self;
    fn sign_(self) -> Self;
    fn not_(self) -> Self;
}

macro_rules! int_ops {
    (signed: $($s:ty),*; unsigned: $($u:ty),*) => {
        $(impl IntOps for $s {
            const ZERO: Self = 0;
            const SIGNED: bool = true;
            fn abs_(self) -> Self { self.wrapping_abs() }
            fn neg_(self) -> Self { self.wrapping_neg() }
            fn sign_(self) -> Self { self.signum() }
            fn not_(self) -> Self { !self }
        })*
        $(impl IntOps for $u {
            const ZERO: Self = 0;
            const SIGNED: bool = false;
            fn abs_(self) -> Self { self }
            fn neg_(self) -> Self { self.wrapping_neg() }
            fn sign_(self) -> Self { (self > 0) as $u }
            fn not_(self) -> Self { !self }
        })*
    };
}
int_ops!(signed: i8, i16, i32, i64; unsigned: u8, u16, u32, u64);

fn int_unary<T: IntOps>(kind: UnaryKind, io: &KernelIo) -> Result<(), EpError> {
    use UnaryKind::*;
    match kind {
        Abs => map_same(io, T::abs_),
        Neg if T::SIGNED => map_same(io, T::neg_),
        Sign => map_same(io, T::sign_),
        Relu if T::SIGNED => map_same(io, move |x: T| if x < T::ZERO { T::ZERO } else { x }),
        BitwiseNot => map_same(io, T::not_),
        Shrink { bias, lambd } => {
            let (b, l) = (bias as f64, lambd as f64);
            map_same(io, move |x: T| {
                let v = x.to_f64();
                T::from_f64(if v < -l {
                    v + b
                } else if v > l {
                    v - b
                } else {
                    0.0
                })
            })
        }
        _ => Err(EpError::Unsupported(format!("{kind:?} on integers"))),
    }
}

fn int_supports(kind: UnaryKind, signed: bool) -> bool {
    use UnaryKind::*;
    matches!(kind, Abs | Sign | BitwiseNot | Shrink { .. }) || signed && matches!(kind, Neg | Relu)
}

struct UnaryKernel {
    kind: UnaryKind,
    dtype: DType,
}

impl CpuKernel for UnaryKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        if self.kind == UnaryKind::Not {
            return map_same(io, move |x: u8| (x == 0) as u8);
        }
        if self.dtype == DType::F32
            && let Some(done) = fast_f32(self.kind, io)
        {
            return done;
        }
        floats!(self.dtype, F => float_unary::<F>(self.kind, io),
            else ints!(self.dtype, T => int_unary::<T>(self.kind, io),
            else Err(unsupported_dtype("unary op", self.dtype))))
    }
}

fn build_unary(spec: &KernelSpec<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let kind = spec.op_as::<Unary>()?.kind;
    let dtype = spec.input_dtype(0)?;
    let ok = match kind {
        UnaryKind::Not => dtype == DType::Bool,
        UnaryKind::BitwiseNot => dtype.is_int() && dtype.is_byte_aligned(),
        _ if dtype.is_int() && dtype.is_byte_aligned() => int_supports(kind, dtype.is_signed_int()),
        _ => matches!(dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16),
    };
    if !ok {
        return Err(unsupported_dtype(&spec.node.op_type, dtype));
    }
    Ok(Box::new(UnaryKernel { kind, dtype }))
}

struct ClipKernel {
    min: Option<f32>,
    max: Option<f32>,
    dtype: DType,
}

fn clip<T: AsF64 + PartialOrd + bytemuck::Pod + Send + Sync>(
    io: &KernelIo,
    attr_min: Option<f32>,
    attr_max: Option<f32>,
) -> Result<(), EpError> {
    let bound = |i: usize, attr: Option<f32>| -> Result<Option<T>, EpError> {
        if let Some(a) = attr {
            return Ok(Some(T::from_f64(a as f64)));
        }
        if !io.present(i) {
            return Ok(None);
        }
        match io.floats(i)?.as_slice() {
            [v] => Ok(Some(T::from_f64(*v))),
            other => Err(EpError::Kernel(format!(
                "Clip bound {i} must be a scalar, got {} values",
                other.len()
            ))),
        }
    };
    let lo = bound(1, attr_min)?;
    let hi = bound(2, attr_max)?;
    map_same(io, move |x: T| {
        let x = match lo {
            Some(l) if x < l => l,
            _ => x,
        };
        match hi {
            Some(h) if x > h => h,
            _ => x,
        }
    })
}

impl CpuKernel for ClipKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        floats!(self.dtype, T => clip::<T>(io, self.min, self.max),
            else ints!(self.dtype, T => clip::<T>(io, self.min, self.max),
            else Err(unsupported_dtype("Clip", self.dtype))))
    }
}

fn build_clip(spec: &KernelSpec<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let c = spec.op_as::<Clip>()?;
    let dtype = spec.input_dtype(0)?;
    if !(dtype.is_float() && dtype.bits() >= 16 || dtype.is_int() && dtype.is_byte_aligned()) {
        return Err(unsupported_dtype("Clip", dtype));
    }
    Ok(Box::new(ClipKernel { min: c.min, max: c.max, dtype }))
}

/// Registers the unary kernels and Clip; binary ones live in `binary.rs`.
pub fn register_all(r: &mut KernelRegistry) {
    for op in UNARY_OPS {
        r.register(op, build_unary);
    }
    r.register("Clip", build_clip);
    super::binary::register_all(r);
}
