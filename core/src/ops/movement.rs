//! Data movement: Transpose, Concat, Split, Slice, Gather, Expand, Tile.

pub use super::axes::SliceAxis;
use super::axes::{axis_of, opt_attr_ints, resolve_slice, value_ints};
use super::{Fact, InferInputs, Op, OpRegistry, broadcast_shapes, check_inputs};
use crate::dtype::DType;
use crate::error::OpError;
use crate::shape::{Dim, Shape};
use crate::tensor::Tensor;

/// `Transpose` with a permutation (default: reverse the axes).
#[derive(Debug, Clone)]
pub struct Transpose {
    /// The permutation; `None` means reversed.
    pub perm: Option<Vec<i64>>,
}

impl Transpose {
    /// The permutation for a rank, validated.
    ///
    /// # Errors
    /// [`OpError::BadAttribute`] when `perm` is not a permutation of `0..rank`.
    pub fn perm(&self, rank: usize) -> Result<Vec<usize>, OpError> {
        let p: Vec<usize> = match &self.perm {
            None => (0..rank).rev().collect(),
            Some(p) => p.iter().map(|&a| axis_of(a, rank)).collect::<Result<_, _>>()?,
        };
        let mut seen = vec![false; rank];
        if p.len() != rank || p.iter().any(|&a| std::mem::replace(&mut seen[a], true)) {
            return Err(OpError::BadAttribute {
                name: "perm".into(),
                reason: format!("{:?} is not a permutation of 0..{rank}", self.perm),
            });
        }
        Ok(p)
    }
}

impl Op for Transpose {
    fn fold(&self, i: &[Option<&Tensor>]) -> Option<Result<Vec<Tensor>, OpError>> {
        let x = (*i.first()?)?;
        match self.perm(x.shape().len()) {
            Ok(p) => super::fold::transpose(x, &p),
            Err(e) => Some(Err(e)),
        }
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        let Some(s) = &x.shape else { return Ok(vec![Fact::unranked(x.dtype)]) };
        let p = self.perm(s.rank())?;
        Ok(vec![Fact::new(x.dtype, Shape(p.iter().map(|&a| s.0[a].clone()).collect()))])
    }
}

/// `Concat` along an axis.
#[derive(Debug, Clone)]
pub struct Concat {
    /// The axis.
    pub axis: i64,
}

impl Op for Concat {
    fn fold(&self, i: &[Option<&Tensor>]) -> Option<Result<Vec<Tensor>, OpError>> {
        let xs: Vec<&Tensor> = i.iter().flatten().copied().collect();
        super::fold::concat(&xs, self.axis)
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let facts: Vec<&Fact> = inputs.present().collect();
        let first = facts.first().ok_or(OpError::MissingInput(0))?;
        let Some(shapes) = facts.iter().map(|f| f.shape.as_ref()).collect::<Option<Vec<_>>>()
        else {
            return Ok(vec![Fact::unranked(first.dtype)]);
        };
        let rank = shapes[0].rank();
        let axis = axis_of(self.axis, rank)?;
        let mut out = shapes[0].0.clone();
        let mut total = Some(0usize);
        for (i, s) in shapes.iter().enumerate() {
            if s.rank() != rank || facts[i].dtype != first.dtype {
                return Err(OpError::Shape(format!(
                    "input {i} ({} {s}) does not match input 0 ({} {})",
                    facts[i].dtype, first.dtype, shapes[0]
                )));
            }
            for (d, (a, b)) in s.0.iter().zip(&shapes[0].0).enumerate() {
                if d != axis {
                    if let (Dim::Known(x), Dim::Known(y)) = (a, b) {
                        if x != y {
                            return Err(OpError::Shape(format!(
                                "input {i} has {x} at axis {d}, input 0 has {y}"
                            )));
                        }
                    }
                    if matches!(out[d], Dim::Unknown)
                        || matches!(out[d], Dim::Sym(_)) && a.known().is_some()
                    {
                        out[d] = a.clone();
                    }
                }
            }
            total = total.zip(s.0[axis].known()).map(|(t, n)| t + n);
        }
        out[axis] = total.map(Dim::Known).unwrap_or(Dim::Unknown);
        Ok(vec![Fact::new(first.dtype, Shape(out))])
    }
}

