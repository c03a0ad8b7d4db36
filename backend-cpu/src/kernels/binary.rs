//! Broadcasting kernels with several inputs: binary ops, Max/Min/Sum/Mean and Where.

use std::mem::MaybeUninit;

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::elementwise::{BINARY_OPS, Binary, BinaryKind, Variadic, VariadicKind};

use super::broadcast::{Broadcast, Run, SEGMENT};
use super::dispatch::{AsF64, FloatExt, floats, ints, numeric};
use super::elementwise::IntOps;
use super::fastmath::vectorized;
use super::{CpuKernel, KernelIo, KernelRegistry, unsupported_dtype};

/// One input's elements for a segment.
enum Seg<'a, T> {
    Slice(&'a [T]),
    Scalar(T),
}

impl<T: Copy> Seg<'_, T> {
    #[inline(always)]
    fn get(&self, i: usize) -> T {
        match self {
            Seg::Slice(s) => s[i],
            Seg::Scalar(v) => *v,
        }
    }
}

fn segment<'a, T: Copy>(src: &'a [T], run: Run, len: usize) -> Seg<'a, T> {
    match run {
        Run::Slice(s) => Seg::Slice(&src[s..s + len]),
        Run::Scalar(s) => Seg::Scalar(src[s]),
    }
}

/// Copies `src` (at most [`SEGMENT`] elements) into `buf` and returns the copy.
/// Only the copied elements are written: zeroing the whole buffer first cost
/// more than the arithmetic on a short segment (a channel of 7 × 7 in place).
fn copy_out<'s, T: bytemuck::Pod>(buf: &'s mut MaybeUninit<[T; SEGMENT]>, src: &[T]) -> &'s [T] {
    assert!(src.len() <= SEGMENT, "a segment holds at most SEGMENT elements");
    let dst = buf.as_mut_ptr().cast::<T>();
    // SAFETY: `dst` points to SEGMENT elements of `buf`, which `src` (at most
    // SEGMENT elements, borrowed from elsewhere) does not overlap; the slice
    // made covers exactly the elements just written, and lives as long as
    // the borrow of `buf`.
    unsafe {
        std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len());
        std::slice::from_raw_parts(dst, src.len())
    }
}

/// Input `i`, or `None` when it shares the output's buffer (then it is read from the output).
fn operand<T: bytemuck::Pod>(io: &KernelIo, i: usize) -> Result<Option<&[T]>, EpError> {
    if io.aliased(i, 0) { Ok(None) } else { io.input::<T>(i).map(Some) }
}

/// `out = f(a, b)` with broadcasting; either input may share the output's buffer.
pub(crate) fn zip2<A, B, O>(
    io: &KernelIo,
    f: impl Fn(A, B) -> O + Sync + Send,
) -> Result<(), EpError>
where
    A: bytemuck::Pod + Send + Sync,
    B: bytemuck::Pod + Send + Sync,
    O: bytemuck::Pod + Send + Sync,
{
    let (va, vb, vo) = (io.in_view(0)?, io.in_view(1)?, io.out_view(0)?);
    let bc = Broadcast::new(&vo.shape, &[&va.shape, &vb.shape]);
    let a = operand::<A>(io, 0)?;
    let b = operand::<B>(io, 1)?;
    let out = io.output::<O>(0)?;
    bc.for_each(out, |o, _, runs| {
        let n = o.len();
        // An in-place operand is copied out of this segment first, onto the stack
        // (a segment is at most SEGMENT elements; only those n are written).
        let mut stack_a = MaybeUninit::<[A; SEGMENT]>::uninit();
        let sa = match a {
            Some(a) => segment(a, runs[0], n),
            None => Seg::Slice(copy_out(&mut stack_a, bytemuck::cast_slice(o))),
        };
        let mut stack_b = MaybeUninit::<[B; SEGMENT]>::uninit();
        let sb = match b {
            Some(b) => segment(b, runs[1], n),
            None => Seg::Slice(copy_out(&mut stack_b, bytemuck::cast_slice(o))),
        };
        vectorized(|| match (&sa, &sb) {
            (Seg::Slice(x), Seg::Slice(y)) => {
                o.iter_mut().zip(x.iter().zip(y.iter())).for_each(|(o, (&x, &y))| *o = f(x, y))
            }
            (Seg::Slice(x), Seg::Scalar(y)) => {
                o.iter_mut().zip(x.iter()).for_each(|(o, &x)| *o = f(x, *y))
            }
            (Seg::Scalar(x), Seg::Slice(y)) => {
                o.iter_mut().zip(y.iter()).for_each(|(o, &y)| *o = f(*x, y))
            }
            (Seg::Scalar(x), Seg::Scalar(y)) => o.fill(f(*x, *y)),
        })
    });
    Ok(())
}

