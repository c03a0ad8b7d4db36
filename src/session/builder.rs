//! Building a session: settings, the device, compilation.

use std::collections::HashMap;
#[cfg(not(target_arch = "wasm32"))]
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use onyx_core::ep::{DeviceId, ExecutionProvider};
use onyx_core::exec::{self, CompileOptions, Replays};
use onyx_core::graph::Model;
use onyx_core::onnx::external::{ExternalData, NoExternalData};
use onyx_core::ops::OpRegistry;
use onyx_cpu::{CpuOptions, CpuProvider};

use super::Session;
use crate::device::{self, Device};
use crate::error::{Error, Result};
#[cfg(not(target_arch = "wasm32"))]
use crate::workers::Workers;

/// Called during loading with `(bytes uploaded, total bytes)` of the weights.
pub type Progress = Box<dyn Fn(u64, u64) + Send + Sync>;

/// Session settings, resolved once and shared by every component.
pub struct SessionBuilder {
    device: String,
    strict: bool,
    release: bool,
    threads: Option<usize>,
    memory_limit: Option<u64>,
    progress: Option<Progress>,
    provider: Option<Arc<dyn ExecutionProvider>>,
    gpu: device::GpuOptions,
    timeline: bool,
    fuse: bool,
    graphs: bool,
    schedules: usize,
}

impl Default for SessionBuilder {
    fn default() -> Self {
        SessionBuilder {
            device: "cpu".into(),
            strict: false,
            release: true,
            threads: None,
            memory_limit: None,
            progress: None,
            provider: None,
            gpu: device::GpuOptions::default(),
            timeline: true,
            fuse: true,
            graphs: true,
            schedules: exec::DEFAULT_SCHEDULES,
        }
    }
}

impl SessionBuilder {
    /// The device: `cpu`, `wgpu`, `wgpu:N`, `cuda` or `cuda:N` (default `cpu`).
    pub fn with_device(mut self, device: &str) -> Self {
        self.device = device.to_string();
        self
    }

    /// Turn every device or per-node fallback into an error.
    pub fn with_strict(mut self, strict: bool) -> Self {
        self.strict = strict;
        self
    }

    /// Fuse op chains (Conv + BatchNormalization, Conv + activation, erf
    /// Gelu, eager attention, bias + residual + LayerNormalization) into the
    /// ops that compute them in one kernel (default on); off runs the graph
    /// as written.
    pub fn with_fusion(mut self, fuse: bool) -> Self {
        self.fuse = fuse;
        self
    }

    /// Record and replay runs as CUDA graphs (default on). A session's second
    /// run with given input shapes is recorded and every later one replays
    /// the recording: one launch, with none of the per-node work on the host.
    /// Runs that need a device value on the host (data-dependent control
    /// flow, CPU fallback) are never recorded. No effect on other devices.
    pub fn with_cuda_graphs(mut self, graphs: bool) -> Self {
        self.graphs = graphs;
        self
    }

    /// How many input signatures (dtypes and shapes of the inputs) keep a
    /// schedule, least recently used first out (default 8). The first run
    /// with a signature decides everything the host decides (output shapes,
    /// folded shape arithmetic, in-place reuse, the arena's offsets, the
    /// memory figures); later runs with it only upload, launch and release.
    /// 0 decides every run anew.
    pub fn with_schedule_cache(mut self, signatures: usize) -> Self {
        self.schedules = signatures;
        self
    }

    /// Release intermediates at last use (default on); off keeps them until the end of a run.
    pub fn with_release_dead_values(mut self, release: bool) -> Self {
        self.release = release;
        self
    }

