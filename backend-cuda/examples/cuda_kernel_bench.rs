//! Kernel throughput on a CUDA GPU, through the same compile/run path sessions
//! use, with inputs resident on the device (no host transfers are timed).
//!
//! ```sh
//! cargo run --release --example cuda_kernel_bench -p onyx-cuda -- [--add-elems N] [--runs R] [--reps K] [--matmul DTYPE:N ...]
//! ```
//!
//! Prints one JSON object: the device, the driver's device-to-device copy
//! (`cuMemcpyDtoDAsync`, bytes read + written per second), an elementwise f32
//! Add over N elements (bytes per second and its fraction of that copy, checked
//! exactly), and square MatMuls (default `bf16:8192 f16:4096 f32:4096`) in
//! TFLOP/s with sampled outputs checked against f64 dot products. Each sample
//! queues K back-to-back runs and waits for the stream; a figure is the median
//! of R samples after 3 warm-up samples, divided by K.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use onyx_core::dtype::DType;
use onyx_core::ep::{ExecutionProvider, TensorArg};
use onyx_core::exec::{self, CompileOptions, DeviceValue, RunOptions};
use onyx_core::onnx::pb;
use onyx_core::ops::OpRegistry;
use onyx_cuda::{CudaOptions, CudaProvider};
use prost::Message;

