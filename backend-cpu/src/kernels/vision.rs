//! AffineGrid, GridSample (nearest, linear and cubic over any number of
//! spatial dims), DeformConv (bilinear sampling into columns, then a `gemm`
//! per group), RoiAlign and NonMaxSuppression. Sampling is computed in f64.

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::vision::{
    AffineGrid, DeformConv, GridSample, NonMaxSuppression, RoiAlign, SampleMode, SamplePadding,
};
use rayon::prelude::*;

use crate::par::Loop;

use super::conv::unravel;
use super::dispatch::{AsF64, floats, numeric};
use super::matmul::{GemmType, Mat, gemm_into};
use super::{CpuKernel, KernelIo, KernelRegistry, unsupported_dtype};

fn affine_grid<T: AsF64 + bytemuck::Pod + Send + Sync>(
    io: &KernelIo,
    a: &AffineGrid,
) -> Result<(), EpError> {
    let size = io.ints(1)?;
    let spatial: Vec<usize> =
        size.get(2..).unwrap_or(&[]).iter().map(|&d| d.max(0) as usize).collect();
    let s = spatial.len();
    let theta: Vec<f64> = io.input::<T>(0)?.iter().map(|v| v.to_f64()).collect();
    if theta.len() != size.first().copied().unwrap_or(0).max(0) as usize * s * (s + 1) {
        return Err(EpError::Kernel(format!("theta does not fit size {size:?}")));
    }
    let axes: Vec<Vec<f64>> = spatial.iter().map(|&n| a.axis(n)).collect();
    let points: usize = spatial.iter().product();
    let out = io.output::<T>(0)?;
    if points * s == 0 {
        return Ok(());
    }
    out.par_chunks_mut(points * s).enumerate().each(|(n, dst)| {
        let th = &theta[n * s * (s + 1)..][..s * (s + 1)];
        for (p, o) in dst.chunks_mut(s).enumerate() {
            let pos = unravel(p, &spatial);
            // Homogeneous base point in reversed axis order: (x, y[, z], 1).
            let base: Vec<f64> =
                (0..s).map(|c| axes[s - 1 - c][pos[s - 1 - c]]).chain([1.0]).collect();
            for (r, v) in o.iter_mut().enumerate() {
                *v = T::from_f64(
                    th[r * (s + 1)..][..s + 1].iter().zip(&base).map(|(t, b)| t * b).sum(),
                );
            }
        }
    });
    Ok(())
}

/// Reflects `x` into `[lo, hi]` by folding at the edges.
fn reflect(x: f64, lo: f64, hi: f64) -> f64 {
    let range = hi - lo;
    if range <= 0.0 {
        return lo;
    }
    let fold = |dx: f64, near: f64, far: f64, dir: f64| {
        let n = (dx / range).trunc();
        let r = dx - n * range;
        if n % 2.0 == 0.0 { near + dir * r } else { far - dir * r }
    };
    if x < lo {
        fold(lo - x, lo, hi, 1.0)
    } else if x > hi {
        fold(x - hi, hi, lo, -1.0)
    } else {
        x
    }
}

/// Keys' cubic convolution weights for a fractional offset `t` (α = −0.75).
fn cubic_weights(t: f64) -> [f64; 4] {
    let a = -0.75;
    let far = |x: f64| ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
    let near = |x: f64| ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    [far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t)]
}

