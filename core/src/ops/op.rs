//! The operator trait: what every parsed op tells the planner and the
//! executor (inference, views, in-place reuse, host evaluation, folding).

use std::any::Any;
use std::fmt;

use super::fact::{Fact, InferInputs};
use crate::error::OpError;
use crate::graph::Node;

/// A parsed operator: parameters plus the facts the planner needs.
pub trait Op: fmt::Debug + Send + Sync + Any {
    /// Output types and shapes from the input facts.
    ///
    /// Called by the planner with symbolic shapes and by the executor with
    /// concrete ones (and the host values of [`value_inputs`](Op::value_inputs)),
    /// so one function serves both. Returns one fact per output slot.
    ///
    /// # Errors
    /// [`OpError`] when inputs violate the op's contract.
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError>;

    /// Inputs whose *values* the output shape depends on (Reshape's `shape`,
    /// Slice's `starts`…). The executor makes them available on the host.
    fn value_inputs(&self) -> Vec<usize> {
        vec![]
    }

    /// Input slots whose buffer output 0 may overwrite, when that input dies here
    /// and has the output's dtype and byte size.
    fn in_place(&self) -> Vec<usize> {
        vec![]
    }

    /// `(output, input)` slot pairs where a caller may have the output written
    /// into the buffer of the input (a KV cache's past and present sharing
    /// one buffer; see `exec::run_sharing`). Every backend's kernel for the op
    /// must give the same results when the two are one buffer.
    fn shares_buffer(&self) -> Vec<(usize, usize)> {
        vec![]
    }

    /// When output 0 is a zero-copy view of an input (same bytes, new shape): that input's slot.
    fn view_of(&self) -> Option<usize> {
        None
    }

    /// The dtypes the model declares for the node's outputs (`None` where
    /// undeclared), given once after building. Ops whose output dtypes the
    /// spec leaves to the model take them from here; others ignore it.
    fn declared_outputs(&mut self, _dtypes: &[Option<crate::dtype::DType>]) {}

    /// Whether this node runs on the host through [`eval_host`](Op::eval_host)
    /// instead of a provider's kernel, given its inputs' facts: string tensors
    /// (no device holds them) and ops only the host implements.
    fn runs_on_host(&self, _inputs: &[Option<Fact>]) -> bool {
        false
    }

    /// Computes the outputs on the host; called only when
    /// [`runs_on_host`](Op::runs_on_host) said so. Absent inputs are `None`.
    ///
    /// # Errors
    /// [`OpError`] for inputs that violate the op's contract.
    fn eval_host(
        &self,
        _inputs: &[Option<crate::tensor::Tensor>],
    ) -> Result<Vec<crate::tensor::Tensor>, OpError> {
        Err(OpError::Unsupported("evaluation on the host".into()))
    }

    /// How this op's outputs can be computed on the host (see [`fold`](super::fold)). The
    /// default: from the values of all inputs, through [`fold`](Op::fold).
    fn folds(&self) -> Folding {
        Folding::FromValues
    }

    /// Computes the outputs on the host from the values of all inputs (absent
    /// ones `None`). `None` when this op, or these dtypes or attributes, are
    /// not folded (the default: a kernel runs).
    fn fold(
        &self,
        _inputs: &[Option<&crate::tensor::Tensor>],
    ) -> Option<Result<Vec<crate::tensor::Tensor>, OpError>> {
        None
    }
}

/// Downcasts an op to its concrete type.
pub fn downcast<T: Op>(op: &dyn Op) -> Option<&T> {
    (op as &dyn Any).downcast_ref::<T>()
}

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

/// Checks the number of inputs against an inclusive range.
///
/// # Errors
/// [`OpError::InputCount`].
pub fn check_inputs(node: &Node, min: usize, max: usize) -> Result<(), OpError> {
    let n = node.inputs.len();
    if n < min || n > max {
        let expected = if min == max { min.to_string() } else { format!("{min} to {max}") };
        return Err(OpError::InputCount { expected, actual: n });
    }
    Ok(())
}
