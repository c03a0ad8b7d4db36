//! The generator scripts, built into the binary: `onyx conformance` writes
//! them next to the test data it generates, so a binary copied away from the
//! source tree (or installed) still generates its suites, and no path of the
//! machine it was built on is ever used.

use std::path::{Path, PathBuf};

/// Every script file, by its path under `tests/scripts/`.
pub(crate) const SCRIPTS: &[(&str, &str)] = &[
    ("fetch_node_suite.py", include_str!("../scripts/fetch_node_suite.py")),
    ("gen_ort_cases.py", include_str!("../scripts/gen_ort_cases.py")),
    ("ort_cases/__init__.py", include_str!("../scripts/ort_cases/__init__.py")),
    ("ort_cases/activations.py", include_str!("../scripts/ort_cases/activations.py")),
    ("ort_cases/attention.py", include_str!("../scripts/ort_cases/attention.py")),
    ("ort_cases/common.py", include_str!("../scripts/ort_cases/common.py")),
    ("ort_cases/default_domain.py", include_str!("../scripts/ort_cases/default_domain.py")),
    ("ort_cases/norm.py", include_str!("../scripts/ort_cases/norm.py")),
    ("ort_cases/quant.py", include_str!("../scripts/ort_cases/quant.py")),
];

/// The contents of `name` (a path under `tests/scripts/`).
pub(crate) fn script(name: &str) -> Option<&'static str> {
    SCRIPTS.iter().find(|(n, _)| *n == name).map(|(_, text)| *text)
}

/// Writes every script under `dir` (replacing what is there) and returns
/// `dir`.
///
/// # Errors
/// I/O errors creating the folders or writing the files.
pub(crate) fn materialize(dir: &Path) -> std::io::Result<PathBuf> {
    for (name, text) in SCRIPTS {
        let path = dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        if std::fs::read_to_string(&path).ok().as_deref() != Some(*text) {
            std::fs::write(&path, text)?;
        }
    }
    Ok(dir.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_of_the_generators_is_built_in() {
        // A module added to tests/scripts/ort_cases/ must be listed in SCRIPTS.
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts");
        let mut on_disk: Vec<String> =
            ["fetch_node_suite.py", "gen_ort_cases.py"].iter().map(|s| s.to_string()).collect();
        for e in std::fs::read_dir(root.join("ort_cases")).unwrap() {
            let name = e.unwrap().file_name().into_string().unwrap();
            if name.ends_with(".py") {
                on_disk.push(format!("ort_cases/{name}"));
            }
        }
        on_disk.sort();
        let mut built_in: Vec<String> = SCRIPTS.iter().map(|(n, _)| n.to_string()).collect();
        built_in.sort();
        assert_eq!(built_in, on_disk);
    }
}
