//! IO binding: runs whose inputs and outputs stay on the session's device
//! between runs, as `ort`'s `IoBinding` does. A decoder's KV cache goes from
//! one step's `present.*` outputs to the next step's `past_key_values.*`
//! inputs without crossing to the host; only what the caller asks for
//! ([`IoBinding::output_to_host`]) is read back.
//!
//! The binding owns its device buffers and frees them (through the
//! provider's `deallocate`) when they are replaced, when it is cleared and
//! when it is dropped. Where the session records runs (CUDA graphs), the
//! binding records its own, keyed by the input shapes and the bound buffers:
//! a decode step whose inputs stay in the same buffers (new values are
//! uploaded into them, the KV cache is shared in place) replays one graph.
//! They are freed with the binding.

use std::collections::HashMap;

use onyx_core::dtype::DType;
use onyx_core::ep::{DeviceBuffer, ExecutionProvider, TensorArg};
use onyx_core::exec::{self, DeviceValue, Replays, RunOptions};
use onyx_core::shape::Shape;
use onyx_core::tensor::{Tensor, Value};

use super::report::MemoryReport;
use super::{Instant, Session};
use crate::error::{Error, Result};

/// Device-resident inputs and outputs of a [`Session`]: see the module docs.
pub struct IoBinding<'s> {
    session: &'s Session,
    /// Bound inputs, by model input name.
    inputs: HashMap<String, DeviceValue>,
    /// The last run's outputs that are still held, by model output name.
    outputs: HashMap<String, DeviceValue>,
    /// `(output index, input index)` pairs written into one buffer
    /// ([`IoBinding::share_buffer`]).
    shared: Vec<(usize, usize)>,
    /// Runs recorded on this binding's buffers (CUDA graphs), freed with them.
    replays: Replays,
}

/// What [`Session::run_binding`] reports; the outputs stay in the binding.
#[derive(Debug)]
pub struct BoundRun {
    /// Memory figures of the run: `peak_bytes` counts the bound inputs, the
    /// intermediates and the outputs, as [`Session::run`] does.
    pub memory: MemoryReport,
    /// Wall time of the run (no transfers: nothing is uploaded or read back).
    pub latency: std::time::Duration,
    /// The run replayed a recording (a CUDA graph) made on these buffers.
    pub replayed: bool,
}

fn buffers(v: &DeviceValue) -> Vec<DeviceBuffer> {
    match v {
        DeviceValue::Tensor(t) => vec![t.buffer],
        DeviceValue::Sequence(_, ts) => ts.iter().map(|t| t.buffer).collect(),
        DeviceValue::Empty { .. } | DeviceValue::Host(_) => Vec::new(),
    }
}

fn bytes(v: &DeviceValue) -> u64 {
    buffers(v).iter().map(|b| b.size).sum()
}

