//! Sessions: a model compiled for one device (with the CPU as per-node
//! fallback), run with named host tensors. Asynchronous at the core, so the
//! browser package is only JavaScript marshalling over [`Session`].

mod binding;
mod builder;
mod report;
mod run;

use std::path::{Path, PathBuf};
use std::sync::Arc;

#[cfg(not(target_arch = "wasm32"))]
pub(crate) use std::time::Instant;
#[cfg(target_arch = "wasm32")]
pub(crate) use web_time::Instant;

use onyx_core::ep::ExecutionProvider;
use onyx_core::exec::{CompiledGraph, Replays};
use onyx_core::graph::Model;

pub use binding::{BoundRun, IoBinding};
pub use builder::{Progress, SessionBuilder};
pub use report::{DeviceMemory, IoInfo, MemoryReport, RunOutputs, TimelineStep};
pub use run::RunConfig;

use crate::device::Adapter;
use crate::error::{Error, Result};
#[cfg(not(target_arch = "wasm32"))]
use crate::workers::Workers;

/// A model ready to run. Dropping it frees its weights on every device.
pub struct Session {
    /// The primary provider, then the fallback (if any).
    providers: Vec<Arc<dyn ExecutionProvider>>,
    program: CompiledGraph,
    model: Model,
    path: Option<PathBuf>,
    release: bool,
    timeline: bool,
    device: String,
    requested: String,
    fallback: Option<String>,
    adapter: Option<Adapter>,
    /// Where CPU kernels run (native; the browser has one thread).
    #[cfg(not(target_arch = "wasm32"))]
    workers: Workers,
    /// Recorded runs (CUDA graphs), keyed by input shapes.
    replays: Replays,
    /// Weight bytes per provider, subgraphs included: what each run reports
    /// (summed once, not through every subgraph on every run).
    weights: Vec<u64>,
    /// The weights were freed by [`Session::release`]: runs fail.
    released: bool,
}

impl Session {
    /// A builder with default settings (cpu, release on).
    pub fn builder() -> SessionBuilder {
        SessionBuilder::default()
    }

    /// The primary provider's name (`cpu`, …): where the session really runs.
    pub fn device(&self) -> &str {
        &self.device
    }

    /// The device string that was asked for.
    pub fn requested_device(&self) -> &str {
        &self.requested
    }

    /// Whether runs release intermediates at last use by default.
    pub fn release_dead_values(&self) -> bool {
        self.release
    }

    /// Why the requested device fell back to the CPU, if it did.
    pub fn fallback(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    /// The loaded model.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The model file, when loaded from one.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The primary provider (for memory statistics).
    pub fn provider(&self) -> &dyn ExecutionProvider {
        &*self.providers[0]
    }

    /// Every provider: the primary, then the fallback if any.
    pub fn providers(&self) -> Vec<&dyn ExecutionProvider> {
        self.providers.iter().map(|p| &**p).collect()
    }

    /// Bytes of weights uploaded to the primary device.
    pub fn weight_bytes(&self) -> u64 {
        self.weights[0]
    }

    /// Bytes of weights per device, primary first.
    pub fn weight_bytes_per_device(&self) -> Vec<(String, u64)> {
        self.providers.iter().zip(&self.weights).map(|(p, &w)| (p.name(), w)).collect()
    }

    /// What the wgpu adapter is, when the session runs on one it opened.
    pub fn adapter(&self) -> Option<&Adapter> {
        self.adapter.as_ref()
    }

    /// Kernel nodes per device, primary first: how the model was placed.
    pub fn kernels_per_device(&self) -> Vec<(String, usize)> {
        let counts = self.program.kernels_per_provider(self.providers.len());
        self.providers.iter().zip(counts).map(|(p, c)| (p.name(), c)).collect()
    }

    /// Every kernel node with the device that runs it.
    pub fn placement(&self) -> Vec<(onyx_core::error::NodeDesc, String)> {
        self.program.placement().into_iter().map(|(n, p)| (n, self.providers[p].name())).collect()
    }

    /// The model inputs a caller feeds.
    pub fn inputs(&self) -> Vec<IoInfo> {
        let g = &self.model.graph;
        g.inputs
            .iter()
            .map(|&v| IoInfo {
                name: g.value(v).name.clone(),
                declared: g.value(v).declared.clone(),
            })
            .collect()
    }

    /// The model outputs.
    pub fn outputs(&self) -> Vec<IoInfo> {
        let g = &self.model.graph;
        g.outputs
            .iter()
            .map(|&v| IoInfo {
                name: g.value(v).name.clone(),
                declared: g.value(v).declared.clone(),
            })
            .collect()
    }

    /// Frees the session's weights now (also done on drop).
    ///
    /// # Errors
    /// [`Error::Provider`] if a provider rejects a free.
    pub fn close(mut self) -> Result<()> {
        self.release()
    }

    /// Frees the session's weights and recorded runs now; later runs fail
    /// with [`Error::Released`]. Freeing twice does nothing.
    ///
    /// # Errors
    /// [`Error::Provider`] if a provider rejects a free.
    pub fn release(&mut self) -> Result<()> {
        if std::mem::replace(&mut self.released, true) {
            return Ok(());
        }
        self.free()
    }

    /// How many input signatures (dtypes and shapes) have a schedule now.
    pub fn schedules(&self) -> usize {
        self.program.schedules.len()
    }

    /// How many input shapes have a recorded run (a CUDA graph) now.
    pub fn recorded_runs(&self) -> usize {
        self.replays.recorded()
    }

    fn free(&mut self) -> Result<()> {
        let refs: Vec<&dyn ExecutionProvider> = self.providers.iter().map(|p| &**p).collect();
        // Recordings first (they read the weights), then the weights, whatever happened.
        let recordings = self.replays.free(&refs);
        let weights = self.program.free_weights(&refs).map_err(|source| Error::Provider {
            backend: self.device.clone(),
            action: "freeing weights".into(),
            source,
        });
        recordings.map_err(|source| Error::Run { device: self.device.clone(), source }).and(weights)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            log::error!("{e}");
        }
    }
}

// Sessions are shared across threads by servers: keep them Send + Sync
// (natively; browser WebGPU objects are neither).
#[cfg(not(target_arch = "wasm32"))]
const _: () = {
    fn assert_send_sync<T: Send + Sync>() {}
    #[allow(dead_code)]
    fn check() {
        assert_send_sync::<Session>();
    }
};
