//! LpPool, MaxUnpool, Col2Im, ConvTranspose (a `gemm` per image and group,
//! then col2im) and CenterCropPad.

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::spatial::{CenterCropPad, Col2Im, ConvTranspose, LpPool, MaxUnpool};
use onyx_core::shape::strides;
use rayon::prelude::*;

use crate::par::Loop;

use super::conv::unravel;
use super::dispatch::{AsF64, by_width, floats, numeric};
use super::matmul::{GemmType, Mat, gemm_into};
use super::scatter::Arith;
use super::{CpuKernel, KernelIo, KernelRegistry, unsupported_dtype};

fn kernel_err(e: impl std::fmt::Display) -> EpError {
    EpError::Kernel(e.to_string())
}

/// Every position of a box of `dims`, in row-major order.
fn positions(dims: &[usize]) -> Vec<Vec<usize>> {
    (0..dims.iter().product()).map(|i| unravel(i, dims)).collect()
}

/// The flat index in `dims` of per-axis coordinates, or `None` when one is outside.
fn locate(dims: &[usize], coords: impl Iterator<Item = i64>) -> Option<usize> {
    let mut at = 0usize;
    for (d, c) in coords.enumerate() {
        if c < 0 || c as usize >= dims[d] {
            return None;
        }
        at = at * dims[d] + c as usize;
    }
    Some(at)
}

fn lp_pool<T: AsF64 + bytemuck::Pod + Send + Sync>(
    io: &KernelIo,
    l: &LpPool,
) -> Result<(), EpError> {
    let xs = io.in_view(0)?.shape.clone();
    let g = l.geometry(&xs[2..]).map_err(kernel_err)?;
    let (is, os): (usize, usize) = (xs[2..].iter().product(), g.output.iter().product());
    let taps = positions(&g.kernel);
    let outs = positions(&g.output);
    let p = l.p as f64;
    let x = io.input::<T>(0)?;
    let out = io.output::<T>(0)?;
    if os == 0 || is == 0 {
        return Ok(());
    }
    out.par_chunks_mut(os).zip(x.par_chunks(is)).each(|(dst, src)| {
        for (o, pos) in dst.iter_mut().zip(&outs) {
            let mut acc = 0f64;
            for tap in &taps {
                let coords = (0..pos.len()).map(|d| {
                    (pos[d] * g.strides[d] + tap[d] * g.dilations[d]) as i64
                        - g.pads_begin[d] as i64
                });
                if let Some(at) = locate(&xs[2..], coords) {
                    acc += src[at].to_f64().abs().powf(p);
                }
            }
            *o = T::from_f64(acc.powf(1.0 / p));
        }
    });
    Ok(())
}

fn max_unpool<T: bytemuck::Pod>(io: &KernelIo, m: &MaxUnpool) -> Result<(), EpError> {
    let xs = io.in_view(0)?.shape.clone();
    if io.in_view(1)?.shape != xs {
        return Err(EpError::Kernel("MaxUnpool indices must be shaped like X".into()));
    }
    let mut inferred = xs[..2].to_vec();
    inferred.extend(m.inferred(&xs[2..]).map_err(kernel_err)?);
    let out_dims = io.out_view(0)?.shape.clone();
    if out_dims.len() != inferred.len() || out_dims.iter().zip(&inferred).any(|(o, i)| o < i) {
        return Err(EpError::Kernel(format!(
            "MaxUnpool output_shape {out_dims:?} is smaller than the unpooled {inferred:?}"
        )));
    }
    let (x, indices) = (io.input::<T>(0)?, io.ints(1)?);
    let out = io.output::<T>(0)?;
    out.fill(bytemuck::Zeroable::zeroed());
    let total: usize = inferred.iter().product();
    for (&v, &i) in x.iter().zip(&indices) {
        let at = usize::try_from(i).ok().filter(|&i| i < total).ok_or_else(|| {
            EpError::Kernel(format!("MaxUnpool index {i} is outside {inferred:?}"))
        })?;
        let coords = unravel(at, &inferred).into_iter().map(|c| c as i64);
        if let Some(dst) = locate(&out_dims, coords) {
            out[dst] = v;
        }
    }
    Ok(())
}

