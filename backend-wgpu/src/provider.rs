//! The wgpu execution provider.
//!
//! - **Buffers** live in a table keyed by the plain `DeviceBuffer` id.
//!   `deallocate` removes the buffer: it goes to a size-class pool (bounded by
//!   `pool_limit`) or is destroyed once commands recorded against it are
//!   submitted. `memory_stats` counts live bytes as in use and pooled ones as reserved.
//! - **Dispatches** of a run go into one command encoder, submitted when the
//!   host needs results (a download), before an upload (so `write_buffer`
//!   cannot overtake recorded work), or every few hundred dispatches.
//! - **Pipelines** are cached by (shader, entry point, override constants).
//! - **Errors** from wgpu's validation go to a sink and come back as `Err`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use onyx_core::ep::{
    BoxFuture, DeviceBuffer, DeviceId, DeviceKind, EpError, ExecutionProvider, KernelId,
    KernelSpec, Launch, MemoryStats,
};
use onyx_shaders::Shader;
use wgpu::util::DeviceExt;

use crate::context::{AdapterSummary, Gpu};
use crate::kernels::{Bind, Dispatch, GpuKernel, Grid, Io, Registry};

/// Dispatches recorded before a submit is forced.
const MAX_PENDING: usize = 256;
/// Invocations per workgroup for shaders with a `WG` override.
const WG: u64 = 256;
/// The most workgroups per grid dimension (WebGPU's default limit).
const MAX_GROUPS: u64 = 65535;

struct Entry {
    buffer: wgpu::Buffer,
    size: u64,
}

struct State {
    buffers: HashMap<u64, Entry>,
    /// Freed buffers kept for reuse, by padded size. Reusing one before the work
    /// that last read it is submitted is safe: passes of a queue run in order.
    pool: HashMap<u64, Vec<wgpu::Buffer>>,
    pool_bytes: u64,
    next_id: u64,
    stats: MemoryStats,
    /// Bytes of destroyed-but-not-yet-submitted buffers (still held on the device).
    graveyard_bytes: u64,
    encoder: Option<wgpu::CommandEncoder>,
    pending: usize,
    /// Buffers to destroy after the next submit: released tensors, params, dummies.
    graveyard: Vec<wgpu::Buffer>,
}

struct Pipeline {
    pipeline: wgpu::ComputePipeline,
    layout: wgpu::BindGroupLayout,
}

type PipelineKey = (Shader, &'static str, Vec<(&'static str, u64)>);

/// The pool's size class of a buffer of `padded` bytes, so freed buffers are
/// reused across nearby sizes: at most 1/8 larger above 4 KiB.
fn size_class(padded: u64) -> u64 {
    let step = (padded.next_power_of_two() / 16).max(256);
    padded.div_ceil(step) * step
}

/// Settings of a [`WgpuProvider`].
#[derive(Clone, Debug)]
pub struct WgpuOptions {
    /// Adapter index in enumeration order (`None`: the default high-performance adapter).
    pub adapter: Option<u32>,
    /// Bytes of freed buffers kept for reuse (0 destroys every freed buffer).
    pub pool_limit: u64,
}

impl Default for WgpuOptions {
    fn default() -> Self {
        WgpuOptions { adapter: None, pool_limit: 1 << 30 }
    }
}

/// The wgpu backend.
pub struct WgpuProvider {
    gpu: Gpu,
    ordinal: u32,
    pool_limit: u64,
    state: Mutex<State>,
    pipelines: Mutex<HashMap<PipelineKey, Arc<Pipeline>>>,
    registry: Registry,
    kernels: RwLock<Vec<Box<dyn GpuKernel>>>,
}

impl WgpuProvider {
    /// Opens the adapter and creates a device.
    ///
    /// # Errors
    /// [`EpError::Device`] when no adapter or device is available.
    pub async fn new(opts: WgpuOptions) -> Result<Self, EpError> {
        let gpu = Gpu::new(opts.adapter).await?;
        Ok(WgpuProvider {
            gpu,
            ordinal: opts.adapter.unwrap_or(0),
            pool_limit: opts.pool_limit,
            state: Mutex::new(State {
                buffers: HashMap::new(),
                pool: HashMap::new(),
                pool_bytes: 0,
                next_id: 1,
                stats: MemoryStats::default(),
                graveyard_bytes: 0,
                encoder: None,
                pending: 0,
                graveyard: Vec::new(),
            }),
            pipelines: Mutex::new(HashMap::new()),
            registry: crate::kernels::standard(),
            kernels: RwLock::new(Vec::new()),
        })
    }