/// Python-style modulo (sign of the divisor) for integers.
fn int_mod<T: IntOps + std::ops::Rem<Output = T> + std::ops::Add<Output = T>>(a: T, b: T) -> T {
    if b == T::ZERO {
        return T::ZERO;
    }
    let r = a % b;
    if r != T::ZERO && ((r < T::ZERO) != (b < T::ZERO)) { r + b } else { r }
}

trait IntArith:
    IntOps
    + std::ops::Rem<Output = Self>
    + std::ops::Add<Output = Self>
    + std::ops::BitAnd<Output = Self>
    + std::ops::BitOr<Output = Self>
    + std::ops::BitXor<Output = Self>
    + std::ops::Mul<Output = Self>
{
    fn wadd(self, o: Self) -> Self;
    fn wsub(self, o: Self) -> Self;
    fn wmul(self, o: Self) -> Self;
    fn wdiv(self, o: Self) -> Self;
    fn wrem(self, o: Self) -> Self;
    fn shl(self, o: Self) -> Self;
    fn shr(self, o: Self) -> Self;
}

macro_rules! int_arith {
    ($($t:ty),*) => { $(impl IntArith for $t {
        fn wadd(self, o: Self) -> Self { self.wrapping_add(o) }
        fn wsub(self, o: Self) -> Self { self.wrapping_sub(o) }
        fn wmul(self, o: Self) -> Self { self.wrapping_mul(o) }
        fn wdiv(self, o: Self) -> Self { if o == 0 { 0 } else { self.wrapping_div(o) } }
        fn wrem(self, o: Self) -> Self { if o == 0 { 0 } else { self.wrapping_rem(o) } }
        // The shift counts as unsigned (a negative one is past the width); past
        // the width a left shift gives 0 and a right shift the sign fill.
        fn shl(self, o: Self) -> Self {
            if o as u64 >= <$t>::BITS as u64 { 0 } else { self << (o as u32) }
        }
        fn shr(self, o: Self) -> Self {
            if o as u64 >= <$t>::BITS as u64 { self >> (<$t>::BITS - 1) >> 1 } else { self >> (o as u32) }
        }
    })* };
}
int_arith!(i8, i16, i32, i64, u8, u16, u32, u64);

fn float_binary<F: FloatExt + AsF64>(
    kind: BinaryKind,
    io: &KernelIo,
    exp_dtype: DType,
) -> Result<(), EpError> {
    use BinaryKind::*;
    let zero = F::zero();
    match kind {
        Add => zip2(io, move |a: F, b: F| a + b),
        Sub => zip2(io, move |a: F, b: F| a - b),
        Mul => zip2(io, move |a: F, b: F| a * b),
        Div => zip2(io, move |a: F, b: F| a / b),
        Pow => pow::<F>(io, exp_dtype),
        Mod { fmod: true } => zip2(io, move |a: F, b: F| a % b),
        // numpy's mod: the remainder takes the divisor's sign.
        Mod { fmod: false } => zip2(io, move |a: F, b: F| {
            let r = a % b;
            if r != zero && (r < zero) != (b < zero) { r + b } else { r }
        }),
        Equal => zip2(io, move |a: F, b: F| (a == b) as u8),
        Less => zip2(io, move |a: F, b: F| (a < b) as u8),
        Greater => zip2(io, move |a: F, b: F| (a > b) as u8),
        LessOrEqual => zip2(io, move |a: F, b: F| (a <= b) as u8),
        GreaterOrEqual => zip2(io, move |a: F, b: F| (a >= b) as u8),
        PRelu => zip2(io, move |x: F, s: F| if x < zero { x * s } else { x }),
        _ => Err(EpError::Unsupported(format!("{kind:?} on floats"))),
    }
}

fn int_binary<T: IntArith>(
    kind: BinaryKind,
    io: &KernelIo,
    exp_dtype: DType,
) -> Result<(), EpError> {
    use BinaryKind::*;
    match kind {
        Add => zip2(io, T::wadd),
        Sub => zip2(io, T::wsub),
        Mul => zip2(io, T::wmul),
        Div => zip2(io, T::wdiv),
        Pow => pow::<T>(io, exp_dtype),
        Mod { fmod: true } => zip2(io, T::wrem),
        Mod { fmod: false } => zip2(io, int_mod::<T>),
        Equal => zip2(io, move |a: T, b: T| (a == b) as u8),
        Less => zip2(io, move |a: T, b: T| (a < b) as u8),
        Greater => zip2(io, move |a: T, b: T| (a > b) as u8),
        LessOrEqual => zip2(io, move |a: T, b: T| (a <= b) as u8),
        GreaterOrEqual => zip2(io, move |a: T, b: T| (a >= b) as u8),
        BitShiftLeft => zip2(io, T::shl),
        BitShiftRight => zip2(io, T::shr),
        BitwiseAnd => zip2(io, move |a: T, b: T| a & b),
        BitwiseOr => zip2(io, move |a: T, b: T| a | b),
        BitwiseXor => zip2(io, move |a: T, b: T| a ^ b),
        PRelu => zip2(io, move |x: T, s: T| if x < T::ZERO { x.wmul(s) } else { x }),
        And | Or | Xor => Err(EpError::Unsupported(format!("{kind:?} on integers"))),
    }
}

