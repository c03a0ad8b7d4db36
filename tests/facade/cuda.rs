//! The CUDA backend on a real GPU (run on the H200; see BENCHMARKS.md).
//!
//! Without a GPU, every test that needs one prints why and returns; set
//! `ONYX_REQUIRE_CUDA=1` to make a missing GPU a failure instead.

mod common;
#[path = "cuda/decoder.rs"]
mod decoder;
#[path = "cuda/graphs.rs"]
mod graphs;
#[path = "cuda/ops.rs"]
mod ops;

use std::sync::Arc;

use common::*;
use onyx::core::ep::ExecutionProvider;
use onyx::{DType, Tensor, Value};
use onyx_cuda::{CudaOptions, CudaProvider};

fn gpu() -> Option<Arc<CudaProvider>> {
    match CudaProvider::new(CudaOptions::default()) {
        Ok(p) => Some(Arc::new(p)),
        Err(e) if std::env::var_os("ONYX_REQUIRE_CUDA").is_some() => {
            panic!("ONYX_REQUIRE_CUDA is set but no CUDA device opened: {e}")
        }
        Err(e) => {
            eprintln!("skipping: no CUDA device ({e})");
            None
        }
    }
}

fn on(bytes: Vec<u8>, p: &Arc<CudaProvider>, release: bool) -> onyx::Session {
    onyx::Session::builder()
        .with_provider(p.clone())
        .with_strict(true)
        .with_release_dead_values(release)
        .commit_from_bytes(bytes, None)
        .unwrap()
}

fn f32_out(o: &onyx::RunOutputs, name: &str) -> Vec<f32> {
    let t = o.get(name).and_then(Value::as_tensor).unwrap();
    t.to_f64_vec().unwrap().into_iter().map(|v| v as f32).collect()
}

/// Largest |a - b| / (1 + |b|) over two outputs.
fn max_rel(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs() / (1.0 + y.abs())).fold(0.0, f32::max)
}

fn noise(shape: &[usize], seed: u32) -> Tensor {
    f32s(shape, |i| {
        let x = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed.wrapping_mul(40_503));
        ((x >> 8) % 2001) as f32 / 1000.0 - 1.0
    })
}

#[test]
fn a_cuda_device_that_is_not_there_falls_back_with_a_reason_or_fails_under_strict() {
    let bytes = model(
        graph(
            vec![node("Relu", "relu", &["x"], &["y"], vec![])],
            vec![value("x", DType::F32, &[4])],
            vec![value("y", DType::F32, &[4])],
            vec![],
        ),
        17,
    );
    let s = onyx::Session::builder().with_device("cuda:7").commit_from_bytes(bytes.clone(), None);
    let s = s.unwrap();
    assert_eq!(s.device(), "cpu");
    assert!(s.fallback().is_some_and(|r| !r.is_empty()));
    let err = onyx::Session::builder()
        .with_device("cuda:7")
        .with_strict(true)
        .commit_from_bytes(bytes, None)
        .err()
        .expect("strict mode refuses the fallback");
    assert!(format!("{err:#}").contains("cuda:7"), "{err:#}");
}

