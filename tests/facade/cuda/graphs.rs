//! CUDA graphs: a session records its second run with given input shapes and
//! replays it after that. A replay must read the new inputs, give what the
//! run node by node gives, keep the plan's memory, and leave nothing behind;
//! a run that needs device values on the host must never be recorded.

use super::*;

/// `y = Softmax(Relu(MatMul(x, w) / x.shape[1]))` with a symbolic batch: the
/// divisor is folded on the host from the shape at run time and uploaded as
/// data, so replays also exercise the recording's page-locked copies.
fn scaled_product() -> Vec<u8> {
    let w = f32s(&[64, 32], |i| ((i * 37) % 101) as f32 / 50.0 - 1.0);
    let idx = Tensor::from_vec(vec![], vec![1i64]).unwrap();
    let to_float = ("to", A::I(DType::F32.to_onnx() as i64));
    let mut x = value("x", DType::F32, &[1, 64]);
    let mut y = value("y", DType::F32, &[1, 32]);
    for v in [&mut x, &mut y] {
        symbolic_first_dim(v, "n");
    }
    model(
        graph(
            vec![
                node("MatMul", "mm", &["x", "w"], &["h"], vec![]),
                node("Shape", "shape", &["x"], &["s"], vec![]),
                node("Gather", "width", &["s", "idx"], &["k"], vec![("axis", A::I(0))]),
                node("Cast", "as_float", &["k"], &["kf"], vec![to_float]),
                node("Div", "scale", &["h", "kf"], &["d"], vec![]),
                node("Relu", "relu", &["d"], &["r"], vec![]),
                node("Softmax", "softmax", &["r"], &["y"], vec![("axis", A::I(-1))]),
            ],
            vec![x],
            vec![y],
            vec![("w", w), ("idx", idx)],
        ),
        17,
    )
}

#[test]
fn recorded_runs_replay_new_inputs_exactly_as_runs_node_by_node() {
    let Some(p) = gpu() else { return };
    let bytes = scaled_product();
    let cpu = session(bytes.clone(), true);
    let eager = strict_on(bytes.clone(), p.clone(), false);
    let s = strict_on(bytes, p.clone(), true);
    let weights = p.memory_stats().in_use_bytes;
    for (batch, runs) in [(4usize, 5u32), (9, 4), (4, 2)] {
        for seed in 0..runs {
            let x = || vec![("x", Value::Tensor(noise(&[batch, 64], seed * 7 + batch as u32)))];
            let got = s.run(x()).unwrap();
            let node_by_node = eager.run(x()).unwrap();
            // Same kernels on the same data: a replay is bit for bit the eager run.
            assert_eq!(
                got.get("y").unwrap(),
                node_by_node.get("y").unwrap(),
                "batch {batch}, run {seed}"
            );
            let err = max_rel(&f32_out(&got, "y"), &f32_out(&cpu.run(x()).unwrap(), "y"));
            assert!(err < 1e-5, "batch {batch}, run {seed}: {err}");
            assert_eq!(got.memory.peak_bytes, got.memory.live_set_bound_bytes);
        }
    }
    // One recording per input shape; the eager session recorded nothing.
    assert_eq!(s.recorded_runs(), 2);
    assert_eq!(eager.recorded_runs(), 0);
    // Outputs were freed after each replay; only weights and the recordings'
    // input buffers (4·64 and 9·64 floats) stay.
    let held = p.memory_stats().in_use_bytes;
    assert_eq!(held, weights + (4 + 9) * 64 * 4, "held {held}, weights {weights}");
    drop((s, eager, cpu));
    assert_eq!(p.memory_stats().in_use_bytes, 0, "a closed session leaves nothing");
    assert_eq!(p.recordings(), 0);
}

#[test]
fn a_run_that_reads_device_values_on_the_host_is_never_recorded_and_stays_right() {
    let Some(p) = gpu() else { return };
    let s = strict_on(if_on_input_data(), p.clone(), true);
    let weights = p.memory_stats().in_use_bytes;
    for (run, (x, want)) in if_on_input_data_cases().into_iter().enumerate() {
        let o = s.run([("x", Value::Tensor(Tensor::from_vec(vec![3], x).unwrap()))]).unwrap();
        assert_eq!(f32_out(&o, "y"), want, "run {run}");
    }
    assert_eq!(s.recorded_runs(), 0, "the If needs its condition on the host");
    assert_eq!(p.memory_stats().in_use_bytes, weights, "the declined recording left nothing");
}

#[test]
fn a_replayed_chain_holds_the_plans_live_set_on_the_device_not_every_intermediate() {
    let Some(p) = gpu() else { return };
    const MIB: u64 = 1 << 20;
    let (bytes, shape) = chain(12, 64);
    let s = strict_on(bytes, p.clone(), true);
    p.reset_driver_peaks().unwrap();
    let mut last = None;
    for seed in 0..4 {
        let o = s.run(vec![("t0", Value::Tensor(noise(&shape, seed)))]).unwrap();
        // Neg, Relu, Neg, Relu, …: after the fourth step every value is
        // relu(-relu(-x)) = 0, whatever the input.
        assert!(f32_out(&o, "t12").iter().all(|v| *v == 0.0), "run {seed}");
        last = Some(o);
    }
    assert_eq!(s.recorded_runs(), 1);
    let m = last.unwrap().memory;
    let d = p.driver_memory().unwrap();
    eprintln!(
        "graph: plan bound {} MiB, no-release {} MiB, graph used-high {} MiB, graph reserved {} MiB",
        m.live_set_bound_bytes / MIB,
        m.no_release_bytes / MIB,
        d.graph_used_high / MIB,
        d.graph_reserved / MIB
    );
    // The input (owned by the recording) is in the pool; the graph holds the
    // intermediates and the output, reusing memory as the plan frees it.
    assert!(d.graph_used_high > 0, "the replays ran in graph memory");
    assert!(
        d.graph_used_high <= m.live_set_bound_bytes + 8 * MIB,
        "graph used {} for a plan bound of {}",
        d.graph_used_high,
        m.live_set_bound_bytes
    );
    // Nothing near the 13 buffers of 64 MiB that keeping every value would take.
    assert!(d.graph_used_high <= 2 * 64 * MIB, "graph used {}", d.graph_used_high);
}
