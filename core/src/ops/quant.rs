//! Quantization ops: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
//! the integer products MatMulInteger and ConvInteger, and their requantizing
//! forms QLinearMatMul and QLinearConv.

use super::conv::{Conv, Window};
use super::linalg::MatMul;
use super::{Fact, InferInputs, Op, OpRegistry, check_inputs};
use crate::dtype::DType;
use crate::error::OpError;
use crate::graph::Node;

/// How a scale (or zero-point) tensor maps onto the elements of the quantized tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScaleLayout {
    /// One value for the whole tensor.
    PerTensor,
    /// A 1-D tensor along `axis`.
    PerAxis {
        /// The axis (non-negative).
        axis: usize,
    },
    /// A tensor of x's rank, one value per `block` consecutive elements along `axis`.
    Blocked {
        /// The axis (non-negative).
        axis: usize,
        /// The block size.
        block: usize,
    },
}

impl ScaleLayout {
    /// The layout of a scale of shape `scale` for an input of shape `x`.
    ///
    /// # Errors
    /// [`OpError::Shape`] when the shapes do not fit the axis and block size.
    pub fn resolve(x: &[usize], scale: &[usize], axis: i64, block: usize) -> Result<Self, OpError> {
        if scale.iter().product::<usize>() == 1 {
            return Ok(ScaleLayout::PerTensor);
        }
        let rank = x.len() as i64;
        let a = if axis < 0 { axis + rank } else { axis };
        if a < 0 || a >= rank {
            return Err(OpError::Shape(format!("axis {axis} is out of range for rank {rank}")));
        }
        let axis = a as usize;
        if block == 0 {
            if scale.len() != 1 || scale[0] != x[axis] {
                return Err(OpError::Shape(format!(
                    "a per-axis scale must be 1-D of length {} (axis {axis} of {x:?}), got {scale:?}",
                    x[axis]
                )));
            }
            return Ok(ScaleLayout::PerAxis { axis });
        }
        let fits = scale.len() == x.len()
            && scale
                .iter()
                .zip(x)
                .enumerate()
                .all(|(d, (&s, &n))| if d == axis { s == n.div_ceil(block) } else { s == n });
        if !fits {
            return Err(OpError::Shape(format!(
                "a blocked scale for {x:?} with block {block} on axis {axis} cannot have shape {scale:?}"
            )));
        }
        Ok(ScaleLayout::Blocked { axis, block })
    }
}

fn check_layout(x: &Fact, s: &Fact, axis: i64, block: usize) -> Result<(), OpError> {
    if let (Some(xd), Some(sd)) = (x.dims(), s.dims()) {
        ScaleLayout::resolve(&xd, &sd, axis, block)?;
    }
    Ok(())
}

/// The element types QuantizeLinear may produce.
pub fn is_quant_type(d: DType) -> bool {
    use DType::*;
    matches!(
        d,
        U8 | I8
            | U16
            | I16
            | U4
            | I4
            | U2
            | I2
            | F8E4M3FN
            | F8E4M3FNUZ
            | F8E5M2
            | F8E5M2FNUZ
            | F4E2M1
            | F6E2M3
            | F6E3M2
    )
}

/// `QuantizeLinear`: `y = saturate(round(x / scale) + zero_point)`.
#[derive(Debug, Clone)]
pub struct QuantizeLinear {
    /// The axis of per-axis and blocked scales (may be negative).
    pub axis: i64,
    /// Saturate float8 outputs instead of producing inf/NaN.
    pub saturate: bool,
    /// Block size along `axis` (0: per-tensor or per-axis).
    pub block_size: usize,
    /// The output type when no zero point gives it.
    pub output_dtype: Option<DType>,
    /// The type `x / scale` is computed in (default: numpy's promotion of x and scale).
    pub precision: Option<DType>,
}

impl QuantizeLinear {
    /// The output dtype given the zero point's, if any.
    ///
    /// # Errors
    /// [`OpError::BadAttribute`] when `output_dtype` disagrees with the zero point or
    /// is not a quantized type.
    pub fn output(&self, zero_point: Option<DType>) -> Result<DType, OpError> {
        let d = match (zero_point, self.output_dtype) {
            (Some(z), Some(o)) if z != o => {
                return Err(OpError::BadAttribute {
                    name: "output_dtype".into(),
                    reason: format!("{o} differs from the zero point's {z}"),
                });
            }
            (Some(z), _) => z,
            (None, o) => o.unwrap_or(DType::U8),
        };
        if !is_quant_type(d) {
            return Err(OpError::BadAttribute {
                name: "output_dtype".into(),
                reason: format!("{d} is not a quantized type"),
            });
        }
        Ok(d)
    }
}

