//! The wgpu backend on a real adapter (Mesa lavapipe in CI: `apt-get install
//! mesa-vulkan-drivers`). Set `ONYX_SKIP_WGPU=1` to skip on a machine without one.

mod common;

use std::sync::Arc;

use common::*;
use onyx::core::ep::ExecutionProvider;
use onyx::{DType, Tensor, Value};
use onyx_wgpu::{WgpuOptions, WgpuProvider};

fn gpu() -> Option<Arc<WgpuProvider>> {
    if std::env::var_os("ONYX_SKIP_WGPU").is_some() {
        eprintln!("ONYX_SKIP_WGPU is set: skipping");
        return None;
    }
    match WgpuProvider::new_blocking(WgpuOptions::default()) {
        Ok(p) => Some(Arc::new(p)),
        Err(e) => {
            panic!("no wgpu adapter ({e}); install mesa-vulkan-drivers or set ONYX_SKIP_WGPU=1")
        }
    }
}

fn strict(bytes: Vec<u8>, p: &Arc<WgpuProvider>) -> onyx::Session {
    onyx::Session::builder()
        .with_provider(p.clone())
        .with_strict(true)
        .commit_from_bytes(bytes, None)
        .unwrap()
}

fn get_i64(o: &onyx::RunOutputs, name: &str) -> Vec<i64> {
    o.get(name).and_then(Value::as_tensor).unwrap().to_vec::<i64>().unwrap()
}

#[test]
fn int64_beyond_32_bits_is_exact_through_add_mul_gather_and_cast() {
    let Some(p) = gpu() else { return };
    let big = [3_000_000_000i64, -5_000_000_007, (1 << 40) + 7, -1, i64::MAX - 3];
    let small = [7i64, -3, 1 << 20, 2, 1];
    let m = model(
        graph(
            vec![
                node("Add", "add", &["a", "b"], &["sum"], vec![]),
                node("Mul", "mul", &["a", "b"], &["prod"], vec![]),
                node("Sub", "sub", &["a", "b"], &["diff"], vec![]),
                node("Div", "div", &["a", "b"], &["quot"], vec![]),
                node("Less", "less", &["a", "b"], &["lt"], vec![]),
                node("Gather", "gather", &["a", "idx"], &["picked"], vec![("axis", A::I(0))]),
                node("Cast", "to_f32", &["a"], &["as_f32"], vec![("to", A::I(1))]),
                node("Cast", "to_i32", &["a"], &["as_i32"], vec![("to", A::I(6))]),
                node("Cast", "back", &["f"], &["from_f32"], vec![("to", A::I(7))]),
            ],
            vec![
                value("a", DType::I64, &[5]),
                value("b", DType::I64, &[5]),
                value("idx", DType::I64, &[3]),
                value("f", DType::F32, &[3]),
            ],
            vec![
                value("sum", DType::I64, &[5]),
                value("prod", DType::I64, &[5]),
                value("diff", DType::I64, &[5]),
                value("quot", DType::I64, &[5]),
                value("lt", DType::Bool, &[5]),
                value("picked", DType::I64, &[3]),
                value("as_f32", DType::F32, &[5]),
                value("as_i32", DType::I32, &[5]),
                value("from_f32", DType::I64, &[3]),
            ],
            vec![],
        ),
        13,
    );
    let s = strict(m, &p);
    let counts = s.kernels_per_device();
    assert_eq!(counts, vec![("wgpu:0".to_string(), 9)]);
    let inputs = vec![
        ("a", Value::Tensor(Tensor::from_vec(vec![5], big.to_vec()).unwrap())),
        ("b", Value::Tensor(Tensor::from_vec(vec![5], small.to_vec()).unwrap())),
        ("idx", Value::Tensor(Tensor::from_vec(vec![3], vec![4i64, -5, 2]).unwrap())),
        ("f", Value::Tensor(Tensor::from_vec(vec![3], vec![3.0e9f32, -4.5e12, 123.9]).unwrap())),
    ];
    let o = s.run(inputs).unwrap();
    let zip =
        |f: fn(i64, i64) -> i64| big.iter().zip(&small).map(|(&x, &y)| f(x, y)).collect::<Vec<_>>();
    assert_eq!(get_i64(&o, "sum"), zip(|x, y| x.wrapping_add(y)));
    assert_eq!(get_i64(&o, "prod"), zip(|x, y| x.wrapping_mul(y)));
    assert_eq!(get_i64(&o, "diff"), zip(|x, y| x.wrapping_sub(y)));
    assert_eq!(get_i64(&o, "quot"), zip(|x, y| x / y));
    let lt = o.get("lt").and_then(Value::as_tensor).unwrap().to_i64_vec().unwrap();
    assert_eq!(lt, zip(|x, y| (x < y) as i64));
    assert_eq!(get_i64(&o, "picked"), vec![big[4], big[0], big[2]]);
    let f = o.get("as_f32").and_then(Value::as_tensor).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(f, big.iter().map(|&x| x as f32).collect::<Vec<_>>());
    let i = o.get("as_i32").and_then(Value::as_tensor).unwrap().to_vec::<i32>().unwrap();
    assert_eq!(i, big.iter().map(|&x| x as i32).collect::<Vec<_>>(), "int64 to int32 wraps like C");
    // Truncation toward zero of the exact f32 values (-4.5e12 is -4500000079872 in f32).
    let fs = [3.0e9f32, -4.5e12, 123.9];
    assert_eq!(get_i64(&o, "from_f32"), fs.iter().map(|&v| v as i64).collect::<Vec<_>>());
    assert_eq!(get_i64(&o, "from_f32")[0], 3_000_000_000);
}