    /// Blocking [`new`](Self::new) for native callers.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn new_blocking(opts: WgpuOptions) -> Result<Self, EpError> {
        pollster::block_on(Self::new(opts))
    }

    /// What the adapter is.
    pub fn adapter(&self) -> &AdapterSummary {
        &self.gpu.summary
    }

    /// Gives every pooled buffer back to the device (after any recorded work
    /// that may still use one is submitted).
    pub fn trim(&self) {
        let mut st = self.state();
        let pooled: Vec<wgpu::Buffer> = st.pool.drain().flat_map(|(_, b)| b).collect();
        st.pool_bytes = 0;
        if st.encoder.is_some() {
            st.graveyard_bytes += pooled.iter().map(wgpu::Buffer::size).sum::<u64>();
            st.graveyard.extend(pooled);
        } else {
            pooled.iter().for_each(wgpu::Buffer::destroy);
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Submits recorded work and destroys buffers released since the last submit.
    fn flush(&self, st: &mut State) -> Result<(), EpError> {
        if let Some(encoder) = st.encoder.take() {
            self.gpu.queue.submit([encoder.finish()]);
        }
        st.pending = 0;
        for b in st.graveyard.drain(..) {
            b.destroy();
        }
        st.graveyard_bytes = 0;
        self.gpu.take_errors()
    }

    fn entry<'s>(st: &'s State, b: &DeviceBuffer, device: DeviceId) -> Result<&'s Entry, EpError> {
        match st.buffers.get(&b.id) {
            Some(e) if b.device == device && e.size == b.size => Ok(e),
            _ => Err(EpError::UnknownBuffer { id: b.id, device: b.device }),
        }
    }

    fn pipeline(
        &self,
        shader: Shader,
        entry: &'static str,
        constants: &[(&'static str, f64)],
    ) -> Result<Arc<Pipeline>, EpError> {
        let key: PipelineKey =
            (shader, entry, constants.iter().map(|(n, v)| (*n, v.to_bits())).collect());
        let mut cache = self.pipelines.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = cache.get(&key) {
            return Ok(p.clone());
        }
        let device = &self.gpu.device;
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(shader.file()),
            source: wgpu::ShaderSource::Wgsl(shader.source().into()),
        });
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(shader.file()),
            layout: None,
            module: &module,
            entry_point: Some(entry),
            compilation_options: wgpu::PipelineCompilationOptions {
                constants,
                zero_initialize_workgroup_memory: false,
            },
            cache: None,
        });
        self.gpu
            .take_errors()
            .map_err(|e| EpError::Device(format!("building {} ({entry}): {e}", shader.file())))?;
        let layout = pipeline.get_bind_group_layout(0);
        let p = Arc::new(Pipeline { pipeline, layout });
        cache.insert(key, p.clone());
        Ok(p)
    }

    /// The workgroup grid for a dispatch: a 2-D grid past 65,535 workgroups.
    fn grid(grid: Grid) -> Result<(u32, u32), EpError> {
        let groups = match grid {
            Grid::Invocations(n) => n.div_ceil(WG),
            Grid::Workgroups(n) => n,
        };
        if groups == 0 {
            return Ok((0, 0));
        }
        let x = groups.min(MAX_GROUPS);
        let y = groups.div_ceil(x);
        if y > MAX_GROUPS {
            return Err(EpError::Unsupported(format!(
                "{groups} workgroups exceed a 65535 x 65535 grid"
            )));
        }
        Ok((x as u32, y as u32))
    }

    fn record(&self, d: &Dispatch, io: &Io<'_>) -> Result<(), EpError> {
        let (gx, gy) = Self::grid(d.grid)?;
        if gx == 0 {
            return Ok(());
        }
        let mut constants = d.constants.clone();
        // Row kernels dispatched by workgroup may pick their own size.
        if !matches!(d.shader, Shader::MatMul) && !constants.iter().any(|(n, _)| *n == "WG") {
            constants.push(("WG", WG as f64));
        }
        let pipeline = self.pipeline(d.shader, d.entry, &constants)?;
        let device = &self.gpu.device;
        let mut words = d.params.clone();
        if words.is_empty() {
            words.push(0);
        }
        let params = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("params"),
            contents: bytemuck::cast_slice(&words),
            usage: wgpu::BufferUsages::STORAGE,
        });
        let me = self.device();
        let max_binding = self.gpu.summary.max_binding;
        let mut st = self.state();
        let mut dummies = Vec::new();
        for (_, b) in &d.binds {
            if *b == Bind::Dummy {
                dummies.push(device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("dummy"),
                    size: 16,
                    usage: wgpu::BufferUsages::STORAGE,
                    mapped_at_creation: false,
                }));
            }
        }
        {
            let mut entries =
                vec![wgpu::BindGroupEntry { binding: 0, resource: params.as_entire_binding() }];
            let mut next_dummy = dummies.iter();
            for (slot, b) in &d.binds {
                let (buffer, size) = match b {
                    Bind::In(i) => {
                        let e = Self::entry(&st, &io.input(*i)?.buffer, me)?;
                        (&e.buffer, e.size)
                    }
                    Bind::Out(o) => {
                        let e = Self::entry(&st, &io.output(*o)?.buffer, me)?;
                        (&e.buffer, e.size)
                    }
                    Bind::Dummy => (next_dummy.next().expect("one dummy per Dummy binding"), 16),
                };
                // Bind the tensor's words only: a pooled buffer may be larger.
                let words = size.div_ceil(4).max(1) * 4;
                if words > max_binding {
                    return Err(EpError::Unsupported(format!(
                        "a {words}-byte tensor exceeds this device's {max_binding}-byte storage binding limit"
                    )));
                }
                entries.push(wgpu::BindGroupEntry {
                    binding: *slot,
                    resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                        buffer,
                        offset: 0,
                        size: wgpu::BufferSize::new(words),
                    }),
                });
            }
            let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &pipeline.layout,
                entries: &entries,
            });
            let encoder = st.encoder.get_or_insert_with(|| {
                device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("onyx run"),
                })
            });
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some(d.shader.file()),
                timestamp_writes: None,
            });
            pass.set_pipeline(&pipeline.pipeline);
            pass.set_bind_group(0, &group, &[]);
            pass.dispatch_workgroups(gx, gy, 1);
        }
        st.graveyard.push(params);
        st.graveyard.extend(dummies);
        st.pending += 1;
        self.gpu.take_errors()?;
        if st.pending >= MAX_PENDING {
            self.flush(&mut st)?;
        }
        Ok(())
    }

    /// Reads a buffer back (after all recorded work).
    async fn read(&self, buffer: DeviceBuffer, len: usize) -> Result<Vec<u8>, EpError> {
        let size = (len as u64).div_ceil(4) * 4;
        let staging = {
            let mut st = self.state();
            let device = &self.gpu.device;
            let src = Self::entry(&st, &buffer, self.device())?;
            if size > src.buffer.size() {
                return Err(EpError::OutOfBounds { offset: 0, len: len as u64, size: buffer.size });
            }
            let src = src.buffer.clone();
            let staging = device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("readback"),
                size: size.max(4),
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            if size > 0 {
                let encoder = st
                    .encoder
                    .get_or_insert_with(|| device.create_command_encoder(&Default::default()));
                encoder.copy_buffer_to_buffer(&src, 0, &staging, 0, size);
            }
            self.flush(&mut st)?;
            st.stats.downloaded_bytes += len as u64;
            staging
        };
        if size == 0 {
            staging.destroy();
            return Ok(Vec::new());
        }
        let slot: Arc<Mutex<MapState>> = Arc::new(Mutex::new(MapState::default()));
        let done = slot.clone();
        staging.slice(..).map_async(wgpu::MapMode::Read, move |r| {
            let mut s = done.lock().unwrap_or_else(|p| p.into_inner());
            s.result = Some(r.map_err(|e| e.to_string()));
            if let Some(w) = s.waker.take() {
                w.wake();
            }
        });
        #[cfg(not(target_arch = "wasm32"))]
        {
            let _ = self.gpu.device.poll(wgpu::PollType::wait_indefinitely());
        }
        MapFuture { slot }.await.map_err(|e| EpError::Device(format!("reading back: {e}")))?;
        let bytes = {
            let view = staging
                .slice(..)
                .get_mapped_range()
                .map_err(|e| EpError::Device(format!("reading back: {e}")))?;
            view[..len].to_vec()
        };
        staging.unmap();
        staging.destroy();
        self.gpu.take_errors()?;
        Ok(bytes)
    }
}

