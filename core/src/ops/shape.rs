//! Shape and data-movement ops: the views (Reshape, Squeeze, Unsqueeze,
//! Flatten, Identity), Transpose, Concat, Split, Slice, Gather, Expand, Tile,
//! the shape queries, constant generators and casts.

use super::{Fact, InferInputs, Op, OpRegistry, broadcast_shapes, check_inputs};
use crate::dtype::DType;
use crate::error::OpError;
use crate::graph::Node;
use crate::shape::{Dim, Shape, normalize_axis};
use crate::tensor::Tensor;

fn axis_of(axis: i64, rank: usize) -> Result<usize, OpError> {
    normalize_axis(axis, rank)
        .ok_or_else(|| OpError::Shape(format!("axis {axis} is out of range for rank {rank}")))
}

fn value_ints(f: &Fact, index: usize) -> Result<Option<Vec<i64>>, OpError> {
    match &f.value {
        None => Ok(None),
        Some(v) => v.to_i64_vec().map(Some).map_err(|_| OpError::InputDType {
            index,
            dtype: v.dtype(),
            expected: "an integer tensor".into(),
        }),
    }
}

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
            None if target.iter().all(|&t| t > 0 || (t == 0 && self.allowzero)) => vec![],
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

/// One axis of a resolved slice: elements `start, start+step, …` (`len` of them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SliceAxis {
    /// First index.
    pub start: i64,
    /// Step (never 0).
    pub step: i64,
    /// Element count.
    pub len: usize,
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
        let mut out: Vec<SliceAxis> =
            dims.iter().map(|&d| SliceAxis { start: 0, step: 1, len: d }).collect();
        let n = starts.len();
        if ends.len() != n
            || axes.is_some_and(|a| a.len() != n)
            || steps.is_some_and(|s| s.len() != n)
        {
            return Err(OpError::Shape("starts, ends, axes and steps differ in length".into()));
        }
        let mut seen = vec![false; dims.len()];
        for i in 0..n {
            let axis = axis_of(axes.map_or(i as i64, |a| a[i]), dims.len())?;
            if std::mem::replace(&mut seen[axis], true) {
                return Err(OpError::Shape(format!("axis {axis} is sliced twice")));
            }
            let step = steps.map_or(1, |s| s[i]);
            if step == 0 {
                return Err(OpError::Shape("slice step is 0".into()));
            }
            let d = dims[axis] as i64;
            let norm = |v: i64| if v < 0 { v.saturating_add(d) } else { v };
            let (start, end) = if step > 0 {
                (norm(starts[i]).clamp(0, d), norm(ends[i]).clamp(0, d))
            } else {
                (norm(starts[i]).clamp(0, (d - 1).max(0)), norm(ends[i]).clamp(-1, d - 1))
            };
            let span = if step > 0 { end - start } else { start - end };
            let len = if span <= 0 || d == 0 { 0 } else { (span + step.abs() - 1) / step.abs() };
            out[axis] = SliceAxis { start, step, len: len as usize };
        }
        Ok(out)
    }
}

impl Op for Slice {
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
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        let mut f = Fact::known(DType::I64, &[]);
        if let Some(n) = x.shape.as_ref().and_then(Shape::numel) {
            f.value = Some(Tensor::scalar(n as i64));
        }
        Ok(vec![f])
    }
}

/// `Expand`: broadcast the input to a shape given as input 1.
#[derive(Debug, Clone)]
pub struct Expand;

impl Op for Expand {
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

/// `ConstantOfShape`: a tensor of the shape in input 0 filled with one value.
#[derive(Debug, Clone)]
pub struct ConstantOfShape {
    /// The fill value (a one-element tensor; default float 0).
    pub value: Tensor,
}

impl Op for ConstantOfShape {
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

/// `Cast` to a dtype (`saturate` applies to float8 targets).
#[derive(Debug, Clone)]
pub struct Cast {
    /// Target dtype.
    pub to: DType,
    /// Saturate out-of-range values for float8 targets.
    pub saturate: bool,
}

impl Op for Cast {
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
}

impl Op for CastLike {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        Ok(vec![inputs.get(0)?.with_dtype(inputs.get(1)?.dtype)])
    }

    fn in_place(&self) -> Vec<usize> {
        vec![0]
    }
}

fn opt_attr_ints(n: &Node, name: &str, before_opset: i64) -> Result<Option<Vec<i64>>, OpError> {
    if n.opset < before_opset { n.attrs.ints(name) } else { Ok(None) }
}

/// Registers the shape and data-movement family.
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
    r.register("Shape", |n| {
        check_inputs(n, 1, 1)?;
        Ok(Box::new(ShapeOf { start: n.attrs.int_or("start", 0)?, end: n.attrs.int("end")? }))
    });
    r.register("Size", |n| {
        check_inputs(n, 1, 1)?;
        Ok(Box::new(Size))
    });
    r.register("Expand", |n| {
        check_inputs(n, 2, 2)?;
        Ok(Box::new(Expand))
    });
    r.register("Tile", |n| {
        check_inputs(n, 2, 2)?;
        Ok(Box::new(Tile))
    });
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
        let to = n.attrs.req_int("to")?;
        let to = DType::from_onnx(to as i32).ok_or_else(|| OpError::BadAttribute {
            name: "to".into(),
            reason: format!("{to} is not a data type"),
        })?;
        Ok(Box::new(Cast { to, saturate: n.attrs.flag_or("saturate", true)? }))
    });
    r.register("CastLike", |n| {
        check_inputs(n, 2, 2)?;
        Ok(Box::new(CastLike { saturate: n.attrs.flag_or("saturate", true)? }))
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
