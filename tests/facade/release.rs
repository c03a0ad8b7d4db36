//! Release at last use, measured against the CPU provider's own memory accounting.

mod common;

use common::*;
use onyx::core::ep::{DeviceBuffer, ExecutionProvider, TensorArg};
use onyx::core::exec::{self, CompileOptions, DeviceValue, RunOptions};
use onyx::core::ops::OpRegistry;
use onyx::{DType, Tensor, Value};

const N: usize = 32; // 32×32 f32 = 4096 bytes per tensor
const KB4: u64 = 4096;

fn x() -> Tensor {
    f32s(&[N, N], |i| (i % 7) as f32 - 3.0)
}

fn run(s: &onyx::Session, inputs: Vec<(&str, Tensor)>) -> onyx::RunOutputs {
    s.run(inputs.into_iter().map(|(n, t)| (n, Value::Tensor(t)))).unwrap()
}

fn out(o: &onyx::RunOutputs, name: &str) -> Vec<f32> {
    o.get(name).and_then(Value::as_tensor).unwrap().to_vec::<f32>().unwrap()
}

/// X → Transpose → Transpose → Transpose → Y: nothing can be done in place.
fn chain() -> Vec<u8> {
    let t = |n: &str, i: &str, o: &str| node("Transpose", n, &[i], &[o], vec![]);
    model(
        graph(
            vec![t("t1", "x", "a"), t("t2", "a", "b"), t("t3", "b", "y")],
            vec![value("x", DType::F32, &[N as i64, N as i64])],
            vec![value("y", DType::F32, &[N as i64, N as i64])],
            vec![],
        ),
        13,
    )
}

/// X → A; B = T(A); C = T(A); Y = B + C, with Transposes so in-place cannot hide anything.
fn diamond() -> Vec<u8> {
    diamond_of(N as i64)
}

/// [`diamond`] over `rows × N` inputs (`-1`: rows left free).
fn diamond_of(rows: i64) -> Vec<u8> {
    model(
        graph(
            vec![
                node("Transpose", "a", &["x"], &["a"], vec![]),
                node("Transpose", "b", &["a"], &["b"], vec![]),
                node("Transpose", "c", &["a"], &["c"], vec![]),
                node("Add", "d", &["b", "c"], &["y"], vec![]),
            ],
            vec![value("x", DType::F32, &[rows, N as i64])],
            vec![value("y", DType::F32, &[rows, N as i64])],
            vec![],
        ),
        13,
    )
}

#[test]
fn chain_peak_equals_the_live_set_bound() {
    let s = session(chain(), true);
    let o = run(&s, vec![("x", x())]);
    // Step 2 holds x (guarded input), a and b; a is freed right after.
    assert_eq!(o.memory.live_set_bound_bytes, 3 * KB4);
    assert_eq!(o.memory.peak_bytes, o.memory.live_set_bound_bytes);
    assert_eq!(o.memory.no_release_bytes, 4 * KB4);
    assert_eq!(o.memory.releases, 2);
    let expect: Vec<f32> = {
        let x = x().to_vec::<f32>().unwrap();
        (0..N * N).map(|i| x[(i % N) * N + i / N]).collect()
    };
    assert_eq!(out(&o, "y"), expect);
}

#[test]
fn the_timeline_follows_release_at_last_use_step_by_step() {
    let s = session(chain(), true);
    let o = run(&s, vec![("x", x())]);
    let t = &o.memory.timeline;
    let steps: Vec<&str> = t.iter().map(|p| p.step.as_str()).collect();
    assert_eq!(steps, ["inputs", "t1", "t2", "t3", "outputs"]);
    // x is the caller's and lives throughout; each step holds its input and output.
    let live: Vec<u64> = t.iter().map(|p| p.live_bytes).collect();
    assert_eq!(live, [KB4, 2 * KB4, 3 * KB4, 3 * KB4, 2 * KB4]);
    let allocated: Vec<u64> = t.iter().map(|p| p.allocated_bytes).collect();
    assert_eq!(allocated, [KB4, 2 * KB4, 3 * KB4, 4 * KB4, 4 * KB4]);
    assert_eq!(live.iter().max(), Some(&o.memory.live_set_bound_bytes));
    assert_eq!(allocated.last(), Some(&o.memory.no_release_bytes));
    // The CPU provider's own accounting agrees with the plan at every step.
    let measured: Vec<Option<u64>> = t.iter().map(|p| p.measured_bytes).collect();
    assert_eq!(measured, [Some(KB4), Some(2 * KB4), Some(3 * KB4), Some(3 * KB4), None]);
}

