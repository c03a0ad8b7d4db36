//! Kernel codes: the numbers by which a backend tells one WGSL or CUDA kernel
//! which function to compute (a pipeline override on wgpu, a uniform argument
//! on CUDA). These tables are their one source: `tools/codegen` writes them
//! into `shaders/wgsl/codes.wgsl` and `kernels/cuda/codes.cuh`, the shaders
//! and kernels switch on the generated names, and the backends pass
//! [`UnaryCode::code`] and friends. A test in `tools/codegen` fails when the
//! committed files are stale.

use super::conv::PoolKind;
use super::kinds::{BinaryKind, UnaryKind, VariadicKind};
use super::nn::SoftmaxKind;
use super::reduce::{ArgReduce, ReduceKind};
use crate::dtype::DType;

/// One family of codes, as the generator writes it.
#[derive(Clone, Copy, Debug)]
pub struct CodeFamily {
    /// The prefix of the generated names (`UNARY` gives `UNARY_ABS`).
    pub prefix: &'static str,
    /// What the family numbers.
    pub doc: &'static str,
    /// Each code's variant name (CamelCase) and value.
    pub codes: &'static [(&'static str, u32)],
}

macro_rules! codes {
    ($(#[$doc:meta])* $name:ident, $prefix:literal, $family_doc:literal {
        $($(#[$vdoc:meta])* $var:ident = $val:literal,)*
    }) => {
        $(#[$doc])*
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
        #[repr(u32)]
        pub enum $name {
            $(
                #[doc = concat!("`", stringify!($var), "` = ", stringify!($val), ".")]
                $(#[$vdoc])*
                $var = $val,
            )*
        }

        impl $name {
            /// The family, for the generator.
            pub const FAMILY: CodeFamily = CodeFamily {
                prefix: $prefix,
                doc: $family_doc,
                codes: &[$((stringify!($var), $val),)*],
            };

            /// The number the kernel switches on.
            pub fn code(self) -> u32 {
                self as u32
            }
        }
    };
}

codes! {
    /// The functions of the float unary kernels (`unary_float`).
    UnaryCode, "UNARY", "Unary functions on float tensors (unary_float)" {
        Abs = 0, Neg = 1, Exp = 2, Log = 3, Sqrt = 4, Reciprocal = 5, Floor = 6, Ceil = 7,
        Round = 8, Sign = 9, Sin = 10, Cos = 11, Tan = 12, Asin = 13, Acos = 14, Atan = 15,
        Sinh = 16, Cosh = 17, Asinh = 18, Acosh = 19, Atanh = 20, Relu = 21, Sigmoid = 22,
        Tanh = 23, Erf = 24, Softplus = 25, Softsign = 26, LeakyRelu = 27, Elu = 28, Selu = 29,
        HardSigmoid = 30, HardSwish = 31, Celu = 32, ThresholdedRelu = 33, Mish = 34,
        Gelu = 35, GeluTanh = 36, Shrink = 37,
        /// `min(max(x, alpha), beta)`.
        Clip = 38,
        /// `x * alpha` (the mean of a variadic Mean).
        Scale = 39,
        /// Boolean outputs from here on.
        IsNan = 100,
        IsInf = 101,
    }
}

codes! {
    /// The functions of the integer and bool unary kernels (`unary_int`).
    UnaryIntCode, "UNARY_INT", "Unary functions on integer and bool tensors (unary_int)" {
        Abs = 0, Neg = 1, Sign = 2, Relu = 3, BitwiseNot = 4, Not = 5,
    }
}

codes! {
    /// The functions of the binary kernels, on every dtype.
    BinaryCode, "BINARY", "Binary functions; 100 and above give bool (binary_*, compare_*)" {
        Add = 0, Sub = 1, Mul = 2, Div = 3, Pow = 4,
        /// C `fmod`: the sign of the dividend.
        Fmod = 5,
        PRelu = 6, Max = 7, Min = 8,
        /// Python's `%`: the sign of the divisor.
        Mod = 9,
        BitShiftLeft = 10, BitShiftRight = 11, BitwiseAnd = 12, BitwiseOr = 13, BitwiseXor = 14,
        And = 20, Or = 21, Xor = 22,
        /// `Gelu(a + b)` (the BiasGelu contrib op).
        BiasGelu = 30,
        Equal = 100, Less = 101, Greater = 102, LessOrEqual = 103, GreaterOrEqual = 104,
    }
}

codes! {
    /// The reductions of the reduce kernels (`reduce`, `arg_reduce`).
    ReduceCode, "REDUCE", "Reductions (reduce); 20 and above give indices (ArgMax, ArgMin)" {
        Sum = 0, Mean = 1, Max = 2, Min = 3, Prod = 4, L1 = 5, L2 = 6, LogSum = 7,
        LogSumExp = 8, SumSquare = 9,
        ArgMax = 20, ArgMin = 21,
    }
}

codes! {
    /// The functions of the softmax kernels.
    SoftmaxCode, "SOFTMAX", "Softmax family along an axis (softmax)" {
        Softmax = 0, LogSoftmax = 1, Hardmax = 2,
    }
}

codes! {
    /// The windowed pools of the pool kernels.
    PoolCode, "POOL", "Windowed pooling (pool)" {
        Max = 0, Average = 1,
    }
}

/// Every family, in the order the generated files list them.
pub const FAMILIES: &[CodeFamily] = &[
    UnaryCode::FAMILY,
    UnaryIntCode::FAMILY,
    BinaryCode::FAMILY,
    ReduceCode::FAMILY,
    SoftmaxCode::FAMILY,
    PoolCode::FAMILY,
];

impl UnaryKind {
    /// The float kernel's code and its `(alpha, beta, gamma)` parameters;
    /// `None` for the functions that have no float form (`Not`, `BitwiseNot`).
    pub fn float_code(self) -> Option<(UnaryCode, [f32; 3])> {
        use UnaryKind::*;
        let z = [0.0; 3];
        Some(match self {
            Abs => (UnaryCode::Abs, z),
            Neg => (UnaryCode::Neg, z),
            Exp => (UnaryCode::Exp, z),
            Log => (UnaryCode::Log, z),
            Sqrt => (UnaryCode::Sqrt, z),
            Reciprocal => (UnaryCode::Reciprocal, z),
            Floor => (UnaryCode::Floor, z),
            Ceil => (UnaryCode::Ceil, z),
            Round => (UnaryCode::Round, z),
            Sign => (UnaryCode::Sign, z),
            Sin => (UnaryCode::Sin, z),
            Cos => (UnaryCode::Cos, z),
            Tan => (UnaryCode::Tan, z),
            Asin => (UnaryCode::Asin, z),
            Acos => (UnaryCode::Acos, z),
            Atan => (UnaryCode::Atan, z),
            Sinh => (UnaryCode::Sinh, z),
            Cosh => (UnaryCode::Cosh, z),
            Asinh => (UnaryCode::Asinh, z),
            Acosh => (UnaryCode::Acosh, z),
            Atanh => (UnaryCode::Atanh, z),
            Relu => (UnaryCode::Relu, z),
            Sigmoid => (UnaryCode::Sigmoid, z),
            Tanh => (UnaryCode::Tanh, z),
            Erf => (UnaryCode::Erf, z),
            Softplus => (UnaryCode::Softplus, z),
            Softsign => (UnaryCode::Softsign, z),
            LeakyRelu { alpha } => (UnaryCode::LeakyRelu, [alpha, 0.0, 0.0]),
            Elu { alpha } => (UnaryCode::Elu, [alpha, 0.0, 0.0]),
            Selu { alpha, gamma } => (UnaryCode::Selu, [alpha, 0.0, gamma]),
            HardSigmoid { alpha, beta } => (UnaryCode::HardSigmoid, [alpha, beta, 0.0]),
            HardSwish => (UnaryCode::HardSwish, z),
            Celu { alpha } => (UnaryCode::Celu, [alpha, 0.0, 0.0]),
            ThresholdedRelu { alpha } => (UnaryCode::ThresholdedRelu, [alpha, 0.0, 0.0]),
            Mish => (UnaryCode::Mish, z),
            Gelu { tanh_approximation: false } => (UnaryCode::Gelu, z),
            Gelu { tanh_approximation: true } => (UnaryCode::GeluTanh, z),
            Shrink { bias, lambd } => (UnaryCode::Shrink, [bias, lambd, 0.0]),
            IsNaN => (UnaryCode::IsNan, z),
            IsInf { detect_positive, detect_negative } => {
                let flag = |b: bool| if b { 1.0 } else { 0.0 };
                (UnaryCode::IsInf, [flag(detect_positive), flag(detect_negative), 0.0])
            }
            Not | BitwiseNot => return None,
        })
    }

    /// The integer / bool kernel's code for an input of `dtype`; `None` when
    /// the function is not defined there.
    pub fn int_code(self, dtype: DType) -> Option<UnaryIntCode> {
        let signed = dtype.is_signed_int();
        let bool = dtype == DType::Bool;
        Some(match self {
            UnaryKind::Abs if !bool => UnaryIntCode::Abs,
            UnaryKind::Neg if signed => UnaryIntCode::Neg,
            UnaryKind::Sign if !bool => UnaryIntCode::Sign,
            UnaryKind::Relu if signed => UnaryIntCode::Relu,
            UnaryKind::BitwiseNot if !bool => UnaryIntCode::BitwiseNot,
            UnaryKind::Not if bool => UnaryIntCode::Not,
            _ => return None,
        })
    }
}

impl BinaryKind {
    /// The binary kernels' code.
    pub fn code(self) -> BinaryCode {
        use BinaryKind::*;
        match self {
            Add => BinaryCode::Add,
            Sub => BinaryCode::Sub,
            Mul => BinaryCode::Mul,
            Div => BinaryCode::Div,
            Pow => BinaryCode::Pow,
            Mod { fmod: true } => BinaryCode::Fmod,
            Mod { fmod: false } => BinaryCode::Mod,
            And => BinaryCode::And,
            Or => BinaryCode::Or,
            Xor => BinaryCode::Xor,
            Equal => BinaryCode::Equal,
            Less => BinaryCode::Less,
            Greater => BinaryCode::Greater,
            LessOrEqual => BinaryCode::LessOrEqual,
            GreaterOrEqual => BinaryCode::GreaterOrEqual,
            BitShiftLeft => BinaryCode::BitShiftLeft,
            BitShiftRight => BinaryCode::BitShiftRight,
            BitwiseAnd => BinaryCode::BitwiseAnd,
            BitwiseOr => BinaryCode::BitwiseOr,
            BitwiseXor => BinaryCode::BitwiseXor,
            PRelu => BinaryCode::PRelu,
        }
    }
}

impl VariadicKind {
    /// The binary code of one step of the fold over the inputs (Mean is a
    /// sum, then [`UnaryCode::Scale`]).
    pub fn step_code(self) -> BinaryCode {
        match self {
            VariadicKind::Max => BinaryCode::Max,
            VariadicKind::Min => BinaryCode::Min,
            VariadicKind::Sum | VariadicKind::Mean => BinaryCode::Add,
        }
    }
}

impl ReduceKind {
    /// The reduce kernels' code.
    pub fn code(self) -> ReduceCode {
        match self {
            ReduceKind::Sum => ReduceCode::Sum,
            ReduceKind::Mean => ReduceCode::Mean,
            ReduceKind::Max => ReduceCode::Max,
            ReduceKind::Min => ReduceCode::Min,
            ReduceKind::Prod => ReduceCode::Prod,
            ReduceKind::L1 => ReduceCode::L1,
            ReduceKind::L2 => ReduceCode::L2,
            ReduceKind::LogSum => ReduceCode::LogSum,
            ReduceKind::LogSumExp => ReduceCode::LogSumExp,
            ReduceKind::SumSquare => ReduceCode::SumSquare,
        }
    }
}

impl ArgReduce {
    /// `ArgMax` or `ArgMin`'s code.
    pub fn code(&self) -> ReduceCode {
        if self.max { ReduceCode::ArgMax } else { ReduceCode::ArgMin }
    }
}

impl SoftmaxKind {
    /// The softmax kernels' code.
    pub fn code(self) -> SoftmaxCode {
        match self {
            SoftmaxKind::Softmax => SoftmaxCode::Softmax,
            SoftmaxKind::LogSoftmax => SoftmaxCode::LogSoftmax,
            SoftmaxKind::Hardmax => SoftmaxCode::Hardmax,
        }
    }
}

impl PoolKind {
    /// The pool kernels' code.
    pub fn code(self) -> PoolCode {
        match self {
            PoolKind::Max => PoolCode::Max,
            PoolKind::Average { .. } => PoolCode::Average,
        }
    }
}
