//! Loops in the executor: `Loop`, `Scan` and `SequenceMap` run their compiled
//! body once per iteration. Loop-carried values and sequence elements move
//! between iterations as device handles; scan inputs are sliced and scan
//! outputs stacked on the host (one download per scan input, one upload per
//! slice and per stacked output).
//!
//! References: the loop holds one reference to each carried value; every
//! binding given to the body gets one more, which the body drops when it
//! finishes; the body's outputs come back holding one reference each.

use super::Error;
use crate::dtype::DType;
use crate::error::OpError;
use crate::graph::{Node, ValueId};
use crate::ops::looping::{Loop, Scan, SequenceMap, norm_axis};
use crate::ops::{Fact, downcast};
use crate::plan::MemoryFigures;
use crate::tensor::Tensor;

use super::program::{CompiledGraph, Step};
use super::slices::{stack, take};
use super::state::{Exec, Frame};
use super::value::{Slot, Val};

/// Iterations allowed to a `Loop` with no trip count: a condition that never
/// turns false fails the run instead of hanging it.
pub const MAX_OPEN_ITERATIONS: u64 = 1 << 24;

/// Folds one iteration's figures into the step's: the highest live set, and
/// every byte allocated by any iteration.
fn merge(acc: &mut Option<MemoryFigures>, f: MemoryFigures) {
    let Some(a) = acc else {
        *acc = Some(f);
        return;
    };
    a.no_release_bytes += f.no_release_bytes;
    for (p, q) in a.per_provider.iter_mut().zip(&f.per_provider) {
        p.live_set_bound = p.live_set_bound.max(q.live_set_bound);
        p.no_release_bytes += q.no_release_bytes;
    }
    if f.live_set_bound > a.live_set_bound {
        a.live_set_bound = f.live_set_bound;
        a.timeline = f.timeline;
    }
}

/// The dtype and (where known) dims of a body output's slices: what a scan
/// output stacks, and its shape when there were no iterations.
fn slice_type(f: Option<&Fact>) -> (DType, Vec<usize>) {
    (f.map_or(DType::F32, |f| f.dtype), f.and_then(|f| f.dims()).unwrap_or_default())
}