#[derive(Default)]
struct MapState {
    result: Option<Result<(), String>>,
    waker: Option<std::task::Waker>,
}

/// Resolves when a `map_async` (or queue completion) callback has fired.
struct MapFuture {
    slot: Arc<Mutex<MapState>>,
}

impl std::future::Future for MapFuture {
    type Output = Result<(), String>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let mut s = self.slot.lock().unwrap_or_else(|p| p.into_inner());
        match s.result.take() {
            Some(r) => std::task::Poll::Ready(r),
            None => {
                s.waker = Some(cx.waker().clone());
                std::task::Poll::Pending
            }
        }
    }
}

impl ExecutionProvider for WgpuProvider {
    fn name(&self) -> String {
        format!("wgpu:{}", self.ordinal)
    }

    fn device(&self) -> DeviceId {
        DeviceId { kind: DeviceKind::Wgpu, ordinal: self.ordinal }
    }

    fn allocate(&self, size: u64, align: u32) -> Result<DeviceBuffer, EpError> {
        let _ = align; // storage buffers are always suitably aligned.
        let padded = size.div_ceil(4).max(1) * 4;
        let mut st = self.state();
        if padded > self.gpu.summary.max_buffer {
            return Err(EpError::OutOfMemory {
                requested: size,
                in_use: st.stats.in_use_bytes,
                limit: self.gpu.summary.max_buffer,
            });
        }
        let class = match size_class(padded) {
            c if c > self.gpu.summary.max_buffer => padded,
            c => c,
        };
        let pooled = st.pool.get_mut(&class).and_then(Vec::pop);
        let buffer = match pooled {
            Some(b) => {
                st.pool_bytes -= class;
                b
            }
            None => {
                let b = self.gpu.device.create_buffer(&wgpu::BufferDescriptor {
                    label: None,
                    size: class,
                    usage: wgpu::BufferUsages::STORAGE
                        | wgpu::BufferUsages::COPY_SRC
                        | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                });
                self.gpu.take_errors()?;
                b
            }
        };
        let id = st.next_id;
        st.next_id += 1;
        st.buffers.insert(id, Entry { buffer, size });
        st.stats.in_use_bytes += size;
        st.stats.peak_bytes = st.stats.peak_bytes.max(st.stats.in_use_bytes);
        st.stats.allocations += 1;
        Ok(DeviceBuffer { device: self.device(), id, size, align: 4 })
    }

