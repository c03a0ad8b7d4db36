//! The executor: allocate → launch → release at last use, over a value map
//! whose entries carry buffer, dtype and shape together (so no shape entry can
//! outlive its buffer), with buffers shared by reference count.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;

use super::Error;
use super::program::CompiledGraph;
use super::schedule::{Decision, Recorder, Signature, Use};
use super::state::{Exec, Frame, HostCost, Outputs, Shared};
use super::value::{DeviceValue, Slot, Val};
use crate::ep::{ExecutionProvider, TensorArg};
use crate::graph::ValueId;
use crate::ops::Fact;
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
    /// Host-cost accounting: with a clock, the time inside every kernel
    /// launch is summed (no synchronization) into [`RunResult::host`], so
    /// the executor's own time per step can be told from the kernels' (on
    /// the CPU, a launch runs its kernel before it returns).
    pub launch_clock: Option<fn() -> f64>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            release_dead_values: true,
            measure_timeline: false,
            clock: None,
            launch_clock: None,
        }
    }
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
    /// Per provider: the arena of the graph's schedule for these input
    /// shapes (planned by the first run with them, held by every later one;
    /// 0 where the provider has no arenas or the graph no schedule).
    pub arena_bytes: Vec<u64>,
    /// With [`RunOptions::launch_clock`]: the executor's time and the kernels'.
    pub host: Option<HostCost>,
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
    run_sharing(cg, providers, inputs, opts, &[]).await
}