/// `Split` along an axis into the node's outputs.
#[derive(Debug, Clone)]
pub struct Split {
    /// The axis.
    pub axis: i64,
    /// Sizes from the attribute (opset < 13); later opsets pass them as optional input 1.
    pub split_attr: Option<Vec<i64>>,
    /// Number of outputs.
    pub outputs: usize,
    /// Opset 18's `num_outputs`: uneven splits round the chunk size up.
    pub num_outputs: Option<usize>,
}

impl Split {
    /// The chunk sizes for a concrete axis length.
    ///
    /// # Errors
    /// [`OpError::Shape`] when sizes do not add up or the axis does not divide evenly.
    pub fn sizes(&self, len: usize, split: Option<&[i64]>) -> Result<Vec<usize>, OpError> {
        if let Some(s) = split {
            let sizes: Vec<usize> = s.iter().map(|&x| x.max(0) as usize).collect();
            if sizes.iter().sum::<usize>() != len || sizes.len() != self.outputs {
                return Err(OpError::Shape(format!(
                    "split {s:?} does not cover an axis of {len} with {} outputs",
                    self.outputs
                )));
            }
            return Ok(sizes);
        }
        let n = self.outputs.max(1);
        if self.num_outputs.is_some() {
            let chunk = len.div_ceil(n);
            return Ok((0..n).map(|i| chunk.min(len.saturating_sub(i * chunk))).collect());
        }
        if len % n != 0 {
            return Err(OpError::Shape(format!("axis of {len} does not split evenly into {n}")));
        }
        Ok(vec![len / n; n])
    }
}

impl Op for Split {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        let split = match (&self.split_attr, inputs.opt(1)) {
            (Some(s), _) => Some(s.clone()),
            (None, Some(f)) => value_ints(f, 1)?,
            (None, None) => None,
        };
        let Some(s) = &x.shape else { return Ok(vec![Fact::unranked(x.dtype); self.outputs]) };
        let axis = axis_of(self.axis, s.rank())?;
        let sizes_unknown = self.split_attr.is_none() && inputs.opt(1).is_some() && split.is_none();
        let Some(len) = s.0[axis].known().filter(|_| !sizes_unknown) else {
            let mut d = s.0.clone();
            d[axis] = Dim::Unknown;
            return Ok(vec![Fact::new(x.dtype, Shape(d)); self.outputs]);
        };
        Ok(self
            .sizes(len, split.as_deref())?
            .into_iter()
            .map(|n| {
                let mut d = s.0.clone();
                d[axis] = Dim::Known(n);
                Fact::new(x.dtype, Shape(d))
            })
            .collect())
    }

    fn value_inputs(&self) -> Vec<usize> {
        if self.split_attr.is_some() { vec![] } else { vec![1] }
    }
}

/// Slice bounds given as attributes (opset < 10).
#[derive(Debug, Clone)]
pub struct SliceAttrs {
    /// First index per axis.
    pub starts: Vec<i64>,
    /// End (exclusive) per axis.
    pub ends: Vec<i64>,
    /// The axes (default: the first `starts.len()`).
    pub axes: Option<Vec<i64>>,
}

/// `Slice` with per-axis starts, ends and steps.
#[derive(Debug, Clone)]
pub struct Slice {
    /// Bounds from attributes (opset < 10); later opsets use inputs 1–4.
    pub attrs: Option<SliceAttrs>,
}

impl Slice {
    /// Resolves starts/ends/axes/steps against concrete dims, clamping as the spec says.
    ///
    /// # Errors
    /// [`OpError::Shape`] for mismatched lengths, bad axes or a zero step.
    pub fn resolve(
        dims: &[usize],
        starts: &[i64],
        ends: &[i64],
        axes: Option<&[i64]>,
        steps: Option<&[i64]>,
    ) -> Result<Vec<SliceAxis>, OpError> {
        resolve_slice(dims, starts, ends, axes, steps)
    }
}

