//! `InferenceSession`: create, describe, run, report memory, release.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use bytes::Bytes;
use js_sys::{Array, Object, Promise, Reflect};
use onyx::Tensor as HostTensor;
use onyx::core::onnx::external::MemoryExternalData;
use onyx::core::shape::Dim as ShapeDim;
use onyx::{IoInfo, RunConfig, Session, Value};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::future_to_promise;

use crate::error::js_error;
use crate::js::get;
use crate::options::{self, Ep, bytes_of};
use crate::report::{
    Adapter, Description, DeviceSummary, Dim, IoMetadata, MemoryReport, NodePlacement, to_js,
};
use crate::tensor::{Tensor, host_tensor};

/// A model compiled for WebGPU (with per-node CPU fallback) or the CPU.
#[wasm_bindgen]
pub struct InferenceSession {
    /// `None` once released.
    live: Option<Rc<Live>>,
}

/// An open session and what the JavaScript API keeps beside it.
struct Live {
    session: Session,
    /// A run is in flight (runs on one session do not overlap).
    running: Cell<bool>,
    last: RefCell<Option<MemoryReport>>,
}

fn metadata(info: &IoInfo) -> IoMetadata {
    let declared = info.declared.as_ref();
    IoMetadata {
        name: info.name.clone(),
        is_tensor: declared.is_none_or(|t| t.tensor_dtype().is_some()),
        dtype: declared.and_then(|t| t.tensor_dtype()).map(|d| d.name().to_string()),
        shape: declared.and_then(|t| t.tensor_shape()).map(|s| {
            s.dims()
                .iter()
                .map(|d| match d {
                    ShapeDim::Known(n) => Dim::Known(*n as u64),
                    ShapeDim::Sym(s) => Dim::Sym(s.to_string()),
                    ShapeDim::Unknown => Dim::Unknown,
                })
                .collect()
        }),
    }
}

/// A host tensor from anything shaped like a tensor (`type`, `data`, `dims`):
/// Onyx's own `Tensor`s and onnxruntime-web's alike.
fn tensor_of(name: &str, value: &JsValue) -> Result<HostTensor, JsError> {
    let bad = |why: &str| JsError::new(&format!("input '{name}': {why}"));
    let type_ = get(value, "type").as_string().ok_or_else(|| bad("not a Tensor (no 'type')"))?;
    let dims = get(value, "dims");
    let dims: Option<Vec<f64>> = if dims.is_undefined() {
        None
    } else {
        Some(
            Array::from(&dims)
                .iter()
                .map(|d| d.as_f64().ok_or_else(|| bad("'dims' must hold numbers")))
                .collect::<Result<_, _>>()?,
        )
    };
    host_tensor(&type_, &get(value, "data"), dims).map_err(|e| bad(&e))
}

fn outputs_object(names: &[String], values: Vec<Value>) -> Object {
    let out = Object::new();
    for (name, value) in names.iter().zip(values) {
        let js: JsValue = match value {
            Value::Tensor(t) => Tensor::from_host(t).into(),
            Value::Sequence(_, items) => items
                .into_iter()
                .map(|t| JsValue::from(Tensor::from_host(t)))
                .collect::<Array>()
                .into(),
            Value::Empty { .. } => JsValue::NULL,
        };
        // Setting a property on a fresh plain object cannot fail.
        let _ = Reflect::set(&out, &name.into(), &js);
    }
    out
}

