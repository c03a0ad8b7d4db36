//! Block-quantized weights: `com.microsoft` `MatMulNBits` (`A · dequant(B)ᵀ`)
//! and `GatherBlockQuantized` (`Gather(dequant(data))`). A weight is
//! `(q - zero_point) · scale` with one scale (and zero point) per block of
//! `block_size` consecutive elements along the quantized axis.

use super::common::{bad, float_input, is_half_or_single, positive, same_dtype};
use crate::dtype::DType;
use crate::error::OpError;
use crate::graph::{MICROSOFT_DOMAIN, Node};
use crate::ops::{Fact, InferInputs, Op, OpRegistry, check_inputs};
use crate::shape::{Dim, Shape, normalize_axis};

/// `MatMulNBits`: `Y = A · Wᵀ (+ bias)` with `W` `[N, K]` stored as `bits`-bit
/// integers, `B` uint8 `[N, k_blocks, block_size · bits / 8]` (low bits first,
/// the last block zero-padded), scales `[N, k_blocks]` in A's dtype, zero
/// points packed like B along the blocks (uint8) or unpacked in A's dtype,
/// `2^(bits-1)` when absent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatMulNBits {
    /// The inner dimension.
    pub k: usize,
    /// Output features.
    pub n: usize,
    /// Bits per weight: 2, 4 or 8.
    pub bits: usize,
    /// Weights per block along K.
    pub block_size: usize,
}

impl MatMulNBits {
    /// Blocks per output feature.
    pub fn k_blocks(&self) -> usize {
        self.k.div_ceil(self.block_size)
    }

    /// Bytes of one block of B.
    pub fn blob_size(&self) -> usize {
        self.block_size * self.bits / 8
    }
}

impl MatMulNBits {
    /// The shape a node's `K`, `N`, `bits` and `block_size` give.
    ///
    /// # Errors
    /// [`OpError`] for a missing attribute, bits other than 2, 4 or 8, or
    /// blocks that are not whole bytes.
    pub fn from_attrs(n: &Node) -> Result<Self, OpError> {
        let bits = match n.attrs.int_or("bits", 4)? {
            b @ (2 | 4 | 8) => b as usize,
            b => return Err(bad("bits", format!("{b} is not 2, 4 or 8"))),
        };
        let block_size = positive(n, "block_size")?;
        if block_size * bits % 8 != 0 {
            return Err(bad("block_size", format!("{block_size} blocks of {bits} bits")));
        }
        Ok(MatMulNBits { k: positive(n, "K")?, n: positive(n, "N")?, bits, block_size })
    }

    /// Checks one set of quantized weights of this shape for an A of dtype
    /// `a`: B (uint8) at input `b`, its scales (A's dtype) at `b + 1` and
    /// optional zero points (uint8 or A's dtype) at `b + 2`.
    ///
    /// # Errors
    /// [`OpError::InputDType`] or [`OpError::Shape`] naming the input.
    pub fn check_weights(
        &self,
        inputs: &InferInputs<'_>,
        a: DType,
        b: usize,
    ) -> Result<(), OpError> {
        same_dtype(inputs, b, DType::U8)?;
        same_dtype(inputs, b + 1, a)?;
        if let Some(zp) = inputs.opt(b + 2) {
            if zp.dtype != DType::U8 && zp.dtype != a {
                return Err(OpError::InputDType {
                    index: b + 2,
                    dtype: zp.dtype,
                    expected: format!("uint8 or {a}"),
                });
            }
        }
        if let Some(dims) = inputs.get(b)?.dims() {
            let want = self.n * self.k_blocks() * self.blob_size();
            if dims.iter().product::<usize>() != want || dims.first() != Some(&self.n) {
                return Err(OpError::Shape(format!(
                    "MatMulNBits: B {dims:?} for N {}, K {}, {} bits in blocks of {}",
                    self.n, self.k, self.bits, self.block_size
                )));
            }
        }
        Ok(())
    }

    /// The output's fact for input A's: `[.., N]` from `[.., K]`.
    ///
    /// # Errors
    /// [`OpError::Shape`] for a scalar A or one whose last dim is not K.
    pub fn output(&self, a: &Fact) -> Result<Fact, OpError> {
        let Some(sa) = &a.shape else { return Ok(Fact::unranked(a.dtype)) };
        let Some(last) = sa.0.last() else {
            return Err(OpError::Shape("MatMulNBits: A is a scalar".into()));
        };
        if last.known().is_some_and(|k| k != self.k) {
            return Err(OpError::Shape(format!("MatMulNBits: A {sa:?} for K = {}", self.k)));
        }
        let mut out = sa.0.clone();
        *out.last_mut().expect("checked above") = Dim::Known(self.n);
        Ok(Fact::new(a.dtype, Shape(out)))
    }
}

impl Op for MatMulNBits {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let a = float_input(inputs, 0)?;
        self.check_weights(inputs, a.dtype, 1)?;
        if let Some(g) = inputs.opt(4) {
            if g.dtype != DType::I32 {
                return Err(OpError::InputDType {
                    index: 4,
                    dtype: g.dtype,
                    expected: "int32".into(),
                });
            }
        }
        same_dtype(inputs, 5, a.dtype)?;
        Ok(vec![self.output(a)?])
    }
}

