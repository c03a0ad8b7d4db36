//! Replacements a fusion pass proposes, and applying those that check out.
//!
//! A pass proposes, chain by chain, the nodes that replace it (placed where
//! the chain's last node was), plus new values and constants. Applying
//! infers each replacement's nodes on the facts of their inputs, in order,
//! and keeps a replacement only if all of its nodes infer and every value of
//! the chain that the rest of the graph reads keeps a compatible fact (same
//! dtype, and the same rank and dims wherever both are known). A replacement
//! that reads a value only a rejected one would have made fails too. Nodes
//! a pass marked as dropped once only fused chains read them go only if
//! nothing left reads them.

use std::collections::{HashMap, HashSet};

use crate::graph::{Graph, Node, ValueId, ValueInfo};
use crate::ops::{Fact, OpRegistry};
use crate::passes::infer::{Inferred, build, outputs};
use crate::tensor::Tensor;

/// One chain and the nodes that replace it.
struct Replacement {
    chain: Vec<usize>,
    nodes: Vec<Node>,
}

/// The replacements one pass proposes.
#[derive(Default)]
pub(super) struct Rewrite {
    replacements: Vec<Replacement>,
    taken: HashSet<usize>,
    /// Nodes to drop once no node left reads their outputs.
    pub(super) unread: Vec<usize>,
    values: Vec<ValueInfo>,
    constants: Vec<(ValueId, Tensor)>,
}

impl Rewrite {
    /// Proposes `nodes` in place of the nodes `chain` (put where its last one was).
    pub(super) fn replace(&mut self, chain: &[usize], nodes: Vec<Node>) {
        self.taken.extend(chain.iter().copied());
        self.replacements.push(Replacement { chain: chain.to_vec(), nodes });
    }

    /// Whether node `i` is already part of a proposed replacement.
    pub(super) fn taken(&self, i: usize) -> bool {
        self.taken.contains(&i)
    }

    /// A new value named `name`, numbered after the graph's and earlier new ones.
    pub(super) fn value(&mut self, graph: &Graph, name: String) -> ValueId {
        let id = ValueId((graph.values.len() + self.values.len()) as u32);
        self.values.push(ValueInfo { name, declared: None });
        id
    }

    /// A new constant value holding `t`.
    pub(super) fn constant(&mut self, graph: &Graph, name: String, t: Tensor) -> ValueId {
        let id = self.value(graph, name);
        self.constants.push((id, t));
        id
    }

    /// The graph with every replacement that checks out against `inferred`
    /// (updated to match it), or `None` when none does.
    pub(super) fn apply(
        self,
        graph: &Graph,
        inferred: &mut Inferred,
        registry: &OpRegistry,
    ) -> Option<Graph> {
        if self.replacements.is_empty() {
            return None;
        }
        let mut values = graph.values.clone();
        values.extend(self.values);
        let mut facts = inferred.facts.clone();
        facts.resize(values.len(), None);
        let constants: HashMap<ValueId, Tensor> = self.constants.into_iter().collect();
        for (v, t) in &constants {
            facts[v.index()] = Some(Fact::from_tensor(t));
        }
        // Readers of every value, outside any one chain: nodes and graph outputs.
        let mut readers: HashMap<ValueId, Vec<usize>> = HashMap::new();
        for (i, n) in graph.nodes.iter().enumerate() {
            for v in n.all_inputs() {
                readers.entry(v).or_default().push(i);
            }
        }
        let outputs_set: HashSet<ValueId> = graph.outputs.iter().copied().collect();
        let mut accepted: HashMap<usize, (Vec<Node>, Vec<Built>)> = HashMap::new();
        let mut dropped: HashSet<usize> = HashSet::new();
        for r in self.replacements {
            let in_chain: HashSet<usize> = r.chain.iter().copied().collect();
            let seen: Vec<ValueId> = r
                .chain
                .iter()
                .flat_map(|&i| graph.nodes[i].outputs.iter().flatten().copied())
                .filter(|v| {
                    outputs_set.contains(v)
                        || readers.get(v).is_some_and(|rs| rs.iter().any(|i| !in_chain.contains(i)))
                })
                .collect();
            let Some(built) = check(&r.nodes, &seen, &values, &facts, registry) else {
                log::debug!("a fusion of {} in {:?} does not check out", r.chain.len(), graph.name);
                continue;
            };
            for b in &built {
                for (v, f) in &b.facts {
                    facts[v.index()] = Some(f.clone());
                }
            }
            dropped.extend(r.chain.iter().copied());
            if let Some(&last) = r.chain.last() {
                accepted.insert(last, (r.nodes, built));
            }
        }
        if accepted.is_empty() {
            return None;
        }
        // Marked nodes go when nothing kept reads their outputs.
        let kept_reads = |dropped: &HashSet<usize>| -> HashSet<ValueId> {
            let mut read: HashSet<ValueId> = graph.outputs.iter().copied().collect();
            for (i, n) in graph.nodes.iter().enumerate() {
                if !dropped.contains(&i) {
                    read.extend(n.all_inputs());
                }
            }
            for (nodes, _) in accepted.values() {
                read.extend(nodes.iter().flat_map(Node::all_inputs));
            }
            read
        };
        // Until nothing more goes: dropping a node (the expanded mask's
        // `Where`) leaves the nodes only it read (its `Expand`, then `And`) unread.
        let mut unread = self.unread;
        loop {
            let read = kept_reads(&dropped);
            let before = unread.len();
            unread.retain(|&i| {
                let gone = graph.nodes[i].outputs.iter().flatten().all(|v| !read.contains(v));
                if gone {
                    dropped.insert(i);
                }
                !gone
            });
            if unread.len() == before {
                break;
            }
        }
        let mut nodes = Vec::with_capacity(graph.nodes.len());
        let mut ops = Vec::with_capacity(graph.nodes.len());
        let mut outs = Vec::with_capacity(graph.nodes.len());
        let mut folded = Vec::with_capacity(graph.nodes.len());
        for (i, n) in graph.nodes.iter().enumerate() {
            if let Some((fused, built)) = accepted.remove(&i) {
                for (node, b) in fused.into_iter().zip(built) {
                    nodes.push(node);
                    ops.push(Some(b.op));
                    outs.push(Some(b.outputs));
                    folded.push(b.folded);
                }
            } else if !dropped.contains(&i) {
                nodes.push(n.clone());
                ops.push(inferred.ops[i].take());
                outs.push(inferred.outputs[i].take());
                folded.push(inferred.folded[i]);
            }
        }
        // Constants only rejected replacements read stay out of the graph.
        let read: HashSet<ValueId> = nodes.iter().flat_map(Node::all_inputs).collect();
        let mut initializers = graph.initializers.clone();
        initializers.extend(constants.into_iter().filter(|(v, _)| read.contains(v)));
        *inferred = Inferred { ops, facts, outputs: outs, folded };
        Some(Graph { nodes, values, initializers, ..graph.clone() })
    }
}

