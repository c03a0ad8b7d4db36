//! Kernel throughput on a wgpu adapter, through the same compile/run path sessions use,
//! with inputs resident on the device (no host transfers are timed).
//!
//! ```sh
//! cargo run --release -p onyx-wgpu --example wgpu_kernel_bench -- [--add-elems N] [--matmul N] [--runs R] [--reps K]
//! ```
//!
//! Prints one JSON object: the adapter, the driver's device-to-device buffer copy
//! (`copy_buffer_to_buffer`; on some drivers far below the memory bandwidth, so
//! compare with a copy measured outside wgpu too), an elementwise Add (bytes read +
//! written per second, and its fraction of that copy), and a square f32 MatMul in TFLOP/s. Each sample records
//! K back-to-back runs and waits until the device is idle; a figure is the median of
//! R samples (after 3 warm-up samples), divided by K. Inputs are pseudo-random, and
//! sampled MatMul outputs are checked against an f64 dot product on the host.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use onyx_core::dtype::DType;
use onyx_core::ep::{ExecutionProvider, TensorArg};
use onyx_core::exec::{self, CompileOptions, DeviceValue, RunOptions};
use onyx_core::onnx::pb;
use onyx_core::ops::OpRegistry;
use onyx_wgpu::{WgpuOptions, WgpuProvider};
use prost::Message;

