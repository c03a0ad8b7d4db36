//! Onyx core: everything that does not depend on a backend.
//!
//! - [`onnx`]: protobuf decoding and the loader (ModelProto → [`graph::Graph`]),
//!   external data resolved safely and memory-mapped.
//! - [`graph`], [`dtype`], [`shape`], [`tensor`]: the IR.
//! - [`ops`]: the op registry; each op parses its attributes and infers its outputs.
//! - [`plan`]: execution order, last use, release lists, guards, in-place and views.
//! - [`ep`]: the buffer handle and the execution-provider trait.
//! - [`exec`]: compilation for a provider, the executor, and runs on host values.
//! - [`inputs`]: deterministic generated inputs.
//!
//! ```
//! use onyx_core::dtype::DType;
//! use onyx_core::tensor::Tensor;
//!
//! let t = Tensor::from_vec(vec![2], vec![1.5f32, -2.0]).unwrap();
//! assert_eq!(t.dtype(), DType::F32);
//! assert_eq!(t.to_vec::<f32>().unwrap(), vec![1.5, -2.0]);
//! ```

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod dtype;
pub mod ep;
pub mod error;
pub mod exec;
pub mod float8;
pub mod graph;
pub mod inputs;
pub mod onnx;
pub mod ops;
pub mod passes;
pub mod plan;
pub mod shape;
pub mod tensor;
#[cfg(test)]
mod tests_support;

pub use error::{LoadError, OpError};
pub use exec::{Error, Result};
