//! SkipLayerNormalization: a post-norm transformer ends each block with
//!
//! ```text
//! h = MatMul(x, W) + bias        bias a constant vector
//! y = LayerNormalization(h + residual, axis -1)
//! ```
//!
//! two elementwise passes and a normalization over the hidden state. It
//! becomes one `com.microsoft` `SkipLayerNormalization(x·W, residual, gamma,
//! beta, bias)` with the normalization's epsilon: one pass that adds and
//! normalizes each row in registers. The MatMul's output stays the op's
//! `input` (the full shape) and the residual its `skip`; the op's inference
//! checks that the skip fits.

use super::chain::Links;
use super::rewrite::Rewrite;
use crate::graph::{Attribute, Attributes, Graph, MICROSOFT_DOMAIN, Node, ValueId};
use crate::ops::defaults;

/// `MatMul(…) + bias` written to `u`: the Add node, the MatMul's output and the bias.
fn biased(l: &Links<'_>, u: ValueId, hidden: usize) -> Option<(usize, ValueId, ValueId)> {
    if !l.single(u) {
        return None;
    }
    let add = l.writer(u, "Add")?;
    let (a, b) = (l.node(add).input(0)?, l.node(add).input(1)?);
    let (h, bias) = if l.vector(b).is_some() { (a, b) } else { (b, a) };
    let t = l.vector(bias)?;
    (t.numel() == hidden && l.writer(h, "MatMul").is_some()).then_some((add, h, bias))
}

/// The graph with every bias-residual-LayerNormalization chain fused, or `None`.
pub(super) fn fuse(graph: &Graph) -> Rewrite {
    let l = Links::new(graph);
    let mut rw = Rewrite::default();
    for (i, ln) in graph.nodes.iter().enumerate() {
        if ln.op_type != "LayerNormalization" || ln.domain != crate::graph::DEFAULT_DOMAIN {
            continue;
        }
        let found = (|| {
            if ln.attrs.int_or("axis", -1).ok()? != -1
                || ln.outputs.iter().skip(1).any(Option::is_some)
            {
                return None;
            }
            let gamma = l.vector(ln.input(1)?)?;
            let beta = ln.input(2);
            if beta.is_some_and(|b| l.vector(b).is_none_or(|t| t.dtype() != gamma.dtype())) {
                return None;
            }
            let x = ln.input(0)?;
            let sum = l.writer(x, "Add").filter(|_| l.single(x))?;
            let (u, w) = (l.node(sum).input(0)?, l.node(sum).input(1)?);
            let hidden = gamma.numel();
            let (add, h, bias, residual) = match biased(&l, u, hidden) {
                Some((add, h, bias)) => (add, h, bias, w),
                None => {
                    let (add, h, bias) = biased(&l, w, hidden)?;
                    (add, h, bias, u)
                }
            };
            if l.vector(bias)?.dtype() != gamma.dtype() {
                return None;
            }
            let eps = ln.attrs.float_or("epsilon", defaults::LAYER_NORM_EPSILON).ok()?;
            Some(([add, sum, i], h, residual, bias, beta, eps))
        })();
        let Some((chain, h, residual, bias, beta, eps)) = found else { continue };
        if chain.iter().any(|&c| rw.taken(c)) {
            continue;
        }
        let node = Node {
            name: format!("{}/SkipLayerNormalization", ln.name),
            op_type: "SkipLayerNormalization".into(),
            domain: MICROSOFT_DOMAIN.into(),
            opset: 1,
            inputs: vec![Some(h), Some(residual), ln.input(1), beta, Some(bias)],
            outputs: vec![ln.outputs.first().copied().flatten()],
            implicit_inputs: vec![],
            attrs: Attributes(vec![("epsilon".into(), Attribute::Float(eps))]),
        };
        rw.replace(&chain, vec![node]);
    }
    rw
}

#[cfg(test)]
mod tests {
    use super::super::test_graph::{graph, node};
    use super::*;

    /// The pass's proposals, applied without the fact check.
    fn fuse(g: &Graph) -> Option<Graph> {
        super::fuse(g).unchecked(g)
    }

    use crate::tensor::Tensor;

    /// x=0, W=1, bias=2, residual=3, gamma=4, beta=5; y = 9.
    fn block(bias_len: usize) -> Graph {
        let nodes = vec![
            node("MatMul", &[0, 1], 6),
            node("Add", &[2, 6], 7),
            node("Add", &[7, 3], 8),
            node("LayerNormalization", &[8, 4, 5], 9),
        ];
        let v = |n: usize| Tensor::from_vec(vec![n], vec![0.5f32; n]).unwrap();
        let consts = vec![
            (1, Tensor::from_vec(vec![4, 4], vec![0f32; 16]).unwrap()),
            (2, v(bias_len)),
            (4, v(4)),
            (5, v(4)),
        ];
        graph(10, nodes, &[0, 3], &[9], consts)
    }

    #[test]
    fn bias_residual_and_layer_norm_become_one_skip_layer_normalization() {
        let g = fuse(&block(4)).expect("fused");
        assert_eq!(g.nodes.len(), 2);
        let n = &g.nodes[1];
        assert_eq!(
            (n.op_type.as_str(), n.domain.as_str()),
            ("SkipLayerNormalization", MICROSOFT_DOMAIN)
        );
        let ids = |v: &[u32]| v.iter().map(|&i| Some(ValueId(i))).collect::<Vec<_>>();
        assert_eq!(n.inputs, ids(&[6, 3, 4, 5, 2]));
        assert_eq!(n.outputs, ids(&[9]));
        assert_eq!(n.attrs.float("epsilon").unwrap(), Some(1e-5));
    }

    #[test]
    fn weights_shared_through_identity_nodes_still_fuse() {
        let mut g = block(4);
        // The bias (2) is read through Identity → 10, as exporters write shared weights.
        g.nodes[1].inputs[0] = Some(ValueId(10));
        g.nodes.push(node("Identity", &[2], 10));
        g.values.push(crate::graph::ValueInfo { name: "v10".into(), declared: None });
        let g = fuse(&g).expect("fused");
        let n = g.nodes.iter().find(|n| n.op_type == "SkipLayerNormalization").expect("fused node");
        assert_eq!(n.input(4), Some(ValueId(10)));
    }

    #[test]
    fn a_bias_of_another_width_than_the_norm_is_left_alone() {
        assert!(fuse(&block(3)).is_none());
    }
}
