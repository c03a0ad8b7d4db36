//! Conv: an implicit GEMM (`conv_gemm{128,64,32,16}_T` in conv.cu) for general
//! convolutions, with K split across blocks for f32 when the output alone
//! would leave the GPU idle (the output is zeroed, then partial sums are added
//! atomically), and a direct kernel (`conv_direct_T`) for depthwise and other
//! convolutions with very few channels per group. 1-d, 2-d and 3-d, any groups,
//! strides, dilations, pads and auto_pad, optional bias; f32, f16, bf16, f64.
//! ConvTranspose (`conv_transpose_T`) is direct: each output element sums the
//! input positions whose kernel taps land on it, with the pads, output
//! padding and output shape core's `ConvTranspose::geometry` resolves.

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::conv::{Conv, Geometry};
use onyx_core::ops::spatial::ConvTranspose;
use onyx_core::shape::Dim;
use onyx_kernels::Kernel;

use super::elementwise::entry;
use super::{CudaKernel, Io, Registry, i32_of, unsupported};
use crate::gpu::{Args, Gpu};

/// `FastDiv` in conv.cu: division by `d` as `(umulhi(n, m) + n) >> s`, exact
/// for every `n < 2^31`.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FastDiv {
    d: u32,
    m: u32,
    s: u32,
    _pad: u32,
}

impl FastDiv {
    /// The multiplier and shift for divisor `d` (at least 1, below 2^31).
    pub(crate) fn new(d: u32) -> Self {
        assert!((1..1 << 31).contains(&d), "FastDiv divisor {d} out of range");
        let s = 32 - (d - 1).leading_zeros();
        let m = ((1u64 << 32) * ((1u64 << s) - d as u64)) / d as u64 + 1;
        FastDiv { d, m: m as u32, s, _pad: 0 }
    }

    /// What the kernel computes, for tests.
    #[cfg(test)]
    fn div(&self, n: u32) -> u32 {
        let hi = ((n as u64 * self.m as u64) >> 32) as u32;
        (hi + n) >> self.s
    }
}

/// `ConvGeom` in conv.cu.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
struct ConvGeom {
    ncols: i64,
    x_batch: i64,
    y_batch: i64,
    is: i64,
    os: i64,
    m_out: i32,
    cg: i32,
    mg: i32,
    k: i32,
    ks: i32,
    in_d: i32,
    in_h: i32,
    in_w: i32,
    out_h: i32,
    out_w: i32,
    k_d: i32,
    k_h: i32,
    k_w: i32,
    s_d: i32,
    s_h: i32,
    s_w: i32,
    p_d: i32,
    p_h: i32,
    p_w: i32,
    d_d: i32,
    d_h: i32,
    d_w: i32,
    has_bias: i32,
    k_chunk: i32,
    splits: i32,
    div_ks: FastDiv,
    div_khw: FastDiv,
    div_kw: FastDiv,
}

// SAFETY: plain `#[repr(C)]` data matching `struct ConvGeom` in conv.cu.
unsafe impl cudarc::driver::DeviceRepr for ConvGeom {}

/// Spatial values padded in front to three dims with `fill` (1-d and 2-d
/// convolutions become 3-d ones with unit leading dims), as `i32`s.
pub(crate) fn front3(v: &[usize], fill: usize) -> Result<[i32; 3], EpError> {
    if v.len() > 3 {
        return Err(EpError::Unsupported(format!(
            "{}-d windows are not implemented on CUDA (at most 3 spatial dims)",
            v.len()
        )));
    }
    let mut out = [fill as i32; 3];
    for (slot, &x) in out[3 - v.len()..].iter_mut().zip(v) {
        *slot = i32_of(x)?;
    }
    Ok(out)
}

/// The window of a Conv or ConvTranspose: output spatial dims, kernel dims,
/// strides, the pads in front (ConvTranspose: output positions cut, maybe
/// negative) padded to three dims, and dilations.
struct Window<'a> {
    output: &'a [usize],
    kernel: &'a [usize],
    strides: &'a [usize],
    pads: [i32; 3],
    dilations: &'a [usize],
}