/// `GatherBlockQuantized`: gathers along `gather_axis` from the dequantized
/// `data` (int4/uint4, or uint8 holding `8 / bits` values a byte along the
/// last axis, low bits first). Output dtype: the scales'. Out-of-range
/// indices give zeros; negative ones count from the end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatherBlockQuantized {
    /// The gathered axis (may be negative).
    pub gather_axis: i64,
    /// The axis the blocks run along (may be negative).
    pub quantize_axis: i64,
    /// Elements per block.
    pub block_size: usize,
    /// Bits per value for uint8 data (2, 4 or 8).
    pub bits: usize,
}

impl GatherBlockQuantized {
    /// The logical (unpacked) shape of `data`.
    pub fn logical_shape(&self, dtype: DType, dims: &[usize]) -> Vec<usize> {
        let mut d = dims.to_vec();
        if dtype == DType::U8 {
            if let Some(last) = d.last_mut() {
                *last *= 8 / self.bits;
            }
        }
        d
    }

    /// `(gather_axis, quantize_axis)` made non-negative for a rank.
    ///
    /// # Errors
    /// [`OpError::Shape`] when out of range, or (uint8 data) not the layout
    /// onnxruntime accepts.
    pub fn axes(&self, rank: usize) -> Result<(usize, usize), OpError> {
        let norm = |a: i64, what: &str| {
            normalize_axis(a, rank).ok_or_else(|| {
                OpError::Shape(format!("GatherBlockQuantized: {what} {a} for rank {rank}"))
            })
        };
        Ok((norm(self.gather_axis, "gather_axis")?, norm(self.quantize_axis, "quantize_axis")?))
    }
}

impl Op for GatherBlockQuantized {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let (data, idx, scales) = (inputs.get(0)?, inputs.get(1)?, inputs.get(2)?);
        if !matches!(data.dtype, DType::I4 | DType::U4 | DType::U8) {
            return Err(OpError::InputDType {
                index: 0,
                dtype: data.dtype,
                expected: "int4, uint4 or uint8".into(),
            });
        }
        if !matches!(idx.dtype, DType::I32 | DType::I64) {
            return Err(OpError::InputDType {
                index: 1,
                dtype: idx.dtype,
                expected: "int32 or int64".into(),
            });
        }
        if !is_half_or_single(scales.dtype) {
            return Err(OpError::InputDType {
                index: 2,
                dtype: scales.dtype,
                expected: "float, float16 or bfloat16".into(),
            });
        }
        same_dtype(inputs, 3, data.dtype)?;
        let (Some(sd), Some(si)) = (&data.shape, &idx.shape) else {
            return Ok(vec![Fact::unranked(scales.dtype)]);
        };
        let (g, _) = self.axes(sd.rank())?;
        let mut out = sd.0.clone();
        if data.dtype == DType::U8 {
            let last = out.last_mut().expect("rank checked by axes");
            *last = last.known().map_or(Dim::Unknown, |d| Dim::Known(d * 8 / self.bits));
        }
        out.splice(g..=g, si.0.iter().cloned());
        Ok(vec![Fact::new(scales.dtype, Shape(out))])
    }
}

/// Registers `MatMulNBits` and `GatherBlockQuantized` in `com.microsoft`.
pub fn register_all(r: &mut OpRegistry) {
    r.register_in(MICROSOFT_DOMAIN, "MatMulNBits", |n| {
        check_inputs(n, 3, 6)?;
        Ok(Box::new(MatMulNBits::from_attrs(n)?))
    });
    r.register_in(MICROSOFT_DOMAIN, "GatherBlockQuantized", |n| {
        check_inputs(n, 3, 4)?;
        let bits = n.attrs.int_or("bits", 4)?;
        if !matches!(bits, 2 | 4 | 8) {
            return Err(bad("bits", format!("{bits} is not 2, 4 or 8")));
        }
        let block_size = n.attrs.int_or("block_size", 128)?;
        if block_size < 1 {
            return Err(bad("block_size", format!("{block_size} is not positive")));
        }
        Ok(Box::new(GatherBlockQuantized {
            gather_axis: n.attrs.int_or("gather_axis", 0)?,
            quantize_axis: n.attrs.int_or("quantize_axis", 1)?,
            block_size: block_size as usize,
            bits: bits as usize,
        }))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_block_of_k_is_padded() {
        let op = MatMulNBits { k: 40, n: 8, bits: 4, block_size: 16 };
        assert_eq!((op.k_blocks(), op.blob_size()), (3, 8));
    }

    #[test]
    fn gathered_indices_replace_the_gather_axis_of_the_unpacked_shape() {
        let op = GatherBlockQuantized { gather_axis: 0, quantize_axis: 1, block_size: 16, bits: 4 };
        let facts = [
            Some(Fact::known(DType::U8, &[6, 16])),
            Some(Fact::known(DType::I64, &[2, 1])),
            Some(Fact::known(DType::F16, &[6, 2])),
        ];
        let out = op.infer(&InferInputs::new(&facts)).unwrap();
        assert_eq!(out[0], Fact::known(DType::F16, &[2, 1, 32]));
    }
}