#[test]
fn without_release_the_measured_timeline_only_grows() {
    let s = session(chain(), false);
    let o = run(&s, vec![("x", x())]);
    let measured: Vec<Option<u64>> = o.memory.timeline.iter().map(|p| p.measured_bytes).collect();
    assert_eq!(measured, [Some(KB4), Some(2 * KB4), Some(3 * KB4), Some(4 * KB4), None]);
}

#[test]
fn diamond_peak_equals_the_live_set_bound() {
    let s = session(diamond(), true);
    let o = run(&s, vec![("x", x())]);
    // Step c holds x, a, b and c; Add then reuses b's buffer in place.
    assert_eq!(o.memory.live_set_bound_bytes, 4 * KB4);
    assert_eq!(o.memory.peak_bytes, o.memory.live_set_bound_bytes);
    let xs = x().to_vec::<f32>().unwrap();
    let a: Vec<f32> = (0..N * N).map(|i| xs[(i % N) * N + i / N]).collect();
    let b: Vec<f32> = (0..N * N).map(|i| a[(i % N) * N + i / N]).collect();
    assert_eq!(out(&o, "y"), b.iter().map(|v| v * 2.0).collect::<Vec<_>>());
}

#[test]
fn without_release_the_peak_is_the_sum_of_all_buffers() {
    for model in [chain(), diamond()] {
        let s = session(model, false);
        let o = run(&s, vec![("x", x())]);
        assert_eq!(o.memory.peak_bytes, o.memory.no_release_bytes);
        assert_eq!(o.memory.releases, 0);
        let on = run(&session_again(&s), vec![("x", x())]);
        assert!(on.memory.peak_bytes < o.memory.peak_bytes);
    }
}

#[test]
fn each_run_reports_the_figures_of_its_own_shapes_when_runs_alternate() {
    // A graph's figures are kept from its last run and reused only for an
    // identical trace: runs of two sizes in turn must each get their own.
    let s = session(diamond_of(-1), true);
    let mut seen = Vec::new();
    for rows in [N, 2 * N, N, 2 * N, 2 * N] {
        let x = f32s(&[rows, N], |i| (i % 5) as f32 - 2.0);
        let o = run(&s, vec![("x", x)]);
        let tensor = (rows * N * 4) as u64;
        // x, a, b and c live together at step c; Add takes b's buffer.
        assert_eq!(o.memory.live_set_bound_bytes, 4 * tensor, "{rows} rows");
        assert_eq!(o.memory.peak_bytes, o.memory.live_set_bound_bytes, "{rows} rows");
        assert_eq!(o.memory.no_release_bytes, 4 * tensor, "{rows} rows");
        seen.push(o.memory.timeline.iter().map(|p| p.live_bytes).collect::<Vec<_>>());
    }
    assert_eq!(seen[0], seen[2]);
    assert_eq!(seen[1], seen[3]);
    assert_ne!(seen[0], seen[1]);
}

fn session_again(s: &onyx::Session) -> onyx::Session {
    onyx::Session::builder().commit_model(s.model().clone(), None).unwrap()
}

#[test]
fn allocations_and_frees_balance_after_runs() {
    let s = session(diamond(), true);
    let before = s.provider().memory_stats();
    for _ in 0..3 {
        run(&s, vec![("x", x())]);
    }
    let after = s.provider().memory_stats();
    assert_eq!(after.allocations - before.allocations, after.frees - before.frees);
    assert!(after.frees > before.frees, "releases must reach the provider");
    assert_eq!(after.in_use_bytes, before.in_use_bytes);
}

