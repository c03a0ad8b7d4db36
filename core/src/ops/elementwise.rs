//! Elementwise ops: unary math and activations, binary arithmetic and
//! comparisons with broadcasting, the variadic Max/Min/Sum/Mean, Clip and Where.

pub use super::broadcast::broadcast_fact;
use super::defaults::*;
pub use super::kinds::{BinaryKind, UnaryKind, VariadicKind};
use super::{Fact, InferInputs, Op, OpRegistry, check_inputs};
use crate::dtype::DType;
use crate::error::OpError;
use crate::graph::Node;
use crate::tensor::Tensor;

/// A unary elementwise op.
#[derive(Debug, Clone)]
pub struct Unary {
    /// Which function.
    pub kind: UnaryKind,
}

impl Op for Unary {
    fn fold(&self, i: &[Option<&Tensor>]) -> Option<Result<Vec<Tensor>, OpError>> {
        super::fold::unary(self.kind, (*i.first()?)?)
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        let dtype = match self.kind {
            UnaryKind::IsNaN | UnaryKind::IsInf { .. } => DType::Bool,
            _ => x.dtype,
        };
        Ok(vec![x.with_dtype(dtype)])
    }

    fn in_place(&self) -> Vec<usize> {
        vec![0]
    }
}

fn unary_kind(node: &Node) -> Result<UnaryKind, OpError> {
    use UnaryKind::*;
    let a = &node.attrs;
    Ok(match node.op_type.as_str() {
        "Abs" => Abs,
        "Neg" => Neg,
        "Exp" => Exp,
        "Log" => Log,
        "Sqrt" => Sqrt,
        "Reciprocal" => Reciprocal,
        "Floor" => Floor,
        "Ceil" => Ceil,
        "Round" => Round,
        "Sign" => Sign,
        "Sin" => Sin,
        "Cos" => Cos,
        "Tan" => Tan,
        "Asin" => Asin,
        "Acos" => Acos,
        "Atan" => Atan,
        "Sinh" => Sinh,
        "Cosh" => Cosh,
        "Asinh" => Asinh,
        "Acosh" => Acosh,
        "Atanh" => Atanh,
        "Relu" => Relu,
        "Sigmoid" => Sigmoid,
        "Tanh" => Tanh,
        "Erf" => Erf,
        "Softplus" => Softplus,
        "Softsign" => Softsign,
        "Not" => Not,
        "BitwiseNot" => BitwiseNot,
        "IsNaN" => IsNaN,
        "IsInf" => IsInf {
            detect_positive: a.flag_or("detect_positive", true)?,
            detect_negative: a.flag_or("detect_negative", true)?,
        },
        "LeakyRelu" => LeakyRelu { alpha: a.float_or("alpha", LEAKY_RELU_ALPHA)? },
        "Elu" => Elu { alpha: a.float_or("alpha", ELU_ALPHA)? },
        "Selu" => Selu {
            alpha: a.float_or("alpha", SELU_ALPHA)?,
            gamma: a.float_or("gamma", SELU_GAMMA)?,
        },
        "HardSigmoid" => {
            let alpha = a.float_or("alpha", HARD_SIGMOID_ALPHA)?;
            HardSigmoid { alpha, beta: a.float_or("beta", HARD_SIGMOID_BETA)? }
        }
        "HardSwish" => HardSwish,
        "Celu" => Celu { alpha: a.float_or("alpha", CELU_ALPHA)? },
        "ThresholdedRelu" => {
            ThresholdedRelu { alpha: a.float_or("alpha", THRESHOLDED_RELU_ALPHA)? }
        }
        "Mish" => Mish,
        "Gelu" => {
            let approximate = a.string_or("approximate", "none".into())?;
            match approximate.as_str() {
                "none" => Gelu { tanh_approximation: false },
                "tanh" => Gelu { tanh_approximation: true },
                other => {
                    return Err(OpError::BadAttribute {
                        name: "approximate".into(),
                        reason: format!("'{other}' is neither 'none' nor 'tanh'"),
                    });
                }
            }
        }
        "Shrink" => Shrink {
            bias: a.float_or("bias", SHRINK_BIAS)?,
            lambd: a.float_or("lambd", SHRINK_LAMBD)?,
        },
        other => return Err(OpError::Invalid(format!("{other} is not a unary op"))),
    })
}

