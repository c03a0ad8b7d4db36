//! A compiled graph: the placed graph, its steps and release plan, its
//! weights on their providers, and queries over all of it (subgraphs included).

use std::sync::{Arc, Mutex};

use crate::ep::{EpError, ExecutionProvider, KernelId, TensorArg};
use crate::error::NodeDesc;
use crate::graph::{Graph, NodeId, ValueId};
use crate::ops::sequence::SequenceKind;
use crate::ops::{Fact, Op};
use crate::plan::{MemoryFigures, Plan, RunTrace};
use crate::shape::Shape;

use super::schedule::Schedules;

/// What a step does at run time.
pub enum Action {
    /// Launch a prepared kernel on the step's provider.
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
    /// An `If` whose condition was known when the graph was compiled: only
    /// the live branch was compiled, and it runs unconditionally.
    Resolved {
        /// The live branch.
        branch: Box<CompiledGraph>,
        /// Its attribute name, for errors.
        name: &'static str,
    },
    /// Run a body repeatedly: `Loop`, `Scan` or `SequenceMap` (the step's op says which).
    Repeat {
        /// The compiled body.
        body: Box<CompiledGraph>,
    },
    /// Compute on the host with [`Op::eval_host`] (string tensors, host-only ops);
    /// device outputs are uploaded to the step's provider.
    Host,
    /// Move sequence handles around.
    Sequence(SequenceKind),
    /// Copy input 0 from its provider to the step's provider.
    Copy,
}

impl Action {
    /// The compiled subgraphs this action runs.
    pub fn subgraphs(&self) -> Vec<&CompiledGraph> {
        match self {
            Action::If { then_branch, else_branch } => vec![then_branch.as_ref(), else_branch],
            Action::Resolved { branch, .. } => vec![branch.as_ref()],
            Action::Repeat { body } => vec![body.as_ref()],
            _ => vec![],
        }
    }

    /// The compiled subgraphs this action runs, mutably.
    pub fn subgraphs_mut(&mut self) -> Vec<&mut CompiledGraph> {
        match self {
            Action::If { then_branch, else_branch } => vec![then_branch.as_mut(), else_branch],
            Action::Resolved { branch, .. } => vec![branch.as_mut()],
            Action::Repeat { body } => vec![body.as_mut()],
            _ => vec![],
        }
    }
}

/// One step of a compiled graph.
pub struct Step {
    /// The node (in the placed graph).
    pub node: NodeId,
    /// Its parsed op.
    pub op: Box<dyn Op>,
    /// What to do.
    pub action: Action,
    /// Inputs whose values inference needs on the host; kernels get them as host tensors.
    pub value_inputs: Vec<usize>,
    /// The provider (index into the provider list) that runs it and holds its outputs.
    pub provider: usize,
}

/// A graph ready to run on a list of providers.
pub struct CompiledGraph {
    /// The placed graph: the model's graph plus inserted copies and per-provider weight duplicates.
    pub graph: Arc<Graph>,
    /// The release plan.
    pub plan: Plan,
    /// Steps, in plan order.
    pub steps: Vec<Step>,
    /// Static facts per value (symbolic shapes).
    pub facts: Vec<Option<Fact>>,
    /// The provider each value lives on (`None`: never on a device, e.g. shape-only constants).
    pub location: Vec<Option<usize>>,
    /// Uploaded initializers, with the provider holding each.
    pub weights: Vec<(ValueId, usize, TensorArg)>,
    /// For a subgraph: where each captured value comes from in the enclosing graph.
    pub captures: Vec<(ValueId, ValueId)>,
    /// The last run's trace and the figures computed from it (see [`CompiledGraph::figures`]).
    pub(crate) figures_memo: Mutex<Option<(RunTrace, MemoryFigures)>>,
    /// What the host decided for each recent input signature (see `schedule`).
    pub schedules: Schedules,
}

