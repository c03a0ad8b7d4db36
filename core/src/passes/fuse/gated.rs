//! Gated feed-forward: a decoder's MLP writes `silu(A·Wg) ⊙ (A·Wu)` as two
//! MatMulNBits over one input and `Mul(Mul(g, Sigmoid(g)), u)` (how PyTorch
//! exports `F.silu`, and how the onnxruntime-genai builder writes it). The
//! five nodes become one `onyx` `GatedMatMulNBits`, which reads A once,
//! streams both weights in one launch and writes only the product: for one
//! token that is four launches fewer a layer, on the path every decode step
//! waits on.
//!
//! Fused only where both projections share A, their shape (K, N, bits,
//! block size), have constant weights and no bias or `g_idx`, and no other
//! node reads the chain's intermediates.

use super::chain::Links;
use super::rewrite::Rewrite;
use crate::graph::{Attribute, Attributes, Graph, MICROSOFT_DOMAIN, Node, ONYX_DOMAIN, ValueId};
use crate::ops::microsoft::gated::Gate;

/// Whether `n` is a MatMulNBits the fused op can take: no `g_idx` or bias,
/// constant weights, scales and zero points.
fn plain_nbits(l: &Links<'_>, n: &Node) -> bool {
    n.op_type == "MatMulNBits"
        && n.domain == MICROSOFT_DOMAIN
        && n.inputs.iter().skip(4).all(Option::is_none)
        && (1..4).all(|i| n.input(i).is_none_or(|v| l.constant(v).is_some()))
        && n.input(1).is_some()
        && n.input(2).is_some()
}

/// The shape attributes both projections must share, as written.
fn shape_attrs(n: &Node) -> Option<[i64; 4]> {
    let a = &n.attrs;
    Some([
        a.req_int("K").ok()?,
        a.req_int("N").ok()?,
        a.int_or("bits", 4).ok()?,
        a.req_int("block_size").ok()?,
    ])
}

/// The graph with every gated projection fused, as proposals.
pub(super) fn fuse(graph: &Graph) -> Rewrite {
    let l = Links::new(graph);
    let mut rw = Rewrite::default();
    // The MatMulNBits node writing `v`, read by nothing else but `readers` nodes.
    let nbits = |v: ValueId, readers: usize| {
        let i = *l.writer.get(&v)?;
        (l.readers.get(&v) == Some(&readers) && plain_nbits(&l, l.node(i))).then_some(i)
    };
    for (outer, n) in graph.nodes.iter().enumerate() {
        if n.op_type != "Mul" || n.domain != crate::graph::DEFAULT_DOMAIN || n.inputs.len() != 2 {
            continue;
        }
        let (Some(x), Some(y)) = (n.input(0), n.input(1)) else { continue };
        // One side is silu(g) = Mul(g, Sigmoid(g)); the other is u.
        let chain = [(x, y), (y, x)].into_iter().find_map(|(silu, u)| {
            let inner = l.writer(silu, "Mul").filter(|_| l.single(silu))?;
            let m = l.node(inner);
            let (a, b) = (m.input(0)?, m.input(1)?);
            let (g, sig) = [(a, b), (b, a)].into_iter().find_map(|(g, s)| {
                let sig = l.writer(s, "Sigmoid").filter(|_| l.single(s))?;
                (l.node(sig).input(0) == Some(g)).then_some((g, sig))
            })?;
            let gate = nbits(g, 2)?;
            let up = nbits(u, 1)?;
            let (gn, un) = (l.node(gate), l.node(up));
            let same = gn.input(0).is_some()
                && gn.input(0) == un.input(0)
                && shape_attrs(gn).is_some()
                && shape_attrs(gn) == shape_attrs(un);
            same.then_some([gate, up, sig, inner, outer])
        });
        let Some(chain) = chain else { continue };
        if chain.iter().any(|&i| rw.taken(i)) {
            continue;
        }
        let (gn, un) = (l.node(chain[0]), l.node(chain[1]));
        let mut inputs = vec![gn.input(0)];
        inputs.extend((1..4).map(|i| gn.input(i)));
        inputs.extend((1..4).map(|i| un.input(i)));
        let mut attrs: Vec<(String, Attribute)> = gn
            .attrs
            .0
            .iter()
            .filter(|(k, _)| matches!(k.as_str(), "K" | "N" | "bits" | "block_size"))
            .cloned()
            .collect();
        attrs.push(("activation".into(), Attribute::String(Gate::Silu.name().into())));
        let node = Node {
            name: format!("{}/Gated", n.name),
            op_type: "GatedMatMulNBits".into(),
            domain: ONYX_DOMAIN.into(),
            opset: 1,
            inputs,
            outputs: n.outputs.clone(),
            implicit_inputs: vec![],
            attrs: Attributes(attrs),
        };
        rw.replace(&chain, vec![node]);
    }
    rw
}

