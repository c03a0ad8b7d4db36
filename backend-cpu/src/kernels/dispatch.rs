//! Dtype dispatch: bind a Rust element type to a runtime [`DType`] and run a body with it.

use half::{bf16, f16};

/// Float math beyond `num_traits::Float` (erf), computed in f32 for the half types.
pub trait FloatExt: num_traits::Float + bytemuck::Pod + Send + Sync + 'static {
    /// The error function.
    fn erf(self) -> Self;
    /// From an f64 constant.
    fn c(v: f64) -> Self;
}

impl FloatExt for f32 {
    fn erf(self) -> Self {
        libm::erff(self)
    }
    fn c(v: f64) -> Self {
        v as f32
    }
}

impl FloatExt for f64 {
    fn erf(self) -> Self {
        libm::erf(self)
    }
    fn c(v: f64) -> Self {
        v
    }
}

impl FloatExt for f16 {
    fn erf(self) -> Self {
        f16::from_f32(libm::erff(self.to_f32()))
    }
    fn c(v: f64) -> Self {
        f16::from_f64(v)
    }
}

impl FloatExt for bf16 {
    fn erf(self) -> Self {
        bf16::from_f32(libm::erff(self.to_f32()))
    }
    fn c(v: f64) -> Self {
        bf16::from_f64(v)
    }
}

/// Runs `$body` with `$T` bound to the float type of `$dtype`, or evaluates `$else`.
macro_rules! floats {
    ($dtype:expr, $T:ident => $body:expr, else $else:expr) => {
        match $dtype {
            onyx_core::dtype::DType::F32 => {
                type $T = f32;
                $body
            }
            onyx_core::dtype::DType::F64 => {
                type $T = f64;
                $body
            }
            onyx_core::dtype::DType::F16 => {
                type $T = half::f16;
                $body
            }
            onyx_core::dtype::DType::BF16 => {
                type $T = half::bf16;
                $body
            }
            _ => $else,
        }
    };
}

/// Runs `$body` with `$T` bound to the integer type of `$dtype`, or evaluates `$else`.
macro_rules! ints {
    ($dtype:expr, $T:ident => $body:expr, else $else:expr) => {
        match $dtype {
            onyx_core::dtype::DType::I8 => {
                type $T = i8;
                $body
            }
            onyx_core::dtype::DType::I16 => {
                type $T = i16;
                $body
            }
            onyx_core::dtype::DType::I32 => {
                type $T = i32;
                $body
            }
            onyx_core::dtype::DType::I64 => {
                type $T = i64;
                $body
            }
            onyx_core::dtype::DType::U8 => {
                type $T = u8;
                $body
            }
            onyx_core::dtype::DType::U16 => {
                type $T = u16;
                $body
            }
            onyx_core::dtype::DType::U32 => {
                type $T = u32;
                $body
            }
            onyx_core::dtype::DType::U64 => {
                type $T = u64;
                $body
            }
            _ => $else,
        }
    };
}

/// Runs `$body` with `$T` bound to the type of any real numeric `$dtype`, or evaluates `$else`.
macro_rules! numeric {
    ($dtype:expr, $T:ident => $body:expr, else $else:expr) => {
        $crate::kernels::dispatch::floats!($dtype, $T => $body,
            else $crate::kernels::dispatch::ints!($dtype, $T => $body, else $else))
    };
}

/// Runs `$body` with `$T` bound to an unsigned type of the dtype's byte width
/// (data movement does not care what the bits mean), or evaluates `$else`.
macro_rules! by_width {
    ($dtype:expr, $T:ident => $body:expr, else $else:expr) => {
        match ($dtype.bits(), $dtype.is_byte_aligned()) {
            (8, true) => {
                type $T = u8;
                $body
            }
            (16, true) => {
                type $T = u16;
                $body
            }
            (32, true) => {
                type $T = u32;
                $body
            }
            (64, true) => {
                type $T = u64;
                $body
            }
            (128, true) => {
                type $T = u128;
                $body
            }
            _ => $else,
        }
    };
}

pub(crate) use {by_width, floats, ints, numeric};

/// Conversion of every numeric element type through f64 (Pow, Mean, casts of small values).
pub trait AsF64: Copy {
    /// Widens to f64.
    fn to_f64(self) -> f64;
    /// Narrows from f64 (saturating and truncating like Rust's `as` for integers).
    fn from_f64(v: f64) -> Self;
}

macro_rules! as_f64 {
    ($($t:ty),*) => { $(impl AsF64 for $t {
        fn to_f64(self) -> f64 { self as f64 }
        fn from_f64(v: f64) -> Self { v as $t }
    })* };
}
as_f64!(f32, f64, i8, i16, i32, i64, u8, u16, u32, u64);

impl AsF64 for f16 {
    fn to_f64(self) -> f64 {
        f16::to_f64(self)
    }
    fn from_f64(v: f64) -> Self {
        f16::from_f64(v)
    }
}

impl AsF64 for bf16 {
    fn to_f64(self) -> f64 {
        bf16::to_f64(self)
    }
    fn from_f64(v: f64) -> Self {
        bf16::from_f64(v)
    }
}