fn col2im<T: Arith>(io: &KernelIo, c: &Col2Im) -> Result<(), EpError> {
    let xs = io.in_view(0)?.shape.clone();
    let p = c.plan(&io.ints(1)?, &io.ints(2)?, &xs).map_err(kernel_err)?;
    let (bl, l): (usize, usize) = (p.block.iter().product(), xs[2]);
    let im: usize = p.image.iter().product();
    let (taps, cells) = (positions(&p.block), positions(&p.grid));
    let x = io.input::<T>(0)?;
    let out = io.output::<T>(0)?;
    if im == 0 || bl * l == 0 {
        return Ok(());
    }
    out.par_chunks_mut(im).zip(x.par_chunks(bl * l)).each(|(dst, src)| {
        dst.fill(bytemuck::Zeroable::zeroed());
        for (b, tap) in taps.iter().enumerate() {
            for (j, cell) in cells.iter().enumerate() {
                let coords = (0..tap.len()).map(|d| {
                    (cell[d] * p.strides[d] + tap[d] * p.dilations[d]) as i64
                        - p.pads_begin[d] as i64
                });
                if let Some(at) = locate(&p.image, coords) {
                    dst[at] = dst[at].add(src[b * l + j]);
                }
            }
        }
    });
    Ok(())
}

/// Input `i` (of float type `dtype`) converted to the working type `W`.
fn widened<W: AsF64>(io: &KernelIo, i: usize, dtype: DType) -> Result<Vec<W>, EpError> {
    floats!(dtype, T => Ok(io.input::<T>(i)?.iter().map(|v| W::from_f64(v.to_f64())).collect()),
        else Err(unsupported_dtype("ConvTranspose", dtype)))
}

fn conv_transpose<W>(io: &KernelIo, ct: &ConvTranspose, dtype: DType) -> Result<(), EpError>
where
    W: GemmType + AsF64 + std::ops::Add<Output = W>,
{
    let (xs, ws) = (io.in_view(0)?.shape.clone(), io.in_view(1)?.shape.clone());
    let (n, c, g) = (xs[0], xs[1], ct.group);
    if ws.len() != xs.len() || ws[0] != c || c % g != 0 {
        return Err(EpError::Kernel(format!("ConvTranspose X {xs:?} and W {ws:?} with group {g}")));
    }
    let (cg, mg, kernel) = (c / g, ws[1], ws[2..].to_vec());
    let geo = ct.geometry(&xs[2..], &kernel).map_err(kernel_err)?;
    let (is, ks, os): (usize, usize, usize) =
        (xs[2..].iter().product(), kernel.iter().product(), geo.output.iter().product());
    let (x, w) = (widened::<W>(io, 0, dtype)?, widened::<W>(io, 1, dtype)?);
    let bias = if io.present(2) { Some(widened::<W>(io, 2, dtype)?) } else { None };
    let m = mg * g;
    let mut y = vec![W::zero(); n * m * os];
    let taps = positions(&kernel);
    let cells = positions(&xs[2..]);
    // For each (tap, input cell): the output cell it lands on, if inside.
    let target: Vec<Option<usize>> = taps
        .iter()
        .flat_map(|tap| {
            cells.iter().map(|cell| {
                locate(
                    &geo.output,
                    (0..tap.len()).map(|d| {
                        (cell[d] * geo.strides[d] + tap[d] * geo.dilations[d]) as i64
                            - geo.pads_begin[d]
                    }),
                )
            })
        })
        .collect();
    let mut cols = vec![W::zero(); mg * ks * is];
    for b in 0..n {
        for gi in 0..g {
            if is > 0 && mg * ks > 0 {
                // SAFETY: W's group block is cg × (mg·ks) (read transposed), X's is cg × is,
                // and `cols` holds (mg·ks) × is elements.
                unsafe {
                    gemm_into(
                        (mg * ks, is, cg),
                        &mut cols,
                        0,
                        &w,
                        Mat::row_major(gi * cg * mg * ks, mg * ks, true),
                        &x,
                        Mat::row_major((b * c + gi * cg) * is, is, false),
                        false,
                        W::one(),
                    )
                };
            }
            let block = &mut y[(b * m + gi * mg) * os..][..mg * os];
            block.par_chunks_mut(os.max(1)).enumerate().each(|(mi, plane)| {
                let rows = &cols[mi * ks * is..][..ks * is];
                for (v, t) in rows.iter().zip(&target) {
                    if let Some(at) = *t {
                        plane[at] = plane[at] + *v;
                    }
                }
            });
        }
    }
    if let Some(bias) = bias {
        if bias.len() != m {
            return Err(EpError::Kernel(format!(
                "ConvTranspose bias of {} for {m} channels",
                bias.len()
            )));
        }
        y.par_chunks_mut(os.max(1)).enumerate().each(|(i, plane)| {
            plane.iter_mut().for_each(|v| *v = *v + bias[i % m]);
        });
    }
    floats!(dtype, T => {
        io.output::<T>(0)?.iter_mut().zip(&y).for_each(|(o, v)| *o = T::from_f64(v.to_f64()));
        Ok(())
    }, else Err(unsupported_dtype("ConvTranspose", dtype)))
}