fn value(name: &str, dtype: DType, dims: &[i64]) -> pb::ValueInfoProto {
    use pb::tensor_shape_proto::{Dimension, dimension::Value as D};
    pb::ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(pb::TypeProto {
            value: Some(pb::type_proto::Value::TensorType(pb::type_proto::Tensor {
                elem_type: Some(dtype.to_onnx()),
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
fn model(op: &str, dtype: DType, a: &[i64], b: &[i64], y: &[i64]) -> Vec<u8> {
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
            input: vec![value("a", dtype, a), value("b", dtype, b)],
            output: vec![value("y", dtype, y)],
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

/// Host bytes of `data` in `dtype`, and the values as that dtype rounds them.
fn encode(dtype: DType, data: &[f32]) -> (Vec<u8>, Vec<f32>) {
    match dtype {
        DType::F16 => {
            let h: Vec<half::f16> = data.iter().map(|&v| half::f16::from_f32(v)).collect();
            (
                h.iter().flat_map(|v| v.to_le_bytes()).collect(),
                h.iter().map(|v| v.to_f32()).collect(),
            )
        }
        DType::BF16 => {
            let h: Vec<half::bf16> = data.iter().map(|&v| half::bf16::from_f32(v)).collect();
            (
                h.iter().flat_map(|v| v.to_le_bytes()).collect(),
                h.iter().map(|v| v.to_f32()).collect(),
            )
        }
        _ => (data.iter().flat_map(|v| v.to_le_bytes()).collect(), data.to_vec()),
    }
}

fn decode(dtype: DType, bytes: &[u8]) -> Vec<f32> {
    match dtype {
        DType::F16 => {
            bytes.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect()
        }
        DType::BF16 => bytes
            .chunks_exact(2)
            .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
        _ => bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
    }
}

fn upload(gpu: &CudaProvider, dtype: DType, dims: &[usize], bytes: &[u8]) -> TensorArg {
    let buffer = gpu.allocate(bytes.len() as u64, 256).expect("allocate");
    gpu.upload(buffer, bytes).expect("upload");
    TensorArg { buffer, dtype, shape: dims.to_vec() }
}

fn sync(gpu: &CudaProvider) {
    pollster::block_on(gpu.synchronize()).expect("sync");
}

/// Median seconds of `reps` back-to-back calls of `f` (then a sync), per call.
fn sample(gpu: &CudaProvider, runs: usize, reps: usize, mut f: impl FnMut()) -> f64 {
    let mut times = Vec::new();
    for i in 0..runs + 3 {
        sync(gpu);
        let start = Instant::now();
        for _ in 0..reps {
            f();
        }
        sync(gpu);
        if i >= 3 {
            times.push(start.elapsed().as_secs_f64() / reps as f64);
        }
    }
    median(times)
}

/// Median seconds of one run of a one-node model on device-resident inputs,
/// and the last run's output bytes.
fn time_model(
    gpu: &Arc<CudaProvider>,
    bytes: Vec<u8>,
    inputs: [TensorArg; 2],
    runs: usize,
    reps: usize,
) -> (f64, Vec<u8>) {
    let model =
        onyx_core::onnx::load_model_bytes(bytes.into(), &onyx_core::onnx::external::NoExternalData)
            .expect("model");
    let registry = OpRegistry::standard();
    let providers: [&dyn ExecutionProvider; 1] = [&**gpu];
    let opts = CompileOptions { allow_fallback: false, ..CompileOptions::new(&registry) };
    let mut cg =
        exec::compile(Arc::new(model.graph), &HashMap::new(), &providers, &opts).expect("compile");
    let values = [DeviceValue::Tensor(inputs[0].clone()), DeviceValue::Tensor(inputs[1].clone())];
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
    for t in inputs {
        gpu.deallocate(t.buffer).expect("free");
    }
    cg.free_weights(&providers).expect("free weights");
    (seconds, bytes)
}

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn matmul_case(
    gpu: &Arc<CudaProvider>,
    dtype: DType,
    mm: usize,
    runs: usize,
    reps: usize,
) -> String {
    let m = mm as i64;
    let (ea, a) = encode(dtype, &random(mm * mm, 3));
    let (eb, b) = encode(dtype, &random(mm * mm, 4));
    let inputs = [upload(gpu, dtype, &[mm, mm], &ea), upload(gpu, dtype, &[mm, mm], &eb)];
    let (s, out) =
        time_model(gpu, model("MatMul", dtype, &[m, m], &[m, m], &[m, m]), inputs, runs, reps);
    let prod = decode(dtype, &out);
    // Largest error over sampled outputs, relative to the sampled outputs' RMS.
    let (mut err, mut sq) = (0.0f64, 0.0f64);
    let samples = 256;
    for t in 0..samples {
        let (i, j) = ((t * 7919) % mm, (t * 104_729) % mm);
        let r: f64 = (0..mm).map(|k| a[i * mm + k] as f64 * b[k * mm + j] as f64).sum();
        err = err.max((prod[i * mm + j] as f64 - r).abs());
        sq += r * r;
    }
    let rel = err / (sq / samples as f64).sqrt();
    let tflops = 2.0 * (mm as f64).powi(3) / s / 1e12;
    format!(
        r#"{{"dtype": "{dtype}", "n": {mm}, "seconds": {s:.6}, "tflops": {tflops:.2}, "max_error_over_rms": {rel:.2e}}}"#
    )
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n = arg(&args, "--add-elems", 256 << 20);
    let runs = arg(&args, "--runs", 20);
    let reps = arg(&args, "--reps", 10).max(1);
    let mut cases: Vec<(DType, usize)> = Vec::new();
    for (i, a) in args.iter().enumerate() {
        if a == "--matmul" {
            let spec = args.get(i + 1).expect("--matmul DTYPE:N");
            let (d, size) = spec.split_once(':').expect("--matmul DTYPE:N");
            let dtype = match d {
                "bf16" => DType::BF16,
                "f16" => DType::F16,
                _ => DType::F32,
            };
            cases.push((dtype, size.parse().expect("a size")));
        }
    }
    if cases.is_empty() {
        cases = vec![(DType::BF16, 8192), (DType::F16, 4096), (DType::F32, 4096)];
    }
    let gpu = Arc::new(CudaProvider::new(CudaOptions::default()).expect("a CUDA device"));
    let name = gpu.info().name.clone();

    // Ceiling: the driver's own device-to-device copy of the same bytes.
    let (x, z) = (random(n, 1), random(n, 2));
    let (ex, _) = encode(DType::F32, &x);
    let (ez, _) = encode(DType::F32, &z);
    let src = upload(&gpu, DType::F32, &[n], &ex);
    let dst = gpu.allocate(4 * n as u64, 256).expect("allocate");
    let copy_s =
        sample(&gpu, runs, reps, || gpu.copy(src.buffer, dst, 4 * n as u64).expect("copy"));
    gpu.deallocate(dst).expect("free");
    let copy_bw = 2.0 * 4.0 * n as f64 / copy_s;

    let dims = [n as i64];
    let inputs = [src, upload(&gpu, DType::F32, &[n], &ez)];
    let (add_s, out) =
        time_model(&gpu, model("Add", DType::F32, &dims, &dims, &dims), inputs, runs, reps);
    let sum = decode(DType::F32, &out);
    let add_ok = (0..n).all(|i| sum[i] == x[i] + z[i]);
    let add_bw = 3.0 * 4.0 * n as f64 / add_s;
    let fraction = add_bw / copy_bw;

    let matmuls: Vec<String> =
        cases.iter().map(|&(d, s)| matmul_case(&gpu, d, s, runs, reps)).collect();
    println!(
        r#"{{"device": "{name}", "runs": {runs}, "reps": {reps}, "copy": {{"elements": {n}, "seconds": {copy_s:.6}, "bytes_per_s": {copy_bw:.4e}}}, "add": {{"elements": {n}, "seconds": {add_s:.6}, "bytes_per_s": {add_bw:.4e}, "fraction_of_copy": {fraction:.3}, "exact": {add_ok}}}, "matmul": [{}]}}"#,
        matmuls.join(", ")
    );
}