/// `ConvGeom` for X `x` ([N, C, spatial…]), `m` output channels in `groups`
/// groups and `window`, with one K split (the GEMM plan sets its own).
fn conv_geom(
    x: &[usize],
    m: usize,
    groups: usize,
    window: &Window<'_>,
    has_bias: bool,
) -> Result<ConvGeom, EpError> {
    let (n, c) = (x[0], x[1]);
    let (cg, mg) = (c / groups, m / groups);
    let is: usize = x[2..].iter().product();
    let os: usize = window.output.iter().product();
    let ks: usize = window.kernel.iter().product();
    let [in_d, in_h, in_w] = front3(&x[2..], 1)?;
    let [_, out_h, out_w] = front3(window.output, 1)?;
    let [k_d, k_h, k_w] = front3(window.kernel, 1)?;
    let [s_d, s_h, s_w] = front3(window.strides, 1)?;
    let [p_d, p_h, p_w] = window.pads;
    let [d_d, d_h, d_w] = front3(window.dilations, 1)?;
    i32_of(os)?;
    let fast = |v: i32| FastDiv::new(v.max(1) as u32);
    Ok(ConvGeom {
        ncols: (n * os) as i64,
        x_batch: (c * is) as i64,
        y_batch: (m * os) as i64,
        is: is as i64,
        os: os as i64,
        m_out: i32_of(m)?,
        cg: i32_of(cg)?,
        mg: i32_of(mg)?,
        k: i32_of(cg * ks)?,
        ks: i32_of(ks)?,
        in_d,
        in_h,
        in_w,
        out_h,
        out_w,
        k_d,
        k_h,
        k_w,
        s_d,
        s_h,
        s_w,
        p_d,
        p_h,
        p_w,
        d_d,
        d_h,
        d_w,
        has_bias: has_bias as i32,
        k_chunk: 0,
        splits: 1,
        div_ks: fast(ks as i32),
        div_khw: fast(k_h * k_w),
        div_kw: fast(k_w),
    })
}

/// Which kernel runs a convolution.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Plan {
    /// One thread per output element.
    Direct,
    /// Implicit GEMM on `conv_gemm{rows}_T`, with K split into `splits` ranges
    /// of `chunk` (f32 only: the partial sums are added atomically).
    Gemm { rows: usize, cols: usize, splits: usize, chunk: usize },
}

/// Picks the kernel: direct for depthwise-like convolutions and thin ones with
/// a short K, else the largest GEMM tile that still fills the GPU and wastes at
/// most about half of its rows; K is split when the tiles would leave most of
/// the GPU idle and K is long enough for at least 8 steps a split.
fn choose(
    cg: usize,
    mg: usize,
    ks: usize,
    ncols: usize,
    groups: usize,
    sms: usize,
    dtype: DType,
) -> Plan {
    let k = cg * ks;
    if (cg == 1 && mg <= 8) || (mg <= 4 && k <= 256) {
        return Plan::Direct;
    }
    let tiles = |rows: usize, cols: usize| ncols.div_ceil(cols) * mg.div_ceil(rows) * groups;
    let (rows, cols, step) = if dtype != DType::F64 && mg >= 96 && tiles(128, 128) >= sms {
        (128, 128, 8)
    } else if mg >= 48 && tiles(64, 64) >= sms / 2 {
        (64, 64, 16)
    } else if mg > 16 {
        (32, 32, 16)
    } else {
        (16, 64, 16)
    };
    let t = tiles(rows, cols);
    let mut splits = 1;
    if dtype == DType::F32 && t < sms {
        splits = (2 * sms).div_ceil(t).min(k / (8 * step)).max(1);
    }
    let chunk = k.div_ceil(splits).next_multiple_of(step).max(step);
    Plan::Gemm { rows, cols, splits: k.div_ceil(chunk).max(1), chunk }
}

/// Conv over one dtype.
struct ConvKernel {
    op: Conv,
    dtype: DType,
}

