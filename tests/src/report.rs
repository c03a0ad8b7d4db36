//! Outcomes, reports (JSON and Markdown) and manifests of expected passes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::Serialize;

/// How a case ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", content = "detail", rename_all = "lowercase")]
pub enum Outcome {
    /// Every output matched.
    Pass,
    /// It ran, but an output was wrong.
    Fail(String),
    /// It failed with an error.
    Error(String),
    /// The op or a dtype is not implemented.
    Unsupported(String),
}

impl Outcome {
    /// A one-word label.
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Fail(_) => "fail",
            Outcome::Error(_) => "error",
            Outcome::Unsupported(_) => "unsupported",
        }
    }
}

/// One case's result.
#[derive(Clone, Debug, Serialize)]
pub struct CaseResult {
    /// Case name.
    pub name: String,
    /// Op under test.
    pub op: String,
    /// Outcome.
    #[serde(flatten)]
    pub outcome: Outcome,
}

/// The results of a run over the suite.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Backend name.
    pub backend: String,
    /// Per-case results, sorted by name.
    pub results: Vec<CaseResult>,
}

/// Pass / fail / error / unsupported counts.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Passed.
    pub pass: usize,
    /// Wrong values.
    pub fail: usize,
    /// Errors.
    pub error: usize,
    /// Not implemented.
    pub unsupported: usize,
}

impl Counts {
    fn add(&mut self, o: &Outcome) {
        match o {
            Outcome::Pass => self.pass += 1,
            Outcome::Fail(_) => self.fail += 1,
            Outcome::Error(_) => self.error += 1,
            Outcome::Unsupported(_) => self.unsupported += 1,
        }
    }

    /// All cases.
    pub fn total(&self) -> usize {
        self.pass + self.fail + self.error + self.unsupported
    }
}

impl Report {
    /// Totals.
    pub fn counts(&self) -> Counts {
        let mut c = Counts::default();
        self.results.iter().for_each(|r| c.add(&r.outcome));
        c
    }

    /// Counts per op.
    pub fn per_op(&self) -> BTreeMap<String, Counts> {
        let mut m: BTreeMap<String, Counts> = BTreeMap::new();
        for r in &self.results {
            m.entry(r.op.clone()).or_default().add(&r.outcome);
        }
        m
    }

    /// Names of passing cases.
    pub fn passed(&self) -> BTreeSet<String> {
        self.results.iter().filter(|r| r.outcome == Outcome::Pass).map(|r| r.name.clone()).collect()
    }

    /// The report as JSON: totals, per-op counts and every case.
    pub fn to_json(&self) -> String {
        let v = serde_json::json!({
            "backend": self.backend,
            "totals": self.counts(),
            "per_op": self.per_op(),
            "cases": self.results,
        });
        serde_json::to_string_pretty(&v).expect("reports serialize")
    }

    /// The report as Markdown: totals, a per-op table, then every non-passing case.
    pub fn to_markdown(&self) -> String {
        let c = self.counts();
        let pct = |n: usize| if c.total() == 0 { 0.0 } else { 100.0 * n as f64 / c.total() as f64 };
        let mut s = format!(
            "# ONNX node suite on {}\n\n| | cases | share |\n|---|---:|---:|\n| pass | {} | {:.1}% |\n| fail | {} | {:.1}% |\n| error | {} | {:.1}% |\n| unsupported | {} | {:.1}% |\n| total | {} | |\n\n## Per op\n\n| op | pass | fail | error | unsupported |\n|---|---:|---:|---:|---:|\n",
            self.backend,
            c.pass,
            pct(c.pass),
            c.fail,
            pct(c.fail),
            c.error,
            pct(c.error),
            c.unsupported,
            pct(c.unsupported),
            c.total()
        );
        for (op, k) in self.per_op() {
            s += &format!("| {op} | {} | {} | {} | {} |\n", k.pass, k.fail, k.error, k.unsupported);
        }
        s += "\n## Cases not passing\n\n| case | outcome | detail |\n|---|---|---|\n";
        for r in &self.results {
            let detail = match &r.outcome {
                Outcome::Pass => continue,
                Outcome::Fail(d) | Outcome::Error(d) | Outcome::Unsupported(d) => d,
            };
            let detail: String =
                detail.replace('|', "\\|").replace('\n', " ").chars().take(300).collect();
            s += &format!("| {} | {} | {} |\n", r.name, r.outcome.label(), detail);
        }
        s
    }

    /// Writes `report.json` and `report.md` into `dir`.
    ///
    /// # Errors
    /// I/O errors.
    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join(format!("{}.json", self.backend)), self.to_json())?;
        std::fs::write(dir.join(format!("{}.md", self.backend)), self.to_markdown())
    }
}

/// Reads a manifest: one case name per line; `#` starts a comment.
///
/// # Errors
/// I/O errors.
pub fn read_manifest(path: &Path) -> std::io::Result<BTreeSet<String>> {
    Ok(parse_manifest(&std::fs::read_to_string(path)?))
}

/// The case names of a manifest's text (see [`read_manifest`]).
pub fn parse_manifest(text: &str) -> BTreeSet<String> {
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

/// A report compared with a manifest.
#[derive(Clone, Debug, Default)]
pub struct ManifestCheck {
    /// Expected to pass, but did not (with the outcome).
    pub regressions: Vec<(String, String)>,
    /// Passed, but not in the manifest yet.
    pub new_passes: Vec<String>,
}

/// Compares a report with the expected passes.
pub fn check_manifest(report: &Report, expected: &BTreeSet<String>) -> ManifestCheck {
    let mut check = ManifestCheck::default();
    for r in &report.results {
        let in_manifest = expected.contains(&r.name);
        match (&r.outcome, in_manifest) {
            (Outcome::Pass, false) => check.new_passes.push(r.name.clone()),
            (Outcome::Pass, true) => {}
            (o, true) => check.regressions.push((
                r.name.clone(),
                format!(
                    "{}: {}",
                    o.label(),
                    match o {
                        Outcome::Fail(d) | Outcome::Error(d) | Outcome::Unsupported(d) =>
                            d.as_str(),
                        Outcome::Pass => "",
                    }
                ),
            )),
            (_, false) => {}
        }
    }
    let seen: BTreeSet<&String> = report.results.iter().map(|r| &r.name).collect();
    for name in expected {
        if !seen.contains(name) {
            check.regressions.push((name.clone(), "case missing from the suite".into()));
        }
    }
    check
}
