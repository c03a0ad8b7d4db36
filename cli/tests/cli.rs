//! The `onyx` binary: error chains, malformed models, outputs and reports.

#[path = "../../tests/facade/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;
use onyx::core::onnx::pb;
use onyx::{DType, Tensor};
use prost::Message;

fn onyx(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_onyx")).args(args).output().expect("the onyx binary runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// A model whose Gather reads index 7 of a 3-element axis: valid protobuf, bad data.
fn bad_gather() -> Vec<u8> {
    model(
        graph(
            vec![
                node("Relu", "relu", &["x"], &["r"], vec![]),
                node("Gather", "bad_gather", &["r", "idx"], &["y"], vec![("axis", A::I(0))]),
            ],
            vec![value("x", DType::F32, &[3, 2])],
            vec![value("y", DType::F32, &[1, 2])],
            vec![("idx", Tensor::from_vec(vec![1], vec![7i64]).unwrap())],
        ),
        13,
    )
}

fn small() -> Vec<u8> {
    model(
        graph(
            vec![
                node("MatMul", "mm", &["x", "w"], &["h"], vec![]),
                node("Relu", "act", &["h"], &["model/out:0"], vec![]),
                node("Shape", "shape", &["x"], &["x_shape"], vec![]),
            ],
            vec![value("x", DType::F32, &[-1, 4])],
            vec![value("model/out:0", DType::F32, &[-1, 3]), value("x_shape", DType::I64, &[2])],
            vec![("w", f32s(&[4, 3], |i| i as f32 * 0.1 - 0.5))],
        ),
        13,
    )
}

#[test]
fn a_kernel_failure_prints_every_layer_of_the_error_chain() {
    let dir = tempfile::tempdir().unwrap();
    let m = write(dir.path(), "bad.onnx", &bad_gather());
    let o = onyx(&["run", m.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "an error exit, not a panic: {}", stderr(&o));
    let err = stderr(&o);
    for layer in [
        "running ",                                                            // the CLI's context
        "running the model on cpu failed",                                     // the session
        "node 'bad_gather' (ai.onnx::Gather, opset 13) failed on backend cpu", // the executor
        "Gather index 7 is out of bounds for axis 0 of size 3",                // the kernel
    ] {
        assert!(err.contains(layer), "missing '{layer}' in:\n{err}");
    }
}

#[test]
fn an_empty_file_and_a_file_of_other_bytes_are_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let empty = write(dir.path(), "empty.onnx", &[]);
    let o = onyx(&["info", empty.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("the file is empty"), "{}", stderr(&o));
    // Field 10 as a varint: valid protobuf, but no IR version and no graph.
    let other = write(dir.path(), "other.onnx", &[0x50, 0x01]);
    let o = onyx(&["info", other.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("not an ONNX model"), "{}", stderr(&o));
}

#[test]
fn a_run_that_fails_on_defaulted_dimensions_names_them_and_suggests_dim() {
    // x [d0, 3] reshaped to [2, -1]: d0 left at 1 gives 3 elements, which do not split in two.
    let shape = Tensor::from_vec(vec![2], vec![2i64, -1]).unwrap();
    let bytes = model(
        graph(
            vec![node("Reshape", "halve", &["x", "shape"], &["y"], vec![])],
            vec![value("x", DType::F32, &[-1, 3])],
            vec![value("y", DType::F32, &[2, -1])],
            vec![("shape", shape)],
        ),
        13,
    );
    let dir = tempfile::tempdir().unwrap();
    let m = write(dir.path(), "halve.onnx", &bytes);
    let o = onyx(&["run", m.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("d0 left at 1") && err.contains("--dim NAME=VALUE"), "{err}");
    assert!(onyx(&["run", m.to_str().unwrap(), "--dim", "d0=2"]).status.success());
}

#[test]
fn a_truncated_model_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = small();
    let m = write(dir.path(), "cut.onnx", &bytes[..bytes.len() / 2]);
    let o = onyx(&["run", m.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("not a valid ONNX protobuf"), "{}", stderr(&o));
    let m = write(dir.path(), "junk.onnx", b"this is not a model at all");
    let o = onyx(&["info", m.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
}

#[test]
fn a_node_input_that_names_nothing_is_reported_with_the_node() {
    let m = model(
        graph(
            vec![node("Relu", "lost", &["nowhere"], &["y"], vec![])],
            vec![value("x", DType::F32, &[2])],
            vec![value("y", DType::F32, &[2])],
            vec![],
        ),
        13,
    );
    let dir = tempfile::tempdir().unwrap();
    let o = onyx(&["run", write(dir.path(), "m.onnx", &m).to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("node 'lost'") && err.contains("'nowhere'"), "{err}");
}

fn external_model(location: &str) -> Vec<u8> {
    let mut g = graph(
        vec![node("Add", "add", &["x", "w"], &["y"], vec![])],
        vec![value("x", DType::F32, &[2])],
        vec![value("y", DType::F32, &[2])],
        vec![],
    );
    g.initializer.push(pb::TensorProto {
        name: Some("w".into()),
        data_type: Some(1),
        dims: vec![2],
        data_location: Some(pb::tensor_proto::DataLocation::External as i32),
        external_data: vec![pb::StringStringEntryProto {
            key: Some("location".into()),
            value: Some(location.into()),
        }],
        ..Default::default()
    });
    model(g, 13)
}

#[test]
fn external_data_outside_the_model_folder_is_rejected() {
    let root = tempfile::tempdir().unwrap();
    let models = root.path().join("models");
    std::fs::create_dir(&models).unwrap();
    std::fs::write(root.path().join("secret.bin"), [0u8; 8]).unwrap();
    for location in ["../secret.bin", "/etc/hostname", "sub/../../secret.bin"] {
        let m = write(&models, "m.onnx", &external_model(location));
        let o = onyx(&["run", m.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(1), "{location}: {}", stderr(&o));
        assert!(stderr(&o).contains("escapes the model folder"), "{location}: {}", stderr(&o));
    }
    // The same layout inside the folder loads, and a short file is caught.
    std::fs::write(models.join("w.bin"), 1f32.to_le_bytes().repeat(2)).unwrap();
    let m = write(&models, "ok.onnx", &external_model("w.bin"));
    assert!(onyx(&["run", m.to_str().unwrap()]).status.success());
    std::fs::write(models.join("w.bin"), [0u8; 4]).unwrap();
    let o = onyx(&["run", m.to_str().unwrap()]);
    assert!(stderr(&o).contains("beyond the end"), "{}", stderr(&o));
}

#[test]
fn run_writes_every_output_as_npy_and_prints_json() {
    let dir = tempfile::tempdir().unwrap();
    let m = write(dir.path(), "small.onnx", &small());
    let out = dir.path().join("out");
    let o = onyx(&[
        "run",
        m.to_str().unwrap(),
        "--dim",
        "d0=5",
        "--output-dir",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    for key in ["latency_ms", "device", "outputs"] {
        assert!(!json[key].is_null(), "missing {key}");
    }
    for key in ["peak_bytes", "no_release_bytes", "live_set_bound_bytes", "releases"] {
        assert!(json["memory"][key].is_u64(), "missing memory.{key}");
    }
    assert_eq!(json["outputs"][0]["shape"], serde_json::json!([5, 3]));
    // Names with '/' and ':' become safe file names.
    let y = onyx::npy::read_npy(std::fs::File::open(out.join("model_out_0.npy")).unwrap()).unwrap();
    assert_eq!(y.shape(), &[5, 3]);
    let s = onyx::npy::read_npy(std::fs::File::open(out.join("x_shape.npy")).unwrap()).unwrap();
    assert_eq!(s.to_vec::<i64>().unwrap(), vec![5, 4]);
}

#[test]
fn run_reads_inputs_from_npy_and_pb_files() {
    let dir = tempfile::tempdir().unwrap();
    let m = write(dir.path(), "small.onnx", &small());
    let x = f32s(&[2, 4], |i| i as f32);
    let mut npy = Vec::new();
    onyx::npy::write_npy(&mut npy, &x).unwrap();
    let npy = write(dir.path(), "x.npy", &npy);
    let pb = write(dir.path(), "x.pb", &onyx::core::onnx::tensor_to_proto("x", &x).encode_to_vec());
    let mut results = Vec::new();
    for file in [npy, pb] {
        let o = onyx(&[
            "run",
            m.to_str().unwrap(),
            "--input",
            &format!("x={}", file.display()),
            "--json",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        results.push(json["outputs"][0]["stats"].clone());
    }
    assert_eq!(results[0], results[1]);
    let o = onyx(&["run", m.to_str().unwrap(), "--input", "nope=x.npy"]);
    assert!(stderr(&o).contains("no input named 'nope'"), "{}", stderr(&o));
}

#[test]
#[cfg(unix)]
fn conformance_generates_its_suite_with_scripts_written_beside_the_data() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    // A python that fails at once: the error names the script it was given.
    let python = write(dir.path(), "python", b"#!/bin/sh\nexit 3\n");
    std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
    let data = dir.path().join("data");
    let o = Command::new(env!("CARGO_BIN_EXE_onyx"))
        .args(["conformance", "--suite", "node"])
        .env("ONYX_TESTDATA", &data)
        .env("PYTHON", &python)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let script = data.join("scripts").join("fetch_node_suite.py");
    let e = stderr(&o);
    assert!(e.contains(&script.display().to_string()), "{e}");
    assert!(!e.contains("tests/scripts"), "the source tree is named: {e}");
    let written = std::fs::read_to_string(&script).unwrap();
    assert_eq!(written, include_str!("../../tests/scripts/fetch_node_suite.py"));
}

#[test]
#[cfg(unix)]
fn output_into_a_closed_pipe_ends_the_command_quietly() {
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    let m = write(dir.path(), "small.onnx", &small());
    let mut child = Command::new(env!("CARGO_BIN_EXE_onyx"))
        .args(["info", m.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // As `| head -0` does: the reader goes away before the first line.
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    assert_ne!(o.status.code(), Some(101), "{}", stderr(&o));
}

#[test]
fn info_describes_the_model_and_its_planned_memory() {
    let dir = tempfile::tempdir().unwrap();
    let m = write(dir.path(), "small.onnx", &small());
    let o = onyx(&["info", m.to_str().unwrap(), "--dim", "d0=8"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    for part in [
        "ir        8",
        "ai.onnx 13",
        "MatMul",
        "live-set bound",
        "x: float32[d0, 4]",
        "dims      d0=8 (generated inputs; set with --dim NAME=VALUE)",
    ] {
        assert!(text.contains(part), "missing '{part}' in:\n{text}");
    }
}

#[test]
fn an_unavailable_device_falls_back_with_a_warning_unless_strict() {
    let dir = tempfile::tempdir().unwrap();
    let m = write(dir.path(), "small.onnx", &small());
    let o = onyx(&["run", m.to_str().unwrap(), "--device", "cuda:7", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("falling back to cpu"), "{}", stderr(&o));
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(json["device"], "cpu");
    assert_eq!(json["requested_device"], "cuda:7");
    let o = onyx(&["run", m.to_str().unwrap(), "--device", "cuda:7", "--strict"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("device cuda:7 is not available"), "{}", stderr(&o));
}

#[test]
fn an_unsupported_op_is_named_in_the_error() {
    let m = model(
        graph(
            vec![node("Frobnicate", "f", &["x"], &["y"], vec![])],
            vec![value("x", DType::F32, &[2])],
            vec![value("y", DType::F32, &[2])],
            vec![],
        ),
        13,
    );
    let dir = tempfile::tempdir().unwrap();
    let o = onyx(&["run", write(dir.path(), "m.onnx", &m).to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("operator ai.onnx::Frobnicate is not supported"), "{}", stderr(&o));
}

#[test]
fn bench_reports_session_first_run_and_warm_latency() {
    let model =
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).join("examples/tiny_cnn.onnx");
    let o = onyx(&["bench", model.to_str().unwrap(), "--runs", "5", "--warmup", "1", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["warm"]["runs"], 5);
    let w = &r["warm"];
    assert!(w["min_ms"].as_f64() <= w["median_ms"].as_f64());
    assert!(w["median_ms"].as_f64() <= w["max_ms"].as_f64());
    assert!(
        r["first_run_ms"].as_f64().unwrap() > 0.0 && r["session_create_ms"].as_f64().unwrap() > 0.0
    );
    assert!(!onyx(&["bench", model.to_str().unwrap(), "--runs", "0"]).status.success());
}

#[test]
fn bench_profile_reports_each_nodes_median_over_the_profiled_runs() {
    let model =
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).join("examples/tiny_cnn.onnx");
    let path = model.to_str().unwrap();
    let args = ["bench", path, "--runs", "2", "--profile", "--profile-runs", "5", "--json"];
    let o = onyx(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let p = &r["profile"];
    assert_eq!(p["runs"], 5);
    let nodes = p["by_node"].as_array().unwrap();
    assert_eq!(p["nodes"].as_u64().unwrap() as usize, nodes.len());
    assert!(!nodes.is_empty());
    // Slowest first, and the op totals add up to the node medians.
    let ms: Vec<f64> = nodes.iter().map(|n| n["ms"].as_f64().unwrap()).collect();
    assert!(ms.windows(2).all(|w| w[0] >= w[1]), "{ms:?}");
    let by_op: f64 = p["by_op"].as_array().unwrap().iter().map(|o| o["ms"].as_f64().unwrap()).sum();
    assert!((by_op - ms.iter().sum::<f64>()).abs() < 1e-9);
    assert!((p["total_ms"].as_f64().unwrap() - by_op).abs() < 1e-9);
    let zero = onyx(&["bench", path, "--runs", "1", "--profile", "--profile-runs", "0"]);
    assert!(!zero.status.success());
}

/// On Mesa lavapipe in CI; set `ONYX_SKIP_WGPU=1` on a machine with no adapter.
#[cfg(feature = "wgpu")]
#[test]
fn info_on_wgpu_shows_where_each_op_runs() {
    if std::env::var_os("ONYX_SKIP_WGPU").is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // float64 arithmetic has no WGSL type: that Add falls back to the CPU.
    let m = model(
        graph(
            vec![
                node("Relu", "relu", &["x"], &["r"], vec![]),
                node("Cast", "up", &["r"], &["d"], vec![("to", A::I(11))]),
                node("Add", "add64", &["d", "d"], &["y"], vec![]),
            ],
            vec![value("x", DType::F32, &[4])],
            vec![value("y", DType::F64, &[4])],
            vec![],
        ),
        13,
    );
    let path = write(dir.path(), "mixed.onnx", &m);
    let o = onyx(&["info", path.to_str().unwrap(), "--device", "wgpu", "--no-plan"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    let line =
        |op: &str| text.lines().find(|l| l.trim_start().starts_with(op)).unwrap_or("").to_string();
    assert!(line("Relu").ends_with("wgpu:0 1"), "{text}");
    assert!(line("Add").ends_with("cpu 1"), "{text}");
    assert!(text.contains("add64") && text.contains("-> cpu"), "{text}");
    let strict =
        onyx(&["info", path.to_str().unwrap(), "--device", "wgpu", "--strict", "--no-plan"]);
    assert!(
        String::from_utf8_lossy(&strict.stdout).contains("unavailable"),
        "strict refuses the fallback"
    );
}
