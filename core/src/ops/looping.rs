//! Loops over subgraphs: `Loop`, `Scan` and `SequenceMap`. Like `If`, the
//! executor runs them itself (`exec/looping.rs`); the ops carry the parsed
//! body and attributes, and a fallback type inference from the body's
//! declared outputs.

use std::sync::Arc;

use super::{Fact, InferInputs, Op, OpRegistry, check_inputs};
use crate::error::OpError;
use crate::graph::{Graph, Node};
use crate::shape::{Dim, Shape};

use super::control::merge_facts;

/// `Loop(M, cond, v_initial...)`: runs `body(iter_num, cond, v...)` while the
/// trip count and the condition allow; outputs the final loop-carried values,
/// then each scan output stacked over the iterations.
#[derive(Debug, Clone)]
pub struct Loop {
    /// `body(iter_num, cond_in, v_in...) -> (cond_out, v_out..., scan_out...)`.
    pub body: Arc<Graph>,
}

/// `Scan`: runs `body` once per slice of the scan inputs, threading the state
/// variables through; outputs the final states, then the scan outputs stacked.
#[derive(Debug, Clone)]
pub struct Scan {
    /// `body(state..., slice...) -> (state..., scan_out...)`.
    pub body: Arc<Graph>,
    /// How many of the node's inputs (the last ones) are scanned.
    pub num_scan_inputs: usize,
    /// Axis of each scan input that is iterated (may be negative).
    pub input_axes: Vec<i64>,
    /// Per scan input: `true` to iterate from the end.
    pub input_reverse: Vec<bool>,
    /// Axis of each scan output along which the slices are stacked (may be negative).
    pub output_axes: Vec<i64>,
    /// Per scan output: `true` to stack in reverse order.
    pub output_reverse: Vec<bool>,
    /// Opset 8's form: input 0 is the optional `sequence_lens`, every other
    /// input and output has a leading batch axis, and scan inputs are iterated
    /// along axis 1.
    pub batched: bool,
}

/// `SequenceMap(seq, extra...)`: runs `body` once per element of `seq`
/// (sequence extras give their element at the same position, tensor extras
/// themselves) and collects each body output into a sequence.
#[derive(Debug, Clone)]
pub struct SequenceMap {
    /// One input per node input, one output per node output.
    pub body: Arc<Graph>,
}

/// The facts the body declares for its outputs (`None` where it declares none).
pub fn declared_outputs(g: &Graph) -> Vec<Option<Fact>> {
    g.outputs.iter().map(|&o| g.value(o).declared.as_ref().and_then(Fact::from_declared)).collect()
}

/// A fact with one more dimension of unknown size inserted at `axis`
/// (`None` keeps the rank unknown).
pub fn stacked(f: &Fact, axis: Option<usize>) -> Fact {
    let shape = match (&f.shape, axis) {
        (Some(s), Some(a)) if a <= s.rank() => {
            let mut d = s.0.clone();
            d.insert(a, Dim::Unknown);
            Some(Shape(d))
        }
        _ => None,
    };
    Fact { dtype: f.dtype, shape, value: None, sequence: false }
}

/// Normalizes a possibly negative axis against a rank.
pub fn norm_axis(axis: i64, rank: usize) -> Option<usize> {
    let a = if axis < 0 { axis + rank as i64 } else { axis };
    (0..rank as i64).contains(&a).then_some(a as usize)
}

fn missing(i: usize) -> OpError {
    OpError::Invalid(format!("body output {i} has no declared type"))
}

impl Op for Loop {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let outs = declared_outputs(&self.body);
        let carried = inputs.len().saturating_sub(2);
        outs.iter()
            .enumerate()
            .skip(1)
            .map(|(i, f)| {
                if i <= carried {
                    match (f, inputs.opt(i + 1)) {
                        (Some(a), Some(b)) => Ok(merge_facts(a, b)),
                        (Some(f), None) | (None, Some(f)) => {
                            Ok(Fact { shape: None, value: None, ..f.clone() })
                        }
                        (None, None) => Err(missing(i)),
                    }
                } else {
                    f.as_ref().map(|f| stacked(f, Some(0))).ok_or_else(|| missing(i))
                }
            })
            .collect()
    }
}