impl Exec<'_> {
    /// Runs a `Loop`, `Scan` or `SequenceMap` step.
    pub(super) async fn repeat(
        &mut self,
        cg: &CompiledGraph,
        frame: &mut Frame,
        s: usize,
        step: &Step,
        body: &CompiledGraph,
    ) -> Result<(), Error> {
        let node = &cg.graph.nodes[step.node.index()];
        let mut figures = None;
        let outs = if downcast::<Loop>(&*step.op).is_some() {
            self.run_loop(cg, frame, node, body, &mut figures).await
        } else if let Some(sc) = downcast::<Scan>(&*step.op) {
            self.run_scan(cg, frame, node, sc, body, &mut figures).await
        } else if downcast::<SequenceMap>(&*step.op).is_some() {
            self.run_map(cg, frame, node, body, &mut figures).await
        } else {
            Err(Error::Internal(format!("{}: not a loop", node.desc())))
        }?;
        frame.trace.inner[s] = figures;
        self.set_outputs(cg, frame, node, outs)
    }

    /// Runs the body once with `inputs` (each given one reference for the body).
    async fn iterate(
        &mut self,
        cg: &CompiledGraph,
        frame: &Frame,
        node: &Node,
        body: &CompiledGraph,
        inputs: &[Val],
        figures: &mut Option<MemoryFigures>,
    ) -> Result<Vec<Val>, Error> {
        let mut bindings: Vec<(ValueId, Val)> = Vec::with_capacity(inputs.len());
        for (&v, val) in body.graph.inputs.iter().zip(inputs) {
            self.hold(val, false);
            bindings.push((v, val.clone()));
        }
        bindings.extend(self.bind_captures(cg, frame, body)?);
        let (outs, f) = self.run_graph(body, bindings, false).await.map_err(|e| {
            Error::Subgraph { node: node.desc(), branch: "body".into(), source: Box::new(e) }
        })?;
        merge(figures, f);
        Ok(outs)
    }

    /// A body output that must be a tensor, read back and released.
    async fn take_host(&mut self, node: &Node, val: Val, what: &str) -> Result<Tensor, Error> {
        let Val::Tensor(slot) = &val else {
            self.drop_val(&val)?;
            return Err(Error::Op {
                node: node.desc(),
                source: OpError::Invalid(format!("{what} must be a tensor, not a sequence")),
            });
        };
        let t = self.read_slot(slot, what).await;
        self.drop_val(&val)?;
        t
    }

    /// A host tensor as a new value on the primary provider (no references yet).
    fn host_val(&mut self, t: &Tensor, what: &str) -> Result<Val, Error> {
        Ok(Val::Tensor(self.upload_tensor(0, t, what)?))
    }

    fn drop_all(&mut self, vals: &[Val]) -> Result<(), Error> {
        for v in vals {
            self.drop_val(v)?;
        }
        Ok(())
    }

    async fn optional_scalar(
        &mut self,
        cg: &CompiledGraph,
        frame: &mut Frame,
        node: &Node,
        i: usize,
    ) -> Result<Option<i64>, Error> {
        let Some(v) = node.input(i) else { return Ok(None) };
        let t = self.host_value(cg, frame, v).await?;
        let op_err = |source: OpError| Error::Op { node: node.desc(), source };
        match t.to_i64_vec().map_err(|e| op_err(e.into()))?.as_slice() {
            [x] => Ok(Some(*x)),
            _ => Err(op_err(OpError::Shape(format!("input {i} must hold one element")))),
        }
    }

    fn input_val(
        &self,
        cg: &CompiledGraph,
        frame: &Frame,
        node: &Node,
        i: usize,
    ) -> Result<Val, Error> {
        let v = node
            .input(i)
            .ok_or_else(|| Error::Op { node: node.desc(), source: OpError::MissingInput(i) })?;
        frame.vals[v.index()].clone().ok_or_else(|| {
            Error::Internal(format!(
                "{}: input '{}' is not live",
                node.desc(),
                cg.graph.value(v).name
            ))
        })
    }

    async fn run_loop(
        &mut self,
        cg: &CompiledGraph,
        frame: &mut Frame,
        node: &Node,
        body: &CompiledGraph,
        figures: &mut Option<MemoryFigures>,
    ) -> Result<Vec<Val>, Error> {
        let op_err = |source: OpError| Error::Op { node: node.desc(), source };
        let trip = self.optional_scalar(cg, frame, node, 0).await?;
        let mut cond = self.optional_scalar(cg, frame, node, 1).await?.is_none_or(|c| c != 0);
        let n = node.inputs.len() - 2;
        let mut carried = Vec::with_capacity(n);
        for i in 0..n {
            let val = self.input_val(cg, frame, node, i + 2)?;
            self.hold(&val, false);
            carried.push(val);
        }
        let k = body.graph.outputs.len() - 1 - n;
        let mut scans: Vec<Vec<Tensor>> = vec![Vec::new(); k];
        let mut i: i64 = 0;
        let result = async {
            while cond && trip.is_none_or(|m| i < m) {
                if trip.is_none() && i as u64 >= MAX_OPEN_ITERATIONS {
                    return Err(op_err(OpError::Invalid(format!(
                        "the loop ran {MAX_OPEN_ITERATIONS} iterations without its condition \
                         turning false and has no trip count"
                    ))));
                }
                let mut inputs = vec![
                    self.host_val(&Tensor::scalar(i), "the iteration number")?,
                    self.host_val(
                        &Tensor::from_bools(vec![], &[cond]).map_err(|e| op_err(e.into()))?,
                        "the loop condition",
                    )?,
                ];
                inputs.extend(carried.iter().cloned());
                let outs = self.iterate(cg, frame, node, body, &inputs, figures).await;
                let mut outs = outs?.into_iter();
                let c =
                    self.take_host(node, outs.next().expect("checked"), "the condition").await?;
                cond =
                    c.to_i64_vec().map_err(|e| op_err(e.into()))?.first().is_some_and(|&c| c != 0);
                let next: Vec<Val> = outs.by_ref().take(n).collect();
                self.drop_all(&carried)?;
                carried = next;
                for (j, val) in outs.enumerate() {
                    scans[j].push(self.take_host(node, val, "a scan output").await?);
                }
                i += 1;
            }
            Ok(())
        }
        .await;
        if let Err(e) = result {
            self.drop_all(&carried)?;
            return Err(e);
        }
        let facts = body.output_facts();
        let mut outs = carried;
        for (j, parts) in scans.iter().enumerate() {
            let (dtype, empty) = slice_type(facts[1 + n + j].as_ref());
            let t = stack(parts, 0, dtype, &empty)?;
            outs.push(self.host_val(&t, "a scan output")?);
        }
        for v in &outs[n..] {
            self.hold(v, false);
        }
        Ok(outs)
    }

    async fn run_scan(
        &mut self,
        cg: &CompiledGraph,
        frame: &mut Frame,
        node: &Node,
        sc: &Scan,
        body: &CompiledGraph,
        figures: &mut Option<MemoryFigures>,
    ) -> Result<Vec<Val>, Error> {
        let op_err = |m: String| Error::Op { node: node.desc(), source: OpError::Shape(m) };
        let first = usize::from(sc.batched);
        let m = sc.num_scan_inputs;
        let n = node.inputs.len() - first - m;
        let k = body.graph.outputs.len() - n;
        // Scan inputs on the host, with the axis iterated.
        let mut inputs = Vec::with_capacity(m);
        for j in 0..m {
            let v = node
                .input(first + n + j)
                .ok_or_else(|| op_err(format!("scan input {j} is missing")))?;
            let t = self.host_value(cg, frame, v).await?;
            let axis = if sc.batched { 1 } else { sc.input_axes[j] };
            let axis = norm_axis(axis, t.shape().len()).ok_or_else(|| {
                op_err(format!("scan input {j} has no axis {axis}: {:?}", t.shape()))
            })?;
            inputs.push((t, axis));
        }
        let len = inputs[0].0.shape()[inputs[0].1];
        if let Some((t, a)) = inputs.iter().find(|(t, a)| t.shape()[*a] != len) {
            return Err(op_err(format!(
                "scan inputs differ in length: {len} and {} ({:?})",
                t.shape()[*a],
                t.shape()
            )));
        }
        let mut states = Vec::with_capacity(n);
        for i in 0..n {
            states.push(self.input_val(cg, frame, node, first + i)?);
        }
        let batches = if sc.batched {
            if let Some(lens) = node.input(0) {
                let lens = self
                    .host_value(cg, frame, lens)
                    .await?
                    .to_i64_vec()
                    .map_err(|e| Error::Op { node: node.desc(), source: e.into() })?;
                if lens.iter().any(|&l| l != len as i64) {
                    return Err(Error::Op {
                        node: node.desc(),
                        source: OpError::Unsupported(format!(
                            "sequence_lens {lens:?} shorter than the scan length {len}"
                        )),
                    });
                }
            }
            inputs[0].0.shape()[0]
        } else {
            1
        };
        let facts = body.output_facts();
        let mut state_parts: Vec<Vec<Tensor>> = vec![Vec::new(); n];
        let mut scan_parts: Vec<Vec<Tensor>> = vec![Vec::new(); k];
        let mut final_states: Vec<Val> = Vec::new();
        for b in 0..batches {
            // This batch's states: the inputs themselves, or (opset 8) their slice b.
            let mut carried = Vec::with_capacity(n);
            for st in &states {
                let val = if sc.batched {
                    let Val::Tensor(slot) = st else {
                        self.drop_all(&carried)?;
                        return Err(op_err("scan states must be tensors".into()));
                    };
                    let t = self.read_slot(slot, "a scan state").await?;
                    self.host_val(&take(&t, 0, b)?, "a scan state")?
                } else {
                    st.clone()
                };
                self.hold(&val, false);
                carried.push(val);
            }
            let mut per_out: Vec<Vec<Tensor>> = vec![Vec::new(); k];
            for t in 0..len {
                let step = async {
                    let mut ins = carried.clone();
                    for (j, (x, axis)) in inputs.iter().enumerate() {
                        let at = if sc.input_reverse[j] { len - 1 - t } else { t };
                        let slice = if sc.batched {
                            take(&take(x, 0, b)?, 0, at)?
                        } else {
                            take(x, *axis, at)?
                        };
                        ins.push(self.host_val(&slice, "a scan input slice")?);
                    }
                    self.iterate(cg, frame, node, body, &ins, figures).await
                };
                let outs = match step.await {
                    Ok(o) => o,
                    Err(e) => {
                        self.drop_all(&carried)?;
                        return Err(e);
                    }
                };
                let mut outs = outs.into_iter();
                let next: Vec<Val> = outs.by_ref().take(n).collect();
                self.drop_all(&carried)?;
                carried = next;
                for (j, val) in outs.enumerate() {
                    per_out[j].push(self.take_host(node, val, "a scan output").await?);
                }
            }
            for (j, mut parts) in per_out.into_iter().enumerate() {
                if sc.output_reverse[j] {
                    parts.reverse();
                }
                let (dtype, empty) = slice_type(facts[n + j].as_ref());
                let rank = parts.first().map_or(empty.len(), |p| p.shape().len());
                let axis = if sc.batched { 0 } else { sc.output_axes[j] };
                let axis = norm_axis(axis, rank + 1)
                    .ok_or_else(|| op_err(format!("scan output {j} has no axis {axis}")))?;
                scan_parts[j].push(stack(&parts, axis, dtype, &empty)?);
            }
            if sc.batched {
                for (i, val) in carried.iter().enumerate() {
                    let Val::Tensor(slot) = val else { continue };
                    let t = self.read_slot(slot, "a scan state").await?;
                    state_parts[i].push(t);
                }
                self.drop_all(&carried)?;
            } else {
                final_states = carried;
            }
        }
        let mut outs = Vec::with_capacity(n + k);
        if sc.batched {
            for (i, parts) in state_parts.iter().enumerate() {
                let dtype = facts[i].as_ref().map_or(DType::F32, |f| f.dtype);
                outs.push(self.host_val(&stack(parts, 0, dtype, &[])?, "a scan state")?);
            }
        } else {
            outs.extend(final_states);
        }
        for (j, parts) in scan_parts.iter().enumerate() {
            let t = if sc.batched {
                let dtype = facts[n + j].as_ref().map_or(DType::F32, |f| f.dtype);
                stack(parts, 0, dtype, &[])?
            } else {
                parts[0].clone()
            };
            outs.push(self.host_val(&t, "a scan output")?);
        }
        let uploaded = if sc.batched { 0 } else { n };
        for v in &outs[uploaded..] {
            self.hold(v, false);
        }
        Ok(outs)
    }

    async fn run_map(
        &mut self,
        cg: &CompiledGraph,
        frame: &mut Frame,
        node: &Node,
        body: &CompiledGraph,
        figures: &mut Option<MemoryFigures>,
    ) -> Result<Vec<Val>, Error> {
        let op_err = |m: String| Error::Op { node: node.desc(), source: OpError::Shape(m) };
        let ins: Vec<Val> = (0..node.inputs.len())
            .map(|i| self.input_val(cg, frame, node, i))
            .collect::<Result<_, _>>()?;
        let Val::Seq(_, first) = &ins[0] else {
            return Err(op_err("input 0 must be a sequence".into()));
        };
        let len = first.len();
        if let Some(Val::Seq(_, s)) =
            ins.iter().find(|v| matches!(v, Val::Seq(_, s) if s.len() != len))
        {
            return Err(op_err(format!("sequences of {len} and {} elements", s.len())));
        }
        let facts = body.output_facts();
        let mut collected: Vec<Vec<Slot>> = vec![Vec::new(); body.graph.outputs.len()];
        let r = self.map_items(cg, frame, node, body, &ins, &mut collected, figures).await;
        let outs: Vec<Val> = collected
            .into_iter()
            .enumerate()
            .map(|(j, items)| {
                let dtype = items
                    .first()
                    .map(|s| s.dtype)
                    .or_else(|| facts[j].as_ref().map(|f| f.dtype))
                    .unwrap_or(DType::F32);
                Val::Seq(dtype, items)
            })
            .collect();
        if let Err(e) = r {
            self.drop_all(&outs)?;
            return Err(e);
        }
        Ok(outs)
    }

    /// Runs a `SequenceMap` body over every position, collecting its outputs.
    #[allow(clippy::too_many_arguments)]
    async fn map_items(
        &mut self,
        cg: &CompiledGraph,
        frame: &Frame,
        node: &Node,
        body: &CompiledGraph,
        ins: &[Val],
        collected: &mut [Vec<Slot>],
        figures: &mut Option<MemoryFigures>,
    ) -> Result<(), Error> {
        let len = match &ins[0] {
            Val::Seq(_, items) => items.len(),
            Val::Tensor(_) | Val::Empty(..) | Val::Host(_) => 0,
        };
        for i in 0..len {
            let args: Vec<Val> = ins
                .iter()
                .map(|v| match v {
                    Val::Seq(_, items) => Val::Tensor(items[i].clone()),
                    t => t.clone(),
                })
                .collect();
            let outs = self.iterate(cg, frame, node, body, &args, figures).await?;
            for (j, val) in outs.into_iter().enumerate() {
                match val {
                    Val::Tensor(slot) => collected[j].push(slot),
                    other => {
                        self.drop_val(&other)?;
                        return Err(Error::Op {
                            node: node.desc(),
                            source: OpError::Invalid(
                                "a SequenceMap body output must be a tensor".into(),
                            ),
                        });
                    }
                }
            }
        }
        Ok(())
    }
}
