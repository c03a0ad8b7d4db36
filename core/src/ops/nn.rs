//! Neural-network ops: the softmax family, normalizations and Dropout (inference).

use super::{Fact, InferInputs, Op, OpRegistry, check_inputs};
use crate::dtype::DType;
use crate::error::OpError;
use crate::shape::{Dim, Shape, normalize_axis};

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

/// `LayerNormalization` (opset 17) over the trailing dims from `axis`.
#[derive(Debug, Clone)]
pub struct LayerNorm {
    /// First normalized axis.
    pub axis: i64,
    /// Added to the variance.
    pub epsilon: f32,
    /// Dtype of the Mean / InvStdDev outputs.
    pub stash_type: DType,
}

impl LayerNorm {
    /// The normalized axis, made non-negative.
    ///
    /// # Errors
    /// [`OpError::Shape`] when out of range.
    pub fn axis(&self, rank: usize) -> Result<usize, OpError> {
        normalize_axis(self.axis, rank).ok_or_else(|| {
            OpError::Shape(format!("axis {} out of range for rank {rank}", self.axis))
        })
    }
}

impl Op for LayerNorm {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        let Some(sx) = &x.shape else {
            return Ok(vec![
                x.clone(),
                Fact::unranked(self.stash_type),
                Fact::unranked(self.stash_type),
            ]);
        };
        let axis = self.axis(sx.rank())?;
        let mut stat = sx.0[..axis].to_vec();
        stat.extend(std::iter::repeat_n(Dim::Known(1), sx.rank() - axis));
        let stat = Fact::new(self.stash_type, Shape(stat));
        Ok(vec![x.with_dtype(x.dtype), stat.clone(), stat])
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

/// Registers the softmax family, the normalizations and Dropout.
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
    r.register("LayerNormalization", |n| {
        check_inputs(n, 2, 3)?;
        let stash = n.attrs.int_or("stash_type", 1)?;
        let stash_type =
            DType::from_onnx(stash as i32).filter(|d| d.is_float()).ok_or_else(|| {
                OpError::BadAttribute {
                    name: "stash_type".into(),
                    reason: format!("{stash} is not a float type"),
                }
            })?;
        Ok(Box::new(LayerNorm {
            axis: n.attrs.int_or("axis", -1)?,
            epsilon: n.attrs.float_or("epsilon", 1e-5)?,
            stash_type,
        }))
    });
    r.register("BatchNormalization", |n| {
        check_inputs(n, 5, 5)?;
        if n.attrs.flag_or("training_mode", false)? || n.outputs.iter().skip(1).any(Option::is_some)
        {
            return Err(OpError::Unsupported("BatchNormalization in training mode".into()));
        }
        Ok(Box::new(BatchNorm { epsilon: n.attrs.float_or("epsilon", 1e-5)? }))
    });
    r.register("Dropout", |n| {
        check_inputs(n, 1, 3)?;
        if n.opset < 7 && !n.attrs.flag_or("is_test", false)? {
            return Err(OpError::Unsupported("Dropout in training mode".into()));
        }
        Ok(Box::new(Dropout))
    });
}
