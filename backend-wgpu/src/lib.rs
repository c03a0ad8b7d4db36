//! Onyx's wgpu backend: WGSL compute kernels behind the core
//! [`ExecutionProvider`](onyx_core::ep::ExecutionProvider), the same code natively
//! (Vulkan, Metal, DX12) and in browsers (WebGPU).
//!
//! Tensors keep their host byte layout on the device (bool, int8 and f16 packed
//! into 32-bit words; int64 as two words), so copies between providers are plain
//! byte copies. Shaders own whole output words, so packed types never race.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod context;
mod kernels;
mod provider;

pub use context::AdapterSummary;
pub use provider::{WgpuOptions, WgpuProvider};
