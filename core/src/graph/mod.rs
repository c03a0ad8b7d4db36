//! The graph IR: values and nodes in single-assignment form, with subgraphs.

mod attrs;
mod ir;
mod order;
mod types;

pub use ir::{Attribute, Attributes, Graph, Model, Node};
pub use order::topological_order;
pub use types::{
    DEFAULT_DOMAIN, MICROSOFT_DOMAIN, NodeId, ONYX_DOMAIN, TypeInfo, ValueId, ValueInfo,
};
