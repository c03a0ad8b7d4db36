//! The facade's error type: each variant names what Onyx was doing, and the
//! source chain carries the node, op, opset and backend from below.

use onyx_core::OpError;
use onyx_core::ep::EpError;

/// Errors from the Onyx API.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The model file could not be read or parsed.
    #[error("cannot load model {path}")]
    Load {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: onyx_core::LoadError,
    },
    /// The model could not be prepared for the device.
    #[error("cannot prepare the model for {device}")]
    Compile {
        /// The device.
        device: String,
        /// Why (node, op and backend in the chain).
        #[source]
        source: onyx_core::Error,
    },
    /// A run failed.
    #[error("running the model on {device} failed")]
    Run {
        /// The device.
        device: String,
        /// Why (node, op and backend in the chain).
        #[source]
        source: onyx_core::Error,
    },
    /// The device string is malformed.
    #[error("'{0}' is not a device (expected cpu, wgpu, wgpu:N, cuda or cuda:N)")]
    BadDevice(String),
    /// The device is not available and strict mode forbids falling back.
    #[error("device {requested} is not available: {reason}")]
    DeviceUnavailable {
        /// The request.
        requested: String,
        /// Why.
        reason: String,
    },
    /// An input is missing, unknown or malformed.
    #[error("input '{name}': {reason}")]
    Input {
        /// Input name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// A provider operation around a run (upload, download) failed.
    #[error("backend {backend}: {action}")]
    Provider {
        /// The backend.
        backend: String,
        /// What was being done.
        action: String,
        /// The backend's error.
        #[source]
        source: EpError,
    },
    /// The session's weights were freed ([`Session::release`](crate::Session::release)).
    #[error("the session was released")]
    Released,
    /// Generation cannot start or go on (not a decoder, a prompt too long, bad settings).
    #[error("generation: {0}")]
    Generate(String),
    /// A thread pool could not be built.
    #[error("cannot start {threads} worker threads")]
    Threads {
        /// Requested threads.
        threads: usize,
        /// Why.
        #[source]
        source: rayon::ThreadPoolBuildError,
    },
}

/// Result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// True when an error chain says "not implemented" rather than "went wrong".
pub fn is_unsupported(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(op) = err.downcast_ref::<OpError>() {
            if matches!(
                op,
                OpError::UnknownOp { .. }
                    | OpError::UnsupportedOpset { .. }
                    | OpError::Unsupported(_)
            ) {
                return true;
            }
        }
        if let Some(EpError::Unsupported(_)) = err.downcast_ref::<EpError>() {
            return true;
        }
        cur = err.source();
    }
    false
}

/// The whole chain, `outer: inner: innermost`.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(err) = cur {
        parts.push(err.to_string());
        cur = err.source();
    }
    parts.join(": ")
}
