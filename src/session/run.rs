//! Running a session: asynchronous at the core (the browser awaits runs),
//! with blocking forms for native callers that also pick the session's
//! threads.

use std::collections::HashMap;

use onyx_core::exec::{self, RunOptions, StepPoint};
use onyx_core::plan::MemoryFigures;
use onyx_core::tensor::Value;

use super::report::{DeviceMemory, MemoryReport, RunOutputs, TimelineStep};
use super::{Instant, Session};
use crate::error::{Error, Result};

/// How one run differs from the session's defaults.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct RunConfig {
    /// Release intermediates at last use in this run (default: the session's setting).
    pub release_dead_values: Option<bool>,
    /// Synchronize every device after each step to time it: [`TimelineStep::ms`]
    /// then holds each node's wall time, its device work included. Slower;
    /// use it to see where time goes.
    pub profile: bool,
    /// Time every kernel launch (with no synchronization) so that
    /// [`RunOutputs::host`] tells the executor's own time per step from the
    /// kernels'. On the CPU a launch returns when its kernel is done, so the
    /// rest is the host's bookkeeping.
    pub host_cost: bool,
}

/// Milliseconds since the first call: the clock of profiled runs.
fn now_ms() -> f64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_secs_f64() * 1e3
}

/// Named inputs as owned pairs.
fn named<I, S>(inputs: I) -> Vec<(String, Value)>
where
    I: IntoIterator<Item = (S, Value)>,
    S: Into<String>,
{
    inputs.into_iter().map(|(n, v)| (n.into(), v)).collect()
}

impl Session {
    /// Runs the model on named host values, blocking.
    ///
    /// # Errors
    /// As [`run_with_async`](Self::run_with_async).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn run<I, S>(&self, inputs: I) -> Result<RunOutputs>
    where
        I: IntoIterator<Item = (S, Value)>,
        S: Into<String>,
    {
        self.run_with(named(inputs), RunConfig::default())
    }

    /// Runs like [`run`](Self::run), timing every step ([`RunConfig::profile`]).
    ///
    /// # Errors
    /// As [`run`](Self::run).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn run_profiled<I, S>(&self, inputs: I) -> Result<RunOutputs>
    where
        I: IntoIterator<Item = (S, Value)>,
        S: Into<String>,
    {
        self.run_with(named(inputs), RunConfig { profile: true, ..RunConfig::default() })
    }

    /// Runs like [`run`](Self::run), timing every kernel launch ([`RunConfig::host_cost`]).
    ///
    /// # Errors
    /// As [`run`](Self::run).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn run_host_cost<I, S>(&self, inputs: I) -> Result<RunOutputs>
    where
        I: IntoIterator<Item = (S, Value)>,
        S: Into<String>,
    {
        self.run_with(named(inputs), RunConfig { host_cost: true, ..RunConfig::default() })
    }

