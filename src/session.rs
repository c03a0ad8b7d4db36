//! Sessions: a model compiled for one device, run with named host tensors.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use onyx_core::dtype::DType;
use onyx_core::ep::{DeviceBuffer, ExecutionProvider, TensorArg};
use onyx_core::exec::{self, CompileOptions, CompiledGraph, DeviceValue, RunOptions};
use onyx_core::graph::{Model, TypeInfo};
use onyx_core::onnx::external::{ExternalData, NoExternalData};
use onyx_core::ops::OpRegistry;
use onyx_core::shape::Shape;
use onyx_core::tensor::{Tensor, Value};
use onyx_cpu::CpuOptions;

use crate::device::{self, Device};
use crate::error::{Error, Result};

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

    /// Release intermediates at last use (default on); off keeps them until the end of a run.
    pub fn with_release_dead_values(mut self, release: bool) -> Self {
        self.release = release;
        self
    }

    /// Worker threads for CPU kernels (default: all cores).
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = Some(threads);
        self
    }

    /// A limit on live device bytes; allocations beyond it fail with out-of-memory.
    pub fn with_memory_limit(mut self, bytes: u64) -> Self {
        self.memory_limit = Some(bytes);
        self
    }

    /// Runs on an existing provider (shared between sessions) instead of resolving a device.
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
    pub fn commit_from_bytes(
        self,
        bytes: impl Into<Bytes>,
        external: Option<&dyn ExternalData>,
    ) -> Result<Session> {
        let model =
            onyx_core::onnx::load_model_bytes(bytes.into(), external.unwrap_or(&NoExternalData))
                .map_err(|source| Error::Load { path: "<memory>".into(), source })?;
        self.commit_model(model, None)
    }

    /// Compiles an already loaded model.
    ///
    /// # Errors
    /// As [`commit_from_file`](Self::commit_from_file).
    pub fn commit_model(self, model: Model, path: Option<PathBuf>) -> Result<Session> {
        let requested: Device = self.device.parse()?;
        let mut cpu = CpuOptions::default();
        if let Some(limit) = self.memory_limit {
            cpu.memory_limit = limit;
        }
        let resolved = match self.provider {
            Some(provider) => device::Resolved { requested, provider, fallback: None },
            None => device::resolve(requested, self.strict, cpu)?,
        };
        let pool = match self.threads {
            Some(n) => Some(Arc::new(
                rayon::ThreadPoolBuilder::new()
                    .num_threads(n)
                    .build()
                    .map_err(|source| Error::Threads { threads: n, source })?,
            )),
            None => None,
        };
        let provider = resolved.provider;
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
        let opts = CompileOptions { registry: &registry, on_upload: Some(&on_upload) };
        let device_name = provider.name();
        let program = exec::compile(graph, &HashMap::new(), &*provider, &opts)
            .map_err(|source| Error::Compile { device: device_name.clone(), source })?;
        Ok(Session {
            provider,
            program,
            model,
            path,
            release: self.release,
            device: device_name,
            requested: requested.to_string(),
            fallback: resolved.fallback,
            pool,
        })
    }
}

/// A model ready to run on one device. Dropping it frees its weights on the device.
pub struct Session {
    provider: Arc<dyn ExecutionProvider>,
    program: CompiledGraph,
    model: Model,
    path: Option<PathBuf>,
    release: bool,
    device: String,
    requested: String,
    fallback: Option<String>,
    pool: Option<Arc<rayon::ThreadPool>>,
}

/// Name, type and declared shape of a model input or output.
#[derive(Clone, Debug)]
pub struct IoInfo {
    /// The name.
    pub name: String,
    /// The declared type (`None` when the model declares none).
    pub declared: Option<TypeInfo>,
}

impl IoInfo {
    /// The tensor dtype, when declared.
    pub fn dtype(&self) -> Option<DType> {
        self.declared.as_ref().and_then(TypeInfo::tensor_dtype)
    }

    /// The declared tensor shape (possibly symbolic).
    pub fn shape(&self) -> Option<&Shape> {
        self.declared.as_ref().and_then(TypeInfo::tensor_shape)
    }
}