fn grid_sample<T: AsF64 + bytemuck::Pod + Send + Sync>(
    io: &KernelIo,
    g: &GridSample,
) -> Result<(), EpError> {
    let xs = io.in_view(0)?.shape.clone();
    let gs = io.in_view(1)?.shape.clone();
    if xs.len() < 3 || gs.len() != xs.len() || gs[0] != xs[0] || gs[xs.len() - 1] != xs.len() - 2 {
        return Err(EpError::Kernel(format!("GridSample X {xs:?} and grid {gs:?} do not fit")));
    }
    let s = xs.len() - 2;
    let spatial = &xs[2..];
    let grid = io.floats(1)?;
    let (c, plane): (usize, usize) = (xs[1], spatial.iter().product());
    let points: usize = gs[1..gs.len() - 1].iter().product();
    let x: Vec<f64> = io.input::<T>(0)?.iter().map(|v| v.to_f64()).collect();
    let out = io.output::<T>(0)?;
    if points == 0 || plane == 0 {
        return Ok(());
    }
    let bounds: Vec<(f64, f64)> = spatial
        .iter()
        .map(|&n| if g.align_corners { (0.0, n as f64 - 1.0) } else { (-0.5, n as f64 - 0.5) })
        .collect();
    // The pixel index along axis `d` for a tap, or `None` when it reads as zero.
    let pixel = |d: usize, i: i64| -> Option<usize> {
        let n = spatial[d] as i64;
        let i = match g.padding {
            SamplePadding::Zeros => i,
            SamplePadding::Border => i.clamp(0, n - 1),
            SamplePadding::Reflection => reflect(i as f64, bounds[d].0, bounds[d].1) as i64,
        };
        (0..n).contains(&i).then_some(i as usize)
    };
    out.par_chunks_mut(points).enumerate().each(|(nc, dst)| {
        let b = nc / c.max(1);
        let src = &x[nc * plane..][..plane];
        for (p, o) in dst.iter_mut().enumerate() {
            let at = &grid[(b * points + p) * s..][..s];
            // Per axis: the taps (index, weight).
            let taps: Vec<Vec<(i64, f64)>> = (0..s)
                .map(|d| {
                    let (n, v) = (spatial[d] as f64, at[s - 1 - d]);
                    let mut u = if g.align_corners {
                        (v + 1.0) / 2.0 * (n - 1.0)
                    } else {
                        ((v + 1.0) * n - 1.0) / 2.0
                    };
                    if g.mode == SampleMode::Nearest {
                        u = u.round_ties_even();
                    }
                    let (lo, hi) = bounds[d];
                    if u < lo || u > hi {
                        match g.padding {
                            SamplePadding::Border => u = u.clamp(0.0, n - 1.0),
                            SamplePadding::Reflection => u = reflect(u, lo, hi),
                            SamplePadding::Zeros => {}
                        }
                    }
                    let f = u.floor();
                    let (i0, t) = (f as i64, u - f);
                    match g.mode {
                        SampleMode::Nearest => vec![(u as i64, 1.0)],
                        SampleMode::Linear => vec![(i0, 1.0 - t), (i0 + 1, t)],
                        SampleMode::Cubic => {
                            let w = cubic_weights(t);
                            (0..4).map(|k| (i0 - 1 + k as i64, w[k as usize])).collect()
                        }
                    }
                })
                .collect();
            let counts: Vec<usize> = taps.iter().map(Vec::len).collect();
            let mut acc = 0.0;
            for combo in 0..counts.iter().product() {
                let pick = unravel(combo, &counts);
                let mut weight = 1.0;
                let mut flat = Some(0usize);
                for d in 0..s {
                    let (i, w) = taps[d][pick[d]];
                    weight *= w;
                    flat = flat.zip(pixel(d, i)).map(|(f, i)| f * spatial[d] + i);
                }
                if let Some(f) = flat {
                    acc += weight * src[f];
                }
            }
            *o = T::from_f64(acc);
        }
    });
    Ok(())
}

/// Bilinear sample of a row-major image of `dims` at `coord`, zero outside.
fn bilinear(src: &[f64], dims: &[usize], coord: &[f64]) -> f64 {
    let s = dims.len();
    let mut acc = 0.0;
    'taps: for combo in 0..1usize << s {
        let (mut weight, mut flat) = (1.0, 0usize);
        for d in 0..s {
            let f = coord[d].floor();
            let (hi, t) = ((combo >> (s - 1 - d)) & 1 == 1, coord[d] - f);
            let i = f as i64 + hi as i64;
            if i < 0 || i >= dims[d] as i64 {
                continue 'taps;
            }
            weight *= if hi { t } else { 1.0 - t };
            flat = flat * dims[d] + i as usize;
        }
        acc += weight * src[flat];
    }
    acc
}

/// Input `i` (of float type `dtype`) as f64s.
fn wide(io: &KernelIo, i: usize, dtype: DType) -> Result<Vec<f64>, EpError> {
    floats!(dtype, T => Ok(io.input::<T>(i)?.iter().map(|v| v.to_f64()).collect()),
        else Err(unsupported_dtype("DeformConv", dtype)))
}

