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
use cudarc::driver::sys::{CUgraphMem_attribute, CUmemPool_attribute};
use cudarc::driver::{result as drv, sys as drv_sys};
use onyx_core::ep::{
    BoxFuture, CaptureId, DeviceBuffer, DeviceId, DeviceKind, EpError, ExecutionProvider, Fusions,
    KernelId, KernelSpec, Launch, MemoryStats,
};

use crate::device::{self, DeviceInfo};
use crate::gpu::{Gpu, device_err};
use crate::kernels::{CudaKernel, Io, Registry};
use crate::record::{Capture, Gate, Graph, Pinned, Recorded};

mod driver;
pub use driver::DriverMemory;

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
    /// The recording in progress (see `record.rs`).
    capture: Option<Capture>,
    recorded: HashMap<u32, Recorded>,
    next_capture: u32,
}

impl State {
    /// Drops a buffer's entry without freeing its memory (which belongs to a
    /// recording), keeping the accounting right.
    fn forget(&mut self, id: u64) -> Option<(u64, u64)> {
        let e = self.buffers.remove(&id)?;
        self.stats.in_use_bytes -= e.size;
        self.stats.frees += 1;
        let (ptr, size) = (e.ptr, e.size);
        let _ = e._slice.leak();
        Some((ptr, size))
    }

    /// Ends the recording in progress: the entries of `outputs` and of every
    /// other buffer allocated while recording are forgotten without freeing
    /// (the memory is the graph's). Returns the recording, the outputs'
    /// addresses and sizes (for those allocated while recording), and how
    /// many other buffers allocated while recording were still held: a run
    /// that frees at last use leaves none.
    fn finish_capture(&mut self, outputs: &[DeviceBuffer]) -> (Capture, Vec<(u64, u64)>, usize) {
        let capture = self.capture.take().unwrap_or_default();
        let kept = outputs
            .iter()
            .filter(|b| capture.allocated.contains(&b.id))
            .filter_map(|b| self.forget(b.id))
            .collect();
        let left = capture.allocated.iter().filter(|id| self.forget(**id).is_some()).count();
        (capture, kept, left)
    }

    /// Adds a table entry owning `ptr` (freed stream-ordered when the entry goes).
    fn adopt(&mut self, gpu: &Gpu, ptr: u64, size: u64, bytes: u64) -> u64 {
        // SAFETY: `ptr` is a live allocation of `bytes` bytes on this stream's
        // context that nothing else frees; the slice takes ownership.
        let slice = unsafe { gpu.stream.upgrade_device_ptr::<u8>(ptr, bytes as usize) };
        let id = self.next_id;
        self.next_id += 1;
        self.buffers.insert(id, Entry { _slice: slice, ptr, size });
        self.stats.in_use_bytes += size;
        self.stats.peak_bytes = self.stats.peak_bytes.max(self.stats.in_use_bytes);
        self.stats.allocations += 1;
        id
    }
}

/// Bytes a pool allocation of `size` takes: rounded up so vectorized
/// kernels may touch whole 16-byte words.
fn padded(size: u64) -> u64 {
    size.div_ceil(16).max(1) * 16
}