#[test]
fn elementwise_ops_match_the_cpu_in_f32_f16_and_bf16() {
    let Some(p) = gpu() else { return };
    let n = 4099; // not a multiple of 8: the vectorized paths' tails run too
    let bytes = model(
        graph(
            vec![
                node("Add", "add", &["a", "row"], &["sum"], vec![]),
                node("Mul", "mul", &["a", "b"], &["prod"], vec![]),
                node("Sigmoid", "sig", &["prod"], &["s"], vec![]),
                node("Less", "less", &["a", "b"], &["lt"], vec![]),
                node("Where", "where", &["lt", "a", "s"], &["w"], vec![]),
                node("Cast", "to_h", &["a"], &["ah"], vec![("to", A::I(10))]),
                node("Cast", "to_bh", &["b"], &["bh"], vec![("to", A::I(10))]),
                node("Mul", "mul_h", &["ah", "bh"], &["ph"], vec![]),
                node("Cast", "from_h", &["ph"], &["prod_h"], vec![("to", A::I(1))]),
                node("Cast", "to_bf", &["a"], &["abf"], vec![("to", A::I(16))]),
                node("Cast", "to_bbf", &["b"], &["bbf"], vec![("to", A::I(16))]),
                node("Sub", "sub_bf", &["abf", "bbf"], &["dbf"], vec![]),
                node("Cast", "from_bf", &["dbf"], &["diff_bf"], vec![("to", A::I(1))]),
                node("Erf", "erf", &["a"], &["e"], vec![]),
                // Repeated operands: a bias (trailing part), one value per row, a scalar.
                node("Add", "bias", &["m", "bias"], &["mb"], vec![]),
                node("Mul", "rows", &["rowv", "m"], &["rm"], vec![]),
                node("Div", "scalar", &["m", "two"], &["half"], vec![]),
                node("Cast", "mh", &["m"], &["m16"], vec![("to", A::I(10))]),
                node("Cast", "bh", &["bias"], &["bias16"], vec![("to", A::I(10))]),
                node("Sub", "bias16", &["bias16", "m16"], &["d16"], vec![]),
                node("Cast", "d32", &["d16"], &["bias_h"], vec![("to", A::I(1))]),
            ],
            vec![
                value("a", DType::F32, &[1, n as i64]),
                value("b", DType::F32, &[1, n as i64]),
                value("row", DType::F32, &[3, 1]),
                value("m", DType::F32, &[6, 64]),
                value("bias", DType::F32, &[64]),
                value("rowv", DType::F32, &[6, 1]),
            ],
            vec![
                value("mb", DType::F32, &[6, 64]),
                value("rm", DType::F32, &[6, 64]),
                value("half", DType::F32, &[6, 64]),
                value("bias_h", DType::F32, &[6, 64]),
                value("sum", DType::F32, &[3, n as i64]),
                value("w", DType::F32, &[1, n as i64]),
                value("prod_h", DType::F32, &[1, n as i64]),
                value("diff_bf", DType::F32, &[1, n as i64]),
                value("e", DType::F32, &[1, n as i64]),
            ],
            vec![("two", f32s(&[], |_| 2.0))],
        ),
        17,
    );
    let inputs = || {
        vec![
            ("a", Value::Tensor(noise(&[1, n], 1))),
            ("b", Value::Tensor(noise(&[1, n], 2))),
            ("row", Value::Tensor(noise(&[3, 1], 3))),
            ("m", Value::Tensor(noise(&[6, 64], 4))),
            ("bias", Value::Tensor(noise(&[64], 5))),
            ("rowv", Value::Tensor(noise(&[6, 1], 6))),
        ]
    };
    let want = session(bytes.clone(), true).run(inputs()).unwrap();
    let got = on(bytes, &p, true).run(inputs()).unwrap();
    for (name, tol) in [
        ("sum", 1e-6),
        ("w", 1e-6),
        ("e", 1e-6),
        ("prod_h", 1e-3),
        ("diff_bf", 1e-2),
        ("mb", 1e-6),
        ("rm", 1e-6),
        ("half", 1e-6),
        ("bias_h", 1e-3),
    ] {
        let err = max_rel(&f32_out(&got, name), &f32_out(&want, name));
        assert!(err <= tol, "{name}: {err} > {tol}");
    }
}

