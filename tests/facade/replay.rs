//! Recorded runs (`exec/replay.rs`), without a GPU: a CPU provider that
//! records like a CUDA graph does. While recording, nothing runs: uploads,
//! launches and copies are kept in order, allocations are the recording's
//! for good, frees are no-ops, and reading back fails. A replay runs what was
//! kept and hands out copies of the outputs. The CUDA provider's own
//! recording is tested on the GPU (`tests/facade/cuda/graphs.rs`).

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::*;
use onyx::core::ep::{
    BoxFuture, CaptureId, DeviceBuffer, DeviceId, EpError, ExecutionProvider, KernelId, KernelSpec,
    Launch, MemoryStats, TensorArg,
};
use onyx::{DType, Tensor, Value};
use onyx_cpu::CpuProvider;

enum Step {
    Upload(DeviceBuffer, Vec<u8>),
    Launch(KernelId, Vec<Option<TensorArg>>, Vec<Option<TensorArg>>, Vec<Option<Tensor>>),
    Copy(DeviceBuffer, DeviceBuffer, u64),
}

#[derive(Default)]
struct Recording {
    steps: Vec<Step>,
    /// Every buffer allocated while recording: the recording's until it is freed.
    owned: Vec<DeviceBuffer>,
    outputs: Vec<DeviceBuffer>,
    handed: Vec<DeviceBuffer>,
}

#[derive(Default)]
struct Tape {
    recording: Option<Recording>,
    done: HashMap<u32, Recording>,
    next: u32,
    /// Buffers handed out by replays and not yet freed.
    live_handed: Vec<DeviceBuffer>,
}

/// The CPU provider, recording on request.
struct Recorder {
    inner: CpuProvider,
    tape: Mutex<Tape>,
    replays: AtomicUsize,
    launches: AtomicUsize,
}

impl Recorder {
    fn new() -> Self {
        Recorder {
            inner: CpuProvider::new(Default::default()),
            tape: Mutex::new(Tape::default()),
            replays: AtomicUsize::new(0),
            launches: AtomicUsize::new(0),
        }
    }

    fn recording(&self) -> bool {
        self.tape.lock().unwrap().recording.is_some()
    }

    fn run(&self, step: &Step) -> Result<(), EpError> {
        match step {
            Step::Upload(b, data) => self.inner.upload(*b, data),
            Step::Launch(k, i, o, v) => {
                self.launches.fetch_add(1, Ordering::Relaxed);
                self.inner.launch(*k, &Launch { inputs: i, outputs: o, values: v })
            }
            Step::Copy(s, d, n) => self.inner.copy(*s, *d, *n),
        }
    }
}