#[wasm_bindgen]
impl InferenceSession {
    /// Loads a model from bytes (`Uint8Array`, `ArrayBuffer`) or a URL, opens
    /// the first available execution provider of `options.executionProviders`
    /// (default `['webgpu', 'cpu']`), compiles and uploads the weights.
    ///
    /// Options: `executionProviders`, `releaseDeadValues` (default true),
    /// `externalData: [{ path, data }]` (data as bytes or a URL), and
    /// `strict` (no fallback between providers or per node).
    ///
    /// # Errors
    /// An `Error` carrying the whole chain for unreadable models, unavailable
    /// providers or nodes that cannot be compiled.
    pub async fn create(
        #[wasm_bindgen(unchecked_param_type = "Uint8Array | ArrayBuffer | string")] model: JsValue,
        #[wasm_bindgen(unchecked_param_type = "SessionOptions")] options: Option<Object>,
    ) -> Result<InferenceSession, JsError> {
        let opts = options::parse(&options.map_or(JsValue::UNDEFINED, JsValue::from))?;
        let bytes = bytes_of(&model, "the model").await?;
        let mut external = MemoryExternalData::new();
        for (path, data) in &opts.external {
            let data = bytes_of(data, &format!("external data '{path}'")).await?;
            external
                .insert(path, Bytes::from(data))
                .map_err(|e| js_error(&format!("external data '{path}'"), &e))?;
        }
        // The first provider listed is the device. Unless strict, the CPU
        // stands in for a device that does not open, and runs the nodes the
        // device has no kernel for.
        let device = match opts.providers[0] {
            Ep::WebGpu => "webgpu",
            Ep::Cpu => "cpu",
        };
        let session = Session::builder()
            .with_device(device)
            .with_strict(opts.strict)
            .with_release_dead_values(opts.release)
            .commit_from_bytes_async(Bytes::from(bytes), Some(&external))
            .await
            .map_err(|e| js_error("creating a session", &e))?;
        if let Some(reason) = session.fallback() {
            web_sys::console::warn_1(&format!("onyx: webgpu: {reason}; running on the cpu").into());
        }
        Ok(InferenceSession {
            live: Some(Rc::new(Live {
                session,
                running: Cell::new(false),
                last: RefCell::new(None),
            })),
        })
    }

    fn live(&self) -> Result<&Rc<Live>, JsError> {
        self.live.as_ref().ok_or_else(|| JsError::new("the session was released"))
    }

    fn io(&self, outputs: bool) -> Vec<IoInfo> {
        self.live.as_ref().map_or_else(Vec::new, |l| {
            if outputs { l.session.outputs() } else { l.session.inputs() }
        })
    }

    /// The names of the inputs a caller feeds.
    #[wasm_bindgen(getter, js_name = inputNames)]
    pub fn input_names(&self) -> Vec<String> {
        self.io(false).into_iter().map(|i| i.name).collect()
    }

    /// The names of the outputs.
    #[wasm_bindgen(getter, js_name = outputNames)]
    pub fn output_names(&self) -> Vec<String> {
        self.io(true).into_iter().map(|i| i.name).collect()
    }

    /// `[{ name, isTensor, type, shape }]` of the inputs; symbolic dims are names.
    #[wasm_bindgen(getter, js_name = inputMetadata, unchecked_return_type = "ValueMetadata[]")]
    pub fn input_metadata(&self) -> JsValue {
        to_js(&self.io(false).iter().map(metadata).collect::<Vec<_>>())
    }

    /// `[{ name, isTensor, type, shape }]` of the outputs.
    #[wasm_bindgen(getter, js_name = outputMetadata, unchecked_return_type = "ValueMetadata[]")]
    pub fn output_metadata(&self) -> JsValue {
        to_js(&self.io(true).iter().map(metadata).collect::<Vec<_>>())
    }

    /// The execution provider in use: `webgpu` or `cpu`.
    #[wasm_bindgen(getter, js_name = executionProvider)]
    pub fn execution_provider(&self) -> Option<String> {
        self.live.as_ref().map(|l| provider_name(l.session.device()).to_string())
    }

