//! Placement: every node on the first provider with a kernel for it, else
//! as standard ops (decomposed), else on a fallback provider; half-precision
//! nodes a provider runs only in f32 between casts; explicit copies where a
//! value crosses providers. The placed graph and its steps are then planned.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use super::options::{CompileOptions, ONYX_DOMAIN, Scope};
use crate::dtype::DType;
use crate::ep::{EpError, ExecutionProvider, KernelId, KernelSpec};
use crate::error::OpError;
use crate::exec::Error;
use crate::exec::program::{Action, CompiledGraph, Step};
use crate::exec::schedule::Schedules;
use crate::graph::{Attributes, Graph, Node, NodeId, ValueId, ValueInfo, topological_order};
use crate::ops::control::DeviceCopy;
use crate::ops::generate::Cast;
use crate::ops::sequence::{SequenceKind, SequenceOp};
use crate::ops::{Fact, Op, downcast};
use crate::passes::decompose::{Builder, decompositions};
use crate::passes::infer::{Inferred, build, outputs};
use crate::passes::widen;
use crate::plan::{NodeTraits, Plan};
use crate::tensor::Tensor;

/// The graph being placed: the original values plus copies and duplicates, nodes in run order.
pub(super) struct Pass<'a> {
    pub(super) source: &'a Graph,
    /// The source graph's facts and ops, from inference (ops taken as placed).
    inferred: Inferred,
    pub(super) providers: &'a [&'a dyn ExecutionProvider],
    pub(super) opts: &'a CompileOptions<'a>,
    values: Vec<ValueInfo>,
    initializers: BTreeMap<ValueId, Tensor>,
    outputs: Vec<ValueId>,
    nodes: Vec<Node>,
    pub(super) steps: Vec<Step>,
    traits: Vec<NodeTraits>,
    pub(super) facts: Vec<Option<Fact>>,
    pub(super) location: Vec<Option<usize>>,
    copies: HashMap<(ValueId, usize), ValueId>,
    /// f32 copies of half-precision values, per provider (see `widen`).
    widened: HashMap<(ValueId, usize), ValueId>,
    pub(super) captures: Vec<(ValueId, ValueId)>,
}

