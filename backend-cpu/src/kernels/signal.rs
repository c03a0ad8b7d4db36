//! Window generators, MelWeightMatrix, DFT and STFT. Transforms run in f64
//! through an iterative radix-2 FFT, with Bluestein's algorithm for other
//! lengths, so every length costs O(n log n).

use std::f64::consts::PI;

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::signal::{Dft, MelWeightMatrix, Stft, WindowFn};
use rayon::prelude::*;

use crate::par::Loop;

use super::dispatch::{AsF64, floats, numeric};
use super::{CpuKernel, KernelIo, KernelRegistry, unsupported_dtype};

/// A complex number as `(re, im)`.
type C = (f64, f64);

fn mul(a: C, b: C) -> C {
    (a.0 * b.0 - a.1 * b.1, a.0 * b.1 + a.1 * b.0)
}

/// `e^(iθ)`.
fn cis(theta: f64) -> C {
    (theta.cos(), theta.sin())
}

/// In-place radix-2 FFT; `a.len()` must be a power of two. Unnormalized;
/// `inverse` flips the exponent's sign.
fn fft_pow2(a: &mut [C], inverse: bool) {
    let n = a.len();
    let mut j = 0;
    for i in 1..n {
        let mut bit = n >> 1;
        while j & bit != 0 {
            j ^= bit;
            bit >>= 1;
        }
        j |= bit;
        if i < j {
            a.swap(i, j);
        }
    }
    let sign = if inverse { 1.0 } else { -1.0 };
    let mut len = 2;
    while len <= n {
        let twiddles: Vec<C> =
            (0..len / 2).map(|k| cis(sign * 2.0 * PI * k as f64 / len as f64)).collect();
        for block in a.chunks_mut(len) {
            let (lo, hi) = block.split_at_mut(len / 2);
            for ((u, v), &w) in lo.iter_mut().zip(hi.iter_mut()).zip(&twiddles) {
                let t = mul(*v, w);
                *v = (u.0 - t.0, u.1 - t.1);
                *u = (u.0 + t.0, u.1 + t.1);
            }
        }
        len <<= 1;
    }
}

/// In-place DFT of any length (unnormalized; `inverse` flips the exponent's sign).
fn fft(a: &mut [C], inverse: bool) {
    let n = a.len();
    if n <= 1 {
        return;
    }
    if n.is_power_of_two() {
        return fft_pow2(a, inverse);
    }
    // Bluestein: jk = (j² + k² − (k − j)²) / 2 turns the DFT into a convolution.
    let sign = if inverse { 1.0 } else { -1.0 };
    let chirp: Vec<C> =
        (0..n).map(|k| cis(sign * PI * ((k * k) % (2 * n)) as f64 / n as f64)).collect();
    let m = (2 * n - 1).next_power_of_two();
    let mut x = vec![(0.0, 0.0); m];
    for (k, v) in x.iter_mut().take(n).enumerate() {
        *v = mul(a[k], chirp[k]);
    }
    let mut b = vec![(0.0, 0.0); m];
    for k in 0..n {
        let c = (chirp[k].0, -chirp[k].1);
        b[k] = c;
        if k > 0 {
            b[m - k] = c;
        }
    }
    fft_pow2(&mut x, false);
    fft_pow2(&mut b, false);
    x.iter_mut().zip(&b).for_each(|(u, &v)| *u = mul(*u, v));
    fft_pow2(&mut x, true);
    for (k, v) in a.iter_mut().enumerate() {
        let c = mul(x[k], chirp[k]);
        *v = (c.0 / m as f64, c.1 / m as f64);
    }
}

fn kernel_err(e: impl std::fmt::Display) -> EpError {
    EpError::Kernel(e.to_string())
}

