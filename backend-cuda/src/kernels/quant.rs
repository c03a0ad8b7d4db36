//! com.microsoft `MatMulNBits` on the device: `matmul_nbits{bits}_T` in
//! quant.cu, which dequantizes in registers, so the weights stay 2, 4 or
//! 8 bits wide in memory and one token's product streams them once.
//! `g_idx` (act-order) is not taken: those models run the op on the CPU.

use cudarc::driver::LaunchConfig;
use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::graph::MICROSOFT_DOMAIN;
use onyx_core::ops::microsoft::quant::MatMulNBits;
use onyx_kernels::Kernel;

use super::elementwise::entry;
use super::{CudaKernel, Io, Registry, unsupported};
use crate::gpu::{Args, Gpu};

/// Rows of A per warp (`NBITS_ROWS` in quant.cu).
const ROWS: u64 = 4;
/// Warps (output columns) per block (`NBITS_WARPS`).
const WARPS: u64 = 4;

/// `NBitsArgs` in quant.cu.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
struct NBitsArgs {
    m: i64,
    n: i64,
    k: i64,
    k_blocks: i64,
    block: i32,
    zp_kind: i32,
    has_bias: i32,
}

// SAFETY: plain `#[repr(C)]` data matching `struct NBitsArgs` in quant.cu.
unsafe impl cudarc::driver::DeviceRepr for NBitsArgs {}

struct NBitsKernel {
    op: MatMulNBits,
    name: &'static str,
    dtype: DType,
}

impl NBitsKernel {
    /// Checks that input `i` holds `n` elements of `dtype`.
    fn check(io: &Io<'_>, i: usize, dtype: DType, n: usize, what: &str) -> Result<(), EpError> {
        let t = io.input(i)?;
        if t.dtype != dtype || t.numel() != n {
            return Err(EpError::Kernel(format!(
                "MatMulNBits: {what} is {} × {}, expected {dtype} × {n}",
                t.dtype,
                t.numel()
            )));
        }
        Ok(())
    }
}

impl CudaKernel for NBitsKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
        let (n, k, bits, kb) = (self.op.n, self.op.k, self.op.bits, self.op.k_blocks());
        let a = io.input(0)?;
        let m = a.numel().checked_div(k).unwrap_or(0);
        if a.shape.last() != Some(&k) || io.output(0)?.numel() != m * n {
            return Err(EpError::Kernel(format!(
                "MatMulNBits: A {:?} and output {:?} for K {k}, N {n}",
                a.shape,
                io.output(0)?.shape
            )));
        }
        Self::check(io, 1, DType::U8, n * kb * self.op.blob_size(), "B")?;
        Self::check(io, 2, self.dtype, n * kb, "scales")?;
        let zp_kind = if !io.has_input(3) {
            0
        } else if io.input(3)?.dtype == DType::U8 {
            Self::check(io, 3, DType::U8, n * (kb * bits).div_ceil(8), "zero points")?;
            1
        } else {
            Self::check(io, 3, self.dtype, n * kb, "zero points")?;
            2
        };
        let has_bias = io.has_input(5);
        if has_bias {
            Self::check(io, 5, self.dtype, n, "bias")?;
        }
        if m == 0 || n == 0 {
            return Ok(());
        }
        let opt = |i: usize| if io.has_input(i) { io.in_ptr(i) } else { Ok(0) };
        let args = NBitsArgs {
            m: m as i64,
            n: n as i64,
            k: k as i64,
            k_blocks: kb as i64,
            block: self.op.block_size as i32,
            zp_kind,
            has_bias: has_bias as i32,
        };
        let grid_y = (m as u64).div_ceil(ROWS);
        if grid_y > 65535 {
            return Err(EpError::Unsupported(format!("MatMulNBits over {m} rows on CUDA")));
        }
        let cfg = LaunchConfig {
            grid_dim: ((n as u64).div_ceil(WARPS) as u32, grid_y as u32, 1),
            block_dim: ((32 * WARPS) as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let f = gpu.function(Kernel::Quant, self.name)?;
        let launch = Args::new()
            .push(args)
            .push(io.in_ptr(0)?)
            .push(io.in_ptr(1)?)
            .push(io.in_ptr(2)?)
            .push(opt(3)?)
            .push(opt(5)?)
            .push(io.out_ptr(0)?);
        // SAFETY: matches `matmul_nbits{bits}_T(NBitsArgs, const T* x, const u8* b,
        // const T* scales, const void* zp, const T* bias, T* y)`. x holds m × k
        // elements and y m × n (checked above); b holds n rows of k_blocks × block
        // × bits / 8 bytes, read in 8-weight words inside each row (block is a
        // multiple of 8, checked when built); scales n × k_blocks; zero points
        // as zp_kind says (0: absent, never read); bias n elements when has_bias.
        unsafe { launch.launch(gpu, &f, cfg) }
    }
}

fn build(spec: &KernelSpec<'_>) -> Result<Box<dyn CudaKernel>, EpError> {
    let op = spec.op_as::<MatMulNBits>()?.clone();
    let dtype = spec.input_dtype(0)?;
    if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        return Err(unsupported("MatMulNBits", dtype));
    }
    if spec.input_dtypes.get(4).copied().flatten().is_some() {
        return Err(EpError::Unsupported("MatMulNBits with g_idx on CUDA".into()));
    }
    if op.block_size % 8 != 0 || !matches!(op.bits, 2 | 4 | 8) {
        return Err(EpError::Unsupported(format!(
            "MatMulNBits with {} bits in blocks of {} on CUDA",
            op.bits, op.block_size
        )));
    }
    let name = entry(&format!("matmul_nbits{}", op.bits), dtype)?;
    Ok(Box::new(NBitsKernel { op, name, dtype }))
}

/// Registers `MatMulNBits` in `com.microsoft`.
pub(crate) fn register_all(r: &mut Registry) {
    r.register_in(MICROSOFT_DOMAIN, "MatMulNBits", build);
}