#[test]
fn memory_in_use_falls_when_buffers_are_released() {
    let cpu = onyx_cpu::CpuProvider::default();
    let bufs: Vec<DeviceBuffer> = (0..4).map(|_| cpu.allocate(KB4, 4).unwrap()).collect();
    assert_eq!(cpu.memory_stats().in_use_bytes, 4 * KB4);
    for (i, b) in bufs.into_iter().enumerate() {
        cpu.deallocate(b).unwrap();
        assert_eq!(cpu.memory_stats().in_use_bytes, (3 - i as u64) * KB4);
    }
}

#[test]
fn initializers_survive_their_last_use_for_the_next_run() {
    let w = f32s(&[N, N], |i| i as f32);
    let m = model(
        graph(
            vec![node("Add", "add", &["x", "w"], &["y"], vec![])],
            vec![value("x", DType::F32, &[N as i64, N as i64])],
            vec![value("y", DType::F32, &[N as i64, N as i64])],
            vec![("w", w.clone())],
        ),
        13,
    );
    let s = session(m, true);
    let expect: Vec<f32> = x()
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .zip(w.to_vec::<f32>().unwrap())
        .map(|(a, b)| a + b)
        .collect();
    for _ in 0..2 {
        assert_eq!(out(&run(&s, vec![("x", x())]), "y"), expect);
    }
    assert_eq!(
        s.provider().memory_stats().in_use_bytes,
        KB4,
        "the weight stays resident between runs"
    );
}

#[test]
fn an_output_read_by_a_later_node_is_not_released_or_overwritten() {
    // y = Relu(x) is an output and Neg(y) would otherwise take its buffer in place.
    let m = model(
        graph(
            vec![
                node("Relu", "r", &["x"], &["y"], vec![]),
                node("Neg", "n", &["y"], &["z"], vec![]),
            ],
            vec![value("x", DType::F32, &[4])],
            vec![value("y", DType::F32, &[4]), value("z", DType::F32, &[4])],
            vec![],
        ),
        13,
    );
    let o = run(
        &session(m, true),
        vec![("x", Tensor::from_vec(vec![4], vec![-1f32, 2., -3., 4.]).unwrap())],
    );
    assert_eq!(out(&o, "y"), vec![0., 2., 0., 4.]);
    assert_eq!(out(&o, "z"), vec![0., -2., 0., -4.]);
}

/// Runs a model on lent device buffers through the core API.
fn run_lent(
    bytes: Vec<u8>,
    inputs: &[Tensor],
) -> (onyx_cpu::CpuProvider, Vec<TensorArg>, exec::RunResult) {
    let model = onyx::core::onnx::load_model_bytes(
        bytes.into(),
        &onyx::core::onnx::external::NoExternalData,
    )
    .unwrap();
    let cpu = onyx_cpu::CpuProvider::default();
    let registry = OpRegistry::standard();
    let cg = exec::compile(
        std::sync::Arc::new(model.graph),
        &Default::default(),
        &[&cpu],
        &CompileOptions { allow_fallback: false, ..CompileOptions::new(&registry) },
    )
    .unwrap();
    let lent: Vec<TensorArg> = inputs
        .iter()
        .map(|t| {
            let b = cpu.allocate(t.byte_len() as u64, 4).unwrap();
            cpu.upload(b, t.bytes().unwrap()).unwrap();
            TensorArg { buffer: b, dtype: t.dtype(), shape: t.shape().to_vec() }
        })
        .collect();
    let dv: Vec<DeviceValue> = lent.iter().cloned().map(DeviceValue::Tensor).collect();
    let r = pollster::block_on(exec::run(&cg, &[&cpu], &dv, RunOptions::default())).unwrap();
    (cpu, lent, r)
}

fn read(cpu: &onyx_cpu::CpuProvider, t: &TensorArg) -> Vec<f32> {
    let bytes = pollster::block_on(cpu.download(t.buffer, t.buffer.size as usize)).unwrap();
    bytemuck_f32(&bytes)
}

