//! Attention: transformers' eager attention, as `torch.onnx.export` writes it,
//!
//! ```text
//! Q = Transpose(…)                      [batch, heads, seq, size]
//! Kᵀ = Transpose(K', perm 0,2,3,1)      K' is [batch, seq, heads, size]
//! s = MatMul(Q, Kᵀ) / c   (or · c)
//! p = Softmax(s + mask, axis -1)
//! y = MatMul(p, V)                      V = Transpose(…), 4-D
//! ```
//!
//! becomes one ai.onnx `Attention` (opset 23) over 4-D heads, with `scale`
//! set from the constant (1 when there is none) and the mask as `attn_mask`.
//! K' reaches it through one `Transpose(perm 0,2,1,3)` (or directly, when
//! Kᵀ was `Transpose(K, perm 0,1,3,2)`). Each tensor is proven 4-D by the
//! 4-long permutation that writes it; the fused op checks the rest of its
//! geometry (heads, sizes, the mask's broadcast) when the graph is inferred.
//!
//! The score matrix (`batch × heads × seq²`, the largest activation of an
//! encoder) and the three elementwise passes over it are gone: a provider's
//! `Attention` kernel keeps the scores on chip.

use super::{Links, Rewrite};
use crate::graph::{Attribute, Attributes, DEFAULT_DOMAIN, Graph, Node, ValueId};

/// Where the fused op's K (`[batch, heads, keys, size]`) comes from.
enum Keys {
    /// Already in head order: the input of `Transpose(perm 0,1,3,2)`.
    Heads(ValueId),
    /// In row order (`[batch, keys, heads, size]`): needs `Transpose(perm 0,2,1,3)`.
    Rows(ValueId),
}

/// A matched chain.
struct Found {
    /// Nodes replaced, the second MatMul last.
    chain: Vec<usize>,
    q: ValueId,
    k: Keys,
    v: ValueId,
    mask: Option<ValueId>,
    scale: f64,
}

/// The permutation of the Transpose node writing `v`.
fn perm_of(l: &Links<'_>, v: ValueId) -> Option<(usize, Vec<i64>)> {
    let t = l.writer(v, "Transpose")?;
    let perm = l.node(t).attrs.ints("perm").ok()??;
    Some((t, perm))
}

/// Whether `v` is written by a Transpose with a 4-long permutation (so it is 4-D).
fn four_d(l: &Links<'_>, v: ValueId) -> bool {
    perm_of(l, v).is_some_and(|(_, p)| p.len() == 4)
}

/// `MatMul(Q, Kᵀ)`, scaled by a constant or not, written to `x`: the nodes,
/// Q, K and the scale.
fn scores(l: &Links<'_>, x: ValueId) -> Option<(Vec<usize>, ValueId, Keys, f64)> {
    if !l.single(x) {
        return None;
    }
    let mut nodes = Vec::new();
    let (s, scale) = if let Some(d) = l.writer(x, "Div") {
        nodes.push(d);
        let n = l.node(d);
        let c = l.scalar(n.input(1)?)?;
        (n.input(0)?, 1.0 / c)
    } else if let Some(m) = l.writer(x, "Mul") {
        nodes.push(m);
        let n = l.node(m);
        match (n.input(0)?, n.input(1)?) {
            (a, b) if l.scalar(b).is_some() => (a, l.scalar(b)?),
            (a, b) => (b, l.scalar(a)?),
        }
    } else {
        (x, 1.0)
    };
    if !scale.is_finite() || (s != x && !l.single(s)) {
        return None;
    }
    let mm = l.writer(s, "MatMul")?;
    nodes.insert(0, mm);
    let (q, kt) = (l.node(mm).input(0)?, l.node(mm).input(1)?);
    if !four_d(l, q) {
        return None;
    }
    let (t, perm) = perm_of(l, kt)?;
    let source = l.node(t).input(0)?;
    let k = match perm.as_slice() {
        [0, 2, 3, 1] => Keys::Rows(source),
        [0, 1, 3, 2] => Keys::Heads(source),
        _ => return None,
    };
    if l.single(kt) {
        nodes.insert(0, t);
    }
    Some((nodes, q, k, scale))
}

/// The chain ending in the Softmax node `i`, if it is one.
fn find(l: &Links<'_>, i: usize) -> Option<Found> {
    let sm = l.node(i);
    let last_axis = match sm.attrs.int("axis") {
        Ok(Some(-1)) => true,
        Ok(None) => sm.opset >= 13,
        _ => false,
    };
    if !last_axis {
        return None;
    }
    let x = sm.input(0)?;
    let p = l.out0(i)?;
    let mm2 = l.next(p, "MatMul")?;
    let v = l.node(mm2).input(1)?;
    if l.node(mm2).input(0) != Some(p) || !four_d(l, v) {
        return None;
    }
    // `s + mask` in either order, or the scores alone.
    let masked = l.writer(x, "Add").filter(|_| l.single(x)).and_then(|a| {
        let (u, w) = (l.node(a).input(0)?, l.node(a).input(1)?);
        if let Some(found) = scores(l, u) {
            Some((a, found, w))
        } else {
            scores(l, w).map(|found| (a, found, u))
        }
    });
    let (mut chain, q, k, scale, mask) = match masked {
        Some((add, (mut nodes, q, k, scale), mask)) => {
            nodes.push(add);
            (nodes, q, k, scale, Some(mask))
        }
        None => {
            let (nodes, q, k, scale) = scores(l, x)?;
            (nodes, q, k, scale, None)
        }
    };
    chain.extend([i, mm2]);
    Some(Found { chain, q, k, v, mask, scale })
}