impl CompiledGraph {
    /// The plan's memory figures for a run that recorded `trace`.
    ///
    /// Runs with the same input shapes record the same trace, and a small
    /// model's run (a voice detector's, a tenth of a millisecond, through
    /// ten subgraph runs) spent a few percent of its time recomputing them:
    /// the last trace and its figures are kept, and an equal trace reuses
    /// them. Comparing is one pass over vectors the computation walks anyway.
    pub(crate) fn figures(&self, trace: RunTrace) -> MemoryFigures {
        // A run on another thread holding the memo just computes its own.
        if let Ok(mut memo) = self.figures_memo.try_lock() {
            if let Some((last, figures)) = memo.as_ref() {
                if *last == trace {
                    return figures.clone();
                }
            }
            let figures = self.plan.memory_figures(&self.graph, &trace, &self.location);
            *memo = Some((trace, figures.clone()));
            return figures;
        }
        self.plan.memory_figures(&self.graph, &trace, &self.location)
    }

    /// Frees the uploaded weights of this graph and its subgraphs.
    ///
    /// # Errors
    /// The first provider error; every weight is still attempted.
    pub fn free_weights(&mut self, providers: &[&dyn ExecutionProvider]) -> Result<(), EpError> {
        let mut first = Ok(());
        for (_, p, w) in self.weights.drain(..) {
            if let Err(e) = providers[p].deallocate(w.buffer) {
                first = first.and(Err(e));
            }
        }
        for step in &mut self.steps {
            for g in step.action.subgraphs_mut() {
                if let Err(e) = g.free_weights(providers) {
                    first = first.and(Err(e));
                }
            }
        }
        first
    }

    /// Bytes of uploaded weights per provider, subgraphs included.
    pub fn weight_bytes(&self, providers: usize) -> Vec<u64> {
        let mut bytes = vec![0u64; providers];
        self.add_weight_bytes(&mut bytes);
        bytes
    }

    fn add_weight_bytes(&self, bytes: &mut [u64]) {
        for (_, p, w) in &self.weights {
            bytes[*p] += w.buffer.size;
        }
        for s in &self.steps {
            for g in s.action.subgraphs() {
                g.add_weight_bytes(bytes);
            }
        }
    }

    /// Kernel nodes per provider, subgraphs included: how the model was placed.
    pub fn kernels_per_provider(&self, providers: usize) -> Vec<usize> {
        let mut counts = vec![0usize; providers];
        self.add_kernels(&mut counts);
        counts
    }

    fn add_kernels(&self, counts: &mut [usize]) {
        for s in &self.steps {
            if let Action::Kernel(_) = s.action {
                counts[s.provider] += 1;
            }
            for g in s.action.subgraphs() {
                g.add_kernels(counts);
            }
        }
    }

    /// `(node description, provider)` of every kernel node, subgraphs included.
    pub fn placement(&self) -> Vec<(NodeDesc, usize)> {
        let mut out = Vec::new();
        for s in &self.steps {
            if let Action::Kernel(_) = s.action {
                out.push((*self.graph.nodes[s.node.index()].desc(), s.provider));
            }
            for g in s.action.subgraphs() {
                out.extend(g.placement());
            }
        }
        out
    }

    /// A label for each point of [`MemoryFigures::timeline`](crate::plan::MemoryFigures):
    /// `inputs`, then each step's node name, then `outputs`.
    pub fn timeline_labels(&self) -> Vec<String> {
        let mut labels = vec!["inputs".to_string()];
        labels.extend(self.plan.order.iter().map(|n| self.graph.nodes[n.index()].name.clone()));
        labels.push("outputs".into());
        labels
    }

    /// The static facts of the graph outputs.
    pub fn output_facts(&self) -> Vec<Option<Fact>> {
        self.graph.outputs.iter().map(|o| self.facts[o.index()].clone()).collect()
    }

    /// The declared-or-inferred shape of a graph input.
    pub fn input_shape(&self, v: ValueId) -> Option<&Shape> {
        self.facts[v.index()].as_ref().and_then(|f| f.shape.as_ref())
    }
}
