//! The executor: allocate → launch → release at last use, over a value map
//! whose entries carry buffer, dtype and shape together (so no shape entry can
//! outlive its buffer), with buffers shared by reference count.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;

use super::program::{Action, CompiledGraph, Step};
use super::state::{Exec, Frame, Outputs, Slot, Val, common_shape};
use crate::dtype::DType;
use crate::ep::{ExecutionProvider, Launch, TensorArg};
use crate::error::{Error, OpError};
use crate::graph::{Node, ValueId};
use crate::ops::{Fact, InferInputs};
use crate::plan::{Guard, MemoryFigures, RunTrace};
use crate::tensor::Tensor;

/// Per-run settings.
#[derive(Copy, Clone, Debug)]
pub struct RunOptions {
    /// Release every intermediate right after its last consumer (default). Off keeps
    /// them all until the end of the run, and disables in-place reuse, for comparison.
    pub release_dead_values: bool,
    /// Read every provider's bytes in use after each top-level step and return
    /// them in [`RunResult::measured`] (for memory charts; costs a stats read per step).
    pub measure_timeline: bool,
    /// Profiling: with a clock (milliseconds from any origin), every provider
    /// is synchronized after each top-level step and the step's wall time is
    /// returned in [`RunResult::step_ms`]. Slower: use it to see where time goes.
    pub clock: Option<fn() -> f64>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions { release_dead_values: true, measure_timeline: false, clock: None }
    }
}

/// A value on the device: a tensor or a sequence of tensors.
#[derive(Clone, Debug, PartialEq)]
pub enum DeviceValue {
    /// A tensor.
    Tensor(TensorArg),
    /// A sequence of tensors of one dtype.
    Sequence(DType, Vec<TensorArg>),
    /// An optional holding nothing (see [`Value::Empty`](crate::tensor::Value::Empty)).
    Empty {
        /// The element dtype.
        dtype: DType,
        /// Whether the element would be a sequence.
        sequence: bool,
    },
    /// A tensor no device can hold (strings), kept on the host.
    Host(Tensor),
}

/// What a run returns. Output buffers now belong to the caller.
#[derive(Debug)]
pub struct RunResult {
    /// One value per graph output, in order.
    pub outputs: Vec<DeviceValue>,
    /// Memory figures computed by the planner from the sizes of this run.
    pub figures: MemoryFigures,
    /// Buffers released at last use during the run.
    pub releases: u64,
    /// With [`RunOptions::measure_timeline`]: bytes in use on all providers
    /// together, less what they held before the run, with the inputs bound and
    /// then as each top-level step finishes (before its dead values are
    /// released), aligned with the plan's timeline. Empty otherwise.
    pub measured: Vec<u64>,
    /// With [`RunOptions::clock`]: the wall time of each top-level step, in
    /// plan order, its device work included. Empty otherwise.
    pub step_ms: Vec<f64>,
}

/// Runs a compiled graph. Input buffers are lent: the executor never frees or
/// overwrites them. On success every buffer the run allocated has been freed
/// or is one of the returned outputs; on failure all of them have been freed.
///
/// # Errors
/// [`Error`] with the failing node, op and backend in its chain.
pub async fn run(
    cg: &CompiledGraph,
    providers: &[&dyn ExecutionProvider],
    inputs: &[DeviceValue],
    opts: RunOptions,
) -> Result<RunResult, Error> {
    let mut ex = Exec {
        providers,
        bufs: Vec::new(),
        owned: 0,
        release: opts.release_dead_values,
        releases: 0,
        deferred: Vec::new(),
        measured: None,
        clock: opts.clock,
        step_ms: Vec::new(),
    };
    if opts.measure_timeline {
        // Measured from what the providers held before the inputs were lent to us.
        let lent: u64 = inputs.iter().flat_map(tensors).map(|t| t.buffer.size).sum();
        ex.measured = Some((ex.in_use().saturating_sub(lent), Vec::new()));
    }
    let result = async {
        let bindings = ex.bind_inputs(cg, inputs)?;
        ex.measure();
        let (outs, figures) = ex.run_graph(cg, bindings, true).await?;
        ex.free_deferred()?;
        let outputs: Vec<DeviceValue> = outs.iter().map(|v| ex.device_value(v)).collect();
        // What the run still owns must be exactly the outputs' buffers (each
        // output owns its own: `finish` copies shared ones).
        let mut kept: Vec<usize> = outs.iter().flat_map(Val::slots).map(|s| s.key).collect();
        kept.sort_unstable();
        kept.dedup();
        let handed = kept.iter().filter(|&&k| ex.bufs[k].owned).count();
        if ex.owned != handed {
            let leaked = ex.owned.abs_diff(handed);
            return Err(Error::Internal(format!("{leaked} buffers leaked by the run")));
        }
        let measured = ex.measured.take().map(|(_, m)| m).unwrap_or_default();
        let step_ms = std::mem::take(&mut ex.step_ms);
        Ok(RunResult { outputs, figures, releases: ex.releases, measured, step_ms })
    }
    .await;
    if result.is_err() {
        ex.free_everything_owned();
    }
    result
}

