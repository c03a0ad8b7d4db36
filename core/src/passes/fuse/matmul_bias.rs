//! A projection with a bias, `MatMul(x, W) + bias` (`W` a constant matrix,
//! `bias` a constant vector of its width), becomes one `Gemm` whose C is the
//! bias, so a provider that adds C in its GEMM's epilogue (CUDA, through
//! cuBLASLt) writes the projection once instead of writing it and then
//! reading and writing it again for the Add. Gemm takes 2-D operands, so
//! `x` of any rank is flattened first and the product reshaped back:
//!
//! ```text
//! Flatten(x, axis -1) → Gemm(·, W, bias) → Reshape(·, Concat(Shape(x, end -1), [N]))
//! ```
//!
//! Flatten and Reshape are views and the shape arithmetic folds on the host,
//! so only the Gemm launches. This pass runs after the others: the bias
//! Adds that SkipLayerNormalization and BiasGelu absorb are gone by then.

use super::chain::{Links, op_node};
use super::rewrite::Rewrite;
use crate::graph::{Attribute, DEFAULT_DOMAIN, Graph};
use crate::tensor::Tensor;

/// The graph with every constant-weight projection and its bias made one
/// Gemm, or `None` when there is none.
pub(super) fn fuse(graph: &Graph) -> Rewrite {
    let l = Links::new(graph);
    let mut rw = Rewrite::default();
    for (i, add) in graph.nodes.iter().enumerate() {
        if add.op_type != "Add" || add.domain != DEFAULT_DOMAIN || add.inputs.len() != 2 {
            continue;
        }
        let found = (|| {
            let (u, w) = (add.input(0)?, add.input(1)?);
            let (h, bias) = if l.vector(w).is_some() { (u, w) } else { (w, u) };
            let b = l.vector(bias)?;
            let mm = l.writer(h, "MatMul").filter(|_| l.single(h))?;
            let (x, weight) = (l.node(mm).input(0)?, l.node(mm).input(1)?);
            let wt = l.constant(weight)?;
            let width = *wt.shape().get(1)?;
            (wt.shape().len() == 2 && width == b.numel() && wt.dtype() == b.dtype())
                .then_some((mm, x, weight, bias, width))
        })();
        let Some((mm, x, weight, bias, width)) = found else { continue };
        let Some(y) = add.outputs.first().copied().flatten() else { continue };
        if rw.taken(mm) || rw.taken(i) {
            continue;
        }
        let name = &add.name;
        let flat = rw.value(graph, format!("{name}/flat"));
        let product = rw.value(graph, format!("{name}/gemm"));
        let lead = rw.value(graph, format!("{name}/lead"));
        let Ok(width) = Tensor::from_vec(vec![1], vec![width as i64]) else { continue };
        let n = rw.constant(graph, format!("{name}/width"), width);
        let shape = rw.value(graph, format!("{name}/shape"));
        let at = |op: &str| format!("{name}/{op}");
        let (axis, end) = (Attribute::Int(-1), Attribute::Int(-1));
        let nodes = vec![
            op_node(&at("Flatten"), "Flatten", 13, &[x], flat, vec![("axis", axis)]),
            op_node(&at("Gemm"), "Gemm", 13, &[flat, weight, bias], product, vec![]),
            op_node(&at("Shape"), "Shape", 15, &[x], lead, vec![("end", end)]),
            op_node(
                &at("Concat"),
                "Concat",
                13,
                &[lead, n],
                shape,
                vec![("axis", Attribute::Int(0))],
            ),
            op_node(&at("Reshape"), "Reshape", 14, &[product, shape], y, vec![]),
        ];
        rw.replace(&[mm, i], nodes);
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

    use crate::graph::ValueId;

    /// x=0, W=1 (4 × 3), bias=2; MatMul → 3, Add → 4.
    fn projection(bias_len: usize, bias_first: bool) -> Graph {
        let add = if bias_first { node("Add", &[2, 3], 4) } else { node("Add", &[3, 2], 4) };
        let nodes = vec![node("MatMul", &[0, 1], 3), add];
        let consts = vec![
            (1, Tensor::from_vec(vec![4, 3], vec![0.5f32; 12]).unwrap()),
            (2, Tensor::from_vec(vec![bias_len], vec![1f32; bias_len]).unwrap()),
        ];
        graph(5, nodes, &[0], &[4], consts)
    }

    #[test]
    fn a_projection_and_its_bias_become_one_gemm_between_views() {
        for bias_first in [false, true] {
            let g = fuse(&projection(3, bias_first)).expect("fused");
            let ops: Vec<&str> = g.nodes.iter().map(|n| n.op_type.as_str()).collect();
            assert_eq!(ops, ["Flatten", "Gemm", "Shape", "Concat", "Reshape"]);
            let gemm = &g.nodes[1];
            assert_eq!(gemm.inputs[1..], [Some(ValueId(1)), Some(ValueId(2))]);
            assert_eq!(g.nodes[0].inputs, [Some(ValueId(0))]);
            assert_eq!(g.nodes[4].outputs, [Some(ValueId(4))]);
            assert_eq!(g.nodes[2].attrs.int("end").unwrap(), Some(-1));
        }
    }

    #[test]
    fn a_bias_of_another_width_than_the_weights_is_left_alone() {
        assert!(fuse(&projection(4, false)).is_none());
    }

    #[test]
    fn a_product_read_elsewhere_too_is_left_alone() {
        let mut g = projection(3, false);
        g.nodes.push(node("Neg", &[3], 5));
        g.values.push(crate::graph::ValueInfo { name: "v5".into(), declared: None });
        assert!(fuse(&g).is_none());
    }

    #[test]
    fn a_product_with_computed_weights_is_left_alone() {
        let mut g = projection(3, false);
        g.initializers.remove(&ValueId(1));
        g.inputs.push(ValueId(1));
        assert!(fuse(&g).is_none());
    }
}