    /// Runs with `config`, blocking, on the session's threads.
    ///
    /// # Errors
    /// As [`run_with_async`](Self::run_with_async).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn run_with(&self, inputs: Vec<(String, Value)>, config: RunConfig) -> Result<RunOutputs> {
        self.workers.run(|| pollster::block_on(self.run_with_async(inputs, config)))
    }

    /// Runs the model on named host values.
    ///
    /// # Errors
    /// As [`run_with_async`](Self::run_with_async).
    pub async fn run_async<I, S>(&self, inputs: I) -> Result<RunOutputs>
    where
        I: IntoIterator<Item = (S, Value)>,
        S: Into<String>,
    {
        self.run_with_async(named(inputs), RunConfig::default()).await
    }

    /// Runs the model on named host values with `config`. Asynchronous: the
    /// browser awaits it; native callers may block on it or use
    /// [`run_with`](Self::run_with), which also picks the session's threads.
    ///
    /// # Errors
    /// [`Error::Input`] for missing, unknown or mistyped inputs; [`Error::Run`] with the
    /// failing node, op and backend in its chain; [`Error::Released`] after
    /// [`release`](Self::release). Nothing stays allocated on failure.
    pub async fn run_with_async(
        &self,
        inputs: Vec<(String, Value)>,
        config: RunConfig,
    ) -> Result<RunOutputs> {
        if self.released {
            return Err(Error::Released);
        }
        let start = Instant::now();
        let g = &self.model.graph;
        let mut by_name: HashMap<String, Value> = HashMap::new();
        for (name, v) in inputs {
            if !g.inputs.iter().any(|&i| g.value(i).name == name) {
                let known: Vec<&str> = g.inputs.iter().map(|&i| g.value(i).name.as_str()).collect();
                return Err(Error::Input {
                    name,
                    reason: format!("the model has no such input (inputs: {})", known.join(", ")),
                });
            }
            by_name.insert(name, v);
        }
        let mut ordered = Vec::with_capacity(g.inputs.len());
        for &i in &g.inputs {
            let name = &g.value(i).name;
            ordered.push(by_name.remove(name).ok_or_else(|| Error::Input {
                name: name.clone(),
                reason: "not provided".into(),
            })?);
        }
        let opts = RunOptions {
            release_dead_values: config.release_dead_values.unwrap_or(self.release),
            measure_timeline: self.timeline,
            clock: config.profile.then_some(now_ms as fn() -> f64),
            launch_clock: config.host_cost.then_some(now_ms as fn() -> f64),
        };
        let refs = self.providers();
        let ran = exec::run_on_host_replayed(&self.program, &refs, &self.replays, &ordered, opts)
            .await
            .map_err(|source| Error::Run { device: self.device.clone(), source })?;
        let timeline = ran.timeline(&self.program);
        let names = g.outputs.iter().map(|&o| g.value(o).name.clone());
        let values: Vec<(String, Value)> = names.zip(ran.outputs).collect();
        let (figures, releases) = (ran.figures, ran.releases);
        if self.providers.len() > 1 {
            let counts = self.kernels_per_device();
            log::info!("{} kernel nodes ran on {} (fallback)", counts[1].1, counts[1].0);
        }
        let memory =
            self.memory_report(&figures, releases, &ran.peak_bytes, &ran.arena_bytes, timeline);
        Ok(RunOutputs { values, memory, latency: start.elapsed(), host: ran.host })
    }
}

impl Session {
    /// A run's memory report from the plan's figures and what each provider measured.
    pub(super) fn memory_report(
        &self,
        figures: &MemoryFigures,
        releases: u64,
        peak_bytes: &[u64],
        arena_bytes: &[u64],
        timeline: Vec<StepPoint>,
    ) -> MemoryReport {
        let devices: Vec<DeviceMemory> = self
            .providers
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let pf = figures.per_provider.get(i).copied().unwrap_or_default();
                DeviceMemory {
                    device: p.name(),
                    peak_bytes: peak_bytes.get(i).copied().unwrap_or(0),
                    no_release_bytes: pf.no_release_bytes,
                    live_set_bound_bytes: pf.live_set_bound,
                    arena_bytes: arena_bytes.get(i).copied().unwrap_or(0),
                    weight_bytes: self.weights[i],
                }
            })
            .collect();
        MemoryReport {
            peak_bytes: devices[0].peak_bytes,
            no_release_bytes: devices[0].no_release_bytes,
            live_set_bound_bytes: devices[0].live_set_bound_bytes,
            arena_bytes: devices[0].arena_bytes,
            releases,
            weight_bytes: devices[0].weight_bytes,
            devices,
            timeline: timeline
                .into_iter()
                .map(|p| TimelineStep {
                    step: p.step,
                    live_bytes: p.live_bytes,
                    allocated_bytes: p.allocated_bytes,
                    measured_bytes: p.measured_bytes,
                    ms: p.ms,
                })
                .collect(),
        }
    }
}
