//! Per-node fallback: nodes the primary provider cannot run move to the CPU, with
//! explicit copies inserted by the planner and release at last use on both sides.
//! The primary here is a CPU provider behind another device id that declines some ops.

mod common;

use std::sync::Arc;

use common::*;
use onyx::core::ep::{
    BoxFuture, DeviceBuffer, DeviceId, DeviceKind, EpError, ExecutionProvider, KernelId,
    KernelSpec, Launch, MemoryStats, TensorArg,
};
use onyx::{DType, Tensor, Value};
use onyx_cpu::CpuProvider;

/// A "device" that is really the CPU under another id, and declines some ops.
struct Picky {
    inner: CpuProvider,
    declines: &'static [&'static str],
}

const PICKY: DeviceId = DeviceId { kind: DeviceKind::Cpu, ordinal: 7 };

fn inner(b: DeviceBuffer) -> Result<DeviceBuffer, EpError> {
    if b.device != PICKY {
        return Err(EpError::UnknownBuffer { id: b.id, device: b.device });
    }
    Ok(DeviceBuffer { device: DeviceId::CPU, ..b })
}

fn outer(b: DeviceBuffer) -> DeviceBuffer {
    DeviceBuffer { device: PICKY, ..b }
}

fn args(ts: &[Option<TensorArg>]) -> Result<Vec<Option<TensorArg>>, EpError> {
    ts.iter()
        .map(|t| {
            t.as_ref().map(|t| Ok(TensorArg { buffer: inner(t.buffer)?, ..t.clone() })).transpose()
        })
        .collect()
}

impl ExecutionProvider for Picky {
    fn name(&self) -> String {
        "picky".into()
    }
    fn device(&self) -> DeviceId {
        PICKY
    }
    fn allocate(&self, size: u64, align: u32) -> Result<DeviceBuffer, EpError> {
        self.inner.allocate(size, align).map(outer)
    }
    fn deallocate(&self, b: DeviceBuffer) -> Result<(), EpError> {
        self.inner.deallocate(inner(b)?)
    }
    fn upload(&self, b: DeviceBuffer, data: &[u8]) -> Result<(), EpError> {
        self.inner.upload(inner(b)?, data)
    }
    fn download(&self, b: DeviceBuffer, len: usize) -> BoxFuture<'_, Result<Vec<u8>, EpError>> {
        match inner(b) {
            Ok(b) => self.inner.download(b, len),
            Err(e) => Box::pin(std::future::ready(Err(e))),
        }
    }
    fn copy(&self, s: DeviceBuffer, d: DeviceBuffer, len: u64) -> Result<(), EpError> {
        self.inner.copy(inner(s)?, inner(d)?, len)
    }
    fn supports_op(&self, domain: &str, op: &str) -> bool {
        !self.declines.contains(&op) && self.inner.supports_op(domain, op)
    }
    fn prepare(&self, spec: &KernelSpec<'_>) -> Result<KernelId, EpError> {
        if self.declines.contains(&spec.node.op_type.as_str()) {
            return Err(EpError::Unsupported(format!("picky does not run {}", spec.node.op_type)));
        }
        self.inner.prepare(spec)
    }
    fn launch(&self, k: KernelId, a: &Launch<'_>) -> Result<(), EpError> {
        let (i, o) = (args(a.inputs)?, args(a.outputs)?);
        self.inner.launch(k, &Launch { inputs: &i, outputs: &o, values: a.values })
    }
    fn synchronize(&self) -> BoxFuture<'_, Result<(), EpError>> {
        self.inner.synchronize()
    }
    fn memory_stats(&self) -> MemoryStats {
        self.inner.memory_stats()
    }
    fn reset_peak(&self) {
        self.inner.reset_peak()
    }
}

fn picky(declines: &'static [&'static str]) -> Arc<Picky> {
    Arc::new(Picky { inner: CpuProvider::default(), declines })
}

/// x → Conv-free CNN-ish chain with a weight read on both sides:
/// a = x·w (MatMul), b = Relu(a), c = Transpose(b), d = c + w, y = Softmax(d), s = Shape(d).
fn mixed() -> Vec<u8> {
    model(
        graph(
            vec![
                node("MatMul", "mm", &["x", "w"], &["a"], vec![]),
                node("Relu", "relu", &["a"], &["b"], vec![]),
                node("Transpose", "tr", &["b"], &["c"], vec![]),
                node("Add", "add", &["c", "w"], &["d"], vec![]),
                node("Softmax", "sm", &["d"], &["y"], vec![("axis", A::I(-1))]),
                node("Reshape", "flat", &["d", "minus_one"], &["f"], vec![]),
                node("ReduceSum", "sum", &["f"], &["z"], vec![("keepdims", A::I(0))]),
            ],
            vec![value("x", DType::F32, &[16, 16])],
            vec![value("y", DType::F32, &[16, 16]), value("z", DType::F32, &[])],
            vec![
                ("w", f32s(&[16, 16], |i| ((i * 7) % 11) as f32 * 0.1 - 0.5)),
                ("minus_one", Tensor::from_vec(vec![1], vec![-1i64]).unwrap()),
            ],
        ),
        13,
    )
}

