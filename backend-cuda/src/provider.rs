//! The CUDA execution provider.
//!
//! - **Buffers** are allocated stream-ordered (`cuMemAllocFromPoolAsync`) from
//!   a pool the provider owns, wrapped in `CudaSlice`s (which free themselves
//!   with `cuMemFreeAsync` when dropped) and kept in a table keyed by the plain
//!   `DeviceBuffer` id. Only `deallocate` removes one from the table, so a
//!   release at last use is a queued free: no synchronization. The pool keeps
//!   freed memory for reuse (like PyTorch's caching allocator) until
//!   [`CudaProvider::trim`]; `memory_stats` reports the pool's real reserved bytes.
//! - **Kernels** are NVRTC-compiled at first use for the device's architecture
//!   and cached in memory and on disk; MatMul and Gemm go through cuBLAS.
//! - **Work** is queued on one stream; `download` and `synchronize` wait for it.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, RwLock};

use cudarc::driver::CudaSlice;
use cudarc::driver::sys::CUmemPool_attribute;
use cudarc::driver::{result as drv, sys as drv_sys};
use onyx_core::ep::{
    BoxFuture, DeviceBuffer, DeviceId, DeviceKind, EpError, ExecutionProvider, KernelId,
    KernelSpec, Launch, MemoryStats,
};

use crate::device::{self, DeviceInfo};
use crate::gpu::{Gpu, device_err};
use crate::kernels::{CudaKernel, Io, Registry};

/// Settings of a [`CudaProvider`].
#[derive(Clone, Debug)]
pub struct CudaOptions {
    /// The GPU ordinal (`cuda:N`).
    pub ordinal: u32,
    /// Freed bytes the pool may keep cached after a synchronization
    /// (`u64::MAX` keeps everything until [`CudaProvider::trim`]; 0 returns
    /// freed memory to the device at every synchronization).
    pub release_threshold: u64,
    /// Lets f32 matrix products use TF32 tensor cores (about 10 bits of mantissa).
    pub allow_tf32: bool,
}

impl Default for CudaOptions {
    fn default() -> Self {
        CudaOptions { ordinal: 0, release_threshold: u64::MAX, allow_tf32: false }
    }
}

struct Entry {
    /// Owns the memory: dropping it queues `cuMemFreeAsync` on the stream.
    _slice: CudaSlice<u8>,
    ptr: u64,
    size: u64,
}

struct State {
    buffers: HashMap<u64, Entry>,
    next_id: u64,
    stats: MemoryStats,
}

/// Memory figures read from the driver, not from Onyx's own bookkeeping.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct DriverMemory {
    /// Bytes of live allocations in this provider's pool (`USED_MEM_CURRENT`).
    pub pool_used: u64,
    /// Highest `pool_used` since the last [`CudaProvider::reset_driver_peaks`].
    pub pool_used_high: u64,
    /// Bytes the pool holds from the device (`RESERVED_MEM_CURRENT`).
    pub pool_reserved: u64,
    /// Highest `pool_reserved` since the last reset.
    pub pool_reserved_high: u64,
    /// Free device memory (`cuMemGetInfo`).
    pub device_free: u64,
    /// Total device memory.
    pub device_total: u64,
}

/// The CUDA backend.
pub struct CudaProvider {
    gpu: Gpu,
    info: DeviceInfo,
    state: Mutex<State>,
    registry: Registry,
    kernels: RwLock<Vec<Box<dyn CudaKernel>>>,
}

