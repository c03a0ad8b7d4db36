//! Gelu: PyTorch's exporter (opsets below 20) writes `F.gelu(x)` as
//! `Mul(Mul(x, Add(Erf(Div(x, √2)), 1)), 0.5)`, five elementwise passes over
//! the widest activation of a transformer. It becomes one `Gelu` (opset 20).
//! The fused op computes in f32 internally and rounds once, where the chain
//! rounds after every step in half precision: it is at least as accurate.

use super::chain::Links;
use super::rewrite::Rewrite;
use crate::graph::{Attributes, DEFAULT_DOMAIN, Graph, MICROSOFT_DOMAIN, Node, ValueId};

/// Whether `c` is within 0.2% of `want` (constants stored in half precision).
fn near(c: Option<f64>, want: f64) -> bool {
    c.is_some_and(|c| (c - want).abs() <= want * 2e-3)
}

/// The graph with every Gelu chain fused, or `None` when it has none.
pub(super) fn fuse(graph: &Graph) -> Rewrite {
    let l = Links::new(graph);
    // The other input of binary node `n`, given that one input is `v`, is the constant `c`.
    let with_const = |n: &Node, v: ValueId, c: f64| {
        n.inputs.len() == 2
            && match (n.input(0), n.input(1)) {
                (Some(a), Some(b)) if a == v => near(l.scalar(b), c),
                (Some(a), Some(b)) if b == v => near(l.scalar(a), c),
                _ => false,
            }
    };
    let mut rw = Rewrite::default();
    for (i, n) in graph.nodes.iter().enumerate() {
        let Some(x) = n.input(0) else { continue };
        let scaled = n.domain == DEFAULT_DOMAIN
            && match n.op_type.as_str() {
                "Div" => {
                    n.inputs.len() == 2 && near(n.input(1).and_then(|c| l.scalar(c)), 2f64.sqrt())
                }
                "Mul" => with_const(n, x, std::f64::consts::FRAC_1_SQRT_2),
                _ => false,
            };
        if !scaled {
            continue;
        }
        let chain = (|| {
            let erf = l.next(l.out0(i)?, "Erf")?;
            let add = l.next(l.out0(erf)?, "Add")?;
            if !with_const(l.node(add), l.out0(erf)?, 1.0) {
                return None;
            }
            let mul = l.next(l.out0(add)?, "Mul")?;
            let m = l.node(mul);
            let other = if m.input(0) == l.out0(add) { m.input(1) } else { m.input(0) };
            if other != Some(x) {
                return None;
            }
            let half = l.next(l.out0(mul)?, "Mul")?;
            if !with_const(l.node(half), l.out0(mul)?, 0.5) {
                return None;
            }
            Some([i, erf, add, mul, half])
        })();
        let Some(chain) = chain else { continue };
        let last = l.node(chain[4]);
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
        rw.replace(&chain, vec![node]);
    }
    rw
}

/// The graph with every `Gelu(Add(h, bias))` (erf form, `bias` a 1-D
/// constant, the sum read by the Gelu alone) made one com.microsoft
/// `BiasGelu(h, bias)`, as onnxruntime's BiasGeluFusion does: a transformer's
/// first feed-forward projection then writes its widest activation once
/// instead of three times. `None` when there is none. Whether the bias
/// matches the last axis is checked when the fused graph is inferred.
pub(super) fn fuse_bias(graph: &Graph) -> Rewrite {
    let l = Links::new(graph);
    let mut rw = Rewrite::default();
    for (i, n) in graph.nodes.iter().enumerate() {
        let erf_form = n.attrs.string_or("approximate", "none".into()).is_ok_and(|a| a == "none");
        if n.op_type != "Gelu" || n.domain != DEFAULT_DOMAIN || !erf_form {
            continue;
        }
        let Some(x) = n.input(0) else { continue };
        let Some(add) = l.writer(x, "Add") else { continue };
        let a = l.node(add);
        if !l.single(x) || a.inputs.len() != 2 {
            continue;
        }
        let is_bias = |v: Option<ValueId>| {
            v.and_then(|v| l.constant(v)).is_some_and(|t| t.shape().len() == 1)
        };
        let (h, bias) = match (a.input(0), a.input(1)) {
            (h, b) if is_bias(b) && !is_bias(h) => (h, b),
            (b, h) if is_bias(b) && !is_bias(h) => (h, b),
            _ => continue,
        };
        let node = Node {
            name: format!("{}/BiasGelu", n.name),
            op_type: "BiasGelu".into(),
            domain: MICROSOFT_DOMAIN.into(),
            opset: 1,
            inputs: vec![h, bias],
            outputs: n.outputs.clone(),
            implicit_inputs: vec![],
            attrs: Attributes::default(),
        };
        rw.replace(&[add, i], vec![node]);
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

    /// The pass's proposals, applied without the fact check.
    fn fuse_bias(g: &Graph) -> Option<Graph> {
        super::fuse_bias(g).unchecked(g)
    }

    use crate::tensor::Tensor;

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
        let consts = vec![(1, c(std::f32::consts::SQRT_2)), (2, c(1.0)), (3, c(0.5))];
        graph(10, nodes, &[0], &[8], consts)
    }

    #[test]
    fn the_exported_erf_chain_becomes_one_gelu() {
        let g = fuse(&chain(false)).expect("fused");
        assert_eq!(g.nodes.len(), 1);
        let n = &g.nodes[0];
        assert_eq!((n.op_type.as_str(), n.opset), ("Gelu", 20));
        assert_eq!(n.inputs, vec![Some(ValueId(0))]);
        assert_eq!(n.outputs, vec![Some(ValueId(8))]);
    }

    #[test]
    fn a_gelu_of_a_bias_add_becomes_one_bias_gelu_and_a_shared_sum_does_not() {
        use crate::tensor::Tensor;
        // h=0, bias=1 (1-D constant), sum=2, y=3; with `shared`, Neg also reads the sum.
        let g = |shared: bool| {
            let mut nodes = vec![node("Add", &[1, 0], 2), node("Gelu", &[2], 3)];
            if shared {
                nodes.push(node("Neg", &[2], 4));
            }
            let bias = Tensor::from_vec(vec![4], vec![0.5f32; 4]).unwrap();
            graph(5, nodes, &[0], &[3], vec![(1, bias)])
        };
        let f = fuse_bias(&g(false)).expect("fused");
        assert_eq!(f.nodes.len(), 1);
        let n = &f.nodes[0];
        assert_eq!((n.op_type.as_str(), n.domain.as_str()), ("BiasGelu", MICROSOFT_DOMAIN));
        assert_eq!(n.inputs, vec![Some(ValueId(0)), Some(ValueId(1))]);
        assert_eq!(n.outputs, vec![Some(ValueId(3))]);
        assert!(fuse_bias(&g(true)).is_none());
    }

    #[test]
    fn a_chain_whose_intermediate_is_read_elsewhere_is_left_alone() {
        assert!(fuse(&chain(true)).is_none());
    }

    #[test]
    fn a_double_precision_chain_is_left_to_its_ops() {
        assert!(fuse(&chain_of(false, |v| Tensor::scalar(v as f64))).is_none());
    }
}
