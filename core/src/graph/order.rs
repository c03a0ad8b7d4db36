//! Topological execution order.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::ir::Graph;
use super::types::NodeId;
use crate::error::LoadError;

/// Orders the nodes so every value is produced before it is read.
///
/// Among ready nodes the earliest in file order goes first, so a model that
/// is already sorted keeps its order (and its authors' memory intuition).
///
/// # Errors
/// [`LoadError::Cycle`] when the nodes form a cycle.
pub fn topological_order(graph: &Graph) -> Result<Vec<NodeId>, LoadError> {
    let producers = graph.producers();
    let n = graph.nodes.len();
    let mut waiting = vec![0usize; n];
    let mut consumers: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, node) in graph.nodes.iter().enumerate() {
        let mut deps: Vec<usize> =
            node.all_inputs().filter_map(|v| producers[v.index()]).map(NodeId::index).collect();
        deps.sort_unstable();
        deps.dedup();
        waiting[i] = deps.len();
        for d in deps {
            consumers[d].push(i);
        }
    }
    let mut ready: BinaryHeap<Reverse<usize>> =
        (0..n).filter(|&i| waiting[i] == 0).map(Reverse).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(Reverse(i)) = ready.pop() {
        order.push(NodeId(i as u32));
        for &c in &consumers[i] {
            waiting[c] -= 1;
            if waiting[c] == 0 {
                ready.push(Reverse(c));
            }
        }
    }
    if order.len() < n {
        let stuck = (0..n).find(|&i| waiting[i] > 0).expect("some node is still waiting");
        return Err(LoadError::Cycle(graph.nodes[stuck].desc()));
    }
    Ok(order)
}
