//! Fusion before placement: op chains exporters write out by hand that one
//! standard op computes. Each fused chain is one kernel launch instead of
//! several and one pass over its tensor instead of several.
//!
//! Gelu: PyTorch's exporter (opsets below 20) writes `F.gelu(x)` as
//! `Mul(Mul(x, Add(Erf(Div(x, √2)), 1)), 0.5)`, five elementwise passes over
//! the widest activation of a transformer. It becomes one `Gelu` (opset 20).
//! The fused op computes in f32 internally and rounds once, where the chain
//! rounds after every step in half precision: it is at least as accurate.
//! ONNX Runtime fuses the same chain.

use std::collections::HashMap;

use crate::dtype::DType;
use crate::graph::{Attributes, DEFAULT_DOMAIN, Graph, Node, ValueId};

/// The graph with every Gelu chain fused, or `None` when it has none.
pub fn gelu(graph: &Graph) -> Option<Graph> {
    let mut consumers: HashMap<ValueId, usize> = HashMap::new();
    for n in &graph.nodes {
        for v in n.all_inputs() {
            *consumers.entry(v).or_default() += 1;
        }
    }
    for &o in &graph.outputs {
        *consumers.entry(o).or_default() += 1;
    }
    // Constants share x's dtype (the chain's ops require it): only the dtypes
    // every provider's Gelu computes are fused.
    let scalar = |v: ValueId, want: f64| {
        graph.initializers.get(&v).is_some_and(|t| {
            t.numel() == 1
                && matches!(t.dtype(), DType::F32 | DType::F16 | DType::BF16)
                && t.to_f64_vec().is_ok_and(|x| (x[0] - want).abs() <= want * 2e-3)
        })
    };
    // The other input of a binary node whose input `v` is known, if it is the constant `c`.
    let with_const = |n: &Node, v: ValueId, c: f64| {
        n.inputs.len() == 2
            && match (n.input(0), n.input(1)) {
                (Some(a), Some(b)) if a == v => scalar(b, c),
                (Some(a), Some(b)) if b == v => scalar(a, c),
                _ => false,
            }
    };
    let single = |v: ValueId| consumers.get(&v) == Some(&1);
    // The one node reading `v` (an intermediate of the chain).
    let next = |v: ValueId, op: &str| -> Option<usize> {
        if !single(v) {
            return None;
        }
        let i = graph.nodes.iter().position(|n| n.all_inputs().any(|u| u == v))?;
        let n = &graph.nodes[i];
        (n.op_type == op && n.domain == DEFAULT_DOMAIN).then_some(i)
    };
    let out0 = |i: usize| graph.nodes[i].outputs.first().copied().flatten();

    let mut fused: Vec<(Vec<usize>, Node)> = Vec::new();
    for (i, n) in graph.nodes.iter().enumerate() {
        let Some(x) = n.input(0) else { continue };
        let scaled = n.domain == DEFAULT_DOMAIN
            && match n.op_type.as_str() {
                "Div" => n.inputs.len() == 2 && n.input(1).is_some_and(|c| scalar(c, 2f64.sqrt())),
                "Mul" => with_const(n, x, std::f64::consts::FRAC_1_SQRT_2),
                _ => false,
            };
        if !scaled {
            continue;
        }
        let chain = (|| {
            let erf = next(out0(i)?, "Erf")?;
            let add = next(out0(erf)?, "Add")?;
            if !with_const(&graph.nodes[add], out0(erf)?, 1.0) {
                return None;
            }
            let mul = next(out0(add)?, "Mul")?;
            let m = &graph.nodes[mul];
            let other = if m.input(0) == out0(add) { m.input(1) } else { m.input(0) };
            if other != Some(x) {
                return None;
            }
            let half = next(out0(mul)?, "Mul")?;
            if !with_const(&graph.nodes[half], out0(mul)?, 0.5) {
                return None;
            }
            Some([i, erf, add, mul, half])
        })();
        let Some(chain) = chain else { continue };
        let last = &graph.nodes[chain[4]];
        let node = Node {
            name: format!("{}/Gelu", last.name),
            op_type: "Gelu".into(),
            domain: DEFAULT_DOMAIN.into(),
            opset: 20,
            inputs: vec![Some(x)],
            outputs: last.outputs.clone(),
            implicit_inputs: vec![],
            attrs: Attributes::default(),
        };
        fused.push((chain.to_vec(), node));
    }
    if fused.is_empty() {
        return None;
    }
    let mut replace: HashMap<usize, Node> = HashMap::new();
    let mut drop = vec![false; graph.nodes.len()];
    for (chain, node) in fused {
        for &c in &chain {
            drop[c] = true;
        }
        replace.insert(chain[4], node);
    }
    let nodes = graph
        .nodes
        .iter()
        .enumerate()
        .filter_map(|(i, n)| match replace.remove(&i) {
            Some(f) => Some(f),
            None => (!drop[i]).then(|| n.clone()),
        })
        .collect();
    Some(Graph { nodes, ..graph.clone() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::ValueInfo;
    use crate::tensor::Tensor;

    fn node(op: &str, ins: &[u32], out: u32) -> Node {
        Node {
            name: format!("{op}{out}"),
            op_type: op.into(),
            domain: DEFAULT_DOMAIN.into(),
            opset: 17,
            inputs: ins.iter().map(|&i| Some(ValueId(i))).collect(),
            outputs: vec![Some(ValueId(out))],
            implicit_inputs: vec![],
            attrs: Attributes::default(),
        }
    }

    /// x=0, constants √2=1, one=2, half=3; chain values 4..8; y = 8.
    fn chain(extra_reader: bool) -> Graph {
        chain_of(extra_reader, Tensor::scalar::<f32>)
    }

    fn chain_of(extra_reader: bool, c: impl Fn(f32) -> Tensor) -> Graph {
        let mut nodes = vec![
            node("Div", &[0, 1], 4),
            node("Erf", &[4], 5),
            node("Add", &[2, 5], 6),
            node("Mul", &[0, 6], 7),
            node("Mul", &[7, 3], 8),
        ];
        if extra_reader {
            nodes.push(node("Neg", &[6], 9));
        }
        Graph {
            name: "g".into(),
            values: (0..10).map(|i| ValueInfo { name: format!("v{i}"), declared: None }).collect(),
            nodes,
            inputs: vec![ValueId(0)],
            outputs: vec![ValueId(8)],
            initializers: [(1, c(std::f32::consts::SQRT_2)), (2, c(1.0)), (3, c(0.5))]
                .into_iter()
                .map(|(i, t)| (ValueId(i), t))
                .collect(),
            captures: vec![],
            folded_constants: 0,
        }
    }

    #[test]
    fn the_exported_erf_chain_becomes_one_gelu() {
        let g = gelu(&chain(false)).expect("fused");
        assert_eq!(g.nodes.len(), 1);
        let n = &g.nodes[0];
        assert_eq!((n.op_type.as_str(), n.opset), ("Gelu", 20));
        assert_eq!(n.inputs, vec![Some(ValueId(0))]);
        assert_eq!(n.outputs, vec![Some(ValueId(8))]);
    }

    #[test]
    fn a_chain_whose_intermediate_is_read_elsewhere_is_left_alone() {
        assert!(gelu(&chain(true)).is_none());
    }

    #[test]
    fn a_double_precision_chain_is_left_to_its_ops() {
        assert!(gelu(&chain_of(false, |v| Tensor::scalar(v as f64))).is_none());
    }
}