impl ExecutionProvider for Recorder {
    fn name(&self) -> String {
        "recorder".into()
    }
    fn device(&self) -> DeviceId {
        DeviceId::CPU
    }
    fn allocate(&self, size: u64, align: u32) -> Result<DeviceBuffer, EpError> {
        let b = self.inner.allocate(size, align)?;
        if let Some(r) = self.tape.lock().unwrap().recording.as_mut() {
            r.owned.push(b);
        }
        Ok(b)
    }
    fn deallocate(&self, b: DeviceBuffer) -> Result<(), EpError> {
        let mut tape = self.tape.lock().unwrap();
        if let Some(r) = tape.recording.as_ref() {
            if r.owned.contains(&b) {
                return Ok(()); // the recording keeps its memory
            }
        }
        tape.live_handed.retain(|h| *h != b);
        self.inner.deallocate(b)
    }
    fn upload(&self, b: DeviceBuffer, data: &[u8]) -> Result<(), EpError> {
        if let Some(r) = self.tape.lock().unwrap().recording.as_mut() {
            r.steps.push(Step::Upload(b, data.to_vec()));
            return Ok(());
        }
        self.inner.upload(b, data)
    }
    fn download(&self, b: DeviceBuffer, len: usize) -> BoxFuture<'_, Result<Vec<u8>, EpError>> {
        if self.recording() {
            return Box::pin(std::future::ready(Err(EpError::Unsupported("recording".into()))));
        }
        self.inner.download(b, len)
    }
    fn copy(&self, s: DeviceBuffer, d: DeviceBuffer, n: u64) -> Result<(), EpError> {
        if let Some(r) = self.tape.lock().unwrap().recording.as_mut() {
            r.steps.push(Step::Copy(s, d, n));
            return Ok(());
        }
        self.inner.copy(s, d, n)
    }
    fn supports_op(&self, domain: &str, op: &str) -> bool {
        self.inner.supports_op(domain, op)
    }
    fn prepare(&self, spec: &KernelSpec<'_>) -> Result<KernelId, EpError> {
        self.inner.prepare(spec)
    }
    fn launch(&self, k: KernelId, a: &Launch<'_>) -> Result<(), EpError> {
        if let Some(r) = self.tape.lock().unwrap().recording.as_mut() {
            let step = Step::Launch(k, a.inputs.to_vec(), a.outputs.to_vec(), a.values.to_vec());
            r.steps.push(step);
            return Ok(());
        }
        self.launches.fetch_add(1, Ordering::Relaxed);
        self.inner.launch(k, a)
    }
    fn supports_in_place(&self, k: KernelId) -> bool {
        self.inner.supports_in_place(k)
    }
    fn synchronize(&self) -> BoxFuture<'_, Result<(), EpError>> {
        if self.recording() {
            return Box::pin(std::future::ready(Err(EpError::Unsupported("recording".into()))));
        }
        self.inner.synchronize()
    }
    fn memory_stats(&self) -> MemoryStats {
        self.inner.memory_stats()
    }
    fn reset_peak(&self) {
        self.inner.reset_peak()
    }
    fn supports_capture(&self) -> bool {
        true
    }
    fn begin_capture(&self) -> Result<(), EpError> {
        self.tape.lock().unwrap().recording = Some(Recording::default());
        Ok(())
    }
    fn end_capture(&self, outputs: &[DeviceBuffer]) -> Result<CaptureId, EpError> {
        let mut tape = self.tape.lock().unwrap();
        let mut r = tape.recording.take().expect("recording");
        assert!(outputs.iter().all(|o| r.owned.contains(o)), "outputs come from the recording");
        r.outputs = outputs.to_vec();
        let id = tape.next;
        tape.next += 1;
        tape.done.insert(id, r);
        Ok(CaptureId(id))
    }
    fn abort_capture(&self) {
        let r = self.tape.lock().unwrap().recording.take();
        for b in r.map(|r| r.owned).unwrap_or_default() {
            self.inner.deallocate(b).unwrap();
        }
    }
    fn replay(&self, id: CaptureId) -> Result<Vec<DeviceBuffer>, EpError> {
        let mut tape = self.tape.lock().unwrap();
        let tape = &mut *tape;
        let r = tape.done.get_mut(&id.0).expect("known recording");
        if r.handed.iter().any(|h| tape.live_handed.contains(h)) {
            return Err(EpError::Unsupported("last outputs still held".into()));
        }
        for step in &r.steps {
            self.run(step)?;
        }
        self.replays.fetch_add(1, Ordering::Relaxed);
        // Hand out copies, so the recording's own output memory stays its own.
        r.handed = r
            .outputs
            .iter()
            .map(|o| {
                let c = self.inner.allocate(o.size, o.align)?;
                self.inner.copy(*o, c, o.size)?;
                Ok(c)
            })
            .collect::<Result<_, EpError>>()?;
        tape.live_handed.extend(r.handed.iter().copied());
        Ok(r.handed.clone())
    }
    fn free_capture(&self, id: CaptureId) -> Result<(), EpError> {
        let r = self.tape.lock().unwrap().done.remove(&id.0).expect("known recording");
        r.owned.into_iter().try_for_each(|b| self.inner.deallocate(b))
    }
}