fn dft<T: AsF64 + bytemuck::Pod + Send + Sync>(io: &KernelIo, d: &Dft) -> Result<(), EpError> {
    let dims = io.in_view(0)?.shape.clone();
    let length = if io.present(1) { Some(io.ints(1)?) } else { None };
    let axis = if d.axis_attr.is_none() && io.present(2) { Some(io.ints(2)?) } else { None };
    let p = d.plan(&dims, length.as_deref(), axis.as_deref()).map_err(kernel_err)?;
    let r = dims.len();
    let (n, comps) = (dims[p.axis], dims[r - 1]);
    let inner: usize = dims[p.axis + 1..r - 1].iter().product();
    let x: Vec<f64> = io.input::<T>(0)?.iter().map(|v| v.to_f64()).collect();
    let out = io.output::<T>(0)?;
    let (len, oc) = (p.length, p.out_components);
    let block = p.out_len * inner * oc;
    if block == 0 {
        return Ok(());
    }
    let hermitian = d.inverse && d.onesided;
    out.par_chunks_mut(block).enumerate().each(|(o, dst)| {
        // Bins past the transform's length are zeros.
        dst.fill(bytemuck::Zeroable::zeroed());
        let src = &x[o * n * inner * comps..];
        let mut line = vec![(0.0, 0.0); len];
        for i in 0..inner {
            let at = |k: usize| -> C {
                let e = (k * inner + i) * comps;
                (src[e], if comps == 2 { src[e + 1] } else { 0.0 })
            };
            line.iter_mut().for_each(|v| *v = (0.0, 0.0));
            if hermitian {
                // A real signal's half spectrum: the rest mirrors it conjugated; the
                // imaginary parts of the DC and Nyquist bins are ignored.
                let half = len / 2 + 1;
                for (k, v) in line.iter_mut().enumerate().take(half.min(n)) {
                    *v = at(k);
                }
                line[0].1 = 0.0;
                if len % 2 == 0 {
                    line[len / 2].1 = 0.0;
                }
                for k in half..len {
                    line[k] = (line[len - k].0, -line[len - k].1);
                }
            } else {
                for (k, v) in line.iter_mut().enumerate().take(n) {
                    *v = at(k);
                }
            }
            fft(&mut line, d.inverse);
            let scale = if d.inverse { 1.0 / len as f64 } else { 1.0 };
            for (k, v) in line.iter().take(p.out_len).enumerate() {
                let e = (k * inner + i) * oc;
                dst[e] = T::from_f64(v.0 * scale);
                if oc == 2 {
                    dst[e + 1] = T::from_f64(v.1 * scale);
                }
            }
        }
    });
    Ok(())
}

fn stft<T: AsF64 + bytemuck::Pod + Send + Sync>(io: &KernelIo, s: &Stft) -> Result<(), EpError> {
    let dims = io.in_view(0)?.shape.clone();
    let window: Option<Vec<f64>> = if io.present(2) {
        Some(io.input::<T>(2)?.iter().map(|v| v.to_f64()).collect())
    } else {
        None
    };
    let frame = if io.present(3) { Some(io.ints(3)?) } else { None };
    let p = s
        .plan(&dims, &io.ints(1)?, window.as_ref().map(Vec::len), frame.as_deref())
        .map_err(kernel_err)?;
    let (len, comps) = (dims[1], dims[2]);
    let x: Vec<f64> = io.input::<T>(0)?.iter().map(|v| v.to_f64()).collect();
    let out = io.output::<T>(0)?;
    let block = p.bins * 2;
    if block == 0 {
        return Ok(());
    }
    out.par_chunks_mut(block).enumerate().each(|(bf, dst)| {
        let (b, f) = (bf / p.frames, bf % p.frames);
        let mut line: Vec<C> = (0..p.frame)
            .map(|t| {
                let e = (b * len + f * p.step + t) * comps;
                let w = window.as_ref().map_or(1.0, |w| w[t]);
                (x[e] * w, if comps == 2 { x[e + 1] * w } else { 0.0 })
            })
            .collect();
        fft(&mut line, false);
        for (k, v) in line.iter().take(p.bins).enumerate() {
            dst[2 * k] = T::from_f64(v.0);
            dst[2 * k + 1] = T::from_f64(v.1);
        }
    });
    Ok(())
}

/// The triangular mel filters, `[dft_length / 2 + 1, bins]`, as the reference computes them.
fn mel_weights(bins: usize, dft: usize, rate: f64, low: f64, high: f64) -> Vec<f64> {
    let spectrum = dft / 2 + 1;
    let to_mel = |hz: f64| 2595.0 * (hz / 700.0).ln_1p() / 10f64.ln();
    let (lo, hi) = (to_mel(low), to_mel(high));
    let step = (hi - lo) / (bins + 2) as f64;
    let edges: Vec<i64> = (0..bins + 2)
        .map(|i| {
            let hz = 700.0 * ((i as f64 * step + lo) / 2595.0 * 10f64.ln()).exp_m1();
            (((dft + 1) as f64 * hz) / rate).floor() as i64
        })
        .collect();
    let mut out = vec![0.0; spectrum * bins];
    let mut set = |j: i64, i: usize, v: f64| {
        if (0..spectrum as i64).contains(&j) {
            out[j as usize * bins + i] = v;
        }
    };
    for i in 0..bins {
        let (left, center, right) = (edges[i], edges[i + 1], edges[i + 2]);
        if center == left {
            set(center, i, 1.0);
        } else {
            for j in left..=center {
                set(j, i, (j - left) as f64 / (center - left) as f64);
            }
        }
        if right > center {
            for j in center..right {
                set(j, i, (right - j) as f64 / (right - center) as f64);
            }
        }
    }
    out
}

