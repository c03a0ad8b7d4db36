//! The graph IR itself: nodes with their attributes, graphs (subgraphs are
//! attributes, so the three types are defined together), and models.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::types::{DEFAULT_DOMAIN, NodeId, TypeInfo, ValueId, ValueInfo};
use crate::error::NodeDesc;
use crate::tensor::Tensor;

/// One attribute value.
#[derive(Clone, Debug)]
#[allow(missing_docs)] // the variants mirror AttributeProto's types one to one.
pub enum Attribute {
    Float(f32),
    Int(i64),
    String(String),
    Tensor(Tensor),
    Graph(Arc<Graph>),
    Type(TypeInfo),
    Floats(Vec<f32>),
    Ints(Vec<i64>),
    Strings(Vec<String>),
    Tensors(Vec<Tensor>),
    Graphs(Vec<Arc<Graph>>),
    Types(Vec<TypeInfo>),
}

/// A node's attributes by name.
#[derive(Clone, Debug, Default)]
pub struct Attributes(pub Vec<(String, Attribute)>);

/// One operator application.
#[derive(Clone, Debug)]
pub struct Node {
    /// Node name; generated as `{op_type}_{index}` when the model has none.
    pub name: String,
    /// Operator type (`Conv`).
    pub op_type: String,
    /// Domain, with the default domain spelled [`DEFAULT_DOMAIN`].
    pub domain: String,
    /// The opset version the model imports for the domain.
    pub opset: i64,
    /// Inputs in order; `None` for an omitted optional input.
    pub inputs: Vec<Option<ValueId>>,
    /// Outputs in order; `None` for an omitted optional output.
    pub outputs: Vec<Option<ValueId>>,
    /// Outer values read by this node's subgraphs (If/Loop/Scan bodies).
    pub implicit_inputs: Vec<ValueId>,
    /// Attributes, including subgraphs.
    pub attrs: Attributes,
}

impl Node {
    /// The description used in every error about this node.
    pub fn desc(&self) -> Box<NodeDesc> {
        Box::new(NodeDesc {
            name: self.name.clone(),
            op_type: self.op_type.clone(),
            domain: self.domain.clone(),
            opset: self.opset,
        })
    }

    /// The input at `i`, if present.
    pub fn input(&self, i: usize) -> Option<ValueId> {
        self.inputs.get(i).copied().flatten()
    }

    /// All values this node reads: explicit inputs, then implicit (subgraph) inputs.
    pub fn all_inputs(&self) -> impl Iterator<Item = ValueId> + '_ {
        self.inputs.iter().flatten().copied().chain(self.implicit_inputs.iter().copied())
    }
}

/// A graph: the main graph of a model, or a subgraph (If branch, Loop body).
#[derive(Clone, Debug, Default)]
pub struct Graph {
    /// Name from the file.
    pub name: String,
    /// Every value, indexed by [`ValueId`].
    pub values: Vec<ValueInfo>,
    /// Nodes in file order (not necessarily topological; the planner sorts).
    pub nodes: Vec<Node>,
    /// Graph inputs that callers feed (initializers excluded).
    pub inputs: Vec<ValueId>,
    /// Graph outputs.
    pub outputs: Vec<ValueId>,
    /// Constant values: initializers and folded `Constant` nodes.
    pub initializers: BTreeMap<ValueId, Tensor>,
    /// Values this graph reads from enclosing graphs, with their outer names.
    pub captures: Vec<(ValueId, String)>,
    /// How many `Constant` nodes were folded into [`Graph::initializers`].
    pub folded_constants: usize,
}

impl Graph {
    /// The value info of `id`.
    pub fn value(&self, id: ValueId) -> &ValueInfo {
        &self.values[id.index()]
    }

    /// Looks a value up by name.
    pub fn find(&self, name: &str) -> Option<ValueId> {
        self.values.iter().position(|v| v.name == name).map(|i| ValueId(i as u32))
    }

    /// For each value, the node producing it (`None` for inputs, initializers and captures).
    pub fn producers(&self) -> Vec<Option<NodeId>> {
        let mut p = vec![None; self.values.len()];
        for (i, n) in self.nodes.iter().enumerate() {
            for o in n.outputs.iter().flatten() {
                p[o.index()] = Some(NodeId(i as u32));
            }
        }
        p
    }

    /// Counts node op types (domain-qualified for non-default domains), including
    /// folded `Constant` nodes and nodes inside subgraphs.
    pub fn op_histogram(&self) -> BTreeMap<String, usize> {
        let mut h = BTreeMap::new();
        self.add_ops(&mut h);
        h
    }

    fn add_ops(&self, h: &mut BTreeMap<String, usize>) {
        if self.folded_constants > 0 {
            *h.entry("Constant".to_string()).or_default() += self.folded_constants;
        }
        for n in &self.nodes {
            let key = if n.domain == DEFAULT_DOMAIN {
                n.op_type.clone()
            } else {
                format!("{}::{}", n.domain, n.op_type)
            };
            *h.entry(key).or_default() += 1;
            for (_, a) in n.attrs.iter() {
                for g in a.graphs() {
                    g.add_ops(h);
                }
            }
        }
    }

    /// Total bytes of constant data (initializers and folded constants), subgraphs included.
    pub fn initializer_bytes(&self) -> u64 {
        let own: u64 = self.initializers.values().map(|t| t.byte_len() as u64).sum();
        let nested: u64 = self
            .nodes
            .iter()
            .flat_map(|n| n.attrs.iter())
            .flat_map(|(_, a)| a.graphs())
            .map(|g| g.initializer_bytes())
            .sum();
        own + nested
    }

    /// Number of constant tensors (initializers and folded constants), subgraphs included.
    pub fn initializer_count(&self) -> usize {
        self.initializers.len()
            + self
                .nodes
                .iter()
                .flat_map(|n| n.attrs.iter())
                .flat_map(|(_, a)| a.graphs())
                .map(|g| g.initializer_count())
                .sum::<usize>()
    }

    /// A name → value map.
    pub fn name_map(&self) -> HashMap<&str, ValueId> {
        self.values.iter().enumerate().map(|(i, v)| (v.name.as_str(), ValueId(i as u32))).collect()
    }
}

/// A loaded model: the main graph plus model-level metadata.
#[derive(Clone, Debug)]
pub struct Model {
    /// ONNX IR version.
    pub ir_version: i64,
    /// Opset version per domain (default domain as [`DEFAULT_DOMAIN`]).
    pub opsets: BTreeMap<String, i64>,
    /// Producer name and version, e.g. `pytorch 2.5`.
    pub producer: String,
    /// The main graph.
    pub graph: Graph,
}