#[test]
fn device_memory_falls_when_buffers_are_released() {
    let Some(p) = gpu() else { return };
    let base = p.memory_stats().in_use_bytes;
    let bufs: Vec<_> = (0..4).map(|_| p.allocate(1 << 20, 4).unwrap()).collect();
    assert_eq!(p.memory_stats().in_use_bytes, base + (4 << 20));
    for (i, b) in bufs.into_iter().enumerate() {
        p.deallocate(b).unwrap();
        assert_eq!(p.memory_stats().in_use_bytes, base + ((3 - i as u64) << 20));
    }
    let b = p.allocate(16, 4).unwrap();
    p.deallocate(b).unwrap();
    assert!(p.deallocate(b).is_err(), "a second free is an error");
}

#[test]
fn freed_buffers_are_pooled_as_reserved_bytes_until_trimmed() {
    // A provider of its own: the pool is per provider.
    let Some(p) = gpu() else { return };
    let before = p.memory_stats();
    let bufs: Vec<_> = (0..3).map(|_| p.allocate(1 << 20, 4).unwrap()).collect();
    let held = p.memory_stats().reserved_bytes;
    assert!(held >= before.reserved_bytes + (3 << 20));
    for b in bufs {
        p.deallocate(b).unwrap();
    }
    let pooled = p.memory_stats();
    assert_eq!(pooled.in_use_bytes, before.in_use_bytes, "nothing is in use after the frees");
    assert_eq!(pooled.reserved_bytes, held, "freed buffers stay on the device, in the pool");
    // A new allocation of the same size class reuses a pooled buffer.
    let again = p.allocate((1 << 20) - 100, 4).unwrap();
    assert_eq!(p.memory_stats().reserved_bytes, held);
    p.deallocate(again).unwrap();
    p.trim();
    assert_eq!(p.memory_stats().reserved_bytes, before.reserved_bytes, "trim gives them back");
}

