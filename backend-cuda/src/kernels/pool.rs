//! Pooling: MaxPool (with the optional Indices output and storage_order) and
//! AveragePool over 1-d, 2-d and 3-d windows with strides, dilations, pads,
//! auto_pad, ceil_mode and count_include_pad; GlobalMaxPool and
//! GlobalAveragePool over any number of spatial dims. Floats (f32, f16, bf16,
//! f64) everywhere, and u8/i8 for MaxPool, as the CPU backend.

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::conv::{GlobalPool, Pool, PoolKind};
use onyx_kernels::Kernel;

use super::conv::front3;
use super::elementwise::entry;
use super::{CudaKernel, Io, Registry, is_float, unsupported};
use crate::gpu::{Args, Gpu};

/// `PoolGeom` in pool.cu.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
struct PoolGeom {
    total: i64,
    is: i64,
    os: i64,
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
    e_d: i32,
    e_h: i32,
    e_w: i32,
    d_d: i32,
    d_h: i32,
    d_w: i32,
    c_d: i32,
    c_h: i32,
    c_w: i32,
    count_include_pad: i32,
    has_indices: i32,
}

// SAFETY: plain `#[repr(C)]` data matching `struct PoolGeom` in pool.cu.
unsafe impl cudarc::driver::DeviceRepr for PoolGeom {}

/// Strides of the Indices output over the spatial dims, padded in front to
/// three: row-major, or column-major for `storage_order = 1` (the first
/// spatial dim varies fastest), as the CPU backend numbers them.
fn index_strides(spatial: &[usize], column_major: bool) -> Result<[i32; 3], EpError> {
    let r = spatial.len();
    let mut s = vec![1usize; r];
    if column_major {
        for d in 1..r {
            s[d] = s[d - 1] * spatial[d - 1];
        }
    } else {
        for d in (0..r.saturating_sub(1)).rev() {
            s[d] = s[d + 1] * spatial[d + 1];
        }
    }
    front3(&s, 0)
}

/// The launch geometry of a windowed pool over X with spatial dims `spatial`.
fn pool_geometry(p: &Pool, x: &[usize], indices: bool) -> Result<(PoolGeom, Vec<usize>), EpError> {
    if x.len() < 3 {
        return Err(EpError::Kernel(format!("pooling needs X [N,C,…], got {x:?}")));
    }
    let spatial = &x[2..];
    let geo = p.window.geometry(spatial, p.kernel()).map_err(|e| EpError::Kernel(e.to_string()))?;
    let is: usize = spatial.iter().product();
    let os: usize = geo.output.iter().product();
    let ends: Vec<usize> = spatial.iter().zip(&geo.pads_end).map(|(a, b)| a + b).collect();
    let [in_d, in_h, in_w] = front3(spatial, 1)?;
    let [_, out_h, out_w] = front3(&geo.output, 1)?;
    let [k_d, k_h, k_w] = front3(&geo.kernel, 1)?;
    let [s_d, s_h, s_w] = front3(&geo.strides, 1)?;
    let [p_d, p_h, p_w] = front3(&geo.pads_begin, 0)?;
    let [e_d, e_h, e_w] = front3(&ends, 1)?;
    let [d_d, d_h, d_w] = front3(&geo.dilations, 1)?;
    let [c_d, c_h, c_w] = index_strides(spatial, p.storage_order == 1)?;
    super::i32_of(os)?;
    let mut out = x[..2].to_vec();
    out.extend(&geo.output);
    let g = PoolGeom {
        total: (x[0] * x[1] * os) as i64,
        is: is as i64,
        os: os as i64,
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
        e_d,
        e_h,
        e_w,
        d_d,
        d_h,
        d_w,
        c_d,
        c_h,
        c_w,
        count_include_pad: matches!(p.kind, PoolKind::Average { count_include_pad: true }) as i32,
        has_indices: indices as i32,
    };
    Ok((g, out))
}

/// MaxPool or AveragePool over one dtype.
struct PoolKernel {
    op: Pool,
    name: &'static str,
}

