//! Ops built on per-slice statistics: the normalizations LpNormalization,
//! MeanVarianceNormalization, InstanceNormalization, GroupNormalization and
//! LRN, and the losses NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.

use super::axes::axis_of;
use super::defaults;
use super::{Fact, InferInputs, Op, OpRegistry, check_inputs};
use crate::dtype::DType;
use crate::error::OpError;
use crate::graph::Node;
use crate::shape::{Dim, Shape};

fn check_float(f: &Fact, index: usize) -> Result<(), OpError> {
    if !matches!(f.dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16) {
        return Err(OpError::InputDType { index, dtype: f.dtype, expected: "a float type".into() });
    }
    Ok(())
}

/// Output 0 like float input 0, with at least `min_rank` dims when the rank is known.
fn float_like_input(inputs: &InferInputs<'_>, min_rank: usize) -> Result<Vec<Fact>, OpError> {
    let x = inputs.get(0)?;
    check_float(x, 0)?;
    if let Some(r) = x.rank().filter(|&r| r < min_rank) {
        return Err(OpError::Shape(format!("expected rank {min_rank} or more, got {r}")));
    }
    Ok(vec![x.with_dtype(x.dtype)])
}

/// `LpNormalization`: `x / ‖x‖ₚ` along an axis (zero where the norm is zero).
#[derive(Debug, Clone)]
pub struct LpNorm {
    /// The axis (default -1).
    pub axis: i64,
    /// The order: 1 or 2.
    pub p: i64,
}

impl Op for LpNorm {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        if let Some(r) = inputs.get(0)?.rank() {
            axis_of(self.axis, r)?;
        }
        float_like_input(inputs, 0)
    }

    fn in_place(&self) -> Vec<usize> {
        vec![0]
    }
}

/// `MeanVarianceNormalization`: `(x - mean) / (std + 1e-9)` over `axes`.
#[derive(Debug, Clone)]
pub struct MeanVarianceNorm {
    /// The reduced axes (default `[0, 2, 3]`).
    pub axes: Vec<i64>,
}

impl MeanVarianceNorm {
    /// The reduced axes, made non-negative, for a rank.
    ///
    /// # Errors
    /// [`OpError::Shape`] when an axis is out of range or repeats.
    pub fn axes(&self, rank: usize) -> Result<Vec<bool>, OpError> {
        let mut reduced = vec![false; rank];
        for &a in &self.axes {
            if std::mem::replace(&mut reduced[axis_of(a, rank)?], true) {
                return Err(OpError::Shape(format!("axis {a} repeats in {:?}", self.axes)));
            }
        }
        Ok(reduced)
    }
}

impl Op for MeanVarianceNorm {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        if let Some(r) = inputs.get(0)?.rank() {
            self.axes(r)?;
        }
        float_like_input(inputs, 0)
    }

    fn in_place(&self) -> Vec<usize> {
        vec![0]
    }
}

/// `InstanceNormalization` (one group per channel) and `GroupNormalization`:
/// `scale * (x - mean) / sqrt(var + eps) + bias`, statistics per instance and group.
#[derive(Debug, Clone)]
pub struct GroupNorm {
    /// Channel groups; `None` for InstanceNormalization (one per channel).
    pub groups: Option<usize>,
    /// Added to the variance.
    pub epsilon: f32,
    /// Opset 18's GroupNormalization: scale and bias per group, not per channel.
    pub per_group_params: bool,
}

impl Op for GroupNorm {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        if let (Some(g), Some(c)) = (self.groups, x.dim(1).known()) {
            if g == 0 || c % g != 0 {
                return Err(OpError::Shape(format!("{c} channels do not split into {g} groups")));
            }
        }
        float_like_input(inputs, 2)
    }

    fn in_place(&self) -> Vec<usize> {
        vec![0]
    }
}

/// `LRN`: `x / (bias + alpha / size * Σ x²)^beta` over a window of `size` channels.
#[derive(Debug, Clone)]
pub struct Lrn {
    /// Scale of the sum of squares.
    pub alpha: f32,
    /// Exponent.
    pub beta: f32,
    /// Offset.
    pub bias: f32,
    /// Window size in channels.
    pub size: usize,
}

impl Op for Lrn {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        float_like_input(inputs, 2)
    }
}

/// How a loss reduces its per-element values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossReduction {
    /// Per-element losses, shaped like the target.
    None,
    /// Their sum.
    Sum,
    /// Their weighted mean.
    Mean,
}

/// `NegativeLogLikelihoodLoss` and `SoftmaxCrossEntropyLoss` over input
/// `[N, C, d…]` and target `[N, d…]`, with optional class weights.
#[derive(Debug, Clone)]
pub struct Loss {
    /// Apply log-softmax over the classes first (SoftmaxCrossEntropyLoss).
    pub softmax: bool,
    /// The reduction (default mean).
    pub reduction: LossReduction,
    /// Targets with this value contribute nothing.
    pub ignore_index: Option<i64>,
}

