//! Conv as im2col + GEMM over any number of spatial dims, with groups,
//! dilations and padding; 1×1 stride-1 convolutions skip im2col entirely.

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::conv::{Conv, Geometry};
use onyx_core::shape::Dim;
use rayon::prelude::*;

use super::fastmath::vectorized;
use super::matmul::{GemmType, Mat, gemm_into};
use super::{CpuKernel, KernelIo, KernelRegistry, in_dtype, op, unsupported_dtype};

/// For one spatial dim and kernel offset: the input index of each output position (-1 in padding).
fn index_map(geo: &Geometry, d: usize, k: usize, input: usize) -> Vec<isize> {
    (0..geo.output[d])
        .map(|o| {
            let i =
                (o * geo.strides[d] + k * geo.dilations[d]) as isize - geo.pads_begin[d] as isize;
            if i >= 0 && (i as usize) < input { i } else { -1 }
        })
        .collect()
}

/// Unravels `index` over `dims` (row-major).
pub(crate) fn unravel(mut index: usize, dims: &[usize]) -> Vec<usize> {
    let mut out = vec![0; dims.len()];
    for d in (0..dims.len()).rev() {
        out[d] = index % dims[d];
        index /= dims[d];
    }
    out
}

/// Fills `col` ([C × prod(kernel)] rows of [prod(output)]) from one image `x` ([C, in…]).
fn im2col<T: Copy + Send + Sync + num_traits::Zero>(
    x: &[T],
    in_dims: &[usize],
    geo: &Geometry,
    col: &mut [T],
) {
    let ks: usize = geo.kernel.iter().product();
    let os: usize = geo.output.iter().product();
    let plane: usize = in_dims.iter().product();
    let rank = in_dims.len();
    let in_strides = onyx_core::shape::strides(in_dims);
    col.par_chunks_mut(os.max(1)).enumerate().for_each(|(row, dst)| {
        let c = row / ks;
        let k = unravel(row % ks, &geo.kernel);
        let maps: Vec<Vec<isize>> =
            (0..rank).map(|d| index_map(geo, d, k[d], in_dims[d])).collect();
        let src = &x[c * plane..(c + 1) * plane];
        let inner = geo.output[rank - 1];
        let outer = os / inner.max(1);
        let last = &maps[rank - 1];
        for o in 0..outer {
            let pos = unravel(o, &geo.output[..rank - 1]);
            let mut base = 0isize;
            for d in 0..rank - 1 {
                let i = maps[d][pos[d]];
                if i < 0 {
                    base = -1;
                    break;
                }
                base += i * in_strides[d] as isize;
            }
            let row_out = &mut dst[o * inner..(o + 1) * inner];
            if base < 0 {
                row_out.fill(T::zero());
                continue;
            }
            for (slot, &i) in row_out.iter_mut().zip(last) {
                *slot = if i < 0 { T::zero() } else { src[(base + i) as usize] };
            }
        }
    });
}

struct ConvKernel {
    op: Conv,
    dtype: DType,
}

/// A depthwise 2-D convolution (one input channel per group, any channel
/// multiplier) in f32, computed directly: im2col + GEMM would run one tiny
/// GEMM per channel. One output plane per task.
fn depthwise2d(io: &KernelIo, xs: &[usize], mg: usize, geo: &Geometry) -> Result<(), EpError> {
    let (c, h, w) = (xs[1], xs[2], xs[3]);
    let (kh, kw) = (geo.kernel[0], geo.kernel[1]);
    let (oh, ow) = (geo.output[0], geo.output[1]);
    let (sh, sw) = (geo.strides[0], geo.strides[1]);
    let (dh, dw) = (geo.dilations[0], geo.dilations[1]);
    let (ph, pw) = (geo.pads_begin[0] as isize, geo.pads_begin[1] as isize);
    let m = c * mg;
    let x = io.input::<f32>(0)?;
    let wt = io.input::<f32>(1)?;
    let bias = match io.input_view(2) {
        Some(_) => Some(io.input::<f32>(2)?),
        None => None,
    };
    let out = io.output::<f32>(0)?;
    out.par_chunks_mut((oh * ow).max(1)).enumerate().for_each(|(plane, dst)| {
        vectorized(|| {
            let (b, om) = (plane / m, plane % m);
            let src = &x[(b * c + om / mg) * h * w..][..h * w];
            let k = &wt[om * kh * kw..][..kh * kw];
            let start = bias.map_or(0.0, |bs| bs[om]);
            for oy in 0..oh {
                let drow = &mut dst[oy * ow..][..ow];
                drow.fill(start);
                for ky in 0..kh {
                    let iy = (oy * sh + ky * dh) as isize - ph;
                    if iy < 0 || iy >= h as isize {
                        continue;
                    }
                    let srow = &src[iy as usize * w..][..w];
                    for kx in 0..kw {
                        let kv = k[ky * kw + kx];
                        // Output column ox reads input column ox·sw + off; keep those inside.
                        let off = (kx * dw) as isize - pw;
                        let lo = if off < 0 { (-off as usize).div_ceil(sw) } else { 0 }.min(ow);
                        let last = w as isize - 1 - off;
                        let hi = if last < 0 { 0 } else { (last as usize / sw + 1).min(ow) };
                        if lo >= hi {
                            continue;
                        }
                        let first = (lo * sw) as isize + off;
                        if sw == 1 {
                            let s = &srow[first as usize..first as usize + (hi - lo)];
                            for (d, &v) in drow[lo..hi].iter_mut().zip(s) {
                                *d += v * kv;
                            }
                        } else {
                            for (j, d) in drow[lo..hi].iter_mut().enumerate() {
                                *d += srow[first as usize + j * sw] * kv;
                            }
                        }
                    }
                }
            }
        })
    });
    Ok(())
}

