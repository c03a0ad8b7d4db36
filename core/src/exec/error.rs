//! The error of building and running a graph: each variant names the node,
//! op, opset and backend, and wraps the failure from below, so `{:#}` prints
//! the whole chain.

use crate::ep::EpError;
use crate::error::{LoadError, NodeDesc, OpError};
use crate::passes::PassError;

/// An error while building a session or running a graph.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Loading the model failed.
    #[error("loading the model failed")]
    Load(#[from] LoadError),
    /// Building or inferring a node failed.
    #[error("{node}")]
    Op {
        /// The node.
        node: Box<NodeDesc>,
        /// The op-level failure.
        #[source]
        source: OpError,
    },
    /// A node has no kernel on any available backend.
    #[error("{node}: no kernel on backend {backend}")]
    NoKernel {
        /// The node.
        node: Box<NodeDesc>,
        /// The backend asked.
        backend: String,
        /// Why the backend declined.
        #[source]
        source: EpError,
    },
    /// A kernel failed while running.
    #[error("{node} failed on backend {backend}")]
    Kernel {
        /// The node.
        node: Box<NodeDesc>,
        /// The backend that ran it.
        backend: String,
        /// The backend's error.
        #[source]
        source: EpError,
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
        source: Box<Error>,
    },
    /// A provider operation outside any node failed (uploads, downloads, frees).
    #[error("backend {backend}: {action}")]
    Provider {
        /// The backend.
        backend: String,
        /// What was being done.
        action: String,
        /// The backend's error.
        #[source]
        source: EpError,
    },
    /// A graph input is missing, unknown or of the wrong type or shape.
    #[error("input '{name}': {reason}")]
    Input {
        /// Input name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// Invariant violated inside the executor; reported instead of panicking.
    #[error("internal error: {0}")]
    Internal(String),
}

/// Result alias for the core crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<PassError> for Error {
    fn from(e: PassError) -> Self {
        match e {
            PassError::Op { node, source } => Error::Op { node, source },
            PassError::Subgraph { node, branch, source } => {
                Error::Subgraph { node, branch, source: Box::new((*source).into()) }
            }
            PassError::Input { name, reason } => Error::Input { name, reason },
            PassError::Load(e) => Error::Load(e),
            PassError::Internal(m) => Error::Internal(m),
        }
    }
}
