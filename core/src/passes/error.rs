//! The error of the compile passes: which node, and what inference found.

use crate::error::{LoadError, NodeDesc, OpError};

/// A pass could not infer or rewrite a graph.
#[derive(Debug, thiserror::Error)]
pub enum PassError {
    /// Building or inferring a node failed.
    #[error("{node}")]
    Op {
        /// The node.
        node: Box<NodeDesc>,
        /// The op-level failure.
        #[source]
        source: OpError,
    },
    /// A subgraph (If branch, Loop body) failed.
    #[error("{node}: subgraph '{branch}' failed")]
    Subgraph {
        /// The node owning the subgraph.
        node: Box<NodeDesc>,
        /// The attribute name (`then_branch`, `body`, …).
        branch: String,
        /// The failure inside.
        #[source]
        source: Box<PassError>,
    },
    /// A graph input has no type to infer from.
    #[error("input '{name}': {reason}")]
    Input {
        /// Input name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// The graph's structure is broken (a cycle).
    #[error(transparent)]
    Load(#[from] LoadError),
    /// Invariant violated inside a pass; reported instead of panicking.
    #[error("internal error: {0}")]
    Internal(String),
}
