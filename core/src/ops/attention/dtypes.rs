//! The dtype checks the attention ops share.

use crate::dtype::DType;
use crate::error::OpError;
use crate::ops::InferInputs;

/// Checks that input `i` (when present) has one of the given dtypes.
pub(super) fn expect_dtype(
    inputs: &InferInputs<'_>,
    i: usize,
    ok: &[DType],
) -> Result<(), OpError> {
    match inputs.opt(i) {
        Some(f) if !ok.contains(&f.dtype) => Err(OpError::InputDType {
            index: i,
            dtype: f.dtype,
            expected: ok.iter().map(ToString::to_string).collect::<Vec<_>>().join(" or "),
        }),
        _ => Ok(()),
    }
}

pub(super) fn is_float_dtype(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
}