impl Session {
    /// An empty binding for this session's inputs and outputs.
    pub fn create_binding(&self) -> IoBinding<'_> {
        IoBinding {
            session: self,
            inputs: HashMap::new(),
            outputs: HashMap::new(),
            shared: Vec::new(),
            replays: Replays::new(self.replays.enabled()),
        }
    }

    /// Runs the model on the binding's inputs, blocking, on the session's
    /// threads. The outputs replace the binding's previous ones and stay on
    /// the device.
    ///
    /// # Errors
    /// As [`run_binding_async`](Self::run_binding_async).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn run_binding(&self, binding: &mut IoBinding<'_>) -> Result<BoundRun> {
        self.workers.run(|| pollster::block_on(self.run_binding_async(binding)))
    }

    /// Runs the model on the binding's inputs (see [`run_binding`](Self::run_binding)).
    ///
    /// # Errors
    /// [`Error::Input`] for an input not bound or a binding of another
    /// session; [`Error::Run`] as [`Session::run`]. On failure the binding's
    /// inputs are kept and it holds no outputs.
    pub async fn run_binding_async(&self, binding: &mut IoBinding<'_>) -> Result<BoundRun> {
        if self.released {
            return Err(Error::Released);
        }
        if !std::ptr::eq(binding.session, self) {
            return Err(Error::Input {
                name: "(binding)".into(),
                reason: "the binding belongs to another session".into(),
            });
        }
        binding.clear_outputs()?;
        let g = &self.model.graph;
        let mut ordered = Vec::with_capacity(g.inputs.len());
        for &i in &g.inputs {
            let name = &g.value(i).name;
            ordered.push(
                binding.inputs.get(name).cloned().ok_or_else(|| Error::Input {
                    name: name.clone(),
                    reason: "not bound".into(),
                })?,
            );
        }
        let start = Instant::now();
        let refs = self.providers();
        let mut baselines = Vec::with_capacity(refs.len());
        for p in &refs {
            p.reset_peak();
            let st = p.memory_stats();
            baselines.push((st.in_use_bytes, st.arena_bytes));
        }
        let opts = RunOptions { release_dead_values: self.release, ..RunOptions::default() };
        let (ran, recorded_peak) = exec::run_bound_replayed(
            &self.program,
            &refs,
            &binding.replays,
            &ordered,
            opts,
            &binding.shared,
        )
        .await
        .map_err(|source| Error::Run { device: self.device.clone(), source })?;
        let lent: u64 = ordered.iter().map(bytes).sum();
        let stats: Vec<_> = refs.iter().map(|p| p.memory_stats()).collect();
        let peak: Vec<u64> = stats
            .iter()
            .zip(&baselines)
            .enumerate()
            .map(|(i, (s, b))| {
                // A replay's intermediates live inside the recording: its
                // peak is the one measured when it was recorded.
                let own = match &recorded_peak {
                    Some(p) => p.get(i).copied().unwrap_or(0),
                    None => s.peak_bytes.saturating_sub(b.0),
                };
                if i == 0 { own + lent } else { own }
            })
            .collect();
        let arena: Vec<u64> = stats
            .iter()
            .zip(&baselines)
            .zip(&ran.arena_bytes)
            .map(|((s, b), &planned)| match s.arena_peak_bytes.saturating_sub(b.1) {
                0 => planned,
                held => held,
            })
            .collect();
        let names = g.outputs.iter().map(|&o| g.value(o).name.clone());
        binding.outputs = names.zip(ran.outputs).collect();
        let memory = self.memory_report(&ran.figures, ran.releases, &peak, &arena, Vec::new());
        Ok(BoundRun { memory, latency: start.elapsed(), replayed: recorded_peak.is_some() })
    }
}

impl<'s> IoBinding<'s> {
    /// Uploads `value` to the session's device as input `name`, replacing
    /// (and freeing) what was bound there.
    ///
    /// # Errors
    /// [`Error::Input`] for a name the model does not have or a value that
    /// cannot be uploaded; [`Error::Provider`] for a failed transfer.
    pub fn bind_input(&mut self, name: &str, value: &Value) -> Result<()> {
        self.check_input(name)?;
        let ep = self.session.provider();
        if let Value::Tensor(t) = value {
            if let Some(reused) = self.reuse_input(name, t)? {
                self.inputs.insert(name.into(), reused);
                return Ok(());
            }
        }
        let mut made: Vec<DeviceBuffer> = Vec::new();
        let uploaded = (|| {
            let mut upload = |t: &Tensor| -> Result<TensorArg> {
                let data = t
                    .bytes()
                    .map_err(|e| Error::Input { name: name.into(), reason: e.to_string() })?;
                let buffer = ep
                    .allocate(data.len() as u64, t.dtype().align() as u32)
                    .map_err(provider_err(ep, format!("allocating input '{name}'")))?;
                made.push(buffer);
                ep.upload(buffer, data).map_err(provider_err(ep, format!("uploading '{name}'")))?;
                Ok(TensorArg { buffer, dtype: t.dtype(), shape: t.shape().to_vec() })
            };
            Ok(match value {
                Value::Tensor(t) if t.dtype().byte_size(t.numel()).is_none() => {
                    DeviceValue::Host(t.clone())
                }
                Value::Tensor(t) => DeviceValue::Tensor(upload(t)?),
                Value::Sequence(d, ts) => {
                    DeviceValue::Sequence(*d, ts.iter().map(&mut upload).collect::<Result<_>>()?)
                }
                Value::Empty { dtype, sequence } => {
                    DeviceValue::Empty { dtype: *dtype, sequence: *sequence }
                }
            })
        })();
        match uploaded {
            Ok(v) => self.set_input(name, v),
            Err(e) => {
                for b in made {
                    let _ = ep.deallocate(b);
                }
                Err(e)
            }
        }
    }

