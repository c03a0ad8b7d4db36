//! Axes and index arguments the op families share: normalized axes, integer
//! value inputs, opset-dependent attributes, resolved slices.

use crate::error::OpError;
use crate::graph::Node;
use crate::ops::Fact;
use crate::shape::normalize_axis;

/// An axis in `-rank..rank`, normalized.
///
/// # Errors
/// [`OpError::Shape`] when it is out of range.
pub fn axis_of(axis: i64, rank: usize) -> Result<usize, OpError> {
    normalize_axis(axis, rank)
        .ok_or_else(|| OpError::Shape(format!("axis {axis} is out of range for rank {rank}")))
}

/// The integer contents of a value input, when known.
///
/// # Errors
/// [`OpError::InputDType`] when the value is not an integer tensor.
pub fn value_ints(f: &Fact, index: usize) -> Result<Option<Vec<i64>>, OpError> {
    match &f.value {
        None => Ok(None),
        Some(v) => v.to_i64_vec().map(Some).map_err(|_| OpError::InputDType {
            index,
            dtype: v.dtype(),
            expected: "an integer tensor".into(),
        }),
    }
}

/// An attribute that became an input at `before_opset`.
///
/// # Errors
/// [`OpError::BadAttribute`] for a malformed attribute.
pub fn opt_attr_ints(n: &Node, name: &str, before_opset: i64) -> Result<Option<Vec<i64>>, OpError> {
    if n.opset < before_opset { n.attrs.ints(name) } else { Ok(None) }
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

/// Resolves starts/ends/axes/steps against concrete dims, clamping as the spec says.
///
/// # Errors
/// [`OpError::Shape`] for mismatched lengths, bad axes or a zero step.
pub fn resolve_slice(
    dims: &[usize],
    starts: &[i64],
    ends: &[i64],
    axes: Option<&[i64]>,
    steps: Option<&[i64]>,
) -> Result<Vec<SliceAxis>, OpError> {
    let mut out: Vec<SliceAxis> =
        dims.iter().map(|&d| SliceAxis { start: 0, step: 1, len: d }).collect();
    let n = starts.len();
    if ends.len() != n || axes.is_some_and(|a| a.len() != n) || steps.is_some_and(|s| s.len() != n)
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