fn bytemuck_f32(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

#[test]
fn a_graph_input_is_neither_freed_nor_overwritten_in_place() {
    // Relu(x) could reuse x's buffer in place if x were not guarded.
    let m = model(
        graph(
            vec![node("Relu", "r", &["x"], &["y"], vec![])],
            vec![value("x", DType::F32, &[4])],
            vec![value("y", DType::F32, &[4])],
            vec![],
        ),
        13,
    );
    let x = Tensor::from_vec(vec![4], vec![-1f32, 2., -3., 4.]).unwrap();
    let (cpu, lent, r) = run_lent(m, &[x]);
    assert_eq!(read(&cpu, &lent[0]), vec![-1., 2., -3., 4.], "the caller's buffer is untouched");
    let DeviceValue::Tensor(y) = &r.outputs[0] else { panic!() };
    assert_ne!(y.buffer, lent[0].buffer);
    assert_eq!(read(&cpu, y), vec![0., 2., 0., 4.]);
}

#[test]
fn an_output_that_aliases_a_lent_buffer_is_copied() {
    // y = Identity(x) is a view of the caller's buffer: handing that buffer back as
    // an output would let the caller free its own input twice.
    let m = model(
        graph(
            vec![node("Identity", "i", &["x"], &["y"], vec![])],
            vec![value("x", DType::F32, &[4])],
            vec![value("y", DType::F32, &[4])],
            vec![],
        ),
        13,
    );
    let x = Tensor::from_vec(vec![4], vec![1f32, 2., 3., 4.]).unwrap();
    let (cpu, lent, r) = run_lent(m, &[x]);
    let DeviceValue::Tensor(y) = &r.outputs[0] else { panic!() };
    assert_ne!(y.buffer, lent[0].buffer);
    cpu.deallocate(y.buffer).unwrap();
    assert_eq!(read(&cpu, &lent[0]), vec![1., 2., 3., 4.]);
    cpu.deallocate(lent[0].buffer).unwrap();
    assert_eq!(cpu.memory_stats().in_use_bytes, 0);
}

#[test]
fn a_value_captured_by_a_subgraph_survives_the_subgraph() {
    // v = Relu(x); y = If(c){Neg(v)} else {Abs(v)}; z = v + y.
    // Inside the branch, Neg(v) would take v's buffer in place if v were not guarded.
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
    let s = session(m, true);
    let xs = Tensor::from_vec(vec![4], vec![-1f32, 2., -3., 4.]).unwrap();
    for (c, expect) in [(true, vec![0f32, 0., 0., 0.]), (false, vec![0., 4., 0., 8.])] {
        let o = run(&s, vec![("x", xs.clone()), ("c", Tensor::from_bools(vec![], &[c]).unwrap())]);
        assert_eq!(out(&o, "z"), expect);
        assert_eq!(o.memory.peak_bytes, o.memory.live_set_bound_bytes);
    }
}

#[test]
fn a_captured_value_a_branch_returns_a_view_of_is_freed_at_its_last_use() {
    // v = Relu(x) (4 KiB); y = If(c){Reshape(v)} else {Identity(v)}: the branch hands
    // back a copy of a view of v, and v dies at the If. Then w = T(T(y)) needs two more
    // 4 KiB buffers: if v were kept until the end of the run, the peak would exceed the bound.
    let shape = Tensor::from_vec(vec![2], vec![N as i64, N as i64]).unwrap();
    let reshape = graph(
        vec![node("Reshape", "reshape", &["v", "shape"], &["r"], vec![])],
        vec![],
        vec![untyped("r")],
        vec![("shape", shape)],
    );
    let identity = graph(
        vec![node("Identity", "id", &["v"], &["r"], vec![])],
        vec![],
        vec![untyped("r")],
        vec![],
    );
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
                        ("then_branch", A::G(Box::new(reshape))),
                        ("else_branch", A::G(Box::new(identity))),
                    ],
                ),
                node("Transpose", "t1", &["y"], &["a"], vec![]),
                node("Transpose", "t2", &["a"], &["w"], vec![]),
            ],
            vec![value("x", DType::F32, &[N as i64, N as i64]), value("c", DType::Bool, &[])],
            vec![value("w", DType::F32, &[N as i64, N as i64])],
            vec![],
        ),
        13,
    );
    let s = session(m, true);
    for c in [true, false] {
        let o = run(&s, vec![("x", x()), ("c", Tensor::from_bools(vec![], &[c]).unwrap())]);
        assert_eq!(out(&o, "w"), out(&o, "w").iter().map(|v| v.max(0.0)).collect::<Vec<_>>());
        assert_eq!(o.memory.peak_bytes, o.memory.live_set_bound_bytes, "branch {c}");
        // x (the caller's) + two 4 KiB buffers at any time after the If.
        assert_eq!(o.memory.live_set_bound_bytes, 3 * KB4 + 1, "branch {c}");
    }
}

