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
    match std::env::var_os("ONYX_TESTDATA") {
        Some(d) => PathBuf::from(d).join("node"),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/onnx-testdata/node"),
    }
}

/// Returns the suite folder, generating it with the fetch script (python3 with
/// the `onnx` package) when it is not there yet.
///
/// # Errors
/// A message saying how to install what is missing.
pub fn ensure_node_suite() -> Result<PathBuf, String> {
    let dir = node_suite_dir();
    if dir.join("SUITE.json").exists() {
        return Ok(dir);
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/fetch_node_suite.py");
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let status = Command::new(&python)
        .arg(&script)
        .arg(&dir)
        .status()
        .map_err(|e| format!("cannot run {python} {}: {e}", script.display()))?;
    if !status.success() {
        return Err(format!(
            "{} failed ({status}); install the suite's generator with `pip install onnx==1.23.0`",
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
