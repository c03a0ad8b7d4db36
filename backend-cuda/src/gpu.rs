//! The device side of the provider: context, stream, memory pool, loaded
//! modules and the cuBLAS and cuBLASLt handles, with the launch helpers kernels use.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use cudarc::cublas::CudaBlas;
use cudarc::driver::sys::{CUmemPool_attribute, CUmemoryPool};
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream, LaunchConfig};
use cudarc::driver::{DriverError, result as drv, sys as drv_sys};
use onyx_core::ep::EpError;
use onyx_kernels::Kernel;

use crate::compile;

/// Bytes of cuBLAS workspace per provider.
pub(crate) const BLAS_WORKSPACE: usize = 32 << 20;

/// Threads per block for the grid-stride kernels.
pub(crate) const BLOCK: u32 = 256;

pub(crate) fn device_err(what: &str) -> impl Fn(DriverError) -> EpError + '_ {
    move |e| EpError::Device(format!("{what}: {e}"))
}

/// A stream-ordered memory pool owned by one provider, so its reserved and
/// used figures are this provider's alone.
pub(crate) struct Pool(pub CUmemoryPool);

// SAFETY: a CUmemoryPool handle may be used from any thread; the driver synchronizes.
unsafe impl Send for Pool {}
// SAFETY: as above.
unsafe impl Sync for Pool {}

impl Pool {
    pub fn new(device: drv_sys::CUdevice, release_threshold: u64) -> Result<Self, EpError> {
        // SAFETY: CUmemPoolProps is a plain C struct for which all-zero bytes
        // mean "defaults" (no handle export, no reserved fields set).
        let mut props: drv_sys::CUmemPoolProps = unsafe { std::mem::zeroed() };
        props.allocType = drv_sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        props.location.type_ = drv_sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        props.location.id = device;
        // SAFETY: `props` is a fully initialized pool description.
        let pool = unsafe { drv::mem_pool::create(&props) }
            .map_err(device_err("creating a CUDA memory pool"))?;
        let pool = Pool(pool);
        pool.set(CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, release_threshold)?;
        Ok(pool)
    }

    pub fn get(&self, attr: CUmemPool_attribute) -> u64 {
        let mut v: u64 = 0;
        // SAFETY: the pool is live; these attributes are 64-bit values.
        let r = unsafe { drv::mem_pool::get_attribute(self.0, attr, (&mut v as *mut u64).cast()) };
        r.map(|()| v).unwrap_or(0)
    }

    pub fn set(&self, attr: CUmemPool_attribute, mut v: u64) -> Result<(), EpError> {
        // SAFETY: the pool is live; these attributes are 64-bit values.
        unsafe { drv::mem_pool::set_attribute(self.0, attr, (&mut v as *mut u64).cast()) }
            .map_err(device_err("setting a memory-pool attribute"))
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // SAFETY: the pool is live; the driver defers destruction until
        // outstanding allocations (freed asynchronously) are returned.
        let _ = unsafe { drv::mem_pool::destroy(self.0) };
    }
}

/// Everything kernels need to run on the device.
pub(crate) struct Gpu {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub pool: Pool,
    pub cc: (i32, i32),
    pub sms: u32,
    pub allow_tf32: bool,
    pub blas: CudaBlas,
    /// cuBLASLt, for GEMMs that add a bias in their epilogue.
    pub lt: crate::lt::Lt,
    /// The workspace's address, shared by cuBLAS and cuBLASLt (both queue on
    /// the one stream, so their uses never overlap).
    pub blas_workspace: u64,
    /// cuBLAS's workspace (Hopper kernels want 32 MiB), outside the pool so
    /// the pool's figures stay the model's own.
    _blas_workspace: cudarc::driver::CudaSlice<u8>,
    modules: Mutex<HashMap<Kernel, Arc<CudaModule>>>,
    functions: Mutex<HashMap<(Kernel, &'static str), CudaFunction>>,
    /// Addresses of the `onyx_fault` words of loaded modules that raise faults.
    faults: Mutex<Vec<u64>>,
}

impl Gpu {
    pub fn new(
        ctx: Arc<CudaContext>,
        sms: u32,
        cc: (i32, i32),
        release_threshold: u64,
        allow_tf32: bool,
    ) -> Result<Self, EpError> {
        // One stream per provider: ordering, not events, keeps buffers safe,
        // so cudarc's per-slice event tracking is pure overhead.
        // SAFETY: every buffer of this context is used on this provider's one stream.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().map_err(device_err("creating a CUDA stream"))?;
        let pool = Pool::new(ctx.cu_device(), release_threshold)?;
        let blas = CudaBlas::new(stream.clone())
            .map_err(|e| EpError::Device(format!("creating a cuBLAS handle: {e:?}")))?;
        // SAFETY: the workspace is scratch for cuBLAS; its contents never matter.
        let workspace = unsafe { stream.alloc::<u8>(BLAS_WORKSPACE) }
            .map_err(device_err("allocating the cuBLAS workspace"))?;
        let ptr = cudarc::driver::DevicePtr::device_ptr(&workspace, &stream).0;
        // SAFETY: the handle is live and the workspace outlives it (both are
        // fields of this struct; the handle is dropped first, declared first).
        unsafe {
            cudarc::cublas::sys::cublasSetWorkspace_v2(
                *blas.handle(),
                ptr as *mut std::ffi::c_void,
                BLAS_WORKSPACE,
            )
        }
        .result()
        .map_err(|e| EpError::Device(format!("setting the cuBLAS workspace: {e:?}")))?;
        let lt = crate::lt::Lt::new()?;
        Ok(Gpu {
            ctx,
            stream,
            pool,
            cc,
            sms,
            allow_tf32,
            blas,
            lt,
            blas_workspace: ptr,
            _blas_workspace: workspace,
            modules: Mutex::new(HashMap::new()),
            functions: Mutex::new(HashMap::new()),
            faults: Mutex::new(Vec::new()),
        })
    }