/// Runs a compiled graph like [`run`], writing graph outputs into the buffers
/// of graph inputs where `shared` pairs them (`(output index, input index)`):
/// a decoder's present KV cache written into its past one, as
/// onnxruntime-genai's `past_present_share_buffer` does. An output is written
/// there only where the node producing it allows it for that input
/// ([`Op::shares_buffer`](crate::ops::Op::shares_buffer)), reads it in that
/// slot, is on the input's device, and nothing reads the input (or a view of
/// it) after that node; it is then returned as the same buffer as the input,
/// whose contents the run has changed. Elsewhere the output gets a buffer of
/// its own, as in [`run`].
///
/// # Errors
/// As [`run`].
pub async fn run_sharing(
    cg: &CompiledGraph,
    providers: &[&dyn ExecutionProvider],
    inputs: &[DeviceValue],
    opts: RunOptions,
    shared: &[(usize, usize)],
) -> Result<RunResult, Error> {
    let g = &cg.graph;
    let pairs =
        shared.iter().filter_map(|&(o, i)| Some((*g.outputs.get(o)?, *g.inputs.get(i)?))).collect();
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
        events: 0,
        reads: 0,
        arenas: Vec::new(),
        planned_arenas: Vec::new(),
        launch_clock: opts.launch_clock,
        cost: HostCost::default(),
        shared: Shared { graph: std::ptr::from_ref(cg) as usize, pairs, keys: Vec::new() },
    };
    let started = opts.launch_clock.map(|now| now());
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
        let mut arena_bytes = std::mem::take(&mut ex.planned_arenas);
        arena_bytes.resize(providers.len(), 0);
        let host = opts
            .launch_clock
            .zip(started)
            .map(|(now, t0)| HostCost { run_ms: now() - t0, ..ex.cost });
        Ok(RunResult {
            outputs,
            figures,
            releases: ex.releases,
            measured,
            step_ms,
            arena_bytes,
            host,
        })
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
            // Schedules hold only where release at last use decides the run.
            let sig = match self.release {
                true => Signature::of(bindings.iter().map(|(_, v)| v)),
                false => None,
            };
            let use_ = sig.as_ref().map_or(Use::Eager, |s| cg.schedules.start(s));
            let (schedule, record) = match use_ {
                Use::Follow(s) => (Some(s), None),
                Use::Record => (None, Some(Recorder::default())),
                Use::Eager => (None, None),
            };
            let mut frame = Frame {
                vals: vec![None; cg.graph.values.len()],
                known: HashMap::default(),
                read: HashMap::default(),
                trace: RunTrace::new(&cg.graph, &cg.plan, self.providers.len()),
                schedule,
                record,
                arenas: vec![None; self.providers.len()],
                strayed: false,
                exact: true,
            };
            let ran = self.run_frame(cg, &mut frame, bindings, top_level).await;
            let Some(sig) = sig else { return ran };
            match (&ran, frame.record.take()) {
                (Ok((_, figures)), Some(rec)) => {
                    let schedule = self.schedule(cg, rec, figures.clone());
                    if top_level {
                        self.planned_arenas = schedule.arenas.clone();
                    }
                    cg.schedules.finish(&sig, Some(schedule));
                }
                (Err(_), Some(_)) => cg.schedules.finish(&sig, None),
                _ => {}
            }
            if frame.strayed {
                cg.schedules.unstable(&sig);
            }
            ran
        })
    }

    /// Binds a graph run's values, runs its steps (following its schedule
    /// while the run stays on it), and takes its outputs.
    async fn run_frame(
        &mut self,
        cg: &CompiledGraph,
        frame: &mut Frame,
        bindings: Vec<(ValueId, Val)>,
        top_level: bool,
    ) -> Result<Outputs, Error> {
        if let Some(schedule) = frame.schedule.clone() {
            if top_level {
                self.planned_arenas = schedule.arenas.clone();
            }
            for (p, &bytes) in schedule.arenas.iter().enumerate() {
                if bytes > 0 {
                    frame.arenas[p] = Some(self.alloc_arena(p, bytes)?);
                }
            }
        }
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
        let schedule = frame.schedule.clone();
        for (s, step) in cg.steps.iter().enumerate() {
            let start = clock.map(|now| now());
            match schedule.as_ref().filter(|_| !frame.strayed) {
                Some(schedule) => {
                    let d = &schedule.decisions[s];
                    self.cost.steps += u64::from(!matches!(d, Decision::Skip));
                    self.follow(cg, frame, s, step, d).await?
                }
                None => {
                    self.cost.steps += 1;
                    let taken = self.step(cg, frame, s, step).await?;
                    if frame.record.is_some() {
                        let decision = self.decision(cg, frame, s, taken);
                        if let Some(rec) = &mut frame.record {
                            rec.decisions.push(decision);
                        }
                    }
                }
            }
            if let (Some(now), Some(start)) = (clock, start) {
                self.synchronize().await?;
                self.step_ms.push(now() - start);
            }
            if top_level {
                self.measure();
            }
            if self.release {
                for &v in &cg.plan.releases[s] {
                    if !frame.known.is_empty() {
                        frame.known.remove(&v);
                    }
                    if !frame.read.is_empty() {
                        frame.read.remove(&v);
                    }
                    if let Some(val) = frame.vals[v.index()].take() {
                        self.drop_val(&val)?;
                    }
                }
            }
        }
        let outs = self.finish(cg, frame)?;
        for a in frame.arenas.iter().flatten() {
            self.free_arena(*a)?;
        }
        let figures = match (&schedule, frame.exact && !frame.strayed) {
            (Some(s), true) => s.figures.clone(),
            _ => cg.figures(std::mem::take(&mut frame.trace)),
        };
        Ok((outs, figures))
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
                // An arena view goes back with its arena: outputs get buffers of their own.
                if b.owned && b.refs == 1 && b.arena.is_none() {
                    continue;
                }
                // An input's buffer the caller shares with this output stays its.
                if b.refs == 1 && self.shared.keys.contains(&slot.key) {
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
        if let Some(t) = frame.known.get(&v) {
            return Ok(t.clone());
        }
        if let Some(t) = cg.facts[v.index()].as_ref().and_then(|f| f.value.clone()) {
            return Ok(t);
        }
        if let Some(Val::Host(t)) = &frame.vals[v.index()] {
            return Ok(t.clone());
        }
        // Device data from here on: what is decided from it is not the signature's.
        self.reads += 1;
        if let Some(t) = frame.read.get(&v) {
            return Ok(t.clone());
        }
        let Some(Val::Tensor(slot)) = frame.vals[v.index()].clone() else {
            return Err(Error::Internal(format!(
                "value '{}' is not a live tensor",
                cg.graph.value(v).name
            )));
        };
        let t = self.read_slot(&slot, &format!("'{}'", cg.graph.value(v).name)).await?;
        frame.read.insert(v, t.clone());
        Ok(t)
    }
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
