//! The graph IR: values and nodes in single-assignment form, with subgraphs.

mod attrs;

use std::collections::{BTreeMap, HashMap};
use std::fmt;

pub use attrs::{Attribute, Attributes};

use crate::dtype::DType;
use crate::error::NodeDesc;
use crate::shape::Shape;
use crate::tensor::Tensor;

/// The default ONNX domain, as Onyx spells it (the empty string in files).
pub const DEFAULT_DOMAIN: &str = "ai.onnx";

/// onnxruntime's contrib-op domain.
pub const MICROSOFT_DOMAIN: &str = "com.microsoft";

/// Index of a value in [`Graph::values`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub u32);

impl ValueId {
    /// The index into [`Graph::values`].
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Index of a node in [`Graph::nodes`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u32);

impl NodeId {
    /// The index into [`Graph::nodes`].
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A value's type as the model declares it.
#[derive(Clone, Debug, PartialEq)]
pub enum TypeInfo {
    /// A dense tensor; `shape` is `None` when the rank is unknown.
    Tensor {
        /// Element type.
        dtype: DType,
        /// Declared shape, possibly symbolic. A hint, not a promise.
        shape: Option<Shape>,
    },
    /// A sparse tensor.
    SparseTensor {
        /// Element type.
        dtype: DType,
        /// Declared shape.
        shape: Option<Shape>,
    },
    /// A sequence of values of one type.
    Sequence(Option<Box<TypeInfo>>),
    /// A value that may be absent.
    Optional(Option<Box<TypeInfo>>),
    /// A map from a scalar key type to values.
    Map {
        /// Key dtype.
        key: DType,
        /// Value type.
        value: Option<Box<TypeInfo>>,
    },
}

impl TypeInfo {
    /// The element dtype of a tensor type.
    pub fn tensor_dtype(&self) -> Option<DType> {
        match self {
            TypeInfo::Tensor { dtype, .. } => Some(*dtype),
            _ => None,
        }
    }

    /// The declared shape of a tensor type.
    pub fn tensor_shape(&self) -> Option<&Shape> {
        match self {
            TypeInfo::Tensor { shape, .. } => shape.as_ref(),
            _ => None,
        }
    }
}

impl fmt::Display for TypeInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = |f: &mut fmt::Formatter<'_>, t: &Option<Box<TypeInfo>>| match t {
            Some(t) => write!(f, "{t}"),
            None => f.write_str("?"),
        };
        match self {
            TypeInfo::Tensor { dtype, shape: Some(s) } => write!(f, "{dtype}{s}"),
            TypeInfo::Tensor { dtype, shape: None } => write!(f, "{dtype}[…]"),
            TypeInfo::SparseTensor { dtype, .. } => write!(f, "sparse {dtype}"),
            TypeInfo::Sequence(t) => {
                f.write_str("seq(")?;
                inner(f, t)?;
                f.write_str(")")
            }
            TypeInfo::Optional(t) => {
                f.write_str("optional(")?;
                inner(f, t)?;
                f.write_str(")")
            }
            TypeInfo::Map { key, value } => {
                write!(f, "map({key}, ")?;
                inner(f, value)?;
                f.write_str(")")
            }
        }
    }
}

/// A named value of a graph.
#[derive(Clone, Debug)]
pub struct ValueInfo {
    /// The name in the model file.
    pub name: String,
    /// The declared type, from inputs, outputs or `value_info`.
    pub declared: Option<TypeInfo>,
}

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