#[test]
fn matmul_and_gemm_match_the_cpu_in_f32_f16_and_bf16() {
    let Some(p) = gpu() else { return };
    let bytes = model(
        graph(
            vec![
                node("MatMul", "weights", &["x", "w"], &["xw"], vec![]),
                node("MatMul", "batched", &["q", "k"], &["qk"], vec![]),
                node("MatMul", "mixed", &["m1", "m2"], &["mm"], vec![]),
                node(
                    "Gemm",
                    "gemm",
                    &["ga", "gb", "gc"],
                    &["g"],
                    vec![
                        ("transA", A::I(1)),
                        ("transB", A::I(1)),
                        ("alpha", A::F(0.5)),
                        ("beta", A::F(2.0)),
                    ],
                ),
                node("Cast", "xh", &["x"], &["x16"], vec![("to", A::I(10))]),
                node("Cast", "wh", &["w"], &["w16"], vec![("to", A::I(10))]),
                node("MatMul", "half", &["x16", "w16"], &["xw16"], vec![]),
                node("Cast", "back16", &["xw16"], &["xw_h"], vec![("to", A::I(1))]),
                node("Cast", "xb", &["x"], &["xbf"], vec![("to", A::I(16))]),
                node("Cast", "wb", &["w"], &["wbf"], vec![("to", A::I(16))]),
                node("MatMul", "bf", &["xbf", "wbf"], &["xwbf"], vec![]),
                node("Cast", "backbf", &["xwbf"], &["xw_bf"], vec![("to", A::I(1))]),
            ],
            vec![
                value("x", DType::F32, &[2, 3, 64, 96]),
                value("w", DType::F32, &[96, 48]),
                value("q", DType::F32, &[4, 33, 16]),
                value("k", DType::F32, &[4, 16, 35]),
                value("m1", DType::F32, &[2, 1, 8, 4]),
                value("m2", DType::F32, &[1, 3, 4, 5]),
                value("ga", DType::F32, &[7, 5]),
                value("gb", DType::F32, &[9, 7]),
                value("gc", DType::F32, &[9]),
            ],
            vec![
                value("xw", DType::F32, &[2, 3, 64, 48]),
                value("qk", DType::F32, &[4, 33, 35]),
                value("mm", DType::F32, &[2, 3, 8, 5]),
                value("g", DType::F32, &[5, 9]),
                value("xw_h", DType::F32, &[2, 3, 64, 48]),
                value("xw_bf", DType::F32, &[2, 3, 64, 48]),
            ],
            vec![],
        ),
        17,
    );
    let shapes: [(&str, &[usize]); 9] = [
        ("x", &[2, 3, 64, 96]),
        ("w", &[96, 48]),
        ("q", &[4, 33, 16]),
        ("k", &[4, 16, 35]),
        ("m1", &[2, 1, 8, 4]),
        ("m2", &[1, 3, 4, 5]),
        ("ga", &[7, 5]),
        ("gb", &[9, 7]),
        ("gc", &[9]),
    ];
    let inputs = || -> Vec<(&str, Value)> {
        shapes
            .iter()
            .enumerate()
            .map(|(i, (n, s))| (*n, Value::Tensor(noise(s, i as u32))))
            .collect()
    };
    let want = session(bytes.clone(), true).run(inputs()).unwrap();
    let got = on(bytes, &p, true).run(inputs()).unwrap();
    let exact = f32_out(&want, "xw");
    for (name, reference, tol) in [
        ("xw", "xw", 1e-5),
        ("qk", "qk", 1e-5),
        ("mm", "mm", 1e-5),
        ("g", "g", 1e-5),
        ("xw_h", "xw", 2e-2),
        ("xw_bf", "xw", 6e-2),
    ] {
        let err = max_rel(&f32_out(&got, name), &f32_out(&want, reference));
        assert!(err <= tol, "{name}: {err} > {tol}");
    }
    assert!(!exact.is_empty());
}

/// A chain of `steps` unary ops over a `mib`-MiB tensor: the live set is two
/// buffers (input and output of the running step), without release it is all of them.
fn chain(steps: usize, mib: usize) -> (Vec<u8>, Vec<usize>) {
    let n = mib << 18; // f32 elements
    let names: Vec<String> = (0..=steps).map(|i| format!("t{i}")).collect();
    let nodes = (0..steps)
        .map(|i| {
            let op = if i % 2 == 0 { "Neg" } else { "Relu" };
            node(op, &format!("step{i}"), &[&names[i]], &[&names[i + 1]], vec![])
        })
        .collect();
    let bytes = model(
        graph(
            nodes,
            vec![value("t0", DType::F32, &[n as i64])],
            vec![value(&names[steps], DType::F32, &[n as i64])],
            vec![],
        ),
        17,
    );
    (bytes, vec![n])
}