    /// A kernel entry point, compiling and loading its file on first use.
    pub fn function(&self, kernel: Kernel, name: &'static str) -> Result<CudaFunction, EpError> {
        let mut fns = self.functions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = fns.get(&(kernel, name)) {
            return Ok(f.clone());
        }
        let module = {
            let mut mods = self.modules.lock().unwrap_or_else(|p| p.into_inner());
            match mods.get(&kernel) {
                Some(m) => m.clone(),
                None => {
                    let cubin = compile::cubin_cached(kernel, self.cc.0, self.cc.1)
                        .map_err(|e| EpError::Device(e.to_string()))?;
                    let m = self
                        .ctx
                        .load_module(cudarc::nvrtc::Ptx::from_binary(cubin))
                        .map_err(device_err(kernel.file()))?;
                    if kernel.source().contains("raise_fault(") {
                        let word = m
                            .get_global("onyx_fault", &self.stream)
                            .map_err(device_err("finding a module's fault word"))?;
                        let ptr = cudarc::driver::DevicePtr::device_ptr(&word, &self.stream).0;
                        self.faults.lock().unwrap_or_else(|p| p.into_inner()).push(ptr);
                    }
                    mods.insert(kernel, m.clone());
                    m
                }
            }
        };
        let f = module
            .load_function(name)
            .map_err(|e| EpError::Device(format!("{} has no kernel {name}: {e}", kernel.file())))?;
        fns.insert((kernel, name), f.clone());
        Ok(f)
    }

    /// Waits for the stream, then reads and clears every module's fault word.
    ///
    /// # Errors
    /// [`EpError::Kernel`] when a kernel found bad data since the last check;
    /// [`EpError::Device`] for a driver failure.
    pub fn synchronize_and_check(&self) -> Result<(), EpError> {
        self.stream.synchronize().map_err(device_err("synchronizing"))?;
        self.ctx.check_err().map_err(device_err("a CUDA call failed"))?;
        let faults = self.faults.lock().unwrap_or_else(|p| p.into_inner());
        let mut raised = 0u32;
        for &ptr in faults.iter() {
            let mut word = [0u32; 1];
            // SAFETY: `ptr` is a live module global of 4 bytes (the module is
            // kept in `modules` for the provider's life); the stream is idle.
            unsafe {
                drv::memcpy_dtoh_sync(&mut word, ptr)
                    .and_then(|()| drv::memset_d8_sync(ptr, 0, 4))
                    .map_err(device_err("reading a fault word"))?;
            }
            raised |= word[0];
        }
        if raised & 1 != 0 {
            return Err(EpError::Kernel(
                "a gather index was out of range on the GPU; the run's results are invalid".into(),
            ));
        }
        if raised & 2 != 0 {
            return Err(EpError::Kernel(
                "a KV cache length (seqlens_k) or a rotary position was outside the cache \
                 buffers on the GPU; the run's results are invalid"
                    .into(),
            ));
        }
        Ok(())
    }

    /// A grid for a grid-stride loop over `n` items: enough blocks to fill the
    /// GPU several times over, never one per item for huge tensors.
    pub fn grid(&self, n: u64) -> LaunchConfig {
        let blocks = n.div_ceil(BLOCK as u64).clamp(1, self.sms as u64 * 32) as u32;
        LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (BLOCK, 1, 1), shared_mem_bytes: 0 }
    }
}

/// Arguments of one kernel launch, kept alive until the launch is queued.
pub(crate) struct Args {
    words: Vec<Box<dyn std::any::Any>>,
}

/// Pushes `value` into a launch as one kernel parameter.
pub(crate) trait Arg: cudarc::driver::DeviceRepr + 'static {}
impl<T: cudarc::driver::DeviceRepr + 'static> Arg for T {}

impl Args {
    pub fn new() -> Self {
        Args { words: Vec::new() }
    }

    /// Adds a parameter (a device pointer as `u64`, a scalar, or a `#[repr(C)]` struct).
    pub fn push<T: Arg>(mut self, value: T) -> Self {
        self.words.push(Box::new(value));
        self
    }

    /// Queues `f` on the stream with these parameters.
    ///
    /// # Safety
    /// The parameters must match the kernel's signature in type and order, and
    /// every pointer must name a live buffer large enough for what the kernel touches.
    pub unsafe fn launch(
        &self,
        gpu: &Gpu,
        f: &CudaFunction,
        cfg: LaunchConfig,
    ) -> Result<(), EpError> {
        if cfg.grid_dim.0 == 0 || cfg.grid_dim.1 == 0 || cfg.grid_dim.2 == 0 {
            return Ok(());
        }
        let mut ptrs: Vec<*mut std::ffi::c_void> = self
            .words
            .iter()
            .map(|w| (w.as_ref() as *const dyn std::any::Any).cast::<std::ffi::c_void>().cast_mut())
            .collect();
        // SAFETY: the caller guarantees the parameters match the kernel;
        // each pointer addresses a boxed value that outlives the call.
        unsafe {
            drv::launch_kernel(
                f.cu_function(),
                cfg.grid_dim,
                cfg.block_dim,
                cfg.shared_mem_bytes,
                gpu.stream.cu_stream(),
                &mut ptrs,
            )
        }
        .map_err(device_err("launching a kernel"))
    }
}