fn value(name: &str, dims: &[i64]) -> pb::ValueInfoProto {
    use pb::tensor_shape_proto::{Dimension, dimension::Value as D};
    pb::ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(pb::TypeProto {
            value: Some(pb::type_proto::Value::TensorType(pb::type_proto::Tensor {
                elem_type: Some(1),
                shape: Some(pb::TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|&d| Dimension { value: Some(D::DimValue(d)), ..Default::default() })
                        .collect(),
                }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A one-node model `y = op(a, b)`.
fn model(op: &str, a: &[i64], b: &[i64], y: &[i64]) -> Vec<u8> {
    pb::ModelProto {
        ir_version: Some(8),
        opset_import: vec![pb::OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        graph: Some(pb::GraphProto {
            node: vec![pb::NodeProto {
                op_type: Some(op.into()),
                input: vec!["a".into(), "b".into()],
                output: vec!["y".into()],
                ..Default::default()
            }],
            input: vec![value("a", a), value("b", b)],
            output: vec![value("y", y)],
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN times"));
    v[v.len() / 2]
}

/// Pseudo-random values in [-1, 1) from a seed (a 64-bit LCG, high bits).
fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn upload(gpu: &WgpuProvider, dims: &[usize], data: &[f32]) -> TensorArg {
    let buffer = gpu.allocate(4 * data.len() as u64, 4).expect("allocate");
    gpu.upload(buffer, bytemuck::cast_slice(data)).expect("upload");
    TensorArg { buffer, dtype: DType::F32, shape: dims.to_vec() }
}

/// Samples of `reps` back-to-back calls of `f`, each sample ending with the device idle.
fn sample(gpu: &WgpuProvider, runs: usize, reps: usize, mut f: impl FnMut()) -> f64 {
    let mut times = Vec::new();
    for i in 0..runs + 3 {
        let start = Instant::now();
        for _ in 0..reps {
            f();
        }
        pollster::block_on(gpu.synchronize()).expect("sync");
        if i >= 3 {
            times.push(start.elapsed().as_secs_f64() / reps as f64);
        }
    }
    median(times)
}

/// Median seconds of one run of a one-node model on device-resident inputs,
/// and the last run's output (downloaded).
fn time_model(
    gpu: &Arc<WgpuProvider>,
    bytes: Vec<u8>,
    inputs: [(&[usize], &[f32]); 2],
    runs: usize,
    reps: usize,
) -> (f64, Vec<f32>) {
    let model =
        onyx_core::onnx::load_model_bytes(bytes.into(), &onyx_core::onnx::external::NoExternalData)
            .expect("model");
    let registry = OpRegistry::standard();
    let providers: [&dyn ExecutionProvider; 1] = [&**gpu];
    let opts = CompileOptions { allow_fallback: false, ..CompileOptions::new(&registry) };
    let mut cg =
        exec::compile(Arc::new(model.graph), &HashMap::new(), &providers, &opts).expect("compile");
    let (ta, tb) = (upload(gpu, inputs[0].0, inputs[0].1), upload(gpu, inputs[1].0, inputs[1].1));
    let values = [DeviceValue::Tensor(ta.clone()), DeviceValue::Tensor(tb.clone())];
    let mut last: Option<TensorArg> = None;
    let seconds = sample(gpu, runs, reps, || {
        let r = pollster::block_on(exec::run(&cg, &providers, &values, RunOptions::default()))
            .expect("run");
        for o in r.outputs {
            if let DeviceValue::Tensor(t) = o {
                if let Some(old) = last.replace(t) {
                    gpu.deallocate(old.buffer).expect("free");
                }
            }
        }
    });
    let out = last.expect("one output");
    let bytes =
        pollster::block_on(gpu.download(out.buffer, out.buffer.size as usize)).expect("download");
    gpu.deallocate(out.buffer).expect("free");
    gpu.deallocate(ta.buffer).expect("free");
    gpu.deallocate(tb.buffer).expect("free");
    cg.free_weights(&providers).expect("free weights");
    let values = bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]));
    (seconds, values.collect())
}

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n = arg(&args, "--add-elems", 256 << 20);
    let mm = arg(&args, "--matmul", 4096);
    let runs = arg(&args, "--runs", 20);
    let reps = arg(&args, "--reps", 5).max(1);
    let gpu = Arc::new(
        pollster::block_on(WgpuProvider::new(WgpuOptions::default())).expect("a wgpu adapter"),
    );
    let adapter = gpu.adapter().clone();

    // Ceiling: the driver's own buffer copy of the same bytes.
    let (x, z) = (random(n, 1), random(n, 2));
    let src = upload(&gpu, &[n], &x);
    let dst = gpu.allocate(4 * n as u64, 4).expect("allocate");
    let copy_s =
        sample(&gpu, runs, reps, || gpu.copy(src.buffer, dst, 4 * n as u64).expect("copy"));
    gpu.deallocate(src.buffer).expect("free");
    gpu.deallocate(dst).expect("free");
    let copy_bw = 2.0 * 4.0 * n as f64 / copy_s;

    let dims = [n as i64];
    let (add_s, sum) =
        time_model(&gpu, model("Add", &dims, &dims, &dims), [(&[n], &x), (&[n], &z)], runs, reps);
    let add_ok = (0..n).step_by(n / 1000 + 1).all(|i| sum[i] == x[i] + z[i]);
    let add_bw = 3.0 * 4.0 * n as f64 / add_s;

    let m = mm as i64;
    let (a, b) = (random(mm * mm, 3), random(mm * mm, 4));
    let (mm_s, prod) = time_model(
        &gpu,
        model("MatMul", &[m, m], &[m, m], &[m, m]),
        [(&[mm, mm], &a), (&[mm, mm], &b)],
        runs,
        reps,
    );
    // Largest error over sampled outputs, relative to the sampled outputs' RMS.
    let (mut err, mut sq) = (0.0f64, 0.0f64);
    let samples = 256;
    for s in 0..samples {
        let (i, j) = ((s * 7919) % mm, (s * 104_729) % mm);
        let r: f64 = (0..mm).map(|k| a[i * mm + k] as f64 * b[k * mm + j] as f64).sum();
        err = err.max((prod[i * mm + j] as f64 - r).abs());
        sq += r * r;
    }
    let mm_rel_err = err / (sq / samples as f64).sqrt();
    let tflops = 2.0 * (mm as f64).powi(3) / mm_s / 1e12;

    let fraction = add_bw / copy_bw;
    let name = &adapter.name;
    let backend = &adapter.backend;
    println!(
        r#"{{"adapter": "{name}", "backend": "{backend}", "runs": {runs}, "reps": {reps}, "buffer_copy": {{"elements": {n}, "seconds": {copy_s:.6}, "bytes_per_s": {copy_bw:.4e}}}, "add": {{"elements": {n}, "seconds": {add_s:.6}, "bytes_per_s": {add_bw:.4e}, "fraction_of_buffer_copy": {fraction:.3}, "exact": {add_ok}}}, "matmul": {{"n": {mm}, "seconds": {mm_s:.6}, "tflops": {tflops:.3}, "max_error_over_rms": {mm_rel_err:.2e}}}}}"#
    );
}