#[test]
fn release_at_last_use_frees_device_memory_as_the_plan_says() {
    let Some(p) = gpu() else { return };
    const MIB: u64 = 1 << 20;
    let (steps, mib) = (12usize, 64usize);
    let (bytes, shape) = chain(steps, mib);
    let input = || vec![("t0", Value::Tensor(noise(&shape, 9)))];
    for release in [true, false] {
        // Nothing cached: the device's free memory starts from the same point.
        p.trim().unwrap();
        p.reset_driver_peaks().unwrap();
        let before = p.driver_memory().unwrap();
        let s = on(bytes.clone(), &p, release);
        let o = s.run(input()).unwrap();
        let after = p.driver_memory().unwrap();
        let m = &o.memory;
        // The driver's own high-water mark of live allocations in the pool.
        let used_high = after.pool_used_high;
        // Device memory the pool took from the GPU and still caches (cuMemGetInfo).
        let taken = before.device_free.saturating_sub(after.device_free);
        eprintln!(
            "release {release}: plan bound {} MiB, no-release {} MiB, provider peak {} MiB, \
             driver used-high {} MiB, reserved-high {} MiB, cuMemGetInfo drop {} MiB",
            m.live_set_bound_bytes / MIB,
            m.no_release_bytes / MIB,
            m.peak_bytes / MIB,
            used_high / MIB,
            after.pool_reserved_high / MIB,
            taken / MIB
        );
        let buffer = (mib as u64) * MIB;
        if release {
            assert_eq!(m.peak_bytes, m.live_set_bound_bytes);
            assert!(m.live_set_bound_bytes <= 3 * buffer, "{}", m.live_set_bound_bytes);
            assert!(used_high <= m.live_set_bound_bytes + 4 * MIB, "driver used {used_high}");
            assert!(taken <= m.live_set_bound_bytes + 64 * MIB, "device gave {taken}");
        } else {
            assert_eq!(m.peak_bytes, m.no_release_bytes);
            assert!(m.no_release_bytes >= (steps as u64 + 1) * buffer);
            assert!(used_high >= m.no_release_bytes, "driver used {used_high}");
            assert!(taken >= m.no_release_bytes, "device gave only {taken}");
        }
        drop(o);
        drop(s);
        // Everything goes back: the pool holds nothing once the session is gone.
        let end = p.driver_memory().unwrap();
        assert_eq!(end.pool_used, 0, "live bytes after the session: {}", end.pool_used);
        assert_eq!(p.memory_stats().in_use_bytes, 0);
    }
}

#[test]
fn buffers_are_checked_and_a_double_free_is_an_error() {
    let Some(p) = gpu() else { return };
    let b = p.allocate(1000, 4).unwrap();
    p.upload(b, &[7u8; 1000]).unwrap();
    let back = pollster::block_on(p.download(b, 1000)).unwrap();
    assert_eq!(back, vec![7u8; 1000]);
    assert!(p.upload(b, &[0u8; 1001]).is_err(), "an upload past the end is refused");
    p.deallocate(b).unwrap();
    assert!(p.deallocate(b).is_err(), "a second free is an error");
    assert_eq!(p.memory_stats().in_use_bytes, 0);
}

