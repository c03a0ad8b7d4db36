//! com.microsoft `MatMulNBits` and `GatherBlockQuantized`, and onyx
//! `GatedMatMulNBits`, on the device (quant.cu). `matmul_nbits{bits}_T` dequantizes in registers, so the
//! weights stay 2, 4 or 8 bits wide in memory and one token's product
//! streams them once; `g_idx` (act-order) is not taken: those models run the
//! op on the CPU. `gather_block_T` dequantizes only the gathered rows of a
//! quantized embedding, reading the indices on the device.

use cudarc::driver::LaunchConfig;
use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::graph::{MICROSOFT_DOMAIN, ONYX_DOMAIN};
use onyx_core::ops::microsoft::gated::{Gate, GatedMatMulNBits};
use onyx_core::ops::microsoft::quant::{GatherBlockQuantized, MatMulNBits};
use onyx_kernels::Kernel;

use super::elementwise::entry;
use super::{CudaKernel, Io, MAX_RANK, Registry, strides, unsupported};
use crate::gpu::{Args, Gpu};

/// Rows of A per warp (`NBITS_ROWS` in quant.cu).
const ROWS: u64 = 4;
/// Warps (output columns) per block (`NBITS_WARPS`).
const WARPS: u64 = 4;
/// Warps (output columns) per block of the 4-bit GEMV (`GEMV_WARPS`).
const GEMV_WARPS: u64 = 8;

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
    zp_kind_up: i32,
    split: i32,
}

// SAFETY: plain `#[repr(C)]` data matching `struct NBitsArgs` in quant.cu.
unsafe impl cudarc::driver::DeviceRepr for NBitsArgs {}

struct NBitsKernel {
    op: MatMulNBits,
    name: &'static str,
    /// `matmul_nbits4_vec_T`, for 4-bit weights.
    vec_name: Option<&'static str>,
    dtype: DType,
    /// onyx `GatedMatMulNBits`: the up projection's weights at inputs 4 to 6
    /// (`*_glu_*` kernels) instead of g_idx and bias.
    gated: bool,
}

