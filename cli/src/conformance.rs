//! `onyx conformance`.

use std::process::ExitCode;

use anyhow::{Context, Result, anyhow};
use onyx_cli::SessionRuntime;
use onyx_conformance::{
    check_manifest, discover, ensure_node_suite, ensure_ort_suite, read_manifest, run_suite,
};
use regex::Regex;

use crate::args::ConformanceArgs;

pub fn conformance(a: ConformanceArgs) -> Result<ExitCode> {
    let dir = match (a.data, a.suite.as_str()) {
        (Some(d), _) => d,
        (None, "node") => {
            ensure_node_suite().map_err(|e| anyhow!(e)).context("preparing the ONNX node suite")?
        }
        (None, "ort") => ensure_ort_suite()
            .map_err(|e| anyhow!(e))
            .context("preparing the onnxruntime-generated cases")?,
        (None, other) => anyhow::bail!("--suite {other}: expected node or ort"),
    };
    let filter = a.filter.as_deref().map(Regex::new).transpose().context("--filter")?;
    let cases =
        discover(&dir, filter.as_ref()).with_context(|| format!("reading {}", dir.display()))?;
    let rt = SessionRuntime::new(&a.backend, a.no_fallback)
        .with_context(|| format!("opening {}", a.backend))?;
    let started = std::time::Instant::now();
    let report = run_suite(&rt, &cases);
    let c = report.counts();
    let pct = |n: usize| if c.total() == 0 { 0.0 } else { 100.0 * n as f64 / c.total() as f64 };
    println!(
        "{}: {} cases in {:.1} s: {} passed ({:.1}%), {} failed, {} errors, {} unsupported",
        a.backend,
        c.total(),
        started.elapsed().as_secs_f64(),
        c.pass,
        pct(c.pass),
        c.fail,
        c.error,
        c.unsupported
    );
    if let Some(dir) = &a.report {
        report.write(dir).with_context(|| format!("writing the report to {}", dir.display()))?;
        println!("report: {}", dir.join(format!("{}.md", a.backend)).display());
    }
    if let Some(path) = &a.manifest {
        let expected =
            read_manifest(path).with_context(|| format!("reading {}", path.display()))?;
        let check = check_manifest(&report, &expected);
        for (name, why) in &check.regressions {
            println!("REGRESSION {name}: {why}");
        }
        if !check.new_passes.is_empty() {
            println!(
                "{} newly passing cases (add them to {}):",
                check.new_passes.len(),
                path.display()
            );
            for n in &check.new_passes {
                println!("  {n}");
            }
        }
        if !check.regressions.is_empty() {
            return Ok(ExitCode::from(1));
        }
    }
    Ok(ExitCode::SUCCESS)
}
