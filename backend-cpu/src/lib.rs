//! Onyx's CPU backend: the reference [`ExecutionProvider`](onyx_core::ep::ExecutionProvider)
//! and the default everywhere, including wasm32 when a browser has no WebGPU.
//!
//! ```
//! use onyx_core::ep::ExecutionProvider;
//! use onyx_cpu::CpuProvider;
//!
//! let cpu = CpuProvider::default();
//! let buf = cpu.allocate(16, 4).unwrap();
//! assert_eq!(cpu.memory_stats().in_use_bytes, 16);
//! cpu.deallocate(buf).unwrap();
//! assert_eq!(cpu.memory_stats().in_use_bytes, 0);
//! ```

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod kernels;
mod par;
mod provider;
mod storage;

pub use par::serial;
pub use provider::{CpuOptions, CpuProvider};
