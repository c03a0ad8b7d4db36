//! What compilation is told: the registry, fallback, fusion, schedules;
//! and what a subgraph sees of its enclosing graph.

use std::collections::HashMap;

use crate::graph::{TypeInfo, ValueId};
use crate::ops::{Fact, OpRegistry};

pub use crate::graph::ONYX_DOMAIN;

/// Compilation settings.
pub struct CompileOptions<'a> {
    /// The op registry.
    pub registry: &'a OpRegistry,
    /// Called with the bytes of each weight uploaded.
    pub on_upload: Option<&'a dyn Fn(u64)>,
    /// Let nodes the first provider cannot run fall back to later providers.
    pub allow_fallback: bool,
    /// Fuse op chains into the ops that compute them in one kernel
    /// (see `exec::compile::fuse`); off only to compare against the graph as written.
    pub fuse: bool,
    /// Input signatures each graph keeps a schedule for (see
    /// [`Schedules`](crate::exec::Schedules); 0 decides every run anew).
    pub schedules: usize,
}

impl<'a> CompileOptions<'a> {
    /// The defaults: fallback, fusion and [`DEFAULT_SCHEDULES`](crate::exec::DEFAULT_SCHEDULES) schedules on.
    pub fn new(registry: &'a OpRegistry) -> Self {
        CompileOptions {
            registry,
            on_upload: None,
            allow_fallback: true,
            fuse: true,
            schedules: crate::exec::schedule::DEFAULT_SCHEDULES,
        }
    }
}

/// What a subgraph sees of its enclosing graph, by name: id, fact and location.
pub type Scope = HashMap<String, (ValueId, Fact, Option<usize>)>;

/// The static fact a declared type gives.
pub fn declared_fact(t: &TypeInfo) -> Option<Fact> {
    Fact::from_declared(t)
}
