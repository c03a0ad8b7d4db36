//! Compilation: ops built from the registry, static facts inferred, every
//! kernel node placed on the first provider that supports it (later providers
//! are fallbacks; a half-precision node a provider runs only in f32 is widened
//! through inserted casts there, see `widen`), explicit copies inserted where a
//! value crosses providers, weights uploaded where they are read, and the
//! release plan made — recursively for subgraphs.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use crate::dtype::DType;
use crate::ep::{EpError, ExecutionProvider, KernelId, KernelSpec, TensorArg};
use crate::error::{Error, OpError};
use crate::graph::{Attributes, Graph, Node, NodeId, TypeInfo, ValueId, ValueInfo};
use crate::ops::control::DeviceCopy;
use crate::ops::decompose::Builder;
use crate::ops::generate::Cast;
use crate::ops::sequence::{SequenceKind, SequenceOp};
use crate::ops::{Fact, InferInputs, Op, OpRegistry, downcast, fold};
use crate::plan::{NodeTraits, Plan, topological_order};
use crate::tensor::Tensor;

use super::program::{Action, CompiledGraph, Step};
use super::schedule::Schedules;
use super::widen;

mod fuse;
mod subgraph;

/// The domain of nodes the planner inserts (device copies).
pub const ONYX_DOMAIN: &str = "onyx";

/// Compilation settings.
pub struct CompileOptions<'a> {
    /// The op registry.
    pub registry: &'a OpRegistry,
    /// Called with the bytes of each weight uploaded.
    pub on_upload: Option<&'a dyn Fn(u64)>,
    /// Let nodes the first provider cannot run fall back to later providers.
    pub allow_fallback: bool,
    /// Fuse op chains into the ops that compute them in one kernel
    /// (see `exec::compile::fuse`); off only to compare against the graph as written.
    pub fuse: bool,
    /// Input signatures each graph keeps a schedule for (see
    /// [`Schedules`](super::Schedules); 0 decides every run anew).
    pub schedules: usize,
}

impl<'a> CompileOptions<'a> {
    /// The defaults: fallback, fusion and [`DEFAULT_SCHEDULES`](super::DEFAULT_SCHEDULES) schedules on.
    pub fn new(registry: &'a OpRegistry) -> Self {
        CompileOptions {
            registry,
            on_upload: None,
            allow_fallback: true,
            fuse: true,
            schedules: super::DEFAULT_SCHEDULES,
        }
    }
}

/// What a subgraph sees of its enclosing graph, by name: id, fact and location.
pub type Scope = HashMap<String, (ValueId, Fact, Option<usize>)>;

/// The static fact a declared type gives.
pub fn declared_fact(t: &TypeInfo) -> Option<Fact> {
    Fact::from_declared(t)
}

/// Compiles a graph for `providers` (the first is the primary device; the
/// others are fallbacks in order). Graph inputs are expected on the primary.
///
/// On error, weights uploaded so far are freed again.
///
/// # Errors
/// [`Error`] naming the node that could not be built, inferred or prepared.
pub fn compile(
    graph: Arc<Graph>,
    outer: &Scope,
    providers: &[&dyn ExecutionProvider],
    opts: &CompileOptions<'_>,
) -> Result<CompiledGraph, Error> {
    compile_graph(graph, outer, providers, opts, None, &[])
}

/// Compiles a graph; `input_facts` (for loop bodies) stand in for the facts
/// of graph inputs whose types the model does not declare.
fn compile_graph(
    graph: Arc<Graph>,
    outer: &Scope,
    providers: &[&dyn ExecutionProvider],
    opts: &CompileOptions<'_>,
    outputs_on: Option<usize>,
    input_facts: &[Option<Fact>],
) -> Result<CompiledGraph, Error> {
    // Places, infers and prepares `graph` as it is, then uploads its weights.
    let place = |graph: &Graph| -> Result<CompiledGraph, Error> {
        let mut pass = Pass::new(graph, providers, opts);
        if let Err(e) = pass.run(outer, outputs_on, input_facts) {
            // Subgraphs compiled so far hold uploaded weights.
            for step in &mut pass.steps {
                for g in step.action.subgraphs_mut() {
                    let _ = g.free_weights(providers);
                }
            }
            return Err(e);
        }
        let captures = std::mem::take(&mut pass.captures);
        let mut cg = pass.finish(captures);
        match upload_weights(&mut cg, providers, opts) {
            Ok(()) => Ok(cg),
            Err(e) => {
                let _ = cg.free_weights(providers);
                Err(e)
            }
        }
    };
    let fused =
        if opts.fuse { providers.first().and_then(|p| fuse::all(&graph, *p)) } else { None };
    if let Some(fused) = fused {
        match place(&fused) {
            Ok(cg) => return Ok(cg),
            // The fused ops' requirements (shapes, dtypes) are checked when the
            // graph is inferred; a chain that does not meet them runs unfused.
            Err(e) => log::info!("compiling graph {:?} unfused: {e}", graph.name),
        }
    }
    place(&graph)
}