#[test]
fn the_bundled_model_matches_the_cpu_and_releases_on_the_device() {
    let Some(p) = gpu() else { return };
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/tiny_cnn.onnx");
    let gpu = onyx::Session::builder()
        .with_provider(p.clone())
        .with_strict(true)
        .commit_from_file(&path)
        .unwrap();
    let cpu = onyx::Session::builder().commit_from_file(&path).unwrap();
    let x = f32s(&[2, 3, 64, 64], |i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0);
    let a = gpu.run([("input", Value::Tensor(x.clone()))]).unwrap();
    let b = cpu.run([("input", Value::Tensor(x))]).unwrap();
    let ya = a.get("probabilities").and_then(Value::as_tensor).unwrap().to_vec::<f32>().unwrap();
    let yb = b.get("probabilities").and_then(Value::as_tensor).unwrap().to_vec::<f32>().unwrap();
    for (u, v) in ya.iter().zip(&yb) {
        assert!((u - v).abs() <= 1e-4 * v.abs().max(1e-3), "{u} vs {v}");
    }
    assert_eq!(
        a.memory.peak_bytes, a.memory.live_set_bound_bytes,
        "device peak is the plan's bound"
    );
    assert!(a.memory.peak_bytes < a.memory.no_release_bytes);
    assert_eq!(
        p.memory_stats().in_use_bytes,
        a.memory.weight_bytes,
        "only weights stay on the device"
    );
}

#[test]
fn a_tensor_larger_than_a_binding_is_refused_before_dispatch() {
    let Some(p) = gpu() else { return };
    let limit = p.adapter().max_binding as usize;
    let n = limit / 4 + 1024;
    let m = model(
        graph(
            vec![node("Relu", "big_relu", &["x"], &["y"], vec![])],
            vec![value("x", DType::F32, &[n as i64])],
            vec![value("y", DType::F32, &[n as i64])],
            vec![],
        ),
        13,
    );
    let s = strict(m, &p);
    let err = s.run([("x", Value::Tensor(Tensor::zeros(DType::F32, vec![n])))]).unwrap_err();
    let chain = onyx::error_chain(&err);
    assert!(
        chain.contains("node 'big_relu'") && chain.contains("storage binding limit"),
        "{chain}"
    );
    assert_eq!(p.memory_stats().in_use_bytes, 0, "nothing leaks on the error path");
}

#[test]
fn unsupported_nodes_fall_back_to_the_cpu_unless_strict() {
    let Some(p) = gpu() else { return };
    // float64 arithmetic has no WGSL type: those nodes run on the CPU.
    let m = model(
        graph(
            vec![
                node("Cast", "up", &["x"], &["d"], vec![("to", A::I(11))]),
                node("Add", "add64", &["d", "d"], &["e"], vec![]),
                node("Cast", "down", &["e"], &["y"], vec![("to", A::I(1))]),
                node("Relu", "relu", &["y"], &["z"], vec![]),
            ],
            vec![value("x", DType::F32, &[4])],
            vec![value("z", DType::F32, &[4])],
            vec![],
        ),
        13,
    );
    let err = onyx::Session::builder()
        .with_provider(p.clone())
        .with_strict(true)
        .commit_from_bytes(m.clone(), None)
        .err()
        .unwrap();
    assert!(onyx::error_chain(&err).contains("no kernel on backend wgpu:0"), "{err}");
    let s = onyx::Session::builder().with_provider(p.clone()).commit_from_bytes(m, None).unwrap();
    let counts = s.kernels_per_device();
    assert_eq!(counts[0], ("wgpu:0".into(), 1));
    assert_eq!(counts[1], ("cpu".into(), 3));
    let o = s
        .run([(
            "x",
            Value::Tensor(Tensor::from_vec(vec![4], vec![-1f32, 0.5, 2.0, -3.0]).unwrap()),
        )])
        .unwrap();
    assert_eq!(
        o.get("z").and_then(Value::as_tensor).unwrap().to_vec::<f32>().unwrap(),
        vec![0.0, 1.0, 4.0, 0.0]
    );
    for d in &o.memory.devices {
        assert_eq!(d.peak_bytes, d.live_set_bound_bytes, "{}", d.device);
    }
}

