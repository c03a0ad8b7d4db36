//! Finding the CUDA libraries and devices without ever panicking.
//!
//! cudarc loads libcuda, libnvrtc and libcublas at run time and panics when a
//! library is missing, so every entry point checks presence first and turns
//! absence into an error that names the library.

use std::sync::Arc;

use cudarc::driver::CudaContext;
use onyx_core::ep::EpError;

/// What `onyx info --device cuda` prints about a GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Ordinal.
    pub ordinal: u32,
    /// Marketing name, e.g. "NVIDIA H200".
    pub name: String,
    /// Compute capability `(major, minor)`.
    pub compute_capability: (i32, i32),
    /// Free device memory in bytes.
    pub free_bytes: u64,
    /// Total device memory in bytes.
    pub total_bytes: u64,
    /// Streaming multiprocessors.
    pub multiprocessors: u32,
}

/// Checks that the driver, NVRTC, cuBLAS and cuBLASLt libraries can be loaded.
///
/// # Errors
/// [`EpError::Device`] naming the first missing library.
pub fn check_libraries() -> Result<(), EpError> {
    // SAFETY: each call only tries to dlopen a library under its usual names.
    let present = unsafe {
        [
            ("libcuda (the NVIDIA driver)", cudarc::driver::sys::is_culib_present()),
            ("libnvrtc (the CUDA run-time compiler)", cudarc::nvrtc::sys::is_culib_present()),
            ("libcublas", cudarc::cublas::sys::is_culib_present()),
            ("libcublasLt", cudarc::cublaslt::sys::is_culib_present()),
        ]
    };
    match present.iter().find(|(_, ok)| !ok) {
        Some((name, _)) => Err(EpError::Device(format!(
            "{name} was not found; install the NVIDIA driver and CUDA libraries, or put them on LD_LIBRARY_PATH"
        ))),
        None => Ok(()),
    }
}

/// The number of CUDA devices, after the library check.
///
/// # Errors
/// A missing library or a driver error (no device, driver too old).
pub fn device_count() -> Result<u32, EpError> {
    check_libraries()?;
    let n = CudaContext::device_count()
        .map_err(|e| EpError::Device(format!("the CUDA driver reports no usable device: {e}")))?;
    Ok(n.max(0) as u32)
}

/// Opens the primary context of GPU `ordinal`, or says why not.
///
/// # Errors
/// A missing library, a missing device (`cuda:7` on a one-GPU machine) or a driver error.
pub fn open(ordinal: u32) -> Result<Arc<CudaContext>, EpError> {
    let count = device_count()?;
    if ordinal >= count {
        return Err(EpError::Device(format!(
            "there is no CUDA device {ordinal}: this machine has {count}"
        )));
    }
    CudaContext::new(ordinal as usize)
        .map_err(|e| EpError::Device(format!("opening CUDA device {ordinal}: {e}")))
}

/// Describes a GPU.
///
/// # Errors
/// A missing library, a missing device or a driver error.
pub fn info(ordinal: u32) -> Result<DeviceInfo, EpError> {
    let ctx = open(ordinal)?;
    describe(&ctx, ordinal)
}

pub(crate) fn describe(ctx: &Arc<CudaContext>, ordinal: u32) -> Result<DeviceInfo, EpError> {
    let dev = |e: cudarc::driver::DriverError| EpError::Device(e.to_string());
    let (free, total) = ctx.mem_get_info().map_err(dev)?;
    let sms = ctx
        .attribute(
            cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
        )
        .map_err(dev)?;
    Ok(DeviceInfo {
        ordinal,
        name: ctx.name().map_err(dev)?,
        compute_capability: ctx.compute_capability().map_err(dev)?,
        free_bytes: free as u64,
        total_bytes: total as u64,
        multiprocessors: sms.max(1) as u32,
    })
}
