//! Folding at run time: a kernel step whose inputs are known on the host
//! (shape arithmetic) is computed there, its outputs kept as host values; a
//! host value is uploaded to its planned provider only when something reads
//! it as device data (see [`crate::ops::fold`]).

use super::Error;
use crate::graph::{Node, ValueId};
use crate::ops::fold::{self, Folding};
use crate::ops::{Fact, InferInputs};
use crate::tensor::Tensor;

use super::program::{CompiledGraph, Step};
use super::state::{Exec, Frame};
use super::value::Val;

impl Exec<'_> {
    /// The value of `v` if it lives on the host: a constant, or a host value.
    /// Device values read back earlier (for a copy, say) do not count: folding
    /// their consumers would trade a view or a kernel for an upload.
    pub(super) fn known(&self, cg: &CompiledGraph, frame: &Frame, v: ValueId) -> Option<Tensor> {
        if let Some(Val::Host(t)) = &frame.vals[v.index()] {
            return Some(t.clone());
        }
        cg.facts[v.index()].as_ref().and_then(|f| f.value.clone())
    }

    /// Computes a kernel step on the host when its op folds and its inputs
    /// allow; `false` when the kernel must run.
    pub(super) fn try_fold(
        &mut self,
        cg: &CompiledGraph,
        frame: &mut Frame,
        node: &Node,
        step: &Step,
    ) -> bool {
        let how = step.op.folds();
        let mut facts = Vec::with_capacity(node.inputs.len());
        for input in &node.inputs {
            let Some(v) = *input else {
                facts.push(None);
                continue;
            };
            if let Some(t) = self.known(cg, frame, v) {
                facts.push(Some(Fact::from_tensor(&t)));
                continue;
            }
            match (&frame.vals[v.index()], how) {
                (Some(Val::Tensor(s)), Folding::FromShapes) => {
                    facts.push(Some(Fact::known(s.dtype, &s.shape)));
                }
                _ => return false,
            }
        }
        let Ok(outs) = step.op.infer(&InferInputs::new(&facts)) else { return false };
        let Some(values) = fold::fold(&*step.op, &facts, &outs, fold::RUN_LIMIT) else {
            return false;
        };
        for (o, t) in node.outputs.iter().zip(values) {
            if let Some(v) = *o {
                frame.known.insert(v, t.clone());
                frame.vals[v.index()] = Some(Val::Host(t));
            }
        }
        true
    }

    /// Uploads `v` to its planned provider if it is a host value a device can
    /// hold, as if its producer had allocated it at step `at` (counted from 1;
    /// the plan's figures start its buffer there).
    pub(super) fn materialize(
        &mut self,
        cg: &CompiledGraph,
        frame: &mut Frame,
        v: ValueId,
        at: usize,
    ) -> Result<(), Error> {
        let Some(Val::Host(t)) = &frame.vals[v.index()] else { return Ok(()) };
        if t.dtype().byte_size(t.numel()).is_none() {
            return Ok(());
        }
        let p = cg.location[v.index()].unwrap_or(0);
        let t = t.clone();
        let slot = self.upload_tensor(p, &t, &format!("'{}'", cg.graph.value(v).name))?;
        frame.trace.allocated[v.index()] = Some(self.bufs[slot.key].buffer.size);
        frame.trace.allocated_at[v.index()] = Some(at);
        let val = Val::Tensor(slot);
        self.hold(&val, cg.plan.guard(v).is_some());
        frame.vals[v.index()] = Some(val);
        Ok(())
    }

    /// [`materialize`](Exec::materialize)s every input of a node.
    pub(super) fn materialize_inputs(
        &mut self,
        cg: &CompiledGraph,
        frame: &mut Frame,
        node: &Node,
        at: usize,
    ) -> Result<(), Error> {
        for v in node.all_inputs() {
            self.materialize(cg, frame, v, at)?;
        }
        Ok(())
    }

    /// [`materialize`](Exec::materialize)s the inputs a step reads as device
    /// data (not its value inputs, which stay on the host).
    pub(super) fn materialize_data(
        &mut self,
        cg: &CompiledGraph,
        frame: &mut Frame,
        node: &Node,
        step: &Step,
        at: usize,
    ) -> Result<(), Error> {
        for (i, input) in node.inputs.iter().enumerate() {
            if let (Some(v), false) = (*input, step.value_inputs.contains(&i)) {
                self.materialize(cg, frame, v, at)?;
            }
        }
        Ok(())
    }

    /// [`materialize`](Exec::materialize)s the outer values a subgraph captures.
    pub(super) fn materialize_captures(
        &mut self,
        cg: &CompiledGraph,
        frame: &mut Frame,
        sub: &CompiledGraph,
        at: usize,
    ) -> Result<(), Error> {
        for &(_, outer) in &sub.captures {
            self.materialize(cg, frame, outer, at)?;
        }
        Ok(())
    }
}
