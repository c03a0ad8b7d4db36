//! Checks the contrib ops share: float inputs, dtypes, counts, scale.

use crate::dtype::DType;
use crate::error::OpError;
use crate::graph::Node;
use crate::ops::{Fact, InferInputs};

/// Whether a dtype is one of the float types these ops compute on.
pub(crate) fn is_half_or_single(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F16 | DType::BF16)
}

/// Checks that input 0 is f32, f16 or bf16 and returns its fact.
pub(super) fn float_input<'a>(inputs: &InferInputs<'a>, i: usize) -> Result<&'a Fact, OpError> {
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
pub(super) fn same_dtype(inputs: &InferInputs<'_>, i: usize, want: DType) -> Result<(), OpError> {
    match inputs.opt(i) {
        Some(f) if f.dtype != want => {
            Err(OpError::InputDType { index: i, dtype: f.dtype, expected: want.to_string() })
        }
        _ => Ok(()),
    }
}

pub(super) fn bad(name: &str, reason: String) -> OpError {
    OpError::BadAttribute { name: name.into(), reason }
}

/// A non-negative int attribute with a default.
pub(super) fn count_or(n: &Node, name: &str, default: usize) -> Result<usize, OpError> {
    let v = n.attrs.int_or(name, default as i64)?;
    usize::try_from(v).map_err(|_| bad(name, format!("{v} is negative")))
}

/// A positive int attribute that must be given.
pub(super) fn positive(n: &Node, name: &str) -> Result<usize, OpError> {
    let v = n.attrs.req_int(name)?;
    match usize::try_from(v) {
        Ok(v) if v > 0 => Ok(v),
        _ => Err(bad(name, format!("{v} is not positive"))),
    }
}

/// The `scale` attribute: `None` when absent or 0 (the op's default then applies).
pub(super) fn scale_attr(n: &Node) -> Result<Option<f32>, OpError> {
    Ok(n.attrs.float("scale")?.filter(|&s| s != 0.0))
}