struct WindowKernel {
    op: WindowFn,
}

impl CpuKernel for WindowKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        let size = io.out_view(0)?.shape[0];
        let values = self.op.values(size);
        let d = self.op.dtype;
        numeric!(d, T => {
            io.output::<T>(0)?.iter_mut().zip(&values).for_each(|(o, &v)| *o = T::from_f64(v));
            Ok(())
        }, else Err(unsupported_dtype("window", d)))
    }
}

struct MelKernel {
    dtype: DType,
}

impl CpuKernel for MelKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        let scalar = |i: usize| -> Result<f64, EpError> {
            io.floats(i)?
                .first()
                .copied()
                .ok_or_else(|| EpError::Kernel(format!("input {i} is empty")))
        };
        let dims = io.out_view(0)?.shape.clone();
        let (dft, bins) = ((scalar(1)? as usize), dims[1]);
        let rate = scalar(2)?;
        if rate <= 0.0 {
            return Err(EpError::Kernel(format!("MelWeightMatrix sample_rate {rate}")));
        }
        let w = mel_weights(bins, dft, rate, scalar(3)?, scalar(4)?);
        numeric!(self.dtype, T => {
            io.output::<T>(0)?.iter_mut().zip(&w).for_each(|(o, &v)| *o = T::from_f64(v));
            Ok(())
        }, else Err(unsupported_dtype("MelWeightMatrix", self.dtype)))
    }
}

struct DftKernel {
    dtype: DType,
    op: Dft,
}

impl CpuKernel for DftKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        floats!(self.dtype, T => dft::<T>(io, &self.op), else Err(unsupported_dtype("DFT", self.dtype)))
    }
}

struct StftKernel {
    dtype: DType,
    op: Stft,
}

impl CpuKernel for StftKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        floats!(self.dtype, T => stft::<T>(io, &self.op), else Err(unsupported_dtype("STFT", self.dtype)))
    }
}

fn build_window(s: &KernelSpec<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    Ok(Box::new(WindowKernel { op: s.op_as::<WindowFn>()?.clone() }))
}

/// Registers the family.
pub(crate) fn register_all(r: &mut KernelRegistry) {
    r.register("HannWindow", build_window);
    r.register("HammingWindow", build_window);
    r.register("BlackmanWindow", build_window);
    r.register("MelWeightMatrix", |s| {
        s.op_as::<MelWeightMatrix>()?;
        Ok(Box::new(MelKernel { dtype: s.output_dtype(0)? }))
    });
    r.register("DFT", |s| {
        Ok(Box::new(DftKernel { dtype: s.input_dtype(0)?, op: s.op_as::<Dft>()?.clone() }))
    });
    r.register("STFT", |s| {
        Ok(Box::new(StftKernel { dtype: s.input_dtype(0)?, op: s.op_as::<Stft>()?.clone() }))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(x: &[C], inverse: bool) -> Vec<C> {
        let n = x.len();
        let sign = if inverse { 1.0 } else { -1.0 };
        (0..n)
            .map(|k| {
                x.iter().enumerate().fold((0.0, 0.0), |acc, (j, &v)| {
                    let t = mul(v, cis(sign * 2.0 * PI * ((j * k) % n) as f64 / n as f64));
                    (acc.0 + t.0, acc.1 + t.1)
                })
            })
            .collect()
    }

    #[test]
    fn fft_matches_the_definition_for_every_length() {
        for n in [1, 2, 3, 5, 8, 10, 12, 17] {
            let x: Vec<C> = (0..n).map(|i| ((i as f64).sin(), (i as f64 * 0.3).cos())).collect();
            for inverse in [false, true] {
                let mut y = x.clone();
                fft(&mut y, inverse);
                for (a, b) in y.iter().zip(naive(&x, inverse)) {
                    assert!((a.0 - b.0).abs() < 1e-9 && (a.1 - b.1).abs() < 1e-9, "n = {n}");
                }
            }
        }
    }
}
