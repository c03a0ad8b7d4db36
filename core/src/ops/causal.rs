//! `CausalConvWithState` (opset 27): a causal depthwise 1-D convolution over
//! `[batch, channels, length]` that carries its last `k - 1` input positions
//! from one call to the next (the decode-time form of Mamba's and Gated
//! DeltaNet's short convolution), with an optional fused SiLU.

use super::{Fact, InferInputs, Op, OpRegistry, check_inputs};
use crate::dtype::DType;
use crate::error::OpError;
use crate::shape::{Dim, Shape};

/// `(output, present_state) = CausalConvWithState(input, weight, bias?, past_state?)`.
#[derive(Debug, Clone)]
pub struct CausalConvWithState {
    /// Apply `y · sigmoid(y)` to the output (`activation` = `silu` or `swish`).
    pub silu: bool,
}

impl Op for CausalConvWithState {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        if !matches!(x.dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16) {
            return Err(OpError::InputDType {
                index: 0,
                dtype: x.dtype,
                expected: "a float type".into(),
            });
        }
        let w = inputs.get(1)?;
        for (i, f) in [(0, x), (1, w)] {
            if let Some(r) = f.rank().filter(|&r| r != 3) {
                return Err(OpError::Shape(format!("input {i} must have rank 3, not {r}")));
            }
        }
        let state_len = match w.dim(2) {
            Dim::Known(0) => return Err(OpError::Shape("the kernel is empty".into())),
            Dim::Known(k) => Dim::Known(k - 1),
            _ => Dim::Unknown,
        };
        let state = match &x.shape {
            Some(_) => Fact::new(x.dtype, Shape(vec![x.dim(0), x.dim(1), state_len])),
            None => Fact::ranked(x.dtype, 3),
        };
        Ok(vec![x.with_dtype(x.dtype), state])
    }
}

/// Registers the op.
pub fn register_all(r: &mut OpRegistry) {
    r.register("CausalConvWithState", |n| {
        check_inputs(n, 2, 4)?;
        let activation = n.attrs.string_or("activation", "none".into())?;
        let silu = match activation.as_str() {
            "silu" | "swish" => true,
            "none" => false,
            other => {
                return Err(OpError::BadAttribute {
                    name: "activation".into(),
                    reason: format!("'{other}' is not one of silu, swish, none"),
                });
            }
        };
        Ok(Box::new(CausalConvWithState { silu }))
    });
}