#[test]
fn a_sequence_element_survives_the_last_use_of_its_tensor() {
    // a = Relu(x) dies as a value at SequenceConstruct, but the sequence still refers to it.
    let m = model(
        graph(
            vec![
                node("Relu", "a", &["x"], &["a"], vec![]),
                node("Neg", "b", &["x"], &["b"], vec![]),
                node("SequenceConstruct", "s", &["a", "b"], &["s"], vec![]),
                node("SequenceAt", "at", &["s", "zero"], &["y"], vec![]),
            ],
            vec![value("x", DType::F32, &[4])],
            vec![value("y", DType::F32, &[4])],
            vec![("zero", Tensor::scalar(0i64))],
        ),
        13,
    );
    let o = run(
        &session(m, true),
        vec![("x", Tensor::from_vec(vec![4], vec![-1f32, 2., -3., 4.]).unwrap())],
    );
    assert_eq!(out(&o, "y"), vec![0., 2., 0., 4.]);
}

#[test]
fn a_second_run_with_new_input_shapes_gives_the_right_results() {
    // Symbolic dims: shapes must come from this run, never from a stale entry of the last.
    let m = model(
        graph(
            vec![
                node("Relu", "r", &["x"], &["a"], vec![]),
                node("Shape", "s", &["a"], &["shape"], vec![]),
                node("Reshape", "flat", &["a", "minus_one"], &["f"], vec![]),
                node("ReduceSum", "sum", &["f"], &["y"], vec![("keepdims", A::I(0))]),
            ],
            vec![value("x", DType::F32, &[-1, -1])],
            vec![value("y", DType::F32, &[]), value("shape", DType::I64, &[2])],
            vec![("minus_one", Tensor::from_vec(vec![1], vec![-1i64]).unwrap())],
        ),
        13,
    );
    let s = session(m, true);
    for (rows, cols) in [(2usize, 3usize), (4, 5), (1, 1)] {
        let xs = f32s(&[rows, cols], |i| i as f32);
        let o = run(&s, vec![("x", xs)]);
        let n = rows * cols;
        assert_eq!(out(&o, "y"), vec![(n * (n - 1) / 2) as f32]);
        let shape = o.get("shape").and_then(Value::as_tensor).unwrap().to_vec::<i64>().unwrap();
        assert_eq!(shape, vec![rows as i64, cols as i64]);
        assert_eq!(o.memory.peak_bytes, o.memory.live_set_bound_bytes);
    }
}

