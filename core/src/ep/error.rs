//! The errors providers raise.

use super::types::{DeviceId, KernelId};

/// Errors raised by execution providers.
#[derive(Debug, thiserror::Error)]
pub enum EpError {
    /// The allocation does not fit.
    #[error("out of memory: requested {requested} bytes with {in_use} in use (limit {limit})")]
    OutOfMemory {
        /// Requested bytes.
        requested: u64,
        /// Bytes in use.
        in_use: u64,
        /// The limit that was hit.
        limit: u64,
    },
    /// The handle is not (or no longer) held by this provider.
    #[error("unknown buffer {id} on {device} (never allocated here, or already freed)")]
    UnknownBuffer {
        /// The handle's id.
        id: u64,
        /// The handle's device.
        device: DeviceId,
    },
    /// An access runs past the end of a buffer.
    #[error("access of {len} bytes at {offset} overruns a {size}-byte buffer")]
    OutOfBounds {
        /// Start.
        offset: u64,
        /// Length.
        len: u64,
        /// Buffer size.
        size: u64,
    },
    /// The op or dtype is not implemented by this provider.
    #[error("{0}")]
    Unsupported(String),
    /// A kernel rejected its inputs or failed while running.
    #[error("{0}")]
    Kernel(String),
    /// A device or driver failure.
    #[error("device error: {0}")]
    Device(String),
    /// The kernel id was never prepared by this provider.
    #[error("unknown kernel {0:?}")]
    UnknownKernel(KernelId),
}
