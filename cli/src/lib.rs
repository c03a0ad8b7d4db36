//! The parts of the `onyx` command line that its tests share:
//! [`SessionRuntime`], the `onyx` library as a runtime of the conformance
//! harness.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod runtime;

pub use runtime::SessionRuntime;
