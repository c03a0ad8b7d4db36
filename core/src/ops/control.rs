//! Control flow. The executor runs these itself (subgraphs are plans of their own);
//! the op only carries the parsed branches and a fallback type inference.

use std::sync::Arc;

use super::{Fact, InferInputs, Op, OpRegistry, check_inputs};
use crate::dtype::DType;
use crate::error::OpError;
use crate::graph::Graph;
use crate::shape::{Dim, Shape};

/// `If(cond)`: runs `then_branch` or `else_branch`, whose outputs become the node's outputs.
#[derive(Debug, Clone)]
pub struct If {
    /// Run when the condition is true.
    pub then_branch: Arc<Graph>,
    /// Run when the condition is false.
    pub else_branch: Arc<Graph>,
}

/// Merges two facts about the same value coming from different branches.
pub fn merge_facts(a: &Fact, b: &Fact) -> Fact {
    let shape = match (&a.shape, &b.shape) {
        (Some(x), Some(y)) if x.rank() == y.rank() => Some(Shape(
            x.0.iter()
                .zip(&y.0)
                .map(|(p, q)| if p == q { p.clone() } else { Dim::Unknown })
                .collect(),
        )),
        _ => None,
    };
    Fact { dtype: a.dtype, shape, value: None, sequence: a.sequence }
}

fn declared(g: &Graph) -> Vec<Option<Fact>> {
    g.outputs.iter().map(|&o| g.value(o).declared.as_ref().and_then(Fact::from_declared)).collect()
}

impl Op for If {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let c = inputs.get(0)?;
        if c.dtype != DType::Bool {
            return Err(OpError::InputDType { index: 0, dtype: c.dtype, expected: "bool".into() });
        }
        let (t, e) = (declared(&self.then_branch), declared(&self.else_branch));
        if t.len() != e.len() {
            return Err(OpError::Shape(format!(
                "then_branch has {} outputs, else_branch {}",
                t.len(),
                e.len()
            )));
        }
        t.iter()
            .zip(&e)
            .enumerate()
            .map(|(i, (a, b))| match (a, b) {
                (Some(a), Some(b)) => Ok(merge_facts(a, b)),
                (Some(f), None) | (None, Some(f)) => Ok(Fact::unranked(f.dtype)),
                (None, None) => {
                    Err(OpError::Invalid(format!("If output {i} has no declared type")))
                }
            })
            .collect()
    }
}

/// A copy of a value to another provider, inserted by the planner (never in model files).
#[derive(Debug, Clone)]
pub struct DeviceCopy;

impl Op for DeviceCopy {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        Ok(vec![inputs.get(0)?.clone()])
    }
}

/// Registers the control-flow ops.
pub fn register_all(r: &mut OpRegistry) {
    r.register("If", |n| {
        check_inputs(n, 1, 1)?;
        let then_branch = n.attrs.req_graph("then_branch")?;
        let else_branch = n.attrs.req_graph("else_branch")?;
        for (name, g) in [("then_branch", &then_branch), ("else_branch", &else_branch)] {
            if g.outputs.len() != n.outputs.len() {
                return Err(OpError::BadAttribute {
                    name: name.into(),
                    reason: format!(
                        "has {} outputs, the node {}",
                        g.outputs.len(),
                        n.outputs.len()
                    ),
                });
            }
        }
        Ok(Box::new(If { then_branch, else_branch }))
    });
}
