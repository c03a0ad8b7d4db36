//! `onyx bench`: session creation, first-run and warm latency of a model.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::json;

use crate::args::BenchArgs;
use crate::io::{dims_hint, inputs};

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
    if a.profile && a.profile_runs == 0 {
        bail!("--profile-runs must be at least 1");
    }
    let start = Instant::now();
    let session = open_timed(&a.model, &a.session)?;
    let create = start.elapsed();
    let values = inputs(&session, &a.inputs, &a.session.dims, a.seed)?;
    let hint = dims_hint(&session, &a.inputs, &a.session.dims);
    let run_once = || -> Result<Duration> {
        let start = Instant::now();
        session
            .run(values.clone())
            .with_context(|| format!("running {}{hint}", a.model.display()))?;
        Ok(start.elapsed())
    };
    let first = run_once()?;
    for _ in 0..a.warmup {
        run_once()?;
    }
    let times = (0..a.runs).map(|_| run_once()).collect::<Result<Vec<_>>>()?;
    let warm = Spread::of(&times);
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let profile = if a.profile {
        // Only the step times are kept: holding every run's outputs would make
        // each run write to fresh pages, and time the page faults.
        let runs = (0..a.profile_runs)
            .map(|_| {
                let o = session.run_profiled(values.clone()).context("profiled run")?;
                let steps = o.memory.timeline.into_iter().filter_map(|s| Some((s.step, s.ms?)));
                Ok((o.latency.as_secs_f64() * 1e3, steps.collect()))
            })
            .collect::<Result<Vec<_>>>()?;
        let mut profile = Profile::of(&session, &runs);
        // Host cost: runs with only the kernel launches timed, no synchronization.
        let costs = (0..a.profile_runs)
            .map(|_| {
                let o = session.run_host_cost(values.clone()).context("host-cost run")?;
                o.host.context("the run reported no host cost")
            })
            .collect::<Result<Vec<_>>>()?;
        profile.host = HostProfile::of(&costs);
        Some(profile)
    } else {
        None
    };
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
            "cuda_graphs": session.recorded_runs(),
            "profile": profile,
        });
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("model    {}", a.model.display());
    println!("device   {}", session.device());
    println!("session  {:.2} ms to create", ms(create));
    println!("first    {:.3} ms", ms(first));
    if session.recorded_runs() > 0 {
        println!(
            "graphs   warm runs replay a recorded CUDA graph (--no-cuda-graph: run node by node)"
        );
    }
    println!(
        "warm     median {:.3} ms  (min {:.3}, p10 {:.3}, p90 {:.3}, max {:.3}; {} runs after {} warm-up)",
        warm.median_ms, warm.min_ms, warm.p10_ms, warm.p90_ms, warm.max_ms, warm.runs, a.warmup
    );
    if let Some(p) = profile {
        println!(
            "profile  {:.3} ms over {} nodes (synchronized after each; medians of {} runs), \
             {:.3} ms a run",
            p.total_ms, p.nodes, p.runs, p.run_ms
        );
        let h = &p.host;
        println!(
            "host     {:.3} us a step outside kernel launches ({} steps a run; run {:.3} ms, \
             launches {:.3} ms; medians of {} runs timed without synchronization)",
            h.us_per_step, h.steps, h.run_ms, h.launch_ms, p.runs
        );
        for o in p.by_op.iter().take(15) {
            println!(
                "  {:<28} {:>5} nodes {:>9.3} ms {:>5.1}%",
                o.op,
                o.count,
                o.ms,
                o.share * 100.0
            );
        }
        println!("slowest nodes");
        for n in p.by_node.iter().take(SLOWEST) {
            println!("  {:<40} {:<20} {:>9.3} ms", n.node, n.op, n.ms);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Opens a session for timing: the per-step memory readings of the report are off.
fn open_timed(model: &std::path::Path, args: &crate::args::SessionArgs) -> Result<onyx::Session> {
    crate::io::open_with(model, args, true, |b| b.with_memory_timeline(false))
}

/// How many of the slowest nodes the text report lists.
const SLOWEST: usize = 12;

/// Time by op type over profiled runs: each node's median.
#[derive(Debug, serde::Serialize)]
pub struct Profile {
    /// Profiled runs the medians are taken over.
    pub runs: usize,
    /// The profiled runs' median latency, host inputs to host outputs: what
    /// it has over `total_ms` is spent outside the timed steps (binding
    /// inputs, releases, reading outputs back).
    pub run_ms: f64,
    /// The sum of the node medians.
    pub total_ms: f64,
    pub nodes: usize,
    pub by_op: Vec<OpTime>,
    /// Every timed node, slowest first.
    pub by_node: Vec<NodeTime>,
    /// The executor's own time, kernels excluded.
    pub host: HostProfile,
}

/// The executor's time outside kernel launches, over runs that time every
/// launch without synchronizing (medians).
#[derive(Debug, Default, serde::Serialize)]
pub struct HostProfile {
    /// Microseconds a step, outside kernel launches.
    pub us_per_step: f64,
    /// Steps a run (subgraphs' included).
    pub steps: u64,
    /// The executor's time a run.
    pub run_ms: f64,
    /// Time inside kernel launches a run.
    pub launch_ms: f64,
}

impl HostProfile {
    fn of(costs: &[onyx::core::exec::HostCost]) -> HostProfile {
        let med = |f: &dyn Fn(&onyx::core::exec::HostCost) -> f64| {
            median(&mut costs.iter().map(f).collect::<Vec<_>>())
        };
        HostProfile {
            us_per_step: med(&|c| c.host_us_per_step()),
            steps: costs.first().map_or(0, |c| c.steps),
            run_ms: med(&|c| c.run_ms),
            launch_ms: med(&|c| c.launch_ms),
        }
    }
}

/// One node's median time over the profiled runs.
#[derive(Debug, serde::Serialize)]
pub struct NodeTime {
    pub node: String,
    pub op: String,
    pub ms: f64,
}

/// One op type's share of the profiled time (sums of node medians).
#[derive(Debug, serde::Serialize)]
pub struct OpTime {
    pub op: String,
    pub count: usize,
    pub ms: f64,
    pub share: f64,
}

impl Profile {
    /// The profile of runs given as each run's latency and timed steps.
    fn of(session: &onyx::Session, runs: &[(f64, Vec<(String, f64)>)]) -> Profile {
        let g = &session.model().graph;
        let mut op_of: std::collections::HashMap<String, String> =
            g.nodes.iter().map(|n| (n.name.clone(), n.op_type.clone())).collect();
        // Nodes compilation made (fused chains) are named only in the placement.
        op_of.extend(session.placement().into_iter().map(|(n, _)| (n.name, n.op_type)));
        // Each step's time per run, summed within a run (control flow may run
        // a step more than once in one run, or not at all in another).
        let mut order: Vec<&str> = Vec::new();
        let mut times: std::collections::HashMap<&str, Vec<f64>> = Default::default();
        for (_, steps) in runs {
            let mut this: std::collections::HashMap<&str, f64> = Default::default();
            for (step, ms) in steps {
                *this.entry(step.as_str()).or_default() += ms;
            }
            for (step, ms) in this {
                let t = times.entry(step).or_default();
                if t.is_empty() {
                    order.push(step);
                }
                t.push(ms);
            }
        }
        let mut by: std::collections::BTreeMap<&str, (usize, f64)> = Default::default();
        let mut by_node = Vec::new();
        for step in order {
            let ms = median(&mut times[step].clone());
            let op = op_of.get(step).map_or("?", String::as_str);
            let e = by.entry(op).or_default();
            e.0 += 1;
            e.1 += ms;
            by_node.push(NodeTime { node: step.to_string(), op: op.to_string(), ms });
        }
        let nodes = by_node.len();
        by_node.sort_by(|a, b| b.ms.total_cmp(&a.ms));
        let total_ms: f64 = by.values().map(|(_, ms)| ms).sum();
        let mut by_op: Vec<OpTime> = by
            .into_iter()
            .map(|(op, (count, ms))| OpTime {
                op: op.to_string(),
                count,
                ms,
                share: if total_ms > 0.0 { ms / total_ms } else { 0.0 },
            })
            .collect();
        by_op.sort_by(|a, b| b.ms.total_cmp(&a.ms));
        let run_ms = median(&mut runs.iter().map(|r| r.0).collect::<Vec<_>>());
        Profile {
            runs: runs.len(),
            run_ms,
            total_ms,
            nodes,
            by_op,
            by_node,
            host: HostProfile::default(),
        }
    }
}

/// The median of `ms` (at least one), the mean of the middle two for an even count.
fn median(ms: &mut [f64]) -> f64 {
    ms.sort_by(f64::total_cmp);
    let n = ms.len();
    if n % 2 == 1 { ms[n / 2] } else { (ms[n / 2 - 1] + ms[n / 2]) / 2.0 }
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

    #[test]
    fn median_takes_the_middle_value_or_the_mean_of_the_middle_two() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
    }
}
