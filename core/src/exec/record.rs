//! Turning a recording into a schedule: the folds nothing reads are
//! dropped, and the launches' buffers that died within the run are placed
//! in arenas.

use super::program::CompiledGraph;
use super::schedule::{AllocLife, Decision, Recorder, Schedule};
use super::state::Exec;
use crate::plan::{Lifetime, MemoryFigures};

impl Exec<'_> {
    /// The schedule a run of `cg` recorded, with its memory `figures`.
    pub(super) fn schedule(
        &self,
        cg: &CompiledGraph,
        rec: Recorder,
        figures: MemoryFigures,
    ) -> Schedule {
        let lives = self.lifetimes(&rec);
        let mut decisions = rec.decisions;
        skip_unread_folds(cg, &mut decisions);
        Schedule::new(decisions, &lives, self.providers, figures)
    }

    /// The lifetimes of the buffers a recording's launches allocated and the
    /// run freed: what the arena planner places.
    fn lifetimes(&self, rec: &Recorder) -> Vec<AllocLife> {
        rec.allocs
            .iter()
            .filter_map(|&(step, output, key)| {
                let b = &self.bufs[key];
                (b.freed != u32::MAX).then_some(AllocLife {
                    step,
                    output,
                    provider: b.provider,
                    life: Lifetime { size: b.buffer.size, start: b.born, end: b.freed },
                })
            })
            .collect()
    }
}

/// Turns into [`Decision::Skip`] every fold whose outputs nothing reads at
/// run time: no launch or view reads them as device data, no eager step
/// reads them at all, and they are not graph outputs. Exporters' shape
/// arithmetic (`Shape → Gather → Unsqueeze → Concat`) is mostly such folds:
/// the launches and views it shaped keep its results in their decisions.
fn skip_unread_folds(cg: &CompiledGraph, decisions: &mut [Decision]) {
    let mut read = vec![false; cg.graph.values.len()];
    for &o in &cg.graph.outputs {
        read[o.index()] = true;
    }
    for (step, d) in cg.steps.iter().zip(decisions.iter()) {
        let node = &cg.graph.nodes[step.node.index()];
        match d {
            Decision::Folded(_) | Decision::Skip => {}
            Decision::Launch(_) | Decision::View { .. } => {
                for (i, input) in node.inputs.iter().enumerate() {
                    if let (Some(v), false) = (input, step.value_inputs.contains(&i)) {
                        read[v.index()] = true;
                    }
                }
            }
            Decision::Eager(_) => {
                for v in node.all_inputs() {
                    read[v.index()] = true;
                }
            }
        }
    }
    for d in decisions.iter_mut() {
        if let Decision::Folded(outs) = d {
            if outs.iter().all(|(v, _)| !read[v.index()]) {
                *d = Decision::Skip;
            }
        }
    }
}
