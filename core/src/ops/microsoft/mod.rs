//! onnxruntime's contrib ops (`com.microsoft`) beyond the layer norms (which
//! live in [`norm`](super::norm)): the Gelu family and BiasAdd
//! ([`activations`]), RotaryEmbedding ([`rotary`]), Attention and
//! MultiHeadAttention ([`attention`]), GroupQueryAttention ([`gqa`]), and the
//! block-quantized MatMulNBits and GatherBlockQuantized ([`quant`]).
//!
//! The semantics are onnxruntime's (its contrib-op documentation and CPU
//! kernels), which the `ort` conformance suite checks case by case.

pub mod activations;
pub mod attention;
pub mod gqa;
pub mod quant;
pub mod rotary;

use super::{Fact, InferInputs, OpRegistry};
use crate::dtype::DType;
use crate::error::OpError;
use crate::graph::Node;

/// Registers every op of this module in the `com.microsoft` domain.
pub fn register_all(r: &mut OpRegistry) {
    activations::register_all(r);
    rotary::register_all(r);
    attention::register_all(r);
    gqa::register_all(r);
    quant::register_all(r);
}

/// Whether a dtype is one of the float types these ops compute on.
pub(crate) fn is_half_or_single(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F16 | DType::BF16)
}

/// Checks that input 0 is f32, f16 or bf16 and returns its fact.
fn float_input<'a>(inputs: &InferInputs<'a>, i: usize) -> Result<&'a Fact, OpError> {
    let x = inputs.get(i)?;
    if !is_half_or_single(x.dtype) {
        return Err(OpError::InputDType {
            index: i,
            dtype: x.dtype,
            expected: "float, float16 or bfloat16".into(),
        });
    }
    Ok(x)
}

/// Checks that input `i`, when present, has dtype `want`.
fn same_dtype(inputs: &InferInputs<'_>, i: usize, want: DType) -> Result<(), OpError> {
    match inputs.opt(i) {
        Some(f) if f.dtype != want => {
            Err(OpError::InputDType { index: i, dtype: f.dtype, expected: want.to_string() })
        }
        _ => Ok(()),
    }
}

fn bad(name: &str, reason: String) -> OpError {
    OpError::BadAttribute { name: name.into(), reason }
}

/// A non-negative int attribute with a default.
fn count_or(n: &Node, name: &str, default: usize) -> Result<usize, OpError> {
    let v = n.attrs.int_or(name, default as i64)?;
    usize::try_from(v).map_err(|_| bad(name, format!("{v} is negative")))
}

/// A positive int attribute that must be given.
fn positive(n: &Node, name: &str) -> Result<usize, OpError> {
    let v = n.attrs.req_int(name)?;
    match usize::try_from(v) {
        Ok(v) if v > 0 => Ok(v),
        _ => Err(bad(name, format!("{v} is not positive"))),
    }
}

/// The `scale` attribute: `None` when absent or 0 (the op's default then applies).
fn scale_attr(n: &Node) -> Result<Option<f32>, OpError> {
    Ok(n.attrs.float("scale")?.filter(|&s| s != 0.0))
}
