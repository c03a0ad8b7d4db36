//! The Rust side of a session: providers, the compiled program, and the
//! figures of the last run. `InferenceSession` wraps it for JavaScript.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use onyx_core::ep::{DeviceId, ExecutionProvider};
use onyx_core::exec::{self, CompileOptions, CompiledGraph, RunOptions};
use onyx_core::graph::Model;
use onyx_core::ops::OpRegistry;
use onyx_core::tensor::Value;
use onyx_cpu::{CpuOptions, CpuProvider};
use onyx_wgpu::{WgpuOptions, WgpuProvider};

use crate::error::chain;
use crate::options::{CreateOptions, Ep, has_webgpu, now_ms};
use crate::report::{Adapter, DeviceFigures, MemoryReport, TimelinePoint};

/// A compiled model and the providers it runs on.
pub(crate) struct Engine {
    /// The primary provider, then the CPU fallback (if any). `Rc`: the
    /// browser's WebGPU objects are neither `Send` nor `Sync`.
    pub(crate) providers: Vec<Rc<dyn ExecutionProvider>>,
    pub(crate) program: CompiledGraph,
    pub(crate) model: Model,
    /// The execution provider that opened (`webgpu` or `cpu`).
    pub(crate) ep: Ep,
    pub(crate) adapter: Option<Adapter>,
    /// Why providers earlier in the list were skipped.
    pub(crate) skipped: Vec<String>,
    pub(crate) release: bool,
    /// A run is in flight (runs on one session do not overlap).
    pub(crate) running: Cell<bool>,
    pub(crate) last: RefCell<Option<MemoryReport>>,
    weights_freed: Cell<bool>,
}

/// Opens the first provider of `opts.providers` that is available.
async fn open(
    opts: &CreateOptions,
) -> Result<(Ep, Rc<dyn ExecutionProvider>, Option<Adapter>, Vec<String>), String> {
    let mut skipped = Vec::new();
    let last = opts.providers.len() - 1;
    for (i, &ep) in opts.providers.iter().enumerate() {
        let opened: Result<(Rc<dyn ExecutionProvider>, Option<Adapter>), String> = match ep {
            Ep::Cpu => Ok((Rc::new(CpuProvider::new(CpuOptions::default())), None)),
            Ep::WebGpu if !has_webgpu() => {
                Err("navigator.gpu is missing: this browser or context has no WebGPU".into())
            }
            Ep::WebGpu => match WgpuProvider::new(WgpuOptions::default()).await {
                Ok(p) => {
                    let adapter = Adapter::from(p.adapter());
                    Ok((Rc::new(p), Some(adapter)))
                }
                Err(e) => Err(chain(&e)),
            },
        };
        match opened {
            Ok((provider, adapter)) => return Ok((ep, provider, adapter, skipped)),
            Err(reason) => {
                let line = format!("{}: {reason}", ep.name());
                if opts.strict || i == last {
                    skipped.push(line);
                    return Err(skipped.join("; "));
                }
                web_sys::console::warn_1(&format!("onyx: {line}; trying the next provider").into());
                skipped.push(line);
            }
        }
    }
    Err(skipped.join("; "))
}

impl Engine {
    /// Opens a provider, compiles `model` for it and uploads the weights.
    pub(crate) async fn new(model: Model, opts: &CreateOptions) -> Result<Engine, String> {
        let (ep, primary, adapter, skipped) = open(opts).await?;
        let mut providers = vec![primary];
        if !opts.strict && providers[0].device() != DeviceId::CPU {
            providers.push(Rc::new(CpuProvider::new(CpuOptions::default())));
        }
        let registry = OpRegistry::standard();
        let copts =
            CompileOptions { allow_fallback: !opts.strict, ..CompileOptions::new(&registry) };
        let refs: Vec<&dyn ExecutionProvider> = providers.iter().map(|p| &**p).collect();
        let graph = Arc::new(model.graph.clone());
        let program = exec::compile(graph, &HashMap::new(), &refs, &copts)
            .map_err(|e| format!("compiling for {}: {}", providers[0].name(), chain(&e)))?;
        Ok(Engine {
            providers,
            program,
            model,
            ep,
            adapter,
            skipped,
            release: opts.release,
            running: Cell::new(false),
            last: RefCell::new(None),
            weights_freed: Cell::new(false),
        })
    }

    fn refs(&self) -> Vec<&dyn ExecutionProvider> {
        self.providers.iter().map(|p| &**p).collect()
    }

    /// Runs on host values (one per graph input, in order) and records the
    /// memory report of the run.
    pub(crate) async fn run(
        &self,
        inputs: Vec<Value>,
        release: bool,
        profile: bool,
    ) -> Result<Vec<Value>, String> {
        if self.weights_freed.get() {
            return Err("the session was released".into());
        }
        let start = now_ms();
        let clock: Option<fn() -> f64> = if profile { Some(now_ms) } else { None };
        let opts = RunOptions {
            release_dead_values: release,
            measure_timeline: true,
            clock,
            ..RunOptions::default()
        };
        let ran = exec::run_on_host(&self.program, &self.refs(), &inputs, opts)
            .await
            .map_err(|e| format!("running on {}: {}", self.providers[0].name(), chain(&e)))?;
        let latency_ms = now_ms() - start;
        let weights = self.program.weight_bytes(self.providers.len());
        let devices: Vec<DeviceFigures> = self
            .providers
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let pf = ran.figures.per_provider.get(i).copied().unwrap_or_default();
                DeviceFigures {
                    device: p.name(),
                    peak_bytes: ran.peak_bytes[i],
                    no_release_bytes: pf.no_release_bytes,
                    live_set_bound_bytes: pf.live_set_bound,
                    arena_bytes: ran.arena_bytes.get(i).copied().unwrap_or(0),
                    weight_bytes: weights[i],
                }
            })
            .collect();
        let timeline = ran
            .timeline(&self.program)
            .into_iter()
            .map(|p| TimelinePoint {
                step: p.step,
                live_bytes: p.live_bytes,
                allocated_bytes: p.allocated_bytes,
                measured_bytes: p.measured_bytes,
                ms: p.ms,
            })
            .collect();
        *self.last.borrow_mut() = Some(MemoryReport {
            peak_bytes: devices.iter().map(|d| d.peak_bytes).sum(),
            no_release_bytes: ran.figures.no_release_bytes,
            live_set_bound_bytes: ran.figures.live_set_bound,
            releases: ran.releases,
            weight_bytes: weights.iter().sum(),
            release_dead_values: release,
            latency_ms,
            devices,
            timeline,
        });
        Ok(ran.outputs)
    }

    /// Frees the weights on every provider (once).
    pub(crate) fn free_weights(&mut self) -> Result<(), String> {
        if self.weights_freed.replace(true) {
            return Ok(());
        }
        let providers = self.providers.clone();
        let refs: Vec<&dyn ExecutionProvider> = providers.iter().map(|p| &**p).collect();
        self.program.free_weights(&refs).map_err(|e| format!("freeing weights: {}", chain(&e)))
    }

    /// Bytes in use on each provider now (weights included).
    pub(crate) fn in_use(&self) -> Vec<(String, u64)> {
        self.providers.iter().map(|p| (p.name(), p.memory_stats().in_use_bytes)).collect()
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if let Err(e) = self.free_weights() {
            web_sys::console::error_1(&format!("onyx: {e}").into());
        }
    }
}
