//! Integer products: MatMulInteger, ConvInteger and their requantizing forms
//! QLinearMatMul and QLinearConv.
//!
//! Operands minus their zero points are widened to f64 and multiplied with the
//! `gemm` crate: every product of 8-bit values and every sum of fewer than 2^37
//! of them is exact in f64, so the result equals int32 accumulation (wrapped to
//! int32 as numpy's would be). Requantization then follows the reference:
//! `rint(acc * (scale_a * scale_b / scale_y) + zero_y)`, saturated.

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::conv::Geometry;
use onyx_core::ops::quant::{IntegerConv, IntegerMatMul};
use onyx_core::shape::Dim;
use rayon::prelude::*;

use crate::par::Loop;

use super::round_to;
use crate::kernels::cast::read;
use crate::kernels::conv::unravel;
use crate::kernels::matmul::{Mat, gemm_into};
use crate::kernels::{CpuKernel, KernelIo, KernelRegistry, unsupported_dtype};

/// Row-major strides of `dims`.
fn strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1; dims.len()];
    for d in (0..dims.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * dims[d + 1];
    }
    s
}

/// Maps flat indices of `out` to flat indices of `inp` broadcast to it (numpy rules).
struct Bcast {
    out_strides: Vec<usize>,
    dims: Vec<usize>,
    in_strides: Vec<usize>,
}

impl Bcast {
    fn new(out: &[usize], inp: &[usize]) -> Result<Self, EpError> {
        if inp.len() > out.len() {
            return Err(EpError::Kernel(format!("{inp:?} does not broadcast to {out:?}")));
        }
        let mut aligned = vec![1; out.len() - inp.len()];
        aligned.extend_from_slice(inp);
        let own = strides(&aligned);
        let mut in_strides = vec![0; out.len()];
        for d in 0..out.len() {
            if aligned[d] == out[d] {
                in_strides[d] = own[d];
            } else if aligned[d] != 1 {
                return Err(EpError::Kernel(format!("{inp:?} does not broadcast to {out:?}")));
            }
        }
        Ok(Bcast { out_strides: strides(out), dims: out.to_vec(), in_strides })
    }

    fn of(&self, i: usize) -> usize {
        (0..self.dims.len())
            .map(|d| (i / self.out_strides[d]) % self.dims[d].max(1) * self.in_strides[d])
            .sum()
    }
}

/// Input `i` as f64 with its zero point (input `zi`, optional) subtracted.
/// A 1-D zero point of length `per_row` (when not 0) applies per row of a matrix
/// operand (its second-to-last dim); any other shape broadcasts numpy-style.
fn centered(io: &KernelIo, i: usize, zi: usize, per_row: usize) -> Result<Vec<f64>, EpError> {
    let v = io.in_view(i)?;
    let (dtype, shape) = (v.dtype, v.shape.clone());
    let bytes = io.input_bytes(i)?;
    let mut x: Vec<f64> = (0..v.numel()).map(|j| read(dtype, bytes, j).to_f64()).collect();
    let Some(zv) = io.input_view(zi).filter(|z| z.numel() > 0) else { return Ok(x) };
    let zs = io.floats(zi)?;
    if zs.len() == 1 {
        x.iter_mut().for_each(|e| *e -= zs[0]);
    } else if per_row > 0 && zv.shape.len() == 1 && shape.len() >= 2 && zs.len() == per_row {
        let cols = shape[shape.len() - 1];
        for (j, e) in x.iter_mut().enumerate() {
            *e -= zs[(j / cols.max(1)) % per_row];
        }
    } else {
        let b = Bcast::new(&shape, &zv.shape)?;
        for (j, e) in x.iter_mut().enumerate() {
            *e -= zs[b.of(j)];
        }
    }
    Ok(x)
}

/// A scale input as f64 values (one, or one per row/column/channel).
fn scales(io: &KernelIo, i: usize) -> Result<Vec<f64>, EpError> {
    let s = io.floats(i)?;
    if s.is_empty() {
        return Err(EpError::Kernel(format!("scale input {i} is empty")));
    }
    Ok(s)
}

/// `s[j]` for a per-element list, `s[0]` for a scalar.
fn pick(s: &[f64], j: usize) -> f64 {
    if s.len() == 1 { s[0] } else { s.get(j).copied().unwrap_or(f64::NAN) }
}

/// The saturation range of an 8-bit output.
fn range(d: DType) -> Result<(f64, f64), EpError> {
    match d {
        DType::U8 => Ok((0.0, 255.0)),
        DType::I8 => Ok((-128.0, 127.0)),
        d => Err(unsupported_dtype("requantization", d)),
    }
}

