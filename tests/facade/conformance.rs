//! The ONNX node suite and the onnxruntime-generated cases, per backend,
//! against manifests of expected passes. A case in a manifest that stops
//! passing fails its test; a newly passing case is printed so it can be added.

use std::path::{Path, PathBuf};

use onyx::conformance::SessionRuntime;
use onyx_conformance::{
    check_manifest, discover, ensure_node_suite, ensure_ort_suite, read_manifest, run_suite,
};

/// Runs a whole suite on `device` with fallback forbidden and checks the manifest.
fn check(suite: fn() -> Result<PathBuf, String>, device: &str, manifest: &str) {
    let dir = suite().unwrap_or_else(|e| panic!("{e}"));
    let cases = discover(&dir, None).unwrap();
    let report =
        run_suite(&SessionRuntime::new(device, true).unwrap_or_else(|e| panic!("{e}")), &cases);
    let name = manifest.trim_end_matches(".txt");
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/conformance").join(name);
    report.write(&out).unwrap();
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/manifests").join(manifest);
    let check = check_manifest(&report, &read_manifest(&manifest).unwrap());
    let c = report.counts();
    println!(
        "{name}: {} passed, {} failed, {} errors, {} unsupported of {}",
        c.pass,
        c.fail,
        c.error,
        c.unsupported,
        c.total()
    );
    if !check.new_passes.is_empty() {
        println!("{} cases pass but are not in {}:", check.new_passes.len(), manifest.display());
        for n in &check.new_passes {
            println!("  {n}");
        }
    }
    let regressions: Vec<String> =
        check.regressions.iter().map(|(n, why)| format!("{n}: {why}")).collect();
    assert!(
        regressions.is_empty(),
        "{} regressions:\n{}",
        regressions.len(),
        regressions.join("\n")
    );
}

#[test]
fn the_cpu_backend_passes_every_case_in_its_manifest() {
    check(ensure_node_suite, "cpu", "node-cpu.txt");
}

#[test]
fn the_cpu_backend_passes_every_onnxruntime_case_in_its_manifest() {
    check(ensure_ort_suite, "cpu", "ort-cpu.txt");
}

/// On Mesa lavapipe in CI; set `ONYX_SKIP_WGPU=1` on a machine with no adapter.
#[cfg(feature = "wgpu")]
#[test]
fn the_wgpu_backend_passes_every_case_in_its_manifest_without_fallback() {
    if std::env::var_os("ONYX_SKIP_WGPU").is_some() {
        eprintln!("ONYX_SKIP_WGPU is set: skipping");
        return;
    }
    check(ensure_node_suite, "wgpu", "node-wgpu.txt");
}

/// On Mesa lavapipe in CI; set `ONYX_SKIP_WGPU=1` on a machine with no adapter.
#[cfg(feature = "wgpu")]
#[test]
fn the_wgpu_backend_passes_every_onnxruntime_case_in_its_manifest_without_fallback() {
    if std::env::var_os("ONYX_SKIP_WGPU").is_some() {
        eprintln!("ONYX_SKIP_WGPU is set: skipping");
        return;
    }
    check(ensure_ort_suite, "wgpu", "ort-wgpu.txt");
}
