//! Recorded runs. A provider that can record its queued work (CUDA graphs)
//! runs a graph's first run with given input shapes as usual, records the
//! second, and replays the recording for every later run with those shapes:
//! one launch instead of one per kernel, and none of the executor's per-step
//! work on the host.
//!
//! Replaying is exact because everything a run decides on the host (folded
//! shape arithmetic, launch shapes, which buffers are released where) follows
//! from the input shapes and the model's constants, which the key and the
//! session fix. Anything that needs a device value on the host during a run
//! (a data-dependent `If` or `Loop`, a fallback to another provider) fails
//! the recording; that key is then always run eagerly. The recording owns
//! the input buffers it read (each replay uploads the new inputs into them)
//! and the memory of its intermediates, which the device reuses within the
//! recording as the plan releases them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::Error;
use super::host::{HostRun, read_back, run_on_host};
use super::program::CompiledGraph;
use super::run::{RunOptions, RunResult, run_sharing};
use super::value::DeviceValue;
use crate::dtype::DType;
use crate::ep::{CaptureId, DeviceBuffer, ExecutionProvider, TensorArg};
use crate::plan::MemoryFigures;
use crate::tensor::{Tensor, Value};

/// Each input's dtype and shape, and for device inputs (an IO binding's)
/// the buffer a recording reads it from.
type Key = Vec<(DType, Vec<usize>, Option<DeviceBuffer>)>;

/// The recorded runs of one compiled graph on its providers, keyed by the
/// inputs' dtypes and shapes. Owned next to the graph (a session); free it
/// with [`Replays::free`] before the providers go.
pub struct Replays {
    enabled: bool,
    slots: Mutex<HashMap<Key, Slot>>,
}

enum Slot {
    /// Ran once, eagerly: the next run with this key is recorded.
    Seen,
    /// Being recorded by another run.
    Recording,
    /// Could not be recorded: always run eagerly.
    Declined,
    /// Recorded.
    Ready(Arc<Recording>),
}

struct Recording {
    capture: CaptureId,
    /// The input buffers the recording reads, owned by it.
    inputs: Vec<TensorArg>,
    outputs: Vec<Out>,
    figures: MemoryFigures,
    releases: u64,
    /// The memory timeline measured while recording (a replay makes the same
    /// allocations and frees, inside the graph).
    measured: Vec<u64>,
    peak_bytes: Vec<u64>,
    arena_bytes: Vec<u64>,
    /// Set while a replay is using the recording's inputs and outputs.
    busy: AtomicBool,
}

/// One output of a recording.
enum Out {
    /// Written on the device: the replay hands out its buffer.
    Device(DType, Vec<usize>),
    /// Known when recording (a host value folded from shapes and constants,
    /// or an empty optional): the same in every replay.
    Fixed(DeviceValue),
    /// Written into the buffer of this (lent) input, which the caller shares
    /// with the output: handed back as that input.
    Input(usize),
}

/// Abandons the provider's recording when dropped armed (on a panic).
struct Unwinding<'a>(Option<&'a dyn ExecutionProvider>);

impl Drop for Unwinding<'_> {
    fn drop(&mut self) {
        if let Some(ep) = self.0 {
            ep.abort_capture();
        }
    }
}

/// Clears a recording's `busy` flag when the replay ends, however it ends.
struct Busy<'a>(&'a AtomicBool);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

enum Plan {
    Eager,
    Record,
    Replay(Arc<Recording>),
}

impl Replays {
    /// An empty cache; with `enabled` false every run is eager.
    pub fn new(enabled: bool) -> Self {
        Replays { enabled, slots: Mutex::new(HashMap::new()) }
    }

    /// Whether runs may be recorded at all.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// How many input shapes have a recording now.
    pub fn recorded(&self) -> usize {
        self.slots().values().filter(|s| matches!(s, Slot::Ready(_))).count()
    }

    fn slots(&self) -> MutexGuard<'_, HashMap<Key, Slot>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn plan(&self, key: &Key) -> Plan {
        let mut slots = self.slots();
        match slots.get(key) {
            None => {
                slots.insert(key.clone(), Slot::Seen);
                Plan::Eager
            }
            Some(Slot::Seen) => {
                slots.insert(key.clone(), Slot::Recording);
                Plan::Record
            }
            Some(Slot::Recording | Slot::Declined) => Plan::Eager,
            Some(Slot::Ready(r)) => Plan::Replay(r.clone()),
        }
    }

    fn settle(&self, key: Key, slot: Slot) {
        self.slots().insert(key, slot);
    }

    /// Frees every recording and the input buffers they own.
    ///
    /// # Errors
    /// The first provider error; the rest are still freed.
    pub fn free(&self, providers: &[&dyn ExecutionProvider]) -> Result<(), Error> {
        let slots = std::mem::take(&mut *self.slots());
        let Some(&ep) = providers.first() else { return Ok(()) };
        let mut first = Ok(());
        for slot in slots.into_values() {
            let Slot::Ready(r) = slot else { continue };
            let err = |source| Error::Provider {
                backend: ep.name(),
                action: "freeing a recorded run".into(),
                source,
            };
            let freed = ep.free_capture(r.capture).map_err(err);
            let inputs = r.inputs.iter().try_for_each(|t| ep.deallocate(t.buffer).map_err(err));
            if first.is_ok() {
                first = freed.and(inputs);
            }
        }
        first
    }
}

