//! Facts through the nodes that own subgraphs (`If`, `Loop`, `Scan`,
//! `SequenceMap`): what each body is given, and what the node outputs from
//! what its bodies output. Inference and placement both use them, so a
//! body is compiled with exactly the facts inference saw.

use std::sync::Arc;

use crate::dtype::DType;
use crate::error::OpError;
use crate::graph::Graph;
use crate::ops::control::{If, merge_facts};
use crate::ops::looping::{Loop, Scan, SequenceMap, norm_axis, stacked};
use crate::ops::{Fact, Op, downcast};
use crate::shape::Shape;

/// A body of a control node and the facts of its inputs.
pub struct Body {
    /// The subgraph.
    pub graph: Arc<Graph>,
    /// Its attribute name (`then_branch`, `else_branch`, `body`).
    pub name: &'static str,
    /// Facts of its graph inputs (for bodies that declare none).
    pub inputs: Vec<Option<Fact>>,
}

/// A fact with no known contents and, where `keep_shape` is false, no known shape.
fn loose(f: &Fact, keep_shape: bool) -> Fact {
    Fact {
        dtype: f.dtype,
        shape: if keep_shape { f.shape.clone() } else { None },
        value: None,
        sequence: f.sequence,
    }
}

/// The fact of one slice of `f` with `axes` (in increasing order) removed.
fn sliced(f: &Fact, axes: &[i64]) -> Fact {
    let shape = f.shape.as_ref().and_then(|s| {
        let mut d = s.0.clone();
        let mut idx: Vec<usize> =
            axes.iter().map(|&a| norm_axis(a, s.rank())).collect::<Option<_>>()?;
        idx.sort_unstable();
        for a in idx.into_iter().rev() {
            d.remove(a);
        }
        Some(Shape(d))
    });
    Fact { dtype: f.dtype, shape, value: None, sequence: false }
}

fn out_or_unknown(f: Option<&Fact>) -> Fact {
    f.cloned().unwrap_or_else(|| Fact::unranked(DType::F32))
}

/// The value of an `If` condition when it is known now, as the live branch:
/// `Some(true)` for `then_branch`.
///
/// # Errors
/// [`OpError`] for a condition of more than one element.
pub fn resolved(cond: Option<&Fact>) -> Result<Option<bool>, OpError> {
    let Some(t) = cond.and_then(|f| f.value.as_ref()) else { return Ok(None) };
    match t.to_i64_vec()?.as_slice() {
        [c] => Ok(Some(*c != 0)),
        _ => Err(OpError::Shape("the If condition must hold one element".into())),
    }
}

/// The bodies a control node runs, with their input facts; `None` for any
/// other node. An `If` whose condition is known has only its live branch.
///
/// # Errors
/// [`OpError`] for a malformed condition.
pub fn bodies(op: &dyn Op, in_facts: &[Option<Fact>]) -> Result<Option<Vec<Body>>, OpError> {
    let fact = |i: usize| in_facts.get(i).cloned().flatten();
    let n = in_facts.len();
    if let Some(if_op) = downcast::<If>(op) {
        let body = |g: &Arc<Graph>, name| Body { graph: g.clone(), name, inputs: vec![] };
        return Ok(Some(match resolved(in_facts.first().and_then(Option::as_ref))? {
            Some(true) => vec![body(&if_op.then_branch, "then_branch")],
            Some(false) => vec![body(&if_op.else_branch, "else_branch")],
            None => vec![
                body(&if_op.then_branch, "then_branch"),
                body(&if_op.else_branch, "else_branch"),
            ],
        }));
    }
    if let Some(l) = downcast::<Loop>(op) {
        let mut inputs =
            vec![Some(Fact::known(DType::I64, &[])), Some(Fact::known(DType::Bool, &[]))];
        // Loop-carried values may change shape from one iteration to the next.
        inputs.extend((2..n).map(|i| fact(i).map(|f| loose(&f, false))));
        return Ok(Some(vec![Body { graph: l.body.clone(), name: "body", inputs }]));
    }
    if let Some(sc) = downcast::<Scan>(op) {
        let first = usize::from(sc.batched);
        let states = n - first - sc.num_scan_inputs;
        let mut inputs = Vec::with_capacity(n - first);
        for i in first..first + states {
            let f = fact(i);
            inputs.push(f.map(|f| if sc.batched { sliced(&f, &[0]) } else { loose(&f, true) }));
        }
        for (j, i) in (first + states..n).enumerate() {
            let axes: Vec<i64> = if sc.batched { vec![0, 1] } else { vec![sc.input_axes[j]] };
            inputs.push(fact(i).map(|f| sliced(&f, &axes)));
        }
        return Ok(Some(vec![Body { graph: sc.body.clone(), name: "body", inputs }]));
    }
    if let Some(m) = downcast::<SequenceMap>(op) {
        let inputs = (0..n).map(|i| fact(i).map(|f| Fact { sequence: false, ..loose(&f, true) }));
        return Ok(Some(vec![Body {
            graph: m.body.clone(),
            name: "body",
            inputs: inputs.collect(),
        }]));
    }
    Ok(None)
}

/// The facts of a control node's outputs, from its bodies' output facts (in
/// the order [`bodies`] gave the bodies).
pub fn outputs(op: &dyn Op, in_facts: &[Option<Fact>], bodies: &[Vec<Option<Fact>>]) -> Vec<Fact> {
    let fact = |i: usize| in_facts.get(i).cloned().flatten();
    let n = in_facts.len();
    if downcast::<If>(op).is_some() {
        return match bodies {
            [one] => one.iter().map(|f| out_or_unknown(f.as_ref())).collect(),
            [a, b, ..] => a
                .iter()
                .zip(b)
                .map(|(a, b)| match (a, b) {
                    (Some(a), Some(b)) => merge_facts(a, b),
                    (Some(f), None) | (None, Some(f)) => Fact::unranked(f.dtype),
                    (None, None) => Fact::unranked(DType::F32),
                })
                .collect(),
            [] => vec![],
        };
    }
    let Some(outs) = bodies.first() else { return vec![] };
    if downcast::<Loop>(op).is_some() {
        return (1..outs.len())
            .map(|i| match (outs[i].as_ref(), fact(i + 1)) {
                (Some(a), Some(b)) if i + 1 < n => merge_facts(a, &b),
                (Some(a), _) if i + 1 < n => loose(a, false),
                (Some(a), _) => stacked(a, Some(0)),
                (None, _) => Fact::unranked(DType::F32),
            })
            .collect();
    }
    if let Some(sc) = downcast::<Scan>(op) {
        let first = usize::from(sc.batched);
        let states = n - first - sc.num_scan_inputs;
        return outs
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let f = out_or_unknown(f.as_ref());
                match (sc.batched, i < states) {
                    (true, true) => stacked(&f, Some(0)),
                    (true, false) => stacked(&stacked(&f, Some(0)), Some(0)),
                    (false, true) => f,
                    (false, false) => {
                        let axis = sc.output_axes[i - states];
                        stacked(&f, f.rank().and_then(|r| norm_axis(axis, r + 1)))
                    }
                }
            })
            .collect();
    }
    outs.iter()
        .map(|f| {
            let f = out_or_unknown(f.as_ref());
            Fact::sequence_of(f.dtype, f.shape)
        })
        .collect()
}