fn deform_conv<W>(io: &KernelIo, dc: &DeformConv, dtype: DType) -> Result<(), EpError>
where
    W: GemmType + AsF64 + std::ops::Add<Output = W>,
{
    let (xs, ws, os) =
        (io.in_view(0)?.shape.clone(), io.in_view(1)?.shape.clone(), io.in_view(2)?.shape.clone());
    if xs.len() < 3 || ws.len() != xs.len() || os.len() != xs.len() {
        return Err(EpError::Kernel(format!("DeformConv X {xs:?}, W {ws:?} and offset {os:?}")));
    }
    let s = xs.len() - 2;
    let kernel = dc.window.kernel.clone().unwrap_or_else(|| ws[2..].to_vec());
    let (n, c, m, g, og) = (xs[0], xs[1], ws[0], dc.group, dc.offset_group);
    let (k, p): (usize, usize) = (kernel.iter().product(), os[2..].iter().product());
    let per = |v: &Option<Vec<usize>>, len: usize, d: usize| v.clone().unwrap_or(vec![d; len]);
    let (strides, dilations) = (per(&dc.window.strides, s, 1), per(&dc.window.dilations, s, 1));
    let pads = per(&dc.window.pads, 2 * s, 0);
    let mask_ok = !io.present(4) || io.in_view(4)?.shape.get(1) == Some(&(og * k));
    let fits = ws.len() == s + 2
        && kernel.len() == s
        && c % g == 0
        && m % g == 0
        && ws[1] * g == c
        && c % og == 0
        && os[0] == n
        && os[1] == og * k * s
        && strides.len() == s
        && dilations.len() == s
        && pads.len() == 2 * s
        && mask_ok;
    if !fits {
        return Err(EpError::Kernel(format!(
            "DeformConv X {xs:?}, W {ws:?} and offset {os:?} do not fit"
        )));
    }
    let (x, offset) = (wide(io, 0, dtype)?, wide(io, 2, dtype)?);
    let mask = if io.present(4) { Some(wide(io, 4, dtype)?) } else { None };
    let w: Vec<W> = wide(io, 1, dtype)?.into_iter().map(W::from_f64).collect();
    let bias = if io.present(3) { Some(wide(io, 3, dtype)?) } else { None };
    let (spatial, outs) = (&xs[2..], &os[2..]);
    let plane: usize = spatial.iter().product();
    let (cg, mg) = (c / g, m / g);
    let mut y = vec![W::zero(); n * m * p];
    let mut cols = vec![W::zero(); c * k * p];
    for b in 0..n {
        cols.par_chunks_mut((k * p).max(1)).enumerate().each(|(ic, rows)| {
            let group = ic / (c / og);
            let src = &x[(b * c + ic) * plane..][..plane];
            for (tap, row) in rows.chunks_mut(p.max(1)).enumerate() {
                let kpos = unravel(tap, &kernel);
                let off = &offset[(b * og + group) * k * s * p..];
                for (q, v) in row.iter_mut().enumerate() {
                    let opos = unravel(q, outs);
                    let coord: Vec<f64> = (0..s)
                        .map(|d| {
                            (opos[d] * strides[d] + kpos[d] * dilations[d]) as f64 - pads[d] as f64
                                + off[((tap * s) + d) * p + q]
                        })
                        .collect();
                    let scale =
                        mask.as_ref().map_or(1.0, |mk| mk[((b * og + group) * k + tap) * p + q]);
                    *v = W::from_f64(bilinear(src, spatial, &coord) * scale);
                }
            }
        });
        for gi in 0..g {
            if p > 0 && mg > 0 {
                // SAFETY: W's group block is mg × (cg·k), the columns' cg·k × p, and
                // `y` holds mg × p elements at the offset.
                unsafe {
                    gemm_into(
                        (mg, p, cg * k),
                        &mut y,
                        (b * m + gi * mg) * p,
                        &w,
                        Mat::row_major(gi * mg * cg * k, cg * k, false),
                        &cols,
                        Mat::row_major(gi * cg * k * p, p, false),
                        false,
                        W::one(),
                    )
                };
            }
        }
    }
    if let Some(bias) = bias {
        y.par_chunks_mut(p.max(1)).enumerate().each(|(i, row)| {
            let bv = W::from_f64(bias[i % m]);
            row.iter_mut().for_each(|v| *v = *v + bv);
        });
    }
    floats!(dtype, T => {
        io.output::<T>(0)?.iter_mut().zip(&y).for_each(|(o, v)| *o = T::from_f64(v.to_f64()));
        Ok(())
    }, else Err(unsupported_dtype("DeformConv", dtype)))
}

struct DeformConvKernel {
    dtype: DType,
    op: DeformConv,
}

