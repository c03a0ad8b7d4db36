//! Finding (and if needed generating) the node suite on disk.

use std::path::{Path, PathBuf};
use std::process::Command;

use regex::Regex;

use crate::compare::Tolerance;

/// One test case folder.
#[derive(Clone, Debug)]
pub struct Case {
    /// Folder name, e.g. `test_add_bcast`.
    pub name: String,
    /// The op under test (read from the model's first node).
    pub op: String,
    /// The case folder.
    pub dir: PathBuf,
    /// `model.onnx`.
    pub model: PathBuf,
    /// Tolerances from `meta.json` (onnx defaults when absent).
    pub tolerance: Tolerance,
}

/// Where the node suite lives: `$ONYX_TESTDATA/node`, else `target/onnx-testdata/node`.
pub fn node_suite_dir() -> PathBuf {
    testdata_dir().join("node")
}

/// Where the onnxruntime-generated cases live: `$ONYX_TESTDATA/ort`, else `target/onnx-testdata/ort`.
pub fn ort_suite_dir() -> PathBuf {
    testdata_dir().join("ort")
}

fn testdata_dir() -> PathBuf {
    match std::env::var_os("ONYX_TESTDATA") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/onnx-testdata"),
    }
}

/// Returns the node-suite folder, generating it with `scripts/fetch_node_suite.py`
/// (python3 with the `onnx` package) when it is not there yet.
///
/// # Errors
/// A message saying how to install what is missing.
pub fn ensure_node_suite() -> Result<PathBuf, String> {
    ensure(node_suite_dir(), "fetch_node_suite.py", "pip install onnx==1.23.0")
}

/// Returns the folder of onnxruntime-generated cases (contrib ops and other
/// ops outside the node suite), generating it with `scripts/gen_ort_cases.py`
/// (python3 with `onnx` and `onnxruntime`) when it is not there yet.
///
/// # Errors
/// A message saying how to install what is missing.
pub fn ensure_ort_suite() -> Result<PathBuf, String> {
    ensure(ort_suite_dir(), "gen_ort_cases.py", "pip install onnx==1.23.0 onnxruntime==1.32.0")
}

fn ensure(dir: PathBuf, script: &str, install: &str) -> Result<PathBuf, String> {
    if dir.join("SUITE.json").exists() {
        return Ok(dir);
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts").join(script);
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let status = Command::new(&python)
        .arg(&script)
        .arg(&dir)
        .status()
        .map_err(|e| format!("cannot run {python} {}: {e}", script.display()))?;
    if !status.success() {
        return Err(format!(
            "{} failed ({status}); install what it needs with `{install}`",
            script.display()
        ));
    }
    Ok(dir)
}

/// Lists the cases under `root`, optionally filtered by a regex on the name.
///
/// # Errors
/// I/O errors reading the folder.
pub fn discover(root: &Path, filter: Option<&Regex>) -> std::io::Result<Vec<Case>> {
    let mut cases = Vec::new();
    for entry in std::fs::read_dir(root)? {
        let dir = entry?.path();
        let model = dir.join("model.onnx");
        if !model.exists() {
            continue;
        }
        let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        if filter.is_some_and(|f| !f.is_match(&name)) {
            continue;
        }
        let tolerance = std::fs::read_to_string(dir.join("meta.json"))
            .ok()
            .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
            .map(|m| Tolerance {
                rtol: m["rtol"].as_f64().unwrap_or(1e-3),
                atol: m["atol"].as_f64().unwrap_or(1e-7),
            })
            .unwrap_or_default();
        let op = first_op(&model).unwrap_or_else(|| "?".into());
        cases.push(Case { name, op, dir, model, tolerance });
    }
    cases.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(cases)
}

fn first_op(model: &Path) -> Option<String> {
    use prost::Message;
    let bytes = std::fs::read(model).ok()?;
    let m = onyx_core::onnx::pb::ModelProto::decode(&bytes[..]).ok()?;
    let node = m.graph?.node.into_iter().next()?;
    node.op_type
}
