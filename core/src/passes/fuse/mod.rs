//! Fusion: op chains exporters write out by hand that one op computes. Each
//! fused chain is one kernel launch instead of several and one pass over its
//! tensors instead of several. ONNX Runtime fuses the same chains.
//!
//! - `conv_bn`: a BatchNormalization after a Conv folds into the Conv's
//!   weights and bias.
//! - `conv_act`: a Conv and the activation after it become one
//!   `com.microsoft` `FusedConv`.
//! - `gelu`: the erf form of Gelu becomes one `Gelu` (opset 20), and a
//!   Gelu of a bias add one `com.microsoft` `BiasGelu`.
//! - `attention`: `softmax(Q·Kᵀ·scale + mask)·V` over 4-D heads becomes one
//!   `Attention` (opset 23), so the scores need not reach memory.
//! - `skip_norm`: `LayerNormalization(x·W + bias + residual)` becomes one
//!   `com.microsoft` `SkipLayerNormalization`.
//! - `matmul_bias`: the bias Adds left after those, `x·W + bias` with
//!   constant weights, become one `Gemm` between views.
//! - `gated`: a decoder MLP's two MatMulNBits and `silu(g) ⊙ u` become one
//!   `onyx` `GatedMatMulNBits`.
//!
//! A pass runs only where the primary provider asks for its fused form
//! ([`Fusions`]). Each pass proposes replacements, chain by chain, where the
//! chain's intermediates have no other reader; then every replacement is
//! inferred on the chain's input facts, and kept only if it infers and
//! gives every value the rest of the graph reads the dtype and shape the
//! chain gave it. A chain that fails (a skip of another shape, a dtype the
//! fused op does not take) stays as written; the others are fused.

mod attention;
mod conv_act;
mod conv_bn;
mod gated;
mod gelu;
mod key_mask;
mod matmul_bias;
mod skip_norm;

mod chain;
mod rewrite;

use crate::ep::Fusions;
use crate::graph::Graph;
use crate::ops::OpRegistry;

use super::infer::Inferred;

/// A fusion pass: the replacements it proposes for a graph.
type Pass = fn(&Graph) -> rewrite::Rewrite;

/// Fuses, in `graph`, every chain the provider's `fusions` ask for whose
/// replacement checks out against `inferred`'s facts (which are updated to
/// the fused graph). `None` when nothing was fused.
pub fn all(
    graph: &Graph,
    inferred: &mut Inferred,
    fusions: Fusions,
    registry: &OpRegistry,
) -> Option<Graph> {
    let passes: [(bool, Pass); 8] = [
        (fusions.conv_batch_norm, conv_bn::fuse),
        (fusions.conv_activation, conv_act::fuse),
        (fusions.gelu, gelu::fuse),
        (fusions.bias_gelu, gelu::fuse_bias),
        (fusions.attention, attention::fuse),
        (fusions.skip_layer_norm, skip_norm::fuse),
        (fusions.biased_gemm, matmul_bias::fuse),
        (fusions.gated_matmul_nbits, gated::fuse),
    ];
    let mut out: Option<Graph> = None;
    for (wanted, pass) in passes {
        if !wanted {
            continue;
        }
        let current = out.as_ref().unwrap_or(graph);
        if let Some(g) = pass(current).apply(current, inferred, registry) {
            out = Some(g);
        }
    }
    out
}

#[cfg(test)]
pub(super) mod test_graph {
    //! Small graphs for the fusion tests.
    use crate::graph::{Attributes, DEFAULT_DOMAIN, Graph, Node, ValueId, ValueInfo};
    use crate::tensor::Tensor;

    /// A default-domain node of opset 17 with one output.
    pub fn node(op: &str, ins: &[u32], out: u32) -> Node {
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

    /// A graph of `values` values over `nodes`.
    pub fn graph(
        values: u32,
        nodes: Vec<Node>,
        inputs: &[u32],
        outputs: &[u32],
        initializers: Vec<(u32, Tensor)>,
    ) -> Graph {
        Graph {
            name: "g".into(),
            values: (0..values)
                .map(|i| ValueInfo { name: format!("v{i}"), declared: None })
                .collect(),
            nodes,
            inputs: inputs.iter().map(|&i| ValueId(i)).collect(),
            outputs: outputs.iter().map(|&i| ValueId(i)).collect(),
            initializers: initializers.into_iter().map(|(i, t)| (ValueId(i), t)).collect(),
            captures: vec![],
            folded_constants: 0,
        }
    }
}