/// A binary elementwise op with multidirectional broadcasting.
#[derive(Debug, Clone)]
pub struct Binary {
    /// Which function.
    pub kind: BinaryKind,
}

impl Op for Binary {
    fn fold(&self, i: &[Option<&Tensor>]) -> Option<Result<Vec<Tensor>, OpError>> {
        super::fold::binary(self.kind, (*i.first()?)?, (*i.get(1)?)?)
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let (a, b) = (inputs.get(0)?, inputs.get(1)?);
        if a.dtype != b.dtype && self.kind != BinaryKind::Pow {
            return Err(OpError::InputDType {
                index: 1,
                dtype: b.dtype,
                expected: format!("{} (the dtype of input 0)", a.dtype),
            });
        }
        let dtype = if self.kind.is_predicate() { DType::Bool } else { a.dtype };
        Ok(vec![broadcast_fact(dtype, &[a, b])?])
    }

    fn in_place(&self) -> Vec<usize> {
        vec![0, 1]
    }

    fn runs_on_host(&self, inputs: &[Option<Fact>]) -> bool {
        self.kind == BinaryKind::Equal
            && inputs.first().and_then(Option::as_ref).is_some_and(|f| f.dtype == DType::String)
    }

    fn eval_host(
        &self,
        inputs: &[Option<crate::tensor::Tensor>],
    ) -> Result<Vec<crate::tensor::Tensor>, OpError> {
        super::strings::strings_equal(inputs)
    }
}

fn binary_kind(node: &Node) -> Result<BinaryKind, OpError> {
    use BinaryKind::*;
    Ok(match node.op_type.as_str() {
        "Add" => Add,
        "Sub" => Sub,
        "Mul" => Mul,
        "Div" => Div,
        "Pow" => Pow,
        "Mod" => Mod { fmod: node.attrs.flag_or("fmod", false)? },
        "And" => And,
        "Or" => Or,
        "Xor" => Xor,
        "Equal" => Equal,
        "Less" => Less,
        "Greater" => Greater,
        "LessOrEqual" => LessOrEqual,
        "GreaterOrEqual" => GreaterOrEqual,
        "BitShift" => match node.attrs.req_string("direction")?.as_str() {
            "LEFT" => BitShiftLeft,
            "RIGHT" => BitShiftRight,
            other => {
                return Err(OpError::BadAttribute {
                    name: "direction".into(),
                    reason: format!("'{other}' is neither LEFT nor RIGHT"),
                });
            }
        },
        "BitwiseAnd" => BitwiseAnd,
        "BitwiseOr" => BitwiseOr,
        "BitwiseXor" => BitwiseXor,
        "PRelu" => PRelu,
        other => return Err(OpError::Invalid(format!("{other} is not a binary op"))),
    })
}

/// `Max`, `Min`, `Sum`, `Mean` over any number of broadcast inputs.
#[derive(Debug, Clone)]
pub struct Variadic {
    /// Which reduction.
    pub kind: VariadicKind,
    /// The number of input slots.
    pub arity: usize,
}

impl Op for Variadic {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let facts: Vec<&Fact> = inputs.present().collect();
        let first = facts.first().ok_or(OpError::MissingInput(0))?;
        Ok(vec![broadcast_fact(first.dtype, &facts)?])
    }

    fn in_place(&self) -> Vec<usize> {
        (0..self.arity).collect()
    }
}

/// `Clip`: limits from attributes before opset 11, from optional inputs 1 and 2 after.
#[derive(Debug, Clone)]
pub struct Clip {
    /// Lower bound from the `min` attribute (opset < 11).
    pub min: Option<f32>,
    /// Upper bound from the `max` attribute (opset < 11).
    pub max: Option<f32>,
}

