//! `NegativeLogLikelihoodLoss` and `SoftmaxCrossEntropyLoss` as gathers,
//! masks and reductions.

use super::builder::{Builder, attrs, decline};
use crate::error::OpError;
use crate::graph::{Attribute, Node};
use crate::ops::Fact;
use crate::ops::stats::{Loss, LossReduction};

/// Emits `loss` for `node` (inputs `[scores, target, weight?]`, outputs
/// `[loss, log_prob?]`): the picked negated scores, weighted, with ignored
/// targets weighing nothing, then reduced.
///
/// # Errors
/// [`OpError`] when the inputs' ranks are unknown.
pub fn decompose(
    loss: &Loss,
    node: &Node,
    inputs: &[Option<Fact>],
    b: &mut Builder,
) -> Result<(), OpError> {
    let (Some(x), Some(t)) = (node.input(0), node.input(1)) else {
        return Err(OpError::MissingInput(if node.input(0).is_none() { 0 } else { 1 }));
    };
    let fact = |i: usize| inputs.get(i).and_then(Option::as_ref);
    let (Some(xf), Some(tf)) = (fact(0), fact(1)) else {
        return Err(decline("input facts are unknown"));
    };
    if xf.rank().is_none() {
        return Err(decline("the scores' rank is unknown"));
    }
    let dtype = xf.dtype;
    // Log-probabilities over the classes (axis 1), written to the optional output.
    let scores = if loss.softmax {
        let lp = b.output(node, 1);
        b.emit("LogSoftmax", &[Some(x)], attrs(vec![("axis", Attribute::Int(1))]), vec![Some(lp)]);
        lp
    } else {
        x
    };
    // Targets to pick with: ignored ones replaced by class 0 (their weight is 0).
    let (target, keep) = match loss.ignore_index {
        Some(ii) => {
            let ii = b.scalar(tf.dtype, ii as f64)?;
            let ignored = b.op0("Equal", &[t, ii]);
            let keep = b.op0("Not", &[ignored]);
            let zero = b.scalar(tf.dtype, 0.0)?;
            (b.op0("Where", &[ignored, zero, t]), Some(keep))
        }
        None => (t, None),
    };
    let idx = b.unsqueeze(target, &[1]);
    let picked = b.op("GatherElements", &[scores, idx], attrs(vec![("axis", Attribute::Int(1))]));
    let picked = b.squeeze(picked, &[1]);
    let neg = b.op0("Neg", &[picked]);
    // The weight of each element: its class weight, zero where ignored.
    let weight = match (node.input(2), keep) {
        (Some(w), Some(keep)) => {
            let w = b.op("Gather", &[w, target], attrs(vec![("axis", Attribute::Int(0))]));
            let zero = b.scalar(dtype, 0.0)?;
            Some(b.op0("Where", &[keep, w, zero]))
        }
        (Some(w), None) => {
            Some(b.op("Gather", &[w, target], attrs(vec![("axis", Attribute::Int(0))])))
        }
        (None, Some(keep)) => Some(b.cast(keep, dtype)),
        (None, None) => None,
    };
    let weighted = match weight {
        Some(w) => b.op0("Mul", &[neg, w]),
        None => neg,
    };
    let out = b.output(node, 0);
    let keepdims = || attrs(vec![("keepdims", Attribute::Int(0))]);
    match (loss.reduction, weight) {
        (LossReduction::None, _) => {
            b.emit("Identity", &[Some(weighted)], attrs(vec![]), vec![Some(out)])
        }
        (LossReduction::Sum, _) => {
            b.emit("ReduceSum", &[Some(weighted)], keepdims(), vec![Some(out)])
        }
        (LossReduction::Mean, None) => {
            b.emit("ReduceMean", &[Some(weighted)], keepdims(), vec![Some(out)]);
        }
        (LossReduction::Mean, Some(w)) => {
            let num = b.reduce_all("ReduceSum", weighted);
            let den = b.reduce_all("ReduceSum", w);
            b.emit("Div", &[Some(num), Some(den)], attrs(vec![]), vec![Some(out)]);
        }
    }
    Ok(())
}