    fn deallocate(&self, buffer: DeviceBuffer) -> Result<(), EpError> {
        let mut st = self.state();
        Self::entry(&st, &buffer, self.device())?;
        let e = st.buffers.remove(&buffer.id).expect("checked above");
        st.stats.in_use_bytes -= e.size;
        st.stats.frees += 1;
        let padded = e.buffer.size();
        if st.pool_bytes + padded <= self.pool_limit {
            st.pool_bytes += padded;
            st.pool.entry(padded).or_default().push(e.buffer);
        } else if st.encoder.is_some() {
            // Recorded commands may still read it: destroy after they are submitted.
            st.graveyard_bytes += padded;
            st.graveyard.push(e.buffer);
        } else {
            e.buffer.destroy();
        }
        Ok(())
    }

    fn upload(&self, buffer: DeviceBuffer, data: &[u8]) -> Result<(), EpError> {
        let mut st = self.state();
        let e = Self::entry(&st, &buffer, self.device())?;
        if data.len() as u64 > e.size {
            return Err(EpError::OutOfBounds { offset: 0, len: data.len() as u64, size: e.size });
        }
        let target = e.buffer.clone();
        // write_buffer lands before every command buffer of the next submit, so
        // recorded work that reads this buffer must be submitted first.
        if st.encoder.is_some() {
            self.flush(&mut st)?;
        }
        if data.len() % 4 == 0 {
            self.gpu.queue.write_buffer(&target, 0, data);
        } else {
            let mut padded = data.to_vec();
            padded.resize(data.len().div_ceil(4) * 4, 0);
            self.gpu.queue.write_buffer(&target, 0, &padded);
        }
        st.stats.uploaded_bytes += data.len() as u64;
        self.gpu.take_errors()
    }

