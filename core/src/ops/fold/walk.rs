//! Element walks the folds share: broadcasting maps, strided gathers, element widths.

use crate::dtype::DType;
use crate::error::OpError;
use crate::ops::broadcast_shapes;
use crate::shape::{Shape, strides};
use crate::tensor::Tensor;

/// Element width in bytes, for dtypes whose elements are whole bytes.
pub(super) fn width(dtype: DType) -> Option<usize> {
    (dtype.is_byte_aligned() && dtype != DType::String).then(|| dtype.byte_size(1)).flatten()
}

/// For each element of `out` (row-major), the flat index of the element of a
/// tensor of shape `input` that broadcasting reads there.
pub(super) fn broadcast_map(out: &[usize], input: &[usize]) -> Vec<usize> {
    let lead = out.len() - input.len();
    let ist = strides(input);
    let mut st = vec![0; out.len()];
    for (i, &d) in input.iter().enumerate() {
        st[lead + i] = if d == 1 { 0 } else { ist[i] as isize };
    }
    walk(out, 0, &st)
}

/// For each element of `out` (row-major), `base + Σ index[i] · stride[i]`:
/// the flat source index of a strided view (strides may be negative or 0).
pub(super) fn walk(out: &[usize], base: isize, stride: &[isize]) -> Vec<usize> {
    let n: usize = out.iter().product();
    let mut idx = vec![0usize; out.len()];
    let mut res = Vec::with_capacity(n);
    let mut at = base;
    for _ in 0..n {
        res.push(at as usize);
        for a in (0..out.len()).rev() {
            idx[a] += 1;
            at += stride[a];
            if idx[a] < out[a] {
                break;
            }
            at -= stride[a] * out[a] as isize;
            idx[a] = 0;
        }
    }
    res
}

/// A tensor of `shape` whose element `k` is element `from[k]` of `x`, bit for bit.
pub(super) fn pick(
    x: &Tensor,
    shape: Vec<usize>,
    from: &[usize],
) -> Option<Result<Tensor, OpError>> {
    let w = width(x.dtype())?;
    let bytes = x.bytes().ok()?;
    let mut out = Vec::with_capacity(from.len() * w);
    for &i in from {
        out.extend_from_slice(bytes.get(i * w..(i + 1) * w)?);
    }
    Some(
        Tensor::from_bytes(x.dtype(), shape, out.into())
            .map_err(|e| OpError::Invalid(e.to_string())),
    )
}

/// The elements of `x` then those of `y`, as one flat tensor of `x`'s dtype.
pub(super) fn concat_flat(x: &Tensor, y: &Tensor) -> Option<Tensor> {
    let mut bytes = x.bytes().ok()?.to_vec();
    bytes.extend_from_slice(y.bytes().ok()?);
    Tensor::from_bytes(x.dtype(), vec![x.numel() + y.numel()], bytes.into()).ok()
}

/// The broadcast shape of several concrete shapes.
pub(super) fn broadcast(shapes: &[&[usize]]) -> Result<Vec<usize>, OpError> {
    let known: Vec<Shape> = shapes.iter().map(|s| Shape::known(s)).collect();
    let refs: Vec<&Shape> = known.iter().collect();
    Ok(broadcast_shapes(&refs)?.concrete().expect("known shapes broadcast to a known shape"))
}
