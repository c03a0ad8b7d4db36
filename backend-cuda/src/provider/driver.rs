//! The driver's own memory figures (the pool's and graphs' attributes,
//! `cuMemGetInfo`) and trimming the pool: what the release tests read to
//! check Onyx's bookkeeping against the device.

use cudarc::driver::sys::{CUgraphMem_attribute, CUmemPool_attribute};
use cudarc::driver::{result as drv, sys as drv_sys};
use onyx_core::ep::EpError;

use super::CudaProvider;
use crate::gpu::device_err;

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
    /// Bytes of recorded runs' intermediates and outputs in use on the device
    /// (`CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT`, for all graphs of this process on the device).
    pub graph_used: u64,
    /// Highest `graph_used` since the last [`CudaProvider::reset_driver_peaks`].
    pub graph_used_high: u64,
    /// Bytes the driver holds for graphs' memory (`RESERVED_MEM_CURRENT`).
    pub graph_reserved: u64,
    /// Free device memory (`cuMemGetInfo`).
    pub device_free: u64,
    /// Total device memory.
    pub device_total: u64,
}

impl CudaProvider {
    /// Waits for queued work, then returns every cached free byte of the pool to the device.
    ///
    /// # Errors
    /// A driver error.
    pub fn trim(&self) -> Result<(), EpError> {
        let _pass = self.gate.pass();
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
        let _pass = self.gate.pass();
        self.gpu.stream.synchronize().map_err(device_err("synchronizing"))?;
        let (free, total) = self.gpu.ctx.mem_get_info().map_err(device_err("cuMemGetInfo"))?;
        let p = &self.gpu.pool;
        Ok(DriverMemory {
            pool_used: p.get(CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_CURRENT),
            pool_used_high: p.get(CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH),
            pool_reserved: p.get(CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT),
            pool_reserved_high: p.get(CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH),
            graph_used: self.graph_memory(CUgraphMem_attribute::CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT),
            graph_used_high: self
                .graph_memory(CUgraphMem_attribute::CU_GRAPH_MEM_ATTR_USED_MEM_HIGH),
            graph_reserved: self
                .graph_memory(CUgraphMem_attribute::CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT),
            device_free: free as u64,
            device_total: total as u64,
        })
    }

    /// Restarts the driver's high-water marks of the pool.
    ///
    /// # Errors
    /// A driver error.
    pub fn reset_driver_peaks(&self) -> Result<(), EpError> {
        let _pass = self.gate.pass();
        self.gpu.stream.synchronize().map_err(device_err("synchronizing"))?;
        self.gpu.pool.set(CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH, 0)?;
        self.gpu.pool.set(CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, 0)?;
        let mut zero: u64 = 0;
        // SAFETY: a 64-bit attribute of this device; only the high-water marks may be reset.
        unsafe {
            drv_sys::cuDeviceSetGraphMemAttribute(
                self.gpu.ctx.cu_device(),
                CUgraphMem_attribute::CU_GRAPH_MEM_ATTR_USED_MEM_HIGH,
                (&mut zero as *mut u64).cast(),
            )
        }
        .result()
        .map_err(device_err("resetting the graph memory high-water mark"))
    }

    /// A graph-memory figure of this device (0 if the driver cannot say).
    pub(super) fn graph_memory(&self, attr: CUgraphMem_attribute) -> u64 {
        let mut v: u64 = 0;
        // SAFETY: these attributes are 64-bit values of this device.
        let r = unsafe {
            drv_sys::cuDeviceGetGraphMemAttribute(
                self.gpu.ctx.cu_device(),
                attr,
                (&mut v as *mut u64).cast(),
            )
        };
        if r == drv_sys::CUresult::CUDA_SUCCESS { v } else { 0 }
    }
}
