//! Compiling the nodes that own subgraphs: `If` (resolved at build time when
//! its condition is a constant), `Loop`, `Scan` and `SequenceMap`. Bodies are
//! compiled once, on the primary provider, and see the enclosing graph's
//! values as captures.

use std::sync::Arc;

use super::{Pass, Scope, compile_graph};
use crate::dtype::DType;
use crate::error::{Error, OpError};
use crate::graph::{Graph, Node};
use crate::ops::control::{If, merge_facts};
use crate::ops::looping::{Loop, Scan, SequenceMap, norm_axis, stacked};
use crate::ops::{Fact, Op, downcast};

use super::super::program::{Action, CompiledGraph};

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
        Some(crate::shape::Shape(d))
    });
    Fact { dtype: f.dtype, shape, value: None, sequence: false }
}

fn out_or_unknown(f: Option<&Fact>) -> Fact {
    f.cloned().unwrap_or_else(|| Fact::unranked(DType::F32))
}

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
        let is_control = downcast::<If>(op).is_some()
            || downcast::<Loop>(op).is_some()
            || downcast::<Scan>(op).is_some()
            || downcast::<SequenceMap>(op).is_some();
        if !is_control {
            return Ok(None);
        }
        for &v in &source.implicit_inputs {
            self.locate(v, 0);
        }
        let scope = self.scope();
        let op_err = |e: OpError| Error::Op { node: source.desc(), source: e };
        let fact = |i: usize| in_facts.get(i).cloned().flatten();

        if let Some(if_op) = downcast::<If>(op) {
            // A condition known now (from initializers and constants) is resolved
            // once: only the live branch is compiled, and it runs without a test.
            let known = fact(0).and_then(|f| f.value).map(|t| t.to_i64_vec());
            if let Some(cond) = known {
                let cond = cond.map_err(|e| op_err(e.into()))?;
                let [c] = cond.as_slice() else {
                    return Err(op_err(OpError::Shape(
                        "the If condition must hold one element".into(),
                    )));
                };
                let (g, name) = if *c != 0 {
                    (&if_op.then_branch, "then_branch")
                } else {
                    (&if_op.else_branch, "else_branch")
                };
                let branch = self.subgraph(source, g, name, &scope, &[])?;
                let out =
                    branch.output_facts().iter().map(|f| out_or_unknown(f.as_ref())).collect();
                return Ok(Some((Action::Resolved { branch: Box::new(branch), name }, out)));
            }
            let then_branch =
                self.subgraph(source, &if_op.then_branch, "then_branch", &scope, &[])?;
            let else_branch =
                match self.subgraph(source, &if_op.else_branch, "else_branch", &scope, &[]) {
                    Ok(g) => g,
                    Err(e) => {
                        let mut t = then_branch;
                        let _ = t.free_weights(self.providers);
                        return Err(e);
                    }
                };
            let out: Vec<Fact> = then_branch
                .output_facts()
                .iter()
                .zip(else_branch.output_facts().iter())
                .map(|(a, b)| match (a, b) {
                    (Some(a), Some(b)) => merge_facts(a, b),
                    (Some(f), None) | (None, Some(f)) => Fact::unranked(f.dtype),
                    (None, None) => Fact::unranked(DType::F32),
                })
                .collect();
            let action = Action::If {
                then_branch: Box::new(then_branch),
                else_branch: Box::new(else_branch),
            };
            return Ok(Some((action, out)));
        }

        if let Some(l) = downcast::<Loop>(op) {
            let n = node.inputs.len();
            self.inputs_on_primary(node, 2..n);
            let mut body_in =
                vec![Some(Fact::known(DType::I64, &[])), Some(Fact::known(DType::Bool, &[]))];
            // Loop-carried values may change shape from one iteration to the next.
            body_in.extend((2..n).map(|i| fact(i).map(|f| loose(&f, false))));
            let body = self.subgraph(source, &l.body, "body", &scope, &body_in)?;
            let outs = body.output_facts();
            let out = (1..outs.len())
                .map(|i| match (outs[i].as_ref(), fact(i + 1)) {
                    (Some(a), Some(b)) if i + 1 < n => merge_facts(a, &b),
                    (Some(a), _) if i + 1 < n => loose(a, false),
                    (Some(a), _) => stacked(a, Some(0)),
                    (None, _) => Fact::unranked(DType::F32),
                })
                .collect();
            return Ok(Some((Action::Repeat { body: Box::new(body) }, out)));
        }

        if let Some(sc) = downcast::<Scan>(op) {
            let n = node.inputs.len();
            let first = usize::from(sc.batched);
            let states = n - first - sc.num_scan_inputs;
            self.inputs_on_primary(node, first..n);
            let mut body_in = Vec::with_capacity(n - first);
            for i in first..first + states {
                let f = fact(i);
                body_in
                    .push(f.map(|f| if sc.batched { sliced(&f, &[0]) } else { loose(&f, true) }));
            }
            for (j, i) in (first + states..n).enumerate() {
                let axes: Vec<i64> = if sc.batched { vec![0, 1] } else { vec![sc.input_axes[j]] };
                body_in.push(fact(i).map(|f| sliced(&f, &axes)));
            }
            let body = self.subgraph(source, &sc.body, "body", &scope, &body_in)?;
            let out = body
                .output_facts()
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
            return Ok(Some((Action::Repeat { body: Box::new(body) }, out)));
        }

        let Some(m) = downcast::<SequenceMap>(op) else { return Ok(None) };
        let n = node.inputs.len();
        self.inputs_on_primary(node, 0..n);
        let body_in: Vec<Option<Fact>> =
            (0..n).map(|i| fact(i).map(|f| Fact { sequence: false, ..loose(&f, true) })).collect();
        let body = self.subgraph(source, &m.body, "body", &scope, &body_in)?;
        let out = body
            .output_facts()
            .iter()
            .map(|f| {
                let f = out_or_unknown(f.as_ref());
                Fact::sequence_of(f.dtype, f.shape)
            })
            .collect();
        Ok(Some((Action::Repeat { body: Box::new(body) }, out)))
    }
}