/// The graph being placed: the original values plus copies and duplicates, nodes in run order.
struct Pass<'a> {
    source: &'a Graph,
    providers: &'a [&'a dyn ExecutionProvider],
    opts: &'a CompileOptions<'a>,
    values: Vec<ValueInfo>,
    initializers: BTreeMap<ValueId, Tensor>,
    outputs: Vec<ValueId>,
    nodes: Vec<Node>,
    steps: Vec<Step>,
    traits: Vec<NodeTraits>,
    facts: Vec<Option<Fact>>,
    location: Vec<Option<usize>>,
    copies: HashMap<(ValueId, usize), ValueId>,
    /// f32 copies of half-precision values, per provider (see `widen`).
    widened: HashMap<(ValueId, usize), ValueId>,
    captures: Vec<(ValueId, ValueId)>,
}

impl<'a> Pass<'a> {
    fn new(
        source: &'a Graph,
        providers: &'a [&'a dyn ExecutionProvider],
        opts: &'a CompileOptions<'a>,
    ) -> Self {
        let n = source.values.len();
        Pass {
            source,
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

    fn run(
        &mut self,
        outer: &Scope,
        outputs_on: Option<usize>,
        input_facts: &[Option<Fact>],
    ) -> Result<(), Error> {
        let g = self.source;
        let order = topological_order(g)?;
        for (i, &v) in g.inputs.iter().enumerate() {
            let info = g.value(v);
            let fact = info
                .declared
                .as_ref()
                .and_then(declared_fact)
                .or_else(|| input_facts.get(i).cloned().flatten())
                .ok_or_else(|| Error::Input {
                    name: info.name.clone(),
                    reason: "the model declares no tensor type for it".into(),
                })?;
            self.facts[v.index()] = Some(fact);
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
            self.node(&g.nodes[n.index()])?;
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
    fn locate(&mut self, v: ValueId, p: usize) {
        if self.location[v.index()].is_none() && self.initializers.contains_key(&v) {
            self.location[v.index()] = Some(p);
        }
    }

    /// A value with the same contents on provider `p`: the value itself, a duplicate
    /// weight, or the output of an inserted copy node (made once per value and provider).
    fn on_provider(&mut self, v: ValueId, p: usize) -> ValueId {
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

    fn node(&mut self, source: &Node) -> Result<(), Error> {
        let desc = || source.desc();
        let mut op = self
            .opts
            .registry
            .build(source)
            .map_err(|source| Error::Op { node: desc(), source })?;
        let declared: Vec<Option<DType>> = source
            .outputs
            .iter()
            .map(|o| o.and_then(|v| self.values[v.index()].declared.as_ref()?.tensor_dtype()))
            .collect();
        op.declared_outputs(&declared);
        let in_facts: Vec<Option<Fact>> =
            source.inputs.iter().map(|i| i.and_then(|v| self.facts[v.index()].clone())).collect();
        if let Some((slot, _)) =
            source.inputs.iter().enumerate().find(|(i, v)| v.is_some() && in_facts[*i].is_none())
        {
            return Err(Error::Op {
                node: desc(),
                source: OpError::Invalid(format!("input {slot} has no inferable type")),
            });
        }
        let mut node = source.clone();
        let value_inputs = op.value_inputs();
        // Outputs computed in f32 and cast back after the node: (f32 value, original, fact).
        let mut narrow: Vec<(ValueId, ValueId, Fact)> = Vec::new();

        let (action, provider, out_facts, out_location) = if let Some((action, out)) =
            self.control(source, &mut node, &*op, &in_facts)?
        {
            (action, 0, out, Some(0))
        } else {
            let out = op
                .infer(&InferInputs::new(&in_facts))
                .map_err(|source| Error::Op { node: desc(), source })?;
            if let Some(values) = fold::fold(&*op, &in_facts, &out, fold::COMPILE_LIMIT) {
                // Computed from constants: the outputs become constants themselves.
                log::debug!("{}: computed from constants while compiling", source.desc());
                for (o, t) in source.outputs.iter().zip(values) {
                    if let Some(v) = *o {
                        self.facts[v.index()] = Some(Fact::from_tensor(&t));
                        self.initializers.insert(v, t);
                    }
                }
                return Ok(());
            }
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
        match op.decompose(node, in_facts, &mut b) {
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
    fn scope(&self) -> Scope {
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

    fn finish(self, captures: Vec<(ValueId, ValueId)>) -> CompiledGraph {
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

/// Uploads every initializer that lives on a provider (shape-only constants stay on the host).
fn upload_weights(
    cg: &mut CompiledGraph,
    providers: &[&dyn ExecutionProvider],
    opts: &CompileOptions<'_>,
) -> Result<(), Error> {
    let graph = cg.graph.clone();
    for (&v, t) in &graph.initializers {
        let (Some(p), Ok(bytes)) = (cg.location[v.index()], t.bytes()) else { continue };
        let ep = providers[p];
        let provider_err = |source| Error::Provider {
            backend: ep.name(),
            action: format!("uploading weight '{}'", graph.value(v).name),
            source,
        };
        let buffer =
            ep.allocate(bytes.len() as u64, t.dtype().align() as u32).map_err(provider_err)?;
        cg.weights.push((v, p, TensorArg { buffer, dtype: t.dtype(), shape: t.shape().to_vec() }));
        ep.upload(buffer, bytes).map_err(provider_err)?;
        if let Some(cb) = opts.on_upload {
            cb(bytes.len() as u64);
        }
    }
    Ok(())
}