/// Runs a one-node model on the GPU (strict) and on the CPU, and checks that
/// every output element agrees within `tol` of the output's largest magnitude.
fn assert_matches_cpu(p: &Arc<WgpuProvider>, m: Vec<u8>, inputs: Vec<(&str, Tensor)>, tol: f32) {
    let gpu = strict(m.clone(), p);
    let cpu = session(m, true);
    let values = || inputs.iter().map(|(n, t)| (n.to_string(), Value::Tensor(t.clone())));
    let a = gpu.run(values()).unwrap();
    let b = cpu.run(values()).unwrap();
    for (name, v) in &b.values {
        let want = v.as_tensor().unwrap().to_vec::<f32>().unwrap();
        let got = a.get(name).and_then(Value::as_tensor).unwrap();
        assert_eq!(got.shape(), v.as_tensor().unwrap().shape(), "{name}");
        let got = got.to_vec::<f32>().unwrap();
        let scale = want.iter().fold(0f32, |m, x| m.max(x.abs())).max(1e-6);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!((g - w).abs() <= tol * scale, "{name}[{i}]: {g} vs {w}");
        }
    }
}

#[test]
fn convolutions_as_implicit_gemms_match_the_cpu() {
    let Some(p) = gpu() else { return };
    // (input dims, weight dims, strides, pads, dilations, group, bias)
    type Case = (Vec<usize>, Vec<usize>, Vec<i64>, Vec<i64>, Vec<i64>, i64, bool);
    let cases: Vec<Case> = vec![
        (vec![2, 3, 9, 11], vec![16, 3, 3, 3], vec![1, 1], vec![1, 1, 1, 1], vec![1, 1], 1, true),
        (vec![1, 8, 10, 7], vec![24, 8, 3, 3], vec![2, 2], vec![1, 1, 1, 1], vec![1, 1], 1, false),
        (vec![2, 16, 8, 8], vec![32, 16, 1, 1], vec![1, 1], vec![0, 0, 0, 0], vec![1, 1], 1, true),
        (vec![1, 16, 9, 9], vec![16, 8, 3, 3], vec![1, 1], vec![2, 2, 2, 2], vec![2, 2], 2, true),
        (vec![1, 5, 20, 20], vec![130, 5, 3, 3], vec![1, 1], vec![0, 1, 1, 0], vec![1, 1], 1, true),
        (vec![2, 4, 20], vec![12, 4, 5], vec![2], vec![2, 1], vec![1], 1, true),
        (vec![1, 2, 5, 6, 7], vec![8, 2, 3, 3, 3], vec![1, 2, 1], vec![1; 6], vec![1; 3], 1, true),
        (vec![1, 32, 7, 7], vec![64, 32, 1, 1], vec![2, 2], vec![0, 0, 0, 0], vec![1, 1], 1, true),
    ];
    for (xs, ws, strides, pads, dilations, group, bias) in cases {
        let dims = |v: &[usize]| v.iter().map(|&d| d as i64).collect::<Vec<_>>();
        let mut ins = vec!["x", "w"];
        let mut values =
            vec![value("x", DType::F32, &dims(&xs)), value("w", DType::F32, &dims(&ws))];
        let x = f32s(&xs, |i| ((i * 7919) % 997) as f32 / 498.0 - 1.0);
        let w = f32s(&ws, |i| ((i * 104_729) % 991) as f32 / 495.0 - 1.0);
        let mut inputs = vec![("x", x), ("w", w)];
        if bias {
            ins.push("b");
            values.push(value("b", DType::F32, &[ws[0] as i64]));
            inputs.push(("b", f32s(&[ws[0]], |i| i as f32 * 0.1 - 1.0)));
        }
        let attrs = vec![
            ("strides", A::Is(strides)),
            ("pads", A::Is(pads)),
            ("dilations", A::Is(dilations)),
            ("group", A::I(group)),
        ];
        let m = model(
            graph(
                vec![node("Conv", "conv", &ins, &["y"], attrs)],
                values,
                vec![untyped("y")],
                vec![],
            ),
            13,
        );
        assert_matches_cpu(&p, m, inputs, 1e-5);
    }
}

