//! The errors of core's lowest layers: tensors, loading, ops. Each layer
//! above wraps them with its own context (node, op, opset, backend: see
//! [`crate::Error`]), so `{:#}` prints the whole chain.

use std::fmt;

use crate::dtype::DType;

/// A host tensor could not be built or read as asked.
#[derive(Debug, thiserror::Error)]
pub enum TensorError {
    /// The data length does not match dtype × shape.
    #[error("{dtype} tensor of shape {shape:?} needs {expected} bytes, got {actual}")]
    SizeMismatch {
        /// Element type.
        dtype: DType,
        /// Requested shape.
        shape: Vec<usize>,
        /// Required length (bytes, or elements for strings).
        expected: usize,
        /// Provided length.
        actual: usize,
    },
    /// The tensor holds another dtype.
    #[error("expected a {expected} tensor, found {actual}")]
    WrongDType {
        /// Requested dtype.
        expected: DType,
        /// The tensor's dtype.
        actual: DType,
    },
    /// String tensors have no byte representation.
    #[error("{dtype} tensors have no byte layout")]
    NotBytes {
        /// The dtype.
        dtype: DType,
    },
    /// An integer view was requested of a non-integer tensor.
    #[error("expected an integer tensor, found {dtype}")]
    NotInteger {
        /// The dtype.
        dtype: DType,
    },
}

/// A model file could not be turned into a graph.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Reading the file failed.
    #[error("cannot read {path}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The file holds no bytes at all.
    #[error("the file is empty (0 bytes), not an ONNX model")]
    Empty,
    /// The bytes decode as protobuf but carry neither an IR version nor a
    /// graph: some other file.
    #[error("not an ONNX model: no IR version and no graph")]
    NotAModel,
    /// The bytes are not a valid ModelProto (truncated or not protobuf at all).
    #[error("not a valid ONNX protobuf (truncated or corrupt file)")]
    Decode(#[from] prost::DecodeError),
    /// The model's IR version is outside what Onyx reads.
    #[error("IR version {0} is not supported (Onyx reads IR versions 3 to 14)")]
    IrVersion(i64),
    /// The model has no graph.
    #[error("the model has no graph")]
    NoGraph,
    /// A tensor (initializer, attribute or constant) is malformed.
    #[error("tensor '{name}'")]
    Tensor {
        /// Tensor name.
        name: String,
        /// What is wrong.
        #[source]
        source: TensorLoadError,
    },
    /// A node's input refers to a name that nothing defines.
    #[error(
        "{node}: input {index} names '{name}', which is not a graph input, initializer or earlier node output"
    )]
    UndefinedInput {
        /// The node.
        node: Box<NodeDesc>,
        /// Input position.
        index: usize,
        /// The undefined name.
        name: String,
    },
    /// A graph output names nothing.
    #[error("graph output '{0}' is not produced by any node, input or initializer")]
    UndefinedOutput(String),
    /// Two producers claim the same name.
    #[error("value '{0}' is defined twice (SSA violation)")]
    DuplicateValue(String),
    /// The nodes form a cycle.
    #[error("the graph has a cycle through node {0}")]
    Cycle(Box<NodeDesc>),
    /// A node attribute is malformed.
    #[error("{node}: attribute '{attribute}'")]
    Attribute {
        /// The node.
        node: Box<NodeDesc>,
        /// The attribute.
        attribute: String,
        /// What is wrong.
        #[source]
        source: Box<LoadError>,
    },
    /// Loading a subgraph attribute failed.
    #[error("{node}: subgraph '{attribute}'")]
    Subgraph {
        /// The node owning the subgraph.
        node: Box<NodeDesc>,
        /// The attribute holding it.
        attribute: String,
        /// The failure inside.
        #[source]
        source: Box<LoadError>,
    },
    /// The model imports no version of a domain that a node uses.
    #[error("node '{node}' uses domain '{domain}', which the model does not import")]
    MissingOpset {
        /// The node name.
        node: String,
        /// The domain.
        domain: String,
    },
    /// Something else is structurally wrong.
    #[error("{0}")]
    Invalid(String),
}

