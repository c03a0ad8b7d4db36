//! Fusion before placement: op chains exporters write out by hand that one
//! op computes. Each fused chain is one kernel launch instead of several and
//! one pass over its tensors instead of several. ONNX Runtime fuses the same
//! chains.
//!
//! - [`conv_bn`]: a BatchNormalization after a Conv folds into the Conv's
//!   weights and bias.
//! - [`conv_act`]: a Conv and the activation after it become one
//!   `com.microsoft` `FusedConv`.
//! - [`gelu`]: the erf form of Gelu becomes one `Gelu` (opset 20), and a
//!   Gelu of a bias add one `com.microsoft` `BiasGelu` where preferred (CUDA).
//! - [`attention`]: `softmax(Q·Kᵀ·scale + mask)·V` over 4-D heads becomes one
//!   `Attention` (opset 23), so the scores need not reach memory.
//! - [`skip_norm`]: `LayerNormalization(x·W + bias + residual)` becomes one
//!   `com.microsoft` `SkipLayerNormalization`.
//! - [`matmul_bias`]: the bias Adds left after those, `x·W + bias` with
//!   constant weights, become one `Gemm` between views (CUDA, which adds the
//!   bias in cuBLASLt's epilogue).
//!
//! A chain is fused only where its intermediates have no other reader and
//! the first provider has a kernel for the fused op that it prefers to the
//! chain ([`ExecutionProvider::prefers_fused`]: every provider takes the
//! folded Conv and Gelu, and FusedConv where it has the op (the CPU); CUDA also takes Attention, SkipLayerNormalization and the biased Gemm,
//! which the CPU and wgpu leave as chains, their kernels for those two being
//! references, slower than the chains' tuned kernels). Fusion never changes what a model
//! computes beyond rounding: where it cannot prove a chain's shape or dtype
//! requirements from the graph alone, the compiler checks them when it
//! infers the fused graph and compiles the graph unfused if they fail.

mod attention;
mod conv_act;
mod conv_bn;
mod gelu;
mod key_mask;
mod matmul_bias;
mod skip_norm;

use std::collections::{HashMap, HashSet};

use crate::dtype::DType;
use crate::ep::ExecutionProvider;
use crate::graph::{Attribute, Attributes, DEFAULT_DOMAIN, Graph, Node, ValueId, ValueInfo};
use crate::tensor::Tensor;

/// The graph with every chain the first provider can run fused, or `None`
/// when nothing was fused.
pub fn all(graph: &Graph, primary: &dyn ExecutionProvider) -> Option<Graph> {
    let mut out: Option<Graph> = None;
    type Pass = fn(&Graph) -> Option<Graph>;
    let passes: [(&str, &str, Pass); 7] = [
        (DEFAULT_DOMAIN, "Conv", conv_bn::fuse),
        (crate::graph::MICROSOFT_DOMAIN, "FusedConv", conv_act::fuse),
        (DEFAULT_DOMAIN, "Gelu", gelu::fuse),
        (crate::graph::MICROSOFT_DOMAIN, "BiasGelu", gelu::fuse_bias),
        (DEFAULT_DOMAIN, "Attention", attention::fuse),
        (crate::graph::MICROSOFT_DOMAIN, "SkipLayerNormalization", skip_norm::fuse),
        (DEFAULT_DOMAIN, "Gemm", matmul_bias::fuse),
    ];
    for (domain, op, pass) in passes {
        if primary.supports_op(domain, op) && primary.prefers_fused(domain, op) {
            if let Some(g) = pass(out.as_ref().unwrap_or(graph)) {
                out = Some(g);
            }
        }
    }
    out
}

/// A default-domain node `op` of `opset` reading `inputs` into `out`.
pub(super) fn op_node(
    name: &str,
    op: &str,
    opset: i64,
    inputs: &[ValueId],
    out: ValueId,
    attrs: Vec<(&str, Attribute)>,
) -> Node {
    Node {
        name: name.into(),
        op_type: op.into(),
        domain: DEFAULT_DOMAIN.into(),
        opset,
        inputs: inputs.iter().map(|&v| Some(v)).collect(),
        outputs: vec![Some(out)],
        implicit_inputs: vec![],
        attrs: Attributes(attrs.into_iter().map(|(n, a)| (n.to_string(), a)).collect()),
    }
}

/// Who reads and who writes each value of a graph.
struct Links<'g> {
    graph: &'g Graph,
    /// Readers per value (graph outputs count as one).
    readers: HashMap<ValueId, usize>,
    /// The node writing each value.
    writer: HashMap<ValueId, usize>,
    /// The first node reading each value.
    reader: HashMap<ValueId, usize>,
}

