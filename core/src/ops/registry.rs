//! The op registry: `(domain, op_type)` to the builder functions that parse
//! a node's attributes (with the spec's defaults) into a typed [`Op`]. Each
//! family module registers its own ops (`register_all`); `standard.rs` calls
//! them all.

use std::collections::HashMap;
use std::sync::Arc;

use super::op::Op;
use crate::error::OpError;
use crate::graph::{DEFAULT_DOMAIN, Node};

/// Builds an [`Op`] from a node.
pub type OpBuilder = Arc<dyn Fn(&Node) -> Result<Box<dyn Op>, OpError> + Send + Sync>;

/// Maps `(domain, op_type)` to builders.
#[derive(Clone, Default)]
pub struct OpRegistry {
    builders: HashMap<(String, String), OpBuilder>,
}

impl OpRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a builder for an op of the default domain.
    pub fn register(
        &mut self,
        op_type: &str,
        builder: impl Fn(&Node) -> Result<Box<dyn Op>, OpError> + Send + Sync + 'static,
    ) {
        self.register_in(DEFAULT_DOMAIN, op_type, builder);
    }

    /// Registers a builder for an op of any domain.
    pub fn register_in(
        &mut self,
        domain: &str,
        op_type: &str,
        builder: impl Fn(&Node) -> Result<Box<dyn Op>, OpError> + Send + Sync + 'static,
    ) {
        self.builders.insert((domain.into(), op_type.into()), Arc::new(builder));
    }

    /// Whether a builder exists.
    pub fn contains(&self, domain: &str, op_type: &str) -> bool {
        self.builders.contains_key(&(domain.to_string(), op_type.to_string()))
    }

    /// Builds the op for a node.
    ///
    /// # Errors
    /// [`OpError::UnknownOp`] when nothing is registered; the builder's error otherwise.
    pub fn build(&self, node: &Node) -> Result<Box<dyn Op>, OpError> {
        let builder =
            self.builders.get(&(node.domain.clone(), node.op_type.clone())).ok_or_else(|| {
                OpError::UnknownOp { domain: node.domain.clone(), op_type: node.op_type.clone() }
            })?;
        builder(node)
    }

    /// All registered `(domain, op_type)` pairs, sorted.
    pub fn ops(&self) -> Vec<(String, String)> {
        let mut v: Vec<_> = self.builders.keys().cloned().collect();
        v.sort();
        v
    }
}
