//! Host-side slicing and stacking of dense tensors, for scan inputs and
//! outputs and for splitting a tensor into a sequence.

use super::Error;
use crate::dtype::DType;
use crate::tensor::Tensor;

/// Bytes per element, for host slicing (sub-byte and string types are refused).
fn elem_bytes(t: &Tensor) -> Result<usize, Error> {
    let d = t.dtype();
    match d.byte_size(1) {
        Some(n) if d.bits() % 8 == 0 => Ok(n),
        _ => Err(Error::Internal(format!("{d} tensors cannot be scanned"))),
    }
}

/// Elements `start..start + len` of `t` along `axis`.
pub(super) fn narrow(t: &Tensor, axis: usize, start: usize, len: usize) -> Result<Tensor, Error> {
    let eb = elem_bytes(t)?;
    let dims = t.shape();
    let outer: usize = dims[..axis].iter().product();
    let inner: usize = dims[axis + 1..].iter().product::<usize>() * eb;
    let bytes = t.bytes().map_err(|e| Error::Internal(e.to_string()))?;
    let mut out = Vec::with_capacity(outer * inner * len);
    for o in 0..outer {
        let at = (o * dims[axis] + start) * inner;
        out.extend_from_slice(&bytes[at..at + len * inner]);
    }
    let mut shape = dims.to_vec();
    shape[axis] = len;
    Tensor::from_bytes(t.dtype(), shape, out.into()).map_err(|e| Error::Internal(e.to_string()))
}

/// Slice `index` of `t` along `axis`, with that axis removed.
pub(super) fn take(t: &Tensor, axis: usize, index: usize) -> Result<Tensor, Error> {
    let mut shape = t.shape().to_vec();
    shape.remove(axis);
    narrow(t, axis, index, 1)?.reshaped(shape).map_err(|e| Error::Internal(e.to_string()))
}

/// Stacks equally shaped `parts` along a new `axis`.
pub(super) fn stack(
    parts: &[Tensor],
    axis: usize,
    dtype: DType,
    empty: &[usize],
) -> Result<Tensor, Error> {
    let Some(first) = parts.first() else {
        // No iterations: an empty tensor, with the body's slice shape where known.
        let mut shape = empty.to_vec();
        shape.insert(axis.min(shape.len()), 0);
        return Ok(Tensor::zeros(dtype, shape));
    };
    let dims = first.shape();
    if let Some(p) = parts.iter().find(|p| p.shape() != dims || p.dtype() != first.dtype()) {
        return Err(Error::Internal(format!(
            "scan output slices differ: {:?} {} and {:?} {}",
            dims,
            first.dtype(),
            p.shape(),
            p.dtype()
        )));
    }
    let eb = elem_bytes(first)?;
    let outer: usize = dims[..axis].iter().product();
    let inner: usize = dims[axis..].iter().product::<usize>() * eb;
    let mut out = Vec::with_capacity(outer * inner * parts.len());
    for o in 0..outer {
        for p in parts {
            let bytes = p.bytes().map_err(|e| Error::Internal(e.to_string()))?;
            out.extend_from_slice(&bytes[o * inner..(o + 1) * inner]);
        }
    }
    let mut shape = dims.to_vec();
    shape.insert(axis, parts.len());
    Tensor::from_bytes(first.dtype(), shape, out.into()).map_err(|e| Error::Internal(e.to_string()))
}
