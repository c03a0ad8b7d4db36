//! Compilation: ops built from the registry, static facts inferred, kernels
//! prepared on the provider, weights uploaded, and the release plan made —
//! recursively for subgraphs.

use std::collections::HashMap;
use std::sync::Arc;

use crate::dtype::DType;
use crate::ep::{EpError, ExecutionProvider, KernelId, KernelSpec, TensorArg};
use crate::error::{Error, OpError};
use crate::graph::{Graph, NodeId, TypeInfo, ValueId};
use crate::ops::control::{If, merge_facts};
use crate::ops::sequence::{SequenceKind, SequenceOp};
use crate::ops::{Fact, InferInputs, Op, OpRegistry, downcast};
use crate::plan::{NodeTraits, Plan, topological_order};
use crate::shape::Shape;

/// What a step does at run time.
pub enum Action {
    /// Launch a prepared kernel.
    Kernel(KernelId),
    /// Output 0 shares the buffer of this input slot, with a new shape.
    View(usize),
    /// Run one of two subgraphs.
    If {
        /// Run when the condition is true.
        then_branch: Box<CompiledGraph>,
        /// Run when the condition is false.
        else_branch: Box<CompiledGraph>,
    },
    /// Move sequence handles around.
    Sequence(SequenceKind),
}

/// One step of a compiled graph.
pub struct Step {
    /// The node.
    pub node: NodeId,
    /// Its parsed op.
    pub op: Box<dyn Op>,
    /// What to do.
    pub action: Action,
    /// Inputs whose values inference needs on the host.
    pub value_inputs: Vec<usize>,
}

/// A graph ready to run on one provider.
pub struct CompiledGraph {
    /// The graph.
    pub graph: Arc<Graph>,
    /// The release plan.
    pub plan: Plan,
    /// Steps, in plan order.
    pub steps: Vec<Step>,
    /// Static facts per value (symbolic shapes).
    pub facts: Vec<Option<Fact>>,
    /// Uploaded initializers.
    pub weights: Vec<(ValueId, TensorArg)>,
    /// For a subgraph: where each captured value comes from in the enclosing graph.
    pub captures: Vec<(ValueId, ValueId)>,
}

impl CompiledGraph {
    /// Frees the uploaded weights of this graph and its subgraphs.
    ///
    /// # Errors
    /// The first provider error; every weight is still attempted.
    pub fn free_weights(&mut self, ep: &dyn ExecutionProvider) -> Result<(), EpError> {
        let mut first = Ok(());
        for (_, w) in self.weights.drain(..) {
            if let Err(e) = ep.deallocate(w.buffer) {
                first = first.and(Err(e));
            }
        }
        for step in &mut self.steps {
            if let Action::If { then_branch, else_branch } = &mut step.action {
                for g in [then_branch, else_branch] {
                    if let Err(e) = g.free_weights(ep) {
                        first = first.and(Err(e));
                    }
                }
            }
        }
        first
    }

    /// Bytes of uploaded weights, subgraphs included.
    pub fn weight_bytes(&self) -> u64 {
        let own: u64 = self.weights.iter().map(|(_, w)| w.buffer.size).sum();
        own + self
            .steps
            .iter()
            .map(|s| match &s.action {
                Action::If { then_branch, else_branch } => {
                    then_branch.weight_bytes() + else_branch.weight_bytes()
                }
                _ => 0,
            })
            .sum::<u64>()
    }
}

/// Compilation settings.
pub struct CompileOptions<'a> {
    /// The op registry.
    pub registry: &'a OpRegistry,
    /// Called with the bytes of each weight uploaded.
    pub on_upload: Option<&'a dyn Fn(u64)>,
}

/// The static fact a declared type gives.
pub fn declared_fact(t: &TypeInfo) -> Option<Fact> {
    match t {
        TypeInfo::Tensor { dtype, shape } => {
            Some(Fact { dtype: *dtype, shape: shape.clone(), value: None, sequence: false })
        }
        TypeInfo::Sequence(Some(inner)) => match &**inner {
            TypeInfo::Tensor { dtype, shape } => Some(Fact::sequence_of(*dtype, shape.clone())),
            _ => None,
        },
        _ => None,
    }
}