/// Writes requantized values (already `acc * multiplier + zero`) to an 8-bit output.
fn store_quantized(io: &KernelIo, d: DType, vals: &[f64]) -> Result<(), EpError> {
    let (lo, hi) = range(d)?;
    let q = |v: f64| v.round_ties_even().clamp(lo, hi);
    match d {
        DType::U8 => io.output::<u8>(0)?.iter_mut().zip(vals).for_each(|(o, &v)| *o = q(v) as u8),
        _ => io.output::<i8>(0)?.iter_mut().zip(vals).for_each(|(o, &v)| *o = q(v) as i8),
    }
    Ok(())
}

/// An f64 holding an exact integer, wrapped to int32 as numpy's int32 arithmetic would.
fn wrap_i32(v: f64) -> i32 {
    v as i64 as i32
}

/// The batched products of a numpy MatMul: `(m, n, k)`, output shape, `(a, b)` offsets.
type Plan = ((usize, usize, usize), Vec<usize>, Vec<(usize, usize)>);

fn plan(a: &[usize], b: &[usize]) -> Result<Plan, EpError> {
    if a.is_empty() || b.is_empty() {
        return Err(EpError::Kernel("MatMul operands must have rank >= 1".into()));
    }
    let mut da = a.to_vec();
    let mut db = b.to_vec();
    if da.len() == 1 {
        da.insert(0, 1);
    }
    if db.len() == 1 {
        db.push(1);
    }
    let (m, k) = (da[da.len() - 2], da[da.len() - 1]);
    let (k2, n) = (db[db.len() - 2], db[db.len() - 1]);
    if k != k2 {
        return Err(EpError::Kernel(format!("inner dimensions differ: {a:?} × {b:?}")));
    }
    let (ba, bb) = (&da[..da.len() - 2], &db[..db.len() - 2]);
    let rank = ba.len().max(bb.len());
    let pad = |s: &[usize]| [vec![1; rank - s.len()], s.to_vec()].concat();
    let (pa, pb) = (pad(ba), pad(bb));
    let mut batch = Vec::with_capacity(rank);
    for (&x, &y) in pa.iter().zip(&pb) {
        if x != y && x != 1 && y != 1 {
            return Err(EpError::Kernel(format!("batch dims of {a:?} and {b:?} do not broadcast")));
        }
        batch.push(if x == 1 { y } else { x });
    }
    let (bca, bcb) = (Bcast::new(&batch, &pa)?, Bcast::new(&batch, &pb)?);
    let offsets =
        (0..batch.iter().product()).map(|i| (bca.of(i) * m * k, bcb.of(i) * k * n)).collect();
    let mut shape = batch;
    if a.len() > 1 {
        shape.push(m);
    }
    if b.len() > 1 {
        shape.push(n);
    }
    Ok(((m, n, k), shape, offsets))
}

struct MatMulKernel {
    op: IntegerMatMul,
    out: DType,
}

impl CpuKernel for MatMulKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        let (ia, ib) = self.op.operands();
        let (za, zb) = if self.op.requantize { (2, 5) } else { (2, 3) };
        let (sa, sb) = (io.in_view(ia)?.shape.clone(), io.in_view(ib)?.shape.clone());
        let ((m, n, k), _, offsets) = plan(&sa, &sb)?;
        let rows = if sa.len() >= 2 { m } else { 0 };
        let a = centered(io, ia, za, rows)?;
        let b = centered(io, ib, zb, 0)?;
        let mut acc = vec![0f64; offsets.len() * m * n];
        for (bi, &(oa, ob)) in offsets.iter().enumerate() {
            // SAFETY: the plan's offsets address m×k and k×n blocks inside a and b,
            // and acc holds one m×n block per batch.
            unsafe {
                gemm_into(
                    (m, n, k),
                    &mut acc,
                    bi * m * n,
                    &a,
                    Mat::row_major(oa, k, false),
                    &b,
                    Mat::row_major(ob, n, false),
                    false,
                    1.0,
                )
            };
        }
        if !self.op.requantize {
            let out = io.output::<i32>(0)?;
            out.iter_mut().zip(&acc).for_each(|(o, &v)| *o = wrap_i32(v));
            return Ok(());
        }
        let ts = in_dtype_of(io, 1)?;
        let (a_s, b_s, y_s) = (scales(io, 1)?, scales(io, 4)?, scales(io, 6)?);
        let y_zero = io.floats(7)?.first().copied().unwrap_or(0.0);
        let vals: Vec<f64> = acc
            .iter()
            .enumerate()
            .map(|(j, &c)| {
                let (row, col) = ((j / n.max(1)) % m.max(1), j % n.max(1));
                let mult = round_to(ts, round_to(ts, pick(&a_s, row) * pick(&b_s, col)) / y_s[0]);
                wrap_i32(c) as f64 * mult + y_zero
            })
            .collect();
        store_quantized(io, self.out, &vals)
    }
}