impl<'a> Pass<'a> {
    pub(super) fn new(
        source: &'a Graph,
        inferred: Inferred,
        providers: &'a [&'a dyn ExecutionProvider],
        opts: &'a CompileOptions<'a>,
    ) -> Self {
        let n = source.values.len();
        Pass {
            source,
            inferred,
            providers,
            opts,
            values: source.values.clone(),
            initializers: source.initializers.clone(),
            outputs: source.outputs.clone(),
            nodes: Vec::with_capacity(source.nodes.len()),
            steps: Vec::with_capacity(source.nodes.len()),
            traits: Vec::with_capacity(source.nodes.len()),
            facts: vec![None; n],
            location: vec![None; n],
            copies: HashMap::new(),
            widened: HashMap::new(),
            captures: Vec::new(),
        }
    }

    fn add_value(&mut self, name: String, fact: Option<Fact>, location: Option<usize>) -> ValueId {
        let id = ValueId(self.values.len() as u32);
        self.values.push(ValueInfo { name, declared: None });
        self.facts.push(fact);
        self.location.push(location);
        id
    }

    /// Places every node of the source graph, in topological order.
    pub(super) fn run(&mut self, outer: &Scope, outputs_on: Option<usize>) -> Result<(), Error> {
        let g = self.source;
        let order = topological_order(g)?;
        for &v in &g.inputs {
            self.facts[v.index()] = self.inferred.facts[v.index()].clone();
            self.location[v.index()] = Some(0);
        }
        for (&v, t) in &g.initializers {
            self.facts[v.index()] = Some(Fact::from_tensor(t));
        }
        for (v, name) in &g.captures {
            let (outer_id, fact, loc) = outer.get(name).ok_or_else(|| {
                Error::Internal(format!("captured value '{name}' has no outer fact"))
            })?;
            self.facts[v.index()] = Some(fact.clone());
            self.location[v.index()] = *loc;
            self.captures.push((*v, *outer_id));
        }
        for &n in &order {
            self.source_node(n.index())?;
        }
        for i in 0..self.outputs.len() {
            let o = self.outputs[i];
            self.outputs[i] = match outputs_on {
                Some(p) => self.on_provider(o, p),
                None => {
                    self.locate(o, 0);
                    o
                }
            };
        }
        Ok(())
    }

    /// Gives an unplaced initializer a home.
    pub(super) fn locate(&mut self, v: ValueId, p: usize) {
        if self.location[v.index()].is_none() && self.initializers.contains_key(&v) {
            self.location[v.index()] = Some(p);
        }
    }

    /// A value with the same contents on provider `p`: the value itself, a duplicate
    /// weight, or the output of an inserted copy node (made once per value and provider).
    pub(super) fn on_provider(&mut self, v: ValueId, p: usize) -> ValueId {
        self.locate(v, p);
        if self.location[v.index()] == Some(p) {
            return v;
        }
        if let Some(&c) = self.copies.get(&(v, p)) {
            return c;
        }
        let name = format!("{}.{}", self.values[v.index()].name, self.providers[p].name());
        let fact = self.facts[v.index()].clone();
        let c = self.add_value(name.clone(), fact, Some(p));
        if let Some(t) = self.initializers.get(&v).cloned() {
            // A weight read on two providers is uploaded to both, once.
            self.initializers.insert(c, t);
        } else {
            let node = Node {
                name: format!("{name}.copy"),
                op_type: "Copy".into(),
                domain: ONYX_DOMAIN.into(),
                opset: 1,
                inputs: vec![Some(v)],
                outputs: vec![Some(c)],
                implicit_inputs: vec![],
                attrs: Attributes::default(),
            };
            self.push(node, Box::new(DeviceCopy), Action::Copy, p, NodeTraits::default());
        }
        self.copies.insert((v, p), c);
        c
    }

    fn push(
        &mut self,
        node: Node,
        op: Box<dyn Op>,
        action: Action,
        provider: usize,
        traits: NodeTraits,
    ) {
        let id = NodeId(self.nodes.len() as u32);
        self.nodes.push(node);
        self.traits.push(traits);
        self.steps.push(Step { node: id, value_inputs: op.value_inputs(), op, action, provider });
    }

    /// Places node `n` of the source graph with the op and facts inference gave it.
    fn source_node(&mut self, n: usize) -> Result<(), Error> {
        let source = &self.source.nodes[n];
        let op = self.inferred.ops[n]
            .take()
            .ok_or_else(|| Error::Internal(format!("{} was not inferred", source.desc())))?;
        if self.inferred.folded[n] {
            let facts = source
                .outputs
                .iter()
                .map(|o| o.and_then(|v| self.inferred.facts[v.index()].clone()))
                .collect();
            self.constants(source, facts);
            return Ok(());
        }
        let outputs = self.inferred.outputs[n].take();
        self.place(source, op, outputs)
    }

    /// Places a node placement made (a decomposition's piece): its op is
    /// built and inferred here.
    fn node(&mut self, source: &Node) -> Result<(), Error> {
        let op_err = |e: OpError| Error::Op { node: source.desc(), source: e };
        let op = build(self.opts.registry, &self.values, source).map_err(op_err)?;
        let in_facts = self.inputs(source);
        let (out, values) = outputs(&*op, source, &in_facts).map_err(op_err)?;
        if let Some(values) = values {
            let facts = values.iter().map(|t| Some(Fact::from_tensor(t))).collect();
            self.constants(source, facts);
            return Ok(());
        }
        self.place(source, op, Some(out))
    }

    /// The facts of a node's inputs as placement knows them.
    fn inputs(&self, node: &Node) -> Vec<Option<Fact>> {
        node.inputs.iter().map(|i| i.and_then(|v| self.facts[v.index()].clone())).collect()
    }

    /// A node computed from constants: its outputs become constants themselves.
    fn constants(&mut self, source: &Node, facts: Vec<Option<Fact>>) {
        log::debug!("{}: computed from constants while compiling", source.desc());
        for (o, f) in source.outputs.iter().zip(facts) {
            if let (Some(v), Some(f)) = (*o, f) {
                if let Some(t) = f.value.clone() {
                    self.initializers.insert(v, t);
                }
                self.facts[v.index()] = Some(f);
            }
        }
    }

    /// Places a node whose op is built, with its outputs' facts by slot
    /// (`None` for a control node, whose bodies give them).
    fn place(
        &mut self,
        source: &Node,
        op: Box<dyn Op>,
        known: Option<Vec<Fact>>,
    ) -> Result<(), Error> {
        let desc = || source.desc();
        let in_facts = self.inputs(source);
        let mut node = source.clone();
        let value_inputs = op.value_inputs();
        // Outputs computed in f32 and cast back after the node: (f32 value, original, fact).
        let mut narrow: Vec<(ValueId, ValueId, Fact)> = Vec::new();

        let (action, provider, out_facts, out_location) = if let Some((action, out)) =
            self.control(source, &mut node, &*op, &in_facts)?
        {
            (action, 0, out, Some(0))
        } else {
            let out = known.ok_or_else(|| {
                Error::Internal(format!("{}: its outputs were not inferred", desc()))
            })?;
            if op.runs_on_host(&in_facts) {
                // Strings and host-only ops: inputs are read back, device outputs go to the primary.
                (Action::Host, 0, out, Some(0))
            } else if let Some(seq) = downcast::<SequenceOp>(&*op) {
                // Sequences live on the primary provider; their elements are moved there.
                let element_slots: Vec<usize> = match seq.kind {
                    SequenceKind::Construct => (0..node.inputs.len()).collect(),
                    SequenceKind::Insert => vec![1],
                    _ => vec![],
                };
                for slot in element_slots {
                    if let Some(v) = node.inputs[slot] {
                        node.inputs[slot] = Some(self.on_provider(v, 0));
                    }
                }
                (Action::Sequence(seq.kind), 0, out, Some(0))
            } else if let Some(slot) = op.view_of() {
                let src = node.input(slot).ok_or_else(|| Error::Op {
                    node: desc(),
                    source: OpError::MissingInput(slot),
                })?;
                self.locate(src, 0);
                let loc = self.location[src.index()];
                (Action::View(slot), loc.unwrap_or(0), out, loc)
            } else {
                let (provider, kernel, wide) =
                    match self.prepare(&node, &*op, &in_facts, &out, &value_inputs, false) {
                        Ok(placed) => placed,
                        Err(e @ Error::NoKernel { .. }) => {
                            // The primary has no kernel: its standard-op form, else a fallback.
                            if self.expand(&node, &*op, &in_facts)? {
                                return Ok(());
                            }
                            if !self.opts.allow_fallback || self.providers.len() < 2 {
                                return Err(e);
                            }
                            self.prepare(&node, &*op, &in_facts, &out, &value_inputs, true)?
                        }
                        Err(e) => return Err(e),
                    };
                for slot in 0..node.inputs.len() {
                    if let (Some(v), false) = (node.inputs[slot], value_inputs.contains(&slot)) {
                        node.inputs[slot] = Some(self.on_provider(v, provider));
                    }
                }
                let out = match wide {
                    Some(w) => {
                        narrow = self.widen(&mut node, &in_facts, &value_inputs, provider, &out)?;
                        w.outputs
                    }
                    None => out,
                };
                (Action::Kernel(kernel), provider, out, Some(provider))
            }
        };

        for (i, o) in node.outputs.iter().enumerate() {
            if let (Some(v), Some(f)) = (o, out_facts.get(i)) {
                self.facts[v.index()] = Some(f.clone());
                self.location[v.index()] = out_location;
            }
        }
        let traits = NodeTraits {
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
        self.push(node, op, action, provider, traits);
        for (wide, orig, fact) in narrow {
            self.facts[orig.index()] = Some(fact.clone());
            self.location[orig.index()] = Some(provider);
            self.push_cast(wide, orig, fact.dtype, provider)?;
        }
        Ok(())
    }

    /// Rewires a node that runs in f32 over half storage: its half device inputs
    /// are replaced by f32 copies, its half outputs by f32 values that casts
    /// (returned, pushed after the node) narrow back into the originals.
    fn widen(
        &mut self,
        node: &mut Node,
        in_facts: &[Option<Fact>],
        value_inputs: &[usize],
        p: usize,
        out: &[Fact],
    ) -> Result<Vec<(ValueId, ValueId, Fact)>, Error> {
        for (slot, fact) in in_facts.iter().enumerate() {
            if let Some(v) = node.inputs[slot] {
                if widen::widens(fact.as_ref(), slot, value_inputs) {
                    node.inputs[slot] = Some(self.as_f32(v, p)?);
                }
            }
        }
        let mut narrow = Vec::new();
        for (i, o) in node.outputs.iter_mut().enumerate() {
            let (Some(v), Some(f)) = (*o, out.get(i)) else { continue };
            if widen::is_half(f.dtype) {
                let name = format!("{}.f32", self.values[v.index()].name);
                let wide = self.add_value(name, None, Some(p));
                narrow.push((wide, v, f.clone()));
                *o = Some(wide);
            }
        }
        Ok(narrow)
    }

    /// An f32 copy of half-precision value `v` (already on provider `p`), made
    /// once per value and provider by an inserted Cast.
    fn as_f32(&mut self, v: ValueId, p: usize) -> Result<ValueId, Error> {
        if let Some(&w) = self.widened.get(&(v, p)) {
            return Ok(w);
        }
        let name = format!("{}.f32", self.values[v.index()].name);
        let fact = self.facts[v.index()].as_ref().map(|f| f.with_dtype(DType::F32));
        let w = self.add_value(name, fact, Some(p));
        self.push_cast(v, w, DType::F32, p)?;
        self.widened.insert((v, p), w);
        Ok(w)
    }

    /// Appends a Cast from `src` to `dst` (dtype `to`) on provider `p`.
    fn push_cast(&mut self, src: ValueId, dst: ValueId, to: DType, p: usize) -> Result<(), Error> {
        let from = self.facts[src.index()].as_ref().map(|f| f.dtype);
        let name = format!("{}.cast", self.values[dst.index()].name);
        let node = Node {
            name,
            op_type: "Cast".into(),
            domain: crate::graph::DEFAULT_DOMAIN.into(),
            opset: 21,
            inputs: vec![Some(src)],
            outputs: vec![Some(dst)],
            implicit_inputs: vec![],
            attrs: Attributes::default(),
        };
        let op = Cast { to, saturate: true, round_mode: Default::default() };
        let spec = KernelSpec {
            node: &node,
            op: &op,
            input_dtypes: &[from],
            output_dtypes: &[Some(to)],
            input_values: &[None],
        };
        let ep = self.providers[p];
        let kernel = ep.prepare(&spec).map_err(|source| Error::Kernel {
            node: node.desc(),
            backend: ep.name(),
            source,
        })?;
        self.push(node, Box::new(op), Action::Kernel(kernel), p, NodeTraits::default());
        Ok(())
    }

    /// Places the standard-op form of a node its primary provider has no
    /// kernel for, when its op has one for these inputs (`ops::decompose`):
    /// the pieces are compiled in its place like any other node.
    fn expand(
        &mut self,
        node: &Node,
        op: &dyn Op,
        in_facts: &[Option<Fact>],
    ) -> Result<bool, Error> {
        let mut b = Builder::new(&node.name, ValueId(self.values.len() as u32));
        match decompositions().decompose(op, node, in_facts, &mut b) {
            Ok(true) => {}
            Ok(false) => return Ok(false),
            Err(e) => {
                log::debug!("{} is not decomposed: {e}", node.desc());
                return Ok(false);
            }
        }
        log::debug!("{} runs as {} standard nodes", node.desc(), b.nodes.len());
        for name in b.values {
            self.add_value(name, None, None);
        }
        for (v, t) in b.constants {
            self.facts[v.index()] = Some(Fact::from_tensor(&t));
            self.initializers.insert(v, t);
        }
        for piece in &b.nodes {
            self.node(piece)?;
        }
        Ok(true)
    }

    /// Prepares the kernel on the primary provider or, with `fallback`, on the
    /// first provider that supports it, natively or (half precision) in f32
    /// between inserted casts (`widen`).
    fn prepare(
        &self,
        node: &Node,
        op: &dyn Op,
        in_facts: &[Option<Fact>],
        out: &[Fact],
        value_inputs: &[usize],
        fallback: bool,
    ) -> Result<(usize, KernelId, Option<widen::Widened>), Error> {
        let input_dtypes: Vec<Option<DType>> =
            in_facts.iter().map(|f| f.as_ref().map(|f| f.dtype)).collect();
        let output_dtypes: Vec<Option<DType>> = node
            .outputs
            .iter()
            .enumerate()
            .map(|(i, o)| o.and(out.get(i).map(|f| f.dtype)))
            .collect();
        let input_values: Vec<Option<Tensor>> =
            in_facts.iter().map(|f| f.as_ref().and_then(|f| f.value.clone())).collect();
        let spec = KernelSpec {
            node,
            op,
            input_dtypes: &input_dtypes,
            output_dtypes: &output_dtypes,
            input_values: &input_values,
        };
        let wide = widen::plan(node, op, in_facts, out, value_inputs);
        let mut declined = None;
        for (i, ep) in self.providers.iter().enumerate() {
            if i > 0 && !(fallback && self.opts.allow_fallback) {
                break;
            }
            match ep.prepare(&spec) {
                Ok(k) => {
                    if i > 0 {
                        log::debug!("{} falls back to {}", node.desc(), ep.name());
                    }
                    return Ok((i, k, None));
                }
                Err(EpError::Unsupported(reason)) => {
                    if let Some(w) = &wide {
                        let spec = KernelSpec {
                            node,
                            op,
                            input_dtypes: &w.input_dtypes,
                            output_dtypes: &w.output_dtypes,
                            input_values: &input_values,
                        };
                        if let Ok(k) = ep.prepare(&spec) {
                            log::debug!("{} runs in f32 on {}", node.desc(), ep.name());
                            return Ok((i, k, wide));
                        }
                    }
                    declined.get_or_insert((ep.name(), EpError::Unsupported(reason)));
                }
                Err(source) => {
                    return Err(Error::Kernel { node: node.desc(), backend: ep.name(), source });
                }
            }
        }
        let (backend, source) = declined
            .unwrap_or_else(|| ("none".into(), EpError::Unsupported("no providers".into())));
        Err(Error::NoKernel { node: node.desc(), backend, source })
    }

    /// What a subgraph sees: every value of this graph by name, with fact and location.
    pub(super) fn scope(&self) -> Scope {
        let mut scope = HashMap::new();
        for (i, f) in self.facts.iter().enumerate() {
            if let Some(f) = f {
                let v = ValueId(i as u32);
                let mut f = f.clone();
                // Subgraphs see values, not contents, except for constants.
                if !self.initializers.contains_key(&v) {
                    f.value = None;
                }
                scope.insert(self.values[i].name.clone(), (v, f, self.location[i]));
            }
        }
        scope
    }

    pub(super) fn finish(self, captures: Vec<(ValueId, ValueId)>) -> CompiledGraph {
        let graph = Graph {
            name: self.source.name.clone(),
            values: self.values,
            nodes: self.nodes,
            inputs: self.source.inputs.clone(),
            outputs: self.outputs,
            initializers: self.initializers,
            captures: self.source.captures.clone(),
            folded_constants: self.source.folded_constants,
        };
        let facts = self.facts;
        let order: Vec<NodeId> = (0..graph.nodes.len()).map(|i| NodeId(i as u32)).collect();
        let dtypes_match = |n: NodeId, slot: usize| {
            let node = &graph.nodes[n.index()];
            let out = node.outputs.first().copied().flatten();
            match (
                out.and_then(|o| facts[o.index()].as_ref()),
                node.input(slot).and_then(|i| facts[i.index()].as_ref()),
            ) {
                (Some(o), Some(i)) => o.dtype == i.dtype && !o.sequence && !i.sequence,
                _ => false,
            }
        };
        let plan = Plan::new(&graph, order, &self.traits, dtypes_match);
        CompiledGraph {
            graph: Arc::new(graph),
            plan,
            steps: self.steps,
            facts,
            location: self.location,
            weights: Vec::new(),
            captures,
            figures_memo: Mutex::new(None),
            schedules: Schedules::new(self.opts.schedules),
        }
    }
}
