//! Shape ops: the zero-copy views (Reshape, Squeeze, Unsqueeze, Flatten,
//! Identity) and the shape queries (Shape, Size). Data movement lives in
//! `movement.rs`, generators and casts in `generate.rs`.

use super::{Fact, InferInputs, Op, OpRegistry, check_inputs};
use crate::dtype::DType;
use crate::error::OpError;
use crate::shape::{Dim, Shape};
use crate::tensor::Tensor;

use super::axes::{axis_of, opt_attr_ints, value_ints};

/// `Reshape`: a view with a new shape; `0` copies a dim (unless `allowzero`), `-1` is inferred.
#[derive(Debug, Clone)]
pub struct Reshape {
    /// Target from the `shape` attribute (opset < 5); later opsets pass it as input 1.
    pub shape_attr: Option<Vec<i64>>,
    /// A `0` in the target means a zero-sized dim instead of "copy".
    pub allowzero: bool,
}

impl Reshape {
    /// The output dims for concrete input dims.
    ///
    /// # Errors
    /// [`OpError::Shape`] when the target is invalid or the element counts differ.
    pub fn output_dims(
        input: &[usize],
        target: &[i64],
        allowzero: bool,
    ) -> Result<Vec<usize>, OpError> {
        let dims: Vec<Dim> = input.iter().map(|&d| Dim::Known(d)).collect();
        let out = Reshape::output_shape(&dims, target, allowzero)?;
        Shape(out).concrete().ok_or_else(|| OpError::Shape("reshape left a dim unresolved".into()))
    }

    fn output_shape(input: &[Dim], target: &[i64], allowzero: bool) -> Result<Vec<Dim>, OpError> {
        let bad = |m: String| OpError::Shape(m);
        let mut out = Vec::with_capacity(target.len());
        let mut infer_at = None;
        for (i, &t) in target.iter().enumerate() {
            out.push(match t {
                -1 => {
                    if infer_at.replace(i).is_some() {
                        return Err(bad(format!("reshape target {target:?} has two -1")));
                    }
                    Dim::Unknown
                }
                0 if !allowzero => input.get(i).cloned().ok_or_else(|| {
                    bad(format!(
                        "reshape target {target:?} copies dim {i} of a rank-{} input",
                        input.len()
                    ))
                })?,
                t if t >= 0 => Dim::Known(t as usize),
                t => return Err(bad(format!("invalid reshape target dim {t}"))),
            });
        }
        let in_numel: Option<usize> = input.iter().map(Dim::known).product();
        let known_out: Option<usize> = out
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != infer_at)
            .map(|(_, d)| d.known())
            .product();
        match (infer_at, in_numel, known_out) {
            (Some(i), Some(n), Some(k)) => {
                if k == 0 || n % k != 0 {
                    return Err(bad(format!("cannot reshape {} elements into {target:?}", n)));
                }
                out[i] = Dim::Known(n / k);
            }
            (None, Some(n), Some(k)) if n != k => {
                return Err(bad(format!("cannot reshape {n} elements into {target:?}")));
            }
            _ => {}
        }
        Ok(out)
    }
}

impl Op for Reshape {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        let target = match &self.shape_attr {
            Some(t) => Some(t.clone()),
            None => value_ints(inputs.get(1)?, 1)?,
        };
        let Some(target) = target else {
            return Ok(vec![match inputs.get(1)?.dims() {
                Some(d) if d.len() == 1 => Fact::ranked(x.dtype, d[0]),
                _ => Fact::unranked(x.dtype),
            }]);
        };
        let dims = match &x.shape {
            Some(s) => s.0.clone(),
            // An input of unknown rank: a target of plain sizes is the output shape.
            None if target.iter().all(|&t| t > 0 || (t == 0 && self.allowzero)) => {
                let out = target.iter().map(|&t| Dim::Known(t as usize)).collect();
                return Ok(vec![Fact::new(x.dtype, Shape(out))]);
            }
            None => return Ok(vec![Fact::ranked(x.dtype, target.len())]),
        };
        Ok(vec![Fact::new(x.dtype, Shape(Reshape::output_shape(&dims, &target, self.allowzero)?))])
    }

    fn value_inputs(&self) -> Vec<usize> {
        if self.shape_attr.is_some() { vec![] } else { vec![1] }
    }

    fn view_of(&self) -> Option<usize> {
        Some(0)
    }
}

