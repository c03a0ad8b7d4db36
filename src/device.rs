//! Device strings (`cpu`, `wgpu`, `wgpu:N`, `cuda`, `cuda:N`), parsed once and
//! resolved to one provider that every component of a session uses.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use onyx_core::ep::ExecutionProvider;
use onyx_cpu::{CpuOptions, CpuProvider};

use crate::error::Error;

/// A device as the user asked for it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Device {
    /// The CPU reference backend.
    Cpu,
    /// A wgpu adapter; `None` picks the default one.
    Wgpu(Option<u32>),
    /// An NVIDIA GPU; `None` picks GPU 0.
    Cuda(Option<u32>),
}

impl FromStr for Device {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let bad = || Error::BadDevice(s.to_string());
        let (kind, ordinal) = match s.split_once(':') {
            Some((k, n)) => (k, Some(n.parse::<u32>().map_err(|_| bad())?)),
            None => (s, None),
        };
        match (kind.to_ascii_lowercase().as_str(), ordinal) {
            ("cpu", None) => Ok(Device::Cpu),
            // `webgpu` is the browser's name for the same backend.
            ("wgpu" | "webgpu", n) => Ok(Device::Wgpu(n)),
            ("cuda", n) => Ok(Device::Cuda(n)),
            _ => Err(bad()),
        }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Wgpu(None) => f.write_str("wgpu"),
            Device::Wgpu(Some(n)) => write!(f, "wgpu:{n}"),
            Device::Cuda(None) => f.write_str("cuda"),
            Device::Cuda(Some(n)) => write!(f, "cuda:{n}"),
        }
    }
}

/// The outcome of resolving a device request.
pub struct Resolved {
    /// What was asked for.
    pub requested: Device,
    /// The provider every component of the session uses.
    pub provider: Arc<dyn ExecutionProvider>,
    /// Why the request fell back to the CPU, if it did.
    pub fallback: Option<String>,
    /// What the wgpu adapter is, when the provider is one.
    pub adapter: Option<Adapter>,
}

/// A wgpu adapter, as the session reports it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Adapter {
    /// Adapter name (`NVIDIA H200`, `llvmpipe (…)`).
    pub name: String,
    /// Backend (`Vulkan`, `Metal`, `Dx12`, `BrowserWebGpu`).
    pub backend: String,
    /// Device type (`DiscreteGpu`, `Cpu`, …).
    pub device_type: String,
    /// Native f16 arithmetic and storage in shaders.
    pub shader_f16: bool,
    /// Largest storage buffer binding, bytes.
    pub max_binding_bytes: u64,
}

/// A provider just opened, and what it is.
type Opened = (Arc<dyn ExecutionProvider>, Option<Adapter>);

/// Which backends this build of Onyx contains.
pub fn compiled_backends() -> Vec<&'static str> {
    let mut v = vec!["cpu"];
    if cfg!(feature = "wgpu") {
        v.push("wgpu");
    }
    if cfg!(feature = "cuda") {
        v.push("cuda");
    }
    v
}

/// Opens a wgpu adapter, or says why not.
#[cfg(feature = "wgpu")]
// On wasm32 wgpu's handles are neither Send nor Sync; the page is one thread,
// and the session keeps one `Arc<dyn ExecutionProvider>` type on every target.
#[cfg_attr(target_arch = "wasm32", allow(clippy::arc_with_non_send_sync))]
async fn open_wgpu(ordinal: Option<u32>) -> Result<Opened, String> {
    let p = onyx_wgpu::WgpuProvider::new(onyx_wgpu::WgpuOptions {
        adapter: ordinal,
        ..Default::default()
    })
    .await
    .map_err(|e| e.to_string())?;
    let a = p.adapter();
    log::info!("wgpu adapter: {} ({}, {})", a.name, a.backend, a.device_type);
    let adapter = Adapter {
        name: a.name.clone(),
        backend: a.backend.clone(),
        device_type: a.device_type.clone(),
        shader_f16: a.shader_f16,
        max_binding_bytes: a.max_binding,
    };
    Ok((Arc::new(p), Some(adapter)))
}

#[cfg(not(feature = "wgpu"))]
async fn open_wgpu(_: Option<u32>) -> Result<Opened, String> {
    Err("this build of Onyx has no wgpu backend (build with --features wgpu)".into())
}

/// Settings for GPU providers.
#[derive(Copy, Clone, Debug, Default)]
pub struct GpuOptions {
    /// Let f32 matrix products use TF32 tensor cores (CUDA; about 10 bits of
    /// mantissa in the products, as PyTorch's `allow_tf32`).
    pub allow_tf32: bool,
}

/// Opens a CUDA device, or says why not (no driver, no such ordinal, no libraries).
#[cfg(feature = "cuda")]
fn open_cuda(ordinal: Option<u32>, gpu: GpuOptions) -> Result<Opened, String> {
    let p = onyx_cuda::CudaProvider::new(onyx_cuda::CudaOptions {
        ordinal: ordinal.unwrap_or(0),
        allow_tf32: gpu.allow_tf32,
        ..Default::default()
    })
    .map_err(|e| e.to_string())?;
    let i = p.info();
    log::info!(
        "cuda device {}: {} (compute capability {}.{})",
        i.ordinal,
        i.name,
        i.compute_capability.0,
        i.compute_capability.1
    );
    Ok((Arc::new(p), None))
}