impl CudaProvider {
    /// Opens GPU `opts.ordinal`, after checking that the CUDA libraries exist.
    ///
    /// # Errors
    /// [`EpError::Device`] when a library is missing, the device does not
    /// exist, or the driver fails.
    pub fn new(opts: CudaOptions) -> Result<Self, EpError> {
        let ctx = device::open(opts.ordinal)?;
        let info = device::describe(&ctx, opts.ordinal)?;
        if info.compute_capability.0 < 7 {
            return Err(EpError::Device(format!(
                "{} has compute capability {}.{}; Onyx's CUDA kernels need 7.0 or newer",
                info.name, info.compute_capability.0, info.compute_capability.1
            )));
        }
        let cc = info.compute_capability;
        let gpu = Gpu::new(
            ctx,
            info.multiprocessors,
            info.compute_capability,
            opts.release_threshold,
            opts.allow_tf32,
        )?;
        Ok(CudaProvider {
            gpu,
            info,
            state: Mutex::new(State {
                buffers: HashMap::new(),
                next_id: 1,
                stats: MemoryStats::default(),
            }),
            registry: Registry::standard(cc),
            kernels: RwLock::new(Vec::new()),
        })
    }

    /// What the GPU is (free memory as of opening).
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for queued work, then returns every cached free byte of the pool to the device.
    ///
    /// # Errors
    /// A driver error.
    pub fn trim(&self) -> Result<(), EpError> {
        self.gpu.stream.synchronize().map_err(device_err("synchronizing"))?;
        // SAFETY: the pool is live; trimming only releases unused memory.
        unsafe { drv::mem_pool::trim_to(self.gpu.pool.0, 0) }
            .map_err(device_err("trimming the memory pool"))
    }

    /// The pool's and the device's memory figures as the driver reports them,
    /// after waiting for queued work.
    ///
    /// # Errors
    /// A driver error.
    pub fn driver_memory(&self) -> Result<DriverMemory, EpError> {
        self.gpu.stream.synchronize().map_err(device_err("synchronizing"))?;
        let (free, total) = self.gpu.ctx.mem_get_info().map_err(device_err("cuMemGetInfo"))?;
        let p = &self.gpu.pool;
        Ok(DriverMemory {
            pool_used: p.get(CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_CURRENT),
            pool_used_high: p.get(CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH),
            pool_reserved: p.get(CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT),
            pool_reserved_high: p.get(CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH),
            device_free: free as u64,
            device_total: total as u64,
        })
    }

    /// Restarts the driver's high-water marks of the pool.
    ///
    /// # Errors
    /// A driver error.
    pub fn reset_driver_peaks(&self) -> Result<(), EpError> {
        self.gpu.stream.synchronize().map_err(device_err("synchronizing"))?;
        self.gpu.pool.set(CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH, 0)?;
        self.gpu.pool.set(CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, 0)
    }

    fn entry<'s>(st: &'s State, b: &DeviceBuffer, device: DeviceId) -> Result<&'s Entry, EpError> {
        match st.buffers.get(&b.id) {
            Some(e) if b.device == device && e.size == b.size => Ok(e),
            _ => Err(EpError::UnknownBuffer { id: b.id, device: b.device }),
        }
    }

    /// Device addresses of a launch's buffers, checked against the table.
    fn addresses(&self, tensors: &[Option<onyx_core::ep::TensorArg>]) -> Result<Vec<u64>, EpError> {
        let st = self.state();
        let me = self.device();
        tensors
            .iter()
            .map(|t| match t {
                Some(t) => {
                    let e = Self::entry(&st, &t.buffer, me)?;
                    let need = t.dtype.byte_size(t.numel()).unwrap_or(0) as u64;
                    if need > e.size {
                        return Err(EpError::OutOfBounds { offset: 0, len: need, size: e.size });
                    }
                    Ok(e.ptr)
                }
                None => Ok(0),
            })
            .collect()
    }
}

impl ExecutionProvider for CudaProvider {
    fn name(&self) -> String {
        format!("cuda:{}", self.info.ordinal)
    }

    fn device(&self) -> DeviceId {
        DeviceId { kind: DeviceKind::Cuda, ordinal: self.info.ordinal }
    }

