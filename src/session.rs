//! Sessions: a model compiled for one device (with the CPU as per-node
//! fallback), run with named host tensors.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use onyx_core::dtype::DType;
use onyx_core::ep::{DeviceId, ExecutionProvider};
use onyx_core::exec::{self, CompileOptions, CompiledGraph, Replays, RunOptions};
use onyx_core::graph::{Model, TypeInfo};
use onyx_core::onnx::external::{ExternalData, NoExternalData};
use onyx_core::ops::OpRegistry;
use onyx_core::shape::Shape;
use onyx_core::tensor::Value;
use onyx_cpu::{CpuOptions, CpuProvider};

use crate::device::{self, Device};
use crate::error::{Error, Result};
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
    /// [`MemoryReport::timeline`]'s measured figures (default on). Off saves a
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
            None => device::resolve(requested, self.strict, cpu.clone(), self.gpu)?,
        };
        // The primary device first; the CPU after it for nodes the device cannot run.
        let mut providers = vec![resolved.provider];
        if !self.strict && providers[0].device() != DeviceId::CPU {
            providers.push(Arc::new(CpuProvider::new(cpu)));
        }
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
            workers,
            replays: Replays::new(self.graphs),
            weights,
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
    workers: Workers,
    /// Recorded runs (CUDA graphs), keyed by input shapes.
    replays: Replays,
    /// Weight bytes per provider, subgraphs included: what each run reports
    /// (summed once, not through every subgraph on every run).
    weights: Vec<u64>,
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

/// Memory figures of one run on one device, in bytes (weights excluded).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct DeviceMemory {
    /// The provider (`cpu`, `wgpu:0`, …).
    pub device: String,
    /// Peak bytes in use during the run, from the provider's own accounting.
    pub peak_bytes: u64,
    /// Every byte the run allocated there: the peak if nothing were released.
    pub no_release_bytes: u64,
    /// The plan's live-set bound there: the peak that release at last use allows.
    pub live_set_bound_bytes: u64,
    /// The arena there: the one block that runs with these input shapes
    /// place their intermediates in (measured when this run held it, else
    /// as this run planned it for the next ones; 0 where the device has none).
    pub arena_bytes: u64,
    /// Bytes of weights resident there.
    pub weight_bytes: u64,
}

/// Memory figures of one run. The top-level figures are the primary device's;
/// `devices` has one entry per provider (the primary, then any CPU fallback).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct MemoryReport {
    /// Peak bytes in use on the primary device during the run (provider accounting).
    pub peak_bytes: u64,
    /// Every byte the run allocated on the primary device.
    pub no_release_bytes: u64,
    /// The plan's live-set bound on the primary device.
    pub live_set_bound_bytes: u64,
    /// The arena on the primary device (see [`DeviceMemory::arena_bytes`]).
    pub arena_bytes: u64,
    /// Buffers released at their last use, on all devices.
    pub releases: u64,
    /// Bytes of weights resident on the primary device.
    pub weight_bytes: u64,
    /// The same figures for every device the session uses.
    pub devices: Vec<DeviceMemory>,
    /// Live bytes over the run, all devices together: after the inputs, at
    /// each step (labelled with its node), and with the outputs handed over.
    pub timeline: Vec<TimelineStep>,
}

/// One point of [`MemoryReport::timeline`].
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct TimelineStep {
    /// `inputs`, a node name, or `outputs`.
    pub step: String,
    /// Bytes live with release at last use (the plan's bound at this point).
    pub live_bytes: u64,
    /// Bytes live if nothing were released before the end.
    pub allocated_bytes: u64,
    /// Bytes the providers really held at this point (their own accounting);
    /// `None` for the output hand-over, which the executor does not measure.
    pub measured_bytes: Option<u64>,
    /// The step's wall time in milliseconds, device work included (from
    /// [`Session::run_profiled`]; `None` otherwise and for `inputs`/`outputs`).
    pub ms: Option<f64>,
}

/// Milliseconds since the first call: the clock of profiled runs.
fn now_ms() -> f64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_secs_f64() * 1e3
}