fn in_dtype_of(io: &KernelIo, i: usize) -> Result<DType, EpError> {
    Ok(io.in_view(i)?.dtype)
}

fn int8(d: DType) -> bool {
    matches!(d, DType::U8 | DType::I8)
}

fn build_matmul(spec: &KernelSpec<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let m = spec.op_as::<IntegerMatMul>()?.clone();
    let (ia, ib) = m.operands();
    for i in [ia, ib] {
        let d = spec.input_dtype(i)?;
        if !int8(d) {
            return Err(unsupported_dtype(&spec.node.op_type, d));
        }
    }
    let out = spec.output_dtype(0)?;
    if m.requantize && !int8(out) {
        return Err(unsupported_dtype(&spec.node.op_type, out));
    }
    Ok(Box::new(MatMulKernel { op: m, out }))
}

/// Fills `col` ([C × prod(kernel)] rows of [prod(output)]) from one image group `x` ([C, in…]).
fn im2col(x: &[f64], in_dims: &[usize], geo: &Geometry, col: &mut [f64]) {
    let ks: usize = geo.kernel.iter().product();
    let os: usize = geo.output.iter().product();
    let plane: usize = in_dims.iter().product();
    let in_strides = strides(in_dims);
    let rank = in_dims.len();
    col.par_chunks_mut(os.max(1)).enumerate().each(|(row, dst)| {
        let (c, k) = (row / ks, unravel(row % ks, &geo.kernel));
        let src = &x[c * plane..(c + 1) * plane];
        let mut pos = vec![0usize; rank];
        for slot in dst.iter_mut() {
            let mut at = Some(0usize);
            for d in 0..rank {
                let i = (pos[d] * geo.strides[d] + k[d] * geo.dilations[d]) as isize
                    - geo.pads_begin[d] as isize;
                at = match at {
                    Some(a) if i >= 0 && (i as usize) < in_dims[d] => {
                        Some(a + i as usize * in_strides[d])
                    }
                    _ => None,
                };
            }
            *slot = at.map_or(0.0, |a| src[a]);
            for d in (0..rank).rev() {
                pos[d] += 1;
                if pos[d] < geo.output[d] {
                    break;
                }
                pos[d] = 0;
            }
        }
    });
}

struct ConvKernel {
    op: IntegerConv,
    out: DType,
}

impl ConvKernel {
    /// The int32 accumulations (as exact f64) and the output channel count and plane size.
    fn accumulate(&self, io: &KernelIo) -> Result<(Vec<f64>, usize, usize), EpError> {
        let (ix, iw) = self.op.operands();
        let (xs, ws) = (io.in_view(ix)?.shape.clone(), io.in_view(iw)?.shape.clone());
        if xs.len() < 3 || ws.len() != xs.len() {
            return Err(EpError::Kernel(format!("conv of {xs:?} with weights {ws:?}")));
        }
        let dims: Vec<Dim> = ws.iter().map(|&d| Dim::Known(d)).collect();
        let c = &self.op.conv;
        let kernel = c.kernel(Some(&dims)).map_err(|e| EpError::Kernel(e.to_string()))?;
        let kernel = kernel.ok_or_else(|| EpError::Kernel("conv kernel shape unknown".into()))?;
        let geo =
            c.window.geometry(&xs[2..], &kernel).map_err(|e| EpError::Kernel(e.to_string()))?;
        let (n, cin, m, g) = (xs[0], xs[1], ws[0], c.group);
        if cin % g != 0 || m % g != 0 || ws[1] * g != cin {
            return Err(EpError::Kernel(format!("channels {cin} / weights {ws:?} vs group {g}")));
        }
        let (zx, zw) = if self.op.requantize { (2, 5) } else { (2, 3) };
        let x = centered(io, ix, zx, 0)?;
        // A 1-D weight zero point applies per output channel (W's first dim).
        let per_ch = io.input_view(zw).is_some_and(|z| z.shape.len() == 1 && z.numel() > 1);
        let w = if per_ch { per_channel(io, iw, zw, m)? } else { centered(io, iw, zw, 0)? };
        let (cg, mg) = (cin / g, m / g);
        let ks: usize = kernel.iter().product();
        let is: usize = xs[2..].iter().product();
        let os: usize = geo.output.iter().product();
        let mut acc = vec![0f64; n * m * os];
        let mut col = vec![0f64; cg * ks * os];
        for b in 0..n {
            for gi in 0..g {
                let x_off = (b * cin + gi * cg) * is;
                im2col(&x[x_off..x_off + cg * is], &xs[2..], &geo, &mut col);
                // SAFETY: col is (cg·ks) × os; the group's weights are mg × (cg·ks);
                // the output block is mg × os at its offset.
                unsafe {
                    gemm_into(
                        (mg, os, cg * ks),
                        &mut acc,
                        (b * m + gi * mg) * os,
                        &w,
                        Mat::row_major(gi * mg * cg * ks, cg * ks, false),
                        &col,
                        Mat::row_major(0, os, false),
                        false,
                        1.0,
                    )
                };
            }
        }
        Ok((acc, m, os))
    }
}

