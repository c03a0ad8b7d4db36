//! The plain data of the graph IR: ids, declared types, value infos, and
//! the domain names.

use std::fmt;

use crate::dtype::DType;
use crate::shape::Shape;

/// The default ONNX domain, as Onyx spells it (the empty string in files).
pub const DEFAULT_DOMAIN: &str = "ai.onnx";

/// onnxruntime's contrib-op domain.
pub const MICROSOFT_DOMAIN: &str = "com.microsoft";

/// Onyx's own domain: nodes its passes write (device copies, fused ops),
/// never read from a file.
pub const ONYX_DOMAIN: &str = "onyx";

/// Index of a value in [`Graph::values`](super::Graph::values).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub u32);

impl ValueId {
    /// The index into [`Graph::values`](super::Graph::values).
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Index of a node in [`Graph::nodes`](super::Graph::nodes).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u32);

impl NodeId {
    /// The index into [`Graph::nodes`](super::Graph::nodes).
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