#[cfg(test)]
impl Rewrite {
    /// Applies every replacement as proposed, checking nothing: what the
    /// passes' own tests look at.
    pub(super) fn unchecked(self, graph: &Graph) -> Option<Graph> {
        if self.replacements.is_empty() {
            return None;
        }
        let mut put: HashMap<usize, Vec<Node>> = HashMap::new();
        let mut dropped: HashSet<usize> = self.unread.into_iter().collect();
        for r in self.replacements {
            dropped.extend(r.chain.iter().copied());
            if let Some(&last) = r.chain.last() {
                put.insert(last, r.nodes);
            }
        }
        let mut nodes = Vec::with_capacity(graph.nodes.len());
        for (i, n) in graph.nodes.iter().enumerate() {
            match put.remove(&i) {
                Some(fused) => nodes.extend(fused),
                None if dropped.contains(&i) => {}
                None => nodes.push(n.clone()),
            }
        }
        let mut values = graph.values.clone();
        values.extend(self.values);
        let mut initializers = graph.initializers.clone();
        initializers.extend(self.constants);
        Some(Graph { nodes, values, initializers, ..graph.clone() })
    }
}

/// A replacement node as checked: its op, and its outputs' facts.
struct Built {
    op: Box<dyn crate::ops::Op>,
    /// Facts by output slot, and those of the values it writes.
    outputs: Vec<Fact>,
    facts: Vec<(ValueId, Fact)>,
    folded: bool,
}

/// Infers `nodes` in order on `facts`; `None` when one fails to infer, or a
/// value in `seen` ends with a fact incompatible with the one it had.
fn check(
    nodes: &[Node],
    seen: &[ValueId],
    values: &[ValueInfo],
    facts: &[Option<Fact>],
    registry: &OpRegistry,
) -> Option<Vec<Built>> {
    let mut local: HashMap<ValueId, Fact> = HashMap::new();
    let mut built = Vec::with_capacity(nodes.len());
    for node in nodes {
        let op = build(registry, values, node).ok()?;
        let in_facts: Vec<Option<Fact>> = node
            .inputs
            .iter()
            .map(|i| i.and_then(|v| local.get(&v).or(facts[v.index()].as_ref()).cloned()))
            .collect();
        let (out, folded_values) = outputs(&*op, node, &in_facts).ok()?;
        let out: Vec<Fact> = match &folded_values {
            Some(vals) => vals.iter().map(Fact::from_tensor).collect(),
            None => out,
        };
        let mut mine = Vec::new();
        for (o, f) in node.outputs.iter().zip(&out) {
            if let Some(v) = *o {
                local.insert(v, f.clone());
                mine.push((v, f.clone()));
            }
        }
        built.push(Built { op, outputs: out, facts: mine, folded: folded_values.is_some() });
    }
    seen.iter()
        .all(|v| match (facts[v.index()].as_ref(), local.get(v)) {
            (Some(old), Some(new)) => compatible(old, new),
            _ => false,
        })
        .then_some(built)
}

