//! The library as a conformance [`Runtime`]: every case runs through the
//! public Session API, exactly as a user would run a model.

use std::path::Path;

use onyx::{Error, Session, Value};
use onyx_conformance::{RunFailure, Runtime};

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
    pub fn new(device: &str, strict: bool) -> onyx::Result<Self> {
        let requested: onyx::Device = device.parse()?;
        let resolved = onyx::device::resolve(
            requested,
            strict,
            onyx_cpu::CpuOptions::default(),
            onyx::device::GpuOptions::default(),
        )?;
        Ok(SessionRuntime { device: device.to_string(), strict, provider: resolved.provider })
    }
}

fn failure(e: Error) -> RunFailure {
    RunFailure { unsupported: onyx::is_unsupported(&e), message: onyx::error_chain(&e) }
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