#[test]
fn an_out_of_range_gather_index_fails_the_run_and_the_next_run_is_clean() {
    let Some(p) = gpu() else { return };
    let bytes = model(
        graph(
            vec![node("Gather", "bad_gather", &["data", "idx"], &["y"], vec![("axis", A::I(0))])],
            vec![value("data", DType::F32, &[3, 2]), value("idx", DType::I64, &[2])],
            vec![value("y", DType::F32, &[2, 2])],
            vec![],
        ),
        13,
    );
    let s = on(bytes, &p, true);
    let run = |idx: Vec<i64>| {
        s.run(vec![
            ("data", Value::Tensor(f32s(&[3, 2], |i| i as f32))),
            ("idx", Value::Tensor(Tensor::from_vec(vec![2], idx).unwrap())),
        ])
    };
    let Err(err) = run(vec![0, 7]) else { panic!("index 7 of 3 is an error") };
    let chain = onyx::error_chain(&err);
    assert!(chain.contains("out of range"), "{chain}");
    let o = run(vec![2, -3]).unwrap();
    assert_eq!(f32_out(&o, "y"), vec![4.0, 5.0, 0.0, 1.0]);
    // A bad index found in a replay of the recorded run fails that run too.
    let Err(err) = run(vec![3, 0]) else { panic!("index 3 of 3 is an error") };
    assert!(onyx::error_chain(&err).contains("out of range"));
    assert_eq!(f32_out(&run(vec![1, 1]).unwrap(), "y"), vec![2.0, 3.0, 2.0, 3.0]);
    assert_eq!(s.recorded_runs(), 1);
    // The recording keeps its own input buffers (data and idx) for its replays.
    assert_eq!(p.memory_stats().in_use_bytes, 3 * 2 * 4 + 2 * 8, "nothing else is held");
    drop(s);
    assert_eq!(p.memory_stats().in_use_bytes, 0, "nothing leaks on the error paths");
}

/// A model importing com.microsoft as well as the default domain.
fn contrib_model(graph: onyx::core::onnx::pb::GraphProto) -> Vec<u8> {
    use onyx::core::onnx::pb;
    use prost::Message;
    let opset = |d: &str, v| pb::OperatorSetIdProto { domain: Some(d.into()), version: Some(v) };
    pb::ModelProto {
        ir_version: Some(8),
        opset_import: vec![opset("", 17), opset("com.microsoft", 1)],
        graph: Some(graph),
        ..Default::default()
    }
    .encode_to_vec()
}

#[test]
fn skip_layer_norm_writes_float32_stats_for_a_bf16_input_as_declared() {
    let Some(p) = gpu() else { return };
    let (rows, h) = (6usize, 96usize);
    let mut skip_node = node(
        "SkipLayerNormalization",
        "sln",
        &["xb", "sb", "gb", "bb"],
        &["yb", "mean", "inv"],
        vec![],
    );
    skip_node.domain = Some("com.microsoft".into());
    let cast = |name: &str, from: &str, to: &str, dt: i64| {
        node("Cast", name, &[from], &[to], vec![("to", A::I(dt))])
    };
    let bytes = contrib_model(graph(
        vec![
            cast("cx", "x", "xb", 16),
            cast("cs", "s", "sb", 16),
            cast("cg", "g", "gb", 16),
            cast("cb", "b", "bb", 16),
            skip_node,
            cast("cy", "yb", "y", 1),
        ],
        vec![
            value("x", DType::F32, &[2, 3, h as i64]),
            value("s", DType::F32, &[2, 3, h as i64]),
            value("g", DType::F32, &[h as i64]),
            value("b", DType::F32, &[h as i64]),
        ],
        vec![
            value("y", DType::F32, &[2, 3, h as i64]),
            value("mean", DType::F32, &[2, 3, 1]),
            value("inv", DType::F32, &[2, 3, 1]),
        ],
        vec![],
    ));
    let (x, s, g, b) =
        (noise(&[2, 3, h], 11), noise(&[2, 3, h], 12), noise(&[h], 13), noise(&[h], 14));
    let s_ = on(bytes, &p, true);
    let o = s_
        .run(vec![
            ("x", Value::Tensor(x.clone())),
            ("s", Value::Tensor(s.clone())),
            ("g", Value::Tensor(g.clone())),
            ("b", Value::Tensor(b.clone())),
        ])
        .unwrap();
    for name in ["mean", "inv"] {
        assert_eq!(o.get(name).and_then(Value::as_tensor).unwrap().dtype(), DType::F32, "{name}");
    }
    // Reference in f64 from the bf16-rounded inputs.
    let bf = |t: &Tensor| -> Vec<f64> {
        t.to_vec::<f32>().unwrap().iter().map(|&v| half::bf16::from_f32(v).to_f64()).collect()
    };
    let (x, s, g, b) = (bf(&x), bf(&s), bf(&g), bf(&b));
    let (mean, inv, y) = (f32_out(&o, "mean"), f32_out(&o, "inv"), f32_out(&o, "y"));
    for r in 0..rows {
        let row: Vec<f64> = (0..h).map(|i| x[r * h + i] + s[r * h + i]).collect();
        let m = row.iter().sum::<f64>() / h as f64;
        let var = row.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / h as f64;
        let iv = 1.0 / (var + 1e-12).sqrt();
        assert!((mean[r] as f64 - m).abs() < 2e-2, "row {r}: mean {} vs {m}", mean[r]);
        assert!((inv[r] as f64 - iv).abs() < 2e-2 * iv, "row {r}: inv {} vs {iv}", inv[r]);
        for i in 0..h {
            let want = (row[i] - m) * iv * g[i] + b[i];
            let got = y[r * h + i] as f64;
            assert!(
                (got - want).abs() < 5e-2 * (1.0 + want.abs()),
                "row {r} col {i}: {got} vs {want}"
            );
        }
    }
}

