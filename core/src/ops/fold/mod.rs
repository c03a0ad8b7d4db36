//! Folding: computing a node's outputs on the host from values already known
//! there, instead of launching a kernel.
//!
//! Two places use it. At compile time a node whose inputs are all constants
//! becomes a constant (weights sliced, transposed or concatenated by the
//! exporter are rebuilt once, not on every run). At run time a node whose
//! inputs are known on the host — shape arithmetic such as
//! `Shape → Gather → Unsqueeze → Concat → Reshape` — never reaches a device:
//! its outputs stay on the host, and are uploaded only if a kernel later
//! reads them as data.
//!
//! Ops opt in by implementing [`Op::fold`] (views fold by themselves; `Shape` and
//! `Size` say [`Folding::FromShapes`] through [`Op::folds`]). Folding is exact: data
//! movement copies elements bit for bit, integer arithmetic wraps as the
//! kernels do, and float arithmetic is limited to `+ − × ÷` (computed in f64
//! and rounded once, which gives the correctly rounded result for f32, f16
//! and bf16 operands).

mod arith;
mod movement;

pub use arith::{binary, cast, constant_of_shape, range, unary};
pub use movement::{concat, expand, gather, slice, transpose, where_};

use super::{Fact, Op, broadcast_shapes};
use crate::dtype::DType;
use crate::error::OpError;
use crate::shape::{Shape, strides};
use crate::tensor::Tensor;

/// The most elements a node's output may have to be folded at run time: shape
/// vectors and the like, never activations.
pub const RUN_LIMIT: usize = 1024;

/// The most elements a node's output may have to be folded at compile time
/// (it becomes a resident constant).
pub const COMPILE_LIMIT: usize = 1 << 22;

/// How an op's outputs can be computed on the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Folding {
    /// From the values of all its inputs, through [`Op::fold`] (views: their
    /// input's value, reshaped).
    FromValues,
    /// From its inputs' shapes alone: inference already gives the output
    /// values (`Shape`, `Size`).
    FromShapes,
}

/// The host values of a node's outputs, when they can be computed here: every
/// output within `limit` elements, and either inference already gave them, or
/// the op is a view of a known value, or the op folds and every present input
/// is known. `None` otherwise (the node runs as a kernel).
pub fn fold(
    op: &dyn Op,
    inputs: &[Option<Fact>],
    outs: &[Fact],
    limit: usize,
) -> Option<Vec<Tensor>> {
    let small = |f: &Fact| f.dims().is_none_or(|d| d.iter().product::<usize>() <= limit);
    if outs.is_empty() || !outs.iter().all(small) {
        return None;
    }
    let given: Option<Vec<Tensor>> = outs.iter().map(|f| f.value.clone()).collect();
    if given.is_some() {
        return given;
    }
    if let Some(slot) = op.view_of() {
        // A view of a known value is that value, reshaped.
        let x = inputs.get(slot)?.as_ref()?.value.as_ref()?;
        return x.reshaped(outs[0].dims()?).ok().map(|t| vec![t]);
    }
    let values = match op.folds() {
        Folding::FromShapes => return None,
        Folding::FromValues => {
            let known: Option<Vec<Option<&Tensor>>> = inputs
                .iter()
                .map(|f| match f {
                    None => Some(None),
                    Some(f) => f.value.as_ref().map(Some),
                })
                .collect();
            op.fold(&known?)?.ok()?
        }
    };
    let fits = values.len() == outs.len()
        && values.iter().zip(outs).all(|(t, f)| {
            t.dtype() == f.dtype && t.numel() <= limit && f.dims().is_none_or(|d| d == t.shape())
        });
    fits.then_some(values)
}

/// Element width in bytes, for dtypes whose elements are whole bytes.
fn width(dtype: DType) -> Option<usize> {
    (dtype.is_byte_aligned() && dtype != DType::String).then(|| dtype.byte_size(1)).flatten()
}

/// For each element of `out` (row-major), the flat index of the element of a
/// tensor of shape `input` that broadcasting reads there.
fn broadcast_map(out: &[usize], input: &[usize]) -> Vec<usize> {
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
fn walk(out: &[usize], base: isize, stride: &[isize]) -> Vec<usize> {
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
fn pick(x: &Tensor, shape: Vec<usize>, from: &[usize]) -> Option<Result<Tensor, OpError>> {
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
fn concat_flat(x: &Tensor, y: &Tensor) -> Option<Tensor> {
    let mut bytes = x.bytes().ok()?.to_vec();
    bytes.extend_from_slice(y.bytes().ok()?);
    Tensor::from_bytes(x.dtype(), vec![x.numel() + y.numel()], bytes.into()).ok()
}

/// The broadcast shape of several concrete shapes.
fn broadcast(shapes: &[&[usize]]) -> Result<Vec<usize>, OpError> {
    let known: Vec<Shape> = shapes.iter().map(|s| Shape::known(s)).collect();
    let refs: Vec<&Shape> = known.iter().collect();
    Ok(broadcast_shapes(&refs)?.concrete().expect("known shapes broadcast to a known shape"))
}

#[cfg(test)]
mod tests;
