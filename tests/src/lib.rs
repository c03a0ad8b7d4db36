//! Conformance against the official ONNX backend node test suite.
//!
//! The suite is generated from the pinned `onnx` package by
//! `tests/scripts/fetch_node_suite.py` into a cache outside version control.
//! Each case runs through a [`Runtime`] (the `onyx` facade implements it for
//! every backend), is compared with per-dtype tolerances, and is classified as
//! pass, fail (wrong values), error or unsupported. A manifest of expected
//! passes per backend turns regressions into test failures.

#![warn(missing_docs)]

mod compare;
mod data;
mod report;
mod scripts;
mod suite;

use std::path::Path;

pub use compare::{Tolerance, compare_values};
pub use data::{CaseData, load_case_data};
pub use report::{
    CaseResult, ManifestCheck, Outcome, Report, check_manifest, parse_manifest, read_manifest,
};
pub use suite::{
    Case, discover, ensure_node_suite, ensure_ort_suite, node_suite_dir, ort_suite_dir,
    testdata_dir,
};

use onyx_core::tensor::Value;

/// How a runtime failed on a case.
#[derive(Debug, Clone)]
pub struct RunFailure {
    /// True when the op or dtype is not implemented (as opposed to a wrong or crashing run).
    pub unsupported: bool,
    /// The whole error chain.
    pub message: String,
}

/// Something that runs a model file on named inputs.
pub trait Runtime: Sync {
    /// The backend name for reports.
    fn backend(&self) -> String;

    /// Runs `model` on the inputs, returning outputs by name.
    ///
    /// # Errors
    /// A [`RunFailure`] saying whether the failure means "unsupported".
    fn run(
        &self,
        model: &Path,
        inputs: Vec<(String, Value)>,
    ) -> Result<Vec<(String, Value)>, RunFailure>;
}

/// Runs one case (all its data sets) and classifies it.
pub fn run_case(rt: &dyn Runtime, case: &Case) -> CaseResult {
    let outcome = (|| {
        let data = match load_case_data(case) {
            Ok(d) => d,
            Err(e) => return Outcome::Error(format!("cannot read the case: {e}")),
        };
        for (i, set) in data.sets.iter().enumerate() {
            let got = match rt.run(&case.model, set.inputs.clone()) {
                Ok(v) => v,
                Err(f) if f.unsupported => return Outcome::Unsupported(f.message),
                Err(f) => return Outcome::Error(f.message),
            };
            for (name, expected) in &set.outputs {
                let Some((_, actual)) = got.iter().find(|(n, _)| n == name) else {
                    return Outcome::Error(format!("output '{name}' missing"));
                };
                if let Err(why) = compare_values(expected, actual, case.tolerance) {
                    return Outcome::Fail(format!("data set {i}, output '{name}': {why}"));
                }
            }
        }
        Outcome::Pass
    })();
    CaseResult { name: case.name.clone(), op: case.op.clone(), outcome }
}

/// Runs every case, in parallel, and collects a report.
pub fn run_suite(rt: &dyn Runtime, cases: &[Case]) -> Report {
    use std::sync::Mutex;
    let results = Mutex::new(Vec::with_capacity(cases.len()));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(case) = cases.get(i) else { break };
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        run_case(rt, case)
                    }))
                    .unwrap_or_else(|p| CaseResult {
                        name: case.name.clone(),
                        op: case.op.clone(),
                        outcome: Outcome::Error(format!("panicked: {}", panic_message(&p))),
                    });
                    results.lock().unwrap_or_else(|p| p.into_inner()).push(r);
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap_or_else(|p| p.into_inner());
    results.sort_by(|a, b| a.name.cmp(&b.name));
    Report { backend: rt.backend(), results }
}

fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}