    /// The model and its placement: inputs, outputs, op histogram, the device
    /// of every kernel node, kernels and weight bytes per device, the adapter.
    ///
    /// # Errors
    /// An `Error` after `release()`.
    #[wasm_bindgen(unchecked_return_type = "ModelDescription")]
    pub fn describe(&self) -> Result<JsValue, JsError> {
        let s = &self.live()?.session;
        let model = s.model();
        let mut hist: BTreeMap<&str, usize> = BTreeMap::new();
        for n in &model.graph.nodes {
            *hist.entry(n.op_type.as_str()).or_default() += 1;
        }
        let mut ops: Vec<(String, usize)> = hist.into_iter().map(|(k, v)| (k.into(), v)).collect();
        ops.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let weights = s.weight_bytes_per_device();
        let description = Description {
            execution_provider: provider_name(s.device()).into(),
            adapter: s.adapter().map(Adapter::from),
            skipped: s.fallback().map(|f| format!("webgpu: {f}")).into_iter().collect(),
            producer: model.producer.clone(),
            opsets: model.opsets.iter().map(|(d, v)| (d.clone(), *v)).collect(),
            inputs: s.inputs().iter().map(metadata).collect(),
            outputs: s.outputs().iter().map(metadata).collect(),
            ops,
            nodes: s
                .placement()
                .into_iter()
                .map(|(n, device)| NodePlacement {
                    name: n.name,
                    op: n.op_type,
                    domain: n.domain,
                    device,
                })
                .collect(),
            devices: s
                .kernels_per_device()
                .into_iter()
                .zip(weights)
                .map(|((device, kernels), (_, weight_bytes))| DeviceSummary {
                    device,
                    kernels,
                    weight_bytes,
                })
                .collect(),
        };
        Ok(to_js(&description))
    }

    /// Runs the model on `feeds` (input name → tensor) and resolves to an
    /// object of output name → `Tensor`. `options.releaseDeadValues`
    /// overrides the session's setting for this run; `options.profile` times
    /// every step (see the report's timeline). Runs on one session do
    /// not overlap: await one before starting the next.
    ///
    /// # Errors
    /// An `Error` (synchronously, or as the rejection) for missing, unknown or
    /// mistyped inputs, and for failures with the node, op and backend.
    #[wasm_bindgen(unchecked_return_type = "Promise<Record<string, Tensor>>")]
    pub fn run(
        &self,
        #[wasm_bindgen(unchecked_param_type = "Record<string, TensorLike>")] feeds: JsValue,
        #[wasm_bindgen(unchecked_param_type = "RunOptions")] options: Option<Object>,
    ) -> Result<Promise, JsError> {
        let options = options.map_or(JsValue::UNDEFINED, JsValue::from);
        let live = self.live()?.clone();
        if live.running.get() {
            return Err(JsError::new(
                "a run is already in progress on this session; await it first",
            ));
        }
        if !feeds.is_object() {
            return Err(JsError::new("feeds must be an object of input name → Tensor"));
        }
        let names: Vec<String> = live.session.inputs().into_iter().map(|i| i.name).collect();
        for key in Object::keys(feeds.unchecked_ref::<Object>()).iter() {
            let key = key.as_string().unwrap_or_default();
            if !names.contains(&key) {
                return Err(JsError::new(&format!(
                    "input '{key}': the model has no such input (inputs: {})",
                    names.join(", ")
                )));
            }
        }
        let mut inputs = Vec::with_capacity(names.len());
        for name in names {
            let value = get(&feeds, &name);
            if value.is_undefined() {
                return Err(JsError::new(&format!("input '{name}': not provided")));
            }
            let t = tensor_of(&name, &value)?;
            inputs.push((name, Value::Tensor(t)));
        }
        let config = RunConfig {
            release_dead_values: get(&options, "releaseDeadValues").as_bool(),
            profile: get(&options, "profile").as_bool().unwrap_or(false),
            host_cost: false,
        };
        live.running.set(true);
        Ok(future_to_promise(async move {
            let result = live.session.run_with_async(inputs, config).await;
            live.running.set(false);
            match result {
                Ok(out) => {
                    let release =
                        config.release_dead_values.unwrap_or(live.session.release_dead_values());
                    *live.last.borrow_mut() = Some(MemoryReport::of(&out, release));
                    let (names, values): (Vec<String>, Vec<Value>) = out.values.into_iter().unzip();
                    Ok(outputs_object(&names, values).into())
                }
                Err(e) => {
                    Err(js_error(&format!("running on {}", live.session.device()), &e).into())
                }
            }
        }))
    }