impl CudaKernel for PoolKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
        let max = self.op.kind == PoolKind::Max;
        let indices = max && io.has_output(1);
        let (g, out) = pool_geometry(&self.op, &io.input(0)?.shape, indices)?;
        if io.output(0)?.shape != out || (indices && io.output(1)?.shape != out) {
            return Err(EpError::Kernel(format!("pooling output is not {out:?}")));
        }
        if g.total == 0 {
            return Ok(());
        }
        let f = gpu.function(Kernel::Pool, self.name)?;
        let mut args = Args::new().push(g).push(io.in_ptr(0)?).push(io.out_ptr(0)?);
        if max {
            args = args.push(if indices { io.out_ptr(1)? } else { 0u64 });
        }
        // SAFETY: matches `max_pool_T(PoolGeom, const T*, T*, i64*)` or
        // `avg_pool_T(PoolGeom, const T*, T*)`; the geometry comes from X's shape,
        // the outputs were checked to hold `total` elements, and Indices is
        // written only when present.
        unsafe { args.launch(gpu, &f, gpu.grid(g.total as u64)) }
    }
}

fn build_pool(spec: &KernelSpec<'_>) -> Result<Box<dyn CudaKernel>, EpError> {
    let p = spec.op_as::<Pool>()?.clone();
    let dtype = spec.input_dtype(0)?;
    let name = match p.kind {
        PoolKind::Max if is_float(dtype) || matches!(dtype, DType::U8 | DType::I8) => {
            entry("max_pool", dtype)?
        }
        PoolKind::Average { .. } if is_float(dtype) => entry("avg_pool", dtype)?,
        _ => return Err(unsupported(&spec.node.op_type, dtype)),
    };
    Ok(Box::new(PoolKernel { op: p, name }))
}

/// GlobalMaxPool / GlobalAveragePool: a warp per plane, or a block per plane
/// for large planes.
struct GlobalKernel {
    max: bool,
    dtype: DType,
}

/// Planes at least this large get a whole block.
const BLOCK_PLANE: usize = 4096;

impl CudaKernel for GlobalKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
        let x = &io.input(0)?.shape;
        if x.len() < 2 {
            return Err(EpError::Kernel(format!("global pooling needs X [N,C,…], got {x:?}")));
        }
        let planes = x[0] * x[1];
        let is: usize = x[2..].iter().product();
        if io.output(0)?.numel() != planes {
            return Err(EpError::Kernel("global pooling output size".into()));
        }
        if planes == 0 {
            return Ok(());
        }
        let kind = if self.max { "global_max" } else { "global_avg" };
        let blocks = is >= BLOCK_PLANE;
        let prefix = format!("{kind}_{}", if blocks { "block" } else { "warp" });
        let f = gpu.function(Kernel::Pool, entry(&prefix, self.dtype)?)?;
        let cfg = if blocks {
            let n = planes.min(gpu.sms as usize * 32) as u32;
            cudarc::driver::LaunchConfig {
                grid_dim: (n, 1, 1),
                block_dim: (256, 1, 1),
                shared_mem_bytes: 0,
            }
        } else {
            gpu.grid(planes as u64 * 32)
        };
        let args = Args::new()
            .push(planes as i64)
            .push(is as i64)
            .push(io.in_ptr(0)?)
            .push(io.out_ptr(0)?);
        // SAFETY: matches `global_{max,avg}_{warp,block}_T(i64, i64, const T*, T*)`;
        // X holds planes × is elements and Y holds `planes`; block kernels get the
        // 256 threads they are written for, warp kernels whole warps.
        unsafe { args.launch(gpu, &f, cfg) }
    }
}

fn build_global(spec: &KernelSpec<'_>) -> Result<Box<dyn CudaKernel>, EpError> {
    let max = spec.op_as::<GlobalPool>()?.max;
    let dtype = spec.input_dtype(0)?;
    if !is_float(dtype) {
        return Err(unsupported(&spec.node.op_type, dtype));
    }
    Ok(Box::new(GlobalKernel { max, dtype }))
}

/// Registers the pooling kernels.
pub(crate) fn register_all(r: &mut Registry) {
    r.register("MaxPool", build_pool);
    r.register("AveragePool", build_pool);
    r.register("GlobalMaxPool", build_global);
    r.register("GlobalAveragePool", build_global);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_geometry_struct_has_the_size_of_its_cuda_twin() {
        // 3 i64 and 26 i32.
        assert_eq!(std::mem::size_of::<PoolGeom>(), 128);
    }

    #[test]
    fn column_major_indices_let_the_first_spatial_dim_vary_fastest() {
        assert_eq!(index_strides(&[4, 5], false).unwrap(), [0, 5, 1]);
        assert_eq!(index_strides(&[4, 5], true).unwrap(), [0, 1, 4]);
        assert_eq!(index_strides(&[2, 3, 4], true).unwrap(), [1, 2, 6]);
        assert_eq!(index_strides(&[7], false).unwrap(), [0, 0, 1]);
    }
}
