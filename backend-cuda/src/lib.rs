//! Onyx's CUDA backend: NVRTC-compiled kernels and cuBLAS behind the core
//! [`ExecutionProvider`](onyx_core::ep::ExecutionProvider).
//!
//! The CUDA libraries (driver, NVRTC, cuBLAS, cuBLASLt) are loaded at run time, so this
//! crate builds on machines with no CUDA toolkit and no GPU; opening a device
//! there is an error that names the missing library, never a panic.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod compile;
mod device;
mod gpu;
mod kernels;
mod lt;
mod provider;
mod record;

pub use device::{DeviceInfo, check_libraries, device_count, info};
pub use provider::{CudaOptions, CudaProvider, DriverMemory};
