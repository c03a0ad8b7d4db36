//! Memory figures computed from the plan and the sizes a run produced,
//! independently of any provider's accounting. Tests compare the two.

use super::liveness::Plan;
use crate::graph::{Graph, ValueId};

/// What a run recorded, as the planner needs it to compute memory figures.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunTrace {
    /// For each value, the bytes of the buffer it allocated (`None`: it allocated
    /// nothing: a view, an in-place output, an initializer, a sequence).
    pub allocated: Vec<Option<u64>>,
    /// For each value allocated later than its producer ran (a host value
    /// uploaded at its first device use): the timeline point (step + 1) where.
    pub allocated_at: Vec<Option<usize>>,
    /// For each step, the value whose buffer output 0 took over (in place).
    pub in_place: Vec<Option<ValueId>>,
    /// For each step that ran a subgraph, that subgraph's figures.
    pub inner: Vec<Option<MemoryFigures>>,
    /// Bytes of the copies made at the end so outputs own their buffers, per provider.
    pub output_copies: Vec<u64>,
}

impl RunTrace {
    /// An empty trace for a graph and plan.
    pub fn new(graph: &Graph, plan: &Plan, providers: usize) -> Self {
        RunTrace {
            allocated: vec![None; graph.values.len()],
            allocated_at: vec![None; graph.values.len()],
            in_place: vec![None; plan.order.len()],
            inner: vec![None; plan.order.len()],
            output_copies: vec![0; providers],
        }
    }
}

/// The figures of one provider.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct ProviderFigures {
    /// Peak of the live set on this provider that release at last use allows:
    /// the provider's measured peak must equal it.
    pub live_set_bound: u64,
    /// Every byte allocated on this provider during the run.
    pub no_release_bytes: u64,
}

/// Live bytes at one point of a run, all providers together.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct TimelinePoint {
    /// Bytes live with release at last use (the bound's curve; a subgraph
    /// step counts its own peak).
    pub live_bytes: u64,
    /// Bytes allocated so far: what would be live if nothing were released.
    pub allocated_bytes: u64,
}

/// Memory figures of one run, in bytes. Initializers are not included: they
/// belong to the session and are resident before and after every run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryFigures {
    /// Peak of the live set over all providers together.
    pub live_set_bound: u64,
    /// Every byte allocated during the run, all providers together.
    pub no_release_bytes: u64,
    /// The same figures per provider, in provider order.
    pub per_provider: Vec<ProviderFigures>,
    /// Point 0 holds the graph inputs; point `s + 1` is step `s` (its inputs
    /// and outputs live together); the last point adds the output copies.
    pub timeline: Vec<TimelinePoint>,
}

impl Plan {
    /// Computes the figures for a run that allocated as `trace` says; `location`
    /// gives the provider of each value (where its buffer was allocated).
    pub fn memory_figures(
        &self,
        graph: &Graph,
        trace: &RunTrace,
        location: &[Option<usize>],
    ) -> MemoryFigures {
        let nv = graph.values.len();
        let np = trace.output_copies.len().max(1);
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
            if let (Some(src), Some(out)) =
                (taken, self.outputs_of_step(graph, s).first().copied().flatten())
            {
                let (a, b) = (find(&mut parent, src.index()), find(&mut parent, out.index()));
                parent[b] = a;
            }
        }
        // For each group: its allocation (size, provider, start step) and its end step.
        // Steps are shifted by one so that graph inputs (uploaded before step 0) sit at 0.
        let end_of_run = steps + 1;
        let mut size = vec![0u64; nv];
        let mut provider = vec![0usize; nv];
        let mut start = vec![usize::MAX; nv];
        let mut end = vec![0usize; nv];
        for v in 0..nv {
            let g = find(&mut parent, v);
            if let Some(bytes) = trace.allocated[v] {
                size[g] += bytes;
                provider[g] = location.get(v).copied().flatten().unwrap_or(0).min(np - 1);
                let at = trace.allocated_at[v].or(self.producer_step[v].map(|s| s + 1));
                start[g] = start[g].min(at.unwrap_or(0));
            }
            let e = match self.guards[v] {
                Some(_) => end_of_run,
                None => self.last_use[v].or(self.producer_step[v]).map_or(0, |s| s + 1),
            };
            end[g] = end[g].max(e);
        }
        let mut live = vec![vec![0u64; end_of_run + 1]; np];
        let mut extra = vec![vec![0u64; end_of_run + 1]; np];
        let mut allocated = vec![0u64; end_of_run + 1];
        let mut per = vec![ProviderFigures::default(); np];
        for g in 0..nv {
            if size[g] == 0 || start[g] == usize::MAX {
                continue;
            }
            allocated[start[g]] += size[g];
            per[provider[g]].no_release_bytes += size[g];
            for t in live[provider[g]].iter_mut().take(end[g] + 1).skip(start[g]) {
                *t += size[g];
            }
        }
        for (s, inner) in trace.inner.iter().enumerate() {
            let Some(f) = inner else { continue };
            // The subgraph's own peak includes the outputs it hands up; those are
            // counted from this step on in `live`, so they are subtracted once.
            let mut outs = vec![0u64; np];
            for v in self.outputs_of_step(graph, s).iter().flatten() {
                let p = location.get(v.index()).copied().flatten().unwrap_or(0).min(np - 1);
                outs[p] += trace.allocated[v.index()].unwrap_or(0);
            }
            for (p, pf) in f.per_provider.iter().enumerate().take(np) {
                extra[p][s + 1] = pf.live_set_bound.saturating_sub(outs[p]);
                let inner = pf.no_release_bytes.saturating_sub(outs[p]);
                per[p].no_release_bytes += inner;
                allocated[s + 1] += inner;
            }
        }
        for p in 0..np {
            live[p][end_of_run] += trace.output_copies[p];
            per[p].no_release_bytes += trace.output_copies[p];
            per[p].live_set_bound =
                (0..=end_of_run).map(|t| live[p][t] + extra[p][t]).max().unwrap_or(0);
        }
        allocated[end_of_run] += trace.output_copies.iter().sum::<u64>();
        let mut so_far = 0;
        let timeline: Vec<TimelinePoint> = (0..=end_of_run)
            .map(|t| {
                so_far += allocated[t];
                TimelinePoint {
                    live_bytes: (0..np).map(|p| live[p][t] + extra[p][t]).sum(),
                    allocated_bytes: so_far,
                }
            })
            .collect();
        MemoryFigures {
            live_set_bound: timeline.iter().map(|p| p.live_bytes).max().unwrap_or(0),
            no_release_bytes: per.iter().map(|p| p.no_release_bytes).sum(),
            per_provider: per,
            timeline,
        }
    }

    fn outputs_of_step<'g>(&self, graph: &'g Graph, step: usize) -> &'g [Option<ValueId>] {
        &graph.nodes[self.order[step].index()].outputs
    }
}