impl CpuKernel for DeformConvKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        match self.dtype {
            DType::F64 => deform_conv::<f64>(io, &self.op, self.dtype),
            _ => deform_conv::<f32>(io, &self.op, self.dtype),
        }
    }
}

fn roi_align<T: AsF64 + bytemuck::Pod + Send + Sync>(
    io: &KernelIo,
    ra: &RoiAlign,
) -> Result<(), EpError> {
    let xs = io.in_view(0)?.shape.clone();
    let [batches, channels, height, width] = xs[..] else {
        return Err(EpError::Kernel(format!("RoiAlign X {xs:?} is not 4-D")));
    };
    if height == 0 || width == 0 {
        return Err(EpError::Kernel(format!("RoiAlign over an empty feature map {xs:?}")));
    }
    let rois: Vec<f64> = io.input::<T>(1)?.iter().map(|v| v.to_f64()).collect();
    let batch = io.ints(2)?;
    if rois.len() != batch.len() * 4 || batch.iter().any(|&b| b < 0 || b as usize >= batches) {
        return Err(EpError::Kernel("RoiAlign rois and batch_indices do not fit X".into()));
    }
    let x: Vec<f64> = io.input::<T>(0)?.iter().map(|v| v.to_f64()).collect();
    let (ph, pw) = (ra.output_height, ra.output_width);
    let out = io.output::<T>(0)?;
    let (h, w) = (height as f64, width as f64);
    if ph * pw * channels == 0 {
        return Ok(());
    }
    out.par_chunks_mut(channels * ph * pw).enumerate().each(|(r, dst)| {
        let scale = ra.spatial_scale as f64;
        let offset = if ra.half_pixel { 0.5 } else { 0.0 };
        let roi = &rois[r * 4..][..4];
        let (x0, y0) = (roi[0] * scale - offset, roi[1] * scale - offset);
        let (mut rw, mut rh) = (roi[2] * scale - offset - x0, roi[3] * scale - offset - y0);
        if !ra.half_pixel {
            (rw, rh) = (rw.max(1.0), rh.max(1.0));
        }
        let (bh, bw) = (rh / ph as f64, rw / pw as f64);
        let grid = |size: f64, bins: usize| {
            if ra.sampling_ratio > 0 {
                ra.sampling_ratio
            } else {
                (size / bins as f64).ceil().max(0.0) as usize
            }
        };
        let (gh, gw) = (grid(rh, ph), grid(rw, pw));
        let count = (gh * gw).max(1) as f64;
        // Per sample of each bin: four (offset, weight) pairs shared by all channels.
        let mut samples: Vec<[(usize, f64); 4]> = Vec::with_capacity(ph * pw * gh * gw);
        for by in 0..ph {
            for bx in 0..pw {
                for iy in 0..gh {
                    let y = y0 + by as f64 * bh + (iy as f64 + 0.5) * bh / gh as f64;
                    for ix in 0..gw {
                        let xx = x0 + bx as f64 * bw + (ix as f64 + 0.5) * bw / gw as f64;
                        if y < -1.0 || y > h || xx < -1.0 || xx > w {
                            samples.push([(0, 0.0); 4]);
                            continue;
                        }
                        let (mut y, mut xx) = (y.max(0.0), xx.max(0.0));
                        let (mut yl, mut xl) = (y as usize, xx as usize);
                        let yh = if yl >= height - 1 {
                            yl = height - 1;
                            y = yl as f64;
                            yl
                        } else {
                            yl + 1
                        };
                        let xh = if xl >= width - 1 {
                            xl = width - 1;
                            xx = xl as f64;
                            xl
                        } else {
                            xl + 1
                        };
                        let (ly, lx) = (y - yl as f64, xx - xl as f64);
                        let (hy, hx) = (1.0 - ly, 1.0 - lx);
                        samples.push([
                            (yl * width + xl, hy * hx),
                            (yl * width + xh, hy * lx),
                            (yh * width + xl, ly * hx),
                            (yh * width + xh, ly * lx),
                        ]);
                    }
                }
            }
        }
        let per_bin = gh * gw;
        for (ch, plane) in dst.chunks_mut(ph * pw).enumerate() {
            let src = &x[(batch[r] as usize * channels + ch) * height * width..][..height * width];
            for (bin, o) in plane.iter_mut().enumerate() {
                let terms = samples[bin * per_bin..][..per_bin]
                    .iter()
                    .map(|s| s.map(|(at, wt)| wt * src[at]));
                let v = if ra.max {
                    terms
                        .map(|t| t.into_iter().fold(f64::NEG_INFINITY, f64::max))
                        .reduce(f64::max)
                        .unwrap_or(0.0)
                } else {
                    terms.map(|t| t.iter().sum::<f64>()).sum::<f64>() / count
                };
                *o = T::from_f64(v);
            }
        }
    });
    Ok(())
}