impl Op for QuantizeLinear {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        check_layout(x, inputs.get(1)?, self.axis, self.block_size)?;
        let dtype = self.output(inputs.opt(2).map(|z| z.dtype))?;
        Ok(vec![x.with_dtype(dtype)])
    }
}

/// `DequantizeLinear`: `y = (x - zero_point) * scale`.
#[derive(Debug, Clone)]
pub struct DequantizeLinear {
    /// The axis of per-axis and blocked scales (may be negative).
    pub axis: i64,
    /// Block size along `axis` (0: per-tensor or per-axis).
    pub block_size: usize,
    /// The output type (default: the scale's).
    pub output_dtype: Option<DType>,
}

impl Op for DequantizeLinear {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let (x, s) = (inputs.get(0)?, inputs.get(1)?);
        check_layout(x, s, self.axis, self.block_size)?;
        let dtype = self.output_dtype.unwrap_or(s.dtype);
        if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
            return Err(OpError::BadAttribute {
                name: "output_dtype".into(),
                reason: format!("{dtype} is not float, float16 or bfloat16"),
            });
        }
        Ok(vec![x.with_dtype(dtype)])
    }
}

/// `DynamicQuantizeLinear`: uint8 quantization with a scale and zero point computed
/// from the input's range. Outputs `y`, `y_scale` (scalar float) and `y_zero_point`.
#[derive(Debug, Clone)]
pub struct DynamicQuantizeLinear;

impl Op for DynamicQuantizeLinear {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let x = inputs.get(0)?;
        Ok(vec![x.with_dtype(DType::U8), Fact::known(x.dtype, &[]), Fact::known(DType::U8, &[])])
    }
}

/// `MatMulInteger` and `QLinearMatMul`: a numpy-style product of integers
/// (minus their zero points), as int32 or requantized.
#[derive(Debug, Clone)]
pub struct IntegerMatMul {
    /// Requantize (QLinearMatMul: inputs a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp)
    /// instead of returning int32 (MatMulInteger: inputs a, b, a_zp, b_zp).
    pub requantize: bool,
}

impl IntegerMatMul {
    /// The input slots of A and B.
    pub fn operands(&self) -> (usize, usize) {
        if self.requantize { (0, 3) } else { (0, 1) }
    }
}

fn output_dtype(inputs: &InferInputs<'_>, requantize: bool, x: &Fact) -> DType {
    if requantize { inputs.opt(7).map_or(x.dtype, |z| z.dtype) } else { DType::I32 }
}

impl Op for IntegerMatMul {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let (ia, ib) = self.operands();
        let (a, b) = (inputs.get(ia)?, inputs.get(ib)?);
        let facts = [Some(a.with_dtype(DType::I32)), Some(b.with_dtype(DType::I32))];
        let out = MatMul.infer(&InferInputs::new(&facts))?.remove(0);
        Ok(vec![out.with_dtype(output_dtype(inputs, self.requantize, a))])
    }
}

/// `ConvInteger` and `QLinearConv`: a convolution of integers (minus their zero
/// points), as int32 or requantized.
#[derive(Debug, Clone)]
pub struct IntegerConv {
    /// The convolution's geometry and groups.
    pub conv: Conv,
    /// Requantize (QLinearConv: inputs x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B)
    /// instead of returning int32 (ConvInteger: inputs x, w, x_zp, w_zp).
    pub requantize: bool,
}

impl IntegerConv {
    /// The input slots of X and W.
    pub fn operands(&self) -> (usize, usize) {
        if self.requantize { (0, 3) } else { (0, 1) }
    }
}

impl Op for IntegerConv {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let (ix, iw) = self.operands();
        let (x, w) = (inputs.get(ix)?, inputs.get(iw)?);
        let facts = [Some(x.clone()), Some(w.clone())];
        let out = self.conv.infer(&InferInputs::new(&facts))?.remove(0);
        Ok(vec![out.with_dtype(output_dtype(inputs, self.requantize, x))])
    }
}