/// `t` stored as `dtype` (f32, f16 or bf16).
fn stored_as(t: &Tensor, dtype: DType) -> Tensor {
    let v = t.to_f64_vec().unwrap();
    let shape = t.shape().to_vec();
    match dtype {
        DType::F16 => Tensor::from_vec(shape, v.iter().map(|&x| half::f16::from_f64(x)).collect()),
        DType::BF16 => {
            Tensor::from_vec(shape, v.iter().map(|&x| half::bf16::from_f64(x)).collect())
        }
        _ => Tensor::from_vec(shape, v.iter().map(|&x| x as f32).collect()),
    }
    .unwrap()
}

/// transformers' eager attention, a post-norm block (bias, residual,
/// LayerNormalization) and a feed-forward projection with its bias and erf
/// Gelu, in `dtype`, between f32 casts: q, k, v are
/// `[2, seq, 256]`, split into 4 heads of 64 by reshapes and transposes as
/// the exporter writes them, the mask `[2, 1, 1, seq]` or `[2, 1, seq, seq]`,
/// or built from a padding mask `pad` as transformers 5 does (see
/// [`attn_inputs`]), x `[2, seq, 64]`; the weights are initializers of
/// `dtype`.
fn encoder_block(dtype: DType, inputs: &[(&str, Vec<usize>)]) -> Vec<u8> {
    let seq = inputs[0].1[1] as i64;
    let to = dtype.to_onnx() as i64;
    let cast = |i: &str, o: &str, t: i64| node("Cast", o, &[i], &[o], vec![("to", A::I(t))]);
    let perm = |i: &str, o: &str, p: &[i64]| {
        node("Transpose", o, &[i], &[o], vec![("perm", A::Is(p.to_vec()))])
    };
    let mut nodes: Vec<_> = inputs
        .iter()
        .filter(|(n, _)| *n != "pad")
        .map(|(n, _)| cast(n, &format!("{n}_t"), to))
        .collect();
    let expanded = inputs.iter().any(|(n, _)| *n == "pad");
    if expanded {
        // keep = (arange(seq) >= 0 as [1, 1, seq, 1]) & pad; mask = where(expand(keep), 0, min).
        nodes.extend([
            cast("pad", "pad_b", 9),
            node("Range", "r", &["i0", "iseq", "i1"], &["r"], vec![]),
            node("Reshape", "r4", &["r", "col"], &["r4"], vec![]),
            node("GreaterOrEqual", "ge", &["r4", "i0"], &["rows"], vec![]),
            node("And", "and", &["rows", "pad_b"], &["keep"], vec![]),
            node("Expand", "expand", &["keep", "square"], &["keep_x"], vec![]),
            node("Where", "where", &["keep_x", "zero", "min"], &["mask_t"], vec![]),
        ]);
    }
    nodes.extend([
        node("Reshape", "q4", &["q_t", "heads"], &["q4"], vec![]),
        node("Reshape", "k4", &["k_t", "heads"], &["k4"], vec![]),
        node("Reshape", "v4", &["v_t", "heads"], &["v4"], vec![]),
        perm("q4", "qh", &[0, 2, 1, 3]),
        perm("k4", "kt", &[0, 2, 3, 1]),
        perm("v4", "vh", &[0, 2, 1, 3]),
        node("MatMul", "scores", &["qh", "kt"], &["s"], vec![]),
        node("Div", "scaled", &["s", "eight"], &["s8"], vec![]),
        node("Add", "masked", &["s8", "mask_t"], &["sm"], vec![]),
        node("Softmax", "softmax", &["sm"], &["p"], vec![("axis", A::I(-1))]),
        node("MatMul", "context", &["p", "vh"], &["ctx"], vec![]),
        perm("ctx", "ctx_rows", &[0, 2, 1, 3]),
        node("Reshape", "ctx3", &["ctx_rows", "hidden"], &["ctx3"], vec![]),
        cast("ctx3", "attn", 1),
        node("MatMul", "dense", &["x_t", "w"], &["xw"], vec![]),
        node("Add", "biased", &["bias", "xw"], &["xb"], vec![]),
        node("Add", "residual", &["xb", "x_t"], &["xr"], vec![]),
        node(
            "LayerNormalization",
            "ln",
            &["xr", "gamma", "beta"],
            &["ln"],
            vec![("epsilon", A::F(1e-6))],
        ),
        cast("ln", "normed", 1),
        // A feed-forward projection and PyTorch's erf Gelu of it.
        node("MatMul", "up", &["ln", "w2"], &["u"], vec![]),
        node("Add", "up_bias", &["u", "b2"], &["ub"], vec![]),
        node("Div", "gelu_div", &["ub", "sqrt2"], &["g1"], vec![]),
        node("Erf", "gelu_erf", &["g1"], &["g2"], vec![]),
        node("Add", "gelu_add", &["g2", "one"], &["g3"], vec![]),
        node("Mul", "gelu_mul", &["ub", "g3"], &["g4"], vec![]),
        node("Mul", "gelu_half", &["g4", "half"], &["g5"], vec![]),
        cast("g5", "ffn", 1),
    ]);
    let dims = |s: &[usize]| s.iter().map(|&d| d as i64).collect::<Vec<_>>();
    let weights = [
        ("w", noise(&[64, 64], 11)),
        ("bias", noise(&[64], 12)),
        ("gamma", noise(&[64], 13)),
        ("beta", noise(&[64], 14)),
        ("eight", Tensor::scalar(8f32)),
        ("w2", noise(&[64, 128], 15)),
        ("b2", noise(&[128], 16)),
        ("sqrt2", Tensor::scalar(std::f32::consts::SQRT_2)),
        ("one", Tensor::scalar(1f32)),
        ("half", Tensor::scalar(0.5f32)),
        ("zero", Tensor::scalar(0f32)),
        ("min", Tensor::scalar(-10000f32)),
    ];
    let shape = |v: Vec<i64>| Tensor::from_vec(vec![v.len()], v).unwrap();
    let int = |v: i64| Tensor::scalar(v);
    let mask_consts = [
        ("i0", int(0)),
        ("i1", int(1)),
        ("iseq", int(seq)),
        ("col", shape(vec![1, 1, -1, 1])),
        ("square", shape(vec![2, 1, seq, seq])),
    ];
    model(
        graph(
            nodes,
            inputs.iter().map(|(n, s)| value(n, DType::F32, &dims(s))).collect(),
            vec![
                value("attn", DType::F32, &[2, seq, 256]),
                value("normed", DType::F32, &[2, seq, 64]),
                value("ffn", DType::F32, &[2, seq, 128]),
            ],
            weights
                .iter()
                .map(|(n, t)| (*n, stored_as(t, dtype)))
                .chain([("heads", shape(vec![0, 0, 4, 64])), ("hidden", shape(vec![0, 0, 256]))])
                .chain(mask_consts.into_iter().filter(|_| expanded))
                .collect(),
        ),
        17,
    )
}

