//! Generators and casts: ConstantOfShape, Range, Cast, CastLike, BitCast.

use super::axes::value_ints;
use super::{Fact, InferInputs, Op, OpRegistry, check_inputs};
use crate::dtype::DType;
use crate::error::OpError;
use crate::float8::RoundMode;
use crate::graph::Node;
use crate::shape::{Dim, Shape};
use crate::tensor::Tensor;

/// `ConstantOfShape`: a tensor of the shape in input 0 filled with one value.
#[derive(Debug, Clone)]
pub struct ConstantOfShape {
    /// The fill value (a one-element tensor; default float 0).
    pub value: Tensor,
}

impl Op for ConstantOfShape {
    fn fold(&self, i: &[Option<&Tensor>]) -> Option<Result<Vec<Tensor>, OpError>> {
        super::fold::constant_of_shape(&self.value, (*i.first()?)?)
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let dtype = self.value.dtype();
        let Some(dims) = value_ints(inputs.get(0)?, 0)? else {
            return Ok(vec![match inputs.get(0)?.dims() {
                Some(d) if d.len() == 1 => Fact::ranked(dtype, d[0]),
                _ => Fact::unranked(dtype),
            }]);
        };
        if dims.iter().any(|&d| d < 0) {
            return Err(OpError::Shape(format!("negative dim in {dims:?}")));
        }
        Ok(vec![Fact::new(dtype, Shape(dims.iter().map(|&d| Dim::Known(d as usize)).collect()))])
    }

    fn value_inputs(&self) -> Vec<usize> {
        vec![0]
    }
}

/// `Range(start, limit, delta)`.
#[derive(Debug, Clone)]
pub struct Range;

impl Range {
    /// The element count: `max(ceil((limit - start) / delta), 0)`.
    ///
    /// # Errors
    /// [`OpError::Shape`] when `delta` is 0 or the count is not finite.
    pub fn len(start: f64, limit: f64, delta: f64) -> Result<usize, OpError> {
        if delta == 0.0 {
            return Err(OpError::Shape("Range delta is 0".into()));
        }
        let n = ((limit - start) / delta).ceil();
        if !n.is_finite() || n > 1e12 {
            return Err(OpError::Shape(format!(
                "Range({start}, {limit}, {delta}) has no finite length"
            )));
        }
        Ok(n.max(0.0) as usize)
    }
}

impl Op for Range {
    fn fold(&self, i: &[Option<&Tensor>]) -> Option<Result<Vec<Tensor>, OpError>> {
        super::fold::range((*i.first()?)?, (*i.get(1)?)?, (*i.get(2)?)?)
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let start = inputs.get(0)?;
        let scalar = |i: usize| -> Result<Option<f64>, OpError> {
            Ok(inputs.get(i)?.floats().and_then(|v| v.first().copied()))
        };
        match (scalar(0)?, scalar(1)?, scalar(2)?) {
            (Some(s), Some(l), Some(d)) => {
                // Integer ranges must be computed exactly, not through f64 rounding.
                let n = match (inputs.get(0)?.ints(), inputs.get(1)?.ints(), inputs.get(2)?.ints())
                {
                    (Some(s), Some(l), Some(d)) if start.dtype.is_int() => {
                        let (s, l, d) = (s[0], l[0], d[0]);
                        if d == 0 {
                            return Err(OpError::Shape("Range delta is 0".into()));
                        }
                        let span = l - s;
                        (if (span > 0) == (d > 0) && span != 0 {
                            (span + d - d.signum()) / d
                        } else {
                            0
                        })
                        .max(0) as usize
                    }
                    _ => Range::len(s, l, d)?,
                };
                Ok(vec![Fact::known(start.dtype, &[n])])
            }
            _ => Ok(vec![Fact::ranked(start.dtype, 1)]),
        }
    }

    fn value_inputs(&self) -> Vec<usize> {
        vec![0, 1, 2]
    }
}

/// `Cast` to a dtype (`saturate` applies to float8 targets, `round_mode` to float8e8m0).
#[derive(Debug, Clone)]
pub struct Cast {
    /// Target dtype.
    pub to: DType,
    /// Saturate out-of-range values for float8 targets.
    pub saturate: bool,
    /// Rounding of casts to float8e8m0.
    pub round_mode: RoundMode,
}

impl Op for Cast {
    fn fold(&self, i: &[Option<&Tensor>]) -> Option<Result<Vec<Tensor>, OpError>> {
        super::fold::cast((*i.first()?)?, self.to)
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        Ok(vec![inputs.get(0)?.with_dtype(self.to)])
    }

    fn in_place(&self) -> Vec<usize> {
        vec![0]
    }
}

/// `CastLike`: cast input 0 to input 1's dtype.
#[derive(Debug, Clone)]
pub struct CastLike {
    /// Saturate out-of-range values for float8 targets.
    pub saturate: bool,
    /// Rounding of casts to float8e8m0.
    pub round_mode: RoundMode,
}

impl Op for CastLike {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        Ok(vec![inputs.get(0)?.with_dtype(inputs.get(1)?.dtype)])
    }

    fn in_place(&self) -> Vec<usize> {
        vec![0]
    }
}

/// `BitCast`: reinterpret the bits of each element as another type of the same width.
#[derive(Debug, Clone)]
pub struct BitCast {
    /// Target dtype.
    pub to: DType,
}

impl Op for BitCast {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        if x.dtype.bits() != self.to.bits() || x.dtype == DType::String || self.to == DType::String
        {
            return Err(OpError::InputDType {
                index: 0,
                dtype: x.dtype,
                expected: format!("a non-string type of {}'s width", self.to),
            });
        }
        Ok(vec![x.with_dtype(self.to)])
    }
}

fn target_dtype(n: &Node) -> Result<DType, OpError> {
    let to = n.attrs.req_int("to")?;
    DType::from_onnx(to as i32).ok_or_else(|| OpError::BadAttribute {
        name: "to".into(),
        reason: format!("{to} is not a data type"),
    })
}

fn round_mode(n: &Node) -> Result<RoundMode, OpError> {
    let name = n.attrs.string_or("round_mode", "up".into())?;
    RoundMode::parse(&name).ok_or_else(|| OpError::BadAttribute {
        name: "round_mode".into(),
        reason: format!("unknown mode '{name}'"),
    })
}

/// Registers the generators and casts.
pub fn register_all(r: &mut OpRegistry) {
    r.register("ConstantOfShape", |n| {
        check_inputs(n, 1, 1)?;
        let value = n.attrs.tensor_or("value", Tensor::scalar(0f32))?;
        if value.numel() != 1 {
            return Err(OpError::BadAttribute {
                name: "value".into(),
                reason: "must hold one element".into(),
            });
        }
        Ok(Box::new(ConstantOfShape { value: value.reshaped(vec![])? }))
    });
    r.register("Range", |n| {
        check_inputs(n, 3, 3)?;
        Ok(Box::new(Range))
    });
    r.register("Cast", |n| {
        check_inputs(n, 1, 1)?;
        Ok(Box::new(Cast {
            to: target_dtype(n)?,
            saturate: n.attrs.flag_or("saturate", true)?,
            round_mode: round_mode(n)?,
        }))
    });
    r.register("CastLike", |n| {
        check_inputs(n, 2, 2)?;
        Ok(Box::new(CastLike {
            saturate: n.attrs.flag_or("saturate", true)?,
            round_mode: round_mode(n)?,
        }))
    });
    r.register("BitCast", |n| {
        check_inputs(n, 1, 1)?;
        Ok(Box::new(BitCast { to: target_dtype(n)? }))
    });
}