fn conv<T: GemmType + bytemuck::Pod + num_traits::Zero>(
    io: &KernelIo,
    c: &Conv,
) -> Result<(), EpError> {
    let (vx, vw) = (io.in_view(0)?, io.in_view(1)?);
    let (xs, ws) = (vx.shape.clone(), vw.shape.clone());
    let dims: Vec<Dim> = ws.iter().map(|&d| Dim::Known(d)).collect();
    let kernel = c.kernel(Some(&dims)).map_err(|e| EpError::Kernel(e.to_string()))?;
    let kernel = kernel.ok_or_else(|| EpError::Kernel("Conv kernel shape unknown".into()))?;
    let geo = c.window.geometry(&xs[2..], &kernel).map_err(|e| EpError::Kernel(e.to_string()))?;
    let (n, cin, m) = (xs[0], xs[1], ws[0]);
    let g = c.group;
    if cin % g != 0 || m % g != 0 || ws[1] * g != cin {
        return Err(EpError::Kernel(format!(
            "Conv channels {cin} / weights {ws:?} do not fit group {g}"
        )));
    }
    let (cg, mg) = (cin / g, m / g);
    if cg == 1
        && g > 1
        && xs.len() == 4
        && std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>()
    {
        return depthwise2d(io, &xs, mg, &geo);
    }
    let ks: usize = kernel.iter().product();
    let is: usize = xs[2..].iter().product();
    let os: usize = geo.output.iter().product();
    let x = io.input::<T>(0)?;
    let w = io.input::<T>(1)?;
    let bias = match io.input_view(2) {
        Some(_) => Some(io.input::<T>(2)?),
        None => None,
    };
    let out = io.output::<T>(0)?;
    let pointwise = ks == 1
        && geo.strides.iter().all(|&s| s == 1)
        && geo.pads_begin.iter().chain(&geo.pads_end).all(|&p| p == 0);
    let mut col = if pointwise { Vec::new() } else { vec![T::zero(); cg * ks * os] };
    for b in 0..n {
        for gi in 0..g {
            let x_off = (b * cin + gi * cg) * is;
            let out_off = (b * m + gi * mg) * os;
            let wm = Mat::row_major(gi * mg * cg * ks, cg * ks, false);
            if pointwise {
                // SAFETY: the image group is cg × os contiguous; out block is mg × os.
                unsafe {
                    gemm_into(
                        (mg, os, cg),
                        out,
                        out_off,
                        w,
                        wm,
                        x,
                        Mat::row_major(x_off, os, false),
                        false,
                        T::one(),
                    )
                };
            } else {
                im2col(&x[x_off..x_off + cg * is], &xs[2..], &geo, &mut col);
                // SAFETY: col is (cg·ks) × os; weights for the group are mg × (cg·ks).
                unsafe {
                    gemm_into(
                        (mg, os, cg * ks),
                        out,
                        out_off,
                        w,
                        wm,
                        &col,
                        Mat::row_major(0, os, false),
                        false,
                        T::one(),
                    )
                };
            }
        }
        if let Some(bias) = bias {
            out[b * m * os..(b + 1) * m * os]
                .par_chunks_mut(os.max(1))
                .zip(bias.par_iter())
                .for_each(|(row, &bv)| row.iter_mut().for_each(|v| *v = *v + bv));
        }
    }
    Ok(())
}

impl CpuKernel for ConvKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        match self.dtype {
            DType::F32 => conv::<f32>(io, &self.op),
            DType::F64 => conv::<f64>(io, &self.op),
            DType::F16 => conv::<half::f16>(io, &self.op),
            d => Err(unsupported_dtype("Conv", d)),
        }
    }
}

fn build_conv(spec: &KernelSpec<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let c = op::<Conv>(spec)?.clone();
    let dtype = in_dtype(spec, 0)?;
    if !matches!(dtype, DType::F32 | DType::F64 | DType::F16) {
        return Err(unsupported_dtype("Conv", dtype));
    }
    Ok(Box::new(ConvKernel { op: c, dtype }))
}

/// Registers Conv.
pub fn register_all(r: &mut KernelRegistry) {
    r.register("Conv", build_conv);
}

#[cfg(test)]
mod tests {
    use super::*;
    use onyx_core::ops::conv::{AutoPad, Window};

    #[test]
    fn im2col_pads_with_zeros() {
        // 1 channel, 3×3 input, 2×2 kernel, pad 1 at the start: 3×3 output.
        let w = Window {
            kernel: None,
            strides: None,
            dilations: None,
            pads: Some(vec![1, 1, 0, 0]),
            auto_pad: AutoPad::NotSet,
            ceil_mode: false,
        };
        let geo = w.geometry(&[3, 3], &[2, 2]).unwrap();
        assert_eq!(geo.output, vec![3, 3]);
        let x: Vec<f32> = (1..=9).map(|v| v as f32).collect();
        let mut col = vec![0f32; 4 * 9];
        im2col(&x, &[3, 3], &geo, &mut col);
        // Kernel offset (0,0) reads x[o - 1]: the first row and column are padding.
        assert_eq!(&col[..9], &[0., 0., 0., 0., 1., 2., 0., 4., 5.]);
        // Kernel offset (1,1) reads x[o]: the input itself.
        assert_eq!(&col[27..], &[1., 2., 3., 4., 5., 6., 7., 8., 9.]);
    }
}