#[test]
fn a_view_keeps_its_source_alive_exactly_until_its_last_alias_dies() {
    // a = T(x); v = Reshape(a); b = T(v); c = T(b); y = c + v.
    // v (a view of a) is read at the last step: a's buffer must survive until then,
    // and no longer. Had it been freed at a's own last use, the run would fail; had
    // views pinned it for the whole run, nothing would show it—so the bound is checked.
    let m = model(
        graph(
            vec![
                node("Transpose", "a", &["x"], &["a"], vec![]),
                node("Reshape", "v", &["a", "shape"], &["v"], vec![]),
                node("Transpose", "b", &["v"], &["b"], vec![]),
                node("Transpose", "c", &["b"], &["c"], vec![]),
                node("Add", "y", &["c", "v"], &["y"], vec![]),
                node("Transpose", "t", &["y"], &["t"], vec![]),
                node("Transpose", "u", &["t"], &["u"], vec![]),
            ],
            vec![value("x", DType::F32, &[N as i64, N as i64])],
            vec![value("u", DType::F32, &[N as i64, N as i64])],
            vec![("shape", Tensor::from_vec(vec![2], vec![N as i64, N as i64]).unwrap())],
        ),
        13,
    );
    let s = session(m, true);
    let o = run(&s, vec![("x", x())]);
    assert_eq!(o.memory.peak_bytes, o.memory.live_set_bound_bytes);
    // At the last Transpose only x, t and u are live: a's buffer is gone by then.
    assert_eq!(o.memory.live_set_bound_bytes, 4 * KB4);
    let xs = x().to_vec::<f32>().unwrap();
    let t = |v: &[f32]| (0..N * N).map(|i| v[(i % N) * N + i / N]).collect::<Vec<f32>>();
    let a = t(&xs);
    let c = t(&t(&a));
    let y: Vec<f32> = c.iter().zip(&a).map(|(p, q)| p + q).collect();
    assert_eq!(out(&o, "u"), t(&t(&y)));
}

#[test]
fn a_failed_run_frees_everything_it_allocated() {
    // Gather with an index out of range fails after other buffers were allocated.
    let m = model(
        graph(
            vec![
                node("Transpose", "a", &["x"], &["a"], vec![]),
                node("Gather", "g", &["a", "idx"], &["y"], vec![]),
            ],
            vec![value("x", DType::F32, &[N as i64, N as i64])],
            vec![value("y", DType::F32, &[1, N as i64])],
            vec![("idx", Tensor::from_vec(vec![1], vec![1000i64]).unwrap())],
        ),
        13,
    );
    let s = session(m, true);
    let before = s.provider().memory_stats();
    let err = s.run([("x", Value::Tensor(x()))]).unwrap_err();
    assert!(onyx::error_chain(&err).contains("out of bounds"), "{err}");
    let after = s.provider().memory_stats();
    assert_eq!(after.in_use_bytes, before.in_use_bytes);
    assert_eq!(after.allocations - before.allocations, after.frees - before.frees);
}

#[test]
fn dropping_a_session_frees_its_weights() {
    let w = f32s(&[N, N], |i| i as f32);
    let m = model(
        graph(
            vec![node("Add", "add", &["x", "w"], &["y"], vec![])],
            vec![value("x", DType::F32, &[N as i64, N as i64])],
            vec![value("y", DType::F32, &[N as i64, N as i64])],
            vec![("w", w)],
        ),
        13,
    );
    let cpu = std::sync::Arc::new(onyx_cpu::CpuProvider::default());
    let s = onyx::Session::builder().with_provider(cpu.clone()).commit_from_bytes(m, None).unwrap();
    assert_eq!(cpu.memory_stats().in_use_bytes, KB4);
    run(&s, vec![("x", x())]);
    assert_eq!(cpu.memory_stats().in_use_bytes, KB4);
    drop(s);
    assert_eq!(cpu.memory_stats().in_use_bytes, 0);
    assert_eq!(cpu.memory_stats().allocations, cpu.memory_stats().frees);
}

