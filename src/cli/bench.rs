//! `onyx bench`: session creation, first-run and warm latency of a model.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::json;

use super::BenchArgs;
use super::io::{inputs, open};

/// Order statistics of a set of timings, in milliseconds.
#[derive(Debug, serde::Serialize)]
pub struct Spread {
    pub runs: usize,
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub p10_ms: f64,
    pub p90_ms: f64,
}

impl Spread {
    /// The spread of `times` (at least one).
    pub fn of(times: &[Duration]) -> Spread {
        let mut ms: Vec<f64> = times.iter().map(|t| t.as_secs_f64() * 1e3).collect();
        ms.sort_by(f64::total_cmp);
        let at = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
        Spread {
            runs: ms.len(),
            median_ms: at(0.5),
            min_ms: ms[0],
            max_ms: ms[ms.len() - 1],
            p10_ms: at(0.1),
            p90_ms: at(0.9),
        }
    }
}

pub fn bench(a: BenchArgs) -> Result<ExitCode> {
    if a.runs == 0 {
        bail!("--runs must be at least 1");
    }
    let start = Instant::now();
    let session = open(&a.model, &a.session, true)?;
    let create = start.elapsed();
    let values = inputs(&session, &a.inputs, &a.session.dims, a.seed)?;
    let run_once = || -> Result<Duration> {
        let start = Instant::now();
        session.run(values.clone()).with_context(|| format!("running {}", a.model.display()))?;
        Ok(start.elapsed())
    };
    let first = run_once()?;
    for _ in 0..a.warmup {
        run_once()?;
    }
    let times = (0..a.runs).map(|_| run_once()).collect::<Result<Vec<_>>>()?;
    let warm = Spread::of(&times);
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    if a.json {
        let report = json!({
            "model": a.model,
            "device": session.device(),
            "threads": a.session.threads,
            "session_create_ms": ms(create),
            "first_run_ms": ms(first),
            "warmup": a.warmup,
            "warm": warm,
            "kernels_per_device": session.kernels_per_device(),
        });
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("model    {}", a.model.display());
    println!("device   {}", session.device());
    println!("session  {:.2} ms to create", ms(create));
    println!("first    {:.3} ms", ms(first));
    println!(
        "warm     median {:.3} ms  (min {:.3}, p10 {:.3}, p90 {:.3}, max {:.3}; {} runs after {} warm-up)",
        warm.median_ms, warm.min_ms, warm.p10_ms, warm.p90_ms, warm.max_ms, warm.runs, a.warmup
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_takes_order_statistics_of_the_timings() {
        let times: Vec<Duration> = [5, 1, 3, 2, 4].map(Duration::from_millis).to_vec();
        let s = Spread::of(&times);
        assert_eq!((s.runs, s.median_ms, s.min_ms, s.max_ms), (5, 3.0, 1.0, 5.0));
        assert_eq!((s.p10_ms, s.p90_ms), (1.0, 5.0));
    }
}