    /// The memory report of the last run, or `null` before the first:
    /// `{ peakBytes, noReleaseBytes, liveSetBoundBytes, releases, weightBytes,
    /// releaseDeadValues, latencyMs, devices: [...], timeline: [{ step,
    /// liveBytes, allocatedBytes, measuredBytes }] }`.
    #[wasm_bindgen(js_name = memoryReport, unchecked_return_type = "MemoryReport | null")]
    pub fn memory_report(&self) -> JsValue {
        match self.live.as_ref().and_then(|l| l.last.borrow().clone()) {
            Some(r) => to_js(&r),
            None => JsValue::NULL,
        }
    }

    /// Bytes each device holds now (weights included): `[[device, bytes]]`.
    #[wasm_bindgen(js_name = bytesInUse, unchecked_return_type = "Array<[string, number]>")]
    pub fn bytes_in_use(&self) -> JsValue {
        to_js(&self.live.as_ref().map(|l| in_use(&l.session)).unwrap_or_default())
    }

    /// Deterministic generated inputs from the declared types and shapes:
    /// floats in [-1, 1), integers in [0, 100). `dims` maps symbolic dim
    /// names to sizes (others are 1).
    ///
    /// # Errors
    /// An `Error` for inputs without a declared type or shape.
    #[wasm_bindgen(js_name = generateInputs, unchecked_return_type = "Record<string, Tensor>")]
    pub fn generate_inputs(
        &self,
        #[wasm_bindgen(unchecked_param_type = "Record<string, number>")] dims: Option<Object>,
        seed: Option<f64>,
    ) -> Result<Object, JsError> {
        let dims = dims.map_or(JsValue::UNDEFINED, JsValue::from);
        let s = &self.live()?.session;
        let mut sizes = HashMap::new();
        if dims.is_object() {
            for key in Object::keys(dims.unchecked_ref::<Object>()).iter() {
                let name = key.as_string().unwrap_or_default();
                let size = get(&dims, &name)
                    .as_f64()
                    .ok_or_else(|| JsError::new(&format!("dim '{name}' must be a number")))?;
                sizes.insert(name, size as usize);
            }
        }
        let generated =
            onyx::inputs::random_inputs(&s.inputs(), &sizes, seed.unwrap_or(0.0) as u64)
                .map_err(|err| js_error("generating inputs", &err))?;
        let (names, values): (Vec<String>, Vec<Value>) = generated.into_iter().unzip();
        Ok(outputs_object(&names, values))
    }

    /// Frees the session's weights on every device. Later calls fail.
    ///
    /// # Errors
    /// Rejects while a run is in flight (the session stays usable) or when a
    /// provider refuses a free.
    #[wasm_bindgen(unchecked_return_type = "Promise<void>")]
    pub fn release(&mut self) -> Promise {
        let result: Result<(), JsError> = match self.live.take() {
            None => Ok(()),
            Some(rc) => match Rc::try_unwrap(rc) {
                Ok(mut live) => live
                    .session
                    .release()
                    .map_err(|e| js_error("releasing the session", &e))
                    .and_then(|()| {
                        // Every byte goes back through the providers' deallocate: check it.
                        let held: Vec<String> = in_use(&live.session)
                            .into_iter()
                            .filter(|(_, bytes)| *bytes > 0)
                            .map(|(device, bytes)| format!("{bytes} bytes on {device}"))
                            .collect();
                        if held.is_empty() {
                            Ok(())
                        } else {
                            Err(JsError::new(&format!(
                                "still held after release: {}",
                                held.join(", ")
                            )))
                        }
                    }),
                Err(rc) => {
                    self.live = Some(rc);
                    Err(JsError::new("cannot release a session while a run is in progress"))
                }
            },
        };
        match result {
            Ok(()) => Promise::resolve(&JsValue::UNDEFINED),
            Err(e) => Promise::reject(&e.into()),
        }
    }
}

/// onnxruntime-web's name for the device a session runs on.
fn provider_name(device: &str) -> &'static str {
    if device.starts_with("wgpu") { "webgpu" } else { "cpu" }
}

/// Bytes in use on each provider now (weights included).
fn in_use(s: &Session) -> Vec<(String, u64)> {
    s.providers().iter().map(|p| (p.name(), p.memory_stats().in_use_bytes)).collect()
}