/// `y = Relu(MatMul(x, w) / x.shape[1]) + x[:, :4]`, batch symbolic: the
/// divisor is a host value folded from the shape and uploaded mid-run.
fn scaled_product() -> Vec<u8> {
    let w = f32s(&[8, 4], |i| ((i * 37) % 11) as f32 / 5.0 - 1.0);
    let i64s = |v: Vec<i64>| Tensor::from_vec(vec![v.len()], v).unwrap();
    let mut x = value("x", DType::F32, &[1, 8]);
    let mut y = value("y", DType::F32, &[1, 4]);
    for v in [&mut x, &mut y] {
        symbolic_first_dim(v, "n");
    }
    model(
        graph(
            vec![
                node("MatMul", "mm", &["x", "w"], &["h"], vec![]),
                node("Shape", "shape", &["x"], &["s"], vec![]),
                node("Gather", "width", &["s", "one"], &["k"], vec![("axis", A::I(0))]),
                node("Cast", "as_float", &["k"], &["kf"], vec![("to", A::I(1))]),
                node("Div", "scale", &["h", "kf"], &["d"], vec![]),
                node("Relu", "relu", &["d"], &["r"], vec![]),
                node("Slice", "head", &["x", "starts", "ends", "axes"], &["xs"], vec![]),
                node("Add", "add", &["r", "xs"], &["y"], vec![]),
            ],
            vec![x],
            vec![y],
            vec![
                ("w", w),
                ("one", Tensor::from_vec(vec![], vec![1i64]).unwrap()),
                ("starts", i64s(vec![0])),
                ("ends", i64s(vec![4])),
                ("axes", i64s(vec![1])),
            ],
        ),
        17,
    )
}

fn input(batch: usize, seed: usize) -> Vec<(&'static str, Value)> {
    vec![("x", Value::Tensor(f32s(&[batch, 8], |i| ((i * 7 + seed * 13) % 17) as f32 - 8.0)))]
}

#[test]
fn the_second_run_of_a_shape_is_recorded_and_later_runs_replay_it_with_their_own_inputs() {
    let p = Arc::new(Recorder::new());
    let bytes = scaled_product();
    let reference = session(bytes.clone(), true);
    let s = strict_on(bytes, p.clone(), true);
    let weights = p.memory_stats().in_use_bytes;
    for (run, batch) in [3, 3, 3, 5, 3, 5, 5, 5].into_iter().enumerate() {
        let got = s.run(input(batch, run)).unwrap();
        let want = reference.run(input(batch, run)).unwrap();
        assert_eq!(got.get("y"), want.get("y"), "run {run}, batch {batch}");
        assert_eq!(got.memory.live_set_bound_bytes, want.memory.live_set_bound_bytes);
    }
    // Batch 3: eager, recorded (and replayed at once), replayed twice. Batch 5:
    // eager, recorded, replayed twice.
    assert_eq!(s.recorded_runs(), 2);
    assert_eq!(p.replays.load(Ordering::Relaxed), 3 + 3);
    // Only the weights and the recordings' inputs and intermediates are held.
    assert!(p.memory_stats().in_use_bytes > weights);
    drop(s);
    assert_eq!(p.memory_stats().in_use_bytes, 0, "closing the session frees the recordings");
}

#[test]
fn sessions_without_graphs_and_profiled_runs_never_record() {
    let p = Arc::new(Recorder::new());
    let s = strict_on(scaled_product(), p.clone(), false);
    for run in 0..4 {
        s.run(input(2, run)).unwrap();
    }
    let s2 = strict_on(scaled_product(), p.clone(), true);
    for run in 0..4 {
        s2.run_profiled(input(2, run)).unwrap();
    }
    assert_eq!((s.recorded_runs(), s2.recorded_runs()), (0, 0));
    assert_eq!(p.replays.load(Ordering::Relaxed), 0);
}

#[test]
fn a_run_that_reads_a_device_value_is_declined_once_and_then_always_runs_eagerly() {
    let p = Arc::new(Recorder::new());
    let s = strict_on(if_on_input_data(), p.clone(), true);
    let weights = p.memory_stats().in_use_bytes;
    for (run, (x, want)) in if_on_input_data_cases().into_iter().enumerate() {
        let o = s.run([("x", Value::Tensor(Tensor::from_vec(vec![3], x).unwrap()))]).unwrap();
        let y = o.get("y").and_then(Value::as_tensor).unwrap().to_vec::<f32>().unwrap();
        assert_eq!(y, want, "run {run}");
    }
    assert_eq!(s.recorded_runs(), 0);
    assert_eq!(p.replays.load(Ordering::Relaxed), 0);
    assert_eq!(p.memory_stats().in_use_bytes, weights, "the abandoned recording left nothing");
}