/// `Pow` with an exponent of any numeric dtype, computed through f64. A lone
/// exponent of 2 (squared magnitudes, variances) is a product, which is what
/// `powf` returns for it, without the call.
fn pow<T: AsF64 + bytemuck::Pod + Send + Sync>(
    io: &KernelIo,
    exp_dtype: DType,
) -> Result<(), EpError> {
    numeric!(exp_dtype, E => {
        let squares = matches!(operand::<E>(io, 1)?, Some([e]) if e.to_f64() == 2.0);
        if squares {
            zip2(io, move |a: T, _: E| {
                let x = a.to_f64();
                T::from_f64(x * x)
            })
        } else {
            zip2(io, move |a: T, b: E| T::from_f64(a.to_f64().powf(b.to_f64())))
        }
    }, else Err(unsupported_dtype("Pow exponent", exp_dtype)))
}

fn bool_binary(kind: BinaryKind, io: &KernelIo) -> Result<(), EpError> {
    use BinaryKind::*;
    match kind {
        And => zip2(io, move |a: u8, b: u8| (a != 0 && b != 0) as u8),
        Or => zip2(io, move |a: u8, b: u8| (a != 0 || b != 0) as u8),
        Xor => zip2(io, move |a: u8, b: u8| ((a != 0) != (b != 0)) as u8),
        Equal => zip2(io, move |a: u8, b: u8| ((a != 0) == (b != 0)) as u8),
        _ => Err(EpError::Unsupported(format!("{kind:?} on bool"))),
    }
}

struct BinaryKernel {
    kind: BinaryKind,
    dtype: DType,
    exp_dtype: DType,
}

impl CpuKernel for BinaryKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        if self.dtype == DType::Bool {
            return bool_binary(self.kind, io);
        }
        floats!(self.dtype, F => float_binary::<F>(self.kind, io, self.exp_dtype),
            else ints!(self.dtype, T => int_binary::<T>(self.kind, io, self.exp_dtype),
            else Err(unsupported_dtype("binary op", self.dtype))))
    }
}

fn build_binary(spec: &KernelSpec<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    use BinaryKind::*;
    let kind = spec.op_as::<Binary>()?.kind;
    let dtype = spec.input_dtype(0)?;
    let exp_dtype = spec.input_dtype(1)?;
    let float = matches!(dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16);
    let int = dtype.is_int() && dtype.is_byte_aligned();
    let ok = match kind {
        And | Or | Xor => dtype == DType::Bool,
        Equal => float || int || dtype == DType::Bool,
        BitShiftLeft | BitShiftRight => int,
        BitwiseAnd | BitwiseOr | BitwiseXor => int,
        Pow => {
            (float || int)
                && (exp_dtype.is_int() || exp_dtype.is_float())
                && exp_dtype.is_byte_aligned()
        }
        _ => float || int,
    };
    if !ok {
        return Err(unsupported_dtype(&spec.node.op_type, dtype));
    }
    Ok(Box::new(BinaryKernel { kind, dtype, exp_dtype }))
}

/// Folds inputs into the output: `out = in_0; out = f(out, in_k)` with broadcasting.
fn fold<T: bytemuck::Pod + Send + Sync>(
    io: &KernelIo,
    f: impl Fn(T, T) -> T + Sync + Send,
) -> Result<(), EpError> {
    let out_shape = io.out_view(0)?.shape.clone();
    let present: Vec<usize> =
        (0..io.inputs.len()).filter(|&i| io.input_view(i).is_some()).collect();
    // Start from the input that shares the output's buffer, if any: it is already in place.
    let first = present.iter().copied().find(|&i| io.aliased(i, 0));
    let out = io.output::<T>(0)?;
    let start = match first {
        Some(i) => i,
        None => {
            let i = present[0];
            let v = io.in_view(i)?;
            let src = io.input::<T>(i)?;
            Broadcast::new(&out_shape, &[&v.shape]).for_each(out, |o, _, runs| {
                let n = o.len();
                match segment(src, runs[0], n) {
                    Seg::Slice(s) => o.copy_from_slice(s),
                    Seg::Scalar(v) => o.fill(v),
                }
            });
            i
        }
    };
    for &i in present.iter().filter(|&&i| i != start) {
        let v = io.in_view(i)?;
        let src = io.input::<T>(i)?;
        Broadcast::new(&out_shape, &[&v.shape]).for_each(out, |o, _, runs| {
            let s = segment(src, runs[0], o.len());
            o.iter_mut().enumerate().for_each(|(k, x)| *x = f(*x, s.get(k)));
        });
    }
    Ok(())
}