/// The CUDA backend.
pub struct CudaProvider {
    gpu: Gpu,
    info: DeviceInfo,
    state: Mutex<State>,
    registry: Registry,
    kernels: RwLock<Vec<Box<dyn CudaKernel>>>,
    gate: Gate,
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
                capture: None,
                recorded: HashMap::new(),
                next_capture: 0,
            }),
            registry: crate::kernels::standard(cc),
            kernels: RwLock::new(Vec::new()),
            gate: Gate::default(),
        })
    }

    /// What the GPU is (free memory as of opening).
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many recorded runs this provider holds.
    pub fn recordings(&self) -> usize {
        self.state().recorded.len()
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
        let _pass = self.gate.pass();
        let bytes = padded(size);
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
        // While recording this is a graph allocation node, owned by the graph.
        let id = st.adopt(&self.gpu, ptr, size, bytes);
        if let Some(c) = st.capture.as_mut() {
            c.allocated.insert(id);
        }
        Ok(DeviceBuffer { device: self.device(), id, size, align: 256 })
    }

    fn deallocate(&self, buffer: DeviceBuffer) -> Result<(), EpError> {
        let _pass = self.gate.pass();
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
        let _pass = self.gate.pass();
        let ptr = {
            let mut st = self.state();
            let e = Self::entry(&st, &buffer, self.device())?;
            if data.len() as u64 > e.size {
                return Err(EpError::OutOfBounds {
                    offset: 0,
                    len: data.len() as u64,
                    size: e.size,
                });
            }
            let ptr = e.ptr;
            st.stats.uploaded_bytes += data.len() as u64;
            ptr
        };
        if data.is_empty() {
            return Ok(());
        }
        self.gpu.ctx.bind_to_thread().map_err(device_err("binding the CUDA context"))?;
        if self.gate.mine() {
            // A recorded copy reads its source at every replay: keep the bytes
            // page-locked for as long as the recording lives.
            let pinned = Pinned::copy_of(data)?;
            // SAFETY: `ptr` holds at least `data.len()` bytes (checked above), and
            // `pinned` holds exactly `data.len()` bytes.
            unsafe { pinned.copy_to(ptr, data.len(), self.gpu.stream.cu_stream()) }?;
            if let Some(c) = self.state().capture.as_mut() {
                c.staged.push(pinned);
            }
            return Ok(());
        }
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
        self.download_range(buffer, 0, len)
    }

    fn download_range(
        &self,
        buffer: DeviceBuffer,
        offset: u64,
        len: usize,
    ) -> BoxFuture<'_, Result<Vec<u8>, EpError>> {
        let r = (|| {
            let _pass = self.gate.pass();
            if self.gate.mine() {
                return Err(EpError::Unsupported("reading back while recording a run".into()));
            }
            let ptr = {
                let mut st = self.state();
                let e = Self::entry(&st, &buffer, self.device())?;
                if offset.checked_add(len as u64).is_none_or(|end| end > e.size) {
                    return Err(EpError::OutOfBounds { offset, len: len as u64, size: e.size });
                }
                let ptr = e.ptr + offset;
                st.stats.downloaded_bytes += len as u64;
                ptr
            };
            // Uninitialized: zeroing megabytes of output that the copy overwrites
            // costs a pass over host memory per run.
            let mut out = Vec::<u8>::with_capacity(len);
            if len > 0 {
                self.gpu.ctx.bind_to_thread().map_err(device_err("binding the CUDA context"))?;
                // SAFETY: `ptr` (the buffer's address plus `offset`) holds at least
                // `len` bytes (checked above); `out` has capacity for `len` bytes,
                // and its length is set only after the copy has finished.
                unsafe {
                    drv_sys::cuMemcpyDtoHAsync_v2(
                        out.as_mut_ptr().cast(),
                        ptr,
                        len,
                        self.gpu.stream.cu_stream(),
                    )
                }
                .result()
                .map_err(device_err("copying to the host"))?;
            }
            self.gpu.synchronize_and_check()?;
            // SAFETY: the stream is idle and error-free, so the copy wrote all `len` bytes.
            unsafe { out.set_len(len) };
            Ok(out)
        })();
        Box::pin(std::future::ready(r))
    }

    fn copy(&self, src: DeviceBuffer, dst: DeviceBuffer, len: u64) -> Result<(), EpError> {
        let _pass = self.gate.pass();
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

    /// Attention keeps its scores on chip, SkipLayerNormalization adds and
    /// normalizes in one pass, BiasGelu adds the bias in Gelu's pass and a
    /// Gemm adds its bias in cuBLASLt's epilogue: all beat their chains here
    /// (as the folded Conv and Gelu do everywhere).
    fn fusions(&self) -> Fusions {
        // The CPU and wgpu keep attention and the skip norms as chains: their
        // kernels for the fused ops are references, slower than the chains'.
        Fusions {
            conv_batch_norm: true,
            gelu: true,
            bias_gelu: true,
            attention: true,
            skip_layer_norm: true,
            biased_gemm: true,
            conv_activation: false,
            gated_matmul_nbits: self.supports_op(onyx_core::graph::ONYX_DOMAIN, "GatedMatMulNBits"),
        }
    }

    fn prepare(&self, spec: &KernelSpec<'_>) -> Result<KernelId, EpError> {
        let kernel = self.registry.build(spec)?;
        let mut kernels = self.kernels.write().unwrap_or_else(|p| p.into_inner());
        kernels.push(kernel);
        Ok(KernelId(kernels.len() as u32 - 1))
    }

    fn launch(&self, kernel: KernelId, args: &Launch<'_>) -> Result<(), EpError> {
        let _pass = self.gate.pass();
        let kernels = self.kernels.read().unwrap_or_else(|p| p.into_inner());
        let k = kernels.get(kernel.0 as usize).ok_or(EpError::UnknownKernel(kernel))?;
        let in_ptrs = self.addresses(args.inputs)?;
        let out_ptrs = self.addresses(args.outputs)?;
        let io = Io { launch: *args, in_ptrs: &in_ptrs, out_ptrs: &out_ptrs };
        self.gpu.ctx.bind_to_thread().map_err(device_err("binding the CUDA context"))?;
        k.launch(&self.gpu, &io)
    }

    fn supports_in_place(&self, kernel: KernelId) -> bool {
        let kernels = self.kernels.read().unwrap_or_else(|p| p.into_inner());
        kernels.get(kernel.0 as usize).is_some_and(|k| k.in_place())
    }

    fn synchronize(&self) -> BoxFuture<'_, Result<(), EpError>> {
        let _pass = self.gate.pass();
        let r = if self.gate.mine() {
            Err(EpError::Unsupported("synchronizing while recording a run".into()))
        } else {
            self.gpu.synchronize_and_check()
        };
        Box::pin(std::future::ready(r))
    }

    fn memory_stats(&self) -> MemoryStats {
        let st = self.state();
        let reserved = self.gpu.pool.get(CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
        let graphs = if st.recorded.is_empty() {
            0
        } else {
            self.graph_memory(CUgraphMem_attribute::CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT)
        };
        MemoryStats {
            reserved_bytes: reserved + graphs + crate::gpu::BLAS_WORKSPACE as u64,
            ..st.stats
        }
    }

    fn reset_peak(&self) {
        let mut st = self.state();
        st.stats.peak_bytes = st.stats.in_use_bytes;
    }

    fn supports_capture(&self) -> bool {
        true
    }

    fn begin_capture(&self) -> Result<(), EpError> {
        self.gate.close()?;
        self.state().capture = Some(Capture::default());
        // Relaxed: page-locked staging may be allocated while recording; the
        // gate keeps every other thread off the stream.
        let mode = drv_sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
        if let Err(e) = self.gpu.stream.begin_capture(mode) {
            self.state().capture = None;
            self.gate.open();
            return Err(EpError::Device(format!("starting a CUDA graph capture: {e}")));
        }
        Ok(())
    }

    fn end_capture(&self, outputs: &[DeviceBuffer]) -> Result<CaptureId, EpError> {
        if !self.gate.mine() {
            return Err(EpError::Unsupported("no recording in progress on this thread".into()));
        }
        let graph = self.gpu.stream.end_capture(drv_sys::CUgraphInstantiate_flags(0));
        let mut st = self.state();
        let (capture, kept, left) = st.finish_capture(outputs);
        if left > 0 {
            // A bug in the run, not in the model: say so where logs are read.
            log::warn!(
                "{left} buffers allocated while recording were neither freed nor outputs; \
                 the run is not recorded"
            );
            st.stats.recording_leaks += 1;
        }
        let result = match graph {
            Ok(Some(_)) if left > 0 => Err(EpError::Device(format!(
                "{left} buffers allocated while recording were neither freed nor outputs of the run; \
                 the recording is dropped"
            ))),
            Ok(Some(graph)) if kept.len() == outputs.len() => {
                let id = st.next_capture;
                st.next_capture += 1;
                let graph = Graph(graph);
                let rec =
                    Recorded { graph, outputs: kept, handed: Vec::new(), _staged: capture.staged };
                st.recorded.insert(id, rec);
                Ok(CaptureId(id))
            }
            Ok(Some(_)) => Err(EpError::UnknownBuffer {
                id: outputs
                    .iter()
                    .map(|b| b.id)
                    .find(|id| !capture.allocated.contains(id))
                    .unwrap_or(0),
                device: self.device(),
            }),
            Ok(None) => Err(EpError::Device("the CUDA graph capture recorded nothing".into())),
            Err(e) => Err(EpError::Device(format!("building a CUDA graph: {e}"))),
        };
        drop(st);
        if result.is_err() {
            // Frees queued against an invalidated capture record their errors: clear them.
            let _ = self.gpu.ctx.check_err();
        }
        self.gate.open();
        result
    }

    fn abort_capture(&self) {
        if !self.gate.mine() {
            return;
        }
        // SAFETY: this thread started the capture on this stream; the graph is destroyed unused.
        if let Ok(graph) = unsafe { drv::stream::end_capture(self.gpu.stream.cu_stream()) } {
            if !graph.is_null() {
                // SAFETY: a graph just returned by the capture, never instantiated.
                let _ = unsafe { drv::graph::destroy(graph) };
            }
        }
        // What the abandoned run still held (its outputs, or all of an
        // interrupted run) goes with the graph.
        let _ = self.state().finish_capture(&[]);
        let _ = self.gpu.ctx.check_err();
        self.gate.open();
    }

    fn replay(&self, capture: CaptureId) -> Result<Vec<DeviceBuffer>, EpError> {
        let _pass = self.gate.pass();
        self.gpu.ctx.bind_to_thread().map_err(device_err("binding the CUDA context"))?;
        let mut st = self.state();
        let st = &mut *st;
        let rec = st
            .recorded
            .get_mut(&capture.0)
            .ok_or_else(|| EpError::Unsupported(format!("unknown recording {}", capture.0)))?;
        if rec.handed.iter().any(|id| st.buffers.contains_key(id)) {
            return Err(EpError::Unsupported(
                "the outputs of this recording's last replay are still held".into(),
            ));
        }
        rec.graph.0.launch().map_err(device_err("launching a CUDA graph"))?;
        let outputs = rec.outputs.clone();
        let mut handed = Vec::with_capacity(outputs.len());
        let mut bufs = Vec::with_capacity(outputs.len());
        for (ptr, size) in outputs {
            // Freeing a graph's output outside the graph is what lets it run again.
            let id = st.adopt(&self.gpu, ptr, size, padded(size));
            handed.push(id);
            bufs.push(DeviceBuffer { device: self.device(), id, size, align: 256 });
        }
        if let Some(rec) = st.recorded.get_mut(&capture.0) {
            rec.handed = handed;
        }
        Ok(bufs)
    }

    fn free_capture(&self, capture: CaptureId) -> Result<(), EpError> {
        let _pass = self.gate.pass();
        let rec = self
            .state()
            .recorded
            .remove(&capture.0)
            .ok_or_else(|| EpError::Unsupported(format!("unknown recording {}", capture.0)))?;
        // The graph may still be running: its page-locked sources must outlive it.
        self.gpu.stream.synchronize().map_err(device_err("synchronizing"))?;
        drop(rec);
        Ok(())
    }
}

impl Drop for CudaProvider {
    fn drop(&mut self) {
        // Let queued work (replays reading page-locked copies) finish, drop the
        // recordings, free every buffer still held (stream-ordered), then wait
        // so the pool is empty when it is destroyed.
        let _ = self.gpu.stream.synchronize();
        self.state().recorded.clear();
        self.state().buffers.clear();
        let _ = self.gpu.stream.synchronize();
    }
}
