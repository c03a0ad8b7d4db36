//! `com.microsoft` `MatMulNBits`: `Y = A · Wᵀ (+ bias)` with `W` stored in
//! 2, 4 or 8 bits.
//!
//! When B, the scales and the zero points are initializers (and there is no
//! `g_idx`), the weights stay packed: a few rows of A (a decode step) take a
//! GEMV that dequantizes each row of W into a per-thread buffer and dots it
//! with them; more rows (a prefill) dequantize W 256 rows at a time into a
//! transient tile and run `gemm` on it. So the kernel holds no f32 copy of the
//! weights, and the memory the session reports is what it holds. Otherwise
//! the weight is dequantized whole on every run.

use std::sync::Arc;

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::graph::MICROSOFT_DOMAIN;
use onyx_core::ops::microsoft::quant::MatMulNBits;
use onyx_core::tensor::Tensor;

use super::super::attention::store;
use super::super::{CpuKernel, KernelIo, KernelRegistry, unsupported_dtype};
use super::{kernel_err, load_f32, load_opt, product};
use crate::par::Loop;
use rayon::prelude::*;

/// Zero points: packed `bits`-bit integers along the blocks of each row, or floats.
enum ZeroPoints<'a> {
    Packed(&'a [u8]),
    Float(&'a [f32]),
}

/// The `bits`-bit value `i` of a little-end-first packed byte row.
#[inline]
fn packed(bytes: &[u8], i: usize, bits: usize) -> u8 {
    let bit = i * bits;
    (bytes[bit / 8] >> (bit % 8)) & ((1u16 << bits) - 1) as u8
}

/// The weight `[N, K]` in f32.
///
/// # Errors
/// [`EpError::Kernel`] when an input's size does not fit the attributes or a
/// `g_idx` entry names a block that does not exist.
fn dequantize(
    op: &MatMulNBits,
    b: &[u8],
    scales: &[f32],
    zp: Option<ZeroPoints<'_>>,
    g_idx: Option<&[i32]>,
) -> Result<Vec<f32>, EpError> {
    let (n, k, bits, kb) = (op.n, op.k, op.bits, op.k_blocks());
    let row_bytes = kb * op.blob_size();
    let zp_row = (kb * bits).div_ceil(8);
    let zp_ok = match &zp {
        None => true,
        Some(ZeroPoints::Packed(z)) => z.len() == n * zp_row,
        Some(ZeroPoints::Float(z)) => z.len() == n * kb,
    };
    if b.len() != n * row_bytes
        || scales.len() != n * kb
        || !zp_ok
        || g_idx.is_some_and(|g| g.len() != k)
    {
        return Err(kernel_err(format!(
            "MatMulNBits: B of {} bytes, {} scales, zero points or g_idx do not fit N {n}, K {k}, {bits} bits, blocks of {}",
            b.len(),
            scales.len(),
            op.block_size
        )));
    }
    let block_of = |kk: usize| -> Result<usize, EpError> {
        match g_idx {
            None => Ok(kk / op.block_size),
            Some(g) => usize::try_from(g[kk]).ok().filter(|&blk| blk < kb).ok_or_else(|| {
                kernel_err(format!("MatMulNBits: g_idx {} outside {kb} blocks", g[kk]))
            }),
        }
    };
    let blocks: Vec<usize> = (0..k).map(block_of).collect::<Result<_, _>>()?;
    let default_zp = f32::from(1u8 << (bits - 1));
    let mut w = vec![0f32; n * k];
    for (row, out) in w.chunks_mut(k.max(1)).enumerate().take(n) {
        let bytes = &b[row * row_bytes..(row + 1) * row_bytes];
        for (kk, o) in out.iter_mut().enumerate() {
            let blk = blocks[kk];
            let z = match &zp {
                None => default_zp,
                Some(ZeroPoints::Packed(z)) => f32::from(packed(&z[row * zp_row..], blk, bits)),
                Some(ZeroPoints::Float(z)) => z[row * kb + blk],
            };
            *o = (f32::from(packed(bytes, kk, bits)) - z) * scales[row * kb + blk];
        }
    }
    Ok(w)
}

/// Rows of A up to which a product is a GEMV over the packed weights.
const GEMV_ROWS: usize = 4;
/// Rows of W dequantized at a time for a GEMM.
const TILE: usize = 256;

/// Zero points held by the kernel.
enum OwnedZeroPoints {
    Packed(Vec<u8>),
    Float(Vec<f32>),
}

/// Constant weights kept as the model stores them (validated once).
struct Packed {
    b: Vec<u8>,
    scales: Vec<f32>,
    zp: Option<OwnedZeroPoints>,
}

impl Packed {
    fn new(
        op: &MatMulNBits,
        b: &Tensor,
        scales: &Tensor,
        zp: Option<&Tensor>,
    ) -> Result<Packed, EpError> {
        let err = |e: onyx_core::error::TensorError| kernel_err(e.to_string());
        let (n, kb, bits) = (op.n, op.k_blocks(), op.bits);
        let scales: Vec<f32> =
            scales.to_f64_vec().map_err(err)?.into_iter().map(|v| v as f32).collect();
        let zp = match zp {
            None => None,
            Some(z) if z.dtype() == DType::U8 => {
                Some(OwnedZeroPoints::Packed(z.bytes().map_err(err)?.to_vec()))
            }
            Some(z) => Some(OwnedZeroPoints::Float(
                z.to_f64_vec().map_err(err)?.into_iter().map(|v| v as f32).collect(),
            )),
        };
        let b = b.bytes().map_err(err)?.to_vec();
        let zp_ok = match &zp {
            None => true,
            Some(OwnedZeroPoints::Packed(z)) => z.len() == n * (kb * bits).div_ceil(8),
            Some(OwnedZeroPoints::Float(z)) => z.len() == n * kb,
        };
        if b.len() != n * kb * op.blob_size() || scales.len() != n * kb || !zp_ok {
            return Err(kernel_err(format!(
                "MatMulNBits: B of {} bytes, {} scales or the zero points do not fit N {n}, K {}, {bits} bits, blocks of {}",
                b.len(),
                scales.len(),
                op.k,
                op.block_size
            )));
        }
        Ok(Packed { b, scales, zp })
    }

    /// Row `row` of W (`K` values) into `out`.
    fn row(&self, op: &MatMulNBits, row: usize, out: &mut [f32]) {
        let (k, bits, kb, block) = (op.k, op.bits, op.k_blocks(), op.block_size);
        let row_bytes = kb * op.blob_size();
        let bytes = &self.b[row * row_bytes..(row + 1) * row_bytes];
        let zp_row = (kb * bits).div_ceil(8);
        let default_zp = f32::from(1u8 << (bits - 1));
        for blk in 0..kb {
            let s = self.scales[row * kb + blk];
            let z = match &self.zp {
                None => default_zp,
                Some(OwnedZeroPoints::Packed(z)) => {
                    f32::from(packed(&z[row * zp_row..], blk, bits))
                }
                Some(OwnedZeroPoints::Float(z)) => z[row * kb + blk],
            };
            let (start, end) = (blk * block, ((blk + 1) * block).min(k));
            if bits == 4 {
                for (j, o) in out[start..end].chunks_mut(2).enumerate() {
                    let byte = bytes[(start / 2) + j];
                    o[0] = (f32::from(byte & 15) - z) * s;
                    if let Some(hi) = o.get_mut(1) {
                        *hi = (f32::from(byte >> 4) - z) * s;
                    }
                }
            } else {
                for (kk, o) in out[start..end].iter_mut().enumerate() {
                    *o = (f32::from(packed(bytes, start + kk, bits)) - z) * s;
                }
            }
        }
    }
}

/// The rows of A of a 4-bit GEMV, arranged for the packed weights: per
/// block, the even elements, the odd elements (a byte holds element `2j` in
/// its low nibble and `2j + 1` in its high one) and their sum. Then a block's
/// dot product is `scale · (Σ x·q − zero_point · Σ x)`, and the inner loop
/// is two contiguous multiply-adds of nibbles widened to f32, which the
/// compiler vectorizes.
struct Rows4 {
    m: usize,
    /// `[m][k_blocks][block / 2]` each.
    even: Vec<f32>,
    odd: Vec<f32>,
    /// `[m][k_blocks]`.
    sums: Vec<f32>,
    block: usize,
    k_blocks: usize,
}

impl Rows4 {
    fn new(a: &[f32], m: usize, k: usize, block: usize) -> Rows4 {
        let kb = k.div_ceil(block);
        let half = block / 2;
        let (mut even, mut odd) = (vec![0f32; m * kb * half], vec![0f32; m * kb * half]);
        let mut sums = vec![0f32; m * kb];
        for r in 0..m {
            for (kk, &x) in a[r * k..(r + 1) * k].iter().enumerate() {
                let at = r * kb * half + kk / 2;
                if kk % 2 == 0 {
                    even[at] = x
                } else {
                    odd[at] = x
                }
                sums[r * kb + kk / block] += x;
            }
        }
        Rows4 { m, even, odd, sums, block, k_blocks: kb }
    }

    /// Column `col` of `y` (`out[r]` for each row).
    fn column(&self, p: &Packed, col: usize, out: &mut [f32]) {
        let (kb, half) = (self.k_blocks, self.block / 2);
        let bytes = &p.b[col * kb * half..(col + 1) * kb * half];
        let scales = &p.scales[col * kb..(col + 1) * kb];
        let zp_row = kb.div_ceil(2);
        let zero = |blk: usize| match &p.zp {
            None => 8.0,
            Some(OwnedZeroPoints::Packed(z)) => f32::from(packed(&z[col * zp_row..], blk, 4)),
            Some(OwnedZeroPoints::Float(z)) => z[col * kb + blk],
        };
        for (r, o) in out.iter_mut().enumerate().take(self.m) {
            let span = r * kb * half..(r + 1) * kb * half;
            let (even, odd) = (&self.even[span.clone()], &self.odd[span]);
            let sums = &self.sums[r * kb..(r + 1) * kb];
            let mut total = 0f32;
            let blocks =
                bytes.chunks_exact(half).zip(even.chunks_exact(half)).zip(odd.chunks_exact(half));
            for (blk, ((q, xe), xo)) in blocks.enumerate() {
                let mut acc = [0f32; 8];
                for ((q, e), o) in q.chunks_exact(8).zip(xe.chunks_exact(8)).zip(xo.chunks_exact(8))
                {
                    for j in 0..8 {
                        acc[j] += e[j] * f32::from(q[j] & 15) + o[j] * f32::from(q[j] >> 4);
                    }
                }
                let dot: f32 = acc.iter().sum();
                total += scales[blk] * (dot - zero(blk) * sums[blk]);
            }
            *o = total;
        }
    }
}

pub(super) struct NBitsKernel {
    pub(super) op: MatMulNBits,
    /// The constant weights, still packed.
    packed: Option<Arc<Packed>>,
    /// The input index of B (scales and zero points follow it).
    base: usize,
    /// Whether input 4 may be a `g_idx` (MatMulNBits itself).
    with_g_idx: bool,
}

impl NBitsKernel {
    /// The kernel for `op`, with its weights kept packed where inputs
    /// `base` .. `base + 2` (B, scales, zero points) are constants and
    /// `g_idx` (`with_g_idx`: input 4) is absent.
    ///
    /// # Errors
    /// [`EpError::Kernel`] when constant weights do not fit `op`.
    pub(super) fn new(
        s: &KernelSpec<'_>,
        op: MatMulNBits,
        base: usize,
        with_g_idx: bool,
    ) -> Result<Self, EpError> {
        let value = |i: usize| s.input_values.get(i).and_then(Option::as_ref);
        let given = |i: usize| s.input_dtypes.get(i).is_some_and(Option::is_some);
        let constant = (base..base + 3).all(|i| !given(i) || value(i).is_some());
        let g_idx = with_g_idx && given(4);
        let packed = match (constant && !g_idx, value(base), value(base + 1)) {
            (true, Some(b), Some(scales)) => {
                Some(Arc::new(Packed::new(&op, b, scales, value(base + 2))?))
            }
            _ => None,
        };
        Ok(NBitsKernel { op, packed, base, with_g_idx })
    }

    fn weight(&self, io: &KernelIo) -> Result<Vec<f32>, EpError> {
        let base = self.base;
        let scales = load_f32(io, base + 1)?;
        let zf = match io.input_view(base + 2) {
            Some(v) if v.dtype != DType::U8 => load_opt(io, base + 2)?,
            _ => None,
        };
        let zp = match (&zf, io.input_view(base + 2)) {
            (Some(z), _) => Some(ZeroPoints::Float(z)),
            (None, Some(_)) => Some(ZeroPoints::Packed(io.input::<u8>(base + 2)?)),
            (None, None) => None,
        };
        let g = if self.with_g_idx && io.input_view(4).is_some() {
            Some(io.input::<i32>(4)?)
        } else {
            None
        };
        dequantize(&self.op, io.input::<u8>(base)?, &scales, zp, g)
    }

    /// `a · Wᵀ` for the `m` rows of `a`.
    pub(super) fn project(&self, io: &KernelIo, a: &[f32], m: usize) -> Result<Vec<f32>, EpError> {
        let (n, k) = (self.op.n, self.op.k);
        let mut y = vec![0f32; m * n];
        match &self.packed {
            Some(p) if m <= GEMV_ROWS => self.gemv(p, a, m, &mut y),
            Some(p) => self.tiled(p, a, m, &mut y)?,
            None => product(&mut y, a, &self.weight(io)?, (m, n, k), true, 1.0)?,
        }
        Ok(y)
    }
}

impl NBitsKernel {
    /// `y = a · Wᵀ` for `m ≤ GEMV_ROWS` rows: each column of `y` from one
    /// dequantized row of W, in parallel over the columns.
    fn gemv(&self, p: &Packed, a: &[f32], m: usize, y: &mut [f32]) {
        let (n, k) = (self.op.n, self.op.k);
        let mut cols = vec![0f32; n * m];
        if self.op.bits == 4 && self.op.block_size.is_multiple_of(16) {
            let rows = Rows4::new(a, m, k, self.op.block_size);
            cols.par_chunks_mut(m.max(1)).enumerate().each(|(col, out)| rows.column(p, col, out));
        } else {
            cols.par_chunks_mut(m.max(1)).enumerate().each_init(
                || vec![0f32; k],
                |w, (col, out)| {
                    p.row(&self.op, col, w);
                    for (r, o) in out.iter_mut().enumerate() {
                        let x = &a[r * k..(r + 1) * k];
                        *o = x.iter().zip(w.iter()).map(|(x, w)| x * w).sum();
                    }
                },
            );
        }
        for (col, c) in cols.chunks(m.max(1)).enumerate() {
            for (r, v) in c.iter().enumerate() {
                y[r * n + col] = *v;
            }
        }
    }

    /// `y = a · Wᵀ` through `gemm`, W dequantized `TILE` rows at a time.
    fn tiled(&self, p: &Packed, a: &[f32], m: usize, y: &mut [f32]) -> Result<(), EpError> {
        let (n, k) = (self.op.n, self.op.k);
        let mut w = vec![0f32; TILE.min(n) * k];
        let mut part = vec![0f32; m * TILE.min(n)];
        for c0 in (0..n).step_by(TILE) {
            let cols = TILE.min(n - c0);
            w[..cols * k]
                .par_chunks_mut(k.max(1))
                .enumerate()
                .each(|(i, row)| p.row(&self.op, c0 + i, row));
            product(&mut part, a, &w[..cols * k], (m, cols, k), true, 1.0)?;
            for r in 0..m {
                y[r * n + c0..r * n + c0 + cols].copy_from_slice(&part[r * cols..(r + 1) * cols]);
            }
        }
        Ok(())
    }
}

impl CpuKernel for NBitsKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        let n = self.op.n;
        let a = load_f32(io, 0)?;
        let m = a.len().checked_div(self.op.k).unwrap_or(0);
        let mut y = self.project(io, &a, m)?;
        if let Some(bias) = load_opt(io, 5)? {
            if bias.len() != n {
                return Err(kernel_err(format!("MatMulNBits: bias of {} for N {n}", bias.len())));
            }
            y.chunks_mut(n).for_each(|row| row.iter_mut().zip(&bias).for_each(|(y, b)| *y += b));
        }
        store(io, 0, &y, "MatMulNBits")
    }
}