#[cfg(not(feature = "cuda"))]
fn open_cuda(_: Option<u32>, _: GpuOptions) -> Result<Opened, String> {
    Err("this build of Onyx has no CUDA backend (build with --features cuda)".into())
}

/// Describes a wgpu adapter.
#[cfg(not(target_arch = "wasm32"))]
fn describe_wgpu(ordinal: Option<u32>) -> Result<String, String> {
    let (_, adapter) = pollster::block_on(open_wgpu(ordinal))?;
    let a = adapter.ok_or("no adapter")?;
    Ok(format!("wgpu:{}: {} ({}, {})", ordinal.unwrap_or(0), a.name, a.backend, a.device_type))
}

/// Describes a CUDA device: name, compute capability, free and total memory.
#[cfg(all(feature = "cuda", not(target_arch = "wasm32")))]
fn describe_cuda(ordinal: Option<u32>) -> Result<String, String> {
    let i = onyx_cuda::info(ordinal.unwrap_or(0)).map_err(|e| e.to_string())?;
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    Ok(format!(
        "cuda:{}: {}\n  compute capability {}.{}, {} multiprocessors\n  memory {:.2} GiB free of {:.2} GiB",
        i.ordinal,
        i.name,
        i.compute_capability.0,
        i.compute_capability.1,
        i.multiprocessors,
        gib(i.free_bytes),
        gib(i.total_bytes)
    ))
}

#[cfg(all(not(feature = "cuda"), not(target_arch = "wasm32")))]
fn describe_cuda(ordinal: Option<u32>) -> Result<String, String> {
    open_cuda(ordinal, GpuOptions::default()).map(|_| String::new())
}

/// A short description of a device: what `onyx info --device D` prints.
///
/// # Errors
/// [`Error::DeviceUnavailable`] when the device cannot be opened.
#[cfg(not(target_arch = "wasm32"))]
pub fn describe(requested: Device) -> Result<String, Error> {
    let unavailable =
        |reason: String| Error::DeviceUnavailable { requested: requested.to_string(), reason };
    match requested {
        Device::Cpu => Ok(format!(
            "cpu: {} threads available",
            std::thread::available_parallelism().map_or(1, |n| n.get())
        )),
        Device::Wgpu(n) => describe_wgpu(n).map_err(unavailable),
        Device::Cuda(n) => describe_cuda(n).map_err(unavailable),
    }
}

/// Resolves a device request to a provider. An unavailable device falls back to
/// the CPU with a warning, or is an error under `strict`.
///
/// # Errors
/// [`Error::DeviceUnavailable`] in strict mode.
pub async fn resolve_async(
    requested: Device,
    strict: bool,
    cpu: CpuOptions,
    gpu: GpuOptions,
) -> Result<Resolved, Error> {
    let opened = match requested {
        Device::Cpu => Ok((Arc::new(CpuProvider::new(cpu.clone())) as _, None)),
        Device::Wgpu(n) => open_wgpu(n).await,
        Device::Cuda(n) => open_cuda(n, gpu),
    };
    match opened {
        Ok((provider, adapter)) => Ok(Resolved { requested, provider, fallback: None, adapter }),
        Err(reason) if strict => {
            Err(Error::DeviceUnavailable { requested: requested.to_string(), reason })
        }
        Err(reason) => {
            log::warn!("device {requested} is not available ({reason}); falling back to cpu");
            Ok(Resolved {
                requested,
                provider: Arc::new(CpuProvider::new(cpu)),
                fallback: Some(reason),
                adapter: None,
            })
        }
    }
}

/// [`resolve_async`], blocking.
///
/// # Errors
/// As [`resolve_async`].
#[cfg(not(target_arch = "wasm32"))]
pub fn resolve(
    requested: Device,
    strict: bool,
    cpu: CpuOptions,
    gpu: GpuOptions,
) -> Result<Resolved, Error> {
    pollster::block_on(resolve_async(requested, strict, cpu, gpu))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_strings_parse_with_and_without_ordinals() {
        assert_eq!("cpu".parse::<Device>().unwrap(), Device::Cpu);
        assert_eq!("wgpu".parse::<Device>().unwrap(), Device::Wgpu(None));
        assert_eq!("cuda:3".parse::<Device>().unwrap(), Device::Cuda(Some(3)));
        assert!("cpu:1".parse::<Device>().is_err());
        assert!("tpu".parse::<Device>().is_err());
        assert!("cuda:x".parse::<Device>().is_err());
    }

    #[test]
    fn a_missing_device_falls_back_to_cpu_unless_strict() {
        let r = resolve(Device::Cuda(Some(7)), false, CpuOptions::default(), GpuOptions::default())
            .unwrap();
        assert_eq!(r.provider.name(), "cpu");
        assert!(r.fallback.is_some());
        let err =
            resolve(Device::Cuda(Some(7)), true, CpuOptions::default(), GpuOptions::default())
                .err()
                .unwrap();
        assert!(err.to_string().contains("cuda:7"), "{err}");
    }
}
