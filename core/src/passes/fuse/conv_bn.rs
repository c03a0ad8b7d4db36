//! Conv + BatchNormalization: a CNN exported for inference follows most
//! convolutions with a BatchNormalization over their output channels, a
//! per-channel affine `y = (x − mean) · s + beta` with `s = scale / √(var + ε)`.
//! With constant weights that affine folds into the convolution:
//!
//! ```text
//! W'[m, …] = W[m, …] · s[m]        B'[m] = (B[m] − mean[m]) · s[m] + beta[m]
//! ```
//!
//! one pass over the feature map fewer per block. The new weights are
//! computed in f64 and rounded once to the weights' dtype, as ONNX Runtime's
//! ConvBNFusion does in the weights' own precision.

use super::chain::Links;
use super::rewrite::Rewrite;
use crate::dtype::DType;
use crate::graph::{DEFAULT_DOMAIN, Graph, Node};
use crate::ops::defaults;
use crate::tensor::Tensor;

/// The graph with every foldable Conv → BatchNormalization pair folded, or `None`.
pub(super) fn fuse(graph: &Graph) -> Rewrite {
    let l = Links::new(graph);
    let mut rw = Rewrite::default();
    for (i, bn) in graph.nodes.iter().enumerate() {
        if bn.op_type != "BatchNormalization" || bn.domain != DEFAULT_DOMAIN {
            continue;
        }
        let Some((conv, w, b)) = folded(&l, bn) else { continue };
        if rw.taken(conv) {
            continue;
        }
        let c = l.node(conv);
        let w_id = rw.constant(graph, format!("{}/W", c.name), w);
        let b_id = rw.constant(graph, format!("{}/B", c.name), b);
        let node = Node {
            name: format!("{}/{}", c.name, bn.name),
            inputs: vec![c.input(0), Some(w_id), Some(b_id)],
            outputs: vec![bn.outputs.first().copied().flatten()],
            ..c.clone()
        };
        rw.replace(&[conv, i], vec![node]);
    }
    rw
}

/// For BatchNormalization `bn` reading a foldable Conv: the Conv's node and
/// its folded weights and bias.
fn folded(l: &Links<'_>, bn: &Node) -> Option<(usize, Tensor, Tensor)> {
    // Inference mode only: no running-statistics outputs, no training flag.
    if bn.outputs.iter().skip(1).any(Option::is_some)
        || bn.attrs.int_or("training_mode", 0).ok()? != 0
    {
        return None;
    }
    let x = bn.input(0)?;
    let conv = l.writer(x, "Conv").filter(|_| l.single(x))?;
    let c = l.node(conv);
    let w = l.constant(c.input(1)?)?;
    if !matches!(w.dtype(), DType::F32 | DType::F16 | DType::BF16 | DType::F64)
        || w.shape().len() < 3
    {
        return None;
    }
    let m = w.shape()[0];
    let params: Vec<Vec<f64>> = (1..5)
        .map(|k| {
            let t = l.vector(bn.input(k)?)?;
            (t.numel() == m).then(|| t.to_f64_vec().ok()).flatten()
        })
        .collect::<Option<_>>()?;
    let (scale, beta, mean, var) = (&params[0], &params[1], &params[2], &params[3]);
    let bias = match c.input(2) {
        Some(b) => {
            let t = l.vector(b)?;
            if t.numel() != m || t.dtype() != w.dtype() {
                return None;
            }
            t.to_f64_vec().ok()?
        }
        None => vec![0.0; m],
    };
    let eps = f64::from(bn.attrs.float_or("epsilon", defaults::BATCH_NORM_EPSILON).ok()?);
    let s: Vec<f64> = (0..m).map(|k| scale[k] / (var[k] + eps).sqrt()).collect();
    let per = w.numel() / m.max(1);
    let mut wv = w.to_f64_vec().ok()?;
    for (k, row) in wv.chunks_mut(per.max(1)).enumerate() {
        row.iter_mut().for_each(|v| *v *= s[k]);
    }
    let bv: Vec<f64> = (0..m).map(|k| (bias[k] - mean[k]) * s[k] + beta[k]).collect();
    let round = |shape: Vec<usize>, v: Vec<f64>| -> Option<Tensor> {
        let t = Tensor::from_vec(shape, v).ok()?;
        crate::ops::fold::cast(&t, w.dtype())?.ok()?.pop()
    };
    Some((conv, round(w.shape().to_vec(), wv)?, round(vec![m], bv)?))
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

    /// x=0, W=1, B=2, scale=3, beta=4, mean=5, var=6; conv out 7, bn out 8.
    fn chain(conv_bias: bool, extra_reader: bool) -> Graph {
        let conv_ins: &[u32] = if conv_bias { &[0, 1, 2] } else { &[0, 1] };
        let mut nodes =
            vec![node("Conv", conv_ins, 7), node("BatchNormalization", &[7, 3, 4, 5, 6], 8)];
        if extra_reader {
            nodes.push(node("Relu", &[7], 9));
        }
        let v = |x: Vec<f32>| Tensor::from_vec(vec![x.len()], x).unwrap();
        let consts = vec![
            // Two output channels, one input channel, kernel 2.
            (1, Tensor::from_vec(vec![2, 1, 2], vec![1f32, 2., 3., 4.]).unwrap()),
            (2, v(vec![0.5, -1.0])),
            (3, v(vec![2.0, 1.0])),
            (4, v(vec![0.25, 0.0])),
            (5, v(vec![1.0, 3.0])),
            (6, v(vec![4.0, 0.0])),
        ];
        graph(10, nodes, &[0], &[8], consts)
    }

    #[test]
    fn a_batch_normalization_after_a_conv_folds_into_its_weights_and_bias() {
        let g = fuse(&chain(true, false)).expect("folded");
        assert_eq!(g.nodes.len(), 1);
        let n = &g.nodes[0];
        assert_eq!(n.op_type, "Conv");
        assert_eq!(n.outputs, vec![Some(ValueId(8))]);
        let (w, b) = (&g.initializers[&n.input(1).unwrap()], &g.initializers[&n.input(2).unwrap()]);
        // s = scale / sqrt(var + 1e-5): channel 0 ≈ 1, channel 1 ≈ 1/sqrt(1e-5).
        let s = [2.0 / (4.0f64 + 1e-5).sqrt(), 1.0 / 1e-5f64.sqrt()];
        let want_w = [1.0 * s[0], 2.0 * s[0], 3.0 * s[1], 4.0 * s[1]];
        let want_b = [(0.5 - 1.0) * s[0] + 0.25, (-1.0 - 3.0) * s[1]];
        for (got, want) in w.to_f64_vec().unwrap().iter().zip(want_w) {
            assert!((got - want).abs() <= want.abs() * 1e-6, "{got} vs {want}");
        }
        for (got, want) in b.to_f64_vec().unwrap().iter().zip(want_b) {
            assert!((got - want).abs() <= want.abs() * 1e-6, "{got} vs {want}");
        }
    }

    #[test]
    fn a_conv_without_bias_gets_one_from_the_normalization() {
        let g = fuse(&chain(false, false)).expect("folded");
        assert_eq!(g.nodes[0].inputs.len(), 3);
    }

    #[test]
    fn a_conv_whose_output_is_read_elsewhere_is_left_alone() {
        assert!(fuse(&chain(true, true)).is_none());
    }
}
