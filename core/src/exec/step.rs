//! One step as the executor decides it at run time: fold on the host, or
//! infer the outputs' shapes, allocate or take a dying input's buffer, and
//! launch; views, subgraphs, sequences and copies. A run that records a
//! schedule keeps what each step decided (see `schedule`).

use super::Error;
use super::program::{Action, CompiledGraph, Step};
use super::schedule::{LaunchPlan, OutPlan, Place};
use super::state::{Exec, Frame};
use super::value::{Slot, Val, common_shape};
use crate::dtype::DType;
use crate::ep::{Launch, TensorArg};
use crate::error::OpError;
use crate::graph::{Node, ValueId};
use crate::ops::{Fact, InferInputs};
use crate::tensor::Tensor;

/// What a step did, as a recording keeps it.
pub(super) enum Taken {
    /// Computed on the host from known values.
    Folded,
    /// A kernel launch whose shapes and places followed from known values.
    Launch(LaunchPlan),
    /// A view whose shape followed from known values.
    View { dtype: DType, dims: Vec<usize>, known: Option<Tensor> },
    /// Anything else: subgraphs, sequences, host steps, copies, and steps
    /// that read device data on the host.
    Other,
}

impl Exec<'_> {
    /// Runs step `s` as the executor decides it at run time, and says what
    /// it did (the decision a recording keeps).
    pub(super) async fn step(
        &mut self,
        cg: &CompiledGraph,
        frame: &mut Frame,
        s: usize,
        step: &Step,
    ) -> Result<Taken, Error> {
        let node = &cg.graph.nodes[step.node.index()];
        let op_err = |source: OpError| Error::Op { node: node.desc(), source };
        match &step.action {
            Action::Kernel(kernel) => {
                if self.try_fold(cg, frame, node, step) {
                    return Ok(Taken::Folded);
                }
                self.materialize_data(cg, frame, node, step, s + 1)?;
                let reads = self.reads;
                let Gathered { args, values, facts } = self.gather(cg, frame, node, step).await?;
                // A launch is replayed only when nothing it decided came from device data.
                let record = frame.record.is_some() && self.reads == reads;
                let mut plans = Vec::new();
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
                        plans.push(None);
                        continue;
                    };
                    let (dtype, dims, bytes) = concrete(node, &out_facts, i)?;
                    let shared = self.shared_buffer(cg, frame, s, step, i, bytes);
                    let reuse = if shared.is_some() {
                        None
                    } else if i == 0
                        && self.release
                        && self.providers[step.provider].supports_in_place(*kernel)
                    {
                        self.in_place(cg, frame, s, bytes)
                    } else {
                        None
                    };
                    let (key, place) = match (shared, reuse) {
                        (Some((key, input)), _) => {
                            self.shared.keys.push(key);
                            (key, Place::Shared(input))
                        }
                        (None, Some((key, src))) => {
                            frame.trace.in_place[s] = Some(src);
                            (key, Place::Over(src))
                        }
                        (None, None) => {
                            let key =
                                self.alloc(step.provider, bytes, dtype.align() as u32, &|| {
                                    format!("output {i} of {}", node.desc())
                                })?;
                            frame.trace.allocated[v.index()] = Some(bytes);
                            if let (true, Some(r)) = (record, &mut frame.record) {
                                r.allocs.push((s, i, key));
                            }
                            (key, Place::Alloc)
                        }
                    };
                    let known = out_facts.get(i).and_then(|f| f.value.clone());
                    if record {
                        plans.push(Some(OutPlan {
                            value: v,
                            dtype,
                            dims: dims.clone(),
                            bytes,
                            place,
                            known: known.clone(),
                        }));
                    }
                    let slot = Slot { key, dtype, shape: dims };
                    outs.push(Some(self.arg(&slot)));
                    let val = Val::Tensor(slot);
                    // Hold at once, so the error path sees every buffer referenced.
                    self.hold(&val, cg.plan.guard(v).is_some());
                    new_vals.push((v, val));
                    if let Some(value) = known {
                        frame.known.insert(v, value);
                    }
                }
                let launch = Launch { inputs: &args, outputs: &outs, values: &values };
                let launched = self.launch(step.provider, *kernel, &launch);
                for (v, val) in new_vals {
                    frame.vals[v.index()] = Some(val);
                }
                launched.map_err(|source| Error::Kernel {
                    node: node.desc(),
                    backend: self.providers[step.provider].name(),
                    source,
                })?;
                if record {
                    return Ok(Taken::Launch(LaunchPlan { values, outputs: plans }));
                }
            }
            Action::View(slot) => {
                if self.try_fold(cg, frame, node, step) {
                    return Ok(Taken::Folded);
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
                    return Ok(Taken::Other);
                }
                let reads = self.reads;
                let facts = self.gather(cg, frame, node, step).await?.facts;
                let record = frame.record.is_some() && self.reads == reads;
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
                    let known = out_facts.first().and_then(|f| f.value.clone());
                    let taken = match record {
                        true => Taken::View { dtype, dims: dims.clone(), known: known.clone() },
                        false => Taken::Other,
                    };
                    let val = Val::Tensor(Slot { key: src.key, dtype, shape: dims });
                    self.hold(&val, cg.plan.guard(v).is_some());
                    if let Some(value) = known {
                        frame.known.insert(v, value);
                    }
                    frame.vals[v.index()] = Some(val);
                    return Ok(taken);
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
        Ok(Taken::Other)
    }

    /// The buffer key and value of the graph input that output `i` (`bytes`
    /// long) of step `s` is written into, where the caller shares the
    /// two (see [`run_sharing`](super::run_sharing)) and the op allows it: the
    /// node reads that input in the op's slot, on this step's provider,
    /// nothing reads it or a view of it after this step, and neither is a
    /// graph output.
    pub(super) fn shared_buffer(
        &self,
        cg: &CompiledGraph,
        frame: &Frame,
        s: usize,
        step: &Step,
        i: usize,
        bytes: u64,
    ) -> Option<(usize, ValueId)> {
        if self.shared.pairs.is_empty() || self.shared.graph != std::ptr::from_ref(cg) as usize {
            return None;
        }
        let node = &cg.graph.nodes[step.node.index()];
        let v = node.outputs.get(i).copied().flatten()?;
        let &(_, input) = self.shared.pairs.iter().find(|(o, _)| *o == v)?;
        let (_, slot) = step.op.shares_buffer().into_iter().find(|&(o, _)| o == i)?;
        let group = cg.plan.view_group[input.index()];
        // A graph output in the input's view group would be returned changed.
        let returned = cg.graph.outputs.iter().any(|o| cg.plan.view_group[o.index()] == group);
        if node.input(slot) != Some(input) || cg.plan.group_end[group.index()] != s || returned {
            return None;
        }
        let Some(Val::Tensor(x)) = &frame.vals[input.index()] else { return None };
        let b = &self.bufs[x.key];
        (!b.owned && b.provider == step.provider && b.buffer.size == bytes && b.arena.is_none())
            .then_some((x.key, input))
    }

    /// The buffer of a dying input that output 0 can take over, if the plan allows and sizes fit.
    pub(super) fn in_place(
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

    /// Device inputs, host values of the value inputs, and facts for inference.
    pub(super) async fn gather(
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
}

/// What a step's inputs are at run time.
pub(super) struct Gathered {
    /// Device tensors by slot (`None` for absent inputs, sequences and value inputs).
    pub(super) args: Vec<Option<TensorArg>>,
    /// Host tensors for the value inputs, by slot.
    pub(super) values: Vec<Option<Tensor>>,
    /// Concrete facts for inference.
    pub(super) facts: Vec<Option<Fact>>,
}

/// The concrete dtype, dims and byte size of output `i`.
pub(super) fn concrete(
    node: &Node,
    facts: &[Fact],
    i: usize,
) -> Result<(DType, Vec<usize>, u64), Error> {
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
