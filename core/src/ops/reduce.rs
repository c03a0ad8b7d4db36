//! Reductions: the Reduce* family (axes as attribute or input) and ArgMax/ArgMin.

use super::{Fact, InferInputs, Op, OpRegistry, check_inputs};
use crate::dtype::DType;
use crate::error::OpError;
use crate::shape::{Dim, Shape, normalize_axis};

/// Which reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)] // each variant is `Reduce{Name}`.
pub enum ReduceKind {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
    L1,
    L2,
    LogSum,
    LogSumExp,
    SumSquare,
}

/// `ReduceSum`, `ReduceMean`, … over a set of axes.
#[derive(Debug, Clone)]
pub struct Reduce {
    /// Which reduction.
    pub kind: ReduceKind,
    /// Axes from the attribute; `None` with `axes_input` means input 1 carries them.
    pub axes_attr: Option<Vec<i64>>,
    /// Whether axes come from input 1 (ReduceSum from opset 13, the rest from 18).
    pub axes_input: bool,
    /// Keep reduced axes as size 1.
    pub keepdims: bool,
    /// With no axes: identity instead of reducing everything.
    pub noop_with_empty_axes: bool,
}

impl Reduce {
    /// The reduced axes for a rank and the given axes (`None` or empty: all, or none with noop).
    ///
    /// # Errors
    /// [`OpError::Shape`] for out-of-range axes.
    pub fn axes(&self, rank: usize, axes: Option<&[i64]>) -> Result<Vec<usize>, OpError> {
        match axes {
            Some(a) if !a.is_empty() => {
                let mut v: Vec<usize> = a
                    .iter()
                    .map(|&x| {
                        normalize_axis(x, rank).ok_or_else(|| {
                            OpError::Shape(format!("axis {x} is out of range for rank {rank}"))
                        })
                    })
                    .collect::<Result<_, _>>()?;
                v.sort_unstable();
                v.dedup();
                Ok(v)
            }
            _ if self.noop_with_empty_axes => Ok(vec![]),
            _ => Ok((0..rank).collect()),
        }
    }

    /// The output shape for an input shape and reduced axes.
    pub fn output_shape(&self, dims: &[Dim], axes: &[usize]) -> Shape {
        Shape(
            dims.iter()
                .enumerate()
                .filter_map(|(i, d)| match (axes.contains(&i), self.keepdims) {
                    (false, _) => Some(d.clone()),
                    (true, true) => Some(Dim::Known(1)),
                    (true, false) => None,
                })
                .collect(),
        )
    }
}

impl Op for Reduce {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        let axes = match (&self.axes_attr, inputs.opt(1)) {
            (Some(a), _) => Some(a.clone()),
            (None, Some(f)) if self.axes_input => match f.ints() {
                Some(v) => Some(v),
                None => return Ok(vec![Fact::unranked(x.dtype)]),
            },
            _ => None,
        };
        let Some(s) = &x.shape else { return Ok(vec![Fact::unranked(x.dtype)]) };
        let axes = self.axes(s.rank(), axes.as_deref())?;
        Ok(vec![Fact::new(x.dtype, self.output_shape(&s.0, &axes))])
    }

    fn value_inputs(&self) -> Vec<usize> {
        if self.axes_input { vec![1] } else { vec![] }
    }
}

/// `ArgMax` / `ArgMin` along one axis, giving int64 indices.
#[derive(Debug, Clone)]
pub struct ArgReduce {
    /// Max (true) or min (false).
    pub max: bool,
    /// The axis.
    pub axis: i64,
    /// Keep the axis as size 1.
    pub keepdims: bool,
    /// On ties, report the last index instead of the first.
    pub select_last_index: bool,
}

impl Op for ArgReduce {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        let Some(s) = &x.shape else { return Ok(vec![Fact::unranked(DType::I64)]) };
        let axis = normalize_axis(self.axis, s.rank())
            .ok_or_else(|| OpError::Shape(format!("axis {} out of range", self.axis)))?;
        let r = Reduce {
            kind: ReduceKind::Max,
            axes_attr: None,
            axes_input: false,
            keepdims: self.keepdims,
            noop_with_empty_axes: false,
        };
        Ok(vec![Fact::new(DType::I64, r.output_shape(&s.0, &[axis]))])
    }
}

/// Registers the reductions.
pub fn register_all(r: &mut OpRegistry) {
    use ReduceKind::*;
    for (op, kind) in [
        ("ReduceSum", Sum),
        ("ReduceMean", Mean),
        ("ReduceMax", Max),
        ("ReduceMin", Min),
        ("ReduceProd", Prod),
        ("ReduceL1", L1),
        ("ReduceL2", L2),
        ("ReduceLogSum", LogSum),
        ("ReduceLogSumExp", LogSumExp),
        ("ReduceSumSquare", SumSquare),
    ] {
        r.register(op, move |n| {
            check_inputs(n, 1, 2)?;
            let axes_input = if kind == Sum { n.opset >= 13 } else { n.opset >= 18 };
            Ok(Box::new(Reduce {
                kind,
                axes_attr: if axes_input { None } else { n.attrs.ints("axes")? },
                axes_input,
                keepdims: n.attrs.flag_or("keepdims", true)?,
                noop_with_empty_axes: n.attrs.flag_or("noop_with_empty_axes", false)?,
            }))
        });
    }
    for (op, max) in [("ArgMax", true), ("ArgMin", false)] {
        r.register(op, move |n| {
            check_inputs(n, 1, 1)?;
            Ok(Box::new(ArgReduce {
                max,
                axis: n.attrs.int_or("axis", 0)?,
                keepdims: n.attrs.flag_or("keepdims", true)?,
                select_last_index: n.attrs.flag_or("select_last_index", false)?,
            }))
        });
    }
}