/// Weights minus a zero point given per output channel (W's first dim).
fn per_channel(io: &KernelIo, iw: usize, zw: usize, m: usize) -> Result<Vec<f64>, EpError> {
    let v = io.in_view(iw)?;
    let (dtype, per) = (v.dtype, v.numel() / m.max(1));
    let bytes = io.input_bytes(iw)?;
    let zs = io.floats(zw)?;
    if zs.len() != m {
        return Err(EpError::Kernel(format!("weight zero point has {} values for {m}", zs.len())));
    }
    Ok((0..v.numel()).map(|j| read(dtype, bytes, j).to_f64() - zs[j / per.max(1)]).collect())
}

impl CpuKernel for ConvKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        let (mut acc, m, os) = self.accumulate(io)?;
        if !self.op.requantize {
            let out = io.output::<i32>(0)?;
            out.iter_mut().zip(&acc).for_each(|(o, &v)| *o = wrap_i32(v));
            return Ok(());
        }
        if io.input_view(8).is_some() {
            let bias = io.ints(8)?;
            if bias.len() != m {
                return Err(EpError::Kernel(format!("bias has {} values for {m}", bias.len())));
            }
            for (j, v) in acc.iter_mut().enumerate() {
                *v += bias[(j / os.max(1)) % m] as f64;
            }
        }
        let ts = in_dtype_of(io, 1)?;
        let (x_s, w_s, y_s) = (scales(io, 1)?, scales(io, 4)?, scales(io, 6)?);
        let y_zero = io.floats(7)?.first().copied().unwrap_or(0.0);
        let vals: Vec<f64> = acc
            .iter()
            .enumerate()
            .map(|(j, &c)| {
                let ch = (j / os.max(1)) % m;
                let mult = round_to(ts, round_to(ts, x_s[0] * pick(&w_s, ch)) / y_s[0]);
                wrap_i32(c) as f64 * mult + y_zero
            })
            .collect();
        store_quantized(io, self.out, &vals)
    }
}

fn build_conv(spec: &KernelSpec<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let c = spec.op_as::<IntegerConv>()?.clone();
    let (ix, iw) = c.operands();
    for i in [ix, iw] {
        let d = spec.input_dtype(i)?;
        if !int8(d) {
            return Err(unsupported_dtype(&spec.node.op_type, d));
        }
    }
    let out = spec.output_dtype(0)?;
    if c.requantize && !int8(out) {
        return Err(unsupported_dtype(&spec.node.op_type, out));
    }
    Ok(Box::new(ConvKernel { op: c, out }))
}

/// Registers MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv.
pub(crate) fn register_all(r: &mut KernelRegistry) {
    r.register("MatMulInteger", build_matmul);
    r.register("QLinearMatMul", build_matmul);
    r.register("ConvInteger", build_conv);
    r.register("QLinearConv", build_conv);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_dims_broadcast_in_integer_products() {
        let ((m, n, k), shape, offsets) = plan(&[2, 1, 3, 4], &[5, 4, 6]).unwrap();
        assert_eq!((m, n, k), (3, 6, 4));
        assert_eq!(shape, vec![2, 5, 3, 6]);
        assert_eq!(offsets.len(), 10);
        assert_eq!(offsets[6], (12, 24));
        assert!(plan(&[3, 4], &[5, 6]).is_err());
    }

    #[test]
    fn broadcast_maps_repeat_size_one_dims() {
        let b = Bcast::new(&[2, 3], &[2, 1]).unwrap();
        assert_eq!((0..6).map(|i| b.of(i)).collect::<Vec<_>>(), vec![0, 0, 0, 1, 1, 1]);
        assert!(Bcast::new(&[2, 3], &[3, 1]).is_err());
    }
}