/// The graph with every attention chain fused, or `None` when it has none.
pub(super) fn fuse(graph: &Graph) -> Option<Graph> {
    let l = Links::new(graph);
    let mut rw = Rewrite::default();
    for (i, n) in graph.nodes.iter().enumerate() {
        if n.op_type != "Softmax" || n.domain != DEFAULT_DOMAIN {
            continue;
        }
        let Some(f) = find(&l, i) else { continue };
        if f.chain.iter().any(|&c| rw.taken(c)) {
            continue;
        }
        let last = l.node(*f.chain.last().unwrap_or(&i));
        let name = format!("{}/Attention", last.name);
        let mut nodes = Vec::new();
        let k = match f.k {
            Keys::Heads(k) => k,
            Keys::Rows(rows) => {
                let k = rw.value(graph, format!("{name}/K"));
                nodes.push(Node {
                    name: format!("{name}/K"),
                    op_type: "Transpose".into(),
                    domain: DEFAULT_DOMAIN.into(),
                    opset: 13,
                    inputs: vec![Some(rows)],
                    outputs: vec![Some(k)],
                    implicit_inputs: vec![],
                    attrs: Attributes(vec![("perm".into(), Attribute::Ints(vec![0, 2, 1, 3]))]),
                });
                k
            }
        };
        let mut inputs = vec![Some(f.q), Some(k), Some(f.v)];
        if let Some(m) = f.mask {
            inputs.push(Some(m));
        }
        nodes.push(Node {
            name,
            op_type: "Attention".into(),
            domain: DEFAULT_DOMAIN.into(),
            opset: 23,
            inputs,
            outputs: last.outputs.clone(),
            implicit_inputs: vec![],
            attrs: Attributes(vec![("scale".into(), Attribute::Float(f.scale as f32))]),
        });
        rw.replace(&f.chain, nodes);
    }
    rw.apply(graph)
}

#[cfg(test)]
mod tests {
    use super::super::test_graph::{graph, node};
    use super::*;
    use crate::tensor::Tensor;

    fn transpose(input: u32, out: u32, perm: &[i64]) -> Node {
        let mut n = node("Transpose", &[input], out);
        n.attrs = Attributes(vec![("perm".into(), Attribute::Ints(perm.to_vec()))]);
        n
    }

    /// Inputs q'=0, k'=1, v'=2 (row order), mask=3, √d=4; output y=13.
    fn chain(k_perm: &[i64], extra_reader: bool) -> Graph {
        let mut nodes = vec![
            transpose(0, 5, &[0, 2, 1, 3]),
            transpose(1, 6, k_perm),
            transpose(2, 7, &[0, 2, 1, 3]),
            node("MatMul", &[5, 6], 8),
            node("Div", &[8, 4], 9),
            node("Add", &[3, 9], 10),
            node("Softmax", &[10], 11),
            node("MatMul", &[11, 7], 13),
        ];
        nodes[6].attrs = Attributes(vec![("axis".into(), Attribute::Int(-1))]);
        if extra_reader {
            nodes.push(node("Neg", &[9], 14));
        }
        graph(15, nodes, &[0, 1, 2, 3], &[13], vec![(4, Tensor::scalar(8f32))])
    }

    #[test]
    fn transformers_eager_attention_becomes_one_attention_op() {
        let g = fuse(&chain(&[0, 2, 3, 1], false)).expect("fused");
        let ops: Vec<&str> = g.nodes.iter().map(|n| n.op_type.as_str()).collect();
        assert_eq!(ops, ["Transpose", "Transpose", "Transpose", "Attention"]);
        let a = &g.nodes[3];
        assert_eq!(a.opset, 23);
        let k = g.nodes[2].outputs[0];
        assert_eq!(g.nodes[2].inputs, vec![Some(ValueId(1))]);
        assert_eq!(g.nodes[2].attrs.ints("perm").unwrap(), Some(vec![0, 2, 1, 3]));
        assert_eq!(a.inputs, vec![Some(ValueId(5)), k, Some(ValueId(7)), Some(ValueId(3))]);
        assert_eq!(a.outputs, vec![Some(ValueId(13))]);
        assert_eq!(a.attrs.float("scale").unwrap(), Some(0.125));
        assert_eq!(g.values.len(), 16);
    }

    #[test]
    fn keys_already_in_head_order_need_no_transpose() {
        let g = fuse(&chain(&[0, 1, 3, 2], false)).expect("fused");
        let a = g.nodes.iter().find(|n| n.op_type == "Attention").expect("attention");
        assert_eq!(a.input(1), Some(ValueId(1)));
        assert_eq!(g.nodes.len(), 3);
    }

    #[test]
    fn scores_read_elsewhere_or_other_key_layouts_are_left_alone() {
        assert!(fuse(&chain(&[0, 2, 3, 1], true)).is_none());
        assert!(fuse(&chain(&[0, 3, 2, 1], false)).is_none());
    }
}
