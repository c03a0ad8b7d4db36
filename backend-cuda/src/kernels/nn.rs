//! The softmax family (Softmax, LogSoftmax, Hardmax) and BatchNormalization
//! in inference mode, plus the row-kernel launch helpers that the layer norms
//! in `norm.rs` share.
//!
//! Contiguous softmax rows of up to [`WARP_ROW`] elements take one warp each,
//! held in registers (one read, one write); longer rows take a block each;
//! a softmax over a middle axis (`inner > 1`) takes one thread per row.

use cudarc::driver::LaunchConfig;
use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::nn::{BatchNorm, Softmax};
use onyx_kernels::Kernel;

use super::elementwise::entry;
use super::{CudaKernel, Io, Registry, is_float, unsupported};
use crate::gpu::{Args, Gpu};

/// The longest row one warp holds in registers (32 lanes × 32 slots).
pub(super) const WARP_ROW: usize = 1024;
/// Slots per lane of the warp-per-row entry points (`…_warp{N}_{dtype}`):
/// powers of two, and 12 and 24 for rows of 384 and 768 (32 lanes × N).
const SLOTS: [usize; 8] = [1, 2, 4, 8, 12, 16, 24, 32];
/// Threads of a warp-per-row block: four rows each.
const WARP_BLOCK: u32 = 128;
/// Threads of a block-per-row kernel; twice as many when rows are too few
/// to give every multiprocessor one.
const ROW_BLOCK: u32 = 512;
/// The most dynamic shared memory a block-per-row kernel caches its row in
/// (under the 48 KiB a launch may take without opting in).
const ROW_CACHE: usize = 40 * 1024;

/// How warp kernels hold rows of `len` (≤ [`WARP_ROW`]) elements of `width`
/// bytes: `slots` values per lane, `lanes` lanes per row (32 / lanes rows
/// share a warp), and whether rows move in 16-byte vectors.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct WarpPlan {
    pub slots: usize,
    pub lanes: usize,
    pub vec: bool,
}

/// The plan for rows of `len` elements of `width` bytes; `aligned`: every
/// buffer the row kernel touches starts on 16 bytes. Each lane holds at least
/// 32 bytes where the row allows (so enough loads are in flight), in the
/// fewest slots that cover the row (whole vectors when vectorized).
pub(super) fn warp_plan(len: usize, width: usize, aligned: bool) -> WarpPlan {
    let per = 16 / width;
    let vec = aligned && len % per == 0;
    let lanes = len.div_ceil(32 / width).max(1).next_power_of_two().min(32);
    let need = len.div_ceil(lanes);
    let slots = SLOTS.into_iter().find(|&n| n >= need && (!vec || n % per == 0)).unwrap_or(32);
    WarpPlan { slots, lanes, vec }
}

/// The warp-per-row entry points of one dtype, by slot count.
pub(super) struct WarpEntries([&'static str; 8]);

impl WarpEntries {
    /// `{prefix}{N}_{dtype}` for every slot count N.
    pub fn new(prefix: &str, dtype: DType) -> Result<Self, EpError> {
        let mut names = [""; 8];
        for (name, n) in names.iter_mut().zip(SLOTS) {
            *name = entry(&format!("{prefix}{n}"), dtype)?;
        }
        Ok(WarpEntries(names))
    }

    /// The entry point for `n` slots per lane (one of [`SLOTS`]).
    pub fn get(&self, n: usize) -> &'static str {
        self.0[SLOTS.iter().position(|&s| s == n).unwrap_or(SLOTS.len() - 1)]
    }
}

/// Whether every pointer is 16-byte aligned (absent ones, 0, are).
pub(super) fn aligned(ptrs: &[u64]) -> bool {
    ptrs.iter().all(|p| p % 16 == 0)
}

/// Bytes of the compute type of a float dtype (f64 computes in f64, the rest in f32).
pub(super) fn compute_bytes(dtype: DType) -> usize {
    if dtype == DType::F64 { 8 } else { 4 }
}

/// The launch shape of a warp kernel over `rows` rows of `lanes` lanes each.
pub(super) fn warp_grid(gpu: &Gpu, rows: usize, lanes: usize) -> LaunchConfig {
    let per = (WARP_BLOCK / 32) as usize * (32 / lanes);
    let blocks = rows.div_ceil(per).clamp(1, gpu.sms as usize * 32) as u32;
    LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (WARP_BLOCK, 1, 1), shared_mem_bytes: 0 }
}

