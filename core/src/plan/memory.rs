//! Memory figures computed from the plan and the sizes a run produced,
//! independently of any provider's accounting. Tests compare the two.

use super::Plan;
use crate::graph::{Graph, ValueId};

/// What a run recorded, as the planner needs it to compute memory figures.
#[derive(Clone, Debug, Default)]
pub struct RunTrace {
    /// For each value, the bytes of the buffer it allocated (`None`: it allocated
    /// nothing: a view, an in-place output, an initializer, a sequence).
    pub allocated: Vec<Option<u64>>,
    /// For each step, the value whose buffer output 0 took over (in place).
    pub in_place: Vec<Option<ValueId>>,
    /// For each step that ran a subgraph, that subgraph's figures.
    pub inner: Vec<Option<MemoryFigures>>,
    /// Bytes of the copies made at the end so outputs own their buffers.
    pub output_copies: u64,
}

impl RunTrace {
    /// An empty trace for a graph and plan.
    pub fn new(graph: &Graph, plan: &Plan) -> Self {
        RunTrace {
            allocated: vec![None; graph.values.len()],
            in_place: vec![None; plan.order.len()],
            inner: vec![None; plan.order.len()],
            output_copies: 0,
        }
    }
}

/// Memory figures of one run, in bytes. Initializers are not included: they
/// belong to the session and are resident before and after every run.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryFigures {
    /// Peak of the live set the plan allows: with release at last use, the
    /// executor's device peak must equal it.
    pub live_set_bound: u64,
    /// Every byte allocated during the run: the peak when nothing is released.
    pub no_release_bytes: u64,
}

impl Plan {
    /// Computes the figures for a run that allocated as `trace` says.
    pub fn memory_figures(&self, graph: &Graph, trace: &RunTrace) -> MemoryFigures {
        let nv = graph.values.len();
        let steps = self.order.len();
        // Groups: static views plus the in-place merges the run actually made.
        let mut parent: Vec<usize> = (0..nv).collect();
        let find = |p: &mut Vec<usize>, mut x: usize| {
            while p[x] != x {
                p[x] = p[p[x]];
                x = p[x];
            }
            x
        };
        for v in 0..nv {
            let g = self.view_group[v].index();
            let (a, b) = (find(&mut parent, g), find(&mut parent, v));
            parent[b] = a;
        }
        for (s, taken) in trace.in_place.iter().enumerate() {
            if let Some(src) = taken {
                if let Some(out) = self.outputs_of_step(graph, s).first().copied().flatten() {
                    let (a, b) = (find(&mut parent, src.index()), find(&mut parent, out.index()));
                    parent[b] = a;
                }
            }
        }
        // For each group: its allocation (size, start step) and its end step.
        // Steps are shifted by one so that graph inputs (uploaded before step 0) sit at 0.
        let end_of_run = steps + 1;
        let mut size = vec![0u64; nv];
        let mut start = vec![usize::MAX; nv];
        let mut end = vec![0usize; nv];
        for v in 0..nv {
            let g = find(&mut parent, v);
            if let Some(bytes) = trace.allocated[v] {
                size[g] += bytes;
                start[g] = start[g].min(self.producer_step[v].map_or(0, |s| s + 1));
            }
            let e = match self.guards[v] {
                Some(_) => end_of_run,
                None => self.last_use[v].or(self.producer_step[v]).map_or(0, |s| s + 1),
            };
            end[g] = end[g].max(e);
        }
        let mut live = vec![0u64; end_of_run + 1];
        let mut inner_peak = vec![0u64; end_of_run + 1];
        let mut no_release = trace.output_copies;
        for g in 0..nv {
            if size[g] == 0 || start[g] == usize::MAX {
                continue;
            }
            no_release += size[g];
            for t in live.iter_mut().take(end[g] + 1).skip(start[g]) {
                *t += size[g];
            }
        }
        for (s, inner) in trace.inner.iter().enumerate() {
            if let Some(f) = inner {
                // The subgraph's own peak includes the outputs it hands up; those are
                // counted from this step on in `live`, so take the larger of the two.
                let outs: u64 = self
                    .outputs_of_step(graph, s)
                    .iter()
                    .flatten()
                    .map(|v| trace.allocated[v.index()].unwrap_or(0))
                    .sum();
                inner_peak[s + 1] = f.live_set_bound.saturating_sub(outs);
                no_release += f.no_release_bytes.saturating_sub(outs);
            }
        }
        live[end_of_run] += trace.output_copies;
        let bound = live.iter().zip(&inner_peak).map(|(l, i)| l + i).max().unwrap_or(0);
        MemoryFigures { live_set_bound: bound, no_release_bytes: no_release }
    }

    fn outputs_of_step<'g>(&self, graph: &'g Graph, step: usize) -> &'g [Option<ValueId>] {
        &graph.nodes[self.order[step].index()].outputs
    }
}