fn x() -> Tensor {
    f32s(&[16, 16], |i| ((i * 13) % 17) as f32 * 0.05 - 0.4)
}

fn run(s: &onyx::Session) -> onyx::RunOutputs {
    s.run([("x", Value::Tensor(x()))]).unwrap()
}

#[test]
fn nodes_the_device_declines_run_on_the_cpu_with_the_same_results() {
    let reference = run(&session(mixed(), true));
    for declines in [&["Transpose"][..], &["Relu", "Softmax"], &["MatMul", "ReduceSum"], &["Add"]] {
        let s = onyx::Session::builder()
            .with_provider(picky(declines))
            .commit_from_bytes(mixed(), None)
            .unwrap();
        let counts = s.kernels_per_device();
        assert_eq!(counts[0].0, "picky");
        assert_eq!(counts[1], ("cpu".to_string(), declines.len()), "{declines:?}");
        let placed = s.placement();
        for d in declines {
            assert!(placed.iter().any(|(n, p)| n.op_type == *d && p == "cpu"), "{placed:?}");
        }
        let o = run(&s);
        for name in ["y", "z"] {
            assert_eq!(o.get(name), reference.get(name), "{name} with {declines:?} declined");
        }
    }
}

#[test]
fn release_happens_at_last_use_on_both_devices() {
    let dev = picky(&["Transpose", "Softmax"]);
    let s = onyx::Session::builder()
        .with_provider(dev.clone())
        .commit_from_bytes(mixed(), None)
        .unwrap();
    let cpu = s.providers()[1].memory_stats();
    let o = run(&s);
    assert_eq!(o.memory.devices.len(), 2);
    for d in &o.memory.devices {
        assert_eq!(d.peak_bytes, d.live_set_bound_bytes, "{}: peak vs bound", d.device);
        assert!(d.peak_bytes < d.no_release_bytes, "{}: release lowers the peak", d.device);
    }
    // Nothing but weights stays on either side, and frees balance allocations.
    let after = dev.memory_stats();
    assert_eq!(after.in_use_bytes, o.memory.devices[0].weight_bytes);
    let cpu_after = s.providers()[1].memory_stats();
    assert_eq!(cpu_after.in_use_bytes, o.memory.devices[1].weight_bytes);
    assert_eq!(cpu_after.allocations - cpu.allocations, cpu_after.frees - cpu.frees);
    // `w` is read on both sides (MatMul on the device, Add on the device); shape-only
    // constants are never uploaded.
    assert_eq!(o.memory.devices[0].weight_bytes, 16 * 16 * 4);
}

#[test]
fn a_weight_read_on_both_devices_is_uploaded_to_both() {
    let s = onyx::Session::builder()
        .with_provider(picky(&["Add"]))
        .commit_from_bytes(mixed(), None)
        .unwrap();
    let o = run(&s);
    assert_eq!(o.memory.devices[0].weight_bytes, 1024, "w for MatMul on the device");
    assert_eq!(o.memory.devices[1].weight_bytes, 1024, "w for Add on the cpu");
}

#[test]
fn strict_mode_refuses_to_fall_back_and_names_the_node() {
    let err = onyx::Session::builder()
        .with_provider(picky(&["Transpose"]))
        .with_strict(true)
        .commit_from_bytes(mixed(), None)
        .err()
        .unwrap();
    let chain = onyx::error_chain(&err);
    assert!(
        chain.contains("node 'tr' (ai.onnx::Transpose, opset 13): no kernel on backend picky"),
        "{chain}"
    );
}

#[test]
fn a_subgraph_output_made_on_the_cpu_comes_back_to_the_device() {
    let branch = |op: &str| {
        graph(vec![node(op, op, &["v"], &["r"], vec![])], vec![], vec![untyped("r")], vec![])
    };
    let m = model(
        graph(
            vec![
                node("Relu", "relu", &["x"], &["v"], vec![]),
                node(
                    "If",
                    "if",
                    &["c"],
                    &["y"],
                    vec![
                        ("then_branch", A::G(Box::new(branch("Neg")))),
                        ("else_branch", A::G(Box::new(branch("Abs")))),
                    ],
                ),
                node("Add", "add", &["v", "y"], &["z"], vec![]),
            ],
            vec![value("x", DType::F32, &[4]), value("c", DType::Bool, &[])],
            vec![value("z", DType::F32, &[4])],
            vec![],
        ),
        13,
    );
    let s =
        onyx::Session::builder().with_provider(picky(&["Neg"])).commit_from_bytes(m, None).unwrap();
    let xs = Tensor::from_vec(vec![4], vec![-1f32, 2., -3., 4.]).unwrap();
    for (c, expect) in [(true, vec![0f32, 0., 0., 0.]), (false, vec![0., 4., 0., 8.])] {
        let o = s
            .run([
                ("x", Value::Tensor(xs.clone())),
                ("c", Value::Tensor(Tensor::from_bools(vec![], &[c]).unwrap())),
            ])
            .unwrap();
        assert_eq!(o.get("z").and_then(Value::as_tensor).unwrap().to_vec::<f32>().unwrap(), expect);
        for d in &o.memory.devices {
            assert_eq!(d.peak_bytes, d.live_set_bound_bytes, "{}", d.device);
        }
    }
}