impl NBitsKernel {
    /// Checks the weights at inputs `b` .. `b + 2` and gives their zero
    /// points' kind (0: none, 1: packed bytes, 2: A's dtype).
    fn weights(&self, io: &Io<'_>, b: usize) -> Result<i32, EpError> {
        let (n, bits, kb) = (self.op.n, self.op.bits, self.op.k_blocks());
        Self::check(io, b, DType::U8, n * kb * self.op.blob_size(), "B")?;
        Self::check(io, b + 1, self.dtype, n * kb, "scales")?;
        Ok(if !io.has_input(b + 2) {
            0
        } else if io.input(b + 2)?.dtype == DType::U8 {
            Self::check(io, b + 2, DType::U8, n * (kb * bits).div_ceil(8), "zero points")?;
            1
        } else {
            Self::check(io, b + 2, self.dtype, n * kb, "zero points")?;
            2
        })
    }

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
        let (n, k, kb) = (self.op.n, self.op.k, self.op.k_blocks());
        let a = io.input(0)?;
        let m = a.numel().checked_div(k).unwrap_or(0);
        if a.shape.last() != Some(&k) || io.output(0)?.numel() != m * n {
            return Err(EpError::Kernel(format!(
                "MatMulNBits: A {:?} and output {:?} for K {k}, N {n}",
                a.shape,
                io.output(0)?.shape
            )));
        }
        let zp_kind = self.weights(io, 1)?;
        let zp_kind_up = if self.gated { self.weights(io, GatedMatMulNBits::UP)? } else { 0 };
        let has_bias = !self.gated && io.has_input(5);
        if has_bias {
            Self::check(io, 5, self.dtype, n, "bias")?;
        }
        if m == 0 || n == 0 {
            return Ok(());
        }
        let mut args = NBitsArgs {
            m: m as i64,
            n: n as i64,
            k: k as i64,
            k_blocks: kb as i64,
            block: self.op.block_size as i32,
            zp_kind,
            has_bias: has_bias as i32,
            zp_kind_up,
            split: 1,
        };
        let grid_y = (m as u64).div_ceil(ROWS);
        if grid_y > 65535 {
            return Err(EpError::Unsupported(format!("MatMulNBits over {m} rows on CUDA")));
        }
        // The 16-byte GEMV where rows of B and A are whole, aligned 16-byte words.
        let row_bytes = kb * self.op.blob_size();
        let vec = self.vec_name.filter(|_| {
            k % 32 == 0
                && row_bytes % 16 == 0
                && io.in_ptr(0).is_ok_and(|p| p % 16 == 0)
                && io.in_ptr(1).is_ok_and(|p| p % 16 == 0)
                && (!self.gated || io.in_ptr(GatedMatMulNBits::UP).is_ok_and(|p| p % 16 == 0))
        });
        let warps = if vec.is_some() { GEMV_WARPS } else { WARPS };
        if vec.is_some() {
            args.split = gemv_split(n as u64, (k / 32) as u64);
        }
        let cfg = LaunchConfig {
            grid_dim: ((n as u64 * args.split as u64).div_ceil(warps) as u32, grid_y as u32, 1),
            block_dim: ((32 * warps) as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let f = gpu.function(Kernel::Quant, vec.unwrap_or(self.name))?;
        let mut launch = Args::new()
            .push(args)
            .push(io.in_ptr(0)?)
            .push(io.in_ptr(1)?)
            .push(io.in_ptr(2)?)
            .push(io.opt_in_ptr(3));
        launch = if self.gated {
            let up = GatedMatMulNBits::UP;
            launch.push(io.in_ptr(up)?).push(io.in_ptr(up + 1)?).push(io.opt_in_ptr(up + 2))
        } else {
            launch.push(io.opt_in_ptr(5))
        };
        let launch = launch.push(io.out_ptr(0)?);
        // SAFETY: matches `matmul_nbits{bits}_T` and `matmul_nbits4_vec_T`
        // (NBitsArgs, const T* x, const u8* b, const T* scales, const void* zp,
        // const T* bias, T* y), or their `_glu` forms (NBitsArgs, x, b, scales,
        // zp, const u8* b2, const T* scales2, const void* zp2, T* y). x holds
        // m × k elements and y m × n (checked above); each b holds n rows of
        // k_blocks × block × bits / 8 bytes, read in 8-weight words inside each
        // row (block is a multiple of 8, checked when built), or in 16-byte
        // words by the GEMV, which is taken only where every row of each b and
        // of x starts 16-byte aligned and k is whole 32-weight words; scales
        // n × k_blocks; zero points as zp_kind (zp_kind_up) says (0: absent,
        // never read); bias n elements when has_bias.
        unsafe { launch.launch(gpu, &f, cfg) }
    }
}

/// Warps per output column of the GEMV (1, 2, 4 or 8) for `n` columns of
/// `words` 16-byte words: more where few columns of long rows would leave
/// the device short of loads in flight (a down projection: 896 columns of
/// 152 words fill 112 blocks at one warp a column, 448 at four), while each
/// lane keeps at least one word.
fn gemv_split(n: u64, words: u64) -> i32 {
    let mut split = 1;
    while split < 8 && (n * split).div_ceil(GEMV_WARPS) < 512 && words >= 64 * split {
        split *= 2;
    }
    split as i32
}

fn build(spec: &KernelSpec<'_>) -> Result<Box<dyn CudaKernel>, EpError> {
    if spec.input_dtypes.get(4).copied().flatten().is_some() {
        return Err(EpError::Unsupported("MatMulNBits with g_idx on CUDA".into()));
    }
    nbits_kernel(spec, spec.op_as::<MatMulNBits>()?.clone(), false)
}

fn build_gated(spec: &KernelSpec<'_>) -> Result<Box<dyn CudaKernel>, EpError> {
    let op = spec.op_as::<GatedMatMulNBits>()?;
    match op.gate {
        Gate::Silu => nbits_kernel(spec, op.proj.clone(), true),
    }
}

fn nbits_kernel(
    spec: &KernelSpec<'_>,
    op: MatMulNBits,
    gated: bool,
) -> Result<Box<dyn CudaKernel>, EpError> {
    let what = if gated { "GatedMatMulNBits" } else { "MatMulNBits" };
    let dtype = spec.input_dtype(0)?;
    if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        return Err(unsupported(what, dtype));
    }
    if op.block_size % 8 != 0 || !matches!(op.bits, 2 | 4 | 8) {
        return Err(EpError::Unsupported(format!(
            "{what} with {} bits in blocks of {} on CUDA",
            op.bits, op.block_size
        )));
    }
    let glu = if gated { "_glu" } else { "" };
    let name = entry(&format!("matmul_nbits{}{glu}", op.bits), dtype)?;
    let vec_name =
        (op.bits == 4).then(|| entry(&format!("matmul_nbits4_vec{glu}"), dtype)).transpose()?;
    Ok(Box::new(NBitsKernel { op, name, vec_name, dtype, gated }))
}