impl ConvKernel {
    /// The geometry of one launch, checked against the tensors' shapes.
    fn geometry(
        &self,
        x: &[usize],
        w: &[usize],
        y: &[usize],
    ) -> Result<(Geometry, usize, usize), EpError> {
        let bad = |m: String| EpError::Kernel(m);
        if x.len() < 3 || w.len() != x.len() {
            return Err(bad(format!("Conv needs X [N,C,…] and W of its rank, got {x:?}, {w:?}")));
        }
        let dims: Vec<Dim> = w.iter().map(|&d| Dim::Known(d)).collect();
        let kernel = self
            .op
            .kernel(Some(&dims))
            .map_err(|e| bad(e.to_string()))?
            .ok_or_else(|| bad("unknown kernel shape".into()))?;
        if kernel != w[2..] {
            return Err(bad(format!("kernel_shape {kernel:?} disagrees with W {w:?}")));
        }
        let geo = self.op.window.geometry(&x[2..], &kernel).map_err(|e| bad(e.to_string()))?;
        let groups = self.op.group;
        let (c, m) = (x[1], w[0]);
        if c != w[1] * groups || m % groups != 0 {
            return Err(bad(format!("X {x:?} and W {w:?} do not fit group {groups}")));
        }
        let mut want = vec![x[0], m];
        want.extend(&geo.output);
        if y != want.as_slice() {
            return Err(bad(format!("Conv output {y:?}, expected {want:?}")));
        }
        Ok((geo, c / groups, m / groups))
    }
}

impl CudaKernel for ConvKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
        let (x, w, y) = (&io.input(0)?.shape, &io.input(1)?.shape, &io.output(0)?.shape);
        let (geo, cg, mg) = self.geometry(x, w, y)?;
        let total: usize = y.iter().product();
        if total == 0 {
            return Ok(());
        }
        let groups = self.op.group;
        let (n, m) = (x[0], w[0]);
        let os: usize = geo.output.iter().product();
        let ks: usize = geo.kernel.iter().product();
        let has_bias = io.has_input(2);
        if has_bias && io.input(2)?.numel() != m {
            return Err(EpError::Kernel(format!(
                "Conv bias has {} values for {m} channels",
                io.input(2)?.numel()
            )));
        }
        let window = Window {
            output: &geo.output,
            kernel: &geo.kernel,
            strides: &geo.strides,
            pads: front3(&geo.pads_begin, 0)?,
            dilations: &geo.dilations,
        };
        let g = conv_geom(x, m, groups, &window, has_bias)?;
        let (xp, wp, yp) = (io.in_ptr(0)?, io.in_ptr(1)?, io.out_ptr(0)?);
        let bp = if has_bias { io.in_ptr(2)? } else { 0 };
        match choose(cg, mg, ks, n * os, groups, gpu.sms as usize, self.dtype) {
            Plan::Direct => {
                let f = gpu.function(Kernel::Conv, entry("conv_direct", self.dtype)?)?;
                let args =
                    Args::new().push(g).push(total as i64).push(xp).push(wp).push(bp).push(yp);
                // SAFETY: matches `conv_direct_T(ConvGeom, i64, const T*, const T*, const T*, T*)`;
                // the geometry was checked against every tensor's shape, the bias is
                // read only when present, and the output holds `total` elements.
                unsafe { args.launch(gpu, &f, gpu.grid(total as u64)) }
            }
            Plan::Gemm { rows, cols, splits, chunk } => {
                let too_big = || EpError::Unsupported("Conv too large for the CUDA grid".into());
                let dim = |v: usize, most: usize| {
                    u32::try_from(v).ok().filter(|&v| v as usize <= most).ok_or_else(too_big)
                };
                let cfg = cudarc::driver::LaunchConfig {
                    grid_dim: (
                        dim((n * os).div_ceil(cols), i32::MAX as usize)?,
                        dim(mg.div_ceil(rows), 65535)?,
                        dim(groups * splits, 65535)?,
                    ),
                    block_dim: (256, 1, 1),
                    shared_mem_bytes: 0,
                };
                let g = ConvGeom { k_chunk: i32_of(chunk)?, splits: splits as i32, ..g };
                if splits > 1 {
                    let zero = gpu.function(Kernel::Conv, "conv_zero_f32")?;
                    let args = Args::new().push(total as i64).push(yp);
                    // SAFETY: matches `conv_zero_f32(i64, float*)`; split K is chosen for f32
                    // outputs only, and Y holds `total` of them.
                    unsafe { args.launch(gpu, &zero, gpu.grid(total as u64)) }?;
                }
                let f =
                    gpu.function(Kernel::Conv, entry(&format!("conv_gemm{rows}"), self.dtype)?)?;
                let args = Args::new().push(g).push(xp).push(wp).push(bp).push(yp);
                // SAFETY: matches `conv_gemmB_T(ConvGeom, const T*, const T*, const T*, T*)`
                // with the 256 threads a block it is written for; the grid covers the
                // column tiles × the row tiles × groups × K splits, and the kernel guards
                // every row, column and K index against the checked geometry.
                unsafe { args.launch(gpu, &f, cfg) }
            }
        }
    }
}

