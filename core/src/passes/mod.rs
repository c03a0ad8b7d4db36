//! The compile pipeline's passes over a graph, after loading and before
//! placement and planning:
//!
//! 1. [`infer`]: facts (dtype, symbolic shape, known values) for every value
//!    of the whole graph, subgraphs included, with nodes over constants
//!    computed now;
//! 2. [`fuse`]: chains the primary provider runs better fused, each checked
//!    against those facts;
//!
//! and, during placement, which is provider by provider and node by node:
//!
//! 3. [`decompose`]: a node the primary provider has no kernel for, written
//!    as standard ops it has;
//! 4. [`widen`]: a half-precision node a provider runs only in f32, between
//!    casts.

pub mod decompose;
mod error;
pub mod fuse;
pub mod infer;
pub mod widen;

pub use error::PassError;
