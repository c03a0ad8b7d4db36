//! Running a compiled graph on host values: upload the inputs to the primary
//! provider, run, read the outputs back, and free every buffer this made —
//! on success and on failure. Asynchronous, so the browser awaits it and
//! native callers block on it.

use super::Error;
use super::program::CompiledGraph;
use super::run::{RunOptions, run};
use super::value::DeviceValue;
use crate::ep::{DeviceBuffer, ExecutionProvider, TensorArg};
use crate::plan::MemoryFigures;
use crate::tensor::{Tensor, Value};

/// What a host run returns.
#[derive(Debug)]
pub struct HostRun {
    /// One value per graph output, in order.
    pub outputs: Vec<Value>,
    /// The planner's memory figures for this run.
    pub figures: MemoryFigures,
    /// Buffers released at last use.
    pub releases: u64,
    /// The measured timeline, when asked for (see [`super::RunResult::measured`]).
    pub measured: Vec<u64>,
    /// Step wall times when profiling (see [`super::RunResult::step_ms`]).
    pub step_ms: Vec<f64>,
    /// Per provider: the peak of bytes in use during the run (inputs, uploads
    /// and read-backs included) less what it held before, from its own accounting.
    pub peak_bytes: Vec<u64>,
    /// Per provider: the most arena bytes held at once during the run, from
    /// its own accounting; where the run held none (the first run with these
    /// input shapes plans the arena), the arena its schedule plans.
    pub arena_bytes: Vec<u64>,
    /// With [`RunOptions::launch_clock`](super::RunOptions): the executor's time and the kernels'.
    pub host: Option<super::HostCost>,
}

/// One point of a run's memory timeline, labelled: the plan's figures with
/// what was measured there.
#[derive(Clone, Debug, PartialEq)]
pub struct StepPoint {
    /// `inputs`, a node name, or `outputs`.
    pub step: String,
    /// Bytes live with release at last use, from the plan.
    pub live_bytes: u64,
    /// Bytes live if nothing were released, from the plan.
    pub allocated_bytes: u64,
    /// Bytes the providers really held (with `measure_timeline`; never for `outputs`).
    pub measured_bytes: Option<u64>,
    /// The step's wall time in milliseconds (when profiling; nodes only).
    pub ms: Option<f64>,
}

impl HostRun {
    /// The timeline of this run of `cg`: the inputs, each top-level step, the outputs.
    pub fn timeline(&self, cg: &CompiledGraph) -> Vec<StepPoint> {
        cg.timeline_labels()
            .into_iter()
            .zip(&self.figures.timeline)
            .enumerate()
            .map(|(i, (step, p))| StepPoint {
                step,
                live_bytes: p.live_bytes,
                allocated_bytes: p.allocated_bytes,
                measured_bytes: self.measured.get(i).copied(),
                ms: i.checked_sub(1).and_then(|s| self.step_ms.get(s).copied()),
            })
            .collect()
    }
}

/// Runs `cg` on host `inputs` (one per graph input, in order).
///
/// # Errors
/// [`Error::Input`] for inputs that cannot be uploaded, [`Error::Provider`]
/// for failed transfers, and the run's own errors. Nothing stays allocated.
pub async fn run_on_host(
    cg: &CompiledGraph,
    providers: &[&dyn ExecutionProvider],
    inputs: &[Value],
    opts: RunOptions,
) -> Result<HostRun, Error> {
    let mut baselines = Vec::with_capacity(providers.len());
    for p in providers {
        p.reset_peak();
        let st = p.memory_stats();
        baselines.push((st.in_use_bytes, st.arena_bytes));
    }
    let mut uploaded = Vec::new();
    let result = upload_and_run(cg, providers, inputs, opts, &mut uploaded).await;
    // Inputs were lent to the run: they are ours to free, success or not.
    let ep = providers[0];
    let mut freed = Ok(());
    for b in uploaded {
        if let Err(source) = ep.deallocate(b) {
            if freed.is_ok() {
                freed = Err(Error::Provider {
                    backend: ep.name(),
                    action: "freeing an input".into(),
                    source,
                });
            }
        }
    }
    // The run's own error, if any, is the one to report.
    let mut run = result?;
    freed?;
    let stats: Vec<_> = providers.iter().map(|p| p.memory_stats()).collect();
    run.peak_bytes =
        stats.iter().zip(&baselines).map(|(s, b)| s.peak_bytes.saturating_sub(b.0)).collect();
    run.arena_bytes = stats
        .iter()
        .zip(&baselines)
        .zip(&run.arena_bytes)
        .map(|((s, b), &planned)| match s.arena_peak_bytes.saturating_sub(b.1) {
            0 => planned,
            held => held,
        })
        .collect();
    Ok(run)
}