/// The launch shape of a block-per-row kernel over `rows` rows of `len`,
/// and whether the row is cached in dynamic shared memory.
pub(super) fn row_grid(gpu: &Gpu, rows: usize, len: usize, dtype: DType) -> (LaunchConfig, bool) {
    let cache = len * compute_bytes(dtype);
    let cached = cache <= ROW_CACHE;
    let blocks = rows.clamp(1, gpu.sms as usize * 16) as u32;
    let threads = if rows < gpu.sms as usize { 2 * ROW_BLOCK } else { ROW_BLOCK };
    let shared = if cached { cache as u32 } else { 0 };
    let cfg = LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: shared,
    };
    (cfg, cached)
}

/// A shape error met at launch, as a kernel error.
pub(super) fn kernel_err(e: impl std::fmt::Display) -> EpError {
    EpError::Kernel(e.to_string())
}

/// `SoftmaxArgs` in reduce.cu.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
struct SoftmaxArgs {
    rows: i64,
    len: i64,
    inner: i64,
    op: i32,
    vec: i32,
    lanes: i32,
    _pad: i32,
}

// SAFETY: plain `#[repr(C)]` data matching `struct SoftmaxArgs` in reduce.cu.
unsafe impl cudarc::driver::DeviceRepr for SoftmaxArgs {}

/// Softmax, LogSoftmax or Hardmax of one float dtype.
struct SoftmaxKernel {
    op: Softmax,
    dtype: DType,
    warp: WarpEntries,
    block: &'static str,
    strided: &'static str,
}

impl CudaKernel for SoftmaxKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
        let x = io.input(0)?;
        let (outer, len, inner) = self.op.layout(&x.shape).map_err(kernel_err)?;
        let rows = outer * inner;
        if rows == 0 || len == 0 {
            return Ok(());
        }
        if io.output(0)?.numel() != x.numel() {
            return Err(EpError::Kernel("Softmax output differs from its input in size".into()));
        }
        let (xp, yp) = (io.in_ptr(0)?, io.out_ptr(0)?);
        let op = self.op.kind.code().code() as i32;
        let mut args = SoftmaxArgs {
            rows: rows as i64,
            len: len as i64,
            inner: inner as i64,
            op,
            ..Default::default()
        };
        let (name, cfg) = if inner > 1 {
            (self.strided, gpu.grid(rows as u64))
        } else if len <= WARP_ROW {
            let plan = warp_plan(len, self.dtype.bits() / 8, aligned(&[xp, yp]));
            args.vec = plan.vec as i32;
            args.lanes = plan.lanes as i32;
            (self.warp.get(plan.slots), warp_grid(gpu, rows, plan.lanes))
        } else {
            let (cfg, cached) = row_grid(gpu, rows, len, self.dtype);
            args.vec = cached as i32;
            (self.block, cfg)
        };
        let f = gpu.function(Kernel::Reduce, name)?;
        let launch = Args::new().push(args).push(xp).push(yp);
        // SAFETY: matches `softmax_*(SoftmaxArgs, const T*, T*)`; x and y hold
        // outer × len × inner elements (checked above), aligned for 16-byte
        // accesses when `vec` asks for them.
        unsafe { launch.launch(gpu, &f, cfg) }
    }

    /// Each row is read whole before any of it is written, by the same threads.
    fn in_place(&self) -> bool {
        true
    }
}

fn build_softmax(spec: &KernelSpec<'_>) -> Result<Box<dyn CudaKernel>, EpError> {
    let op = spec.op_as::<Softmax>()?.clone();
    let dtype = spec.input_dtype(0)?;
    if !is_float(dtype) {
        return Err(unsupported(&spec.node.op_type, dtype));
    }
    Ok(Box::new(SoftmaxKernel {
        op,
        dtype,
        warp: WarpEntries::new("softmax_warp", dtype)?,
        block: entry("softmax_block", dtype)?,
        strided: entry("softmax_strided", dtype)?,
    }))
}

/// `BatchNormArgs` in norm.cu.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
struct BatchNormArgs {
    n: i64,
    channels: i64,
    inner: i64,
    eps: f32,
    scale_dt: i32,
    bias_dt: i32,
    mean_dt: i32,
    var_dt: i32,
    _pad: i32,
}

// SAFETY: plain `#[repr(C)]` data matching `struct BatchNormArgs` in norm.cu.
unsafe impl cudarc::driver::DeviceRepr for BatchNormArgs {}