/// Compiles a graph; `outer` gives the facts of enclosing-scope values by name.
///
/// On error, weights uploaded so far are freed again.
///
/// # Errors
/// [`Error`] naming the node that could not be built, inferred or prepared.
pub fn compile(
    graph: Arc<Graph>,
    outer: &HashMap<String, (ValueId, Fact)>,
    ep: &dyn ExecutionProvider,
    opts: &CompileOptions<'_>,
) -> Result<CompiledGraph, Error> {
    let mut weights = Vec::new();
    let mut steps = Vec::new();
    match compile_inner(&graph, outer, ep, opts, &mut weights, &mut steps) {
        Ok((plan, facts, captures)) => {
            Ok(CompiledGraph { graph, plan, steps, facts, weights, captures })
        }
        Err(e) => {
            // Free what was uploaded so far, subgraphs of finished steps included.
            let mut partial = CompiledGraph {
                graph,
                plan: Plan::new(&Graph::default(), vec![], &[], |_, _| false),
                steps,
                facts: vec![],
                weights,
                captures: vec![],
            };
            let _ = partial.free_weights(ep);
            Err(e)
        }
    }
}

type Compiled = (Plan, Vec<Option<Fact>>, Vec<(ValueId, ValueId)>);

fn compile_inner(
    graph: &Arc<Graph>,
    outer: &HashMap<String, (ValueId, Fact)>,
    ep: &dyn ExecutionProvider,
    opts: &CompileOptions<'_>,
    weights: &mut Vec<(ValueId, TensorArg)>,
    steps: &mut Vec<Step>,
) -> Result<Compiled, Error> {
    let order = topological_order(graph)?;
    let mut facts: Vec<Option<Fact>> = vec![None; graph.values.len()];
    for &v in &graph.inputs {
        let info = graph.value(v);
        let fact = info.declared.as_ref().and_then(declared_fact).ok_or_else(|| Error::Input {
            name: info.name.clone(),
            reason: "the model declares no tensor type for it".into(),
        })?;
        facts[v.index()] = Some(fact);
    }
    for (&v, t) in &graph.initializers {
        facts[v.index()] = Some(Fact::from_tensor(t));
    }
    let mut captures = Vec::new();
    for (v, name) in &graph.captures {
        let (outer_id, fact) = outer
            .get(name)
            .ok_or_else(|| Error::Internal(format!("captured value '{name}' has no outer fact")))?;
        facts[v.index()] = Some(fact.clone());
        captures.push((*v, *outer_id));
    }

    // Weights first, so an upload failure is reported before any kernel work.
    for (&v, t) in &graph.initializers {
        let Ok(bytes) = t.bytes() else { continue };
        let provider_err = |source| Error::Provider {
            backend: ep.name(),
            action: format!("uploading weight '{}'", graph.value(v).name),
            source,
        };
        let buffer =
            ep.allocate(bytes.len() as u64, t.dtype().align() as u32).map_err(provider_err)?;
        let arg = TensorArg { buffer, dtype: t.dtype(), shape: t.shape().to_vec() };
        weights.push((v, arg));
        ep.upload(buffer, bytes).map_err(provider_err)?;
        if let Some(cb) = opts.on_upload {
            cb(bytes.len() as u64);
        }
    }

    steps.reserve(order.len());
    let mut traits = vec![NodeTraits::default(); graph.nodes.len()];
    for &n in &order {
        let node = &graph.nodes[n.index()];
        let desc = || node.desc();
        let op = opts.registry.build(node).map_err(|source| Error::Op { node: desc(), source })?;
        let in_facts: Vec<Option<Fact>> =
            node.inputs.iter().map(|i| i.and_then(|v| facts[v.index()].clone())).collect();
        if let Some((slot, _)) =
            node.inputs.iter().enumerate().find(|(i, v)| v.is_some() && in_facts[*i].is_none())
        {
            return Err(Error::Op {
                node: desc(),
                source: OpError::Invalid(format!("input {slot} has no inferable type")),
            });
        }

        let (action, out_facts) = if let Some(if_op) = downcast::<If>(&*op) {
            let scope = scope_of(graph, &facts);
            let sub = |g: &Arc<Graph>, branch: &str| {
                compile(g.clone(), &scope, ep, opts).map_err(|e| Error::Subgraph {
                    node: desc(),
                    branch: branch.into(),
                    source: Box::new(e),
                })
            };
            let then_branch = sub(&if_op.then_branch, "then_branch")?;
            let else_branch = match sub(&if_op.else_branch, "else_branch") {
                Ok(g) => g,
                Err(e) => {
                    let mut t = then_branch;
                    let _ = t.free_weights(ep);
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
            (action, out)
        } else {
            let out = op
                .infer(&InferInputs::new(&in_facts))
                .map_err(|source| Error::Op { node: desc(), source })?;
            let action = if let Some(seq) = downcast::<SequenceOp>(&*op) {
                Action::Sequence(seq.kind)
            } else if let Some(slot) = op.view_of() {
                Action::View(slot)
            } else {
                let input_dtypes: Vec<Option<DType>> =
                    in_facts.iter().map(|f| f.as_ref().map(|f| f.dtype)).collect();
                let output_dtypes: Vec<Option<DType>> = node
                    .outputs
                    .iter()
                    .enumerate()
                    .map(|(i, o)| o.and(out.get(i).map(|f| f.dtype)))
                    .collect();
                let spec = KernelSpec {
                    node,
                    op: &*op,
                    input_dtypes: &input_dtypes,
                    output_dtypes: &output_dtypes,
                };
                let kernel = ep.prepare(&spec).map_err(|source| match source {
                    EpError::Unsupported(_) => {
                        Error::NoKernel { node: desc(), backend: ep.name(), source }
                    }
                    source => Error::Kernel { node: desc(), backend: ep.name(), source },
                })?;
                Action::Kernel(kernel)
            };
            (action, out)
        };

        for (i, o) in node.outputs.iter().enumerate() {
            if let (Some(v), Some(f)) = (o, out_facts.get(i)) {
                facts[v.index()] = Some(f.clone());
            }
        }
        traits[n.index()] = NodeTraits {
            view_of: match action {
                Action::View(slot) => Some(slot),
                _ => None,
            },
            in_place: match action {
                Action::Kernel(_) => op.in_place(),
                _ => vec![],
            },
            makes_sequence: matches!(
                action,
                Action::Sequence(SequenceKind::Construct | SequenceKind::Insert)
            ),
        };
        steps.push(Step { node: n, value_inputs: op.value_inputs(), op, action });
    }

    let dtypes_match = |n: NodeId, slot: usize| {
        let node = &graph.nodes[n.index()];
        let out = node.outputs.first().copied().flatten();
        let inp = node.input(slot);
        match (
            out.and_then(|o| facts[o.index()].as_ref()),
            inp.and_then(|i| facts[i.index()].as_ref()),
        ) {
            (Some(o), Some(i)) => o.dtype == i.dtype && !o.sequence && !i.sequence,
            _ => false,
        }
    };
    let plan = Plan::new(graph, order, &traits, dtypes_match);
    Ok((plan, facts, captures))
}

/// The facts visible to a subgraph of `graph`, by name. The loader made `graph`
/// capture everything its subgraphs read from further out, so its own values suffice.
fn scope_of(graph: &Graph, facts: &[Option<Fact>]) -> HashMap<String, (ValueId, Fact)> {
    let mut scope = HashMap::new();
    for (i, f) in facts.iter().enumerate() {
        if let Some(f) = f {
            // Subgraphs see the fact, not necessarily the value: only constants keep values.
            let v = ValueId(i as u32);
            let mut f = f.clone();
            if !graph.initializers.contains_key(&v) {
                f.value = None;
            }
            scope.insert(graph.value(v).name.clone(), (v, f));
        }
    }
    scope
}

impl CompiledGraph {
    /// The static facts of the graph outputs.
    pub fn output_facts(&self) -> Vec<Option<Fact>> {
        self.graph.outputs.iter().map(|o| self.facts[o.index()].clone()).collect()
    }

    /// The declared-or-inferred shape of a graph input.
    pub fn input_shape(&self, v: ValueId) -> Option<&Shape> {
        self.facts[v.index()].as_ref().and_then(|f| f.shape.as_ref())
    }
}
