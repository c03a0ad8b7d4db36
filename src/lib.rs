//! Onyx: a portable ONNX inference runtime whose memory cost is the model's
//! peak live set, not its node count.
//!
//! ```no_run
//! use onyx::{Session, Tensor, Value};
//!
//! let session = Session::builder()
//!     .with_device("cpu")
//!     .with_release_dead_values(true)
//!     .commit_from_file("examples/tiny_cnn.onnx")?;
//! let x = Tensor::from_vec(vec![1, 3, 64, 64], vec![0.5f32; 3 * 64 * 64])?;
//! let out = session.run([("input", Value::Tensor(x))])?;
//! println!("peak {} bytes", out.memory.peak_bytes);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod device;
mod error;
#[cfg(not(target_arch = "wasm32"))]
pub mod generate;
pub mod inputs;
#[cfg(not(target_arch = "wasm32"))]
pub mod npy;
mod session;
#[cfg(not(target_arch = "wasm32"))]
mod workers;

pub use device::{Adapter, Device};
pub use error::{Error, Result, error_chain, is_unsupported};
#[cfg(not(target_arch = "wasm32"))]
pub use generate::{GenerateOptions, GenerationStats, Generator, Sampling};
pub use onyx_core::dtype::DType;
pub use onyx_core::tensor::{Tensor, Value};
pub use session::{
    BoundRun, DeviceMemory, IoBinding, IoInfo, MemoryReport, Progress, RunConfig, RunOutputs,
    Session, SessionBuilder, TimelineStep,
};

/// The core crate, for lower-level use (graph IR, planner, provider traits).
pub use onyx_core as core;