#[test]
fn a_model_that_fails_to_compile_leaves_nothing_allocated() {
    // The If's branch uploads a weight before a later node turns out to have
    // no kernel (inference accepts a Dropout of int4; the CPU kernel does not).
    let branch = graph(
        vec![node("Add", "add", &["x", "bw"], &["r"], vec![])],
        vec![],
        vec![untyped("r")],
        vec![("bw", f32s(&[4], |i| i as f32))],
    );
    let m = model(
        graph(
            vec![
                node(
                    "If",
                    "if",
                    &["c"],
                    &["y"],
                    vec![
                        ("then_branch", A::G(Box::new(branch.clone()))),
                        ("else_branch", A::G(Box::new(branch))),
                    ],
                ),
                node("Dropout", "f", &["q"], &["z"], vec![]),
            ],
            vec![
                value("x", DType::F32, &[4]),
                value("c", DType::Bool, &[]),
                value("q", DType::I4, &[4]),
            ],
            vec![value("y", DType::F32, &[4]), value("z", DType::I4, &[4])],
            vec![("w", f32s(&[4], |i| i as f32))],
        ),
        13,
    );
    let cpu = std::sync::Arc::new(onyx_cpu::CpuProvider::default());
    let err = onyx::Session::builder()
        .with_provider(cpu.clone())
        .commit_from_bytes(m, None)
        .err()
        .unwrap();
    assert!(onyx::is_unsupported(&err), "{err}");
    let st = cpu.memory_stats();
    assert_eq!(st.in_use_bytes, 0);
    assert_eq!(st.allocations, st.frees);
    assert!(st.allocations >= 2, "the branch weights were uploaded, then freed");
}

#[test]
fn the_executor_ledger_balances_on_success_and_on_failure() {
    // Success: everything the run allocated is freed except the outputs it returns.
    let ok = diamond();
    let (cpu, lent, r) = run_lent(ok, &[x()]);
    let st = cpu.memory_stats();
    let outputs: u64 = r
        .outputs
        .iter()
        .map(|o| match o {
            DeviceValue::Tensor(t) => t.buffer.size,
            DeviceValue::Sequence(_, ts) => ts.iter().map(|t| t.buffer.size).sum(),
            DeviceValue::Empty { .. } | DeviceValue::Host(_) => 0,
        })
        .sum();
    let lent_bytes: u64 = lent.iter().map(|t| t.buffer.size).sum();
    assert_eq!(st.in_use_bytes, lent_bytes + outputs);
    assert_eq!(st.allocations - st.frees, (lent.len() + r.outputs.len()) as u64);

    // Failure: nothing the run allocated survives it.
    let bad = model(
        graph(
            vec![
                node("Transpose", "a", &["x"], &["a"], vec![]),
                node("Transpose", "b", &["a"], &["b"], vec![]),
                node("Gather", "g", &["b", "idx"], &["y"], vec![]),
            ],
            vec![value("x", DType::F32, &[N as i64, N as i64])],
            vec![value("y", DType::F32, &[1, N as i64])],
            vec![("idx", Tensor::from_vec(vec![1], vec![-1000i64]).unwrap())],
        ),
        13,
    );
    let model =
        onyx::core::onnx::load_model_bytes(bad.into(), &onyx::core::onnx::external::NoExternalData)
            .unwrap();
    let cpu = onyx_cpu::CpuProvider::default();
    let registry = OpRegistry::standard();
    let mut cg = exec::compile(
        std::sync::Arc::new(model.graph),
        &Default::default(),
        &[&cpu],
        &CompileOptions { allow_fallback: false, ..CompileOptions::new(&registry) },
    )
    .unwrap();
    let before = cpu.memory_stats();
    let t = x();
    let b = cpu.allocate(t.byte_len() as u64, 4).unwrap();
    cpu.upload(b, t.bytes().unwrap()).unwrap();
    let input =
        DeviceValue::Tensor(TensorArg { buffer: b, dtype: t.dtype(), shape: t.shape().to_vec() });
    let err =
        pollster::block_on(exec::run(&cg, &[&cpu], &[input], RunOptions::default())).unwrap_err();
    assert!(err.to_string().contains("node 'g'"), "{err}");
    cpu.deallocate(b).unwrap();
    let after = cpu.memory_stats();
    assert_eq!(after.in_use_bytes, before.in_use_bytes);
    assert_eq!(after.allocations - before.allocations, after.frees - before.frees);
    cg.free_weights(&[&cpu]).unwrap();
    assert_eq!(cpu.memory_stats().in_use_bytes, 0);
}