impl Op for Scan {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let outs = declared_outputs(&self.body);
        let first = usize::from(self.batched);
        let states = inputs.len().saturating_sub(self.num_scan_inputs + first);
        outs.iter()
            .enumerate()
            .map(|(i, f)| {
                let f = match (f, inputs.opt(first + i).filter(|_| i < states)) {
                    (Some(f), _) => f.clone(),
                    (None, Some(f)) => f.clone(),
                    (None, None) => return Err(missing(i)),
                };
                if self.batched {
                    // Every output gains the batch axis; scan outputs the sequence axis too.
                    let f = stacked(&f, Some(0));
                    return Ok(if i < states { f } else { stacked(&f, Some(1)) });
                }
                if i < states {
                    return Ok(f);
                }
                let k = i - states;
                let axis = self.output_axes.get(k).copied().unwrap_or(0);
                let axis = f.rank().and_then(|r| norm_axis(axis, r + 1));
                Ok(stacked(&f, axis))
            })
            .collect()
    }
}

impl Op for SequenceMap {
    fn infer(&self, _inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        declared_outputs(&self.body)
            .into_iter()
            .enumerate()
            .map(|(i, f)| {
                f.map(|f| Fact::sequence_of(f.dtype, f.shape.filter(|_| !f.sequence)))
                    .ok_or_else(|| missing(i))
            })
            .collect()
    }
}

fn body_io(n: &Node, body: &Graph, inputs: usize, outputs: usize) -> Result<(), OpError> {
    if body.inputs.len() != inputs || body.outputs.len() != outputs {
        return Err(OpError::BadAttribute {
            name: "body".into(),
            reason: format!(
                "has {} inputs and {} outputs; {} node '{}' needs {inputs} and {outputs}",
                body.inputs.len(),
                body.outputs.len(),
                n.op_type,
                n.name
            ),
        });
    }
    Ok(())
}

fn flags(n: &Node, name: &str, len: usize) -> Result<Vec<bool>, OpError> {
    let v = n.attrs.ints_or(name, vec![0; len])?;
    if v.len() != len || v.iter().any(|&d| d != 0 && d != 1) {
        return Err(OpError::BadAttribute {
            name: name.into(),
            reason: format!("needs {len} values of 0 or 1, got {v:?}"),
        });
    }
    Ok(v.into_iter().map(|d| d == 1).collect())
}

fn axes(n: &Node, name: &str, len: usize) -> Result<Vec<i64>, OpError> {
    let v = n.attrs.ints_or(name, vec![0; len])?;
    if v.len() != len {
        return Err(OpError::BadAttribute {
            name: name.into(),
            reason: format!("needs {len} values, got {}", v.len()),
        });
    }
    Ok(v)
}

/// Registers `Loop`, `Scan` and `SequenceMap`.
pub fn register_all(r: &mut OpRegistry) {
    r.register("Loop", |n| {
        check_inputs(n, 2, usize::MAX)?;
        let body = n.attrs.req_graph("body")?;
        let carried = n.inputs.len() - 2;
        if n.outputs.len() < carried {
            return Err(OpError::Invalid(format!(
                "{carried} loop-carried values but only {} outputs",
                n.outputs.len()
            )));
        }
        body_io(n, &body, carried + 2, n.outputs.len() + 1)?;
        Ok(Box::new(Loop { body }))
    });
    r.register("Scan", |n| {
        let body = n.attrs.req_graph("body")?;
        let m = usize::try_from(n.attrs.req_int("num_scan_inputs")?).unwrap_or(0);
        let batched = n.opset < 9;
        let first = usize::from(batched);
        check_inputs(n, m + first, usize::MAX)?;
        if m == 0 {
            return Err(OpError::BadAttribute {
                name: "num_scan_inputs".into(),
                reason: "must be at least 1".into(),
            });
        }
        let states = n.inputs.len() - first - m;
        if n.outputs.len() < states {
            return Err(OpError::Invalid(format!(
                "{states} state variables but only {} outputs",
                n.outputs.len()
            )));
        }
        body_io(n, &body, states + m, n.outputs.len())?;
        let k = n.outputs.len() - states;
        let (input_reverse, input_axes, output_axes, output_reverse) = if batched {
            (flags(n, "directions", m)?, vec![0; m], vec![0; k], vec![false; k])
        } else {
            (
                flags(n, "scan_input_directions", m)?,
                axes(n, "scan_input_axes", m)?,
                axes(n, "scan_output_axes", k)?,
                flags(n, "scan_output_directions", k)?,
            )
        };
        Ok(Box::new(Scan {
            body,
            num_scan_inputs: m,
            input_axes,
            input_reverse,
            output_axes,
            output_reverse,
            batched,
        }))
    });
    r.register("SequenceMap", |n| {
        check_inputs(n, 1, usize::MAX)?;
        let body = n.attrs.req_graph("body")?;
        body_io(n, &body, n.inputs.len(), n.outputs.len())?;
        Ok(Box::new(SequenceMap { body }))
    });
}
