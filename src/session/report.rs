//! What a run reports: its outputs, memory figures per device, and the
//! memory timeline; what a model's inputs and outputs are.

use std::time::Duration;

use onyx_core::dtype::DType;
use onyx_core::graph::TypeInfo;
use onyx_core::shape::Shape;
use onyx_core::tensor::Value;

/// Name, type and declared shape of a model input or output.
#[derive(Clone, Debug)]
pub struct IoInfo {
    /// The name.
    pub name: String,
    /// The declared type (`None` when the model declares none).
    pub declared: Option<TypeInfo>,
}

impl IoInfo {
    /// The tensor dtype, when declared.
    pub fn dtype(&self) -> Option<DType> {
        self.declared.as_ref().and_then(TypeInfo::tensor_dtype)
    }

    /// The declared tensor shape (possibly symbolic).
    pub fn shape(&self) -> Option<&Shape> {
        self.declared.as_ref().and_then(TypeInfo::tensor_shape)
    }
}

/// Memory figures of one run on one device, in bytes (weights excluded).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct DeviceMemory {
    /// The provider (`cpu`, `wgpu:0`, …).
    pub device: String,
    /// Peak bytes in use during the run, from the provider's own accounting.
    pub peak_bytes: u64,
    /// Every byte the run allocated there: the peak if nothing were released.
    pub no_release_bytes: u64,
    /// The plan's live-set bound there: the peak that release at last use allows.
    pub live_set_bound_bytes: u64,
    /// The arena there: the one block that runs with these input shapes
    /// place their intermediates in (measured when this run held it, else
    /// as this run planned it for the next ones; 0 where the device has none).
    pub arena_bytes: u64,
    /// Bytes of weights resident there.
    pub weight_bytes: u64,
}

/// Memory figures of one run. The top-level figures are the primary device's;
/// `devices` has one entry per provider (the primary, then any CPU fallback).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct MemoryReport {
    /// Peak bytes in use on the primary device during the run (provider accounting).
    pub peak_bytes: u64,
    /// Every byte the run allocated on the primary device.
    pub no_release_bytes: u64,
    /// The plan's live-set bound on the primary device.
    pub live_set_bound_bytes: u64,
    /// The arena on the primary device (see [`DeviceMemory::arena_bytes`]).
    pub arena_bytes: u64,
    /// Buffers released at their last use, on all devices.
    pub releases: u64,
    /// Bytes of weights resident on the primary device.
    pub weight_bytes: u64,
    /// The same figures for every device the session uses.
    pub devices: Vec<DeviceMemory>,
    /// Live bytes over the run, all devices together: after the inputs, at
    /// each step (labelled with its node), and with the outputs handed over.
    pub timeline: Vec<TimelineStep>,
}

/// One point of [`MemoryReport::timeline`].
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct TimelineStep {
    /// `inputs`, a node name, or `outputs`.
    pub step: String,
    /// Bytes live with release at last use (the plan's bound at this point).
    pub live_bytes: u64,
    /// Bytes live if nothing were released before the end.
    pub allocated_bytes: u64,
    /// Bytes the providers really held at this point (their own accounting);
    /// `None` for the output hand-over, which the executor does not measure.
    pub measured_bytes: Option<u64>,
    /// The step's wall time in milliseconds, device work included (from
    /// [`Session::run_profiled`](crate::Session::run_profiled); `None` otherwise and for `inputs`/`outputs`).
    pub ms: Option<f64>,
}

/// The result of [`Session::run`](crate::Session::run).
#[derive(Debug)]
pub struct RunOutputs {
    /// Outputs in the model's order, by name.
    pub values: Vec<(String, Value)>,
    /// Memory figures of this run.
    pub memory: MemoryReport,
    /// Wall time of the run, uploads and downloads included.
    pub latency: Duration,
    /// With [`RunConfig::host_cost`](super::RunConfig::host_cost): the executor's time and the kernels'.
    pub host: Option<onyx_core::exec::HostCost>,
}

impl RunOutputs {
    /// An output by name.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.values.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }
}
