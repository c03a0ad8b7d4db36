//! Following a schedule: each step does what the recording decided, with no
//! inference, folding or in-place search (see `schedule`).

use super::Error;
use super::program::{Action, CompiledGraph, Step};
use super::schedule::{Decision, Expect, Expected, LaunchPlan, Place, same_tensor};
use super::state::{Exec, Frame};
use super::step::Taken;
use super::value::{Slot, Val};
use crate::ep::Launch;
use crate::graph::Node;

impl Exec<'_> {
    /// Runs step `s` as `d` decided. A step that finds the run off its
    /// schedule runs eagerly instead, and sets [`Frame::strayed`].
    pub(super) async fn follow(
        &mut self,
        cg: &CompiledGraph,
        frame: &mut Frame,
        s: usize,
        step: &Step,
        d: &Decision,
    ) -> Result<(), Error> {
        let node = &cg.graph.nodes[step.node.index()];
        let done = match d {
            Decision::Skip => true,
            Decision::Folded(outs) => {
                for (v, t) in outs {
                    frame.known.insert(*v, t.clone());
                    frame.vals[v.index()] = Some(Val::Host(t.clone()));
                }
                true
            }
            Decision::View { dtype, dims, known } => {
                self.materialize_data(cg, frame, node, step, s + 1)?;
                let (Action::View(slot), Some(out)) =
                    (&step.action, node.outputs.first().copied().flatten())
                else {
                    return Err(Error::Internal(format!("{}: not a view", node.desc())));
                };
                match node.input(*slot).and_then(|v| frame.vals[v.index()].as_ref()) {
                    Some(Val::Tensor(src)) => {
                        let val =
                            Val::Tensor(Slot { key: src.key, dtype: *dtype, shape: dims.clone() });
                        self.hold(&val, cg.plan.guard(out).is_some());
                        if let Some(k) = known {
                            frame.known.insert(out, k.clone());
                        }
                        frame.vals[out.index()] = Some(val);
                        true
                    }
                    _ => false,
                }
            }
            Decision::Launch(plan) => self.launch_planned(cg, frame, s, step, node, plan)?,
            Decision::Eager(expected) => {
                self.step(cg, frame, s, step).await?;
                if !outputs_match(frame, node, expected) {
                    log::debug!(
                        "{}: outputs differ from the schedule's; eager from here",
                        node.desc()
                    );
                    frame.strayed = true;
                } else if frame.trace.inner[s] != expected.inner {
                    frame.exact = false;
                }
                return Ok(());
            }
        };
        if !done {
            // Nothing of the step has run (materializing is idempotent): run it as always.
            log::debug!("{}: inputs differ from the schedule's; eager from here", node.desc());
            frame.strayed = true;
            self.step(cg, frame, s, step).await?;
        }
        Ok(())
    }

    /// Launches a kernel step as planned; `false` (with nothing done) when an
    /// input is not the device tensor the plan expects.
    fn launch_planned(
        &mut self,
        cg: &CompiledGraph,
        frame: &mut Frame,
        s: usize,
        step: &Step,
        node: &Node,
        plan: &LaunchPlan,
    ) -> Result<bool, Error> {
        let Action::Kernel(kernel) = step.action else {
            return Err(Error::Internal(format!("{}: not a kernel", node.desc())));
        };
        self.materialize_data(cg, frame, node, step, s + 1)?;
        let mut args = Vec::with_capacity(node.inputs.len());
        for (i, input) in node.inputs.iter().enumerate() {
            match *input {
                Some(v) if !step.value_inputs.contains(&i) => match &frame.vals[v.index()] {
                    Some(Val::Tensor(slot)) => args.push(Some(self.arg(slot))),
                    _ => return Ok(false),
                },
                _ => args.push(None),
            }
        }
        let mut outs = Vec::with_capacity(plan.outputs.len());
        let mut new_vals = Vec::with_capacity(plan.outputs.len());
        for (i, o) in plan.outputs.iter().enumerate() {
            let Some(o) = o else {
                outs.push(None);
                continue;
            };
            let v = o.value;
            // Sharing is the caller's choice, run by run: asked for each time.
            let shared = self.shared_buffer(cg, frame, s, step, i, o.bytes);
            if shared.is_some() != matches!(o.place, Place::Shared(_)) {
                frame.exact = false;
            }
            let taken = match o.place {
                _ if shared.is_some() => None,
                Place::Over(src) => self.in_place(cg, frame, s, o.bytes).filter(|&(_, x)| x == src),
                _ => None,
            };
            let key = match (shared, taken) {
                (Some((key, _)), _) => {
                    self.shared.keys.push(key);
                    key
                }
                (None, Some((key, src))) => {
                    frame.trace.in_place[s] = Some(src);
                    key
                }
                (None, None) => {
                    let placed = match (o.place.clone(), frame.arenas[step.provider]) {
                        (Place::Arena(offset), Some(a)) => self.arena_view(a, offset, o.bytes)?,
                        _ => None,
                    };
                    if matches!(o.place, Place::Over(_)) {
                        // The dying input is held elsewhere this time: a buffer of its own.
                        frame.exact = false;
                    }
                    let key = match placed {
                        Some(key) => key,
                        None => {
                            self.alloc(step.provider, o.bytes, o.dtype.align() as u32, &|| {
                                format!("output {i} of {}", node.desc())
                            })?
                        }
                    };
                    frame.trace.allocated[v.index()] = Some(o.bytes);
                    key
                }
            };
            let slot = Slot { key, dtype: o.dtype, shape: o.dims.clone() };
            outs.push(Some(self.arg(&slot)));
            let val = Val::Tensor(slot);
            // Hold at once, so the error path sees every buffer referenced.
            self.hold(&val, cg.plan.guard(v).is_some());
            new_vals.push((v, val));
            if let Some(k) = &o.known {
                frame.known.insert(v, k.clone());
            }
        }
        let launch = Launch { inputs: &args, outputs: &outs, values: &plan.values };
        let launched = self.launch(step.provider, kernel, &launch);
        for (v, val) in new_vals {
            frame.vals[v.index()] = Some(val);
        }
        launched.map_err(|source| Error::Kernel {
            node: node.desc(),
            backend: self.providers[step.provider].name(),
            source,
        })?;
        Ok(true)
    }

    /// The decision a recording keeps for step `s`, which just did `taken`.
    pub(super) fn decision(
        &self,
        cg: &CompiledGraph,
        frame: &Frame,
        s: usize,
        taken: Taken,
    ) -> Decision {
        let node = &cg.graph.nodes[cg.steps[s].node.index()];
        match taken {
            Taken::Folded => Decision::Folded(
                node.outputs
                    .iter()
                    .flatten()
                    .filter_map(|&v| match &frame.vals[v.index()] {
                        Some(Val::Host(t)) => Some((v, t.clone())),
                        _ => None,
                    })
                    .collect(),
            ),
            Taken::Launch(plan) => Decision::Launch(Box::new(plan)),
            Taken::View { dtype, dims, known } => Decision::View { dtype, dims, known },
            Taken::Other => Decision::Eager(Box::new(Expected {
                outputs: node
                    .outputs
                    .iter()
                    .map(|o| {
                        let val = o.and_then(|v| frame.vals[v.index()].as_ref());
                        (Expect::of(val), o.and_then(|v| frame.known.get(&v).cloned()))
                    })
                    .collect(),
                inner: frame.trace.inner[s].clone(),
            })),
        }
    }
}

/// Whether an eager step's outputs are the recorded ones: the same dtypes
/// and shapes, and the same host values.
fn outputs_match(frame: &Frame, node: &Node, expected: &Expected) -> bool {
    node.outputs.len() == expected.outputs.len()
        && node.outputs.iter().zip(&expected.outputs).all(|(o, (e, known))| {
            let val = o.and_then(|v| frame.vals[v.index()].as_ref());
            let now = o.and_then(|v| frame.known.get(&v));
            e.matches(val)
                && match (known, now) {
                    (None, None) => true,
                    (Some(a), Some(b)) => same_tensor(a, b),
                    _ => false,
                }
        })
}