#[test]
fn matrix_products_of_many_shapes_match_the_cpu() {
    let Some(p) = gpu() else { return };
    for (a, b) in [
        (vec![24, 72], vec![72, 20]),
        (vec![130, 9], vec![9, 260]),
        (vec![3, 1, 37, 19], vec![5, 19, 41]),
        (vec![200, 300], vec![300, 129]),
    ] {
        let dims = |v: &[usize]| v.iter().map(|&d| d as i64).collect::<Vec<_>>();
        let m = model(
            graph(
                vec![node("MatMul", "mm", &["a", "b"], &["y"], vec![])],
                vec![value("a", DType::F32, &dims(&a)), value("b", DType::F32, &dims(&b))],
                vec![untyped("y")],
                vec![],
            ),
            13,
        );
        let ta = f32s(&a, |i| ((i * 7919) % 997) as f32 / 498.0 - 1.0);
        let tb = f32s(&b, |i| ((i * 104_729) % 991) as f32 / 495.0 - 1.0);
        assert_matches_cpu(&p, m, vec![("a", ta), ("b", tb)], 1e-5);
    }
}

#[test]
fn float16_arithmetic_runs_natively_and_matches_the_cpu() {
    let Some(p) = gpu() else { return };
    // Lavapipe and the NVIDIA driver expose SHADER_F16: Add/Mul/Max of f16 tensors
    // (same shape and a broadcast bias row) run in native f16.
    assert!(p.adapter().shader_f16, "this adapter has no SHADER_F16");
    let m = model(
        graph(
            vec![
                node("Add", "add", &["a", "b"], &["s"], vec![]),
                node("Mul", "mul", &["s", "bias"], &["m"], vec![]),
                node("Max", "max", &["m", "a"], &["y"], vec![]),
            ],
            vec![
                value("a", DType::F16, &[2, 3, 8]),
                value("b", DType::F16, &[2, 3, 8]),
                value("bias", DType::F16, &[8]),
            ],
            vec![value("y", DType::F16, &[2, 3, 8])],
            vec![],
        ),
        13,
    );
    let h = |shape: &[usize], f: fn(usize) -> f32| {
        let n: usize = shape.iter().product();
        Tensor::from_vec(shape.to_vec(), (0..n).map(|i| half::f16::from_f32(f(i))).collect())
            .unwrap()
    };
    let inputs = [
        ("a", h(&[2, 3, 8], |i| (i as f32 * 0.37).sin() * 3.0)),
        ("b", h(&[2, 3, 8], |i| (i as f32 * 0.11).cos())),
        ("bias", h(&[8], |i| i as f32 * 0.25 - 1.0)),
    ];
    let values = || inputs.iter().map(|(n, t)| (n.to_string(), Value::Tensor(t.clone())));
    let on_gpu = strict(m.clone(), &p).run(values()).unwrap();
    let on_cpu = session(m, true).run(values()).unwrap();
    // Add, Mul and Max of f16 values are correctly rounded either way: bit-identical.
    assert_eq!(on_gpu.get("y"), on_cpu.get("y"));
}