impl Op for Slice {
    fn fold(&self, i: &[Option<&Tensor>]) -> Option<Result<Vec<Tensor>, OpError>> {
        let x = (*i.first()?)?;
        match &self.attrs {
            Some(a) => super::fold::slice(x, &a.starts, &a.ends, a.axes.as_deref(), None),
            None => {
                let ints = |k: usize| -> Option<Option<Vec<i64>>> {
                    match i.get(k).copied().flatten() {
                        None => Some(None),
                        Some(t) => t.to_i64_vec().ok().map(Some),
                    }
                };
                let (starts, ends) = (ints(1)??, ints(2)??);
                let (axes, steps) = (ints(3)?, ints(4)?);
                super::fold::slice(x, &starts, &ends, axes.as_deref(), steps.as_deref())
            }
        }
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        let (starts, ends, axes, steps) = match &self.attrs {
            Some(a) => (Some(a.starts.clone()), Some(a.ends.clone()), a.axes.clone(), None),
            None => {
                let opt = |i| inputs.opt(i).map(|f| value_ints(f, i)).transpose();
                let (axes, steps) = (opt(3)?, opt(4)?);
                if inputs.opt(3).is_some() && axes.as_ref().is_none_or(|a| a.is_none())
                    || inputs.opt(4).is_some() && steps.as_ref().is_none_or(|s| s.is_none())
                {
                    return Ok(vec![self.unknown(x)]);
                }
                (
                    value_ints(inputs.get(1)?, 1)?,
                    value_ints(inputs.get(2)?, 2)?,
                    axes.flatten(),
                    steps.flatten(),
                )
            }
        };
        let (Some(starts), Some(ends), Some(s)) = (starts, ends, &x.shape) else {
            return Ok(vec![self.unknown(x)]);
        };
        // Symbolic dims stay symbolic when their axis is not sliced.
        let rank = s.rank();
        let sliced: Vec<usize> = match &axes {
            Some(a) => a.iter().map(|&v| axis_of(v, rank)).collect::<Result<_, _>>()?,
            None => (0..starts.len()).collect(),
        };
        let dims: Vec<usize> = s.0.iter().map(|d| d.known().unwrap_or(0)).collect();
        let resolved = Slice::resolve(&dims, &starts, &ends, axes.as_deref(), steps.as_deref())?;
        let out =
            s.0.iter()
                .enumerate()
                .map(|(i, d)| match (sliced.contains(&i), d) {
                    (false, d) => d.clone(),
                    (true, Dim::Known(_)) => Dim::Known(resolved[i].len),
                    (true, _) => Dim::Unknown,
                })
                .collect();
        Ok(vec![Fact::new(x.dtype, Shape(out))])
    }

    fn value_inputs(&self) -> Vec<usize> {
        if self.attrs.is_some() { vec![] } else { vec![1, 2, 3, 4] }
    }
}

impl Slice {
    fn unknown(&self, x: &Fact) -> Fact {
        match x.rank() {
            Some(r) => Fact::ranked(x.dtype, r),
            None => Fact::unranked(x.dtype),
        }
    }
}

/// `Gather` along an axis with integer indices (negative indices count from the end).
#[derive(Debug, Clone)]
pub struct Gather {
    /// The axis.
    pub axis: i64,
}

impl Op for Gather {
    fn fold(&self, i: &[Option<&Tensor>]) -> Option<Result<Vec<Tensor>, OpError>> {
        super::fold::gather((*i.first()?)?, (*i.get(1)?)?, self.axis)
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let (x, idx) = (inputs.get(0)?, inputs.get(1)?);
        if !matches!(idx.dtype, DType::I32 | DType::I64) {
            return Err(OpError::InputDType {
                index: 1,
                dtype: idx.dtype,
                expected: "int32 or int64".into(),
            });
        }
        let (Some(sx), Some(si)) = (&x.shape, &idx.shape) else {
            return Ok(vec![Fact::unranked(x.dtype)]);
        };
        let axis = axis_of(self.axis, sx.rank())?;
        let mut out = sx.0[..axis].to_vec();
        out.extend(si.0.iter().cloned());
        out.extend(sx.0[axis + 1..].iter().cloned());
        Ok(vec![Fact::new(x.dtype, Shape(out))])
    }
}

/// `Expand`: broadcast the input to a shape given as input 1.
#[derive(Debug, Clone)]
pub struct Expand;

