//! Placing the nodes that own subgraphs: `If` (resolved at build time when
//! its condition is a constant), `Loop`, `Scan` and `SequenceMap`. Bodies are
//! compiled once, on the primary provider, with the facts
//! `passes::infer::control` gives them, and see the enclosing graph's values
//! as captures.

use std::sync::Arc;

use super::compile_graph;
use super::options::Scope;
use super::place::Pass;
use crate::error::OpError;
use crate::exec::Error;
use crate::exec::program::{Action, CompiledGraph};
use crate::graph::{Graph, Node};
use crate::ops::control::If;
use crate::ops::looping::{Loop, Scan, SequenceMap};
use crate::ops::{Fact, Op, downcast};
use crate::passes::infer::control;

impl Pass<'_> {
    /// Compiles a subgraph of `source` on the primary provider.
    fn subgraph(
        &self,
        source: &Node,
        g: &Arc<Graph>,
        attribute: &str,
        scope: &Scope,
        input_facts: &[Option<Fact>],
    ) -> Result<CompiledGraph, Error> {
        compile_graph(g.clone(), scope, self.providers, self.opts, Some(0), input_facts).map_err(
            |e| Error::Subgraph {
                node: source.desc(),
                branch: attribute.into(),
                source: Box::new(e),
            },
        )
    }

    /// Moves the tensor inputs in `slots` to the primary provider (sequences live there already).
    fn inputs_on_primary(&mut self, node: &mut Node, slots: impl Iterator<Item = usize>) {
        for slot in slots {
            if let Some(v) = node.inputs.get(slot).copied().flatten() {
                if !self.facts[v.index()].as_ref().is_some_and(|f| f.sequence) {
                    node.inputs[slot] = Some(self.on_provider(v, 0));
                }
            }
        }
    }

    /// The action and output facts of a node that owns subgraphs; `None` for any other node.
    pub(super) fn control(
        &mut self,
        source: &Node,
        node: &mut Node,
        op: &dyn Op,
        in_facts: &[Option<Fact>],
    ) -> Result<Option<(Action, Vec<Fact>)>, Error> {
        let op_err = |e: OpError| Error::Op { node: source.desc(), source: e };
        let Some(bodies) = control::bodies(op, in_facts).map_err(op_err)? else {
            return Ok(None);
        };
        for &v in &source.implicit_inputs {
            self.locate(v, 0);
        }
        // Loop-carried values, scan inputs and sequences are read on the primary.
        let n = node.inputs.len();
        if downcast::<Loop>(op).is_some() {
            self.inputs_on_primary(node, 2..n);
        } else if let Some(sc) = downcast::<Scan>(op) {
            self.inputs_on_primary(node, usize::from(sc.batched)..n);
        } else if downcast::<SequenceMap>(op).is_some() {
            self.inputs_on_primary(node, 0..n);
        }
        let scope = self.scope();
        let mut compiled: Vec<CompiledGraph> = Vec::with_capacity(bodies.len());
        for body in &bodies {
            match self.subgraph(source, &body.graph, body.name, &scope, &body.inputs) {
                Ok(g) => compiled.push(g),
                Err(e) => {
                    for g in &mut compiled {
                        let _ = g.free_weights(self.providers);
                    }
                    return Err(e);
                }
            }
        }
        let outs: Vec<Vec<Option<Fact>>> =
            compiled.iter().map(CompiledGraph::output_facts).collect();
        let out = control::outputs(op, in_facts, &outs);
        let mut compiled = compiled.into_iter().map(Box::new);
        let action = match (downcast::<If>(op).is_some(), compiled.next(), compiled.next()) {
            // A condition known now is resolved once: only the live branch was
            // compiled, and it runs without a test.
            (true, Some(branch), None) => Action::Resolved { branch, name: bodies[0].name },
            (true, Some(then_branch), Some(else_branch)) => Action::If { then_branch, else_branch },
            (false, Some(body), None) => Action::Repeat { body },
            _ => return Err(Error::Internal(format!("{}: unexpected bodies", source.desc()))),
        };
        Ok(Some((action, out)))
    }
}