/// Runs `cg` on host `inputs` like [`run_on_host`], recording and replaying
/// where the one provider can (see the module's documentation). Runs that
/// profile, keep every intermediate, or use several providers are always
/// eager. A replay reports the memory figures (plan, peak, timeline)
/// measured while recording: it makes the same allocations and frees.
///
/// # Errors
/// As [`run_on_host`]. A run whose recording fails is run again eagerly, so
/// its errors are the eager run's.
pub async fn run_on_host_replayed(
    cg: &CompiledGraph,
    providers: &[&dyn ExecutionProvider],
    replays: &Replays,
    inputs: &[Value],
    opts: RunOptions,
) -> Result<HostRun, Error> {
    let key = match replay_key(providers, replays, inputs, &opts) {
        Some(k) => k,
        None => return run_on_host(cg, providers, inputs, opts).await,
    };
    match replays.plan(&key) {
        Plan::Eager => run_on_host(cg, providers, inputs, opts).await,
        Plan::Replay(r) => {
            if r.busy.swap(true, Ordering::Acquire) {
                // Another thread is replaying this shape: run beside it.
                return run_on_host(cg, providers, inputs, opts).await;
            }
            let _busy = Busy(&r.busy);
            replay(providers[0], &r, inputs).await
        }
        Plan::Record => match record(cg, providers[0], inputs, opts).await {
            Ok(Some(r)) => {
                let r = Arc::new(r);
                r.busy.store(true, Ordering::Relaxed);
                replays.settle(key, Slot::Ready(r.clone()));
                let _busy = Busy(&r.busy);
                replay(providers[0], &r, inputs).await
            }
            Ok(None) => {
                replays.settle(key, Slot::Declined);
                run_on_host(cg, providers, inputs, opts).await
            }
            Err(e) => {
                replays.settle(key, Slot::Seen);
                Err(e)
            }
        },
    }
}

/// Whether runs with `opts` on `providers` may be recorded: one provider
/// that records, release on, nothing timed.
fn eligible(providers: &[&dyn ExecutionProvider], replays: &Replays, opts: &RunOptions) -> bool {
    replays.enabled
        && providers.len() == 1
        && providers[0].supports_capture()
        && opts.release_dead_values
        && opts.clock.is_none()
        && opts.launch_clock.is_none()
}

fn replay_key(
    providers: &[&dyn ExecutionProvider],
    replays: &Replays,
    inputs: &[Value],
    opts: &RunOptions,
) -> Option<Key> {
    if !eligible(providers, replays, opts) {
        return None;
    }
    inputs
        .iter()
        .map(|v| match v {
            Value::Tensor(t) if t.dtype().byte_size(t.numel()).is_some() => {
                Some((t.dtype(), t.shape().to_vec(), None))
            }
            _ => None,
        })
        .collect()
}

/// A recording's output `o` for one replay: `buffers` are the replay's own
/// outputs in order, `inputs` the run's lent inputs.
fn replayed_output(
    o: &Out,
    buffers: &mut impl Iterator<Item = DeviceBuffer>,
    inputs: &[DeviceValue],
) -> Result<DeviceValue, Error> {
    Ok(match o {
        Out::Device(dtype, shape) => DeviceValue::Tensor(TensorArg {
            buffer: buffers
                .next()
                .ok_or_else(|| Error::Internal("a replay returned too few outputs".into()))?,
            dtype: *dtype,
            shape: shape.clone(),
        }),
        Out::Fixed(v) => v.clone(),
        Out::Input(j) => inputs
            .get(*j)
            .cloned()
            .ok_or_else(|| Error::Internal("a replay's shared input is gone".into()))?,
    })
}