impl Op for Expand {
    fn fold(&self, i: &[Option<&Tensor>]) -> Option<Result<Vec<Tensor>, OpError>> {
        super::fold::expand((*i.first()?)?, (*i.get(1)?)?)
    }

    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        let Some(target) = value_ints(inputs.get(1)?, 1)? else {
            return Ok(vec![Fact::unranked(x.dtype)]);
        };
        if target.iter().any(|&d| d < 0) {
            return Err(OpError::Shape(format!("negative dim in expand shape {target:?}")));
        }
        let t = Shape(target.iter().map(|&d| Dim::Known(d as usize)).collect());
        let Some(s) = &x.shape else { return Ok(vec![Fact::ranked(x.dtype, t.rank())]) };
        Ok(vec![Fact::new(x.dtype, broadcast_shapes(&[s, &t])?)])
    }

    fn value_inputs(&self) -> Vec<usize> {
        vec![1]
    }
}

/// `Tile`: repeat the input `repeats[i]` times along each axis.
#[derive(Debug, Clone)]
pub struct Tile;

impl Op for Tile {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        let Some(reps) = value_ints(inputs.get(1)?, 1)? else {
            return Ok(vec![
                x.rank().map_or(Fact::unranked(x.dtype), |r| Fact::ranked(x.dtype, r)),
            ]);
        };
        let Some(s) = &x.shape else { return Ok(vec![Fact::ranked(x.dtype, reps.len())]) };
        if reps.len() != s.rank() || reps.iter().any(|&r| r < 0) {
            return Err(OpError::Shape(format!("repeats {reps:?} do not fit rank {}", s.rank())));
        }
        let out = s.0.iter().zip(&reps).map(|(d, &r)| match d {
            Dim::Known(n) => Dim::Known(n * r as usize),
            _ if r == 1 => d.clone(),
            _ => Dim::Unknown,
        });
        Ok(vec![Fact::new(x.dtype, Shape(out.collect()))])
    }

    fn value_inputs(&self) -> Vec<usize> {
        vec![1]
    }
}

/// Registers the data-movement ops.
pub fn register_all(r: &mut OpRegistry) {
    r.register("Transpose", |n| {
        check_inputs(n, 1, 1)?;
        Ok(Box::new(Transpose { perm: n.attrs.ints("perm")? }))
    });
    r.register("Concat", |n| {
        check_inputs(n, 1, usize::MAX)?;
        Ok(Box::new(Concat { axis: n.attrs.req_int("axis")? }))
    });
    r.register("Split", |n| {
        check_inputs(n, 1, 2)?;
        let num_outputs = n.attrs.int("num_outputs")?.map(|v| v.max(1) as usize);
        Ok(Box::new(Split {
            axis: n.attrs.int_or("axis", 0)?,
            split_attr: opt_attr_ints(n, "split", 13)?,
            outputs: n.outputs.len(),
            num_outputs,
        }))
    });
    r.register("Slice", |n| {
        if n.opset < 10 {
            check_inputs(n, 1, 1)?;
            let a = &n.attrs;
            let attrs = SliceAttrs {
                starts: a.req_ints("starts")?,
                ends: a.req_ints("ends")?,
                axes: a.ints("axes")?,
            };
            Ok(Box::new(Slice { attrs: Some(attrs) }))
        } else {
            check_inputs(n, 3, 5)?;
            Ok(Box::new(Slice { attrs: None }))
        }
    });
    r.register("Gather", |n| {
        check_inputs(n, 2, 2)?;
        Ok(Box::new(Gather { axis: n.attrs.int_or("axis", 0)? }))
    });
    r.register("Expand", |n| {
        check_inputs(n, 2, 2)?;
        Ok(Box::new(Expand))
    });
    r.register("Tile", |n| {
        check_inputs(n, 2, 2)?;
        Ok(Box::new(Tile))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slice_clamps_like_the_spec() {
        let r = Slice::resolve(&[10], &[-3], &[i64::MAX], None, None).unwrap();
        assert_eq!(r[0], SliceAxis { start: 7, step: 1, len: 3 });
        let r = Slice::resolve(&[10], &[i64::MAX], &[i64::MIN], None, Some(&[-1])).unwrap();
        assert_eq!(r[0], SliceAxis { start: 9, step: -1, len: 10 });
        let r = Slice::resolve(&[4], &[1], &[1000], None, Some(&[2])).unwrap();
        assert_eq!(r[0], SliceAxis { start: 1, step: 2, len: 2 });
    }

    #[test]
    fn uneven_num_outputs_split_rounds_chunks_up() {
        let s = Split { axis: 0, split_attr: None, outputs: 3, num_outputs: Some(3) };
        assert_eq!(s.sizes(7, None).unwrap(), vec![3, 3, 1]);
    }
}
