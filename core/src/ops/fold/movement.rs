//! Folding data movement: outputs are elements of the inputs, copied bit for bit.

use super::walk::{broadcast, broadcast_map, pick, walk, width};
use crate::dtype::DType;
use crate::error::OpError;
use crate::ops::axes::axis_of;
use crate::ops::axes::resolve_slice;
use crate::shape::strides;
use crate::tensor::Tensor;

type Folded = Option<Result<Vec<Tensor>, OpError>>;

fn one(r: Option<Result<Tensor, OpError>>) -> Folded {
    r.map(|r| r.map(|t| vec![t]))
}

fn ints(t: &Tensor) -> Option<Vec<i64>> {
    t.to_i64_vec().ok()
}

/// `Gather(x, indices)` along `axis`.
pub fn gather(x: &Tensor, indices: &Tensor, axis: i64) -> Folded {
    let idx = ints(indices)?;
    let shape = x.shape();
    let axis = match axis_of(axis, shape.len()) {
        Ok(a) => a,
        Err(e) => return Some(Err(e)),
    };
    let (outer, n): (usize, usize) = (shape[..axis].iter().product(), shape[axis]);
    let inner: usize = shape[axis + 1..].iter().product();
    let mut rows = Vec::with_capacity(idx.len());
    for &i in &idx {
        let j = if i < 0 { i + n as i64 } else { i };
        if j < 0 || j >= n as i64 {
            return Some(Err(OpError::Invalid(format!(
                "Gather index {i} is out of bounds for axis {axis} of size {n}"
            ))));
        }
        rows.push(j as usize);
    }
    let mut from = Vec::with_capacity(outer * rows.len() * inner);
    for o in 0..outer {
        for &r in &rows {
            from.extend((0..inner).map(|k| (o * n + r) * inner + k));
        }
    }
    let mut out = shape[..axis].to_vec();
    out.extend_from_slice(indices.shape());
    out.extend_from_slice(&shape[axis + 1..]);
    one(pick(x, out, &from))
}

/// `Concat` of the inputs along `axis`.
pub fn concat(inputs: &[&Tensor], axis: i64) -> Folded {
    let first = inputs.first()?;
    let w = width(first.dtype())?;
    let rank = first.shape().len();
    let axis = match axis_of(axis, rank) {
        Ok(a) => a,
        Err(e) => return Some(Err(e)),
    };
    let outer: usize = first.shape()[..axis].iter().product();
    let mut shape = first.shape().to_vec();
    shape[axis] = inputs.iter().map(|t| t.shape().get(axis).copied().unwrap_or(0)).sum();
    let mut out = Vec::with_capacity(shape.iter().product::<usize>() * w);
    for o in 0..outer {
        for t in inputs {
            if t.dtype() != first.dtype() || t.shape().len() != rank {
                return None;
            }
            let chunk = t.shape()[axis..].iter().product::<usize>() * w;
            out.extend_from_slice(t.bytes().ok()?.get(o * chunk..(o + 1) * chunk)?);
        }
    }
    Some(
        Tensor::from_bytes(first.dtype(), shape, out.into())
            .map(|t| vec![t])
            .map_err(|e| OpError::Invalid(e.to_string())),
    )
}

/// `Slice(x, starts, ends, axes, steps)`.
pub fn slice(
    x: &Tensor,
    starts: &[i64],
    ends: &[i64],
    axes: Option<&[i64]>,
    steps: Option<&[i64]>,
) -> Folded {
    let resolved = match resolve_slice(x.shape(), starts, ends, axes, steps) {
        Ok(r) => r,
        Err(e) => return Some(Err(e)),
    };
    let st = strides(x.shape());
    let shape: Vec<usize> = resolved.iter().map(|a| a.len).collect();
    // Steps may be negative: the walk starts at the first element and moves by signed strides.
    let base: isize = resolved.iter().zip(&st).map(|(a, &s)| a.start as isize * s as isize).sum();
    let step: Vec<isize> =
        resolved.iter().zip(&st).map(|(a, &s)| a.step as isize * s as isize).collect();
    let from = walk(&shape, base, &step);
    one(pick(x, shape, &from))
}

/// `Transpose(x)` with a validated permutation.
pub fn transpose(x: &Tensor, perm: &[usize]) -> Folded {
    let st = strides(x.shape());
    let shape: Vec<usize> = perm.iter().map(|&a| x.shape()[a]).collect();
    let stride: Vec<isize> = perm.iter().map(|&a| st[a] as isize).collect();
    let from = walk(&shape, 0, &stride);
    one(pick(x, shape, &from))
}

/// `Expand(x, shape)`.
pub fn expand(x: &Tensor, target: &Tensor) -> Folded {
    let t: Vec<usize> = ints(target)?.iter().map(|&d| d.max(0) as usize).collect();
    let shape = match broadcast(&[x.shape(), &t]) {
        Ok(s) => s,
        Err(e) => return Some(Err(e)),
    };
    let from = broadcast_map(&shape, x.shape());
    one(pick(x, shape, &from))
}

/// `Where(condition, x, y)`.
pub fn where_(c: &Tensor, x: &Tensor, y: &Tensor) -> Folded {
    if c.dtype() != DType::Bool || x.dtype() != y.dtype() {
        return None;
    }
    let shape = match broadcast(&[c.shape(), x.shape(), y.shape()]) {
        Ok(s) => s,
        Err(e) => return Some(Err(e)),
    };
    let cond = ints(c)?;
    let (mc, mx, my) = (
        broadcast_map(&shape, c.shape()),
        broadcast_map(&shape, x.shape()),
        broadcast_map(&shape, y.shape()),
    );
    // Elements of x and y side by side: x's first, then y's.
    let both = super::walk::concat_flat(x, y)?;
    let nx = x.numel();
    let from: Vec<usize> =
        (0..mc.len()).map(|k| if cond[mc[k]] != 0 { mx[k] } else { nx + my[k] }).collect();
    one(pick(&both, shape, &from))
}
