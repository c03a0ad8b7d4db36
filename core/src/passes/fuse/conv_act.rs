//! Conv + activation: a CNN follows most convolutions with an activation
//! (`Relu`, `HardSwish` in MobileNet-style nets, …), one more pass over the
//! feature map. The pair becomes one `com.microsoft` `FusedConv`, whose
//! kernel applies the activation to each block of output while it is still
//! in cache (ONNX Runtime's ConvActivationFusion makes the same op).
//! Only f32 convolutions with constant weights are fused: the CPU kernel
//! fuses for f32, and other dtypes keep their chain.

use super::chain::Links;
use super::rewrite::Rewrite;
use crate::dtype::DType;
use crate::graph::{Attribute, DEFAULT_DOMAIN, Graph, MICROSOFT_DOMAIN, Node};
use crate::ops::defaults;

/// The `activation` name and `activation_params` of a fusable activation node.
fn activation(n: &Node) -> Option<(&'static str, Vec<f32>)> {
    let a = &n.attrs;
    Some(match n.op_type.as_str() {
        "Relu" => ("Relu", vec![]),
        "Tanh" => ("Tanh", vec![]),
        "Sigmoid" => ("Sigmoid", vec![]),
        "HardSwish" => ("HardSwish", vec![]),
        "LeakyRelu" => ("LeakyRelu", vec![a.float_or("alpha", defaults::LEAKY_RELU_ALPHA).ok()?]),
        "HardSigmoid" => {
            let alpha = a.float_or("alpha", defaults::HARD_SIGMOID_ALPHA).ok()?;
            ("HardSigmoid", vec![alpha, a.float_or("beta", defaults::HARD_SIGMOID_BETA).ok()?])
        }
        _ => return None,
    })
}

/// The graph with every Conv → activation pair fused, or `None`.
pub(super) fn fuse(graph: &Graph) -> Rewrite {
    let l = Links::new(graph);
    let mut rw = Rewrite::default();
    for (i, act) in graph.nodes.iter().enumerate() {
        if act.domain != DEFAULT_DOMAIN {
            continue;
        }
        let Some((name, params)) = activation(act) else { continue };
        let Some(x) = act.input(0) else { continue };
        let Some(conv) = l.writer(x, "Conv").filter(|_| l.single(x)) else { continue };
        let c = l.node(conv);
        let f32_weights =
            c.input(1).and_then(|w| l.constant(w)).is_some_and(|w| w.dtype() == DType::F32);
        if !f32_weights || rw.taken(conv) {
            continue;
        }
        let mut attrs = c.attrs.clone();
        attrs.0.push(("activation".into(), Attribute::String(name.into())));
        if !params.is_empty() {
            attrs.0.push(("activation_params".into(), Attribute::Floats(params)));
        }
        let node = Node {
            name: format!("{}/{}", c.name, act.name),
            op_type: "FusedConv".into(),
            domain: MICROSOFT_DOMAIN.into(),
            opset: 1,
            inputs: c.inputs.clone(),
            outputs: act.outputs.clone(),
            implicit_inputs: vec![],
            attrs,
        };
        rw.replace(&[conv, i], vec![node]);
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
    use crate::tensor::Tensor;

    /// x=0, W=1; conv out 2, activation out 3.
    fn chain(act: &str, weights: Tensor, extra_reader: bool) -> Graph {
        let mut nodes = vec![node("Conv", &[0, 1], 2), node(act, &[2], 3)];
        if extra_reader {
            nodes.push(node("Neg", &[2], 4));
        }
        graph(5, nodes, &[0], &[3], vec![(1, weights)])
    }

    fn w32() -> Tensor {
        Tensor::from_vec(vec![1, 1, 1], vec![2f32]).unwrap()
    }

    #[test]
    fn a_conv_and_its_hardswish_become_one_fused_conv() {
        let g = fuse(&chain("HardSwish", w32(), false)).expect("fused");
        assert_eq!(g.nodes.len(), 1);
        let n = &g.nodes[0];
        assert_eq!((n.op_type.as_str(), n.domain.as_str()), ("FusedConv", MICROSOFT_DOMAIN));
        assert_eq!(n.inputs, vec![Some(ValueId(0)), Some(ValueId(1))]);
        assert_eq!(n.outputs, vec![Some(ValueId(3))]);
        assert_eq!(n.attrs.req_string("activation").unwrap(), "HardSwish");
    }

    #[test]
    fn a_leaky_relu_keeps_its_slope_as_the_activation_parameter() {
        let g = fuse(&chain("LeakyRelu", w32(), false)).expect("fused");
        assert_eq!(g.nodes[0].attrs.floats_or("activation_params", vec![]).unwrap(), vec![0.01]);
    }

    #[test]
    fn a_conv_read_elsewhere_or_in_another_dtype_is_left_alone() {
        assert!(fuse(&chain("Relu", w32(), true)).is_none());
        let w64 = Tensor::from_vec(vec![1, 1, 1], vec![2f64]).unwrap();
        assert!(fuse(&chain("Relu", w64, false)).is_none());
        assert!(fuse(&chain("Elu", w32(), false)).is_none());
    }
}
