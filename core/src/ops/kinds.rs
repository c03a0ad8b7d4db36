//! The kinds of elementwise ops: which function a `Unary`, `Binary` or
//! `Variadic` op computes. Backends dispatch on them, and host folds compute
//! them, without the op families themselves.

/// The unary functions, with their attribute parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
#[allow(missing_docs)] // each variant is the ONNX op of the same name.
pub enum UnaryKind {
    Abs,
    Neg,
    Exp,
    Log,
    Sqrt,
    Reciprocal,
    Floor,
    Ceil,
    Round,
    Sign,
    Sin,
    Cos,
    Tan,
    Asin,
    Acos,
    Atan,
    Sinh,
    Cosh,
    Asinh,
    Acosh,
    Atanh,
    Relu,
    Sigmoid,
    Tanh,
    Erf,
    Softplus,
    Softsign,
    Not,
    BitwiseNot,
    IsNaN,
    IsInf { detect_positive: bool, detect_negative: bool },
    LeakyRelu { alpha: f32 },
    Elu { alpha: f32 },
    Selu { alpha: f32, gamma: f32 },
    HardSigmoid { alpha: f32, beta: f32 },
    HardSwish,
    Celu { alpha: f32 },
    ThresholdedRelu { alpha: f32 },
    Mish,
    Gelu { tanh_approximation: bool },
    Shrink { bias: f32, lambd: f32 },
}

/// The binary functions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)] // each variant is the ONNX op of the same name.
pub enum BinaryKind {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    /// `Mod` with `fmod = 0` (sign of the divisor) or `1` (C fmod).
    Mod {
        fmod: bool,
    },
    And,
    Or,
    Xor,
    Equal,
    Less,
    Greater,
    LessOrEqual,
    GreaterOrEqual,
    BitShiftLeft,
    BitShiftRight,
    BitwiseAnd,
    BitwiseOr,
    BitwiseXor,
    PRelu,
}

impl BinaryKind {
    /// Whether the result is boolean.
    pub fn is_predicate(self) -> bool {
        use BinaryKind::*;
        matches!(self, And | Or | Xor | Equal | Less | Greater | LessOrEqual | GreaterOrEqual)
    }
}

/// The variadic reductions across inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)] // each variant is the ONNX op of the same name.
pub enum VariadicKind {
    Max,
    Min,
    Sum,
    Mean,
}
