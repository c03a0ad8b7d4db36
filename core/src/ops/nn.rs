//! Neural-network ops: the softmax family, BatchNormalization and Dropout (inference).

use super::defaults;
use super::{Fact, InferInputs, Op, OpRegistry, check_inputs};
use crate::dtype::DType;
use crate::error::OpError;
use crate::shape::normalize_axis;

/// Which softmax-like function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SoftmaxKind {
    /// `exp(x) / sum(exp(x))`.
    Softmax,
    /// `log(softmax(x))`.
    LogSoftmax,
    /// One-hot of the first maximum.
    Hardmax,
}

/// `Softmax`, `LogSoftmax`, `Hardmax`.
#[derive(Debug, Clone)]
pub struct Softmax {
    /// Which function.
    pub kind: SoftmaxKind,
    /// The axis (possibly negative).
    pub axis: i64,
    /// Before opset 13 the input is coerced to 2-D at `axis` and the function
    /// runs over the whole trailing block; from 13 on it runs over one axis.
    pub coerce_2d: bool,
}

impl Softmax {
    /// `(outer, axis_len, inner)` element counts for a concrete shape: the function
    /// runs over `axis_len` elements `inner` apart, `outer × inner` times.
    ///
    /// # Errors
    /// [`OpError::Shape`] when the axis is out of range.
    pub fn layout(&self, dims: &[usize]) -> Result<(usize, usize, usize), OpError> {
        let rank = dims.len().max(1);
        let axis = normalize_axis(self.axis, rank).ok_or_else(|| {
            OpError::Shape(format!("axis {} out of range for rank {rank}", self.axis))
        })?;
        let axis = axis.min(dims.len());
        let outer: usize = dims[..axis].iter().product();
        if self.coerce_2d {
            Ok((outer, dims[axis..].iter().product(), 1))
        } else {
            let len = dims.get(axis).copied().unwrap_or(1);
            Ok((outer, len, dims.get(axis + 1..).map_or(1, |d| d.iter().product())))
        }
    }
}

impl Op for Softmax {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        if let Some(r) = x.rank() {
            normalize_axis(self.axis, r.max(1)).ok_or_else(|| {
                OpError::Shape(format!("axis {} out of range for rank {r}", self.axis))
            })?;
        }
        Ok(vec![x.with_dtype(x.dtype)])
    }

    fn in_place(&self) -> Vec<usize> {
        vec![0]
    }
}

/// `BatchNormalization` in inference mode: per-channel affine with running statistics.
#[derive(Debug, Clone)]
pub struct BatchNorm {
    /// Added to the variance.
    pub epsilon: f32,
}

impl Op for BatchNorm {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        Ok(vec![x.with_dtype(x.dtype)])
    }

    fn in_place(&self) -> Vec<usize> {
        vec![0]
    }
}

/// `Dropout` at inference: the identity, with an all-true mask when asked.
#[derive(Debug, Clone)]
pub struct Dropout;

impl Op for Dropout {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        Ok(vec![x.with_dtype(x.dtype), x.with_dtype(DType::Bool)])
    }

    fn in_place(&self) -> Vec<usize> {
        vec![0]
    }
}

/// Registers the softmax family, BatchNormalization and Dropout.
pub fn register_all(r: &mut OpRegistry) {
    for (op, kind) in [
        ("Softmax", SoftmaxKind::Softmax),
        ("LogSoftmax", SoftmaxKind::LogSoftmax),
        ("Hardmax", SoftmaxKind::Hardmax),
    ] {
        r.register(op, move |n| {
            check_inputs(n, 1, 1)?;
            let coerce_2d = n.opset < 13;
            let axis = n.attrs.int_or("axis", if coerce_2d { 1 } else { -1 })?;
            Ok(Box::new(Softmax { kind, axis, coerce_2d }))
        });
    }
    r.register("BatchNormalization", |n| {
        check_inputs(n, 5, 5)?;
        if n.attrs.flag_or("training_mode", false)? || n.outputs.iter().skip(1).any(Option::is_some)
        {
            return Err(OpError::Unsupported("BatchNormalization in training mode".into()));
        }
        Ok(Box::new(BatchNorm {
            epsilon: n.attrs.float_or("epsilon", defaults::BATCH_NORM_EPSILON)?,
        }))
    });
    r.register("Dropout", |n| {
        check_inputs(n, 1, 3)?;
        if n.opset < 7 && !n.attrs.flag_or("is_test", false)? {
            return Err(OpError::Unsupported("Dropout in training mode".into()));
        }
        Ok(Box::new(Dropout))
    });
}
