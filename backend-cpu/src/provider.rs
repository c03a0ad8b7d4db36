//! The CPU execution provider.

use std::sync::{Mutex, MutexGuard, RwLock};

use onyx_core::ep::{
    BoxFuture, DeviceBuffer, DeviceId, EpError, ExecutionProvider, KernelId, KernelSpec, Launch,
    MemoryStats, TensorArg,
};

use crate::kernels::{CpuKernel, KernelIo, KernelRegistry, View};
use crate::storage::Storage;

/// Settings of a [`CpuProvider`].
#[derive(Clone, Debug)]
pub struct CpuOptions {
    /// Bytes of live buffers allowed; allocations beyond it fail with out-of-memory.
    pub memory_limit: u64,
    /// Bytes of freed blocks kept for reuse.
    pub cache_limit: usize,
}

impl Default for CpuOptions {
    fn default() -> Self {
        CpuOptions { memory_limit: u64::MAX, cache_limit: 256 << 20 }
    }
}

/// The reference backend: host memory from a pool, kernels registered per op family.
pub struct CpuProvider {
    storage: Mutex<Storage>,
    registry: KernelRegistry,
    kernels: RwLock<Vec<Box<dyn CpuKernel>>>,
}

impl Default for CpuProvider {
    fn default() -> Self {
        Self::new(CpuOptions::default())
    }
}

impl CpuProvider {
    /// A provider with the given options.
    pub fn new(opts: CpuOptions) -> Self {
        CpuProvider {
            storage: Mutex::new(Storage::new(opts.memory_limit, opts.cache_limit)),
            registry: crate::kernels::standard(),
            kernels: RwLock::new(Vec::new()),
        }
    }

    fn storage(&self) -> MutexGuard<'_, Storage> {
        self.storage.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Returns cached free blocks to the system.
    pub fn trim(&self) {
        self.storage().trim();
    }

    fn view(storage: &Storage, t: &TensorArg) -> Result<View, EpError> {
        let (ptr, size) = storage.resolve(&t.buffer)?;
        let need = t.dtype.byte_size(t.numel()).unwrap_or(0);
        if need > size {
            return Err(EpError::OutOfBounds { offset: 0, len: need as u64, size: size as u64 });
        }
        Ok(View::new(ptr, size, t.dtype, t.shape.clone()))
    }
}

impl ExecutionProvider for CpuProvider {
    fn name(&self) -> String {
        "cpu".into()
    }

    fn device(&self) -> DeviceId {
        DeviceId::CPU
    }

    fn allocate(&self, size: u64, align: u32) -> Result<DeviceBuffer, EpError> {
        self.storage().allocate(size, align)
    }

    fn deallocate(&self, buffer: DeviceBuffer) -> Result<(), EpError> {
        self.storage().deallocate(buffer)
    }

    fn arena_alignment(&self) -> Option<u64> {
        Some(crate::storage::MIN_ALIGN as u64)
    }

    fn allocate_arena(&self, size: u64) -> Result<DeviceBuffer, EpError> {
        self.storage().allocate_arena(size)
    }

    fn view(&self, arena: DeviceBuffer, offset: u64, size: u64) -> Result<DeviceBuffer, EpError> {
        self.storage().view(arena, offset, size)
    }

    fn upload(&self, buffer: DeviceBuffer, data: &[u8]) -> Result<(), EpError> {
        let mut storage = self.storage();
        let (ptr, size) = storage.resolve(&buffer)?;
        if data.len() > size {
            return Err(EpError::OutOfBounds {
                offset: 0,
                len: data.len() as u64,
                size: size as u64,
            });
        }
        // SAFETY: `ptr` addresses `size >= data.len()` live bytes; the lock keeps the
        // block alive, and `data` is host memory distinct from every pool block.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), ptr, data.len()) };
        storage.uploaded_bytes += data.len() as u64;
        Ok(())
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
        let result = (|| {
            let mut storage = self.storage();
            let (ptr, size) = storage.resolve(&buffer)?;
            let out_of_bounds =
                || EpError::OutOfBounds { offset, len: len as u64, size: size as u64 };
            let start = usize::try_from(offset).map_err(|_| out_of_bounds())?;
            if start.checked_add(len).is_none_or(|end| end > size) {
                return Err(out_of_bounds());
            }
            // SAFETY: `ptr` addresses `size >= start + len` live bytes while the lock is held.
            let bytes = unsafe { std::slice::from_raw_parts(ptr.add(start), len) }.to_vec();
            storage.downloaded_bytes += len as u64;
            Ok(bytes)
        })();
        Box::pin(std::future::ready(result))
    }

    fn copy(&self, src: DeviceBuffer, dst: DeviceBuffer, len: u64) -> Result<(), EpError> {
        let storage = self.storage();
        let (s, ssize) = storage.resolve(&src)?;
        let (d, dsize) = storage.resolve(&dst)?;
        let len = len as usize;
        if len > ssize || len > dsize {
            return Err(EpError::OutOfBounds {
                offset: 0,
                len: len as u64,
                size: ssize.min(dsize) as u64,
            });
        }
        // SAFETY: both blocks are live for `len` bytes; `copy` handles overlap (src == dst).
        unsafe { std::ptr::copy(s, d, len) };
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
        let mut io = {
            let storage = self.storage();
            let resolve = |ts: &[Option<TensorArg>]| -> Result<Vec<Option<View>>, EpError> {
                ts.iter().map(|t| t.as_ref().map(|t| Self::view(&storage, t)).transpose()).collect()
            };
            KernelIo {
                inputs: resolve(args.inputs)?,
                outputs: resolve(args.outputs)?,
                values: args.values.to_vec(),
            }
        };
        // The storage lock is released: kernels may run long and in parallel, and the
        // executor guarantees these buffers stay allocated until the launch returns.
        let kernels = self.kernels.read().unwrap_or_else(|p| p.into_inner());
        let k = kernels.get(kernel.0 as usize).ok_or(EpError::UnknownKernel(kernel))?;
        k.run(&mut io)
    }

    fn synchronize(&self) -> BoxFuture<'_, Result<(), EpError>> {
        Box::pin(std::future::ready(Ok(())))
    }

    fn memory_stats(&self) -> MemoryStats {
        self.storage().stats()
    }

    fn reset_peak(&self) {
        self.storage().reset_peak();
    }
}
