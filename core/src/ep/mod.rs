//! The buffer handle and the execution-provider trait that every backend implements.
//!
//! A [`DeviceBuffer`] is plain data: it names memory, it does not own it. The
//! provider keeps the real memory objects (host blocks, `wgpu::Buffer`s,
//! `CudaSlice`s) in its own table, and only [`ExecutionProvider::deallocate`]
//! returns them. Dropping a handle therefore frees nothing, on purpose: memory
//! accounting stays in one place, and a forgotten release shows up in
//! [`MemoryStats`] instead of being hidden by a destructor.

mod error;
mod provider;
mod registry;
mod table;
mod types;

pub use error::EpError;
pub use provider::{ExecutionProvider, KernelSpec, Launch};
pub use registry::{KernelBuilder, KernelRegistry};
pub use table::{BufferTable, Resolved};
pub use types::{
    BoxFuture, CaptureId, DeviceBuffer, DeviceId, DeviceKind, Fusions, KernelId, MaybeSendSync,
    MemoryStats, TensorArg,
};