fn build(s: &KernelSpec<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let dtype = s.input_dtype(0)?;
    if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        return Err(unsupported_dtype("MatMulNBits", dtype));
    }
    let op = s.op_as::<MatMulNBits>()?.clone();
    Ok(Box::new(NBitsKernel::new(s, op, 1, true)?))
}

/// Registers `MatMulNBits` in `com.microsoft`.
pub(super) fn register_all(r: &mut KernelRegistry) {
    r.register_in(MICROSOFT_DOMAIN, "MatMulNBits", build);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_bit_weights_put_the_even_k_in_the_low_nibble() {
        let op = MatMulNBits { k: 3, n: 1, bits: 4, block_size: 16 };
        // Values 1, 2, 3 then padding; default zero point 8, scale 0.5.
        let b = [0x21, 0x03, 0, 0, 0, 0, 0, 0];
        let w = dequantize(&op, &b, &[0.5], None, None).unwrap();
        assert_eq!(w, vec![-3.5, -3.0, -2.5]);
        let w = dequantize(&op, &b, &[0.5], Some(ZeroPoints::Packed(&[0x01])), None).unwrap();
        assert_eq!(w, vec![0.0, 0.5, 1.0]);
        assert!(dequantize(&op, &b[..4], &[0.5], None, None).is_err());
    }

    #[test]
    fn packed_products_equal_the_dequantized_weight_times_a() {
        // N 300 spans two tiles; K 40 ends in a partial block of 16.
        let (n, k) = (300, 40);
        for bits in [2, 4, 8] {
            let op = MatMulNBits { k, n, bits, block_size: 16 };
            let kb = op.k_blocks();
            let bytes: Vec<u8> =
                (0..n * kb * op.blob_size()).map(|i| (i * 97 % 251) as u8).collect();
            let scales: Vec<f32> = (0..n * kb).map(|i| 0.01 + (i % 7) as f32 * 0.003).collect();
            let zp: Vec<u8> =
                (0..n * (kb * bits).div_ceil(8)).map(|i| (i * 31 % 256) as u8).collect();
            let tensor = |v: Vec<u8>| Tensor::from_vec(vec![v.len()], v).unwrap();
            let p = Packed::new(
                &op,
                &tensor(bytes.clone()),
                &Tensor::from_vec(vec![n * kb], scales.clone()).unwrap(),
                Some(&tensor(zp.clone())),
            )
            .unwrap();
            let w = dequantize(&op, &bytes, &scales, Some(ZeroPoints::Packed(&zp)), None).unwrap();
            let kernel = NBitsKernel { op: op.clone(), packed: None, base: 1, with_g_idx: true };
            for m in [1, 3, 6] {
                let a: Vec<f32> = (0..m * k).map(|i| ((i * 13) % 17) as f32 * 0.1 - 0.8).collect();
                let mut want = vec![0f32; m * n];
                product(&mut want, &a, &w, (m, n, k), true, 1.0).unwrap();
                let mut got = vec![0f32; m * n];
                if m <= GEMV_ROWS {
                    kernel.gemv(&p, &a, m, &mut got);
                } else {
                    kernel.tiled(&p, &a, m, &mut got).unwrap();
                }
                let err = got.iter().zip(&want).map(|(g, w)| (g - w).abs()).fold(0f32, f32::max);
                assert!(err < 1e-4, "{bits} bits, {m} rows: {err}");
            }
        }
    }
}