/// How the encoder block gets its attention mask.
#[derive(Clone, Copy, Debug, PartialEq)]
enum MaskForm {
    /// A padding mask input, `[2, 1, 1, seq]`.
    Keys,
    /// A mask row per query, `[2, 1, seq, seq]` (the CUDA kernel stages
    /// such rows in shared memory when `seq` is a multiple of 8).
    Rows,
    /// Built in the graph from a padding mask `pad` (1 keeps a key) and an
    /// always-true test of the query positions, expanded to
    /// `[2, 1, seq, seq]`, as transformers 5 exports it: fusion hands
    /// `Attention` the padding mask's small form.
    Expanded,
}

/// The encoder block's inputs at sequence length `seq`.
fn attn_inputs(seq: usize, mask: MaskForm) -> Vec<(&'static str, Vec<usize>)> {
    let (name, shape) = match mask {
        MaskForm::Keys => ("mask", vec![2, 1, 1, seq]),
        MaskForm::Rows => ("mask", vec![2, 1, seq, seq]),
        MaskForm::Expanded => ("pad", vec![2, 1, 1, seq]),
    };
    vec![
        ("q", vec![2, seq, 256]),
        ("k", vec![2, seq, 256]),
        ("v", vec![2, seq, 256]),
        (name, shape),
        ("x", vec![2, seq, 64]),
    ]
}