impl<'g> Links<'g> {
    fn new(graph: &'g Graph) -> Self {
        let mut readers: HashMap<ValueId, usize> = HashMap::new();
        let (mut writer, mut reader) = (HashMap::new(), HashMap::new());
        for (i, n) in graph.nodes.iter().enumerate() {
            for v in n.all_inputs() {
                *readers.entry(v).or_default() += 1;
                reader.entry(v).or_insert(i);
            }
            for v in n.outputs.iter().flatten() {
                writer.insert(*v, i);
            }
        }
        for &o in &graph.outputs {
            *readers.entry(o).or_default() += 1;
        }
        Links { graph, readers, writer, reader }
    }

    fn node(&self, i: usize) -> &'g Node {
        &self.graph.nodes[i]
    }

    /// Whether exactly one node reads `v` (and it is not a graph output).
    fn single(&self, v: ValueId) -> bool {
        self.readers.get(&v) == Some(&1)
    }

    /// The node of the default domain with op `op` that writes `v`.
    fn writer(&self, v: ValueId, op: &str) -> Option<usize> {
        let i = *self.writer.get(&v)?;
        let n = self.node(i);
        (n.op_type == op && n.domain == DEFAULT_DOMAIN).then_some(i)
    }

    /// The one node reading `v`, when it is `op` of the default domain.
    fn next(&self, v: ValueId, op: &str) -> Option<usize> {
        if !self.single(v) {
            return None;
        }
        let i = *self.reader.get(&v)?;
        let n = self.node(i);
        (n.op_type == op && n.domain == DEFAULT_DOMAIN).then_some(i)
    }

    /// The first output of node `i`.
    fn out0(&self, i: usize) -> Option<ValueId> {
        self.node(i).outputs.first().copied().flatten()
    }

    /// The constant `v` holds: an initializer, or one reached through
    /// `Identity` nodes (exporters share equal weights that way).
    fn constant(&self, v: ValueId) -> Option<&'g Tensor> {
        let mut v = v;
        for _ in 0..8 {
            if let Some(t) = self.graph.initializers.get(&v) {
                return Some(t);
            }
            v = self.node(self.writer(v, "Identity")?).input(0)?;
        }
        None
    }

    /// The value of `v` when it is a one-element f32, f16 or bf16 constant.
    fn scalar(&self, v: ValueId) -> Option<f64> {
        let t = self.constant(v)?;
        let float = matches!(t.dtype(), DType::F32 | DType::F16 | DType::BF16);
        (float && t.numel() == 1).then(|| t.to_f64_vec().ok().map(|x| x[0])).flatten()
    }

    /// The constant `v` when it is a rank-1 tensor.
    fn vector(&self, v: ValueId) -> Option<&'g Tensor> {
        self.constant(v).filter(|t| t.shape().len() == 1)
    }
}

/// Fused replacements collected by a pass and applied at once: the nodes to
/// drop, and the nodes each replacement puts where its last node was.
#[derive(Default)]
struct Rewrite {
    drop: HashSet<usize>,
    put: HashMap<usize, Vec<Node>>,
    values: Vec<ValueInfo>,
    constants: Vec<(ValueId, Tensor)>,
}

impl Rewrite {
    /// Replaces the nodes `chain` (the last one's place takes `nodes`).
    fn replace(&mut self, chain: &[usize], nodes: Vec<Node>) {
        self.drop.extend(chain.iter().copied());
        if let Some(&last) = chain.last() {
            self.put.insert(last, nodes);
        }
    }

    /// Whether node `i` is already part of a fused chain.
    fn taken(&self, i: usize) -> bool {
        self.drop.contains(&i)
    }

    /// A new value named `name`, numbered after the graph's and earlier new ones.
    fn value(&mut self, graph: &Graph, name: String) -> ValueId {
        let id = ValueId((graph.values.len() + self.values.len()) as u32);
        self.values.push(ValueInfo { name, declared: None });
        id
    }

    /// A new constant value holding `t`.
    fn constant(&mut self, graph: &Graph, name: String, t: Tensor) -> ValueId {
        let id = self.value(graph, name);
        self.constants.push((id, t));
        id
    }

    /// The rewritten graph, or `None` when nothing was replaced.
    fn apply(mut self, graph: &Graph) -> Option<Graph> {
        if self.put.is_empty() {
            return None;
        }
        let mut nodes = Vec::with_capacity(graph.nodes.len());
        for (i, n) in graph.nodes.iter().enumerate() {
            match self.put.remove(&i) {
                Some(fused) => nodes.extend(fused),
                None if self.drop.contains(&i) => {}
                None => nodes.push(n.clone()),
            }
        }
        let mut values = graph.values.clone();
        values.append(&mut self.values);
        let mut initializers = graph.initializers.clone();
        initializers.extend(self.constants);
        Some(Graph { nodes, values, initializers, ..graph.clone() })
    }
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