struct VariadicKernel {
    kind: VariadicKind,
    dtype: DType,
}

fn variadic<T: AsF64 + PartialOrd + bytemuck::Pod + Send + Sync + std::ops::Add<Output = T>>(
    kind: VariadicKind,
    io: &KernelIo,
    nan_aware: bool,
) -> Result<(), EpError> {
    let pick = move |a: T, b: T, take_b: bool| {
        // A NaN operand propagates, as numpy's maximum/minimum do.
        if nan_aware && a.to_f64().is_nan() {
            a
        } else if nan_aware && b.to_f64().is_nan() || take_b {
            b
        } else {
            a
        }
    };
    match kind {
        VariadicKind::Max => fold(io, move |a: T, b: T| pick(a, b, b > a)),
        VariadicKind::Min => fold(io, move |a: T, b: T| pick(a, b, b < a)),
        VariadicKind::Sum => fold(io, |a: T, b: T| a + b),
        VariadicKind::Mean => {
            fold(io, |a: T, b: T| a + b)?;
            let n = (0..io.inputs.len()).filter(|&i| io.input_view(i).is_some()).count() as f64;
            io.output::<T>(0)?.iter_mut().for_each(|x| *x = T::from_f64(x.to_f64() / n));
            Ok(())
        }
    }
}

impl CpuKernel for VariadicKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        floats!(self.dtype, T => variadic::<T>(self.kind, io, true),
            else ints!(self.dtype, T => variadic::<T>(self.kind, io, false),
            else Err(unsupported_dtype("variadic op", self.dtype))))
    }
}

fn build_variadic(spec: &KernelSpec<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let kind = spec.op_as::<Variadic>()?.kind;
    let dtype = spec.output_dtype(0)?;
    let float = matches!(dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16);
    if !(float || dtype.is_int() && dtype.is_byte_aligned())
        || spec.input_dtypes.iter().flatten().any(|d| *d != dtype)
    {
        return Err(unsupported_dtype(&spec.node.op_type, dtype));
    }
    Ok(Box::new(VariadicKernel { kind, dtype }))
}

struct WhereKernel {
    width: usize,
}

fn select<T: bytemuck::Pod + Send + Sync>(io: &KernelIo) -> Result<(), EpError> {
    let (vc, vx, vy, vo) = (io.in_view(0)?, io.in_view(1)?, io.in_view(2)?, io.out_view(0)?);
    let bc = Broadcast::new(&vo.shape, &[&vc.shape, &vx.shape, &vy.shape]);
    let c = io.input::<u8>(0)?;
    let x = operand::<T>(io, 1)?;
    let y = operand::<T>(io, 2)?;
    let out = io.output::<T>(0)?;
    bc.for_each(out, |o, _, runs| {
        let n = o.len();
        let own: Vec<T> = if x.is_none() || y.is_none() { o.to_vec() } else { vec![] };
        let sc = segment(c, runs[0], n);
        let sx = x.map_or(Seg::Slice(&own), |x| segment(x, runs[1], n));
        let sy = y.map_or(Seg::Slice(&own), |y| segment(y, runs[2], n));
        for (k, o) in o.iter_mut().enumerate() {
            *o = if sc.get(k) != 0 { sx.get(k) } else { sy.get(k) };
        }
    });
    Ok(())
}

impl CpuKernel for WhereKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        match self.width {
            1 => select::<u8>(io),
            2 => select::<u16>(io),
            4 => select::<u32>(io),
            8 => select::<u64>(io),
            16 => select::<u128>(io),
            w => Err(EpError::Unsupported(format!("Where on {w}-byte elements"))),
        }
    }
}

fn build_where(spec: &KernelSpec<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let dtype = spec.input_dtype(1)?;
    if !dtype.is_byte_aligned() {
        return Err(unsupported_dtype("Where", dtype));
    }
    Ok(Box::new(WhereKernel { width: dtype.bits() / 8 }))
}

/// Registers binary, variadic and Where kernels.
pub fn register_all(r: &mut KernelRegistry) {
    for op in BINARY_OPS {
        r.register(op, build_binary);
    }
    for op in ["Max", "Min", "Sum", "Mean"] {
        r.register(op, build_variadic);
    }
    r.register("Where", build_where);
}
