//! Reading `InferenceSession.create`'s arguments: the model (bytes or URL) and
//! the options object, in onnxruntime-web's spelling.

use js_sys::{ArrayBuffer, Object, Uint8Array};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

use crate::js::{get, view_bytes};

/// An execution provider the caller asked for.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Ep {
    /// WebGPU through the wgpu backend.
    WebGpu,
    /// The CPU backend compiled to wasm (`cpu` or `wasm`).
    Cpu,
}

/// The settings of `InferenceSession.create`.
pub(crate) struct CreateOptions {
    /// The first is the session's device; unless `strict`, the CPU stands in
    /// for a device that does not open and runs what the device cannot.
    pub(crate) providers: Vec<Ep>,
    /// Release intermediates at last use (default on).
    pub(crate) release: bool,
    /// No per-node CPU fallback and no provider fallback.
    pub(crate) strict: bool,
    /// `(path, bytes or URL)` of external data files.
    pub(crate) external: Vec<(String, JsValue)>,
}

fn flag(obj: &JsValue, key: &str, default: bool) -> Result<bool, JsError> {
    let v = get(obj, key);
    if v.is_undefined() || v.is_null() {
        return Ok(default);
    }
    v.as_bool().ok_or_else(|| JsError::new(&format!("option '{key}' must be a boolean")))
}

/// Parses the options object (`undefined` gives the defaults).
pub(crate) fn parse(options: &JsValue) -> Result<CreateOptions, JsError> {
    let mut opts = CreateOptions {
        providers: vec![Ep::WebGpu, Ep::Cpu],
        release: true,
        strict: false,
        external: Vec::new(),
    };
    if options.is_undefined() || options.is_null() {
        return Ok(opts);
    }
    if !options.is_object() {
        return Err(JsError::new("session options must be an object"));
    }
    opts.release = flag(options, "releaseDeadValues", true)?;
    opts.strict = flag(options, "strict", false)?;
    let eps = get(options, "executionProviders");
    if !eps.is_undefined() && !eps.is_null() {
        let list: js_sys::Array =
            eps.dyn_into().map_err(|_| JsError::new("'executionProviders' must be an array"))?;
        opts.providers.clear();
        for item in list.iter() {
            // onnxruntime-web takes names or `{ name: 'webgpu', ... }` objects.
            let name = item
                .as_string()
                .or_else(|| get(&item, "name").as_string())
                .ok_or_else(|| JsError::new("an execution provider must be a name or { name }"))?;
            match name.as_str() {
                "webgpu" => opts.providers.push(Ep::WebGpu),
                "cpu" | "wasm" => opts.providers.push(Ep::Cpu),
                other => web_sys::console::warn_1(
                    &format!(
                        "onyx: skipping execution provider '{other}' (Onyx has webgpu, cpu/wasm)"
                    )
                    .into(),
                ),
            }
        }
        if opts.providers.is_empty() {
            return Err(JsError::new(
                "no usable execution provider in 'executionProviders' (Onyx has webgpu, cpu/wasm)",
            ));
        }
    }
    let external = get(options, "externalData");
    if !external.is_undefined() && !external.is_null() {
        let list: js_sys::Array = external
            .dyn_into()
            .map_err(|_| JsError::new("'externalData' must be an array of { path, data }"))?;
        for item in list.iter() {
            let path = get(&item, "path")
                .as_string()
                .ok_or_else(|| JsError::new("an externalData entry needs a string 'path'"))?;
            opts.external.push((path, get(&item, "data")));
        }
    }
    Ok(opts)
}

/// The bytes of a `Uint8Array`, `ArrayBuffer` or other typed array, or of
/// the response to a URL string (fetched with the global `fetch`, so it works
/// in pages and workers).
pub(crate) async fn bytes_of(source: &JsValue, what: &str) -> Result<Vec<u8>, JsError> {
    if let Some(url) = source.as_string() {
        return fetch(&url)
            .await
            .map_err(|e| JsError::new(&format!("fetching {what} '{url}': {e}")));
    }
    if source.is_instance_of::<ArrayBuffer>() {
        return Ok(Uint8Array::new(source).to_vec());
    }
    if ArrayBuffer::is_view(source) {
        return Ok(view_bytes(source));
    }
    Err(JsError::new(&format!("{what} must be a Uint8Array, an ArrayBuffer or a URL string")))
}

async fn fetch(url: &str) -> Result<Vec<u8>, String> {
    let describe = |e: JsValue| {
        e.dyn_ref::<js_sys::Error>()
            .map(|e| String::from(e.message()))
            .or_else(|| e.as_string())
            .unwrap_or_else(|| format!("{e:?}"))
    };
    let global: Object = js_sys::global();
    let fetch: js_sys::Function =
        get(&global, "fetch").dyn_into().map_err(|_| "this context has no fetch".to_string())?;
    let promise: js_sys::Promise =
        fetch.call1(&global, &url.into()).map_err(describe)?.unchecked_into();
    let response = JsFuture::from(promise).await.map_err(describe)?;
    if !get(&response, "ok").is_truthy() {
        let status = get(&response, "status").as_f64().unwrap_or(0.0);
        return Err(format!("HTTP status {status}"));
    }
    let array_buffer: js_sys::Function = get(&response, "arrayBuffer").unchecked_into();
    let promise: js_sys::Promise =
        array_buffer.call0(&response).map_err(describe)?.unchecked_into();
    let body = JsFuture::from(promise).await.map_err(describe)?;
    Ok(Uint8Array::new(&body).to_vec())
}
