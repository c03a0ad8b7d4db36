//! The facade as a conformance [`Runtime`]: every case runs through the public
//! Session API, exactly as a user would run a model.

use std::path::Path;

use onyx_conformance::{RunFailure, Runtime};
use onyx_core::OpError;
use onyx_core::ep::EpError;
use onyx_core::tensor::Value;

use crate::{Error, Session};

/// Runs cases on one device through [`Session`]. The device is opened once and
/// shared by every case (its pipelines and kernels are reused).
pub struct SessionRuntime {
    device: String,
    strict: bool,
    provider: std::sync::Arc<dyn onyx_core::ep::ExecutionProvider>,
}

impl SessionRuntime {
    /// Opens `device`; `strict` forbids falling back to the CPU, per device or per node.
    ///
    /// # Errors
    /// [`Error::BadDevice`] or, in strict mode, [`Error::DeviceUnavailable`].
    pub fn new(device: &str, strict: bool) -> crate::Result<Self> {
        let requested: crate::Device = device.parse()?;
        let resolved = crate::device::resolve(
            requested,
            strict,
            onyx_cpu::CpuOptions::default(),
            crate::device::GpuOptions::default(),
        )?;
        Ok(SessionRuntime { device: device.to_string(), strict, provider: resolved.provider })
    }
}

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
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(err) = cur {
        parts.push(err.to_string());
        cur = err.source();
    }
    parts.join(": ")
}

fn failure(e: Error) -> RunFailure {
    RunFailure { unsupported: is_unsupported(&e), message: chain(&e) }
}

impl Runtime for SessionRuntime {
    fn backend(&self) -> String {
        self.device.clone()
    }

    fn run(
        &self,
        model: &Path,
        inputs: Vec<(String, Value)>,
    ) -> Result<Vec<(String, Value)>, RunFailure> {
        let session = Session::builder()
            .with_provider(self.provider.clone())
            .with_strict(self.strict)
            .commit_from_file(model)
            .map_err(failure)?;
        // Twice: the first run records the schedule of these input shapes,
        // the second follows it, and that is the run the case checks.
        session.run(inputs.clone()).map_err(failure)?;
        Ok(session.run(inputs).map_err(failure)?.values)
    }
}