/// ConvTranspose over one dtype: `conv_transpose_T`, one thread per output element.
struct ConvTransposeKernel {
    op: ConvTranspose,
    dtype: DType,
}

impl CudaKernel for ConvTransposeKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
        let (x, w, y) = (&io.input(0)?.shape, &io.input(1)?.shape, &io.output(0)?.shape);
        let groups = self.op.group.max(1);
        if x.len() < 3 || w.len() != x.len() || w[0] != x[1] || x[1] % groups != 0 {
            return Err(EpError::Kernel(format!(
                "ConvTranspose X {x:?} and W {w:?} do not fit group {groups}"
            )));
        }
        let geo = self.op.geometry(&x[2..], &w[2..]).map_err(|e| EpError::Kernel(e.to_string()))?;
        let (n, mg) = (x[0], w[1]);
        let m = mg * groups;
        let mut want = vec![n, m];
        want.extend(&geo.output);
        if y != &want {
            return Err(EpError::Kernel(format!("ConvTranspose output {y:?}, expected {want:?}")));
        }
        let total: usize = y.iter().product();
        if total == 0 {
            return Ok(());
        }
        let has_bias = io.has_input(2);
        if has_bias && io.input(2)?.numel() != m {
            return Err(EpError::Kernel(format!(
                "ConvTranspose bias has {} values for {m} channels",
                io.input(2)?.numel()
            )));
        }
        front3(&x[2..], 1)?; // at most three spatial dims
        if geo.pads_begin.iter().any(|&p| i32::try_from(p).is_err()) {
            return Err(EpError::Unsupported("ConvTranspose pads beyond 32 bits".into()));
        }
        let mut pads = [0i32; 3];
        for (slot, &p) in pads[3 - geo.pads_begin.len()..].iter_mut().zip(&geo.pads_begin) {
            *slot = p as i32;
        }
        let window = Window {
            output: &geo.output,
            kernel: &w[2..],
            strides: &geo.strides,
            pads,
            dilations: &geo.dilations,
        };
        let g = conv_geom(x, m, groups, &window, has_bias)?;
        let bp = if has_bias { io.in_ptr(2)? } else { 0 };
        let f = gpu.function(Kernel::Conv, entry("conv_transpose", self.dtype)?)?;
        let args = Args::new()
            .push(g)
            .push(total as i64)
            .push(io.in_ptr(0)?)
            .push(io.in_ptr(1)?)
            .push(bp)
            .push(io.out_ptr(0)?);
        // SAFETY: matches `conv_transpose_T(ConvGeom, i64, const T*, const T*, const T*, T*)`;
        // the geometry was checked against every tensor's shape, the bias is read
        // only when present, and the output holds `total` elements.
        unsafe { args.launch(gpu, &f, gpu.grid(total as u64)) }
    }
}