#[cfg(test)]
mod tests {
    use super::super::test_graph::{graph, node};
    use super::*;
    use crate::tensor::Tensor;

    fn nbits(ins: &[u32], out: u32, n: i64) -> Node {
        let mut m = node("MatMulNBits", ins, out);
        m.domain = MICROSOFT_DOMAIN.into();
        m.attrs = Attributes(vec![
            ("K".into(), Attribute::Int(32)),
            ("N".into(), Attribute::Int(n)),
            ("bits".into(), Attribute::Int(4)),
            ("block_size".into(), Attribute::Int(32)),
        ]);
        m
    }

    /// A = 0; gate B, scales = 1, 2; up B, scales = 3, 4; g = 5, u = 6,
    /// sigmoid 7, silu 8, y = 9 (or, with `extra`, also the sigmoid read by 10).
    fn mlp(up_n: i64, extra: bool, swapped: bool) -> Graph {
        let mut nodes = vec![
            nbits(&[0, 1, 2], 5, 8),
            nbits(&[0, 3, 4], 6, up_n),
            node("Sigmoid", &[5], 7),
            node("Mul", if swapped { &[7, 5] } else { &[5, 7] }, 8),
            node("Mul", if swapped { &[6, 8] } else { &[8, 6] }, 9),
        ];
        if extra {
            nodes.push(node("Neg", &[7], 10));
        }
        let w = |n: usize| Tensor::from_vec(vec![n, 1, 16], vec![0u8; n * 16]).unwrap();
        let s = |n: usize| Tensor::from_vec(vec![n], vec![1f32; n]).unwrap();
        let inits = vec![(1, w(8)), (2, s(8)), (3, w(up_n as usize)), (4, s(up_n as usize))];
        graph(11, nodes, &[0], if extra { &[9, 10] } else { &[9] }, inits)
    }

    #[test]
    fn a_silu_gated_pair_of_projections_becomes_one_op() {
        for swapped in [false, true] {
            let g = fuse(&mlp(8, false, swapped)).unchecked(&mlp(8, false, swapped)).unwrap();
            assert_eq!(g.nodes.len(), 1);
            let n = &g.nodes[0];
            assert_eq!((n.op_type.as_str(), n.domain.as_str()), ("GatedMatMulNBits", ONYX_DOMAIN));
            let ins: Vec<_> = n.inputs.iter().map(|v| v.map(|v| v.0)).collect();
            assert_eq!(ins, [Some(0), Some(1), Some(2), None, Some(3), Some(4), None]);
            assert_eq!(n.outputs, [Some(ValueId(9))]);
        }
    }

    #[test]
    fn projections_of_other_shapes_or_a_shared_sigmoid_stay_as_written() {
        assert!(fuse(&mlp(16, false, false)).unchecked(&mlp(16, false, false)).is_none());
        assert!(fuse(&mlp(8, true, false)).unchecked(&mlp(8, true, false)).is_none());
    }
}