    fn download(
        &self,
        buffer: DeviceBuffer,
        len: usize,
    ) -> BoxFuture<'_, Result<Vec<u8>, EpError>> {
        Box::pin(self.read(buffer, len))
    }

    fn copy(&self, src: DeviceBuffer, dst: DeviceBuffer, len: u64) -> Result<(), EpError> {
        let mut st = self.state();
        let me = self.device();
        let (s, d) = (
            Self::entry(&st, &src, me)?.buffer.clone(),
            Self::entry(&st, &dst, me)?.buffer.clone(),
        );
        let size = len.div_ceil(4) * 4;
        if size > s.size() || size > d.size() {
            return Err(EpError::OutOfBounds { offset: 0, len, size: s.size().min(d.size()) });
        }
        if size > 0 {
            let device = &self.gpu.device;
            let encoder = st
                .encoder
                .get_or_insert_with(|| device.create_command_encoder(&Default::default()));
            encoder.copy_buffer_to_buffer(&s, 0, &d, 0, size);
        }
        Ok(())
    }

    fn supports_op(&self, domain: &str, op_type: &str) -> bool {
        self.registry.contains(domain, op_type)
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
        let io = Io { launch: *args, shader_f16: self.gpu.summary.shader_f16 };
        for d in k.dispatches(&io)? {
            self.record(&d, &io)?;
        }
        Ok(())
    }

    fn supports_in_place(&self, kernel: KernelId) -> bool {
        let kernels = self.kernels.read().unwrap_or_else(|p| p.into_inner());
        kernels.get(kernel.0 as usize).is_some_and(|k| k.in_place())
    }

    fn synchronize(&self) -> BoxFuture<'_, Result<(), EpError>> {
        let r = {
            let mut st = self.state();
            self.flush(&mut st)
        };
        #[cfg(not(target_arch = "wasm32"))]
        {
            let _ = self.gpu.device.poll(wgpu::PollType::wait_indefinitely());
            Box::pin(std::future::ready(r))
        }
        // In the browser nothing may block: wait for the queue's completion callback.
        #[cfg(target_arch = "wasm32")]
        {
            let slot: Arc<Mutex<MapState>> = Arc::new(Mutex::new(MapState::default()));
            let done = slot.clone();
            self.gpu.queue.on_submitted_work_done(move || {
                let mut s = done.lock().unwrap_or_else(|p| p.into_inner());
                s.result = Some(Ok(()));
                if let Some(w) = s.waker.take() {
                    w.wake();
                }
            });
            Box::pin(async move {
                r?;
                MapFuture { slot }.await.map_err(EpError::Device)
            })
        }
    }

    fn memory_stats(&self) -> MemoryStats {
        let st = self.state();
        let live: u64 = st.buffers.values().map(|e| e.buffer.size()).sum();
        MemoryStats { reserved_bytes: live + st.pool_bytes + st.graveyard_bytes, ..st.stats }
    }

    fn reset_peak(&self) {
        let mut st = self.state();
        st.stats.peak_bytes = st.stats.in_use_bytes;
    }
}

#[cfg(test)]
mod tests {
    use super::size_class;

    #[test]
    fn size_classes_round_up_by_at_most_an_eighth_above_4_kib() {
        for padded in (4096..1 << 22).step_by(4092) {
            let c = size_class(padded);
            assert!(c >= padded && c - padded <= padded / 8, "{padded} -> {c}");
        }
        assert_eq!(size_class(4), 256);
        assert_eq!(size_class(1 << 20), 1 << 20);
    }
}