fn build_conv_transpose(spec: &KernelSpec<'_>) -> Result<Box<dyn CudaKernel>, EpError> {
    let dtype = spec.input_dtype(0)?;
    if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16 | DType::F64)
        || spec.input_dtype(1)? != dtype
    {
        return Err(unsupported("ConvTranspose", dtype));
    }
    Ok(Box::new(ConvTransposeKernel { op: spec.op_as::<ConvTranspose>()?.clone(), dtype }))
}

fn build_conv(spec: &KernelSpec<'_>) -> Result<Box<dyn CudaKernel>, EpError> {
    let dtype = spec.input_dtype(0)?;
    if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16 | DType::F64) {
        return Err(unsupported("Conv", dtype));
    }
    if spec.input_dtype(1)? != dtype {
        return Err(unsupported("Conv with weights of another dtype", dtype));
    }
    Ok(Box::new(ConvKernel { op: spec.op_as::<Conv>()?.clone(), dtype }))
}

/// Registers Conv and ConvTranspose.
pub(crate) fn register_all(r: &mut Registry) {
    r.register("Conv", build_conv);
    r.register("ConvTranspose", build_conv_transpose);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_geometry_struct_has_the_size_of_its_cuda_twin() {
        // 5 i64, 25 i32 and 3 FastDiv of 16 bytes, padded to 8.
        assert_eq!(std::mem::size_of::<ConvGeom>(), 192);
        assert_eq!(std::mem::size_of::<FastDiv>(), 16);
    }

    #[test]
    fn fast_division_matches_integer_division_for_kernel_sized_divisors() {
        let divisors = (1..300u32).chain([343, 1000, 4096, 65535, 65536, 1 << 20, (1 << 31) - 1]);
        for d in divisors {
            let f = FastDiv::new(d);
            let probes = (0..2000u32).chain([
                d - 1,
                d,
                d + 1,
                d.saturating_mul(3),
                1 << 20,
                (1 << 31) - 1,
                (1 << 31) - d.min(1 << 30),
            ]);
            for n in probes.filter(|&n| n < 1 << 31) {
                assert_eq!(f.div(n), n / d, "{n} / {d}");
            }
        }
    }

    #[test]
    fn one_and_two_dim_windows_become_three_dim_with_unit_leading_dims() {
        assert_eq!(front3(&[5], 1).unwrap(), [1, 1, 5]);
        assert_eq!(front3(&[4, 6], 0).unwrap(), [0, 4, 6]);
        assert!(front3(&[1, 2, 3, 4], 1).is_err());
    }

    #[test]
    fn depthwise_convolutions_run_directly_and_small_outputs_split_k() {
        let gemm = |rows, cols, splits, chunk| Plan::Gemm { rows, cols, splits, chunk };
        // Depthwise and thin, short-K convolutions.
        assert_eq!(choose(1, 1, 9, 112 * 112, 32, 132, DType::F32), Plan::Direct);
        assert_eq!(choose(27, 3, 1, 4096, 1, 132, DType::F32), Plan::Direct);
        // Wide ones on the large tile, or the 64 tile for f64.
        assert_eq!(choose(256, 256, 9, 56 * 56 * 8, 1, 132, DType::F32), gemm(128, 128, 1, 2304));
        assert_eq!(choose(256, 256, 9, 56 * 56 * 8, 1, 132, DType::F64), gemm(64, 64, 1, 2304));
        // A 7×7 output: 32 tiles, K = 4608 split 9 ways in steps of 16.
        assert_eq!(choose(512, 512, 9, 49, 1, 132, DType::F32), gemm(32, 32, 9, 512));
        assert_eq!(choose(512, 512, 9, 49, 1, 132, DType::F16), gemm(32, 32, 1, 4608));
        // Thin but long K: the 16-row tile.
        assert_eq!(choose(64, 3, 49, 12544, 1, 132, DType::F32), gemm(16, 64, 1, 3136));
        // Splits never exceed K / (8 steps).
        assert_eq!(choose(8, 64, 1, 64, 1, 132, DType::F32), gemm(32, 32, 1, 16));
    }
}