#[test]
fn eager_attention_a_post_norm_block_and_a_bias_gelu_fuse_on_cuda_and_match_the_cpu() {
    let Some(p) = gpu() else { return };
    // 70 keys: a ragged last key tile; 72 with mask rows: the row-staging kernel.
    for (seq, mask) in
        [(70, MaskForm::Keys), (72, MaskForm::Rows), (70, MaskForm::Rows), (72, MaskForm::Expanded)]
    {
        encoder_block_matches_the_cpu(&p, seq, mask);
    }
}

fn encoder_block_matches_the_cpu(p: &Arc<CudaProvider>, seq: usize, mask: MaskForm) {
    let shapes = attn_inputs(seq, mask);
    let mask_rows = mask == MaskForm::Rows;
    let inputs = || -> Vec<(&str, Value)> {
        shapes
            .iter()
            .enumerate()
            .map(|(i, (n, s))| {
                let t = if *n == "pad" {
                    f32s(s, |j| if j >= seq && j % seq >= seq - 20 { 0.0 } else { 1.0 })
                } else if *n == "mask" {
                    // Batch 1 pads its last 20 keys; with a row per query,
                    // row r also masks key 7r mod seq.
                    let keys = seq * s[2];
                    f32s(s, |j| {
                        let (key, row) = (j % seq, (j / seq) % s[2]);
                        let padded = j >= keys && key >= seq - 20;
                        if padded || (mask_rows && key == 7 * row % seq) { -10000.0 } else { 0.0 }
                    })
                } else {
                    noise(s, i as u32)
                };
                (*n, Value::Tensor(t))
            })
            .collect()
    };
    for (dtype, tol) in [(DType::F32, 1e-4), (DType::F16, 2e-2), (DType::BF16, 6e-2)] {
        let bytes = encoder_block(dtype, &shapes);
        let want = session(bytes.clone(), true).run(inputs()).unwrap();
        let s = on(bytes, p, true);
        let ops: Vec<String> = s.placement().into_iter().map(|(n, _)| n.op_type).collect();
        for fused in ["Attention", "SkipLayerNormalization", "BiasGelu"] {
            assert!(ops.iter().any(|o| o == fused), "{dtype} seq {seq}: no {fused} in {ops:?}");
        }
        let mut unfused = vec!["Softmax", "LayerNormalization", "Transpose", "Erf"];
        if mask == MaskForm::Expanded {
            // The expanded mask is not computed at all.
            unfused.push("Expand");
        }
        assert!(!ops.iter().any(|o| unfused.contains(&o.as_str())), "{ops:?}");
        let got = s.run(inputs()).unwrap();
        for name in ["attn", "normed", "ffn"] {
            let err = max_rel(&f32_out(&got, name), &f32_out(&want, name));
            assert!(err <= tol, "{dtype} seq {seq} {mask:?} {name}: {err} > {tol}");
        }
    }
}
