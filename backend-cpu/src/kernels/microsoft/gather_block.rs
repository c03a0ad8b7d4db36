//! `com.microsoft` `GatherBlockQuantized`: gathers rows of block-quantized
//! data and dequantizes only those, `(q - zero_point) · scale` in f32,
//! written in the scales' dtype.

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::graph::MICROSOFT_DOMAIN;
use onyx_core::ops::microsoft::quant::GatherBlockQuantized;
use onyx_core::tensor::unpack_int;

use super::super::attention::store;
use super::super::{CpuKernel, KernelIo, KernelRegistry, unsupported_dtype};
use super::{kernel_err, load_f32};

/// Reads quantized values: int4/uint4 tensors (packed over the whole tensor),
/// or uint8 bytes holding `8 / bits` values each along rows of `row` values.
struct Quantized<'a> {
    bytes: &'a [u8],
    dtype: DType,
    bits: usize,
    /// Logical values per row (uint8 packing restarts at each row).
    row: usize,
}

impl Quantized<'_> {
    fn get(&self, i: usize) -> i64 {
        match self.dtype {
            DType::U8 => {
                let per = 8 / self.bits;
                let row_bytes = self.row.div_ceil(per);
                let (r, c) = (i / self.row, i % self.row);
                let byte = self.bytes[r * row_bytes + c / per];
                i64::from((byte >> ((c % per) * self.bits)) & ((1u16 << self.bits) - 1) as u8)
            }
            d => unpack_int(self.bytes, d, i),
        }
    }
}

/// Row-major strides of a shape.
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

struct GbqKernel {
    op: GatherBlockQuantized,
}

impl CpuKernel for GbqKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        let (op, data) = (&self.op, io.in_view(0)?);
        let dtype = data.dtype;
        let shape = op.logical_shape(dtype, &data.shape);
        let rank = shape.len();
        let (ga, qa) = op.axes(rank).map_err(kernel_err)?;
        let mut sshape = shape.clone();
        sshape[qa] = shape[qa].div_ceil(op.block_size);
        if io.in_view(2)?.shape != sshape {
            return Err(kernel_err(format!(
                "GatherBlockQuantized: scales {:?} for data {shape:?} in blocks of {} along axis {qa}",
                io.in_view(2)?.shape,
                op.block_size
            )));
        }
        let scales = load_f32(io, 2)?;
        let bits = if dtype == DType::U8 { op.bits } else { 4 };
        let values =
            Quantized { bytes: io.input_bytes(0)?, dtype, bits, row: *shape.last().unwrap_or(&1) };
        let zp = match io.input_view(3) {
            Some(_) => Some(Quantized {
                bytes: io.input_bytes(3)?,
                dtype,
                bits,
                row: *sshape.last().unwrap_or(&1),
            }),
            None => None,
        };
        if let Some(view) = io.input_view(3) {
            let mut want = sshape.clone();
            if dtype == DType::U8 {
                let last = want.last_mut().expect("rank checked by axes");
                *last = (*last * bits).div_ceil(8);
            }
            if view.shape != want {
                return Err(kernel_err(format!(
                    "GatherBlockQuantized: zero points {:?}, expected {want:?}",
                    view.shape
                )));
            }
        }
        let default_zp = if dtype == DType::U8 { 1i64 << (bits - 1) } else { 0 };
        let idx = io.ints(1)?;
        let (st, sst) = (strides(&shape), strides(&sshape));
        let (outer, axis, inner) = (shape[..ga].iter().product::<usize>(), shape[ga], st[ga]);
        let mut out = vec![0f32; outer * idx.len() * inner];
        for o in 0..outer {
            for (m, &ix) in idx.iter().enumerate() {
                let ix = if ix < 0 { ix + axis as i64 } else { ix };
                let Some(ix) = usize::try_from(ix).ok().filter(|&i| i < axis) else { continue };
                for j in 0..inner {
                    let src = (o * axis + ix) * inner + j;
                    // The scale index: the same coordinates, the quantized axis divided by the block.
                    let mut rest = src;
                    let mut si = 0;
                    for d in 0..rank {
                        let c = rest / st[d];
                        rest %= st[d];
                        si += if d == qa { c / op.block_size } else { c } * sst[d];
                    }
                    let z = zp.as_ref().map_or(default_zp, |z| z.get(si));
                    out[(o * idx.len() + m) * inner + j] =
                        (values.get(src) - z) as f32 * scales[si];
                }
            }
        }
        store(io, 0, &out, "GatherBlockQuantized")
    }
}

fn build(s: &KernelSpec<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let dtype = s.input_dtype(0)?;
    if !matches!(dtype, DType::I4 | DType::U4 | DType::U8) {
        return Err(unsupported_dtype("GatherBlockQuantized", dtype));
    }
    Ok(Box::new(GbqKernel { op: s.op_as::<GatherBlockQuantized>()?.clone() }))
}

/// Registers `GatherBlockQuantized` in `com.microsoft`.
pub(super) fn register_all(r: &mut KernelRegistry) {
    r.register_in(MICROSOFT_DOMAIN, "GatherBlockQuantized", build);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uint8_rows_pack_low_bits_first_and_pad_each_row() {
        // Rows of three 4-bit values: bytes (v0 | v1 << 4), (v2).
        let q = Quantized { bytes: &[0x21, 0x03, 0x54, 0x06], dtype: DType::U8, bits: 4, row: 3 };
        let got: Vec<i64> = (0..6).map(|i| q.get(i)).collect();
        assert_eq!(got, vec![1, 2, 3, 4, 5, 6]);
        assert_eq!(strides(&[2, 3, 4]), vec![12, 4, 1]);
    }
}