/// BatchNormalization with running statistics; each parameter may have its own float dtype.
struct BatchNormKernel {
    eps: f32,
    name: &'static str,
    /// Dtypes of scale, bias, mean and var.
    params: [DType; 4],
}

impl CudaKernel for BatchNormKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
        let x = io.input(0)?;
        let channels = x.shape.get(1).copied().unwrap_or(1);
        let inner: usize = x.shape.get(2..).map_or(1, |s| s.iter().product());
        let n = x.numel();
        if n == 0 {
            return Ok(());
        }
        if io.output(0)?.numel() != n {
            return Err(EpError::Kernel("BatchNormalization output differs from its input".into()));
        }
        for i in 1..5 {
            let got = io.input(i)?.numel();
            if got != channels {
                return Err(EpError::Kernel(format!(
                    "BatchNormalization input {i} has {got} values for {channels} channels"
                )));
            }
        }
        let [scale_dt, bias_dt, mean_dt, var_dt] = self.params.map(|d| d.to_onnx());
        let args = BatchNormArgs {
            n: n as i64,
            channels: channels as i64,
            inner: inner as i64,
            eps: self.eps,
            scale_dt,
            bias_dt,
            mean_dt,
            var_dt,
            _pad: 0,
        };
        let f = gpu.function(Kernel::Norm, self.name)?;
        let launch = Args::new()
            .push(args)
            .push(io.in_ptr(0)?)
            .push(io.in_ptr(1)?)
            .push(io.in_ptr(2)?)
            .push(io.in_ptr(3)?)
            .push(io.in_ptr(4)?)
            .push(io.out_ptr(0)?);
        // SAFETY: matches `batchnorm_T(BatchNormArgs, const T*, const void* ×4, T*)`;
        // x and y hold n elements and each parameter `channels` of its dtype (checked above).
        unsafe { launch.launch(gpu, &f, gpu.grid(n as u64)) }
    }

    /// Elementwise: each element is read and then written by one thread.
    fn in_place(&self) -> bool {
        true
    }
}

fn build_batch_norm(spec: &KernelSpec<'_>) -> Result<Box<dyn CudaKernel>, EpError> {
    let eps = spec.op_as::<BatchNorm>()?.epsilon;
    let dtype = spec.input_dtype(0)?;
    if !is_float(dtype) {
        return Err(unsupported("BatchNormalization", dtype));
    }
    let mut params = [DType::F32; 4];
    for (slot, i) in params.iter_mut().zip(1..5) {
        *slot = spec.input_dtype(i)?;
        if !is_float(*slot) {
            return Err(unsupported("BatchNormalization parameters", *slot));
        }
    }
    Ok(Box::new(BatchNormKernel { eps, name: entry("batchnorm", dtype)?, params }))
}

/// Registers the softmax family and BatchNormalization.
pub(crate) fn register_all(r: &mut Registry) {
    for name in ["Softmax", "LogSoftmax", "Hardmax"] {
        r.register(name, build_softmax);
    }
    r.register("BatchNormalization", build_batch_norm);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warp_plans_give_each_lane_32_bytes_and_cover_the_row_in_the_fewest_slots() {
        let plan = |slots, lanes, vec| WarpPlan { slots, lanes, vec };
        // BERT's rows: 128 and 512 f32 softmax, 768 layer norms.
        assert_eq!(warp_plan(128, 4, true), plan(8, 16, true));
        assert_eq!(warp_plan(512, 4, true), plan(16, 32, true));
        assert_eq!(warp_plan(768, 2, true), plan(24, 32, true));
        assert_eq!(warp_plan(768, 4, true), plan(24, 32, true));
        // Short f16 rows: four rows a warp, two vectors a lane.
        assert_eq!(warp_plan(128, 2, true), plan(16, 8, true));
        // Vectors need whole vectors per lane: 12 slots of f16 are not.
        assert_eq!(warp_plan(384, 2, true), plan(16, 32, true));
        assert_eq!(warp_plan(384, 4, true), plan(12, 32, true));
        // Unaligned buffers or a length that is not a whole number of vectors: scalar.
        assert_eq!(warp_plan(128, 4, false), plan(8, 16, false));
        assert_eq!(warp_plan(130, 4, true), plan(8, 32, false));
        assert_eq!(warp_plan(100, 2, true), plan(16, 8, false));
        // Tiny rows take one lane each.
        assert_eq!(warp_plan(1, 8, true), plan(1, 1, false));
        assert_eq!(warp_plan(5, 4, true), plan(8, 1, false));
        assert_eq!(warp_plan(1024, 8, true), plan(32, 32, true));
    }
}
