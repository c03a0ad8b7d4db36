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
mod walk;

pub use arith::{binary, cast, constant_of_shape, range, unary};
pub use movement::{concat, expand, gather, slice, transpose, where_};

use crate::ops::fact::Fact;
pub use crate::ops::op::Folding;
use crate::ops::op::Op;
use crate::tensor::Tensor;

/// The most elements a node's output may have to be folded at run time: shape
/// vectors and the like, never activations.
pub const RUN_LIMIT: usize = 1024;

/// The most elements a node's output may have to be folded at compile time
/// (it becomes a resident constant).
pub const COMPILE_LIMIT: usize = 1 << 22;

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

#[cfg(test)]
mod tests;
