//! A provider for planner tests: every op is "supported", memory is only counted.

use std::sync::Mutex;

use crate::ep::{
    BoxFuture, DeviceBuffer, DeviceId, EpError, ExecutionProvider, KernelId, KernelSpec, Launch,
    MemoryStats,
};

#[derive(Default)]
pub struct NullProvider {
    state: Mutex<(u64, MemoryStats)>,
}

impl ExecutionProvider for NullProvider {
    fn name(&self) -> String {
        "null".into()
    }
    fn device(&self) -> DeviceId {
        DeviceId::CPU
    }
    fn allocate(&self, size: u64, align: u32) -> Result<DeviceBuffer, EpError> {
        let mut s = self.state.lock().unwrap();
        s.0 += 1;
        s.1.in_use_bytes += size;
        s.1.allocations += 1;
        Ok(DeviceBuffer { device: DeviceId::CPU, id: s.0, size, align })
    }
    fn deallocate(&self, buffer: DeviceBuffer) -> Result<(), EpError> {
        let mut s = self.state.lock().unwrap();
        s.1.in_use_bytes -= buffer.size;
        s.1.frees += 1;
        Ok(())
    }
    fn upload(&self, _: DeviceBuffer, _: &[u8]) -> Result<(), EpError> {
        Ok(())
    }
    fn download(&self, b: DeviceBuffer, len: usize) -> BoxFuture<'_, Result<Vec<u8>, EpError>> {
        let _ = b;
        Box::pin(std::future::ready(Ok(vec![0; len])))
    }
    fn copy(&self, _: DeviceBuffer, _: DeviceBuffer, _: u64) -> Result<(), EpError> {
        Ok(())
    }
    fn supports_op(&self, _: &str, _: &str) -> bool {
        true
    }
    fn prepare(&self, _: &KernelSpec<'_>) -> Result<KernelId, EpError> {
        Ok(KernelId(0))
    }
    fn launch(&self, _: KernelId, _: &Launch<'_>) -> Result<(), EpError> {
        Ok(())
    }
    fn synchronize(&self) -> BoxFuture<'_, Result<(), EpError>> {
        Box::pin(std::future::ready(Ok(())))
    }
    fn memory_stats(&self) -> MemoryStats {
        self.state.lock().unwrap().1
    }
    fn reset_peak(&self) {}
}