/// `Identity`: a view of its input.
#[derive(Debug, Clone)]
pub struct Identity;

impl Op for Identity {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        Ok(vec![inputs.get(0)?.clone()])
    }

    fn view_of(&self) -> Option<usize> {
        Some(0)
    }
}

/// `Flatten`: a 2-D view `[prod(d[..axis]), prod(d[axis..])]`.
#[derive(Debug, Clone)]
pub struct Flatten {
    /// Split point.
    pub axis: i64,
}

impl Op for Flatten {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        let Some(s) = &x.shape else { return Ok(vec![Fact::ranked(x.dtype, 2)]) };
        let r = s.rank() as i64;
        let axis = if self.axis < 0 { self.axis + r } else { self.axis };
        if !(0..=r).contains(&axis) {
            return Err(OpError::Shape(format!("axis {} out of range for rank {r}", self.axis)));
        }
        let prod = |d: &[Dim]| d.iter().map(Dim::known).product::<Option<usize>>();
        let to_dim = |p: Option<usize>| p.map(Dim::Known).unwrap_or(Dim::Unknown);
        let (a, b) = s.0.split_at(axis as usize);
        Ok(vec![Fact::new(x.dtype, Shape(vec![to_dim(prod(a)), to_dim(prod(b))]))])
    }

    fn view_of(&self) -> Option<usize> {
        Some(0)
    }
}

/// `Squeeze`: a view without the given size-1 axes (all size-1 axes when none are given).
#[derive(Debug, Clone)]
pub struct Squeeze {
    /// Axes from the attribute (opset < 13); later opsets pass them as optional input 1.
    pub axes_attr: Option<Vec<i64>>,
}

impl Op for Squeeze {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        let axes = match (&self.axes_attr, inputs.opt(1)) {
            (Some(a), _) => Some(a.clone()),
            (None, Some(f)) => match value_ints(f, 1)? {
                Some(v) => Some(v),
                None => return Ok(vec![Fact::unranked(x.dtype)]),
            },
            (None, None) => None,
        };
        let Some(s) = &x.shape else { return Ok(vec![Fact::unranked(x.dtype)]) };
        let out = match axes {
            Some(axes) => {
                let axes: Vec<usize> =
                    axes.iter().map(|&a| axis_of(a, s.rank())).collect::<Result<_, _>>()?;
                for &a in &axes {
                    if let Dim::Known(n) = s.0[a] {
                        if n != 1 {
                            return Err(OpError::Shape(format!(
                                "cannot squeeze axis {a} of size {n}"
                            )));
                        }
                    }
                }
                s.0.iter()
                    .enumerate()
                    .filter(|(i, _)| !axes.contains(i))
                    .map(|(_, d)| d.clone())
                    .collect()
            }
            None => {
                if s.0.iter().any(|d| d.known().is_none()) {
                    return Ok(vec![Fact::unranked(x.dtype)]);
                }
                s.0.iter().filter(|d| **d != Dim::Known(1)).cloned().collect()
            }
        };
        Ok(vec![Fact::new(x.dtype, Shape(out))])
    }

    fn value_inputs(&self) -> Vec<usize> {
        if self.axes_attr.is_some() { vec![] } else { vec![1] }
    }

    fn view_of(&self) -> Option<usize> {
        Some(0)
    }
}

/// `Unsqueeze`: a view with size-1 axes inserted.
#[derive(Debug, Clone)]
pub struct Unsqueeze {
    /// Axes from the attribute (opset < 13); later opsets pass them as input 1.
    pub axes_attr: Option<Vec<i64>>,
}

impl Op for Unsqueeze {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        let axes = match &self.axes_attr {
            Some(a) => Some(a.clone()),
            None => value_ints(inputs.get(1)?, 1)?,
        };
        let (Some(axes), Some(s)) = (axes, &x.shape) else {
            return Ok(vec![Fact::unranked(x.dtype)]);
        };
        let rank = s.rank() + axes.len();
        let mut norm: Vec<usize> =
            axes.iter().map(|&a| axis_of(a, rank)).collect::<Result<_, _>>()?;
        norm.sort_unstable();
        if norm.windows(2).any(|w| w[0] == w[1]) {
            return Err(OpError::Shape(format!("repeated axes in {axes:?}")));
        }
        let mut src = s.0.iter();
        let out = (0..rank)
            .map(|i| {
                if norm.contains(&i) {
                    Dim::Known(1)
                } else {
                    src.next().cloned().unwrap_or(Dim::Unknown)
                }
            })
            .collect();
        Ok(vec![Fact::new(x.dtype, Shape(out))])
    }

    fn value_inputs(&self) -> Vec<usize> {
        if self.axes_attr.is_some() { vec![] } else { vec![1] }
    }

    fn view_of(&self) -> Option<usize> {
        Some(0)
    }
}