impl Op for Loss {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let (x, t) = (inputs.get(0)?, inputs.get(1)?);
        check_float(x, 0)?;
        if !matches!(t.dtype, DType::I32 | DType::I64) {
            return Err(OpError::InputDType {
                index: 1,
                dtype: t.dtype,
                expected: "int32 or int64".into(),
            });
        }
        if let (Some(sx), Some(st)) = (&x.shape, &t.shape) {
            let fits = sx.rank() >= 2
                && st.rank() + 1 == sx.rank()
                && st.0.iter().zip(sx.0.iter().enumerate().filter(|&(i, _)| i != 1)).all(
                    |(a, (_, b))| match (a, b) {
                        (Dim::Known(a), Dim::Known(b)) => a == b,
                        _ => true,
                    },
                );
            if !fits {
                return Err(OpError::Shape(format!("target {st} does not fit input {sx}")));
            }
        }
        let loss = match (self.reduction, &t.shape) {
            (LossReduction::None, Some(s)) => Fact::new(x.dtype, s.clone()),
            (LossReduction::None, None) => Fact::unranked(x.dtype),
            _ => Fact::new(x.dtype, Shape(vec![])),
        };
        let mut out = vec![loss];
        if self.softmax {
            out.push(x.with_dtype(x.dtype));
        }
        Ok(out)
    }
}

fn loss(n: &Node, softmax: bool) -> Result<Box<dyn Op>, OpError> {
    check_inputs(n, 2, 3)?;
    let reduction = match n.attrs.string_or("reduction", "mean".into())?.as_str() {
        "none" => LossReduction::None,
        "sum" => LossReduction::Sum,
        "mean" => LossReduction::Mean,
        r => {
            return Err(OpError::BadAttribute {
                name: "reduction".into(),
                reason: format!("unknown reduction '{r}'"),
            });
        }
    };
    Ok(Box::new(Loss { softmax, reduction, ignore_index: n.attrs.int("ignore_index")? }))
}

/// Registers the family.
pub fn register_all(r: &mut OpRegistry) {
    r.register("LpNormalization", |n| {
        check_inputs(n, 1, 1)?;
        let p = n.attrs.int_or("p", 2)?;
        if p != 1 && p != 2 {
            return Err(OpError::BadAttribute {
                name: "p".into(),
                reason: format!("{p} is not 1 or 2"),
            });
        }
        Ok(Box::new(LpNorm { axis: n.attrs.int_or("axis", -1)?, p }))
    });
    r.register("MeanVarianceNormalization", |n| {
        check_inputs(n, 1, 1)?;
        Ok(Box::new(MeanVarianceNorm { axes: n.attrs.ints_or("axes", vec![0, 2, 3])? }))
    });
    r.register("InstanceNormalization", |n| {
        check_inputs(n, 3, 3)?;
        let epsilon = n.attrs.float_or("epsilon", defaults::BATCH_NORM_EPSILON)?;
        Ok(Box::new(GroupNorm { groups: None, epsilon, per_group_params: false }))
    });
    r.register("GroupNormalization", |n| {
        check_inputs(n, 3, 3)?;
        let g = n.attrs.req_int("num_groups")?;
        let groups = usize::try_from(g).ok().filter(|&g| g > 0).ok_or_else(|| {
            OpError::BadAttribute { name: "num_groups".into(), reason: format!("{g}") }
        })?;
        Ok(Box::new(GroupNorm {
            groups: Some(groups),
            epsilon: n.attrs.float_or("epsilon", defaults::BATCH_NORM_EPSILON)?,
            per_group_params: n.opset < 21,
        }))
    });
    r.register("LRN", |n| {
        check_inputs(n, 1, 1)?;
        let s = n.attrs.req_int("size")?;
        let size = usize::try_from(s).ok().filter(|&s| s > 0).ok_or_else(|| {
            OpError::BadAttribute { name: "size".into(), reason: format!("{s} is not positive") }
        })?;
        Ok(Box::new(Lrn {
            alpha: n.attrs.float_or("alpha", 1e-4)?,
            beta: n.attrs.float_or("beta", 0.75)?,
            bias: n.attrs.float_or("bias", 1.0)?,
            size,
        }))
    });
    r.register("NegativeLogLikelihoodLoss", |n| loss(n, false));
    r.register("SoftmaxCrossEntropyLoss", |n| loss(n, true));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_variance_axes_must_be_distinct_and_in_range() {
        let m = MeanVarianceNorm { axes: vec![0, 2, -1] };
        assert_eq!(m.axes(4).unwrap(), vec![true, false, true, true]);
        assert!(MeanVarianceNorm { axes: vec![0, -4] }.axes(4).is_err());
        assert!(MeanVarianceNorm { axes: vec![5] }.axes(4).is_err());
    }

    #[test]
    fn a_reduced_loss_is_a_scalar_and_an_unreduced_one_is_shaped_like_the_target() {
        let x = Fact::known(DType::F32, &[3, 5, 2]);
        let t = Fact::known(DType::I64, &[3, 2]);
        let facts = [Some(x), Some(t)];
        let l = Loss { softmax: true, reduction: LossReduction::Mean, ignore_index: None };
        let out = l.infer(&InferInputs::new(&facts)).unwrap();
        assert_eq!(out[0].dims().unwrap(), Vec::<usize>::new());
        assert_eq!(out[1].dims().unwrap(), vec![3, 5, 2]);
        let l = Loss { softmax: false, reduction: LossReduction::None, ignore_index: None };
        let out = l.infer(&InferInputs::new(&facts)).unwrap();
        assert_eq!((out.len(), out[0].dims().unwrap()), (1, vec![3, 2]));
        let bad = [Some(Fact::known(DType::F32, &[3, 5])), Some(Fact::known(DType::I64, &[4]))];
        assert!(l.infer(&InferInputs::new(&bad)).is_err());
    }
}