    /// Has later runs write output `output` into the buffer bound as input
    /// `input`, as onnxruntime-genai's `past_present_share_buffer` binds a
    /// decoder's KV cache: the present cache is the past one, updated in
    /// place, and the device holds it once. It applies where the op making the
    /// output allows it (com.microsoft `GroupQueryAttention`'s present key and
    /// value over its past ones), the input is on the session's device and
    /// has the output's size, and nothing else in the model reads the input;
    /// elsewhere the output gets a buffer of its own as before. A shared
    /// output held after a run is the input's buffer: move it back with
    /// [`bind_output_as_input`](Self::bind_output_as_input) (no copy, nothing
    /// freed).
    ///
    /// # Errors
    /// [`Error::Input`] for a name the model does not have.
    pub fn share_buffer(&mut self, output: &str, input: &str) -> Result<()> {
        self.check_input(input)?;
        let g = &self.session.model.graph;
        let o = g.outputs.iter().position(|&o| g.value(o).name == output).ok_or_else(|| {
            Error::Input { name: output.into(), reason: "the model has no such output".into() }
        })?;
        let i = g.inputs.iter().position(|&i| g.value(i).name == input).expect("checked above");
        if !self.shared.contains(&(o, i)) {
            self.shared.push((o, i));
        }
        Ok(())
    }