/// `Shape`: the input's dims as int64, optionally sliced by `start`/`end`.
#[derive(Debug, Clone)]
pub struct ShapeOf {
    /// First dim reported.
    pub start: i64,
    /// One past the last dim reported.
    pub end: Option<i64>,
}

impl ShapeOf {
    /// The reported range of dims for a rank.
    pub fn range(&self, rank: usize) -> std::ops::Range<usize> {
        let r = rank as i64;
        let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
        let (s, e) = (clamp(self.start), clamp(self.end.unwrap_or(r)));
        s..e.max(s)
    }
}

impl Op for ShapeOf {
    fn folds(&self) -> super::fold::Folding {
        super::fold::Folding::FromShapes
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        let Some(s) = &x.shape else { return Ok(vec![Fact::ranked(DType::I64, 1)]) };
        let range = self.range(s.rank());
        let mut f = Fact::known(DType::I64, &[range.len()]);
        if let Some(d) =
            s.0[range].iter().map(|d| d.known().map(|n| n as i64)).collect::<Option<Vec<_>>>()
        {
            f.value = Some(Tensor::from_vec(vec![d.len()], d).expect("length matches"));
        }
        Ok(vec![f])
    }
}

/// `Size`: the element count as an int64 scalar.
#[derive(Debug, Clone)]
pub struct Size;

impl Op for Size {
    fn folds(&self) -> super::fold::Folding {
        super::fold::Folding::FromShapes
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        let mut f = Fact::known(DType::I64, &[]);
        if let Some(n) = x.shape.as_ref().and_then(Shape::numel) {
            f.value = Some(Tensor::scalar(n as i64));
        }
        Ok(vec![f])
    }
}

/// Registers the views and shape queries.
pub fn register_all(r: &mut OpRegistry) {
    r.register("Reshape", |n| {
        let shape_attr = if n.opset < 5 { Some(n.attrs.req_ints("shape")?) } else { None };
        check_inputs(n, if shape_attr.is_some() { 1 } else { 2 }, 2)?;
        Ok(Box::new(Reshape { shape_attr, allowzero: n.attrs.flag_or("allowzero", false)? }))
    });
    r.register("Identity", |n| {
        check_inputs(n, 1, 1)?;
        Ok(Box::new(Identity))
    });
    r.register("Flatten", |n| {
        check_inputs(n, 1, 1)?;
        Ok(Box::new(Flatten { axis: n.attrs.int_or("axis", 1)? }))
    });
    r.register("Squeeze", |n| {
        check_inputs(n, 1, 2)?;
        Ok(Box::new(Squeeze { axes_attr: opt_attr_ints(n, "axes", 13)? }))
    });
    r.register("Unsqueeze", |n| {
        let axes_attr = if n.opset < 13 { Some(n.attrs.req_ints("axes")?) } else { None };
        check_inputs(n, if axes_attr.is_some() { 1 } else { 2 }, 2)?;
        Ok(Box::new(Unsqueeze { axes_attr }))
    });
    r.register("Shape", |n| {
        check_inputs(n, 1, 1)?;
        Ok(Box::new(ShapeOf { start: n.attrs.int_or("start", 0)?, end: n.attrs.int("end")? }))
    });
    r.register("Size", |n| {
        check_inputs(n, 1, 1)?;
        Ok(Box::new(Size))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reshape_copies_zero_dims_and_infers_minus_one() {
        assert_eq!(Reshape::output_dims(&[2, 3, 4], &[0, -1], false).unwrap(), vec![2, 12]);
        assert_eq!(Reshape::output_dims(&[0, 3], &[0, 3], true).unwrap(), vec![0, 3]);
        assert!(Reshape::output_dims(&[2, 3], &[4, -1], false).is_err());
    }
}
