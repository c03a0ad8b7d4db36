//! The ONNX node suite and the onnxruntime-generated cases, per backend,
//! against manifests of expected passes. A case in a manifest that stops
//! passing fails its test; a newly passing case is printed so it can be added.

use std::path::{Path, PathBuf};
use std::process::Command;

use onyx_cli::SessionRuntime;
use onyx_conformance::{
    check_manifest, discover, ensure_node_suite, ensure_ort_suite, read_manifest, run_suite,
};

/// Makes a suite's cases if they are missing or stale, and returns their folder.
type Ensure = fn() -> Result<PathBuf, String>;

/// Runs a whole suite on `device` with fallback forbidden and checks the manifest.
fn check(suite: Ensure, device: &str, manifest: &str) {
    let dir = suite().unwrap_or_else(|e| panic!("{e}"));
    let cases = discover(&dir, None).unwrap();
    let report =
        run_suite(&SessionRuntime::new(device, true).unwrap_or_else(|e| panic!("{e}")), &cases);
    let name = manifest.trim_end_matches(".txt");
    let out =
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).join("target/conformance").join(name);
    report.write(&out).unwrap();
    let manifest = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .join("tests/manifests")
        .join(manifest);
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

/// The CPU pool does not zero the blocks it hands out (ARCHITECTURE.md, "The
/// CPU backend"), so every kernel must write all of its outputs: both suites
/// run again with every block filled with `0xFF` bytes, through the CLI, as
/// the pool reads `ONYX_CPU_POISON` when it is made.
#[test]
fn the_cpu_kernels_pass_their_manifests_on_poisoned_memory() {
    let suites: [(&str, Ensure, &str); 2] =
        [("node", ensure_node_suite, "node-cpu.txt"), ("ort", ensure_ort_suite, "ort-cpu.txt")];
    let root = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    for (suite, ensure, manifest) in suites {
        ensure().unwrap_or_else(|e| panic!("{e}"));
        let out = Command::new(env!("CARGO_BIN_EXE_onyx"))
            .env("ONYX_CPU_POISON", "1")
            .args(["conformance", "--backend", "cpu", "--suite", suite, "--manifest"])
            .arg(root.join("tests/manifests").join(manifest))
            .arg("--report")
            .arg(root.join("target/conformance").join(format!("poisoned-{suite}")))
            .output()
            .expect("the onyx binary runs");
        assert!(
            out.status.success(),
            "the {suite} suite on poisoned memory:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
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
