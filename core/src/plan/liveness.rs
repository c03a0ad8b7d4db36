//! Liveness: the static plan of one graph, its order, last uses, release
//! lists, guards, views and in-place candidates.

use crate::graph::{Graph, NodeId, ValueId};

/// Why a value must survive the whole run.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Guard {
    /// A weight: the session owns it across runs.
    Initializer,
    /// Fed by the caller (uploaded or lent); the caller owns it.
    GraphInput,
    /// Handed to the caller at the end of the run.
    GraphOutput,
    /// A subgraph reads it from the enclosing scope; the enclosing graph owns it.
    Captured,
    /// An element of a sequence; the sequence still refers to the buffer.
    SequenceElement,
}

/// What the planner needs to know about one node, beyond the graph.
#[derive(Clone, Debug, Default)]
pub struct NodeTraits {
    /// Output 0 is a view of this input slot.
    pub view_of: Option<usize>,
    /// Input slots output 0 may overwrite.
    pub in_place: Vec<usize>,
    /// The node's inputs become elements of its output sequence.
    pub makes_sequence: bool,
}

/// The static plan of one graph.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Nodes in execution order; step `s` runs `order[s]`.
    pub order: Vec<NodeId>,
    /// For each value, the step of its last read (`None`: never read).
    pub last_use: Vec<Option<usize>>,
    /// For each value, the step that produces it (`None`: input, initializer, capture).
    pub producer_step: Vec<Option<usize>>,
    /// For each step, the values released after it runs.
    pub releases: Vec<Vec<ValueId>>,
    /// For each value, why it must never be released during a run.
    pub guards: Vec<Option<Guard>>,
    /// For each step, the input slot output 0 views.
    pub views: Vec<Option<usize>>,
    /// For each step, `(slot, value)` pairs whose buffer output 0 may take over.
    pub in_place: Vec<Vec<(usize, ValueId)>>,
    /// For each value, a representative of its static view group.
    pub view_group: Vec<ValueId>,
    /// For each view group (indexed by its representative), the last step
    /// that reads or produces any of its values.
    pub group_end: Vec<usize>,
}

impl Plan {
    /// Plans a graph. `traits[n]` describes node `n`; `dtypes_match(step, slot)` says
    /// whether that input has output 0's dtype (in-place needs it).
    pub fn new(
        graph: &Graph,
        order: Vec<NodeId>,
        traits: &[NodeTraits],
        dtypes_match: impl Fn(NodeId, usize) -> bool,
    ) -> Plan {
        let nv = graph.values.len();
        let steps = order.len();
        let mut last_use = vec![None; nv];
        let mut producer_step = vec![None; nv];
        for (s, &n) in order.iter().enumerate() {
            let node = &graph.nodes[n.index()];
            for v in node.all_inputs() {
                last_use[v.index()] = Some(s);
            }
            for v in node.outputs.iter().flatten() {
                producer_step[v.index()] = Some(s);
            }
        }

        let guards = guards(graph, &order, traits);

        // Static view groups (union-find over view edges).
        let mut parent: Vec<usize> = (0..nv).collect();
        let mut views = vec![None; steps];
        for (s, &n) in order.iter().enumerate() {
            let node = &graph.nodes[n.index()];
            if let Some(slot) = traits[n.index()].view_of {
                if let (Some(src), Some(Some(out))) = (node.input(slot), node.outputs.first()) {
                    union(&mut parent, src.index(), out.index());
                    views[s] = Some(slot);
                }
            }
        }
        let view_group: Vec<ValueId> =
            (0..nv).map(|v| ValueId(find(&mut parent, v) as u32)).collect();
        let mut group_end = vec![0usize; nv];
        let mut group_guarded = vec![false; nv];
        for v in 0..nv {
            let g = view_group[v].index();
            let end = last_use[v].or(producer_step[v]).unwrap_or(0);
            group_end[g] = group_end[g].max(end);
            group_guarded[g] |= guards[v].is_some();
        }

        let mut releases = vec![Vec::new(); steps];
        for v in 0..nv {
            if guards[v].is_some() {
                continue;
            }
            if let Some(s) = last_use[v].or(producer_step[v]) {
                releases[s].push(ValueId(v as u32));
            }
        }

        let mut in_place = vec![Vec::new(); steps];
        for (s, &n) in order.iter().enumerate() {
            let node = &graph.nodes[n.index()];
            let t = &traits[n.index()];
            if t.view_of.is_some() || node.outputs.first().copied().flatten().is_none() {
                continue;
            }
            for &slot in &t.in_place {
                let Some(v) = node.input(slot) else { continue };
                let g = view_group[v.index()].index();
                let shared_with_other_slot = node
                    .inputs
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i != slot)
                    .filter_map(|(_, x)| *x)
                    .chain(node.implicit_inputs.iter().copied())
                    .any(|x| view_group[x.index()].index() == g);
                if !group_guarded[g]
                    && group_end[g] == s
                    && producer_step[v.index()].is_some()
                    && !shared_with_other_slot
                    && dtypes_match(n, slot)
                {
                    in_place[s].push((slot, v));
                }
            }
        }

        Plan {
            order,
            last_use,
            producer_step,
            releases,
            guards,
            views,
            in_place,
            view_group,
            group_end,
        }
    }

    /// The guard of a value, if any.
    pub fn guard(&self, v: ValueId) -> Option<Guard> {
        self.guards[v.index()]
    }
}

/// The one definition of what may never be released (or overwritten) during a run.
fn guards(graph: &Graph, order: &[NodeId], traits: &[NodeTraits]) -> Vec<Option<Guard>> {
    let mut g = vec![None; graph.values.len()];
    for &v in graph.initializers.keys() {
        g[v.index()] = Some(Guard::Initializer);
    }
    for &v in &graph.inputs {
        g[v.index()] = Some(Guard::GraphInput);
    }
    for (v, _) in &graph.captures {
        g[v.index()] = Some(Guard::Captured);
    }
    for &n in order {
        if traits[n.index()].makes_sequence {
            for v in graph.nodes[n.index()].inputs.iter().flatten() {
                g[v.index()].get_or_insert(Guard::SequenceElement);
            }
        }
    }
    for &v in &graph.outputs {
        g[v.index()].get_or_insert(Guard::GraphOutput);
    }
    g
}

fn find(parent: &mut [usize], mut x: usize) -> usize {
    while parent[x] != x {
        parent[x] = parent[parent[x]];
        x = parent[x];
    }
    x
}

fn union(parent: &mut [usize], a: usize, b: usize) {
    let (ra, rb) = (find(parent, a), find(parent, b));
    if ra != rb {
        parent[rb] = ra;
    }
}