struct NmsKernel {
    op: NonMaxSuppression,
}

impl CpuKernel for NmsKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        let inputs: Vec<_> = (0..5).map(|i| io.values.get(i).and_then(Option::as_ref)).collect();
        let selected = self.op.select(&inputs).map_err(|e| EpError::Kernel(e.to_string()))?;
        let out = io.output::<i64>(0)?;
        out.iter_mut().zip(selected.iter().flatten()).for_each(|(o, &v)| *o = v);
        Ok(())
    }
}

/// A float kernel holding an op, running `$f::<T>(io, &self.op)`.
macro_rules! float_kernel {
    ($name:ident, $op:ty, $f:ident, $label:literal) => {
        struct $name {
            dtype: DType,
            op: $op,
        }
        impl CpuKernel for $name {
            fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
                floats!(self.dtype, T => $f::<T>(io, &self.op), else Err(unsupported_dtype($label, self.dtype)))
            }
        }
    };
}

float_kernel!(AffineGridKernel, AffineGrid, affine_grid, "AffineGrid");
float_kernel!(RoiAlignKernel, RoiAlign, roi_align, "RoiAlign");

struct GridSampleKernel {
    dtype: DType,
    op: GridSample,
}

impl CpuKernel for GridSampleKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        numeric!(self.dtype, T => grid_sample::<T>(io, &self.op), else Err(unsupported_dtype("GridSample", self.dtype)))
    }
}

fn parts<O: onyx_core::ops::Op + Clone>(s: &KernelSpec<'_>) -> Result<(DType, O), EpError> {
    Ok((s.input_dtype(0)?, s.op_as::<O>()?.clone()))
}

/// Registers the family.
pub(crate) fn register_all(r: &mut KernelRegistry) {
    r.register("AffineGrid", |s| {
        let (dtype, op) = parts::<AffineGrid>(s)?;
        Ok(Box::new(AffineGridKernel { dtype, op }))
    });
    r.register("GridSample", |s| {
        let (dtype, op) = parts::<GridSample>(s)?;
        Ok(Box::new(GridSampleKernel { dtype, op }))
    });
    r.register("DeformConv", |s| {
        let (dtype, op) = parts::<DeformConv>(s)?;
        if !matches!(dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16) {
            return Err(unsupported_dtype("DeformConv", dtype));
        }
        Ok(Box::new(DeformConvKernel { dtype, op }))
    });
    r.register("RoiAlign", |s| {
        let (dtype, op) = parts::<RoiAlign>(s)?;
        Ok(Box::new(RoiAlignKernel { dtype, op }))
    });
    r.register("NonMaxSuppression", |s| {
        Ok(Box::new(NmsKernel { op: s.op_as::<NonMaxSuppression>()?.clone() }))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reflection_folds_back_and_forth_between_the_edges() {
        assert_eq!(reflect(-0.5, 0.0, 3.0), 0.5);
        assert_eq!(reflect(4.0, 0.0, 3.0), 2.0);
        assert_eq!(reflect(7.0, 0.0, 3.0), 1.0);
        assert_eq!(reflect(1.5, 0.0, 3.0), 1.5);
    }

    #[test]
    fn bilinear_samples_blend_neighbours_and_fade_to_zero_outside() {
        let img = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(bilinear(&img, &[2, 2], &[0.5, 0.5]), 2.5);
        assert_eq!(bilinear(&img, &[2, 2], &[1.0, 1.0]), 4.0);
        assert_eq!(bilinear(&img, &[2, 2], &[1.5, 1.0]), 2.0);
        assert_eq!(bilinear(&img, &[2, 2], &[-2.0, 0.0]), 0.0);
    }

    #[test]
    fn cubic_weights_sum_to_one() {
        for t in [0.0, 0.25, 0.5, 0.9] {
            assert!((cubic_weights(t).iter().sum::<f64>() - 1.0).abs() < 1e-12);
        }
        assert_eq!(cubic_weights(0.0), [0.0, 1.0, 0.0, 0.0]);
    }
}