/// Replays `r` and gives its outputs on the device (`lent`: the run's lent
/// inputs, which outputs written into them come back as). The replay's own
/// buffers are freed if they are not what the recording made.
fn replay_device(
    ep: &dyn ExecutionProvider,
    r: &Recording,
    lent: &[DeviceValue],
) -> Result<Vec<DeviceValue>, Error> {
    let buffers = ep.replay(r.capture).map_err(provider_err(ep, "replaying a recorded run"))?;
    let handed = buffers.clone();
    let mut it = buffers.into_iter();
    let outputs: Result<Vec<DeviceValue>, Error> =
        r.outputs.iter().map(|o| replayed_output(o, &mut it, lent)).collect();
    match outputs {
        Ok(o) if it.next().is_none() => Ok(o),
        _ => {
            for b in handed {
                let _ = ep.deallocate(b);
            }
            Err(Error::Internal("a replay returned other outputs than it recorded".into()))
        }
    }
}

/// Runs `cg` on device inputs (an IO binding's) like
/// [`run_sharing`], recording and replaying as [`run_on_host_replayed`]
/// does. A recording reads its inputs where they are, so its key holds their
/// buffers too: it replays while the same buffers are bound (the binding
/// uploads new values into them), and outputs written into a shared input
/// come back as that input. Returns the run and, for a replay, the peak bytes
/// measured while recording (the run's own, lent inputs not included).
///
/// # Errors
/// As [`run_sharing`]; a run whose recording fails is run again eagerly.
pub async fn run_bound_replayed(
    cg: &CompiledGraph,
    providers: &[&dyn ExecutionProvider],
    replays: &Replays,
    inputs: &[DeviceValue],
    opts: RunOptions,
    shared: &[(usize, usize)],
) -> Result<(RunResult, Option<Vec<u64>>), Error> {
    let eager = || async { Ok((run_sharing(cg, providers, inputs, opts, shared).await?, None)) };
    let key = match bound_key(providers, replays, inputs, &opts) {
        Some(k) => k,
        None => return eager().await,
    };
    let r = match replays.plan(&key) {
        Plan::Eager => return eager().await,
        Plan::Replay(r) => {
            if r.busy.swap(true, Ordering::Acquire) {
                return eager().await;
            }
            r
        }
        Plan::Record => match record_device(cg, providers[0], inputs, opts, shared).await {
            Ok(Some(r)) => {
                let r = Arc::new(r);
                r.busy.store(true, Ordering::Relaxed);
                replays.settle(key, Slot::Ready(r.clone()));
                r
            }
            Ok(None) => {
                replays.settle(key, Slot::Declined);
                return eager().await;
            }
            Err(e) => {
                replays.settle(key, Slot::Seen);
                return Err(e);
            }
        },
    };
    let _busy = Busy(&r.busy);
    let outputs = replay_device(providers[0], &r, inputs)?;
    let run = RunResult {
        outputs,
        figures: r.figures.clone(),
        releases: r.releases,
        measured: r.measured.clone(),
        step_ms: Vec::new(),
        arena_bytes: r.arena_bytes.clone(),
        host: None,
    };
    Ok((run, Some(r.peak_bytes.clone())))
}

fn bound_key(
    providers: &[&dyn ExecutionProvider],
    replays: &Replays,
    inputs: &[DeviceValue],
    opts: &RunOptions,
) -> Option<Key> {
    if !eligible(providers, replays, opts) {
        return None;
    }
    inputs
        .iter()
        .map(|v| match v {
            DeviceValue::Tensor(t) => Some((t.dtype, t.shape.clone(), Some(t.buffer))),
            _ => None,
        })
        .collect()
}