#[test]
fn half_precision_nodes_without_a_half_kernel_compute_in_f32_on_the_device() {
    let Some(p) = gpu() else { return };
    // MatMul, LayerNormalization and Softmax have f32 kernels only: in f16 and
    // bf16 they run between inserted casts on the GPU, not on the CPU.
    for dtype in [DType::F16, DType::BF16] {
        let m = model(
            graph(
                vec![
                    node("MatMul", "mm", &["x", "w"], &["h"], vec![]),
                    node("LayerNormalization", "ln", &["h", "g"], &["n"], vec![]),
                    node("Softmax", "sm", &["n"], &["y"], vec![]),
                ],
                vec![
                    value("x", dtype, &[2, 5, 16]),
                    value("w", dtype, &[16, 8]),
                    value("g", dtype, &[8]),
                ],
                vec![value("y", dtype, &[2, 5, 8])],
                vec![],
            ),
            17,
        );
        let cast = |t: Tensor| {
            match dtype {
                DType::F16 => Tensor::from_vec(
                    t.shape().to_vec(),
                    t.to_vec::<f32>().unwrap().into_iter().map(half::f16::from_f32).collect(),
                ),
                _ => Tensor::from_vec(
                    t.shape().to_vec(),
                    t.to_vec::<f32>().unwrap().into_iter().map(half::bf16::from_f32).collect(),
                ),
            }
            .unwrap()
        };
        let inputs = [
            ("x", cast(f32s(&[2, 5, 16], |i| ((i * 7919) % 997) as f32 / 498.0 - 1.0))),
            ("w", cast(f32s(&[16, 8], |i| ((i * 104_729) % 991) as f32 / 495.0 - 1.0))),
            ("g", cast(f32s(&[8], |i| 0.5 + i as f32 * 0.1))),
        ];
        let values = || inputs.iter().map(|(n, t)| (n.to_string(), Value::Tensor(t.clone())));
        let s = strict(m.clone(), &p);
        // 3 nodes, 5 widening casts (x, w, h, g, n) and 3 narrowing ones (h,
        // n, y): between the nodes h and n stay half values, as the model says.
        assert_eq!(s.kernels_per_device(), vec![("wgpu:0".to_string(), 3 + 5 + 3)], "{dtype}");
        let a = s.run(values()).unwrap();
        let b = session(m, true).run(values()).unwrap();
        let (ya, yb) = (
            a.get("y").and_then(Value::as_tensor).unwrap(),
            b.get("y").and_then(Value::as_tensor).unwrap(),
        );
        assert_eq!(ya.dtype(), dtype);
        let tol = if dtype == DType::F16 { 2e-3 } else { 2e-2 };
        for (u, v) in ya.to_f64_vec().unwrap().iter().zip(yb.to_f64_vec().unwrap()) {
            assert!((u - v).abs() <= tol, "{dtype}: {u} vs {v}");
        }
        assert_eq!(a.memory.peak_bytes, a.memory.live_set_bound_bytes, "{dtype}");
    }
}

#[test]
fn a_dispatch_beyond_65535_workgroups_uses_a_two_dimensional_grid() {
    let Some(p) = gpu() else { return };
    // 2^24 + 300 elements at 256 per workgroup: 65,538 workgroups, one past
    // the per-dimension limit (64 MiB per tensor, under lavapipe's binding limit).
    let n = (1usize << 24) + 300;
    let m = model(
        graph(
            vec![node("Add", "add", &["a", "b"], &["y"], vec![])],
            vec![value("a", DType::F32, &[n as i64]), value("b", DType::F32, &[1])],
            vec![value("y", DType::F32, &[n as i64])],
            vec![],
        ),
        13,
    );
    let a = f32s(&[n], |i| (i % 1000) as f32);
    let b = f32s(&[1], |_| 0.5);
    let o = strict(m, &p).run([("a", Value::Tensor(a)), ("b", Value::Tensor(b))]).unwrap();
    let y = o.get("y").and_then(Value::as_tensor).unwrap().to_vec::<f32>().unwrap();
    // The last elements live in the second row of workgroups.
    for i in [0, 65_535 * 256, n - 300, n - 1] {
        assert_eq!(y[i], (i % 1000) as f32 + 0.5, "element {i}");
    }
}