    /// Moves the last run's output `output` into input `input` without a
    /// copy (the old input is freed): how a decoder's `present.N.key` becomes
    /// the next step's `past_key_values.N.key`. An output that a CPU
    /// fallback produced is copied to the primary device first.
    ///
    /// # Errors
    /// As [`bind_output_as_input_async`](Self::bind_output_as_input_async).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn bind_output_as_input(&mut self, output: &str, input: &str) -> Result<()> {
        pollster::block_on(self.bind_output_as_input_async(output, input))
    }

    /// Moves output `output` into input `input` (see
    /// [`bind_output_as_input`](Self::bind_output_as_input)).
    ///
    /// # Errors
    /// [`Error::Input`] for unknown names or an output the last run did not
    /// leave; [`Error::Provider`] for a failed transfer (the output stays held).
    pub async fn bind_output_as_input_async(&mut self, output: &str, input: &str) -> Result<()> {
        self.check_input(input)?;
        let v = self.outputs.remove(output).ok_or_else(|| Error::Input {
            name: output.into(),
            reason: "no such output is held (run the binding first)".into(),
        })?;
        match self.to_primary(&v).await {
            Ok(moved) => self.set_input(input, moved),
            Err(e) => {
                self.outputs.insert(output.into(), v);
                Err(e)
            }
        }
    }

    /// The dtype and shape of a held output.
    pub fn output_shape(&self, name: &str) -> Option<(onyx_core::dtype::DType, Shape)> {
        match self.outputs.get(name)? {
            DeviceValue::Tensor(t) => Some((t.dtype, Shape::known(&t.shape))),
            DeviceValue::Host(t) => Some((t.dtype(), Shape::known(t.shape()))),
            _ => None,
        }
    }

    /// The dtype and shape of a bound input.
    pub fn input_shape(&self, name: &str) -> Option<(onyx_core::dtype::DType, Shape)> {
        match self.inputs.get(name)? {
            DeviceValue::Tensor(t) => Some((t.dtype, Shape::known(&t.shape))),
            DeviceValue::Host(t) => Some((t.dtype(), Shape::known(t.shape()))),
            _ => None,
        }
    }

    /// Reads output `name` back to the host, blocking. The output stays bound.
    ///
    /// # Errors
    /// As [`output_to_host_async`](Self::output_to_host_async).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn output_to_host(&self, name: &str) -> Result<Tensor> {
        pollster::block_on(self.output_to_host_async(name))
    }

    /// Reads output `name` back to the host. The output stays bound.
    ///
    /// # Errors
    /// [`Error::Input`] for an output that is not held or not a tensor;
    /// [`Error::Provider`] for a failed transfer.
    pub async fn output_to_host_async(&self, name: &str) -> Result<Tensor> {
        match self.outputs.get(name) {
            Some(DeviceValue::Tensor(t)) => self.download(t).await,
            Some(DeviceValue::Host(t)) => Ok(t.clone()),
            Some(_) => Err(Error::Input { name: name.into(), reason: "not a tensor".into() }),
            None => {
                Err(Error::Input { name: name.into(), reason: "no such output is held".into() })
            }
        }
    }

    /// Reads row `row` of output `name` back to the host: the output seen as
    /// rows of its last dimension (`[batch, seq, vocab]` logits have
    /// `batch · seq` rows), only that row's bytes moved. The output stays bound.
    ///
    /// # Errors
    /// As [`output_to_host`](Self::output_to_host); [`Error::Input`] for a row
    /// past the end.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn output_row_to_host(&self, name: &str, row: usize) -> Result<Tensor> {
        pollster::block_on(self.output_row_to_host_async(name, row))
    }

    /// Reads one row of output `name` back to the host (see
    /// [`output_row_to_host`](Self::output_row_to_host)).
    ///
    /// # Errors
    /// As [`output_row_to_host`](Self::output_row_to_host).
    pub async fn output_row_to_host_async(&self, name: &str, row: usize) -> Result<Tensor> {
        let bad = |reason: String| Error::Input { name: name.into(), reason };
        // `(row width, byte offset, byte length)` of the row.
        let span = |dtype: DType, shape: &[usize]| -> Result<(usize, usize, usize)> {
            let width = shape.last().copied().unwrap_or(1);
            let rows = shape.iter().product::<usize>().checked_div(width).unwrap_or(0);
            if row >= rows {
                return Err(bad(format!(
                    "row {row} of an output of shape {shape:?} ({rows} rows)"
                )));
            }
            match (dtype.byte_size(row * width), dtype.byte_size(width)) {
                (Some(offset), Some(len)) => Ok((width, offset, len)),
                _ => Err(bad(format!("{dtype:?} rows are not whole bytes"))),
            }
        };
        let (dtype, width, data) = match self.outputs.get(name) {
            Some(DeviceValue::Tensor(t)) => {
                let (width, offset, len) = span(t.dtype, &t.shape)?;
                let p = self.provider_of(t.buffer)?;
                let data = p
                    .download_range(t.buffer, offset as u64, len)
                    .await
                    .map_err(provider_err(p, "reading back".into()))?;
                (t.dtype, width, data)
            }
            Some(DeviceValue::Host(t)) => {
                let (width, offset, len) = span(t.dtype(), t.shape())?;
                let bytes = t.bytes().map_err(|e| bad(e.to_string()))?;
                (t.dtype(), width, bytes[offset..offset + len].to_vec())
            }
            Some(_) => return Err(bad("not a tensor".into())),
            None => return Err(bad("no such output is held".into())),
        };
        Tensor::from_bytes(dtype, vec![width], data.into()).map_err(|e| bad(e.to_string()))
    }

    /// Bytes the binding holds on the devices now (inputs and outputs; a
    /// buffer bound as both counts once).
    pub fn held_bytes(&self) -> u64 {
        let mut seen: Vec<DeviceBuffer> = Vec::new();
        for b in self.inputs.values().chain(self.outputs.values()).flat_map(buffers) {
            if !seen.contains(&b) {
                seen.push(b);
            }
        }
        seen.iter().map(|b| b.size).sum()
    }

    /// How many bound inputs and held outputs refer to `b`.
    fn refs(&self, b: DeviceBuffer) -> usize {
        self.inputs
            .values()
            .chain(self.outputs.values())
            .filter(|v| buffers(v).contains(&b))
            .count()
    }

    /// Frees every bound input and held output.
    ///
    /// # Errors
    /// [`Error::Provider`] if a provider rejects a free (the rest are still freed).
    pub fn clear(&mut self) -> Result<()> {
        // Recordings read the bound buffers: they go first.
        let refs: Vec<&dyn ExecutionProvider> =
            self.session.providers.iter().map(|p| &**p).collect();
        let recordings = self
            .replays
            .free(&refs)
            .map_err(|source| Error::Run { device: self.session.device.clone(), source });
        let outputs = self.clear_outputs().and(recordings);
        let inputs: Vec<DeviceValue> = self.inputs.drain().map(|(_, v)| v).collect();
        let mut first = outputs.err();
        for v in inputs {
            if let Err(e) = self.free(&v) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    fn clear_outputs(&mut self) -> Result<()> {
        let outputs: Vec<DeviceValue> = self.outputs.drain().map(|(_, v)| v).collect();
        let mut first = None;
        for v in outputs {
            if let Err(e) = self.free(&v) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// `t` uploaded into the buffer already bound as `name`, where that
    /// buffer is the binding's alone and of `t`'s dtype and byte size: the
    /// buffer stays where a recorded run reads it. `None` where it cannot be.
    fn reuse_input(&self, name: &str, t: &Tensor) -> Result<Option<DeviceValue>> {
        let Some(DeviceValue::Tensor(old)) = self.inputs.get(name) else { return Ok(None) };
        let Ok(data) = t.bytes() else { return Ok(None) };
        let ep = self.session.provider();
        if old.dtype != t.dtype()
            || old.buffer.size != data.len() as u64
            || old.buffer.device != ep.device()
            || self.refs(old.buffer) > 1
        {
            return Ok(None);
        }
        ep.upload(old.buffer, data).map_err(provider_err(ep, format!("uploading '{name}'")))?;
        Ok(Some(DeviceValue::Tensor(TensorArg {
            buffer: old.buffer,
            dtype: t.dtype(),
            shape: t.shape().to_vec(),
        })))
    }

    fn check_input(&self, name: &str) -> Result<()> {
        let g = &self.session.model.graph;
        if g.inputs.iter().any(|&i| g.value(i).name == name) {
            return Ok(());
        }
        let known: Vec<&str> = g.inputs.iter().map(|&i| g.value(i).name.as_str()).collect();
        Err(Error::Input {
            name: name.into(),
            reason: format!("the model has no such input (inputs: {})", known.join(", ")),
        })
    }

    fn set_input(&mut self, name: &str, v: DeviceValue) -> Result<()> {
        match self.inputs.insert(name.into(), v) {
            Some(old) => self.free(&old),
            None => Ok(()),
        }
    }

    fn provider_of(&self, b: DeviceBuffer) -> Result<&'s dyn ExecutionProvider> {
        self.session.providers.iter().map(|p| &**p).find(|p| p.device() == b.device).ok_or_else(
            || Error::Input {
                name: "(binding)".into(),
                reason: format!("a buffer on {} belongs to no provider of the session", b.device),
            },
        )
    }

    /// Frees `v`'s buffers, except those the binding still holds elsewhere
    /// (an output written into an input's buffer).
    fn free(&self, v: &DeviceValue) -> Result<()> {
        let mut first = None;
        for b in buffers(v).into_iter().filter(|&b| self.refs(b) == 0) {
            let freed = self.provider_of(b).and_then(|p| {
                p.deallocate(b).map_err(provider_err(p, "freeing a bound value".into()))
            });
            if let Err(e) = freed {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    async fn download(&self, t: &TensorArg) -> Result<Tensor> {
        let p = self.provider_of(t.buffer)?;
        let len = t.dtype.byte_size(t.shape.iter().product()).unwrap_or(0);
        let data =
            p.download(t.buffer, len).await.map_err(provider_err(p, "reading back".into()))?;
        Tensor::from_bytes(t.dtype, t.shape.clone(), data.into())
            .map_err(|e| Error::Input { name: "(output)".into(), reason: e.to_string() })
    }

    /// `v` on the primary device: itself if it is there already, else a copy
    /// (and `v` freed). Only tensors move; sequences must already be there.
    async fn to_primary(&self, v: &DeviceValue) -> Result<DeviceValue> {
        let primary = self.session.provider();
        let DeviceValue::Tensor(t) = v else { return Ok(v.clone()) };
        if t.buffer.device == primary.device() {
            return Ok(v.clone());
        }
        let host = self.download(t).await?;
        let data = host
            .bytes()
            .map_err(|e| Error::Input { name: "(output)".into(), reason: e.to_string() })?;
        let buffer = primary
            .allocate(data.len() as u64, t.dtype.align() as u32)
            .map_err(provider_err(primary, "allocating a moved output".into()))?;
        if let Err(source) = primary.upload(buffer, data) {
            let _ = primary.deallocate(buffer);
            return Err(Error::Provider {
                backend: primary.name(),
                action: "moving an output".into(),
                source,
            });
        }
        self.free(v)?;
        Ok(DeviceValue::Tensor(TensorArg { buffer, dtype: t.dtype, shape: t.shape.clone() }))
    }
}

impl Drop for IoBinding<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.clear() {
            log::error!("{}", crate::error_chain(&e));
        }
    }
}

fn provider_err(
    ep: &dyn ExecutionProvider,
    action: String,
) -> impl FnOnce(onyx_core::ep::EpError) -> Error + '_ {
    move |source| Error::Provider { backend: ep.name(), action, source }
}