    fn allocate(&self, size: u64, align: u32) -> Result<DeviceBuffer, EpError> {
        let _ = align; // pool allocations are aligned to at least 256 bytes.
        // Round up so vectorized kernels may touch whole 16-byte words.
        let bytes = size.div_ceil(16).max(1) * 16;
        self.gpu.ctx.bind_to_thread().map_err(device_err("binding the CUDA context"))?;
        let mut ptr: drv_sys::CUdeviceptr = 0;
        // SAFETY: valid out-pointer, live pool and stream of this context.
        let r = unsafe {
            drv_sys::cuMemAllocFromPoolAsync(
                &mut ptr,
                bytes as usize,
                self.gpu.pool.0,
                self.gpu.stream.cu_stream(),
            )
        };
        let mut st = self.state();
        if r == drv_sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
            return Err(EpError::OutOfMemory {
                requested: size,
                in_use: st.stats.in_use_bytes,
                limit: self.info.total_bytes,
            });
        }
        r.result().map_err(device_err("cuMemAllocFromPoolAsync"))?;
        // SAFETY: `ptr` is a fresh allocation of `bytes` bytes on this stream's
        // context; the slice takes ownership and frees it (stream-ordered) on drop.
        let slice = unsafe { self.gpu.stream.upgrade_device_ptr::<u8>(ptr, bytes as usize) };
        let id = st.next_id;
        st.next_id += 1;
        st.buffers.insert(id, Entry { _slice: slice, ptr, size });
        st.stats.in_use_bytes += size;
        st.stats.peak_bytes = st.stats.peak_bytes.max(st.stats.in_use_bytes);
        st.stats.allocations += 1;
        Ok(DeviceBuffer { device: self.device(), id, size, align: 256 })
    }

    fn deallocate(&self, buffer: DeviceBuffer) -> Result<(), EpError> {
        let entry = {
            let mut st = self.state();
            Self::entry(&st, &buffer, self.device())?;
            let e = st.buffers.remove(&buffer.id).expect("checked above");
            st.stats.in_use_bytes -= e.size;
            st.stats.frees += 1;
            e
        };
        // Dropping the slice queues cuMemFreeAsync behind every launch already
        // on the stream, so the memory is reused only after its last reader.
        drop(entry);
        Ok(())
    }

    fn upload(&self, buffer: DeviceBuffer, data: &[u8]) -> Result<(), EpError> {
        let ptr = {
            let st = self.state();
            let e = Self::entry(&st, &buffer, self.device())?;
            if data.len() as u64 > e.size {
                return Err(EpError::OutOfBounds {
                    offset: 0,
                    len: data.len() as u64,
                    size: e.size,
                });
            }
            e.ptr
        };
        if data.is_empty() {
            return Ok(());
        }
        self.gpu.ctx.bind_to_thread().map_err(device_err("binding the CUDA context"))?;
        // SAFETY: `ptr` holds at least `data.len()` bytes (checked above).
        // `data` is pageable host memory, which the driver stages into pinned
        // memory before the call returns, so the copy stays ordered on the
        // stream without a synchronization and `data` may be dropped at once.
        unsafe { drv::memcpy_htod_async(ptr, data, self.gpu.stream.cu_stream()) }
            .map_err(device_err("copying to the device"))
    }

    fn download(
        &self,
        buffer: DeviceBuffer,
        len: usize,
    ) -> BoxFuture<'_, Result<Vec<u8>, EpError>> {
        let r = (|| {
            let ptr = {
                let st = self.state();
                let e = Self::entry(&st, &buffer, self.device())?;
                if len as u64 > e.size {
                    return Err(EpError::OutOfBounds { offset: 0, len: len as u64, size: e.size });
                }
                e.ptr
            };
            let mut out = vec![0u8; len];
            if len > 0 {
                self.gpu.ctx.bind_to_thread().map_err(device_err("binding the CUDA context"))?;
                // SAFETY: `ptr` holds at least `len` bytes; `out` is `len` bytes.
                unsafe { drv::memcpy_dtoh_async(&mut out, ptr, self.gpu.stream.cu_stream()) }
                    .map_err(device_err("copying to the host"))?;
            }
            self.gpu.synchronize_and_check()?;
            Ok(out)
        })();
        Box::pin(std::future::ready(r))
    }

    fn copy(&self, src: DeviceBuffer, dst: DeviceBuffer, len: u64) -> Result<(), EpError> {
        let (s, d) = {
            let st = self.state();
            let me = self.device();
            let (s, d) = (Self::entry(&st, &src, me)?, Self::entry(&st, &dst, me)?);
            if len > s.size || len > d.size {
                return Err(EpError::OutOfBounds { offset: 0, len, size: s.size.min(d.size) });
            }
            (s.ptr, d.ptr)
        };
        if len == 0 {
            return Ok(());
        }
        self.gpu.ctx.bind_to_thread().map_err(device_err("binding the CUDA context"))?;
        // SAFETY: both buffers hold at least `len` bytes (checked above).
        unsafe { drv::memcpy_dtod_async(d, s, len as usize, self.gpu.stream.cu_stream()) }
            .map_err(device_err("copying on the device"))
    }

    fn supports_op(&self, domain: &str, op_type: &str) -> bool {
        self.registry.contains(domain, op_type)
    }

    /// Attention keeps its scores on chip and SkipLayerNormalization adds and
    /// normalizes in one pass: both beat their chains here (as the folded
    /// Conv and Gelu do everywhere).
    fn prefers_fused(&self, _domain: &str, op_type: &str) -> bool {
        matches!(op_type, "Gelu" | "Conv" | "Attention" | "SkipLayerNormalization")
    }

    fn prepare(&self, spec: &KernelSpec<'_>) -> Result<KernelId, EpError> {
        let kernel = self.registry.build(spec)?;
        let mut kernels = self.kernels.write().unwrap_or_else(|p| p.into_inner());
        kernels.push(kernel);
        Ok(KernelId(kernels.len() as u32 - 1))
    }

    fn launch(&self, kernel: KernelId, args: &Launch<'_>) -> Result<(), EpError> {
        let kernels = self.kernels.read().unwrap_or_else(|p| p.into_inner());
        let k = kernels.get(kernel.0 as usize).ok_or(EpError::UnknownKernel(kernel))?;
        let in_ptrs = self.addresses(args.inputs)?;
        let out_ptrs = self.addresses(args.outputs)?;
        let io = Io {
            inputs: args.inputs,
            outputs: args.outputs,
            values: args.values,
            in_ptrs: &in_ptrs,
            out_ptrs: &out_ptrs,
        };
        self.gpu.ctx.bind_to_thread().map_err(device_err("binding the CUDA context"))?;
        k.launch(&self.gpu, &io)
    }

    fn supports_in_place(&self, kernel: KernelId) -> bool {
        let kernels = self.kernels.read().unwrap_or_else(|p| p.into_inner());
        kernels.get(kernel.0 as usize).is_some_and(|k| k.in_place())
    }

    fn synchronize(&self) -> BoxFuture<'_, Result<(), EpError>> {
        let r = self.gpu.synchronize_and_check();
        Box::pin(std::future::ready(r))
    }

    fn memory_stats(&self) -> MemoryStats {
        let st = self.state();
        let reserved = self.gpu.pool.get(CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
        MemoryStats { reserved_bytes: reserved + crate::gpu::BLAS_WORKSPACE as u64, ..st.stats }
    }

    fn reset_peak(&self) {
        let mut st = self.state();
        st.stats.peak_bytes = st.stats.in_use_bytes;
    }
}

impl Drop for CudaProvider {
    fn drop(&mut self) {
        // Free every buffer still held (stream-ordered), then wait so the pool
        // is empty when it is destroyed.
        self.state().buffers.clear();
        let _ = self.gpu.stream.synchronize();
    }
}