/// Memory figures of one run, in bytes (weights excluded: they are resident throughout).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct MemoryReport {
    /// Peak bytes in use during the run, from the provider's own accounting.
    pub peak_bytes: u64,
    /// Every byte the run allocated: the peak if nothing were released.
    pub no_release_bytes: u64,
    /// The plan's live-set bound: the peak that release at last use allows.
    pub live_set_bound_bytes: u64,
    /// Buffers released at their last use.
    pub releases: u64,
    /// Bytes of weights resident on the device.
    pub weight_bytes: u64,
}

/// The result of [`Session::run`].
#[derive(Debug)]
pub struct RunOutputs {
    /// Outputs in the model's order, by name.
    pub values: Vec<(String, Value)>,
    /// Memory figures of this run.
    pub memory: MemoryReport,
    /// Wall time of the run, uploads and downloads included.
    pub latency: Duration,
}

impl RunOutputs {
    /// An output by name.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.values.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }
}

impl Session {
    /// A builder with default settings (cpu, release on).
    pub fn builder() -> SessionBuilder {
        SessionBuilder::default()
    }

    /// The provider's name (`cpu`, …): where the session really runs.
    pub fn device(&self) -> &str {
        &self.device
    }

    /// The device string that was asked for.
    pub fn requested_device(&self) -> &str {
        &self.requested
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

    /// The provider (for memory statistics).
    pub fn provider(&self) -> &dyn ExecutionProvider {
        &*self.provider
    }

    /// Bytes of weights uploaded to the device.
    pub fn weight_bytes(&self) -> u64 {
        self.program.weight_bytes()
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

    /// Runs the model on named host values.
    ///
    /// # Errors
    /// [`Error::Input`] for missing, unknown or mistyped inputs; [`Error::Run`] with the
    /// failing node, op and backend in its chain. Nothing stays allocated on failure.
    pub fn run<I, S>(&self, inputs: I) -> Result<RunOutputs>
    where
        I: IntoIterator<Item = (S, Value)>,
        S: Into<String>,
    {
        match &self.pool {
            Some(pool) => {
                let inputs: Vec<(String, Value)> =
                    inputs.into_iter().map(|(n, v)| (n.into(), v)).collect();
                pool.install(|| self.run_inner(inputs))
            }
            None => self.run_inner(inputs.into_iter().map(|(n, v)| (n.into(), v)).collect()),
        }
    }

    fn run_inner(&self, inputs: Vec<(String, Value)>) -> Result<RunOutputs> {
        let start = Instant::now();
        let g = &self.model.graph;
        let mut by_name: HashMap<String, Value> = HashMap::new();
        for (name, v) in inputs {
            if !g.inputs.iter().any(|&i| g.value(i).name == name) {
                let known: Vec<&str> = g.inputs.iter().map(|&i| g.value(i).name.as_str()).collect();
                return Err(Error::Input {
                    name,
                    reason: format!("the model has no such input (inputs: {})", known.join(", ")),
                });
            }
            by_name.insert(name, v);
        }
        let ep = &*self.provider;
        ep.reset_peak();
        let baseline = ep.memory_stats().in_use_bytes;
        let mut uploaded: Vec<DeviceBuffer> = Vec::new();
        let result = self.upload_and_run(&mut by_name, &mut uploaded);
        // Inputs were lent to the run; they are the session's to free, success or not.
        for b in uploaded {
            if let Err(e) = ep.deallocate(b) {
                log::error!("freeing an input buffer failed: {e}");
            }
        }
        let (values, figures, releases) = result?;
        let peak = ep.memory_stats().peak_bytes.saturating_sub(baseline);
        Ok(RunOutputs {
            values,
            memory: MemoryReport {
                peak_bytes: peak,
                no_release_bytes: figures.no_release_bytes,
                live_set_bound_bytes: figures.live_set_bound,
                releases,
                weight_bytes: self.weight_bytes(),
            },
            latency: start.elapsed(),
        })
    }

    #[allow(clippy::type_complexity)]
    fn upload_and_run(
        &self,
        by_name: &mut HashMap<String, Value>,
        uploaded: &mut Vec<DeviceBuffer>,
    ) -> Result<(Vec<(String, Value)>, onyx_core::plan::MemoryFigures, u64)> {
        let g = &self.model.graph;
        let ep = &*self.provider;
        let mut device_inputs = Vec::with_capacity(g.inputs.len());
        for &i in &g.inputs {
            let name = &g.value(i).name;
            let value = by_name.remove(name).ok_or_else(|| Error::Input {
                name: name.clone(),
                reason: "not provided".into(),
            })?;
            let mut upload = |t: &Tensor| -> Result<TensorArg> {
                let bytes = t
                    .bytes()
                    .map_err(|e| Error::Input { name: name.clone(), reason: e.to_string() })?;
                let buffer = ep.allocate(bytes.len() as u64, t.dtype().align() as u32).map_err(
                    |source| Error::Provider {
                        backend: ep.name(),
                        action: format!("allocating input '{name}'"),
                        source,
                    },
                )?;
                uploaded.push(buffer);
                ep.upload(buffer, bytes).map_err(|source| Error::Provider {
                    backend: ep.name(),
                    action: format!("uploading input '{name}'"),
                    source,
                })?;
                Ok(TensorArg { buffer, dtype: t.dtype(), shape: t.shape().to_vec() })
            };
            device_inputs.push(match &value {
                Value::Tensor(t) => DeviceValue::Tensor(upload(t)?),
                Value::Sequence(d, ts) => {
                    DeviceValue::Sequence(*d, ts.iter().map(&mut upload).collect::<Result<_>>()?)
                }
            });
        }
        let opts = RunOptions { release_dead_values: self.release };
        let run_err = |source| Error::Run { device: self.device.clone(), source };
        let result = pollster::block_on(exec::run(&self.program, ep, &device_inputs, opts))
            .map_err(run_err)?;
        // The outputs are ours now: read each back, then free it (even if a read fails).
        let mut values = Vec::with_capacity(result.outputs.len());
        let mut first_err = None;
        for (&o, out) in g.outputs.iter().zip(&result.outputs) {
            let name = g.value(o).name.clone();
            let read = match out {
                DeviceValue::Tensor(t) => self.download(t).map(Value::Tensor),
                DeviceValue::Sequence(d, ts) => ts
                    .iter()
                    .map(|t| self.download(t))
                    .collect::<Result<_>>()
                    .map(|v| Value::Sequence(*d, v)),
            };
            match read {
                Ok(v) => values.push((name, v)),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        for out in &result.outputs {
            let bufs: Vec<DeviceBuffer> = match out {
                DeviceValue::Tensor(t) => vec![t.buffer],
                DeviceValue::Sequence(_, ts) => ts.iter().map(|t| t.buffer).collect(),
            };
            for b in bufs {
                if let Err(source) = ep.deallocate(b) {
                    first_err.get_or_insert(Error::Provider {
                        backend: ep.name(),
                        action: "freeing an output".into(),
                        source,
                    });
                }
            }
        }
        if let Some(e) = first_err {
            return Err(e);
        }
        Ok((values, result.figures, result.releases))
    }

    fn download(&self, t: &TensorArg) -> Result<Tensor> {
        let ep = &*self.provider;
        let len = t.dtype.byte_size(t.numel()).unwrap_or(0);
        let bytes = pollster::block_on(ep.download(t.buffer, len)).map_err(|source| {
            Error::Provider { backend: ep.name(), action: "reading an output back".into(), source }
        })?;
        Tensor::from_bytes(t.dtype, t.shape.clone(), bytes.into())
            .map_err(|e| Error::Input { name: "<output>".into(), reason: e.to_string() })
    }

    /// Frees the session's weights now (also done on drop).
    ///
    /// # Errors
    /// [`Error::Provider`] if the provider rejects a free.
    pub fn close(mut self) -> Result<()> {
        self.free()
    }

    fn free(&mut self) -> Result<()> {
        self.program.free_weights(&*self.provider).map_err(|source| Error::Provider {
            backend: self.provider.name(),
            action: "freeing weights".into(),
            source,
        })
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Err(e) = self.free() {
            log::error!("{e}");
        }
    }
}

// Sessions are shared across threads by servers: keep them Send + Sync.
const _: () = {
    fn assert_send_sync<T: Send + Sync>() {}
    #[allow(dead_code)]
    fn check() {
        assert_send_sync::<Session>();
    }
};