fn tensors(v: &DeviceValue) -> Vec<&TensorArg> {
    match v {
        DeviceValue::Tensor(t) => vec![t],
        DeviceValue::Sequence(_, ts) => ts.iter().collect(),
        DeviceValue::Empty { .. } | DeviceValue::Host(_) => vec![],
    }
}

impl<'a> Exec<'a> {
    fn bind_inputs(
        &mut self,
        cg: &CompiledGraph,
        inputs: &[DeviceValue],
    ) -> Result<Vec<(ValueId, Val)>, Error> {
        let g = &cg.graph;
        if inputs.len() != g.inputs.len() {
            return Err(Error::Input {
                name: format!("({} given)", inputs.len()),
                reason: format!("the model has {} inputs", g.inputs.len()),
            });
        }
        let mut out = Vec::with_capacity(inputs.len());
        for (&v, input) in g.inputs.iter().zip(inputs) {
            let name = &g.value(v).name;
            let fact = cg.facts[v.index()].as_ref();
            let mut slot_of = |t: &TensorArg| -> Result<Slot, Error> {
                if let Some(f) = fact {
                    check_input(name, f, t)?;
                }
                // Inputs are expected on the primary provider, where the plan put them.
                if self.provider_of(t.buffer.device) != Some(0) {
                    return Err(Error::Input {
                        name: name.clone(),
                        reason: format!(
                            "its buffer is on {}, expected {}",
                            t.buffer.device,
                            self.providers[0].device()
                        ),
                    });
                }
                Ok(Slot {
                    key: self.adopt(t.buffer, 0, false),
                    dtype: t.dtype,
                    shape: t.shape.clone(),
                })
            };
            let val = match input {
                DeviceValue::Tensor(t) => Val::Tensor(slot_of(t)?),
                DeviceValue::Sequence(d, ts) => {
                    Val::Seq(*d, ts.iter().map(&mut slot_of).collect::<Result<_, _>>()?)
                }
                DeviceValue::Empty { dtype, sequence } => Val::Empty(*dtype, *sequence),
                DeviceValue::Host(t) => Val::Host(t.clone()),
            };
            self.hold(&val, true);
            out.push((v, val));
        }
        Ok(out)
    }