/// What a run times besides its latency.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Timing {
    None,
    /// Every step, with the devices synchronized after each.
    Steps,
    /// Every kernel launch, to tell the host's time from the kernels'.
    Launches,
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
    /// From [`Session::run_host_cost`]: the executor's time and the kernels'.
    pub host: Option<onyx_core::exec::HostCost>,
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

    /// The primary provider's name (`cpu`, …): where the session really runs.
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
        let inputs: Vec<(String, Value)> = inputs.into_iter().map(|(n, v)| (n.into(), v)).collect();
        self.workers.run(|| self.run_inner(inputs, Timing::None))
    }

    /// Runs like [`run`](Self::run), synchronizing every device after each
    /// step to time it: [`TimelineStep::ms`] then holds each node's wall time,
    /// its device work included. Slower than `run`; use it to see where time goes.
    ///
    /// # Errors
    /// As [`run`](Self::run).
    pub fn run_profiled<I, S>(&self, inputs: I) -> Result<RunOutputs>
    where
        I: IntoIterator<Item = (S, Value)>,
        S: Into<String>,
    {
        let inputs: Vec<(String, Value)> = inputs.into_iter().map(|(n, v)| (n.into(), v)).collect();
        self.workers.run(|| self.run_inner(inputs, Timing::Steps))
    }

    /// Runs like [`run`](Self::run), timing every kernel launch (with no
    /// synchronization) so that [`RunOutputs::host`] tells the executor's own
    /// time per step from the kernels'. On the CPU a launch returns when its
    /// kernel is done, so the rest is the host's bookkeeping.
    ///
    /// # Errors
    /// As [`run`](Self::run).
    pub fn run_host_cost<I, S>(&self, inputs: I) -> Result<RunOutputs>
    where
        I: IntoIterator<Item = (S, Value)>,
        S: Into<String>,
    {
        let inputs: Vec<(String, Value)> = inputs.into_iter().map(|(n, v)| (n.into(), v)).collect();
        self.workers.run(|| self.run_inner(inputs, Timing::Launches))
    }

    fn run_inner(&self, inputs: Vec<(String, Value)>, timing: Timing) -> Result<RunOutputs> {
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
        let mut ordered = Vec::with_capacity(g.inputs.len());
        for &i in &g.inputs {
            let name = &g.value(i).name;
            ordered.push(by_name.remove(name).ok_or_else(|| Error::Input {
                name: name.clone(),
                reason: "not provided".into(),
            })?);
        }
        let opts = RunOptions {
            release_dead_values: self.release,
            measure_timeline: self.timeline,
            clock: (timing == Timing::Steps).then_some(now_ms as fn() -> f64),
            launch_clock: (timing == Timing::Launches).then_some(now_ms as fn() -> f64),
        };
        let refs = self.providers();
        let run = exec::run_on_host_replayed(&self.program, &refs, &self.replays, &ordered, opts);
        let ran = pollster::block_on(run)
            .map_err(|source| Error::Run { device: self.device.clone(), source })?;
        let timeline = ran.timeline(&self.program);
        let names = g.outputs.iter().map(|&o| g.value(o).name.clone());
        let values: Vec<(String, Value)> = names.zip(ran.outputs).collect();
        let (figures, releases) = (ran.figures, ran.releases);
        if self.providers.len() > 1 {
            let counts = self.kernels_per_device();
            log::info!("{} kernel nodes ran on {} (fallback)", counts[1].1, counts[1].0);
        }
        let weights = &self.weights;
        let devices: Vec<DeviceMemory> = self
            .providers
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let pf = figures.per_provider.get(i).copied().unwrap_or_default();
                DeviceMemory {
                    device: p.name(),
                    peak_bytes: ran.peak_bytes[i],
                    no_release_bytes: pf.no_release_bytes,
                    live_set_bound_bytes: pf.live_set_bound,
                    arena_bytes: ran.arena_bytes.get(i).copied().unwrap_or(0),
                    weight_bytes: weights[i],
                }
            })
            .collect();
        Ok(RunOutputs {
            values,
            memory: MemoryReport {
                peak_bytes: devices[0].peak_bytes,
                no_release_bytes: devices[0].no_release_bytes,
                live_set_bound_bytes: devices[0].live_set_bound_bytes,
                arena_bytes: devices[0].arena_bytes,
                releases,
                weight_bytes: devices[0].weight_bytes,
                devices,
                timeline: timeline
                    .into_iter()
                    .map(|p| TimelineStep {
                        step: p.step,
                        live_bytes: p.live_bytes,
                        allocated_bytes: p.allocated_bytes,
                        measured_bytes: p.measured_bytes,
                        ms: p.ms,
                    })
                    .collect(),
            },
            latency: start.elapsed(),
            host: ran.host,
        })
    }

    /// Frees the session's weights now (also done on drop).
    ///
    /// # Errors
    /// [`Error::Provider`] if a provider rejects a free.
    pub fn close(mut self) -> Result<()> {
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
