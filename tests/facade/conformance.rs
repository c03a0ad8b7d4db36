//! The ONNX node suite on the CPU backend against its manifest of expected passes.
//! A case in the manifest that stops passing fails this test; a newly passing
//! case is printed so it can be added.

use std::path::Path;

use onyx::conformance::SessionRuntime;
use onyx_conformance::{check_manifest, discover, ensure_node_suite, read_manifest, run_suite};

#[test]
fn the_cpu_backend_passes_every_case_in_its_manifest() {
    let dir = ensure_node_suite().unwrap_or_else(|e| panic!("{e}"));
    let cases = discover(&dir, None).unwrap();
    let report = run_suite(&SessionRuntime::new("cpu", true).unwrap(), &cases);
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/conformance");
    report.write(&out).unwrap();
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/manifests/node-cpu.txt");
    let check = check_manifest(&report, &read_manifest(&manifest).unwrap());
    let c = report.counts();
    println!(
        "cpu: {} passed, {} failed, {} errors, {} unsupported of {}",
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
