//! Folding arithmetic, comparisons, casts and generators.
//!
//! Integers (all but `u64`, whose values do not fit i64) are computed in i64
//! and wrapped to their width, as the kernels' wrapping arithmetic does.
//! Floats are computed in f64 and rounded once to their dtype; only the
//! operations for which that gives the correctly rounded result are folded.

use half::{bf16, f16};

use super::walk::{broadcast, broadcast_map};
use crate::dtype::DType;
use crate::error::OpError;
use crate::ops::elementwise::{BinaryKind, UnaryKind};
use crate::tensor::Tensor;

type Folded = Option<Result<Vec<Tensor>, OpError>>;

/// A tensor's elements, widened.
enum Nums {
    Int(Vec<i64>),
    Float(Vec<f64>),
}

fn nums(t: &Tensor) -> Option<Nums> {
    match t.dtype() {
        DType::F16 | DType::BF16 | DType::F32 | DType::F64 => t.to_f64_vec().ok().map(Nums::Float),
        DType::U64 => None,
        d if d.is_byte_aligned() && (d.is_int() || d == DType::Bool) => {
            t.to_i64_vec().ok().map(Nums::Int)
        }
        _ => None,
    }
}

/// A tensor of `dtype` from i64 values, each wrapped (or for floats, converted) to it.
fn from_ints(dtype: DType, shape: Vec<usize>, v: &[i64]) -> Option<Tensor> {
    macro_rules! of {
        ($t:ty) => {
            Tensor::from_vec(shape, v.iter().map(|&x| x as $t).collect::<Vec<$t>>()).ok()
        };
    }
    match dtype {
        DType::I64 => of!(i64),
        DType::I32 => of!(i32),
        DType::I16 => of!(i16),
        DType::I8 => of!(i8),
        DType::U32 => of!(u32),
        DType::U16 => of!(u16),
        DType::U8 => of!(u8),
        DType::U64 => of!(u64),
        DType::Bool => {
            Tensor::from_bools(shape, &v.iter().map(|&x| x != 0).collect::<Vec<_>>()).ok()
        }
        d if d.is_float() => {
            from_floats(d, shape, &v.iter().map(|&x| x as f64).collect::<Vec<_>>())
        }
        _ => None,
    }
}

/// A tensor of `dtype` from f64 values, each rounded (floats) or converted
/// as Rust's `as` does (integers: truncation, saturating; NaN gives 0).
fn from_floats(dtype: DType, shape: Vec<usize>, v: &[f64]) -> Option<Tensor> {
    macro_rules! of {
        ($t:ty, $f:expr) => {
            Tensor::from_vec(shape, v.iter().map(|&x| $f(x)).collect::<Vec<$t>>()).ok()
        };
    }
    match dtype {
        DType::F64 => of!(f64, |x| x),
        DType::F32 => of!(f32, |x| x as f32),
        DType::F16 => of!(f16, f16::from_f64),
        DType::BF16 => of!(bf16, bf16::from_f64),
        DType::Bool => {
            Tensor::from_bools(shape, &v.iter().map(|&x| x != 0.0).collect::<Vec<_>>()).ok()
        }
        DType::I64 => of!(i64, |x| x as i64),
        DType::I32 => of!(i32, |x| x as i32),
        DType::I16 => of!(i16, |x| x as i16),
        DType::I8 => of!(i8, |x| x as i8),
        DType::U64 => of!(u64, |x| x as u64),
        DType::U32 => of!(u32, |x| x as u32),
        DType::U16 => of!(u16, |x| x as u16),
        DType::U8 => of!(u8, |x| x as u8),
        _ => None,
    }
}

fn ok(t: Option<Tensor>) -> Folded {
    t.map(|t| Ok(vec![t]))
}