/// Largest absolute difference between two f32 outputs.
fn max_diff(a: &onyx::RunOutputs, b: &onyx::RunOutputs, name: &str) -> f32 {
    let get = |o: &onyx::RunOutputs| {
        o.get(name).and_then(Value::as_tensor).unwrap().to_vec::<f32>().unwrap()
    };
    let (x, y) = (get(a), get(b));
    assert_eq!(x.len(), y.len(), "{name}");
    x.iter().zip(&y).map(|(p, q)| (p - q).abs()).fold(0.0, f32::max)
}

#[test]
fn a_node_the_device_declines_runs_there_as_standard_ops_under_strict_mode() {
    // Causal grouped-query Attention (4 query heads over 2 key/value heads) and a
    // weighted cross-entropy loss with an ignored class.
    let m = model(
        graph(
            vec![
                node("Attention", "att", &["q", "k", "v"], &["y"], vec![("is_causal", A::I(1))]),
                node(
                    "SoftmaxCrossEntropyLoss",
                    "sce",
                    &["scores", "labels", "weights"],
                    &["loss"],
                    vec![("ignore_index", A::I(2))],
                ),
            ],
            vec![
                value("q", DType::F32, &[2, 4, 5, 8]),
                value("k", DType::F32, &[2, 2, 5, 8]),
                value("v", DType::F32, &[2, 2, 5, 8]),
                value("scores", DType::F32, &[6, 4]),
                value("labels", DType::I64, &[6]),
            ],
            vec![value("y", DType::F32, &[2, 4, 5, 8]), value("loss", DType::F32, &[])],
            vec![("weights", f32s(&[4], |i| 0.5 + i as f32 * 0.25))],
        ),
        23,
    );
    let feeds = || {
        let t = |dims: &[usize], seed: usize| {
            f32s(dims, move |i| ((i * 7 + seed) % 23) as f32 * 0.1 - 1.1)
        };
        let labels = Tensor::from_vec(vec![6], vec![0i64, 2, 3, 1, 2, 3]).unwrap();
        [
            ("q", Value::Tensor(t(&[2, 4, 5, 8], 1))),
            ("k", Value::Tensor(t(&[2, 2, 5, 8], 2))),
            ("v", Value::Tensor(t(&[2, 2, 5, 8], 3))),
            ("scores", Value::Tensor(t(&[6, 4], 4))),
            ("labels", Value::Tensor(labels)),
        ]
    };
    let reference = session(m.clone(), true).run(feeds()).unwrap();
    let s = onyx::Session::builder()
        .with_provider(picky(&["Attention", "SoftmaxCrossEntropyLoss"]))
        .with_strict(true)
        .commit_from_bytes(m, None)
        .unwrap();
    let placed = s.placement();
    assert!(placed.iter().all(|(_, p)| p == "picky"), "{placed:?}");
    assert!(placed.iter().any(|(n, _)| n.op_type == "Softmax"), "{placed:?}");
    assert!(!placed.iter().any(|(n, _)| n.op_type == "Attention"), "{placed:?}");
    let o = s.run(feeds()).unwrap();
    for name in ["y", "loss"] {
        let d = max_diff(&o, &reference, name);
        assert!(d < 1e-5, "{name}: the decomposition differs from the kernel by {d}");
    }
    for d in &o.memory.devices {
        assert_eq!(d.peak_bytes, d.live_set_bound_bytes, "{}", d.device);
    }
}

/// One thread runs on the caller (serial loops), two run in a pool with
/// spinning workers, and a pool keeps sub-millisecond runs on the caller: all
/// three must give the same numbers, also with runs from several threads at once.
#[test]
fn every_thread_setting_gives_the_same_outputs_and_concurrent_runs_agree() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/tiny_cnn.onnx");
    let bytes = std::fs::read(&path).unwrap();
    fn run(s: &onyx::Session) -> Vec<Vec<f32>> {
        let x = f32s(&[2, 3, 64, 64], |i| ((i * 37) % 101) as f32 / 50.0 - 1.0);
        let out = s.run([("input", Value::Tensor(x))]).unwrap();
        out.values.iter().map(|(_, v)| v.as_tensor().unwrap().to_vec::<f32>().unwrap()).collect()
    }
    let session = |threads: Option<usize>| {
        let b = onyx::Session::builder();
        let b = match threads {
            Some(t) => b.with_threads(t),
            None => b,
        };
        b.commit_from_bytes(bytes.clone(), None).unwrap()
    };
    let want = run(&session(None));
    for threads in [1, 2] {
        let s = session(Some(threads));
        // The first run of a pool goes to the pool; later ones see its time.
        for _ in 0..3 {
            assert_eq!(run(&s), want, "{threads} threads");
        }
        let s = Arc::new(s);
        let handles: Vec<_> = (0..3)
            .map(|_| {
                let s = s.clone();
                let want = want.clone();
                std::thread::spawn(move || {
                    for _ in 0..5 {
                        assert_eq!(run(&s), want);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    }
}
