//! The wgpu instance, adapter, device and queue, and the error sink that turns
//! validation errors into `Err` values instead of wgpu's default panic.

use std::sync::{Arc, Mutex};

use onyx_core::ep::EpError;

/// What the adapter is and can do.
#[derive(Clone, Debug)]
pub struct AdapterSummary {
    /// Adapter name (`NVIDIA H200`, `llvmpipe (…)`).
    pub name: String,
    /// Backend (`Vulkan`, `Metal`, `Dx12`, `BrowserWebGpu`).
    pub backend: String,
    /// Device type (`DiscreteGpu`, `Cpu`, …).
    pub device_type: String,
    /// Native f16 arithmetic and storage in shaders.
    pub shader_f16: bool,
    /// Largest storage buffer binding, bytes.
    pub max_binding: u64,
    /// Largest buffer, bytes.
    pub max_buffer: u64,
    /// Storage buffers per shader stage.
    pub max_storage_buffers: u32,
}

/// A device with its queue.
pub struct Gpu {
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) summary: AdapterSummary,
    errors: Arc<Mutex<Vec<String>>>,
}

impl Gpu {
    /// Opens adapter `ordinal` (in enumeration order; `None`: the high-performance default).
    ///
    /// # Errors
    /// [`EpError::Device`] when there is no such adapter or the device cannot be created.
    pub async fn new(ordinal: Option<u32>) -> Result<Gpu, EpError> {
        #[cfg(target_arch = "wasm32")]
        if !has_webgpu() {
            return Err(EpError::Device(
                "navigator.gpu is missing: this browser or context has no WebGPU".into(),
            ));
        }
        let instance =
            wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        let adapter = match ordinal {
            Some(n) => {
                #[cfg(not(target_arch = "wasm32"))]
                {
                    let adapters = instance.enumerate_adapters(wgpu::Backends::all()).await;
                    let count = adapters.len();
                    adapters.into_iter().nth(n as usize).ok_or_else(|| {
                        EpError::Device(format!("no wgpu adapter {n} ({count} found)"))
                    })?
                }
                #[cfg(target_arch = "wasm32")]
                {
                    if n != 0 {
                        return Err(EpError::Device(format!("no wgpu adapter {n} in a browser")));
                    }
                    default_adapter(&instance).await?
                }
            }
            None => default_adapter(&instance).await?,
        };
        let info = adapter.get_info();
        let features = adapter.features();
        let mut required = wgpu::Features::empty();
        if features.contains(wgpu::Features::SHADER_F16) {
            required |= wgpu::Features::SHADER_F16;
        }
        let limits = adapter.limits();
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("onyx"),
                required_features: required,
                required_limits: limits.clone(),
                experimental_features: wgpu::ExperimentalFeatures::disabled(),
                memory_hints: wgpu::MemoryHints::Performance,
                trace: wgpu::Trace::Off,
            })
            .await
            .map_err(|e| EpError::Device(format!("cannot open {}: {e}", info.name)))?;
        let errors: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(Vec::new()));
        let sink = errors.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            let text = e
                .to_string()
                .lines()
                .filter(|l| !l.trim().is_empty())
                .collect::<Vec<_>>()
                .join(": ");
            sink.lock().unwrap_or_else(|p| p.into_inner()).push(text);
        }));
        Ok(Gpu {
            device,
            queue,
            summary: AdapterSummary {
                name: info.name,
                backend: format!("{:?}", info.backend),
                device_type: format!("{:?}", info.device_type),
                shader_f16: required.contains(wgpu::Features::SHADER_F16),
                max_binding: limits.max_storage_buffer_binding_size,
                max_buffer: limits.max_buffer_size,
                max_storage_buffers: limits.max_storage_buffers_per_shader_stage,
            },
            errors,
        })
    }

    /// Takes the errors wgpu reported since the last call.
    pub(crate) fn take_errors(&self) -> Result<(), EpError> {
        let mut errors = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        if errors.is_empty() {
            return Ok(());
        }
        let all = std::mem::take(&mut *errors);
        Err(EpError::Device(all.join("; ")))
    }
}

async fn default_adapter(instance: &wgpu::Instance) -> Result<wgpu::Adapter, EpError> {
    instance
        .request_adapter(&wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            force_fallback_adapter: false,
            compatible_surface: None,
            apply_limit_buckets: false,
        })
        .await
        .map_err(|e| EpError::Device(format!("no wgpu adapter: {e}")))
}

/// Whether the global scope (a page or a worker) exposes `navigator.gpu`.
#[cfg(target_arch = "wasm32")]
fn has_webgpu() -> bool {
    let get = |o: &wasm_bindgen::JsValue, k: &str| {
        js_sys::Reflect::get(o, &k.into()).unwrap_or(wasm_bindgen::JsValue::UNDEFINED)
    };
    let navigator = get(&js_sys::global().into(), "navigator");
    !navigator.is_undefined() && !get(&navigator, "gpu").is_undefined()
}
