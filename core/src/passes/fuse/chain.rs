//! Reading chains out of a graph: who reads and writes each value, the
//! constants values hold, and the nodes replacements are made of.

use std::collections::HashMap;

use crate::dtype::DType;
use crate::graph::{Attribute, Attributes, DEFAULT_DOMAIN, Graph, Node, ValueId};
use crate::tensor::Tensor;

/// A default-domain node `op` of `opset` reading `inputs` into `out`.
pub(crate) fn op_node(
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
pub(super) struct Links<'g> {
    pub(super) graph: &'g Graph,
    /// Readers per value (graph outputs count as one).
    pub(super) readers: HashMap<ValueId, usize>,
    /// The node writing each value.
    pub(super) writer: HashMap<ValueId, usize>,
    /// The first node reading each value.
    pub(super) reader: HashMap<ValueId, usize>,
}

impl<'g> Links<'g> {
    pub(super) fn new(graph: &'g Graph) -> Self {
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

    pub(super) fn node(&self, i: usize) -> &'g Node {
        &self.graph.nodes[i]
    }

    /// Whether exactly one node reads `v` (and it is not a graph output).
    pub(super) fn single(&self, v: ValueId) -> bool {
        self.readers.get(&v) == Some(&1)
    }

    /// The node of the default domain with op `op` that writes `v`.
    pub(super) fn writer(&self, v: ValueId, op: &str) -> Option<usize> {
        let i = *self.writer.get(&v)?;
        let n = self.node(i);
        (n.op_type == op && n.domain == DEFAULT_DOMAIN).then_some(i)
    }

    /// The one node reading `v`, when it is `op` of the default domain.
    pub(super) fn next(&self, v: ValueId, op: &str) -> Option<usize> {
        if !self.single(v) {
            return None;
        }
        let i = *self.reader.get(&v)?;
        let n = self.node(i);
        (n.op_type == op && n.domain == DEFAULT_DOMAIN).then_some(i)
    }

    /// The first output of node `i`.
    pub(super) fn out0(&self, i: usize) -> Option<ValueId> {
        self.node(i).outputs.first().copied().flatten()
    }

    /// The constant `v` holds: an initializer, or one reached through
    /// `Identity` nodes (exporters share equal weights that way).
    pub(super) fn constant(&self, v: ValueId) -> Option<&'g Tensor> {
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
    pub(super) fn scalar(&self, v: ValueId) -> Option<f64> {
        let t = self.constant(v)?;
        let float = matches!(t.dtype(), DType::F32 | DType::F16 | DType::BF16);
        (float && t.numel() == 1).then(|| t.to_f64_vec().ok().map(|x| x[0])).flatten()
    }

    /// The constant `v` when it is a rank-1 tensor.
    pub(super) fn vector(&self, v: ValueId) -> Option<&'g Tensor> {
        self.constant(v).filter(|t| t.shape().len() == 1)
    }
}
