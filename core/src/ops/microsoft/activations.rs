//! The Gelu family and BiasAdd: `Gelu` (erf form), `FastGelu` (tanh
//! approximation, optional bias added first), `BiasGelu` (`Gelu(A + B)`),
//! `QuickGelu` (`x · sigmoid(alpha · x)`) and `BiasAdd` (`X + bias + skip`).

use super::common::{float_input, same_dtype};
use crate::error::OpError;
use crate::graph::MICROSOFT_DOMAIN;
use crate::ops::{Fact, InferInputs, Op, OpRegistry, check_inputs};

/// Which activation a [`BiasActivation`] computes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Activation {
    /// `0.5 · x · (1 + erf(x / √2))` of `x (+ bias)`.
    Gelu,
    /// `0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 · x³)))` of `x (+ bias)`.
    FastGelu,
    /// `x · sigmoid(alpha · x)`.
    QuickGelu {
        /// The sigmoid's slope (1.702 by default).
        alpha: f32,
    },
    /// No activation: `x + bias + skip`.
    Identity,
}

/// An activation of `input + bias` (bias along the last axis, optional) plus,
/// for `BiasAdd`, a `skip` of the input's shape (input 2).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BiasActivation {
    /// What is applied to the sum.
    pub activation: Activation,
}

impl BiasActivation {
    /// Checks the bias (`[last dim]`) and skip (the input's shape) against the input.
    ///
    /// # Errors
    /// [`OpError::Shape`] when they do not fit.
    pub fn check(
        x: &[usize],
        bias: Option<&[usize]>,
        skip: Option<&[usize]>,
    ) -> Result<(), OpError> {
        let last = x.last().copied();
        if let Some(b) = bias {
            if x.is_empty() || b != [last.unwrap_or(0)] {
                return Err(OpError::Shape(format!(
                    "bias {b:?} does not match the last dim of input {x:?}"
                )));
            }
        }
        if let Some(s) = skip {
            if s != x {
                return Err(OpError::Shape(format!("skip {s:?} differs from input {x:?}")));
            }
        }
        Ok(())
    }
}

impl Op for BiasActivation {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = float_input(inputs, 0)?;
        for i in 1..inputs.len() {
            same_dtype(inputs, i, x.dtype)?;
        }
        if let Some(dx) = x.dims() {
            let dims = |i: usize| inputs.opt(i).and_then(Fact::dims);
            Self::check(&dx, dims(1).as_deref(), dims(2).as_deref())?;
        }
        Ok(vec![x.with_dtype(x.dtype)])
    }

    fn in_place(&self) -> Vec<usize> {
        vec![0]
    }
}

/// Registers the family in `com.microsoft`.
pub fn register_all(r: &mut OpRegistry) {
    let plain = |a: Activation, min: usize, max: usize| {
        move |n: &crate::graph::Node| -> Result<Box<dyn Op>, OpError> {
            check_inputs(n, min, max)?;
            Ok(Box::new(BiasActivation { activation: a }))
        }
    };
    r.register_in(MICROSOFT_DOMAIN, "Gelu", plain(Activation::Gelu, 1, 1));
    r.register_in(MICROSOFT_DOMAIN, "FastGelu", plain(Activation::FastGelu, 1, 2));
    r.register_in(MICROSOFT_DOMAIN, "BiasGelu", plain(Activation::Gelu, 2, 2));
    r.register_in(MICROSOFT_DOMAIN, "BiasAdd", plain(Activation::Identity, 3, 3));
    r.register_in(MICROSOFT_DOMAIN, "QuickGelu", |n| {
        check_inputs(n, 1, 1)?;
        let alpha = n.attrs.float_or("alpha", 1.702)?;
        Ok(Box::new(BiasActivation { activation: Activation::QuickGelu { alpha } }))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bias_must_match_the_last_dim_and_skip_the_whole_shape() {
        assert!(BiasActivation::check(&[2, 3, 8], Some(&[8]), Some(&[2, 3, 8])).is_ok());
        assert!(BiasActivation::check(&[2, 3, 8], Some(&[3]), None).is_err());
        assert!(BiasActivation::check(&[2, 3, 8], None, Some(&[3, 8])).is_err());
    }
}
