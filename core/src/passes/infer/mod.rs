//! Facts for a whole graph, before any rewrite: every node's op is built
//! once, its outputs' dtypes and (symbolic) shapes inferred from its inputs',
//! and nodes over constants computed now (their outputs' facts hold the
//! values). Bodies of `If`, `Loop`, `Scan` and `SequenceMap` are inferred
//! with the facts their node gives them, so what follows a control node is
//! known too. The rewrite passes check their chains against these facts, and
//! placement takes them as they are.

pub mod control;

use std::collections::HashMap;

use super::error::PassError;
use crate::error::OpError;
use crate::graph::{Graph, Node, ValueInfo, topological_order};
use crate::ops::fold::{self, COMPILE_LIMIT};
use crate::ops::{Fact, InferInputs, Op, OpRegistry};
use crate::tensor::Tensor;

/// What a subgraph sees of its enclosing graphs: facts by name.
pub type OuterFacts = HashMap<String, Fact>;

/// The facts of one graph.
pub struct Inferred {
    /// Each node's parsed op, by node index (taken by placement).
    pub ops: Vec<Option<Box<dyn Op>>>,
    /// Each value's fact (`None`: never produced, e.g. an omitted output).
    pub facts: Vec<Option<Fact>>,
    /// Each node's output facts by slot, omitted outputs included (taken by
    /// placement; `None` for control nodes, whose bodies give them).
    pub outputs: Vec<Option<Vec<Fact>>>,
    /// The nodes computed from constants now: their outputs' facts hold the values.
    pub folded: Vec<bool>,
}

impl Inferred {
    /// The facts of a node's inputs, by slot.
    pub fn inputs(&self, node: &Node) -> Vec<Option<Fact>> {
        node.inputs.iter().map(|i| i.and_then(|v| self.facts[v.index()].clone())).collect()
    }

    /// The facts a subgraph of this graph sees: `outer`'s, then this graph's
    /// values by name, with contents only for constants.
    pub fn scope(&self, graph: &Graph, outer: &OuterFacts) -> OuterFacts {
        let mut constant = vec![false; graph.values.len()];
        for &v in graph.initializers.keys() {
            constant[v.index()] = true;
        }
        for (i, node) in graph.nodes.iter().enumerate() {
            if self.folded[i] {
                for v in node.outputs.iter().flatten() {
                    constant[v.index()] = true;
                }
            }
        }
        let mut scope = outer.clone();
        for (i, f) in self.facts.iter().enumerate() {
            if let Some(f) = f {
                let mut f = f.clone();
                if !constant[i] {
                    f.value = None;
                }
                scope.insert(graph.values[i].name.clone(), f);
            }
        }
        scope
    }
}

/// Builds a node's op, telling it the output dtypes the model declares.
///
/// # Errors
/// [`OpError`] from the registry or the op's builder.
pub fn build(
    registry: &OpRegistry,
    values: &[ValueInfo],
    node: &Node,
) -> Result<Box<dyn Op>, OpError> {
    let mut op = registry.build(node)?;
    let declared: Vec<_> = node
        .outputs
        .iter()
        .map(|o| o.and_then(|v| values[v.index()].declared.as_ref()?.tensor_dtype()))
        .collect();
    op.declared_outputs(&declared);
    Ok(op)
}

/// The facts of a (non-control) node's outputs, and their values when they
/// can be computed now from constants.
///
/// # Errors
/// [`OpError`] when the inputs violate the op's contract, or an input has no fact.
pub fn outputs(
    op: &dyn Op,
    node: &Node,
    in_facts: &[Option<Fact>],
) -> Result<(Vec<Fact>, Option<Vec<Tensor>>), OpError> {
    if let Some((slot, _)) =
        node.inputs.iter().enumerate().find(|(i, v)| v.is_some() && in_facts[*i].is_none())
    {
        return Err(OpError::Invalid(format!("input {slot} has no inferable type")));
    }
    let out = op.infer(&InferInputs::new(in_facts))?;
    let values = fold::fold(op, in_facts, &out, COMPILE_LIMIT);
    Ok((out, values))
}

/// Infers every value of `graph`. `input_facts` stand in for the facts of
/// graph inputs whose types the model does not declare (loop bodies).
///
/// # Errors
/// [`PassError`] naming the node whose op could not be built or inferred.
pub fn infer(
    graph: &Graph,
    registry: &OpRegistry,
    outer: &OuterFacts,
    input_facts: &[Option<Fact>],
) -> Result<Inferred, PassError> {
    let order = topological_order(graph)?;
    let mut inferred = Inferred {
        ops: (0..graph.nodes.len()).map(|_| None).collect(),
        facts: vec![None; graph.values.len()],
        outputs: vec![None; graph.nodes.len()],
        folded: vec![false; graph.nodes.len()],
    };
    for (i, &v) in graph.inputs.iter().enumerate() {
        let info = graph.value(v);
        let fact = info
            .declared
            .as_ref()
            .and_then(Fact::from_declared)
            .or_else(|| input_facts.get(i).cloned().flatten())
            .ok_or_else(|| PassError::Input {
                name: info.name.clone(),
                reason: "the model declares no tensor type for it".into(),
            })?;
        inferred.facts[v.index()] = Some(fact);
    }
    for (&v, t) in &graph.initializers {
        inferred.facts[v.index()] = Some(Fact::from_tensor(t));
    }
    for (v, name) in &graph.captures {
        let fact = outer.get(name).ok_or_else(|| {
            PassError::Internal(format!("captured value '{name}' has no outer fact"))
        })?;
        inferred.facts[v.index()] = Some(fact.clone());
    }
    for &n in &order {
        let node = &graph.nodes[n.index()];
        let op_err = |source: OpError| PassError::Op { node: node.desc(), source };
        let op = build(registry, &graph.values, node).map_err(op_err)?;
        let in_facts = inferred.inputs(node);
        let control = control::bodies(&*op, &in_facts).map_err(op_err)?;
        let is_control = control.is_some();
        let (out, values) = match control {
            Some(bodies) => {
                let scope = inferred.scope(graph, outer);
                let mut outs = Vec::with_capacity(bodies.len());
                for body in &bodies {
                    let sub = infer(&body.graph, registry, &scope, &body.inputs).map_err(|e| {
                        PassError::Subgraph {
                            node: node.desc(),
                            branch: body.name.into(),
                            source: Box::new(e),
                        }
                    })?;
                    outs.push(
                        body.graph.outputs.iter().map(|o| sub.facts[o.index()].clone()).collect(),
                    );
                }
                (control::outputs(&*op, &in_facts, &outs), None)
            }
            None => outputs(&*op, node, &in_facts).map_err(op_err)?,
        };
        match values {
            Some(values) => {
                for (o, t) in node.outputs.iter().zip(values) {
                    if let Some(v) = *o {
                        inferred.facts[v.index()] = Some(Fact::from_tensor(&t));
                    }
                }
                inferred.folded[n.index()] = true;
            }
            None => {
                for (o, f) in node.outputs.iter().zip(&out) {
                    if let Some(v) = *o {
                        inferred.facts[v.index()] = Some(f.clone());
                    }
                }
                if !is_control {
                    inferred.outputs[n.index()] = Some(out);
                }
            }
        }
        inferred.ops[n.index()] = Some(op);
    }
    Ok(inferred)
}