    pub(super) fn run_graph<'s>(
        &'s mut self,
        cg: &'s CompiledGraph,
        bindings: Vec<(ValueId, Val)>,
        top_level: bool,
    ) -> Pin<Box<dyn Future<Output = Result<Outputs, Error>> + 's>>
    where
        'a: 's,
    {
        Box::pin(async move {
            let mut frame = Frame {
                vals: vec![None; cg.graph.values.len()],
                host: HashMap::new(),
                trace: RunTrace::new(&cg.graph, &cg.plan, self.providers.len()),
            };
            for (v, p, w) in &cg.weights {
                let val = Val::Tensor(Slot {
                    key: self.adopt(w.buffer, *p, false),
                    dtype: w.dtype,
                    shape: w.shape.clone(),
                });
                self.hold(&val, true);
                frame.vals[v.index()] = Some(val);
            }
            for (v, val) in bindings {
                if cg.plan.guard(v) == Some(Guard::GraphInput) {
                    frame.trace.allocated[v.index()] =
                        Some(val.slots().iter().map(|s| self.bufs[s.key].buffer.size).sum());
                }
                frame.vals[v.index()] = Some(val);
            }
            let clock = if top_level { self.clock } else { None };
            if clock.is_some() {
                self.synchronize().await?;
            }
            for (s, step) in cg.steps.iter().enumerate() {
                let start = clock.map(|now| now());
                self.step(cg, &mut frame, s, step).await?;
                if let (Some(now), Some(start)) = (clock, start) {
                    self.synchronize().await?;
                    self.step_ms.push(now() - start);
                }
                if top_level {
                    self.measure();
                }
                if self.release {
                    for &v in &cg.plan.releases[s] {
                        frame.host.remove(&v);
                        if let Some(val) = frame.vals[v.index()].take() {
                            self.drop_val(&val)?;
                        }
                    }
                }
            }
            let outs = self.finish(cg, &mut frame)?;
            Ok((outs, cg.figures(std::mem::take(&mut frame.trace))))
        })
    }

    /// Takes the outputs, drops everything else, and copies any output whose
    /// buffer is not exclusively this run's (a weight, an input, another output).
    fn finish(&mut self, cg: &CompiledGraph, frame: &mut Frame) -> Result<Vec<Val>, Error> {
        let mut outs = Vec::with_capacity(cg.graph.outputs.len());
        for &o in &cg.graph.outputs {
            self.materialize(cg, frame, o, cg.steps.len() + 1)?;
            let val = frame.vals[o.index()].clone().ok_or_else(|| {
                Error::Internal(format!("output '{}' was never produced", cg.graph.value(o).name))
            })?;
            self.hold(&val, true);
            outs.push(val);
        }
        for val in frame.vals.iter_mut().filter_map(Option::take) {
            self.drop_val(&val)?;
        }
        for val in &mut outs {
            let slots = match val {
                Val::Tensor(s) => std::slice::from_mut(s),
                Val::Seq(_, s) => s.as_mut_slice(),
                Val::Empty(..) | Val::Host(_) => &mut [],
            };
            for slot in slots {
                let b = &self.bufs[slot.key];
                if b.owned && b.refs == 1 {
                    continue;
                }
                let (src, bytes, p) = (b.buffer, b.buffer.size, b.provider);
                let key =
                    self.alloc(p, bytes, slot.dtype.align() as u32, &|| "an output copy".into())?;
                let dst = self.bufs[key].buffer;
                self.providers[p]
                    .copy(src, dst, bytes)
                    .map_err(|e| self.provider_err(p, "copying an output".into(), e))?;
                frame.trace.output_copies[p] += bytes;
                let old = Val::Tensor(slot.clone());
                slot.key = key;
                self.bufs[key].refs = 1;
                self.drop_val(&old)?;
            }
        }
        Ok(outs)
    }

    pub(super) async fn host_value(
        &mut self,
        cg: &CompiledGraph,
        frame: &mut Frame,
        v: ValueId,
    ) -> Result<Tensor, Error> {
        if let Some(t) = frame.host.get(&v) {
            return Ok(t.clone());
        }
        if let Some(t) = cg.facts[v.index()].as_ref().and_then(|f| f.value.clone()) {
            return Ok(t);
        }
        if let Some(Val::Host(t)) = &frame.vals[v.index()] {
            return Ok(t.clone());
        }
        let Some(Val::Tensor(slot)) = frame.vals[v.index()].clone() else {
            return Err(Error::Internal(format!(
                "value '{}' is not a live tensor",
                cg.graph.value(v).name
            )));
        };
        let t = self.read_slot(&slot, &format!("'{}'", cg.graph.value(v).name)).await?;
        frame.host.insert(v, t.clone());
        Ok(t)
    }

    /// Device inputs, host values of the value inputs, and facts for inference.
    async fn gather(
        &mut self,
        cg: &CompiledGraph,
        frame: &mut Frame,
        node: &Node,
        step: &Step,
    ) -> Result<Gathered, Error> {
        let n = node.inputs.len();
        let mut g = Gathered {
            args: Vec::with_capacity(n),
            values: vec![None; n],
            facts: Vec::with_capacity(n),
        };
        for (i, input) in node.inputs.iter().enumerate() {
            let Some(v) = *input else {
                g.args.push(None);
                g.facts.push(None);
                continue;
            };
            if step.value_inputs.contains(&i) {
                // Shape arguments travel on the host; kernels read them from `values`.
                let t = self.host_value(cg, frame, v).await?;
                g.facts.push(Some(Fact::from_tensor(&t)));
                g.values[i] = Some(t);
                g.args.push(None);
                continue;
            }
            let val = frame.vals[v.index()].clone().ok_or_else(|| {
                Error::Internal(format!(
                    "{}: input '{}' is not live (released too early?)",
                    node.desc(),
                    cg.graph.value(v).name
                ))
            })?;
            match &val {
                Val::Tensor(slot) => {
                    g.args.push(Some(self.arg(slot)));
                    g.facts.push(Some(Fact::known(slot.dtype, &slot.shape)));
                }
                Val::Seq(d, items) => {
                    g.args.push(None);
                    g.facts.push(Some(Fact::sequence_of(*d, common_shape(items))));
                }
                Val::Empty(..) => {
                    return Err(Error::Op {
                        node: node.desc(),
                        source: OpError::Invalid(format!(
                            "input {i} is an optional holding nothing"
                        )),
                    });
                }
                Val::Host(t) => {
                    return Err(Error::Op {
                        node: node.desc(),
                        source: OpError::Unsupported(format!(
                            "input {i} is a {} tensor, which no device holds",
                            t.dtype()
                        )),
                    });
                }
            }
        }
        Ok(g)
    }

    async fn step(
        &mut self,
        cg: &CompiledGraph,
        frame: &mut Frame,
        s: usize,
        step: &Step,
    ) -> Result<(), Error> {
        let node = &cg.graph.nodes[step.node.index()];
        let op_err = |source: OpError| Error::Op { node: node.desc(), source };
        match &step.action {
            Action::Kernel(kernel) => {
                if self.try_fold(cg, frame, node, step) {
                    return Ok(());
                }
                self.materialize_data(cg, frame, node, step, s + 1)?;
                let Gathered { args, values, facts } = self.gather(cg, frame, node, step).await?;
                if let Some(i) = facts.iter().position(|f| f.as_ref().is_some_and(|f| f.sequence)) {
                    return Err(op_err(OpError::Invalid(format!(
                        "input {i} is a sequence, expected a tensor"
                    ))));
                }
                let out_facts = step.op.infer(&InferInputs::new(&facts)).map_err(op_err)?;
                let mut new_vals: Vec<(ValueId, Val)> = Vec::new();
                let mut outs: Vec<Option<TensorArg>> = Vec::with_capacity(node.outputs.len());
                for (i, o) in node.outputs.iter().enumerate() {
                    let Some(v) = *o else {
                        outs.push(None);
                        continue;
                    };
                    let (dtype, dims, bytes) = concrete(node, &out_facts, i)?;
                    let reuse = if i == 0
                        && self.release
                        && self.providers[step.provider].supports_in_place(*kernel)
                    {
                        self.in_place(cg, frame, s, bytes)
                    } else {
                        None
                    };
                    let key = match reuse {
                        Some((key, src)) => {
                            frame.trace.in_place[s] = Some(src);
                            key
                        }
                        None => {
                            let key =
                                self.alloc(step.provider, bytes, dtype.align() as u32, &|| {
                                    format!("output {i} of {}", node.desc())
                                })?;
                            frame.trace.allocated[v.index()] = Some(bytes);
                            key
                        }
                    };
                    let slot = Slot { key, dtype, shape: dims };
                    outs.push(Some(self.arg(&slot)));
                    let val = Val::Tensor(slot);
                    // Hold at once, so the error path sees every buffer referenced.
                    self.hold(&val, cg.plan.guard(v).is_some());
                    new_vals.push((v, val));
                    if let Some(value) = out_facts.get(i).and_then(|f| f.value.clone()) {
                        frame.host.insert(v, value);
                    }
                }
                let ep = self.providers[step.provider];
                let launched =
                    ep.launch(*kernel, &Launch { inputs: &args, outputs: &outs, values: &values });
                for (v, val) in new_vals {
                    frame.vals[v.index()] = Some(val);
                }
                launched.map_err(|source| Error::Kernel {
                    node: node.desc(),
                    backend: ep.name(),
                    source,
                })?;
            }
            Action::View(slot) => {
                if self.try_fold(cg, frame, node, step) {
                    return Ok(());
                }
                self.materialize_data(cg, frame, node, step, s + 1)?;
                // Identity also passes sequences and optionals through: same handles, one more reference.
                if let (Some(Val::Seq(..) | Val::Empty(..)), Some(v)) = (
                    node.input(*slot).and_then(|v| frame.vals[v.index()].clone()),
                    node.outputs.first().copied().flatten(),
                ) {
                    let val = frame.vals[node.input(*slot).expect("checked").index()]
                        .clone()
                        .expect("checked");
                    self.hold(&val, true);
                    frame.vals[v.index()] = Some(val);
                    return Ok(());
                }
                let facts = self.gather(cg, frame, node, step).await?.facts;
                let out_facts = step.op.infer(&InferInputs::new(&facts)).map_err(op_err)?;
                let src = node.input(*slot).and_then(|v| frame.vals[v.index()].clone());
                let Some(Val::Tensor(src)) = src else {
                    return Err(op_err(OpError::Invalid(format!("input {slot} must be a tensor"))));
                };
                if let Some(v) = node.outputs.first().copied().flatten() {
                    let (dtype, dims, bytes) = concrete(node, &out_facts, 0)?;
                    if bytes != self.bufs[src.key].buffer.size || dtype != src.dtype {
                        return Err(Error::Internal(format!(
                            "{}: a view must keep the byte size",
                            node.desc()
                        )));
                    }
                    let val = Val::Tensor(Slot { key: src.key, dtype, shape: dims });
                    self.hold(&val, cg.plan.guard(v).is_some());
                    if let Some(value) = out_facts.first().and_then(|f| f.value.clone()) {
                        frame.host.insert(v, value);
                    }
                    frame.vals[v.index()] = Some(val);
                }
            }
            Action::If { then_branch, else_branch } => {
                let cond_id = node.input(0).ok_or_else(|| op_err(OpError::MissingInput(0)))?;
                let cond = self.host_value(cg, frame, cond_id).await?;
                let cond = cond.to_i64_vec().map_err(|e| op_err(e.into()))?;
                let (branch, name) = match cond.as_slice() {
                    [c] if *c != 0 => (then_branch, "then_branch"),
                    [_] => (else_branch, "else_branch"),
                    _ => {
                        return Err(op_err(OpError::Shape(
                            "the If condition must hold one element".into(),
                        )));
                    }
                };
                self.run_branch(cg, frame, s, node, branch, name).await?;
            }
            Action::Resolved { branch, name } => {
                self.run_branch(cg, frame, s, node, branch, name).await?;
            }
            Action::Repeat { body } => {
                self.materialize_inputs(cg, frame, node, s + 1)?;
                self.materialize_captures(cg, frame, body, s + 1)?;
                self.repeat(cg, frame, s, step, body).await?;
            }
            Action::Host => self.on_host(cg, frame, node, step).await?,
            Action::Sequence(kind) => {
                self.materialize_inputs(cg, frame, node, s + 1)?;
                self.sequence(cg, frame, node, *kind).await?;
            }
            Action::Copy => self.copy_across(cg, frame, node, step.provider).await?,
        }
        Ok(())
    }

    /// Binds the values a subgraph captures, one reference each for the subgraph.
    pub(super) fn bind_captures(
        &mut self,
        cg: &CompiledGraph,
        frame: &Frame,
        sub: &CompiledGraph,
    ) -> Result<Vec<(ValueId, Val)>, Error> {
        let mut bindings = Vec::with_capacity(sub.captures.len());
        for (inner, outer) in &sub.captures {
            let val = frame.vals[outer.index()].clone().ok_or_else(|| {
                Error::Internal(format!("captured '{}' is not live", cg.graph.value(*outer).name))
            })?;
            // The extra reference keeps the value alive and unwritable
            // (in place needs a sole reference) while the subgraph runs.
            self.hold(&val, false);
            bindings.push((*inner, val));
        }
        Ok(bindings)
    }

    /// Stores a node's outputs (each already holding one reference), or drops
    /// those the node does not name.
    pub(super) fn set_outputs(
        &mut self,
        cg: &CompiledGraph,
        frame: &mut Frame,
        node: &Node,
        outs: Vec<Val>,
    ) -> Result<(), Error> {
        for (o, val) in node.outputs.iter().zip(outs) {
            match o {
                Some(v) => {
                    let bytes: u64 = val.slots().iter().map(|x| self.bufs[x.key].buffer.size).sum();
                    frame.trace.allocated[v.index()] = Some(bytes);
                    if cg.plan.guard(*v).is_some() || matches!(val, Val::Seq(..)) {
                        for x in val.slots() {
                            self.bufs[x.key].guarded = true;
                        }
                    }
                    frame.vals[v.index()] = Some(val);
                }
                None => self.drop_val(&val)?,
            }
        }
        Ok(())
    }

    /// Runs one branch of an `If` and takes its outputs as the node's.
    async fn run_branch(
        &mut self,
        cg: &CompiledGraph,
        frame: &mut Frame,
        s: usize,
        node: &Node,
        branch: &CompiledGraph,
        name: &str,
    ) -> Result<(), Error> {
        self.materialize_captures(cg, frame, branch, s + 1)?;
        let bindings = self.bind_captures(cg, frame, branch)?;
        let (outs, figures) = self.run_graph(branch, bindings, false).await.map_err(|e| {
            Error::Subgraph { node: node.desc(), branch: name.into(), source: Box::new(e) }
        })?;
        frame.trace.inner[s] = Some(figures);
        self.set_outputs(cg, frame, node, outs)
    }

    /// Copies input 0 to provider `to` through the host (download, then upload).
    async fn copy_across(
        &mut self,
        cg: &CompiledGraph,
        frame: &mut Frame,
        node: &Node,
        to: usize,
    ) -> Result<(), Error> {
        let (Some(src), Some(dst)) = (node.input(0), node.outputs.first().copied().flatten())
        else {
            return Err(Error::Internal(format!("{}: malformed copy", node.desc())));
        };
        let t = self.host_value(cg, frame, src).await?;
        let slot = self.upload_tensor(to, &t, &node.desc().to_string())?;
        frame.trace.allocated[dst.index()] = Some(self.bufs[slot.key].buffer.size);
        let val = Val::Tensor(slot);
        self.hold(&val, cg.plan.guard(dst).is_some());
        frame.vals[dst.index()] = Some(val);
        Ok(())
    }

    /// The buffer of a dying input that output 0 can take over, if the plan allows and sizes fit.
    fn in_place(
        &self,
        cg: &CompiledGraph,
        frame: &Frame,
        s: usize,
        bytes: u64,
    ) -> Option<(usize, ValueId)> {
        cg.plan.in_place[s].iter().find_map(|&(_, v)| {
            let Some(Val::Tensor(slot)) = &frame.vals[v.index()] else { return None };
            let b = &self.bufs[slot.key];
            (b.owned && !b.guarded && b.refs == 1 && b.buffer.size == bytes)
                .then_some((slot.key, v))
        })
    }
}