fn center_crop_pad<T: bytemuck::Pod + Send + Sync>(io: &KernelIo) -> Result<(), EpError> {
    let dims = io.in_view(0)?.shape.clone();
    let od = io.out_view(0)?.shape.clone();
    let Some(&last) = od.last() else {
        io.output::<T>(0)?.copy_from_slice(io.input::<T>(0)?);
        return Ok(());
    };
    // Per axis: input coordinate = output coordinate + shift.
    let shift: Vec<i64> = dims
        .iter()
        .zip(&od)
        .map(|(&i, &o)| if o <= i { ((i - o) / 2) as i64 } else { -(((o - i) / 2) as i64) })
        .collect();
    let (x, out) = (io.input::<T>(0)?, io.output::<T>(0)?);
    let ist = strides(&dims);
    let r = dims.len() - 1;
    if last == 0 {
        return Ok(());
    }
    out.par_chunks_mut(last).enumerate().each(|(row, dst)| {
        // Padding is zeros; output buffers are not zeroed beforehand.
        dst.fill(bytemuck::Zeroable::zeroed());
        let pos = unravel(row, &od[..r]);
        let mut base = 0usize;
        for d in 0..r {
            let c = pos[d] as i64 + shift[d];
            if c < 0 || c as usize >= dims[d] {
                return;
            }
            base += c as usize * ist[d];
        }
        for (j, v) in dst.iter_mut().enumerate() {
            let c = j as i64 + shift[r];
            if c >= 0 && (c as usize) < dims[r] {
                *v = x[base + c as usize];
            }
        }
    });
    Ok(())
}

/// A kernel holding a dtype and an op, running `$body` with `$io` and `$o`.
macro_rules! kernel {
    ($name:ident, $op:ty, |$io:ident, $o:ident, $d:ident| $body:expr) => {
        struct $name {
            dtype: DType,
            op: $op,
        }
        impl CpuKernel for $name {
            fn run(&self, $io: &mut KernelIo) -> Result<(), EpError> {
                let ($o, $d) = (&self.op, self.dtype);
                $body
            }
        }
    };
}

kernel!(LpPoolKernel, LpPool, |io, o, d| floats!(d, T => lp_pool::<T>(io, o),
    else Err(unsupported_dtype("LpPool", d))));
kernel!(MaxUnpoolKernel, MaxUnpool, |io, o, d| by_width!(d, T => max_unpool::<T>(io, o),
    else Err(unsupported_dtype("MaxUnpool", d))));
kernel!(Col2ImKernel, Col2Im, |io, o, d| numeric!(d, T => col2im::<T>(io, o),
    else Err(unsupported_dtype("Col2Im", d))));
kernel!(ConvTransposeKernel, ConvTranspose, |io, o, d| match d {
    DType::F64 => conv_transpose::<f64>(io, o, d),
    _ => conv_transpose::<f32>(io, o, d),
});
struct CenterCropPadKernel {
    dtype: DType,
}

impl CpuKernel for CenterCropPadKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        by_width!(self.dtype, T => center_crop_pad::<T>(io),
            else Err(unsupported_dtype("CenterCropPad", self.dtype)))
    }
}

/// Registers the family.
pub(crate) fn register_all(r: &mut KernelRegistry) {
    fn spec_of<O: onyx_core::ops::Op + Clone>(s: &KernelSpec<'_>) -> Result<(DType, O), EpError> {
        Ok((s.input_dtype(0)?, s.op_as::<O>()?.clone()))
    }
    r.register("LpPool", |s| {
        let (dtype, op) = spec_of::<LpPool>(s)?;
        Ok(Box::new(LpPoolKernel { dtype, op }))
    });
    r.register("MaxUnpool", |s| {
        let (dtype, op) = spec_of::<MaxUnpool>(s)?;
        Ok(Box::new(MaxUnpoolKernel { dtype, op }))
    });
    r.register("Col2Im", |s| {
        let (dtype, op) = spec_of::<Col2Im>(s)?;
        Ok(Box::new(Col2ImKernel { dtype, op }))
    });
    r.register("ConvTranspose", |s| {
        let (dtype, op) = spec_of::<ConvTranspose>(s)?;
        if !matches!(dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16) {
            return Err(unsupported_dtype("ConvTranspose", dtype));
        }
        Ok(Box::new(ConvTransposeKernel { dtype, op }))
    });
    r.register("CenterCropPad", |s| {
        s.op_as::<CenterCropPad>()?;
        Ok(Box::new(CenterCropPadKernel { dtype: s.input_dtype(0)? }))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locate_rejects_coordinates_outside_the_box() {
        assert_eq!(locate(&[2, 3], [1i64, 2].into_iter()), Some(5));
        assert_eq!(locate(&[2, 3], [-1i64, 0].into_iter()), None);
        assert_eq!(locate(&[2, 3], [0i64, 3].into_iter()), None);
    }
}