fn block_size(n: &Node) -> Result<usize, OpError> {
    let b = n.attrs.int_or("block_size", 0)?;
    usize::try_from(b).map_err(|_| OpError::BadAttribute {
        name: "block_size".into(),
        reason: format!("{b} is negative"),
    })
}

fn dtype_attr(n: &Node, name: &str) -> Result<Option<DType>, OpError> {
    match n.attrs.int(name)? {
        None | Some(0) => Ok(None),
        Some(code) => {
            DType::from_onnx(code as i32).map(Some).ok_or_else(|| OpError::BadAttribute {
                name: name.into(),
                reason: format!("{code} is not a data type"),
            })
        }
    }
}

fn integer_conv(n: &Node, requantize: bool) -> Result<Box<dyn Op>, OpError> {
    let group = n.attrs.int_or("group", 1)?;
    if group < 1 {
        return Err(OpError::BadAttribute { name: "group".into(), reason: format!("{group} < 1") });
    }
    let conv = Conv { window: Window::parse(n)?, group: group as usize };
    Ok(Box::new(IntegerConv { conv, requantize }))
}

/// Registers the quantization ops.
pub fn register_all(r: &mut OpRegistry) {
    r.register("QuantizeLinear", |n| {
        check_inputs(n, 2, 3)?;
        Ok(Box::new(QuantizeLinear {
            axis: n.attrs.int_or("axis", 1)?,
            saturate: n.attrs.flag_or("saturate", true)?,
            block_size: block_size(n)?,
            output_dtype: dtype_attr(n, "output_dtype")?,
            precision: dtype_attr(n, "precision")?,
        }))
    });
    r.register("DequantizeLinear", |n| {
        check_inputs(n, 2, 3)?;
        Ok(Box::new(DequantizeLinear {
            axis: n.attrs.int_or("axis", 1)?,
            block_size: block_size(n)?,
            output_dtype: dtype_attr(n, "output_dtype")?,
        }))
    });
    r.register("DynamicQuantizeLinear", |n| {
        check_inputs(n, 1, 1)?;
        Ok(Box::new(DynamicQuantizeLinear))
    });
    r.register("MatMulInteger", |n| {
        check_inputs(n, 2, 4)?;
        Ok(Box::new(IntegerMatMul { requantize: false }))
    });
    r.register("QLinearMatMul", |n| {
        check_inputs(n, 8, 8)?;
        Ok(Box::new(IntegerMatMul { requantize: true }))
    });
    r.register("ConvInteger", |n| {
        check_inputs(n, 2, 4)?;
        integer_conv(n, false)
    });
    r.register("QLinearConv", |n| {
        check_inputs(n, 8, 9)?;
        integer_conv(n, true)
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_layouts_follow_the_scale_shape() {
        let x = [2, 6];
        assert_eq!(ScaleLayout::resolve(&x, &[], 1, 0).unwrap(), ScaleLayout::PerTensor);
        assert_eq!(ScaleLayout::resolve(&x, &[1], 0, 0).unwrap(), ScaleLayout::PerTensor);
        assert_eq!(ScaleLayout::resolve(&x, &[2], 0, 0).unwrap(), ScaleLayout::PerAxis { axis: 0 });
        assert_eq!(
            ScaleLayout::resolve(&x, &[2, 2], -1, 4).unwrap(),
            ScaleLayout::Blocked { axis: 1, block: 4 }
        );
        assert!(ScaleLayout::resolve(&x, &[6], 0, 0).is_err());
        assert!(ScaleLayout::resolve(&x, &[2, 3], 1, 4).is_err());
    }

    #[test]
    fn the_zero_point_decides_the_quantized_type() {
        let q = QuantizeLinear {
            axis: 1,
            saturate: true,
            block_size: 0,
            output_dtype: None,
            precision: None,
        };
        assert_eq!(q.output(None).unwrap(), DType::U8);
        assert_eq!(q.output(Some(DType::I4)).unwrap(), DType::I4);
        let q = QuantizeLinear { output_dtype: Some(DType::I8), ..q };
        assert!(q.output(Some(DType::U8)).is_err());
        assert!(q.output(None).is_ok());
    }
}