/// Whether `new` can stand for `old`: the same dtype and kind, and the same
/// rank and dims wherever both know them.
fn compatible(old: &Fact, new: &Fact) -> bool {
    if old.dtype != new.dtype || old.sequence != new.sequence {
        return false;
    }
    match (&old.shape, &new.shape) {
        (Some(a), Some(b)) => {
            a.rank() == b.rank()
                && a.0.iter().zip(&b.0).all(|(x, y)| match (x.known(), y.known()) {
                    (Some(x), Some(y)) => x == y,
                    _ => true,
                })
        }
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::graph::{Attribute, Attributes, DEFAULT_DOMAIN, TypeInfo};
    use crate::passes::infer::infer;
    use crate::shape::Shape;

    fn node(op: &str, ins: &[u32], out: u32, attrs: Vec<(&str, Attribute)>) -> Node {
        Node {
            name: format!("{op}{out}"),
            op_type: op.into(),
            domain: DEFAULT_DOMAIN.into(),
            opset: 17,
            inputs: ins.iter().map(|&i| Some(ValueId(i))).collect(),
            outputs: vec![Some(ValueId(out))],
            implicit_inputs: vec![],
            attrs: Attributes(attrs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()),
        }
    }

    /// x (f32 [4]) → Relu → a → Neg → y; x → Abs → b → Exp → z.
    fn graph() -> Graph {
        let mut values: Vec<ValueInfo> =
            (0..6).map(|i| ValueInfo { name: format!("v{i}"), declared: None }).collect();
        values[0].declared =
            Some(TypeInfo::Tensor { dtype: DType::F32, shape: Some(Shape::known(&[4])) });
        Graph {
            name: "g".into(),
            values,
            nodes: vec![
                node("Relu", &[0], 1, vec![]),
                node("Neg", &[1], 2, vec![]),
                node("Abs", &[0], 3, vec![]),
                node("Exp", &[3], 4, vec![]),
            ],
            inputs: vec![ValueId(0)],
            outputs: vec![ValueId(2), ValueId(4)],
            ..Graph::default()
        }
    }

    #[test]
    fn a_replacement_that_changes_a_read_value_is_skipped_and_the_others_apply() {
        let g = graph();
        let registry = OpRegistry::standard();
        let mut inferred = infer(&g, &registry, &Default::default(), &[]).unwrap();
        let mut rw = Rewrite::default();
        // Neg(Relu(x)) as one Neg of x: the same dtype and shape, accepted.
        rw.replace(&[0, 1], vec![node("Neg", &[0], 2, vec![])]);
        // Exp(Abs(x)) as a Cast to int64: z would change dtype, rejected.
        let to_i64 = Attribute::Int(i64::from(DType::I64.to_onnx()));
        rw.replace(&[2, 3], vec![node("Cast", &[0], 4, vec![("to", to_i64)])]);
        let fused = rw.apply(&g, &mut inferred, &registry).expect("one replacement applies");
        let ops: Vec<&str> = fused.nodes.iter().map(|n| n.op_type.as_str()).collect();
        assert_eq!(ops, ["Neg", "Abs", "Exp"]);
        assert_eq!(fused.nodes[0].inputs, vec![Some(ValueId(0))]);
        // The facts follow the fused graph, node by node.
        assert_eq!(inferred.ops.len(), 3);
        assert_eq!(inferred.facts[4].as_ref().map(|f| f.dtype), Some(DType::F32));
    }

    #[test]
    fn unread_nodes_go_in_chains_once_their_last_reader_has_gone() {
        let g = graph();
        let registry = OpRegistry::standard();
        let mut inferred = infer(&g, &registry, &Default::default(), &[]).unwrap();
        let mut rw = Rewrite::default();
        // Exp(Abs(x)) replaced by Exp(x): Abs is left to `unread`, as is Relu,
        // whose reader Neg goes only once Neg itself is found unread.
        rw.replace(&[3], vec![node("Exp", &[0], 4, vec![])]);
        rw.unread.extend([0, 1, 2]);
        let mut g = g;
        g.outputs = vec![ValueId(4)];
        let fused = rw.apply(&g, &mut inferred, &registry).expect("applies");
        let ops: Vec<&str> = fused.nodes.iter().map(|n| n.op_type.as_str()).collect();
        assert_eq!(ops, ["Exp"]);
        assert_eq!(inferred.ops.len(), 1);
    }

    #[test]
    fn a_replacement_reading_what_a_rejected_one_made_is_skipped_too() {
        let g = graph();
        let registry = OpRegistry::standard();
        let mut inferred = infer(&g, &registry, &Default::default(), &[]).unwrap();
        let mut rw = Rewrite::default();
        let fresh = rw.value(&g, "fresh".into());
        // Writes `fresh` but changes y's dtype: rejected, so `fresh` never exists.
        let to_i64 = Attribute::Int(i64::from(DType::I64.to_onnx()));
        rw.replace(
            &[0, 1],
            vec![node("Relu", &[0], fresh.0, vec![]), node("Cast", &[0], 2, vec![("to", to_i64)])],
        );
        rw.replace(&[2, 3], vec![node("Exp", &[fresh.0], 4, vec![])]);
        assert!(rw.apply(&g, &mut inferred, &registry).is_none());
    }
}