/// Records one run on lent device inputs; `Ok(None)` when it cannot be
/// recorded (nothing of it ran and nothing of it is left). The recording owns
/// no inputs, and its peak leaves them out.
async fn record_device(
    cg: &CompiledGraph,
    ep: &dyn ExecutionProvider,
    inputs: &[DeviceValue],
    opts: RunOptions,
    shared: &[(usize, usize)],
) -> Result<Option<Recording>, Error> {
    if let Err(e) = ep.begin_capture() {
        log::debug!("{} did not start recording: {e}", ep.name());
        return Ok(None);
    }
    // Measured from here: while this thread records, the provider keeps
    // other threads' sessions (which share its figures) waiting.
    ep.reset_peak();
    let baseline = ep.memory_stats().in_use_bytes;
    // A panic inside the recorded run must not leave the provider recording
    // (its other callers would wait at its gate for ever).
    let mut unwinding = Unwinding(Some(ep));
    let ran = run_sharing(cg, &[ep], inputs, opts, shared).await;
    unwinding.0 = None;
    let result = match ran {
        Ok(r) => r,
        Err(e) => {
            // Whatever the run allocated was freed in the recording; abandoning it drops all.
            ep.abort_capture();
            log::debug!("run not recorded on {}: {e:#}", ep.name());
            return Ok(None);
        }
    };
    let peak = ep.memory_stats().peak_bytes.saturating_sub(baseline);
    let lent = |b: DeviceBuffer| {
        inputs.iter().position(|v| matches!(v, DeviceValue::Tensor(t) if t.buffer == b))
    };
    let mut outputs = Vec::with_capacity(result.outputs.len());
    let mut buffers: Vec<DeviceBuffer> = Vec::new();
    for v in &result.outputs {
        outputs.push(match v {
            DeviceValue::Tensor(t) => match lent(t.buffer) {
                Some(j) => Out::Input(j),
                None => {
                    buffers.push(t.buffer);
                    Out::Device(t.dtype, t.shape.clone())
                }
            },
            DeviceValue::Host(_) | DeviceValue::Empty { .. } => Out::Fixed(v.clone()),
            DeviceValue::Sequence(..) => {
                ep.abort_capture();
                log::debug!("run not recorded on {}: it returns a sequence", ep.name());
                return Ok(None);
            }
        });
    }
    match ep.end_capture(&buffers) {
        Ok(capture) => Ok(Some(Recording {
            capture,
            inputs: Vec::new(),
            outputs,
            figures: result.figures,
            releases: result.releases,
            measured: result.measured,
            peak_bytes: vec![peak],
            arena_bytes: result.arena_bytes,
            busy: AtomicBool::new(false),
        })),
        Err(e) => {
            log::debug!("{} could not build the recording: {e}", ep.name());
            Ok(None)
        }
    }
}

fn provider_err<'e>(
    ep: &'e dyn ExecutionProvider,
    action: &'e str,
) -> impl Fn(crate::ep::EpError) -> Error + 'e {
    move |source| Error::Provider { backend: ep.name(), action: action.into(), source }
}

fn tensors(inputs: &[Value]) -> impl Iterator<Item = &Tensor> {
    inputs.iter().filter_map(|v| match v {
        Value::Tensor(t) => Some(t),
        _ => None,
    })
}

fn upload(ep: &dyn ExecutionProvider, to: &TensorArg, t: &Tensor) -> Result<(), Error> {
    let bytes = t.bytes().map_err(|e| Error::Internal(e.to_string()))?;
    ep.upload(to.buffer, bytes).map_err(provider_err(ep, "uploading an input"))
}

/// Records one run. `Ok(None)` when the run cannot be recorded: nothing of
/// it ran and nothing of it is left.
async fn record(
    cg: &CompiledGraph,
    ep: &dyn ExecutionProvider,
    inputs: &[Value],
    opts: RunOptions,
) -> Result<Option<Recording>, Error> {
    let mut owned: Vec<TensorArg> = Vec::new();
    let free_owned = |owned: &[TensorArg]| {
        for t in owned {
            let _ = ep.deallocate(t.buffer);
        }
    };
    for t in tensors(inputs) {
        let size = t.dtype().byte_size(t.numel()).unwrap_or(0) as u64;
        let buffer = match ep.allocate(size, t.dtype().align() as u32) {
            Ok(b) => b,
            Err(source) => {
                free_owned(&owned);
                return Err(Error::Provider {
                    backend: ep.name(),
                    action: "allocating an input".into(),
                    source,
                });
            }
        };
        owned.push(TensorArg { buffer, dtype: t.dtype(), shape: t.shape().to_vec() });
        if let Err(e) = upload(ep, owned.last().expect("pushed"), t) {
            free_owned(&owned);
            return Err(e);
        }
    }
    let input_bytes: u64 = owned.iter().map(|t| t.buffer.size).sum();
    let device_inputs: Vec<DeviceValue> = owned.iter().cloned().map(DeviceValue::Tensor).collect();
    match record_device(cg, ep, &device_inputs, opts, &[]).await {
        Ok(Some(mut r)) => {
            r.peak_bytes[0] += input_bytes;
            r.inputs = owned;
            Ok(Some(r))
        }
        other => {
            free_owned(&owned);
            other
        }
    }
}

/// Uploads `inputs` into the recording's buffers, replays it and reads its outputs back.
async fn replay(
    ep: &dyn ExecutionProvider,
    r: &Recording,
    inputs: &[Value],
) -> Result<HostRun, Error> {
    for (to, t) in r.inputs.iter().zip(tensors(inputs)) {
        upload(ep, to, t)?;
    }
    let outs = replay_device(ep, r, &[])?;
    let outputs = read_back(&[ep], &outs).await?;
    Ok(HostRun {
        outputs,
        figures: r.figures.clone(),
        releases: r.releases,
        measured: r.measured.clone(),
        step_ms: Vec::new(),
        peak_bytes: r.peak_bytes.clone(),
        arena_bytes: r.arena_bytes.clone(),
        host: None,
    })
}