/// A binary elementwise op with broadcasting.
pub fn binary(kind: BinaryKind, a: &Tensor, b: &Tensor) -> Folded {
    use BinaryKind::*;
    if a.dtype() != b.dtype() {
        return None;
    }
    let shape = match broadcast(&[a.shape(), b.shape()]) {
        Ok(s) => s,
        Err(e) => return Some(Err(e)),
    };
    let (ma, mb) = (broadcast_map(&shape, a.shape()), broadcast_map(&shape, b.shape()));
    let out_dtype = if kind.is_predicate() { DType::Bool } else { a.dtype() };
    match (nums(a)?, nums(b)?) {
        (Nums::Int(x), Nums::Int(y)) => {
            let f: fn(i64, i64) -> i64 = match kind {
                Add => i64::wrapping_add,
                Sub => i64::wrapping_sub,
                Mul => i64::wrapping_mul,
                Div => |p, q| if q == 0 { 0 } else { p.wrapping_div(q) },
                Mod { fmod: true } => |p, q| if q == 0 { 0 } else { p.wrapping_rem(q) },
                Mod { fmod: false } => |p, q| {
                    let r = if q == 0 { 0 } else { p.wrapping_rem(q) };
                    if r != 0 && (r < 0) != (q < 0) { r + q } else { r }
                },
                Equal => |p, q| (p == q) as i64,
                Less => |p, q| (p < q) as i64,
                Greater => |p, q| (p > q) as i64,
                LessOrEqual => |p, q| (p <= q) as i64,
                GreaterOrEqual => |p, q| (p >= q) as i64,
                And => |p, q| (p != 0 && q != 0) as i64,
                Or => |p, q| (p != 0 || q != 0) as i64,
                Xor => |p, q| ((p != 0) != (q != 0)) as i64,
                _ => return None,
            };
            // Computed in i64, then wrapped to the dtype's width by `from_ints`.
            let v: Vec<i64> = ma.iter().zip(&mb).map(|(&i, &j)| f(x[i], y[j])).collect();
            ok(from_ints(out_dtype, shape, &v))
        }
        (Nums::Float(x), Nums::Float(y)) => {
            let f: fn(f64, f64) -> f64 = match kind {
                Add => |p, q| p + q,
                Sub => |p, q| p - q,
                Mul => |p, q| p * q,
                Div => |p, q| p / q,
                Equal => |p, q| (p == q) as u8 as f64,
                Less => |p, q| (p < q) as u8 as f64,
                Greater => |p, q| (p > q) as u8 as f64,
                LessOrEqual => |p, q| (p <= q) as u8 as f64,
                GreaterOrEqual => |p, q| (p >= q) as u8 as f64,
                _ => return None,
            };
            let v: Vec<f64> = ma.iter().zip(&mb).map(|(&i, &j)| f(x[i], y[j])).collect();
            ok(from_floats(out_dtype, shape, &v))
        }
        _ => None,
    }
}

/// A unary elementwise op (the exact ones: sign changes and logic).
pub fn unary(kind: UnaryKind, x: &Tensor) -> Folded {
    let shape = x.shape().to_vec();
    match (kind, nums(x)?) {
        (UnaryKind::Neg, Nums::Int(v)) => {
            ok(from_ints(x.dtype(), shape, &v.iter().map(|a| a.wrapping_neg()).collect::<Vec<_>>()))
        }
        (UnaryKind::Abs, Nums::Int(v)) => {
            ok(from_ints(x.dtype(), shape, &v.iter().map(|a| a.wrapping_abs()).collect::<Vec<_>>()))
        }
        (UnaryKind::Not, Nums::Int(v)) if x.dtype() == DType::Bool => ok(from_ints(
            DType::Bool,
            shape,
            &v.iter().map(|&a| (a == 0) as i64).collect::<Vec<_>>(),
        )),
        (UnaryKind::Neg, Nums::Float(v)) => {
            ok(from_floats(x.dtype(), shape, &v.iter().map(|a| -a).collect::<Vec<_>>()))
        }
        (UnaryKind::Abs, Nums::Float(v)) => {
            ok(from_floats(x.dtype(), shape, &v.iter().map(|a| a.abs()).collect::<Vec<_>>()))
        }
        _ => None,
    }
}

/// `Cast(x)` to `to` between integer, bool and the IEEE float dtypes.
pub fn cast(x: &Tensor, to: DType) -> Folded {
    let shape = x.shape().to_vec();
    match nums(x)? {
        Nums::Int(v) => ok(from_ints(to, shape, &v)),
        // Float to f32 through f64 would round twice only from f64; f64 → f32 is one rounding.
        Nums::Float(v) => ok(from_floats(to, shape, &v)),
    }
}

/// `ConstantOfShape(shape)` filled with `value`.
pub fn constant_of_shape(value: &Tensor, shape: &Tensor) -> Folded {
    let dims: Vec<usize> = shape.to_i64_vec().ok()?.iter().map(|&d| d.max(0) as usize).collect();
    let n: usize = dims.iter().product();
    let from = vec![0usize; n];
    super::walk::pick(value, dims, &from).map(|r| r.map(|t| vec![t]))
}

/// `Range(start, limit, delta)` over integers (float ranges are left to the kernels).
pub fn range(start: &Tensor, limit: &Tensor, delta: &Tensor) -> Folded {
    let (Nums::Int(s), Nums::Int(l), Nums::Int(d)) = (nums(start)?, nums(limit)?, nums(delta)?)
    else {
        return None;
    };
    let (s, l, d) = (*s.first()?, *l.first()?, *d.first()?);
    if d == 0 {
        return Some(Err(OpError::Shape("Range delta is 0".into())));
    }
    let span = l.wrapping_sub(s);
    let len = if span != 0 && (span > 0) == (d > 0) { (span + d - d.signum()) / d } else { 0 };
    let v: Vec<i64> = (0..len.max(0)).map(|i| s.wrapping_add(i.wrapping_mul(d))).collect();
    ok(from_ints(start.dtype(), vec![v.len()], &v))
}
