//! Decompositions: rewrites of a composite node into standard ops, used when
//! the primary provider has no kernel for the node itself. The pieces are then
//! placed like any other node (and may themselves decompose or fall back), so
//! a GPU backend runs `Attention`, the losses or `Trilu` from the kernels it
//! already has instead of sending the whole node to the CPU.
//!
//! A decomposition sees the node's input facts at compile time. It may use
//! what they know (ranks, static dims, constant values) and declines, leaving
//! the node to fallback, when what it needs is unknown.

mod attention;
mod builder;
mod loss;
mod quant;
mod registry;
mod rotary;
mod simple;

pub use builder::{Builder, OPSET};
pub use registry::{Decompose, Decompositions, decompositions};