    /// Worker threads for CPU kernels (default: all cores). With 1, every run
    /// stays on the thread that calls it, as onnxruntime's one-thread sessions
    /// do; with more, runs go to a pool of this many threads, except that a
    /// run whose predecessor took under a millisecond stays on the caller
    /// (handing so little work to the pool costs more than it saves).
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = Some(threads);
        self
    }

    /// Let f32 matrix products on CUDA use TF32 tensor cores (default off:
    /// f32 results then match the CPU to f32 rounding).
    pub fn with_allow_tf32(mut self, allow: bool) -> Self {
        self.gpu.allow_tf32 = allow;
        self
    }

    /// Read every provider's bytes in use after each step for
    /// [`MemoryReport::timeline`](crate::MemoryReport::timeline)'s measured figures (default on). Off saves a
    /// statistics read per node, for latency benchmarks.
    pub fn with_memory_timeline(mut self, measure: bool) -> Self {
        self.timeline = measure;
        self
    }

    /// A limit on live CPU bytes; allocations beyond it fail with out-of-memory.
    pub fn with_memory_limit(mut self, bytes: u64) -> Self {
        self.memory_limit = Some(bytes);
        self
    }

    /// Runs on an existing provider (shared between sessions) instead of resolving a
    /// device. Unless strict, nodes it cannot run fall back to a CPU provider.
    pub fn with_provider(mut self, provider: Arc<dyn ExecutionProvider>) -> Self {
        self.provider = Some(provider);
        self
    }

    /// Reports weight-upload progress while the session is built.
    pub fn with_progress(mut self, progress: Progress) -> Self {
        self.progress = Some(progress);
        self
    }

    /// Loads, compiles and uploads a model file (external data resolved next to it).
    ///
    /// # Errors
    /// [`Error::Load`] for unreadable or malformed files, [`Error::Compile`] when a node
    /// cannot be prepared, device errors in strict mode.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn commit_from_file(self, path: impl AsRef<Path>) -> Result<Session> {
        let path = path.as_ref();
        let model = onyx_core::onnx::load_model_file(path)
            .map_err(|source| Error::Load { path: path.display().to_string(), source })?;
        self.commit_model(model, Some(path.to_path_buf()))
    }

    /// Loads a model from memory; `external` supplies any external data files.
    ///
    /// # Errors
    /// As [`commit_from_file`](Self::commit_from_file).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn commit_from_bytes(
        self,
        bytes: impl Into<Bytes>,
        external: Option<&dyn ExternalData>,
    ) -> Result<Session> {
        pollster::block_on(self.commit_from_bytes_async(bytes, external))
    }

    /// Loads a model from memory, opening the device asynchronously (the
    /// browser's WebGPU adapter); `external` supplies any external data files.
    ///
    /// # Errors
    /// As [`commit_from_file`](Self::commit_from_file).
    pub async fn commit_from_bytes_async(
        self,
        bytes: impl Into<Bytes>,
        external: Option<&dyn ExternalData>,
    ) -> Result<Session> {
        let model =
            onyx_core::onnx::load_model_bytes(bytes.into(), external.unwrap_or(&NoExternalData))
                .map_err(|source| Error::Load { path: "<memory>".into(), source })?;
        self.commit_model_async(model, None).await
    }

    /// Compiles an already loaded model.
    ///
    /// # Errors
    /// As [`commit_from_file`](Self::commit_from_file).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn commit_model(self, model: Model, path: Option<PathBuf>) -> Result<Session> {
        pollster::block_on(self.commit_model_async(model, path))
    }

    /// Compiles an already loaded model, opening the device asynchronously.
    ///
    /// # Errors
    /// As [`commit_from_file`](Self::commit_from_file).
    pub async fn commit_model_async(self, model: Model, path: Option<PathBuf>) -> Result<Session> {
        let requested: Device = self.device.parse()?;
        let mut cpu = CpuOptions::default();
        if let Some(limit) = self.memory_limit {
            cpu.memory_limit = limit;
        }
        let resolved = match self.provider {
            Some(provider) => {
                device::Resolved { requested, provider, fallback: None, adapter: None }
            }
            None => device::resolve_async(requested, self.strict, cpu.clone(), self.gpu).await?,
        };
        // The primary device first; the CPU after it for nodes the device cannot run.
        let mut providers = vec![resolved.provider];
        if !self.strict && providers[0].device() != DeviceId::CPU {
            providers.push(Arc::new(CpuProvider::new(cpu)));
        }
        #[cfg(not(target_arch = "wasm32"))]
        let workers = match self.threads {
            Some(1) => Workers::Caller,
            Some(n) => Workers::pool(
                rayon::ThreadPoolBuilder::new()
                    .num_threads(n)
                    .build()
                    .map_err(|source| Error::Threads { threads: n, source })?,
            ),
            None => Workers::Global,
        };
        let graph = Arc::new(model.graph.clone());
        let total = graph.initializer_bytes();
        let done = std::sync::atomic::AtomicU64::new(0);
        let progress = self.progress;
        let on_upload = |n: u64| {
            let d = done.fetch_add(n, std::sync::atomic::Ordering::Relaxed) + n;
            if let Some(p) = &progress {
                p(d, total);
            }
        };
        let registry = OpRegistry::standard();
        let opts = CompileOptions {
            on_upload: Some(&on_upload),
            allow_fallback: !self.strict,
            fuse: self.fuse,
            schedules: self.schedules,
            ..CompileOptions::new(&registry)
        };
        let device_name = providers[0].name();
        let refs: Vec<&dyn ExecutionProvider> = providers.iter().map(|p| &**p).collect();
        let program = exec::compile(graph, &HashMap::new(), &refs, &opts)
            .map_err(|source| Error::Compile { device: device_name.clone(), source })?;
        let weights = program.weight_bytes(providers.len());
        let session = Session {
            providers,
            program,
            model,
            path,
            release: self.release,
            timeline: self.timeline,
            device: device_name,
            requested: requested.to_string(),
            fallback: resolved.fallback,
            adapter: resolved.adapter,
            #[cfg(not(target_arch = "wasm32"))]
            workers,
            replays: Replays::new(self.graphs),
            weights,
            released: false,
        };
        let counts = session.kernels_per_device();
        if counts.len() > 1 && counts[1].1 > 0 {
            let total: usize = counts.iter().map(|c| c.1).sum();
            log::warn!(
                "{} of {total} kernel nodes run on {} (fallback from {}); `onyx info --device {}` lists them",
                counts[1].1,
                counts[1].0,
                counts[0].0,
                session.requested
            );
        }
        Ok(session)
    }
}