impl Op for Clip {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        Ok(vec![inputs.get(0)?.with_dtype(inputs.get(0)?.dtype)])
    }

    /// The bounds are scalars every backend reads on the host.
    fn value_inputs(&self) -> Vec<usize> {
        if self.min.is_none() { vec![1, 2] } else { vec![] }
    }

    fn in_place(&self) -> Vec<usize> {
        vec![0]
    }
}

/// `Where(condition, x, y)` with broadcasting.
#[derive(Debug, Clone)]
pub struct Where;

impl Op for Where {
    fn fold(&self, i: &[Option<&Tensor>]) -> Option<Result<Vec<Tensor>, OpError>> {
        super::fold::where_((*i.first()?)?, (*i.get(1)?)?, (*i.get(2)?)?)
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let (c, x, y) = (inputs.get(0)?, inputs.get(1)?, inputs.get(2)?);
        if c.dtype != DType::Bool {
            return Err(OpError::InputDType { index: 0, dtype: c.dtype, expected: "bool".into() });
        }
        Ok(vec![broadcast_fact(x.dtype, &[c, x, y])?])
    }

    fn in_place(&self) -> Vec<usize> {
        vec![1, 2]
    }
}

/// The unary elementwise ops, by ONNX name.
pub const UNARY_OPS: &[&str] = &[
    "Abs",
    "Neg",
    "Exp",
    "Log",
    "Sqrt",
    "Reciprocal",
    "Floor",
    "Ceil",
    "Round",
    "Sign",
    "Sin",
    "Cos",
    "Tan",
    "Asin",
    "Acos",
    "Atan",
    "Sinh",
    "Cosh",
    "Asinh",
    "Acosh",
    "Atanh",
    "Relu",
    "Sigmoid",
    "Tanh",
    "Erf",
    "Softplus",
    "Softsign",
    "Not",
    "BitwiseNot",
    "IsNaN",
    "IsInf",
    "LeakyRelu",
    "Elu",
    "Selu",
    "HardSigmoid",
    "HardSwish",
    "Celu",
    "ThresholdedRelu",
    "Mish",
    "Gelu",
    "Shrink",
];

/// The binary elementwise ops, by ONNX name.
pub const BINARY_OPS: &[&str] = &[
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Pow",
    "Mod",
    "And",
    "Or",
    "Xor",
    "Equal",
    "Less",
    "Greater",
    "LessOrEqual",
    "GreaterOrEqual",
    "BitShift",
    "BitwiseAnd",
    "BitwiseOr",
    "BitwiseXor",
    "PRelu",
];

/// Registers the elementwise family.
pub fn register_all(r: &mut OpRegistry) {
    for op in UNARY_OPS {
        r.register(op, |n| {
            check_inputs(n, 1, 1)?;
            Ok(Box::new(Unary { kind: unary_kind(n)? }))
        });
    }
    for op in BINARY_OPS {
        r.register(op, |n| {
            check_inputs(n, 2, 2)?;
            Ok(Box::new(Binary { kind: binary_kind(n)? }))
        });
    }
    for (op, kind) in [
        ("Max", VariadicKind::Max),
        ("Min", VariadicKind::Min),
        ("Sum", VariadicKind::Sum),
        ("Mean", VariadicKind::Mean),
    ] {
        r.register(op, move |n| {
            check_inputs(n, 1, usize::MAX)?;
            Ok(Box::new(Variadic { kind, arity: n.inputs.len() }))
        });
    }
    r.register("Clip", |n| {
        check_inputs(n, 1, 3)?;
        Ok(Box::new(if n.opset < 11 {
            Clip {
                min: Some(n.attrs.float_or("min", f32::MIN)?),
                max: Some(n.attrs.float_or("max", f32::MAX)?),
            }
        } else {
            Clip { min: None, max: None }
        }))
    });
    r.register("Where", |n| {
        check_inputs(n, 3, 3)?;
        Ok(Box::new(Where))
    });
}