/// A tensor's payload is malformed or cannot be found.
#[derive(Debug, thiserror::Error)]
pub enum TensorLoadError {
    /// Unknown or undefined `data_type`.
    #[error("unknown data type code {0}")]
    DType(i32),
    /// A negative or overflowing dimension.
    #[error("invalid dims {0:?}")]
    Dims(Vec<i64>),
    /// The payload length does not match the shape.
    #[error("holds {actual} elements/bytes, its shape needs {expected}")]
    Length {
        /// Needed.
        expected: usize,
        /// Present.
        actual: usize,
    },
    /// External data path is absolute or leaves the model's folder.
    #[error("external data location '{location}' escapes the model folder")]
    PathEscape {
        /// The offending location.
        location: String,
    },
    /// External data lies beyond the end of its file.
    #[error(
        "external data [{offset}, {offset}+{length}) lies beyond the end of '{location}' ({file_len} bytes)"
    )]
    OutOfRange {
        /// File.
        location: String,
        /// Start.
        offset: u64,
        /// Length.
        length: u64,
        /// File size.
        file_len: u64,
    },
    /// External data could not be read.
    #[error("cannot read external data '{location}'")]
    ExternalIo {
        /// File.
        location: String,
        /// OS error.
        #[source]
        source: std::io::Error,
    },
    /// External data was referenced but no resolver knows it.
    #[error("external data '{location}' was not provided")]
    ExternalMissing {
        /// File.
        location: String,
    },
    /// A malformed `external_data` entry.
    #[error("bad external_data entry: {0}")]
    ExternalEntry(String),
    /// A sparse tensor's indices are malformed.
    #[error("bad sparse tensor: {0}")]
    Sparse(String),
    /// Constructing the host tensor failed.
    #[error(transparent)]
    Tensor(#[from] TensorError),
}

/// Names a node in messages: `node 'conv1' (ai.onnx::Conv, opset 13)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeDesc {
    /// Node name (generated from op type and index when the model has none).
    pub name: String,
    /// Op type.
    pub op_type: String,
    /// Domain, `ai.onnx` for the default domain.
    pub domain: String,
    /// The opset version in force for the domain.
    pub opset: i64,
}

impl fmt::Display for NodeDesc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node '{}' ({}::{}, opset {})", self.name, self.domain, self.op_type, self.opset)
    }
}

/// An op could not be built, or its inputs violate the op's contract.
#[derive(Debug, thiserror::Error)]
pub enum OpError {
    /// No builder is registered for this op.
    #[error("operator {domain}::{op_type} is not supported")]
    UnknownOp {
        /// Domain.
        domain: String,
        /// Op type.
        op_type: String,
    },
    /// The registered builder does not cover this opset version.
    #[error("opset {opset} of {op_type} is not supported")]
    UnsupportedOpset {
        /// Op type.
        op_type: String,
        /// The version.
        opset: i64,
    },
    /// A required attribute is missing.
    #[error("required attribute '{0}' is missing")]
    MissingAttribute(String),
    /// An attribute has the wrong type or an invalid value.
    #[error("attribute '{name}': {reason}")]
    BadAttribute {
        /// Attribute name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// Input count outside what the op accepts.
    #[error("expects {expected} inputs, got {actual}")]
    InputCount {
        /// A description such as "2" or "1 to 3".
        expected: String,
        /// Given.
        actual: usize,
    },
    /// A required input is absent.
    #[error("input {0} is required")]
    MissingInput(usize),
    /// An input has a dtype the op does not accept.
    #[error("input {index} has dtype {dtype}, expected {expected}")]
    InputDType {
        /// Input position.
        index: usize,
        /// Given dtype.
        dtype: DType,
        /// Accepted dtypes, described.
        expected: String,
    },
    /// Shapes are incompatible.
    #[error("{0}")]
    Shape(String),
    /// A value the op needs to compute its output shape is not available.
    #[error("input {0} must be a known value to infer the output shape")]
    NeedsValue(usize),
    /// Valid ONNX that Onyx does not implement yet.
    #[error("not supported: {0}")]
    Unsupported(String),
    /// Anything else.
    #[error("{0}")]
    Invalid(String),
}

impl From<TensorError> for OpError {
    fn from(e: TensorError) -> Self {
        OpError::Invalid(e.to_string())
    }
}