async fn upload_and_run(
    cg: &CompiledGraph,
    providers: &[&dyn ExecutionProvider],
    inputs: &[Value],
    opts: RunOptions,
    uploaded: &mut Vec<DeviceBuffer>,
) -> Result<HostRun, Error> {
    let g = &cg.graph;
    let ep = providers[0];
    let mut device_inputs = Vec::with_capacity(inputs.len());
    for (&i, value) in g.inputs.iter().zip(inputs) {
        let name = &g.value(i).name;
        let mut upload = |t: &Tensor| -> Result<TensorArg, Error> {
            let bytes = t
                .bytes()
                .map_err(|e| Error::Input { name: name.clone(), reason: e.to_string() })?;
            let provider_err = |action: String| {
                move |source| Error::Provider { backend: ep.name(), action, source }
            };
            let buffer = ep
                .allocate(bytes.len() as u64, t.dtype().align() as u32)
                .map_err(provider_err(format!("allocating input '{name}'")))?;
            uploaded.push(buffer);
            ep.upload(buffer, bytes).map_err(provider_err(format!("uploading input '{name}'")))?;
            Ok(TensorArg { buffer, dtype: t.dtype(), shape: t.shape().to_vec() })
        };
        device_inputs.push(match value {
            Value::Tensor(t) if t.dtype().byte_size(t.numel()).is_none() => {
                DeviceValue::Host(t.clone())
            }
            Value::Tensor(t) => DeviceValue::Tensor(upload(t)?),
            Value::Sequence(d, ts) => {
                DeviceValue::Sequence(*d, ts.iter().map(&mut upload).collect::<Result<_, Error>>()?)
            }
            Value::Empty { dtype, sequence } => {
                DeviceValue::Empty { dtype: *dtype, sequence: *sequence }
            }
        });
    }
    let result = run(cg, providers, &device_inputs, opts).await?;
    let outputs = read_back(providers, &result.outputs).await?;
    Ok(HostRun {
        outputs,
        figures: result.figures,
        releases: result.releases,
        measured: result.measured,
        step_ms: result.step_ms,
        peak_bytes: Vec::new(),
        arena_bytes: result.arena_bytes,
        host: result.host,
    })
}

/// Reads each output back, then frees its buffers (even if a read fails).
/// The outputs are the caller's, so whatever happens they are freed here.
pub(super) async fn read_back(
    providers: &[&dyn ExecutionProvider],
    outs: &[DeviceValue],
) -> Result<Vec<Value>, Error> {
    let mut outputs = Vec::with_capacity(outs.len());
    let mut first_err = None;
    for out in outs {
        let read = match out {
            DeviceValue::Tensor(t) => download(providers, t).await.map(Value::Tensor),
            DeviceValue::Sequence(d, ts) => {
                let mut items = Vec::with_capacity(ts.len());
                let mut err = None;
                for t in ts {
                    match download(providers, t).await {
                        Ok(v) => items.push(v),
                        Err(e) => {
                            err.get_or_insert(e);
                        }
                    }
                }
                match err {
                    Some(e) => Err(e),
                    None => Ok(Value::Sequence(*d, items)),
                }
            }
            DeviceValue::Empty { dtype, sequence } => {
                Ok(Value::Empty { dtype: *dtype, sequence: *sequence })
            }
            DeviceValue::Host(t) => Ok(Value::Tensor(t.clone())),
        };
        match read {
            Ok(v) => outputs.push(v),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    for out in outs {
        let bufs: Vec<DeviceBuffer> = match out {
            DeviceValue::Tensor(t) => vec![t.buffer],
            DeviceValue::Sequence(_, ts) => ts.iter().map(|t| t.buffer).collect(),
            DeviceValue::Empty { .. } | DeviceValue::Host(_) => vec![],
        };
        for b in bufs {
            if let Err(e) = provider_for(providers, b).and_then(|p| {
                p.deallocate(b).map_err(|source| Error::Provider {
                    backend: p.name(),
                    action: "freeing an output".into(),
                    source,
                })
            }) {
                first_err.get_or_insert(e);
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(outputs),
    }
}

fn provider_for<'p>(
    providers: &[&'p dyn ExecutionProvider],
    b: DeviceBuffer,
) -> Result<&'p dyn ExecutionProvider, Error> {
    providers
        .iter()
        .find(|p| p.device() == b.device)
        .copied()
        .ok_or_else(|| Error::Internal(format!("no provider for {}", b.device)))
}

async fn download(providers: &[&dyn ExecutionProvider], t: &TensorArg) -> Result<Tensor, Error> {
    let ep = provider_for(providers, t.buffer)?;
    let len = t.dtype.byte_size(t.numel()).unwrap_or(0);
    let bytes = ep.download(t.buffer, len).await.map_err(|source| Error::Provider {
        backend: ep.name(),
        action: "reading an output back".into(),
        source,
    })?;
    Tensor::from_bytes(t.dtype, t.shape.clone(), bytes.into())
        .map_err(|e| Error::Internal(e.to_string()))
}