/// `GbqArgs` in quant.cu.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
struct GbqArgs {
    numel: i64,
    count: i64,
    axis: i64,
    inner: i64,
    row: i64,
    zp_row: i64,
    dims: [i64; MAX_RANK],
    sstride: [i64; MAX_RANK],
    rank: i32,
    qaxis: i32,
    block: i32,
    kind: i32,
    bits: i32,
    has_zp: i32,
    idx64: i32,
}

// SAFETY: plain `#[repr(C)]` data matching `struct GbqArgs` in quant.cu.
unsafe impl cudarc::driver::DeviceRepr for GbqArgs {}

struct GbqKernel {
    op: GatherBlockQuantized,
    name: &'static str,
}

fn gbq_err(msg: String) -> EpError {
    EpError::Kernel(format!("GatherBlockQuantized: {msg}"))
}

/// Bytes of `shape` (logical values) stored as `dtype`: uint8 rows of
/// `8 / bits` values a byte, or int4/uint4 two a byte over the whole tensor.
fn packed_len(shape: &[usize], dtype: DType, bits: usize) -> usize {
    let n: usize = shape.iter().product();
    match (dtype, shape.last()) {
        (DType::U8, Some(&row)) if row > 0 => n / row * row.div_ceil(8 / bits),
        (DType::U8, _) => 0,
        _ => n.div_ceil(2),
    }
}

impl CudaKernel for GbqKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
        let (op, data) = (&self.op, io.input(0)?);
        let dtype = data.dtype;
        let shape = op.logical_shape(dtype, &data.shape);
        let rank = shape.len();
        if rank > MAX_RANK {
            return Err(EpError::Unsupported(format!(
                "GatherBlockQuantized of rank {rank} on CUDA (at most {MAX_RANK})"
            )));
        }
        let (ga, qa) = op.axes(rank).map_err(|e| gbq_err(e.to_string()))?;
        let bits = if dtype == DType::U8 { op.bits } else { 4 };
        let mut sshape = shape.clone();
        sshape[qa] = shape[qa].div_ceil(op.block_size);
        let scales = io.input(2)?;
        if scales.shape != sshape {
            return Err(gbq_err(format!(
                "scales {:?} for data {shape:?} in blocks of {} along axis {qa}",
                scales.shape, op.block_size
            )));
        }
        if data.buffer.size < packed_len(&shape, dtype, bits) as u64 {
            return Err(gbq_err(format!("data {:?} of {dtype}", data.shape)));
        }
        let has_zp = io.has_input(3);
        if has_zp {
            let zp = io.input(3)?;
            let mut want = sshape.clone();
            if dtype == DType::U8 {
                let last = want.last_mut().expect("rank checked by axes");
                *last = (*last * bits).div_ceil(8);
            }
            if zp.shape != want || zp.dtype != dtype {
                return Err(gbq_err(format!(
                    "zero points {:?} of {}, expected {want:?} of {dtype}",
                    zp.shape, zp.dtype
                )));
            }
        }
        let idx = io.input(1)?;
        let y = io.output(0)?;
        let inner: usize = shape[ga + 1..].iter().product();
        let outer: usize = shape[..ga].iter().product();
        if y.numel() != outer * idx.numel() * inner || y.dtype != scales.dtype {
            return Err(gbq_err(format!("output {:?} for {} indices", y.shape, idx.numel())));
        }
        if y.numel() == 0 {
            return Ok(());
        }
        let mut args = GbqArgs {
            numel: y.numel() as i64,
            count: idx.numel() as i64,
            axis: shape[ga] as i64,
            inner: inner as i64,
            row: *shape.last().unwrap_or(&1) as i64,
            zp_row: *sshape.last().unwrap_or(&1) as i64,
            rank: rank as i32,
            qaxis: qa as i32,
            block: i32::try_from(op.block_size)
                .map_err(|_| gbq_err(format!("block size {}", op.block_size)))?,
            kind: match dtype {
                DType::U8 => 0,
                DType::U4 => 1,
                _ => 2,
            },
            bits: bits as i32,
            has_zp: has_zp.into(),
            idx64: i32::from(idx.dtype == DType::I64),
            ..Default::default()
        };
        for (d, (&n, &s)) in shape.iter().zip(&strides(&sshape)).enumerate() {
            args.dims[d] = n as i64;
            args.sstride[d] = s as i64;
        }
        let f = gpu.function(Kernel::Quant, self.name)?;
        let launch = Args::new()
            .push(args)
            .push(io.in_ptr(0)?)
            .push(io.in_ptr(1)?)
            .push(io.in_ptr(2)?)
            .push(io.opt_in_ptr(3))
            .push(io.out_ptr(0)?);
        // SAFETY: matches `gather_block_T(GbqArgs, const u8* data, const void*
        // idx, const T* scales, const u8* zp, T* y)`. data holds the packed
        // logical shape `dims` (its bytes checked above), scales the block
        // shape whose strides are `sstride`, zero points that shape packed as
        // data when has_zp, idx `count` int32s or int64s (idx64), and y
        // `numel` = outer × count × inner elements of T; indices outside the
        // axis write zeros and read nothing.
        unsafe { launch.launch(gpu, &f, gpu.grid(y.numel() as u64)) }
    }
}

