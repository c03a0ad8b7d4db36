//! The plain objects a session hands to JavaScript: its model description
//! and the memory report of its last run (serialized with camelCase keys).

use serde::Serialize;
use wasm_bindgen::JsValue;

/// What the WebGPU adapter is.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Adapter {
    pub(crate) name: String,
    pub(crate) backend: String,
    pub(crate) device_type: String,
    pub(crate) shader_f16: bool,
    pub(crate) max_binding_bytes: u64,
}

impl From<&onyx::Adapter> for Adapter {
    fn from(a: &onyx::Adapter) -> Self {
        Adapter {
            name: a.name.clone(),
            backend: a.backend.clone(),
            device_type: a.device_type.clone(),
            shader_f16: a.shader_f16,
            max_binding_bytes: a.max_binding_bytes,
        }
    }
}

/// A model input or output, as onnxruntime-web's `inputMetadata` has it.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct IoMetadata {
    pub(crate) name: String,
    pub(crate) is_tensor: bool,
    /// `float32`, `int64`, …; absent when undeclared.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub(crate) dtype: Option<String>,
    /// Numbers for fixed dims, names for symbolic ones, `null` for unknown ones.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) shape: Option<Vec<Dim>>,
}

/// A dim as JavaScript sees it: a number, a symbol, or unknown (`null`).
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub(crate) enum Dim {
    Known(u64),
    Sym(String),
    Unknown,
}

/// One node and where it runs.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NodePlacement {
    pub(crate) name: String,
    pub(crate) op: String,
    pub(crate) domain: String,
    pub(crate) device: String,
}

/// Kernel nodes and weight bytes of one provider.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DeviceSummary {
    pub(crate) device: String,
    pub(crate) kernels: usize,
    pub(crate) weight_bytes: u64,
}

/// `session.describe()`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Description {
    pub(crate) execution_provider: String,
    pub(crate) adapter: Option<Adapter>,
    /// Providers tried before the one that opened, with the reason.
    pub(crate) skipped: Vec<String>,
    pub(crate) producer: String,
    pub(crate) opsets: Vec<(String, i64)>,
    pub(crate) inputs: Vec<IoMetadata>,
    pub(crate) outputs: Vec<IoMetadata>,
    /// `(op type, node count)`, most frequent first.
    pub(crate) ops: Vec<(String, usize)>,
    pub(crate) nodes: Vec<NodePlacement>,
    pub(crate) devices: Vec<DeviceSummary>,
}

/// Memory figures of one provider for the last run, bytes (weights apart).
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DeviceFigures {
    pub(crate) device: String,
    /// Peak bytes in use during the run, from the provider's own accounting.
    pub(crate) peak_bytes: u64,
    /// What the run would hold with nothing released.
    pub(crate) no_release_bytes: u64,
    /// The plan's live-set bound there.
    pub(crate) live_set_bound_bytes: u64,
    /// The arena later runs with these input shapes hold there.
    pub(crate) arena_bytes: u64,
    pub(crate) weight_bytes: u64,
}

/// One point of the timeline: the inputs, each step, the outputs.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct TimelinePoint {
    pub(crate) step: String,
    /// Live bytes with release at last use, from the plan.
    pub(crate) live_bytes: u64,
    /// Live bytes with nothing released, from the plan.
    pub(crate) allocated_bytes: u64,
    /// Bytes the providers really held (absent for the output hand-over).
    pub(crate) measured_bytes: Option<u64>,
    /// With `profile`: the step's wall time in milliseconds, device work included.
    pub(crate) ms: Option<f64>,
}

/// `session.memoryReport()`: the last run's figures. Top-level figures are
/// all devices together; `devices` splits them.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MemoryReport {
    /// The sum of each device's measured peak.
    pub(crate) peak_bytes: u64,
    pub(crate) no_release_bytes: u64,
    pub(crate) live_set_bound_bytes: u64,
    pub(crate) releases: u64,
    pub(crate) weight_bytes: u64,
    /// Whether this run released at last use.
    pub(crate) release_dead_values: bool,
    /// Wall time of the run in milliseconds, uploads and readback included.
    pub(crate) latency_ms: f64,
    pub(crate) devices: Vec<DeviceFigures>,
    pub(crate) timeline: Vec<TimelinePoint>,
}

impl MemoryReport {
    /// The JavaScript report of a run: the top-level figures are every
    /// device's together (each device's peak is its own bound).
    pub(crate) fn of(out: &onyx::RunOutputs, release: bool) -> MemoryReport {
        let m = &out.memory;
        let devices: Vec<DeviceFigures> = m
            .devices
            .iter()
            .map(|d| DeviceFigures {
                device: d.device.clone(),
                peak_bytes: d.peak_bytes,
                no_release_bytes: d.no_release_bytes,
                live_set_bound_bytes: d.live_set_bound_bytes,
                arena_bytes: d.arena_bytes,
                weight_bytes: d.weight_bytes,
            })
            .collect();
        let sum = |f: fn(&DeviceFigures) -> u64| devices.iter().map(f).sum();
        MemoryReport {
            peak_bytes: sum(|d| d.peak_bytes),
            no_release_bytes: sum(|d| d.no_release_bytes),
            live_set_bound_bytes: sum(|d| d.live_set_bound_bytes),
            releases: m.releases,
            weight_bytes: sum(|d| d.weight_bytes),
            release_dead_values: release,
            latency_ms: out.latency.as_secs_f64() * 1e3,
            timeline: m
                .timeline
                .iter()
                .map(|p| TimelinePoint {
                    step: p.step.clone(),
                    live_bytes: p.live_bytes,
                    allocated_bytes: p.allocated_bytes,
                    measured_bytes: p.measured_bytes,
                    ms: p.ms,
                })
                .collect(),
            devices,
        }
    }
}

/// A plain JavaScript object (maps as objects, numbers as numbers).
pub(crate) fn to_js<T: Serialize>(value: &T) -> JsValue {
    let ser = serde_wasm_bindgen::Serializer::json_compatible();
    value.serialize(&ser).unwrap_or(JsValue::NULL)
}
