//! The plain data every provider and the executor exchange: devices, buffer
//! handles, memory statistics, tensor arguments and kernel ids.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use crate::dtype::DType;

/// The kind of device behind a provider.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum DeviceKind {
    /// Host memory, the reference backend.
    Cpu,
    /// A wgpu adapter (Vulkan, Metal, DX12, WebGPU).
    Wgpu,
    /// An NVIDIA GPU through CUDA.
    Cuda,
}

/// A device: its kind and ordinal.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct DeviceId {
    /// Kind.
    pub kind: DeviceKind,
    /// Ordinal among devices of that kind.
    pub ordinal: u32,
}

impl DeviceId {
    /// The host.
    pub const CPU: DeviceId = DeviceId { kind: DeviceKind::Cpu, ordinal: 0 };
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            DeviceKind::Cpu => f.write_str("cpu"),
            DeviceKind::Wgpu => write!(f, "wgpu:{}", self.ordinal),
            DeviceKind::Cuda => write!(f, "cuda:{}", self.ordinal),
        }
    }
}

/// A handle to device memory owned by an [`ExecutionProvider`](super::ExecutionProvider).
///
/// Plain data with no `Drop`: copying or dropping it does nothing to the
/// memory. Return it with [`ExecutionProvider::deallocate`](super::ExecutionProvider::deallocate).
#[must_use = "device memory is only returned through ExecutionProvider::deallocate"]
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct DeviceBuffer {
    /// The device holding the memory.
    pub device: DeviceId,
    /// The provider's key for the memory object (or a device address).
    pub id: u64,
    /// Size in bytes, as requested.
    pub size: u64,
    /// Alignment in bytes, as requested.
    pub align: u32,
}

/// Memory figures a provider reports from its own accounting.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Bytes in live buffers now (sum of requested sizes).
    pub in_use_bytes: u64,
    /// Highest `in_use_bytes` since creation or the last [`ExecutionProvider::reset_peak`](super::ExecutionProvider::reset_peak).
    pub peak_bytes: u64,
    /// Bytes the provider holds from the system (live buffers plus any pool cache).
    pub reserved_bytes: u64,
    /// Successful allocations since creation.
    pub allocations: u64,
    /// Successful deallocations since creation.
    pub frees: u64,
    /// Bytes of arenas held now (see [`ExecutionProvider::allocate_arena`](super::ExecutionProvider::allocate_arena));
    /// the views placed in them count in `in_use_bytes`.
    pub arena_bytes: u64,
    /// Highest `arena_bytes` since creation or the last [`ExecutionProvider::reset_peak`](super::ExecutionProvider::reset_peak).
    pub arena_peak_bytes: u64,
    /// Recordings (see [`ExecutionProvider::begin_capture`](super::ExecutionProvider::begin_capture))
    /// dropped because the recorded run still held buffers it had allocated
    /// that were not outputs: a run that releases at last use leaves none, so
    /// anything but 0 is a bug, and tests treat it as one.
    pub recording_leaks: u64,
    /// Bytes copied from the host into the provider's buffers
    /// ([`ExecutionProvider::upload`](super::ExecutionProvider::upload)) since creation.
    pub uploaded_bytes: u64,
    /// Bytes copied from the provider's buffers to the host
    /// ([`ExecutionProvider::download`](super::ExecutionProvider::download)) since creation.
    /// With [`uploaded_bytes`](Self::uploaded_bytes), what shows that a value
    /// kept on the device (a KV cache) never crossed to the host.
    pub downloaded_bytes: u64,
}

/// The fused forms of op chains a provider runs better than the chains
/// themselves: what the fusion passes ask a provider for (see
/// `passes::fuse`). A fused op must have a kernel there.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Fusions {
    /// A BatchNormalization after a Conv folded into the Conv's weights.
    pub conv_batch_norm: bool,
    /// A Conv and its activation as one `com.microsoft` `FusedConv`.
    pub conv_activation: bool,
    /// PyTorch's erf chain as one `Gelu`.
    pub gelu: bool,
    /// `Gelu(x + bias)` as one `com.microsoft` `BiasGelu`.
    pub bias_gelu: bool,
    /// Eager attention as one `Attention` that never writes the scores.
    pub attention: bool,
    /// Bias + residual + LayerNormalization as one `com.microsoft` `SkipLayerNormalization`.
    pub skip_layer_norm: bool,
    /// `MatMul(x, W) + bias` with constant weights as a `Gemm` between views.
    pub biased_gemm: bool,
    /// A gated feed-forward's two MatMulNBits and `silu(g) ⊙ u` as one
    /// `onyx` `GatedMatMulNBits`.
    pub gated_matmul_nbits: bool,
}

/// A tensor argument for a kernel launch: a buffer with the dtype and shape it holds now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorArg {
    /// The memory.
    pub buffer: DeviceBuffer,
    /// Element type.
    pub dtype: DType,
    /// Concrete shape.
    pub shape: Vec<usize>,
}

impl TensorArg {
    /// Element count.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// A prepared kernel, owned by the provider that prepared it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct KernelId(pub u32);

/// A recorded run that a provider can replay (on CUDA, an instantiated graph).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct CaptureId(pub u32);

/// A boxed future. Not `Send` on purpose: WebGPU futures are not.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// `Send + Sync` on native targets; nothing on wasm32, where WebGPU objects are not thread-safe.
#[cfg(not(target_arch = "wasm32"))]
pub trait MaybeSendSync: Send + Sync {}
#[cfg(not(target_arch = "wasm32"))]
impl<T: Send + Sync + ?Sized> MaybeSendSync for T {}
/// `Send + Sync` on native targets; nothing on wasm32, where WebGPU objects are not thread-safe.
#[cfg(target_arch = "wasm32")]
pub trait MaybeSendSync {}
#[cfg(target_arch = "wasm32")]
impl<T: ?Sized> MaybeSendSync for T {}