fn build_gbq(spec: &KernelSpec<'_>) -> Result<Box<dyn CudaKernel>, EpError> {
    let op = spec.op_as::<GatherBlockQuantized>()?.clone();
    let data = spec.input_dtype(0)?;
    if !matches!(data, DType::U8 | DType::U4 | DType::I4) {
        return Err(unsupported("GatherBlockQuantized", data));
    }
    let scales = spec.input_dtype(2)?;
    if !matches!(scales, DType::F32 | DType::F16 | DType::BF16) {
        return Err(unsupported("GatherBlockQuantized scales", scales));
    }
    if !matches!(spec.input_dtype(1)?, DType::I32 | DType::I64) {
        return Err(unsupported("GatherBlockQuantized indices", spec.input_dtype(1)?));
    }
    Ok(Box::new(GbqKernel { op, name: entry("gather_block", scales)? }))
}

/// Registers `MatMulNBits` and `GatherBlockQuantized` in `com.microsoft`, and
/// `GatedMatMulNBits` in `onyx`.
pub(crate) fn register_all(r: &mut Registry) {
    r.register_in(MICROSOFT_DOMAIN, "MatMulNBits", build);
    r.register_in(ONYX_DOMAIN, "GatedMatMulNBits", build_gated);
    r.register_in(MICROSOFT_DOMAIN, "GatherBlockQuantized", build_gbq);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_data_takes_whole_bytes_per_uint8_row_and_per_int4_tensor() {
        // Rows of 5 4-bit values take 3 bytes each; int4 packs across rows.
        assert_eq!(packed_len(&[4, 5], DType::U8, 4), 12);
        assert_eq!(packed_len(&[4, 5], DType::U8, 2), 8);
        assert_eq!(packed_len(&[4, 5], DType::I4, 4), 10);
        assert_eq!(packed_len(&[3, 3], DType::U4, 4), 5);
    }

    #[test]
    fn only_few_columns_of_long_rows_split_over_several_warps() {
        // Qwen2.5-0.5B: the down projection splits; q/k/v, o, gate/up and lm_head do not.
        assert_eq!(gemv_split(896, 4864 / 32), 4);
        assert_eq!(gemv_split(896, 896 / 32), 1);
        assert_eq!(gemv_split(4864, 896 / 32), 1);
        assert_eq!(gemv_split(151_936, 896 / 32), 1);
        // At most 8 warps, a block's worth.
        assert_eq!(gemv_split(16, 1 << 20), 8);
    }
}