/// What a step's inputs are at run time.
struct Gathered {
    /// Device tensors by slot (`None` for absent inputs, sequences and value inputs).
    args: Vec<Option<TensorArg>>,
    /// Host tensors for the value inputs, by slot.
    values: Vec<Option<Tensor>>,
    /// Concrete facts for inference.
    facts: Vec<Option<Fact>>,
}

/// The concrete dtype, dims and byte size of output `i`.
fn concrete(node: &Node, facts: &[Fact], i: usize) -> Result<(DType, Vec<usize>, u64), Error> {
    let err = |m: String| Error::Op { node: node.desc(), source: OpError::Shape(m) };
    let f =
        facts.get(i).ok_or_else(|| err(format!("inference produced no fact for output {i}")))?;
    let dims =
        f.dims().ok_or_else(|| err(format!("the shape of output {i} could not be determined")))?;
    let bytes = f.dtype.byte_size(dims.iter().product()).ok_or_else(|| Error::Op {
        node: node.desc(),
        source: OpError::Unsupported(format!("{} tensors on a device", f.dtype)),
    })?;
    Ok((f.dtype, dims, bytes as u64))
}

fn check_input(name: &str, fact: &Fact, t: &TensorArg) -> Result<(), Error> {
    let err = |reason: String| Error::Input { name: name.into(), reason };
    if t.dtype != fact.dtype {
        return Err(err(format!("expected dtype {}, got {}", fact.dtype, t.dtype)));
    }
    if let Some(shape) = &fact.shape {
        if shape.rank() != t.shape.len() {
            return Err(err(format!("expected shape {shape}, got {:?}", t.shape)));
        }
        for (d, &n) in shape.0.iter().zip(&t.shape) {
            if d.known().is_some_and(|k| k != n) {
                return Err(err(format!("expected shape {shape}, got {:?}", t.shape)));
            }
        }
    }
    let bytes = t.dtype.byte_size(t.numel()).unwrap_or(0) as u64;
    if t.buffer.size < bytes {
        return Err(err(format!(
            "its buffer holds {} bytes, the tensor needs {bytes}",
            t.buffer.size
        )));
    }
    Ok(())
}
