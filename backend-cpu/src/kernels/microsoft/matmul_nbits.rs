//! `com.microsoft` `MatMulNBits`: the weight is dequantized to f32 `[N, K]`
//! (once, when the model compiles, if B, the scales and the zero points are
//! initializers), then `Y = A · Wᵀ (+ bias)` runs through `gemm`.

use std::sync::Arc;

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::graph::MICROSOFT_DOMAIN;
use onyx_core::ops::microsoft::quant::MatMulNBits;
use onyx_core::tensor::Tensor;

use super::super::attention::store;
use super::super::{CpuKernel, KernelIo, KernelRegistry, unsupported_dtype};
use super::{kernel_err, load_f32, load_opt, product};

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

/// The dequantized weight from host tensors (B, scales, zero points, g_idx).
fn weight_from_tensors(
    op: &MatMulNBits,
    b: &Tensor,
    scales: &Tensor,
    zp: Option<&Tensor>,
    g_idx: Option<&Tensor>,
) -> Result<Vec<f32>, EpError> {
    let err = |e: onyx_core::error::TensorError| kernel_err(e.to_string());
    let scales: Vec<f32> =
        scales.to_f64_vec().map_err(err)?.into_iter().map(|v| v as f32).collect();
    let zf: Option<Vec<f32>>;
    let zp = match zp {
        None => None,
        Some(z) if z.dtype() == DType::U8 => Some(ZeroPoints::Packed(z.bytes().map_err(err)?)),
        Some(z) => {
            zf = Some(z.to_f64_vec().map_err(err)?.into_iter().map(|v| v as f32).collect());
            zf.as_deref().map(ZeroPoints::Float)
        }
    };
    let g: Option<Vec<i32>> = g_idx.map(|g| g.to_vec::<i32>()).transpose().map_err(err)?;
    dequantize(op, b.bytes().map_err(err)?, &scales, zp, g.as_deref())
}

struct NBitsKernel {
    op: MatMulNBits,
    /// The weight `[N, K]`, dequantized when the model compiled.
    weight: Option<Arc<Vec<f32>>>,
}

impl NBitsKernel {
    fn weight(&self, io: &KernelIo) -> Result<Vec<f32>, EpError> {
        let scales = load_f32(io, 2)?;
        let zf = match io.input_view(3) {
            Some(v) if v.dtype != DType::U8 => load_opt(io, 3)?,
            _ => None,
        };
        let zp = match (&zf, io.input_view(3)) {
            (Some(z), _) => Some(ZeroPoints::Float(z)),
            (None, Some(_)) => Some(ZeroPoints::Packed(io.input::<u8>(3)?)),
            (None, None) => None,
        };
        let g = if io.input_view(4).is_some() { Some(io.input::<i32>(4)?) } else { None };
        dequantize(&self.op, io.input::<u8>(1)?, &scales, zp, g)
    }
}

impl CpuKernel for NBitsKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        let (n, k) = (self.op.n, self.op.k);
        let a = load_f32(io, 0)?;
        let m = a.len() / k;
        let fresh;
        let w = match &self.weight {
            Some(w) => w.as_slice(),
            None => {
                fresh = self.weight(io)?;
                &fresh
            }
        };
        let mut y = vec![0f32; m * n];
        product(&mut y, &a, w, (m, n, k), true, 1.0)?;
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
    let value = |i: usize| s.input_values.get(i).and_then(Option::as_ref);
    let given = |i: usize| s.input_dtypes.get(i).is_some_and(Option::is_some);
    let constant = (1..5).all(|i| !given(i) || value(i).is_some());
    let weight = match (constant, value(1), value(2)) {
        (true, Some(b), Some(scales)) => {
            Some(Arc::new(weight_from_tensors(&op, b, scales, value(3), value(4))?))
        }
        _ => None,
    };
    Ok(Box::new(NBitsKernel { op, weight }))
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
}
